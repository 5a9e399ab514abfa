/* ws_filter.c: a WebSocket endpoint as a libevent filter bufferevent, the framing core both sides
 * share: frames in (control frames answered, data passed up as it arrives), frames out, failures
 * (see ws_filter.h; the client's handshake is in ws_filter_client.c, the server's socket and end in
 * ws_filter_server.c). */
#include <errno.h>
#include <openssl/rand.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "net/atomic_max.h"
#include "net/ws_filter_int.h"
#include "net/ws_wire.h"
#include "tracegate/log.h"

struct tg_wsf_server_counters tg_wsf_server;

/* ------------------------------------------------------------ helpers */

void tg_wsf_kick_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct wsf *f = arg;
    f->kick_pending = 0;
    /* BEV_FLUSH: libevent calls a filter in BEV_NORMAL only when there is data above to send, and
     * a PONG or a close answer may be all there is */
    bufferevent_flush(f->bev, EV_WRITE, BEV_FLUSH);
    bufferevent_decref(f->bev); /* may be the last reference: the filter then goes (later, in a finalizer) */
}

/* Asks for a flush from the loop. Only while the filter is alive (called from its own processing,
 * or with its socket's callbacks still set): the reference taken here keeps a filter its owner
 * frees meanwhile alive until the flush ran. */
void tg_wsf_kick(struct wsf *f)
{
    if (f->kick_pending)
        return;
    f->kick_pending = 1;
    bufferevent_incref(f->bev);
    event_active(f->kick, EV_TIMEOUT, 1);
}

/* The connection cannot go on: logged, everything after dropped, and the bufferevent above gets
 * BEV_EVENT_ERROR (libevent reports nothing for a filter's BEV_ERROR; a deferred event callback
 * sees the errno set here: EPROTO). A server's close frame will carry code and why. Returns -1. */
static int fail_code(struct wsf *f, unsigned code, const char *why)
{
    if (f->state == S_FAILED)
        return -1;
    if (f->server) {
        /* the client's fault: not an error of ours */
        tg_info(TG_WSF_SERVER_LOG, "%s: %s (closing with %u)", f->what, why, code);
        f->close_code = code;
        snprintf(f->close_why, sizeof f->close_why, "%s", why);
    } else if (f->state == S_HANDSHAKE) {
        tg_error(TG_WSF_LOG, "cannot open %s: %s", f->what, why);
    } else {
        tg_error(TG_WSF_LOG, "%s: %s", f->what, why);
    }
    f->state = S_FAILED;
    errno = EPROTO;
    bufferevent_trigger_event(f->bev, BEV_EVENT_ERROR, 0);
    return -1;
}

int tg_wsf_fail(struct wsf *f, const char *why) { return fail_code(f, CLOSE_PROTOCOL, why); }

/* XOR n bytes at p with a 4-byte key, the first byte being at offset `phase` of the key. */
static void apply_mask(uint8_t *p, size_t n, const uint8_t key[4], unsigned phase)
{
    uint8_t k[4];
    for (unsigned j = 0; j < 4; j++)
        k[j] = key[(phase + j) & 3];
    uint32_t m32;
    memcpy(&m32, k, 4);
    uint64_t m64 = (uint64_t)m32 << 32 | m32;
    size_t i = 0;
    /* whole words where the key lines up, then the rest */
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        w ^= m64;
        memcpy(p + i, &w, 8);
    }
    for (; i < n; i++)
        p[i] ^= k[i & 3];
}

/* Appends one frame with FIN set carrying n bytes taken from src (or data, when src is NULL): a
 * client's header, mask key and masked copy; a server's header and src's chains moved. */
