/* test_smb_abi.c: SMB geometry constants, header codecs and the page header
 * state machine (legal and illegal transitions, de-partitioning, bounds). */
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "smb/smb_abi.h"

static void test_constants(void **state)
{
    (void)state;
    assert_int_equal(TG_SMB_PAGE_HEADER_SIZE, 8);
    assert_int_equal(TG_SMB_CHUNK_HEADER_SIZE, 8);
    assert_int_equal(TG_SMB_MAX_CHUNKS_PER_PAGE, 14);
    assert_int_equal(TG_SMB_LAYOUT_MASK, 0x70000000u);
    assert_int_equal(TG_SMB_CHUNK_STATES_MASK, 0x0FFFFFFFu);
    assert_int_equal(TG_SMB_PACKET_SIZE_DROP, 0x0FFFFFFFu);
    assert_int_equal(TG_SMB_MAX_WRITER_ID, 32767);
    assert_int_equal(TG_SMB_CHUNK_FREE, 0);
    assert_int_equal(TG_SMB_CHUNK_BEING_WRITTEN, 1);
    assert_int_equal(TG_SMB_CHUNK_BEING_READ, 2);
    assert_int_equal(TG_SMB_CHUNK_COMPLETE, 3);
    /* flags as values of the 6-bit field and as masks on the u16 */
    assert_int_equal(TG_SMB_CHUNK_FIRST_CONTINUES << 10, TG_SMB_PACKETS_FIRST_CONTINUES);
    assert_int_equal(TG_SMB_CHUNK_LAST_CONTINUES << 10, TG_SMB_PACKETS_LAST_CONTINUES);
    assert_int_equal(TG_SMB_CHUNK_NEEDS_PATCHING << 10, TG_SMB_PACKETS_NEEDS_PATCHING);
    assert_int_equal(TG_SMB_PACKETS_FIRST_CONTINUES, 0x0400);
    assert_int_equal(TG_SMB_PACKETS_LAST_CONTINUES, 0x0800);
    assert_int_equal(TG_SMB_PACKETS_NEEDS_PATCHING, 0x1000);
    /* count=5, flags=1 is 0x0405, as the compiled bit-field gives */
    assert_int_equal(tg_smb_make_packets(5, 1), 0x0405);
    assert_int_equal(tg_smb_packets_count(0x0405), 5);
    assert_int_equal(tg_smb_packets_flags(0x0405), 1);
    assert_int_equal(tg_smb_packets_count(0xFFFF), 1023);
    assert_int_equal(tg_smb_packets_flags(0xFFFF), 0x3F);
}

static void test_page_sizes(void **state)
{
    (void)state;
    assert_false(tg_smb_page_size_valid(0));
    assert_false(tg_smb_page_size_valid(2048));
    assert_true(tg_smb_page_size_valid(4096));
    assert_false(tg_smb_page_size_valid(6000));
    assert_true(tg_smb_page_size_valid(12288)); /* multiple of 4 KiB, not a power of two: ABI allows it */
    assert_true(tg_smb_page_size_valid(65536));
    assert_false(tg_smb_page_size_valid(65536 + 4096));
}

static void test_chunk_size_table(void **state)
{
    (void)state;
    static const size_t pages[5] = {4096, 8192, 16384, 32768, 65536};
    static const struct {
        unsigned layout, n;
        size_t sizes[5];
    } rows[] = {
        {TG_SMB_LAYOUT_DIV1, 1, {4088, 8184, 16376, 32760, 65528}},
        {TG_SMB_LAYOUT_DIV2, 2, {2044, 4092, 8188, 16380, 32764}},
        {TG_SMB_LAYOUT_DIV4, 4, {1020, 2044, 4092, 8188, 16380}},
        {TG_SMB_LAYOUT_DIV7, 7, {584, 1168, 2336, 4680, 9360}},
        {TG_SMB_LAYOUT_DIV14, 14, {292, 584, 1168, 2340, 4680}},
    };
    for (size_t r = 0; r < sizeof(rows) / sizeof(rows[0]); r++) {
        assert_int_equal(tg_smb_layout_num_chunks(rows[r].layout), rows[r].n);
        for (size_t p = 0; p < 5; p++) {
            size_t cs = tg_smb_chunk_size(pages[p], rows[r].layout);
            assert_int_equal(cs, rows[r].sizes[p]);
            assert_int_equal(cs % 4, 0);
            /* last chunk ends inside the page */
            assert_true(tg_smb_chunk_offset_in_page(pages[p], rows[r].layout, rows[r].n - 1) + cs <= pages[p]);
        }
    }
    assert_int_equal(tg_smb_layout_num_chunks(0), 0);
    assert_int_equal(tg_smb_layout_num_chunks(6), 0);
    assert_int_equal(tg_smb_layout_num_chunks(7), 0);
    assert_int_equal(tg_smb_layout_num_chunks(8), 0);
    assert_int_equal(tg_smb_chunk_size(4096, 0), 0);
    assert_int_equal(tg_smb_chunk_size(4096, 6), 0);
    assert_int_equal(tg_smb_chunk_size(4000, 1), 0);
    assert_int_equal(tg_smb_chunk_offset_in_page(4096, TG_SMB_LAYOUT_DIV4, 2), 8 + 2 * 1020);
}

