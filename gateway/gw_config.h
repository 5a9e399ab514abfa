/* gw_config.h: tracegated's configuration: one option table drives the
 * command line (--name value), the config file (`name = value` lines) and
 * the usage text, so every option exists in both forms with one spelling.
 *
 * Order: --config FILE is read first, then the other flags are applied on
 * top (scalars override; repeatable options such as --listen and
 * --allow-origin add to the file's). tg_gw_config_validate() checks
 * everything --check-config promises: syntax, limits, the token file, TLS
 * files, addresses, and the security rule (a non-loopback listener needs
 * TLS plus client certificates or tokens, unless --insecure).
 *
 * Ownership: a tg_gw_config owns all its strings; tg_gw_config_free()
 * releases them. Single-threaded (startup and SIGHUP on the main loop). */
#ifndef TRACEGATE_GATEWAY_GW_CONFIG_H
#define TRACEGATE_GATEWAY_GW_CONFIG_H

#include <stddef.h>
#include <stdio.h>

#include "gw.h"
#include "gw_identity.h"
#include "gw_limits.h"
#include "net/tls.h"
#include "tracegate/addr.h"

enum tg_gw_listen_kind { TG_GW_L_UNIX = 0, TG_GW_L_TCP, TG_GW_L_TLS };

/* Who must prove what on a listener (`?auth=`). */
enum tg_gw_listen_auth {
    TG_GW_LAUTH_DEFAULT = 0, /* local for loopback binds, token (or cert on TLS) otherwise */
    TG_GW_LAUTH_LOCAL,       /* loopback/UNIX peers get the local roles; others must authenticate */
    TG_GW_LAUTH_TOKEN,       /* every client must Authenticate in-band (or present a client cert) */
    TG_GW_LAUTH_NONE,        /* every client gets the listener's roles: needs --insecure off loopback */
};

struct tg_gw_listen_spec {
    char text[600];                /* as given, for messages */
    enum tg_gw_port port;          /* consumer= or producer= */
    enum tg_gw_listen_kind kind;
    char address[512];             /* Perfetto-style address for tg_addr_parse */
    enum tg_gw_listen_auth auth;
    unsigned roles;                /* ?roles=: roles of clients admitted without a token (0 = local-roles) */
    char node[64];                 /* ?node=: clients are routed to this node (export-node) */
    uid_t uids[TG_GW_MAX_UIDS];    /* ?uids=: the only local uids admitted without a token */
    size_t n_uids;                 /* 0 = every local uid (abstract sockets: root and our own uid) */
    unsigned max_conns;            /* ?max-connections= (0 = only the global limits) */
    unsigned mode;                 /* ?mode=: permissions of a UNIX socket file (0 = 0600) */
    char cert[256], key[256], ca[256]; /* ?cert= ?key= ?ca= (TLS; "" = the global --tls-*) */
    /* filled by tg_gw_config_validate */
    struct tg_addr addr;
    int loopback;
};

struct tg_gw_config {
    char *config_file;

    /* embedded service (when no --upstream-*) */
    char *producer_socks, *consumer_socks;
    unsigned producer_mode, consumer_mode;
    size_t max_buffer_memory; /* 0 = the service's default (half the machine's memory) */

    /* upstream: NULL = embedded service (or an already running traced) */
    char *upstream_consumer, *upstream_producer;
    int auto_bridge; /* the upstreams are Perfetto's default sockets, found live (not named by the operator) */
    uint32_t probe_interval_ms;

    struct tg_gw_listen_spec *listen;
    size_t n_listen;

