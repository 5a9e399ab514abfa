/* test_gw_smb_filter.c: the smb-bridge filter in one process: the embedded service (ts_env),
 * the gateway bridging to it with the filter registered, a TCP and a UNIX producer listener, a
 * scripted producer (ts_prod) through them and a consumer on the service. Covers: a TCP producer
 * is offered emulation by the gateway and its inline chunks reach the trace; a CommitData
 * with more chunks than the service's whole SMB holds is split and retried until every chunk is
 * through, in order, and its reply reaches the producer; a producer that disconnects while its
 * commit waits for room still gets it delivered; a producer on the UNIX listener keeps the real
 * SMB fd and is left alone by the filter; a chunk committed incomplete (a producer's flush) and
 * then complete reaches the trace whole. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "commit_data_request.pb-c.h"
#include "gw_config.h"
#include "gw_core.h"
#include "gw_listener.h"
#include "gw_smb_filter.h"
#include "test_service_util.h"
#include "tracegate/log.h"

#define PAYLOAD 1000
#define SMB_KB 16 /* the service's SMB: 4 pages of 4 KiB */

struct fx {
    struct ts_env e;
    struct tg_gw_config cfg;
    struct tg_gw *gw;
    struct ts_prod p;
    struct ts_cons c;
    uint32_t target;
    char dir[64];
    char tcp_addr[128], unix_addr[128];
};

static void fx_start(struct fx *x, int over_unix)
{
    memset(x, 0, sizeof *x);
    snprintf(x->dir, sizeof x->dir, "/tmp/tg-test-smbf-XXXXXX");
    assert_non_null(mkdtemp(x->dir));
    assert_int_equal(ts_env_init(&x->e), 0);
    char err[512], listen_unix[160];
    snprintf(listen_unix, sizeof listen_unix, "producer=unix:%s/p.sock", x->dir);
    tg_gw_config_init(&x->cfg);
    assert_int_equal(tg_gw_config_set(&x->cfg, "no-http", NULL, err, sizeof err), 0);
    assert_int_equal(tg_gw_config_set(&x->cfg, "listen", "producer=tcp://127.0.0.1:0", err, sizeof err), 0);
    assert_int_equal(tg_gw_config_set(&x->cfg, "listen", listen_unix, err, sizeof err), 0);
    if (tg_gw_config_validate(&x->cfg, err, sizeof err) != 0)
        fail_msg("validate: %s", err);
    x->gw = tg_gw_new(x->e.base, &x->cfg, x->e.svc, err, sizeof err);
    if (!x->gw)
        fail_msg("tg_gw_new: %s", err);
    assert_int_equal(tg_gw_smb_filter_register(x->gw), 0);
    if (tg_gw_start_listeners(x->gw, &x->cfg, err, sizeof err) != 0)
        fail_msg("listeners: %s", err);
    assert_int_equal(tg_gw_listener_count(x->gw), 2);
    snprintf(x->tcp_addr, sizeof x->tcp_addr, "%s", tg_gw_listener_address(tg_gw_listener_at(x->gw, 0)));
    snprintf(x->unix_addr, sizeof x->unix_addr, "%s", tg_gw_listener_address(tg_gw_listener_at(x->gw, 1)));

    struct ts_prod_opts po;
    memset(&po, 0, sizeof po);
    po.name = over_unix ? "prod_unix" : "prod_tcp";
    po.ds_name = "test.ds";
    po.auto_ack_flush = 1;
    po.auto_notify_stop = 1;
    po.size_hint = SMB_KB * 1024;
    po.page_hint = 4096;
    po.tcp = !over_unix;
    po.addr = over_unix ? x->unix_addr : x->tcp_addr;
    assert_int_equal(ts_prod_connect(&x->e, &x->p, &po), 0);
    assert_int_equal(ts_cons_connect(&x->e, &x->c), 0);
    struct ts_cfg cfg;
    ts_cfg_init(&cfg, 1024, 1, "test.ds", 0);
    assert_true(ts_cons_enable(&x->c, &cfg.tc, -1) != 0);
    assert_true(ts_prod_wait_started(&x->p, 1, 5000));
    x->target = x->p.inst_buffer[0];
    assert_true(x->target > 0);
    assert_int_equal(ts_prod_register_writer(&x->p, 1, x->target), 0);
}

