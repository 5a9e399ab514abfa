/* gw_hostile.c: `gw_testclient hostile`, one misbehaving client (tests/integration/test_gw_soak.sh).
 *
 *   gw_testclient hostile KIND ADDR [--timeout-ms MS]
 *       Connects to ADDR (HOST:PORT or a UNIX path), sends what KIND says, then reads and throws
 *       away whatever the gateway answers until it closes the connection (EOF or reset). KIND:
 *         frame-garbage   an IPC frame of a valid length whose body does not decode
 *         frame-oversize  an IPC frame header announcing 1 MiB (over any --max-frame), then 4 KiB
 *         tls-garbage     a plain-text HTTP request to a TLS listener instead of a ClientHello
 *         http-garbage    512 bytes of binary noise to the HTTP port
 *         ws-bad-upgrade  a WebSocket upgrade to /traced with a key that is not base64, then noise
 *         ws-stall        the first lines of a WebSocket upgrade, then silence (cut at the
 *                         gateway's handshake deadline)
 *         http-huge       a GET with a 64 KiB header line
 *       Prints "closed after N ms, M bytes answered[: first line]" (exit 0) or "not closed" (1).
 *       The deadline (--timeout-ms, default 30 s, times $TG_TEST_TIMEOUT_SCALE) is only a safety
 *       net: the client waits for the close.
 */
#include "gw_hostile.h"

#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "tg_test_util.h"
#include "tracegate/addr.h"
#include "tracegate/clock.h"
#include "tracegate/frame.h"

struct payload {
    uint8_t *p;
    size_t len, cap;
};

static void put(struct payload *b, const void *p, size_t n)
{
    if (b->len + n > b->cap) {
        b->cap = (b->len + n) * 2;
        b->p = realloc(b->p, b->cap);
        if (!b->p)
            abort();
    }
    memcpy(b->p + b->len, p, n);
    b->len += n;
}

static void put_str(struct payload *b, const char *s) { put(b, s, strlen(s)); }

/* deterministic noise (a fixed LCG): the same bytes every run */
static void put_noise(struct payload *b, size_t n)
{
    uint32_t x = 0x9e3779b9u;
    for (size_t i = 0; i < n; i++) {
        x = x * 1103515245u + 12345u;
        uint8_t c = (uint8_t)(x >> 24);
        put(b, &c, 1);
    }
}

static int build(const char *kind, struct payload *b)
{
    if (strcmp(kind, "frame-garbage") == 0) {
        uint8_t hdr[4], body[32];
        memset(body, 0xff, sizeof body); /* a varint that never ends: no IPC frame decodes from it */
        tg_frame_put_header(hdr, sizeof body);
        put(b, hdr, 4);
        put(b, body, sizeof body);
    } else if (strcmp(kind, "frame-oversize") == 0) {
        uint8_t hdr[4];
        tg_frame_put_header(hdr, 1u << 20);
        put(b, hdr, 4);
        put_noise(b, 4096);
    } else if (strcmp(kind, "tls-garbage") == 0) {
        put_str(b, "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
    } else if (strcmp(kind, "http-garbage") == 0) {
        put_noise(b, 512);
    } else if (strcmp(kind, "ws-bad-upgrade") == 0) {
        put_str(b, "GET /traced HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"
                   "Sec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: tracegate\r\n"
                   "Sec-WebSocket-Key: ***not*base64***\r\n\r\n");
        put_noise(b, 256);
    } else if (strcmp(kind, "ws-stall") == 0) {
        put_str(b, "GET /traced HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n");
    } else if (strcmp(kind, "http-huge") == 0) {
        put_str(b, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Huge: ");
        for (int i = 0; i < 64; i++) {
            char k[1024];
            memset(k, 'a', sizeof k);
            put(b, k, sizeof k);
        }
        put_str(b, "\r\n\r\n");
    } else {
        return -1;
    }
    return 0;
}

int gw_hostile_main(const char *kind, const char *addr, int timeout_ms)
{
    struct payload b = {0};
    if (build(kind, &b) != 0) {
        fprintf(stderr, "gw_testclient: unknown hostile kind %s\n", kind);
        return 2;
    }
    struct tg_addr a;
    char err[256];
    if (tg_addr_parse(addr, &a, err, sizeof err) != 0) {
        fprintf(stderr, "gw_testclient: %s\n", err);
        free(b.p);
        return 2;
    }
    uint64_t limit = (uint64_t)tg_test_ms(timeout_ms);
    int fd = tg_addr_connect_wait(&a, (int)limit);
    if (fd < 0) {
        fprintf(stderr, "gw_testclient: cannot connect to %s: %s\n", addr, strerror(errno));
        free(b.p);
        return 2;
    }
    uint64_t start = tg_mono_ms();
    size_t sent = 0, answered = 0;
    char first[128] = "";
    size_t first_len = 0;
    int closed = 0, first_done = 0;
    while (!closed && tg_mono_ms() - start < limit) {
        struct pollfd p = {.fd = fd, .events = POLLIN | POLLRDHUP | (sent < b.len ? POLLOUT : 0)};
        int rc = poll(&p, 1, 100);
        if (rc < 0 && errno != EINTR)
            break;
        if (rc <= 0)
            continue;
        if (p.revents & POLLOUT) {
            ssize_t w = send(fd, b.p + sent, b.len - sent, MSG_DONTWAIT | MSG_NOSIGNAL);
            if (w > 0)
                sent += (size_t)w;
            else if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
                closed = 1; /* reset (or EPIPE) while we were still sending: closed on us */
        }
        if (p.revents & (POLLIN | POLLRDHUP | POLLHUP | POLLERR)) {
            char buf[4096];
            ssize_t r = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
            if (r > 0) {
                for (ssize_t i = 0; i < r && !first_done && first_len + 1 < sizeof first; i++) {
                    if (buf[i] == '\r' || buf[i] == '\n')
                        first_done = 1;
                    else
                        first[first_len++] = (buf[i] >= 0x20 && buf[i] < 0x7f) ? buf[i] : '.';
                }
                first[first_len] = '\0';
                answered += (size_t)r;
            } else if (r == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
                closed = 1;
            }
        }
    }
    close(fd);
    free(b.p);
    if (!closed) {
        printf("not closed (%zu of %zu bytes sent, %zu answered)\n", sent, b.len, answered);
        return 1;
    }
    printf("closed after %llu ms, %zu bytes answered%s%s\n", (unsigned long long)(tg_mono_ms() - start), answered,
           first_len ? ": " : "", first);
    return 0;
}
