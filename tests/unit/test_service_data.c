/* test_service_data.c: the service's data path as a producer and a consumer
 * see it: ring-buffer wrap and DISCARD overflow (GetTraceStats), packets
 * larger than a chunk and than the whole SMB, patches, scraping a dead
 * producer's SMB, a consumer dying mid-ReadBuffers, malformed CommitData
 * that must not hurt another producer, write_into_file, shmem emulation,
 * InitializeConnection rules and SMB geometry; a full buffer read out in
 * many replies. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "test_service_util.h"
#include "tg_test_util.h"

#include "tracegate/pbwire.h"

#include "service/svc.h"

#include "commit_data_request.pb-c.h"
#include "producer_port.pb-c.h"
#include "trace_stats.pb-c.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef F_ADD_SEALS
#define F_ADD_SEALS 1033
#define F_SEAL_SEAL 0x0001
#define F_SEAL_SHRINK 0x0002
#define F_SEAL_GROW 0x0004
#endif

struct fx {
    struct ts_env e;
    struct ts_prod p;
    struct ts_cons c;
    uint32_t target;
};

static void default_prod(struct ts_prod_opts *o) { ts_prod_opts_init(o, "prod_a", "test.ds"); }

static void fx_start(struct fx *x, const struct ts_prod_opts *po, const struct ts_cfg *cfg, int fd)
{
    assert_int_equal(ts_env_init(&x->e), 0);
    assert_int_equal(ts_prod_connect(&x->e, &x->p, po), 0);
    assert_int_equal(ts_cons_connect(&x->e, &x->c), 0);
    assert_true(ts_cons_enable(&x->c, &cfg->tc, fd) != 0);
    assert_true(ts_prod_wait_started(&x->p, 1, 5000));
    x->target = x->p.inst_buffer[0];
    assert_true(x->target > 0);
}

static void fx_disable(struct fx *x)
{
    assert_int_equal(ts_cons_call(&x->c, TS_C_DISABLE, NULL, NULL, 5000), 1);
    char err[256];
    assert_int_equal(ts_cons_wait_enable(&x->c, 8000, err, sizeof err), 1);
    assert_string_equal(err, "");
}

static void fx_free(struct fx *x)
{
    ts_prod_close(&x->p);
    ts_cons_close(&x->c);
    ts_env_free(&x->e);
}

static Perfetto__Protos__TraceStats *get_stats(struct ts_cons *c)
{
    struct ts_frame f;
    assert_int_equal(ts_cons_call(c, TS_C_STATS, NULL, &f, 5000), 1);
    Perfetto__Protos__GetTraceStatsResponse *r =
        perfetto__protos__get_trace_stats_response__unpack(NULL, f.fi.payload_len, f.fi.payload);
    ts_frame_free(&f);
    assert_non_null(r);
    assert_non_null(r->trace_stats);
    Perfetto__Protos__TraceStats *st = r->trace_stats;
    r->trace_stats = NULL;
    perfetto__protos__get_trace_stats_response__free_unpacked(r, NULL);
    return st;
}

/* Producer packets of a read-out: sequence numbers (timestamp field) in order. */
static size_t producer_seqs(const struct ts_trace *t, uint64_t *out, size_t cap, size_t *payload_len)
{
    size_t n = 0;
    for (size_t i = 0; i < t->n; i++) {
        const struct ts_packet *p = &t->pk[i];
        if (!p->trusted)
            continue;
        uint64_t ts = 0;
        size_t body = p->len - p->trusted_len;
        if (!ts_pkt_varint(p->data, body, 8, &ts))
            continue;
        if (n < cap)
            out[n] = ts;
        if (payload_len) {
            const uint8_t *d;
            size_t l = 0;
            ts_pkt_bytes(p->data, body, 900, &d, &l);
            payload_len[n < cap ? n : cap - 1] = l;
        }
        n++;
    }
    return n;
}

static void write_packets(struct ts_prod *p, uint16_t writer, uint32_t target, uint64_t first, size_t n,
                          size_t payload)
{
    struct tg_smb_writer w;
    assert_int_equal(ts_prod_writer(p, &w, writer, target), 0);
    w.next_chunk_id = (uint32_t)first; /* keep chunk ids unique across calls */
    uint8_t *buf = malloc(payload + 64);
    for (uint64_t s = first; s < first + n; s++) {
        size_t len = ts_make_packet(buf, payload + 64, s, payload);
        assert_int_equal(tg_smb_writer_write_packet(&w, buf, len), TG_SMB_WRITER_OK);
    }
    tg_smb_writer_flush(&w);
    free(buf);
    assert_int_equal(ts_prod_commit(p, 0), 0);
}

/* ------------------------------------------------------------ buffers */

static void test_ring_buffer_wrap(void **state)
{
    (void)state;
    struct fx x;
    struct ts_prod_opts po;
    default_prod(&po);
    struct ts_cfg cfg;
    ts_cfg_init(&cfg, 64, 0, "test.ds", 0);
    fx_start(&x, &po, &cfg, -1);
    assert_int_equal(ts_prod_register_writer(&x.p, 1, x.target), 0);
    x.p.commit_immediately = true;
    write_packets(&x.p, 1, x.target, 0, 400, 1000); /* ~400 KB into 64 KB */
    Perfetto__Protos__TraceStats *st = get_stats(&x.c);
    assert_int_equal(st->n_buffer_stats, 1);
    assert_true(st->buffer_stats[0]->chunks_overwritten > 0);
    assert_true(st->buffer_stats[0]->write_wrap_count > 0);
    assert_int_equal(st->buffer_stats[0]->buffer_size, 64 * 1024);
    perfetto__protos__trace_stats__free_unpacked(st, NULL);
    fx_disable(&x);
    struct ts_trace t = {0};
    assert_int_equal(ts_cons_read(&x.c, &t, 5000), 0);
    uint64_t seqs[512];
    size_t n = producer_seqs(&t, seqs, 512, NULL);
    assert_true(n > 20 && n < 100); /* what fits in 64 KB */
    assert_int_equal(seqs[n - 1], 399); /* the newest data survived */
    for (size_t i = 1; i < n; i++)
        assert_int_equal(seqs[i], seqs[i - 1] + 1);
    ts_trace_free(&t);
    fx_free(&x);
}

