/* test_producer_fake_service.c: the producer library (tracegate/producer.h)
 * against a fake ProducerPort service that checks the raw protocol: the SDK's
 * handshake (pipelined InitializeConnection + GetAsyncCommand), drop_reply
 * flags, RegisterTraceWriter before chunks, CommitData batching in SMB mode,
 * inline chunks and request splitting in emulation mode, flush acks, stop
 * ordering (commit, then NotifyDataSourceStopped), fragmented packets, data
 * loss marking, writers on other threads, reconnects. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <event2/event.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "data_source_config.pb-c.h"
#include "data_source_descriptor.pb-c.h"
#include "producer_port.pb-c.h"
#include "test_producer_util.h"
#include "tg_test_util.h"
#include "trace_packet.pb-c.h"
#include "track_event.pb-c.h"
#include "tracegate/log.h"
#include "tracegate/producer.h"

#define TE_INSTANT PERFETTO__PROTOS__TRACK_EVENT__TYPE__TYPE_INSTANT
#define TE_COUNTER PERFETTO__PROTOS__TRACK_EVENT__TYPE__TYPE_COUNTER

struct ctx {
    struct event_base *base;
    char dir[64];
    char path[128];
    struct fake_svc *fs;
    tg_producer *p;
    unsigned connected, disconnected;
    unsigned setups, starts, stops, flushes, clears;
    uint64_t last_instance;
    uint32_t last_target_buffer;
    uint64_t last_flush_flags;
    char last_cfg_name[64];
    bool create_writer_on_start;
    bool stop_later; /* on_stop defers the stop (tg_producer_stop_later) */
    tg_trace_writer *writer;
};

static void on_connected(tg_producer *p, void *arg)
{
    (void)p;
    ((struct ctx *)arg)->connected++;
}
static void on_disconnected(tg_producer *p, const char *reason, void *arg)
{
    (void)p;
    (void)reason;
    ((struct ctx *)arg)->disconnected++;
}
static void ds_setup(tg_producer *p, uint64_t id, const struct tg_data_source_config *cfg, void *arg)
{
    struct ctx *c = arg;
    (void)p;
    c->setups++;
    c->last_instance = id;
    snprintf(c->last_cfg_name, sizeof c->last_cfg_name, "%s", cfg->name ? cfg->name : "");
}
static void ds_start(tg_producer *p, uint64_t id, const struct tg_data_source_config *cfg, void *arg)
{
    struct ctx *c = arg;
    c->starts++;
    c->last_instance = id;
    c->last_target_buffer = cfg->target_buffer;
    if (c->create_writer_on_start)
        c->writer = tg_producer_create_writer(p, id);
}
static void ds_stop(tg_producer *p, uint64_t id, void *arg)
{
    ((struct ctx *)arg)->stops++;
    if (((struct ctx *)arg)->stop_later)
        tg_producer_stop_later(p, id);
}
static void ds_flush(tg_producer *p, uint64_t id, uint64_t flags, void *arg)
{
    (void)p;
    (void)id;
    ((struct ctx *)arg)->flushes++;
    ((struct ctx *)arg)->last_flush_flags = flags;
}
static void ds_clear(tg_producer *p, uint64_t id, void *arg)
{
    (void)p;
    (void)id;
    ((struct ctx *)arg)->clears++;
}

static const char *const k_tags[] = {"debug"};
static const struct tg_track_event_category k_cats[] = {
    {"demo", "Demo events", NULL, 0},
    {"rendering", "Rendering", k_tags, 1},
};

static int start_producer(struct ctx *c, const char *addr, bool reconnect)
{
    struct tg_producer_opts o = {0};
    o.socket = addr;
    o.name = "test-producer";
    o.smb_size_hint_kb = 512;
    o.smb_page_size_hint_kb = 8;
    o.reconnect = reconnect;
    o.reconnect_min_ms = 20;
    o.reconnect_max_ms = 100;
    o.on_connected = on_connected;
    o.on_disconnected = on_disconnected;
    o.cb_arg = c;
    char err[256];
    c->p = tg_producer_new(c->base, &o, err, sizeof err);
    if (!c->p)
        return -1;
    struct tg_data_source_desc d = {0};
    d.name = "track_event";
    d.categories = k_cats;
    d.n_categories = 2;
    d.will_notify_on_start = true;
    d.will_notify_on_stop = true;
    d.handles_incremental_state_clear = true;
    d.cbs.on_setup = ds_setup;
    d.cbs.on_start = ds_start;
    d.cbs.on_stop = ds_stop;
    d.cbs.on_flush = ds_flush;
    d.cbs.on_clear_incremental_state = ds_clear;
    d.cb_arg = c;
    return tg_producer_register_data_source(c->p, &d);
}

static int setup(void **state)
{
    struct ctx *c = calloc(1, sizeof *c);
    tg_log_set_level(TG_LOG_WARN);
    c->base = event_base_new();
    snprintf(c->dir, sizeof c->dir, "/tmp/tgprodXXXXXX");
    if (!mkdtemp(c->dir))
        return -1;
    snprintf(c->path, sizeof c->path, "%s/producer.sock", c->dir);
    *state = c;
    return 0;
}

