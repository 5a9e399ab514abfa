/* smb_abi.c: SMB geometry, header word state machine and safe chunk copies
 * (see smb/smb_abi.h). */
#include "smb/smb_abi.h"

#include <sched.h>
#include <stdatomic.h>
#include <string.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the SMB ABI is little-endian; the atomic header accesses assume a little-endian host"
#endif

_Static_assert(sizeof(_Atomic uint32_t) == sizeof(uint32_t), "atomic u32 must overlay the header word");
_Static_assert(sizeof(_Atomic uint16_t) == sizeof(uint16_t), "atomic u16 must overlay the packets word");

/* Attempts of a CAS loop before giving up. A CAS only fails when another
 * party changed the word in between; the loop re-validates everything each
 * round, and the bound keeps a hostile producer that flips bits forever from
 * pinning the service thread. */
#define TG_SMB_CAS_ATTEMPTS 64
#define TG_SMB_CAS_YIELD_AFTER 32

static const unsigned k_layout_chunks[TG_SMB_NUM_LAYOUTS] = {0, 1, 2, 4, 7, 14, 0, 0};

bool tg_smb_page_size_valid(size_t page_size)
{
    return page_size >= TG_SMB_MIN_PAGE_SIZE && page_size <= TG_SMB_MAX_PAGE_SIZE &&
           page_size % TG_SMB_MIN_PAGE_SIZE == 0;
}

unsigned tg_smb_layout_num_chunks(unsigned layout)
{
    return layout < TG_SMB_NUM_LAYOUTS ? k_layout_chunks[layout] : 0;
}

size_t tg_smb_chunk_size(size_t page_size, unsigned layout)
{
    unsigned n = tg_smb_layout_num_chunks(layout);
    if (n == 0 || !tg_smb_page_size_valid(page_size))
        return 0;
    return ((page_size - TG_SMB_PAGE_HEADER_SIZE) / n) & ~(size_t)(TG_SMB_CHUNK_ALIGNMENT - 1);
}

size_t tg_smb_chunk_offset_in_page(size_t page_size, unsigned layout, unsigned chunk)
{
    return TG_SMB_PAGE_HEADER_SIZE + (size_t)chunk * tg_smb_chunk_size(page_size, layout);
}

void tg_smb_chunk_header_decode(const uint8_t *p, struct tg_smb_chunk_header *h)
{
    h->chunk_id = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
    h->writer_id = (uint16_t)(p[4] | p[5] << 8);
    h->packets = (uint16_t)(p[6] | p[7] << 8);
}

void tg_smb_chunk_header_encode(uint8_t *p, const struct tg_smb_chunk_header *h)
{
    p[0] = (uint8_t)h->chunk_id;
    p[1] = (uint8_t)(h->chunk_id >> 8);
    p[2] = (uint8_t)(h->chunk_id >> 16);
    p[3] = (uint8_t)(h->chunk_id >> 24);
    p[4] = (uint8_t)h->writer_id;
    p[5] = (uint8_t)(h->writer_id >> 8);
    p[6] = (uint8_t)h->packets;
    p[7] = (uint8_t)(h->packets >> 8);
}

bool tg_smb_writer_id_valid(uint32_t writer_id)
{
    return writer_id >= 1 && writer_id <= TG_SMB_MAX_WRITER_ID;
}

int tg_smb_init(struct tg_smb *smb, void *base, size_t size, size_t page_size)
{
    memset(smb, 0, sizeof(*smb));
    if (!base || !tg_smb_page_size_valid(page_size) || size == 0 || size % page_size != 0 ||
        ((uintptr_t)base & 3u) != 0)
        return TG_SMB_EINVAL;
    smb->base = (uint8_t *)base;
    smb->size = size;
    smb->page_size = page_size;
    smb->num_pages = size / page_size;
    return TG_SMB_OK;
}

static _Atomic uint32_t *header_word(const struct tg_smb *smb, size_t page)
{
    return (_Atomic uint32_t *)(void *)(smb->base + page * smb->page_size);
}

uint32_t tg_smb_page_header(const struct tg_smb *smb, size_t page)
{
    if (page >= smb->num_pages)
        return 0;
    return atomic_load_explicit(header_word(smb, page), memory_order_acquire);
}

uint8_t *tg_smb_chunk_ptr(const struct tg_smb *smb, size_t page, unsigned layout, unsigned chunk,
                          size_t *chunk_size)
{
    size_t csize = tg_smb_chunk_size(smb->page_size, layout);
    if (page >= smb->num_pages || csize == 0 || chunk >= tg_smb_layout_num_chunks(layout))
        return NULL;
    if (chunk_size)
        *chunk_size = csize;
    return smb->base + page * smb->page_size + TG_SMB_PAGE_HEADER_SIZE + (size_t)chunk * csize;
}

