/* clock.h: monotonic time in milliseconds, microseconds and nanoseconds (timeouts, rate limits,
 * durations) and wall-clock nanoseconds (timestamps other machines compare). Any thread. */
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

static inline uint64_t tg_mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* CLOCK_REALTIME in ns since the Unix epoch. */
static inline uint64_t tg_real_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

#endif
