/* span_export.c: span records travel from span_end through a bounded lock-free ring to the flush
 * thread, which takes them in batches and hands each batch to every sink: NDJSON lines written to
 * a file, one OTLP/JSON request line written to a file, one OTLP/JSON request body queued for the
 * HTTP sender. Nothing on the span_end side ever waits for a file or the network. The ring is
 * kicked every half capacity so a busy process drains it between periodic flushes. */
#include "onepath/span_export.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "onepath/flusher.h"
#include "onepath/jsonbuf.h"
#include "onepath/ndjson_file.h"
#include "onepath/recent.h"
#include "onepath/ring.h"
#include "onepath/span_record.h"
#include "tracegate/onepath.h"

#define NDJSON_BYTES (256 * 1024)

/* A file that receives whole lines: a failed write may leave half a line, so the next write
 * starts with a newline; once the exporter stops and the file takes nothing, the rest is lost. */
struct line_file {
    int fd;
    struct tg_op_export_stats *st;
    int need_newline, abandon;
};

struct tg_op_span_exporter {
    struct tg_op_ring *ring;
    struct tg_op_flusher fl;
    size_t kick_every;
    unsigned batch;
    struct tg_op_span_rec **recs; /* the batch being rendered */
    struct tg_op_export_stats *st; /* ring and NDJSON */
    struct tg_op_resource res;
    struct line_file nd, otlp;     /* fd -1: not configured */
    struct tg_op_otlp_http *http;
    struct tg_op_jb buf;
    int recent;                    /* lines also go to the recent store */
};

static void write_lines(struct tg_op_span_exporter *e, struct line_file *f, uint64_t records)
{
    if (records == 0)
        return;
    if (f->abandon || tg_op_jb_failed(&e->buf)) {
        atomic_fetch_add(&f->st->lost, records);
    } else if (tg_op_file_write(f->fd, e->buf.p, e->buf.len, &e->fl.stop, f->st) == 0) {
        atomic_fetch_add(&f->st->written, records);
    } else {
        atomic_fetch_add(&f->st->lost, records);
        f->need_newline = 1;
        if (tg_op_flusher_stopping(&e->fl))
            f->abandon = 1;
    }
    tg_op_jb_reset(&e->buf);
}

static void start_lines(struct tg_op_span_exporter *e, struct line_file *f)
{
    tg_op_jb_reset(&e->buf);
    if (f->need_newline) {
        tg_op_jb_putc(&e->buf, '\n');
        f->need_newline = 0;
    }
}

/* One ExportTraceServiceRequest for the batch (OTLP JSON encoding). */
static void render_otlp(struct tg_op_span_exporter *e, size_t n)
{
    struct tg_op_jb *b = &e->buf;
    tg_op_jb_puts(b, "{\"resourceSpans\":[{\"resource\":{\"attributes\":");
    tg_op_jb_puts(b, e->res.otlp);
    tg_op_jb_puts(b, "},\"scopeSpans\":[{\"scope\":{\"name\":\"tracegate.onepath\",\"version\":\"" PACKAGE_VERSION
                     "\"},\"spans\":[");
    for (size_t i = 0; i < n; i++) {
        if (i)
            tg_op_jb_putc(b, ',');
        tg_op_rec_otlp(e->recs[i], b);
    }
    tg_op_jb_puts(b, "]}]}]}");
}

static void sink_batch(struct tg_op_span_exporter *e, size_t n)
{
    if (e->nd.fd >= 0) {
        start_lines(e, &e->nd);
        size_t done = 0;
        for (size_t i = 0; i < n; i++) {
            size_t at = e->buf.len;
            tg_op_rec_json(e->recs[i], &e->buf, e->res.json);
            if (e->recent && !tg_op_jb_failed(&e->buf))
                tg_op_recent_add(e->buf.p + at, e->buf.len - at);
            if (e->buf.len >= NDJSON_BYTES) {
                write_lines(e, &e->nd, i + 1 - done);
                done = i + 1;
            }
        }
        write_lines(e, &e->nd, n - done);
    } else if (e->recent) {
        for (size_t i = 0; i < n; i++) {
            tg_op_jb_reset(&e->buf);
            tg_op_rec_json(e->recs[i], &e->buf, e->res.json);
            if (!tg_op_jb_failed(&e->buf))
                tg_op_recent_add(e->buf.p, e->buf.len);
        }
        tg_op_jb_reset(&e->buf);
    }
    if (e->otlp.fd >= 0) {
        atomic_fetch_add(&e->otlp.st->queued, n);
        start_lines(e, &e->otlp);
        render_otlp(e, n);
        tg_op_jb_putc(&e->buf, '\n');
        write_lines(e, &e->otlp, n);
    }
    if (e->http) {
        tg_op_jb_reset(&e->buf);
        render_otlp(e, n);
        if (tg_op_jb_failed(&e->buf)) {
            atomic_fetch_add(&tg_op_stats(ONEPATH_EXPORT_OTLP_HTTP)->lost, n);
        } else {
            /* the sender takes the buffer's memory; the next batch allocates afresh */
            char *body = e->buf.p;
            size_t len = e->buf.len;
            tg_op_jb_init(&e->buf);
            tg_op_otlp_http_enqueue(e->http, body, len, (unsigned)n);
        }
    }
}

