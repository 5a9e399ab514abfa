/* bench_ipc.c: throughput of a streamed IPC reply (tg_ipc_host -> tg_ipc_client) next to a plain
 * blocking write()/read() loop moving frames of the same size, both over an AF_UNIX socketpair.
 *
 * The host runs in its own thread and event loop and streams InvokeMethodReply frames (has_more=1)
 * as fast as the connection drains, as ReadBuffers does; the client counts the replies it is handed
 * for a fixed window. The plain loop has a writer thread doing write() of whole frames and a reader
 * doing read() and walking the length prefixes. Prints frames/s and MB/s (wire bytes: header +
 * IPCFrame) for 64 KiB and 64-byte payloads, and IPC/plain.
 *
 * Usage: bench_ipc [seconds-per-run]   (default 1.5) */
#include <errno.h>
#include <event2/event.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "tracegate/conn.h"
#include "tracegate/frame.h"
#include "tracegate/ipc_client.h"
#include "tracegate/ipc_host.h"
#include "tracegate/ipc_wire.h"
#include "tracegate/log.h"

static double g_seconds = 1.5;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

struct result {
    double frames_per_s, mb_per_s;
};

/* ------------------------------------------------------------ IPC side */

struct host_side {
    struct event_base *base;
    tg_ipc_host *host;
    size_t payload;
    uint8_t *buf;
};

struct stream_state {
    struct host_side *hs;
    tg_ipc_peer *peer;
    tg_ipc_call *call;
    struct event *pump;
};

/* Keeps up to 16 MiB queued; re-checks at once while there is room, else after 1 ms (no spinning
 * while the socket drains: the host thread would steal the CPU the client needs). */
static void pump_cb(evutil_socket_t fd, short what, void *arg)
{
    struct stream_state *st = arg;
    (void)fd;
    (void)what;
    while (st->call && tg_ipc_peer_output_len(st->peer) < (16u << 20))
        if (tg_ipc_call_reply_bytes(st->call, st->hs->buf, st->hs->payload, 1, -1) != 0)
            return; /* closing: peer_close follows */
    if (st->call) {
        struct timeval tv = {0, tg_ipc_peer_output_len(st->peer) < (8u << 20) ? 0 : 1000};
        event_add(st->pump, &tv);
    }
}

static void *peer_open(tg_ipc_peer *peer, void *svc_ctx)
{
    struct stream_state *st = calloc(1, sizeof *st);
    if (!st)
        abort();
    st->hs = svc_ctx;
    st->peer = peer;
    st->pump = event_new(st->hs->base, -1, 0, pump_cb, st);
    return st;
}

static void peer_close(tg_ipc_peer *peer, void *peer_state, void *svc_ctx)
{
    struct stream_state *st = peer_state;
    struct host_side *hs = svc_ctx;
    (void)peer;
    event_free(st->pump);
    free(st);
    event_base_loopbreak(hs->base); /* the client is gone: the run is over */
}

static void m_stream(tg_ipc_call *call, const ProtobufCMessage *req, void *svc_ctx, void *peer_state)
{
    struct stream_state *st = peer_state;
    (void)req;
    (void)svc_ctx;
    st->call = call;
    static const struct timeval zero = {0, 0};
    event_add(st->pump, &zero);
}

static const struct tg_ipc_method k_methods[] = {{"Stream", NULL, m_stream}};
static const struct tg_ipc_service_def k_svc = {
    .name = "BenchPort", .methods = k_methods, .n_methods = 1, .peer_open = peer_open, .peer_close = peer_close};

static void *host_thread(void *arg)
{
    struct host_side *hs = arg;
    event_base_dispatch(hs->base);
    return NULL;
}

struct client_side {
    struct event_base *base;
    tg_ipc_client *cli;
    tg_ipc_service_proxy *proxy;
    struct event *timer;
    int measuring;
    uint64_t frames, frames0, bytes0;
    double t0;
    /* the measured window */
    double elapsed;
    uint64_t frames_measured, bytes_measured;
};

