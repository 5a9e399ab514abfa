/* service_state.c: QueryServiceState: producers (id, name, uid, pid,
 * sdk_version, machine), registered data sources, sessions visible to the
 * caller. Sent whole when it fits one reply; otherwise the first reply holds
 * everything but data_sources and the following ones batches of
 * data_sources, each under 128 KiB (§3.3). */
#include "service/svc.h"

#include "tracing_service_state.pb-c.h"

#include <stdlib.h>
#include <string.h>

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

void tg_svc_query_service_state(tg_service *svc, tg_svc_consumer *c, tg_ipc_call *call, bool sessions_only)
{
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
    /* first: everything but the data sources */
    st.n_data_sources = 0;
    if (reply_state(call, &st, id > 0) != 0 || id == 0)
        goto out;
    Perfetto__Protos__TracingServiceState part = PERFETTO__PROTOS__TRACING_SERVICE_STATE__INIT;
    size_t start = 0;
    while (start < id) {
        size_t n = 0, bytes = 16;
        while (start + n < id) {
            size_t one = protobuf_c_message_get_packed_size(&dsp[start + n]->base) + 8;
            if (n > 0 && bytes + one > TG_SVC_MAX_STATE_REPLY)
                break;
            bytes += one;
            n++;
        }
        part.data_sources = &dsp[start];
        part.n_data_sources = n;
        start += n;
        if (reply_state(call, &part, start < id) != 0)
            break;
    }
out:
    free(pr);
    free(prp);
    free(ds);
    free(dsp);
    free(ts);
    free(tsp);
    free(kb);
}
