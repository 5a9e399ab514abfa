/* test_tracectl_stitch.c: OnePath spans to TrackEvent packets (src/tracectl/span_stitch.c with
 * span_load.c, trace_clocks.c, json_read.c): clock mapping for the host and for a remote machine
 * with a different offset, the nearest clock snapshot, a machine the trace does not know, tracks
 * per process and thread with lanes, flows across tracks and machines, annotations, sequence ids
 * (fresh ones, also when the trace uses the top id), duplicates, orphans, bad lines, span times
 * beyond the trace clock's range and a trace without clock snapshots; flows whose ends trace
 * processor will order by its clock sync offsets, not the machines' own clocks (read back with
 * `tracectl dump --flows`). Packets are decoded back with the protobuf-c TracePacket messages. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "json_read.h"
#include "span_load.h"
#include "span_stitch.h"
#include "trace_clocks.h"
#include "trace_file.h"
#include "trace_packet.pb-c.h"
#include "tracectl.h"

#define R0 1700000000000000000ull /* host REALTIME at its first snapshot */
#define B0 5000000000ull          /* host BOOTTIME at the same moment */
#define R7 1700000000000250000ull /* machine 7's REALTIME at its sync (its wall clock is 250 us ahead) */
#define B7 90000000000ull         /* machine 7's BOOTTIME at the same moment */
#define M7 7u

/* ---------------------------------------------------------------- building a trace */

struct buf {
    uint8_t *p;
    size_t len;
};

static void add_record(struct buf *b, const Perfetto__Protos__TracePacket *pkt)
{
    size_t n = perfetto__protos__trace_packet__get_packed_size(pkt);
    uint8_t hdr[16];
    size_t hl = tc_trace_record_header(hdr, n);
    b->p = realloc(b->p, b->len + hl + n);
    assert_non_null(b->p);
    memcpy(b->p + b->len, hdr, hl);
    perfetto__protos__trace_packet__pack(pkt, b->p + b->len + hl);
    b->len += hl + n;
}

static void snapshot(Perfetto__Protos__ClockSnapshot *cs, Perfetto__Protos__ClockSnapshot__Clock *c,
                     Perfetto__Protos__ClockSnapshot__Clock **cp, uint64_t real, uint64_t boot)
{
    perfetto__protos__clock_snapshot__init(cs);
    for (int i = 0; i < 3; i++) {
        perfetto__protos__clock_snapshot__clock__init(&c[i]);
        c[i].has_clock_id = c[i].has_timestamp = 1;
        cp[i] = &c[i];
    }
    c[0].clock_id = 6;
    c[0].timestamp = boot;
    c[1].clock_id = 1;
    c[1].timestamp = real;
    c[2].clock_id = 3; /* MONOTONIC: ignored */
    c[2].timestamp = 12345;
    cs->n_clocks = 3;
    cs->clocks = cp;
}

/* A host snapshot at (R0, B0) and another 10 s later whose offset moved by 500 ns; machine 7
 * synced at (R7, B7); a packet of machine 7 on sequence 5. */
static struct buf make_trace(int with_host_clock)
{
    struct buf b = {NULL, 0};
    Perfetto__Protos__ClockSnapshot cs;
    Perfetto__Protos__ClockSnapshot__Clock c[3], *cp[3];
    Perfetto__Protos__TracePacket pkt = PERFETTO__PROTOS__TRACE_PACKET__INIT;
    if (with_host_clock) {
        snapshot(&cs, c, cp, R0, B0);
        cs.has_primary_trace_clock = 1;
        cs.primary_trace_clock = PERFETTO__PROTOS__BUILTIN_CLOCK__BUILTIN_CLOCK_BOOTTIME;
        pkt.data_case = PERFETTO__PROTOS__TRACE_PACKET__DATA_CLOCK_SNAPSHOT;
        pkt.clock_snapshot = &cs;
        pkt.optional_trusted_packet_sequence_id_case =
            PERFETTO__PROTOS__TRACE_PACKET__OPTIONAL_TRUSTED_PACKET_SEQUENCE_ID_TRUSTED_PACKET_SEQUENCE_ID;
        pkt.trusted_packet_sequence_id = 1;
        add_record(&b, &pkt);
        snapshot(&cs, c, cp, R0 + 10000000000ull, B0 + 10000000500ull);
        add_record(&b, &pkt);
    }
    /* machine 7's clock sync: the client side is machine 7's clocks */
    Perfetto__Protos__RemoteClockSync rcs = PERFETTO__PROTOS__REMOTE_CLOCK_SYNC__INIT;
    Perfetto__Protos__RemoteClockSync__SyncedClocks sc = PERFETTO__PROTOS__REMOTE_CLOCK_SYNC__SYNCED_CLOCKS__INIT,
                                                    *scp = &sc;
    Perfetto__Protos__ClockSnapshot client, hostc;
    Perfetto__Protos__ClockSnapshot__Clock c1[3], *c1p[3], c2[3], *c2p[3];
    snapshot(&client, c1, c1p, R7, B7);
    snapshot(&hostc, c2, c2p, R0, B0); /* the host's readings: not used for the mapping */
    sc.client_clocks = &client;
    sc.host_clocks = &hostc;
    rcs.n_synced_clocks = 1;
    rcs.synced_clocks = &scp;
    Perfetto__Protos__TracePacket p2 = PERFETTO__PROTOS__TRACE_PACKET__INIT;
    p2.has_machine_id = 1;
    p2.machine_id = M7;
    p2.data_case = PERFETTO__PROTOS__TRACE_PACKET__DATA_REMOTE_CLOCK_SYNC;
    p2.remote_clock_sync = &rcs;
    add_record(&b, &p2);
    Perfetto__Protos__TracePacket p3 = PERFETTO__PROTOS__TRACE_PACKET__INIT;
    p3.has_machine_id = 1;
    p3.machine_id = M7;
    p3.optional_trusted_packet_sequence_id_case =
        PERFETTO__PROTOS__TRACE_PACKET__OPTIONAL_TRUSTED_PACKET_SEQUENCE_ID_TRUSTED_PACKET_SEQUENCE_ID;
    p3.trusted_packet_sequence_id = 5;
    p3.has_timestamp = 1;
    p3.timestamp = B7;
    add_record(&b, &p3);
    return b;
}