static void flush(void *arg, int final)
{
    struct tg_op_span_exporter *e = arg;
    (void)final; /* the final flush drains the same way: every producer has left by then */
    for (;;) {
        size_t n = 0;
        struct tg_op_span_rec *r;
        while (n < e->batch && (r = tg_op_ring_pop(e->ring)) != NULL)
            e->recs[n++] = r;
        if (n == 0)
            break;
        sink_batch(e, n);
        for (size_t i = 0; i < n; i++)
            tg_op_rec_free(e->recs[i]);
    }
    /* keep a big batch buffer from pinning memory between flushes */
    if (e->buf.cap > 4 * NDJSON_BYTES)
        tg_op_jb_free(&e->buf);
}

static int open_lines(struct line_file *f, const char *path, int kind)
{
    f->st = tg_op_stats(kind);
    f->fd = -1;
    if (!path)
        return 0;
    f->fd = tg_op_file_open(path);
    return f->fd < 0 ? -1 : 0;
}

static void free_exporter(struct tg_op_span_exporter *e)
{
    if (e->nd.fd >= 0)
        close(e->nd.fd);
    if (e->otlp.fd >= 0)
        close(e->otlp.fd);
    if (e->ring)
        tg_op_ring_free(e->ring);
    tg_op_resource_free(&e->res);
    tg_op_jb_free(&e->buf);
    free(e->recs);
    free(e);
}

struct tg_op_span_exporter *tg_op_span_exporter_start(const struct tg_op_span_sinks *s, size_t ring_capacity,
                                                      unsigned flush_ms, int *err)
{
    struct tg_op_span_exporter *e = calloc(1, sizeof *e);
    if (!e) {
        *err = ONEPATH_ERR_NOMEM;
        return NULL;
    }
    e->nd.fd = e->otlp.fd = -1;
    e->st = tg_op_stats(ONEPATH_EXPORT_SPANS);
    tg_op_jb_init(&e->buf);
    e->batch = s->batch ? s->batch : 1;
    e->recent = s->recent;
    e->ring = tg_op_ring_new(ring_capacity);
    e->recs = calloc(e->batch, sizeof *e->recs);
    e->res.json = strdup(s->resource->json);
    e->res.otlp = strdup(s->resource->otlp);
    if (!e->ring || !e->recs || !e->res.json || !e->res.otlp) {
        *err = ONEPATH_ERR_NOMEM;
        goto fail;
    }
    e->kick_every = ring_capacity / 2 ? ring_capacity / 2 : 1;
    if (open_lines(&e->nd, s->ndjson_path, ONEPATH_EXPORT_SPANS) != 0 ||
        open_lines(&e->otlp, s->otlp_file, ONEPATH_EXPORT_OTLP_FILE) != 0) {
        *err = ONEPATH_ERR_IO;
        goto fail;
    }
    if (s->http && !(e->http = tg_op_otlp_http_start(s->http, err)))
        goto fail;
    if (tg_op_flusher_start(&e->fl, flush_ms, flush, e) != 0) {
        *err = ONEPATH_ERR_NOMEM;
        tg_op_otlp_http_stop(e->http);
        goto fail;
    }
    atomic_store(&e->st->active, 1);
    if (e->otlp.fd >= 0)
        atomic_store(&e->otlp.st->active, 1);
    return e;
fail:
    free_exporter(e);
    return NULL;
}

void tg_op_span_exporter_push(struct tg_op_span_exporter *e, struct tg_op_span_rec *rec)
{
    size_t pos;
    if (!tg_op_ring_push(e->ring, rec, &pos)) {
        tg_op_rec_free(rec);
        atomic_fetch_add_explicit(&e->st->dropped, 1, memory_order_relaxed);
        return;
    }
    atomic_fetch_add_explicit(&e->st->queued, 1, memory_order_relaxed);
    if ((pos + 1) % e->kick_every == 0)
        tg_op_flusher_kick(&e->fl);
}

void tg_op_span_exporter_stop(struct tg_op_span_exporter *e)
{
    if (!e)
        return;
    tg_op_flusher_stop(&e->fl);
    /* records left after an abandoned final write are still in the ring: count and free them */
    struct tg_op_span_rec *r;
    while ((r = tg_op_ring_pop(e->ring)) != NULL) {
        tg_op_rec_free(r);
        atomic_fetch_add(&e->st->lost, 1);
    }
    tg_op_otlp_http_stop(e->http);
    atomic_store(&e->st->active, 0);
    atomic_store(&tg_op_stats(ONEPATH_EXPORT_OTLP_FILE)->active, 0);
    free_exporter(e);
}
