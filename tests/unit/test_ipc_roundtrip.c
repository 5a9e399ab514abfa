/* test_ipc_roundtrip.c: tg_ipc_host and tg_ipc_client talking on one event_base over a UNIX
 * socket path, an @abstract name and TCP 127.0.0.1: binding, unary and 10,000-part streamed
 * replies, drop_reply, fd passing both ways, Perfetto's answers to bad frames (unknown ids, empty
 * oneof, garbage, oversize), clients vanishing mid-stream, and SetPeerIdentity. Each scenario runs
 * on every transport; every test also checks that no file descriptor leaked. */
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

#include "tracegate/addr.h"
#include "tracegate/frame.h"
#include "tracegate/ipc_client.h"
#include "tracegate/ipc_host.h"
#include "tracegate/ipc_wire.h"

#include "ipc_frame.pb-c.h"

#include "tg_test_util.h"

enum transport { T_UNIX, T_ABSTRACT, T_TCP };
static enum transport g_transport;

#define STREAM_PARTS 10000
#define TIMEOUT_MS 20000

typedef Perfetto__Protos__IPCFrame__RequestError Str; /* a message with one string: our args/reply type */
#define STR_DESC (&perfetto__protos__ipcframe__request_error__descriptor)

/* ------------------------------------------------------------ the service */

struct svc {
    struct event_base *base;
    int drop_runs;
    int peer_opens, peer_closes;
    int streams_aborted; /* peer went away while an async stream was running */
    int async_batches;
    int other_pings;
};

struct peer_state {
    struct svc *svc;
    tg_ipc_peer *peer;
    tg_ipc_call *stream_call; /* async stream in progress */
    struct event *tick;
    uint32_t stream_total, stream_sent;
};

static void *peer_open(tg_ipc_peer *peer, void *svc_ctx)
{
    struct svc *s = svc_ctx;
    struct peer_state *ps = calloc(1, sizeof *ps);
    assert_non_null(ps);
    ps->svc = s;
    ps->peer = peer;
    s->peer_opens++;
    return ps;
}

static void peer_close(tg_ipc_peer *peer, void *peer_state, void *svc_ctx)
{
    struct svc *s = svc_ctx;
    struct peer_state *ps = peer_state;
    (void)peer;
    s->peer_closes++;
    if (ps->stream_call)
        s->streams_aborted++;
    if (ps->tick)
        event_free(ps->tick);
    free(ps);
}

static void reply_str(tg_ipc_call *call, const char *text, int has_more, int fd)
{
    Str r = PERFETTO__PROTOS__IPCFRAME__REQUEST_ERROR__INIT;
    r.error = (char *)text;
    tg_ipc_call_reply(call, &r.base, has_more, fd);
}

static const char *req_str(const ProtobufCMessage *req)
{
    const Str *s = (const Str *)req;
    return s && s->error ? s->error : "";
}

static void m_echo(tg_ipc_call *call, const ProtobufCMessage *req, void *svc_ctx, void *peer_state)
{
    reply_str(call, req_str(req), 0, -1);
}

/* Streams N parts synchronously: payload = 4-byte LE index + padding. */
static void m_stream(tg_ipc_call *call, const ProtobufCMessage *req, void *svc_ctx, void *peer_state)
{
    uint32_t n = (uint32_t)strtoul(req_str(req), NULL, 10);
    size_t pad = 0;
    const char *p = strchr(req_str(req), '/');
    if (p)
        pad = strtoul(p + 1, NULL, 10);
    uint8_t *buf = calloc(1, 4 + pad);
    assert_non_null(buf);
    for (uint32_t i = 0; i < n; i++) {
        tg_frame_put_header(buf, i);
        if (tg_ipc_call_reply_bytes(call, buf, 4 + pad, i + 1 < n, -1) != 0 && i + 1 < n) {
            tg_ipc_call_reject(call); /* the peer is going away: finish the call */
            break;
        }
    }
    free(buf);
}

#define ASYNC_PAD 200

static void async_tick(evutil_socket_t fd, short what, void *arg)
{
    struct peer_state *ps = arg;
    uint8_t buf[4 + ASYNC_PAD];
    memset(buf, 0xab, sizeof buf);
    ps->svc->async_batches++;
    for (int k = 0; k < 256 && ps->stream_call; k++) {
        if (tg_ipc_peer_output_len(ps->peer) > (256u << 10))
            break; /* flow control, as ReadBuffers does */
        uint32_t i = ps->stream_sent++;
        tg_frame_put_header(buf, i);
        int more = ps->stream_sent < ps->stream_total;
        tg_ipc_call *call = ps->stream_call;
        if (!more)
            ps->stream_call = NULL;
        if (tg_ipc_call_reply_bytes(call, buf, sizeof buf, more, -1) != 0)
            return; /* the connection is closing: peer_close will follow */
    }
    if (ps->stream_call) {
        struct timeval tv = {0, 1000};
        event_add(ps->tick, &tv);
    }
}

/* Streams N parts from the loop, a batch per tick, like ReadBuffers. */
static void m_stream_async(tg_ipc_call *call, const ProtobufCMessage *req, void *svc_ctx, void *peer_state)
{
    struct peer_state *ps = peer_state;
    assert_null(ps->stream_call);
    ps->stream_call = call;
    ps->stream_total = (uint32_t)strtoul(req_str(req), NULL, 10);
    ps->stream_sent = 0;
    if (!ps->tick)
        ps->tick = evtimer_new(ps->svc->base, async_tick, ps);
    struct timeval tv = {0, 0};
    event_add(ps->tick, &tv);
}

static void m_drop(tg_ipc_call *call, const ProtobufCMessage *req, void *svc_ctx, void *peer_state)
{
    struct svc *s = svc_ctx;
    s->drop_runs++;
    assert_true(tg_ipc_call_drop_reply(call));
    reply_str(call, "this must not reach the client", 0, -1);
}

static void m_fd_in(tg_ipc_call *call, const ProtobufCMessage *req, void *svc_ctx, void *peer_state)
{
    int fd = tg_ipc_peer_take_fd(tg_ipc_call_peer(call));
    if (fd < 0) {
        reply_str(call, "<nofd>", 0, -1);
        return;
    }
    char buf[256];
    ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
    close(fd);
    buf[n > 0 ? n : 0] = 0;
    reply_str(call, buf, 0, -1);
}

static int make_memfd(const char *content)
{
    int fd = memfd_create("tg-test", MFD_CLOEXEC);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, content, strlen(content)), (ssize_t)strlen(content));
    return fd;
}

