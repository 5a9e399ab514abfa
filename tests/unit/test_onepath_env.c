/* test_onepath_env.c: the ONEPATH_* environment: defaults, boolean and ratio parsing (also under a
 * comma-decimal LC_NUMERIC), service
 * name and paths, AUTO_INJECT, lazy init at the first send/receive or span (and its failure, or a
 * failed explicit init, retried only after shutdown), later environment changes ignored until shutdown + init, re-init with new
 * settings, opts overriding the environment, and "disabled" starting no thread and creating no
 * file. */
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "onepath_test_util.h"
#include "tracegate/onepath.h"

static char g_dir[512];

static int setup(void **state)
{
    (void)state;
    onepath_trace_shutdown();
    ot_clear_env();
    const char *d = ot_tmpdir("env");
    if (!d)
        return -1;
    snprintf(g_dir, sizeof g_dir, "%s", d);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    onepath_trace_shutdown();
    ot_clear_env();
    ot_rmdir(g_dir);
    return 0;
}

static const char *file(const char *name)
{
    static char p[4][700];
    static int i;
    i = (i + 1) % 4;
    snprintf(p[i], sizeof p[i], "%s/%s", g_dir, name);
    return p[i];
}

static int exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

static int threads(void)
{
    DIR *d = opendir("/proc/self/task");
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL)
        if (e->d_name[0] != '.')
            n++;
    if (d)
        closedir(d);
    return n;
}

/* Sampled flag of a fresh root span (-1 when tracing is off). */
static int root_sampled(void)
{
    onepath_span_t s = onepath_span_start("probe", ONEPATH_SPAN_KIND_INTERNAL, NULL);
    if (!s)
        return -1;
    onepath_trace_ctx_t c;
    assert_int_equal(onepath_trace_current_ctx(&c), 1);
    onepath_span_end(s);
    return c.flags & 1;
}

/* Spans in an NDJSON file, and the service name of the first. */
static long spans_in(const char *path, char *service, size_t cap)
{
    char **lines;
    int complete;
    long n = ot_read_lines(path, &lines, &complete);
    if (n < 0)
        return -1;
    assert_true(complete);
    if (service && cap)
        service[0] = 0;
    for (long i = 0; i < n; i++) {
        struct tj *v = tj_parse(lines[i], strlen(lines[i]));
        assert_non_null(v);
        if (i == 0 && service)
            snprintf(service, cap, "%s", tj_str(tj_get(v, "resource"), "service.name"));
        tj_free(v);
    }
    ot_free_lines(lines, n);
    return n;
}

static void reinit(void)
{
    onepath_trace_shutdown();
    assert_int_equal(onepath_trace_init(NULL), ONEPATH_OK);
}

static void test_defaults(void **state)
{
    (void)state;
    assert_int_equal(onepath_trace_init(NULL), ONEPATH_OK);
    assert_false(onepath_trace_enabled());
    assert_false(onepath_metrics_enabled());
    assert_int_equal(root_sampled(), -1);
    onepath_export_stats_t st;
    char p[64] = "x";
    assert_int_equal(onepath_export_stats(ONEPATH_EXPORT_SPANS, &st, p, sizeof p), ONEPATH_OK);
    assert_string_equal(p, "");
    assert_int_equal(st.active, 0);
    assert_int_equal(onepath_export_stats(ONEPATH_EXPORT_METRICS, &st, p, sizeof p), ONEPATH_OK);
    assert_int_equal(onepath_export_stats(7, &st, p, sizeof p), ONEPATH_ERR_INVAL);
    assert_int_equal(onepath_export_stats(ONEPATH_EXPORT_SPANS, NULL, p, sizeof p), ONEPATH_ERR_INVAL);
    /* ENABLE=1 alone: tracing on, default ratio 0.0: spans keep the stack, none sampled */
    setenv("ONEPATH_TRACE_ENABLE", "1", 1);
    reinit();
    assert_true(onepath_trace_enabled());
    for (int i = 0; i < 100; i++)
        assert_int_equal(root_sampled(), 0);
}

