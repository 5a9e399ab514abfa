/* test_gw_ws_policy.c: route, Origin, subprotocol/token and role decisions of the WebSocket front end (pure functions). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include <unistd.h>

#include "gw_ws_policy.h"
#include "tracegate/peer_cred.h"

/* ---- a minimal stand-in for the core's thread-safe functions ---- */
static int g_healthy = 1;

unsigned tg_gw_auth_token_roles(struct tg_gw *gw, const char *token, char *principal, size_t plen)
{
    (void)gw;
    if (!strcmp(token, "good-token")) {
        snprintf(principal, plen, "alice");
        return TG_GW_ROLE_RECORDER;
    }
    if (!strcmp(token, "producer-token")) {
        snprintf(principal, plen, "prod");
        return TG_GW_ROLE_PRODUCER;
    }
    if (!strcmp(token, "adb-token")) {
        snprintf(principal, plen, "phones");
        return TG_GW_ROLE_ADB;
    }
    if (!strcmp(token, "admin-token")) {
        snprintf(principal, plen, "root");
        return TG_GW_ROLE_ADMIN;
    }
    return 0;
}

int tg_gw_origin_allowed(struct tg_gw *gw, const char *origin)
{
    (void)gw;
    return origin && !strcmp(origin, "https://ui.perfetto.dev");
}

int tg_gw_upstream_healthy(struct tg_gw *gw)
{
    (void)gw;
    return g_healthy;
}

static const struct tg_gw_ws_config k_cfg = {.bind_host = "127.0.0.1",
                                             .port = 8037,
                                             .local_roles = TG_GW_ROLE_ADMIN,
                                             .local_user_roles = TG_GW_ROLE_RECORDER | TG_GW_ROLE_PRODUCER,
                                             .require_token = 1};

/* What the kernel says about loopback peers: our own uid, unless a test says otherwise. */
static struct tg_peer_cred g_cred;

static struct tg_ws_request req(const char *path, const char *ip)
{
    struct tg_ws_request r;
    memset(&r, 0, sizeof r);
    r.path = path;
    r.peer_ip = ip;
    r.peer_port = 5555;
    r.host = "127.0.0.1:8037";
    g_cred.uid = geteuid();
    g_cred.pid = -1;
    g_cred.via_diag = 1;
    if (tg_ws_ip_is_loopback(ip))
        r.cred = &g_cred;
    return r;
}

