/* test_link_h2_floods.c: the classic HTTP/2 floods against a gateway's link listener
 * (docs/link-protocol.md §9). A real "hub" (h2c link listener on loopback TCP, its gateway
 * bridging to a fake ConsumerPort) has a legitimate link from a real node, "edge". A raw attacker
 * (hand-made frames on a plain socket with a receive buffer of a few KiB it never reads) connects
 * and attacks, once before authentication (it never sends the control stream's request) and once
 * after (it linked as a node of its own):
 *
 * 1. PING frames, paced so that the answers pile up, and in one burst;
 * 2. SETTINGS frames (each owes an ACK), the same two ways;
 * 3. rapid reset: HEADERS opening a stream, then RST_STREAM, without end;
 * 4. HEADERS without END_HEADERS, then CONTINUATION frames without end;
 * 5. empty DATA on an open and on a closed stream, WINDOW_UPDATE and PRIORITY frames on the
 *    connection, open, closed and idle streams;
 * 6. as many streams as the hub allows, then a stall; and one stream more than it allows.
 *
 * Each attack must end in a clean close of that one connection (the attacker's socket sees the
 * hub hang up, and the hub logs why), or stay harmlessly bounded (after the flood the hub still
 * answers a PING on that connection). The heap the process holds must stay under a bound that
 * does not follow the size of the attack (floods of 32 MiB and more), nothing may be left once
 * the attack is over, and edge's link must stay up (the same connection, never resumed) and serve
 * a new channel after every attack (and during the stall). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <event2/buffer.h>
#include <event2/event.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "fleet.h"
#include "gw_config.h"
#include "gw_core.h"
#include "gw_process_metrics.h"
#include "link_int.h"
#include "tracegate/ipc_host.h"
#include "tracegate/ipc_wire.h"
#include "tracegate/log.h"
#include "ipc_frame.pb-c.h"

#include "test_link_util.h"
#include "tg_test_util.h"

#define WAIT_MS 30000
/* What the process may hold above its baseline while one attack runs: the hub's transport output
 * (up to 1 MiB, OUT_HIGH in link.c), one read (256 KiB), nghttp2's queues, the contexts of
 * LINK_MAX_STREAMS streams and, after authentication, the gateway sessions of the attacker's
 * LINK_MAX_CHANNELS channels (the stall: 3 MB). */
#define HEAP_BOUND (6u << 20)
/* A bounded flood's size: several times HEAP_BOUND. */
#define FLOOD_BYTES (32u << 20)
/* What the last three quarters of a bounded flood may add to the heap (nothing but noise). */
#define HEAP_LATE (256u << 10)
/* What may remain once an attack is over and its connection and link are gone. */
#define HEAP_LEFT (256u << 10)
/* Safety net of an attack that must be closed: it goes on until then. */
#define NO_END (1ull << 40)

static struct tl_pair g_p; /* hub, edge and the link between them */
static uint64_t g_edge_up_since; /* edge's link on the hub: when its connection came up */

/* ------------------------------------------------------------ the fake service behind hub */

static void m_qss(tg_ipc_call *call, const ProtobufCMessage *req, void *ctx, void *ps)
{
    (void)req, (void)ctx, (void)ps;
    static const uint8_t reply[16];
    tg_ipc_call_reply_bytes(call, reply, sizeof reply, 0, -1);
}

static const struct tg_ipc_method k_methods[] = {{"QueryServiceState", NULL, m_qss}};
static const struct tg_ipc_service_def k_consumer = {.name = "ConsumerPort", .methods = k_methods, .n_methods = 1};

/* ------------------------------------------------------------ fixture */

static int setup(void **state)
{
    (void)state;
    tg_log_set_level(TG_LOG_WARN);
    /* the hello deadline ends the attacks nghttp2 lets through before authentication: short, but
     * far more than edge's hello takes on a loaded machine */
    tl_pair_up(&g_p, "linkfloods", &k_consumer, NULL, (uint32_t)tg_test_ms(750), WAIT_MS);
    assert_true(event_base_get_features(g_p.base) & EV_FEATURE_EARLY_CLOSE); /* EV_CLOSED */
    g_edge_up_since = tl_link_up(g_p.hub, "edge")->up_since_us;
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    return tl_pair_down(&g_p);
}

/* ------------------------------------------------------------ the legitimate link */

struct client {
    int fd;
    struct evbuffer *in;
    int bound, eof;
};

