/* span_record.c: building a recording span (bounded attributes/events, copied strings) and
 * rendering it as the NDJSON span record of docs/onepath.md. */
#include "onepath/span_record.h"

#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "tracegate/clock.h"
#include "tracegate/onepath.h"

static char *dup_cut(const char *s)
{
    size_t n = strnlen(s, TG_OP_MAX_STR);
    char *d = malloc(n + 1);
    if (d) {
        memcpy(d, s, n);
        d[n] = 0;
    }
    return d;
}

/* The calling thread's id and name, looked up once per thread (two system calls). */
static _Thread_local int64_t t_tid;
static _Thread_local char t_name[16];

static void thread_identity(struct tg_op_span_rec *r)
{
    if (!t_tid) {
        t_tid = (int64_t)syscall(SYS_gettid);
        if (prctl(PR_GET_NAME, t_name, 0, 0, 0) != 0)
            t_name[0] = 0;
        t_name[sizeof t_name - 1] = 0;
    }
    r->tid = t_tid;
    memcpy(r->thread_name, t_name, sizeof r->thread_name);
}

/* A forked child's first thread has the parent's cached identity: forget it. */
void tg_op_rec_forget_thread(void)
{
    t_tid = 0;
    t_name[0] = 0;
}

struct tg_op_span_rec *tg_op_rec_new(const char *name, int kind, const uint8_t trace_id[16],
                                     const uint8_t span_id[8], const uint8_t *parent_span_id, unsigned epoch)
{
    if (!name)
        name = "";
    size_t n = strnlen(name, TG_OP_MAX_STR);
    struct tg_op_span_rec *r = malloc(sizeof *r + n + 1);
    if (!r)
        return NULL;
    memset(r, 0, sizeof *r);
    memcpy(r->name, name, n);
    r->name[n] = 0;
    memcpy(r->trace_id, trace_id, 16);
    memcpy(r->span_id, span_id, 8);
    if (parent_span_id) {
        memcpy(r->parent_span_id, parent_span_id, 8);
        r->has_parent = 1;
    }
    r->kind = (uint8_t)kind;
    r->epoch = epoch;
    r->start_real_ns = tg_real_ns();
    r->start_mono_ns = tg_mono_ns();
    thread_identity(r);
    return r;
}

static void attr_clear(struct tg_op_attr *a)
{
    if (a->type == TG_OP_ATTR_STR)
        free(a->v.s);
}

void tg_op_rec_free(struct tg_op_span_rec *r)
{
    if (!r)
        return;
    for (unsigned i = 0; i < r->n_attrs; i++) {
        free(r->attrs[i].key);
        attr_clear(&r->attrs[i]);
    }
    free(r->attrs);
    for (unsigned i = 0; i < r->n_events; i++)
        free(r->events[i].name);
    free(r->events);
    free(r->status_msg);
    free(r);
}

/* The slot for key: the existing one (value cleared) or a new one; NULL when full or OOM. */
static struct tg_op_attr *attr_slot(struct tg_op_span_rec *r, const char *key)
{
    if (!key)
        return NULL;
    size_t kl = strnlen(key, TG_OP_MAX_STR);
    for (unsigned i = 0; i < r->n_attrs; i++) {
        if (strncmp(r->attrs[i].key, key, kl) == 0 && r->attrs[i].key[kl] == 0) {
            attr_clear(&r->attrs[i]);
            r->attrs[i].type = TG_OP_ATTR_I64;
            return &r->attrs[i];
        }
    }
    if (r->n_attrs >= TG_OP_MAX_ATTRS)
        return NULL;
    if (r->n_attrs == r->cap_attrs) {
        unsigned cap = r->cap_attrs ? r->cap_attrs * 2 : 4;
        struct tg_op_attr *a = realloc(r->attrs, cap * sizeof *a);
        if (!a)
            return NULL;
        r->attrs = a;
        r->cap_attrs = cap;
    }
    char *k = dup_cut(key);
    if (!k)
        return NULL;
    struct tg_op_attr *a = &r->attrs[r->n_attrs++];
    a->key = k;
    a->type = TG_OP_ATTR_I64;
    a->v.i = 0;
    return a;
}

void tg_op_rec_attr_str(struct tg_op_span_rec *r, const char *key, const char *value)
{
    if (!value)
        return;
    char *v = dup_cut(value);
    if (!v)
        return;
    struct tg_op_attr *a = attr_slot(r, key);
    if (!a) {
        free(v);
        return;
    }
    a->type = TG_OP_ATTR_STR;
    a->v.s = v;
}

void tg_op_rec_attr_i64(struct tg_op_span_rec *r, const char *key, int64_t value)
{
    struct tg_op_attr *a = attr_slot(r, key);
    if (a) {
        a->type = TG_OP_ATTR_I64;
        a->v.i = value;
    }
}

