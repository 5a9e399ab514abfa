/* gw_burst.c: `gw_testclient burst`, a burst of connections at once (tests/integration/test_gw_burst.sh).
 *
 *   gw_testclient burst ADDR --count N [--method M] [--timeout-ms MS]
 *       Opens N non-blocking connects to ADDR (HOST:PORT or a UNIX path) back to back, as fast as
 *       it can, before looking at any of them; then, on each, as soon as it is connected: bind
 *       ConsumerPort, and once bound call M (default QueryCapabilities) with empty arguments.
 *       Every connection is held open until all are settled, so the gateway sees all N at once.
 *       Prints "ok=A refused=B connect_failed=C bind_refused=D timeout=E": ok = the call was
 *       answered successfully; refused = the gateway closed (or reset) the connection before
 *       answering the bind; connect_failed = the connect itself failed (a full UNIX backlog
 *       gives EAGAIN: lost); bind_refused = a BindServiceReply that says no, or a failed call.
 *       Exit 0 if all N are ok. The deadline (--timeout-ms, default 60 s, times
 *       $TG_TEST_TIMEOUT_SCALE) is only a safety net: the client waits for events.
 */
#include "gw_burst.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "tg_test_util.h"
#include "tracegate/addr.h"
#include "tracegate/clock.h"
#include "tracegate/frame.h"
#include "tracegate/ipc_wire.h"

enum st { ST_CONNECTING, ST_BINDING, ST_CALLING, ST_OK, ST_REFUSED, ST_CONNECT_FAILED, ST_BIND_REFUSED };

struct bconn {
    int fd;
    enum st st;
    uint8_t buf[8192];
    size_t len;
};

struct bind_ctx {
    const char *want;
    uint32_t id;
};

static void find_method(void *arg, uint32_t id, const char *name, size_t nl)
{
    struct bind_ctx *b = arg;
    if (strlen(b->want) == nl && memcmp(b->want, name, nl) == 0)
        b->id = id;
}

static int send_all(int fd, const uint8_t *p, size_t n)
{
    while (n) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            struct pollfd pfd = {fd, POLLOUT, 0};
            poll(&pfd, 1, 1000); /* a few hundred bytes to a fresh socket: never really waits */
            continue;
        }
        if (w <= 0)
            return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

static int send_frame(int fd, const uint8_t *body, size_t len)
{
    uint8_t f[512];
    if (len + TG_FRAME_HEADER_SIZE > sizeof f)
        return -1;
    tg_frame_put_header(f, (uint32_t)len);
    memcpy(f + TG_FRAME_HEADER_SIZE, body, len);
    return send_all(fd, f, len + TG_FRAME_HEADER_SIZE);
}

/* A whole frame came in: advance the connection's state. */
static void on_frame(struct bconn *c, const uint8_t *body, size_t len, const char *method)
{
    struct tg_frame_info fi;
    if (tg_frame_scan(body, len, &fi) != 0) {
        c->st = ST_BIND_REFUSED;
        return;
    }
    if (c->st == ST_BINDING) {
        struct bind_ctx b = {method, 0};
        int ok = 0;
        uint32_t sid = 0;
        if (fi.msg != TG_MSG_BIND_SERVICE_REPLY ||
            tg_ipc_parse_bind_reply(fi.msg_data, fi.msg_len, &ok, &sid, find_method, &b) != 0 || !ok || !b.id) {
            c->st = ST_BIND_REFUSED;
            return;
        }
        uint8_t inv[64];
        size_t il = tg_ipc_encode_invoke(inv, sizeof inv, 2, sid, b.id, NULL, 0, 0);
        c->st = il && send_frame(c->fd, inv, il) == 0 ? ST_CALLING : ST_REFUSED;
        return;
    }
    if (c->st == ST_CALLING && fi.request_id == 2)
        c->st = fi.msg == TG_MSG_INVOKE_METHOD_REPLY && fi.success ? ST_OK : ST_BIND_REFUSED;
}

