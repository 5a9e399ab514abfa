/* test_ipc_client.c: tg_ipc_client against a scripted host on a socketpair: every recorded Perfetto
 * client session is re-enacted (the client re-issues the recorded binds, invokes and peer identity,
 * the fake host answers with traced's recorded bytes, fds included) and the client must send what
 * the real client sent and hand every recorded reply to the right callback; plus misbehaving hosts
 * (mismatched reply types, RequestError, unknown request ids, hang-ups). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "tracegate/conn.h"
#include "tracegate/frame.h"
#include "tracegate/ipc_client.h"
#include "tracegate/ipc_wire.h"

#include "ipc_frame.pb-c.h"

#include "tg_test_util.h"

#define TIMEOUT_MS 10000

/* ------------------------------------------------------ the fake host side */

struct host_side {
    int fd;                /* raw end of the socketpair */
    uint8_t *got;          /* everything the client sent */
    size_t got_len, got_cap;
    size_t *fd_offsets;    /* stream offset at which each received fd arrived */
    size_t n_fds;
};

/* Reads whatever the client has sent so far (non-blocking). */
static void host_pull(struct host_side *h)
{
    for (;;) {
        uint8_t buf[65536];
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
        ssize_t n = recvmsg(h->fd, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
        if (n <= 0)
            return;
        for (struct cmsghdr *cm = CMSG_FIRSTHDR(&msg); cm; cm = CMSG_NXTHDR(&msg, cm)) {
            size_t nfd = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
            for (size_t k = 0; k < nfd; k++) {
                int rfd;
                memcpy(&rfd, CMSG_DATA(cm) + k * sizeof(int), sizeof rfd);
                close(rfd);
                h->fd_offsets = realloc(h->fd_offsets, (h->n_fds + 1) * sizeof(size_t));
                assert_non_null(h->fd_offsets);
                h->fd_offsets[h->n_fds++] = h->got_len;
            }
        }
        if (h->got_len + (size_t)n > h->got_cap) {
            h->got_cap = (h->got_len + (size_t)n) * 2;
            h->got = realloc(h->got, h->got_cap);
            assert_non_null(h->got);
        }
        memcpy(h->got + h->got_len, buf, (size_t)n);
        h->got_len += (size_t)n;
    }
}

/* Writes bytes to the client, optionally with an fd on the first byte. */
static void host_push(struct host_side *h, const uint8_t *data, size_t len, int fd)
{
    size_t off = 0;
    while (off < len) {
        union {
            char b[CMSG_SPACE(sizeof(int))];
            struct cmsghdr align;
        } ctl;
        struct iovec iov = {(void *)(data + off), len - off};
        struct msghdr msg;
        memset(&msg, 0, sizeof msg);
        msg.msg_iov = &iov;
        msg.msg_iovlen = 1;
        if (fd >= 0 && off == 0) {
            memset(&ctl, 0, sizeof ctl);
            msg.msg_control = ctl.b;
            msg.msg_controllen = sizeof ctl.b;
            struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
            cm->cmsg_level = SOL_SOCKET;
            cm->cmsg_type = SCM_RIGHTS;
            cm->cmsg_len = CMSG_LEN(sizeof(int));
            memcpy(CMSG_DATA(cm), &fd, sizeof fd);
        }
        struct pollfd p = {h->fd, POLLOUT, 0};
        poll(&p, 1, 1000);
        ssize_t n = sendmsg(h->fd, &msg, MSG_NOSIGNAL);
        assert_true(n > 0);
        off += (size_t)n;
    }
}

static void host_push_frame(struct host_side *h, const uint8_t *body, size_t len)
{
    uint8_t *b = malloc(len + 4);
    assert_non_null(b);
    tg_frame_put_header(b, (uint32_t)len);
    memcpy(b + 4, body, len);
    host_push(h, b, len + 4, -1);
    free(b);
}

static void host_free(struct host_side *h)
{
    if (h->fd >= 0)
        close(h->fd);
    free(h->got);
    free(h->fd_offsets);
}

/* ------------------------------------------------------------ replay */

struct method_name {
    uint32_t sid, mid;
    char name[64];
};

struct expect_reply {
    uint64_t rid;
    int success, has_more, with_fd;
    const uint8_t *payload;
    size_t payload_len;
    size_t frame_idx; /* index among dir-1 frames */
    int seen;
};

struct replay {
    struct event_base *base;
    tg_ipc_client *cli;
    struct host_side host;
    const char *name;
    /* method names learnt from the recorded bind replies */
    struct method_name names[64];
    size_t n_names;
    /* proxies by service id (the client's own, from its bind callbacks) */
    tg_ipc_service_proxy *proxy_by_sid[8];
    /* dir-1 frames, in order */
    struct expect_reply *exp;
    size_t n_exp;
    size_t delivered; /* dir-1 frames handed to a callback so far */
    size_t fds_received;
    int disconnected;
    char bound_name[8][64];
};

static void name_collect(void *arg, uint32_t id, const char *name, size_t nl)
{
    struct replay *rp = arg;
    assert_true(rp->n_names < 64);
    struct method_name *m = &rp->names[rp->n_names++];
    m->mid = id;
    m->sid = 0; /* filled by the caller */
    snprintf(m->name, sizeof m->name, "%.*s", (int)nl, name);
}

static const char *method_name(struct replay *rp, uint32_t sid, uint32_t mid)
{
    for (size_t i = 0; i < rp->n_names; i++)
        if (rp->names[i].sid == sid && rp->names[i].mid == mid)
            return rp->names[i].name;
    return NULL;
}

static struct expect_reply *take_expect(struct replay *rp, uint64_t rid)
{
    for (size_t i = 0; i < rp->n_exp; i++)
        if (!rp->exp[i].seen && rp->exp[i].rid == rid) {
            rp->exp[i].seen = 1;
            return &rp->exp[i];
        }
    return NULL;
}

static void replay_bind_cb(tg_ipc_client *cli, tg_ipc_service_proxy *proxy, void *arg)
{
    struct replay *rp = arg;
    assert_non_null(proxy); /* every recorded bind succeeded */
    uint32_t sid = tg_ipc_proxy_service_id(proxy);
    assert_true(sid < 8);
    rp->proxy_by_sid[sid] = proxy;
    rp->delivered++;
    /* the client resolves every recorded method by name to the recorded id */
    for (size_t i = 0; i < rp->n_names; i++)
        if (rp->names[i].sid == sid)
            assert_int_equal(tg_ipc_proxy_method_id(proxy, rp->names[i].name), rp->names[i].mid);
}

struct call_ctx {
    struct replay *rp;
    uint64_t rid;
};

static struct call_ctx g_ctx[256];
static size_t g_n_ctx;

static void replay_reply_cb(tg_ipc_client *cli, int success, int has_more, const uint8_t *reply, size_t len,
                            void *arg)
{
    struct call_ctx *cc = arg;
    struct replay *rp = cc->rp;
    if (rp->disconnected)
        return;
    struct expect_reply *x = take_expect(rp, cc->rid);
    if (!x)
        fail_msg("%s: unexpected reply for request %llu", rp->name, (unsigned long long)cc->rid);
    if (x->frame_idx != rp->delivered)
        fail_msg("%s: reply frame %zu delivered out of order (expected %zu)", rp->name, x->frame_idx, rp->delivered);
    assert_int_equal(success, x->success);
    assert_int_equal(has_more, x->has_more);
    assert_int_equal(len, x->payload_len);
    if (len)
        assert_memory_equal(reply, x->payload, len);
    int fd = tg_ipc_client_take_fd(cli);
    if (x->with_fd) {
        if (fd < 0)
            fail_msg("%s: the fd that came with reply frame %zu was not handed out", rp->name, x->frame_idx);
        char b[32] = "";
        assert_true(pread(fd, b, sizeof b - 1, 0) >= 0);
        assert_string_equal(b, "smb-or-output");
        rp->fds_received++;
    }
    if (fd >= 0)
        close(fd);
    rp->delivered++;
}

struct until_delivered {
    struct replay *rp;
    size_t n;
};

static int delivered_enough(void *arg)
{
    struct until_delivered *u = arg;
    return u->rp->delivered >= u->n;
}

static int client_output_empty(void *arg)
{
    struct replay *rp = arg;
    return tg_ipc_client_conn(rp->cli) == NULL || tg_conn_output_len(tg_ipc_client_conn(rp->cli)) == 0;
}

static void on_disc(tg_ipc_client *cli, const char *reason, void *arg)
{
    ((struct replay *)arg)->disconnected = 1;
}

static const struct tg_ipc_client_cbs k_replay_cbs = {.on_disconnect = on_disc};

static int memfd_with(const char *s)
{
    int fd = memfd_create("tg-client-test", MFD_CLOEXEC);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, s, strlen(s)), (ssize_t)strlen(s));
    return fd;
}

