/* ws_client_filter.c: the client side of a WebSocket as a libevent filter bufferevent: upgrade
 * handshake, framing and masking (see ws_client_filter.h). */
#include "net/ws_client_filter.h"

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

#include "net/ws_wire.h"
#include "tracegate/log.h"

#define LOG "ws-client"
#define MAX_HEAD 16384u     /* the server's upgrade answer, headers included */
#define MAX_CONTROL 125u    /* payload of a control frame (RFC 6455 5.5) */
#define MAX_UNSENT_PONG 65536u /* no PONG while this much of our output waits for the server */
#define WS_GUID "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

enum { OP_CONT = 0x0, OP_TEXT = 0x1, OP_BINARY = 0x2, OP_CLOSE = 0x8, OP_PING = 0x9, OP_PONG = 0xA };
enum { S_HANDSHAKE, S_OPEN, S_CLOSED, S_FAILED };

struct wsf {
    struct bufferevent *bev; /* the filter */
    struct event *kick;      /* flushes the output once the input side made something to send */
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
    /* control frames to send ahead of data (PONG, the close answer) */
    struct evbuffer *ctl_out;
    int close_sent;
};

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
    /* BEV_FLUSH: libevent calls a filter in BEV_NORMAL only when there is data above to send, and
     * a PONG or a close answer may be all there is */
    bufferevent_flush(f->bev, EV_WRITE, BEV_FLUSH);
}

static void kick(struct wsf *f) { event_active(f->kick, EV_TIMEOUT, 1); }

/* The connection cannot go on: logged, everything after dropped, and the bufferevent above gets
 * BEV_EVENT_ERROR (libevent reports nothing for a filter's BEV_ERROR; a deferred event callback
 * sees the errno set here: EPROTO). Returns -1. */
static int fail(struct wsf *f, const char *why)
{
    if (f->state == S_FAILED)
        return -1;
    if (f->state == S_HANDSHAKE)
        tg_error(LOG, "cannot open %s: %s", f->what, why);
    else
        tg_error(LOG, "%s: %s", f->what, why);
    f->state = S_FAILED;
    errno = EPROTO;
    bufferevent_trigger_event(f->bev, BEV_EVENT_ERROR, 0);
    return -1;
}

/* Appends one frame with FIN set: header, mask key, masked copy of n bytes taken from src (or of
 * data, when src is NULL). */
static int put_frame(struct evbuffer *dst, int opcode, struct evbuffer *src, const void *data, size_t n)
{
    uint8_t h[TG_WS_FRAME_HEADER_MAX + 4];
    size_t hl = tg_ws_frame_header(h, (unsigned)opcode, 1, n);
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
    /* whole words where the key lines up, then the rest */
    uint32_t m32;
    memcpy(&m32, mask, 4);
    uint64_t m64 = (uint64_t)m32 << 32 | m32;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        w ^= m64;
        memcpy(p + i, &w, 8);
    }
    for (; i < n; i++)
        p[i] ^= mask[i & 3];
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
        /* a server that sends PINGs without reading our output would have us keep a PONG for
         * each, without bound: past MAX_UNSENT_PONG waiting it gets none until it reads (RFC 6455
         * 5.5.3 lets an endpoint answer only the latest Ping) */
        struct bufferevent *under = bufferevent_get_underlying(f->bev);
        if (evbuffer_get_length(f->ctl_out) + (under ? evbuffer_get_length(bufferevent_get_output(under)) : 0) >=
            MAX_UNSENT_PONG)
            return 0;
        if (!f->close_sent && put_frame(f->ctl_out, OP_PONG, NULL, p, n) != 0)
            return fail(f, "out of memory");
        kick(f);
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
            tg_info(LOG, "%s: the server closed the WebSocket (%u%s%.*s)", f->what, code, n > 2 ? ": " : "",
                    (int)(n - 2), (const char *)p + 2);
    }
    if (!f->close_sent) {
        f->close_sent = 1;
        if (put_frame(f->ctl_out, OP_CLOSE, NULL, p, n >= 2 ? 2 : 0) != 0)
            return fail(f, "out of memory");
        kick(f);
    }
    f->state = S_CLOSED;
    return 0;
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
    if (h[1] & 0x80)
        return fail(f, "a masked frame from the server");
    uint64_t len = h[1] & 0x7f;
    size_t hl = 2;
    if (len == 126)
        hl = 4;
    else if (len == 127)
        hl = 10;
    if (have < hl)
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
    if (opcode & 0x8) { /* control */
        if (opcode != OP_CLOSE && opcode != OP_PING && opcode != OP_PONG)
            return fail(f, "a frame with an unknown opcode");
        if (!fin || len > MAX_CONTROL)
            return fail(f, "a fragmented or oversized control frame");
        if (have < hl + len)
            return 0;
        evbuffer_drain(src, hl);
        evbuffer_remove(src, h, (size_t)len);
        return on_control(f, opcode, h, (size_t)len) == 0 ? 1 : -1;
    }
    if (opcode == OP_TEXT)
        return fail(f, "a text message (tracegate speaks binary)");
    if (opcode != OP_BINARY && opcode != OP_CONT)
        return fail(f, "a frame with an unknown opcode");
    if ((opcode == OP_CONT) != (f->in_message != 0))
        return fail(f, opcode == OP_CONT ? "a continuation with no message" : "a new message inside another");
    if (len > f->max_message - f->msg_bytes) {
        char why[96];
        snprintf(why, sizeof why, "a message over %zu bytes", f->max_message);
        return fail(f, why);
    }
    evbuffer_drain(src, hl);
    f->in_message = 1;
    f->msg_bytes += len;
    f->left = len;
    f->fin = fin != 0;
    if (!len && fin) {
        f->in_message = 0;
        f->msg_bytes = 0;
    }
    return 1;
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
        if (evbuffer_remove_buffer(src, dst, n) != (int)n) {
            fail(f, "out of memory");
            return BEV_ERROR;
        }
        moved += n;
        f->left -= n;
        if (!f->left && f->fin) {
            f->in_message = 0;
            f->msg_bytes = 0;
        }
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
    size_t wrote = evbuffer_get_length(f->ctl_out);
    if (wrote)
        evbuffer_add_buffer(dst, f->ctl_out);
    if (f->close_sent) {
        evbuffer_drain(src, evbuffer_get_length(src)); /* nothing after our close frame */
        return wrote ? BEV_OK : BEV_NEED_MORE;
    }
    while (evbuffer_get_length(src) && (limit < 0 || wrote < (size_t)limit)) {
        size_t n = evbuffer_get_length(src);
        if (n > f->out_message)
            n = f->out_message;
        if (put_frame(dst, OP_BINARY, src, NULL, n) != 0) {
            fail(f, "out of memory");
            return BEV_ERROR;
        }
        wrote += n;
    }
    if (mode == BEV_FINISHED && !evbuffer_get_length(src)) {
        static const uint8_t normal[2] = {1000 >> 8, 1000 & 0xff};
        f->close_sent = 1;
        if (put_frame(dst, OP_CLOSE, NULL, normal, 2) != 0) {
            fail(f, "out of memory");
            return BEV_ERROR;
        }
        wrote += 2;
    }
    return wrote ? BEV_OK : BEV_NEED_MORE;
}

/* ------------------------------------------------------------ the filter */

static void wsf_free(void *arg)
{
    struct wsf *f = arg;
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
