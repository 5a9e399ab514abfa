/* test_service_hostile.c: the embedded service against a malicious producer or consumer, one
 * test per resource a peer could otherwise grow without bound:
 * - a producer repeating a session's trigger name thousands of times in one ActivateTriggers
 *   frame (with a long producer name, which every trigger packet repeats) gets at most
 *   TG_SVC_MAX_TRIGGER_BYTES of unread trigger packets queued, and the trigger still acts;
 * - a consumer principal cloning its own session from many connections holds at most
 *   TG_SVC_MAX_CLONES_PER_UID clones, and other principals can still clone; all principals
 *   together hold at most TG_SVC_MAX_CLONES, and sessions can still start;
 * - a producer registering data sources without end holds at most
 *   TG_SVC_MAX_DATA_SOURCES_PER_PRODUCER (each registration walked all it had: quadratic), each
 *   descriptor at most TG_SVC_MAX_DESCRIPTOR_BYTES and all of them at most
 *   TG_SVC_MAX_DESCRIPTOR_MEMORY_PER_PRODUCER of memory, decoded;
 * - a consumer sending Flush after Flush with a long timeout to a producer that never acks has at
 *   most TG_SVC_MAX_PENDING_FLUSHES waiting; the rest fail at once; the same cap holds for the
 *   flush period (a periodic flush past it is skipped) and for CloneSession (refused past it);
 * - a producer that never opens GetAsyncCommand is disconnected once TG_SVC_MAX_QUEUED_CMDS
 *   commands wait for it;
 * - a consumer that pipelines calls without reading the replies gets no more served once its
 *   replies pass the connection's high watermark (the rest wait in its socket), and every call
 *   is answered once it reads; one QueryServiceState whose answer is megabytes of descriptors
 *   queues no more than that watermark and one part either;
 * - a config naming one data source a thousand times and a producer registering it twenty times
 *   get TG_SVC_MAX_INSTANCES_PER_PRODUCER instances, not 20,000 (and more than
 *   TG_SVC_MAX_CONFIG_DATA_SOURCES entries are refused);
 * - trace buffers (which cost nothing until filled) add up to at most the service's budget, and a
 *   principal without privileges holds at most half of it, clones included;
 * - a config asking for clock snapshots, periodic flushes and incremental-state clears every
 *   millisecond gets them at the service's floors (each clear is a command to every producer of
 *   the session, other users' included);
 * - a session nobody reads keeps at most TG_SVC_MAX_UNREAD_SNAPSHOTS clock snapshots (the first
 *   and the latest) and TG_SVC_MAX_UNREAD_EVENTS_PER_KIND lifecycle events of each kind. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <event2/event.h>

#include "test_service_util.h"
#include "tg_test_util.h"

#include "producer_port.pb-c.h"
#include "tracing_service_state.pb-c.h"

#include "service/svc.h"
#include "tracegate/ipc_host.h"
#include "tracegate/ipc_wire.h"
#include "tracegate/log.h"

/* Trigger packets (TracePacket.trigger = 46) in a trace. */
static size_t count_triggers(const struct ts_trace *t)
{
    size_t n = 0;
    for (size_t i = 0; i < t->n; i++)
        if (ts_pkt_has(t->pk[i].data, t->pk[i].len, 46))
            n++;
    return n;
}

static const struct tg_ipc_identity k_root = {.uid = 0, .pid = -1, .principal = NULL, .privileged = 1};
static const struct tg_ipc_identity k_alice = {.uid = 1000, .pid = -1, .principal = NULL, .privileged = 0};

/* A session on test.ds stopped by trigger "t" (from producers whose name matches regex, when not
 * NULL) after a 600 s stop delay: it stays STARTED while a test fires the trigger. */
struct stop_trigger {
    struct ts_cfg cfg;
    Perfetto__Protos__TraceConfig__TriggerConfig tc;
    Perfetto__Protos__TraceConfig__TriggerConfig__Trigger tr, *trp;
};

static void stop_trigger_enable(struct ts_cons *c, struct stop_trigger *st, const char *regex)
{
    ts_cfg_init(&st->cfg, 64, 0, "test.ds", 0);
    st->tc = (Perfetto__Protos__TraceConfig__TriggerConfig)PERFETTO__PROTOS__TRACE_CONFIG__TRIGGER_CONFIG__INIT;
    st->tr = (Perfetto__Protos__TraceConfig__TriggerConfig__Trigger)PERFETTO__PROTOS__TRACE_CONFIG__TRIGGER_CONFIG__TRIGGER__INIT;
    st->trp = &st->tr;
    st->tr.name = (char *)"t";
    st->tr.producer_name_regex = (char *)regex;
    st->tr.has_stop_delay_ms = 1;
    st->tr.stop_delay_ms = 600000;
    st->tc.has_trigger_mode = 1;
    st->tc.trigger_mode = PERFETTO__PROTOS__TRACE_CONFIG__TRIGGER_CONFIG__TRIGGER_MODE__STOP_TRACING;
    st->tc.n_triggers = 1;
    st->tc.triggers = &st->trp;
    st->tc.has_trigger_timeout_ms = 1;
    st->tc.trigger_timeout_ms = 600000;
    st->cfg.tc.trigger_config = &st->tc;
    assert_true(ts_cons_enable(c, &st->cfg.tc, -1) != 0);
}

static void test_trigger_flood_is_bounded(void **state)
{
    (void)state;
    struct ts_env e;
    assert_int_equal(ts_env_init(&e), 0);
    /* a 4 KiB producer name: every trigger packet carries it */
    size_t name_len = 4096;
    char *pname = malloc(name_len + 1);
    assert_non_null(pname);
    memset(pname, 'p', name_len);
    pname[name_len] = '\0';
    struct ts_prod p;
    struct ts_prod_opts po;
    ts_prod_opts_init(&po, pname, "test.ds");
    assert_int_equal(ts_prod_connect(&e, &p, &po), 0);

    /* STOP_TRACING with a long stop delay: the session stays STARTED while the flood arrives */
    struct ts_cons c;
    assert_int_equal(ts_cons_connect(&e, &c), 0);
    struct stop_trigger st;
    stop_trigger_enable(&c, &st, NULL);
    assert_true(ts_pump_until(&e, ts_prod_started, &p, 5000));

    /* one frame (3 bytes a name) naming the trigger 2000 times: 2000 packets of over 4 KiB
     * each, 8 MiB, were queued before the budget */
    assert_int_equal(ts_prod_trigger(&p, "t", 2000), 1);

    struct ts_trace t = {0};
    assert_int_equal(ts_cons_read(&c, &t, 10000), 0);
    size_t n = count_triggers(&t);
    assert_true(n >= 1); /* recorded up to the budget ... */
    assert_true(n * name_len <= TG_SVC_MAX_TRIGGER_BYTES); /* ... and no further */
    ts_trace_free(&t);

    /* the budget is for unread packets: once read, a new trigger is recorded again */
    assert_int_equal(ts_prod_trigger(&p, "t", 1), 1);
    t = (struct ts_trace){0};
    assert_int_equal(ts_cons_read(&c, &t, 10000), 0);
    assert_int_equal(count_triggers(&t), 1);
    ts_trace_free(&t);

    free(pname);
    ts_cons_close(&c);
    ts_prod_close(&p);
    ts_env_free(&e);
}

/* A trigger with a producer_name_regex: a frame naming it thousands of times from a producer the
 * regex does not admit records nothing (the regex is run once per frame, not once per name), and
 * one from a producer it admits is recorded. */
