/* test_link_clock.c: which recorded clock-sync rounds a link keeps for estimating its peer's clock
 * (gateway/link_clock.c): whole rounds only (a PING record, then its UPDATE), and only rounds
 * whose trip time was near the shortest one, so a round in which either node waited for a CPU
 * does not drag the estimate in /api/status and in a merged trace's RemoteClockSync by half the
 * wait; and rounds given together at least 30 s apart, so that trace processor, which reads every
 * two consecutive records under 30 s apart as a round trip, reads only real ones. The estimate is
 * checked against a peer whose clock is 10 s ahead, also as trace processor computes it
 * (tg_fed_clock_offsets). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "fed_clocks.h"
#include "link_int.h"

#define MS 1000000ull
#define OFF (10000 * MS) /* the peer's clock minus ours */

/* One round as recorded: the peer stamps its PING at t (its clock: t + OFF), it arrives after
 * `out` ns plus `stall_here` (we were not running), our REPLY takes `back` ns, the peer stamps
 * its UPDATE at once and it arrives after `out` ns. */
static void add_round(struct tg_link *l, uint64_t t, uint64_t out, uint64_t back, uint64_t stall_here)
{
    struct clock_round *p = &l->rounds[l->next_round];
    memset(p, 0, sizeof *p);
    p->phase = 0;
    p->peer[0] = t + OFF;
    p->mine[0] = t + out + stall_here;
    l->next_round = (l->next_round + 1) % LINK_CLOCK_ROUNDS;
    struct clock_round *u = &l->rounds[l->next_round];
    memset(u, 0, sizeof *u);
    u->phase = 1;
    uint64_t update_at = t + out + stall_here + back; /* our time when the peer sends UPDATE */
    u->peer[0] = update_at + OFF;
    u->mine[0] = update_at + out;
    l->next_round = (l->next_round + 1) % LINK_CLOCK_ROUNDS;
    l->n_rounds = l->n_rounds + 2 > LINK_CLOCK_ROUNDS ? LINK_CLOCK_ROUNDS : l->n_rounds + 2;
}

/* Four rounds at the given seconds, each with symmetric trips of the given milliseconds. */
static void add_four(struct tg_link *l, const int at_s[4], const int trip_ms[4])
{
    memset(l, 0, sizeof *l);
    for (int i = 0; i < 4; i++)
        add_round(l, (uint64_t)at_s[i] * 1000 * MS, (uint64_t)trip_ms[i] * MS, (uint64_t)trip_ms[i] * MS, 0);
}

static int64_t error_of(const struct tg_link *l)
{
    int64_t off = 0;
    assert_int_equal(tg_link_clock_offset(l, &off), 1);
    return off - (int64_t)OFF;
}

static void test_no_rounds(void **state)
{
    (void)state;
    struct tg_link l;
    memset(&l, 0, sizeof l);
    int64_t off = 0;
    assert_int_equal(tg_link_clock_offset(&l, &off), 0);
    uint64_t peer[8][4], mine[8][4];
    assert_int_equal(tg_link_clock_rounds(&l, peer, mine, 8), 0);
    /* a PING without its UPDATE is not a round */
    l.rounds[0].phase = 0;
    l.rounds[0].peer[0] = OFF;
    l.rounds[0].mine[0] = 1;
    l.n_rounds = 1;
    l.next_round = 1;
    assert_int_equal(tg_link_clock_rounds(&l, peer, mine, 8), 0);
}

#define S (1000 * MS)

/* Reads records as trace processor reads a RemoteClockSync (every consecutive pair under 30 s). */
static int64_t tp_error(uint64_t (*peer)[4], uint64_t (*mine)[4], size_t n)
{
    int64_t off[4];
    assert_int_equal(tg_fed_clock_offsets((const uint64_t(*)[4])peer, (const uint64_t(*)[4])mine, n, off), 1);
    return off[0] - (int64_t)OFF;
}

/* A 1.7 s stall inside one round of four (31 s apart): without selection the mean is off by
 * ~212 ms (the stalled round alone by 850 ms); the stalled round is left out and the estimate is
 * within the symmetric trips' error. */