static int teardown(void **state)
{
    struct ctx *c = *state;
    if (c->writer)
        tg_trace_writer_destroy(c->writer);
    tg_producer_free(c->p);
    fake_svc_free(c->fs);
    tg_test_run_until(c->base, NULL, NULL, 20); /* let closed connections finish */
    event_base_free(c->base);
    rmdir(c->dir);
    free(c);
    return 0;
}

/* ---- conditions ---- */
static struct ctx *g_c;
static const char *g_method;
static size_t g_count;
static int have_method(void *arg)
{
    (void)arg;
    return g_c->fs && fake_count(g_c->fs, g_method) >= g_count;
}
static int wait_method(struct ctx *c, const char *m, size_t n)
{
    g_c = c;
    g_method = m;
    g_count = n;
    return tg_test_run_until(c->base, have_method, NULL, 5000);
}
static int is_connected(void *arg) { return ((struct ctx *)arg)->connected > 0; }
static int has_writer(void *arg) { return ((struct ctx *)arg)->writer != NULL; }
static size_t g_npk;
static int have_packets(void *arg) { return ((struct ctx *)arg)->fs->n_packets >= g_npk; }
static int wait_packets(struct ctx *c, size_t n)
{
    g_npk = n;
    return tg_test_run_until(c->base, have_packets, c, 5000);
}
static unsigned g_commits;
static int have_commits(void *arg) { return ((struct ctx *)arg)->fs->commits >= g_commits; }
static int have_stops(void *arg) { return ((struct ctx *)arg)->stops > 0; }
static int has_cleared(void *arg) { return ((struct ctx *)arg)->clears > 0; }
static unsigned g_acks;
static int have_acks(void *arg) { return ((struct ctx *)arg)->fs->flush_acks >= g_acks; }
static int flush_and_wait(struct ctx *c, uint64_t inst, uint64_t rid)
{
    g_acks = c->fs->flush_acks + 1;
    if (fake_flush(c->fs, &inst, 1, rid) != 0)
        return 0;
    return tg_test_run_until(c->base, have_acks, c, 5000) && c->fs->last_flush_ack == rid;
}

/* Connect, SetupTracing, start instance 1 with a writer. */
static void bring_up(struct ctx *c, const char *addr, bool emulation, size_t smb_size)
{
    c->fs = fake_svc_new(c->base, addr);
    assert_non_null(c->fs);
    c->fs->emulation = emulation;
    assert_int_equal(start_producer(c, addr, false), 0);
    assert_true(tg_test_run_until(c->base, is_connected, c, 5000));
    assert_int_equal(tg_producer_emulation(c->p), emulation);
    assert_int_equal(fake_setup_tracing(c->fs, 4, smb_size), 0);
    c->create_writer_on_start = true;
    assert_int_equal(fake_start_ds(c->fs, 1, "track_event", 3), 0);
    assert_true(tg_test_run_until(c->base, has_writer, c, 5000));
    assert_true(wait_method(c, "NotifyDataSourceStarted", 1));
}

static Perfetto__Protos__TracePacket *decode(const struct fake_packet *pk)
{
    return perfetto__protos__trace_packet__unpack(NULL, pk->len, pk->data);
}

/* ---- tests ---- */

static void test_handshake_like_sdk(void **state)
{
    struct ctx *c = *state;
    c->fs = fake_svc_new(c->base, c->path);
    assert_non_null(c->fs);
    c->fs->hold_init_reply = true;
    assert_int_equal(start_producer(c, c->path, false), 0);
    assert_true(wait_method(c, "GetAsyncCommand", 1));

    /* InitializeConnection first, GetAsyncCommand pipelined before its reply. */
    assert_string_equal(c->fs->recs[0].method, "InitializeConnection");
    assert_int_equal(c->fs->recs[0].drop_reply, 0);
    assert_string_equal(c->fs->recs[1].method, "GetAsyncCommand");
    assert_int_equal(c->fs->recs[1].drop_reply, 0);
    assert_true(c->fs->async_before_init_reply);
    Perfetto__Protos__InitializeConnectionRequest *ic =
        perfetto__protos__initialize_connection_request__unpack(NULL, c->fs->recs[0].len, c->fs->recs[0].args);
    assert_non_null(ic);
    assert_string_equal(ic->producer_name, "test-producer");
    assert_int_equal(ic->smb_scraping_mode,
                     PERFETTO__PROTOS__INITIALIZE_CONNECTION_REQUEST__PRODUCER_SMBSCRAPING_MODE__SMB_SCRAPING_ENABLED);
    assert_int_equal(ic->shared_memory_page_size_hint_bytes, 8192);
    assert_int_equal(ic->shared_memory_size_hint_bytes, 512 * 1024);
    assert_false(ic->has_producer_provided_shmem && ic->producer_provided_shmem);
    assert_non_null(ic->sdk_version);
    assert_memory_equal(ic->sdk_version, "tracegate ", 10);
    perfetto__protos__initialize_connection_request__free_unpacked(ic, NULL);

    /* Nothing else until the reply (the SDK registers after it). */
    tg_test_run_until(c->base, NULL, NULL, 50);
    assert_int_equal(c->fs->n_recs, 2);
    assert_int_equal(c->connected, 0);
    assert_int_equal(fake_reply_init(c->fs), 0);
    assert_true(tg_test_run_until(c->base, is_connected, c, 5000));
    assert_true(tg_producer_connected(c->p));

    int i = fake_find(c->fs, "RegisterDataSource", 0);
    assert_int_equal(i, 2);
    assert_int_equal(c->fs->recs[i].drop_reply, 0);
    Perfetto__Protos__RegisterDataSourceRequest *rd =
        perfetto__protos__register_data_source_request__unpack(NULL, c->fs->recs[i].len, c->fs->recs[i].args);
    assert_non_null(rd);
    const Perfetto__Protos__DataSourceDescriptor *d = rd->data_source_descriptor;
    assert_non_null(d);
    assert_string_equal(d->name, "track_event");
    assert_true(d->will_notify_on_start);
    assert_true(d->will_notify_on_stop);
    assert_true(d->handles_incremental_state_clear);
    assert_true(d->has_id && d->id != 0);
    assert_false(d->no_flush);
    assert_non_null(d->track_event_descriptor);
    assert_int_equal(d->track_event_descriptor->n_available_categories, 2);
    assert_string_equal(d->track_event_descriptor->available_categories[0]->name, "demo");
    assert_string_equal(d->track_event_descriptor->available_categories[0]->description, "Demo events");
    assert_string_equal(d->track_event_descriptor->available_categories[1]->name, "rendering");
    assert_int_equal(d->track_event_descriptor->available_categories[1]->n_tags, 1);
    assert_string_equal(d->track_event_descriptor->available_categories[1]->tags[0], "debug");
    perfetto__protos__register_data_source_request__free_unpacked(rd, NULL);
}

