/* test_producer_e2e.c: the producer library against tracegate's real service
 * (tg_service_new on temp UNIX paths and 127.0.0.1 TCP), with a consumer
 * speaking ConsumerPort through the IPC client: EnableTracing for
 * "track_event", the producer writes through the SMB (UNIX) or shmem
 * emulation (TCP), consumer Flush must succeed (flush ack), DisableTracing
 * must complete promptly (NotifyDataSourceStopped), and ReadBuffers must
 * return exactly the bytes each writer wrote (plus the service's trusted
 * fields) on stable per-writer sequences >= 2, including a packet larger
 * than a chunk. With the service on a thread of its own: a loop-thread
 * writer with "stall then drop" (asked for by the consumer's config, passed
 * through the service) writes far more than its SMB holds in one callback
 * and loses nothing (with "drop" the same flood loses packets). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <event2/event.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "consumer_port.pb-c.h"
#include "data_source_config.pb-c.h"
#include "test_producer_util.h"
#include "tg_test_util.h"
#include "trace_config.pb-c.h"
#include "trace_packet.pb-c.h"
#include "track_event.pb-c.h"
#include "tracegate/ipc_client.h"
#include "tracegate/log.h"
#include "tracegate/producer.h"
#include "tracegate/service.h"

#define TE_INSTANT PERFETTO__PROTOS__TRACK_EVENT__TYPE__TYPE_INSTANT
#define TE_COUNTER PERFETTO__PROTOS__TRACK_EVENT__TYPE__TYPE_COUNTER
#define MAX_WRITTEN 4096
#define MAX_READ 8192

struct written {
    int writer; /* 0 = main writer, 1 = second writer */
    uint8_t *data;
    size_t len;
};

struct e2e {
    struct event_base *base;
    char dir[64];
    char psock[128], csock[128], tcp[64];
    tg_service *svc;
    /* the service on a thread of its own (setup_threaded) */
    struct event_base *svc_base;
    pthread_t svc_thread;
    int svc_stop[2];
    struct event *svc_stop_ev;
    /* producer options */
    enum tg_buffer_exhausted_policy policy;
    bool policy_configurable;
    uint32_t smb_kb;
    int cfg_policy; /* the consumer's DataSourceConfig.buffer_exhausted_policy (0: not set) */
    enum tg_buffer_exhausted_policy effective;
    /* producer */
    tg_producer *p;
    unsigned connected, starts, stops;
    uint64_t instance;
    tg_trace_writer *w[2];
    struct written wr[MAX_WRITTEN];
    size_t n_wr;
    /* consumer */
    tg_ipc_client *cc;
    tg_ipc_service_proxy *cproxy;
    bool cbound;
    bool enable_done, enable_ok;
    bool flush_done, flush_ok;
    bool disable_done;
    bool read_done, read_ok;
    bool free_done;
    uint8_t *cur;
    size_t cur_len;
    uint8_t *pk[MAX_READ];
    size_t pk_len[MAX_READ];
    size_t n_pk;
};

/* ---- producer side ---- */

static void on_connected(tg_producer *p, void *arg)
{
    (void)p;
    ((struct e2e *)arg)->connected++;
}

static void ds_start(tg_producer *p, uint64_t id, const struct tg_data_source_config *cfg, void *arg)
{
    struct e2e *e = arg;
    e->effective = cfg->effective_policy;
    e->starts++;
    e->instance = id;
    e->w[0] = tg_producer_create_writer(p, id);
    e->w[1] = tg_producer_create_writer(p, id);
}

static void ds_stop(tg_producer *p, uint64_t id, void *arg)
{
    struct e2e *e = arg;
    (void)p;
    (void)id;
    e->stops++;
    /* A final packet written from the stop callback must make it too. */
    if (e->w[0] && e->n_wr < MAX_WRITTEN) {
        struct written *x = &e->wr[e->n_wr];
        x->data = make_test_packet(999999, TE_INSTANT, "final", 11, 0, 0, &x->len);
        if (tg_trace_writer_write(e->w[0], x->data, x->len) == TG_TRACE_WRITER_OK) {
            x->writer = 0;
            e->n_wr++;
        } else {
            free(x->data);
        }
    }
}

