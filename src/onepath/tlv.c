/* tlv.c: the OnePath attachment TLV: magic D1 07, version 01, then items of tag (1 byte), length
 * (unsigned LEB128, minimal, 1..5 bytes, < 2^32) and value. Encoder and a decoder that never
 * reads past its input and always says what the user's attachment bytes are. */
#include <string.h>

#include "onepath/traceparent.h"
#include "tracegate/onepath.h"

#define LEB_MAX 5

static size_t leb_size(uint64_t v)
{
    size_t n = 1;
    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

static size_t leb_put(uint8_t *p, uint64_t v)
{
    size_t n = 0;
    while (v >= 0x80) {
        p[n++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    p[n++] = (uint8_t)v;
    return n;
}

/* Reads a minimal LEB128 of at most 5 bytes with a value < 2^32. Returns bytes used or 0. */
static size_t leb_get(const uint8_t *p, size_t avail, uint32_t *out)
{
    uint64_t v = 0;
    for (size_t i = 0; i < LEB_MAX && i < avail; i++) {
        v |= (uint64_t)(p[i] & 0x7f) << (7 * i);
        if (!(p[i] & 0x80)) {
            if (i > 0 && p[i] == 0)
                return 0; /* non-minimal: a trailing zero group */
            if (v > UINT32_MAX)
                return 0;
            *out = (uint32_t)v;
            return i + 1;
        }
    }
    return 0; /* truncated, or a continuation bit on the 5th byte */
}

static size_t item_size(size_t len) { return 1 + leb_size(len) + len; }

size_t onepath_tlv_size(const onepath_tlv_t *t)
{
    size_t n = 3;
    if (t->has_traceparent)
        n += item_size(TG_OP_TRACEPARENT_BIN);
    if (t->has_send_ts)
        n += item_size(8);
    if (t->user_len)
        n += item_size(t->user_len);
    return n;
}

static size_t put_item(uint8_t *p, uint8_t tag, const uint8_t *v, size_t len)
{
    size_t n = 0;
    p[n++] = tag;
    n += leb_put(p + n, len);
    if (len)
        memcpy(p + n, v, len);
    return n + len;
}

int onepath_tlv_encode(const onepath_tlv_t *t, uint8_t *out, size_t cap, size_t *out_len)
{
    if (!t || (!out && cap) || (t->user_len && !t->user) || (uint64_t)t->user_len > UINT32_MAX)
        return ONEPATH_ERR_INVAL;
    if (t->has_traceparent && !onepath_trace_ctx_valid(&t->traceparent))
        return ONEPATH_ERR_INVAL;
    size_t need = onepath_tlv_size(t);
    if (cap < need)
        return ONEPATH_ERR_NOSPACE;
    size_t n = 0;
    out[n++] = ONEPATH_TLV_MAGIC0;
    out[n++] = ONEPATH_TLV_MAGIC1;
    out[n++] = ONEPATH_TLV_VERSION;
    if (t->has_traceparent) {
        uint8_t tp[TG_OP_TRACEPARENT_BIN];
        tg_op_ctx_pack(&t->traceparent, tp);
        n += put_item(out + n, ONEPATH_TAG_TRACEPARENT, tp, sizeof tp);
    }
    if (t->has_send_ts) {
        uint8_t ts[8];
        for (int i = 0; i < 8; i++)
            ts[i] = (uint8_t)(t->send_ts_ns >> (56 - 8 * i));
        n += put_item(out + n, ONEPATH_TAG_SEND_TS_NS, ts, 8);
    }
    if (t->user_len)
        n += put_item(out + n, ONEPATH_TAG_USER, t->user, t->user_len);
    if (out_len)
        *out_len = n;
    return ONEPATH_OK;
}

static void as_user_bytes(const uint8_t *att, size_t len, onepath_tlv_t *t)
{
    memset(t, 0, sizeof *t);
    t->user = att;
    t->user_len = att ? len : 0;
}

int onepath_tlv_decode(const uint8_t *att, size_t len, onepath_tlv_t *t)
{
    if (!t)
        return ONEPATH_ERR_INVAL;
    as_user_bytes(att, len, t);
    if (!att || len < 2 || att[0] != ONEPATH_TLV_MAGIC0 || att[1] != ONEPATH_TLV_MAGIC1)
        return ONEPATH_TLV_FOREIGN;
    if (len < 3 || att[2] != ONEPATH_TLV_VERSION)
        return ONEPATH_ERR_MALFORMED;
    onepath_tlv_t d;
    memset(&d, 0, sizeof d);
    int seen_tp = 0, seen_ts = 0, seen_user = 0;
    size_t pos = 3;
    while (pos < len) {
        uint8_t tag = att[pos++];
        uint32_t vlen;
        size_t used = leb_get(att + pos, len - pos, &vlen);
        if (used == 0)
            return ONEPATH_ERR_MALFORMED;
        pos += used;
        if (vlen > len - pos)
            return ONEPATH_ERR_MALFORMED;
        const uint8_t *v = att + pos;
        pos += vlen;
        switch (tag) {
        case ONEPATH_TAG_TRACEPARENT:
            if (seen_tp++ || vlen != TG_OP_TRACEPARENT_BIN)
                return ONEPATH_ERR_MALFORMED;
            tg_op_ctx_unpack(v, &d.traceparent);
            d.has_traceparent = onepath_trace_ctx_valid(&d.traceparent);
            break;
        case ONEPATH_TAG_SEND_TS_NS:
            if (seen_ts++ || vlen != 8)
                return ONEPATH_ERR_MALFORMED;
            for (int i = 0; i < 8; i++)
                d.send_ts_ns = d.send_ts_ns << 8 | v[i];
            d.has_send_ts = 1;
            break;
        case ONEPATH_TAG_USER:
            if (seen_user++)
                return ONEPATH_ERR_MALFORMED;
            d.user = v;
            d.user_len = vlen;
            break;
        default: /* TRACESTATE (reserved) and unknown tags are skipped */
            break;
        }
    }
    if (!d.has_traceparent)
        memset(&d.traceparent, 0, sizeof d.traceparent);
    *t = d;
    return ONEPATH_OK;
}
