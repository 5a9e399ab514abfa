/* kcdata.h: KCDATA, a self-describing chunked binary format (Apple's kcdata layout): an encoder,
 * a validating iterator, accessors for type definitions, and text/JSON printers.
 *
 * Layout (all little-endian): a buffer is a run of items, each
 *     uint32 type | uint32 size | uint64 flags | data[size]
 * where size is a multiple of 16 (the data is zero-padded). The first item's type is a begin
 * magic (TG_KCDATA_MAGIC for tracegate's own buffers), the last is TG_KCDATA_BUFFER_END.
 * See docs/kcdata.md for the item kinds, tracegate's magic and type ids, and the evolution rules.
 *
 * Byte order: tracegate reads and writes little-endian KCDATA only. A buffer whose begin magic is
 * the byte-swap of a known magic was written big-endian; the iterator refuses it with an error
 * saying so (it is never misread as little-endian).
 *
 * Errors follow libtracegate's convention: -1 and a message in (err, errlen) when err != NULL.
 * Only the encoders allocate; the iterator, decoders and printers work in the caller's buffer
 * and on the stack, in time linear in the buffer's length. No global state: every function may
 * be called from any thread; one encoder or iterator must not be used by two threads at once. */
#ifndef TRACEGATE_KCDATA_H
#define TRACEGATE_KCDATA_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* ---- format constants ---- */

/* tracegate's begin magic: the bytes "TGKC" on the wire. Neither it nor its byte-swap
 * (0x54474B43) equals a known magic or the byte-swap of one (checked by the unit tests). */
#define TG_KCDATA_MAGIC 0x434B4754u
#define TG_KCDATA_BUFFER_END 0xF19158EDu

/* Begin magics of other writers (never reused by tracegate). */
#define TG_KCDATA_MAGIC_CRASHINFO 0xDEADF157u
#define TG_KCDATA_MAGIC_STACKSHOT 0x59A25807u
#define TG_KCDATA_MAGIC_DELTA_STACKSHOT 0xDE17A59Au
#define TG_KCDATA_MAGIC_COMPRESSED 0x434F4D50u
#define TG_KCDATA_MAGIC_BTINFO 0x46414E47u
#define TG_KCDATA_MAGIC_OS_REASON 0x53A20900u
#define TG_KCDATA_MAGIC_XNUPOST 0x1E21C09Fu

/* Values for tg_kcdata_iter_init()'s want_magic besides a specific magic (both are reserved
 * type ids, so no real magic collides with them). */
#define TG_KCDATA_KNOWN_MAGIC 0u /* tracegate's or one of the magics above */
#define TG_KCDATA_ANY_MAGIC 1u   /* any value outside the reserved type ids */

#define TG_KCDATA_HEADER_SIZE 16u
#define TG_KCDATA_ALIGN 16u
#define TG_KCDATA_NAME_LEN 32u /* NUL-padded names: at most 31 characters */
#define TG_KCDATA_TYPEDEF_HEADER_SIZE 40u /* uint32 type id | uint32 field count | name[32] */
#define TG_KCDATA_FIELD_SIZE 40u          /* u8 flags | u8 elem type | u16 offset | u32 size | name[32] */
#define TG_KCDATA_MAX_DEPTH 32u           /* container nesting accepted (reader) and written */
#define TG_KCDATA_MAX_TYPEDEFS 256u       /* distinct type definitions per buffer */
#define TG_KCDATA_MAX_FIELDS 256u         /* fields per type definition (bounds printer output) */

