/* idmap.h: a tiny open-addressing hash map from uint32 keys to uint32 values,
 * used for per-session sequence ids ((producer_id << 16) | writer_id -> id).
 *
 * Ownership: the map owns its table; tg_idmap_clear frees it. Value 0 means
 * "absent", so 0 must not be stored. Threading: none (single owner). */
#ifndef TRACEGATE_SERVICE_IDMAP_H
#define TRACEGATE_SERVICE_IDMAP_H

#include <stddef.h>
#include <stdint.h>

struct tg_idmap_slot {
    uint32_t key;
    uint32_t val; /* 0 = empty slot */
};

struct tg_idmap {
    struct tg_idmap_slot *slots;
    size_t cap; /* power of two, or 0 */
    size_t n;
};

/* Returns the value for key, or 0. */
uint32_t tg_idmap_get(const struct tg_idmap *m, uint32_t key);
/* Inserts or replaces; val must be non-zero. Returns 0, or -1 when out of memory. */
int tg_idmap_put(struct tg_idmap *m, uint32_t key, uint32_t val);
void tg_idmap_clear(struct tg_idmap *m);

#endif
