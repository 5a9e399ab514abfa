/* span_stitch.c: OnePath spans to TrackEvent packets (rules in span_stitch.h), encoded with the
 * project's protobuf-c messages for TracePacket, TrackDescriptor, TrackEvent, DebugAnnotation. */
#include "span_stitch.h"
#include "span_lanes.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "trace_packet.pb-c.h"
#include "tracegate/onepath.h"
#include "base/hex.h"

#define SEQ_INCREMENTAL_STATE_CLEARED 1

struct item {
    const struct tc_span *sp;
    uint32_t origin;   /* the machine the span ran on (0: the host), for its tracks; every packet
                        * is the host's (see place) */
    uint32_t clock_id; /* the host clock b and e are on */
    uint64_t b, e;
    size_t proc, track;
    int skip;
};

struct track {
    uint64_t uuid, parent_uuid;
    char *name;        /* thread tracks, and process tracks without a pid */
    int64_t pid;       /* process tracks with a pid */
    const char *pname; /* their process name */
    uint32_t clock_id;
};

struct ev {
    uint64_t ts;
    size_t order;
    size_t item;
    int begin;
};

struct ctx {
    const struct tc_span_set *set;
    const struct tc_trace_clocks *clocks;
    const struct tc_stitch_opts *o;
    struct tc_stitch_stats *st;
    struct item *items;
    size_t n;
    struct track *tracks;
    size_t n_tracks, cap_tracks;
    struct ev *evs;
    size_t n_evs, cap_evs;
    /* flows, in CSR form: out_ids[out_off[i] .. out_off[i+1]) start at item i, in_ids end there */
    size_t *out_off, *in_off;
    uint64_t *out_ids, *in_ids;
    uint32_t seq_id; /* the one sequence of the stitched packets, an id no packet of the trace uses */
    int seq_started;
    tc_packet_fn emit;
    void *arg;
    uint8_t *buf;
    size_t buf_cap;
    char *err;
    size_t errlen;
};

/* ---------------------------------------------------------------- hashing */

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

static uint64_t mix(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    x ^= x >> 31;
    return x ? x : 1;
}

static uint64_t hash_str(uint64_t h, const char *s) { return fnv(h, s, strlen(s) + 1); }

uint64_t tc_stitch_flow_id(const uint8_t trace_id[16], const uint8_t span_id[8])
{
    uint64_t h = hash_str(0xcbf29ce484222325ull, "onepath-flow");
    h = fnv(h, trace_id, 16);
    return mix(fnv(h, span_id, 8));
}

/* open addressing over item indices, keyed by (trace id, span id) */
struct index {
    size_t *slot; /* item + 1, 0 = empty */
    size_t mask;
};

static uint64_t span_key(const uint8_t *trace_id, const uint8_t *span_id)
{
    return mix(fnv(fnv(0xcbf29ce484222325ull, trace_id, 16), span_id, 8));
}

static int index_init(struct index *x, size_t n)
{
    size_t cap = 16;
    while (cap < 2 * n + 2)
        cap *= 2;
    x->slot = calloc(cap, sizeof *x->slot);
    x->mask = cap - 1;
    return x->slot ? 0 : -1;
}

static size_t index_find(const struct index *x, const struct item *items, const uint8_t *tid, const uint8_t *sid)
{
    for (size_t i = span_key(tid, sid) & x->mask;; i = (i + 1) & x->mask) {
        size_t v = x->slot[i];
        if (!v)
            return SIZE_MAX;
        const struct tc_span *s = items[v - 1].sp;
        if (!memcmp(s->trace_id, tid, 16) && !memcmp(s->span_id, sid, 8))
            return v - 1;
    }
}

/* 1 when inserted, 0 when the key was there already. */
static int index_add(struct index *x, const struct item *items, size_t it)
{
    const struct tc_span *s = items[it].sp;
    if (index_find(x, items, s->trace_id, s->span_id) != SIZE_MAX)
        return 0;
    size_t i = span_key(s->trace_id, s->span_id) & x->mask;
    while (x->slot[i])
        i = (i + 1) & x->mask;
    x->slot[i] = it + 1;
    return 1;
}

