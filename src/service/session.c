/* session.c: tracing sessions: config validation, buffers, data source
 * instances (setup/start/stop with will_notify_* waits), the
 * flush -> stop -> disable sequence, timers (duration, periodic snapshots,
 * flush_period, incremental-state clearing, write_into_file, trigger
 * timeouts), producer arrivals and departures, ChangeTraceConfig, cloning
 * and teardown. Flushes are in flush.c, trigger matching in triggers.c. */
#include "service/svc.h"

#include "tracegate/log.h"

#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

static void instance_start(tg_svc_ds_inst *ds);
static void maybe_all_started(tg_svc_session *s);
static void maybe_disable_done(tg_svc_session *s);

/* ------------------------------------------------------------ small helpers */

const char *tg_svc_session_state_name(const tg_svc_session *s)
{
    switch (s->state) {
    case TG_SESS_CONFIGURED: return "CONFIGURED";
    case TG_SESS_STARTED: return "STARTED";
    case TG_SESS_DISABLING: return "STOPPING";
    default: return "DISABLED";
    }
}

int tg_svc_count_sessions(const tg_service *svc, const char *principal)
{
    int n = 0;
    for (const tg_svc_session *s = svc->sessions; s; s = s->next)
        if (!s->read_only && (!principal || strcmp(s->principal, principal) == 0))
            n++;
    return n;
}

bool tg_svc_same_principal(const tg_svc_session *s, const tg_svc_consumer *c)
{
    return strcmp(s->principal, c->principal) == 0;
}

bool tg_svc_may_see(const tg_svc_consumer *c, const tg_svc_session *s)
{
    return c->privileged || tg_svc_same_principal(s, c);
}

static const Perfetto__Protos__TraceConfig__BuiltinDataSource *builtin(const tg_svc_session *s)
{
    return s->cfg ? s->cfg->builtin_data_sources : NULL;
}

void tg_svc_session_event(tg_svc_session *s, enum tg_svc_event ev)
{
    const Perfetto__Protos__TraceConfig__BuiltinDataSource *b = builtin(s);
    if (b && b->has_disable_service_events && b->disable_service_events)
        return;
    struct tg_svc_pkt *pk = tg_svc_build_event(s->svc, ev);
    if (!pk)
        return;
    pk->tag = (int)ev;
    tg_svc_pkt_list_append(&s->events, pk);
    /* flushes repeat without end until the consumer reads: only the latest are kept */
    tg_svc_pkt_list_keep_latest(&s->events, (int)ev, TG_SVC_MAX_UNREAD_EVENTS_PER_KIND);
}

uint32_t tg_svc_session_seq_id(tg_svc_session *s, uint32_t producer_id, uint16_t writer_id)
{
    uint32_t key = (producer_id & 0xFFFFu) << 16 | writer_id;
    uint32_t id = tg_idmap_get(&s->seq_ids, key);
    if (!id) {
        id = s->next_seq_id++;
        if (tg_idmap_put(&s->seq_ids, key, id) != 0)
            return id;
    }
    return id;
}

static void random_uuid(int64_t *msb, int64_t *lsb)
{
    uint8_t b[16];
    if (getrandom(b, sizeof b, 0) != (ssize_t)sizeof b) {
        uint64_t t = (uint64_t)tg_svc_now_ns(6) ^ ((uint64_t)getpid() << 32);
        for (int i = 0; i < 16; i++) {
            t = t * 6364136223846793005ull + 1442695040888963407ull;
            b[i] = (uint8_t)(t >> 56);
        }
    }
    b[6] = (uint8_t)((b[6] & 0x0F) | 0x40); /* version 4 */
    b[8] = (uint8_t)((b[8] & 0x3F) | 0x80);
    uint64_t m = 0, l = 0;
    for (int i = 0; i < 8; i++) {
        m = m << 8 | b[i];
        l = l << 8 | b[8 + i];
    }
    *msb = (int64_t)m;
    *lsb = (int64_t)l;
}

static uint16_t alloc_buffer_id(tg_service *svc)
{
    for (unsigned tries = 0; tries < TG_SVC_NUM_BUFFER_IDS; tries++) {
        uint16_t id = (uint16_t)(svc->last_buffer_id + 1);
        if (id == 0)
            id = 1;
        svc->last_buffer_id = id;
        if (!svc->buf_index[id])
            return id;
    }
    return 0;
}

/* An owned copy of a config plus its serialized bytes. raw (the consumer's
 * own bytes) is kept as-is when given, so the trace_config echo and the
 * Attach reply are byte for byte what the consumer sent. */
static Perfetto__Protos__TraceConfig *copy_config(const Perfetto__Protos__TraceConfig *cfg, const uint8_t *raw,
                                                  size_t raw_len, uint8_t **bytes, size_t *len)
{
    size_t n = raw ? raw_len : protobuf_c_message_get_packed_size(&cfg->base);
    uint8_t *b = malloc(n ? n : 1);
    if (!b)
        return NULL;
    if (raw)
        memcpy(b, raw, n);
    else
        protobuf_c_message_pack(&cfg->base, b);
    Perfetto__Protos__TraceConfig *c = perfetto__protos__trace_config__unpack(NULL, n, b);
    if (!c) {
        free(b);
        return NULL;
    }
    *bytes = b;
    *len = n;
    return c;
}

/* ------------------------------------------------------------ timers */

static void on_task(evutil_socket_t fd, short what, void *arg);
static void on_duration(evutil_socket_t fd, short what, void *arg);
static void on_snapshot(evutil_socket_t fd, short what, void *arg);
static void on_flush_period(evutil_socket_t fd, short what, void *arg);
static void on_clear_inc(evutil_socket_t fd, short what, void *arg);
static void on_trigger_timeout(evutil_socket_t fd, short what, void *arg);
static void on_stop_timeout(evutil_socket_t fd, short what, void *arg);
static void on_stop_delay(evutil_socket_t fd, short what, void *arg);