/* Issues, through the client API, what the real client sent in this frame. */
static void issue(struct replay *rp, const uint8_t *body, size_t len, int with_fd)
{
    struct tg_frame_info fi;
    assert_int_equal(tg_frame_scan(body, len, &fi), 0);
    switch (fi.msg) {
    case TG_MSG_BIND_SERVICE: {
        char name[64];
        snprintf(name, sizeof name, "%.*s", (int)fi.service_name_len, (const char *)fi.service_name);
        assert_int_equal(tg_ipc_client_bind(rp->cli, name, replay_bind_cb, rp), 0);
        break;
    }
    case TG_MSG_INVOKE_METHOD: {
        tg_ipc_service_proxy *proxy = fi.service_id < 8 ? rp->proxy_by_sid[fi.service_id] : NULL;
        assert_non_null(proxy);
        const char *m = method_name(rp, fi.service_id, fi.method_id);
        assert_non_null(m);
        int fd = with_fd ? memfd_with("client-fd") : -1;
        assert_true(g_n_ctx < 256);
        struct call_ctx *cc = &g_ctx[g_n_ctx++];
        cc->rp = rp;
        cc->rid = fi.request_id;
        uint64_t rid = tg_ipc_client_invoke_bytes(rp->cli, proxy, m, fi.payload, fi.payload_len, fd,
                                                  fi.drop_reply ? NULL : replay_reply_cb, cc);
        if (fd >= 0)
            close(fd);
        /* the client numbers requests exactly as Perfetto's did */
        assert_int_equal(rid, fi.request_id);
        break;
    }
    case TG_MSG_SET_PEER_IDENTITY: {
        Perfetto__Protos__IPCFrame__SetPeerIdentity *id = (Perfetto__Protos__IPCFrame__SetPeerIdentity *)
            protobuf_c_message_unpack(&perfetto__protos__ipcframe__set_peer_identity__descriptor, NULL, fi.msg_len,
                                      fi.msg_data);
        assert_non_null(id);
        assert_int_equal(tg_ipc_client_set_peer_identity(rp->cli, id->pid, id->uid, id->machine_id_hint,
                                                         id->machine_name),
                         0);
        protobuf_c_message_free_unpacked(&id->base, NULL);
        break;
    }
    default:
        fail_msg("%s: unexpected client frame type %d", rp->name, fi.msg);
    }
}

