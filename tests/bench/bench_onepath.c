/* bench_onepath.c: cost of OnePath calls in ns per operation: span start+end with tracing disabled,
 * enabled at ratio 0 (stack only), ratio 1 without export, ratio 1 with NDJSON export to a file (the
 * span's share only: formatting and writing happen on the flush thread; drops reported), the
 * attachment TLV encode/decode, the send+receive helpers, counter add (one thread and 4 threads on
 * one counter) and histogram observe. Prints one table.
 *
 * Usage: bench_onepath [iterations-scale]   (default 1.0; 1.0 is about 1M spans per row) */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tracegate/onepath.h"

static double g_scale = 1.0;

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static long iters(long base)
{
    long n = (long)((double)base * g_scale);
    return n > 0 ? n : 1;
}

static void row(const char *what, double ns, const char *note)
{
    printf("  %-46s %10.1f ns   %s\n", what, ns, note ? note : "");
}

static void clear_env(void)
{
    static const char *vars[] = {"ONEPATH_TRACE_ENABLE", "ONEPATH_TRACE_SAMPLE_RATIO", "ONEPATH_TRACE_NDJSON_PATH",
                                 "ONEPATH_TRACE_SERVICE_NAME", "ONEPATH_TRACE_AUTO_INJECT", "ONEPATH_TRACE_FLUSH_MS",
                                 "ONEPATH_METRICS_ENABLE", "ONEPATH_METRICS_NDJSON_PATH", "ONEPATH_METRICS_FLUSH_MS"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
        unsetenv(vars[i]);
}

static void start(int enable, double ratio, const char *path, size_t ring)
{
    onepath_trace_shutdown();
    clear_env();
    if (enable)
        setenv("ONEPATH_TRACE_ENABLE", "1", 1);
    onepath_trace_opts_t o = ONEPATH_TRACE_OPTS_DEFAULT;
    o.sample_ratio = ratio;
    o.ndjson_path = path ? path : "";
    o.ring_capacity = ring;
    if (onepath_trace_init(&o) != ONEPATH_OK) {
        fprintf(stderr, "bench_onepath: init failed\n");
        exit(1);
    }
}

/* A root span with one child and an attribute on each, as a message handler would do. */
static double spans(long n)
{
    uint64_t t0 = now_ns();
    for (long i = 0; i < n; i++) {
        onepath_span_t s = onepath_span_start("handle", ONEPATH_SPAN_KIND_CONSUMER, NULL);
        onepath_span_set_attr_i64(s, "seq", i);
        onepath_span_end(s);
    }
    return (double)(now_ns() - t0) / (double)n;
}

static void bench_spans(const char *dir)
{
    char path[600];
    snprintf(path, sizeof path, "%s/spans.ndjson", dir);
    long n = iters(1000000);
    start(0, 0.0, NULL, 0);
    spans(n / 10);
    row("span start+attr+end, disabled", spans(n), NULL);
    start(1, 0.0, NULL, 0);
    row("span start+attr+end, enabled, ratio 0", spans(n), "stack only");
    start(1, 1.0, NULL, 0);
    row("span start+attr+end, ratio 1, no export path", spans(n), "sampled, not recorded");
    long m = iters(300000);
    start(1, 1.0, path, 65536);
    double ns = spans(m);
    onepath_trace_shutdown();
    onepath_export_stats_t st;
    onepath_export_stats(ONEPATH_EXPORT_SPANS, &st, NULL, 0);
    char note[160];
    snprintf(note, sizeof note, "ring 65536: %llu written, %llu dropped, %.0f B/span",
             (unsigned long long)st.written, (unsigned long long)st.dropped,
             st.written ? (double)st.bytes / (double)st.written : 0.0);
    row("span start+attr+end, ratio 1, NDJSON export", ns, note);
    start(1, 1.0, path, 0);
    ns = spans(m);
    onepath_trace_shutdown();
    onepath_export_stats(ONEPATH_EXPORT_SPANS, &st, NULL, 0);
    snprintf(note, sizeof note, "default ring 1024: %llu written, %llu dropped", (unsigned long long)st.written,
             (unsigned long long)st.dropped);
    row("span start+attr+end, ratio 1, NDJSON export", ns, note);
    unlink(path);
}

static void bench_tlv(void)
{
    onepath_tlv_t t;
    memset(&t, 0, sizeof t);
    t.has_traceparent = 1;
    onepath_trace_ctx_from_string("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", &t.traceparent);
    t.has_send_ts = 1;
    t.send_ts_ns = 1733130000000000000ull;
    uint8_t user[64];
    memset(user, 'u', sizeof user);
    t.user = user;
    t.user_len = sizeof user;
    uint8_t buf[256];
    size_t len = 0;
    long n = iters(5000000);
    volatile size_t sink = 0;
    uint64_t t0 = now_ns();
    for (long i = 0; i < n; i++) {
        t.send_ts_ns++;
        onepath_tlv_encode(&t, buf, sizeof buf, &len);
        sink += len;
    }
    row("TLV encode (traceparent + ts + 64 B user)", (double)(now_ns() - t0) / (double)n, NULL);
    onepath_tlv_t d;
    t0 = now_ns();
    for (long i = 0; i < n; i++) {
        onepath_tlv_decode(buf, len, &d);
        sink += d.user_len;
    }
    row("TLV decode (same)", (double)(now_ns() - t0) / (double)n, NULL);
    static const uint8_t foreign[64] = "not a OnePath attachment";
    t0 = now_ns();
    for (long i = 0; i < n; i++) {
        onepath_tlv_decode(foreign, sizeof foreign, &d);
        sink += d.user_len;
    }
    row("TLV decode of a foreign attachment", (double)(now_ns() - t0) / (double)n, NULL);
    (void)sink;
}

static double send_recv(long n)
{
    uint8_t user[64], buf[64 + ONEPATH_ATTACH_OVERHEAD];
    memset(user, 'u', sizeof user);
    uint64_t t0 = now_ns();
    for (long i = 0; i < n; i++) {
        onepath_send_t s;
        onepath_send_begin(&s, user, sizeof user, buf, sizeof buf);
        onepath_send_end(&s, 100, 1);
        onepath_recv_t r;
        onepath_recv(&r, s.attachment, s.attachment_len, 100);
    }
    return (double)(now_ns() - t0) / (double)n;
}

static void bench_helpers(void)
{
    long n = iters(1000000);
    start(0, 0.0, NULL, 0);
    row("send_begin+send_end+recv, all disabled", send_recv(n), NULL);
    onepath_trace_shutdown();
    clear_env();
    setenv("ONEPATH_TRACE_ENABLE", "1", 1);
    setenv("ONEPATH_METRICS_ENABLE", "1", 1);
    onepath_trace_init(NULL);
    onepath_span_t s = onepath_span_start("ctx", ONEPATH_SPAN_KIND_PRODUCER, NULL);
    row("send_begin+send_end+recv, tracing+metrics on", send_recv(n), "TLV in and out, 7 metric updates");
    onepath_span_end(s);
}

struct contend {
    onepath_counter_t c;
    long n;
};

static void *adder(void *arg)
{
    struct contend *c = arg;
    for (long i = 0; i < c->n; i++)
        onepath_counter_add(c->c, 1);
    return NULL;
}

static void bench_metrics(void)
{
    onepath_trace_shutdown();
    clear_env();
    long n = iters(10000000);
    onepath_trace_init(NULL);
    onepath_counter_t off = onepath_counter_register("bench.off", NULL); /* NULL: metrics off */
    uint64_t t0 = now_ns();
    for (long i = 0; i < n; i++)
        onepath_counter_add(off, 1);
    row("counter add, metrics disabled (NULL handle)", (double)(now_ns() - t0) / (double)n, NULL);
    onepath_trace_shutdown();
    setenv("ONEPATH_METRICS_ENABLE", "1", 1);
    onepath_trace_init(NULL);
    onepath_counter_t c = onepath_counter_register("bench.count", NULL);
    onepath_histogram_t h = onepath_histogram_register("bench.hist", NULL);
    t0 = now_ns();
    for (long i = 0; i < n; i++)
        onepath_counter_add(c, 1);
    row("counter add, 1 thread", (double)(now_ns() - t0) / (double)n, NULL);
    struct contend ct = {c, n / 4};
    pthread_t th[4];
    t0 = now_ns();
    for (int i = 0; i < 4; i++)
        pthread_create(&th[i], NULL, adder, &ct);
    for (int i = 0; i < 4; i++)
        pthread_join(th[i], NULL);
    row("counter add, 4 threads on one counter (per add)", (double)(now_ns() - t0) / (double)(ct.n * 4),
        "wall time / total adds");
    t0 = now_ns();
    for (long i = 0; i < n; i++)
        onepath_histogram_observe(h, (uint64_t)i & 0xffff);
    row("histogram observe (log2 buckets)", (double)(now_ns() - t0) / (double)n, NULL);
    onepath_trace_shutdown();
}

int main(int argc, char **argv)
{
    if (argc > 1)
        g_scale = atof(argv[1]) > 0 ? atof(argv[1]) : 1.0;
    char dir[] = "/tmp/tg-bench-onepath-XXXXXX";
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    printf("OnePath microbenchmarks (ns per operation, lower is better)\n");
    bench_spans(dir);
    bench_tlv();
    bench_helpers();
    bench_metrics();
    clear_env();
    rmdir(dir);
    return 0;
}
