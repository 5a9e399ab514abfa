/* test_link_hostile.c: limits a gateway link keeps against a linked node that does not play by the
 * rules (docs/link-protocol.md §9). A real "hub" (link listener on loopback TCP) faces:
 *
 * - a raw HTTP/2 dialer ("evil", nghttp2 in the test) that links, then floods ClockSync PINGs on
 *   the control stream while never opening its own receive window: the hub answers each PING, and
 *   those answers must not pile up without bound. The hub stops reading the control stream once
 *   LINK_CTL_TX_HIGH is owed, and when evil reads again every PING gets its REPLY, none lost;
 *   the PINGs do not make the hub rebuild its /api/status snapshot once each either.
 * - a real dialer ("edge") whose hub asks, with Open messages, for more channels than a link may
 *   carry: edge opens at most LINK_MAX_CHANNELS and answers the rest with OpenFailed, as it
 *   refuses the channels a peer opens itself. (The test plays the hub's side of the Open requests
 *   directly, as a hub without its own limit would send them.)
 * - channels that claim to have crossed more links than LINK_MAX_HOPS (a routing loop between nodes
 *   whose node lists disagree) are refused with 508, and each node a channel passes counts one
 *   hop more, over a stream it opens (tracegate-hops) and over an Open request alike;
 * - a stream whose header list is over the 16 KiB the hub advertises is reset (nghttp2 itself
 *   only advertises the limit), and the link goes on;
 * - channels whose principal header names another node ("node:trusted-a/uid:0") get that node's
 *   machine only when the link's peer announces reaching it and no link of the hub's own speaks
 *   for it; any other claim is the peer's own machine. */
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
#include <nghttp2/nghttp2.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "fleet.h"
#include "gw_config.h"
#include "gw_bridge.h"
#include "gw_core.h"
#include "gw_identity.h"
#include "gw_metrics.h"
#include "link_int.h"
#include "link_wire.h"
#include "tracegate/clock.h"
#include "tracegate/ipc_host.h"
#include "tracegate/log.h"
#include "tracegate_link.pb-c.h"

#include "test_link_util.h"
#include "tg_test_util.h"

#define WAIT_MS 20000
#define N_PINGS 60000

static char g_dir[] = "/tmp/tg-test-linkhostile-XXXXXX";
static struct event_base *g_base;
static struct tg_gw_config g_hub_cfg, g_edge_cfg;
static struct tg_gw *g_hub_gw, *g_edge_gw;
static struct tg_fleet *g_hub;
static int g_port;
static int g_upstream_fd = -1; /* listens, never accepts: a consumer port that holds connections */