static void on_bind(tg_ipc_client *cli, tg_ipc_service_proxy *proxy, void *arg)
{
    struct client_side *cs = arg;
    (void)cli;
    cs->proxy = proxy;
    event_base_loopbreak(cs->base);
}

static void on_reply(tg_ipc_client *cli, int success, int has_more, const uint8_t *reply, size_t len, void *arg)
{
    struct client_side *cs = arg;
    (void)cli;
    (void)reply;
    (void)len;
    if (!success || !has_more) {
        fprintf(stderr, "bench_ipc: stream ended early\n");
        exit(1);
    }
    cs->frames++;
}

/* Fires twice: at the end of the warm-up (start counting) and at the end of the window. */
static void window_cb(evutil_socket_t fd, short what, void *arg)
{
    struct client_side *cs = arg;
    (void)fd;
    (void)what;
    struct tg_conn_stats st;
    tg_conn_get_stats(tg_ipc_client_conn(cs->cli), &st);
    if (!cs->measuring) {
        cs->measuring = 1;
        cs->frames0 = cs->frames;
        cs->bytes0 = st.bytes_in;
        cs->t0 = now_s();
        struct timeval tv = {(time_t)g_seconds, (suseconds_t)((g_seconds - (double)(time_t)g_seconds) * 1e6)};
        evtimer_add(cs->timer, &tv);
        return;
    }
    cs->elapsed = now_s() - cs->t0;
    cs->frames_measured = cs->frames - cs->frames0;
    cs->bytes_measured = st.bytes_in - cs->bytes0;
    event_base_loopbreak(cs->base);
}

static struct result run_ipc(size_t payload)
{
    int sp[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp) != 0) {
        perror("socketpair");
        exit(1);
    }
    struct host_side hs = {0};
    hs.base = event_base_new();
    hs.payload = payload;
    hs.buf = calloc(1, payload);
    hs.host = tg_ipc_host_new(hs.base, NULL);
    tg_ipc_host_add_service(hs.host, &k_svc, &hs);
    tg_ipc_host_adopt_fd(hs.host, sp[0]);
    pthread_t th;
    pthread_create(&th, NULL, host_thread, &hs);

    struct client_side cs = {0};
    cs.base = event_base_new();
    tg_conn *c = tg_conn_new_fd(cs.base, sp[1], NULL, NULL, NULL);
    cs.cli = tg_ipc_client_new(cs.base, c, NULL, &cs);
    tg_ipc_client_bind(cs.cli, "BenchPort", on_bind, &cs);
    event_base_dispatch(cs.base);
    if (!cs.proxy) {
        fprintf(stderr, "bench_ipc: bind failed\n");
        exit(1);
    }
    tg_ipc_client_invoke_bytes(cs.cli, cs.proxy, "Stream", NULL, 0, -1, on_reply, &cs);
    struct timeval warm = {0, 200000};
    cs.timer = evtimer_new(cs.base, window_cb, &cs);
    evtimer_add(cs.timer, &warm);
    event_base_dispatch(cs.base);
    event_free(cs.timer);

    struct result r;
    r.frames_per_s = (double)cs.frames_measured / cs.elapsed;
    r.mb_per_s = (double)cs.bytes_measured / cs.elapsed / 1e6;

    tg_ipc_client_free(cs.cli); /* the host's peer_close ends its loop */
    event_base_loop(cs.base, EVLOOP_NONBLOCK);
    pthread_join(th, NULL);
    tg_ipc_host_free(hs.host);
    event_base_free(hs.base);
    event_base_free(cs.base);
    free(hs.buf);
    return r;
}

/* ---------------------------------------------------------- plain side */

struct writer_arg {
    int fd;
    const uint8_t *frame;
    size_t frame_len;
};

static void *writer_thread(void *arg)
{
    struct writer_arg *wa = arg;
    /* many frames per write() would be unfair to the IPC path's per-frame work: one frame per write,
     * as a naive framed sender does */
    for (;;) {
        size_t off = 0;
        while (off < wa->frame_len) {
            ssize_t n = write(wa->fd, wa->frame + off, wa->frame_len - off);
            if (n < 0) {
                if (errno == EINTR)
                    continue;
                return NULL; /* reader closed */
            }
            off += (size_t)n;
        }
    }
}

