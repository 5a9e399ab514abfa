/* test_ws_client.c: tracectl's ws:// / wss:// client transport against the WebSocket front end (tokens, TLS, mTLS, reload, failures, a large stream both ways through both links). */
#include "config.h"

#include <event2/event.h>
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "gw_ws.h"
#include "test_gw_ws_double.h"
#include "tg_test_util.h"
#include "net/ws_client.h"
#include "net/ws_link.h"
#include "net/ws_wire.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/socket.h>

/* Known third-party leak: with libwebsockets 4.1.6 and OpenSSL 3, a context
 * that served TLS connections leaves its SSL_CTX (certificates, CA store)
 * behind when destroyed (indirect leaks only, all allocated inside
 * lws_create_context/lws_create_vhost). Our own allocations stay checked. */
const char *__lsan_default_suppressions(void);
const char *__lsan_default_suppressions(void) { return "leak:lws_create_vhost\nleak:lws_create_context\n"; }
/* full stacks (libcrypto has no frame pointers), so the suppressions can match */
const char *__asan_default_options(void);
const char *__asan_default_options(void) { return "fast_unwind_on_malloc=0"; }

static char g_pki[256];
static struct tg_gw_ws *g_ws;
static int g_port;
static struct event_base *g_cbase; /* the client's loop (this thread) */

struct cstate {
    int frames;
    char last[256];
    int closed;
};

static void c_on_frame(tg_conn *c, const uint8_t *body, size_t len, void *arg)
{
    struct cstate *s = arg;
    (void)c;
    s->frames++;
    size_t n = len < sizeof s->last - 1 ? len : sizeof s->last - 1;
    memcpy(s->last, body, n);
    s->last[n] = '\0';
}

static void c_on_close(tg_conn *c, const char *reason, void *arg)
{
    struct cstate *s = arg;
    (void)c;
    (void)reason;
    s->closed = 1;
}

static int got_frame(void *arg) { return ((struct cstate *)arg)->frames > 0 || ((struct cstate *)arg)->closed; }
static int got_close(void *arg) { return ((struct cstate *)arg)->closed; }

static void pki(char *out, size_t cap, const char *name) { snprintf(out, cap, "%s/%s", g_pki, name); }

/* mtls: 1 = client certificates required, 2 = asked for and verified, but optional */
static int start_server(int tls, int mtls)
{
    struct event_base *base = tdbl_start();
    g_port = tg_test_free_tcp_port();
    char cert[300], key[300], ca[300], err[256];
    pki(cert, sizeof cert, "server.crt");
    pki(key, sizeof key, "server.key");
    pki(ca, sizeof ca, "ca.crt");
    struct tg_gw_ws_config cfg = {
        .bind_host = "127.0.0.1",
        .port = g_port,
        .local_roles = TG_GW_ROLE_ADMIN,
        .tls = tls,
        .cert_file = tls ? cert : NULL,
        .key_file = tls ? key : NULL,
        .ca_file = mtls ? ca : NULL,
        .require_client_cert = mtls == 1,
    };
    g_ws = tg_gw_ws_start(NULL, base, &cfg, err, sizeof err);
    if (!g_ws)
        fprintf(stderr, "tg_gw_ws_start: %s\n", err);
    g_cbase = event_base_new();
    return g_ws ? 0 : -1;
}

static int setup_plain(void **state)
{
    (void)state;
    return start_server(0, 0);
}
static int setup_tls(void **state)
{
    (void)state;
    return start_server(1, 0);
}
static int setup_mtls(void **state)
{
    (void)state;
    return start_server(1, 1);
}

static int setup_optional_mtls(void **state)
{
    (void)state;
    return start_server(1, 2);
}

static int teardown(void **state)
{
    (void)state;
    /* let the client conns see their EOF and free themselves */
    tg_test_run_until(g_cbase, NULL, NULL, 50);
    tg_gw_ws_stop(g_ws);
    g_ws = NULL;
    tdbl_stop();
    event_base_free(g_cbase);
    g_cbase = NULL;
    return 0;
}

