/* flusher.h: the background thread of an exporter: calls flush(arg, 0) every period_ms or when
 * kicked, and flush(arg, 1) once when stopped. The thread runs with every signal blocked, so
 * signals go to the application's threads and a write to a closed pipe returns EPIPE instead of
 * killing the process. start/stop from one controlling thread; kick and stopping from any. */
#ifndef TG_ONEPATH_FLUSHER_H
#define TG_ONEPATH_FLUSHER_H

#include <pthread.h>
#include <stdatomic.h>

struct tg_op_flusher {
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    atomic_int stop; /* set by tg_op_flusher_stop; read by flush callbacks to give up stuck I/O */
    int kicked;      /* under mu */
    unsigned period_ms;
    void (*flush)(void *arg, int final);
    void *arg;
};

/* 0, or -1 (nothing started) if the thread cannot be created. */
int tg_op_flusher_start(struct tg_op_flusher *f, unsigned period_ms, void (*flush)(void *arg, int final), void *arg);
/* Asks for a flush now (takes the flusher's mutex briefly; the flush thread never holds it while
 * flushing). */
void tg_op_flusher_kick(struct tg_op_flusher *f);
/* Stops the thread after its final flush and joins it. */
void tg_op_flusher_stop(struct tg_op_flusher *f);
int tg_op_flusher_stopping(const struct tg_op_flusher *f);

#endif
