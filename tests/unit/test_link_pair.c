/* test_link_pair.c: two nodes linked over loopback TCP in one process, end to end through real
 * nghttp2 sessions: "hub" (a link listener; its gateway bridges to a fake ConsumerPort) and
 * "edge" (dials it). A consumer channel from edge to hub carries IPC both ways over the record
 * layer: 100 QueryServiceState calls with 40 KB arguments pipelined while 60 KB replies stream
 * back (records spanning many DATA frames in both directions, ACKs falling due inside busy
 * streams, HTTP/2 flow control), every reply arriving whole and in order; the same with the
 * connection cut half way (edge redials and resumes the link; the records the other side lacks
 * go again, nothing is lost or repeated). Then the local client sends a frame over 128 KiB: its
 * channel is reset while bound and busy (the RST goes out from outside nghttp2's callbacks), the
 * link stays up, and a new channel works. 32 channels whose clients stopped reading do not
 * stop another channel of the link. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <signal.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fleet.h"
#include "gw_config.h"
#include "gw_core.h"
#include "link_int.h"
#include "tracegate/ipc_host.h"
#include "tracegate/ipc_wire.h"
#include "tracegate/log.h"
#include "tracegate/pbwire.h"
#include "ipc_frame.pb-c.h"

#include "test_link_util.h"
#include "tg_test_util.h"

#define WAIT_MS 20000
#define N_CALLS 100
#define REPLY_SIZE 60000
#define ARGS_SIZE 40000

static struct tl_pair g_p; /* hub, edge and the link between them */

/* ------------------------------------------------------------ the fake service behind hub */

static void m_qss(tg_ipc_call *call, const ProtobufCMessage *req, void *ctx, void *ps)
{
    (void)req;
    (void)ctx;
    (void)ps;
    uint8_t *b = malloc(REPLY_SIZE);
    assert_non_null(b);
    uint64_t rid = tg_ipc_call_request_id(call);
    for (size_t i = 0; i < REPLY_SIZE; i++)
        b[i] = (uint8_t)(rid * 7 + i);
    tg_ipc_call_reply_bytes(call, b, REPLY_SIZE, 0, -1);
    free(b);
}

static const struct tg_ipc_method k_methods[] = {{"QueryServiceState", NULL, m_qss}};
static const struct tg_ipc_service_def k_consumer = {.name = "ConsumerPort", .methods = k_methods, .n_methods = 1};

/* ------------------------------------------------------------ fixture */

/* the test reads as fast as the loop lets it; the slow-client policy is not what it is about */
static const char *const k_gw_opts[] = {"out-soft-limit", "64m", "out-hard-limit", "128m", NULL};

static int setup(void **state)
{
    (void)state;
    tg_log_set_level(TG_LOG_WARN);
    tl_pair_up(&g_p, "linkpair", &k_consumer, k_gw_opts, 0, WAIT_MS);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    return tl_pair_down(&g_p);
}

/* ------------------------------------------------------------ a raw IPC client on a channel */

struct client {
    int fd;
    struct evbuffer *out, *in;
    Perfetto__Protos__IPCFrame *frames[N_CALLS + 8];
    size_t n_frames;
    int eof;
};

static void client_pump(struct client *c)
{
    while (evbuffer_get_length(c->out)) {
        ssize_t w = evbuffer_write(c->out, c->fd);
        if (w <= 0)
            break;
    }
    for (;;) {
        int r = evbuffer_read(c->in, c->fd, 65536);
        if (r == 0)
            c->eof = 1;
        if (r <= 0)
            break;
    }
    for (;;) {
        size_t have = evbuffer_get_length(c->in);
        if (have < 4)
            return;
        uint8_t h[4];
        evbuffer_copyout(c->in, h, 4);
        uint32_t n = (uint32_t)h[0] | (uint32_t)h[1] << 8 | (uint32_t)h[2] << 16 | (uint32_t)h[3] << 24;
        if (have < 4 + (size_t)n)
            return;
        evbuffer_drain(c->in, 4);
        uint8_t *b = malloc(n ? n : 1);
        assert_non_null(b);
        evbuffer_remove(c->in, b, n);
        Perfetto__Protos__IPCFrame *f = perfetto__protos__ipcframe__unpack(NULL, n, b);
        free(b);
        assert_non_null(f);
        assert_true(c->n_frames < sizeof c->frames / sizeof c->frames[0]);
        c->frames[c->n_frames++] = f;
    }
}

static void client_send(struct client *c, const uint8_t *body, size_t len)
{
    uint8_t h[4] = {(uint8_t)len, (uint8_t)(len >> 8), (uint8_t)(len >> 16), (uint8_t)(len >> 24)};
    evbuffer_add(c->out, h, 4);
    evbuffer_add(c->out, body, len);
    client_pump(c);
}

struct want {
    struct client *c;
    size_t frames;
};
static int got_frames(void *arg)
{
    struct want *w = arg;
    client_pump(w->c);
    return w->c->n_frames >= w->frames;
}
static int got_eof(void *arg)
{
    struct client *c = arg;
    client_pump(c);
    return c->eof;
}