/* ---------------------------------------------------------------- helpers */

static int oom(struct ctx *c)
{
    snprintf(c->err, c->errlen, "out of memory");
    return -1;
}

__attribute__((format(printf, 2, 3))) static void warn(struct ctx *c, const char *fmt, ...)
{
    if (!c->o->warn)
        return;
    va_list ap;
    va_start(ap, fmt);
    fputs("tracectl: ", c->o->warn);
    vfprintf(c->o->warn, fmt, ap);
    fputc('\n', c->o->warn);
    va_end(ap);
}

/* ---------------------------------------------------------------- machines and clocks */

static uint32_t resolve_machine(const struct ctx *c, const struct tc_span *s)
{
    if (s->has_machine)
        return s->machine_id;
    for (size_t i = 0; i < c->o->n_map; i++)
        if (strcmp(c->o->map[i].host, s->host) == 0)
            return c->o->map[i].machine_id;
    return 0;
}

/* Every slice goes on the host's clock and sequences (machine 0): trace processor keeps a flow
 * tracker per machine, so a flow whose two ends are on two machines is never linked (Chromium's
 * build of it showed no arrow from a hub's CLIENT span to a node's SERVER span stamped with the
 * node's machine id). A remote machine's span is mapped onto that machine's BOOTTIME through its
 * clock data, then onto the host's BOOTTIME by the offset trace processor derives from the same
 * RemoteClockSync (clock_sync_est.h), so it lands where the machine's own packets land. */
static int place(struct ctx *c, struct item *it, uint32_t *warned, size_t *n_warned)
{
    const struct tc_span *s = it->sp;
    uint32_t id = resolve_machine(c, s);
    const struct tc_machine_clocks *host = tc_trace_clocks_machine(c->clocks, 0);
    const struct tc_machine_clocks *mc = id ? tc_trace_clocks_machine(c->clocks, id) : host;
    it->origin = id && mc ? id : 0;
    if (!mc || mc->n == 0) {
        int seen = 0;
        for (size_t i = 0; i < *n_warned; i++)
            seen |= warned[i] == id;
        if (!seen && *n_warned < 64) {
            warned[(*n_warned)++] = id;
            warn(c, "machine %" PRIu32 " (host %s) %s: its spans are placed with the host's clocks", id,
                 s->host[0] ? s->host : "?", mc ? "has no clock data in the trace" : "is not in the trace");
        }
        mc = host;
        c->st->on_host_clock++;
    } else if (id) {
        c->st->remote++;
    }
    it->clock_id = mc->clock_id;
    /* trace processor keeps timestamps as int64: a slice must begin and end within it (an
     * end_ns of 2^64-1 used to wrap and put the SLICE_END before the SLICE_BEGIN) */
    uint64_t dur = s->end_ns - s->start_ns;
    if (tc_clock_map(mc, s->start_ns, &it->b) != 0 || it->b > (uint64_t)INT64_MAX) {
        c->st->unplaceable++;
        it->skip = 1;
        return 0;
    }
    if (it->origin) {
        int64_t off = 0;
        tc_sync_ests_offset(&c->clocks->sync, it->origin, &off);
        int64_t hb = tc_host_time((int64_t)it->b, off);
        if (hb < 0) {
            c->st->unplaceable++;
            it->skip = 1;
            return 0;
        }
        it->b = (uint64_t)hb;
    }
    if (dur > (uint64_t)INT64_MAX - it->b) {
        c->st->unplaceable++;
        it->skip = 1;
        return 0;
    }
    it->e = it->b + dur;
    return 0;
}

/* ---------------------------------------------------------------- tracks and lanes */

static int cmp_str(const char *a, const char *b) { return strcmp(a, b); }

static const struct item *g_sort_items; /* qsort has no context argument */

static int cmp_proc(const struct item *a, const struct item *b)
{
    if (a->origin != b->origin)
        return a->origin < b->origin ? -1 : 1;
    int r = cmp_str(a->sp->service, b->sp->service);
    if (r)
        return r;
    if ((r = cmp_str(a->sp->host, b->sp->host)))
        return r;
    return a->sp->pid < b->sp->pid ? -1 : a->sp->pid > b->sp->pid;
}