static void test_chunk_header_codec(void **state)
{
    (void)state;
    uint8_t b[8];
    struct tg_smb_chunk_header h = {.chunk_id = 0x11223344, .writer_id = 0x0102, .packets = 0x1805};
    tg_smb_chunk_header_encode(b, &h);
    const uint8_t want[8] = {0x44, 0x33, 0x22, 0x11, 0x02, 0x01, 0x05, 0x18};
    assert_memory_equal(b, want, 8);
    struct tg_smb_chunk_header d;
    tg_smb_chunk_header_decode(b, &d);
    assert_int_equal(d.chunk_id, 0x11223344);
    assert_int_equal(d.writer_id, 0x0102);
    assert_int_equal(d.packets, 0x1805);
    assert_false(tg_smb_writer_id_valid(0));
    assert_true(tg_smb_writer_id_valid(1));
    assert_true(tg_smb_writer_id_valid(32767));
    assert_false(tg_smb_writer_id_valid(32768));
}

/* An SMB in 4 KiB-aligned heap memory. */
static uint8_t *new_mem(size_t size)
{
    void *p = NULL;
    assert_int_equal(posix_memalign(&p, 4096, size), 0);
    memset(p, 0, size);
    return p;
}

static void test_init(void **state)
{
    (void)state;
    uint8_t *mem = new_mem(16384);
    struct tg_smb smb;
    assert_int_equal(tg_smb_init(&smb, mem, 16384, 4096), TG_SMB_OK);
    assert_int_equal(smb.num_pages, 4);
    assert_int_equal(tg_smb_init(&smb, mem, 16384, 3000), TG_SMB_EINVAL);
    assert_int_equal(tg_smb_init(&smb, mem, 10000, 4096), TG_SMB_EINVAL);
    assert_int_equal(tg_smb_init(&smb, mem, 0, 4096), TG_SMB_EINVAL);
    assert_int_equal(tg_smb_init(&smb, mem + 1, 8192, 4096), TG_SMB_EINVAL);
    assert_int_equal(tg_smb_init(&smb, NULL, 8192, 4096), TG_SMB_EINVAL);
    free(mem);
}

static uint32_t word(const struct tg_smb *smb, size_t page)
{
    return tg_smb_page_header(smb, page);
}

