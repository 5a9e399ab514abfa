/* test_trace_buffer_roundtrip.c: packets written with the SMB writer, moved
 * by a minimal "service" (CommitData path: Complete -> BeingRead, copy,
 * BeingRead -> Free; or the emulation path with inline chunk bytes) into a
 * trace buffer, and read back: content, per-writer order and loss reporting.
 * Also replays real Perfetto SDK chunks from shared/interop recordings. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "service/trace_buffer.h"
#include "smb/smb_abi.h"
#include "smb/smb_writer.h"
#include "tracegate/pbwire.h"

#define MAX_WRITERS 16

/* ---- deterministic packet contents ---- */

/* [0..1] writer, [2..5] seq, [6] flags (bit 0: writer reported data lost),
 * [7] zero, then a pattern derived from (writer, seq). */
static void make_packet(uint8_t *b, size_t len, uint16_t writer, uint32_t seq, bool lost)
{
    b[0] = (uint8_t)writer;
    b[1] = (uint8_t)(writer >> 8);
    memcpy(b + 2, &seq, 4);
    b[6] = lost ? 1 : 0;
    b[7] = 0;
    for (size_t i = 8; i < len; i++)
        b[i] = (uint8_t)(seq * 31u + i * 7u + writer);
}

static bool check_packet(const uint8_t *b, size_t len, uint16_t *writer, uint32_t *seq, bool *lost)
{
    if (len < 8)
        return false;
    *writer = (uint16_t)(b[0] | b[1] << 8);
    memcpy(seq, b + 2, 4);
    *lost = b[6] & 1;
    for (size_t i = 8; i < len; i++)
        if (b[i] != (uint8_t)(*seq * 31u + i * 7u + *writer))
            return false;
    return true;
}

/* ---- a minimal service ---- */

struct pending {
    size_t page;
    unsigned chunk;
};

struct svc {
    struct tg_smb smb;
    uint8_t *mem;
    struct tg_trace_buffer *tb;
    struct tg_tb_producer prod;
    bool defer;            /* queue commits instead of moving chunks at once */
    struct pending q[4096];
    size_t nq;
    uint8_t copy[TG_SMB_MAX_PAGE_SIZE];
    unsigned moved;
};

static void move_chunk(struct svc *s, size_t page, unsigned chunk)
{
    unsigned layout;
    assert_int_equal(tg_smb_acquire_chunk_for_reading(&s->smb, page, chunk, &layout), TG_SMB_OK);
    struct tg_smb_chunk_header h;
    long n = tg_smb_copy_chunk(&s->smb, page, layout, chunk, s->copy, sizeof(s->copy), &h);
    assert_true(n > 8);
    int rc = tg_trace_buffer_copy_chunk(s->tb, &s->prod, h.writer_id, h.chunk_id,
                                        (uint16_t)tg_smb_packets_count(h.packets),
                                        (uint8_t)tg_smb_packets_flags(h.packets), true, s->copy + 8, (size_t)n - 8);
    assert_true(rc == TG_TB_COPY_STORED || rc == TG_TB_COPY_DISCARDED);
    assert_int_equal(tg_smb_release_chunk_as_free(&s->smb, page, chunk), TG_SMB_OK);
    s->moved++;
}

static void svc_drain(struct svc *s)
{
    for (size_t i = 0; i < s->nq; i++)
        move_chunk(s, s->q[i].page, s->q[i].chunk);
    s->nq = 0;
}

static void svc_commit(void *ctx, const struct tg_smb_commit *c)
{
    struct svc *s = ctx;
    if (c->chunk_data) { /* emulation: chunk bytes inline, as ChunksToMove.data */
        int rc = tg_trace_buffer_copy_chunk_bytes(s->tb, &s->prod, c->chunk_data, c->chunk_size, true);
        assert_true(rc == TG_TB_COPY_STORED || rc == TG_TB_COPY_DISCARDED);
        s->moved++;
        return;
    }
    if (s->defer) {
        assert_true(s->nq < sizeof(s->q) / sizeof(s->q[0]));
        s->q[s->nq].page = c->page;
        s->q[s->nq].chunk = c->chunk;
        s->nq++;
        return;
    }
    move_chunk(s, c->page, c->chunk);
}

