/* ring.c: bounded MPMC queue: every cell carries a sequence number telling producers and
 * consumers whose turn it is, so neither side takes a lock; positions are 64-bit and never wrap in
 * practice. */
#include "onepath/ring.h"

#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>

struct cell {
    atomic_size_t seq;
    void *item;
};

struct tg_op_ring {
    size_t cap;
    _Alignas(64) atomic_size_t head; /* next position to push */
    _Alignas(64) atomic_size_t tail; /* next position to pop */
    struct cell cells[];
};

struct tg_op_ring *tg_op_ring_new(size_t capacity)
{
    if (capacity == 0 || capacity > ((size_t)1 << 30))
        return NULL;
    struct tg_op_ring *r = aligned_alloc(64, (sizeof *r + capacity * sizeof(struct cell) + 63) / 64 * 64);
    if (!r)
        return NULL;
    r->cap = capacity;
    atomic_init(&r->head, 0);
    atomic_init(&r->tail, 0);
    for (size_t i = 0; i < capacity; i++) {
        atomic_init(&r->cells[i].seq, i);
        r->cells[i].item = NULL;
    }
    return r;
}

void tg_op_ring_free(struct tg_op_ring *r) { free(r); }

size_t tg_op_ring_capacity(const struct tg_op_ring *r) { return r->cap; }

int tg_op_ring_push(struct tg_op_ring *r, void *item, size_t *pos_out)
{
    size_t pos = atomic_load_explicit(&r->head, memory_order_relaxed);
    for (;;) {
        struct cell *c = &r->cells[pos % r->cap];
        size_t seq = atomic_load_explicit(&c->seq, memory_order_acquire);
        intptr_t diff = (intptr_t)seq - (intptr_t)pos;
        if (diff == 0) {
            if (atomic_compare_exchange_weak_explicit(&r->head, &pos, pos + 1, memory_order_relaxed,
                                                      memory_order_relaxed)) {
                c->item = item;
                atomic_store_explicit(&c->seq, pos + 1, memory_order_release);
                if (pos_out)
                    *pos_out = pos;
                return 1;
            }
            /* pos was reloaded by the failed CAS */
        } else if (diff < 0) {
            return 0; /* the cell still holds an item from one lap ago: full */
        } else {
            pos = atomic_load_explicit(&r->head, memory_order_relaxed);
        }
    }
}

void *tg_op_ring_pop(struct tg_op_ring *r)
{
    size_t pos = atomic_load_explicit(&r->tail, memory_order_relaxed);
    for (;;) {
        struct cell *c = &r->cells[pos % r->cap];
        size_t seq = atomic_load_explicit(&c->seq, memory_order_acquire);
        intptr_t diff = (intptr_t)seq - (intptr_t)(pos + 1);
        if (diff == 0) {
            if (atomic_compare_exchange_weak_explicit(&r->tail, &pos, pos + 1, memory_order_relaxed,
                                                      memory_order_relaxed)) {
                void *item = c->item;
                atomic_store_explicit(&c->seq, pos + r->cap, memory_order_release);
                return item;
            }
        } else if (diff < 0) {
            return NULL; /* empty (or the producer of this cell has not finished) */
        } else {
            pos = atomic_load_explicit(&r->tail, memory_order_relaxed);
        }
    }
}