static void test_discard_overflow(void **state)
{
    (void)state;
    struct fx x;
    struct ts_prod_opts po;
    default_prod(&po);
    struct ts_cfg cfg;
    ts_cfg_init(&cfg, 64, 1, "test.ds", 0);
    fx_start(&x, &po, &cfg, -1);
    assert_int_equal(ts_prod_register_writer(&x.p, 1, x.target), 0);
    x.p.commit_immediately = true;
    write_packets(&x.p, 1, x.target, 0, 400, 1000);
    Perfetto__Protos__TraceStats *st = get_stats(&x.c);
    assert_true(st->buffer_stats[0]->chunks_discarded > 0);
    assert_int_equal(st->buffer_stats[0]->chunks_overwritten, 0);
    perfetto__protos__trace_stats__free_unpacked(st, NULL);
    fx_disable(&x);
    struct ts_trace t = {0};
    assert_int_equal(ts_cons_read(&x.c, &t, 5000), 0);
    uint64_t seqs[512];
    size_t n = producer_seqs(&t, seqs, 512, NULL);
    assert_true(n > 20 && n < 100);
    assert_int_equal(seqs[0], 0); /* the oldest data was kept */
    ts_trace_free(&t);
    fx_free(&x);
}

/* A full buffer read out in many replies (several per loop turn): every packet stored comes out
 * once, in order, intact; replies stay under the IPC limit; has_more on all but the last. Once
 * with DISCARD (the oldest data kept) and once with a ring that wrapped (the newest kept). */
static void read_full_buffer(int discard)
{
    struct fx x;
    struct ts_prod_opts po;
    default_prod(&po);
    struct ts_cfg cfg;
    ts_cfg_init(&cfg, 1024, discard, "test.ds", 0);
    fx_start(&x, &po, &cfg, -1);
    assert_int_equal(ts_prod_register_writer(&x.p, 1, x.target), 0);
    x.p.commit_immediately = true;
    static const size_t payloads[] = {100, 700, 1000, 300, 20, 900};
    uint64_t seq = 0;
    size_t lens[4096];
    for (size_t i = 0; i < 16; i++) { /* ~2.5 MB into 1 MB */
        size_t pl = payloads[i % 6];
        for (uint64_t k = seq; k < seq + 250; k++)
            lens[k] = pl;
        write_packets(&x.p, 1, x.target, seq, 250, pl);
        seq += 250;
    }
    fx_disable(&x);
    struct ts_trace t = {0};
    assert_int_equal(ts_cons_read(&x.c, &t, 10000), 0);
    assert_false(t.bad_has_more);
    assert_true(t.replies >= 8);
    assert_true(t.max_reply < 131072 - 64);
    static uint64_t seqs[4096];
    static size_t got_len[4096];
    size_t n = producer_seqs(&t, seqs, 4096, got_len);
    assert_true(n > 500 && n < seq);
    if (discard)
        assert_int_equal(seqs[0], 0);
    else
        assert_int_equal(seqs[n - 1], seq - 1);
    for (size_t i = 1; i < n; i++)
        assert_int_equal(seqs[i], seqs[i - 1] + 1);
    /* and each packet byte for byte */
    size_t k = 0;
    static uint8_t ref[2048];
    for (size_t i = 0; i < t.n; i++) {
        if (!t.pk[i].trusted)
            continue;
        uint64_t s = seqs[k++];
        size_t l = ts_make_packet(ref, sizeof ref, s, lens[s]);
        assert_int_equal(t.pk[i].len - t.pk[i].trusted_len, l);
        assert_memory_equal(t.pk[i].data, ref, l);
    }
    assert_int_equal(k, n);
    ts_trace_free(&t);
    fx_free(&x);
}

static void test_read_full_buffer(void **state)
{
    (void)state;
    read_full_buffer(1);
    read_full_buffer(0);
}

static void test_packets_larger_than_chunk_and_smb(void **state)
{
    (void)state;
    struct fx x;
    struct ts_prod_opts po;
    default_prod(&po);
    po.size_hint = 16384; /* 4 pages of 4 KiB */
    po.page_hint = 4096;
    struct ts_cfg cfg;
    ts_cfg_init(&cfg, 1024, 0, "test.ds", 0);
    fx_start(&x, &po, &cfg, -1);
    assert_int_equal(x.p.map_size, 16384);
    assert_int_equal(ts_prod_register_writer(&x.p, 1, x.target), 0);
    x.p.commit_immediately = true;
    struct tg_smb_writer w;
    assert_int_equal(ts_prod_writer(&x.p, &w, 1, x.target), 0);
    static uint8_t big[70000];
    size_t l1 = ts_make_packet(big, sizeof big, 1, 10000); /* > a chunk */
    assert_int_equal(tg_smb_writer_write_packet(&w, big, l1), TG_SMB_WRITER_OK);
    size_t l2 = ts_make_packet(big, sizeof big, 2, 60000); /* > the SMB */
    assert_int_equal(tg_smb_writer_write_packet(&w, big, l2), TG_SMB_WRITER_OK);
    size_t l3 = ts_make_packet(big, sizeof big, 3, 10);
    assert_int_equal(tg_smb_writer_write_packet(&w, big, l3), TG_SMB_WRITER_OK);
    tg_smb_writer_flush(&w);
    assert_int_equal(ts_prod_commit(&x.p, 0), 0);
    fx_disable(&x);
    struct ts_trace t = {0};
    assert_int_equal(ts_cons_read(&x.c, &t, 5000), 0);
    uint64_t seqs[8];
    size_t lens[8];
    size_t n = producer_seqs(&t, seqs, 8, lens);
    assert_int_equal(n, 3);
    assert_int_equal(seqs[0], 1);
    assert_int_equal(lens[0], 10000);
    assert_int_equal(seqs[1], 2);
    assert_int_equal(lens[1], 60000);
    assert_int_equal(seqs[2], 3);
    /* the whole 60000-byte packet came back intact */
    size_t found = 0;
    for (size_t i = 0; i < t.n; i++) {
        if (!t.pk[i].trusted || t.pk[i].len - t.pk[i].trusted_len != l2)
            continue;
        uint8_t ref[70000];
        ts_make_packet(ref, sizeof ref, 2, 60000);
        assert_memory_equal(t.pk[i].data, ref, l2);
        found++;
    }
    assert_int_equal(found, 1);
    assert_true(t.max_reply < 131072 - 64);
    ts_trace_free(&t);
    fx_free(&x);
}

