/* trusted_fields.c: the slice the service appends to every producer packet
 * (trusted_uid, trusted_packet_sequence_id, trusted_pid, machine_id,
 * previous_packet_dropped, in traced's order) and the check that drops
 * producer packets carrying fields only the service may write (§4.7). */
#include "service/svc.h"

#include "tracegate/pbwire.h"

/* A tag and a varint value, in line (five of them per packet read). */
static inline size_t put_field(uint8_t *buf, uint32_t number, uint64_t v)
{
    uint64_t key = (uint64_t)number << 3 | TG_PB_VARINT;
    size_t n = 0;
    while (key >= 0x80) {
        buf[n++] = (uint8_t)(key | 0x80);
        key >>= 7;
    }
    buf[n++] = (uint8_t)key;
    while (v >= 0x80) {
        buf[n++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    buf[n++] = (uint8_t)v;
    return n;
}

size_t tg_svc_trusted_slice(uint8_t *buf, const struct tg_tb_seq_info *info, uint32_t seq_id)
{
    size_t n = 0;
    n += put_field(buf + n, 3, (uint64_t)(int64_t)info->uid);
    n += put_field(buf + n, 10, seq_id);
    if (info->pid > 0)
        n += put_field(buf + n, 79, (uint64_t)(int64_t)info->pid);
    if (info->machine_id)
        n += put_field(buf + n, 98, info->machine_id);
    if (info->previous_packet_dropped)
        n += put_field(buf + n, 42, 1);
    return n;
}

static bool reserved_field(uint32_t num)
{
    switch (num) {
    case 3: case 10: case 33: case 35: case 36: case 50: case 69: case 79: case 98: case 124: case 125: case 133:
        return true;
    default:
        return false;
    }
}

/* The packet's bytes as one sequence over its slices, read in place (a packet spanning chunks is
 * never copied to be checked). Exactly the checks of walking the concatenated bytes with
 * tg_pb_next: every field parses (key varint of at most 10 bytes, the 10th at most 1, field number
 * 1..2^29-1, wire type 0, 1, 2 or 5, a varint value of at most 10 bytes, fixed values and
 * length-delimited payloads complete), no field is one only the service writes, and no
 * length-delimited field is longer than 0x0FFFFFFF. tests/unit/test_service_packet_check.c holds
 * it against that reference walk. */
struct cursor {
    const struct tg_tb_slice *s;
    size_t n, i;            /* slices, current slice */
    const uint8_t *p, *end; /* position in the current slice */
    size_t left;            /* bytes in the slices after the current one */
};

static inline bool cur_next_slice(struct cursor *c)
{
    while (c->p == c->end) {
        if (++c->i >= c->n)
            return false;
        c->p = c->s[c->i].data;
        c->end = c->p + c->s[c->i].len;
        c->left -= c->s[c->i].len;
    }
    return true;
}

static inline size_t cur_remaining(const struct cursor *c)
{
    return (size_t)(c->end - c->p) + c->left;
}

/* tg_pb_read_varint's rules; false when the bytes end or the varint is too long. */
static inline bool cur_varint(struct cursor *c, uint64_t *out)
{
    if (c->end - c->p >= 10) { /* all ten bytes it may take are in this slice */
        const uint8_t *p = c->p;
        uint64_t v = 0;
        for (unsigned i = 0; i < 9; i++) {
            uint8_t b = p[i];
            v |= (uint64_t)(b & 0x7f) << (7 * i);
            if (!(b & 0x80)) {
                c->p = p + i + 1;
                *out = v;
                return true;
            }
        }
        if (p[9] > 1)
            return false;
        c->p = p + 10;
        *out = v | (uint64_t)p[9] << 63;
        return true;
    }
    uint64_t v = 0;
    for (unsigned i = 0; i < 10; i++) {
        if (c->p == c->end && !cur_next_slice(c))
            return false;
        uint8_t b = *c->p++;
        if (i == 9 && b > 1)
            return false;
        v |= (uint64_t)(b & 0x7f) << (7 * i);
        if (!(b & 0x80)) {
            *out = v;
            return true;
        }
    }
    return false;
}

/* Skips n bytes the caller checked are there. */
static inline void cur_skip(struct cursor *c, size_t n)
{
    for (;;) {
        size_t here = (size_t)(c->end - c->p);
        if (n <= here) {
            c->p += n;
            return;
        }
        n -= here;
        c->p = c->end;
        cur_next_slice(c);
    }
}

static bool slices_valid(const struct tg_tb_slice *slices, size_t n)
{
    struct cursor c = {.s = slices, .n = n, .i = 0, .left = 0};
    for (size_t i = 1; i < n; i++)
        c.left += slices[i].len;
    c.p = slices[0].data;
    c.end = c.p ? c.p + slices[0].len : c.p;
    for (;;) {
        if (c.p == c.end && !cur_next_slice(&c))
            return true; /* the bytes ended at a field boundary */
        uint64_t key, v;
        if (!cur_varint(&c, &key))
            return false;
        uint64_t num = key >> 3;
        if (num == 0 || num > 0x1fffffff || reserved_field((uint32_t)num))
            return false;
        switch (key & 7) {
        case 0: /* varint */
            if (!cur_varint(&c, &v))
                return false;
            break;
        case 1: /* fixed64 */
            if (cur_remaining(&c) < 8)
                return false;
            cur_skip(&c, 8);
            break;
        case 5: /* fixed32 */
            if (cur_remaining(&c) < 4)
                return false;
            cur_skip(&c, 4);
            break;
        case 2: /* length-delimited */
            if (!cur_varint(&c, &v) || v > cur_remaining(&c) || v > 0x0FFFFFFFu)
                return false;
            cur_skip(&c, (size_t)v);
            break;
        default: /* groups (3, 4) and 6, 7 */
            return false;
        }
    }
}

bool tg_svc_packet_is_valid(const struct tg_tb_packet *pkt)
{
    if (pkt->num_slices == 0)
        return true;
    return slices_valid(pkt->slices, pkt->num_slices);
}
