/* test_ws_rawclient.c: minimal blocking HTTP/WebSocket client for the WebSocket tests (see test_ws_rawclient.h). */
#include "test_ws_rawclient.h"
#include "tg_test_util.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define MAX_FD 4096

struct rbuf {
    uint8_t *data;
    size_t len, cap;
};
static struct rbuf g_ipc[MAX_FD]; /* IPC byte stream assembled from messages */

static int tcp_connect(int port);

int tws_connect(int port) { return tcp_connect(port); }

static int tcp_connect(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(fd);
        return -1;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
}

static int send_all(int fd, const void *p, size_t n)
{
    const uint8_t *b = p;
    while (n) {
        ssize_t w = send(fd, b, n, MSG_NOSIGNAL);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        b += w;
        n -= (size_t)w;
    }
    return 0;
}

/* timeout_ms is a safety net: scaled by tg_test_ms */
static int wait_in(int fd, int timeout_ms)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    timeout_ms = tg_test_ms(timeout_ms);
    int r;
    do
        r = poll(&p, 1, timeout_ms);
    while (r < 0 && errno == EINTR);
    return r > 0 ? 0 : -1;
}

static int recv_exact(int fd, void *p, size_t n, int timeout_ms)
{
    uint8_t *b = p;
    while (n) {
        if (wait_in(fd, timeout_ms) != 0)
            return -1;
        ssize_t r = recv(fd, b, n, 0);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        b += r;
        n -= (size_t)r;
    }
    return 0;
}

/* Reads an HTTP head (up to the blank line) byte by byte. */
static int read_head(int fd, char *resp, size_t cap)
{
    size_t n = 0;
    while (n + 1 < cap) {
        if (recv_exact(fd, resp + n, 1, 5000) != 0)
            break;
        n++;
        if (n >= 4 && !memcmp(resp + n - 4, "\r\n\r\n", 4))
            break;
    }
    resp[n] = '\0';
    int status = -1;
    if (sscanf(resp, "HTTP/1.%*d %d", &status) != 1)
        return -1;
    return status;
}

int tws_http(int port, const char *method, const char *path, const char *extra, char *resp, size_t cap)
{
    char host[64];
    snprintf(host, sizeof host, "127.0.0.1:%d", port);
    return tws_http_host(port, method, path, host, extra, resp, cap);
}

int tws_http_host(int port, const char *method, const char *path, const char *host, const char *extra, char *resp,
                  size_t cap)
{
    int fd = tcp_connect(port);
    if (fd < 0)
        return -1;
    char req[2048], h[300] = "";
    if (host)
        snprintf(h, sizeof h, "Host: %s\r\n", host);
    snprintf(req, sizeof req, "%s %s HTTP/1.1\r\n%sConnection: close\r\n%s\r\n", method, path, h,
             extra ? extra : "");
    if (send_all(fd, req, strlen(req)) != 0) {
        close(fd);
        return -1;
    }
    int status = read_head(fd, resp, cap);
    size_t n = strlen(resp);
    /* the body: until EOF (Connection: close) or Content-Length */
    long clen = -1;
    const char *cl = strcasestr(resp, "\ncontent-length:");
    if (cl)
        clen = strtol(cl + 16, NULL, 10);
    size_t body = 0;
    while (n + 1 < cap && (clen < 0 || (long)body < clen)) {
        if (wait_in(fd, 5000) != 0)
            break;
        ssize_t r = recv(fd, resp + n, cap - 1 - n, 0);
        if (r <= 0)
            break;
        n += (size_t)r;
        body += (size_t)r;
    }
    resp[n] = '\0';
    close(fd);
    return status;
}

int tws_open(int port, const char *path, const char *origin, const char *protocols, int *fd, char *resp,
             size_t cap)
{
    char host[64];
    snprintf(host, sizeof host, "127.0.0.1:%d", port);
    return tws_open_host(port, path, host, origin, protocols, fd, resp, cap);
}

static int open_with(int port, const char *path, const char *host, const char *origin, const char *protocols,
                     const void *early, size_t early_len, int *fd, char *resp, size_t cap)
{
    *fd = -1;
    int s = tcp_connect(port);
    if (s < 0)
        return -1;
    char req[2048], o[512] = "", p[512] = "", h[300] = "";
    if (origin)
        snprintf(o, sizeof o, "Origin: %s\r\n", origin);
    if (protocols)
        snprintf(p, sizeof p, "Sec-WebSocket-Protocol: %s\r\n", protocols);
    if (host)
        snprintf(h, sizeof h, "Host: %s\r\n", host);
    snprintf(req, sizeof req,
             "GET %s HTTP/1.1\r\n%sUpgrade: websocket\r\nConnection: Upgrade\r\n"
             "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n%s%s\r\n",
             path, h, o, p);
    size_t rl = strlen(req);
    if (early_len && rl + early_len <= sizeof req) { /* one send: the server reads them together */
        memcpy(req + rl, early, early_len);
        rl += early_len;
    }
    if (send_all(s, req, rl) != 0) {
        close(s);
        return -1;
    }
    int status = read_head(s, resp, cap);
    if (status == 101) {
        *fd = s;
        if (s < MAX_FD)
            g_ipc[s].len = 0;
    } else {
        close(s);
    }
    return status;
}