static size_t patched_packet(uint8_t *out, size_t content)
{
    /* TracePacket{timestamp: 77, for_testing(900): <content>} with the length of
     * field 900 left as a zeroed 4-byte placeholder */
    size_t n = 0;
    n += tg_pb_put_tag(out + n, 8, TG_PB_VARINT);
    n += tg_pb_put_varint(out + n, 77);
    n += tg_pb_put_tag(out + n, 900, TG_PB_LEN);
    memset(out + n, 0, 4);
    n += 4;
    memset(out + n, 'p', content);
    return n + content;
}

static void send_patch(struct ts_prod *p, uint32_t target, uint16_t writer, uint32_t chunk_id, uint32_t offset,
                       uint32_t value)
{
    Perfetto__Protos__CommitDataRequest rq = PERFETTO__PROTOS__COMMIT_DATA_REQUEST__INIT;
    Perfetto__Protos__CommitDataRequest__ChunkToPatch cp = PERFETTO__PROTOS__COMMIT_DATA_REQUEST__CHUNK_TO_PATCH__INIT;
    Perfetto__Protos__CommitDataRequest__ChunkToPatch__Patch pt =
        PERFETTO__PROTOS__COMMIT_DATA_REQUEST__CHUNK_TO_PATCH__PATCH__INIT;
    Perfetto__Protos__CommitDataRequest__ChunkToPatch__Patch *ptp = &pt;
    Perfetto__Protos__CommitDataRequest__ChunkToPatch *cpp = &cp;
    uint8_t data[4];
    tg_pb_put_varint4(data, value);
    pt.has_offset = 1;
    pt.offset = offset;
    pt.has_data = 1;
    pt.data.data = data;
    pt.data.len = 4;
    cp.has_target_buffer = cp.has_writer_id = cp.has_chunk_id = 1;
    cp.target_buffer = target;
    cp.writer_id = writer;
    cp.chunk_id = chunk_id;
    cp.n_patches = 1;
    cp.patches = &ptp;
    cp.has_has_more_patches = 1;
    cp.has_more_patches = 0;
    rq.n_chunks_to_patch = 1;
    rq.chunks_to_patch = &cpp;
    assert_int_equal(ts_prod_call(p, TS_P_COMMIT, &rq.base, NULL), 1);
}

static void commit_chunk(struct ts_prod *p, uint32_t page, uint32_t chunk, uint32_t target)
{
    p->pending = calloc(1, sizeof *p->pending);
    p->pending[0].page = page;
    p->pending[0].chunk = chunk;
    p->pending[0].target = target;
    p->n_pending = p->cap_pending = 1;
    assert_int_equal(ts_prod_commit(p, 0), 0);
}

static void test_patches(void **state)
{
    (void)state;
    struct fx x;
    struct ts_prod_opts po;
    default_prod(&po);
    struct ts_cfg cfg;
    ts_cfg_init(&cfg, 16, 0, "test.ds", 0);
    fx_start(&x, &po, &cfg, -1);
    /* a chunk that needs patching, committed then patched while in the buffer */
    uint8_t pkt[256];
    size_t plen = patched_packet(pkt, 100);
    const uint8_t *frags[] = {pkt};
    size_t lens[] = {plen};
    assert_int_equal(ts_hand_chunk(&x.p.smb, 0, 2, 0, TG_SMB_CHUNK_NEEDS_PATCHING, frags, lens, 1, true), 0);
    commit_chunk(&x.p, 0, 0, x.target);
    /* offset from the payload start: 4-byte fragment header + 2 (ts) + 2 (tag 900) */
    send_patch(&x.p, x.target, 2, 0, 4 + 2 + 2, 100);
    /* a chunk overwritten before its patch arrives: patch is discarded */
    assert_int_equal(ts_hand_chunk(&x.p.smb, 1, 3, 0, TG_SMB_CHUNK_NEEDS_PATCHING, frags, lens, 1, true), 0);
    commit_chunk(&x.p, 1, 0, x.target);
    assert_int_equal(ts_prod_register_writer(&x.p, 4, x.target), 0);
    x.p.commit_immediately = true;
    write_packets(&x.p, 4, x.target, 1000, 100, 1000); /* 100 KB through 16 KB */
    send_patch(&x.p, x.target, 3, 0, 4 + 2 + 2, 100);
    Perfetto__Protos__TraceStats *st = get_stats(&x.c);
    assert_true(st->buffer_stats[0]->patches_succeeded >= 1);
    assert_true(st->buffer_stats[0]->patches_failed >= 1);
    assert_true(st->patches_discarded >= 1);
    perfetto__protos__trace_stats__free_unpacked(st, NULL);
    fx_disable(&x);
    struct ts_trace t = {0};
    assert_int_equal(ts_cons_read(&x.c, &t, 5000), 0);
    ts_trace_free(&t);
    fx_free(&x);

    /* the patched packet reads back with its size field filled in */
    struct ts_prod_opts po2;
    default_prod(&po2);
    ts_cfg_init(&cfg, 256, 0, "test.ds", 0);
    fx_start(&x, &po2, &cfg, -1);
    assert_int_equal(ts_hand_chunk(&x.p.smb, 0, 2, 0, TG_SMB_CHUNK_NEEDS_PATCHING, frags, lens, 1, true), 0);
    commit_chunk(&x.p, 0, 0, x.target);
    send_patch(&x.p, x.target, 2, 0, 4 + 2 + 2, 100);
    fx_disable(&x);
    t = (struct ts_trace){0};
    assert_int_equal(ts_cons_read(&x.c, &t, 5000), 0);
    size_t found = 0;
    for (size_t i = 0; i < t.n; i++) {
        const struct ts_packet *p = &t.pk[i];
        if (!p->trusted)
            continue;
        const uint8_t *d;
        size_t l;
        assert_true(ts_pkt_bytes(p->data, p->len - p->trusted_len, 900, &d, &l));
        assert_int_equal(l, 100);
        found++;
    }
    assert_int_equal(found, 1);
    ts_trace_free(&t);
    fx_free(&x);
}

/* ------------------------------------------------------------ failures */