static void test_smb_session(void **state)
{
    struct ctx *c = *state;
    bring_up(c, c->path, false, 256 * 1024);
    assert_int_equal(c->setups, 1);
    assert_int_equal(c->starts, 1);
    assert_string_equal(c->last_cfg_name, "track_event");
    assert_int_equal(c->last_target_buffer, 3);
    assert_int_equal(tg_trace_writer_id(c->writer), 1);
    assert_int_equal(tg_trace_writer_target_buffer(c->writer), 3);
    assert_true(tg_trace_writer_take_incremental_reset(c->writer));
    assert_false(tg_trace_writer_take_incremental_reset(c->writer));

    int ns = fake_find(c->fs, "NotifyDataSourceStarted", 0);
    assert_int_equal(c->fs->recs[ns].drop_reply, 1);
    Perfetto__Protos__NotifyDataSourceStartedRequest *nr =
        perfetto__protos__notify_data_source_started_request__unpack(NULL, c->fs->recs[ns].len, c->fs->recs[ns].args);
    assert_int_equal(nr->data_source_id, 1);
    perfetto__protos__notify_data_source_started_request__free_unpacked(nr, NULL);

    /* 100 small packets fit one chunk: nothing is committed until a flush. */
    size_t written = 0;
    uint8_t *pk[2200];
    size_t pl[2200];
    for (int i = 0; i < 100; i++, written++) {
        char name[32];
        snprintf(name, sizeof name, "ev%d", i);
        pk[written] = make_test_packet(1000 + (uint64_t)i, TE_INSTANT, name, 77, 0, 0, &pl[written]);
        assert_int_equal(tg_trace_writer_write(c->writer, pk[written], pl[written]), TG_TRACE_WRITER_OK);
    }
    assert_true(wait_method(c, "RegisterTraceWriter", 1));
    int rw = fake_find(c->fs, "RegisterTraceWriter", 0);
    assert_int_equal(c->fs->recs[rw].drop_reply, 1);
    Perfetto__Protos__RegisterTraceWriterRequest *rr =
        perfetto__protos__register_trace_writer_request__unpack(NULL, c->fs->recs[rw].len, c->fs->recs[rw].args);
    assert_int_equal(rr->trace_writer_id, 1);
    assert_int_equal(rr->target_buffer, 3);
    perfetto__protos__register_trace_writer_request__free_unpacked(rr, NULL);
    assert_int_equal(fake_count(c->fs, "CommitData"), 0);

    assert_true(flush_and_wait(c, 1, 42));
    assert_int_equal(c->flushes, 1);
    assert_int_equal(c->last_flush_flags, 0x14);
    assert_int_equal(c->fs->n_packets, 100);
    int cd = fake_find(c->fs, "CommitData", 0);
    assert_true(cd > rw);
    assert_int_equal(c->fs->recs[cd].drop_reply, 1);

    /* 2000 more packets written in one loop callback: committed in one batch
     * (SMB mode batches per loop iteration), the rest on the next flush. */
    unsigned commits_before = c->fs->commits;
    for (int i = 0; i < 2000; i++, written++) {
        pk[written] = make_test_packet(5000 + (uint64_t)i, TE_COUNTER, "fps", 78, i * 3, 0, &pl[written]);
        assert_int_equal(tg_trace_writer_write(c->writer, pk[written], pl[written]), TG_TRACE_WRITER_OK);
    }
    g_commits = commits_before + 1;
    assert_true(tg_test_run_until(c->base, have_commits, c, 5000));
    assert_int_equal(c->fs->commits, commits_before + 1); /* one batch, not one per chunk */
    assert_true(c->fs->n_packets > 100);
    assert_true(flush_and_wait(c, 1, 43));
    assert_int_equal(c->fs->n_packets, 2100);
    assert_int_equal(c->fs->commits_with_data, 0);
    assert_int_equal(c->fs->chunk_id_gaps, 0);
    assert_int_equal(c->fs->abi_errors, 0);

    /* Packets not yet committed are committed by the stop, then notified. */
    for (int i = 0; i < 5; i++, written++) {
        pk[written] = make_test_packet(9000 + (uint64_t)i, TE_INSTANT, "last", 77, 0, 0, &pl[written]);
        assert_int_equal(tg_trace_writer_write(c->writer, pk[written], pl[written]), TG_TRACE_WRITER_OK);
    }
    size_t recs_before_stop = c->fs->n_recs;
    assert_int_equal(fake_stop_ds(c->fs, 1), 0);
    assert_true(wait_method(c, "NotifyDataSourceStopped", 1));
    assert_int_equal(c->stops, 1);
    int stop_commit = fake_find(c->fs, "CommitData", recs_before_stop);
    int notified = fake_find(c->fs, "NotifyDataSourceStopped", recs_before_stop);
    assert_true(stop_commit >= 0 && stop_commit < notified);
    assert_int_equal(c->fs->recs[notified].drop_reply, 1);
    assert_int_equal(c->fs->n_packets, written);
    for (size_t i = 0; i < written; i++) {
        assert_int_equal(c->fs->packets[i].len, pl[i]);
        assert_memory_equal(c->fs->packets[i].data, pk[i], pl[i]);
        assert_int_equal(c->fs->packets[i].writer_id, 1);
        free(pk[i]);
    }
    /* Every chunk went back to Free: no page left partitioned. */
    for (size_t pg = 0; pg < c->fs->smb.num_pages; pg++)
        assert_int_equal(tg_smb_page_header(&c->fs->smb, pg), 0);

    /* The writer is retired; destroying it unregisters it. */
    uint8_t b[4] = {0x40, 0x01, 0, 0};
    assert_int_equal(tg_trace_writer_write(c->writer, b, 2), TG_TRACE_WRITER_INACTIVE);
    assert_false(tg_trace_writer_active(c->writer));
    tg_trace_writer_destroy(c->writer);
    c->writer = NULL;
    assert_true(wait_method(c, "UnregisterTraceWriter", 1));
    int uw = fake_find(c->fs, "UnregisterTraceWriter", 0);
    assert_int_equal(c->fs->recs[uw].drop_reply, 1);
    assert_null(tg_producer_create_writer(c->p, 1)); /* instance gone */
}

