/* gw_ws.h: HTTP + WebSocket front end of tracegated (libwebsockets on its own
 * thread): /traced and /producer WebSockets (Perfetto UI compatible),
 * /metrics, /healthz, /api/status and the static web UI, over ws:// or wss://.
 *
 * Accepted WebSockets reach the libevent thread as tg_conns through a
 * socketpair hand-off (see docs/gateway.md) and are passed to tg_gw_accept().
 *
 * Threading: start/stop/reload are called on the gateway's libevent thread;
 * everything else runs on the lws thread, which only uses the thread-safe
 * tg_gw_* functions of gw.h. */
#ifndef TRACEGATE_GATEWAY_GW_WS_H
#define TRACEGATE_GATEWAY_GW_WS_H

#include <stddef.h>

struct event_base;
struct tg_gw;
struct tg_gw_ws;

struct tg_gw_ws_config {
    const char *bind_host;    /* "127.0.0.1" by default */
    int port;                 /* 8037 by default */
    int tls;                  /* wss:// and https:// */
    const char *cert_file, *key_file, *ca_file;
    int require_client_cert;  /* mTLS */
    const char *web_root;     /* static files for "/" (NULL = built-in page) */
    int require_token;        /* non-loopback clients must present a token */
    unsigned local_roles;     /* roles of loopback clients without a token */
    size_t max_message;       /* max inbound WS message (default 1 MiB) */
};

struct tg_gw_ws *tg_gw_ws_start(struct tg_gw *gw, struct event_base *base, const struct tg_gw_ws_config *cfg,
                                char *err, size_t errlen);
/* Reloads certificates (new connections use them). Returns 0/-1. */
int tg_gw_ws_reload(struct tg_gw_ws *ws, char *err, size_t errlen);
/* Stops accepting, closes the lws context and joins the thread. */
void tg_gw_ws_stop(struct tg_gw_ws *ws);

#endif