static int start_producer(struct e2e *e, const char *addr)
{
    struct tg_producer_opts o = {0};
    o.socket = addr;
    o.name = "e2e-producer";
    o.on_connected = on_connected;
    o.cb_arg = e;
    o.smb_size_hint_kb = e->smb_kb;
    char err[256];
    e->p = tg_producer_new(e->base, &o, err, sizeof err);
    if (!e->p) {
        fprintf(stderr, "producer: %s\n", err);
        return -1;
    }
    static const struct tg_track_event_category cats[] = {{"demo", NULL, NULL, 0}};
    struct tg_data_source_desc d = {0};
    d.name = "track_event";
    d.categories = cats;
    d.n_categories = 1;
    d.will_notify_on_start = true;
    d.will_notify_on_stop = true;
    d.handles_incremental_state_clear = true;
    d.cbs.on_start = ds_start;
    d.cbs.on_stop = ds_stop;
    d.cb_arg = e;
    d.buffer_exhausted_policy = e->policy;
    d.buffer_exhausted_policy_configurable = e->policy_configurable;
    d.stall_max_ms = 60000; /* a stall that ends ends because the service freed a chunk */
    return tg_producer_register_data_source(e->p, &d);
}

static void write_one(struct e2e *e, int writer, uint8_t *data, size_t len)
{
    assert_true(e->n_wr < MAX_WRITTEN);
    assert_int_equal(tg_trace_writer_write(e->w[writer], data, len), TG_TRACE_WRITER_OK);
    e->wr[e->n_wr].writer = writer;
    e->wr[e->n_wr].data = data;
    e->wr[e->n_wr].len = len;
    e->n_wr++;
}

/* ---- consumer side ---- */

static void on_cbind(tg_ipc_client *cli, tg_ipc_service_proxy *proxy, void *arg)
{
    struct e2e *e = arg;
    (void)cli;
    e->cproxy = proxy;
    e->cbound = true;
}

static void on_enable(tg_ipc_client *cli, int success, int has_more, const uint8_t *reply, size_t len, void *arg)
{
    struct e2e *e = arg;
    (void)cli;
    (void)has_more;
    (void)reply;
    (void)len;
    e->enable_done = true;
    e->enable_ok = success;
}

static void on_flush(tg_ipc_client *cli, int success, int has_more, const uint8_t *reply, size_t len, void *arg)
{
    struct e2e *e = arg;
    (void)cli;
    (void)has_more;
    (void)reply;
    (void)len;
    e->flush_done = true;
    e->flush_ok = success;
}

static void on_disable(tg_ipc_client *cli, int success, int has_more, const uint8_t *reply, size_t len, void *arg)
{
    (void)cli;
    (void)success;
    (void)has_more;
    (void)reply;
    (void)len;
    ((struct e2e *)arg)->disable_done = true;
}

static void on_free(tg_ipc_client *cli, int success, int has_more, const uint8_t *reply, size_t len, void *arg)
{
    (void)cli;
    (void)success;
    (void)has_more;
    (void)reply;
    (void)len;
    ((struct e2e *)arg)->free_done = true;
}

static void on_read(tg_ipc_client *cli, int success, int has_more, const uint8_t *reply, size_t len, void *arg)
{
    struct e2e *e = arg;
    (void)cli;
    if (!success) {
        e->read_done = true;
        e->read_ok = false;
        return;
    }
    Perfetto__Protos__ReadBuffersResponse *r = perfetto__protos__read_buffers_response__unpack(NULL, len, reply);
    if (r) {
        for (size_t i = 0; i < r->n_slices; i++) {
            const Perfetto__Protos__ReadBuffersResponse__Slice *s = r->slices[i];
            e->cur = realloc(e->cur, e->cur_len + s->data.len + 1);
            memcpy(e->cur + e->cur_len, s->data.data, s->data.len);
            e->cur_len += s->data.len;
            if (s->last_slice_for_packet && e->n_pk < MAX_READ) {
                e->pk[e->n_pk] = e->cur;
                e->pk_len[e->n_pk] = e->cur_len;
                e->n_pk++;
                e->cur = NULL;
                e->cur_len = 0;
            }
        }
        perfetto__protos__read_buffers_response__free_unpacked(r, NULL);
    }
    if (!has_more) {
        e->read_done = true;
        e->read_ok = true;
    }
}

static int f_connected(void *a) { return ((struct e2e *)a)->connected > 0; }
static int f_cbound(void *a) { return ((struct e2e *)a)->cbound; }
static int f_writers(void *a) { return ((struct e2e *)a)->w[0] != NULL; }
static int f_flush(void *a) { return ((struct e2e *)a)->flush_done; }
static int f_enable(void *a) { return ((struct e2e *)a)->enable_done; }
static int f_read(void *a) { return ((struct e2e *)a)->read_done; }
static int f_free(void *a) { return ((struct e2e *)a)->free_done; }

