/* test_onepath_export.c: the asynchronous NDJSON span exporter: every record parsed back and
 * checked field by field (ids, parent links, kinds, times, status, escaped attributes, events,
 * resource), attribute limits, periodic flushing without shutdown, doubles written with a '.'
 * whatever the application's LC_NUMERIC, unsampled spans not exported,
 * an unopenable path, and the non-blocking guarantee: with the export file a FIFO nobody reads,
 * the flush thread is stuck in its write while span_end keeps returning, drops are counted, and
 * everything accepted arrives once the FIFO is drained. A FIFO whose reader went away (EPIPE,
 * SIGPIPE) costs records, never the process. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "onepath_test_util.h"
#include "tracegate/onepath.h"

static char g_dir[512];
static char g_path[600];

static int setup(void **state)
{
    (void)state;
    onepath_trace_shutdown();
    ot_clear_env();
    const char *d = ot_tmpdir("export");
    if (!d)
        return -1;
    snprintf(g_dir, sizeof g_dir, "%s", d);
    snprintf(g_path, sizeof g_path, "%s/spans.ndjson", g_dir);
    setenv("ONEPATH_TRACE_ENABLE", "1", 1);
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

static void hex(const uint8_t *b, size_t n, char *out)
{
    for (size_t i = 0; i < n; i++)
        sprintf(out + 2 * i, "%02x", b[i]);
}

static void start(const char *path, double ratio, size_t ring, const char *service)
{
    onepath_trace_opts_t o = ONEPATH_TRACE_OPTS_DEFAULT;
    o.ndjson_path = path;
    o.sample_ratio = ratio;
    o.ring_capacity = ring;
    o.service_name = service;
    assert_int_equal(onepath_trace_init(&o), ONEPATH_OK);
}

/* Reads the file and parses every line; all lines must be complete, valid JSON. */
static long load(const char *path, struct tj ***out)
{
    char **lines;
    int complete;
    long n = ot_read_lines(path, &lines, &complete);
    assert_true(n >= 0);
    assert_true(complete);
    *out = calloc((size_t)n + 1, sizeof **out);
    for (long i = 0; i < n; i++) {
        (*out)[i] = tj_parse(lines[i], strlen(lines[i]));
        if (!(*out)[i])
            fail_msg("line %ld is not valid JSON: %s", i, lines[i]);
    }
    ot_free_lines(lines, n);
    return n;
}

static void free_all(struct tj **v, long n)
{
    for (long i = 0; i < n; i++)
        tj_free(v[i]);
    free(v);
}

static const struct tj *find_span(struct tj **v, long n, const char *name)
{
    for (long i = 0; i < n; i++)
        if (tj_str(v[i], "name") && strcmp(tj_str(v[i], "name"), name) == 0)
            return v[i];
    fail_msg("no span named %s", name);
    return NULL;
}

static uint64_t u64(const struct tj *v, const char *key)
{
    int ok;
    uint64_t x = tj_u64(v, key, &ok);
    if (!ok)
        fail_msg("%s is not an unsigned integer", key);
    return x;
}

static void check_times(const struct tj *s, uint64_t before, uint64_t after)
{
    uint64_t st = u64(s, "start_ns"), en = u64(s, "end_ns"), du = u64(s, "duration_ns");
    assert_true(st + du == en);
    assert_true(st >= before && en <= after);
}