/* Opens a client, sends "ping <n>", returns 1 if echoed, 0 if the conn closed. */
static int roundtrip(int wss, const char *path, const struct tg_endpoint_creds *creds, struct cstate *s)
{
    struct tg_endpoint ep;
    memset(&ep, 0, sizeof ep);
    ep.kind = wss ? TG_EP_WSS : TG_EP_WS;
    snprintf(ep.host, sizeof ep.host, "127.0.0.1");
    ep.port = g_port;
    snprintf(ep.path, sizeof ep.path, "%s", path);
    char err[256];
    memset(s, 0, sizeof *s);
    tg_conn *c = tg_ws_client_open(g_cbase, &ep, creds, err, sizeof err);
    assert_non_null(c);
    struct tg_conn_cbs cbs = {.on_frame = c_on_frame, .on_close = c_on_close};
    tg_conn_set_cbs(c, &cbs, s);
    /* sent before the handshake is done: waits in the filter */
    assert_int_equal(tg_conn_send(c, "ping 1", 6, -1), 0);
    tg_test_run_until(g_cbase, got_frame, s, 8000);
    int ok = s->frames > 0 && !strcmp(s->last, "ping 1");
    if (!s->closed)
        tg_conn_close(c, "test done");
    tg_test_run_until(g_cbase, got_close, s, 2000);
    assert_true(s->closed);
    return ok;
}

/* ------------------------------------------------ a stream both ways through two links */

struct echo_state {
    size_t n, next;       /* frames sent, next frame expected back */
    const size_t *sizes;
    int bad, closed;
};

static void echo_body(uint8_t *b, size_t i, size_t len)
{
    for (size_t k = 0; k < len; k++)
        b[k] = (uint8_t)((i * 31 + k * 7 + 1) & 0xff);
    b[0] = 'D'; /* never a command for the test peer */
}

static void e_on_frame(tg_conn *c, const uint8_t *body, size_t len, void *arg)
{
    struct echo_state *s = arg;
    (void)c;
    if (s->bad || s->next >= s->n || len != s->sizes[s->next]) {
        s->bad = 1;
        return;
    }
    uint8_t *want = malloc(len);
    echo_body(want, s->next, len);
    if (memcmp(want, body, len) != 0)
        s->bad = 1;
    free(want);
    s->next++;
}

static void e_on_close(tg_conn *c, const char *reason, void *arg)
{
    (void)c;
    (void)reason;
    ((struct echo_state *)arg)->closed = 1;
}

static int e_closed(void *arg) { return ((struct echo_state *)arg)->closed; }

static int echo_done(void *arg)
{
    struct echo_state *s = arg;
    return s->next == s->n || s->bad || s->closed;
}

/* tracectl's client sends its frames as messages of at most TG_WS_CLIENT_MSG_MAX bytes
 * through its link, the gateway's link joins them into one stream and sends the echo back in
 * messages of its own size, which the client's link turns back into a stream: ~12 MiB of frames
 * of mixed sizes come back whole and in order. */
static void stream_both_ways(int wss)
{
    enum { N = 700 };
    static size_t sizes[N];
    uint64_t st = 99;
    for (size_t i = 0; i < N; i++) {
        st = st * 6364136223846793005ull + 1442695040888963407ull;
        uint32_t r = (uint32_t)(st >> 33);
        sizes[i] = r % 10 < 7 ? 1 + r % 2000 : 2000 + r % 98000;
    }
    struct tg_endpoint ep;
    memset(&ep, 0, sizeof ep);
    ep.kind = wss ? TG_EP_WSS : TG_EP_WS;
    snprintf(ep.host, sizeof ep.host, "127.0.0.1");
    ep.port = g_port;
    snprintf(ep.path, sizeof ep.path, "/traced");
    char ca[300], err[256];
    pki(ca, sizeof ca, "ca.crt");
    struct tg_endpoint_creds cr = {.cacert = wss ? ca : NULL};
    tg_conn *c = tg_ws_client_open(g_cbase, &ep, &cr, err, sizeof err);
    assert_non_null(c);
    struct echo_state s = {.n = N, .sizes = sizes};
    struct tg_conn_cbs cbs = {.on_frame = e_on_frame, .on_close = e_on_close};
    tg_conn_set_cbs(c, &cbs, &s);
    uint8_t *buf = malloc(100000);
    for (size_t i = 0; i < N; i++) {
        echo_body(buf, i, sizes[i]);
        assert_int_equal(tg_conn_send(c, buf, sizes[i], -1), 0);
    }
    free(buf);
    tg_test_run_until(g_cbase, echo_done, &s, 60000);
    assert_false(s.bad);
    assert_false(s.closed);
    assert_int_equal(s.next, N);
    tg_conn_close(c, "test done");
    tg_test_run_until(g_cbase, e_closed, &s, 2000);
}