/* A data source that stops late (tg_producer_stop_later from on_stop): its writer stays usable,
 * nothing is acknowledged until tg_producer_stop_done, and what it wrote meanwhile is committed
 * before NotifyDataSourceStopped. */
static void test_stop_later(void **state)
{
    struct ctx *c = *state;
    bring_up(c, c->path, false, 256 * 1024);
    c->stop_later = true;
    size_t l1, l2;
    uint8_t *a = make_test_packet(100, TE_INSTANT, "before", 77, 0, 0, &l1);
    assert_int_equal(tg_trace_writer_write(c->writer, a, l1), TG_TRACE_WRITER_OK);
    size_t recs_before_stop = c->fs->n_recs;
    assert_int_equal(fake_stop_ds(c->fs, 1), 0);
    g_c = c;
    assert_true(tg_test_run_until(c->base, have_stops, c, 5000));
    /* the stop was asked for; a round trip later still no acknowledgement, and the writer writes */
    assert_true(flush_and_wait(c, 1, 7));
    assert_int_equal(fake_find(c->fs, "NotifyDataSourceStopped", recs_before_stop), -1);
    uint8_t *b = make_test_packet(101, TE_INSTANT, "after the stop request", 77, 0, 0, &l2);
    assert_int_equal(tg_trace_writer_write(c->writer, b, l2), TG_TRACE_WRITER_OK);
    size_t recs_before_done = c->fs->n_recs;
    tg_producer_stop_done(c->p, 1);
    assert_true(wait_method(c, "NotifyDataSourceStopped", 1));
    int commit = fake_find(c->fs, "CommitData", recs_before_done);
    int notified = fake_find(c->fs, "NotifyDataSourceStopped", recs_before_done);
    assert_true(commit >= 0 && commit < notified);
    assert_int_equal(c->fs->n_packets, 2);
    assert_memory_equal(c->fs->packets[1].data, b, l2);
    assert_int_equal(tg_trace_writer_write(c->writer, a, l1), TG_TRACE_WRITER_INACTIVE);
    tg_producer_stop_done(c->p, 1); /* again: the instance is gone, nothing happens */
    assert_int_equal(c->stops, 1);
    free(a);
    free(b);
}

static void test_large_packets(void **state)
{
    struct ctx *c = *state;
    bring_up(c, c->path, false, 256 * 1024);
    size_t sizes[] = {0, 10 * 1024, 0, 100 * 1024, 3000, 4080};
    uint8_t *pk[6];
    size_t pl[6];
    for (int i = 0; i < 6; i++) {
        pk[i] = make_test_packet((uint64_t)i + 1, TE_INSTANT, "big", 5, 0, sizes[i], &pl[i]);
        assert_int_equal(tg_trace_writer_write(c->writer, pk[i], pl[i]), TG_TRACE_WRITER_OK);
    }
    assert_true(flush_and_wait(c, 1, 7));
    assert_int_equal(c->fs->n_packets, 6);
    for (int i = 0; i < 6; i++) {
        assert_int_equal(c->fs->packets[i].len, pl[i]);
        assert_memory_equal(c->fs->packets[i].data, pk[i], pl[i]);
        free(pk[i]);
    }
    Perfetto__Protos__TracePacket *t = decode(&c->fs->packets[1]);
    assert_non_null(t);
    assert_int_equal(t->track_event->n_debug_annotations, 1);
    assert_int_equal(strlen(t->track_event->debug_annotations[0]->string_value), 10 * 1024);
    perfetto__protos__trace_packet__free_unpacked(t, NULL);
    assert_int_equal(c->fs->chunk_id_gaps, 0);
    assert_int_equal(c->fs->abi_errors, 0);
}

