/* gw.h: the gateway core's contract with its transports (listeners, TLS,
 * WebSocket) and features (SMB bridge, session survival, metrics).
 *
 * A transport accepts a client, completes its own handshake (TLS, HTTP
 * upgrade), decides what the client proved (loopback, client certificate,
 * bearer token) and hands a tg_conn plus a tg_gw_client_info to
 * tg_gw_accept(). From there the core owns the connection.
 *
 * Threading: everything here runs on the gateway's libevent thread, except
 * where a function says otherwise (metrics counters are atomic and may be
 * bumped from any thread; the WebSocket thread never touches a tg_gw). */
#ifndef TRACEGATE_GATEWAY_GW_H
#define TRACEGATE_GATEWAY_GW_H

#include "tracegate/log.h"
#include <stddef.h>
#include <stdio.h>
#include <stdint.h>
#include <sys/types.h>

#include "tracegate/conn.h"

struct event_base;
struct tg_gw;
struct tg_gw_config;

enum tg_gw_transport {
    TG_GW_T_UNIX = 0,
    TG_GW_T_TCP,
    TG_GW_T_TLS,
    TG_GW_T_WS,
    TG_GW_T_WSS,
    TG_GW_T_LINK, /* a channel of a gateway link (docs/link-protocol.md) */
    TG_GW_T_COUNT
};
enum tg_gw_port { TG_GW_PORT_CONSUMER = 0, TG_GW_PORT_PRODUCER = 1 };

/* Role bits. A connection holds a set of roles. */
enum tg_gw_role {
    TG_GW_ROLE_NONE = 0,
    TG_GW_ROLE_OBSERVER = 1 << 0, /* QueryServiceState, QueryCapabilities, GetTraceStats, ObserveEvents */
    TG_GW_ROLE_RECORDER = 1 << 1, /* every ConsumerPort method */
    TG_GW_ROLE_PRODUCER = 1 << 2, /* the ProducerPort */
    TG_GW_ROLE_ADMIN = 1 << 3,    /* everything */
    TG_GW_ROLE_LINK = 1 << 4,     /* may establish a gateway link (what its channels may do is link-roles) */
    TG_GW_ROLE_ADB = 1 << 5,      /* /adb: a byte pipe to the ADB server (a shell on every attached device) */
    TG_GW_ROLE_SPANS = 1 << 6,    /* TracegateFleet.Spans: a node's recent OnePath spans (request paths) */
};

/* How the client proved who it is. */
enum tg_gw_auth_kind { TG_GW_AUTH_NONE = 0, TG_GW_AUTH_LOCAL, TG_GW_AUTH_CERT, TG_GW_AUTH_TOKEN };

struct tg_gw_client_info {
    enum tg_gw_transport transport;
    enum tg_gw_port port;
    char peer[128];      /* printable peer address ("1.2.3.4:5678", "unix(pid=..)") */
    char source[64];     /* peer address without port, for per-source limits */
    int loopback;        /* peer is on loopback or a UNIX socket */
    enum tg_gw_auth_kind auth;
    unsigned roles;      /* TG_GW_ROLE_* granted so far (0 = must authenticate in-band) */
    char principal[160]; /* "uid:N", "token:NAME", "cert:SUBJECT", "anonymous" (gw_identity.h); never a secret */
    int has_uid;         /* the kernel told us the peer's uid (UNIX, loopback TCP/WS) */
    uid_t uid;
    pid_t pid;           /* -1 when unknown */
    char node[64];       /* "/traced/<node>" target, "" = this host */
    char traceparent[56]; /* the client's W3C trace context (WebSocket header or ?traceparent=), "" = none */
    unsigned link_hops;  /* a link channel's client: the links it crossed to get here (0: not from a link) */
    char origin[64];     /* a link channel's client: the node it runs on, as this node verified it (the
                          * link's peer, or a node the peer relays: tg_fleet_accept_channel); "" = here */
};

/* Takes ownership of `down` (even on failure, when it is closed with a
 * logged reason). info is copied. */
void tg_gw_accept(struct tg_gw *gw, tg_conn *down, const struct tg_gw_client_info *info);

/* The tg_conn options transports must create client connections with (max
 * frame, output watermarks, hard limit) so every transport gets the same
 * limits. */
void tg_gw_client_conn_opts(struct tg_gw *gw, struct tg_conn_opts *opts);

