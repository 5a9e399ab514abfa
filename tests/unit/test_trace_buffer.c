/* test_trace_buffer.c: the service's trace buffer fed with hand-built chunks:
 * per-sequence order, reassembly, gaps, padding and drop markers, ring wrap,
 * discard policy, patches, scraping re-copies and input validation. */
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

struct pl {
    uint8_t buf[TG_TB_MAX_PAYLOAD];
    size_t len;
    uint16_t count;
};

static void pl_reset(struct pl *p)
{
    memset(p->buf, 0, sizeof(p->buf));
    p->len = 0;
    p->count = 0;
}

/* Fragment with a 4-byte redundant varint header. */
static void pl_add(struct pl *p, const void *data, size_t n)
{
    uint32_t v = (uint32_t)n;
    p->buf[p->len++] = (uint8_t)(0x80 | (v & 0x7f));
    p->buf[p->len++] = (uint8_t)(0x80 | ((v >> 7) & 0x7f));
    p->buf[p->len++] = (uint8_t)(0x80 | ((v >> 14) & 0x7f));
    p->buf[p->len++] = (uint8_t)((v >> 21) & 0x7f);
    memcpy(p->buf + p->len, data, n);
    p->len += n;
    p->count++;
}

static void pl_str(struct pl *p, const char *s)
{
    pl_add(p, s, strlen(s));
}

/* One-byte zero: a padding packet. */
static void pl_pad(struct pl *p)
{
    p->buf[p->len++] = 0;
    p->count++;
}

static void pl_drop(struct pl *p)
{
    p->buf[p->len++] = 0xff;
    p->buf[p->len++] = 0xff;
    p->buf[p->len++] = 0xff;
    p->buf[p->len++] = 0x7f;
    p->count++;
}

/* Copies p as chunk {prod, writer, id}; payload_len = max(p->len, size). */
static int pl_copy(struct tg_trace_buffer *tb, const struct tg_tb_producer *prod, uint16_t writer,
                          uint32_t id, uint8_t flags, bool complete, const struct pl *p, size_t size)
{
    return tg_trace_buffer_copy_chunk(tb, prod, writer, id, p->count, flags, complete, p->buf,
                                      size > p->len ? size : p->len);
}

/* Reads the next packet into out as a NUL-terminated string. */
static bool read_str(struct tg_trace_buffer *tb, char *out, size_t cap, struct tg_tb_seq_info *info)
{
    struct tg_tb_packet pkt;
    if (!tg_trace_buffer_read_packet(tb, &pkt, info))
        return false;
    if (pkt.size + 1 > cap)
        return false;
    tg_tb_packet_copy(&pkt, out, cap);
    out[pkt.size] = 0;
    return true;
}

#define FIRST TG_SMB_CHUNK_FIRST_CONTINUES
#define LAST TG_SMB_CHUNK_LAST_CONTINUES
#define PATCH TG_SMB_CHUNK_NEEDS_PATCHING

static const struct tg_tb_producer P1 = {.producer_id = 1, .uid = 1000, .pid = 11, .machine_id = 0};
static const struct tg_tb_producer P2 = {.producer_id = 2, .uid = 2000, .pid = 22, .machine_id = 5};

/* Per-test state: a buffer and a scratch payload. */
struct t {
    struct tg_trace_buffer *tb;
    struct pl p;
    char s[70000];
    struct tg_tb_seq_info info;
};

static struct t *t_new(size_t size, enum tg_tb_fill_policy pol)
{
    struct t *t = calloc(1, sizeof(*t));
    assert_non_null(t);
    t->tb = tg_trace_buffer_new(size, pol);
    assert_non_null(t->tb);
    return t;
}

static void t_free(struct t *t)
{
    tg_trace_buffer_free(t->tb);
    free(t);
}

/* Reads one packet and checks its text and previous_packet_dropped. */
static void expect(struct t *t, const char *want, bool dropped)
{
    memset(&t->info, 0, sizeof(t->info));
    if (!read_str(t->tb, t->s, sizeof(t->s), &t->info))
        fail_msg("expected packet \"%s\", got none", want);
    assert_string_equal(t->s, want);
    if (t->info.previous_packet_dropped != dropped)
        fail_msg("packet \"%s\": previous_packet_dropped=%d, want %d", want, t->info.previous_packet_dropped,
                 dropped);
}

static void expect_none(struct t *t)
{
    if (read_str(t->tb, t->s, sizeof(t->s), NULL))
        fail_msg("expected no packet, got \"%s\"", t->s);
}

static const struct tg_trace_buffer_stats *st(struct t *t)
{
    return tg_trace_buffer_stats(t->tb);
}

static void test_new_checks(void **state)
{
    (void)state;
    assert_null(tg_trace_buffer_new(100, TG_TB_RING_BUFFER));
    assert_null(tg_trace_buffer_new(4096, (enum tg_tb_fill_policy)0));
    assert_null(tg_trace_buffer_new(4096, (enum tg_tb_fill_policy)3));
    struct tg_trace_buffer *tb = tg_trace_buffer_new(4099, TG_TB_DISCARD);
    assert_non_null(tb);
    assert_int_equal(tg_trace_buffer_capacity(tb), 4096);
    assert_int_equal(tg_trace_buffer_policy(tb), TG_TB_DISCARD);
    assert_int_equal(tg_trace_buffer_stats(tb)->buffer_size, 4096);
    struct tg_tb_packet pkt;
    assert_false(tg_trace_buffer_read_packet(tb, &pkt, NULL));
    tg_trace_buffer_free(tb);
    tg_trace_buffer_free(NULL);
}