static void test_trigger_regex_once_per_frame(void **state)
{
    (void)state;
    struct ts_env e;
    assert_int_equal(ts_env_init(&e), 0);
    struct ts_prod bad, good;
    struct ts_prod_opts po;
    ts_prod_opts_init(&po, "bad.producer", "test.ds");
    assert_int_equal(ts_prod_connect(&e, &bad, &po), 0);
    ts_prod_opts_init(&po, "good.producer", "other.ds");
    assert_int_equal(ts_prod_connect(&e, &good, &po), 0);
    struct ts_cons c;
    assert_int_equal(ts_cons_connect(&e, &c), 0);
    struct stop_trigger st;
    stop_trigger_enable(&c, &st, "good\\..*");
    assert_true(ts_pump_until(&e, ts_prod_started, &bad, 5000));
    assert_int_equal(ts_prod_trigger(&bad, "t", 2000), 1);
    struct ts_trace t = {0};
    assert_int_equal(ts_cons_read(&c, &t, 10000), 0);
    assert_int_equal(count_triggers(&t), 0);
    ts_trace_free(&t);
    assert_int_equal(ts_prod_trigger(&good, "t", 3), 1);
    t = (struct ts_trace){0};
    assert_int_equal(ts_cons_read(&c, &t, 10000), 0);
    assert_int_equal(count_triggers(&t), 3);
    ts_trace_free(&t);
    ts_cons_close(&c);
    ts_prod_close(&good);
    ts_prod_close(&bad);
    ts_env_free(&e);
}

/* Producer name regexes come from any recorder and producer names from any producer: a regex
 * whose matching time explodes (back-references) or whose size does (intervals) matches nothing
 * rather than holding the service loop (glibc took minutes for the one below on 1500 a's). */
static void test_unsafe_regex_refused(void **state)
{
    (void)state;
    assert_true(tg_svc_regex_full_match("trig_.*", "trig_prod"));
    assert_true(tg_svc_regex_full_match("com\\.example\\.(a|b)+", "com.example.abba"));
    assert_true(tg_svc_regex_full_match("x\\{1\\}", "x{1}")); /* escaped braces are plain characters */
    assert_false(tg_svc_regex_full_match("trig_.*", "other"));
    /* these would match, and are refused */
    assert_false(tg_svc_regex_full_match("(a)\\1", "aa"));
    assert_false(tg_svc_regex_full_match("a{2}", "aa"));
    char *long_re = malloc(TG_SVC_MAX_REGEX + 2);
    assert_non_null(long_re);
    memset(long_re, 'a', TG_SVC_MAX_REGEX + 1);
    long_re[TG_SVC_MAX_REGEX + 1] = '\0';
    assert_false(tg_svc_regex_full_match(long_re, long_re));
    free(long_re);
    /* and the one that would hold the loop for minutes answers at once */
    static char name[1501];
    memset(name, 'a', 1500);
    assert_false(tg_svc_regex_full_match("(a*)*\\2b", name));
}

/* owner (alice) starts a session with cfg, the service's only one; returns its id. */
static uint64_t alice_session(struct ts_env *e, struct ts_cons *owner, struct ts_cfg *cfg)
{
    assert_int_equal(ts_cons_connect_as(e, owner, &k_alice), 0);
    ts_cfg_init(cfg, 16, 0, NULL, 0);
    assert_true(ts_cons_enable(owner, &cfg->tc, -1) != 0);
    assert_int_equal(ts_wait_svc_count(e, TS_SVC_SESSIONS, 1, 5000), 1);
    return e->svc->sessions->id;
}

/* Every clone is a full copy of its source's buffers (up to 128 of them, each with its own
 * buffer id) and was not counted anywhere: one principal opening connections and cloning its own
 * session could take the service's memory and all 65535 buffer ids, after which nobody could
 * start a session. */
static void test_clones_per_principal_are_bounded(void **state)
{
    (void)state;
    struct ts_env e;
    assert_int_equal(ts_env_init(&e), 0);
    struct ts_cons owner;
    struct ts_cfg cfg;
    uint64_t sid = alice_session(&e, &owner, &cfg);

    enum { N = TG_SVC_MAX_CLONES_PER_UID + 1 };
    struct ts_cons cl[N];
    char err[256];
    for (int i = 0; i < N; i++) {
        assert_int_equal(ts_cons_connect_as(&e, &cl[i], &k_alice), 0);
        int ok = ts_cons_clone(&cl[i], sid, err, sizeof err);
        assert_true(ok >= 0);
        if (i < TG_SVC_MAX_CLONES_PER_UID) {
            assert_true(ok);
        } else {
            assert_false(ok);
            assert_non_null(strstr(err, "Too many cloned sessions"));
        }
    }
    /* the quota is the principal's: root still clones alice's session */
    struct ts_cons root;
    assert_int_equal(ts_cons_connect_as(&e, &root, &k_root), 0);
    assert_int_equal(ts_cons_clone(&root, sid, err, sizeof err), 1);
    /* and a clone given back frees a place */
    ts_cons_close(&cl[0]);
    assert_int_equal(ts_wait_svc_count(&e, TS_SVC_SESSIONS, 1 + TG_SVC_MAX_CLONES_PER_UID, 5000), 1);
    assert_int_equal(ts_cons_clone(&cl[N - 1], sid, err, sizeof err), 1);

    ts_cons_close(&root);
    for (int i = 1; i < N; i++)
        ts_cons_close(&cl[i]);
    ts_cons_close(&owner);
    ts_env_free(&e);
}

/* Clones from many principals together stop at TG_SVC_MAX_CLONES, so they can never take the
 * buffer ids every session needs; sessions themselves are unaffected. */
static void test_clones_bounded_overall(void **state)
{
    (void)state;
    struct ts_env e;
    assert_int_equal(ts_env_init(&e), 0);
    struct ts_cons owner;
    struct ts_cfg cfg;
    uint64_t sid = alice_session(&e, &owner, &cfg);
    /* principals that may see alice's session (privileged), TG_SVC_MAX_CLONES_PER_UID clones each */
    enum { PER = TG_SVC_MAX_CLONES_PER_UID, N = TG_SVC_MAX_CLONES + 1 };
    static struct ts_cons cl[N];
    char err[256];
    int cloned = 0;
    for (int i = 0; i < N; i++) {
        struct tg_ipc_identity id = {.uid = (uid_t)(3000 + i / PER), .pid = -1, .principal = NULL, .privileged = 1};
        assert_int_equal(ts_cons_connect_as(&e, &cl[i], &id), 0);
        int ok = ts_cons_clone(&cl[i], sid, err, sizeof err);
        assert_true(ok >= 0);
        if (i < TG_SVC_MAX_CLONES) {
            if (!ok)
                fail_msg("clone %d refused: %s", i, err);
            cloned++;
        } else {
            assert_false(ok);
            assert_non_null(strstr(err, "Too many cloned sessions"));
        }
    }
    assert_int_equal(cloned, TG_SVC_MAX_CLONES);
    /* a new session is still possible */
    struct ts_cons bob;
    struct tg_ipc_identity bob_id = {.uid = 1001, .pid = -1, .principal = NULL, .privileged = 0};
    assert_int_equal(ts_cons_connect_as(&e, &bob, &bob_id), 0);
    assert_true(ts_cons_enable(&bob, &cfg.tc, -1) != 0);
    assert_int_equal(ts_wait_svc_count(&e, TS_SVC_SESSIONS, 1 + TG_SVC_MAX_CLONES + 1, 5000), 1);
    ts_cons_close(&bob);
    for (int i = 0; i < N; i++)
        ts_cons_close(&cl[i]);
    ts_cons_close(&owner);
    ts_env_free(&e);
}