/* Frame boundaries of a stream: body offsets and lengths. */
struct fb {
    size_t off[512], len[512], end[512];
    size_t n;
};

static void frame_bounds(const uint8_t *s, size_t n, struct fb *fb)
{
    fb->n = 0;
    size_t p = 0;
    while (n - p >= 4) {
        size_t l = (size_t)s[p] | (size_t)s[p + 1] << 8 | (size_t)s[p + 2] << 16 | (size_t)s[p + 3] << 24;
        assert_true(n - p - 4 >= l);
        assert_true(fb->n < 512);
        fb->off[fb->n] = p + 4;
        fb->len[fb->n] = l;
        fb->end[fb->n] = p + 4 + l;
        fb->n++;
        p += 4 + l;
    }
}

static void replay_one(const char *path)
{
    struct tg_recording rec;
    assert_int_equal(tg_recording_load(path, &rec), 0);
    int fds_before = tg_test_count_open_fds();
    struct replay *rp = calloc(1, sizeof *rp);
    assert_non_null(rp);
    rp->name = rec.name;
    g_n_ctx = 0;
    struct fb *c2s = calloc(1, sizeof *c2s), *s2c = calloc(1, sizeof *s2c);
    assert_non_null(c2s);
    assert_non_null(s2c);
    frame_bounds(rec.stream[0], rec.stream_len[0], c2s);
    frame_bounds(rec.stream[1], rec.stream_len[1], s2c);

    /* expected replies; method names from the recorded bind replies; which
     * client frames carried an fd (the record holding their first byte had nfds) */
    rp->exp = calloc(s2c->n, sizeof *rp->exp);
    assert_non_null(rp->exp);
    rp->n_exp = s2c->n;
    int c2s_fd[512] = {0};
    size_t pos[2] = {0, 0};
    for (size_t j = 0; j < rec.n_recs; j++) {
        const struct tg_rec_record *x = &rec.recs[j];
        if (x->dir > 1)
            continue;
        struct fb *fb = x->dir == 0 ? c2s : s2c;
        for (size_t i = 0; x->nfds && i < fb->n; i++)
            if (fb->off[i] - 4 >= pos[x->dir] && fb->off[i] - 4 < pos[x->dir] + x->len) {
                if (x->dir == 0)
                    c2s_fd[i] = 1;
                else
                    rp->exp[i].with_fd = 1;
                break;
            }
        pos[x->dir] += x->len;
    }
    size_t expected_fds = 0;
    for (size_t i = 0; i < s2c->n; i++) {
        struct tg_frame_info fi;
        assert_int_equal(tg_frame_scan(rec.stream[1] + s2c->off[i], s2c->len[i], &fi), 0);
        rp->exp[i].rid = fi.request_id;
        rp->exp[i].success = fi.success;
        rp->exp[i].has_more = fi.has_more;
        rp->exp[i].payload = fi.payload;
        rp->exp[i].payload_len = fi.success ? fi.payload_len : 0;
        rp->exp[i].frame_idx = i;
        expected_fds += (size_t)rp->exp[i].with_fd;
        if (fi.msg == TG_MSG_BIND_SERVICE_REPLY) {
            rp->exp[i].seen = 1; /* consumed by the bind callback */
            int ok;
            uint32_t sid;
            size_t first = rp->n_names;
            assert_int_equal(tg_ipc_parse_bind_reply(fi.msg_data, fi.msg_len, &ok, &sid, name_collect, rp), 0);
            for (size_t k = first; k < rp->n_names; k++)
                rp->names[k].sid = sid;
        } else {
            assert_int_equal(fi.msg, TG_MSG_INVOKE_METHOD_REPLY);
        }
    }

    int sp[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp), 0);
    rp->base = event_base_new();
    tg_conn *conn = tg_conn_new_fd(rp->base, sp[0], NULL, NULL, NULL);
    assert_non_null(conn);
    rp->cli = tg_ipc_client_new(rp->base, conn, &k_replay_cbs, rp);
    assert_non_null(rp->cli);
    rp->host.fd = sp[1];

    /* walk the records in time order */
    size_t issued = 0, c2s_pos = 0, s2c_pos = 0;
    for (size_t j = 0; j < rec.n_recs; j++) {
        const struct tg_rec_record *x = &rec.recs[j];
        if (x->dir == 0) {
            c2s_pos += x->len;
            while (issued < c2s->n && c2s->end[issued] <= c2s_pos) {
                issue(rp, rec.stream[0] + c2s->off[issued], c2s->len[issued], c2s_fd[issued]);
                issued++;
            }
            assert_true(tg_test_run_until(rp->base, client_output_empty, rp, TIMEOUT_MS));
            host_pull(&rp->host);
        } else if (x->dir == 1) {
            int fd = x->nfds ? memfd_with("smb-or-output") : -1;
            host_push(&rp->host, x->data, x->len, fd);
            if (fd >= 0)
                close(fd);
            s2c_pos += x->len;
            size_t complete = 0;
            while (complete < s2c->n && s2c->end[complete] <= s2c_pos)
                complete++;
            struct until_delivered u = {rp, complete};
            if (!tg_test_run_until(rp->base, delivered_enough, &u, TIMEOUT_MS))
                fail_msg("%s: the client handed out %zu of %zu replies", rec.name, rp->delivered, complete);
        }
    }
    assert_int_equal(issued, c2s->n);
    assert_int_equal(rp->delivered, s2c->n);
    assert_int_equal(rp->fds_received, expected_fds);
    assert_false(rp->disconnected);
    host_pull(&rp->host);

    /* what the client sent is what Perfetto's client sent: same frames, same
     * fields, same bytes wherever Perfetto used minimal length varints */
    struct fb *got = calloc(1, sizeof *got);
    assert_non_null(got);
    frame_bounds(rp->host.got, rp->host.got_len, got);
    assert_int_equal(got->n, c2s->n);
    size_t identical = 0;
    for (size_t i = 0; i < got->n; i++) {
        struct tg_frame_info a, b;
        const uint8_t *ga = rp->host.got + got->off[i], *gb = rec.stream[0] + c2s->off[i];
        assert_int_equal(tg_frame_scan(ga, got->len[i], &a), 0);
        assert_int_equal(tg_frame_scan(gb, c2s->len[i], &b), 0);
        if (a.request_id != b.request_id || a.msg != b.msg || a.service_id != b.service_id ||
            a.method_id != b.method_id || a.drop_reply != b.drop_reply || a.payload_len != b.payload_len ||
            (a.payload_len && memcmp(a.payload, b.payload, a.payload_len) != 0))
            fail_msg("%s: client frame %zu differs from the recorded one", rec.name, i);
        if (a.msg == TG_MSG_SET_PEER_IDENTITY || a.msg == TG_MSG_BIND_SERVICE)
            assert_memory_equal(a.msg_data, b.msg_data, a.msg_len < b.msg_len ? a.msg_len : b.msg_len);
        if (got->len[i] == c2s->len[i] && memcmp(ga, gb, got->len[i]) == 0)
            identical++;
        else if (got->len[i] == c2s->len[i])
            fail_msg("%s: client frame %zu has the recorded size but other bytes", rec.name, i);
    }
    assert_true(identical > 0);
    /* fds rode on the first byte of the frames that carried them */
    size_t want_fds = 0;
    for (size_t i = 0; i < c2s->n; i++)
        if (c2s_fd[i]) {
            int found = 0;
            for (size_t k = 0; k < rp->host.n_fds; k++)
                found |= rp->host.fd_offsets[k] == got->off[i] - 4;
            if (!found)
                fail_msg("%s: client frame %zu lost its fd", rec.name, i);
            want_fds++;
        }
    assert_int_equal(rp->host.n_fds, want_fds);

    tg_ipc_client_free(rp->cli);
    tg_test_run_until(rp->base, NULL, NULL, 10);
    event_base_free(rp->base);
    host_free(&rp->host);
    free(got);
    free(c2s);
    free(s2c);
    free(rp->exp);
    free(rp);
    tg_recording_free(&rec);
    assert_int_equal(tg_test_count_open_fds(), fds_before);
}

