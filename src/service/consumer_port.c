/* consumer_port.c: the ConsumerPort IPC service (15 methods, traced's
 * semantics from perfetto-wire-facts §3): one session per consumer
 * connection, the deferred EnableTracing reply, Start/Disable/Flush/
 * ChangeTraceConfig, ReadBuffers/FreeBuffers, Detach/Attach by key,
 * GetTraceStats, ObserveEvents, QueryServiceState/Capabilities,
 * SaveTraceForBugreport and CloneSession. */
#include "service/svc.h"

#include "observable_events.pb-c.h"
#include "tracing_service_capabilities.pb-c.h"

#include "tracegate/log.h"
#include "tracegate/pbwire.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ------------------------------------------------------------ notifications */

static void reply_enable(tg_ipc_call *call, const char *error)
{
    Perfetto__Protos__EnableTracingResponse r = PERFETTO__PROTOS__ENABLE_TRACING_RESPONSE__INIT;
    r.state_case = PERFETTO__PROTOS__ENABLE_TRACING_RESPONSE__STATE_DISABLED;
    r.disabled = 1;
    if (error && *error)
        r.error = (char *)error;
    tg_ipc_call_reply(call, &r.base, 0, -1);
}

void tg_svc_consumer_notify_disabled(tg_svc_consumer *c, const char *error)
{
    tg_ipc_call *call = c->enable_call;
    if (!call)
        return;
    c->enable_call = NULL;
    reply_enable(call, error);
}

static void send_events(tg_svc_consumer *c, Perfetto__Protos__ObservableEvents *ev)
{
    Perfetto__Protos__ObserveEventsResponse r = PERFETTO__PROTOS__OBSERVE_EVENTS_RESPONSE__INIT;
    r.events = ev;
    tg_ipc_call_reply(c->observe_call, &r.base, 1, -1);
}

void tg_svc_consumer_notify_instance(tg_svc_consumer *c, const tg_svc_ds_inst *ds, int started)
{
    if (!c->observe_call || !(c->observe_mask & PERFETTO__PROTOS__OBSERVABLE_EVENTS__TYPE__TYPE_DATA_SOURCES_INSTANCES))
        return;
    Perfetto__Protos__ObservableEvents__DataSourceInstanceStateChange ch =
        PERFETTO__PROTOS__OBSERVABLE_EVENTS__DATA_SOURCE_INSTANCE_STATE_CHANGE__INIT;
    ch.producer_name = ds->producer_name;
    ch.data_source_name = ds->name;
    ch.has_state = 1;
    ch.state = started ? PERFETTO__PROTOS__OBSERVABLE_EVENTS__DATA_SOURCE_INSTANCE_STATE__DATA_SOURCE_INSTANCE_STATE_STARTED
                       : PERFETTO__PROTOS__OBSERVABLE_EVENTS__DATA_SOURCE_INSTANCE_STATE__DATA_SOURCE_INSTANCE_STATE_STOPPED;
    Perfetto__Protos__ObservableEvents__DataSourceInstanceStateChange *chp = &ch;
    Perfetto__Protos__ObservableEvents ev = PERFETTO__PROTOS__OBSERVABLE_EVENTS__INIT;
    ev.n_instance_state_changes = 1;
    ev.instance_state_changes = &chp;
    send_events(c, &ev);
}

void tg_svc_consumer_notify_all_started(tg_svc_consumer *c)
{
    if (!c->observe_call ||
        !(c->observe_mask & PERFETTO__PROTOS__OBSERVABLE_EVENTS__TYPE__TYPE_ALL_DATA_SOURCES_STARTED))
        return;
    Perfetto__Protos__ObservableEvents ev = PERFETTO__PROTOS__OBSERVABLE_EVENTS__INIT;
    ev.has_all_data_sources_started = 1;
    ev.all_data_sources_started = 1;
    send_events(c, &ev);
}

void tg_svc_consumer_cancel_read(tg_svc_consumer *c)
{
    tg_svc_read_buffers_cancel(c);
}

