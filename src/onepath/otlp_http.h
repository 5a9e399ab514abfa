/* otlp_http.h: the OTLP/HTTP JSON sender: a bounded queue of request bodies (each one
 * ExportTraceServiceRequest) and its own thread that POSTs them with blocking HTTP/1.1 (one
 * connection per request, Connection: close), retrying transport errors, 408, 429 and 5xx with
 * exponential backoff (Retry-After honoured). The span flush thread enqueues and never waits: a
 * full queue drops the request (counted). The collector's name is looked up on a helper thread
 * (otlp_resolve.h), so a silent resolver holds up shutdown no longer than a silent collector.
 * Statistics: ONEPATH_EXPORT_OTLP_HTTP. */
#ifndef TG_ONEPATH_OTLP_HTTP_H
#define TG_ONEPATH_OTLP_HTTP_H

#include <stddef.h>

#define TG_OP_OTLP_MAX_BACKOFF_MS 5000

struct tg_op_otlp_http_cfg {
    const char *url;       /* http://HOST[:PORT][/PATH]; PORT 80 and PATH /v1/traces by default */
    unsigned queue;        /* requests waiting at most */
    unsigned retries;      /* retries after the first attempt */
    unsigned timeout_ms;   /* per attempt: connect, send and the response head */
    unsigned backoff_ms;   /* first retry delay, doubled per retry up to TG_OP_OTLP_MAX_BACKOFF_MS */
};

struct tg_op_otlp_http;

/* Splits an http:// URL. Returns 0, or -1 for anything else (https, user info, bad port, a
 * host or path that does not fit). host gets the name without brackets. */
int tg_op_otlp_url_parse(const char *url, char *host, size_t host_cap, char *port, size_t port_cap, char *path,
                         size_t path_cap);
/* NULL with *err = ONEPATH_ERR_INVAL (bad URL) or ONEPATH_ERR_NOMEM. Nothing is connected yet. */
struct tg_op_otlp_http *tg_op_otlp_http_start(const struct tg_op_otlp_http_cfg *cfg, int *err);
/* Takes ownership of body (malloc'ed, len bytes, spans spans). Never blocks on the network. */
void tg_op_otlp_http_enqueue(struct tg_op_otlp_http *h, char *body, size_t len, unsigned spans);
/* Delivers what is queued, giving up TG_OP_STOP_STALL_MS after the stop (the rest is lost),
 * joins the thread, frees. NULL is a no-op. */
void tg_op_otlp_http_stop(struct tg_op_otlp_http *h);

#endif
