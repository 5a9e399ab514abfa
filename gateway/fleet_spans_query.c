/* fleet_spans_query.c: TracegateFleet.Spans (`tracectl spans`): node NAME's recent OnePath spans
 * (onepath_recent_spans, read with the caller's cursor). This node answers from its own store;
 * another node is asked through the links exactly as a routed client would: a consumer channel
 * to it as the caller (the far node sees node:<us>/<caller> with its link-roles, so it serves
 * spans only when those include spans or admin), TracegateFleet bound there and Spans{node ""}
 * called; its answer is relayed unchanged to the session that asked, if it is still there.
 * The role check here is the ACL's (spans or admin); limits on the request hold before anything. */
#include "fleet_spans_query.h"

#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gw_core.h"
#include "link_int.h"
#include "link_wire.h"
#include "tracegate/conn.h"
#include "tracegate/frame.h"
#include "tracegate/ipc_client.h"
#include "tracegate/log.h"
#include "tracegate/onepath.h"
#include "tracegate_gateway.pb-c.h"

#define LOG "fleet"
#define REMOTE_TIMEOUT_S 20

struct spans_query {
    struct spans_query *next, **pprev; /* g_pending */
    struct tg_gw *gw;
    uint64_t session_id, request_id;
    tg_ipc_client *cli;
    struct event *timer;
    uint8_t args[64];
    size_t args_len;
    int done;
    char node[64];
};

static struct spans_query *g_pending; /* asked of other nodes, not answered yet */

static void query_free(struct spans_query *q)
{
    *q->pprev = q->next;
    if (q->next)
        q->next->pprev = q->pprev;
    event_free(q->timer);
    tg_ipc_client_free(q->cli); /* deferred by the client when called from its callbacks */
    free(q);
}

void tg_fleet_spans_abort(void)
{
    while (g_pending) {
        g_pending->done = 1;
        query_free(g_pending);
    }
}

static struct tg_gw_session *session_by_id(struct tg_gw *gw, uint64_t id)
{
    for (struct tg_gw_session *s = gw->sessions; s; s = tg_gw_session_next(s))
        if (tg_gw_session_id(s) == id)
            return s;
    return NULL;
}

static void answer(struct tg_gw_session *s, uint64_t rid, Tracegate__SpansResponse *r)
{
    tg_gw_session_reply_msg(s, rid, &r->base);
}

static void answer_error(struct tg_gw_session *s, uint64_t rid, const char *node, const char *error)
{
    Tracegate__SpansResponse r = TRACEGATE__SPANS_RESPONSE__INIT;
    r.error = (char *)error;
    r.node = (char *)node;
    answer(s, rid, &r);
}

static void answer_local(struct tg_gw_session *s, uint64_t rid, const char *me, uint64_t since, uint32_t max)
{
    onepath_recent_read_t rd;
    char *nd = NULL;
    size_t len = 0;
    int rc = onepath_recent_spans(since, max, TG_SPANS_ANSWER_BYTES, &nd, &len, &rd);
    if (rc != ONEPATH_OK) {
        answer_error(s, rid, me, "out of memory");
    } else if (!rd.active) {
        answer_error(s, rid, me,
                     "this node keeps no spans (ONEPATH_TRACE_ENABLE=1 and ONEPATH_TRACE_RECENT_SPANS > 0 turn it on)");
    } else {
        Tracegate__SpansResponse r = TRACEGATE__SPANS_RESPONSE__INIT;
        r.has_ndjson = r.has_next_since = r.has_missed = r.has_more = r.has_last_id = 1;
        r.last_id = rd.last_id;
        r.ndjson.data = (uint8_t *)nd;
        r.ndjson.len = len;
        r.next_since = rd.next_since;
        r.missed = rd.missed;
        r.more = rd.more != 0;
        r.node = (char *)me;
        answer(s, rid, &r);
        tg_info(LOG, "session %llu: %zu spans (after #%llu, %llu missed) for %s",
                (unsigned long long)tg_gw_session_id(s), rd.spans, (unsigned long long)since,
                (unsigned long long)rd.missed, tg_gw_session_info(s)->principal);
    }
    free(nd);
}

/* ---- another node, through a consumer channel ---- */

static void query_finish(struct spans_query *q, int ok, const uint8_t *reply, size_t len, const char *error)
{
    if (q->done)
        return;
    q->done = 1;
    struct tg_gw_session *s = session_by_id(q->gw, q->session_id);
    if (s) {
        if (ok)
            tg_gw_session_reply(s, q->request_id, 1, 0, reply, len);
        else
            answer_error(s, q->request_id, q->node, error);
    }
    if (!ok)
        tg_info(LOG, "Spans from node %s: %s", q->node, error);
    query_free(q);
}

static void remote_reply(tg_ipc_client *cli, int success, int has_more, const uint8_t *reply, size_t len, void *arg)
{
    (void)cli;
    if (has_more)
        return; /* one part is all a node sends */
    struct spans_query *q = arg;
    Tracegate__SpansResponse *r = success ? tracegate__spans_response__unpack(NULL, len, reply) : NULL;
    if (r) {
        tracegate__spans_response__free_unpacked(r, NULL);
        query_finish(q, 1, reply, len, NULL);
    } else {
        query_finish(q, 0, NULL, 0,
                     success ? "the node's answer is not a SpansResponse"
                             : "the node refused Spans (its link-roles need spans or admin)");
    }
}

