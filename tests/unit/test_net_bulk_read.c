/* test_net_bulk_read.c: net/bulk_read.h. A socket bufferevent with the hook hands its read
 * callback everything the socket holds (up to 256 KiB) in one readiness event, where libevent 2.1
 * alone hands over 4096 bytes; a bufferevent with a read high watermark reads as before (never past it); an end of stream
 * after the data is still reported, after every byte, in order; a bufferevent with deferred
 * callbacks (the gateway's kind) sees the extra bytes in the same callback. */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "net/bulk_read.h"
#include "tg_test_util.h"

struct rd {
    struct evbuffer *got;
    size_t first_cb_len; /* input length at the first read callback */
    int read_cbs, eof, drain;
};

static void on_read(struct bufferevent *bev, void *arg)
{
    struct rd *r = arg;
    struct evbuffer *in = bufferevent_get_input(bev);
    if (r->read_cbs++ == 0)
        r->first_cb_len = evbuffer_get_length(in);
    if (r->drain)
        evbuffer_remove_buffer(in, r->got, evbuffer_get_length(in));
}

static void on_event(struct bufferevent *bev, short what, void *arg)
{
    struct rd *r = arg;
    if (what & BEV_EVENT_EOF) {
        evbuffer_remove_buffer(bufferevent_get_input(bev), r->got, evbuffer_get_length(bufferevent_get_input(bev)));
        r->eof = 1;
    }
}

static int saw_read(void *arg) { return ((struct rd *)arg)->read_cbs > 0; }
static int saw_eof(void *arg) { return ((struct rd *)arg)->eof; }

/* Writes up to len pattern bytes into fd without blocking; returns how many went in. */
static size_t fill(int fd, size_t len)
{
    uint8_t *b = malloc(len);
    assert_non_null(b);
    for (size_t i = 0; i < len; i++)
        b[i] = (uint8_t)(i * 13u + 5u);
    size_t off = 0;
    while (off < len) {
        ssize_t n = write(fd, b + off, len - off);
        if (n <= 0)
            break;
        off += (size_t)n;
    }
    free(b);
    return off;
}

static void check_pattern(struct evbuffer *got, size_t len)
{
    assert_int_equal(evbuffer_get_length(got), len);
    const uint8_t *p = evbuffer_pullup(got, -1);
    for (size_t i = 0; i < len; i++)
        if (p[i] != (uint8_t)(i * 13u + 5u))
            fail_msg("byte %zu differs", i);
}

/* A socket pair whose writer holds `want` bytes queued (as many as the kernel takes). */
static size_t queued_pair(int sv[2], size_t want)
{
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    int big = 1 << 20;
    setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &big, sizeof big);
    setsockopt(sv[1], SOL_SOCKET, SO_RCVBUF, &big, sizeof big);
    fcntl(sv[0], F_SETFL, O_NONBLOCK);
    fcntl(sv[1], F_SETFL, O_NONBLOCK);
    return fill(sv[0], want);
}

/* A socket bufferevent with the hook reading a socket that already holds `want` bytes (as many
 * as the kernel took: fx->sent), and a writer end to close. */
struct fx {
    struct event_base *base;
    int sv[2];
    size_t sent;
    struct rd r;
    struct bufferevent *bev;
};

static void fx_open(struct fx *f, size_t want, int options)
{
    memset(f, 0, sizeof *f);
    f->base = event_base_new();
    f->sent = queued_pair(f->sv, want);
    f->r.got = evbuffer_new();
    f->bev = bufferevent_socket_new(f->base, f->sv[1], BEV_OPT_CLOSE_ON_FREE | options);
    assert_int_equal(tg_bev_bulk_read(f->bev), 0);
    bufferevent_setcb(f->bev, on_read, NULL, on_event, &f->r);
}

/* The writer closes; every byte must then arrive, in order, before the end of stream. */
static void fx_finish(struct fx *f)
{
    f->r.drain = 1;
    close(f->sv[0]);
    assert_true(tg_test_run_until(f->base, saw_eof, &f->r, 5000));
    check_pattern(f->r.got, f->sent);
    bufferevent_free(f->bev);
    evbuffer_free(f->r.got);
    event_base_free(f->base);
}

static void run_one_event(int options)
{
    struct fx f;
    fx_open(&f, 120000, options);
    assert_true(f.sent > 3 * 4096); /* enough that libevent alone would need several events */
    bufferevent_enable(f.bev, EV_READ);
    assert_true(tg_test_run_until(f.base, saw_read, &f.r, 5000));
    assert_int_equal(f.r.first_cb_len, f.sent); /* one event, everything */
    evbuffer_remove_buffer(bufferevent_get_input(f.bev), f.r.got, f.sent);
    fx_finish(&f);
}

static void test_one_event_reads_all(void **state)
{
    (void)state;
    run_one_event(0);
}

static void test_one_event_reads_all_deferred(void **state)
{
    (void)state;
    run_one_event(BEV_OPT_DEFER_CALLBACKS);
}

/* With a read high watermark the hook stays out: the input never goes past it; the rest is read
 * once it drains. */
static void test_high_watermark_holds(void **state)
{
    (void)state;
    struct fx f;
    fx_open(&f, 100000, 0);
    bufferevent_setwatermark(f.bev, EV_READ, 0, 10000);
    bufferevent_enable(f.bev, EV_READ);
    assert_true(tg_test_run_until(f.base, saw_read, &f.r, 5000));
    assert_true(f.r.first_cb_len > 0);
    assert_true(f.r.first_cb_len <= 10000);
    f.r.drain = 1;
    evbuffer_remove_buffer(bufferevent_get_input(f.bev), f.r.got, f.r.first_cb_len);
    bufferevent_trigger(f.bev, EV_READ, BEV_TRIG_IGNORE_WATERMARKS); /* let reading resume */
    fx_finish(&f);
}

/* Disabled reading stays disabled: nothing is read behind the owner's back. */
static void test_disabled_reads_nothing(void **state)
{
    (void)state;
    struct fx f;
    fx_open(&f, 50000, 0);
    bufferevent_disable(f.bev, EV_READ);
    for (int i = 0; i < 3; i++)
        event_base_loop(f.base, EVLOOP_NONBLOCK);
    assert_int_equal(evbuffer_get_length(bufferevent_get_input(f.bev)), 0);
    assert_int_equal(f.r.read_cbs, 0);
    bufferevent_enable(f.bev, EV_READ);
    fx_finish(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_one_event_reads_all),
        cmocka_unit_test(test_one_event_reads_all_deferred),
        cmocka_unit_test(test_high_watermark_holds),
        cmocka_unit_test(test_disabled_reads_nothing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