static void test_stream_both_ways(void **state)
{
    (void)state;
    stream_both_ways(0);
}

static void test_stream_both_ways_wss(void **state)
{
    (void)state;
    stream_both_ways(1);
}

static void test_plain_with_token(void **state)
{
    (void)state;
    struct cstate s;
    struct tg_endpoint_creds cr = {.token = "good-token"};
    assert_true(roundtrip(0, "/traced", &cr, &s));
    struct tg_gw_client_info ci;
    assert_true(tdbl_wait_count(tdbl_accepted, 1, 2000));
    assert_int_equal(tdbl_info(0, &ci), 0);
    assert_int_equal(ci.transport, TG_GW_T_WS);
    assert_int_equal(ci.auth, TG_GW_AUTH_TOKEN);
    assert_string_equal(ci.principal, "token:alice");
    assert_int_equal(tdbl_unix_conns(), 0);

    /* a long token goes in the query, only when asked to */
    char lt[121];
    memset(lt, 'L', 120);
    lt[120] = '\0';
    cr.token = lt;
    cr.token_in_url = 1;
    assert_true(roundtrip(0, "/traced/n1", &cr, &s));
    cr.token_in_url = 0;
    assert_int_equal(tdbl_info(1, &ci), 0);
    assert_int_equal(ci.roles, TG_GW_ROLE_OBSERVER);
    assert_string_equal(ci.node, "n1");

    /* no token on loopback: local roles */
    assert_true(roundtrip(0, "/traced", NULL, &s));
    assert_int_equal(tdbl_info(2, &ci), 0);
    assert_int_equal(ci.auth, TG_GW_AUTH_LOCAL);

    /* a wrong token: refused before the upgrade, the conn just closes */
    cr.token = "wrong";
    assert_false(roundtrip(0, "/traced", &cr, &s));
    assert_int_equal(tdbl_accepted(), 3);
}

static void test_connection_refused(void **state)
{
    (void)state;
    struct cstate s;
    int port = g_port;
    g_port = tg_test_free_tcp_port(); /* nobody listens there */
    assert_false(roundtrip(0, "/traced", NULL, &s));
    g_port = port;
}

/* tg_gw_ws_reload returns at once; its outcome comes on the lws thread. */
struct reload_wait {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int done, rc;
    char err[256];
};

static void on_reloaded(int rc, const char *err, void *arg)
{
    struct reload_wait *w = arg;
    pthread_mutex_lock(&w->mu);
    w->rc = rc;
    snprintf(w->err, sizeof w->err, "%s", err);
    w->done = 1;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

static int reload_and_wait(char *err, size_t errlen)
{
    struct reload_wait w = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};
    tg_gw_ws_reload(g_ws, on_reloaded, &w);
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += 60; /* safety net only: the lws thread answers when it runs */
    pthread_mutex_lock(&w.mu);
    while (!w.done && pthread_cond_timedwait(&w.cv, &w.mu, &dl) != ETIMEDOUT) {
    }
    int done = w.done;
    pthread_mutex_unlock(&w.mu);
    assert_true(done);
    snprintf(err, errlen, "%s", w.err);
    return w.rc;
}