static uint64_t real_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void test_schema(void **state)
{
    (void)state;
    static const char service[] = "svc \"quoted\" \\ \n";
    start(g_path, 1.0, 0, service);
    uint64_t t_before = real_ns();

    static const char nasty[] = "q\" b\\ nl\n tab\t ctl\x01\x1f utf8 \xc3\xa9 \xe4\xb8\xad bad\xff\xc3 end";
    static const char nasty_decoded[] = "q\" b\\ nl\n tab\t ctl\x01\x1f utf8 \xc3\xa9 \xe4\xb8\xad bad\xef\xbf\xbd\xef\xbf\xbd end";
    onepath_span_t root = onepath_span_start("root", ONEPATH_SPAN_KIND_INTERNAL, NULL);
    assert_true(onepath_span_is_recording(root));
    onepath_span_set_attr_str(root, "text", nasty);
    onepath_span_set_attr_i64(root, "n", -42);
    onepath_span_set_attr_i64(root, "big", INT64_MAX);
    onepath_span_set_attr_f64(root, "pi", 3.25);
    onepath_span_set_attr_f64(root, "nan", NAN);
    onepath_span_set_attr_f64(root, "ninf", -INFINITY);
    onepath_span_set_attr_str(root, "dup", "first");
    onepath_span_set_attr_i64(root, "dup", 7);
    onepath_span_set_attr_str(root, "dup", "second"); /* last value wins, one key */
    onepath_span_set_attr_str(root, "key \"q\"", "v");
    onepath_span_add_event(root, "ev1");
    onepath_span_add_event(root, "ev \"2\"");
    onepath_span_set_status(root, ONEPATH_SPAN_STATUS_ERROR, "boom");
    onepath_span_set_status(root, 99, "ignored"); /* out of range: ignored */
    onepath_trace_ctx_t rc;
    assert_int_equal(onepath_trace_current_ctx(&rc), 1);

    onepath_span_t child = onepath_span_start("child", ONEPATH_SPAN_KIND_CONSUMER, NULL);
    onepath_span_set_status(child, ONEPATH_SPAN_STATUS_OK, NULL);
    onepath_span_end(child);
    onepath_span_end(root);

    onepath_trace_ctx_t remote;
    assert_int_equal(onepath_trace_ctx_from_string("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", &remote),
                     ONEPATH_OK);
    onepath_span_t srv = onepath_span_start("server", ONEPATH_SPAN_KIND_SERVER, &remote);
    onepath_span_end(srv);
    onepath_span_t odd = onepath_span_start(NULL, 42, NULL); /* NULL name, bad kind */
    onepath_span_end(odd);
    onepath_trace_shutdown();
    uint64_t t_after = real_ns();

    struct tj **v;
    long n = load(g_path, &v);
    assert_int_equal(n, 4);
    char host[256];
    assert_int_equal(gethostname(host, sizeof host), 0);
    host[255] = 0;
    char rtid[33] = "", rsid[17] = "";
    hex(rc.trace_id, 16, rtid);
    hex(rc.span_id, 8, rsid);

    /* every record has exactly the documented keys */
    static const char *keys[] = {"trace_id", "span_id", "parent_span_id", "name", "kind", "start_ns", "end_ns",
                                 "duration_ns", "status", "attributes", "events", "thread", "resource"};
    for (long i = 0; i < n; i++) {
        assert_int_equal(v[i]->type, TJ_OBJ);
        assert_int_equal(v[i]->n, 13);
        for (size_t k = 0; k < 13; k++)
            assert_non_null(tj_get(v[i], keys[k]));
        assert_int_equal(strlen(tj_str(v[i], "trace_id")), 32);
        assert_int_equal(strlen(tj_str(v[i], "span_id")), 16);
        const struct tj *res = tj_get(v[i], "resource");
        assert_string_equal(tj_str(res, "service.name"), service);
        assert_string_equal(tj_str(res, "host.name"), host);
        int ok;
        assert_int_equal(tj_int(res, "process.pid", &ok), getpid());
        assert_true(ok);
        /* all spans of this test ran on this thread */
        assert_int_equal(tj_int(tj_get(v[i], "thread"), "id", &ok), (int64_t)syscall(SYS_gettid));
        assert_true(ok);
        check_times(v[i], t_before, t_after);
    }

    const struct tj *r = find_span(v, n, "root");
    assert_string_equal(tj_str(r, "trace_id"), rtid);
    assert_string_equal(tj_str(r, "span_id"), rsid);
    assert_string_equal(tj_str(r, "parent_span_id"), "");
    assert_string_equal(tj_str(r, "kind"), "INTERNAL");
    assert_string_equal(tj_str(tj_get(r, "status"), "code"), "ERROR");
    assert_string_equal(tj_str(tj_get(r, "status"), "message"), "boom");
    const struct tj *a = tj_get(r, "attributes");
    assert_int_equal(a->n, 8);
    const struct tj *text = tj_get(a, "text");
    assert_int_equal(text->len, sizeof nasty_decoded - 1);
    assert_memory_equal(text->s, nasty_decoded, sizeof nasty_decoded - 1);
    int ok;
    assert_int_equal(tj_int(a, "n", &ok), -42);
    assert_true(ok);
    assert_string_equal(tj_get(a, "big")->s, "9223372036854775807");
    assert_string_equal(tj_get(a, "pi")->s, "3.25");
    assert_string_equal(tj_str(a, "nan"), "NaN");
    assert_string_equal(tj_str(a, "ninf"), "-Infinity");
    assert_string_equal(tj_str(a, "dup"), "second");
    assert_string_equal(tj_str(a, "key \"q\""), "v");
    const struct tj *ev = tj_get(r, "events");
    assert_int_equal(ev->type, TJ_ARR);
    assert_int_equal(ev->n, 2);
    assert_string_equal(tj_str(&ev->items[0], "name"), "ev1");
    assert_string_equal(tj_str(&ev->items[1], "name"), "ev \"2\"");
    uint64_t e0 = u64(&ev->items[0], "ts_ns"), e1 = u64(&ev->items[1], "ts_ns");
    assert_true(e0 >= u64(r, "start_ns") && e0 <= e1 && e1 <= u64(r, "end_ns"));

    const struct tj *c = find_span(v, n, "child");
    assert_string_equal(tj_str(c, "trace_id"), rtid);
    assert_string_equal(tj_str(c, "parent_span_id"), rsid);
    assert_string_equal(tj_str(c, "kind"), "CONSUMER");
    assert_string_equal(tj_str(tj_get(c, "status"), "code"), "OK");
    assert_string_equal(tj_str(tj_get(c, "status"), "message"), "");
    assert_int_equal(tj_get(c, "attributes")->n, 0);
    assert_int_equal(tj_get(c, "events")->n, 0);
    assert_true(u64(c, "start_ns") >= u64(r, "start_ns") && u64(c, "end_ns") <= u64(r, "end_ns"));

    const struct tj *s = find_span(v, n, "server");
    assert_string_equal(tj_str(s, "trace_id"), "0af7651916cd43dd8448eb211c80319c");
    assert_string_equal(tj_str(s, "parent_span_id"), "b7ad6b7169203331");
    assert_string_equal(tj_str(s, "kind"), "SERVER");
    assert_string_equal(tj_str(tj_get(s, "status"), "code"), "UNSET");

    const struct tj *o = find_span(v, n, "");
    assert_string_equal(tj_str(o, "kind"), "INTERNAL");

    onepath_export_stats_t st;
    char p[700];
    assert_int_equal(onepath_export_stats(ONEPATH_EXPORT_SPANS, &st, p, sizeof p), ONEPATH_OK);
    assert_string_equal(p, g_path);
    assert_int_equal(st.active, 0); /* shut down */
    assert_int_equal(st.queued, 4);
    assert_int_equal(st.written, 4);
    assert_int_equal(st.dropped, 0);
    assert_int_equal(st.lost, 0);
    struct stat sb;
    assert_int_equal(stat(g_path, &sb), 0);
    assert_int_equal(st.bytes, (uint64_t)sb.st_size);
    assert_int_equal(sb.st_mode & 0777, 0600);
    free_all(v, n);
}