static void test_booleans(void **state)
{
    (void)state;
    static const struct {
        const char *v;
        int on;
    } cases[] = {{"1", 1}, {"true", 1}, {"ON", 1}, {"yes", 1}, {"0", 0},  {"false", 0},
                 {"off", 0}, {"no", 0},  {"2", 0},  {"maybe", 0}, {"", 0}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        setenv("ONEPATH_TRACE_ENABLE", cases[i].v, 1);
        setenv("ONEPATH_METRICS_ENABLE", cases[i].v, 1);
        reinit();
        if (onepath_trace_enabled() != cases[i].on || onepath_metrics_enabled() != cases[i].on)
            fail_msg("ENABLE=%s gave %d/%d", cases[i].v, onepath_trace_enabled(), onepath_metrics_enabled());
    }
}

static void test_ratio_parsing(void **state)
{
    (void)state;
    setenv("ONEPATH_TRACE_ENABLE", "1", 1);
    static const struct {
        const char *v;
        int sampled;
    } cases[] = {{"1.0", 1}, {"1", 1}, {"2.5", 1}, {"0", 0}, {"0.0", 0}, {"-1", 0}, {"abc", 0}, {"0.5x", 0}, {"nan", 0}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        setenv("ONEPATH_TRACE_SAMPLE_RATIO", cases[i].v, 1);
        reinit();
        for (int k = 0; k < 50; k++)
            if (root_sampled() != cases[i].sampled)
                fail_msg("RATIO=%s: expected sampled=%d", cases[i].v, cases[i].sampled);
    }
}

/* The ratio is read with a '.' whatever LC_NUMERIC the application set before the (lazy) init:
 * under a comma-decimal locale "1.0" was taken for "1" followed by junk, i.e. ratio 0.0. */
static void test_ratio_under_comma_locale(void **state)
{
    (void)state;
    if (!ot_comma_locale_begin())
        skip();
    setenv("ONEPATH_TRACE_ENABLE", "1", 1);
    setenv("ONEPATH_TRACE_SAMPLE_RATIO", "1.0", 1);
    reinit();
    int sampled = root_sampled();
    setenv("ONEPATH_TRACE_SAMPLE_RATIO", "1,0", 1); /* not a ratio in the documented syntax */
    reinit();
    int comma = root_sampled();
    ot_comma_locale_end();
    assert_int_equal(sampled, 1);
    assert_int_equal(comma, 0);
}

static void test_service_and_path(void **state)
{
    (void)state;
    setenv("ONEPATH_TRACE_ENABLE", "1", 1);
    setenv("ONEPATH_TRACE_SAMPLE_RATIO", "1.0", 1);
    setenv("ONEPATH_TRACE_NDJSON_PATH", file("a.ndjson"), 1);
    setenv("ONEPATH_TRACE_SERVICE_NAME", "sensor", 1);
    reinit();
    assert_int_equal(root_sampled(), 1);
    onepath_trace_shutdown();
    char svc[64];
    assert_int_equal(spans_in(file("a.ndjson"), svc, sizeof svc), 1);
    assert_string_equal(svc, "sensor");
}

static void test_auto_inject(void **state)
{
    (void)state;
    setenv("ONEPATH_TRACE_ENABLE", "1", 1);
    reinit();
    uint8_t buf[64];
    onepath_send_t s;
    onepath_span_t sp = onepath_span_start("p", ONEPATH_SPAN_KIND_PRODUCER, NULL);
    onepath_trace_ctx_t cur;
    onepath_trace_current_ctx(&cur);
    assert_int_equal(onepath_send_begin(&s, "user", 4, buf, sizeof buf), ONEPATH_OK);
    assert_ptr_equal(s.attachment, buf); /* default AUTO_INJECT=1: a TLV */
    onepath_tlv_t t;
    assert_int_equal(onepath_tlv_decode(s.attachment, s.attachment_len, &t), ONEPATH_OK);
    assert_true(t.has_traceparent);
    assert_memory_equal(&t.traceparent, &cur, sizeof cur); /* propagated even unsampled (flags 0) */
    assert_true(t.has_send_ts);
    assert_int_equal(t.user_len, 4);
    onepath_send_end(&s, 10, 1);
    onepath_span_end(sp);

    setenv("ONEPATH_TRACE_AUTO_INJECT", "0", 1);
    reinit();
    sp = onepath_span_start("p", ONEPATH_SPAN_KIND_PRODUCER, NULL);
    static const char user[] = "user";
    assert_int_equal(onepath_send_begin(&s, user, 4, buf, sizeof buf), ONEPATH_OK);
    assert_ptr_equal(s.attachment, user); /* the user's own bytes, untouched */
    assert_int_equal(s.attachment_len, 4);
    onepath_send_end(&s, 10, 1);
    onepath_span_end(sp);
}

