/* test_net_write_through.c: net/write_through.h. Bytes queued on an idle socket bufferevent by a
 * callback reach the peer in that same loop turn (libevent alone writes them a turn later, after
 * epoll reports the socket writable), with no write interest left registered; what the socket
 * does not take waits for writability and arrives whole and in order, after which writing through
 * resumes; the write callback runs after each write, so a filter above keeps producing; a write to
 * a peer that went away is reported through the event callback, as libevent reports it. */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "net/write_through.h"
#include "tg_test_util.h"

struct fx {
    struct event_base *base;
    int sv[2]; /* sv[0]: the peer, read by the test; sv[1]: under the bufferevent */
    struct bufferevent *bev;
    struct tg_write_through *wt;
    struct evbuffer *got;          /* what the peer read */
    size_t sent;                   /* pattern bytes queued so far */
    int write_cbs, events, more;   /* more: rounds the write callback still queues */
    size_t more_len;
    short what;
};

static void put_pattern(struct fx *f, size_t len)
{
    uint8_t *b = malloc(len);
    assert_non_null(b);
    for (size_t i = 0; i < len; i++)
        b[i] = (uint8_t)((f->sent + i) * 7u + 3u);
    assert_int_equal(bufferevent_write(f->bev, b, len), 0);
    f->sent += len;
    free(b);
}

static void check_pattern(struct fx *f)
{
    assert_int_equal(evbuffer_get_length(f->got), f->sent);
    const uint8_t *p = evbuffer_pullup(f->got, -1);
    for (size_t i = 0; i < f->sent; i++)
        if (p[i] != (uint8_t)(i * 7u + 3u))
            fail_msg("byte %zu differs", i);
}

static void on_write(struct bufferevent *bev, void *arg)
{
    (void)bev;
    struct fx *f = arg;
    f->write_cbs++;
    if (f->more > 0) { /* as OpenSSL's filter: more records once the socket took the last ones */
        f->more--;
        put_pattern(f, f->more_len);
    }
}

static void on_event(struct bufferevent *bev, short what, void *arg)
{
    (void)bev;
    struct fx *f = arg;
    f->events++;
    f->what = what;
}

/* preload: bytes queued before write-through starts */
static void fx_open(struct fx *f, int sndbuf, size_t preload)
{
    memset(f, 0, sizeof *f);
    f->base = event_base_new();
    assert_non_null(f->base);
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, f->sv), 0);
    if (sndbuf) {
        setsockopt(f->sv[1], SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof sndbuf);
        setsockopt(f->sv[0], SOL_SOCKET, SO_RCVBUF, &sndbuf, sizeof sndbuf);
    }
    fcntl(f->sv[0], F_SETFL, O_NONBLOCK);
    fcntl(f->sv[1], F_SETFL, O_NONBLOCK);
    f->got = evbuffer_new();
    f->bev = bufferevent_socket_new(f->base, f->sv[1], BEV_OPT_CLOSE_ON_FREE);
    assert_non_null(f->bev);
    bufferevent_setcb(f->bev, NULL, on_write, on_event, f);
    bufferevent_enable(f->bev, EV_READ | EV_WRITE);
    if (preload)
        put_pattern(f, preload);
    f->wt = tg_write_through_new(f->bev);
    assert_non_null(f->wt);
}

static void fx_close(struct fx *f)
{
    tg_write_through_free(f->wt);
    bufferevent_free(f->bev);
    if (f->sv[0] >= 0)
        close(f->sv[0]);
    evbuffer_free(f->got);
    event_base_free(f->base);
}

/* Reads what the peer end holds into f->got; returns bytes read. */
static size_t peer_read(struct fx *f)
{
    size_t total = 0;
    for (;;) {
        int n = evbuffer_read(f->got, f->sv[0], 65536);
        if (n <= 0)
            break;
        total += (size_t)n;
    }
    return total;
}

static int waiting(const struct fx *f) { return (bufferevent_get_enabled(f->bev) & EV_WRITE) != 0; }

/* A callback queues `len` bytes (deferred through an event, as the bridge's read callbacks run). */
struct queue_job {
    struct fx *f;
    size_t len;
};

static void queue_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct queue_job *j = arg;
    put_pattern(j->f, j->len);
}

/* One loop turn runs a callback that queues len bytes; returns what the peer holds after it. */
static size_t one_turn(struct fx *f, size_t len)
{
    struct queue_job j = {f, len};
    struct event *ev = event_new(f->base, -1, 0, queue_cb, &j);
    assert_non_null(ev);
    event_active(ev, EV_TIMEOUT, 0);
    assert_int_equal(event_base_loop(f->base, EVLOOP_ONCE | EVLOOP_NONBLOCK), 0);
    event_free(ev);
    return peer_read(f);
}

