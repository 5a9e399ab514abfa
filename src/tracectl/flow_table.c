/* flow_table.c: flows linked as trace processor links them (see flow_table.h). */
#include "flow_table.h"

#include <stdlib.h>
#include <string.h>

#include "clock_sync_est.h"

struct tc_flow_event {
    int64_t ts;
    uint64_t idx; /* file order */
    uint64_t track;
    uint32_t machine;
    uint32_t kind;
    char *name;
    char *track_name;
    size_t ids_off;
    uint32_t n_flows, n_terms;
    int64_t slice; /* after the track pass: the slice it opened, closed or is; -1 none */
};

struct flow_ref {
    uint32_t machine; /* flow ids are per machine in trace processor */
    uint64_t flow_id;
    int64_t ts;
    uint64_t idx;
    uint32_t sub; /* position in the event: flow_ids first, then terminating ones */
    int terminating;
    size_t slice;
};

static char *dup_or_null(const char *s)
{
    if (!s)
        return NULL;
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d)
        memcpy(d, s, n);
    return d;
}

int tc_flow_table_add(struct tc_flow_table *t, enum tc_flow_kind kind, uint32_t machine, uint64_t track_uuid,
                      const char *track_name, int has_ts, int64_t ts, const char *name, const uint64_t *flows,
                      size_t n_flows, const uint64_t *terms, size_t n_terms)
{
    if (!has_ts) {
        t->unplaced++;
        return 0;
    }
    if (n_flows > UINT32_MAX || n_terms > UINT32_MAX)
        return -1;
    if (t->n_ev == t->cap_ev) {
        size_t cap = t->cap_ev ? t->cap_ev * 2 : 256;
        struct tc_flow_event *ne = realloc(t->ev, cap * sizeof *ne);
        if (!ne)
            return -1;
        t->ev = ne;
        t->cap_ev = cap;
    }
    size_t need = n_flows + n_terms;
    if (t->n_ids + need > t->cap_ids) {
        size_t cap = t->cap_ids ? t->cap_ids : 256;
        while (cap < t->n_ids + need)
            cap *= 2;
        uint64_t *ni = realloc(t->ids, cap * sizeof *ni);
        if (!ni)
            return -1;
        t->ids = ni;
        t->cap_ids = cap;
    }
    struct tc_flow_event *e = &t->ev[t->n_ev];
    memset(e, 0, sizeof *e);
    e->ts = ts;
    e->idx = t->n_ev;
    e->track = track_uuid;
    e->machine = machine;
    e->kind = (uint32_t)kind;
    e->name = dup_or_null(name ? name : "");
    e->track_name = dup_or_null(track_name);
    if (!e->name || (track_name && !e->track_name)) {
        free(e->name);
        free(e->track_name);
        return -1;
    }
    e->ids_off = t->n_ids;
    e->n_flows = (uint32_t)n_flows;
    e->n_terms = (uint32_t)n_terms;
    e->slice = -1;
    if (n_flows)
        memcpy(t->ids + t->n_ids, flows, n_flows * sizeof *flows);
    if (n_terms)
        memcpy(t->ids + t->n_ids + n_flows, terms, n_terms * sizeof *terms);
    t->n_ids += need;
    t->n_ev++;
    return 0;
}

#define CMP(a, b) ((a) < (b) ? -1 : (a) > (b) ? 1 : 0)

/* each track's events in time order */
static int by_track_time(const void *pa, const void *pb)
{
    const struct tc_flow_event *a = *(struct tc_flow_event *const *)pa, *b = *(struct tc_flow_event *const *)pb;
    int c = CMP(a->machine, b->machine);
    if (!c)
        c = CMP(a->track, b->track);
    if (!c)
        c = CMP(a->ts, b->ts);
    return c ? c : CMP(a->idx, b->idx);
}

/* each flow id's events in time order */
static int by_flow_time(const void *pa, const void *pb)
{
    const struct flow_ref *a = pa, *b = pb;
    int c = CMP(a->machine, b->machine);
    if (!c)
        c = CMP(a->flow_id, b->flow_id);
    if (!c)
        c = CMP(a->ts, b->ts);
    if (!c)
        c = CMP(a->idx, b->idx);
    return c ? c : CMP(a->sub, b->sub);
}