static void m_fd_out(tg_ipc_call *call, const ProtobufCMessage *req, void *svc_ctx, void *peer_state)
{
    char content[200];
    snprintf(content, sizeof content, "from-host:%s", req_str(req));
    int fd = make_memfd(content);
    reply_str(call, "fd attached", 0, fd);
    close(fd); /* the connection sends its own duplicate */
}

static void m_identity(tg_ipc_call *call, const ProtobufCMessage *req, void *svc_ctx, void *peer_state)
{
    tg_ipc_peer *p = tg_ipc_call_peer(call);
    char out[300];
    snprintf(out, sizeof out, "uid=%ld pid=%ld mid=%lu unix=%d name=%s", (long)tg_ipc_peer_uid(p),
             (long)tg_ipc_peer_pid(p), (unsigned long)tg_ipc_peer_machine_id(p), tg_ipc_peer_is_unix(p),
             tg_ipc_peer_machine_name(p));
    reply_str(call, out, 0, -1);
}

/* The handler refuses the call (as a producer method called before InitializeConnection). */
static void m_reject(tg_ipc_call *call, const ProtobufCMessage *req, void *svc_ctx, void *peer_state)
{
    tg_ipc_call_reject(call);
}

/* Answers later, from the loop (as EnableTracing answers when the session ends). */
struct deferred {
    tg_ipc_call *call;
    struct event *ev;
};

static void deferred_cb(evutil_socket_t fd, short what, void *arg)
{
    struct deferred *d = arg;
    reply_str(d->call, "later", 0, -1);
    event_free(d->ev);
    free(d);
}

static void m_defer(tg_ipc_call *call, const ProtobufCMessage *req, void *svc_ctx, void *peer_state)
{
    struct deferred *d = calloc(1, sizeof *d);
    assert_non_null(d);
    d->call = call;
    d->ev = evtimer_new(((struct svc *)svc_ctx)->base, deferred_cb, d);
    struct timeval tv = {0, 30000};
    evtimer_add(d->ev, &tv);
}

static const struct tg_ipc_method k_test_methods[] = {
    {"Echo", STR_DESC, m_echo},           {"Stream", STR_DESC, m_stream}, {"StreamAsync", STR_DESC, m_stream_async},
    {"Drop", STR_DESC, m_drop},           {"FdIn", STR_DESC, m_fd_in},    {"FdOut", STR_DESC, m_fd_out},
    {"Identity", STR_DESC, m_identity},   {"Reject", STR_DESC, m_reject}, {"Defer", STR_DESC, m_defer},
};
enum { M_ECHO = 1, M_STREAM, M_STREAM_ASYNC, M_DROP, M_FD_IN, M_FD_OUT, M_IDENTITY, M_REJECT, M_DEFER };

static const struct tg_ipc_service_def k_test_svc = {
    .name = "TestPort",
    .methods = k_test_methods,
    .n_methods = sizeof k_test_methods / sizeof k_test_methods[0],
    .peer_open = peer_open,
    .peer_close = peer_close,
};

static void m_ping(tg_ipc_call *call, const ProtobufCMessage *req, void *svc_ctx, void *peer_state)
{
    ((struct svc *)svc_ctx)->other_pings++;
    reply_str(call, "pong", 0, -1);
}

static const struct tg_ipc_method k_other_methods[] = {{"Ping", STR_DESC, m_ping}};
static const struct tg_ipc_service_def k_other_svc = {.name = "OtherPort", .methods = k_other_methods, .n_methods = 1};

/* ------------------------------------------------------------ environment */

struct env {
    struct event_base *base;
    tg_ipc_host *host;
    struct svc svc;
    char addr[300];
    char tmpdir[64];
    int fds_at_start;
};

static int setup(void **state)
{
    static int counter;
    struct env *e = calloc(1, sizeof *e);
    assert_non_null(e);
    e->fds_at_start = tg_test_count_open_fds();
    e->base = event_base_new();
    assert_non_null(e->base);
    e->svc.base = e->base;
    struct tg_ipc_host_opts o;
    memset(&o, 0, sizeof o);
    tg_conn_opts_default(&o.conn);
    o.honor_peer_identity = 1;
    e->host = tg_ipc_host_new(e->base, &o);
    assert_non_null(e->host);
    assert_int_equal(tg_ipc_host_add_service(e->host, &k_test_svc, &e->svc), 1);
    assert_int_equal(tg_ipc_host_add_service(e->host, &k_other_svc, &e->svc), 2);
    char err[256] = "";
    int rc = -1;
    switch (g_transport) {
    case T_UNIX:
        snprintf(e->tmpdir, sizeof e->tmpdir, "/tmp/tg-ipc-test.XXXXXX");
        assert_non_null(mkdtemp(e->tmpdir));
        snprintf(e->addr, sizeof e->addr, "%s/ipc.sock", e->tmpdir);
        rc = tg_ipc_host_listen(e->host, e->addr, 0600, err, sizeof err);
        break;
    case T_ABSTRACT:
        snprintf(e->addr, sizeof e->addr, "@tg-ipc-test-%d-%d", (int)getpid(), counter++);
        rc = tg_ipc_host_listen(e->host, e->addr, 0, err, sizeof err);
        break;
    case T_TCP:
        for (int attempt = 0; attempt < 20 && rc != 0; attempt++) {
            int port = tg_test_free_tcp_port();
            assert_true(port > 0);
            snprintf(e->addr, sizeof e->addr, "127.0.0.1:%d", port);
            rc = tg_ipc_host_listen(e->host, e->addr, 0, err, sizeof err);
        }
        break;
    }
    if (rc != 0)
        fail_msg("cannot listen on %s: %s", e->addr, err);
    *state = e;
    return 0;
}

static int host_empty(void *arg)
{
    return tg_ipc_host_peer_count(arg) == 0;
}

static int host_has_no_peers(void *arg)
{
    struct env *e = arg;
    return !e->host || tg_ipc_host_peer_count(e->host) == 0;
}

static int teardown(void **state)
{
    struct env *e = *state;
    /* every client was freed by the test: the host must see them all go */
    int drained = tg_test_run_until(e->base, host_has_no_peers, e, 5000);
    size_t left = e->host ? tg_ipc_host_peer_count(e->host) : 0;
    tg_ipc_host_free(e->host);
    event_base_free(e->base);
    if (e->tmpdir[0]) {
        char p[400];
        snprintf(p, sizeof p, "%s/ipc.sock", e->tmpdir);
        unlink(p); /* normally already removed by the host */
        rmdir(e->tmpdir);
    }
    int fds_now = tg_test_count_open_fds();
    int fds_then = e->fds_at_start;
    free(e);
    assert_true(drained);
    assert_int_equal(left, 0);
    assert_int_equal(fds_now, fds_then); /* no fd leaked by host, client or fd passing */
    return 0;
}