static void test_limits(void **state)
{
    (void)state;
    start(g_path, 1.0, 0, "limits");
    onepath_span_t s = onepath_span_start("limits", ONEPATH_SPAN_KIND_INTERNAL, NULL);
    char key[16];
    for (int i = 0; i < 100; i++) {
        snprintf(key, sizeof key, "k%d", i);
        onepath_span_set_attr_i64(s, key, i);
    }
    onepath_span_set_attr_i64(s, "k3", 333); /* an existing key can still change */
    for (int i = 0; i < 100; i++)
        onepath_span_add_event(s, "e");
    char *big = malloc(10000);
    memset(big, 'x', 9999);
    big[9999] = 0;
    onepath_span_set_status(s, ONEPATH_SPAN_STATUS_ERROR, big);
    onepath_span_end(s);
    onepath_span_t l = onepath_span_start(big, ONEPATH_SPAN_KIND_INTERNAL, NULL);
    onepath_span_end(l);
    free(big);
    onepath_trace_shutdown();
    struct tj **v;
    long n = load(g_path, &v);
    assert_int_equal(n, 2);
    const struct tj *a = tj_get(v[0], "attributes");
    assert_int_equal(a->n, 64);
    int ok;
    assert_int_equal(tj_int(a, "k63", &ok), 63);
    assert_int_equal(tj_int(a, "k3", &ok), 333);
    assert_null(tj_get(a, "k64"));
    assert_int_equal(tj_get(v[0], "events")->n, 64);
    assert_int_equal(strlen(tj_str(tj_get(v[0], "status"), "message")), 4096);
    assert_int_equal(strlen(tj_str(v[1], "name")), 4096);
    free_all(v, n);
}