static void test_replay_recorded_sessions(void **state)
{
    (void)state;
    char **paths;
    size_t n = tg_test_list_dir(tg_test_recordings_dir(), ".bin", &paths);
    if (n == 0) {
        print_message("SKIP: ../shared/interop/recordings not found (set TG_SHARED_DIR)\n");
        skip();
    }
    for (size_t i = 0; i < n; i++)
        replay_one(paths[i]);
    tg_test_free_list(paths, n);
}

/* ------------------------------------------------------- misbehaving hosts */

struct fx {
    struct event_base *base;
    tg_ipc_client *cli;
    struct host_side host;
    int fds_at_start;
    int disconnects;
    /* callback results */
    int bind_calls, bind_ok;
    int reply_calls, reply_success, reply_more;
};

static void fx_disc(tg_ipc_client *cli, const char *reason, void *arg)
{
    ((struct fx *)arg)->disconnects++;
}

static const struct tg_ipc_client_cbs k_fx_cbs = {.on_disconnect = fx_disc};

static int setup(void **state)
{
    struct fx *f = calloc(1, sizeof *f);
    assert_non_null(f);
    f->fds_at_start = tg_test_count_open_fds();
    f->base = event_base_new();
    int sp[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp), 0);
    tg_conn *c = tg_conn_new_fd(f->base, sp[0], NULL, NULL, NULL);
    f->cli = tg_ipc_client_new(f->base, c, &k_fx_cbs, f);
    assert_non_null(f->cli);
    f->host.fd = sp[1];
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fx *f = *state;
    if (f->cli)
        tg_ipc_client_free(f->cli);
    tg_test_run_until(f->base, NULL, NULL, 10);
    event_base_free(f->base);
    host_free(&f->host);
    int now = tg_test_count_open_fds(), then = f->fds_at_start;
    free(f);
    assert_int_equal(now, then);
    return 0;
}