static struct svc *svc_new(size_t pages, size_t page_size, size_t tb_size, enum tg_tb_fill_policy pol)
{
    struct svc *s = calloc(1, sizeof(*s));
    assert_non_null(s);
    void *p = NULL;
    assert_int_equal(posix_memalign(&p, 4096, pages * page_size), 0);
    s->mem = p;
    memset(s->mem, 0, pages * page_size);
    assert_int_equal(tg_smb_init(&s->smb, s->mem, pages * page_size, page_size), TG_SMB_OK);
    s->tb = tg_trace_buffer_new(tb_size, pol);
    assert_non_null(s->tb);
    s->prod.producer_id = 3;
    s->prod.uid = 1234;
    s->prod.pid = 99;
    s->prod.machine_id = 0;
    return s;
}

static void svc_free(struct svc *s)
{
    tg_trace_buffer_free(s->tb);
    free(s->mem);
    free(s);
}

static void writer_init(struct svc *s, struct tg_smb_writer *w, uint16_t id, unsigned layout, bool emulation)
{
    struct tg_smb_writer_config cfg = {
        .smb = &s->smb,
        .writer_id = id,
        .target_buffer = 1,
        .layout = layout,
        .emulation = emulation,
        .commit = svc_commit,
        .commit_ctx = s,
    };
    assert_int_equal(tg_smb_writer_init(w, &cfg), TG_SMB_WRITER_OK);
}

/* ---- the reader side check ---- */

struct checker {
    bool strict;                /* no packet may be missing */
    uint32_t next[MAX_WRITERS]; /* next expected seq per writer */
    bool seen[MAX_WRITERS];
    uint64_t packets, bytes, flagged_after_first;
    uint8_t *flat;
    size_t flat_cap;
};

static void drain_reader(struct svc *s, struct checker *ck)
{
    struct tg_tb_packet pkt;
    struct tg_tb_seq_info info;
    while (tg_trace_buffer_read_packet(s->tb, &pkt, &info)) {
        if (pkt.size > ck->flat_cap) {
            ck->flat = realloc(ck->flat, pkt.size);
            ck->flat_cap = pkt.size;
        }
        assert_int_equal(tg_tb_packet_copy(&pkt, ck->flat, ck->flat_cap), pkt.size);
        uint16_t w = 0;
        uint32_t seq = 0;
        bool lost = false;
        if (!check_packet(ck->flat, pkt.size, &w, &seq, &lost))
            fail_msg("corrupt packet of %zu bytes in %zu slices", pkt.size, pkt.num_slices);
        assert_true(w > 0 && w < MAX_WRITERS);
        assert_int_equal(info.writer_id, w);
        assert_int_equal(info.producer_id, 3);
        assert_int_equal(info.uid, 1234);
        assert_int_equal(info.pid, 99);
        if (!ck->seen[w]) {
            /* the first packet read from a sequence is always marked */
            assert_true(info.previous_packet_dropped);
            if (ck->strict)
                assert_int_equal(seq, 0);
        } else if (seq == ck->next[w]) {
            /* nothing missing: the buffer must not claim a loss, and the
             * writer cannot have lost anything either */
            if (info.previous_packet_dropped)
                fail_msg("writer %u seq %u: spurious previous_packet_dropped", w, seq);
            assert_false(lost);
        } else {
            if (ck->strict || seq < ck->next[w])
                fail_msg("writer %u: got seq %u, expected %u", w, seq, ck->next[w]);
            /* something is missing: somebody must have said so */
            if (!info.previous_packet_dropped && !lost)
                fail_msg("writer %u: seq %u after %u with no loss reported", w, seq, ck->next[w] - 1);
            ck->flagged_after_first++;
        }
        ck->seen[w] = true;
        ck->next[w] = seq + 1;
        ck->packets++;
        ck->bytes += pkt.size;
    }
}

static uint32_t rng_state = 12345;
static uint32_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 17;
    rng_state ^= rng_state << 5;
    return rng_state;
}

