/* gw_ws_int.h: state shared by the files of the WebSocket front end
 * (gw_ws.c: context and thread; gw_ws_proto.c: protocol callbacks;
 * gw_ws_http.c: HTTP routes; gw_ws_guard.c: limits and deadlines of HTTP
 * connections before they become WebSockets). Internal to gateway/gw_ws_*.c. */
#ifndef TRACEGATE_GATEWAY_GW_WS_INT_H
#define TRACEGATE_GATEWAY_GW_WS_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include <libwebsockets.h>

#include "base/log_sample.h"
#include "gw.h"
#include "gw_ws.h"
#include "gw_ws_handoff.h"
#include "gw_ws_pending.h"

#define TG_WS_LOG "ws"

struct tg_gw_ws {
    struct tg_gw *gw;
    struct event_base *base;
    struct tg_gw_ws_config cfg; /* strings point into the copies below */
    char bind_host[256], cert_file[1024], key_file[1024], ca_file[1024], web_root[1024];
    char **http_hosts; /* copies behind cfg.http_hosts */
    struct tg_addr adb_server; /* copy behind cfg.adb_server */
    char adb_server_text[300], node_name[64];
    struct tg_gw_adb *adb; /* /adb pipes (libevent thread; NULL when /adb is off) */

    struct lws_context *ctx;
    struct lws_vhost *vh;
    void *ssl_ctx; /* the vhost's SSL_CTX (reload loads into it) */
    pthread_t thread;
    int thread_started;
    atomic_int stop;
    int live_wsis; /* lws thread: accepted and adopted wsis not yet freed */
    struct tg_ws_handoff *handoff;
    struct tg_ws_seams *seams; /* /traced and /producer WebSockets' in-memory hand-off (net/ws_seam.h) */

    /* HTTP connections not (yet) WebSockets (gw_ws_guard.c; lws thread) */
    struct tg_ws_pending *pending;
    lws_sorted_usec_list_t pending_sul; /* fires at the earliest deadline */
    int admitted_fd;                    /* accepted by the filter, awaiting its wsi */
    char admitted_source[64];
    int admitted_loopback;
    struct tg_log_sampler refusal_log;  /* refusals and cuts, sampled (lws thread) */
    uint64_t accept_failed_log_us;      /* when "cannot accept" was last logged (lws thread) */
    atomic_size_t pending_count;        /* mirror for tg_gw_ws_http_pending (any thread) */

    /* certificate reload request, done on the lws thread (tg_gw_ws_reload) */
    pthread_mutex_t mu;
    int reload_pending;
    tg_gw_ws_reload_cb reload_done;
    void *reload_arg;
};

/* Per-session data of the "tracegate" protocol: an HTTP response in flight. */
struct tg_ws_pss {
    struct tg_gw_ws *ws;
    unsigned char *body; /* malloc'd body, or NULL when streaming a file */
    size_t body_len, body_off;
    int file_fd;         /* static file being sent (or -1 / 0 when unused) */
    int has_file;
    size_t file_left;
    int head_only;
    /* a /traced or /producer WebSocket waiting to leave the lws thread (gw_ws_native.c): its
     * client info until then (malloc'd; NULL when not waiting) */
    struct tg_gw_client_info *native_info;
};

/* gw_ws_native.c: moving an upgraded /traced or /producer WebSocket off the lws thread. lws thread.
 * tg_gw_ws_native_begin (on ESTABLISHED): when it may go (plain ws:// on its own TCP connection,
 * --ws-data-path native), keeps info in pss and asks for a writeable callback: 1; else 0.
 * tg_gw_ws_native_writeable (the first writeable callback, lws has parsed all it read): takes the
 * socket when nothing of the client's came through lws meanwhile and lws holds nothing unsent:
 * -1 (lws closes its connection, now over a stand-in socket); else falls back to the seam: 0 or -1.
 * tg_gw_ws_native_receive (data through lws while waiting: the client did not wait for the 101):
 * falls back to the seam and hands it the data; returns what the link's receive returns.
 * tg_gw_ws_native_forget: the connection closed while waiting. */
/* Whether this front end moves /traced and /producer WebSockets to the gateway's loop at all (plain
 * ws:// and --ws-data-path native); what /api/status reports. Any thread (configuration only). */
int tg_gw_ws_native_enabled(const struct tg_gw_ws *ws);
int tg_gw_ws_native_begin(struct tg_gw_ws *ws, struct lws *wsi, struct tg_ws_pss *pss,
                          const struct tg_gw_client_info *info);