/* The one CAS loop behind every per-chunk transition: moves chunk from `from`
 * to `to`, re-validating the layout and the chunk index against the word it is
 * about to replace. When `to` is Free the chunk header is zeroed before the
 * chunk is published as free, and a page whose states all become Free is
 * de-partitioned (word = 0). */
static int chunk_transition(struct tg_smb *smb, size_t page, unsigned chunk, enum tg_smb_chunk_state from,
                            enum tg_smb_chunk_state to, unsigned *layout_out)
{
    if (page >= smb->num_pages || chunk >= TG_SMB_MAX_CHUNKS_PER_PAGE)
        return TG_SMB_EINVAL;
    _Atomic uint32_t *w = header_word(smb, page);
    uint32_t cur = atomic_load_explicit(w, memory_order_acquire);
    const unsigned shift = chunk * TG_SMB_CHUNK_STATE_BITS;
    for (int attempt = 0; attempt < TG_SMB_CAS_ATTEMPTS; attempt++) {
        unsigned layout = tg_smb_word_layout(cur);
        if (chunk >= tg_smb_layout_num_chunks(layout))
            return TG_SMB_EINVAL; /* unpartitioned, reserved layout, or index past the layout */
        if (tg_smb_word_chunk_state(cur, chunk) != from)
            return TG_SMB_ESTATE;
        uint32_t next = (cur & ~(TG_SMB_CHUNK_STATE_MASK << shift)) | ((uint32_t)to << shift);
        if (to == TG_SMB_CHUNK_FREE) {
            /* Whoever frees a chunk owns it until the CAS below: clear the
             * header so the next writer (and any scraper) starts from zeros. */
            uint8_t *c = tg_smb_chunk_ptr(smb, page, layout, chunk, NULL);
            memset(c, 0, TG_SMB_CHUNK_HEADER_SIZE);
            if ((next & TG_SMB_CHUNK_STATES_MASK) == 0)
                next = 0;
        }
        if (atomic_compare_exchange_weak_explicit(w, &cur, next, memory_order_acq_rel, memory_order_acquire)) {
            if (layout_out)
                *layout_out = layout;
            return TG_SMB_OK;
        }
        if (attempt >= TG_SMB_CAS_YIELD_AFTER)
            sched_yield();
    }
    return TG_SMB_EBUSY;
}

int tg_smb_partition_page(struct tg_smb *smb, size_t page, unsigned layout)
{
    if (page >= smb->num_pages || tg_smb_layout_num_chunks(layout) == 0)
        return TG_SMB_EINVAL;
    uint32_t expected = 0;
    uint32_t next = (uint32_t)layout << TG_SMB_LAYOUT_SHIFT;
    if (atomic_compare_exchange_strong_explicit(header_word(smb, page), &expected, next, memory_order_acq_rel,
                                                memory_order_acquire))
        return TG_SMB_OK;
    return TG_SMB_ESTATE;
}

void tg_smb_chunk_store_packets(uint8_t *chunk, uint16_t packets)
{
    atomic_store_explicit((_Atomic uint16_t *)(void *)(chunk + 6), packets, memory_order_release);
}

uint16_t tg_smb_chunk_load_packets(const uint8_t *chunk)
{
    return atomic_load_explicit((_Atomic uint16_t *)(void *)(uintptr_t)(chunk + 6), memory_order_acquire);
}

int tg_smb_acquire_chunk_for_writing(struct tg_smb *smb, size_t page, unsigned chunk,
                                     const struct tg_smb_chunk_header *hdr, uint8_t **chunk_out,
                                     size_t *size_out)
{
    unsigned layout;
    int rc = chunk_transition(smb, page, chunk, TG_SMB_CHUNK_FREE, TG_SMB_CHUNK_BEING_WRITTEN, &layout);
    if (rc != TG_SMB_OK)
        return rc;
    size_t csize;
    uint8_t *c = tg_smb_chunk_ptr(smb, page, layout, chunk, &csize);
    /* chunk_id and writer_id first, then the packets word with release order so
     * that anyone who observes a non-zero count also observes the ids. */
    struct tg_smb_chunk_header h = *hdr;
    h.packets = 0;
    tg_smb_chunk_header_encode(c, &h);
    tg_smb_chunk_store_packets(c, hdr->packets);
    if (chunk_out)
        *chunk_out = c;
    if (size_out)
        *size_out = csize;
    return TG_SMB_OK;
}

int tg_smb_release_chunk_as_complete(struct tg_smb *smb, size_t page, unsigned chunk)
{
    return chunk_transition(smb, page, chunk, TG_SMB_CHUNK_BEING_WRITTEN, TG_SMB_CHUNK_COMPLETE, NULL);
}

int tg_smb_release_complete_chunk_as_free(struct tg_smb *smb, size_t page, unsigned chunk)
{
    return chunk_transition(smb, page, chunk, TG_SMB_CHUNK_COMPLETE, TG_SMB_CHUNK_FREE, NULL);
}

