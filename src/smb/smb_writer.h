/* smb_writer.h: producer-side trace writer that puts whole, already serialized
 * TracePackets into SMB chunks (perfetto-wire-facts §5.5, §5.6).
 *
 * Used by the C producer library and by the gateway's SMB bridge. The memory
 * can be a real shared mapping (the service reads chunks on CommitData) or a
 * private buffer laid out the same way (shmem emulation: the chunk bytes travel
 * inline in CommitDataRequest.ChunksToMove.data).
 *
 * Behaviour:
 * - Every fragment gets a 4-byte redundant varint length header. A packet that
 *   does not fit in the current chunk is split: the chunk gets
 *   LastPacketContinuesOnNextChunk, the next chunk (chunk_id + 1) gets
 *   FirstPacketContinuesFromPrevChunk, as many times as needed, so packets
 *   larger than a chunk or than the whole SMB work as long as the commit
 *   handler lets chunks be freed meanwhile.
 * - Chunks are found by a round-robin page scan; free pages are partitioned
 *   with the configured layout (Div1 by default, like the SDK).
 * - A finished chunk is released as Complete and reported to the commit
 *   callback. In emulation mode the callback also gets the whole chunk bytes
 *   (header included, chunk_size bytes) and must copy them before returning:
 *   the writer then frees the chunk itself (Complete -> Free).
 * - SMB full: with a stall callback, the writer asks it whether to look again
 *   (BufferExhaustedPolicy kStall: the callback commits, waits, and says when
 *   to give up); without one, or once it gives up (kDrop): the packet is
 *   discarded. If part of
 *   it was already written, that fragment's length is overwritten with the
 *   0x0FFFFFFF drop marker so the service counts the loss and drops the whole
 *   packet. A new chunk is tried again at the next packet. The writer raises a
 *   "data lost" flag; setting previous_packet_dropped on the next packet is the
 *   caller's job (tg_smb_writer_take_data_lost()).
 * - Splitting a packet needs a second free chunk before the full one is
 *   released, so an SMB must have at least two chunks to carry packets larger
 *   than a chunk.
 *
 * Ownership: struct tg_smb_writer is caller-allocated and holds no heap
 * memory; it borrows the struct tg_smb given in its config.
 * Threading: a writer is single-threaded (one writer per thread). Several
 * writers, in any threads, may share one SMB: chunks are taken and released
 * with atomic CAS on the page headers. The commit callback runs on the
 * writer's thread. */
#ifndef TRACEGATE_SMB_WRITER_H
#define TRACEGATE_SMB_WRITER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "smb/smb_abi.h"

/* A chunk just released as Complete. */
struct tg_smb_commit {
    size_t page;            /* ChunksToMove.page */
    unsigned chunk;         /* ChunksToMove.chunk */
    uint32_t target_buffer; /* ChunksToMove.target_buffer */
    uint16_t writer_id;
    uint32_t chunk_id;
    uint16_t packets; /* final header packets word (count | flags << 10) */
    /* Emulation mode only (NULL otherwise): the whole chunk, 8-byte header
     * included, chunk_size bytes; valid only during the callback. */
    const uint8_t *chunk_data;
    size_t chunk_size;
};

typedef void (*tg_smb_commit_fn)(void *ctx, const struct tg_smb_commit *commit);

struct tg_smb_writer_config {
    struct tg_smb *smb;
    uint16_t writer_id;     /* 1..32767 */
    uint32_t target_buffer; /* global buffer id, reported with each commit */
    unsigned layout;        /* page layout for pages this writer partitions; 0 = Div1 */
    bool emulation;         /* private buffer: writer frees chunks after the commit callback */
    tg_smb_commit_fn commit;
    void *commit_ctx;
    /* Optional. Called when no chunk is free, with commit_ctx and how many
     * times it was called for this chunk before (0 the first time); returns
     * true to look for a free chunk again, false to give up and drop. It runs
     * on the writer's thread with the writer's state consistent: between
     * packets, or in the middle of one with its current chunk still held
     * (BeingWritten), so it must not write with this writer. */
    bool (*stall)(void *ctx, unsigned attempt);
};

struct tg_smb_writer_stats {
    uint64_t packets_written;
    uint64_t packets_dropped;
    uint64_t chunks_committed;
    uint64_t bytes_written; /* packet bytes, headers excluded */
    uint64_t stalls;        /* chunk acquisitions that found the SMB full and called stall */
};

struct tg_smb_writer {
    struct tg_smb_writer_config cfg;
    size_t cursor;          /* round-robin page cursor */
    uint32_t next_chunk_id; /* id for the next chunk acquired */
    bool have_chunk;
    size_t page;
    unsigned chunk;
    uint32_t chunk_id; /* id of the current chunk */
    uint8_t *chunk_ptr;
    size_t chunk_size;
    size_t wpos;     /* write offset from the chunk start */
    unsigned count;  /* fragments in the current chunk */
    unsigned flags;  /* TG_SMB_CHUNK_* of the current chunk */
    bool data_lost;  /* a packet was dropped since the flag was last taken */
    struct tg_smb_writer_stats stats;
};

enum tg_smb_writer_result {
    TG_SMB_WRITER_EINVAL = -1,
    TG_SMB_WRITER_OK = 0,
    TG_SMB_WRITER_DROPPED = 1, /* SMB full: the packet was discarded */
};

/* SDK writers stop at this many fragments per chunk (the field holds 1023). */
#define TG_SMB_WRITER_MAX_FRAGMENTS 1022u

/* Validates the config (smb set, writer_id 1..32767, layout valid, commit
 * callback set) and resets the writer. Returns TG_SMB_WRITER_OK or
 * TG_SMB_WRITER_EINVAL. */
int tg_smb_writer_init(struct tg_smb_writer *w, const struct tg_smb_writer_config *cfg);

/* Writes one serialized TracePacket. Returns TG_SMB_WRITER_OK, or
 * TG_SMB_WRITER_DROPPED when the SMB had no free chunk (data-lost flag set).
 * A zero-length packet writes nothing and returns TG_SMB_WRITER_OK. */
int tg_smb_writer_write_packet(struct tg_smb_writer *w, const void *data, size_t len);

/* Completes and commits the current chunk if it holds any fragment. An empty
 * chunk is kept (its chunk_id was never made visible). */
void tg_smb_writer_flush(struct tg_smb_writer *w);

/* Writer teardown: completes and commits the current chunk even when empty,
 * so no chunk stays BeingWritten. The writer may be re-initialized after. */
void tg_smb_writer_close(struct tg_smb_writer *w);

/* Returns whether data was lost since the last call, and clears the flag.
 * Call it before serializing each packet: when true, that packet should carry
 * previous_packet_dropped (DATA_LOSS_PRESENT|DATA_LOSS_SMB_FULL = 0x101). */
bool tg_smb_writer_take_data_lost(struct tg_smb_writer *w);

#endif