static void test_routes(void **state)
{
    (void)state;
    char node[64];
    assert_int_equal(tg_ws_route_of("/healthz", node, sizeof node), TG_WS_ROUTE_HEALTHZ);
    assert_int_equal(tg_ws_route_of("/metrics", node, sizeof node), TG_WS_ROUTE_METRICS);
    assert_int_equal(tg_ws_route_of("/api/status", node, sizeof node), TG_WS_ROUTE_STATUS);
    assert_int_equal(tg_ws_route_of("/api/other", node, sizeof node), TG_WS_ROUTE_NOT_FOUND);
    assert_int_equal(tg_ws_route_of("/traced", node, sizeof node), TG_WS_ROUTE_CONSUMER);
    assert_string_equal(node, "");
    assert_int_equal(tg_ws_route_of("/traced/board-7.lab", node, sizeof node), TG_WS_ROUTE_CONSUMER);
    assert_string_equal(node, "board-7.lab");
    assert_int_equal(tg_ws_route_of("/traced/", node, sizeof node), TG_WS_ROUTE_NOT_FOUND);
    assert_int_equal(tg_ws_route_of("/traced/a/b", node, sizeof node), TG_WS_ROUTE_NOT_FOUND);
    assert_int_equal(tg_ws_route_of("/traced/..", node, sizeof node), TG_WS_ROUTE_NOT_FOUND);
    assert_int_equal(tg_ws_route_of("/traced/bad name", node, sizeof node), TG_WS_ROUTE_NOT_FOUND);
    /* federated sessions: @all and @a,b; a list that is empty or has an empty name is not a route */
    assert_int_equal(tg_ws_route_of("/traced/@all", node, sizeof node), TG_WS_ROUTE_CONSUMER);
    assert_string_equal(node, "@all");
    assert_int_equal(tg_ws_route_of("/traced/@board-7,lab.b", node, sizeof node), TG_WS_ROUTE_CONSUMER);
    assert_string_equal(node, "@board-7,lab.b");
    assert_int_equal(tg_ws_route_of("/traced/@", node, sizeof node), TG_WS_ROUTE_NOT_FOUND);
    assert_int_equal(tg_ws_route_of("/traced/@a,,b", node, sizeof node), TG_WS_ROUTE_NOT_FOUND);
    assert_int_equal(tg_ws_route_of("/traced/@a,", node, sizeof node), TG_WS_ROUTE_NOT_FOUND);
    assert_int_equal(tg_ws_route_of("/traced/a,b", node, sizeof node), TG_WS_ROUTE_NOT_FOUND);
    assert_int_equal(tg_ws_route_of("/traced/@a@b", node, sizeof node), TG_WS_ROUTE_NOT_FOUND);
    char longname[80];
    memset(longname, 'a', sizeof longname);
    memcpy(longname, "/traced/", 8);
    longname[sizeof longname - 1] = '\0';
    assert_int_equal(tg_ws_route_of(longname, node, sizeof node), TG_WS_ROUTE_NOT_FOUND);
    assert_int_equal(tg_ws_route_of("/producer", node, sizeof node), TG_WS_ROUTE_PRODUCER);
    assert_int_equal(tg_ws_route_of("/", node, sizeof node), TG_WS_ROUTE_STATIC);
    assert_int_equal(tg_ws_route_of("/app.js", node, sizeof node), TG_WS_ROUTE_STATIC);
    assert_int_equal(tg_ws_route_of("relative", node, sizeof node), TG_WS_ROUTE_NOT_FOUND);
}

static void test_loopback_and_host(void **state)
{
    (void)state;
    assert_true(tg_ws_ip_is_loopback("127.0.0.1"));
    assert_true(tg_ws_ip_is_loopback("127.1.2.3"));
    assert_true(tg_ws_ip_is_loopback("::1"));
    assert_true(tg_ws_ip_is_loopback("::ffff:127.0.0.1"));
    assert_false(tg_ws_ip_is_loopback("10.0.0.1"));
    assert_false(tg_ws_ip_is_loopback("::ffff:10.0.0.1"));
    assert_false(tg_ws_ip_is_loopback("localhost"));
    assert_false(tg_ws_ip_is_loopback(NULL));

    assert_true(tg_ws_host_is_local("127.0.0.1:8037", "127.0.0.1"));
    assert_true(tg_ws_host_is_local("localhost:8037", "127.0.0.1"));
    assert_true(tg_ws_host_is_local("[::1]:8037", "127.0.0.1"));
    assert_true(tg_ws_host_is_local("gw.lab:8037", "gw.lab"));
    assert_false(tg_ws_host_is_local("evil.example:8037", "127.0.0.1"));
    assert_false(tg_ws_host_is_local("evil.example:8037", "0.0.0.0"));
    assert_false(tg_ws_host_is_local("0.0.0.0:8037", "0.0.0.0"));
    assert_false(tg_ws_host_is_local(NULL, "127.0.0.1"));
}