static void test_simple_read_once(void **state)
{
    (void)state;
    struct t *t = t_new(65536, TG_TB_RING_BUFFER);
    pl_reset(&t->p);
    pl_str(&t->p, "alpha");
    pl_str(&t->p, "beta");
    pl_str(&t->p, "gamma");
    assert_int_equal(pl_copy(t->tb, &P1, 7, 0, 0, true, &t->p, 300), TG_TB_COPY_STORED);
    expect(t, "alpha", true); /* first packet of a sequence is marked, as traced does */
    assert_int_equal(t->info.producer_id, 1);
    assert_int_equal(t->info.uid, 1000);
    assert_int_equal(t->info.pid, 11);
    assert_int_equal(t->info.machine_id, 0);
    assert_int_equal(t->info.writer_id, 7);
    expect(t, "beta", false);
    expect(t, "gamma", false);
    expect_none(t);
    expect_none(t);
    assert_int_equal(st(t)->chunks_written, 1);
    assert_int_equal(st(t)->bytes_written, 308);
    assert_int_equal(st(t)->chunks_read, 1);
    assert_int_equal(st(t)->bytes_read, 308);
    /* the next chunk continues the sequence without a loss */
    pl_reset(&t->p);
    pl_str(&t->p, "delta");
    assert_int_equal(pl_copy(t->tb, &P1, 7, 1, 0, true, &t->p, 300), TG_TB_COPY_STORED);
    expect(t, "delta", false);
    expect_none(t);
    /* the packet struct itself */
    pl_reset(&t->p);
    pl_str(&t->p, "eps");
    assert_int_equal(pl_copy(t->tb, &P1, 7, 2, 0, true, &t->p, 300), TG_TB_COPY_STORED);
    struct tg_tb_packet pkt;
    assert_true(tg_trace_buffer_read_packet(t->tb, &pkt, NULL));
    assert_int_equal(pkt.num_slices, 1);
    assert_int_equal(pkt.size, 3);
    char small[2];
    assert_int_equal(tg_tb_packet_copy(&pkt, small, sizeof(small)), 0);
    t_free(t);
}

static void test_sequences_and_identity(void **state)
{
    (void)state;
    struct t *t = t_new(65536, TG_TB_RING_BUFFER);
    char buf[32];
    /* interleave 3 sequences: (P1,w1), (P1,w2), (P2,w1) */
    for (uint32_t id = 0; id < 4; id++) {
        const struct {
            const struct tg_tb_producer *p;
            uint16_t w;
        } seqs[3] = {{&P1, 1}, {&P1, 2}, {&P2, 1}};
        for (int s = 0; s < 3; s++) {
            pl_reset(&t->p);
            for (int k = 0; k < 2; k++) {
                snprintf(buf, sizeof(buf), "p%u-w%u-c%u-%d", seqs[s].p->producer_id, seqs[s].w, id, k);
                pl_str(&t->p, buf);
            }
            assert_int_equal(pl_copy(t->tb, seqs[s].p, seqs[s].w, id, 0, true, &t->p, 256), TG_TB_COPY_STORED);
        }
    }
    unsigned next[3] = {0};
    unsigned total = 0;
    while (read_str(t->tb, t->s, sizeof(t->s), &t->info)) {
        int s = t->info.producer_id == 2 ? 2 : t->info.writer_id - 1;
        snprintf(buf, sizeof(buf), "p%u-w%u-c%u-%u", t->info.producer_id, t->info.writer_id, next[s] / 2,
                 next[s] % 2);
        assert_string_equal(t->s, buf);
        assert_int_equal(t->info.previous_packet_dropped, next[s] == 0);
        if (s == 2) {
            assert_int_equal(t->info.uid, 2000);
            assert_int_equal(t->info.pid, 22);
            assert_int_equal(t->info.machine_id, 5);
        } else {
            assert_int_equal(t->info.uid, 1000);
        }
        next[s]++;
        total++;
    }
    assert_int_equal(total, 24);
    t_free(t);
}

static void test_reassembly(void **state)
{
    (void)state;
    struct t *t = t_new(65536, TG_TB_RING_BUFFER);
    pl_reset(&t->p);
    pl_str(&t->p, "A");
    pl_str(&t->p, "B1-");
    assert_int_equal(pl_copy(t->tb, &P1, 1, 0, LAST, true, &t->p, 200), TG_TB_COPY_STORED);
    expect(t, "A", true);
    expect_none(t); /* B waits for its continuation */
    assert_true(st(t)->readaheads_failed >= 1);
    pl_reset(&t->p);
    pl_str(&t->p, "B2-");
    assert_int_equal(pl_copy(t->tb, &P1, 1, 1, FIRST | LAST, true, &t->p, 200), TG_TB_COPY_STORED);
    expect_none(t);
    pl_reset(&t->p);
    pl_str(&t->p, "B3");
    pl_str(&t->p, "C");
    assert_int_equal(pl_copy(t->tb, &P1, 1, 2, FIRST, true, &t->p, 200), TG_TB_COPY_STORED);
    struct tg_tb_packet pkt;
    assert_true(tg_trace_buffer_read_packet(t->tb, &pkt, &t->info));
    assert_int_equal(pkt.num_slices, 3);
    assert_int_equal(pkt.size, 8);
    assert_int_equal(tg_tb_packet_copy(&pkt, t->s, sizeof(t->s)), 8);
    assert_memory_equal(t->s, "B1-B2-B3", 8);
    assert_false(t->info.previous_packet_dropped);
    expect(t, "C", false);
    expect_none(t);
    assert_int_equal(st(t)->readaheads_succeeded, 1);
    assert_int_equal(st(t)->chunks_read, 3);
    t_free(t);
}

