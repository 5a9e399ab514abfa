/* typedef.c: type definitions (KCDATA type 0x12): element types, the field rules shared by the
 * encoder and the iterator, and reading fields out of an item by its definition. */
#include <string.h>

#include "kcdata/kcdata_int.h"

static const struct {
    const char *name;
    unsigned size;
} k_elem[] = {
    {NULL, 0}, {"char", 1}, {"int8", 1}, {"uint8", 1}, {"int16", 2},
    {"uint16", 2}, {"int32", 4}, {"uint32", 4}, {"int64", 8}, {"uint64", 8},
};

unsigned tg_kcdata_elem_size(unsigned elem_type)
{
    return elem_type < sizeof k_elem / sizeof k_elem[0] ? k_elem[elem_type].size : 0;
}

const char *tg_kcdata_elem_type_name(unsigned elem_type)
{
    return elem_type < sizeof k_elem / sizeof k_elem[0] ? k_elem[elem_type].name : NULL;
}

static int elem_signed(unsigned elem_type)
{
    return elem_type == TG_KCDATA_ST_INT8 || elem_type == TG_KCDATA_ST_INT16 || elem_type == TG_KCDATA_ST_INT32 ||
           elem_type == TG_KCDATA_ST_INT64;
}

const char *tg_kc_field_problem(unsigned flags, unsigned elem_type, uint32_t count, int name_len, uint32_t *size)
{
    unsigned esz = tg_kcdata_elem_size(elem_type);
    if (esz == 0)
        return "unknown element type";
    if (name_len < 0)
        return "name not NUL-terminated within 32 bytes";
    if (name_len == 0)
        return "empty name";
    if (flags & TG_KCDATA_FIELD_ARRAY) {
        if (count == 0)
            return "array field with count 0";
        if (count > 0xffffu)
            return "array field with more than 65535 elements";
    } else if (count != 1) {
        return "scalar field with more than one element (arrays need the array flag)";
    }
    *size = count * esz;
    return NULL;
}

int tg_kc_fields_overlap(const uint32_t *start, const uint32_t *end, uint32_t n, uint32_t *a, uint32_t *b)
{
    uint16_t order[TG_KCDATA_MAX_FIELDS];
    for (uint32_t i = 0; i < n; i++) { /* insertion sort by start: n is small */
        uint32_t j = i;
        for (; j > 0 && start[order[j - 1]] > start[i]; j--)
            order[j] = order[j - 1];
        order[j] = (uint16_t)i;
    }
    uint32_t reach = 0, reacher = 0; /* furthest end so far, and whose */
    for (uint32_t k = 0; k < n; k++) {
        uint32_t i = order[k];
        if (k > 0 && start[i] < reach) {
            *a = reacher < i ? reacher : i;
            *b = reacher < i ? i : reacher;
            return 1;
        }
        if (end[i] > reach) {
            reach = end[i];
            reacher = i;
        }
    }
    return 0;
}

void tg_kc_field_decode(const uint8_t *raw, struct tg_kcdata_field *f)
{
    f->flags = raw[0];
    f->elem_type = raw[1];
    f->offset = tg_kc_ld16(raw + 2);
    uint32_t size = tg_kc_ld32(raw + 4);
    f->count = (f->flags & TG_KCDATA_FIELD_ARRAY) ? size >> 16 : 1;
    f->name = (const char *)raw + 8;
}

int tg_kcdata_typedef_field(const struct tg_kcdata_typedef *td, uint32_t i, struct tg_kcdata_field *f)
{
    if (!td || i >= td->nfields)
        return -1;
    tg_kc_field_decode(td->fields + (size_t)i * TG_KCDATA_FIELD_SIZE, f);
    return 0;
}

int tg_kcdata_typedef_find(const struct tg_kcdata_typedef *td, const char *name, struct tg_kcdata_field *f)
{
    for (uint32_t i = 0; td && i < td->nfields; i++) {
        tg_kcdata_typedef_field(td, i, f);
        if (strcmp(f->name, name) == 0)
            return 0;
    }
    return -1;
}

/* Element idx of f inside rec, or NULL when it does not lie wholly inside rec_len. */
static const uint8_t *elem_at(const struct tg_kcdata_field *f, const uint8_t *rec, size_t rec_len, uint32_t idx)
{
    unsigned esz = tg_kcdata_elem_size(f->elem_type);
    if (esz == 0 || idx >= f->count)
        return NULL;
    size_t off = (size_t)f->offset + (size_t)idx * esz;
    if (off > rec_len || rec_len - off < esz)
        return NULL;
    return rec + off;
}

int tg_kcdata_field_uint(const struct tg_kcdata_field *f, const uint8_t *rec, size_t rec_len, uint32_t idx,
                         uint64_t *out)
{
    const uint8_t *p = elem_at(f, rec, rec_len, idx);
    if (!p)
        return -1;
    switch (tg_kcdata_elem_size(f->elem_type)) {
    case 1: *out = p[0]; break;
    case 2: *out = tg_kc_ld16(p); break;
    case 4: *out = tg_kc_ld32(p); break;
    default: *out = tg_kc_ld64(p); break;
    }
    return 0;
}

int tg_kcdata_field_int(const struct tg_kcdata_field *f, const uint8_t *rec, size_t rec_len, uint32_t idx,
                        int64_t *out)
{
    uint64_t u;
    if (tg_kcdata_field_uint(f, rec, rec_len, idx, &u) != 0)
        return -1;
    if (!elem_signed(f->elem_type)) {
        *out = (int64_t)u;
        return 0;
    }
    switch (tg_kcdata_elem_size(f->elem_type)) {
    case 1: *out = (int8_t)u; break;
    case 2: *out = (int16_t)u; break;
    case 4: *out = (int32_t)u; break;
    default: *out = (int64_t)u; break;
    }
    return 0;
}

int tg_kcdata_field_string(const struct tg_kcdata_field *f, const uint8_t *rec, size_t rec_len, char *out,
                           size_t outlen)
{
    if (outlen)
        out[0] = 0;
    if (f->elem_type != TG_KCDATA_ST_CHAR || f->offset > rec_len || rec_len - f->offset < f->count)
        return -1;
    const uint8_t *s = rec + f->offset;
    size_t n = 0;
    while (n < f->count && s[n] != 0)
        n++;
    if (outlen == 0)
        return -1;
    size_t copy = n < outlen - 1 ? n : outlen - 1;
    memcpy(out, s, copy);
    out[copy] = 0;
    return copy == n ? (int)n : -1;
}