/* Routing to other nodes (gateway links): a stream to node `node`'s consumer or
 * producer port for client `who`, either a connected socket (fd >= 0) or an
 * in-process bufferevent on the gateway's base (bev, e.g. one end of a
 * bufferevent pair); exactly one is set and ownership passes to the caller,
 * who sends first_len bytes of first before anything else.
 * Returns 0, or -1 with a message. Set by the fleet; clients whose info.node
 * names another node use it. Called on the gateway's event loop thread. */
struct bufferevent;
struct tg_gw_route {
    int fd;
    struct bufferevent *bev;
    /* an IPC frame (its 4-byte header included) the caller sends first: the client's identity
     * (SetPeerIdentity) for a raw node's TCP consumer socket, as for an external upstream */
    uint8_t first[64];
    size_t first_len; /* 0: nothing */
};
typedef int (*tg_gw_router_fn)(void *ctx, const char *node, int producer, const struct tg_gw_client_info *who,
                               struct tg_gw_route *out, char *err, size_t errlen);
void tg_gw_set_router(struct tg_gw *gw, tg_gw_router_fn fn, void *ctx, const char *node_name);
/* The "nodes" of /api/status: fn(ctx) returns a malloc'd JSON array and may be called from any
 * thread (the HTTP front end's); NULL removes it. */
void tg_gw_set_status_nodes(struct tg_gw *gw, char *(*fn)(void *ctx), void *ctx);
/* More /metrics families: fn(ctx) returns malloc'd Prometheus text (any thread); NULL removes it. */
void tg_gw_set_metrics_extra(struct tg_gw *gw, char *(*fn)(void *ctx), void *ctx);
/* This node's name ("" without links). */
const char *tg_gw_node_name(const struct tg_gw *gw);

/* Role helpers. */
const char *tg_gw_role_name(unsigned role_bit);
/* Parses "observer", "recorder", "producer", "admin" (comma lists allowed);
 * returns the bit set or 0 on error. */
unsigned tg_gw_roles_parse(const char *s);
/* Whether `roles` may call `method` ("EnableTracing", ...) of `service`
 * ("ConsumerPort", "ProducerPort", "RelayPort"). */
int tg_gw_acl_allows(unsigned roles, const char *service, const char *method);

const char *tg_gw_transport_name(enum tg_gw_transport t);

/* ---- safe from ANY thread (the WebSocket thread uses these) ---- */
/* Roles a bearer token grants (0 if unknown); principal receives the token's
 * name. Constant-time compare of SHA-256 digests; reload-safe. */
unsigned tg_gw_auth_token_roles(struct tg_gw *gw, const char *token, char *principal, size_t plen);
/* Whether an Origin header value is on the allow-list. */
int tg_gw_origin_allowed(struct tg_gw *gw, const char *origin);
/* Roles the gateway's configuration gives clients by how they came in,
 * current as of the last SIGHUP (tg_gw_reload); transports read them for
 * each new client, so a reload applies to new clients and never to live
 * ones. */
struct tg_gw_role_defaults {
    unsigned local_roles; /* --local-roles: loopback/UNIX clients without a token */
    unsigned cert_roles;  /* --cert-roles: clients with a verified certificate */
    unsigned local_user_roles; /* --local-user-roles: local uids other than root and ours */
    int local_user_roles_set;  /* --local-user-roles was given explicitly: other local users may be
                                * seen as tracegated's uid by a service behind a UNIX socket */
};
void tg_gw_role_defaults(struct tg_gw *gw, struct tg_gw_role_defaults *out);
/* Whether the upstream service is reachable (WS answers 503 when not). */
int tg_gw_upstream_healthy(struct tg_gw *gw);
/* What a port is bridged to ("embedded service (/tmp/perfetto-consumer)",
 * "unix:/run/perfetto/traced-consumer.sock", ...), or NULL when the port is
 * not served. Stable for the gateway's lifetime. */
const char *tg_gw_port_target(struct tg_gw *gw, enum tg_gw_port port);
/* Prometheus text exposition of every metric; malloc'd, caller frees. */
char *tg_gw_metrics_text(struct tg_gw *gw);
/* Small JSON document for /api/status; malloc'd, caller frees. */
char *tg_gw_status_json(struct tg_gw *gw);
/* Counters bumped by transports. */
void tg_gw_count_auth_failure(struct tg_gw *gw, enum tg_gw_transport t, const char *reason);
void tg_gw_count_rejected(struct tg_gw *gw, const char *reason);
/* Logs a refusal or a failure a peer can cause at will before it is authenticated (refused at
 * accept, a failed TLS handshake): at most 20 such lines a second for the whole gateway, the
 * next line logged saying how many were not (metrics count every one). Event loop thread. */
void tg_gw_log_refusal(struct tg_gw *gw, enum tg_log_level level, const char *component, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#endif
