/* encode.c: the KCDATA encoder: a growable or caller-provided buffer, plain, described and
 * array items, containers, type definitions and BUFFER_END. Every item is padded to 16 bytes. */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "kcdata/kcdata_int.h"

int tg_kc_enc_fail(struct tg_kcdata_enc *e, const char *fmt, ...)
{
    if (!e->failed) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(e->err, sizeof e->err, fmt, ap);
        va_end(ap);
        e->failed = 1;
    }
    return -1;
}

#define fail tg_kc_enc_fail

static int start(struct tg_kcdata_enc *e, uint32_t magic)
{
    if (!tg_kcdata_magic_usable(magic))
        return fail(e, "begin magic 0x%08X is not usable (reserved type id, BUFFER_END, or byte-swap of itself "
                       "or of a known magic)", magic);
    /* room for the begin header and the final BUFFER_END */
    if (e->cap - e->len < 2 * TG_KCDATA_HEADER_SIZE)
        return fail(e, "buffer of %zu bytes cannot hold even an empty KCDATA buffer (32 bytes)", e->cap);
    memset(e->buf, 0, TG_KCDATA_HEADER_SIZE);
    tg_kc_st32(e->buf, magic);
    e->len = TG_KCDATA_HEADER_SIZE;
    return 0;
}

int tg_kcdata_enc_init(struct tg_kcdata_enc *e, uint32_t magic)
{
    memset(e, 0, sizeof *e);
    e->owned = 1;
    e->cap = 256;
    e->buf = calloc(1, e->cap);
    if (!e->buf) {
        e->cap = 0;
        return fail(e, "out of memory");
    }
    if (start(e, magic) != 0) {
        free(e->buf);
        e->buf = NULL;
        e->cap = 0;
        return -1;
    }
    return 0;
}

int tg_kcdata_enc_init_buf(struct tg_kcdata_enc *e, uint32_t magic, uint8_t *buf, size_t cap)
{
    memset(e, 0, sizeof *e);
    if (!buf)
        return fail(e, "NULL buffer");
    e->buf = buf;
    e->cap = cap;
    if (start(e, magic) != 0) {
        e->buf = NULL;
        return -1;
    }
    return 0;
}

/* Makes room for an item of payload len (padded) plus the final BUFFER_END; returns the
 * item's offset, or -1. */
static long long reserve(struct tg_kcdata_enc *e, uint32_t type, size_t len)
{
    if (e->failed)
        return -1;
    if (!e->buf)
        return fail(e, "encoder not initialised or already finished");
    if (len > UINT32_MAX - TG_KCDATA_ALIGN)
        return fail(e, "item of type 0x%X: %zu bytes do not fit a KCDATA item (32-bit size)", type, len);
    size_t need = TG_KCDATA_HEADER_SIZE + len + tg_kc_pad(len) + TG_KCDATA_HEADER_SIZE;
    if (need > e->cap - e->len) {
        if (!e->owned)
            return fail(e, "buffer full: item of type 0x%X needs %zu bytes (with BUFFER_END), %zu of %zu left",
                        type, need, e->cap - e->len, e->cap);
        size_t ncap = e->cap;
        while (need > ncap - e->len) {
            if (ncap > SIZE_MAX / 2)
                return fail(e, "out of memory");
            ncap *= 2;
        }
        uint8_t *nb = realloc(e->buf, ncap);
        if (!nb)
            return fail(e, "out of memory (%zu bytes)", ncap);
        e->buf = nb;
        e->cap = ncap;
    }
    return (long long)e->len;
}

