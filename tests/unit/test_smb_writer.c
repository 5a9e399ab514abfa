/* test_smb_writer.c: the producer-side chunk writer: exact chunk bytes,
 * splitting with continuation flags, SMB-full drop behaviour, the stall hook
 * (waiting for a free chunk between packets and in the middle of one, giving
 * up), emulation mode, flush/close and the fragment-count limit. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "smb/smb_abi.h"
#include "smb/smb_fragments.h"
#include "smb/smb_writer.h"

#define MAX_COMMITS 4096

struct sink {
    struct tg_smb *smb;
    bool service_frees; /* act like the service: BeingRead -> Free right away */
    size_t n;
    struct tg_smb_commit commits[MAX_COMMITS];
    uint8_t *copies[MAX_COMMITS]; /* chunk bytes copied during the callback */
};

static void on_commit(void *ctx, const struct tg_smb_commit *c)
{
    struct sink *s = ctx;
    assert_true(s->n < MAX_COMMITS);
    s->commits[s->n] = *c;
    /* the chunk must be Complete when reported */
    assert_int_equal(tg_smb_word_chunk_state(tg_smb_page_header(s->smb, c->page), c->chunk), TG_SMB_CHUNK_COMPLETE);
    unsigned layout = tg_smb_word_layout(tg_smb_page_header(s->smb, c->page));
    uint8_t *copy = malloc(c->chunk_size);
    assert_int_equal(tg_smb_copy_chunk(s->smb, c->page, layout, c->chunk, copy, c->chunk_size, NULL),
                     (long)c->chunk_size);
    if (c->chunk_data)
        assert_memory_equal(copy, c->chunk_data, c->chunk_size);
    s->copies[s->n++] = copy;
    if (s->service_frees) {
        assert_int_equal(tg_smb_acquire_chunk_for_reading(s->smb, c->page, c->chunk, NULL), TG_SMB_OK);
        assert_int_equal(tg_smb_release_chunk_as_free(s->smb, c->page, c->chunk), TG_SMB_OK);
    }
}

static void sink_free(struct sink *s)
{
    for (size_t i = 0; i < s->n; i++)
        free(s->copies[i]);
    free(s);
}

struct fixture {
    uint8_t *mem;
    struct tg_smb smb;
    struct sink *sink;
    struct tg_smb_writer w;
};

static void setup(struct fixture *fx, size_t pages, size_t page_size, bool emulation, bool service_frees)
{
    void *p = NULL;
    assert_int_equal(posix_memalign(&p, 4096, pages * page_size), 0);
    fx->mem = p;
    memset(fx->mem, 0, pages * page_size);
    assert_int_equal(tg_smb_init(&fx->smb, fx->mem, pages * page_size, page_size), TG_SMB_OK);
    fx->sink = calloc(1, sizeof(*fx->sink));
    fx->sink->smb = &fx->smb;
    fx->sink->service_frees = service_frees;
    struct tg_smb_writer_config cfg = {
        .smb = &fx->smb,
        .writer_id = 42,
        .target_buffer = 7,
        .emulation = emulation,
        .commit = on_commit,
        .commit_ctx = fx->sink,
    };
    assert_int_equal(tg_smb_writer_init(&fx->w, &cfg), TG_SMB_WRITER_OK);
}

static void teardown(struct fixture *fx)
{
    sink_free(fx->sink);
    free(fx->mem);
}

static void fill(uint8_t *b, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        b[i] = (uint8_t)(seed * 131 + i * 7);
}

