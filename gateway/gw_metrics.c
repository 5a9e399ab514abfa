/* gw_metrics.c: atomic counters, gauges and RPC latency histograms of tracegated, rendered as
 * Prometheus text (see gw_metrics.h). */
#include "gw_metrics.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"

#define LABEL_MAX 64

/* Upper bounds of the latency buckets, in microseconds. */
static const uint64_t k_buckets_us[] = {1000, 5000, 10000, 50000, 100000, 500000, 1000000, 5000000, 30000000, 300000000};
#define N_BUCKETS (sizeof k_buckets_us / sizeof k_buckets_us[0])

struct label_slot {
    char label[LABEL_MAX];
    _Atomic uint64_t value;
};

/* A counter family with one label, values interned on first use. Slot 0 is
 * "other" (used when the family is full). Readers walk [0, n) lock-free:
 * a slot's label is written before n is published (release/acquire). */
struct labeled {
    pthread_mutex_t mu;
    _Atomic size_t n;
    struct label_slot slot[TG_GW_METRICS_MAX_LABELS];
};

struct method_slot {
    char service[LABEL_MAX];
    char method[LABEL_MAX];
    _Atomic uint64_t bucket[N_BUCKETS]; /* non-cumulative; rendered cumulative */
    _Atomic uint64_t count, sum_us, failed, denied;
};

struct tg_gw_metrics {
    _Atomic uint64_t conn_current[TG_GW_T_COUNT];
    _Atomic uint64_t conn_total[TG_GW_T_COUNT];
    _Atomic int64_t sessions;
    _Atomic uint64_t frames[2], bytes[2];
    _Atomic uint64_t upstream_errors[2];
    _Atomic uint64_t route_errors;
    _Atomic uint64_t rate_limited;
    _Atomic uint64_t queue_to_clients, queue_to_service;
    _Atomic int upstream_healthy;
    _Atomic uint64_t smb_chunks, smb_bytes, smb_commits, smb_retries;
    struct labeled frame_rejected;
    struct labeled conn_rejected;
    struct labeled auth_fail[TG_GW_T_COUNT];
    struct labeled auth_ok;
    pthread_mutex_t method_mu;
    _Atomic size_t n_methods;
    struct method_slot methods[TG_GW_METRICS_MAX_METHODS]; /* slot 0 = other */
};

static void labeled_init(struct labeled *l)
{
    pthread_mutex_init(&l->mu, NULL);
    snprintf(l->slot[0].label, LABEL_MAX, "other");
    atomic_store(&l->n, 1);
}

static struct label_slot *labeled_find(struct labeled *l, const char *label, int create)
{
    if (!label || !*label)
        label = "other";
    size_t n = atomic_load_explicit(&l->n, memory_order_acquire);
    for (size_t i = 0; i < n; i++)
        if (strncmp(l->slot[i].label, label, LABEL_MAX - 1) == 0)
            return &l->slot[i];
    if (!create)
        return NULL;
    pthread_mutex_lock(&l->mu);
    struct label_slot *s = &l->slot[0];
    n = atomic_load_explicit(&l->n, memory_order_relaxed);
    size_t i;
    for (i = 0; i < n; i++)
        if (strncmp(l->slot[i].label, label, LABEL_MAX - 1) == 0)
            break;
    if (i < n) {
        s = &l->slot[i];
    } else if (n < TG_GW_METRICS_MAX_LABELS) {
        s = &l->slot[n];
        snprintf(s->label, LABEL_MAX, "%s", label);
        atomic_store_explicit(&l->n, n + 1, memory_order_release);
    }
    pthread_mutex_unlock(&l->mu);
    return s;
}

static void labeled_add(struct labeled *l, const char *label, uint64_t v)
{
    atomic_fetch_add_explicit(&labeled_find(l, label, 1)->value, v, memory_order_relaxed);
}

static uint64_t labeled_get(struct labeled *l, const char *label)
{
    struct label_slot *s = labeled_find(l, label, 0);
    return s ? atomic_load_explicit(&s->value, memory_order_relaxed) : 0;
}

