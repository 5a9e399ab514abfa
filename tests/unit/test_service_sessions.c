/* test_service_sessions.c: consumer-port semantics of the service as a
 * consumer sees them: EnableTracing validation and limits, one session per
 * consumer, teardown on disconnect, Detach/Attach, Flush ack and timeout,
 * ObserveEvents, QueryServiceState chunking, capabilities, triggers,
 * deferred start, ChangeTraceConfig, CloneSession, machine filtering,
 * incremental-state clearing, periodic flushes, stop timeouts and
 * per-session sequence ids. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "test_service_util.h"
#include "tg_test_util.h"

#include "tracegate/pbwire.h"

#include "observable_events.pb-c.h"
#include "producer_port.pb-c.h"
#include "trace_stats.pb-c.h"
#include "tracing_service_capabilities.pb-c.h"
#include "tracing_service_state.pb-c.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static void enable_error(struct ts_env *e, const Perfetto__Protos__TraceConfig *cfg, int fd, const char *expect)
{
    struct ts_cons c;
    assert_int_equal(ts_cons_connect(e, &c), 0);
    assert_true(ts_cons_enable(&c, cfg, fd) != 0);
    char err[256];
    assert_int_equal(ts_cons_wait_enable(&c, 2000, err, sizeof err), 1);
    if (!strstr(err, expect))
        fprintf(stderr, "error \"%s\" lacks \"%s\"\n", err, expect);
    assert_non_null(strstr(err, expect));
    ts_cons_close(&c);
}

/* conditions for ts_pump_until */
static int prod_stopped(void *arg) { return ((struct ts_prod *)arg)->n_stop >= 1; }
static int prod_set_up(void *arg) { return ((struct ts_prod *)arg)->n_setup >= 1; }
struct prod_count {
    struct ts_prod *p;
    int n;
};
static int prod_flushes(void *arg)
{
    struct prod_count *w = arg;
    return w->p->n_flush >= w->n;
}
static struct ts_prod *g_periodic_a, *g_periodic_b;
static int periodic_seen(void *arg)
{
    (void)arg;
    return g_periodic_a->n_clear >= 2 && g_periodic_a->n_flush >= 2 && g_periodic_b->n_flush >= 2;
}

static Perfetto__Protos__TracingServiceState *query(struct ts_cons *c, int sessions_only)
{
    Perfetto__Protos__QueryServiceStateRequest q = PERFETTO__PROTOS__QUERY_SERVICE_STATE_REQUEST__INIT;
    q.has_sessions_only = 1;
    q.sessions_only = sessions_only;
    struct ts_frame f;
    assert_int_equal(ts_cons_call(c, TS_C_QUERY, &q.base, &f, 5000), 1);
    assert_false(f.fi.has_more);
    Perfetto__Protos__QueryServiceStateResponse *r =
        perfetto__protos__query_service_state_response__unpack(NULL, f.fi.payload_len, f.fi.payload);
    ts_frame_free(&f);
    assert_non_null(r);
    Perfetto__Protos__TracingServiceState *st = r->service_state;
    r->service_state = NULL;
    perfetto__protos__query_service_state_response__free_unpacked(r, NULL);
    return st;
}

/* ------------------------------------------------------------ validation */

static void test_enable_tracing_validation(void **state)
{
    (void)state;
    struct ts_env e;
    assert_int_equal(ts_env_init(&e), 0);
    struct ts_cfg cfg;
    ts_cfg_init(&cfg, 64, 0, "x", 0);
    cfg.tc.n_buffers = 0;
    enable_error(&e, &cfg.tc, -1, "no buffers");
    ts_cfg_init(&cfg, 0, 0, "x", 0);
    enable_error(&e, &cfg.tc, -1, "size_kb");
    ts_cfg_init(&cfg, 64, 0, "x", 0);
    cfg.dsc[0].has_target_buffer = 1;
    cfg.dsc[0].target_buffer = 1;
    enable_error(&e, &cfg.tc, -1, "out of bounds target_buffer");
    ts_cfg_init(&cfg, 64, 0, "x", 8u * 24 * 3600 * 1000);
    enable_error(&e, &cfg.tc, -1, "too long");
    ts_cfg_init(&cfg, 64, 0, "x", 0);
    cfg.tc.n_buffers = 129;
    Perfetto__Protos__TraceConfig__BufferConfig *many[129];
    for (int i = 0; i < 129; i++)
        many[i] = &cfg.buf[0];
    cfg.tc.buffers = many;
    enable_error(&e, &cfg.tc, -1, "Too many buffers");
    ts_cfg_init(&cfg, 64, 0, "x", 0);
    Perfetto__Protos__TraceConfig__TriggerConfig tc = PERFETTO__PROTOS__TRACE_CONFIG__TRIGGER_CONFIG__INIT;
    tc.has_trigger_mode = 1;
    tc.trigger_mode = PERFETTO__PROTOS__TRACE_CONFIG__TRIGGER_CONFIG__TRIGGER_MODE__START_TRACING;
    cfg.tc.trigger_config = &tc;
    enable_error(&e, &cfg.tc, -1, "trigger_timeout_ms");
    ts_cfg_init(&cfg, 64, 0, "x", 0);
    cfg.tc.has_write_into_file = 1;
    cfg.tc.write_into_file = 1;
    enable_error(&e, &cfg.tc, -1, "output file");
    ts_env_free(&e);
}

static void test_session_limits(void **state)
{
    (void)state;
    struct ts_env e;
    assert_int_equal(ts_env_init(&e), 0);
    struct ts_cons c[6];
    struct ts_cfg cfg;
    ts_cfg_init(&cfg, 16, 0, NULL, 0);
    for (int i = 0; i < 5; i++) {
        assert_int_equal(ts_cons_connect(&e, &c[i]), 0);
        assert_true(ts_cons_enable(&c[i], &cfg.tc, -1) != 0);
    }
    ts_pump(&e, 50);
    for (int i = 0; i < 5; i++)
        assert_int_equal(ts_raw_count(&c[i].r, c[i].enable_rid), 0); /* still tracing */
    /* a sixth session for the same uid is refused */
    assert_int_equal(ts_cons_connect(&e, &c[5]), 0);
    assert_true(ts_cons_enable(&c[5], &cfg.tc, -1) != 0);
    char err[256];
    assert_int_equal(ts_cons_wait_enable(&c[5], 2000, err, sizeof err), 1);
    assert_non_null(strstr(err, "Too many concurrent"));
    /* one session per consumer */
    assert_true(ts_cons_enable(&c[0], &cfg.tc, -1) != 0);
    assert_int_equal(ts_cons_wait_enable(&c[0], 2000, err, sizeof err), 1);
    assert_non_null(strstr(err, "already"));
    Perfetto__Protos__TracingServiceState *st = query(&c[5], 1);
    assert_int_equal(st->num_sessions, 5);
    assert_int_equal(st->num_sessions_started, 5);
    assert_int_equal(st->n_tracing_sessions, 5);
    assert_int_equal(st->n_producers, 0); /* sessions_only */
    perfetto__protos__tracing_service_state__free_unpacked(st, NULL);
    /* closing a consumer frees its session */
    ts_cons_close(&c[0]);
    assert_true(ts_wait_svc_count(&e, TS_SVC_SESSIONS, 4, 5000));
    st = query(&c[5], 0);
    assert_int_equal(st->num_sessions, 4);
    perfetto__protos__tracing_service_state__free_unpacked(st, NULL);
    for (int i = 1; i < 6; i++)
        ts_cons_close(&c[i]);
    ts_env_free(&e);
}

