/* smb_fragments.h: walks the fragments (packet pieces) of an SMB chunk payload.
 *
 * A payload holds `count` fragments back to back, each a varint length of 1..4
 * bytes followed by that many bytes (perfetto-wire-facts §5.5). This iterator
 * is the only place that parses them; it never reads outside [payload,
 * payload + len) and never more than 4 varint bytes, so it is safe on any
 * bytes at all. It must be given a private copy of the chunk, not a pointer
 * into shared memory (see tg_smb_copy_chunk()).
 *
 * - A zero-length fragment that is not a piece of a continued packet is a
 *   padding packet: skipped (counted in padding_skipped).
 * - A length of 0x0FFFFFFF is the writer's "packet dropped" marker: returned
 *   once with is_drop set; nothing after it in the chunk is meaningful, so the
 *   iteration ends there.
 * - A header running past the end, a varint longer than 4 bytes, or a length
 *   running past the payload end is an ABI violation: iteration stops and
 *   tg_smb_frag_next() returns TG_SMB_FRAG_ABI_VIOLATION (the rest of the
 *   chunk is lost).
 *
 * Ownership: the iterator borrows the payload; fragments point into it.
 * Threading: an iterator is plain data; use it from one thread. */
#ifndef TRACEGATE_SMB_FRAGMENTS_H
#define TRACEGATE_SMB_FRAGMENTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum tg_smb_frag_result {
    TG_SMB_FRAG_ABI_VIOLATION = -1,
    TG_SMB_FRAG_END = 0,
    TG_SMB_FRAG_OK = 1,
};

struct tg_smb_fragment {
    const uint8_t *data;        /* fragment bytes (NULL for a drop marker) */
    size_t len;                 /* 0 for a drop marker */
    unsigned index;             /* 0-based position among the chunk's `count` fragments */
    bool is_drop;               /* the 0x0FFFFFFF marker: the packet was abandoned */
    bool is_first_continuation; /* index 0 of a chunk flagged FirstPacketContinuesFromPrevChunk */
    bool is_last_continues;     /* index count-1 of a chunk flagged LastPacketContinuesOnNextChunk */
};

struct tg_smb_frag_iter {
    const uint8_t *payload; /* start of the payload (for offsets) */
    const uint8_t *p;       /* next fragment header */
    const uint8_t *end;
    unsigned count;           /* fragments the chunk header announces */
    unsigned next;            /* index of the next fragment */
    unsigned flags;           /* chunk flags (TG_SMB_CHUNK_*) */
    int status;               /* TG_SMB_FRAG_OK while iterating, then END or ABI_VIOLATION */
    unsigned padding_skipped; /* padding packets skipped so far */
};

/* Reads a fragment length varint of 1..4 bytes at p. Returns the bytes used,
 * or 0 when it is truncated by end or longer than 4 bytes. */
size_t tg_smb_read_frag_header(const uint8_t *p, const uint8_t *end, uint32_t *len_out);

/* Starts at the first fragment of a payload of len bytes with the chunk's
 * fragment count and flags (TG_SMB_CHUNK_* values). */
void tg_smb_frag_iter_init(struct tg_smb_frag_iter *it, const uint8_t *payload, size_t len, unsigned count,
                           unsigned flags);

/* Resumes at byte `offset` of the payload as fragment number `index`
 * (a position saved earlier from tg_smb_frag_iter_offset() and it->next). */
void tg_smb_frag_iter_init_at(struct tg_smb_frag_iter *it, const uint8_t *payload, size_t len, unsigned count,
                              unsigned flags, size_t offset, unsigned index);

/* Next non-padding fragment. TG_SMB_FRAG_OK fills *f; TG_SMB_FRAG_END when
 * `count` fragments were consumed or after a drop marker;
 * TG_SMB_FRAG_ABI_VIOLATION on malformed input (sticky). */
int tg_smb_frag_next(struct tg_smb_frag_iter *it, struct tg_smb_fragment *f);

/* Byte offset in the payload of the next fragment header. */
static inline size_t tg_smb_frag_iter_offset(const struct tg_smb_frag_iter *it)
{
    return (size_t)(it->p - it->payload);
}

#endif