static void consumer_enable(struct e2e *e)
{
    Perfetto__Protos__TraceConfig tc = PERFETTO__PROTOS__TRACE_CONFIG__INIT;
    Perfetto__Protos__TraceConfig__BufferConfig buf = PERFETTO__PROTOS__TRACE_CONFIG__BUFFER_CONFIG__INIT;
    Perfetto__Protos__TraceConfig__BufferConfig *bufs[1] = {&buf};
    buf.has_size_kb = 1;
    buf.size_kb = 8192;
    buf.has_fill_policy = 1;
    buf.fill_policy = PERFETTO__PROTOS__TRACE_CONFIG__BUFFER_CONFIG__FILL_POLICY__DISCARD;
    Perfetto__Protos__DataSourceConfig dsc = PERFETTO__PROTOS__DATA_SOURCE_CONFIG__INIT;
    dsc.name = (char *)"track_event";
    if (e->cfg_policy) {
        dsc.has_buffer_exhausted_policy = 1;
        dsc.buffer_exhausted_policy = (Perfetto__Protos__DataSourceConfig__BufferExhaustedPolicy)e->cfg_policy;
    }
    Perfetto__Protos__TraceConfig__DataSource ds = PERFETTO__PROTOS__TRACE_CONFIG__DATA_SOURCE__INIT;
    Perfetto__Protos__TraceConfig__DataSource *dss[1] = {&ds};
    ds.config = &dsc;
    tc.n_buffers = 1;
    tc.buffers = bufs;
    tc.n_data_sources = 1;
    tc.data_sources = dss;
    /* far beyond the tests' safety nets: a stop (or flush) that completes within them was
     * acknowledged by the producer, not ended by the service's timeout */
    tc.has_data_source_stop_timeout_ms = 1;
    tc.data_source_stop_timeout_ms = 600000;
    tc.has_flush_timeout_ms = 1;
    tc.flush_timeout_ms = 600000;
    Perfetto__Protos__EnableTracingRequest req = PERFETTO__PROTOS__ENABLE_TRACING_REQUEST__INIT;
    req.trace_config = &tc;
    assert_true(tg_ipc_client_invoke(e->cc, e->cproxy, "EnableTracing", &req.base, -1, on_enable, e) != 0);
}

static void on_svc_stop(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    event_base_loopbreak(arg);
}

static void *svc_main(void *arg)
{
    event_base_dispatch(((struct e2e *)arg)->svc_base);
    return NULL;
}

/* The service on e->base, or with threaded on a base and thread of its own (created here, run
 * only by that thread until teardown stops it). */
static int setup_common(void **state, bool threaded)
{
    struct e2e *e = calloc(1, sizeof *e);
    tg_log_set_level(TG_LOG_WARN);
    e->base = event_base_new();
    e->svc_base = threaded ? event_base_new() : e->base;
    snprintf(e->dir, sizeof e->dir, "/tmp/tgpe2eXXXXXX");
    if (!mkdtemp(e->dir))
        return -1;
    snprintf(e->psock, sizeof e->psock, "%s/p.sock", e->dir);
    snprintf(e->csock, sizeof e->csock, "%s/c.sock", e->dir);
    char err[256] = "";
    for (int attempt = 0; attempt < 5 && !e->svc; attempt++) {
        int port = tg_test_free_tcp_port();
        snprintf(e->tcp, sizeof e->tcp, "127.0.0.1:%d", port);
        char plist[256];
        snprintf(plist, sizeof plist, "%s,%s", e->psock, e->tcp);
        struct tg_service_opts so = {0};
        so.producer_socks = plist;
        so.consumer_socks = e->csock;
        e->svc = tg_service_new(e->svc_base, &so, err, sizeof err);
    }
    if (!e->svc) {
        fprintf(stderr, "service: %s\n", err);
        return -1;
    }
    if (threaded) {
        if (pipe(e->svc_stop) != 0)
            return -1;
        e->svc_stop_ev = event_new(e->svc_base, e->svc_stop[0], EV_READ, on_svc_stop, e->svc_base);
        event_add(e->svc_stop_ev, NULL);
        if (pthread_create(&e->svc_thread, NULL, svc_main, e) != 0)
            return -1;
    }
    *state = e;
    return 0;
}

static int setup(void **state) { return setup_common(state, false); }
static int setup_threaded(void **state) { return setup_common(state, true); }

