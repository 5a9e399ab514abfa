/* test_gw_forward.c: the bridge's zero-copy forwarding, end to end in one process (a fake
 * ConsumerPort upstream on a UNIX socket, the gateway, clients on TCP and UNIX listeners):
 * streamed replies of every size arrive intact and in order and were moved by reference; client
 * calls are moved too; a frame carrying an fd takes the copying path with its fd; a filter that
 * rewrites some replies gets their bytes while the others are moved past it without; frames whose
 * refusal lies past their first bytes (a repeated or unknown field after a large payload) are
 * still refused in both directions; and the output watermarks pause the upstream exactly as
 * before (the client's queue stays near out-high while it does not read; everything arrives
 * once it does). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "gw.h"
#include "gw_bridge.h"
#include "gw_config.h"
#include "gw_core.h"
#include "gw_listener.h"
#include "gw_metrics.h"
#include "tracegate/addr.h"
#include "tracegate/frame.h"
#include "tracegate/ipc_client.h"
#include "tracegate/ipc_host.h"
#include "tracegate/ipc_wire.h"
#include "tracegate/log.h"
#include "tracegate/pbwire.h"

#include "tg_test_util.h"

#define TIMEOUT_MS 10000
#define MAX_PARTS 128

/* Byte i of streamed part k (k = 1000 for the QueryServiceState reply). */
static uint8_t pat(size_t k, size_t i) { return (uint8_t)(k * 29u + i * 13u + (i >> 8)); }

/* ------------------------------------------------------------ fake upstream */

struct fake {
    tg_ipc_host *host;
    char addr[256];
    size_t n_parts;
    size_t part_size[MAX_PARTS];
    size_t qss_size;
    int enable_calls, fd_written;
    uint8_t *args; /* the last ChangeTraceConfig arguments */
    size_t args_len;
    int evil; /* 1: ReadBuffers answers with a frame the gateway must refuse */
};
static struct fake g_fake;

static void fill(uint8_t *b, size_t k, size_t n)
{
    for (size_t i = 0; i < n; i++)
        b[i] = pat(k, i);
}

/* InvokeMethodReply{success, has_more, reply_proto = `n` bytes}, then has_more again: two readers
 * could disagree on it (the gateway refuses it). The repeat comes after the payload, past the
 * first bytes of the frame. */
static size_t evil_reply(uint8_t *out, uint64_t rid, size_t n)
{
    uint8_t *payload = malloc(n);
    fill(payload, 0, n);
    size_t len = tg_ipc_encode_reply(out, n + 64, rid, 1, 1, payload, n);
    free(payload);
    /* re-encode the member length with 2 more bytes, then append `has_more: 0` */
    size_t inner = 4 + 1 + tg_pb_varint_size(n) + n;
    size_t pre = 1 + tg_pb_varint_size(rid);
    size_t old_hdr = 1 + tg_pb_varint_size(inner);
    uint8_t hdr[16];
    size_t nh = tg_pb_put_tag(hdr, TG_MSG_INVOKE_METHOD_REPLY, TG_PB_LEN);
    nh += tg_pb_put_varint(hdr + nh, inner + 2);
    assert_int_equal(nh, old_hdr); /* same varint width for the sizes used here */
    memcpy(out + pre, hdr, nh);
    out[len++] = 0x10; /* field 2, varint */
    out[len++] = 0x00;
    return len;
}

static void m_read_buffers(tg_ipc_call *call, const ProtobufCMessage *req, void *ctx, void *ps)
{
    (void)req;
    (void)ps;
    struct fake *f = ctx;
    if (f->evil) {
        size_t n = 100000;
        uint8_t *b = malloc(n + 64);
        size_t len = evil_reply(b, tg_ipc_call_request_id(call), n);
        tg_conn_send(tg_ipc_peer_conn(tg_ipc_call_peer(call)), b, len, -1);
        free(b);
        tg_ipc_call_reply_bytes(call, NULL, 0, 0, -1);
        return;
    }
    for (size_t k = 0; k < f->n_parts; k++) {
        uint8_t *b = malloc(f->part_size[k] ? f->part_size[k] : 1);
        fill(b, k, f->part_size[k]);
        tg_ipc_call_reply_bytes(call, b, f->part_size[k], k + 1 < f->n_parts, -1);
        free(b);
    }
}

