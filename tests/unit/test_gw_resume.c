/* test_gw_resume.c: session survival in one process: a fake ConsumerPort upstream (tg_ipc_host
 * with a deferred EnableTracing and a streaming ObserveEvents), the gateway with gw_resume on a
 * TCP listener, and tg_ipc_client clients (keep_pending + reattach, as tracectl does). Covers the
 * token reply, a resume that delivers replies that arrived while detached (old request ids),
 * wrong and malformed tokens, Resume after the connection already talks upstream, the window
 * ending in Detach{detach_key}, no Detach and no wait without a tracing session, the buffer
 * bound detaching at once, frames lost in flight re-sent (or reported as incomplete when the
 * gateway kept too little), an admin's session not resumed through a listener capped below
 * admin, the bound on what all sessions hold together, a Detach nobody answers, and a client
 * that drops again during the replay losing nothing. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "consumer_port.pb-c.h"
#include "gw.h"
#include "gw_bridge.h"
#include "gw_config.h"
#include "gw_core.h"
#include "gw_listener.h"
#include "gw_resume.h"
#include "tracegate/addr.h"
#include "tracegate/ipc_client.h"
#include "tracegate/ipc_host.h"
#include "tracegate/log.h"
#include "tracegate_gateway.pb-c.h"

#include "tg_test_util.h"

#define TIMEOUT_MS 10000
/* a resume window no test step can outlast, however slow the machine (only
 * test_window_ends_in_detach wants it to end) */
#define LONG_WINDOW_MS 600000

/* ------------------------------------------------------------ fake upstream */

struct fake {
    tg_ipc_host *host;
    char addr[256];
    tg_ipc_call *enable_call, *observe_call;
    int peer_closes, detach_calls;
    int hold_detach; /* Detach is never answered (a linked node that does not care) */
    char detach_key[128];
};
static struct fake g_fake;

static void *fake_open(tg_ipc_peer *p, void *ctx)
{
    (void)p;
    return ctx;
}
static void fake_close(tg_ipc_peer *p, void *st, void *ctx)
{
    (void)p;
    (void)st;
    struct fake *f = ctx;
    f->peer_closes++;
    f->enable_call = NULL;
    f->observe_call = NULL;
}

static void m_enable(tg_ipc_call *call, const ProtobufCMessage *req, void *ctx, void *ps)
{
    (void)req;
    (void)ps;
    ((struct fake *)ctx)->enable_call = call; /* deferred, like traced */
}

static void m_observe(tg_ipc_call *call, const ProtobufCMessage *req, void *ctx, void *ps)
{
    (void)req;
    (void)ps;
    ((struct fake *)ctx)->observe_call = call; /* streaming: parts sent by the test */
}

static void m_detach(tg_ipc_call *call, const ProtobufCMessage *req, void *ctx, void *ps)
{
    (void)ps;
    struct fake *f = ctx;
    const Perfetto__Protos__DetachRequest *dr = (const void *)req;
    f->detach_calls++;
    snprintf(f->detach_key, sizeof f->detach_key, "%s", dr && dr->key ? dr->key : "");
    if (!f->hold_detach)
        tg_ipc_call_reply_bytes(call, NULL, 0, 0, -1);
}

static void m_empty(tg_ipc_call *call, const ProtobufCMessage *req, void *ctx, void *ps)
{
    (void)req;
    (void)ctx;
    (void)ps;
    tg_ipc_call_reply_bytes(call, NULL, 0, 0, -1);
}

static const struct tg_ipc_method k_consumer_methods[] = {
    {"EnableTracing", NULL, m_enable},
    {"DisableTracing", NULL, m_empty},
    {"ReadBuffers", NULL, m_empty},
    {"FreeBuffers", NULL, m_empty},
    {"Flush", NULL, m_empty},
    {"StartTracing", NULL, m_empty},
    {"ChangeTraceConfig", NULL, m_empty},
    {"Detach", &perfetto__protos__detach_request__descriptor, m_detach},
    {"Attach", NULL, m_empty},
    {"GetTraceStats", NULL, m_empty},
    {"ObserveEvents", NULL, m_observe},
    {"QueryServiceState", NULL, m_empty},
};
static const struct tg_ipc_service_def k_consumer_def = {
    .name = "ConsumerPort", .methods = k_consumer_methods, .n_methods = 12, .peer_open = fake_open, .peer_close = fake_close};

/* ------------------------------------------------------------ fixture */

static char g_dir[] = "/tmp/tg-test-gwresume-XXXXXX";
static struct event_base *g_base;
static struct tg_gw *g_gw;
static struct tg_gw_resume *g_resume;
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

static const char *g_listen2; /* a second consumer listener (listener 1) for the next start, or NULL */
static size_t g_max_total;    /* tg_gw_resume_opts.max_total for the next start (0: default) */
static uint32_t g_detach_timeout_ms; /* tg_gw_resume_opts.detach_timeout_ms for the next start */

