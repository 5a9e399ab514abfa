/* runtime.h: OnePath's process-wide state: the flags every fast path branches on, the current
 * generation (epoch), lazy init, head sampling and the hand-off of finished span records to the
 * exporter. The flags are atomics read with relaxed loads; init/shutdown change them under one
 * mutex. */
#ifndef TG_ONEPATH_RUNTIME_H
#define TG_ONEPATH_RUNTIME_H

#include <stdatomic.h>
#include <stdint.h>

struct tg_op_span_rec;

extern atomic_int tg_op_g_trace_on;     /* tracing enabled and running */
extern atomic_int tg_op_g_metrics_on;   /* metrics enabled and running */
extern atomic_int tg_op_g_auto_inject;  /* ONEPATH_TRACE_AUTO_INJECT */
extern atomic_int tg_op_g_recording;    /* a span exporter exists: sampled spans get records */
extern atomic_uint tg_op_g_epoch;       /* bumped by every init */
extern atomic_int tg_op_g_up;           /* initialised (whatever is enabled) */

/* Initialises from the environment if OnePath is not running and no lazy attempt failed since
 * the last shutdown. One atomic load when running. Called by span_start and the send/forward/
 * receive helpers (not by metric registration, which returns NULL until an init). */
void tg_op_lazy_init(void);
/* Head sampling of a new trace: 1 if sampled at the configured ratio. Decided from the trace id
 * (its low 63 bits against ratio * 2^63), so it is uniform over random ids and repeatable. */
int tg_op_sample_trace(const uint8_t trace_id[16]);
/* Takes ownership of a finished record: queued for export when it belongs to the running
 * generation's exporter, freed otherwise. Never blocks. */
void tg_op_export_record(struct tg_op_span_rec *rec);

#endif
