/* frame.h: Perfetto IPC framing: [u32 little-endian length][IPCFrame bytes].
 *
 * Two pieces:
 *  - a streaming deserializer over a libevent evbuffer that accepts bytes
 *    split or joined arbitrarily, skips empty frames and reports oversize
 *    headers as a fatal error (the connection must be closed);
 *  - a light scanner that reads the few IPCFrame fields the gateway needs
 *    (request id, which `msg` member is set, service/method ids, has_more,
 *    success, drop_reply, the args/reply payload) without a full decode,
 *    leniently (the IPC host) or strictly (the gateway, which must never
 *    read a frame differently from the service it forwards it to).
 *
 * Threading: functions are reentrant; an evbuffer must only be used by one
 * thread at a time (libevent's rules). */
#ifndef TRACEGATE_FRAME_H
#define TRACEGATE_FRAME_H

#include <stddef.h>
#include <stdint.h>

struct evbuffer;

#define TG_FRAME_HEADER_SIZE 4u
/* Perfetto's limit: header plus body must fit in 128 KiB. */
#define TG_FRAME_MAX_DEFAULT 131072u

enum tg_frame_status {
    TG_FRAME_NEED_MORE = 0, /* no complete frame buffered yet */
    TG_FRAME_READY = 1,     /* a complete frame is at the head of the buffer */
    TG_FRAME_OVERSIZE = -1, /* the header announces more than max_frame: close the connection */
};

/* Looks at the head of `in`. Empty frames (length 0) are drained silently.
 * On TG_FRAME_READY, *body_len is the IPCFrame length; the frame (header and
 * body) is still in `in`. max_frame counts header + body. */
enum tg_frame_status tg_frame_peek(struct evbuffer *in, size_t max_frame, size_t *body_len);

/* After TG_FRAME_READY: returns a pointer to the contiguous body (linearising
 * only if the frame spans buffer chains). Valid until `in` is modified. */
const uint8_t *tg_frame_body(struct evbuffer *in, size_t body_len);

/* Drops the frame at the head (header and body). */
void tg_frame_drain(struct evbuffer *in, size_t body_len);

/* Moves the whole framed frame (header and body) to `out` without copying
 * the payload (evbuffer chain move). Returns 0 or -1. */
int tg_frame_move(struct evbuffer *in, struct evbuffer *out, size_t body_len);

/* Appends header + body to out. Returns 0 or -1. */
int tg_frame_append(struct evbuffer *out, const void *body, size_t body_len);

void tg_frame_put_header(uint8_t hdr[4], uint32_t body_len);

/* ---- a self-contained streaming deserializer (owns its buffer) ---- */
typedef struct tg_frame_reader tg_frame_reader;
tg_frame_reader *tg_frame_reader_new(size_t max_frame);
void tg_frame_reader_free(tg_frame_reader *r);
/* Appends bytes. Returns 0, or -1 on allocation failure. */
int tg_frame_reader_feed(tg_frame_reader *r, const void *data, size_t len);
/* Returns TG_FRAME_READY with a pointer to the next body (valid until the
 * next call), TG_FRAME_NEED_MORE, or TG_FRAME_OVERSIZE (sticky). */
enum tg_frame_status tg_frame_reader_next(tg_frame_reader *r, const uint8_t **body, size_t *len);

/* ---- scanner ---- */
/* Field numbers of the IPCFrame `msg` oneof. */
enum tg_ipc_msg {
    TG_MSG_NONE = 0,
    TG_MSG_BIND_SERVICE = 3,
    TG_MSG_BIND_SERVICE_REPLY = 4,
    TG_MSG_INVOKE_METHOD = 5,
    TG_MSG_INVOKE_METHOD_REPLY = 6,
    TG_MSG_REQUEST_ERROR = 7,
    TG_MSG_SET_PEER_IDENTITY = 8,
};

