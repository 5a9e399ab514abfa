/* trace_buffer.h: the service's central trace buffer for one session buffer
 * (TraceConfig.BufferConfig): chunks copied out of producers' SMBs go in,
 * whole TracePackets in per-sequence order come out.
 *
 * Model (perfetto-wire-facts §4.1, §5.5, §5.7, §5.8):
 * - Fixed capacity, allocated once. Chunks are stored as records in a byte
 *   ring together with their metadata; an index finds a chunk by
 *   {producer_id, writer_id, chunk_id}. Memory = the configured size plus a
 *   small hash table and one small record per {producer, writer} sequence.
 * - RING_BUFFER overwrites the oldest records when full (chunks_overwritten
 *   counts the ones with unread data). DISCARD may only reuse space whose
 *   chunks were fully read; the first chunk that does not fit switches the
 *   buffer to discarding every new chunk for good (chunks_discarded).
 * - A sequence is {producer_id, writer_id}. Packets come out in chunk-id order
 *   (uint32 modular order, so ids wrap), fragments are glued across chunks
 *   with contiguous ids. A broken chain (id gap, missing continuation, drop
 *   marker) loses the packet; padding packets are skipped; drop markers count
 *   trace_writer_packet_loss. A packet whose next piece has not arrived yet,
 *   a chunk flagged NeedsPatching and an incomplete (scraped) chunk hold the
 *   sequence back until more data comes; other sequences still read.
 * - previous_packet_dropped is set on the first packet read after a gap, an
 *   overwrite of unread data, a dropped/broken packet or an ABI violation on
 *   that sequence, and on the very first packet read from a sequence.
 * - Reading consumes packets: each packet is returned once.
 *
 * Trust: payload bytes are copied with one memcpy and never parsed at copy
 * time, so `payload` may point straight into a producer's shared memory.
 * Everything read later is parsed from the private copy with bounds checks.
 * The identity fields (producer_id, uid, pid, machine_id) must come from the
 * service's own knowledge of the connection, never from the producer.
 *
 * Ownership: tg_trace_buffer_new() returns a buffer owned by the caller, freed
 * with tg_trace_buffer_free(). Packets returned by tg_trace_buffer_read_packet
 * point into the buffer and stay valid only until the next call that is not a
 * read (copy_chunk, apply_patches, free).
 * Threading: not thread-safe; one owner thread (the service's task runner). */
#ifndef TRACEGATE_SERVICE_TRACE_BUFFER_H
#define TRACEGATE_SERVICE_TRACE_BUFFER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct tg_trace_buffer;

/* TraceConfig.BufferConfig.FillPolicy (UNSPECIFIED maps to RING_BUFFER). */
enum tg_tb_fill_policy {
    TG_TB_RING_BUFFER = 1,
    TG_TB_DISCARD = 2,
};

/* Who wrote a chunk, as the service knows it (trusted). */
struct tg_tb_producer {
    uint32_t producer_id;
    int32_t uid;
    int32_t pid;
    uint32_t machine_id; /* 0 = this machine */
};

/* CommitDataRequest.ChunkToPatch.Patch: 4 bytes at offset from the payload
 * start (the first byte after the 8-byte chunk header). */
struct tg_tb_patch {
    uint32_t offset;
    uint8_t data[4];
};

enum tg_tb_copy_result {
    TG_TB_COPY_ABI_VIOLATION = -1, /* rejected; abi_violations counted */
    TG_TB_COPY_STORED = 0,         /* new chunk stored */
    TG_TB_COPY_REWRITTEN = 1,      /* known chunk got more fragments (scrape, then commit) */
    TG_TB_COPY_UNCHANGED = 2,      /* identical re-copy, nothing to do */
    TG_TB_COPY_DISCARDED = 3,      /* not stored: DISCARD buffer full, or too late to be read in order */
};

/* One contiguous piece of a packet (a packet spanning chunks has several). */
struct tg_tb_slice {
    const uint8_t *data;
    size_t len;
};

struct tg_tb_packet {
    const struct tg_tb_slice *slices;
    size_t num_slices;
    size_t size; /* sum of the slice lengths */
};

/* Trusted facts about the sequence a packet came from. */
struct tg_tb_seq_info {
    uint32_t producer_id;
    int32_t uid;
    int32_t pid;
    uint32_t machine_id;
    uint16_t writer_id;
    bool previous_packet_dropped;
};

/* TraceStats.BufferStats fields this buffer fills. Byte counters count chunk
 * bytes as they were in the SMB (8-byte chunk header + payload). */
