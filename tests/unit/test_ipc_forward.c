/* test_ipc_forward.c: tg_conn's zero-copy forwarding (on_frame_head, tg_conn_frame_peek,
 * tg_conn_forward_frame) between two connections on socketpairs: frames of every size, cut
 * across reads and read blocks at arbitrary points, arrive intact and in order, interleaved with
 * frames taken through on_frame; frames of 2 KiB and more go by reference (counted), smaller ones
 * are copied; a frame that came with an fd is left to on_frame; the bound on read blocks kept
 * alive by references (beyond it frames are copied, none lost); the bufferevent backend. */
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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "tracegate/conn.h"
#include "tracegate/frame.h"

#include "tg_test_util.h"

#define TIMEOUT_MS 10000

/* The byte at offset i of frame k's body. */
static uint8_t pat(size_t k, size_t i) { return (uint8_t)(k * 131u + i * 7u + (i >> 9)); }

struct fwd {
    struct event_base *base;
    tg_conn *from, *to;
    int w, r;          /* the writer's end (into `from`) and the reader's end (out of `to`) */
    size_t copy_every; /* every Nth frame is left to on_frame (0: none) */
    size_t frames_seen, heads_taken, on_frames, fd_frames;
    size_t ref_expected; /* bytes of frames taken by head of at least 2 KiB */
    size_t frame_bytes;  /* header included, of every frame offered */
    int peek_checked, bad_peek, closes;
    int no_read; /* the reader does not read until the end */
    uint8_t *got; /* what the reader received */
    size_t got_len, got_cap;
};

static int fwd_head(tg_conn *c, size_t len, void *arg)
{
    struct fwd *f = arg;
    size_t k = f->frames_seen++;
    f->frame_bytes += len + TG_FRAME_HEADER_SIZE;
    if (tg_conn_has_fd(c))
        return 0; /* the copying path takes the fd */
    uint8_t scratch[64];
    size_t avail = 0;
    const uint8_t *p = tg_conn_frame_peek(c, scratch, sizeof scratch, &avail);
    if (!p || (avail != len && avail != (len < sizeof scratch ? len : sizeof scratch)))
        f->bad_peek++;
    for (size_t i = 0; p && i < avail && i < 4096; i++)
        if (p[i] != pat(k, i))
            f->bad_peek++;
    f->peek_checked++;
    if (f->copy_every && k % f->copy_every == f->copy_every - 1)
        return 0;
    if (tg_conn_forward_frame(c, f->to) != 0)
        fail_msg("forward of frame %zu failed", k);
    f->heads_taken++;
    if (len + TG_FRAME_HEADER_SIZE >= 2048)
        f->ref_expected += len + TG_FRAME_HEADER_SIZE;
    return 1;
}

static void fwd_frame(tg_conn *c, const uint8_t *body, size_t len, void *arg)
{
    struct fwd *f = arg;
    int fd = tg_conn_take_fd(c);
    if (fd >= 0) {
        f->fd_frames++;
        close(fd);
    }
    f->on_frames++;
    assert_int_equal(tg_conn_send(f->to, body, len, -1), 0);
}

static void fwd_close(tg_conn *c, const char *reason, void *arg)
{
    struct fwd *f = arg;
    (void)reason;
    if (c == f->from)
        f->from = NULL;
    if (c == f->to)
        f->to = NULL;
    f->closes++;
}

static const struct tg_conn_cbs k_from_cbs = {
    .on_frame = fwd_frame, .on_close = fwd_close, .on_frame_head = fwd_head};
static const struct tg_conn_cbs k_to_cbs = {.on_close = fwd_close};

static void fwd_setup(struct fwd *f, int bev_from, size_t to_hard_limit)
{
    memset(f, 0, sizeof *f);
    f->base = event_base_new();
    assert_non_null(f->base);
    int a[2], b[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, a), 0);
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, b), 0);
    f->w = a[0];
    f->r = b[1];
    fcntl(f->w, F_SETFL, O_NONBLOCK);
    fcntl(f->r, F_SETFL, O_NONBLOCK);
    struct tg_conn_opts o;
    tg_conn_opts_default(&o);
    if (bev_from) {
        struct bufferevent *bev = bufferevent_socket_new(f->base, a[1], BEV_OPT_CLOSE_ON_FREE);
        assert_non_null(bev);
        f->from = tg_conn_new_bev(f->base, bev, &o, &k_from_cbs, f);
    } else {
        f->from = tg_conn_new_fd(f->base, a[1], &o, &k_from_cbs, f);
    }
    if (to_hard_limit)
        o.out_hard_limit = to_hard_limit;
    f->to = tg_conn_new_fd(f->base, b[0], &o, &k_to_cbs, f);
    assert_non_null(f->from);
    assert_non_null(f->to);
}

