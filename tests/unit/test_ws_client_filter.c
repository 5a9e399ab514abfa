/* test_ws_client_filter.c: the WebSocket client filter (net/ws_filter.h) against a scripted
 * server on the other end of a socketpair: the handshake dribbled byte by byte, fragmented
 * messages with a PING in the middle, every length encoding, close answered, what it sends masked
 * and cut into messages, a PING flood from a server that never reads kept bounded, and each way a
 * server can break the protocol failing the connection. */
#include "config.h"

#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <poll.h>
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

#define OUT_MESSAGE 4096u

struct client {
    struct event_base *base;
    struct bufferevent *ws; /* the filter */
    int srv;                /* the server's end */
    char key[TG_WS_KEY_LEN + 1];
    struct evbuffer *got;   /* bytes the client delivered */
    int eof, error;
    uint8_t req[8192];      /* what the server has read */
    size_t req_len;
};

static void c_read(struct bufferevent *bev, void *arg)
{
    struct client *c = arg;
    evbuffer_add_buffer(c->got, bufferevent_get_input(bev));
}

static void c_event(struct bufferevent *bev, short what, void *arg)
{
    (void)bev;
    struct client *c = arg;
    if (what & BEV_EVENT_EOF)
        c->eof = 1;
    if (what & BEV_EVENT_ERROR)
        c->error = 1;
}

static void client_open(struct client *c, size_t max_message)
{
    memset(c, 0, sizeof *c);
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    c->base = event_base_new();
    c->srv = sv[1];
    c->got = evbuffer_new();
    struct bufferevent *under = bufferevent_socket_new(c->base, sv[0], BEV_OPT_CLOSE_ON_FREE);
    assert_int_equal(tg_ws_client_key(c->key), 0);
    assert_int_equal(strlen(c->key), TG_WS_KEY_LEN);
    char req[256];
    int n = snprintf(req, sizeof req, "GET /traced HTTP/1.1\r\nSec-WebSocket-Key: %s\r\n\r\n", c->key);
    struct tg_ws_client_filter_cfg cfg = {
        .request = req,
        .request_len = (size_t)n,
        .key = c->key,
        .subprotocol = "tracegate",
        .what = "ws://test/traced",
        .max_message = max_message,
        .out_message = OUT_MESSAGE,
    };
    c->ws = tg_ws_client_filter_new(under, &cfg);
    assert_non_null(c->ws);
    bufferevent_setcb(c->ws, c_read, NULL, c_event, c);
    bufferevent_enable(c->ws, EV_READ | EV_WRITE);
}

static void client_close(struct client *c)
{
    bufferevent_free(c->ws);
    close(c->srv);
    evbuffer_free(c->got);
    event_base_free(c->base);
}

/* ---- the server's end ---- */

static void srv_send(struct client *c, const void *data, size_t len)
{
    const uint8_t *p = data;
    while (len) {
        ssize_t n = send(c->srv, p, len, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            event_base_loop(c->base, EVLOOP_ONCE | EVLOOP_NONBLOCK); /* let the client read */
            continue;
        }
        assert_true(n > 0);
        p += n;
        len -= (size_t)n;
    }
}

/* Reads what is there (non-blocking) into req. */
static void srv_pull(struct client *c)
{
    for (;;) {
        ssize_t n = recv(c->srv, c->req + c->req_len, sizeof c->req - c->req_len, MSG_DONTWAIT);
        if (n <= 0)
            return;
        c->req_len += (size_t)n;
    }
}

static int request_in(void *arg)
{
    struct client *c = arg;
    srv_pull(c);
    return memmem(c->req, c->req_len, "\r\n\r\n", 4) != NULL;
}

/* Waits for the request, checks it is the one given, and removes it from req. */
static void srv_take_request(struct client *c)
{
    assert_true(tg_test_run_until(c->base, request_in, c, 5000));
    uint8_t *end = memmem(c->req, c->req_len, "\r\n\r\n", 4);
    size_t n = (size_t)(end - c->req) + 4;
    assert_non_null(memmem(c->req, n, c->key, strlen(c->key)));
    memmove(c->req, c->req + n, c->req_len - n);
    c->req_len -= n;
}

static size_t answer(char *buf, size_t cap, const char *accept, const char *extra)
{
    int n = snprintf(buf, cap,
                     "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: keep-alive, Upgrade\r\n"
                     "Sec-WebSocket-Accept: %s\r\nSec-WebSocket-Protocol: tracegate\r\n%s\r\n",
                     accept, extra ? extra : "");
    return (size_t)n;
}

