/* fleet.h: this node's gateway links (docs/link-protocol.md): its node name, the peers it dials
 * (--peer/--hub tls://, tcp://, ssh://), the link listeners it accepts on (--listen-link), an
 * ssh-spawned end (--link-stdio), raw Perfetto endpoints named as nodes (--node NAME=ADDR), and
 * routing: the bridge asks the fleet for a connection to node NAME's consumer or producer port.
 *
 * Ownership: tracegated creates one fleet after the gateway core and frees it before. Threading:
 * the gateway's event loop thread, except tg_fleet_status_json (any thread: it returns a copy
 * kept under a mutex). */
#ifndef TRACEGATE_GATEWAY_FLEET_H
#define TRACEGATE_GATEWAY_FLEET_H

#include <stddef.h>
#include <stdint.h>

#include "gw.h"

struct event_base;
struct tg_fleet;

struct tg_fleet_config {
    const char *node_name;              /* this node's name (default: the host name) */
    char **peers;                       /* --peer / --hub URLs: tls://H:P, tcp://H:P, ssh://[U@]H[:P] */
    size_t n_peers;
    char **listen_links;                /* --listen-link URLs: tls://ADDR:PORT, tcp://ADDR:PORT */
    size_t n_listen_links;
    char **raw_nodes;                   /* --node NAME=ADDR: a traced-compatible consumer/producer socket */
    size_t n_raw_nodes;
    int link_stdio;                     /* --link-stdio: one link on stdin/stdout */
    const char *link_token;             /* bearer token presented when dialing */
    const char *peer_ca, *peer_cert, *peer_key; /* TLS when dialing */
    const char *tls_cert, *tls_key, *tls_ca;    /* TLS link listeners (client certificates: tls_ca) */
    unsigned link_roles;                /* roles of a linked node's channels here */
    unsigned link_cert_roles;           /* roles a verified client certificate gets to link (must hold link) */
    uint32_t resume_window_ms;
    uint32_t handshake_timeout_ms;
    uint32_t clock_interval_ms;
    uint32_t ping_interval_ms;
    int64_t test_clock_offset_ns;       /* test only: added to the clock readings this node sends */
    const char *ssh_command;            /* default "ssh -T -o BatchMode=yes" */
    const char *remote_command;         /* default "tracegated" */
    int insecure;
};

/* Starts listeners and dials peers. NULL with a message on a configuration error. */
struct tg_fleet *tg_fleet_new(struct event_base *base, struct tg_gw *gw, const struct tg_fleet_config *cfg, char *err,
                              size_t errlen);
void tg_fleet_free(struct tg_fleet *f);
/* Closes every link with Goodbye (SIGTERM). */
void tg_fleet_drain(struct tg_fleet *f);

/* Takes a connected stream socket (non-blocking) as an accepted link connection, exactly as a
 * plaintext --listen-link does for each client: connection limits, the uid of a loopback peer,
 * then h2c as the HTTP/2 acceptor (no TLS). fd is taken (closed on failure). For tests and fuzz
 * targets that drive a link over a socketpair. Returns 0, or -1 with a message. */
int tg_fleet_accept_link_fd(struct tg_fleet *f, int fd, char *err, size_t errlen);

/* A connected socket to node `node`'s consumer or producer port for client `who`; -1 with a
 * message (unknown node, link down too long). Across a link the channel's local side is then a
 * socketpair (tracectl spans uses this). A raw node is refused: its connections begin with the
 * client's identity, which only tg_fleet_route's callers send (out->first). */
int tg_fleet_connect(void *fleet, const char *node, int producer, const struct tg_gw_client_info *who, char *err,
                     size_t errlen);
/* The router the bridge uses (tg_gw_set_router): as tg_fleet_connect, but a node across a link is
 * reached through an in-process bufferevent pair (out->bev), without a socket hop, and a raw node
 * (--node NAME=ADDR) as an external upstream is (docs/security.md, "Raw nodes"): the owner of a
 * UNIX socket checked, other local users refused on a UNIX socket unless --local-user-roles was
 * given, and on a TCP consumer socket out->first is the client's SetPeerIdentity, which the caller
 * sends first. 0 or -1. */
int tg_fleet_route(void *fleet, const char *node, int producer, const struct tg_gw_client_info *who,
                   struct tg_gw_route *out, char *err, size_t errlen);

/* ADB over links (/adb/NAME): a stream socket to node `node`'s ADB server for `who` (this node's
 * own, or through a link channel), or -1 with a message. The router of the /adb route. */
int tg_fleet_adb_connect(void *fleet, const char *node, const struct tg_gw_client_info *who, char *err, size_t errlen);
/* This node's ADB server, served to linked nodes whose link roles include adb (NULL: none). */
struct tg_addr;
int tg_fleet_set_adb(struct tg_fleet *f, const struct tg_addr *server, const char *text);

/* One node as `tracectl nodes` shows it. */
struct tg_fleet_node {
    char name[64];
    char state[16];      /* "self", "up", "down", "connecting", "raw" */
    char via[64];        /* the link it is reached through ("" = direct) */
    uint32_t machine_id;
    uint64_t rtt_us;
    int64_t clock_offset_ns; /* peer minus us, BOOTTIME */
    int have_offset;
    uint64_t bytes_in, bytes_out;
    size_t channels;
    unsigned resumes;    /* times the link came back within its resume window */
    uint64_t since_unix_s;
    char address[128];
    char version[64];
};
/* Whether node `name` is this node or one the fleet can route to now. */
int tg_fleet_nodes_has(struct tg_fleet *f, const char *name);
/* Fills up to max nodes (this node first); returns how many there are. */
size_t tg_fleet_nodes(struct tg_fleet *f, struct tg_fleet_node *out, size_t max);
/* The clock records of node `name` for a RemoteClockSync (federated traces): up to max records of
 * (peer clocks as sent, our clocks on receipt), each [BOOTTIME, REALTIME, MONOTONIC,
 * MONOTONIC_RAW], as whole rounds only (a PING record then its UPDATE record), and only rounds
 * whose trip time was near the shortest (tg_link_clock_rounds). */
size_t tg_fleet_clock_rounds(struct tg_fleet *f, const char *name, uint64_t (*peer)[4], uint64_t (*mine)[4],
                             size_t max);
/* Machine id of node `name` as stamped in federated traces (0 for this node). */
uint32_t tg_fleet_machine_id(struct tg_fleet *f, const char *name);
/* JSON array of nodes for /api/status; malloc'd. Any thread. */
char *tg_fleet_status_json(struct tg_fleet *f);

#endif