static void test_producer_dies_mid_chunk(void **state)
{
    (void)state;
    for (int scraping = 0; scraping <= 1; scraping++) {
        struct fx x;
        struct ts_prod_opts po;
        default_prod(&po);
        po.scraping = scraping;
        struct ts_cfg cfg;
        ts_cfg_init(&cfg, 256, 0, "test.ds", 0);
        fx_start(&x, &po, &cfg, -1);
        assert_int_equal(ts_prod_register_writer(&x.p, 1, x.target), 0);
        struct tg_smb_writer w, w2;
        assert_int_equal(ts_prod_writer(&x.p, &w, 1, x.target), 0);
        assert_int_equal(ts_prod_writer(&x.p, &w2, 5, x.target), 0); /* never registered */
        uint8_t buf[256];
        for (uint64_t s = 0; s < 3; s++) {
            size_t len = ts_make_packet(buf, sizeof buf, 10 + s, 50);
            assert_int_equal(tg_smb_writer_write_packet(&w, buf, len), TG_SMB_WRITER_OK);
            len = ts_make_packet(buf, sizeof buf, 500 + s, 50);
            assert_int_equal(tg_smb_writer_write_packet(&w2, buf, len), TG_SMB_WRITER_OK);
        }
        /* the producer dies with both chunks still BeingWritten */
        ts_prod_close(&x.p);
        assert_true(ts_wait_svc_count(&x.e, TS_SVC_PRODUCERS, 0, 5000)); /* the service saw it go */
        fx_disable(&x);
        struct ts_trace t = {0};
        assert_int_equal(ts_cons_read(&x.c, &t, 5000), 0);
        uint64_t seqs[16];
        size_t n = producer_seqs(&t, seqs, 16, NULL);
        if (scraping) {
            /* complete fragments recovered; the last one may still be in progress */
            assert_int_equal(n, 2);
            assert_int_equal(seqs[0], 10);
            assert_int_equal(seqs[1], 11);
        } else {
            assert_int_equal(n, 0);
        }
        ts_trace_free(&t);
        ts_cons_close(&x.c);
        ts_env_free(&x.e);
    }
}

struct first_reply {
    struct ts_cons *c;
    uint64_t rid;
};

static void test_consumer_dies_mid_read(void **state)
{
    (void)state;
    struct fx x;
    struct ts_prod_opts po;
    default_prod(&po);
    struct ts_cfg cfg;
    ts_cfg_init(&cfg, 8192, 0, "test.ds", 0);
    fx_start(&x, &po, &cfg, -1);
    assert_int_equal(ts_prod_register_writer(&x.p, 1, x.target), 0);
    x.p.commit_immediately = true;
    x.p.commit_batch = 16;
    write_packets(&x.p, 1, x.target, 0, 3000, 2000); /* ~6 MB */
    fx_disable(&x);
    uint64_t rid = ++x.c.rid;
    assert_int_equal(ts_raw_invoke(&x.e, &x.c.r, rid, 1, TS_C_READ, NULL, 0, -1), 0);
    struct ts_frame f;
    assert_true(ts_raw_wait(&x.e, &x.c.r, rid, &f, 5000));
    assert_true(f.fi.success);
    assert_true(f.fi.has_more);
    ts_frame_free(&f);
    ts_cons_close(&x.c); /* gone in the middle of the stream */
    assert_true(ts_wait_svc_count(&x.e, TS_SVC_SESSIONS, 0, 5000));
    /* the service is healthy: the session is gone and a new one works */
    struct ts_cons c2;
    assert_int_equal(ts_cons_connect(&x.e, &c2), 0);
    Perfetto__Protos__QueryServiceStateRequest q = PERFETTO__PROTOS__QUERY_SERVICE_STATE_REQUEST__INIT;
    assert_int_equal(ts_cons_call(&c2, TS_C_QUERY, &q.base, &f, 5000), 1);
    Perfetto__Protos__QueryServiceStateResponse *qr =
        perfetto__protos__query_service_state_response__unpack(NULL, f.fi.payload_len, f.fi.payload);
    assert_non_null(qr);
    assert_int_equal(qr->service_state->num_sessions, 0);
    assert_int_equal(qr->service_state->n_producers, 1);
    perfetto__protos__query_service_state_response__free_unpacked(qr, NULL);
    ts_frame_free(&f);
    struct ts_cfg cfg2;
    ts_cfg_init(&cfg2, 256, 0, "test.ds", 0);
    assert_true(ts_cons_enable(&c2, &cfg2.tc, -1) != 0);
    assert_true(ts_prod_wait_started(&x.p, 2, 5000));
    ts_cons_close(&c2);
    ts_prod_close(&x.p);
    ts_env_free(&x.e);
}