static void test_wss(void **state)
{
    (void)state;
    struct cstate s;
    char ca[300], rogue[300];
    pki(ca, sizeof ca, "ca.crt");
    pki(rogue, sizeof rogue, "rogue-ca.crt");
    struct tg_endpoint_creds cr = {.cacert = ca};
    assert_true(roundtrip(1, "/traced", &cr, &s));
    struct tg_gw_client_info ci;
    assert_int_equal(tdbl_info(0, &ci), 0);
    assert_int_equal(ci.transport, TG_GW_T_WSS);
    /* a server certificate the client does not trust */
    cr.cacert = rogue;
    assert_false(roundtrip(1, "/traced", &cr, &s));
    assert_int_equal(tdbl_accepted(), 1);
    /* reload with good files works, with a missing key fails and keeps the old one */
    char err[256];
    assert_int_equal(reload_and_wait(err, sizeof err), 0);
    char key[300], moved[320];
    pki(key, sizeof key, "server.key");
    snprintf(moved, sizeof moved, "%s.moved", key);
    assert_int_equal(rename(key, moved), 0);
    assert_int_equal(reload_and_wait(err, sizeof err), -1);
    assert_non_null(strstr(err, "key"));
    assert_int_equal(rename(moved, key), 0);
    cr.cacert = ca;
    assert_true(roundtrip(1, "/traced", &cr, &s));
}

static void test_mtls(void **state)
{
    (void)state;
    struct cstate s;
    char ca[300], cert[300], key[300], rc[300], rk[300];
    pki(ca, sizeof ca, "ca.crt");
    pki(cert, sizeof cert, "client.crt");
    pki(key, sizeof key, "client.key");
    pki(rc, sizeof rc, "rogue-client.crt");
    pki(rk, sizeof rk, "rogue-client.key");
    struct tg_endpoint_creds cr = {.cacert = ca, .cert = cert, .key = key};
    assert_true(roundtrip(1, "/traced", &cr, &s));
    struct tg_gw_client_info ci;
    assert_int_equal(tdbl_info(0, &ci), 0);
    assert_int_equal(ci.auth, TG_GW_AUTH_CERT);
    assert_string_equal(ci.principal, "cert:/CN=tracegate-client"); /* the whole subject, as over TLS */
    assert_int_equal(ci.roles, TG_GW_ROLE_RECORDER);
    /* no client certificate, or one from another CA: refused */
    struct tg_endpoint_creds none = {.cacert = ca};
    assert_false(roundtrip(1, "/traced", &none, &s));
    struct tg_endpoint_creds rogue = {.cacert = ca, .cert = rc, .key = rk};
    assert_false(roundtrip(1, "/traced", &rogue, &s));
    assert_int_equal(tdbl_accepted(), 1);
}

/* ---- a raw TCP server that records the first request head it gets, then hangs up ---- */

static struct {
    int lfd, port;
    pthread_t th;
    atomic_int done, connections;
    char head[4096];
} g_raw;

static void *raw_server(void *arg)
{
    (void)arg;
    struct pollfd p = {.fd = g_raw.lfd, .events = POLLIN};
    if (poll(&p, 1, 10000) > 0) {
        int c = accept(g_raw.lfd, NULL, NULL);
        if (c >= 0) {
            atomic_fetch_add(&g_raw.connections, 1);
            size_t n = 0;
            while (n + 1 < sizeof g_raw.head && !strstr(g_raw.head, "\r\n\r\n")) {
                struct pollfd q = {.fd = c, .events = POLLIN};
                if (poll(&q, 1, 10000) <= 0)
                    break;
                ssize_t r = recv(c, g_raw.head + n, sizeof g_raw.head - 1 - n, 0);
                if (r <= 0)
                    break;
                n += (size_t)r;
                g_raw.head[n] = '\0';
            }
            close(c);
        }
    }
    atomic_store(&g_raw.done, 1);
    return NULL;
}

static int setup_raw(void **state)
{
    (void)state;
    memset(&g_raw, 0, sizeof g_raw);
    g_raw.lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t al = sizeof a;
    if (g_raw.lfd < 0 || bind(g_raw.lfd, (struct sockaddr *)&a, sizeof a) != 0 || listen(g_raw.lfd, 4) != 0 ||
        getsockname(g_raw.lfd, (struct sockaddr *)&a, &al) != 0)
        return -1;
    g_raw.port = ntohs(a.sin_port);
    g_cbase = event_base_new();
    return pthread_create(&g_raw.th, NULL, raw_server, NULL) == 0 ? 0 : -1;
}