/* ---------------------------------------------------------------- spans */

static char *span_line(const char *span, const char *parent, const char *name, uint64_t start, uint64_t end,
                       const char *service, long pid, long tid, const char *extra_res, const char *attrs)
{
    char *s = malloc(2048);
    snprintf(s, 2048,
             "{\"trace_id\":\"0af7651916cd43dd8448eb211c80319c\",\"span_id\":\"%s\",\"parent_span_id\":\"%s\","
             "\"name\":\"%s\",\"kind\":\"SERVER\",\"start_ns\":%llu,\"end_ns\":%llu,\"duration_ns\":%llu,"
             "\"status\":{\"code\":\"OK\",\"message\":\"\"},\"attributes\":{%s},"
             "\"events\":[{\"name\":\"queued\",\"ts_ns\":%llu}],\"thread\":{\"id\":%ld,\"name\":\"t%ld\"},"
             "\"resource\":{\"service.name\":\"%s\",\"host.name\":\"h-%s\",\"process.pid\":%ld%s}}",
             span, parent, name, (unsigned long long)start, (unsigned long long)end,
             (unsigned long long)(end - start), attrs ? attrs : "", (unsigned long long)start + 10, tid, tid,
             service, service, pid, extra_res ? extra_res : "");
    return s;
}

static void add(struct tc_span_set *set, char *line)
{
    char err[256];
    assert_int_equal(tc_spans_add_line(set, line, strlen(line), err, sizeof err), 0);
    free(line);
}

#define SA "a000000000000001"
#define SB "b000000000000002"
#define SC "c000000000000003"
#define SD "d000000000000004"
#define SE "e000000000000005"
#define SG "f000000000000007"
#define SH "f000000000000008"
#define SI "f000000000000009"

static void make_spans(struct tc_span_set *set)
{
    memset(set, 0, sizeof *set);
    /* A: the hub's root, with attributes */
    add(set, span_line(SA, "", "hub.request", R0 + 1000, R0 + 5000, "hub", 100, 100, NULL,
                       "\"n\":3,\"s\":\"x\",\"f\":1.5,\"ok\":true"));
    /* B: child of A on another thread of the same process (an explicit parent) */
    add(set, span_line(SB, SA, "hub.forward", R0 + 2000, R0 + 4000, "hub", 100, 101, NULL, NULL));
    /* C: child of B on machine 7 (perfetto.machine_id as a string) */
    add(set, span_line(SC, SB, "dev.handle", R7 + 3000, R7 + 3500, "dev", 200, 200,
                       ",\"perfetto.machine_id\":\"7\"", NULL));
    /* D: nested in A on A's thread: no flow, same track */
    add(set, span_line(SD, SA, "hub.inner", R0 + 1500, R0 + 1800, "hub", 100, 100, NULL, NULL));
    /* E: an orphan */
    add(set, span_line(SE, "9999999999999999", "hub.orphan", R0 + 6000, R0 + 7000, "hub", 100, 101, NULL, NULL));
    /* A again: a duplicate */
    add(set, span_line(SA, "", "hub.request", R0 + 1000, R0 + 5000, "hub", 100, 100, NULL, NULL));
    /* G: on A's thread, overlapping A without nesting: a second lane */
    add(set, span_line(SG, "", "hub.async", R0 + 4000, R0 + 9000, "hub", 100, 100, NULL, NULL));
    /* H: machine 9, unknown to the trace, via tracegate.node: host clocks, no machine id */
    add(set, span_line(SH, "", "far.work", R0 + 8000, R0 + 8100, "far", 300, 300,
                       ",\"tracegate.node\":\"far-node\"", NULL));
    /* I: 9 s after R0 on the host: mapped with the second snapshot (offset +500 ns) */
    add(set, span_line(SI, "", "hub.late", R0 + 9000000000ull, R0 + 9000000100ull, "hub", 100, 102, NULL, NULL));
}

/* ---------------------------------------------------------------- collecting the output */

struct out {
    Perfetto__Protos__TracePacket *pkt[256];
    size_t n;
};

static int collect(void *arg, const uint8_t *p, size_t len)
{
    struct out *o = arg;
    assert_true(o->n < 256);
    o->pkt[o->n] = perfetto__protos__trace_packet__unpack(NULL, len, p);
    assert_non_null(o->pkt[o->n]);
    o->n++;
    return 0;
}

