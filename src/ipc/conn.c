/* conn.c: framed IPC connection over a socket (with SCM_RIGHTS) or a bufferevent (see tracegate/conn.h). */
#include "tracegate/conn.h"
#include "ipc/rbuf.h"
#include "tracegate/addr.h"
#include "tracegate/clock.h"
#include "tracegate/frame.h"
#include "tracegate/log.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <event2/event.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/sockios.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define MAX_FDS_PER_READ 4
/* Received fds waiting for their frames (each one rides on a different read): reading stops for
 * a dispatch when this many wait, and beyond it the oldest is closed (Perfetto keeps one). */
#define MAX_RX_FDS 8
#define MAX_READS_PER_EVENT 32
#define READ_BUDGET_PER_EVENT (2u << 20) /* then frames are dispatched (and pauses apply) first */
#define FLUSH_CLOSE_DEFAULT_MS 5000
/* tg_conn_forward_frame: frames this big go by reference, smaller ones are copied (a reference
 * chain costs an allocation); and references stop (frames are copied) while the blocks this
 * connection read into and that are still alive exceed PIN_LIMIT, so a peer cannot make small
 * frames keep many large blocks alive. */
#define FORWARD_REF_MIN 2048u
#define FORWARD_PIN_LIMIT (8u << 20)

/* The frame being offered to on_frame_head. */
enum { HEAD_NONE = 0, HEAD_OFFERED, HEAD_MOVED };

struct pending_fd {
    uint64_t offset; /* absolute output offset of the frame's first byte */
    uint64_t end;    /* and of the byte after its last */
    int fd;
};

/* A received fd and the stream offset of the last byte read with it. The kernel ends a read
 * after the message that carried fds, and a sender passes an fd with its frame's bytes, so the
 * frame that holds that byte is the frame the fd belongs to. */
struct rx_fd {
    uint64_t pos;
    int fd;
};

struct tg_conn {
    struct event_base *base;
    struct tg_conn_cbs cbs;
    void *arg;
    struct tg_conn_opts opts;

    /* exactly one of these backends */
    int fd;
    struct bufferevent *bev;
    struct event *read_ev, *write_ev;
    struct evbuffer *in, *out; /* for bev: its own buffers */
    struct tg_rbuf *rb;        /* socket backend: the blocks `in` refers to */

    struct event *timer_ev;  /* send timeout / idle timeout / flush-close deadline */
    struct event *close_ev;  /* runs on_close from the loop */
    struct event *resume_ev; /* re-dispatches buffered frames after a pause */

    int is_unix;
    uid_t uid;
    pid_t pid;
    char peer[128];

    struct rx_fd rx[MAX_RX_FDS]; /* in stream order */
    size_t n_rx;
    uint64_t in_total;           /* bytes ever read (socket backend) */
    uint64_t frame_start, frame_end; /* the frame being dispatched (stream offsets); equal = none */
    struct pending_fd *fdq;
    size_t fdq_len, fdq_cap;
    uint64_t out_enqueued; /* bytes ever queued (socket backend) */
    uint64_t out_sent;     /* bytes ever sent (socket backend) */

    int closing;         /* teardown started */
    int flushing;        /* close once output drains */
    size_t kernel_outq;  /* the socket's unsent bytes when tg_conn_output_stalled_ms last looked */
    uint64_t bev_drained, bev_drained_seen; /* bytes the bufferevent's output sent; seen by it */
    int read_paused;
    int congested;
    int dispatching;
    int peer_eof; /* the peer hung up while reading was paused: closes once resumed and drained */
    int head_state;  /* HEAD_*: a frame is being offered to on_frame_head */
    size_t head_len; /* its body length */
    char reason[160];

    uint64_t last_progress_ms, last_input_ms, flush_deadline_ms;
    struct tg_conn_stats stats;
};

void tg_conn_opts_default(struct tg_conn_opts *o)
{
    memset(o, 0, sizeof *o);
    o->max_frame = TG_FRAME_MAX_DEFAULT;
    o->out_high = 1u << 20;
    o->out_low = 256u << 10;
    o->out_hard_limit = 64u << 20;
}

static void apply_opts(tg_conn *c, const struct tg_conn_opts *opts)
{
    tg_conn_opts_default(&c->opts);
    if (!opts)
        return;
    c->opts = *opts;
    struct tg_conn_opts d;
    tg_conn_opts_default(&d);
    if (!c->opts.max_frame)
        c->opts.max_frame = d.max_frame;
    if (!c->opts.out_high)
        c->opts.out_high = d.out_high;
    if (!c->opts.out_low || c->opts.out_low > c->opts.out_high)
        c->opts.out_low = c->opts.out_high / 4;
    if (!c->opts.out_hard_limit)
        c->opts.out_hard_limit = d.out_hard_limit;
}

