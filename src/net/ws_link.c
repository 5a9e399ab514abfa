/* ws_link.c: moves bytes between one WebSocket and a socketpair end adopted as a raw-file wsi (see ws_link.h). */
#include "net/ws_link.h"

#include <errno.h>
#include <stdio.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "net/ws_close_note.h"
#include "tracegate/log.h"

#define DEFAULT_MAX_MESSAGE (1u << 20)
/* Bytes a link may hold for the socket beyond what flow control should
 * allow (lws delivers the rest of a read after we pause it). */
#define PENDING_SLACK (512u * 1024u)
/* After the WebSocket is gone, the raw side waits at most this long for the
 * libevent side to read the last bytes and close. */
#define RAW_LINGER_SECS 30

struct tg_ws_link {
    struct lws *ws, *raw;
    int fd; /* our socketpair end (owned by the raw wsi once adopted) */
    size_t max_message;
    size_t msg_bytes; /* bytes of the inbound message in progress */

    /* WebSocket → socket */
    unsigned char *in_buf;
    size_t in_off, in_len, in_cap;
    int ws_paused;   /* lws_rx_flow_control(ws, 0) in force */
    int in_dead;     /* the socket refused a write: inbound bytes are dropped */
    int shut_wr;     /* shutdown(SHUT_WR) done */

    /* socket → WebSocket */
    size_t out_len;
    int raw_paused;  /* lws_rx_flow_control(raw, 0) in force */
    int eof;         /* the socket side ended: close the WebSocket once out is sent */

    int text_ok;     /* text messages are bytes too */
    struct tg_ws_close_note *note; /* close code and reason left by the socket side, or NULL */

    int adopting;
    int closed_while_adopting;
    unsigned char out[LWS_PRE + TG_WS_LINK_CHUNK];
};

static atomic_int g_links;

int tg_ws_link_count(void) { return atomic_load(&g_links); }

int tg_ws_link_socketpair(int sv[2])
{
    return socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv);
}

static void link_free(struct tg_ws_link *l)
{
    tg_ws_close_note_unref(l->note);
    free(l->in_buf);
    free(l);
    atomic_fetch_sub(&g_links, 1);
}

struct tg_ws_link *tg_ws_link_of(struct lws *ws) { return ws ? lws_get_opaque_user_data(ws) : NULL; }

void tg_ws_link_accept_text(struct tg_ws_link *l) { l->text_ok = 1; }

void tg_ws_link_set_close_note(struct tg_ws_link *l, struct tg_ws_close_note *note)
{
    tg_ws_close_note_ref(note);
    tg_ws_close_note_unref(l->note);
    l->note = note;
}

struct tg_ws_link *tg_ws_link_attach(struct lws *ws, struct lws_vhost *vh, int sock, size_t max_message)
{
    struct tg_ws_link *l = calloc(1, sizeof *l);
    if (!l) {
        close(sock);
        return NULL;
    }
    atomic_fetch_add(&g_links, 1);
    l->ws = ws;
    l->fd = sock;
    l->max_message = max_message ? max_message : DEFAULT_MAX_MESSAGE;
    lws_set_opaque_user_data(ws, l);

    lws_adopt_desc_t d;
    memset(&d, 0, sizeof d);
    d.vh = vh;
    d.type = LWS_ADOPT_RAW_FILE_DESC;
    d.fd.filefd = sock;
    d.vh_prot_name = TG_WS_LINK_RAW_PROTOCOL;
    d.opaque = l;
    l->adopting = 1;
    struct lws *raw = lws_adopt_descriptor_vhost_via_info(&d);
    l->adopting = 0;
    if (!raw) {
        /* lws closes the fd itself only if it got as far as a wsi */
        if (!l->closed_while_adopting)
            close(sock);
        lws_set_opaque_user_data(ws, NULL);
        link_free(l);
        return NULL;
    }
    l->raw = raw;
    return l;
}

/* ------------------------------------------------------- WebSocket → socket */

/* Writes pending inbound bytes. 1 = all written, 0 = socket full, -1 = error. */
static int flush_in(struct tg_ws_link *l)
{
    while (l->in_off < l->in_len) {
        ssize_t n = send(l->fd, l->in_buf + l->in_off, l->in_len - l->in_off, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return 0;
            return -1;
        }
        l->in_off += (size_t)n;
    }
    l->in_off = l->in_len = 0;
    return 1;
}

static void drop_in(struct tg_ws_link *l)
{
    l->in_dead = 1;
    l->in_off = l->in_len = 0;
}

