/* bench_scale.c: cost per connection and per producer as their number grows, run by
 * tests/bench/scale_bench.sh (see docs/benchmarks.md, "Scale").
 *
 *   bench_scale gw ADDR --conns N --pid PID [--rr K] [--churn M]
 *       ADDR: a consumer listener of tracegated (HOST:PORT or a UNIX path). Opens N connections
 *       and binds ConsumerPort on each (pipelined in batches), waiting for every reply: N idle
 *       bridged sessions. Then, with the N held: K sequential QueryCapabilities calls on one more
 *       connection (the active client), M cycles of connect + bind + close, and finally closes
 *       the N.
 *   bench_scale producers PATH --conns N --pid PID [--consumer CPATH] [--smb-kb S] [--rr K] [--churn M]
 *       PATH: the embedded service's producer socket. N producers: ProducerPort bound,
 *       InitializeConnection with a producer-provided SMB (a sealed memfd of S KiB, default 16,
 *       4 KiB pages, passed with SCM_RIGHTS; the bench closes its own descriptor and never maps
 *       it, so the only mapping is the service's), one RegisterDataSource each. The active client
 *       is a consumer on CPATH making QueryCapabilities calls; a churn cycle is one more producer
 *       (connect, bind, initialize with its SMB, register, close).
 *
 * PID's cost is read from the kernel, not from wall time: CPU = the sum over its threads of
 * /proc/PID/task/TID/schedstat (ns on CPU), memory = VmRSS (anonymous + file + shared pages
 * resident; an SMB page counts once the service touches it). Each phase waits until PID has
 * done its work (every reply received; after closes, PID's descriptor count back down).
 * Prints one key=value line:
 *   n, rss_per_conn_bytes, open_cpu_us (per connection: accept/bind/upstream), idle_cpu_ns_s (per
 *   connection per second while idle, over the process's idle CPU with no connection; idle_pct and
 *   idle0_pct are the two, in % of one CPU), rr_p50_us, rr_p99_us, rr_cpu_us (PID's CPU per call),
 *   churn_cpu_us (per cycle), close_cpu_us (per connection).
 */

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "producer_port.pb-c.h"
#include "tracegate/addr.h"
#include "tracegate/frame.h"
#include "tracegate/ipc_wire.h"

#define BATCH 256 /* connections in flight at once while opening (below every listen backlog) */
#define MAX_METHODS 64

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void die(const char *what)
{
    fprintf(stderr, "bench_scale: %s: %s\n", what, strerror(errno));
    exit(1);
}

/* ------------------------------------------------------------ the measured process */

static pid_t g_pid;

static unsigned long long cpu_ns(void)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/task", (int)g_pid);
    DIR *d = opendir(path);
    if (!d)
        die("cannot read the process's threads");
    unsigned long long sum = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char p2[384];
        snprintf(p2, sizeof p2, "/proc/%d/task/%s/schedstat", (int)g_pid, e->d_name);
        FILE *f = fopen(p2, "r");
        unsigned long long v = 0;
        if (f) {
            if (fscanf(f, "%llu", &v) != 1)
                v = 0;
            fclose(f);
        }
        sum += v;
    }
    closedir(d);
    return sum;
}

static long rss_kb(void)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)g_pid);
    FILE *f = fopen(path, "r");
    if (!f)
        die("cannot read the process's status");
    long kb = -1;
    while (fgets(line, sizeof line, f))
        if (strncmp(line, "VmRSS:", 6) == 0)
            kb = atol(line + 6);
    fclose(f);
    return kb;
}

static long fd_count(void)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/fd", (int)g_pid);
    DIR *d = opendir(path);
    if (!d)
        die("cannot read the process's descriptors");
    long n = 0;
    while (readdir(d))
        n++;
    closedir(d);
    return n - 2;
}

