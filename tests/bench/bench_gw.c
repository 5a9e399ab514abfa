/* bench_gw.c: gateway benchmark driver, run by tests/bench/gateway_bench.sh.
 *
 *   bench_gw server ADDR [--frames N] [--size BYTES]
 *       A minimal Perfetto-like ConsumerPort host (tg_ipc_host): ReadBuffers streams replies of
 *       BYTES (default 64 KiB) payload, N of them (0, the default: until the client goes away);
 *       QueryCapabilities answers a 4-byte reply; everything else is rejected. The stream is
 *       pre-encoded once per call and queued by reference (evbuffer_add_reference), so the server
 *       costs one sendmsg per ~1 MiB and no copies in user space.
 *
 *   bench_gw client URL [--seconds S] [--warmup S] [--rr N] [--cacert FILE] [--token T] [--full]
 *                       [--watch NAME=PID]... [--conns N] [--stalls MS [--pace US]] [--upload BYTES]
 *       URL: unix:PATH, tcp://H:P, tls://H:P, ws://H:P/PATH. Binds ConsumerPort, then either
 *       measures a ReadBuffers stream for S seconds after a warm-up (default), or N sequential
 *       QueryCapabilities calls (--rr: p50/p99 latency). The default client is a lean blocking
 *       one: 1 MiB reads, IPC frames counted from their length prefixes (only the first bytes of
 *       each frame are looked at, to check request id / success), WebSocket and TLS unwrapped in
 *       place, so that the proxy in the middle, not the client, is what is measured. --full uses
 *       tracectl's client instead (tg_ipc_client: every frame pulled up and scanned), to show the
 *       difference. --watch reports the CPU use of a process tree (PID and its descendants, all
 *       threads) during the measured window, and cpu_others the CPU used meanwhile by every other
 *       process on the machine (noise). Prints one `key=value` line.
 *       --conns N (stream): N connections streaming at once, read round-robin; prints the aggregate
 *       MB/s and each connection's share (fairness). --stalls MS [--pace US] (link_bench.sh):
 *       QueryCapabilities calls US microseconds apart (default 1000) for S seconds (or --rr N calls);
 *       prints `stall start=T end=T` (CLOCK_MONOTONIC) for every gap of MS or more between replies,
 *       and stops with `wrong_reply=1` if a reply is not the answer to the call just made.
 *       --upload BYTES: the other direction: QueryCapabilities calls carrying BYTES of arguments
 *       (a field the server skips), 16 in flight, for S seconds; MB/s of IPC bytes sent. Through
 *       tracegated, its --rate (messages a second per client, default 10,000) bounds this unless
 *       lifted.
 *
 *   bench_gw idle tcp://H:P --conns N [--pid PID] [--hold S]
 *       Opens N connections, binds ConsumerPort on each, and reports PID's RSS before and after
 *       (and the bound count); keeps them open S seconds, then closes them.
 */
#include <errno.h>
#include <event2/buffer.h>
#include <event2/event.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/un.h>
#include <dirent.h>
#include <time.h>
#include <unistd.h>

#include "base/malloc_tune.h"
#include "consumer_port.pb-c.h"
#include "net/ws_wire.h"
#include "tracectl_rpc.h"
#include "tracegate/addr.h"
#include "tracegate/frame.h"
#include "tracegate/ipc_host.h"
#include "tracegate/ipc_wire.h"
#include "tracegate/log.h"
#include "tracegate/pbwire.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void raise_nofile(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return;
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
}

/* ------------------------------------------------------------ server */

#define BLOCK_FRAMES 16          /* frames per pre-encoded block (~1 MiB at 64 KiB) */
#define SERVER_BACKLOG (64u << 20) /* queued per stream (references: no copies, ~no memory); refilled every 1 ms */

struct block {
    uint8_t *data;
    size_t len;
    int refs;
};

struct stream {
    tg_ipc_call *call;
    tg_ipc_peer *peer;
    long left; /* frames still to send; -1 = until the peer goes away */
    struct block *blk;
    struct evbuffer *tmp;
    struct event *ev;
    struct stream *next;
};

static long g_frames = 0;
static size_t g_size = 65536;
static uint8_t *g_payload;
static struct event_base *g_base;
static struct stream *g_streams;

static void block_unref(const void *data, size_t len, void *arg)
{
    struct block *b = arg;
    (void)data;
    (void)len;
    if (--b->refs == 0) {
        free(b->data);
        free(b);
    }
}

static void stream_free(struct stream *s)
{
    for (struct stream **pp = &g_streams; *pp; pp = &(*pp)->next)
        if (*pp == s) {
            *pp = s->next;
            break;
        }
    event_free(s->ev);
    evbuffer_free(s->tmp);
    block_unref(NULL, 0, s->blk);
    free(s);
}

static struct block *make_block(uint64_t rid)
{
    size_t body = tg_ipc_encode_reply(NULL, 0, rid, 1, 1, NULL, g_size);
    size_t one = body + TG_FRAME_HEADER_SIZE;
    struct block *b = calloc(1, sizeof *b);
    b->len = one * BLOCK_FRAMES;
    b->data = malloc(b->len);
    b->refs = 1;
    if (!b->data)
        abort();
    for (int i = 0; i < BLOCK_FRAMES; i++) {
        uint8_t *p = b->data + (size_t)i * one;
        tg_frame_put_header(p, (uint32_t)body);
        tg_ipc_encode_reply(p + TG_FRAME_HEADER_SIZE, body, rid, 1, 1, g_payload, g_size);
    }
    return b;
}

static void pump(evutil_socket_t fd, short what, void *arg)
{
    struct stream *s = arg;
    (void)fd;
    (void)what;
    tg_conn *c = tg_ipc_peer_conn(s->peer);
    while (tg_ipc_peer_output_len(s->peer) < SERVER_BACKLOG) {
        if (s->left >= 0 && s->left <= BLOCK_FRAMES) {
            /* the tail: whole frames by copy, the last one with has_more = 0 */
            while (s->left > 1) {
                s->left--;
                tg_ipc_call_reply_bytes(s->call, g_payload, g_size, 1, -1);
            }
            tg_ipc_call_reply_bytes(s->call, g_payload, g_size, 0, -1);
            stream_free(s);
            return;
        }
        s->blk->refs++;
        evbuffer_add_reference(s->tmp, s->blk->data, s->blk->len, block_unref, s->blk);
        if (tg_conn_send_framed(c, s->tmp) != 0)
            return; /* closing: peer_close frees the stream */
        if (s->left > 0)
            s->left -= BLOCK_FRAMES;
    }
    /* poll the queue: 64 MiB lasts over 10 ms even at 6 GB/s, so the timer never starves the socket */
    struct timeval tv = {0, 1000};
    event_add(s->ev, &tv);
}

static void m_read_buffers(tg_ipc_call *call, const ProtobufCMessage *req, void *svc, void *peer_state)
{
    (void)req;
    (void)svc;
    (void)peer_state;
    struct stream *s = calloc(1, sizeof *s);
    s->call = call;
    s->peer = tg_ipc_call_peer(call);
    s->left = g_frames > 0 ? g_frames : -1;
    s->blk = make_block(tg_ipc_call_request_id(call));
    s->tmp = evbuffer_new();
    s->ev = evtimer_new(g_base, pump, s);
    s->next = g_streams;
    g_streams = s;
    event_active(s->ev, EV_TIMEOUT, 0);
}