static void m_qss(tg_ipc_call *call, const ProtobufCMessage *req, void *ctx, void *ps)
{
    (void)req;
    (void)ps;
    struct fake *f = ctx;
    uint8_t *b = malloc(f->qss_size ? f->qss_size : 1);
    fill(b, 1000, f->qss_size);
    tg_ipc_call_reply_bytes(call, b, f->qss_size, 0, -1);
    free(b);
}

static void m_enable(tg_ipc_call *call, const ProtobufCMessage *req, void *ctx, void *ps)
{
    (void)req;
    (void)ps;
    struct fake *f = ctx;
    f->enable_calls++;
    int fd = tg_ipc_peer_take_fd(tg_ipc_call_peer(call));
    if (fd >= 0) {
        f->fd_written = write(fd, "fd!", 3) == 3;
        close(fd);
    }
    tg_ipc_call_reply_bytes(call, NULL, 0, 0, -1);
}

static void m_change(tg_ipc_call *call, const ProtobufCMessage *req, void *ctx, void *ps)
{
    (void)req;
    (void)ps;
    struct fake *f = ctx;
    size_t n;
    const uint8_t *a = tg_ipc_call_args(call, &n);
    free(f->args);
    f->args = malloc(n ? n : 1);
    if (n)
        memcpy(f->args, a, n);
    f->args_len = n;
    tg_ipc_call_reply_bytes(call, NULL, 0, 0, -1);
}

static void m_empty(tg_ipc_call *call, const ProtobufCMessage *req, void *ctx, void *ps)
{
    (void)req;
    (void)ctx;
    (void)ps;
    tg_ipc_call_reply_bytes(call, NULL, 0, 0, -1);
}

static const struct tg_ipc_method k_methods[] = {
    {"EnableTracing", NULL, m_enable},      {"DisableTracing", NULL, m_empty},   {"ReadBuffers", NULL, m_read_buffers},
    {"FreeBuffers", NULL, m_empty},         {"Flush", NULL, m_empty},            {"StartTracing", NULL, m_empty},
    {"ChangeTraceConfig", NULL, m_change},  {"Detach", NULL, m_empty},           {"Attach", NULL, m_empty},
    {"GetTraceStats", NULL, m_empty},       {"ObserveEvents", NULL, m_empty},    {"QueryServiceState", NULL, m_qss},
    {"QueryCapabilities", NULL, m_empty},
};
static const struct tg_ipc_service_def k_def = {.name = "ConsumerPort", .methods = k_methods,
                                                .n_methods = sizeof k_methods / sizeof k_methods[0]};

/* ------------------------------------------------------------ fixture */

static char g_dir[] = "/tmp/tg-test-gwforward-XXXXXX";
static struct event_base *g_base;
static struct tg_gw *g_gw;
static struct tg_gw_config g_cfg;

static int group_setup(void **state)
{
    (void)state;
    tg_log_set_level(TG_LOG_ERROR);
    return mkdtemp(g_dir) ? 0 : -1;
}

static int group_teardown(void **state)
{
    (void)state;
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    return system(cmd) == 0 ? 0 : -1;
}

