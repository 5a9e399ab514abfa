/* test_ws_server_filter.c: the WebSocket server filter (net/ws_filter.h, server side) against a scripted client on the other end of a socketpair. */
#include "config.h"

#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/util.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "net/ws_filter.h"
#include "tg_test_util.h"

#define WAIT_MS 5000
/* a PONG frame: header and the largest control payload */
#define PONG_MAX (2 + 125)

struct srv {
    struct event_base *base;
    struct bufferevent *ws; /* the filter; NULL once freed */
    int peer;               /* the client's end */
    struct evbuffer *got;   /* bytes the filter delivered above */
    struct evbuffer *rx;    /* bytes the client received */
    int eof, error, err_errno;
    int free_on_end;        /* free the filter from its event callback (as the gateway does) */
    int peer_eof;           /* the client read the end of the stream */
    uint64_t keys;          /* PRNG for the client's mask keys */
};

static void s_read(struct bufferevent *bev, void *arg)
{
    struct srv *s = arg;
    evbuffer_add_buffer(s->got, bufferevent_get_input(bev));
}

static void s_event(struct bufferevent *bev, short what, void *arg)
{
    struct srv *s = arg;
    int e = errno;
    if (what & BEV_EVENT_EOF)
        s->eof = 1;
    if (what & BEV_EVENT_ERROR) {
        s->error = 1;
        s->err_errno = e;
    }
    if (s->free_on_end && (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR))) {
        bufferevent_free(bev);
        s->ws = NULL;
    }
}

static void srv_open(struct srv *s, size_t max_message, size_t out_message)
{
    memset(s, 0, sizeof *s);
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    assert_int_equal(evutil_make_socket_nonblocking(sv[0]), 0); /* as the gateway's sockets are */
    s->base = event_base_new();
    assert_non_null(s->base);
    s->peer = sv[1];
    s->got = evbuffer_new();
    s->rx = evbuffer_new();
    s->keys = 0x7773; /* "ws" */
    struct tg_ws_server_filter_cfg cfg = {
        .what = "WebSocket /traced from test",
        .max_message = max_message,
        .out_message = out_message,
    };
    s->ws = tg_ws_server_filter_new(s->base, sv[0], &cfg);
    assert_non_null(s->ws);
    bufferevent_setcb(s->ws, s_read, NULL, s_event, s);
    bufferevent_enable(s->ws, EV_READ | EV_WRITE);
}

/* ---- the client's end ---- */

/* Reads what is there (non-blocking) into rx; notes the end of the stream. */
static void peer_pull(struct srv *s)
{
    uint8_t buf[65536];
    for (;;) {
        ssize_t n = recv(s->peer, buf, sizeof buf, MSG_DONTWAIT);
        if (n == 0)
            s->peer_eof = 1;
        if (n <= 0)
            return;
        evbuffer_add(s->rx, buf, (size_t)n);
    }
}

static int peer_ended(void *arg)
{
    struct srv *s = arg;
    peer_pull(s);
    return s->peer_eof;
}

/* Sends all of it, letting the server's loop run while the socket is full (the client does not
 * read meanwhile). */