static void test_disconnect_stops_data_sources(void **state)
{
    (void)state;
    struct ts_env e;
    assert_int_equal(ts_env_init(&e), 0);
    struct ts_prod p;
    struct ts_prod_opts po;
    ts_prod_opts_init(&po, "prod_a", "test.ds");
    assert_int_equal(ts_prod_connect(&e, &p, &po), 0);
    struct ts_cons c;
    assert_int_equal(ts_cons_connect(&e, &c), 0);
    struct ts_cfg cfg;
    ts_cfg_init(&cfg, 64, 0, "test.ds", 0);
    assert_true(ts_cons_enable(&c, &cfg.tc, -1) != 0);
    assert_true(ts_prod_wait_started(&p, 1, 5000));
    ts_cons_close(&c);
    assert_true(ts_pump_until(&e, prod_stopped, &p, 5000));
    assert_int_equal(p.n_stop, 1);
    assert_int_equal(p.stopped[0], p.inst[0]);
    ts_prod_close(&p);
    ts_env_free(&e);
}

/* ------------------------------------------------------------ detach / attach */

static void test_detach_attach(void **state)
{
    (void)state;
    struct ts_env e;
    assert_int_equal(ts_env_init(&e), 0);
    struct ts_prod p;
    struct ts_prod_opts po;
    ts_prod_opts_init(&po, "prod_a", "test.ds");
    assert_int_equal(ts_prod_connect(&e, &p, &po), 0);
    struct ts_cons c1, c2, c3;
    assert_int_equal(ts_cons_connect(&e, &c1), 0);
    struct ts_cfg cfg;
    ts_cfg_init(&cfg, 256, 0, "test.ds", 0);
    assert_true(ts_cons_enable(&c1, &cfg.tc, -1) != 0);
    assert_true(ts_prod_wait_started(&p, 1, 5000));
    Perfetto__Protos__DetachRequest dr = PERFETTO__PROTOS__DETACH_REQUEST__INIT;
    dr.key = (char *)"k1";
    assert_int_equal(ts_cons_call(&c1, TS_C_DETACH, &dr.base, NULL, 5000), 1);
    /* detaching again: no session any more */
    assert_int_equal(ts_cons_call(&c1, TS_C_DETACH, &dr.base, NULL, 5000), 0);
    ts_cons_close(&c1);
    ts_pump(&e, 50);
    assert_int_equal(p.n_stop, 0); /* still tracing while detached */
    assert_int_equal(ts_prod_register_writer(&p, 1, p.inst_buffer[0]), 0);
    struct tg_smb_writer w;
    assert_int_equal(ts_prod_writer(&p, &w, 1, p.inst_buffer[0]), 0);
    uint8_t pkt[128];
    size_t l = ts_make_packet(pkt, sizeof pkt, 5, 30);
    assert_int_equal(tg_smb_writer_write_packet(&w, pkt, l), TG_SMB_WRITER_OK);
    tg_smb_writer_flush(&w);
    assert_int_equal(ts_prod_commit(&p, 0), 0);

    assert_int_equal(ts_cons_connect(&e, &c2), 0);
    Perfetto__Protos__AttachRequest ar = PERFETTO__PROTOS__ATTACH_REQUEST__INIT;
    ar.key = (char *)"wrong";
    assert_int_equal(ts_cons_call(&c2, TS_C_ATTACH, &ar.base, NULL, 5000), 0);
    ar.key = (char *)"k1";
    struct ts_frame f;
    assert_int_equal(ts_cons_call(&c2, TS_C_ATTACH, &ar.base, &f, 5000), 1);
    Perfetto__Protos__AttachResponse *resp = perfetto__protos__attach_response__unpack(NULL, f.fi.payload_len, f.fi.payload);
    assert_non_null(resp);
    assert_non_null(resp->trace_config);
    assert_int_equal(resp->trace_config->n_buffers, 1);
    assert_int_equal(resp->trace_config->buffers[0]->size_kb, 256);
    perfetto__protos__attach_response__free_unpacked(resp, NULL);
    ts_frame_free(&f);
    /* the key is used up */
    assert_int_equal(ts_cons_connect(&e, &c3), 0);
    assert_int_equal(ts_cons_call(&c3, TS_C_ATTACH, &ar.base, NULL, 5000), 0);
    ts_cons_close(&c3);
    /* re-arm the end-of-trace reply and stop */
    Perfetto__Protos__EnableTracingRequest en = PERFETTO__PROTOS__ENABLE_TRACING_REQUEST__INIT;
    en.has_attach_notification_only = 1;
    en.attach_notification_only = 1;
    c2.enable_rid = ++c2.rid;
    assert_int_equal(ts_raw_invoke(&e, &c2.r, c2.enable_rid, 1, TS_C_ENABLE, &en.base, 0, -1), 0);
    assert_int_equal(ts_cons_call(&c2, TS_C_DISABLE, NULL, NULL, 5000), 1);
    assert_int_equal(ts_cons_wait_enable(&c2, 5000, NULL, 0), 1);
    struct ts_trace t = {0};
    assert_int_equal(ts_cons_read(&c2, &t, 5000), 0);
    assert_int_equal(ts_trace_count(&t, pkt + 2, 10), 1); /* the data written while detached */
    ts_trace_free(&t);
    ts_cons_close(&c2);
    ts_prod_close(&p);
    ts_env_free(&e);
}

/* ------------------------------------------------------------ flush */