static void srv_accept(struct client *c)
{
    srv_take_request(c);
    char acc[TG_WS_ACCEPT_LEN + 1], buf[512];
    tg_ws_accept_for(c->key, acc);
    srv_send(c, buf, answer(buf, sizeof buf, acc, NULL));
}

/* A server frame (unmasked unless `mask`). */
static size_t frame(uint8_t *out, int fin, int opcode, const void *payload, size_t len, int mask)
{
    size_t h = tg_test_ws_header(out, (uint8_t)((fin ? 0x80 : 0) | opcode), mask, len);
    if (mask) {
        memset(out + h, 0, 4);
        h += 4;
    }
    memcpy(out + h, payload, len);
    return h + len;
}

/* One client frame from req: masked, FIN set. Returns its opcode and payload (unmasked), or -1 if
 * req does not hold a whole frame. */
static int client_frame(struct client *c, uint8_t *payload, size_t *len)
{
    if (c->req_len < 2)
        return -1;
    const uint8_t *p = c->req;
    assert_true(p[0] & 0x80);        /* FIN: the client sends whole messages */
    assert_int_equal(p[0] & 0x70, 0);
    assert_true(p[1] & 0x80);        /* masked */
    size_t n = p[1] & 0x7f, h = 2;
    if (n == 126) {
        if (c->req_len < 4)
            return -1;
        n = (size_t)p[2] << 8 | p[3];
        h = 4;
        assert_true(n >= 126);       /* the shortest encoding */
    } else if (n == 127) {
        if (c->req_len < 10)
            return -1;
        n = 0;
        for (int i = 2; i < 10; i++)
            n = n << 8 | p[i];
        h = 10;
        assert_true(n > 0xffff);
    }
    if (c->req_len < h + 4 + n)
        return -1;
    const uint8_t *m = p + h;
    for (size_t i = 0; i < n; i++)
        payload[i] = p[h + 4 + i] ^ m[i & 3];
    *len = n;
    int op = p[0] & 0x0f;
    size_t used = h + 4 + n;
    memmove(c->req, c->req + used, c->req_len - used);
    c->req_len -= used;
    return op;
}

struct want {
    struct client *c;
    size_t bytes;
};

static int got_bytes(void *arg)
{
    struct want *w = arg;
    return evbuffer_get_length(w->c->got) >= w->bytes || w->c->error || w->c->eof;
}

static int client_failed(void *arg) { return ((struct client *)arg)->error || ((struct client *)arg)->eof; }

static int srv_has(void *arg)
{
    struct want *w = arg;
    srv_pull(w->c);
    return w->c->req_len >= w->bytes;
}

/* ---- tests ---- */

