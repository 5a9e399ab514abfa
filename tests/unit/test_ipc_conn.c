/* test_ipc_conn.c: tg_conn on socketpairs: fds ride on the first byte of their own frame (also when
 * several fd frames are queued back to back), extra/truncated fds, the single close path (close from
 * a callback, close after flush, EOF with frames buffered), send timeout, hard limit, congestion and
 * on_drain, pause/resume, idle timeout, the bufferevent backend, and a reply queued from a callback
 * written in the same loop turn, written at once (tg_conn_write_now), and how long unread output
 * has been stalled. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "tracegate/clock.h"
#include "tracegate/conn.h"
#include "tracegate/frame.h"

#include "tg_test_util.h"

#define TIMEOUT_MS 10000

static int make_memfd(const char *content)
{
    int fd = memfd_create("tg-conn-test", MFD_CLOEXEC);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, content, strlen(content)), (ssize_t)strlen(content));
    return fd;
}

static void fd_content(int fd, char *out, size_t cap)
{
    ssize_t n = pread(fd, out, cap - 1, 0);
    assert_true(n >= 0);
    out[n] = 0;
}

/* What a conn's callbacks saw. */
struct rec {
    struct event_base *base;
    tg_conn *conn;
    size_t frames;
    uint8_t last[256];
    size_t last_len;
    int closes;
    char reason[200];
    int drains;
    int close_in_frame;      /* call tg_conn_close from on_frame at this frame number (1-based) */
    int closed_inside_close; /* on_close ran from inside tg_conn_close (must not happen) */
    int in_close_call;
    int pause_at;            /* pause reading at this frame number */
    size_t take_fds_from;    /* only take fds at this frame number and later (0 = always) */
    uint32_t seq_errors, next_seq;
    int fds_taken[16];
    size_t fd_frames[16]; /* the frame number (1-based) each fd was taken in */
    int n_fds_taken;
};

static void rec_on_frame(tg_conn *c, const uint8_t *body, size_t len, void *arg)
{
    struct rec *r = arg;
    r->frames++;
    r->last_len = len < sizeof r->last ? len : sizeof r->last;
    memcpy(r->last, body, r->last_len);
    if (len >= 4) { /* bodies carry a sequence number */
        uint32_t seq = (uint32_t)body[0] | (uint32_t)body[1] << 8 | (uint32_t)body[2] << 16 | (uint32_t)body[3] << 24;
        if (seq != r->next_seq)
            r->seq_errors++;
        r->next_seq = seq + 1;
    }
    int fd = r->frames >= r->take_fds_from ? tg_conn_take_fd(c) : -1;
    if (fd >= 0 && r->n_fds_taken < 16) {
        r->fd_frames[r->n_fds_taken] = r->frames;
        r->fds_taken[r->n_fds_taken++] = fd;
    }
    else if (fd >= 0)
        close(fd);
    if (r->close_in_frame && (int)r->frames == r->close_in_frame) {
        r->in_close_call = 1;
        tg_conn_close(c, "closed by the test");
        r->in_close_call = 0;
    }
    if (r->pause_at && (int)r->frames == r->pause_at)
        tg_conn_pause_read(c);
}

static void rec_on_close(tg_conn *c, const char *reason, void *arg)
{
    struct rec *r = arg;
    r->closes++;
    if (r->in_close_call)
        r->closed_inside_close = 1;
    snprintf(r->reason, sizeof r->reason, "%s", reason ? reason : "");
    r->conn = NULL;
}

static void rec_on_drain(tg_conn *c, void *arg)
{
    ((struct rec *)arg)->drains++;
}

static const struct tg_conn_cbs k_rec_cbs = {.on_frame = rec_on_frame, .on_close = rec_on_close, .on_drain = rec_on_drain};

static int rec_closed(void *arg)
{
    return ((struct rec *)arg)->closes > 0;
}

struct frames_wait {
    struct rec *r;
    size_t n;
};

static int rec_has_frames(void *arg)
{
    struct frames_wait *w = arg;
    return w->r->frames >= w->n || w->r->closes;
}

static int output_empty(void *arg)
{
    struct rec *r = arg;
    return !r->conn || tg_conn_output_len(r->conn) == 0;
}

static void put_seq(uint8_t *b, uint32_t seq)
{
    tg_frame_put_header(b, seq);
}

/* Blocking write of one framed body on a raw socket. */
static void raw_frame_write(int fd, const void *body, size_t len)
{
    uint8_t hdr[4];
    tg_frame_put_header(hdr, (uint32_t)len);
    assert_int_equal(write(fd, hdr, 4), 4);
    assert_int_equal(write(fd, body, len), (ssize_t)len);
}

struct fx {
    struct event_base *base;
    int sp[2];
    int fds_at_start;
};

static int setup(void **state)
{
    struct fx *f = calloc(1, sizeof *f);
    assert_non_null(f);
    f->fds_at_start = tg_test_count_open_fds();
    f->base = event_base_new();
    assert_non_null(f->base);
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, f->sp), 0);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fx *f = *state;
    if (f->sp[0] >= 0)
        close(f->sp[0]);
    if (f->sp[1] >= 0)
        close(f->sp[1]);
    event_base_free(f->base);
    int now = tg_test_count_open_fds(), then = f->fds_at_start;
    free(f);
    assert_int_equal(now, then); /* no fd leaked */
    return 0;
}

/* ----------------------------------------------------------------- fds */

/* Six frames queued before the loop runs, five of them with an fd: each fd
 * must arrive with the first byte of its own frame, in a message holding only
 * that frame (the kernel ends a read after such a message, and the receiver
 * pairs the fd with the frame that ends its read). */