static int teardown_raw(void **state)
{
    (void)state;
    tg_test_run_until(g_cbase, NULL, NULL, 50);
    if (!atomic_load(&g_raw.done)) { /* nobody came: wake the server */
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)g_raw.port)};
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        if (connect(fd, (struct sockaddr *)&a, sizeof a) == 0)
            (void)send(fd, "\r\n\r\n", 4, MSG_NOSIGNAL);
        close(fd);
    }
    pthread_join(g_raw.th, NULL);
    close(g_raw.lfd);
    event_base_free(g_cbase);
    g_cbase = NULL;
    return 0;
}

static int raw_done(void *arg)
{
    (void)arg;
    return atomic_load(&g_raw.done);
}

/* Opens a ws:// client to the raw server; returns the request line, or NULL if open failed (err). */
static const char *capture_request(const struct tg_endpoint_creds *cr, char *err, size_t errlen)
{
    struct tg_endpoint ep;
    memset(&ep, 0, sizeof ep);
    ep.kind = TG_EP_WS;
    snprintf(ep.host, sizeof ep.host, "127.0.0.1");
    ep.port = g_raw.port;
    snprintf(ep.path, sizeof ep.path, "/traced");
    tg_conn *c = tg_ws_client_open(g_cbase, &ep, cr, err, errlen);
    if (!c)
        return NULL;
    struct cstate s;
    memset(&s, 0, sizeof s);
    struct tg_conn_cbs cbs = {.on_frame = c_on_frame, .on_close = c_on_close};
    tg_conn_set_cbs(c, &cbs, &s);
    assert_true(tg_test_run_until(g_cbase, raw_done, NULL, 10000));
    tg_test_run_until(g_cbase, got_close, &s, 5000); /* the server hung up */
    if (!s.closed)
        tg_conn_close(c, "test done");
    tg_test_run_until(g_cbase, got_close, &s, 2000);
    return g_raw.head;
}

static void test_token_rides_subprotocol(void **state)
{
    (void)state;
    /* a token as `tracegated --gen-token` makes them */
    const char *tok = "RT2Y_aPgtLngV7SMVfIGQbbhYjRUnIIrVJJlwpc_Ejk";
    struct tg_endpoint_creds cr = {.token = tok};
    char err[512];
    const char *head = capture_request(&cr, err, sizeof err);
    assert_non_null(head);
    const char *eol = strstr(head, "\r\n");
    assert_non_null(eol);
    char line[512];
    snprintf(line, sizeof line, "%.*s", (int)(eol - head), head);
    assert_string_equal(line, "GET /traced HTTP/1.1");
    assert_non_null(strcasestr(head, "\nSec-WebSocket-Protocol: tracegate, tracegate.token.RT2Y_aPgtLngV7SMVfIGQbb"));
    assert_null(strstr(head, "?token="));
}