/* The first IPC frame back (or EOF): whether it is a successful BindService reply. */
static int client_answered(void *arg)
{
    struct client *c = arg;
    int r;
    while ((r = evbuffer_read(c->in, c->fd, 65536)) > 0)
        ;
    if (r == 0)
        c->eof = 1;
    size_t have = evbuffer_get_length(c->in);
    uint8_t h[4];
    if (have < 4)
        return c->eof;
    evbuffer_copyout(c->in, h, 4);
    uint32_t n = (uint32_t)h[0] | (uint32_t)h[1] << 8 | (uint32_t)h[2] << 16 | (uint32_t)h[3] << 24;
    if (have < 4 + (size_t)n)
        return c->eof;
    uint8_t *b = malloc(n ? n : 1);
    assert_non_null(b);
    evbuffer_drain(c->in, 4);
    evbuffer_remove(c->in, b, n);
    Perfetto__Protos__IPCFrame *f = perfetto__protos__ipcframe__unpack(NULL, n, b);
    free(b);
    assert_non_null(f);
    c->bound = f->msg_case == PERFETTO__PROTOS__IPCFRAME__MSG_MSG_BIND_SERVICE_REPLY && f->msg_bind_service_reply->success;
    perfetto__protos__ipcframe__free_unpacked(f, NULL);
    return 1;
}

/* edge's link is still the connection it came up with, and a new channel over it binds
 * ConsumerPort at the hub's service (a round trip through both gateways and the link). */
static void edge_serves(const char *when)
{
    struct tg_link *hl = tl_link_up(g_p.hub, "edge"), *el = tl_link_up(g_p.edge, "hub");
    if (!hl || !el)
        fail_msg("%s: edge's link is down", when);
    if (hl->up_since_us != g_edge_up_since || hl->resumes || el->resumes)
        fail_msg("%s: edge's link went down and came back", when);
    struct tg_gw_client_info who;
    memset(&who, 0, sizeof who);
    snprintf(who.principal, sizeof who.principal, "uid:4242");
    char err[256];
    struct client c = {.fd = tg_fleet_connect(g_p.edge, "hub", 0, &who, err, sizeof err)};
    if (c.fd < 0)
        fail_msg("%s: tg_fleet_connect: %s", when, err);
    c.in = evbuffer_new();
    assert_non_null(c.in);
    uint8_t b[256];
    size_t n = tg_ipc_encode_bind(b, sizeof b, 1, "ConsumerPort");
    uint8_t h[4] = {(uint8_t)n, (uint8_t)(n >> 8), (uint8_t)(n >> 16), (uint8_t)(n >> 24)};
    assert_int_equal(write(c.fd, h, 4), 4);
    assert_int_equal(write(c.fd, b, n), (ssize_t)n);
    int done = tg_test_run_until(g_p.base, client_answered, &c, WAIT_MS);
    evbuffer_free(c.in);
    close(c.fd);
    if (!done || !c.bound)
        fail_msg("%s: a channel over edge's link %s", when, !done ? "got no answer" : "was not served");
}

/* ------------------------------------------------------------ raw HTTP/2 */

enum { T_DATA = 0, T_HEADERS = 1, T_PRIORITY = 2, T_RST = 3, T_SETTINGS = 4, T_PING = 6, T_WINDOW_UPDATE = 8,
       T_CONTINUATION = 9 };
enum { F_ACK = 1, F_END_HEADERS = 4 };

static size_t frame(uint8_t *p, size_t len, uint8_t type, uint8_t flags, uint32_t sid)
{
    p[0] = (uint8_t)(len >> 16);
    p[1] = (uint8_t)(len >> 8);
    p[2] = (uint8_t)len;
    p[3] = type;
    p[4] = flags;
    p[5] = (uint8_t)(sid >> 24 & 0x7f);
    p[6] = (uint8_t)(sid >> 16);
    p[7] = (uint8_t)(sid >> 8);
    p[8] = (uint8_t)sid;
    return 9;
}

static size_t put_u32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
    return 4;
}

static size_t frame_u32(uint8_t *p, uint8_t type, uint32_t sid, uint32_t v)
{
    size_t n = frame(p, 4, type, 0, sid);
    return n + put_u32(p + n, v);
}

