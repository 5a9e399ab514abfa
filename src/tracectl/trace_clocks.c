/* trace_clocks.c: collecting clock pairs, machine ids and sequence ids from a trace (see
 * trace_clocks.h), with the allocation-free protobuf wire reader. */
#include "trace_clocks.h"

#include <stdlib.h>
#include <string.h>

#include "trace_file.h"
#include "tracegate/pbwire.h"

/* TracePacket fields (Perfetto wire facts §4.7) */
#define PKT_CLOCK_SNAPSHOT 6
#define PKT_SEQ_ID 10
#define PKT_COMPRESSED 50
#define PKT_MACHINE_ID 98
#define PKT_REMOTE_CLOCK_SYNC 107
/* ClockSnapshot / ClockSnapshot.Clock (§4.8) */
#define CS_CLOCKS 1
#define CS_PRIMARY 2
#define CLK_ID 1
#define CLK_TS 2
#define CLK_INCREMENTAL 3
#define CLK_MULTIPLIER 4
/* RemoteClockSync / SyncedClocks (§6.1) */
#define RCS_SYNCED 1
#define SYNCED_CLIENT 2
#define SYNCED_HOST 3

static struct tc_machine_clocks *machine(struct tc_trace_clocks *c, uint32_t id)
{
    size_t at;
    if (tc_u32_index_get(&c->ix, id, &at))
        return &c->m[at];
    if (c->n == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 4;
        struct tc_machine_clocks *m = realloc(c->m, cap * sizeof *m);
        if (!m)
            return NULL;
        c->m = m;
        c->cap = cap;
    }
    if (tc_u32_index_put(&c->ix, id, c->n) != 0)
        return NULL;
    struct tc_machine_clocks *m = &c->m[c->n++];
    memset(m, 0, sizeof *m);
    m->machine_id = id;
    m->clock_id = TC_CLOCK_BOOTTIME;
    return m;
}

static int add_pair(struct tc_machine_clocks *m, uint64_t real, uint64_t target)
{
    if (m->n == m->cap) {
        size_t cap = m->cap ? m->cap * 2 : 8;
        struct tc_clock_pair *p = realloc(m->pairs, cap * sizeof *p);
        if (!p)
            return -1;
        m->pairs = p;
        m->cap = cap;
    }
    if (m->n && real < m->pairs[m->n - 1].real)
        m->unsorted = 1;
    m->pairs[m->n] = (struct tc_clock_pair){.real = real, .target = target, .order = m->n};
    m->n++;
    return 0;
}

static int cmp_u32(const void *pa, const void *pb)
{
    uint32_t a = *(const uint32_t *)pa, b = *(const uint32_t *)pb;
    return a < b ? -1 : a > b;
}

/* Sorts ids[0..n-1] and drops repeats; returns how many are left. */
static size_t sort_unique(uint32_t *ids, size_t n)
{
    if (n < 2)
        return n;
    qsort(ids, n, sizeof *ids, cmp_u32);
    size_t k = 1;
    for (size_t i = 1; i < n; i++)
        if (ids[i] != ids[k - 1])
            ids[k++] = ids[i];
    return k;
}

/* Notes a sequence id in use. Consecutive packets mostly share one, and the list is compacted
 * before it grows, so it holds at most about twice the number of distinct ids. */
static int add_seq_id(struct tc_trace_clocks *c, uint32_t id)
{
    if (id > c->max_seq_id)
        c->max_seq_id = id;
    if (c->n_seq_ids && c->seq_ids[c->n_seq_ids - 1] == id)
        return 0;
    if (c->n_seq_ids == c->cap_seq_ids) {
        c->n_seq_ids = sort_unique(c->seq_ids, c->n_seq_ids);
        if (c->n_seq_ids * 2 >= c->cap_seq_ids) {
            size_t cap = c->cap_seq_ids ? c->cap_seq_ids * 2 : 16;
            uint32_t *v = realloc(c->seq_ids, cap * sizeof *v);
            if (!v)
                return -1;
            c->seq_ids = v;
            c->cap_seq_ids = cap;
        }
    }
    c->seq_ids[c->n_seq_ids++] = id;
    return 0;
}