struct tg_frame_info {
    uint64_t request_id;
    enum tg_ipc_msg msg;         /* last `msg` member seen (oneof: last wins) */
    const uint8_t *msg_data;     /* bytes of that member */
    size_t msg_len;
    /* InvokeMethod */
    uint32_t service_id, method_id;
    int drop_reply;
    /* InvokeMethodReply */
    int success, has_more;
    /* args_proto (InvokeMethod) or reply_proto (InvokeMethodReply) */
    const uint8_t *payload;
    size_t payload_len;
    int has_payload;
    /* BindService.service_name */
    const uint8_t *service_name;
    size_t service_name_len;
};

/* Scans an IPCFrame body leniently, as the IPC host reads frames: the last
 * occurrence of a field wins, scalars are read from varints only, unknown
 * fields are skipped. Returns 0, or -1 if it is not valid protobuf (a frame
 * Perfetto's parser would drop). Pointers point into `body`. */
int tg_frame_scan(const uint8_t *body, size_t len, struct tg_frame_info *info);

/* ---- strict scanning (the gateway's bridge) ----
 * Perfetto's decoder reads a scalar field from a varint, fixed32 or fixed64
 * alike and keeps its last occurrence; a oneof's members are independent
 * fields to it (the host dispatches BindService before InvokeMethod). A
 * relay that decides on a frame (ACL by method, private request ids) must
 * read the frame exactly as the service will, so strict scanning refuses
 * every frame on which readers could disagree:
 *  TG_SCAN_STRICT: request_id, the `msg` members and, inside the member,
 *    BindService.service_name, InvokeMethod.{service_id, method_id,
 *    args_proto, drop_reply}, InvokeMethodReply.{success, has_more,
 *    reply_proto}, BindServiceReply.{success, service_id} and each
 *    MethodInfo.{id, name}, RequestError.error appear at most once and with
 *    their declared wire type; at most one `msg` member is set; malformed
 *    member bytes are refused (Perfetto would half-parse them).
 *  TG_SCAN_CLOSED (implies STRICT; client -> service frames): unknown
 *    fields in IPCFrame, BindService and InvokeMethod are refused, so
 *    nothing the gateway did not read is forwarded.
 * Unknown fields in replies are allowed (a newer service may add some).
 * On a frame strict scanning accepts, the fields read are the ones Perfetto
 * reads (tests/fuzz/fuzz_frame_scan_diff.c checks this against a reference
 * decoder). */
#define TG_SCAN_STRICT 1u
#define TG_SCAN_CLOSED 2u

enum tg_frame_scan_error {
    TG_SCAN_MALFORMED = -1,     /* not valid protobuf */
    TG_SCAN_AMBIGUOUS = -2,     /* a field repeats, or two `msg` members are set */
    TG_SCAN_WIRE_TYPE = -3,     /* a field with a wire type other than its declared one */
    TG_SCAN_UNKNOWN_FIELD = -4, /* TG_SCAN_CLOSED: a field the envelope does not declare */
};

/* tg_frame_scan with `flags` (0 = lenient). Returns 0 or a tg_frame_scan_error;
 * on error `why` (may be NULL) gets a one-line reason naming the field (no
 * bytes of the frame are copied into it). */
int tg_frame_scan_ex(const uint8_t *body, size_t len, struct tg_frame_info *info, unsigned flags, char *why,
                     size_t whylen);

/* tg_frame_scan_ex on a frame of `len` bytes of which only the first `avail` are at hand (`prefix`;
 * e.g. copied out of an evbuffer, so a large frame's body is never pulled up). Returns 0 only
 * when those bytes decide: `info` is then exactly what tg_frame_scan_ex on the whole frame gives
 * (same checks, same flags), except that msg_data and payload are NULL when they reach past the
 * prefix (their lengths are kept). Returns TG_SCAN_INCOMPLETE when a byte past the prefix is
 * needed, and also for a frame the full scan would refuse: scan the whole frame then, to get the
 * verdict and its reason. Typical frames (the payload last, as every encoder writes it) are
 * decided by their first few dozen bytes. Never reads past prefix + avail. */
#define TG_SCAN_INCOMPLETE 1
int tg_frame_scan_prefix(const uint8_t *prefix, size_t avail, size_t len, struct tg_frame_info *info,
                         unsigned flags);

#endif