static void schedule_close(tg_conn *c, const char *reason);
static void dispatch_frames(tg_conn *c);
static void arm_timer(tg_conn *c);

/* ---------------------------------------------------------------- output */

static void check_drain(tg_conn *c)
{
    size_t len = tg_conn_output_len(c);
    if (!c->congested && len > c->opts.out_high) {
        c->congested = 1;
    } else if (c->congested && len <= c->opts.out_low) {
        c->congested = 0;
        if (c->cbs.on_drain && !c->closing)
            c->cbs.on_drain(c, c->arg);
    }
    if (c->flushing && len == 0)
        schedule_close(c, c->reason[0] ? c->reason : "closed after flush");
}

static int sock_flush(tg_conn *c)
{
    while (evbuffer_get_length(c->out) > 0) {
        size_t limit = evbuffer_get_length(c->out);
        /* evbuffer_peek walks every chain up to `limit`: bound it, or each sendmsg costs
         * O(whole queue) when many small frames are queued (a socket takes far less anyway) */
        if (limit > (1u << 20))
            limit = 1u << 20;
        int attach = -1;
        if (c->fdq_len) {
            uint64_t at = c->fdq[0].offset;
            if (at == c->out_sent) {
                attach = c->fdq[0].fd;
                /* the fd frame goes in a message of its own, as Perfetto sends it: the kernel ends
                 * the receiver's read with it, and the receiver gives the fd to the frame that
                 * holds the read's last byte (tg_conn_take_fd) */
                if (c->fdq[0].end - c->out_sent < limit)
                    limit = (size_t)(c->fdq[0].end - c->out_sent);
            } else if (at - c->out_sent < limit) {
                limit = (size_t)(at - c->out_sent);
            }
        }
        struct evbuffer_iovec vec[16];
        int nvec = evbuffer_peek(c->out, (ev_ssize_t)limit, NULL, vec, 16);
        if (nvec > 16)
            nvec = 16;
        struct iovec iov[16];
        size_t total = 0;
        for (int i = 0; i < nvec; i++) {
            iov[i].iov_base = vec[i].iov_base;
            iov[i].iov_len = vec[i].iov_len;
            if (total + iov[i].iov_len > limit)
                iov[i].iov_len = limit - total;
            total += iov[i].iov_len;
        }
        struct msghdr msg;
        memset(&msg, 0, sizeof msg);
        msg.msg_iov = iov;
        msg.msg_iovlen = (size_t)nvec;
        union {
            char buf[CMSG_SPACE(sizeof(int))];
            struct cmsghdr align;
        } ctl;
        if (attach >= 0) {
            memset(&ctl, 0, sizeof ctl);
            msg.msg_control = ctl.buf;
            msg.msg_controllen = sizeof ctl.buf;
            struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
            cm->cmsg_level = SOL_SOCKET;
            cm->cmsg_type = SCM_RIGHTS;
            cm->cmsg_len = CMSG_LEN(sizeof(int));
            memcpy(CMSG_DATA(cm), &attach, sizeof(int));
        }
        ssize_t n = sendmsg(c->fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return 0;
            snprintf(c->reason, sizeof c->reason, "write error: %s", strerror(errno));
            return -1;
        }
        evbuffer_drain(c->out, (size_t)n);
        c->out_sent += (uint64_t)n;
        c->stats.bytes_out += (uint64_t)n;
        c->last_progress_ms = tg_mono_ms();
        if (attach >= 0 && n > 0) {
            close(attach);
            memmove(c->fdq, c->fdq + 1, (c->fdq_len - 1) * sizeof *c->fdq);
            c->fdq_len--;
        }
    }
    return 0;
}

static void sock_write_cb(evutil_socket_t fd, short what, void *arg)
{
    tg_conn *c = arg;
    (void)fd;
    (void)what;
    if (c->closing)
        return;
    if (sock_flush(c) != 0) {
        schedule_close(c, c->reason);
        return;
    }
    if (evbuffer_get_length(c->out) == 0)
        event_del(c->write_ev);
    else if (!event_pending(c->write_ev, EV_WRITE, NULL))
        event_add(c->write_ev, NULL); /* the socket is full: wait until it takes more */
    check_drain(c);
}

int tg_conn_write_now(tg_conn *c)
{
    if (c->closing || c->flushing)
        return -1;
    if (!c->bev && evbuffer_get_length(c->out) > 0)
        sock_write_cb(c->fd, EV_WRITE, c);
    return c->closing ? -1 : 0;
}

