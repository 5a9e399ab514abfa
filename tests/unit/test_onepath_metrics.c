/* test_onepath_metrics.c: counters, gauges and histograms: NULL handles when metrics are off,
 * idempotent registration and its refusals, log2 and fixed bucket placement, exact totals from 4
 * concurrent writers while snapshots run (and never go backwards), the built-in onepath.* metrics,
 * Prometheus text (names, HELP/TYPE, cumulative buckets, +Inf = _count), the metrics NDJSON
 * export parsed back, and a child forked while another thread walked the registry. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
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
    const char *d = ot_tmpdir("metrics");
    if (!d)
        return -1;
    snprintf(g_dir, sizeof g_dir, "%s", d);
    setenv("ONEPATH_METRICS_ENABLE", "1", 1);
    return onepath_trace_init(NULL) == ONEPATH_OK && onepath_metrics_enabled() ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    onepath_trace_shutdown();
    ot_clear_env();
    ot_rmdir(g_dir);
    return 0;
}

/* A copy of one metric's snapshot, looked up by name. */
struct found {
    const char *want;
    int hits;
    onepath_metric_sample_t s;
    uint64_t buckets[32], bounds[32];
    char desc[128];
};

static void find_cb(const onepath_metric_sample_t *s, void *arg)
{
    struct found *f = arg;
    if (strcmp(s->name, f->want) != 0)
        return;
    f->hits++;
    f->s = *s;
    snprintf(f->desc, sizeof f->desc, "%s", s->description);
    if (s->type == ONEPATH_METRIC_HISTOGRAM) {
        assert_true(s->hist_bucket_count <= 32);
        memcpy(f->buckets, s->hist_buckets, s->hist_bucket_count * sizeof(uint64_t));
        memcpy(f->bounds, s->hist_bounds, s->hist_bucket_count * sizeof(uint64_t));
    }
}

static struct found snap(const char *name)
{
    struct found f;
    memset(&f, 0, sizeof f);
    f.want = name;
    onepath_metrics_snapshot(find_cb, &f);
    return f;
}

static void count_cb(const onepath_metric_sample_t *s, void *arg)
{
    (void)s;
    (*(int *)arg)++;
}

static void test_disabled(void **state)
{
    (void)state;
    onepath_trace_shutdown();
    ot_clear_env();
    assert_int_equal(onepath_metrics_init(), ONEPATH_OK);
    assert_false(onepath_metrics_enabled());
    assert_null(onepath_counter_register("off.counter", "x"));
    assert_null(onepath_gauge_register("off.gauge", "x"));
    assert_null(onepath_histogram_register("off.hist", "x"));
    onepath_counter_add(NULL, 5);
    onepath_counter_inc(NULL);
    onepath_gauge_set(NULL, 5);
    onepath_gauge_add(NULL, 5);
    onepath_histogram_observe(NULL, 5);
    int n = 0;
    onepath_metrics_snapshot(count_cb, &n);
    assert_int_equal(n, 0);
    size_t len = 99;
    char *text = onepath_metrics_prometheus(&len);
    assert_non_null(text);
    assert_string_equal(text, "");
    assert_int_equal(len, 0);
    free(text);
}

static void test_register(void **state)
{
    (void)state;
    onepath_counter_t c = onepath_counter_register("reg.count", "a counter");
    assert_non_null(c);
    assert_ptr_equal(onepath_counter_register("reg.count", "other text"), c); /* idempotent */
    assert_null(onepath_gauge_register("reg.count", NULL));                    /* other type */
    assert_null(onepath_histogram_register("reg.count", NULL));
    assert_null(onepath_counter_register("reg_count", NULL)); /* same Prometheus name */
    assert_null(onepath_counter_register("", NULL));
    assert_null(onepath_counter_register(NULL, NULL));
    char longname[202];
    memset(longname, 'n', 201);
    longname[201] = 0;
    assert_null(onepath_counter_register(longname, NULL));
    longname[200] = 0;
    assert_non_null(onepath_counter_register(longname, NULL));

    onepath_counter_add(c, 5);
    onepath_counter_inc(c);
    onepath_counter_add(c, -100); /* counters never go down */
    onepath_counter_add(c, 0);
    struct found f = snap("reg.count");
    assert_int_equal(f.hits, 1);
    assert_int_equal(f.s.type, ONEPATH_METRIC_COUNTER);
    assert_int_equal(f.s.value, 6);
    assert_string_equal(f.desc, "a counter");

    onepath_gauge_t g = onepath_gauge_register("reg.gauge", NULL);
    onepath_gauge_set(g, 10);
    onepath_gauge_add(g, -15);
    f = snap("reg.gauge");
    assert_int_equal(f.s.type, ONEPATH_METRIC_GAUGE);
    assert_int_equal(f.s.value, -5);
    assert_string_equal(f.desc, "");

    /* handles survive shutdown and re-init; values are kept */
    onepath_trace_shutdown();
    onepath_counter_inc(c); /* harmless */
    assert_int_equal(onepath_trace_init(NULL), ONEPATH_OK);
    assert_ptr_equal(onepath_counter_register("reg.count", NULL), c);
    assert_int_equal(snap("reg.count").s.value, 7);
}

