/* ndjson_file.c: non-blocking open and patient, stoppable writes of the NDJSON export files;
 * the export statistics of both exporter kinds. */
#include "onepath/ndjson_file.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tracegate/clock.h"
#include "tracegate/onepath.h"

#define N_KINDS 4

static struct tg_op_export_stats g_stats[N_KINDS];
static pthread_mutex_t g_path_mu = PTHREAD_MUTEX_INITIALIZER;
static char g_path[N_KINDS][4096];

static int kind(int which) { return which >= 0 && which < N_KINDS ? which : 0; }

struct tg_op_export_stats *tg_op_stats(int which) { return &g_stats[kind(which)]; }

void tg_op_stats_reset(int which, const char *path)
{
    struct tg_op_export_stats *s = tg_op_stats(which);
    atomic_store(&s->active, 0);
    atomic_store(&s->queued, 0);
    atomic_store(&s->written, 0);
    atomic_store(&s->dropped, 0);
    atomic_store(&s->lost, 0);
    atomic_store(&s->bytes, 0);
    atomic_store(&s->stalls, 0);
    pthread_mutex_lock(&g_path_mu);
    snprintf(g_path[kind(which)], sizeof g_path[0], "%s", path ? path : "");
    pthread_mutex_unlock(&g_path_mu);
}

int onepath_export_stats(int which, onepath_export_stats_t *st, char *path, size_t path_cap)
{
    if (!st || which < 0 || which >= N_KINDS)
        return ONEPATH_ERR_INVAL;
    struct tg_op_export_stats *s = tg_op_stats(which);
    st->active = atomic_load(&s->active);
    st->queued = atomic_load(&s->queued);
    st->written = atomic_load(&s->written);
    st->dropped = atomic_load(&s->dropped);
    st->lost = atomic_load(&s->lost);
    st->bytes = atomic_load(&s->bytes);
    st->stalls = atomic_load(&s->stalls);
    if (path && path_cap) {
        pthread_mutex_lock(&g_path_mu);
        snprintf(path, path_cap, "%s", g_path[which]);
        pthread_mutex_unlock(&g_path_mu);
    }
    return ONEPATH_OK;
}

int tg_op_file_open(const char *path)
{
    return open(path, O_WRONLY | O_CREAT | O_APPEND | O_NONBLOCK | O_CLOEXEC | O_NOCTTY, 0600);
}

/* A write to a pipe nobody reads any more raised SIGPIPE on this thread (blocked here): take it
 * off the pending set so it is never delivered. */
static void discard_sigpipe(void)
{
    sigset_t pipe_only;
    sigemptyset(&pipe_only);
    sigaddset(&pipe_only, SIGPIPE);
    struct timespec zero = {0, 0};
    while (sigtimedwait(&pipe_only, NULL, &zero) == SIGPIPE)
        ;
}

int tg_op_file_write(int fd, const char *buf, size_t len, const atomic_int *stop, struct tg_op_export_stats *st)
{
    uint64_t last_progress = tg_mono_ms();
    while (len > 0) {
        ssize_t n = write(fd, buf, len);
        if (n > 0) {
            buf += n;
            len -= (size_t)n;
            atomic_fetch_add_explicit(&st->bytes, (uint64_t)n, memory_order_relaxed);
            last_progress = tg_mono_ms();
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            atomic_fetch_add_explicit(&st->stalls, 1, memory_order_relaxed);
            for (;;) {
                if (atomic_load(stop) && tg_mono_ms() - last_progress >= TG_OP_STOP_STALL_MS)
                    return -1;
                struct pollfd p = {.fd = fd, .events = POLLOUT};
                int r = poll(&p, 1, 50);
                if (r > 0 || (r < 0 && errno != EINTR))
                    break;
            }
            continue;
        }
        if (n < 0 && errno == EPIPE)
            discard_sigpipe();
        return -1;
    }
    return 0;
}
