/* trace_ts.c: packet timestamps placed on the host's BOOTTIME (see trace_ts.h). */
#include "trace_ts.h"

#include <stdlib.h>
#include <string.h>

#define CLOCK_BOOTTIME 6
#define SCOPED_FIRST 64
#define SCOPED_LAST 127

static int is_scoped(uint32_t id) { return id >= SCOPED_FIRST && id <= SCOPED_LAST; }

static struct tc_ts_clock *snap_find(struct tc_ts_snapshot *s, uint32_t id)
{
    for (size_t i = 0; i < s->n; i++)
        if (s->c[i].id == id)
            return &s->c[i];
    return NULL;
}

static struct tc_ts_seq *seq_get(struct tc_trace_ts *t, uint32_t seq)
{
    size_t at;
    if (tc_u32_index_get(&t->ix, seq, &at))
        return &t->seqs[at];
    if (t->n_seqs == t->cap_seqs) {
        size_t cap = t->cap_seqs ? t->cap_seqs * 2 : 16;
        struct tc_ts_seq *ns = realloc(t->seqs, cap * sizeof *ns);
        if (!ns)
            return NULL;
        t->seqs = ns;
        t->cap_seqs = cap;
    }
    if (tc_u32_index_put(&t->ix, seq, t->n_seqs) != 0)
        return NULL;
    struct tc_ts_seq *s = &t->seqs[t->n_seqs++];
    memset(s, 0, sizeof *s);
    s->seq = seq;
    return s;
}

/* A ClockSnapshot: one with sequence-scoped clocks belongs to its sequence (and keeps its global
 * readings as the reference); one with only global clocks, from the host, is the host's.
 * -1 when out of memory. */
static int take_snapshot(struct tc_trace_ts *t, struct tc_ts_seq *ss, int remote,
                         const Perfetto__Protos__ClockSnapshot *cs)
{
    size_t n = 0;
    for (size_t i = 0; i < cs->n_clocks; i++)
        n += cs->clocks[i]->has_clock_id && cs->clocks[i]->has_timestamp;
    if (n > TC_TS_MAX_CLOCKS)
        n = TC_TS_MAX_CLOCKS;
    struct tc_ts_snapshot *s = calloc(1, sizeof *s + n * sizeof s->c[0]);
    if (!s)
        return -1;
    int scoped = 0;
    for (size_t i = 0; i < cs->n_clocks && s->n < n; i++) {
        const Perfetto__Protos__ClockSnapshot__Clock *c = cs->clocks[i];
        if (!c->has_clock_id || !c->has_timestamp)
            continue;
        struct tc_ts_clock *k = &s->c[s->n++];
        k->id = c->clock_id;
        k->value = k->last = c->timestamp;
        k->incremental = c->has_is_incremental && c->is_incremental;
        k->mult = c->has_unit_multiplier_ns && c->unit_multiplier_ns ? c->unit_multiplier_ns : 1;
        scoped |= is_scoped(k->id);
        if (k->id == CLOCK_BOOTTIME) {
            s->has_boot = 1;
            s->boot = k->value;
        }
    }
    struct tc_ts_snapshot **slot = NULL;
    if (scoped) {
        if (ss)
            slot = &ss->scoped;
    } else if (!remote) {
        slot = &t->host;
        if (cs->has_primary_trace_clock && cs->primary_trace_clock)
            t->primary = (uint32_t)cs->primary_trace_clock;
    }
    if (slot) {
        free(*slot);
        *slot = s;
    } else {
        free(s);
    }
    return 0;
}

/* A global clock's reading on the host's BOOTTIME through the latest host snapshot. */
static int global_to_boot(const struct tc_trace_ts *t, uint32_t id, uint64_t v, uint64_t *out)
{
    if (id == CLOCK_BOOTTIME) {
        *out = v;
        return 1;
    }
    if (!t->host || !t->host->has_boot)
        return 0;
    for (size_t i = 0; i < t->host->n; i++)
        if (t->host->c[i].id == id) {
            *out = t->host->boot + (v - t->host->c[i].value); /* modular: the sign comes out right */
            return 1;
        }
    return 0;
}

static int scoped_to_boot(const struct tc_trace_ts *t, struct tc_ts_seq *ss, uint32_t id, uint64_t ts, uint64_t *out)
{
    if (!ss || !ss->scoped)
        return 0;
    struct tc_ts_snapshot *sc = ss->scoped;
    struct tc_ts_clock *k = snap_find(sc, id);
    if (!k)
        return 0;
    uint64_t abs = ts;
    if (k->incremental) {
        k->last += ts;
        abs = k->last;
    }
    uint64_t delta = (abs - k->value) * k->mult; /* modular */
    if (sc->has_boot) {
        *out = sc->boot + delta;
        return 1;
    }
    for (size_t i = 0; i < sc->n; i++) /* another global clock of the same snapshot */
        if (!is_scoped(sc->c[i].id))
            return global_to_boot(t, sc->c[i].id, sc->c[i].value + delta, out);
    return 0;
}

int tc_trace_ts_packet(struct tc_trace_ts *t, uint32_t seq, uint32_t default_clock,
                       const Perfetto__Protos__TracePacket *p, int64_t *ts)
{
    struct tc_ts_seq *ss = seq_get(t, seq);
    if (!ss)
        return -1;
    int remote = p->has_machine_id && p->machine_id;
    if (p->data_case == PERFETTO__PROTOS__TRACE_PACKET__DATA_CLOCK_SNAPSHOT && p->clock_snapshot &&
        take_snapshot(t, ss, remote, p->clock_snapshot) != 0)
        return -1;
    if (!p->has_timestamp)
        return 0;
    uint32_t clock = p->has_timestamp_clock_id ? p->timestamp_clock_id : default_clock;
    if (clock == 0) /* the trace's clock: BOOTTIME unless a host snapshot named another */
        clock = t->primary ? t->primary : CLOCK_BOOTTIME;
    uint64_t v;
    int ok = is_scoped(clock) ? scoped_to_boot(t, ss, clock, p->timestamp, &v)
                              : global_to_boot(t, clock, p->timestamp, &v);
    if (!ok || v > (uint64_t)INT64_MAX)
        return 0;
    *ts = (int64_t)v;
    return 1;
}

void tc_trace_ts_free(struct tc_trace_ts *t)
{
    for (size_t i = 0; i < t->n_seqs; i++)
        free(t->seqs[i].scoped);
    free(t->seqs);
    free(t->host);
    tc_u32_index_free(&t->ix);
    memset(t, 0, sizeof *t);
}