/* kv: extra options (NULL-terminated pairs). Listener 0 is TCP, listener 1 UNIX. */
static void start(const char *const *kv)
{
    free(g_fake.args);
    memset(&g_fake, 0, sizeof g_fake);
    g_base = event_base_new();
    snprintf(g_fake.addr, sizeof g_fake.addr, "%s/upstream.sock", g_dir);
    unlink(g_fake.addr);
    char err[512];
    g_fake.host = tg_ipc_host_new(g_base, NULL);
    assert_non_null(g_fake.host);
    assert_int_equal(tg_ipc_host_add_service(g_fake.host, &k_def, &g_fake), 1);
    assert_int_equal(tg_ipc_host_listen(g_fake.host, g_fake.addr, 0600, err, sizeof err), 0);
    tg_gw_config_init(&g_cfg);
    char unix_spec[400];
    snprintf(unix_spec, sizeof unix_spec, "consumer=unix:%s/gw.sock", g_dir);
    const char *base_kv[] = {"upstream-consumer", g_fake.addr, "no-http", NULL, "upstream-probe-interval", "0",
                             "listen", "consumer=tcp://127.0.0.1:0", "listen", unix_spec, "rate", "0", NULL};
    for (size_t i = 0; base_kv[i]; i += 2)
        if (tg_gw_config_set(&g_cfg, base_kv[i], base_kv[i + 1], err, sizeof err) != 0)
            fail_msg("config %s: %s", base_kv[i], err);
    for (size_t i = 0; kv && kv[i]; i += 2)
        if (tg_gw_config_set(&g_cfg, kv[i], kv[i + 1], err, sizeof err) != 0)
            fail_msg("config %s: %s", kv[i], err);
    if (tg_gw_config_validate(&g_cfg, err, sizeof err) != 0)
        fail_msg("validate: %s", err);
    g_gw = tg_gw_new(g_base, &g_cfg, NULL, err, sizeof err);
    if (!g_gw)
        fail_msg("tg_gw_new: %s", err);
    if (tg_gw_start_listeners(g_gw, &g_cfg, err, sizeof err) != 0)
        fail_msg("listeners: %s", err);
}

static void stop(void)
{
    tg_test_run_until(g_base, NULL, NULL, 50); /* let deferred closes run */
    tg_gw_free(g_gw);
    g_gw = NULL;
    tg_ipc_host_free(g_fake.host);
    g_fake.host = NULL;
    tg_gw_config_free(&g_cfg);
    event_base_free(g_base);
    g_base = NULL;
    free(g_fake.args);
    g_fake.args = NULL;
}

static const char *listener_addr(size_t i)
{
    struct tg_gw_listener *l = tg_gw_listener_at(g_gw, i);
    assert_non_null(l);
    return tg_gw_listener_address(l);
}

/* The one session's connections' statistics. */
static void session_stats(struct tg_conn_stats *down, struct tg_conn_stats *up)
{
    struct tg_gw_session *s = g_gw->sessions;
    assert_non_null(s);
    assert_null(tg_gw_session_next(s));
    memset(down, 0, sizeof *down);
    memset(up, 0, sizeof *up);
    if (tg_gw_session_down(s))
        tg_conn_get_stats(tg_gw_session_down(s), down);
    if (tg_gw_session_up(s))
        tg_conn_get_stats(tg_gw_session_up(s), up);
}

/* ------------------------------------------------------------ an IPC client */

struct tc {
    tg_ipc_client *cli;
    tg_ipc_service_proxy *proxy;
    int disconnected, bind_done, call_done, call_ok, bad;
    size_t parts;         /* reply parts received for the current call */
    size_t bytes;         /* their payload bytes */
    size_t expect_part0;  /* pattern index of the first part */
    size_t want_size[MAX_PARTS + 1];
};

static void tc_disc(tg_ipc_client *cli, const char *reason, void *arg)
{
    (void)cli;
    (void)reason;
    ((struct tc *)arg)->disconnected = 1;
}

static int bind_done(void *arg) { return ((struct tc *)arg)->bind_done || ((struct tc *)arg)->disconnected; }
static int call_done(void *arg) { return ((struct tc *)arg)->call_done || ((struct tc *)arg)->disconnected; }

static void on_bind(tg_ipc_client *cli, tg_ipc_service_proxy *proxy, void *arg)
{
    struct tc *t = arg;
    (void)cli;
    t->proxy = proxy;
    t->bind_done = 1;
}