static void client_open(struct client *c)
{
    memset(c, 0, sizeof *c);
    struct tg_gw_client_info who;
    memset(&who, 0, sizeof who);
    snprintf(who.principal, sizeof who.principal, "uid:4242");
    char err[256];
    c->fd = tg_fleet_connect(g_p.edge, "hub", 0, &who, err, sizeof err);
    if (c->fd < 0)
        fail_msg("tg_fleet_connect: %s", err);
    c->out = evbuffer_new();
    c->in = evbuffer_new();
}

static void client_close(struct client *c)
{
    for (size_t i = 0; i < c->n_frames; i++)
        perfetto__protos__ipcframe__free_unpacked(c->frames[i], NULL);
    evbuffer_free(c->out);
    evbuffer_free(c->in);
    close(c->fd);
}

/* Binds ConsumerPort; returns QueryServiceState's (service id << 32 | method id). */
static uint64_t bind_consumer(struct client *c)
{
    uint8_t b[256];
    size_t n = tg_ipc_encode_bind(b, sizeof b, 1, "ConsumerPort");
    client_send(c, b, n);
    struct want w = {c, c->n_frames + 1};
    assert_true(tg_test_run_until(g_p.base, got_frames, &w, WAIT_MS));
    Perfetto__Protos__IPCFrame *f = c->frames[c->n_frames - 1];
    assert_int_equal(f->msg_case, PERFETTO__PROTOS__IPCFRAME__MSG_MSG_BIND_SERVICE_REPLY);
    assert_true(f->msg_bind_service_reply->success);
    uint32_t mid = 0;
    for (size_t i = 0; i < f->msg_bind_service_reply->n_methods; i++)
        if (!strcmp(f->msg_bind_service_reply->methods[i]->name, "QueryServiceState"))
            mid = f->msg_bind_service_reply->methods[i]->id;
    assert_true(mid != 0);
    return (uint64_t)f->msg_bind_service_reply->service_id << 32 | mid;
}

/* ------------------------------------------------------------ tests */

/* Sends N_CALLS QueryServiceState calls (request ids 2..) with ARGS_SIZE bytes of arguments each,
 * so both directions carry records that span DATA frames while the other side's ACKs fall due. */
static void send_calls(struct client *c, uint64_t ids)
{
    uint8_t *args = malloc(ARGS_SIZE + 8), *b = malloc(ARGS_SIZE + 64);
    assert_non_null(args);
    assert_non_null(b);
    size_t al = 0;
    args[al++] = 0x7a; /* field 15, length-delimited: a field the service does not know */
    al += tg_pb_put_varint(args + al, ARGS_SIZE);
    memset(args + al, 0x5a, ARGS_SIZE);
    al += ARGS_SIZE;
    for (uint64_t rid = 2; rid < 2 + N_CALLS; rid++) {
        size_t n = tg_ipc_encode_invoke(b, ARGS_SIZE + 64, rid, (uint32_t)(ids >> 32), (uint32_t)ids, args, al, 0);
        assert_true(n > 0);
        client_send(c, b, n);
    }
    free(args);
    free(b);
}

/* Every reply once, in order, whole. */
static void check_replies(struct client *c)
{
    assert_int_equal(c->n_frames, 1 + N_CALLS);
    for (size_t i = 1; i < c->n_frames; i++) {
        Perfetto__Protos__IPCFrame *f = c->frames[i];
        assert_int_equal(f->request_id, i + 1);
        assert_int_equal(f->msg_case, PERFETTO__PROTOS__IPCFRAME__MSG_MSG_INVOKE_METHOD_REPLY);
        assert_true(f->msg_invoke_method_reply->success);
        assert_int_equal(f->msg_invoke_method_reply->reply_proto.len, REPLY_SIZE);
        const uint8_t *p = f->msg_invoke_method_reply->reply_proto.data;
        for (size_t k = 0; k < REPLY_SIZE; k += 997)
            assert_int_equal(p[k], (uint8_t)(f->request_id * 7 + k));
    }
}

static void test_pipelined_calls(void **state)
{
    (void)state;
    struct client c;
    client_open(&c);
    uint64_t ids = bind_consumer(&c);
    send_calls(&c, ids);
    struct want w = {&c, 1 + N_CALLS};
    assert_true(tg_test_run_until(g_p.base, got_frames, &w, WAIT_MS));
    check_replies(&c);
    struct tg_link *l = tl_link_up(g_p.edge, "hub");
    assert_non_null(l);
    assert_true(l->bytes_in > (uint64_t)N_CALLS * REPLY_SIZE);
    client_close(&c);
}

/* The connection fails in the middle of the traffic (edge's transport reports an error, as a
 * reset would): edge redials and resumes the link, the channel is bound to a new stream with
 * each side's received count, and what the other side had not received goes again. The IPC
 * client sees a pause, nothing lost, nothing twice. */
