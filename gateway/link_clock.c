/* link_clock.c: clock sync over a link's control stream (docs/link-protocol.md): rounds of
 * ClockSync PING, REPLY and UPDATE carrying both nodes' BOOTTIME, REALTIME, MONOTONIC and
 * MONOTONIC_RAW; the recorded rounds give the peer's clock offset, estimated as trace processor
 * does for remote machines, for merged traces and /api/status. */
#include "link_int.h"

#include <event2/event.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "fed_clocks.h"
#include "tracegate_link.pb-c.h"

static void read_my_clocks(const struct tg_fleet_config *cfg, uint64_t v[4])
{
    static const clockid_t ids[4] = {CLOCK_BOOTTIME, CLOCK_REALTIME, CLOCK_MONOTONIC, CLOCK_MONOTONIC_RAW};
    for (int i = 0; i < 4; i++) {
        struct timespec ts;
        clock_gettime(ids[i], &ts);
        v[i] = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec + (uint64_t)(cfg ? cfg->test_clock_offset_ns : 0);
    }
}

static const uint32_t k_clock_ids[4] = {TG_NODE_CLOCK_BOOTTIME, TG_NODE_CLOCK_REALTIME, TG_NODE_CLOCK_MONOTONIC,
                                        TG_NODE_CLOCK_MONOTONIC_RAW};

static void send_clock_phase(struct tg_link *l, int phase)
{
    if (!l->conn || l->state != LINK_UP)
        return;
    uint64_t v[4];
    read_my_clocks(tg_fleet_config_of(l->fleet), v);
    Tracegate__Link__Clock clk[4], *pc[4];
    for (int i = 0; i < 4; i++) {
        tracegate__link__clock__init(&clk[i]);
        clk[i].has_clock_id = clk[i].has_ns = 1;
        clk[i].clock_id = k_clock_ids[i];
        clk[i].ns = v[i];
        pc[i] = &clk[i];
    }
    Tracegate__Link__ClockSync cs = TRACEGATE__LINK__CLOCK_SYNC__INIT;
    cs.has_phase = 1;
    cs.phase = (Tracegate__Link__ClockSync__Phase)phase;
    cs.n_clocks = phase == TRACEGATE__LINK__CLOCK_SYNC__PHASE__REPLY ? 0 : 4;
    cs.clocks = pc;
    Tracegate__Link__Control m = TRACEGATE__LINK__CONTROL__INIT;
    m.msg_case = TRACEGATE__LINK__CONTROL__MSG_CLOCK_SYNC;
    m.clock_sync = &cs;
    tg_link_send_control(l->conn, &m);
    tg_link_conn_flush(l->conn);
}

static void send_clock(struct tg_link *l)
{
    l->clock_phase = 1; /* waiting for the REPLY to send UPDATE */
    send_clock_phase(l, TRACEGATE__LINK__CLOCK_SYNC__PHASE__PING);
}

void tg_link_on_clock_sync(struct tg_link *l, const Tracegate__Link__ClockSync *cs)
{
    if (cs->has_phase && cs->phase == TRACEGATE__LINK__CLOCK_SYNC__PHASE__REPLY) {
        if (l->clock_phase) {
            l->clock_phase = 0;
            send_clock_phase(l, TRACEGATE__LINK__CLOCK_SYNC__PHASE__UPDATE);
        }
        return;
    }
    if (!cs->has_phase || cs->phase == TRACEGATE__LINK__CLOCK_SYNC__PHASE__PING)
        send_clock_phase(l, TRACEGATE__LINK__CLOCK_SYNC__PHASE__REPLY);
    uint64_t mine[4];
    read_my_clocks(NULL, mine); /* our own clocks as they are: the offset knob shifts only what we send */
    struct clock_round *r = &l->rounds[l->next_round];
    memset(r, 0, sizeof *r);
    memcpy(r->mine, mine, sizeof mine);
    for (size_t i = 0; i < cs->n_clocks; i++)
        for (int k = 0; k < 4; k++)
            if (cs->clocks[i]->clock_id == k_clock_ids[k])
                r->peer[k] = cs->clocks[i]->ns;
    r->phase = cs->has_phase ? (uint32_t)cs->phase : 0;
    l->next_round = (l->next_round + 1) % LINK_CLOCK_ROUNDS;
    if (l->n_rounds < LINK_CLOCK_ROUNDS)
        l->n_rounds++;
    tg_fleet_refresh_status(l->fleet);
}