/* Reserved type ids (0x0 to 0x7ff). */
#define TG_KCDATA_TYPE_INVALID 0x0u
#define TG_KCDATA_TYPE_STRING_DESC 0x1u /* name[32], NUL-terminated string */
#define TG_KCDATA_TYPE_UINT32_DESC 0x2u /* name[32], uint32 */
#define TG_KCDATA_TYPE_UINT64_DESC 0x3u /* name[32], uint64 */
#define TG_KCDATA_TYPE_INT32_DESC 0x4u  /* name[32], int32 */
#define TG_KCDATA_TYPE_INT64_DESC 0x5u  /* name[32], int64 */
#define TG_KCDATA_TYPE_BINDATA_DESC 0x6u /* name[32], bytes */
#define TG_KCDATA_TYPE_ARRAY_OBSOLETE 0x11u
#define TG_KCDATA_TYPE_TYPEDEF 0x12u
#define TG_KCDATA_TYPE_CONTAINER_BEGIN 0x13u /* flags = id; data = uint32 container type */
#define TG_KCDATA_TYPE_CONTAINER_END 0x14u   /* flags = id of the matching begin */
#define TG_KCDATA_TYPE_ARRAY_PAD0 0x20u      /* 0x20..0x2f: low nibble = padding bytes */
#define TG_KCDATA_TYPE_LIBRARY_LOADINFO 0x30u
#define TG_KCDATA_TYPE_LIBRARY_LOADINFO64 0x31u
#define TG_KCDATA_TYPE_TIMEBASE 0x32u           /* uint32 numer, uint32 denom */
#define TG_KCDATA_TYPE_MACH_ABSOLUTE_TIME 0x33u /* uint64 */
#define TG_KCDATA_TYPE_TIMEVAL 0x34u            /* int64 seconds, int64 microseconds */
#define TG_KCDATA_TYPE_USECS_SINCE_EPOCH 0x35u  /* uint64 */
#define TG_KCDATA_TYPE_PID 0x36u                /* int32 */
#define TG_KCDATA_TYPE_PROCNAME 0x37u           /* string */
#define TG_KCDATA_TYPE_NESTED_KCDATA 0x38u      /* a whole KCDATA buffer */
#define TG_KCDATA_TYPE_AOTCACHE_LOADINFO 0x39u
#define TG_KCDATA_TYPE_RESERVED_MAX 0x7ffu

/* Item flags of plain and described items: padding bytes recorded in the low nibble, with
 * the HAS_PADDING bit saying the nibble is meaningful. tracegate always sets both. */
#define TG_KCDATA_FLAG_PAD_MASK 0xfu
#define TG_KCDATA_FLAG_HAS_PADDING 0x80u

/* Element types of type-definition fields. */
#define TG_KCDATA_ST_CHAR 1u
#define TG_KCDATA_ST_INT8 2u
#define TG_KCDATA_ST_UINT8 3u
#define TG_KCDATA_ST_INT16 4u
#define TG_KCDATA_ST_UINT16 5u
#define TG_KCDATA_ST_INT32 6u
#define TG_KCDATA_ST_UINT32 7u
#define TG_KCDATA_ST_INT64 8u
#define TG_KCDATA_ST_UINT64 9u

/* Field flags. ARRAY: the field holds `count` elements (on the wire: size = count << 16 | elem
 * size). STRUCT: print a one-field type as a struct. MERGE: informational, kept as written. */
#define TG_KCDATA_FIELD_ARRAY 0x1u
#define TG_KCDATA_FIELD_STRUCT 0x2u
#define TG_KCDATA_FIELD_MERGE 0x4u

/* Natural size of an element type (char/int8/uint8 = 1 ... uint64 = 8); 0 if unknown. */
unsigned tg_kcdata_elem_size(unsigned elem_type);
/* "uint64", "char", ... or NULL if unknown. */
const char *tg_kcdata_elem_type_name(unsigned elem_type);
/* "tracegate", "stackshot", ... for a known begin magic, else NULL. */
const char *tg_kcdata_magic_name(uint32_t magic);
/* 1 if magic may begin a buffer written by tg_kcdata_enc_init*(): outside the reserved type
 * ids, not BUFFER_END, not its own byte-swap, and not the byte-swap of a known magic. */
int tg_kcdata_magic_usable(uint32_t magic);

/* ---- type definitions ---- */

/* One field of a type definition. When encoding, name points to the caller's string; when
 * decoding (tg_kcdata_typedef_field), it points into the buffer, NUL-terminated. */
