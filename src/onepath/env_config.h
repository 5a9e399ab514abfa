/* env_config.h: OnePath's settings, read once per init from onepath_trace_opts_t and the ONEPATH_*
 * environment variables (docs/onepath.md lists them with their defaults). */
#ifndef TG_ONEPATH_ENV_CONFIG_H
#define TG_ONEPATH_ENV_CONFIG_H

#include <stddef.h>

#include "tracegate/onepath.h"

#define TG_OP_DEFAULT_SERVICE "onepath"
#define TG_OP_DEFAULT_RING 1024
#define TG_OP_MAX_RING (1u << 20)
#define TG_OP_DEFAULT_TRACE_FLUSH_MS 500
#define TG_OP_DEFAULT_METRICS_FLUSH_MS 1000
#define TG_OP_MAX_FLUSH_MS 3600000
#define TG_OP_DEFAULT_OTLP_QUEUE 64
#define TG_OP_DEFAULT_OTLP_RETRIES 5
#define TG_OP_DEFAULT_OTLP_TIMEOUT_MS 10000
#define TG_OP_DEFAULT_OTLP_BACKOFF_MS 200
#define TG_OP_DEFAULT_OTLP_BATCH 512
#define TG_OP_DEFAULT_RECENT_BYTES (4u << 20)
#define TG_OP_MAX_RECENT_SPANS (1u << 20)

struct tg_op_config {
    int trace_enabled, metrics_enabled, auto_inject;
    double sample_ratio;
    char *service_name; /* never NULL after load */
    char *trace_path;   /* NULL: no span export */
    char *metrics_path; /* NULL: no metrics export */
    unsigned trace_flush_ms, metrics_flush_ms;
    size_t ring_capacity;
    char *otlp_file;       /* NULL: no OTLP/JSON lines file */
    char *otlp_http;       /* NULL: no OTLP/HTTP export */
    char *resource_attrs;  /* ONEPATH_TRACE_RESOURCE_ATTRIBUTES, NULL if unset */
    unsigned otlp_queue;   /* pending OTLP/HTTP requests at most */
    unsigned otlp_retries; /* retries of a failed request before it is lost */
    unsigned otlp_timeout_ms, otlp_backoff_ms;
    unsigned otlp_batch;   /* spans per OTLP request at most */
    unsigned recent_spans; /* ONEPATH_TRACE_RECENT_SPANS: spans kept in memory (0: none) */
    unsigned recent_bytes; /* ONEPATH_TRACE_RECENT_BYTES: their NDJSON bytes at most */
};

/* Fills c (opts may be NULL). Returns ONEPATH_OK or ONEPATH_ERR_NOMEM (c then freed). Malformed
 * values fall back to the default with a warning in the log. */
int tg_op_config_load(struct tg_op_config *c, const onepath_trace_opts_t *opts, const onepath_otlp_opts_t *otlp);
void tg_op_config_free(struct tg_op_config *c);

#endif