static int setup(void **state)
{
    (void)state;
    tg_log_set_level(TG_LOG_WARN);
    assert_non_null(mkdtemp(g_dir));
    g_base = event_base_new();
    char up[300];
    snprintf(up, sizeof up, "%s/upstream.sock", g_dir);
    g_upstream_fd = socket(AF_UNIX, SOCK_STREAM, 0);
    assert_true(g_upstream_fd >= 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    assert_true(strlen(up) < sizeof sa.sun_path);
    memcpy(sa.sun_path, up, strlen(up) + 1);
    assert_int_equal(bind(g_upstream_fd, (struct sockaddr *)&sa, sizeof sa), 0);
    assert_int_equal(listen(g_upstream_fd, 4096), 0);
    g_hub_gw = tl_gw_new(g_base, &g_hub_cfg, up, NULL);
    g_edge_gw = tl_gw_new(g_base, &g_edge_cfg, up, NULL);
    g_hub = tl_hub_new(g_base, g_hub_gw, "hub", &g_port);
    return 0;
}

/* ------------------------------------------------------------ evil: a raw HTTP/2 dialer */

struct evil {
    struct bufferevent *bev;
    nghttp2_session *h2;
    int connect_ok, status, closed;
    int32_t sid;
    int st[32];           /* :status of the other streams it opened, by stream id / 2 */
    uint32_t reset[32];   /* 1 + the error code they were closed with, by stream id / 2 */
    struct evbuffer *tx;  /* control stream bytes still to send */
    struct evbuffer *rx;  /* control stream bytes received */
    int reading;          /* gives received bytes back to the windows */
    size_t replies;       /* ClockSync REPLY messages received */
};

static void evil_flush(struct evil *e)
{
    for (;;) {
        const uint8_t *d;
        ssize_t n = nghttp2_session_mem_send(e->h2, &d);
        if (n <= 0)
            break;
        bufferevent_write(e->bev, d, (size_t)n);
    }
}

static void evil_parse(struct evil *e)
{
    for (;;) {
        size_t have = evbuffer_get_length(e->rx);
        const uint8_t *msg;
        size_t mlen;
        long n = have ? tg_link_ctl_parse(evbuffer_pullup(e->rx, -1), have, &msg, &mlen) : 0;
        assert_true(n >= 0);
        if (n == 0)
            return;
        Tracegate__Link__Control *m = tracegate__link__control__unpack(NULL, mlen, msg);
        assert_non_null(m);
        if (m->msg_case == TRACEGATE__LINK__CONTROL__MSG_CLOCK_SYNC && m->clock_sync->has_phase &&
            m->clock_sync->phase == TRACEGATE__LINK__CLOCK_SYNC__PHASE__REPLY)
            e->replies++;
        tracegate__link__control__free_unpacked(m, NULL);
        evbuffer_drain(e->rx, (size_t)n);
    }
}

static int evil_on_frame(nghttp2_session *s, const nghttp2_frame *f, void *user)
{
    struct evil *e = user;
    if (f->hd.type == NGHTTP2_SETTINGS && !(f->hd.flags & NGHTTP2_FLAG_ACK) &&
        nghttp2_session_get_remote_settings(s, NGHTTP2_SETTINGS_ENABLE_CONNECT_PROTOCOL) == 1)
        e->connect_ok = 1;
    return 0;
}

static int evil_on_header(nghttp2_session *s, const nghttp2_frame *f, const uint8_t *name, size_t nl,
                          const uint8_t *v, size_t vl, uint8_t flags, void *user)
{
    (void)s;
    (void)flags;
    struct evil *e = user;
    if (nl == 7 && !memcmp(name, ":status", 7) && vl == 3) {
        int st = (v[0] - '0') * 100 + (v[1] - '0') * 10 + (v[2] - '0');
        if (f->hd.stream_id == e->sid)
            e->status = st;
        else if (f->hd.stream_id / 2 < 32)
            e->st[f->hd.stream_id / 2] = st;
    }
    return 0;
}

static int evil_on_close(nghttp2_session *s, int32_t sid, uint32_t error_code, void *user)
{
    (void)s;
    struct evil *e = user;
    if (sid != e->sid && sid / 2 < 32)
        e->reset[sid / 2] = 1 + error_code;
    return 0;
}

static int evil_on_data(nghttp2_session *s, uint8_t flags, int32_t sid, const uint8_t *data, size_t len, void *user)
{
    (void)s;
    (void)flags;
    struct evil *e = user;
    if (sid == e->sid)
        evbuffer_add(e->rx, data, len);
    if (e->reading)
        nghttp2_session_consume(s, sid, len);
    return 0;
}

static ssize_t evil_read(nghttp2_session *s, int32_t sid, uint8_t *buf, size_t len, uint32_t *flags,
                         nghttp2_data_source *src, void *user)
{
    (void)s;
    (void)sid;
    (void)flags;
    (void)src;
    struct evil *e = user;
    size_t n = evbuffer_remove(e->tx, buf, len);
    return n ? (ssize_t)n : NGHTTP2_ERR_DEFERRED;
}

static void evil_read_cb(struct bufferevent *bev, void *arg)
{
    struct evil *e = arg;
    struct evbuffer *in = bufferevent_get_input(bev);
    size_t n = evbuffer_get_length(in);
    ssize_t r = nghttp2_session_mem_recv(e->h2, evbuffer_pullup(in, -1), n);
    assert_true(r == (ssize_t)n);
    evbuffer_drain(in, n);
    evil_flush(e);
}

static void evil_write_cb(struct bufferevent *bev, void *arg)
{
    (void)bev;
    evil_flush(arg);
}

static void evil_event_cb(struct bufferevent *bev, short what, void *arg)
{
    (void)bev;
    struct evil *e = arg;
    if (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR))
        e->closed = 1;
}

static int evil_can_connect(void *arg) { return ((struct evil *)arg)->connect_ok; }
static int evil_answered(void *arg) { return ((struct evil *)arg)->status != 0; }

static void evil_free(struct evil *e)
{
    if (e->bev)
        bufferevent_free(e->bev);
    if (e->h2)
        nghttp2_session_del(e->h2);
    if (e->tx)
        evbuffer_free(e->tx);
    if (e->rx)
        evbuffer_free(e->rx);
    memset(e, 0, sizeof *e);
}

/* Connects to the hub and links as node `name` (the hub trusts our uid on loopback). Its own
 * windows stay at HTTP/2's 64 KiB and are never opened again while e->reading is 0. */
