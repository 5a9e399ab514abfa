/* smb_abi.h: the shared memory buffer (SMB) layout shared by producers and the
 * service, bit for bit as Perfetto lays it out (perfetto-wire-facts §5).
 *
 * An SMB is num_pages x page_size bytes. Each page starts with an 8-byte page
 * header whose first uint32 (the "header word") holds the page layout (bits
 * 28..30) and 14 two-bit chunk states (bits 0..27). The rest of the page is cut
 * into N equal chunks; each chunk starts with an 8-byte chunk header
 * {chunk_id u32, writer_id u16, packets u16} followed by the payload
 * (fragments, see smb_fragments.h). All integers are little-endian.
 *
 * Ownership: struct tg_smb only describes memory owned by the caller (an mmap
 * of the memfd, or a private buffer for shmem emulation); nothing here
 * allocates or frees.
 *
 * Threading and trust: the header word is only touched through C11 atomics
 * (acquire loads, acq_rel CAS), so several producer threads and the service
 * thread may run the transitions below concurrently on the same SMB. The
 * service must assume a malicious producer can write any byte of the mapping
 * at any time: every function here re-validates the layout and indices it
 * reads, never uses a value from the mapping as an index without a bounds
 * check, and tg_smb_copy_chunk() copies a chunk out so that parsing happens on
 * private memory. */
#ifndef TRACEGATE_SMB_ABI_H
#define TRACEGATE_SMB_ABI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- geometry ---- */
#define TG_SMB_MIN_PAGE_SIZE 4096u
#define TG_SMB_MAX_PAGE_SIZE 65536u
#define TG_SMB_PAGE_HEADER_SIZE 8u
#define TG_SMB_CHUNK_HEADER_SIZE 8u
#define TG_SMB_CHUNK_ALIGNMENT 4u
#define TG_SMB_MAX_CHUNKS_PER_PAGE 14u

/* ---- page header word ---- */
#define TG_SMB_LAYOUT_SHIFT 28
#define TG_SMB_LAYOUT_MASK 0x70000000u
#define TG_SMB_CHUNK_STATES_MASK 0x0FFFFFFFu
#define TG_SMB_CHUNK_STATE_BITS 2
#define TG_SMB_CHUNK_STATE_MASK 0x3u

/* Page layout codes (3 bits). 0 = page not partitioned (free); 6 and 7 are
 * reserved and treated as invalid. */
enum tg_smb_layout {
    TG_SMB_LAYOUT_NONE = 0,
    TG_SMB_LAYOUT_DIV1 = 1,
    TG_SMB_LAYOUT_DIV2 = 2,
    TG_SMB_LAYOUT_DIV4 = 3,
    TG_SMB_LAYOUT_DIV7 = 4,
    TG_SMB_LAYOUT_DIV14 = 5,
};
#define TG_SMB_NUM_LAYOUTS 8

enum tg_smb_chunk_state {
    TG_SMB_CHUNK_FREE = 0,
    TG_SMB_CHUNK_BEING_WRITTEN = 1,
    TG_SMB_CHUNK_BEING_READ = 2,
    TG_SMB_CHUNK_COMPLETE = 3,
};

/* ---- chunk header `packets` word: count in bits 0..9, flags in 10..15 ---- */
#define TG_SMB_PACKETS_COUNT_MASK 0x03FFu
#define TG_SMB_PACKETS_FLAGS_SHIFT 10
#define TG_SMB_MAX_PACKETS_PER_CHUNK 1023u
/* Chunk flags as values of the 6-bit `flags` field ... */
#define TG_SMB_CHUNK_FIRST_CONTINUES 0x01u /* fragment 0 continues chunk_id-1 */
#define TG_SMB_CHUNK_LAST_CONTINUES 0x02u  /* last fragment continues in chunk_id+1 */
#define TG_SMB_CHUNK_NEEDS_PATCHING 0x04u  /* size fields pending via CommitData */
#define TG_SMB_CHUNK_FLAGS_MASK 0x3Fu
/* ... and the same flags as masks on the 16-bit `packets` word. */
#define TG_SMB_PACKETS_FIRST_CONTINUES 0x0400u
#define TG_SMB_PACKETS_LAST_CONTINUES 0x0800u
#define TG_SMB_PACKETS_NEEDS_PATCHING 0x1000u

