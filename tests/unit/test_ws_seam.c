/* test_ws_seam.c: the in-memory WebSocket hand-off (src/net/ws_seam.c) between a stand-in lws
 * thread (a pthread calling push/pull/service as the WebSocket callbacks do) and a libevent loop
 * holding pair end A (as the gateway's tg_conn does).
 *
 * Covers: 24 MiB each way at once, in random pieces, arrive whole and in order while both sides
 * hit their high watermarks (the lws side is told to stop reading, the gateway side stops being
 * read, and both resume); the gateway's chains given by reference are let go of on the libevent
 * thread only (their release callbacks are not thread-safe); the WebSocket's end reaches A after
 * every byte; A's end reaches the WebSocket after every byte; a seam abandoned before it was
 * opened ends the WebSocket; a WebSocket gone before the hand-off ends A at once; no seam is left
 * (ASan checks the frees). The stand-in takes the gateway's bytes both ways a WebSocket does:
 * copied out (tg_ws_seam_pull, TLS) and in place, all, part or none of what it is handed
 * (tg_ws_seam_take, plain ws). */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <time.h>

#include "net/ws_seam.h"
#include "tracegate/clock.h"
#include "tg_test_util.h"

#define WAIT_MS 60000
#define BIG (24u << 20)

static uint8_t pattern(uint64_t i, uint8_t salt) { return (uint8_t)((i * 131u + (i >> 13) + salt) & 0xff); }

static uint32_t rnd(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(*s >> 33);
}

/* ------------------------------------------------------------ the stand-in lws thread */

/* A tg_ws_seam_take consumer, as a plain WebSocket's writer is: checks the bytes in place (in the
 * gateway's chains, under the seam's lock) and takes only the first `limit` of them, as a socket
 * that takes part of a message (or none) does. */
struct part_take {
    size_t at;    /* stream offset of the first byte handed over */
    size_t limit; /* most bytes to take */
    size_t took;  /* what it took: the seam must say the same, and hand the rest over again */
    int bad;
};

static ssize_t part_take(void *arg, const struct iovec *iov, int n, size_t len)
{
    struct part_take *p = arg;
    size_t take = len < p->limit ? len : p->limit, off = 0;
    for (int k = 0; k < n && off < take; k++)
        for (size_t j = 0; j < iov[k].iov_len && off < take; j++, off++)
            if (((const uint8_t *)iov[k].iov_base)[j] != pattern(p->at + off, 2))
                p->bad = 1;
    p->took = take;
    return (ssize_t)take;
}

struct lws_side {
    struct tg_ws_seams *set;
    struct tg_ws_seam *m;
    size_t to_send;      /* bytes to push (pattern salt 1) */
    size_t got;          /* bytes pulled, checked against pattern salt 2 */
    size_t want;         /* stop once this much was pulled (or the gateway ended) */
    uint64_t deadline_ms; /* set before the thread starts (tg_test_ms is not thread-safe) */
    int paused, ended, bad, close_when_sent;
    atomic_int done, pauses;
};