static void fx_free(struct fx *x)
{
    ts_prod_close(&x->p);
    ts_cons_close(&x->c);
    ts_pump(&x->e, 20);
    tg_gw_free(x->gw);
    tg_gw_config_free(&x->cfg);
    ts_env_free(&x->e);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", x->dir);
    assert_int_equal(system(cmd), 0);
}

/* Writes n packets (sequence numbers first..first+n-1) into pending chunks. */
static void write_pending(struct fx *x, uint64_t first, size_t n)
{
    struct tg_smb_writer w;
    assert_int_equal(ts_prod_writer(&x->p, &w, 1, x->target), 0);
    w.next_chunk_id = (uint32_t)first;
    uint8_t buf[PAYLOAD + 64];
    for (uint64_t s = first; s < first + n; s++) {
        size_t len = ts_make_packet(buf, sizeof buf, s, PAYLOAD);
        assert_int_equal(tg_smb_writer_write_packet(&w, buf, len), TG_SMB_WRITER_OK);
    }
    tg_smb_writer_flush(&w);
}

/* Sends the pending chunks in one CommitData with drop_reply (no waiting). */
static void commit_no_reply(struct fx *x)
{
    struct ts_prod *p = &x->p;
    Perfetto__Protos__CommitDataRequest rq = PERFETTO__PROTOS__COMMIT_DATA_REQUEST__INIT;
    Perfetto__Protos__CommitDataRequest__ChunksToMove *mv = calloc(p->n_pending, sizeof *mv);
    Perfetto__Protos__CommitDataRequest__ChunksToMove **mvp = calloc(p->n_pending, sizeof *mvp);
    for (size_t i = 0; i < p->n_pending; i++) {
        perfetto__protos__commit_data_request__chunks_to_move__init(&mv[i]);
        mv[i].has_page = mv[i].has_chunk = mv[i].has_target_buffer = 1;
        mv[i].page = p->pending[i].page;
        mv[i].chunk = p->pending[i].chunk;
        mv[i].target_buffer = p->pending[i].target;
        mv[i].has_data = 1;
        mv[i].data.data = p->pending[i].data;
        mv[i].data.len = p->pending[i].len;
        mvp[i] = &mv[i];
    }
    rq.n_chunks_to_move = p->n_pending;
    rq.chunks_to_move = mvp;
    assert_int_equal(ts_raw_invoke(&x->e, &p->r, ++p->rid, 1, TS_P_COMMIT, &rq.base, 1, -1), 0);
    for (size_t i = 0; i < p->n_pending; i++)
        free(p->pending[i].data);
    p->n_pending = 0;
    free(mv);
    free(mvp);
}

/* The producer packets of the trace must be exactly first..first+n-1, in order. */
static void expect_trace(struct fx *x, uint64_t first, size_t n)
{
    struct ts_trace t = {0};
    assert_int_equal(ts_cons_read(&x->c, &t, 5000), 0);
    size_t got = 0;
    for (size_t i = 0; i < t.n; i++) {
        const struct ts_packet *pk = &t.pk[i];
        size_t body = pk->trusted ? pk->len - pk->trusted_len : pk->len;
        if (!ts_pkt_has(pk->data, body, 900))
            continue;
        uint64_t ts = 0;
        assert_true(ts_pkt_varint(pk->data, body, 8, &ts));
        assert_int_equal(ts, first + got);
        got++;
    }
    assert_int_equal(got, n);
    ts_trace_free(&t);
}

