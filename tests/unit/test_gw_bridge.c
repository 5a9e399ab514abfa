/* test_gw_bridge.c: the gateway core end to end in one process: a fake ConsumerPort upstream
 * (tg_ipc_host on a UNIX socket), the gateway bridging to it from TCP and UNIX listeners, and
 * tg_ipc_client / raw-socket clients. Covers relaying and metrics, the observer ACL (a refused
 * call answered by the gateway, connection kept), bind refusal, in-band token authentication
 * (required, wrong, right, timeout), protocol violations (reply-type frames, oversize, garbage,
 * ambiguous frames, reserved request ids, SetPeerIdentity dropped), parser-differential attacks in
 * both directions (frames the service would read differently from the gateway), fd passing through a UNIX
 * listener, the slow-client cut (others unaffected), the message-rate limit, an unreachable
 * upstream, and the filter / local-service hooks (consume, private upstream calls, detach and
 * transfer of a client to a detached session). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <event2/buffer.h>
#include <event2/event.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "gw.h"
#include "gw_bridge.h"
#include "gw_auth.h"
#include "gw_config.h"
#include "gw_core.h"
#include "gw_listener.h"
#include "gw_metrics.h"
#include "tracegate/clock.h"
#include "tracegate/addr.h"
#include "tracegate/frame.h"
#include "tracegate/ipc_client.h"
#include "tracegate/ipc_host.h"
#include "tracegate/ipc_wire.h"
#include "tracegate/log.h"
#include "tracegate/pbwire.h"
#include "tracegate_gateway.pb-c.h"

#include "tg_test_util.h"

#define TIMEOUT_MS 10000
/* sha256("alpha"): the observer token; "omega" is the recorder token (hashed at runtime) */
#define H_ALPHA "8ed3f6ad685b959ead7022518e1af76cd816f8e8ec7ccdda1ed4018e8f2223f8"

/* ------------------------------------------------------------ fake upstream */

struct fake {
    struct event_base *base;
    tg_ipc_host *host;
    char addr[256];
    int enable_calls, flush_calls, qss_calls, peer_opens, peer_closes;
    size_t qss_size;
};
static struct fake g_fake;

static void *fake_open(tg_ipc_peer *p, void *ctx)
{
    (void)p;
    ((struct fake *)ctx)->peer_opens++;
    return ctx;
}
static void fake_close(tg_ipc_peer *p, void *st, void *ctx)
{
    (void)p;
    (void)st;
    ((struct fake *)ctx)->peer_closes++;
}

static void m_enable(tg_ipc_call *call, const ProtobufCMessage *req, void *ctx, void *ps)
{
    (void)req;
    (void)ps;
    struct fake *f = ctx;
    f->enable_calls++;
    int fd = tg_ipc_peer_take_fd(tg_ipc_call_peer(call));
    if (fd >= 0) {
        assert_int_equal(write(fd, "fd!", 3), 3);
        close(fd);
    }
    tg_ipc_call_reply_bytes(call, NULL, 0, 0, -1);
}

static void m_qss(tg_ipc_call *call, const ProtobufCMessage *req, void *ctx, void *ps)
{
    (void)req;
    (void)ps;
    struct fake *f = ctx;
    f->qss_calls++;
    uint8_t *b = calloc(1, f->qss_size ? f->qss_size : 1);
    tg_ipc_call_reply_bytes(call, b, f->qss_size, 0, -1);
    free(b);
}

static void m_flush(tg_ipc_call *call, const ProtobufCMessage *req, void *ctx, void *ps)
{
    (void)req;
    (void)ps;
    ((struct fake *)ctx)->flush_calls++;
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
    {"EnableTracing", NULL, m_enable},     {"DisableTracing", NULL, m_empty},
    {"ReadBuffers", NULL, m_empty},        {"FreeBuffers", NULL, m_empty},
    {"Flush", NULL, m_flush},              {"StartTracing", NULL, m_empty},
    {"ChangeTraceConfig", NULL, m_empty},  {"Detach", NULL, m_empty},
    {"Attach", NULL, m_empty},             {"GetTraceStats", NULL, m_empty},
    {"ObserveEvents", NULL, m_empty},      {"QueryServiceState", NULL, m_qss},
    {"QueryCapabilities", NULL, m_empty},  {"SaveTraceForBugreport", NULL, m_empty},
    {"CloneSession", NULL, m_empty},
};
static const struct tg_ipc_service_def k_consumer_def = {
    .name = "ConsumerPort", .methods = k_consumer_methods, .n_methods = 15, .peer_open = fake_open, .peer_close = fake_close};

/* ------------------------------------------------------------ fixture */

static char g_dir[] = "/tmp/tg-test-gwbridge-XXXXXX";
static struct event_base *g_base;
static struct tg_gw *g_gw;
static struct tg_gw_config g_cfg;

static int group_setup(void **state)
{
    (void)state;
    tg_log_set_level(TG_LOG_WARN);
    return mkdtemp(g_dir) ? 0 : -1;
}

static int group_teardown(void **state)
{
    (void)state;
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    return system(cmd) == 0 ? 0 : -1;
}

/* Starts the fake upstream and a gateway configured with key/value pairs
 * (NULL-terminated; a NULL value = flag). upstream_ok=0 points the gateway at
 * a socket nobody listens on. */
static void start(int upstream_ok, const char *const *kv)
{
    memset(&g_fake, 0, sizeof g_fake);
    g_base = event_base_new();
    g_fake.base = g_base;
    g_fake.qss_size = 100;
    snprintf(g_fake.addr, sizeof g_fake.addr, "%s/upstream.sock", g_dir);
    unlink(g_fake.addr);
    char err[512];
    if (upstream_ok) {
        g_fake.host = tg_ipc_host_new(g_base, NULL);
        assert_non_null(g_fake.host);
        assert_int_equal(tg_ipc_host_add_service(g_fake.host, &k_consumer_def, &g_fake), 1);
        assert_int_equal(tg_ipc_host_listen(g_fake.host, g_fake.addr, 0600, err, sizeof err), 0);
    }
    tg_gw_config_init(&g_cfg);
    assert_int_equal(tg_gw_config_set(&g_cfg, "upstream-consumer", g_fake.addr, err, sizeof err), 0);
    assert_int_equal(tg_gw_config_set(&g_cfg, "no-http", NULL, err, sizeof err), 0);
    assert_int_equal(tg_gw_config_set(&g_cfg, "upstream-probe-interval", "0", err, sizeof err), 0);
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
    /* let deferred closes run */
    tg_test_run_until(g_base, NULL, NULL, 50);
    tg_gw_free(g_gw);
    g_gw = NULL;
    if (g_fake.host)
        tg_ipc_host_free(g_fake.host);
    g_fake.host = NULL;
    tg_gw_config_free(&g_cfg);
    event_base_free(g_base);
    g_base = NULL;
}

static const char *listener_addr(size_t i)
{
    struct tg_gw_listener *l = tg_gw_listener_at(g_gw, i);
    assert_non_null(l);
    return tg_gw_listener_address(l);
}

static char *metrics(void)
{
    char *m = tg_gw_metrics_text(g_gw);
    assert_non_null(m);
    return m;
}

static void assert_metric(const char *line)
{
    char *m = metrics();
    if (!strstr(m, line))
        fail_msg("metrics lack '%s':\n%s", line, m);
    free(m);
}

/* ------------------------------------------------------------ IPC client helpers */

struct tc {
    tg_ipc_client *cli;
    int disconnected;
    char reason[160];
    int bind_done;
    tg_ipc_service_proxy *proxy;
    int call_done, call_ok;
    size_t reply_len;
    uint8_t reply[512];
};

static void tc_disc(tg_ipc_client *cli, const char *reason, void *arg)
{
    struct tc *t = arg;
    (void)cli;
    t->disconnected = 1;
    snprintf(t->reason, sizeof t->reason, "%s", reason);
}