static void *lws_thread(void *arg)
{
    struct lws_side *w = arg;
    uint64_t seed = 99;
    size_t sent = 0;
    uint8_t *buf = malloc(256 * 1024);
    while (tg_mono_ms() < w->deadline_ms) {
        struct tg_ws_seam_wake wk[8];
        size_t n = tg_ws_seams_service(w->set, wk, 8);
        for (size_t i = 0; i < n; i++)
            if (wk[i].ws_user == w && wk[i].resume_rx)
                w->paused = 0;
        /* WebSocket messages in, as lws delivers them, unless paused */
        if (!w->paused && sent < w->to_send) {
            size_t k = 1 + rnd(&seed) % (200 * 1024);
            if (k > w->to_send - sent)
                k = w->to_send - sent;
            for (size_t j = 0; j < k; j++)
                buf[j] = pattern(sent + j, 1);
            int r = tg_ws_seam_push(w->m, buf, k, 4u << 20);
            if (r < 0) {
                w->bad = 1;
                break;
            }
            sent += k;
            if (r > 0) {
                w->paused = 1;
                atomic_fetch_add(&w->pauses, 1);
            }
        }
        /* writeable: take what the gateway wrote, in messages of up to 256 KiB: copied out (as for
         * TLS), or in place by a socket that takes all, part or none of a message (plain) */
        size_t more = 0, got, cap = 1 + rnd(&seed) % (256 * 1024);
        int ended = 0;
        if (rnd(&seed) & 1) {
            got = tg_ws_seam_pull(w->m, buf, cap, &more, &ended);
            for (size_t j = 0; j < got; j++)
                if (buf[j] != pattern(w->got + j, 2))
                    w->bad = 1;
        } else {
            uint32_t r = rnd(&seed) % 4;
            struct part_take pt = {w->got, r == 0 ? 0 : r == 1 ? rnd(&seed) % cap : cap, 0, 0};
            ssize_t t = tg_ws_seam_take(w->m, cap, part_take, &pt, &more, &ended);
            got = t > 0 ? (size_t)t : 0;
            if (t < 0 || pt.bad || got != pt.took)
                w->bad = 1;
        }
        w->got += got;
        if (ended) {
            w->ended = 1;
            break;
        }
        if (w->close_when_sent && sent == w->to_send)
            break;
        if (sent == w->to_send && w->got >= w->want && !w->close_when_sent)
            break;
        if (!got && (w->paused || sent == w->to_send)) {
            struct timespec ts = {0, 200000};
            nanosleep(&ts, NULL); /* nothing to do until the other side moves */
        }
    }
    free(buf);
    tg_ws_seam_ws_closed(w->m);
    atomic_store(&w->done, 1);
    return NULL;
}

/* ------------------------------------------------------------ the gateway side (pair end A) */

struct gw_side {
    struct bufferevent *a;
    size_t to_write, written, got;
    int eof, bad, end_when_written;
    pthread_t loop_thread;
    atomic_int refs_out, refs_wrong_thread;
};

static void ref_cleanup(const void *data, size_t len, void *arg)
{
    (void)len;
    struct gw_side *g = arg;
    if (!pthread_equal(pthread_self(), g->loop_thread))
        atomic_fetch_add(&g->refs_wrong_thread, 1);
    atomic_fetch_sub(&g->refs_out, 1);
    free((void *)data);
}

/* Writes the next pieces while A's output is under 1 MiB; pieces of 64 KiB by reference (as the
 * bridge forwards read blocks), the others copied. */
static void gw_fill(struct gw_side *g)
{
    struct evbuffer *out = bufferevent_get_output(g->a);
    static uint64_t seed = 5;
    while (g->written < g->to_write && evbuffer_get_length(out) < (1u << 20)) {
        size_t k = 1 + rnd(&seed) % (96 * 1024);
        if (k > g->to_write - g->written)
            k = g->to_write - g->written;
        uint8_t *p = malloc(k);
        for (size_t j = 0; j < k; j++)
            p[j] = pattern(g->written + j, 2);
        if (k >= 32 * 1024) {
            atomic_fetch_add(&g->refs_out, 1);
            evbuffer_add_reference(out, p, k, ref_cleanup, g);
        } else {
            evbuffer_add(out, p, k);
            free(p);
        }
        g->written += k;
    }
    if (g->end_when_written && g->written == g->to_write && !evbuffer_get_length(out))
        bufferevent_flush(g->a, EV_WRITE, BEV_FINISHED);
}

static void a_read_cb(struct bufferevent *a, void *arg)
{
    struct gw_side *g = arg;
    struct evbuffer *in = bufferevent_get_input(a);
    size_t n = evbuffer_get_length(in);
    const uint8_t *p = evbuffer_pullup(in, -1);
    for (size_t j = 0; j < n; j++)
        if (p[j] != pattern(g->got + j, 1))
            g->bad = 1;
    g->got += n;
    evbuffer_drain(in, n);
}

static void a_write_cb(struct bufferevent *a, void *arg)
{
    (void)a;
    gw_fill(arg);
}

static void a_event_cb(struct bufferevent *a, short what, void *arg)
{
    struct gw_side *g = arg;
    if (what & BEV_EVENT_EOF) {
        a_read_cb(a, g);
        g->eof = 1;
    }
}

static void gw_open(struct gw_side *g, struct tg_ws_seam *m)
{
    g->loop_thread = pthread_self();
    g->a = tg_ws_seam_open(m);
    assert_non_null(g->a);
    bufferevent_setcb(g->a, a_read_cb, a_write_cb, a_event_cb, g);
    bufferevent_setwatermark(g->a, EV_WRITE, 256 * 1024, 0);
    bufferevent_enable(g->a, EV_READ | EV_WRITE);
    gw_fill(g);
}