static int queue_in(struct tg_ws_link *l, const unsigned char *p, size_t n)
{
    if (l->in_off && l->in_off == l->in_len)
        l->in_off = l->in_len = 0;
    if (l->in_len + n > l->in_cap) {
        if (l->in_off) {
            memmove(l->in_buf, l->in_buf + l->in_off, l->in_len - l->in_off);
            l->in_len -= l->in_off;
            l->in_off = 0;
        }
        if (l->in_len + n > l->in_cap) {
            size_t cap = l->in_cap ? l->in_cap : 64u * 1024u;
            while (cap < l->in_len + n)
                cap *= 2;
            unsigned char *b = realloc(l->in_buf, cap);
            if (!b)
                return -1;
            l->in_buf = b;
            l->in_cap = cap;
        }
    }
    memcpy(l->in_buf + l->in_len, p, n);
    l->in_len += n;
    return 0;
}

int tg_ws_link_on_rx(struct tg_ws_link *l, const void *in, size_t len)
{
    struct lws *ws = l->ws;
    if (!ws)
        return -1;
    if (!l->text_ok && !lws_frame_is_binary(ws)) {
        static const char why[] = "text messages are not supported: send binary Perfetto IPC frames";
        lws_close_reason(ws, LWS_CLOSE_STATUS_UNACCEPTABLE_OPCODE, (unsigned char *)why, sizeof why - 1);
        return -1;
    }
    l->msg_bytes += len;
    if (l->msg_bytes > l->max_message) {
        static const char why[] = "message too large";
        lws_close_reason(ws, LWS_CLOSE_STATUS_MESSAGE_TOO_LARGE, (unsigned char *)why, sizeof why - 1);
        return -1;
    }
    if (lws_is_final_fragment(ws))
        l->msg_bytes = 0;
    if (!len || l->in_dead || !l->raw)
        return 0; /* the socket side is gone: its EOF path closes the WebSocket */

    const unsigned char *p = in;
    if (l->in_off == l->in_len) {
        /* fast path: straight into the socket */
        while (len) {
            ssize_t n = send(l->fd, p, len, MSG_NOSIGNAL | MSG_DONTWAIT);
            if (n < 0) {
                if (errno == EINTR)
                    continue;
                if (errno != EAGAIN && errno != EWOULDBLOCK) {
                    drop_in(l);
                    return 0;
                }
                break;
            }
            p += n;
            len -= (size_t)n;
        }
        if (!len)
            return 0;
    }
    if (l->in_len - l->in_off + len > l->max_message + PENDING_SLACK) {
        static const char why[] = "gateway input overrun";
        lws_close_reason(ws, LWS_CLOSE_STATUS_POLICY_VIOLATION, (unsigned char *)why, sizeof why - 1);
        return -1;
    }
    if (queue_in(l, p, len) != 0) {
        static const char why[] = "out of memory";
        lws_close_reason(ws, LWS_CLOSE_STATUS_UNEXPECTED_CONDITION, (unsigned char *)why, sizeof why - 1);
        return -1;
    }
    /* the socket is full: stop reading the WebSocket until it drains */
    if (!l->ws_paused) {
        l->ws_paused = 1;
        lws_rx_flow_control(ws, 0);
    }
    lws_callback_on_writable(l->raw);
    return 0;
}

/* ------------------------------------------------------- socket → WebSocket */

int tg_ws_link_on_writeable(struct tg_ws_link *l)
{
    struct lws *ws = l->ws;
    if (!ws)
        return -1;
    if (l->out_len) {
        if (lws_send_pipe_choked(ws)) {
            lws_callback_on_writable(ws);
            return 0;
        }
        int m = lws_write(ws, l->out + LWS_PRE, l->out_len, LWS_WRITE_BINARY);
        if (m < (int)l->out_len)
            return -1;
        l->out_len = 0;
        if (l->raw && l->raw_paused) {
            l->raw_paused = 0;
            lws_rx_flow_control(l->raw, 1);
        }
        if (l->eof)
            lws_callback_on_writable(ws); /* close after lws has sent this message */
        return 0;
    }
    if (l->eof) {
        char why[TG_WS_CLOSE_REASON_MAX + 1];
        int code = tg_ws_close_note_get(l->note, why, sizeof why);
        if (!code) {
            code = LWS_CLOSE_STATUS_NORMAL;
            snprintf(why, sizeof why, "connection closed");
        }
        lws_close_reason(ws, (enum lws_close_status)code, (unsigned char *)why, strlen(why));
        return -1;
    }
    return 0;
}

void tg_ws_link_on_closed(struct tg_ws_link *l)
{
    if (l->ws)
        lws_set_opaque_user_data(l->ws, NULL);
    l->ws = NULL;
    l->out_len = 0;
    if (!l->raw) {
        link_free(l);
        return;
    }
    /* keep draining the socket (its bytes are dropped) so its EOF is seen */
    if (l->raw_paused) {
        l->raw_paused = 0;
        lws_rx_flow_control(l->raw, 1);
    }
    if (l->in_off == l->in_len || l->in_dead) {
        if (!l->shut_wr) {
            l->shut_wr = 1;
            shutdown(l->fd, SHUT_WR);
        }
    } else {
        lws_callback_on_writable(l->raw); /* flush, then shut down */
    }
    lws_set_timeout(l->raw, PENDING_TIMEOUT_USER_OK, RAW_LINGER_SECS);
}