static int cmp_group(const void *pa, const void *pb)
{
    size_t ia = *(const size_t *)pa, ib = *(const size_t *)pb;
    const struct item *a = &g_sort_items[ia], *b = &g_sort_items[ib];
    int r = cmp_proc(a, b);
    if (r)
        return r;
    if (a->sp->tid != b->sp->tid)
        return a->sp->tid < b->sp->tid ? -1 : 1;
    if (a->b != b->b)
        return a->b < b->b ? -1 : 1;
    if (a->e != b->e)
        return a->e > b->e ? -1 : 1; /* the longer (enclosing) span first */
    return ia < ib ? -1 : ia > ib;
}

static size_t add_track(struct ctx *c, const struct track *t)
{
    if (c->n_tracks == c->cap_tracks) {
        size_t cap = c->cap_tracks ? c->cap_tracks * 2 : 16;
        struct track *v = realloc(c->tracks, cap * sizeof *v);
        if (!v)
            return SIZE_MAX;
        c->tracks = v;
        c->cap_tracks = cap;
    }
    c->tracks[c->n_tracks] = *t;
    return c->n_tracks++;
}

static int add_ev(struct ctx *c, size_t item, int begin)
{
    if (c->n_evs == c->cap_evs) {
        size_t cap = c->cap_evs ? c->cap_evs * 2 : 256;
        struct ev *v = realloc(c->evs, cap * sizeof *v);
        if (!v)
            return -1;
        c->evs = v;
        c->cap_evs = cap;
    }
    const struct item *it = &c->items[item];
    c->evs[c->n_evs] = (struct ev){begin ? it->b : it->e, c->n_evs, item, begin};
    c->n_evs++;
    return 0;
}

static uint64_t proc_uuid(const struct item *it)
{
    uint64_t h = hash_str(0xcbf29ce484222325ull, "onepath-process");
    h = fnv(h, &it->origin, sizeof it->origin);
    h = hash_str(hash_str(h, it->sp->service), it->sp->host);
    return mix(fnv(h, &it->sp->pid, sizeof it->sp->pid));
}

static int new_proc_track(struct ctx *c, const struct item *it, size_t *out)
{
    struct track t;
    memset(&t, 0, sizeof t);
    t.uuid = proc_uuid(it);
    t.clock_id = it->clock_id;
    const char *svc = it->sp->service[0] ? it->sp->service : "onepath";
    if (it->sp->pid > 0 && !it->origin) {
        t.pid = it->sp->pid;
        t.pname = svc;
    } else {
        /* another machine's process: a named track, since a pid on the host's tracks would be
         * taken for the host's process of that pid */
        char where[96] = "", pid[32] = "";
        if (it->sp->pid > 0)
            snprintf(pid, sizeof pid, " %" PRId64, it->sp->pid);
        if (it->sp->node[0])
            snprintf(where, sizeof where, " (%.80s)", it->sp->node);
        else if (it->sp->host[0])
            snprintf(where, sizeof where, " (%.80s)", it->sp->host);
        if (it->origin)
            snprintf(where + strlen(where), sizeof where - strlen(where), " on machine %" PRIu32, it->origin);
        size_t n = strlen(svc) + strlen(pid) + strlen(where) + 1;
        if (!(t.name = malloc(n)))
            return -1;
        snprintf(t.name, n, "%s%s%s", svc, pid, where);
    }
    *out = add_track(c, &t);
    if (*out == SIZE_MAX) {
        free(t.name);
        return -1;
    }
    return 0;
}