static int after_enqueue(tg_conn *c)
{
    size_t len = tg_conn_output_len(c);
    if (len > c->opts.out_hard_limit) {
        char why[96];
        snprintf(why, sizeof why, "output buffer over its hard limit (%zu bytes queued)", len);
        schedule_close(c, why);
        return -1;
    }
    if (len > c->opts.out_high)
        c->congested = 1;
    if (!c->bev && len > 0 && !event_pending(c->write_ev, EV_WRITE, NULL)) { /* (pending: added or active) */
        /* written as soon as the callback that queued it returns (frames queued by the same read
         * event go out together), without a round through epoll to learn that an idle socket is
         * writable; only a socket that does not take it all waits for EV_WRITE */
        c->last_progress_ms = tg_mono_ms();
        event_active(c->write_ev, EV_WRITE, 1);
    }
    if (c->opts.send_timeout_ms)
        arm_timer(c);
    return 0;
}

int tg_conn_send(tg_conn *c, const void *body, size_t len, int fd)
{
    if (c->closing || c->flushing)
        return -1;
    if (fd >= 0 && c->is_unix && !c->bev) {
        int dupfd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
        if (dupfd < 0)
            return -1;
        if (c->fdq_len == c->fdq_cap) {
            size_t cap = c->fdq_cap ? c->fdq_cap * 2 : 4;
            struct pending_fd *q = realloc(c->fdq, cap * sizeof *q);
            if (!q) {
                close(dupfd);
                return -1;
            }
            c->fdq = q;
            c->fdq_cap = cap;
        }
        c->fdq[c->fdq_len].offset = c->out_enqueued;
        c->fdq[c->fdq_len].end = c->out_enqueued + len + TG_FRAME_HEADER_SIZE;
        c->fdq[c->fdq_len].fd = dupfd;
        c->fdq_len++;
    }
    if (tg_frame_append(c->out, body, len) != 0) {
        /* half a frame (or an fd without its frame) may be queued: the stream is unusable */
        schedule_close(c, "out of memory");
        return -1;
    }
    c->out_enqueued += len + TG_FRAME_HEADER_SIZE;
    c->stats.frames_out++;
    if (c->bev)
        c->stats.bytes_out += len + TG_FRAME_HEADER_SIZE;
    return after_enqueue(c);
}

/* Output accounting for n framed bytes just added to c->out. */
static int enqueued(tg_conn *c, size_t n)
{
    c->out_enqueued += n;
    c->stats.frames_out++;
    if (c->bev)
        c->stats.bytes_out += n;
    return after_enqueue(c);
}

int tg_conn_forward_frame(tg_conn *from, tg_conn *to)
{
    if (from->head_state != HEAD_OFFERED || from == to || to->closing || to->flushing)
        return -1;
    size_t n = from->head_len + TG_FRAME_HEADER_SIZE;
    int rc;
    size_t by_ref = 0;
    if (from->rb) {
        int ref = n >= FORWARD_REF_MIN && tg_rbuf_pinned(from->rb) <= FORWARD_PIN_LIMIT;
        rc = tg_rbuf_forward(from->rb, from->in, to->out, n, ref, &by_ref);
    } else {
        rc = tg_frame_move(from->in, to->out, from->head_len); /* whole chains move, a partial one is copied */
    }
    if (rc != 0) {
        /* part of the frame may be queued: that stream is unusable */
        schedule_close(to, "out of memory");
        return -1;
    }
    from->head_state = HEAD_MOVED;
    from->stats.frames_forwarded++;
    from->stats.bytes_forwarded_by_ref += by_ref;
    return enqueued(to, n);
}

const uint8_t *tg_conn_frame_peek(tg_conn *c, uint8_t *scratch, size_t cap, size_t *avail)
{
    *avail = 0;
    if (c->head_state != HEAD_OFFERED)
        return NULL;
    size_t len = c->head_len;
    const uint8_t *p = NULL;
    if (c->rb) {
        p = tg_rbuf_view(c->rb, c->in, TG_FRAME_HEADER_SIZE, len);
    } else {
        struct evbuffer_ptr pos;
        struct evbuffer_iovec v;
        if (evbuffer_ptr_set(c->in, &pos, TG_FRAME_HEADER_SIZE, EVBUFFER_PTR_SET) == 0 &&
            evbuffer_peek(c->in, (ev_ssize_t)len, &pos, &v, 1) >= 1 && v.iov_len >= len)
            p = v.iov_base;
    }
    if (p) {
        *avail = len;
        return p;
    }
    size_t n = len < cap ? len : cap;
    struct evbuffer_ptr pos;
    if (evbuffer_ptr_set(c->in, &pos, TG_FRAME_HEADER_SIZE, EVBUFFER_PTR_SET) != 0)
        return NULL;
    ev_ssize_t got = evbuffer_copyout_from(c->in, &pos, scratch, n);
    if (got < 0)
        return NULL;
    *avail = (size_t)got;
    return scratch;
}