/* ------------------------------------------------------------ raw callbacks */

static int raw_readable(struct tg_ws_link *l)
{
    if (l->out_len) {
        /* still waiting for the WebSocket: stop reading */
        if (!l->raw_paused) {
            l->raw_paused = 1;
            lws_rx_flow_control(l->raw, 0);
        }
        return 0;
    }
    for (;;) {
        ssize_t n = read(l->fd, l->out + LWS_PRE, TG_WS_LINK_CHUNK);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return 0;
            return -1;
        }
        if (n == 0)
            return -1; /* EOF: RAW_CLOSE_FILE follows */
        if (!l->ws)
            continue; /* WebSocket gone: discard */
        l->out_len = (size_t)n;
        l->raw_paused = 1;
        lws_rx_flow_control(l->raw, 0);
        lws_callback_on_writable(l->ws);
        return 0;
    }
}

static int raw_writeable(struct tg_ws_link *l)
{
    if (l->in_dead || l->in_off == l->in_len)
        return 0;
    int r = flush_in(l);
    if (r < 0) {
        drop_in(l);
        return l->ws ? 0 : -1;
    }
    if (r == 0) {
        lws_callback_on_writable(l->raw);
        return 0;
    }
    if (l->ws && l->ws_paused) {
        l->ws_paused = 0;
        lws_rx_flow_control(l->ws, 1);
    }
    if (!l->ws && !l->shut_wr) {
        l->shut_wr = 1;
        shutdown(l->fd, SHUT_WR);
    }
    return 0;
}

static void raw_closed(struct tg_ws_link *l)
{
    if (l->adopting) {
        l->closed_while_adopting = 1;
        return;
    }
    l->raw = NULL;
    l->eof = 1;
    drop_in(l);
    if (!l->ws) {
        link_free(l);
        return;
    }
    if (l->ws_paused) {
        l->ws_paused = 0;
        lws_rx_flow_control(l->ws, 1); /* keep reading (and dropping) until the close */
    }
    lws_callback_on_writable(l->ws);
}

int tg_ws_link_raw_callback(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in, size_t len)
{
    struct tg_ws_link *l = lws_get_opaque_user_data(wsi);
    switch (reason) {
    case LWS_CALLBACK_RAW_ADOPT_FILE:
        return l ? 0 : -1;
    case LWS_CALLBACK_RAW_RX_FILE:
        return l ? raw_readable(l) : -1;
    case LWS_CALLBACK_RAW_WRITEABLE_FILE:
        return l ? raw_writeable(l) : -1;
    case LWS_CALLBACK_RAW_CLOSE_FILE:
        if (l)
            raw_closed(l);
        return 0;
    case LWS_CALLBACK_ESTABLISHED:
    case LWS_CALLBACK_CLIENT_ESTABLISHED:
        return -1; /* a WebSocket that asked for this internal protocol */
    default:
        break;
    }
    (void)user;
    (void)in;
    (void)len;
    return 0;
}

/* ------------------------------------------------------------ lws logging */

static atomic_int g_quiet_warnings;

/* libwebsockets' own messages may quote a request line or header, and tokens are never logged. */
void tg_ws_redact_tokens(const char *line, char *out, size_t cap)
{
    static const char *const keys[] = {"token=", "tracegate.token."};
    size_t o = 0;
    const char *p = line;
    while (*p && o + 1 < cap) {
        size_t kl = 0;
        for (size_t k = 0; k < 2 && !kl; k++)
            if (!strncasecmp(p, keys[k], strlen(keys[k])))
                kl = strlen(keys[k]);
        if (!kl) {
            out[o++] = *p++;
            continue;
        }
        for (size_t i = 0; i < kl && o + 1 < cap; i++)
            out[o++] = *p++;
        for (const char *r = "***"; *r && o + 1 < cap; r++)
            out[o++] = *r;
        while (*p && !strchr("&, \t\r\n\"';", *p))
            p++;
    }
    out[o] = '\0';
}

static void lws_log_emit(int level, const char *line)
{
    char buf[512];
    tg_ws_redact_tokens(line, buf, sizeof buf);
    size_t n = strlen(buf);
    while (n && (buf[n - 1] == '\n' || buf[n - 1] == '\r'))
        buf[--n] = '\0';
    if (level & LLL_ERR)
        tg_error("lws", "%s", buf);
    else if (atomic_load(&g_quiet_warnings))
        tg_debug("lws", "%s", buf);
    else
        tg_warn("lws", "%s", buf);
}

void tg_ws_setup_lws_logging(int quiet_warnings)
{
    atomic_store(&g_quiet_warnings, quiet_warnings);
    lws_set_log_level(LLL_ERR | LLL_WARN, lws_log_emit);
}
