/* ws_wire.h: what tracegate's WebSocket server and client agree on: the
 * subprotocol name, how a token rides as a second subprotocol, the size
 * limits libwebsockets puts on the Sec-WebSocket-Protocol header, and the
 * encoding of a frame header. Constants and one pure function; no threading
 * concerns. */
#ifndef TRACEGATE_NET_WS_WIRE_H
#define TRACEGATE_NET_WS_WIRE_H

#include <stddef.h>
#include <stdint.h>

#define TG_WS_SUBPROTOCOL "tracegate"
#define TG_WS_TOKEN_PREFIX "tracegate.token."
#define TG_WS_MAX_PROTOCOL_HEADER 127
#define TG_WS_MAX_PROTOCOL_TOKEN 96
#define TG_WS_MAX_TOKEN 512
/* Most bytes tracegate's client sends per message: well under what a tracegated accepts by
 * default (--ws-max-message, 1 MiB). */
#define TG_WS_CLIENT_MSG_MAX (64u * 1024u)

/* Most bytes a frame header takes before its mask key (RFC 6455 5.2). */
#define TG_WS_FRAME_HEADER_MAX 10

/* Writes the header of a final frame of `opcode` carrying n payload bytes into h (at least
 * TG_WS_FRAME_HEADER_MAX bytes): the FIN bit and opcode, then the length in the shortest form,
 * with the mask bit set when `masked` (the caller appends the 4-byte key). Returns its length. */
static inline size_t tg_ws_frame_header(uint8_t *h, unsigned opcode, int masked, uint64_t n)
{
    size_t hl = 0;
    uint8_t m = masked ? 0x80 : 0;
    h[hl++] = (uint8_t)(0x80 | opcode);
    if (n < 126) {
        h[hl++] = (uint8_t)(m | n);
    } else if (n <= 0xffff) {
        h[hl++] = m | 126;
        h[hl++] = (uint8_t)(n >> 8);
        h[hl++] = (uint8_t)n;
    } else {
        h[hl++] = m | 127;
        for (int i = 7; i >= 0; i--)
            h[hl++] = (uint8_t)(n >> (8 * i));
    }
    return hl;
}

#endif