static void start_opts(uint32_t window_ms, size_t max_buffer, size_t inflight)
{
    memset(&g_fake, 0, sizeof g_fake);
    g_base = event_base_new();
    snprintf(g_fake.addr, sizeof g_fake.addr, "%s/upstream.sock", g_dir);
    unlink(g_fake.addr);
    char err[512];
    g_fake.host = tg_ipc_host_new(g_base, NULL);
    assert_non_null(g_fake.host);
    assert_int_equal(tg_ipc_host_add_service(g_fake.host, &k_consumer_def, &g_fake), 1);
    assert_int_equal(tg_ipc_host_listen(g_fake.host, g_fake.addr, 0600, err, sizeof err), 0);
    tg_gw_config_init(&g_cfg);
    const char *kv[] = {"upstream-consumer", g_fake.addr, "no-http", NULL, "upstream-probe-interval", "0",
                        "listen", "consumer=tcp://127.0.0.1:0"};
    for (size_t i = 0; i < sizeof kv / sizeof kv[0]; i += 2)
        if (tg_gw_config_set(&g_cfg, kv[i], kv[i + 1], err, sizeof err) != 0)
            fail_msg("config %s: %s", kv[i], err);
    if (g_listen2 && tg_gw_config_set(&g_cfg, "listen", g_listen2, err, sizeof err) != 0)
        fail_msg("config listen: %s", err);
    g_listen2 = NULL;
    if (tg_gw_config_validate(&g_cfg, err, sizeof err) != 0)
        fail_msg("validate: %s", err);
    g_gw = tg_gw_new(g_base, &g_cfg, NULL, err, sizeof err);
    if (!g_gw)
        fail_msg("tg_gw_new: %s", err);
    struct tg_gw_resume_opts ro = {
        .window_ms = window_ms,
        .max_buffer = max_buffer,
        .inflight = inflight,
        .max_total = g_max_total,
        .detach_timeout_ms = g_detach_timeout_ms};
    g_max_total = 0;
    g_detach_timeout_ms = 0;
    g_resume = tg_gw_resume_new(g_gw, &ro, err, sizeof err);
    if (!g_resume)
        fail_msg("tg_gw_resume_new: %s", err);
    if (tg_gw_start_listeners(g_gw, &g_cfg, err, sizeof err) != 0)
        fail_msg("listeners: %s", err);
}

static void start(uint32_t window_ms, size_t max_buffer) { start_opts(window_ms, max_buffer, 0); }

static void stop(void)
{
    tg_test_run_until(g_base, NULL, NULL, 50);
    tg_gw_free(g_gw);
    g_gw = NULL;
    assert_int_equal(tg_gw_resume_held_bytes(g_resume), 0); /* every session's queues were counted out */
    tg_gw_resume_free(g_resume);
    g_resume = NULL;
    tg_ipc_host_free(g_fake.host);
    g_fake.host = NULL;
    tg_gw_config_free(&g_cfg);
    event_base_free(g_base);
    g_base = NULL;
}

/* ------------------------------------------------------------ clients */

struct tc {
    tg_ipc_client *cli;
    int disconnected;
    int bind_done;
    tg_ipc_service_proxy *proxy;
};

struct call {
    int done, ok, parts;
    size_t len;
    uint8_t reply[512];
};

static void tc_disc(tg_ipc_client *cli, const char *reason, void *arg)
{
    (void)cli;
    (void)reason;
    ((struct tc *)arg)->disconnected = 1;
}

static tg_conn *open_conn_at(size_t listener)
{
    struct tg_addr a;
    char err[256];
    assert_int_equal(tg_addr_parse(tg_gw_listener_address(tg_gw_listener_at(g_gw, listener)), &a, err, sizeof err),
                     0);
    int fd = tg_addr_connect_wait(&a, 2000);
    assert_true(fd >= 0);
    tg_conn *c = tg_conn_new_fd(g_base, fd, NULL, NULL, NULL);
    assert_non_null(c);
    return c;
}

static tg_conn *open_conn(void) { return open_conn_at(0); }

static struct tc *tc_open_at(size_t listener)
{
    struct tc *t = calloc(1, sizeof *t);
    struct tg_ipc_client_cbs cbs = {.on_disconnect = tc_disc};
    t->cli = tg_ipc_client_new(g_base, open_conn_at(listener), &cbs, t);
    assert_non_null(t->cli);
    return t;
}

static struct tc *tc_open(void) { return tc_open_at(0); }

static void tc_free(struct tc *t)
{
    tg_ipc_client_free(t->cli);
    free(t);
}

static int bind_done(void *arg) { return ((struct tc *)arg)->bind_done; }
static int call_done(void *arg) { return ((struct call *)arg)->done; }
static int disc_done(void *arg) { return ((struct tc *)arg)->disconnected; }