static void test_protocol_header(void **state)
{
    (void)state;
    char tok[128];
    const char *why;
    assert_int_equal(tg_ws_parse_protocols(NULL, tok, sizeof tok, &why), 0);
    assert_string_equal(tok, "");
    assert_int_equal(tg_ws_parse_protocols("tracegate", tok, sizeof tok, &why), 0);
    assert_string_equal(tok, "");
    assert_int_equal(tg_ws_parse_protocols("tracegate, tracegate.token.abc-DEF_1.2~", tok, sizeof tok, &why), 0);
    assert_string_equal(tok, "abc-DEF_1.2~");
    assert_int_equal(tg_ws_parse_protocols("tracegate.token.xyz,tracegate", tok, sizeof tok, &why), 0);
    assert_string_equal(tok, "xyz");
    /* the token alone: a browser would fail the handshake, say so */
    assert_int_equal(tg_ws_parse_protocols("tracegate.token.xyz", tok, sizeof tok, &why), -1);
    assert_non_null(why);
    assert_int_equal(tg_ws_parse_protocols("chat, superchat", tok, sizeof tok, &why), -1);
    char big[200];
    snprintf(big, sizeof big, "tracegate, tracegate.token.%0120d", 0);
    assert_int_equal(tg_ws_parse_protocols(big, tok, sizeof tok, &why), -1);
    assert_non_null(strstr(why, "--gen-token")); /* not "put it in the URL" */
    /* over 63 bytes before "tracegate": libwebsockets would hang up */
    snprintf(big, sizeof big, "tracegate.token.%060d, tracegate", 0);
    assert_int_equal(tg_ws_parse_protocols(big, tok, sizeof tok, &why), -1);
}

static void test_origin(void **state)
{
    (void)state;
    struct tg_ws_decision d;
    struct tg_ws_request r = req("/traced", "127.0.0.1");
    r.origin = "https://ui.perfetto.dev";
    tg_ws_decide_upgrade(NULL, &k_cfg, &r, &d);
    assert_int_equal(d.status, 0);
    r.origin = "https://evil.example";
    tg_ws_decide_upgrade(NULL, &k_cfg, &r, &d);
    assert_int_equal(d.status, 403);
    /* our own origin */
    r.origin = "http://127.0.0.1:8037";
    tg_ws_decide_upgrade(NULL, &k_cfg, &r, &d);
    assert_int_equal(d.status, 0);
    r.tls = 1;
    tg_ws_decide_upgrade(NULL, &k_cfg, &r, &d);
    assert_int_equal(d.status, 403); /* scheme must match */
    r.tls = 0;
    /* DNS rebinding: same-origin with a foreign host name is not ours */
    r.host = "evil.example:8037";
    r.origin = "http://evil.example:8037";
    tg_ws_decide_upgrade(NULL, &k_cfg, &r, &d);
    assert_int_equal(d.status, 403);
    /* a missing Origin: fine on loopback */
    r = req("/traced", "127.0.0.1");
    tg_ws_decide_upgrade(NULL, &k_cfg, &r, &d);
    assert_int_equal(d.status, 0);
    /* ...elsewhere only with a token or a certificate */
    r = req("/traced", "192.0.2.7");
    tg_ws_decide_upgrade(NULL, &k_cfg, &r, &d);
    assert_int_equal(d.status, 403);
    r.query_token = "good-token";
    tg_ws_decide_upgrade(NULL, &k_cfg, &r, &d);
    assert_int_equal(d.status, 0);
    r.query_token = NULL;
    r.cert_subject = "node-7";
    r.tls = 1;
    tg_ws_decide_upgrade(NULL, &k_cfg, &r, &d);
    assert_int_equal(d.status, 0);
}