/* Writes one packet for writer w; returns the writer result. */
static int put(struct tg_smb_writer *w, uint32_t *seq, size_t len, uint8_t *buf)
{
    bool lost = tg_smb_writer_take_data_lost(w);
    make_packet(buf, len, w->cfg.writer_id, *seq, lost);
    (*seq)++;
    return tg_smb_writer_write_packet(w, buf, len);
}

static void test_many_small_packets(void **state)
{
    (void)state;
    struct svc *s = svc_new(16, 4096, 256 * 1024, TG_TB_RING_BUFFER);
    struct tg_smb_writer w;
    writer_init(s, &w, 1, 0, false);
    struct checker ck = {.strict = true};
    uint8_t buf[256];
    uint32_t seq = 0;
    for (unsigned i = 0; i < 20000; i++) {
        assert_int_equal(put(&w, &seq, 8 + rnd() % 193, buf), TG_SMB_WRITER_OK);
        if (i % 500 == 499)
            drain_reader(s, &ck);
    }
    tg_smb_writer_flush(&w);
    drain_reader(s, &ck);
    assert_int_equal(ck.packets, 20000);
    assert_int_equal(ck.next[1], 20000);
    const struct tg_trace_buffer_stats *st = tg_trace_buffer_stats(s->tb);
    assert_int_equal(st->chunks_overwritten, 0);
    assert_int_equal(st->abi_violations, 0);
    assert_int_equal(st->chunks_written, s->moved);
    assert_int_equal(st->chunks_read, s->moved);
    free(ck.flat);
    svc_free(s);
}

static void test_packets_larger_than_chunk(void **state)
{
    (void)state;
    struct svc *s = svc_new(8, 4096, 1024 * 1024, TG_TB_RING_BUFFER);
    struct tg_smb_writer w;
    writer_init(s, &w, 2, 0, false);
    struct checker ck = {.strict = true};
    static uint8_t buf[20000];
    uint32_t seq = 0;
    for (unsigned i = 0; i < 300; i++) {
        size_t len = (i % 3 == 0) ? 4000 + rnd() % 16000 : 8 + rnd() % 100;
        assert_int_equal(put(&w, &seq, len, buf), TG_SMB_WRITER_OK);
        if (i % 40 == 39)
            drain_reader(s, &ck);
    }
    tg_smb_writer_flush(&w);
    drain_reader(s, &ck);
    assert_int_equal(ck.packets, 300);
    assert_true(tg_trace_buffer_stats(s->tb)->readaheads_succeeded >= 100);
    free(ck.flat);
    svc_free(s);
}

static void test_packet_larger_than_smb(void **state)
{
    (void)state;
    /* 16 KiB SMB, packets of 100 KiB and 1 MiB */
    struct svc *s = svc_new(4, 4096, 4 * 1024 * 1024, TG_TB_RING_BUFFER);
    struct tg_smb_writer w;
    writer_init(s, &w, 3, 0, false);
    struct checker ck = {.strict = true};
    uint8_t *buf = malloc(1 << 20);
    uint32_t seq = 0;
    assert_int_equal(put(&w, &seq, 10, buf), TG_SMB_WRITER_OK);
    assert_int_equal(put(&w, &seq, 100 * 1024, buf), TG_SMB_WRITER_OK);
    assert_int_equal(put(&w, &seq, 20, buf), TG_SMB_WRITER_OK);
    assert_int_equal(put(&w, &seq, 1 << 20, buf), TG_SMB_WRITER_OK);
    assert_int_equal(put(&w, &seq, 30, buf), TG_SMB_WRITER_OK);
    tg_smb_writer_flush(&w);
    struct tg_tb_packet pkt;
    /* peek at the slices of the big one */
    drain_reader(s, &ck);
    assert_int_equal(ck.packets, 5);
    assert_true(s->moved >= (1u << 20) / 4076);
    assert_false(tg_trace_buffer_read_packet(s->tb, &pkt, NULL));
    free(buf);
    free(ck.flat);
    svc_free(s);
}

