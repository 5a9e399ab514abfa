/* service_state.c: QueryServiceState: producers (id, name, uid, pid,
 * sdk_version, machine), registered data sources, sessions visible to the
 * caller. Sent whole when it fits one reply; otherwise the first reply holds
 * everything but data_sources and the following ones batches of
 * data_sources, each under 128 KiB (§3.3).
 *
 * The batches go out as the caller reads them: a query sends while the caller's
 * output is under its high watermark and goes on when it drains (peer_drain),
 * from a cursor (producer id, data sources of it sent), so one query never
 * queues more than the watermark plus one reply, however many descriptors the
 * producers registered. A caller's queries are answered one after the other. */
#include "service/svc.h"

#include "tracegate/conn.h"

#include "tracing_service_state.pb-c.h"

#include <event2/event.h>
#include <stdlib.h>
#include <string.h>

/* One QueryServiceState being answered. */
struct state_query {
    struct state_query *next;
    tg_ipc_call *call;
    bool sessions_only;
    bool head_sent; /* the first reply (all but the data sources) went out */
    uint32_t next_id; /* data sources still to send: of producers with ids from this one ... */
    size_t skip;      /* ... less the first `skip` of producer next_id's */
};

/* A consumer's queries, oldest first. */
struct tg_svc_state_queries {
    tg_svc_consumer *c;
    struct state_query *head, **tail;
    struct event *ev; /* goes on from the loop once the output drained */
};

static int reply_state(tg_ipc_call *call, Perfetto__Protos__TracingServiceState *st, int has_more)
{
    Perfetto__Protos__QueryServiceStateResponse resp = PERFETTO__PROTOS__QUERY_SERVICE_STATE_RESPONSE__INIT;
    resp.service_state = st;
    return tg_ipc_call_reply(call, &resp.base, has_more, -1);
}

static size_t state_size(Perfetto__Protos__TracingServiceState *st)
{
    Perfetto__Protos__QueryServiceStateResponse resp = PERFETTO__PROTOS__QUERY_SERVICE_STATE_RESPONSE__INIT;
    resp.service_state = st;
    return protobuf_c_message_get_packed_size(&resp.base);
}

/* The first reply: everything when it fits, else all but the data sources. Returns true when the
 * query is answered (or cannot be). */