static void on_bind(tg_ipc_client *cli, tg_ipc_service_proxy *proxy, void *arg)
{
    struct tc *t = arg;
    (void)cli;
    t->proxy = proxy;
    t->bind_done = 1;
}

static tg_ipc_service_proxy *tc_bind(struct tc *t, const char *service)
{
    t->bind_done = 0;
    t->proxy = NULL;
    assert_int_equal(tg_ipc_client_bind(t->cli, service, on_bind, t), 0);
    assert_true(tg_test_run_until(g_base, bind_done, t, TIMEOUT_MS));
    return t->proxy;
}

static void on_reply(tg_ipc_client *cli, int success, int has_more, const uint8_t *reply, size_t len, void *arg)
{
    struct call *c = arg;
    (void)cli;
    c->parts++;
    if (has_more && success)
        return;
    c->ok = success;
    c->len = len;
    if (reply && len <= sizeof c->reply)
        memcpy(c->reply, reply, len);
    c->done = 1;
}

static uint64_t tc_start(struct tc *t, tg_ipc_service_proxy *p, const char *method, const ProtobufCMessage *req,
                         struct call *c)
{
    memset(c, 0, sizeof *c);
    uint64_t rid = tg_ipc_client_invoke(t->cli, p, method, req, -1, on_reply, c);
    assert_true(rid != 0);
    return rid;
}

static void tc_wait(struct call *c) { assert_true(tg_test_run_until(g_base, call_done, c, TIMEOUT_MS)); }

static Tracegate__GetResumeTokenResponse *get_token(struct tc *t, tg_ipc_service_proxy *sess)
{
    struct call c;
    tc_start(t, sess, "GetResumeToken", NULL, &c);
    tc_wait(&c);
    assert_true(c.ok);
    Tracegate__GetResumeTokenResponse *r = tracegate__get_resume_token_response__unpack(NULL, c.len, c.reply);
    assert_non_null(r);
    return r;
}

static int g_incomplete;     /* of the last resume() */
static uint64_t g_link_id;  /* of the last resume() that succeeded */

/* Resume on t's current connection; returns ok (1/0). */
static int resume(struct tc *t, tg_ipc_service_proxy *sess, const char *token, int with_frames, uint64_t frames,
                  uint64_t link_id)
{
    Tracegate__ResumeRequest req = TRACEGATE__RESUME_REQUEST__INIT;
    req.token = (char *)token;
    if (with_frames) {
        req.has_frames_received = 1;
        req.frames_received = frames;
        req.has_link_id = 1;
        req.link_id = link_id;
    }
    struct call c;
    tc_start(t, sess, "Resume", &req.base, &c);
    tc_wait(&c);
    assert_true(c.ok);
    Tracegate__ResumeResponse *r = tracegate__resume_response__unpack(NULL, c.len, c.reply);
    assert_non_null(r);
    int ok = r->has_ok && r->ok;
    g_incomplete = r->has_incomplete && r->incomplete;
    g_link_id = r->link_id;
    tracegate__resume_response__free_unpacked(r, NULL);
    return ok;
}

/* Drops t's connection, keeping its pending calls for a reattach. */
static void drop(struct tc *t)
{
    tg_ipc_client_keep_pending(t->cli, 1);
    t->disconnected = 0;
    tg_conn_close(tg_ipc_client_conn(t->cli), "test drop");
    assert_true(tg_test_run_until(g_base, disc_done, t, TIMEOUT_MS));
}

static int detached_count(void *arg)
{
    (void)arg;
    return tg_gw_resume_detached_count(g_resume) > 0;
}
static int detach_called(void *arg)
{
    (void)arg;
    return g_fake.detach_calls > 0;
}
static int upstream_closed(void *arg) { return g_fake.peer_closes >= *(int *)arg; }
static int enable_pending(void *arg)
{
    (void)arg;
    return g_fake.enable_call != NULL;
}

/* On client t: binds ConsumerPort and TracegateSession, takes a resume token, and starts
 * EnableTracing (en), whose reply the fake service defers while the session runs. Returns the
 * token (the caller frees it). */
static Tracegate__GetResumeTokenResponse *enable_pending_with_token(struct tc *t, struct call *en)
{
    tg_ipc_service_proxy *cp = tc_bind(t, "ConsumerPort");
    Tracegate__GetResumeTokenResponse *tok = get_token(t, tc_bind(t, "TracegateSession"));
    tc_start(t, cp, "EnableTracing", NULL, en);
    assert_true(tg_test_run_until(g_base, enable_pending, NULL, TIMEOUT_MS));
    return tok;
}
static int observe_pending(void *arg)
{
    (void)arg;
    return g_fake.observe_call != NULL;
}

/* As enable_pending_with_token, with ObserveEvents (ob) started after EnableTracing and pending
 * too: the fake service streams its events when the test says. */