void tg_op_rec_attr_f64(struct tg_op_span_rec *r, const char *key, double value)
{
    struct tg_op_attr *a = attr_slot(r, key);
    if (a) {
        a->type = TG_OP_ATTR_F64;
        a->v.f = value;
    }
}

void tg_op_rec_status(struct tg_op_span_rec *r, int status, const char *msg)
{
    if (status < ONEPATH_SPAN_STATUS_UNSET || status > ONEPATH_SPAN_STATUS_ERROR)
        return;
    char *m = msg ? dup_cut(msg) : NULL;
    if (msg && !m)
        return;
    free(r->status_msg);
    r->status_msg = m;
    r->status = (uint8_t)status;
}

void tg_op_rec_event(struct tg_op_span_rec *r, const char *name)
{
    if (!name || r->n_events >= TG_OP_MAX_EVENTS)
        return;
    if (r->n_events == r->cap_events) {
        unsigned cap = r->cap_events ? r->cap_events * 2 : 4;
        struct tg_op_event *e = realloc(r->events, cap * sizeof *e);
        if (!e)
            return;
        r->events = e;
        r->cap_events = cap;
    }
    char *n = dup_cut(name);
    if (!n)
        return;
    r->events[r->n_events].name = n;
    r->events[r->n_events].ts_ns = r->start_real_ns + (tg_mono_ns() - r->start_mono_ns);
    r->n_events++;
}

void tg_op_rec_finish(struct tg_op_span_rec *r)
{
    /* the duration comes from the monotonic clock, so a wall-clock step never makes it negative */
    r->duration_ns = tg_mono_ns() - r->start_mono_ns;
    r->end_real_ns = r->start_real_ns + r->duration_ns;
}

const char *tg_op_kind_name(int k)
{
    static const char *const names[] = {"INTERNAL", "PRODUCER", "CONSUMER", "CLIENT", "SERVER"};
    return k >= 0 && k <= 4 ? names[k] : "INTERNAL";
}

const char *tg_op_status_name(int s)
{
    static const char *const names[] = {"UNSET", "OK", "ERROR"};
    return s >= 0 && s <= 2 ? names[s] : "UNSET";
}

void tg_op_rec_json(const struct tg_op_span_rec *r, struct tg_op_jb *b, const char *resource_json)
{
    tg_op_jb_puts(b, "{\"trace_id\":");
    tg_op_jb_hex(b, r->trace_id, 16);
    tg_op_jb_puts(b, ",\"span_id\":");
    tg_op_jb_hex(b, r->span_id, 8);
    tg_op_jb_puts(b, ",\"parent_span_id\":");
    if (r->has_parent)
        tg_op_jb_hex(b, r->parent_span_id, 8);
    else
        tg_op_jb_puts(b, "\"\"");
    tg_op_jb_puts(b, ",\"name\":");
    tg_op_jb_cstr(b, r->name);
    tg_op_jb_puts(b, ",\"kind\":\"");
    tg_op_jb_puts(b, tg_op_kind_name(r->kind));
    tg_op_jb_puts(b, "\",\"start_ns\":");
    tg_op_jb_u64(b, r->start_real_ns);
    tg_op_jb_puts(b, ",\"end_ns\":");
    tg_op_jb_u64(b, r->end_real_ns);
    tg_op_jb_puts(b, ",\"duration_ns\":");
    tg_op_jb_u64(b, r->duration_ns);
    tg_op_jb_puts(b, ",\"status\":{\"code\":\"");
    tg_op_jb_puts(b, tg_op_status_name(r->status));
    tg_op_jb_puts(b, "\",\"message\":");
    tg_op_jb_cstr(b, r->status_msg);
    tg_op_jb_puts(b, "},\"attributes\":{");
    for (unsigned i = 0; i < r->n_attrs; i++) {
        if (i)
            tg_op_jb_putc(b, ',');
        tg_op_jb_cstr(b, r->attrs[i].key);
        tg_op_jb_putc(b, ':');
        switch (r->attrs[i].type) {
        case TG_OP_ATTR_STR: tg_op_jb_cstr(b, r->attrs[i].v.s); break;
        case TG_OP_ATTR_F64: tg_op_jb_f64(b, r->attrs[i].v.f); break;
        default: tg_op_jb_i64(b, r->attrs[i].v.i); break;
        }
    }
    tg_op_jb_puts(b, "},\"events\":[");
    for (unsigned i = 0; i < r->n_events; i++) {
        if (i)
            tg_op_jb_putc(b, ',');
        tg_op_jb_puts(b, "{\"name\":");
        tg_op_jb_cstr(b, r->events[i].name);
        tg_op_jb_puts(b, ",\"ts_ns\":");
        tg_op_jb_u64(b, r->events[i].ts_ns);
        tg_op_jb_putc(b, '}');
    }
    tg_op_jb_puts(b, "],\"thread\":{\"id\":");
    tg_op_jb_i64(b, r->tid);
    tg_op_jb_puts(b, ",\"name\":");
    tg_op_jb_cstr(b, r->thread_name);
    tg_op_jb_puts(b, "},\"resource\":");
    tg_op_jb_puts(b, resource_json);
    tg_op_jb_puts(b, "}\n");
}

