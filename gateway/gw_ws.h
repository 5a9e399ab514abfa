/* gw_ws.h: HTTP + WebSocket front end of tracegated (libwebsockets on its own
 * thread): /traced and /producer WebSockets (Perfetto UI compatible), /adb
 * (a byte pipe to the ADB server, as Perfetto's websocket_bridge), /metrics,
 * /healthz, /api/status and the static web UI, over ws:// or wss://.
 *
 * Accepted WebSockets reach the libevent thread as tg_conns through a
 * socketpair hand-off (see docs/gateway.md) and are passed to tg_gw_accept();
 * /adb WebSockets go to the ADB pipe (gw_adb.h) instead.
 *
 * Threading: start/stop/reload are called on the gateway's libevent thread;
 * everything else runs on the lws thread, which only uses the thread-safe
 * tg_gw_* functions of gw.h. */
#ifndef TRACEGATE_GATEWAY_GW_WS_H
#define TRACEGATE_GATEWAY_GW_WS_H

#include <stddef.h>
#include <stdint.h>

#include "tracegate/addr.h"

struct event_base;
struct tg_gw;
struct tg_gw_adb;
struct tg_gw_ws;

struct tg_gw_ws_config {
    const char *bind_host;    /* "127.0.0.1" by default */
    int port;                 /* 8037 by default */
    int tls;                  /* wss:// and https:// */
    const char *cert_file, *key_file, *ca_file;
    int require_client_cert;  /* mTLS */
    const char *web_root;     /* static files for "/" (NULL = built-in page) */
    int require_token;        /* non-loopback clients must present a token */
    /* Roles of loopback clients without a token, and of clients with a
     * verified certificate (0 = recorder). The front end reads the current
     * values from tg_gw_role_defaults() for every request (SIGHUP applies
     * them to new clients); what tg_gw_ws_start is given is not used. */
    unsigned local_roles;
    unsigned local_user_roles; /* roles of other local uids (same rule) */
    size_t max_message;       /* max inbound WS message (default 1 MiB) */
    /* Plain ws:// /traced and /producer WebSockets: 0 = once lws has answered the upgrade, the
     * socket moves to the gateway's libevent loop (net/ws_filter.h; docs/gateway.md "Native
     * WebSockets"); 1 = they stay on the lws thread (the in-memory seam). wss:// and /adb always
     * stay. */
    int lws_data_path;
    unsigned cert_roles;
    /* Host names (or address literals) besides loopback names, "localhost"
     * and a non-wildcard bind_host that clients may use in the Host header
     * (DNS rebinding defence); copied. */
    const char *const *http_hosts;
    size_t n_http_hosts;
    /* Limits before a connection is a WebSocket: the absolute deadline for
     * its request headers (and for each step of a response; 0 = 10 s), and
     * how many such connections there may be in total and per non-loopback
     * source address (0 = unlimited). */
    uint32_t handshake_timeout_ms;
    uint32_t max_pending;
    uint32_t max_pending_per_source;
    uint32_t source_prefix6; /* IPv6 sources are /source_prefix6 networks (tg_gw_source_key) */
    /* /metrics and /api/status need a bearer token or a client certificate
     * granting observer, recorder or admin. Always so for a non-loopback
     * bind_host with require_token; this asks for it on any bind. */
    int protect_status;

    /* /adb (gw_adb.h). adb: whether the route exists: AUTO (0) serves it
     * when bind_host is a loopback address and refuses it (404) otherwise.
     * adb_roles: roles any one of which grants /adb (0 = adb and admin).
     * adb_server: the local ADB server (NULL = 127.0.0.1:5037), copied;
     * adb_server_text: how it was configured, for logs and /api/status.
     * node_name: this node's name, so /adb/<it> is the local ADB server too
     * ("" or NULL: only /adb). */
    enum tg_gw_ws_adb { TG_GW_WS_ADB_AUTO = 0, TG_GW_WS_ADB_ON, TG_GW_WS_ADB_OFF } adb;
    unsigned adb_roles;
    const struct tg_addr *adb_server;
    const char *adb_server_text;
    const char *node_name;
};

/* Wire details (see gw_ws_policy.h): tokens come as the subprotocol pair
 * "tracegate", "tracegate.token.<token>" (the server accepts "tracegate") or
 * as ?token=<token>; /traced/<node> sets tg_gw_client_info.node. Accepted
 * WebSockets reach tg_gw_accept() as fd conns with fd passing disabled. */

/* Binds and starts the lws thread. cfg and its strings are copied. Returns
 * NULL with a message in err (e.g. the port is taken). */
struct tg_gw_ws *tg_gw_ws_start(struct tg_gw *gw, struct event_base *base, const struct tg_gw_ws_config *cfg,
                                char *err, size_t errlen);
/* Outcome of a reload: rc 0, or -1 with the reason in err (valid during the call). */
typedef void (*tg_gw_ws_reload_cb)(int rc, const char *err, void *arg);
/* Asks the lws thread to reload certificates, key and CA from the same files
 * (new connections use them; on any error nothing changes) and returns at
 * once: the caller's thread (the libevent loop on SIGHUP) never waits for the
 * lws thread. The lws thread logs the outcome, then calls done (may be NULL)
 * there. A request made while another still waits merges with it, and only
 * the latest done is called. Without TLS, done(0) is called at once on the
 * caller's thread. A request still waiting at tg_gw_ws_stop is dropped. */
void tg_gw_ws_reload(struct tg_gw_ws *ws, tg_gw_ws_reload_cb done, void *arg);
/* HTTP connections that are not (yet) WebSockets, now. Any thread. */
size_t tg_gw_ws_http_pending(struct tg_gw_ws *ws);
/* The /adb pipes (gw_adb.h), NULL when /adb is off: e.g. to route /adb/<node>
 * for other nodes (tg_gw_adb_target_set_router). Owned by the front end;
 * libevent thread. */
struct tg_gw_adb *tg_gw_ws_adb(struct tg_gw_ws *ws);
/* Stops accepting, closes the /adb pipes and the lws context, joins the thread. */
void tg_gw_ws_stop(struct tg_gw_ws *ws);

#endif
