/* trace_clocks.h: what stitching needs to know about an existing trace: per machine, pairs of
 * simultaneous (REALTIME, trace clock) readings from its ClockSnapshot packets (machine 0, the
 * host, whose trace clock is the snapshot's primary_trace_clock, BOOTTIME by default) and from
 * the client side of RemoteClockSync packets (a remote machine's own REALTIME and BOOTTIME), and
 * from both sides of them trace processor's estimate of each machine's offset to the host; the
 * machine ids present; every packet sequence id in use, so that packets added to the trace can
 * take sequence ids no packet of it uses. Single-threaded. */
#ifndef TRACEGATE_TRACECTL_TRACE_CLOCKS_H
#define TRACEGATE_TRACECTL_TRACE_CLOCKS_H

#include <stddef.h>
#include <stdint.h>

#include "clock_sync_est.h"

#define TC_CLOCK_REALTIME 1
#define TC_CLOCK_BOOTTIME 6

struct tc_clock_pair {
    uint64_t real;   /* REALTIME ns */
    uint64_t target; /* the machine's trace clock (host: primary clock; remote: BOOTTIME) ns */
    size_t order;    /* the pair's place in the trace (ties go to the earlier one) */
};

struct tc_machine_clocks {
    uint32_t machine_id; /* 0 = the host */
    uint32_t clock_id;   /* the clock of target */
    struct tc_clock_pair *pairs;
    size_t n, cap;
    int unsorted; /* pairs not in REALTIME order (tc_trace_clocks_sort sorts them) */
};

struct tc_trace_clocks {
    struct tc_machine_clocks *m; /* m[0] is always the host (machine 0) */
    size_t n, cap;
    struct tc_u32_index ix; /* machine id -> m[] */
    uint32_t max_seq_id;
    uint32_t *seq_ids; /* the sequence ids seen (repeats possible until tc_trace_clocks_fresh_seq_ids) */
    size_t n_seq_ids, cap_seq_ids;
    uint64_t packets;
    uint64_t compressed; /* packets with compressed_packets (not looked into) */
    struct tc_sync_ests sync; /* each remote machine's offset as trace processor derives it */
};

/* Scans a whole .pftrace in memory. 0, or -1 on a corrupt record / OOM (err). */
int tc_trace_clocks_scan(const uint8_t *data, size_t len, struct tc_trace_clocks *c, char *err, size_t errlen);
/* Adds one packet to c (tc_trace_clocks_scan calls it for every packet; c zeroed first). 0 or -1
 * on OOM. A malformed packet is ignored. */
int tc_trace_clocks_add_packet(struct tc_trace_clocks *c, const uint8_t *pkt, size_t len);
/* The machine's entry, NULL when the machine id never appears in the trace. */
const struct tc_machine_clocks *tc_trace_clocks_machine(const struct tc_trace_clocks *c, uint32_t machine_id);
/* Sorts every machine's pairs by REALTIME (then trace order), so that tc_clock_map finds the
 * nearest by bisection (tc_trace_clocks_scan calls it; after tc_trace_clocks_add_packet, call it
 * before mapping many timestamps). */
void tc_trace_clocks_sort(struct tc_trace_clocks *c);
/* Maps a REALTIME timestamp onto the machine's trace clock with the pair whose REALTIME is
 * nearest, the earliest in the trace among equally near ones (so drift between snapshots costs at
 * most half a snapshot period's drift). Bisection over sorted pairs, a scan otherwise. Returns 0,
 * or -1 when the machine has no pair or the result would be negative or above 2^64-1. */
int tc_clock_map(const struct tc_machine_clocks *mc, uint64_t real_ns, uint64_t *out);
/* Picks n distinct sequence ids (1..UINT32_MAX; 0 means "none" to Perfetto) that no packet of
 * the trace uses, above the highest one in use when there is room and in the gaps below
 * otherwise, into out[0..n-1]. 0, -1 when fewer than n ids are free, -2 on OOM. */
int tc_trace_clocks_fresh_seq_ids(const struct tc_trace_clocks *c, size_t n, uint32_t *out);
void tc_trace_clocks_free(struct tc_trace_clocks *c);

#endif