static int one_complete_line(void *arg)
{
    char **lines;
    int complete;
    long n = ot_read_lines(arg, &lines, &complete);
    if (n > 0)
        ot_free_lines(lines, n);
    return n >= 1 && complete;
}

static void test_periodic_flush(void **state)
{
    (void)state;
    setenv("ONEPATH_TRACE_FLUSH_MS", "20", 1);
    start(g_path, 1.0, 0, NULL);
    onepath_span_t s = onepath_span_start("periodic", ONEPATH_SPAN_KIND_INTERNAL, NULL);
    onepath_span_end(s);
    /* no shutdown: the flush thread writes it on its own */
    assert_true(ot_wait_for(one_complete_line, g_path, 30000));
    onepath_export_stats_t st;
    onepath_export_stats(ONEPATH_EXPORT_SPANS, &st, NULL, 0);
    assert_int_equal(st.active, 1);
    assert_int_equal(st.written, 1);
    onepath_trace_shutdown();
    struct tj **v;
    long n = load(g_path, &v);
    assert_int_equal(n, 1);
    assert_string_equal(tj_str(tj_get(v[0], "resource"), "service.name"), "onepath"); /* default */
    free_all(v, n);
}

/* An application that called setlocale() with a comma-decimal LC_NUMERIC: double attributes are
 * still JSON numbers with a '.' (not "3,25", which made the whole line invalid JSON). */
static void test_doubles_under_comma_locale(void **state)
{
    (void)state;
    if (!ot_comma_locale_begin())
        skip();
    start(g_path, 1.0, 0, NULL);
    onepath_span_t s = onepath_span_start("locale", ONEPATH_SPAN_KIND_INTERNAL, NULL);
    onepath_span_set_attr_f64(s, "pi", 3.25);
    onepath_span_set_attr_f64(s, "tiny", 1.5e-300);
    onepath_span_end(s);
    onepath_trace_shutdown(); /* rendered on the flush thread, under the application's locale */
    ot_comma_locale_end();    /* the reader below converts numbers with strtod */
    struct tj **v;
    long n = load(g_path, &v); /* every line valid JSON */
    assert_int_equal(n, 1);
    const struct tj *attrs = tj_get(v[0], "attributes");
    const struct tj *pi = tj_get(attrs, "pi"), *tiny = tj_get(attrs, "tiny");
    assert_non_null(pi);
    assert_non_null(tiny);
    assert_int_equal(pi->type, TJ_NUM);
    assert_true(pi->d == 3.25);
    assert_true(tiny->d == 1.5e-300);
    free_all(v, n);
}

static void test_unsampled_not_exported(void **state)
{
    (void)state;
    start(g_path, 0.0, 0, NULL); /* ratio 0 (env unset) */
    for (int i = 0; i < 100; i++) {
        onepath_span_t s = onepath_span_start("x", ONEPATH_SPAN_KIND_INTERNAL, NULL);
        assert_non_null(s);
        assert_false(onepath_span_is_recording(s));
        onepath_span_end(s);
    }
    onepath_trace_shutdown();
    struct stat sb;
    assert_int_equal(stat(g_path, &sb), 0);
    assert_int_equal(sb.st_size, 0);
    onepath_export_stats_t st;
    onepath_export_stats(ONEPATH_EXPORT_SPANS, &st, NULL, 0);
    assert_int_equal(st.queued, 0);
}