static void fwd_teardown(struct fwd *f)
{
    if (f->from)
        tg_conn_destroy(f->from);
    if (f->to)
        tg_conn_destroy(f->to);
    close(f->w);
    close(f->r);
    free(f->got);
    event_base_free(f->base);
}

/* Reads what the reader end has; done when `want` bytes arrived. */
struct drain_until {
    struct fwd *f;
    size_t want;
};
static int reader_has(void *arg)
{
    struct drain_until *d = arg;
    struct fwd *f = d->f;
    for (;;) {
        if (f->got_cap - f->got_len < 65536) {
            f->got_cap = f->got_cap ? f->got_cap * 2 : 1u << 20;
            f->got = realloc(f->got, f->got_cap);
            assert_non_null(f->got);
        }
        ssize_t n = recv(f->r, f->got + f->got_len, f->got_cap - f->got_len, MSG_DONTWAIT);
        if (n <= 0)
            break;
        f->got_len += (size_t)n;
    }
    return f->got_len >= d->want;
}

/* The frames' stream: sizes[k] body bytes of pattern k, each with its header. */
static uint8_t *make_stream(const size_t *sizes, size_t n, size_t *total)
{
    size_t t = 0;
    for (size_t k = 0; k < n; k++)
        t += TG_FRAME_HEADER_SIZE + sizes[k];
    uint8_t *s = malloc(t), *p = s;
    assert_non_null(s);
    for (size_t k = 0; k < n; k++) {
        tg_frame_put_header(p, (uint32_t)sizes[k]);
        p += TG_FRAME_HEADER_SIZE;
        for (size_t i = 0; i < sizes[k]; i++)
            *p++ = pat(k, i);
    }
    *total = t;
    return s;
}

/* Until `from` has read everything the writer sent (nothing left in the writer's send queue), or
 * the conn closed. */
static int from_consumed(void *arg)
{
    struct fwd *f = arg;
    int q = 0;
    assert_int_equal(ioctl(f->w, TIOCOUTQ, &q), 0);
    return !f->from || q == 0;
}

/* Writes the stream in pieces of the given sizes (cycled), letting `from` read each piece before
 * the next, so reads end at those points (mid-header, mid-body, across frames). */
static void write_in_pieces(struct fwd *f, const uint8_t *s, size_t total, const size_t *pieces, size_t np)
{
    size_t off = 0;
    for (size_t i = 0; off < total; i++) {
        size_t n = pieces[i % np];
        if (n > total - off)
            n = total - off;
        size_t done = 0;
        while (done < n) {
            ssize_t w = send(f->w, s + off + done, n - done, MSG_NOSIGNAL | MSG_DONTWAIT);
            if (w > 0) {
                done += (size_t)w;
                continue;
            }
            assert_true(w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK));
            assert_true(tg_test_run_until(f->base, from_consumed, f, TIMEOUT_MS));
        }
        off += n;
        assert_true(tg_test_run_until(f->base, from_consumed, f, TIMEOUT_MS));
        struct drain_until d = {f, 0};
        if (!f->no_read)
            reader_has(&d); /* keep the output moving */
    }
}

static void test_forward_intact(void **state)
{
    (void)state;
    static const size_t sizes[] = {10,    100,   1500, 2043,  2044,   5000, 65536, 70000, 131068, 1,
                                   33000, 64000, 200,  99999, 131068, 3,    4096,  65535, 12,     40000};
    static const size_t pieces[] = {777, 4096, 65549, 3, 131072, 1, 20000, 262144, 50};
    size_t n = sizeof sizes / sizeof sizes[0];
    size_t total;
    uint8_t *s = make_stream(sizes, n, &total);
    for (int mode = 0; mode < 2; mode++) {
        struct fwd f;
        fwd_setup(&f, 0, 0);
        f.copy_every = mode ? 3 : 0; /* mode 1: every third frame through on_frame (copied) */
        write_in_pieces(&f, s, total, pieces, sizeof pieces / sizeof pieces[0]);
        struct drain_until d = {&f, total};
        assert_true(tg_test_run_until(f.base, reader_has, &d, TIMEOUT_MS));
        assert_int_equal(f.got_len, total);
        assert_memory_equal(f.got, s, total); /* intact and in order */
        assert_int_equal(f.frames_seen, n);
        assert_int_equal(f.heads_taken + f.on_frames, n);
        assert_int_equal(f.bad_peek, 0);
        assert_int_equal(f.closes, 0);
        struct tg_conn_stats st;
        tg_conn_get_stats(f.from, &st);
        assert_int_equal(st.frames_forwarded, f.heads_taken);
        /* every forwarded frame of 2 KiB and more went by reference: nothing was copied */
        assert_int_equal(st.bytes_forwarded_by_ref, f.ref_expected);
        assert_true(f.ref_expected > total / 4);
        tg_conn_get_stats(f.to, &st);
        assert_int_equal(st.frames_out, n);
        assert_int_equal(st.bytes_out, total);
        fwd_teardown(&f);
    }
    free(s);
}