/* Index of the first received fd that belongs to the frame being dispatched, or -1. */
static ssize_t frame_fd(const tg_conn *c)
{
    for (size_t i = 0; i < c->n_rx; i++)
        if (c->rx[i].pos >= c->frame_start && c->rx[i].pos < c->frame_end)
            return (ssize_t)i;
    return -1;
}

int tg_conn_has_fd(const tg_conn *c) { return frame_fd(c) >= 0; }

int tg_conn_send_framed(tg_conn *c, struct evbuffer *buf)
{
    if (c->closing || c->flushing)
        return -1;
    size_t n = evbuffer_get_length(buf);
    if (evbuffer_remove_buffer(buf, c->out, n) != (int)n)
        return -1;
    return enqueued(c, n);
}

/* ----------------------------------------------------------------- input */

static void drop_rx(tg_conn *c, size_t i)
{
    close(c->rx[i].fd);
    memmove(&c->rx[i], &c->rx[i + 1], (c->n_rx - i - 1) * sizeof c->rx[0]);
    c->n_rx--;
}

static void keep_fd(tg_conn *c, int fd, uint64_t pos)
{
    if (c->n_rx == MAX_RX_FDS)
        drop_rx(c, 0);
    c->rx[c->n_rx++] = (struct rx_fd){pos, fd};
}

/* Closes the fds of frames that were dispatched without taking them (they lie before the head of
 * `in`), so each frame's fd goes to that frame or to nobody. */
static void drop_consumed_fds(tg_conn *c)
{
    uint64_t head = c->in_total - evbuffer_get_length(c->in);
    while (c->n_rx && c->rx[0].pos < head)
        drop_rx(c, 0);
}

static void sock_read_cb(evutil_socket_t sfd, short what, void *arg)
{
    tg_conn *c = arg;
    (void)sfd;
    (void)what;
    int eof = 0;
    size_t event_bytes = 0;
    for (int iter = 0; iter < MAX_READS_PER_EVENT && !c->closing && event_bytes < READ_BUDGET_PER_EVENT; iter++) {
        /* into a block of our own, appended to `in` by reference: frames can then leave by
         * reference too (tg_conn_forward_frame); the block grows while reads fill it */
        uint8_t *dst;
        size_t room;
        if (tg_rbuf_space(c->rb, &dst, &room) != 0) {
            schedule_close(c, "out of memory");
            return;
        }
        struct iovec iov[1] = {{dst, room}};
        union {
            char buf[CMSG_SPACE(sizeof(int) * MAX_FDS_PER_READ)];
            struct cmsghdr align;
        } ctl;
        struct msghdr msg;
        memset(&msg, 0, sizeof msg);
        msg.msg_iov = iov;
        msg.msg_iovlen = 1;
        if (c->is_unix) {
            msg.msg_control = ctl.buf;
            msg.msg_controllen = sizeof ctl.buf;
        }
        ssize_t n = recvmsg(c->fd, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                break;
            char why[96];
            snprintf(why, sizeof why, "read error: %s", strerror(errno));
            schedule_close(c, why);
            return;
        }
        int got_fds = 0;
        uint64_t last_byte = c->in_total + (n > 0 ? (uint64_t)n - 1 : 0);
        if (c->is_unix && msg.msg_controllen > 0) {
            for (struct cmsghdr *cm = CMSG_FIRSTHDR(&msg); cm; cm = CMSG_NXTHDR(&msg, cm)) {
                if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
                    continue;
                size_t nfd = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
                for (size_t i = 0; i < nfd; i++) {
                    int rfd;
                    memcpy(&rfd, CMSG_DATA(cm) + i * sizeof(int), sizeof(int));
                    if (got_fds++ == 0 && !(msg.msg_flags & MSG_CTRUNC))
                        keep_fd(c, rfd, last_byte);
                    else
                        close(rfd); /* at most one fd per frame: extras are closed */
                }
            }
        }
        if (msg.msg_flags & (MSG_CTRUNC | MSG_TRUNC)) {
            schedule_close(c, "control data truncated (too many file descriptors)");
            return;
        }
        if (n == 0) {
            eof = 1;
            break;
        }
        if (tg_rbuf_commit(c->rb, c->in, (size_t)n) != 0) {
            schedule_close(c, "out of memory");
            return;
        }
        c->in_total += (uint64_t)n;
        c->stats.bytes_in += (uint64_t)n;
        c->last_input_ms = tg_mono_ms();
        event_bytes += (size_t)n;
        if ((size_t)n < room || c->n_rx == MAX_RX_FDS)
            break; /* (their frames are dispatched before more fds are read) */
    }
    dispatch_frames(c);
    tg_rbuf_event_end(c->rb, c->in);
    if (eof && !c->closing) {
        if (c->read_paused && evbuffer_get_length(c->in) > 0)
            c->peer_eof = 1; /* deliver what it sent first: dispatch_frames closes after resume */
        else
            schedule_close(c, "peer closed the connection");
    }
}

