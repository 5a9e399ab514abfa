/* bench_service.c: the tracing service's data path and footprint, in-process (run by `make bench`).
 *
 * The service (tg_service_new) runs on its own thread and event loop, listening on UNIX sockets in a
 * temporary directory. On the main thread:
 *  1. SMB ingest: a tg_producer (the C producer library) connected over UNIX registers a data source;
 *     a consumer enables a session with one 64 MiB ring buffer; a trace writer then writes packets
 *     of a fixed size from the producer's loop (at most a quarter of the SMB per loop turn, so the
 *     library commits each turn, as an app writing from its loop would). Ingest MB/s is what the
 *     SERVICE reports it copied into the trace buffer (GetTraceStats buffer_stats.bytes_written)
 *     during the window, for 1 KiB and 128-byte packets; the writer's drop count shows whether the
 *     SMB was ever full.
 * 1b. Paced ingest: a second producer (2 MiB SMB) offers 1 KiB packets at a fixed rate (1 GB/s),
 *     paced by an elapsed-time budget (no sleeps: each loop turn writes what the schedule allows,
 *     at least 32 KiB at a time); the writer's drop % at that rate is the issue-11 target (0%).
 *  2. ReadBuffers: the consumer reads the full 64 MiB ring buffer back over UNIX; MB/s of IPC bytes
 *     received, and the CPU the service thread and the reader used meanwhile. The consumer here is
 *     a lean blocking reader (frames walked in place, no pull-up), so the service's read-out is
 *     what is measured (it stays at a third of a CPU while the service thread is at 100%).
 *  3. Memory: RSS of this process (/proc/self/statm) before and after connecting N raw producers
 *     (bound, InitializeConnection, one RegisterDataSource each: idle apps with the SDK), and
 *     before and after N sessions (bound consumers with an enabled session of one 1 MiB buffer and
 *     no matching producer). Sessions are capped by the service (5 per uid, 15 in total, as
 *     Perfetto); as root the bench opens them from 3 uids to reach 15.
 *
 * With 2+ CPUs the service thread is pinned to CPU 1 and the clients to CPU 0. Each ingest cell is
 * the best of 3 runs, preferring runs that other processes did not disturb (`others`: CPU the
 * machine spent on anything but this process meanwhile, steal included). At the end the program re-runs 1-2 in a child with glibc's heap
 * trimming off (the what-if of docs/benchmarks.md).
 *
 * Usage: bench_service [seconds-per-run]   (default 1)
 * Environment: TG_BENCH_NO_WHATIF=1, TG_BENCH_NO_PIN=1, TG_BENCH_SMB_KB=N (SMB size hint),
 * TG_BENCH_READ_ROUNDS=N (fill/read rounds, default 5; more to profile the read-out),
 * TG_BENCH_PACE_MBS=N (paced rate, default 1000), TG_BENCH_PACED_SMB_KB=N (default 2048),
 * TG_BENCH_PACED_POLICY=drop|stall (only that buffer-exhausted policy's paced runs; default both),
 * TG_BENCH_PACED_RUNS=N (default 3), TG_BENCH_PACED_TURN_KB=N (most a paced turn writes, default a
 * quarter of the SMB), TG_BENCH_PACED_DROPS=1 (print when each burst of paced drops began: see
 * tests/bench/paced_drops.sh), TG_BENCH_PERF_CTL=FIFO [TG_BENCH_PERF_ACK=FIFO] with
 * TG_BENCH_PERF_SECTION=read|paced (perf record -D -1 --control samples only that section). */
#include <errno.h>
#include <fcntl.h>
#include <event2/event.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "consumer_port.pb-c.h"
#include "data_source_descriptor.pb-c.h"
#include "producer_port.pb-c.h"
#include "trace_config.pb-c.h"
#include "trace_stats.pb-c.h"
#include "tracegate/frame.h"
#include "tracegate/ipc_wire.h"
#include "tracegate/log.h"
#include "tracegate/pbwire.h"
#include "tracegate/producer.h"
#include "tracegate/service.h"

static double g_seconds = 1.0;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void die(const char *what)
{
    fprintf(stderr, "bench_service: %s\n", what);
    exit(1);
}

static long rss_kb(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    long size = 0, res = 0;
    if (!f || fscanf(f, "%ld %ld", &size, &res) != 2)
        die("cannot read /proc/self/statm");
    fclose(f);
    return res * (sysconf(_SC_PAGESIZE) / 1024);
}

/* CPU time (clock ticks) the machine spent on anything but this process during a window: other
 * work (short-lived compilers and tests included) and time the hypervisor took (steal), which slow
 * these runs down (reported so a disturbed number can be recognised). */
struct others {
    long long busy, self;
};

static void others_take(struct others *o)
{
    o->busy = o->self = 0;
    char buf[1024];
    FILE *f = fopen("/proc/stat", "r");
    if (f) {
        unsigned long long v[8] = {0};
        if (fgets(buf, sizeof buf, f) &&
            sscanf(buf, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5],
                   &v[6], &v[7]) >= 4)
            o->busy = (long long)(v[0] + v[1] + v[2] + v[5] + v[6] + v[7]); /* all but idle and iowait */
        fclose(f);
    }
    f = fopen("/proc/self/stat", "r");
    if (f) {
        size_t got = fread(buf, 1, sizeof buf - 1, f);
        buf[got] = 0;
        char *rp = strrchr(buf, ')');
        unsigned long long ut, st;
        if (rp && sscanf(rp + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) == 2)
            o->self = (long long)(ut + st);
        fclose(f);
    }
}

/* % of one CPU used by everything else between a and b */
static double others_pct(const struct others *a, const struct others *b, double seconds)
{
    long long sum = (b->busy - a->busy) - (b->self - a->self);
    if (sum < 0)
        sum = 0;
    return (double)sum / (double)sysconf(_SC_CLK_TCK) / seconds * 100;
}

/* ------------------------------------------------------------ the service thread */

struct svc_thread {
    char dir[64], psock[128], csock[128];
    clockid_t cpu_clock; /* the service thread's CPU time */
    struct event_base *base;
    tg_service *svc;
    int stop_pipe[2];
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int ready;
};

static void on_stop(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    event_base_loopbreak(arg);
}

/* With 2+ CPUs the service and the clients get one each, as separate processes would: the numbers
 * then do not depend on where the scheduler happens to put the two busy threads. */
static void pin_to(int cpu)
{
    if (sysconf(_SC_NPROCESSORS_ONLN) < 2 || getenv("TG_BENCH_NO_PIN"))
        return;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}

