/* pbwire.h: a tiny allocation-free protobuf wire-format reader and writer.
 *
 * Used where a full protobuf-c decode would be wasteful: scanning IPC frames
 * in the gateway, stamping trusted fields onto trace packets, walking SMB
 * fragments. Readers never read past the end they are given. Pure functions,
 * safe from any thread. */
#ifndef TRACEGATE_PBWIRE_H
#define TRACEGATE_PBWIRE_H

#include <stddef.h>
#include <stdint.h>

enum tg_pb_wire { TG_PB_VARINT = 0, TG_PB_I64 = 1, TG_PB_LEN = 2, TG_PB_SGROUP = 3, TG_PB_EGROUP = 4, TG_PB_I32 = 5 };

/* Cursor over an encoded message. */
struct tg_pb_reader {
    const uint8_t *p;
    const uint8_t *end;
};

/* One decoded field. For TG_PB_LEN, data/len point into the input. */
struct tg_pb_field {
    uint32_t number;
    enum tg_pb_wire wire;
    uint64_t value;      /* varint, fixed32 or fixed64 value */
    const uint8_t *data; /* TG_PB_LEN payload */
    size_t len;
};

static inline void tg_pb_reader_init(struct tg_pb_reader *r, const void *buf, size_t len)
{
    r->p = (const uint8_t *)buf;
    r->end = buf ? r->p + len : r->p; /* an empty field may come with a NULL pointer */
}

/* Decodes a varint of at most 10 bytes. Returns bytes consumed, 0 on error. */
size_t tg_pb_read_varint(const uint8_t *p, const uint8_t *end, uint64_t *out);

/* Reads the next field. Returns 1 on success, 0 at a clean end, -1 on
 * malformed input (truncation, bad wire type, field number 0, groups). */
int tg_pb_next(struct tg_pb_reader *r, struct tg_pb_field *f);

/* Writers: return bytes written (buf must have room: 10 bytes per varint). */
size_t tg_pb_put_varint(uint8_t *buf, uint64_t v);
size_t tg_pb_put_tag(uint8_t *buf, uint32_t number, enum tg_pb_wire wire);
/* Writes v as a fixed-width redundant varint of exactly 4 bytes (v < 2^28). */
void tg_pb_put_varint4(uint8_t *buf, uint32_t v);
size_t tg_pb_varint_size(uint64_t v);

#endif
