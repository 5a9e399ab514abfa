/* trace_stats.c: TraceStats for a session (GetTraceStats and the trace_stats
 * packet): one BufferStats per buffer from the trace buffers, plus the
 * service-wide producer, data source, session and discard counters and the
 * session's flush counters. */
#include "service/svc.h"

#include "trace_stats.pb-c.h"

#include <stdlib.h>

#define SET(dst, field, v)                                                                                             \
    do {                                                                                                               \
        (dst)->has_##field = 1;                                                                                        \
        (dst)->field = (v);                                                                                            \
    } while (0)

static void fill_buffer_stats(Perfetto__Protos__TraceStats__BufferStats *bs, const struct tg_trace_buffer_stats *st)
{
    perfetto__protos__trace_stats__buffer_stats__init(bs);
    SET(bs, buffer_size, st->buffer_size);
    SET(bs, bytes_written, st->bytes_written);
    SET(bs, bytes_overwritten, st->bytes_overwritten);
    SET(bs, bytes_read, st->bytes_read);
    SET(bs, padding_bytes_written, st->padding_bytes_written);
    SET(bs, padding_bytes_cleared, st->padding_bytes_cleared);
    SET(bs, chunks_written, st->chunks_written);
    SET(bs, chunks_rewritten, st->chunks_rewritten);
    SET(bs, chunks_overwritten, st->chunks_overwritten);
    SET(bs, chunks_discarded, st->chunks_discarded);
    SET(bs, chunks_read, st->chunks_read);
    SET(bs, chunks_committed_out_of_order, st->chunks_committed_out_of_order);
    SET(bs, write_wrap_count, st->write_wrap_count);
    SET(bs, patches_succeeded, st->patches_succeeded);
    SET(bs, patches_failed, st->patches_failed);
    SET(bs, readaheads_succeeded, st->readaheads_succeeded);
    SET(bs, readaheads_failed, st->readaheads_failed);
    SET(bs, abi_violations, st->abi_violations);
    SET(bs, trace_writer_packet_loss, st->trace_writer_packet_loss);
}

uint8_t *tg_svc_trace_stats(tg_svc_session *s, size_t *len)
{
    tg_service *svc = s->svc;
    Perfetto__Protos__TraceStats ts = PERFETTO__PROTOS__TRACE_STATS__INIT;
    Perfetto__Protos__TraceStats__BufferStats *bs = calloc(s->n_buffers ? s->n_buffers : 1, sizeof *bs);
    Perfetto__Protos__TraceStats__BufferStats **bsp = calloc(s->n_buffers ? s->n_buffers : 1, sizeof *bsp);
    if (!bs || !bsp) {
        free(bs);
        free(bsp);
        return NULL;
    }
    for (size_t i = 0; i < s->n_buffers; i++) {
        fill_buffer_stats(&bs[i], tg_trace_buffer_stats(s->buffers[i]->tb));
        bsp[i] = &bs[i];
    }
    ts.n_buffer_stats = s->n_buffers;
    ts.buffer_stats = bsp;
    uint32_t producers = 0, sources = 0, sessions = 0, buffers = 0;
    for (tg_svc_producer *p = svc->producers; p; p = p->next) {
        if (!p->initialized)
            continue;
        producers++;
        for (struct tg_svc_ds_reg *r = p->sources; r; r = r->next)
            sources++;
    }
    for (tg_svc_session *x = svc->sessions; x; x = x->next) {
        sessions++;
        buffers += (uint32_t)x->n_buffers;
    }
    SET(&ts, producers_connected, producers);
    SET(&ts, producers_seen, svc->producers_seen);
    SET(&ts, data_sources_registered, sources);
    SET(&ts, data_sources_seen, svc->data_sources_seen);
    SET(&ts, tracing_sessions, sessions);
    SET(&ts, total_buffers, buffers);
    SET(&ts, chunks_discarded, svc->chunks_discarded);
    SET(&ts, patches_discarded, svc->patches_discarded);
    SET(&ts, invalid_packets, svc->invalid_packets);
    SET(&ts, flushes_requested, s->flushes_requested);
    SET(&ts, flushes_succeeded, s->flushes_succeeded);
    SET(&ts, flushes_failed, s->flushes_failed);
    if (s->final_flush_outcome)
        SET(&ts, final_flush_outcome, s->final_flush_outcome == 1
                                          ? PERFETTO__PROTOS__TRACE_STATS__FINAL_FLUSH_OUTCOME__FINAL_FLUSH_SUCCEEDED
                                          : PERFETTO__PROTOS__TRACE_STATS__FINAL_FLUSH_OUTCOME__FINAL_FLUSH_FAILED);
    size_t n = protobuf_c_message_get_packed_size(&ts.base);
    uint8_t *out = malloc(n ? n : 1);
    if (out)
        protobuf_c_message_pack(&ts.base, out);
    *len = n;
    free(bs);
    free(bsp);
    return out;
}