struct tg_kcdata_field {
    uint8_t flags;     /* TG_KCDATA_FIELD_* */
    uint8_t elem_type; /* TG_KCDATA_ST_* */
    uint16_t offset;   /* byte offset in the packed struct */
    uint32_t count;    /* elements: 1 for a scalar (0 is read as 1 when encoding a scalar) */
    const char *name;  /* 1 to 31 characters */
};

/* A validated type definition inside a buffer (pointers into the buffer). */
struct tg_kcdata_typedef {
    uint32_t type_id;
    uint32_t nfields;
    const char *name;      /* NUL-terminated */
    const uint8_t *fields; /* nfields raw descriptors of TG_KCDATA_FIELD_SIZE bytes */
    uint32_t extent;       /* bytes a complete item of this type has: max(offset + size) */
};

/* Field i (< td->nfields) of td. Returns 0, or -1 if i is out of range. */
int tg_kcdata_typedef_field(const struct tg_kcdata_typedef *td, uint32_t i, struct tg_kcdata_field *f);
/* The field called name. Returns 0, or -1 if td has no such field. */
int tg_kcdata_typedef_find(const struct tg_kcdata_typedef *td, const char *name, struct tg_kcdata_field *f);
/* Reads element idx of an integer (or char) field from rec (one struct of rec_len bytes).
 * _uint zero-extends, _int sign-extends signed types. Returns 0, or -1 if the element lies
 * beyond rec_len, idx >= count, or the field is not an integer/char field. */
int tg_kcdata_field_uint(const struct tg_kcdata_field *f, const uint8_t *rec, size_t rec_len, uint32_t idx,
                         uint64_t *out);
int tg_kcdata_field_int(const struct tg_kcdata_field *f, const uint8_t *rec, size_t rec_len, uint32_t idx,
                        int64_t *out);
/* Copies a char field (up to its first NUL, or all of it) into out as a NUL-terminated string.
 * Returns the string's length, or -1 if the field is not char, lies beyond rec_len, or the
 * string does not fit in outlen (out then holds a truncated copy). */
int tg_kcdata_field_string(const struct tg_kcdata_field *f, const uint8_t *rec, size_t rec_len, char *out,
                           size_t outlen);

/* ---- encoder ---- */

/* Writes one buffer. Fields are private. An encoder starts with tg_kcdata_enc_init*() and ends
 * with tg_kcdata_finish() or tg_kcdata_enc_free(). The first failing call leaves a message in
 * tg_kcdata_enc_error(); every later call then fails too, so a run of adds can be checked once. */
struct tg_kcdata_enc {
    uint8_t *buf;
    size_t len, cap;
    int owned, failed;
    unsigned depth;
    uint64_t open_ids[TG_KCDATA_MAX_DEPTH];
    unsigned ntypedefs; /* definitions written: id and offset of their data */
    uint32_t td_ids[TG_KCDATA_MAX_TYPEDEFS];
    size_t td_offs[TG_KCDATA_MAX_TYPEDEFS];
    char err[192];
};

/* A growable (malloc'd) buffer. magic must pass tg_kcdata_magic_usable(). Returns 0 or -1. */
int tg_kcdata_enc_init(struct tg_kcdata_enc *e, uint32_t magic);
/* The caller's buffer of cap bytes (kept by the caller, never freed here). Every add checks
 * that the item and the final BUFFER_END still fit; one that does not fails with a message
 * naming the bytes needed and left, and the buffer then holds no partial item. */
int tg_kcdata_enc_init_buf(struct tg_kcdata_enc *e, uint32_t magic, uint8_t *buf, size_t cap);

/* An item of any non-structural type (a type of your own, one described by a type
 * definition, or 0x30..0x39) with data[len], zero-padded; flags record the padding.
 * Structural types (0x0..0x2f, BUFFER_END) are refused: use the functions below. */
