/* trace_build.c: traces built packet by packet (see trace_build.h). */
#include "trace_build.h"

#include <stdlib.h>

int tb_put_packet(struct tb_trace *b, const Perfetto__Protos__TracePacket *p)
{
    size_t n = perfetto__protos__trace_packet__get_packed_size(p);
    if (b->len + n + 16 > b->cap) {
        size_t cap = (b->len + n + 16) * 2;
        uint8_t *d = realloc(b->data, cap);
        if (!d)
            return -1;
        b->data = d;
        b->cap = cap;
    }
    b->data[b->len++] = 0x0A; /* Trace.packet, length-delimited */
    for (size_t v = n;; v >>= 7) {
        b->data[b->len++] = (uint8_t)((v & 0x7F) | (v >= 0x80 ? 0x80 : 0));
        if (v < 0x80)
            break;
    }
    b->len += perfetto__protos__trace_packet__pack(p, b->data + b->len);
    return 0;
}

int tb_slice_by_iid(struct tb_trace *b, uint32_t seq, uint64_t ts, uint64_t iid, const char *interned, int cleared)
{
    Perfetto__Protos__TracePacket p = PERFETTO__PROTOS__TRACE_PACKET__INIT;
    p.optional_trusted_packet_sequence_id_case =
        PERFETTO__PROTOS__TRACE_PACKET__OPTIONAL_TRUSTED_PACKET_SEQUENCE_ID_TRUSTED_PACKET_SEQUENCE_ID;
    p.trusted_packet_sequence_id = seq;
    p.has_timestamp = 1;
    p.timestamp = ts;
    if (cleared) {
        p.has_sequence_flags = 1;
        p.sequence_flags = PERFETTO__PROTOS__TRACE_PACKET__SEQUENCE_FLAGS__SEQ_INCREMENTAL_STATE_CLEARED;
    }
    Perfetto__Protos__InternedData in = PERFETTO__PROTOS__INTERNED_DATA__INIT;
    Perfetto__Protos__EventName en = PERFETTO__PROTOS__EVENT_NAME__INIT;
    Perfetto__Protos__EventName *ens[1] = {&en};
    if (interned) {
        en.has_iid = 1;
        en.iid = iid;
        en.name = (char *)interned;
        in.n_event_names = 1;
        in.event_names = ens;
        p.interned_data = &in;
    }
    Perfetto__Protos__TrackEvent te = PERFETTO__PROTOS__TRACK_EVENT__INIT;
    te.has_type = 1;
    te.type = PERFETTO__PROTOS__TRACK_EVENT__TYPE__TYPE_SLICE_BEGIN;
    te.name_field_case = PERFETTO__PROTOS__TRACK_EVENT__NAME_FIELD_NAME_IID;
    te.name_iid = iid;
    p.data_case = PERFETTO__PROTOS__TRACE_PACKET__DATA_TRACK_EVENT;
    p.track_event = &te;
    return tb_put_packet(b, &p);
}
