/* test_tracectl_flow_table.c: `tracectl dump --flows` links flows as trace processor does
 * (flow_table.h): by time, not file order; a flow id carried on steps through every slice that
 * names it; a terminating id ends it and is ignored when nothing is active; ids on an end event
 * belong to the slice it closes; flow ids are per machine (trace processor links no flow across
 * machines); a remote machine's events are moved by its clock offset. And packet times are placed on the host clock (trace_ts.h): the SDK's incremental
 * sequence-scoped clock with a unit multiplier, global clocks through the host snapshot, the
 * sequence's default clock, and nothing placed before a sequence's snapshot. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "flow_table.h"
#include "trace_ts.h"

static void ev(struct tc_flow_table *t, enum tc_flow_kind k, uint32_t machine, uint64_t track, int64_t ts,
               const char *name, uint64_t flow, uint64_t term)
{
    assert_int_equal(tc_flow_table_add(t, k, machine, track, NULL, 1, ts, name, flow ? &flow : NULL, flow ? 1 : 0,
                                       term ? &term : NULL, term ? 1 : 0),
                     0);
}

static void assert_edge(const struct tc_flow_table *t, size_t i, const char *out, const char *in)
{
    assert_true(i < t->n_edges);
    assert_string_equal(t->edges[i].out->name, out);
    assert_string_equal(t->edges[i].in->name, in);
}

/* added in file order C, B, A (as a merged trace may hold three machines' sequences): linked in
 * time order A -> B -> C, and the id is over after C */
static void test_chain_in_time_order(void **state)
{
    (void)state;
    struct tc_flow_table t = {0};
    ev(&t, TC_FLOW_BEGIN, 0, 3, 30, "C", 0, 7);
    ev(&t, TC_FLOW_END, 0, 3, 31, NULL, 0, 0);
    ev(&t, TC_FLOW_BEGIN, 0, 2, 20, "B", 7, 0);
    ev(&t, TC_FLOW_END, 0, 2, 21, NULL, 0, 0);
    ev(&t, TC_FLOW_BEGIN, 0, 1, 10, "A", 7, 0);
    ev(&t, TC_FLOW_END, 0, 1, 11, NULL, 0, 0);
    ev(&t, TC_FLOW_INSTANT, 0, 4, 40, "D", 0, 7); /* 7 ended at C: nothing to link */
    assert_int_equal(tc_flow_table_resolve(&t, NULL, NULL), 0);
    assert_int_equal(t.n_edges, 2);
    assert_edge(&t, 0, "A", "B");
    assert_edge(&t, 1, "B", "C");
    assert_int_equal(t.edges[0].flow_id, 7);
    tc_flow_table_free(&t);
}

/* a terminating id that is not active starts nothing; a later flow_ids starts it afresh */
static void test_inactive_terminating_ignored(void **state)
{
    (void)state;
    struct tc_flow_table t = {0};
    ev(&t, TC_FLOW_INSTANT, 0, 1, 5, "early-end", 0, 9);
    ev(&t, TC_FLOW_INSTANT, 0, 1, 6, "start", 9, 0);
    ev(&t, TC_FLOW_INSTANT, 0, 2, 7, "end", 0, 9);
    assert_int_equal(tc_flow_table_resolve(&t, NULL, NULL), 0);
    assert_int_equal(t.n_edges, 1);
    assert_edge(&t, 0, "start", "end");
    tc_flow_table_free(&t);
}

/* ids on an end event belong to the innermost open slice of its track, which it closes */
static void test_end_event_binds_closed_slice(void **state)
{
    (void)state;
    struct tc_flow_table t = {0};
    ev(&t, TC_FLOW_BEGIN, 0, 1, 0, "outer", 0, 0);
    ev(&t, TC_FLOW_BEGIN, 0, 1, 1, "inner", 0, 0);
    ev(&t, TC_FLOW_END, 0, 1, 2, NULL, 5, 0);
    ev(&t, TC_FLOW_END, 0, 1, 3, NULL, 0, 0);
    ev(&t, TC_FLOW_BEGIN, 0, 2, 4, "next", 0, 5);
    ev(&t, TC_FLOW_END, 0, 9, 4, NULL, 6, 0); /* closes nothing: counted, not linked */
    assert_int_equal(tc_flow_table_resolve(&t, NULL, NULL), 0);
    assert_int_equal(t.n_edges, 1);
    assert_edge(&t, 0, "inner", "next");
    assert_int_equal(t.unmatched_ends, 1);
    tc_flow_table_free(&t);
}

/* the same track uuid on two machines is two tracks, and the same flow id two flows: trace
 * processor tracks flows per machine, so nothing links a host slice to a remote one */