static void m_small(tg_ipc_call *call, const ProtobufCMessage *req, void *svc, void *peer_state)
{
    (void)req;
    (void)svc;
    (void)peer_state;
    static const uint8_t caps[] = {0x0a, 0x02, 0x08, 0x01};
    tg_ipc_call_reply_bytes(call, caps, sizeof caps, 0, -1);
}

static void m_reject(tg_ipc_call *call, const ProtobufCMessage *req, void *svc, void *peer_state)
{
    (void)req;
    (void)svc;
    (void)peer_state;
    tg_ipc_call_reject(call);
}

static void peer_close(tg_ipc_peer *peer, void *state, void *svc)
{
    (void)state;
    (void)svc;
    for (struct stream *s = g_streams, *next; s; s = next) {
        next = s->next;
        if (s->peer == peer)
            stream_free(s);
    }
}

static void on_term(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    event_base_loopbreak(arg);
}

static int run_server(const char *addr)
{
    raise_nofile();
    g_base = event_base_new();
    g_payload = malloc(g_size);
    memset(g_payload, 0xab, g_size);
    const ProtobufCServiceDescriptor *sd = &perfetto__protos__consumer_port__descriptor;
    struct tg_ipc_method *methods = calloc(sd->n_methods, sizeof *methods);
    for (unsigned i = 0; i < sd->n_methods; i++) {
        methods[i].name = sd->methods[i].name;
        methods[i].request = sd->methods[i].input;
        if (strcmp(sd->methods[i].name, "ReadBuffers") == 0)
            methods[i].fn = m_read_buffers;
        else if (strcmp(sd->methods[i].name, "QueryCapabilities") == 0)
            methods[i].fn = m_small;
        else
            methods[i].fn = m_reject;
    }
    struct tg_ipc_service_def def = {.name = "ConsumerPort", .methods = methods, .n_methods = sd->n_methods,
                                     .peer_close = peer_close};
    struct tg_ipc_host_opts ho;
    memset(&ho, 0, sizeof ho);
    tg_conn_opts_default(&ho.conn);
    ho.conn.out_hard_limit = 1u << 30;
    ho.conn.out_high = 64u << 20; /* nobody listens to on_drain here */
    tg_ipc_host *h = tg_ipc_host_new(g_base, &ho);
    tg_ipc_host_add_service(h, &def, NULL);
    char err[256];
    if (tg_ipc_host_listen(h, addr, 0, err, sizeof err) != 0) {
        fprintf(stderr, "bench_gw: %s\n", err);
        return 1;
    }
    struct event *t1 = evsignal_new(g_base, SIGTERM, on_term, g_base);
    struct event *t2 = evsignal_new(g_base, SIGINT, on_term, g_base);
    event_add(t1, NULL);
    event_add(t2, NULL);
    fprintf(stderr, "bench_gw: serving on %s\n", addr);
    event_base_dispatch(g_base);
    while (g_streams)
        stream_free(g_streams);
    tg_ipc_host_free(h);
    event_free(t1);
    event_free(t2);
    event_base_free(g_base);
    free(methods);
    free(g_payload);
    return 0;
}

/* ------------------------------------------------------------ CPU use during a window */

/* A snapshot of every process: pid, parent, utime + stime (clock ticks, all threads). */
#define MAXP 8192
struct psnap {
    int n;
    pid_t pid[MAXP], ppid[MAXP];
    long long ticks[MAXP];
};