static Tracegate__GetResumeTokenResponse *observing_with_token(struct tc *t, struct call *en, struct call *ob)
{
    tg_ipc_service_proxy *cp = tc_bind(t, "ConsumerPort");
    Tracegate__GetResumeTokenResponse *tok = get_token(t, tc_bind(t, "TracegateSession"));
    tc_start(t, cp, "EnableTracing", NULL, en);
    tc_start(t, cp, "ObserveEvents", NULL, ob);
    assert_true(tg_test_run_until(g_base, observe_pending, NULL, TIMEOUT_MS));
    return tok;
}

/* ------------------------------------------------------------ tests */

static void test_token_and_resume(void **state)
{
    (void)state;
    start(LONG_WINDOW_MS, 0);
    struct tc *a = tc_open();
    tg_ipc_service_proxy *cp = tc_bind(a, "ConsumerPort");
    tg_ipc_service_proxy *sess = tc_bind(a, "TracegateSession");
    assert_non_null(cp);
    assert_non_null(sess);
    Tracegate__GetResumeTokenResponse *tok = get_token(a, sess);
    assert_non_null(tok->token);
    assert_int_equal(strlen(tok->token), 32);
    assert_int_equal(tok->window_ms, LONG_WINDOW_MS);
    assert_non_null(tok->detach_key);
    assert_int_equal(strncmp(tok->detach_key, "tracegate-", 10), 0);
    assert_true(tok->has_link_id);
    /* asking again gives the same token */
    Tracegate__GetResumeTokenResponse *tok2 = get_token(a, sess);
    assert_string_equal(tok->token, tok2->token);
    tracegate__get_resume_token_response__free_unpacked(tok2, NULL);

    /* EnableTracing: the reply is deferred until the session ends */
    struct call en;
    tc_start(a, cp, "EnableTracing", NULL, &en);
    assert_true(tg_test_run_until(g_base, enable_pending, NULL, TIMEOUT_MS));
    uint64_t frames = tg_ipc_client_frames_received(a->cli);
    drop(a);
    assert_true(tg_test_run_until(g_base, detached_count, NULL, TIMEOUT_MS));
    assert_int_equal(g_fake.peer_closes, 0); /* the upstream, and its session, stay */

    /* the session ends while the client is away: the reply is buffered */
    uint8_t resp[] = {0x08, 0x01}; /* EnableTracingResponse{disabled: true} */
    tg_ipc_call_reply_bytes(g_fake.enable_call, resp, sizeof resp, 0, -1);
    g_fake.enable_call = NULL;
    tg_test_run_until(g_base, NULL, NULL, 50);
    assert_false(en.done);

    /* a wrong token is refused (on a separate connection) */
    struct tc *x = tc_open();
    tg_ipc_service_proxy *xs = tc_bind(x, "TracegateSession");
    assert_int_equal(resume(x, xs, "00112233445566778899aabbccddeeff", 0, 0, 0), 0);
    assert_int_equal(resume(x, xs, "not hex", 0, 0, 0), 0);
    /* the real token cut short, made longer, or with one digit changed */
    char bad[80];
    snprintf(bad, sizeof bad, "%.31s", tok->token);
    assert_int_equal(resume(x, xs, bad, 0, 0, 0), 0);
    snprintf(bad, sizeof bad, "%s0", tok->token);
    assert_int_equal(resume(x, xs, bad, 0, 0, 0), 0);
    snprintf(bad, sizeof bad, "%s", tok->token);
    bad[31] = bad[31] == '0' ? '1' : '0';
    assert_int_equal(resume(x, xs, bad, 0, 0, 0), 0);
    assert_int_equal(tg_gw_resume_detached_count(g_resume), 1);
    tc_free(x);

    /* the same client object continues on a new connection: old request ids stay valid */
    assert_int_equal(tg_ipc_client_reattach(a->cli, open_conn()), 0);
    a->disconnected = 0;
    tg_ipc_service_proxy *sess2 = tc_bind(a, "TracegateSession");
    assert_non_null(sess2);
    assert_int_equal(resume(a, sess2, tok->token, 1, frames, tok->link_id), 1);
    tc_wait(&en);
    assert_true(en.ok);
    assert_int_equal(en.len, sizeof resp);
    assert_memory_equal(en.reply, resp, sizeof resp);
    assert_int_equal(tg_gw_resume_resumed_total(g_resume), 1);
    assert_int_equal(tg_gw_resume_detached_count(g_resume), 0);
    /* and the session goes on: a new call through the old ConsumerPort binding */
    struct call q;
    tc_start(a, cp, "QueryServiceState", NULL, &q);
    tc_wait(&q);
    assert_true(q.ok);
    /* the token cannot be used by the connection that holds it */
    assert_int_equal(resume(a, sess2, tok->token, 0, 0, 0), 0);
    tracegate__get_resume_token_response__free_unpacked(tok, NULL);
    tc_free(a);
    stop();
}