static void test_auth_and_roles(void **state)
{
    (void)state;
    struct tg_ws_decision d;
    struct tg_ws_request r = req("/traced", "127.0.0.1");
    tg_ws_decide_upgrade(NULL, &k_cfg, &r, &d);
    assert_int_equal(d.status, 0);
    assert_int_equal(d.info.auth, TG_GW_AUTH_LOCAL);
    assert_int_equal(d.info.roles, TG_GW_ROLE_ADMIN);
    assert_int_equal(d.info.loopback, 1);
    assert_int_equal(d.info.transport, TG_GW_T_WS);
    char want[32];
    snprintf(want, sizeof want, "uid:%u", (unsigned)geteuid());
    assert_string_equal(d.info.principal, want);

    /* another local user: its own sessions (recorder, producer), not admin */
    g_cred.uid = 4242;
    tg_ws_decide_upgrade(NULL, &k_cfg, &r, &d);
    assert_int_equal(d.status, 0);
    assert_int_equal(d.info.auth, TG_GW_AUTH_LOCAL);
    assert_int_equal(d.info.roles, TG_GW_ROLE_RECORDER | TG_GW_ROLE_PRODUCER);
    assert_string_equal(d.info.principal, "uid:4242");
    /* ...and nothing at all when local users are given no roles: then it must authenticate */
    struct tg_gw_ws_config none_cfg = k_cfg;
    none_cfg.local_user_roles = 0;
    tg_ws_decide_upgrade(NULL, &none_cfg, &r, &d);
    assert_int_equal(d.status, 0);
    assert_int_equal(d.info.roles, 0);
    assert_int_equal(d.info.auth, TG_GW_AUTH_NONE);
    /* root is an owner */
    g_cred.uid = 0;
    tg_ws_decide_upgrade(NULL, &k_cfg, &r, &d);
    assert_int_equal(d.info.roles, TG_GW_ROLE_ADMIN);
    /* a loopback peer the kernel cannot vouch for is not local: 401 when tokens are required */
    r.cred = NULL;
    tg_ws_decide_upgrade(NULL, &k_cfg, &r, &d);
    assert_int_equal(d.status, 401);
    r = req("/traced", "127.0.0.1");
    /* on a public bind a loopback peer may be a reverse proxy's: it is not local */
    struct tg_gw_ws_config pub_cfg = k_cfg;
    pub_cfg.bind_host = "0.0.0.0";
    r.host = "gw.example:8037";
    tg_ws_decide_upgrade(NULL, &pub_cfg, &r, &d);
    assert_int_equal(d.status, 401);
    r = req("/traced", "127.0.0.1");

    r.protocols = "tracegate, tracegate.token.good-token";
    tg_ws_decide_upgrade(NULL, &k_cfg, &r, &d);
    assert_int_equal(d.status, 0);
    assert_int_equal(d.info.auth, TG_GW_AUTH_TOKEN);
    assert_int_equal(d.info.roles, TG_GW_ROLE_RECORDER);
    assert_string_equal(d.info.principal, "token:alice");

    r.protocols = "tracegate, tracegate.token.bad-token";
    tg_ws_decide_upgrade(NULL, &k_cfg, &r, &d);
    assert_int_equal(d.status, 401); /* a wrong token fails even on loopback */

    r.protocols = "tracegate, tracegate.token.good-token";
    r.query_token = "other";
    tg_ws_decide_upgrade(NULL, &k_cfg, &r, &d);
    assert_int_equal(d.status, 400);

    /* non-loopback with an allowed Origin but no token: 401 when required */
    r = req("/traced", "192.0.2.7");
    r.origin = "https://ui.perfetto.dev";
    tg_ws_decide_upgrade(NULL, &k_cfg, &r, &d);
    assert_int_equal(d.status, 401);
    struct tg_gw_ws_config open_cfg = k_cfg;
    open_cfg.require_token = 0;
    tg_ws_decide_upgrade(NULL, &open_cfg, &r, &d);
    assert_int_equal(d.status, 0);
    assert_int_equal(d.info.auth, TG_GW_AUTH_NONE);
    assert_int_equal(d.info.roles, 0);
    assert_int_equal(d.info.loopback, 0);

    /* client certificate: cert_roles, default recorder */
    r = req("/producer", "192.0.2.7");
    r.tls = 1;
    r.cert_subject = "node-7";
    tg_ws_decide_upgrade(NULL, &k_cfg, &r, &d);
    assert_int_equal(d.status, 0);
    assert_int_equal(d.info.auth, TG_GW_AUTH_CERT);
    assert_int_equal(d.info.roles, TG_GW_ROLE_RECORDER);
    assert_int_equal(d.info.port, TG_GW_PORT_PRODUCER);
    assert_int_equal(d.info.transport, TG_GW_T_WSS);
    assert_string_equal(d.info.principal, "cert:node-7");
    struct tg_gw_ws_config cc = k_cfg;
    cc.cert_roles = TG_GW_ROLE_PRODUCER;
    tg_ws_decide_upgrade(NULL, &cc, &r, &d);
    assert_int_equal(d.info.roles, TG_GW_ROLE_PRODUCER);
}

