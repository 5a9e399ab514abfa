/* span_export.h: the asynchronous NDJSON span exporter: a lock-free ring of finished records
 * drained by its own flush thread, which formats and writes them. push never blocks: a full ring
 * drops the record (counted in the span export statistics). */
#ifndef TG_ONEPATH_SPAN_EXPORT_H
#define TG_ONEPATH_SPAN_EXPORT_H

#include <stddef.h>

struct tg_op_span_exporter;
struct tg_op_span_rec;

/* Opens path and starts the thread. NULL (errno-like *err = ONEPATH_ERR_*) on failure. */
struct tg_op_span_exporter *tg_op_span_exporter_start(const char *path, size_t ring_capacity, unsigned flush_ms,
                                                      const char *service_name, const char *host_name, int *err);
/* Takes ownership of rec: queues it, or frees it and counts a drop when the ring is full. */
void tg_op_span_exporter_push(struct tg_op_span_exporter *e, struct tg_op_span_rec *rec);
/* Final flush, join, close, free. No push may run concurrently or later. */
void tg_op_span_exporter_stop(struct tg_op_span_exporter *e);

#endif
