/* pbwire.c: protobuf wire-format primitives (see tracegate/pbwire.h). */
#include "tracegate/pbwire.h"

size_t tg_pb_read_varint(const uint8_t *p, const uint8_t *end, uint64_t *out)
{
    uint64_t v = 0;
    for (size_t i = 0; i < 10; i++) {
        if (p + i >= end)
            return 0;
        uint8_t b = p[i];
        if (i == 9 && b > 1)
            return 0; /* would overflow 64 bits */
        v |= (uint64_t)(b & 0x7f) << (7 * i);
        if (!(b & 0x80)) {
            *out = v;
            return i + 1;
        }
    }
    return 0;
}

int tg_pb_next(struct tg_pb_reader *r, struct tg_pb_field *f)
{
    if (r->p >= r->end)
        return 0;
    uint64_t key;
    size_t n = tg_pb_read_varint(r->p, r->end, &key);
    if (n == 0 || (key >> 3) == 0 || (key >> 3) > 0x1fffffff)
        return -1;
    r->p += n;
    f->number = (uint32_t)(key >> 3);
    f->wire = (enum tg_pb_wire)(key & 7);
    f->data = NULL;
    f->len = 0;
    f->value = 0;
    switch (f->wire) {
    case TG_PB_VARINT:
        n = tg_pb_read_varint(r->p, r->end, &f->value);
        if (n == 0)
            return -1;
        r->p += n;
        return 1;
    case TG_PB_I64:
        if (r->end - r->p < 8)
            return -1;
        for (int i = 7; i >= 0; i--)
            f->value = (f->value << 8) | r->p[i];
        r->p += 8;
        return 1;
    case TG_PB_I32:
        if (r->end - r->p < 4)
            return -1;
        f->value = (uint32_t)r->p[0] | (uint32_t)r->p[1] << 8 | (uint32_t)r->p[2] << 16 | (uint32_t)r->p[3] << 24;
        r->p += 4;
        return 1;
    case TG_PB_LEN: {
        uint64_t len;
        n = tg_pb_read_varint(r->p, r->end, &len);
        if (n == 0)
            return -1;
        r->p += n;
        if (len > (uint64_t)(r->end - r->p))
            return -1;
        f->data = r->p;
        f->len = (size_t)len;
        r->p += len;
        return 1;
    }
    default:
        return -1;
    }
}

size_t tg_pb_put_varint(uint8_t *buf, uint64_t v)
{
    size_t n = 0;
    while (v >= 0x80) {
        buf[n++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    buf[n++] = (uint8_t)v;
    return n;
}

size_t tg_pb_put_tag(uint8_t *buf, uint32_t number, enum tg_pb_wire wire)
{
    return tg_pb_put_varint(buf, ((uint64_t)number << 3) | (uint64_t)wire);
}

void tg_pb_put_varint4(uint8_t *buf, uint32_t v)
{
    buf[0] = (uint8_t)((v & 0x7f) | 0x80);
    buf[1] = (uint8_t)(((v >> 7) & 0x7f) | 0x80);
    buf[2] = (uint8_t)(((v >> 14) & 0x7f) | 0x80);
    buf[3] = (uint8_t)((v >> 21) & 0x7f);
}

size_t tg_pb_varint_size(uint64_t v)
{
    size_t n = 1;
    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}