static void test_route_node_and_health(void **state)
{
    (void)state;
    struct tg_ws_decision d;
    struct tg_ws_request r = req("/traced/board7", "127.0.0.1");
    tg_ws_decide_upgrade(NULL, &k_cfg, &r, &d);
    assert_int_equal(d.status, 0);
    assert_string_equal(d.info.node, "board7");
    assert_string_equal(d.info.peer, "ws(127.0.0.1:5555)");
    assert_string_equal(d.info.source, "127.0.0.1");
    r.path = "/metrics";
    tg_ws_decide_upgrade(NULL, &k_cfg, &r, &d);
    assert_int_equal(d.status, 404);
    r.path = "/traced";
    g_healthy = 0;
    tg_ws_decide_upgrade(NULL, &k_cfg, &r, &d);
    assert_int_equal(d.status, 503);
    g_healthy = 1;
    r = req("/traced", "::1");
    tg_ws_decide_upgrade(NULL, &k_cfg, &r, &d);
    assert_string_equal(d.info.peer, "ws([::1]:5555)");
    assert_int_equal(d.info.loopback, 1);
}

static void test_adb_routes(void **state)
{
    (void)state;
    char node[64];
    assert_int_equal(tg_ws_route_of("/adb", node, sizeof node), TG_WS_ROUTE_ADB);
    assert_string_equal(node, "");
    assert_int_equal(tg_ws_route_of("/adb/lab-phone.1", node, sizeof node), TG_WS_ROUTE_ADB);
    assert_string_equal(node, "lab-phone.1");
    assert_int_equal(tg_ws_route_of("/adb/", node, sizeof node), TG_WS_ROUTE_NOT_FOUND);
    assert_int_equal(tg_ws_route_of("/adb/..", node, sizeof node), TG_WS_ROUTE_NOT_FOUND);
    assert_int_equal(tg_ws_route_of("/adb/a/b", node, sizeof node), TG_WS_ROUTE_NOT_FOUND);
    assert_int_equal(tg_ws_route_of("/adbx", node, sizeof node), TG_WS_ROUTE_STATIC);

    /* on by default on a loopback bind, off on a public one unless turned on */
    struct tg_gw_ws_config c = k_cfg;
    assert_true(tg_ws_adb_enabled(&c));
    c.adb = TG_GW_WS_ADB_OFF;
    assert_false(tg_ws_adb_enabled(&c));
    c = k_cfg;
    c.bind_host = "0.0.0.0";
    assert_false(tg_ws_adb_enabled(&c));
    c.bind_host = "192.0.2.1";
    assert_false(tg_ws_adb_enabled(&c));
    c.adb = TG_GW_WS_ADB_ON;
    assert_true(tg_ws_adb_enabled(&c));
    c = k_cfg;
    c.bind_host = "localhost";
    assert_true(tg_ws_adb_enabled(&c));
    assert_int_equal(tg_ws_adb_roles(&k_cfg), TG_GW_ROLE_ADB | TG_GW_ROLE_ADMIN);
}