/* RegisterDataSource of d on p: "" when registered, else the service's error. */
static void register_desc(struct ts_prod *p, Perfetto__Protos__DataSourceDescriptor *d, char *err, size_t errlen)
{
    Perfetto__Protos__RegisterDataSourceRequest rq = PERFETTO__PROTOS__REGISTER_DATA_SOURCE_REQUEST__INIT;
    rq.data_source_descriptor = d;
    struct ts_frame f;
    assert_int_equal(ts_prod_call(p, TS_P_REG_DS, &rq.base, &f), 1);
    Perfetto__Protos__RegisterDataSourceResponse *r =
        perfetto__protos__register_data_source_response__unpack(NULL, f.fi.payload_len, f.fi.payload);
    ts_frame_free(&f);
    assert_non_null(r);
    snprintf(err, errlen, "%s", r->error ? r->error : "");
    perfetto__protos__register_data_source_response__free_unpacked(r, NULL);
}

/* RegisterDataSource of `name` on p: "" when registered, else the service's error. */
static void register_ds(struct ts_prod *p, const char *name, char *err, size_t errlen)
{
    Perfetto__Protos__DataSourceDescriptor d = PERFETTO__PROTOS__DATA_SOURCE_DESCRIPTOR__INIT;
    d.name = (char *)name;
    register_desc(p, &d, err, errlen);
}

static void test_data_sources_per_producer_bounded(void **state)
{
    (void)state;
    struct ts_env e;
    assert_int_equal(ts_env_init(&e), 0);
    struct ts_prod p;
    struct ts_prod_opts po;
    memset(&po, 0, sizeof po);
    po.name = "many.sources";
    po.ds_name = "ds.0"; /* the first one */
    assert_int_equal(ts_prod_connect(&e, &p, &po), 0);
    char name[32], err[256];
    size_t refused = 0;
    for (unsigned i = 1; i < TG_SVC_MAX_DATA_SOURCES_PER_PRODUCER + 50; i++) {
        snprintf(name, sizeof name, "ds.%u", i);
        register_ds(&p, name, err, sizeof err);
        if (i < TG_SVC_MAX_DATA_SOURCES_PER_PRODUCER)
            assert_string_equal(err, "");
        else if (err[0])
            refused++;
    }
    assert_int_equal(refused, 50);
    assert_non_null(strstr(err, "too many data sources"));
    /* one goes: one more may come */
    Perfetto__Protos__UnregisterDataSourceRequest ur = PERFETTO__PROTOS__UNREGISTER_DATA_SOURCE_REQUEST__INIT;
    ur.data_source_name = (char *)"ds.7";
    assert_int_equal(ts_prod_call(&p, TS_P_UNREG_DS, &ur.base, NULL), 1);
    register_ds(&p, "ds.again", err, sizeof err);
    assert_string_equal(err, "");
    register_ds(&p, "ds.over", err, sizeof err);
    assert_string_not_equal(err, "");
    ts_prod_close(&p);
    ts_env_free(&e);
}

static int svc_one_producer(void *arg) { return ts_svc_count(arg, TS_SVC_PRODUCERS) == 1; }

static size_t instances_on(const tg_svc_session *s, const char *producer)
{
    size_t n = 0;
    for (const tg_svc_ds_inst *ds = s->instances; ds; ds = ds->next)
        n += ds->p && strcmp(ds->p->name, producer) == 0;
    return n;
}

struct inst_wait {
    struct ts_env *e;
    const char *producer;
    size_t want;
};

static int has_instances(void *arg)
{
    struct inst_wait *w = arg;
    return w->e->svc->sessions && instances_on(w->e->svc->sessions, w->producer) >= w->want;
}

static void test_instances_bounded(void **state)
{
    (void)state;
    struct ts_env e;
    assert_int_equal(ts_env_init(&e), 0);
    struct ts_cons c;
    assert_int_equal(ts_cons_connect(&e, &c), 0);
    enum { N = 1000 };
    static Perfetto__Protos__TraceConfig__DataSource *many[TG_SVC_MAX_CONFIG_DATA_SOURCES + 1];
    struct ts_cfg cfg;
    ts_cfg_init(&cfg, 256, 0, "x", 0);
    for (size_t i = 0; i <= TG_SVC_MAX_CONFIG_DATA_SOURCES; i++)
        many[i] = &cfg.ds[0];
    cfg.tc.data_sources = many;
    /* one entry too many: refused */
    cfg.tc.n_data_sources = TG_SVC_MAX_CONFIG_DATA_SOURCES + 1;
    char err[256];
    assert_true(ts_cons_enable(&c, &cfg.tc, -1) != 0);
    assert_int_equal(ts_cons_wait_enable(&c, 5000, err, sizeof err), 1);
    assert_non_null(strstr(err, "Too many data sources"));
    /* N entries naming "x" */
    cfg.tc.n_data_sources = N;
    assert_true(ts_cons_enable(&c, &cfg.tc, -1) != 0);
    assert_int_equal(ts_wait_svc_count(&e, TS_SVC_SESSIONS, 1, 5000), 1);
    struct ts_prod a, b;
    struct ts_prod_opts po;
    ts_prod_opts_init(&po, "prod.a", "x");
    tg_log_set_level(TG_LOG_ERROR);
    assert_int_equal(ts_prod_connect(&e, &a, &po), 0);
    struct inst_wait w = {&e, "prod.a", TG_SVC_MAX_INSTANCES_PER_PRODUCER};
    assert_true(ts_pump_until(&e, has_instances, &w, 10000));
    /* "x" registered again and again: no more instances on that producer */
    for (int i = 0; i < 19; i++) {
        register_ds(&a, "x", err, sizeof err);
        assert_string_equal(err, "");
    }
    tg_svc_session *s = e.svc->sessions;
    assert_int_equal(instances_on(s, "prod.a"), TG_SVC_MAX_INSTANCES_PER_PRODUCER);
    /* the limit is per producer: another one gets its own */
    ts_prod_opts_init(&po, "prod.b", "x");
    assert_int_equal(ts_prod_connect(&e, &b, &po), 0);
    w.producer = "prod.b";
    assert_true(ts_pump_until(&e, has_instances, &w, 10000));
    assert_int_equal(s->n_instances, 2 * TG_SVC_MAX_INSTANCES_PER_PRODUCER);
    /* a producer leaving takes its instances with it, and the count follows */
    ts_prod_close(&a);
    assert_true(ts_pump_until(&e, svc_one_producer, &e, 10000));
    assert_int_equal(s->n_instances, TG_SVC_MAX_INSTANCES_PER_PRODUCER);
    tg_log_set_level(TG_LOG_WARN);
    ts_prod_close(&b);
    ts_cons_close(&c);
    ts_env_free(&e);
}

/* A name of `len` bytes, ending in n (distinct names). */
static char *long_name(size_t len, unsigned n)
{
    char *name = malloc(len + 1);
    assert_non_null(name);
    memset(name, 'd', len);
    int k = snprintf(name, len + 1, "ds.%u.", n);
    name[k] = 'd';
    name[len] = '\0';
    return name;
}

/* A producer's descriptors: each at most TG_SVC_MAX_DESCRIPTOR_BYTES on the wire, all together at
 * most TG_SVC_MAX_DESCRIPTOR_MEMORY_PER_PRODUCER of the service's memory, counted as decoded;
 * before, 4096 descriptors of a whole frame each were ~500 MiB per producer connection. */