/* ------------------------------------------------------------ lifecycle */

static void *consumer_open(tg_ipc_peer *peer, void *svc_ctx)
{
    tg_service *svc = svc_ctx;
    tg_svc_consumer *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->svc = svc;
    c->peer = peer;
    tg_svc_peer_nodelay(peer);
    c->uid = (int32_t)tg_ipc_peer_uid(peer);
    snprintf(c->principal, sizeof c->principal, "%s", tg_ipc_peer_principal(peer));
    c->privileged = tg_ipc_peer_privileged(peer);
    c->next = svc->consumers;
    svc->consumers = c;
    return c;
}

static void consumer_drain(tg_ipc_peer *peer, void *state, void *svc_ctx)
{
    (void)peer;
    (void)svc_ctx;
    if (state) {
        tg_svc_read_buffers_drained(state);
        tg_svc_query_state_drained(state);
    }
}

static void consumer_close(tg_ipc_peer *peer, void *state, void *svc_ctx)
{
    tg_service *svc = svc_ctx;
    tg_svc_consumer *c = state;
    if (!c)
        return;
    tg_svc_read_buffers_cancel(c);
    tg_svc_query_state_cancel(c);
    c->observe_call = NULL;
    c->enable_call = NULL;
    /* calls of this peer waiting on flushes (Flush, CloneSession) die with it */
    for (tg_svc_session *s = svc->sessions; s; s = s->next)
        for (tg_svc_flush *f = s->flushes; f; f = f->next)
            if (f->call && tg_ipc_call_peer(f->call) == peer)
                f->call = NULL;
    tg_svc_session *s = c->session;
    if (s) {
        c->session = NULL;
        s->consumer = NULL;
        s->disable_notified = true;
        tg_info(TG_SVC_LOG, "session %llu: consumer disconnected, tearing down", (unsigned long long)s->id);
        tg_svc_session_free(s);
    }
    for (tg_svc_consumer **pp = &svc->consumers; *pp; pp = &(*pp)->next) {
        if (*pp == c) {
            *pp = c->next;
            break;
        }
    }
    free(c);
}

/* ------------------------------------------------------------ methods */

static void m_enable_tracing(tg_ipc_call *call, const ProtobufCMessage *msg, void *svc_ctx, void *peer_state)
{
    tg_service *svc = svc_ctx;
    tg_svc_consumer *c = peer_state;
    const Perfetto__Protos__EnableTracingRequest *req = (const void *)msg;
    int fd = tg_ipc_peer_take_fd(tg_ipc_call_peer(call));
    if (!c) {
        if (fd >= 0)
            close(fd);
        tg_ipc_call_reject(call);
        return;
    }
    if (req->has_attach_notification_only && req->attach_notification_only) {
        if (fd >= 0)
            close(fd);
        if (c->enable_call) {
            tg_ipc_call *old = c->enable_call;
            c->enable_call = NULL;
            tg_ipc_call_reject(old);
        }
        c->enable_call = call;
        tg_svc_session *s = c->session;
        if (s && s->state == TG_SESS_DISABLED && !s->disable_notified) {
            s->disable_notified = true;
            tg_svc_consumer_notify_disabled(c, s->error);
        }
        return;
    }
    if (c->session) {
        if (fd >= 0)
            close(fd);
        reply_enable(call, "A tracing session is already active for this consumer");
        return;
    }
    const Perfetto__Protos__TraceConfig *cfg = req->trace_config;
    if (!cfg) {
        if (fd >= 0)
            close(fd);
        reply_enable(call, "EnableTracing without a trace config");
        return;
    }
    if (cfg->n_activate_triggers > 0) {
        if (fd >= 0)
            close(fd);
        tg_svc_activate_triggers(svc, cfg->activate_triggers, cfg->n_activate_triggers, "", c->uid);
        reply_enable(call, NULL);
        return;
    }
    /* the consumer's own config bytes (field 1 of the request), when unique */
    size_t args_len = 0, raw_len = 0;
    const uint8_t *args = tg_ipc_call_args(call, &args_len), *raw = NULL;
    struct tg_pb_reader rd;
    struct tg_pb_field fl;
    int occurrences = 0;
    tg_pb_reader_init(&rd, args, args ? args_len : 0);
    while (args && tg_pb_next(&rd, &fl) == 1) {
        if (fl.number == 1 && fl.wire == TG_PB_LEN) {
            raw = fl.data;
            raw_len = fl.len;
            occurrences++;
        }
    }
    if (occurrences != 1)
        raw = NULL;
    char err[256] = "";
    tg_svc_session *s = tg_svc_session_create(svc, c, cfg, raw, raw_len, fd, err, sizeof err);
    if (!s) {
        tg_info(TG_SVC_LOG, "EnableTracing refused: %s", err);
        reply_enable(call, err);
        return;
    }
    c->session = s;
    c->enable_call = call;
    if (!(cfg->has_deferred_start && cfg->deferred_start) && !s->waiting_start_trigger)
        tg_svc_session_start(s);
}

