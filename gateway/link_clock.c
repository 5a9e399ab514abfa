/* link_clock.c: clock sync over a link's control stream (docs/link-protocol.md): rounds of
 * ClockSync PING, REPLY and UPDATE carrying both nodes' BOOTTIME, REALTIME, MONOTONIC and
 * MONOTONIC_RAW; the recorded rounds give the peer's clock offset, estimated as trace processor
 * does for remote machines, for merged traces and /api/status. */
#include "link_int.h"

#include <event2/event.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

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

size_t tg_link_clock_rounds(const struct tg_link *l, uint64_t (*peer)[4], uint64_t (*mine)[4], size_t max)
{
    const struct clock_round *p, *u;
    uint64_t best = UINT64_MAX;
    for (size_t i = 0; i + 1 < l->n_rounds; i++)
        if (whole_round(l, i, &p, &u)) {
            uint64_t rt = round_trip(p, u);
            best = rt < best ? rt : best;
            i++; /* the UPDATE closed this round */
        }
    if (best == UINT64_MAX)
        return 0;
    uint64_t limit = best > (UINT64_MAX - 1000000u) / 2 ? UINT64_MAX : 2 * best + 1000000u;
    size_t n = 0;
    for (size_t i = 0; i + 1 < l->n_rounds && n + 2 <= max; i++) {
        if (!whole_round(l, i, &p, &u))
            continue;
        i++;
        if (round_trip(p, u) > limit)
            continue;
        memcpy(peer[n], p->peer, sizeof peer[n]);
        memcpy(mine[n++], p->mine, sizeof mine[0]);
        memcpy(peer[n], u->peer, sizeof peer[n]);
        memcpy(mine[n++], u->mine, sizeof mine[0]);
    }
    return n;
}

int tg_link_clock_offset(const struct tg_link *l, int64_t *offset_ns)
{
    /* trace processor's estimate: consecutive (PING, UPDATE) records form a round; per round
     * two offsets (t1c+t2c)/2 - t1h and t2c - (t1h+t2h)/2, averaged over the rounds */
    uint64_t peer[LINK_CLOCK_ROUNDS][4], mine[LINK_CLOCK_ROUNDS][4];
    size_t n = tg_link_clock_rounds(l, peer, mine, LINK_CLOCK_ROUNDS);
    if (!n)
        return 0;
    double sum = 0;
    for (size_t i = 0; i + 1 < n; i += 2) {
        double t1c = (double)peer[i][0], t2c = (double)peer[i + 1][0], t1h = (double)mine[i][0],
               t2h = (double)mine[i + 1][0];
        sum += (t1c + t2c) / 2 - t1h;
        sum += t2c - (t1h + t2h) / 2;
    }
    *offset_ns = (int64_t)(sum / (double)n);
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
