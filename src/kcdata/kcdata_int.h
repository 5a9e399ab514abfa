/* kcdata_int.h: helpers shared inside src/kcdata: little-endian loads/stores, padding arithmetic
 * and the field-descriptor check used by both the encoder and the iterator. Internal. */
#ifndef TG_KCDATA_INT_H
#define TG_KCDATA_INT_H

#include <stddef.h>
#include <stdint.h>

#include "tracegate/kcdata.h"

static inline uint16_t tg_kc_ld16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }

static inline uint32_t tg_kc_ld32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static inline uint64_t tg_kc_ld64(const uint8_t *p) { return (uint64_t)tg_kc_ld32(p) | (uint64_t)tg_kc_ld32(p + 4) << 32; }

static inline void tg_kc_st16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

static inline void tg_kc_st32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static inline void tg_kc_st64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static inline uint32_t tg_kc_bswap32(uint32_t v)
{
    return (v >> 24) | ((v >> 8) & 0xff00u) | ((v << 8) & 0xff0000u) | (v << 24);
}

/* Zero bytes that round n up to a multiple of 16. */
static inline size_t tg_kc_pad(size_t n) { return (TG_KCDATA_ALIGN - n % TG_KCDATA_ALIGN) % TG_KCDATA_ALIGN; }

/* Length of the NUL-terminated name in a 32-byte name slot, or -1 if the slot has no NUL. */
static inline int tg_kc_name_len(const uint8_t *slot)
{
    for (int i = 0; i < (int)TG_KCDATA_NAME_LEN; i++)
        if (slot[i] == 0)
            return i;
    return -1;
}

/* Checks one field as a reader needs it: known element type, count >= 1 and at most 0xffff for
 * arrays (exactly 1 otherwise), a 1..31 character name (name_len). Fills *size (bytes the field
 * spans). Returns NULL when fine, else a static description of the problem. */
const char *tg_kc_field_problem(unsigned flags, unsigned elem_type, uint32_t count, int name_len, uint32_t *size);

/* Fields of a packed struct never share bytes. Given the byte ranges [start, end) of n <=
 * TG_KCDATA_MAX_FIELDS fields, returns 1 and two overlapping fields' indexes, else 0. */
int tg_kc_fields_overlap(const uint32_t *start, const uint32_t *end, uint32_t n, uint32_t *a, uint32_t *b);

/* Decodes raw field descriptor i of td (already validated). */
void tg_kc_field_decode(const uint8_t *raw, struct tg_kcdata_field *f);

/* Records the encoder's first error (as its own checks do) and returns -1. */
int tg_kc_enc_fail(struct tg_kcdata_enc *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
