/* test_onepath_spans.c: the span stack and sampling: nested spans inside synchronous callbacks,
 * explicit parents carried across threads, handles used on the wrong thread or twice, the stack
 * depth limit, head sampling statistics at ratios 0, 0.01, 0.5 and 1 (6-sigma binomial bounds),
 * inheritance of the sampled flag (local and remote parents), ratio 0 keeping the stack. */
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "onepath_test_util.h"
#include "tracegate/onepath.h"

static void start_tracing(double ratio)
{
    onepath_trace_shutdown();
    ot_clear_env();
    setenv("ONEPATH_TRACE_ENABLE", "1", 1);
    onepath_trace_opts_t o = ONEPATH_TRACE_OPTS_DEFAULT;
    o.sample_ratio = ratio;
    assert_int_equal(onepath_trace_init(&o), ONEPATH_OK);
    assert_true(onepath_trace_enabled());
}

static int teardown(void **state)
{
    (void)state;
    onepath_trace_shutdown();
    ot_clear_env();
    return 0;
}

static onepath_trace_ctx_t current(void)
{
    onepath_trace_ctx_t c;
    assert_int_equal(onepath_trace_current_ctx(&c), 1);
    return c;
}

static void test_disabled_is_noop(void **state)
{
    (void)state;
    onepath_trace_shutdown();
    ot_clear_env();
    assert_int_equal(onepath_trace_init(NULL), ONEPATH_OK);
    assert_false(onepath_trace_enabled());
    onepath_span_t s = onepath_span_start("x", ONEPATH_SPAN_KIND_INTERNAL, NULL);
    assert_null(s);
    onepath_trace_ctx_t c;
    assert_int_equal(onepath_trace_current_ctx(&c), 0);
    /* every call on NULL is harmless */
    onepath_span_set_attr_str(NULL, "k", "v");
    onepath_span_set_attr_i64(NULL, "k", 1);
    onepath_span_set_attr_f64(NULL, "k", 1.5);
    onepath_span_set_status(NULL, ONEPATH_SPAN_STATUS_ERROR, "m");
    onepath_span_add_event(NULL, "e");
    assert_false(onepath_span_is_recording(NULL));
    onepath_span_end(NULL);
    assert_int_equal(onepath_trace_current_ctx(NULL), 0);
}

/* a "message callback" that starts a child span and calls a nested callback */
struct chain {
    onepath_trace_ctx_t seen[4];
    int depth;
};

static void nested_cb(struct chain *ch, int level)
{
    onepath_span_t s = onepath_span_start("level", level == 0 ? ONEPATH_SPAN_KIND_CONSUMER : ONEPATH_SPAN_KIND_INTERNAL,
                                          NULL);
    assert_non_null(s);
    ch->seen[level] = current();
    if (level + 1 < 4)
        nested_cb(ch, level + 1);
    /* after the inner callback returned, this span is on top again */
    onepath_trace_ctx_t again = current();
    assert_memory_equal(&again, &ch->seen[level], sizeof again);
    onepath_span_end(s);
}

static void test_stack_nested_callbacks(void **state)
{
    (void)state;
    start_tracing(1.0);
    onepath_trace_ctx_t c;
    assert_int_equal(onepath_trace_current_ctx(&c), 0);
    struct chain ch;
    memset(&ch, 0, sizeof ch);
    nested_cb(&ch, 0);
    assert_int_equal(onepath_trace_current_ctx(&c), 0); /* all popped */
    for (int i = 0; i < 4; i++) {
        assert_true(onepath_trace_ctx_valid(&ch.seen[i]));
        assert_memory_equal(ch.seen[i].trace_id, ch.seen[0].trace_id, 16); /* one trace */
        assert_int_equal(ch.seen[i].flags & 1, 1);
        for (int j = 0; j < i; j++)
            assert_memory_not_equal(ch.seen[i].span_id, ch.seen[j].span_id, 8);
    }
    /* a new root afterwards is a new trace */
    onepath_span_t r = onepath_span_start("root2", ONEPATH_SPAN_KIND_INTERNAL, NULL);
    assert_memory_not_equal(current().trace_id, ch.seen[0].trace_id, 16);
    onepath_span_end(r);
}