static int teardown(void **state)
{
    struct e2e *e = *state;
    for (int i = 0; i < 2; i++)
        if (e->w[i])
            tg_trace_writer_destroy(e->w[i]);
    tg_producer_free(e->p);
    if (e->cc)
        tg_ipc_client_free(e->cc);
    tg_test_run_until(e->base, NULL, NULL, 30);
    if (e->svc_base != e->base) {
        assert_int_equal(write(e->svc_stop[1], "x", 1), 1);
        pthread_join(e->svc_thread, NULL);
        event_free(e->svc_stop_ev);
        close(e->svc_stop[0]);
        close(e->svc_stop[1]);
    }
    tg_service_free(e->svc);
    tg_test_run_until(e->svc_base, NULL, NULL, 30);
    if (e->svc_base != e->base)
        event_base_free(e->svc_base);
    event_base_free(e->base);
    for (size_t i = 0; i < e->n_wr; i++)
        free(e->wr[i].data);
    for (size_t i = 0; i < e->n_pk; i++)
        free(e->pk[i]);
    free(e->cur);
    unlink(e->psock);
    unlink(e->csock);
    rmdir(e->dir);
    free(e);
    return 0;
}

struct thread_arg {
    tg_trace_writer *w;
    struct written *out;
    int n;
};

static void *writer_thread(void *arg)
{
    struct thread_arg *ta = arg;
    for (int i = 0; i < ta->n; i++) {
        char name[32];
        snprintf(name, sizeof name, "thr%d", i);
        ta->out[i].writer = 1;
        ta->out[i].data = make_test_packet(2000000 + (uint64_t)i, TE_INSTANT, name, 22, 0, i == 7 ? 9000 : 0,
                                           &ta->out[i].len);
        if (tg_trace_writer_write(ta->w, ta->out[i].data, ta->out[i].len) != TG_TRACE_WRITER_OK)
            ta->out[i].len = 0; /* marks a failure */
    }
    return NULL;
}

/* Producer connected over addr, a consumer bound, tracing enabled, both writers created. */
static void open_session(struct e2e *e, const char *addr, bool expect_emulation)
{
    assert_int_equal(start_producer(e, addr), 0);
    assert_true(tg_test_run_until(e->base, f_connected, e, 5000));
    assert_int_equal(tg_producer_emulation(e->p), expect_emulation);

    char err[256];
    e->cc = tg_ipc_client_connect(e->base, e->csock, NULL, NULL, e, err, sizeof err);
    assert_non_null(e->cc);
    assert_int_equal(tg_ipc_client_bind(e->cc, "ConsumerPort", on_cbind, e), 0);
    assert_true(tg_test_run_until(e->base, f_cbound, e, 5000));
    assert_non_null(e->cproxy);

    consumer_enable(e);
    assert_true(tg_test_run_until(e->base, f_writers, e, 5000));
    assert_non_null(e->w[1]);
    assert_int_equal(e->starts, 1);
}

/* Consumer Flush: succeeds only if the producer acked the service's flush (a flush timeout
 * fails it, and is far beyond the wait anyway). */
static void consumer_flush(struct e2e *e)
{
    Perfetto__Protos__FlushRequest fr = PERFETTO__PROTOS__FLUSH_REQUEST__INIT;
    fr.has_timeout_ms = 1;
    fr.timeout_ms = 600000;
    assert_true(tg_ipc_client_invoke(e->cc, e->cproxy, "Flush", &fr.base, -1, on_flush, e) != 0);
    assert_true(tg_test_run_until(e->base, f_flush, e, 10000));
    assert_true(e->flush_ok);
}

/* DisableTracing: the producer commits, then NotifyDataSourceStopped lets the service end the
 * session (the stop timeout is 10 minutes away); then the whole buffer is read. */
static void disable_and_read(struct e2e *e)
{
    assert_true(tg_ipc_client_invoke(e->cc, e->cproxy, "DisableTracing", NULL, -1, on_disable, e) != 0);
    assert_true(tg_test_run_until(e->base, f_enable, e, 10000));
    assert_true(e->enable_ok);
    assert_int_equal(e->stops, 1);
    assert_false(tg_trace_writer_active(e->w[0]));

    assert_true(tg_ipc_client_invoke(e->cc, e->cproxy, "ReadBuffers", NULL, -1, on_read, e) != 0);
    assert_true(tg_test_run_until(e->base, f_read, e, 10000));
    assert_true(e->read_ok);
}

