/* spans.c: the span API. Each thread keeps a fixed stack of span frames in thread-local storage
 * (no allocation for unsampled spans); a handle is a pointer to its frame, so calls with a handle
 * from another thread, or one already ended, are recognised and ignored. A sampled span on a
 * recording runtime also owns a heap record that span_end hands to the exporter. */
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "onepath/ids.h"
#include "onepath/runtime.h"
#include "onepath/span_record.h"
#include "tracegate/onepath.h"

#define MAX_DEPTH 64

struct onepath_span {
    onepath_trace_ctx_t ctx;    /* this span's own context (span_id = its id) */
    struct tg_op_span_rec *rec; /* NULL: not recording */
};

struct span_stack {
    struct onepath_span frames[MAX_DEPTH];
    unsigned depth;
    int has_key; /* the exit destructor is registered for this thread */
};

static _Thread_local struct span_stack t_stack;
static pthread_key_t g_exit_key;
static pthread_once_t g_exit_once = PTHREAD_ONCE_INIT;

/* A thread that exits with recording spans still open: free their records. */
static void on_thread_exit(void *arg)
{
    struct span_stack *st = arg;
    for (unsigned i = 0; i < st->depth; i++) {
        tg_op_rec_free(st->frames[i].rec);
        st->frames[i].rec = NULL;
    }
    st->depth = 0;
}

static void make_exit_key(void) { pthread_key_create(&g_exit_key, on_thread_exit); }

/* The index of h in this thread's live stack, or -1. */
static int frame_index(const struct onepath_span *h)
{
    uintptr_t base = (uintptr_t)t_stack.frames, p = (uintptr_t)h;
    if (!h || p < base || p >= base + sizeof t_stack.frames || (p - base) % sizeof *h)
        return -1;
    unsigned i = (unsigned)((p - base) / sizeof *h);
    return i < t_stack.depth ? (int)i : -1;
}

static struct tg_op_span_rec *live_rec(onepath_span_t span)
{
    return frame_index(span) < 0 ? NULL : span->rec;
}

onepath_span_t onepath_span_start(const char *name, int kind, const onepath_trace_ctx_t *parent)
{
    if (!atomic_load_explicit(&tg_op_g_trace_on, memory_order_relaxed)) {
        if (atomic_load_explicit(&tg_op_g_up, memory_order_relaxed))
            return NULL; /* initialised, tracing off: the whole disabled cost is these two loads */
        tg_op_lazy_init();
        if (!atomic_load_explicit(&tg_op_g_trace_on, memory_order_relaxed))
            return NULL;
    }
    struct span_stack *st = &t_stack;
    if (st->depth >= MAX_DEPTH)
        return NULL;
    const onepath_trace_ctx_t *p = NULL;
    if (parent && onepath_trace_ctx_valid(parent))
        p = parent;
    else if (st->depth > 0)
        p = &st->frames[st->depth - 1].ctx;
    struct onepath_span *f = &st->frames[st->depth];
    f->ctx.version = 0;
    if (p) {
        memcpy(f->ctx.trace_id, p->trace_id, 16);
        f->ctx.flags = p->flags & ONEPATH_TRACE_FLAG_SAMPLED;
    } else {
        tg_op_new_trace_id(f->ctx.trace_id);
        f->ctx.flags = tg_op_sample_trace(f->ctx.trace_id) ? ONEPATH_TRACE_FLAG_SAMPLED : 0;
    }
    tg_op_new_span_id(f->ctx.span_id);
    f->rec = NULL;
    if ((f->ctx.flags & ONEPATH_TRACE_FLAG_SAMPLED) && atomic_load_explicit(&tg_op_g_recording, memory_order_relaxed)) {
        if (kind < ONEPATH_SPAN_KIND_INTERNAL || kind > ONEPATH_SPAN_KIND_SERVER)
            kind = ONEPATH_SPAN_KIND_INTERNAL;
        f->rec = tg_op_rec_new(name, kind, f->ctx.trace_id, f->ctx.span_id, p ? p->span_id : NULL,
                               atomic_load_explicit(&tg_op_g_epoch, memory_order_relaxed));
        if (f->rec && !st->has_key) {
            pthread_once(&g_exit_once, make_exit_key);
            pthread_setspecific(g_exit_key, st);
            st->has_key = 1;
        }
    }
    st->depth++;
    return f;
}

void onepath_span_end(onepath_span_t span)
{
    int idx = frame_index(span);
    if (idx < 0)
        return;
    struct span_stack *st = &t_stack;
    /* end the span and any child left open above it, innermost first */
    while (st->depth > (unsigned)idx) {
        struct onepath_span *f = &st->frames[--st->depth];
        if (f->rec) {
            tg_op_rec_finish(f->rec);
            tg_op_export_record(f->rec);
            f->rec = NULL;
        }
    }
}

int onepath_span_is_recording(onepath_span_t span) { return live_rec(span) != NULL; }

void onepath_span_set_attr_str(onepath_span_t span, const char *key, const char *value)
{
    struct tg_op_span_rec *r = live_rec(span);
    if (r)
        tg_op_rec_attr_str(r, key, value);
}

void onepath_span_set_attr_i64(onepath_span_t span, const char *key, int64_t value)
{
    struct tg_op_span_rec *r = live_rec(span);
    if (r)
        tg_op_rec_attr_i64(r, key, value);
}

void onepath_span_set_attr_f64(onepath_span_t span, const char *key, double value)
{
    struct tg_op_span_rec *r = live_rec(span);
    if (r)
        tg_op_rec_attr_f64(r, key, value);
}

void onepath_span_set_status(onepath_span_t span, int status, const char *msg)
{
    struct tg_op_span_rec *r = live_rec(span);
    if (r)
        tg_op_rec_status(r, status, msg);
}

void onepath_span_add_event(onepath_span_t span, const char *name)
{
    struct tg_op_span_rec *r = live_rec(span);
    if (r)
        tg_op_rec_event(r, name);
}

int onepath_trace_current_ctx(onepath_trace_ctx_t *out)
{
    if (!out || !atomic_load_explicit(&tg_op_g_trace_on, memory_order_relaxed) || t_stack.depth == 0)
        return 0;
    *out = t_stack.frames[t_stack.depth - 1].ctx;
    return 1;
}