static void test_key_and_accept(void **state)
{
    (void)state;
    /* RFC 6455 section 1.3's example */
    char acc[TG_WS_ACCEPT_LEN + 1];
    tg_ws_accept_for("dGhlIHNhbXBsZSBub25jZQ==", acc);
    assert_string_equal(acc, "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
    char a[TG_WS_KEY_LEN + 1], b[TG_WS_KEY_LEN + 1];
    assert_int_equal(tg_ws_client_key(a), 0);
    assert_int_equal(tg_ws_client_key(b), 0);
    assert_string_not_equal(a, b);
}

/* The answer arrives a byte at a time; what was written before it waits and then goes out as a
 * masked message; a fragmented message with a PING (and an empty continuation) inside arrives as
 * one byte stream; the PING gets its PONG. */
static void test_handshake_dribbled_and_fragments(void **state)
{
    (void)state;
    struct client c;
    client_open(&c, 1u << 20);
    bufferevent_write(c.ws, "hello", 5); /* before the answer */
    srv_take_request(&c);
    char acc[TG_WS_ACCEPT_LEN + 1], buf[512];
    tg_ws_accept_for(c.key, acc);
    size_t n = answer(buf, sizeof buf, acc, "Server: test\r\n");
    for (size_t i = 0; i < n; i++) {
        srv_send(&c, buf + i, 1);
        event_base_loop(c.base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
    }
    uint8_t f[256], out[512];
    size_t o = 0;
    o += frame(out + o, 0, 0x2, "abc", 3, 0);
    o += frame(out + o, 1, 0x9, "p1", 2, 0);
    o += frame(out + o, 0, 0x0, "", 0, 0);
    o += frame(out + o, 1, 0x0, "def", 3, 0);
    o += frame(out + o, 1, 0xA, "unsolicited pong", 16, 0);
    o += frame(out + o, 1, 0x2, "g", 1, 0);
    srv_send(&c, out, o);
    struct want w = {&c, 7};
    assert_true(tg_test_run_until(c.base, got_bytes, &w, 5000));
    assert_false(c.error);
    char got[16] = "";
    evbuffer_remove(c.got, got, sizeof got - 1);
    assert_string_equal(got, "abcdefg");

    /* the server got "hello" as a binary message, then the PONG */
    size_t len;
    int seen_hello = 0, seen_pong = 0;
    struct want s = {&c, 0};
    while (!(seen_hello && seen_pong)) {
        s.bytes = c.req_len + 1;
        int op = client_frame(&c, f, &len);
        if (op < 0) {
            assert_true(tg_test_run_until(c.base, srv_has, &s, 5000));
            continue;
        }
        if (op == 0x2) {
            assert_int_equal(len, 5);
            assert_memory_equal(f, "hello", 5);
            seen_hello = 1;
        } else {
            assert_int_equal(op, 0xA);
            assert_int_equal(len, 2);
            assert_memory_equal(f, "p1", 2);
            seen_pong = 1;
        }
    }
    client_close(&c);
}

/* 7-, 16- and 64-bit lengths; a big write goes out as masked messages of at most out_message. */
static void test_lengths_and_big_writes(void **state)
{
    (void)state;
    struct client c;
    client_open(&c, 1u << 20);
    srv_accept(&c);
    size_t sizes[] = {125, 126, 300, 65535, 65536, 200000};
    size_t total = 0;
    uint8_t *payload = malloc(200000), *fr = malloc(200016);
    for (size_t i = 0; i < 200000; i++)
        payload[i] = (uint8_t)(i * 7 + 3);
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        srv_send(&c, fr, frame(fr, 1, 0x2, payload, sizes[k], 0));
        total += sizes[k];
    }
    struct want w = {&c, total};
    assert_true(tg_test_run_until(c.base, got_bytes, &w, 10000));
    assert_false(c.error);
    assert_int_equal(evbuffer_get_length(c.got), total);
    uint8_t *all = evbuffer_pullup(c.got, -1);
    size_t at = 0;
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        assert_memory_equal(all + at, payload, sizes[k]);
        at += sizes[k];
    }

    /* client -> server: 150,000 bytes become messages of at most OUT_MESSAGE, masked */
    bufferevent_write(c.ws, payload, 150000);
    size_t back = 0, len;
    uint8_t *f = malloc(OUT_MESSAGE + 16);
    struct want s = {&c, 0};
    while (back < 150000) {
        s.bytes = c.req_len + 1;
        if (c.req_len < 2 || client_frame(&c, f, &len) < 0) {
            assert_true(tg_test_run_until(c.base, srv_has, &s, 5000));
            continue;
        }
        assert_true(len <= OUT_MESSAGE && len > 0);
        assert_memory_equal(f, payload + back, len);
        back += len;
    }
    assert_int_equal(back, 150000);
    free(f);
    free(payload);
    free(fr);
    client_close(&c);
}

/* A close frame is answered with the same code; data after it is dropped; the server's end of the
 * stream is the client's end. */
static void test_close_answered(void **state)
{
    (void)state;
    struct client c;
    client_open(&c, 1u << 20);
    srv_accept(&c);
    uint8_t out[64];
    size_t o = frame(out, 1, 0x2, "ab", 2, 0);
    o += frame(out + o, 1, 0x8, "\x03\xe9" "bye", 5, 0); /* 1001 */
    o += frame(out + o, 1, 0x2, "zz", 2, 0);
    srv_send(&c, out, o);
    struct want s = {&c, 8};
    assert_true(tg_test_run_until(c.base, srv_has, &s, 5000));
    uint8_t f[16];
    size_t len;
    assert_int_equal(client_frame(&c, f, &len), 0x8);
    assert_int_equal(len, 2);
    assert_memory_equal(f, "\x03\xe9", 2);
    bufferevent_write(c.ws, "late", 4); /* after the close: never sent */
    shutdown(c.srv, SHUT_WR);
    assert_true(tg_test_run_until(c.base, client_failed, &c, 5000));
    assert_true(c.eof);
    assert_false(c.error);
    char got[8] = "";
    evbuffer_remove(c.got, got, sizeof got - 1);
    assert_string_equal(got, "ab");
    srv_pull(&c);
    assert_int_equal(c.req_len, 0);
    client_close(&c);
}

static int input_consumed(void *arg)
{
    struct client *c = arg;
    struct bufferevent *under = bufferevent_get_underlying(c->ws);
    int unread = 0;
    return ioctl(bufferevent_getfd(under), FIONREAD, &unread) == 0 && unread == 0 &&
           evbuffer_get_length(bufferevent_get_input(under)) == 0;
}