/* Match: every producer packet starts with exactly the bytes written (the service appends trusted
 * fields), in order per writer, and nothing else arrived; each writer that wrote has one stable
 * sequence id >= 2 (seq[k], 0 for a writer that wrote nothing). */
static void match_read(struct e2e *e, uint32_t seq[2])
{
    size_t next[2] = {0, 0};
    seq[0] = seq[1] = 0;
    size_t matched = 0;
    static size_t idx[2][MAX_WRITTEN];
    size_t n_idx[2] = {0, 0};
    for (size_t i = 0; i < e->n_wr; i++)
        idx[e->wr[i].writer][n_idx[e->wr[i].writer]++] = i;
    for (size_t i = 0; i < e->n_pk; i++) {
        Perfetto__Protos__TracePacket *t = perfetto__protos__trace_packet__unpack(NULL, e->pk_len[i], e->pk[i]);
        assert_non_null(t);
        assert_int_equal(t->optional_trusted_packet_sequence_id_case,
                         PERFETTO__PROTOS__TRACE_PACKET__OPTIONAL_TRUSTED_PACKET_SEQUENCE_ID_TRUSTED_PACKET_SEQUENCE_ID);
        uint32_t sid = t->trusted_packet_sequence_id;
        bool is_te = t->data_case == PERFETTO__PROTOS__TRACE_PACKET__DATA_TRACK_EVENT;
        if (sid == 1) {
            assert_false(is_te); /* the service's own packets */
            perfetto__protos__trace_packet__free_unpacked(t, NULL);
            continue;
        }
        assert_true(sid >= 2);
        assert_true(is_te);
        int wi = -1;
        for (int k = 0; k < 2; k++) {
            if (next[k] < n_idx[k]) {
                const struct written *x = &e->wr[idx[k][next[k]]];
                if (e->pk_len[i] >= x->len && memcmp(e->pk[i], x->data, x->len) == 0) {
                    wi = k;
                    break;
                }
            }
        }
        assert_true(wi >= 0);
        if (!seq[wi])
            seq[wi] = sid;
        assert_int_equal(seq[wi], sid);
        const struct written *x = &e->wr[idx[wi][next[wi]]];
        Perfetto__Protos__TracePacket *o = perfetto__protos__trace_packet__unpack(NULL, x->len, x->data);
        assert_int_equal(t->timestamp, o->timestamp);
        assert_string_equal(t->track_event->name, o->track_event->name);
        if (o->track_event->type == TE_COUNTER)
            assert_int_equal(t->track_event->counter_value, o->track_event->counter_value);
        if (o->track_event->n_debug_annotations) {
            assert_int_equal(t->track_event->n_debug_annotations, 1);
            assert_string_equal(t->track_event->debug_annotations[0]->string_value,
                                o->track_event->debug_annotations[0]->string_value);
        }
        perfetto__protos__trace_packet__free_unpacked(o, NULL);
        perfetto__protos__trace_packet__free_unpacked(t, NULL);
        next[wi]++;
        matched++;
    }
    assert_int_equal(next[0], n_idx[0]);
    assert_int_equal(next[1], n_idx[1]);
    assert_int_equal(matched, e->n_wr);
}

/* The whole journey over one producer address. */
static void run_session(struct e2e *e, const char *addr, bool expect_emulation)
{
    open_session(e, addr, expect_emulation);

    /* Writer 0 on the loop thread: descriptor, slices, counters, a packet
     * bigger than a chunk; writer 1 on another thread. */
    {
        size_t len;
        uint8_t *d = make_test_packet(1, TE_INSTANT, "first", 11, 0, 0, &len);
        write_one(e, 0, d, len);
    }
    for (int i = 0; i < 300; i++) {
        char name[32];
        snprintf(name, sizeof name, "ev%d", i);
        size_t len;
        uint8_t *d = make_test_packet(1000 + (uint64_t)i * 10, TE_INSTANT, name, 11, 0, 0, &len);
        write_one(e, 0, d, len);
        d = make_test_packet(1000 + (uint64_t)i * 10 + 5, TE_COUNTER, "fps", 12, 60 + i % 3, 0, &len);
        write_one(e, 0, d, len);
        if (i == 150) {
            d = make_test_packet(5000000, TE_INSTANT, "big", 11, 0, 10 * 1024, &len);
            write_one(e, 0, d, len);
        }
    }
    struct thread_arg ta = {e->w[1], &e->wr[e->n_wr], 40};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, writer_thread, &ta), 0);
    pthread_join(th, NULL);
    for (int i = 0; i < ta.n; i++)
        assert_true(e->wr[e->n_wr + (size_t)i].len > 0);
    e->n_wr += (size_t)ta.n;

    consumer_flush(e);

    /* Written after the flush: committed at stop. */
    {
        size_t len;
        uint8_t *d = make_test_packet(3000000, TE_INSTANT, "after-flush", 11, 0, 0, &len);
        write_one(e, 0, d, len);
    }

    disable_and_read(e);
    uint32_t seq[2];
    match_read(e, seq);
    assert_true(seq[0] >= 2 && seq[1] >= 2);
    assert_int_not_equal(seq[0], seq[1]);

    assert_true(tg_ipc_client_invoke(e->cc, e->cproxy, "FreeBuffers", NULL, -1, on_free, e) != 0);
    assert_true(tg_test_run_until(e->base, f_free, e, 5000));
}