static int make_timers(tg_svc_session *s)
{
    struct event_base *b = s->svc->base;
    s->ev_task = evtimer_new(b, on_task, s);
    s->ev_duration = evtimer_new(b, on_duration, s);
    s->ev_snapshot = evtimer_new(b, on_snapshot, s);
    s->ev_flush_period = evtimer_new(b, on_flush_period, s);
    s->ev_clear_inc = evtimer_new(b, on_clear_inc, s);
    s->ev_write = evtimer_new(b, tg_svc_write_timer_cb, s);
    s->ev_trigger_timeout = evtimer_new(b, on_trigger_timeout, s);
    s->ev_stop_timeout = evtimer_new(b, on_stop_timeout, s);
    s->ev_stop_delay = evtimer_new(b, on_stop_delay, s);
    return s->ev_task && s->ev_duration && s->ev_snapshot && s->ev_flush_period && s->ev_clear_inc && s->ev_write &&
                   s->ev_trigger_timeout && s->ev_stop_timeout && s->ev_stop_delay
               ? 0
               : -1;
}

static void free_timer(struct event **ev)
{
    if (*ev)
        event_free(*ev);
    *ev = NULL;
}

static void stop_running_timers(tg_svc_session *s)
{
    struct event *evs[] = {s->ev_duration,        s->ev_snapshot,   s->ev_flush_period, s->ev_clear_inc,
                           s->ev_trigger_timeout, s->ev_stop_delay, s->ev_write};
    for (size_t i = 0; i < sizeof evs / sizeof evs[0]; i++)
        if (evs[i])
            evtimer_del(evs[i]);
}

static void post_task(tg_svc_session *s)
{
    struct timeval tv = {0, 0};
    evtimer_add(s->ev_task, &tv);
}

/* ------------------------------------------------------------ instances */

static tg_svc_ds_inst *setup_instance(tg_svc_session *s, const Perfetto__Protos__TraceConfig__DataSource *cds,
                                      tg_svc_producer *p, const struct tg_svc_ds_reg *reg)
{
    const Perfetto__Protos__DataSourceConfig *dc = cds->config;
    size_t idx = dc->has_target_buffer ? dc->target_buffer : 0;
    if (dc->target_buffer_name && *dc->target_buffer_name) {
        for (size_t i = 0; i < s->cfg->n_buffers; i++)
            if (s->cfg->buffers[i]->name && strcmp(s->cfg->buffers[i]->name, dc->target_buffer_name) == 0)
                idx = i;
    }
    if (idx >= s->n_buffers)
        return NULL;
    if (tg_svc_producer_setup_tracing(p, s->cfg) != 0)
        return NULL;
    tg_svc_ds_inst *ds = calloc(1, sizeof *ds);
    if (!ds)
        return NULL;
    ds->s = s;
    ds->p = p;
    ds->producer_id = p->id;
    ds->producer_name = strdup(p->name);
    ds->name = strdup(reg->name);
    ds->buffer_id = s->buffers[idx]->id;
    ds->cfg = tg_svc_rewrite_ds_config(dc, ds->buffer_id, s, &ds->cfg_len);
    if (!ds->cfg || !ds->name || !ds->producer_name) {
        free(ds->cfg);
        free(ds->name);
        free(ds->producer_name);
        free(ds);
        return NULL;
    }
    const Perfetto__Protos__DataSourceDescriptor *d = reg->desc;
    ds->notify_start = d->has_will_notify_on_start && d->will_notify_on_start;
    ds->notify_stop = d->has_will_notify_on_stop && d->will_notify_on_stop;
    ds->handles_clear = d->has_handles_incremental_state_clear && d->handles_incremental_state_clear;
    ds->no_flush = d->has_no_flush && d->no_flush;
    ds->id = ++s->svc->last_instance_id;
    ds->state = TG_DS_CONFIGURED;
    if (!s->instances_tail)
        s->instances_tail = &s->instances;
    *s->instances_tail = ds;
    s->instances_tail = &ds->next;
    s->n_instances++;
    tg_svc_producer_allow_buffer(p, ds->buffer_id);
    tg_svc_producer_send_ds_cmd(p, 0, ds->id, ds->cfg, ds->cfg_len);
    tg_debug(TG_SVC_LOG, "session %llu: data source %s on producer %u = instance %llu (buffer %u)",
             (unsigned long long)s->id, ds->name, p->id, (unsigned long long)ds->id, ds->buffer_id);
    return ds;
}

/* Whether the session may set up one more instance on p (which already has `on_p`); logs the
 * first refusal of the session. */
static bool instance_room(tg_svc_session *s, const tg_svc_producer *p, size_t on_p, const char *ds_name)
{
    if (on_p < TG_SVC_MAX_INSTANCES_PER_PRODUCER && s->n_instances < TG_SVC_MAX_INSTANCES_PER_SESSION)
        return true;
    if (!s->instance_cap_logged) {
        s->instance_cap_logged = true;
        tg_warn(TG_SVC_LOG,
                "session %llu: data source \"%s\" of producer %u (%s) not set up: %s (further ones are skipped "
                "without a log line)",
                (unsigned long long)s->id, ds_name, p->id, p->name,
                on_p >= TG_SVC_MAX_INSTANCES_PER_PRODUCER ? "the session has 256 instances on that producer"
                                                          : "the session has 16384 data source instances");
    }
    return false;
}

static void setup_for_producer(tg_svc_session *s, tg_svc_producer *p, const struct tg_svc_ds_reg *only)
{
    size_t on_p = 0;
    for (const tg_svc_ds_inst *ds = s->instances; ds; ds = ds->next)
        on_p += ds->p == p;
    for (size_t i = 0; i < s->cfg->n_data_sources; i++) {
        const Perfetto__Protos__TraceConfig__DataSource *cds = s->cfg->data_sources[i];
        for (const struct tg_svc_ds_reg *reg = p->sources; reg; reg = reg->next) {
            if (only && reg != only)
                continue;
            if (!tg_svc_ds_matches(s->cfg, cds, p, reg))
                continue;
            if (!instance_room(s, p, on_p, reg->name))
                return;
            tg_svc_ds_inst *ds = setup_instance(s, cds, p, reg);
            on_p += ds != NULL;
            if (ds && s->state == TG_SESS_STARTED)
                instance_start(ds);
        }
    }
}