static void test_flush_ack_without_data(void **state)
{
    struct ctx *c = *state;
    bring_up(c, c->path, false, 64 * 1024);
    assert_true(flush_and_wait(c, 1, 9));
    int cd = fake_find(c->fs, "CommitData", 0);
    Perfetto__Protos__CommitDataRequest *r =
        perfetto__protos__commit_data_request__unpack(NULL, c->fs->recs[cd].len, c->fs->recs[cd].args);
    assert_int_equal(r->n_chunks_to_move, 0);
    assert_int_equal(r->flush_request_id, 9);
    perfetto__protos__commit_data_request__free_unpacked(r, NULL);
    /* Flush for an unknown instance is still acked. */
    assert_true(flush_and_wait(c, 99, 10));
}

struct thread_arg {
    tg_trace_writer *w;
    int n;
    size_t payload;
    int rc_fail;
};

static void *writer_thread(void *arg)
{
    struct thread_arg *ta = arg;
    for (int i = 0; i < ta->n; i++) {
        size_t len;
        uint8_t *b = make_test_packet((uint64_t)i, TE_COUNTER, "thr", 9, i, ta->payload, &len);
        if (tg_trace_writer_write(ta->w, b, len) != TG_TRACE_WRITER_OK)
            ta->rc_fail++;
        free(b);
        if (i % 500 == 0)
            usleep(1000);
    }
    tg_trace_writer_flush(ta->w);
    return NULL;
}

static void tick_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    (void)arg;
}

static int g_thread_done;
static int thread_done(void *arg)
{
    (void)arg;
    return __atomic_load_n(&g_thread_done, __ATOMIC_SEQ_CST);
}
static void *writer_thread_wrap(void *arg)
{
    writer_thread(arg);
    __atomic_store_n(&g_thread_done, 1, __ATOMIC_SEQ_CST);
    return NULL;
}

static void check_counter_sequence(struct ctx *c, int n)
{
    assert_int_equal(c->fs->n_packets, (size_t)n);
    for (int i = 0; i < n; i++) {
        Perfetto__Protos__TracePacket *t = decode(&c->fs->packets[i]);
        assert_non_null(t);
        assert_int_equal(t->timestamp, (uint64_t)i);
        assert_int_equal(t->track_event->counter_value, i);
        perfetto__protos__trace_packet__free_unpacked(t, NULL);
    }
}

static void test_writer_on_other_thread(void **state)
{
    struct ctx *c = *state;
    bring_up(c, c->path, false, 2 * 1024 * 1024);
    struct thread_arg ta = {c->writer, 20000, 0, 0};
    pthread_t th;
    __atomic_store_n(&g_thread_done, 0, __ATOMIC_SEQ_CST);
    assert_int_equal(pthread_create(&th, NULL, writer_thread_wrap, &ta), 0);
    /* The loop keeps serving commits while the thread writes (a ticker makes
     * sure the loop re-checks the flag). */
    struct event *tick = event_new(c->base, -1, EV_PERSIST, tick_cb, NULL);
    struct timeval tv = {0, 5000};
    event_add(tick, &tv);
    assert_true(tg_test_run_until(c->base, thread_done, NULL, 20000));
    event_free(tick);
    pthread_join(th, NULL);
    assert_int_equal(ta.rc_fail, 0);
    assert_true(wait_packets(c, 20000));
    check_counter_sequence(c, 20000);
    assert_int_equal(c->fs->chunk_id_gaps, 0);
    assert_true(c->fs->commits > 1);
}

static void test_emulation_tcp(void **state)
{
    struct ctx *c = *state;
    int port = tg_test_free_tcp_port();
    assert_true(port > 0);
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", port);
    bring_up(c, addr, true, 0);

    /* On the loop thread every finished chunk is committed at once, inline. */
    int n = 3000;
    for (int i = 0; i < n; i++) {
        size_t len;
        uint8_t *b = make_test_packet((uint64_t)i, TE_COUNTER, "emu", 9, i, 0, &len);
        assert_int_equal(tg_trace_writer_write(c->writer, b, len), TG_TRACE_WRITER_OK);
        free(b);
    }
    g_commits = 11; /* the chunks the loop finished are committed without a flush */
    assert_true(tg_test_run_until(c->base, have_commits, c, 5000));
    assert_int_equal(c->fs->commits, c->fs->commits_with_data); /* one chunk per CommitData */
    assert_true(flush_and_wait(c, 1, 5));
    check_counter_sequence(c, n);

    /* A 200 KiB packet (bigger than an IPC frame) goes over in chunks. */
    size_t len;
    uint8_t *big = make_test_packet(1, TE_INSTANT, "huge", 9, 0, 200 * 1024, &len);
    assert_int_equal(tg_trace_writer_write(c->writer, big, len), TG_TRACE_WRITER_OK);
    assert_true(flush_and_wait(c, 1, 6));
    assert_int_equal(c->fs->n_packets, (size_t)n + 1);
    assert_int_equal(c->fs->packets[n].len, len);
    assert_memory_equal(c->fs->packets[n].data, big, len);
    free(big);
    assert_int_equal(c->fs->chunk_id_gaps, 0);
    assert_int_equal(c->fs->abi_errors, 0);
    assert_true(c->fs->max_commit_args <= 128 * 1024 - 512);
}