static struct tc *tc_open(const char *addr)
{
    struct tc *t = calloc(1, sizeof *t);
    struct tg_ipc_client_cbs cbs = {.on_disconnect = tc_disc};
    char err[256];
    t->cli = tg_ipc_client_connect(g_base, addr, NULL, &cbs, t, err, sizeof err);
    if (!t->cli)
        fail_msg("connect %s: %s", addr, err);
    return t;
}

static void tc_free(struct tc *t)
{
    tg_ipc_client_free(t->cli);
    free(t);
}

static int bind_done(void *arg) { return ((struct tc *)arg)->bind_done; }
/* no session left in the gateway and the fake upstream saw *arg connections close */
static int gw_idle(void *arg) { return tg_gw_session_count(g_gw) == 0 && g_fake.peer_closes >= *(int *)arg; }
static int call_done(void *arg) { return ((struct tc *)arg)->call_done; }
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
    if (tg_ipc_client_bind(t->cli, service, on_bind, t) != 0)
        return NULL;
    assert_true(tg_test_run_until(g_base, bind_done, t, TIMEOUT_MS));
    return t->proxy;
}

static void on_reply(tg_ipc_client *cli, int success, int has_more, const uint8_t *reply, size_t len, void *arg)
{
    struct tc *t = arg;
    (void)cli;
    if (has_more)
        return;
    t->call_ok = success;
    t->reply_len = len;
    if (len <= sizeof t->reply && reply)
        memcpy(t->reply, reply, len);
    t->call_done = 1;
}

/* 1 success, 0 refused, -1 disconnected before the reply. Whether a refusal is followed by a
 * close is not decided here (no waiting for a time): a test expecting the connection to stay makes
 * another call on it; one expecting a close waits for it (tc_expect_closed). */
static int tc_call(struct tc *t, tg_ipc_service_proxy *p, const char *method, const ProtobufCMessage *req, int fd)
{
    t->call_done = 0;
    if (!tg_ipc_client_invoke(t->cli, p, method, req, fd, on_reply, t))
        return -1;
    assert_true(tg_test_run_until(g_base, call_done, t, TIMEOUT_MS));
    if (t->disconnected)
        return t->call_ok ? 1 : -1;
    return t->call_ok;
}

/* The gateway closes t's connection (after refusing its last call, or at once). */
static void tc_expect_closed(struct tc *t)
{
    assert_true(tg_test_run_until(g_base, disc_done, t, TIMEOUT_MS));
}

static int tc_authenticate(struct tc *t, const char *token)
{
    tg_ipc_service_proxy *p = tc_bind(t, "TracegateAuth");
    if (!p)
        return -1;
    Tracegate__AuthenticateRequest req = TRACEGATE__AUTHENTICATE_REQUEST__INIT;
    req.token = (char *)token;
    return tc_call(t, p, "Authenticate", &req.base, -1);
}

/* ------------------------------------------------------------ raw socket helpers */

struct raw {
    int fd;
    int closed;
};

static int raw_connect(const char *addr)
{
    struct tg_addr a;
    char err[256];
    assert_int_equal(tg_addr_parse(addr, &a, err, sizeof err), 0);
    int fd = tg_addr_connect_wait(&a, 2000);
    assert_true(fd >= 0);
    return fd;
}

static void raw_send_frame(int fd, const uint8_t *body, size_t len)
{
    uint8_t hdr[4];
    tg_frame_put_header(hdr, (uint32_t)len);
    assert_int_equal(send(fd, hdr, 4, MSG_NOSIGNAL), 4);
    if (len)
        assert_int_equal(send(fd, body, len, MSG_NOSIGNAL), (ssize_t)len);
}

/* Done when the peer closed (EOF or reset); drains what arrives. */
static int raw_closed(void *arg)
{
    struct raw *r = arg;
    for (;;) {
        uint8_t buf[4096];
        ssize_t n = recv(r->fd, buf, sizeof buf, MSG_DONTWAIT);
        if (n > 0)
            continue;
        if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
            r->closed = 1;
            return 1;
        }
        return 0;
    }
}

static void expect_raw_closed(int fd, const char *label)
{
    struct raw r = {fd, 0};
    assert_true(tg_test_run_until(g_base, raw_closed, &r, TIMEOUT_MS));
    close(fd);
    tg_test_run_until(g_base, NULL, NULL, 20);
    assert_true(tg_gw_metrics_frame_rejected_count(g_gw->metrics, label) >= 1);
}

struct rejected_wait {
    const char *label;
    uint64_t n;
};
static int rejected_at_least(void *arg)
{
    struct rejected_wait *w = arg;
    return tg_gw_metrics_frame_rejected_count(g_gw->metrics, w->label) >= w->n;
}

/* ------------------------------------------------------------ tests */

static void test_relay_and_metrics(void **state)
{
    (void)state;
    const char *kv[] = {"listen", "consumer=tcp://127.0.0.1:0", NULL};
    start(1, kv);
    g_fake.qss_size = 300;
    struct tc *t = tc_open(listener_addr(0));
    tg_ipc_service_proxy *p = tc_bind(t, "ConsumerPort");
    assert_non_null(p);
    assert_int_equal(tg_ipc_proxy_method_id(p, "QueryServiceState"), 12); /* ids pass through unchanged */
    assert_int_equal(tc_call(t, p, "QueryServiceState", NULL, -1), 1);
    assert_int_equal(t->reply_len, 300);
    assert_int_equal(tc_call(t, p, "EnableTracing", NULL, -1), 1); /* admin may */
    assert_int_equal(g_fake.enable_calls, 1);
    assert_int_equal(tg_gw_session_count(g_gw), 1);
    assert_metric("tracegated_connections{transport=\"tcp\"} 1");
    assert_metric("tracegated_connections_total{transport=\"tcp\"} 1");
    assert_metric("tracegated_rpc_duration_seconds_count{service=\"ConsumerPort\",method=\"QueryServiceState\"} 1");
    assert_metric("tracegated_rpc_duration_seconds_count{service=\"ConsumerPort\",method=\"EnableTracing\"} 1");
    assert_metric("tracegated_frames_total{direction=\"to_service\"} 3");
    assert_metric("tracegated_frames_total{direction=\"to_client\"} 3");
    char *st = tg_gw_status_json(g_gw);
    assert_non_null(strstr(st, "\"sessions\":1"));
    assert_non_null(strstr(st, "consumer tcp://127.0.0.1:"));
    free(st);
    tc_free(t);
    int closes = 1;
    assert_true(tg_test_run_until(g_base, gw_idle, &closes, TIMEOUT_MS));
    assert_int_equal(tg_gw_session_count(g_gw), 0);
    assert_int_equal(g_fake.peer_closes, 1); /* the upstream connection went with the client */
    assert_metric("tracegated_connections{transport=\"tcp\"} 0");
    stop();
}

static void test_observer_acl(void **state)
{
    (void)state;
    const char *kv[] = {"listen", "consumer=tcp://127.0.0.1:0?roles=observer", NULL};
    start(1, kv);
    struct tc *t = tc_open(listener_addr(0));
    tg_ipc_service_proxy *p = tc_bind(t, "ConsumerPort");
    assert_non_null(p);
    assert_int_equal(tc_call(t, p, "EnableTracing", NULL, -1), 0); /* refused, still connected */
    assert_int_equal(g_fake.enable_calls, 0);                        /* never reached the service */
    assert_int_equal(tc_call(t, p, "QueryServiceState", NULL, -1), 1);
    assert_int_equal(tc_call(t, p, "FreeBuffers", NULL, -1), 0);
    assert_int_equal(tc_call(t, p, "GetTraceStats", NULL, -1), 1);
    assert_false(t->disconnected);
    assert_int_equal(tg_gw_metrics_frame_rejected_count(g_gw->metrics, "acl"), 2);
    assert_metric("tracegated_rpc_denied_total{service=\"ConsumerPort\",method=\"EnableTracing\"} 1");
    /* binding a service the roles do not cover is refused by the gateway */
    assert_null(tc_bind(t, "ProducerPort"));
    assert_null(tc_bind(t, "RelayPort"));
    assert_false(t->disconnected);
    tc_free(t);
    stop();
}