/* Waits until PID holds at most `target` descriptors (it processed the closes). */
static void wait_fds_at_most(long target)
{
    double t0 = now_s();
    while (fd_count() > target) {
        if (now_s() - t0 > 60) {
            fprintf(stderr, "bench_scale: the process still holds %ld descriptors (want %ld)\n", fd_count(), target);
            exit(1);
        }
        usleep(2000);
    }
}

/* ------------------------------------------------------------ raw IPC */

struct methods {
    uint32_t sid;
    struct {
        char name[48];
        uint32_t id;
    } m[MAX_METHODS];
    int n;
};

static void collect(void *arg, uint32_t id, const char *name, size_t nl)
{
    struct methods *ms = arg;
    if (ms->n < MAX_METHODS && nl < sizeof ms->m[0].name) {
        memcpy(ms->m[ms->n].name, name, nl);
        ms->m[ms->n].name[nl] = 0;
        ms->m[ms->n].id = id;
        ms->n++;
    }
}

static uint32_t method_id(const struct methods *ms, const char *name)
{
    for (int i = 0; i < ms->n; i++)
        if (strcmp(ms->m[i].name, name) == 0)
            return ms->m[i].id;
    fprintf(stderr, "bench_scale: method %s not offered\n", name);
    exit(1);
}

static int send_frame(int fd, const uint8_t *body, size_t len, int pass_fd)
{
    uint8_t hdr[4];
    tg_frame_put_header(hdr, (uint32_t)len);
    struct iovec iov[2] = {{hdr, 4}, {(void *)body, len}};
    union {
        char buf[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } u;
    struct msghdr mh = {.msg_iov = iov, .msg_iovlen = 2};
    if (pass_fd >= 0) {
        memset(&u, 0, sizeof u);
        mh.msg_control = u.buf;
        mh.msg_controllen = sizeof u.buf;
        struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
        cm->cmsg_level = SOL_SOCKET;
        cm->cmsg_type = SCM_RIGHTS;
        cm->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(cm), &pass_fd, sizeof(int));
    }
    return sendmsg(fd, &mh, MSG_NOSIGNAL) == (ssize_t)(len + 4) ? 0 : -1;
}

/* A blocking reader of whole frames (small replies only). */
struct rd {
    uint8_t buf[65536];
    size_t len;
};

/* Reads the next frame of fd; its body is at r->buf + 4, its length returned (-1: closed/error). */
static long next_frame(int fd, struct rd *r)
{
    for (;;) {
        if (r->len >= 4) {
            size_t bl = (size_t)r->buf[0] | (size_t)r->buf[1] << 8 | (size_t)r->buf[2] << 16 | (size_t)r->buf[3] << 24;
            if (bl + 4 > sizeof r->buf)
                return -1;
            if (r->len >= bl + 4)
                return (long)bl;
        }
        ssize_t n = recv(fd, r->buf + r->len, sizeof r->buf - r->len, 0);
        if (n <= 0) {
            if (n < 0 && errno == EINTR)
                continue;
            return -1;
        }
        r->len += (size_t)n;
    }
}

static void pop_frame(struct rd *r, long bl)
{
    memmove(r->buf, r->buf + bl + 4, r->len - (size_t)bl - 4);
    r->len -= (size_t)bl + 4;
}

/* Reads `want` frames; 0 if every one is a successful BindServiceReply / InvokeMethodReply. ms (may
 * be NULL) gets the methods of a BindServiceReply. */
static int read_replies(int fd, int want, struct methods *ms)
{
    struct rd r;
    r.len = 0;
    int ok = 1;
    for (int i = 0; i < want; i++) {
        long bl = next_frame(fd, &r);
        if (bl < 0)
            return -1;
        struct tg_frame_info fi;
        if (tg_frame_scan(r.buf + 4, (size_t)bl, &fi) != 0)
            ok = 0;
        else if (fi.msg == TG_MSG_BIND_SERVICE_REPLY) {
            int s = 0;
            uint32_t sid = 0;
            struct methods tmp;
            memset(&tmp, 0, sizeof tmp);
            if (tg_ipc_parse_bind_reply(fi.msg_data, fi.msg_len, &s, &sid, collect, ms ? (void *)ms : &tmp) != 0 ||
                !s)
                ok = 0;
            if (ms)
                ms->sid = sid;
        } else if (fi.msg != TG_MSG_INVOKE_METHOD_REPLY || !fi.success) {
            ok = 0;
        }
        pop_frame(&r, bl);
    }
    return ok ? 0 : -1;
}