static void test_config_checks(void **state)
{
    (void)state;
    struct fixture fx;
    setup(&fx, 1, 4096, false, false);
    struct tg_smb_writer w;
    struct tg_smb_writer_config cfg = {.smb = &fx.smb, .writer_id = 0, .commit = on_commit};
    assert_int_equal(tg_smb_writer_init(&w, &cfg), TG_SMB_WRITER_EINVAL);
    cfg.writer_id = 32768;
    assert_int_equal(tg_smb_writer_init(&w, &cfg), TG_SMB_WRITER_EINVAL);
    cfg.writer_id = 1;
    cfg.commit = NULL;
    assert_int_equal(tg_smb_writer_init(&w, &cfg), TG_SMB_WRITER_EINVAL);
    cfg.commit = on_commit;
    cfg.layout = 6;
    assert_int_equal(tg_smb_writer_init(&w, &cfg), TG_SMB_WRITER_EINVAL);
    cfg.layout = TG_SMB_LAYOUT_DIV14;
    assert_int_equal(tg_smb_writer_init(&w, &cfg), TG_SMB_WRITER_OK);
    /* zero-length packets are a no-op */
    assert_int_equal(tg_smb_writer_write_packet(&fx.w, NULL, 0), TG_SMB_WRITER_OK);
    assert_int_equal(tg_smb_writer_write_packet(&fx.w, NULL, 5), TG_SMB_WRITER_EINVAL);
    assert_int_equal(fx.sink->n, 0);
    teardown(&fx);
}

static void test_exact_bytes(void **state)
{
    (void)state;
    struct fixture fx;
    setup(&fx, 2, 4096, false, false);
    assert_int_equal(tg_smb_writer_write_packet(&fx.w, "hello", 5), TG_SMB_WRITER_OK);
    assert_int_equal(tg_smb_writer_write_packet(&fx.w, "abc", 3), TG_SMB_WRITER_OK);
    assert_int_equal(fx.sink->n, 0); /* nothing committed before a flush */
    /* the page is partitioned Div1, chunk BeingWritten */
    assert_int_equal(tg_smb_page_header(&fx.smb, 0), (1u << 28) | 1u);
    tg_smb_writer_flush(&fx.w);
    assert_int_equal(fx.sink->n, 1);
    const struct tg_smb_commit *c = &fx.sink->commits[0];
    assert_int_equal(c->page, 0);
    assert_int_equal(c->chunk, 0);
    assert_int_equal(c->target_buffer, 7);
    assert_int_equal(c->writer_id, 42);
    assert_int_equal(c->chunk_id, 0);
    assert_int_equal(c->packets, 2);
    assert_null(c->chunk_data);
    assert_int_equal(c->chunk_size, 4088);
    const uint8_t want[] = {
        0x00, 0x00, 0x00, 0x00, 42, 0x00, 0x02, 0x00, /* chunk header */
        0x85, 0x80, 0x80, 0x00, 'h', 'e', 'l', 'l', 'o', /* 4-byte redundant varint 5 */
        0x83, 0x80, 0x80, 0x00, 'a', 'b', 'c',
    };
    assert_memory_equal(fx.mem + 8, want, sizeof(want));
    assert_int_equal(tg_smb_page_header(&fx.smb, 0), (1u << 28) | 3u);
    /* flushing again with nothing written does nothing */
    tg_smb_writer_flush(&fx.w);
    assert_int_equal(fx.sink->n, 1);
    /* next chunk gets the next id, on the next page (round robin) */
    assert_int_equal(tg_smb_writer_write_packet(&fx.w, "z", 1), TG_SMB_WRITER_OK);
    tg_smb_writer_flush(&fx.w);
    assert_int_equal(fx.sink->n, 2);
    assert_int_equal(fx.sink->commits[1].chunk_id, 1);
    assert_int_equal(fx.sink->commits[1].page, 1);
    assert_int_equal(fx.w.stats.packets_written, 3);
    assert_int_equal(fx.w.stats.bytes_written, 9);
    teardown(&fx);
}

/* The first n commits are chunk ids 0..n-1 carrying one packet, pkt, split across them with the
 * continuation flags, one fragment each (each but the last full_len bytes), no drop marker. */
static void assert_one_split_packet(const struct fixture *fx, size_t n, const uint8_t *pkt, size_t len,
                                    size_t full_len)
{
    size_t got = 0;
    for (size_t i = 0; i < n; i++) {
        const struct tg_smb_commit *c = &fx->sink->commits[i];
        assert_int_equal(c->chunk_id, i);
        unsigned want_flags = (i > 0 ? TG_SMB_CHUNK_FIRST_CONTINUES : 0) | (i + 1 < n ? TG_SMB_CHUNK_LAST_CONTINUES : 0);
        assert_int_equal(tg_smb_packets_flags(c->packets), want_flags);
        assert_int_equal(tg_smb_packets_count(c->packets), 1);
        struct tg_smb_frag_iter it;
        struct tg_smb_fragment f;
        tg_smb_frag_iter_init(&it, fx->sink->copies[i] + 8, c->chunk_size - 8, 1, want_flags);
        assert_int_equal(tg_smb_frag_next(&it, &f), TG_SMB_FRAG_OK);
        assert_false(f.is_drop);
        assert_int_equal(f.len, i + 1 < n ? full_len : len - (n - 1) * full_len);
        assert_memory_equal(f.data, pkt + got, f.len);
        got += f.len;
    }
    assert_int_equal(got, len);
}