/* HPACK integer with an n-bit prefix */
static size_t hp_int(uint8_t *p, unsigned bits, size_t v)
{
    size_t max = (1u << bits) - 1, n = 0;
    if (v < max) {
        p[n++] = (uint8_t)v;
        return n;
    }
    p[n++] = (uint8_t)max;
    for (v -= max; v >= 128; v /= 128)
        p[n++] = (uint8_t)(v % 128 + 128);
    p[n++] = (uint8_t)v;
    return n;
}

/* A literal header field without indexing: the hub's HPACK table never changes. */
static size_t hp_lit(uint8_t *p, const char *name, const char *value)
{
    size_t n = 0, nl = strlen(name), vl = strlen(value);
    p[n++] = 0;
    n += hp_int(p + n, 7, nl);
    memcpy(p + n, name, nl);
    n += nl;
    n += hp_int(p + n, 7, vl);
    memcpy(p + n, value, vl);
    return n + vl;
}

/* HEADERS of stream sid (under 300 bytes): the control stream's request as node `node`, or (node
 * NULL) a channel to the hub's consumer port, channel id sid. */
static size_t headers(uint8_t *p, uint32_t sid, uint8_t flags, const char *node)
{
    char authority[32], id[16];
    snprintf(authority, sizeof authority, "127.0.0.1:%d", g_p.port);
    snprintf(id, sizeof id, "%x", (unsigned)sid);
    size_t n = 9;
    n += hp_lit(p + n, ":method", "CONNECT");
    n += hp_lit(p + n, ":protocol", node ? "tracegate-link" : "perfetto-ipc");
    n += hp_lit(p + n, ":scheme", "http");
    n += hp_lit(p + n, ":path", node ? "/link" : "/node/hub/consumer");
    n += hp_lit(p + n, ":authority", authority);
    n += node ? hp_lit(p + n, "tracegate-node", node) : hp_lit(p + n, "tracegate-channel", id);
    frame(p, n - 9, T_HEADERS, flags, sid);
    return n;
}

/* ------------------------------------------------------------ the attacker */

struct raw;
/* Puts the attack's next frames at p (at most cap bytes; cap is at least 1 KiB); 0 when it has
 * nothing more to send. */
typedef size_t (*gen_fn)(struct raw *r, uint8_t *p, size_t cap);

static const uint8_t k_marker[8] = {'f', 'l', 'o', 'o', 'd', 'e', 'n', 'd'};

struct raw {
    int fd;
    struct event *wake_w, *wake_r, *wake_in; /* the loop wakes when the socket takes more, closes, has more */
    gen_fn gen;
    size_t pace;          /* bytes written per loop turn at most (0: what the socket takes) */
    uint8_t buf[64 << 10];
    size_t len, off;
    uint64_t sent, limit; /* the attack's bytes sent; it stops at limit */
    uint64_t frames;      /* generator state: frames made */
    uint32_t sid;         /* generator state: the next stream id to open */
    uint32_t open_sid;    /* a stream the attack opened before the flood */
    uint32_t closed_sid;  /* a stream it opened and reset before the flood */
    int closed;           /* the hub hung up */
    int eof;              /* and the attacker read to the end */
    int64_t heap0, heap_peak, heap_q, heap_late; /* baseline, peak, at a quarter, peak after */
    uint8_t tail[17];
    int got_marker;
    int hub_fd;           /* the hub's end of the connection (the same process) */
    const char *node;     /* the node it linked as, NULL if none */
};

static void sample_heap(struct raw *r)
{
    int64_t h = tg_process_heap_inuse();
    if (h > r->heap_peak)
        r->heap_peak = h;
    if (r->heap_q < 0 && r->sent >= r->limit / 4)
        r->heap_q = h;
    if (r->heap_q >= 0 && h > r->heap_late)
        r->heap_late = h;
}

static void nothing(evutil_socket_t fd, short what, void *arg) { (void)fd, (void)what, (void)arg; }

/* The hub closed the connection: its end is no longer this connection's socket (closed; the
 * descriptor unused or another socket's), or its FIN or RST reached the attacker. (What the hub
 * sent and the attacker did not read stays ahead of its FIN: the attacker sees the end only once
 * it reads, raw_eof.) */