static uint64_t metric(struct fx *x, const char *name)
{
    char *m = tg_gw_metrics_text(x->gw);
    assert_non_null(m);
    char key[96];
    snprintf(key, sizeof key, "\n%s ", name);
    const char *at = strstr(m, key);
    uint64_t v = at ? strtoull(at + strlen(key), NULL, 10) : UINT64_MAX;
    free(m);
    assert_true(v != UINT64_MAX);
    return v;
}

static int no_sessions(void *arg) { return tg_gw_session_count(((struct fx *)arg)->gw) == 0; }

/* ------------------------------------------------------------ tests */

static void test_tcp_commit_bridged(void **state)
{
    (void)state;
    struct fx x;
    fx_start(&x, 0);
    assert_true(x.p.emulation_reply); /* offered by the gateway: the service saw a UNIX peer */
    assert_true(x.p.have_smb);
    write_pending(&x, 0, 8); /* 2 chunks: fits */
    assert_int_equal(ts_prod_commit(&x.p, 0), 0);
    expect_trace(&x, 0, 8);
    assert_int_equal(metric(&x, "tracegated_smb_bridge_chunks_total"), 2);
    assert_int_equal(metric(&x, "tracegated_smb_bridge_commits_total"), 1);
    assert_int_equal(metric(&x, "tracegated_smb_bridge_retries_total"), 0);
    fx_free(&x);
}

static void test_commit_larger_than_smb_split(void **state)
{
    (void)state;
    struct fx x;
    fx_start(&x, 0);
    write_pending(&x, 0, 48); /* 12 chunks in one CommitData; the SMB has 4 */
    assert_true(x.p.n_pending >= 12);
    size_t chunks = x.p.n_pending;
    assert_int_equal(ts_prod_commit(&x.p, 0), 0); /* the reply of the last part answers it */
    expect_trace(&x, 0, 48);
    assert_int_equal(metric(&x, "tracegated_smb_bridge_chunks_total"), chunks);
    assert_true(metric(&x, "tracegated_smb_bridge_retries_total") >= 1);
    assert_int_equal(metric(&x, "tracegated_smb_bridge_commits_total"), chunks); /* one part per chunk */
    /* the producer goes on afterwards (reads were released) */
    write_pending(&x, 48, 8);
    assert_int_equal(ts_prod_commit(&x.p, 0), 0);
    expect_trace(&x, 48, 8); /* ReadBuffers drained the first 48 */
    fx_free(&x);
}

/* A chunk image of writer 1 as the producer's emulated buffer holds it: the
 * 8-byte header {chunk_id, writer 1, count} then one fragment per packet
 * first..first+n-1 (4-byte redundant varint lengths). Returns the bytes used. */
static size_t chunk_image(uint8_t *out, size_t cap, uint32_t chunk_id, uint64_t first, unsigned n, unsigned count)
{
    memset(out, 0, cap);
    struct tg_smb_chunk_header h = {.chunk_id = chunk_id, .writer_id = 1, .packets = tg_smb_make_packets(count, 0)};
    tg_smb_chunk_header_encode(out, &h);
    size_t off = TG_SMB_CHUNK_HEADER_SIZE;
    uint8_t pkt[PAYLOAD + 64];
    for (uint64_t s = first; s < first + n; s++) {
        size_t len = ts_make_packet(pkt, sizeof pkt, s, PAYLOAD);
        assert_true(off + 4 + len <= cap);
        out[off] = (uint8_t)(0x80 | (len & 0x7f));
        out[off + 1] = (uint8_t)(0x80 | ((len >> 7) & 0x7f));
        out[off + 2] = (uint8_t)(0x80 | ((len >> 14) & 0x7f));
        out[off + 3] = (uint8_t)((len >> 21) & 0x7f);
        memcpy(out + off + 4, pkt, len);
        off += 4 + len;
    }
    return off;
}