static void test_split_across_chunks(void **state)
{
    (void)state;
    struct fixture fx;
    setup(&fx, 4, 4096, false, true);
    uint8_t pkt[10000];
    fill(pkt, sizeof(pkt), 1);
    assert_int_equal(tg_smb_writer_write_packet(&fx.w, pkt, sizeof(pkt)), TG_SMB_WRITER_OK);
    tg_smb_writer_flush(&fx.w);
    /* 4080-byte payloads: 4076 + 4076 + 1848 */
    assert_int_equal(fx.sink->n, 3);
    assert_one_split_packet(&fx, 3, pkt, sizeof(pkt), 4076);
    teardown(&fx);
}

static void test_full_drop_without_fragment(void **state)
{
    (void)state;
    struct fixture fx;
    setup(&fx, 2, 4096, false, false); /* nobody frees chunks */
    uint8_t pkt[3000];
    fill(pkt, sizeof(pkt), 2);
    assert_int_equal(tg_smb_writer_write_packet(&fx.w, pkt, sizeof(pkt)), TG_SMB_WRITER_OK); /* chunk 0 */
    assert_int_equal(tg_smb_writer_write_packet(&fx.w, pkt, 1000), TG_SMB_WRITER_OK);        /* fits chunk 0 */
    assert_false(tg_smb_writer_take_data_lost(&fx.w));
    /* chunk 0 has 72 bytes left: a 100-byte packet starts there and goes on to
     * chunk 1 */
    assert_int_equal(tg_smb_writer_write_packet(&fx.w, pkt, 100), TG_SMB_WRITER_OK);
    assert_int_equal(fx.sink->n, 1);
    /* fill chunk 1, then the SMB is full */
    assert_int_equal(tg_smb_writer_write_packet(&fx.w, pkt, 3000), TG_SMB_WRITER_OK);
    assert_int_equal(tg_smb_writer_write_packet(&fx.w, pkt, 1000), TG_SMB_WRITER_OK);
    assert_int_equal(fx.sink->n, 1); /* 36 bytes left in chunk 1: still held */
    assert_int_equal(tg_smb_writer_write_packet(&fx.w, pkt, 32), TG_SMB_WRITER_OK);
    assert_int_equal(fx.sink->n, 2); /* chunk 1 exactly full: released at once */
    assert_int_equal(tg_smb_writer_write_packet(&fx.w, pkt, 10), TG_SMB_WRITER_DROPPED);
    assert_int_equal(tg_smb_writer_write_packet(&fx.w, pkt, 10), TG_SMB_WRITER_DROPPED);
    assert_true(tg_smb_writer_take_data_lost(&fx.w));
    assert_false(tg_smb_writer_take_data_lost(&fx.w));
    assert_int_equal(fx.w.stats.packets_dropped, 2);
    /* the service frees page 0: writing resumes with chunk id 2 */
    assert_int_equal(tg_smb_acquire_chunk_for_reading(&fx.smb, 0, 0, NULL), TG_SMB_OK);
    assert_int_equal(tg_smb_release_chunk_as_free(&fx.smb, 0, 0), TG_SMB_OK);
    assert_int_equal(tg_smb_writer_write_packet(&fx.w, "again", 5), TG_SMB_WRITER_OK);
    tg_smb_writer_flush(&fx.w);
    assert_int_equal(fx.sink->n, 3);
    assert_int_equal(fx.sink->commits[2].chunk_id, 2);
    assert_int_equal(fx.sink->commits[2].page, 0);
    assert_int_equal(tg_smb_packets_flags(fx.sink->commits[2].packets), 0);
    teardown(&fx);
}