static void peer_send(struct srv *s, const void *data, size_t len)
{
    const uint8_t *p = data;
    while (len) {
        ssize_t n = send(s->peer, p, len, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            event_base_loop(s->base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
            continue;
        }
        assert_true(n > 0);
        p += n;
        len -= (size_t)n;
    }
}

/* A client frame: first byte b0 (FIN, RSV, opcode) as given, the length in its shortest form,
 * then (when `masked`) a fresh key and the payload masked with it. Returns its length. */
static size_t cframe(struct srv *s, uint8_t *out, uint8_t b0, const void *payload, size_t len, int masked)
{
    size_t h = tg_test_ws_header(out, b0, masked, len);
    uint8_t key[4] = {0, 0, 0, 0};
    if (masked) {
        uint64_t r = tg_test_rand(&s->keys) | 0x01010101u; /* no zero byte: every byte really masked */
        memcpy(key, &r, 4);
        memcpy(out + h, key, 4);
        h += 4;
    }
    const uint8_t *p = payload;
    for (size_t i = 0; i < len; i++)
        out[h + i] = p[i] ^ key[i & 3];
    return h + len;
}

/* One frame from the server, as the client reads it. */
struct sframe {
    uint8_t b0, b1; /* the first two header bytes */
    int op;
    size_t len;
    uint8_t *payload; /* malloc'ed, NUL-terminated */
};

/* Removes one whole server frame from rx into f: 1, or 0 while rx does not hold one. Every server
 * frame is final, unmasked, without reserved bits, its length in the shortest form. */
static int take_frame(struct srv *s, struct sframe *f)
{
    size_t have = evbuffer_get_length(s->rx);
    uint8_t h[10];
    if (have < 2)
        return 0;
    evbuffer_copyout(s->rx, h, 2);
    assert_int_equal(h[0] & 0xf0, 0x80); /* FIN, no RSV */
    assert_int_equal(h[1] & 0x80, 0);    /* never masked */
    uint64_t n = h[1] & 0x7f;
    size_t hl = n == 126 ? 4 : n == 127 ? 10 : 2;
    if (have < hl)
        return 0;
    evbuffer_copyout(s->rx, h, hl);
    if (hl == 4) {
        n = (uint64_t)h[2] << 8 | h[3];
        assert_true(n >= 126);
    } else if (hl == 10) {
        n = 0;
        for (int i = 2; i < 10; i++)
            n = n << 8 | h[i];
        assert_true(n > 0xffff);
    }
    if (have - hl < n)
        return 0;
    f->b0 = h[0];
    f->b1 = h[1];
    f->op = h[0] & 0x0f;
    f->len = (size_t)n;
    f->payload = malloc(f->len + 1);
    assert_non_null(f->payload);
    evbuffer_drain(s->rx, hl);
    assert_int_equal(evbuffer_remove(s->rx, f->payload, f->len), (int)f->len);
    f->payload[f->len] = 0;
    return 1;
}

struct frame_wait {
    struct srv *s;
    struct sframe f;
    int have;
};

static int frame_in(void *arg)
{
    struct frame_wait *w = arg;
    peer_pull(w->s);
    w->have = take_frame(w->s, &w->f);
    return w->have || w->s->peer_eof;
}

/* Waits for the next frame the client gets (the caller frees its payload). */
static void next_frame(struct srv *s, struct sframe *f)
{
    struct frame_wait w = {.s = s};
    assert_true(tg_test_run_until(s->base, frame_in, &w, WAIT_MS));
    if (!w.have) /* the stream ended first */
        assert_true(take_frame(s, &w.f));
    *f = w.f;
}

/* The next thing the client gets is a frame of opcode op carrying exactly the len bytes at want. */
static void expect_frame(struct srv *s, int op, const void *want, size_t len)
{
    struct sframe f;
    next_frame(s, &f);
    assert_int_equal(f.op, op);
    assert_int_equal(f.len, len);
    assert_memory_equal(f.payload, want, len);
    free(f.payload);
}

/* The next thing the client gets is a close frame with `code` (and exactly `reason`, unless NULL),
 * then the end of the stream with nothing after the close frame. Returns the reason's length. */
static size_t expect_close_then_end(struct srv *s, unsigned code, const char *reason)
{
    struct sframe f;
    next_frame(s, &f);
    assert_int_equal(f.op, 0x8);
    assert_true(f.len >= 2 && f.len <= 125);
    assert_int_equal((unsigned)f.payload[0] << 8 | f.payload[1], code);
    if (reason) {
        assert_int_equal(f.len - 2, strlen(reason));
        assert_memory_equal(f.payload + 2, reason, strlen(reason));
    }
    size_t rl = f.len - 2;
    free(f.payload);
    assert_true(tg_test_run_until(s->base, peer_ended, s, WAIT_MS));
    assert_int_equal(evbuffer_get_length(s->rx), 0);
    return rl;
}

/* Frees the filter (unless it is gone), waits until its socket is closed and frees the rest. */
static void srv_close(struct srv *s)
{
    if (s->ws)
        bufferevent_free(s->ws);
    s->ws = NULL;
    assert_true(tg_test_run_until(s->base, peer_ended, s, WAIT_MS));
    close(s->peer);
    evbuffer_free(s->got);
    evbuffer_free(s->rx);
    event_base_free(s->base);
}

/* ---- conditions to wait for ---- */

struct want {
    struct srv *s;
    size_t bytes;
};

static int got_bytes(void *arg)
{
    struct want *w = arg;
    return evbuffer_get_length(w->s->got) >= w->bytes || w->s->error || w->s->eof;
}

static int freed(void *arg) { return ((struct srv *)arg)->ws == NULL; }

/* The server's socket bufferevent has read everything the client sent. */
static int input_consumed(void *arg)
{
    struct srv *s = arg;
    int unread = 0;
    return ioctl(bufferevent_getfd(bufferevent_get_underlying(s->ws)), FIONREAD, &unread) == 0 && unread == 0;
}

static void wait_got(struct srv *s, size_t bytes)
{
    struct want w = {s, bytes};
    assert_true(tg_test_run_until(s->base, got_bytes, &w, WAIT_MS));
    assert_false(s->error);
    assert_false(s->eof);
    assert_int_equal(evbuffer_get_length(s->got), bytes);
}

static void fill_pattern(uint8_t *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)(i * 7 + seed + (i >> 8));
}

