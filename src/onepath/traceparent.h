/* traceparent.h: the binary W3C traceparent (26 bytes: version, trace id, span id, flags) as it
 * travels in the TLV. Pure functions. */
#ifndef TG_ONEPATH_TRACEPARENT_H
#define TG_ONEPATH_TRACEPARENT_H

#include <stdint.h>

#include "tracegate/onepath.h"

#define TG_OP_TRACEPARENT_BIN 26

void tg_op_ctx_pack(const onepath_trace_ctx_t *ctx, uint8_t out[TG_OP_TRACEPARENT_BIN]);
void tg_op_ctx_unpack(const uint8_t in[TG_OP_TRACEPARENT_BIN], onepath_trace_ctx_t *ctx);
/* Lower-case hex of n bytes into out (2n chars, no NUL). */
void tg_op_hex(const uint8_t *b, size_t n, char *out);

#endif