static int hung_up(struct raw *r)
{
    struct sockaddr_in me, peer;
    socklen_t lm = sizeof me, lp = sizeof peer;
    struct pollfd p = {.fd = r->fd, .events = POLLRDHUP};
    if (r->closed)
        return 1;
    if (getsockname(r->fd, (struct sockaddr *)&me, &lm) != 0 || getpeername(r->hub_fd, (struct sockaddr *)&peer, &lp) != 0 ||
        peer.sin_family != AF_INET || peer.sin_port != me.sin_port)
        r->closed = 1;
    else if (poll(&p, 1, 0) == 1 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)))
        r->closed = 1;
    return r->closed;
}

/* Writes what the socket takes of the attack (pace bytes at most); 1 once it was all sent, or
 * the hub hung up. */
static int raw_pump(struct raw *r)
{
    sample_heap(r);
    if (hung_up(r))
        return 1;
    size_t turn = 0;
    int queued = 0;
    /* paced: the next bytes once the hub took the last ones from its socket (then it reads them
     * in one go with at most the ones before: each nghttp2_session_mem_recv sees a few hundred
     * frames, and what piles up is their answers in the hub's output) */
    if (r->pace && (ioctl(r->hub_fd, FIONREAD, &queued) != 0 || queued > 0)) {
        event_add(r->wake_r, NULL); /* (and the hub's socket is readable: the loop turns) */
        return 0;
    }
    while (r->sent < r->limit) {
        if (r->pace && turn >= r->pace)
            return 0;
        if (r->off == r->len) {
            r->off = 0;
            r->len = r->gen(r, r->buf, sizeof r->buf);
            if (!r->len) {
                r->limit = r->sent;
                break;
            }
        }
        size_t want = r->len - r->off;
        if (r->pace && want > r->pace - turn)
            want = r->pace - turn;
        ssize_t n = send(r->fd, r->buf + r->off, want, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            event_add(r->wake_w, NULL);
            event_add(r->wake_r, NULL);
            return 0;
        }
        if (n < 0) {
            r->closed = 1; /* EPIPE, ECONNRESET */
            return 1;
        }
        r->off += (size_t)n;
        r->sent += (uint64_t)n;
        turn += (size_t)n;
    }
    return 1;
}

static int raw_hung_up(void *arg)
{
    struct raw *r = arg;
    raw_pump(r);
    if (!r->closed)
        event_add(r->wake_r, NULL);
    return r->closed;
}

static int raw_sent(void *arg) { return raw_pump(arg); }

/* Reads (now, at last) to the end: EOF, or the hub's RST. */
static int raw_eof(void *arg)
{
    struct raw *r = arg;
    uint8_t b[65536];
    for (;;) {
        ssize_t n = recv(r->fd, b, sizeof b, MSG_DONTWAIT);
        if (n > 0 || (n < 0 && errno == EINTR))
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            event_add(r->wake_in, NULL);
            return 0;
        }
        r->eof = 1;
        return 1;
    }
}

/* Reads (now, at last) until the hub's answer to the PING carrying k_marker arrives, or it hangs
 * up. */
static int raw_marker(void *arg)
{
    struct raw *r = arg;
    sample_heap(r);
    static const uint8_t ack[9] = {0, 0, 8, T_PING, F_ACK, 0, 0, 0, 0};
    uint8_t b[sizeof r->tail + 65536];
    while (!r->got_marker) {
        memcpy(b, r->tail, sizeof r->tail);
        ssize_t n = recv(r->fd, b + sizeof r->tail, sizeof b - sizeof r->tail, MSG_DONTWAIT);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            event_add(r->wake_in, NULL);
            return 0;
        }
        if (n <= 0) {
            r->closed = 1;
            return 1;
        }
        size_t have = sizeof r->tail + (size_t)n;
        for (size_t i = 0; i + 17 <= have; i++)
            if (!memcmp(b + i, ack, 9) && !memcmp(b + i + 9, k_marker, 8))
                r->got_marker = 1;
        memcpy(r->tail, b + have - sizeof r->tail, sizeof r->tail);
    }
    return 1;
}

