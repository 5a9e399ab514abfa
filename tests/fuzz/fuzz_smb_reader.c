/* fuzz_smb_reader.c: libFuzzer target for the service's view of an SMB that a
 * hostile producer controls: arbitrary bytes laid out as SMB pages, walked
 * the way CommitData and scraping walk them (header word, state transitions,
 * chunk copies, fragment iteration), and the copies fed to a trace buffer and
 * read back.
 *
 * Input: byte 0 picks the page size (4 KiB x 1..16) and the page count (1..2);
 * the rest fills the pages (zero-padded). */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "service/trace_buffer.h"
#include "smb/smb_abi.h"
#include "smb/smb_fragments.h"

#include "fuzz_check.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void walk_fragments(const uint8_t *chunk, size_t chunk_size)
{
    struct tg_smb_chunk_header h;
    tg_smb_chunk_header_decode(chunk, &h);
    const uint8_t *payload = chunk + TG_SMB_CHUNK_HEADER_SIZE;
    const size_t len = chunk_size - TG_SMB_CHUNK_HEADER_SIZE;
    struct tg_smb_frag_iter it;
    struct tg_smb_fragment f;
    tg_smb_frag_iter_init(&it, payload, len, tg_smb_packets_count(h.packets), tg_smb_packets_flags(h.packets));
    unsigned n = 0;
    int rc;
    while ((rc = tg_smb_frag_next(&it, &f)) == TG_SMB_FRAG_OK) {
        CHECK(n++ < TG_SMB_MAX_PACKETS_PER_CHUNK);
        if (f.is_drop) {
            CHECK(f.data == NULL && f.len == 0);
        } else {
            CHECK(f.data >= payload && f.data + f.len <= payload + len);
        }
        CHECK(tg_smb_frag_iter_offset(&it) <= len);
    }
    CHECK(rc == TG_SMB_FRAG_END || rc == TG_SMB_FRAG_ABI_VIOLATION);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    const size_t page_size = 4096u * (1u + (data[0] & 15u));
    const size_t pages = 1u + ((data[0] >> 4) & 1u);
    const size_t smb_size = page_size * pages;
    uint8_t *mem = aligned_alloc(4096, smb_size);
    if (!mem)
        return 0;
    memset(mem, 0, smb_size);
    memcpy(mem, data + 1, size - 1 < smb_size ? size - 1 : smb_size);

    struct tg_smb smb;
    CHECK(tg_smb_init(&smb, mem, smb_size, page_size) == TG_SMB_OK);
    struct tg_trace_buffer *tb = tg_trace_buffer_new(256 * 1024, (data[0] & 0x20) ? TG_TB_DISCARD : TG_TB_RING_BUFFER);
    const struct tg_tb_producer prod = {.producer_id = 1, .uid = 1, .pid = 1, .machine_id = 0};
    uint8_t *copy = malloc(TG_SMB_MAX_PAGE_SIZE);
    if (!tb || !copy)
        goto out;

    for (size_t page = 0; page < pages; page++) {
        uint32_t word = tg_smb_page_header(&smb, page);
        unsigned layout = tg_smb_word_layout(word);
        /* scraping view: every layout and index the word claims, no state change */
        for (unsigned k = 0; k < 16; k++) {
            struct tg_smb_chunk_header h;
            long n = tg_smb_copy_chunk(&smb, page, layout, k, copy, TG_SMB_MAX_PAGE_SIZE, &h);
            if (n < 0) {
                CHECK(k >= tg_smb_layout_num_chunks(layout));
                continue;
            }
            CHECK((size_t)n == tg_smb_chunk_size(page_size, layout));
            walk_fragments(copy, (size_t)n);
            bool complete = tg_smb_word_chunk_state(word, k) == TG_SMB_CHUNK_COMPLETE;
            (void)tg_trace_buffer_copy_chunk_bytes(tb, &prod, copy, (size_t)n, complete);
        }
        /* CommitData view: Complete -> BeingRead -> copy -> Free */
        for (unsigned k = 0; k < 16; k++) {
            unsigned l;
            if (tg_smb_acquire_chunk_for_reading(&smb, page, k, &l) != TG_SMB_OK)
                continue;
            struct tg_smb_chunk_header h;
            long n = tg_smb_copy_chunk(&smb, page, l, k, copy, TG_SMB_MAX_PAGE_SIZE, &h);
            CHECK(n > 0);
            (void)tg_trace_buffer_copy_chunk(tb, &prod, h.writer_id, h.chunk_id,
                                             (uint16_t)tg_smb_packets_count(h.packets),
                                             (uint8_t)tg_smb_packets_flags(h.packets), true,
                                             copy + TG_SMB_CHUNK_HEADER_SIZE, (size_t)n - TG_SMB_CHUNK_HEADER_SIZE);
            CHECK(tg_smb_release_chunk_as_free(&smb, page, k) == TG_SMB_OK);
        }
    }
    /* a producer then allocates from whatever is left */
    size_t cursor = 0, pg, csize;
    unsigned ck;
    uint8_t *cptr;
    struct tg_smb_chunk_header nh = {.chunk_id = 1, .writer_id = 1, .packets = 0};
    while (tg_smb_find_free_chunk(&smb, TG_SMB_LAYOUT_DIV1, &cursor, &nh, &pg, &ck, &cptr, &csize) == TG_SMB_OK) {
        CHECK(cptr >= mem && cptr + csize <= mem + smb_size);
        CHECK(tg_smb_release_chunk_as_complete(&smb, pg, ck) == TG_SMB_OK);
    }

    struct tg_tb_packet pkt;
    struct tg_tb_seq_info info;
    size_t total = 0;
    while (tg_trace_buffer_read_packet(tb, &pkt, &info)) {
        size_t sum = 0;
        for (size_t i = 0; i < pkt.num_slices; i++) {
            sum += pkt.slices[i].len;
            if (pkt.slices[i].len) /* touch both ends: ASan checks the bounds */
                total += pkt.slices[i].data[0] + pkt.slices[i].data[pkt.slices[i].len - 1];
        }
        CHECK(sum == pkt.size);
    }
    (void)total;
out:
    tg_trace_buffer_free(tb);
    free(copy);
    free(mem);
    return 0;
}
