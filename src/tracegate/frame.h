/* frame.h: Perfetto IPC framing: [u32 little-endian length][IPCFrame bytes].
 *
 * Two pieces:
 *  - a streaming deserializer over a libevent evbuffer that accepts bytes
 *    split or joined arbitrarily, skips empty frames and reports oversize
 *    headers as a fatal error (the connection must be closed);
 *  - a light scanner that reads the few IPCFrame fields the gateway needs
 *    (request id, which `msg` member is set, service/method ids, has_more,
 *    success, drop_reply, the args/reply payload) without a full decode.
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

/* Scans an IPCFrame body. Returns 0, or -1 if it is not valid protobuf (a
 * frame Perfetto's parser would drop). Pointers point into `body`. */
int tg_frame_scan(const uint8_t *body, size_t len, struct tg_frame_info *info);

#endif
