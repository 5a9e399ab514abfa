/* test_producer_stall.c: the producer library's "stall then drop" policy
 * (tracegate/producer.h) against the fake ProducerPort service, with the
 * writer on a thread of its own and the service holding the SMB's chunks:
 * a stall waits for the service and loses nothing; a stall that lasts its
 * bound drops, later writes drop at once until one gets a chunk, and the next
 * full SMB stalls again; stopping the instance ends a stall at once, and so
 * does losing the connection for a stall on the loop thread; the
 * config may choose the policy only when the data source lets it
 * (STALL_THEN_ABORT is taken as stall then drop). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <event2/event.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test_producer_util.h"
#include "tg_test_util.h"
#include "trace_packet.pb-c.h"
#include "track_event.pb-c.h"
#include "tracegate/log.h"
#include "tracegate/producer.h"

#define TE_COUNTER PERFETTO__PROTOS__TRACK_EVENT__TYPE__TYPE_COUNTER
#define N_PACKETS 12 /* of ~1 KiB: 8 fit the two 4 KiB chunks of an 8 KiB SMB */

struct ctx {
    struct event_base *base;
    char dir[64];
    char path[128];
    struct fake_svc *fs;
    tg_producer *p;
    bool connected;
    /* data source */
    enum tg_buffer_exhausted_policy policy;
    bool configurable;
    unsigned stall_max_ms;
    int send_policy; /* DataSourceConfig.buffer_exhausted_policy the fake sends (0: none) */
    enum tg_buffer_exhausted_policy effective;
    uint32_t cfg_policy;
    tg_trace_writer *writer;
    /* the writer thread */
    pthread_t th;
    int rc[N_PACKETS];
    uint64_t ts0;
    atomic_int done;
};

static void on_connected(tg_producer *p, void *arg)
{
    (void)p;
    ((struct ctx *)arg)->connected = true;
}

static void ds_start(tg_producer *p, uint64_t id, const struct tg_data_source_config *cfg, void *arg)
{
    struct ctx *c = arg;
    c->effective = cfg->effective_policy;
    c->cfg_policy = cfg->buffer_exhausted_policy;
    c->writer = tg_producer_create_writer(p, id);
}

static int setup(void **state)
{
    struct ctx *c = calloc(1, sizeof *c);
    tg_log_set_level(TG_LOG_WARN);
    c->base = event_base_new();
    snprintf(c->dir, sizeof c->dir, "/tmp/tgstallXXXXXX");
    if (!mkdtemp(c->dir))
        return -1;
    snprintf(c->path, sizeof c->path, "%s/producer.sock", c->dir);
    c->policy = TG_BUFFER_EXHAUSTED_STALL_THEN_DROP;
    c->stall_max_ms = 60000; /* unless a test wants the bound: only the service or a stop ends it */
    *state = c;
    return 0;
}

static int teardown(void **state)
{
    struct ctx *c = *state;
    if (c->fs)
        fake_release_held(c->fs); /* a writer thread still stalling gets going */
    if (c->writer)
        tg_trace_writer_destroy(c->writer);
    tg_producer_free(c->p);
    fake_svc_free(c->fs);
    tg_test_run_until(c->base, NULL, NULL, 20);
    event_base_free(c->base);
    rmdir(c->dir);
    free(c);
    return 0;
}

static int is_connected(void *arg) { return ((struct ctx *)arg)->connected; }
static int has_writer(void *arg) { return ((struct ctx *)arg)->writer != NULL; }

/* Producer with the ctx's policy, an SMB of two 4 KiB chunks, instance 1 started with a writer. */
static void bring_up(struct ctx *c)
{
    c->fs = fake_svc_new(c->base, c->path);
    assert_non_null(c->fs);
    c->fs->ds_policy = c->send_policy;
    struct tg_producer_opts o = {0};
    o.socket = c->path;
    o.name = "stall-producer";
    o.on_connected = on_connected;
    o.cb_arg = c;
    char err[256];
    c->p = tg_producer_new(c->base, &o, err, sizeof err);
    assert_non_null(c->p);
    struct tg_data_source_desc d = {0};
    d.name = "track_event";
    d.will_notify_on_stop = true;
    d.buffer_exhausted_policy = c->policy;
    d.buffer_exhausted_policy_configurable = c->configurable;
    d.stall_max_ms = c->stall_max_ms;
    d.cbs.on_start = ds_start;
    d.cb_arg = c;
    assert_int_equal(tg_producer_register_data_source(c->p, &d), 0);
    assert_true(tg_test_run_until(c->base, is_connected, c, 5000));
    assert_int_equal(fake_setup_tracing(c->fs, 4, 8 * 1024), 0);
    assert_int_equal(fake_start_ds(c->fs, 1, "track_event", 3), 0);
    assert_true(tg_test_run_until(c->base, has_writer, c, 5000));
}