static void out_free(struct out *o)
{
    for (size_t i = 0; i < o->n; i++)
        perfetto__protos__trace_packet__free_unpacked(o->pkt[i], NULL);
}

static const Perfetto__Protos__TracePacket *begin_of(const struct out *o, const char *name)
{
    for (size_t i = 0; i < o->n; i++) {
        const Perfetto__Protos__TrackEvent *te = o->pkt[i]->data_case == PERFETTO__PROTOS__TRACE_PACKET__DATA_TRACK_EVENT
                                                     ? o->pkt[i]->track_event
                                                     : NULL;
        if (te && te->type == PERFETTO__PROTOS__TRACK_EVENT__TYPE__TYPE_SLICE_BEGIN &&
            te->name_field_case == PERFETTO__PROTOS__TRACK_EVENT__NAME_FIELD_NAME && !strcmp(te->name, name))
            return o->pkt[i];
    }
    fail_msg("no slice %s", name);
    return NULL;
}

static const Perfetto__Protos__TrackDescriptor *track(const struct out *o, uint64_t uuid)
{
    for (size_t i = 0; i < o->n; i++)
        if (o->pkt[i]->data_case == PERFETTO__PROTOS__TRACE_PACKET__DATA_TRACK_DESCRIPTOR &&
            o->pkt[i]->track_descriptor->uuid == uuid)
            return o->pkt[i]->track_descriptor;
    fail_msg("no track %llu", (unsigned long long)uuid);
    return NULL;
}

static const Perfetto__Protos__DebugAnnotation *arg(const Perfetto__Protos__TrackEvent *te, const char *name)
{
    for (size_t i = 0; i < te->n_debug_annotations; i++)
        if (!strcmp(te->debug_annotations[i]->name, name))
            return te->debug_annotations[i];
    return NULL;
}

static uint64_t id_of(const char *hex16)
{
    uint8_t t[16], s[8];
    const char *tid = "0af7651916cd43dd8448eb211c80319c";
    for (int i = 0; i < 16; i++)
        sscanf(tid + 2 * i, "%2hhx", &t[i]);
    for (int i = 0; i < 8; i++)
        sscanf(hex16 + 2 * i, "%2hhx", &s[i]);
    return tc_stitch_flow_id(t, s);
}

static int has_id(const uint64_t *v, size_t n, uint64_t id)
{
    for (size_t i = 0; i < n; i++)
        if (v[i] == id)
            return 1;
    return 0;
}

/* ---------------------------------------------------------------- tests */

static void run(struct out *o, struct tc_stitch_stats *st)
{
    struct buf tr = make_trace(1);
    struct tc_trace_clocks clocks;
    char err[256];
    assert_int_equal(tc_trace_clocks_scan(tr.p, tr.len, &clocks, err, sizeof err), 0);
    assert_int_equal(clocks.max_seq_id, 5);
    struct tc_span_set set;
    make_spans(&set);
    struct tc_stitch_opts opts = {NULL, 0, NULL, NULL};
    memset(o, 0, sizeof *o);
    assert_int_equal(tc_stitch(&set, &clocks, &opts, collect, o, st, err, sizeof err), 0);
    tc_spans_free(&set);
    tc_trace_clocks_free(&clocks);
    free(tr.p);
}

static void test_clock_mapping(void **state)
{
    (void)state;
    struct out o;
    struct tc_stitch_stats st;
    run(&o, &st);
    /* host spans: BOOTTIME through the host snapshot, no machine id */
    const Perfetto__Protos__TracePacket *a = begin_of(&o, "hub.request");
    assert_int_equal(a->timestamp, B0 + 1000);
    assert_int_equal(a->timestamp_clock_id, 6);
    assert_false(a->has_machine_id);
    /* machine 7: its own BOOTTIME through its own clock readings, then the host's BOOTTIME by the
     * offset trace processor derives (none here: one sync entry is no round trip), and no
     * machine id: trace processor links no flow across machines */
    const Perfetto__Protos__TracePacket *c = begin_of(&o, "dev.handle");
    assert_int_equal(c->timestamp, B7 + 3000);
    assert_int_equal(c->timestamp_clock_id, 6);
    assert_false(c->has_machine_id);
    /* the nearest snapshot: 9 s in, the second one (offset moved by 500 ns) */
    assert_int_equal(begin_of(&o, "hub.late")->timestamp, B0 + 9000000000ull + 500);
    /* machine 9 is not in the trace: host clocks, no machine id */
    const Perfetto__Protos__TracePacket *h = begin_of(&o, "far.work");
    assert_int_equal(h->timestamp, B0 + 8000);
    assert_false(h->has_machine_id);
    /* every SLICE_END keeps the duration exactly */
    for (size_t i = 0; i < o.n; i++) {
        const Perfetto__Protos__TrackEvent *te = o.pkt[i]->track_event;
        if (o.pkt[i]->data_case != PERFETTO__PROTOS__TRACE_PACKET__DATA_TRACK_EVENT ||
            te->type != PERFETTO__PROTOS__TRACK_EVENT__TYPE__TYPE_SLICE_END || te->track_uuid != c->track_event->track_uuid)
            continue;
        assert_int_equal(o.pkt[i]->timestamp, B7 + 3500);
        assert_false(o.pkt[i]->has_machine_id);
    }
    assert_int_equal(st.remote, 1);
    assert_int_equal(st.on_host_clock, 1);
    out_free(&o);
}