/* The body of the frame at the head of `in`, contiguous: in place when its bytes sit back to back
 * in one read block (or one chain), else pulled up. */
static const uint8_t *frame_body(tg_conn *c, size_t len)
{
    if (c->rb) {
        const uint8_t *p = tg_rbuf_view(c->rb, c->in, TG_FRAME_HEADER_SIZE, len);
        if (p)
            return p;
    }
    return tg_frame_body(c->in, len);
}

static void dispatch_frames(tg_conn *c)
{
    if (c->dispatching)
        return; /* re-entered from a callback: the outer loop continues */
    c->dispatching = 1;
    while (!c->closing && !c->read_paused && !c->flushing) {
        size_t len;
        enum tg_frame_status st = tg_frame_peek(c->in, c->opts.max_frame, &len);
        if (st == TG_FRAME_NEED_MORE)
            break;
        if (st == TG_FRAME_OVERSIZE) {
            schedule_close(c, "IPC frame too large");
            break;
        }
        c->stats.frames_in++;
        if (c->bev)
            c->stats.bytes_in += len + TG_FRAME_HEADER_SIZE;
        c->frame_start = c->in_total - evbuffer_get_length(c->in);
        c->frame_end = c->n_rx ? c->frame_start + TG_FRAME_HEADER_SIZE + len : c->frame_start;
        if (c->cbs.on_frame_head) {
            c->head_state = HEAD_OFFERED;
            c->head_len = len;
            int taken = c->cbs.on_frame_head(c, len, c->arg);
            int moved = c->head_state == HEAD_MOVED;
            c->head_state = HEAD_NONE;
            if (c->closing)
                break;
            if (taken) {
                if (!moved)
                    tg_frame_drain(c->in, len);
                if (c->n_rx)
                    drop_consumed_fds(c);
                continue;
            }
        }
        const uint8_t *body = frame_body(c, len);
        if (!body) {
            schedule_close(c, "out of memory");
            break;
        }
        if (c->cbs.on_frame)
            c->cbs.on_frame(c, body, len, c->arg);
        if (c->closing)
            break;
        tg_frame_drain(c->in, len);
        if (c->n_rx)
            drop_consumed_fds(c);
    }
    c->frame_start = c->frame_end = 0;
    c->dispatching = 0;
    if (c->peer_eof && !c->closing && !c->read_paused && !c->flushing)
        schedule_close(c, "peer closed the connection");
}

/* ------------------------------------------------------ bufferevent glue */

static void bev_read_cb(struct bufferevent *bev, void *arg)
{
    tg_conn *c = arg;
    (void)bev;
    c->last_input_ms = tg_mono_ms();
    dispatch_frames(c);
}

static void bev_write_cb(struct bufferevent *bev, void *arg)
{
    tg_conn *c = arg;
    (void)bev;
    c->last_progress_ms = tg_mono_ms();
    check_drain(c);
}

/* The bufferevent's output lost bytes (they were written): progress, seen by
 * tg_conn_output_stalled_ms (a count here, no clock read per drain). */
static void bev_out_cb(struct evbuffer *out, const struct evbuffer_cb_info *info, void *arg)
{
    (void)out;
    ((tg_conn *)arg)->bev_drained += info->n_deleted;
}