static void test_full_drop_mid_packet(void **state)
{
    (void)state;
    struct fixture fx;
    setup(&fx, 2, 4096, false, false);
    uint8_t pkt[12000];
    fill(pkt, sizeof(pkt), 3);
    /* chunk 0 (LAST_CONT) -> chunk 1 (FIRST_CONT), then no third chunk */
    assert_int_equal(tg_smb_writer_write_packet(&fx.w, pkt, sizeof(pkt)), TG_SMB_WRITER_DROPPED);
    assert_true(tg_smb_writer_take_data_lost(&fx.w));
    assert_int_equal(fx.sink->n, 2);
    assert_int_equal(tg_smb_packets_flags(fx.sink->commits[0].packets), TG_SMB_CHUNK_LAST_CONTINUES);
    /* chunk 1 keeps FIRST_CONT, does not claim to continue, and its fragment
     * header is the drop marker */
    assert_int_equal(fx.sink->commits[1].chunk_id, 1);
    assert_int_equal(tg_smb_packets_flags(fx.sink->commits[1].packets), TG_SMB_CHUNK_FIRST_CONTINUES);
    assert_int_equal(tg_smb_packets_count(fx.sink->commits[1].packets), 1);
    const uint8_t drop[4] = {0xff, 0xff, 0xff, 0x7f};
    assert_memory_equal(fx.sink->copies[1] + 8, drop, 4);
    struct tg_smb_frag_iter it;
    struct tg_smb_fragment f;
    tg_smb_frag_iter_init(&it, fx.sink->copies[1] + 8, 4080, 1, TG_SMB_CHUNK_FIRST_CONTINUES);
    assert_int_equal(tg_smb_frag_next(&it, &f), TG_SMB_FRAG_OK);
    assert_true(f.is_drop);
    assert_false(fx.w.have_chunk);
    teardown(&fx);
}

/* ---- stall hook ---- */

struct staller {
    struct fixture *fx;
    unsigned calls;
    unsigned free_at;      /* attempt at which it frees the oldest unread chunk (like the service) */
    unsigned give_up_at;   /* attempt at which it says to drop */
    size_t next_unread;    /* index into fx->sink->commits */
    bool had_chunk[8];     /* the writer's have_chunk at each call */
};

static bool stall_hook(void *ctx, unsigned attempt)
{
    struct staller *st = ctx;
    assert_true(st->calls < 8);
    st->had_chunk[st->calls++] = st->fx->w.have_chunk;
    if (attempt == st->give_up_at)
        return false;
    if (attempt == st->free_at) {
        const struct tg_smb_commit *c = &st->fx->sink->commits[st->next_unread++];
        assert_int_equal(tg_smb_acquire_chunk_for_reading(&st->fx->smb, c->page, c->chunk, NULL), TG_SMB_OK);
        assert_int_equal(tg_smb_release_chunk_as_free(&st->fx->smb, c->page, c->chunk), TG_SMB_OK);
    }
    return true;
}

/* The hook gets commit_ctx, which is the sink in these fixtures: it finds its staller here. */
static struct staller *g_staller;
static bool stall_trampoline(void *ctx, unsigned attempt)
{
    (void)ctx;
    return stall_hook(g_staller, attempt);
}

static void setup_stalling(struct fixture *fx, struct staller *st, unsigned free_at, unsigned give_up_at)
{
    setup(fx, 2, 4096, false, false); /* two chunks, nobody frees them but the staller */
    memset(st, 0, sizeof *st);
    st->fx = fx;
    st->free_at = free_at;
    st->give_up_at = give_up_at;
    g_staller = st;
    struct tg_smb_writer_config cfg = fx->w.cfg;
    cfg.stall = stall_trampoline;
    assert_int_equal(tg_smb_writer_init(&fx->w, &cfg), TG_SMB_WRITER_OK);
}