int tws_open_host(int port, const char *path, const char *host, const char *origin, const char *protocols, int *fd,
                  char *resp, size_t cap)
{
    return open_with(port, path, host, origin, protocols, NULL, 0, fd, resp, cap);
}

int tws_open_early(int port, const char *path, const void *early, size_t early_len, int *fd, char *resp, size_t cap)
{
    char host[64];
    snprintf(host, sizeof host, "127.0.0.1:%d", port);
    return open_with(port, path, host, NULL, NULL, early, early_len, fd, resp, cap);
}

int tws_send_frame(int fd, int opcode, int fin, const void *data, size_t len)
{
    uint8_t h[14];
    size_t hl = tg_test_ws_header(h, (uint8_t)((fin ? 0x80 : 0) | (opcode & 15)), 1, len);
    static const uint8_t mask[4] = {0x12, 0x34, 0x56, 0x78};
    memcpy(h + hl, mask, 4);
    hl += 4;
    uint8_t *m = malloc(hl + len + 1);
    if (!m)
        return -1;
    memcpy(m, h, hl);
    const uint8_t *d = data;
    for (size_t i = 0; i < len; i++)
        m[hl + i] = d[i] ^ mask[i & 3];
    int r = send_all(fd, m, hl + len);
    free(m);
    return r;
}

int tws_send(int fd, int opcode, const void *data, size_t len) { return tws_send_frame(fd, opcode, 1, data, len); }

int tws_send_ipc(int fd, const void *body, size_t len)
{
    uint8_t *m = malloc(len + 4);
    if (!m)
        return -1;
    m[0] = (uint8_t)len;
    m[1] = (uint8_t)(len >> 8);
    m[2] = (uint8_t)(len >> 16);
    m[3] = (uint8_t)(len >> 24);
    memcpy(m + 4, body, len);
    int r = tws_send(fd, TWS_BINARY, m, len + 4);
    free(m);
    return r;
}

int tws_recv(int fd, uint8_t **payload, size_t *len, int timeout_ms)
{
    *payload = NULL;
    *len = 0;
    uint8_t h[2];
    if (recv_exact(fd, h, 2, timeout_ms) != 0)
        return -1;
    uint64_t n = h[1] & 0x7f;
    if (n == 126) {
        uint8_t e[2];
        if (recv_exact(fd, e, 2, timeout_ms) != 0)
            return -1;
        n = (uint64_t)e[0] << 8 | e[1];
    } else if (n == 127) {
        uint8_t e[8];
        if (recv_exact(fd, e, 8, timeout_ms) != 0)
            return -1;
        n = 0;
        for (int i = 0; i < 8; i++)
            n = n << 8 | e[i];
    }
    if (h[1] & 0x80) /* servers never mask */
        return -1;
    uint8_t *p = malloc(n + 1);
    if (!p)
        return -1;
    if (recv_exact(fd, p, n, timeout_ms) != 0) {
        free(p);
        return -1;
    }
    *payload = p;
    *len = n;
    return h[0] & 15;
}

int tws_recv_ipc(int fd, uint8_t **body, size_t *len, int timeout_ms)
{
    if (fd < 0 || fd >= MAX_FD)
        return -1;
    struct rbuf *b = &g_ipc[fd];
    for (;;) {
        if (b->len >= 4) {
            size_t fl = (size_t)b->data[0] | (size_t)b->data[1] << 8 | (size_t)b->data[2] << 16 |
                        (size_t)b->data[3] << 24;
            if (b->len >= fl + 4) {
                *body = malloc(fl + 1);
                memcpy(*body, b->data + 4, fl);
                *len = fl;
                memmove(b->data, b->data + 4 + fl, b->len - 4 - fl);
                b->len -= 4 + fl;
                return 0;
            }
        }
        uint8_t *p;
        size_t n;
        int op = tws_recv(fd, &p, &n, timeout_ms);
        if (op < 0)
            return -1;
        if (op != TWS_BINARY && op != TWS_CONT) {
            free(p);
            if (op == TWS_PING)
                continue;
            return -1;
        }
        if (b->len + n > b->cap) {
            size_t cap = b->cap ? b->cap : 65536;
            while (cap < b->len + n)
                cap *= 2;
            b->data = realloc(b->data, cap);
            b->cap = cap;
        }
        memcpy(b->data + b->len, p, n);
        b->len += n;
        free(p);
    }
}

int tws_close_code(const uint8_t *payload, size_t len)
{
    if (len < 2)
        return -1;
    return payload[0] << 8 | payload[1];
}

void tws_close(int fd)
{
    if (fd < 0)
        return;
    if (fd < MAX_FD) {
        free(g_ipc[fd].data);
        memset(&g_ipc[fd], 0, sizeof g_ipc[fd]);
    }
    close(fd);
}
