/* gw_metrics.h: tracegated's metrics registry (counters, gauges, per-method
 * RPC latency histograms) and its Prometheus text exposition.
 *
 * Every update is a relaxed atomic add, safe from any thread (the libevent
 * thread bumps traffic counters, the WebSocket thread bumps auth failures,
 * and renders /metrics). Labelled families grow on first use up to a fixed
 * number of label values (TG_GW_METRICS_MAX_LABELS); beyond that, updates
 * go to the label "other", so a hostile peer cannot grow memory or
 * cardinality. Label values are escaped when rendered.
 *
 * Ownership: tg_gw_metrics_new/free by the gateway core; render returns a
 * malloc'd string the caller frees. */
#ifndef TRACEGATE_GATEWAY_GW_METRICS_H
#define TRACEGATE_GATEWAY_GW_METRICS_H

#include <stddef.h>
#include <stdint.h>

#include "gw.h"

#define TG_GW_METRICS_MAX_LABELS 48
#define TG_GW_METRICS_MAX_METHODS 96

/* Direction of a frame through the bridge. */
enum tg_gw_dir {
    TG_GW_DIR_TO_SERVICE = 0, /* client -> upstream ("up") */
    TG_GW_DIR_TO_CLIENT = 1,  /* upstream -> client ("down") */
};

struct tg_gw_metrics;

struct tg_gw_metrics *tg_gw_metrics_new(void);
void tg_gw_metrics_free(struct tg_gw_metrics *m);

void tg_gw_metrics_conn_open(struct tg_gw_metrics *m, enum tg_gw_transport t);
void tg_gw_metrics_conn_close(struct tg_gw_metrics *m, enum tg_gw_transport t);
/* Sessions (a client plus its upstream; outlives the client when detached). */
void tg_gw_metrics_session_delta(struct tg_gw_metrics *m, int delta);
void tg_gw_metrics_traffic(struct tg_gw_metrics *m, enum tg_gw_dir d, uint64_t frames, uint64_t bytes);
/* Frames refused by the bridge, by reason ("acl", "oversize", ...). */
void tg_gw_metrics_frame_rejected(struct tg_gw_metrics *m, const char *reason);
/* Connections refused or cut, by reason ("max_connections", "slow_client_soft", ...). */
void tg_gw_metrics_conn_rejected(struct tg_gw_metrics *m, const char *reason);
void tg_gw_metrics_auth_failure(struct tg_gw_metrics *m, enum tg_gw_transport t, const char *reason);
void tg_gw_metrics_auth_success(struct tg_gw_metrics *m, const char *kind);
void tg_gw_metrics_upstream_error(struct tg_gw_metrics *m, enum tg_gw_port p);
/* A client for another node could not be routed there (not this node's upstream failing). */
void tg_gw_metrics_route_error(struct tg_gw_metrics *m);
void tg_gw_metrics_rate_limited(struct tg_gw_metrics *m);
void tg_gw_metrics_set_queue_bytes(struct tg_gw_metrics *m, uint64_t to_clients, uint64_t to_service);
void tg_gw_metrics_set_upstream_healthy(struct tg_gw_metrics *m, int healthy);
/* Remote-producer SMB bridge (gw_smb_filter.c): chunks and bytes copied into
 * the service's SMB, CommitData requests rewritten, retries (SMB full). */
void tg_gw_metrics_smb_bridge(struct tg_gw_metrics *m, uint64_t chunks, uint64_t bytes, uint64_t commits,
                              uint64_t retries);

/* Per-method statistics. tg_gw_metrics_method() returns a stable slot for a
 * method name (interned on first use; the "other" slot when full). */
int tg_gw_metrics_method(struct tg_gw_metrics *m, const char *service, const char *method);
void tg_gw_metrics_rpc_done(struct tg_gw_metrics *m, int slot, uint64_t usec, int success);
/* The interned names of a slot; stable for the metrics' lifetime ("other"
 * for the overflow slot). */
void tg_gw_metrics_method_names(struct tg_gw_metrics *m, int slot, const char **service, const char **method);
void tg_gw_metrics_rpc_denied(struct tg_gw_metrics *m, int slot);

/* Reads for tests and /api/status. */
uint64_t tg_gw_metrics_conn_current(struct tg_gw_metrics *m, enum tg_gw_transport t);
uint64_t tg_gw_metrics_conn_total(struct tg_gw_metrics *m, enum tg_gw_transport t);
uint64_t tg_gw_metrics_frame_rejected_count(struct tg_gw_metrics *m, const char *reason);
uint64_t tg_gw_metrics_conn_rejected_count(struct tg_gw_metrics *m, const char *reason);
uint64_t tg_gw_metrics_session_current(struct tg_gw_metrics *m);

/* The counters and gauges as a flat list of (name, value), label families summed (per-reason
 * and per-method detail stays in /metrics): what `tracectl stats` writes as a KCDATA stats
 * snapshot (gw_stats_service.c). Names are stable, [a-z0-9_], at most 31 bytes; they point to
 * static strings. Writes at most max entries and returns how many there are. Any thread. */
struct tg_gw_metric_value {
    const char *name;
    uint64_t value;
};
#define TG_GW_METRICS_SNAPSHOT_MAX 48
size_t tg_gw_metrics_snapshot(struct tg_gw_metrics *m, struct tg_gw_metric_value *out, size_t max);

/* Prometheus text format 0.0.4. malloc'd; NULL on allocation failure. */
char *tg_gw_metrics_render(struct tg_gw_metrics *m);

#endif