static void test_unopenable_path(void **state)
{
    (void)state;
    char bad[700];
    snprintf(bad, sizeof bad, "%s/no/such/dir/x.ndjson", g_dir);
    onepath_trace_opts_t o = ONEPATH_TRACE_OPTS_DEFAULT;
    o.ndjson_path = bad;
    o.sample_ratio = 1.0;
    assert_int_equal(onepath_trace_init(&o), ONEPATH_ERR_IO);
    assert_false(onepath_trace_enabled());
    assert_null(onepath_span_start("x", ONEPATH_SPAN_KIND_INTERNAL, NULL));
    /* a later init with a good path works */
    start(g_path, 1.0, 0, NULL);
    assert_true(onepath_trace_enabled());
}

/* ---- the FIFO nobody reads ---- */

struct writer {
    long iterations;
    uint64_t max_ns;
    atomic_int done;
};

static void *writer_main(void *arg)
{
    struct writer *w = arg;
    for (long i = 0; i < w->iterations; i++) {
        uint64_t t0 = ot_now_ns();
        onepath_span_t s = onepath_span_start("w", ONEPATH_SPAN_KIND_PRODUCER, NULL);
        onepath_span_set_attr_i64(s, "i", i);
        onepath_span_end(s);
        uint64_t dt = ot_now_ns() - t0;
        if (dt > w->max_ns)
            w->max_ns = dt;
    }
    atomic_store(&w->done, 1);
    return NULL;
}

static int writer_done(void *arg) { return atomic_load(&((struct writer *)arg)->done); }

struct filler {
    long produced;
    atomic_int done;
    char pad[4001];
};

/* Big spans until the flush thread reports the FIFO full. */
static void *filler_main(void *arg)
{
    struct filler *f = arg;
    uint64_t deadline = ot_now_ns() + 60000000000ull;
    for (;;) {
        onepath_export_stats_t st;
        onepath_export_stats(ONEPATH_EXPORT_SPANS, &st, NULL, 0);
        if (st.stalls > 0 || ot_now_ns() > deadline)
            break;
        onepath_span_t s = onepath_span_start("fill", ONEPATH_SPAN_KIND_PRODUCER, NULL);
        onepath_span_set_attr_str(s, "pad", f->pad);
        onepath_span_end(s);
        f->produced++;
        struct timespec ms = {0, 1000000};
        nanosleep(&ms, NULL);
    }
    atomic_store(&f->done, 1);
    return NULL;
}

static int filler_done(void *arg) { return atomic_load(&((struct filler *)arg)->done); }

/* A span_end that blocked would leave a thread stuck inside the exporter, which shutdown (in
 * teardown) would then wait for: report and leave at once instead of hanging. */
static void fail_blocked(const char *what)
{
    fprintf(stderr, "FAIL: %s did not return while the export FIFO was full: span_end blocks\n", what);
    _exit(1);
}

struct drain {
    int fd;
    char *data;
    size_t len, cap;
};

static void *drain_main(void *arg)
{
    struct drain *d = arg;
    for (;;) {
        if (d->cap - d->len < 65536) {
            d->cap = d->cap * 2 + 65536;
            d->data = realloc(d->data, d->cap);
        }
        ssize_t n = read(d->fd, d->data + d->len, d->cap - d->len - 1);
        if (n > 0)
            d->len += (size_t)n;
        else if (n == 0 || errno != EINTR)
            break;
    }
    d->data[d->len] = 0;
    return NULL;
}