static void raw_send_all(struct raw *r, const uint8_t *p, size_t n)
{
    while (n) {
        ssize_t w = send(r->fd, p, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        assert_true(w > 0);
        p += w;
        n -= (size_t)w;
    }
}

static int linked(void *arg) { return tl_link_up(g_p.hub, arg) != NULL; }

/* The hub's socket whose peer is the attacker's port (it accepts from the loop). */
static int hub_accepted(void *arg)
{
    struct raw *r = arg;
    struct sockaddr_in me, a, b;
    socklen_t sl = sizeof me;
    assert_int_equal(getsockname(r->fd, (struct sockaddr *)&me, &sl), 0);
    for (int fd = 0; fd < 4096; fd++) {
        socklen_t la = sizeof a, lb = sizeof b;
        if (fd != r->fd && getpeername(fd, (struct sockaddr *)&a, &la) == 0 && a.sin_family == AF_INET &&
            a.sin_port == me.sin_port && getsockname(fd, (struct sockaddr *)&b, &lb) == 0 &&
            ntohs(b.sin_port) == g_p.port) {
            r->hub_fd = fd;
            return 1;
        }
    }
    return 0;
}

/* Connects to the hub with a receive buffer of a few KiB that it never reads; with `node`, links
 * as that node first (the hub trusts our uid on loopback), else stays unauthenticated. Its
 * local port goes to *port. */
static void raw_open(struct raw *r, const char *node, int *port)
{
    r->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(r->fd >= 0);
    int small = 4096;
    assert_int_equal(setsockopt(r->fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof small), 0);
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons((uint16_t)g_p.port)};
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(r->fd, (struct sockaddr *)&sin, sizeof sin), 0);
    socklen_t sl = sizeof sin;
    assert_int_equal(getsockname(r->fd, (struct sockaddr *)&sin, &sl), 0);
    *port = ntohs(sin.sin_port);
    uint8_t p[1024];
    static const char preface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
    size_t n = sizeof preface - 1;
    memcpy(p, preface, n);
    n += frame(p + n, 0, T_SETTINGS, 0, 0);
    /* the hub sends its SETTINGS (extended CONNECT) as soon as it accepted: acknowledged unread */
    n += frame(p + n, 0, T_SETTINGS, F_ACK, 0);
    r->sid = 1;
    if (node) {
        n += headers(p + n, r->sid, F_END_HEADERS, node);
        r->sid += 2;
    }
    raw_send_all(r, p, n);
    assert_int_equal(fcntl(r->fd, F_SETFL, fcntl(r->fd, F_GETFL) | O_NONBLOCK), 0);
    r->wake_w = event_new(g_p.base, r->fd, EV_WRITE, nothing, NULL);
    r->wake_r = event_new(g_p.base, r->fd, EV_CLOSED, nothing, NULL);
    r->wake_in = event_new(g_p.base, r->fd, EV_READ, nothing, NULL);
    assert_non_null(r->wake_w);
    assert_non_null(r->wake_r);
    assert_non_null(r->wake_in);
    if (node && !tg_test_run_until(g_p.base, linked, (void *)node, WAIT_MS))
        fail_msg("%s did not link", node);
    r->hub_fd = -1;
    if (!tg_test_run_until(g_p.base, hub_accepted, r, WAIT_MS))
        fail_msg("the hub did not accept the attacker");
}

static void raw_close(struct raw *r)
{
    if (r->wake_w)
        event_free(r->wake_w);
    if (r->wake_r)
        event_free(r->wake_r);
    if (r->wake_in)
        event_free(r->wake_in);
    if (r->fd >= 0)
        close(r->fd);
    r->fd = -1;
    r->wake_w = r->wake_r = r->wake_in = NULL;
}

/* ------------------------------------------------------------ the attacks */

static size_t gen_ping(struct raw *r, uint8_t *p, size_t cap)
{
    size_t n = 0;
    for (; n + 17 <= cap; r->frames++) {
        n += frame(p + n, 8, T_PING, 0, 0);
        memcpy(p + n, &r->frames, 8);
        n += 8;
    }
    return n;
}

static size_t gen_settings(struct raw *r, uint8_t *p, size_t cap)
{
    size_t n = 0;
    for (; n + 15 <= cap; r->frames++) {
        n += frame(p + n, 6, T_SETTINGS, 0, 0);
        p[n++] = 0, p[n++] = 1; /* SETTINGS_HEADER_TABLE_SIZE 4096: no change */
        n += put_u32(p + n, 4096);
    }
    return n;
}

static size_t gen_rapid_reset(struct raw *r, uint8_t *p, size_t cap)
{
    size_t n = 0;
    for (; n + 320 <= cap; r->frames += 2, r->sid += 2) {
        n += headers(p + n, r->sid, F_END_HEADERS, NULL);
        n += frame_u32(p + n, T_RST, r->sid, NGHTTP2_CANCEL);
    }
    return n;
}