/* Writes a header and the payload pieces a[0..an) + b[0..bn), zero-padded. */
static int put(struct tg_kcdata_enc *e, uint32_t type, uint64_t flags, const void *a, size_t an, const void *b,
               size_t bn)
{
    if (an > SIZE_MAX - bn)
        return fail(e, "item too large");
    long long at = reserve(e, type, an + bn);
    if (at < 0)
        return -1;
    size_t len = an + bn, padded = len + tg_kc_pad(len);
    uint8_t *p = e->buf + at;
    tg_kc_st32(p, type);
    tg_kc_st32(p + 4, (uint32_t)padded);
    tg_kc_st64(p + 8, flags);
    if (an)
        memcpy(p + TG_KCDATA_HEADER_SIZE, a, an);
    if (bn)
        memcpy(p + TG_KCDATA_HEADER_SIZE + an, b, bn);
    memset(p + TG_KCDATA_HEADER_SIZE + len, 0, padded - len);
    e->len += TG_KCDATA_HEADER_SIZE + padded;
    return 0;
}

static uint64_t pad_flags(size_t len) { return TG_KCDATA_FLAG_HAS_PADDING | tg_kc_pad(len); }

static int structural(uint32_t type)
{
    return type <= TG_KCDATA_TYPE_ARRAY_PAD0 + 0xf || type == TG_KCDATA_BUFFER_END;
}

int tg_kcdata_add(struct tg_kcdata_enc *e, uint32_t type, const void *data, size_t len)
{
    if (structural(type))
        return fail(e, "type 0x%X is structural (0x0..0x2f or BUFFER_END): use the dedicated function", type);
    if (len && !data)
        return fail(e, "type 0x%X: NULL data", type);
    return put(e, type, pad_flags(len), data, len, NULL, 0);
}

/* Fills a 32-byte name slot; fails for NULL or names longer than 31 bytes. */
static int name_slot(struct tg_kcdata_enc *e, uint8_t slot[TG_KCDATA_NAME_LEN], const char *name, const char *what)
{
    if (!name)
        return fail(e, "%s: NULL name", what);
    size_t n = strlen(name);
    if (n >= TG_KCDATA_NAME_LEN)
        return fail(e, "%s name '%.40s%s' is %zu bytes, longer than %u", what, name, n > 40 ? "..." : "", n,
                    TG_KCDATA_NAME_LEN - 1);
    memset(slot, 0, TG_KCDATA_NAME_LEN);
    memcpy(slot, name, n);
    return 0;
}

static int add_desc(struct tg_kcdata_enc *e, uint32_t type, const char *name, const void *v, size_t vn)
{
    uint8_t slot[TG_KCDATA_NAME_LEN];
    if (e->failed || name_slot(e, slot, name, "described item") != 0)
        return -1;
    return put(e, type, pad_flags(TG_KCDATA_NAME_LEN + vn), slot, sizeof slot, v, vn);
}

int tg_kcdata_add_string(struct tg_kcdata_enc *e, const char *name, const char *value)
{
    if (!value)
        return fail(e, "string '%s': NULL value", name ? name : "");
    return add_desc(e, TG_KCDATA_TYPE_STRING_DESC, name, value, strlen(value) + 1);
}

int tg_kcdata_add_u32(struct tg_kcdata_enc *e, const char *name, uint32_t value)
{
    uint8_t v[4];
    tg_kc_st32(v, value);
    return add_desc(e, TG_KCDATA_TYPE_UINT32_DESC, name, v, sizeof v);
}

int tg_kcdata_add_u64(struct tg_kcdata_enc *e, const char *name, uint64_t value)
{
    uint8_t v[8];
    tg_kc_st64(v, value);
    return add_desc(e, TG_KCDATA_TYPE_UINT64_DESC, name, v, sizeof v);
}

int tg_kcdata_add_i32(struct tg_kcdata_enc *e, const char *name, int32_t value)
{
    uint8_t v[4];
    tg_kc_st32(v, (uint32_t)value);
    return add_desc(e, TG_KCDATA_TYPE_INT32_DESC, name, v, sizeof v);
}

int tg_kcdata_add_i64(struct tg_kcdata_enc *e, const char *name, int64_t value)
{
    uint8_t v[8];
    tg_kc_st64(v, (uint64_t)value);
    return add_desc(e, TG_KCDATA_TYPE_INT64_DESC, name, v, sizeof v);
}