static int new_lane_track(struct ctx *c, const struct item *it, size_t proc, size_t lane, size_t *out)
{
    struct track t;
    memset(&t, 0, sizeof t);
    uint64_t h = fnv(c->tracks[proc].uuid, &it->sp->tid, sizeof it->sp->tid);
    t.uuid = mix(fnv(hash_str(h, "onepath-thread"), &lane, sizeof lane));
    t.parent_uuid = c->tracks[proc].uuid;
    t.clock_id = it->clock_id;
    char base[160], lane_s[32] = "";
    if (it->sp->thread_name[0])
        snprintf(base, sizeof base, "%.120s %" PRId64, it->sp->thread_name, it->sp->tid);
    else if (it->sp->tid > 0)
        snprintf(base, sizeof base, "thread %" PRId64, it->sp->tid);
    else
        snprintf(base, sizeof base, "spans");
    if (lane)
        snprintf(lane_s, sizeof lane_s, " #%zu", lane + 1);
    size_t n = strlen(base) + strlen(lane_s) + 1;
    if (!(t.name = malloc(n)))
        return -1;
    snprintf(t.name, n, "%s%s", base, lane_s);
    *out = add_track(c, &t);
    if (*out == SIZE_MAX) {
        free(t.name);
        return -1;
    }
    return 0;
}

static int end_slice(void *arg, size_t item) { return add_ev(arg, item, 0); }

/* One (machine, service, host, pid, tid) group: items idx[0..n), sorted by begin, laid out on
 * lanes (span_lanes.h), one thread track per lane. */
static int layout_group(struct ctx *c, const size_t *idx, size_t n, size_t proc)
{
    struct tc_lanes lanes;
    memset(&lanes, 0, sizeof lanes);
    size_t *tracks = NULL, cap = 0;
    int rc = -1;
    for (size_t k = 0; k < n; k++) {
        struct item *it = &c->items[idx[k]];
        size_t L;
        int is_new;
        if (tc_lanes_place(&lanes, it->b, it->e, idx[k], end_slice, c, &L, &is_new))
            goto out;
        if (is_new) {
            if (L >= cap) {
                size_t nc = cap ? cap * 2 : 8;
                size_t *v = realloc(tracks, nc * sizeof *v);
                if (!v)
                    goto out;
                tracks = v;
                cap = nc;
            }
            if (new_lane_track(c, it, proc, L, &tracks[L]))
                goto out;
        }
        it->track = tracks[L];
        it->proc = proc;
        if (add_ev(c, idx[k], 1))
            goto out;
    }
    rc = tc_lanes_finish(&lanes, end_slice, c);
out:
    tc_lanes_free(&lanes);
    free(tracks);
    return rc;
}

static int layout(struct ctx *c)
{
    size_t *idx = malloc((c->n ? c->n : 1) * sizeof *idx);
    if (!idx)
        return oom(c);
    size_t m = 0;
    for (size_t i = 0; i < c->n; i++)
        if (!c->items[i].skip)
            idx[m++] = i;
    g_sort_items = c->items;
    qsort(idx, m, sizeof *idx, cmp_group);
    size_t proc = SIZE_MAX;
    for (size_t g = 0; g < m;) {
        const struct item *first = &c->items[idx[g]];
        if (g == 0 || cmp_proc(&c->items[idx[g - 1]], first) != 0)
            if (new_proc_track(c, first, &proc)) {
                free(idx);
                return oom(c);
            }
        size_t h = g + 1;
        while (h < m && cmp_proc(&c->items[idx[h]], first) == 0 && c->items[idx[h]].sp->tid == first->sp->tid)
            h++;
        if (layout_group(c, idx + g, h - g, proc)) {
            free(idx);
            return oom(c);
        }
        g = h;
    }
    free(idx);
    return 0;
}

/* ---------------------------------------------------------------- flows */