static void test_lazy_init(void **state)
{
    (void)state;
    setenv("ONEPATH_TRACE_ENABLE", "1", 1);
    setenv("ONEPATH_TRACE_SAMPLE_RATIO", "1", 1);
    setenv("ONEPATH_TRACE_NDJSON_PATH", file("lazy.ndjson"), 1);
    setenv("ONEPATH_METRICS_ENABLE", "1", 1);
    /* nobody calls init: registering a metric does not start OnePath (NULL, as the seed says) ... */
    assert_false(onepath_trace_enabled());
    assert_null(onepath_counter_register("lazy.count", NULL));
    assert_false(onepath_trace_enabled());
    assert_false(exists(file("lazy.ndjson")));
    /* ... the first receive does */
    onepath_recv_t r;
    onepath_recv(&r, "x", 1, 1);
    assert_true(onepath_trace_enabled());
    assert_true(onepath_metrics_enabled());
    assert_true(exists(file("lazy.ndjson")));
    assert_int_equal(root_sampled(), 1);
    /* later changes of the environment are ignored ... */
    setenv("ONEPATH_TRACE_ENABLE", "0", 1);
    setenv("ONEPATH_TRACE_SERVICE_NAME", "changed", 1);
    assert_int_equal(onepath_trace_init(NULL), ONEPATH_OK); /* idempotent: a no-op */
    assert_true(onepath_trace_enabled());
    assert_int_equal(root_sampled(), 1);
    onepath_trace_shutdown();
    char svc[64];
    assert_int_equal(spans_in(file("lazy.ndjson"), svc, sizeof svc), 2);
    assert_string_equal(svc, "onepath");
    /* ... until shutdown: the next send initialises lazily again, with the new environment */
    onepath_send_t s;
    uint8_t buf[64];
    onepath_send_begin(&s, "u", 1, buf, sizeof buf);
    onepath_send_end(&s, 1, 1);
    assert_false(onepath_trace_enabled());
    assert_true(onepath_metrics_enabled());
}

static void test_lazy_init_by_span(void **state)
{
    (void)state;
    setenv("ONEPATH_TRACE_ENABLE", "1", 1);
    setenv("ONEPATH_TRACE_SAMPLE_RATIO", "1", 1);
    setenv("ONEPATH_TRACE_NDJSON_PATH", file("span.ndjson"), 1);
    /* an application whose first OnePath call is its own span: that span is traced too */
    assert_false(onepath_trace_enabled());
    assert_int_equal(root_sampled(), 1);
    assert_true(onepath_trace_enabled());
    onepath_trace_shutdown();
    assert_int_equal(spans_in(file("span.ndjson"), NULL, 0), 1);
    /* with tracing off, span_start after the lazy init is just a branch: NULL */
    setenv("ONEPATH_TRACE_ENABLE", "0", 1);
    assert_int_equal(root_sampled(), -1);
    assert_false(onepath_trace_enabled());
    assert_int_equal(root_sampled(), -1);
}

static void test_failed_init_blocks_lazy(void **state)
{
    (void)state;
    setenv("ONEPATH_TRACE_ENABLE", "1", 1);
    onepath_trace_opts_t o = {NULL, file("missing/x.ndjson"), 1.0, 0};
    assert_int_equal(onepath_trace_init(&o), ONEPATH_ERR_IO);
    /* the environment alone would work, but after a failed init nothing starts by itself */
    assert_int_equal(root_sampled(), -1);
    onepath_send_t s;
    uint8_t buf[64];
    onepath_send_begin(&s, "u", 1, buf, sizeof buf);
    onepath_send_end(&s, 1, 1);
    assert_false(onepath_trace_enabled());
    onepath_trace_shutdown(); /* re-arms it */
    assert_int_equal(root_sampled(), 0);
    assert_true(onepath_trace_enabled());
}