int tg_wsf_put_frame(const struct wsf *f, struct evbuffer *dst, int opcode, struct evbuffer *src, const void *data,
                     size_t n)
{
    uint8_t h[TG_WS_FRAME_HEADER_MAX + 4];
    size_t hl = tg_ws_frame_header(h, (unsigned)opcode, !f->server, n);
    if (f->server) {
        if (evbuffer_add(dst, h, hl) != 0)
            return -1;
        if (src)
            return evbuffer_remove_buffer(src, dst, n) == (int)n ? 0 : -1;
        return n ? evbuffer_add(dst, data, n) : 0;
    }
    uint8_t mask[4];
    if (RAND_bytes(mask, sizeof mask) != 1)
        return -1;
    memcpy(h + hl, mask, 4);
    hl += 4;
    struct evbuffer_iovec v;
    if (evbuffer_add(dst, h, hl) != 0 || evbuffer_reserve_space(dst, (ev_ssize_t)(n ? n : 1), &v, 1) < 1)
        return -1;
    uint8_t *p = v.iov_base;
    if (src) {
        if (evbuffer_remove(src, p, n) != (int)n)
            return -1;
    } else if (n) {
        memcpy(p, data, n);
    }
    apply_mask(p, n, mask, 0);
    v.iov_len = n;
    return evbuffer_commit_space(dst, &v, 1);
}

/* ------------------------------------------------------------ receiving */

/* A control frame of n payload bytes (all at hand). Returns 0 or -1. */
static int on_control(struct wsf *f, int opcode, const uint8_t *p, size_t n)
{
    if (opcode == OP_PING) {
        /* one PONG waits at a time, for the latest PING (RFC 6455 5.5.3 allows answering only
         * that one): a peer that sends PINGs without reading our output cannot make us keep a
         * PONG for each, and one that reads gets its answer ahead of our next message */
        if (!f->close_sent) {
            memcpy(f->pong, p, n);
            f->pong_len = n;
            f->pong_due = 1;
            tg_wsf_kick(f);
        }
        return 0;
    }
    if (opcode == OP_PONG)
        return 0;
    /* close: answer with the same code (none if it gave none), then wait for the end of stream */
    if (n == 1)
        return tg_wsf_fail(f, "a close frame with a one-byte body");
    if (n >= 2) {
        unsigned code = (unsigned)p[0] << 8 | p[1];
        if (code != 1000)
            tg_info(f->server ? TG_WSF_SERVER_LOG : TG_WSF_LOG, "%s: the %s closed the WebSocket (%u%s%.*s)", f->what,
                    f->server ? "client" : "server", code, n > 2 ? ": " : "", (int)(n - 2), (const char *)p + 2);
    }
    if (!f->close_sent) {
        f->close_sent = 1;
        if (tg_wsf_put_frame(f, f->ctl_out, OP_CLOSE, NULL, p, n >= 2 ? 2 : 0) != 0)
            return tg_wsf_fail(f, "out of memory");
        tg_wsf_kick(f);
    }
    f->state = S_CLOSED;
    /* a server ends the TCP stream after the close handshake (RFC 6455 7.1.1): the bufferevent
     * above sees its peer's end, and freeing it sends our close answer and closes the socket */
    if (f->server)
        bufferevent_trigger_event(f->bev, BEV_EVENT_EOF, 0);
    return 0;
}

/* The current data message ended. */
static void message_done(struct wsf *f)
{
    f->in_message = 0;
    f->msg_bytes = 0;
    if (f->server)
        atomic_fetch_add_explicit(&tg_wsf_server.in_messages, 1, memory_order_relaxed);
}

/* A frame header at the front of src: 1 handled (header removed; a control frame is handled
 * whole), 0 not all there yet, -1 failure. */