static void test_resume_must_come_first(void **state)
{
    (void)state;
    start(LONG_WINDOW_MS, 0);
    struct tc *a = tc_open();
    struct call en;
    Tracegate__GetResumeTokenResponse *tok = enable_pending_with_token(a, &en);
    drop(a);
    assert_true(tg_test_run_until(g_base, detached_count, NULL, TIMEOUT_MS));
    /* a connection that already talks to the service cannot take a session over */
    struct tc *b = tc_open();
    assert_non_null(tc_bind(b, "ConsumerPort"));
    tg_ipc_service_proxy *bs = tc_bind(b, "TracegateSession");
    assert_int_equal(resume(b, bs, tok->token, 0, 0, 0), 0);
    assert_int_equal(tg_gw_resume_detached_count(g_resume), 1);
    tc_free(b);
    tracegate__get_resume_token_response__free_unpacked(tok, NULL);
    tc_free(a);
    stop();
}

static void test_window_ends_in_detach(void **state)
{
    (void)state;
    start(200, 0);
    struct tc *a = tc_open();
    struct call en;
    Tracegate__GetResumeTokenResponse *tok = enable_pending_with_token(a, &en);
    tc_free(a); /* gone for good */
    assert_true(tg_test_run_until(g_base, detached_count, NULL, TIMEOUT_MS));
    assert_int_equal(g_fake.detach_calls, 0);
    assert_true(tg_test_run_until(g_base, detach_called, NULL, TIMEOUT_MS));
    assert_string_equal(g_fake.detach_key, tok->detach_key);
    int one = 1;
    assert_true(tg_test_run_until(g_base, upstream_closed, &one, TIMEOUT_MS));
    assert_int_equal(tg_gw_resume_detached_count(g_resume), 0);
    /* the token is dead now */
    struct tc *b = tc_open();
    tg_ipc_service_proxy *bs = tc_bind(b, "TracegateSession");
    assert_int_equal(resume(b, bs, tok->token, 0, 0, 0), 0);
    tc_free(b);
    tracegate__get_resume_token_response__free_unpacked(tok, NULL);
    stop();
}

static int none_kept(void *arg)
{
    (void)arg;
    return g_gw->kept == NULL;
}

/* An upstream that never answers the Detach (a routed session's linked node) does not keep the
 * session, its connection slot and its place among the principal's kept sessions for good: it is
 * closed once the Detach timeout passes. */
static void test_detach_unanswered(void **state)
{
    (void)state;
    g_detach_timeout_ms = 200;
    start(200, 0);
    g_fake.hold_detach = 1;
    struct tc *a = tc_open();
    struct call en;
    tracegate__get_resume_token_response__free_unpacked(enable_pending_with_token(a, &en), NULL);
    tc_free(a);
    assert_true(tg_test_run_until(g_base, detach_called, NULL, TIMEOUT_MS));
    int one = 1;
    assert_true(tg_test_run_until(g_base, upstream_closed, &one, TIMEOUT_MS));
    assert_true(tg_test_run_until(g_base, none_kept, NULL, TIMEOUT_MS)); /* freed on a later turn of the loop */
    stop();
}

static void test_no_session_no_wait(void **state)
{
    (void)state;
    start(LONG_WINDOW_MS, 0);
    struct tc *a = tc_open();
    assert_non_null(tc_bind(a, "ConsumerPort")); /* opens the upstream */
    tg_ipc_service_proxy *sess = tc_bind(a, "TracegateSession");
    Tracegate__GetResumeTokenResponse *tok = get_token(a, sess);
    tracegate__get_resume_token_response__free_unpacked(tok, NULL);
    tc_free(a); /* no tracing session, nothing in flight: closed at once, no Detach */
    int one = 1;
    assert_true(tg_test_run_until(g_base, upstream_closed, &one, 2000));
    assert_int_equal(g_fake.detach_calls, 0);
    assert_int_equal(tg_gw_resume_detached_count(g_resume), 0);
    stop();
}

static void test_buffer_bound(void **state)
{
    (void)state;
    start(LONG_WINDOW_MS, 1000);
    struct tc *a = tc_open();
    struct call en, ob;
    Tracegate__GetResumeTokenResponse *tok = observing_with_token(a, &en, &ob);
    drop(a);
    assert_true(tg_test_run_until(g_base, detached_count, NULL, TIMEOUT_MS));
    /* 600 bytes fit, 1200 do not: the window ends at once */
    uint8_t part[600];
    memset(part, 0, sizeof part);
    tg_ipc_call_reply_bytes(g_fake.observe_call, part, sizeof part, 1, -1);
    tg_test_run_until(g_base, NULL, NULL, 50);
    assert_int_equal(g_fake.detach_calls, 0);
    tg_ipc_call_reply_bytes(g_fake.observe_call, part, sizeof part, 1, -1);
    assert_true(tg_test_run_until(g_base, detach_called, NULL, TIMEOUT_MS));
    assert_string_equal(g_fake.detach_key, tok->detach_key);
    tracegate__get_resume_token_response__free_unpacked(tok, NULL);
    tc_free(a);
    stop();
}

