/* span_lanes.c: lanes for one thread's spans in O(n log n) (see span_lanes.h). */
#include "span_lanes.h"

#include <stdlib.h>
#include <string.h>

static int grow(void **v, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return 0;
    size_t c = *cap ? *cap * 2 : 16;
    while (c < need)
        c *= 2;
    void *p = realloc(*v, c * elem);
    if (!p)
        return -1;
    *v = p;
    *cap = c;
    return 0;
}

/* ---- the two min-heaps ---- */

static int ends_push(struct tc_lanes *l, uint64_t key, size_t lane)
{
    if (grow((void **)&l->ends, &l->cap_ends, l->n_ends + 1, sizeof *l->ends))
        return -1;
    size_t i = l->n_ends++;
    while (i && l->ends[(i - 1) / 2].key > key) {
        l->ends[i] = l->ends[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    l->ends[i] = (struct tc_lane_heap_entry){key, lane};
    return 0;
}

static void ends_pop(struct tc_lanes *l)
{
    struct tc_lane_heap_entry last = l->ends[--l->n_ends];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= l->n_ends)
            break;
        if (c + 1 < l->n_ends && l->ends[c + 1].key < l->ends[c].key)
            c++;
        if (l->ends[c].key >= last.key)
            break;
        l->ends[i] = l->ends[c];
        i = c;
    }
    if (l->n_ends)
        l->ends[i] = last;
}

static int free_push(struct tc_lanes *l, size_t lane)
{
    if (grow((void **)&l->free_lanes, &l->cap_free, l->n_free + 1, sizeof *l->free_lanes))
        return -1;
    size_t i = l->n_free++;
    while (i && l->free_lanes[(i - 1) / 2] > lane) {
        l->free_lanes[i] = l->free_lanes[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    l->free_lanes[i] = lane;
    return 0;
}

static size_t free_pop(struct tc_lanes *l)
{
    size_t top = l->free_lanes[0], last = l->free_lanes[--l->n_free];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= l->n_free)
            break;
        if (c + 1 < l->n_free && l->free_lanes[c + 1] < l->free_lanes[c])
            c++;
        if (l->free_lanes[c] >= last)
            break;
        l->free_lanes[i] = l->free_lanes[c];
        i = c;
    }
    if (l->n_free)
        l->free_lanes[i] = last;
    return top;
}

/* ---- lanes ---- */

/* Ends lane k's spans that end at or before ts; *popped says whether any did. */
static int lane_pop(struct tc_lanes *l, size_t k, uint64_t ts, tc_lane_end_fn end_fn, void *arg, int *popped)
{
    *popped = 0;
    while (l->lane[k].depth && l->lane[k].stack[l->lane[k].depth - 1].end <= ts) {
        if (end_fn(arg, l->lane[k].stack[--l->lane[k].depth].item))
            return -1;
        *popped = 1;
    }
    return 0;
}

/* Ends every span that ends at or before ts, in any lane. Every open lane's innermost span has an
 * entry with its end in the heap (stale entries, for spans already ended or covered, are skipped),
 * so after this no open span ends at or before ts. */
static int expire(struct tc_lanes *l, uint64_t ts, tc_lane_end_fn end_fn, void *arg)
{
    while (l->n_ends && l->ends[0].key <= ts) {
        size_t k = l->ends[0].lane;
        ends_pop(l);
        int popped;
        if (lane_pop(l, k, ts, end_fn, arg, &popped))
            return -1;
        if (!popped)
            continue;
        if (l->lane[k].depth) {
            if (ends_push(l, l->lane[k].stack[l->lane[k].depth - 1].end, k))
                return -1;
        } else if (k >= TC_LANES_FIRST_FIT && free_push(l, k)) {
            return -1;
        }
    }
    return 0;
}

int tc_lanes_place(struct tc_lanes *l, uint64_t begin, uint64_t end, size_t item, tc_lane_end_fn end_fn, void *arg,
                   size_t *lane, int *is_new)
{
    if (expire(l, begin, end_fn, arg))
        return -1;
    size_t k, tried = l->n_lanes < TC_LANES_FIRST_FIT ? l->n_lanes : TC_LANES_FIRST_FIT;
    for (k = 0; k < tried; k++)
        if (!l->lane[k].depth || l->lane[k].stack[l->lane[k].depth - 1].end >= end)
            break;
    *is_new = 0;
    if (k == tried) {
        if (l->n_free) {
            k = free_pop(l);
        } else {
            if (grow((void **)&l->lane, &l->cap_lanes, l->n_lanes + 1, sizeof *l->lane))
                return -1;
            k = l->n_lanes++;
            memset(&l->lane[k], 0, sizeof l->lane[k]);
            *is_new = 1;
        }
    }
    if (grow((void **)&l->lane[k].stack, &l->lane[k].cap, l->lane[k].depth + 1, sizeof *l->lane[k].stack))
        return -1;
    l->lane[k].stack[l->lane[k].depth++] = (struct tc_lane_slot){end, item};
    *lane = k;
    return ends_push(l, end, k);
}

int tc_lanes_finish(struct tc_lanes *l, tc_lane_end_fn end_fn, void *arg)
{
    for (size_t k = 0; k < l->n_lanes; k++) {
        int popped;
        if (lane_pop(l, k, UINT64_MAX, end_fn, arg, &popped))
            return -1;
    }
    l->n_ends = l->n_free = 0;
    return 0;
}

void tc_lanes_free(struct tc_lanes *l)
{
    for (size_t k = 0; k < l->n_lanes; k++)
        free(l->lane[k].stack);
    free(l->lane);
    free(l->ends);
    free(l->free_lanes);
    memset(l, 0, sizeof *l);
}