/* The server reads and drops everything the client sent; done when nothing more waits. */
static int srv_drained(void *arg)
{
    struct client *c = arg;
    uint8_t junk[65536];
    while (recv(c->srv, junk, sizeof junk, MSG_DONTWAIT) > 0) {
    }
    return evbuffer_get_length(bufferevent_get_output(bufferevent_get_underlying(c->ws))) == 0;
}

/* A server that sends PINGs and never reads: the client does not keep a PONG for each (here 5 MB
 * of them) once 64 KiB of its output wait; once the server reads, a PING is answered again. */
static void test_ping_flood_bounded(void **state)
{
    (void)state;
    struct client c;
    client_open(&c, 1u << 20);
    srv_accept(&c);
    uint8_t pay[125], out[16 * 131];
    memset(pay, 'p', sizeof pay);
    size_t o = 0;
    for (int i = 0; i < 16; i++)
        o += frame(out + o, 1, 0x9, pay, sizeof pay, 0);
    for (int k = 0; k < 2500; k++)
        srv_send(&c, out, o); /* 40,000 PINGs */
    assert_true(tg_test_run_until(c.base, input_consumed, &c, 10000));
    size_t waiting = evbuffer_get_length(bufferevent_get_output(bufferevent_get_underlying(c.ws)));
    assert_true(waiting < 65536 + 2 * 131);
    /* the server reads it all: the next PING is answered */
    assert_true(tg_test_run_until(c.base, srv_drained, &c, 10000));
    o = frame(out, 1, 0x9, "last", 4, 0);
    srv_send(&c, out, o);
    struct want w = {&c, 10};
    assert_true(tg_test_run_until(c.base, srv_has, &w, 5000));
    uint8_t f[16];
    size_t len;
    assert_int_equal(client_frame(&c, f, &len), 0xA);
    assert_int_equal(len, 4);
    assert_memory_equal(f, "last", 4);
    client_close(&c);
}

/* Flushing with BEV_FINISHED ends with a close frame (1000). */
static void test_finished_sends_close(void **state)
{
    (void)state;
    struct client c;
    client_open(&c, 1u << 20);
    srv_accept(&c);
    uint8_t hi[8];
    srv_send(&c, hi, frame(hi, 1, 0x2, "h", 1, 0));
    struct want w = {&c, 1};
    assert_true(tg_test_run_until(c.base, got_bytes, &w, 5000)); /* the handshake is done */
    bufferevent_write(c.ws, "x", 1);
    bufferevent_flush(c.ws, EV_WRITE, BEV_FINISHED);
    w.bytes = 7 + 8;
    assert_true(tg_test_run_until(c.base, srv_has, &w, 5000));
    uint8_t f[8];
    size_t len;
    assert_int_equal(client_frame(&c, f, &len), 0x2);
    assert_int_equal(client_frame(&c, f, &len), 0x8);
    assert_int_equal(len, 2);
    assert_memory_equal(f, "\x03\xe8", 2);
    client_close(&c);
}

/* Each way a server may break the upgrade or the framing fails the connection, with a reason
 * logged; bytes before the bad frame were delivered, nothing after. */
struct bad {
    const char *name;
    const char *answer; /* NULL: the right one; "ACCEPT" in it is replaced by the right accept */
    uint8_t frame[32];
    size_t frame_len;
    const char *logged;
};

static void expect_failure(const struct bad *b, size_t max_message)
{
    struct client c;
    client_open(&c, max_message);
    assert_int_equal(tg_test_stderr_begin(), 0);
    srv_take_request(&c);
    char acc[TG_WS_ACCEPT_LEN + 1], buf[20000];
    tg_ws_accept_for(c.key, acc);
    size_t n;
    if (!strcmp(b->name, "nul")) {
        static const char nul[] = "HTTP/1.1 101 OK\r\nX: a\0b\r\n\r\n";
        srv_send(&c, nul, sizeof nul - 1);
        n = 0;
    } else if (b->answer) {
        const char *at = strstr(b->answer, "ACCEPT");
        if (at)
            n = (size_t)snprintf(buf, sizeof buf, "%.*s%s%s", (int)(at - b->answer), b->answer, acc, at + 6);
        else
            n = (size_t)snprintf(buf, sizeof buf, "%s", b->answer);
    } else {
        n = answer(buf, sizeof buf, acc, NULL);
    }
    if (n)
        srv_send(&c, buf, n);
    uint8_t ok[8];
    size_t okl = frame(ok, 1, 0x2, "ok", 2, 0);
    int answered = !b->answer && strcmp(b->name, "nul");
    if (answered)
        srv_send(&c, ok, okl);
    if (!strcmp(b->name, "oversized in pieces")) { /* 500 bytes, then the header above says 500 more */
        static const uint8_t zeros[500];
        static uint8_t piece[520];
        srv_send(&c, piece, frame(piece, 0, 0x2, zeros, sizeof zeros, 0));
    }
    if (b->frame_len)
        srv_send(&c, b->frame, b->frame_len);
    int failed = tg_test_run_until(c.base, client_failed, &c, 5000);
    char *log = tg_test_stderr_end();
    if (!failed || !c.error || !strstr(log, b->logged))
        fail_msg("%s: failed=%d error=%d log: %s", b->name, failed, c.error, log);
    free(log);
    if (answered) { /* what came before the bad frame was delivered */
        char got[8] = "";
        evbuffer_remove(c.got, got, 2);
        assert_string_equal(got, "ok");
    }
    client_close(&c);
}