static void remote_bound(tg_ipc_client *cli, tg_ipc_service_proxy *proxy, void *arg)
{
    struct spans_query *q = arg;
    if (!proxy) {
        query_finish(q, 0, NULL, 0,
                     "the node refused TracegateFleet (a raw Perfetto node has none; a tracegated node's "
                     "link-roles need spans or admin)");
        return;
    }
    if (tg_ipc_client_invoke_bytes(cli, proxy, "Spans", q->args, q->args_len, -1, remote_reply, q) == 0)
        query_finish(q, 0, NULL, 0, "the node offers no Spans method (an older tracegated)");
}

static void remote_gone(tg_ipc_client *cli, const char *reason, void *arg)
{
    (void)cli;
    query_finish(arg, 0, NULL, 0, reason && *reason ? reason : "the channel closed");
}

static void remote_timeout(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    query_finish(arg, 0, NULL, 0, "no answer from the node");
}

static void ask_remote(struct tg_gw_session *s, uint64_t rid, struct tg_fleet *f, const char *node, uint64_t since,
                       uint32_t max)
{
    char err[200] = "";
    int fd = tg_fleet_connect(f, node, 0, tg_gw_session_info(s), err, sizeof err);
    if (fd < 0) {
        answer_error(s, rid, node, err[0] ? err : "not reachable");
        return;
    }
    struct spans_query *q = calloc(1, sizeof *q);
    struct tg_conn_opts o;
    tg_conn_opts_default(&o);
    o.max_frame = TG_FRAME_MAX_DEFAULT;
    o.no_fd_passing = 1;
    tg_conn *c = q ? tg_conn_new_fd(tg_fleet_base(f), fd, &o, NULL, NULL) : NULL;
    if (!c) {
        if (!q)
            evutil_closesocket(fd);
        free(q);
        answer_error(s, rid, node, "out of memory");
        return;
    }
    q->gw = tg_gw_session_gw(s);
    q->session_id = tg_gw_session_id(s);
    q->request_id = rid;
    snprintf(q->node, sizeof q->node, "%s", node);
    Tracegate__SpansRequest rq = TRACEGATE__SPANS_REQUEST__INIT;
    rq.has_since_id = rq.has_max_spans = 1;
    rq.since_id = since;
    rq.max_spans = max;
    q->args_len = tracegate__spans_request__pack(&rq, q->args); /* < 32 bytes without a node name */
    static const struct tg_ipc_client_cbs cbs = {.on_disconnect = remote_gone};
    q->cli = tg_ipc_client_new(tg_fleet_base(f), c, &cbs, q);
    q->timer = evtimer_new(tg_fleet_base(f), remote_timeout, q);
    struct timeval tv = {REMOTE_TIMEOUT_S, 0};
    if (!q->cli || !q->timer || evtimer_add(q->timer, &tv) != 0 ||
        tg_ipc_client_bind(q->cli, TG_GW_SVC_FLEET, remote_bound, q) != 0) {
        if (!q->cli)
            tg_conn_close(c, "out of memory");
        q->done = 1;
        if (q->timer)
            event_free(q->timer);
        if (q->cli)
            tg_ipc_client_free(q->cli);
        free(q);
        answer_error(s, rid, node, "cannot open a channel to the node");
        return;
    }
    q->next = g_pending;
    q->pprev = &g_pending;
    if (g_pending)
        g_pending->pprev = &q->next;
    g_pending = q;
    tg_info(LOG, "session %llu: asking node %s for spans after #%llu for %s", (unsigned long long)q->session_id, node,
            (unsigned long long)since, tg_gw_session_info(s)->principal);
}

static void m_spans(struct tg_gw_session *s, uint64_t rid, const uint8_t *args, size_t len, int drop_reply, void *ctx)
{
    (void)drop_reply;
    struct tg_fleet *f = ctx;
    const char *who = tg_gw_session_info(s)->principal;
    if (len > TG_SPANS_REQUEST_MAX) {
        tg_warn(LOG, "session %llu: Spans request of %zu bytes refused (at most %d) from %s",
                (unsigned long long)tg_gw_session_id(s), len, TG_SPANS_REQUEST_MAX, who);
        tg_gw_session_reply(s, rid, 0, 0, NULL, 0);
        return;
    }
    Tracegate__SpansRequest *rq = tracegate__spans_request__unpack(NULL, len, args);
    if (!rq) {
        tg_warn(LOG, "session %llu: undecodable Spans request refused from %s", (unsigned long long)tg_gw_session_id(s),
                who);
        tg_gw_session_reply(s, rid, 0, 0, NULL, 0);
        return;
    }
    char node[64];
    int name_ok = !rq->node || strlen(rq->node) < sizeof node;
    snprintf(node, sizeof node, "%s", rq->node && name_ok ? rq->node : "");
    uint64_t since = rq->has_since_id ? rq->since_id : 0;
    uint32_t max = rq->has_max_spans && rq->max_spans ? rq->max_spans : TG_SPANS_DEFAULT_COUNT;
    if (max > TG_SPANS_MAX_COUNT)
        max = TG_SPANS_MAX_COUNT;
    tracegate__spans_request__free_unpacked(rq, NULL);
    const char *me = tg_fleet_node_name(f);
    if (!name_ok || (node[0] && !tg_link_node_name_ok(node))) {
        tg_warn(LOG, "session %llu: Spans for a malformed node name refused from %s",
                (unsigned long long)tg_gw_session_id(s), who);
        tg_gw_session_reply(s, rid, 0, 0, NULL, 0);
    } else if (!node[0] || strcmp(node, me) == 0) {
        answer_local(s, rid, me, since, max);
    } else if (!tg_fleet_nodes_has(f, node)) {
        answer_error(s, rid, node, "no such node (not linked now)");
    } else {
        ask_remote(s, rid, f, node, since, max);
    }
}

const struct tg_gw_local_method tg_fleet_spans_method = {"Spans", m_spans};