static void test_tracks_and_sequences(void **state)
{
    (void)state;
    struct out o;
    struct tc_stitch_stats st;
    run(&o, &st);
    assert_int_equal(st.spans, 9);
    assert_int_equal(st.duplicates, 1);
    assert_int_equal(st.placed, 8);
    const Perfetto__Protos__TrackEvent *a = begin_of(&o, "hub.request")->track_event;
    const Perfetto__Protos__TrackEvent *b = begin_of(&o, "hub.forward")->track_event;
    const Perfetto__Protos__TrackEvent *d = begin_of(&o, "hub.inner")->track_event;
    const Perfetto__Protos__TrackEvent *g = begin_of(&o, "hub.async")->track_event;
    /* A and D share A's thread track; B has its own; G overlaps A without nesting: lane 2 */
    assert_int_equal(a->track_uuid, d->track_uuid);
    assert_int_not_equal(a->track_uuid, b->track_uuid);
    assert_int_not_equal(a->track_uuid, g->track_uuid);
    const Perfetto__Protos__TrackDescriptor *ta = track(&o, a->track_uuid), *tb = track(&o, b->track_uuid),
                                            *tg = track(&o, g->track_uuid);
    assert_string_equal(ta->name, "t100 100");
    assert_string_equal(tb->name, "t101 101");
    assert_string_equal(tg->name, "t100 100 #2");
    /* all three under the hub's process track: a ProcessDescriptor with pid and service name */
    assert_int_equal(ta->parent_uuid, tb->parent_uuid);
    assert_int_equal(ta->parent_uuid, tg->parent_uuid);
    const Perfetto__Protos__TrackDescriptor *proc = track(&o, ta->parent_uuid);
    assert_non_null(proc->process);
    assert_int_equal(proc->process->pid, 100);
    assert_string_equal(proc->process->process_name, "hub");
    /* machine 7's tracks are the host's, their process a named track that says the machine (a
     * ProcessDescriptor would be taken for the host's pid 200) */
    const Perfetto__Protos__TrackEvent *c = begin_of(&o, "dev.handle")->track_event;
    const Perfetto__Protos__TrackDescriptor *tc = track(&o, c->track_uuid);
    assert_string_equal(tc->name, "t200 200");
    const Perfetto__Protos__TrackDescriptor *pc = track(&o, tc->parent_uuid);
    assert_null(pc->process);
    assert_string_equal(pc->name, "dev 200 (h-dev) on machine 7");
    for (size_t i = 0; i < o.n; i++)
        assert_false(o.pkt[i]->has_machine_id);
    /* tracks: processes hub, dev, far (3) + threads hub 100, 100 #2, 101, 102, dev 200, far 300 (6) */
    assert_int_equal(st.tracks, 9);
    /* one fresh sequence id above the trace's 5; its first packet clears the incremental state;
     * descriptors come first */
    uint32_t seq_host = 0;
    int started_host = 0, seen_event = 0;
    for (size_t i = 0; i < o.n; i++) {
        const Perfetto__Protos__TracePacket *p = o.pkt[i];
        assert_int_equal(p->optional_trusted_packet_sequence_id_case,
                         PERFETTO__PROTOS__TRACE_PACKET__OPTIONAL_TRUSTED_PACKET_SEQUENCE_ID_TRUSTED_PACKET_SEQUENCE_ID);
        assert_true(p->trusted_packet_sequence_id > 5);
        uint32_t *seq = &seq_host;
        int *started = &started_host;
        if (!*started) {
            assert_true(p->has_sequence_flags && p->sequence_flags == 1);
            *seq = p->trusted_packet_sequence_id;
            *started = 1;
        } else {
            assert_int_equal(p->trusted_packet_sequence_id, *seq);
            assert_false(p->has_sequence_flags);
        }
        if (p->data_case == PERFETTO__PROTOS__TRACE_PACKET__DATA_TRACK_EVENT)
            seen_event = 1;
        else
            assert_false(seen_event);
    }
    assert_true(seq_host > 5);
    out_free(&o);
}

static void test_flows(void **state)
{
    (void)state;
    struct out o;
    struct tc_stitch_stats st;
    run(&o, &st);
    const Perfetto__Protos__TrackEvent *a = begin_of(&o, "hub.request")->track_event;
    const Perfetto__Protos__TrackEvent *b = begin_of(&o, "hub.forward")->track_event;
    const Perfetto__Protos__TrackEvent *c = begin_of(&o, "dev.handle")->track_event;
    const Perfetto__Protos__TrackEvent *d = begin_of(&o, "hub.inner")->track_event;
    /* A -> B across threads */
    assert_true(has_id(a->flow_ids, a->n_flow_ids, id_of(SB)));
    assert_true(has_id(b->terminating_flow_ids, b->n_terminating_flow_ids, id_of(SB)));
    /* B -> C across machines */
    assert_true(has_id(b->flow_ids, b->n_flow_ids, id_of(SC)));
    assert_true(has_id(c->terminating_flow_ids, c->n_terminating_flow_ids, id_of(SC)));
    /* D is nested on A's track: no flow */
    assert_false(has_id(a->flow_ids, a->n_flow_ids, id_of(SD)));
    assert_int_equal(d->n_terminating_flow_ids, 0);
    assert_int_equal(a->n_flow_ids, 1);
    assert_int_equal(st.flows, 2);
    assert_int_equal(st.orphans, 1);
    /* every flow id has exactly one start and one end */
    size_t starts = 0, ends = 0;
    for (size_t i = 0; i < o.n; i++)
        if (o.pkt[i]->data_case == PERFETTO__PROTOS__TRACE_PACKET__DATA_TRACK_EVENT) {
            starts += o.pkt[i]->track_event->n_flow_ids;
            ends += o.pkt[i]->track_event->n_terminating_flow_ids;
        }
    assert_int_equal(starts, 2);
    assert_int_equal(ends, 2);
    out_free(&o);
}