static void fx_bind_cb(tg_ipc_client *cli, tg_ipc_service_proxy *proxy, void *arg)
{
    struct fx *f = arg;
    f->bind_calls++;
    f->bind_ok = proxy != NULL;
}

static void fx_reply_cb(tg_ipc_client *cli, int success, int has_more, const uint8_t *reply, size_t len, void *arg)
{
    struct fx *f = arg;
    f->reply_calls++;
    f->reply_success = success;
    f->reply_more = has_more;
}

static int fx_bind_called(void *arg)
{
    return ((struct fx *)arg)->bind_calls > 0;
}

static int fx_reply_called(void *arg)
{
    return ((struct fx *)arg)->reply_calls > 0;
}

static const struct tg_ipc_method_info k_methods[] = {{1, "Echo"}, {2, "Stream"}};

static tg_ipc_service_proxy *g_proxy;
static void keep_proxy(tg_ipc_client *cli, tg_ipc_service_proxy *proxy, void *arg)
{
    g_proxy = proxy;
    ((struct fx *)arg)->bind_calls++;
}

/* Binds "Svc" through the fake host (request id 1). */
static tg_ipc_service_proxy *fx_bind(struct fx *f)
{
    g_proxy = NULL;
    assert_int_equal(tg_ipc_client_bind(f->cli, "Svc", keep_proxy, f), 0);
    tg_test_run_until(f->base, NULL, NULL, 5);
    uint8_t buf[256];
    size_t n = tg_ipc_encode_bind_reply(buf, sizeof buf, 1, 1, 3, k_methods, 2);
    host_push_frame(&f->host, buf, n);
    assert_true(tg_test_run_until(f->base, fx_bind_called, f, TIMEOUT_MS));
    f->bind_calls = 0;
    assert_non_null(g_proxy);
    assert_int_equal(tg_ipc_proxy_service_id(g_proxy), 3);
    return g_proxy;
}