static void test_descriptor_bytes_bounded(void **state)
{
    (void)state;
    struct ts_env e;
    assert_int_equal(ts_env_init(&e), 0);
    struct ts_prod p;
    struct ts_prod_opts po;
    memset(&po, 0, sizeof po);
    po.name = "big.descriptors";
    assert_int_equal(ts_prod_connect(&e, &p, &po), 0);
    tg_svc_producer *sp = e.svc->producers;
    assert_non_null(sp);
    char err[256];
    tg_log_set_level(TG_LOG_ERROR); /* the refusal's warning */

    /* one over the per-descriptor size */
    char *name = long_name(TG_SVC_MAX_DESCRIPTOR_BYTES, 0);
    register_ds(&p, name, err, sizeof err);
    free(name);
    assert_non_null(strstr(err, "too large"));
    assert_int_equal(sp->n_sources, 0);

    /* 60 KiB each: the per-producer memory ends it after 4 MiB, not 4096 of them */
    enum { EACH = 60 * 1024 };
    unsigned accepted = 0;
    for (unsigned i = 1; i < 200; i++) {
        name = long_name(EACH, i);
        register_ds(&p, name, err, sizeof err);
        free(name);
        if (err[0])
            break;
        accepted++;
    }
    assert_non_null(strstr(err, "past 4 MiB"));
    assert_true(accepted >= (TG_SVC_MAX_DESCRIPTOR_MEMORY_PER_PRODUCER / EACH) * 9 / 10);
    assert_true(accepted <= TG_SVC_MAX_DESCRIPTOR_MEMORY_PER_PRODUCER / EACH);
    assert_true(sp->desc_bytes <= TG_SVC_MAX_DESCRIPTOR_MEMORY_PER_PRODUCER);
    assert_int_equal(sp->n_sources, accepted);

    /* an update may not grow one past the size either; the old one stays */
    Perfetto__Protos__DataSourceDescriptor d = PERFETTO__PROTOS__DATA_SOURCE_DESCRIPTOR__INIT;
    d.name = long_name(TG_SVC_MAX_DESCRIPTOR_BYTES + 100, 1);
    d.name[EACH] = '\0'; /* the name of ds 1 ... */
    Perfetto__Protos__TrackEventCategory cat = PERFETTO__PROTOS__TRACK_EVENT_CATEGORY__INIT, *catp = &cat;
    cat.name = d.name + EACH + 1; /* ... with a category making it too large */
    Perfetto__Protos__TrackEventDescriptor ted = PERFETTO__PROTOS__TRACK_EVENT_DESCRIPTOR__INIT;
    ted.n_available_categories = 1;
    ted.available_categories = &catp;
    d.track_event_descriptor = &ted;
    Perfetto__Protos__UpdateDataSourceRequest uq = PERFETTO__PROTOS__UPDATE_DATA_SOURCE_REQUEST__INIT;
    uq.data_source_descriptor = &d;
    size_t held = sp->desc_bytes;
    assert_int_equal(ts_prod_call(&p, TS_P_UPDATE_DS, &uq.base, NULL), 0);
    assert_int_equal(sp->desc_bytes, held);
    assert_null(sp->sources->desc->track_event_descriptor);
    free(d.name);

    /* one goes: another fits */
    name = long_name(EACH, 1);
    Perfetto__Protos__UnregisterDataSourceRequest ur = PERFETTO__PROTOS__UNREGISTER_DATA_SOURCE_REQUEST__INIT;
    ur.data_source_name = name;
    assert_int_equal(ts_prod_call(&p, TS_P_UNREG_DS, &ur.base, NULL), 1);
    free(name);
    assert_true(sp->desc_bytes < held);
    name = long_name(EACH, 1000);
    register_ds(&p, name, err, sizeof err);
    free(name);
    assert_string_equal(err, "");
    ts_prod_close(&p);

    /* what counts is what a copy holds: small fields decode to many times their bytes (~50 KB of
     * one-letter categories hold ~1 MB), so four such descriptors fit, not 80 */
    assert_int_equal(ts_prod_connect(&e, &p, &po), 0);
    sp = e.svc->producers;
    enum { CATS = 10000 };
    Perfetto__Protos__TrackEventCategory *cats = calloc(CATS, sizeof *cats);
    Perfetto__Protos__TrackEventCategory **catps = calloc(CATS, sizeof *catps);
    assert_non_null(cats);
    assert_non_null(catps);
    for (size_t i = 0; i < CATS; i++) {
        perfetto__protos__track_event_category__init(&cats[i]);
        cats[i].name = (char *)"c";
        catps[i] = &cats[i];
    }
    ted.n_available_categories = CATS;
    ted.available_categories = catps;
    d.track_event_descriptor = &ted;
    char dsname[32] = "cats";
    d.name = dsname;
    assert_true(protobuf_c_message_get_packed_size(&d.base) <= TG_SVC_MAX_DESCRIPTOR_BYTES);
    accepted = 0;
    for (unsigned i = 0; i < 80; i++) {
        snprintf(dsname, sizeof dsname, "cats.%u", i);
        d.name = dsname;
        register_desc(&p, &d, err, sizeof err);
        if (err[0])
            break;
        accepted++;
    }
    assert_non_null(strstr(err, "past 4 MiB"));
    assert_true(accepted >= 1 && accepted < 20);
    assert_true(sp->desc_bytes <= TG_SVC_MAX_DESCRIPTOR_MEMORY_PER_PRODUCER);
    free(cats);
    free(catps);
    tg_log_set_level(TG_LOG_WARN);
    ts_prod_close(&p);
    ts_env_free(&e);
}

struct flush_replies {
    struct ts_cons *c;
    uint64_t first, last;
    size_t failed;
};

/* Counts failed Flush replies among request ids first..last. */
static int flushes_failed(void *arg)
{
    struct flush_replies *fr = arg;
    struct ts_frame f;
    for (uint64_t rid = fr->first; rid <= fr->last; rid++) {
        if (ts_raw_take(&fr->c->r, rid, &f)) {
            if (!f.fi.success)
                fr->failed++;
            ts_frame_free(&f);
        }
    }
    return fr->failed >= 40;
}

static void test_pending_flushes_bounded(void **state)
{
    (void)state;
    struct ts_env e;
    assert_int_equal(ts_env_init(&e), 0);
    struct ts_prod p;
    struct ts_prod_opts po;
    memset(&po, 0, sizeof po);
    po.name = "never.acks";
    po.ds_name = "test.ds";
    po.auto_ack_flush = 0; /* flushes stay pending until their timeout */
    assert_int_equal(ts_prod_connect(&e, &p, &po), 0);
    struct ts_cons c;
    assert_int_equal(ts_cons_connect(&e, &c), 0);
    struct ts_cfg cfg;
    ts_cfg_init(&cfg, 64, 0, "test.ds", 0);
    assert_true(ts_cons_enable(&c, &cfg.tc, -1) != 0);
    assert_true(ts_pump_until(&e, ts_prod_started, &p, 5000));
    /* MAX + 40 Flush requests with a timeout of a day, sent without waiting for replies */
    Perfetto__Protos__FlushRequest fq = PERFETTO__PROTOS__FLUSH_REQUEST__INIT;
    fq.has_timeout_ms = 1;
    fq.timeout_ms = 86400000u;
    struct flush_replies fr = {&c, c.rid + 1, 0, 0};
    for (unsigned i = 0; i < TG_SVC_MAX_PENDING_FLUSHES + 40; i++)
        assert_int_equal(ts_raw_invoke(&e, &c.r, ++c.rid, 1, TS_C_FLUSH, &fq.base, 0, -1), 0);
    fr.last = c.rid;
    /* the 40 over the limit fail at once; the others wait for their producer */
    assert_true(ts_pump_until(&e, flushes_failed, &fr, 10000));
    size_t pending = 0;
    for (tg_svc_flush *f = e.svc->sessions->flushes; f; f = f->next)
        pending++;
    assert_true(pending <= TG_SVC_MAX_PENDING_FLUSHES);
    assert_int_equal(fr.failed, 40);
    ts_cons_close(&c);
    ts_prod_close(&p);
    ts_env_free(&e);
}

