/* metrics.c: the metric registry (counters, gauges, histograms). Registration is rare and takes
 * the write side of a rwlock; updates are relaxed atomics on the metric itself (no lock);
 * snapshots walk the list under the read side. Metrics are never freed, so handles stay valid for
 * the life of the process whatever init/shutdown do. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "onepath/metrics.h"
#include "onepath/runtime.h"

#define MAX_METRICS 1024
#define MAX_NAME 200
#define MAX_DESC 1024
#define MAX_BUCKETS 32

/* Built-in latency buckets in µs; the last bucket (+Inf) takes everything above 10000. */
static const uint64_t g_latency_bounds[17] = {0, 1, 2, 3, 4, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000,
                                              UINT64_MAX};
/* Custom histograms: <=2^0 .. <=2^30, then everything above. */
static uint64_t g_log2_bounds[MAX_BUCKETS];
static pthread_once_t g_log2_once = PTHREAD_ONCE_INIT;

static void init_log2_bounds(void)
{
    for (int i = 0; i < MAX_BUCKETS - 1; i++)
        g_log2_bounds[i] = (uint64_t)1 << i;
    g_log2_bounds[MAX_BUCKETS - 1] = UINT64_MAX;
}

struct metric {
    struct metric *next;
    char *name, *desc, *prom_name;
    int type;
    atomic_int_fast64_t value;
    /* histograms */
    const uint64_t *bounds;
    size_t nb;
    int log2; /* bucket index by bit length instead of a search */
    atomic_uint_fast64_t sum, min, max;
    atomic_uint_fast64_t buckets[MAX_BUCKETS];
};

/* The public handle types are the metric itself. */
struct onepath_counter {
    struct metric m;
};
struct onepath_gauge {
    struct metric m;
};
struct onepath_histogram {
    struct metric m;
};

static pthread_rwlock_t g_lock = PTHREAD_RWLOCK_INITIALIZER;
static struct metric *g_head, *g_last;
static size_t g_count;

/* The Prometheus form of name (malloc'ed), used to refuse names that would clash there. */
static char *prom_name(const char *name)
{
    struct tg_op_jb b;
    tg_op_jb_init(&b);
    tg_op_prom_name(&b, name);
    tg_op_jb_putc(&b, 0);
    if (tg_op_jb_failed(&b)) {
        tg_op_jb_free(&b);
        return NULL;
    }
    return b.p;
}

static struct metric *do_register(const char *name, const char *desc, int type, const uint64_t *bounds, size_t nb)
{
    if (!atomic_load_explicit(&tg_op_g_metrics_on, memory_order_relaxed) || !name)
        return NULL;
    size_t nl = strnlen(name, MAX_NAME + 1);
    if (nl == 0 || nl > MAX_NAME)
        return NULL;
    char *pn = prom_name(name);
    if (!pn)
        return NULL;
    struct metric *found = NULL, *m = NULL;
    int clash = 0;
    pthread_rwlock_wrlock(&g_lock);
    for (struct metric *x = g_head; x; x = x->next) {
        if (strcmp(x->name, name) == 0) {
            found = x;
            break;
        }
        if (strcmp(x->prom_name, pn) == 0)
            clash = 1;
    }
    if (found) {
        if (found->type == type && found->bounds == bounds)
            m = found;
    } else if (!clash && g_count < MAX_METRICS) {
        m = calloc(1, sizeof *m);
        size_t dl = desc ? strnlen(desc, MAX_DESC) : 0;
        char *d = malloc(dl + 1);
        char *nm = strdup(name);
        if (!m || !d || !nm) {
            free(m);
            free(d);
            free(nm);
            m = NULL;
        } else {
            if (dl)
                memcpy(d, desc, dl);
            d[dl] = 0;
            m->name = nm;
            m->desc = d;
            m->prom_name = pn;
            pn = NULL;
            m->type = type;
            m->bounds = bounds;
            m->nb = nb;
            m->log2 = bounds == g_log2_bounds;
            atomic_init(&m->min, UINT64_MAX);
            /* a child forked right here sees m complete once it is linked (after_fork) */
            atomic_signal_fence(memory_order_seq_cst);
            if (g_last)
                g_last->next = m;
            else
                g_head = m;
            g_last = m;
            g_count++;
        }
    }
    pthread_rwlock_unlock(&g_lock);
    free(pn);
    return m;
}

onepath_counter_t onepath_counter_register(const char *name, const char *description)
{
    return (onepath_counter_t)do_register(name, description, ONEPATH_METRIC_COUNTER, NULL, 0);
}

onepath_gauge_t onepath_gauge_register(const char *name, const char *description)
{
    return (onepath_gauge_t)do_register(name, description, ONEPATH_METRIC_GAUGE, NULL, 0);
}

onepath_histogram_t onepath_histogram_register(const char *name, const char *description)
{
    pthread_once(&g_log2_once, init_log2_bounds);
    return (onepath_histogram_t)do_register(name, description, ONEPATH_METRIC_HISTOGRAM, g_log2_bounds, MAX_BUCKETS);
}

void onepath_counter_add(onepath_counter_t c, int64_t delta)
{
    if (c && delta > 0)
        atomic_fetch_add_explicit(&c->m.value, delta, memory_order_relaxed);
}

void onepath_counter_inc(onepath_counter_t c)
{
    if (c)
        atomic_fetch_add_explicit(&c->m.value, 1, memory_order_relaxed);
}