static void test_broken_servers(void **state)
{
    (void)state;
    static const struct bad bads[] = {
        {"status", "HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n", {0}, 0, "HTTP 403 Forbidden"},
        {"not http", "SSH-2.0-OpenSSH\r\n\r\n", {0}, 0, "did not answer with HTTP"},
        {"nul", NULL, {0}, 0, "NUL byte"}, /* answer built in expect_failure */
        {"accept", "HTTP/1.1 101 OK\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: "
                   "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\nSec-WebSocket-Protocol: tracegate\r\n\r\n",
         {0}, 0, "does not answer our key"},
        {"no upgrade", "HTTP/1.1 101 OK\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: ACCEPT\r\n"
                       "Sec-WebSocket-Protocol: tracegate\r\n\r\n",
         {0}, 0, "did not upgrade"},
        {"subprotocol", "HTTP/1.1 101 OK\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: "
                        "ACCEPT\r\nSec-WebSocket-Protocol: other\r\n\r\n",
         {0}, 0, "did not select the tracegate subprotocol"},
        {"extension", "HTTP/1.1 101 OK\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: "
                      "ACCEPT\r\nSec-WebSocket-Protocol: tracegate\r\nSec-WebSocket-Extensions: permessage-deflate\r\n\r\n",
         {0}, 0, "extension"},
        {"text", NULL, {0x81, 0x01, 'x'}, 3, "text message"},
        {"masked", NULL, {0x82, 0x81, 0, 0, 0, 0, 'x'}, 7, "masked frame"},
        {"rsv", NULL, {0xC2, 0x01, 'x'}, 3, "reserved bits"},
        {"opcode", NULL, {0x83, 0x01, 'x'}, 3, "unknown opcode"},
        {"control opcode", NULL, {0x8B, 0x00}, 2, "unknown opcode"},
        {"fragmented ping", NULL, {0x09, 0x00}, 2, "fragmented or oversized control"},
        {"big ping", NULL, {0x89, 0x7E, 0x00, 0x80}, 4, "fragmented or oversized control"},
        {"orphan continuation", NULL, {0x80, 0x01, 'x'}, 3, "continuation with no message"},
        {"message in message", NULL, {0x02, 0x01, 'x', 0x82, 0x01, 'y'}, 6, "a new message inside another"},
        {"top bit", NULL, {0x82, 0x7F, 0x80, 0, 0, 0, 0, 0, 0, 1}, 10, "top bit"},
        {"oversized", NULL, {0x82, 0x7E, 0x03, 0xE9}, 4, "a message over 1000 bytes"},
        {"oversized in pieces", NULL, {0x80, 0x7E, 0x01, 0xF5}, 4, "a message over 1000 bytes"}, /* after 500 + 501 */
        {"one-byte close", NULL, {0x88, 0x01, 0x03}, 3, "one-byte body"},
    };
    for (size_t i = 0; i < sizeof bads / sizeof bads[0]; i++)
        expect_failure(&bads[i], 1000);

    /* an answer that never ends its headers */
    char *junk = malloc(17000);
    memset(junk, 'a', 17000);
    memcpy(junk, "HTTP/1.1 101 OK\r\nX: ", 20);
    junk[16999] = '\0';
    struct bad longhead = {"long head", junk, {0}, 0, "too long"};
    expect_failure(&longhead, 1000);
    free(junk);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_key_and_accept),
        cmocka_unit_test(test_handshake_dribbled_and_fragments),
        cmocka_unit_test(test_lengths_and_big_writes),
        cmocka_unit_test(test_close_answered),
        cmocka_unit_test(test_ping_flood_bounded),
        cmocka_unit_test(test_finished_sends_close),
        cmocka_unit_test(test_broken_servers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