/* A session on test.ds with a producer that never acks its flushes, which may wait a day. */
static void never_acked_session(struct ts_env *e, struct ts_prod *p, struct ts_cons *c, uint32_t flush_period_ms)
{
    struct ts_prod_opts po;
    memset(&po, 0, sizeof po);
    po.name = "never.acks";
    po.ds_name = "test.ds";
    assert_int_equal(ts_prod_connect(e, p, &po), 0);
    assert_int_equal(ts_cons_connect(e, c), 0);
    struct ts_cfg cfg;
    ts_cfg_init(&cfg, 64, 0, "test.ds", 0);
    cfg.tc.has_flush_timeout_ms = 1;
    cfg.tc.flush_timeout_ms = 86400000u;
    if (flush_period_ms) {
        cfg.tc.has_flush_period_ms = 1;
        cfg.tc.flush_period_ms = flush_period_ms;
    }
    assert_true(ts_cons_enable(c, &cfg.tc, -1) != 0);
    assert_true(ts_pump_until(e, ts_prod_started, p, 5000));
}

static int periodic_skipped(void *arg)
{
    const tg_svc_session *s = arg;
    return s->periodic_flushes_skipped >= 2;
}

static int prod_flushes_at_least(void *arg)
{
    const struct ts_prod *p = arg;
    return p->n_flush >= (int)TG_SVC_MAX_PENDING_FLUSHES;
}

/* The flush period adds a flush per tick: with a producer that never acks and a day's timeout they
 * piled up (748 after 3 s at 1 ms). Past the cap a tick is skipped. */
static void test_periodic_flushes_bounded(void **state)
{
    (void)state;
    struct ts_env e;
    assert_int_equal(ts_env_init(&e), 0);
    struct ts_prod p;
    struct ts_cons c;
    never_acked_session(&e, &p, &c, TG_SVC_MIN_FLUSH_PERIOD_MS);
    tg_svc_session *s = e.svc->sessions;
    /* the cap filled at once by consumer Flushes (the flush period alone takes 64 ticks); the
     * periodic ones that came first take some of the places, the rest fail */
    Perfetto__Protos__FlushRequest fq = PERFETTO__PROTOS__FLUSH_REQUEST__INIT;
    for (unsigned i = 0; i < TG_SVC_MAX_PENDING_FLUSHES; i++)
        assert_int_equal(ts_raw_invoke(&e, &c.r, ++c.rid, 1, TS_C_FLUSH, &fq.base, 0, -1), 0);
    tg_log_set_level(TG_LOG_ERROR); /* the skip's warning */
    assert_true(ts_pump_until(&e, periodic_skipped, s, 10000));
    tg_log_set_level(TG_LOG_WARN);
    assert_int_equal(tg_svc_session_pending_flushes(s), TG_SVC_MAX_PENDING_FLUSHES);
    assert_int_equal(s->flushes_requested, TG_SVC_MAX_PENDING_FLUSHES);
    /* and the producer got one Flush command per flush waiting, no more */
    assert_true(ts_pump_until(&e, prod_flushes_at_least, &p, 5000));
    assert_int_equal(p.n_flush, TG_SVC_MAX_PENDING_FLUSHES);
    ts_cons_close(&c);
    ts_prod_close(&p);
    ts_env_free(&e);
}

struct clone_replies {
    struct ts_cons *c;
    uint64_t first, last;
    size_t refused;
    char err[256];
};

/* Counts CloneSession replies among request ids first..last; all must be refusals. */
static int clones_refused(void *arg)
{
    struct clone_replies *cr = arg;
    struct ts_frame f;
    for (uint64_t rid = cr->first; rid <= cr->last; rid++) {
        if (!ts_raw_take(&cr->c->r, rid, &f))
            continue;
        Perfetto__Protos__CloneSessionResponse *r =
            f.fi.success ? perfetto__protos__clone_session_response__unpack(NULL, f.fi.payload_len, f.fi.payload)
                         : NULL;
        ts_frame_free(&f);
        assert_non_null(r);
        assert_false(r->success);
        snprintf(cr->err, sizeof cr->err, "%s", r->error ? r->error : "");
        perfetto__protos__clone_session_response__free_unpacked(r, NULL);
        cr->refused++;
    }
    return cr->refused >= 20;
}

/* CloneSession of a running session flushes it first: pipelined calls (the caller holds no session
 * until one is answered) each added a flush record, 2000 calls 2000 records. Past the cap they are
 * refused with the reason. */
static void test_clone_flushes_bounded(void **state)
{
    (void)state;
    struct ts_env e;
    assert_int_equal(ts_env_init(&e), 0);
    struct ts_prod p;
    struct ts_cons owner, cl;
    never_acked_session(&e, &p, &owner, 0);
    tg_svc_session *s = e.svc->sessions;
    assert_int_equal(ts_cons_connect(&e, &cl), 0);
    Perfetto__Protos__CloneSessionRequest rq = PERFETTO__PROTOS__CLONE_SESSION_REQUEST__INIT;
    rq.selector_case = PERFETTO__PROTOS__CLONE_SESSION_REQUEST__SELECTOR_SESSION_ID;
    rq.session_id = s->id;
    struct clone_replies cr = {.c = &cl, .first = cl.rid + 1};
    for (unsigned i = 0; i < TG_SVC_MAX_PENDING_FLUSHES + 20; i++)
        assert_int_equal(ts_raw_invoke(&e, &cl.r, ++cl.rid, 1, TS_C_CLONE, &rq.base, 0, -1), 0);
    cr.last = cl.rid;
    /* the 20 past the cap are answered at once; the others wait for the producer */
    assert_true(ts_pump_until(&e, clones_refused, &cr, 10000));
    assert_int_equal(cr.refused, 20);
    assert_non_null(strstr(cr.err, "Too many flushes waiting"));
    assert_int_equal(tg_svc_session_pending_flushes(s), TG_SVC_MAX_PENDING_FLUSHES);
    /* a consumer Flush is refused as well now: one cap for every path */
    Perfetto__Protos__FlushRequest fq = PERFETTO__PROTOS__FLUSH_REQUEST__INIT;
    assert_int_equal(ts_cons_call(&owner, TS_C_FLUSH, &fq.base, NULL, 5000), 0);
    ts_cons_close(&cl);
    ts_cons_close(&owner);
    ts_prod_close(&p);
    ts_env_free(&e);
}

static int svc_has_no_producers(void *arg) { return ((struct ts_env *)arg)->svc->producers == NULL; }

/* A producer that never opens GetAsyncCommand: the commands meant for it (here one Flush each)
 * are queued up to TG_SVC_MAX_QUEUED_CMDS, then it is disconnected, not queued for without end. */