/* ---- misc ABI constants ---- */
#define TG_SMB_MAX_WRITER_ID 32767u
#define TG_SMB_PACKET_HEADER_SIZE 4u        /* redundant varint fragment length */
#define TG_SMB_PACKET_SIZE_DROP 0x0FFFFFFFu /* "writer abandoned this packet" */

/* Result codes of the state transitions. */
enum tg_smb_status {
    TG_SMB_OK = 0,
    TG_SMB_EINVAL = -1, /* bad page/chunk index, or invalid/unpartitioned layout */
    TG_SMB_ESTATE = -2, /* chunk (or page) is not in the state the transition needs */
    TG_SMB_EBUSY = -3,  /* CAS kept failing under contention; caller may retry */
};

/* A view of an SMB. base must be 4-byte aligned (mmap is page aligned). */
struct tg_smb {
    uint8_t *base;
    size_t size;
    size_t page_size;
    size_t num_pages;
};

/* Decoded chunk header (a private copy, never a pointer into the mapping). */
struct tg_smb_chunk_header {
    uint32_t chunk_id;
    uint16_t writer_id;
    uint16_t packets; /* raw word: count | flags << 10 */
};

/* ---- geometry helpers (pure) ---- */

/* page_size is a multiple of 4096 in [4096, 65536]. */
bool tg_smb_page_size_valid(size_t page_size);
/* Chunks in a page for a layout code; 0 for NONE and the reserved codes. */
unsigned tg_smb_layout_num_chunks(unsigned layout);
/* floor((page_size - 8) / N) & ~3, or 0 when page_size or layout is invalid. */
size_t tg_smb_chunk_size(size_t page_size, unsigned layout);
/* Offset of chunk k from the page start: 8 + k * chunk_size. */
size_t tg_smb_chunk_offset_in_page(size_t page_size, unsigned layout, unsigned chunk);

/* ---- header word decoding (pure) ---- */
static inline unsigned tg_smb_word_layout(uint32_t word)
{
    return (word & TG_SMB_LAYOUT_MASK) >> TG_SMB_LAYOUT_SHIFT;
}
static inline enum tg_smb_chunk_state tg_smb_word_chunk_state(uint32_t word, unsigned chunk)
{
    return (enum tg_smb_chunk_state)((word >> (chunk * TG_SMB_CHUNK_STATE_BITS)) & TG_SMB_CHUNK_STATE_MASK);
}
static inline unsigned tg_smb_packets_count(uint16_t packets)
{
    return packets & TG_SMB_PACKETS_COUNT_MASK;
}
static inline unsigned tg_smb_packets_flags(uint16_t packets)
{
    return (unsigned)packets >> TG_SMB_PACKETS_FLAGS_SHIFT;
}
static inline uint16_t tg_smb_make_packets(unsigned count, unsigned flags)
{
    return (uint16_t)((count & TG_SMB_PACKETS_COUNT_MASK) | ((flags & TG_SMB_CHUNK_FLAGS_MASK) << TG_SMB_PACKETS_FLAGS_SHIFT));
}

/* Decodes/encodes the 8 header bytes at p (little-endian). */
void tg_smb_chunk_header_decode(const uint8_t *p, struct tg_smb_chunk_header *h);
void tg_smb_chunk_header_encode(uint8_t *p, const struct tg_smb_chunk_header *h);
/* writer_id in 1..32767. Other fields carry no invariant the ABI can check. */
bool tg_smb_writer_id_valid(uint32_t writer_id);

/* ---- SMB view ---- */

/* Describes size bytes at base. Fails (TG_SMB_EINVAL) unless page_size is
 * valid, size is a non-zero multiple of page_size and base is 4-aligned. */
int tg_smb_init(struct tg_smb *smb, void *base, size_t size, size_t page_size);

/* Acquire-load of page's header word; 0 when page is out of range. */
uint32_t tg_smb_page_header(const struct tg_smb *smb, size_t page);

/* Pointer to chunk `chunk` of `page` assuming `layout`, and its size, after
 * checking page < num_pages, layout valid and chunk < num_chunks(layout).
 * Returns NULL on a bad index. The pointer is into shared memory. */
uint8_t *tg_smb_chunk_ptr(const struct tg_smb *smb, size_t page, unsigned layout, unsigned chunk,
                          size_t *chunk_size);

/* ---- producer-side transitions ---- */