static void *svc_main(void *arg)
{
    struct svc_thread *st = arg;
    pthread_setname_np(pthread_self(), "service"); /* for perf report --comm service */
    pin_to(1);
    st->base = event_base_new();
    struct tg_service_opts o;
    memset(&o, 0, sizeof o);
    o.producer_socks = st->psock;
    o.consumer_socks = st->csock;
    o.consumer_sock_mode = 0666; /* consumers of other uids (the session footprint test) */
    o.machine_name = "bench";
    char err[256];
    st->svc = tg_service_new(st->base, &o, err, sizeof err);
    if (!st->svc) {
        fprintf(stderr, "bench_service: %s\n", err);
        exit(1);
    }
    struct event *ev = event_new(st->base, st->stop_pipe[0], EV_READ, on_stop, st->base);
    event_add(ev, NULL);
    pthread_mutex_lock(&st->mu);
    st->ready = 1;
    pthread_cond_signal(&st->cv);
    pthread_mutex_unlock(&st->mu);
    event_base_dispatch(st->base);
    event_free(ev);
    tg_service_free(st->svc);
    event_base_free(st->base);
    return NULL;
}

static void svc_start(struct svc_thread *st)
{
    snprintf(st->dir, sizeof st->dir, "/tmp/tg-bench-svc.XXXXXX");
    if (!mkdtemp(st->dir))
        die("mkdtemp failed");
    chmod(st->dir, 0755);
    snprintf(st->psock, sizeof st->psock, "%s/p.sock", st->dir);
    snprintf(st->csock, sizeof st->csock, "%s/c.sock", st->dir);
    if (pipe(st->stop_pipe) != 0)
        die("pipe failed");
    pthread_mutex_init(&st->mu, NULL);
    pthread_cond_init(&st->cv, NULL);
    pthread_create(&st->th, NULL, svc_main, st);
    pthread_mutex_lock(&st->mu);
    while (!st->ready)
        pthread_cond_wait(&st->cv, &st->mu);
    pthread_mutex_unlock(&st->mu);
    if (pthread_getcpuclockid(st->th, &st->cpu_clock) != 0)
        die("pthread_getcpuclockid failed");
}

static void svc_stop(struct svc_thread *st)
{
    if (write(st->stop_pipe[1], "x", 1) != 1)
        die("cannot stop the service thread");
    pthread_join(st->th, NULL);
    close(st->stop_pipe[0]);
    close(st->stop_pipe[1]);
    unlink(st->psock);
    unlink(st->csock);
    rmdir(st->dir);
}

/* ------------------------------------------------------------ a blocking raw IPC client */

#define MAX_METHODS 64

struct sc {
    int fd;
    uint8_t *buf;
    size_t len, cap;
    uint64_t next_rid;
    uint32_t sid;
    struct {
        char name[48];
        uint32_t id;
    } m[MAX_METHODS];
    int nm;
};

struct reply {
    int success, has_more;
    uint8_t *data; /* reply_proto (malloc'd) */
    size_t len;
};

static int sc_send_frame(struct sc *c, const uint8_t *body, size_t len)
{
    uint8_t hdr[4];
    tg_frame_put_header(hdr, (uint32_t)len);
    struct iovec iov[2] = {{hdr, 4}, {(void *)body, len}};
    struct msghdr mh = {.msg_iov = iov, .msg_iovlen = 2};
    size_t total = len + 4;
    ssize_t n = sendmsg(c->fd, &mh, MSG_NOSIGNAL);
    return n == (ssize_t)total ? 0 : -1; /* small frames on a blocking socket go out whole */
}

/* Reads until a complete frame is buffered; returns its body length (frame at c->buf + 4). */
static long sc_next_frame(struct sc *c)
{
    for (;;) {
        if (c->len >= 4) {
            size_t bl = (size_t)c->buf[0] | (size_t)c->buf[1] << 8 | (size_t)c->buf[2] << 16 | (size_t)c->buf[3] << 24;
            if (bl + 4 > c->cap)
                return -1;
            if (c->len >= bl + 4)
                return (long)bl;
        }
        ssize_t n = recv(c->fd, c->buf + c->len, c->cap - c->len, 0);
        if (n <= 0) {
            if (n < 0 && errno == EINTR)
                continue;
            return -1;
        }
        c->len += (size_t)n;
    }
}

static void sc_pop(struct sc *c, size_t bl)
{
    memmove(c->buf, c->buf + bl + 4, c->len - bl - 4);
    c->len -= bl + 4;
}

static void collect(void *arg, uint32_t id, const char *name, size_t nl)
{
    struct sc *c = arg;
    if (c->nm < MAX_METHODS && nl < sizeof c->m[0].name) {
        memcpy(c->m[c->nm].name, name, nl);
        c->m[c->nm].name[nl] = 0;
        c->m[c->nm].id = id;
        c->nm++;
    }
}

static int sc_connect(struct sc *c, const char *path, const char *service, size_t cap)
{
    memset(c, 0, sizeof *c);
    c->cap = cap;
    c->buf = malloc(c->cap);
    c->next_rid = 1;
    c->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path);
    if (c->fd < 0 || connect(c->fd, (struct sockaddr *)&sa, sizeof sa) != 0)
        return -1;
    uint8_t f[128];
    size_t fl = tg_ipc_encode_bind(f, sizeof f, c->next_rid++, service);
    if (sc_send_frame(c, f, fl) != 0)
        return -1;
    for (;;) {
        long bl = sc_next_frame(c);
        if (bl < 0)
            return -1;
        struct tg_frame_info fi;
        int ok = 0;
        if (tg_frame_scan(c->buf + 4, (size_t)bl, &fi) == 0 && fi.msg == TG_MSG_BIND_SERVICE_REPLY) {
            if (tg_ipc_parse_bind_reply(fi.msg_data, fi.msg_len, &ok, &c->sid, collect, c) != 0)
                ok = 0;
            sc_pop(c, (size_t)bl);
            return ok ? 0 : -1;
        }
        sc_pop(c, (size_t)bl);
    }
}

/* Drops the receive buffer of a client that will only sit idle (memory tests). */
static void sc_idle(struct sc *c)
{
    free(c->buf);
    c->buf = NULL;
    c->cap = c->len = 0;
}

static void sc_close(struct sc *c)
{
    if (c->fd >= 0)
        close(c->fd);
    free(c->buf);
    c->buf = NULL;
    c->fd = -1;
}

static uint32_t sc_mid(const struct sc *c, const char *name)
{
    for (int i = 0; i < c->nm; i++)
        if (strcmp(c->m[i].name, name) == 0)
            return c->m[i].id;
    fprintf(stderr, "bench_service: method %s not offered\n", name);
    exit(1);
}