/* ---- OTLP/JSON (opentelemetry.proto.trace.v1.Span in the OTLP JSON encoding: ids as lower-case
 * hex, 64-bit integers as decimal strings, enums as numbers) ---- */

/* OnePath kinds (INTERNAL 0, PRODUCER 1, CONSUMER 2, CLIENT 3, SERVER 4) to OTLP SpanKind
 * (INTERNAL 1, SERVER 2, CLIENT 3, PRODUCER 4, CONSUMER 5). */
static int otlp_kind(int k)
{
    static const int map[] = {1, 4, 5, 3, 2};
    return k >= 0 && k <= 4 ? map[k] : 1;
}

static void otlp_u64_str(struct tg_op_jb *b, uint64_t v)
{
    tg_op_jb_putc(b, '"');
    tg_op_jb_u64(b, v);
    tg_op_jb_putc(b, '"');
}

static void otlp_attr_key(struct tg_op_jb *b, const char *key, int *first)
{
    if (!*first)
        tg_op_jb_putc(b, ',');
    *first = 0;
    tg_op_jb_puts(b, "{\"key\":");
    tg_op_jb_cstr(b, key);
    tg_op_jb_puts(b, ",\"value\":{");
}

void tg_op_rec_otlp(const struct tg_op_span_rec *r, struct tg_op_jb *b)
{
    tg_op_jb_puts(b, "{\"traceId\":");
    tg_op_jb_hex(b, r->trace_id, 16);
    tg_op_jb_puts(b, ",\"spanId\":");
    tg_op_jb_hex(b, r->span_id, 8);
    if (r->has_parent) {
        tg_op_jb_puts(b, ",\"parentSpanId\":");
        tg_op_jb_hex(b, r->parent_span_id, 8);
    }
    tg_op_jb_puts(b, ",\"name\":");
    tg_op_jb_cstr(b, r->name);
    tg_op_jb_puts(b, ",\"kind\":");
    tg_op_jb_i64(b, otlp_kind(r->kind));
    tg_op_jb_puts(b, ",\"startTimeUnixNano\":");
    otlp_u64_str(b, r->start_real_ns);
    tg_op_jb_puts(b, ",\"endTimeUnixNano\":");
    otlp_u64_str(b, r->end_real_ns);
    tg_op_jb_puts(b, ",\"attributes\":[");
    int first = 1;
    for (unsigned i = 0; i < r->n_attrs; i++) {
        otlp_attr_key(b, r->attrs[i].key, &first);
        switch (r->attrs[i].type) {
        case TG_OP_ATTR_STR:
            tg_op_jb_puts(b, "\"stringValue\":");
            tg_op_jb_cstr(b, r->attrs[i].v.s);
            break;
        case TG_OP_ATTR_F64:
            tg_op_jb_puts(b, "\"doubleValue\":");
            tg_op_jb_f64(b, r->attrs[i].v.f);
            break;
        default:
            tg_op_jb_puts(b, "\"intValue\":\"");
            tg_op_jb_i64(b, r->attrs[i].v.i);
            tg_op_jb_putc(b, '"');
            break;
        }
        tg_op_jb_puts(b, "}}");
    }
    /* the OpenTelemetry semantic conventions' thread attributes */
    otlp_attr_key(b, "thread.id", &first);
    tg_op_jb_puts(b, "\"intValue\":\"");
    tg_op_jb_i64(b, r->tid);
    tg_op_jb_puts(b, "\"}}");
    if (r->thread_name[0]) {
        otlp_attr_key(b, "thread.name", &first);
        tg_op_jb_puts(b, "\"stringValue\":");
        tg_op_jb_cstr(b, r->thread_name);
        tg_op_jb_puts(b, "}}");
    }
    tg_op_jb_puts(b, "],\"events\":[");
    for (unsigned i = 0; i < r->n_events; i++) {
        if (i)
            tg_op_jb_putc(b, ',');
        tg_op_jb_puts(b, "{\"timeUnixNano\":");
        otlp_u64_str(b, r->events[i].ts_ns);
        tg_op_jb_puts(b, ",\"name\":");
        tg_op_jb_cstr(b, r->events[i].name);
        tg_op_jb_putc(b, '}');
    }
    tg_op_jb_puts(b, "],\"status\":{\"code\":");
    tg_op_jb_i64(b, r->status <= ONEPATH_SPAN_STATUS_ERROR ? r->status : 0);
    if (r->status_msg && r->status_msg[0]) {
        tg_op_jb_puts(b, ",\"message\":");
        tg_op_jb_cstr(b, r->status_msg);
    }
    tg_op_jb_puts(b, "}}");
}