static void test_stall_mid_packet_then_write(void **state)
{
    (void)state;
    struct fixture fx;
    struct staller st;
    setup_stalling(&fx, &st, 2, 100);
    uint8_t pkt[12000];
    fill(pkt, sizeof(pkt), 5);
    /* chunk 0 and chunk 1 hold 8152 bytes; the third chunk is found only once
     * the "service" freed chunk 0, on the third call */
    assert_int_equal(tg_smb_writer_write_packet(&fx.w, pkt, sizeof(pkt)), TG_SMB_WRITER_OK);
    assert_false(tg_smb_writer_take_data_lost(&fx.w));
    assert_int_equal(st.calls, 3);
    assert_true(st.had_chunk[0] && st.had_chunk[2]); /* chunk 1 was held, BeingWritten, meanwhile */
    assert_int_equal(fx.w.stats.stalls, 1);
    assert_int_equal(fx.w.stats.packets_dropped, 0);
    tg_smb_writer_flush(&fx.w);
    assert_int_equal(fx.sink->n, 3);
    assert_one_split_packet(&fx, 3, pkt, sizeof(pkt), 4076);
    assert_int_equal(fx.sink->commits[2].page, 0); /* the chunk the staller freed */
    teardown(&fx);
}

static void test_stall_between_packets(void **state)
{
    (void)state;
    struct fixture fx;
    struct staller st;
    setup_stalling(&fx, &st, 0, 100);
    uint8_t pkt[4076]; /* exactly one chunk's payload */
    fill(pkt, sizeof(pkt), 6);
    assert_int_equal(tg_smb_writer_write_packet(&fx.w, pkt, sizeof(pkt)), TG_SMB_WRITER_OK);
    assert_int_equal(tg_smb_writer_write_packet(&fx.w, pkt, sizeof(pkt)), TG_SMB_WRITER_OK);
    assert_int_equal(st.calls, 0);
    assert_int_equal(fx.sink->n, 2); /* both chunks full and released: the SMB is full */
    assert_int_equal(tg_smb_writer_write_packet(&fx.w, "next", 4), TG_SMB_WRITER_OK);
    assert_int_equal(st.calls, 1);
    assert_false(st.had_chunk[0]); /* between packets the writer holds no chunk */
    assert_int_equal(fx.w.stats.stalls, 1);
    tg_smb_writer_flush(&fx.w);
    assert_int_equal(fx.sink->n, 3);
    assert_int_equal(fx.sink->commits[2].chunk_id, 2);
    assert_int_equal(tg_smb_packets_flags(fx.sink->commits[2].packets), 0);
    teardown(&fx);
}

static void test_stall_gives_up(void **state)
{
    (void)state;
    struct fixture fx;
    struct staller st;
    setup_stalling(&fx, &st, 100, 3);
    uint8_t pkt[12000];
    fill(pkt, sizeof(pkt), 7);
    /* asked four times (attempts 0..3), nothing freed: dropped as without the hook */
    assert_int_equal(tg_smb_writer_write_packet(&fx.w, pkt, sizeof(pkt)), TG_SMB_WRITER_DROPPED);
    assert_int_equal(st.calls, 4);
    assert_true(tg_smb_writer_take_data_lost(&fx.w));
    assert_int_equal(fx.sink->n, 2);
    const uint8_t drop[4] = {0xff, 0xff, 0xff, 0x7f};
    assert_memory_equal(fx.sink->copies[1] + 8, drop, 4);
    assert_int_equal(fx.w.stats.stalls, 1);
    assert_int_equal(fx.w.stats.packets_dropped, 1);
    teardown(&fx);
}

static void test_emulation_frees_chunks(void **state)
{
    (void)state;
    struct fixture fx;
    setup(&fx, 2, 4096, true, false); /* two pages, nobody else frees */
    uint8_t pkt[500];
    for (unsigned i = 0; i < 100; i++) {
        fill(pkt, sizeof(pkt), i);
        assert_int_equal(tg_smb_writer_write_packet(&fx.w, pkt, sizeof(pkt)), TG_SMB_WRITER_OK);
    }
    tg_smb_writer_flush(&fx.w);
    assert_true(fx.sink->n >= 12);
    for (size_t i = 0; i < fx.sink->n; i++) {
        const struct tg_smb_commit *c = &fx.sink->commits[i];
        assert_int_equal(c->chunk_id, i);
        assert_int_equal(c->chunk_size, 4088);
        assert_non_null(c->chunk_data); /* compared byte for byte in on_commit */
        struct tg_smb_chunk_header h;
        tg_smb_chunk_header_decode(fx.sink->copies[i], &h);
        assert_int_equal(h.chunk_id, i);
        assert_int_equal(h.writer_id, 42);
    }
    /* every chunk went back to Free: pages de-partitioned */
    assert_int_equal(tg_smb_page_header(&fx.smb, 0), 0);
    assert_int_equal(tg_smb_page_header(&fx.smb, 1), 0);
    teardown(&fx);
}