static struct tc *tc_open(const char *addr)
{
    struct tc *t = calloc(1, sizeof *t);
    struct tg_ipc_client_cbs cbs = {.on_disconnect = tc_disc};
    char err[256];
    t->cli = tg_ipc_client_connect(g_base, addr, NULL, &cbs, t, err, sizeof err);
    if (!t->cli)
        fail_msg("connect %s: %s", addr, err);
    assert_int_equal(tg_ipc_client_bind(t->cli, "ConsumerPort", on_bind, t), 0);
    assert_true(tg_test_run_until(g_base, bind_done, t, TIMEOUT_MS));
    assert_non_null(t->proxy);
    return t;
}

static void tc_free(struct tc *t)
{
    tg_ipc_client_free(t->cli);
    free(t);
}

/* Checks each reply part against its pattern and expected size. */
static void on_reply(tg_ipc_client *cli, int success, int has_more, const uint8_t *reply, size_t len, void *arg)
{
    struct tc *t = arg;
    (void)cli;
    size_t k = t->expect_part0 + t->parts;
    if (t->parts > MAX_PARTS || len != t->want_size[t->parts])
        t->bad++;
    for (size_t i = 0; i < len && !t->bad; i++)
        if (reply[i] != pat(k, i))
            t->bad++;
    t->parts++;
    t->bytes += len;
    if (!has_more) {
        t->call_ok = success;
        t->call_done = 1;
    }
}

static int tc_call(struct tc *t, const char *method, const uint8_t *args, size_t args_len, int fd)
{
    t->call_done = t->call_ok = 0;
    t->parts = 0;
    t->bytes = 0;
    t->bad = 0;
    assert_true(tg_ipc_client_invoke_bytes(t->cli, t->proxy, method, args, args_len, fd, on_reply, t) != 0);
    assert_true(tg_test_run_until(g_base, call_done, t, TIMEOUT_MS));
    assert_false(t->disconnected);
    return t->call_ok;
}

/* ------------------------------------------------------------ tests */

static const size_t k_sizes[] = {0,     10,    300,   2000,  2100,   4096,  32768, 65536, 65537, 100000,
                                 131000, 1,     77777, 16384, 120000, 50000, 3000,  65000, 500,   90000};

static void set_parts(void)
{
    g_fake.n_parts = sizeof k_sizes / sizeof k_sizes[0];
    memcpy(g_fake.part_size, k_sizes, sizeof k_sizes);
}

static void expect_parts(struct tc *t)
{
    memcpy(t->want_size, k_sizes, sizeof k_sizes);
    t->expect_part0 = 0;
}

/* Streamed replies arrive intact and in order, moved by reference; calls go up moved too. */
static void test_replies_moved_intact(void **state)
{
    (void)state;
    start(NULL);
    set_parts();
    struct tc *t = tc_open(listener_addr(0));
    struct tg_conn_stats d0, u0, d1, u1;
    session_stats(&d0, &u0);
    for (int round = 0; round < 3; round++) {
        expect_parts(t);
        assert_int_equal(tc_call(t, "ReadBuffers", NULL, 0, -1), 1);
        assert_int_equal(t->bad, 0);
        assert_int_equal(t->parts, g_fake.n_parts);
    }
    session_stats(&d1, &u1);
    /* every reply went through the zero-copy path; those of 2 KiB and more by reference */
    size_t n = g_fake.n_parts, by_ref = 0;
    for (size_t k = 0; k < n; k++)
        if (k_sizes[k] >= 2048)
            by_ref += k_sizes[k];
    assert_int_equal(u1.frames_forwarded - u0.frames_forwarded, 3 * n);
    assert_true(u1.bytes_forwarded_by_ref - u0.bytes_forwarded_by_ref >= 3 * by_ref);
    /* the calls went up moved (small: copied, but never pulled up) */
    assert_int_equal(d1.frames_forwarded - d0.frames_forwarded, 3);

    /* a call with large arguments reaches the service intact (moved or copied: its drop_reply
     * comes after the arguments, so it is decided on its first bytes only when contiguous) */
    size_t an = 100000;
    uint8_t *args = malloc(an);
    fill(args, 7, an);
    t->want_size[0] = 0;
    assert_int_equal(tc_call(t, "ChangeTraceConfig", args, an, -1), 1);
    assert_int_equal(g_fake.args_len, an);
    assert_memory_equal(g_fake.args, args, an);
    free(args);
    tc_free(t);
    stop();
}

