/* span_export.c: span records travel from span_end through a bounded lock-free ring to the flush
 * thread, which renders a batch of NDJSON lines and writes it; nothing on the span_end side ever
 * waits for the file. The ring is kicked every half capacity so a busy process drains it between
 * periodic flushes. */
#include "onepath/span_export.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "onepath/flusher.h"
#include "onepath/jsonbuf.h"
#include "onepath/ndjson_file.h"
#include "onepath/ring.h"
#include "onepath/span_record.h"
#include "tracegate/onepath.h"

#define BATCH_BYTES (256 * 1024)

struct tg_op_span_exporter {
    struct tg_op_ring *ring;
    struct tg_op_flusher fl;
    int fd;
    size_t kick_every;
    struct tg_op_export_stats *st;
    char *service_name, *host_name;
    struct tg_op_jb buf;
    int need_newline; /* a failed write may have left half a line */
    int abandon;      /* stopping and the file took nothing for too long: discard the rest */
};

static void write_batch(struct tg_op_span_exporter *e, uint64_t records)
{
    if (records == 0)
        return;
    if (e->abandon || tg_op_jb_failed(&e->buf)) {
        atomic_fetch_add(&e->st->lost, records);
    } else if (tg_op_file_write(e->fd, e->buf.p, e->buf.len, &e->fl.stop, e->st) == 0) {
        atomic_fetch_add(&e->st->written, records);
    } else {
        atomic_fetch_add(&e->st->lost, records);
        e->need_newline = 1;
        if (tg_op_flusher_stopping(&e->fl))
            e->abandon = 1;
    }
    tg_op_jb_reset(&e->buf);
}

static void flush(void *arg, int final)
{
    struct tg_op_span_exporter *e = arg;
    (void)final; /* the final flush drains the same way: every producer has left by then */
    uint64_t n = 0;
    struct tg_op_span_rec *r;
    while ((r = tg_op_ring_pop(e->ring)) != NULL) {
        if (e->need_newline && n == 0) {
            tg_op_jb_putc(&e->buf, '\n');
            e->need_newline = 0;
        }
        tg_op_rec_json(r, &e->buf, e->service_name, e->host_name);
        tg_op_rec_free(r);
        n++;
        if (e->buf.len >= BATCH_BYTES) {
            write_batch(e, n);
            n = 0;
        }
    }
    write_batch(e, n);
    /* keep a big batch buffer from pinning memory between flushes */
    if (e->buf.cap > 4 * BATCH_BYTES)
        tg_op_jb_free(&e->buf);
}

struct tg_op_span_exporter *tg_op_span_exporter_start(const char *path, size_t ring_capacity, unsigned flush_ms,
                                                      const char *service_name, const char *host_name, int *err)
{
    struct tg_op_span_exporter *e = calloc(1, sizeof *e);
    if (!e) {
        *err = ONEPATH_ERR_NOMEM;
        return NULL;
    }
    e->fd = -1;
    e->st = tg_op_stats(ONEPATH_EXPORT_SPANS);
    tg_op_jb_init(&e->buf);
    e->ring = tg_op_ring_new(ring_capacity);
    e->service_name = strdup(service_name ? service_name : "");
    e->host_name = strdup(host_name ? host_name : "");
    if (!e->ring || !e->service_name || !e->host_name) {
        *err = ONEPATH_ERR_NOMEM;
        goto fail;
    }
    e->kick_every = ring_capacity / 2 ? ring_capacity / 2 : 1;
    e->fd = tg_op_file_open(path);
    if (e->fd < 0) {
        *err = ONEPATH_ERR_IO;
        goto fail;
    }
    if (tg_op_flusher_start(&e->fl, flush_ms, flush, e) != 0) {
        *err = ONEPATH_ERR_NOMEM;
        goto fail;
    }
    atomic_store(&e->st->active, 1);
    return e;
fail:
    if (e->fd >= 0)
        close(e->fd);
    if (e->ring)
        tg_op_ring_free(e->ring);
    free(e->service_name);
    free(e->host_name);
    free(e);
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
    atomic_store(&e->st->active, 0);
    close(e->fd);
    tg_op_ring_free(e->ring);
    tg_op_jb_free(&e->buf);
    free(e->service_name);
    free(e->host_name);
    free(e);
}
