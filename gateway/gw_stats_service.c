/* gw_stats_service.c: TracegateGateway.GetStats: the gateway's counters (tg_gw_metrics_snapshot)
 * and the fleet's nodes as one KCDATA buffer (docs/kcdata.md: node descriptor + stats
 * containers), for `tracectl stats`. Who may call it is the ACL's business (observer, recorder,
 * admin: what /metrics needs). */
#include "gw_stats_service.h"

#include "config.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gw_bridge.h"
#include "gw_core.h"
#include "gw_metrics.h"
#include "tracegate/errbuf.h"
#include "tracegate/kcdata.h"
#include "tracegate/kcdata_node.h"
#include "tracegate/kcdata_stats.h"
#include "tracegate/log.h"
#include "tracegate_gateway.pb-c.h"

#define LOG "gw-stats"
#define MAX_NODES 256

/* The nodes the fleet knows (this node first); NULL/0 without a fleet. */
static struct tg_fleet_node *list_nodes(struct tg_fleet *f, size_t *n)
{
    *n = 0;
    if (!f)
        return NULL;
    struct tg_fleet_node *nodes = calloc(MAX_NODES, sizeof *nodes);
    if (!nodes)
        return NULL;
    size_t k = tg_fleet_nodes(f, nodes, MAX_NODES);
    *n = k < MAX_NODES ? k : MAX_NODES;
    return nodes;
}

static void add_node_desc(struct tg_kcdata_enc *e, struct tg_gw *gw, const struct tg_fleet_node *self)
{
    struct tg_node_desc d;
    memset(&d, 0, sizeof d);
    const char *name = self ? self->name : tg_gw_node_name(gw);
    if (!name || !name[0]) {
        char host[128] = "";
        gethostname(host, sizeof host - 1);
        snprintf(d.name, sizeof d.name, "%s", host[0] ? host : "node");
    } else {
        snprintf(d.name, sizeof d.name, "%s", name);
    }
    d.machine_id = 0; /* this node: machine ids name the others (docs/link-protocol.md §8) */
    snprintf(d.version, sizeof d.version, "%s", PACKAGE_VERSION);
    tg_node_desc_read_clocks(&d);
    tg_node_desc_add(e, &d);
}

int tg_gw_stats_snapshot(struct tg_gw *gw, struct tg_fleet *fleet, uint8_t **out, size_t *len, char *err,
                         size_t errlen)
{
    size_t n_nodes;
    struct tg_fleet_node *nodes = list_nodes(fleet, &n_nodes);
    struct tg_kcdata_enc e;
    tg_kcdata_enc_init(&e, TG_KCDATA_MAGIC);
    add_node_desc(&e, gw, n_nodes ? &nodes[0] : NULL);

    /* the gateway's own counters */
    struct tg_gw_metric_value mv[TG_GW_METRICS_SNAPSHOT_MAX];
    size_t n = tg_gw_metrics_snapshot(gw->metrics, mv, TG_GW_METRICS_SNAPSHOT_MAX);
    if (n > TG_GW_METRICS_SNAPSHOT_MAX)
        n = TG_GW_METRICS_SNAPSHOT_MAX;
    struct tg_kcdata_stat st[TG_GW_METRICS_SNAPSHOT_MAX + 8];
    size_t k = 0;
    time_t now = time(NULL);
    st[k++] = (struct tg_kcdata_stat){"uptime_s", now > gw->started ? (uint64_t)(now - gw->started) : 0};
    for (size_t i = 0; i < n; i++)
        st[k++] = (struct tg_kcdata_stat){mv[i].name, mv[i].value};
    uint64_t links_up = 0, links_down = 0, link_channels = 0, link_in = 0, link_out = 0;
    for (size_t i = 1; i < n_nodes; i++) {
        if (nodes[i].via[0] || !strcmp(nodes[i].state, "raw"))
            continue;
        links_up += !strcmp(nodes[i].state, "up");
        links_down += strcmp(nodes[i].state, "up") != 0;
        link_channels += nodes[i].channels;
        link_in += nodes[i].bytes_in;
        link_out += nodes[i].bytes_out;
    }
    st[k++] = (struct tg_kcdata_stat){"nodes_known", n_nodes ? n_nodes - 1 : 0};
    st[k++] = (struct tg_kcdata_stat){"links_up", links_up};
    st[k++] = (struct tg_kcdata_stat){"links_not_up", links_down};
    st[k++] = (struct tg_kcdata_stat){"link_channels", link_channels};
    st[k++] = (struct tg_kcdata_stat){"link_bytes_in", link_in};
    st[k++] = (struct tg_kcdata_stat){"link_bytes_out", link_out};
    tg_kcdata_stats_add(&e, 1, st, k);

    /* one container per other node: its name and state, then its numbers */
    for (size_t i = 1; i < n_nodes; i++) {
        const struct tg_fleet_node *x = &nodes[i];
        uint64_t id = 1 + i;
        tg_kcdata_container_begin(&e, TG_KCCONTAINER_STATS, id);
        tg_kcdata_add_string(&e, "node", x->name);
        tg_kcdata_add_string(&e, "state", x->state);
        if (x->via[0])
            tg_kcdata_add_string(&e, "via", x->via);
        if (x->version[0])
            tg_kcdata_add_string(&e, "version", x->version);
        tg_kcdata_add_u64(&e, "machine_id", x->machine_id);
        tg_kcdata_add_u64(&e, "rtt_us", x->rtt_us);
        if (x->have_offset)
            tg_kcdata_add_i64(&e, "clock_offset_ns", x->clock_offset_ns);
        tg_kcdata_add_u64(&e, "bytes_in", x->bytes_in);
        tg_kcdata_add_u64(&e, "bytes_out", x->bytes_out);
        tg_kcdata_add_u64(&e, "channels", x->channels);
        tg_kcdata_add_u64(&e, "since_unix_s", x->since_unix_s);
        tg_kcdata_container_end(&e, id);
    }
    free(nodes);
    if (tg_kcdata_finish(&e, out, len) != 0) {
        tg_errf(err, errlen, "%s", tg_kcdata_enc_error(&e));
        tg_kcdata_enc_free(&e);
        return -1;
    }
    return 0;
}

static void m_get_stats(struct tg_gw_session *s, uint64_t rid, const uint8_t *args, size_t len, int drop_reply,
                        void *ctx)
{
    (void)args;
    (void)len;
    (void)drop_reply;
    struct tg_fleet *fleet = ctx;
    struct tg_gw *gw = tg_gw_session_gw(s);
    uint8_t *kc = NULL;
    size_t kl = 0;
    char err[256];
    if (tg_gw_stats_snapshot(gw, fleet, &kc, &kl, err, sizeof err) != 0) {
        tg_warn(LOG, "session %llu: cannot build the stats snapshot: %s", (unsigned long long)tg_gw_session_id(s), err);
        tg_gw_session_reply(s, rid, 0, 0, NULL, 0);
        return;
    }
    Tracegate__GetStatsResponse r = TRACEGATE__GET_STATS_RESPONSE__INIT;
    r.has_kcdata = 1;
    r.kcdata.data = kc;
    r.kcdata.len = kl;
    tg_gw_session_reply_msg(s, rid, &r.base);
    free(kc);
}

static const struct tg_gw_local_method k_methods[] = {{"GetStats", m_get_stats}};
static struct tg_gw_local_service g_svc = {TG_GW_SVC_GATEWAY, k_methods, 1, NULL};

int tg_gw_stats_service_register(struct tg_gw *gw, struct tg_fleet *fleet)
{
    g_svc.ctx = fleet;
    return tg_gw_register_local_service(gw, &g_svc);
}