static void m_disable_tracing(tg_ipc_call *call, const ProtobufCMessage *msg, void *svc_ctx, void *peer_state)
{
    tg_svc_consumer *c = peer_state;
    (void)msg;
    (void)svc_ctx;
    tg_ipc_call_reply(call, NULL, 0, -1);
    if (c && c->session)
        tg_svc_session_disable(c->session, NULL);
}

static void reply_empty_final(tg_ipc_call *call)
{
    tg_ipc_call_reply(call, NULL, 0, -1);
}

static void m_read_buffers(tg_ipc_call *call, const ProtobufCMessage *msg, void *svc_ctx, void *peer_state)
{
    tg_svc_consumer *c = peer_state;
    (void)msg;
    (void)svc_ctx;
    if (!c || c->read) {
        tg_ipc_call_reject(call);
        return;
    }
    tg_svc_session *s = c->session;
    if (!s || s->write_into_file || s->waiting_start_trigger) {
        reply_empty_final(call);
        return;
    }
    tg_svc_read_buffers_start(c, s, call);
}

static void m_free_buffers(tg_ipc_call *call, const ProtobufCMessage *msg, void *svc_ctx, void *peer_state)
{
    tg_svc_consumer *c = peer_state;
    (void)msg;
    (void)svc_ctx;
    if (c && c->session) {
        tg_svc_session *s = c->session;
        tg_svc_session_free(s);
    }
    tg_ipc_call_reply(call, NULL, 0, -1);
}

static void consumer_flush_done(tg_svc_session *s, tg_svc_flush *f, bool ok)
{
    (void)s;
    tg_ipc_call *call = f->call;
    f->call = NULL;
    if (!call)
        return;
    if (ok)
        tg_ipc_call_reply(call, NULL, 0, -1);
    else
        tg_ipc_call_reject(call);
}

static void m_flush(tg_ipc_call *call, const ProtobufCMessage *msg, void *svc_ctx, void *peer_state)
{
    tg_svc_consumer *c = peer_state;
    const Perfetto__Protos__FlushRequest *req = (const void *)msg;
    (void)svc_ctx;
    if (!c || !c->session || c->session->state != TG_SESS_STARTED) {
        tg_ipc_call_reject(call);
        return;
    }
    uint32_t timeout = req->has_timeout_ms ? req->timeout_ms : 0;
    uint64_t flags = req->has_flags ? req->flags : 0;
    if (tg_svc_session_flush(c->session, timeout, flags, consumer_flush_done, call, NULL) != 0) {
        /* fails at once, like one that timed out */
        tg_debug(TG_SVC_LOG, "session %llu: Flush refused: %u flushes are waiting", (unsigned long long)c->session->id,
                 TG_SVC_MAX_PENDING_FLUSHES);
        tg_ipc_call_reject(call);
    }
}