/* --------------------------------------------------------- client helpers */

struct cl {
    struct env *env;
    tg_ipc_client *cli;
    int disconnected;
    char reason[160];
    int bind_done;
    tg_ipc_service_proxy *proxy;
};

static void on_disconnect(tg_ipc_client *cli, const char *reason, void *arg)
{
    struct cl *c = arg;
    c->disconnected = 1;
    snprintf(c->reason, sizeof c->reason, "%s", reason);
}

static const struct tg_ipc_client_cbs k_cli_cbs = {.on_disconnect = on_disconnect};

static struct cl *cl_connect(struct env *e)
{
    struct cl *c = calloc(1, sizeof *c);
    assert_non_null(c);
    c->env = e;
    char err[256] = "";
    c->cli = tg_ipc_client_connect(e->base, e->addr, NULL, &k_cli_cbs, c, err, sizeof err);
    if (!c->cli)
        fail_msg("connect to %s: %s", e->addr, err);
    return c;
}

static int cl_gone(void *arg)
{
    return ((struct cl *)arg)->disconnected;
}

static void cl_free(struct cl *c)
{
    if (c->cli)
        tg_ipc_client_free(c->cli);
    free(c);
}

static void bind_cb(tg_ipc_client *cli, tg_ipc_service_proxy *proxy, void *arg)
{
    struct cl *c = arg;
    c->bind_done = 1;
    c->proxy = proxy;
}

static int bind_done(void *arg)
{
    return ((struct cl *)arg)->bind_done;
}

static tg_ipc_service_proxy *cl_bind(struct cl *c, const char *name)
{
    c->bind_done = 0;
    c->proxy = NULL;
    assert_int_equal(tg_ipc_client_bind(c->cli, name, bind_cb, c), 0);
    assert_true(tg_test_run_until(c->env->base, bind_done, c, TIMEOUT_MS));
    return c->proxy;
}

struct result {
    int done, success, has_more, calls;
    char text[4096];
    int fd;
};

static void unary_cb(tg_ipc_client *cli, int success, int has_more, const uint8_t *reply, size_t len, void *arg)
{
    struct result *r = arg;
    r->calls++;
    r->done = 1;
    r->success = success;
    r->has_more = has_more;
    r->text[0] = 0;
    if (success) {
        Str *s = (Str *)protobuf_c_message_unpack(STR_DESC, NULL, len, reply);
        assert_non_null(s);
        snprintf(r->text, sizeof r->text, "%s", s->error ? s->error : "");
        protobuf_c_message_free_unpacked(&s->base, NULL);
    }
    r->fd = tg_ipc_client_take_fd(cli);
}

static int result_done(void *arg)
{
    return ((struct result *)arg)->done;
}

/* Invokes method(text) and waits for the (single) reply. */
static struct result call_sync(struct cl *c, tg_ipc_service_proxy *proxy, const char *method, const char *text, int fd)
{
    struct result r;
    memset(&r, 0, sizeof r);
    r.fd = -1;
    Str s = PERFETTO__PROTOS__IPCFRAME__REQUEST_ERROR__INIT;
    s.error = (char *)text;
    uint64_t rid = tg_ipc_client_invoke(c->cli, proxy, method, &s.base, fd, unary_cb, &r);
    assert_true(rid != 0);
    assert_true(tg_test_run_until(c->env->base, result_done, &r, TIMEOUT_MS));
    assert_int_equal(r.calls, 1);
    return r;
}

/* --------------------------------------------------- raw socket helpers */

/* A raw client: frames written by hand, replies read into a frame reader on
 * the same event loop. */
struct raw {
    struct env *env;
    int fd;
    struct event *ev;
    tg_frame_reader *reader;
    uint8_t **frames;
    size_t *lens;
    size_t n, cap;
    int eof;
};

static void raw_read_cb(evutil_socket_t fd, short what, void *arg)
{
    struct raw *r = arg;
    uint8_t buf[65536];
    for (;;) {
        ssize_t n = recv(fd, buf, sizeof buf, 0);
        if (n > 0) {
            tg_frame_reader_feed(r->reader, buf, (size_t)n);
            continue;
        }
        if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
            r->eof = 1;
            event_del(r->ev);
        }
        break;
    }
    const uint8_t *body;
    size_t len;
    while (tg_frame_reader_next(r->reader, &body, &len) == TG_FRAME_READY) {
        if (r->n == r->cap) {
            r->cap = r->cap ? r->cap * 2 : 16;
            r->frames = realloc(r->frames, r->cap * sizeof *r->frames);
            r->lens = realloc(r->lens, r->cap * sizeof *r->lens);
            assert_non_null(r->frames);
            assert_non_null(r->lens);
        }
        r->frames[r->n] = malloc(len);
        assert_non_null(r->frames[r->n]);
        memcpy(r->frames[r->n], body, len);
        r->lens[r->n] = len;
        r->n++;
    }
}

static struct raw *raw_connect(struct env *e)
{
    struct raw *r = calloc(1, sizeof *r);
    assert_non_null(r);
    r->env = e;
    struct tg_addr a;
    char err[200];
    assert_int_equal(tg_addr_parse(e->addr, &a, err, sizeof err), 0);
    r->fd = tg_addr_connect_wait(&a, 5000);
    assert_true(r->fd >= 0);
    r->reader = tg_frame_reader_new(0);
    r->ev = event_new(e->base, r->fd, EV_READ | EV_PERSIST, raw_read_cb, r);
    event_add(r->ev, NULL);
    return r;
}

static void raw_close(struct raw *r)
{
    event_free(r->ev);
    if (r->fd >= 0)
        close(r->fd);
    tg_frame_reader_free(r->reader);
    for (size_t i = 0; i < r->n; i++)
        free(r->frames[i]);
    free(r->frames);
    free(r->lens);
    free(r);
}

/* Blocking-ish write of raw bytes (the host runs on our loop, so poll it). */
static void raw_write(struct raw *r, const void *data, size_t len)
{
    const uint8_t *p = data;
    while (len) {
        ssize_t n = send(r->fd, p, len, MSG_NOSIGNAL);
        if (n < 0 && errno == EAGAIN) {
            event_base_loop(r->env->base, EVLOOP_NONBLOCK);
            continue;
        }
        assert_true(n > 0);
        p += n;
        len -= (size_t)n;
    }
}

static void raw_send_frame(struct raw *r, const uint8_t *body, size_t len)
{
    uint8_t hdr[4];
    tg_frame_put_header(hdr, (uint32_t)len);
    raw_write(r, hdr, 4);
    if (len)
        raw_write(r, body, len);
}