static void test_out_of_order_commit(void **state)
{
    (void)state;
    struct t *t = t_new(65536, TG_TB_RING_BUFFER);
    /* ids 10..13, one packet spanning 11..12, committed as 12, 10, 13, 11 */
    uint32_t order[4] = {12, 10, 13, 11};
    for (int i = 0; i < 4; i++) {
        pl_reset(&t->p);
        uint8_t flags = 0;
        switch (order[i]) {
        case 10:
            pl_str(&t->p, "p10");
            break;
        case 11:
            pl_str(&t->p, "p11");
            pl_str(&t->p, "span-a|");
            flags = LAST;
            break;
        case 12:
            pl_str(&t->p, "span-b");
            pl_str(&t->p, "p12");
            flags = FIRST;
            break;
        case 13:
            pl_str(&t->p, "p13");
            break;
        }
        assert_int_equal(pl_copy(t->tb, &P1, 3, order[i], flags, true, &t->p, 128), TG_TB_COPY_STORED);
    }
    assert_int_equal(st(t)->chunks_committed_out_of_order, 2);
    expect(t, "p10", true);
    expect(t, "p11", false);
    expect(t, "span-a|span-b", false);
    expect(t, "p12", false);
    expect(t, "p13", false);
    expect_none(t);
    t_free(t);
}

static void test_chunk_id_wrap(void **state)
{
    (void)state;
    struct t *t = t_new(65536, TG_TB_RING_BUFFER);
    const uint32_t ids[4] = {0xFFFFFFFEu, 0xFFFFFFFFu, 0u, 1u};
    const int order[4] = {2, 3, 0, 1};
    for (int i = 0; i < 4; i++) {
        int k = order[i];
        pl_reset(&t->p);
        uint8_t flags = 0;
        char b[16];
        snprintf(b, sizeof(b), "n%d", k);
        if (k == 2) { /* id 0 continues the packet from id 0xFFFFFFFF */
            pl_str(&t->p, "-tail");
            flags |= FIRST;
        }
        pl_str(&t->p, b);
        if (k == 1) {
            pl_str(&t->p, "head");
            flags |= LAST;
        }
        assert_int_equal(pl_copy(t->tb, &P1, 1, ids[k], flags, true, &t->p, 64), TG_TB_COPY_STORED);
    }
    expect(t, "n0", true);
    expect(t, "n1", false);
    expect(t, "head-tail", false);
    expect(t, "n2", false);
    expect(t, "n3", false);
    expect_none(t);
    t_free(t);
}

static void test_gap_drops_broken_packet(void **state)
{
    (void)state;
    struct t *t = t_new(65536, TG_TB_RING_BUFFER);
    pl_reset(&t->p);
    pl_str(&t->p, "A");
    pl_str(&t->p, "B-start");
    assert_int_equal(pl_copy(t->tb, &P1, 1, 0, LAST, true, &t->p, 100), TG_TB_COPY_STORED);
    /* id 1 never comes; id 2 starts with the tail of some other packet */
    pl_reset(&t->p);
    pl_str(&t->p, "orphan-tail");
    pl_str(&t->p, "C");
    assert_int_equal(pl_copy(t->tb, &P1, 1, 2, FIRST, true, &t->p, 100), TG_TB_COPY_STORED);
    pl_reset(&t->p);
    pl_str(&t->p, "D");
    assert_int_equal(pl_copy(t->tb, &P1, 1, 3, 0, true, &t->p, 100), TG_TB_COPY_STORED);
    expect(t, "A", true);
    expect(t, "C", true); /* B and the orphan tail are gone */
    expect(t, "D", false);
    expect_none(t);

    /* a plain gap between whole packets also marks the next packet */
    pl_reset(&t->p);
    pl_str(&t->p, "F");
    assert_int_equal(pl_copy(t->tb, &P1, 1, 5, 0, true, &t->p, 100), TG_TB_COPY_STORED);
    expect(t, "F", true);
    /* and the late id 4 is refused: the reader is past it */
    pl_reset(&t->p);
    pl_str(&t->p, "E");
    assert_int_equal(pl_copy(t->tb, &P1, 1, 4, 0, true, &t->p, 100), TG_TB_COPY_DISCARDED);
    expect_none(t);

    /* continuation missing its FIRST flag breaks the chain too */
    pl_reset(&t->p);
    pl_str(&t->p, "G-start");
    assert_int_equal(pl_copy(t->tb, &P1, 1, 6, LAST, true, &t->p, 100), TG_TB_COPY_STORED);
    pl_reset(&t->p);
    pl_str(&t->p, "H");
    assert_int_equal(pl_copy(t->tb, &P1, 1, 7, 0, true, &t->p, 100), TG_TB_COPY_STORED);
    expect(t, "H", true);
    t_free(t);
}