/* A call carrying an fd takes the copying path and the fd reaches the service; the calls around
 * it are moved. */
static void test_fd_frame_copied(void **state)
{
    (void)state;
    start(NULL);
    g_fake.qss_size = 5000;
    struct tc *t = tc_open(listener_addr(1)); /* UNIX: fds pass */
    struct tg_conn_stats d0, u0, d1, u1;
    t->want_size[0] = 5000;
    t->expect_part0 = 1000;
    assert_int_equal(tc_call(t, "QueryServiceState", NULL, 0, -1), 1);
    assert_int_equal(t->bad, 0);
    session_stats(&d0, &u0);
    int p[2];
    assert_int_equal(pipe(p), 0);
    t->want_size[0] = 0;
    assert_int_equal(tc_call(t, "EnableTracing", NULL, 0, p[1]), 1);
    close(p[1]);
    char got[8] = "";
    assert_int_equal(read(p[0], got, sizeof got), 3);
    assert_memory_equal(got, "fd!", 3);
    close(p[0]);
    assert_int_equal(g_fake.enable_calls, 1);
    session_stats(&d1, &u1);
    assert_int_equal(d1.frames_forwarded, d0.frames_forwarded);         /* the fd frame was not moved */
    assert_int_equal(d1.frames_in, d0.frames_in + 1);                    /* but it was relayed */
    assert_int_equal(u1.frames_forwarded, u0.frames_forwarded + 1);      /* its reply was moved */
    t->want_size[0] = 5000;
    assert_int_equal(tc_call(t, "QueryServiceState", NULL, 0, -1), 1);
    assert_int_equal(t->bad, 0);
    session_stats(&d0, &u0);
    assert_int_equal(d0.frames_forwarded, d1.frames_forwarded + 1);
    tc_free(t);
    stop();
}

/* A filter that rewrites some replies (those with a 777-byte payload) gets their bytes; the other
 * replies are moved past it without (body NULL). */
struct rw_state {
    int with_body, without_body, rewritten;
};
static struct rw_state g_rw;

static int rw_attach(struct tg_gw_session *s, void *ctx, void **state)
{
    (void)s;
    *state = ctx;
    return 1;
}

static int rw_needs_body(struct tg_gw_session *s, const struct tg_frame_info *fi, int up, void *ctx, void *state)
{
    (void)s;
    (void)ctx;
    (void)state;
    return up && fi->msg == TG_MSG_INVOKE_METHOD_REPLY && fi->payload_len == 777;
}

static enum tg_gw_verdict rw_up(struct tg_gw_session *s, struct tg_gw_frame *f, void *ctx, void *state)
{
    (void)ctx;
    (void)state;
    if (!f->body) {
        g_rw.without_body++;
        assert_int_not_equal(f->info->payload_len, 777);
        return TG_GW_FORWARD;
    }
    g_rw.with_body++;
    if (f->info->msg != TG_MSG_INVOKE_METHOD_REPLY || f->info->payload_len != 777)
        return TG_GW_FORWARD;
    /* the rewrite: the payload becomes pattern 2000 */
    uint8_t payload[777], out[900];
    fill(payload, 2000, sizeof payload);
    size_t n = tg_ipc_encode_reply(out, sizeof out, f->info->request_id, 1, f->info->has_more, payload, sizeof payload);
    assert_true(n > 0);
    assert_int_equal(tg_gw_session_send_down(s, out, n, -1), 0);
    g_rw.rewritten++;
    return TG_GW_CONSUME;
}

static const struct tg_gw_filter k_rw = {
    .name = "rewrite", .attach = rw_attach, .on_up_frame = rw_up, .needs_body = rw_needs_body};