/* Appends machine 7's clock sync round (PING, UPDATE) from which trace processor derives
 * machine 7 minus host = B7 - B0 + 5000 ns: it then puts dev.handle (C, at B7 + 3000 on machine
 * 7's clock) at B0 - 2000, before its parent hub.forward (B, at B0 + 2000), although machine 7's
 * own clock readings say later. */
static void add_skewed_sync(struct buf *b)
{
    const uint64_t o = B7 - B0 + 5000 - 500; /* the round's estimate comes out 500 ns above o */
    Perfetto__Protos__ClockSnapshot cl[2], ho[2];
    Perfetto__Protos__ClockSnapshot__Clock c1[2][3], *c1p[2][3], c2[2][3], *c2p[2][3];
    Perfetto__Protos__RemoteClockSync__SyncedClocks sc[2], *scp[2];
    for (int i = 0; i < 2; i++) {
        snapshot(&cl[i], c1[i], c1p[i], R7 + 1000ull * (uint64_t)i, B7 + 1000ull * (uint64_t)i);
        snapshot(&ho[i], c2[i], c2p[i], R0, B7 + 1000ull * (uint64_t)i - o);
        perfetto__protos__remote_clock_sync__synced_clocks__init(&sc[i]);
        sc[i].client_clocks = &cl[i];
        sc[i].host_clocks = &ho[i];
        scp[i] = &sc[i];
    }
    Perfetto__Protos__RemoteClockSync rcs = PERFETTO__PROTOS__REMOTE_CLOCK_SYNC__INIT;
    rcs.n_synced_clocks = 2;
    rcs.synced_clocks = scp;
    Perfetto__Protos__TracePacket p = PERFETTO__PROTOS__TRACE_PACKET__INIT;
    p.has_machine_id = 1;
    p.machine_id = M7;
    p.data_case = PERFETTO__PROTOS__TRACE_PACKET__DATA_REMOTE_CLOCK_SYNC;
    p.remote_clock_sync = &rcs;
    add_record(b, &p);
}

static void add_raw(struct buf *b, const uint8_t *pkt, size_t n)
{
    uint8_t hdr[16];
    size_t hl = tc_trace_record_header(hdr, n);
    b->p = realloc(b->p, b->len + hl + n);
    assert_non_null(b->p);
    memcpy(b->p + b->len, hdr, hl);
    memcpy(b->p + b->len + hl, pkt, n);
    b->len += hl + n;
}

static int append_record(void *arg, const uint8_t *p, size_t len)
{
    add_raw(arg, p, len);
    return 0;
}

/* Machine 7's span is put on the host's clock by the offset trace processor derives from the
 * clock sync (there, before its parent although machine 7's own clock says later), and the end
 * of a flow that comes first carries flow_ids, so it links every flow: here the child C. Read
 * back as trace processor links flows (tracectl dump --flows, flow ids per machine), both
 * stitched flows are there, all on the host. */
static void test_flows_in_trace_processor_order(void **state)
{
    (void)state;
    struct buf tr = make_trace(1);
    add_skewed_sync(&tr);
    struct tc_trace_clocks clocks;
    char err[256];
    assert_int_equal(tc_trace_clocks_scan(tr.p, tr.len, &clocks, err, sizeof err), 0);
    int64_t off;
    assert_int_equal(tc_sync_ests_offset(&clocks.sync, M7, &off), 1);
    assert_int_equal(off, (int64_t)(B7 - B0 + 5000));
    struct tc_span_set set;
    make_spans(&set);
    struct tc_stitch_opts opts = {NULL, 0, NULL, NULL};
    struct tc_stitch_stats st;
    struct out o = {.n = 0};
    assert_int_equal(tc_stitch(&set, &clocks, &opts, collect, &o, &st, err, sizeof err), 0);
    const Perfetto__Protos__TrackEvent *b = begin_of(&o, "hub.forward")->track_event;
    const Perfetto__Protos__TrackEvent *c = begin_of(&o, "dev.handle")->track_event;
    assert_int_equal(begin_of(&o, "dev.handle")->timestamp, B0 - 2000);
    assert_false(begin_of(&o, "dev.handle")->has_machine_id);
    assert_true(has_id(c->flow_ids, c->n_flow_ids, id_of(SC)));
    assert_true(has_id(b->terminating_flow_ids, b->n_terminating_flow_ids, id_of(SC)));
    assert_false(has_id(b->flow_ids, b->n_flow_ids, id_of(SC)));
    out_free(&o);

    struct tc_stitch_stats st2;
    assert_int_equal(tc_stitch(&set, &clocks, &opts, append_record, &tr, &st2, err, sizeof err), 0);
    char *text = NULL;
    size_t text_len = 0;
    FILE *f = open_memstream(&text, &text_len);
    assert_non_null(f);
    assert_int_equal(tc_dump_trace(f, tr.p, tr.len, TC_DUMP_FLOWS, err, sizeof err), 0);
    fclose(f);
    if (getenv("TG_TEST_VERBOSE"))
        fputs(text, stderr);
    assert_non_null(strstr(text, "\"dev.handle\" on \"t200 200\" -> \"hub.forward\" on \"t101 101\""));
    assert_non_null(strstr(text, "\nflows: 2\n"));
    free(text);
    tc_spans_free(&set);
    tc_trace_clocks_free(&clocks);
    free(tr.p);
}