static uint64_t sc_invoke(struct sc *c, const char *method, const ProtobufCMessage *req)
{
    uint8_t stackbuf[4096];
    size_t al = req ? protobuf_c_message_get_packed_size(req) : 0;
    uint8_t *args = al > sizeof stackbuf / 2 ? malloc(al) : stackbuf;
    if (req)
        protobuf_c_message_pack(req, args);
    size_t need = tg_ipc_encode_invoke(NULL, 0, 0, c->sid, sc_mid(c, method), args, al, 0) + 16;
    uint8_t *f = malloc(need);
    uint64_t rid = c->next_rid++;
    size_t fl = tg_ipc_encode_invoke(f, need, rid, c->sid, sc_mid(c, method), args, al, 0);
    if (sc_send_frame(c, f, fl) != 0)
        die("send failed");
    free(f);
    if (args != stackbuf)
        free(args);
    return rid;
}

/* Waits for the (next) reply to rid; other frames are dropped. */
static int sc_wait(struct sc *c, uint64_t rid, struct reply *r)
{
    for (;;) {
        long bl = sc_next_frame(c);
        if (bl < 0)
            return -1;
        struct tg_frame_info fi;
        if (tg_frame_scan(c->buf + 4, (size_t)bl, &fi) == 0 && fi.request_id == rid) {
            r->success = fi.msg == TG_MSG_INVOKE_METHOD_REPLY && fi.success;
            r->has_more = fi.has_more;
            r->len = fi.has_payload ? fi.payload_len : 0;
            r->data = malloc(r->len + 1);
            if (r->len)
                memcpy(r->data, fi.payload, r->len);
            sc_pop(c, (size_t)bl);
            return 0;
        }
        sc_pop(c, (size_t)bl);
    }
}

static int sc_call(struct sc *c, const char *method, const ProtobufCMessage *req, struct reply *r)
{
    struct reply tmp;
    if (!r)
        r = &tmp;
    if (sc_wait(c, sc_invoke(c, method, req), r) != 0)
        return -1;
    if (r == &tmp)
        free(tmp.data);
    return 0;
}

/* ------------------------------------------------------------ session config and stats */

static void enable_session(struct sc *c, uint32_t size_kb, const char *ds_name)
{
    Perfetto__Protos__TraceConfig tc = PERFETTO__PROTOS__TRACE_CONFIG__INIT;
    Perfetto__Protos__TraceConfig__BufferConfig buf = PERFETTO__PROTOS__TRACE_CONFIG__BUFFER_CONFIG__INIT;
    Perfetto__Protos__TraceConfig__BufferConfig *bufp = &buf;
    Perfetto__Protos__TraceConfig__DataSource ds = PERFETTO__PROTOS__TRACE_CONFIG__DATA_SOURCE__INIT;
    Perfetto__Protos__TraceConfig__DataSource *dsp = &ds;
    Perfetto__Protos__DataSourceConfig dsc = PERFETTO__PROTOS__DATA_SOURCE_CONFIG__INIT;
    buf.has_size_kb = 1;
    buf.size_kb = size_kb;
    buf.has_fill_policy = 1;
    buf.fill_policy = PERFETTO__PROTOS__TRACE_CONFIG__BUFFER_CONFIG__FILL_POLICY__RING_BUFFER;
    tc.n_buffers = 1;
    tc.buffers = &bufp;
    dsc.name = (char *)ds_name;
    ds.config = &dsc;
    tc.n_data_sources = 1;
    tc.data_sources = &dsp;
    Perfetto__Protos__EnableTracingRequest req = PERFETTO__PROTOS__ENABLE_TRACING_REQUEST__INIT;
    req.trace_config = &tc;
    sc_invoke(c, "EnableTracing", &req.base); /* its reply comes when the session ends */
}

/* bytes the service wrote into buffer 0 of the consumer's session (-1 on error) */
static long long buffer_bytes_written(struct sc *c)
{
    struct reply r;
    if (sc_call(c, "GetTraceStats", NULL, &r) != 0 || !r.success)
        return -1;
    long long v = -1;
    Perfetto__Protos__GetTraceStatsResponse *resp =
        perfetto__protos__get_trace_stats_response__unpack(NULL, r.len, r.data);
    if (resp && resp->trace_stats && resp->trace_stats->n_buffer_stats > 0)
        v = (long long)resp->trace_stats->buffer_stats[0]->bytes_written;
    if (resp)
        perfetto__protos__get_trace_stats_response__free_unpacked(resp, NULL);
    free(r.data);
    return v;
}

/* ------------------------------------------------------------ 1. SMB ingest */

struct ingest {
    struct event_base *base;
    tg_producer *p;
    tg_trace_writer *w;
    uint64_t instance;
    int started;
    struct event *pump;
    uint8_t pkt[8192];
    size_t pkt_len;
    size_t per_turn;
    uint64_t seq;
    /* paced mode (pace_rate > 0): bytes offered so far may not run ahead of pace_rate * elapsed */
    double pace_rate, pace_t0;
    uint64_t pace_offered; /* bytes of packets attempted (written or dropped) */
    uint64_t pace_sched;   /* bytes the schedule counts as offered since pace_t0 (debt forgiven) */
    uint64_t pace_behind;  /* turns that found more than pace_slack turns' worth of budget: the writer lagged */
    double pace_slack;     /* turns of debt caught up before it is forgiven (2; 8 when the writer stalls) */
    /* TG_BENCH_PACED_DROPS=1: when each burst of drops began (CLOCK_MONOTONIC, for
     * tests/bench/paced_drops.sh) and how steady the writer was just before it */
    int report_drops;
    bool dropping;           /* the last turn dropped */
    double turn_t[64];       /* start times of the last 64 turns, a ring */
    unsigned turn_n;
};

static void ds_start(tg_producer *p, uint64_t id, const struct tg_data_source_config *cfg, void *arg)
{
    struct ingest *in = arg;
    (void)cfg;
    in->instance = id;
    in->w = tg_producer_create_writer(p, id);
    in->started = 1;
    event_base_loopbreak(in->base);
}

static void ds_stop(tg_producer *p, uint64_t id, void *arg)
{
    struct ingest *in = arg;
    (void)p;
    (void)id;
    if (in->w) {
        tg_trace_writer_destroy(in->w);
        in->w = NULL;
    }
}

static void on_connected(tg_producer *p, void *arg)
{
    (void)p;
    event_base_loopbreak(arg);
}