/* ---- tests ---- */

/* The client's script for test_masked_fragments_in_order: whole messages and a fragmented one
 * with a PING and an empty continuation inside, each frame with its own key; `big` adds 16- and
 * 64-bit lengths. Fills out (the client's bytes) and expect (what must arrive above). */
static void in_order_script(struct srv *s, int big, uint8_t *out, size_t *olen, uint8_t *expect, size_t *elen)
{
    static uint8_t pat[70000];
    fill_pattern(pat, sizeof pat, 3);
    size_t o = 0, e = 0;
#define ADD(b0, p, n, data)                                                                                        \
    do {                                                                                                           \
        o += cframe(s, out + o, (b0), (p), (n), 1);                                                                \
        if (data) {                                                                                                \
            memcpy(expect + e, (p), (n));                                                                          \
            e += (n);                                                                                              \
        }                                                                                                          \
    } while (0)
    ADD(0x82, "hello", 5, 1);
    ADD(0x02, "abc", 3, 1);   /* a message in four frames */
    ADD(0x89, "p1", 2, 0);    /* a PING between them */
    ADD(0x00, "", 0, 1);      /* an empty continuation */
    ADD(0x00, "defgh", 5, 1); /* 5 bytes: the next frame's key starts over */
    ADD(0x80, "ijk", 3, 1);
    ADD(0x82, pat, 130, 1);   /* a 16-bit length */
    if (big) {
        ADD(0x02, pat + 1000, 300, 1);
        ADD(0x80, pat, sizeof pat, 1); /* a 64-bit length, arriving over many reads */
    }
    ADD(0x82, "z", 1, 1);
#undef ADD
    *olen = o;
    *elen = e;
}

/* Masked binary messages, one fragmented with a PING and an empty continuation between its
 * frames, arrive above unmasked and in order, sent whole and then a byte at a time (every byte a
 * read of its own, the mask's phase carried across them); the PING gets its PONG. */
static void test_masked_fragments_in_order(void **state)
{
    (void)state;
    size_t cap = 80000;
    uint8_t *out = malloc(cap), *expect = malloc(cap);
    for (int dribble = 0; dribble < 2; dribble++) {
        struct srv s;
        srv_open(&s, 1u << 20, 0);
        size_t o, e;
        in_order_script(&s, !dribble, out, &o, expect, &e);
        if (!dribble) {
            peer_send(&s, out, o);
        } else {
            for (size_t i = 0; i < o; i++) {
                peer_send(&s, out + i, 1);
                assert_true(tg_test_run_until(s.base, input_consumed, &s, WAIT_MS));
            }
        }
        wait_got(&s, e);
        assert_memory_equal(evbuffer_pullup(s.got, -1), expect, e);
        expect_frame(&s, 0xA, "p1", 2);
        srv_close(&s);
    }
    free(out);
    free(expect);
}

