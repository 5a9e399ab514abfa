/* test_link_util.c: gateways, linked nodes and a linked pair for the gateway-link unit tests (see
 * test_link_util.h). */
#include "test_link_util.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tracegate/log.h"
#include "tracegate/ipc_host.h"

#include "tg_test_util.h"

#define LISTENING "listening for links: tcp://127.0.0.1:"

struct tg_gw *tl_gw_new(struct event_base *base, struct tg_gw_config *cfg, const char *upstream,
                        const char *const *extra)
{
    char err[512];
    tg_gw_config_init(cfg);
    assert_int_equal(tg_gw_config_set(cfg, "upstream-consumer", upstream, err, sizeof err), 0);
    assert_int_equal(tg_gw_config_set(cfg, "no-http", NULL, err, sizeof err), 0);
    assert_int_equal(tg_gw_config_set(cfg, "upstream-probe-interval", "0", err, sizeof err), 0);
    for (size_t i = 0; extra && extra[i]; i += 2)
        if (tg_gw_config_set(cfg, extra[i], extra[i + 1], err, sizeof err) != 0)
            fail_msg("%s: %s", extra[i], err);
    if (tg_gw_config_validate(cfg, err, sizeof err) != 0)
        fail_msg("validate: %s", err);
    struct tg_gw *gw = tg_gw_new(base, cfg, NULL, err, sizeof err);
    if (!gw)
        fail_msg("tg_gw_new: %s", err);
    return gw;
}

uint32_t tl_quiet_ms(void) { return (uint32_t)tg_test_ms(600000); }

/* Node `name` with the quiet timers and no link yet. */
static void node_config(struct tg_fleet_config *c, const char *name)
{
    memset(c, 0, sizeof *c);
    c->node_name = name;
    c->resume_window_ms = tl_quiet_ms();
    c->ping_interval_ms = tl_quiet_ms();
}

struct tg_fleet *tl_hub_new(struct event_base *base, struct tg_gw *gw, const char *name, int *port)
{
    return tl_hub_new_timed(base, gw, name, port, 0);
}

struct tg_fleet *tl_hub_new_timed(struct event_base *base, struct tg_gw *gw, const char *name, int *port,
                                  uint32_t handshake_timeout_ms)
{
    char err[512], listen[64] = "tcp://127.0.0.1:0";
    char *listens[1] = {listen};
    struct tg_fleet_config hc;
    node_config(&hc, name);
    hc.handshake_timeout_ms = handshake_timeout_ms;
    hc.listen_links = listens;
    hc.n_listen_links = 1;
    /* the port the kernel chose, from the node's log line */
    enum tg_log_level level = tg_log_get_level();
    tg_log_set_level(TG_LOG_INFO);
    assert_int_equal(tg_test_stderr_begin(), 0);
    struct tg_fleet *f = tg_fleet_new(base, gw, &hc, err, sizeof err);
    char *log = tg_test_stderr_end();
    tg_log_set_level(level);
    if (!f)
        fail_msg("%s: %s", name, err);
    assert_non_null(log);
    const char *at = strstr(log, LISTENING);
    assert_non_null(at);
    *port = atoi(at + strlen(LISTENING));
    free(log);
    assert_true(*port > 0);
    return f;
}

struct tg_fleet *tl_dialer_new(struct event_base *base, struct tg_gw *gw, const char *name, int port)
{
    char err[512], peer[64];
    char *peers[1] = {peer};
    snprintf(peer, sizeof peer, "tcp://127.0.0.1:%d", port);
    struct tg_fleet_config ec;
    node_config(&ec, name);
    ec.peers = peers;
    ec.n_peers = 1;
    struct tg_fleet *f = tg_fleet_new(base, gw, &ec, err, sizeof err);
    if (!f)
        fail_msg("%s: %s", name, err);
    return f;
}

struct tg_link *tl_link_up(struct tg_fleet *f, const char *name)
{
    struct tg_link *l = tg_fleet_link_by_name(f, name, NULL);
    return l && l->state == LINK_UP ? l : NULL;
}

static int both_up(void *arg)
{
    struct tl_pair *p = arg;
    return tl_link_up(p->edge, "hub") && tl_link_up(p->hub, "edge");
}

void tl_pair_up(struct tl_pair *p, const char *tag, const struct tg_ipc_service_def *svc,
                const char *const *gw_opts, uint32_t hello_ms, int wait_ms)
{
    memset(p, 0, sizeof *p);
    snprintf(p->dir, sizeof p->dir, "/tmp/tg-test-%s-XXXXXX", tag);
    assert_non_null(mkdtemp(p->dir));
    p->base = event_base_new();
    assert_non_null(p->base);
    char err[512], up[300], none[300];
    snprintf(up, sizeof up, "%s/upstream.sock", p->dir);
    snprintf(none, sizeof none, "%s/none.sock", p->dir);
    p->host = tg_ipc_host_new(p->base, NULL);
    assert_non_null(p->host);
    assert_int_equal(tg_ipc_host_add_service(p->host, svc, NULL), 1);
    assert_int_equal(tg_ipc_host_listen(p->host, up, 0600, err, sizeof err), 0);
    p->hub_gw = tl_gw_new(p->base, &p->hub_cfg, up, gw_opts);
    p->edge_gw = tl_gw_new(p->base, &p->edge_cfg, none, gw_opts);
    p->hub = tl_hub_new_timed(p->base, p->hub_gw, "hub", &p->port, hello_ms);
    p->edge = tl_dialer_new(p->base, p->edge_gw, "edge", p->port);
    assert_true(tg_test_run_until(p->base, both_up, p, wait_ms));
}

int tl_pair_down(struct tl_pair *p)
{
    tg_fleet_free(p->edge);
    tg_fleet_free(p->hub);
    tg_test_run_until(p->base, NULL, NULL, 50); /* closes settle */
    tg_gw_free(p->edge_gw);
    tg_gw_free(p->hub_gw);
    tg_ipc_host_free(p->host);
    tg_gw_config_free(&p->edge_cfg);
    tg_gw_config_free(&p->hub_cfg);
    event_base_free(p->base);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", p->dir);
    return system(cmd) == 0 ? 0 : -1;
}
