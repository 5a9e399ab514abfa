/* fuzz_ws_client_filter.c: libFuzzer target for the WebSocket client filter
 * (src/net/ws_filter.h): a hostile server's bytes after the upgrade request.
 *
 * Input: byte 0 chooses whether a valid 101 answer (for the key used) goes first (bit 0) and how
 * the server's bytes are cut into writes (bits 1-7: chunk size 1..127, 0 meaning 1; larger for
 * an input that would take more than about 1024 writes); the rest is what the server sends, after
 * which it ends the stream.
 *
 * Oracles (trap on failure): the connection ends (end of stream or error) and never delivers more
 * bytes than the server sent; and what it delivers and whether it failed do not depend on how
 * the bytes were cut: the input is replayed whole and in chunks, and both runs must agree. */
#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
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

/* a fixed key, so the valid answer can be written down */
#define KEY "dGhlIHNhbXBsZSBub25jZQ=="
static const char k_answer[] = "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                               "Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n"
                               "Sec-WebSocket-Protocol: tracegate\r\n\r\n";

static void drain_peer(int fd)
{
    char sink[4096];
    while (recv(fd, sink, sizeof sink, MSG_DONTWAIT) > 0)
        ;
}

/* Feeds `in` (chunk 0 = whole) to a fresh client; fills r. */
static void run_once(const uint8_t *in, size_t len, size_t chunk, struct fws_sink *r)
{
    memset(r, 0, sizeof *r);
    r->got = evbuffer_new();
    int sv[2];
    CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
    struct event_base *base = event_base_new();
    struct bufferevent *under = bufferevent_socket_new(base, sv[0], BEV_OPT_CLOSE_ON_FREE);
    static const char req[] = "GET / HTTP/1.1\r\nSec-WebSocket-Key: " KEY "\r\n\r\n";
    struct tg_ws_client_filter_cfg cfg = {
        .request = req,
        .request_len = sizeof req - 1,
        .key = KEY,
        .subprotocol = "tracegate",
        .what = "ws://fuzz/traced",
        .max_message = 1u << 16,
        .out_message = 4096,
    };
    struct bufferevent *ws = tg_ws_client_filter_new(under, &cfg);
    CHECK(ws != NULL);
    bufferevent_setcb(ws, fws_on_read, NULL, fws_on_event, r);
    bufferevent_enable(ws, EV_READ | EV_WRITE);
    bufferevent_write(ws, "frame", 5); /* something to send once the handshake is through */
    fws_settle(base, sv[0]);
    for (size_t off = 0; off < len;) {
        size_t n = chunk && chunk < len - off ? chunk : len - off;
        ssize_t w = send(sv[1], in + off, n, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w < 0 && errno != EAGAIN)
            break; /* the client is gone (it failed and was not reading) */
        if (w > 0)
            off += (size_t)w;
        fws_settle(base, sv[0]);
        drain_peer(sv[1]);
    }
    shutdown(sv[1], SHUT_WR);
    for (int i = 0; i < 100000 && !r->eof && !r->error; i++) {
        event_base_loop(base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
        drain_peer(sv[1]);
    }
    bufferevent_free(ws);
    close(sv[1]);
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
    size_t alen = (data[0] & 1) ? sizeof k_answer - 1 : 0;
    size_t len = alen + size - 1;
    uint8_t *in = malloc(len ? len : 1);
    memcpy(in, k_answer, alen);
    memcpy(in + alen, data + 1, size - 1);

    struct fws_sink whole, cut;
    run_once(in, len, 0, &whole);
    run_once(in, len, fws_cut_chunk(len, chunk), &cut);
    fws_check_same(&whole, &cut, len);
    free(in);
    return 0;
}