int tg_kcdata_add_binary(struct tg_kcdata_enc *e, const char *name, const void *data, size_t len)
{
    if (len && !data)
        return fail(e, "binary '%s': NULL data", name ? name : "");
    return add_desc(e, TG_KCDATA_TYPE_BINDATA_DESC, name, data, len);
}

int tg_kcdata_add_array(struct tg_kcdata_enc *e, uint32_t elem_type, uint32_t elem_size, uint32_t count,
                        const void *elems)
{
    if (e->failed)
        return -1;
    if (count > 0 && elem_size == 0)
        return fail(e, "array of %u elements of type 0x%X with 0-byte elements", count, elem_type);
    if (elem_size && count > SIZE_MAX / elem_size)
        return fail(e, "array too large");
    size_t len = (size_t)elem_size * count;
    if (len && !elems)
        return fail(e, "array of type 0x%X: NULL elements", elem_type);
    uint32_t type = TG_KCDATA_TYPE_ARRAY_PAD0 + (uint32_t)tg_kc_pad(len);
    return put(e, type, (uint64_t)elem_type << 32 | count, elems, len, NULL, 0);
}

int tg_kcdata_add_typedef(struct tg_kcdata_enc *e, uint32_t type_id, const char *name,
                          const struct tg_kcdata_field *fields, uint32_t nfields)
{
    if (e->failed)
        return -1;
    if (type_id <= TG_KCDATA_TYPE_RESERVED_MAX || type_id == TG_KCDATA_BUFFER_END)
        return fail(e, "type definition: type id 0x%X is reserved", type_id);
    if (nfields == 0 || !fields)
        return fail(e, "type definition 0x%X: no fields", type_id);
    if (nfields > TG_KCDATA_MAX_FIELDS)
        return fail(e, "type definition 0x%X: %u fields, more than %u", type_id, nfields, TG_KCDATA_MAX_FIELDS);
    size_t len = TG_KCDATA_TYPEDEF_HEADER_SIZE + (size_t)nfields * TG_KCDATA_FIELD_SIZE;
    uint8_t *tmp = calloc(1, len);
    if (!tmp)
        return fail(e, "out of memory");
    tg_kc_st32(tmp, type_id);
    tg_kc_st32(tmp + 4, nfields);
    int rc = name_slot(e, tmp + 8, name, "type definition");
    uint32_t starts[TG_KCDATA_MAX_FIELDS], ends[TG_KCDATA_MAX_FIELDS], fa, fb;
    for (uint32_t i = 0; rc == 0 && i < nfields; i++) {
        const struct tg_kcdata_field *f = &fields[i];
        uint8_t *d = tmp + TG_KCDATA_TYPEDEF_HEADER_SIZE + (size_t)i * TG_KCDATA_FIELD_SIZE;
        int is_array = (f->flags & TG_KCDATA_FIELD_ARRAY) != 0;
        uint32_t count = is_array || f->count ? f->count : 1, size;
        size_t nl = f->name ? strlen(f->name) : 0;
        const char *why = tg_kc_field_problem(f->flags, f->elem_type, count,
                                              nl >= TG_KCDATA_NAME_LEN ? -1 : (int)nl, &size);
        if (why) {
            rc = fail(e, "type definition 0x%X field %u ('%.31s'): %s", type_id, i, f->name ? f->name : "", why);
            break;
        }
        starts[i] = f->offset;
        ends[i] = f->offset + size;
        d[0] = f->flags;
        d[1] = f->elem_type;
        tg_kc_st16(d + 2, f->offset);
        tg_kc_st32(d + 4, is_array ? count << 16 | tg_kcdata_elem_size(f->elem_type) : size);
        memcpy(d + 8, f->name, nl);
    }
    if (rc == 0 && tg_kc_fields_overlap(starts, ends, nfields, &fa, &fb))
        rc = fail(e, "type definition 0x%X: fields %u ('%s') and %u ('%s') overlap", type_id, fa, fields[fa].name, fb,
                  fields[fb].name);
    /* one layout per type id, as readers require */
    int known = 0;
    for (unsigned i = 0; rc == 0 && i < e->ntypedefs; i++) {
        if (e->td_ids[i] != type_id)
            continue;
        const uint8_t *old = e->buf + e->td_offs[i];
        if (tg_kc_ld32(old + 4) != nfields || memcmp(old, tmp, len) != 0)
            rc = fail(e, "type definition 0x%X differs from the one already written for that id", type_id);
        known = 1;
    }
    if (rc == 0 && !known && e->ntypedefs >= TG_KCDATA_MAX_TYPEDEFS)
        rc = fail(e, "type definition 0x%X: more than %u type definitions", type_id, TG_KCDATA_MAX_TYPEDEFS);
    size_t at = e->len + TG_KCDATA_HEADER_SIZE;
    if (rc == 0)
        rc = put(e, TG_KCDATA_TYPE_TYPEDEF, pad_flags(len), tmp, len, NULL, 0);
    if (rc == 0 && !known) {
        e->td_ids[e->ntypedefs] = type_id;
        e->td_offs[e->ntypedefs++] = at;
    }
    free(tmp);
    return rc;
}