static void test_emulation_split_from_thread(void **state)
{
    struct ctx *c = *state;
    int port = tg_test_free_tcp_port();
    assert_true(port > 0);
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", port);
    bring_up(c, addr, true, 0);
    /* A thread queues ~2 MiB of chunks; the loop sends them in requests that
     * stay under the frame limit. The loop is blocked meanwhile, so the
     * batches are big. */
    struct thread_arg ta = {c->writer, 2000, 1000, 0};
    pthread_t th;
    __atomic_store_n(&g_thread_done, 0, __ATOMIC_SEQ_CST);
    assert_int_equal(pthread_create(&th, NULL, writer_thread_wrap, &ta), 0);
    pthread_join(th, NULL);
    assert_int_equal(ta.rc_fail, 0);
    assert_true(wait_packets(c, 2000));
    check_counter_sequence(c, 2000);
    assert_true(c->fs->max_commit_args > 64 * 1024); /* batches did form */
    assert_true(c->fs->max_commit_args <= 128 * 1024 - 512);
    assert_true(c->fs->commits >= 16);
}

static void test_data_loss_marked(void **state)
{
    struct ctx *c = *state;
    bring_up(c, c->path, false, 8 * 1024); /* two 4 KiB pages = two chunks */
    c->fs->hold_chunks = true;
    int ok = 0, dropped = 0;
    for (int i = 0; i < 12; i++) {
        size_t len;
        uint8_t *b = make_test_packet((uint64_t)i, TE_COUNTER, "x", 1, i, 950, &len);
        int rc = tg_trace_writer_write(c->writer, b, len);
        free(b);
        if (rc == TG_TRACE_WRITER_OK)
            ok++;
        else if (rc == TG_TRACE_WRITER_DROPPED)
            dropped++;
    }
    assert_int_equal(ok, 8);
    assert_int_equal(dropped, 4);
    /* Packet 5 spans both chunks; packet 9 found no third chunk, so its first
     * fragment was marked dropped and packets 10..12 found no chunk at all. */
    assert_true(wait_packets(c, 8)); /* commits read, chunks held */
    assert_int_equal(c->fs->n_packets, 8);
    fake_release_held(c->fs);
    c->fs->hold_chunks = false;
    size_t len;
    uint8_t *b = make_test_packet(100, TE_COUNTER, "x", 1, 100, 0, &len);
    assert_int_equal(tg_trace_writer_write(c->writer, b, len), TG_TRACE_WRITER_OK);
    free(b);
    assert_true(flush_and_wait(c, 1, 3));
    assert_int_equal(c->fs->n_packets, 9);
    Perfetto__Protos__TracePacket *t = decode(&c->fs->packets[8]);
    assert_non_null(t);
    assert_int_equal(t->timestamp, 100);
    assert_true(t->has_previous_packet_dropped);
    assert_int_equal(t->previous_packet_dropped, 0x101);
    perfetto__protos__trace_packet__free_unpacked(t, NULL);
    t = decode(&c->fs->packets[7]);
    assert_false(t->has_previous_packet_dropped);
    perfetto__protos__trace_packet__free_unpacked(t, NULL);
    struct tg_trace_writer_stats st;
    tg_trace_writer_get_stats(c->writer, &st);
    assert_int_equal(st.packets_dropped, 4);
}

static void test_clear_incremental_state(void **state)
{
    struct ctx *c = *state;
    bring_up(c, c->path, false, 64 * 1024);
    assert_true(tg_trace_writer_take_incremental_reset(c->writer));
    assert_false(tg_trace_writer_take_incremental_reset(c->writer));
    assert_int_equal(fake_clear_incremental(c->fs, 1), 0);
    assert_true(tg_test_run_until(c->base, has_cleared, c, 5000));
    assert_int_equal(c->clears, 1);
    assert_true(tg_trace_writer_take_incremental_reset(c->writer));
    assert_false(tg_trace_writer_take_incremental_reset(c->writer));
}

static int is_disconnected(void *arg) { return ((struct ctx *)arg)->disconnected > 0; }
static int connected_twice(void *arg) { return ((struct ctx *)arg)->connected >= 2; }