static void write_tokens(const char *path, const char *extra_line)
{
    char hex[65];
    tg_gw_sha256_hex("omega", 5, hex);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fprintf(f, "ci observer " H_ALPHA "\nalice recorder %s\n%s", hex, extra_line ? extra_line : "");
    fclose(f);
}

static void test_token_auth(void **state)
{
    (void)state;
    char tokens[400];
    snprintf(tokens, sizeof tokens, "%s/tokens", g_dir);
    char sigma[65], sigma_line[128];
    tg_gw_sha256_hex("sigma", 5, sigma);
    snprintf(sigma_line, sizeof sigma_line, "reader recorder,adb,spans %s\n", sigma);
    write_tokens(tokens, sigma_line);
    /* a handshake timeout no step below can reach, however slow the machine: test_auth_timeout
     * covers the timeout itself */
    const char *kv[] = {"listen", "consumer=tcp://127.0.0.1:0?auth=token", "token-file", tokens,
                        "handshake-timeout", "1h", NULL};
    start(1, kv);
    const char *addr = listener_addr(0);

    /* a) anything before Authenticate closes the connection */
    struct tc *t = tc_open(addr);
    assert_null(tc_bind(t, "ConsumerPort"));
    assert_true(tg_test_run_until(g_base, disc_done, t, TIMEOUT_MS));
    tc_free(t);
    assert_int_equal(g_fake.peer_opens, 0); /* no upstream connection for unauthenticated clients */

    /* b) a wrong token: refused and closed */
    t = tc_open(addr);
    assert_int_not_equal(tc_authenticate(t, "not-a-token"), 1);
    tc_expect_closed(t);
    tc_free(t);
    assert_metric("tracegated_auth_failures_total{transport=\"tcp\",reason=\"bad_token\"} 1");

    /* c) the observer token: allowed, with the observer's rights */
    t = tc_open(addr);
    assert_int_equal(tc_authenticate(t, "alpha"), 1);
    Tracegate__AuthenticateResponse *resp = tracegate__authenticate_response__unpack(NULL, t->reply_len, t->reply);
    assert_non_null(resp);
    assert_int_equal(resp->n_roles, 1);
    assert_string_equal(resp->roles[0], "observer");
    assert_string_equal(resp->principal, "token:ci");
    tracegate__authenticate_response__free_unpacked(resp, NULL);
    tg_ipc_service_proxy *p = tc_bind(t, "ConsumerPort");
    assert_non_null(p);
    assert_int_equal(tc_call(t, p, "EnableTracing", NULL, -1), 0);
    assert_int_equal(tc_call(t, p, "QueryServiceState", NULL, -1), 1);
    tc_free(t);

    /* c2) the reply names every role the token grants, adb and spans included */
    t = tc_open(addr);
    assert_int_equal(tc_authenticate(t, "sigma"), 1);
    resp = tracegate__authenticate_response__unpack(NULL, t->reply_len, t->reply);
    assert_non_null(resp);
    assert_int_equal(resp->n_roles, 3);
    assert_string_equal(resp->roles[0], "recorder");
    assert_string_equal(resp->roles[1], "adb");
    assert_string_equal(resp->roles[2], "spans");
    tracegate__authenticate_response__free_unpacked(resp, NULL);
    tc_free(t);

    /* d) the recorder token may record */
    t = tc_open(addr);
    assert_int_equal(tc_authenticate(t, "omega"), 1);
    p = tc_bind(t, "ConsumerPort");
    assert_int_equal(tc_call(t, p, "EnableTracing", NULL, -1), 1);
    tc_free(t);

    /* e) reload: a new table replaces the old one, live sessions keep their roles */
    t = tc_open(addr);
    assert_int_equal(tc_authenticate(t, "alpha"), 1);
    p = tc_bind(t, "ConsumerPort");
    char hex[65], line[128];
    tg_gw_sha256_hex("gamma", 5, hex);
    snprintf(line, sizeof line, "new observer %s\n", hex);
    FILE *f = fopen(tokens, "w");
    fputs(line, f);
    fclose(f);
    char err[256];
    /* local-roles and cert-roles change too: what transports on other threads read for new clients */
    struct tg_gw_role_defaults rd;
    tg_gw_role_defaults(g_gw, &rd);
    assert_int_equal(rd.local_roles, g_cfg.local_roles);
    assert_int_equal(rd.cert_roles, g_cfg.cert_roles);
    unsigned old_local = g_cfg.local_roles, old_cert = g_cfg.cert_roles;
    g_cfg.local_roles = TG_GW_ROLE_OBSERVER;
    g_cfg.cert_roles = TG_GW_ROLE_PRODUCER | TG_GW_ROLE_OBSERVER;
    assert_int_equal(tg_gw_reload(g_gw, &g_cfg, err, sizeof err), 0);
    tg_gw_role_defaults(g_gw, &rd);
    assert_int_equal(rd.local_roles, TG_GW_ROLE_OBSERVER);
    assert_int_equal(rd.cert_roles, TG_GW_ROLE_PRODUCER | TG_GW_ROLE_OBSERVER);
    g_cfg.local_roles = old_local;
    g_cfg.cert_roles = old_cert;
    assert_int_equal(tg_gw_reload(g_gw, &g_cfg, err, sizeof err), 0);
    struct tc *t2 = tc_open(addr);
    assert_int_not_equal(tc_authenticate(t2, "alpha"), 1);
    tc_expect_closed(t2);
    tc_free(t2);
    t2 = tc_open(addr);
    assert_int_equal(tc_authenticate(t2, "gamma"), 1);
    tc_free(t2);
    assert_int_equal(tc_call(t, p, "QueryServiceState", NULL, -1), 1); /* untouched */
    tc_free(t);
    /* a broken token file is rejected and changes nothing */
    f = fopen(tokens, "w");
    fputs("broken line\n", f);
    fclose(f);
    assert_int_equal(tg_gw_reload(g_gw, &g_cfg, err, sizeof err), -1);
    t2 = tc_open(addr);
    assert_int_equal(tc_authenticate(t2, "gamma"), 1);
    tc_free(t2);
    stop();
}

/* silence past the handshake timeout: the gateway closes the connection */
static void test_auth_timeout(void **state)
{
    (void)state;
    char tokens[400];
    snprintf(tokens, sizeof tokens, "%s/tokens", g_dir);
    write_tokens(tokens, NULL);
    const char *kv[] = {"listen", "consumer=tcp://127.0.0.1:0?auth=token", "token-file", tokens,
                        "handshake-timeout", "300ms", NULL};
    start(1, kv);
    struct tc *t = tc_open(listener_addr(0));
    tc_expect_closed(t);
    tc_free(t);
    assert_metric("tracegated_auth_failures_total{transport=\"tcp\",reason=\"timeout\"} 1");
    assert_int_equal(g_fake.peer_opens, 0);
    stop();
}

