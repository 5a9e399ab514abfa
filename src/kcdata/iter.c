/* iter.c: the validating KCDATA iterator. Every length is checked against the buffer before it
 * is used; structure (containers, padding, described items, arrays, type definitions) is
 * checked item by item so callers see only well-formed items or a precise error. */
#include <stdarg.h>
#include <string.h>

#include "kcdata/kcdata_int.h"
#include "tracegate/errbuf.h"

/* Fails the iterator for good with a message. */
__attribute__((format(printf, 4, 5))) static int bad(struct tg_kcdata_iter *it, char *err, size_t errlen,
                                                     const char *fmt, ...)
{
    it->state = -1;
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return -1;
}

/* A name from the buffer made safe for a message: bytes outside printable ASCII become '?'. */
static const char *safe(const char *name, char out[TG_KCDATA_NAME_LEN])
{
    size_t i = 0;
    for (; i < TG_KCDATA_NAME_LEN - 1 && name[i]; i++)
        out[i] = name[i] > 0x20 && name[i] < 0x7f ? name[i] : '?';
    out[i] = 0;
    return out;
}

int tg_kcdata_iter_init(struct tg_kcdata_iter *it, const uint8_t *buf, size_t len, uint32_t want_magic, char *err,
                        size_t errlen)
{
    memset(it, 0, sizeof *it);
    it->buf = buf;
    it->len = buf ? len : 0;
    if (it->len < TG_KCDATA_HEADER_SIZE)
        return bad(it, err, errlen, "%zu bytes: too short for a KCDATA begin item (16 bytes)", it->len);
    uint32_t magic = tg_kc_ld32(buf), size = tg_kc_ld32(buf + 4);
    uint32_t swapped = tg_kc_bswap32(magic);
    const char *name = tg_kcdata_magic_name(magic);
    if (!name && tg_kcdata_magic_name(swapped))
        return bad(it, err, errlen,
                   "begin magic 0x%08X is the byte-swapped %s magic 0x%08X: the buffer was written big-endian, and "
                   "only little-endian KCDATA is read",
                   magic, tg_kcdata_magic_name(swapped), swapped);
    if (want_magic == TG_KCDATA_KNOWN_MAGIC || want_magic == TG_KCDATA_ANY_MAGIC) {
        if (!name && (want_magic == TG_KCDATA_KNOWN_MAGIC || magic <= TG_KCDATA_TYPE_RESERVED_MAX ||
                      magic == TG_KCDATA_BUFFER_END))
            return bad(it, err, errlen, "not a KCDATA buffer: unknown begin magic 0x%08X", magic);
    } else if (magic != want_magic) {
        if (swapped == want_magic)
            return bad(it, err, errlen, "begin magic 0x%08X is the byte-swapped 0x%08X: the buffer was written "
                       "big-endian, and only little-endian KCDATA is read", magic, want_magic);
        return bad(it, err, errlen, "begin magic 0x%08X%s%s%s is not the expected 0x%08X", magic, name ? " (" : "",
                   name ? name : "", name ? ")" : "", want_magic);
    }
    if (magic == TG_KCDATA_MAGIC_COMPRESSED)
        return bad(it, err, errlen, "compressed KCDATA (magic 0x%08X) is not supported", magic);
    if (size % TG_KCDATA_ALIGN || size > it->len - TG_KCDATA_HEADER_SIZE)
        return bad(it, err, errlen, "begin item: size %u is not a multiple of 16 or runs past the end (%zu bytes)",
                   size, it->len);
    it->magic = magic;
    it->pos = TG_KCDATA_HEADER_SIZE + size;
    return 0;
}

const struct tg_kcdata_typedef *tg_kcdata_iter_typedef(const struct tg_kcdata_iter *it, uint32_t type_id)
{
    for (size_t i = 0; i < it->ntypedefs; i++)
        if (it->typedefs[i].type_id == type_id)
            return &it->typedefs[i];
    return NULL;
}

size_t tg_kcdata_iter_end_offset(const struct tg_kcdata_iter *it) { return it->state == 1 ? it->pos : 0; }

static const char *desc_kind(uint32_t type)
{
    static const char *const k[] = {"", "string", "uint32", "uint64", "int32", "int64", "binary"};
    return k[type];
}