static void test_adb_decisions(void **state)
{
    (void)state;
    struct tg_ws_decision d;
    /* the local admin (the default local-roles), from the Perfetto UI's Origin */
    struct tg_ws_request r = req("/adb", "127.0.0.1");
    r.origin = "https://ui.perfetto.dev";
    tg_ws_decide_upgrade(NULL, &k_cfg, &r, &d);
    assert_int_equal(d.status, 0);
    assert_int_equal(d.route, TG_WS_ROUTE_ADB);
    assert_int_equal(d.info.roles, TG_GW_ROLE_ADMIN);
    /* the tracing service's health does not matter to /adb */
    g_healthy = 0;
    tg_ws_decide_upgrade(NULL, &k_cfg, &r, &d);
    assert_int_equal(d.status, 0);
    g_healthy = 1;
    /* the same Origin rule as /traced */
    r.origin = "https://evil.example";
    tg_ws_decide_upgrade(NULL, &k_cfg, &r, &d);
    assert_int_equal(d.status, 403);
    assert_null(d.label); /* counted as an Origin refusal */
    r.origin = "https://ui.perfetto.dev";
    /* another local user gets recorder,producer: not adb */
    g_cred.uid = 4242;
    tg_ws_decide_upgrade(NULL, &k_cfg, &r, &d);
    assert_int_equal(d.status, 403);
    assert_string_equal(d.label, "ws adb role");
    assert_non_null(strstr(d.reason, "adb role"));
    /* ... unless local-user-roles gives it adb */
    struct tg_gw_ws_config c = k_cfg;
    c.local_user_roles = TG_GW_ROLE_ADB;
    tg_ws_decide_upgrade(NULL, &c, &r, &d);
    assert_int_equal(d.status, 0);
    g_cred.uid = geteuid();
    /* a token with only the adb role, one without it, an unknown one */
    r.protocols = "tracegate, tracegate.token.adb-token";
    tg_ws_decide_upgrade(NULL, &k_cfg, &r, &d);
    assert_int_equal(d.status, 0);
    assert_string_equal(d.info.principal, "token:phones");
    r.protocols = "tracegate, tracegate.token.good-token";
    tg_ws_decide_upgrade(NULL, &k_cfg, &r, &d);
    assert_int_equal(d.status, 403);
    r.protocols = "tracegate, tracegate.token.bad-token";
    tg_ws_decide_upgrade(NULL, &k_cfg, &r, &d);
    assert_int_equal(d.status, 401);
    r.protocols = NULL;
    /* adb-roles = adb: admin no longer implies it */
    c = k_cfg;
    c.adb_roles = TG_GW_ROLE_ADB;
    tg_ws_decide_upgrade(NULL, &c, &r, &d);
    assert_int_equal(d.status, 403);
    r.protocols = "tracegate, tracegate.token.admin-token";
    tg_ws_decide_upgrade(NULL, &c, &r, &d);
    assert_int_equal(d.status, 403);
    tg_ws_decide_upgrade(NULL, &k_cfg, &r, &d);
    assert_int_equal(d.status, 0);
    r.protocols = NULL;
    /* no credentials at all: 401 (a byte pipe has no in-band authentication) */
    r.cred = NULL;
    c = k_cfg;
    c.require_token = 0;
    tg_ws_decide_upgrade(NULL, &c, &r, &d);
    assert_int_equal(d.status, 401);
    /* a client certificate: cert-roles (recorder by default: refused; adb: served) */
    r = req("/adb/lab1", "192.0.2.7");
    r.tls = 1;
    r.cert_subject = "laptop";
    r.host = "gw.example:8037";
    c = k_cfg;
    c.bind_host = "0.0.0.0";
    c.adb = TG_GW_WS_ADB_ON;
    c.http_hosts = (const char *const[]){"gw.example"};
    c.n_http_hosts = 1;
    tg_ws_decide_upgrade(NULL, &c, &r, &d);
    assert_int_equal(d.status, 403);
    c.cert_roles = TG_GW_ROLE_ADB;
    tg_ws_decide_upgrade(NULL, &c, &r, &d);
    assert_int_equal(d.status, 0);
    assert_string_equal(d.info.node, "lab1");
    /* a public bind without http-adb: the route does not exist */
    c.adb = TG_GW_WS_ADB_AUTO;
    tg_ws_decide_upgrade(NULL, &c, &r, &d);
    assert_int_equal(d.status, 404);
    assert_string_equal(d.label, "ws adb off");
}