struct tg_gw_metrics *tg_gw_metrics_new(void)
{
    struct tg_gw_metrics *m = calloc(1, sizeof *m);
    if (!m)
        return NULL;
    labeled_init(&m->frame_rejected);
    labeled_init(&m->conn_rejected);
    for (int t = 0; t < TG_GW_T_COUNT; t++)
        labeled_init(&m->auth_fail[t]);
    labeled_init(&m->auth_ok);
    pthread_mutex_init(&m->method_mu, NULL);
    snprintf(m->methods[0].service, LABEL_MAX, "other");
    snprintf(m->methods[0].method, LABEL_MAX, "other");
    atomic_store(&m->n_methods, 1);
    atomic_store(&m->upstream_healthy, 1);
    return m;
}

void tg_gw_metrics_free(struct tg_gw_metrics *m)
{
    if (!m)
        return;
    pthread_mutex_destroy(&m->frame_rejected.mu);
    pthread_mutex_destroy(&m->conn_rejected.mu);
    for (int t = 0; t < TG_GW_T_COUNT; t++)
        pthread_mutex_destroy(&m->auth_fail[t].mu);
    pthread_mutex_destroy(&m->auth_ok.mu);
    pthread_mutex_destroy(&m->method_mu);
    free(m);
}

static int tidx(enum tg_gw_transport t) { return (int)t >= 0 && t < TG_GW_T_COUNT ? (int)t : TG_GW_T_TCP; }

void tg_gw_metrics_conn_open(struct tg_gw_metrics *m, enum tg_gw_transport t)
{
    atomic_fetch_add_explicit(&m->conn_current[tidx(t)], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&m->conn_total[tidx(t)], 1, memory_order_relaxed);
}

void tg_gw_metrics_conn_close(struct tg_gw_metrics *m, enum tg_gw_transport t)
{
    atomic_fetch_sub_explicit(&m->conn_current[tidx(t)], 1, memory_order_relaxed);
}

void tg_gw_metrics_session_delta(struct tg_gw_metrics *m, int delta)
{
    atomic_fetch_add_explicit(&m->sessions, delta, memory_order_relaxed);
}

void tg_gw_metrics_traffic(struct tg_gw_metrics *m, enum tg_gw_dir d, uint64_t frames, uint64_t bytes)
{
    atomic_fetch_add_explicit(&m->frames[d & 1], frames, memory_order_relaxed);
    atomic_fetch_add_explicit(&m->bytes[d & 1], bytes, memory_order_relaxed);
}

void tg_gw_metrics_frame_rejected(struct tg_gw_metrics *m, const char *reason)
{
    labeled_add(&m->frame_rejected, reason, 1);
}

void tg_gw_metrics_conn_rejected(struct tg_gw_metrics *m, const char *reason)
{
    labeled_add(&m->conn_rejected, reason, 1);
}

void tg_gw_metrics_auth_failure(struct tg_gw_metrics *m, enum tg_gw_transport t, const char *reason)
{
    labeled_add(&m->auth_fail[tidx(t)], reason, 1);
}

void tg_gw_metrics_auth_success(struct tg_gw_metrics *m, const char *kind) { labeled_add(&m->auth_ok, kind, 1); }

void tg_gw_metrics_upstream_error(struct tg_gw_metrics *m, enum tg_gw_port p)
{
    atomic_fetch_add_explicit(&m->upstream_errors[p == TG_GW_PORT_PRODUCER], 1, memory_order_relaxed);
}

void tg_gw_metrics_route_error(struct tg_gw_metrics *m)
{
    atomic_fetch_add_explicit(&m->route_errors, 1, memory_order_relaxed);
}

void tg_gw_metrics_rate_limited(struct tg_gw_metrics *m)
{
    atomic_fetch_add_explicit(&m->rate_limited, 1, memory_order_relaxed);
}

void tg_gw_metrics_set_queue_bytes(struct tg_gw_metrics *m, uint64_t to_clients, uint64_t to_service)
{
    atomic_store_explicit(&m->queue_to_clients, to_clients, memory_order_relaxed);
    atomic_store_explicit(&m->queue_to_service, to_service, memory_order_relaxed);
}

void tg_gw_metrics_set_upstream_healthy(struct tg_gw_metrics *m, int healthy)
{
    atomic_store_explicit(&m->upstream_healthy, healthy ? 1 : 0, memory_order_relaxed);
}