static struct event_base *g_base;
static struct tg_ws_seams *g_set;
static struct event *g_tick;

/* The stand-in lws thread changes what the waits below look at without an event on the loop:
 * a tick every 5 ms has the loop look again. */
static void tick_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    (void)arg;
}

static int setup(void **state)
{
    (void)state;
    g_base = event_base_new();
    assert_non_null(g_base);
    g_tick = event_new(g_base, -1, EV_PERSIST, tick_cb, NULL);
    struct timeval tv = {0, 5000};
    assert_int_equal(evtimer_add(g_tick, &tv), 0);
    g_set = tg_ws_seams_new(g_base, NULL); /* no lws context: the stand-in thread polls */
    assert_non_null(g_set);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    tg_ws_seams_free(g_set);
    event_free(g_tick);
    event_base_free(g_base);
    assert_int_equal(tg_ws_seam_count(), 0);
    return 0;
}

static int lws_paused(void *arg) { return atomic_load(&((struct lws_side *)arg)->pauses) > 0; }
static int lws_done(void *arg) { return atomic_load(&((struct lws_side *)arg)->done); }

struct both {
    struct lws_side *w;
    struct gw_side *g;
    size_t want_at_a;
};
static int both_done(void *arg)
{
    struct both *b = arg;
    return atomic_load(&b->w->done) && b->g->got >= b->want_at_a;
}
static int a_eof(void *arg) { return ((struct gw_side *)arg)->eof; }

/* A seam for w, its lws side to run on a thread of its own (w and g zeroed, then set up by the
 * caller before sides_start). */
static void sides_init(struct lws_side *w, struct gw_side *g)
{
    memset(w, 0, sizeof *w);
    memset(g, 0, sizeof *g);
    w->set = g_set;
    w->m = tg_ws_seam_new(g_set, w);
    assert_non_null(w->m);
}

static void sides_start(struct lws_side *w, struct gw_side *g, pthread_t *t)
{
    gw_open(g, w->m);
    w->deadline_ms = tg_mono_ms() + (uint64_t)tg_test_ms(WAIT_MS);
    assert_int_equal(pthread_create(t, NULL, lws_thread, w), 0);
}

/* A's end, and every chain given by reference let go of, on the loop's thread. */
static void gw_done(struct gw_side *g)
{
    bufferevent_free(g->a);
    event_base_loop(g_base, EVLOOP_NONBLOCK);
    assert_int_equal(atomic_load(&g->refs_out), 0);
    assert_int_equal(atomic_load(&g->refs_wrong_thread), 0);
}

/* ------------------------------------------------------------ tests */

static void test_both_ways_with_backpressure(void **state)
{
    (void)state;
    struct tg_ws_seam_stats st0;
    tg_ws_seam_stats(&st0);
    static struct lws_side w;
    static struct gw_side g;
    sides_init(&w, &g);
    w.to_send = BIG;
    w.want = BIG;
    g.to_write = BIG;
    pthread_t t;
    sides_start(&w, &g, &t);
    /* the gateway side reads A only after a while: the lws side must be told to stop */
    struct both b = {&w, &g, BIG};
    bufferevent_disable(g.a, EV_READ);
    assert_true(tg_test_run_until(g_base, lws_paused, &w, WAIT_MS));
    bufferevent_enable(g.a, EV_READ);
    assert_true(tg_test_run_until(g_base, both_done, &b, WAIT_MS));
    pthread_join(t, NULL);
    assert_false(w.bad);
    assert_false(g.bad);
    assert_int_equal(w.got, BIG);
    assert_int_equal(g.got, BIG);
    struct tg_ws_seam_stats st;
    tg_ws_seam_stats(&st);
    assert_true(st.in_peak <= TG_WS_SEAM_IN_HIGH + 200 * 1024); /* one message past the mark at most */
    assert_true(st.out_peak <= TG_WS_SEAM_OUT_HIGH);
    print_message("lws side paused %d times, gateway side %llu times; peaks in %zu, out %zu\n", atomic_load(&w.pauses),
                  st.out_pauses - st0.out_pauses, st.in_peak, st.out_peak);
    /* the WebSocket closed (the thread let go): A sees the end; every reference was let go on the
     * loop's thread */
    assert_true(tg_test_run_until(g_base, a_eof, &g, WAIT_MS));
    gw_done(&g);
}

