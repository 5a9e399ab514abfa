/* metrics_export.c: periodic metrics snapshots rendered as NDJSON and written by a flush thread. */
#include "onepath/metrics_export.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "onepath/flusher.h"
#include "onepath/jsonbuf.h"
#include "onepath/metrics.h"
#include "onepath/ndjson_file.h"
#include "tracegate/clock.h"

struct tg_op_metrics_exporter {
    struct tg_op_flusher fl;
    int fd;
    struct tg_op_export_stats *st;
    char *service_name, *host_name;
    struct tg_op_jb buf;
    int need_newline;
    int abandon;
};

static void flush(void *arg, int final)
{
    struct tg_op_metrics_exporter *e = arg;
    (void)final;
    if (e->abandon)
        return;
    uint64_t lines = 0;
    tg_op_jb_reset(&e->buf);
    if (e->need_newline)
        tg_op_jb_putc(&e->buf, '\n');
    tg_op_metrics_ndjson(&e->buf, tg_real_ns(), e->service_name, e->host_name, &lines);
    if (lines == 0)
        return;
    atomic_fetch_add(&e->st->queued, lines);
    if (!tg_op_jb_failed(&e->buf) && tg_op_file_write(e->fd, e->buf.p, e->buf.len, &e->fl.stop, e->st) == 0) {
        atomic_fetch_add(&e->st->written, lines);
        e->need_newline = 0;
    } else {
        atomic_fetch_add(&e->st->lost, lines);
        e->need_newline = 1;
        if (tg_op_flusher_stopping(&e->fl))
            e->abandon = 1;
    }
}

struct tg_op_metrics_exporter *tg_op_metrics_exporter_start(const char *path, unsigned flush_ms,
                                                            const char *service_name, const char *host_name,
                                                            int *err)
{
    struct tg_op_metrics_exporter *e = calloc(1, sizeof *e);
    if (!e) {
        *err = ONEPATH_ERR_NOMEM;
        return NULL;
    }
    e->st = tg_op_stats(ONEPATH_EXPORT_METRICS);
    tg_op_jb_init(&e->buf);
    e->service_name = strdup(service_name ? service_name : "");
    e->host_name = strdup(host_name ? host_name : "");
    e->fd = -1;
    if (!e->service_name || !e->host_name) {
        *err = ONEPATH_ERR_NOMEM;
        goto fail;
    }
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
    free(e->service_name);
    free(e->host_name);
    free(e);
    return NULL;
}

void tg_op_metrics_exporter_stop(struct tg_op_metrics_exporter *e)
{
    if (!e)
        return;
    tg_op_flusher_stop(&e->fl);
    atomic_store(&e->st->active, 0);
    close(e->fd);
    tg_op_jb_free(&e->buf);
    free(e->service_name);
    free(e->host_name);
    free(e);
}