/* What is written above goes out as final, unmasked binary frames (0x82, no mask bit, the
 * shortest length) carrying exactly the bytes written, cut at out_message. */
static void test_writes_go_out_unmasked(void **state)
{
    (void)state;
    struct srv s;
    srv_open(&s, 1u << 20, 100000);
    struct sframe f;
    bufferevent_write(s.ws, "hello", 5);
    next_frame(&s, &f);
    assert_int_equal(f.b0, 0x82);
    assert_int_equal(f.b1, 5);
    assert_memory_equal(f.payload, "hello", 5);
    free(f.payload);

    static uint8_t pat[250000];
    fill_pattern(pat, sizeof pat, 11);
    bufferevent_write(s.ws, pat, 300);
    next_frame(&s, &f);
    assert_int_equal(f.b0, 0x82);
    assert_int_equal(f.b1, 126);
    assert_int_equal(f.len, 300);
    assert_memory_equal(f.payload, pat, 300);
    free(f.payload);

    /* 250,000 bytes: messages of at most 100,000 (64- and 16-bit lengths), nothing lost or added */
    bufferevent_write(s.ws, pat, sizeof pat);
    size_t back = 0, frames = 0;
    while (back < sizeof pat) {
        next_frame(&s, &f);
        assert_int_equal(f.b0, 0x82);
        assert_true(f.len > 0 && f.len <= 100000);
        assert_true(f.len <= sizeof pat - back);
        assert_memory_equal(f.payload, pat + back, f.len);
        back += f.len;
        frames++;
        free(f.payload);
    }
    assert_true(frames >= 3);
    assert_int_equal(evbuffer_get_length(s.rx), 0);
    assert_false(s.error);
    srv_close(&s);
}

/* An unmasked client frame fails the connection: the bufferevent above gets BEV_EVENT_ERROR
 * (EPROTO) after what came before it; freed then, the filter sends a close frame with 1002 and a
 * reason, and the socket closes. */
static void test_unmasked_frame_closes_1002(void **state)
{
    (void)state;
    struct srv s;
    srv_open(&s, 1u << 20, 0);
    s.free_on_end = 1;
    uint8_t out[64];
    peer_send(&s, out, cframe(&s, out, 0x82, "ok", 2, 1));
    wait_got(&s, 2);
    peer_send(&s, out, cframe(&s, out, 0x82, "no", 2, 0));
    assert_true(tg_test_run_until(s.base, freed, &s, WAIT_MS));
    assert_true(s.error);
    assert_int_equal(s.err_errno, EPROTO);
    assert_int_equal(evbuffer_get_length(s.got), 2);
    assert_memory_equal(evbuffer_pullup(s.got, -1), "ok", 2);
    assert_true(expect_close_then_end(&s, 1002, NULL) > 0);
    srv_close(&s);
}

/* Each way a client can break the protocol: its close code, and how many bytes of the bad input
 * still arrive above (of a message that was fine until then). */
struct bad {
    const char *name;
    unsigned code;
    size_t delivered;
};