static void m_start_tracing(tg_ipc_call *call, const ProtobufCMessage *msg, void *svc_ctx, void *peer_state)
{
    tg_svc_consumer *c = peer_state;
    (void)msg;
    (void)svc_ctx;
    tg_ipc_call_reply(call, NULL, 0, -1);
    /* with a START_TRACING trigger only the trigger starts the session */
    if (c && c->session && !c->session->waiting_start_trigger)
        tg_svc_session_start(c->session);
}

static void m_change_trace_config(tg_ipc_call *call, const ProtobufCMessage *msg, void *svc_ctx, void *peer_state)
{
    tg_svc_consumer *c = peer_state;
    const Perfetto__Protos__ChangeTraceConfigRequest *req = (const void *)msg;
    (void)svc_ctx;
    if (!c || !c->session || !req->trace_config || c->session->read_only) {
        tg_ipc_call_reject(call);
        return;
    }
    tg_svc_session_change_config(c->session, req->trace_config);
    tg_ipc_call_reply(call, NULL, 0, -1);
}

static void m_detach(tg_ipc_call *call, const ProtobufCMessage *msg, void *svc_ctx, void *peer_state)
{
    tg_service *svc = svc_ctx;
    tg_svc_consumer *c = peer_state;
    const Perfetto__Protos__DetachRequest *req = (const void *)msg;
    const char *key = req->key ? req->key : "";
    if (!c || !c->session || c->session->read_only) {
        tg_ipc_call_reject(call);
        return;
    }
    for (tg_svc_session *s = svc->sessions; s; s = s->next) {
        if (s->detach_key && tg_svc_same_principal(s, c) && strcmp(s->detach_key, key) == 0) {
            tg_ipc_call_reject(call); /* key already taken */
            return;
        }
    }
    tg_svc_session *s = c->session;
    char *k = strdup(key);
    if (!k) {
        tg_ipc_call_reject(call);
        return;
    }
    tg_svc_read_buffers_cancel(c);
    s->detach_key = k;
    s->consumer = NULL;
    c->session = NULL;
    tg_info(TG_SVC_LOG, "session %llu detached with key \"%s\"", (unsigned long long)s->id, key);
    tg_ipc_call_reply(call, NULL, 0, -1);
}

static void m_attach(tg_ipc_call *call, const ProtobufCMessage *msg, void *svc_ctx, void *peer_state)
{
    tg_service *svc = svc_ctx;
    tg_svc_consumer *c = peer_state;
    const Perfetto__Protos__AttachRequest *req = (const void *)msg;
    const char *key = req->key ? req->key : "";
    if (!c || c->session) {
        tg_ipc_call_reject(call);
        return;
    }
    for (tg_svc_session *s = svc->sessions; s; s = s->next) {
        if (!s->detach_key || !tg_svc_same_principal(s, c) || strcmp(s->detach_key, key) != 0)
            continue;
        free(s->detach_key);
        s->detach_key = NULL;
        s->consumer = c;
        c->session = s;
        tg_info(TG_SVC_LOG, "session %llu re-attached", (unsigned long long)s->id);
        /* AttachResponse{trace_config} with the session's config bytes */
        uint8_t *buf = malloc(s->cfg_len + 16);
        if (!buf) {
            tg_ipc_call_reject(call);
            return;
        }
        size_t o = tg_pb_put_tag(buf, 1, TG_PB_LEN);
        o += tg_pb_put_varint(buf + o, s->cfg_len);
        memcpy(buf + o, s->cfg_bytes, s->cfg_len);
        tg_ipc_call_reply_bytes(call, buf, o + s->cfg_len, 0, -1);
        free(buf);
        return;
    }
    tg_ipc_call_reject(call);
}