struct raw_wait {
    struct raw *r;
    size_t want;
};

static int raw_has(void *arg)
{
    struct raw_wait *w = arg;
    return w->r->n >= w->want || w->r->eof;
}

static int raw_eof(void *arg)
{
    return ((struct raw *)arg)->eof;
}

/* Waits for frame #idx and scans it. */
static void raw_frame(struct raw *r, size_t idx, struct tg_frame_info *fi)
{
    struct raw_wait w = {r, idx + 1};
    tg_test_run_until(r->env->base, raw_has, &w, TIMEOUT_MS);
    if (r->n <= idx)
        fail_msg("raw client: frame #%zu never arrived (eof=%d)", idx, r->eof);
    assert_int_equal(tg_frame_scan(r->frames[idx], r->lens[idx], fi), 0);
}

static uint32_t g_raw_echo_id;
static void raw_method(void *arg, uint32_t id, const char *name, size_t nl)
{
    if (nl == 4 && memcmp(name, "Echo", 4) == 0)
        g_raw_echo_id = id;
    (*(int *)arg)++;
}

/* Binds TestPort by hand; returns the service id. */
static uint32_t raw_bind(struct raw *r, uint64_t rid, size_t reply_idx)
{
    uint8_t buf[128];
    size_t n = tg_ipc_encode_bind(buf, sizeof buf, rid, "TestPort");
    raw_send_frame(r, buf, n);
    struct tg_frame_info fi;
    raw_frame(r, reply_idx, &fi);
    assert_int_equal(fi.msg, TG_MSG_BIND_SERVICE_REPLY);
    assert_int_equal(fi.request_id, rid);
    int ok = 0, nm = 0;
    uint32_t sid = 0;
    g_raw_echo_id = 0;
    assert_int_equal(tg_ipc_parse_bind_reply(fi.msg_data, fi.msg_len, &ok, &sid, raw_method, &nm), 0);
    assert_true(ok);
    assert_int_equal(nm, (int)k_test_svc.n_methods);
    assert_int_equal(g_raw_echo_id, M_ECHO);
    return sid;
}

static void raw_invoke(struct raw *r, uint64_t rid, uint32_t sid, uint32_t mid, const char *text, int drop)
{
    Str s = PERFETTO__PROTOS__IPCFRAME__REQUEST_ERROR__INIT;
    s.error = (char *)text;
    uint8_t args[256], buf[400];
    size_t al = protobuf_c_message_pack(&s.base, args);
    size_t n = tg_ipc_encode_invoke(buf, sizeof buf, rid, sid, mid, args, al, drop);
    assert_true(n > 0);
    raw_send_frame(r, buf, n);
}

/* ================================================================== tests */

static void test_bind_and_unary(void **state)
{
    struct env *e = *state;
    struct cl *c = cl_connect(e);
    tg_ipc_service_proxy *p = cl_bind(c, "TestPort");
    assert_non_null(p);
    assert_int_equal(e->svc.peer_opens, 1);
    /* method ids are positions in the declaration, looked up by name */
    assert_int_equal(tg_ipc_proxy_service_id(p), 1);
    assert_int_equal(tg_ipc_proxy_method_id(p, "Echo"), M_ECHO);
    assert_int_equal(tg_ipc_proxy_method_id(p, "Identity"), M_IDENTITY);
    assert_int_equal(tg_ipc_proxy_method_id(p, "Nope"), 0);
    /* calling a method the host did not list sends nothing */
    assert_int_equal(tg_ipc_client_invoke(c->cli, p, "Nope", NULL, -1, unary_cb, NULL), 0);
    assert_int_equal(tg_ipc_client_pending(c->cli), 0);

    struct result r = call_sync(c, p, "Echo", "hello tracegate", -1);
    assert_true(r.success);
    assert_false(r.has_more);
    assert_string_equal(r.text, "hello tracegate");
    assert_int_equal(r.fd, -1);
    /* an empty request (zero-length args_proto) is a valid message */
    r = call_sync(c, p, "Echo", "", -1);
    assert_true(r.success);
    assert_string_equal(r.text, "");

    /* a second service on the same connection gets its own service id */
    tg_ipc_service_proxy *o = cl_bind(c, "OtherPort");
    assert_non_null(o);
    assert_int_equal(tg_ipc_proxy_service_id(o), 2);
    assert_int_equal(tg_ipc_proxy_method_id(o, "Ping"), 1);
    r = call_sync(c, o, "Ping", "", -1);
    assert_true(r.success);
    assert_string_equal(r.text, "pong");
    assert_int_equal(e->svc.other_pings, 1);
    assert_int_equal(tg_ipc_client_pending(c->cli), 0);
    cl_free(c);
}

static void test_unknown_service_name(void **state)
{
    struct env *e = *state;
    struct cl *c = cl_connect(e);
    assert_null(cl_bind(c, "NoSuchPort"));
    assert_true(c->bind_done);
    assert_false(c->disconnected);
    assert_int_equal(e->svc.peer_opens, 0);
    /* the connection stays usable */
    tg_ipc_service_proxy *p = cl_bind(c, "TestPort");
    assert_non_null(p);
    struct result r = call_sync(c, p, "Echo", "still here", -1);
    assert_true(r.success);
    assert_string_equal(r.text, "still here");

    /* on the wire: a reply with the same request id, success unset, no methods */
    struct raw *raw = raw_connect(e);
    uint8_t buf[128];
    size_t n = tg_ipc_encode_bind(buf, sizeof buf, 41, "ConsumerPortX");
    raw_send_frame(raw, buf, n);
    struct tg_frame_info fi;
    raw_frame(raw, 0, &fi);
    assert_int_equal(fi.msg, TG_MSG_BIND_SERVICE_REPLY);
    assert_int_equal(fi.request_id, 41);
    int ok = 1, nm = 0;
    uint32_t sid = 99;
    assert_int_equal(tg_ipc_parse_bind_reply(fi.msg_data, fi.msg_len, &ok, &sid, raw_method, &nm), 0);
    assert_false(ok);
    assert_int_equal(nm, 0);
    raw_close(raw);
    cl_free(c);
}

struct stream_rx {
    uint32_t parts, next;
    int out_of_order, bad_len, failed, done, last_has_more;
    size_t pad;
    uint32_t free_after; /* free the client from the callback after this many parts (0 = never) */
    struct cl *cl;
};