static size_t gen_continuation(struct raw *r, uint8_t *p, size_t cap)
{
    size_t n = 0;
    if (!r->frames++)
        n += headers(p + n, r->sid, 0, NULL); /* no END_HEADERS: CONTINUATION frames must follow */
    char pad[101];
    memset(pad, 'c', 100);
    pad[100] = '\0';
    for (; n + 9 + 120 <= cap; r->frames++) {
        size_t at = n;
        n += 9;
        n += hp_lit(p + n, "x-pad", pad);
        frame(p + at, n - at - 9, T_CONTINUATION, 0, r->sid);
    }
    return n;
}

/* The streams the floods of case 5 aim at: one open (a channel request: refused with 421 and left
 * half open before authentication, a channel after), one opened and reset at once. */
static size_t open_targets(struct raw *r, uint8_t *p)
{
    size_t n = 0;
    r->open_sid = r->sid;
    n += headers(p + n, r->sid, F_END_HEADERS, NULL);
    r->closed_sid = r->sid + 2;
    n += headers(p + n, r->closed_sid, F_END_HEADERS, NULL);
    n += frame_u32(p + n, T_RST, r->closed_sid, NGHTTP2_CANCEL);
    r->sid += 4;
    return n;
}

static size_t gen_data_open(struct raw *r, uint8_t *p, size_t cap)
{
    size_t n = r->frames++ ? 0 : open_targets(r, p);
    for (; n + 9 <= cap; r->frames++)
        n += frame(p + n, 0, T_DATA, 0, r->open_sid);
    return n;
}

static size_t gen_data_closed(struct raw *r, uint8_t *p, size_t cap)
{
    size_t n = r->frames++ ? 0 : open_targets(r, p);
    for (; n + 9 <= cap; r->frames++)
        n += frame(p + n, 0, T_DATA, 0, r->closed_sid);
    return n;
}

/* +1 on the connection, the open stream and the closed one, in turn */
static size_t gen_window_update(struct raw *r, uint8_t *p, size_t cap)
{
    size_t n = r->frames++ ? 0 : open_targets(r, p);
    for (; n + 13 <= cap; r->frames++) {
        unsigned k = (unsigned)(r->frames % 3);
        n += frame_u32(p + n, T_WINDOW_UPDATE, k == 0 ? 0 : k == 1 ? r->open_sid : r->closed_sid, 1);
    }
    return n;
}

/* On the open stream, the closed one and a new idle stream each time (the priority tree keeps
 * idle streams), each depending on another */
static size_t gen_priority(struct raw *r, uint8_t *p, size_t cap)
{
    size_t n = r->frames++ ? 0 : open_targets(r, p);
    for (; n + 14 <= cap; r->frames++) {
        unsigned k = (unsigned)(r->frames % 3);
        uint32_t sid = k == 0 ? r->open_sid : k == 1 ? r->closed_sid : r->sid;
        if (k == 2)
            r->sid += 2;
        n += frame(p + n, 5, T_PRIORITY, 0, sid);
        n += put_u32(p + n, sid == r->open_sid ? r->closed_sid : r->open_sid);
        p[n++] = 15;
    }
    return n;
}

/* Channel requests until the hub's SETTINGS_MAX_CONCURRENT_STREAMS are open (the control stream
 * counts), then nothing: a stall. */
static size_t gen_stall(struct raw *r, uint8_t *p, size_t cap)
{
    size_t n = 0;
    for (; r->sid < 2 * LINK_MAX_STREAMS && n + 320 <= cap; r->sid += 2, r->frames++)
        n += headers(p + n, r->sid, F_END_HEADERS, NULL);
    return n;
}

/* One stream more than the hub allows. */
static size_t gen_over(struct raw *r, uint8_t *p, size_t cap)
{
    size_t n = 0;
    for (; r->sid < 2 * LINK_MAX_STREAMS + 2 && n + 320 <= cap; r->sid += 2, r->frames++)
        n += headers(p + n, r->sid, F_END_HEADERS, NULL);
    return n;
}

/* ------------------------------------------------------------ the test */

#define FLOODED "Flooding was detected in this HTTP/2 session, and it must be closed"
#define HELLO_DEADLINE "no control stream within the handshake timeout"