static void test_histogram_buckets(void **state)
{
    (void)state;
    onepath_histogram_t h = onepath_histogram_register("hist.log2", "log2 buckets");
    assert_non_null(h);
    assert_ptr_equal(onepath_histogram_register("hist.log2", NULL), h);
    struct found f = snap("hist.log2");
    assert_int_equal(f.s.hist_count, 0);
    assert_int_equal(f.s.hist_min, 0);
    assert_int_equal(f.s.hist_bucket_count, 32);
    for (int i = 0; i < 31; i++)
        assert_int_equal(f.bounds[i], (uint64_t)1 << i);
    assert_true(f.bounds[31] == UINT64_MAX);

    static const struct {
        uint64_t v;
        int bucket;
    } cases[] = {{0, 0},  {1, 0},           {2, 1},           {3, 2},          {4, 2}, {5, 3},
                 {1024, 10}, {1025, 11},    {1ull << 30, 30}, {(1ull << 30) + 1, 31},
                 {1ull << 31, 31}, {UINT64_MAX / 2, 31}};
    uint64_t expect[32] = {0}, sum = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        onepath_histogram_observe(h, cases[i].v);
        expect[cases[i].bucket]++;
        sum += cases[i].v;
    }
    f = snap("hist.log2");
    assert_memory_equal(f.buckets, expect, sizeof expect);
    assert_int_equal(f.s.hist_count, sizeof cases / sizeof cases[0]);
    assert_true(f.s.hist_sum == sum);
    assert_int_equal(f.s.hist_min, 0);
    assert_true(f.s.hist_max == UINT64_MAX / 2);
}

/* ---- 4 concurrent writers, snapshots running ---- */

#define WRITERS 4
#define PER_WRITER 200000

struct shared {
    onepath_counter_t c;
    onepath_gauge_t g;
    onepath_histogram_t h;
    atomic_int go;
};

static void *metric_writer(void *arg)
{
    struct shared *s = arg;
    while (!atomic_load(&s->go))
        ;
    for (uint64_t i = 0; i < PER_WRITER; i++) {
        onepath_counter_inc(s->c);
        onepath_gauge_add(s->g, 2);
        onepath_gauge_add(s->g, -1);
        onepath_histogram_observe(s->h, i % 1000);
    }
    return NULL;
}