int tg_kcdata_add(struct tg_kcdata_enc *e, uint32_t type, const void *data, size_t len);
/* "With description" items: a 1..31 character name and a value. */
int tg_kcdata_add_string(struct tg_kcdata_enc *e, const char *name, const char *value);
int tg_kcdata_add_u32(struct tg_kcdata_enc *e, const char *name, uint32_t value);
int tg_kcdata_add_u64(struct tg_kcdata_enc *e, const char *name, uint64_t value);
int tg_kcdata_add_i32(struct tg_kcdata_enc *e, const char *name, int32_t value);
int tg_kcdata_add_i64(struct tg_kcdata_enc *e, const char *name, int64_t value);
int tg_kcdata_add_binary(struct tg_kcdata_enc *e, const char *name, const void *data, size_t len);
/* count elements of elem_size bytes each (elems holds count * elem_size bytes); elem_type is
 * the type id of one element (usually one with a type definition). Type 0x20 + padding. */
int tg_kcdata_add_array(struct tg_kcdata_enc *e, uint32_t elem_type, uint32_t elem_size, uint32_t count,
                        const void *elems);
/* A type definition for type_id (outside the reserved ids) named name, with 1 to
 * TG_KCDATA_MAX_FIELDS fields. Fields are validated as a reader would (known element type,
 * count >= 1 for arrays, 1..31 character names, no two fields sharing a byte); a definition a
 * reader would refuse is refused here, and so is a second definition of a type id that differs
 * from the first (an identical one is written again), or more than TG_KCDATA_MAX_TYPEDEFS
 * distinct ones. */
int tg_kcdata_add_typedef(struct tg_kcdata_enc *e, uint32_t type_id, const char *name,
                          const struct tg_kcdata_field *fields, uint32_t nfields);
/* Containers: begin with a container type and an id; end with the same id. Nesting is allowed
 * up to TG_KCDATA_MAX_DEPTH; ending with another id than the innermost open one fails. */
int tg_kcdata_container_begin(struct tg_kcdata_enc *e, uint32_t container_type, uint64_t id);
int tg_kcdata_container_end(struct tg_kcdata_enc *e, uint64_t id);
/* Writes BUFFER_END (fails if a container is still open). On success *out and *len describe the
 * buffer: for tg_kcdata_enc_init() *out is malloc'd and now the caller's (free()), for
 * tg_kcdata_enc_init_buf() it is the caller's buffer. The encoder is then empty. */
int tg_kcdata_finish(struct tg_kcdata_enc *e, uint8_t **out, size_t *len);
/* Releases an unfinished encoder's storage (safe after finish, and twice). */
void tg_kcdata_enc_free(struct tg_kcdata_enc *e);
/* The first error, or "" while there is none. */
const char *tg_kcdata_enc_error(const struct tg_kcdata_enc *e);

/* ---- iterator ---- */

enum tg_kcdata_kind {
    TG_KCDATA_KIND_DATA,            /* any other type (u.data.td: its definition, if one was seen) */
    TG_KCDATA_KIND_DESC,            /* 0x1..0x6 */
    TG_KCDATA_KIND_ARRAY,           /* 0x20..0x2f */
    TG_KCDATA_KIND_TYPEDEF,         /* 0x12 */
    TG_KCDATA_KIND_CONTAINER_BEGIN, /* 0x13 */
    TG_KCDATA_KIND_CONTAINER_END,   /* 0x14 */
};

/* One item, with pointers into the buffer (valid while the buffer and the iterator live). */
struct tg_kcdata_item {
    uint32_t type;
    uint32_t size;  /* as in the header, padding included */
    uint64_t flags;
    size_t offset;  /* of the item's header in the buffer */
    unsigned depth; /* containers open around it (a begin/end pair sits at its parent's depth) */
    enum tg_kcdata_kind kind;
    const uint8_t *data; /* payload without the recorded padding */
    size_t len;
    union {
        struct {
            const char *name; /* NUL-terminated */
            const uint8_t *value;
            size_t value_len; /* STRING_DESC: the string's length (value is NUL-terminated) */
            uint64_t u;       /* UINT32/UINT64 value */
            int64_t i;        /* INT32/INT64 value */
        } desc;
        struct {
            uint32_t elem_type, count, elem_size;
            const struct tg_kcdata_typedef *td; /* definition of elem_type, or NULL */
        } array;
        struct tg_kcdata_typedef td;
        struct {
            uint32_t type; /* the container type (also given on the end item) */
            uint64_t id;
        } container;
        struct {
            const struct tg_kcdata_typedef *td; /* NULL for a type without a definition */
        } data;
    } u;
};