static void test_malformed_commit_data(void **state)
{
    (void)state;
    struct ts_env e;
    assert_int_equal(ts_env_init(&e), 0);
    struct ts_prod a, b;
    struct ts_prod_opts po;
    default_prod(&po);
    assert_int_equal(ts_prod_connect(&e, &a, &po), 0);
    po.name = "prod_b";
    assert_int_equal(ts_prod_connect(&e, &b, &po), 0);
    struct ts_cons c;
    assert_int_equal(ts_cons_connect(&e, &c), 0);
    struct ts_cfg cfg;
    ts_cfg_init(&cfg, 1024, 0, "test.ds", 0);
    cfg.buf[1] = cfg.buf[0];
    cfg.tc.n_buffers = 2;
    assert_true(ts_cons_enable(&c, &cfg.tc, -1) != 0);
    assert_true(ts_prod_wait_started(&a, 1, 5000));
    assert_true(ts_prod_wait_started(&b, 1, 5000));
    uint32_t target = a.inst_buffer[0];
    assert_int_equal(b.inst_buffer[0], target);

    /* A's chunk 0 of writer 1 */
    assert_int_equal(ts_prod_register_writer(&a, 1, target), 0);
    write_packets(&a, 1, target, 0, 10, 100);

    /* B: page out of range, chunk index out of range, bad layout, bad target,
     * writer registered for another buffer, and a patch aimed at A's chunk */
    uint8_t pkt[64];
    size_t plen = ts_make_packet(pkt, sizeof pkt, 9999, 20);
    const uint8_t *frags[] = {pkt};
    size_t lens[] = {plen};
    assert_int_equal(ts_hand_chunk(&b.smb, 2, 1, 0, 0, frags, lens, 1, true), 0);
    assert_int_equal(ts_hand_chunk(&b.smb, 3, 7, 0, 0, frags, lens, 1, true), 0);
    assert_int_equal(ts_prod_register_writer(&b, 7, target + 1), 0);
    /* page 4: a reserved layout (6) claiming every chunk Complete */
    uint32_t bad = (6u << 28) | 0x0FFFFFFFu;
    memcpy((uint8_t *)b.map + 4 * 4096, &bad, 4);
    struct ts_chunk_ref refs[] = {
        {.page = 100000, .chunk = 0, .target = target}, {.page = 2, .chunk = 14, .target = target},
        {.page = 4, .chunk = 0, .target = target},      {.page = 2, .chunk = 0, .target = 4242},
        {.page = 3, .chunk = 0, .target = target},
    };
    size_t nrefs = sizeof refs / sizeof refs[0];
    b.pending = calloc(nrefs, sizeof *b.pending);
    memcpy(b.pending, refs, sizeof refs);
    b.n_pending = b.cap_pending = nrefs;
    assert_int_equal(ts_prod_commit(&b, 0), 0);
    send_patch(&b, target, 1, 0, 4, 0x7F);
    /* inline chunk bytes from a shared-memory producer are still validated */
    Perfetto__Protos__CommitDataRequest rq = PERFETTO__PROTOS__COMMIT_DATA_REQUEST__INIT;
    Perfetto__Protos__CommitDataRequest__ChunksToMove mv = PERFETTO__PROTOS__COMMIT_DATA_REQUEST__CHUNKS_TO_MOVE__INIT;
    Perfetto__Protos__CommitDataRequest__ChunksToMove *mvp = &mv;
    uint8_t junk[5] = {1, 2, 3, 4, 5};
    mv.has_target_buffer = mv.has_data = 1;
    mv.target_buffer = target;
    mv.data.data = junk;
    mv.data.len = sizeof junk;
    rq.n_chunks_to_move = 1;
    rq.chunks_to_move = &mvp;
    assert_int_equal(ts_prod_call(&b, TS_P_COMMIT, &rq.base, NULL), 1);

    /* A keeps working */
    write_packets(&a, 1, target, 10, 10, 100);
    Perfetto__Protos__TraceStats *st = get_stats(&c);
    assert_true(st->chunks_discarded >= 6);
    assert_true(st->patches_discarded >= 1);
    perfetto__protos__trace_stats__free_unpacked(st, NULL);
    assert_int_equal(ts_cons_call(&c, TS_C_DISABLE, NULL, NULL, 5000), 1);
    assert_int_equal(ts_cons_wait_enable(&c, 8000, NULL, 0), 1);
    struct ts_trace t = {0};
    assert_int_equal(ts_cons_read(&c, &t, 5000), 0);
    uint64_t seqs[64];
    size_t lens2[64];
    size_t n = producer_seqs(&t, seqs, 64, lens2);
    assert_int_equal(n, 20); /* all of A's packets, none of B's */
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(seqs[i], i);
        assert_int_equal(lens2[i], 100); /* B's patch did not touch A's chunk */
    }
    ts_trace_free(&t);
    ts_prod_close(&a);
    ts_prod_close(&b);
    ts_cons_close(&c);
    ts_env_free(&e);
}

/* ------------------------------------------------------------ write_into_file */

static void check_pftrace(const char *path, size_t *packets, size_t *producer_packets, size_t *configs)
{
    uint8_t *data;
    size_t len;
    assert_int_equal(tg_test_read_file(path, &data, &len), 0);
    struct tg_pb_reader r;
    struct tg_pb_field f;
    tg_pb_reader_init(&r, data, len);
    int rc;
    *packets = *producer_packets = *configs = 0;
    while ((rc = tg_pb_next(&r, &f)) == 1) {
        assert_int_equal(f.number, 1);
        assert_int_equal(f.wire, TG_PB_LEN);
        uint64_t seq;
        if (ts_pkt_varint(f.data, f.len, 10, &seq) && seq >= 2)
            (*producer_packets)++;
        if (ts_pkt_has(f.data, f.len, 33))
            (*configs)++;
        (*packets)++;
    }
    assert_int_equal(rc, 0);
    free(data);
}

static int file_bigger_than_50_packets(void *arg)
{
    struct stat sb;
    return stat(arg, &sb) == 0 && sb.st_size > 50 * 300;
}

static void test_write_into_file(void **state)
{
    (void)state;
    char path[] = "/tmp/tg-wif-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    struct fx x;
    struct ts_prod_opts po;
    default_prod(&po);
    struct ts_cfg cfg;
    ts_cfg_init(&cfg, 256, 0, "test.ds", 0);
    cfg.tc.has_write_into_file = 1;
    cfg.tc.write_into_file = 1;
    cfg.tc.has_file_write_period_ms = 1;
    cfg.tc.file_write_period_ms = 10; /* raised to the 100 ms floor */
    fx_start(&x, &po, &cfg, fd);
    close(fd);
    assert_int_equal(ts_prod_register_writer(&x.p, 1, x.target), 0);
    write_packets(&x.p, 1, x.target, 0, 50, 300);
    /* the periodic write puts them into the file without any read or stop */
    assert_true(ts_pump_until(&x.e, file_bigger_than_50_packets, path, 5000));
    struct stat sb;
    assert_int_equal(stat(path, &sb), 0);
    assert_true(sb.st_size > 50 * 300);
    write_packets(&x.p, 1, x.target, 50, 50, 300);
    /* ReadBuffers on a write_into_file session: one empty final reply */
    struct ts_trace t = {0};
    assert_int_equal(ts_cons_read(&x.c, &t, 5000), 0);
    assert_int_equal(t.replies, 1);
    assert_int_equal(t.n, 0);
    ts_trace_free(&t);
    fx_disable(&x);
    size_t packets, prod, configs;
    check_pftrace(path, &packets, &prod, &configs);
    assert_int_equal(prod, 100);
    assert_int_equal(configs, 1);
    assert_true(packets > prod + 5);
    fx_free(&x);
    unlink(path);

    /* max_file_size_bytes ends the session by itself */
    char path2[] = "/tmp/tg-wif2-XXXXXX";
    fd = mkstemp(path2);
    default_prod(&po);
    ts_cfg_init(&cfg, 256, 0, "test.ds", 0);
    cfg.tc.has_write_into_file = 1;
    cfg.tc.write_into_file = 1;
    cfg.tc.has_file_write_period_ms = 1;
    cfg.tc.file_write_period_ms = 100;
    cfg.tc.has_max_file_size_bytes = 1;
    cfg.tc.max_file_size_bytes = 5000;
    fx_start(&x, &po, &cfg, fd);
    close(fd);
    assert_int_equal(ts_prod_register_writer(&x.p, 1, x.target), 0);
    write_packets(&x.p, 1, x.target, 0, 100, 300);
    assert_int_equal(ts_cons_wait_enable(&x.c, 5000, NULL, 0), 1);
    assert_int_equal(stat(path2, &sb), 0);
    assert_true(sb.st_size > 0 && sb.st_size <= 5000);
    check_pftrace(path2, &packets, &prod, &configs);
    fx_free(&x);
    unlink(path2);
}