static void test_host_rule(void **state)
{
    (void)state;
    static const char *const names[] = {"gw.example.test", "10.0.0.5", "[fd00::5]"};
    struct tg_gw_ws_config c = k_cfg;
    c.bind_host = "0.0.0.0";
    c.http_hosts = names;
    c.n_http_hosts = 3;
    assert_true(tg_ws_host_allowed("127.0.0.1", &c));
    assert_true(tg_ws_host_allowed("127.200.0.1:1", &c));
    assert_true(tg_ws_host_allowed("localhost:8037", &c));
    assert_true(tg_ws_host_allowed("[::1]:8037", &c));
    assert_true(tg_ws_host_allowed("GW.EXAMPLE.TEST:443", &c));
    assert_true(tg_ws_host_allowed("10.0.0.5:8037", &c));
    assert_true(tg_ws_host_allowed("[fd00::5]:8037", &c));
    assert_false(tg_ws_host_allowed("fd00::5", &c)); /* an IPv6 Host must be bracketed */
    assert_false(tg_ws_host_allowed("attacker.example", &c));
    assert_false(tg_ws_host_allowed("gw.example.test.attacker.example", &c));
    assert_false(tg_ws_host_allowed("x.gw.example.test", &c));
    assert_false(tg_ws_host_allowed("0.0.0.0:8037", &c));
    assert_false(tg_ws_host_allowed("[::1", &c));
    assert_false(tg_ws_host_allowed("[::1]x", &c));
    assert_false(tg_ws_host_allowed("", &c));
    assert_false(tg_ws_host_allowed(NULL, &c));
    /* a specific bind address counts as configured */
    c.bind_host = "192.0.2.1";
    assert_true(tg_ws_host_allowed("192.0.2.1:8037", &c));
    c.n_http_hosts = 0;
    assert_false(tg_ws_host_allowed("gw.example.test", &c));
}