static void test_fifo_nobody_reads(void **state)
{
    (void)state;
    char fifo[700];
    snprintf(fifo, sizeof fifo, "%s/spans.fifo", g_dir);
    assert_int_equal(mkfifo(fifo, 0600), 0);
    int rfd = open(fifo, O_RDONLY | O_NONBLOCK); /* a reader exists, but it never reads (yet) */
    assert_true(rfd >= 0);
    setenv("ONEPATH_TRACE_FLUSH_MS", "1", 1);
    start(fifo, 1.0, 16, NULL);

    /* 1. fill the pipe until the flush thread's write cannot go on */
    struct filler *f = calloc(1, sizeof *f);
    memset(f->pad, 'p', sizeof f->pad - 1);
    atomic_init(&f->done, 0);
    pthread_t fth;
    assert_int_equal(pthread_create(&fth, NULL, filler_main, f), 0);
    if (!ot_wait_for(filler_done, f, 90000))
        fail_blocked("the filler thread");
    pthread_join(fth, NULL);
    onepath_export_stats_t before;
    onepath_export_stats(ONEPATH_EXPORT_SPANS, &before, NULL, 0);
    assert_true(before.stalls > 0); /* the flush thread is stuck in its write */

    /* 2. a writer thread keeps producing while the flush thread is stuck */
    struct writer w = {.iterations = 20000, .max_ns = 0};
    atomic_init(&w.done, 0);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, writer_main, &w), 0);
    if (!ot_wait_for(writer_done, &w, 60000))
        fail_blocked("the writer thread");
    onepath_export_stats_t during;
    onepath_export_stats(ONEPATH_EXPORT_SPANS, &during, NULL, 0);

    /* 3. drain the FIFO and shut down: everything accepted must arrive */
    int fl = fcntl(rfd, F_GETFL);
    fcntl(rfd, F_SETFL, fl & ~O_NONBLOCK);
    struct drain d = {.fd = rfd};
    pthread_t dth;
    assert_int_equal(pthread_create(&dth, NULL, drain_main, &d), 0);
    pthread_join(th, NULL);
    onepath_trace_shutdown();
    pthread_join(dth, NULL);
    close(rfd);

    print_message("flush thread stuck after %ld big spans; 20000 span start/end while stuck: max %.1f us\n",
                  f->produced, (double)w.max_ns / 1000.0);
    assert_true(w.max_ns < 5000000000ull);
    /* the file took nothing while the writer ran: the flush thread really was stuck */
    assert_int_equal(during.bytes, before.bytes);
    assert_true(during.dropped > 0); /* the 16-slot ring overflowed and it was counted */

    onepath_export_stats_t st;
    onepath_export_stats(ONEPATH_EXPORT_SPANS, &st, NULL, 0);
    long total = f->produced + w.iterations;
    assert_int_equal(st.queued + st.dropped, (uint64_t)total);
    assert_int_equal(st.lost, 0);
    assert_int_equal(st.written, st.queued);
    assert_int_equal(st.bytes, (uint64_t)d.len);
    long lines = 0;
    char *p = d.data;
    while (*p) {
        char *nl = strchr(p, '\n');
        assert_non_null(nl);
        struct tj *v = tj_parse(p, (size_t)(nl - p));
        if (!v)
            fail_msg("record %ld is not valid JSON", lines);
        tj_free(v);
        lines++;
        p = nl + 1;
    }
    assert_int_equal(lines, (long)st.written);
    free(d.data);
    free(f);
    unlink(fifo);
}

static int lost_some(void *arg)
{
    (void)arg;
    onepath_span_t s = onepath_span_start("x", ONEPATH_SPAN_KIND_PRODUCER, NULL);
    onepath_span_end(s);
    onepath_export_stats_t st;
    onepath_export_stats(ONEPATH_EXPORT_SPANS, &st, NULL, 0);
    return st.lost > 0;
}

static void test_fifo_reader_gone(void **state)
{
    (void)state;
    char fifo[700];
    snprintf(fifo, sizeof fifo, "%s/gone.fifo", g_dir);
    assert_int_equal(mkfifo(fifo, 0600), 0);
    int rfd = open(fifo, O_RDONLY | O_NONBLOCK);
    assert_true(rfd >= 0);
    setenv("ONEPATH_TRACE_FLUSH_MS", "1", 1);
    start(fifo, 1.0, 64, NULL);
    close(rfd); /* the reader goes away: writes now fail with EPIPE (and raise SIGPIPE) */
    assert_true(ot_wait_for(lost_some, NULL, 60000));
    onepath_trace_shutdown(); /* still alive */
    unlink(fifo);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_schema, setup, teardown),
        cmocka_unit_test_setup_teardown(test_limits, setup, teardown),
        cmocka_unit_test_setup_teardown(test_periodic_flush, setup, teardown),
        cmocka_unit_test_setup_teardown(test_doubles_under_comma_locale, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unsampled_not_exported, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unopenable_path, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fifo_nobody_reads, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fifo_reader_gone, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