static void test_e2e_unix_smb(void **state)
{
    struct e2e *e = *state;
    run_session(e, e->psock, false);
}

static void test_e2e_tcp_emulation(void **state)
{
    struct e2e *e = *state;
    run_session(e, e->tcp, true);
}

/* From the producer's loop thread, in one callback (the loop does not run meanwhile), 2,000
 * packets of about 1 KiB into a 16 KiB SMB: about 128 times what it holds. Returns how many
 * writes were dropped; every accepted packet must be read back, in order. */
static size_t flood_from_loop_thread(struct e2e *e, struct tg_trace_writer_stats *st)
{
    e->smb_kb = 16;
    open_session(e, e->psock, false);
    size_t dropped = 0;
    for (int i = 0; i < 2000; i++) {
        size_t len;
        uint8_t *d = make_test_packet(10 + (uint64_t)i, TE_INSTANT, "flood", 11, 0, 900, &len);
        int rc = tg_trace_writer_write(e->w[0], d, len);
        if (rc == TG_TRACE_WRITER_OK) {
            e->wr[e->n_wr].writer = 0;
            e->wr[e->n_wr].data = d;
            e->wr[e->n_wr].len = len;
            e->n_wr++;
        } else {
            assert_int_equal(rc, TG_TRACE_WRITER_DROPPED);
            free(d);
            dropped++;
        }
    }
    tg_trace_writer_get_stats(e->w[0], st);
    consumer_flush(e);
    disable_and_read(e);
    uint32_t seq[2];
    match_read(e, seq);
    assert_true(seq[0] >= 2);
    return dropped;
}

static void test_e2e_loop_thread_stall(void **state)
{
    struct e2e *e = *state;
    struct tg_trace_writer_stats st;
    /* the consumer's config asks for it, through the real service, and the data source lets it */
    e->policy = TG_BUFFER_EXHAUSTED_DROP;
    e->policy_configurable = true;
    e->cfg_policy = PERFETTO__PROTOS__DATA_SOURCE_CONFIG__BUFFER_EXHAUSTED_POLICY__BUFFER_EXHAUSTED_STALL_THEN_DROP;
    assert_int_equal(flood_from_loop_thread(e, &st), 0);
    assert_int_equal(e->effective, TG_BUFFER_EXHAUSTED_STALL_THEN_DROP);
    assert_int_equal(st.packets_dropped, 0);
    assert_true(st.stalls > 0); /* the SMB was full, many times */
    assert_int_equal(st.stalls_given_up, 0);
    assert_int_equal(e->n_wr, 2000 + 1); /* and the stop callback's final packet */
}

/* The control: the same flood with "drop" loses what the SMB cannot hold until the loop runs. */
static void test_e2e_loop_thread_drop(void **state)
{
    struct e2e *e = *state;
    struct tg_trace_writer_stats st;
    e->policy = TG_BUFFER_EXHAUSTED_DROP;
    size_t dropped = flood_from_loop_thread(e, &st);
    assert_int_equal(e->effective, TG_BUFFER_EXHAUSTED_DROP);
    assert_true(dropped > 1000);
    assert_int_equal(st.packets_dropped, dropped);
    assert_int_equal(st.stalls, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_e2e_unix_smb, setup, teardown),
        cmocka_unit_test_setup_teardown(test_e2e_tcp_emulation, setup, teardown),
        cmocka_unit_test_setup_teardown(test_e2e_loop_thread_stall, setup_threaded, teardown),
        cmocka_unit_test_setup_teardown(test_e2e_loop_thread_drop, setup_threaded, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