static void stream_cb(tg_ipc_client *cli, int success, int has_more, const uint8_t *reply, size_t len, void *arg)
{
    struct stream_rx *s = arg;
    if (!success) {
        s->failed++;
        s->done = 1;
        return;
    }
    if (len != 4 + s->pad) {
        s->bad_len++;
    } else {
        uint32_t idx = (uint32_t)reply[0] | (uint32_t)reply[1] << 8 | (uint32_t)reply[2] << 16 |
                       (uint32_t)reply[3] << 24;
        if (idx != s->next)
            s->out_of_order++;
        s->next = idx + 1;
    }
    s->parts++;
    s->last_has_more = has_more;
    if (!has_more)
        s->done = 1;
    if (s->free_after && s->parts == s->free_after) {
        tg_ipc_client_free(s->cl->cli); /* documented as safe from a callback */
        s->cl->cli = NULL;
        s->done = 1;
    }
}

static int stream_done(void *arg)
{
    return ((struct stream_rx *)arg)->done;
}

static void run_stream(struct cl *c, tg_ipc_service_proxy *p, const char *method, uint32_t parts, size_t pad)
{
    struct stream_rx s;
    memset(&s, 0, sizeof s);
    s.pad = pad;
    char arg[64];
    snprintf(arg, sizeof arg, "%u/%zu", parts, pad);
    Str req = PERFETTO__PROTOS__IPCFRAME__REQUEST_ERROR__INIT;
    req.error = arg;
    assert_true(tg_ipc_client_invoke(c->cli, p, method, &req.base, -1, stream_cb, &s) != 0);
    assert_true(tg_test_run_until(c->env->base, stream_done, &s, TIMEOUT_MS));
    assert_int_equal(s.failed, 0);
    assert_int_equal(s.bad_len, 0);
    assert_int_equal(s.parts, parts);
    assert_int_equal(s.out_of_order, 0);
    assert_int_equal(s.last_has_more, 0);
    assert_int_equal(tg_ipc_client_pending(c->cli), 0); /* the request is finished */
}

static void test_stream_10000(void **state)
{
    struct env *e = *state;
    struct cl *c = cl_connect(e);
    tg_ipc_service_proxy *p = cl_bind(c, "TestPort");
    assert_non_null(p);
    run_stream(c, p, "Stream", STREAM_PARTS, 0);     /* all queued at once, tiny parts */
    run_stream(c, p, "Stream", 300, 60000);           /* fewer, big parts (18 MB) */
    run_stream(c, p, "StreamAsync", STREAM_PARTS, ASYNC_PAD); /* paced from the loop */
    assert_true(e->svc.async_batches >= STREAM_PARTS / 256);
    struct result r = call_sync(c, p, "Echo", "after streams", -1);
    assert_string_equal(r.text, "after streams");
    cl_free(c);
}

static void test_drop_reply(void **state)
{
    struct env *e = *state;
    struct cl *c = cl_connect(e);
    tg_ipc_service_proxy *p = cl_bind(c, "TestPort");
    struct tg_conn_stats before, after;
    tg_conn_get_stats(tg_ipc_client_conn(c->cli), &before);
    Str s = PERFETTO__PROTOS__IPCFRAME__REQUEST_ERROR__INIT;
    s.error = "fire and forget";
    /* no callback: drop_reply is set and nothing stays pending */
    assert_true(tg_ipc_client_invoke(c->cli, p, "Drop", &s.base, -1, NULL, NULL) != 0);
    assert_int_equal(tg_ipc_client_pending(c->cli), 0);
    struct result r = call_sync(c, p, "Echo", "next", -1);
    assert_true(r.success);
    assert_string_equal(r.text, "next");
    assert_int_equal(e->svc.drop_runs, 1);
    tg_test_run_until(e->base, NULL, NULL, 50); /* a late reply would show up now */
    tg_conn_get_stats(tg_ipc_client_conn(c->cli), &after);
    assert_int_equal(after.frames_in - before.frames_in, 1); /* only Echo's reply arrived */

    /* on the wire: drop_reply on a good call sends nothing; the next call is answered */
    struct raw *raw = raw_connect(e);
    uint32_t sid = raw_bind(raw, 1, 0);
    raw_invoke(raw, 2, sid, M_DROP, "x", 1);
    raw_invoke(raw, 3, sid, M_ECHO, "y", 0);
    struct tg_frame_info fi;
    raw_frame(raw, 1, &fi);
    assert_int_equal(fi.request_id, 3);
    assert_int_equal(e->svc.drop_runs, 2);
    tg_test_run_until(e->base, NULL, NULL, 50);
    assert_int_equal(raw->n, 2);
    raw_close(raw);
    cl_free(c);
}

static void test_fd_passing(void **state)
{
    struct env *e = *state;
    int is_unix = g_transport != T_TCP;
    struct cl *c = cl_connect(e);
    tg_ipc_service_proxy *p = cl_bind(c, "TestPort");

    /* client -> host: the host reads what the client wrote into a memfd */
    int fd = make_memfd("payload-from-client");
    struct result r = call_sync(c, p, "FdIn", "", fd);
    close(fd);
    assert_true(r.success);
    assert_string_equal(r.text, is_unix ? "payload-from-client" : "<nofd>"); /* TCP carries no fds */

    /* the fd rides on its own frame only: the next call brings none */
    r = call_sync(c, p, "FdIn", "", -1);
    assert_string_equal(r.text, "<nofd>");

    /* host -> client in a reply */
    r = call_sync(c, p, "FdOut", "abc", -1);
    assert_true(r.success);
    assert_string_equal(r.text, "fd attached");
    if (is_unix) {
        assert_true(r.fd >= 0);
        char buf[64] = "";
        assert_int_equal(pread(r.fd, buf, sizeof buf - 1, 0), (ssize_t)strlen("from-host:abc"));
        assert_string_equal(buf, "from-host:abc");
        assert_true(fcntl(r.fd, F_GETFD) & FD_CLOEXEC);
        close(r.fd);
    } else {
        assert_int_equal(r.fd, -1);
    }
    /* several rounds: fds keep arriving with the right frame, none leak */
    for (int i = 0; i < 20; i++) {
        char want[64], got[64] = "";
        snprintf(want, sizeof want, "round-%d", i);
        fd = make_memfd(want);
        r = call_sync(c, p, "FdIn", "", fd);
        close(fd);
        assert_string_equal(r.text, is_unix ? want : "<nofd>");
        r = call_sync(c, p, "FdOut", want, -1);
        if (is_unix) {
            assert_true(r.fd >= 0);
            ssize_t n = pread(r.fd, got, sizeof got - 1, 0);
            assert_true(n > 0);
            close(r.fd);
            assert_string_equal(got + strlen("from-host:"), want);
        }
    }
    cl_free(c);
}

