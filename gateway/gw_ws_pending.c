/* gw_ws_pending.c: caps and absolute deadlines of the WebSocket port's HTTP connections (see gw_ws_pending.h). */
#include "gw_ws_pending.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gw_limits.h"

#define BUCKETS 1024 /* key lookup; chains stay short for any sane cap */

struct entry {
    const void *key;
    struct entry *hnext;       /* bucket chain */
    struct entry *prev, *next; /* deadline order */
    uint64_t deadline_us;
    enum tg_ws_pending_phase phase;
    int loopback;
    char source[64];
};

struct tg_ws_pending {
    struct tg_ws_pending_limits lim;
    struct entry *bucket[BUCKETS];
    struct entry *head, *tail;
    size_t n;
    struct tg_gw_sources *sources;
};

static size_t slot(const void *key)
{
    uintptr_t k = (uintptr_t)key;
    k ^= k >> 17;
    k *= 0x9E3779B97F4A7C15ull;
    return (size_t)(k >> 40) % BUCKETS;
}

struct tg_ws_pending *tg_ws_pending_new(const struct tg_ws_pending_limits *l)
{
    struct tg_ws_pending *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->lim = *l;
    if (!p->lim.timeout_us)
        p->lim.timeout_us = 10000000;
    p->sources = tg_gw_sources_new();
    if (!p->sources) {
        free(p);
        return NULL;
    }
    return p;
}

void tg_ws_pending_free(struct tg_ws_pending *p)
{
    if (!p)
        return;
    struct entry *e = p->head;
    while (e) {
        struct entry *n = e->next;
        free(e);
        e = n;
    }
    tg_gw_sources_free(p->sources);
    free(p);
}

static void list_unlink(struct tg_ws_pending *p, struct entry *e)
{
    if (e->prev)
        e->prev->next = e->next;
    else
        p->head = e->next;
    if (e->next)
        e->next->prev = e->prev;
    else
        p->tail = e->prev;
    e->prev = e->next = NULL;
}

static void list_append(struct tg_ws_pending *p, struct entry *e)
{
    e->prev = p->tail;
    e->next = NULL;
    if (p->tail)
        p->tail->next = e;
    else
        p->head = e;
    p->tail = e;
}

static struct entry **find(struct tg_ws_pending *p, const void *key)
{
    struct entry **pp = &p->bucket[slot(key)];
    while (*pp && (*pp)->key != key)
        pp = &(*pp)->hnext;
    return pp;
}

enum tg_ws_admit tg_ws_pending_check(struct tg_ws_pending *p, const char *source, int loopback)
{
    if (p->lim.max_total && p->n >= p->lim.max_total)
        return TG_WS_ADMIT_TOTAL;
    if (!loopback && p->lim.max_per_source && tg_gw_sources_count(p->sources, source) >= p->lim.max_per_source)
        return TG_WS_ADMIT_SOURCE;
    return TG_WS_ADMIT_OK;
}

int tg_ws_pending_add(struct tg_ws_pending *p, const void *key, const char *source, int loopback, uint64_t now_us)
{
    enum tg_ws_admit v = tg_ws_pending_check(p, source, loopback);
    if (v != TG_WS_ADMIT_OK)
        return (int)v;
    struct entry **pp = find(p, key);
    if (*pp) /* the same wsi twice: keep the first admission and its deadline */
        return TG_WS_ADMIT_OK;
    struct entry *e = calloc(1, sizeof *e);
    if (!e)
        return -1;
    if (!loopback && !tg_gw_sources_acquire(p->sources, source, 0)) {
        free(e);
        return -1;
    }
    e->key = key;
    e->loopback = loopback;
    snprintf(e->source, sizeof e->source, "%s", source);
    e->phase = TG_WS_PENDING_REQUEST;
    e->deadline_us = now_us + p->lim.timeout_us;
    *pp = e;
    list_append(p, e);
    p->n++;
    return TG_WS_ADMIT_OK;
}

int tg_ws_pending_rearm(struct tg_ws_pending *p, const void *key, enum tg_ws_pending_phase phase, uint64_t now_us)
{
    struct entry *e = *find(p, key);
    if (!e)
        return -1;
    e->phase = phase;
    e->deadline_us = now_us + p->lim.timeout_us;
    if (e != p->tail) {
        list_unlink(p, e);
        list_append(p, e);
    }
    return 0;
}

static void drop(struct tg_ws_pending *p, struct entry **pp)
{
    struct entry *e = *pp;
    *pp = e->hnext;
    list_unlink(p, e);
    if (!e->loopback)
        tg_gw_sources_release(p->sources, e->source);
    p->n--;
    free(e);
}

int tg_ws_pending_remove(struct tg_ws_pending *p, const void *key)
{
    struct entry **pp = find(p, key);
    if (!*pp)
        return 0;
    drop(p, pp);
    return 1;
}

size_t tg_ws_pending_count(const struct tg_ws_pending *p) { return p->n; }

uint32_t tg_ws_pending_source_count(const struct tg_ws_pending *p, const char *source)
{
    return tg_gw_sources_count(p->sources, source);
}

uint64_t tg_ws_pending_next_deadline(const struct tg_ws_pending *p) { return p->head ? p->head->deadline_us : 0; }

const void *tg_ws_pending_pop_expired(struct tg_ws_pending *p, uint64_t now_us, enum tg_ws_pending_phase *phase,
                                      char *source, size_t srclen)
{
    struct entry *e = p->head;
    if (!e || e->deadline_us > now_us)
        return NULL;
    const void *key = e->key;
    if (phase)
        *phase = e->phase;
    if (source && srclen)
        snprintf(source, srclen, "%s", e->source);
    drop(p, find(p, key));
    return key;
}