/* Round i (0 = oldest) of the ring as its PING and UPDATE records, if it is a whole one. */
static int whole_round(const struct tg_link *l, size_t i, const struct clock_round **p, const struct clock_round **u)
{
    size_t a = (l->next_round + LINK_CLOCK_ROUNDS - l->n_rounds + i) % LINK_CLOCK_ROUNDS;
    *p = &l->rounds[a];
    *u = &l->rounds[(a + 1) % LINK_CLOCK_ROUNDS];
    return (*p)->phase == 0 && (*u)->phase == 1 && (*p)->peer[0] && (*u)->peer[0] && (*u)->peer[0] >= (*p)->peer[0] &&
           (*u)->mine[0] >= (*p)->mine[0];
}

static uint64_t round_trip(const struct clock_round *p, const struct clock_round *u)
{
    uint64_t theirs = u->peer[0] - p->peer[0], ours = u->mine[0] - p->mine[0];
    return theirs > ours ? theirs : ours;
}

/* Trace processor reads every two consecutive records under 30 s apart (node BOOTTIME, unsigned)
 * as one round trip, so two rounds given together must be at least that far apart: else the first
 * round's UPDATE and the second's PING would add half the time between the rounds. */
#define ROUND_GAP_NS 30000000000ull

static int far_apart(const struct clock_round *earlier_update, const struct clock_round *later_ping)
{
    return later_ping->peer[0] - earlier_update->peer[0] >= ROUND_GAP_NS;
}

size_t tg_link_clock_rounds(const struct tg_link *l, uint64_t (*peer)[4], uint64_t (*mine)[4], size_t max)
{
    struct {
        const struct clock_round *p, *u;
        uint64_t rt;
        int kept;
    } r[LINK_CLOCK_ROUNDS / 2 + 1];
    size_t nr = 0;
    uint64_t best = UINT64_MAX;
    for (size_t i = 0; i + 1 < l->n_rounds && nr < sizeof r / sizeof r[0]; i++)
        if (whole_round(l, i, &r[nr].p, &r[nr].u)) {
            r[nr].rt = round_trip(r[nr].p, r[nr].u);
            r[nr].kept = 0;
            best = r[nr].rt < best ? r[nr].rt : best;
            nr++;
            i++; /* the UPDATE closed this round */
        }
    if (!nr)
        return 0;
    uint64_t limit = best > (UINT64_MAX - 1000000u) / 2 ? UINT64_MAX : 2 * best + 1000000u;
    /* the shortest trips first (the newest of equals), each only if it is 30 s from every round
     * already kept, and only rounds within the limit */
    for (size_t kept = 0; 2 * (kept + 1) <= max;) {
        size_t pick = nr;
        for (size_t j = 0; j < nr; j++) {
            if (r[j].kept || r[j].rt > limit)
                continue;
            int fits = 1;
            for (size_t k = 0; k < nr && fits; k++)
                if (r[k].kept)
                    fits = k < j ? far_apart(r[k].u, r[j].p) : far_apart(r[j].u, r[k].p);
            if (fits && (pick == nr || r[j].rt <= r[pick].rt))
                pick = j;
        }
        if (pick == nr)
            break;
        r[pick].kept = 1;
        kept++;
    }
    size_t n = 0;
    for (size_t j = 0; j < nr; j++) /* in the order they were recorded */
        if (r[j].kept) {
            memcpy(peer[n], r[j].p->peer, sizeof peer[n]);
            memcpy(mine[n++], r[j].p->mine, sizeof mine[0]);
            memcpy(peer[n], r[j].u->peer, sizeof peer[n]);
            memcpy(mine[n++], r[j].u->mine, sizeof mine[0]);
        }
    return n;
}

int tg_link_clock_offset(const struct tg_link *l, int64_t *offset_ns)
{
    /* what trace processor derives from the records a merged trace carries */
    uint64_t peer[LINK_CLOCK_ROUNDS][4], mine[LINK_CLOCK_ROUNDS][4];
    size_t n = tg_link_clock_rounds(l, peer, mine, LINK_CLOCK_ROUNDS);
    int64_t off[4];
    if (!n || !tg_fed_clock_offsets((const uint64_t(*)[4])peer, (const uint64_t(*)[4])mine, n, off))
        return 0;
    *offset_ns = off[0];
    return 1;
}

void tg_link_clock_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct tg_link *l = arg;
    send_clock(l);
    const struct tg_fleet_config *cfg = tg_fleet_config_of(l->fleet);
    /* the first rounds come quickly (a trace may start now), then one per interval */
    uint32_t ms = l->n_rounds < 4 ? 1000 : (cfg->clock_interval_ms ? cfg->clock_interval_ms : 30000);
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    evtimer_add(l->clock_ev, &tv);
}