static void test_concurrent_exact(void **state)
{
    (void)state;
    struct shared s;
    s.c = onepath_counter_register("conc.count", NULL);
    s.g = onepath_gauge_register("conc.gauge", NULL);
    s.h = onepath_histogram_register("conc.hist", NULL);
    atomic_init(&s.go, 0);
    pthread_t th[WRITERS];
    for (int i = 0; i < WRITERS; i++)
        assert_int_equal(pthread_create(&th[i], NULL, metric_writer, &s), 0);
    atomic_store(&s.go, 1);
    /* snapshots while they write: counts only grow, a histogram's count is its buckets' sum */
    int64_t last_c = 0;
    uint64_t last_h = 0;
    int snaps = 0;
    uint64_t deadline = ot_now_ns() + 300000000000ull; /* a safety net only */
    for (;;) {
        if (ot_now_ns() > deadline)
            fail_msg("writers did not finish (%lld counted)", (long long)last_c);
        struct found c = snap("conc.count"), h = snap("conc.hist");
        assert_true(c.s.value >= last_c);
        assert_true(h.s.hist_count >= last_h);
        uint64_t bsum = 0;
        for (size_t i = 0; i < h.s.hist_bucket_count; i++)
            bsum += h.buckets[i];
        assert_true(bsum == h.s.hist_count);
        last_c = c.s.value;
        last_h = h.s.hist_count;
        snaps++;
        if (c.s.value == (int64_t)WRITERS * PER_WRITER && h.s.hist_count == (uint64_t)WRITERS * PER_WRITER)
            break;
    }
    for (int i = 0; i < WRITERS; i++)
        pthread_join(th[i], NULL);
    print_message("%d snapshots taken while %d writers ran\n", snaps, WRITERS);
    struct found c = snap("conc.count"), g = snap("conc.gauge"), h = snap("conc.hist");
    assert_int_equal(c.s.value, (int64_t)WRITERS * PER_WRITER);
    assert_int_equal(g.s.value, (int64_t)WRITERS * PER_WRITER);
    assert_int_equal(h.s.hist_count, (uint64_t)WRITERS * PER_WRITER);
    /* each writer observed 0..999 exactly PER_WRITER/1000 times */
    uint64_t reps = (uint64_t)WRITERS * (PER_WRITER / 1000);
    assert_true(h.s.hist_sum == reps * (999 * 1000 / 2));
    assert_int_equal(h.s.hist_min, 0);
    assert_int_equal(h.s.hist_max, 999);
    uint64_t expect[32] = {0};
    for (uint64_t v = 0; v < 1000; v++) {
        int b = 0;
        while (b < 31 && v > ((uint64_t)1 << b))
            b++;
        expect[b] += reps;
    }
    assert_memory_equal(h.buckets, expect, sizeof expect);
}

/* ---- built-ins and Prometheus ---- */

static void test_builtins(void **state)
{
    (void)state;
    /* nothing has sent or received yet in this process: built-ins appear at the first use */
    struct found f = snap("onepath.msgs.sent");
    int64_t sent0 = f.hits ? f.s.value : 0;
    onepath_send_t s;
    uint8_t buf[64];
    onepath_send_begin(&s, "u", 1, buf, sizeof buf);
    onepath_send_end(&s, 100, 1);
    onepath_send_begin(&s, "u", 1, buf, sizeof buf);
    onepath_send_end(&s, 50, 0);
    static const char *names[] = {"onepath.msgs.sent", "onepath.msgs.recv", "onepath.msgs.dropped",
                                  "onepath.bytes.sent", "onepath.bytes.recv", "onepath.publish.latency",
                                  "onepath.e2e.latency"};
    for (size_t i = 0; i < 7; i++)
        assert_int_equal(snap(names[i]).hits, 1);
    assert_int_equal(snap("onepath.msgs.sent").s.value, sent0 + 1);
    f = snap("onepath.publish.latency");
    assert_int_equal(f.s.type, ONEPATH_METRIC_HISTOGRAM);
    assert_int_equal(f.s.hist_bucket_count, 17);
    static const uint64_t bounds[16] = {0, 1, 2, 3, 4, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000};
    assert_memory_equal(f.bounds, bounds, sizeof bounds);
    assert_true(f.bounds[16] == UINT64_MAX);
    assert_true(f.s.hist_count >= 1);
    /* a user cannot take over a built-in name with another type */
    assert_null(onepath_counter_register("onepath.e2e.latency", NULL));
    assert_null(onepath_histogram_register("onepath.e2e.latency", NULL)); /* other buckets */
}

static const char *line_after(const char *text, const char *prefix)
{
    const char *p = text;
    size_t n = strlen(prefix);
    while (p && *p) {
        if (strncmp(p, prefix, n) == 0)
            return p + n;
        p = strchr(p, '\n');
        if (p)
            p++;
    }
    return NULL;
}

