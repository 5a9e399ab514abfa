/* log_sample.c: at most N log lines per window for events a peer can cause at will (see
 * log_sample.h). */
#include "base/log_sample.h"

int tg_log_sample(struct tg_log_sampler *s, uint64_t now_us, unsigned per_window, uint64_t window_us,
                  unsigned *unlogged)
{
    if (!s->started || now_us - s->window_start_us >= window_us) {
        s->started = 1;
        s->window_start_us = now_us;
        s->logged = 0;
    }
    if (s->logged >= per_window) {
        s->unlogged++;
        return 0;
    }
    s->logged++;
    *unlogged = s->unlogged;
    s->unlogged = 0;
    return 1;
}