static void test_bad_ids_and_requests(void **state)
{
    struct env *e = *state;
    struct raw *r = raw_connect(e);
    struct tg_frame_info fi;
    size_t idx = 0;

    /* invoking before any bind: the service id is not bound on this connection */
    raw_invoke(r, 1, 1, M_ECHO, "early", 0);
    raw_frame(r, idx++, &fi);
    assert_int_equal(fi.msg, TG_MSG_INVOKE_METHOD_REPLY);
    assert_int_equal(fi.request_id, 1);
    assert_int_equal(fi.success, 0);
    assert_int_equal(fi.has_payload, 0);

    uint32_t sid = raw_bind(r, 2, idx++);
    assert_int_equal(sid, 1);
    static const struct {
        uint32_t sid, mid;
        int drop;
    } bad[] = {
        {1, 99, 0}, /* unknown method id */
        {1, 0, 0},  /* method id 0 */
        {1, M_DEFER + 1, 0},
        {9, 1, 0},  /* unknown service id */
        {0, 1, 0},  /* service id 0 */
        {2, 1, 0},  /* OtherPort exists but was not bound here */
        {1, 99, 1}, /* drop_reply does not silence pre-dispatch failures */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        uint64_t rid = 100 + i;
        raw_invoke(r, rid, bad[i].sid, bad[i].mid, "x", bad[i].drop);
        raw_frame(r, idx++, &fi);
        assert_int_equal(fi.msg, TG_MSG_INVOKE_METHOD_REPLY);
        assert_int_equal(fi.request_id, rid);
        assert_int_equal(fi.success, 0);
        assert_int_equal(fi.has_more, 0);
        assert_int_equal(fi.has_payload, 0);
    }
    assert_int_equal(e->svc.other_pings, 0);

    /* args that do not decode as the request type: Reject */
    static const uint8_t bad_args[] = {0x0a, 0x05, 'a'};
    uint8_t buf[256];
    size_t n = tg_ipc_encode_invoke(buf, sizeof buf, 200, sid, M_ECHO, bad_args, sizeof bad_args, 0);
    raw_send_frame(r, buf, n);
    raw_frame(r, idx++, &fi);
    assert_int_equal(fi.request_id, 200);
    assert_int_equal(fi.success, 0);

    /* a frame whose msg oneof is empty -> RequestError "unknown request" */
    static const uint8_t empty_msg[] = {0x10, 0x2a}; /* request_id 42 only */
    raw_send_frame(r, empty_msg, sizeof empty_msg);
    raw_frame(r, idx++, &fi);
    assert_int_equal(fi.msg, TG_MSG_REQUEST_ERROR);
    assert_int_equal(fi.request_id, 42);
    Str *re = (Str *)protobuf_c_message_unpack(STR_DESC, NULL, fi.msg_len, fi.msg_data);
    assert_non_null(re);
    assert_string_equal(re->error, "unknown request");
    protobuf_c_message_free_unpacked(&re->base, NULL);

    /* a reply type sent to the host is not a request either */
    n = tg_ipc_encode_reply(buf, sizeof buf, 43, 1, 0, NULL, 0);
    raw_send_frame(r, buf, n);
    raw_frame(r, idx++, &fi);
    assert_int_equal(fi.msg, TG_MSG_REQUEST_ERROR);
    assert_int_equal(fi.request_id, 43);

    /* garbage (not protobuf) and empty frames are dropped silently */
    static const uint8_t garbage[] = {0xff, 0xff, 0xff, 0xff, 0x07};
    raw_send_frame(r, garbage, sizeof garbage);
    raw_send_frame(r, NULL, 0);
    /* ... and the connection still works */
    raw_invoke(r, 300, sid, M_ECHO, "alive", 0);
    raw_frame(r, idx++, &fi);
    assert_int_equal(fi.request_id, 300);
    assert_int_equal(fi.success, 1);
    Str *s = (Str *)protobuf_c_message_unpack(STR_DESC, NULL, fi.payload_len, fi.payload);
    assert_non_null(s);
    assert_string_equal(s->error, "alive");
    protobuf_c_message_free_unpacked(&s->base, NULL);
    tg_test_run_until(e->base, NULL, NULL, 30);
    assert_int_equal(r->n, idx); /* nothing answered the garbage */
    assert_false(r->eof);
    raw_close(r);
}

static void test_oversize_closes_only_that_connection(void **state)
{
    struct env *e = *state;
    struct cl *good = cl_connect(e);
    tg_ipc_service_proxy *p = cl_bind(good, "TestPort");
    struct raw *r = raw_connect(e);
    raw_bind(r, 1, 0);
    assert_int_equal(tg_ipc_host_peer_count(e->host), 2);

    /* header announcing 128 KiB - 4 + 1 body bytes: one byte over Perfetto's limit */
    uint8_t hdr[4];
    tg_frame_put_header(hdr, TG_FRAME_MAX_DEFAULT - TG_FRAME_HEADER_SIZE + 1);
    raw_write(r, hdr, 4);
    raw_write(r, "\x10\x01", 2);
    assert_true(tg_test_run_until(e->base, raw_eof, r, TIMEOUT_MS)); /* the host hung up */
    assert_int_equal(r->n, 1);                                       /* nothing but the bind reply */
    raw_close(r);

    struct result res = call_sync(good, p, "Echo", "unaffected", -1);
    assert_true(res.success);
    assert_string_equal(res.text, "unaffected");
    assert_false(good->disconnected);
    assert_int_equal(tg_ipc_host_peer_count(e->host), 1);

    /* exactly at the limit is fine */
    r = raw_connect(e);
    uint32_t sid = raw_bind(r, 1, 0);
    size_t body = TG_FRAME_MAX_DEFAULT - TG_FRAME_HEADER_SIZE;
    uint8_t *big = malloc(body);
    assert_non_null(big);
    uint8_t *args = malloc(body);
    assert_non_null(args);
    /* an Echo whose IPCFrame is exactly `body` bytes */
    char *text = malloc(body);
    assert_non_null(text);
    size_t k = body - 20, n = 0;
    for (int tries = 0; tries < 8; tries++) {
        memset(text, 'a', k);
        text[k] = 0;
        Str big_req = PERFETTO__PROTOS__IPCFRAME__REQUEST_ERROR__INIT;
        big_req.error = text;
        size_t al = protobuf_c_message_pack(&big_req.base, args);
        n = tg_ipc_encode_invoke(NULL, 0, 7, sid, M_ECHO, args, al, 0);
        if (n == body) {
            assert_int_equal(tg_ipc_encode_invoke(big, body, 7, sid, M_ECHO, args, al, 0), body);
            break;
        }
        k = n > body ? k - (n - body) : k + (body - n);
    }
    assert_int_equal(n, body);
    free(text);
    raw_send_frame(r, big, body);
    struct tg_frame_info fi;
    raw_frame(r, 1, &fi);
    assert_int_equal(fi.request_id, 7);
    assert_int_equal(fi.success, 1);
    assert_false(r->eof);
    free(big);
    free(args);
    raw_close(r);
    cl_free(good);
}