void tg_gw_metrics_smb_bridge(struct tg_gw_metrics *m, uint64_t chunks, uint64_t bytes, uint64_t commits,
                              uint64_t retries)
{
    atomic_fetch_add_explicit(&m->smb_chunks, chunks, memory_order_relaxed);
    atomic_fetch_add_explicit(&m->smb_bytes, bytes, memory_order_relaxed);
    atomic_fetch_add_explicit(&m->smb_commits, commits, memory_order_relaxed);
    atomic_fetch_add_explicit(&m->smb_retries, retries, memory_order_relaxed);
}

int tg_gw_metrics_method(struct tg_gw_metrics *m, const char *service, const char *method)
{
    if (!service)
        service = "";
    if (!method)
        method = "";
    size_t n = atomic_load_explicit(&m->n_methods, memory_order_acquire);
    for (size_t i = 1; i < n; i++)
        if (strncmp(m->methods[i].method, method, LABEL_MAX - 1) == 0 &&
            strncmp(m->methods[i].service, service, LABEL_MAX - 1) == 0)
            return (int)i;
    pthread_mutex_lock(&m->method_mu);
    int slot = 0;
    n = atomic_load_explicit(&m->n_methods, memory_order_relaxed);
    for (size_t i = 1; i < n; i++)
        if (strncmp(m->methods[i].method, method, LABEL_MAX - 1) == 0 &&
            strncmp(m->methods[i].service, service, LABEL_MAX - 1) == 0)
            slot = (int)i;
    if (!slot && n < TG_GW_METRICS_MAX_METHODS) {
        snprintf(m->methods[n].service, LABEL_MAX, "%s", service);
        snprintf(m->methods[n].method, LABEL_MAX, "%s", method);
        atomic_store_explicit(&m->n_methods, n + 1, memory_order_release);
        slot = (int)n;
    }
    pthread_mutex_unlock(&m->method_mu);
    return slot;
}

static struct method_slot *method_at(struct tg_gw_metrics *m, int slot)
{
    size_t n = atomic_load_explicit(&m->n_methods, memory_order_acquire);
    return &m->methods[slot > 0 && (size_t)slot < n ? (size_t)slot : 0];
}

void tg_gw_metrics_rpc_done(struct tg_gw_metrics *m, int slot, uint64_t usec, int success)
{
    struct method_slot *s = method_at(m, slot);
    size_t b = 0;
    while (b < N_BUCKETS && usec > k_buckets_us[b])
        b++;
    if (b < N_BUCKETS)
        atomic_fetch_add_explicit(&s->bucket[b], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&s->count, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&s->sum_us, usec, memory_order_relaxed);
    if (!success)
        atomic_fetch_add_explicit(&s->failed, 1, memory_order_relaxed);
}

void tg_gw_metrics_method_names(struct tg_gw_metrics *m, int slot, const char **service, const char **method)
{
    struct method_slot *s = method_at(m, slot);
    *service = s->service;
    *method = s->method;
}

void tg_gw_metrics_rpc_denied(struct tg_gw_metrics *m, int slot)
{
    atomic_fetch_add_explicit(&method_at(m, slot)->denied, 1, memory_order_relaxed);
}

uint64_t tg_gw_metrics_conn_current(struct tg_gw_metrics *m, enum tg_gw_transport t)
{
    return atomic_load(&m->conn_current[tidx(t)]);
}
uint64_t tg_gw_metrics_conn_total(struct tg_gw_metrics *m, enum tg_gw_transport t)
{
    return atomic_load(&m->conn_total[tidx(t)]);
}
uint64_t tg_gw_metrics_frame_rejected_count(struct tg_gw_metrics *m, const char *reason)
{
    return labeled_get(&m->frame_rejected, reason);
}
uint64_t tg_gw_metrics_conn_rejected_count(struct tg_gw_metrics *m, const char *reason)
{
    return labeled_get(&m->conn_rejected, reason);
}
uint64_t tg_gw_metrics_session_current(struct tg_gw_metrics *m)
{
    int64_t v = atomic_load(&m->sessions);
    return v > 0 ? (uint64_t)v : 0;
}

static uint64_t labeled_sum(struct labeled *l)
{
    uint64_t sum = 0;
    size_t n = atomic_load_explicit(&l->n, memory_order_acquire);
    for (size_t i = 0; i < n; i++)
        sum += atomic_load_explicit(&l->slot[i].value, memory_order_relaxed);
    return sum;
}