static void notify_instance(tg_svc_ds_inst *ds, int started)
{
    if (ds->s->consumer)
        tg_svc_consumer_notify_instance(ds->s->consumer, ds, started);
}

static void instance_start(tg_svc_ds_inst *ds)
{
    if (ds->state != TG_DS_CONFIGURED || !ds->p)
        return;
    tg_svc_producer_send_ds_cmd(ds->p, 1, ds->id, ds->cfg, ds->cfg_len);
    if (ds->notify_start) {
        ds->state = TG_DS_STARTING;
    } else {
        ds->state = TG_DS_STARTED;
        notify_instance(ds, 1);
    }
}

/* Sends StopDataSource; returns 1 if we must wait for NotifyDataSourceStopped. */
static int instance_stop(tg_svc_ds_inst *ds)
{
    if (ds->state == TG_DS_STOPPED || ds->state == TG_DS_STOPPING)
        return ds->state == TG_DS_STOPPING;
    bool was_running = ds->state == TG_DS_STARTED || ds->state == TG_DS_STARTING;
    if (ds->p) {
        Perfetto__Protos__GetAsyncCommandResponse cmd = PERFETTO__PROTOS__GET_ASYNC_COMMAND_RESPONSE__INIT;
        Perfetto__Protos__GetAsyncCommandResponse__StopDataSource st =
            PERFETTO__PROTOS__GET_ASYNC_COMMAND_RESPONSE__STOP_DATA_SOURCE__INIT;
        st.has_instance_id = 1;
        st.instance_id = ds->id;
        cmd.cmd_case = PERFETTO__PROTOS__GET_ASYNC_COMMAND_RESPONSE__CMD_STOP_DATA_SOURCE;
        cmd.stop_data_source = &st;
        tg_svc_producer_send_cmd(ds->p, &cmd);
    }
    if (ds->p && ds->notify_stop && was_running) {
        ds->state = TG_DS_STOPPING;
        return 1;
    }
    ds->state = TG_DS_STOPPED;
    if (was_running)
        notify_instance(ds, 0);
    return 0;
}

static void instance_free(tg_svc_ds_inst *ds)
{
    free(ds->cfg);
    free(ds->name);
    free(ds->producer_name);
    free(ds);
}

static void maybe_all_started(tg_svc_session *s)
{
    if (s->all_started_notified || s->state != TG_SESS_STARTED)
        return;
    for (tg_svc_ds_inst *ds = s->instances; ds; ds = ds->next)
        if (ds->state != TG_DS_STARTED && ds->state != TG_DS_STOPPED)
            return;
    s->all_started_notified = true;
    tg_svc_session_event(s, TG_EV_ALL_DATA_SOURCES_STARTED);
    if (s->consumer)
        tg_svc_consumer_notify_all_started(s->consumer);
}

/* ------------------------------------------------------------ create */

static int validate(tg_service *svc, tg_svc_consumer *c, const Perfetto__Protos__TraceConfig *cfg, char *err,
                    size_t errlen)
{
    if (cfg->n_buffers == 0) {
        snprintf(err, errlen, "Invalid config: no buffers");
        return -1;
    }
    if (cfg->n_buffers > TG_SVC_MAX_BUFFERS_PER_SESSION) {
        snprintf(err, errlen, "Too many buffers configured (%zu)", cfg->n_buffers);
        return -1;
    }
    if (cfg->n_data_sources > TG_SVC_MAX_CONFIG_DATA_SOURCES) {
        snprintf(err, errlen, "Too many data sources configured (%zu > %u)", cfg->n_data_sources,
                 TG_SVC_MAX_CONFIG_DATA_SOURCES);
        return -1;
    }
    uint64_t want = 0;
    for (size_t i = 0; i < cfg->n_buffers; i++) {
        if (!cfg->buffers[i]->has_size_kb || cfg->buffers[i]->size_kb == 0) {
            snprintf(err, errlen, "Invalid config: buffer %zu has size_kb 0", i);
            return -1;
        }
        want += (uint64_t)cfg->buffers[i]->size_kb * 1024u;
    }
    if (tg_svc_buffer_budget_check(svc, c, want, err, errlen) != 0)
        return -1;
    for (size_t i = 0; i < cfg->n_data_sources; i++) {
        const Perfetto__Protos__DataSourceConfig *dc = cfg->data_sources[i]->config;
        if (!dc)
            continue;
        bool named = dc->target_buffer_name && *dc->target_buffer_name;
        if (named) {
            bool found = false;
            for (size_t b = 0; b < cfg->n_buffers; b++)
                found = found || (cfg->buffers[b]->name && strcmp(cfg->buffers[b]->name, dc->target_buffer_name) == 0);
            if (!found) {
                snprintf(err, errlen, "Data source \"%s\" specified an out of bounds target_buffer_name (%s)",
                         dc->name ? dc->name : "", dc->target_buffer_name);
                return -1;
            }
        } else if (dc->has_target_buffer && dc->target_buffer >= cfg->n_buffers) {
            snprintf(err, errlen, "Data source \"%s\" specified an out of bounds target_buffer (%u >= %zu)",
                     dc->name ? dc->name : "", dc->target_buffer, cfg->n_buffers);
            return -1;
        }
    }
    uint64_t max_ms = cfg->has_enable_extra_guardrails && cfg->enable_extra_guardrails
                          ? TG_SVC_MAX_DURATION_GUARDRAILS_MS
                          : TG_SVC_MAX_DURATION_MS;
    if (cfg->has_duration_ms && cfg->duration_ms > max_ms) {
        snprintf(err, errlen, "Requested too long trace (%u ms > %llu ms)", cfg->duration_ms,
                 (unsigned long long)max_ms);
        return -1;
    }
    const Perfetto__Protos__TraceConfig__TriggerConfig *tc = cfg->trigger_config;
    if (tc && tc->has_trigger_mode &&
        (tc->trigger_mode == PERFETTO__PROTOS__TRACE_CONFIG__TRIGGER_CONFIG__TRIGGER_MODE__START_TRACING ||
         tc->trigger_mode == PERFETTO__PROTOS__TRACE_CONFIG__TRIGGER_CONFIG__TRIGGER_MODE__STOP_TRACING) &&
        (!tc->has_trigger_timeout_ms || tc->trigger_timeout_ms == 0)) {
        snprintf(err, errlen, "Traces with START_TRACING or STOP_TRACING triggers must provide a positive "
                              "trigger_timeout_ms");
        return -1;
    }
    if (tg_svc_count_sessions(svc, NULL) >= TG_SVC_MAX_SESSIONS) {
        snprintf(err, errlen, "Too many concurrent tracing sesions (%d)", TG_SVC_MAX_SESSIONS);
        return -1;
    }
    const char *who = c ? c->principal : "uid:0";
    if (tg_svc_count_sessions(svc, who) >= TG_SVC_MAX_SESSIONS_PER_UID) {
        snprintf(err, errlen, "Too many concurrent tracing sesions for %s (%d)", who, TG_SVC_MAX_SESSIONS_PER_UID);
        return -1;
    }
    if (cfg->unique_session_name && *cfg->unique_session_name) {
        for (tg_svc_session *s = svc->sessions; s; s = s->next) {
            if (!s->read_only && s->cfg->unique_session_name &&
                strcmp(s->cfg->unique_session_name, cfg->unique_session_name) == 0) {
                snprintf(err, errlen, "A trace with this unique session name (%s) already exists",
                         cfg->unique_session_name);
                return -1;
            }
        }
    }
    return 0;
}