/* A session whose upstream was opened with admin (privileged in the service) is not resumed by a
 * connection of the same principal that its listener grants less (?roles=recorder): the resumed
 * session would be checked with recorder while the service still sees an admin. The other way
 * round (more roles than the upstream was opened with) is fine. */
static void test_resume_keeps_admin(void **state)
{
    (void)state;
    g_listen2 = "consumer=tcp://127.0.0.1:0?roles=recorder";
    start(LONG_WINDOW_MS, 0);
    /* the test runs as tracegated's uid: admin on listener 0, recorder on listener 1 */
    struct tc *a = tc_open_at(0);
    struct call en;
    Tracegate__GetResumeTokenResponse *tok = enable_pending_with_token(a, &en);
    drop(a);
    assert_true(tg_test_run_until(g_base, detached_count, NULL, TIMEOUT_MS));

    struct tc *b = tc_open_at(1);
    tg_ipc_service_proxy *bs = tc_bind(b, "TracegateSession");
    assert_non_null(bs);
    assert_int_equal(resume(b, bs, tok->token, 0, 0, 0), 0);
    assert_int_equal(tg_gw_resume_detached_count(g_resume), 1);
    assert_int_equal(tg_gw_resume_resumed_total(g_resume), 0);
    tc_free(b);

    /* the admin connection still resumes it */
    assert_int_equal(tg_ipc_client_reattach(a->cli, open_conn_at(0)), 0);
    tg_ipc_service_proxy *sess2 = tc_bind(a, "TracegateSession");
    assert_int_equal(resume(a, sess2, tok->token, 0, 0, 0), 1);
    tracegate__get_resume_token_response__free_unpacked(tok, NULL);
    assert_int_equal(tg_gw_resume_detached_count(g_resume), 0);

    /* a session opened with recorder is resumed through the admin listener */
    g_fake.enable_call = NULL;
    struct tc *c = tc_open_at(1);
    tok = enable_pending_with_token(c, &en);
    drop(c);
    assert_true(tg_test_run_until(g_base, detached_count, NULL, TIMEOUT_MS));
    assert_int_equal(tg_ipc_client_reattach(c->cli, open_conn_at(0)), 0);
    sess2 = tc_bind(c, "TracegateSession");
    assert_int_equal(resume(c, sess2, tok->token, 0, 0, 0), 1);
    assert_int_equal(tg_gw_resume_resumed_total(g_resume), 2);
    tracegate__get_resume_token_response__free_unpacked(tok, NULL);
    tc_free(c);
    tc_free(a);
    stop();
}

static int parts_at_least(void *arg) { return ((struct call *)arg)->parts >= 6; }
struct parts_wait {
    struct call *c;
    int n;
};
static int parts_reached(void *arg)
{
    struct parts_wait *w = arg;
    return w->c->parts >= w->n;
}

/* The bound on all sessions together (without it, N connections that took a token hold N times
 * `inflight`): frames kept for re-sending on a connected session give way to what a dropped one
 * buffers (that session's resume then reports `incomplete`), and a dropped session is Detached as
 * soon as what absent clients wait for alone goes over it, although it stays far under
 * max_buffer. */
static int held_is(void *arg) { return tg_gw_resume_held_bytes(g_resume) == *(size_t *)arg; }

static void test_total_bound(void **state)
{
    (void)state;
    g_max_total = 1000;
    start(LONG_WINDOW_MS, 0);
    uint8_t part[600];
    memset(part, 0, sizeof part);
    /* a: connected, its frames kept for re-sending */
    struct tc *a = tc_open();
    struct call en_a, ob_a;
    Tracegate__GetResumeTokenResponse *tok_a = observing_with_token(a, &en_a, &ob_a);
    tg_ipc_call_reply_bytes(g_fake.observe_call, part, sizeof part, 1, -1);
    struct parts_wait pw = {&ob_a, 1};
    assert_true(tg_test_run_until(g_base, parts_reached, &pw, TIMEOUT_MS));
    uint64_t frames_a = tg_ipc_client_frames_received(a->cli) - 1; /* as if that frame were lost */
    size_t want = 0;
    assert_int_not_equal(tg_gw_resume_held_bytes(g_resume), want); /* the frame and its envelope */
    g_fake.observe_call = NULL;
    /* b: dropped with a tracing session */
    struct tc *b = tc_open();
    struct call en, ob_b;
    Tracegate__GetResumeTokenResponse *tok = observing_with_token(b, &en, &ob_b);
    drop(b);
    assert_true(tg_test_run_until(g_base, detached_count, NULL, TIMEOUT_MS));
    /* b's first frame fits once a's kept frame is dropped */
    size_t kept_a = tg_gw_resume_held_bytes(g_resume);
    tg_ipc_call_reply_bytes(g_fake.observe_call, part, sizeof part, 1, -1);
    want = kept_a; /* one frame of the same size (a's and b's request ids are both one-byte varints), now b's */
    assert_true(tg_test_run_until(g_base, held_is, &want, TIMEOUT_MS));
    assert_int_equal(g_fake.detach_calls, 0);
    /* the second one does not: b is Detached at once */
    tg_ipc_call_reply_bytes(g_fake.observe_call, part, sizeof part, 1, -1);
    assert_true(tg_test_run_until(g_base, detach_called, NULL, TIMEOUT_MS));
    assert_string_equal(g_fake.detach_key, tok->detach_key);
    tracegate__get_resume_token_response__free_unpacked(tok, NULL);
    /* a, resuming without the frame it lost, learns that the gateway no longer has it */
    drop(a);
    assert_true(tg_test_run_until(g_base, detached_count, NULL, TIMEOUT_MS));
    assert_int_equal(tg_ipc_client_reattach(a->cli, open_conn()), 0);
    assert_int_equal(resume(a, tc_bind(a, "TracegateSession"), tok_a->token, 1, frames_a, tok_a->link_id), 1);
    assert_true(g_incomplete);
    tracegate__get_resume_token_response__free_unpacked(tok_a, NULL);
    tc_free(b);
    tc_free(a);
    stop();
}