int tg_gw_ws_native_writeable(struct tg_gw_ws *ws, struct lws *wsi, struct tg_ws_pss *pss);
int tg_gw_ws_native_receive(struct tg_gw_ws *ws, struct lws *wsi, struct tg_ws_pss *pss, const void *in, size_t len);
void tg_gw_ws_native_forget(struct tg_ws_pss *pss);
/* gw_ws_proto.c: a /traced or /producer WebSocket joined to the gateway through the in-memory
 * seam (net/ws_seam.h): 0, or -1 (out of memory; the caller closes it). */
int tg_gw_ws_attach_seam(struct tg_gw_ws *ws, struct lws *wsi, const struct tg_gw_client_info *info);

/* gw_ws_proto.c: the "tracegate" protocol callback (HTTP, upgrades, WebSockets). */
int tg_gw_ws_callback(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in, size_t len);

/* gw_ws.c, called from the protocol callback on the lws thread: a pending
 * certificate reload (EVENT_WAIT_CANCELLED), and the vhost's SSL_CTX while
 * the vhost is created (TLS). */
void tg_gw_ws_do_reload(struct tg_gw_ws *ws);
void tg_gw_ws_capture_ssl_ctx(void *ssl_ctx);

/* gw_ws_guard.c, on the lws thread: admission at accept (returns -1 to
 * refuse: LWS_CALLBACK_FILTER_NETWORK_CONNECTION), the new wsi of an
 * admitted connection (LWS_CALLBACK_SERVER_NEW_CLIENT_INSTANTIATED), a new
 * phase (request headers complete, response progress, kept alive for the
 * next request), and the end of tracking (WebSocket established or closed). */
int tg_gw_ws_guard_accept(struct tg_gw_ws *ws, const struct lws_filter_network_conn_args *a);
void tg_gw_ws_guard_new_wsi(struct tg_gw_ws *ws, struct lws *wsi);
void tg_gw_ws_guard_phase(struct tg_gw_ws *ws, struct lws *wsi, enum tg_ws_pending_phase phase);
void tg_gw_ws_guard_forget(struct tg_gw_ws *ws, struct lws *wsi);
/* n accepts failed for want of descriptors or memory (tg_ws_take_accept_failures): counts them
 * (reason accept_failed), logs it at most once per 5 s, and pauses the lws thread
 * TG_WS_ACCEPT_PAUSE_MS, as lws would otherwise retry the readable listener at once. */
#define TG_WS_ACCEPT_PAUSE_MS 50
void tg_gw_ws_guard_accept_failed(struct tg_gw_ws *ws, unsigned n);
/* Creates the table (at start) and stops its timer (before the context goes). */
int tg_gw_ws_guard_init(struct tg_gw_ws *ws);
void tg_gw_ws_guard_stop(struct tg_gw_ws *ws);
/* Completes an HTTP transaction: lws_http_transaction_completed(), and a
 * kept-alive connection starts a new REQUEST deadline. Returns what
 * lws_http_transaction_completed returned (nonzero: close). */
int tg_gw_ws_http_done(struct tg_gw_ws *ws, struct lws *wsi);

/* gw_ws_proto.c helpers shared with gw_ws_http.c */
/* Printable copy of client-supplied text for logs (at most 120 characters;
 * control characters, quotes and non-ASCII become '?'). */
const char *tg_gw_ws_printable(const char *s, char *out, size_t cap);
/* The verified client certificate's subject as the TLS listener names it (tg_tls_subject_text: one
 * principal per certificate on every transport), or NULL (no TLS, none, not verified). */
const char *tg_gw_ws_cert_subject(struct lws *wsi, char *out, size_t cap);
/* The peer's printable IP (IPv4-mapped addresses as IPv4) and port. */
void tg_gw_ws_peer_of(struct lws *wsi, char *ip, size_t iplen, int *port);
/* The front end's configuration with the gateway's current role defaults
 * (tg_gw_role_defaults: so a SIGHUP applies to new clients). */
void tg_gw_ws_current_cfg(struct tg_gw_ws *ws, struct tg_gw_ws_config *out);

/* gw_ws_http.c: LWS_CALLBACK_HTTP and LWS_CALLBACK_HTTP_WRITEABLE. */
int tg_gw_ws_http_request(struct tg_gw_ws *ws, struct lws *wsi, struct tg_ws_pss *pss, const char *path);
int tg_gw_ws_http_writeable(struct tg_gw_ws *ws, struct lws *wsi, struct tg_ws_pss *pss);
void tg_gw_ws_http_cleanup(struct tg_ws_pss *pss);
/* Answers right away with a short text/plain body (upgrade rejections). */
int tg_gw_ws_http_reply_now(struct lws *wsi, int status, const char *text);
/* The Host check every request and upgrade goes through first: 0 when the
 * Host header is allowed, else -1 after answering 421 (or 400 when it is
 * missing), counting and logging it. */
int tg_gw_ws_check_host(struct tg_gw_ws *ws, struct lws *wsi, const char *what);

#endif
