/* gw_ws_int.h: state shared by the files of the WebSocket front end
 * (gw_ws.c: context and thread; gw_ws_proto.c: protocol callbacks;
 * gw_ws_http.c: HTTP routes). Internal to gateway/gw_ws_*.c. */
#ifndef TRACEGATE_GATEWAY_GW_WS_INT_H
#define TRACEGATE_GATEWAY_GW_WS_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>

#include <libwebsockets.h>

#include "gw.h"
#include "gw_ws.h"
#include "gw_ws_handoff.h"

#define TG_WS_LOG "ws"

struct tg_gw_ws {
    struct tg_gw *gw;
    struct event_base *base;
    struct tg_gw_ws_config cfg; /* strings point into the copies below */
    char bind_host[256], cert_file[1024], key_file[1024], ca_file[1024], web_root[1024];

    struct lws_context *ctx;
    struct lws_vhost *vh;
    void *ssl_ctx; /* the vhost's SSL_CTX (reload loads into it) */
    pthread_t thread;
    int thread_started;
    atomic_int stop;
    int live_wsis; /* lws thread: accepted and adopted wsis not yet freed */
    struct tg_ws_handoff *handoff;

    /* reload request, done on the lws thread */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int reload_pending, reload_done, reload_rc;
    char reload_err[256];
};

/* Per-session data of the "tracegate" protocol: an HTTP response in flight. */
struct tg_ws_pss {
    unsigned char *body; /* malloc'd body, or NULL when streaming a file */
    size_t body_len, body_off;
    int file_fd;         /* static file being sent (or -1 / 0 when unused) */
    int has_file;
    size_t file_left;
    int head_only;
};

/* gw_ws_proto.c: the "tracegate" protocol callback (HTTP, upgrades, WebSockets). */
int tg_gw_ws_callback(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in, size_t len);

/* gw_ws.c, called from the protocol callback on the lws thread: a pending
 * certificate reload (EVENT_WAIT_CANCELLED), and the vhost's SSL_CTX while
 * the vhost is created (TLS). */
void tg_gw_ws_do_reload(struct tg_gw_ws *ws);
void tg_gw_ws_capture_ssl_ctx(void *ssl_ctx);

/* gw_ws_http.c: LWS_CALLBACK_HTTP and LWS_CALLBACK_HTTP_WRITEABLE. */
int tg_gw_ws_http_request(struct tg_gw_ws *ws, struct lws *wsi, struct tg_ws_pss *pss, const char *path);
int tg_gw_ws_http_writeable(struct lws *wsi, struct tg_ws_pss *pss);
void tg_gw_ws_http_cleanup(struct tg_ws_pss *pss);
/* Answers right away with a short text/plain body (upgrade rejections). */
int tg_gw_ws_http_reply_now(struct lws *wsi, int status, const char *text);

#endif
