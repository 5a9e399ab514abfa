/* trace_build.h: traces built packet by packet in memory, for tests and benchmarks of the trace
 * readers (tracectl dump): a Trace is a run of field-1 records, one TracePacket each.
 *
 * Ownership: the caller owns the struct (zero-initialised is empty) and frees data. Threading: none. */
#ifndef TRACEGATE_TESTS_TRACE_BUILD_H
#define TRACEGATE_TESTS_TRACE_BUILD_H

#include <stddef.h>
#include <stdint.h>

#include "trace_packet.pb-c.h"

struct tb_trace {
    uint8_t *data;
    size_t len, cap;
};

/* Appends p. 0, or -1 when out of memory. */
int tb_put_packet(struct tb_trace *b, const Perfetto__Protos__TracePacket *p);
/* Appends a TrackEvent SLICE_BEGIN named by iid, on sequence seq at ts; interned (or NULL): the
 * EventName (iid, interned) the packet carries; cleared: it clears the sequence's incremental
 * state first. 0 or -1. */
int tb_slice_by_iid(struct tb_trace *b, uint32_t seq, uint64_t ts, uint64_t iid, const char *interned, int cleared);

#endif
