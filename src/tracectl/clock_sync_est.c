/* clock_sync_est.c: machine clock offsets from RemoteClockSync rounds (see clock_sync_est.h). */
#include "clock_sync_est.h"

#include <stdlib.h>
#include <string.h>

#define ROUND_MAX_NS 30000000000ull /* two records under 30 s apart are one round trip */

static struct tc_sync_est *find(const struct tc_sync_ests *e, uint32_t machine)
{
    size_t i;
    return tc_u32_index_get(&e->ix, machine, &i) ? &e->v[i] : NULL;
}

int tc_sync_ests_add(struct tc_sync_ests *e, uint32_t machine, const struct tc_sync_reading *r, size_t n)
{
    struct tc_sync_est *m = find(e, machine);
    if (!m) {
        if (e->n == e->cap) {
            size_t cap = e->cap ? e->cap * 2 : 8;
            struct tc_sync_est *v = realloc(e->v, cap * sizeof *v);
            if (!v)
                return -1;
            e->v = v;
            e->cap = cap;
        }
        if (tc_u32_index_put(&e->ix, machine, e->n) != 0)
            return -1;
        m = &e->v[e->n++];
        memset(m, 0, sizeof *m);
        m->machine = machine;
    }
    /* every two consecutive entries, as trace processor reads them (not only a PING and its
     * UPDATE), with its unsigned 30 s test: an entry reading earlier than the one before is far */
    for (size_t i = 0; i + 1 < n; i++) {
        const struct tc_sync_reading *a = &r[i], *b = &r[i + 1];
        if (!a->ok || !b->ok || b->client - a->client >= ROUND_MAX_NS)
            continue;
        m->sum_ns += ((double)a->client + (double)b->client) / 2 - (double)a->host;
        m->sum_ns += (double)b->client - ((double)a->host + (double)b->host) / 2;
        m->pairs++;
    }
    return 0;
}

double tc_sync_est_mean_ns(const struct tc_sync_est *m) { return m->sum_ns / (double)(2 * m->pairs); }

int tc_sync_ests_offset(const struct tc_sync_ests *e, uint32_t machine, int64_t *ns)
{
    const struct tc_sync_est *m = find(e, machine);
    *ns = 0;
    if (!m || !m->pairs)
        return 0;
    double mean = tc_sync_est_mean_ns(m);
    /* clamped: a hostile trace's readings must not make the conversion undefined */
    if (mean != mean)
        *ns = 0;
    else if (mean >= 9.2e18)
        *ns = INT64_C(9200000000000000000);
    else if (mean <= -9.2e18)
        *ns = -INT64_C(9200000000000000000);
    else
        *ns = (int64_t)mean;
    return 1;
}

void tc_sync_ests_free(struct tc_sync_ests *e)
{
    free(e->v);
    tc_u32_index_free(&e->ix);
    memset(e, 0, sizeof *e);
}
