/* ws_link.c: moves bytes between one WebSocket and its far side: a seam (ws_seam.h) or a socketpair end adopted as a raw-file wsi (see ws_link.h). */
#include "net/ws_link.h"

#include <errno.h>
#include <stdio.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "net/atomic_max.h"
#include "net/ws_close_note.h"
#include "net/ws_seam.h"
#include "net/ws_wire.h"
#include "base/log_sample.h"
#include "tracegate/clock.h"
#include "tracegate/log.h"

#define DEFAULT_MAX_MESSAGE (1u << 20)
/* Bytes a link may hold for the socket beyond max_message (lws delivers the rest of a read
 * after we pause it): past that the peer ignores flow control, and is cut. */
#define PENDING_SLACK (512u * 1024u)
/* After the WebSocket is gone, the raw side waits at most this long for the
 * libevent side to read the last bytes and close. */
#define RAW_LINGER_SECS 30

/* One outbound message: LWS_PRE bytes for lws' header, then up to the link's out_cap bytes. */
struct out_msg {
    struct out_msg *next;
    size_t len;
    unsigned char buf[];
};

struct tg_ws_link {
    struct lws *ws, *raw;
    struct tg_ws_seam *seam; /* the far side is a seam (ws_seam.h), not a socketpair: raw is NULL */
    int fd; /* our socketpair end (owned by the raw wsi once adopted) */
    size_t max_message;
    size_t msg_bytes; /* bytes of the inbound message in progress */

    /* WebSocket → socket */
    unsigned char *in_buf;
    size_t in_off, in_len, in_cap;
    int ws_paused;   /* lws_rx_flow_control(ws, 0) in force */
    int in_dead;     /* the socket refused a write: inbound bytes are dropped */
    int shut_wr;     /* shutdown(SHUT_WR) done */

    /* socket → WebSocket: messages read, not yet given to lws_write */
    struct out_msg *out_head, *out_tail;
    struct out_msg *spare; /* one free buffer kept while the queue is busy */
    size_t out_bytes;      /* payload bytes queued */
    size_t out_cap;        /* payload bytes per message */
    int raw_paused;        /* lws_rx_flow_control(raw, 0) in force */
    int eof;               /* the socket side ended: close the WebSocket once out is sent */

    int text_ok;     /* text messages are bytes too */
    int closing;     /* a callback of ours returned -1: lws is closing the WebSocket (it may still
                      * be sending its close frame), so nothing is written from a wake-up */
    struct tg_ws_close_note *note; /* close code and reason left by the socket side, or NULL */

    int adopting;
    int closed_while_adopting;
    /* asks for the raw side's next writeable callback from outside that callback (lws clears a
     * raw-file wsi's POLLOUT after its writeable callback, so a request made inside it is lost) */
    lws_sorted_usec_list_t rearm_sul;
};

static atomic_int g_links;
static atomic_ullong g_out_messages, g_out_bytes, g_out_pauses, g_in_pauses, g_out_tails, g_out_tail_bytes;
static atomic_size_t g_out_largest, g_out_peak, g_in_peak;

int tg_ws_link_count(void) { return atomic_load(&g_links); }

void tg_ws_link_stats(struct tg_ws_link_stats *out)
{
    out->out_messages = atomic_load(&g_out_messages);
    out->out_bytes = atomic_load(&g_out_bytes);
    out->out_largest = atomic_load(&g_out_largest);
    out->out_queue_peak = atomic_load(&g_out_peak);
    out->out_pauses = atomic_load(&g_out_pauses);
    out->out_tails = atomic_load(&g_out_tails);
    out->out_tail_bytes = atomic_load(&g_out_tail_bytes);
    out->in_queue_peak = atomic_load(&g_in_peak);
    out->in_pauses = atomic_load(&g_in_pauses);
    /* links over a seam queue in the seam (net/ws_seam.h) */
    struct tg_ws_seam_stats ss;
    tg_ws_seam_stats(&ss);
    out->out_pauses += ss.out_pauses;
    if (ss.out_peak > out->out_queue_peak)
        out->out_queue_peak = ss.out_peak;
    if (ss.in_peak > out->in_queue_peak)
        out->in_queue_peak = ss.in_peak;
}