static void evil_link(struct evil *e, const char *name)
{
    evil_free(e); /* what a failed test before left (zeroed otherwise) */
    e->tx = evbuffer_new();
    e->rx = evbuffer_new();
    e->bev = bufferevent_socket_new(g_base, -1, BEV_OPT_CLOSE_ON_FREE);
    assert_non_null(e->bev);
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons((uint16_t)g_port)};
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bufferevent_setcb(e->bev, evil_read_cb, evil_write_cb, evil_event_cb, e);
    bufferevent_enable(e->bev, EV_READ | EV_WRITE);
    assert_int_equal(bufferevent_socket_connect(e->bev, (struct sockaddr *)&sin, sizeof sin), 0);
    nghttp2_session_callbacks *cb;
    assert_int_equal(nghttp2_session_callbacks_new(&cb), 0);
    nghttp2_session_callbacks_set_on_frame_recv_callback(cb, evil_on_frame);
    nghttp2_session_callbacks_set_on_header_callback(cb, evil_on_header);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, evil_on_data);
    nghttp2_session_callbacks_set_on_stream_close_callback(cb, evil_on_close);
    nghttp2_option *opt;
    nghttp2_option_new(&opt);
    nghttp2_option_set_no_auto_window_update(opt, 1);
    assert_int_equal(nghttp2_session_client_new2(&e->h2, cb, e, opt), 0);
    nghttp2_option_del(opt);
    nghttp2_session_callbacks_del(cb);
    nghttp2_submit_settings(e->h2, NGHTTP2_FLAG_NONE, NULL, 0);
    evil_flush(e);
    assert_true(tg_test_run_until(g_base, evil_can_connect, e, WAIT_MS));
    char authority[32];
    snprintf(authority, sizeof authority, "127.0.0.1:%d", g_port);
    nghttp2_nv nv[] = {
#define NV(k, v) {(uint8_t *)(k), (uint8_t *)(v), sizeof(k) - 1, strlen(v), NGHTTP2_NV_FLAG_NONE}
        NV(":method", "CONNECT"), NV(":protocol", "tracegate-link"), NV(":scheme", "http"), NV(":path", "/link"),
        NV(":authority", authority), NV("tracegate-node", name),
#undef NV
    };
    nghttp2_data_provider prd = {.read_callback = evil_read};
    e->sid = nghttp2_submit_request(e->h2, NULL, nv, sizeof nv / sizeof nv[0], &prd, NULL);
    assert_true(e->sid > 0);
    evil_flush(e);
    assert_true(tg_test_run_until(g_base, evil_answered, e, WAIT_MS));
    assert_int_equal(e->status, 200);
}


/* (static: a failed assertion leaves it to teardown, with its callbacks still pointing at it) */
static struct evil g_evil;

struct flood {
    struct evil *e;
    size_t sent; /* control bytes queued */
};

/* Everything evil queued has reached the hub's control stream. */
static int hub_got_all(void *arg)
{
    struct flood *fl = arg;
    struct tg_link *l = tg_fleet_link_by_name(g_hub, "evil", NULL);
    return fl->e->closed || (l && l->bytes_in >= fl->sent);
}

static int evil_got_replies(void *arg)
{
    struct evil *e = arg;
    evil_parse(e);
    return e->closed || e->replies >= N_PINGS;
}