static void test_annotations(void **state)
{
    (void)state;
    struct out o;
    struct tc_stitch_stats st;
    run(&o, &st);
    const Perfetto__Protos__TrackEvent *a = begin_of(&o, "hub.request")->track_event;
    assert_string_equal(arg(a, "onepath.trace_id")->string_value, "0af7651916cd43dd8448eb211c80319c");
    assert_string_equal(arg(a, "onepath.span_id")->string_value, SA);
    assert_null(arg(a, "onepath.parent_span_id"));
    assert_string_equal(arg(a, "onepath.kind")->string_value, "SERVER");
    assert_string_equal(arg(a, "onepath.status")->string_value, "OK");
    assert_string_equal(arg(a, "onepath.service")->string_value, "hub");
    assert_int_equal(arg(a, "n")->value_case, PERFETTO__PROTOS__DEBUG_ANNOTATION__VALUE_INT_VALUE);
    assert_int_equal(arg(a, "n")->int_value, 3);
    assert_string_equal(arg(a, "s")->string_value, "x");
    assert_true(arg(a, "f")->double_value == 1.5);
    assert_true(arg(a, "ok")->bool_value);
    const Perfetto__Protos__DebugAnnotation *ev = arg(a, "onepath.events");
    assert_non_null(ev);
    assert_int_equal(ev->n_array_values, 1);
    assert_int_equal(ev->array_values[0]->n_dict_entries, 2);
    assert_string_equal(ev->array_values[0]->dict_entries[0]->string_value, "queued");
    assert_int_equal(ev->array_values[0]->dict_entries[1]->int_value, 10);
    assert_string_equal(a->categories[0], "onepath");
    const Perfetto__Protos__TrackEvent *b = begin_of(&o, "hub.forward")->track_event;
    assert_string_equal(arg(b, "onepath.parent_span_id")->string_value, SA);
    out_free(&o);
}

static void test_host_map_and_errors(void **state)
{
    (void)state;
    char err[256];
    /* --machine HOST=ID: a span without machine resource attributes goes to machine 7 by host */
    struct buf tr = make_trace(1);
    struct tc_trace_clocks clocks;
    assert_int_equal(tc_trace_clocks_scan(tr.p, tr.len, &clocks, err, sizeof err), 0);
    struct tc_span_set set;
    memset(&set, 0, sizeof set);
    add(&set, span_line(SA, "", "dev.work", R7 + 100, R7 + 200, "dev", 1, 1, NULL, NULL));
    struct tc_machine_map map = {"h-dev", M7};
    struct tc_stitch_opts opts = {&map, 1, NULL, NULL};
    struct out o;
    struct tc_stitch_stats st;
    memset(&o, 0, sizeof o);
    assert_int_equal(tc_stitch(&set, &clocks, &opts, collect, &o, &st, err, sizeof err), 0);
    assert_false(begin_of(&o, "dev.work")->has_machine_id);
    assert_int_equal(begin_of(&o, "dev.work")->timestamp, B7 + 100); /* machine 7's BOOTTIME, no sync offset */
    assert_int_equal(st.remote, 1);
    out_free(&o);
    tc_trace_clocks_free(&clocks);
    free(tr.p);

    /* a trace without host clock snapshots cannot place spans */
    tr = make_trace(0);
    assert_int_equal(tc_trace_clocks_scan(tr.p, tr.len, &clocks, err, sizeof err), 0);
    memset(&o, 0, sizeof o);
    assert_int_equal(tc_stitch(&set, &clocks, NULL, collect, &o, &st, err, sizeof err), -1);
    assert_non_null(strstr(err, "ClockSnapshot"));
    assert_int_equal(o.n, 0);
    tc_trace_clocks_free(&clocks);
    free(tr.p);
    tc_spans_free(&set);

    /* lines that are not span records */
    static const char *bad[] = {
        "", "{", "[]", "{\"trace_id\":\"00000000000000000000000000000000\",\"span_id\":\"0000000000000001\",\"start_ns\":1,\"end_ns\":2}",
        "{\"trace_id\":\"0af7651916cd43dd8448eb211c80319c\",\"span_id\":\"01\",\"start_ns\":1,\"end_ns\":2}",
        "{\"trace_id\":\"0af7651916cd43dd8448eb211c80319c\",\"span_id\":\"0000000000000001\",\"start_ns\":-1,\"end_ns\":2}",
        "{\"trace_id\":\"0af7651916cd43dd8448eb211c80319c\",\"span_id\":\"0000000000000001\",\"parent_span_id\":\"x\",\"start_ns\":1,\"end_ns\":2}",
        "{\"trace_id\":\"0af7651916cd43dd8448eb211c80319c\",\"span_id\":\"0000000000000001\",\"start_ns\":1}",
        "{\"a\":\"\\ud800\"}", "{\"a\":1} x", "{\"a\":\"\x01\"}", "{\"a\":\"\xff\"}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        memset(&set, 0, sizeof set);
        err[0] = 0;
        assert_int_equal(tc_spans_add_line(&set, bad[i], strlen(bad[i]), err, sizeof err), -1);
        assert_true(err[0] != 0);
        assert_int_equal(set.n, 0);
        tc_spans_free(&set);
    }
    /* end_ns absent: duration_ns; escapes and UTF-8 decoded */
    memset(&set, 0, sizeof set);
    const char *ok = "{\"trace_id\":\"0AF7651916CD43DD8448EB211C80319C\",\"span_id\":\"0000000000000001\","
                     "\"name\":\"caf\\u00e9 \\ud83d\\ude00\",\"start_ns\":10,\"duration_ns\":5}";
    assert_int_equal(tc_spans_add_line(&set, ok, strlen(ok), err, sizeof err), 0);
    assert_int_equal(set.v[0].end_ns, 15);
    assert_string_equal(set.v[0].name, "caf\xc3\xa9 \xf0\x9f\x98\x80");
    assert_false(set.v[0].has_parent);
    tc_spans_free(&set);
}