static void bev_event_cb(struct bufferevent *bev, short what, void *arg)
{
    tg_conn *c = arg;
    if (what & BEV_EVENT_EOF) {
        dispatch_frames(c);
        /* as for a socket, whose end is not read while paused: the rest is delivered after the
         * resume, then the connection closes (a bufferevent pair reports its end even while the
         * reader is paused, e.g. while a session holds its client for a last call) */
        int unlinked = bufferevent_getfd(bev) < 0 && !bufferevent_pair_get_partner(bev); /* a freed pair partner */
        if (c->read_paused && !c->closing && !(c->flushing && unlinked)) /* (a flush could never end) */
            c->peer_eof = 1;
        else
            schedule_close(c, "peer closed the connection");
    } else if (what & BEV_EVENT_ERROR) {
        char why[160];
        int e = EVUTIL_SOCKET_ERROR();
        unsigned long tls = 0; /* a TLS layer anywhere under a filter says why it failed */
        for (struct bufferevent *b = bev; b && !tls; b = bufferevent_get_underlying(b))
            tls = bufferevent_get_openssl_error(b);
        const char *tls_why = tls ? ERR_reason_error_string(tls) : NULL;
        if (tls)
            snprintf(why, sizeof why, "connection error: TLS: %s", tls_why ? tls_why : "failure");
        else
            snprintf(why, sizeof why, "connection error: %s", e ? evutil_socket_error_to_string(e) : "transport failure");
        schedule_close(c, why);
    } else if (what & BEV_EVENT_TIMEOUT) {
        schedule_close(c, "timeout");
    }
}

/* ------------------------------------------------------------ lifecycle */

static void conn_free(tg_conn *c)
{
    if (c->read_ev)
        event_free(c->read_ev);
    if (c->write_ev)
        event_free(c->write_ev);
    if (c->timer_ev)
        event_free(c->timer_ev);
    if (c->close_ev)
        event_free(c->close_ev);
    if (c->resume_ev)
        event_free(c->resume_ev);
    if (c->bev) {
        /* the partner of a bufferevent pair is not told of a free: it gets its end of stream */
        if (bufferevent_pair_get_partner(c->bev))
            bufferevent_flush(c->bev, EV_WRITE, BEV_FINISHED);
        bufferevent_free(c->bev);
    } else {
        if (c->in)
            evbuffer_free(c->in);
        if (c->out)
            evbuffer_free(c->out);
        tg_rbuf_free(c->rb);
        if (c->fd >= 0)
            close(c->fd);
    }
    for (size_t i = 0; i < c->fdq_len; i++)
        close(c->fdq[i].fd);
    free(c->fdq);
    for (size_t i = 0; i < c->n_rx; i++)
        close(c->rx[i].fd);
    free(c);
}

static void close_cb(evutil_socket_t fd, short what, void *arg)
{
    tg_conn *c = arg;
    (void)fd;
    (void)what;
    if (c->cbs.on_close)
        c->cbs.on_close(c, c->reason, c->arg);
    conn_free(c);
}

static void schedule_close(tg_conn *c, const char *reason)
{
    if (c->closing)
        return;
    c->closing = 1;
    if (reason && reason != c->reason)
        snprintf(c->reason, sizeof c->reason, "%s", reason);
    if (c->read_ev)
        event_del(c->read_ev);
    if (c->write_ev)
        event_del(c->write_ev);
    if (c->timer_ev)
        event_del(c->timer_ev);
    if (c->resume_ev)
        event_del(c->resume_ev);
    if (c->bev)
        bufferevent_disable(c->bev, EV_READ | EV_WRITE);
    event_active(c->close_ev, EV_TIMEOUT, 0);
}

void tg_conn_close(tg_conn *c, const char *reason)
{
    schedule_close(c, reason ? reason : "closed");
}

void tg_conn_close_after_flush(tg_conn *c, const char *reason)
{
    if (c->closing || c->flushing)
        return;
    snprintf(c->reason, sizeof c->reason, "%s", reason ? reason : "closed");
    c->flushing = 1;
    tg_conn_pause_read(c);
    int ms = c->opts.send_timeout_ms ? c->opts.send_timeout_ms : FLUSH_CLOSE_DEFAULT_MS;
    c->flush_deadline_ms = tg_mono_ms() + (uint64_t)ms;
    arm_timer(c);
    check_drain(c);
}

int tg_conn_is_closing(const tg_conn *c) { return c->closing || c->flushing; }

void tg_conn_destroy(tg_conn *c)
{
    if (c)
        conn_free(c);
}

static void timer_cb(evutil_socket_t fd, short what, void *arg)
{
    tg_conn *c = arg;
    (void)fd;
    (void)what;
    if (c->closing)
        return;
    uint64_t now = tg_mono_ms();
    if (c->flushing && now >= c->flush_deadline_ms) {
        schedule_close(c, c->reason);
        return;
    }
    if (c->opts.send_timeout_ms && tg_conn_output_len(c) > 0 &&
        now - c->last_progress_ms >= (uint64_t)c->opts.send_timeout_ms) {
        schedule_close(c, "send timeout: peer is not reading");
        return;
    }
    if (c->opts.idle_timeout_ms && now - c->last_input_ms >= (uint64_t)c->opts.idle_timeout_ms) {
        schedule_close(c, "idle timeout");
        return;
    }
    arm_timer(c);
}