struct attack {
    const char *name;
    gen_fn gen;
    size_t pace;   /* bytes per turn, once the hub read the last ones (0: as fast as it reads) */
    int stall;     /* not a flood: it stops by itself (what the hub holds follows the streams) */
    /* what the hub logs as the reason it closed the connection, before and after authentication
     * (NULL: it stays, bounded); nghttp2's words where it decided */
    const char *before, *after;
};

static const struct attack k_attacks[] = {
    {"PING flood, answers piling up", gen_ping, 4096, 0, FLOODED, FLOODED},
    {"PING burst", gen_ping, 0, 0, FLOODED, FLOODED},
    {"SETTINGS flood, ACKs piling up", gen_settings, 4096, 0, FLOODED, FLOODED},
    {"SETTINGS burst", gen_settings, 0, 0, FLOODED, FLOODED},
    /* nghttp2's rapid-reset limit: a GOAWAY after 1000 resets at once (33 a second after) */
    {"rapid reset", gen_rapid_reset, 0, 0, "sent GOAWAY INTERNAL_ERROR", "sent GOAWAY INTERNAL_ERROR"},
    /* nghttp2's CVE-2024-28182 limit: 8 CONTINUATION frames */
    {"CONTINUATION flood", gen_continuation, 0, 0, "Too many CONTINUATION frames following a HEADER frame",
     "Too many CONTINUATION frames following a HEADER frame"},
    {"empty DATA on an open stream", gen_data_open, 0, 0, HELLO_DEADLINE, NULL},
    {"empty DATA on a closed stream", gen_data_closed, 0, 0, "sent GOAWAY STREAM_CLOSED: DATA: stream closed",
     "sent GOAWAY STREAM_CLOSED: DATA: stream closed"},
    {"WINDOW_UPDATE flood", gen_window_update, 0, 0, HELLO_DEADLINE, NULL},
    {"PRIORITY flood", gen_priority, 0, 0, HELLO_DEADLINE, NULL},
    {"all streams open, then a stall", gen_stall, 0, 1, HELLO_DEADLINE, NULL},
    {"one stream over the limit", gen_over, 0, 0, "sent GOAWAY PROTOCOL_ERROR: request HEADERS: max concurrent streams exceeded",
     "sent GOAWAY PROTOCOL_ERROR: request HEADERS: max concurrent streams exceeded"},
};

static int have_heap(void) { return tg_process_heap_inuse() >= 0; } /* (not under ThreadSanitizer) */

/* The stall after authentication: the hub holds a channel for each stream but one (refused: a
 * link carries LINK_MAX_CHANNELS). */
static int stall_settled(void *arg)
{
    struct raw *r = arg;
    struct tg_link *l = tl_link_up(g_p.hub, r->node);
    sample_heap(r);
    return hung_up(r) || (l && l->n_channels >= LINK_MAX_CHANNELS);
}

