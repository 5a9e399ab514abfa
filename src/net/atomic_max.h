/* atomic_max.h: raise a shared high-water mark (peak counters read by tests and metrics) without
 * a lock. Any thread. */
#ifndef TRACEGATE_NET_ATOMIC_MAX_H
#define TRACEGATE_NET_ATOMIC_MAX_H

#include <stdatomic.h>
#include <stddef.h>

/* *a = max(*a, v), relaxed: only the peak itself is published. */
static inline void tg_atomic_size_max(atomic_size_t *a, size_t v)
{
    size_t cur = atomic_load_explicit(a, memory_order_relaxed);
    while (v > cur && !atomic_compare_exchange_weak_explicit(a, &cur, v, memory_order_relaxed, memory_order_relaxed))
        ;
}

#endif