static size_t bad_input(struct srv *s, const char *name, uint8_t *out)
{
    static uint8_t zeros[1001];
    size_t o = 0;
    if (!strcmp(name, "text")) {
        o += cframe(s, out, 0x81, "hi", 2, 1);
    } else if (!strcmp(name, "too big in pieces")) { /* 400 + 400 + 400 > 1000 */
        o += cframe(s, out + o, 0x02, zeros, 400, 1);
        o += cframe(s, out + o, 0x00, zeros, 400, 1);
        o += cframe(s, out + o, 0x80, zeros, 400, 1);
    } else if (!strcmp(name, "too big at once")) {
        o += cframe(s, out, 0x82, zeros, 1001, 1);
    } else if (!strcmp(name, "rsv1")) {
        o += cframe(s, out, 0xC2, "x", 1, 1);
    } else if (!strcmp(name, "rsv2")) {
        o += cframe(s, out, 0xA2, "x", 1, 1);
    } else if (!strcmp(name, "rsv3")) {
        o += cframe(s, out, 0x92, "x", 1, 1);
    } else if (!strcmp(name, "unknown opcode")) {
        o += cframe(s, out, 0x83, "x", 1, 1);
    } else if (!strcmp(name, "unknown control opcode")) {
        o += cframe(s, out, 0x8B, "", 0, 1);
    } else if (!strcmp(name, "fragmented ping")) {
        o += cframe(s, out, 0x09, "", 0, 1);
    } else if (!strcmp(name, "oversized ping")) {
        o += cframe(s, out, 0x89, zeros, 126, 1);
    } else if (!strcmp(name, "orphan continuation")) {
        o += cframe(s, out, 0x80, "x", 1, 1);
    } else if (!strcmp(name, "message in message")) {
        o += cframe(s, out + o, 0x02, "a", 1, 1);
        o += cframe(s, out + o, 0x82, "b", 1, 1);
    } else if (!strcmp(name, "one-byte close")) {
        o += cframe(s, out, 0x88, "\x03", 1, 1);
    } else if (!strcmp(name, "unmasked ping")) {
        o += cframe(s, out, 0x89, "", 0, 0);
    } else if (!strcmp(name, "length top bit")) {
        static const uint8_t top[] = {0x82, 0xFF, 0x80, 0, 0, 0, 0, 0, 0, 1, 1, 2, 3, 4};
        memcpy(out, top, sizeof top);
        o = sizeof top;
    } else {
        fail_msg("unknown case %s", name);
    }
    return o;
}

/* Text -> 1003, a message over max_message (at once or over several frames) -> 1009, reserved
 * bits and every other protocol error -> 1002: each time the bufferevent above gets
 * BEV_EVENT_ERROR and, freed then, the filter's close frame carries the code and a reason. */
static void test_protocol_errors_close_codes(void **state)
{
    (void)state;
    static const struct bad bads[] = {
        {"text", 1003, 0},
        {"too big in pieces", 1009, 800},
        {"too big at once", 1009, 0},
        {"rsv1", 1002, 0},
        {"rsv2", 1002, 0},
        {"rsv3", 1002, 0},
        {"unknown opcode", 1002, 0},
        {"unknown control opcode", 1002, 0},
        {"fragmented ping", 1002, 0},
        {"oversized ping", 1002, 0},
        {"orphan continuation", 1002, 0},
        {"message in message", 1002, 1},
        {"one-byte close", 1002, 0},
        {"unmasked ping", 1002, 0},
        {"length top bit", 1002, 0},
    };
    uint8_t *out = malloc(4096);
    for (size_t i = 0; i < sizeof bads / sizeof bads[0]; i++) {
        const struct bad *b = &bads[i];
        struct srv s;
        srv_open(&s, 1000, 0);
        s.free_on_end = 1;
        peer_send(&s, out, cframe(&s, out, 0x82, "ok", 2, 1));
        wait_got(&s, 2);
        peer_send(&s, out, bad_input(&s, b->name, out));
        if (!tg_test_run_until(s.base, freed, &s, WAIT_MS) || !s.error || s.err_errno != EPROTO)
            fail_msg("%s: freed=%d error=%d errno=%d", b->name, s.ws == NULL, s.error, s.err_errno);
        if (evbuffer_get_length(s.got) != 2 + b->delivered)
            fail_msg("%s: %zu bytes delivered, want %zu", b->name, evbuffer_get_length(s.got), 2 + b->delivered);
        struct sframe f;
        next_frame(&s, &f);
        unsigned code = f.len >= 2 ? (unsigned)f.payload[0] << 8 | f.payload[1] : 0;
        if (f.op != 0x8 || code != b->code || f.len < 3 || f.len > 125)
            fail_msg("%s: frame op %d len %zu code %u, want a close frame with %u and a reason", b->name, f.op, f.len,
                     code, b->code);
        free(f.payload);
        assert_true(tg_test_run_until(s.base, peer_ended, &s, WAIT_MS));
        assert_int_equal(evbuffer_get_length(s.rx), 0);
        srv_close(&s);
    }
    free(out);
}

/* A client's close frame (1001) is answered with 1001, the bufferevent above sees its end
 * (BEV_EVENT_EOF, no error), data after the close is dropped, and freeing the filter then adds no
 * second close frame before the socket closes. */