static void test_fd_on_first_byte_back_to_back(void **state)
{
    struct fx *f = *state;
    struct rec r = {.base = f->base};
    r.conn = tg_conn_new_fd(f->base, f->sp[0], NULL, &k_rec_cbs, &r);
    f->sp[0] = -1;
    assert_non_null(r.conn);
    assert_true(tg_conn_is_unix(r.conn));

    enum { NF = 6 };
    static const int with_fd[NF] = {1, 1, 0, 1, 1, 1};
    size_t start[NF], total = 0;
    for (int i = 0; i < NF; i++) {
        uint8_t body[100];
        size_t len = 20 + (size_t)i * 7;
        memset(body, 'a' + i, sizeof body);
        start[i] = total;
        total += 4 + len;
        int fd = -1;
        if (with_fd[i]) {
            char content[32];
            snprintf(content, sizeof content, "fd-of-frame-%d", i);
            fd = make_memfd(content);
        }
        assert_int_equal(tg_conn_send(r.conn, body, len, fd), 0);
        if (fd >= 0)
            close(fd); /* the conn sends its own duplicate */
    }
    assert_true(tg_test_run_until(f->base, output_empty, &r, TIMEOUT_MS));

    /* read everything back, noting at which stream offset each fd came in */
    size_t got = 0;
    int fds_seen = 0;
    while (got < total) {
        uint8_t buf[4096];
        union {
            char b[CMSG_SPACE(sizeof(int) * 4)];
            struct cmsghdr align;
        } ctl;
        struct iovec iov = {buf, sizeof buf};
        struct msghdr msg;
        memset(&msg, 0, sizeof msg);
        msg.msg_iov = &iov;
        msg.msg_iovlen = 1;
        msg.msg_control = ctl.b;
        msg.msg_controllen = sizeof ctl.b;
        struct pollfd pfd = {f->sp[1], POLLIN, 0};
        assert_int_equal(poll(&pfd, 1, tg_test_ms(2000)), 1);
        ssize_t n = recvmsg(f->sp[1], &msg, MSG_CMSG_CLOEXEC);
        assert_true(n > 0);
        for (struct cmsghdr *cm = CMSG_FIRSTHDR(&msg); cm; cm = CMSG_NXTHDR(&msg, cm)) {
            size_t nfd = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
            for (size_t k = 0; k < nfd; k++) {
                int rfd;
                memcpy(&rfd, CMSG_DATA(cm) + k * sizeof(int), sizeof rfd);
                char content[64];
                fd_content(rfd, content, sizeof content);
                close(rfd);
                fds_seen++;
                /* the frame that holds the read's last byte: it must start in this read (the fd
                 * rode on its first byte) and end with it (alone in its message) */
                size_t last = got + (size_t)n - 1;
                int frame = -1;
                for (int i = 0; i < NF; i++)
                    if (start[i] <= last && last < start[i] + 4 + 20 + (size_t)i * 7)
                        frame = i;
                assert_true(frame >= 0);
                char want[32];
                snprintf(want, sizeof want, "fd-of-frame-%d", frame);
                if (!with_fd[frame] || strcmp(content, want) != 0)
                    fail_msg("the read ending in frame %d came with fd '%s'", frame, content);
                if (start[frame] < got)
                    fail_msg("fd '%s' arrived after its frame's first byte (read from %zu, frame at %zu)", content,
                             got, start[frame]);
                if (last + 1 != start[frame] + 4 + 20 + (size_t)frame * 7)
                    fail_msg("frame %d's fd came with bytes of the next frame", frame);
            }
        }
        got += (size_t)n;
    }
    assert_int_equal(fds_seen, 5);
    tg_conn_destroy(r.conn);
}

/* sendmsg of one framed body (seq in its first 4 bytes, `len` >= 4) with an fd whose content is
 * `content`. */
static void raw_frame_send_fd(int sock, uint32_t seq, size_t len, const char *content)
{
    uint8_t *frame = calloc(1, 4 + len);
    assert_non_null(frame);
    tg_frame_put_header(frame, (uint32_t)len);
    put_seq(frame + 4, seq);
    int fd = make_memfd(content);
    union {
        char b[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } ctl;
    memset(&ctl, 0, sizeof ctl);
    struct iovec iov = {frame, 4 + len};
    struct msghdr msg;
    memset(&msg, 0, sizeof msg);
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = ctl.b;
    msg.msg_controllen = sizeof ctl.b;
    struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(cm), &fd, sizeof fd);
    assert_int_equal(sendmsg(sock, &msg, 0), (ssize_t)(4 + len));
    close(fd);
    free(frame);
}

static void raw_seq_frame(int sock, uint32_t seq, size_t len)
{
    uint8_t body[64];
    assert_true(len >= 4 && len <= sizeof body);
    memset(body, 0, sizeof body);
    put_seq(body, seq);
    raw_frame_write(sock, body, len);
}

/* A peer's frames arrive in one read with an fd that belongs to a later one (the service's reply
 * to RegisterDataSource and then SetupTracing with the SMB): the kernel delivers the fd with the
 * read, and the fd must reach the frame it came with, never the first frame dispatched. A frame
 * that does not take its fd does not pass it on either. */