static void test_tracks_per_machine(void **state)
{
    (void)state;
    struct tc_flow_table t = {0};
    ev(&t, TC_FLOW_BEGIN, 0, 1, 0, "host-slice", 0, 0);
    ev(&t, TC_FLOW_BEGIN, 2, 1, 1, "remote-slice", 0, 0);
    ev(&t, TC_FLOW_END, 0, 1, 2, NULL, 8, 0); /* closes host-slice, not remote-slice */
    ev(&t, TC_FLOW_END, 2, 1, 3, NULL, 0, 8); /* 8 is not active on machine 2 */
    ev(&t, TC_FLOW_INSTANT, 2, 5, 4, "remote-start", 8, 0);
    ev(&t, TC_FLOW_INSTANT, 2, 6, 5, "remote-end", 0, 8);
    assert_int_equal(tc_flow_table_resolve(&t, NULL, NULL), 0);
    assert_int_equal(t.n_edges, 1);
    assert_edge(&t, 0, "remote-start", "remote-end");
    assert_int_equal(t.edges[0].in->machine, 2);
    tc_flow_table_free(&t);
}

static int64_t offset_of(void *ctx, uint32_t machine)
{
    (void)ctx;
    if (machine == 3) /* a hostile trace's clock sync: far off */
        return -INT64_C(9200000000000000000);
    return machine == 2 ? -100 : 0; /* machine 2's clock is 100 ns behind the host's */
}

/* a remote machine's slices are on the host clock after its offset (machine 2's clock is 100 ns
 * behind: its 50 is the host's 150); a hostile offset saturates; and an id begun on the host is
 * not ended on machine 2 whatever the times */
static void test_machine_offset_orders(void **state)
{
    (void)state;
    struct tc_flow_table t = {0};
    ev(&t, TC_FLOW_INSTANT, 2, 1, 50, "remote-a", 4, 0);
    ev(&t, TC_FLOW_INSTANT, 2, 2, 60, "remote-b", 0, 4);
    ev(&t, TC_FLOW_INSTANT, 0, 1, 100, "host", 4, 0);
    assert_int_equal(tc_flow_table_resolve(&t, offset_of, NULL), 0);
    assert_int_equal(t.n_edges, 1);
    assert_edge(&t, 0, "remote-a", "remote-b");
    assert_int_equal(t.edges[0].out->ts, 150);
    assert_int_equal(t.edges[0].in->ts, 160);
    tc_flow_table_free(&t);

    struct tc_flow_table far = {0}; /* moved past the end of time: saturates (UBSan would trap) */
    ev(&far, TC_FLOW_INSTANT, 3, 1, INT64_MAX - 9, "far-a", 4, 0);
    ev(&far, TC_FLOW_INSTANT, 3, 2, INT64_MAX - 5, "far-b", 0, 4);
    assert_int_equal(tc_flow_table_resolve(&far, offset_of, NULL), 0);
    assert_int_equal(far.n_edges, 1);
    assert_true(far.edges[0].in->ts == INT64_MAX);
    tc_flow_table_free(&far);

    struct tc_flow_table x = {0}; /* host then remote, in either clock: no arrow */
    ev(&x, TC_FLOW_INSTANT, 0, 1, 100, "host", 4, 0);
    ev(&x, TC_FLOW_INSTANT, 2, 1, 500, "remote", 0, 4);
    assert_int_equal(tc_flow_table_resolve(&x, offset_of, NULL), 0);
    assert_int_equal(x.n_edges, 0);
    tc_flow_table_free(&x);
}

/* equal times: file order decides; an unplaced event is counted and left out */
static void test_ties_and_unplaced(void **state)
{
    (void)state;
    struct tc_flow_table t = {0};
    ev(&t, TC_FLOW_INSTANT, 0, 2, 10, "first", 1, 0);
    ev(&t, TC_FLOW_INSTANT, 0, 1, 10, "second", 1, 0);
    uint64_t id = 1;
    assert_int_equal(tc_flow_table_add(&t, TC_FLOW_INSTANT, 0, 3, NULL, 0, 0, "lost", &id, 1, NULL, 0), 0);
    assert_int_equal(tc_flow_table_resolve(&t, NULL, NULL), 0);
    assert_int_equal(t.n_edges, 1);
    assert_edge(&t, 0, "first", "second");
    assert_int_equal(t.unplaced, 1);
    tc_flow_table_free(&t);
}

/* ---- trace_ts ---- */

static Perfetto__Protos__ClockSnapshot__Clock *clk(uint32_t id, uint64_t v, int inc, uint64_t mult)
{
    Perfetto__Protos__ClockSnapshot__Clock *c = calloc(1, sizeof *c);
    perfetto__protos__clock_snapshot__clock__init(c);
    c->has_clock_id = c->has_timestamp = 1;
    c->clock_id = id;
    c->timestamp = v;
    if (inc)
        c->has_is_incremental = c->is_incremental = 1;
    if (mult)
        c->has_unit_multiplier_ns = 1, c->unit_multiplier_ns = mult;
    return c;
}