static int teardown(void **state)
{
    (void)state;
    evil_free(&g_evil);
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

static void test_control_flood_not_read(void **state)
{
    (void)state;
    struct evil *e = &g_evil;
    evil_link(e, "evil");
    /* N_PINGS ClockSync PINGs: Control{clock_sync: {}} (3 bytes framed), each answered by a REPLY */
    Tracegate__Link__ClockSync cs = TRACEGATE__LINK__CLOCK_SYNC__INIT;
    Tracegate__Link__Control m = TRACEGATE__LINK__CONTROL__INIT;
    m.msg_case = TRACEGATE__LINK__CONTROL__MSG_CLOCK_SYNC;
    m.clock_sync = &cs;
    uint8_t msg[16], rec[24];
    size_t ml = tracegate__link__control__pack(&m, msg);
    size_t hl = tg_link_ctl_header(rec, ml);
    memcpy(rec + hl, msg, ml);
    struct flood fl = {e, 0};
    uint64_t rebuilds0 = tg_fleet_status_rebuilds(g_hub);
    for (int i = 0; i < N_PINGS; i++) {
        evbuffer_add(e->tx, rec, hl + ml);
        fl.sent += hl + ml;
    }
    nghttp2_session_resume_data(e->h2, e->sid);
    evil_flush(e);
    assert_true(tg_test_run_until(g_base, hub_got_all, &fl, WAIT_MS));
    assert_false(e->closed);
    struct tg_link *l = tl_link_up(g_hub, "evil");
    assert_non_null(l);
    assert_non_null(l->conn);
    /* what the hub owes a peer that does not read stays bounded: the mark and one more message's
     * answers (before: every REPLY it could not send, 230 KB here and growing with the flood) */
    size_t owed = evbuffer_get_length(l->conn->ctl_tx);
    if (owed > LINK_CTL_TX_HIGH + 1024)
        fail_msg("the hub holds %zu bytes of control answers for a peer that does not read", owed);

    /* evil reads again: every PING is answered, none lost */
    e->reading = 1;
    nghttp2_session_consume_connection(e->h2, evbuffer_get_length(e->rx));
    nghttp2_session_consume_stream(e->h2, e->sid, evbuffer_get_length(e->rx));
    evil_flush(e);
    assert_true(tg_test_run_until(g_base, evil_got_replies, e, WAIT_MS));
    assert_false(e->closed);
    assert_int_equal(e->replies, N_PINGS);
    assert_non_null(tl_link_up(g_hub, "evil"));
    /* nor does the flood make the hub render its status once per PING (20 a second at most: a
     * few hundred in the longest this test may take, against one per PING before) */
    uint64_t rebuilds = tg_fleet_status_rebuilds(g_hub) - rebuilds0;
    if (rebuilds >= N_PINGS / 10)
        fail_msg("%llu status rebuilds for %d ClockSync PINGs", (unsigned long long)rebuilds, N_PINGS);
    evil_free(e);
    struct tg_link *gone = tg_fleet_link_by_name(g_hub, "evil", NULL);
    if (gone)
        tg_link_close(gone, "test over");
}

struct opens {
    struct tg_fleet *edge;
    size_t asked;
};

static int edge_up(void *arg)
{
    struct opens *o = arg;
    return tl_link_up(o->edge, "hub") && tl_link_up(g_hub, "edge");
}

/* Every channel the hub asked for was opened by edge (bound) or refused (OpenFailed aborts it). */
static int opens_settled(void *arg)
{
    (void)arg;
    struct tg_link *l = tl_link_up(g_hub, "edge");
    if (!l)
        return 0;
    for (struct link_channel *ch = l->channels; ch; ch = ch->next)
        if (!ch->ever_bound)
            return 0;
    return 1;
}

/* A real dialer node `name` (on the edge gateway) that links to the hub. */
static struct tg_fleet *edge_new(const char *name) { return tl_dialer_new(g_base, g_edge_gw, name, g_port); }

static void test_open_requests_limited(void **state)
{
    (void)state;
    struct opens o = {NULL, 0};
    o.edge = edge_new("edge");
    assert_true(tg_test_run_until(g_base, edge_up, &o, WAIT_MS));
    struct tg_link *hl = tl_link_up(g_hub, "edge");
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
    struct tg_link *el = tl_link_up(o.edge, "hub");
    assert_non_null(el);
    if (el->n_channels > LINK_MAX_CHANNELS)
        fail_msg("edge opened %zu channels for its hub's Open requests (at most %u)", el->n_channels,
                 LINK_MAX_CHANNELS);
    assert_int_equal(el->n_channels, LINK_MAX_CHANNELS);
    assert_int_equal(tl_link_up(g_hub, "edge")->n_channels, LINK_MAX_CHANNELS);
    tg_fleet_free(o.edge);
    tg_test_run_until(g_base, NULL, NULL, 50);
    for (int i = 0; i < ASK; i++)
        close(fds[i]);
}

static ssize_t nothing_to_send(nghttp2_session *s, int32_t sid, uint8_t *buf, size_t len, uint32_t *flags,
                               nghttp2_data_source *src, void *user)
{
    (void)s, (void)sid, (void)buf, (void)len, (void)flags, (void)src, (void)user;
    return NGHTTP2_ERR_DEFERRED;
}

/* A channel stream from evil to the hub's own consumer port, claiming `hops` links crossed (NULL:
 * no header), with `pad` headers of 1000 bytes more; returns its stream id. */
static int32_t evil_channel_as(struct evil *e, unsigned id, const char *hops, int pad, const char *principal)
{
    char authority[32], cid[16];
    snprintf(authority, sizeof authority, "127.0.0.1:%d", g_port);
    snprintf(cid, sizeof cid, "%x", id);
#define NV(k, v) {(uint8_t *)(k), (uint8_t *)(v), sizeof(k) - 1, strlen(v), NGHTTP2_NV_FLAG_NONE}
    nghttp2_nv nv[8 + 40] = {
        NV(":method", "CONNECT"),   NV(":protocol", "perfetto-ipc"),    NV(":scheme", "http"),
        NV(":path", "/node/hub/consumer"), NV(":authority", authority), NV("tracegate-channel", cid),
    };
    size_t n = 6;
    if (hops)
        nv[n++] = (nghttp2_nv)NV("tracegate-hops", hops);
    if (principal)
        nv[n++] = (nghttp2_nv)NV("tracegate-principal", principal);
    static char filler[1001];
    memset(filler, 'p', 1000);
    for (int i = 0; i < pad && i < 40; i++)
        nv[n++] = (nghttp2_nv)NV("x-pad", filler);
#undef NV
    nghttp2_data_provider prd = {.read_callback = nothing_to_send}; /* the stream stays open */
    int32_t sid = nghttp2_submit_request(e->h2, NULL, nv, n, &prd, NULL);
    assert_true(sid > 0 && sid / 2 < 32);
    evil_flush(e);
    return sid;
}

static int32_t evil_channel_padded(struct evil *e, unsigned id, const char *hops, int pad)
{
    return evil_channel_as(e, id, hops, pad, NULL);
}

static int32_t evil_channel(struct evil *e, unsigned id, const char *hops) { return evil_channel_padded(e, id, hops, 0); }

struct answers {
    struct evil *e;
    int32_t sids[8];
    int n;
};

static int all_answered(void *arg)
{
    struct answers *a = arg;
    for (int i = 0; i < a->n; i++)
        if (!a->e->st[a->sids[i] / 2])
            return a->e->closed;
    return 1;
}

static void test_channel_hops_checked(void **state)
{
    (void)state;
    struct evil *e = &g_evil;
    evil_link(e, "looper");
    static const struct {
        const char *hops;
        int status;
    } k[] = {
        {"8", 200}, {NULL, 200}, {"1", 200}, /* within the limit; absent = 1 (a peer before hops) */
        {"9", 508}, {"1000000", 508},        /* a loop, or a path longer than links carry */
        {"0", 400}, {"x", 400}, {"08", 400}, /* not a number of hops */
    };
    struct answers a = {e, {0}, 0};
    tg_log_set_level(TG_LOG_ERROR);
    for (unsigned i = 0; i < sizeof k / sizeof k[0]; i++)
        a.sids[a.n++] = evil_channel(e, 2 * i + 1, k[i].hops);
    assert_true(tg_test_run_until(g_base, all_answered, &a, WAIT_MS));
    tg_log_set_level(TG_LOG_WARN);
    assert_false(e->closed);
    for (unsigned i = 0; i < sizeof k / sizeof k[0]; i++)
        if (e->st[a.sids[i] / 2] != k[i].status)
            fail_msg("tracegate-hops %s: status %d, want %d", k[i].hops ? k[i].hops : "(none)", e->st[a.sids[i] / 2],
                     k[i].status);
    struct tg_link *l = tl_link_up(g_hub, "looper");
    assert_non_null(l);
    unsigned seen[9] = {0};
    for (struct link_channel *ch = l->channels; ch; ch = ch->next)
        if (ch->hops <= 8)
            seen[ch->hops]++;
    assert_int_equal(seen[8], 1);
    assert_int_equal(seen[1], 2);
    assert_int_equal(l->n_channels, 3);
    evil_free(e);
    tg_link_close(l, "test over");
}

static int padded_settled(void *arg)
{
    struct answers *a = arg;
    return a->e->closed || (a->e->reset[a->sids[0] / 2] && a->e->st[a->sids[1] / 2]);
}

static void test_header_list_limited(void **state)
{
    (void)state;
    struct evil *e = &g_evil;
    evil_link(e, "padder");
    /* 20 headers of 1 KB: over the 16 KiB list the hub advertises; then a plain channel */
    struct answers a = {e, {0}, 2};
    tg_log_set_level(TG_LOG_ERROR);
    a.sids[0] = evil_channel_padded(e, 1, NULL, 20);
    a.sids[1] = evil_channel(e, 3, NULL);
    assert_true(tg_test_run_until(g_base, padded_settled, &a, WAIT_MS));
    tg_log_set_level(TG_LOG_WARN);
    assert_false(e->closed);
    if (e->st[a.sids[0] / 2])
        fail_msg("a stream with 20 KB of headers was answered %d", e->st[a.sids[0] / 2]);
    assert_int_not_equal(e->reset[a.sids[0] / 2], 1); /* closed with an error code, not NO_ERROR */
    assert_int_equal(e->st[a.sids[1] / 2], 200);        /* the link goes on */
    /* a list just under the limit (14 KB) is taken */
    a.sids[0] = evil_channel_padded(e, 5, NULL, 14);
    a.n = 1;
    assert_true(tg_test_run_until(g_base, all_answered, &a, WAIT_MS));
    assert_int_equal(e->st[a.sids[0] / 2], 200);
    struct tg_link *l = tl_link_up(g_hub, "padder");
    assert_non_null(l);
    evil_free(e);
    tg_link_close(l, "test over");
}

/* Out of descriptors, a link listener's socket stays readable: accepting again at once spun a core
 * (and a link listener faces the network). It pauses instead, counting each failure, and takes the
 * waiting dialer once descriptors are back. */
static uint64_t accept_failures(void)
{
    return tg_gw_metrics_conn_rejected_count(g_hub_gw->metrics, "accept_failed");
}
/* Descriptors the loop frees meanwhile (earlier tests' links finishing) are taken at once, so the
 * listener never finds one. */
static int g_fill[256];
static size_t g_nfill;
static int failures_reach(void *arg)
{
    int fd;
    while (g_nfill < sizeof g_fill / sizeof g_fill[0] && (fd = dup(0)) >= 0)
        g_fill[g_nfill++] = fd;
    return accept_failures() >= *(const uint64_t *)arg;
}
static int readable(void *arg)
{
    struct pollfd p = {.fd = *(const int *)arg, .events = POLLIN};
    return poll(&p, 1, 0) == 1;
}

static int all_readable(void *arg)
{
    const int *fds = arg;
    for (int i = 0; i < 4; i++)
        if (!readable((void *)&fds[i]))
            return 0;
    return 1;
}

static void test_out_of_descriptors_pauses_accepts(void **state)
{
    (void)state;
    /* four dialers (made while descriptors can still be made): a descriptor an earlier test's link
     * frees in the same turn could still let one in, the others wait in the backlog */
    int fds[4];
    for (int i = 0; i < 4; i++) {
        fds[i] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        assert_true(fds[i] >= 0);
    }
    uint64_t want = accept_failures() + 3;
    assert_int_equal(tg_test_fds_exhaust(), 0); /* no new descriptor for anyone in this process */
    /* the kernel completes the connections in the listener's backlog; the hub cannot take them */
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)g_port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    static const char preface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\4\0\0\0\0\0"; /* + empty SETTINGS */
    int ready = 0;
    for (int i = 0; i < 4; i++)
        ready += connect(fds[i], (struct sockaddr *)&a, sizeof a) == 0 &&
                 send(fds[i], preface, sizeof preface - 1, MSG_NOSIGNAL) == (ssize_t)(sizeof preface - 1);
    int paused = tg_test_run_until(g_base, failures_reach, &want, WAIT_MS);
    while (g_nfill)
        close(g_fill[--g_nfill]);
    assert_int_equal(tg_test_fds_restore(), 0);
    /* descriptors are back: every dialer is accepted and the hub's SETTINGS reach it */
    int served = tg_test_run_until(g_base, all_readable, fds, WAIT_MS);
    for (int i = 0; i < 4; i++)
        close(fds[i]);
    assert_int_equal(ready, 4);
    if (!paused)
        fail_msg("accept failures counted: %llu of %llu", (unsigned long long)accept_failures(),
                 (unsigned long long)want);
    assert_true(served);
}

