/* fuzz_trace_stitch.c: what tracectl does with a trace file and span files it did not write
 * (`tracectl dump`, `tracectl merge TRACE SPANS...`): a trace from a device or a colleague and
 * NDJSON spans from anyone's app are untrusted input.
 *
 * Input: the trace's bytes, then optionally the line "\n#spans\n" and NDJSON span records.
 * Runs the dump (all three modes) over the trace, and the stitching: clocks read from the trace,
 * spans loaded line by line, packets emitted. Invariants: no crash, leak or UBSan report; the dump
 * answers 0 or 1; every stitched packet decodes as a TracePacket and carries a sequence id none
 * of the trace's own packets (as protobuf-c decodes them) uses. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "span_load.h"
#include "span_stitch.h"
#include "trace_clocks.h"
#include "trace_file.h"
#include "trace_packet.pb-c.h"
#include "tracectl.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define SPANS_MARK "\n#spans\n"

static int has_seq(const Perfetto__Protos__TracePacket *p)
{
    return p->optional_trusted_packet_sequence_id_case ==
           PERFETTO__PROTOS__TRACE_PACKET__OPTIONAL_TRUSTED_PACKET_SEQUENCE_ID_TRUSTED_PACKET_SEQUENCE_ID;
}

struct emitted {
    uint32_t *used; /* sequence ids of the trace's packets */
    size_t n_used;
};

/* The sequence ids the trace's packets carry, where a packet decodes. */
static void collect_ids(const uint8_t *trace, size_t len, struct emitted *e)
{
    struct tc_trace_reader r;
    const uint8_t *pkt;
    size_t pl, off;
    char err[128];
    tc_trace_reader_init(&r, trace, len);
    while (tc_trace_reader_next(&r, &pkt, &pl, &off, err, sizeof err) == 1) {
        Perfetto__Protos__TracePacket *p = perfetto__protos__trace_packet__unpack(NULL, pl, pkt);
        if (!p)
            continue;
        if (has_seq(p)) {
            uint32_t *n = realloc(e->used, (e->n_used + 1) * sizeof *n);
            if (n) {
                e->used = n;
                e->used[e->n_used++] = p->trusted_packet_sequence_id;
            }
        }
        perfetto__protos__trace_packet__free_unpacked(p, NULL);
    }
}

static int check_packet(void *arg, const uint8_t *pkt, size_t len)
{
    const struct emitted *e = arg;
    Perfetto__Protos__TracePacket *p = perfetto__protos__trace_packet__unpack(NULL, len, pkt);
    if (!p)
        __builtin_trap(); /* the stitcher wrote bytes no reader can decode */
    for (size_t i = 0; has_seq(p) && i < e->n_used; i++)
        if (e->used[i] == p->trusted_packet_sequence_id)
            __builtin_trap(); /* a stitched packet joined one of the trace's own sequences */
    perfetto__protos__trace_packet__free_unpacked(p, NULL);
    return 0;
}

static void dump_all_modes(const uint8_t *trace, size_t len)
{
    FILE *null = fopen("/dev/null", "w");
    if (!null)
        return;
    static const int modes[] = {0, TC_DUMP_RAW, TC_DUMP_SUMMARY, TC_DUMP_FLOWS, TC_DUMP_FLOWS | TC_DUMP_RAW};
    for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++) {
        char err[256];
        int rc = tc_dump_trace(null, trace, len, modes[i], err, sizeof err);
        if (rc != 0 && rc != 1)
            __builtin_trap();
    }
    fclose(null);
}

static void stitch(const uint8_t *trace, size_t len, const uint8_t *spans, size_t spans_len)
{
    struct tc_trace_clocks clocks;
    memset(&clocks, 0, sizeof clocks);
    char err[256];
    if (tc_trace_clocks_scan(trace, len, &clocks, err, sizeof err) != 0) {
        tc_trace_clocks_free(&clocks);
        return;
    }
    struct tc_span_set set;
    memset(&set, 0, sizeof set);
    for (size_t off = 0; off < spans_len;) {
        const uint8_t *nl = memchr(spans + off, '\n', spans_len - off);
        size_t n = nl ? (size_t)(nl - (spans + off)) : spans_len - off;
        tc_spans_add_line(&set, (const char *)spans + off, n, err, sizeof err);
        off += n + 1;
    }
    struct emitted e = {NULL, 0};
    collect_ids(trace, len, &e);
    struct tc_stitch_opts o;
    memset(&o, 0, sizeof o);
    struct tc_stitch_stats st;
    memset(&st, 0, sizeof st);
    tc_stitch(&set, &clocks, &o, check_packet, &e, &st, err, sizeof err);
    free(e.used);
    tc_spans_free(&set);
    tc_trace_clocks_free(&clocks);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *mark = NULL;
    size_t ml = strlen(SPANS_MARK);
    for (size_t i = 0; size >= ml && i <= size - ml && !mark; i++)
        if (data[i] == '\n' && memcmp(data + i, SPANS_MARK, ml) == 0)
            mark = data + i;
    size_t trace_len = mark ? (size_t)(mark - data) : size;
    dump_all_modes(data, trace_len);
    if (mark)
        stitch(data, trace_len, mark + ml, size - trace_len - ml);
    return 0;
}