/* The timer fires at the earliest of the active deadlines. */
static void arm_timer(tg_conn *c)
{
    if (c->closing)
        return;
    uint64_t now = tg_mono_ms(), next = UINT64_MAX;
    if (c->opts.send_timeout_ms && tg_conn_output_len(c) > 0)
        next = c->last_progress_ms + (uint64_t)c->opts.send_timeout_ms;
    if (c->opts.idle_timeout_ms) {
        uint64_t t = c->last_input_ms + (uint64_t)c->opts.idle_timeout_ms;
        if (t < next)
            next = t;
    }
    if (c->flushing && c->flush_deadline_ms < next)
        next = c->flush_deadline_ms;
    if (next == UINT64_MAX)
        return;
    uint64_t wait = next > now ? next - now : 0;
    struct timeval tv = {.tv_sec = (time_t)(wait / 1000), .tv_usec = (suseconds_t)((wait % 1000) * 1000)};
    event_add(c->timer_ev, &tv);
}

static void resume_cb(evutil_socket_t fd, short what, void *arg);

static tg_conn *conn_alloc(struct event_base *base, const struct tg_conn_opts *opts, const struct tg_conn_cbs *cbs,
                           void *arg)
{
    tg_conn *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->base = base;
    c->fd = -1;
    c->uid = 0;
    c->pid = -1;
    if (cbs)
        c->cbs = *cbs;
    c->arg = arg;
    apply_opts(c, opts);
    c->last_progress_ms = c->last_input_ms = tg_mono_ms();
    c->timer_ev = event_new(base, -1, 0, timer_cb, c);
    c->close_ev = event_new(base, -1, 0, close_cb, c);
    c->resume_ev = event_new(base, -1, 0, resume_cb, c);
    if (!c->timer_ev || !c->close_ev || !c->resume_ev) {
        conn_free(c);
        return NULL;
    }
    return c;
}

static void describe_peer(tg_conn *c, int fd)
{
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    snprintf(c->peer, sizeof c->peer, "fd%d", fd);
    if (getpeername(fd, (struct sockaddr *)&ss, &sl) != 0)
        return;
    if (ss.ss_family == AF_UNIX) {
        c->is_unix = 1;
        struct ucred cred;
        socklen_t cl = sizeof cred;
        if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cl) == 0) {
            c->uid = cred.uid;
            c->pid = cred.pid;
        }
        snprintf(c->peer, sizeof c->peer, "unix(pid=%d,uid=%u)", (int)c->pid, (unsigned)c->uid);
    } else {
        tg_sockaddr_text(&ss, c->peer, sizeof c->peer);
    }
}

tg_conn *tg_conn_new_fd(struct event_base *base, int fd, const struct tg_conn_opts *opts,
                        const struct tg_conn_cbs *cbs, void *arg)
{
    tg_conn *c = conn_alloc(base, opts, cbs, arg);
    if (!c) {
        close(fd);
        return NULL;
    }
    c->fd = fd;
    evutil_make_socket_nonblocking(fd);
    if (c->opts.no_fd_passing)
        snprintf(c->peer, sizeof c->peer, "fd%d", fd); /* not a local UNIX peer: no fds, no SO_PEERCRED */
    else
        describe_peer(c, fd);
    c->in = evbuffer_new();
    c->out = evbuffer_new();
    c->rb = tg_rbuf_new();
    c->read_ev = event_new(base, fd, EV_READ | EV_PERSIST, sock_read_cb, c);
    c->write_ev = event_new(base, fd, EV_WRITE | EV_PERSIST, sock_write_cb, c);
    if (!c->in || !c->out || !c->rb || !c->read_ev || !c->write_ev) {
        conn_free(c);
        return NULL;
    }
    event_add(c->read_ev, NULL);
    arm_timer(c);
    return c;
}

