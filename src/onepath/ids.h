/* ids.h: random trace and span ids for OnePath from a per-thread PRNG (xoshiro256**) seeded
 * from getrandom(2); a forked child reseeds. Any thread; no locks, no system call after the
 * first use on a thread. */
#ifndef TG_ONEPATH_IDS_H
#define TG_ONEPATH_IDS_H

#include <stdint.h>

/* 64 random bits. */
uint64_t tg_op_rand64(void);
/* A non-zero random trace id (16 bytes) / span id (8 bytes). */
void tg_op_new_trace_id(uint8_t id[16]);
void tg_op_new_span_id(uint8_t id[8]);

#endif
