/* clock.h: monotonic time in milliseconds and microseconds, for timeouts and rate limits.
 * Pure functions, any thread. */
#ifndef TRACEGATE_CLOCK_H
#define TRACEGATE_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline uint64_t tg_mono_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

static inline uint64_t tg_mono_ms(void) { return tg_mono_us() / 1000u; }

#endif