static void on_readable(struct bconn *c, const char *method)
{
    ssize_t n = recv(c->fd, c->buf + c->len, sizeof c->buf - c->len, 0);
    if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK))
        return;
    if (n <= 0) {
        /* EOF or ECONNRESET: the gateway closed it (a refusal at accept) */
        c->st = c->st == ST_CALLING ? ST_BIND_REFUSED : ST_REFUSED;
        return;
    }
    c->len += (size_t)n;
    while (c->len >= TG_FRAME_HEADER_SIZE && (c->st == ST_BINDING || c->st == ST_CALLING)) {
        size_t bl = (size_t)c->buf[0] | (size_t)c->buf[1] << 8 | (size_t)c->buf[2] << 16 | (size_t)c->buf[3] << 24;
        if (bl + TG_FRAME_HEADER_SIZE > sizeof c->buf) {
            c->st = ST_BIND_REFUSED;
            return;
        }
        if (c->len < bl + TG_FRAME_HEADER_SIZE)
            return;
        on_frame(c, c->buf + TG_FRAME_HEADER_SIZE, bl, method);
        memmove(c->buf, c->buf + TG_FRAME_HEADER_SIZE + bl, c->len - TG_FRAME_HEADER_SIZE - bl);
        c->len -= TG_FRAME_HEADER_SIZE + bl;
    }
}

static void on_connected(struct bconn *c)
{
    int err = 0;
    socklen_t el = sizeof err;
    if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &el) != 0 || err != 0) {
        c->st = ST_CONNECT_FAILED;
        return;
    }
    uint8_t bind[64];
    size_t bl = tg_ipc_encode_bind(bind, sizeof bind, 1, "ConsumerPort");
    c->st = bl && send_frame(c->fd, bind, bl) == 0 ? ST_BINDING : ST_REFUSED;
}

int gw_burst_main(const char *addr, int count, const char *method, int timeout_ms)
{
    struct tg_addr a;
    char err[256];
    if (tg_addr_parse(addr, &a, err, sizeof err) != 0) {
        fprintf(stderr, "gw_testclient burst: %s\n", err);
        return 2;
    }
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < (rlim_t)count + 32) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
        if (rl.rlim_cur < (rlim_t)count + 32) {
            fprintf(stderr, "gw_testclient burst: RLIMIT_NOFILE %llu is too low for %d connections\n",
                    (unsigned long long)rl.rlim_cur, count);
            return 2;
        }
    }
    struct bconn *cs = calloc((size_t)count, sizeof *cs);
    struct pollfd *pfds = calloc((size_t)count, sizeof *pfds);
    int *idx = calloc((size_t)count, sizeof *idx);
    if (!cs || !pfds || !idx)
        return 2;
    /* the burst: every connect before looking at any */
    for (int i = 0; i < count; i++) {
        struct bconn *c = &cs[i];
        c->fd = socket(a.family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (c->fd < 0) {
            fprintf(stderr, "gw_testclient burst: socket: %s\n", strerror(errno));
            return 2;
        }
        if (connect(c->fd, (struct sockaddr *)&a.ss, a.len) == 0 || errno == EINPROGRESS) {
            c->st = ST_CONNECTING;
        } else {
            if (i == 0 || cs[i - 1].st != ST_CONNECT_FAILED)
                fprintf(stderr, "gw_testclient burst: connect %d: %s\n", i, strerror(errno));
            c->st = ST_CONNECT_FAILED;
        }
    }
    uint64_t deadline = tg_mono_ms() + (uint64_t)tg_test_ms(timeout_ms);
    int timed_out = 0;
    for (;;) {
        int n = 0;
        for (int i = 0; i < count; i++) {
            enum st st = cs[i].st;
            if (st != ST_CONNECTING && st != ST_BINDING && st != ST_CALLING)
                continue;
            pfds[n].fd = cs[i].fd;
            pfds[n].events = st == ST_CONNECTING ? POLLOUT : POLLIN;
            pfds[n].revents = 0;
            idx[n++] = i;
        }
        if (n == 0)
            break;
        uint64_t now = tg_mono_ms();
        if (now >= deadline) {
            timed_out = n;
            break;
        }
        int r = poll(pfds, (nfds_t)n, (int)(deadline - now));
        if (r < 0 && errno != EINTR)
            return 2;
        for (int k = 0; r > 0 && k < n; k++) {
            if (!pfds[k].revents)
                continue;
            struct bconn *c = &cs[idx[k]];
            if (c->st == ST_CONNECTING)
                on_connected(c);
            else
                on_readable(c, method);
        }
    }
    int cnt[ST_BIND_REFUSED + 1] = {0};
    for (int i = 0; i < count; i++)
        cnt[cs[i].st]++;
    printf("ok=%d refused=%d connect_failed=%d bind_refused=%d timeout=%d\n", cnt[ST_OK], cnt[ST_REFUSED],
           cnt[ST_CONNECT_FAILED], cnt[ST_BIND_REFUSED], timed_out);
    for (int i = 0; i < count; i++)
        close(cs[i].fd);
    int all = cnt[ST_OK] == count;
    free(cs);
    free(pfds);
    free(idx);
    return all ? 0 : 1;
}