static void test_lazy_init_failure(void **state)
{
    (void)state;
    const char *sub = file("later");
    char path[800];
    snprintf(path, sizeof path, "%s/spans.ndjson", sub);
    setenv("ONEPATH_TRACE_ENABLE", "1", 1);
    setenv("ONEPATH_TRACE_SAMPLE_RATIO", "1", 1);
    setenv("ONEPATH_TRACE_NDJSON_PATH", path, 1);
    /* the directory does not exist: the lazy init fails, the message still goes out untraced */
    onepath_send_t s;
    uint8_t buf[64];
    assert_int_equal(onepath_send_begin(&s, "user", 4, buf, sizeof buf), ONEPATH_OK);
    assert_false(onepath_trace_enabled());
    assert_int_equal(s.attachment_len, 4);
    assert_memory_equal(s.attachment, "user", 4);
    onepath_send_end(&s, 4, 1);
    /* not retried at every message, even once the directory exists ... */
    assert_int_equal(mkdir(sub, 0700), 0);
    onepath_send_begin(&s, "user", 4, buf, sizeof buf);
    onepath_send_end(&s, 4, 1);
    assert_false(onepath_trace_enabled());
    /* ... but after a shutdown */
    onepath_trace_shutdown();
    onepath_send_begin(&s, "user", 4, buf, sizeof buf);
    onepath_send_end(&s, 4, 1);
    assert_true(onepath_trace_enabled());
    onepath_trace_shutdown();
    unlink(path);
    rmdir(sub);
}

static void test_reinit_new_settings(void **state)
{
    (void)state;
    setenv("ONEPATH_TRACE_ENABLE", "1", 1);
    setenv("ONEPATH_TRACE_SAMPLE_RATIO", "1", 1);
    setenv("ONEPATH_TRACE_NDJSON_PATH", file("one.ndjson"), 1);
    setenv("ONEPATH_TRACE_SERVICE_NAME", "first", 1);
    reinit();
    root_sampled();
    /* a span open across the shutdown is not exported by the next generation */
    onepath_span_t open_across = onepath_span_start("across", ONEPATH_SPAN_KIND_INTERNAL, NULL);
    setenv("ONEPATH_TRACE_NDJSON_PATH", file("two.ndjson"), 1);
    setenv("ONEPATH_TRACE_SERVICE_NAME", "second", 1);
    reinit();
    root_sampled();
    root_sampled();
    onepath_span_end(open_across);
    onepath_trace_shutdown();
    char svc[64];
    assert_int_equal(spans_in(file("one.ndjson"), svc, sizeof svc), 1);
    assert_string_equal(svc, "first");
    assert_int_equal(spans_in(file("two.ndjson"), svc, sizeof svc), 2);
    assert_string_equal(svc, "second");
}

static void test_opts_override_env(void **state)
{
    (void)state;
    setenv("ONEPATH_TRACE_ENABLE", "1", 1);
    setenv("ONEPATH_TRACE_SAMPLE_RATIO", "0", 1);
    setenv("ONEPATH_TRACE_NDJSON_PATH", file("env.ndjson"), 1);
    setenv("ONEPATH_TRACE_SERVICE_NAME", "envsvc", 1);
    onepath_trace_opts_t o = {"optsvc", file("opt.ndjson"), 1.0, 8};
    assert_int_equal(onepath_trace_init(&o), ONEPATH_OK);
    assert_int_equal(root_sampled(), 1);
    onepath_trace_shutdown();
    char svc[64];
    assert_int_equal(spans_in(file("opt.ndjson"), svc, sizeof svc), 1);
    assert_string_equal(svc, "optsvc");
    assert_false(exists(file("env.ndjson")));
    /* an empty path in opts turns file export off whatever the environment says */
    onepath_trace_opts_t off = {NULL, "", 1.0, 0};
    assert_int_equal(onepath_trace_init(&off), ONEPATH_OK);
    onepath_span_t s = onepath_span_start("x", ONEPATH_SPAN_KIND_INTERNAL, NULL);
    assert_false(onepath_span_is_recording(s));
    onepath_span_end(s);
    onepath_trace_shutdown();
    assert_false(exists(file("env.ndjson")));
    /* opts do not switch tracing on: ONEPATH_TRACE_ENABLE is the master switch */
    unsetenv("ONEPATH_TRACE_ENABLE");
    assert_int_equal(onepath_trace_init(&o), ONEPATH_OK);
    assert_false(onepath_trace_enabled());
}

/* The spec's options struct, as a program written to the spec declares it: its layout must be
 * onepath_trace_opts_t's, or such a program (or one built against it) passes garbage. */