static int feed_snapshot(struct tc_trace_ts *t, uint32_t seq, Perfetto__Protos__ClockSnapshot__Clock **cs, size_t n)
{
    Perfetto__Protos__ClockSnapshot snap = PERFETTO__PROTOS__CLOCK_SNAPSHOT__INIT;
    snap.n_clocks = n;
    snap.clocks = cs;
    Perfetto__Protos__TracePacket p = PERFETTO__PROTOS__TRACE_PACKET__INIT;
    p.data_case = PERFETTO__PROTOS__TRACE_PACKET__DATA_CLOCK_SNAPSHOT;
    p.clock_snapshot = &snap;
    int64_t ts;
    int rc = tc_trace_ts_packet(t, seq, 0, &p, &ts);
    for (size_t i = 0; i < n; i++)
        free(cs[i]);
    return rc;
}

/* -N: clock not given, the sequence's default is N */
static int at(struct tc_trace_ts *t, uint32_t seq, int64_t clock, uint64_t v, int64_t *ts)
{
    Perfetto__Protos__TracePacket p = PERFETTO__PROTOS__TRACE_PACKET__INIT;
    p.has_timestamp = 1;
    p.timestamp = v;
    if (clock >= 0)
        p.has_timestamp_clock_id = 1, p.timestamp_clock_id = (uint32_t)clock;
    return tc_trace_ts_packet(t, seq, clock < 0 ? (uint32_t)-clock : 0, &p, ts);
}

static void test_ts_clocks(void **state)
{
    (void)state;
    struct tc_trace_ts t = {0};
    int64_t ts = -1;
    /* before any snapshot: BOOTTIME passes, a scoped clock cannot be placed */
    assert_int_equal(at(&t, 5, 6, 1234, &ts), 1);
    assert_int_equal(ts, 1234);
    assert_int_equal(at(&t, 5, 64, 1, &ts), 0);
    /* the host's snapshot of global clocks: MONOTONIC (3) = BOOTTIME - 300 */
    Perfetto__Protos__ClockSnapshot__Clock *host[] = {clk(6, 500, 0, 0), clk(3, 200, 0, 0)};
    assert_int_equal(feed_snapshot(&t, 1, host, 2), 0);
    assert_int_equal(at(&t, 5, 3, 250, &ts), 1);
    assert_int_equal(ts, 550);
    assert_int_equal(at(&t, 5, 4, 250, &ts), 0); /* a clock no snapshot has */
    /* the SDK's sequence: incremental clock 64 in microseconds from BOOTTIME 10,000 */
    Perfetto__Protos__ClockSnapshot__Clock *sdk[] = {clk(6, 10000, 0, 0), clk(64, 7, 1, 1000)};
    assert_int_equal(feed_snapshot(&t, 9, sdk, 2), 0);
    assert_int_equal(at(&t, 9, 64, 2, &ts), 1);
    assert_int_equal(ts, 12000);
    assert_int_equal(at(&t, 9, 64, 3, &ts), 1); /* deltas add up */
    assert_int_equal(ts, 15000);
    assert_int_equal(at(&t, 7, 64, 3, &ts), 0); /* clock 64 of another sequence is not this one */
    /* the sequence's default clock */
    assert_int_equal(at(&t, 9, -64, 1, &ts), 1);
    assert_int_equal(ts, 16000);
    /* a new snapshot restarts the running value */
    Perfetto__Protos__ClockSnapshot__Clock *again[] = {clk(6, 90000, 0, 0), clk(64, 100, 1, 1000)};
    assert_int_equal(feed_snapshot(&t, 9, again, 2), 0);
    assert_int_equal(at(&t, 9, 64, 1, &ts), 1);
    assert_int_equal(ts, 91000);
    /* a time before zero on the host clock cannot be placed */
    Perfetto__Protos__ClockSnapshot__Clock *abs[] = {clk(6, 1000, 0, 0), clk(65, 5000, 0, 0)};
    assert_int_equal(feed_snapshot(&t, 11, abs, 2), 0);
    assert_int_equal(at(&t, 11, 65, 5500, &ts), 1);
    assert_int_equal(ts, 1500);
    assert_int_equal(at(&t, 11, 65, 3000, &ts), 0);
    tc_trace_ts_free(&t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_chain_in_time_order),   cmocka_unit_test(test_inactive_terminating_ignored),
        cmocka_unit_test(test_end_event_binds_closed_slice), cmocka_unit_test(test_tracks_per_machine),
        cmocka_unit_test(test_machine_offset_orders), cmocka_unit_test(test_ties_and_unplaced),
        cmocka_unit_test(test_ts_clocks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