static int flows(struct ctx *c, const struct index *x)
{
    size_t n = c->n;
    c->out_off = calloc(n + 1, sizeof *c->out_off);
    c->in_off = calloc(n + 1, sizeof *c->in_off);
    size_t *src = malloc((n ? n : 1) * sizeof *src); /* per child: the slice that starts its flow */
    if (!c->out_off || !c->in_off || !src) {
        free(src);
        return oom(c);
    }
    size_t edges = 0;
    for (size_t i = 0; i < n; i++) {
        src[i] = SIZE_MAX;
        const struct item *it = &c->items[i];
        if (it->skip || !it->sp->has_parent)
            continue;
        size_t p = index_find(x, c->items, it->sp->trace_id, it->sp->parent_id);
        if (p == SIZE_MAX) {
            c->st->orphans++;
            continue;
        }
        if (c->items[p].skip || c->items[p].track == it->track)
            continue;
        src[i] = p;
        edges++;
    }
    c->out_ids = malloc((edges ? 2 * edges : 1) * sizeof *c->out_ids);
    c->in_ids = malloc((edges ? edges : 1) * sizeof *c->in_ids);
    if (!c->out_ids || !c->in_ids) {
        free(src);
        return oom(c);
    }
    /* the flow starts at whichever of the two slices begins first on the host clock, where place()
     * put them (each machine moved by the offset trace processor derives from the trace's clock
     * sync: it links a flow's events in that order and drops an end that comes before its start),
     * so a child that a clock offset puts before its parent still gets its arrow, pointing the
     * other way */
    for (size_t pass = 0; pass < 2; pass++) {
        for (size_t i = 0; i < n; i++) {
            if (src[i] == SIZE_MAX)
                continue;
            size_t p = src[i];
            uint64_t bi = c->items[i].b, bp = c->items[p].b;
            int child_first = bi < bp;
            /* both begin at the same time: the order of the two packets is not known, so neither
             * end terminates the flow (trace processor links the second to the first) */
            int tie = bi == bp;
            size_t from = child_first ? i : p, to = child_first ? p : i;
            uint64_t id = tc_stitch_flow_id(c->items[i].sp->trace_id, c->items[i].sp->span_id);
            if (pass == 0) {
                c->out_off[from + 1]++;
                if (tie)
                    c->out_off[to + 1]++;
                else
                    c->in_off[to + 1]++;
            } else {
                c->out_ids[c->out_off[from]++] = id;
                if (tie)
                    c->out_ids[c->out_off[to]++] = id;
                else
                    c->in_ids[c->in_off[to]++] = id;
            }
        }
        if (pass == 0) {
            for (size_t i = 0; i < n; i++) {
                c->out_off[i + 1] += c->out_off[i];
                c->in_off[i + 1] += c->in_off[i];
            }
        } else {
            /* the second pass advanced every start offset to the next item's: shift back */
            for (size_t i = n; i > 0; i--) {
                c->out_off[i] = c->out_off[i - 1];
                c->in_off[i] = c->in_off[i - 1];
            }
            c->out_off[0] = c->in_off[0] = 0;
        }
    }
    c->st->flows = edges;
    free(src);
    return 0;
}

/* ---------------------------------------------------------------- packets */

static int put_packet(struct ctx *c, Perfetto__Protos__TracePacket *pkt)
{
    pkt->optional_trusted_packet_sequence_id_case =
        PERFETTO__PROTOS__TRACE_PACKET__OPTIONAL_TRUSTED_PACKET_SEQUENCE_ID_TRUSTED_PACKET_SEQUENCE_ID;
    pkt->trusted_packet_sequence_id = c->seq_id;
    if (!c->seq_started) {
        c->seq_started = 1;
        pkt->has_sequence_flags = 1;
        pkt->sequence_flags = SEQ_INCREMENTAL_STATE_CLEARED;
        pkt->has_first_packet_on_sequence = 1;
        pkt->first_packet_on_sequence = 1;
    }
    size_t len = perfetto__protos__trace_packet__get_packed_size(pkt);
    if (len > c->buf_cap) {
        uint8_t *b = realloc(c->buf, len);
        if (!b)
            return oom(c);
        c->buf = b;
        c->buf_cap = len;
    }
    perfetto__protos__trace_packet__pack(pkt, c->buf);
    c->st->packets++;
    if (c->emit(c->arg, c->buf, len) != 0) {
        snprintf(c->err, c->errlen, "writing the stitched packets failed");
        return -1;
    }
    return 0;
}