static int parse_desc(struct tg_kcdata_iter *it, struct tg_kcdata_item *item, char *err, size_t errlen)
{
    char sn[TG_KCDATA_NAME_LEN];
    static const size_t need[] = {0, 1, 4, 8, 4, 8, 0};
    if (item->len < TG_KCDATA_NAME_LEN)
        return bad(it, err, errlen, "item at offset %zu (%s with description): %zu bytes, shorter than its 32-byte "
                   "name", item->offset, desc_kind(item->type), item->len);
    int nl = tg_kc_name_len(item->data);
    if (nl < 0)
        return bad(it, err, errlen, "item at offset %zu (%s with description): name not NUL-terminated within 32 "
                   "bytes", item->offset, desc_kind(item->type));
    item->u.desc.name = (const char *)item->data;
    item->u.desc.value = item->data + TG_KCDATA_NAME_LEN;
    item->u.desc.value_len = item->len - TG_KCDATA_NAME_LEN;
    if (item->u.desc.value_len < need[item->type])
        return bad(it, err, errlen, "item at offset %zu (%s '%s'): %zu value bytes, needs %zu", item->offset,
                   desc_kind(item->type), safe(item->u.desc.name, sn), item->u.desc.value_len, need[item->type]);
    const uint8_t *v = item->u.desc.value;
    switch (item->type) {
    case TG_KCDATA_TYPE_STRING_DESC: {
        const uint8_t *nul = memchr(v, 0, item->u.desc.value_len);
        if (!nul)
            return bad(it, err, errlen, "item at offset %zu (string '%s'): value not NUL-terminated", item->offset,
                       safe(item->u.desc.name, sn));
        item->u.desc.value_len = (size_t)(nul - v);
        break;
    }
    case TG_KCDATA_TYPE_UINT32_DESC: item->u.desc.u = tg_kc_ld32(v); break;
    case TG_KCDATA_TYPE_UINT64_DESC: item->u.desc.u = tg_kc_ld64(v); break;
    case TG_KCDATA_TYPE_INT32_DESC: item->u.desc.i = (int32_t)tg_kc_ld32(v); break;
    case TG_KCDATA_TYPE_INT64_DESC: item->u.desc.i = (int64_t)tg_kc_ld64(v); break;
    default: break;
    }
    return 0;
}

static int parse_typedef(struct tg_kcdata_iter *it, struct tg_kcdata_item *item, char *err, size_t errlen)
{
    char sn[TG_KCDATA_NAME_LEN];
    struct tg_kcdata_typedef *td = &item->u.td;
    if (item->len < TG_KCDATA_TYPEDEF_HEADER_SIZE)
        return bad(it, err, errlen, "type definition at offset %zu: %zu bytes, shorter than its 40-byte header",
                   item->offset, item->len);
    td->type_id = tg_kc_ld32(item->data);
    td->nfields = tg_kc_ld32(item->data + 4);
    td->name = (const char *)item->data + 8;
    td->fields = item->data + TG_KCDATA_TYPEDEF_HEADER_SIZE;
    size_t room = (item->len - TG_KCDATA_TYPEDEF_HEADER_SIZE) / TG_KCDATA_FIELD_SIZE;
    if (td->type_id <= TG_KCDATA_TYPE_RESERVED_MAX || td->type_id == TG_KCDATA_BUFFER_END)
        return bad(it, err, errlen, "type definition at offset %zu: type id 0x%X is reserved", item->offset,
                   td->type_id);
    if (tg_kc_name_len(item->data + 8) < 0)
        return bad(it, err, errlen, "type definition 0x%X at offset %zu: name not NUL-terminated within 32 bytes",
                   td->type_id, item->offset);
    if (td->nfields > TG_KCDATA_MAX_FIELDS)
        return bad(it, err, errlen, "type definition 0x%X (%s) at offset %zu: %u fields, more than %u",
                   td->type_id, safe(td->name, sn), item->offset, td->nfields, TG_KCDATA_MAX_FIELDS);
    if (td->nfields == 0 || td->nfields > room)
        return bad(it, err, errlen, "type definition 0x%X (%s) at offset %zu: %u fields, room for %zu",
                   td->type_id, safe(td->name, sn), item->offset, td->nfields, room);
    td->extent = 0;
    uint32_t starts[TG_KCDATA_MAX_FIELDS], ends[TG_KCDATA_MAX_FIELDS], fa, fb;
    for (uint32_t i = 0; i < td->nfields; i++) {
        const uint8_t *raw = td->fields + (size_t)i * TG_KCDATA_FIELD_SIZE;
        unsigned flags = raw[0], et = raw[1];
        uint32_t rsize = tg_kc_ld32(raw + 4), size = 0, count;
        unsigned esz = tg_kcdata_elem_size(et);
        const char *why = NULL;
        if (flags & TG_KCDATA_FIELD_ARRAY) {
            count = rsize >> 16;
            if (esz && (rsize & 0xffffu) != esz)
                why = "array element size does not match its element type";
        } else {
            count = 1;
            if (esz && rsize != esz)
                why = "scalar size does not match its element type";
        }
        if (!why)
            why = tg_kc_field_problem(flags, et, count, tg_kc_name_len(raw + 8), &size);
        if (why)
            return bad(it, err, errlen, "type definition 0x%X (%s) at offset %zu, field %u: %s", td->type_id,
                       safe(td->name, sn), item->offset, i, why);
        starts[i] = tg_kc_ld16(raw + 2);
        ends[i] = starts[i] + size;
        if (ends[i] > td->extent)
            td->extent = ends[i];
    }
    if (tg_kc_fields_overlap(starts, ends, td->nfields, &fa, &fb)) {
        char sa[TG_KCDATA_NAME_LEN], sb[TG_KCDATA_NAME_LEN];
        return bad(it, err, errlen, "type definition 0x%X (%s) at offset %zu: fields %u (%s) and %u (%s) overlap",
                   td->type_id, safe(td->name, sn), item->offset, fa,
                   safe((const char *)td->fields + (size_t)fa * TG_KCDATA_FIELD_SIZE + 8, sa), fb,
                   safe((const char *)td->fields + (size_t)fb * TG_KCDATA_FIELD_SIZE + 8, sb));
    }
    /* keep it for later items; a type id keeps one layout for the whole buffer */
    size_t bytes = TG_KCDATA_TYPEDEF_HEADER_SIZE + (size_t)td->nfields * TG_KCDATA_FIELD_SIZE;
    const struct tg_kcdata_typedef *old = tg_kcdata_iter_typedef(it, td->type_id);
    if (old) {
        if (old->nfields != td->nfields || memcmp(old->fields - TG_KCDATA_TYPEDEF_HEADER_SIZE, item->data, bytes))
            return bad(it, err, errlen, "type definition 0x%X (%s) at offset %zu redefines the type differently",
                       td->type_id, safe(td->name, sn), item->offset);
        return 0;
    }
    if (it->ntypedefs >= TG_KCDATA_MAX_TYPEDEFS)
        return bad(it, err, errlen, "type definition at offset %zu: more than %u type definitions", item->offset,
                   TG_KCDATA_MAX_TYPEDEFS);
    it->typedefs[it->ntypedefs++] = *td;
    return 0;
}