static void test_emulation_needs_two_chunks_to_split(void **state)
{
    (void)state;
    struct fixture fx;
    setup(&fx, 1, 4096, true, false);
    uint8_t pkt[5000];
    fill(pkt, sizeof(pkt), 9);
    /* only one chunk exists: the continuation cannot be taken while the first
     * part is still held, so the packet is dropped with a marker */
    assert_int_equal(tg_smb_writer_write_packet(&fx.w, pkt, sizeof(pkt)), TG_SMB_WRITER_DROPPED);
    assert_int_equal(fx.sink->n, 1);
    const uint8_t drop[4] = {0xff, 0xff, 0xff, 0x7f};
    assert_memory_equal(fx.sink->copies[0] + 8, drop, 4);
    assert_int_equal(tg_smb_packets_flags(fx.sink->commits[0].packets), 0);
    /* small packets still work afterwards */
    assert_int_equal(tg_smb_writer_write_packet(&fx.w, pkt, 10), TG_SMB_WRITER_OK);
    teardown(&fx);
}

static void test_fragment_limit(void **state)
{
    (void)state;
    struct fixture fx;
    setup(&fx, 2, 16384, false, true);
    for (unsigned i = 0; i < 1500; i++)
        assert_int_equal(tg_smb_writer_write_packet(&fx.w, "x", 1), TG_SMB_WRITER_OK);
    tg_smb_writer_flush(&fx.w);
    assert_int_equal(fx.sink->n, 2);
    assert_int_equal(tg_smb_packets_count(fx.sink->commits[0].packets), TG_SMB_WRITER_MAX_FRAGMENTS);
    assert_int_equal(tg_smb_packets_count(fx.sink->commits[1].packets), 1500 - TG_SMB_WRITER_MAX_FRAGMENTS);
    teardown(&fx);
}

static void test_close_releases_empty_chunk(void **state)
{
    (void)state;
    struct fixture fx;
    setup(&fx, 1, 4096, false, false);
    /* exactly fill a chunk so the writer releases it, then hold an empty one */
    uint8_t pkt[4076];
    fill(pkt, sizeof(pkt), 4);
    assert_int_equal(tg_smb_writer_write_packet(&fx.w, pkt, sizeof(pkt)), TG_SMB_WRITER_OK);
    assert_int_equal(fx.sink->n, 1);
    assert_false(fx.w.have_chunk);
    tg_smb_writer_close(&fx.w); /* nothing held: nothing to do */
    assert_int_equal(fx.sink->n, 1);

    struct fixture fy;
    setup(&fy, 2, 4096, false, false);
    assert_int_equal(tg_smb_writer_write_packet(&fy.w, pkt, 4000), TG_SMB_WRITER_OK);
    /* 76 bytes left: a 200-byte packet spans chunk 0 and chunk 1 */
    assert_int_equal(tg_smb_writer_write_packet(&fy.w, pkt, 200), TG_SMB_WRITER_OK);
    assert_int_equal(fy.sink->n, 1);
    tg_smb_writer_close(&fy.w);
    assert_int_equal(fy.sink->n, 2);
    assert_int_equal(tg_smb_word_chunk_state(tg_smb_page_header(&fy.smb, 1), 0), TG_SMB_CHUNK_COMPLETE);
    teardown(&fy);
    teardown(&fx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_config_checks),
        cmocka_unit_test(test_exact_bytes),
        cmocka_unit_test(test_split_across_chunks),
        cmocka_unit_test(test_full_drop_without_fragment),
        cmocka_unit_test(test_full_drop_mid_packet),
        cmocka_unit_test(test_stall_mid_packet_then_write),
        cmocka_unit_test(test_stall_between_packets),
        cmocka_unit_test(test_stall_gives_up),
        cmocka_unit_test(test_emulation_frees_chunks),
        cmocka_unit_test(test_emulation_needs_two_chunks_to_split),
        cmocka_unit_test(test_fragment_limit),
        cmocka_unit_test(test_close_releases_empty_chunk),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