static void test_unfit_token_is_an_error(void **state)
{
    (void)state;
    /* the old recipe's shape: base64 with '/' and '=' */
    struct tg_endpoint_creds cr = {.token = "q+Lr/0Zx1w9Kd4e+Ua/oYvN2c8Gm5bQ3Tj7HsPfXkE0="};
    char err[512] = "";
    assert_null(capture_request(&cr, err, sizeof err));
    assert_non_null(strstr(err, "tracegated --gen-token"));
    assert_non_null(strstr(err, "--token-in-url"));
    assert_non_null(strstr(err, "tr '+/' '-_'"));
    assert_null(strstr(err, "q+Lr")); /* the token itself is not echoed */
    char big[200];
    memset(big, 'a', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    cr.token = big;
    assert_null(capture_request(&cr, err, sizeof err));
    assert_non_null(strstr(err, "--token-in-url"));
    assert_int_equal(atomic_load(&g_raw.connections), 0); /* nothing was sent anywhere */
}

static void test_token_in_url_when_asked(void **state)
{
    (void)state;
    struct tg_endpoint_creds cr = {.token = "q+Lr/0Zx1w9Kd4e+Ua/oYvN2c8Gm5bQ3Tj7HsPfXkE0=", .token_in_url = 1};
    char err[512];
    const char *head = capture_request(&cr, err, sizeof err);
    assert_non_null(head);
    assert_non_null(
        strstr(head, "GET /traced?token=q%2BLr%2F0Zx1w9Kd4e%2BUa%2FoYvN2c8Gm5bQ3Tj7HsPfXkE0%3D HTTP/1.1\r\n"));
    assert_null(strstr(head, "tracegate.token."));
}

static void test_redaction(void **state)
{
    (void)state;
    char out[256];
    tg_ws_redact_tokens("GET /traced?x=1&token=s3cret&y=2 HTTP/1.1", out, sizeof out);
    assert_string_equal(out, "GET /traced?x=1&token=***&y=2 HTTP/1.1");
    tg_ws_redact_tokens("proto 'tracegate, tracegate.token.abc-DEF' refused", out, sizeof out);
    assert_string_equal(out, "proto 'tracegate, tracegate.token.***' refused");
    tg_ws_redact_tokens("TOKEN=x", out, sizeof out);
    assert_string_equal(out, "TOKEN=***");
    tg_ws_redact_tokens("nothing here", out, sizeof out);
    assert_string_equal(out, "nothing here");
    tg_ws_redact_tokens("token=abcdef", out, 8);
    assert_string_equal(out, "token=*");
}

/* With a CA but no requirement, a client certificate is asked for, verified, and gives cert-roles;
 * clients without one still connect (as loopback here); one from another CA does not. */
static void test_optional_client_cert(void **state)
{
    (void)state;
    struct cstate s;
    char ca[300], cert[300], key[300], rc[300], rk[300];
    pki(ca, sizeof ca, "ca.crt");
    pki(cert, sizeof cert, "client.crt");
    pki(key, sizeof key, "client.key");
    pki(rc, sizeof rc, "rogue-client.crt");
    pki(rk, sizeof rk, "rogue-client.key");
    tdbl_set_role_defaults(TG_GW_ROLE_ADMIN, TG_GW_ROLE_OBSERVER);
    struct tg_endpoint_creds with = {.cacert = ca, .cert = cert, .key = key};
    assert_true(roundtrip(1, "/traced", &with, &s));
    struct tg_gw_client_info ci;
    assert_int_equal(tdbl_info(0, &ci), 0);
    assert_int_equal(ci.auth, TG_GW_AUTH_CERT);
    assert_int_equal(ci.roles, TG_GW_ROLE_OBSERVER);
    assert_string_equal(ci.principal, "cert:/CN=tracegate-client"); /* the whole subject, as over TLS */
    struct tg_endpoint_creds without = {.cacert = ca};
    assert_true(roundtrip(1, "/traced", &without, &s));
    assert_int_equal(tdbl_info(1, &ci), 0);
    assert_int_equal(ci.auth, TG_GW_AUTH_LOCAL);
    struct tg_endpoint_creds rogue = {.cacert = ca, .cert = rc, .key = rk};
    assert_false(roundtrip(1, "/traced", &rogue, &s));
    assert_int_equal(tdbl_accepted(), 2);
}

static int make_pki(void **state)
{
    (void)state;
    return tg_test_make_pki(g_pki, sizeof g_pki, "tg-ws-pki");
}

static int remove_pki(void **state)
{
    (void)state;
    return tg_test_remove_pki(g_pki);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    if (getenv("TG_TEST_FILTER"))
        cmocka_set_test_filter(getenv("TG_TEST_FILTER"));
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_plain_with_token, setup_plain, teardown),
        cmocka_unit_test_setup_teardown(test_connection_refused, setup_plain, teardown),
        cmocka_unit_test_setup_teardown(test_stream_both_ways, setup_plain, teardown),
        cmocka_unit_test_setup_teardown(test_stream_both_ways_wss, setup_tls, teardown),
        cmocka_unit_test_setup_teardown(test_wss, setup_tls, teardown),
        cmocka_unit_test_setup_teardown(test_mtls, setup_mtls, teardown),
        cmocka_unit_test_setup_teardown(test_optional_client_cert, setup_optional_mtls, teardown),
        cmocka_unit_test_setup_teardown(test_token_rides_subprotocol, setup_raw, teardown_raw),
        cmocka_unit_test_setup_teardown(test_unfit_token_is_an_error, setup_raw, teardown_raw),
        cmocka_unit_test_setup_teardown(test_token_in_url_when_asked, setup_raw, teardown_raw),
        cmocka_unit_test(test_redaction),
    };
    return cmocka_run_group_tests(tests, make_pki, remove_pki);
}
