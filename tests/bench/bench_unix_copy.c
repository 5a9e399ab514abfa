/* bench_unix_copy.c: is sending a read-out straight from the trace buffer cheaper than copying it
 * first? Two ways to send the same bytes over a UNIX stream socket to a reader on another CPU:
 *   copy:   each fragment (with a 4-byte slice header; 8-byte frame header per 32 KiB reply) is
 *           copied from a cold 64 MiB source into one hot buffer, then one write() per batch;
 *   direct: sendmsg() with iovecs straight over the source (two per fragment, one per reply).
 * Eight replies per system call, fragments of 1, 4 and 32 KiB, rounds interleaved; prints the
 * median sender CPU per MB and the best GB/s of each (docs/benchmarks.md, ReadBuffers section).
 *
 * Usage: bench_unix_copy [scale]   (default 1: 5 rounds; `make bench BENCH_ARGS=N` passes N, and
 * the rounds are 5 N, at least 3; each run moves 256 MiB, about 0.06 s) */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define SOURCE_BYTES (64u << 20)
#define PASSES 4 /* source read-throughs per run */
#define REPLY_BYTES (32u << 10)
#define REPLIES_PER_CALL 8
#define FRAME_HDR 8
#define SLICE_HDR 4
#define MAX_IOV (REPLIES_PER_CALL * (1 + 2 * (REPLY_BYTES / 1024)))
#define MAX_ROUNDS 64

struct run_result {
    double gbps;
    double us_per_mb; /* sender thread CPU per MB sent */
};

static double clock_s(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void pin_to_cpu(int cpu)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu % CPU_SETSIZE, &set);
    (void)pthread_setaffinity_np(pthread_self(), sizeof set, &set); /* best effort */
}

static void *drain(void *arg)
{
    int fd = *(int *)arg;
    pin_to_cpu(1);
    static char sink[256 << 10];
    ssize_t n;
    while ((n = read(fd, sink, sizeof sink)) > 0 || (n < 0 && errno == EINTR))
        ;
    return NULL;
}

static int write_all(int fd, const char *p, size_t n)
{
    while (n) {
        ssize_t k = write(fd, p, n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return -1;
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

/* sendmsg until every iovec is sent (a blocking stream socket may still return short) */
static int sendmsg_all(int fd, struct iovec *iov, int cnt)
{
    while (cnt) {
        struct msghdr m = { .msg_iov = iov, .msg_iovlen = (size_t)cnt };
        ssize_t k = sendmsg(fd, &m, 0);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return -1;
        size_t left = (size_t)k;
        while (cnt && left >= iov->iov_len) {
            left -= iov->iov_len;
            iov++;
            cnt--;
        }
        if (cnt) {
            iov->iov_base = (char *)iov->iov_base + left;
            iov->iov_len -= left;
        }
    }
    return 0;
}

static int run_once(const char *src, int direct, size_t frag, struct run_result *out)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0)
        return -1;
    pthread_t reader;
    if (pthread_create(&reader, NULL, drain, &sv[1]) != 0)
        return -1;
    pin_to_cpu(0);
    static char hot[REPLIES_PER_CALL * (FRAME_HDR + REPLY_BYTES + SLICE_HDR * (REPLY_BYTES / 1024))];
    static struct iovec iov[MAX_IOV];
    static char frame_hdr[FRAME_HDR], slice_hdr[SLICE_HDR];
    const size_t frags = REPLY_BYTES / frag, per_call = REPLIES_PER_CALL * frags * frag;
    size_t total = 0;
    int rc = 0;
    double wall0 = clock_s(CLOCK_MONOTONIC), cpu0 = clock_s(CLOCK_THREAD_CPUTIME_ID);
    for (int pass = 0; pass < PASSES && rc == 0; pass++) {
        for (size_t off = 0; off + per_call <= SOURCE_BYTES && rc == 0;) {
            size_t n = 0;
            int cnt = 0;
            for (int r = 0; r < REPLIES_PER_CALL; r++) {
                if (direct) {
                    iov[cnt++] = (struct iovec){ frame_hdr, FRAME_HDR };
                } else {
                    memcpy(hot + n, frame_hdr, FRAME_HDR);
                }
                n += FRAME_HDR;
                for (size_t f = 0; f < frags; f++, off += frag) {
                    if (direct) {
                        iov[cnt++] = (struct iovec){ slice_hdr, SLICE_HDR };
                        iov[cnt++] = (struct iovec){ (char *)src + off, frag };
                    } else {
                        memcpy(hot + n, slice_hdr, SLICE_HDR);
                        memcpy(hot + n + SLICE_HDR, src + off, frag);
                    }
                    n += SLICE_HDR + frag;
                }
            }
            rc = direct ? sendmsg_all(sv[0], iov, cnt) : write_all(sv[0], hot, n);
            total += n;
        }
    }
    double wall = clock_s(CLOCK_MONOTONIC) - wall0, cpu = clock_s(CLOCK_THREAD_CPUTIME_ID) - cpu0;
    shutdown(sv[0], SHUT_WR);
    pthread_join(reader, NULL);
    close(sv[0]);
    close(sv[1]);
    out->gbps = (double)total / wall / 1e9;
    out->us_per_mb = cpu / ((double)total / 1e6) * 1e6;
    return rc;
}

static int by_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    double scale = argc > 1 ? atof(argv[1]) : 1.0;
    if (!(scale > 0) || scale * 5 > MAX_ROUNDS) {
        fprintf(stderr, "usage: bench_unix_copy [scale > 0, at most %d]\n", MAX_ROUNDS / 5);
        return 2;
    }
    int rounds = (int)(scale * 5 + 0.5);
    if (rounds < 3)
        rounds = 3;
    char *src = malloc(SOURCE_BYTES);
    if (!src)
        return 1;
    for (size_t i = 0; i < SOURCE_BYTES; i++)
        src[i] = (char)(i * 131u);
    printf("bench_unix_copy: 32 KiB replies, %d per system call, from a 64 MiB source, reader on another CPU\n",
           REPLIES_PER_CALL);
    printf("   fragment   copy: us/MB (median)  best GB/s   direct: us/MB (median)  best GB/s   direct/copy CPU\n");
    static const size_t frag_sizes[] = { 1024, 4096, 32768 };
    for (size_t s = 0; s < sizeof frag_sizes / sizeof frag_sizes[0]; s++) {
        double cpu[2][MAX_ROUNDS], best[2] = { 0, 0 };
        for (int r = 0; r < rounds; r++) {
            for (int direct = 0; direct < 2; direct++) {
                struct run_result res;
                if (run_once(src, direct, frag_sizes[s], &res) != 0) {
                    perror("bench_unix_copy: send");
                    return 1;
                }
                cpu[direct][r] = res.us_per_mb;
                if (res.gbps > best[direct])
                    best[direct] = res.gbps;
            }
        }
        qsort(cpu[0], (size_t)rounds, sizeof(double), by_double);
        qsort(cpu[1], (size_t)rounds, sizeof(double), by_double);
        double med0 = cpu[0][rounds / 2], med1 = cpu[1][rounds / 2];
        printf("   %5zu KiB   %20.0f  %9.2f   %22.0f  %9.2f   %14.2f\n", frag_sizes[s] >> 10, med0, best[0],
               med1, best[1], med1 / med0);
    }
    free(src);
    return 0;
}