static void test_flush_ack_and_timeout(void **state)
{
    (void)state;
    struct ts_env e;
    assert_int_equal(ts_env_init(&e), 0);
    struct ts_prod p, q, nf;
    struct ts_prod_opts po;
    ts_prod_opts_init(&po, "acker", "test.ds");
    assert_int_equal(ts_prod_connect(&e, &p, &po), 0);
    ts_prod_opts_init(&po, "noflush", "test.ds");
    po.no_flush = 1;
    po.auto_ack_flush = 0;
    assert_int_equal(ts_prod_connect(&e, &nf, &po), 0);
    struct ts_cons c;
    assert_int_equal(ts_cons_connect(&e, &c), 0);
    struct ts_cfg cfg;
    ts_cfg_init(&cfg, 64, 0, "test.ds", 0);
    assert_true(ts_cons_enable(&c, &cfg.tc, -1) != 0);
    assert_true(ts_prod_wait_started(&p, 1, 5000));
    Perfetto__Protos__FlushRequest fr = PERFETTO__PROTOS__FLUSH_REQUEST__INIT;
    fr.has_timeout_ms = 1;
    fr.timeout_ms = 300;
    fr.has_flags = 1;
    fr.flags = 0x24;
    assert_int_equal(ts_cons_call(&c, TS_C_FLUSH, &fr.base, NULL, 5000), 1);
    assert_int_equal(p.n_flush, 1);
    assert_int_equal(nf.n_flush, 0); /* no_flush sources are skipped */
    /* a producer that never acks: Reject after the timeout */
    ts_prod_opts_init(&po, "silent", "test.ds");
    po.auto_ack_flush = 0;
    assert_int_equal(ts_prod_connect(&e, &q, &po), 0);
    assert_true(ts_prod_wait_started(&q, 1, 5000));
    uint64_t t0 = now_ms();
    assert_int_equal(ts_cons_call(&c, TS_C_FLUSH, &fr.base, NULL, 5000), 0);
    assert_true(tg_test_waited(t0, 300)); /* the flush timeout */
    assert_int_equal(q.n_flush, 1);
    /* acking a later flush clears every pending one for that producer */
    assert_int_equal(ts_raw_invoke(&e, &c.r, ++c.rid, 1, TS_C_FLUSH, &fr.base, 0, -1), 0);
    uint64_t frid = c.rid;
    struct prod_count qf = {&q, 2};
    assert_true(ts_pump_until(&e, prod_flushes, &qf, 5000));
    assert_int_equal(q.n_flush, 2);
    Perfetto__Protos__CommitDataRequest ack = PERFETTO__PROTOS__COMMIT_DATA_REQUEST__INIT;
    ack.has_flush_request_id = 1;
    ack.flush_request_id = q.last_flush_rid + 10;
    assert_int_equal(ts_prod_call(&q, TS_P_COMMIT, &ack.base, NULL), 1);
    struct ts_frame f;
    assert_true(ts_raw_wait(&e, &c.r, frid, &f, 2000));
    assert_true(f.fi.success);
    ts_frame_free(&f);
    struct ts_frame sf;
    assert_int_equal(ts_cons_call(&c, TS_C_STATS, NULL, &sf, 5000), 1);
    Perfetto__Protos__GetTraceStatsResponse *sr =
        perfetto__protos__get_trace_stats_response__unpack(NULL, sf.fi.payload_len, sf.fi.payload);
    assert_int_equal(sr->trace_stats->flushes_requested, 3);
    assert_int_equal(sr->trace_stats->flushes_succeeded, 2);
    assert_int_equal(sr->trace_stats->flushes_failed, 1);
    assert_int_equal(sr->trace_stats->producers_connected, 3);
    assert_int_equal(sr->trace_stats->data_sources_registered, 3);
    perfetto__protos__get_trace_stats_response__free_unpacked(sr, NULL);
    ts_frame_free(&sf);
    ts_prod_close(&p);
    ts_prod_close(&q);
    ts_prod_close(&nf);
    ts_cons_close(&c);
    ts_env_free(&e);
}

/* ------------------------------------------------------------ ObserveEvents */

static Perfetto__Protos__ObservableEvents *next_event(struct ts_env *e, struct ts_cons *c, uint64_t rid,
                                                      struct ts_frame *f)
{
    if (!ts_raw_wait(e, &c->r, rid, f, 3000))
        return NULL;
    assert_true(f->fi.success);
    assert_true(f->fi.has_more);
    Perfetto__Protos__ObserveEventsResponse *r =
        perfetto__protos__observe_events_response__unpack(NULL, f->fi.payload_len, f->fi.payload);
    assert_non_null(r);
    Perfetto__Protos__ObservableEvents *ev = r->events;
    r->events = NULL;
    perfetto__protos__observe_events_response__free_unpacked(r, NULL);
    return ev;
}

static void test_observe_events(void **state)
{
    (void)state;
    struct ts_env e;
    assert_int_equal(ts_env_init(&e), 0);
    struct ts_prod p;
    struct ts_prod_opts po;
    ts_prod_opts_init(&po, "prod_a", "test.ds");
    po.notify_start = 1;
    assert_int_equal(ts_prod_connect(&e, &p, &po), 0);
    struct ts_cons c;
    assert_int_equal(ts_cons_connect(&e, &c), 0);
    Perfetto__Protos__ObservableEvents__Type types[] = {
        PERFETTO__PROTOS__OBSERVABLE_EVENTS__TYPE__TYPE_DATA_SOURCES_INSTANCES,
        PERFETTO__PROTOS__OBSERVABLE_EVENTS__TYPE__TYPE_ALL_DATA_SOURCES_STARTED};
    Perfetto__Protos__ObserveEventsRequest oq = PERFETTO__PROTOS__OBSERVE_EVENTS_REQUEST__INIT;
    oq.n_events_to_observe = 2;
    oq.events_to_observe = types;
    uint64_t orid = ++c.rid;
    assert_int_equal(ts_raw_invoke(&e, &c.r, orid, 1, TS_C_OBSERVE, &oq.base, 0, -1), 0);
    struct ts_cfg cfg;
    ts_cfg_init(&cfg, 64, 0, "test.ds", 0);
    assert_true(ts_cons_enable(&c, &cfg.tc, -1) != 0);
    struct ts_frame f;
    Perfetto__Protos__ObservableEvents *ev = next_event(&e, &c, orid, &f);
    assert_non_null(ev);
    assert_int_equal(ev->n_instance_state_changes, 1);
    assert_string_equal(ev->instance_state_changes[0]->producer_name, "prod_a");
    assert_string_equal(ev->instance_state_changes[0]->data_source_name, "test.ds");
    assert_int_equal(ev->instance_state_changes[0]->state,
                     PERFETTO__PROTOS__OBSERVABLE_EVENTS__DATA_SOURCE_INSTANCE_STATE__DATA_SOURCE_INSTANCE_STATE_STARTED);
    perfetto__protos__observable_events__free_unpacked(ev, NULL);
    ts_frame_free(&f);
    ev = next_event(&e, &c, orid, &f);
    assert_non_null(ev);
    assert_true(ev->all_data_sources_started);
    perfetto__protos__observable_events__free_unpacked(ev, NULL);
    ts_frame_free(&f);
    assert_int_equal(ts_cons_call(&c, TS_C_DISABLE, NULL, NULL, 5000), 1);
    ev = next_event(&e, &c, orid, &f);
    assert_non_null(ev);
    assert_int_equal(ev->instance_state_changes[0]->state,
                     PERFETTO__PROTOS__OBSERVABLE_EVENTS__DATA_SOURCE_INSTANCE_STATE__DATA_SOURCE_INSTANCE_STATE_STOPPED);
    perfetto__protos__observable_events__free_unpacked(ev, NULL);
    ts_frame_free(&f);
    /* a new request closes the previous stream with an empty final reply */
    oq.n_events_to_observe = 1;
    uint64_t orid2 = ++c.rid;
    assert_int_equal(ts_raw_invoke(&e, &c.r, orid2, 1, TS_C_OBSERVE, &oq.base, 0, -1), 0);
    assert_true(ts_raw_wait(&e, &c.r, orid, &f, 3000));
    assert_true(f.fi.success);
    assert_false(f.fi.has_more);
    assert_int_equal(f.fi.payload_len, 0);
    ts_frame_free(&f);
    /* no types: closes at once */
    oq.n_events_to_observe = 0;
    uint64_t orid3 = ++c.rid;
    assert_int_equal(ts_raw_invoke(&e, &c.r, orid3, 1, TS_C_OBSERVE, &oq.base, 0, -1), 0);
    assert_true(ts_raw_wait(&e, &c.r, orid2, &f, 3000));
    assert_false(f.fi.has_more);
    ts_frame_free(&f);
    assert_true(ts_raw_wait(&e, &c.r, orid3, &f, 3000));
    assert_false(f.fi.has_more);
    ts_frame_free(&f);
    ts_cons_close(&c);
    ts_prod_close(&p);
    ts_env_free(&e);
}