static void test_unread_commands_bounded(void **state)
{
    (void)state;
    struct ts_env e;
    assert_int_equal(ts_env_init(&e), 0);
    struct ts_prod p;
    struct ts_prod_opts po;
    memset(&po, 0, sizeof po);
    po.name = "never.asks";
    po.ds_name = "test.ds";
    po.no_async = 1;
    assert_int_equal(ts_prod_connect(&e, &p, &po), 0);
    struct ts_cons c;
    assert_int_equal(ts_cons_connect(&e, &c), 0);
    struct ts_cfg cfg;
    ts_cfg_init(&cfg, 64, 0, "test.ds", 0);
    assert_true(ts_cons_enable(&c, &cfg.tc, -1) != 0);
    assert_int_equal(ts_wait_svc_count(&e, TS_SVC_SESSIONS, 1, 5000), 1);
    /* Flushes that time out at once, each one more command for the producer */
    Perfetto__Protos__FlushRequest fq = PERFETTO__PROTOS__FLUSH_REQUEST__INIT;
    fq.has_timeout_ms = 1;
    fq.timeout_ms = 1;
    tg_log_set_level(TG_LOG_ERROR); /* a warning per timed-out flush */
    for (unsigned i = 0; i < TG_SVC_MAX_QUEUED_CMDS + 20 && e.svc->producers; i++) {
        assert_true(e.svc->producers->n_cmds <= TG_SVC_MAX_QUEUED_CMDS);
        (void)ts_cons_call(&c, TS_C_FLUSH, &fq.base, NULL, 5000);
    }
    tg_log_set_level(TG_LOG_WARN);
    assert_true(ts_pump_until(&e, svc_has_no_producers, &e, 10000));
    ts_cons_close(&c);
    ts_prod_close(&p);
    ts_env_free(&e);
}

struct replies_wait {
    struct ts_raw *r;
    size_t want;
};

static int all_replies(void *arg)
{
    struct replies_wait *w = arg;
    return ts_raw_count(w->r, 0) >= w->want || w->r->eof;
}

static void test_unread_replies_bounded(void **state)
{
    (void)state;
    struct ts_env e;
    assert_int_equal(ts_env_init(&e), 0);
    struct ts_cons c;
    assert_int_equal(ts_cons_connect(&e, &c), 0);
    tg_svc_consumer *sc = e.svc->consumers;
    assert_non_null(sc);
    /* one QueryServiceState call, framed, sent over and over; only the service's loop runs (the
     * test's own end is not read) */
    uint8_t frame[64];
    size_t n = tg_ipc_encode_invoke(frame + 4, sizeof frame - 4, 7, 1, TS_C_QUERY, NULL, 0, 0);
    assert_true(n > 0);
    tg_frame_put_header(frame, (uint32_t)n);
    const size_t flen = n + 4, max_calls = 400000;
    size_t calls = 0, off = 0, max_queued = 0;
    unsigned stalled = 0;
    while (calls < max_calls && stalled < 2000) {
        ssize_t w = send(c.r.fd, frame + off, flen - off, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (w > 0) {
            stalled = 0;
            off += (size_t)w;
            if (off == flen) {
                off = 0;
                calls++;
            }
        } else {
            assert_true(w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK));
            stalled++; /* the socket is full: the service reads no more of it */
        }
        event_base_loop(e.base, EVLOOP_NONBLOCK);
        assert_ptr_equal(e.svc->consumers, sc); /* never cut */
        size_t q = tg_ipc_peer_output_len(sc->peer);
        if (q > max_queued)
            max_queued = q;
    }
    /* the service stopped reading: the writes stalled long before max_calls, with the replies
     * it holds bounded by the watermark (1 MiB) plus one reply */
    assert_true(calls < max_calls);
    assert_true(max_queued < (1u << 20) + 4096);
    assert_true(calls > 1000);
    /* the rest of a half-sent frame, then the client reads: every call is answered */
    if (off > 0) {
        while (off < flen) {
            ssize_t w = send(c.r.fd, frame + off, flen - off, MSG_DONTWAIT | MSG_NOSIGNAL);
            if (w > 0)
                off += (size_t)w;
            ts_pump(&e, 1);
        }
        calls++;
    }
    struct replies_wait rw = {&c.r, calls};
    assert_true(ts_pump_until(&e, all_replies, &rw, 60000));
    assert_false(c.r.eof);
    assert_int_equal(ts_raw_count(&c.r, 7), calls);
    ts_cons_close(&c);
    ts_env_free(&e);
}

struct state_replies {
    struct ts_raw *r;
    uint64_t rid[2];
};

/* Both queries answered to their last part. */
static int both_answered(void *arg)
{
    struct state_replies *w = arg;
    int done = 0;
    for (size_t i = 0; i < w->r->nq; i++)
        for (int k = 0; k < 2; k++)
            done += w->r->q[i].fi.request_id == w->rid[k] && !w->r->q[i].fi.has_more;
    return done == 2 || w->r->eof;
}

/* Data sources in the QueryServiceState parts for rid (each within a frame), in queue order; and
 * the position of its last part in the queue. */
static size_t state_data_sources(const struct ts_raw *r, uint64_t rid, size_t *last)
{
    size_t n = 0;
    for (size_t i = 0; i < r->nq; i++) {
        const struct ts_frame *f = &r->q[i];
        if (f->fi.request_id != rid)
            continue;
        assert_true(f->fi.success);
        assert_true(f->fi.payload_len <= TG_SVC_MAX_STATE_REPLY);
        Perfetto__Protos__QueryServiceStateResponse *qr =
            perfetto__protos__query_service_state_response__unpack(NULL, f->fi.payload_len, f->fi.payload);
        assert_non_null(qr);
        assert_non_null(qr->service_state);
        n += qr->service_state->n_data_sources;
        perfetto__protos__query_service_state_response__free_unpacked(qr, NULL);
        *last = i;
    }
    return n;
}

/* QueryServiceState sends every descriptor of every producer: one query queued it all at once
 * (200 descriptors of 120 KB: 23.8 MB for one caller that need not read). Its parts now go out
 * as the caller reads: never more than the output's high watermark (1 MiB) plus one part. */
static void test_state_query_bounded(void **state)
{
    (void)state;
    struct ts_env e;
    assert_int_equal(ts_env_init(&e), 0);
    enum { PRODUCERS = 2, EACH_DS = 60, DS_BYTES = 60 * 1024 };
    struct ts_prod p[PRODUCERS];
    struct ts_prod_opts po;
    memset(&po, 0, sizeof po);
    po.name = "described";
    char err[256];
    for (int k = 0; k < PRODUCERS; k++) {
        assert_int_equal(ts_prod_connect(&e, &p[k], &po), 0);
        for (unsigned i = 0; i < EACH_DS; i++) {
            char *name = long_name(DS_BYTES, i);
            register_ds(&p[k], name, err, sizeof err);
            free(name);
            assert_string_equal(err, "");
        }
    }
    struct ts_cons c;
    assert_int_equal(ts_cons_connect(&e, &c), 0);
    tg_svc_consumer *sc = e.svc->consumers;
    /* two queries pipelined; only the service's loop runs (the test's end is not read) */
    Perfetto__Protos__QueryServiceStateRequest q = PERFETTO__PROTOS__QUERY_SERVICE_STATE_REQUEST__INIT;
    struct state_replies w = {&c.r, {++c.rid, ++c.rid}};
    for (int k = 0; k < 2; k++)
        assert_int_equal(ts_raw_invoke(&e, &c.r, w.rid[k], 1, TS_C_QUERY, &q.base, 0, -1), 0);
    size_t max_queued = 0, last = (size_t)-1;
    unsigned unchanged = 0;
    while (unchanged < 2000) { /* until the service can send no more: it waits for the reader */
        event_base_loop(e.base, EVLOOP_NONBLOCK);
        size_t queued = tg_ipc_peer_output_len(sc->peer);
        unchanged = queued == last ? unchanged + 1 : 0;
        last = queued;
        if (queued > max_queued)
            max_queued = queued;
    }
    assert_true(max_queued > 0);
    if (max_queued > (1u << 20) + TG_SVC_MAX_STATE_REPLY + 4096)
        fail_msg("%zu bytes queued for a caller that does not read", max_queued);
    /* it reads: both are answered in full, one after the other */
    assert_true(ts_pump_until(&e, both_answered, &w, 30000));
    assert_false(c.r.eof);
    size_t last0 = 0, last1 = 0;
    assert_int_equal(state_data_sources(&c.r, w.rid[0], &last0), PRODUCERS * EACH_DS);
    assert_int_equal(state_data_sources(&c.r, w.rid[1], &last1), PRODUCERS * EACH_DS);
    for (size_t i = 0; i < last0; i++)
        assert_true(c.r.q[i].fi.request_id != w.rid[1]);
    ts_cons_close(&c);
    for (int k = 0; k < PRODUCERS; k++)
        ts_prod_close(&p[k]);
    ts_env_free(&e);
}