static void psnap_take(struct psnap *ps)
{
    ps->n = 0;
    DIR *d = opendir("/proc");
    if (!d)
        return;
    struct dirent *de;
    while ((de = readdir(d)) && ps->n < MAXP) {
        if (de->d_name[0] < '0' || de->d_name[0] > '9')
            continue;
        char path[300], buf[1024];
        snprintf(path, sizeof path, "/proc/%s/stat", de->d_name);
        FILE *f = fopen(path, "r");
        if (!f)
            continue;
        size_t got = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[got] = 0;
        char *rp = strrchr(buf, ')'); /* comm may hold spaces */
        if (!rp)
            continue;
        char state;
        int ppid;
        unsigned long long ut = 0, st = 0;
        /* after ")": state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime */
        if (sscanf(rp + 2, "%c %d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &state, &ppid, &ut, &st) != 4)
            continue;
        ps->pid[ps->n] = (pid_t)atoi(de->d_name);
        ps->ppid[ps->n] = ppid;
        ps->ticks[ps->n] = (long long)(ut + st);
        ps->n++;
    }
    closedir(d);
}

static int psnap_find(const struct psnap *ps, pid_t pid)
{
    for (int i = 0; i < ps->n; i++)
        if (ps->pid[i] == pid)
            return i;
    return -1;
}

/* Whether pid is root or one of its descendants in the snapshot. */
static int psnap_under(const struct psnap *ps, pid_t pid, pid_t root)
{
    for (int depth = 0; depth < 64 && pid > 1; depth++) {
        if (pid == root)
            return 1;
        int i = psnap_find(ps, pid);
        if (i < 0)
            return 0;
        pid = ps->ppid[i];
    }
    return 0;
}

#define MAX_WATCH 4
struct watch {
    char name[32];
    pid_t pid;
};
static struct watch g_watch[MAX_WATCH];
static int g_nwatch;
static struct psnap g_snap0, g_snap1;

/* Which watched tree a pid belongs to: 0..g_nwatch-1, g_nwatch for this process, -1 for others. */
static int owner_of(const struct psnap *ps, pid_t pid)
{
    if (pid == getpid())
        return g_nwatch;
    for (int w = 0; w < g_nwatch; w++)
        if (psnap_under(ps, pid, g_watch[w].pid))
            return w;
    return -1;
}

static void watch_start(void) { psnap_take(&g_snap0); }

/* Prints cpu_NAME=% for each watched tree and cpu_others=% (processes alive at both ends of the
 * window that belong to nobody here: other work on the machine disturbing the measurement). */
static void watch_print(double seconds)
{
    psnap_take(&g_snap1);
    long hz = sysconf(_SC_CLK_TCK);
    long long sum[MAX_WATCH + 1] = {0}, others = 0;
    for (int i = 0; i < g_snap1.n; i++) {
        int j = psnap_find(&g_snap0, g_snap1.pid[i]);
        long long before = j >= 0 ? g_snap0.ticks[j] : 0;
        int o = owner_of(&g_snap1, g_snap1.pid[i]);
        if (o >= 0)
            sum[o] += g_snap1.ticks[i] - before; /* a child born in the window counts whole */
        else if (j >= 0)
            others += g_snap1.ticks[i] - before;
    }
    for (int w = 0; w < g_nwatch; w++)
        printf(" cpu_%s=%.0f", g_watch[w].name, (double)sum[w] / (double)hz / seconds * 100);
    printf(" cpu_others=%.0f", (double)others / (double)hz / seconds * 100);
}

static double self_cpu(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 + (double)ru.ru_stime.tv_sec +
           (double)ru.ru_stime.tv_usec / 1e6;
}

/* ------------------------------------------------------------ lean client: transport */

#define RBUF (1u << 20)

struct rc {
    int fd;
    SSL_CTX *ctx;
    SSL *ssl;
    int ws;
    /* WebSocket receive state */
    uint8_t *wbuf;
    size_t wlen;      /* unparsed bytes at wbuf */
    uint64_t ws_left; /* payload bytes left in the current WS frame */
    int ws_data;      /* the current WS frame carries data (binary/continuation) */
    int ws_masked;
    uint8_t ws_mask[4];
    uint64_t ws_pos;
    int eof;
    char err[256];
};

static int tx_write_all(struct rc *r, const void *data, size_t len)
{
    const uint8_t *p = data;
    while (len > 0) {
        ssize_t n;
        if (r->ssl) {
            int k = SSL_write(r->ssl, p, (int)len);
            n = k > 0 ? k : -1;
        } else {
            n = send(r->fd, p, len, MSG_NOSIGNAL);
            if (n < 0 && errno == EINTR)
                continue;
        }
        if (n <= 0) {
            snprintf(r->err, sizeof r->err, "write failed: %s", r->ssl ? "TLS error" : strerror(errno));
            return -1;
        }
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

/* One read from the transport: >0 bytes, 0 EOF, -1 error. */
static ssize_t tx_read(struct rc *r, uint8_t *buf, size_t cap)
{
    for (;;) {
        if (r->ssl) {
            int k = SSL_read(r->ssl, buf, cap > (size_t)1 << 30 ? 1 << 30 : (int)cap);
            if (k > 0)
                return k;
            int e = SSL_get_error(r->ssl, k);
            if (e == SSL_ERROR_ZERO_RETURN)
                return 0;
            if (e == SSL_ERROR_WANT_READ)
                return -2; /* non-blocking socket (--conns): nothing to read now */
            if (e == SSL_ERROR_SYSCALL && ERR_peek_error() == 0)
                return 0; /* EOF without close_notify: the proxy went away */
            snprintf(r->err, sizeof r->err, "TLS read error %d", e);
            return -1;
        }
        ssize_t n = recv(r->fd, buf, cap, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return -2;
        if (n < 0)
            snprintf(r->err, sizeof r->err, "read failed: %s", strerror(errno));
        return n;
    }
}

/* ------------------------------------------------------------ lean client: IPC framing */

#define PREFIX 32

struct sink {
    int capture; /* keep whole frames (bind/rr phases) */
    uint8_t hdr[4];
    size_t hdr_have;
    size_t need;   /* body bytes still to come */
    size_t blen;   /* body length of the current frame */
    uint8_t *body; /* capture: the body; else its first PREFIX bytes */
    size_t have;
    uint64_t rid;  /* expected request id in stream mode */
    uint64_t frames, wire_bytes, bad, ended;
    int ready;     /* capture: a complete frame is in body[0..blen) */
};

/* Reads the request id, success and has_more from the start of an InvokeMethodReply frame. */
static int reply_prefix(const uint8_t *p, size_t n, uint64_t *rid, int *success, int *has_more)
{
    const uint8_t *end = p + n;
    *success = 0;
    *has_more = 0;
    *rid = 0;
    while (p < end) {
        uint64_t key, v;
        size_t k = tg_pb_read_varint(p, end, &key);
        if (!k)
            return -1;
        p += k;
        uint32_t field = (uint32_t)(key >> 3);
        if ((key & 7) == 0) {
            k = tg_pb_read_varint(p, end, &v);
            if (!k)
                return -1;
            p += k;
            if (field == 2)
                *rid = v;
            continue;
        }
        if ((key & 7) != 2 || field != 6)
            return -1;
        k = tg_pb_read_varint(p, end, &v); /* length of InvokeMethodReply */
        if (!k)
            return -1;
        p += k;
        while (p < end) {
            k = tg_pb_read_varint(p, end, &key);
            if (!k)
                return -1;
            p += k;
            if ((key >> 3) == 3 || (key & 7) != 0)
                return 0; /* reply_proto: the rest is payload */
            k = tg_pb_read_varint(p, end, &v);
            if (!k)
                return -1;
            p += k;
            if ((key >> 3) == 1)
                *success = (int)v;
            else if ((key >> 3) == 2)
                *has_more = (int)v;
        }
        return 0;
    }
    return -1;
}

static void frame_done(struct sink *s)
{
    s->frames++;
    s->wire_bytes += s->blen + TG_FRAME_HEADER_SIZE;
    if (s->capture) {
        s->ready = 1;
        return;
    }
    uint64_t rid;
    int ok, more;
    if (reply_prefix(s->body, s->have, &rid, &ok, &more) != 0 || rid != s->rid || !ok)
        s->bad++;
    else if (!more)
        s->ended = 1;
}

static void sink_feed(struct sink *s, const uint8_t *p, size_t n)
{
    while (n > 0) {
        if (s->need == 0) {
            while (s->hdr_have < 4 && n > 0) {
                s->hdr[s->hdr_have++] = *p++;
                n--;
            }
            if (s->hdr_have < 4)
                return;
            s->hdr_have = 0;
            s->blen = s->need = (size_t)s->hdr[0] | (size_t)s->hdr[1] << 8 | (size_t)s->hdr[2] << 16 |
                                (size_t)s->hdr[3] << 24;
            s->have = 0;
            if (s->need > TG_FRAME_MAX_DEFAULT) {
                s->bad++;
                s->need = 0;
                return;
            }
            if (s->need == 0)
                continue;
        }
        size_t take = n < s->need ? n : s->need;
        size_t keep = s->capture ? take : (s->have < PREFIX ? (PREFIX - s->have < take ? PREFIX - s->have : take) : 0);
        if (keep) {
            memcpy(s->body + s->have, p, keep);
            s->have += keep;
        }
        p += take;
        n -= take;
        s->need -= take;
        if (s->need == 0)
            frame_done(s);
    }
}

/* Unwraps WebSocket frames in r->wbuf[0..r->wlen) into the sink; keeps an incomplete header. */
static void ws_parse(struct rc *r, struct sink *s)
{
    uint8_t *b = r->wbuf;
    size_t len = r->wlen, p = 0;
    while (p < len) {
        if (r->ws_left > 0) {
            size_t take = len - p < r->ws_left ? len - p : (size_t)r->ws_left;
            if (r->ws_masked)
                for (size_t i = 0; i < take; i++)
                    b[p + i] ^= r->ws_mask[(r->ws_pos + i) & 3];
            if (r->ws_data)
                sink_feed(s, b + p, take);
            r->ws_pos += take;
            r->ws_left -= take;
            p += take;
            continue;
        }
        if (len - p < 2)
            break;
        unsigned op = b[p] & 0x0f, l7 = b[p + 1] & 0x7f, masked = b[p + 1] >> 7;
        size_t hl = 2 + (l7 == 126 ? 2 : l7 == 127 ? 8 : 0) + (masked ? 4 : 0);
        if (len - p < hl)
            break;
        uint64_t plen = l7;
        if (l7 == 126)
            plen = (uint64_t)b[p + 2] << 8 | b[p + 3];
        else if (l7 == 127) {
            plen = 0;
            for (int i = 0; i < 8; i++)
                plen = plen << 8 | b[p + 2 + i];
        }
        r->ws_masked = (int)masked;
        if (masked)
            memcpy(r->ws_mask, b + p + hl - 4, 4);
        r->ws_pos = 0;
        r->ws_left = plen;
        r->ws_data = op == 0x0 || op == 0x2;
        if (op == 0x8)
            r->eof = 1;
        if (op == 0x1) {
            s->bad++;
            r->eof = 1;
        }
        p += hl;
    }
    memmove(b, b + p, len - p);
    r->wlen = len - p;
}

/* One transport read fed through the layers. Returns bytes read, 0 at EOF, -1 on error, -2 when a
 * non-blocking socket has nothing yet. */
static ssize_t rc_pump(struct rc *r, struct sink *s, uint8_t *buf)
{
    if (r->eof)
        return 0;
    if (!r->ws) {
        ssize_t n = tx_read(r, buf, RBUF);
        if (n > 0)
            sink_feed(s, buf, (size_t)n);
        return n;
    }
    ssize_t n = tx_read(r, r->wbuf + r->wlen, RBUF - r->wlen);
    if (n > 0) {
        r->wlen += (size_t)n;
        ws_parse(r, s);
    }
    return n;
}

static int rc_send_frame(struct rc *r, const uint8_t *body, size_t len)
{
    uint8_t small[512], *out = small;
    static uint8_t *big; /* --upload's frames (this program is single-threaded) */
    static size_t big_cap;
    size_t n = 0;
    size_t most = len + 4 + TG_WS_FRAME_HEADER_MAX + 4; /* length prefix, header, mask key */
    if (most > sizeof small) {
        if (most > big_cap) {
            free(big);
            big_cap = most;
            if (!(big = malloc(big_cap))) {
                big_cap = 0;
                return -1;
            }
        }
        out = big;
    }
    if (r->ws) { /* one masked binary message per frame, like the Perfetto UI */
        size_t plen = len + 4;
        n = tg_ws_frame_header(out, 2 /* binary */, 1, plen);
        static const uint8_t mask[4] = {0x12, 0x34, 0x56, 0x78};
        memcpy(out + n, mask, 4);
        n += 4;
        size_t at = n;
        tg_frame_put_header(out + n, (uint32_t)len);
        memcpy(out + n + 4, body, len);
        n += plen;
        for (size_t i = 0; i < plen; i++)
            out[at + i] ^= mask[i & 3];
    } else {
        tg_frame_put_header(out, (uint32_t)len);
        memcpy(out + 4, body, len);
        n = len + 4;
    }
    return tx_write_all(r, out, n);
}

static int ws_handshake(struct rc *r, const char *host, int port, const char *path, const char *token)
{
    char req[1024];
    char proto[256] = "";
    if (token)
        snprintf(proto, sizeof proto, "Sec-WebSocket-Protocol: tracegate, tracegate.token.%s\r\n", token);
    int n = snprintf(req, sizeof req,
                     "GET %s HTTP/1.1\r\nHost: %s:%d\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                     "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n%s\r\n",
                     path, host, port, proto);
    if (tx_write_all(r, req, (size_t)n) != 0)
        return -1;
    /* read the response headers byte-exactly: anything after them is WebSocket data */
    size_t got = 0;
    char *resp = (char *)r->wbuf;
    while (got < 8192) {
        ssize_t k = tx_read(r, (uint8_t *)resp + got, 1);
        if (k <= 0) {
            snprintf(r->err, sizeof r->err, "WebSocket handshake: connection closed");
            return -1;
        }
        got++;
        if (got >= 4 && memcmp(resp + got - 4, "\r\n\r\n", 4) == 0)
            break;
    }
    resp[got] = 0;
    if (strncmp(resp, "HTTP/1.1 101", 12) != 0) {
        char *eol = strchr(resp, '\r');
        if (eol)
            *eol = 0;
        snprintf(r->err, sizeof r->err, "WebSocket handshake refused: %.200s", resp);
        return -1;
    }
    r->wlen = 0;
    r->ws = 1;
    return 0;
}

static int rc_open(struct rc *r, const char *url, const char *cacert, const char *token)
{
    memset(r, 0, sizeof *r);
    r->fd = -1;
    r->wbuf = malloc(RBUF + 16);
    const char *rest = url;
    int tls = 0, ws = 0;
    char host[256] = "", path[256] = "/traced", addr[512];
    int port = 0;
    if (strncmp(url, "unix:", 5) == 0) {
        snprintf(addr, sizeof addr, "%s", url + 5);
    } else {
        if (strncmp(url, "tcp://", 6) == 0)
            rest = url + 6;
        else if (strncmp(url, "tls://", 6) == 0)
            rest = url + 6, tls = 1;
        else if (strncmp(url, "ws://", 5) == 0)
            rest = url + 5, ws = 1;
        else {
            snprintf(r->err, sizeof r->err, "unsupported URL %s", url);
            return -1;
        }
        const char *slash = strchr(rest, '/');
        size_t hp = slash ? (size_t)(slash - rest) : strlen(rest);
        if (slash)
            snprintf(path, sizeof path, "%s", slash);
        snprintf(addr, sizeof addr, "%.*s", (int)hp, rest);
        const char *colon = strrchr(addr, ':');
        if (!colon) {
            snprintf(r->err, sizeof r->err, "no port in %s", url);
            return -1;
        }
        snprintf(host, sizeof host, "%.*s", (int)(colon - addr), addr);
        port = atoi(colon + 1);
    }
    struct tg_addr a;
    if (tg_addr_parse(addr, &a, r->err, sizeof r->err) != 0)
        return -1;
    r->fd = socket(a.family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (r->fd < 0 || connect(r->fd, (struct sockaddr *)&a.ss, a.len) != 0) {
        snprintf(r->err, sizeof r->err, "connect %.160s: %s", addr, strerror(errno));
        return -1;
    }
    if (a.family != AF_UNIX) {
        int one = 1;
        setsockopt(r->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    }
    if (tls) {
        r->ctx = SSL_CTX_new(TLS_client_method());
        if (cacert && SSL_CTX_load_verify_locations(r->ctx, cacert, NULL) != 1) {
            snprintf(r->err, sizeof r->err, "cannot load %s", cacert);
            return -1;
        }
        SSL_CTX_set_verify(r->ctx, cacert ? SSL_VERIFY_PEER : SSL_VERIFY_NONE, NULL);
        /* Read ahead into a 256 KiB buffer: one recv per many records instead of two per record
         * (header, then body), so the measuring client's system calls do not bound the TLS rows. */
        SSL_CTX_set_read_ahead(r->ctx, 1);
        SSL_CTX_set_default_read_buffer_len(r->ctx, 256u << 10);
        r->ssl = SSL_new(r->ctx);
        SSL_set_fd(r->ssl, r->fd);
        SSL_set_tlsext_host_name(r->ssl, "localhost");
        SSL_set1_host(r->ssl, "localhost");
        if (SSL_connect(r->ssl) != 1) {
            snprintf(r->err, sizeof r->err, "TLS handshake failed: %s",
                     ERR_reason_error_string(ERR_get_error()) ? ERR_reason_error_string(ERR_get_error()) : "?");
            return -1;
        }
    }
    if (ws && ws_handshake(r, host, port, path, token) != 0)
        return -1;
    return 0;
}

static void rc_close(struct rc *r)
{
    if (r->ssl) {
        SSL_free(r->ssl);
        r->ssl = NULL;
    }
    if (r->ctx)
        SSL_CTX_free(r->ctx);
    if (r->fd >= 0)
        close(r->fd);
    free(r->wbuf);
}

/* Waits for one whole frame in capture mode. Returns 0 or -1. */
static int rc_wait_frame(struct rc *r, struct sink *s, uint8_t *buf)
{
    while (!s->ready) {
        ssize_t n = rc_pump(r, s, buf);
        if (n <= 0) {
            if (!r->err[0])
                snprintf(r->err, sizeof r->err, "connection closed");
            return -1;
        }
    }
    s->ready = 0;
    return 0;
}

struct methods {
    uint32_t read_buffers, query_caps;
};

static void collect(void *arg, uint32_t id, const char *name, size_t nl)
{
    struct methods *m = arg;
    if (nl == 11 && memcmp(name, "ReadBuffers", 11) == 0)
        m->read_buffers = id;
    else if (nl == 17 && memcmp(name, "QueryCapabilities", 17) == 0)
        m->query_caps = id;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void print_latency(long n, double *lat)
{
    double sum = 0;
    for (long i = 0; i < n; i++)
        sum += lat[i];
    qsort(lat, (size_t)n, sizeof *lat, cmp_double);
    printf("calls=%ld p50_us=%.1f p90_us=%.1f p99_us=%.1f p10_us=%.1f mean_us=%.1f", n, lat[n / 2],
           lat[(n * 9) / 10], lat[(n * 99) / 100], lat[n / 10], n ? sum / (double)n : 0.0);
}

/* Opens url and binds ConsumerPort (s in capture mode, its body allocated by the caller).
 * Returns 0 with *sid and *m set, or -1 (printed). */
static int lean_bind(struct rc *r, struct sink *s, uint8_t *buf, const char *url, const char *cacert,
                     const char *token, uint32_t *sid, struct methods *m)
{
    if (rc_open(r, url, cacert, token) != 0) {
        fprintf(stderr, "bench_gw: %s: %s\n", url, r->err);
        return -1;
    }
    uint8_t f[300];
    size_t fl = tg_ipc_encode_bind(f, sizeof f, 1, "ConsumerPort");
    struct tg_frame_info fi;
    if (rc_send_frame(r, f, fl) != 0 || rc_wait_frame(r, s, buf) != 0 || tg_frame_scan(s->body, s->blen, &fi) != 0 ||
        fi.msg != TG_MSG_BIND_SERVICE_REPLY) {
        fprintf(stderr, "bench_gw: %s: bind failed: %s\n", url, r->err);
        return -1;
    }
    int ok = 0;
    memset(m, 0, sizeof *m);
    if (tg_ipc_parse_bind_reply(fi.msg_data, fi.msg_len, &ok, sid, collect, m) != 0 || !ok || !m->read_buffers ||
        !m->query_caps) {
        fprintf(stderr, "bench_gw: %s: ConsumerPort not offered\n", url);
        return -1;
    }
    return 0;
}

/* --stalls: paced calls for `seconds`; every gap of at least stall_ms between two replies is
 * printed as it ends (CLOCK_MONOTONIC seconds, comparable with other processes' clocks), so a
 * script can tell when a cut connection carried calls again. */
static int run_stalls(struct rc *r, struct sink *s, uint8_t *buf, uint32_t sid, uint32_t method, long max_calls,
                      double seconds, double stall_ms, long pace_us)
{
    uint8_t f[300];
    double t_start = now_s(), last = t_start, worst = 0;
    long i, stalls = 0;
    for (i = 0; i < max_calls && now_s() - t_start < seconds; i++) {
        size_t fl = tg_ipc_encode_invoke(f, sizeof f, (uint64_t)(i + 2), sid, method, NULL, 0, 0);
        if (rc_send_frame(r, f, fl) != 0 || rc_wait_frame(r, s, buf) != 0) {
            fprintf(stderr, "bench_gw: call %ld failed: %s\n", i, r->err);
            return 1;
        }
        uint64_t rid;
        int ok, more;
        if (reply_prefix(s->body, s->blen, &rid, &ok, &more) != 0 || rid != (uint64_t)(i + 2) || !ok) {
            /* a resumed link must lose and duplicate nothing: every reply answers its own call */
            printf("calls=%ld wrong_reply=1 expected_id=%ld got_id=%llu\n", i, i + 2, (unsigned long long)rid);
            return 1;
        }
        double t = now_s();
        if ((t - last) * 1e3 >= stall_ms) {
            printf("stall start=%.6f end=%.6f ms=%.1f\n", last, t, (t - last) * 1e3);
            fflush(stdout);
            stalls++;
        }
        if (t - last > worst)
            worst = t - last;
        last = t;
        if (pace_us > 0)
            usleep((useconds_t)pace_us);
    }
    printf("calls=%ld stalls=%ld longest_gap_ms=%.1f\n", i, stalls, worst * 1e3);
    return 0;
}

/* --upload BYTES: QueryCapabilities calls whose arguments carry BYTES of payload (one field the
 * server does not know and skips), UPLOAD_WINDOW of them in flight, for `seconds` after the
 * warm-up. Request ids are 5-byte varints from 2^28 up, so the frame is encoded once and only its
 * id is rewritten per call. Prints the same line as the stream, counting the IPC bytes sent. */
#define UPLOAD_WINDOW 16
static int run_upload(struct rc *r, struct sink *s, uint8_t *buf, uint32_t sid, uint32_t method, size_t size,
                      double seconds, double warmup)
{
    size_t args_len = 1 + (size_t)tg_pb_varint_size(size) + size;
    uint8_t *args = malloc(args_len), *f = malloc(args_len + 64);
    int rc = 1;
    if (!args || !f)
        goto out;
    size_t a = tg_pb_put_tag(args, 15, TG_PB_LEN); /* a field the server does not know */
    a += tg_pb_put_varint(args + a, size);
    memset(args + a, 'u', size);
    uint64_t rid = 1ull << 28;
    size_t fl = tg_ipc_encode_invoke(f, args_len + 64, rid, sid, method, args, args_len, 0);
    if (!fl || f[0] != ((2u << 3) | 0u) || fl + 4 > TG_FRAME_MAX_DEFAULT) {
        fprintf(stderr, "bench_gw: --upload %zu: the frame does not fit (at most %u bytes)\n", size,
                TG_FRAME_MAX_DEFAULT);
        goto out;
    }
    double t_start = now_s(), t0 = 0, c0 = 0;
    uint64_t calls = 0, c_at0 = 0, inflight = 0;
    int measuring = 0;
    for (;;) {
        while (inflight < UPLOAD_WINDOW) {
            tg_pb_put_varint(f + 1, rid + calls); /* after the field key; 5 bytes from 2^28 to 2^35 */
            if (rc_send_frame(r, f, fl) != 0) {
                fprintf(stderr, "bench_gw: upload call %llu: %s\n", (unsigned long long)calls, r->err);
                goto out;
            }
            calls++;
            inflight++;
        }
        if (rc_wait_frame(r, s, buf) != 0) {
            fprintf(stderr, "bench_gw: upload: %s\n", r->err);
            goto out;
        }
        inflight--;
        double t = now_s();
        if (!measuring && t - t_start >= warmup) {
            measuring = 1;
            t0 = t;
            c_at0 = calls - inflight; /* counted once answered */
            c0 = self_cpu();
            watch_start();
        } else if (measuring && t - t0 >= seconds) {
            break;
        }
    }
    double dt = now_s() - t0;
    uint64_t done = calls - inflight - c_at0;
    printf("frames=%llu bytes=%llu seconds=%.3f frames_per_s=%.0f mb_per_s=%.1f cpu_client=%.0f",
           (unsigned long long)done, (unsigned long long)(done * (fl + 4)), dt, (double)done / dt,
           (double)(done * (fl + 4)) / dt / 1e6, (self_cpu() - c0) / dt * 100);
    watch_print(dt);
    printf(" upload=1\n");
    rc = 0;
out:
    free(args);
    free(f);
    return rc;
}

static int run_lean(const char *url, long rr, double seconds, double warmup, const char *cacert, const char *token,
                    double stall_ms, long pace_us, size_t upload)
{
    struct rc r;
    uint8_t *buf = malloc(RBUF);
    struct sink s;
    memset(&s, 0, sizeof s);
    memset(&r, 0, sizeof r);
    r.fd = -1;
    s.body = malloc(TG_FRAME_MAX_DEFAULT);
    s.capture = 1;
    int rc = 1;
    uint8_t f[300];
    size_t fl;
    struct methods m;
    uint32_t sid = 0;
    if (lean_bind(&r, &s, buf, url, cacert, token, &sid, &m) != 0)
        goto out;
    const char *cipher = r.ssl ? SSL_get_cipher_name(r.ssl) : NULL;
    if (stall_ms > 0) {
        rc = run_stalls(&r, &s, buf, sid, m.query_caps, rr > 0 ? rr : 1L << 40, seconds, stall_ms, pace_us);
        goto out;
    }
    if (upload > 0) {
        rc = run_upload(&r, &s, buf, sid, m.query_caps, upload, seconds, warmup);
        goto out;
    }
    if (rr > 0) {
        double *lat = calloc((size_t)rr, sizeof *lat);
        long i;
        for (i = 0; i < rr; i++) {
            fl = tg_ipc_encode_invoke(f, sizeof f, (uint64_t)(i + 2), sid, m.query_caps, NULL, 0, 0);
            double t0 = now_s();
            if (rc_send_frame(&r, f, fl) != 0 || rc_wait_frame(&r, &s, buf) != 0) {
                fprintf(stderr, "bench_gw: call %ld failed: %s\n", i, r.err);
                break;
            }
            lat[i] = (now_s() - t0) * 1e6;
        }
        if (i == rr) {
            print_latency(rr, lat);
            printf("\n");
            rc = 0;
        }
        free(lat);
        goto out;
    }
    fl = tg_ipc_encode_invoke(f, sizeof f, 2, sid, m.read_buffers, NULL, 0, 0);
    s.capture = 0;
    s.rid = 2;
    if (rc_send_frame(&r, f, fl) != 0) {
        fprintf(stderr, "bench_gw: %s\n", r.err);
        goto out;
    }
    double t_start = now_s(), t0 = 0, c0 = 0;
    uint64_t f0 = 0, b0 = 0;
    int measuring = 0;
    for (;;) {
        ssize_t n = rc_pump(&r, &s, buf);
        if (n <= 0 || s.ended || s.bad)
            break;
        double t = now_s();
        if (!measuring && t - t_start >= warmup) {
            measuring = 1;
            t0 = t;
            f0 = s.frames;
            b0 = s.wire_bytes;
            c0 = self_cpu();
            watch_start();
        } else if (measuring && t - t0 >= seconds) {
            break;
        }
    }
    double dt = now_s() - t0;
    if (!measuring || s.bad) {
        fprintf(stderr, "bench_gw: stream ended early (frames=%llu bad=%llu ended=%llu: %s)\n",
                (unsigned long long)s.frames, (unsigned long long)s.bad, (unsigned long long)s.ended, r.err);
        goto out;
    }
    printf("frames=%llu bytes=%llu seconds=%.3f frames_per_s=%.0f mb_per_s=%.1f cpu_client=%.0f",
           (unsigned long long)(s.frames - f0), (unsigned long long)(s.wire_bytes - b0), dt,
           (double)(s.frames - f0) / dt, (double)(s.wire_bytes - b0) / dt / 1e6, (self_cpu() - c0) / dt * 100);
    watch_print(dt);
    if (cipher)
        printf(" cipher=%s", cipher);
    printf("\n");
    rc = 0;
out:
    rc_close(&r);
    free(buf);
    free(s.body);
    return rc;
}

/* ------------------------------------------------------------ lean client: many streams at once */

#define MULTI_TURN (256u * 1024u) /* bytes read from one connection per poll turn, at most (about) */

/* --conns N: N connections, each bound and streaming ReadBuffers, read round-robin (at most
 * MULTI_TURN per connection and turn, so the client itself favours none of them). Prints the
 * aggregate MB/s, the slowest and fastest connection's MB/s, min_share = slowest / (aggregate / N)
 * (1 = perfectly fair) and each connection's MB/s. */
static int run_multi(const char *url, int n, double seconds, double warmup, const char *cacert, const char *token)
{
    struct rc *r = calloc((size_t)n, sizeof *r);
    struct sink *s = calloc((size_t)n, sizeof *s);
    uint64_t *b0 = calloc((size_t)n, sizeof *b0);
    struct pollfd *pfd = calloc((size_t)n, sizeof *pfd);
    uint8_t *buf = malloc(RBUF);
    int opened = 0, rc = 1;
    for (int i = 0; i < n; i++)
        r[i].fd = -1;
    for (; opened < n; opened++) {
        struct methods m;
        uint32_t sid;
        s[opened].body = malloc(TG_FRAME_MAX_DEFAULT);
        s[opened].capture = 1;
        if (lean_bind(&r[opened], &s[opened], buf, url, cacert, token, &sid, &m) != 0) {
            opened++;
            goto out;
        }
        uint8_t f[300];
        size_t fl = tg_ipc_encode_invoke(f, sizeof f, 2, sid, m.read_buffers, NULL, 0, 0);
        if (rc_send_frame(&r[opened], f, fl) != 0) {
            fprintf(stderr, "bench_gw: connection %d: %s\n", opened, r[opened].err);
            opened++;
            goto out;
        }
        s[opened].capture = 0;
        s[opened].rid = 2;
    }
    for (int i = 0; i < n; i++)
        fcntl(r[i].fd, F_SETFL, fcntl(r[i].fd, F_GETFL) | O_NONBLOCK);
    double t_start = now_s(), t0 = 0, c0 = 0, t = t_start;
    int measuring = 0;
    for (;;) {
        int pending = 0;
        for (int i = 0; i < n; i++) {
            pfd[i].fd = r[i].fd;
            pfd[i].events = POLLIN;
            pfd[i].revents = 0;
            if (r[i].ssl && SSL_pending(r[i].ssl) > 0)
                pending = 1;
        }
        if (poll(pfd, (nfds_t)n, pending ? 0 : 1000) < 0 && errno != EINTR)
            break;
        for (int i = 0; i < n; i++) {
            if (!(pfd[i].revents & (POLLIN | POLLHUP | POLLERR)) && !(r[i].ssl && SSL_pending(r[i].ssl) > 0))
                continue;
            size_t got = 0;
            while (got < MULTI_TURN) {
                ssize_t k = rc_pump(&r[i], &s[i], buf);
                if (k == -2)
                    break;
                if (k <= 0 || s[i].ended || s[i].bad) {
                    fprintf(stderr, "bench_gw: connection %d: stream ended early (frames=%llu bad=%llu: %s)\n", i,
                            (unsigned long long)s[i].frames, (unsigned long long)s[i].bad, r[i].err);
                    goto out;
                }
                got += (size_t)k;
            }
        }
        t = now_s();
        if (!measuring && t - t_start >= warmup) {
            measuring = 1;
            t0 = t;
            for (int i = 0; i < n; i++)
                b0[i] = s[i].wire_bytes;
            c0 = self_cpu();
            watch_start();
        } else if (measuring && t - t0 >= seconds) {
            break;
        }
    }
    if (!measuring)
        goto out;
    double dt = t - t0, total = 0, lo = 0, hi = 0;
    for (int i = 0; i < n; i++) {
        double mb = (double)(s[i].wire_bytes - b0[i]) / dt / 1e6;
        total += mb;
        if (i == 0 || mb < lo)
            lo = mb;
        if (i == 0 || mb > hi)
            hi = mb;
    }
    printf("conns=%d seconds=%.3f mb_per_s=%.1f min_mb_per_s=%.2f max_mb_per_s=%.2f min_share=%.3f cpu_client=%.0f", n,
           dt, total, lo, hi, total > 0 ? lo / (total / n) : 0, (self_cpu() - c0) / dt * 100);
    watch_print(dt);
    printf(" per_conn_mb_per_s=");
    for (int i = 0; i < n; i++)
        printf("%s%.1f", i ? "," : "", (double)(s[i].wire_bytes - b0[i]) / dt / 1e6);
    printf("\n");
    rc = 0;
out:
    for (int i = 0; i < opened; i++) {
        rc_close(&r[i]);
        free(s[i].body);
    }
    free(r);
    free(s);
    free(b0);
    free(pfd);
    free(buf);
    return rc;
}

/* ------------------------------------------------------------ full client (tracectl's) */

struct full_stats {
    uint64_t frames, bytes;
    double t_start, t0, c0, seconds, warmup;
    uint64_t f0, b0;
    int measuring, done;
};

static int on_part(void *arg, const uint8_t *reply, size_t len, int has_more)
{
    struct full_stats *st = arg;
    (void)reply;
    st->frames++;
    st->bytes += len;
    double t = now_s();
    if (!st->measuring && t - st->t_start >= st->warmup) {
        st->measuring = 1;
        st->t0 = t;
        st->f0 = st->frames;
        st->b0 = st->bytes;
        st->c0 = self_cpu();
        watch_start();
    } else if (st->measuring && t - st->t0 >= st->seconds) {
        st->done = 1;
        return 1;
    }
    if (!has_more && st->measuring)
        st->done = 1; /* a finite stream (server --frames) ended inside the window */
    return !has_more;
}

static int run_full(const char *url, long rr, double seconds, double warmup, struct tc_opts *opts)
{
    struct tc_rpc rpc;
    opts->endpoint = url;
    if (tc_rpc_open(&rpc, opts, "ConsumerPort") != 0) {
        fprintf(stderr, "bench_gw: %s: %s\n", url, rpc.error);
        tc_rpc_close(&rpc);
        return 1;
    }
    int rc = 0;
    if (rr == 0) {
        struct full_stats st;
        memset(&st, 0, sizeof st);
        st.seconds = seconds;
        st.warmup = warmup;
        st.t_start = now_s();
        tc_rpc_call(&rpc, "ReadBuffers", NULL, 0, -1, on_part, &st, (int)((seconds + warmup) * 1000) + 30000);
        double dt = now_s() - st.t0;
        if (!st.done) {
            fprintf(stderr, "bench_gw: stream failed: %s\n", rpc.error);
            rc = 1;
        } else {
            /* reply payload bytes; add the ~13 bytes of frame header + IPCFrame fields per frame */
            uint64_t frames = st.frames - st.f0;
            uint64_t wire = st.bytes - st.b0 + frames * 13;
            printf("frames=%llu bytes=%llu seconds=%.3f frames_per_s=%.0f mb_per_s=%.1f cpu_client=%.0f",
                   (unsigned long long)frames, (unsigned long long)wire, dt, (double)frames / dt, (double)wire / dt / 1e6,
                   (self_cpu() - st.c0) / dt * 100);
            watch_print(dt);
            printf("\n");
        }
    } else {
        double *lat = calloc((size_t)rr, sizeof *lat);
        for (long i = 0; i < rr && rc == 0; i++) {
            double t0 = now_s();
            if (tc_rpc_call(&rpc, "QueryCapabilities", NULL, 0, -1, NULL, NULL, 10000) != 0) {
                fprintf(stderr, "bench_gw: call failed: %s\n", rpc.error);
                rc = 1;
            }
            lat[i] = (now_s() - t0) * 1e6;
        }
        if (rc == 0) {
            print_latency(rr, lat);
            printf("\n");
        }
        free(lat);
    }
    tc_rpc_close(&rpc);
    return rc;
}

/* ------------------------------------------------------------ idle connections */

static long rss_kb(pid_t pid)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    long kb = -1;
    while (fgets(line, sizeof line, f))
        if (strncmp(line, "VmRSS:", 6) == 0)
            kb = atol(line + 6);
    fclose(f);
    return kb;
}

static long fd_count(pid_t pid)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/fd", (int)pid);
    DIR *d = opendir(path);
    if (!d)
        return -1;
    long n = 0;
    while (readdir(d))
        n++;
    closedir(d);
    return n - 2;
}

static int run_idle(const char *url, long conns, pid_t pid, double hold)
{
    raise_nofile();
    struct rlimit rl;
    getrlimit(RLIMIT_NOFILE, &rl);
    if (rl.rlim_cur < (rlim_t)conns + 64) {
        rl.rlim_cur = rl.rlim_max = (rlim_t)conns + 1024; /* root may raise the hard limit */
        if (setrlimit(RLIMIT_NOFILE, &rl) != 0) {
            fprintf(stderr, "bench_gw: RLIMIT_NOFILE too low for %ld connections\n", conns);
            return 1;
        }
    }
    const char *addr = strncmp(url, "tcp://", 6) == 0 ? url + 6 : url;
    struct tg_addr a;
    char err[256];
    if (tg_addr_parse(addr, &a, err, sizeof err) != 0) {
        fprintf(stderr, "bench_gw: %s\n", err);
        return 1;
    }
    int *fds = malloc((size_t)conns * sizeof *fds);
    long rss0 = pid > 0 ? rss_kb(pid) : -1, fds0 = pid > 0 ? fd_count(pid) : -1;
    uint8_t bind[64], frame[68];
    size_t bl = tg_ipc_encode_bind(bind, sizeof bind, 1, "ConsumerPort");
    tg_frame_put_header(frame, (uint32_t)bl);
    memcpy(frame + 4, bind, bl);
    long opened = 0, bound = 0;
    const long batch = 100; /* under the upstream's listen backlog (128): see docs/benchmarks.md */
    double t0 = now_s();
    uint8_t rbuf[4096];
    while (opened < conns) {
        long first = opened;
        for (; opened < conns && opened - first < batch; opened++) {
            int fd = socket(a.family, SOCK_STREAM | SOCK_CLOEXEC, 0);
            if (fd < 0 || connect(fd, (struct sockaddr *)&a.ss, a.len) != 0 ||
                send(fd, frame, bl + 4, MSG_NOSIGNAL) != (ssize_t)(bl + 4)) {
                fprintf(stderr, "bench_gw: connection %ld: %s\n", opened, strerror(errno));
                if (fd >= 0)
                    close(fd);
                goto done;
            }
            fds[opened] = fd;
        }
        /* every connection of the batch must get its BindServiceReply */
        for (long i = first; i < opened; i++) {
            struct pollfd pfd = {fds[i], POLLIN, 0};
            if (poll(&pfd, 1, 10000) != 1) {
                fprintf(stderr, "bench_gw: connection %ld: no bind reply within 10 s\n", i);
                continue;
            }
            ssize_t n = recv(fds[i], rbuf, sizeof rbuf, 0);
            if (n > 8)
                bound++;
            else
                fprintf(stderr, "bench_gw: connection %ld: closed by the gateway before binding\n", i);
        }
    }
done:;
    double t_open = now_s() - t0;
    usleep(500000);
    long rss1 = pid > 0 ? rss_kb(pid) : -1, fds1 = pid > 0 ? fd_count(pid) : -1;
    if (hold > 0)
        usleep((useconds_t)(hold * 1e6));
    long rss2 = pid > 0 ? rss_kb(pid) : -1;
    printf("conns=%ld bound=%ld open_seconds=%.2f rss_before_kb=%ld rss_after_kb=%ld rss_held_kb=%ld "
           "per_conn_bytes=%.0f fds_before=%ld fds_after=%ld\n",
           opened, bound, t_open, rss0, rss1, rss2, bound ? (double)(rss1 - rss0) * 1024 / (double)bound : 0, fds0,
           fds1);
    for (long i = 0; i < opened; i++)
        close(fds[i]);
    free(fds);
    return bound == conns ? 0 : 1;
}

/* ------------------------------------------------------------ main */

int main(int argc, char **argv)
{
    signal(SIGPIPE, SIG_IGN);
    tg_log_set_level(TG_LOG_WARN);
    tg_malloc_tune_for_streams(); /* as tracectl and tracegated: --full measures tracectl's client */
    if (argc >= 3 && strcmp(argv[1], "server") == 0) {
        for (int i = 3; i + 1 < argc; i += 2) {
            if (strcmp(argv[i], "--frames") == 0)
                g_frames = atol(argv[i + 1]);
            else if (strcmp(argv[i], "--size") == 0)
                g_size = (size_t)atol(argv[i + 1]);
        }
        if (g_size == 0 || g_size > TG_FRAME_MAX_DEFAULT - 64) {
            fprintf(stderr, "bench_gw: --size must be 1..%u\n", TG_FRAME_MAX_DEFAULT - 64);
            return 2;
        }
        return run_server(argv[2]);
    }
    if (argc >= 3 && strcmp(argv[1], "client") == 0) {
        struct tc_opts opts;
        memset(&opts, 0, sizeof opts);
        opts.timeout_ms = 10000;
        long rr = 0, pace_us = 1000;
        size_t upload = 0;
        double seconds = 2.0, warmup = 0.3, stall_ms = 0;
        int full = 0, conns = 0;
        for (int i = 3; i < argc; i++) {
            if (strcmp(argv[i], "--rr") == 0 && i + 1 < argc) {
                rr = atol(argv[++i]);
            } else if (strcmp(argv[i], "--seconds") == 0 && i + 1 < argc) {
                seconds = atof(argv[++i]);
            } else if (strcmp(argv[i], "--warmup") == 0 && i + 1 < argc) {
                warmup = atof(argv[++i]);
            } else if (strcmp(argv[i], "--cacert") == 0 && i + 1 < argc) {
                opts.creds.cacert = argv[++i];
            } else if (strcmp(argv[i], "--token") == 0 && i + 1 < argc) {
                opts.creds.token = argv[++i];
            } else if (strcmp(argv[i], "--conns") == 0 && i + 1 < argc) {
                conns = atoi(argv[++i]);
            } else if (strcmp(argv[i], "--stalls") == 0 && i + 1 < argc) {
                stall_ms = atof(argv[++i]);
            } else if (strcmp(argv[i], "--pace") == 0 && i + 1 < argc) {
                pace_us = atol(argv[++i]);
            } else if (strcmp(argv[i], "--upload") == 0 && i + 1 < argc) {
                upload = (size_t)atol(argv[++i]);
            } else if (strcmp(argv[i], "--full") == 0) {
                full = 1;
            } else if (strcmp(argv[i], "--watch") == 0 && i + 1 < argc && g_nwatch < MAX_WATCH) {
                const char *w = argv[++i], *eq = strchr(w, '=');
                if (!eq)
                    continue;
                snprintf(g_watch[g_nwatch].name, sizeof g_watch[g_nwatch].name, "%.*s", (int)(eq - w), w);
                g_watch[g_nwatch].pid = (pid_t)atoi(eq + 1);
                g_nwatch++;
            }
        }
        if (full)
            return run_full(argv[2], rr, seconds, warmup, &opts);
        if (conns > 1 && rr == 0 && stall_ms <= 0)
            return run_multi(argv[2], conns, seconds, warmup, opts.creds.cacert, opts.creds.token);
        return run_lean(argv[2], rr, seconds, warmup, opts.creds.cacert, opts.creds.token, stall_ms, pace_us, upload);
    }
    if (argc >= 3 && strcmp(argv[1], "idle") == 0) {
        long conns = 10000;
        pid_t pid = 0;
        double hold = 0;
        for (int i = 3; i + 1 < argc; i += 2) {
            if (strcmp(argv[i], "--conns") == 0)
                conns = atol(argv[i + 1]);
            else if (strcmp(argv[i], "--pid") == 0)
                pid = (pid_t)atoi(argv[i + 1]);
            else if (strcmp(argv[i], "--hold") == 0)
                hold = atof(argv[i + 1]);
        }
        return run_idle(argv[2], conns, pid, hold);
    }
    fprintf(stderr, "usage: bench_gw server ADDR [--frames N] [--size BYTES]\n"
                    "       bench_gw client URL [--seconds S] [--warmup S] [--rr N] [--cacert FILE] [--token T]\n"
                    "                           [--full] [--watch NAME=PID]... [--conns N]\n"
                    "                           [--stalls MS [--pace US]] [--upload BYTES]\n"
                    "       bench_gw idle tcp://HOST:PORT [--conns N] [--pid PID] [--hold S]\n");
    return 2;
}