static void test_stalled_round_left_out(void **state)
{
    (void)state;
    struct tg_link l;
    memset(&l, 0, sizeof l);
    add_round(&l, 1 * S, 1 * MS, 1 * MS, 0);
    add_round(&l, 32 * S, 1 * MS, 1 * MS, 1700 * MS);
    add_round(&l, 63 * S, 2 * MS, 2 * MS, 0);
    add_round(&l, 94 * S, 1 * MS, 1 * MS, 0);
    uint64_t peer[8][4], mine[8][4];
    size_t n = tg_link_clock_rounds(&l, peer, mine, 8);
    assert_int_equal(n, 6); /* three rounds kept, as (PING, UPDATE) records */
    for (size_t i = 0; i < n; i += 2) {
        assert_true(peer[i + 1][0] > peer[i][0]);
        assert_true(mine[i][0] != 32 * S + 1 * MS + 1700 * MS); /* not the stalled PING */
    }
    int64_t e = error_of(&l);
    assert_true(e > -(int64_t)(2 * MS) && e < (int64_t)(2 * MS));
    assert_int_equal(tp_error(peer, mine, n), e);
}

/* Rounds 31 s apart and alike are all kept; a caller's max cuts whole rounds only, the newest
 * kept. */
static void test_all_kept_and_max(void **state)
{
    (void)state;
    struct tg_link l;
    add_four(&l, (const int[]){1, 32, 63, 94}, (const int[]){3, 3, 3, 3});
    uint64_t peer[8][4], mine[8][4];
    assert_int_equal(tg_link_clock_rounds(&l, peer, mine, 8), 8);
    assert_int_equal(tg_link_clock_rounds(&l, peer, mine, 5), 4);
    assert_int_equal(peer[0][0], 63 * S + OFF);
    assert_int_equal(error_of(&l), 0);
}

/* The first rounds come a second apart. Given together, trace processor would also read each
 * round's UPDATE and the next round's PING as a round trip, each adding half a second: three of
 * the seven pairs of four rounds move the machine by ~214 ms (two rounds by ~167 ms: a merged
 * trace's flows then pointed backwards in time). Only one of rounds that close is given, the one
 * with the shortest trip, and trace processor's reading of what is given is the true offset. */
static void test_close_rounds_one_given(void **state)
{
    (void)state;
    struct tg_link l;
    add_four(&l, (const int[]){1, 2, 3, 4}, (const int[]){3, 1, 2, 3});
    uint64_t all_peer[8][4], all_mine[8][4]; /* every record, as the ring holds them */
    memset(all_peer, 0, sizeof all_peer);
    memset(all_mine, 0, sizeof all_mine);
    for (size_t i = 0; i < 8; i++) {
        const struct clock_round *r = &l.rounds[(l.next_round + i) % LINK_CLOCK_ROUNDS];
        all_peer[i][0] = r->peer[0];
        all_mine[i][0] = r->mine[0];
    }
    int64_t naive = tp_error(all_peer, all_mine, 8);
    assert_true(naive > 200 * (int64_t)MS && naive < 230 * (int64_t)MS);

    uint64_t peer[8][4], mine[8][4];
    size_t n = tg_link_clock_rounds(&l, peer, mine, 8);
    assert_int_equal(n, 2);
    assert_int_equal(peer[0][0], 2 * S + OFF); /* the 1 ms trips */
    assert_int_equal(tp_error(peer, mine, n), 0);
    assert_int_equal(error_of(&l), 0);
}

/* Two bursts of close rounds, 40 s apart: the best round of each. */
static void test_one_round_per_30s(void **state)
{
    (void)state;
    struct tg_link l;
    add_four(&l, (const int[]){1, 2, 42, 43}, (const int[]){2, 1, 1, 2});
    uint64_t peer[8][4], mine[8][4];
    assert_int_equal(tg_link_clock_rounds(&l, peer, mine, 8), 4);
    assert_int_equal(peer[0][0], 2 * S + OFF);
    assert_int_equal(peer[2][0], 42 * S + OFF);
    assert_int_equal(tp_error(peer, mine, 4), 0);
}

/* A round whose records go backwards (a peer's clock stepped) is no round. */
static void test_backwards_round_ignored(void **state)
{
    (void)state;
    struct tg_link l;
    memset(&l, 0, sizeof l);
    add_round(&l, 1000 * MS, 1 * MS, 1 * MS, 0);
    add_round(&l, 2000 * MS, 1 * MS, 1 * MS, 0);
    size_t last_update = (l.next_round + LINK_CLOCK_ROUNDS - 1) % LINK_CLOCK_ROUNDS;
    l.rounds[last_update].peer[0] = 1 * MS; /* before its PING */
    uint64_t peer[8][4], mine[8][4];
    assert_int_equal(tg_link_clock_rounds(&l, peer, mine, 8), 2);
    assert_int_equal(error_of(&l), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_no_rounds),
        cmocka_unit_test(test_stalled_round_left_out),
        cmocka_unit_test(test_all_kept_and_max),
        cmocka_unit_test(test_close_rounds_one_given),
        cmocka_unit_test(test_one_round_per_30s),
        cmocka_unit_test(test_backwards_round_ignored),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