static void test_reconnect(void **state)
{
    struct ctx *c = *state;
    c->fs = fake_svc_new(c->base, c->path);
    assert_non_null(c->fs);
    assert_int_equal(start_producer(c, c->path, true), 0);
    assert_true(tg_test_run_until(c->base, is_connected, c, 5000));
    assert_int_equal(fake_setup_tracing(c->fs, 4, 64 * 1024), 0);
    c->create_writer_on_start = true;
    assert_int_equal(fake_start_ds(c->fs, 1, "track_event", 3), 0);
    assert_true(tg_test_run_until(c->base, has_writer, c, 5000));

    /* The service goes away: the instance stops, the writer retires. */
    fake_svc_free(c->fs);
    c->fs = NULL;
    assert_true(tg_test_run_until(c->base, is_disconnected, c, 5000));
    assert_int_equal(c->stops, 1);
    assert_false(tg_producer_connected(c->p));
    uint8_t b[2] = {0x40, 0x01};
    assert_int_equal(tg_trace_writer_write(c->writer, b, 2), TG_TRACE_WRITER_INACTIVE);
    tg_trace_writer_destroy(c->writer);
    c->writer = NULL;
    tg_test_run_until(c->base, NULL, NULL, 150); /* a few failed attempts */

    /* It comes back: the producer reconnects and registers again. */
    c->fs = fake_svc_new(c->base, c->path);
    assert_non_null(c->fs);
    assert_true(tg_test_run_until(c->base, connected_twice, c, 5000));
    assert_true(wait_method(c, "RegisterDataSource", 1));
    assert_int_equal(fake_setup_tracing(c->fs, 4, 64 * 1024), 0);
    assert_int_equal(fake_start_ds(c->fs, 5, "track_event", 1), 0);
    assert_true(tg_test_run_until(c->base, has_writer, c, 5000));
    assert_int_equal(tg_trace_writer_id(c->writer), 2); /* ids are round-robin */
    size_t len;
    uint8_t *p = make_test_packet(1, TE_INSTANT, "again", 1, 0, 0, &len);
    assert_int_equal(tg_trace_writer_write(c->writer, p, len), TG_TRACE_WRITER_OK);
    assert_true(flush_and_wait(c, 5, 1));
    assert_int_equal(c->fs->n_packets, 1);
    assert_memory_equal(c->fs->packets[0].data, p, len);
    free(p);
}

static void test_no_service(void **state)
{
    struct ctx *c = *state;
    assert_int_equal(start_producer(c, c->path, false), 0);
    assert_true(tg_test_run_until(c->base, is_disconnected, c, 5000));
    assert_int_equal(c->connected, 0);
    assert_null(tg_producer_create_writer(c->p, 1));
    /* bad addresses and hints are refused up front */
    struct tg_producer_opts o = {0};
    o.socket = c->path;
    o.smb_page_size_hint_kb = 12;
    char err[128];
    assert_null(tg_producer_new(c->base, &o, err, sizeof err));
}

/* A service (or whatever squats on its socket) handing out a memfd it can
 * still shrink could turn the app's next trace write into SIGBUS: the
 * producer refuses an unsealed SMB and drops that connection, as the SDK
 * does. (A sealed one is what every other test here maps.) */
static void test_unsealed_smb_refused(void **state)
{
    struct ctx *c = *state;
    c->fs = fake_svc_new(c->base, c->path);
    assert_non_null(c->fs);
    c->fs->unsealed_smb = true;
    assert_int_equal(start_producer(c, c->path, false), 0);
    assert_true(tg_test_run_until(c->base, is_connected, c, 5000));
    assert_int_equal(fake_setup_tracing(c->fs, 4, 256 * 1024), 0);
    assert_true(tg_test_run_until(c->base, is_disconnected, c, 5000));
    assert_null(tg_producer_create_writer(c->p, 1));
}

/* A service asking for a ninth instance of one data source at once is
 * refused (the SDK's limit), instead of the app allocating and running its
 * callbacks once per id a hostile service sends; a stopped one frees its
 * slot. */
static unsigned g_setups;
static int have_setups(void *arg) { return ((struct ctx *)arg)->setups >= g_setups; }
static void test_instances_per_data_source_bounded(void **state)
{
    struct ctx *c = *state;
    bring_up(c, c->path, false, 256 * 1024); /* instance 1 */
    c->create_writer_on_start = false;
    for (uint64_t id = 2; id <= 20; id++)
        assert_int_equal(fake_start_ds(c->fs, id, "track_event", 3), 0);
    assert_true(wait_method(c, "NotifyDataSourceStarted", 8));
    /* the commands are handled in order: once a later one is answered, every start was seen */
    assert_true(flush_and_wait(c, 1, 77));
    assert_int_equal(c->setups, 8);
    assert_int_equal(c->starts, 8);
    assert_int_equal(fake_count(c->fs, "NotifyDataSourceStarted"), 8);
    assert_int_equal(fake_stop_ds(c->fs, 2), 0);
    assert_true(tg_test_run_until(c->base, have_stops, c, 5000));
    g_setups = 9;
    assert_int_equal(fake_start_ds(c->fs, 21, "track_event", 3), 0);
    assert_true(tg_test_run_until(c->base, have_setups, c, 5000));
    assert_true(wait_method(c, "NotifyDataSourceStarted", 9));
}

/* Old services send StartDataSource without SetupDataSource; unregistering a
 * data source stops its instances; triggers and unregistration are
 * fire-and-forget (drop_reply) like the SDK's. */