int tg_kcdata_container_begin(struct tg_kcdata_enc *e, uint32_t container_type, uint64_t id)
{
    if (e->failed)
        return -1;
    if (e->depth >= TG_KCDATA_MAX_DEPTH)
        return fail(e, "container 0x%X id %llu: nested deeper than %u", container_type, (unsigned long long)id,
                    TG_KCDATA_MAX_DEPTH);
    uint8_t v[4];
    tg_kc_st32(v, container_type);
    if (put(e, TG_KCDATA_TYPE_CONTAINER_BEGIN, id, v, sizeof v, NULL, 0) != 0)
        return -1;
    e->open_ids[e->depth++] = id;
    return 0;
}

int tg_kcdata_container_end(struct tg_kcdata_enc *e, uint64_t id)
{
    if (e->failed)
        return -1;
    if (e->depth == 0)
        return fail(e, "container end id %llu: no container is open", (unsigned long long)id);
    if (e->open_ids[e->depth - 1] != id)
        return fail(e, "container end id %llu does not match the open container id %llu", (unsigned long long)id,
                    (unsigned long long)e->open_ids[e->depth - 1]);
    if (put(e, TG_KCDATA_TYPE_CONTAINER_END, id, NULL, 0, NULL, 0) != 0)
        return -1;
    e->depth--;
    return 0;
}

int tg_kcdata_finish(struct tg_kcdata_enc *e, uint8_t **out, size_t *len)
{
    if (e->failed)
        return -1;
    if (!e->buf)
        return fail(e, "encoder not initialised or already finished");
    if (e->depth)
        return fail(e, "finish: container id %llu still open", (unsigned long long)e->open_ids[e->depth - 1]);
    /* every add kept room for these 16 bytes */
    uint8_t *p = e->buf + e->len;
    memset(p, 0, TG_KCDATA_HEADER_SIZE);
    tg_kc_st32(p, TG_KCDATA_BUFFER_END);
    *out = e->buf;
    *len = e->len + TG_KCDATA_HEADER_SIZE;
    e->buf = NULL;
    e->len = e->cap = 0;
    e->owned = 0;
    return 0;
}

void tg_kcdata_enc_free(struct tg_kcdata_enc *e)
{
    if (e->owned)
        free(e->buf);
    e->buf = NULL;
    e->len = e->cap = 0;
    e->owned = 0;
}

const char *tg_kcdata_enc_error(const struct tg_kcdata_enc *e) { return e->failed ? e->err : ""; }
