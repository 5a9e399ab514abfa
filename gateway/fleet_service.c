/* fleet_service.c: the gateway-local service TracegateFleet: Route (this connection is for node
 * NAME: `tracectl --node NAME` over any transport), ListNodes (`tracectl nodes`), AdbDevices and
 * Spans (their own files). */
#include "fleet_service.h"

#include "fleet_adb_query.h"
#include "fleet_fanout.h"
#include "fleet_spans_query.h"

#include <stdlib.h>
#include <string.h>

#include "gw_bridge.h"
#include "gw_core.h"
#include "gw_metrics.h"
#include "link_wire.h"
#include "tracegate/log.h"
#include "tracegate_gateway.pb-c.h"

#define LOG "fleet"
#define MAX_NODES 256

/* "@all" or "@a,b,c": the fan-out's own reading of the spec decides (tg_fanout_resolve) */
static int federation_ok(struct tg_fleet *f, const char *spec)
{
    char names[64][64], err[160] = "";
    return tg_fanout_resolve(f, spec, names, 64, err, sizeof err) > 0;
}

static void m_route(struct tg_gw_session *s, uint64_t rid, const uint8_t *args, size_t len, int drop_reply, void *ctx)
{
    (void)drop_reply;
    struct tg_fleet *f = ctx;
    Tracegate__RouteRequest *rq = tracegate__route_request__unpack(NULL, len, args);
    const char *node = rq && rq->node ? rq->node : "";
    int ok = (!node[0] || (node[0] == '@' ? federation_ok(f, node + 1)
                                          : tg_link_node_name_ok(node) && tg_fleet_nodes_has(f, node))) &&
             tg_gw_session_set_node(s, node) == 0;
    if (!ok) {
        tg_info(LOG, "session %llu: cannot route to node \"%s\"", (unsigned long long)tg_gw_session_id(s), node);
        tg_gw_metrics_route_error(tg_gw_session_gw(s)->metrics);
    }
    if (rq)
        tracegate__route_request__free_unpacked(rq, NULL);
    tg_gw_session_reply(s, rid, ok, 0, NULL, 0);
}

static void m_list(struct tg_gw_session *s, uint64_t rid, const uint8_t *args, size_t len, int drop_reply, void *ctx)
{
    (void)args;
    (void)len;
    (void)drop_reply;
    struct tg_fleet *f = ctx;
    struct tg_fleet_node *nodes = calloc(MAX_NODES, sizeof *nodes);
    Tracegate__FleetNode *pb = calloc(MAX_NODES, sizeof *pb);
    Tracegate__FleetNode **pp = calloc(MAX_NODES, sizeof *pp);
    if (!nodes || !pb || !pp) {
        free(nodes);
        free(pb);
        free(pp);
        tg_gw_session_reply(s, rid, 0, 0, NULL, 0);
        return;
    }
    size_t n = tg_fleet_nodes(f, nodes, MAX_NODES);
    if (n > MAX_NODES)
        n = MAX_NODES;
    for (size_t i = 0; i < n; i++) {
        Tracegate__FleetNode *x = &pb[i];
        tracegate__fleet_node__init(x);
        x->name = nodes[i].name;
        x->state = nodes[i].state;
        x->via = nodes[i].via;
        x->has_machine_id = x->has_rtt_us = x->has_bytes_in = x->has_bytes_out = x->has_channels = 1;
        x->machine_id = nodes[i].machine_id;
        x->rtt_us = nodes[i].rtt_us;
        x->has_clock_offset_ns = nodes[i].have_offset;
        x->clock_offset_ns = nodes[i].clock_offset_ns;
        x->bytes_in = nodes[i].bytes_in;
        x->bytes_out = nodes[i].bytes_out;
        x->channels = (uint32_t)nodes[i].channels;
        x->has_since_unix_s = 1;
        x->since_unix_s = nodes[i].since_unix_s;
        x->address = nodes[i].address;
        x->version = nodes[i].version;
        pp[i] = x;
    }
    Tracegate__ListNodesResponse r = TRACEGATE__LIST_NODES_RESPONSE__INIT;
    r.n_nodes = n;
    r.nodes = pp;
    tg_gw_session_reply_msg(s, rid, &r.base);
    free(nodes);
    free(pb);
    free(pp);
}

static struct tg_gw_local_method k_methods[4] = {{"Route", m_route}, {"ListNodes", m_list}, {NULL, NULL}, {NULL, NULL}};
static struct tg_gw_local_service g_svc = {TG_GW_SVC_FLEET, k_methods, 4, NULL};

int tg_fleet_service_register(struct tg_gw *gw, struct tg_fleet *f)
{
    k_methods[2] = tg_fleet_adb_method;   /* AdbDevices (fleet_adb_query.c) */
    k_methods[3] = tg_fleet_spans_method; /* Spans (fleet_spans_query.c) */
    g_svc.ctx = f;
    return tg_gw_register_local_service(gw, &g_svc);
}