static int connect_to(const struct tg_addr *a)
{
    int fd = socket(a->family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    if (connect(fd, (const struct sockaddr *)&a->ss, a->len) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static int send_bind(int fd, uint64_t rid, const char *service)
{
    uint8_t f[128];
    size_t fl = tg_ipc_encode_bind(f, sizeof f, rid, service);
    return send_frame(fd, f, fl, -1);
}

static int send_invoke(int fd, const struct methods *ms, uint64_t rid, const char *method, const ProtobufCMessage *req,
                       int pass_fd)
{
    uint8_t args[1024], f[1200];
    size_t al = req ? protobuf_c_message_get_packed_size(req) : 0;
    if (al > sizeof args)
        return -1;
    if (req)
        protobuf_c_message_pack(req, args);
    size_t fl = tg_ipc_encode_invoke(f, sizeof f, rid, ms->sid, method_id(ms, method), args, al, 0);
    return send_frame(fd, f, fl, pass_fd);
}

/* ------------------------------------------------------------ one connection of each kind */

static const struct tg_addr *g_addr;
static struct methods g_ms; /* method ids of the port (the same on every connection) */
static size_t g_smb_bytes = 16u << 10;
static long g_seq;

/* A sealed memfd of g_smb_bytes, as a producer-provided SMB. */
static int make_smb(void)
{
    int fd = memfd_create("perfetto_shmem", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0 || ftruncate(fd, (off_t)g_smb_bytes) != 0 ||
        fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0)
        die("memfd");
    return fd;
}

/* Sends what opens one connection; returns the fd and how many replies to expect. */
static int open_send(int producer, int *replies)
{
    int fd = connect_to(g_addr);
    if (fd < 0)
        return -1;
    if (!producer) {
        *replies = 1;
        return send_bind(fd, 1, "ConsumerPort") == 0 ? fd : (close(fd), -1);
    }
    char name[64], ds[64];
    long i = g_seq++;
    snprintf(name, sizeof name, "bench.scale.%ld", i);
    snprintf(ds, sizeof ds, "bench.scale.ds.%ld", i);
    Perfetto__Protos__InitializeConnectionRequest init = PERFETTO__PROTOS__INITIALIZE_CONNECTION_REQUEST__INIT;
    init.producer_name = name;
    init.has_producer_provided_shmem = 1;
    init.producer_provided_shmem = 1;
    init.has_shared_memory_page_size_hint_bytes = 1;
    init.shared_memory_page_size_hint_bytes = 4096;
    init.has_shared_memory_size_hint_bytes = 1;
    init.shared_memory_size_hint_bytes = (uint32_t)g_smb_bytes;
    Perfetto__Protos__DataSourceDescriptor d = PERFETTO__PROTOS__DATA_SOURCE_DESCRIPTOR__INIT;
    d.name = ds;
    Perfetto__Protos__RegisterDataSourceRequest reg = PERFETTO__PROTOS__REGISTER_DATA_SOURCE_REQUEST__INIT;
    reg.data_source_descriptor = &d;
    int smb = make_smb();
    int rc = send_bind(fd, 1, "ProducerPort") == 0 && send_invoke(fd, &g_ms, 2, "InitializeConnection", &init.base, smb) == 0 &&
                     send_invoke(fd, &g_ms, 3, "RegisterDataSource", &reg.base, -1) == 0
                 ? 0
                 : -1;
    close(smb); /* in flight (SCM_RIGHTS) the file lives on; the service maps it */
    *replies = 3;
    if (rc != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* Opens n connections (batches of BATCH in flight); returns how many were set up. */
static long open_many(int producer, int *fds, long n)
{
    long done = 0;
    while (done < n) {
        long first = done;
        int want[BATCH];
        for (; done < n && done - first < BATCH; done++) {
            fds[done] = open_send(producer, &want[done - first]);
            if (fds[done] < 0) {
                fprintf(stderr, "bench_scale: connection %ld: %s\n", done, strerror(errno));
                return done;
            }
        }
        for (long i = first; i < done; i++)
            if (read_replies(fds[i], want[i - first], NULL) != 0) {
                fprintf(stderr, "bench_scale: connection %ld was not served\n", i);
                return i;
            }
    }
    return done;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* ------------------------------------------------------------ main */

int main(int argc, char **argv)
{
    if (argc < 3 || (strcmp(argv[1], "gw") != 0 && strcmp(argv[1], "producers") != 0)) {
        fprintf(stderr, "usage: bench_scale gw ADDR --conns N --pid PID [--rr K] [--churn M]\n"
                        "       bench_scale producers PATH --conns N --pid PID [--consumer CPATH] [--smb-kb S]\n"
                        "                             [--rr K] [--churn M]\n");
        return 2;
    }
    int producer = strcmp(argv[1], "producers") == 0;
    long n = 1000, rr = 2000, churn = 200;
    const char *consumer = NULL;
    for (int i = 3; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--conns") == 0)
            n = atol(argv[i + 1]);
        else if (strcmp(argv[i], "--pid") == 0)
            g_pid = (pid_t)atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--rr") == 0)
            rr = atol(argv[i + 1]);
        else if (strcmp(argv[i], "--churn") == 0)
            churn = atol(argv[i + 1]);
        else if (strcmp(argv[i], "--consumer") == 0)
            consumer = argv[i + 1];
        else if (strcmp(argv[i], "--smb-kb") == 0)
            g_smb_bytes = (size_t)atol(argv[i + 1]) << 10;
    }
    if (g_pid <= 0 || n < 1 || rr < 10 || (producer && !consumer)) {
        fprintf(stderr, "bench_scale: --pid, --conns >= 1, --rr >= 10 (and --consumer for producers) are needed\n");
        return 2;
    }
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
        if (rl.rlim_cur < (rlim_t)n + 64) {
            fprintf(stderr, "bench_scale: RLIMIT_NOFILE (%llu) is too low for %ld connections\n",
                    (unsigned long long)rl.rlim_cur, n);
            return 1;
        }
    }
    struct tg_addr a, ca;
    char err[256];
    if (tg_addr_parse(argv[2], &a, err, sizeof err) != 0 ||
        (consumer && tg_addr_parse(consumer, &ca, err, sizeof err) != 0)) {
        fprintf(stderr, "bench_scale: %s\n", err);
        return 2;
    }
    g_addr = &a;
    if (producer) { /* the port's method ids, from a first binding */
        int fd = connect_to(&a);
        if (fd < 0 || send_bind(fd, 1, "ProducerPort") != 0 || read_replies(fd, 1, &g_ms) != 0)
            die("binding ProducerPort");
        close(fd);
    }
    long fds_base = fd_count();
    /* warm-up: a few connections opened and closed first, so that one-time costs (first
     * allocations of each size, lazy binding, page faults of fresh heap) are not charged to the
     * N of the smallest rows */
    for (int k = 0; k < 50; k++) {
        int want, fd = open_send(producer, &want);
        if (fd < 0 || read_replies(fd, want, NULL) != 0)
            die("warm-up connection");
        close(fd);
    }
    wait_fds_at_most(fds_base);
    /* idle with no connection: the baseline (timers of the process itself) */
    unsigned long long b0 = cpu_ns();
    double tb = now_s();
    usleep(1000000);
    unsigned long long b1 = cpu_ns();
    double base_s = now_s() - tb;

    /* open N */
    int *fds = malloc((size_t)n * sizeof *fds);
    long rss0 = rss_kb();
    unsigned long long c0 = cpu_ns();
    long opened = open_many(producer, fds, n);
    unsigned long long c1 = cpu_ns();
    if (opened != n) {
        fprintf(stderr, "bench_scale: only %ld of %ld connections were served\n", opened, n);
        return 1;
    }
    long fds_held = fd_count();
    long rss1 = rss_kb();

    /* idle: PID's CPU with N held and nothing happening */
    unsigned long long i0 = cpu_ns();
    double t0 = now_s();
    usleep(1000000);
    unsigned long long i1 = cpu_ns();
    double idle_s = now_s() - t0;

    /* the active client */
    int afd = connect_to(producer ? &ca : &a);
    struct methods ams;
    memset(&ams, 0, sizeof ams);
    if (afd < 0 || send_bind(afd, 1, "ConsumerPort") != 0 || read_replies(afd, 1, &ams) != 0)
        die("binding the active client");
    double *lat = malloc((size_t)rr * sizeof *lat);
    for (long k = 0; k < rr / 10; k++) { /* warm-up */
        if (send_invoke(afd, &ams, (uint64_t)(2 + k), "QueryCapabilities", NULL, -1) != 0 || read_replies(afd, 1, NULL) != 0)
            die("QueryCapabilities");
    }
    unsigned long long r0 = cpu_ns();
    for (long k = 0; k < rr; k++) {
        double s = now_s();
        if (send_invoke(afd, &ams, (uint64_t)(100000 + k), "QueryCapabilities", NULL, -1) != 0 ||
            read_replies(afd, 1, NULL) != 0)
            die("QueryCapabilities");
        lat[k] = now_s() - s;
    }
    unsigned long long r1 = cpu_ns();
    close(afd);
    wait_fds_at_most(fds_held);
    qsort(lat, (size_t)rr, sizeof *lat, cmp_double);

    /* churn: one more connection opened and closed, M times */
    unsigned long long h0 = cpu_ns();
    for (long k = 0; k < churn; k++) {
        int want, fd = open_send(producer, &want);
        if (fd < 0 || read_replies(fd, want, NULL) != 0)
            die("churn connection");
        close(fd);
    }
    wait_fds_at_most(fds_held);
    unsigned long long h1 = cpu_ns();

    /* close the N */
    unsigned long long x0 = cpu_ns();
    for (long i = 0; i < n; i++)
        close(fds[i]);
    wait_fds_at_most(fds_base);
    unsigned long long x1 = cpu_ns();

    printf("n=%ld rss_per_conn_bytes=%.0f open_cpu_us=%.2f idle_cpu_ns_s=%.1f rr_p50_us=%.1f rr_p99_us=%.1f "
           "rr_cpu_us=%.2f churn_cpu_us=%.2f close_cpu_us=%.2f rss_before_kb=%ld rss_after_kb=%ld fds=%ld "
           "idle_pct=%.3f idle0_pct=%.3f\n",
           n, (double)(rss1 - rss0) * 1024 / (double)n, (double)(c1 - c0) / 1e3 / (double)n,
           ((double)(i1 - i0) / idle_s - (double)(b1 - b0) / base_s) / (double)n, lat[rr / 2] * 1e6, lat[rr * 99 / 100] * 1e6,
           (double)(r1 - r0) / 1e3 / (double)rr, churn ? (double)(h1 - h0) / 1e3 / (double)churn : 0,
           (double)(x1 - x0) / 1e3 / (double)n, rss0, rss1, fds_held - fds_base, (double)(i1 - i0) / idle_s / 1e7,
           (double)(b1 - b0) / base_s / 1e7);
    free(lat);
    free(fds);
    return 0;
}