/* TracePacket{timestamp(8) = seq, for_testing(900) = filler} of exactly `total` bytes (>= 24) */
static size_t make_packet(uint8_t *buf, size_t total, uint64_t seq)
{
    size_t n = tg_pb_put_tag(buf, 8, TG_PB_VARINT);
    buf[n++] = (uint8_t)(0x80 | (seq & 0x7f)); /* a fixed 5-byte varint keeps the size constant */
    buf[n++] = (uint8_t)(0x80 | ((seq >> 7) & 0x7f));
    buf[n++] = (uint8_t)(0x80 | ((seq >> 14) & 0x7f));
    buf[n++] = (uint8_t)(0x80 | ((seq >> 21) & 0x7f));
    buf[n++] = (uint8_t)((seq >> 28) & 0x7f);
    n += tg_pb_put_tag(buf + n, 900, TG_PB_LEN);
    size_t payload = total - n - 2;
    if (payload >= 128) {
        payload = total - n - 2;
        buf[n++] = (uint8_t)(0x80 | (payload & 0x7f));
        buf[n++] = (uint8_t)(payload >> 7);
    } else {
        payload = total - n - 1;
        buf[n++] = (uint8_t)payload;
    }
    for (size_t i = 0; i < payload; i++)
        buf[n + i] = (uint8_t)(i * 7u + 3u);
    return n + payload;
}

#define PACE_MIN_BURST (32u << 10) /* a paced turn writes once this much budget has built up */

/* Paced: how many bytes this turn may offer (0 = not enough budget yet; the loop turns again). The
 * budget is the target rate times the time since the start minus what was offered: no sleeps, so
 * a late turn catches up and the average rate is the target. */
static size_t pace_budget(struct ingest *in)
{
    double allowed = in->pace_rate * (now_s() - in->pace_t0) - (double)in->pace_sched;
    if (allowed < (double)PACE_MIN_BURST)
        return 0;
    if (allowed > in->pace_slack * (double)in->per_turn) {
        /* more than pace_slack turns late: the writer's own loop could not keep up. Forgive the
         * debt rather than catch up in a burst above the rate. A stalling writer (stall then
         * drop) waits for the service on purpose: it catches up on up to 8 turns (8 ms at 1 GB/s
         * with a 2 MiB SMB), a quarter of the SMB per turn, so its average is still the rate. */
        in->pace_behind++;
        in->pace_sched = (uint64_t)(in->pace_rate * (now_s() - in->pace_t0)) - in->per_turn;
        return in->per_turn;
    }
    return allowed > (double)in->per_turn ? in->per_turn : (size_t)allowed;
}

/* TG_BENCH_PACED_DROPS=1: prints the start of each burst of drops with the longest gap between the
 * writer's turns in the 2 ms before it (a writer that kept its pace shows gaps of ~33 us). */
static void note_turn(struct ingest *in, double t, uint64_t drops)
{
    if (drops && !in->dropping) {
        double gap = 0;
        for (unsigned i = 1; i < 64 && i < in->turn_n; i++) {
            double a = in->turn_t[(in->turn_n - i) % 64], b = in->turn_t[(in->turn_n - i - 1) % 64];
            if (t - a > 0.002)
                break;
            gap = a - b > gap ? a - b : gap;
        }
        printf("   drop burst at %.6f (CLOCK_MONOTONIC): the writer's longest gap between turns in the 2 ms "
               "before: %.0f us\n", t, gap * 1e6);
    }
    in->dropping = drops > 0;
    in->turn_t[in->turn_n++ % 64] = t;
}

static void pump_cb(evutil_socket_t fd, short what, void *arg)
{
    struct ingest *in = arg;
    (void)fd;
    (void)what;
    if (!in->w)
        return;
    size_t budget = in->pace_rate > 0 ? pace_budget(in) : in->per_turn;
    size_t wrote = 0;
    double t = in->report_drops && budget > 0 ? now_s() : 0;
    uint64_t drops = 0;
    while (wrote + in->pkt_len <= budget) {
        int rc = tg_trace_writer_write(in->w, in->pkt, in->pkt_len);
        if (in->pace_rate > 0) {
            drops += rc != TG_TRACE_WRITER_OK;
            in->pace_offered += in->pkt_len; /* a dropped packet was offered too */
            in->pace_sched += in->pkt_len;
            wrote += in->pkt_len;
            continue; /* paced: keep the rate; drops are what is measured */
        }
        if (rc != TG_TRACE_WRITER_OK)
            break; /* SMB full (dropped) or inactive: give the loop a turn */
        wrote += in->pkt_len;
    }
    if (t > 0)
        note_turn(in, t, drops);
    static const struct timeval zero = {0, 0};
    event_add(in->pump, &zero); /* again after this loop turn's I/O (the commit) */
}

static void on_run_deadline(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    event_base_loopbreak(arg);
}

/* Runs the loop for `seconds`, or until a callback breaks it. The deadline is an event of its own,
 * removed on return: an event_base_loopexit() left behind by a loop broken early would end a later
 * run (a measuring window) early. */
static void run_loop_for(struct event_base *base, double seconds)
{
    struct timeval tv = {(time_t)seconds, (suseconds_t)((seconds - (double)(time_t)seconds) * 1e6)};
    struct event *deadline = evtimer_new(base, on_run_deadline, base);
    if (!deadline)
        die("out of memory");
    evtimer_add(deadline, &tv);
    event_base_dispatch(base);
    event_free(deadline);
}

struct ingest_result {
    double mb_per_s, pkts_per_s, others;
    uint64_t dropped, written;
};

static struct others g_oth0, g_oth1;

static struct ingest_result measure_ingest(struct ingest *in, struct sc *cons, size_t pkt_size)
{
    in->pkt_len = make_packet(in->pkt, pkt_size, 1);
    struct tg_trace_writer_stats w0, w1;
    event_add(in->pump, &(struct timeval){0, 0});
    run_loop_for(in->base, 0.3); /* warm-up */
    tg_trace_writer_get_stats(in->w, &w0);
    long long b0 = buffer_bytes_written(cons);
    others_take(&g_oth0);
    double t0 = now_s();
    run_loop_for(in->base, g_seconds);
    long long b1 = buffer_bytes_written(cons);
    double dt = now_s() - t0;
    others_take(&g_oth1);
    tg_trace_writer_get_stats(in->w, &w1);
    event_del(in->pump);
    tg_trace_writer_flush(in->w);
    run_loop_for(in->base, 0.05);
    struct ingest_result r;
    r.mb_per_s = (double)(b1 - b0) / dt / 1e6;
    r.pkts_per_s = (double)(b1 - b0) / (double)pkt_size / dt;
    r.others = others_pct(&g_oth0, &g_oth1, dt);
    r.dropped = w1.packets_dropped - w0.packets_dropped;
    r.written = w1.packets_written - w0.packets_written;
    if (b0 < 0 || b1 < 0)
        die("GetTraceStats failed");
    return r;
}