/* A client that says it got fewer frames than were forwarded gets the rest again; when the
 * gateway kept too little, the reply says so. */
static void check_resend(size_t inflight, int want_incomplete)
{
    start_opts(LONG_WINDOW_MS, 0, inflight);
    struct tc *a = tc_open();
    struct call en, ob;
    Tracegate__GetResumeTokenResponse *tok = observing_with_token(a, &en, &ob);
    uint8_t part[300];
    memset(part, 7, sizeof part);
    for (int i = 0; i < 3; i++) { /* one at a time: the gateway's output queue is empty each time */
        tg_ipc_call_reply_bytes(g_fake.observe_call, part, sizeof part, 1, -1);
        struct parts_wait pw = {&ob, i + 1};
        assert_true(tg_test_run_until(g_base, parts_reached, &pw, TIMEOUT_MS));
    }
    assert_int_equal(ob.parts, 3);
    /* pretend the last three frames were lost in flight */
    uint64_t frames = tg_ipc_client_frames_received(a->cli) - 3;
    drop(a);
    assert_true(tg_test_run_until(g_base, detached_count, NULL, TIMEOUT_MS));
    assert_int_equal(tg_ipc_client_reattach(a->cli, open_conn()), 0);
    tg_ipc_service_proxy *sess2 = tc_bind(a, "TracegateSession");
    assert_int_equal(resume(a, sess2, tok->token, 1, frames, tok->link_id), 1);
    assert_int_equal(g_incomplete, want_incomplete);
    if (!want_incomplete) {
        assert_true(tg_test_run_until(g_base, parts_at_least, &ob, TIMEOUT_MS));
        assert_int_equal(ob.parts, 6);
    } else {
        tg_test_run_until(g_base, NULL, NULL, 100);
        assert_int_equal(ob.parts, 3);
    }
    tracegate__get_resume_token_response__free_unpacked(tok, NULL);
    tc_free(a);
    stop();
}

/* A connection is not closed for a refused Resume, so one client may call it as often as the rate
 * limit lets it: the refusals are logged sampled (20 lines a second), not one line each. */
static void test_refusals_logged_sampled(void **state)
{
    (void)state;
    start(LONG_WINDOW_MS, 0);
    struct tc *x = tc_open();
    tg_ipc_service_proxy *xs = tc_bind(x, "TracegateSession");
    tg_log_set_level(TG_LOG_WARN);
    assert_int_equal(tg_test_stderr_begin(), 0);
    uint64_t t0 = tg_test_now_ms();
    enum { CALLS = 200 };
    for (int i = 0; i < CALLS; i++)
        if (resume(x, xs, "00112233445566778899aabbccddeeff", 0, 0, 0) != 0)
            break;
    uint64_t secs = (tg_test_now_ms() - t0) / 1000u;
    char *log = tg_test_stderr_end();
    tg_log_set_level(TG_LOG_ERROR);
    assert_non_null(log);
    unsigned lines = 0;
    for (const char *p = log; (p = strstr(p, "Resume refused")) != NULL; p++)
        lines++;
    free(log);
    assert_true(lines >= 1);
    assert_true(lines <= 20u * (secs + 1));
    assert_false(x->disconnected); /* the connection stays */
    tc_free(x);
    stop();
}

/* ------------------------------------------------------------ a drop during a replay */

#define REPLAY_PARTS 256
#define REPLAY_PART_LEN 60000