size_t tg_gw_metrics_snapshot(struct tg_gw_metrics *m, struct tg_gw_metric_value *out, size_t max)
{
    static const char *const open_names[TG_GW_T_COUNT] = {"conn_open_unix", "conn_open_tcp", "conn_open_tls",
                                                          "conn_open_ws",   "conn_open_wss", "conn_open_link"};
    static const char *const total_names[TG_GW_T_COUNT] = {"conn_total_unix", "conn_total_tcp", "conn_total_tls",
                                                           "conn_total_ws",   "conn_total_wss", "conn_total_link"};
    size_t n = 0;
#define PUT(nm, v)                                                                                                     \
    do {                                                                                                               \
        if (n < max) {                                                                                                 \
            out[n].name = (nm);                                                                                        \
            out[n].value = (v);                                                                                        \
        }                                                                                                              \
        n++;                                                                                                           \
    } while (0)
#define LOAD(x) atomic_load_explicit(&(x), memory_order_relaxed)
    PUT("sessions", tg_gw_metrics_session_current(m));
    for (int t = 0; t < TG_GW_T_COUNT; t++) {
        PUT(open_names[t], LOAD(m->conn_current[t]));
        PUT(total_names[t], LOAD(m->conn_total[t]));
    }
    PUT("frames_to_service", LOAD(m->frames[TG_GW_DIR_TO_SERVICE]));
    PUT("bytes_to_service", LOAD(m->bytes[TG_GW_DIR_TO_SERVICE]));
    PUT("frames_to_client", LOAD(m->frames[TG_GW_DIR_TO_CLIENT]));
    PUT("bytes_to_client", LOAD(m->bytes[TG_GW_DIR_TO_CLIENT]));
    PUT("queued_to_clients_bytes", LOAD(m->queue_to_clients));
    PUT("queued_to_service_bytes", LOAD(m->queue_to_service));
    PUT("upstream_healthy", (uint64_t)LOAD(m->upstream_healthy));
    PUT("upstream_errors_consumer", LOAD(m->upstream_errors[0]));
    PUT("upstream_errors_producer", LOAD(m->upstream_errors[1]));
    PUT("frames_rejected", labeled_sum(&m->frame_rejected));
    PUT("conns_rejected", labeled_sum(&m->conn_rejected));
    uint64_t auth_fail = 0;
    for (int t = 0; t < TG_GW_T_COUNT; t++)
        auth_fail += labeled_sum(&m->auth_fail[t]);
    PUT("auth_failures", auth_fail);
    PUT("auth_successes", labeled_sum(&m->auth_ok));
    PUT("rate_limited", LOAD(m->rate_limited));
    uint64_t calls = 0, failed = 0, denied = 0;
    size_t nm = atomic_load_explicit(&m->n_methods, memory_order_acquire);
    for (size_t i = 0; i < nm; i++) {
        calls += LOAD(m->methods[i].count);
        failed += LOAD(m->methods[i].failed);
        denied += LOAD(m->methods[i].denied);
    }
    PUT("rpc_calls", calls);
    PUT("rpc_failed", failed);
    PUT("rpc_denied", denied);
    PUT("smb_chunks", LOAD(m->smb_chunks));
    PUT("smb_bytes", LOAD(m->smb_bytes));
    PUT("smb_commits", LOAD(m->smb_commits));
    PUT("smb_retries", LOAD(m->smb_retries));
#undef LOAD
#undef PUT
    return n;
}

/* ------------------------------------------------------------ rendering */

/* Label values: backslash, double quote and newline are escaped (text format 0.0.4). */
static void put_label(FILE *f, const char *s)
{
    for (; *s; s++) {
        if (*s == '\\' || *s == '"')
            fprintf(f, "\\%c", *s);
        else if (*s == '\n')
            fputs("\\n", f);
        else
            fputc(*s, f);
    }
}

