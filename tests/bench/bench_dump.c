/* bench_dump.c: `tracectl dump` over traces of 10,000 to 1,000,000 packet sequences (each with
 * its own interned event name, every other one clearing its incremental state), as a merged or a
 * hostile trace may hold: the cost per packet must stay flat as sequences grow (the reader indexes
 * sequences and names; it used to scan lists, quadratic in sequences). Prints the curve. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "trace_packet.pb-c.h"
#include "tracectl.h"

struct built {
    uint8_t *data;
    size_t len, cap;
};

static int put_packet(struct built *b, const Perfetto__Protos__TracePacket *p)
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
    b->data[b->len++] = 0x0A; /* Trace.packet */
    for (size_t v = n;; v >>= 7) {
        b->data[b->len++] = (uint8_t)((v & 0x7F) | (v >= 0x80 ? 0x80 : 0));
        if (v < 0x80)
            break;
    }
    b->len += perfetto__protos__trace_packet__pack(p, b->data + b->len);
    return 0;
}

static int build(struct built *b, uint32_t n_seqs)
{
    char name[32];
    for (uint32_t s = 1; s <= n_seqs; s++) {
        Perfetto__Protos__TracePacket p = PERFETTO__PROTOS__TRACE_PACKET__INIT;
        p.optional_trusted_packet_sequence_id_case =
            PERFETTO__PROTOS__TRACE_PACKET__OPTIONAL_TRUSTED_PACKET_SEQUENCE_ID_TRUSTED_PACKET_SEQUENCE_ID;
        p.trusted_packet_sequence_id = s;
        p.has_timestamp = 1;
        p.timestamp = 1000 + s;
        p.has_sequence_flags = s % 2;
        p.sequence_flags = PERFETTO__PROTOS__TRACE_PACKET__SEQUENCE_FLAGS__SEQ_INCREMENTAL_STATE_CLEARED;
        snprintf(name, sizeof name, "n%u", (unsigned)s);
        Perfetto__Protos__EventName en = PERFETTO__PROTOS__EVENT_NAME__INIT;
        en.has_iid = 1;
        en.iid = 1;
        en.name = name;
        Perfetto__Protos__EventName *ens[1] = {&en};
        Perfetto__Protos__InternedData in = PERFETTO__PROTOS__INTERNED_DATA__INIT;
        in.n_event_names = 1;
        in.event_names = ens;
        p.interned_data = &in;
        Perfetto__Protos__TrackEvent te = PERFETTO__PROTOS__TRACK_EVENT__INIT;
        te.has_type = 1;
        te.type = PERFETTO__PROTOS__TRACK_EVENT__TYPE__TYPE_SLICE_BEGIN;
        te.name_field_case = PERFETTO__PROTOS__TRACK_EVENT__NAME_FIELD_NAME_IID;
        te.name_iid = 1;
        p.data_case = PERFETTO__PROTOS__TRACE_PACKET__DATA_TRACK_EVENT;
        p.track_event = &te;
        if (put_packet(b, &p) != 0)
            return -1;
    }
    return 0;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(void)
{
    static const uint32_t sizes[] = {10000, 100000, 1000000};
    static const struct {
        const char *name;
        int flags;
    } modes[] = {{"dump", 0}, {"dump --summary", TC_DUMP_SUMMARY}, {"dump --flows", TC_DUMP_FLOWS}};
    FILE *null = fopen("/dev/null", "w");
    if (!null)
        return 1;
    printf("%-16s %10s %10s %12s\n", "mode", "sequences", "seconds", "ns/packet");
    for (size_t m = 0; m < sizeof modes / sizeof modes[0]; m++)
        for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
            struct built b = {0};
            if (build(&b, sizes[i]) != 0)
                return 1;
            char err[512] = "";
            double best = 1e9;
            for (int rep = 0; rep < 3; rep++) { /* best of 3: the machine is noisy */
                double t0 = now_s();
                if (tc_dump_trace(null, b.data, b.len, modes[m].flags, err, sizeof err) != 0) {
                    fprintf(stderr, "dump failed: %s\n", err);
                    return 1;
                }
                double dt = now_s() - t0;
                if (dt < best)
                    best = dt;
            }
            printf("%-16s %10u %10.3f %12.0f\n", modes[m].name, (unsigned)sizes[i], best, best * 1e9 / sizes[i]);
            free(b.data);
        }
    fclose(null);
    return 0;
}