static void test_padding_and_drop_markers(void **state)
{
    (void)state;
    struct t *t = t_new(65536, TG_TB_RING_BUFFER);
    pl_reset(&t->p);
    pl_pad(&t->p);
    pl_str(&t->p, "A");
    pl_pad(&t->p);
    pl_str(&t->p, "B");
    pl_drop(&t->p); /* writer gave up the packet after B */
    assert_int_equal(pl_copy(t->tb, &P1, 1, 0, 0, true, &t->p, 100), TG_TB_COPY_STORED);
    pl_reset(&t->p);
    pl_str(&t->p, "C");
    pl_pad(&t->p);
    assert_int_equal(pl_copy(t->tb, &P1, 1, 1, 0, true, &t->p, 100), TG_TB_COPY_STORED);
    expect(t, "A", true);
    expect(t, "B", false);
    expect(t, "C", true);
    expect_none(t);
    assert_int_equal(st(t)->trace_writer_packet_loss, 1);

    /* drop marker as the continuation of a packet spanning chunks */
    pl_reset(&t->p);
    pl_str(&t->p, "D");
    pl_str(&t->p, "E-start");
    assert_int_equal(pl_copy(t->tb, &P1, 1, 2, LAST, true, &t->p, 100), TG_TB_COPY_STORED);
    pl_reset(&t->p);
    pl_drop(&t->p);
    assert_int_equal(pl_copy(t->tb, &P1, 1, 3, FIRST, true, &t->p, 100), TG_TB_COPY_STORED);
    pl_reset(&t->p);
    pl_str(&t->p, "F");
    assert_int_equal(pl_copy(t->tb, &P1, 1, 4, 0, true, &t->p, 100), TG_TB_COPY_STORED);
    expect(t, "D", false);
    expect(t, "F", true);
    expect_none(t);
    assert_int_equal(st(t)->trace_writer_packet_loss, 2);
    t_free(t);
}

static void test_abi_violation_in_payload(void **state)
{
    (void)state;
    struct t *t = t_new(65536, TG_TB_RING_BUFFER);
    pl_reset(&t->p);
    pl_str(&t->p, "ok");
    /* a fragment claiming 200 bytes in a 100-byte payload */
    t->p.buf[t->p.len++] = 0xC8;
    t->p.buf[t->p.len++] = 0x01;
    t->p.count++;
    pl_str(&t->p, "never");
    assert_int_equal(pl_copy(t->tb, &P1, 1, 0, 0, true, &t->p, 100), TG_TB_COPY_STORED);
    pl_reset(&t->p);
    pl_str(&t->p, "next");
    assert_int_equal(pl_copy(t->tb, &P1, 1, 1, 0, true, &t->p, 100), TG_TB_COPY_STORED);
    /* count larger than what the payload holds */
    pl_reset(&t->p);
    pl_str(&t->p, "x");
    t->p.count = 1023;
    assert_int_equal(pl_copy(t->tb, &P1, 1, 2, 0, true, &t->p, 16), TG_TB_COPY_STORED);
    pl_reset(&t->p);
    pl_str(&t->p, "y");
    assert_int_equal(pl_copy(t->tb, &P1, 1, 3, 0, true, &t->p, 16), TG_TB_COPY_STORED);
    expect(t, "ok", true);
    expect(t, "next", true);
    expect(t, "x", false);
    expect(t, "y", true);
    expect_none(t);
    assert_int_equal(st(t)->abi_violations, 2);
    t_free(t);
}

static void test_copy_validation(void **state)
{
    (void)state;
    struct t *t = t_new(4096, TG_TB_RING_BUFFER);
    pl_reset(&t->p);
    pl_str(&t->p, "x");
    assert_int_equal(pl_copy(t->tb, &P1, 0, 0, 0, true, &t->p, 32), TG_TB_COPY_ABI_VIOLATION);
    assert_int_equal(pl_copy(t->tb, &P1, 32768, 0, 0, true, &t->p, 32), TG_TB_COPY_ABI_VIOLATION);
    assert_int_equal(tg_trace_buffer_copy_chunk(t->tb, &P1, 1, 0, 1024, 0, true, t->p.buf, 32),
                     TG_TB_COPY_ABI_VIOLATION);
    assert_int_equal(tg_trace_buffer_copy_chunk(t->tb, &P1, 1, 0, 1, 0, true, NULL, 32), TG_TB_COPY_ABI_VIOLATION);
    assert_int_equal(tg_trace_buffer_copy_chunk(t->tb, NULL, 1, 0, 1, 0, true, t->p.buf, 32),
                     TG_TB_COPY_ABI_VIOLATION);
    /* larger than the whole buffer, larger than any chunk */
    assert_int_equal(pl_copy(t->tb, &P1, 1, 0, 0, true, &t->p, 4096), TG_TB_COPY_ABI_VIOLATION);
    assert_int_equal(pl_copy(t->tb, &P1, 1, 0, 0, true, &t->p, TG_TB_MAX_PAYLOAD + 1), TG_TB_COPY_ABI_VIOLATION);
    const uint8_t seven[7] = {0};
    assert_int_equal(tg_trace_buffer_copy_chunk_bytes(t->tb, &P1, seven, 7, true), TG_TB_COPY_ABI_VIOLATION);
    assert_int_equal(st(t)->abi_violations, 8);
    assert_int_equal(st(t)->chunks_written, 0);
    /* whole-chunk bytes as in ChunksToMove.data */
    uint8_t chunk[64] = {0};
    const struct tg_smb_chunk_header h = {.chunk_id = 9, .writer_id = 4, .packets = tg_smb_make_packets(1, 0)};
    tg_smb_chunk_header_encode(chunk, &h);
    chunk[8] = 3;
    memcpy(chunk + 9, "abc", 3);
    assert_int_equal(tg_trace_buffer_copy_chunk_bytes(t->tb, &P2, chunk, sizeof(chunk), true), TG_TB_COPY_STORED);
    expect(t, "abc", true);
    assert_int_equal(t->info.writer_id, 4);
    assert_int_equal(t->info.producer_id, 2);
    /* an empty chunk is fine */
    assert_int_equal(tg_trace_buffer_copy_chunk(t->tb, &P1, 1, 0, 0, 0, true, NULL, 0), TG_TB_COPY_STORED);
    expect_none(t);
    t_free(t);
}