static int parse_array(struct tg_kcdata_iter *it, struct tg_kcdata_item *item, char *err, size_t errlen)
{
    uint32_t pad = item->type & 0xf, count = (uint32_t)item->flags;
    item->u.array.elem_type = (uint32_t)(item->flags >> 32);
    item->u.array.count = count;
    if (pad > item->size)
        return bad(it, err, errlen, "array at offset %zu: %u padding bytes claimed in a %u-byte item", item->offset,
                   pad, item->size);
    item->len = item->size - pad;
    if (count == 0 ? item->len != 0 : item->len == 0 || item->len % count != 0)
        return bad(it, err, errlen, "array at offset %zu: %zu bytes do not divide into %u elements", item->offset,
                   item->len, count);
    item->u.array.elem_size = count ? (uint32_t)(item->len / count) : 0;
    item->u.array.td = tg_kcdata_iter_typedef(it, item->u.array.elem_type);
    return 0;
}

static int container_begin(struct tg_kcdata_iter *it, struct tg_kcdata_item *item, char *err, size_t errlen)
{
    if (item->size < 4)
        return bad(it, err, errlen, "container begin at offset %zu: no container type (size %u)", item->offset,
                   item->size);
    if (it->depth >= TG_KCDATA_MAX_DEPTH)
        return bad(it, err, errlen, "container begin at offset %zu: nested deeper than %u", item->offset,
                   TG_KCDATA_MAX_DEPTH);
    item->u.container.type = tg_kc_ld32(item->data);
    item->u.container.id = item->flags;
    item->len = 4;
    it->ids[it->depth] = item->flags;
    it->ctypes[it->depth] = item->u.container.type;
    it->depth++;
    return 0;
}

static int container_end(struct tg_kcdata_iter *it, struct tg_kcdata_item *item, char *err, size_t errlen)
{
    if (it->depth == 0)
        return bad(it, err, errlen, "container end at offset %zu (id %llu) without a matching begin", item->offset,
                   (unsigned long long)item->flags);
    if (it->ids[it->depth - 1] != item->flags)
        return bad(it, err, errlen, "container end at offset %zu: id %llu does not match the open container id %llu "
                   "(type 0x%X)", item->offset, (unsigned long long)item->flags,
                   (unsigned long long)it->ids[it->depth - 1], it->ctypes[it->depth - 1]);
    it->depth--;
    item->depth = it->depth;
    item->u.container.type = it->ctypes[it->depth];
    item->u.container.id = item->flags;
    return 0;
}