/* The hub gateway's sessions whose principal starts with `prefix`: how many, and the first two. */
static int principals_with(const char *prefix, const char **a, const char **b)
{
    int n = 0;
    for (const struct tg_gw_session *s = g_hub_gw->sessions; s; s = tg_gw_session_next(s)) {
        const char *p = tg_gw_session_info(s)->principal;
        if (strncmp(p, prefix, strlen(prefix)) != 0)
            continue;
        if (n == 0)
            *a = p;
        else if (n == 1)
            *b = p;
        n++;
    }
    return n;
}

static void test_long_principals_kept_apart(void **state)
{
    (void)state;
    struct evil *e = &g_evil;
    evil_link(e, "longnames");
    /* two users of the far node whose principals differ only past what a principal holds once
     * scoped under the link (node:longnames/...): they must stay two principals */
    char p1[150], p2[150];
    memset(p1, 'u', sizeof p1 - 1);
    p1[sizeof p1 - 1] = '\0';
    memcpy(p2, p1, sizeof p2);
    p1[sizeof p1 - 2] = '1';
    p2[sizeof p2 - 2] = '2';
    struct answers a = {e, {0}, 2};
    a.sids[0] = evil_channel_as(e, 1, NULL, 0, p1);
    a.sids[1] = evil_channel_as(e, 3, NULL, 0, p2);
    assert_true(tg_test_run_until(g_base, all_answered, &a, WAIT_MS));
    assert_int_equal(e->st[a.sids[0] / 2], 200);
    assert_int_equal(e->st[a.sids[1] / 2], 200);
    const char *x = NULL, *y = NULL;
    assert_int_equal(principals_with("node:longnames/", &x, &y), 2);
    if (!strcmp(x, y))
        fail_msg("two users of node longnames are one principal: %s", x);
    struct tg_link *l = tl_link_up(g_hub, "longnames");
    assert_non_null(l);
    evil_free(e);
    tg_link_close(l, "test over");
}