/* ------------------------------------------------------------ service state */

static void test_query_service_state_chunks(void **state)
{
    (void)state;
    struct ts_env e;
    assert_int_equal(ts_env_init(&e), 0);
    struct ts_prod p;
    struct ts_prod_opts po;
    ts_prod_opts_init(&po, "many_sources", "test.ds");
    po.ds_name = "";
    assert_int_equal(ts_prod_connect(&e, &p, &po), 0);
    enum { N = 1500 };
    for (int i = 0; i < N; i++) {
        char name[160];
        snprintf(name, sizeof name, "data.source.with.a.rather.long.name.to.fill.the.reply.quickly.%06d.xxxxxxxxxxxx", i);
        Perfetto__Protos__DataSourceDescriptor d = PERFETTO__PROTOS__DATA_SOURCE_DESCRIPTOR__INIT;
        d.name = name;
        Perfetto__Protos__RegisterDataSourceRequest rq = PERFETTO__PROTOS__REGISTER_DATA_SOURCE_REQUEST__INIT;
        rq.data_source_descriptor = &d;
        assert_int_equal(ts_raw_invoke(&e, &p.r, ++p.rid, 1, TS_P_REG_DS, &rq.base, 1, -1), 0);
    }
    assert_int_equal(ts_prod_call(&p, TS_P_SYNC, NULL, NULL), 1);
    struct ts_cons c;
    assert_int_equal(ts_cons_connect(&e, &c), 0);
    Perfetto__Protos__QueryServiceStateRequest q = PERFETTO__PROTOS__QUERY_SERVICE_STATE_REQUEST__INIT;
    uint64_t rid = ++c.rid;
    assert_int_equal(ts_raw_invoke(&e, &c.r, rid, 1, TS_C_QUERY, &q.base, 0, -1), 0);
    size_t replies = 0, ds = 0, producers = 0;
    for (;;) {
        struct ts_frame f;
        assert_true(ts_raw_wait(&e, &c.r, rid, &f, 5000));
        assert_true(f.fi.success);
        assert_true(f.len < 131072 - 64);
        Perfetto__Protos__QueryServiceStateResponse *r =
            perfetto__protos__query_service_state_response__unpack(NULL, f.fi.payload_len, f.fi.payload);
        assert_non_null(r);
        if (replies == 0) {
            assert_int_equal(r->service_state->n_data_sources, 0); /* first: everything but data_sources */
            assert_int_equal(r->service_state->n_producers, 1);
            assert_string_equal(r->service_state->tracing_service_version, "tracegate 0.1.0");
        } else {
            assert_true(r->service_state->n_data_sources > 0);
        }
        producers += r->service_state->n_producers;
        ds += r->service_state->n_data_sources;
        perfetto__protos__query_service_state_response__free_unpacked(r, NULL);
        replies++;
        int more = f.fi.has_more;
        ts_frame_free(&f);
        if (!more)
            break;
    }
    assert_true(replies >= 3);
    assert_int_equal(ds, N);
    assert_int_equal(producers, 1);
    ts_cons_close(&c);
    ts_prod_close(&p);
    ts_env_free(&e);
}

static void test_capabilities_and_bugreport(void **state)
{
    (void)state;
    struct ts_env e;
    assert_int_equal(ts_env_init(&e), 0);
    struct ts_cons c;
    assert_int_equal(ts_cons_connect(&e, &c), 0);
    struct ts_frame f;
    assert_int_equal(ts_cons_call(&c, TS_C_CAPS, NULL, &f, 5000), 1);
    Perfetto__Protos__QueryCapabilitiesResponse *r =
        perfetto__protos__query_capabilities_response__unpack(NULL, f.fi.payload_len, f.fi.payload);
    assert_non_null(r);
    assert_true(r->capabilities->has_query_capabilities);
    assert_true(r->capabilities->has_trace_config_output_path);
    assert_true(r->capabilities->has_clone_session);
    assert_int_equal(r->capabilities->n_observable_events, 3);
    assert_int_equal(r->capabilities->observable_events[0], 1);
    assert_int_equal(r->capabilities->observable_events[1], 2);
    assert_int_equal(r->capabilities->observable_events[2], 4);
    perfetto__protos__query_capabilities_response__free_unpacked(r, NULL);
    ts_frame_free(&f);
    assert_int_equal(ts_cons_call(&c, TS_C_BUGREPORT, NULL, &f, 5000), 1);
    Perfetto__Protos__SaveTraceForBugreportResponse *b =
        perfetto__protos__save_trace_for_bugreport_response__unpack(NULL, f.fi.payload_len, f.fi.payload);
    assert_non_null(b);
    assert_true(b->has_success);
    assert_false(b->success);
    assert_string_equal(b->msg, "not supported");
    perfetto__protos__save_trace_for_bugreport_response__free_unpacked(b, NULL);
    ts_frame_free(&f);
    /* without a session: GetTraceStats and Flush are rejected, ReadBuffers is empty */
    assert_int_equal(ts_cons_call(&c, TS_C_STATS, NULL, NULL, 5000), 0);
    assert_int_equal(ts_cons_call(&c, TS_C_FLUSH, NULL, NULL, 5000), 0);
    struct ts_trace t = {0};
    assert_int_equal(ts_cons_read(&c, &t, 5000), 0);
    assert_int_equal(t.replies, 1);
    assert_int_equal(t.n, 0);
    ts_trace_free(&t);
    ts_cons_close(&c);
    ts_env_free(&e);
}