/* The resumed session: a client connection and an upstream. */
static tg_conn *resumed_down(void)
{
    for (struct tg_gw_session *s = g_gw->sessions; s; s = tg_gw_session_next(s))
        if (tg_gw_session_down(s) && tg_gw_session_up(s))
            return tg_gw_session_down(s);
    return NULL;
}

static int held_at_least(void *arg) { return tg_gw_resume_held_bytes(g_resume) >= *(size_t *)arg; }

/* Midway through the replay, at a moment its queue toward the client is empty: the replay's
 * retry timer is armed and the client reads. */
static int replay_midway(void *arg)
{
    struct tc *t = arg;
    uint64_t got = tg_ipc_client_frames_received(t->cli);
    tg_conn *d = resumed_down();
    return got >= 2 + 20 && got < 2 + REPLAY_PARTS && d && !tg_conn_is_congested(d) && tg_conn_output_len(d) == 0;
}

struct frames_wait {
    struct tc *t;
    uint64_t n;
};
static int frames_at_least(void *arg)
{
    struct frames_wait *w = arg;
    return tg_ipc_client_frames_received(w->t->cli) >= w->n;
}

/* A client that resumed drops again while the replay is still sending what was buffered; its
 * connection's close comes in the same turn of the loop as the replay's retry timer, which runs
 * first. The next resume still gets every frame once: none is taken from the queue for a
 * connection that is already closing (it was, and was lost without `incomplete`). */
static void test_drop_during_replay(void **state)
{
    (void)state;
    start_opts(LONG_WINDOW_MS, 0, (size_t)64 << 20);
    struct tc *a = tc_open();
    struct call en, ob;
    Tracegate__GetResumeTokenResponse *tok = observing_with_token(a, &en, &ob);
    tc_free(a);
    assert_true(tg_test_run_until(g_base, detached_count, NULL, TIMEOUT_MS));
    /* far more than one round of the replay (out-high, 1 MiB) is buffered */
    static uint8_t part[REPLAY_PART_LEN];
    memset(part, 3, sizeof part);
    for (int i = 0; i < REPLAY_PARTS; i++) {
        tg_ipc_call_reply_bytes(g_fake.observe_call, part, sizeof part, 1, -1);
        size_t want = (size_t)(i + 1) * REPLAY_PART_LEN;
        if (i % 16 == 15)
            assert_true(tg_test_run_until(g_base, held_at_least, &want, TIMEOUT_MS));
    }
    /* b resumes (frames 1 and 2: the bind and Resume replies, then the parts) and drops midway */
    struct tc *b = tc_open();
    assert_int_equal(resume(b, tc_bind(b, "TracegateSession"), tok->token, 0, 0, 0), 1);
    uint64_t link_b = g_link_id;
    assert_true(tg_test_run_until(g_base, replay_midway, b, TIMEOUT_MS));
    uint64_t got_b = tg_ipc_client_frames_received(b->cli);
    assert_int_equal(shutdown(tg_conn_fd(tg_ipc_client_conn(b->cli)), SHUT_RDWR), 0);
    /* past the retry timer's deadline (5 ms) before the loop runs again, so that it runs in the same
     * turn as the close it learns of */
    usleep(20000);
    assert_true(tg_test_run_until(g_base, detached_count, NULL, TIMEOUT_MS));
    /* c resumes from what b got: every other part, once */
    struct tc *c = tc_open();
    assert_int_equal(resume(c, tc_bind(c, "TracegateSession"), tok->token, 1, got_b, link_b), 1);
    assert_false(g_incomplete);
    uint64_t want_c = 2 + REPLAY_PARTS - (got_b - 2);
    struct frames_wait fw = {c, want_c};
    assert_true(tg_test_run_until(g_base, frames_at_least, &fw, TIMEOUT_MS));
    tg_test_run_until(g_base, NULL, NULL, 100); /* and nothing twice */
    assert_int_equal(tg_ipc_client_frames_received(c->cli), want_c);
    tracegate__get_resume_token_response__free_unpacked(tok, NULL);
    tc_free(b);
    tc_free(c);
    stop();
}

static void test_resend_lost_frames(void **state)
{
    (void)state;
    check_resend(0, 0);
}

static void test_resend_incomplete(void **state)
{
    (void)state;
    check_resend(100, 1); /* frames of 300 bytes are not kept */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_token_and_resume),     cmocka_unit_test(test_resume_must_come_first),
        cmocka_unit_test(test_window_ends_in_detach), cmocka_unit_test(test_no_session_no_wait),
        cmocka_unit_test(test_buffer_bound),          cmocka_unit_test(test_resend_lost_frames),
        cmocka_unit_test(test_resend_incomplete),     cmocka_unit_test(test_resume_keeps_admin),
        cmocka_unit_test(test_total_bound),          cmocka_unit_test(test_detach_unanswered),
        cmocka_unit_test(test_drop_during_replay),   cmocka_unit_test(test_refusals_logged_sampled),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