static void test_state_machine(void **state)
{
    (void)state;
    uint8_t *mem = new_mem(4 * 4096);
    struct tg_smb smb;
    assert_int_equal(tg_smb_init(&smb, mem, 4 * 4096, 4096), TG_SMB_OK);
    struct tg_smb_chunk_header hdr = {.chunk_id = 7, .writer_id = 3, .packets = 0};

    /* nothing works on an unpartitioned page */
    assert_int_equal(tg_smb_acquire_chunk_for_writing(&smb, 0, 0, &hdr, NULL, NULL), TG_SMB_EINVAL);
    assert_int_equal(tg_smb_acquire_chunk_for_reading(&smb, 0, 0, NULL), TG_SMB_EINVAL);

    /* partition: only from word 0, only valid layouts, only existing pages */
    assert_int_equal(tg_smb_partition_page(&smb, 0, 6), TG_SMB_EINVAL);
    assert_int_equal(tg_smb_partition_page(&smb, 0, 0), TG_SMB_EINVAL);
    assert_int_equal(tg_smb_partition_page(&smb, 4, TG_SMB_LAYOUT_DIV4), TG_SMB_EINVAL);
    assert_int_equal(tg_smb_partition_page(&smb, 0, TG_SMB_LAYOUT_DIV4), TG_SMB_OK);
    assert_int_equal(word(&smb, 0), 3u << 28);
    assert_int_equal(tg_smb_partition_page(&smb, 0, TG_SMB_LAYOUT_DIV1), TG_SMB_ESTATE);
    assert_int_equal(word(&smb, 0), 3u << 28);

    /* index checks against the layout */
    assert_int_equal(tg_smb_acquire_chunk_for_writing(&smb, 0, 4, &hdr, NULL, NULL), TG_SMB_EINVAL);
    assert_int_equal(tg_smb_acquire_chunk_for_writing(&smb, 0, 14, &hdr, NULL, NULL), TG_SMB_EINVAL);
    assert_int_equal(tg_smb_acquire_chunk_for_writing(&smb, 0, 1000, &hdr, NULL, NULL), TG_SMB_EINVAL);
    assert_int_equal(tg_smb_acquire_chunk_for_writing(&smb, 99, 0, &hdr, NULL, NULL), TG_SMB_EINVAL);

    /* Free -> BeingWritten, header stamped */
    uint8_t *c1;
    size_t c1size;
    hdr.packets = tg_smb_make_packets(0, TG_SMB_CHUNK_FIRST_CONTINUES);
    assert_int_equal(tg_smb_acquire_chunk_for_writing(&smb, 0, 1, &hdr, &c1, &c1size), TG_SMB_OK);
    assert_ptr_equal(c1, mem + 8 + 1020);
    assert_int_equal(c1size, 1020);
    assert_int_equal(tg_smb_word_chunk_state(word(&smb, 0), 1), TG_SMB_CHUNK_BEING_WRITTEN);
    assert_int_equal(word(&smb, 0), (3u << 28) | (1u << 2));
    struct tg_smb_chunk_header d;
    tg_smb_chunk_header_decode(c1, &d);
    assert_int_equal(d.chunk_id, 7);
    assert_int_equal(d.writer_id, 3);
    assert_int_equal(d.packets, 0x0400);
    assert_int_equal(tg_smb_chunk_load_packets(c1), 0x0400);

    /* illegal from BeingWritten */
    assert_int_equal(tg_smb_acquire_chunk_for_writing(&smb, 0, 1, &hdr, NULL, NULL), TG_SMB_ESTATE);
    assert_int_equal(tg_smb_acquire_chunk_for_reading(&smb, 0, 1, NULL), TG_SMB_ESTATE);
    assert_int_equal(tg_smb_release_chunk_as_free(&smb, 0, 1), TG_SMB_ESTATE);
    assert_int_equal(tg_smb_release_complete_chunk_as_free(&smb, 0, 1), TG_SMB_ESTATE);
    /* illegal from Free */
    assert_int_equal(tg_smb_release_chunk_as_complete(&smb, 0, 2), TG_SMB_ESTATE);
    assert_int_equal(tg_smb_release_chunk_as_free(&smb, 0, 2), TG_SMB_ESTATE);

    /* second chunk, so the page stays partitioned while one is freed */
    uint8_t *c3;
    hdr.chunk_id = 8;
    hdr.packets = 0;
    assert_int_equal(tg_smb_acquire_chunk_for_writing(&smb, 0, 3, &hdr, &c3, NULL), TG_SMB_OK);
    tg_smb_chunk_store_packets(c1, tg_smb_make_packets(2, TG_SMB_CHUNK_FIRST_CONTINUES));

    /* BeingWritten -> Complete; then not again */
    assert_int_equal(tg_smb_release_chunk_as_complete(&smb, 0, 1), TG_SMB_OK);
    assert_int_equal(tg_smb_word_chunk_state(word(&smb, 0), 1), TG_SMB_CHUNK_COMPLETE);
    assert_int_equal(tg_smb_release_chunk_as_complete(&smb, 0, 1), TG_SMB_ESTATE);
    assert_int_equal(tg_smb_acquire_chunk_for_writing(&smb, 0, 1, &hdr, NULL, NULL), TG_SMB_ESTATE);
    assert_int_equal(tg_smb_release_chunk_as_free(&smb, 0, 1), TG_SMB_ESTATE);

    /* service: Complete -> BeingRead -> Free, header zeroed */
    unsigned layout = 0;
    assert_int_equal(tg_smb_acquire_chunk_for_reading(&smb, 0, 1, &layout), TG_SMB_OK);
    assert_int_equal(layout, TG_SMB_LAYOUT_DIV4);
    assert_int_equal(tg_smb_word_chunk_state(word(&smb, 0), 1), TG_SMB_CHUNK_BEING_READ);
    assert_int_equal(tg_smb_acquire_chunk_for_reading(&smb, 0, 1, NULL), TG_SMB_ESTATE);
    assert_int_equal(tg_smb_release_chunk_as_complete(&smb, 0, 1), TG_SMB_ESTATE);
    assert_int_equal(tg_smb_release_complete_chunk_as_free(&smb, 0, 1), TG_SMB_ESTATE);
    uint8_t copy[1020];
    assert_int_equal(tg_smb_copy_chunk(&smb, 0, layout, 1, copy, sizeof(copy) - 1, &d), TG_SMB_EINVAL);
    assert_int_equal(tg_smb_copy_chunk(&smb, 0, layout, 1, copy, sizeof(copy), &d), 1020);
    assert_int_equal(d.chunk_id, 7);
    assert_int_equal(d.packets, 0x0402);
    assert_int_equal(tg_smb_release_chunk_as_free(&smb, 0, 1), TG_SMB_OK);
    const uint8_t zero[8] = {0};
    assert_memory_equal(c1, zero, 8);
    /* chunk 3 still BeingWritten: page stays partitioned */
    assert_int_equal(word(&smb, 0), (3u << 28) | (1u << 6));

    /* last chunk freed (emulation path) -> page de-partitioned */
    assert_int_equal(tg_smb_release_chunk_as_complete(&smb, 0, 3), TG_SMB_OK);
    assert_int_equal(tg_smb_release_complete_chunk_as_free(&smb, 0, 3), TG_SMB_OK);
    assert_int_equal(word(&smb, 0), 0);
    assert_memory_equal(c3, zero, 8);
    /* and it can be partitioned afresh with another layout */
    assert_int_equal(tg_smb_partition_page(&smb, 0, TG_SMB_LAYOUT_DIV14), TG_SMB_OK);
    free(mem);
}