/* 4 KiB buffer, 1000-byte payloads: 64 + 1000 -> 1064-byte records, 3 fit. */
static void put_one(struct t *t, const struct tg_tb_producer *p, uint16_t w, uint32_t id, const char *s, int want)
{
    pl_reset(&t->p);
    pl_str(&t->p, s);
    assert_int_equal(pl_copy(t->tb, p, w, id, 0, true, &t->p, 1000), want);
}

static void test_ring_wrap_overwrites_oldest(void **state)
{
    (void)state;
    struct t *t = t_new(4096, TG_TB_RING_BUFFER);
    put_one(t, &P1, 1, 0, "c0", TG_TB_COPY_STORED);
    put_one(t, &P1, 1, 1, "c1", TG_TB_COPY_STORED);
    put_one(t, &P1, 1, 2, "c2", TG_TB_COPY_STORED);
    expect(t, "c0", true);
    assert_int_equal(st(t)->write_wrap_count, 0);
    put_one(t, &P1, 1, 3, "c3", TG_TB_COPY_STORED); /* wraps, takes c0's place (already read) */
    assert_int_equal(st(t)->write_wrap_count, 1);
    assert_int_equal(st(t)->chunks_overwritten, 0);
    put_one(t, &P1, 1, 4, "c4", TG_TB_COPY_STORED); /* overwrites unread c1 */
    assert_int_equal(st(t)->chunks_overwritten, 1);
    assert_int_equal(st(t)->bytes_overwritten, 1008);
    expect(t, "c2", true);
    expect(t, "c3", false);
    expect(t, "c4", false);
    expect_none(t);
    /* keep going: many laps, never reading: only the newest 3 survive */
    for (uint32_t id = 5; id < 50; id++) {
        char b[8];
        snprintf(b, sizeof(b), "c%u", id);
        put_one(t, &P1, 1, id, b, TG_TB_COPY_STORED);
    }
    expect(t, "c47", true);
    expect(t, "c48", false);
    expect(t, "c49", false);
    expect_none(t);
    assert_int_equal(st(t)->chunks_written, 50);
    assert_int_equal(st(t)->chunks_overwritten, 1 + 42);
    assert_true(st(t)->write_wrap_count >= 16);
    t_free(t);
}

/* The first chunk is half read when it is overwritten: no chunk was ever
 * finished, so only the overwrite itself can tell the reader about b. */
static void test_overwrite_partially_read_chunk(void **state)
{
    (void)state;
    struct t *t = t_new(4096, TG_TB_RING_BUFFER);
    pl_reset(&t->p);
    pl_str(&t->p, "a");
    pl_str(&t->p, "b");
    assert_int_equal(pl_copy(t->tb, &P1, 1, 0, 0, true, &t->p, 1000), TG_TB_COPY_STORED);
    expect(t, "a", true);
    put_one(t, &P1, 1, 1, "c1", TG_TB_COPY_STORED);
    put_one(t, &P1, 1, 2, "c2", TG_TB_COPY_STORED);
    put_one(t, &P1, 1, 3, "c3", TG_TB_COPY_STORED); /* over chunk 0 */
    assert_int_equal(st(t)->chunks_overwritten, 1);
    expect(t, "c1", true);
    expect(t, "c2", false);
    expect(t, "c3", false);
    t_free(t);
}

static void test_ring_partial_overlap_padding(void **state)
{
    (void)state;
    struct t *t = t_new(4096, TG_TB_RING_BUFFER);
    /* records of different sizes so new ones straddle old ones */
    for (uint32_t id = 0; id < 40; id++) {
        char b[8];
        snprintf(b, sizeof(b), "v%u", id);
        pl_reset(&t->p);
        pl_str(&t->p, b);
        assert_int_equal(pl_copy(t->tb, &P1, 1, id, 0, true, &t->p, 100 + (id * 397) % 1500), TG_TB_COPY_STORED);
        if (id % 7 == 3) {
            /* whatever is read must be in order */
            uint32_t last = 0;
            bool first = true;
            while (read_str(t->tb, t->s, sizeof(t->s), &t->info)) {
                uint32_t v = (uint32_t)atoi(t->s + 1);
                if (!first)
                    assert_true(v > last);
                first = false;
                last = v;
            }
        }
    }
    assert_true(st(t)->padding_bytes_written > 0);
    assert_true(st(t)->padding_bytes_cleared > 0);
    t_free(t);
}

static void test_discard_policy(void **state)
{
    (void)state;
    struct t *t = t_new(4096, TG_TB_DISCARD);
    put_one(t, &P1, 1, 0, "c0", TG_TB_COPY_STORED);
    put_one(t, &P1, 1, 1, "c1", TG_TB_COPY_STORED);
    put_one(t, &P1, 1, 2, "c2", TG_TB_COPY_STORED);
    put_one(t, &P1, 1, 3, "c3", TG_TB_COPY_DISCARDED);
    assert_int_equal(st(t)->chunks_discarded, 1);
    /* once full it stays closed, even after reading frees space */
    expect(t, "c0", true);
    expect(t, "c1", false);
    expect(t, "c2", false);
    expect_none(t);
    put_one(t, &P1, 1, 4, "c4", TG_TB_COPY_DISCARDED);
    put_one(t, &P2, 1, 0, "other", TG_TB_COPY_DISCARDED);
    assert_int_equal(st(t)->chunks_discarded, 3);
    assert_int_equal(st(t)->chunks_overwritten, 0);
    assert_int_equal(st(t)->chunks_written, 3);
    t_free(t);

    /* space that was read before the buffer filled up may be reused */
    t = t_new(4096, TG_TB_DISCARD);
    put_one(t, &P1, 1, 0, "c0", TG_TB_COPY_STORED);
    put_one(t, &P1, 1, 1, "c1", TG_TB_COPY_STORED);
    put_one(t, &P1, 1, 2, "c2", TG_TB_COPY_STORED);
    expect(t, "c0", true);
    expect(t, "c1", false);
    put_one(t, &P1, 1, 3, "c3", TG_TB_COPY_STORED); /* wraps over read c0 */
    assert_int_equal(st(t)->write_wrap_count, 1);
    put_one(t, &P1, 1, 4, "c4", TG_TB_COPY_STORED); /* over read c1 */
    put_one(t, &P1, 1, 5, "c5", TG_TB_COPY_DISCARDED); /* c2 unread */
    expect(t, "c2", false);
    expect(t, "c3", false);
    expect(t, "c4", false);
    expect_none(t);
    assert_int_equal(st(t)->chunks_overwritten, 0);
    t_free(t);
}

