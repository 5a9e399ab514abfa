/* traceparent.c: W3C trace context: validity, the text form "vv-<trace>-<span>-<flags>" (parse
 * and format, lower-case hex only as W3C requires) and the 26-byte binary form of the TLV. */
#include "onepath/traceparent.h"

#include <string.h>

static int all_zero(const uint8_t *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (b[i])
            return 0;
    return 1;
}

int onepath_trace_ctx_valid(const onepath_trace_ctx_t *ctx)
{
    return ctx && ctx->version != 0xff && !all_zero(ctx->trace_id, 16) && !all_zero(ctx->span_id, 8);
}

void tg_op_ctx_pack(const onepath_trace_ctx_t *ctx, uint8_t out[TG_OP_TRACEPARENT_BIN])
{
    out[0] = ctx->version;
    memcpy(out + 1, ctx->trace_id, 16);
    memcpy(out + 17, ctx->span_id, 8);
    out[25] = ctx->flags;
}

void tg_op_ctx_unpack(const uint8_t in[TG_OP_TRACEPARENT_BIN], onepath_trace_ctx_t *ctx)
{
    ctx->version = in[0];
    memcpy(ctx->trace_id, in + 1, 16);
    memcpy(ctx->span_id, in + 17, 8);
    ctx->flags = in[25];
}

void tg_op_hex(const uint8_t *b, size_t n, char *out)
{
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[b[i] >> 4];
        out[2 * i + 1] = digits[b[i] & 15];
    }
}

/* Lower-case hex digit value, -1 otherwise (upper case is not allowed by W3C). */
static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}

static int unhex(const char *s, uint8_t *out, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        int hi = hexval(s[2 * i]), lo = hexval(s[2 * i + 1]);
        if (hi < 0 || lo < 0)
            return -1;
        out[i] = (uint8_t)(hi << 4 | lo);
    }
    return 0;
}

int onepath_trace_ctx_from_string(const char *s, onepath_trace_ctx_t *out)
{
    if (!s || !out)
        return ONEPATH_ERR_INVAL;
    /* strnlen bound: one character past the fixed part tells "exact" from "longer" */
    size_t len = strnlen(s, ONEPATH_TRACEPARENT_LEN + 1);
    if (len < ONEPATH_TRACEPARENT_LEN)
        return ONEPATH_ERR_INVAL;
    if (s[2] != '-' || s[35] != '-' || s[52] != '-')
        return ONEPATH_ERR_INVAL;
    onepath_trace_ctx_t c;
    if (unhex(s, &c.version, 1) || unhex(s + 3, c.trace_id, 16) || unhex(s + 36, c.span_id, 8) ||
        unhex(s + 53, &c.flags, 1))
        return ONEPATH_ERR_INVAL;
    if (c.version == 0xff)
        return ONEPATH_ERR_INVAL;
    /* version 00 is exactly 55 characters; a later version may append "-..." fields */
    if (len > ONEPATH_TRACEPARENT_LEN && (c.version == 0 || s[ONEPATH_TRACEPARENT_LEN] != '-'))
        return ONEPATH_ERR_INVAL;
    if (!onepath_trace_ctx_valid(&c))
        return ONEPATH_ERR_INVAL;
    *out = c;
    return ONEPATH_OK;
}

int onepath_trace_ctx_to_string(const onepath_trace_ctx_t *ctx, char *out)
{
    if (!out)
        return ONEPATH_ERR_INVAL;
    if (!onepath_trace_ctx_valid(ctx)) {
        out[0] = 0;
        return ONEPATH_ERR_INVAL;
    }
    tg_op_hex(&ctx->version, 1, out);
    out[2] = '-';
    tg_op_hex(ctx->trace_id, 16, out + 3);
    out[35] = '-';
    tg_op_hex(ctx->span_id, 8, out + 36);
    out[52] = '-';
    tg_op_hex(&ctx->flags, 1, out + 53);
    out[55] = 0;
    return ONEPATH_OK;
}