static void run_interleaved(bool emulation)
{
    struct svc *s = svc_new(32, 4096, 2 * 1024 * 1024, TG_TB_RING_BUFFER);
    enum { NW = 8 };
    struct tg_smb_writer w[NW];
    /* mixed layouts on one SMB: the reader must cope with every one */
    const unsigned layouts[NW] = {1, 1, 2, 3, 4, 5, 1, 3};
    for (int i = 0; i < NW; i++)
        writer_init(s, &w[i], (uint16_t)(i + 1), layouts[i], emulation);
    struct checker ck = {.strict = true};
    static uint8_t buf[40000];
    uint32_t seq[NW] = {0};
    for (unsigned i = 0; i < 6000; i++) {
        int k = (int)(rnd() % NW);
        size_t len = (rnd() % 50 == 0) ? 2000 + rnd() % 30000 : 8 + rnd() % 300;
        assert_int_equal(put(&w[k], &seq[k], len, buf), TG_SMB_WRITER_OK);
        if (i % 700 == 0)
            drain_reader(s, &ck);
    }
    for (int i = 0; i < NW; i++)
        tg_smb_writer_flush(&w[i]);
    drain_reader(s, &ck);
    assert_int_equal(ck.packets, 6000);
    for (int i = 0; i < NW; i++)
        assert_int_equal(ck.next[i + 1], seq[i]);
    if (!emulation) /* every chunk went back to the SMB */
        for (size_t p = 0; p < s->smb.num_pages; p++) {
            uint32_t word = tg_smb_page_header(&s->smb, p);
            for (unsigned c = 0; c < tg_smb_layout_num_chunks(tg_smb_word_layout(word)); c++)
                assert_int_not_equal(tg_smb_word_chunk_state(word, c), TG_SMB_CHUNK_COMPLETE);
        }
    free(ck.flat);
    svc_free(s);
}

static void test_many_writers_interleaved(void **state)
{
    (void)state;
    run_interleaved(false);
}

static void test_many_writers_interleaved_emulation(void **state)
{
    (void)state;
    run_interleaved(true);
}

/* Small ring, lots of data, reads now and then: whatever comes out is in
 * order, and a packet follows missing ones iff it is marked. */
static void test_ring_wrap_loss_reporting(void **state)
{
    (void)state;
    struct svc *s = svc_new(16, 4096, 48 * 1024, TG_TB_RING_BUFFER);
    enum { NW = 4 };
    struct tg_smb_writer w[NW];
    for (int i = 0; i < NW; i++)
        writer_init(s, &w[i], (uint16_t)(i + 1), 0, false);
    struct checker ck = {.strict = false};
    static uint8_t buf[12000];
    uint32_t seq[NW] = {0};
    for (unsigned i = 0; i < 20000; i++) {
        int k = (int)(rnd() % NW);
        size_t len = (rnd() % 20 == 0) ? 1000 + rnd() % 10000 : 8 + rnd() % 400;
        assert_int_equal(put(&w[k], &seq[k], len, buf), TG_SMB_WRITER_OK);
        if (rnd() % 900 == 0)
            drain_reader(s, &ck);
    }
    for (int i = 0; i < NW; i++)
        tg_smb_writer_flush(&w[i]);
    drain_reader(s, &ck);
    const struct tg_trace_buffer_stats *st = tg_trace_buffer_stats(s->tb);
    assert_true(st->chunks_overwritten > 100);
    assert_true(st->write_wrap_count > 50);
    assert_true(ck.flagged_after_first > 0);
    assert_true(ck.packets > 100);
    assert_int_equal(st->abi_violations, 0);
    /* the newest data survives: every writer's last packet was read */
    for (int i = 0; i < NW; i++)
        assert_int_equal(ck.next[i + 1], seq[i]);
    free(ck.flat);
    svc_free(s);
}

