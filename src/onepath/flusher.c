/* flusher.c: periodic flush thread shared by the span and metrics exporters (a condition
 * variable on CLOCK_MONOTONIC, woken early by kick or stop). */
#include "onepath/flusher.h"

#include <errno.h>
#include <signal.h>
#include <time.h>

static void deadline_after(struct timespec *ts, unsigned ms)
{
    clock_gettime(CLOCK_MONOTONIC, ts);
    ts->tv_sec += ms / 1000;
    ts->tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts->tv_nsec >= 1000000000L) {
        ts->tv_sec++;
        ts->tv_nsec -= 1000000000L;
    }
}

static void *run(void *arg)
{
    struct tg_op_flusher *f = arg;
    struct timespec next;
    deadline_after(&next, f->period_ms);
    for (;;) {
        pthread_mutex_lock(&f->mu);
        while (!atomic_load(&f->stop) && !f->kicked) {
            if (pthread_cond_timedwait(&f->cv, &f->mu, &next) == ETIMEDOUT)
                break;
        }
        int stop = atomic_load(&f->stop);
        int kicked = f->kicked;
        f->kicked = 0;
        pthread_mutex_unlock(&f->mu);
        if (stop)
            break;
        if (!kicked)
            deadline_after(&next, f->period_ms);
        f->flush(f->arg, 0);
    }
    f->flush(f->arg, 1);
    return NULL;
}

int tg_op_flusher_start(struct tg_op_flusher *f, unsigned period_ms, void (*flush)(void *arg, int final), void *arg)
{
    f->period_ms = period_ms ? period_ms : 1;
    f->flush = flush;
    f->arg = arg;
    f->kicked = 0;
    atomic_init(&f->stop, 0);
    pthread_condattr_t ca;
    if (pthread_condattr_init(&ca))
        return -1;
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    int rc = pthread_cond_init(&f->cv, &ca);
    pthread_condattr_destroy(&ca);
    if (rc)
        return -1;
    if (pthread_mutex_init(&f->mu, NULL)) {
        pthread_cond_destroy(&f->cv);
        return -1;
    }
    /* the new thread inherits this mask: block everything there, restore it here */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    rc = pthread_create(&f->th, NULL, run, f);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc) {
        pthread_mutex_destroy(&f->mu);
        pthread_cond_destroy(&f->cv);
        return -1;
    }
    return 0;
}

void tg_op_flusher_kick(struct tg_op_flusher *f)
{
    pthread_mutex_lock(&f->mu);
    f->kicked = 1;
    pthread_cond_signal(&f->cv);
    pthread_mutex_unlock(&f->mu);
}

void tg_op_flusher_stop(struct tg_op_flusher *f)
{
    pthread_mutex_lock(&f->mu);
    atomic_store(&f->stop, 1);
    pthread_cond_signal(&f->cv);
    pthread_mutex_unlock(&f->mu);
    pthread_join(f->th, NULL);
    pthread_mutex_destroy(&f->mu);
    pthread_cond_destroy(&f->cv);
}

int tg_op_flusher_stopping(const struct tg_op_flusher *f) { return atomic_load(&f->stop); }
