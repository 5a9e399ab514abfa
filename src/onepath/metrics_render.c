/* metrics_render.c: the two text forms of a metrics snapshot: NDJSON lines (one object per metric
 * per flush, schema in docs/onepath.md) and Prometheus text exposition format 0.0.4. */
#include <stdlib.h>
#include <string.h>

#include "onepath/metrics.h"

struct ndjson_ctx {
    struct tg_op_jb *b;
    uint64_t ts_ns;
    const char *service_name, *host_name;
    uint64_t lines;
};

static const char *type_name(int t)
{
    return t == ONEPATH_METRIC_COUNTER ? "counter" : t == ONEPATH_METRIC_GAUGE ? "gauge" : "histogram";
}

static void ndjson_one(const onepath_metric_sample_t *s, void *arg)
{
    struct ndjson_ctx *c = arg;
    struct tg_op_jb *b = c->b;
    tg_op_jb_puts(b, "{\"ts_ns\":");
    tg_op_jb_u64(b, c->ts_ns);
    tg_op_jb_puts(b, ",\"name\":");
    tg_op_jb_cstr(b, s->name);
    tg_op_jb_puts(b, ",\"type\":\"");
    tg_op_jb_puts(b, type_name(s->type));
    tg_op_jb_puts(b, "\",\"description\":");
    tg_op_jb_cstr(b, s->description);
    if (s->type == ONEPATH_METRIC_HISTOGRAM) {
        tg_op_jb_puts(b, ",\"count\":");
        tg_op_jb_u64(b, s->hist_count);
        tg_op_jb_puts(b, ",\"sum\":");
        tg_op_jb_u64(b, s->hist_sum);
        tg_op_jb_puts(b, ",\"min\":");
        tg_op_jb_u64(b, s->hist_min);
        tg_op_jb_puts(b, ",\"max\":");
        tg_op_jb_u64(b, s->hist_max);
        tg_op_jb_puts(b, ",\"bounds\":[");
        for (size_t i = 0; i + 1 < s->hist_bucket_count; i++) {
            if (i)
                tg_op_jb_putc(b, ',');
            tg_op_jb_u64(b, s->hist_bounds[i]);
        }
        tg_op_jb_puts(b, "],\"counts\":[");
        for (size_t i = 0; i < s->hist_bucket_count; i++) {
            if (i)
                tg_op_jb_putc(b, ',');
            tg_op_jb_u64(b, s->hist_buckets[i]);
        }
        tg_op_jb_putc(b, ']');
    } else {
        tg_op_jb_puts(b, ",\"value\":");
        tg_op_jb_i64(b, s->value);
    }
    tg_op_jb_puts(b, ",\"resource\":{\"service.name\":");
    tg_op_jb_cstr(b, c->service_name);
    tg_op_jb_puts(b, ",\"host.name\":");
    tg_op_jb_cstr(b, c->host_name);
    tg_op_jb_puts(b, "}}\n");
    c->lines++;
}

void tg_op_metrics_ndjson(struct tg_op_jb *b, uint64_t ts_ns, const char *service_name, const char *host_name,
                          uint64_t *lines)
{
    struct ndjson_ctx c = {b, ts_ns, service_name, host_name, 0};
    onepath_metrics_snapshot(ndjson_one, &c);
    if (lines)
        *lines = c.lines;
}

void tg_op_prom_name(struct tg_op_jb *b, const char *name)
{
    if (name[0] >= '0' && name[0] <= '9')
        tg_op_jb_putc(b, '_');
    for (const char *p = name; *p; p++) {
        char c = *p;
        int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == ':';
        tg_op_jb_putc(b, ok ? c : '_');
    }
}

/* HELP text: backslash and newline escaped, as the format requires. */
static void prom_help(struct tg_op_jb *b, const char *s)
{
    for (; *s; s++) {
        if (*s == '\\')
            tg_op_jb_puts(b, "\\\\");
        else if (*s == '\n')
            tg_op_jb_puts(b, "\\n");
        else
            tg_op_jb_putc(b, *s);
    }
}

static void prom_one(const onepath_metric_sample_t *s, void *arg)
{
    struct tg_op_jb *b = arg;
    if (s->description[0]) {
        tg_op_jb_puts(b, "# HELP ");
        tg_op_prom_name(b, s->name);
        tg_op_jb_putc(b, ' ');
        prom_help(b, s->description);
        tg_op_jb_putc(b, '\n');
    }
    tg_op_jb_puts(b, "# TYPE ");
    tg_op_prom_name(b, s->name);
    tg_op_jb_putc(b, ' ');
    tg_op_jb_puts(b, type_name(s->type));
    tg_op_jb_putc(b, '\n');
    if (s->type != ONEPATH_METRIC_HISTOGRAM) {
        tg_op_prom_name(b, s->name);
        tg_op_jb_putc(b, ' ');
        tg_op_jb_i64(b, s->value);
        tg_op_jb_putc(b, '\n');
        return;
    }
    uint64_t cum = 0;
    for (size_t i = 0; i < s->hist_bucket_count; i++) {
        cum += s->hist_buckets[i];
        tg_op_prom_name(b, s->name);
        tg_op_jb_puts(b, "_bucket{le=\"");
        if (i + 1 == s->hist_bucket_count)
            tg_op_jb_puts(b, "+Inf");
        else
            tg_op_jb_u64(b, s->hist_bounds[i]);
        tg_op_jb_puts(b, "\"} ");
        tg_op_jb_u64(b, cum);
        tg_op_jb_putc(b, '\n');
    }
    tg_op_prom_name(b, s->name);
    tg_op_jb_puts(b, "_sum ");
    tg_op_jb_u64(b, s->hist_sum);
    tg_op_jb_putc(b, '\n');
    tg_op_prom_name(b, s->name);
    tg_op_jb_puts(b, "_count ");
    tg_op_jb_u64(b, s->hist_count);
    tg_op_jb_putc(b, '\n');
}

void tg_op_metrics_prometheus(struct tg_op_jb *b) { onepath_metrics_snapshot(prom_one, b); }

char *onepath_metrics_prometheus(size_t *len)
{
    struct tg_op_jb b;
    tg_op_jb_init(&b);
    tg_op_metrics_prometheus(&b);
    tg_op_jb_putc(&b, 0);
    if (tg_op_jb_failed(&b)) {
        tg_op_jb_free(&b);
        return NULL;
    }
    if (len)
        *len = b.len - 1;
    return b.p;
}
