/* u32_index.c: 32-bit ids to array positions (see u32_index.h). */
#include "u32_index.h"

#include <stdlib.h>

/* Fibonacci hashing: sequence and machine ids are small and consecutive; spread them */
static size_t slot_of(uint32_t key, size_t cap) { return (size_t)((key * 0x9E3779B97F4A7C15ull) >> 32) & (cap - 1); }

int tc_u32_index_get(const struct tc_u32_index *x, uint32_t key, size_t *pos)
{
    if (!x->cap)
        return 0;
    for (size_t i = slot_of(key, x->cap);; i = (i + 1) & (x->cap - 1)) {
        if (!x->vals[i])
            return 0;
        if (x->keys[i] == key) {
            *pos = x->vals[i] - 1;
            return 1;
        }
    }
}

static void place(uint32_t *keys, size_t *vals, size_t cap, uint32_t key, size_t val)
{
    size_t i = slot_of(key, cap);
    while (vals[i] && keys[i] != key)
        i = (i + 1) & (cap - 1);
    keys[i] = key;
    vals[i] = val;
}

int tc_u32_index_put(struct tc_u32_index *x, uint32_t key, size_t pos)
{
    if ((x->n + 1) * 2 > x->cap) { /* at most half full: probes stay short */
        size_t cap = x->cap ? x->cap * 2 : 64;
        uint32_t *keys = malloc(cap * sizeof *keys);
        size_t *vals = calloc(cap, sizeof *vals);
        if (!keys || !vals) {
            free(keys);
            free(vals);
            return -1;
        }
        for (size_t i = 0; i < x->cap; i++)
            if (x->vals[i])
                place(keys, vals, cap, x->keys[i], x->vals[i]);
        free(x->keys);
        free(x->vals);
        x->keys = keys;
        x->vals = vals;
        x->cap = cap;
    }
    size_t old;
    if (!tc_u32_index_get(x, key, &old))
        x->n++;
    place(x->keys, x->vals, x->cap, key, pos + 1);
    return 0;
}

void tc_u32_index_free(struct tc_u32_index *x)
{
    free(x->keys);
    free(x->vals);
    x->keys = NULL;
    x->vals = NULL;
    x->cap = x->n = 0;
}