static void test_protocol_violations(void **state)
{
    (void)state;
    const char *kv[] = {"listen", "consumer=tcp://127.0.0.1:0", NULL};
    start(1, kv);
    const char *addr = listener_addr(0);
    uint8_t buf[256];
    size_t n;

    /* a reply-type frame */
    int fd = raw_connect(addr);
    n = tg_ipc_encode_reply(buf, sizeof buf, 1, 1, 0, NULL, 0);
    raw_send_frame(fd, buf, n);
    expect_raw_closed(fd, "reply_type");

    /* a header announcing more than 128 KiB */
    fd = raw_connect(addr);
    uint8_t big[4];
    tg_frame_put_header(big, 200000);
    assert_int_equal(send(fd, big, 4, MSG_NOSIGNAL), 4);
    expect_raw_closed(fd, "oversize");

    /* bytes that are not protobuf */
    fd = raw_connect(addr);
    memset(buf, 0xff, 16);
    raw_send_frame(fd, buf, 16);
    expect_raw_closed(fd, "undecodable");

    /* two `msg` members in one frame: BindService then InvokeMethod */
    fd = raw_connect(addr);
    n = tg_ipc_encode_bind(buf, sizeof buf, 1, "ConsumerPort");
    size_t m = tg_ipc_encode_invoke(buf + n, sizeof buf - n, 1, 1, 1, NULL, 0, 0);
    /* the second encoding repeats request_id (field 2) before its member: still valid protobuf */
    raw_send_frame(fd, buf, n + m);
    expect_raw_closed(fd, "ambiguous");

    /* a request id from the gateway's reserved range */
    fd = raw_connect(addr);
    n = tg_ipc_encode_bind(buf, sizeof buf, TG_GW_PRIVATE_REQUEST_ID | 5, "ConsumerPort");
    raw_send_frame(fd, buf, n);
    expect_raw_closed(fd, "reserved_request_id");

    /* SetPeerIdentity is dropped; the connection keeps working */
    struct tc *t = tc_open(addr);
    assert_int_equal(tg_ipc_client_set_peer_identity(t->cli, 1, 2, "spoofed-machine", "spoof"), 0);
    tg_ipc_service_proxy *p = tc_bind(t, "ConsumerPort");
    assert_non_null(p);
    assert_int_equal(tc_call(t, p, "QueryServiceState", NULL, -1), 1);
    assert_int_equal(tg_gw_metrics_frame_rejected_count(g_gw->metrics, "peer_identity"), 1);
    /* unknown ids are refused by the gateway without reaching the service */
    uint8_t inv[64];
    n = tg_ipc_encode_invoke(inv, sizeof inv, 99, 1, 77, NULL, 0, 0);
    tg_conn_send(tg_ipc_client_conn(t->cli), inv, n, -1);
    struct rejected_wait uw = {"unknown_method", 1};
    assert_true(tg_test_run_until(g_base, rejected_at_least, &uw, TIMEOUT_MS));
    assert_int_equal(tc_call(t, p, "QueryServiceState", NULL, -1), 1); /* still served after it */
    assert_int_equal(tg_gw_metrics_frame_rejected_count(g_gw->metrics, "unknown_method"), 1);
    assert_false(t->disconnected);
    tc_free(t);
    stop();
}

/* ------------------------------------------------------------ parser differentials */

struct rx {
    int fd, eof;
    uint8_t buf[8192];
    size_t n;
};

static size_t rx_len(const struct rx *r)
{
    return (size_t)r->buf[0] | (size_t)r->buf[1] << 8 | (size_t)r->buf[2] << 16 | (size_t)r->buf[3] << 24;
}