static int emit_track(struct ctx *c, const struct track *t, uint64_t ts)
{
    Perfetto__Protos__TracePacket pkt = PERFETTO__PROTOS__TRACE_PACKET__INIT;
    Perfetto__Protos__TrackDescriptor td = PERFETTO__PROTOS__TRACK_DESCRIPTOR__INIT;
    Perfetto__Protos__ProcessDescriptor pd = PERFETTO__PROTOS__PROCESS_DESCRIPTOR__INIT;
    td.has_uuid = 1;
    td.uuid = t->uuid;
    if (t->parent_uuid) {
        td.has_parent_uuid = 1;
        td.parent_uuid = t->parent_uuid;
    }
    if (t->name) {
        td.static_or_dynamic_name_case = PERFETTO__PROTOS__TRACK_DESCRIPTOR__STATIC_OR_DYNAMIC_NAME_NAME;
        td.name = t->name;
    } else {
        pd.has_pid = 1;
        pd.pid = (int32_t)t->pid;
        pd.process_name = (char *)t->pname;
        td.process = &pd;
    }
    pkt.has_timestamp = 1;
    pkt.timestamp = ts;
    pkt.has_timestamp_clock_id = 1;
    pkt.timestamp_clock_id = t->clock_id;
    pkt.data_case = PERFETTO__PROTOS__TRACE_PACKET__DATA_TRACK_DESCRIPTOR;
    pkt.track_descriptor = &td;
    c->st->tracks++;
    return put_packet(c, &pkt);
}

/* Debug annotations of a span's begin: its ids, kind, status, service and host, attributes and
 * events. All point into the span or into the annotation scratch held by the caller. */
struct annots {
    Perfetto__Protos__DebugAnnotation *v;
    Perfetto__Protos__DebugAnnotation **p;
    size_t n;
    Perfetto__Protos__DebugAnnotation *ev, *ev_fields, **ev_p, **ev_field_p;
    char trace_hex[33], span_hex[17], parent_hex[17];
};

static Perfetto__Protos__DebugAnnotation *annot(struct annots *a, const char *name)
{
    Perfetto__Protos__DebugAnnotation *d = &a->v[a->n];
    perfetto__protos__debug_annotation__init(d);
    d->name_field_case = PERFETTO__PROTOS__DEBUG_ANNOTATION__NAME_FIELD_NAME;
    d->name = (char *)name;
    a->p[a->n] = d;
    a->n++;
    return d;
}

static void annot_str(struct annots *a, const char *name, const char *v)
{
    Perfetto__Protos__DebugAnnotation *d = annot(a, name);
    d->value_case = PERFETTO__PROTOS__DEBUG_ANNOTATION__VALUE_STRING_VALUE;
    d->string_value = (char *)v;
}

static const char *kind_name(int k)
{
    static const char *const names[] = {"INTERNAL", "PRODUCER", "CONSUMER", "CLIENT", "SERVER"};
    return k >= 0 && k <= 4 ? names[k] : "INTERNAL";
}