static void test_end_out_of_order(void **state)
{
    (void)state;
    start_tracing(1.0);
    onepath_span_t a = onepath_span_start("a", ONEPATH_SPAN_KIND_INTERNAL, NULL);
    onepath_trace_ctx_t ca = current();
    onepath_span_t b = onepath_span_start("b", ONEPATH_SPAN_KIND_INTERNAL, NULL);
    onepath_span_t c = onepath_span_start("c", ONEPATH_SPAN_KIND_INTERNAL, NULL);
    (void)c;
    /* ending b also ends c, which was left open above it */
    onepath_span_end(b);
    onepath_trace_ctx_t top = current();
    assert_memory_equal(&top, &ca, sizeof top);
    /* ending b or c again is a no-op */
    onepath_span_end(b);
    onepath_span_end(c);
    top = current();
    assert_memory_equal(&top, &ca, sizeof top);
    onepath_span_end(a);
    onepath_trace_ctx_t none;
    assert_int_equal(onepath_trace_current_ctx(&none), 0);
    onepath_span_end(a);
}

static void test_depth_limit(void **state)
{
    (void)state;
    start_tracing(1.0);
    onepath_span_t s[64];
    for (int i = 0; i < 64; i++) {
        s[i] = onepath_span_start("d", ONEPATH_SPAN_KIND_INTERNAL, NULL);
        assert_non_null(s[i]);
    }
    onepath_trace_ctx_t top = current();
    assert_null(onepath_span_start("too deep", ONEPATH_SPAN_KIND_INTERNAL, NULL));
    onepath_trace_ctx_t still = current();
    assert_memory_equal(&still, &top, sizeof top);
    onepath_span_end(s[0]);
    onepath_trace_ctx_t none;
    assert_int_equal(onepath_trace_current_ctx(&none), 0);
}

struct xthread {
    onepath_trace_ctx_t parent;
    onepath_span_t foreign; /* a handle of the main thread */
    onepath_trace_ctx_t child;
    int had_ctx_before, had_ctx_after, foreign_recording;
};

static void *worker(void *arg)
{
    struct xthread *x = arg;
    onepath_trace_ctx_t c;
    x->had_ctx_before = onepath_trace_current_ctx(&c); /* stacks are per thread */
    /* the main thread's handle means nothing here */
    onepath_span_end(x->foreign);
    onepath_span_set_attr_str(x->foreign, "k", "v");
    x->foreign_recording = onepath_span_is_recording(x->foreign);
    onepath_span_t s = onepath_span_start("worker", ONEPATH_SPAN_KIND_CONSUMER, &x->parent);
    onepath_trace_current_ctx(&x->child);
    onepath_span_end(s);
    x->had_ctx_after = onepath_trace_current_ctx(&c);
    return NULL;
}

static void test_explicit_parent_across_threads(void **state)
{
    (void)state;
    start_tracing(1.0);
    onepath_span_t s = onepath_span_start("dispatch", ONEPATH_SPAN_KIND_INTERNAL, NULL);
    struct xthread x;
    memset(&x, 0, sizeof x);
    assert_int_equal(onepath_trace_current_ctx(&x.parent), 1);
    onepath_trace_ctx_t mine = x.parent;
    x.foreign = s;
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, worker, &x), 0);
    pthread_join(th, NULL);
    assert_int_equal(x.had_ctx_before, 0);
    assert_int_equal(x.had_ctx_after, 0);
    assert_int_equal(x.foreign_recording, 0);
    assert_memory_equal(x.child.trace_id, mine.trace_id, 16);
    assert_memory_not_equal(x.child.span_id, mine.span_id, 8);
    assert_int_equal(x.child.flags & 1, 1);
    /* the worker's span_end on our handle did not pop our stack */
    onepath_trace_ctx_t top = current();
    assert_memory_equal(&top, &mine, sizeof top);
    onepath_span_end(s);
}

static void test_explicit_parent_overrides_stack(void **state)
{
    (void)state;
    start_tracing(1.0);
    onepath_span_t outer = onepath_span_start("outer", ONEPATH_SPAN_KIND_INTERNAL, NULL);
    onepath_trace_ctx_t remote;
    assert_int_equal(onepath_trace_ctx_from_string("00-11111111111111111111111111111111-2222222222222222-01", &remote),
                     ONEPATH_OK);
    onepath_span_t in = onepath_span_start("in", ONEPATH_SPAN_KIND_SERVER, &remote);
    assert_memory_equal(current().trace_id, remote.trace_id, 16);
    onepath_span_end(in);
    /* an invalid explicit parent is ignored: the stack top is the parent */
    onepath_trace_ctx_t zero;
    memset(&zero, 0, sizeof zero);
    onepath_trace_ctx_t o = current();
    onepath_span_t z = onepath_span_start("z", ONEPATH_SPAN_KIND_INTERNAL, &zero);
    assert_memory_equal(current().trace_id, o.trace_id, 16);
    onepath_span_end(z);
    onepath_span_end(outer);
}