static void test_service_free_departitions(void **state)
{
    (void)state;
    uint8_t *mem = new_mem(4096);
    struct tg_smb smb;
    assert_int_equal(tg_smb_init(&smb, mem, 4096, 4096), TG_SMB_OK);
    struct tg_smb_chunk_header hdr = {.chunk_id = 1, .writer_id = 1, .packets = 0};
    assert_int_equal(tg_smb_partition_page(&smb, 0, TG_SMB_LAYOUT_DIV2), TG_SMB_OK);
    assert_int_equal(tg_smb_acquire_chunk_for_writing(&smb, 0, 0, &hdr, NULL, NULL), TG_SMB_OK);
    assert_int_equal(tg_smb_acquire_chunk_for_writing(&smb, 0, 1, &hdr, NULL, NULL), TG_SMB_OK);
    for (unsigned k = 0; k < 2; k++) {
        assert_int_equal(tg_smb_release_chunk_as_complete(&smb, 0, k), TG_SMB_OK);
        assert_int_equal(tg_smb_acquire_chunk_for_reading(&smb, 0, k, NULL), TG_SMB_OK);
    }
    assert_int_equal(tg_smb_release_chunk_as_free(&smb, 0, 0), TG_SMB_OK);
    assert_int_equal(word(&smb, 0), (2u << 28) | (2u << 2));
    assert_int_equal(tg_smb_release_chunk_as_free(&smb, 0, 1), TG_SMB_OK);
    assert_int_equal(word(&smb, 0), 0);
    free(mem);
}