/* A frame that arrives with an fd is left to on_frame, which takes the fd; the frames around it
 * are forwarded. */
static void test_forward_fd_frame(void **state)
{
    (void)state;
    struct fwd f;
    fwd_setup(&f, 0, 0);
    static const size_t sizes[] = {8000, 9000, 10000};
    size_t total;
    uint8_t *s = make_stream(sizes, 3, &total);
    size_t first = TG_FRAME_HEADER_SIZE + sizes[0], second = TG_FRAME_HEADER_SIZE + sizes[1];
    assert_int_equal(send(f.w, s, first, 0), (ssize_t)first);
    assert_true(tg_test_run_until(f.base, from_consumed, &f, TIMEOUT_MS));
    /* the second frame carries a pipe's end */
    int p[2];
    assert_int_equal(pipe(p), 0);
    struct iovec iov = {s + first, second};
    union {
        char buf[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } ctl;
    memset(&ctl, 0, sizeof ctl);
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf, .msg_controllen = sizeof ctl.buf};
    struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(cm), &p[0], sizeof(int));
    assert_int_equal(sendmsg(f.w, &msg, 0), (ssize_t)second);
    close(p[0]);
    assert_true(tg_test_run_until(f.base, from_consumed, &f, TIMEOUT_MS));
    assert_int_equal(send(f.w, s + first + second, total - first - second, 0), (ssize_t)(total - first - second));
    struct drain_until d = {&f, total};
    assert_true(tg_test_run_until(f.base, reader_has, &d, TIMEOUT_MS));
    assert_memory_equal(f.got, s, total);
    assert_int_equal(f.fd_frames, 1);  /* on_frame got the fd with its frame */
    assert_int_equal(f.on_frames, 1);  /* and only that frame */
    assert_int_equal(f.heads_taken, 2);
    close(p[1]);
    free(s);
    fwd_teardown(&f);
}

/* While the destination does not read, references keep the source's read blocks alive; past
 * 8 MiB of them frames are copied instead (so a peer cannot pin memory out of proportion), and
 * nothing is lost. */
static void test_forward_pin_limit(void **state)
{
    (void)state;
    struct fwd f;
    fwd_setup(&f, 0, 256u << 20);
    f.no_read = 1;
    size_t n = 256; /* 256 frames of 64 KiB: 16 MiB */
    size_t *sizes = malloc(n * sizeof *sizes);
    for (size_t k = 0; k < n; k++)
        sizes[k] = 65536 - TG_FRAME_HEADER_SIZE;
    size_t total;
    uint8_t *s = make_stream(sizes, n, &total);
    static const size_t pieces[] = {1u << 20};
    write_in_pieces(&f, s, total, pieces, 1);
    struct tg_conn_stats st;
    tg_conn_get_stats(f.from, &st);
    assert_int_equal(st.frames_forwarded, n);
    assert_true(st.bytes_forwarded_by_ref > 0);
    assert_true(st.bytes_forwarded_by_ref <= (8u << 20) + (1u << 20)); /* the bound, plus the block in hand */
    assert_true(st.bytes_forwarded_by_ref < total); /* the rest was copied */
    struct drain_until d = {&f, total};
    assert_true(tg_test_run_until(f.base, reader_has, &d, TIMEOUT_MS));
    assert_int_equal(f.got_len, total);
    assert_memory_equal(f.got, s, total);
    free(sizes);
    free(s);
    fwd_teardown(&f);
}

/* A bufferevent source: chains move, frames arrive intact (nothing goes by reference there). */
static void test_forward_bufferevent(void **state)
{
    (void)state;
    static const size_t sizes[] = {10, 70000, 3000, 131068, 64, 65536};
    static const size_t pieces[] = {1000, 65536, 7, 100000};
    size_t total;
    uint8_t *s = make_stream(sizes, 6, &total);
    struct fwd f;
    fwd_setup(&f, 1, 0);
    write_in_pieces(&f, s, total, pieces, 4);
    struct drain_until d = {&f, total};
    assert_true(tg_test_run_until(f.base, reader_has, &d, TIMEOUT_MS));
    assert_memory_equal(f.got, s, total);
    assert_int_equal(f.heads_taken, 6);
    assert_int_equal(f.bad_peek, 0);
    struct tg_conn_stats st;
    tg_conn_get_stats(f.from, &st);
    assert_int_equal(st.frames_forwarded, 6);
    assert_int_equal(st.bytes_forwarded_by_ref, 0);
    free(s);
    fwd_teardown(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_forward_intact),
        cmocka_unit_test(test_forward_fd_frame),
        cmocka_unit_test(test_forward_pin_limit),
        cmocka_unit_test(test_forward_bufferevent),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
