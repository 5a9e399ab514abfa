/* span_lanes.h: the lanes (thread tracks) the stitcher lays one thread's spans out on. Spans come
 * in order of their begin time; each goes on a lane where it nests properly (the lane is empty at
 * its begin, or the lane's innermost open span ends no earlier than it does), else on a new lane,
 * so that every lane's slices nest as TrackEvent requires. The first TC_LANES_FIRST_FIT lanes are
 * tried in order (what a reader expects: a span goes on the first track it fits); past them a
 * span takes the lowest-numbered empty lane or a new one. Expired spans are ended through one
 * heap over all lanes, so laying out n spans costs O(n log n) however they overlap (trying every
 * lane made n staggered spans, each overlapping the next without nesting, cost O(n^2): 40,000
 * took 4 s, a million would take hours).
 *
 * Single-threaded; the caller owns the struct and frees it with tc_lanes_free. */
#ifndef TRACEGATE_TRACECTL_SPAN_LANES_H
#define TRACEGATE_TRACECTL_SPAN_LANES_H

#include <stddef.h>
#include <stdint.h>

#define TC_LANES_FIRST_FIT 64

struct tc_lane_slot {
    uint64_t end;
    size_t item;
};

struct tc_lane_heap_entry {
    uint64_t key;
    size_t lane;
};

struct tc_lanes {
    struct {
        struct tc_lane_slot *stack; /* open spans, innermost last (ends non-increasing upwards) */
        size_t depth, cap;
    } *lane;
    size_t n_lanes, cap_lanes;
    struct tc_lane_heap_entry *ends; /* min-heap on the end of a lane's innermost span (some stale) */
    size_t n_ends, cap_ends;
    size_t *free_lanes; /* min-heap of empty lanes numbered TC_LANES_FIRST_FIT and up */
    size_t n_free, cap_free;
};

/* Called for each span that ends, in the order of its lane's nesting (inner first); non-zero
 * stops the layout with that error. */
typedef int (*tc_lane_end_fn)(void *arg, size_t item);

/* Ends (through end_fn) the spans that end at or before begin, then places span item
 * [begin, end] (begin no earlier than the previous call's) on a lane: *lane gets its number and
 * *is_new 1 when the lane was created for it (lanes are numbered from 0 in creation order).
 * Returns 0, or -1 on OOM or when end_fn failed. */
int tc_lanes_place(struct tc_lanes *l, uint64_t begin, uint64_t end, size_t item, tc_lane_end_fn end_fn, void *arg,
                   size_t *lane, int *is_new);
/* Ends every span still open, lane by lane. Returns 0, or -1 when end_fn failed. */
int tc_lanes_finish(struct tc_lanes *l, tc_lane_end_fn end_fn, void *arg);
void tc_lanes_free(struct tc_lanes *l);

#endif