static void m_get_trace_stats(tg_ipc_call *call, const ProtobufCMessage *msg, void *svc_ctx, void *peer_state)
{
    tg_svc_consumer *c = peer_state;
    (void)msg;
    (void)svc_ctx;
    size_t n = 0;
    uint8_t *st = c && c->session ? tg_svc_trace_stats(c->session, &n) : NULL;
    if (!st) {
        tg_ipc_call_reject(call);
        return;
    }
    uint8_t *buf = malloc(n + 16);
    if (!buf) {
        free(st);
        tg_ipc_call_reject(call);
        return;
    }
    size_t o = tg_pb_put_tag(buf, 1, TG_PB_LEN);
    o += tg_pb_put_varint(buf + o, n);
    memcpy(buf + o, st, n);
    tg_ipc_call_reply_bytes(call, buf, o + n, 0, -1);
    free(buf);
    free(st);
}

static void m_observe_events(tg_ipc_call *call, const ProtobufCMessage *msg, void *svc_ctx, void *peer_state)
{
    tg_svc_consumer *c = peer_state;
    const Perfetto__Protos__ObserveEventsRequest *req = (const void *)msg;
    (void)svc_ctx;
    if (!c) {
        tg_ipc_call_reject(call);
        return;
    }
    if (c->observe_call) {
        tg_ipc_call *old = c->observe_call;
        c->observe_call = NULL;
        tg_ipc_call_reply(old, NULL, 0, -1);
    }
    uint32_t mask = 0;
    for (size_t i = 0; i < req->n_events_to_observe; i++)
        mask |= (uint32_t)req->events_to_observe[i];
    mask &= 7u;
    if (!mask) {
        tg_ipc_call_reply(call, NULL, 0, -1);
        return;
    }
    c->observe_call = call;
    c->observe_mask = mask;
    /* report what already happened */
    tg_svc_session *s = c->session;
    if (s) {
        for (tg_svc_ds_inst *ds = s->instances; ds; ds = ds->next)
            if (ds->state == TG_DS_STARTED)
                tg_svc_consumer_notify_instance(c, ds, 1);
        if (s->all_started_notified)
            tg_svc_consumer_notify_all_started(c);
    }
}

static void m_query_service_state(tg_ipc_call *call, const ProtobufCMessage *msg, void *svc_ctx, void *peer_state)
{
    tg_svc_consumer *c = peer_state;
    const Perfetto__Protos__QueryServiceStateRequest *req = (const void *)msg;
    if (!c) {
        tg_ipc_call_reject(call);
        return;
    }
    tg_svc_query_service_state(svc_ctx, c, call, req->has_sessions_only && req->sessions_only);
}

static void m_query_capabilities(tg_ipc_call *call, const ProtobufCMessage *msg, void *svc_ctx, void *peer_state)
{
    (void)msg;
    (void)svc_ctx;
    (void)peer_state;
    Perfetto__Protos__ObservableEvents__Type types[] = {
        PERFETTO__PROTOS__OBSERVABLE_EVENTS__TYPE__TYPE_DATA_SOURCES_INSTANCES,
        PERFETTO__PROTOS__OBSERVABLE_EVENTS__TYPE__TYPE_ALL_DATA_SOURCES_STARTED,
        PERFETTO__PROTOS__OBSERVABLE_EVENTS__TYPE__TYPE_CLONE_TRIGGER_HIT,
    };
    Perfetto__Protos__TracingServiceCapabilities caps = PERFETTO__PROTOS__TRACING_SERVICE_CAPABILITIES__INIT;
    caps.has_has_query_capabilities = 1;
    caps.has_query_capabilities = 1;
    caps.n_observable_events = 3;
    caps.observable_events = types;
    caps.has_has_trace_config_output_path = 1;
    caps.has_trace_config_output_path = 1;
    caps.has_has_clone_session = 1;
    caps.has_clone_session = 1;
    Perfetto__Protos__QueryCapabilitiesResponse r = PERFETTO__PROTOS__QUERY_CAPABILITIES_RESPONSE__INIT;
    r.capabilities = &caps;
    tg_ipc_call_reply(call, &r.base, 0, -1);
}