int tc_trace_clocks_fresh_seq_ids(const struct tc_trace_clocks *c, size_t n, uint32_t *out)
{
    size_t got = 0;
    /* above the highest id in use: the usual case, ids that read as "added after" */
    for (uint64_t id = (uint64_t)c->max_seq_id + 1; got < n && id <= UINT32_MAX; id++)
        out[got++] = (uint32_t)id;
    if (got == n)
        return 0;
    /* then the gaps from 1 up, walking a sorted copy of the ids in use */
    uint32_t *used = malloc((c->n_seq_ids ? c->n_seq_ids : 1) * sizeof *used);
    if (!used)
        return -2;
    if (c->n_seq_ids)
        memcpy(used, c->seq_ids, c->n_seq_ids * sizeof *used);
    size_t n_used = sort_unique(used, c->n_seq_ids), k = 0;
    for (uint64_t id = 1; got < n && id <= c->max_seq_id; id++) {
        while (k < n_used && used[k] < id)
            k++;
        if (k < n_used && used[k] == id) {
            /* skip the whole run of ids in use */
            while (k + 1 < n_used && used[k + 1] == used[k] + 1)
                k++;
            id = used[k];
            continue;
        }
        out[got++] = (uint32_t)id;
    }
    free(used);
    return got == n ? 0 : -1;
}

/* Reads clock `id` from a ClockSnapshot, skipping incremental or scaled readings (absolute ns
 * only); *primary = its primary_trace_clock (0 if absent). 1 when found. */
static int snapshot_clock(const uint8_t *p, size_t len, uint64_t id, uint64_t *v, uint32_t *primary)
{
    struct tg_pb_reader r;
    struct tg_pb_field f;
    int found = 0;
    *primary = 0;
    tg_pb_reader_init(&r, p, len);
    while (tg_pb_next(&r, &f) == 1) {
        if (f.number == CS_PRIMARY && f.wire == TG_PB_VARINT) {
            *primary = (uint32_t)f.value;
            continue;
        }
        if (f.number != CS_CLOCKS || f.wire != TG_PB_LEN)
            continue;
        struct tg_pb_reader cr;
        struct tg_pb_field cf;
        uint64_t cid = 0, ts = 0;
        int has_ts = 0, odd = 0;
        tg_pb_reader_init(&cr, f.data, f.len);
        while (tg_pb_next(&cr, &cf) == 1) {
            if (cf.number == CLK_ID && cf.wire == TG_PB_VARINT)
                cid = cf.value;
            else if (cf.number == CLK_TS && cf.wire == TG_PB_VARINT) {
                ts = cf.value;
                has_ts = 1;
            } else if ((cf.number == CLK_INCREMENTAL && cf.value) || (cf.number == CLK_MULTIPLIER && cf.value != 1))
                odd = 1;
        }
        if (has_ts && !odd && cid == id) {
            *v = ts;
            found = 1;
        }
    }
    return found;
}

/* Reads REALTIME and clock `want` from a ClockSnapshot (see snapshot_clock). 1 when both were
 * found. */
static int snapshot_pair(const uint8_t *p, size_t len, uint32_t want, uint64_t *real, uint64_t *target,
                         uint32_t *primary)
{
    return snapshot_clock(p, len, TC_CLOCK_REALTIME, real, primary) &&
           snapshot_clock(p, len, want, target, primary);
}

static int snapshot_boottime(const uint8_t *p, size_t len, uint64_t *v)
{
    uint32_t primary;
    return snapshot_clock(p, len, TC_CLOCK_BOOTTIME, v, &primary);
}

/* A remote machine's RemoteClockSync: each entry's client side is a (REALTIME, BOOTTIME) pair of
 * that machine; the client and host BOOTTIME readings feed trace processor's offset estimate. */