void tg_ws_link_stats_reset_peaks(void)
{
    atomic_store(&g_out_largest, 0);
    atomic_store(&g_out_peak, 0);
    atomic_store(&g_in_peak, 0);
    tg_ws_seam_stats_reset_peaks();
}

int tg_ws_link_socketpair(int sv[2])
{
    return socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv);
}

static void out_clear(struct tg_ws_link *l)
{
    while (l->out_head) {
        struct out_msg *m = l->out_head;
        l->out_head = m->next;
        free(m);
    }
    l->out_tail = NULL;
    l->out_bytes = 0;
}

static void link_free(struct tg_ws_link *l)
{
    lws_sul_cancel(&l->rearm_sul);
    out_clear(l);
    free(l->spare);
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

/* A link for ws (its opaque user data from here on), with no far side yet. */
static struct tg_ws_link *link_new(struct lws *ws, size_t max_message)
{
    struct tg_ws_link *l = calloc(1, sizeof *l);
    if (!l)
        return NULL;
    atomic_fetch_add(&g_links, 1);
    l->ws = ws;
    l->fd = -1;
    l->max_message = max_message ? max_message : DEFAULT_MAX_MESSAGE;
    l->out_cap = TG_WS_LINK_MSG_MAX;
    lws_set_opaque_user_data(ws, l);
    return l;
}

struct tg_ws_link *tg_ws_link_attach(struct lws *ws, struct lws_vhost *vh, int sock, size_t max_message)
{
    struct tg_ws_link *l = link_new(ws, max_message);
    if (!l) {
        close(sock);
        return NULL;
    }
    l->fd = sock;

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

struct tg_ws_link *tg_ws_link_attach_seam(struct lws *ws, struct tg_ws_seams *seams, size_t max_message)
{
    struct tg_ws_link *l = link_new(ws, max_message);
    if (l && !(l->seam = tg_ws_seam_new(seams, l))) {
        lws_set_opaque_user_data(ws, NULL);
        link_free(l);
        return NULL;
    }
    return l;
}

struct tg_ws_seam *tg_ws_link_seam(const struct tg_ws_link *l) { return l->seam; }

/* ------------------------------------------------------- the seam's side */

static int seam_rx(struct tg_ws_link *l, const void *in, size_t len)
{
    int r = tg_ws_seam_push(l->seam, in, len, l->max_message + PENDING_SLACK);
    if (r < 0) {
        static const char why[] = "gateway input overrun";
        lws_close_reason(l->ws, LWS_CLOSE_STATUS_POLICY_VIOLATION, (unsigned char *)why, sizeof why - 1);
        return -1;
    }
    if (r > 0 && !l->ws_paused) {
        l->ws_paused = 1;
        atomic_fetch_add(&g_in_pauses, 1);
        lws_rx_flow_control(l->ws, 0); /* until the gateway took it (tg_ws_link_service_seams) */
    }
    return 0;
}

/* The far side ended and everything it gave was handed to lws_write: once lws has sent it too
 * (`sent`: messages went out in this callback, so ask for another), the WebSocket closes with
 * the close note's code and reason, or 1000. Returns what the writeable callback returns. */
static int close_when_sent(struct tg_ws_link *l, size_t sent)
{
    if (sent) {
        lws_callback_on_writable(l->ws);
        return 0;
    }
    char why[TG_WS_CLOSE_REASON_MAX + 1];
    int code = tg_ws_close_note_get(l->note, why, sizeof why);
    if (!code) {
        code = LWS_CLOSE_STATUS_NORMAL;
        snprintf(why, sizeof why, "connection closed");
    }
    lws_close_reason(l->ws, (enum lws_close_status)code, (unsigned char *)why, strlen(why));
    return -1;
}

/* One message straight from the gateway's buffers, for a WebSocket without TLS (seam_writeable). */
struct direct_send {
    struct lws *ws;
    int fd;
    int choked; /* the socket took less than the whole message */
};

/* tg_ws_seam_take's consumer: the frame header and the payload's pieces in one sendmsg. What the
 * kernel does not take of the frame goes to lws as raw bytes (LWS_WRITE_RAW): lws copies that tail
 * and sends it before anything else on this connection, its own pongs and close frame included (a
 * pending tail comes first in its writeable handling), so nothing lws writes can land inside our
 * frame. Returns len (all of it sent or left with lws), 0 (the socket took nothing: the frame was
 * not started) or -1. */
static ssize_t direct_take(void *arg, const struct iovec *iov, int n, size_t len)
{
    struct direct_send *d = arg;
    uint8_t hdr[TG_WS_FRAME_HEADER_MAX];
    struct iovec v[1 + TG_WS_SEAM_TAKE_IOV_MAX];
    if (n > TG_WS_SEAM_TAKE_IOV_MAX)
        return -1;
    v[0].iov_base = hdr;
    v[0].iov_len = tg_ws_frame_header(hdr, 2 /* binary */, 0, len);
    memcpy(v + 1, iov, (size_t)n * sizeof *iov);
    size_t total = v[0].iov_len + len;
    struct msghdr mh = {.msg_iov = v, .msg_iovlen = (size_t)n + 1};
    ssize_t w;
    do
        w = sendmsg(d->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
    while (w < 0 && errno == EINTR);
    if (w < 0) {
        if (errno != EAGAIN && errno != EWOULDBLOCK)
            return -1;
        d->choked = 1;
        return 0;
    }
    if ((size_t)w < total) {
        d->choked = 1;
        atomic_fetch_add_explicit(&g_out_tails, 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&g_out_tail_bytes, total - (size_t)w, memory_order_relaxed);
        size_t skip = (size_t)w;
        for (int k = 0; k <= n; k++) {
            if (skip >= v[k].iov_len) {
                skip -= v[k].iov_len;
                continue;
            }
            /* lws_write's result for bytes it queued behind others is not their count: only
             * failure means something here */
            if (lws_write(d->ws, (unsigned char *)v[k].iov_base + skip, v[k].iov_len - skip, LWS_WRITE_RAW) < 0)
                return -1;
            skip = 0;
        }
    }
    return (ssize_t)len;
}

/* Sends what the gateway wrote, as messages of up to out_cap bytes, as many as the socket takes
 * (up to OUT_HIGH bytes per turn); closes the WebSocket once the gateway side ended and all of
 * it was sent. Without TLS each message goes from the gateway's buffers to the socket (see
 * direct_take); with TLS lws encrypts it from a copy in the link's message buffer. */
/* A WebSocket this side may write to its socket itself: no TLS, and its own TCP connection (not a
 * stream multiplexed on another's: the vhost offers only HTTP/1.1, this holds that). */
static int writes_direct(struct lws *ws) { return !lws_is_ssl(ws) && lws_get_network_wsi(ws) == ws; }

static int seam_writeable(struct tg_ws_link *l)
{
    struct lws *ws = l->ws;
    int direct = writes_direct(ws);
    size_t sent = 0;
    for (;;) {
        if (sent && (sent >= TG_WS_LINK_OUT_HIGH || (!direct && lws_send_pipe_choked(ws)))) {
            lws_callback_on_writable(ws);
            return 0;
        }
        size_t more = 0, n;
        int ended = 0, choked = 0;
        if (direct) {
            struct direct_send d = {ws, lws_get_socket_fd(ws), 0};
            ssize_t r = tg_ws_seam_take(l->seam, l->out_cap, direct_take, &d, &more, &ended);
            if (r < 0)
                return -1;
            n = (size_t)r;
            choked = d.choked;
        } else {
            if (!l->spare && !(l->spare = malloc(sizeof *l->spare + LWS_PRE + l->out_cap)))
                return -1;
            n = tg_ws_seam_pull(l->seam, l->spare->buf + LWS_PRE, l->out_cap, &more, &ended);
            if (n && lws_write(ws, l->spare->buf + LWS_PRE, n, LWS_WRITE_BINARY) < (int)n)
                return -1;
        }
        if (n) {
            atomic_fetch_add_explicit(&g_out_messages, 1, memory_order_relaxed);
            atomic_fetch_add_explicit(&g_out_bytes, n, memory_order_relaxed);
            tg_atomic_size_max(&g_out_largest, n);
            sent += n;
        }
        if (ended)
            return close_when_sent(l, sent);
        if (choked) {
            lws_callback_on_writable(ws); /* the rest when the socket has room */
            return 0;
        }
        if (!n || !more)
            break;
    }
    free(l->spare); /* an idle link holds no buffer */
    l->spare = NULL;
    return 0;
}

/* The gateway wrote to a seam: on a plain WebSocket where lws holds no unsent bytes (a tail of
 * ours or a frame of its own: lws_partial_buffered), send now rather than ask for the writeable
 * callback, which costs lws another round of its poll loop (asking for POLLOUT, polling,
 * dispatching) per batch. Whether the socket has room is the sendmsg's answer. Whatever
 * seam_writeable cannot finish here (a full socket, more than a turn's worth, the end of the
 * stream, an error) goes to the writeable callback as before, which looks again and closes the
 * WebSocket when it must. */
static void seam_wake_writable(struct tg_ws_link *l)
{
    if (l->closing || !writes_direct(l->ws) || lws_partial_buffered(l->ws) || seam_writeable(l) < 0)
        lws_callback_on_writable(l->ws);
}

void tg_ws_link_service_seams(struct tg_ws_seams *seams)
{
    struct tg_ws_seam_wake w[64];
    size_t n;
    do {
        n = tg_ws_seams_service(seams, w, 64);
        for (size_t i = 0; i < n; i++) {
            struct tg_ws_link *l = w[i].ws_user;
            if (!l || !l->ws)
                continue;
            if (w[i].resume_rx && l->ws_paused) {
                l->ws_paused = 0;
                lws_rx_flow_control(l->ws, 1);
            }
            if (w[i].writable)
                seam_wake_writable(l);
        }
    } while (n == 64);
}

/* ------------------------------------------------------- WebSocket → socket */

static size_t in_pending(const struct tg_ws_link *l) { return l->in_len - l->in_off; }

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
    tg_atomic_size_max(&g_in_peak, in_pending(l));
    return 0;
}

static int link_rx(struct tg_ws_link *l, const void *in, size_t len);

int tg_ws_link_on_rx(struct tg_ws_link *l, const void *in, size_t len)
{
    int r = link_rx(l, in, len);
    if (r < 0)
        l->closing = 1;
    return r;
}

static int link_rx(struct tg_ws_link *l, const void *in, size_t len)
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
    if (l->seam)
        return len ? seam_rx(l, in, len) : 0;
    if (!len || l->in_dead || !l->raw)
        return 0; /* the socket side is gone: its EOF path closes the WebSocket */

    const unsigned char *p = in;
    if (!in_pending(l)) {
        /* straight into the socket: no copy in user space */
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
    if (in_pending(l) + len > l->max_message + PENDING_SLACK) {
        static const char why[] = "gateway input overrun";
        lws_close_reason(ws, LWS_CLOSE_STATUS_POLICY_VIOLATION, (unsigned char *)why, sizeof why - 1);
        return -1;
    }
    if (queue_in(l, p, len) != 0) {
        static const char why[] = "out of memory";
        lws_close_reason(ws, LWS_CLOSE_STATUS_UNEXPECTED_CONDITION, (unsigned char *)why, sizeof why - 1);
        return -1;
    }
    /* the socket is full: keep taking messages up to the high watermark, then stop reading the
     * WebSocket until the queue drains under the low one */
    if (!l->ws_paused && in_pending(l) >= TG_WS_LINK_IN_HIGH) {
        l->ws_paused = 1;
        atomic_fetch_add(&g_in_pauses, 1);
        lws_rx_flow_control(ws, 0);
    }
    lws_callback_on_writable(l->raw);
    return 0;
}

/* ------------------------------------------------------- socket → WebSocket */

static void out_recycle(struct tg_ws_link *l, struct out_msg *m)
{
    if (!l->spare)
        l->spare = m;
    else
        free(m);
}

static void out_resume_raw(struct tg_ws_link *l)
{
    if (l->raw && l->raw_paused && l->out_bytes <= TG_WS_LINK_OUT_LOW) {
        l->raw_paused = 0;
        lws_rx_flow_control(l->raw, 1);
    }
}

static int link_writeable(struct tg_ws_link *l);

int tg_ws_link_on_writeable(struct tg_ws_link *l)
{
    int r = link_writeable(l);
    if (r < 0)
        l->closing = 1;
    return r;
}

static int link_writeable(struct tg_ws_link *l)
{
    struct lws *ws = l->ws;
    if (!ws)
        return -1;
    if (l->seam)
        return seam_writeable(l);
    /* as many messages as the socket takes, up to OUT_HIGH bytes per turn so one busy link does
     * not hold the thread; the first without asking (lws called us because the socket has room) */
    size_t sent = 0;
    while (l->out_head) {
        if (sent && (sent >= TG_WS_LINK_OUT_HIGH || lws_send_pipe_choked(ws))) {
            lws_callback_on_writable(ws);
            break;
        }
        struct out_msg *m = l->out_head;
        int w = lws_write(ws, m->buf + LWS_PRE, m->len, LWS_WRITE_BINARY);
        if (w < (int)m->len)
            return -1;
        atomic_fetch_add_explicit(&g_out_messages, 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&g_out_bytes, m->len, memory_order_relaxed);
        tg_atomic_size_max(&g_out_largest, m->len);
        sent += m->len;
        l->out_bytes -= m->len;
        l->out_head = m->next;
        if (!l->out_head)
            l->out_tail = NULL;
        out_recycle(l, m);
    }
    out_resume_raw(l);
    if (!l->out_head) {
        /* idle: an idle link holds no buffer */
        free(l->spare);
        l->spare = NULL;
        if (l->eof)
            return close_when_sent(l, sent);
    }
    return 0;
}

void tg_ws_link_on_closed(struct tg_ws_link *l)
{
    if (l->ws)
        lws_set_opaque_user_data(l->ws, NULL);
    l->ws = NULL;
    out_clear(l);
    if (l->seam) {
        tg_ws_seam_ws_closed(l->seam); /* the gateway side gets its end of stream */
        l->seam = NULL;
        link_free(l);
        return;
    }
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

static struct out_msg *out_new(struct tg_ws_link *l)
{
    struct out_msg *m = l->spare;
    if (m)
        l->spare = NULL;
    else if (!(m = malloc(sizeof *m + LWS_PRE + l->out_cap)))
        return NULL;
    m->next = NULL;
    m->len = 0;
    return m;
}

/* Reads what the socket has into the queue: appended to the last queued message while it has
 * room (a message joins frames, or carries part of one), else into a new one. */
static int raw_readable(struct tg_ws_link *l)
{
    if (!l->ws) {
        /* WebSocket gone: read and discard until EOF */
        struct out_msg *m = out_new(l);
        if (!m)
            return -1;
        for (;;) {
            ssize_t n = read(l->fd, m->buf + LWS_PRE, l->out_cap);
            if (n < 0 && errno == EINTR)
                continue;
            if (n <= 0) {
                out_recycle(l, m);
                return n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK) ? -1 : 0;
            }
        }
    }
    size_t got = 0;
    for (;;) {
        if (l->out_bytes >= TG_WS_LINK_OUT_HIGH) {
            /* real backpressure: the WebSocket is not taking what we have */
            if (!l->raw_paused) {
                l->raw_paused = 1;
                atomic_fetch_add(&g_out_pauses, 1);
                lws_rx_flow_control(l->raw, 0);
            }
            break;
        }
        struct out_msg *m = l->out_tail;
        int fresh = 0;
        if (!m || m->len == l->out_cap) {
            if (!(m = out_new(l)))
                return -1;
            fresh = 1;
        }
        size_t room = l->out_cap - m->len;
        ssize_t n = read(l->fd, m->buf + LWS_PRE + m->len, room);
        if (n < 0 && errno == EINTR) {
            if (fresh)
                out_recycle(l, m);
            continue;
        }
        if (n <= 0) {
            if (fresh)
                out_recycle(l, m);
            if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK))
                return -1; /* EOF or error: RAW_CLOSE_FILE follows, then what is queued is sent */
            break;
        }
        if (fresh) {
            if (l->out_tail)
                l->out_tail->next = m;
            else
                l->out_head = m;
            l->out_tail = m;
        }
        m->len += (size_t)n;
        l->out_bytes += (size_t)n;
        got += (size_t)n;
        if ((size_t)n < room)
            break; /* the socket had less than we asked for: it is empty now */
    }
    if (got) {
        tg_atomic_size_max(&g_out_peak, l->out_bytes);
        lws_callback_on_writable(l->ws);
    }
    return 0;
}

