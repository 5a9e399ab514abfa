/* test_gw_tls.c: TLS listener/client tests: echo over TLS, mTLS accept/refuse, server verification, reload. */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <event2/event.h>
#include <event2/listener.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "net/tls.h"
#include "tracegate/addr.h"
#include "tracegate/frame.h"
#include "tg_test_util.h"

static char g_pki[256];

static void path(char *out, size_t n, const char *file) { snprintf(out, n, "%s/%s", g_pki, file); }

struct server {
    struct event_base *base;
    struct tg_tls_server *tls;
    struct evconnlistener *l;
    int port;
    int accepted, failed, verified;
    char subject[256];
    char last_error[256];
};

static void echo_frame(tg_conn *c, const uint8_t *body, size_t len, void *arg)
{
    (void)arg;
    tg_conn_send(c, body, len, -1);
}
static void srv_closed(tg_conn *c, const char *reason, void *arg)
{
    (void)c;
    (void)reason;
    (void)arg;
}
static const struct tg_conn_cbs k_echo = {.on_frame = echo_frame, .on_close = srv_closed};

static void on_handshake(void *arg, tg_conn *c, const struct tg_tls_peer *peer, const char *error)
{
    struct server *s = arg;
    if (!c) {
        s->failed++;
        snprintf(s->last_error, sizeof s->last_error, "%s", error);
        return;
    }
    s->accepted++;
    s->verified = peer->cert_verified;
    snprintf(s->subject, sizeof s->subject, "%s", peer->subject);
    tg_conn_set_cbs(c, &k_echo, s);
}

static void on_accept(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa, int salen, void *arg)
{
    struct server *s = arg;
    (void)l;
    (void)sa;
    (void)salen;
    tg_tls_server_accept(s->tls, s->base, fd, 2000, NULL, on_handshake, s);
}

static void server_start(struct server *s, int require_cert)
{
    memset(s, 0, sizeof *s);
    s->base = event_base_new();
    char cert[300], key[300], ca[300], err[256];
    path(cert, sizeof cert, "server.crt");
    path(key, sizeof key, "server.key");
    path(ca, sizeof ca, "ca.crt");
    struct tg_tls_server_config cfg = {.cert_file = cert, .key_file = key, .ca_file = ca,
                                       .require_client_cert = require_cert};
    s->tls = tg_tls_server_new(&cfg, err, sizeof err);
    assert_non_null(s->tls);
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    s->l = evconnlistener_new_bind(s->base, on_accept, s, LEV_OPT_CLOSE_ON_FREE | LEV_OPT_REUSEABLE, 16,
                                   (struct sockaddr *)&sin, sizeof sin);
    assert_non_null(s->l);
    socklen_t sl = sizeof sin;
    getsockname(evconnlistener_get_fd(s->l), (struct sockaddr *)&sin, &sl);
    s->port = ntohs(sin.sin_port);
}

static void server_stop(struct server *s)
{
    evconnlistener_free(s->l);
    tg_tls_server_free(s->tls);
    event_base_free(s->base);
}

struct client {
    int got, closed;
    char reason[256];
    uint8_t echo[64];
    size_t echo_len;
};

static void cli_frame(tg_conn *c, const uint8_t *body, size_t len, void *arg)
{
    struct client *cl = arg;
    (void)c;
    cl->got++;
    cl->echo_len = len < sizeof cl->echo ? len : sizeof cl->echo;
    memcpy(cl->echo, body, cl->echo_len);
    tg_conn_close(c, "done");
}
static void cli_closed(tg_conn *c, const char *reason, void *arg)
{
    struct client *cl = arg;
    (void)c;
    cl->closed = 1;
    snprintf(cl->reason, sizeof cl->reason, "%s", reason);
}
static const struct tg_conn_cbs k_cli = {.on_frame = cli_frame, .on_close = cli_closed};