/* output_path makes the service create a file with its own rights: honoured only for root and
 * the service's own user, never for a token principal or another local uid. */
static int enable_output_path(const struct tg_ipc_identity *id, const char *path, char *err, size_t errlen)
{
    struct ts_env e;
    assert_int_equal(ts_env_init(&e), 0);
    struct ts_cons c;
    assert_int_equal(ts_cons_connect_as(&e, &c, id), 0);
    struct ts_cfg cfg;
    ts_cfg_init(&cfg, 64, 0, "test.ds", 100); /* the reply to a write_into_file session comes at its end */
    cfg.tc.has_write_into_file = 1;
    cfg.tc.write_into_file = 1;
    cfg.tc.output_path = (char *)path;
    assert_true(ts_cons_enable(&c, &cfg.tc, -1) != 0);
    assert_int_equal(ts_cons_wait_enable(&c, 5000, err, errlen), 1);
    ts_cons_close(&c);
    ts_env_free(&e);
    return err[0] == 0;
}

static void test_output_path_rights(void **state)
{
    (void)state;
    static const struct tg_ipc_identity k_token = {.uid = (uid_t)-1, .pid = -1, .principal = "token:ci"};
    static const struct tg_ipc_identity k_other = {.uid = 1234, .pid = -1};
    char dir[] = "/tmp/tg-outpath-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[sizeof dir + 16];
    snprintf(path, sizeof path, "%s/trace", dir);
    char err[512];
    struct stat sb;
    assert_int_equal(enable_output_path(&k_token, path, err, sizeof err), 0);
    assert_non_null(strstr(err, "output_path is honoured only for root and the service's own user"));
    assert_non_null(strstr(err, "token:ci"));
    assert_int_equal(stat(path, &sb), -1);
    if (geteuid() != 1234) {
        assert_int_equal(enable_output_path(&k_other, path, err, sizeof err), 0);
        assert_non_null(strstr(err, "uid:1234"));
        assert_int_equal(stat(path, &sb), -1);
    }
    /* the service's own user (the test's uid, from SO_PEERCRED) may */
    assert_int_equal(enable_output_path(NULL, path, err, sizeof err), 1);
    assert_int_equal(stat(path, &sb), 0);
    unlink(path);
    rmdir(dir);
}

/* ------------------------------------------------------------ emulation */

static void test_emulated_producer(void **state)
{
    (void)state;
    struct fx x;
    struct ts_prod_opts po;
    default_prod(&po);
    po.tcp = 1;
    struct ts_cfg cfg;
    ts_cfg_init(&cfg, 1024, 0, "test.ds", 0);
    fx_start(&x, &po, &cfg, -1);
    assert_true(x.p.emulation_reply);
    assert_int_equal(x.p.smb_fd, -1); /* no fd on TCP */
    assert_int_equal(ts_prod_register_writer(&x.p, 1, x.target), 0);
    write_packets(&x.p, 1, x.target, 0, 30, 500);
    /* an inline chunk scraped by the producer itself: last fragment in progress */
    uint8_t chunk[4096];
    memset(chunk, 0, sizeof chunk);
    struct tg_smb_chunk_header h = {.chunk_id = 100, .writer_id = 2, .packets = tg_smb_make_packets(2, 0)};
    tg_smb_chunk_header_encode(chunk, &h);
    size_t o = 8;
    for (uint64_t s = 700; s < 702; s++) {
        uint8_t pkt[64];
        size_t l = ts_make_packet(pkt, sizeof pkt, s, 20);
        tg_pb_put_varint4(chunk + o, (uint32_t)l);
        memcpy(chunk + o + 4, pkt, l);
        o += 4 + l;
    }
    Perfetto__Protos__CommitDataRequest rq = PERFETTO__PROTOS__COMMIT_DATA_REQUEST__INIT;
    Perfetto__Protos__CommitDataRequest__ChunksToMove mv = PERFETTO__PROTOS__COMMIT_DATA_REQUEST__CHUNKS_TO_MOVE__INIT;
    Perfetto__Protos__CommitDataRequest__ChunksToMove *mvp = &mv;
    mv.has_page = mv.has_chunk = mv.has_target_buffer = mv.has_data = mv.has_chunk_incomplete = 1;
    mv.target_buffer = x.target;
    mv.data.data = chunk;
    mv.data.len = sizeof chunk - 8; /* Div1 chunk of a 4 KiB page: 4088 bytes */
    mv.chunk_incomplete = 1;
    rq.n_chunks_to_move = 1;
    rq.chunks_to_move = &mvp;
    assert_int_equal(ts_prod_call(&x.p, TS_P_COMMIT, &rq.base, NULL), 1);
    fx_disable(&x);
    struct ts_trace t = {0};
    assert_int_equal(ts_cons_read(&x.c, &t, 5000), 0);
    uint64_t seqs[64];
    size_t n = producer_seqs(&t, seqs, 64, NULL);
    assert_int_equal(n, 31);
    size_t got700 = 0, got701 = 0;
    for (size_t i = 0; i < n; i++) {
        got700 += seqs[i] == 700;
        got701 += seqs[i] == 701;
    }
    assert_int_equal(got700, 1);
    assert_int_equal(got701, 0);
    /* TCP peers have no pid: the trusted slice has uid and sequence only */
    for (size_t i = 0; i < t.n; i++)
        if (t.pk[i].trusted)
            assert_false(ts_pkt_has(t.pk[i].trusted, t.pk[i].trusted_len, 79));
    ts_trace_free(&t);
    fx_free(&x);
}