struct enable_wait {
    struct ts_env *e;
    struct ts_cons *c;
    uint64_t rid;
    size_t sessions_before;
};

static int enable_settled(void *arg)
{
    struct enable_wait *w = arg;
    return ts_raw_count(&w->c->r, w->rid) > 0 || ts_svc_count(w->e, TS_SVC_SESSIONS) > w->sessions_before;
}

/* EnableTracing with one buffer: the request id once the session exists, or 0 with the refusal in
 * err (a refusal is answered at once; a started session only at its end). */
static uint64_t start_with_buffer(struct ts_env *e, struct ts_cons *c, uint32_t size_kb, char *err, size_t errlen)
{
    struct ts_cfg cfg;
    ts_cfg_init(&cfg, size_kb, 0, NULL, 0);
    struct enable_wait w = {e, c, 0, ts_svc_count(e, TS_SVC_SESSIONS)};
    w.rid = ts_cons_enable(c, &cfg.tc, -1);
    assert_true(w.rid != 0);
    assert_true(ts_pump_until(e, enable_settled, &w, 10000));
    err[0] = 0;
    if (ts_raw_count(&c->r, w.rid) > 0) {
        assert_int_equal(ts_cons_wait_enable(c, 5000, err, errlen), 1);
        assert_true(err[0] != 0);
        return 0;
    }
    return w.rid;
}

static void test_buffer_memory_budget(void **state)
{
    (void)state;
    static const struct tg_ipc_identity alice = {.uid = 1000, .pid = -1};
    static const struct tg_ipc_identity root = {.uid = 0, .pid = -1, .privileged = 1};
    struct ts_env e;
    assert_int_equal(ts_env_init(&e), 0);
    e.svc->buffer_budget = 64u << 20;
    struct ts_cons a1, a2, a3, r1, r2;
    assert_int_equal(ts_cons_connect_as(&e, &a1, &alice), 0);
    assert_int_equal(ts_cons_connect_as(&e, &a2, &alice), 0);
    assert_int_equal(ts_cons_connect_as(&e, &a3, &alice), 0);
    assert_int_equal(ts_cons_connect_as(&e, &r1, &root), 0);
    assert_int_equal(ts_cons_connect_as(&e, &r2, &root), 0);
    char err[512];
    /* 128 buffers of 4 GB: far past the budget, refused before anything is allocated */
    struct ts_cfg big;
    ts_cfg_init(&big, 4u << 20, 0, NULL, 0);
    assert_true(ts_cons_enable(&a1, &big.tc, -1) != 0);
    assert_int_equal(ts_cons_wait_enable(&a1, 5000, err, sizeof err), 1);
    assert_non_null(strstr(err, "do not fit in the service's buffer memory"));
    /* alice: 24 MB, then 16 more would pass her half (32 MB) */
    assert_true(start_with_buffer(&e, &a1, 24u << 10, err, sizeof err) != 0);
    assert_int_equal(start_with_buffer(&e, &a2, 16u << 10, err, sizeof err), 0);
    assert_non_null(strstr(err, "past its share"));
    assert_non_null(strstr(err, "uid:1000"));
    /* a clone copies its source: the same share */
    uint64_t id = e.svc->sessions->id;
    assert_int_equal(ts_cons_clone(&a3, id, err, sizeof err), 0);
    assert_non_null(strstr(err, "past its share"));
    /* root is bound by the whole budget only: 32 MB fit (56 of 64), 16 more do not */
    assert_true(start_with_buffer(&e, &r1, 32u << 10, err, sizeof err) != 0);
    assert_int_equal(e.svc->buffer_bytes, 56u << 20);
    assert_int_equal(start_with_buffer(&e, &r2, 16u << 10, err, sizeof err), 0);
    assert_non_null(strstr(err, "do not fit"));
    /* alice's session ends: its memory is free again, for anyone */
    ts_cons_close(&a1);
    assert_int_equal(ts_wait_svc_count(&e, TS_SVC_SESSIONS, 1, 5000), 1);
    assert_int_equal(e.svc->buffer_bytes, 32u << 20);
    assert_true(start_with_buffer(&e, &r2, 16u << 10, err, sizeof err) != 0);
    ts_cons_close(&a2);
    ts_cons_close(&a3);
    ts_cons_close(&r1);
    ts_cons_close(&r2);
    assert_int_equal(ts_wait_svc_count(&e, TS_SVC_SESSIONS, 0, 5000), 1);
    assert_int_equal(e.svc->buffer_bytes, 0);
    ts_env_free(&e);
}

/* ------------------------------------------------------------ periodic work and unread packets */

static size_t list_len(const struct tg_svc_pkt_list *l, int tag)
{
    size_t n = 0;
    for (const struct tg_svc_pkt *pk = l->head; pk; pk = pk->next)
        n += tag < 0 || pk->tag == tag;
    return n;
}

struct periodic_wait {
    struct ts_prod *p;
    tg_svc_session *s;
};

static int periodic_ticked(void *arg)
{
    struct periodic_wait *w = arg;
    /* 2 snapshots before the first tick: the session's creation and its start */
    return w->p->n_flush >= 3 && w->p->n_clear >= 3 && list_len(&w->s->clock_snapshots, -1) >= 2 + 3;
}

/* Timers can fire at most once per floor (half of it, for libevent's coarse clock) in `elapsed`. */
static void assert_at_floor(size_t ticks, uint64_t elapsed_ms, unsigned floor_ms)
{
    if (ticks > 2 + elapsed_ms / (floor_ms / 2))
        fail_msg("%zu ticks in %llu ms: more than one per %u ms", ticks, (unsigned long long)elapsed_ms, floor_ms);
}