/* A host answering a bind with an InvokeMethodReply (or an invoke with a
 * BindServiceReply): the callback still runs once, as a failure, and nothing
 * stays pending or leaks. */
static void test_mismatched_reply_types(void **state)
{
    struct fx *f = *state;
    assert_int_equal(tg_ipc_client_bind(f->cli, "Svc", fx_bind_cb, f), 0);
    uint8_t buf[256];
    size_t n = tg_ipc_encode_reply(buf, sizeof buf, 1, 1, 0, (const uint8_t *)"", 0);
    host_push_frame(&f->host, buf, n);
    assert_true(tg_test_run_until(f->base, fx_bind_called, f, TIMEOUT_MS));
    assert_int_equal(f->bind_calls, 1);
    assert_false(f->bind_ok);
    assert_int_equal(tg_ipc_client_pending(f->cli), 0);

    /* the same with has_more set: the bind must not stay pending either */
    f->bind_calls = 0;
    assert_int_equal(tg_ipc_client_bind(f->cli, "Svc", fx_bind_cb, f), 0); /* request 2 */
    n = tg_ipc_encode_reply(buf, sizeof buf, 2, 1, 1, (const uint8_t *)"", 0);
    host_push_frame(&f->host, buf, n);
    assert_true(tg_test_run_until(f->base, fx_bind_called, f, TIMEOUT_MS));
    assert_false(f->bind_ok);
    assert_int_equal(tg_ipc_client_pending(f->cli), 0);

    /* an invoke answered with a bind reply */
    f->bind_calls = 0;
    g_proxy = NULL;
    assert_int_equal(tg_ipc_client_bind(f->cli, "Svc", keep_proxy, f), 0); /* request 3 */
    n = tg_ipc_encode_bind_reply(buf, sizeof buf, 3, 1, 3, k_methods, 2);
    host_push_frame(&f->host, buf, n);
    assert_true(tg_test_run_until(f->base, fx_bind_called, f, TIMEOUT_MS));
    assert_non_null(g_proxy);
    uint64_t rid = tg_ipc_client_invoke_bytes(f->cli, g_proxy, "Echo", NULL, 0, -1, fx_reply_cb, f);
    assert_int_equal(rid, 4);
    n = tg_ipc_encode_bind_reply(buf, sizeof buf, 4, 1, 5, k_methods, 2);
    host_push_frame(&f->host, buf, n);
    assert_true(tg_test_run_until(f->base, fx_reply_called, f, TIMEOUT_MS));
    assert_int_equal(f->reply_calls, 1);
    assert_false(f->reply_success);
    assert_int_equal(tg_ipc_client_pending(f->cli), 0);
    /* the stray bind reply did not create a service the client can call */
    assert_int_equal(tg_ipc_proxy_service_id(g_proxy), 3);
}