/* ------------------------------------------------------------ triggers */

static void test_start_trigger(void **state)
{
    (void)state;
    struct ts_env e;
    assert_int_equal(ts_env_init(&e), 0);
    struct ts_prod p;
    struct ts_prod_opts po;
    ts_prod_opts_init(&po, "trig_prod", "test.ds");
    assert_int_equal(ts_prod_connect(&e, &p, &po), 0);
    struct ts_cons c;
    assert_int_equal(ts_cons_connect(&e, &c), 0);
    struct ts_cfg cfg;
    ts_cfg_init(&cfg, 64, 0, "test.ds", 0);
    Perfetto__Protos__TraceConfig__TriggerConfig tc = PERFETTO__PROTOS__TRACE_CONFIG__TRIGGER_CONFIG__INIT;
    Perfetto__Protos__TraceConfig__TriggerConfig__Trigger tr = PERFETTO__PROTOS__TRACE_CONFIG__TRIGGER_CONFIG__TRIGGER__INIT;
    Perfetto__Protos__TraceConfig__TriggerConfig__Trigger *trp = &tr;
    tr.name = (char *)"go";
    tr.producer_name_regex = (char *)"trig_.*";
    tc.has_trigger_mode = 1;
    tc.trigger_mode = PERFETTO__PROTOS__TRACE_CONFIG__TRIGGER_CONFIG__TRIGGER_MODE__START_TRACING;
    tc.n_triggers = 1;
    tc.triggers = &trp;
    tc.has_trigger_timeout_ms = 1;
    tc.trigger_timeout_ms = 600000; /* no step below can reach it; the second part tests the timeout */
    cfg.tc.trigger_config = &tc;
    assert_true(ts_cons_enable(&c, &cfg.tc, -1) != 0);
    assert_true(ts_pump_until(&e, prod_set_up, &p, 5000));
    assert_int_equal(p.n_setup, 1);
    assert_int_equal(p.n_start, 0); /* waiting for the trigger */
    struct ts_trace t = {0};
    assert_int_equal(ts_cons_read(&c, &t, 5000), 0); /* empty while waiting */
    assert_int_equal(t.n, 0);
    ts_trace_free(&t);
    assert_int_equal(ts_prod_trigger(&p, "other", 1), 1);
    ts_pump(&e, 50);
    assert_int_equal(p.n_start, 0);
    assert_int_equal(ts_prod_trigger(&p, "go", 1), 1);
    assert_true(ts_prod_wait_started(&p, 1, 2000));
    assert_int_equal(ts_cons_call(&c, TS_C_DISABLE, NULL, NULL, 5000), 1);
    assert_int_equal(ts_cons_wait_enable(&c, 5000, NULL, 0), 1);
    t = (struct ts_trace){0};
    assert_int_equal(ts_cons_read(&c, &t, 5000), 0);
    size_t triggers = 0;
    for (size_t i = 0; i < t.n; i++) {
        const uint8_t *d;
        size_t l;
        if (ts_pkt_bytes(t.pk[i].data, t.pk[i].len, 46, &d, &l)) {
            assert_non_null(memmem(d, l, "go", 2));
            assert_non_null(memmem(d, l, "trig_prod", 9));
            triggers++;
        }
    }
    assert_int_equal(triggers, 1);
    ts_trace_free(&t);
    ts_cons_close(&c);

    /* no trigger within trigger_timeout_ms: the session ends by itself */
    assert_int_equal(ts_cons_connect(&e, &c), 0);
    tc.trigger_timeout_ms = 200;
    uint64_t t0 = now_ms();
    assert_true(ts_cons_enable(&c, &cfg.tc, -1) != 0);
    assert_int_equal(ts_cons_wait_enable(&c, 3000, NULL, 0), 1);
    assert_true(tg_test_waited(t0, 200)); /* trigger_timeout_ms */
    assert_int_equal(p.n_start, 1);
    ts_cons_close(&c);
    ts_prod_close(&p);
    ts_env_free(&e);
}

static void test_stop_trigger(void **state)
{
    (void)state;
    struct ts_env e;
    assert_int_equal(ts_env_init(&e), 0);
    struct ts_prod p;
    struct ts_prod_opts po;
    ts_prod_opts_init(&po, "prod_a", "test.ds");
    assert_int_equal(ts_prod_connect(&e, &p, &po), 0);
    struct ts_cons c, act;
    assert_int_equal(ts_cons_connect(&e, &c), 0);
    struct ts_cfg cfg;
    ts_cfg_init(&cfg, 64, 0, "test.ds", 0);
    Perfetto__Protos__TraceConfig__TriggerConfig tc = PERFETTO__PROTOS__TRACE_CONFIG__TRIGGER_CONFIG__INIT;
    Perfetto__Protos__TraceConfig__TriggerConfig__Trigger tr = PERFETTO__PROTOS__TRACE_CONFIG__TRIGGER_CONFIG__TRIGGER__INIT;
    Perfetto__Protos__TraceConfig__TriggerConfig__Trigger *trp = &tr;
    tr.name = (char *)"stop";
    tr.has_stop_delay_ms = 1;
    tr.stop_delay_ms = 150;
    tc.has_trigger_mode = 1;
    tc.trigger_mode = PERFETTO__PROTOS__TRACE_CONFIG__TRIGGER_CONFIG__TRIGGER_MODE__STOP_TRACING;
    tc.n_triggers = 1;
    tc.triggers = &trp;
    tc.has_trigger_timeout_ms = 1;
    tc.trigger_timeout_ms = 20000;
    cfg.tc.trigger_config = &tc;
    assert_true(ts_cons_enable(&c, &cfg.tc, -1) != 0);
    assert_true(ts_prod_wait_started(&p, 1, 2000));
    /* a consumer's TraceConfig.activate_triggers */
    assert_int_equal(ts_cons_connect(&e, &act), 0);
    struct ts_cfg acfg;
    ts_cfg_init(&acfg, 1, 0, NULL, 0);
    char *names[] = {(char *)"stop"};
    acfg.tc.n_activate_triggers = 1;
    acfg.tc.activate_triggers = names;
    uint64_t t0 = now_ms();
    assert_true(ts_cons_enable(&act, &acfg.tc, -1) != 0);
    char err[256];
    assert_int_equal(ts_cons_wait_enable(&act, 2000, err, sizeof err), 1); /* answered at once */
    assert_string_equal(err, "");
    assert_int_equal(ts_cons_wait_enable(&c, 5000, NULL, 0), 1);
    assert_true(tg_test_waited(t0, 150)); /* after stop_delay_ms */
    assert_true(p.n_flush >= 1);    /* flushed before stopping */
    assert_int_equal(p.n_stop, 1);
    ts_cons_close(&act);
    ts_cons_close(&c);
    ts_prod_close(&p);
    ts_env_free(&e);
}