static void make_patchable(struct t *t)
{
    /* packet "<....>" whose bytes 1..4 wait for a patch */
    pl_reset(&t->p);
    pl_str(&t->p, "first");
    pl_str(&t->p, "<\x01\x01\x01\x01>");
    memset(t->p.buf + t->p.len - 5, 0, 4);
}

static void test_patches(void **state)
{
    (void)state;
    struct t *t = t_new(4096, TG_TB_RING_BUFFER);
    make_patchable(t);
    assert_int_equal(pl_copy(t->tb, &P1, 1, 0, PATCH, true, &t->p, 1000), TG_TB_COPY_STORED);
    put_one(t, &P2, 9, 0, "other-seq", TG_TB_COPY_STORED);
    /* the patch-pending sequence is held back, the other one is not */
    expect(t, "other-seq", true);
    expect_none(t);
    struct tg_tb_patch patch = {.offset = 9 + 4 + 1, .data = {'W', 'X', 'Y', 'Z'}};
    /* another producer (even one with chunks of its own), wrong writer,
     * unknown chunk: refused */
    assert_int_equal(tg_trace_buffer_apply_patches(t->tb, 2, 1, 0, &patch, 1, false), -1);
    assert_int_equal(tg_trace_buffer_apply_patches(t->tb, 1, 2, 0, &patch, 1, false), -1);
    assert_int_equal(tg_trace_buffer_apply_patches(t->tb, 1, 1, 1, &patch, 1, false), -1);
    assert_int_equal(st(t)->patches_failed, 3);
    /* out of the payload: refused */
    struct tg_tb_patch bad = {.offset = 997, .data = {1, 2, 3, 4}};
    assert_int_equal(tg_trace_buffer_apply_patches(t->tb, 1, 1, 0, &bad, 1, false), -1);
    bad.offset = 0xFFFFFFFFu;
    assert_int_equal(tg_trace_buffer_apply_patches(t->tb, 1, 1, 0, &bad, 1, false), -1);
    assert_int_equal(st(t)->patches_failed, 5);
    expect_none(t); /* still flagged */
    /* right one, more to come: still unreadable */
    assert_int_equal(tg_trace_buffer_apply_patches(t->tb, 1, 1, 0, &patch, 1, true), 0);
    assert_int_equal(st(t)->patches_succeeded, 1);
    expect_none(t);
    /* last (empty) batch clears the flag */
    assert_int_equal(tg_trace_buffer_apply_patches(t->tb, 1, 1, 0, NULL, 0, false), 0);
    expect(t, "first", true);
    expect(t, "<WXYZ>", false);
    expect_none(t);
    /* patching a chunk still in the buffer (already read) is allowed ... */
    bad.offset = 996;
    assert_int_equal(tg_trace_buffer_apply_patches(t->tb, 1, 1, 0, &bad, 1, false), 0);
    /* ... but not once it was overwritten */
    put_one(t, &P2, 1, 1, "x", TG_TB_COPY_STORED);
    put_one(t, &P2, 1, 2, "y", TG_TB_COPY_STORED);
    put_one(t, &P2, 1, 3, "z", TG_TB_COPY_STORED);
    assert_int_equal(tg_trace_buffer_apply_patches(t->tb, 1, 1, 0, &patch, 1, false), -1);
    assert_int_equal(st(t)->patches_failed, 6);
    t_free(t);
}

static void test_needs_patching_continuation(void **state)
{
    (void)state;
    struct t *t = t_new(65536, TG_TB_RING_BUFFER);
    pl_reset(&t->p);
    pl_str(&t->p, "a");
    pl_str(&t->p, "span1-");
    assert_int_equal(pl_copy(t->tb, &P1, 1, 0, LAST, true, &t->p, 100), TG_TB_COPY_STORED);
    pl_reset(&t->p);
    pl_str(&t->p, "span2");
    assert_int_equal(pl_copy(t->tb, &P1, 1, 1, FIRST | PATCH, true, &t->p, 100), TG_TB_COPY_STORED);
    expect(t, "a", true);
    expect_none(t);
    assert_int_equal(tg_trace_buffer_apply_patches(t->tb, 1, 1, 1, NULL, 0, false), 0);
    expect(t, "span1-span2", false);
    t_free(t);
}