/* Done when one whole frame is buffered, or the peer closed. */
static int rx_frame(void *arg)
{
    struct rx *r = arg;
    for (;;) {
        if (r->n >= 4 && r->n >= 4 + rx_len(r))
            return 1;
        ssize_t k = recv(r->fd, r->buf + r->n, sizeof r->buf - r->n, MSG_DONTWAIT);
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

/* Receives the next frame on fd (one frame at a time: peers here never send two unasked) and scans it. */
static void raw_recv_frame(int fd, struct rx *r, struct tg_frame_info *fi)
{
    r->fd = fd;
    r->n = 0;
    r->eof = 0;
    assert_true(tg_test_run_until(g_base, rx_frame, r, TIMEOUT_MS));
    assert_false(r->eof);
    assert_int_equal(r->n, 4 + rx_len(r));
    assert_int_equal(tg_frame_scan(r->buf + 4, rx_len(r), fi), 0);
}

/* A raw client connection that has bound ConsumerPort (service id 1). */
static int raw_bound_client(const char *addr)
{
    int fd = raw_connect(addr);
    uint8_t buf[64];
    size_t n = tg_ipc_encode_bind(buf, sizeof buf, 1, "ConsumerPort");
    raw_send_frame(fd, buf, n);
    struct rx r;
    struct tg_frame_info fi;
    raw_recv_frame(fd, &r, &fi);
    assert_int_equal(fi.msg, TG_MSG_BIND_SERVICE_REPLY);
    return fd;
}

static void put_varint_field(uint8_t *b, size_t *n, uint32_t num, uint64_t v)
{
    *n += tg_pb_put_tag(b + *n, num, TG_PB_VARINT);
    *n += tg_pb_put_varint(b + *n, v);
}

static void put_fixed_field(uint8_t *b, size_t *n, uint32_t num, uint64_t v, int width)
{
    *n += tg_pb_put_tag(b + *n, num, width == 8 ? TG_PB_I64 : TG_PB_I32);
    for (int i = 0; i < width; i++)
        b[(*n)++] = (uint8_t)(v >> (8 * i));
}

/* IPCFrame{request_id (as given), msg_invoke_method{inner}} */
static size_t wrap_invoke(uint8_t *out, const uint8_t *rid, size_t rid_len, const uint8_t *inner, size_t inner_len)
{
    size_t n = 0;
    memcpy(out, rid, rid_len);
    n += rid_len;
    n += tg_pb_put_tag(out + n, TG_MSG_INVOKE_METHOD, TG_PB_LEN);
    n += tg_pb_put_varint(out + n, inner_len);
    memcpy(out + n, inner, inner_len);
    return n + inner_len;
}

/* Frames the gateway could read differently from the service are refused before the ACL: an
 * observer cannot pass EnableTracing off as QueryServiceState, nor borrow the gateway's request
 * ids, nor smuggle fields past it. Each attack closes its connection with a logged reason; the
 * service sees none of them; an honest observer is served as before. */
static void test_parser_differential_client(void **state)
{
    (void)state;
    const char *kv[] = {"listen", "consumer=tcp://127.0.0.1:0?roles=observer", NULL};
    start(1, kv);
    const char *addr = listener_addr(0);
    uint8_t rid2[16], inner[64], f[128];
    size_t rl = 0, il;
    put_varint_field(rid2, &rl, 2, 2);
    struct attack {
        const char *label, *logged;
        uint8_t b[128];
        size_t n;
    } at[6];
    size_t na = 0;

    /* 1. QueryServiceState (12) as a varint, then EnableTracing (1) as fixed32 */
    il = 0;
    put_varint_field(inner, &il, 1, 1);
    put_varint_field(inner, &il, 2, 12);
    put_fixed_field(inner, &il, 2, 1, 4);
    at[na] = (struct attack){"wire_type", "InvokeMethod.method_id has wire type fixed32", {0}, 0};
    at[na].n = wrap_invoke(at[na].b, rid2, rl, inner, il);
    na++;
    /* 2. the same with two varints (the last wins in Perfetto) */
    il = 0;
    put_varint_field(inner, &il, 1, 1);
    put_varint_field(inner, &il, 2, 12);
    put_varint_field(inner, &il, 2, 1);
    at[na] = (struct attack){"ambiguous", "InvokeMethod.method_id appears more than once", {0}, 0};
    at[na].n = wrap_invoke(at[na].b, rid2, rl, inner, il);
    na++;
    /* 3. a fixed64 request id with the top bit set (the gateway's private calls) */
    il = 0;
    put_varint_field(inner, &il, 1, 1);
    put_varint_field(inner, &il, 2, 12);
    size_t pl = 0;
    uint8_t prid[16];
    put_fixed_field(prid, &pl, 2, TG_GW_PRIVATE_REQUEST_ID | 1, 8);
    at[na] = (struct attack){"wire_type", "IPCFrame.request_id has wire type fixed64", {0}, 0};
    at[na].n = wrap_invoke(at[na].b, prid, pl, inner, il);
    na++;
    /* 4. an unknown envelope field: never forwarded unseen */
    at[na] = (struct attack){"unknown_field", "IPCFrame has an unknown field 9", {0}, 0};
    at[na].n = wrap_invoke(at[na].b, rid2, rl, inner, il);
    put_varint_field(at[na].b, &at[na].n, 9, 1);
    na++;
    /* 5. an unknown InvokeMethod field */
    size_t il5 = il;
    uint8_t inner5[64];
    memcpy(inner5, inner, il);
    put_varint_field(inner5, &il5, 7, 1);
    at[na] = (struct attack){"unknown_field", "InvokeMethod has an unknown field 7", {0}, 0};
    at[na].n = wrap_invoke(at[na].b, rid2, rl, inner5, il5);
    na++;
    /* 6. a second `msg` member: QueryServiceState, then a BindService the host would dispatch first */
    size_t n6 = wrap_invoke(f, rid2, rl, inner, il);
    n6 += tg_pb_put_tag(f + n6, TG_MSG_BIND_SERVICE, TG_PB_LEN);
    f[n6++] = 14;
    f[n6++] = 0x0a;
    f[n6++] = 12;
    memcpy(f + n6, "ProducerPort", 12);
    n6 += 12;
    at[na] = (struct attack){"ambiguous", "sets both msg_invoke_method and msg_bind_service", {0}, 0};
    memcpy(at[na].b, f, n6);
    at[na].n = n6;
    na++;

    assert_int_equal(tg_test_stderr_begin(), 0);
    for (size_t i = 0; i < na; i++) {
        uint64_t before = tg_gw_metrics_frame_rejected_count(g_gw->metrics, at[i].label);
        int fd = raw_bound_client(addr);
        raw_send_frame(fd, at[i].b, at[i].n);
        struct raw r = {fd, 0};
        if (!tg_test_run_until(g_base, raw_closed, &r, TIMEOUT_MS)) {
            free(tg_test_stderr_end());
            fail_msg("attack %zu (%s) did not close the connection", i + 1, at[i].logged);
        }
        close(fd);
        tg_test_run_until(g_base, NULL, NULL, 20);
        if (tg_gw_metrics_frame_rejected_count(g_gw->metrics, at[i].label) != before + 1) {
            free(tg_test_stderr_end());
            fail_msg("attack %zu (%s) was not counted as %s", i + 1, at[i].logged, at[i].label);
        }
    }
    char *log = tg_test_stderr_end();
    assert_non_null(log);
    for (size_t i = 0; i < na; i++)
        if (!strstr(log, at[i].logged))
            fail_msg("attack %zu: the log lacks '%s'", i + 1, at[i].logged);
    free(log);
    assert_int_equal(g_fake.enable_calls, 0); /* nothing reached the service */
    assert_int_equal(g_fake.qss_calls, 0);

    /* the legitimate path: an observer's QueryServiceState is relayed, EnableTracing refused */
    struct tc *t = tc_open(addr);
    tg_ipc_service_proxy *p = tc_bind(t, "ConsumerPort");
    assert_non_null(p);
    assert_int_equal(tc_call(t, p, "QueryServiceState", NULL, -1), 1);
    assert_int_equal(tc_call(t, p, "EnableTracing", NULL, -1), 0);
    assert_int_equal(g_fake.qss_calls, 1);
    assert_int_equal(g_fake.enable_calls, 0);
    tc_free(t);
    stop();
}

/* Done when the listening fd (non-blocking) has accepted a connection. */
struct acc {
    int lfd, fd;
};
static int accepted(void *arg)
{
    struct acc *a = arg;
    a->fd = accept4(a->lfd, NULL, NULL, SOCK_CLOEXEC);
    return a->fd >= 0;
}

static size_t encode_bind_reply_raw(uint8_t *out, uint64_t rid, const uint32_t *ids, const char *const *names,
                                    size_t n)
{
    uint8_t inner[512];
    size_t il = 0;
    put_varint_field(inner, &il, 1, 1);
    put_varint_field(inner, &il, 2, 1);
    for (size_t i = 0; i < n; i++) {
        uint8_t mi[80];
        size_t ml = 0, nl = strlen(names[i]);
        put_varint_field(mi, &ml, 1, ids[i]);
        ml += tg_pb_put_tag(mi + ml, 2, TG_PB_LEN);
        ml += tg_pb_put_varint(mi + ml, nl);
        memcpy(mi + ml, names[i], nl);
        ml += nl;
        il += tg_pb_put_tag(inner + il, 3, TG_PB_LEN);
        il += tg_pb_put_varint(inner + il, ml);
        memcpy(inner + il, mi, ml);
        il += ml;
    }
    size_t n2 = 0;
    put_varint_field(out, &n2, 2, rid);
    n2 += tg_pb_put_tag(out + n2, TG_MSG_BIND_SERVICE_REPLY, TG_PB_LEN);
    n2 += tg_pb_put_varint(out + n2, il);
    memcpy(out + n2, inner, il);
    return n2 + il;
}

/* The reply direction: what the gateway decides from the service's frames (method names for the
 * ACL, the end of a call) must not be readable two ways either. A raw upstream plays the service. */
static void test_parser_differential_upstream(void **state)
{
    (void)state;
    const char *kv[] = {"listen", "consumer=tcp://127.0.0.1:0?roles=observer", NULL};
    start(0, kv); /* no fake host: a raw socket plays the service at its address */
    struct tg_addr ua;
    char err[256];
    assert_int_equal(tg_addr_parse(g_fake.addr, &ua, err, sizeof err), 0);
    int lfd = tg_addr_listen(&ua, 8, 0600);
    assert_true(lfd >= 0);
    const char *addr = listener_addr(0);
    uint8_t buf[1024];
    size_t n;
    struct rx r;
    struct tg_frame_info fi;
    assert_int_equal(tg_test_stderr_begin(), 0);

    /* 1. a method table naming id 1 twice: the ACL would allow "QueryServiceState" = 1 while the
     *    service runs its method 1 */
    int cfd = raw_connect(addr);
    n = tg_ipc_encode_bind(buf, sizeof buf, 1, "ConsumerPort");
    raw_send_frame(cfd, buf, n);
    struct acc a = {lfd, -1};
    assert_true(tg_test_run_until(g_base, accepted, &a, TIMEOUT_MS));
    raw_recv_frame(a.fd, &r, &fi);
    assert_int_equal(fi.msg, TG_MSG_BIND_SERVICE);
    static const uint32_t dup_ids[] = {1, 1};
    static const char *const dup_names[] = {"QueryServiceState", "EnableTracing"};
    n = encode_bind_reply_raw(buf, 1, dup_ids, dup_names, 2);
    raw_send_frame(a.fd, buf, n);
    struct raw rc = {cfd, 0};
    assert_true(tg_test_run_until(g_base, raw_closed, &rc, TIMEOUT_MS));
    close(cfd);
    close(a.fd);
    tg_test_run_until(g_base, NULL, NULL, 20);
    assert_int_equal(tg_gw_metrics_frame_rejected_count(g_gw->metrics, "upstream_methods"), 1);

    /* 2. an honest table; a good reply is relayed; then a reply whose has_more is given twice in
     *    two wire types closes the session */
    cfd = raw_connect(addr);
    n = tg_ipc_encode_bind(buf, sizeof buf, 1, "ConsumerPort");
    raw_send_frame(cfd, buf, n);
    a.fd = -1;
    assert_true(tg_test_run_until(g_base, accepted, &a, TIMEOUT_MS));
    raw_recv_frame(a.fd, &r, &fi);
    static const uint32_t ok_ids[] = {1, 12};
    static const char *const ok_names[] = {"EnableTracing", "QueryServiceState"};
    n = encode_bind_reply_raw(buf, 1, ok_ids, ok_names, 2);
    raw_send_frame(a.fd, buf, n);
    raw_recv_frame(cfd, &r, &fi);
    assert_int_equal(fi.msg, TG_MSG_BIND_SERVICE_REPLY);
    n = tg_ipc_encode_invoke(buf, sizeof buf, 2, 1, 12, NULL, 0, 0);
    raw_send_frame(cfd, buf, n);
    raw_recv_frame(a.fd, &r, &fi);
    assert_int_equal(fi.method_id, 12);
    n = tg_ipc_encode_reply(buf, sizeof buf, 2, 1, 0, NULL, 0);
    raw_send_frame(a.fd, buf, n);
    raw_recv_frame(cfd, &r, &fi); /* the legitimate reply arrives */
    assert_int_equal(fi.msg, TG_MSG_INVOKE_METHOD_REPLY);
    assert_int_equal(fi.request_id, 2);
    assert_true(fi.success);
    n = tg_ipc_encode_invoke(buf, sizeof buf, 3, 1, 12, NULL, 0, 0);
    raw_send_frame(cfd, buf, n);
    raw_recv_frame(a.fd, &r, &fi);
    uint8_t inner[32];
    size_t il = 0;
    put_varint_field(inner, &il, 1, 1);
    put_varint_field(inner, &il, 2, 1);
    put_fixed_field(inner, &il, 2, 0, 4);
    n = 0;
    put_varint_field(buf, &n, 2, 3);
    n += tg_pb_put_tag(buf + n, TG_MSG_INVOKE_METHOD_REPLY, TG_PB_LEN);
    n += tg_pb_put_varint(buf + n, il);
    memcpy(buf + n, inner, il);
    n += il;
    raw_send_frame(a.fd, buf, n);
    rc = (struct raw){cfd, 0};
    assert_true(tg_test_run_until(g_base, raw_closed, &rc, TIMEOUT_MS));
    close(cfd);
    close(a.fd);
    tg_test_run_until(g_base, NULL, NULL, 20);
    char *log = tg_test_stderr_end();
    assert_non_null(log);
    assert_non_null(strstr(log, "lists method id 1 twice"));
    assert_non_null(strstr(log, "InvokeMethodReply.has_more has wire type fixed32"));
    free(log);
    assert_int_equal(tg_gw_metrics_frame_rejected_count(g_gw->metrics, "upstream_frame"), 1);
    close(lfd);
    unlink(g_fake.addr);
    stop();
}

static void test_fd_passthrough(void **state)
{
    (void)state;
    char spec[400];
    snprintf(spec, sizeof spec, "consumer=unix:%s/gw-consumer.sock", g_dir);
    const char *kv[] = {"listen", spec, NULL};
    start(1, kv);
    char path[300];
    snprintf(path, sizeof path, "%s/gw-consumer.sock", g_dir);
    struct tc *t = tc_open(path);
    tg_ipc_service_proxy *p = tc_bind(t, "ConsumerPort");
    assert_non_null(p);
    int pipefd[2];
    assert_int_equal(pipe(pipefd), 0);
    assert_int_equal(tc_call(t, p, "EnableTracing", NULL, pipefd[1]), 1);
    close(pipefd[1]);
    char got[8] = "";
    assert_int_equal(read(pipefd[0], got, sizeof got), 3);
    assert_memory_equal(got, "fd!", 3);
    close(pipefd[0]);
    assert_metric("tracegated_connections_total{transport=\"unix\"} 1");
    tc_free(t);
    stop();
}

struct slow_ctx {
    int fd;
    int cut;
};

static int slow_cut(void *arg)
{
    struct slow_ctx *s = arg;
    struct pollfd p = {.fd = s->fd, .events = POLLRDHUP};
    if (poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)))
        s->cut = 1;
    return s->cut;
}