int tg_smb_acquire_chunk_for_reading(struct tg_smb *smb, size_t page, unsigned chunk, unsigned *layout_out)
{
    return chunk_transition(smb, page, chunk, TG_SMB_CHUNK_COMPLETE, TG_SMB_CHUNK_BEING_READ, layout_out);
}

int tg_smb_release_chunk_as_free(struct tg_smb *smb, size_t page, unsigned chunk)
{
    return chunk_transition(smb, page, chunk, TG_SMB_CHUNK_BEING_READ, TG_SMB_CHUNK_FREE, NULL);
}

/* The search behind both finders: free pages are partitioned with `layout`; a Free chunk of at
 * least min_size bytes is taken. */
static int find_free(struct tg_smb *smb, unsigned layout, size_t min_size, size_t *cursor,
                     const struct tg_smb_chunk_header *hdr, size_t *page_out, unsigned *chunk_out, uint8_t **ptr_out,
                     size_t *size_out)
{
    if (tg_smb_layout_num_chunks(layout) == 0 || smb->num_pages == 0)
        return TG_SMB_EINVAL;
    size_t start = *cursor < smb->num_pages ? *cursor : 0;
    for (size_t i = 0; i < smb->num_pages; i++) {
        size_t page = (start + i) % smb->num_pages;
        uint32_t word = tg_smb_page_header(smb, page);
        if (word == 0) {
            /* Losing the race to another writer is fine: it partitioned the
             * page for us (maybe with another layout); use what is there. */
            (void)tg_smb_partition_page(smb, page, layout);
            word = tg_smb_page_header(smb, page);
        }
        unsigned wl = tg_smb_word_layout(word);
        if (tg_smb_chunk_size(smb->page_size, wl) < min_size)
            continue;
        unsigned n = tg_smb_layout_num_chunks(wl);
        for (unsigned k = 0; k < n; k++) {
            if (tg_smb_word_chunk_state(word, k) != TG_SMB_CHUNK_FREE)
                continue;
            if (tg_smb_acquire_chunk_for_writing(smb, page, k, hdr, ptr_out, size_out) == TG_SMB_OK) {
                *cursor = page;
                *page_out = page;
                *chunk_out = k;
                return TG_SMB_OK;
            }
        }
    }
    return TG_SMB_EBUSY;
}

int tg_smb_find_free_chunk(struct tg_smb *smb, unsigned layout, size_t *cursor,
                           const struct tg_smb_chunk_header *hdr, size_t *page_out,
                           unsigned *chunk_out, uint8_t **ptr_out, size_t *size_out)
{
    return find_free(smb, layout, 0, cursor, hdr, page_out, chunk_out, ptr_out, size_out);
}

unsigned tg_smb_layout_for_size(size_t page_size, size_t min_size)
{
    for (unsigned layout = TG_SMB_LAYOUT_DIV14; layout >= TG_SMB_LAYOUT_DIV1; layout--)
        if (tg_smb_chunk_size(page_size, layout) >= min_size)
            return layout;
    return 0;
}

int tg_smb_find_free_chunk_fit(struct tg_smb *smb, size_t min_size, size_t *cursor,
                               const struct tg_smb_chunk_header *hdr, size_t *page_out, unsigned *chunk_out,
                               uint8_t **ptr_out, size_t *size_out)
{
    unsigned layout = tg_smb_layout_for_size(smb->page_size, min_size);
    if (layout == 0)
        return TG_SMB_EINVAL;
    return find_free(smb, layout, min_size, cursor, hdr, page_out, chunk_out, ptr_out, size_out);
}

long tg_smb_copy_chunk(const struct tg_smb *smb, size_t page, unsigned layout, unsigned chunk,
                       uint8_t *out, size_t out_cap, struct tg_smb_chunk_header *hdr_out)
{
    size_t csize;
    const uint8_t *c = tg_smb_chunk_ptr(smb, page, layout, chunk, &csize);
    if (!c || out_cap < csize)
        return TG_SMB_EINVAL;
    /* One memcpy out of the mapping; from here on only the copy is looked at,
     * so a producer scribbling over the chunk cannot change what we parse. */
    memcpy(out, c, csize);
    if (hdr_out)
        tg_smb_chunk_header_decode(out, hdr_out);
    return (long)csize;
}

const char *tg_smb_chunk_state_name(enum tg_smb_chunk_state st)
{
    switch (st) {
    case TG_SMB_CHUNK_FREE:
        return "free";
    case TG_SMB_CHUNK_BEING_WRITTEN:
        return "being_written";
    case TG_SMB_CHUNK_BEING_READ:
        return "being_read";
    case TG_SMB_CHUNK_COMPLETE:
        return "complete";
    }
    return "invalid";
}