static void test_disconnect_mid_stream(void **state)
{
    struct env *e = *state;

    /* 1. a client frees itself from the reply callback after 1000 of 10,000 parts */
    struct cl *c = cl_connect(e);
    tg_ipc_service_proxy *p = cl_bind(c, "TestPort");
    struct stream_rx s;
    memset(&s, 0, sizeof s);
    s.free_after = 1000;
    s.cl = c;
    s.pad = ASYNC_PAD;
    Str req = PERFETTO__PROTOS__IPCFRAME__REQUEST_ERROR__INIT;
    req.error = "10000";
    assert_true(tg_ipc_client_invoke(c->cli, p, "StreamAsync", &req.base, -1, stream_cb, &s) != 0);
    assert_true(tg_test_run_until(e->base, stream_done, &s, TIMEOUT_MS));
    assert_int_equal(s.parts, 1000);
    assert_int_equal(s.bad_len, 0);
    assert_true(tg_test_run_until(e->base, host_has_no_peers, e, TIMEOUT_MS));
    assert_int_equal(e->svc.streams_aborted, 1);
    assert_int_equal(e->svc.peer_closes, 1);
    free(c);

    /* 2. a raw client vanishes with replies unread in its socket (RST on the host's writes) */
    struct raw *r = raw_connect(e);
    uint32_t sid = raw_bind(r, 1, 0);
    raw_invoke(r, 2, sid, M_STREAM_ASYNC, "10000", 0);
    struct raw_wait w = {r, 50};
    assert_true(tg_test_run_until(e->base, raw_has, &w, TIMEOUT_MS));
    event_del(r->ev);
    struct linger lg = {1, 0}; /* close with RST */
    setsockopt(r->fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
    raw_close(r);
    assert_true(tg_test_run_until(e->base, host_has_no_peers, e, TIMEOUT_MS));
    assert_int_equal(e->svc.streams_aborted, 2);

    /* 3. a synchronous 10,000-part stream of 1 KiB parts is all queued in the host
     *    when the client goes: the queued output is dropped with the connection */
    r = raw_connect(e);
    sid = raw_bind(r, 1, 0);
    raw_invoke(r, 2, sid, M_STREAM, "10000/1024", 0);
    w.r = r;
    w.want = 3;
    assert_true(tg_test_run_until(e->base, raw_has, &w, TIMEOUT_MS));
    event_del(r->ev);
    raw_close(r);
    assert_true(tg_test_run_until(e->base, host_has_no_peers, e, TIMEOUT_MS));

    /* the host is healthy: a new client gets the full service */
    c = cl_connect(e);
    p = cl_bind(c, "TestPort");
    assert_non_null(p);
    run_stream(c, p, "StreamAsync", STREAM_PARTS, ASYNC_PAD);
    run_stream(c, p, "Stream", STREAM_PARTS, 0);
    struct result res = call_sync(c, p, "Echo", "healthy", -1);
    assert_string_equal(res.text, "healthy");
    cl_free(c);
}

static void parse_identity(const char *text, long *uid, long *pid, unsigned long *mid, char *name, int *is_unix)
{
    const char *n = strstr(text, " name=");
    if (sscanf(text, "uid=%ld pid=%ld mid=%lu unix=%d", uid, pid, mid, is_unix) != 4 || !n)
        fail_msg("bad identity reply '%s'", text);
    snprintf(name, 64, "%s", n + 6);
}

static void test_peer_identity(void **state)
{
    struct env *e = *state;
    int tcp = g_transport == T_TCP;
    struct cl *c = cl_connect(e);
    assert_int_equal(tg_ipc_client_set_peer_identity(c->cli, 4242, 1234, "f6973fcc-boot-id", "guest1"), 0);
    /* a second one is ignored (only the first counts) */
    assert_int_equal(tg_ipc_client_set_peer_identity(c->cli, 7, 7, "other-hint", "other"), 0);
    tg_ipc_service_proxy *p = cl_bind(c, "TestPort");
    struct result r = call_sync(c, p, "Identity", "", -1);
    long uid, pid;
    unsigned long mid;
    char name[64];
    int is_unix;
    parse_identity(r.text, &uid, &pid, &mid, name, &is_unix);
    if (tcp) {
        assert_int_equal(is_unix, 0);
        assert_int_equal(uid, 1234);
        assert_int_equal(pid, 4242);
        assert_int_equal(mid, tg_test_fnv1a_machine_id("f6973fcc-boot-id"));
        assert_string_equal(name, "guest1");
    } else { /* ignored on UNIX: SO_PEERCRED and machine 0 */
        assert_int_equal(is_unix, 1);
        assert_int_equal(uid, (long)getuid());
        assert_int_equal(pid, (long)getpid());
        assert_int_equal(mid, 0);
        assert_string_equal(name, "");
    }
    cl_free(c);

    /* no identity at all: TCP peers are uid 0, pid -1, machine 0 (Perfetto's defaults) */
    c = cl_connect(e);
    p = cl_bind(c, "TestPort");
    r = call_sync(c, p, "Identity", "", -1);
    parse_identity(r.text, &uid, &pid, &mid, name, &is_unix);
    assert_int_equal(mid, 0);
    if (tcp) {
        assert_int_equal(uid, 0);
        assert_int_equal(pid, -1);
    }
    cl_free(c);

    /* an empty hint hashes the peer address without its port */
    c = cl_connect(e);
    assert_int_equal(tg_ipc_client_set_peer_identity(c->cli, 1, 2, "", NULL), 0);
    p = cl_bind(c, "TestPort");
    r = call_sync(c, p, "Identity", "", -1);
    parse_identity(r.text, &uid, &pid, &mid, name, &is_unix);
    assert_int_equal(mid, tcp ? tg_test_fnv1a_machine_id("127.0.0.1") : 0);
    cl_free(c);
}

/* A handler's Reject is success=0 on the wire; a deferred reply arrives later, in order with others. */
static void test_reject_and_deferred(void **state)
{
    struct env *e = *state;
    struct cl *c = cl_connect(e);
    tg_ipc_service_proxy *p = cl_bind(c, "TestPort");
    struct result r = call_sync(c, p, "Reject", "", -1);
    assert_false(r.success);
    assert_false(r.has_more);
    assert_string_equal(r.text, "");
    /* a deferred call does not hold up later calls */
    struct result d;
    memset(&d, 0, sizeof d);
    d.fd = -1;
    assert_true(tg_ipc_client_invoke(c->cli, p, "Defer", NULL, -1, unary_cb, &d) != 0);
    r = call_sync(c, p, "Echo", "first", -1);
    assert_string_equal(r.text, "first");
    assert_false(d.done);
    assert_true(tg_test_run_until(e->base, result_done, &d, TIMEOUT_MS));
    assert_true(d.success);
    assert_string_equal(d.text, "later");

    /* on the wire: a rejected call with drop_reply gets nothing back */
    struct raw *raw = raw_connect(e);
    uint32_t sid = raw_bind(raw, 1, 0);
    raw_invoke(raw, 2, sid, M_REJECT, "", 1);
    raw_invoke(raw, 3, sid, M_REJECT, "", 0);
    struct tg_frame_info fi;
    raw_frame(raw, 1, &fi);
    assert_int_equal(fi.request_id, 3);
    assert_int_equal(fi.success, 0);
    assert_int_equal(fi.has_payload, 0);
    raw_close(raw);
    cl_free(c);
}

/* A second listener on a live address is refused; max_peers turns extra clients away while the
 * first keeps working; freeing a host removes its socket file. */
static void test_listen_conflict_and_max_peers(void **state)
{
    struct env *e = *state;
    struct tg_ipc_host_opts o;
    memset(&o, 0, sizeof o);
    tg_conn_opts_default(&o.conn);
    o.max_peers = 1;
    tg_ipc_host *h2 = tg_ipc_host_new(e->base, &o);
    assert_non_null(h2);
    assert_int_equal(tg_ipc_host_add_service(h2, &k_test_svc, &e->svc), 1);
    char err[256] = "";
    assert_int_equal(tg_ipc_host_listen(h2, e->addr, 0600, err, sizeof err), -1); /* e->host owns it */
    if (g_transport != T_ABSTRACT)
        assert_non_null(strstr(err, "in use"));
    assert_true(access(e->tmpdir[0] ? e->addr : "/", F_OK) == 0); /* a live socket file is not stolen */

    /* h2 on its own address, at most one peer */
    char addr2[300];
    int rc = -1;
    for (int attempt = 0; attempt < 20 && rc != 0; attempt++) {
        if (g_transport == T_TCP)
            snprintf(addr2, sizeof addr2, "127.0.0.1:%d", tg_test_free_tcp_port());
        else
            snprintf(addr2, sizeof addr2, "%.290s-2", e->addr);
        rc = tg_ipc_host_listen(h2, addr2, 0600, err, sizeof err);
    }
    assert_int_equal(rc, 0);
    char saved[300];
    snprintf(saved, sizeof saved, "%s", e->addr);
    snprintf(e->addr, sizeof e->addr, "%s", addr2);
    struct cl *a = cl_connect(e);
    tg_ipc_service_proxy *pa = cl_bind(a, "TestPort");
    assert_non_null(pa);
    struct cl *b = cl_connect(e);
    assert_true(tg_test_run_until(e->base, cl_gone, b, TIMEOUT_MS)); /* turned away */
    assert_true(tg_ipc_host_peer_count(h2) <= 1);
    struct result r = call_sync(a, pa, "Echo", "first stays", -1);
    assert_string_equal(r.text, "first stays");
    snprintf(e->addr, sizeof e->addr, "%s", saved);
    cl_free(b);
    cl_free(a);
    assert_true(tg_test_run_until(e->base, host_empty, h2, TIMEOUT_MS));
    assert_int_equal(tg_ipc_host_peer_count(h2), 0);
    tg_ipc_host_free(h2);
    if (g_transport == T_UNIX)
        assert_int_equal(access(addr2, F_OK), -1); /* the socket file went with its host */
}

static int ten_parts(void *arg)
{
    return ((struct stream_rx *)arg)->parts >= 10;
}

/* A client whose host goes away gets every pending callback failed once, then on_disconnect. */
static void test_host_gone_fails_pending(void **state)
{
    struct env *e = *state;
    struct cl *c = cl_connect(e);
    tg_ipc_service_proxy *p = cl_bind(c, "TestPort");
    struct stream_rx s;
    memset(&s, 0, sizeof s);
    s.pad = ASYNC_PAD;
    Str req = PERFETTO__PROTOS__IPCFRAME__REQUEST_ERROR__INIT;
    req.error = "1000000"; /* far more than will be sent before we cut it */
    assert_true(tg_ipc_client_invoke(c->cli, p, "StreamAsync", &req.base, -1, stream_cb, &s) != 0);
    assert_true(tg_test_run_until(e->base, ten_parts, &s, TIMEOUT_MS));
    /* the host drops every peer (as on shutdown) */
    tg_ipc_host_free(e->host);
    e->host = NULL;
    assert_true(tg_test_run_until(e->base, cl_gone, c, TIMEOUT_MS));
    assert_true(s.done);
    assert_int_equal(s.failed, 1); /* exactly one failure callback */
    assert_int_equal(s.bad_len, 0);
    assert_int_equal(s.out_of_order, 0);
    assert_int_equal(tg_ipc_client_pending(c->cli), 0);
    /* new calls fail at once */
    assert_int_equal(tg_ipc_client_invoke(c->cli, p, "Echo", NULL, -1, unary_cb, NULL), 0);
    cl_free(c);
    /* recreate an empty host so teardown has something to check */
    e->host = tg_ipc_host_new(e->base, NULL);
}

#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)

int main(void)
{
    const struct CMUnitTest tests[] = {
        T(test_bind_and_unary),
        T(test_unknown_service_name),
        T(test_stream_10000),
        T(test_drop_reply),
        T(test_fd_passing),
        T(test_bad_ids_and_requests),
        T(test_oversize_closes_only_that_connection),
        T(test_disconnect_mid_stream),
        T(test_peer_identity),
        T(test_reject_and_deferred),
        T(test_listen_conflict_and_max_peers),
        T(test_host_gone_fails_pending),
    };
    int failed = 0;
    g_transport = T_UNIX;
    failed += cmocka_run_group_tests_name("unix-path", tests, NULL, NULL);
    g_transport = T_ABSTRACT;
    failed += cmocka_run_group_tests_name("unix-abstract", tests, NULL, NULL);
    g_transport = T_TCP;
    failed += cmocka_run_group_tests_name("tcp-loopback", tests, NULL, NULL);
    return failed;
}