static int build_annots(struct annots *a, const struct tc_span *s)
{
    size_t max = 9 + s->n_attrs;
    memset(a, 0, sizeof *a);
    a->v = calloc(max, sizeof *a->v);
    a->p = calloc(max, sizeof *a->p);
    if (s->n_events) {
        a->ev = calloc(s->n_events, sizeof *a->ev);
        a->ev_p = calloc(s->n_events, sizeof *a->ev_p);
        a->ev_fields = calloc(2 * s->n_events, sizeof *a->ev_fields);
        a->ev_field_p = calloc(2 * s->n_events, sizeof *a->ev_field_p);
    }
    if (!a->v || !a->p || (s->n_events && (!a->ev || !a->ev_p || !a->ev_fields || !a->ev_field_p)))
        return -1;
    tg_hex_encode(a->trace_hex, s->trace_id, 16);
    tg_hex_encode(a->span_hex, s->span_id, 8);
    annot_str(a, "onepath.trace_id", a->trace_hex);
    annot_str(a, "onepath.span_id", a->span_hex);
    if (s->has_parent) {
        tg_hex_encode(a->parent_hex, s->parent_id, 8);
        annot_str(a, "onepath.parent_span_id", a->parent_hex);
    }
    annot_str(a, "onepath.kind", kind_name(s->kind));
    if (s->status != ONEPATH_SPAN_STATUS_UNSET)
        annot_str(a, "onepath.status", s->status == ONEPATH_SPAN_STATUS_OK ? "OK" : "ERROR");
    if (s->status_msg[0])
        annot_str(a, "onepath.status_message", s->status_msg);
    if (s->service[0])
        annot_str(a, "onepath.service", s->service);
    if (s->host[0])
        annot_str(a, "onepath.host", s->host);
    for (size_t i = 0; i < s->n_attrs; i++) {
        const struct tc_span_attr *x = &s->attrs[i];
        Perfetto__Protos__DebugAnnotation *d = annot(a, x->key);
        switch (x->type) {
        case TC_ATTR_STR: d->value_case = PERFETTO__PROTOS__DEBUG_ANNOTATION__VALUE_STRING_VALUE; d->string_value = x->s; break;
        case TC_ATTR_INT: d->value_case = PERFETTO__PROTOS__DEBUG_ANNOTATION__VALUE_INT_VALUE; d->int_value = x->i; break;
        case TC_ATTR_DOUBLE: d->value_case = PERFETTO__PROTOS__DEBUG_ANNOTATION__VALUE_DOUBLE_VALUE; d->double_value = x->d; break;
        case TC_ATTR_BOOL: d->value_case = PERFETTO__PROTOS__DEBUG_ANNOTATION__VALUE_BOOL_VALUE; d->bool_value = x->i != 0; break;
        }
    }
    if (s->n_events) {
        Perfetto__Protos__DebugAnnotation *d = annot(a, "onepath.events");
        for (size_t i = 0; i < s->n_events; i++) {
            Perfetto__Protos__DebugAnnotation *e = &a->ev[i], *f = &a->ev_fields[2 * i];
            perfetto__protos__debug_annotation__init(e);
            perfetto__protos__debug_annotation__init(&f[0]);
            perfetto__protos__debug_annotation__init(&f[1]);
            f[0].name_field_case = f[1].name_field_case = PERFETTO__PROTOS__DEBUG_ANNOTATION__NAME_FIELD_NAME;
            f[0].name = "name";
            f[0].value_case = PERFETTO__PROTOS__DEBUG_ANNOTATION__VALUE_STRING_VALUE;
            f[0].string_value = s->events[i].name;
            f[1].name = "offset_ns";
            f[1].value_case = PERFETTO__PROTOS__DEBUG_ANNOTATION__VALUE_INT_VALUE;
            f[1].int_value = (int64_t)(s->events[i].ts_ns - s->start_ns);
            a->ev_field_p[2 * i] = &f[0];
            a->ev_field_p[2 * i + 1] = &f[1];
            e->n_dict_entries = 2;
            e->dict_entries = &a->ev_field_p[2 * i];
            a->ev_p[i] = e;
        }
        d->n_array_values = s->n_events;
        d->array_values = a->ev_p;
    }
    return 0;
}

static void free_annots(struct annots *a)
{
    free(a->v);
    free(a->p);
    free(a->ev);
    free(a->ev_p);
    free(a->ev_fields);
    free(a->ev_field_p);
}

static int emit_event(struct ctx *c, const struct ev *e)
{
    const struct item *it = &c->items[e->item];
    Perfetto__Protos__TracePacket pkt = PERFETTO__PROTOS__TRACE_PACKET__INIT;
    Perfetto__Protos__TrackEvent te = PERFETTO__PROTOS__TRACK_EVENT__INIT;
    static char *const cats[] = {"onepath"};
    struct annots a;
    memset(&a, 0, sizeof a);
    te.has_type = 1;
    te.has_track_uuid = 1;
    te.track_uuid = c->tracks[it->track].uuid;
    if (e->begin) {
        te.type = PERFETTO__PROTOS__TRACK_EVENT__TYPE__TYPE_SLICE_BEGIN;
        te.name_field_case = PERFETTO__PROTOS__TRACK_EVENT__NAME_FIELD_NAME;
        te.name = it->sp->name;
        te.n_categories = 1;
        te.categories = (char **)cats;
        if (build_annots(&a, it->sp)) {
            free_annots(&a);
            return oom(c);
        }
        te.n_debug_annotations = a.n;
        te.debug_annotations = a.p;
        te.n_flow_ids = c->out_off[e->item + 1] - c->out_off[e->item];
        te.flow_ids = c->out_ids + c->out_off[e->item];
        te.n_terminating_flow_ids = c->in_off[e->item + 1] - c->in_off[e->item];
        te.terminating_flow_ids = c->in_ids + c->in_off[e->item];
        c->st->placed++;
    } else {
        te.type = PERFETTO__PROTOS__TRACK_EVENT__TYPE__TYPE_SLICE_END;
    }
    pkt.has_timestamp = 1;
    pkt.timestamp = e->ts;
    pkt.has_timestamp_clock_id = 1;
    pkt.timestamp_clock_id = it->clock_id;
    pkt.data_case = PERFETTO__PROTOS__TRACE_PACKET__DATA_TRACK_EVENT;
    pkt.track_event = &te;
    int rc = put_packet(c, &pkt);
    free_annots(&a);
    return rc;
}