static int fx_five_replies(void *arg)
{
    return ((struct fx *)arg)->reply_calls >= 5;
}

static void test_request_error_and_unknown_ids(void **state)
{
    struct fx *f = *state;
    tg_ipc_service_proxy *p = fx_bind(f);
    uint8_t buf[256];
    /* replies for ids nobody is waiting for are ignored */
    size_t n = tg_ipc_encode_reply(buf, sizeof buf, 77, 1, 0, (const uint8_t *)"x", 1);
    host_push_frame(&f->host, buf, n);
    n = tg_ipc_encode_request_error(buf, sizeof buf, 78, "unknown request");
    host_push_frame(&f->host, buf, n);
    static const uint8_t garbage[] = {0xff, 0xff};
    host_push_frame(&f->host, garbage, sizeof garbage);

    /* a RequestError fails the call once */
    uint64_t rid = tg_ipc_client_invoke_bytes(f->cli, p, "Echo", NULL, 0, -1, fx_reply_cb, f);
    assert_int_equal(rid, 2);
    n = tg_ipc_encode_request_error(buf, sizeof buf, rid, "unknown request");
    host_push_frame(&f->host, buf, n);
    assert_true(tg_test_run_until(f->base, fx_reply_called, f, TIMEOUT_MS));
    /* the stray frames came first on the stream: they were read, and ignored */
    assert_int_equal(f->disconnects, 0);
    assert_int_equal(f->reply_calls, 1);
    assert_false(f->reply_success);
    assert_int_equal(tg_ipc_client_pending(f->cli), 0);
    n = tg_ipc_encode_reply(buf, sizeof buf, rid, 1, 0, NULL, 0); /* late reply: ignored */
    host_push_frame(&f->host, buf, n);
    tg_test_run_until(f->base, NULL, NULL, 20);
    assert_int_equal(f->reply_calls, 1);

    /* a stream: kept pending while has_more, finished by the last part */
    f->reply_calls = 0;
    rid = tg_ipc_client_invoke_bytes(f->cli, p, "Stream", NULL, 0, -1, fx_reply_cb, f);
    for (int i = 0; i < 5; i++) {
        n = tg_ipc_encode_reply(buf, sizeof buf, rid, 1, i < 4, (const uint8_t *)"p", 1);
        host_push_frame(&f->host, buf, n);
    }
    assert_true(tg_test_run_until(f->base, fx_five_replies, f, TIMEOUT_MS));
    assert_int_equal(f->reply_calls, 5); /* not 6: the late reply above was ignored */
    assert_false(f->reply_more);
    assert_int_equal(tg_ipc_client_pending(f->cli), 0);

    /* cancel: the callback is not called again */
    f->reply_calls = 0;
    rid = tg_ipc_client_invoke_bytes(f->cli, p, "Stream", NULL, 0, -1, fx_reply_cb, f);
    tg_ipc_client_cancel(f->cli, rid);
    assert_int_equal(tg_ipc_client_pending(f->cli), 0);
    n = tg_ipc_encode_reply(buf, sizeof buf, rid, 1, 0, NULL, 0);
    host_push_frame(&f->host, buf, n);
    tg_test_run_until(f->base, NULL, NULL, 20);
    assert_int_equal(f->reply_calls, 0);
}