static void test_start_only_unregister_triggers(void **state)
{
    struct ctx *c = *state;
    c->fs = fake_svc_new(c->base, c->path);
    assert_non_null(c->fs);
    assert_int_equal(start_producer(c, c->path, false), 0);
    assert_true(tg_test_run_until(c->base, is_connected, c, 5000));
    assert_int_equal(fake_setup_tracing(c->fs, 4, 64 * 1024), 0);
    Perfetto__Protos__DataSourceConfig cfg = PERFETTO__PROTOS__DATA_SOURCE_CONFIG__INIT;
    cfg.name = (char *)"track_event";
    cfg.has_target_buffer = 1;
    cfg.target_buffer = 2;
    Perfetto__Protos__GetAsyncCommandResponse r = PERFETTO__PROTOS__GET_ASYNC_COMMAND_RESPONSE__INIT;
    Perfetto__Protos__GetAsyncCommandResponse__StartDataSource sd =
        PERFETTO__PROTOS__GET_ASYNC_COMMAND_RESPONSE__START_DATA_SOURCE__INIT;
    sd.has_new_instance_id = 1;
    sd.new_instance_id = 4;
    sd.config = &cfg;
    r.cmd_case = PERFETTO__PROTOS__GET_ASYNC_COMMAND_RESPONSE__CMD_START_DATA_SOURCE;
    r.start_data_source = &sd;
    uint8_t buf[256];
    size_t n = perfetto__protos__get_async_command_response__pack(&r, buf);
    c->create_writer_on_start = true;
    assert_int_equal(fake_send_cmd_bytes(c->fs, buf, n, -1), 0);
    assert_true(tg_test_run_until(c->base, has_writer, c, 5000));
    assert_int_equal(c->setups, 1); /* synthesized */
    assert_int_equal(c->starts, 1);
    assert_int_equal(c->last_instance, 4);
    assert_int_equal(tg_trace_writer_target_buffer(c->writer), 2);

    /* A start for a data source we never registered is ignored. */
    cfg.name = (char *)"linux.ftrace";
    sd.new_instance_id = 5;
    n = perfetto__protos__get_async_command_response__pack(&r, buf);
    assert_int_equal(fake_send_cmd_bytes(c->fs, buf, n, -1), 0);
    tg_test_run_until(c->base, NULL, NULL, 30);
    assert_int_equal(c->starts, 1);
    assert_int_equal(fake_count(c->fs, "NotifyDataSourceStarted"), 1);

    const char *trig[] = {"t1", "t2"};
    assert_int_equal(tg_producer_activate_triggers(c->p, trig, 2), 0);
    assert_true(wait_method(c, "ActivateTriggers", 1));
    int at = fake_find(c->fs, "ActivateTriggers", 0);
    assert_int_equal(c->fs->recs[at].drop_reply, 1);
    Perfetto__Protos__ActivateTriggersRequest *ar =
        perfetto__protos__activate_triggers_request__unpack(NULL, c->fs->recs[at].len, c->fs->recs[at].args);
    assert_int_equal(ar->n_trigger_names, 2);
    assert_string_equal(ar->trigger_names[1], "t2");
    perfetto__protos__activate_triggers_request__free_unpacked(ar, NULL);

    assert_int_equal(tg_producer_unregister_data_source(c->p, "track_event"), 0);
    assert_int_equal(c->stops, 1);
    assert_false(tg_trace_writer_active(c->writer));
    assert_true(wait_method(c, "UnregisterDataSource", 1));
    int ud = fake_find(c->fs, "UnregisterDataSource", 0);
    assert_int_equal(c->fs->recs[ud].drop_reply, 1);
    assert_int_equal(tg_producer_unregister_data_source(c->p, "track_event"), -1);
}

static void test_category_matching(void **state)
{
    (void)state;
    struct tg_data_source_config cfg = {0};
    assert_true(tg_data_source_config_category_enabled(&cfg, "anything"));
    const char *en[] = {"*"};
    const char *dis[] = {"rendering"};
    cfg.enabled_categories = en;
    cfg.n_enabled_categories = 1;
    assert_true(tg_data_source_config_category_enabled(&cfg, "demo"));
    cfg.disabled_categories = dis;
    cfg.n_disabled_categories = 1;
    assert_true(tg_data_source_config_category_enabled(&cfg, "demo"));
    assert_false(tg_data_source_config_category_enabled(&cfg, "rendering"));
    const char *en2[] = {"demo", "net*"};
    const char *dis2[] = {"*"};
    cfg.enabled_categories = en2;
    cfg.n_enabled_categories = 2;
    cfg.disabled_categories = dis2;
    assert_true(tg_data_source_config_category_enabled(&cfg, "demo"));
    assert_true(tg_data_source_config_category_enabled(&cfg, "network"));
    assert_false(tg_data_source_config_category_enabled(&cfg, "rendering"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_handshake_like_sdk, setup, teardown),
        cmocka_unit_test_setup_teardown(test_smb_session, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stop_later, setup, teardown),
        cmocka_unit_test_setup_teardown(test_large_packets, setup, teardown),
        cmocka_unit_test_setup_teardown(test_flush_ack_without_data, setup, teardown),
        cmocka_unit_test_setup_teardown(test_writer_on_other_thread, setup, teardown),
        cmocka_unit_test_setup_teardown(test_emulation_tcp, setup, teardown),
        cmocka_unit_test_setup_teardown(test_emulation_split_from_thread, setup, teardown),
        cmocka_unit_test_setup_teardown(test_data_loss_marked, setup, teardown),
        cmocka_unit_test_setup_teardown(test_clear_incremental_state, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reconnect, setup, teardown),
        cmocka_unit_test_setup_teardown(test_no_service, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unsealed_smb_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_instances_per_data_source_bounded, setup, teardown),
        cmocka_unit_test_setup_teardown(test_start_only_unregister_triggers, setup, teardown),
        cmocka_unit_test(test_category_matching),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
