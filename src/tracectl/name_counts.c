/* name_counts.c: first-seen-ordered name counts behind a hash index (see name_counts.h). */
#include "name_counts.h"

#include <stdlib.h>
#include <string.h>

static uint64_t hash_of(const char *s)
{
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a */
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
    return h;
}

/* the slot holding key, or the empty one where it goes */
static size_t probe(const struct tc_name_counts *c, const char *key, uint64_t h)
{
    size_t i = (size_t)h & (c->n_slots - 1);
    while (c->slots[i]) {
        const struct tc_name_count *e = &c->v[c->slots[i] - 1];
        if (e->hash == h && strcmp(e->key, key) == 0)
            break;
        i = (i + 1) & (c->n_slots - 1);
    }
    return i;
}

static int grow_slots(struct tc_name_counts *c)
{
    size_t n = c->n_slots ? c->n_slots * 2 : 64;
    size_t *slots = calloc(n, sizeof *slots);
    if (!slots)
        return -1;
    free(c->slots);
    c->slots = slots;
    c->n_slots = n;
    for (size_t k = 0; k < c->n; k++)
        c->slots[probe(c, c->v[k].key, c->v[k].hash)] = k + 1;
    return 0;
}

void tc_name_counts_add(struct tc_name_counts *c, const char *key)
{
    uint64_t h = hash_of(key);
    if (c->n_slots) {
        size_t i = probe(c, key, h);
        if (c->slots[i]) {
            c->v[c->slots[i] - 1].n++;
            return;
        }
    }
    if (c->n >= TC_NAME_COUNTS_MAX || ((c->n + 1) * 2 > c->n_slots && grow_slots(c) != 0))
        goto other;
    if (c->n == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 16;
        struct tc_name_count *nv = realloc(c->v, cap * sizeof *nv);
        if (!nv)
            goto other;
        c->v = nv;
        c->cap = cap;
    }
    char *k = strdup(key);
    if (!k)
        goto other;
    c->v[c->n] = (struct tc_name_count){.key = k, .hash = h, .n = 1};
    c->slots[probe(c, key, h)] = ++c->n;
    return;
other:
    c->other++;
}

void tc_name_counts_free(struct tc_name_counts *c)
{
    for (size_t i = 0; i < c->n; i++)
        free(c->v[i].key);
    free(c->v);
    free(c->slots);
    memset(c, 0, sizeof *c);
}