struct tg_trace_buffer_stats {
    uint64_t buffer_size;                   /* 12 */
    uint64_t bytes_written;                 /* 1 */
    uint64_t chunks_written;                /* 2 */
    uint64_t chunks_overwritten;            /* 3: had unread data when overwritten */
    uint64_t write_wrap_count;              /* 4 */
    uint64_t patches_succeeded;             /* 5: patches applied */
    uint64_t patches_failed;                /* 6: ChunkToPatch requests refused */
    uint64_t readaheads_succeeded;          /* 7: packets glued across chunks */
    uint64_t readaheads_failed;             /* 8: reads that had to wait for a continuation */
    uint64_t abi_violations;                /* 9 */
    uint64_t chunks_rewritten;              /* 10 */
    uint64_t chunks_committed_out_of_order; /* 11 */
    uint64_t bytes_overwritten;             /* 13 */
    uint64_t bytes_read;                    /* 14: chunk bytes fully consumed */
    uint64_t padding_bytes_written;         /* 15: ring bytes lost to padding */
    uint64_t padding_bytes_cleared;         /* 16 */
    uint64_t chunks_read;                   /* 17 */
    uint64_t chunks_discarded;              /* 18 */
    uint64_t trace_writer_packet_loss;      /* 19: drop markers seen */
};

/* Largest payload accepted in one chunk (a 64 KiB page's single chunk). */
#define TG_TB_MAX_PAYLOAD 65536u
/* Accepted capacity range; size_bytes is rounded down to a multiple of 8. */
#define TG_TB_MIN_SIZE 256u
#define TG_TB_MAX_SIZE 0xFFFF0000u

/* Creates an empty buffer of size_bytes capacity. NULL when the size is out
 * of range, the policy unknown, or memory is short. */
struct tg_trace_buffer *tg_trace_buffer_new(size_t size_bytes, enum tg_tb_fill_policy policy);
void tg_trace_buffer_free(struct tg_trace_buffer *tb);

/* Copies one chunk (header fields decoded by the caller from its private copy
 * of the header; payload = the chunk bytes after the 8-byte header, normally
 * chunk_size - 8 of them). flags are the 6-bit TG_SMB_CHUNK_* flags.
 * chunk_complete=false (scraped while BeingWritten, or emulation
 * chunk_incomplete) ignores the last fragment. A later copy of the same
 * {producer, writer, chunk_id} may only add fragments: same payload_len, no
 * fewer fragments, no flag removed, not once complete, and not after the
 * reader moved on to chunk_id + 1 -- anything else is an ABI violation. */
int tg_trace_buffer_copy_chunk(struct tg_trace_buffer *tb, const struct tg_tb_producer *producer,
                               uint16_t writer_id, uint32_t chunk_id, uint16_t num_fragments, uint8_t flags,
                               bool chunk_complete, const void *payload, size_t payload_len);

/* Same, from a whole chunk (8-byte header + payload) as carried in
 * CommitDataRequest.ChunksToMove.data. Fewer than 8 bytes is an ABI
 * violation. */
int tg_trace_buffer_copy_chunk_bytes(struct tg_trace_buffer *tb, const struct tg_tb_producer *producer,
                                     const void *chunk, size_t chunk_len, bool chunk_complete);

/* Applies a ChunkToPatch: n patches to chunk {producer_id, writer_id,
 * chunk_id} while it is still in the buffer. has_more_patches=false clears
 * NeedsPatching and makes the chunk readable. Returns 0, or -1 (counted in
 * patches_failed) when the chunk is not here -- overwritten, never written,
 * or written by another producer -- or a patch falls outside the payload
 * (patches before it stay applied, as in traced). */
int tg_trace_buffer_apply_patches(struct tg_trace_buffer *tb, uint32_t producer_id, uint16_t writer_id,
                                  uint32_t chunk_id, const struct tg_tb_patch *patches, size_t n,
                                  bool has_more_patches);

/* Returns the next readable packet of any sequence (true), or false when no
 * sequence has one right now. out->slices and the data stay valid until the
 * next non-read call on tb. info may be NULL. */
bool tg_trace_buffer_read_packet(struct tg_trace_buffer *tb, struct tg_tb_packet *out,
                                 struct tg_tb_seq_info *info);

/* Copies a packet's slices into dst (cap bytes). Returns the packet size, or
 * 0 when cap is too small (nothing is copied then). */
size_t tg_tb_packet_copy(const struct tg_tb_packet *pkt, void *dst, size_t cap);

/* A deep, independent copy of tb (contents, sequences, read positions and
 * stats), for CloneSession. NULL when memory is short. */
struct tg_trace_buffer *tg_trace_buffer_clone(const struct tg_trace_buffer *tb);

const struct tg_trace_buffer_stats *tg_trace_buffer_stats(const struct tg_trace_buffer *tb);
size_t tg_trace_buffer_capacity(const struct tg_trace_buffer *tb);
enum tg_tb_fill_policy tg_trace_buffer_policy(const struct tg_trace_buffer *tb);

#endif
