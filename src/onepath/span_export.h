/* span_export.h: the asynchronous span exporter: a lock-free ring of finished records drained by
 * its own flush thread, which renders each batch for every configured sink: NDJSON lines, OTLP/JSON
 * lines (one ExportTraceServiceRequest per batch), the OTLP/HTTP sender's queue and the
 * in-memory recent-span store (recent.h). push never
 * blocks: a full ring drops the record (counted in the ONEPATH_EXPORT_SPANS statistics). */
#ifndef TG_ONEPATH_SPAN_EXPORT_H
#define TG_ONEPATH_SPAN_EXPORT_H

#include <stddef.h>

#include "onepath/otlp_http.h"
#include "onepath/resource.h"

struct tg_op_span_exporter;
struct tg_op_span_rec;

struct tg_op_span_sinks {
    const char *ndjson_path;                 /* NULL: none */
    const char *otlp_file;                   /* NULL: none */
    const struct tg_op_otlp_http_cfg *http;  /* NULL: none */
    unsigned batch;                          /* records per OTLP request at most */
    int recent;                              /* also add each NDJSON line to the recent store */
    const struct tg_op_resource *resource;   /* copied */
};

/* Opens the files, starts the sender and the flush thread. NULL (*err = ONEPATH_ERR_*) on
 * failure, with nothing left running. At least one sink must be set. */
struct tg_op_span_exporter *tg_op_span_exporter_start(const struct tg_op_span_sinks *sinks, size_t ring_capacity,
                                                      unsigned flush_ms, int *err);
/* Takes ownership of rec: queues it, or frees it and counts a drop when the ring is full. */
void tg_op_span_exporter_push(struct tg_op_span_exporter *e, struct tg_op_span_rec *rec);
/* Final flush, join, close, stop the sender (which delivers what it can), free. No push may run
 * concurrently or later. */
void tg_op_span_exporter_stop(struct tg_op_span_exporter *e);

#endif
