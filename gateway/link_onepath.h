/* link_onepath.h: OnePath spans and attachments for what a gateway link carries
 * (docs/onepath.md, "In tracegated"). With ONEPATH_TRACE_ENABLE=1, every IPC frame a channel sends
 * is a span on the sending node (CLIENT for a request from the side that opened the channel,
 * PRODUCER for a reply or stream item from the other side) and a span on the receiving node
 * (SERVER / CONSUMER) whose parent is the sender's, carried in an ATTACH record right before the
 * IPC record (never inside the IPC frame); its send time feeds onepath.e2e.latency. A channel's
 * spans hang under the span that opened it, whose parent is the client's own `traceparent` (a
 * WebSocket header or ?traceparent=) when it gave one; the channel's CONNECT carries it as the
 * W3C `traceparent` header. With ONEPATH_METRICS_ENABLE=1 alone, the ATTACH record carries only
 * the send time (the receiver's onepath.* metrics) and no span is made. Disabled, each hook is a
 * branch on two flags.
 *
 * Threading: the gateway's event loop thread (spans are synchronous: started and ended inside one
 * call, so the library's per-thread span stack is left as found). */
#ifndef TRACEGATE_GATEWAY_LINK_ONEPATH_H
#define TRACEGATE_GATEWAY_LINK_ONEPATH_H

#include <stddef.h>
#include <stdint.h>

#include "tracegate/onepath.h"

struct link_channel;

/* Per channel (embedded in struct link_channel). */
struct link_op {
    int has_ctx;
    onepath_trace_ctx_t ctx;      /* parent of the channel's frame spans */
    uint8_t att[ONEPATH_ATTACH_OVERHEAD + 8];
    size_t att_len;               /* an ATTACH record waiting for its IPC record */
};

/* Whether the frame hooks do anything (tracing or metrics on). */
int tg_link_op_on(void);

/* The channel opens: a span "link.channel.open" (CLIENT on the opening node, SERVER on the
 * accepting node), parent = traceparent ("" or NULL: none, a new trace). Writes the channel's
 * context as a W3C string into out (56 bytes) for the CONNECT header; out = "" when off. */
void tg_link_op_channel_open(struct link_channel *ch, const char *traceparent, char out[56]);

/* Before an IPC frame is queued to the peer (frame: its first `have` bytes, 4-byte header
 * included; len: the whole frame): runs the send span and writes the ATTACH record for it into rec
 * (a record header plus the TLV). Returns the record's size (0: nothing to attach). rec must hold
 * TG_LINK_REC_HDR_MAX + ONEPATH_ATTACH_OVERHEAD bytes. */
size_t tg_link_op_send(struct link_channel *ch, const uint8_t *frame, size_t have, size_t len, uint8_t *rec);

/* An ATTACH record arrived: kept for the next IPC record. */
void tg_link_op_attach(struct link_channel *ch, const uint8_t *att, size_t len);

/* An IPC record arrived (frame: its first bytes, at least the 4-byte header; len: whole frame):
 * the receive span, under the sender's span when an ATTACH came before it. */
void tg_link_op_recv(struct link_channel *ch, const uint8_t *frame, size_t have, size_t len);

#endif