static void test_client_close_echoed(void **state)
{
    (void)state;
    struct srv s;
    srv_open(&s, 1u << 20, 0);
    s.free_on_end = 1;
    uint8_t out[128];
    size_t o = cframe(&s, out, 0x82, "ab", 2, 1);
    o += cframe(&s, out + o, 0x88, "\x03\xe9" "going away", 12, 1);
    o += cframe(&s, out + o, 0x82, "zz", 2, 1);
    peer_send(&s, out, o);
    assert_true(tg_test_run_until(s.base, freed, &s, WAIT_MS));
    assert_true(s.eof);
    assert_false(s.error);
    assert_int_equal(evbuffer_get_length(s.got), 2);
    assert_memory_equal(evbuffer_pullup(s.got, -1), "ab", 2);
    expect_close_then_end(&s, 1001, NULL);
    srv_close(&s);
}

/* Freeing a healthy filter sends what was queued (written just before, never run through the
 * loop), then a close frame 1000 "connection closed", then the socket closes. */
static void test_free_sends_close_1000(void **state)
{
    (void)state;
    struct srv s;
    srv_open(&s, 1u << 20, 0);
    uint8_t out[64];
    peer_send(&s, out, cframe(&s, out, 0x82, "hi", 2, 1));
    wait_got(&s, 2);
    bufferevent_write(s.ws, "bye", 3);
    bufferevent_free(s.ws);
    s.ws = NULL;
    expect_frame(&s, 0x2, "bye", 3);
    expect_close_then_end(&s, 1000, "connection closed");
    srv_close(&s);
}

/* A PING processed in the same turn in which the owner frees the filter (the gateway closing the
 * connection for another reason): the flush it asked for still runs (the filter holds a reference
 * for it until then), so the PONG goes out before the close frame. The PING is put straight into
 * the socket bufferevent's input and run through the filter with a flush, so that the free comes
 * before the loop runs again. */
static void test_ping_then_free_in_one_turn(void **state)
{
    (void)state;
    struct srv s;
    srv_open(&s, 1u << 20, 0);
    uint8_t ping[32];
    size_t n = cframe(&s, ping, 0x89, "late", 4, 1);
    struct bufferevent *under = bufferevent_get_underlying(s.ws);
    struct evbuffer *in = bufferevent_get_input(under);
    evbuffer_unfreeze(in, 0); /* a socket bufferevent lets only itself add to its input */
    assert_int_equal(evbuffer_add(in, ping, n), 0);
    evbuffer_freeze(in, 0);
    bufferevent_flush(s.ws, EV_READ, BEV_NORMAL); /* the PING is handled: a flush is due */
    bufferevent_free(s.ws);
    s.ws = NULL;
    expect_frame(&s, 0xA, "late", 4);
    expect_close_then_end(&s, 1000, "connection closed");
    srv_close(&s);
}

/* The client reads everything; each frame it got in the meantime must be a flood PONG. Done when
 * nothing of ours waits anywhere. */
static int flood_read(void *arg)
{
    struct srv *s = arg;
    peer_pull(s);
    struct sframe f;
    while (take_frame(s, &f)) {
        assert_int_equal(f.op, 0xA);
        assert_int_equal(f.len, 125);
        assert_int_equal(f.payload[0], 'p');
        free(f.payload);
    }
    int unread = 0;
    return evbuffer_get_length(bufferevent_get_output(bufferevent_get_underlying(s->ws))) == 0 &&
           evbuffer_get_length(s->rx) == 0 && ioctl(s->peer, FIONREAD, &unread) == 0 && unread == 0;
}

/* A client that sends 8,000 PINGs and never reads, each PING in a read of its own so that each
 * owes a PONG (1 MB of them; PINGs that arrive together owe only the last one's): the socket
 * bufferevent's output fills to TG_WS_SERVER_STAGE_HIGH and stays under it plus one PONG; once the
 * client reads everything, its next PING ("last") gets the next PONG. */