static void test_resume_mid_stream(void **state)
{
    (void)state;
    struct client c;
    client_open(&c);
    uint64_t ids = bind_consumer(&c);
    struct tg_link *l = tl_link_up(g_p.edge, "hub");
    assert_non_null(l);
    unsigned resumes = l->resumes;
    send_calls(&c, ids);
    struct want some = {&c, 1 + N_CALLS / 4};
    assert_true(tg_test_run_until(g_p.base, got_frames, &some, WAIT_MS));
    /* still streaming: flow control keeps the hub at most a stream window plus socket buffers
     * (a few MB) ahead of what this client read, and the replies are 6 MB */
    assert_true(c.n_frames < 1 + N_CALLS);
    tg_link_conn_tr_cbs.on_error(l->conn, "test: the connection is cut");
    assert_null(l->conn);
    struct want all = {&c, 1 + N_CALLS};
    assert_true(tg_test_run_until(g_p.base, got_frames, &all, WAIT_MS));
    check_replies(&c);
    assert_int_equal(l->resumes, resumes + 1);
    assert_int_equal(l->state, LINK_UP);
    client_close(&c);
}

static int hub_channels_gone(void *arg)
{
    (void)arg;
    struct tg_link *l = tl_link_up(g_p.hub, "edge");
    return l && l->n_channels == 0;
}

static void test_bad_local_frame_resets_channel(void **state)
{
    (void)state;
    struct client c;
    client_open(&c);
    uint64_t ids = bind_consumer(&c);
    /* replies in flight, then a frame header over 128 KiB from the local side */
    for (uint64_t rid = 2; rid < 12; rid++) {
        uint8_t b[64];
        size_t n = tg_ipc_encode_invoke(b, sizeof b, rid, (uint32_t)(ids >> 32), (uint32_t)ids, NULL, 0, 0);
        client_send(&c, b, n);
    }
    static const uint8_t big[4] = {0, 0, 0x20, 0}; /* 2 MiB */
    evbuffer_add(c.out, big, sizeof big);
    client_pump(&c);
    assert_true(tg_test_run_until(g_p.base, got_eof, &c, WAIT_MS)); /* the channel closed its end */
    assert_true(tg_test_run_until(g_p.base, hub_channels_gone, NULL, WAIT_MS));
    client_close(&c);
    /* the link is still up and carries a new channel */
    assert_non_null(tl_link_up(g_p.edge, "hub"));
    client_open(&c);
    bind_consumer(&c);
    client_close(&c);
}

/* Bytes edge holds for its channels' local peers, not yet given back to hub's window. */
static size_t edge_unconsumed(void)
{
    struct tg_link *l = tl_link_up(g_p.edge, "hub");
    size_t sum = 0;
    for (struct link_channel *ch = l ? l->channels : NULL; ch; ch = ch->next)
        sum += ch->unconsumed;
    return sum;
}
static int requests_out(void *arg)
{
    struct client *c = arg;
    while (evbuffer_get_length(c->out) && evbuffer_write(c->out, c->fd) > 0)
        ;
    return evbuffer_get_length(c->out) == 0;
}
static int stalled_enough(void *arg) { return edge_unconsumed() >= *(size_t *)arg; }

/* 32 clients ask for 6 MB of replies each and stop reading: each of their streams holds much of
 * its window at edge, over 17 MiB in all, more than a 16 MiB connection window. Another channel
 * on the same link must still carry its own 6 MB: the connection window leaves room for every
 * stream's window (with a smaller one the stalled streams held all of it and every other channel
 * of the link stopped). */
static void test_stalled_channels_leave_room(void **state)
{
    (void)state;
    enum { N_STALLED = 32 };
    struct client *st = calloc(N_STALLED, sizeof *st);
    assert_non_null(st);
    for (int i = 0; i < N_STALLED; i++) {
        client_open(&st[i]);
        send_calls(&st[i], bind_consumer(&st[i]));
    }
    /* every request goes out; no reply is read any more */
    for (int i = 0; i < N_STALLED; i++)
        assert_true(tg_test_run_until(g_p.base, requests_out, &st[i], WAIT_MS));
    size_t want = (size_t)17 << 20; /* more than a 16 MiB connection window could ever hold */
    assert_true(tg_test_run_until(g_p.base, stalled_enough, &want, WAIT_MS));
    struct client c;
    client_open(&c);
    send_calls(&c, bind_consumer(&c));
    struct want w = {&c, 1 + N_CALLS};
    assert_true(tg_test_run_until(g_p.base, got_frames, &w, WAIT_MS));
    check_replies(&c);
    client_close(&c);
    for (int i = 0; i < N_STALLED; i++)
        client_close(&st[i]);
    free(st);
    assert_true(tg_test_run_until(g_p.base, hub_channels_gone, NULL, WAIT_MS));
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN); /* as in tracegated: a client gone is an error to handle, not a signal */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pipelined_calls),
        cmocka_unit_test(test_resume_mid_stream),
        cmocka_unit_test(test_bad_local_frame_resets_channel),
        cmocka_unit_test(test_stalled_channels_leave_room),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