static void test_scrape_recopy(void **state)
{
    (void)state;
    struct t *t = t_new(65536, TG_TB_RING_BUFFER);
    /* scraped while being written: 3 fragments counted, last one unfinished */
    pl_reset(&t->p);
    pl_str(&t->p, "s1");
    pl_str(&t->p, "s2");
    pl_str(&t->p, "s3-partial");
    assert_int_equal(pl_copy(t->tb, &P1, 1, 0, LAST | PATCH, false, &t->p, 200), TG_TB_COPY_STORED);
    expect(t, "s1", true);
    expect(t, "s2", false);
    expect_none(t); /* the incomplete chunk holds the sequence */
    /* identical scrape again: nothing to do */
    assert_int_equal(pl_copy(t->tb, &P1, 1, 0, LAST | PATCH, false, &t->p, 200), TG_TB_COPY_UNCHANGED);
    /* a copy with fewer fragments is refused */
    t->p.count = 2;
    assert_int_equal(pl_copy(t->tb, &P1, 1, 0, 0, false, &t->p, 200), TG_TB_COPY_ABI_VIOLATION);
    /* so is a different size */
    t->p.count = 4;
    assert_int_equal(pl_copy(t->tb, &P1, 1, 0, 0, true, &t->p, 300), TG_TB_COPY_ABI_VIOLATION);
    assert_int_equal(st(t)->abi_violations, 2);
    /* the commit: complete, s3 finished, one more packet */
    pl_reset(&t->p);
    pl_str(&t->p, "s1");
    pl_str(&t->p, "s2");
    pl_str(&t->p, "s3-done");
    pl_str(&t->p, "s4");
    assert_int_equal(pl_copy(t->tb, &P1, 1, 0, 0, true, &t->p, 200), TG_TB_COPY_REWRITTEN);
    assert_int_equal(st(t)->chunks_rewritten, 1);
    expect(t, "s3-done", false);
    expect(t, "s4", false);
    expect_none(t);
    /* a complete chunk cannot change any more, nor lose flags */
    pl_str(&t->p, "s5");
    assert_int_equal(pl_copy(t->tb, &P1, 1, 0, 0, true, &t->p, 200), TG_TB_COPY_ABI_VIOLATION);
    t->p.count = 4;
    assert_int_equal(pl_copy(t->tb, &P1, 1, 0, 0, true, &t->p, 200), TG_TB_COPY_UNCHANGED);
    assert_int_equal(st(t)->abi_violations, 3);
    t_free(t);
}

static void test_recopy_flag_removal_and_late_recopy(void **state)
{
    (void)state;
    struct t *t = t_new(65536, TG_TB_RING_BUFFER);
    pl_reset(&t->p);
    pl_str(&t->p, "a");
    pl_str(&t->p, "b");
    pl_str(&t->p, "c");
    assert_int_equal(pl_copy(t->tb, &P1, 1, 0, FIRST, false, &t->p, 100), TG_TB_COPY_STORED);
    /* FIRST removed: refused */
    assert_int_equal(pl_copy(t->tb, &P1, 1, 0, 0, true, &t->p, 100), TG_TB_COPY_ABI_VIOLATION);
    assert_int_equal(st(t)->abi_violations, 1);

    /* reader moved on to chunk 11 while chunk 10 was incomplete: chunk 10
     * may no longer grow */
    pl_reset(&t->p);
    pl_str(&t->p, "x1");
    pl_str(&t->p, "x2");
    assert_int_equal(pl_copy(t->tb, &P2, 1, 10, 0, false, &t->p, 100), TG_TB_COPY_STORED);
    pl_reset(&t->p);
    pl_str(&t->p, "y1");
    assert_int_equal(pl_copy(t->tb, &P2, 1, 11, 0, true, &t->p, 100), TG_TB_COPY_STORED);
    /* the incomplete chunk 10 holds P2's sequence: y1 is not read yet */
    int n = 0;
    while (read_str(t->tb, t->s, sizeof(t->s), &t->info))
        if (t->info.producer_id == 2)
            n++;
    assert_int_equal(n, 1); /* x1 only */
    pl_reset(&t->p);
    pl_str(&t->p, "x1");
    pl_str(&t->p, "x2");
    assert_int_equal(pl_copy(t->tb, &P2, 1, 10, 0, true, &t->p, 100), TG_TB_COPY_REWRITTEN);
    expect(t, "x2", false);
    expect(t, "y1", false);
    /* now 11 has been entered: 10 cannot be rewritten again */
    pl_str(&t->p, "x3");
    assert_int_equal(pl_copy(t->tb, &P2, 1, 10, 0, true, &t->p, 100), TG_TB_COPY_ABI_VIOLATION);
    t_free(t);
}

static void test_empty_scraped_chunk_completes(void **state)
{
    (void)state;
    struct t *t = t_new(65536, TG_TB_RING_BUFFER);
    assert_int_equal(tg_trace_buffer_copy_chunk(t->tb, &P1, 1, 0, 0, 0, false, t->p.buf, 100), TG_TB_COPY_STORED);
    put_one(t, &P1, 1, 1, "after", TG_TB_COPY_STORED);
    expect_none(t); /* chunk 0 might still get fragments */
    assert_int_equal(tg_trace_buffer_copy_chunk(t->tb, &P1, 1, 0, 0, 0, true, t->p.buf, 100), TG_TB_COPY_UNCHANGED);
    expect(t, "after", true);
    t_free(t);
}

static void test_many_sequences_limit(void **state)
{
    (void)state;
    /* 4 KiB buffer: at most 64 sequences; idle ones are forgotten */
    struct t *t = t_new(4096, TG_TB_RING_BUFFER);
    for (uint16_t w = 1; w <= 200; w++) {
        pl_reset(&t->p);
        pl_str(&t->p, "p");
        int rc = pl_copy(t->tb, &P1, w, 0, 0, true, &t->p, 8);
        assert_true(rc == TG_TB_COPY_STORED);
        if (w % 10 == 0)
            while (read_str(t->tb, t->s, sizeof(t->s), NULL))
                ;
    }
    t_free(t);
}