/* Untrusted span times that do not fit the trace clock: an end_ns of 2^64-1 (a "never ended"
 * sentinel) and a start far in the future. Their slices wrapped around 2^64, so a SLICE_END came
 * before its SLICE_BEGIN and the track's later slices all nested under a slice that never ended.
 * Now such spans are skipped and counted; every slice written ends at or after its begin. */
static void test_times_out_of_range(void **state)
{
    (void)state;
    struct buf tr = make_trace(1);
    struct tc_trace_clocks clocks;
    char err[256];
    assert_int_equal(tc_trace_clocks_scan(tr.p, tr.len, &clocks, err, sizeof err), 0);
    struct tc_span_set set;
    memset(&set, 0, sizeof set);
    add(&set, span_line(SA, "", "ok.before", R0 + 1000, R0 + 2000, "hub", 100, 100, NULL, NULL));
    add(&set, span_line(SB, "", "never.ended", R0 + 3000, UINT64_MAX, "hub", 100, 100, NULL, NULL));
    add(&set, span_line(SC, "", "far.future", UINT64_MAX - 10, UINT64_MAX, "hub", 100, 100, NULL, NULL));
    add(&set, span_line(SD, "", "ok.after", R0 + 4000, R0 + 5000, "hub", 100, 100, NULL, NULL));
    struct out o;
    struct tc_stitch_stats st;
    memset(&o, 0, sizeof o);
    assert_int_equal(tc_stitch(&set, &clocks, NULL, collect, &o, &st, err, sizeof err), 0);
    assert_int_equal(st.unplaceable, 2);
    assert_int_equal(st.placed, 2);
    /* per track, begins and ends pair up in time order */
    for (size_t i = 0; i < o.n; i++) {
        const Perfetto__Protos__TrackEvent *te = o.pkt[i]->track_event;
        if (o.pkt[i]->data_case != PERFETTO__PROTOS__TRACE_PACKET__DATA_TRACK_EVENT)
            continue;
        assert_true(o.pkt[i]->timestamp <= (uint64_t)INT64_MAX);
        if (te->type == PERFETTO__PROTOS__TRACK_EVENT__TYPE__TYPE_SLICE_BEGIN)
            assert_true(strcmp(te->name, "never.ended") && strcmp(te->name, "far.future"));
    }
    assert_int_equal(begin_of(&o, "ok.after")->timestamp, B0 + 4000);
    out_free(&o);
    tc_spans_free(&set);
    tc_trace_clocks_free(&clocks);
    free(tr.p);
}

/* A trace whose packets already use sequence id 0xFFFFFFFF (the top), 1 and 5 (make_trace), 2, 3
 * as a fixed64 and 6 as a varint above 32 bits (Perfetto reads both, keeping the low 32 bits):
 * the stitched packets take ids no packet uses, and never 0 ("no sequence"), instead of wrapping
 * from 0xFFFFFFFF + 1 onto 0 and 1, the host's own sequence. */