    /* HTTP/WebSocket front end */
    char *http;     /* "127.0.0.1:8037" */
    int no_http;
    int http_tls;
    char *web_root;
    size_t ws_max_message;
    int ws_lws_data_path; /* --ws-data-path lws: plain WebSockets stay on the lws thread */
    char **allow_origins;
    size_t n_allow_origins;
    char **http_hosts;      /* Host names the front end answers to, besides loopback names */
    size_t n_http_hosts;
    uint32_t http_max_pending;            /* HTTP connections not (yet) WebSockets; 0 = unlimited */
    uint32_t http_max_pending_per_source; /* ... per non-loopback source address; 0 = unlimited */
    /* /adb (gw_adb.h): 0 auto (loopback --http only), 1 on, -1 off; the ADB server (adb-server, else
     * $ADB_SERVER_SOCKET, else tcp:127.0.0.1:5037); the roles that grant it (0 = adb,admin) */
    int http_adb;
    char *adb_server;
    char *adb_node;                /* plain /adb goes to this node ("" / NULL: this one) */
    unsigned adb_roles;
    /* filled by tg_gw_config_validate when /adb is served */
    int adb_enabled;
    struct tg_addr adb_addr;
    char adb_server_text[600]; /* "tcp:127.0.0.1:5037 (ADB_SERVER_SOCKET)" */

    /* authentication */
    char *token_file;
    unsigned local_roles, cert_roles;
    unsigned local_user_roles;     /* local uids other than root and ours */
    int local_user_roles_set;      /* given explicitly (else bridge mode to UNIX turns it off) */
    int insecure;
    char *tls_cert, *tls_key, *tls_ca;
    int tls_require_client_cert;
    enum tg_tls_path tls_path; /* net/tls.h: TLS data path (default auto) */

    struct tg_gw_limits limits;
    uint32_t resume_window_ms; /* session survival (gw_resume.c): 0 = off */
    uint32_t max_kept_per_principal; /* 0 = gw_resume's default */
    size_t resume_memory;            /* all sessions' resume buffers; 0 = gw_resume's default */

    /* gateway links (fleet.h) */
    char *node_name;
    char **peers, **listen_links, **raw_nodes;
    size_t n_peers, n_listen_links, n_raw_nodes;
    int link_stdio;
    char *link_token_file, *peer_ca, *peer_cert, *peer_key, *ssh_command, *remote_command;
    unsigned link_roles, link_cert_roles;
    uint32_t link_resume_window_ms;
    int64_t test_clock_offset_ns;
    /* OnePath span export to OpenTelemetry (gw_onepath.c); NULL = the ONEPATH_TRACE_OTLP_* env */
    char *otlp_file, *otlp_http;

    int log_level;  /* enum tg_log_level */
    int log_format; /* enum tg_log_format */
    int syslog;
};

/* Command-line-only actions. */
struct tg_gw_cli {
    int help, version, check_config, hash_token, gen_token;
};

void tg_gw_config_init(struct tg_gw_config *c);
void tg_gw_config_free(struct tg_gw_config *c);

/* Sets one option by its long name (no leading "--"); value is NULL for
 * flags given on the command line. Returns 0 or -1 with a message. */
int tg_gw_config_set(struct tg_gw_config *c, const char *name, const char *value, char *err, size_t errlen);
/* Parses a config file's text ("NAME:LINE: problem" on error). */
int tg_gw_config_parse_text(struct tg_gw_config *c, const char *text, size_t len, const char *name, char *err,
                            size_t errlen);
int tg_gw_config_load_file(struct tg_gw_config *c, const char *path, char *err, size_t errlen);
/* Parses argv (loading --config first). Returns 0, or -1 with a message. */
int tg_gw_config_parse_args(struct tg_gw_config *c, int argc, char **argv, struct tg_gw_cli *cli, char *err,
                            size_t errlen);
/* Semantic checks; resolves listener addresses. Returns 0 or -1. */
int tg_gw_config_validate(struct tg_gw_config *c, char *err, size_t errlen);

/* "consumer=tcp://127.0.0.1:7001?auth=token&roles=observer". */
int tg_gw_listen_parse(const char *s, struct tg_gw_listen_spec *out, char *err, size_t errlen);
const char *tg_gw_listen_kind_name(enum tg_gw_listen_kind k);

void tg_gw_config_usage(FILE *out);

#endif
