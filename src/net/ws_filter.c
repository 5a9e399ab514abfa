/* ws_filter.c: a WebSocket endpoint as a libevent filter bufferevent: the client's upgrade
 * handshake, framing and masking both ways, the server's end of the stream (see ws_filter.h). */
#include "net/ws_filter.h"

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <errno.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "net/atomic_max.h"
#include "net/bulk_read.h"
#include "net/write_through.h"
#include "net/ws_wire.h"
#include "tracegate/log.h"

#define LOG "ws-client"
#define SERVER_LOG "ws"
/* server side: the socket bufferevent's share (see ws_filter.h) */
#define STAGE_HIGH TG_WS_SERVER_STAGE_HIGH
#define STAGE_LOW (STAGE_HIGH / 2)
#define SOCKET_IO_MAX (256u << 10)
#define CLOSE_NORMAL 1000
#define CLOSE_PROTOCOL 1002
#define CLOSE_UNACCEPTABLE 1003
#define CLOSE_TOO_BIG 1009
#define MAX_HEAD 16384u     /* the server's upgrade answer, headers included */
#define MAX_CONTROL 125u    /* payload of a control frame (RFC 6455 5.5) */
#define CLIENT_PONG_ROOM 65536u /* a client's PONG waits while this much of its output does */
#define WS_GUID "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

enum { OP_CONT = 0x0, OP_TEXT = 0x1, OP_BINARY = 0x2, OP_CLOSE = 0x8, OP_PING = 0x9, OP_PONG = 0xA };
enum { S_HANDSHAKE, S_OPEN, S_CLOSED, S_FAILED };

struct wsf {
    struct bufferevent *bev; /* the filter */
    struct event *kick;      /* flushes the output once the input side made something to send */
    int kick_pending;        /* kick is active and holds a reference on bev */
    int state;
    char accept[TG_WS_ACCEPT_LEN + 1];
    char proto[64];
    char what[640];
    size_t max_message, out_message;
    /* receiving */
    uint64_t left;       /* payload bytes of the current data frame still to come */
    int in_message;      /* a data message is open (continuations may follow) */
    uint64_t msg_bytes;  /* bytes of it so far */
    int fin;             /* the current data frame ends its message */
    /* control frames to send ahead of data: the close answer, and the PONG to the latest PING */
    struct evbuffer *ctl_out;
    int close_sent;
    uint8_t pong[MAX_CONTROL];
    size_t pong_len;
    int pong_due;
    /* server side */
    int server;
    uint8_t mask[4];   /* the current client frame's key */
    unsigned mask_pos; /* where the next payload byte falls in it (mod 4) */
    unsigned close_code; /* what our close frame says at the end (0: 1000) */
    char close_why[96];
    struct bufferevent *under; /* the socket bufferevent, ours to free */
    struct tg_write_through *wt;
    int out_full;              /* the socket's share is full (counted once per filling) */
    struct evbuffer_cb_entry *staged_cb; /* kicks a waiting PONG out as the socket drains */
};

static struct {
    atomic_ullong open, out_messages, out_bytes, out_full, in_messages;
    atomic_size_t staged_peak;
} g_server;

void tg_ws_server_stats(struct tg_ws_server_stats *out)
{
    out->open = atomic_load(&g_server.open);
    out->out_messages = atomic_load(&g_server.out_messages);
    out->out_bytes = atomic_load(&g_server.out_bytes);
    out->out_full = atomic_load(&g_server.out_full);
    out->staged_peak = atomic_load(&g_server.staged_peak);
    out->in_messages = atomic_load(&g_server.in_messages);
}

void tg_ws_server_stats_reset_peaks(void) { atomic_store(&g_server.staged_peak, 0); }

/* ------------------------------------------------------------ keys */

int tg_ws_client_key(char key[TG_WS_KEY_LEN + 1])
{
    unsigned char raw[16];
    if (RAND_bytes(raw, sizeof raw) != 1)
        return -1;
    EVP_EncodeBlock((unsigned char *)key, raw, sizeof raw);
    return 0;
}

void tg_ws_accept_for(const char *key, char accept[TG_WS_ACCEPT_LEN + 1])
{
    char in[TG_WS_KEY_LEN + sizeof WS_GUID];
    int n = snprintf(in, sizeof in, "%s%s", key, WS_GUID);
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int mdlen = 0;
    if (n < 0 || (size_t)n >= sizeof in || EVP_Digest(in, (size_t)n, md, &mdlen, EVP_sha1(), NULL) != 1 || mdlen != 20) {
        accept[0] = '\0'; /* matches no answer */
        return;
    }
    EVP_EncodeBlock((unsigned char *)accept, md, 20);
}