/* A period the config set (non-zero) below `floor` runs at the floor. */
static void raise_to_floor(const tg_svc_session *s, const char *what, uint32_t *ms, uint32_t floor)
{
    if (*ms == 0 || *ms >= floor)
        return;
    tg_info(TG_SVC_LOG, "session %llu: %s %u raised to %u ms", (unsigned long long)s->id, what, *ms, floor);
    *ms = floor;
}

static tg_svc_session *session_alloc(tg_service *svc, tg_svc_consumer *c)
{
    tg_svc_session *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->svc = svc;
    s->consumer = c;
    s->uid = c ? c->uid : 0;
    snprintf(s->principal, sizeof s->principal, "%s", c ? c->principal : "uid:0");
    s->file_fd = -1;
    s->next_seq_id = 2;
    tg_svc_pkt_list_init(&s->clock_snapshots);
    tg_svc_pkt_list_init(&s->events);
    tg_svc_pkt_list_init(&s->triggers);
    if (make_timers(s) != 0) {
        tg_svc_session_free(s);
        return NULL;
    }
    return s;
}

static void link_session(tg_svc_session *s)
{
    tg_svc_session **tail = &s->svc->sessions;
    while (*tail)
        tail = &(*tail)->next;
    *tail = s;
}

tg_svc_session *tg_svc_session_create(tg_service *svc, tg_svc_consumer *c, const Perfetto__Protos__TraceConfig *cfg,
                                      const uint8_t *raw, size_t raw_len, int fd, char *err, size_t errlen)
{
    if (validate(svc, c, cfg, err, errlen) != 0) {
        if (fd >= 0)
            close(fd);
        return NULL;
    }
    bool wif = cfg->has_write_into_file && cfg->write_into_file;
    if (wif && cfg->output_path && *cfg->output_path) {
        if (fd >= 0)
            close(fd);
        if (!tg_svc_may_create_files(c)) {
            snprintf(err, errlen,
                     "output_path is honoured only for root and the service's own user (the service would "
                     "create the file with its rights; %s asked): pass an open file with the request "
                     "(perfetto -o does) or read the trace with ReadBuffers",
                     c ? c->principal : "?");
            tg_warn(TG_SVC_LOG, "EnableTracing refused: %s asked for output_path \"%s\"", c ? c->principal : "?",
                    cfg->output_path);
            return NULL;
        }
        fd = tg_svc_open_output_path(cfg->output_path, err, errlen);
        if (fd < 0)
            return NULL;
    } else if (wif && fd < 0) {
        snprintf(err, errlen, "write_into_file set but no output file was passed");
        return NULL;
    } else if (!wif && fd >= 0) {
        close(fd);
        fd = -1;
    }
    tg_svc_session *s = session_alloc(svc, c);
    if (!s) {
        if (fd >= 0)
            close(fd);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    s->file_fd = fd;
    s->write_into_file = wif;
    s->id = ++svc->last_session_id;
    s->cfg = copy_config(cfg, raw, raw_len, &s->cfg_bytes, &s->cfg_len);
    if (!s->cfg && raw)
        s->cfg = copy_config(cfg, NULL, 0, &s->cfg_bytes, &s->cfg_len);
    s->buffers = calloc(cfg->n_buffers, sizeof *s->buffers);
    if (!s->cfg || !s->buffers) {
        tg_svc_session_free(s);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    for (size_t i = 0; i < cfg->n_buffers; i++) {
        const Perfetto__Protos__TraceConfig__BufferConfig *bc = cfg->buffers[i];
        enum tg_tb_fill_policy pol =
            bc->has_fill_policy && bc->fill_policy == PERFETTO__PROTOS__TRACE_CONFIG__BUFFER_CONFIG__FILL_POLICY__DISCARD
                ? TG_TB_DISCARD
                : TG_TB_RING_BUFFER;
        tg_svc_buffer *b = calloc(1, sizeof *b);
        uint16_t id = alloc_buffer_id(svc);
        struct tg_trace_buffer *tb = b && id ? tg_trace_buffer_new((size_t)bc->size_kb * 1024u, pol) : NULL;
        if (!tb) {
            free(b);
            snprintf(err, errlen, "Failed to allocate tracing buffer %zu (%u KB)", i, bc->size_kb);
            tg_svc_session_free(s);
            return NULL;
        }
        b->id = id;
        b->s = s;
        b->tb = tb;
        b->bytes = (uint64_t)bc->size_kb * 1024u;
        svc->buffer_bytes += b->bytes;
        svc->buf_index[id] = b;
        s->buffers[s->n_buffers++] = b;
    }
    if ((cfg->has_trace_uuid_msb && cfg->trace_uuid_msb) || (cfg->has_trace_uuid_lsb && cfg->trace_uuid_lsb)) {
        s->uuid_msb = cfg->trace_uuid_msb;
        s->uuid_lsb = cfg->trace_uuid_lsb;
    } else {
        random_uuid(&s->uuid_msb, &s->uuid_lsb);
    }
    s->flush_timeout_ms = cfg->has_flush_timeout_ms && cfg->flush_timeout_ms ? cfg->flush_timeout_ms
                                                                             : TG_SVC_DEFAULT_FLUSH_TIMEOUT_MS;
    s->stop_timeout_ms = cfg->has_data_source_stop_timeout_ms && cfg->data_source_stop_timeout_ms
                             ? cfg->data_source_stop_timeout_ms
                             : TG_SVC_DEFAULT_STOP_TIMEOUT_MS;
    const Perfetto__Protos__TraceConfig__BuiltinDataSource *bi = cfg->builtin_data_sources;
    s->snapshot_ms = bi && bi->has_snapshot_interval_ms && bi->snapshot_interval_ms ? bi->snapshot_interval_ms
                                                                                    : TG_SVC_DEFAULT_SNAPSHOT_MS;
    s->flush_period_ms = cfg->has_flush_period_ms ? cfg->flush_period_ms : 0;
    const Perfetto__Protos__TraceConfig__IncrementalStateConfig *isc = cfg->incremental_state_config;
    s->clear_period_ms = isc && isc->has_clear_period_ms ? isc->clear_period_ms : 0;
    raise_to_floor(s, "builtin_data_sources.snapshot_interval_ms", &s->snapshot_ms, TG_SVC_MIN_SNAPSHOT_MS);
    raise_to_floor(s, "flush_period_ms", &s->flush_period_ms, TG_SVC_MIN_FLUSH_PERIOD_MS);
    raise_to_floor(s, "incremental_state_config.clear_period_ms", &s->clear_period_ms, TG_SVC_MIN_CLEAR_PERIOD_MS);
    s->write_period_ms = cfg->has_file_write_period_ms && cfg->file_write_period_ms ? cfg->file_write_period_ms
                                                                                     : TG_SVC_DEFAULT_WRITE_PERIOD_MS;
    if (s->write_period_ms < TG_SVC_MIN_WRITE_PERIOD_MS)
        s->write_period_ms = TG_SVC_MIN_WRITE_PERIOD_MS;
    s->max_file_size = cfg->has_max_file_size_bytes ? cfg->max_file_size_bytes : 0;
    s->state = TG_SESS_CONFIGURED;
    link_session(s);
    tg_info(TG_SVC_LOG, "session %llu created (uid %d, %zu buffers, %zu data sources, %u ms)",
            (unsigned long long)s->id, s->uid, s->n_buffers, cfg->n_data_sources,
            cfg->has_duration_ms ? cfg->duration_ms : 0);

    tg_svc_snapshot_clocks(s);
    for (tg_svc_producer *p = svc->producers; p; p = p->next)
        if (p->initialized)
            setup_for_producer(s, p, NULL);

    const Perfetto__Protos__TraceConfig__TriggerConfig *tc = cfg->trigger_config;
    if (tc && tc->has_trigger_mode &&
        tc->trigger_mode == PERFETTO__PROTOS__TRACE_CONFIG__TRIGGER_CONFIG__TRIGGER_MODE__START_TRACING) {
        s->waiting_start_trigger = true;
        tg_svc_timer_set(s->ev_trigger_timeout, tc->trigger_timeout_ms);
    }
    return s;
}

/* ------------------------------------------------------------ start */

void tg_svc_session_start(tg_svc_session *s)
{
    if (s->state != TG_SESS_CONFIGURED || s->read_only)
        return;
    const Perfetto__Protos__TraceConfig *cfg = s->cfg;
    s->state = TG_SESS_STARTED;
    s->waiting_start_trigger = false;
    evtimer_del(s->ev_trigger_timeout);
    s->start_realtime_ns = tg_svc_now_ns(1);
    tg_svc_snapshot_clocks(s);
    tg_svc_queue_sync_marker(s);
    tg_svc_session_event(s, TG_EV_TRACING_STARTED);
    for (tg_svc_ds_inst *ds = s->instances; ds; ds = ds->next)
        instance_start(ds);

    const Perfetto__Protos__TraceConfig__TriggerConfig *tc = cfg->trigger_config;
    bool stop_mode = tc && tc->has_trigger_mode &&
                     tc->trigger_mode == PERFETTO__PROTOS__TRACE_CONFIG__TRIGGER_CONFIG__TRIGGER_MODE__STOP_TRACING;
    if (stop_mode)
        tg_svc_timer_set(s->ev_trigger_timeout, tc->trigger_timeout_ms);
    if (cfg->has_duration_ms && cfg->duration_ms)
        tg_svc_timer_set(s->ev_duration, cfg->duration_ms);
    tg_svc_timer_set(s->ev_snapshot, s->snapshot_ms);
    if (s->flush_period_ms)
        tg_svc_timer_set(s->ev_flush_period, s->flush_period_ms);
    if (s->clear_period_ms)
        tg_svc_timer_set(s->ev_clear_inc, s->clear_period_ms);
    if (s->write_into_file)
        tg_svc_timer_set(s->ev_write, s->write_period_ms);
    tg_info(TG_SVC_LOG, "session %llu started", (unsigned long long)s->id);
    maybe_all_started(s);
}

/* ------------------------------------------------------------ disable */

static void disable_done(tg_svc_session *s)
{
    if (s->state != TG_SESS_DISABLING)
        return;
    evtimer_del(s->ev_stop_timeout);
    for (tg_svc_ds_inst *ds = s->instances; ds; ds = ds->next) {
        if (ds->state == TG_DS_STOPPING) {
            ds->state = TG_DS_STOPPED;
            notify_instance(ds, 0);
        }
    }
    tg_svc_session_scrape(s);
    tg_svc_snapshot_clocks(s);
    tg_svc_session_event(s, TG_EV_TRACING_DISABLED);
    s->stats_pending = true;
    s->state = TG_SESS_DISABLED;
    tg_info(TG_SVC_LOG, "session %llu disabled%s%s", (unsigned long long)s->id, s->error ? ": " : "",
            s->error ? s->error : "");
    if (s->write_into_file && s->file_fd >= 0) {
        tg_svc_write_into_file(s);
        close(s->file_fd);
        s->file_fd = -1;
    }
    if (s->consumer && !s->disable_notified) {
        s->disable_notified = true;
        tg_svc_consumer_notify_disabled(s->consumer, s->error);
    }
}

static void maybe_disable_done(tg_svc_session *s)
{
    if (s->state != TG_SESS_DISABLING)
        return;
    for (tg_svc_ds_inst *ds = s->instances; ds; ds = ds->next)
        if (ds->state == TG_DS_STOPPING)
            return;
    s->task_disable_done = true;
    post_task(s);
}

static void on_task(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    tg_svc_session *s = arg;
    if (s->task_disable_done) {
        s->task_disable_done = false;
        disable_done(s);
    }
}

void tg_svc_session_disable(tg_svc_session *s, const char *error)
{
    if (error && !s->error)
        s->error = strdup(error);
    if (s->state == TG_SESS_DISABLING || s->state == TG_SESS_DISABLED)
        return;
    stop_running_timers(s);
    s->state = TG_SESS_DISABLING;
    int wait = 0;
    for (tg_svc_ds_inst *ds = s->instances; ds; ds = ds->next)
        wait |= instance_stop(ds);
    if (wait)
        tg_svc_timer_set(s->ev_stop_timeout, s->stop_timeout_ms);
    else
        maybe_disable_done(s);
}

static void final_flush_done(tg_svc_session *s, tg_svc_flush *f, bool ok)
{
    (void)f;
    s->final_flush_outcome = ok ? 1 : 2;
    tg_svc_session_disable(s, NULL);
}

void tg_svc_session_flush_and_disable(tg_svc_session *s)
{
    if (s->stop_pending || s->state == TG_SESS_DISABLING || s->state == TG_SESS_DISABLED)
        return;
    if (s->state != TG_SESS_STARTED) {
        tg_svc_session_disable(s, NULL);
        return;
    }
    s->stop_pending = true;
    tg_svc_session_flush_final(s, s->flush_timeout_ms, TG_FLUSH_REASON_TRACE_STOP | TG_FLUSH_INITIATOR_TRACED,
                               final_flush_done);
}

/* ------------------------------------------------------------ timer callbacks */

static void on_duration(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    tg_svc_session_flush_and_disable(arg);
}

static void on_snapshot(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    tg_svc_session *s = arg;
    if (s->state != TG_SESS_STARTED)
        return;
    tg_svc_snapshot_clocks(s);
    tg_svc_queue_sync_marker(s);
    s->stats_pending = true;
    tg_svc_timer_set(s->ev_snapshot, s->snapshot_ms);
}

static void on_flush_period(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    tg_svc_session *s = arg;
    if (s->state != TG_SESS_STARTED)
        return;
    tg_svc_timer_set(s->ev_flush_period, s->flush_period_ms);
    if (tg_svc_session_flush(s, s->flush_timeout_ms, TG_FLUSH_REASON_PERIODIC | TG_FLUSH_INITIATOR_TRACED, NULL,
                             NULL, NULL) == 0)
        return;
    if (s->periodic_flushes_skipped++ == 0)
        tg_warn(TG_SVC_LOG,
                "session %llu: periodic flush skipped: %u flushes wait for producers that have not answered "
                "(logged once)",
                (unsigned long long)s->id, TG_SVC_MAX_PENDING_FLUSHES);
}

static void on_clear_inc(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    tg_svc_session *s = arg;
    if (s->state != TG_SESS_STARTED)
        return;
    for (tg_svc_producer *p = s->svc->producers; p; p = p->next) {
        size_t n = 0;
        for (tg_svc_ds_inst *ds = s->instances; ds; ds = ds->next)
            if (ds->p == p && ds->handles_clear && ds->state == TG_DS_STARTED)
                n++;
        if (!n)
            continue;
        uint64_t *ids = calloc(n, sizeof *ids);
        if (!ids)
            continue;
        size_t k = 0;
        for (tg_svc_ds_inst *ds = s->instances; ds; ds = ds->next)
            if (ds->p == p && ds->handles_clear && ds->state == TG_DS_STARTED)
                ids[k++] = ds->id;
        Perfetto__Protos__GetAsyncCommandResponse cmd = PERFETTO__PROTOS__GET_ASYNC_COMMAND_RESPONSE__INIT;
        Perfetto__Protos__GetAsyncCommandResponse__ClearIncrementalState cl =
            PERFETTO__PROTOS__GET_ASYNC_COMMAND_RESPONSE__CLEAR_INCREMENTAL_STATE__INIT;
        cl.n_data_source_ids = k;
        cl.data_source_ids = ids;
        cmd.cmd_case = PERFETTO__PROTOS__GET_ASYNC_COMMAND_RESPONSE__CMD_CLEAR_INCREMENTAL_STATE;
        cmd.clear_incremental_state = &cl;
        tg_svc_producer_send_cmd(p, &cmd);
        free(ids);
    }
    tg_svc_timer_set(s->ev_clear_inc, s->clear_period_ms);
}

static void on_trigger_timeout(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    tg_svc_session *s = arg;
    if (s->waiting_start_trigger) {
        tg_info(TG_SVC_LOG, "session %llu: no start trigger within the timeout", (unsigned long long)s->id);
        s->waiting_start_trigger = false;
        tg_svc_session_disable(s, NULL);
    } else {
        tg_svc_session_flush_and_disable(s);
    }
}

static void on_stop_timeout(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    tg_svc_session *s = arg;
    tg_warn(TG_SVC_LOG, "session %llu: data sources did not acknowledge the stop in time", (unsigned long long)s->id);
    s->task_disable_done = true;
    post_task(s);
}

static void on_stop_delay(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    tg_svc_session_flush_and_disable(arg);
}

/* ------------------------------------------------------------ producer events */

void tg_svc_session_on_producer_source(tg_service *svc, tg_svc_producer *p, struct tg_svc_ds_reg *reg)
{
    for (tg_svc_session *s = svc->sessions; s; s = s->next) {
        if (s->read_only || (s->state != TG_SESS_CONFIGURED && s->state != TG_SESS_STARTED))
            continue;
        setup_for_producer(s, p, reg);
        maybe_all_started(s);
    }
}

static tg_svc_ds_inst *find_instance(tg_service *svc, tg_svc_producer *p, uint64_t id)
{
    for (tg_svc_session *s = svc->sessions; s; s = s->next)
        for (tg_svc_ds_inst *ds = s->instances; ds; ds = ds->next)
            if (ds->id == id && ds->p == p)
                return ds;
    return NULL;
}

void tg_svc_session_on_ds_started(tg_service *svc, tg_svc_producer *p, uint64_t instance_id)
{
    tg_svc_ds_inst *ds = find_instance(svc, p, instance_id);
    if (!ds || ds->state != TG_DS_STARTING)
        return;
    ds->state = TG_DS_STARTED;
    notify_instance(ds, 1);
    maybe_all_started(ds->s);
}

void tg_svc_session_on_ds_stopped(tg_service *svc, tg_svc_producer *p, uint64_t instance_id)
{
    tg_svc_ds_inst *ds = find_instance(svc, p, instance_id);
    if (!ds || ds->state != TG_DS_STOPPING)
        return;
    ds->state = TG_DS_STOPPED;
    notify_instance(ds, 0);
    maybe_disable_done(ds->s);
}

void tg_svc_session_on_unregister_source(tg_service *svc, tg_svc_producer *p, const char *name)
{
    for (tg_svc_session *s = svc->sessions; s; s = s->next) {
        for (tg_svc_ds_inst *ds = s->instances; ds; ds = ds->next) {
            if (ds->p != p || strcmp(ds->name, name) != 0 || ds->state == TG_DS_STOPPED)
                continue;
            bool running = ds->state == TG_DS_STARTED || ds->state == TG_DS_STARTING;
            ds->state = TG_DS_STOPPED;
            if (running)
                notify_instance(ds, 0);
        }
        maybe_disable_done(s);
        maybe_all_started(s);
    }
}

void tg_svc_session_on_producer_gone(tg_service *svc, tg_svc_producer *p)
{
    for (tg_svc_session *s = svc->sessions; s; s = s->next) {
        for (tg_svc_ds_inst **pp = &s->instances; *pp;) {
            tg_svc_ds_inst *ds = *pp;
            if (ds->p != p) {
                pp = &ds->next;
                continue;
            }
            bool running = ds->state == TG_DS_STARTED || ds->state == TG_DS_STARTING || ds->state == TG_DS_STOPPING;
            ds->p = NULL;
            ds->state = TG_DS_STOPPED;
            if (running)
                notify_instance(ds, 0);
            *pp = ds->next;
            instance_free(ds);
            s->n_instances--;
        }
        s->instances_tail = &s->instances; /* (found again at the next append) */
        while (*s->instances_tail)
            s->instances_tail = &(*s->instances_tail)->next;
        maybe_disable_done(s);
        maybe_all_started(s);
    }
    tg_svc_flush_producer_gone(svc, p);
}

/* ------------------------------------------------------------ ChangeTraceConfig */

void tg_svc_session_change_config(tg_svc_session *s, const Perfetto__Protos__TraceConfig *cfg)
{
    /* Only the producer filters of data sources already in the config may
     * change (as in traced); newly matching producers get instances. */
    bool changed = false;
    for (size_t i = 0; i < cfg->n_data_sources; i++) {
        const Perfetto__Protos__TraceConfig__DataSource *nd = cfg->data_sources[i];
        if (!nd->config || !nd->config->name)
            continue;
        for (size_t j = 0; j < s->cfg->n_data_sources; j++) {
            Perfetto__Protos__TraceConfig__DataSource *od = s->cfg->data_sources[j];
            if (!od->config || !od->config->name || strcmp(od->config->name, nd->config->name) != 0)
                continue;
            for (size_t k = 0; k < od->n_producer_name_filter; k++)
                free(od->producer_name_filter[k]);
            free(od->producer_name_filter);
            for (size_t k = 0; k < od->n_producer_name_regex_filter; k++)
                free(od->producer_name_regex_filter[k]);
            free(od->producer_name_regex_filter);
            od->n_producer_name_filter = od->n_producer_name_regex_filter = 0;
            od->producer_name_filter = od->producer_name_regex_filter = NULL;
            if (nd->n_producer_name_filter) {
                od->producer_name_filter = calloc(nd->n_producer_name_filter, sizeof(char *));
                for (size_t k = 0; od->producer_name_filter && k < nd->n_producer_name_filter; k++)
                    od->producer_name_filter[od->n_producer_name_filter++] = strdup(nd->producer_name_filter[k]);
            }
            if (nd->n_producer_name_regex_filter) {
                od->producer_name_regex_filter = calloc(nd->n_producer_name_regex_filter, sizeof(char *));
                for (size_t k = 0; od->producer_name_regex_filter && k < nd->n_producer_name_regex_filter; k++)
                    od->producer_name_regex_filter[od->n_producer_name_regex_filter++] =
                        strdup(nd->producer_name_regex_filter[k]);
            }
            changed = true;
        }
    }
    if (changed) {
        size_t n = protobuf_c_message_get_packed_size(&s->cfg->base);
        uint8_t *nb = malloc(n ? n : 1);
        if (nb) {
            protobuf_c_message_pack(&s->cfg->base, nb);
            free(s->cfg_bytes);
            s->cfg_bytes = nb;
            s->cfg_len = n;
        }
    }
    if (!changed || (s->state != TG_SESS_CONFIGURED && s->state != TG_SESS_STARTED))
        return;
    /* set up matching (producer, source) pairs that have no instance yet */
    for (tg_svc_producer *p = s->svc->producers; p; p = p->next) {
        if (!p->initialized)
            continue;
        for (size_t i = 0; i < s->cfg->n_data_sources; i++) {
            const Perfetto__Protos__TraceConfig__DataSource *cds = s->cfg->data_sources[i];
            for (const struct tg_svc_ds_reg *reg = p->sources; reg; reg = reg->next) {
                if (!tg_svc_ds_matches(s->cfg, cds, p, reg))
                    continue;
                bool have = false;
                for (tg_svc_ds_inst *ds = s->instances; ds && !have; ds = ds->next)
                    have = ds->p == p && strcmp(ds->name, reg->name) == 0;
                if (have)
                    continue;
                tg_svc_ds_inst *ds = setup_instance(s, cds, p, reg);
                if (ds && s->state == TG_SESS_STARTED)
                    instance_start(ds);
            }
        }
    }
}

/* ------------------------------------------------------------ clone */

tg_svc_session *tg_svc_session_clone(tg_svc_session *src, tg_svc_consumer *c, char *err, size_t errlen)
{
    tg_service *svc = src->svc;
    uint64_t want = 0; /* a clone copies its source's buffers: the same budget */
    for (size_t i = 0; i < src->n_buffers; i++)
        want += src->buffers[i]->bytes;
    if (tg_svc_buffer_budget_check(svc, c, want, err, errlen) != 0)
        return NULL;
    tg_svc_session *s = session_alloc(svc, c);
    if (!s) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    s->id = ++svc->last_session_id;
    s->read_only = true;
    s->state = TG_SESS_DISABLED;
    s->disable_notified = true;
    s->cfg = copy_config(src->cfg, src->cfg_bytes, src->cfg_len, &s->cfg_bytes, &s->cfg_len);
    s->buffers = calloc(src->n_buffers ? src->n_buffers : 1, sizeof *s->buffers);
    if (!s->cfg || !s->buffers) {
        tg_svc_session_free(s);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    for (size_t i = 0; i < src->n_buffers; i++) {
        tg_svc_buffer *b = calloc(1, sizeof *b);
        uint16_t id = alloc_buffer_id(svc);
        struct tg_trace_buffer *tb = b && id ? tg_trace_buffer_clone(src->buffers[i]->tb) : NULL;
        if (!tb) {
            free(b);
            tg_svc_session_free(s);
            snprintf(err, errlen, "Failed to clone buffer %zu", i);
            return NULL;
        }
        b->id = id;
        b->s = s;
        b->tb = tb;
        b->bytes = src->buffers[i]->bytes;
        svc->buffer_bytes += b->bytes;
        svc->buf_index[id] = b;
        s->buffers[s->n_buffers++] = b;
    }
    random_uuid(&s->uuid_msb, &s->uuid_lsb);
    s->flush_timeout_ms = src->flush_timeout_ms;
    s->stop_timeout_ms = src->stop_timeout_ms;
    s->snapshot_ms = src->snapshot_ms;
    /* the clone continues the source's sequences under its own ids */
    s->start_realtime_ns = src->start_realtime_ns;
    tg_svc_snapshot_clocks(s);
    tg_svc_queue_sync_marker(s);
    s->stats_pending = true;
    link_session(s);
    tg_info(TG_SVC_LOG, "session %llu cloned into read-only session %llu", (unsigned long long)src->id,
            (unsigned long long)s->id);
    return s;
}

/* ------------------------------------------------------------ free */

void tg_svc_session_free(tg_svc_session *s)
{
    tg_service *svc = s->svc;
    for (tg_svc_session **pp = &svc->sessions; *pp; pp = &(*pp)->next) {
        if (*pp == s) {
            *pp = s->next;
            break;
        }
    }
    tg_svc_consumer *c = s->consumer;
    if (c) {
        if (c->read)
            tg_svc_consumer_cancel_read(c);
        if (c->session == s)
            c->session = NULL;
        if (!s->disable_notified) {
            s->disable_notified = true;
            tg_svc_consumer_notify_disabled(c, s->error);
        }
        s->consumer = NULL;
    }
    while (s->instances) {
        tg_svc_ds_inst *ds = s->instances;
        s->instances = ds->next;
        if (ds->p && ds->state != TG_DS_STOPPED && ds->state != TG_DS_STOPPING)
            instance_stop(ds);
        instance_free(ds);
    }
    while (s->flushes) {
        tg_svc_flush *f = s->flushes;
        s->flushes = f->next;
        if (f->call)
            tg_ipc_call_reject(f->call);
        tg_svc_flush_free(f);
    }
    for (size_t i = 0; i < s->n_buffers; i++) {
        tg_svc_buffer *b = s->buffers[i];
        for (tg_svc_producer *p = svc->producers; p; p = p->next)
            tg_svc_producer_disallow_buffer(p, b->id);
        if (svc->buf_index && svc->buf_index[b->id] == b)
            svc->buf_index[b->id] = NULL;
        tg_trace_buffer_free(b->tb);
        svc->buffer_bytes -= b->bytes;
        free(b);
    }
    free(s->buffers);
    free_timer(&s->ev_task);
    free_timer(&s->ev_duration);
    free_timer(&s->ev_snapshot);
    free_timer(&s->ev_flush_period);
    free_timer(&s->ev_clear_inc);
    free_timer(&s->ev_write);
    free_timer(&s->ev_trigger_timeout);
    free_timer(&s->ev_stop_timeout);
    free_timer(&s->ev_stop_delay);
    tg_svc_pkt_list_clear(&s->clock_snapshots);
    tg_svc_pkt_list_clear(&s->events);
    tg_svc_pkt_list_clear(&s->triggers);
    tg_idmap_clear(&s->seq_ids);
    if (s->file_fd >= 0)
        close(s->file_fd);
    if (s->cfg)
        perfetto__protos__trace_config__free_unpacked(s->cfg, NULL);
    free(s->cfg_bytes);
    free(s->error);
    free(s->detach_key);
    free(s);
}