static void test_idle_socket_written_in_the_same_turn(void **state)
{
    (void)state;
    struct fx f;
    fx_open(&f, 0, 0);
    assert_false(waiting(&f)); /* an idle socket registers no write interest */
    for (int i = 1; i <= 3; i++) {
        /* libevent alone: 0 bytes here (it adds write interest, and writes next turn) */
        assert_int_equal(one_turn(&f, 1000), 1000);
        assert_false(waiting(&f));
        assert_int_equal(f.write_cbs, i); /* the write callback ran, as after libevent's writes */
        uint64_t writes, bytes;
        tg_write_through_counts(f.wt, &writes, &bytes);
        assert_int_equal(writes, (uint64_t)i); /* one write per turn */
        assert_int_equal(bytes, (uint64_t)i * 1000);
    }
    check_pattern(&f);
    fx_close(&f);
}

static int peer_has_all(void *arg)
{
    struct fx *f = arg;
    peer_read(f);
    return evbuffer_get_length(f->got) == f->sent;
}

static int not_waiting(void *arg) { return !waiting(arg); }

static void test_backlog_waits_then_writes_through_again(void **state)
{
    (void)state;
    struct fx f;
    fx_open(&f, 32 << 10, 0);
    /* far more than the socket takes: the rest waits for writability */
    one_turn(&f, 4u << 20);
    assert_true(waiting(&f));
    assert_true(evbuffer_get_length(bufferevent_get_output(f.bev)) > 0);
    /* the peer reads as it can; every byte arrives, in order */
    assert_true(tg_test_run_until(f.base, peer_has_all, &f, 20000));
    check_pattern(&f);
    /* libevent emptied the output: write interest is gone again, and the next bytes go
     * through in the turn they are queued */
    assert_true(tg_test_run_until(f.base, not_waiting, &f, 5000));
    uint64_t w0, b0, w1, b1;
    tg_write_through_counts(f.wt, &w0, &b0);
    assert_int_equal(one_turn(&f, 500), 500);
    tg_write_through_counts(f.wt, &w1, &b1);
    assert_int_equal(w1, w0 + 1);
    assert_int_equal(b1, b0 + 500);
    assert_false(waiting(&f));
    check_pattern(&f);
    fx_close(&f);
}

static void test_write_callback_keeps_a_filter_producing(void **state)
{
    (void)state;
    struct fx f;
    fx_open(&f, 0, 0);
    f.more = 20; /* each write callback queues 10 KiB more, 20 times */
    f.more_len = 10 << 10;
    one_turn(&f, 100);
    assert_true(tg_test_run_until(f.base, peer_has_all, &f, 10000));
    assert_int_equal(f.more, 0);
    assert_int_equal(f.sent, 100 + 20 * (10 << 10));
    check_pattern(&f);
    assert_false(waiting(&f));
    fx_close(&f);
}

static int saw_event(void *arg) { return ((struct fx *)arg)->events > 0; }

static void test_peer_gone_is_reported(void **state)
{
    (void)state;
    signal(SIGPIPE, SIG_IGN);
    struct fx f;
    fx_open(&f, 0, 0);
    bufferevent_disable(f.bev, EV_READ); /* the end of stream is not read: the write learns it */
    close(f.sv[0]);
    f.sv[0] = -1;
    put_pattern(&f, 1000);
    assert_true(tg_test_run_until(f.base, saw_event, &f, 5000));
    assert_true(f.what & BEV_EVENT_ERROR);
    assert_true(f.what & BEV_EVENT_WRITING);
    fx_close(&f);
}

static void test_output_queued_before_start(void **state)
{
    (void)state;
    /* bytes queued before write-through starts (a TLS handshake's last flight) are libevent's;
     * write-through takes over once they are out */
    struct fx f;
    fx_open(&f, 0, 3000);
    assert_true(waiting(&f));
    assert_true(tg_test_run_until(f.base, peer_has_all, &f, 5000));
    assert_true(tg_test_run_until(f.base, not_waiting, &f, 5000));
    assert_int_equal(one_turn(&f, 10), 10);
    check_pattern(&f);
    fx_close(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_idle_socket_written_in_the_same_turn),
        cmocka_unit_test(test_backlog_waits_then_writes_through_again),
        cmocka_unit_test(test_write_callback_keeps_a_filter_producing),
        cmocka_unit_test(test_peer_gone_is_reported),
        cmocka_unit_test(test_output_queued_before_start),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
