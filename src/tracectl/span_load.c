/* span_load.c: reading OnePath NDJSON span records (see span_load.h). */
#include "span_load.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "json_read.h"
#include "tracegate/onepath.h"
#include "base/hex.h"

#define MAX_LINE (16u * 1024u * 1024u)

uint32_t tc_node_machine_id(const char *name)
{
    uint64_t h = 0xcbf29ce484222325ull;
    const char *pre = "tracegate-node:";
    for (const char *p = pre; *p; p++)
        h = (h ^ (uint8_t)*p) * 0x100000001b3ull;
    for (const char *p = name; *p; p++)
        h = (h ^ (uint8_t)*p) * 0x100000001b3ull;
    uint32_t id = (uint32_t)h;
    return id ? id : 1;
}

/* An id in hex: exactly 2n digits, not all zero (W3C: an all-zero id is invalid). */
static int unhex(const char *s, uint8_t *out, size_t n)
{
    if (tg_hex_decode(out, n, s) != 0)
        return -1;
    for (size_t i = 0; i < n; i++)
        if (out[i])
            return 0;
    return -1;
}

static char *dup_or_empty(const char *s) { return strdup(s ? s : ""); }

static int get_u64(const struct tc_json *o, const char *key, uint64_t *out)
{
    const struct tc_json *v = tc_json_get(o, key);
    if (!v || v->type != TC_JSON_NUM || !v->is_uint)
        return -1;
    *out = v->u;
    return 0;
}

static int kind_of(const char *s)
{
    static const char *const names[] = {"INTERNAL", "PRODUCER", "CONSUMER", "CLIENT", "SERVER"};
    for (int i = 0; s && i < 5; i++)
        if (strcmp(s, names[i]) == 0)
            return i;
    return ONEPATH_SPAN_KIND_INTERNAL;
}

static int status_of(const char *s)
{
    if (s && strcmp(s, "OK") == 0)
        return ONEPATH_SPAN_STATUS_OK;
    if (s && strcmp(s, "ERROR") == 0)
        return ONEPATH_SPAN_STATUS_ERROR;
    return ONEPATH_SPAN_STATUS_UNSET;
}

static void span_clear(struct tc_span *sp)
{
    free(sp->name);
    free(sp->status_msg);
    free(sp->thread_name);
    free(sp->service);
    free(sp->host);
    free(sp->node);
    for (size_t i = 0; i < sp->n_attrs; i++) {
        free(sp->attrs[i].key);
        free(sp->attrs[i].s);
    }
    free(sp->attrs);
    for (size_t i = 0; i < sp->n_events; i++)
        free(sp->events[i].name);
    free(sp->events);
    memset(sp, 0, sizeof *sp);
}

static int load_attrs(struct tc_span *sp, const struct tc_json *a)
{
    if (!a || a->type != TC_JSON_OBJ || a->n == 0)
        return 0;
    sp->attrs = calloc(a->n, sizeof *sp->attrs);
    if (!sp->attrs)
        return -1;
    for (size_t i = 0; i < a->n; i++) {
        const struct tc_json *v = &a->items[i];
        struct tc_span_attr *x = &sp->attrs[sp->n_attrs];
        switch (v->type) {
        case TC_JSON_STR: x->type = TC_ATTR_STR; x->s = strdup(v->s); if (!x->s) return -1; break;
        case TC_JSON_BOOL: x->type = TC_ATTR_BOOL; x->i = v->b; break;
        case TC_JSON_NUM:
            if (v->is_int && !(v->is_uint && v->u > INT64_MAX)) {
                x->type = TC_ATTR_INT;
                x->i = v->i;
            } else {
                x->type = TC_ATTR_DOUBLE;
                x->d = v->d;
            }
            break;
        default: continue; /* null, arrays and objects are not OnePath attribute values */
        }
        x->key = strdup(a->keys[i]);
        if (!x->key)
            return -1;
        sp->n_attrs++;
    }
    return 0;
}

static int load_events(struct tc_span *sp, const struct tc_json *a)
{
    if (!a || a->type != TC_JSON_ARR || a->n == 0)
        return 0;
    sp->events = calloc(a->n, sizeof *sp->events);
    if (!sp->events)
        return -1;
    for (size_t i = 0; i < a->n; i++) {
        uint64_t ts;
        const char *name = tc_json_get_str(&a->items[i], "name");
        if (!name || get_u64(&a->items[i], "ts_ns", &ts) != 0)
            continue;
        sp->events[sp->n_events].name = strdup(name);
        if (!sp->events[sp->n_events].name)
            return -1;
        sp->events[sp->n_events++].ts_ns = ts;
    }
    return 0;
}

static void load_machine(struct tc_span *sp, const struct tc_json *res, const char *host_node)
{
    const struct tc_json *m = tc_json_get(res, "perfetto.machine_id");
    if (m && m->type == TC_JSON_NUM && m->is_uint && m->u <= UINT32_MAX) {
        sp->has_machine = 1;
        sp->machine_id = (uint32_t)m->u;
    } else if (m && m->type == TC_JSON_STR) {
        char *end;
        errno = 0;
        unsigned long long v = strtoull(m->s, &end, 10);
        if (!errno && *end == 0 && end != m->s && v <= UINT32_MAX && m->s[0] != '-') {
            sp->has_machine = 1;
            sp->machine_id = (uint32_t)v;
        }
    }
    const char *node = tc_json_get_str(res, "tracegate.node");
    if (!sp->has_machine && node && node[0]) {
        sp->has_machine = 1;
        sp->machine_id = host_node && !strcmp(node, host_node) ? 0 : tc_node_machine_id(node);
    }
}

