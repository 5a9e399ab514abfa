/* runtime.c: onepath_trace_init / shutdown / lazy init, the fast-path flags, head sampling and
 * the guarded hand-off of span records to the exporter (an in-flight count lets shutdown wait
 * for every span_end that might still touch the exporter before freeing it). */
#include "onepath/runtime.h"

#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "onepath/env_config.h"
#include "onepath/metrics.h"
#include "onepath/metrics_export.h"
#include "onepath/ndjson_file.h"
#include "onepath/recent.h"
#include "onepath/resource.h"
#include "onepath/span_export.h"
#include "onepath/span_record.h"
#include "tracegate/log.h"
#include "tracegate/onepath.h"

atomic_int tg_op_g_trace_on;
atomic_int tg_op_g_metrics_on;
atomic_int tg_op_g_auto_inject;
atomic_int tg_op_g_recording;
atomic_uint tg_op_g_epoch;
atomic_int tg_op_g_up;

static atomic_uint_fast64_t g_sample_thr; /* sampled iff (low 64 bits of id >> 1) < thr */
static atomic_int g_lazy_failed;          /* an init failed since the last shutdown: no lazy retry */
static atomic_int g_exiting;              /* the process is exiting: never start again lazily */
static pthread_mutex_t g_life = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t g_hooks_once = PTHREAD_ONCE_INIT;

static struct tg_op_span_exporter *_Atomic g_span_exp;
static atomic_int g_exp_users; /* span_end calls between reading g_span_exp and pushing */
static struct tg_op_metrics_exporter *g_metrics_exp;
static struct tg_op_config g_cfg;

/* A forked child has none of the exporter threads: forget them (leaking their memory in the
 * child) and let it start afresh with a new init or lazy init. */
static void after_fork_child(void)
{
    pthread_mutex_init(&g_life, NULL);
    atomic_store(&tg_op_g_trace_on, 0);
    atomic_store(&tg_op_g_metrics_on, 0);
    atomic_store(&tg_op_g_recording, 0);
    atomic_store(&g_span_exp, NULL);
    atomic_store(&g_exp_users, 0);
    g_metrics_exp = NULL;
    memset(&g_cfg, 0, sizeof g_cfg);
    tg_op_rec_forget_thread();
    tg_op_recent_after_fork();
    tg_op_metrics_after_fork();
    atomic_fetch_add(&tg_op_g_epoch, 1);
    atomic_store(&g_lazy_failed, 0);
    atomic_store(&tg_op_g_up, 0);
}

/* An application that never calls shutdown (tracing switched on by the environment alone) still
 * gets the spans of its last flush period written when it exits normally. */
static void flush_at_exit(void)
{
    atomic_store(&g_exiting, 1);
    onepath_trace_shutdown();
}

static void register_process_hooks(void)
{
    pthread_atfork(NULL, NULL, after_fork_child);
    atexit(flush_at_exit);
}

static uint64_t ratio_threshold(double r)
{
    if (r <= 0)
        return 0;
    if (r >= 1)
        return (uint64_t)1 << 63;
    return (uint64_t)(r * 9223372036854775808.0); /* r * 2^63 < 2^63 */
}

int tg_op_sample_trace(const uint8_t id[16])
{
    uint64_t x = 0;
    for (int i = 8; i < 16; i++)
        x = x << 8 | id[i];
    return (x >> 1) < atomic_load_explicit(&g_sample_thr, memory_order_relaxed);
}