static void test_prometheus(void **state)
{
    (void)state;
    onepath_counter_t c = onepath_counter_register("my_app.msgs.processed", "processed \\ messages\nper run");
    onepath_gauge_t g = onepath_gauge_register("9lives-gauge", NULL);
    onepath_histogram_t h = onepath_histogram_register("my_app.proc.latency", "processing time (us)");
    onepath_counter_add(c, 3);
    onepath_gauge_set(g, -7);
    onepath_histogram_observe(h, 1);
    onepath_histogram_observe(h, 3);
    onepath_histogram_observe(h, 3);
    onepath_histogram_observe(h, 5000000000ull);
    size_t len;
    char *t = onepath_metrics_prometheus(&len);
    assert_non_null(t);
    assert_int_equal(len, strlen(t));
    assert_non_null(strstr(t, "# HELP my_app_msgs_processed processed \\\\ messages\\nper run\n"
                              "# TYPE my_app_msgs_processed counter\nmy_app_msgs_processed 3\n"));
    assert_non_null(strstr(t, "# TYPE _9lives_gauge gauge\n_9lives_gauge -7\n"));
    assert_non_null(strstr(t, "# HELP my_app_proc_latency processing time (us)\n# TYPE my_app_proc_latency histogram\n"
                              "my_app_proc_latency_bucket{le=\"1\"} 1\nmy_app_proc_latency_bucket{le=\"2\"} 1\n"
                              "my_app_proc_latency_bucket{le=\"4\"} 3\n"));
    assert_non_null(strstr(t, "my_app_proc_latency_bucket{le=\"1073741824\"} 3\n"
                              "my_app_proc_latency_bucket{le=\"+Inf\"} 4\n"
                              "my_app_proc_latency_sum 5000000007\nmy_app_proc_latency_count 4\n"));
    /* every sample line is "name[{labels}] value" with a valid metric name; +Inf == _count */
    for (const char *p = t; *p;) {
        const char *nl = strchr(p, '\n');
        assert_non_null(nl);
        if (*p != '#') {
            assert_true((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || *p == '_' || *p == ':');
            for (const char *q = p; q < nl && *q != ' ' && *q != '{'; q++)
                assert_true((*q >= 'a' && *q <= 'z') || (*q >= 'A' && *q <= 'Z') || (*q >= '0' && *q <= '9') ||
                            *q == '_' || *q == ':');
        }
        p = nl + 1;
    }
    const char *inf = line_after(t, "onepath_e2e_latency_bucket{le=\"+Inf\"} ");
    const char *cnt = line_after(t, "onepath_e2e_latency_count ");
    assert_non_null(inf);
    assert_non_null(cnt);
    assert_int_equal(strtoull(inf, NULL, 10), strtoull(cnt, NULL, 10));
    free(t);
}

/* ---- metrics NDJSON ---- */

struct lines_wait {
    const char *path;
    long want;
};

static int has_lines(void *arg)
{
    struct lines_wait *w = arg;
    char **lines;
    int complete;
    long n = ot_read_lines(w->path, &lines, &complete);
    if (n > 0)
        ot_free_lines(lines, n);
    return n >= w->want && complete;
}

static void test_ndjson_export(void **state)
{
    (void)state;
    onepath_trace_shutdown();
    char path[600];
    snprintf(path, sizeof path, "%s/metrics.ndjson", g_dir);
    setenv("ONEPATH_METRICS_NDJSON_PATH", path, 1);
    setenv("ONEPATH_METRICS_FLUSH_MS", "20", 1);
    setenv("ONEPATH_TRACE_SERVICE_NAME", "metrics-svc", 1);
    assert_int_equal(onepath_trace_init(NULL), ONEPATH_OK);
    onepath_counter_t c = onepath_counter_register("nd.count", "ndjson counter");
    onepath_histogram_t h = onepath_histogram_register("nd.hist", NULL);
    onepath_counter_add(c, 41);
    onepath_histogram_observe(h, 3);
    int total = 0;
    onepath_metrics_snapshot(count_cb, &total);
    /* periodic flushes happen on their own: wait for two flushes' worth of lines */
    struct lines_wait w = {path, 2L * total};
    assert_true(ot_wait_for(has_lines, &w, 30000));
    onepath_counter_inc(c);
    onepath_trace_shutdown(); /* final flush carries the last value */

    char **lines;
    int complete;
    long n = ot_read_lines(path, &lines, &complete);
    assert_true(complete);
    assert_true(n >= 2L * total);
    int64_t last_count = -1;
    int saw_hist = 0;
    uint64_t prev_ts = 0;
    for (long i = 0; i < n; i++) {
        struct tj *v = tj_parse(lines[i], strlen(lines[i]));
        if (!v)
            fail_msg("line %ld is not valid JSON: %s", i, lines[i]);
        int ok;
        uint64_t ts = tj_u64(v, "ts_ns", &ok);
        assert_true(ok && ts >= prev_ts);
        prev_ts = ts;
        assert_string_equal(tj_str(tj_get(v, "resource"), "service.name"), "metrics-svc");
        assert_non_null(tj_str(tj_get(v, "resource"), "host.name"));
        assert_non_null(tj_str(v, "description"));
        const char *name = tj_str(v, "name"), *type = tj_str(v, "type");
        assert_non_null(name);
        assert_non_null(type);
        if (strcmp(name, "nd.count") == 0) {
            assert_string_equal(type, "counter");
            assert_string_equal(tj_str(v, "description"), "ndjson counter");
            last_count = tj_int(v, "value", &ok);
        }
        if (strcmp(name, "nd.hist") == 0) {
            assert_string_equal(type, "histogram");
            assert_int_equal(tj_int(v, "count", &ok), 1);
            assert_int_equal(tj_int(v, "sum", &ok), 3);
            assert_int_equal(tj_int(v, "min", &ok), 3);
            assert_int_equal(tj_int(v, "max", &ok), 3);
            const struct tj *b = tj_get(v, "bounds"), *cn = tj_get(v, "counts");
            assert_int_equal(b->n, 31); /* finite bounds; counts has one more (+Inf) */
            assert_int_equal(cn->n, 32);
            assert_string_equal(b->items[2].s, "4");
            assert_string_equal(cn->items[2].s, "1");
            saw_hist = 1;
        }
        if (strcmp(type, "histogram") != 0)
            assert_non_null(tj_get(v, "value"));
        tj_free(v);
    }
    assert_int_equal(last_count, 42);
    assert_true(saw_hist);
    ot_free_lines(lines, n);
    onepath_export_stats_t st;
    char p[700];
    onepath_export_stats(ONEPATH_EXPORT_METRICS, &st, p, sizeof p);
    assert_string_equal(p, path);
    assert_int_equal(st.written, (uint64_t)n);
    assert_int_equal(st.lost, 0);
}

/* A thread holding the registry's read lock (the metrics flush thread taking its snapshot, here
 * parked inside the snapshot callback) while another thread forks: the child inherited the lock
 * read-held by a thread it does not have, and its first registration waited forever. */
struct parked {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int inside, go;
};

static void park_cb(const onepath_metric_sample_t *s, void *arg)
{
    (void)s;
    struct parked *p = arg;
    pthread_mutex_lock(&p->mu);
    p->inside = 1;
    pthread_cond_broadcast(&p->cv);
    while (!p->go)
        pthread_cond_wait(&p->cv, &p->mu);
    pthread_mutex_unlock(&p->mu);
}

static void *park_thread(void *arg)
{
    onepath_metrics_snapshot(park_cb, arg);
    return NULL;
}

static void test_fork_during_snapshot(void **state)
{
    (void)state;
    assert_non_null(onepath_counter_register("parent.counter", "")); /* something to walk */
    struct parked p = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, park_thread, &p), 0);
    pthread_mutex_lock(&p.mu);
    while (!p.inside)
        pthread_cond_wait(&p.cv, &p.mu);
    pthread_mutex_unlock(&p.mu);

    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        alarm(20); /* a deadlocked child dies of SIGALRM instead of hanging the test */
        if (onepath_metrics_init() != ONEPATH_OK)
            _exit(2);
        onepath_counter_t c = onepath_counter_register("child.counter", "");
        onepath_counter_t again = onepath_counter_register("parent.counter", "");
        _exit(c && again ? 0 : 3);
    }
    int status = 0;
    pid_t w = waitpid(pid, &status, 0);
    pthread_mutex_lock(&p.mu);
    p.go = 1;
    pthread_cond_broadcast(&p.cv);
    pthread_mutex_unlock(&p.mu);
    pthread_join(th, NULL);
    assert_int_equal(w, pid);
    if (WIFSIGNALED(status))
        fail_msg("the child died of signal %d (SIGALRM: its registration deadlocked)", WTERMSIG(status));
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_disabled, setup, teardown),
        cmocka_unit_test_setup_teardown(test_register, setup, teardown),
        cmocka_unit_test_setup_teardown(test_histogram_buckets, setup, teardown),
        cmocka_unit_test_setup_teardown(test_concurrent_exact, setup, teardown),
        cmocka_unit_test_setup_teardown(test_builtins, setup, teardown),
        cmocka_unit_test_setup_teardown(test_prometheus, setup, teardown),
        cmocka_unit_test_setup_teardown(test_ndjson_export, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fork_during_snapshot, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