static int add_sync(struct tc_trace_clocks *c, struct tc_machine_clocks *m, uint32_t mid, const uint8_t *sync,
                    size_t sync_len)
{
    struct tg_pb_reader sr;
    struct tg_pb_field sf;
    struct tc_sync_reading *rd = NULL;
    size_t n = 0, cap = 0;
    int rc = -1;
    tg_pb_reader_init(&sr, sync, sync_len);
    while (tg_pb_next(&sr, &sf) == 1) {
        if (sf.number != RCS_SYNCED || sf.wire != TG_PB_LEN)
            continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 8;
            struct tc_sync_reading *nr = realloc(rd, cap * sizeof *nr);
            if (!nr)
                goto out;
            rd = nr;
        }
        struct tc_sync_reading *x = &rd[n++];
        memset(x, 0, sizeof *x);
        int has_client = 0, has_host = 0;
        struct tg_pb_reader pr;
        struct tg_pb_field pf;
        tg_pb_reader_init(&pr, sf.data, sf.len);
        while (tg_pb_next(&pr, &pf) == 1) {
            if (pf.wire != TG_PB_LEN)
                continue;
            uint64_t real, target;
            uint32_t primary;
            if (pf.number == SYNCED_CLIENT) {
                if (snapshot_pair(pf.data, pf.len, TC_CLOCK_BOOTTIME, &real, &target, &primary) &&
                    add_pair(m, real, target))
                    goto out;
                has_client = snapshot_boottime(pf.data, pf.len, &x->client);
            } else if (pf.number == SYNCED_HOST) {
                has_host = snapshot_boottime(pf.data, pf.len, &x->host);
            }
        }
        x->ok = has_client && has_host;
    }
    rc = tc_sync_ests_add(&c->sync, mid, rd, n);
out:
    free(rd);
    return rc;
}

int tc_trace_clocks_add_packet(struct tc_trace_clocks *c, const uint8_t *pkt, size_t len)
{
    struct tg_pb_reader r;
    struct tg_pb_field f;
    const uint8_t *snap = NULL, *sync = NULL;
    size_t snap_len = 0, sync_len = 0;
    uint32_t mid = 0;
    if (c->n == 0 && !machine(c, 0))
        return -1;
    c->packets++;
    tg_pb_reader_init(&r, pkt, len);
    while (tg_pb_next(&r, &f) == 1) {
        if (f.number == PKT_CLOCK_SNAPSHOT && f.wire == TG_PB_LEN) {
            snap = f.data;
            snap_len = f.len;
        } else if (f.number == PKT_REMOTE_CLOCK_SYNC && f.wire == TG_PB_LEN) {
            sync = f.data;
            sync_len = f.len;
        } else if (f.number == PKT_MACHINE_ID && f.wire == TG_PB_VARINT) {
            mid = (uint32_t)f.value;
        } else if (f.number == PKT_SEQ_ID && f.wire != TG_PB_LEN) {
            /* read as Perfetto does: a varint, fixed32 or fixed64, its low 32 bits */
            if (add_seq_id(c, (uint32_t)f.value))
                return -1;
        } else if (f.number == PKT_COMPRESSED) {
            c->compressed++;
        }
    }
    struct tc_machine_clocks *m = machine(c, mid);
    if (!m)
        return -1;
    uint64_t real, target;
    uint32_t primary;
    if (snap) {
        int ok = snapshot_pair(snap, snap_len, m->clock_id, &real, &target, &primary);
        /* the host's trace clock is the primary clock its (first) snapshot names */
        if (mid == 0 && primary && primary != m->clock_id && m->n == 0) {
            m->clock_id = primary;
            ok = snapshot_pair(snap, snap_len, m->clock_id, &real, &target, &primary);
        }
        if (ok && add_pair(m, real, target))
            return -1;
    }
    if (sync && mid != 0 && add_sync(c, m, mid, sync, sync_len) != 0)
        return -1;
    return 0;
}

