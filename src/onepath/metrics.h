/* metrics.h: OnePath's metric registry internals: the built-in onepath.* metrics (registered
 * lazily, once per process, at the first send/receive with metrics enabled) and the
 * renderers built on onepath_metrics_snapshot (NDJSON lines, Prometheus text). */
#ifndef TG_ONEPATH_METRICS_H
#define TG_ONEPATH_METRICS_H

#include <stdint.h>

#include "onepath/jsonbuf.h"
#include "tracegate/onepath.h"

struct tg_op_builtins {
    onepath_counter_t msgs_sent, msgs_recv, msgs_dropped, bytes_sent, bytes_recv;
    onepath_histogram_t publish_latency, e2e_latency; /* µs, fixed buckets */
};

/* The built-in metrics (registering them on first use in this generation), or NULL when metrics
 * are disabled. Any thread. */
const struct tg_op_builtins *tg_op_builtins(void);

/* Appends one NDJSON line per metric (schema in docs/onepath.md), all stamped ts_ns. */
void tg_op_metrics_ndjson(struct tg_op_jb *b, uint64_t ts_ns, const char *service_name, const char *host_name,
                          uint64_t *lines);
/* Appends name as a Prometheus metric name: [a-zA-Z_:][a-zA-Z0-9_:]*, any other character becomes
 * '_' and a leading digit gets a '_' in front. */
void tg_op_prom_name(struct tg_op_jb *b, const char *name);
/* Appends the Prometheus text of every metric. */
void tg_op_metrics_prometheus(struct tg_op_jb *b);
/* In a forked child: the registry's locks may have been held by threads the child does not
 * have (the metrics flush thread in its snapshot): made fresh, the list's tail re-found. */
void tg_op_metrics_after_fork(void);

#endif