static int upstream_bound(void *arg)
{
    (void)arg;
    return g_fake.peer_opens >= 1;
}

static const char *const k_slow_kv[] = {"listen", "consumer=tcp://127.0.0.1:0", "out-high", "64k", "out-low", "16k",
                                        "out-soft-limit", "64k", "out-soft-grace", "500ms", "rate", "0", NULL};

/* A raw client with a small receive buffer, bound to ConsumerPort (the reply left unread). */
static int slow_client_open(const char *addr)
{
    struct tg_addr a;
    char err[256];
    assert_int_equal(tg_addr_parse(addr, &a, err, sizeof err), 0);
    int fd = socket(a.family, SOCK_STREAM | SOCK_NONBLOCK, 0);
    int small = 4096;
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
    connect(fd, (struct sockaddr *)&a.ss, a.len);
    struct pollfd pw = {.fd = fd, .events = POLLOUT};
    assert_int_equal(poll(&pw, 1, 2000), 1);
    uint8_t buf[64];
    size_t n = tg_ipc_encode_bind(buf, sizeof buf, 1, "ConsumerPort");
    raw_send_frame(fd, buf, n);
    assert_true(tg_test_run_until(g_base, upstream_bound, NULL, TIMEOUT_MS));
    return fd;
}

/* Sends QueryServiceState calls rid_from.. until rid_to or until the gateway stops reading. */
static void slow_client_ask(int fd, uint64_t rid_from, uint64_t rid_to)
{
    for (uint64_t rid = rid_from; rid < rid_to; rid++) {
        uint8_t buf[64];
        size_t n = tg_ipc_encode_invoke(buf, sizeof buf, rid, 1, 12, NULL, 0, 0);
        uint8_t fr[80];
        tg_frame_put_header(fr, (uint32_t)n);
        memcpy(fr + 4, buf, n);
        ssize_t w = send(fd, fr, n + 4, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w < 0)
            break; /* the gateway stopped reading it: good enough */
        assert_int_equal(w, (ssize_t)(n + 4));
        if (rid % 50 == 0)
            tg_test_run_until(g_base, NULL, NULL, 10);
    }
}

static void test_slow_client(void **state)
{
    (void)state;
    start(1, k_slow_kv);
    g_fake.qss_size = 32 << 10;
    const char *addr = listener_addr(0);

    /* the slow client: binds, then asks for a lot and never reads */
    int fd = slow_client_open(addr);
    slow_client_ask(fd, 2, 400);
    /* meanwhile a well-behaved client is served */
    struct tc *t = tc_open(addr);
    tg_ipc_service_proxy *p = tc_bind(t, "ConsumerPort");
    assert_non_null(p);
    assert_int_equal(tc_call(t, p, "QueryServiceState", NULL, -1), 1);

    struct slow_ctx s = {fd, 0};
    assert_true(tg_test_run_until(g_base, slow_cut, &s, TIMEOUT_MS));
    close(fd);
    assert_int_equal(tg_gw_metrics_conn_rejected_count(g_gw->metrics, "slow_client_soft"), 1);
    assert_metric("tracegated_connections_rejected_total{reason=\"slow_client_soft\"} 1");
    /* the good client is untouched */
    assert_int_equal(tc_call(t, p, "QueryServiceState", NULL, -1), 1);
    assert_false(t->disconnected);
    tc_free(t);
    stop();
}

/* One try of the slow reader's 2 s window: 1 when it was kept, 0 when the machine stalled the
 * test itself for half the grace or more between two reads (then a cut is what the gateway must
 * do, and proves nothing). The gateway is stopped after a stalled try, kept running otherwise. */
static int slow_reader_window(int fd, struct evbuffer *got)
{
    uint8_t buf[4096];
    for (int i = 0; i < 20; i++) {
        uint64_t t0 = tg_mono_ms();
        tg_test_run_until(g_base, NULL, NULL, 100);
        ssize_t r = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
        if (r > 0)
            evbuffer_add(got, buf, (size_t)r);
        int stalled = tg_mono_ms() - t0 >= 250; /* out-soft-grace is 500ms */
        struct slow_ctx s = {fd, 0};
        if (slow_cut(&s)) {
            if (!stalled)
                fail_msg("a client reading every 100 ms was cut as a slow client");
            close(fd);
            stop();
            return 0;
        }
        if (stalled) {
            close(fd);
            stop();
            return 0;
        }
    }
    return 1;
}

/* A slow reader is not a stalled one: with the same limits, a client that reads 4 KiB every
 * 100 ms (far slower than the gateway could send, its queue parked over out-low while the kernel's
 * buffers hold the rest) is kept for four soft graces and then gets every reply. */
