/* idmap.c: open-addressing uint32 -> uint32 hash map (see service/idmap.h). */
#include "service/idmap.h"

#include <stdlib.h>

static size_t slot_of(uint32_t key, size_t mask)
{
    uint64_t x = key * 0x9e3779b97f4a7c15ull;
    return (size_t)(x >> 32) & mask;
}

uint32_t tg_idmap_get(const struct tg_idmap *m, uint32_t key)
{
    if (!m->cap)
        return 0;
    size_t mask = m->cap - 1;
    for (size_t i = slot_of(key, mask);; i = (i + 1) & mask) {
        if (!m->slots[i].val)
            return 0;
        if (m->slots[i].key == key)
            return m->slots[i].val;
    }
}

static int grow(struct tg_idmap *m)
{
    size_t ncap = m->cap ? m->cap * 2 : 16;
    struct tg_idmap_slot *ns = calloc(ncap, sizeof *ns);
    if (!ns)
        return -1;
    for (size_t i = 0; i < m->cap; i++) {
        if (!m->slots[i].val)
            continue;
        size_t j = slot_of(m->slots[i].key, ncap - 1);
        while (ns[j].val)
            j = (j + 1) & (ncap - 1);
        ns[j] = m->slots[i];
    }
    free(m->slots);
    m->slots = ns;
    m->cap = ncap;
    return 0;
}

int tg_idmap_put(struct tg_idmap *m, uint32_t key, uint32_t val)
{
    if (!val)
        return -1;
    if ((m->n + 1) * 4 > m->cap * 3 && grow(m) != 0)
        return -1;
    size_t mask = m->cap - 1;
    for (size_t i = slot_of(key, mask);; i = (i + 1) & mask) {
        if (!m->slots[i].val) {
            m->slots[i].key = key;
            m->slots[i].val = val;
            m->n++;
            return 0;
        }
        if (m->slots[i].key == key) {
            m->slots[i].val = val;
            return 0;
        }
    }
}

void tg_idmap_clear(struct tg_idmap *m)
{
    free(m->slots);
    m->slots = NULL;
    m->cap = m->n = 0;
}