/* The gateway side writes 24 MiB and ends; the WebSocket gets every byte, then the end. */
static void test_gateway_end_after_every_byte(void **state)
{
    (void)state;
    static struct lws_side w;
    static struct gw_side g;
    sides_init(&w, &g);
    w.want = SIZE_MAX;
    g.to_write = BIG;
    g.end_when_written = 1;
    pthread_t t;
    sides_start(&w, &g, &t);
    assert_true(tg_test_run_until(g_base, lws_done, &w, WAIT_MS));
    pthread_join(t, NULL);
    assert_true(w.ended);
    assert_false(w.bad);
    assert_int_equal(w.got, BIG);
    gw_done(&g);
}

/* The WebSocket sends 4 MiB and closes at once; A gets every byte, then its end. */
static void test_websocket_end_after_every_byte(void **state)
{
    (void)state;
    static struct lws_side w;
    static struct gw_side g;
    sides_init(&w, &g);
    w.to_send = 4u << 20;
    w.close_when_sent = 1;
    pthread_t t;
    sides_start(&w, &g, &t);
    assert_true(tg_test_run_until(g_base, a_eof, &g, WAIT_MS));
    pthread_join(t, NULL);
    assert_false(g.bad);
    assert_int_equal(g.got, 4u << 20);
    gw_done(&g);
}

/* Abandoned before it was opened (shutdown, a full hand-off pipe): the WebSocket ends. Gone
 * before it was opened: A ends as soon as it is opened, with what was sent before. */
static void test_abandoned_and_gone_before_open(void **state)
{
    (void)state;
    struct lws_side w;
    memset(&w, 0, sizeof w);
    struct tg_ws_seam *m = tg_ws_seam_new(g_set, &w);
    assert_int_equal(tg_ws_seam_push(m, "abc", 3, 1024), 0);
    tg_ws_seam_abandon(m);
    size_t more = 1;
    int ended = 0;
    uint8_t b[8];
    assert_int_equal(tg_ws_seam_pull(m, b, sizeof b, &more, &ended), 0);
    assert_true(ended);
    assert_int_equal(tg_ws_seam_push(m, "def", 3, 1024), 0); /* dropped: nobody to take it */
    tg_ws_seam_ws_closed(m);
    assert_int_equal(tg_ws_seam_count(), 0);

    static struct gw_side g;
    memset(&g, 0, sizeof g);
    m = tg_ws_seam_new(g_set, &w);
    uint8_t hello[1000];
    for (size_t j = 0; j < sizeof hello; j++)
        hello[j] = pattern(j, 1);
    assert_int_equal(tg_ws_seam_push(m, hello, sizeof hello, 1024), 0);
    tg_ws_seam_ws_closed(m);
    gw_open(&g, m);
    assert_true(tg_test_run_until(g_base, a_eof, &g, WAIT_MS));
    assert_int_equal(g.got, sizeof hello);
    assert_false(g.bad);
    bufferevent_free(g.a);
    event_base_loop(g_base, EVLOOP_NONBLOCK);
    assert_int_equal(tg_ws_seam_count(), 0);
}

/* A peer that ignores flow control: a push past the limit fails (the WebSocket is then closed). */
static void test_push_over_limit(void **state)
{
    (void)state;
    struct lws_side w;
    memset(&w, 0, sizeof w);
    struct tg_ws_seam *m = tg_ws_seam_new(g_set, &w);
    static uint8_t chunk[64 * 1024];
    int r = 0;
    size_t pushed = 0;
    while ((r = tg_ws_seam_push(m, chunk, sizeof chunk, 1u << 20)) >= 0)
        pushed += sizeof chunk;
    assert_int_equal(pushed, 1u << 20);
    tg_ws_seam_ws_closed(m);
    tg_ws_seam_abandon(m);
    assert_int_equal(tg_ws_seam_count(), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_both_ways_with_backpressure),
        cmocka_unit_test(test_gateway_end_after_every_byte),
        cmocka_unit_test(test_websocket_end_after_every_byte),
        cmocka_unit_test(test_abandoned_and_gone_before_open),
        cmocka_unit_test(test_push_over_limit),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