static void rearm_raw(lws_sorted_usec_list_t *sul)
{
    struct tg_ws_link *l = lws_container_of(sul, struct tg_ws_link, rearm_sul);
    if (l->raw)
        lws_callback_on_writable(l->raw);
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
    if (r == 0) /* still full: wait for the next POLLOUT, asked for once this callback is over */
        lws_sul_schedule(lws_get_context(l->raw), 0, &l->rearm_sul, rearm_raw, 0);
    if (l->ws && l->ws_paused && in_pending(l) <= TG_WS_LINK_IN_LOW) {
        l->ws_paused = 0;
        lws_rx_flow_control(l->ws, 1);
    }
    if (r > 0 && !l->ws && !l->shut_wr) {
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
    lws_sul_cancel(&l->rearm_sul);
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

static _Thread_local unsigned t_accept_failures;

unsigned tg_ws_take_accept_failures(void)
{
    unsigned n = t_accept_failures;
    t_accept_failures = 0;
    return n;
}

/* Whether line is lws' report of an accept() that failed for want of descriptors or memory:
 * "accept: errno N" (4.1), or "accept: <strerror>" with errno still set by accept(). */
static int out_of_descriptors(const char *line, int saved_errno)
{
    while (*line == ' ')
        line++;
    if (strncmp(line, "accept: ", 8) != 0)
        return 0;
    int e = saved_errno;
    const char *n = strstr(line, "errno ");
    if (n)
        e = atoi(n + 6);
    return e == EMFILE || e == ENFILE || e == ENOBUFS || e == ENOMEM;
}

#define LWS_LOG_PER_S 5

static void lws_log_emit(int level, const char *line)
{
    if (out_of_descriptors(line, errno)) {
        t_accept_failures++;
        return;
    }
    /* lws reports what a client did wrong (a huge header, a broken handshake) as errors and
     * warnings: anyone who reaches the port can cause them at will, so they are sampled like the
     * gateway's other pre-authentication refusals (per lws thread: the sampler is not locked) */
    static _Thread_local struct tg_log_sampler sampler;
    unsigned unlogged = 0;
    if (!tg_log_sample(&sampler, tg_mono_us(), LWS_LOG_PER_S, 1000000u, &unlogged))
        return;
    char buf[512];
    tg_ws_redact_tokens(line, buf, sizeof buf);
    size_t n = strlen(buf);
    while (n && (buf[n - 1] == '\n' || buf[n - 1] == '\r'))
        buf[--n] = '\0';
    char more[64] = "";
    if (unlogged)
        snprintf(more, sizeof more, " (and %u similar lines not logged)", unlogged);
    if (level & LLL_ERR)
        tg_error("lws", "%s%s", buf, more);
    else
        tg_warn("lws", "%s%s", buf, more);
}

void tg_ws_setup_lws_logging(void)
{
    lws_set_log_level(LLL_ERR | LLL_WARN, lws_log_emit);
}