/* ---- the writer thread: N_PACKETS counters of ~1 KiB, timestamps ts0.. ---- */

static void *writer_main(void *arg)
{
    struct ctx *c = arg;
    for (int i = 0; i < N_PACKETS; i++) {
        size_t len;
        uint8_t *b = make_test_packet(c->ts0 + (uint64_t)i, TE_COUNTER, "x", 1, i, 950, &len);
        c->rc[i] = tg_trace_writer_write(c->writer, b, len);
        free(b);
    }
    atomic_store(&c->done, 1);
    return NULL;
}

static void start_writer(struct ctx *c, uint64_t ts0)
{
    c->ts0 = ts0;
    atomic_store(&c->done, 0);
    assert_int_equal(pthread_create(&c->th, NULL, writer_main, c), 0);
}

/* What the writer thread does (stalls, finishes) makes no event on the loop: while waiting for
 * it, a 1 ms timer makes the loop look again. */
static void tick(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    (void)arg;
}
static int run_until_polled(struct ctx *c, int (*done)(void *arg), int timeout_ms)
{
    struct event *t = event_new(c->base, -1, EV_PERSIST, tick, NULL);
    struct timeval ms = {0, 1000};
    event_add(t, &ms);
    int ok = tg_test_run_until(c->base, done, c, timeout_ms);
    event_free(t);
    return ok;
}

/* The loop runs meanwhile: it sends the writer's commits, and the fake reads them. */
static int writer_done(void *arg) { return atomic_load(&((struct ctx *)arg)->done); }
static void join_writer(struct ctx *c)
{
    assert_true(run_until_polled(c, writer_done, 10000));
    pthread_join(c->th, NULL);
}

static int stalling_on_held(void *arg)
{
    struct ctx *c = arg;
    return tg_trace_writer_stalling(c->writer) && c->fs->n_held >= 1;
}

static int count_rc(const struct ctx *c, int rc)
{
    int n = 0;
    for (int i = 0; i < N_PACKETS; i++)
        n += c->rc[i] == rc;
    return n;
}

/* The fake reads chunks but frees none; a writer thread writes until it stalls on the full SMB
 * (it has not dropped anything and is not done). */
static void start_stalled_writer(struct ctx *c)
{
    c->fs->hold_chunks = true;
    start_writer(c, 0);
    assert_true(run_until_polled(c, stalling_on_held, 5000));
    assert_int_equal(atomic_load(&c->done), 0);
}

/* The service catches up: the stalled writer gets going and every packet is written. */
static void release_and_join(struct ctx *c)
{
    c->fs->hold_chunks = false;
    fake_release_held(c->fs);
    join_writer(c);
    assert_int_equal(count_rc(c, TG_TRACE_WRITER_OK), N_PACKETS);
}

static unsigned g_acks;
static int have_acks(void *arg) { return ((struct ctx *)arg)->fs->flush_acks >= g_acks; }
static void flush_and_wait(struct ctx *c, uint64_t rid)
{
    uint64_t inst = 1;
    g_acks = c->fs->flush_acks + 1;
    assert_int_equal(fake_flush(c->fs, &inst, 1, rid), 0);
    assert_true(tg_test_run_until(c->base, have_acks, c, 5000));
}

/* ---- tests ---- */