static void test_filter_rewrites(void **state)
{
    (void)state;
    memset(&g_rw, 0, sizeof g_rw);
    start(NULL);
    assert_int_equal(tg_gw_add_filter(g_gw, &k_rw, &g_rw), 0);
    g_fake.qss_size = 777;
    set_parts();
    struct tc *t = tc_open(listener_addr(0));
    int body_before = g_rw.with_body; /* the BindServiceReply: the bridge learns from it, copying path */
    t->want_size[0] = 777;
    t->expect_part0 = 2000; /* rewritten */
    assert_int_equal(tc_call(t, "QueryServiceState", NULL, 0, -1), 1);
    assert_int_equal(t->bad, 0);
    assert_int_equal(g_rw.rewritten, 1);
    assert_int_equal(g_rw.with_body, body_before + 1);
    expect_parts(t);
    int without = g_rw.without_body;
    assert_int_equal(tc_call(t, "ReadBuffers", NULL, 0, -1), 1);
    assert_int_equal(t->bad, 0); /* untouched */
    assert_int_equal(g_rw.without_body, without + (int)g_fake.n_parts);
    assert_int_equal(g_rw.with_body, body_before + 1);
    tc_free(t);
    stop();
}

/* ------------------------------------------------------------ raw clients */

/* The one session's client connection has read `want` bytes (or the session is going). */
struct down_read {
    uint64_t want;
};
static int down_has_read(void *arg)
{
    struct down_read *w = arg;
    struct tg_gw_session *s = g_gw->sessions;
    if (!s || !tg_gw_session_down(s) || tg_conn_is_closing(tg_gw_session_down(s)))
        return 1;
    struct tg_conn_stats st;
    tg_conn_get_stats(tg_gw_session_down(s), &st);
    return st.bytes_in >= w->want;
}

/* Sends a piece and waits until the gateway has read it, so the next piece lands in another
 * read. *sent counts what this connection sent so far. */
static void raw_send_piece(int fd, const uint8_t *p, size_t n, uint64_t *sent)
{
    assert_int_equal(send(fd, p, n, MSG_NOSIGNAL), (ssize_t)n);
    *sent += n;
    struct down_read w = {*sent};
    assert_true(tg_test_run_until(g_base, down_has_read, &w, TIMEOUT_MS));
}

/* Reads whole frames off a raw socket: the ReadBuffers parts (request id 2) are checked. */
struct rawrx {
    int fd, eof;
    uint8_t *buf;
    size_t n, cap;
    size_t frames, parts, bad;
    size_t stop_after; /* frames; 0: until the final part */
    int final_seen;
};

static int rawrx_take(void *arg)
{
    struct rawrx *r = arg;
    for (;;) {
        while (r->n >= 4) {
            size_t len = (size_t)r->buf[0] | (size_t)r->buf[1] << 8 | (size_t)r->buf[2] << 16 |
                         (size_t)r->buf[3] << 24;
            if (r->n < 4 + len)
                break;
            struct tg_frame_info fi;
            if (tg_frame_scan(r->buf + 4, len, &fi) != 0 || fi.msg == TG_MSG_NONE)
                r->bad++;
            if (fi.msg == TG_MSG_INVOKE_METHOD_REPLY && fi.request_id == 2) {
                size_t k = r->parts++;
                if (k >= MAX_PARTS || fi.payload_len != g_fake.part_size[k])
                    r->bad++;
                for (size_t i = 0; i < fi.payload_len && !r->bad; i++)
                    if (fi.payload[i] != pat(k, i))
                        r->bad++;
                if (!fi.has_more)
                    r->final_seen = 1;
            }
            r->frames++;
            memmove(r->buf, r->buf + 4 + len, r->n - 4 - len);
            r->n -= 4 + len;
        }
        if (r->stop_after ? r->frames >= r->stop_after : r->final_seen)
            return 1;
        if (r->cap - r->n < 65536) {
            r->cap = r->cap ? r->cap * 2 : 1u << 18;
            r->buf = realloc(r->buf, r->cap);
            assert_non_null(r->buf);
        }
        ssize_t k = recv(r->fd, r->buf + r->n, r->cap - r->n, MSG_DONTWAIT);
        if (k > 0) {
            r->n += (size_t)k;
            continue;
        }
        if (k == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
            r->eof = 1;
            return 1;
        }
        return 0;
    }
}