static void m_save_trace_for_bugreport(tg_ipc_call *call, const ProtobufCMessage *msg, void *svc_ctx,
                                       void *peer_state)
{
    (void)msg;
    (void)svc_ctx;
    (void)peer_state;
    Perfetto__Protos__SaveTraceForBugreportResponse r = PERFETTO__PROTOS__SAVE_TRACE_FOR_BUGREPORT_RESPONSE__INIT;
    r.has_success = 1;
    r.success = 0;
    r.msg = (char *)"not supported";
    tg_ipc_call_reply(call, &r.base, 0, -1);
}

static void reply_clone(tg_ipc_call *call, const tg_svc_session *clone, bool was_wif, const char *error)
{
    Perfetto__Protos__CloneSessionResponse r = PERFETTO__PROTOS__CLONE_SESSION_RESPONSE__INIT;
    r.has_success = 1;
    r.success = clone != NULL;
    if (clone) {
        r.has_uuid_msb = 1;
        r.uuid_msb = clone->uuid_msb;
        r.has_uuid_lsb = 1;
        r.uuid_lsb = clone->uuid_lsb;
        r.has_was_write_into_file = 1;
        r.was_write_into_file = was_wif;
    } else {
        r.error = (char *)(error ? error : "clone failed");
    }
    tg_ipc_call_reply(call, &r.base, 0, -1);
}

/* Read-only clones a principal holds: they are not counted with its sessions (a principal at
 * its quota may still clone), so they have their own. */
/* Read-only clones held by `principal` (NULL: by anyone). */
static int count_clones(const tg_service *svc, const char *principal)
{
    int n = 0;
    for (const tg_svc_session *s = svc->sessions; s; s = s->next)
        if (s->read_only && (!principal || strcmp(s->principal, principal) == 0))
            n++;
    return n;
}

static void do_clone(tg_svc_session *src, tg_svc_consumer *c, tg_ipc_call *call)
{
    if (c->session) {
        reply_clone(call, NULL, false, "The consumer is already attached to another tracing session");
        return;
    }
    char err[200] = "";
    if (count_clones(c->svc, c->principal) >= TG_SVC_MAX_CLONES_PER_UID) {
        snprintf(err, sizeof err, "Too many cloned sessions for %s (%d)", c->principal, TG_SVC_MAX_CLONES_PER_UID);
        tg_info(TG_SVC_LOG, "CloneSession refused: %s", err);
        reply_clone(call, NULL, false, err);
        return;
    }
    if (count_clones(c->svc, NULL) >= TG_SVC_MAX_CLONES) {
        snprintf(err, sizeof err, "Too many cloned sessions (%d)", TG_SVC_MAX_CLONES);
        tg_info(TG_SVC_LOG, "CloneSession refused: %s", err);
        reply_clone(call, NULL, false, err);
        return;
    }
    tg_svc_session *cl = tg_svc_session_clone(src, c, err, sizeof err);
    if (!cl) {
        reply_clone(call, NULL, false, err);
        return;
    }
    c->session = cl;
    reply_clone(call, cl, src->write_into_file, NULL);
}

static void clone_flush_done(tg_svc_session *s, tg_svc_flush *f, bool ok)
{
    (void)ok; /* traced clones whatever arrived, even after a flush timeout */
    tg_ipc_call *call = f->call;
    f->call = NULL;
    if (!call)
        return; /* the consumer left meanwhile */
    do_clone(s, f->arg, call);
}