static void run_attack(const struct attack *a, const char *node)
{
    char what[160];
    snprintf(what, sizeof what, "%s %s authentication", a->name, node ? "after" : "before");
    const char *why = node ? a->after : a->before;
    struct raw r;
    memset(&r, 0, sizeof r);
    r.fd = -1;
    r.node = node;
    int port;
    r.heap0 = r.heap_peak = tg_process_heap_inuse();
    r.heap_q = -1;
    raw_open(&r, node, &port);
    r.gen = a->gen;
    r.pace = a->pace;
    r.limit = why ? NO_END : FLOOD_BYTES;
    /* the hub's reason: an unauthenticated connection's end is logged as info, a link's as warn
     * (the link's channels, one info line each, stay out of the test's output) */
    if (why) {
        tg_log_set_level(node ? TG_LOG_WARN : TG_LOG_INFO);
        assert_int_equal(tg_test_stderr_begin(), 0);
    }
    uint64_t t0 = tg_test_now_ms();
    int done, stalled = 0, logged = 1, refusals = 0;
    char expect[512] = "";
    if (why) {
        done = tg_test_run_until(g_p.base, raw_hung_up, &r, WAIT_MS) &&
               tg_test_run_until(g_p.base, raw_eof, &r, WAIT_MS);
        if (node)
            snprintf(expect, sizeof expect, "link %s down (%s)", node, why);
        else
            snprintf(expect, sizeof expect, "link connection from 127.0.0.1:%d closed: %s", port, why);
        logged = tg_test_stderr_wait_for(expect, 1000) == 1; /* (logged before it closed) */
        char *log = tg_test_stderr_end();
        for (const char *p = log; p && (p = strstr(p, "refused a stream")) != NULL; p++)
            refusals++;
        free(log);
        tg_log_set_level(TG_LOG_WARN);
    } else {
        done = tg_test_run_until(g_p.base, raw_sent, &r, WAIT_MS);
        if (done && !r.closed && a->stall) {
            done = tg_test_run_until(g_p.base, stall_settled, &r, WAIT_MS);
            struct tg_link *l = tl_link_up(g_p.hub, node);
            stalled = l ? (int)l->n_channels : -1;
            if (done && !r.closed && stalled == LINK_MAX_CHANNELS) {
                char when[200];
                snprintf(when, sizeof when, "during %s", what);
                edge_serves(when);
            }
        }
        /* a PING after the flood: answered once the hub went through all of it */
        uint8_t ping[17];
        frame(ping, 8, T_PING, 0, 0);
        memcpy(ping + 9, k_marker, 8);
        if (done && !r.closed && send(r.fd, ping, sizeof ping, MSG_NOSIGNAL) == (ssize_t)sizeof ping)
            done = tg_test_run_until(g_p.base, raw_marker, &r, WAIT_MS);
    }
    uint64_t ms = tg_test_now_ms() - t0;
    printf("%s: %s after %llu bytes in %llu ms; heap +%lld KiB at most", what, r.closed ? "closed" : "bounded",
           (unsigned long long)r.sent, (unsigned long long)ms, (long long)(r.heap_peak - r.heap0) / 1024);
    if (r.heap_q >= 0 && !why)
        printf(", +%lld KiB in the last three quarters", (long long)(r.heap_late - r.heap_q) / 1024);
    printf("\n");
    fflush(stdout);
    raw_close(&r);
    struct tg_link *l = node ? tg_fleet_link_by_name(g_p.hub, node, NULL) : NULL;
    if (l)
        tg_link_close(l, "test over"); /* (a link that went down would wait for a resume) */

    if (!done)
        fail_msg("%s: %s", what, why ? "the hub did not close the connection" : "the hub did not answer a PING after the flood");
    if (why && (!r.closed || !r.eof))
        fail_msg("%s: the connection was not closed", what);
    if (!why && r.closed)
        fail_msg("%s: the hub closed the connection", what);
    if (!logged)
        fail_msg("%s: the hub did not log \"%s\"", what, expect);
    /* each stream refused before authentication (421) is logged at most 20 times a second, with
     * the gateway's other refusals (before: once each, thousands a second) */
    if (refusals > 20 * (int)(ms / 1000 + 2))
        fail_msg("%s: the hub logged %d refused streams in %llu ms", what, refusals, (unsigned long long)ms);
    if (a->stall && !why && stalled != LINK_MAX_CHANNELS)
        fail_msg("%s: the hub holds %d channels of the attacker", what, stalled);
    if (have_heap()) {
        if (r.heap_peak - r.heap0 > (int64_t)HEAP_BOUND)
            fail_msg("%s: the heap grew by %lld bytes", what, (long long)(r.heap_peak - r.heap0));
        if (!why && !a->stall && r.heap_late - r.heap_q > (int64_t)HEAP_LATE)
            fail_msg("%s: the last three quarters of the flood added %lld bytes to the heap", what,
                     (long long)(r.heap_late - r.heap_q));
    }
    snprintf(what + strlen(what), sizeof what - strlen(what), " was over");
    edge_serves(what);
    if (have_heap() && tg_process_heap_inuse() - r.heap0 > (int64_t)HEAP_LEFT)
        fail_msg("%s: %lld bytes more on the heap than before", what, (long long)(tg_process_heap_inuse() - r.heap0));
}

static void test_floods_before_auth(void **state)
{
    (void)state;
    edge_serves("at the start");
    for (size_t i = 0; i < sizeof k_attacks / sizeof k_attacks[0]; i++)
        run_attack(&k_attacks[i], NULL);
}

static void test_floods_after_auth(void **state)
{
    (void)state;
    edge_serves("at the start");
    char node[32];
    for (size_t i = 0; i < sizeof k_attacks / sizeof k_attacks[0]; i++) {
        snprintf(node, sizeof node, "evil%zu", i);
        run_attack(&k_attacks[i], node);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_floods_before_auth),
        cmocka_unit_test(test_floods_after_auth),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
