/* log_sample.h: sampled logging for events a peer can cause at will (refused connections, cut
 * handshakes). A flood of them must not become a flood of log lines: at most `per_window` are
 * logged per window, the rest are counted and the next line logged says how many were not.
 * Metrics still count every event.
 * Ownership and threading: a sampler is a plain struct owned by its caller (zeroed to start); it
 * is not locked, so each is used from one thread. */
#ifndef TG_BASE_LOG_SAMPLE_H
#define TG_BASE_LOG_SAMPLE_H

#include <stdint.h>

struct tg_log_sampler {
    uint64_t window_start_us; /* when the current window began */
    int started;              /* a window began (0 in a zeroed sampler) */
    unsigned logged;          /* lines logged in it */
    unsigned unlogged;        /* events not logged since the last line */
};

/* Whether the event at now_us is to be logged: 1, with *unlogged set to the events passed over
 * since the last line logged (to mention in this one, 0 if none), or 0 (counted). */
int tg_log_sample(struct tg_log_sampler *s, uint64_t now_us, unsigned per_window, uint64_t window_us,
                  unsigned *unlogged);

#endif
