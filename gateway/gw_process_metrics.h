/* gw_process_metrics.h: the process's own resources on /metrics: resident memory, open
 * descriptors and the bytes held in live heap allocations (the figure a leak grows, free of the
 * allocator's caching that makes resident memory go up and down).
 *
 * Any thread; reads /proc/self and the allocator's statistics at the call. The caller owns f. */
#ifndef TRACEGATE_GATEWAY_GW_PROCESS_METRICS_H
#define TRACEGATE_GATEWAY_GW_PROCESS_METRICS_H

#include <stdint.h>
#include <stdio.h>

/* Bytes in live heap allocations (malloc and friends), or -1 when this build cannot tell.
 * Under AddressSanitizer, its allocator counts (freed memory waiting in the quarantine is not
 * in use); with glibc, mallinfo2 over every arena; under ThreadSanitizer, -1. */
int64_t tg_process_heap_inuse(void);

/* Writes process_resident_memory_bytes, process_open_fds, process_max_fds and
 * tracegated_heap_inuse_bytes (each one the process can read). */
void tg_gw_process_metrics(FILE *f);

#endif