int tc_trace_clocks_scan(const uint8_t *data, size_t len, struct tc_trace_clocks *c, char *err, size_t errlen)
{
    memset(c, 0, sizeof *c);
    struct tc_trace_reader rd;
    tc_trace_reader_init(&rd, data, len);
    const uint8_t *p;
    size_t pl, off;
    int rc;
    if (!machine(c, 0))
        goto oom;
    while ((rc = tc_trace_reader_next(&rd, &p, &pl, &off, err, errlen)) == 1)
        if (tc_trace_clocks_add_packet(c, p, pl) != 0)
            goto oom;
    if (rc < 0) {
        tc_trace_clocks_free(c);
        return -1;
    }
    tc_trace_clocks_sort(c);
    return 0;
oom:
    snprintf(err, errlen, "out of memory");
    tc_trace_clocks_free(c);
    return -1;
}

const struct tc_machine_clocks *tc_trace_clocks_machine(const struct tc_trace_clocks *c, uint32_t id)
{
    size_t at;
    return tc_u32_index_get(&c->ix, id, &at) ? &c->m[at] : NULL;
}

static int by_real_then_order(const void *pa, const void *pb)
{
    const struct tc_clock_pair *a = pa, *b = pb;
    if (a->real != b->real)
        return a->real < b->real ? -1 : 1;
    return a->order < b->order ? -1 : a->order > b->order;
}

void tc_trace_clocks_sort(struct tc_trace_clocks *c)
{
    for (size_t i = 0; i < c->n; i++)
        if (c->m[i].unsorted) {
            qsort(c->m[i].pairs, c->m[i].n, sizeof *c->m[i].pairs, by_real_then_order);
            c->m[i].unsorted = 0;
        }
}

/* the first of the sorted pairs whose REALTIME is above x (after: 1) or not below it (0) */
static size_t bisect(const struct tc_machine_clocks *mc, uint64_t x, int after)
{
    size_t lo = 0, hi = mc->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (after ? mc->pairs[mid].real <= x : mc->pairs[mid].real < x)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static uint64_t dist(uint64_t a, uint64_t b) { return a > b ? a - b : b - a; }

/* the nearest pair: the first of the equally near ones in trace order */
static const struct tc_clock_pair *nearest(const struct tc_machine_clocks *mc, uint64_t real_ns)
{
    if (mc->unsorted) {
        const struct tc_clock_pair *best = &mc->pairs[0];
        for (size_t i = 1; i < mc->n; i++)
            if (dist(real_ns, mc->pairs[i].real) < dist(real_ns, best->real))
                best = &mc->pairs[i];
        return best;
    }
    size_t lo = bisect(mc, real_ns, 1); /* the first pair after real_ns */
    const struct tc_clock_pair *right = lo < mc->n ? &mc->pairs[lo] : NULL, *left = NULL;
    if (lo > 0) /* of the pairs at the largest REALTIME not after real_ns, the first */
        left = &mc->pairs[bisect(mc, mc->pairs[lo - 1].real, 0)];
    if (!left || !right)
        return left ? left : right;
    uint64_t dl = real_ns - left->real, dr = right->real - real_ns;
    if (dl != dr)
        return dl < dr ? left : right;
    return left->order < right->order ? left : right;
}

int tc_clock_map(const struct tc_machine_clocks *mc, uint64_t real_ns, uint64_t *out)
{
    if (!mc || mc->n == 0)
        return -1;
    const struct tc_clock_pair *best = nearest(mc, real_ns);
    if (real_ns >= best->real) {
        if (real_ns - best->real > UINT64_MAX - best->target)
            return -1; /* beyond the clock's range */
        *out = best->target + (real_ns - best->real);
        return 0;
    }
    uint64_t back = best->real - real_ns;
    if (back > best->target)
        return -1;
    *out = best->target - back;
    return 0;
}

void tc_trace_clocks_free(struct tc_trace_clocks *c)
{
    for (size_t i = 0; i < c->n; i++)
        free(c->m[i].pairs);
    free(c->m);
    free(c->seq_ids);
    tc_u32_index_free(&c->ix);
    tc_sync_ests_free(&c->sync);
    memset(c, 0, sizeof *c);
}