/* ------------------------------------------------------------ start / config changes */

static void test_deferred_start_and_change_config(void **state)
{
    (void)state;
    struct ts_env e;
    assert_int_equal(ts_env_init(&e), 0);
    struct ts_prod p, q;
    struct ts_prod_opts po;
    ts_prod_opts_init(&po, "prod_a", "test.ds");
    assert_int_equal(ts_prod_connect(&e, &p, &po), 0);
    ts_prod_opts_init(&po, "prod_b", "test.ds");
    assert_int_equal(ts_prod_connect(&e, &q, &po), 0);
    struct ts_cons c;
    assert_int_equal(ts_cons_connect(&e, &c), 0);
    struct ts_cfg cfg;
    ts_cfg_init(&cfg, 64, 0, "test.ds", 0);
    char *filt[] = {(char *)"prod_a"};
    cfg.ds[0].n_producer_name_filter = 1;
    cfg.ds[0].producer_name_filter = filt;
    cfg.tc.has_deferred_start = 1;
    cfg.tc.deferred_start = 1;
    assert_true(ts_cons_enable(&c, &cfg.tc, -1) != 0);
    assert_true(ts_pump_until(&e, prod_set_up, &p, 5000));
    assert_int_equal(p.n_setup, 1);
    assert_int_equal(p.n_start, 0);
    assert_int_equal(q.n_setup, 0); /* filtered out */
    assert_int_equal(ts_cons_call(&c, TS_C_START, NULL, NULL, 5000), 1);
    assert_true(ts_prod_wait_started(&p, 1, 2000));
    /* ChangeTraceConfig: now a regex that also selects prod_b */
    char *rx[] = {(char *)"prod_[ab]"};
    cfg.ds[0].n_producer_name_filter = 0;
    cfg.ds[0].n_producer_name_regex_filter = 1;
    cfg.ds[0].producer_name_regex_filter = rx;
    Perfetto__Protos__ChangeTraceConfigRequest ch = PERFETTO__PROTOS__CHANGE_TRACE_CONFIG_REQUEST__INIT;
    ch.trace_config = &cfg.tc;
    assert_int_equal(ts_cons_call(&c, TS_C_CHANGE, &ch.base, NULL, 5000), 1);
    assert_true(ts_prod_wait_started(&q, 1, 2000));
    assert_int_equal(p.n_setup, 1); /* no duplicate instance */
    ts_cons_close(&c);
    ts_prod_close(&p);
    ts_prod_close(&q);
    ts_env_free(&e);
}

/* the rewritten DataSourceConfig the producer receives (§4.3) */
static void test_data_source_config_rewrite(void **state)
{
    (void)state;
    struct ts_env e;
    assert_int_equal(ts_env_init(&e), 0);
    struct ts_prod p;
    struct ts_prod_opts po;
    ts_prod_opts_init(&po, "prod_a", "test.ds");
    assert_int_equal(ts_prod_connect(&e, &p, &po), 0);
    struct ts_cons c;
    assert_int_equal(ts_cons_connect(&e, &c), 0);
    struct ts_cfg cfg;
    ts_cfg_init(&cfg, 64, 0, "test.ds", 1234);
    cfg.buf[1] = cfg.buf[0];
    cfg.tc.n_buffers = 2;
    cfg.dsc[0].has_target_buffer = 1;
    cfg.dsc[0].target_buffer = 1;
    cfg.dsc[0].legacy_config = (char *)"keep me";
    cfg.tc.has_data_source_stop_timeout_ms = 1;
    cfg.tc.data_source_stop_timeout_ms = 777;
    cfg.tc.has_enable_extra_guardrails = 1;
    cfg.tc.enable_extra_guardrails = 1;
    assert_true(ts_cons_enable(&c, &cfg.tc, -1) != 0);
    assert_true(ts_prod_wait_started(&p, 1, 2000));
    Perfetto__Protos__DataSourceConfig *dc =
        perfetto__protos__data_source_config__unpack(NULL, p.inst_cfg_len[0], p.inst_cfg[0]);
    assert_non_null(dc);
    assert_string_equal(dc->name, "test.ds");
    assert_int_equal(dc->target_buffer, 2); /* the second buffer's global id */
    assert_int_equal(dc->trace_duration_ms, 1234);
    assert_int_equal(dc->stop_timeout_ms, 777);
    assert_true(dc->enable_extra_guardrails);
    assert_int_equal(dc->tracing_session_id, 1);
    assert_true(dc->has_session_initiator);
    assert_string_equal(dc->legacy_config, "keep me");
    perfetto__protos__data_source_config__free_unpacked(dc, NULL);
    ts_cons_close(&c);
    ts_prod_close(&p);
    ts_env_free(&e);
}

/* ------------------------------------------------------------ clone */