/* ------------------------------------------------------------ connection setup */

static void test_initialize_connection_rules(void **state)
{
    (void)state;
    struct ts_env e;
    assert_int_equal(ts_env_init(&e), 0);
    struct ts_raw r;
    assert_int_equal(ts_raw_open(&e, &r, 1, 0), 0);
    assert_int_equal(ts_raw_bind(&e, &r, 1, "ProducerPort", NULL), 0);
    struct ts_frame f;
    /* any other method first: rejected */
    Perfetto__Protos__RegisterDataSourceRequest rd = PERFETTO__PROTOS__REGISTER_DATA_SOURCE_REQUEST__INIT;
    assert_int_equal(ts_raw_invoke(&e, &r, 2, 1, TS_P_REG_DS, &rd.base, 0, -1), 0);
    assert_true(ts_raw_wait(&e, &r, 2, &f, 5000));
    assert_false(f.fi.success);
    ts_frame_free(&f);
    Perfetto__Protos__InitializeConnectionRequest ic = PERFETTO__PROTOS__INITIALIZE_CONNECTION_REQUEST__INIT;
    ic.producer_name = (char *)"p";
    assert_int_equal(ts_raw_invoke(&e, &r, 3, 1, TS_P_INIT, &ic.base, 0, -1), 0);
    assert_true(ts_raw_wait(&e, &r, 3, &f, 5000));
    assert_true(f.fi.success);
    ts_frame_free(&f);
    /* a second InitializeConnection: rejected */
    assert_int_equal(ts_raw_invoke(&e, &r, 4, 1, TS_P_INIT, &ic.base, 0, -1), 0);
    assert_true(ts_raw_wait(&e, &r, 4, &f, 5000));
    assert_false(f.fi.success);
    ts_frame_free(&f);
    /* Sync answers */
    assert_int_equal(ts_raw_invoke(&e, &r, 5, 1, TS_P_SYNC, NULL, 0, -1), 0);
    assert_true(ts_raw_wait(&e, &r, 5, &f, 5000));
    assert_true(f.fi.success);
    ts_frame_free(&f);
    /* unknown method id: success=false */
    assert_int_equal(ts_raw_invoke_bytes(&e, &r, 6, 1, 13, NULL, 0, 0, -1), 0);
    assert_true(ts_raw_wait(&e, &r, 6, &f, 5000));
    assert_false(f.fi.success);
    ts_frame_free(&f);
    ts_raw_close(&r);
    ts_env_free(&e);
}

static size_t smb_size_for(uint32_t size_hint, uint32_t page_hint, size_t *page)
{
    struct fx x;
    struct ts_prod_opts po;
    default_prod(&po);
    po.size_hint = size_hint;
    po.page_hint = page_hint;
    struct ts_cfg cfg;
    ts_cfg_init(&cfg, 64, 0, "test.ds", 0);
    fx_start(&x, &po, &cfg, -1);
    size_t sz = x.p.map_size;
    *page = x.p.page_size;
    fx_free(&x);
    return sz;
}

static void test_smb_geometry(void **state)
{
    (void)state;
    size_t page;
    assert_int_equal(smb_size_for(0, 0, &page), 256 * 1024);
    assert_int_equal(page, 4096);
    assert_int_equal(smb_size_for(65536, 8192, &page), 65536);
    assert_int_equal(page, 8192);
    assert_int_equal(smb_size_for(65536, 12288, &page), 256 * 1024); /* bad page: both defaults */
    assert_int_equal(page, 4096);
    assert_int_equal(smb_size_for(64u << 20, 32768, &page), 32u << 20); /* clamped to 32 MiB */
    assert_int_equal(page, 32768);
    assert_int_equal(smb_size_for(10000, 4096, &page), 256 * 1024); /* not a page multiple */
}

/* Descriptors of this process (the service runs in it) open on a "perfetto_shmem" memfd. */
static int count_memfd_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    assert_non_null(d);
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        char path[300], target[256];
        snprintf(path, sizeof path, "/proc/self/fd/%s", de->d_name);
        ssize_t l = readlink(path, target, sizeof target - 1);
        if (l > 0) {
            target[l] = 0;
            n += strstr(target, "memfd:perfetto_shmem") != NULL;
        }
    }
    closedir(d);
    return n;
}

/* Whether a "perfetto_shmem" memfd is mapped in this process. */
static bool memfd_mapped(void)
{
    FILE *f = fopen("/proc/self/maps", "r");
    assert_non_null(f);
    char line[512];
    bool found = false;
    while (!found && fgets(line, sizeof line, f))
        found = strstr(line, "memfd:perfetto_shmem") != NULL;
    fclose(f);
    return found;
}