static int read_header(struct wsf *f, struct evbuffer *src)
{
    size_t have = evbuffer_get_length(src);
    uint8_t h[14 + MAX_CONTROL];
    if (have < 2)
        return 0;
    evbuffer_copyout(src, h, 2);
    int fin = h[0] & 0x80, opcode = h[0] & 0x0f;
    if (h[0] & 0x70)
        return tg_wsf_fail(f, "a frame with reserved bits set (no extension was agreed)");
    int masked = (h[1] & 0x80) != 0;
    if (masked != f->server) /* RFC 6455 5.1: clients mask every frame, servers none */
        return tg_wsf_fail(f, f->server ? "an unmasked frame from the client" : "a masked frame from the server");
    uint64_t len = h[1] & 0x7f;
    size_t hl = 2;
    if (len == 126)
        hl = 4;
    else if (len == 127)
        hl = 10;
    size_t kl = masked ? 4 : 0; /* the key follows the length */
    if (have < hl + kl)
        return 0;
    evbuffer_copyout(src, h, hl + kl);
    if (hl == 4) {
        len = (uint64_t)h[2] << 8 | h[3];
    } else if (hl == 10) {
        len = 0;
        for (int i = 2; i < 10; i++)
            len = len << 8 | h[i];
        if (len >> 63)
            return tg_wsf_fail(f, "a frame length with its top bit set");
    }
    if (kl) {
        memcpy(f->mask, h + hl, 4);
        f->mask_pos = 0;
    }
    if (opcode & 0x8) { /* control */
        if (opcode != OP_CLOSE && opcode != OP_PING && opcode != OP_PONG)
            return tg_wsf_fail(f, "a frame with an unknown opcode");
        if (!fin || len > MAX_CONTROL)
            return tg_wsf_fail(f, "a fragmented or oversized control frame");
        if (have < hl + kl + len)
            return 0;
        evbuffer_drain(src, hl + kl);
        evbuffer_remove(src, h, (size_t)len);
        if (kl)
            apply_mask(h, (size_t)len, f->mask, 0);
        return on_control(f, opcode, h, (size_t)len) == 0 ? 1 : -1;
    }
    if (opcode == OP_TEXT)
        return fail_code(f, CLOSE_UNACCEPTABLE,
                         f->server ? "text messages are not supported: send binary Perfetto IPC frames"
                                   : "a text message (tracegate speaks binary)");
    if (opcode != OP_BINARY && opcode != OP_CONT)
        return tg_wsf_fail(f, "a frame with an unknown opcode");
    if ((opcode == OP_CONT) != (f->in_message != 0))
        return tg_wsf_fail(f, opcode == OP_CONT ? "a continuation with no message" : "a new message inside another");
    if (len > f->max_message - f->msg_bytes) {
        char why[96];
        snprintf(why, sizeof why, f->server ? "message too large (over %zu bytes)" : "a message over %zu bytes",
                 f->max_message);
        return fail_code(f, CLOSE_TOO_BIG, why);
    }
    evbuffer_drain(src, hl + kl);
    f->in_message = 1;
    f->msg_bytes += len;
    f->left = len;
    f->fin = fin != 0;
    if (!len && fin)
        message_done(f);
    return 1;
}

/* Moves n payload bytes of the current client frame from src to dst, unmasked (one copy). */
static int unmask_move(struct wsf *f, struct evbuffer *src, struct evbuffer *dst, size_t n)
{
    struct evbuffer_iovec out;
    if (evbuffer_reserve_space(dst, (ev_ssize_t)n, &out, 1) < 1)
        return -1;
    if (evbuffer_remove(src, out.iov_base, n) != (int)n)
        return -1;
    apply_mask(out.iov_base, n, f->mask, f->mask_pos);
    f->mask_pos = (f->mask_pos + (unsigned)n) & 3;
    out.iov_len = n;
    return evbuffer_commit_space(dst, &out, 1);
}

enum bufferevent_filter_result tg_wsf_in(struct evbuffer *src, struct evbuffer *dst, ev_ssize_t limit,
                                         enum bufferevent_flush_mode mode, void *arg)
{
    (void)mode;
    struct wsf *f = arg;
    if (f->state == S_FAILED) {
        evbuffer_drain(src, evbuffer_get_length(src));
        return BEV_NEED_MORE;
    }
    if (f->state == S_HANDSHAKE) {
        int r = tg_wsf_handshake(f, src);
        if (r < 0)
            return BEV_ERROR;
        if (r == 0)
            return BEV_NEED_MORE;
        f->state = S_OPEN;
        tg_debug(TG_WSF_LOG, "connected to %s", f->what);
        tg_wsf_kick(f); /* what was written before the answer may go now */
    }
    size_t moved = 0;
    while (f->state == S_OPEN && (limit < 0 || moved < (size_t)limit)) {
        size_t have = evbuffer_get_length(src);
        if (!f->left) {
            int r = read_header(f, src);
            if (r < 0) /* what came before the bad frame is still delivered */
                return moved ? BEV_OK : BEV_ERROR;
            if (r == 0)
                break;
            continue;
        }
        if (!have)
            break;
        size_t n = have < f->left ? have : (size_t)f->left;
        if (limit >= 0 && n > (size_t)limit - moved)
            n = (size_t)limit - moved;
        if (f->server ? unmask_move(f, src, dst, n) != 0 : evbuffer_remove_buffer(src, dst, n) != (int)n) {
            tg_wsf_fail(f, "out of memory");
            return BEV_ERROR;
        }
        moved += n;
        f->left -= n;
        if (!f->left && f->fin)
            message_done(f);
    }
    if (f->state == S_CLOSED)
        evbuffer_drain(src, evbuffer_get_length(src)); /* nothing after a close counts */
    return moved ? BEV_OK : BEV_NEED_MORE;
}

