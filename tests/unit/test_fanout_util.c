/* test_fanout_util.c: a fake node, a hub and a federated client for the fan-out tests (see
 * test_fanout_util.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fleet_fanout.h"
#include "link_int.h"
#include "test_fanout_util.h"
#include "tg_test_util.h"
#include "tracegate/conn.h"

static void on_bound(tg_ipc_client *cli, tg_ipc_service_proxy *proxy, void *arg)
{
    (void)cli;
    *(tg_ipc_service_proxy **)arg = proxy;
}

static int bound(void *arg) { return *(tg_ipc_service_proxy **)arg != NULL; }

tg_ipc_service_proxy *fo_world_up(struct fo_world *w, const char *tag, const struct tg_ipc_service_def *def,
                                  size_t out_hard_limit, const char *const *nodes, size_t n, const char *target,
                                  const struct tg_ipc_client_cbs *cbs, void *cbs_arg)
{
    char err[512];
    memset(w, 0, sizeof *w);
    snprintf(w->dir, sizeof w->dir, "/tmp/tg-test-%s-XXXXXX", tag);
    assert_non_null(mkdtemp(w->dir));
    snprintf(w->sock, sizeof w->sock, "%s/node.sock", w->dir);
    w->base = event_base_new();
    assert_non_null(w->base);

    /* the node(s): the test's fake ConsumerPort */
    struct tg_ipc_host_opts ho;
    memset(&ho, 0, sizeof ho);
    tg_conn_opts_default(&ho.conn);
    if (out_hard_limit)
        ho.conn.out_hard_limit = out_hard_limit;
    w->host = tg_ipc_host_new(w->base, &ho);
    assert_non_null(w->host);
    assert_true(tg_ipc_host_add_service(w->host, def, NULL) != 0);
    assert_int_equal(tg_ipc_host_listen(w->host, w->sock, 0600, err, sizeof err), 0);

    /* the hub: a gateway whose fleet names that socket as each node */
    tg_gw_config_init(&w->cfg);
    assert_int_equal(tg_gw_config_set(&w->cfg, "upstream-consumer", w->sock, err, sizeof err), 0);
    assert_int_equal(tg_gw_config_set(&w->cfg, "no-http", NULL, err, sizeof err), 0);
    assert_int_equal(tg_gw_config_set(&w->cfg, "upstream-probe-interval", "0", err, sizeof err), 0);
    if (tg_gw_config_validate(&w->cfg, err, sizeof err) != 0)
        fail_msg("validate: %s", err);
    w->gw = tg_gw_new(w->base, &w->cfg, NULL, err, sizeof err);
    if (!w->gw)
        fail_msg("tg_gw_new: %s", err);
    char raw[8][192];
    char *raws[8];
    assert_true(n >= 1 && n <= 8);
    for (size_t i = 0; i < n; i++) {
        snprintf(raw[i], sizeof raw[i], "%s=unix:%s", nodes[i], w->sock);
        raws[i] = raw[i];
    }
    struct tg_fleet_config fc;
    memset(&fc, 0, sizeof fc);
    fc.node_name = "hub";
    fc.raw_nodes = raws;
    fc.n_raw_nodes = n;
    fc.resume_window_ms = (uint32_t)tg_test_ms(600000);
    fc.ping_interval_ms = (uint32_t)tg_test_ms(600000);
    w->fleet = tg_fleet_new(w->base, w->gw, &fc, err, sizeof err);
    if (!w->fleet)
        fail_msg("tg_fleet_new: %s", err);

    /* a client of the federated session, as root on loopback, bound to its ConsumerPort */
    struct tg_gw_client_info who;
    memset(&who, 0, sizeof who);
    snprintf(who.principal, sizeof who.principal, "uid:0");
    who.roles = TG_GW_ROLE_ADMIN;
    who.has_uid = 1;
    who.pid = -1;
    who.loopback = 1;
    int fd = tg_fanout_connect(tg_fleet_fanout(w->fleet), target, 0, &who, err, sizeof err);
    if (fd < 0)
        fail_msg("tg_fanout_connect: %s", err);
    tg_conn *conn = tg_conn_new_fd(w->base, fd, NULL, NULL, NULL); /* the default 128 KiB frame limit */
    assert_non_null(conn);
    w->cli = tg_ipc_client_new(w->base, conn, cbs, cbs_arg);
    assert_non_null(w->cli);
    tg_ipc_service_proxy *port = NULL;
    assert_int_equal(tg_ipc_client_bind(w->cli, "ConsumerPort", on_bound, &port), 0);
    assert_true(tg_test_run_until(w->base, bound, &port, 20000));
    return port;
}

void fo_world_down(struct fo_world *w)
{
    if (w->cli)
        tg_ipc_client_free(w->cli);
    tg_fleet_free(w->fleet);
    tg_test_run_until(w->base, NULL, NULL, 50);
    tg_gw_free(w->gw);
    tg_gw_config_free(&w->cfg);
    tg_ipc_host_free(w->host);
    event_base_free(w->base);
    unlink(w->sock);
    rmdir(w->dir);
}