static void test_slow_reader_kept(void **state)
{
    (void)state;
    enum { CALLS = 40, TRIES = 5 };
    struct evbuffer *got = evbuffer_new();
    int fd = -1, kept = 0;
    for (int t = 0; t < TRIES && !kept; t++) {
        evbuffer_drain(got, evbuffer_get_length(got));
        start(1, k_slow_kv);
        g_fake.qss_size = 32 << 10;
        fd = slow_client_open(listener_addr(0));
        slow_client_ask(fd, 2, 2 + CALLS);
        kept = slow_reader_window(fd, got);
        if (!kept)
            print_message("the test was stalled for half the grace between two reads; again\n");
    }
    if (!kept) {
        evbuffer_free(got);
        skip(); /* the machine never let the client read in time: nothing shown either way */
    }
    assert_int_equal(tg_gw_metrics_conn_rejected_count(g_gw->metrics, "slow_client_soft"), 0);
    /* then it reads on quickly: the bind reply and every call's reply, whole */
    uint8_t buf[16384];
    size_t frames = 0;
    uint64_t deadline = tg_mono_ms() + (uint64_t)tg_test_ms(TIMEOUT_MS);
    while (frames < 1 + CALLS && tg_mono_ms() < deadline) {
        tg_test_run_until(g_base, NULL, NULL, 5);
        ssize_t r;
        while ((r = recv(fd, buf, sizeof buf, MSG_DONTWAIT)) > 0)
            evbuffer_add(got, buf, (size_t)r);
        size_t len;
        while (tg_frame_peek(got, TG_FRAME_MAX_DEFAULT, &len) == TG_FRAME_READY) {
            evbuffer_drain(got, TG_FRAME_HEADER_SIZE + len);
            frames++;
        }
    }
    assert_int_equal(frames, 1 + CALLS);
    close(fd);
    evbuffer_free(got);
    stop();
}

struct many_calls {
    int done, ok;
};

static void many_reply(tg_ipc_client *cli, int success, int has_more, const uint8_t *r, size_t len, void *arg)
{
    struct many_calls *m = arg;
    (void)cli;
    (void)r;
    (void)len;
    if (has_more)
        return;
    m->done++;
    m->ok += success;
}

static int many_done(void *arg) { return ((struct many_calls *)arg)->done == 10; }

static void test_rate_limit(void **state)
{
    (void)state;
    const char *kv[] = {"listen", "consumer=tcp://127.0.0.1:0", "rate", "20", "burst", "2", NULL};
    start(1, kv);
    struct tc *t = tc_open(listener_addr(0));
    tg_ipc_service_proxy *p = tc_bind(t, "ConsumerPort"); /* spends one token */
    assert_non_null(p);
    struct many_calls mc = {0, 0};
    struct timeval t0, t1;
    gettimeofday(&t0, NULL);
    for (int i = 0; i < 10; i++)
        assert_true(tg_ipc_client_invoke(t->cli, p, "QueryServiceState", NULL, -1, many_reply, &mc) != 0);
    assert_true(tg_test_run_until(g_base, many_done, &mc, TIMEOUT_MS));
    gettimeofday(&t1, NULL);
    long ms = (t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_usec - t0.tv_usec) / 1000;
    assert_int_equal(mc.ok, 10); /* paused, never dropped */
    assert_true(ms >= 300);      /* ~9 messages over the burst at 20/s */
    char *m = metrics();
    assert_null(strstr(m, "tracegated_rate_limited_total 0\n"));
    free(m);
    tc_free(t);
    stop();
}

static void test_upstream_down(void **state)
{
    (void)state;
    const char *kv[] = {"listen", "consumer=tcp://127.0.0.1:0", NULL};
    start(0, kv);
    assert_false(tg_gw_upstream_healthy(g_gw));
    struct tc *t = tc_open(listener_addr(0));
    assert_null(tc_bind(t, "ConsumerPort"));
    assert_true(tg_test_run_until(g_base, disc_done, t, TIMEOUT_MS));
    tc_free(t);
    assert_metric("tracegated_upstream_errors_total{port=\"consumer\"} 1");
    assert_metric("tracegated_upstream_healthy 0");
    stop();
}

/* ------------------------------------------------------------ hooks */

struct hook_state {
    int attached, down_frames, up_frames, down_closes, consumed;
    struct tg_gw_session *keep; /* the session to keep alive when its client drops */
    struct tg_gw_session *detached;
    int private_done, private_ok;
    size_t private_len;
    uint64_t probe_rid;
    struct tg_gw_session *probe_session;
};
static struct hook_state g_hooks;

static int h_attach(struct tg_gw_session *s, void *ctx, void **state)
{
    (void)s;
    *state = ctx;
    g_hooks.attached++;
    return 1;
}

static enum tg_gw_verdict h_down(struct tg_gw_session *s, struct tg_gw_frame *f, void *ctx, void *state)
{
    (void)ctx;
    (void)state;
    g_hooks.down_frames++;
    if (f->method && strcmp(f->method, "Flush") == 0) {
        g_hooks.consumed++;
        tg_gw_session_reply(s, f->info->request_id, 1, 0, NULL, 0);
        return TG_GW_CONSUME;
    }
    if (f->method && strcmp(f->method, "CloneSession") == 0) {
        f->close_reason = "no cloning here";
        return TG_GW_CLOSE;
    }
    return TG_GW_FORWARD;
}

static enum tg_gw_verdict h_up(struct tg_gw_session *s, struct tg_gw_frame *f, void *ctx, void *state)
{
    (void)s;
    (void)f;
    (void)ctx;
    (void)state;
    g_hooks.up_frames++;
    return TG_GW_FORWARD;
}

static int h_down_close(struct tg_gw_session *s, const char *reason, void *ctx, void *state)
{
    (void)reason;
    (void)ctx;
    (void)state;
    g_hooks.down_closes++;
    if (s == g_hooks.keep) {
        g_hooks.detached = s;
        return 1;
    }
    return 0;
}

static void h_detach(struct tg_gw_session *s, void *ctx, void *state)
{
    (void)ctx;
    (void)state;
    if (s == g_hooks.detached)
        g_hooks.detached = NULL;
}

static const struct tg_gw_filter k_filter = {"test", h_attach, h_down, h_up, h_down_close, NULL, h_detach, NULL};

/* TracegateTest.Keep: mark this session to survive its client */
static void l_keep(struct tg_gw_session *s, uint64_t rid, const uint8_t *args, size_t len, int drop, void *ctx)
{
    (void)args;
    (void)len;
    (void)drop;
    (void)ctx;
    g_hooks.keep = s;
    tg_gw_session_reply(s, rid, 1, 0, NULL, 0);
}

/* TracegateTest.Adopt: move this client into the detached session */
static void l_adopt(struct tg_gw_session *s, uint64_t rid, const uint8_t *args, size_t len, int drop, void *ctx)
{
    (void)args;
    (void)len;
    (void)drop;
    (void)ctx;
    struct tg_gw_session *to = g_hooks.detached;
    if (!to || tg_gw_session_transfer_down(s, to) != 0) {
        tg_gw_session_reply(s, rid, 0, 0, NULL, 0);
        return;
    }
    g_hooks.detached = NULL;
    tg_gw_session_reply(to, rid, 1, 0, NULL, 0);
}

static void probe_reply(struct tg_gw_session *s, int success, int has_more, const uint8_t *reply, size_t len,
                        void *arg)
{
    (void)arg;
    if (has_more)
        return;
    (void)reply;
    g_hooks.private_done = 1;
    g_hooks.private_ok = success;
    g_hooks.private_len = len;
    tg_gw_session_reply(s, g_hooks.probe_rid, success, 0, NULL, 0);
}

/* TracegateTest.Probe: the gateway calls QueryServiceState upstream by itself */
static void l_probe(struct tg_gw_session *s, uint64_t rid, const uint8_t *args, size_t len, int drop, void *ctx)
{
    (void)args;
    (void)len;
    (void)drop;
    (void)ctx;
    uint32_t sid = tg_gw_session_service_id(s, "ConsumerPort");
    uint32_t mid = tg_gw_session_method_id(s, "ConsumerPort", "QueryServiceState");
    g_hooks.probe_rid = rid;
    if (!sid || !mid || tg_gw_session_call_up(s, sid, mid, NULL, 0, -1, probe_reply, NULL) != 0)
        tg_gw_session_reply(s, rid, 0, 0, NULL, 0);
}

static const struct tg_gw_local_method k_test_methods[] = {{"Keep", l_keep}, {"Adopt", l_adopt}, {"Probe", l_probe}};
static const struct tg_gw_local_service k_test_service = {"TracegateTest", k_test_methods, 3, NULL};