static void m_clone_session(tg_ipc_call *call, const ProtobufCMessage *msg, void *svc_ctx, void *peer_state)
{
    tg_service *svc = svc_ctx;
    tg_svc_consumer *c = peer_state;
    const Perfetto__Protos__CloneSessionRequest *req = (const void *)msg;
    int fd = tg_ipc_peer_take_fd(tg_ipc_call_peer(call));
    if (fd >= 0)
        close(fd); /* only used for write_into_file clones, which we do not write */
    if (!c) {
        tg_ipc_call_reject(call);
        return;
    }
    if (c->session) {
        reply_clone(call, NULL, false, "The consumer is already attached to another tracing session");
        return;
    }
    tg_svc_session *src = NULL;
    for (tg_svc_session *s = svc->sessions; s && !src; s = s->next) {
        if (s->read_only)
            continue;
        if (req->selector_case == PERFETTO__PROTOS__CLONE_SESSION_REQUEST__SELECTOR_SESSION_ID &&
            s->id == req->session_id)
            src = s;
        else if (req->selector_case == PERFETTO__PROTOS__CLONE_SESSION_REQUEST__SELECTOR_UNIQUE_SESSION_NAME &&
                 req->unique_session_name && s->cfg->unique_session_name &&
                 strcmp(req->unique_session_name, s->cfg->unique_session_name) == 0)
            src = s;
    }
    if (!src) {
        reply_clone(call, NULL, false, "Tracing session not found");
        return;
    }
    if (!tg_svc_may_see(c, src)) {
        reply_clone(call, NULL, false, "Not allowed to clone a session from another UID");
        return;
    }
    if (src->state == TG_SESS_STARTED) {
        if (tg_svc_session_flush(src, 0, TG_FLUSH_REASON_TRACE_CLONE | TG_FLUSH_INITIATOR_TRACED, clone_flush_done,
                                 call, c) != 0) {
            char err[160];
            snprintf(err, sizeof err,
                     "Too many flushes waiting on tracing session %llu (%u): its producers have not answered; "
                     "try again later",
                     (unsigned long long)src->id, TG_SVC_MAX_PENDING_FLUSHES);
            tg_debug(TG_SVC_LOG, "CloneSession refused: %s", err); /* the caller is told; may come in floods */
            reply_clone(call, NULL, false, err);
        }
        return;
    }
    do_clone(src, c, call);
}

/* Declaration order of ConsumerPort = method ids 1..15. */
static const struct tg_ipc_method k_methods[] = {
    {"EnableTracing", &perfetto__protos__enable_tracing_request__descriptor, m_enable_tracing},
    {"DisableTracing", &perfetto__protos__disable_tracing_request__descriptor, m_disable_tracing},
    {"ReadBuffers", &perfetto__protos__read_buffers_request__descriptor, m_read_buffers},
    {"FreeBuffers", &perfetto__protos__free_buffers_request__descriptor, m_free_buffers},
    {"Flush", &perfetto__protos__flush_request__descriptor, m_flush},
    {"StartTracing", &perfetto__protos__start_tracing_request__descriptor, m_start_tracing},
    {"ChangeTraceConfig", &perfetto__protos__change_trace_config_request__descriptor, m_change_trace_config},
    {"Detach", &perfetto__protos__detach_request__descriptor, m_detach},
    {"Attach", &perfetto__protos__attach_request__descriptor, m_attach},
    {"GetTraceStats", &perfetto__protos__get_trace_stats_request__descriptor, m_get_trace_stats},
    {"ObserveEvents", &perfetto__protos__observe_events_request__descriptor, m_observe_events},
    {"QueryServiceState", &perfetto__protos__query_service_state_request__descriptor, m_query_service_state},
    {"QueryCapabilities", &perfetto__protos__query_capabilities_request__descriptor, m_query_capabilities},
    {"SaveTraceForBugreport", &perfetto__protos__save_trace_for_bugreport_request__descriptor,
     m_save_trace_for_bugreport},
    {"CloneSession", &perfetto__protos__clone_session_request__descriptor, m_clone_session},
};

const struct tg_ipc_service_def tg_svc_consumer_port_def = {
    .name = "ConsumerPort",
    .methods = k_methods,
    .n_methods = sizeof k_methods / sizeof k_methods[0],
    .peer_open = consumer_open,
    .peer_close = consumer_close,
    .peer_drain = consumer_drain,
};