void onepath_gauge_set(onepath_gauge_t g, int64_t value)
{
    if (g)
        atomic_store_explicit(&g->m.value, value, memory_order_relaxed);
}

void onepath_gauge_add(onepath_gauge_t g, int64_t delta)
{
    if (g)
        atomic_fetch_add_explicit(&g->m.value, delta, memory_order_relaxed);
}

static size_t bucket_of(const struct metric *m, uint64_t v)
{
    if (m->log2) {
        if (v <= 1)
            return 0;
        size_t i = (size_t)(64 - __builtin_clzll(v - 1)); /* smallest i with v <= 2^i */
        return i < m->nb ? i : m->nb - 1;
    }
    size_t i = 0;
    while (i + 1 < m->nb && v > m->bounds[i])
        i++;
    return i;
}

void onepath_histogram_observe(onepath_histogram_t h, uint64_t value)
{
    if (!h)
        return;
    struct metric *m = &h->m;
    atomic_fetch_add_explicit(&m->buckets[bucket_of(m, value)], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&m->sum, value, memory_order_relaxed);
    uint_fast64_t cur = atomic_load_explicit(&m->min, memory_order_relaxed);
    while (value < cur && !atomic_compare_exchange_weak_explicit(&m->min, &cur, value, memory_order_relaxed,
                                                                 memory_order_relaxed))
        ;
    cur = atomic_load_explicit(&m->max, memory_order_relaxed);
    while (value > cur && !atomic_compare_exchange_weak_explicit(&m->max, &cur, value, memory_order_relaxed,
                                                                 memory_order_relaxed))
        ;
}

void onepath_metrics_snapshot(onepath_metric_cb cb, void *userdata)
{
    if (!cb || !atomic_load_explicit(&tg_op_g_metrics_on, memory_order_relaxed))
        return;
    uint64_t buckets[MAX_BUCKETS];
    pthread_rwlock_rdlock(&g_lock);
    for (struct metric *m = g_head; m; m = m->next) {
        onepath_metric_sample_t s;
        memset(&s, 0, sizeof s);
        s.name = m->name;
        s.description = m->desc;
        s.type = m->type;
        if (m->type == ONEPATH_METRIC_HISTOGRAM) {
            uint64_t count = 0;
            for (size_t i = 0; i < m->nb; i++) {
                buckets[i] = atomic_load_explicit(&m->buckets[i], memory_order_relaxed);
                count += buckets[i];
            }
            s.hist_count = count;
            s.hist_sum = atomic_load_explicit(&m->sum, memory_order_relaxed);
            s.hist_min = count ? atomic_load_explicit(&m->min, memory_order_relaxed) : 0;
            s.hist_max = atomic_load_explicit(&m->max, memory_order_relaxed);
            s.hist_buckets = buckets;
            s.hist_bucket_count = m->nb;
            s.hist_bounds = m->bounds;
        } else {
            s.value = atomic_load_explicit(&m->value, memory_order_relaxed);
        }
        cb(&s, userdata);
    }
    pthread_rwlock_unlock(&g_lock);
}

/* ---- fork ---- */

static pthread_mutex_t g_builtins_mu = PTHREAD_MUTEX_INITIALIZER;

void tg_op_metrics_after_fork(void)
{
    pthread_rwlock_init(&g_lock, NULL);
    pthread_mutex_init(&g_builtins_mu, NULL);
    /* a registration cut short by the fork may have linked its metric without moving the tail */
    g_last = NULL;
    g_count = 0;
    for (struct metric *m = g_head; m; m = m->next) {
        g_last = m;
        g_count++;
    }
}

/* ---- built-ins ---- */

/* Registered once per process (metrics persist, so later generations find them registered). */
static struct tg_op_builtins g_builtins;
static atomic_int g_builtins_ready;

static onepath_histogram_t latency_hist(const char *name, const char *desc)
{
    return (onepath_histogram_t)do_register(name, desc, ONEPATH_METRIC_HISTOGRAM, g_latency_bounds, 17);
}

const struct tg_op_builtins *tg_op_builtins(void)
{
    if (!atomic_load_explicit(&tg_op_g_metrics_on, memory_order_relaxed))
        return NULL;
    if (atomic_load_explicit(&g_builtins_ready, memory_order_acquire))
        return &g_builtins;
    pthread_mutex_lock(&g_builtins_mu);
    if (!atomic_load(&g_builtins_ready)) {
        g_builtins.msgs_sent = onepath_counter_register("onepath.msgs.sent", "messages sent successfully");
        g_builtins.msgs_recv = onepath_counter_register("onepath.msgs.recv", "messages received");
        g_builtins.msgs_dropped = onepath_counter_register("onepath.msgs.dropped", "messages whose send failed");
        g_builtins.bytes_sent = onepath_counter_register("onepath.bytes.sent", "payload bytes sent successfully");
        g_builtins.bytes_recv = onepath_counter_register("onepath.bytes.recv", "payload bytes received");
        g_builtins.publish_latency =
            latency_hist("onepath.publish.latency", "publish path duration in microseconds");
        g_builtins.e2e_latency =
            latency_hist("onepath.e2e.latency", "end-to-end latency across hops in microseconds (realtime clocks)");
        /* a shutdown racing with this may have refused some: try again next time */
        if (atomic_load(&tg_op_g_metrics_on))
            atomic_store_explicit(&g_builtins_ready, 1, memory_order_release);
    }
    pthread_mutex_unlock(&g_builtins_mu);
    return &g_builtins;
}