/* A hostile producer writes garbage words: nothing may index past the page. */
static void test_hostile_words(void **state)
{
    (void)state;
    uint8_t *mem = new_mem(2 * 4096);
    struct tg_smb smb;
    assert_int_equal(tg_smb_init(&smb, mem, 2 * 4096, 4096), TG_SMB_OK);
    uint32_t *w0 = (uint32_t *)(void *)mem;
    uint8_t copy[4096];

    /* reserved layouts 6 and 7, with every chunk "complete" */
    for (uint32_t layout = 6; layout <= 7; layout++) {
        *w0 = layout << 28 | 0x0FFFFFFF;
        assert_int_equal(tg_smb_acquire_chunk_for_reading(&smb, 0, 0, NULL), TG_SMB_EINVAL);
        assert_int_equal(tg_smb_copy_chunk(&smb, 0, layout, 0, copy, sizeof(copy), NULL), TG_SMB_EINVAL);
    }
    /* Div1 with states set for chunks that do not exist */
    *w0 = 1u << 28 | 0x0FFFFFFF;
    assert_int_equal(tg_smb_acquire_chunk_for_reading(&smb, 0, 0, NULL), TG_SMB_OK);
    for (unsigned k = 1; k < 20; k++)
        assert_int_equal(tg_smb_acquire_chunk_for_reading(&smb, 0, k, NULL), TG_SMB_EINVAL);
    assert_int_equal(tg_smb_copy_chunk(&smb, 0, 1, 1, copy, sizeof(copy), NULL), TG_SMB_EINVAL);
    /* freeing chunk 0 must not de-partition while garbage states remain */
    assert_int_equal(tg_smb_release_chunk_as_free(&smb, 0, 0), TG_SMB_OK);
    assert_int_equal(*w0, (1u << 28) | (0x0FFFFFFFu & ~3u));
    /* bit 31 set: layout field still decodes as Div1 */
    *w0 = 0x80000000u | 1u << 28 | 3u;
    assert_int_equal(tg_smb_acquire_chunk_for_reading(&smb, 0, 0, NULL), TG_SMB_OK);
    assert_int_equal(tg_smb_page_header(&smb, 5), 0); /* out of range reads as free */
    assert_null(tg_smb_chunk_ptr(&smb, 2, 1, 0, NULL));
    free(mem);
}

static void test_find_free_chunk(void **state)
{
    (void)state;
    uint8_t *mem = new_mem(3 * 4096);
    struct tg_smb smb;
    assert_int_equal(tg_smb_init(&smb, mem, 3 * 4096, 4096), TG_SMB_OK);
    struct tg_smb_chunk_header hdr = {.chunk_id = 0, .writer_id = 9, .packets = 0};
    size_t cursor = 0, page;
    unsigned chunk;
    uint8_t *ptr;
    size_t size;
    for (size_t i = 0; i < 3; i++) {
        hdr.chunk_id = (uint32_t)i;
        assert_int_equal(tg_smb_find_free_chunk(&smb, TG_SMB_LAYOUT_DIV1, &cursor, &hdr, &page, &chunk, &ptr, &size),
                         TG_SMB_OK);
        assert_int_equal(page, i);
        assert_int_equal(chunk, 0);
        assert_int_equal(size, 4088);
        assert_int_equal(word(&smb, i), (1u << 28) | 1u);
    }
    assert_int_equal(tg_smb_find_free_chunk(&smb, TG_SMB_LAYOUT_DIV1, &cursor, &hdr, &page, &chunk, &ptr, &size),
                     TG_SMB_EBUSY);
    /* free page 1 through the service path; the scan finds it again */
    assert_int_equal(tg_smb_release_chunk_as_complete(&smb, 1, 0), TG_SMB_OK);
    assert_int_equal(tg_smb_acquire_chunk_for_reading(&smb, 1, 0, NULL), TG_SMB_OK);
    assert_int_equal(tg_smb_release_chunk_as_free(&smb, 1, 0), TG_SMB_OK);
    assert_int_equal(word(&smb, 1), 0);
    assert_int_equal(tg_smb_find_free_chunk(&smb, TG_SMB_LAYOUT_DIV1, &cursor, &hdr, &page, &chunk, &ptr, &size),
                     TG_SMB_OK);
    assert_int_equal(page, 1);
    /* pages partitioned by someone else with another layout are used as is */
    memset(mem, 0, 3 * 4096);
    assert_int_equal(tg_smb_partition_page(&smb, 0, TG_SMB_LAYOUT_DIV7), TG_SMB_OK);
    cursor = 0;
    assert_int_equal(tg_smb_find_free_chunk(&smb, TG_SMB_LAYOUT_DIV1, &cursor, &hdr, &page, &chunk, &ptr, &size),
                     TG_SMB_OK);
    assert_int_equal(page, 0);
    assert_int_equal(size, 584);
    assert_int_equal(tg_smb_find_free_chunk(&smb, TG_SMB_LAYOUT_DIV1, &cursor, &hdr, &page, &chunk, &ptr, &size),
                     TG_SMB_OK);
    assert_int_equal(page, 0);
    assert_int_equal(chunk, 1);
    free(mem);
}