/* CommitData of one inline chunk, waiting for its reply. */
static void commit_one(struct fx *x, const uint8_t *data, size_t len, int incomplete)
{
    Perfetto__Protos__CommitDataRequest rq = PERFETTO__PROTOS__COMMIT_DATA_REQUEST__INIT;
    Perfetto__Protos__CommitDataRequest__ChunksToMove mv = PERFETTO__PROTOS__COMMIT_DATA_REQUEST__CHUNKS_TO_MOVE__INIT;
    Perfetto__Protos__CommitDataRequest__ChunksToMove *mvp = &mv;
    mv.has_page = mv.has_chunk = mv.has_target_buffer = 1;
    mv.page = 200; /* the emulated buffer is larger than the service's SMB */
    mv.target_buffer = x->target;
    mv.has_data = 1;
    mv.data.data = (uint8_t *)data;
    mv.data.len = len;
    mv.has_chunk_incomplete = incomplete;
    mv.chunk_incomplete = incomplete;
    rq.n_chunks_to_move = 1;
    rq.chunks_to_move = &mvp;
    assert_int_equal(ts_prod_call(&x->p, TS_P_COMMIT, &rq.base, NULL), 1);
}

/* Perfetto's SDK (v54+) in emulation mode scrapes its own buffer on a flush and commits the chunk
 * it is still writing with chunk_incomplete; once the chunk is finished it commits it again,
 * complete. Copied into the SMB, the first copy was read as a complete chunk with one packet, and
 * the complete copy was refused (a complete chunk cannot grow): packets 1 and 2 were lost. */
static void test_incomplete_chunk_then_complete(void **state)
{
    (void)state;
    struct fx x;
    fx_start(&x, 0);
    static uint8_t partial[4088], whole[4088];
    /* at the flush: packet 0 done, packet 1 being written (the service drops the last fragment);
     * sent trimmed to the bytes in use, so the bridge must pad it to the chunk size */
    size_t used = chunk_image(partial, sizeof partial, 0, 0, 2, 2);
    commit_one(&x, partial, used, 1);
    chunk_image(whole, sizeof whole, 0, 0, 3, 3); /* later: finished with three packets */
    commit_one(&x, whole, sizeof whole, 0);
    expect_trace(&x, 0, 3);
    assert_int_equal(metric(&x, "tracegated_smb_bridge_chunks_total"), 1); /* only the complete copy */
    fx_free(&x);
}

/* Incomplete chunks grow to the SMB's chunk size in the bridge: a request of many small ones
 * would become a frame larger than any service takes (and, with tiny chunks and 64 KiB pages, a
 * 128 KiB frame became 500 MB in the gateway). Such a request is split into one request per chunk
 * and sent as the service reads: every packet arrives, and the producer gets its reply. */
static void test_many_incomplete_chunks_split(void **state)
{
    (void)state;
    struct fx x;
    fx_start(&x, 0);
    enum { N = 40 }; /* 40 x 4088 padded bytes: over one IPC frame */
    static uint8_t img[N][4088];
    Perfetto__Protos__CommitDataRequest rq = PERFETTO__PROTOS__COMMIT_DATA_REQUEST__INIT;
    Perfetto__Protos__CommitDataRequest__ChunksToMove mv[N], *mvp[N];
    for (unsigned i = 0; i < N; i++) {
        /* writer i + 1 (a sequence each): packet i complete, packet 1000 + i being written
         * (dropped by the service) */
        size_t used = chunk_image(img[i], sizeof img[i], 0, i, 1, 2);
        struct tg_smb_chunk_header h = {.chunk_id = 0, .writer_id = (uint16_t)(i + 1),
                                        .packets = tg_smb_make_packets(2, 0)};
        tg_smb_chunk_header_encode(img[i], &h);
        size_t used2;
        uint8_t pkt[PAYLOAD + 64];
        size_t len = ts_make_packet(pkt, sizeof pkt, 1000 + i, 100);
        used2 = used + 4 + len;
        assert_true(used2 <= sizeof img[i]);
        img[i][used] = (uint8_t)(0x80 | (len & 0x7f));
        img[i][used + 1] = (uint8_t)(0x80 | ((len >> 7) & 0x7f));
        img[i][used + 2] = (uint8_t)(0x80 | ((len >> 14) & 0x7f));
        img[i][used + 3] = (uint8_t)((len >> 21) & 0x7f);
        memcpy(img[i] + used + 4, pkt, len);
        Perfetto__Protos__CommitDataRequest__ChunksToMove init = PERFETTO__PROTOS__COMMIT_DATA_REQUEST__CHUNKS_TO_MOVE__INIT;
        mv[i] = init;
        mv[i].has_page = mv[i].has_chunk = mv[i].has_target_buffer = 1;
        mv[i].page = 200 + i;
        mv[i].target_buffer = x.target;
        mv[i].has_data = 1;
        mv[i].data.data = img[i];
        mv[i].data.len = used2;
        mv[i].has_chunk_incomplete = mv[i].chunk_incomplete = 1;
        mvp[i] = &mv[i];
    }
    rq.n_chunks_to_move = N;
    rq.chunks_to_move = mvp;
    assert_true(perfetto__protos__commit_data_request__get_packed_size(&rq) < 120000);
    assert_int_equal(ts_prod_call(&x.p, TS_P_COMMIT, &rq.base, NULL), 1); /* answered: not cut */
    assert_int_equal(metric(&x, "tracegated_smb_bridge_commits_total"), N); /* one part per chunk */
    assert_int_equal(tg_gw_session_count(x.gw), 1);
    expect_trace(&x, 0, N);
    fx_free(&x);
}

