/* test_fanout_hostile.c: a federated session (gateway/fleet_fanout.c) whose node answers
 * QueryServiceState with has_more parts without end: the fan-out, which merges the nodes' answers
 * into one, fails that node once the merged answer passes its limit and answers the client,
 * instead of collecting whatever the node streams. The node is a raw node (--node NAME=ADDR)
 * served by a fake ConsumerPort in this process. */
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
#include "fleet.h"
#include "fleet_fanout.h"
#include "gw_config.h"
#include "gw_core.h"
#include "link_int.h"
#include "tracegate/conn.h"
#include "tracegate/ipc_client.h"
#include "tracegate/ipc_host.h"
#include "tracegate/log.h"

#include "tg_test_util.h"

#define PART (100u << 10)
#define FLOOD (40u << 20) /* past the fan-out's 32 MiB */

static size_t g_sent;

/* QueryServiceState: FLOOD bytes of has_more parts, never the last one */
static void m_query(tg_ipc_call *call, const ProtobufCMessage *req, void *svc, void *ps)
{
    (void)req, (void)svc, (void)ps;
    uint8_t *part = calloc(1, PART);
    assert_non_null(part);
    for (g_sent = 0; g_sent < FLOOD; g_sent += PART)
        tg_ipc_call_reply_bytes(call, part, PART, 1, -1);
    free(part);
}

static void m_reject(tg_ipc_call *call, const ProtobufCMessage *req, void *svc, void *ps)
{
    (void)req, (void)svc, (void)ps;
    tg_ipc_call_reject(call);
}

static const struct tg_ipc_method k_methods[] = {
    {"EnableTracing", &perfetto__protos__enable_tracing_request__descriptor, m_reject},
    {"QueryServiceState", &perfetto__protos__query_service_state_request__descriptor, m_query},
};

struct client {
    tg_ipc_service_proxy *port;
    int bound, done, success;
};

static void on_bound(tg_ipc_client *cli, tg_ipc_service_proxy *proxy, void *arg)
{
    (void)cli;
    struct client *c = arg;
    c->port = proxy;
    c->bound = 1;
}

static void on_reply(tg_ipc_client *cli, int success, int has_more, const uint8_t *reply, size_t len, void *arg)
{
    (void)cli, (void)reply, (void)len;
    struct client *c = arg;
    if (!has_more) {
        c->done = 1;
        c->success = success;
    }
}

static int bound(void *arg) { return ((struct client *)arg)->bound; }
static int answered(void *arg) { return ((struct client *)arg)->done; }

static void test_endless_answer_from_a_node(void **state)
{
    (void)state;
    tg_log_set_level(TG_LOG_ERROR);
    char dir[] = "/tmp/tg-test-fanout-XXXXXX", sock[96], raw[128], err[512];
    assert_non_null(mkdtemp(dir));
    snprintf(sock, sizeof sock, "%s/evil.sock", dir);
    struct event_base *base = event_base_new();

    /* the node: a ConsumerPort that streams its QueryServiceState answer without end */
    struct tg_ipc_host_opts ho;
    memset(&ho, 0, sizeof ho);
    tg_conn_opts_default(&ho.conn);
    ho.conn.out_hard_limit = 2 * FLOOD;
    tg_ipc_host *host = tg_ipc_host_new(base, &ho);
    assert_non_null(host);
    static const struct tg_ipc_service_def def = {.name = "ConsumerPort", .methods = k_methods, .n_methods = 2};
    assert_true(tg_ipc_host_add_service(host, &def, NULL) != 0);
    assert_int_equal(tg_ipc_host_listen(host, sock, 0600, err, sizeof err), 0);

    /* the hub: a gateway whose fleet names that socket as node "evil" */
    struct tg_gw_config cfg;
    tg_gw_config_init(&cfg);
    assert_int_equal(tg_gw_config_set(&cfg, "upstream-consumer", sock, err, sizeof err), 0);
    assert_int_equal(tg_gw_config_set(&cfg, "no-http", NULL, err, sizeof err), 0);
    assert_int_equal(tg_gw_config_set(&cfg, "upstream-probe-interval", "0", err, sizeof err), 0);
    if (tg_gw_config_validate(&cfg, err, sizeof err) != 0)
        fail_msg("validate: %s", err);
    struct tg_gw *gw = tg_gw_new(base, &cfg, NULL, err, sizeof err);
    if (!gw)
        fail_msg("tg_gw_new: %s", err);
    snprintf(raw, sizeof raw, "evil=unix:%s", sock);
    char *raws[1] = {raw};
    struct tg_fleet_config fc;
    memset(&fc, 0, sizeof fc);
    fc.node_name = "hub";
    fc.raw_nodes = raws;
    fc.n_raw_nodes = 1;
    fc.resume_window_ms = (uint32_t)tg_test_ms(600000);
    fc.ping_interval_ms = (uint32_t)tg_test_ms(600000);
    struct tg_fleet *fleet = tg_fleet_new(base, gw, &fc, err, sizeof err);
    if (!fleet)
        fail_msg("tg_fleet_new: %s", err);

    /* a client of a federated session over "evil" asks QueryServiceState */
    struct tg_gw_client_info who;
    memset(&who, 0, sizeof who);
    snprintf(who.principal, sizeof who.principal, "uid:0");
    who.roles = TG_GW_ROLE_ADMIN;
    who.has_uid = 1;
    who.pid = -1;
    who.loopback = 1;
    int fd = tg_fanout_connect(tg_fleet_fanout(fleet), "evil", 0, &who, err, sizeof err);
    if (fd < 0)
        fail_msg("tg_fanout_connect: %s", err);
    tg_conn *conn = tg_conn_new_fd(base, fd, NULL, NULL, NULL);
    assert_non_null(conn);
    tg_ipc_client *cli = tg_ipc_client_new(base, conn, NULL, NULL);
    assert_non_null(cli);
    struct client c;
    memset(&c, 0, sizeof c);
    assert_int_equal(tg_ipc_client_bind(cli, "ConsumerPort", on_bound, &c), 0);
    assert_true(tg_test_run_until(base, bound, &c, 20000));
    assert_non_null(c.port);
    assert_true(tg_ipc_client_invoke_bytes(cli, c.port, "QueryServiceState", NULL, 0, -1, on_reply, &c) != 0);
    /* the node never finishes its answer: the fan-out must, once the merge is over its limit */
    assert_true(tg_test_run_until(base, answered, &c, 30000));
    assert_true(g_sent >= FLOOD);
    assert_false(c.success); /* the one node failed: nobody answered */

    tg_ipc_client_free(cli);
    tg_fleet_free(fleet);
    tg_test_run_until(base, NULL, NULL, 50);
    tg_gw_free(gw);
    tg_gw_config_free(&cfg);
    tg_ipc_host_free(host);
    event_base_free(base);
    unlink(sock);
    rmdir(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_endless_answer_from_a_node),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