static struct result run_plain(size_t payload)
{
    int sp[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp) != 0) {
        perror("socketpair");
        exit(1);
    }
    /* the same frame the IPC host sends: header + InvokeMethodReply around the payload */
    size_t body = tg_ipc_encode_reply(NULL, 0, 2, 1, 1, NULL, payload);
    uint8_t *frame = calloc(1, body + 4);
    uint8_t *pl = calloc(1, payload);
    tg_frame_put_header(frame, (uint32_t)body);
    tg_ipc_encode_reply(frame + 4, body, 2, 1, 1, pl, payload);
    free(pl);
    struct writer_arg wa = {sp[0], frame, body + 4};
    pthread_t th;
    pthread_create(&th, NULL, writer_thread, &wa);

    size_t cap = 256 << 10;
    uint8_t *buf = malloc(cap);
    uint64_t frames = 0, bytes = 0, f0 = 0, b0 = 0;
    size_t need = 0; /* bytes left of the current frame (header + body), 0 at a boundary */
    uint8_t hdr[4];
    size_t hdr_have = 0;
    double t0 = now_s(), t_start = 0;
    int measuring = 0;
    for (;;) {
        ssize_t n = read(sp[1], buf, cap);
        if (n <= 0)
            break;
        bytes += (uint64_t)n;
        /* walk the length prefixes, as a deserializer must */
        size_t p = 0;
        while (p < (size_t)n) {
            if (need == 0) {
                while (hdr_have < 4 && p < (size_t)n)
                    hdr[hdr_have++] = buf[p++];
                if (hdr_have < 4)
                    break;
                need = (size_t)hdr[0] | (size_t)hdr[1] << 8 | (size_t)hdr[2] << 16 | (size_t)hdr[3] << 24;
                hdr_have = 0;
                if (need == 0)
                    continue;
            }
            size_t take = (size_t)n - p < need ? (size_t)n - p : need;
            p += take;
            need -= take;
            if (need == 0)
                frames++;
        }
        double t = now_s();
        if (!measuring && t - t0 >= 0.2) {
            measuring = 1;
            t_start = t;
            f0 = frames;
            b0 = bytes;
        } else if (measuring && t - t_start >= g_seconds) {
            break;
        }
    }
    double dt = now_s() - t_start;
    struct result r = {(double)(frames - f0) / dt, (double)(bytes - b0) / dt / 1e6};
    shutdown(sp[1], SHUT_RDWR);
    close(sp[1]);
    pthread_join(th, NULL);
    close(sp[0]);
    free(buf);
    free(frame);
    return r;
}

int main(int argc, char **argv)
{
    if (argc > 1)
        g_seconds = atof(argv[1]) > 0 ? atof(argv[1]) : g_seconds;
    signal(SIGPIPE, SIG_IGN);
    tg_log_set_level(TG_LOG_WARN);
    static const struct {
        const char *label;
        size_t payload;
    } sizes[] = {{"64 KiB", 64 << 10}, {"64 B", 64}};
    printf("bench_ipc: streamed InvokeMethodReply over an AF_UNIX socketpair, %.1f s per run%s\n", g_seconds,
#if defined(__SANITIZE_ADDRESS__)
           " (ASan build: numbers are not representative)"
#else
           ""
#endif
    );
    printf("%-8s | %14s %10s | %14s %10s | %9s\n", "payload", "ipc frames/s", "ipc MB/s", "plain frames/s",
           "plain MB/s", "ipc/plain");
    printf("---------+---------------------------+---------------------------+----------\n");
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        struct result ipc = run_ipc(sizes[i].payload);
        struct result plain = run_plain(sizes[i].payload);
        printf("%-8s | %14.0f %10.1f | %14.0f %10.1f | %8.2fx\n", sizes[i].label, ipc.frames_per_s, ipc.mb_per_s,
               plain.frames_per_s, plain.mb_per_s, ipc.frames_per_s / plain.frames_per_s);
        fflush(stdout);
    }
    return 0;
}