/* ---- concurrency: producers and a service fighting over one SMB ---- */

#define STRESS_PRODUCERS 4
#define STRESS_ROUNDS 3000

struct stress {
    struct tg_smb smb;
    _Atomic unsigned long committed;
    _Atomic unsigned long consumed;
    _Atomic int producers_done;
    _Atomic int errors;
};

struct stress_arg {
    struct stress *st;
    uint16_t id;
};

static void *stress_producer(void *p)
{
    struct stress_arg *a = p;
    struct stress *st = a->st;
    size_t cursor = a->id;
    for (unsigned i = 0; i < STRESS_ROUNDS; i++) {
        struct tg_smb_chunk_header hdr = {.chunk_id = i, .writer_id = a->id, .packets = 0};
        size_t page, size;
        unsigned chunk;
        uint8_t *ptr;
        while (tg_smb_find_free_chunk(&st->smb, TG_SMB_LAYOUT_DIV4, &cursor, &hdr, &page, &chunk, &ptr, &size) !=
               TG_SMB_OK)
            sched_yield();
        memset(ptr + 8, (int)a->id, size - 8);
        sched_yield();
        /* nobody else may have written into a chunk we own */
        for (size_t b = 8; b < size; b++)
            if (ptr[b] != a->id) {
                st->errors++;
                break;
            }
        tg_smb_chunk_store_packets(ptr, tg_smb_make_packets(1, 0));
        int rc;
        while ((rc = tg_smb_release_chunk_as_complete(&st->smb, page, chunk)) == TG_SMB_EBUSY)
            ;
        if (rc != TG_SMB_OK)
            st->errors++;
        st->committed++;
    }
    st->producers_done++;
    return NULL;
}

static void *stress_service(void *p)
{
    struct stress *st = p;
    uint8_t copy[4096];
    for (;;) {
        int done = st->producers_done;
        for (size_t page = 0; page < st->smb.num_pages; page++) {
            uint32_t w = tg_smb_page_header(&st->smb, page);
            unsigned n = tg_smb_layout_num_chunks(tg_smb_word_layout(w));
            for (unsigned k = 0; k < n; k++) {
                if (tg_smb_word_chunk_state(w, k) != TG_SMB_CHUNK_COMPLETE)
                    continue;
                unsigned layout;
                if (tg_smb_acquire_chunk_for_reading(&st->smb, page, k, &layout) != TG_SMB_OK)
                    continue;
                struct tg_smb_chunk_header h;
                long cs = tg_smb_copy_chunk(&st->smb, page, layout, k, copy, sizeof(copy), &h);
                if (cs <= 8 || copy[8] != h.writer_id || copy[cs - 1] != h.writer_id || h.packets != 1)
                    st->errors++;
                int rc;
                while ((rc = tg_smb_release_chunk_as_free(&st->smb, page, k)) == TG_SMB_EBUSY)
                    ;
                if (rc != TG_SMB_OK)
                    st->errors++;
                st->consumed++;
            }
        }
        if (done == STRESS_PRODUCERS && st->consumed == st->committed)
            break;
        sched_yield();
    }
    return NULL;
}

