/* fuzz_ws_server_filter.c: libFuzzer target for the WebSocket server filter (src/net/ws_filter.h, server side): a hostile client's bytes after the upgrade.
 *
 * Input: byte 0 chooses max_message (bit 0: 100 bytes, else 64 KiB) and how the client's bytes are
 * cut into writes (bits 1-7: chunk size 1..127, 0 meaning 1; larger for an input that would take
 * more than about 1024 writes); the rest is what the client sends, after which it shuts down its
 * write side. The server writes "frame" above before any of it.
 *
 * Oracles (trap on failure): the connection ends above (end of stream or error) and never
 * delivers more bytes than the client sent; what the client gets back is well formed (final,
 * unmasked frames without reserved bits: our binary "frame" first, then only PONGs, then exactly
 * one close frame, then the end of the stream), a failure's close code is 1002, 1003 or 1009 and
 * every filter is gone after its run (stats: open); and what is delivered, whether it failed and
 * the close code do not depend on how the bytes were cut: the input is replayed whole and in
 * chunks, and both runs must agree. */
#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/util.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "net/ws_filter.h"
#include "tracegate/log.h"

#include "fuzz_check.h"
#include "fuzz_ws_sink.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct run {
    struct fws_sink io;
    int close_code; /* of our close frame; -1: it had no body */
};

/* The client reads what is there into rx; 1 once it read the end of the stream. */
static int pull_peer(int fd, struct evbuffer *rx)
{
    char buf[4096];
    for (;;) {
        ssize_t n = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
        if (n == 0)
            return 1;
        if (n < 0)
            return 0;
        evbuffer_add(rx, buf, (size_t)n);
    }
}

/* Checks the server's frames the client got and notes the close code. */
static void check_frames(struct evbuffer *rx, struct run *r)
{
    size_t len = evbuffer_get_length(rx);
    const uint8_t *p = evbuffer_pullup(rx, -1);
    size_t at = 0, frames = 0, closes = 0;
    while (at < len) {
        CHECK(closes == 0); /* nothing after the close frame */
        CHECK(len - at >= 2);
        CHECK((p[at] & 0xf0) == 0x80);   /* final, no reserved bits */
        CHECK((p[at + 1] & 0x80) == 0); /* unmasked */
        int op = p[at] & 0x0f;
        size_t n = p[at + 1] & 0x7f, hl = 2;
        CHECK(n < 126); /* our frames here are short: "frame", PONGs, the close */
        CHECK(len - at - hl >= n);
        const uint8_t *pay = p + at + hl;
        if (frames == 0) {
            CHECK(op == 0x2 && n == 5 && memcmp(pay, "frame", 5) == 0);
        } else if (op == 0x8) {
            CHECK(n != 1);
            r->close_code = n >= 2 ? (pay[0] << 8 | pay[1]) : -1;
            closes++;
        } else {
            CHECK(op == 0xA);
        }
        frames++;
        at += hl + n;
    }
    CHECK(closes == 1);
}

/* Feeds `in` (chunk 0 = whole) to a fresh server; fills r. */
static void run_once(const uint8_t *in, size_t len, size_t chunk, size_t max_message, struct run *r)
{
    memset(r, 0, sizeof *r);
    r->io.got = evbuffer_new();
    struct evbuffer *rx = evbuffer_new();
    int sv[2];
    CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
    CHECK(evutil_make_socket_nonblocking(sv[0]) == 0); /* as the gateway's sockets are */
    struct event_base *base = event_base_new();
    struct tg_ws_server_filter_cfg cfg = {
        .what = "WebSocket /traced from fuzz",
        .max_message = max_message,
        .out_message = 4096,
    };
    struct bufferevent *ws = tg_ws_server_filter_new(base, sv[0], &cfg);
    CHECK(ws != NULL);
    bufferevent_setcb(ws, fws_on_read, NULL, fws_on_event, &r->io);
    bufferevent_enable(ws, EV_READ | EV_WRITE);
    bufferevent_write(ws, "frame", 5);
    fws_settle(base, sv[0]);
    for (size_t off = 0; off < len;) {
        size_t n = chunk && chunk < len - off ? chunk : len - off;
        ssize_t w = send(sv[1], in + off, n, MSG_NOSIGNAL | MSG_DONTWAIT);
        CHECK(w >= 0 || errno == EAGAIN); /* the server's socket stays open until the filter is freed */
        if (w > 0)
            off += (size_t)w;
        fws_settle(base, sv[0]);
        pull_peer(sv[1], rx);
    }
    shutdown(sv[1], SHUT_WR);
    for (int i = 0; i < 100000 && !r->io.eof && !r->io.error; i++) {
        event_base_loop(base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
        pull_peer(sv[1], rx);
    }
    bufferevent_free(ws);
    /* the filter's finalizer sends the close frame and closes the socket */
    int ended = 0;
    for (int i = 0; i < 100000 && !ended; i++) {
        event_base_loop(base, EVLOOP_NONBLOCK);
        ended = pull_peer(sv[1], rx);
    }
    CHECK(ended);
    check_frames(rx, r);
    close(sv[1]);
    evbuffer_free(rx);
    event_base_free(base);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int quiet;
    if (!quiet) {
        tg_log_set_level(getenv("TG_FUZZ_VERBOSE") ? TG_LOG_DEBUG : TG_LOG_ERROR);
        quiet = 1;
    }
    if (size < 1)
        return 0;
    size_t chunk = data[0] >> 1;
    size_t max_message = (data[0] & 1) ? 100 : 1u << 16;
    const uint8_t *in = data + 1;
    size_t len = size - 1;
    struct tg_ws_server_stats st0, st;
    tg_ws_server_stats(&st0);

    struct run whole, cut;
    run_once(in, len, 0, max_message, &whole);
    run_once(in, len, fws_cut_chunk(len, chunk), max_message, &cut);
    CHECK(whole.close_code == cut.close_code);
    if (whole.io.error)
        CHECK(whole.close_code == 1002 || whole.close_code == 1003 || whole.close_code == 1009);
    fws_check_same(&whole.io, &cut.io, len);
    tg_ws_server_stats(&st);
    CHECK(st.open == st0.open);
    return 0;
}