/* ------------------------------------------------------------ helpers */

static void kick_cb(evutil_socket_t fd, short what, void *arg)
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
static void kick(struct wsf *f)
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
        tg_info(SERVER_LOG, "%s: %s (closing with %u)", f->what, why, code);
        f->close_code = code;
        snprintf(f->close_why, sizeof f->close_why, "%s", why);
    } else if (f->state == S_HANDSHAKE) {
        tg_error(LOG, "cannot open %s: %s", f->what, why);
    } else {
        tg_error(LOG, "%s: %s", f->what, why);
    }
    f->state = S_FAILED;
    errno = EPROTO;
    bufferevent_trigger_event(f->bev, BEV_EVENT_ERROR, 0);
    return -1;
}

static int fail(struct wsf *f, const char *why) { return fail_code(f, CLOSE_PROTOCOL, why); }

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
static int put_frame(const struct wsf *f, struct evbuffer *dst, int opcode, struct evbuffer *src, const void *data,
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

/* ------------------------------------------------------------ the handshake */

static void trim(char **s, char **e)
{
    while (*s < *e && (**s == ' ' || **s == '\t'))
        (*s)++;
    while (*e > *s && ((*e)[-1] == ' ' || (*e)[-1] == '\t'))
        (*e)--;
}

/* Does a comma-separated header value list `token` (case-insensitive)? */
static int has_token(const char *v, const char *token)
{
    size_t tl = strlen(token);
    for (const char *p = v; *p;) {
        const char *c = strchr(p, ',');
        const char *e = c ? c : p + strlen(p);
        char *s = (char *)p, *t = (char *)e;
        trim(&s, &t);
        if ((size_t)(t - s) == tl && !strncasecmp(s, token, tl))
            return 1;
        p = c ? c + 1 : e;
    }
    return 0;
}

/* The server's answer to the upgrade: 1 when it checked out (removed from src), 0 while it is
 * incomplete, -1 on failure (logged). */
static int handshake(struct wsf *f, struct evbuffer *src)
{
    struct evbuffer_ptr end = evbuffer_search(src, "\r\n\r\n", 4, NULL);
    if (end.pos < 0) {
        if (evbuffer_get_length(src) > MAX_HEAD)
            return fail(f, "the server's answer to the upgrade is too long");
        return 0;
    }
    size_t n = (size_t)end.pos + 4;
    if (n > MAX_HEAD)
        return fail(f, "the server's answer to the upgrade is too long");
    char *head = malloc(n + 1);
    if (!head || evbuffer_remove(src, head, n) != (int)n) {
        free(head);
        return fail(f, "out of memory");
    }
    head[n] = '\0';
    int rc = -1;
    if (memchr(head, '\0', n)) { /* the lines below are C strings */
        fail(f, "the server's answer to the upgrade holds a NUL byte");
        goto out;
    }
    char *line_end = strstr(head, "\r\n");
    int status = 0;
    char reason[80] = "";
    *line_end = '\0';
    if (sscanf(head, "HTTP/1.%*1[01] %3d %79[^\r\n]", &status, reason) < 1) {
        fail(f, "the server did not answer with HTTP");
        goto out;
    }
    if (status != 101) {
        char why[128];
        snprintf(why, sizeof why, "HTTP %d%s%s", status, reason[0] ? " " : "", reason);
        fail(f, why);
        goto out;
    }
    int upgrade = 0, connection = 0, accept_ok = 0, proto_ok = 0, extensions = 0;
    for (char *p = line_end + 2; *p && !(p[0] == '\r' && p[1] == '\n');) {
        char *eol = strstr(p, "\r\n");
        if (!eol)
            break;
        *eol = '\0';
        char *colon = strchr(p, ':');
        if (colon) {
            char *ns = p, *ne = colon, *vs = colon + 1, *ve = eol;
            trim(&ns, &ne);
            trim(&vs, &ve);
            *ne = '\0';
            *ve = '\0';
            if (!strcasecmp(ns, "Upgrade"))
                upgrade = !strcasecmp(vs, "websocket");
            else if (!strcasecmp(ns, "Connection"))
                connection = has_token(vs, "upgrade");
            else if (!strcasecmp(ns, "Sec-WebSocket-Accept"))
                accept_ok = f->accept[0] && !strcmp(vs, f->accept);
            else if (!strcasecmp(ns, "Sec-WebSocket-Protocol"))
                proto_ok = !strcmp(vs, f->proto);
            else if (!strcasecmp(ns, "Sec-WebSocket-Extensions"))
                extensions = 1;
        }
        p = eol + 2;
    }
    if (!upgrade || !connection)
        fail(f, "the server did not upgrade the connection to a WebSocket");
    else if (!accept_ok)
        fail(f, "the server's Sec-WebSocket-Accept does not answer our key");
    else if (!proto_ok)
        fail(f, "the server did not select the tracegate subprotocol");
    else if (extensions)
        fail(f, "the server chose a WebSocket extension we did not offer");
    else
        rc = 1;
out:
    free(head);
    return rc;
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
            kick(f);
        }
        return 0;
    }
    if (opcode == OP_PONG)
        return 0;
    /* close: answer with the same code (none if it gave none), then wait for the end of stream */
    if (n == 1)
        return fail(f, "a close frame with a one-byte body");
    if (n >= 2) {
        unsigned code = (unsigned)p[0] << 8 | p[1];
        if (code != 1000)
            tg_info(f->server ? SERVER_LOG : LOG, "%s: the %s closed the WebSocket (%u%s%.*s)", f->what,
                    f->server ? "client" : "server", code, n > 2 ? ": " : "", (int)(n - 2), (const char *)p + 2);
    }
    if (!f->close_sent) {
        f->close_sent = 1;
        if (put_frame(f, f->ctl_out, OP_CLOSE, NULL, p, n >= 2 ? 2 : 0) != 0)
            return fail(f, "out of memory");
        kick(f);
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
        atomic_fetch_add_explicit(&g_server.in_messages, 1, memory_order_relaxed);
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
        return fail(f, "a frame with reserved bits set (no extension was agreed)");
    int masked = (h[1] & 0x80) != 0;
    if (masked != f->server) /* RFC 6455 5.1: clients mask every frame, servers none */
        return fail(f, f->server ? "an unmasked frame from the client" : "a masked frame from the server");
    uint64_t len = h[1] & 0x7f;
    size_t hl = 2;
    if (len == 126)
        hl = 4;
    else if (len == 127)
        hl = 10;
    size_t kl = masked ? 4 : 0; /* the key follows the length */
    if (have < hl + kl)
        return 0;
    evbuffer_copyout(src, h, hl);
    if (hl == 4) {
        len = (uint64_t)h[2] << 8 | h[3];
    } else if (hl == 10) {
        len = 0;
        for (int i = 2; i < 10; i++)
            len = len << 8 | h[i];
        if (len >> 63)
            return fail(f, "a frame length with its top bit set");
    }
    if (kl) {
        uint8_t hk[14];
        evbuffer_copyout(src, hk, hl + kl);
        memcpy(f->mask, hk + hl, 4);
        f->mask_pos = 0;
    }
    if (opcode & 0x8) { /* control */
        if (opcode != OP_CLOSE && opcode != OP_PING && opcode != OP_PONG)
            return fail(f, "a frame with an unknown opcode");
        if (!fin || len > MAX_CONTROL)
            return fail(f, "a fragmented or oversized control frame");
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
        return fail(f, "a frame with an unknown opcode");
    if ((opcode == OP_CONT) != (f->in_message != 0))
        return fail(f, opcode == OP_CONT ? "a continuation with no message" : "a new message inside another");
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
    uint8_t *p = out.iov_base;
    struct evbuffer_iovec in[16];
    size_t done = 0;
    while (done < n) {
        struct evbuffer_ptr at;
        evbuffer_ptr_set(src, &at, done, EVBUFFER_PTR_SET);
        int k = evbuffer_peek(src, (ev_ssize_t)(n - done), &at, in, 16);
        if (k <= 0)
            return -1;
        for (int i = 0; i < k && done < n; i++) {
            size_t c = in[i].iov_len < n - done ? in[i].iov_len : n - done;
            memcpy(p + done, in[i].iov_base, c);
            apply_mask(p + done, c, f->mask, f->mask_pos);
            f->mask_pos = (f->mask_pos + (unsigned)c) & 3;
            done += c;
        }
    }
    out.iov_len = n;
    if (evbuffer_commit_space(dst, &out, 1) != 0)
        return -1;
    evbuffer_drain(src, n);
    return 0;
}

static enum bufferevent_filter_result wsf_in(struct evbuffer *src, struct evbuffer *dst, ev_ssize_t limit,
                                             enum bufferevent_flush_mode mode, void *arg)
{
    (void)mode;
    struct wsf *f = arg;
    if (f->state == S_FAILED) {
        evbuffer_drain(src, evbuffer_get_length(src));
        return BEV_NEED_MORE;
    }
    if (f->state == S_HANDSHAKE) {
        int r = handshake(f, src);
        if (r < 0)
            return BEV_ERROR;
        if (r == 0)
            return BEV_NEED_MORE;
        f->state = S_OPEN;
        tg_debug(LOG, "connected to %s", f->what);
        kick(f); /* what was written before the answer may go now */
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
            fail(f, "out of memory");
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

static enum bufferevent_filter_result wsf_out(struct evbuffer *src, struct evbuffer *dst, ev_ssize_t limit,
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
        if (put_frame(f, dst, OP_PONG, NULL, f->pong, f->pong_len) != 0) {
            fail(f, "out of memory");
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
        if (put_frame(f, dst, OP_BINARY, src, NULL, n) != 0) {
            fail(f, "out of memory");
            return BEV_ERROR;
        }
        wrote += n;
        messages++;
        bytes += n;
    }
    if (f->server) {
        atomic_fetch_add_explicit(&g_server.out_messages, messages, memory_order_relaxed);
        atomic_fetch_add_explicit(&g_server.out_bytes, bytes, memory_order_relaxed);
        tg_atomic_size_max(&g_server.staged_peak, evbuffer_get_length(dst));
        /* the share is full: what comes next waits above until the socket takes some (counted
         * once per filling) */
        int full = evbuffer_get_length(dst) >= STAGE_HIGH;
        if (full && !f->out_full)
            atomic_fetch_add_explicit(&g_server.out_full, 1, memory_order_relaxed);
        f->out_full = full;
    }
    if (mode == BEV_FINISHED && !evbuffer_get_length(src)) {
        static const uint8_t normal[2] = {1000 >> 8, 1000 & 0xff};
        f->close_sent = 1;
        if (put_frame(f, dst, OP_CLOSE, NULL, normal, 2) != 0) {
            fail(f, "out of memory");
            return BEV_ERROR;
        }
        wrote += 2;
    }
    return wrote ? BEV_OK : BEV_NEED_MORE;
}

/* ------------------------------------------------------------ the filter */

/* Server side, as the filter goes: what the socket has not taken yet, then our close frame (unless
 * one was sent), get one non-blocking send; then the socket closes. */
static void server_end(struct wsf *f)
{
    atomic_fetch_sub_explicit(&g_server.open, 1, memory_order_relaxed);
    struct evbuffer *out = bufferevent_get_output(f->under);
    if (f->staged_cb)
        evbuffer_remove_cb_entry(out, f->staged_cb);
    f->staged_cb = NULL;
    if (f->ctl_out)
        evbuffer_add_buffer(out, f->ctl_out);
    if (!f->close_sent) {
        const char *why = f->close_code ? f->close_why : "connection closed";
        unsigned code = f->close_code ? f->close_code : CLOSE_NORMAL;
        uint8_t body[2 + sizeof f->close_why];
        size_t wl = strlen(why);
        if (wl > MAX_CONTROL - 2)
            wl = MAX_CONTROL - 2;
        body[0] = (uint8_t)(code >> 8);
        body[1] = (uint8_t)code;
        memcpy(body + 2, why, wl);
        f->close_sent = 1;
        put_frame(f, out, OP_CLOSE, NULL, body, 2 + wl);
    }
    tg_write_through_free(f->wt);
    f->wt = NULL;
    int fd = bufferevent_getfd(f->under);
    evbuffer_unfreeze(out, 1); /* a socket bufferevent lets only itself drain its output */
    while (fd >= 0 && evbuffer_get_length(out)) {
        struct evbuffer_iovec e[16];
        struct iovec v[16];
        int k = evbuffer_peek(out, -1, NULL, e, 16);
        if (k > 16)
            k = 16;
        for (int i = 0; i < k; i++)
            v[i] = (struct iovec){.iov_base = e[i].iov_base, .iov_len = e[i].iov_len};
        struct msghdr mh = {.msg_iov = v, .msg_iovlen = (size_t)(k > 0 ? k : 0)};
        ssize_t n = sendmsg(fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n <= 0 || evbuffer_drain(out, (size_t)n) != 0)
            break;
    }
    bufferevent_free(f->under); /* closes the socket */
    f->under = NULL;
}

static void wsf_free(void *arg)
{
    struct wsf *f = arg;
    if (f->under)
        server_end(f);
    if (f->kick)
        event_free(f->kick);
    if (f->ctl_out)
        evbuffer_free(f->ctl_out);
    free(f);
}

struct bufferevent *tg_ws_client_filter_new(struct bufferevent *under, const struct tg_ws_client_filter_cfg *cfg)
{
    struct wsf *f = calloc(1, sizeof *f);
    if (!f)
        return NULL;
    f->state = S_HANDSHAKE;
    f->max_message = cfg->max_message;
    f->out_message = cfg->out_message ? cfg->out_message : 65536;
    tg_ws_accept_for(cfg->key, f->accept);
    snprintf(f->proto, sizeof f->proto, "%s", cfg->subprotocol);
    snprintf(f->what, sizeof f->what, "%s", cfg->what);
    f->ctl_out = evbuffer_new();
    f->kick = event_new(bufferevent_get_base(under), -1, 0, kick_cb, f);
    if (!f->ctl_out || !f->kick || evbuffer_add(bufferevent_get_output(under), cfg->request, cfg->request_len) != 0) {
        wsf_free(f);
        return NULL;
    }
    f->bev = bufferevent_filter_new(under, wsf_in, wsf_out, BEV_OPT_CLOSE_ON_FREE | BEV_OPT_DEFER_CALLBACKS,
                                    wsf_free, f);
    if (!f->bev) {
        evbuffer_drain(bufferevent_get_output(under), evbuffer_get_length(bufferevent_get_output(under)));
        wsf_free(f);
        return NULL;
    }
    return f->bev;
}

/* Server side: the socket took some of its share; a PONG that waited for room may go now. */
static void staged_drained(struct evbuffer *buf, const struct evbuffer_cb_info *info, void *arg)
{
    struct wsf *f = arg;
    if (!f->pong_due || !info->n_deleted || evbuffer_get_length(buf) >= STAGE_HIGH)
        return;
    /* the socket bufferevent outlives the filter's unlink (server_end frees it in the filter's
     * finalizer), which clears its callbacks: then the filter is going and nothing is kicked */
    bufferevent_event_cb alive = NULL;
    bufferevent_getcb(f->under, NULL, NULL, &alive, NULL);
    if (alive)
        kick(f);
}

struct bufferevent *tg_ws_server_filter_new(struct event_base *base, int fd, const struct tg_ws_server_filter_cfg *cfg)
{
    struct wsf *f = calloc(1, sizeof *f);
    struct bufferevent *sock = NULL;
    /* non-blocking whatever the caller handed over: a write-through must never wait for the peer */
    if (!f || evutil_make_socket_nonblocking(fd) != 0 || !(sock = bufferevent_socket_new(base, fd, BEV_OPT_CLOSE_ON_FREE))) {
        free(f);
        close(fd);
        return NULL;
    }
    f->server = 1;
    f->state = S_OPEN;
    f->max_message = cfg->max_message;
    f->out_message = cfg->out_message ? cfg->out_message : SOCKET_IO_MAX;
    snprintf(f->what, sizeof f->what, "%s", cfg->what ? cfg->what : "WebSocket");
    f->ctl_out = evbuffer_new();
    f->kick = event_new(base, -1, 0, kick_cb, f);
    /* not CLOSE_ON_FREE: the socket bufferevent outlives the filter's unlink, so that freeing the
     * filter can still send what is queued and the close frame (server_end) */
    if (f->ctl_out && f->kick)
        f->bev = bufferevent_filter_new(sock, wsf_in, wsf_out, BEV_OPT_DEFER_CALLBACKS, wsf_free, f);
    if (!f->bev) {
        wsf_free(f);
        bufferevent_free(sock);
        return NULL;
    }
    f->under = sock;
    atomic_fetch_add_explicit(&g_server.open, 1, memory_order_relaxed);
    bufferevent_set_max_single_write(sock, SOCKET_IO_MAX);
    bufferevent_set_max_single_read(sock, SOCKET_IO_MAX);
    tg_bev_bulk_read(sock); /* libevent alone reads 4 KiB per event */
    bufferevent_setwatermark(sock, EV_WRITE, STAGE_LOW, STAGE_HIGH);
    f->wt = tg_write_through_new(sock); /* NULL: libevent writes it, as before */
    f->staged_cb = evbuffer_add_cb(bufferevent_get_output(sock), staged_drained, f);
    return f->bev;
}
