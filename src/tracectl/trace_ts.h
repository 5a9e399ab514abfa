/* trace_ts.h: packet timestamps of a trace, read in file order, put on the trace's host clock
 * (BOOTTIME) as trace processor places them: global clocks through the latest host ClockSnapshot,
 * sequence-scoped clocks (ids 64..127, the SDK's incremental clock among them) through the
 * sequence's own ClockSnapshot, with incremental deltas accumulated and unit multipliers
 * applied. A remote machine's offset to the host is applied by the caller (it is known only once
 * the whole trace, with its RemoteClockSync packets, has been read).
 *
 * Ownership: the caller owns the state; tc_trace_ts_free releases what it allocated.
 * Threading: none (one reader). */
#ifndef TRACEGATE_TRACECTL_TRACE_TS_H
#define TRACEGATE_TRACECTL_TRACE_TS_H

#include <stddef.h>
#include <stdint.h>

#include "trace_packet.pb-c.h"

#include "u32_index.h"

#define TC_TS_MAX_CLOCKS 16 /* clocks kept per snapshot; more in one snapshot are ignored */

struct tc_ts_clock {
    uint32_t id;
    uint64_t value;     /* as the snapshot gave it (scoped: in its units) */
    uint64_t mult;      /* ns per unit (scoped clocks; 1 otherwise) */
    int incremental;
    uint64_t last;      /* incremental: the running absolute value */
};

/* A ClockSnapshot's clocks, allocated to the number it has (a trace can hold a snapshot for each
 * of a million sequences). */
struct tc_ts_snapshot {
    int has_boot;
    uint64_t boot; /* the snapshot's BOOTTIME reading */
    size_t n;
    struct tc_ts_clock c[];
};

struct tc_ts_seq {
    uint32_t seq;
    struct tc_ts_snapshot *scoped; /* the sequence's own snapshot of its scoped clocks, or NULL */
};

struct tc_trace_ts {
    struct tc_ts_snapshot *host; /* the latest snapshot of global clocks, or NULL */
    uint32_t primary;            /* the trace clock a host snapshot named (0: BOOTTIME) */
    struct tc_ts_seq *seqs;
    size_t n_seqs, cap_seqs;
    struct tc_u32_index ix; /* sequence id -> seqs[] */
};

/* Feeds one decoded packet (in file order) of sequence seq (0: none); default_clock is the
 * sequence's TracePacketDefaults.timestamp_clock_id as the reader keeps it (it owns the
 * sequence's incremental state; 0: none). Returns 1 and *ts (host BOOTTIME ns, before any machine
 * offset) when the packet has a timestamp that can be placed, 0 when it has none or its clock is
 * unknown so far, -1 on OOM. */
int tc_trace_ts_packet(struct tc_trace_ts *t, uint32_t seq, uint32_t default_clock,
                       const Perfetto__Protos__TracePacket *p, int64_t *ts);
void tc_trace_ts_free(struct tc_trace_ts *t);

#endif