static void test_discard_keeps_prefix(void **state)
{
    (void)state;
    struct svc *s = svc_new(16, 4096, 64 * 1024, TG_TB_DISCARD);
    enum { NW = 3 };
    struct tg_smb_writer w[NW];
    for (int i = 0; i < NW; i++)
        writer_init(s, &w[i], (uint16_t)(i + 1), 0, false);
    struct checker ck = {.strict = true}; /* a prefix per writer: no holes */
    static uint8_t buf[6000];
    uint32_t seq[NW] = {0};
    for (unsigned i = 0; i < 3000; i++) {
        int k = (int)(rnd() % NW);
        size_t len = (rnd() % 10 == 0) ? 1000 + rnd() % 5000 : 8 + rnd() % 200;
        assert_int_equal(put(&w[k], &seq[k], len, buf), TG_SMB_WRITER_OK);
    }
    for (int i = 0; i < NW; i++)
        tg_smb_writer_flush(&w[i]);
    drain_reader(s, &ck);
    const struct tg_trace_buffer_stats *st = tg_trace_buffer_stats(s->tb);
    assert_true(st->chunks_discarded > 0);
    assert_int_equal(st->chunks_overwritten, 0);
    assert_true(ck.packets > 50);
    assert_true(ck.packets < 3000);
    free(ck.flat);
    svc_free(s);
}

/* The service lags (commits are queued), so the SMB fills up and the writer
 * drops packets, some of them half written (drop markers). */
static void test_smb_full_drops(void **state)
{
    (void)state;
    struct svc *s = svc_new(4, 4096, 1024 * 1024, TG_TB_RING_BUFFER);
    s->defer = true;
    struct tg_smb_writer w;
    writer_init(s, &w, 5, 0, false);
    struct checker ck = {.strict = false};
    static uint8_t buf[9000];
    uint32_t seq = 0;
    unsigned dropped = 0;
    for (unsigned i = 0; i < 4000; i++) {
        size_t len = (rnd() % 8 == 0) ? 3000 + rnd() % 6000 : 8 + rnd() % 600;
        if (put(&w, &seq, len, buf) == TG_SMB_WRITER_DROPPED)
            dropped++;
        if (rnd() % 25 == 0)
            svc_drain(s);
        if (rnd() % 200 == 0)
            drain_reader(s, &ck);
    }
    /* the last packet may have been dropped: tell the reader via one more */
    put(&w, &seq, 16, buf);
    tg_smb_writer_flush(&w);
    svc_drain(s);
    drain_reader(s, &ck);
    const struct tg_trace_buffer_stats *st = tg_trace_buffer_stats(s->tb);
    assert_true(dropped > 10);
    assert_int_equal(w.stats.packets_dropped, dropped);
    assert_true(st->trace_writer_packet_loss > 0); /* some drops were mid-packet */
    assert_true(st->trace_writer_packet_loss <= dropped);
    assert_int_equal(ck.packets + dropped, seq);
    assert_int_equal(st->abi_violations, 0);
    free(ck.flat);
    svc_free(s);
}

/* ---- replay of real Perfetto SDK chunks (shmem emulation recordings) ---- */

static const char *shared_dir(void)
{
    const char *d = getenv("TG_SHARED_DIR");
#ifdef TG_SHARED_DIR
    if (!d || !*d)
        d = TG_SHARED_DIR;
#endif
    return d;
}

static uint8_t *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc(n > 0 ? (size_t)n : 1);
    if (n <= 0 || fread(b, 1, (size_t)n, f) != (size_t)n) {
        free(b);
        fclose(f);
        return NULL;
    }
    fclose(f);
    *len = (size_t)n;
    return b;
}

/* A field-by-field walk of a message that must end cleanly. */
static bool parses(const uint8_t *p, size_t n)
{
    struct tg_pb_reader r;
    struct tg_pb_field f;
    tg_pb_reader_init(&r, p, n);
    int rc;
    while ((rc = tg_pb_next(&r, &f)) == 1)
        ;
    return rc == 0;
}

struct replay_result {
    unsigned packets, track_events, commits, moves, patches;
};

