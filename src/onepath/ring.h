/* ring.h: a bounded lock-free multi-producer multi-consumer queue of pointers (sequence-numbered
 * cells). Push never blocks or spins on a full ring: it fails and the caller counts a drop.
 * Any thread. The exporters use one consumer (their flush thread). */
#ifndef TG_ONEPATH_RING_H
#define TG_ONEPATH_RING_H

#include <stddef.h>

struct tg_op_ring;

/* capacity >= 1. NULL on OOM. */
struct tg_op_ring *tg_op_ring_new(size_t capacity);
/* The ring must be empty or its items already released by the caller. */
void tg_op_ring_free(struct tg_op_ring *r);
size_t tg_op_ring_capacity(const struct tg_op_ring *r);
/* 1 on success (and *pos = the item's position, counting from 0), 0 when full. */
int tg_op_ring_push(struct tg_op_ring *r, void *item, size_t *pos);
/* The oldest item, or NULL when empty. */
void *tg_op_ring_pop(struct tg_op_ring *r);

#endif