static void test_producer_provided_smb(void **state)
{
    (void)state;
    for (int sealed = 0; sealed <= 1; sealed++) {
        struct ts_env e;
        assert_int_equal(ts_env_init(&e), 0);
        int mfd = memfd_create("perfetto_shmem", MFD_CLOEXEC | MFD_ALLOW_SEALING);
        assert_true(mfd >= 0);
        assert_int_equal(ftruncate(mfd, 65536), 0);
        if (sealed)
            assert_int_equal(fcntl(mfd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL), 0);
        struct ts_raw r;
        assert_int_equal(ts_raw_open(&e, &r, 1, 0), 0);
        assert_int_equal(ts_raw_bind(&e, &r, 1, "ProducerPort", NULL), 0);
        Perfetto__Protos__InitializeConnectionRequest ic = PERFETTO__PROTOS__INITIALIZE_CONNECTION_REQUEST__INIT;
        ic.producer_name = (char *)"own_smb";
        ic.has_producer_provided_shmem = 1;
        ic.producer_provided_shmem = 1;
        ic.has_shared_memory_page_size_hint_bytes = 1;
        ic.shared_memory_page_size_hint_bytes = 4096;
        assert_int_equal(ts_raw_invoke(&e, &r, 2, 1, TS_P_INIT, &ic.base, 0, mfd), 0);
        struct ts_frame f;
        assert_true(ts_raw_wait(&e, &r, 2, &f, 5000));
        Perfetto__Protos__InitializeConnectionResponse *resp =
            perfetto__protos__initialize_connection_response__unpack(NULL, f.fi.payload_len, f.fi.payload);
        assert_non_null(resp);
        assert_int_equal(resp->using_shmem_provided_by_producer, sealed);
        assert_true(resp->direct_smb_patching_supported);
        perfetto__protos__initialize_connection_response__free_unpacked(resp, NULL);
        ts_frame_free(&f);
        if (sealed) {
            /* adopted: the service keeps the mapping but no descriptor (one fd per producer, not two) */
            close(mfd);
            mfd = -1;
            assert_int_equal(count_memfd_fds(), 0);
            assert_true(memfd_mapped());
        }
        assert_int_equal(ts_raw_invoke(&e, &r, 3, 1, TS_P_ASYNC, NULL, 0, -1), 0);
        Perfetto__Protos__DataSourceDescriptor d = PERFETTO__PROTOS__DATA_SOURCE_DESCRIPTOR__INIT;
        d.name = (char *)"test.ds";
        Perfetto__Protos__RegisterDataSourceRequest rd = PERFETTO__PROTOS__REGISTER_DATA_SOURCE_REQUEST__INIT;
        rd.data_source_descriptor = &d;
        assert_int_equal(ts_raw_invoke(&e, &r, 4, 1, TS_P_REG_DS, &rd.base, 0, -1), 0);
        assert_true(ts_raw_wait(&e, &r, 4, &f, 5000));
        ts_frame_free(&f);
        struct ts_cons c;
        assert_int_equal(ts_cons_connect(&e, &c), 0);
        struct ts_cfg cfg;
        ts_cfg_init(&cfg, 64, 0, "test.ds", 0);
        assert_true(ts_cons_enable(&c, &cfg.tc, -1) != 0);
        assert_true(ts_raw_wait(&e, &r, 3, &f, 5000));
        Perfetto__Protos__GetAsyncCommandResponse *cmd =
            perfetto__protos__get_async_command_response__unpack(NULL, f.fi.payload_len, f.fi.payload);
        assert_non_null(cmd);
        assert_int_equal(cmd->cmd_case, PERFETTO__PROTOS__GET_ASYNC_COMMAND_RESPONSE__CMD_SETUP_TRACING);
        if (sealed) {
            /* adopted: SetupTracing with no fields and no fd */
            assert_false(cmd->setup_tracing->has_shared_buffer_page_size_kb);
            assert_int_equal(f.fd, -1);
        } else {
            assert_true(cmd->setup_tracing->has_shared_buffer_page_size_kb);
            assert_true(f.fd >= 0);
        }
        perfetto__protos__get_async_command_response__free_unpacked(cmd, NULL);
        ts_frame_free(&f);
        ts_cons_close(&c);
        ts_raw_close(&r);
        if (mfd >= 0)
            close(mfd);
        ts_env_free(&e);
    }
}

/* Producers come and go in any order: the list stays consistent (doubly linked), every live
 * producer is found by its id through the index, a gone one is not, and ids stay unique. */
static void test_producer_index(void **state)
{
    (void)state;
    struct ts_env e;
    assert_int_equal(ts_env_init(&e), 0);
    enum { N = 9 };
    struct ts_prod p[N];
    bool live[N];
    struct ts_prod_opts po;
    memset(&po, 0, sizeof po);
    po.ds_name = "";
    char names[N][16];
    for (int i = 0; i < 6; i++) {
        snprintf(names[i], sizeof names[i], "prod_%d", i);
        po.name = names[i];
        assert_int_equal(ts_prod_connect(&e, &p[i], &po), 0);
        live[i] = true;
    }
    uint16_t gone_ids[3];
    int ng = 0;
    for (int i = 0; i < 6; i += 2) { /* the first, a middle one, the last but one */
        for (tg_svc_producer *x = e.svc->producers; x; x = x->next)
            if (strcmp(x->name, names[i]) == 0)
                gone_ids[ng++] = x->id;
        ts_prod_close(&p[i]);
        live[i] = false;
    }
    assert_int_equal(ng, 3);
    assert_true(ts_wait_svc_count(&e, TS_SVC_PRODUCERS, 3, 5000));
    for (int i = 6; i < N; i++) {
        snprintf(names[i], sizeof names[i], "prod_%d", i);
        po.name = names[i];
        assert_int_equal(ts_prod_connect(&e, &p[i], &po), 0);
        live[i] = true;
    }
    size_t n = 0;
    uint16_t ids[N];
    for (tg_svc_producer *x = e.svc->producers; x; x = x->next) {
        assert_true(x->next == NULL || x->next->prev == x);
        assert_true(x->prev != NULL || e.svc->producers == x);
        assert_ptr_equal(tg_svc_producer_by_id(e.svc, x->id), x);
        for (size_t k = 0; k < n; k++)
            assert_int_not_equal(ids[k], x->id);
        ids[n++] = x->id;
    }
    assert_int_equal(n, 6);
    for (int k = 0; k < ng; k++)
        assert_null(tg_svc_producer_by_id(e.svc, gone_ids[k]));
    for (int i = 0; i < N; i++)
        if (live[i])
            ts_prod_close(&p[i]);
    assert_true(ts_wait_svc_count(&e, TS_SVC_PRODUCERS, 0, 5000));
    assert_null(e.svc->producers);
    ts_env_free(&e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ring_buffer_wrap),
        cmocka_unit_test(test_discard_overflow),
        cmocka_unit_test(test_read_full_buffer),
        cmocka_unit_test(test_packets_larger_than_chunk_and_smb),
        cmocka_unit_test(test_patches),
        cmocka_unit_test(test_producer_dies_mid_chunk),
        cmocka_unit_test(test_consumer_dies_mid_read),
        cmocka_unit_test(test_malformed_commit_data),
        cmocka_unit_test(test_write_into_file),
        cmocka_unit_test(test_output_path_rights),
        cmocka_unit_test(test_emulated_producer),
        cmocka_unit_test(test_initialize_connection_rules),
        cmocka_unit_test(test_smb_geometry),
        cmocka_unit_test(test_producer_provided_smb),
        cmocka_unit_test(test_producer_index),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