int tg_kcdata_iter_next(struct tg_kcdata_iter *it, struct tg_kcdata_item *item, char *err, size_t errlen)
{
    if (it->state == 1)
        return 0;
    if (it->state != 0 || !it->buf)
        return tg_errf(err, errlen, "KCDATA iterator already failed");
    memset(item, 0, sizeof *item);
    size_t left = it->len - it->pos;
    if (left == 0)
        return bad(it, err, errlen, "buffer ends at offset %zu without BUFFER_END", it->pos);
    if (left < TG_KCDATA_HEADER_SIZE)
        return bad(it, err, errlen, "truncated: %zu bytes at offset %zu, too short for an item header (no "
                   "BUFFER_END)", left, it->pos);
    const uint8_t *p = it->buf + it->pos;
    item->type = tg_kc_ld32(p);
    item->size = tg_kc_ld32(p + 4);
    item->flags = tg_kc_ld64(p + 8);
    item->offset = it->pos;
    item->depth = it->depth;
    item->data = p + TG_KCDATA_HEADER_SIZE;
    item->len = item->size;
    left -= TG_KCDATA_HEADER_SIZE;
    if (item->size % TG_KCDATA_ALIGN)
        return bad(it, err, errlen, "item at offset %zu (type 0x%X): size %u is not a multiple of 16", item->offset,
                   item->type, item->size);
    if (item->size > left)
        return bad(it, err, errlen, "item at offset %zu (type 0x%X): size %u runs past the end of the buffer (%zu "
                   "bytes left)", item->offset, item->type, item->size, left);
    uint32_t t = item->type;
    if (t == TG_KCDATA_BUFFER_END) {
        if (it->depth)
            return bad(it, err, errlen, "BUFFER_END at offset %zu with container id %llu (type 0x%X) still open",
                       item->offset, (unsigned long long)it->ids[it->depth - 1], it->ctypes[it->depth - 1]);
        it->pos += TG_KCDATA_HEADER_SIZE + item->size;
        it->state = 1;
        return 0;
    }
    if (t == TG_KCDATA_TYPE_INVALID)
        return bad(it, err, errlen, "item at offset %zu has the invalid type 0", item->offset);
    int is_array = t >= TG_KCDATA_TYPE_ARRAY_PAD0 && t <= TG_KCDATA_TYPE_ARRAY_PAD0 + 0xf;
    int is_container = t == TG_KCDATA_TYPE_CONTAINER_BEGIN || t == TG_KCDATA_TYPE_CONTAINER_END;
    /* flags of every other item may record its padding */
    if (!is_array && !is_container && (item->flags & TG_KCDATA_FLAG_HAS_PADDING)) {
        uint32_t pad = (uint32_t)(item->flags & TG_KCDATA_FLAG_PAD_MASK);
        if (pad > item->size)
            return bad(it, err, errlen, "item at offset %zu (type 0x%X): %u padding bytes claimed in a %u-byte item",
                       item->offset, t, pad, item->size);
        item->len = item->size - pad;
    }
    int rc = 0;
    if (t >= TG_KCDATA_TYPE_STRING_DESC && t <= TG_KCDATA_TYPE_BINDATA_DESC) {
        item->kind = TG_KCDATA_KIND_DESC;
        rc = parse_desc(it, item, err, errlen);
    } else if (t == TG_KCDATA_TYPE_TYPEDEF) {
        item->kind = TG_KCDATA_KIND_TYPEDEF;
        rc = parse_typedef(it, item, err, errlen);
    } else if (is_array) {
        item->kind = TG_KCDATA_KIND_ARRAY;
        rc = parse_array(it, item, err, errlen);
    } else if (t == TG_KCDATA_TYPE_CONTAINER_BEGIN) {
        item->kind = TG_KCDATA_KIND_CONTAINER_BEGIN;
        rc = container_begin(it, item, err, errlen);
    } else if (t == TG_KCDATA_TYPE_CONTAINER_END) {
        item->kind = TG_KCDATA_KIND_CONTAINER_END;
        rc = container_end(it, item, err, errlen);
    } else {
        item->kind = TG_KCDATA_KIND_DATA;
        item->u.data.td = tg_kcdata_iter_typedef(it, t);
    }
    if (rc != 0)
        return -1;
    it->pos += TG_KCDATA_HEADER_SIZE + item->size;
    return 1;
}

int tg_kcdata_validate(const uint8_t *buf, size_t len, uint32_t want_magic, char *err, size_t errlen)
{
    struct tg_kcdata_iter it;
    struct tg_kcdata_item item;
    if (tg_kcdata_iter_init(&it, buf, len, want_magic, err, errlen) != 0)
        return -1;
    int rc;
    while ((rc = tg_kcdata_iter_next(&it, &item, err, errlen)) == 1)
        ;
    return rc;
}