static void test_sequence_ids_at_the_top(void **state)
{
    (void)state;
    struct buf tr = make_trace(1);
    static const uint8_t top[] = {0x50, 0xff, 0xff, 0xff, 0xff, 0x0f};                       /* 10: 0xFFFFFFFF */
    static const uint8_t two[] = {0x50, 0x02};                                               /* 10: 2 */
    static const uint8_t three[] = {0x51, 0x03, 0, 0, 0, 0, 0, 0, 0};                        /* 10: fixed64 3 */
    static const uint8_t six[] = {0x50, 0x86, 0x80, 0x80, 0x80, 0x10};                       /* 10: 2^32 + 6 */
    add_raw(&tr, top, sizeof top);
    add_raw(&tr, two, sizeof two);
    add_raw(&tr, three, sizeof three);
    add_raw(&tr, six, sizeof six);
    struct tc_trace_clocks clocks;
    char err[256];
    assert_int_equal(tc_trace_clocks_scan(tr.p, tr.len, &clocks, err, sizeof err), 0);
    struct tc_span_set set;
    make_spans(&set);
    struct out o;
    struct tc_stitch_stats st;
    memset(&o, 0, sizeof o);
    assert_int_equal(tc_stitch(&set, &clocks, NULL, collect, &o, &st, err, sizeof err), 0);
    for (size_t i = 0; i < o.n; i++) /* the lowest id no packet uses: one sequence, the host's */
        assert_int_equal(o.pkt[i]->trusted_packet_sequence_id, 4);
    out_free(&o);
    /* many ids, seen out of order and repeated: every free one is found, none in use */
    tc_trace_clocks_free(&clocks);
    memset(&clocks, 0, sizeof clocks);
    for (uint32_t k = 0; k < 3000; k++) {
        uint8_t pkt[8] = {0x50};
        uint32_t id = k % 2 ? UINT32_MAX - k : (k * 7919u) % 4000u + 1; /* both ends, repeats */
        size_t n = 1;
        for (uint32_t v = id; ; v >>= 7) {
            pkt[n++] = (uint8_t)((v & 0x7f) | (v >= 0x80 ? 0x80 : 0));
            if (v < 0x80)
                break;
        }
        assert_int_equal(tc_trace_clocks_add_packet(&clocks, pkt, n), 0);
    }
    uint32_t fresh[64];
    assert_int_equal(tc_trace_clocks_fresh_seq_ids(&clocks, 64, fresh), 0);
    for (size_t i = 0; i < 64; i++) {
        assert_int_not_equal(fresh[i], 0);
        for (uint32_t k = 0; k < 3000; k++)
            assert_int_not_equal(fresh[i], k % 2 ? UINT32_MAX - k : (k * 7919u) % 4000u + 1);
        for (size_t j = 0; j < i; j++)
            assert_int_not_equal(fresh[i], fresh[j]);
    }
    tc_spans_free(&set);
    tc_trace_clocks_free(&clocks);
    free(tr.p);
}

static void test_json_depth(void **state)
{
    (void)state;
    char text[300], err[128];
    memset(text, '[', 200);
    text[200] = 0;
    assert_null(tc_json_parse(text, 200, err, sizeof err)); /* 200 deep: refused, no stack overflow */
    assert_non_null(strstr(err, "deep"));
    struct tc_json_doc *d = tc_json_parse(" [1, -2, 3.5, 18446744073709551615, true, null, \"\"] ", 51, err, sizeof err);
    assert_non_null(d);
    const struct tc_json *r = tc_json_root(d);
    assert_int_equal(r->n, 7);
    assert_int_equal(r->items[1].i, -2);
    assert_true(r->items[2].d == 3.5 && !r->items[2].is_int);
    assert_true(r->items[3].is_uint && r->items[3].u == UINT64_MAX);
    tc_json_free(d);
}

/* The nearest clock pair by bisection over sorted pairs is the one the scan in trace order picks:
 * the nearest, the earliest in the trace among equally near ones (repeated REALTIME readings,
 * a timestamp midway between two), for pairs that came in any order. */
static void test_nearest_pair_by_bisection(void **state)
{
    (void)state;
    enum { N = 400 };
    struct tc_clock_pair ref[N];
    uint64_t seed = 42;
    for (size_t i = 0; i < N; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        ref[i].real = 1000000 + (seed >> 33) % 200 * 1000; /* 200 values: many repeats */
        ref[i].target = 5000000000ull + i * 7;                /* tells the pairs apart */
        ref[i].order = i;
    }
    struct tc_clock_pair sorted[N];
    memcpy(sorted, ref, sizeof ref);
    struct tc_machine_clocks scan = {.pairs = ref, .n = N, .unsorted = 1};
    struct tc_machine_clocks bis = {.pairs = sorted, .n = N, .unsorted = 1};
    struct tc_trace_clocks c = {.m = &bis, .n = 1};
    tc_trace_clocks_sort(&c);
    assert_int_equal(bis.unsorted, 0);
    for (size_t i = 1; i < N; i++)
        assert_true(sorted[i - 1].real <= sorted[i].real);
    for (uint64_t x = 990000; x <= 1210000; x += 250) { /* every pair, every midpoint, both ends */
        uint64_t a, b;
        int ra = tc_clock_map(&scan, x, &a), rb = tc_clock_map(&bis, x, &b);
        assert_int_equal(ra, rb);
        if (ra == 0 && a != b) {
            print_error("REALTIME %llu: scan %llu, bisection %llu\n", (unsigned long long)x, (unsigned long long)a,
                        (unsigned long long)b);
            fail();
        }
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_clock_mapping),    cmocka_unit_test(test_tracks_and_sequences),
        cmocka_unit_test(test_flows),            cmocka_unit_test(test_annotations),
        cmocka_unit_test(test_flows_in_trace_processor_order),
        cmocka_unit_test(test_host_map_and_errors), cmocka_unit_test(test_json_depth),
        cmocka_unit_test(test_times_out_of_range), cmocka_unit_test(test_sequence_ids_at_the_top),
        cmocka_unit_test(test_nearest_pair_by_bisection),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