/* A channel of the link `l` whose hops are `hops`, bound to its stream. */
static int has_channel_with_hops(struct tg_link *l, unsigned hops)
{
    for (struct link_channel *ch = l ? l->channels : NULL; ch; ch = ch->next)
        if (ch->hops == hops && ch->sid >= 0)
            return 1;
    return 0;
}

struct hops_wait {
    struct tg_fleet *f;
    const char *peer;
    unsigned hops;
};

static int channel_arrived(void *arg)
{
    struct hops_wait *w = arg;
    return has_channel_with_hops(tl_link_up(w->f, w->peer), w->hops);
}

static int edge2_up(void *edge) { return tl_link_up(edge, "hub") && tl_link_up(g_hub, "edge2"); }

static void route_free(struct tg_gw_route *r)
{
    if (r->bev)
        bufferevent_free(r->bev);
    if (r->fd >= 0)
        close(r->fd);
}

static void test_hops_forwarded(void **state)
{
    (void)state;
    char err[512];
    struct tg_fleet *edge = edge_new("edge2");
    assert_true(tg_test_run_until(g_base, edge2_up, edge, WAIT_MS));

    /* a client that came over 2 links already: the hub (acceptor) asks edge2 with Open, hops 3 */
    struct tg_gw_client_info who;
    memset(&who, 0, sizeof who);
    snprintf(who.principal, sizeof who.principal, "uid:4242");
    who.link_hops = 2;
    struct tg_gw_route r1, r2, r3;
    assert_int_equal(tg_fleet_route(g_hub, "edge2", 0, &who, &r1, err, sizeof err), 0);
    struct hops_wait w = {edge, "hub", 3};
    assert_true(tg_test_run_until(g_base, channel_arrived, &w, WAIT_MS));
    /* edge2 (dialer) opens a stream to the hub: tracegate-hops 6 for a client 5 links away */
    who.link_hops = 5;
    assert_int_equal(tg_fleet_route(edge, "hub", 0, &who, &r2, err, sizeof err), 0);
    w = (struct hops_wait){g_hub, "edge2", 6};
    assert_true(tg_test_run_until(g_base, channel_arrived, &w, WAIT_MS));
    /* a client that already crossed LINK_MAX_HOPS links is not taken further, either way */
    who.link_hops = LINK_MAX_HOPS;
    assert_int_equal(tg_fleet_route(g_hub, "edge2", 0, &who, &r3, err, sizeof err), -1);
    assert_non_null(strstr(err, "more than 8 links"));
    assert_int_equal(tg_fleet_route(edge, "hub", 0, &who, &r3, err, sizeof err), -1);
    assert_non_null(strstr(err, "more than 8 links"));

    route_free(&r1);
    route_free(&r2);
    tg_fleet_free(edge);
    tg_test_run_until(g_base, NULL, NULL, 50);
}