/* Feeds every CommitData of a recording to a trace buffer. */
static void replay(const uint8_t *rec, size_t rec_len, struct tg_trace_buffer *tb, bool apply_patches,
                   struct replay_result *res)
{
    const struct tg_tb_producer prod = {.producer_id = 1, .uid = 1000, .pid = 1, .machine_id = 0};
    /* client->service bytes, concatenated */
    uint8_t *c2s = malloc(rec_len);
    size_t n = 0;
    for (size_t i = 0; i + 6 <= rec_len;) {
        uint32_t len = (uint32_t)rec[i + 2] | (uint32_t)rec[i + 3] << 8 | (uint32_t)rec[i + 4] << 16 |
                       (uint32_t)rec[i + 5] << 24;
        assert_true(i + 6 + len <= rec_len);
        if (rec[i] == 0) {
            memcpy(c2s + n, rec + i + 6, len);
            n += len;
        }
        i += 6 + len;
    }
    for (size_t i = 0; i + 4 <= n;) {
        uint32_t flen = (uint32_t)c2s[i] | (uint32_t)c2s[i + 1] << 8 | (uint32_t)c2s[i + 2] << 16 |
                        (uint32_t)c2s[i + 3] << 24;
        assert_true(i + 4 + flen <= n);
        struct tg_pb_reader fr;
        struct tg_pb_field f;
        tg_pb_reader_init(&fr, c2s + i + 4, flen);
        while (tg_pb_next(&fr, &f) == 1) {
            if (f.number != 5 || f.wire != TG_PB_LEN) /* IPCFrame.msg_invoke_method */
                continue;
            struct tg_pb_reader ir;
            struct tg_pb_field g;
            uint64_t method = 0;
            const uint8_t *args = NULL;
            size_t args_len = 0;
            tg_pb_reader_init(&ir, f.data, f.len);
            while (tg_pb_next(&ir, &g) == 1) {
                if (g.number == 2)
                    method = g.value;
                if (g.number == 3 && g.wire == TG_PB_LEN) {
                    args = g.data;
                    args_len = g.len;
                }
            }
            if (method != 4 || !args) /* ProducerPort.CommitData */
                continue;
            res->commits++;
            /* moves first, then patches, as traced does */
            for (int pass = 0; pass < 2; pass++) {
                struct tg_pb_reader cr;
                struct tg_pb_field h;
                tg_pb_reader_init(&cr, args, args_len);
                while (tg_pb_next(&cr, &h) == 1) {
                    if (pass == 0 && h.number == 1) { /* ChunksToMove */
                        struct tg_pb_reader mr;
                        struct tg_pb_field m;
                        const uint8_t *data = NULL;
                        size_t dlen = 0;
                        bool incomplete = false;
                        tg_pb_reader_init(&mr, h.data, h.len);
                        while (tg_pb_next(&mr, &m) == 1) {
                            if (m.number == 4) {
                                data = m.data;
                                dlen = m.len;
                            }
                            if (m.number == 5)
                                incomplete = m.value != 0;
                        }
                        assert_non_null(data);
                        assert_int_equal(tg_trace_buffer_copy_chunk_bytes(tb, &prod, data, dlen, !incomplete),
                                         TG_TB_COPY_STORED);
                        res->moves++;
                    } else if (pass == 1 && h.number == 2 && apply_patches) { /* ChunkToPatch */
                        struct tg_pb_reader pr;
                        struct tg_pb_field m;
                        uint32_t writer = 0, chunk_id = 0;
                        bool more = false;
                        struct tg_tb_patch patches[16];
                        size_t np = 0;
                        tg_pb_reader_init(&pr, h.data, h.len);
                        while (tg_pb_next(&pr, &m) == 1) {
                            if (m.number == 2)
                                writer = (uint32_t)m.value;
                            if (m.number == 3)
                                chunk_id = (uint32_t)m.value;
                            if (m.number == 5)
                                more = m.value != 0;
                            if (m.number == 4 && np < 16) {
                                struct tg_pb_reader qr;
                                struct tg_pb_field q;
                                tg_pb_reader_init(&qr, m.data, m.len);
                                while (tg_pb_next(&qr, &q) == 1) {
                                    if (q.number == 1)
                                        patches[np].offset = (uint32_t)q.value;
                                    if (q.number == 2 && q.len == 4)
                                        memcpy(patches[np].data, q.data, 4);
                                }
                                np++;
                            }
                        }
                        assert_int_equal(
                            tg_trace_buffer_apply_patches(tb, 1, (uint16_t)writer, chunk_id, patches, np, more), 0);
                        res->patches += (unsigned)np;
                    }
                }
            }
        }
        i += 4 + flen;
    }
    free(c2s);

