/* test_link_hostile.c: limits a gateway link keeps against a linked node that does not play by the
 * rules (docs/link-protocol.md §9). A real "hub" (link listener on loopback TCP) and a real dialer
 * ("edge") whose hub asks, with Open messages, for more channels than a link may carry: edge opens
 * at most LINK_MAX_CHANNELS and answers the rest with OpenFailed, as it refuses the channels a peer
 * opens itself. (The test plays the hub's side of the Open requests directly, as a hub without its
 * own limit would send them.) */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "fleet.h"
#include "gw_config.h"
#include "gw_core.h"
#include "link_int.h"
#include "tracegate/log.h"

#include "tg_test_util.h"

#define WAIT_MS 20000

static char g_dir[] = "/tmp/tg-test-linkhostile-XXXXXX";
static struct event_base *g_base;
static struct tg_gw_config g_hub_cfg, g_edge_cfg;
static struct tg_gw *g_hub_gw, *g_edge_gw;
static struct tg_fleet *g_hub;
static int g_port;
static int g_upstream_fd = -1; /* listens, never accepts: a consumer port that holds connections */

static struct tg_gw *new_gw(struct tg_gw_config *cfg, const char *upstream)
{
    char err[512];
    tg_gw_config_init(cfg);
    assert_int_equal(tg_gw_config_set(cfg, "upstream-consumer", upstream, err, sizeof err), 0);
    assert_int_equal(tg_gw_config_set(cfg, "no-http", NULL, err, sizeof err), 0);
    assert_int_equal(tg_gw_config_set(cfg, "upstream-probe-interval", "0", err, sizeof err), 0);
    if (tg_gw_config_validate(cfg, err, sizeof err) != 0)
        fail_msg("validate: %s", err);
    struct tg_gw *gw = tg_gw_new(g_base, cfg, NULL, err, sizeof err);
    if (!gw)
        fail_msg("tg_gw_new: %s", err);
    return gw;
}

static struct tg_link *link_up_to(struct tg_fleet *f, const char *name)
{
    struct tg_link *l = tg_fleet_link_by_name(f, name, NULL);
    return l && l->state == LINK_UP ? l : NULL;
}

static int setup(void **state)
{
    (void)state;
    tg_log_set_level(TG_LOG_WARN);
    assert_non_null(mkdtemp(g_dir));
    g_base = event_base_new();
    char err[512], up[300];
    snprintf(up, sizeof up, "%s/upstream.sock", g_dir);
    g_upstream_fd = socket(AF_UNIX, SOCK_STREAM, 0);
    assert_true(g_upstream_fd >= 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    assert_true(strlen(up) < sizeof sa.sun_path);
    memcpy(sa.sun_path, up, strlen(up) + 1);
    assert_int_equal(bind(g_upstream_fd, (struct sockaddr *)&sa, sizeof sa), 0);
    assert_int_equal(listen(g_upstream_fd, 4096), 0);
    g_hub_gw = new_gw(&g_hub_cfg, up);
    g_edge_gw = new_gw(&g_edge_cfg, up);

    char listen_url[64] = "tcp://127.0.0.1:0";
    char *listens[1] = {listen_url};
    struct tg_fleet_config hc;
    memset(&hc, 0, sizeof hc);
    hc.node_name = "hub";
    hc.listen_links = listens;
    hc.n_listen_links = 1;
    hc.resume_window_ms = (uint32_t)tg_test_ms(600000);
    hc.ping_interval_ms = (uint32_t)tg_test_ms(600000);
    tg_log_set_level(TG_LOG_INFO);
    assert_int_equal(tg_test_stderr_begin(), 0);
    g_hub = tg_fleet_new(g_base, g_hub_gw, &hc, err, sizeof err);
    char *log = tg_test_stderr_end();
    tg_log_set_level(TG_LOG_WARN);
    if (!g_hub)
        fail_msg("hub: %s", err);
    assert_non_null(log);
    const char *at = strstr(log, "listening for links: tcp://127.0.0.1:");
    assert_non_null(at);
    g_port = atoi(at + strlen("listening for links: tcp://127.0.0.1:"));
    free(log);
    assert_true(g_port > 0);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    tg_fleet_free(g_hub);
    tg_test_run_until(g_base, NULL, NULL, 50);
    tg_gw_free(g_edge_gw);
    tg_gw_free(g_hub_gw);
    tg_gw_config_free(&g_edge_cfg);
    tg_gw_config_free(&g_hub_cfg);
    event_base_free(g_base);
    close(g_upstream_fd);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    return system(cmd) == 0 ? 0 : -1;
}

/* ------------------------------------------------------------ tests */

struct opens {
    struct tg_fleet *edge;
    size_t asked;
};

static int edge_up(void *arg)
{
    struct opens *o = arg;
    return link_up_to(o->edge, "hub") && link_up_to(g_hub, "edge");
}

/* Every channel the hub asked for was opened by edge (bound) or refused (OpenFailed aborts it). */
static int opens_settled(void *arg)
{
    (void)arg;
    struct tg_link *l = link_up_to(g_hub, "edge");
    if (!l)
        return 0;
    for (struct link_channel *ch = l->channels; ch; ch = ch->next)
        if (!ch->ever_bound)
            return 0;
    return 1;
}

static void test_open_requests_limited(void **state)
{
    (void)state;
    char err[512], peer[64];
    char *peers[1] = {peer};
    snprintf(peer, sizeof peer, "tcp://127.0.0.1:%d", g_port);
    struct tg_fleet_config ec;
    memset(&ec, 0, sizeof ec);
    ec.node_name = "edge";
    ec.peers = peers;
    ec.n_peers = 1;
    ec.resume_window_ms = (uint32_t)tg_test_ms(600000);
    ec.ping_interval_ms = (uint32_t)tg_test_ms(600000);
    struct opens o = {NULL, 0};
    o.edge = tg_fleet_new(g_base, g_edge_gw, &ec, err, sizeof err);
    if (!o.edge)
        fail_msg("edge: %s", err);
    assert_true(tg_test_run_until(g_base, edge_up, &o, WAIT_MS));
    struct tg_link *hl = link_up_to(g_hub, "edge");
    /* the hub asks for 40 channels more than a link may carry: each a channel of its own (its
     * local end a socketpair the test holds), as a hub without that limit would */
    enum { ASK = LINK_MAX_CHANNELS + 40 };
    int fds[ASK];
    tg_log_set_level(TG_LOG_ERROR); /* 40 refusals, each logged on both sides */
    for (int i = 0; i < ASK; i++) {
        struct link_channel *ch = tg_link_channel_new(hl, 0, "edge", LINK_KIND_CONSUMER, "uid:4242", 0, &fds[i], NULL);
        assert_non_null(ch);
        assert_int_equal(tg_link_send_open(hl, ch), 0);
    }
    assert_true(tg_test_run_until(g_base, opens_settled, NULL, WAIT_MS));
    tg_log_set_level(TG_LOG_WARN);
    struct tg_link *el = link_up_to(o.edge, "hub");
    assert_non_null(el);
    if (el->n_channels > LINK_MAX_CHANNELS)
        fail_msg("edge opened %zu channels for its hub's Open requests (at most %u)", el->n_channels,
                 LINK_MAX_CHANNELS);
    assert_int_equal(el->n_channels, LINK_MAX_CHANNELS);
    assert_int_equal(link_up_to(g_hub, "edge")->n_channels, LINK_MAX_CHANNELS);
    tg_fleet_free(o.edge);
    tg_test_run_until(g_base, NULL, NULL, 50);
    for (int i = 0; i < ASK; i++)
        close(fds[i]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_open_requests_limited),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