/* ------------------------------------------------------------ sending */

enum bufferevent_filter_result tg_wsf_out(struct evbuffer *src, struct evbuffer *dst, ev_ssize_t limit,
                                          enum bufferevent_flush_mode mode, void *arg)
{
    struct wsf *f = arg;
    if (f->state == S_HANDSHAKE)
        return BEV_NEED_MORE; /* waits for the server's answer */
    if (f->state == S_FAILED) {
        evbuffer_drain(src, evbuffer_get_length(src));
        return BEV_NEED_MORE;
    }
    size_t wrote = 0;
    /* the PONG goes ahead of our next message once there is room for it under us: a peer that
     * PINGs without reading cannot grow our output by a PONG a PING */
    if (f->pong_due && !f->close_sent && evbuffer_get_length(dst) < (f->server ? STAGE_HIGH : CLIENT_PONG_ROOM)) {
        if (tg_wsf_put_frame(f, dst, OP_PONG, NULL, f->pong, f->pong_len) != 0) {
            tg_wsf_fail(f, "out of memory");
            return BEV_ERROR;
        }
        wrote += 2 + f->pong_len;
        f->pong_due = 0;
    }
    if (evbuffer_get_length(f->ctl_out)) {
        wrote += evbuffer_get_length(f->ctl_out);
        evbuffer_add_buffer(dst, f->ctl_out);
    }
    if (f->close_sent) {
        evbuffer_drain(src, evbuffer_get_length(src)); /* nothing after our close frame */
        return wrote ? BEV_OK : BEV_NEED_MORE;
    }
    unsigned long long messages = 0, bytes = 0;
    while (evbuffer_get_length(src) && (limit < 0 || wrote < (size_t)limit)) {
        size_t n = evbuffer_get_length(src);
        if (n > f->out_message)
            n = f->out_message;
        if (tg_wsf_put_frame(f, dst, OP_BINARY, src, NULL, n) != 0) {
            tg_wsf_fail(f, "out of memory");
            return BEV_ERROR;
        }
        wrote += n;
        messages++;
        bytes += n;
    }
    if (f->server) {
        atomic_fetch_add_explicit(&tg_wsf_server.out_messages, messages, memory_order_relaxed);
        atomic_fetch_add_explicit(&tg_wsf_server.out_bytes, bytes, memory_order_relaxed);
        tg_atomic_size_max(&tg_wsf_server.staged_peak, evbuffer_get_length(dst));
        /* the share is full: what comes next waits above until the socket takes some (counted
         * once per filling) */
        int full = evbuffer_get_length(dst) >= STAGE_HIGH;
        if (full && !f->out_full)
            atomic_fetch_add_explicit(&tg_wsf_server.out_full, 1, memory_order_relaxed);
        f->out_full = full;
    }
    if (mode == BEV_FINISHED && !evbuffer_get_length(src)) {
        static const uint8_t normal[2] = {1000 >> 8, 1000 & 0xff};
        f->close_sent = 1;
        if (tg_wsf_put_frame(f, dst, OP_CLOSE, NULL, normal, 2) != 0) {
            tg_wsf_fail(f, "out of memory");
            return BEV_ERROR;
        }
        wrote += 2;
    }
    return wrote ? BEV_OK : BEV_NEED_MORE;
}

/* ------------------------------------------------------------ the filter */

void tg_wsf_free(void *arg)
{
    struct wsf *f = arg;
    if (f->under)
        tg_wsf_server_end(f);
    if (f->kick)
        event_free(f->kick);
    if (f->ctl_out)
        evbuffer_free(f->ctl_out);
    free(f);
}