/* Queues one control message on evil's control stream. */
static void evil_control(struct evil *e, const Tracegate__Link__Control *m)
{
    uint8_t msg[512], rec[530];
    size_t ml = tracegate__link__control__get_packed_size(m);
    assert_true(ml <= sizeof msg);
    tracegate__link__control__pack(m, msg);
    size_t hl = tg_link_ctl_header(rec, ml);
    memcpy(rec + hl, msg, ml);
    evbuffer_add(e->tx, rec, hl + ml);
    nghttp2_session_resume_data(e->h2, e->sid);
    evil_flush(e);
}

/* The hub's gateway client whose principal is exactly `principal`, or NULL. */
static const struct tg_gw_client_info *hub_client(const char *principal)
{
    for (const struct tg_gw_session *s = g_hub_gw->sessions; s; s = tg_gw_session_next(s))
        if (!strcmp(tg_gw_session_info(s)->principal, principal))
            return tg_gw_session_info(s);
    return NULL;
}

static int claimer_reach_known(void *arg)
{
    (void)arg;
    struct tg_link *l = tl_link_up(g_hub, "claimer");
    return l && l->n_reach == 2 && tl_link_up(g_hub, "trusted-a");
}

static void test_node_claims_checked(void **state)
{
    (void)state;
    /* trusted-a: a node linked to the hub itself; claimer: a compromised node that says it reaches
     * both relayed-x (a node linked to it) and trusted-a */
    struct tg_fleet *ta = edge_new("trusted-a");
    struct evil *e = &g_evil;
    evil_link(e, "claimer");
    Tracegate__Link__NodeInfo n1 = TRACEGATE__LINK__NODE_INFO__INIT, n2 = TRACEGATE__LINK__NODE_INFO__INIT;
    Tracegate__Link__NodeInfo *pn[2] = {&n1, &n2};
    n1.name = "relayed-x";
    n2.name = "trusted-a";
    n1.has_hops = n2.has_hops = 1;
    n1.hops = n2.hops = 1;
    Tracegate__Link__Nodes ns = TRACEGATE__LINK__NODES__INIT;
    ns.n_nodes = 2;
    ns.nodes = pn;
    Tracegate__Link__Control m = TRACEGATE__LINK__CONTROL__INIT;
    m.msg_case = TRACEGATE__LINK__CONTROL__MSG_NODES;
    m.nodes = &ns;
    evil_control(e, &m);
    assert_true(tg_test_run_until(g_base, claimer_reach_known, NULL, WAIT_MS));

    static const struct {
        const char *claim;   /* the channel's tracegate-principal */
        const char *machine; /* the machine the hub's service must put its client on */
    } k[] = {
        {"uid:0", "claimer"},                                /* its own user */
        {"node:relayed-x/uid:0", "relayed-x"},               /* a node it relays, as it announced */
        {"node:trusted-a/uid:0", "claimer"},                 /* linked to the hub: speaks for itself */
        {"node:ghost/uid:0", "claimer"},                     /* a node it never announced */
        {"node:hub/uid:0", "claimer"},                       /* the hub itself */
        {"node:relayed-x/node:trusted-a/uid:0", "claimer"}, /* past what the hub can check */
    };
    enum { N = sizeof k / sizeof k[0] };
    struct answers a = {e, {0}, N};
    tg_log_set_level(TG_LOG_ERROR); /* the refused claims are logged */
    for (int i = 0; i < N; i++)
        a.sids[i] = evil_channel_as(e, 2 * (unsigned)i + 1, NULL, 0, k[i].claim);
    assert_true(tg_test_run_until(g_base, all_answered, &a, WAIT_MS));
    tg_log_set_level(TG_LOG_WARN);
    for (int i = 0; i < N; i++) {
        assert_int_equal(e->st[a.sids[i] / 2], 200);
        char principal[160];
        snprintf(principal, sizeof principal, "node:claimer/%s", k[i].claim);
        const struct tg_gw_client_info *info = hub_client(principal);
        if (!info)
            fail_msg("no hub client %s", principal);
        struct tg_ipc_identity id;
        tg_gw_identity_for_service(info, &id);
        if (!id.machine_name || strcmp(id.machine_name, k[i].machine) != 0)
            fail_msg("a channel of claimer claiming \"%s\" is on machine %s, not %s", k[i].claim,
                     id.machine_name ? id.machine_name : "(this one)", k[i].machine);
        assert_int_equal(id.machine_id, tg_gw_node_machine_id(k[i].machine));
        assert_string_equal(id.principal, principal); /* the principal stays what it was: its own */
    }
    struct tg_link *l = tl_link_up(g_hub, "claimer");
    assert_non_null(l);
    evil_free(e);
    tg_link_close(l, "test over");
    tg_fleet_free(ta);
    tg_test_run_until(g_base, NULL, NULL, 50);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_control_flood_not_read),
        cmocka_unit_test(test_open_requests_limited),
        cmocka_unit_test(test_channel_hops_checked),
        cmocka_unit_test(test_hops_forwarded),
        cmocka_unit_test(test_header_list_limited),
        cmocka_unit_test(test_long_principals_kept_apart),
        cmocka_unit_test(test_node_claims_checked),
        cmocka_unit_test(test_out_of_descriptors_pauses_accepts),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