static int edge_order(const void *pa, const void *pb)
{
    const struct tc_flow_edge *a = pa, *b = pb;
    int c = CMP(a->out->ts, b->out->ts);
    if (!c)
        c = CMP(a->in->ts, b->in->ts);
    return c ? c : CMP(a->flow_id, b->flow_id);
}

/* Rebuilds the slices of every track: begins nest, ends close the innermost open slice. */
static int build_slices(struct tc_flow_table *t)
{
    struct tc_flow_event **order = malloc((t->n_ev ? t->n_ev : 1) * sizeof *order);
    size_t *stack = malloc((t->n_ev ? t->n_ev : 1) * sizeof *stack);
    t->slices = malloc((t->n_ev ? t->n_ev : 1) * sizeof *t->slices);
    if (!order || !stack || !t->slices) {
        free(order);
        free(stack);
        return -1;
    }
    for (size_t i = 0; i < t->n_ev; i++)
        order[i] = &t->ev[i];
    qsort(order, t->n_ev, sizeof *order, by_track_time);
    size_t depth = 0;
    for (size_t i = 0; i < t->n_ev; i++) {
        struct tc_flow_event *e = order[i];
        if (i && (e->machine != order[i - 1]->machine || e->track != order[i - 1]->track))
            depth = 0; /* another track */
        if (e->kind == TC_FLOW_END) {
            if (depth)
                e->slice = (int64_t)stack[--depth];
            else if (e->n_flows || e->n_terms)
                t->unmatched_ends++;
            continue;
        }
        struct tc_flow_slice *s = &t->slices[t->n_slices];
        s->name = e->name;
        s->track = e->track_name;
        s->track_uuid = e->track;
        s->machine = e->machine;
        s->ts = e->ts;
        e->slice = (int64_t)t->n_slices++;
        if (e->kind == TC_FLOW_BEGIN)
            stack[depth++] = (size_t)e->slice;
    }
    free(order);
    free(stack);
    return 0;
}

int tc_flow_table_resolve(struct tc_flow_table *t, int64_t (*offset)(void *ctx, uint32_t machine), void *ctx)
{
    for (size_t i = 0; offset && i < t->n_ev; i++)
        if (t->ev[i].machine)
            t->ev[i].ts = tc_host_time(t->ev[i].ts, offset(ctx, t->ev[i].machine));
    if (build_slices(t) != 0)
        return -1;
    struct flow_ref *refs = malloc((t->n_ids ? t->n_ids : 1) * sizeof *refs);
    if (!refs)
        return -1;
    size_t n = 0;
    for (size_t i = 0; i < t->n_ev; i++) {
        const struct tc_flow_event *e = &t->ev[i];
        if (e->slice < 0)
            continue;
        for (uint32_t k = 0; k < e->n_flows + e->n_terms; k++)
            refs[n++] = (struct flow_ref){.machine = e->machine,
                                          .flow_id = t->ids[e->ids_off + k],
                                          .ts = e->ts,
                                          .idx = e->idx,
                                          .sub = k,
                                          .terminating = k >= e->n_flows,
                                          .slice = (size_t)e->slice};
    }
    qsort(refs, n, sizeof *refs, by_flow_time);
    t->edges = malloc((n ? n : 1) * sizeof *t->edges);
    if (!t->edges) {
        free(refs);
        return -1;
    }
    const struct tc_flow_slice *active = NULL;
    for (size_t i = 0; i < n; i++) {
        if (i && (refs[i].flow_id != refs[i - 1].flow_id || refs[i].machine != refs[i - 1].machine))
            active = NULL; /* another flow id, or the same id on another machine */
        const struct tc_flow_slice *s = &t->slices[refs[i].slice];
        if (!active) {
            if (!refs[i].terminating)
                active = s; /* begins; a terminating id that is not active is ignored */
            continue;
        }
        t->edges[t->n_edges++] = (struct tc_flow_edge){.flow_id = refs[i].flow_id, .out = active, .in = s};
        active = refs[i].terminating ? NULL : s;
    }
    free(refs);
    qsort(t->edges, t->n_edges, sizeof *t->edges, edge_order);
    return 0;
}

void tc_flow_table_free(struct tc_flow_table *t)
{
    for (size_t i = 0; i < t->n_ev; i++) {
        free(t->ev[i].name);
        free(t->ev[i].track_name);
    }
    free(t->ev);
    free(t->ids);
    free(t->slices);
    free(t->edges);
    memset(t, 0, sizeof *t);
}