static void test_ping_flood_bounded(void **state)
{
    (void)state;
    struct srv s;
    srv_open(&s, 1u << 20, 0);
    tg_ws_server_stats_reset_peaks();
    uint8_t pay[125], out[131];
    memset(pay, 'p', sizeof pay);
    struct bufferevent *sock = bufferevent_get_underlying(s.ws);
    size_t most = 0;
    for (int i = 0; i < 8000; i++) {
        peer_send(&s, out, cframe(&s, out, 0x89, pay, sizeof pay, 1));
        assert_true(tg_test_run_until(s.base, input_consumed, &s, WAIT_MS));
        size_t waiting = evbuffer_get_length(bufferevent_get_output(sock));
        if (waiting > most)
            most = waiting;
    }
    assert_false(s.error);
    assert_true(most <= TG_WS_SERVER_STAGE_HIGH + PONG_MAX);
    struct tg_ws_server_stats st;
    tg_ws_server_stats(&st);
    assert_true(st.staged_peak <= TG_WS_SERVER_STAGE_HIGH + PONG_MAX);
    assert_true(st.staged_peak >= TG_WS_SERVER_STAGE_HIGH); /* the flood did fill it */

    assert_true(tg_test_run_until(s.base, flood_read, &s, 10000));
    peer_send(&s, out, cframe(&s, out, 0x89, "last", 4, 1));
    expect_frame(&s, 0xA, "last", 4);
    srv_close(&s);
}

struct stats_want {
    unsigned long long open;
};

static int open_is(void *arg)
{
    struct tg_ws_server_stats st;
    tg_ws_server_stats(&st);
    return st.open == ((struct stats_want *)arg)->open;
}

/* tg_ws_server_stats(): open counts live filters (down again once a freed one's finalizer ran),
 * in_messages counts completed client messages (not one still open), out_messages/out_bytes what
 * was sent. */
static void test_stats(void **state)
{
    (void)state;
    struct tg_ws_server_stats st0, st;
    tg_ws_server_stats(&st0);
    struct srv a, b;
    srv_open(&a, 1u << 20, 0);
    tg_ws_server_stats(&st);
    assert_int_equal(st.open, st0.open + 1);
    srv_open(&b, 1u << 20, 0);
    tg_ws_server_stats(&st);
    assert_int_equal(st.open, st0.open + 2);

    uint8_t out[256];
    size_t o = cframe(&a, out, 0x82, "one", 3, 1);
    o += cframe(&a, out + o, 0x02, "tw", 2, 1);
    o += cframe(&a, out + o, 0x89, "", 0, 1);
    o += cframe(&a, out + o, 0x80, "o", 1, 1);
    o += cframe(&a, out + o, 0x82, "three", 5, 1);
    o += cframe(&a, out + o, 0x02, "open", 4, 1); /* not complete */
    peer_send(&a, out, o);
    wait_got(&a, 15);
    tg_ws_server_stats(&st);
    assert_int_equal(st.in_messages, st0.in_messages + 3);

    bufferevent_write(b.ws, "12345", 5);
    struct sframe f;
    next_frame(&b, &f);
    free(f.payload);
    tg_ws_server_stats(&st);
    assert_int_equal(st.out_messages, st0.out_messages + 1);
    assert_int_equal(st.out_bytes, st0.out_bytes + 5);

    bufferevent_free(a.ws);
    a.ws = NULL;
    struct stats_want w = {st0.open + 1};
    assert_true(tg_test_run_until(a.base, open_is, &w, WAIT_MS));
    bufferevent_free(b.ws);
    b.ws = NULL;
    w.open = st0.open;
    assert_true(tg_test_run_until(b.base, open_is, &w, WAIT_MS));
    srv_close(&a);
    srv_close(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_masked_fragments_in_order),
        cmocka_unit_test(test_writes_go_out_unmasked),
        cmocka_unit_test(test_unmasked_frame_closes_1002),
        cmocka_unit_test(test_protocol_errors_close_codes),
        cmocka_unit_test(test_client_close_echoed),
        cmocka_unit_test(test_free_sends_close_1000),
        cmocka_unit_test(test_ping_then_free_in_one_turn),
        cmocka_unit_test(test_ping_flood_bounded),
        cmocka_unit_test(test_stats),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
