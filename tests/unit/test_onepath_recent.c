/* test_onepath_recent.c: the recent-span store behind TracegateFleet.Spans
 * (ONEPATH_TRACE_RECENT_SPANS/_BYTES, onepath_recent_spans): spans kept without any export file,
 * the count and byte bounds pushing out the oldest (counted, and reported to a reader as missed),
 * a span too big to keep, reads with a cursor getting each span once and in order, a reader's own
 * span and byte budget (more = 1), a cursor from another process life, and shutdown emptying it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "onepath_test_util.h"
#include "tracegate/onepath.h"

static int setup(void **state)
{
    (void)state;
    onepath_trace_shutdown();
    ot_clear_env();
    setenv("ONEPATH_TRACE_ENABLE", "1", 1);
    setenv("ONEPATH_TRACE_SAMPLE_RATIO", "1.0", 1);
    setenv("ONEPATH_TRACE_FLUSH_MS", "10", 1);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    onepath_trace_shutdown();
    ot_clear_env();
    return 0;
}

static void span(const char *name, size_t pad)
{
    onepath_span_t s = onepath_span_start(name, ONEPATH_SPAN_KIND_INTERNAL, NULL);
    if (pad) {
        char *v = malloc(4001);
        assert_non_null(v);
        memset(v, 'x', 4000);
        v[4000] = 0;
        for (size_t i = 0; i < pad; i++) {
            char key[16];
            snprintf(key, sizeof key, "k%zu", i);
            onepath_span_set_attr_str(s, key, v);
        }
        free(v);
    }
    onepath_span_end(s);
}

static uint64_t g_want;
static int taken(void *arg)
{
    (void)arg;
    onepath_recent_stats_t st;
    onepath_recent_stats(&st);
    return st.added + st.too_big >= g_want;
}

static void wait_taken(uint64_t n)
{
    g_want = n;
    assert_int_equal(ot_wait_for(taken, NULL, 30000), 1);
}

/* reads after since; checks the names are `want` (space separated) in order */
static onepath_recent_read_t read_names(uint64_t since, size_t max_spans, size_t max_bytes, const char *want)
{
    char *out = NULL;
    size_t len = 0;
    onepath_recent_read_t r;
    assert_int_equal(onepath_recent_spans(since, max_spans, max_bytes, &out, &len, &r), ONEPATH_OK);
    char got[512] = "";
    size_t lines = 0;
    for (char *p = out, *end = out + len; p < end;) {
        char *nl = memchr(p, '\n', (size_t)(end - p));
        assert_non_null(nl);
        struct tj *j = tj_parse(p, (size_t)(nl - p));
        assert_non_null(j);
        const char *name = tj_str(j, "name");
        assert_non_null(name);
        snprintf(got + strlen(got), sizeof got - strlen(got), "%s%s", lines ? " " : "", name);
        tj_free(j);
        lines++;
        p = nl + 1;
    }
    assert_string_equal(got, want);
    assert_int_equal(r.spans, lines);
    free(out);
    return r;
}

static void test_off_by_default(void **state)
{
    (void)state;
    assert_int_equal(onepath_trace_init(NULL), ONEPATH_OK);
    span("a", 0);
    onepath_recent_stats_t st;
    assert_int_equal(onepath_recent_stats(&st), ONEPATH_OK);
    assert_int_equal(st.active, 0);
    char *out;
    size_t len;
    onepath_recent_read_t r;
    assert_int_equal(onepath_recent_spans(0, 10, 1 << 20, &out, &len, &r), ONEPATH_OK);
    assert_int_equal(r.active, 0);
    assert_int_equal(len, 0);
    free(out);
    assert_int_equal(onepath_recent_spans(0, 10, 1 << 20, NULL, &len, &r), ONEPATH_ERR_INVAL);
}

static void test_cursor_and_count_bound(void **state)
{
    (void)state;
    setenv("ONEPATH_TRACE_RECENT_SPANS", "3", 1);
    assert_int_equal(onepath_trace_init(NULL), ONEPATH_OK); /* no export file: the store alone */
    onepath_recent_stats_t st0;
    onepath_recent_stats(&st0);
    assert_int_equal(st0.active, 1);
    uint64_t base = st0.last_id, done = st0.added + st0.too_big;
    span("s1", 0);
    span("s2", 0);
    wait_taken(done + 2);
    onepath_recent_read_t r = read_names(base, 100, 1 << 20, "s1 s2");
    assert_int_equal(r.missed, 0);
    assert_int_equal(r.more, 0);
    uint64_t cur = r.next_since;
    r = read_names(cur, 100, 1 << 20, ""); /* nothing new: nothing repeated */
    assert_int_equal(r.next_since, cur);
    for (int i = 3; i <= 7; i++) {
        char n[8];
        snprintf(n, sizeof n, "s%d", i);
        span(n, 0);
    }
    wait_taken(done + 7);
    /* only the last three are held: s3 and s4 were pushed out before this reader came */
    r = read_names(cur, 100, 1 << 20, "s5 s6 s7");
    assert_int_equal(r.missed, 2);
    assert_int_equal(r.next_since, cur + 5);
    /* a reader's own budget: one at a time, in order, more until the end */
    r = read_names(cur, 1, 1 << 20, "s5");
    assert_int_equal(r.more, 1);
    r = read_names(r.next_since, 1, 1 << 20, "s6");
    r = read_names(r.next_since, 1, 1 << 20, "s7");
    assert_int_equal(r.more, 0);
    /* a cursor from a process life with more spans: read from the start */
    r = read_names(r.next_since + 1000, 100, 1 << 20, "s5 s6 s7");
    onepath_recent_stats_t st;
    onepath_recent_stats(&st);
    assert_int_equal(st.kept, 3);
    assert_int_equal(st.evicted - st0.evicted, 4); /* s1..s4 */
    assert_true(st.read - st0.read >= 8);
    onepath_trace_shutdown();
    onepath_recent_stats(&st);
    assert_int_equal(st.active, 0);
    assert_int_equal(st.kept, 0);
}

static void test_byte_bound_and_too_big(void **state)
{
    (void)state;
    setenv("ONEPATH_TRACE_RECENT_SPANS", "100", 1);
    setenv("ONEPATH_TRACE_RECENT_BYTES", "20000", 1);
    assert_int_equal(onepath_trace_init(NULL), ONEPATH_OK);
    onepath_recent_stats_t st0;
    onepath_recent_stats(&st0);
    uint64_t base = st0.last_id, done = st0.added + st0.too_big;
    span("p1", 2); /* ~8 KB each: two fit in 20000 bytes, not three */
    span("p2", 2);
    span("p3", 2);
    span("huge", 20); /* ~80 KB: longer than any line the store keeps */
    span("small", 0);
    wait_taken(done + 5);
    onepath_recent_stats_t st;
    onepath_recent_stats(&st);
    assert_int_equal(st.too_big - st0.too_big, 1);
    assert_true(st.bytes <= 20000);
    /* p1 pushed out, huge never kept: both reported as missed */
    onepath_recent_read_t r = read_names(base, 100, 1 << 20, "p2 p3 small");
    assert_int_equal(r.missed, 2);
    /* a reader's byte budget smaller than one span is not a wall: the span is skipped (missed) */
    r = read_names(base + 1, 100, 100, "");
    assert_int_equal(r.next_since, base + 2);
    assert_int_equal(r.more, 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_off_by_default, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cursor_and_count_bound, setup, teardown),
        cmocka_unit_test_setup_teardown(test_byte_bound_and_too_big, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