static void test_bearer_and_status_access(void **state)
{
    (void)state;
    size_t n = 0;
    const char *t = tg_ws_bearer_token("Bearer abc", &n);
    assert_non_null(t);
    assert_int_equal(n, 3);
    assert_memory_equal(t, "abc", 3);
    t = tg_ws_bearer_token("  bEaReR \t x-Y_z  ", &n);
    assert_non_null(t);
    assert_int_equal(n, 5);
    assert_null(tg_ws_bearer_token("Bearer", &n));
    assert_null(tg_ws_bearer_token("Bearer ", &n));
    assert_null(tg_ws_bearer_token("Bearerabc", &n));
    assert_null(tg_ws_bearer_token("Basic abc", &n));
    assert_null(tg_ws_bearer_token("Bearer a b", &n));
    assert_null(tg_ws_bearer_token(NULL, &n));

    struct tg_gw_ws_config c = k_cfg; /* loopback bind: open */
    assert_false(tg_ws_status_needs_auth(&c));
    c.bind_host = "localhost";
    assert_false(tg_ws_status_needs_auth(&c));
    c.bind_host = "0.0.0.0";
    assert_true(tg_ws_status_needs_auth(&c));
    c.require_token = 0; /* --insecure without tokens */
    assert_false(tg_ws_status_needs_auth(&c));
    c.require_token = 1;

    struct tg_ws_http_decision d;
    struct tg_ws_http_request r = {.route = TG_WS_ROUTE_METRICS};
    tg_ws_decide_http(NULL, &c, &r, &d);
    assert_int_equal(d.status, 401);
    assert_false(d.auth_failure);
    r.authorization = "Bearer nope";
    tg_ws_decide_http(NULL, &c, &r, &d);
    assert_int_equal(d.status, 401);
    assert_true(d.auth_failure);
    r.authorization = "Bearer producer-token";
    tg_ws_decide_http(NULL, &c, &r, &d);
    assert_int_equal(d.status, 403);
    r.authorization = "Bearer good-token";
    tg_ws_decide_http(NULL, &c, &r, &d);
    assert_int_equal(d.status, 0);
    assert_string_equal(d.principal, "alice");
    /* a wrong token is not rescued by a certificate */
    r.authorization = "Bearer nope";
    r.cert_subject = "node-7";
    tg_ws_decide_http(NULL, &c, &r, &d);
    assert_int_equal(d.status, 401);
    r.authorization = NULL;
    tg_ws_decide_http(NULL, &c, &r, &d);
    assert_int_equal(d.status, 0); /* cert_roles default recorder */
    c.cert_roles = TG_GW_ROLE_PRODUCER;
    tg_ws_decide_http(NULL, &c, &r, &d);
    assert_int_equal(d.status, 403);
    /* other routes never need credentials */
    r.cert_subject = NULL;
    r.route = TG_WS_ROUTE_HEALTHZ;
    tg_ws_decide_http(NULL, &c, &r, &d);
    assert_int_equal(d.status, 0);
    r.route = TG_WS_ROUTE_STATIC;
    tg_ws_decide_http(NULL, &c, &r, &d);
    assert_int_equal(d.status, 0);
    r.route = TG_WS_ROUTE_STATUS;
    tg_ws_decide_http(NULL, &c, &r, &d);
    assert_int_equal(d.status, 401);
    c = k_cfg;
    c.protect_status = 1; /* asked for on a loopback bind */
    tg_ws_decide_http(NULL, &c, &r, &d);
    assert_int_equal(d.status, 401);
}

static void test_static_paths_and_types(void **state)
{
    (void)state;
    assert_true(tg_ws_static_path_ok("/"));
    assert_true(tg_ws_static_path_ok("/index.html"));
    assert_true(tg_ws_static_path_ok("/assets/app.js"));
    assert_true(tg_ws_static_path_ok("/dir/"));
    assert_false(tg_ws_static_path_ok("/../etc/passwd"));
    assert_false(tg_ws_static_path_ok("/a/../../b"));
    assert_false(tg_ws_static_path_ok("/.git/config"));
    assert_false(tg_ws_static_path_ok("/a/./b"));
    assert_false(tg_ws_static_path_ok("//etc/passwd"));
    assert_false(tg_ws_static_path_ok("/a\\..\\b"));
    assert_false(tg_ws_static_path_ok("/a\nb"));
    assert_false(tg_ws_static_path_ok("relative"));
    assert_string_equal(tg_ws_mime_type("/x/index.html"), "text/html; charset=utf-8");
    assert_string_equal(tg_ws_mime_type("a.MJS"), "text/javascript; charset=utf-8");
    assert_string_equal(tg_ws_mime_type("a.wasm"), "application/wasm");
    assert_string_equal(tg_ws_mime_type("noext"), "application/octet-stream");
    assert_string_equal(tg_ws_mime_type("/d.ir/noext"), "application/octet-stream");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_routes),
        cmocka_unit_test(test_loopback_and_host),
        cmocka_unit_test(test_protocol_header),
        cmocka_unit_test(test_origin),
        cmocka_unit_test(test_auth_and_roles),
        cmocka_unit_test(test_route_node_and_health),
        cmocka_unit_test(test_static_paths_and_types),
        cmocka_unit_test(test_host_rule),
        cmocka_unit_test(test_bearer_and_status_access),
        cmocka_unit_test(test_adb_routes),
        cmocka_unit_test(test_adb_decisions),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