static void test_stall_waits_for_the_service(void **state)
{
    struct ctx *c = *state;
    bring_up(c);
    start_stalled_writer(c);
    release_and_join(c);
    flush_and_wait(c, 7);
    assert_int_equal(c->fs->n_packets, N_PACKETS);
    for (size_t i = 0; i < c->fs->n_packets; i++) {
        Perfetto__Protos__TracePacket *t =
            perfetto__protos__trace_packet__unpack(NULL, c->fs->packets[i].len, c->fs->packets[i].data);
        assert_non_null(t);
        assert_int_equal(t->timestamp, i); /* all of them, in order */
        assert_false(t->has_previous_packet_dropped);
        perfetto__protos__trace_packet__free_unpacked(t, NULL);
    }
    assert_int_equal(c->fs->chunk_id_gaps, 0);
    struct tg_trace_writer_stats st;
    tg_trace_writer_get_stats(c->writer, &st);
    assert_int_equal(st.packets_dropped, 0);
    assert_true(st.stalls >= 1);
    assert_true(st.stall_us > 0);
    assert_int_equal(st.stalls_given_up, 0);
    assert_false(tg_trace_writer_stalling(c->writer));
}

static void test_stall_bound_then_drop_then_stall_again(void **state)
{
    struct ctx *c = *state;
    c->stall_max_ms = 30;
    bring_up(c);
    c->fs->hold_chunks = true; /* and never frees them during the first round */
    start_writer(c, 0);
    join_writer(c);
    /* 8 fit; the 9th waited its 30 ms and was dropped; the rest dropped without waiting */
    assert_int_equal(count_rc(c, TG_TRACE_WRITER_OK), 8);
    for (int i = 8; i < N_PACKETS; i++)
        assert_int_equal(c->rc[i], TG_TRACE_WRITER_DROPPED);
    struct tg_trace_writer_stats st;
    tg_trace_writer_get_stats(c->writer, &st);
    assert_int_equal(st.stalls, 1);
    assert_int_equal(st.stalls_given_up, 1);
    assert_true(st.stall_us >= 30000); /* it waited at least its bound */
    assert_int_equal(st.packets_dropped, 4);

    /* the service frees the chunks: a packet gets one, and the next full SMB stalls again */
    fake_release_held(c->fs);
    start_writer(c, 100);
    join_writer(c);
    assert_int_equal(c->rc[0], TG_TRACE_WRITER_OK);
    tg_trace_writer_get_stats(c->writer, &st);
    assert_int_equal(st.stalls, 2);
    assert_int_equal(st.stalls_given_up, 2);
}

static int stopped(void *arg) { return fake_count(((struct ctx *)arg)->fs, "NotifyDataSourceStopped") >= 1; }

static void test_stop_ends_a_stall(void **state)
{
    struct ctx *c = *state; /* stall bound: 60 s, far beyond the waits below */
    bring_up(c);
    start_stalled_writer(c);
    /* the service stops the instance while the writer waits: the stop retires the writer, which
     * gives up its stall at once (the loop thread does not wait 60 s for it) */
    assert_int_equal(fake_stop_ds(c->fs, 1), 0);
    assert_true(tg_test_run_until(c->base, stopped, c, 5000));
    join_writer(c);
    assert_int_equal(count_rc(c, TG_TRACE_WRITER_OK), 8);
    assert_int_equal(c->rc[8], TG_TRACE_WRITER_DROPPED);
    /* later writes either come before the stop marks the writer inactive (dropped: a stopping
     * writer does not stall) or after it */
    for (int i = 9; i < N_PACKETS; i++)
        assert_true(c->rc[i] == TG_TRACE_WRITER_DROPPED || c->rc[i] == TG_TRACE_WRITER_INACTIVE);
    struct tg_trace_writer_stats st;
    tg_trace_writer_get_stats(c->writer, &st);
    assert_int_equal(st.stalls, 1);
    assert_int_equal(st.stalls_given_up, 0); /* ended by the stop, not by its bound */
    assert_false(tg_trace_writer_active(c->writer));
}

/* A stall on the loop thread whose connection is gone gives up at once, not at its 60 s bound:
 * nobody is left to free a chunk. */