static void test_clone_session(void **state)
{
    (void)state;
    struct ts_env e;
    assert_int_equal(ts_env_init(&e), 0);
    struct ts_prod p;
    struct ts_prod_opts po;
    ts_prod_opts_init(&po, "prod_a", "test.ds");
    assert_int_equal(ts_prod_connect(&e, &p, &po), 0);
    struct ts_cons c1, c2, c3;
    assert_int_equal(ts_cons_connect(&e, &c1), 0);
    struct ts_cfg cfg;
    ts_cfg_init(&cfg, 256, 0, "test.ds", 0);
    cfg.tc.unique_session_name = (char *)"snap";
    assert_true(ts_cons_enable(&c1, &cfg.tc, -1) != 0);
    assert_true(ts_prod_wait_started(&p, 1, 2000));
    assert_int_equal(ts_prod_register_writer(&p, 1, p.inst_buffer[0]), 0);
    struct tg_smb_writer w;
    assert_int_equal(ts_prod_writer(&p, &w, 1, p.inst_buffer[0]), 0);
    uint8_t pkt[128];
    for (uint64_t s = 0; s < 5; s++) {
        size_t l = ts_make_packet(pkt, sizeof pkt, 100 + s, 40);
        assert_int_equal(tg_smb_writer_write_packet(&w, pkt, l), TG_SMB_WRITER_OK);
    }
    tg_smb_writer_flush(&w);
    assert_int_equal(ts_prod_commit(&p, 0), 0);

    assert_int_equal(ts_cons_connect(&e, &c2), 0);
    Perfetto__Protos__CloneSessionRequest cr = PERFETTO__PROTOS__CLONE_SESSION_REQUEST__INIT;
    cr.selector_case = PERFETTO__PROTOS__CLONE_SESSION_REQUEST__SELECTOR_UNIQUE_SESSION_NAME;
    cr.unique_session_name = (char *)"snap";
    struct ts_frame f;
    int flushes_before = p.n_flush;
    assert_int_equal(ts_cons_call(&c2, TS_C_CLONE, &cr.base, &f, 5000), 1);
    Perfetto__Protos__CloneSessionResponse *r =
        perfetto__protos__clone_session_response__unpack(NULL, f.fi.payload_len, f.fi.payload);
    assert_non_null(r);
    assert_true(r->success);
    assert_true(r->has_uuid_msb && r->has_uuid_lsb);
    perfetto__protos__clone_session_response__free_unpacked(r, NULL);
    ts_frame_free(&f);
    assert_int_equal(p.n_flush, flushes_before + 1); /* flushed before cloning */
    struct ts_trace t = {0};
    assert_int_equal(ts_cons_read(&c2, &t, 5000), 0);
    size_t n = 0;
    for (size_t i = 0; i < t.n; i++)
        n += t.pk[i].trusted != NULL;
    assert_int_equal(n, 5);
    ts_trace_free(&t);
    assert_int_equal(ts_cons_call(&c2, TS_C_FREE, NULL, NULL, 5000), 1);
    /* the original still has its data */
    assert_int_equal(ts_cons_call(&c1, TS_C_DISABLE, NULL, NULL, 5000), 1);
    assert_int_equal(ts_cons_wait_enable(&c1, 5000, NULL, 0), 1);
    t = (struct ts_trace){0};
    assert_int_equal(ts_cons_read(&c1, &t, 5000), 0);
    n = 0;
    for (size_t i = 0; i < t.n; i++)
        n += t.pk[i].trusted != NULL;
    assert_int_equal(n, 5);
    ts_trace_free(&t);
    /* unknown session */
    assert_int_equal(ts_cons_connect(&e, &c3), 0);
    cr.selector_case = PERFETTO__PROTOS__CLONE_SESSION_REQUEST__SELECTOR_SESSION_ID;
    cr.session_id = 99;
    assert_int_equal(ts_cons_call(&c3, TS_C_CLONE, &cr.base, &f, 5000), 1);
    r = perfetto__protos__clone_session_response__unpack(NULL, f.fi.payload_len, f.fi.payload);
    assert_false(r->success);
    assert_non_null(r->error);
    perfetto__protos__clone_session_response__free_unpacked(r, NULL);
    ts_frame_free(&f);
    ts_cons_close(&c1);
    ts_cons_close(&c2);
    ts_cons_close(&c3);
    ts_prod_close(&p);
    ts_env_free(&e);
}

/* ------------------------------------------------------------ machines */

static void test_machine_filtering(void **state)
{
    (void)state;
    struct ts_env e;
    assert_int_equal(ts_env_init(&e), 0);
    struct ts_prod local, remote;
    struct ts_prod_opts po;
    ts_prod_opts_init(&po, "local", "test.ds");
    assert_int_equal(ts_prod_connect(&e, &local, &po), 0);
    ts_prod_opts_init(&po, "remote", "test.ds");
    po.tcp = 1;
    po.identity_hint = "boot-id-of-guest";
    po.machine_name = "guest1";
    assert_int_equal(ts_prod_connect(&e, &remote, &po), 0);
    struct ts_cons c;
    struct ts_cfg cfg;
    /* default: host machine only */
    assert_int_equal(ts_cons_connect(&e, &c), 0);
    ts_cfg_init(&cfg, 64, 0, "test.ds", 0);
    assert_true(ts_cons_enable(&c, &cfg.tc, -1) != 0);
    assert_true(ts_prod_wait_started(&local, 1, 2000));
    ts_pump(&e, 50);
    assert_int_equal(remote.n_setup, 0);
    ts_cons_close(&c);
    assert_true(ts_wait_svc_count(&e, TS_SVC_SESSIONS, 0, 5000));
    /* trace_all_machines */
    assert_int_equal(ts_cons_connect(&e, &c), 0);
    cfg.tc.has_trace_all_machines = 1;
    cfg.tc.trace_all_machines = 1;
    assert_true(ts_cons_enable(&c, &cfg.tc, -1) != 0);
    assert_true(ts_prod_wait_started(&remote, 1, 2000));
    assert_true(ts_prod_wait_started(&local, 2, 2000));
    /* QueryServiceState reports the machine */
    Perfetto__Protos__TracingServiceState *st = query(&c, 0);
    uint32_t mid = tg_test_fnv1a_machine_id("boot-id-of-guest");
    size_t seen = 0;
    for (size_t i = 0; i < st->n_producers; i++) {
        if (strcmp(st->producers[i]->name, "remote") == 0) {
            assert_int_equal(st->producers[i]->machine_id, mid);
            assert_int_equal(st->producers[i]->pid, 4242);
            assert_int_equal(st->producers[i]->uid, 1234);
            seen++;
        } else {
            assert_false(st->producers[i]->has_machine_id);
        }
    }
    assert_int_equal(seen, 1);
    perfetto__protos__tracing_service_state__free_unpacked(st, NULL);
    ts_cons_close(&c);
    assert_true(ts_wait_svc_count(&e, TS_SVC_SESSIONS, 0, 5000));
    /* machine_name_filter: only the guest */
    assert_int_equal(ts_cons_connect(&e, &c), 0);
    cfg.tc.has_trace_all_machines = 0;
    char *mf[] = {(char *)"guest1"};
    cfg.ds[0].n_machine_name_filter = 1;
    cfg.ds[0].machine_name_filter = mf;
    assert_true(ts_cons_enable(&c, &cfg.tc, -1) != 0);
    assert_true(ts_prod_wait_started(&remote, 2, 2000));
    ts_pump(&e, 50);
    assert_int_equal(local.n_start, 2);
    ts_cons_close(&c);
    ts_prod_close(&local);
    ts_prod_close(&remote);
    ts_env_free(&e);
}