static bool send_head(tg_service *svc, tg_svc_consumer *c, struct state_query *q)
{
    tg_ipc_call *call = q->call;
    bool sessions_only = q->sessions_only, done = true;
    size_t np = 0, nd = 0, ns = 0, total_buf = 0;
    for (tg_svc_producer *p = svc->producers; p; p = p->next) {
        if (!p->initialized)
            continue;
        np++;
        for (struct tg_svc_ds_reg *r = p->sources; r; r = r->next)
            nd++;
    }
    for (tg_svc_session *s = svc->sessions; s; s = s->next) {
        ns++;
        total_buf += s->n_buffers;
    }
    if (sessions_only)
        np = nd = 0;
    Perfetto__Protos__TracingServiceState__Producer *pr = calloc(np + 1, sizeof *pr);
    Perfetto__Protos__TracingServiceState__Producer **prp = calloc(np + 1, sizeof *prp);
    Perfetto__Protos__TracingServiceState__DataSource *ds = calloc(nd + 1, sizeof *ds);
    Perfetto__Protos__TracingServiceState__DataSource **dsp = calloc(nd + 1, sizeof *dsp);
    Perfetto__Protos__TracingServiceState__TracingSession *ts = calloc(ns + 1, sizeof *ts);
    Perfetto__Protos__TracingServiceState__TracingSession **tsp = calloc(ns + 1, sizeof *tsp);
    uint32_t *kb = calloc(total_buf + 1, sizeof *kb);
    if (!pr || !prp || !ds || !dsp || !ts || !tsp || !kb) {
        tg_ipc_call_reject(call);
        goto out;
    }
    q->head_sent = true;
    Perfetto__Protos__TracingServiceState st = PERFETTO__PROTOS__TRACING_SERVICE_STATE__INIT;
    size_t ip = 0, id = 0;
    if (!sessions_only) {
        for (tg_svc_producer *p = svc->producers; p; p = p->next) {
            if (!p->initialized)
                continue;
            Perfetto__Protos__TracingServiceState__Producer *x = &pr[ip];
            perfetto__protos__tracing_service_state__producer__init(x);
            x->has_id = 1;
            x->id = p->id;
            x->name = p->name;
            x->has_uid = 1;
            x->uid = p->uid;
            x->sdk_version = p->sdk_version;
            x->has_pid = 1;
            x->pid = p->pid;
            x->has_frozen = 1;
            x->frozen = 0;
            if (p->machine_id) {
                x->has_machine_id = 1;
                x->machine_id = p->machine_id;
                if (p->machine_name && *p->machine_name)
                    x->machine_name = p->machine_name;
            }
            prp[ip++] = x;
            for (struct tg_svc_ds_reg *r = p->sources; r; r = r->next) {
                perfetto__protos__tracing_service_state__data_source__init(&ds[id]);
                ds[id].ds_descriptor = r->desc;
                ds[id].has_producer_id = 1;
                ds[id].producer_id = p->id;
                dsp[id] = &ds[id];
                id++;
            }
        }
    }
    st.n_producers = ip;
    st.producers = prp;
    int started = 0;
    size_t is = 0, ik = 0;
    for (tg_svc_session *s = svc->sessions; s; s = s->next) {
        if (s->state == TG_SESS_STARTED)
            started++;
        if (!tg_svc_may_see(c, s))
            continue;
        Perfetto__Protos__TracingServiceState__TracingSession *x = &ts[is];
        perfetto__protos__tracing_service_state__tracing_session__init(x);
        x->has_id = 1;
        x->id = s->id;
        x->has_consumer_uid = 1;
        x->consumer_uid = s->uid;
        x->state = (char *)tg_svc_session_state_name(s);
        if (s->cfg && s->cfg->unique_session_name && *s->cfg->unique_session_name)
            x->unique_session_name = s->cfg->unique_session_name;
        x->buffer_size_kb = &kb[ik];
        for (size_t b = 0; b < s->n_buffers; b++)
            kb[ik++] = (uint32_t)(tg_trace_buffer_capacity(s->buffers[b]->tb) / 1024u);
        x->n_buffer_size_kb = s->n_buffers;
        x->has_duration_ms = 1;
        x->duration_ms = s->cfg && s->cfg->has_duration_ms ? s->cfg->duration_ms : 0;
        size_t nds = 0;
        for (tg_svc_ds_inst *d = s->instances; d; d = d->next)
            nds++;
        x->has_num_data_sources = 1;
        x->num_data_sources = (uint32_t)nds;
        if (s->start_realtime_ns) {
            x->has_start_realtime_ns = 1;
            x->start_realtime_ns = s->start_realtime_ns;
        }
        if (s->cfg && s->cfg->has_bugreport_score) {
            x->has_bugreport_score = 1;
            x->bugreport_score = s->cfg->bugreport_score;
        }
        x->has_is_started = 1;
        x->is_started = s->state == TG_SESS_STARTED;
        tsp[is++] = x;
    }
    st.has_num_sessions = 1;
    st.num_sessions = (int32_t)ns;
    st.has_num_sessions_started = 1;
    st.num_sessions_started = started;
    st.tracing_service_version = (char *)TG_SVC_VERSION;
    st.n_tracing_sessions = is;
    st.tracing_sessions = tsp;
    st.has_supports_tracing_sessions = 1;
    st.supports_tracing_sessions = 1;
    st.n_data_sources = id;
    st.data_sources = dsp;
    if (state_size(&st) <= TG_SVC_MAX_STATE_REPLY) {
        reply_state(call, &st, 0);
        goto out;
    }
    /* first: everything but the data sources, which follow from the cursor */
    st.n_data_sources = 0;
    if (reply_state(call, &st, id > 0) != 0 || id == 0)
        goto out;
    q->next_id = 1;
    q->skip = 0;
    done = false;
out:
    free(pr);
    free(prp);
    free(ds);
    free(dsp);
    free(ts);
    free(tsp);
    free(kb);
    return done;
}

/* The data source at q's cursor (moved past producers with nothing left to send), or NULL. */
static const struct tg_svc_ds_reg *at_cursor(tg_service *svc, struct state_query *q, tg_svc_producer **owner)
{
    for (; q->next_id <= TG_SVC_MAX_PRODUCERS; q->next_id++, q->skip = 0) {
        tg_svc_producer *p = svc->producer_index[q->next_id];
        if (!p || !p->initialized)
            continue;
        size_t k = 0;
        for (const struct tg_svc_ds_reg *r = p->sources; r; r = r->next, k++) {
            if (k == q->skip) {
                *owner = p;
                return r;
            }
        }
    }
    return NULL;
}