/* Binds ConsumerPort (service id 1) on a raw connection and waits for the reply. *sent counts the
 * bytes sent. */
static int raw_bound(const char *addr, int rcvbuf, uint64_t *sent)
{
    struct tg_addr a;
    char err[256];
    assert_int_equal(tg_addr_parse(addr, &a, err, sizeof err), 0);
    int fd = socket(a.family, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    if (rcvbuf)
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
    assert_int_equal(connect(fd, (struct sockaddr *)&a.ss, a.len), 0);
    uint8_t b[64];
    size_t n = tg_ipc_encode_bind(b + 4, sizeof b - 4, 1, "ConsumerPort");
    tg_frame_put_header(b, (uint32_t)n);
    assert_int_equal(send(fd, b, n + 4, MSG_NOSIGNAL), (ssize_t)(n + 4));
    *sent = n + 4;
    struct rawrx r = {.fd = fd, .stop_after = 1};
    assert_true(tg_test_run_until(g_base, rawrx_take, &r, TIMEOUT_MS));
    assert_false(r.eof);
    assert_int_equal(r.bad, 0);
    free(r.buf);
    return fd;
}

static int raw_closed(void *arg)
{
    int fd = *(int *)arg;
    uint8_t buf[65536];
    for (;;) {
        ssize_t n = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
        if (n > 0)
            continue;
        return n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
    }
}

/* A client InvokeMethod with a 100 KB argument followed by `tail` (a second field): refused even
 * though its first bytes look fine. */
static void send_invoke_with_tail(int fd, const uint8_t *tail, size_t tail_len, uint64_t *sent)
{
    size_t an = 100000;
    uint8_t *args = malloc(an);
    fill(args, 3, an);
    size_t need = tg_ipc_encode_invoke(NULL, 0, 2, 1, 7, args, an, 0);
    uint8_t *b = malloc(4 + need + tail_len);
    size_t n = tg_ipc_encode_invoke(b + 4, need, 2, 1, 7, args, an, 0);
    /* the member grows by tail_len: rewrite IPCFrame.msg's length (its varint keeps its width) */
    struct tg_pb_reader r;
    struct tg_pb_field f;
    tg_pb_reader_init(&r, b + 4, n);
    assert_int_equal(tg_pb_next(&r, &f), 1); /* request_id: 2 bytes */
    assert_int_equal(tg_pb_next(&r, &f), 1); /* the member */
    assert_int_equal(tg_pb_varint_size(f.len + tail_len), tg_pb_varint_size(f.len));
    tg_pb_put_varint(b + 4 + 2 + 1, f.len + tail_len);
    memcpy(b + 4 + n, tail, tail_len);
    n += tail_len;
    tg_frame_put_header(b, (uint32_t)n);
    /* in pieces, so its bytes land in more than one read */
    raw_send_piece(fd, b, 3000, sent);
    raw_send_piece(fd, b + 3000, 4 + n - 3000, sent);
    free(args);
    free(b);
}

static void test_refused_past_first_bytes(void **state)
{
    (void)state;
    start(NULL);
    const char *addr = listener_addr(0);
    /* client -> service: a second method_id after the argument */
    uint64_t sent;
    int fd = raw_bound(addr, 0, &sent);
    const uint8_t dup_method[] = {0x10, 0x0c}; /* method_id: 12 */
    send_invoke_with_tail(fd, dup_method, sizeof dup_method, &sent);
    assert_true(tg_test_run_until(g_base, raw_closed, &fd, TIMEOUT_MS));
    close(fd);
    assert_int_equal(tg_gw_metrics_frame_rejected_count(g_gw->metrics, "ambiguous"), 1);
    /* and a field InvokeMethod does not declare */
    fd = raw_bound(addr, 0, &sent);
    const uint8_t unknown[] = {0x48, 0x01}; /* field 9: 1 */
    send_invoke_with_tail(fd, unknown, sizeof unknown, &sent);
    assert_true(tg_test_run_until(g_base, raw_closed, &fd, TIMEOUT_MS));
    close(fd);
    assert_int_equal(tg_gw_metrics_frame_rejected_count(g_gw->metrics, "unknown_field"), 1);
    assert_int_equal(g_fake.args_len, 0); /* the service saw neither */

    /* service -> client: has_more given again after a 100 KB reply */
    g_fake.evil = 1;
    struct tc *t = tc_open(addr);
    t->want_size[0] = 100000;
    assert_true(tg_ipc_client_invoke_bytes(t->cli, t->proxy, "ReadBuffers", NULL, 0, -1, on_reply, t) != 0);
    assert_true(tg_test_run_until(g_base, call_done, t, TIMEOUT_MS));
    assert_true(t->disconnected);
    assert_false(t->call_ok);
    assert_int_equal(t->bytes, 0); /* nothing of it reached the client */
    assert_int_equal(tg_gw_metrics_frame_rejected_count(g_gw->metrics, "upstream_frame"), 1);
    tc_free(t);
    stop();
}

/* ------------------------------------------------------------ flow control */

static int down_congested(void *arg)
{
    (void)arg;
    struct tg_gw_session *s = g_gw->sessions;
    return s && tg_gw_session_down(s) && tg_conn_is_congested(tg_gw_session_down(s));
}

static void test_flow_control(void **state)
{
    (void)state;
    const char *kv[] = {"out-high", "256k", "out-low", "64k", "out-soft-limit", "64m", "out-hard-limit", "64m", NULL};
    start(kv);
    g_fake.n_parts = 100;
    for (size_t k = 0; k < 100; k++)
        g_fake.part_size[k] = 60000 + k * 37;
    uint64_t sent;
    int fd = raw_bound(listener_addr(0), 4096, &sent);
    /* ReadBuffers (request id 2), then do not read */
    uint8_t b[64];
    size_t n = tg_ipc_encode_invoke(b + 4, sizeof b - 4, 2, 1, 3, NULL, 0, 0);
    tg_frame_put_header(b, (uint32_t)n);
    assert_int_equal(send(fd, b, n + 4, MSG_NOSIGNAL), (ssize_t)(n + 4));
    assert_true(tg_test_run_until(g_base, down_congested, NULL, TIMEOUT_MS));
    struct tg_gw_session *s = g_gw->sessions;
    struct tg_conn_stats d0, u0, d1, u1;
    session_stats(&d0, &u0);
    /* only to show what does not happen: while the client does not read, the upstream stays
     * paused (it reads no frame) and the client's queue stays near out-high */
    tg_test_run_until(g_base, NULL, NULL, 200);
    session_stats(&d1, &u1);
    assert_int_equal(u1.frames_in, u0.frames_in);
    assert_true(u1.frames_in < 100);
    size_t q = tg_conn_output_len(tg_gw_session_down(s));
    assert_true(q > 256u << 10);
    assert_true(q <= (256u << 10) + TG_FRAME_MAX_DEFAULT);
    /* the client reads: everything arrives, in order, intact */
    struct rawrx r = {.fd = fd};
    assert_true(tg_test_run_until(g_base, rawrx_take, &r, TIMEOUT_MS));
    assert_false(r.eof);
    assert_int_equal(r.bad, 0);
    assert_int_equal(r.parts, 100);
    session_stats(&d1, &u1);
    assert_int_equal(u1.frames_forwarded, u1.frames_in - 1); /* all but the BindServiceReply */
    free(r.buf);
    close(fd);
    stop();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_replies_moved_intact), cmocka_unit_test(test_fd_frame_copied),
        cmocka_unit_test(test_filter_rewrites),      cmocka_unit_test(test_refused_past_first_bytes),
        cmocka_unit_test(test_flow_control),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