    struct tg_tb_packet pkt;
    struct tg_tb_seq_info info;
    uint8_t *flat = malloc(1 << 16);
    while (tg_trace_buffer_read_packet(tb, &pkt, &info)) {
        assert_true(pkt.size <= (1 << 16));
        tg_tb_packet_copy(&pkt, flat, 1 << 16);
        assert_int_equal(info.previous_packet_dropped, res->packets == 0);
        if (!parses(flat, pkt.size))
            fail_msg("packet %u (%zu bytes, %zu slices) is not a valid TracePacket", res->packets, pkt.size,
                     pkt.num_slices);
        struct tg_pb_reader r;
        struct tg_pb_field f;
        tg_pb_reader_init(&r, flat, pkt.size);
        while (tg_pb_next(&r, &f) == 1)
            if (f.number == 11 && f.wire == TG_PB_LEN) { /* TracePacket.track_event */
                assert_true(parses(f.data, f.len));
                res->track_events++;
            }
        res->packets++;
    }
    free(flat);
}

static void test_replay_sdk_recordings(void **state)
{
    (void)state;
    const char *dir = shared_dir();
    if (!dir)
        skip();
    /* Reference numbers from an independent reassembly of the same bytes. */
    const struct {
        const char *name;
        unsigned moves, patches, packets, track_events;
    } recs[] = {
        {"producer_tcp_emulated", 6, 4, 904, 900},
        {"relay_producer", 6, 5, 904, 900}, /* one ChunkToPatch holds 2 patches */
    };
    for (size_t k = 0; k < sizeof(recs) / sizeof(recs[0]); k++) {
        char path[4096];
        snprintf(path, sizeof(path), "%s/interop/recordings/%s.bin", dir, recs[k].name);
        size_t len = 0;
        uint8_t *rec = slurp(path, &len);
        if (!rec) {
            print_message("no recording at %s\n", path);
            skip();
        }
        struct tg_trace_buffer *tb = tg_trace_buffer_new(1024 * 1024, TG_TB_RING_BUFFER);
        struct replay_result res = {0};
        replay(rec, len, tb, true, &res);
        assert_int_equal(res.moves, recs[k].moves);
        assert_int_equal(res.patches, recs[k].patches);
        assert_int_equal(res.packets, recs[k].packets);
        assert_int_equal(res.track_events, recs[k].track_events);
        const struct tg_trace_buffer_stats *st = tg_trace_buffer_stats(tb);
        assert_int_equal(st->abi_violations, 0);
        assert_int_equal(st->trace_writer_packet_loss, 0);
        assert_int_equal(st->patches_succeeded, recs[k].patches);
        assert_int_equal(st->patches_failed, 0);
        assert_true(st->readaheads_succeeded >= 4);
        tg_trace_buffer_free(tb);

        /* Without the patches the first chunk stays NeedsPatching: nothing of
         * that sequence is readable. */
        tb = tg_trace_buffer_new(1024 * 1024, TG_TB_RING_BUFFER);
        memset(&res, 0, sizeof(res));
        replay(rec, len, tb, false, &res);
        assert_int_equal(res.moves, recs[k].moves);
        assert_int_equal(res.packets, 0);
        tg_trace_buffer_free(tb);
        free(rec);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_many_small_packets),
        cmocka_unit_test(test_packets_larger_than_chunk),
        cmocka_unit_test(test_packet_larger_than_smb),
        cmocka_unit_test(test_many_writers_interleaved),
        cmocka_unit_test(test_many_writers_interleaved_emulation),
        cmocka_unit_test(test_ring_wrap_loss_reporting),
        cmocka_unit_test(test_discard_keeps_prefix),
        cmocka_unit_test(test_smb_full_drops),
        cmocka_unit_test(test_replay_sdk_recordings),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