/* One reply of data sources from the cursor (at least one, under 128 KiB). Returns true when the
 * query is answered (or cannot be). Producers and data sources that come or go meanwhile are in
 * the answer or not as the cursor finds them. */
static bool send_part(tg_service *svc, struct state_query *q)
{
    Perfetto__Protos__TracingServiceState__DataSource *ds = NULL, **dsp = NULL;
    size_t n = 0, cap = 0, bytes = 16;
    tg_svc_producer *p = NULL;
    const struct tg_svc_ds_reg *r = at_cursor(svc, q, &p);
    while (r) {
        size_t one = protobuf_c_message_get_packed_size(&r->desc->base) + 16;
        if (n > 0 && bytes + one > TG_SVC_MAX_STATE_REPLY)
            break;
        if (n == cap) {
            size_t ncap = cap ? cap * 2 : 64;
            void *nd = realloc(ds, ncap * sizeof *ds), *np = nd ? realloc(dsp, ncap * sizeof *dsp) : NULL;
            if (nd)
                ds = nd;
            if (!np)
                break;
            dsp = np;
            cap = ncap;
        }
        perfetto__protos__tracing_service_state__data_source__init(&ds[n]);
        ds[n].ds_descriptor = r->desc;
        ds[n].has_producer_id = 1;
        ds[n].producer_id = p->id;
        n++;
        bytes += one;
        q->skip++;
        r = r->next;
        if (!r)
            r = at_cursor(svc, q, &p);
    }
    for (size_t i = 0; i < n; i++)
        dsp[i] = &ds[i]; /* (ds may have moved while it grew) */
    bool more = r != NULL && n > 0;
    Perfetto__Protos__TracingServiceState part = PERFETTO__PROTOS__TRACING_SERVICE_STATE__INIT;
    part.data_sources = dsp;
    part.n_data_sources = n;
    bool done = reply_state(q->call, &part, more) != 0 || !more;
    free(ds);
    free(dsp);
    return done;
}

static void query_free(struct state_query *q)
{
    free(q);
}

/* Answers c's queries, oldest first, while its output is under the high watermark. */
static void pump(struct tg_svc_state_queries *qs)
{
    tg_svc_consumer *c = qs->c;
    while (qs->head) {
        struct state_query *q = qs->head;
        if (tg_conn_is_congested(tg_ipc_peer_conn(tg_ipc_call_peer(q->call))))
            return; /* tg_svc_query_state_drained goes on */
        bool done = q->head_sent ? send_part(c->svc, q) : send_head(c->svc, c, q);
        if (!done)
            continue;
        qs->head = q->next;
        if (!qs->head)
            qs->tail = &qs->head;
        query_free(q);
    }
}

static void on_pump(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    pump(arg);
}

void tg_svc_query_service_state(tg_service *svc, tg_svc_consumer *c, tg_ipc_call *call, bool sessions_only)
{
    struct tg_svc_state_queries *qs = c->queries;
    if (!qs) {
        qs = calloc(1, sizeof *qs);
        if (qs) {
            qs->c = c;
            qs->tail = &qs->head;
            qs->ev = evtimer_new(svc->base, on_pump, qs);
            if (!qs->ev) {
                free(qs);
                qs = NULL;
            }
        }
        c->queries = qs;
    }
    struct state_query *q = qs ? calloc(1, sizeof *q) : NULL;
    if (!q) {
        tg_ipc_call_reject(call);
        return;
    }
    q->call = call;
    q->sessions_only = sessions_only;
    *qs->tail = q;
    qs->tail = &q->next;
    pump(qs);
}

void tg_svc_query_state_drained(tg_svc_consumer *c)
{
    struct tg_svc_state_queries *qs = c->queries;
    if (!qs || !qs->head)
        return;
    struct timeval tv = {0, 0};
    evtimer_add(qs->ev, &tv); /* from the loop, not from inside the connection's write */
}

void tg_svc_query_state_cancel(tg_svc_consumer *c)
{
    struct tg_svc_state_queries *qs = c->queries;
    if (!qs)
        return;
    c->queries = NULL;
    while (qs->head) { /* their calls die with the peer */
        struct state_query *q = qs->head;
        qs->head = q->next;
        query_free(q);
    }
    event_free(qs->ev);
    free(qs);
}