/* tg_trace_buffer_clone (CloneSession): same contents and read positions,
 * then fully independent of the original. */
static void test_clone(void **state)
{
    (void)state;
    struct t *t = t_new(4096, TG_TB_RING_BUFFER);
    pl_reset(&t->p);
    pl_str(&t->p, "a");
    pl_str(&t->p, "b");
    pl_str(&t->p, "c-start");
    assert_int_equal(pl_copy(t->tb, &P1, 1, 0, LAST, true, &t->p, 600), TG_TB_COPY_STORED);
    pl_reset(&t->p);
    pl_str(&t->p, "-end");
    assert_int_equal(pl_copy(t->tb, &P1, 1, 1, FIRST, true, &t->p, 600), TG_TB_COPY_STORED);
    put_one(t, &P2, 1, 0, "p2", TG_TB_COPY_STORED);
    expect(t, "a", true); /* read position is part of what is cloned */

    struct t *c = calloc(1, sizeof(*c));
    c->tb = tg_trace_buffer_clone(t->tb);
    assert_non_null(c->tb);
    assert_memory_equal(tg_trace_buffer_stats(c->tb), tg_trace_buffer_stats(t->tb),
                        sizeof(struct tg_trace_buffer_stats));
    /* the original goes on and is freed; the clone still has everything */
    put_one(t, &P1, 1, 2, "orig-only", TG_TB_COPY_STORED);
    put_one(t, &P1, 1, 3, "orig-only2", TG_TB_COPY_STORED); /* wraps over chunk 0 */
    tg_trace_buffer_free(t->tb);
    t->tb = NULL;

    const char *want[] = {"b", "c-start-end", "p2"};
    bool seen[3] = {false, false, false};
    for (int i = 0; i < 3; i++) {
        assert_true(read_str(c->tb, c->s, sizeof(c->s), &c->info));
        for (int k = 0; k < 3; k++)
            if (strcmp(c->s, want[k]) == 0)
                seen[k] = true;
    }
    assert_true(seen[0] && seen[1] && seen[2]);
    expect_none(c);
    /* the clone accepts new data, patches and wraps on its own */
    put_one(c, &P1, 1, 2, "clone-2", TG_TB_COPY_STORED);
    put_one(c, &P1, 1, 3, "clone-3", TG_TB_COPY_STORED);
    put_one(c, &P1, 1, 4, "clone-4", TG_TB_COPY_STORED);
    expect(c, "clone-2", false);
    expect(c, "clone-3", false);
    expect(c, "clone-4", false);
    t_free(c);
    free(t);
}

/* Resident memory of this process, bytes (/proc/self/statm). */
static size_t rss_bytes(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    unsigned long size = 0, resident = 0;
    if (f) {
        if (fscanf(f, "%lu %lu", &size, &resident) != 2)
            resident = 0;
        fclose(f);
    }
    return (size_t)resident * 4096u;
}

/* A big buffer costs memory as data comes, not when it is made: a consumer's EnableTracing with
 * many large buffers must not take their index memory up front (8 x 1 GiB took 64 MiB of chunk
 * index filled with "empty" markers before). */
static void test_big_buffers_cost_nothing_up_front(void **state)
{
    (void)state;
    enum { N = 8 };
    struct tg_trace_buffer *tb[N];
    size_t before = rss_bytes();
    for (int i = 0; i < N; i++) {
        tb[i] = tg_trace_buffer_new((size_t)1 << 30, TG_TB_RING_BUFFER);
        assert_non_null(tb[i]);
    }
    size_t after = rss_bytes();
    size_t grown = after > before ? after - before : 0;
    if (grown > (16u << 20))
        fail_msg("8 empty 1 GiB trace buffers made the process %zu KiB bigger", grown >> 10);
    /* and they work (the index's encoding is exercised by every other test here and the fuzzer) */
    struct pl p;
    pl_reset(&p);
    pl_str(&p, "hello");
    assert_int_equal(pl_copy(tb[N - 1], &P1, 1, 0, 0, true, &p, 0), TG_TB_COPY_STORED);
    char out[16];
    assert_true(read_str(tb[N - 1], out, sizeof out, NULL));
    assert_string_equal(out, "hello");
    for (int i = 0; i < N; i++)
        tg_trace_buffer_free(tb[i]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_new_checks),
        cmocka_unit_test(test_simple_read_once),
        cmocka_unit_test(test_sequences_and_identity),
        cmocka_unit_test(test_reassembly),
        cmocka_unit_test(test_out_of_order_commit),
        cmocka_unit_test(test_chunk_id_wrap),
        cmocka_unit_test(test_gap_drops_broken_packet),
        cmocka_unit_test(test_padding_and_drop_markers),
        cmocka_unit_test(test_abi_violation_in_payload),
        cmocka_unit_test(test_copy_validation),
        cmocka_unit_test(test_ring_wrap_overwrites_oldest),
        cmocka_unit_test(test_overwrite_partially_read_chunk),
        cmocka_unit_test(test_ring_partial_overlap_padding),
        cmocka_unit_test(test_discard_policy),
        cmocka_unit_test(test_patches),
        cmocka_unit_test(test_needs_patching_continuation),
        cmocka_unit_test(test_scrape_recopy),
        cmocka_unit_test(test_recopy_flag_removal_and_late_recopy),
        cmocka_unit_test(test_empty_scraped_chunk_completes),
        cmocka_unit_test(test_many_sequences_limit),
        cmocka_unit_test(test_clone),
        cmocka_unit_test(test_big_buffers_cost_nothing_up_front),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