/* Walks a buffer. Fields are private. Type definitions seen so far are kept (by pointer) and
 * attached to later items of their type; a second definition of a type id must be identical. */
struct tg_kcdata_iter {
    const uint8_t *buf;
    size_t len, pos;
    uint32_t magic;
    int state; /* 0 walking, 1 at BUFFER_END, -1 failed */
    unsigned depth;
    uint64_t ids[TG_KCDATA_MAX_DEPTH];
    uint32_t ctypes[TG_KCDATA_MAX_DEPTH];
    size_t ntypedefs;
    struct tg_kcdata_typedef typedefs[TG_KCDATA_MAX_TYPEDEFS];
};

/* Checks the begin item of buf[0..len). want_magic: a specific magic, TG_KCDATA_KNOWN_MAGIC or
 * TG_KCDATA_ANY_MAGIC. Refused: too short, a byte-swapped (big-endian) magic, the compressed
 * magic (unsupported), another magic than wanted. Returns 0 or -1. */
int tg_kcdata_iter_init(struct tg_kcdata_iter *it, const uint8_t *buf, size_t len, uint32_t want_magic, char *err,
                        size_t errlen);
/* Next item: 1 and *item filled, 0 at BUFFER_END (bytes after it are ignored; see
 * tg_kcdata_iter_end_offset), -1 on malformed input, with a message naming the offset.
 * Checked: every header and size lies inside the buffer, sizes are multiples of 16, padding
 * claims fit the item, described items have a NUL-terminated name and their whole value,
 * arrays divide into their element count, type definitions are well formed (known element
 * types, at most TG_KCDATA_MAX_FIELDS fields, none overlapping), container ends
 * match the innermost begin, BUFFER_END comes with no container open. Unknown types are
 * returned as TG_KCDATA_KIND_DATA for the caller to skip. After 0 or -1 it keeps returning so. */
int tg_kcdata_iter_next(struct tg_kcdata_iter *it, struct tg_kcdata_item *item, char *err, size_t errlen);
/* The definition of type_id seen so far, or NULL. */
const struct tg_kcdata_typedef *tg_kcdata_iter_typedef(const struct tg_kcdata_iter *it, uint32_t type_id);
/* Offset just past BUFFER_END once tg_kcdata_iter_next returned 0, else 0. */
size_t tg_kcdata_iter_end_offset(const struct tg_kcdata_iter *it);
/* Walks the whole buffer (want_magic as above). Returns 0 if it is well formed, else -1. */
int tg_kcdata_validate(const uint8_t *buf, size_t len, uint32_t want_magic, char *err, size_t errlen);

/* ---- printers ---- */

#define TG_KCDATA_PRINT_OFFSETS 0x1u /* prefix each item with its offset */
#define TG_KCDATA_PRINT_HEX 0x2u     /* also hex-dump the payload of decoded items */

/* Prints any KCDATA buffer (any begin magic outside the reserved ids) readably to out:
 * described items as "type name = value", type definitions with their fields, items of
 * defined types field by field (including types the printer was never built to know),
 * arrays element by element, containers as indented blocks, tracegate's and the generic
 * types (0x30..0x39) by name, nested KCDATA recursively, anything else as a hex dump. Names
 * and strings are escaped (no control bytes reach the terminal). On malformed input the
 * items before the problem are printed, then "error: ..."; returns -1 with err filled.
 * Returns 0 when the whole buffer is well formed. */
int tg_kcdata_print(FILE *out, const uint8_t *buf, size_t len, unsigned flags, char *err, size_t errlen);
/* The same as one JSON document (ASCII only): {"magic": ..., "items": [...]}, containers as
 * objects with their own "items". On malformed input the items read so far are followed by an
 * "error" member (the document stays well formed) and the call returns -1 with err filled. */
int tg_kcdata_print_json(FILE *out, const uint8_t *buf, size_t len, char *err, size_t errlen);

#endif