/* Partitions a free page: CAS of the whole word 0 -> layout << 28. Fails with
 * TG_SMB_ESTATE when the page is already partitioned. */
int tg_smb_partition_page(struct tg_smb *smb, size_t page, unsigned layout);

/* Free -> BeingWritten on a partitioned page, then writes `hdr` into the chunk
 * header (release order: a reader that sees count > 0 sees the header). On
 * success *chunk_out and *size_out (either may be NULL) give the chunk. */
int tg_smb_acquire_chunk_for_writing(struct tg_smb *smb, size_t page, unsigned chunk,
                                     const struct tg_smb_chunk_header *hdr, uint8_t **chunk_out,
                                     size_t *size_out);

/* BeingWritten -> Complete. */
int tg_smb_release_chunk_as_complete(struct tg_smb *smb, size_t page, unsigned chunk);

/* Emulation mode only (the service never maps this buffer): Complete -> Free
 * by the producer itself, zeroing the chunk header and de-partitioning the
 * page when every chunk is free again. */
int tg_smb_release_complete_chunk_as_free(struct tg_smb *smb, size_t page, unsigned chunk);

/* Round-robin search for a free chunk, as the SDK's arbiter does: starting at
 * *cursor, partitions free pages with `layout`, takes the first Free chunk of
 * any partitioned page and stamps `hdr` into it. Advances *cursor. Returns
 * TG_SMB_OK with *page_out, *chunk_out, *ptr_out and *size_out set, or TG_SMB_EBUSY
 * when every chunk is taken (SMB full). */
int tg_smb_find_free_chunk(struct tg_smb *smb, unsigned layout, size_t *cursor,
                           const struct tg_smb_chunk_header *hdr, size_t *page_out,
                           unsigned *chunk_out, uint8_t **ptr_out, size_t *size_out);
/* The smallest layout whose chunks hold min_size bytes (header included) in pages of page_size;
 * 0 when not even a whole page's chunk does. */
unsigned tg_smb_layout_for_size(size_t page_size, size_t min_size);
/* As tg_smb_find_free_chunk, for a chunk of at least min_size bytes: free pages are partitioned
 * with tg_smb_layout_for_size's layout, and only chunks that big are taken (a small chunk does not
 * take a whole page, a big one is never put where it does not fit). TG_SMB_EINVAL when no layout
 * holds min_size. */
int tg_smb_find_free_chunk_fit(struct tg_smb *smb, size_t min_size, size_t *cursor,
                               const struct tg_smb_chunk_header *hdr, size_t *page_out, unsigned *chunk_out,
                               uint8_t **ptr_out, size_t *size_out);

/* Release-store of the chunk header `packets` word (count and flags) for a
 * chunk the caller holds BeingWritten; a concurrent scraper reads it with
 * tg_smb_chunk_load_packets(). */
void tg_smb_chunk_store_packets(uint8_t *chunk, uint16_t packets);
uint16_t tg_smb_chunk_load_packets(const uint8_t *chunk);

/* ---- service-side transitions ---- */

/* Complete -> BeingRead. On success *layout_out (may be NULL) is the layout the
 * transition was validated against; use it for tg_smb_copy_chunk(). */
int tg_smb_acquire_chunk_for_reading(struct tg_smb *smb, size_t page, unsigned chunk,
                                     unsigned *layout_out);

/* BeingRead -> Free: zeroes the 8-byte chunk header first, then frees the
 * chunk; when all chunks of the page are free the word becomes 0 (the page
 * is de-partitioned). */
int tg_smb_release_chunk_as_free(struct tg_smb *smb, size_t page, unsigned chunk);

/* Copies chunk `chunk` of `page` (laid out with `layout`) out of the mapping
 * into out (out_cap >= chunk size) without changing its state, then decodes
 * the header from the private copy. Returns the chunk size (> 0) or
 * TG_SMB_EINVAL. This is what both CommitData handling (after
 * acquire_for_reading) and scraping use; everything else parses the copy. */
long tg_smb_copy_chunk(const struct tg_smb *smb, size_t page, unsigned layout, unsigned chunk,
                       uint8_t *out, size_t out_cap, struct tg_smb_chunk_header *hdr_out);

/* Human-readable name of a chunk state ("free", "being_written", ...). */
const char *tg_smb_chunk_state_name(enum tg_smb_chunk_state st);

#endif