/* ------------------------------------------------------------ periodic work */

static void test_periodic_flush_clear_and_stop_timeout(void **state)
{
    (void)state;
    struct ts_env e;
    assert_int_equal(ts_env_init(&e), 0);
    struct ts_prod a, b;
    struct ts_prod_opts po;
    ts_prod_opts_init(&po, "clears", "test.ds");
    po.handles_clear = 1;
    po.notify_stop = 1;
    po.auto_notify_stop = 0; /* never acknowledges the stop */
    assert_int_equal(ts_prod_connect(&e, &a, &po), 0);
    ts_prod_opts_init(&po, "plain", "test.ds");
    assert_int_equal(ts_prod_connect(&e, &b, &po), 0);
    struct ts_cons c;
    assert_int_equal(ts_cons_connect(&e, &c), 0);
    struct ts_cfg cfg;
    ts_cfg_init(&cfg, 64, 0, "test.ds", 0);
    Perfetto__Protos__TraceConfig__IncrementalStateConfig inc = PERFETTO__PROTOS__TRACE_CONFIG__INCREMENTAL_STATE_CONFIG__INIT;
    inc.has_clear_period_ms = 1;
    inc.clear_period_ms = 100;
    cfg.tc.incremental_state_config = &inc;
    cfg.tc.has_flush_period_ms = 1;
    cfg.tc.flush_period_ms = 100;
    cfg.tc.has_data_source_stop_timeout_ms = 1;
    cfg.tc.data_source_stop_timeout_ms = 300;
    assert_true(ts_cons_enable(&c, &cfg.tc, -1) != 0);
    assert_true(ts_prod_wait_started(&a, 1, 2000));
    g_periodic_a = &a;
    g_periodic_b = &b;
    /* the periodic timers fire (at least twice each), however late the machine lets them */
    assert_true(ts_pump_until(&e, periodic_seen, NULL, 5000));
    g_periodic_a = g_periodic_b = NULL;
    assert_true(a.n_clear >= 2);
    assert_int_equal(b.n_clear, 0); /* does not handle it */
    assert_true(a.n_flush >= 2 && b.n_flush >= 2);
    uint64_t t0 = now_ms();
    assert_int_equal(ts_cons_call(&c, TS_C_DISABLE, NULL, NULL, 5000), 1);
    assert_int_equal(ts_cons_wait_enable(&c, 5000, NULL, 0), 1);
    assert_true(tg_test_waited(t0, 300)); /* waited for the stop acknowledgement */
    ts_cons_close(&c);
    ts_prod_close(&a);
    ts_prod_close(&b);
    ts_env_free(&e);
}

/* ------------------------------------------------------------ sequences */

static uint64_t seq_of(const struct ts_packet *p)
{
    uint64_t v = 0;
    ts_pkt_varint(p->trusted, p->trusted_len, 10, &v);
    return v;
}

static void test_sequence_ids_per_session(void **state)
{
    (void)state;
    struct ts_env e;
    assert_int_equal(ts_env_init(&e), 0);
    struct ts_prod p;
    struct ts_prod_opts po;
    ts_prod_opts_init(&po, "prod_a", "test.ds");
    assert_int_equal(ts_prod_connect(&e, &p, &po), 0);
    for (int round = 0; round < 2; round++) {
        struct ts_cons c;
        assert_int_equal(ts_cons_connect(&e, &c), 0);
        struct ts_cfg cfg;
        ts_cfg_init(&cfg, 64, 0, "test.ds", 0);
        assert_true(ts_cons_enable(&c, &cfg.tc, -1) != 0);
        assert_true(ts_prod_wait_started(&p, round + 1, 2000));
        uint32_t target = p.inst_buffer[round];
        struct tg_smb_writer w1, w2;
        assert_int_equal(ts_prod_writer(&p, &w1, 1, target), 0);
        assert_int_equal(ts_prod_writer(&p, &w2, 2, target), 0);
        uint8_t pkt[64];
        size_t l = ts_make_packet(pkt, sizeof pkt, 1, 10);
        assert_int_equal(tg_smb_writer_write_packet(&w2, pkt, l), TG_SMB_WRITER_OK);
        l = ts_make_packet(pkt, sizeof pkt, 2, 10);
        assert_int_equal(tg_smb_writer_write_packet(&w1, pkt, l), TG_SMB_WRITER_OK);
        tg_smb_writer_flush(&w2);
        tg_smb_writer_flush(&w1);
        assert_int_equal(ts_prod_commit(&p, 0), 0);
        assert_int_equal(ts_cons_call(&c, TS_C_DISABLE, NULL, NULL, 5000), 1);
        assert_int_equal(ts_cons_wait_enable(&c, 5000, NULL, 0), 1);
        struct ts_trace t = {0};
        assert_int_equal(ts_cons_read(&c, &t, 5000), 0);
        uint64_t seqs[4];
        size_t n = 0;
        for (size_t i = 0; i < t.n; i++)
            if (t.pk[i].trusted && n < 4)
                seqs[n++] = seq_of(&t.pk[i]);
        assert_int_equal(n, 2);
        /* two sequences, numbered from 2 in every session */
        assert_true((seqs[0] == 2 && seqs[1] == 3) || (seqs[0] == 3 && seqs[1] == 2));
        ts_trace_free(&t);
        ts_cons_close(&c);
        assert_true(ts_wait_svc_count(&e, TS_SVC_SESSIONS, 0, 5000));
    }
    ts_prod_close(&p);
    ts_env_free(&e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_enable_tracing_validation),
        cmocka_unit_test(test_session_limits),
        cmocka_unit_test(test_disconnect_stops_data_sources),
        cmocka_unit_test(test_detach_attach),
        cmocka_unit_test(test_flush_ack_and_timeout),
        cmocka_unit_test(test_observe_events),
        cmocka_unit_test(test_query_service_state_chunks),
        cmocka_unit_test(test_capabilities_and_bugreport),
        cmocka_unit_test(test_start_trigger),
        cmocka_unit_test(test_stop_trigger),
        cmocka_unit_test(test_deferred_start_and_change_config),
        cmocka_unit_test(test_data_source_config_rewrite),
        cmocka_unit_test(test_clone_session),
        cmocka_unit_test(test_machine_filtering),
        cmocka_unit_test(test_periodic_flush_clear_and_stop_timeout),
        cmocka_unit_test(test_sequence_ids_per_session),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