int tc_spans_add_line(struct tc_span_set *set, const char *line, size_t len, char *err, size_t errlen)
{
    struct tc_json_doc *doc = tc_json_parse(line, len, err, errlen);
    if (!doc)
        return -1;
    const struct tc_json *o = tc_json_root(doc);
    struct tc_span sp;
    memset(&sp, 0, sizeof sp);
    int rc = -1;
    const char *parent = tc_json_get_str(o, "parent_span_id");
    uint64_t dur;
    if (o->type != TC_JSON_OBJ) {
        snprintf(err, errlen, "not a JSON object");
        goto out;
    }
    if (unhex(tc_json_get_str(o, "trace_id"), sp.trace_id, 16) != 0) {
        snprintf(err, errlen, "trace_id is not 32 hex digits (non-zero)");
        goto out;
    }
    if (unhex(tc_json_get_str(o, "span_id"), sp.span_id, 8) != 0) {
        snprintf(err, errlen, "span_id is not 16 hex digits (non-zero)");
        goto out;
    }
    if (parent && parent[0]) {
        if (unhex(parent, sp.parent_id, 8) != 0) {
            snprintf(err, errlen, "parent_span_id is neither empty nor 16 hex digits");
            goto out;
        }
        sp.has_parent = 1;
    }
    if (get_u64(o, "start_ns", &sp.start_ns) != 0) {
        snprintf(err, errlen, "start_ns is not a non-negative integer");
        goto out;
    }
    if (get_u64(o, "end_ns", &sp.end_ns) != 0) {
        if (get_u64(o, "duration_ns", &dur) != 0) {
            snprintf(err, errlen, "neither end_ns nor duration_ns is a non-negative integer");
            goto out;
        }
        sp.end_ns = sp.start_ns + dur;
    }
    if (sp.end_ns < sp.start_ns)
        sp.end_ns = sp.start_ns;
    sp.kind = kind_of(tc_json_get_str(o, "kind"));
    const struct tc_json *st = tc_json_get(o, "status");
    sp.status = status_of(tc_json_get_str(st, "code"));
    const struct tc_json *th = tc_json_get(o, "thread");
    const struct tc_json *tid = tc_json_get(th, "id");
    if (tid && tid->type == TC_JSON_NUM && tid->is_int && tid->i > 0)
        sp.tid = tid->i;
    const struct tc_json *res = tc_json_get(o, "resource");
    const struct tc_json *pid = tc_json_get(res, "process.pid");
    if (pid && pid->type == TC_JSON_NUM && pid->is_int && pid->i > 0 && pid->i <= INT32_MAX)
        sp.pid = pid->i;
    load_machine(&sp, res, set->host_node);
    sp.name = dup_or_empty(tc_json_get_str(o, "name"));
    sp.status_msg = dup_or_empty(tc_json_get_str(st, "message"));
    sp.thread_name = dup_or_empty(tc_json_get_str(th, "name"));
    sp.service = dup_or_empty(tc_json_get_str(res, "service.name"));
    sp.host = dup_or_empty(tc_json_get_str(res, "host.name"));
    sp.node = dup_or_empty(tc_json_get_str(res, "tracegate.node"));
    if (!sp.name || !sp.status_msg || !sp.thread_name || !sp.service || !sp.host || !sp.node ||
        load_attrs(&sp, tc_json_get(o, "attributes")) || load_events(&sp, tc_json_get(o, "events"))) {
        snprintf(err, errlen, "out of memory");
        goto out;
    }
    if (set->n == set->cap) {
        size_t cap = set->cap ? set->cap * 2 : 256;
        struct tc_span *v = realloc(set->v, cap * sizeof *v);
        if (!v) {
            snprintf(err, errlen, "out of memory");
            goto out;
        }
        set->v = v;
        set->cap = cap;
    }
    set->v[set->n++] = sp;
    memset(&sp, 0, sizeof sp);
    rc = 0;
out:
    span_clear(&sp);
    tc_json_free(doc);
    return rc;
}

int tc_spans_load_file(struct tc_span_set *set, const char *path, FILE *warn, char *err, size_t errlen)
{
    FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "r");
    if (!f) {
        snprintf(err, errlen, "cannot open %s: %s", path, strerror(errno));
        return -1;
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    uint64_t lineno = 0, bad = 0;
    int rc = 0;
    while ((n = getline(&line, &cap, f)) >= 0) {
        lineno++;
        size_t len = (size_t)n;
        while (len && (line[len - 1] == '\n' || line[len - 1] == '\r'))
            len--;
        if (len == 0)
            continue;
        char why[256];
        if (len > MAX_LINE) {
            snprintf(why, sizeof why, "line longer than %u bytes", MAX_LINE);
        } else if (tc_spans_add_line(set, line, len, why, sizeof why) == 0) {
            continue;
        }
        if (strcmp(why, "out of memory") == 0) {
            snprintf(err, errlen, "%s: out of memory", path);
            rc = -1;
            break;
        }
        if (bad++ < 10 && warn)
            fprintf(warn, "tracectl: %s:%" PRIu64 ": not a span record (%s): skipped\n", path, lineno, why);
    }
    if (rc == 0 && ferror(f)) {
        snprintf(err, errlen, "cannot read %s: %s", path, strerror(errno));
        rc = -1;
    }
    if (bad > 10 && warn)
        fprintf(warn, "tracectl: %s: %" PRIu64 " lines in all were not span records\n", path, bad);
    set->bad_lines += bad;
    free(line);
    if (f != stdin)
        fclose(f);
    return rc;
}

void tc_spans_free(struct tc_span_set *set)
{
    for (size_t i = 0; i < set->n; i++)
        span_clear(&set->v[i]);
    free(set->v);
    memset(set, 0, sizeof *set);
}