/* Connects with the given client cert/CA, sends one frame, runs until closed. */
static void run_client(struct server *s, struct client *cl, const char *ca_file, const char *cert_name,
                       const char *server_name)
{
    memset(cl, 0, sizeof *cl);
    char ca[300], cert[300], key[300], addr[64], err[256];
    path(ca, sizeof ca, ca_file);
    snprintf(addr, sizeof addr, "127.0.0.1:%d", s->port);
    struct tg_addr a;
    assert_int_equal(tg_addr_parse(addr, &a, err, sizeof err), 0);
    int fd = tg_addr_connect_wait(&a, 2000);
    assert_true(fd >= 0);
    struct tg_tls_client_config cfg = {.ca_file = ca, .server_name = server_name};
    if (cert_name) {
        snprintf(cert, sizeof cert, "%s/%s.crt", g_pki, cert_name);
        snprintf(key, sizeof key, "%s/%s.key", g_pki, cert_name);
        cfg.cert_file = cert;
        cfg.key_file = key;
    }
    tg_conn *c = tg_tls_client_conn(s->base, fd, &cfg, NULL, err, sizeof err);
    assert_non_null(c);
    tg_conn_set_cbs(c, &k_cli, cl);
    static const uint8_t hello[] = {0x10, 0x01};
    tg_conn_send(c, hello, sizeof hello, -1);
    for (int i = 0; i < 400 && !cl->closed; i++)
        event_base_loop(s->base, EVLOOP_ONCE);
    /* let the server side notice, too */
    for (int i = 0; i < 20; i++)
        event_base_loop(s->base, EVLOOP_NONBLOCK);
}

static void test_mtls_echo(void **state)
{
    (void)state;
    struct server s;
    struct client cl;
    server_start(&s, 1);
    run_client(&s, &cl, "ca.crt", "client", "localhost");
    assert_int_equal(cl.got, 1);
    assert_int_equal(cl.echo_len, 2);
    assert_int_equal(s.accepted, 1);
    assert_true(s.verified);
    assert_non_null(strstr(s.subject, "tracegate-client"));
    server_stop(&s);
}

static void test_mtls_refuses_missing_and_rogue_certs(void **state)
{
    (void)state;
    struct server s;
    struct client cl;
    server_start(&s, 1);
    run_client(&s, &cl, "ca.crt", NULL, "localhost");
    assert_int_equal(cl.got, 0);
    assert_true(cl.closed);
    run_client(&s, &cl, "ca.crt", "rogue-client", "localhost");
    assert_int_equal(cl.got, 0);
    assert_true(cl.closed);
    assert_int_equal(s.accepted, 0);
    assert_int_equal(s.failed, 2);
    server_stop(&s);
}

static void test_client_verifies_server(void **state)
{
    (void)state;
    struct server s;
    struct client cl;
    server_start(&s, 0);
    /* wrong trust anchor */
    run_client(&s, &cl, "rogue-ca.crt", NULL, "localhost");
    assert_int_equal(cl.got, 0);
    assert_true(cl.closed);
    /* wrong host name */
    run_client(&s, &cl, "ca.crt", NULL, "not-this-host.example");
    assert_int_equal(cl.got, 0);
    /* right CA, right name, no client cert needed */
    run_client(&s, &cl, "ca.crt", NULL, "localhost");
    assert_int_equal(cl.got, 1);
    assert_false(s.verified);
    server_stop(&s);
}

static void test_reload(void **state)
{
    (void)state;
    struct server s;
    struct client cl;
    server_start(&s, 0);
    char err[256];
    assert_int_equal(tg_tls_server_reload(s.tls, err, sizeof err), 0);
    run_client(&s, &cl, "ca.crt", NULL, "localhost");
    assert_int_equal(cl.got, 1);
    /* a broken reload keeps the old context */
    char cert[300];
    path(cert, sizeof cert, "server.crt");
    char moved[320];
    snprintf(moved, sizeof moved, "%s.moved", cert);
    assert_int_equal(rename(cert, moved), 0);
    assert_int_not_equal(tg_tls_server_reload(s.tls, err, sizeof err), 0);
    assert_int_equal(rename(moved, cert), 0);
    run_client(&s, &cl, "ca.crt", NULL, "localhost");
    assert_int_equal(cl.got, 1);
    server_stop(&s);
}

static int setup_pki(void **state)
{
    (void)state;
    return tg_test_make_pki(g_pki, sizeof g_pki, "tg-tls-test");
}

static int teardown_pki(void **state)
{
    (void)state;
    return tg_test_remove_pki(g_pki);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mtls_echo),
        cmocka_unit_test(test_mtls_refuses_missing_and_rogue_certs),
        cmocka_unit_test(test_client_verifies_server),
        cmocka_unit_test(test_reload),
    };
    return cmocka_run_group_tests(tests, setup_pki, teardown_pki);
}