static void test_fd_goes_to_its_own_frame(void **state)
{
    struct fx *f = *state;
    struct rec r = {.base = f->base};
    /* everything is queued before the connection reads: its first read takes 1..3 at once */
    raw_seq_frame(f->sp[1], 0, 20);                 /* frame 1: no fd */
    raw_seq_frame(f->sp[1], 1, 40);                 /* frame 2: no fd */
    raw_frame_send_fd(f->sp[1], 2, 30, "frame-3");  /* frame 3: its fd */
    raw_seq_frame(f->sp[1], 3, 20);                 /* frame 4: no fd, read after it */
    raw_frame_send_fd(f->sp[1], 4, 70000, "frame-5"); /* frame 5: larger than one read block */
    raw_seq_frame(f->sp[1], 5, 20);                 /* frame 6 */
    r.conn = tg_conn_new_fd(f->base, f->sp[0], NULL, &k_rec_cbs, &r);
    f->sp[0] = -1;
    struct frames_wait w = {&r, 6};
    assert_true(tg_test_run_until(f->base, rec_has_frames, &w, TIMEOUT_MS));
    assert_int_equal(r.closes, 0);
    assert_int_equal(r.seq_errors, 0);
    assert_int_equal(r.n_fds_taken, 2);
    char content[16];
    assert_int_equal(r.fd_frames[0], 3);
    fd_content(r.fds_taken[0], content, sizeof content);
    assert_string_equal(content, "frame-3");
    assert_int_equal(r.fd_frames[1], 5);
    fd_content(r.fds_taken[1], content, sizeof content);
    assert_string_equal(content, "frame-5");
    close(r.fds_taken[0]);
    close(r.fds_taken[1]);

    /* frame 7 comes with an fd but only frame 8 asks: it gets none, and 7's is closed (the
     * fixture's teardown counts descriptors) */
    r.take_fds_from = 8;
    raw_frame_send_fd(f->sp[1], 6, 8, "frame-7");
    raw_seq_frame(f->sp[1], 7, 8);
    w.n = 8;
    assert_true(tg_test_run_until(f->base, rec_has_frames, &w, TIMEOUT_MS));
    assert_int_equal(r.n_fds_taken, 2);
    tg_conn_destroy(r.conn);
}

/* Receiving: one fd per frame is kept; extra fds in the same message are
 * closed; a message whose fds do not fit (MSG_CTRUNC) closes the connection. */
static void test_fd_receive_extras_and_truncation(void **state)
{
    struct fx *f = *state;
    struct rec r = {.base = f->base};
    r.conn = tg_conn_new_fd(f->base, f->sp[0], NULL, &k_rec_cbs, &r);
    f->sp[0] = -1;

    /* 2 fds on one frame: the first is handed out, the second is closed */
    uint8_t frame[8];
    tg_frame_put_header(frame, 4);
    put_seq(frame + 4, 0);
    int fds[10];
    for (int i = 0; i < 10; i++) {
        char content[16];
        snprintf(content, sizeof content, "fd%d", i);
        fds[i] = make_memfd(content);
    }
    union {
        char b[CMSG_SPACE(sizeof(int) * 10)];
        struct cmsghdr align;
    } ctl;
    struct iovec iov = {frame, sizeof frame};
    struct msghdr msg;
    memset(&msg, 0, sizeof msg);
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = ctl.b;
    msg.msg_controllen = CMSG_SPACE(sizeof(int) * 2);
    struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof(int) * 2);
    memcpy(CMSG_DATA(cm), fds, sizeof(int) * 2);
    assert_int_equal(sendmsg(f->sp[1], &msg, 0), (ssize_t)sizeof frame);
    struct frames_wait w = {&r, 1};
    assert_true(tg_test_run_until(f->base, rec_has_frames, &w, TIMEOUT_MS));
    assert_int_equal(r.n_fds_taken, 1);
    char content[16];
    fd_content(r.fds_taken[0], content, sizeof content);
    assert_string_equal(content, "fd0");
    close(r.fds_taken[0]);
    assert_int_equal(r.closes, 0);

    /* 10 fds overflow the receive control space: connection torn down, nothing leaks */
    put_seq(frame + 4, 1);
    msg.msg_controllen = CMSG_SPACE(sizeof(int) * 10);
    cm = CMSG_FIRSTHDR(&msg);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof(int) * 10);
    memcpy(CMSG_DATA(cm), fds, sizeof(int) * 10);
    assert_int_equal(sendmsg(f->sp[1], &msg, 0), (ssize_t)sizeof frame);
    assert_true(tg_test_run_until(f->base, rec_closed, &r, TIMEOUT_MS));
    assert_int_equal(r.closes, 1);
    assert_non_null(strstr(r.reason, "truncated"));
    assert_int_equal(r.n_fds_taken, 1);
    for (int i = 0; i < 10; i++)
        close(fds[i]);
}

/* An fd nobody took in its own frame is closed (not handed to a later frame),
 * and a later frame's own fd is handed out. */
static void test_fd_slot_replaced_not_leaked(void **state)
{
    struct fx *f = *state;
    struct rec r = {.base = f->base, .take_fds_from = 3};
    r.conn = tg_conn_new_fd(f->base, f->sp[0], NULL, &k_rec_cbs, &r);
    f->sp[0] = -1;
    for (uint32_t i = 0; i < 3; i++) {
        uint8_t frame[8];
        tg_frame_put_header(frame, 4);
        put_seq(frame + 4, i);
        char content[16];
        snprintf(content, sizeof content, "slot%u", i);
        int fd = make_memfd(content);
        union {
            char b[CMSG_SPACE(sizeof(int))];
            struct cmsghdr align;
        } ctl;
        memset(&ctl, 0, sizeof ctl);
        struct iovec iov = {frame, sizeof frame};
        struct msghdr msg;
        memset(&msg, 0, sizeof msg);
        msg.msg_iov = &iov;
        msg.msg_iovlen = 1;
        msg.msg_control = ctl.b;
        msg.msg_controllen = sizeof ctl.b;
        struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
        cm->cmsg_level = SOL_SOCKET;
        cm->cmsg_type = SCM_RIGHTS;
        cm->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(cm), &fd, sizeof fd);
        assert_int_equal(sendmsg(f->sp[1], &msg, 0), (ssize_t)sizeof frame);
        close(fd);
        struct frames_wait w = {&r, i + 1};
        assert_true(tg_test_run_until(f->base, rec_has_frames, &w, TIMEOUT_MS));
    }
    assert_int_equal(r.n_fds_taken, 1);
    char content[16];
    fd_content(r.fds_taken[0], content, sizeof content);
    assert_string_equal(content, "slot2");
    close(r.fds_taken[0]);
    tg_conn_destroy(r.conn); /* teardown checks that slot0 and slot1 were closed */
}