static void test_remote_flag_inherited(void **state)
{
    (void)state;
    onepath_trace_ctx_t sampled, unsampled;
    assert_int_equal(onepath_trace_ctx_from_string("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", &sampled),
                     ONEPATH_OK);
    assert_int_equal(
        onepath_trace_ctx_from_string("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00", &unsampled),
        ONEPATH_OK);
    /* ratio 0 here, but the trace was sampled upstream: the child is sampled */
    start_tracing(0.0);
    onepath_span_t s = onepath_span_start("c", ONEPATH_SPAN_KIND_CONSUMER, &sampled);
    assert_int_equal(current().flags & 1, 1);
    onepath_span_t g = onepath_span_start("grandchild", ONEPATH_SPAN_KIND_INTERNAL, NULL);
    assert_int_equal(current().flags & 1, 1);
    onepath_span_end(g);
    onepath_span_end(s);
    /* ratio 1 here, but upstream did not sample: the child is not sampled */
    start_tracing(1.0);
    s = onepath_span_start("c", ONEPATH_SPAN_KIND_CONSUMER, &unsampled);
    assert_int_equal(current().flags & 1, 0);
    onepath_span_end(s);
}

static void test_ratio0_keeps_stack(void **state)
{
    (void)state;
    start_tracing(0.0);
    onepath_span_t a = onepath_span_start("a", ONEPATH_SPAN_KIND_PRODUCER, NULL);
    assert_non_null(a); /* the stack is kept ... */
    assert_false(onepath_span_is_recording(a)); /* ... but nothing is recorded */
    onepath_trace_ctx_t ca = current();
    assert_int_equal(ca.flags & 1, 0);
    onepath_span_t b = onepath_span_start("b", ONEPATH_SPAN_KIND_INTERNAL, NULL);
    assert_memory_equal(current().trace_id, ca.trace_id, 16); /* context still propagates */
    onepath_span_set_attr_str(b, "k", "v");                    /* no-ops */
    onepath_span_add_event(b, "e");
    onepath_span_end(b);
    onepath_trace_ctx_t top = current();
    assert_memory_equal(&top, &ca, sizeof top);
    onepath_span_end(a);
}

static void check_ratio(double ratio, long n)
{
    start_tracing(ratio);
    long sampled = 0;
    for (long i = 0; i < n; i++) {
        onepath_span_t root = onepath_span_start("r", ONEPATH_SPAN_KIND_INTERNAL, NULL);
        onepath_trace_ctx_t rc = current();
        onepath_span_t child = onepath_span_start("c", ONEPATH_SPAN_KIND_INTERNAL, NULL);
        onepath_trace_ctx_t cc = current();
        assert_int_equal(cc.flags & 1, rc.flags & 1); /* decided once per trace */
        onepath_span_end(child);
        onepath_span_end(root);
        sampled += rc.flags & 1;
    }
    double mean = ratio * (double)n, sigma = sqrt((double)n * ratio * (1 - ratio));
    print_message("ratio %.2f: %ld of %ld sampled (expected %.0f +- %.0f)\n", ratio, sampled, n, mean, 6 * sigma);
    if (ratio == 0.0)
        assert_int_equal(sampled, 0);
    else if (ratio == 1.0)
        assert_int_equal(sampled, n);
    else
        assert_true(fabs((double)sampled - mean) <= 6 * sigma);
}

static void test_sampling_ratios(void **state)
{
    (void)state;
    check_ratio(0.0, 20000);
    check_ratio(0.01, 100000);
    check_ratio(0.5, 100000);
    check_ratio(1.0, 20000);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_disabled_is_noop, teardown),
        cmocka_unit_test_teardown(test_stack_nested_callbacks, teardown),
        cmocka_unit_test_teardown(test_end_out_of_order, teardown),
        cmocka_unit_test_teardown(test_depth_limit, teardown),
        cmocka_unit_test_teardown(test_explicit_parent_across_threads, teardown),
        cmocka_unit_test_teardown(test_explicit_parent_overrides_stack, teardown),
        cmocka_unit_test_teardown(test_remote_flag_inherited, teardown),
        cmocka_unit_test_teardown(test_ratio0_keeps_stack, teardown),
        cmocka_unit_test_teardown(test_sampling_ratios, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