tg_conn *tg_conn_new_bev(struct event_base *base, struct bufferevent *bev, const struct tg_conn_opts *opts,
                         const struct tg_conn_cbs *cbs, void *arg)
{
    tg_conn *c = conn_alloc(base, opts, cbs, arg);
    if (!c) {
        if (bufferevent_pair_get_partner(bev)) /* as conn_free: the partner gets its end of stream */
            bufferevent_flush(bev, EV_WRITE, BEV_FINISHED);
        bufferevent_free(bev);
        return NULL;
    }
    c->bev = bev;
    c->in = bufferevent_get_input(bev);
    c->out = bufferevent_get_output(bev);
    evutil_socket_t fd = bufferevent_getfd(bev);
    if (fd >= 0)
        describe_peer(c, fd);
    else
        snprintf(c->peer, sizeof c->peer, "bufferevent");
    c->is_unix = 0; /* fds cannot cross a filtered stream */
    bufferevent_setcb(bev, bev_read_cb, bev_write_cb, bev_event_cb, c);
    bufferevent_setwatermark(bev, EV_WRITE, c->opts.out_low, 0);
    evbuffer_add_cb(bufferevent_get_output(bev), bev_out_cb, c);
    bufferevent_enable(bev, EV_READ | EV_WRITE);
    /* bytes read before we took over (a TLS peer's first frames, decrypted with the end of
     * its handshake) get no read callback of their own: dispatch them from the loop */
    if (evbuffer_get_length(c->in) > 0)
        event_active(c->resume_ev, EV_TIMEOUT, 0);
    arm_timer(c);
    return c;
}

void tg_conn_set_cbs(tg_conn *c, const struct tg_conn_cbs *cbs, void *arg)
{
    c->cbs = *cbs;
    c->arg = arg;
}

int tg_conn_take_fd(tg_conn *c)
{
    ssize_t i = frame_fd(c);
    if (i < 0)
        return -1;
    int fd = c->rx[i].fd;
    memmove(&c->rx[i], &c->rx[i + 1], (c->n_rx - (size_t)i - 1) * sizeof c->rx[0]);
    c->n_rx--;
    return fd;
}

void tg_conn_pause_read(tg_conn *c)
{
    c->read_paused = 1;
    if (c->bev)
        bufferevent_disable(c->bev, EV_READ);
    else if (c->read_ev)
        event_del(c->read_ev);
}

static void resume_cb(evutil_socket_t fd, short what, void *arg)
{
    tg_conn *c = arg;
    (void)fd;
    (void)what;
    dispatch_frames(c);
    if (c->rb)
        tg_rbuf_event_end(c->rb, c->in); /* a connection that goes idle now holds no block */
}

void tg_conn_resume_read(tg_conn *c)
{
    if (c->closing || c->flushing || !c->read_paused)
        return;
    c->read_paused = 0;
    if (c->bev)
        bufferevent_enable(c->bev, EV_READ);
    else
        event_add(c->read_ev, NULL);
    /* frames already buffered are dispatched from the loop, not from here (and a peer that hung
     * up meanwhile is closed there) */
    if (evbuffer_get_length(c->in) > 0 || c->peer_eof)
        event_active(c->resume_ev, EV_TIMEOUT, 0);
}

size_t tg_conn_output_len(const tg_conn *c) { return c->out ? evbuffer_get_length(c->out) : 0; }
int tg_conn_is_congested(const tg_conn *c) { return c->congested; }

uint64_t tg_conn_output_stalled_ms(tg_conn *c, uint64_t now_ms)
{
    /* the kernel's unsent bytes going down is the peer reading too (its buffer can hold
     * megabytes that the peer reads before our own queue moves) */
    if (c->bev_drained != c->bev_drained_seen) {
        c->bev_drained_seen = c->bev_drained;
        c->last_progress_ms = now_ms;
    }
    int fd = c->bev ? bufferevent_getfd(c->bev) : c->fd;
    int outq;
    if (fd >= 0 && ioctl(fd, SIOCOUTQ, &outq) == 0) {
        if ((size_t)outq < c->kernel_outq)
            c->last_progress_ms = now_ms;
        c->kernel_outq = (size_t)outq;
    }
    if (tg_conn_output_len(c) == 0 || now_ms < c->last_progress_ms)
        return 0;
    return now_ms - c->last_progress_ms;
}
int tg_conn_is_unix(const tg_conn *c) { return c->is_unix; }
uid_t tg_conn_peer_uid(const tg_conn *c) { return c->uid; }
pid_t tg_conn_peer_pid(const tg_conn *c) { return c->pid; }
const char *tg_conn_peer_name(const tg_conn *c) { return c->peer; }
int tg_conn_fd(const tg_conn *c) { return c->bev ? -1 : c->fd; }
struct bufferevent *tg_conn_bev(const tg_conn *c) { return c->bev; }
struct event_base *tg_conn_base(const tg_conn *c) { return c->base; }

void tg_conn_get_stats(const tg_conn *c, struct tg_conn_stats *st)
{
    *st = c->stats;
}