static int init_locked(const onepath_trace_opts_t *opts, const onepath_otlp_opts_t *otlp)
{
    if (atomic_load(&tg_op_g_up))
        return ONEPATH_OK;
    pthread_once(&g_hooks_once, register_process_hooks);
    struct tg_op_config c;
    int rc = tg_op_config_load(&c, opts, otlp);
    if (rc != ONEPATH_OK)
        return rc;
    char host[256];
    if (gethostname(host, sizeof host) != 0)
        host[0] = 0;
    host[sizeof host - 1] = 0;

    atomic_fetch_add(&tg_op_g_epoch, 1); /* records of earlier generations are not exported */
    tg_op_stats_reset(ONEPATH_EXPORT_SPANS, c.trace_enabled && c.trace_path ? c.trace_path : "");
    tg_op_stats_reset(ONEPATH_EXPORT_METRICS, c.metrics_enabled && c.metrics_path ? c.metrics_path : "");
    tg_op_stats_reset(ONEPATH_EXPORT_OTLP_FILE, c.trace_enabled && c.otlp_file ? c.otlp_file : "");
    tg_op_stats_reset(ONEPATH_EXPORT_OTLP_HTTP, c.trace_enabled && c.otlp_http ? c.otlp_http : "");
    struct tg_op_span_exporter *se = NULL;
    struct tg_op_metrics_exporter *me = NULL;
    if (c.trace_enabled && (c.trace_path || c.otlp_file || c.otlp_http || c.recent_spans)) {
        struct tg_op_resource res;
        if (tg_op_resource_build(&res, c.service_name, host, (long)getpid(), c.resource_attrs) != 0) {
            rc = ONEPATH_ERR_NOMEM;
            goto fail;
        }
        struct tg_op_otlp_http_cfg http = {c.otlp_http, c.otlp_queue, c.otlp_retries, c.otlp_timeout_ms,
                                           c.otlp_backoff_ms};
        struct tg_op_span_sinks sinks = {c.trace_path, c.otlp_file, c.otlp_http ? &http : NULL, c.otlp_batch,
                                         c.recent_spans > 0, &res};
        tg_op_recent_configure(c.recent_spans, c.recent_bytes);
        se = tg_op_span_exporter_start(&sinks, c.ring_capacity, c.trace_flush_ms, &rc);
        tg_op_resource_free(&res);
        if (!se) {
            tg_op_recent_clear();
            if (rc == ONEPATH_ERR_IO)
                tg_error("onepath", "cannot open a span export file (NDJSON %s, OTLP %s)",
                         c.trace_path ? c.trace_path : "-", c.otlp_file ? c.otlp_file : "-");
            goto fail;
        }
    }
    /* the metrics exporter's first flush may come at once: metrics must be on before it starts */
    atomic_store(&tg_op_g_metrics_on, c.metrics_enabled);
    if (c.metrics_enabled && c.metrics_path) {
        me = tg_op_metrics_exporter_start(c.metrics_path, c.metrics_flush_ms, c.service_name, host, &rc);
        if (!me) {
            tg_error("onepath", "cannot open the metrics export file %s", c.metrics_path);
            atomic_store(&tg_op_g_metrics_on, 0);
            tg_op_span_exporter_stop(se);
            goto fail;
        }
    }
    atomic_store(&g_sample_thr, ratio_threshold(c.sample_ratio));
    atomic_store(&tg_op_g_auto_inject, c.auto_inject);
    atomic_store(&g_span_exp, se);
    g_metrics_exp = me;
    atomic_store(&tg_op_g_recording, se != NULL);
    atomic_store(&tg_op_g_trace_on, c.trace_enabled);
    g_cfg = c;
    atomic_store(&tg_op_g_up, 1);
    return ONEPATH_OK;
fail:
    tg_op_config_free(&c);
    return rc;
}

int onepath_trace_init_otlp(const onepath_trace_opts_t *opts, const onepath_otlp_opts_t *otlp)
{
    pthread_mutex_lock(&g_life);
    int rc = init_locked(opts, otlp);
    if (rc != ONEPATH_OK)
        atomic_store(&g_lazy_failed, 1); /* nothing starts behind the caller's back until shutdown */
    pthread_mutex_unlock(&g_life);
    return rc;
}

int onepath_trace_init(const onepath_trace_opts_t *opts) { return onepath_trace_init_otlp(opts, NULL); }

int onepath_metrics_init(void) { return onepath_trace_init(NULL); }

void tg_op_lazy_init(void)
{
    if (atomic_load_explicit(&tg_op_g_up, memory_order_acquire) || atomic_load_explicit(&g_lazy_failed, memory_order_relaxed) ||
        atomic_load_explicit(&g_exiting, memory_order_relaxed))
        return;
    pthread_mutex_lock(&g_life);
    if (!atomic_load(&tg_op_g_up) && !atomic_load(&g_lazy_failed) && !atomic_load(&g_exiting) &&
        init_locked(NULL, NULL) != ONEPATH_OK)
        atomic_store(&g_lazy_failed, 1);
    pthread_mutex_unlock(&g_life);
}

void onepath_trace_shutdown(void)
{
    pthread_mutex_lock(&g_life);
    atomic_store(&g_lazy_failed, 0);
    if (!atomic_load(&tg_op_g_up)) {
        pthread_mutex_unlock(&g_life);
        return;
    }
    atomic_store(&tg_op_g_trace_on, 0);
    atomic_store(&tg_op_g_recording, 0);
    struct tg_op_span_exporter *se = atomic_exchange(&g_span_exp, NULL);
    /* every span_end that saw the exporter has pushed by the time the count is zero */
    while (atomic_load(&g_exp_users) != 0)
        sched_yield();
    tg_op_span_exporter_stop(se);
    tg_op_recent_clear();
    tg_op_metrics_exporter_stop(g_metrics_exp); /* its final flush still sees the metrics */
    g_metrics_exp = NULL;
    atomic_store(&tg_op_g_metrics_on, 0);
    tg_op_config_free(&g_cfg);
    atomic_store(&tg_op_g_up, 0);
    pthread_mutex_unlock(&g_life);
}

int onepath_trace_enabled(void) { return atomic_load_explicit(&tg_op_g_trace_on, memory_order_relaxed); }

int onepath_metrics_enabled(void) { return atomic_load_explicit(&tg_op_g_metrics_on, memory_order_relaxed); }

void tg_op_export_record(struct tg_op_span_rec *rec)
{
    atomic_fetch_add(&g_exp_users, 1);
    struct tg_op_span_exporter *e = atomic_load(&g_span_exp);
    if (e && rec->epoch == atomic_load_explicit(&tg_op_g_epoch, memory_order_relaxed))
        tg_op_span_exporter_push(e, rec);
    else
        tg_op_rec_free(rec);
    atomic_fetch_sub(&g_exp_users, 1);
}