static void test_lost_connection_ends_a_loop_thread_stall(void **state)
{
    struct ctx *c = *state;
    bring_up(c);
    for (int i = 0; i < 8; i++) { /* the loop does not run: the two chunks stay full */
        size_t len;
        uint8_t *b = make_test_packet((uint64_t)i, TE_COUNTER, "x", 1, i, 950, &len);
        assert_int_equal(tg_trace_writer_write(c->writer, b, len), TG_TRACE_WRITER_OK);
        free(b);
    }
    fake_svc_free(c->fs); /* the service's end of the connection closes */
    c->fs = NULL;
    uint64_t t0 = tg_test_now_ms();
    size_t len;
    uint8_t *b = make_test_packet(8, TE_COUNTER, "x", 1, 8, 950, &len);
    assert_int_equal(tg_trace_writer_write(c->writer, b, len), TG_TRACE_WRITER_DROPPED);
    free(b);
    assert_true(tg_test_now_ms() - t0 < 30000); /* well before the stall's 60 s bound */
    struct tg_trace_writer_stats st;
    tg_trace_writer_get_stats(c->writer, &st);
    assert_int_equal(st.stalls, 1);
    assert_int_equal(st.stalls_given_up, 0);
}

/* N_PACKETS from the loop thread into an SMB whose chunks the fake holds (a stall there could not
 * end): 8 fit, the other 4 are dropped at once, with no stall. */
static void assert_drops_without_stalling(struct ctx *c)
{
    c->fs->hold_chunks = true;
    int ok = 0, dropped = 0;
    for (int i = 0; i < N_PACKETS; i++) {
        size_t len;
        uint8_t *b = make_test_packet((uint64_t)i, TE_COUNTER, "x", 1, i, 950, &len);
        int rc = tg_trace_writer_write(c->writer, b, len);
        free(b);
        ok += rc == TG_TRACE_WRITER_OK;
        dropped += rc == TG_TRACE_WRITER_DROPPED;
    }
    assert_int_equal(ok, 8);
    assert_int_equal(dropped, 4);
    struct tg_trace_writer_stats st;
    tg_trace_writer_get_stats(c->writer, &st);
    assert_int_equal(st.stalls, 0);
}

/* The config's policy (send) with the data source's (desc, configurable): returns the effective one. */
static enum tg_buffer_exhausted_policy config_case(struct ctx *c, enum tg_buffer_exhausted_policy desc,
                                                   bool configurable, int send)
{
    c->policy = desc;
    c->configurable = configurable;
    c->send_policy = send;
    bring_up(c);
    assert_int_equal(c->cfg_policy, (uint32_t)send); /* what the service sent, as sent */
    return c->effective;
}

static void test_config_stall_when_allowed(void **state)
{
    struct ctx *c = *state;
    assert_int_equal(config_case(c, TG_BUFFER_EXHAUSTED_DROP, true, 3), TG_BUFFER_EXHAUSTED_STALL_THEN_DROP);
    start_stalled_writer(c); /* and the writer really stalls */
    release_and_join(c);
}

static void test_config_abort_is_stall_then_drop(void **state)
{
    struct ctx *c = *state;
    assert_int_equal(config_case(c, TG_BUFFER_EXHAUSTED_DROP, true, 2), TG_BUFFER_EXHAUSTED_STALL_THEN_DROP);
}

static void test_config_ignored_unless_allowed(void **state)
{
    struct ctx *c = *state;
    assert_int_equal(config_case(c, TG_BUFFER_EXHAUSTED_DROP, false, 3), TG_BUFFER_EXHAUSTED_DROP);
    assert_drops_without_stalling(c);
}

static void test_config_drop_over_stall(void **state)
{
    struct ctx *c = *state;
    assert_int_equal(config_case(c, TG_BUFFER_EXHAUSTED_STALL_THEN_DROP, true, 1), TG_BUFFER_EXHAUSTED_DROP);
    assert_drops_without_stalling(c);
}

static void test_config_unknown_value_keeps_the_data_sources(void **state)
{
    struct ctx *c = *state;
    assert_int_equal(config_case(c, TG_BUFFER_EXHAUSTED_STALL_THEN_DROP, true, 99),
                     TG_BUFFER_EXHAUSTED_STALL_THEN_DROP);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_stall_waits_for_the_service, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stall_bound_then_drop_then_stall_again, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stop_ends_a_stall, setup, teardown),
        cmocka_unit_test_setup_teardown(test_lost_connection_ends_a_loop_thread_stall, setup, teardown),
        cmocka_unit_test_setup_teardown(test_config_stall_when_allowed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_config_abort_is_stall_then_drop, setup, teardown),
        cmocka_unit_test_setup_teardown(test_config_ignored_unless_allowed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_config_drop_over_stall, setup, teardown),
        cmocka_unit_test_setup_teardown(test_config_unknown_value_keeps_the_data_sources, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