static double cpu_s(clockid_t clk)
{
    struct timespec ts;
    clock_gettime(clk, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* TG_BENCH_PERF_CTL=FIFO (and optionally TG_BENCH_PERF_ACK=FIFO): `perf record -D -1 --control
 * fifo:FIFO[,ACK]` then samples only while the read-out runs (or, with TG_BENCH_PERF_SECTION=paced,
 * the paced ingest windows). */
static void perf_ctl(const char *section, const char *cmd)
{
    static int ctl = -2, ack = -2;
    const char *want = getenv("TG_BENCH_PERF_SECTION");
    if (strcmp(section, want ? want : "read") != 0)
        return;
    if (ctl == -2) {
        const char *p = getenv("TG_BENCH_PERF_CTL"), *a = getenv("TG_BENCH_PERF_ACK");
        ctl = p ? open(p, O_WRONLY) : -1;
        ack = ctl >= 0 && a ? open(a, O_RDONLY) : -1;
    }
    if (ctl < 0)
        return;
    if (write(ctl, cmd, strlen(cmd)) < 0)
        die("perf control write failed");
    char buf[16];
    if (ack >= 0 && read(ack, buf, sizeof buf) <= 0)
        die("perf control ack failed");
}

/* Paced ingest: the writer offers pkt_size packets at `rate` bytes/s for the window; the result's
 * mb_per_s is what the service stored, dropped/written the writer's counts. */
static struct ingest_result measure_paced(struct ingest *in, struct sc *cons, size_t pkt_size, double rate,
                                          double *offered_mb_s, uint64_t *behind, clockid_t svc_clock,
                                          double *svc_pct)
{
    in->pkt_len = make_packet(in->pkt, pkt_size, 1);
    in->pace_rate = rate;
    in->pace_offered = 0;
    in->pace_sched = 0;
    in->pace_behind = 0;
    in->pace_t0 = now_s();
    struct tg_trace_writer_stats w0, w1;
    event_add(in->pump, &(struct timeval){0, 0});
    run_loop_for(in->base, 0.3); /* warm-up at the same rate */
    tg_trace_writer_get_stats(in->w, &w0);
    long long b0 = buffer_bytes_written(cons);
    uint64_t off0 = in->pace_offered, behind0 = in->pace_behind;
    others_take(&g_oth0);
    perf_ctl("paced", "enable\n");
    double c0 = cpu_s(svc_clock);
    double t0 = now_s();
    run_loop_for(in->base, g_seconds);
    double t1 = now_s();
    *svc_pct = 100 * (cpu_s(svc_clock) - c0) / (t1 - t0);
    if (in->report_drops)
        printf("   paced window %.6f %.6f (CLOCK_MONOTONIC)\n", t0, t1);
    perf_ctl("paced", "disable\n");
    uint64_t off1 = in->pace_offered;
    *behind = in->pace_behind - behind0;
    tg_trace_writer_get_stats(in->w, &w1);
    event_del(in->pump);
    tg_trace_writer_flush(in->w);
    run_loop_for(in->base, 0.1); /* the last commits land */
    long long b1 = buffer_bytes_written(cons);
    double dt = now_s() - t0;
    others_take(&g_oth1);
    in->pace_rate = 0;
    struct ingest_result r;
    r.mb_per_s = (double)(b1 - b0) / (t1 - t0) / 1e6; /* stored during the window (+ its tail) */
    r.pkts_per_s = (double)(b1 - b0) / (double)pkt_size / (t1 - t0);
    r.others = others_pct(&g_oth0, &g_oth1, dt);
    r.dropped = w1.packets_dropped - w0.packets_dropped;
    r.written = w1.packets_written - w0.packets_written;
    *offered_mb_s = (double)(off1 - off0) / (t1 - t0) / 1e6;
    if (b0 < 0 || b1 < 0)
        die("GetTraceStats failed");
    return r;
}

/* ------------------------------------------------------------ 2. ReadBuffers */

struct read_result {
    double mb_per_s, seconds;
    uint64_t bytes, frames;
    double svc_cpu, cons_cpu; /* CPU seconds of the service thread and of the reader */
    double others;
};

static struct read_result measure_read(struct sc *c, clockid_t svc_clock)
{
    struct read_result r;
    memset(&r, 0, sizeof r);
    perf_ctl("read", "enable\n");
    struct others o0, o1;
    others_take(&o0);
    double sc0 = cpu_s(svc_clock), cc0 = cpu_s(CLOCK_THREAD_CPUTIME_ID);
    uint64_t rid = sc_invoke(c, "ReadBuffers", NULL);
    double t0 = now_s();
    int done = 0;
    while (!done) {
        /* walk every complete frame in the buffer, in place */
        size_t off = 0;
        while (c->len - off >= 4) {
            const uint8_t *h = c->buf + off;
            size_t bl = (size_t)h[0] | (size_t)h[1] << 8 | (size_t)h[2] << 16 | (size_t)h[3] << 24;
            if (c->len - off < bl + 4)
                break;
            struct tg_frame_info fi;
            if (tg_frame_scan(h + 4, bl, &fi) == 0 && fi.request_id == rid) {
                r.frames++;
                r.bytes += bl + 4;
                if (!fi.success)
                    die("ReadBuffers failed");
                if (!fi.has_more)
                    done = 1;
            }
            off += bl + 4;
        }
        memmove(c->buf, c->buf + off, c->len - off);
        c->len -= off;
        if (done)
            break;
        ssize_t n = recv(c->fd, c->buf + c->len, c->cap - c->len, 0);
        if (n <= 0)
            die("ReadBuffers: connection lost");
        c->len += (size_t)n;
    }
    r.seconds = now_s() - t0;
    r.svc_cpu = cpu_s(svc_clock) - sc0;
    r.cons_cpu = cpu_s(CLOCK_THREAD_CPUTIME_ID) - cc0;
    others_take(&o1);
    r.others = others_pct(&o0, &o1, r.seconds);
    perf_ctl("read", "disable\n");
    r.mb_per_s = (double)r.bytes / r.seconds / 1e6;
    return r;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* ------------------------------------------------------------ 3. memory */

static int raw_producer(struct sc *c, const char *path, int i)
{
    if (sc_connect(c, path, "ProducerPort", 64u << 10) != 0)
        return -1;
    char name[64], ds[64];
    snprintf(name, sizeof name, "bench.producer.%d", i);
    snprintf(ds, sizeof ds, "bench.mem.%d", i);
    Perfetto__Protos__InitializeConnectionRequest init = PERFETTO__PROTOS__INITIALIZE_CONNECTION_REQUEST__INIT;
    init.producer_name = name;
    Perfetto__Protos__DataSourceDescriptor d = PERFETTO__PROTOS__DATA_SOURCE_DESCRIPTOR__INIT;
    d.name = ds;
    Perfetto__Protos__RegisterDataSourceRequest reg = PERFETTO__PROTOS__REGISTER_DATA_SOURCE_REQUEST__INIT;
    reg.data_source_descriptor = &d;
    struct reply r1, r2;
    if (sc_call(c, "InitializeConnection", &init.base, &r1) != 0 || sc_call(c, "RegisterDataSource", &reg.base, &r2) != 0)
        return -1;
    int ok = r1.success && r2.success;
    free(r1.data);
    free(r2.data);
    sc_idle(c);
    return ok ? 0 : -1;
}

/* One consumer with an enabled session; the QueryCapabilities round trip proves the service
 * processed EnableTracing (same connection, in order), and a refusal would have come before it. */
static int raw_session(struct sc *c, const char *path)
{
    if (sc_connect(c, path, "ConsumerPort", 64u << 10) != 0)
        return -1;
    uint64_t erid = c->next_rid;
    enable_session(c, 1024, "bench.nobody");
    uint64_t qrid = sc_invoke(c, "QueryCapabilities", NULL);
    int ok = 1;
    for (;;) {
        long bl = sc_next_frame(c);
        if (bl < 0)
            return -1;
        struct tg_frame_info fi;
        int scanned = tg_frame_scan(c->buf + 4, (size_t)bl, &fi) == 0;
        sc_pop(c, (size_t)bl);
        if (scanned && fi.request_id == erid)
            ok = 0; /* EnableTracing answered at once: refused */
        if (scanned && fi.request_id == qrid)
            break;
    }
    sc_idle(c);
    return ok ? 0 : -1;
}

/* Opens `n` sessions as uid (in a child process); reports readiness on ready_fd, then waits for
 * hold_fd to close. */
static void session_child(const char *path, uid_t uid, int n, int ready_fd, int hold_fd)
{
    if (uid != getuid() && (setgid(uid) != 0 || setuid(uid) != 0))
        _exit(2);
    struct sc cs[8];
    int ok = 0;
    for (int i = 0; i < n && i < 8; i++)
        if (raw_session(&cs[i], path) == 0)
            ok++;
    char b = (char)ok;
    if (write(ready_fd, &b, 1) != 1)
        _exit(3);
    char x;
    while (read(hold_fd, &x, 1) > 0) {
    }
    _exit(0);
}

/* ------------------------------------------------------------ what-if: malloc tuned */

/* Re-runs sections 1-2 in a child with glibc's heap trimming disabled (the fix suggested in
 * docs/benchmarks.md: freed 64-128 KiB evbuffer chains otherwise go back to the kernel and are
 * faulted in again on every burst). TG_BENCH_NO_WHATIF=1 skips it. */
static int whatif(int argc, char **argv)
{
    printf("\nwhat-if: the same with glibc malloc tuned (M_MMAP_THRESHOLD 1 MiB, M_TRIM_THRESHOLD 32 MiB):\n");
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        setenv("TG_BENCH_WHATIF", "1", 1);
        setenv("GLIBC_TUNABLES", "glibc.malloc.mmap_threshold=1048576:glibc.malloc.trim_threshold=33554432", 1);
        char *args[] = {"/proc/self/exe", argc > 1 ? argv[1] : NULL, NULL};
        execv("/proc/self/exe", args);
        _exit(127);
    }
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
        fprintf(stderr, "bench_service: the what-if run failed\n");
    return 0;
}

/* Connects in->p as producer `name` (SMB size hint smb_kb, 0 = the service's default) with the
 * data source `ds`, on in->base; dies if it does not connect. */
static void ingest_producer_open(struct ingest *in, const char *psock, const char *name, uint32_t smb_kb,
                                 const char *ds, enum tg_buffer_exhausted_policy policy)
{
    in->pump = event_new(in->base, -1, 0, pump_cb, in);
    struct tg_producer_opts po;
    memset(&po, 0, sizeof po);
    po.socket = psock;
    po.name = name;
    po.on_connected = on_connected;
    po.smb_size_hint_kb = smb_kb;
    po.cb_arg = in->base;
    char err[256];
    in->p = tg_producer_new(in->base, &po, err, sizeof err);
    if (!in->p)
        die(err);
    struct tg_data_source_desc dd;
    memset(&dd, 0, sizeof dd);
    dd.name = ds;
    dd.cbs.on_start = ds_start;
    dd.cbs.on_stop = ds_stop;
    dd.cb_arg = in;
    dd.buffer_exhausted_policy = policy;
    in->pace_slack = policy == TG_BUFFER_EXHAUSTED_STALL_THEN_DROP ? 8.0 : 2.0;
    tg_producer_register_data_source(in->p, &dd);
    run_loop_for(in->base, 5.0); /* until on_connected */
    if (!tg_producer_connected(in->p))
        die("the producer did not connect");
}

/* ------------------------------------------------------------ 1b. paced ingest */

/* A second producer with its own SMB size (TG_BENCH_PACED_SMB_KB, default 2048) and session (64 MiB
 * ring buffer) offers 1 KiB packets at TG_BENCH_PACE_MBS MB/s (default 1000, i.e. 1 GB/s): the drop
 * % at that rate is the issue-11 target (0%). Three runs per policy, each printed: the writer drops
 * when the SMB is full (the SDK default), then it stalls until the service frees a chunk (stall
 * then drop, 100 ms at most per stall). TG_BENCH_PACED_POLICY=drop|stall runs only one. */
static void paced_ingest(struct svc_thread *st, struct event_base *base, enum tg_buffer_exhausted_policy policy)
{
    struct ingest pin;
    memset(&pin, 0, sizeof pin);
    pin.base = base;
    bool stall = policy == TG_BUFFER_EXHAUSTED_STALL_THEN_DROP;
    uint32_t smb_kb = getenv("TG_BENCH_PACED_SMB_KB") ? (uint32_t)atoi(getenv("TG_BENCH_PACED_SMB_KB")) : 2048;
    ingest_producer_open(&pin, st->psock, stall ? "bench_service.paced_stall" : "bench_service.paced", smb_kb,
                         "bench.paced", policy);
    pin.per_turn = ((size_t)smb_kb << 10) / 4;
    pin.report_drops = getenv("TG_BENCH_PACED_DROPS") != NULL;
    if (getenv("TG_BENCH_PACED_TURN_KB")) /* most a paced turn writes (default a quarter of the SMB) */
        pin.per_turn = (size_t)atoi(getenv("TG_BENCH_PACED_TURN_KB")) << 10;
    struct sc cons;
    if (sc_connect(&cons, st->csock, "ConsumerPort", 4u << 20) != 0)
        die("consumer bind failed");
    enable_session(&cons, 64u << 10, "bench.paced");
    run_loop_for(base, 5.0); /* until on_start */
    if (!pin.started || !pin.w)
        die("the paced data source did not start");
    double mbs = getenv("TG_BENCH_PACE_MBS") ? atof(getenv("TG_BENCH_PACE_MBS")) : 1000.0;
    printf("\n1b. Paced SMB ingest: 1 KiB packets offered at %.0f MB/s, %u KiB SMB hint (target: 0%% drops), "
           "policy: %s\n",
           mbs, smb_kb, stall ? "stall then drop (the writer waits for a free chunk)" : "drop (the SDK default)");
    printf("   %-5s %10s %12s %14s %10s %12s %9s %8s%s\n", "run", "offered", "stored MB/s", "writer drops", "drop %",
           "late turns", "svc CPU", "others", stall ? "   stalls  stalled ms" : "");
    int runs = getenv("TG_BENCH_PACED_RUNS") ? atoi(getenv("TG_BENCH_PACED_RUNS")) : 3;
    for (int rep = 0; rep < runs; rep++) {
        double offered = 0, svc_pct = 0;
        uint64_t behind = 0;
        struct tg_trace_writer_stats s0, s1;
        tg_trace_writer_get_stats(pin.w, &s0);
        struct ingest_result r =
            measure_paced(&pin, &cons, 1024, mbs * 1e6, &offered, &behind, st->cpu_clock, &svc_pct);
        tg_trace_writer_get_stats(pin.w, &s1);
        printf("   %-5d %10.1f %12.1f %14llu %9.2f%% %12llu %8.0f%% %7.0f%%", rep + 1, offered, r.mb_per_s,
               (unsigned long long)r.dropped,
               r.written + r.dropped ? 100.0 * (double)r.dropped / (double)(r.written + r.dropped) : 0.0,
               (unsigned long long)behind, svc_pct, r.others);
        if (stall)
            printf(" %8llu %11.1f", (unsigned long long)(s1.stalls - s0.stalls), (double)(s1.stall_us - s0.stall_us) / 1e3);
        printf("%s\n", r.others >= 15 ? " (disturbed by other processes)" : "");
        fflush(stdout);
    }
    printf("   (offered = the writer's attempted MB/s; late turns = loop turns that found the writer more than\n"
           "    %s turns behind its schedule, i.e. the writer itself could not keep the rate%s)\n",
           stall ? "eight" : "two", stall ? "; stalls and stalled ms include\n    the warm-up" : "");
    sc_close(&cons);
    if (pin.w)
        tg_trace_writer_destroy(pin.w);
    pin.w = NULL;
    event_free(pin.pump);
    tg_producer_free(pin.p);
    run_loop_for(base, 0.1);
}

/* ------------------------------------------------------------ main */

int main(int argc, char **argv)
{
    if (argc > 1 && atof(argv[1]) > 0)
        g_seconds = atof(argv[1]);
    signal(SIGPIPE, SIG_IGN);
    tg_log_set_level(TG_LOG_WARN);
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    if (!getenv("TG_BENCH_WHATIF"))
        printf("bench_service: tracing service in-process (own thread), clients over UNIX sockets, %.1f s per run%s\n",
               g_seconds,
#if defined(__SANITIZE_ADDRESS__)
           " (ASan build: numbers are not representative)"
#else
           ""
#endif
    );
    struct svc_thread st;
    memset(&st, 0, sizeof st);
    svc_start(&st);
    pin_to(0);

    /* ---- producer + session ---- */
    struct ingest in;
    memset(&in, 0, sizeof in);
    in.base = event_base_new();
    uint32_t smb_kb = getenv("TG_BENCH_SMB_KB") ? (uint32_t)atoi(getenv("TG_BENCH_SMB_KB")) : 0; /* experiments */
    ingest_producer_open(&in, st.psock, "bench_service", smb_kb, "bench.ingest", TG_BUFFER_EXHAUSTED_DROP);
    size_t smb = smb_kb ? (size_t)smb_kb << 10 : 256u << 10; /* default: as the SDK */
    in.per_turn = smb / 4;

    struct sc cons;
    if (sc_connect(&cons, st.csock, "ConsumerPort", 4u << 20) != 0)
        die("consumer bind failed");
    enable_session(&cons, 64u << 10, "bench.ingest");
    run_loop_for(in.base, 5.0); /* until on_start */
    if (!in.started || !in.w)
        die("the data source did not start");

    printf("\n1. SMB ingest (tg_producer -> 256 KiB SMB -> CommitData -> 64 MiB ring buffer; service-side bytes):\n");
    printf("   %-10s %10s %12s %14s %10s %8s\n", "packet", "MB/s", "packets/s", "writer drops", "drop %", "others");
    static const size_t sizes[] = {1024, 128};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        struct ingest_result best = {0, 0, 0, 0, 0};
        for (int rep = 0; rep < 3; rep++) { /* best of 3: other work on the machine only slows a run */
            struct ingest_result r = measure_ingest(&in, &cons, sizes[i]);
            int quiet = r.others < 15, best_quiet = best.mb_per_s > 0 && best.others < 15;
            if (best.mb_per_s == 0 || quiet > best_quiet || (quiet == best_quiet && r.mb_per_s > best.mb_per_s))
                best = r; /* an undisturbed run wins, then the faster */
        }
        printf("   %-10zu %10.1f %12.0f %14llu %9.1f%% %7.0f%%%s\n", sizes[i], best.mb_per_s, best.pkts_per_s,
               (unsigned long long)best.dropped,
               best.written + best.dropped ? 100.0 * (double)best.dropped / (double)(best.written + best.dropped) : 0.0,
               best.others, best.others >= 15 ? " (disturbed by other processes)" : "");
        fflush(stdout);
    }

    const char *paced_policy = getenv("TG_BENCH_PACED_POLICY");
    if (!paced_policy || strcmp(paced_policy, "stall") != 0)
        paced_ingest(&st, in.base, TG_BUFFER_EXHAUSTED_DROP);
    if (!paced_policy || strcmp(paced_policy, "drop") != 0)
        paced_ingest(&st, in.base, TG_BUFFER_EXHAUSTED_STALL_THEN_DROP);

    /* ReadBuffers: fill the ring buffer (64 MiB), read it all back; best of 3 rounds */
    struct read_result best;
    memset(&best, 0, sizeof best);
    uint64_t all_bytes = 0, all_frames = 0;
    double svc_ns_per_byte[64];
    int nsvc = 0;
    int rounds = getenv("TG_BENCH_READ_ROUNDS") ? atoi(getenv("TG_BENCH_READ_ROUNDS")) : 5; /* more for profiling */
    for (int round = 0; round < rounds; round++) {
        long long w0 = buffer_bytes_written(&cons), written = w0;
        in.pkt_len = make_packet(in.pkt, 1024, 1);
        event_add(in.pump, &(struct timeval){0, 0});
        for (int k = 0; k < 200 && written - w0 < (72ll << 20); k++) {
            run_loop_for(in.base, 0.02);
            written = buffer_bytes_written(&cons);
        }
        event_del(in.pump);
        tg_trace_writer_flush(in.w);
        run_loop_for(in.base, 0.05);
        struct read_result rr = measure_read(&cons, st.cpu_clock);
        if (nsvc < 64 && rr.bytes)
            svc_ns_per_byte[nsvc++] = rr.svc_cpu * 1e9 / (double)rr.bytes;
        all_bytes += rr.bytes;
        all_frames += rr.frames;
        int quiet = rr.others < 15, best_quiet = best.mb_per_s > 0 && best.others < 15;
        if (best.mb_per_s == 0 || quiet > best_quiet || (quiet == best_quiet && rr.mb_per_s > best.mb_per_s))
            best = rr; /* an undisturbed run wins, then the faster */
    }
    printf("\n2. ReadBuffers of a full 64 MiB ring buffer over UNIX (lean consumer; best of %d):\n", rounds);
    printf("   %.1f MB of IPC frames in %.3f s = %.1f MB/s (%llu replies, %.1f KiB each)\n", (double)best.bytes / 1e6,
           best.seconds, best.mb_per_s, (unsigned long long)best.frames,
           best.frames ? (double)best.bytes / (double)best.frames / 1024 : 0.0);
    printf("   CPU during that read: service thread %.0f%%, reader %.0f%%, others %.0f%% (of one CPU each)%s\n",
           100 * best.svc_cpu / best.seconds, 100 * best.cons_cpu / best.seconds, best.others,
           best.others >= 15 ? " (disturbed by other processes)" : "");
    qsort(svc_ns_per_byte, (size_t)nsvc, sizeof svc_ns_per_byte[0], cmp_double);
    if (nsvc)
        printf("   service thread CPU per MB read: min %.0f us, median %.0f us (%d rounds; a CPU-bound\n"
               "   service would read 1e6 / that MB/s)\n",
               svc_ns_per_byte[0] * 1e3, svc_ns_per_byte[nsvc / 2] * 1e3, nsvc);
    printf("   all %d rounds: read_bytes=%llu read_replies=%llu\n", rounds, (unsigned long long)all_bytes,
           (unsigned long long)all_frames); /* for per-MB costs (tests/bench/insn_per_mb.sh) */
    fflush(stdout);
    if (getenv("TG_BENCH_WHATIF"))
        goto teardown; /* the what-if child measures throughput only */

    /* ---- memory ---- */
    /* end the ingest session first (its 64 MiB buffer goes), and let the allocator settle */
    sc_close(&cons);
    tg_trace_writer_destroy(in.w);
    in.w = NULL;
    run_loop_for(in.base, 0.3);
    enum { NPROD = 1000 };
    struct sc *prods = calloc(NPROD, sizeof *prods);
    memset(prods, 0, NPROD * sizeof *prods); /* resident before the baseline */
    long r0 = rss_kb();
    int np = 0;
    for (int i = 0; i < NPROD; i++)
        if (raw_producer(&prods[np], st.psock, i) == 0)
            np++;
    usleep(200000);
    long r1 = rss_kb();
    printf("\n3. Memory (RSS of this process, which hosts the service; clients are raw sockets):\n");
    printf("   %d idle producers (bound, initialized, 1 data source each): RSS %+ld KiB = %.1f KiB per producer\n", np,
           r1 - r0, np ? (double)(r1 - r0) / np : 0.0);
    fflush(stdout);

    /* sessions: 5 per uid; as root, 3 other uids give the service's maximum of 15 */
    long s0 = rss_kb();
    int nsess = 0, nkids = 0;
    int hold[2];
    if (pipe(hold) != 0)
        die("pipe failed");
    pid_t kids[3];
    int uids = geteuid() == 0 ? 3 : 1;
    for (int u = 0; u < uids; u++) {
        int ready[2];
        if (pipe(ready) != 0)
            die("pipe failed");
        uid_t uid = geteuid() == 0 ? (uid_t)(60001 + u) : getuid();
        int n = 5;
        pid_t pid = fork();
        if (pid == 0) {
            close(hold[1]);
            close(ready[0]);
            session_child(st.csock, uid, n, ready[1], hold[0]);
        }
        close(ready[1]);
        char b = 0;
        if (pid > 0 && read(ready[0], &b, 1) == 1) {
            nsess += b;
            kids[nkids++] = pid;
        }
        close(ready[0]);
    }
    usleep(200000);
    long s1 = rss_kb();
    printf("   %d sessions (1 MiB buffer each, no producer data): RSS %+ld KiB = %.1f KiB per session\n", nsess, s1 - s0,
           nsess ? (double)(s1 - s0) / nsess : 0.0);
    printf("   (a session's trace buffers are allocated up front but become resident as they fill: add up to\n"
           "    their size_kb; each producer in a session also gets an SMB, 256 KiB by default, shared memory)\n");
    fflush(stdout);
    close(hold[1]);
    for (int k = 0; k < nkids; k++)
        waitpid(kids[k], NULL, 0);
    close(hold[0]);
    for (int i = 0; i < np; i++)
        sc_close(&prods[i]);
    free(prods);

teardown:
    if (in.w)
        tg_trace_writer_destroy(in.w);
    in.w = NULL;
    event_free(in.pump);
    tg_producer_free(in.p);
    event_base_loop(in.base, EVLOOP_NONBLOCK);
    event_base_free(in.base);
    svc_stop(&st);
    if (!getenv("TG_BENCH_WHATIF") && !getenv("TG_BENCH_NO_WHATIF"))
        return whatif(argc, argv);
    return 0;
}
