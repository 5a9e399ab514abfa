/* clock_sync_est.h: a remote machine's BOOTTIME offset to the host as trace processor derives it
 * from the trace's RemoteClockSync packets (its CalculateClockOffsets): EVERY two consecutive
 * SyncedClocks entries whose client BOOTTIME readings are under 30 s apart (an unsigned
 * difference, so an entry reading earlier than the one before counts as far) are a round trip
 * t1c,t1h,t2c,t2h giving (t1c+t2c)/2 - t1h and t2c - (t1h+t2h)/2; not only a relay's PING and its
 * UPDATE, also one round's UPDATE and the next round's PING when they are that close. The
 * machine's offset is the mean of all of them over every packet. Shared by `tracectl dump` (its
 * clock sync line and --flows) and the span stitcher (which end of a flow comes first), so the
 * two order slices on the host clock exactly as trace processor will.
 *
 * Ownership: the caller owns the table; tc_sync_ests_free releases it. Threading: none. */
#ifndef TRACEGATE_TRACECTL_CLOCK_SYNC_EST_H
#define TRACEGATE_TRACECTL_CLOCK_SYNC_EST_H

#include <stddef.h>
#include <stdint.h>

#include "u32_index.h"

struct tc_sync_est {
    uint32_t machine;
    size_t pairs;  /* consecutive entries read as a round trip */
    double sum_ns; /* of 2 * pairs estimates */
};

struct tc_sync_ests {
    struct tc_sync_est *v;
    size_t n, cap;
    struct tc_u32_index ix; /* machine id -> v[] */
};

/* One SyncedClocks entry's BOOTTIME readings; ok = 0 when either snapshot lacks BOOTTIME. */
struct tc_sync_reading {
    int ok;
    uint64_t client, host;
};

/* Adds one RemoteClockSync packet of machine (its entries in order). 0, or -1 on OOM. */
int tc_sync_ests_add(struct tc_sync_ests *e, uint32_t machine, const struct tc_sync_reading *r, size_t n);
/* The mean of a machine's estimates, ns (pairs > 0). */
double tc_sync_est_mean_ns(const struct tc_sync_est *m);
/* The machine's clock minus the host's, ns: 1 when some pair gave it, 0 otherwise (*ns = 0). */
int tc_sync_ests_offset(const struct tc_sync_ests *e, uint32_t machine, int64_t *ns);
void tc_sync_ests_free(struct tc_sync_ests *e);

/* A machine's time on the host clock: ts less the machine's offset, saturating at the int64 ends
 * (a hostile trace's clock sync can be anything). */
static inline int64_t tc_host_time(int64_t ts, int64_t off)
{
    if (off < 0 && ts > INT64_MAX + off)
        return INT64_MAX;
    if (off > 0 && ts < INT64_MIN + off)
        return INT64_MIN;
    return ts - off;
}

#endif
