/* frame_reader.c: streaming [u32 length][IPCFrame] deserializer on evbuffers (see tracegate/frame.h). */
#include "tracegate/frame.h"

#include <event2/buffer.h>
#include <stdlib.h>

static uint32_t read_le32(const uint8_t b[4])
{
    return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
}

void tg_frame_put_header(uint8_t hdr[4], uint32_t body_len)
{
    hdr[0] = (uint8_t)body_len;
    hdr[1] = (uint8_t)(body_len >> 8);
    hdr[2] = (uint8_t)(body_len >> 16);
    hdr[3] = (uint8_t)(body_len >> 24);
}

enum tg_frame_status tg_frame_peek(struct evbuffer *in, size_t max_frame, size_t *body_len)
{
    for (;;) {
        size_t avail = evbuffer_get_length(in);
        if (avail < TG_FRAME_HEADER_SIZE)
            return TG_FRAME_NEED_MORE;
        uint8_t hdr[4];
        if (evbuffer_copyout(in, hdr, sizeof hdr) != (ev_ssize_t)sizeof hdr)
            return TG_FRAME_NEED_MORE;
        uint32_t len = read_le32(hdr);
        if (len == 0) { /* empty frames carry nothing: skip them */
            evbuffer_drain(in, TG_FRAME_HEADER_SIZE);
            continue;
        }
        if ((uint64_t)len + TG_FRAME_HEADER_SIZE > max_frame)
            return TG_FRAME_OVERSIZE;
        if (avail - TG_FRAME_HEADER_SIZE < len)
            return TG_FRAME_NEED_MORE;
        *body_len = len;
        return TG_FRAME_READY;
    }
}

const uint8_t *tg_frame_body(struct evbuffer *in, size_t body_len)
{
    const uint8_t *p = evbuffer_pullup(in, (ev_ssize_t)(body_len + TG_FRAME_HEADER_SIZE));
    return p ? p + TG_FRAME_HEADER_SIZE : NULL;
}

void tg_frame_drain(struct evbuffer *in, size_t body_len)
{
    evbuffer_drain(in, body_len + TG_FRAME_HEADER_SIZE);
}

int tg_frame_move(struct evbuffer *in, struct evbuffer *out, size_t body_len)
{
    size_t total = body_len + TG_FRAME_HEADER_SIZE;
    return evbuffer_remove_buffer(in, out, total) == (int)total ? 0 : -1;
}

int tg_frame_append(struct evbuffer *out, const void *body, size_t body_len)
{
    uint8_t hdr[4];
    if (body_len > UINT32_MAX)
        return -1;
    tg_frame_put_header(hdr, (uint32_t)body_len);
    if (evbuffer_add(out, hdr, sizeof hdr) != 0)
        return -1;
    return body_len ? evbuffer_add(out, body, body_len) : 0;
}

struct tg_frame_reader {
    struct evbuffer *buf;
    size_t max_frame;
    size_t pending; /* body length of the frame handed out last, drained on the next call */
    int has_pending;
    int broken;
};

tg_frame_reader *tg_frame_reader_new(size_t max_frame)
{
    tg_frame_reader *r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    r->buf = evbuffer_new();
    if (!r->buf) {
        free(r);
        return NULL;
    }
    r->max_frame = max_frame ? max_frame : TG_FRAME_MAX_DEFAULT;
    return r;
}

void tg_frame_reader_free(tg_frame_reader *r)
{
    if (!r)
        return;
    evbuffer_free(r->buf);
    free(r);
}

int tg_frame_reader_feed(tg_frame_reader *r, const void *data, size_t len)
{
    return len ? evbuffer_add(r->buf, data, len) : 0;
}

enum tg_frame_status tg_frame_reader_next(tg_frame_reader *r, const uint8_t **body, size_t *len)
{
    if (r->broken)
        return TG_FRAME_OVERSIZE;
    if (r->has_pending) {
        tg_frame_drain(r->buf, r->pending);
        r->has_pending = 0;
    }
    size_t n;
    enum tg_frame_status st = tg_frame_peek(r->buf, r->max_frame, &n);
    if (st == TG_FRAME_OVERSIZE) {
        r->broken = 1;
        return st;
    }
    if (st != TG_FRAME_READY)
        return st;
    *body = tg_frame_body(r->buf, n);
    if (!*body)
        return TG_FRAME_NEED_MORE;
    *len = n;
    r->pending = n;
    r->has_pending = 1;
    return TG_FRAME_READY;
}
