/* config.c: reading ONEPATH_* environment variables and onepath_trace_opts_t into one settings
 * struct: booleans (1/0, true/false, yes/no, on/off), the sample ratio clamped to [0,1], flush
 * periods in ms, paths (empty = no export). */
#include "onepath/env_config.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "onepath/jsonbuf.h"
#include "tracegate/log.h"

static const char *env(const char *name)
{
    const char *v = getenv(name);
    return v && *v ? v : NULL;
}

static int env_bool(const char *name, int def)
{
    const char *v = env(name);
    if (!v)
        return def;
    if (!strcmp(v, "1") || !strcasecmp(v, "true") || !strcasecmp(v, "yes") || !strcasecmp(v, "on"))
        return 1;
    if (!strcmp(v, "0") || !strcasecmp(v, "false") || !strcasecmp(v, "no") || !strcasecmp(v, "off"))
        return 0;
    tg_warn("onepath", "%s=%s is not a boolean (1 or 0): using %d", name, v, def);
    return def;
}

static unsigned env_uint(const char *name, unsigned def, unsigned lo, unsigned hi, const char *what)
{
    const char *v = env(name);
    if (!v)
        return def;
    char *end;
    errno = 0;
    unsigned long n = strtoul(v, &end, 10);
    if (errno || *end || n < lo || n > hi || v[0] == '-') {
        tg_warn("onepath", "%s=%s is not %s (%u..%u): using %u", name, v, what, lo, hi, def);
        return def;
    }
    return (unsigned)n;
}

static unsigned env_ms(const char *name, unsigned def)
{
    return env_uint(name, def, 1, TG_OP_MAX_FLUSH_MS, "a period in ms");
}

static double clamp_ratio(double r)
{
    if (isnan(r) || r < 0)
        return 0.0;
    return r > 1.0 ? 1.0 : r;
}

static double env_ratio(const char *name)
{
    const char *v = env(name);
    if (!v)
        return 0.0;
    char *end;
    /* '.' is the decimal separator whatever LC_NUMERIC the application set before the init */
    locale_t c = tg_op_c_locale(), old = c ? uselocale(c) : (locale_t)0;
    double r = strtod(v, &end);
    if (c)
        uselocale(old);
    if (*end || end == v || isnan(r)) {
        tg_warn("onepath", "%s=%s is not a ratio in [0,1]: using 0.0", name, v);
        return 0.0;
    }
    return clamp_ratio(r);
}

static int dup_opt(char **out, const char *opt, const char *env_name)
{
    const char *v = opt ? opt : env(env_name);
    *out = NULL;
    if (!v || !*v)
        return 0;
    *out = strdup(v);
    return *out ? 0 : -1;
}

int tg_op_config_load(struct tg_op_config *c, const onepath_trace_opts_t *opts, const onepath_otlp_opts_t *otlp)
{
    memset(c, 0, sizeof *c);
    c->trace_enabled = env_bool("ONEPATH_TRACE_ENABLE", 0);
    c->metrics_enabled = env_bool("ONEPATH_METRICS_ENABLE", 0);
    c->auto_inject = env_bool("ONEPATH_TRACE_AUTO_INJECT", 1);
    c->sample_ratio = opts && opts->sample_ratio > 0 ? clamp_ratio(opts->sample_ratio)
                                                     : env_ratio("ONEPATH_TRACE_SAMPLE_RATIO");
    c->trace_flush_ms = env_ms("ONEPATH_TRACE_FLUSH_MS", TG_OP_DEFAULT_TRACE_FLUSH_MS);
    c->metrics_flush_ms = env_ms("ONEPATH_METRICS_FLUSH_MS", TG_OP_DEFAULT_METRICS_FLUSH_MS);
    c->ring_capacity = opts && opts->ring_capacity ? opts->ring_capacity : TG_OP_DEFAULT_RING;
    if (c->ring_capacity > TG_OP_MAX_RING)
        c->ring_capacity = TG_OP_MAX_RING;
    if (dup_opt(&c->service_name, opts ? opts->service_name : NULL, "ONEPATH_TRACE_SERVICE_NAME") ||
        dup_opt(&c->trace_path, opts ? opts->ndjson_path : NULL, "ONEPATH_TRACE_NDJSON_PATH") ||
        dup_opt(&c->metrics_path, NULL, "ONEPATH_METRICS_NDJSON_PATH") ||
        dup_opt(&c->otlp_file, otlp ? otlp->otlp_file : NULL, "ONEPATH_TRACE_OTLP_FILE") ||
        dup_opt(&c->otlp_http, otlp ? otlp->otlp_http : NULL, "ONEPATH_TRACE_OTLP_HTTP") ||
        dup_opt(&c->resource_attrs, NULL, "ONEPATH_TRACE_RESOURCE_ATTRIBUTES"))
        goto oom;
    c->otlp_queue = env_uint("ONEPATH_TRACE_OTLP_QUEUE", TG_OP_DEFAULT_OTLP_QUEUE, 1, 65536, "a request count");
    c->otlp_retries = env_uint("ONEPATH_TRACE_OTLP_RETRIES", TG_OP_DEFAULT_OTLP_RETRIES, 0, 100, "a retry count");
    c->otlp_timeout_ms = env_uint("ONEPATH_TRACE_OTLP_TIMEOUT_MS", TG_OP_DEFAULT_OTLP_TIMEOUT_MS, 1,
                                  TG_OP_MAX_FLUSH_MS, "a timeout in ms");
    c->otlp_backoff_ms = env_uint("ONEPATH_TRACE_OTLP_BACKOFF_MS", TG_OP_DEFAULT_OTLP_BACKOFF_MS, 1, 60000,
                                  "a delay in ms");
    c->otlp_batch = env_uint("ONEPATH_TRACE_OTLP_BATCH", TG_OP_DEFAULT_OTLP_BATCH, 1, 65536, "a span count");
    c->recent_spans = env_uint("ONEPATH_TRACE_RECENT_SPANS", 0, 0, TG_OP_MAX_RECENT_SPANS, "a span count");
    c->recent_bytes = env_uint("ONEPATH_TRACE_RECENT_BYTES", TG_OP_DEFAULT_RECENT_BYTES, 1024, 1u << 30,
                               "a byte count");
    if (!c->service_name && !(c->service_name = strdup(TG_OP_DEFAULT_SERVICE)))
        goto oom;
    return ONEPATH_OK;
oom:
    tg_op_config_free(c);
    return ONEPATH_ERR_NOMEM;
}

void tg_op_config_free(struct tg_op_config *c)
{
    free(c->service_name);
    free(c->trace_path);
    free(c->metrics_path);
    free(c->otlp_file);
    free(c->otlp_http);
    free(c->resource_attrs);
    memset(c, 0, sizeof *c);
}