static void test_periods_have_floors(void **state)
{
    (void)state;
    struct ts_env e;
    assert_int_equal(ts_env_init(&e), 0);
    struct ts_prod p;
    struct ts_prod_opts po;
    ts_prod_opts_init(&po, "clears", "test.ds");
    po.handles_clear = 1;
    assert_int_equal(ts_prod_connect(&e, &p, &po), 0);
    struct ts_cons c;
    assert_int_equal(ts_cons_connect(&e, &c), 0);
    struct ts_cfg cfg;
    ts_cfg_init(&cfg, 64, 0, "test.ds", 0);
    Perfetto__Protos__TraceConfig__IncrementalStateConfig inc = PERFETTO__PROTOS__TRACE_CONFIG__INCREMENTAL_STATE_CONFIG__INIT;
    inc.has_clear_period_ms = 1;
    inc.clear_period_ms = 1;
    cfg.tc.incremental_state_config = &inc;
    Perfetto__Protos__TraceConfig__BuiltinDataSource bi = PERFETTO__PROTOS__TRACE_CONFIG__BUILTIN_DATA_SOURCE__INIT;
    bi.has_snapshot_interval_ms = 1;
    bi.snapshot_interval_ms = 1;
    cfg.tc.builtin_data_sources = &bi;
    cfg.tc.has_flush_period_ms = 1;
    cfg.tc.flush_period_ms = 1;
    uint64_t t0 = tg_test_now_ms();
    assert_true(ts_cons_enable(&c, &cfg.tc, -1) != 0);
    assert_int_equal(ts_wait_svc_count(&e, TS_SVC_SESSIONS, 1, 5000), 1);
    struct periodic_wait w = {&p, e.svc->sessions};
    assert_true(ts_pump_until(&e, periodic_ticked, &w, 10000));
    uint64_t elapsed = tg_test_now_ms() - t0;
    /* 1 ms asked: a thousand a second of each before the floors */
    assert_at_floor((size_t)p.n_flush, elapsed, TG_SVC_MIN_FLUSH_PERIOD_MS);
    assert_at_floor((size_t)p.n_clear, elapsed, TG_SVC_MIN_CLEAR_PERIOD_MS);
    assert_at_floor(list_len(&w.s->clock_snapshots, -1) - 2, elapsed, TG_SVC_MIN_SNAPSHOT_MS);
    ts_cons_close(&c);
    ts_prod_close(&p);
    ts_env_free(&e);
}

/* TracePacket.service_event (69) of kind `ev` in a trace, and the timestamp (8) of the last. */
static size_t count_events(const struct ts_trace *t, uint32_t ev, uint64_t *last_ts)
{
    size_t n = 0;
    for (size_t i = 0; i < t->n; i++) {
        const uint8_t *d;
        size_t l;
        if (!ts_pkt_bytes(t->pk[i].data, t->pk[i].len, 69, &d, &l) || !ts_pkt_has(d, l, ev))
            continue;
        n++;
        if (last_ts)
            ts_pkt_varint(t->pk[i].data, t->pk[i].len, 8, last_ts);
    }
    return n;
}

static size_t count_field(const struct ts_trace *t, uint32_t field)
{
    size_t n = 0;
    for (size_t i = 0; i < t->n; i++)
        n += ts_pkt_has(t->pk[i].data, t->pk[i].len, field);
    return n;
}

/* A session nobody reads: what its timers add (here: what 100 s of snapshots and flushes at the
 * floors add, a thousand of each) is kept like traced keeps it, not all of it. */
static void test_unread_service_packets_bounded(void **state)
{
    (void)state;
    struct ts_env e;
    assert_int_equal(ts_env_init(&e), 0);
    struct ts_cons c;
    assert_int_equal(ts_cons_connect(&e, &c), 0);
    struct ts_cfg cfg;
    ts_cfg_init(&cfg, 64, 0, NULL, 0);
    assert_true(ts_cons_enable(&c, &cfg.tc, -1) != 0);
    assert_int_equal(ts_wait_svc_count(&e, TS_SVC_SESSIONS, 1, 5000), 1);
    tg_svc_session *s = e.svc->sessions;
    assert_int_equal(s->state, TG_SESS_STARTED);
    uint8_t first[512]; /* the session's first clock snapshot packet */
    assert_non_null(s->clock_snapshots.head);
    size_t first_len = s->clock_snapshots.head->len;
    assert_true(first_len <= sizeof first);
    memcpy(first, s->clock_snapshots.head->data, first_len);
    uint64_t before_last = 0;
    for (int i = 0; i < 1000; i++) {
        if (i == 999)
            before_last = (uint64_t)tg_svc_now_ns(6);
        tg_svc_snapshot_clocks(s);
        tg_svc_session_event(s, TG_EV_FLUSH_STARTED);
        tg_svc_session_event(s, TG_EV_ALL_DATA_SOURCES_FLUSHED);
    }
    assert_true(list_len(&s->clock_snapshots, -1) <= TG_SVC_MAX_UNREAD_SNAPSHOTS);
    assert_int_equal(list_len(&s->events, TG_EV_FLUSH_STARTED), TG_SVC_MAX_UNREAD_EVENTS_PER_KIND);
    assert_int_equal(list_len(&s->events, TG_EV_ALL_DATA_SOURCES_FLUSHED), TG_SVC_MAX_UNREAD_EVENTS_PER_KIND);

    struct ts_trace t = {0};
    assert_int_equal(ts_cons_read(&c, &t, 10000), 0);
    assert_int_equal(count_field(&t, 6), TG_SVC_MAX_UNREAD_SNAPSHOTS);
    /* the first snapshot (the session's creation) is kept, with the latest */
    size_t k = 0;
    while (k < t.n && !ts_pkt_has(t.pk[k].data, t.pk[k].len, 6))
        k++;
    assert_true(k < t.n);
    const uint8_t *snap;
    size_t snap_len;
    assert_true(ts_pkt_bytes(t.pk[k].data, t.pk[k].len, 6, &snap, &snap_len));
    const uint8_t *kept;
    size_t kept_len;
    assert_true(ts_pkt_bytes(first, first_len, 6, &kept, &kept_len));
    assert_int_equal(snap_len, kept_len);
    assert_memory_equal(snap, kept, snap_len);
    uint64_t last_ts = 0;
    assert_int_equal(count_events(&t, TG_EV_FLUSH_STARTED, &last_ts), TG_SVC_MAX_UNREAD_EVENTS_PER_KIND);
    assert_true(last_ts >= before_last); /* the latest are the ones kept */
    assert_int_equal(count_events(&t, TG_EV_ALL_DATA_SOURCES_FLUSHED, NULL), TG_SVC_MAX_UNREAD_EVENTS_PER_KIND);
    assert_int_equal(count_events(&t, TG_EV_TRACING_STARTED, NULL), 1); /* one of a kind: kept */
    ts_trace_free(&t);

    /* the bounds are for unread packets: after a read, new ones are kept again */
    tg_svc_session_event(s, TG_EV_FLUSH_STARTED);
    t = (struct ts_trace){0};
    assert_int_equal(ts_cons_read(&c, &t, 10000), 0);
    assert_int_equal(count_events(&t, TG_EV_FLUSH_STARTED, NULL), 1);
    ts_trace_free(&t);
    ts_cons_close(&c);
    ts_env_free(&e);
}

int main(void)
{
    tg_log_set_level(TG_LOG_ERROR); /* one info line per recorded trigger, each with a 4 KiB name */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_trigger_flood_is_bounded),
        cmocka_unit_test(test_trigger_regex_once_per_frame),
        cmocka_unit_test(test_unsafe_regex_refused),
        cmocka_unit_test(test_clones_per_principal_are_bounded),
        cmocka_unit_test(test_clones_bounded_overall),
        cmocka_unit_test(test_data_sources_per_producer_bounded),
        cmocka_unit_test(test_descriptor_bytes_bounded),
        cmocka_unit_test(test_pending_flushes_bounded),
        cmocka_unit_test(test_periodic_flushes_bounded),
        cmocka_unit_test(test_clone_flushes_bounded),
        cmocka_unit_test(test_unread_commands_bounded),
        cmocka_unit_test(test_unread_replies_bounded),
        cmocka_unit_test(test_state_query_bounded),
        cmocka_unit_test(test_buffer_memory_budget),
        cmocka_unit_test(test_instances_bounded),
        cmocka_unit_test(test_periods_have_floors),
        cmocka_unit_test(test_unread_service_packets_bounded),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
