/* kcdata_stats.h: a "stats snapshot" in KCDATA: a container of type TG_KCCONTAINER_STATS
 * holding one described uint64 item per counter (name -> value), so any KCDATA printer shows
 * the counters by name. Generic: the caller supplies name/value pairs (names of 1..31 bytes).
 * Reentrant, any thread; no pointers are kept. */
#ifndef TRACEGATE_KCDATA_STATS_H
#define TRACEGATE_KCDATA_STATS_H

#include <stddef.h>
#include <stdint.h>

#include "tracegate/kcdata.h"

#define TG_KCCONTAINER_STATS 0x7410u

struct tg_kcdata_stat {
    const char *name;
    uint64_t value;
};

/* Writes a stats container with the given id holding n counters into an encoder. Returns 0 or -1
 * (encoder error set, e.g. for a name longer than 31 bytes). */
int tg_kcdata_stats_add(struct tg_kcdata_enc *e, uint64_t id, const struct tg_kcdata_stat *stats, size_t n);
/* A complete buffer (TG_KCDATA_MAGIC) with one stats container (id 1). *out is malloc'd (caller
 * frees). Returns 0 or -1. */
int tg_kcdata_stats_encode(const struct tg_kcdata_stat *stats, size_t n, uint8_t **out, size_t *len, char *err,
                           size_t errlen);

/* Called once per counter: the id of its stats container, its name (valid during the call) and value. */
typedef void (*tg_kcdata_stat_fn)(void *ctx, uint64_t container_id, const char *name, uint64_t value);
/* Walks a buffer with TG_KCDATA_MAGIC (which must be well formed as a whole) and calls fn for
 * every uint32/uint64 described item directly inside a stats container; everything else is
 * skipped. Returns the number of counters delivered, or -1 with err filled. The buffer is
 * validated completely before fn is called for the first time. */
int tg_kcdata_stats_decode(const uint8_t *buf, size_t len, tg_kcdata_stat_fn fn, void *ctx, char *err,
                           size_t errlen);

#endif
