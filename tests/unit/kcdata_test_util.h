/* kcdata_test_util.h: helpers for the KCDATA unit tests: hex strings to bytes, a hand-written
 * item writer independent of the encoder (for malformed and foreign buffers), and printer
 * output captured into a string. Header-only; every helper is static inline. */
#ifndef TG_KCDATA_TEST_UTIL_H
#define TG_KCDATA_TEST_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tracegate/kcdata.h"

/* Hex digits (whitespace ignored) into a malloc'd buffer; aborts on a malformed string. */
static inline uint8_t *kt_hex(const char *hex, size_t *len)
{
    uint8_t *out = malloc(strlen(hex) / 2 + 1);
    size_t n = 0;
    int hi = -1;
    for (const char *p = hex; *p; p++) {
        int v;
        if (*p >= '0' && *p <= '9')
            v = *p - '0';
        else if (*p >= 'a' && *p <= 'f')
            v = *p - 'a' + 10;
        else if (*p >= 'A' && *p <= 'F')
            v = *p - 'A' + 10;
        else if (*p == ' ' || *p == '\n' || *p == '\t')
            continue;
        else
            abort();
        if (hi < 0) {
            hi = v;
        } else {
            out[n++] = (uint8_t)(hi << 4 | v);
            hi = -1;
        }
    }
    if (hi >= 0)
        abort();
    *len = n;
    return out;
}

/* A raw buffer written field by field, little-endian, without the library. */
struct kt_raw {
    uint8_t b[16384];
    size_t n;
};

static inline void kt_u8(struct kt_raw *r, uint8_t v) { r->b[r->n++] = v; }
static inline void kt_u16(struct kt_raw *r, uint16_t v)
{
    kt_u8(r, (uint8_t)v);
    kt_u8(r, (uint8_t)(v >> 8));
}
static inline void kt_u32(struct kt_raw *r, uint32_t v)
{
    kt_u16(r, (uint16_t)v);
    kt_u16(r, (uint16_t)(v >> 16));
}
static inline void kt_u64(struct kt_raw *r, uint64_t v)
{
    kt_u32(r, (uint32_t)v);
    kt_u32(r, (uint32_t)(v >> 32));
}
static inline void kt_bytes(struct kt_raw *r, const void *p, size_t n)
{
    memcpy(r->b + r->n, p, n);
    r->n += n;
}
static inline void kt_zeros(struct kt_raw *r, size_t n)
{
    memset(r->b + r->n, 0, n);
    r->n += n;
}
/* A 32-byte NUL-padded name slot. */
static inline void kt_name(struct kt_raw *r, const char *name)
{
    size_t n = strlen(name);
    kt_bytes(r, name, n);
    kt_zeros(r, 32 - n);
}
static inline void kt_hdr(struct kt_raw *r, uint32_t type, uint32_t size, uint64_t flags)
{
    kt_u32(r, type);
    kt_u32(r, size);
    kt_u64(r, flags);
}
static inline void kt_begin(struct kt_raw *r, uint32_t magic)
{
    r->n = 0;
    kt_hdr(r, magic, 0, 0);
}
static inline void kt_end(struct kt_raw *r) { kt_hdr(r, TG_KCDATA_BUFFER_END, 0, 0); }
/* A uint64 "with description" item as tracegate writes it (48 bytes of data, 8 padding). */
static inline void kt_desc_u64(struct kt_raw *r, const char *name, uint64_t v)
{
    kt_hdr(r, TG_KCDATA_TYPE_UINT64_DESC, 48, 0x88);
    kt_name(r, name);
    kt_u64(r, v);
    kt_zeros(r, 8);
}

/* Runs the text printer into a malloc'd string; *rc gets its return value. */
static inline char *kt_print(const uint8_t *buf, size_t len, unsigned flags, int *rc, char *err, size_t errlen)
{
    char *text = NULL;
    size_t tl = 0;
    FILE *f = open_memstream(&text, &tl);
    if (!f)
        abort();
    *rc = tg_kcdata_print(f, buf, len, flags, err, errlen);
    fclose(f);
    return text;
}

static inline char *kt_print_json(const uint8_t *buf, size_t len, int *rc, char *err, size_t errlen)
{
    char *text = NULL;
    size_t tl = 0;
    FILE *f = open_memstream(&text, &tl);
    if (!f)
        abort();
    *rc = tg_kcdata_print_json(f, buf, len, err, errlen);
    fclose(f);
    return text;
}

#endif