static int fx_disconnected(void *arg)
{
    return ((struct fx *)arg)->disconnects > 0;
}

/* The host hangs up: each pending request fails exactly once, then on_disconnect. */
static void test_host_hangup(void **state)
{
    struct fx *f = *state;
    tg_ipc_service_proxy *p = fx_bind(f);
    for (int i = 0; i < 3; i++)
        assert_true(tg_ipc_client_invoke_bytes(f->cli, p, "Echo", NULL, 0, -1, fx_reply_cb, f) != 0);
    assert_int_equal(tg_ipc_client_pending(f->cli), 3);
    close(f->host.fd);
    f->host.fd = -1;
    assert_true(tg_test_run_until(f->base, fx_disconnected, f, TIMEOUT_MS));
    assert_int_equal(f->reply_calls, 3);
    assert_false(f->reply_success);
    assert_int_equal(f->disconnects, 1);
    assert_false(tg_ipc_client_connected(f->cli));
    assert_int_equal(tg_ipc_client_invoke_bytes(f->cli, p, "Echo", NULL, 0, -1, fx_reply_cb, f), 0);
    assert_int_equal(tg_ipc_client_bind(f->cli, "Svc", fx_bind_cb, f), -1);
}

/* Freeing the client from inside a reply callback is safe; no further callbacks. */
static void free_in_cb(tg_ipc_client *cli, int success, int has_more, const uint8_t *reply, size_t len, void *arg)
{
    struct fx *f = arg;
    f->reply_calls++;
    tg_ipc_client_free(cli);
    f->cli = NULL;
}

static void test_free_from_callback(void **state)
{
    struct fx *f = *state;
    tg_ipc_service_proxy *p = fx_bind(f);
    uint64_t r1 = tg_ipc_client_invoke_bytes(f->cli, p, "Stream", NULL, 0, -1, free_in_cb, f);
    assert_true(tg_ipc_client_invoke_bytes(f->cli, p, "Echo", NULL, 0, -1, fx_reply_cb, f) != 0);
    uint8_t buf[64];
    /* two parts in one write: the second must not reach a freed client */
    uint8_t both[128];
    size_t n1 = tg_ipc_encode_reply(buf, sizeof buf, r1, 1, 1, NULL, 0);
    tg_frame_put_header(both, (uint32_t)n1);
    memcpy(both + 4, buf, n1);
    size_t n2 = tg_ipc_encode_reply(buf, sizeof buf, r1, 1, 0, NULL, 0);
    tg_frame_put_header(both + 4 + n1, (uint32_t)n2);
    memcpy(both + 8 + n1, buf, n2);
    host_push(&f->host, both, 8 + n1 + n2, -1);
    assert_true(tg_test_run_until(f->base, fx_reply_called, f, TIMEOUT_MS));
    tg_test_run_until(f->base, NULL, NULL, 30);
    assert_int_equal(f->reply_calls, 1); /* neither the second part nor the Echo failure */
    assert_int_equal(f->disconnects, 0); /* no on_disconnect after free */
    assert_null(f->cli);
    /* the host sees the connection go */
    char b;
    struct pollfd pfd = {f->host.fd, POLLIN, 0};
    assert_int_equal(poll(&pfd, 1, tg_test_ms(1000)), 1);
    ssize_t r;
    while ((r = read(f->host.fd, &b, 1)) > 0) {
    }
    assert_int_equal(r, 0);
}

#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_replay_recorded_sessions),
        T(test_mismatched_reply_types),
        T(test_request_error_and_unknown_ids),
        T(test_host_hangup),
        T(test_free_from_callback),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