static void head(FILE *f, const char *name, const char *type, const char *help)
{
    fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void render_labeled(FILE *f, struct labeled *l, const char *name, const char *key, const char *extra)
{
    size_t n = atomic_load_explicit(&l->n, memory_order_acquire);
    for (size_t i = 0; i < n; i++) {
        uint64_t v = atomic_load_explicit(&l->slot[i].value, memory_order_relaxed);
        if (i == 0 && v == 0)
            continue; /* "other" only shows once used */
        fprintf(f, "%s{%s%s=\"", name, extra ? extra : "", key);
        put_label(f, l->slot[i].label);
        fprintf(f, "\"} %llu\n", (unsigned long long)v);
    }
}

char *tg_gw_metrics_render(struct tg_gw_metrics *m)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f)
        return NULL;

    head(f, "tracegated_build_info", "gauge", "Version of tracegated.");
    fprintf(f, "tracegated_build_info{version=\"%s\"} 1\n", PACKAGE_VERSION);

    head(f, "tracegated_connections", "gauge", "Client connections open now, by transport.");
    for (int t = 0; t < TG_GW_T_COUNT; t++)
        fprintf(f, "tracegated_connections{transport=\"%s\"} %llu\n", tg_gw_transport_name((enum tg_gw_transport)t),
                (unsigned long long)atomic_load(&m->conn_current[t]));
    head(f, "tracegated_connections_total", "counter", "Client connections accepted, by transport.");
    for (int t = 0; t < TG_GW_T_COUNT; t++)
        fprintf(f, "tracegated_connections_total{transport=\"%s\"} %llu\n",
                tg_gw_transport_name((enum tg_gw_transport)t), (unsigned long long)atomic_load(&m->conn_total[t]));
    head(f, "tracegated_sessions", "gauge", "Bridge sessions alive (a client and its upstream connection).");
    fprintf(f, "tracegated_sessions %llu\n", (unsigned long long)tg_gw_metrics_session_current(m));

    head(f, "tracegated_connections_rejected_total", "counter",
         "Client connections refused or cut by the gateway, by reason.");
    render_labeled(f, &m->conn_rejected, "tracegated_connections_rejected_total", "reason", NULL);

    static const char *const dirs[2] = {"to_service", "to_client"};
    head(f, "tracegated_frames_total", "counter", "IPC frames relayed or answered, by direction.");
    for (int d = 0; d < 2; d++)
        fprintf(f, "tracegated_frames_total{direction=\"%s\"} %llu\n", dirs[d],
                (unsigned long long)atomic_load(&m->frames[d]));
    head(f, "tracegated_bytes_total", "counter", "IPC bytes (headers included) relayed or answered, by direction.");
    for (int d = 0; d < 2; d++)
        fprintf(f, "tracegated_bytes_total{direction=\"%s\"} %llu\n", dirs[d],
                (unsigned long long)atomic_load(&m->bytes[d]));

    head(f, "tracegated_frames_rejected_total", "counter", "Client frames refused by the gateway, by reason.");
    render_labeled(f, &m->frame_rejected, "tracegated_frames_rejected_total", "reason", NULL);

    head(f, "tracegated_auth_failures_total", "counter", "Failed authentications, by transport and reason.");
    for (int t = 0; t < TG_GW_T_COUNT; t++) {
        char extra[48];
        snprintf(extra, sizeof extra, "transport=\"%s\",", tg_gw_transport_name((enum tg_gw_transport)t));
        render_labeled(f, &m->auth_fail[t], "tracegated_auth_failures_total", "reason", extra);
    }
    head(f, "tracegated_auth_success_total", "counter", "Successful authentications, by kind.");
    render_labeled(f, &m->auth_ok, "tracegated_auth_success_total", "kind", NULL);

    head(f, "tracegated_upstream_errors_total", "counter", "Upstream connections that failed or broke, by port.");
    fprintf(f, "tracegated_upstream_errors_total{port=\"consumer\"} %llu\n",
            (unsigned long long)atomic_load(&m->upstream_errors[0]));
    fprintf(f, "tracegated_upstream_errors_total{port=\"producer\"} %llu\n",
            (unsigned long long)atomic_load(&m->upstream_errors[1]));
    head(f, "tracegated_route_errors_total", "counter",
         "Clients for another node that could not be routed there or whose route broke (unknown node, link down too long, channel refused).");
    fprintf(f, "tracegated_route_errors_total %llu\n", (unsigned long long)atomic_load(&m->route_errors));
    head(f, "tracegated_upstream_healthy", "gauge", "1 when the tracing service is reachable.");
    fprintf(f, "tracegated_upstream_healthy %d\n", atomic_load(&m->upstream_healthy));

    head(f, "tracegated_rate_limited_total", "counter", "Times a client was paused by its message-rate limit.");
    fprintf(f, "tracegated_rate_limited_total %llu\n", (unsigned long long)atomic_load(&m->rate_limited));

    head(f, "tracegated_queue_bytes", "gauge", "Bytes queued in output buffers, by destination (sampled).");
    fprintf(f, "tracegated_queue_bytes{to=\"clients\"} %llu\n", (unsigned long long)atomic_load(&m->queue_to_clients));
    fprintf(f, "tracegated_queue_bytes{to=\"service\"} %llu\n", (unsigned long long)atomic_load(&m->queue_to_service));

    head(f, "tracegated_smb_bridge_chunks_total", "counter",
         "Chunks of remote producers copied into the service's shared memory buffer.");
    fprintf(f, "tracegated_smb_bridge_chunks_total %llu\n", (unsigned long long)atomic_load(&m->smb_chunks));
    head(f, "tracegated_smb_bridge_bytes_total", "counter",
         "Bytes of remote producers' chunks copied into the service's shared memory buffer.");
    fprintf(f, "tracegated_smb_bridge_bytes_total %llu\n", (unsigned long long)atomic_load(&m->smb_bytes));
    head(f, "tracegated_smb_bridge_commits_total", "counter",
         "CommitData requests of remote producers rewritten to name shared memory chunks.");
    fprintf(f, "tracegated_smb_bridge_commits_total %llu\n", (unsigned long long)atomic_load(&m->smb_commits));
    head(f, "tracegated_smb_bridge_retries_total", "counter",
         "Times a remote producer's CommitData waited for room in the shared memory buffer.");
    fprintf(f, "tracegated_smb_bridge_retries_total %llu\n", (unsigned long long)atomic_load(&m->smb_retries));

    size_t nm = atomic_load_explicit(&m->n_methods, memory_order_acquire);
    head(f, "tracegated_rpc_denied_total", "counter", "Method calls refused by the access policy, by method.");
    for (size_t i = 0; i < nm; i++) {
        uint64_t v = atomic_load(&m->methods[i].denied);
        if (!v)
            continue;
        fputs("tracegated_rpc_denied_total{service=\"", f);
        put_label(f, m->methods[i].service);
        fputs("\",method=\"", f);
        put_label(f, m->methods[i].method);
        fprintf(f, "\"} %llu\n", (unsigned long long)v);
    }
    head(f, "tracegated_rpc_failed_total", "counter", "Relayed method calls answered success=false, by method.");
    for (size_t i = 0; i < nm; i++) {
        uint64_t v = atomic_load(&m->methods[i].failed);
        if (!v)
            continue;
        fputs("tracegated_rpc_failed_total{service=\"", f);
        put_label(f, m->methods[i].service);
        fputs("\",method=\"", f);
        put_label(f, m->methods[i].method);
        fprintf(f, "\"} %llu\n", (unsigned long long)v);
    }
    head(f, "tracegated_rpc_duration_seconds", "histogram",
         "Time from InvokeMethod to the final reply of relayed calls, by method.");
    for (size_t i = 0; i < nm; i++) {
        struct method_slot *s = &m->methods[i];
        uint64_t count = atomic_load(&s->count);
        if (count == 0)
            continue; /* methods are interned at bind time; show them once called */
        uint64_t cum = 0;
        for (size_t b = 0; b <= N_BUCKETS; b++) {
            fputs("tracegated_rpc_duration_seconds_bucket{service=\"", f);
            put_label(f, s->service);
            fputs("\",method=\"", f);
            put_label(f, s->method);
            if (b < N_BUCKETS) {
                cum += atomic_load(&s->bucket[b]);
                fprintf(f, "\",le=\"%g\"} %llu\n", (double)k_buckets_us[b] / 1e6, (unsigned long long)cum);
            } else {
                /* count is bumped after the bucket: never render +Inf below a bucket */
                fprintf(f, "\",le=\"+Inf\"} %llu\n", (unsigned long long)(count < cum ? cum : count));
            }
        }
        fputs("tracegated_rpc_duration_seconds_sum{service=\"", f);
        put_label(f, s->service);
        fputs("\",method=\"", f);
        put_label(f, s->method);
        fprintf(f, "\"} %.6f\n", (double)atomic_load(&s->sum_us) / 1e6);
        fputs("tracegated_rpc_duration_seconds_count{service=\"", f);
        put_label(f, s->service);
        fputs("\",method=\"", f);
        put_label(f, s->method);
        fprintf(f, "\"} %llu\n", (unsigned long long)count);
    }
    if (fclose(f) != 0) {
        free(buf);
        return NULL;
    }
    return buf;
}