static int retried(void *arg) { return metric(arg, "tracegated_smb_bridge_retries_total") >= 1; }

static void test_disconnect_while_waiting(void **state)
{
    (void)state;
    struct fx x;
    fx_start(&x, 0);
    write_pending(&x, 0, 48);
    size_t chunks = x.p.n_pending;
    commit_no_reply(&x);
    ts_prod_close(&x.p); /* the producer is gone... */
    /* round by round: the SMB holds a third of the commit, so the round that first finds it full
     * leaves parts waiting; a pump, looping while events are active, could on a loaded machine go
     * on through the service freeing room and the retries until every part was through */
    assert_true(ts_step_until(&x.e, retried, &x, 5000));
    assert_true(metric(&x, "tracegated_smb_bridge_chunks_total") < chunks); /* ...while parts wait */
    /* Its reads are held, so the gateway has not seen the EOF yet: cut the
     * client connection as a write error would. The session stays (detached)
     * until the waiting parts are delivered. */
    assert_int_equal(tg_gw_session_count(x.gw), 1);
    tg_conn *down = tg_gw_session_down(x.gw->sessions);
    assert_non_null(down);
    tg_conn_close(down, "cut by the test");
    assert_true(ts_pump_until(&x.e, no_sessions, &x, 5000));
    assert_int_equal(metric(&x, "tracegated_smb_bridge_chunks_total"), chunks);
    expect_trace(&x, 0, 48);
    fx_free(&x);
}

static void test_unix_producer_gets_real_smb(void **state)
{
    (void)state;
    struct fx x;
    fx_start(&x, 1);
    assert_false(x.p.emulation_reply);
    assert_true(x.p.smb_fd >= 0); /* SetupTracing's fd came through the gateway */
    assert_true(x.p.have_smb);
    write_pending(&x, 0, 8);
    assert_int_equal(ts_prod_commit(&x.p, 0), 0);
    expect_trace(&x, 0, 8);
    assert_int_equal(metric(&x, "tracegated_smb_bridge_chunks_total"), 0);
    fx_free(&x);
}

int main(void)
{
    tg_log_set_level(TG_LOG_WARN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tcp_commit_bridged),
        cmocka_unit_test(test_commit_larger_than_smb_split),
        cmocka_unit_test(test_disconnect_while_waiting),
        cmocka_unit_test(test_many_incomplete_chunks_split),
        cmocka_unit_test(test_unix_producer_gets_real_smb),
        cmocka_unit_test(test_incomplete_chunk_then_complete),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