static int cmp_ev(const void *pa, const void *pb)
{
    const struct ev *a = pa, *b = pb;
    if (a->ts != b->ts)
        return a->ts < b->ts ? -1 : 1;
    return a->order < b->order ? -1 : a->order > b->order;
}

static int write_all(struct ctx *c)
{
    int fr = tc_trace_clocks_fresh_seq_ids(c->clocks, 1, &c->seq_id);
    if (fr == -2)
        return oom(c);
    if (fr != 0) {
        snprintf(c->err, c->errlen, "the trace uses nearly every packet sequence id: none free for the spans");
        return -1;
    }
    if (c->n_evs) /* (every span unplaceable: qsort must not get NULL) */
        qsort(c->evs, c->n_evs, sizeof *c->evs, cmp_ev);
    /* descriptors carry the time of the first event, so they sort before the slices */
    uint64_t first = c->n_evs ? c->evs[0].ts : 0;
    for (size_t i = 0; i < c->n_tracks; i++)
        if (emit_track(c, &c->tracks[i], first))
            return -1;
    for (size_t k = 0; k < c->n_evs; k++)
        if (emit_event(c, &c->evs[k]))
            return -1;
    return 0;
}

int tc_stitch(const struct tc_span_set *set, const struct tc_trace_clocks *clocks, const struct tc_stitch_opts *o,
              tc_packet_fn emit, void *arg, struct tc_stitch_stats *st, char *err, size_t errlen)
{
    static const struct tc_stitch_opts no_opts = {NULL, 0, NULL, NULL};
    struct ctx c;
    memset(&c, 0, sizeof c);
    memset(st, 0, sizeof *st);
    c.set = set;
    c.clocks = clocks;
    c.o = o ? o : &no_opts;
    c.st = st;
    c.emit = emit;
    c.arg = arg;
    c.err = err;
    c.errlen = errlen;
    st->spans = set->n;
    int rc = -1;
    struct index x = {NULL, 0};
    const struct tc_machine_clocks *host = tc_trace_clocks_machine(clocks, 0);
    if (!host || host->n == 0) {
        snprintf(err, errlen, "the trace has no ClockSnapshot with both REALTIME and its trace clock: spans cannot "
                              "be placed on its timeline");
        return -1;
    }
    c.items = calloc(set->n ? set->n : 1, sizeof *c.items);
    if (!c.items || index_init(&x, set->n)) {
        oom(&c);
        goto out;
    }
    uint32_t warned[64];
    size_t n_warned = 0;
    for (size_t i = 0; i < set->n; i++) {
        struct item *it = &c.items[c.n];
        it->sp = &set->v[i];
        if (!index_add(&x, c.items, c.n)) {
            st->duplicates++;
            continue;
        }
        c.n++;
        place(&c, it, warned, &n_warned);
    }
    if (st->duplicates)
        warn(&c, "%zu span record(s) repeated a trace and span id already seen: skipped", st->duplicates);
    if (st->unplaceable)
        warn(&c, "%zu span(s) lie before the start of the trace clock or beyond its range: skipped",
             st->unplaceable);
    if (layout(&c) || flows(&c, &x) || write_all(&c))
        goto out;
    rc = 0;
out:
    free(x.slot);
    for (size_t i = 0; i < c.n_tracks; i++)
        free(c.tracks[i].name);
    free(c.tracks);
    free(c.evs);
    free(c.items);
    free(c.out_off);
    free(c.in_off);
    free(c.out_ids);
    free(c.in_ids);
    free(c.buf);
    return rc;
}