static void test_concurrent_transitions(void **state)
{
    (void)state;
    struct stress *st = calloc(1, sizeof(*st));
    uint8_t *mem = new_mem(4 * 4096);
    assert_int_equal(tg_smb_init(&st->smb, mem, 4 * 4096, 4096), TG_SMB_OK);
    pthread_t prod[STRESS_PRODUCERS], svc;
    struct stress_arg args[STRESS_PRODUCERS];
    assert_int_equal(pthread_create(&svc, NULL, stress_service, st), 0);
    for (int i = 0; i < STRESS_PRODUCERS; i++) {
        args[i].st = st;
        args[i].id = (uint16_t)(i + 1);
        assert_int_equal(pthread_create(&prod[i], NULL, stress_producer, &args[i]), 0);
    }
    for (int i = 0; i < STRESS_PRODUCERS; i++)
        pthread_join(prod[i], NULL);
    pthread_join(svc, NULL);
    assert_int_equal(st->errors, 0);
    assert_int_equal(st->committed, STRESS_PRODUCERS * STRESS_ROUNDS);
    assert_int_equal(st->consumed, STRESS_PRODUCERS * STRESS_ROUNDS);
    for (size_t page = 0; page < 4; page++)
        assert_int_equal(tg_smb_page_header(&st->smb, page), 0);
    free(mem);
    free(st);
}

/* The smallest layout that holds a chunk, and a search that never hands out a smaller chunk. */
static void test_layout_for_size(void **state)
{
    (void)state;
    size_t c14 = tg_smb_chunk_size(4096, TG_SMB_LAYOUT_DIV14), c7 = tg_smb_chunk_size(4096, TG_SMB_LAYOUT_DIV7);
    assert_int_equal(tg_smb_layout_for_size(4096, 8), TG_SMB_LAYOUT_DIV14);
    assert_int_equal(tg_smb_layout_for_size(4096, c14), TG_SMB_LAYOUT_DIV14);
    assert_int_equal(tg_smb_layout_for_size(4096, c14 + 1), TG_SMB_LAYOUT_DIV7);
    assert_int_equal(tg_smb_layout_for_size(4096, c7 + 1), TG_SMB_LAYOUT_DIV4);
    assert_int_equal(tg_smb_layout_for_size(4096, 4088), TG_SMB_LAYOUT_DIV1);
    assert_int_equal(tg_smb_layout_for_size(4096, 4089), 0);

    static uint8_t mem[2 * 4096] __attribute__((aligned(8)));
    memset(mem, 0, sizeof mem);
    struct tg_smb smb;
    assert_int_equal(tg_smb_init(&smb, mem, sizeof mem, 4096), TG_SMB_OK);
    struct tg_smb_chunk_header h = {.chunk_id = 1, .writer_id = 1};
    size_t cursor = 0, page, size;
    unsigned chunk;
    uint8_t *ptr;
    /* page 0 becomes Div14 for a small chunk */
    assert_int_equal(tg_smb_find_free_chunk_fit(&smb, 100, &cursor, &h, &page, &chunk, &ptr, &size), TG_SMB_OK);
    assert_int_equal(page, 0);
    assert_int_equal(size, c14);
    /* a big one skips page 0's small free chunks for page 1 */
    assert_int_equal(tg_smb_find_free_chunk_fit(&smb, 3000, &cursor, &h, &page, &chunk, &ptr, &size), TG_SMB_OK);
    assert_int_equal(page, 1);
    assert_int_equal(size, tg_smb_chunk_size(4096, TG_SMB_LAYOUT_DIV1));
    /* another big one: no page has room (page 0's chunks are too small) */
    assert_int_equal(tg_smb_find_free_chunk_fit(&smb, 3000, &cursor, &h, &page, &chunk, &ptr, &size), TG_SMB_EBUSY);
    assert_int_equal(tg_smb_find_free_chunk_fit(&smb, 5000, &cursor, &h, &page, &chunk, &ptr, &size), TG_SMB_EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_constants),
        cmocka_unit_test(test_page_sizes),
        cmocka_unit_test(test_chunk_size_table),
        cmocka_unit_test(test_chunk_header_codec),
        cmocka_unit_test(test_init),
        cmocka_unit_test(test_state_machine),
        cmocka_unit_test(test_service_free_departitions),
        cmocka_unit_test(test_hostile_words),
        cmocka_unit_test(test_find_free_chunk),
        cmocka_unit_test(test_layout_for_size),
        cmocka_unit_test(test_concurrent_transitions),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
