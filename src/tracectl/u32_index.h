/* u32_index.h: an index from 32-bit ids (packet sequence ids, machine ids) to positions in the
 * caller's array, so that a trace naming a million of them is read in linear time instead of one
 * scan of a list per packet. Open addressing with linear probing, grown at half full.
 *
 * Ownership: the caller owns the struct (zero-initialised is empty); tc_u32_index_free releases
 * what it allocated. Threading: none. */
#ifndef TRACEGATE_TRACECTL_U32_INDEX_H
#define TRACEGATE_TRACECTL_U32_INDEX_H

#include <stddef.h>
#include <stdint.h>

struct tc_u32_index {
    uint32_t *keys;
    size_t *vals; /* position + 1; 0 marks an empty slot */
    size_t cap, n;
};

/* 1 and *pos when key is indexed, 0 when not. */
int tc_u32_index_get(const struct tc_u32_index *x, uint32_t key, size_t *pos);
/* Indexes key at pos (replacing an earlier position); 0, or -1 when out of memory (unchanged). */
int tc_u32_index_put(struct tc_u32_index *x, uint32_t key, size_t pos);
void tc_u32_index_free(struct tc_u32_index *x);

#endif