static int hook_detached(void *arg)
{
    (void)arg;
    return g_hooks.detached != NULL;
}
static int one_session(void *arg)
{
    (void)arg;
    return tg_gw_session_count(g_gw) == 1;
}

static void test_hooks(void **state)
{
    (void)state;
    memset(&g_hooks, 0, sizeof g_hooks);
    const char *kv[] = {"listen", "consumer=tcp://127.0.0.1:0", NULL};
    start(1, kv);
    assert_int_equal(tg_gw_add_filter(g_gw, &k_filter, &g_hooks), 0);
    assert_int_equal(tg_gw_register_local_service(g_gw, &k_test_service), 0);
    assert_int_equal(tg_gw_register_local_service(g_gw, &k_test_service), -1); /* once */
    const char *addr = listener_addr(0);

    /* A: bind, consume a Flush in the filter, a private upstream call, then ask to be kept */
    struct tc *a = tc_open(addr);
    tg_ipc_service_proxy *pa = tc_bind(a, "ConsumerPort");
    assert_non_null(pa);
    assert_int_equal(tc_call(a, pa, "Flush", NULL, -1), 1);
    assert_int_equal(g_hooks.consumed, 1);
    assert_int_equal(g_fake.flush_calls, 0); /* consumed: never forwarded */
    assert_int_equal(tc_call(a, pa, "QueryServiceState", NULL, -1), 1);
    assert_true(g_hooks.up_frames >= 2);
    tg_ipc_service_proxy *pt = tc_bind(a, "TracegateTest");
    assert_non_null(pt);
    int qss_before = g_fake.qss_calls;
    assert_int_equal(tc_call(a, pt, "Probe", NULL, -1), 1);
    assert_true(g_hooks.private_done && g_hooks.private_ok);
    assert_int_equal(g_hooks.private_len, 100);
    assert_int_equal(g_fake.qss_calls, qss_before + 1);
    assert_int_equal(tc_call(a, pt, "Keep", NULL, -1), 1);
    tc_free(a);
    assert_true(tg_test_run_until(g_base, hook_detached, NULL, TIMEOUT_MS));
    assert_non_null(g_hooks.detached);
    assert_true(tg_gw_session_detached(g_hooks.detached));
    assert_int_equal(tg_gw_session_count(g_gw), 1); /* kept alive without a client */
    assert_int_equal(g_fake.peer_closes, 0);

    /* B: a new client adopts the detached session and uses its upstream */
    struct tc *b = tc_open(addr);
    tg_ipc_service_proxy *pb = tc_bind(b, "TracegateTest");
    assert_non_null(pb);
    assert_int_equal(tc_call(b, pb, "Adopt", NULL, -1), 1);
    assert_true(tg_test_run_until(g_base, one_session, NULL, TIMEOUT_MS)); /* b's own session went */
    assert_int_equal(tg_gw_session_count(g_gw), 1);
    tg_ipc_service_proxy *pc = tc_bind(b, "ConsumerPort");
    assert_non_null(pc);
    assert_int_equal(tc_call(b, pc, "QueryServiceState", NULL, -1), 1);
    assert_int_equal(g_fake.peer_opens, 1); /* still the first upstream connection */

    /* a filter may close the session */
    assert_int_not_equal(tc_call(b, pc, "CloneSession", NULL, -1), 1);
    tc_expect_closed(b);
    tc_free(b);
    int closes = 1;
    assert_true(tg_test_run_until(g_base, gw_idle, &closes, TIMEOUT_MS));
    assert_int_equal(tg_gw_session_count(g_gw), 0);
    assert_int_equal(g_fake.peer_closes, 1);
    assert_int_equal(tg_gw_metrics_frame_rejected_count(g_gw->metrics, "filter"), 1);
    stop();
}

static int drained_flag;
static void on_drained(void *arg)
{
    (void)arg;
    drained_flag = 1;
}
static int drained_done(void *arg)
{
    (void)arg;
    return drained_flag;
}

static void test_drain_and_limits(void **state)
{
    (void)state;
    const char *kv[] = {"listen", "consumer=tcp://127.0.0.1:0?max-connections=2", NULL};
    start(1, kv);
    const char *addr = listener_addr(0);
    char saved[128];
    snprintf(saved, sizeof saved, "%s", addr);
    struct tc *a = tc_open(saved), *b = tc_open(saved), *c = tc_open(saved);
    assert_true(tg_test_run_until(g_base, disc_done, c, TIMEOUT_MS)); /* over the listener's cap */
    assert_int_equal(tg_gw_metrics_conn_rejected_count(g_gw->metrics, "listener_max_connections"), 1);
    tg_ipc_service_proxy *pa = tc_bind(a, "ConsumerPort");
    assert_non_null(pa);
    tc_free(c);
    tc_free(b);
    tg_test_run_until(g_base, NULL, NULL, 50);
    drained_flag = 0;
    tg_gw_drain(g_gw, on_drained, NULL);
    tg_test_run_until(g_base, NULL, NULL, 50);
    assert_false(drained_flag);                                        /* a is still there */
    assert_int_equal(tc_call(a, pa, "QueryServiceState", NULL, -1), 1); /* and still served */
    struct tg_addr la; /* no new clients: the listener is closed */
    char err[256];
    assert_int_equal(tg_addr_parse(saved, &la, err, sizeof err), 0);
    assert_true(tg_addr_connect_wait(&la, 1000) < 0);
    tc_free(a);
    assert_true(tg_test_run_until(g_base, drained_done, NULL, TIMEOUT_MS));
    stop();
}

static void test_idle_and_global_limit(void **state)
{
    (void)state;
    /* the idle timeout must be longer than any stall of this process between a's calls: scaled */
    char idle[32];
    snprintf(idle, sizeof idle, "%dms", tg_test_ms(300));
    const char *kv[] = {"listen", "consumer=tcp://127.0.0.1:0", "idle-timeout", idle, "max-connections", "2", NULL};
    start(1, kv);
    char addr[128];
    snprintf(addr, sizeof addr, "%s", listener_addr(0));
    struct tc *a = tc_open(addr);
    tg_ipc_service_proxy *p = tc_bind(a, "ConsumerPort");
    assert_non_null(p);
    struct tc *b = tc_open(addr);
    assert_non_null(tc_bind(b, "ConsumerPort"));
    struct tc *c = tc_open(addr); /* the third connection is over max-connections */
    assert_true(tg_test_run_until(g_base, disc_done, c, TIMEOUT_MS));
    assert_int_equal(tg_gw_metrics_conn_rejected_count(g_gw->metrics, "max_connections"), 1);
    tc_free(c);
    /* a keeps talking (call after call) while b stays silent: only b is idle */
    int calls = 0;
    while (!b->disconnected) {
        assert_int_equal(tc_call(a, p, "QueryServiceState", NULL, -1), 1);
        assert_true(++calls < 1000000);
    }
    assert_true(calls > 1);
    assert_false(a->disconnected);
    assert_int_equal(tg_gw_metrics_conn_rejected_count(g_gw->metrics, "idle"), 1);
    assert_int_equal(tc_call(a, p, "QueryServiceState", NULL, -1), 1); /* a is still served */
    tc_free(b);
    tc_free(a);
    stop();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_relay_and_metrics), cmocka_unit_test(test_observer_acl),
        cmocka_unit_test(test_token_auth),        cmocka_unit_test(test_auth_timeout),
        cmocka_unit_test(test_protocol_violations),
        cmocka_unit_test(test_parser_differential_client), cmocka_unit_test(test_parser_differential_upstream),
        cmocka_unit_test(test_fd_passthrough),    cmocka_unit_test(test_slow_client),
        cmocka_unit_test(test_slow_reader_kept),
        cmocka_unit_test(test_rate_limit),        cmocka_unit_test(test_upstream_down),
        cmocka_unit_test(test_hooks),             cmocka_unit_test(test_drain_and_limits),
        cmocka_unit_test(test_idle_and_global_limit),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