/* A TCP-like (non-UNIX) conn, or a bufferevent conn, drops fds instead of failing. */
static void test_bev_backend_drops_fds(void **state)
{
    struct fx *f = *state;
    struct bufferevent *bev = bufferevent_socket_new(f->base, f->sp[0], BEV_OPT_CLOSE_ON_FREE);
    assert_non_null(bev);
    f->sp[0] = -1;
    struct rec r = {.base = f->base};
    r.conn = tg_conn_new_bev(f->base, bev, NULL, &k_rec_cbs, &r);
    assert_non_null(r.conn);
    assert_false(tg_conn_is_unix(r.conn));
    assert_int_equal(tg_conn_fd(r.conn), -1);
    int mfd = make_memfd("x");
    uint8_t body[4];
    put_seq(body, 0);
    assert_int_equal(tg_conn_send(r.conn, body, 4, mfd), 0);
    close(mfd);
    assert_true(tg_test_run_until(f->base, output_empty, &r, TIMEOUT_MS));
    uint8_t in[8];
    union {
        char b[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } ctl;
    struct iovec iov = {in, sizeof in};
    struct msghdr msg;
    memset(&msg, 0, sizeof msg);
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = ctl.b;
    msg.msg_controllen = sizeof ctl.b;
    assert_int_equal(recvmsg(f->sp[1], &msg, 0), 8);
    assert_int_equal(msg.msg_controllen, 0); /* no fd came along */
    assert_memory_equal(in + 4, body, 4);
    /* and frames flow in through the bufferevent */
    for (uint32_t i = 0; i < 3; i++) {
        put_seq(body, i);
        raw_frame_write(f->sp[1], body, 4);
    }
    struct frames_wait w = {&r, 3};
    assert_true(tg_test_run_until(f->base, rec_has_frames, &w, TIMEOUT_MS));
    assert_int_equal(r.frames, 3);
    assert_int_equal(r.seq_errors, 0);
    /* peer EOF -> the single close path */
    close(f->sp[1]);
    f->sp[1] = -1;
    assert_true(tg_test_run_until(f->base, rec_closed, &r, TIMEOUT_MS));
    assert_int_equal(r.closes, 1);
}

/* ------------------------------------------------------------ closing */

static void test_close_from_callback_runs_on_close_once_from_loop(void **state)
{
    struct fx *f = *state;
    struct rec r = {.base = f->base, .close_in_frame = 2};
    r.conn = tg_conn_new_fd(f->base, f->sp[0], NULL, &k_rec_cbs, &r);
    f->sp[0] = -1;
    /* five frames in one write: the conn must stop dispatching after the close */
    uint8_t all[5 * 8];
    for (uint32_t i = 0; i < 5; i++) {
        tg_frame_put_header(all + i * 8, 4);
        put_seq(all + i * 8 + 4, i);
    }
    assert_int_equal(write(f->sp[1], all, sizeof all), (ssize_t)sizeof all);
    assert_true(tg_test_run_until(f->base, rec_closed, &r, TIMEOUT_MS));
    assert_int_equal(r.frames, 2);
    assert_int_equal(r.closes, 1);
    assert_false(r.closed_inside_close);
    assert_string_equal(r.reason, "closed by the test");
    tg_test_run_until(f->base, NULL, NULL, 20);
    assert_int_equal(r.closes, 1);
    /* the socket was closed: the peer sees EOF */
    char b;
    assert_int_equal(read(f->sp[1], &b, 1), 0);
}

static void test_close_after_flush_delivers_everything(void **state)
{
    struct fx *f = *state;
    struct rec r = {.base = f->base};
    r.conn = tg_conn_new_fd(f->base, f->sp[0], NULL, &k_rec_cbs, &r);
    f->sp[0] = -1;
    enum { N = 400, LEN = 10000 };
    uint8_t *body = calloc(1, LEN);
    assert_non_null(body);
    for (uint32_t i = 0; i < N; i++) {
        put_seq(body, i);
        assert_int_equal(tg_conn_send(r.conn, body, LEN, -1), 0);
    }
    free(body);
    tg_conn_close_after_flush(r.conn, "done");
    assert_true(tg_conn_is_closing(r.conn));
    assert_int_equal(tg_conn_send(r.conn, "x", 1, -1), -1); /* nothing more is queued */
    /* a reader on the other side (in the loop) drains 4 MB */
    tg_frame_reader *rd = tg_frame_reader_new(0);
    size_t frames = 0;
    uint32_t bad = 0;
    int eof = 0;
    evutil_make_socket_nonblocking(f->sp[1]);
    for (int iter = 0; iter < 100000 && !eof; iter++) {
        event_base_loop(f->base, EVLOOP_NONBLOCK);
        uint8_t buf[65536];
        ssize_t n = read(f->sp[1], buf, sizeof buf);
        if (n == 0)
            eof = 1;
        else if (n > 0)
            tg_frame_reader_feed(rd, buf, (size_t)n);
        else
            usleep(100);
        const uint8_t *fb;
        size_t fl;
        while (tg_frame_reader_next(rd, &fb, &fl) == TG_FRAME_READY) {
            uint32_t seq = (uint32_t)fb[0] | (uint32_t)fb[1] << 8 | (uint32_t)fb[2] << 16 | (uint32_t)fb[3] << 24;
            if (seq != frames || fl != LEN)
                bad++;
            frames++;
        }
    }
    tg_frame_reader_free(rd);
    assert_true(eof);
    assert_int_equal(frames, N);
    assert_int_equal(bad, 0);
    assert_true(tg_test_run_until(f->base, rec_closed, &r, TIMEOUT_MS));
    assert_int_equal(r.closes, 1);
    assert_string_equal(r.reason, "done");
}

static void test_eof_dispatches_buffered_frames_first(void **state)
{
    struct fx *f = *state;
    struct rec r = {.base = f->base};
    r.conn = tg_conn_new_fd(f->base, f->sp[0], NULL, &k_rec_cbs, &r);
    f->sp[0] = -1;
    for (uint32_t i = 0; i < 3; i++) {
        uint8_t body[4];
        put_seq(body, i);
        raw_frame_write(f->sp[1], body, 4);
    }
    close(f->sp[1]);
    f->sp[1] = -1;
    assert_true(tg_test_run_until(f->base, rec_closed, &r, TIMEOUT_MS));
    assert_int_equal(r.frames, 3);
    assert_int_equal(r.seq_errors, 0);
    assert_non_null(strstr(r.reason, "peer closed"));
}

/* ------------------------------------------------------- output limits */

static void test_send_timeout(void **state)
{
    struct fx *f = *state;
    struct tg_conn_opts o;
    tg_conn_opts_default(&o);
    o.send_timeout_ms = 100;
    struct rec r = {.base = f->base};
    r.conn = tg_conn_new_fd(f->base, f->sp[0], &o, &k_rec_cbs, &r);
    f->sp[0] = -1;
    uint8_t *body = calloc(1, 60000);
    assert_non_null(body);
    for (int i = 0; i < 100; i++) /* 6 MB: far more than the socket buffer */
        assert_int_equal(tg_conn_send(r.conn, body, 60000, -1), 0);
    free(body);
    assert_true(tg_test_run_until(f->base, rec_closed, &r, 3000)); /* the peer never reads */
    assert_non_null(strstr(r.reason, "send timeout"));
}

static void test_hard_limit(void **state)
{
    struct fx *f = *state;
    struct tg_conn_opts o;
    tg_conn_opts_default(&o);
    o.out_high = 64 << 10;
    o.out_low = 16 << 10;
    o.out_hard_limit = 1 << 20;
    struct rec r = {.base = f->base};
    r.conn = tg_conn_new_fd(f->base, f->sp[0], &o, &k_rec_cbs, &r);
    f->sp[0] = -1;
    uint8_t body[10000];
    memset(body, 0, sizeof body);
    int i, rc = 0;
    for (i = 0; i < 200 && rc == 0; i++)
        rc = tg_conn_send(r.conn, body, sizeof body, -1);
    assert_int_equal(rc, -1); /* refused once over 1 MiB */
    assert_true(i <= 110);
    assert_true(tg_conn_is_congested(r.conn));
    assert_int_equal(tg_conn_send(r.conn, body, 10, -1), -1);
    assert_int_equal(r.closes, 0); /* on_close comes from the loop, not from send */
    assert_true(tg_test_run_until(f->base, rec_closed, &r, TIMEOUT_MS));
    assert_non_null(strstr(r.reason, "hard limit"));
}

static int reader_drain_some(void *arg)
{
    struct rec *r = arg;
    return r->drains > 0;
}

static void test_congestion_and_on_drain(void **state)
{
    struct fx *f = *state;
    struct tg_conn_opts o;
    tg_conn_opts_default(&o);
    o.out_high = 512 << 10;
    o.out_low = 128 << 10;
    struct rec r = {.base = f->base};
    r.conn = tg_conn_new_fd(f->base, f->sp[0], &o, &k_rec_cbs, &r);
    f->sp[0] = -1;
    uint8_t body[10000];
    memset(body, 0, sizeof body);
    for (int i = 0; i < 100; i++)
        assert_int_equal(tg_conn_send(r.conn, body, sizeof body, -1), 0);
    assert_true(tg_conn_is_congested(r.conn));
    assert_int_equal(r.drains, 0);
    /* the peer starts reading: on_drain fires once the queue falls under out_low */
    evutil_make_socket_nonblocking(f->sp[1]);
    size_t total = 0;
    for (int iter = 0; iter < 100000 && !r.drains; iter++) {
        uint8_t buf[65536];
        ssize_t n = read(f->sp[1], buf, sizeof buf);
        if (n > 0)
            total += (size_t)n;
        event_base_loop(f->base, EVLOOP_NONBLOCK);
    }
    assert_true(reader_drain_some(&r));
    assert_int_equal(r.drains, 1);
    assert_false(tg_conn_is_congested(r.conn));
    assert_true(tg_conn_output_len(r.conn) <= o.out_low);
    assert_true(total > 0);
    tg_conn_destroy(r.conn);
}

/* ------------------------------------------------------- input control */

static void test_pause_and_resume(void **state)
{
    struct fx *f = *state;
    struct rec r = {.base = f->base, .pause_at = 3};
    r.conn = tg_conn_new_fd(f->base, f->sp[0], NULL, &k_rec_cbs, &r);
    f->sp[0] = -1;
    for (uint32_t i = 0; i < 10; i++) {
        uint8_t body[4];
        put_seq(body, i);
        raw_frame_write(f->sp[1], body, 4);
    }
    struct frames_wait w = {&r, 3};
    assert_true(tg_test_run_until(f->base, rec_has_frames, &w, TIMEOUT_MS));
    tg_test_run_until(f->base, NULL, NULL, 50);
    assert_int_equal(r.frames, 3); /* paused: buffered frames wait */
    r.pause_at = 0;
    tg_conn_resume_read(r.conn);
    assert_int_equal(r.frames, 3); /* not from inside resume */
    w.n = 10;
    assert_true(tg_test_run_until(f->base, rec_has_frames, &w, TIMEOUT_MS));
    assert_int_equal(r.frames, 10);
    assert_int_equal(r.seq_errors, 0);
    /* and new input is read again */
    uint8_t body[4];
    put_seq(body, 10);
    raw_frame_write(f->sp[1], body, 4);
    w.n = 11;
    assert_true(tg_test_run_until(f->base, rec_has_frames, &w, TIMEOUT_MS));
    assert_int_equal(r.seq_errors, 0);
    tg_conn_destroy(r.conn);
}

/* The peer sends frames and hangs up while reading is paused (a bridge applying backpressure):
 * the frames it sent before closing are still delivered once reading resumes, then on_close. */
static void test_eof_while_paused_keeps_buffered_frames(void **state)
{
    struct fx *f = *state;
    struct rec r = {.base = f->base, .pause_at = 3};
    r.conn = tg_conn_new_fd(f->base, f->sp[0], NULL, &k_rec_cbs, &r);
    f->sp[0] = -1;
    uint8_t all[10 * 8];
    for (uint32_t i = 0; i < 10; i++) {
        tg_frame_put_header(all + i * 8, 4);
        put_seq(all + i * 8 + 4, i);
    }
    assert_int_equal(write(f->sp[1], all, sizeof all), (ssize_t)sizeof all);
    close(f->sp[1]);
    f->sp[1] = -1;
    struct frames_wait w = {&r, 3};
    assert_true(tg_test_run_until(f->base, rec_has_frames, &w, TIMEOUT_MS));
    tg_test_run_until(f->base, NULL, NULL, 50);
    assert_int_equal(r.frames, 3);
    assert_int_equal(r.closes, 0); /* 7 frames are still waiting */
    r.pause_at = 0;
    tg_conn_resume_read(r.conn);
    assert_true(tg_test_run_until(f->base, rec_closed, &r, TIMEOUT_MS));
    assert_int_equal(r.frames, 10);
    assert_int_equal(r.seq_errors, 0);
    assert_non_null(strstr(r.reason, "peer closed"));
}

/* The same when the hang-up is read in the same read burst as the frames: the peer's bytes fill the
 * conn's first read exactly (the size of a fresh evbuffer reservation), so EOF comes right after. */
static void test_eof_in_same_burst_while_paused(void **state)
{
    struct fx *f = *state;
    struct evbuffer *probe = evbuffer_new();
    struct evbuffer_iovec v[2];
    int nv = evbuffer_reserve_space(probe, 65536, v, 2);
    size_t room = 0;
    for (int i = 0; i < nv; i++)
        room += v[i].iov_len;
    evbuffer_free(probe);
    assert_true(room >= 65536 && room < (1u << 20));
    /* frames of 1000 bytes, the last one padded so the total is exactly `room` */
    size_t nframes = room / 1004;
    size_t last = room - (nframes - 1) * 1004 - 4;
    uint8_t *all = calloc(1, room);
    assert_non_null(all);
    size_t off = 0;
    for (uint32_t i = 0; i < nframes; i++) {
        size_t len = i + 1 < nframes ? 1000 : last;
        tg_frame_put_header(all + off, (uint32_t)len);
        put_seq(all + off + 4, i);
        off += 4 + len;
    }
    assert_int_equal(off, room);
    /* the socket must hold it all before the conn reads */
    int sz = 4 << 20;
    setsockopt(f->sp[1], SOL_SOCKET, SO_SNDBUF, &sz, sizeof sz);
    setsockopt(f->sp[0], SOL_SOCKET, SO_RCVBUF, &sz, sizeof sz);
    assert_int_equal(write(f->sp[1], all, room), (ssize_t)room);
    free(all);
    close(f->sp[1]);
    f->sp[1] = -1;
    struct rec r = {.base = f->base, .pause_at = 3};
    r.conn = tg_conn_new_fd(f->base, f->sp[0], NULL, &k_rec_cbs, &r);
    f->sp[0] = -1;
    struct frames_wait w = {&r, 3};
    assert_true(tg_test_run_until(f->base, rec_has_frames, &w, TIMEOUT_MS));
    tg_test_run_until(f->base, NULL, NULL, 50);
    assert_int_equal(r.frames, 3);
    assert_int_equal(r.closes, 0); /* the rest is still buffered: not dropped */
    r.pause_at = 0;
    tg_conn_resume_read(r.conn);
    assert_true(tg_test_run_until(f->base, rec_closed, &r, TIMEOUT_MS));
    assert_int_equal(r.frames, nframes);
    assert_int_equal(r.seq_errors, 0);
    assert_non_null(strstr(r.reason, "peer closed"));
}

/* The same through the bufferevent backend (TLS and WebSocket conns use it). */
static void test_eof_while_paused_bev(void **state)
{
    struct fx *f = *state;
    struct bufferevent *bev = bufferevent_socket_new(f->base, f->sp[0], BEV_OPT_CLOSE_ON_FREE);
    assert_non_null(bev);
    f->sp[0] = -1;
    struct rec r = {.base = f->base, .pause_at = 3};
    r.conn = tg_conn_new_bev(f->base, bev, NULL, &k_rec_cbs, &r);
    uint8_t all[10 * 8];
    for (uint32_t i = 0; i < 10; i++) {
        tg_frame_put_header(all + i * 8, 4);
        put_seq(all + i * 8 + 4, i);
    }
    assert_int_equal(write(f->sp[1], all, sizeof all), (ssize_t)sizeof all);
    close(f->sp[1]);
    f->sp[1] = -1;
    struct frames_wait w = {&r, 3};
    assert_true(tg_test_run_until(f->base, rec_has_frames, &w, TIMEOUT_MS));
    tg_test_run_until(f->base, NULL, NULL, 50);
    assert_int_equal(r.frames, 3);
    assert_int_equal(r.closes, 0);
    r.pause_at = 0;
    tg_conn_resume_read(r.conn);
    assert_true(tg_test_run_until(f->base, rec_closed, &r, TIMEOUT_MS));
    assert_int_equal(r.frames, 10);
    assert_int_equal(r.seq_errors, 0);
}

/* A filtered stream (TLS, WebSocket, a bufferevent pair here) can report data and the hang-up
 * together: frames buffered behind a pause must still come out after resume. */
static void test_eof_event_while_paused_bev_pair(void **state)
{
    struct fx *f = *state;
    struct bufferevent *pair[2];
    assert_int_equal(bufferevent_pair_new(f->base, BEV_OPT_CLOSE_ON_FREE, pair), 0);
    struct rec r = {.base = f->base, .pause_at = 3};
    r.conn = tg_conn_new_bev(f->base, pair[0], NULL, &k_rec_cbs, &r);
    assert_non_null(r.conn);
    bufferevent_enable(pair[1], EV_READ | EV_WRITE);
    uint8_t all[10 * 8];
    for (uint32_t i = 0; i < 10; i++) {
        tg_frame_put_header(all + i * 8, 4);
        put_seq(all + i * 8 + 4, i);
    }
    assert_int_equal(bufferevent_write(pair[1], all, sizeof all), 0);
    bufferevent_flush(pair[1], EV_WRITE, BEV_FINISHED); /* hang up right behind the data */
    bufferevent_free(pair[1]);
    struct frames_wait w = {&r, 3};
    assert_true(tg_test_run_until(f->base, rec_has_frames, &w, TIMEOUT_MS));
    tg_test_run_until(f->base, NULL, NULL, 50);
    assert_int_equal(r.frames, 3);
    assert_int_equal(r.closes, 0);
    r.pause_at = 0;
    tg_conn_resume_read(r.conn);
    assert_true(tg_test_run_until(f->base, rec_closed, &r, TIMEOUT_MS));
    assert_int_equal(r.frames, 10);
    assert_int_equal(r.seq_errors, 0);
    assert_non_null(strstr(r.reason, "peer closed"));
}

static uint64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static void test_idle_timeout(void **state)
{
    struct fx *f = *state;
    struct tg_conn_opts o;
    tg_conn_opts_default(&o);
    /* longer than any stall of this process between two inputs: scaled */
    o.idle_timeout_ms = (uint32_t)tg_test_ms(400);
    struct rec r = {.base = f->base};
    r.conn = tg_conn_new_fd(f->base, f->sp[0], &o, &k_rec_cbs, &r);
    f->sp[0] = -1;
    /* input every 60 ms keeps it open well past the idle timeout */
    uint64_t until = mono_ms() + o.idle_timeout_ms * 3 / 2;
    uint32_t sent = 0;
    while (mono_ms() < until || sent < 3) {
        uint8_t body[4];
        put_seq(body, sent++);
        raw_frame_write(f->sp[1], body, 4);
        tg_test_run_until(f->base, NULL, NULL, 60);
    }
    assert_int_equal(r.closes, 0);
    struct frames_wait w = {&r, sent};
    assert_true(tg_test_run_until(f->base, rec_has_frames, &w, TIMEOUT_MS));
    assert_int_equal(r.closes, 0);
    /* then silence: closed for idleness */
    assert_true(tg_test_run_until(f->base, rec_closed, &r, TIMEOUT_MS));
    assert_non_null(strstr(r.reason, "idle"));
}

/* An oversize header closes the connection and never dispatches the frame. */
static void test_oversize_closes(void **state)
{
    struct fx *f = *state;
    struct rec r = {.base = f->base};
    r.conn = tg_conn_new_fd(f->base, f->sp[0], NULL, &k_rec_cbs, &r);
    f->sp[0] = -1;
    uint8_t body[4];
    put_seq(body, 0);
    raw_frame_write(f->sp[1], body, 4);
    uint8_t hdr[4];
    tg_frame_put_header(hdr, TG_FRAME_MAX_DEFAULT);
    assert_int_equal(write(f->sp[1], hdr, 4), 4);
    assert_true(tg_test_run_until(f->base, rec_closed, &r, TIMEOUT_MS));
    assert_int_equal(r.frames, 1);
    assert_non_null(strstr(r.reason, "too large"));
}

static void echo_on_frame(tg_conn *c, const uint8_t *body, size_t len, void *arg)
{
    struct rec *r = arg;
    r->frames++;
    assert_int_equal(tg_conn_send(c, body, len, -1), 0);
}

/* A frame queued from a callback leaves in the same loop turn, not after another round through
 * epoll to learn that an idle socket is writable (half the system calls of a request/reply). */
static void test_reply_leaves_in_same_loop_turn(void **state)
{
    struct fx *f = *state;
    struct rec r = {0};
    static const struct tg_conn_cbs cbs = {.on_frame = echo_on_frame, .on_close = rec_on_close};
    r.conn = tg_conn_new_fd(f->base, f->sp[0], NULL, &cbs, &r);
    assert_non_null(r.conn);
    f->sp[0] = -1;
    raw_frame_write(f->sp[1], "ping", 4);
    for (int turns = 0; r.frames == 0 && turns < 1000; turns++)
        event_base_loop(f->base, EVLOOP_ONCE);
    assert_int_equal(r.frames, 1);
    uint8_t back[8];
    assert_int_equal(recv(f->sp[1], back, sizeof back, MSG_DONTWAIT), 8); /* no further loop turn */
    assert_memory_equal(back + 4, "ping", 4);
    tg_conn_destroy(r.conn);
}

static int output_stuck(void *arg)
{
    struct rec *r = arg;
    return tg_conn_output_len(r->conn) > 0 && !tg_conn_is_congested(r->conn) ? 0 : 1;
}

/* tg_conn_output_stalled_ms: queued output that the peer does not read is stalled for as long as
 * that lasts; the peer reading from the socket's buffer is progress even before our own queue
 * moves (the kernel's send queue got shorter). */
static void test_output_stalled_until_peer_reads(void **state)
{
    struct fx *f = *state;
    struct rec r = {0};
    r.conn = tg_conn_new_fd(f->base, f->sp[0], NULL, &k_rec_cbs, &r);
    assert_non_null(r.conn);
    f->sp[0] = -1;
    static uint8_t body[60000];
    for (int i = 0; i < 64; i++) /* more than the socket takes: the rest waits in our queue */
        assert_int_equal(tg_conn_send(r.conn, body, sizeof body, -1), 0);
    assert_true(tg_test_run_until(f->base, output_stuck, &r, TIMEOUT_MS));
    tg_test_run_until(f->base, NULL, NULL, 20); /* the socket stays full: nothing moves */
    assert_true(tg_conn_output_len(r.conn) > 0);
    uint64_t t0 = tg_mono_ms() + 10;
    tg_conn_output_stalled_ms(r.conn, t0); /* the first look at the socket */
    assert_true(tg_conn_output_stalled_ms(r.conn, t0 + 1000) >= 1000);
    static uint8_t sink[65536];
    size_t drained = 0; /* whole socket buffers (skbs) must go before the kernel's count drops */
    for (ssize_t n; drained < 256 * 1024 && (n = recv(f->sp[1], sink, sizeof sink, MSG_DONTWAIT)) > 0;)
        drained += (size_t)n;
    assert_true(drained > 0); /* no loop turn: our own queue has not moved */
    assert_int_equal(tg_conn_output_stalled_ms(r.conn, t0 + 2000), 0);
    assert_true(tg_conn_output_stalled_ms(r.conn, t0 + 2600) >= 600);
    tg_conn_destroy(r.conn);
}

/* tg_conn_write_now: queued frames reach the socket inside the caller's callback, without a loop
 * turn; what the socket does not take waits and arrives whole and in order once the loop runs; a
 * write error closes the connection from the loop, as any other; a closing connection refuses. */
static void test_write_now(void **state)
{
    struct fx *f = *state;
    struct rec r = {.base = f->base};
    r.conn = tg_conn_new_fd(f->base, f->sp[0], NULL, &k_rec_cbs, &r);
    assert_non_null(r.conn);
    f->sp[0] = -1;
    assert_int_equal(tg_conn_send(r.conn, "now", 3, -1), 0);
    assert_int_equal(tg_conn_write_now(r.conn), 0);
    uint8_t back[16];
    assert_int_equal(recv(f->sp[1], back, sizeof back, MSG_DONTWAIT), 7); /* no loop turn ran */
    assert_memory_equal(back + 4, "now", 3);
    assert_int_equal(tg_conn_output_len(r.conn), 0);

    /* more than the socket takes: the rest waits for the loop */
    static uint8_t body[60000];
    for (int i = 0; i < 64; i++) {
        put_seq(body, (uint32_t)i);
        assert_int_equal(tg_conn_send(r.conn, body, sizeof body, -1), 0);
    }
    assert_int_equal(tg_conn_write_now(r.conn), 0);
    size_t total = 64 * (sizeof body + 4), left = tg_conn_output_len(r.conn);
    assert_true(left > 0 && left < total);
    static uint8_t got[64 * (60000 + 4)];
    size_t n = 0;
    while (n < total) {
        ssize_t k = recv(f->sp[1], got + n, total - n, MSG_DONTWAIT);
        if (k > 0)
            n += (size_t)k;
        else
            event_base_loop(f->base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
    }
    for (int i = 0; i < 64; i++) { /* whole and in order */
        const uint8_t *fr = got + (size_t)i * (sizeof body + 4);
        assert_int_equal(fr[0] | fr[1] << 8 | fr[2] << 16 | (uint32_t)fr[3] << 24, sizeof body);
        uint8_t want[4];
        put_seq(want, (uint32_t)i);
        assert_memory_equal(fr + 4, want, 4);
    }

    /* the peer is gone: the error closes the connection, from the loop */
    close(f->sp[1]);
    f->sp[1] = -1;
    assert_int_equal(tg_conn_send(r.conn, "late", 4, -1), 0);
    assert_int_equal(tg_conn_write_now(r.conn), -1);
    assert_int_equal(r.closes, 0);
    assert_int_equal(tg_conn_write_now(r.conn), -1); /* closing: refused */
    assert_true(tg_test_run_until(f->base, rec_closed, &r, TIMEOUT_MS));
    assert_non_null(strstr(r.reason, "write error"));
}

#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)

int main(void)
{
    const struct CMUnitTest tests[] = {
        T(test_fd_on_first_byte_back_to_back),
        T(test_write_now),
        T(test_fd_receive_extras_and_truncation),
        T(test_fd_goes_to_its_own_frame),
        T(test_fd_slot_replaced_not_leaked),
        T(test_bev_backend_drops_fds),
        T(test_close_from_callback_runs_on_close_once_from_loop),
        T(test_close_after_flush_delivers_everything),
        T(test_eof_dispatches_buffered_frames_first),
        T(test_send_timeout),
        T(test_hard_limit),
        T(test_congestion_and_on_drain),
        T(test_pause_and_resume),
        T(test_eof_while_paused_keeps_buffered_frames),
        T(test_eof_in_same_burst_while_paused),
        T(test_eof_while_paused_bev),
        T(test_eof_event_while_paused_bev_pair),
        T(test_idle_timeout),
        T(test_oversize_closes),
        T(test_reply_leaves_in_same_loop_turn),
        T(test_output_stalled_until_peer_reads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