struct spec_opts {
    const char *service_name;
    const char *ndjson_path;
    double sample_ratio;
    size_t ring_capacity;
};
_Static_assert(sizeof(onepath_trace_opts_t) == sizeof(struct spec_opts), "the spec's four fields, nothing more");
_Static_assert(offsetof(onepath_trace_opts_t, ring_capacity) == offsetof(struct spec_opts, ring_capacity),
               "the spec's field order");

/* A program that sets the spec's four fields of a struct it did not zero (as the spec lets it)
 * gets exactly what it set: before, two more pointer fields were read from whatever the memory
 * held, and the init crashed on them. */
static void test_spec_opts_set_field_by_field(void **state)
{
    (void)state;
    setenv("ONEPATH_TRACE_ENABLE", "1", 1);
    onepath_trace_opts_t *o = malloc(sizeof *o + 64);
    assert_non_null(o);
    memset(o, 0xa5, sizeof *o + 64); /* what an uninitialised struct may hold */
    o->service_name = "specsvc";
    o->ndjson_path = file("spec.ndjson");
    o->sample_ratio = 1.0;
    o->ring_capacity = 16;
    assert_int_equal(onepath_trace_init(o), ONEPATH_OK);
    free(o);
    assert_int_equal(root_sampled(), 1);
    onepath_trace_shutdown();
    char svc[64];
    assert_int_equal(spans_in(file("spec.ndjson"), svc, sizeof svc), 1);
    assert_string_equal(svc, "specsvc");
}

static void test_disabled_starts_nothing(void **state)
{
    (void)state;
    int t0 = threads();
    setenv("ONEPATH_TRACE_ENABLE", "0", 1);
    setenv("ONEPATH_TRACE_NDJSON_PATH", file("no.ndjson"), 1);
    setenv("ONEPATH_METRICS_ENABLE", "0", 1);
    setenv("ONEPATH_METRICS_NDJSON_PATH", file("nom.ndjson"), 1);
    assert_int_equal(onepath_trace_init(NULL), ONEPATH_OK);
    onepath_send_t s;
    uint8_t buf[64];
    assert_int_equal(onepath_send_begin(&s, "u", 1, buf, sizeof buf), ONEPATH_OK);
    assert_int_equal(s.attachment_len, 1);
    onepath_send_end(&s, 1, 1);
    assert_int_equal(threads(), t0);
    assert_false(exists(file("no.ndjson")));
    assert_false(exists(file("nom.ndjson")));
    /* enabled without paths: still no thread */
    setenv("ONEPATH_TRACE_ENABLE", "1", 1);
    setenv("ONEPATH_METRICS_ENABLE", "1", 1);
    unsetenv("ONEPATH_TRACE_NDJSON_PATH");
    unsetenv("ONEPATH_METRICS_NDJSON_PATH");
    reinit();
    assert_int_equal(threads(), t0);
    /* with both paths: one exporter thread each, gone after shutdown */
    setenv("ONEPATH_TRACE_NDJSON_PATH", file("yes.ndjson"), 1);
    setenv("ONEPATH_METRICS_NDJSON_PATH", file("yesm.ndjson"), 1);
    reinit();
    assert_int_equal(threads(), t0 + 2);
    onepath_trace_shutdown();
    assert_int_equal(threads(), t0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_defaults, setup, teardown),
        cmocka_unit_test_setup_teardown(test_booleans, setup, teardown),
        cmocka_unit_test_setup_teardown(test_ratio_parsing, setup, teardown),
        cmocka_unit_test_setup_teardown(test_ratio_under_comma_locale, setup, teardown),
        cmocka_unit_test_setup_teardown(test_service_and_path, setup, teardown),
        cmocka_unit_test_setup_teardown(test_auto_inject, setup, teardown),
        cmocka_unit_test_setup_teardown(test_lazy_init, setup, teardown),
        cmocka_unit_test_setup_teardown(test_lazy_init_by_span, setup, teardown),
        cmocka_unit_test_setup_teardown(test_failed_init_blocks_lazy, setup, teardown),
        cmocka_unit_test_setup_teardown(test_lazy_init_failure, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reinit_new_settings, setup, teardown),
        cmocka_unit_test_setup_teardown(test_opts_override_env, setup, teardown),
        cmocka_unit_test_setup_teardown(test_spec_opts_set_field_by_field, setup, teardown),
        cmocka_unit_test_setup_teardown(test_disabled_starts_nothing, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
