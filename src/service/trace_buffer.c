/* trace_buffer.c: ring of chunk records, chunk index and per-sequence packet
 * reassembly for one session buffer (see service/trace_buffer.h).
 *
 * Layout. `buf` is a ring of `cap` bytes holding a chain of 8-aligned records
 * from offset 0 up to `used_end`: chunk records (a struct tb_rec header with
 * all the chunk's metadata, then the payload) and padding records (only the
 * first 8 bytes of the header are meaningful). New records go at `wptr`;
 * whatever records overlap the space they need are evicted first, and a
 * padding record covers the tail of a partly overlapped old record so the
 * chain stays walkable. When a record does not fit before `cap`, the rest of
 * the ring is evicted and writing wraps to 0.
 *
 * Index. Every chunk record is in a chained hash on {producer, writer,
 * chunk_id} until it is evicted -- also after it was read, so that a late
 * re-commit of a chunk already read is recognised as a duplicate and patches
 * keep working as long as the bytes are here.
 *
 * Sequences. Each {producer, writer} has a struct tb_seq with a doubly linked
 * list, sorted by modular chunk id, of its chunks that still have something to
 * read. The reader always works on the head of that list: fully read, complete
 * chunks leave the list. Per sequence we keep the id expected after the last
 * chunk fully read (a different id on the next chunk = gap = data loss), the
 * id of the furthest chunk the reader touched (chunks at or before it arrive
 * too late to be read in order and are discarded), and the "loss" bit that
 * becomes the next packet's previous_packet_dropped. */
#include "service/trace_buffer.h"

#include <stdlib.h>
#include <string.h>

#include "smb/smb_abi.h"
#include "smb/smb_fragments.h"

#define NONE UINT32_MAX
#define REC_ALIGN 8u

enum { REC_PADDING = 1, REC_CHUNK = 2 };

/* tb_rec.state bits */
#define RS_COMPLETE 0x01u /* no more fragments will be added */
#define RS_ENTERED 0x02u  /* the reader reached this chunk (gap check done) */
#define RS_IN_LIST 0x04u  /* still on its sequence's list (has something to read) */

struct tb_rec {
    uint32_t size; /* whole record, header included, multiple of 8 */
    uint8_t kind;
    uint8_t flags; /* TG_SMB_CHUNK_* */
    uint8_t state;
    uint8_t reserved0;
    /* chunk records only from here on */
    uint32_t payload_len;
    uint32_t chunk_id;
    uint32_t producer_id;
    uint16_t writer_id;
    uint16_t num_fragments;
    uint16_t frags_read; /* fragments consumed (padding included) */
    uint16_t reserved1;
    uint32_t read_off; /* payload offset of the next unread fragment header */
    uint32_t seq;      /* index into tb->seqs */
    uint32_t seq_prev, seq_next;
    uint32_t hash_next;
    int32_t uid;
    int32_t pid;
    uint32_t machine_id;
    uint32_t reserved2;
};
_Static_assert(sizeof(struct tb_rec) == 64, "record header is 64 bytes");
_Static_assert(sizeof(struct tb_rec) % REC_ALIGN == 0, "record header keeps payload 8-aligned");
#define PADDING_HDR 8u

/* tb_seq.bits */
#define SEQ_LOSS 0x01u         /* next packet gets previous_packet_dropped */
#define SEQ_EXPECT_VALID 0x02u /* expect_id is meaningful */
#define SEQ_READ_VALID 0x04u   /* read_id is meaningful */
#define SEQ_LAST_VALID 0x08u   /* last_id is meaningful */

struct tb_seq {
    uint32_t producer_id;
    uint16_t writer_id;
    uint8_t in_use;
    uint8_t bits;
    uint32_t head, tail; /* readable chunks, ring offsets */
    uint32_t nchunks;    /* chunk records in the index for this sequence */
    uint32_t expect_id;  /* id that should follow the last fully read chunk */
    uint32_t read_id;    /* furthest chunk id the reader entered */
    uint32_t last_id;    /* newest chunk id written */
    uint32_t hnext;      /* hash chain, or free list when !in_use */
};

/* Sorted insertion walks back from the tail at most this far; a chunk that
 * would land further back is treated as hopelessly out of order. */
#define MAX_INSERT_WALK 4096u

struct tg_trace_buffer {
    uint8_t *buf;
    uint32_t cap;
    uint32_t wptr;
    uint32_t used_end;
    enum tg_tb_fill_policy policy;
    bool discarding; /* DISCARD policy hit the end: refuse every new chunk */

    /* Hash buckets hold the complement of an offset/index (bucket_get/bucket_set), so that zeroed
     * memory reads as empty (NONE): they come from calloc and cost a page only once something
     * hashes into it. (A 4 GB buffer has 4M buckets, 16 MiB; filling them with NONE up front made
     * EnableTracing with 128 such buffers take 2 GiB before any data came.) */
    uint32_t *chunk_buckets;
    uint32_t chunk_mask;

    struct tb_seq *seqs;
    uint32_t seq_slots; /* allocated entries in seqs */
    uint32_t seq_used;  /* slots handed out (high-water mark) */
    uint32_t seq_live;  /* in_use sequences */
    uint32_t seq_idle;  /* in_use sequences with no chunk left */
    uint32_t seq_limit; /* max in_use sequences */
    uint32_t seq_free;  /* free list head */
    uint32_t *seq_buckets;
    uint32_t seq_mask;
    uint32_t read_seq; /* where the reader continues */

    struct tg_tb_slice *slices;
    size_t slices_cap;

    struct tg_trace_buffer_stats stats;
};

/* ---- small helpers ---- */

static inline struct tb_rec *rec_at(const struct tg_trace_buffer *tb, uint32_t off)
{
    return (struct tb_rec *)(void *)(tb->buf + off);
}

static inline uint8_t *rec_payload(struct tb_rec *r)
{
    return (uint8_t *)r + sizeof(struct tb_rec);
}

/* a comes after b in wrapping uint32 order */
static inline bool id_after(uint32_t a, uint32_t b)
{
    return (int32_t)(a - b) > 0;
}

static inline uint64_t chunk_bytes(const struct tb_rec *r)
{
    return (uint64_t)r->payload_len + TG_SMB_CHUNK_HEADER_SIZE;
}

static uint32_t mix(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return (uint32_t)x;
}

static uint32_t chunk_hash(uint32_t producer_id, uint16_t writer_id, uint32_t chunk_id)
{
    return mix(((uint64_t)producer_id << 16 | writer_id) * 0x9e3779b97f4a7c15ull ^ chunk_id);
}

static uint32_t seq_hash(uint32_t producer_id, uint16_t writer_id)
{
    return mix((uint64_t)producer_id << 16 | writer_id);
}

static uint32_t pow2_at_least(uint32_t v)
{
    uint32_t p = 1;
    while (p < v && p < (1u << 31))
        p <<= 1;
    return p;
}

/* ---- hash buckets: the complement of the first entry's offset or index (0 = empty) ---- */

static inline uint32_t bucket_get(const uint32_t *b) { return ~*b; }
static inline void bucket_set(uint32_t *b, uint32_t v) { *b = ~v; }

/* ---- chunk index ---- */

static uint32_t chunk_find(const struct tg_trace_buffer *tb, uint32_t producer_id, uint16_t writer_id,
                           uint32_t chunk_id)
{
    uint32_t off = bucket_get(&tb->chunk_buckets[chunk_hash(producer_id, writer_id, chunk_id) & tb->chunk_mask]);
    while (off != NONE) {
        const struct tb_rec *r = rec_at(tb, off);
        if (r->chunk_id == chunk_id && r->writer_id == writer_id && r->producer_id == producer_id)
            return off;
        off = r->hash_next;
    }
    return NONE;
}

static void chunk_index_add(struct tg_trace_buffer *tb, uint32_t off)
{
    struct tb_rec *r = rec_at(tb, off);
    uint32_t *b = &tb->chunk_buckets[chunk_hash(r->producer_id, r->writer_id, r->chunk_id) & tb->chunk_mask];
    r->hash_next = bucket_get(b);
    bucket_set(b, off);
}

static void chunk_index_remove(struct tg_trace_buffer *tb, uint32_t off)
{
    struct tb_rec *r = rec_at(tb, off);
    uint32_t *b = &tb->chunk_buckets[chunk_hash(r->producer_id, r->writer_id, r->chunk_id) & tb->chunk_mask];
    uint32_t cur = bucket_get(b);
    if (cur == off) {
        bucket_set(b, r->hash_next);
        return;
    }
    while (cur != NONE) {
        struct tb_rec *c = rec_at(tb, cur);
        if (c->hash_next == off) {
            c->hash_next = r->hash_next;
            return;
        }
        cur = c->hash_next;
    }
}

/* ---- sequences ---- */

static uint32_t seq_find(const struct tg_trace_buffer *tb, uint32_t producer_id, uint16_t writer_id)
{
    uint32_t i = bucket_get(&tb->seq_buckets[seq_hash(producer_id, writer_id) & tb->seq_mask]);
    while (i != NONE) {
        const struct tb_seq *s = &tb->seqs[i];
        if (s->producer_id == producer_id && s->writer_id == writer_id)
            return i;
        i = s->hnext;
    }
    return NONE;
}

static void seq_release(struct tg_trace_buffer *tb, uint32_t idx)
{
    struct tb_seq *s = &tb->seqs[idx];
    uint32_t *b = &tb->seq_buckets[seq_hash(s->producer_id, s->writer_id) & tb->seq_mask];
    uint32_t cur = bucket_get(b);
    if (cur == idx) {
        bucket_set(b, s->hnext);
    } else {
        while (cur != NONE && tb->seqs[cur].hnext != idx)
            cur = tb->seqs[cur].hnext;
        if (cur != NONE)
            tb->seqs[cur].hnext = s->hnext;
    }
    s->in_use = 0;
    s->hnext = tb->seq_free;
    tb->seq_free = idx;
    tb->seq_live--;
    tb->seq_idle--;
}

/* Forgets sequences that have no chunk left. Their next packet will be
 * reported as preceded by a loss, which is the conservative answer. */
static void seq_gc(struct tg_trace_buffer *tb)
{
    for (uint32_t i = 0; i < tb->seq_used && tb->seq_idle > 0; i++)
        if (tb->seqs[i].in_use && tb->seqs[i].nchunks == 0)
            seq_release(tb, i);
}

static uint32_t seq_get(struct tg_trace_buffer *tb, uint32_t producer_id, uint16_t writer_id)
{
    uint32_t idx = seq_find(tb, producer_id, writer_id);
    if (idx != NONE)
        return idx;
    if (tb->seq_live >= tb->seq_limit) {
        if (tb->seq_idle == 0)
            return NONE;
        seq_gc(tb);
    }
    if (tb->seq_free != NONE) {
        idx = tb->seq_free;
        tb->seq_free = tb->seqs[idx].hnext;
    } else {
        if (tb->seq_used == tb->seq_slots) {
            uint32_t n = tb->seq_slots ? tb->seq_slots * 2 : 16;
            if (n > tb->seq_limit)
                n = tb->seq_limit;
            struct tb_seq *ns = realloc(tb->seqs, (size_t)n * sizeof(*ns));
            if (!ns)
                return NONE;
            tb->seqs = ns;
            tb->seq_slots = n;
        }
        idx = tb->seq_used++;
    }
    struct tb_seq *s = &tb->seqs[idx];
    memset(s, 0, sizeof(*s));
    s->producer_id = producer_id;
    s->writer_id = writer_id;
    s->in_use = 1;
    s->bits = SEQ_LOSS; /* the first packet read from a sequence is marked, as traced does */
    s->head = s->tail = NONE;
    uint32_t *b = &tb->seq_buckets[seq_hash(producer_id, writer_id) & tb->seq_mask];
    s->hnext = bucket_get(b);
    bucket_set(b, idx);
    tb->seq_live++;
    tb->seq_idle++;
    return idx;
}

static void seq_list_unlink(struct tg_trace_buffer *tb, struct tb_seq *s, uint32_t off)
{
    struct tb_rec *r = rec_at(tb, off);
    if (r->seq_prev != NONE)
        rec_at(tb, r->seq_prev)->seq_next = r->seq_next;
    else
        s->head = r->seq_next;
    if (r->seq_next != NONE)
        rec_at(tb, r->seq_next)->seq_prev = r->seq_prev;
    else
        s->tail = r->seq_prev;
    r->seq_prev = r->seq_next = NONE;
    r->state &= (uint8_t)~RS_IN_LIST;
}

/* Finds where chunk_id goes in s's list (after the returned offset, NONE =
 * at the head). Returns false when it is too far back to be worth it. */
static bool seq_list_position(const struct tg_trace_buffer *tb, const struct tb_seq *s, uint32_t chunk_id,
                              uint32_t *after)
{
    uint32_t p = s->tail;
    for (uint32_t steps = 0; p != NONE && id_after(rec_at(tb, p)->chunk_id, chunk_id); steps++) {
        if (steps >= MAX_INSERT_WALK)
            return false;
        p = rec_at(tb, p)->seq_prev;
    }
    *after = p;
    return true;
}

static void seq_list_insert_after(struct tg_trace_buffer *tb, struct tb_seq *s, uint32_t after, uint32_t off)
{
    struct tb_rec *r = rec_at(tb, off);
    r->seq_prev = after;
    r->seq_next = after == NONE ? s->head : rec_at(tb, after)->seq_next;
    if (after == NONE)
        s->head = off;
    else
        rec_at(tb, after)->seq_next = off;
    if (r->seq_next == NONE)
        s->tail = off;
    else
        rec_at(tb, r->seq_next)->seq_prev = off;
    r->state |= RS_IN_LIST;
}

/* ---- ring space ---- */

static bool rec_has_unread(const struct tb_rec *r)
{
    return (r->state & RS_IN_LIST) && r->frags_read < r->num_fragments;
}

/* Head chunk fully read and complete: it leaves the sequence's list. */
static void retire_head(struct tg_trace_buffer *tb, struct tb_seq *s, uint32_t off)
{
    struct tb_rec *r = rec_at(tb, off);
    s->expect_id = r->chunk_id + 1;
    s->bits |= SEQ_EXPECT_VALID;
    tb->stats.chunks_read++;
    tb->stats.bytes_read += chunk_bytes(r);
    seq_list_unlink(tb, s, off);
}

static void evict_chunk(struct tg_trace_buffer *tb, uint32_t off)
{
    struct tb_rec *r = rec_at(tb, off);
    struct tb_seq *s = &tb->seqs[r->seq];
    chunk_index_remove(tb, off);
    if ((r->state & RS_IN_LIST) && s->head == off && r->frags_read >= r->num_fragments &&
        (r->state & RS_COMPLETE)) {
        /* Read to the end, only not retired yet: nothing is lost. */
        retire_head(tb, s, off);
    } else if (r->state & RS_IN_LIST) {
        bool unread = r->frags_read < r->num_fragments;
        if (unread) {
            tb->stats.chunks_overwritten++;
            tb->stats.bytes_overwritten += chunk_bytes(r);
        }
        /* Losing the chunk the reader stands on loses data right before the
         * next packet. A loss further down the list shows up as an id gap
         * when the reader gets there. */
        if (s->head == off && (unread || !(r->state & RS_COMPLETE)))
            s->bits |= SEQ_LOSS;
        seq_list_unlink(tb, s, off);
    }
    if (--s->nchunks == 0)
        tb->seq_idle++;
    r->kind = REC_PADDING;
}

/* Walks records in [from, to) (to clamped to used_end); in DISCARD mode
 * refuses (false) if one still has unread data. Evicts them when `evict`. */
static bool clear_range(struct tg_trace_buffer *tb, uint32_t from, uint32_t to, bool evict, uint32_t *end_out)
{
    uint32_t p = from;
    while (p < to && p < tb->used_end) {
        struct tb_rec *r = rec_at(tb, p);
        uint32_t size = r->size;
        if (r->kind == REC_CHUNK) {
            if (!evict && tb->policy == TG_TB_DISCARD && rec_has_unread(r))
                return false;
            if (evict)
                evict_chunk(tb, p);
        } else if (evict) {
            tb->stats.padding_bytes_cleared += size;
        }
        p += size;
    }
    if (end_out)
        *end_out = p;
    return true;
}

static void write_padding(struct tg_trace_buffer *tb, uint32_t off, uint32_t size)
{
    struct tb_rec *r = rec_at(tb, off);
    r->size = size;
    r->kind = REC_PADDING;
    tb->stats.padding_bytes_written += size;
}

/* Makes `need` bytes available at the write pointer (wrapping if needed) and
 * returns their offset, or NONE when the DISCARD policy forbids it. */
static uint32_t reserve(struct tg_trace_buffer *tb, uint32_t need)
{
    bool wrap = need > tb->cap - tb->wptr;
    uint32_t pos = wrap ? 0 : tb->wptr;
    if (tb->policy == TG_TB_DISCARD) {
        if (wrap && !clear_range(tb, tb->wptr, tb->cap, false, NULL))
            return NONE;
        if (!clear_range(tb, pos, pos + need, false, NULL))
            return NONE;
    }
    if (wrap) {
        clear_range(tb, tb->wptr, tb->cap, true, NULL);
        tb->stats.padding_bytes_written += tb->cap - tb->wptr;
        tb->used_end = tb->wptr;
        tb->wptr = 0;
        tb->stats.write_wrap_count++;
    }
    uint32_t end;
    clear_range(tb, pos, pos + need, true, &end);
    if (end > pos + need)
        write_padding(tb, pos + need, end - (pos + need));
    if (pos + need > tb->used_end)
        tb->used_end = pos + need;
    tb->wptr = pos + need;
    return pos;
}

/* ---- public: lifetime ---- */

struct tg_trace_buffer *tg_trace_buffer_new(size_t size_bytes, enum tg_tb_fill_policy policy)
{
    if (size_bytes < TG_TB_MIN_SIZE || size_bytes > TG_TB_MAX_SIZE)
        return NULL;
    if (policy != TG_TB_RING_BUFFER && policy != TG_TB_DISCARD)
        return NULL;
    struct tg_trace_buffer *tb = calloc(1, sizeof(*tb));
    if (!tb)
        return NULL;
    tb->cap = (uint32_t)(size_bytes & ~(size_t)(REC_ALIGN - 1));
    tb->policy = policy;
    tb->buf = malloc(tb->cap);
    uint32_t nb = pow2_at_least(tb->cap / 512 < 64 ? 64 : tb->cap / 512);
    if (nb > (1u << 22))
        nb = 1u << 22;
    tb->chunk_mask = nb - 1;
    tb->chunk_buckets = calloc(nb, sizeof(uint32_t)); /* all empty (see bucket_get) */
    uint32_t limit = tb->cap / 256;
    tb->seq_limit = limit < 64 ? 64 : limit > 65536 ? 65536 : limit;
    uint32_t sb = pow2_at_least(tb->seq_limit);
    tb->seq_mask = sb - 1;
    tb->seq_buckets = calloc(sb, sizeof(uint32_t));
    tb->seq_free = NONE;
    tb->slices_cap = 16;
    tb->slices = malloc(tb->slices_cap * sizeof(*tb->slices));
    if (!tb->buf || !tb->chunk_buckets || !tb->seq_buckets || !tb->slices) {
        tg_trace_buffer_free(tb);
        return NULL;
    }
    tb->stats.buffer_size = tb->cap;
    return tb;
}

void tg_trace_buffer_free(struct tg_trace_buffer *tb)
{
    if (!tb)
        return;
    free(tb->buf);
    free(tb->chunk_buckets);
    free(tb->seqs);
    free(tb->seq_buckets);
    free(tb->slices);
    free(tb);
}

const struct tg_trace_buffer_stats *tg_trace_buffer_stats(const struct tg_trace_buffer *tb)
{
    return &tb->stats;
}

size_t tg_trace_buffer_capacity(const struct tg_trace_buffer *tb)
{
    return tb->cap;
}

enum tg_tb_fill_policy tg_trace_buffer_policy(const struct tg_trace_buffer *tb)
{
    return tb->policy;
}

/* ---- public: writing ---- */

static int abi_violation(struct tg_trace_buffer *tb)
{
    tb->stats.abi_violations++;
    return TG_TB_COPY_ABI_VIOLATION;
}

static int discard(struct tg_trace_buffer *tb)
{
    tb->stats.chunks_discarded++;
    return TG_TB_COPY_DISCARDED;
}

/* A known chunk copied again (scrape first, commit later). */
static int recopy(struct tg_trace_buffer *tb, uint32_t off, uint16_t num_fragments, uint8_t flags, bool complete,
                  const void *payload, size_t payload_len)
{
    struct tb_rec *r = rec_at(tb, off);
    if (r->payload_len != payload_len || r->num_fragments > num_fragments || (r->flags & flags) != r->flags)
        return abi_violation(tb);
    if (r->num_fragments == num_fragments) {
        /* Same content. An empty chunk first scraped, then committed, only
         * learns here that it is complete. */
        if (complete && !(r->state & RS_COMPLETE) && num_fragments == 0) {
            r->state |= RS_COMPLETE;
            r->flags = flags;
        }
        return TG_TB_COPY_UNCHANGED;
    }
    if (r->state & RS_COMPLETE)
        return abi_violation(tb); /* a complete chunk cannot grow */
    /* Once the reader has moved on to the next chunk, growing this one would
     * hand out packets out of order. */
    uint32_t next = chunk_find(tb, r->producer_id, r->writer_id, r->chunk_id + 1);
    if (next != NONE && (rec_at(tb, next)->state & RS_ENTERED))
        return abi_violation(tb);
    memcpy(rec_payload(r), payload, payload_len);
    r->num_fragments = num_fragments;
    r->flags = flags;
    if (complete)
        r->state |= RS_COMPLETE;
    tb->stats.chunks_rewritten++;
    return TG_TB_COPY_REWRITTEN;
}

int tg_trace_buffer_copy_chunk(struct tg_trace_buffer *tb, const struct tg_tb_producer *producer,
                               uint16_t writer_id, uint32_t chunk_id, uint16_t num_fragments, uint8_t flags,
                               bool chunk_complete, const void *payload, size_t payload_len)
{
    if (!producer || (payload_len > 0 && !payload))
        return abi_violation(tb);
    if (!tg_smb_writer_id_valid(writer_id) || num_fragments > TG_SMB_MAX_PACKETS_PER_CHUNK ||
        payload_len > TG_TB_MAX_PAYLOAD)
        return abi_violation(tb);
    const uint32_t rec_size =
        (uint32_t)((sizeof(struct tb_rec) + payload_len + REC_ALIGN - 1) & ~(size_t)(REC_ALIGN - 1));
    if (rec_size > tb->cap)
        return abi_violation(tb);
    flags &= TG_SMB_CHUNK_FLAGS_MASK;
    if (!chunk_complete && num_fragments > 0) {
        /* The last fragment of a chunk still being written may be cut short:
         * keep only the ones before it, and with it the flags that are about
         * the last fragment. */
        num_fragments--;
        flags &= (uint8_t) ~(TG_SMB_CHUNK_LAST_CONTINUES | TG_SMB_CHUNK_NEEDS_PATCHING);
    }

    uint32_t existing = chunk_find(tb, producer->producer_id, writer_id, chunk_id);
    if (existing != NONE)
        return recopy(tb, existing, num_fragments, flags, chunk_complete, payload, payload_len);

    if (tb->discarding)
        return discard(tb);
    uint32_t si = seq_get(tb, producer->producer_id, writer_id);
    if (si == NONE)
        return discard(tb);
    {
        const struct tb_seq *s = &tb->seqs[si];
        if ((s->bits & SEQ_READ_VALID) && !id_after(chunk_id, s->read_id))
            return discard(tb); /* the reader is already past this id */
    }
    uint32_t after;
    if (!seq_list_position(tb, &tb->seqs[si], chunk_id, &after))
        return abi_violation(tb); /* absurdly far out of order */
    uint32_t off = reserve(tb, rec_size);
    if (off == NONE) {
        tb->discarding = true;
        return discard(tb);
    }
    /* reserve() may have evicted chunks (never sequences, so si holds), maybe
     * `after` itself: look again; the list only got shorter. */
    struct tb_seq *s = &tb->seqs[si];
    (void)seq_list_position(tb, s, chunk_id, &after);

    struct tb_rec *r = rec_at(tb, off);
    memset(r, 0, sizeof(*r));
    r->size = rec_size;
    r->kind = REC_CHUNK;
    r->flags = flags;
    r->state = chunk_complete ? RS_COMPLETE : 0;
    r->payload_len = (uint32_t)payload_len;
    r->chunk_id = chunk_id;
    r->producer_id = producer->producer_id;
    r->writer_id = writer_id;
    r->num_fragments = num_fragments;
    r->seq = si;
    r->uid = producer->uid;
    r->pid = producer->pid;
    r->machine_id = producer->machine_id;
    if (payload_len)
        memcpy(rec_payload(r), payload, payload_len);
    chunk_index_add(tb, off);
    seq_list_insert_after(tb, s, after, off);
    if (s->nchunks++ == 0)
        tb->seq_idle--;

    if (!(s->bits & SEQ_LAST_VALID) || id_after(chunk_id, s->last_id)) {
        s->last_id = chunk_id;
        s->bits |= SEQ_LAST_VALID;
    } else {
        tb->stats.chunks_committed_out_of_order++;
    }
    tb->stats.chunks_written++;
    tb->stats.bytes_written += chunk_bytes(r);
    return TG_TB_COPY_STORED;
}

int tg_trace_buffer_copy_chunk_bytes(struct tg_trace_buffer *tb, const struct tg_tb_producer *producer,
                                     const void *chunk, size_t chunk_len, bool chunk_complete)
{
    if (!chunk || chunk_len < TG_SMB_CHUNK_HEADER_SIZE)
        return abi_violation(tb);
    uint8_t hdr_copy[TG_SMB_CHUNK_HEADER_SIZE];
    memcpy(hdr_copy, chunk, sizeof(hdr_copy));
    struct tg_smb_chunk_header h;
    tg_smb_chunk_header_decode(hdr_copy, &h);
    return tg_trace_buffer_copy_chunk(tb, producer, h.writer_id, h.chunk_id,
                                      (uint16_t)tg_smb_packets_count(h.packets),
                                      (uint8_t)tg_smb_packets_flags(h.packets), chunk_complete,
                                      (const uint8_t *)chunk + TG_SMB_CHUNK_HEADER_SIZE,
                                      chunk_len - TG_SMB_CHUNK_HEADER_SIZE);
}

int tg_trace_buffer_apply_patches(struct tg_trace_buffer *tb, uint32_t producer_id, uint16_t writer_id,
                                  uint32_t chunk_id, const struct tg_tb_patch *patches, size_t n,
                                  bool has_more_patches)
{
    uint32_t off = chunk_find(tb, producer_id, writer_id, chunk_id);
    if (off == NONE || (n > 0 && !patches)) {
        tb->stats.patches_failed++;
        return -1;
    }
    struct tb_rec *r = rec_at(tb, off);
    uint8_t *payload = rec_payload(r);
    for (size_t i = 0; i < n; i++) {
        if (r->payload_len < sizeof(patches[i].data) || patches[i].offset > r->payload_len - sizeof(patches[i].data)) {
            tb->stats.patches_failed++;
            return -1;
        }
        memcpy(payload + patches[i].offset, patches[i].data, sizeof(patches[i].data));
        tb->stats.patches_succeeded++;
    }
    if (!has_more_patches)
        r->flags &= (uint8_t)~TG_SMB_CHUNK_NEEDS_PATCHING;
    return 0;
}

/* ---- public: reading ---- */

enum read_result { READ_NONE = 0, READ_PACKET = 1 };

/* Most a chunk's prefetch asks for: chunks are a page or less in practice (4 KiB), 32 KiB at most. */
#define PREFETCH_MAX (32u << 10)

/* Asks the CPU for the bytes of the chunk after r in its sequence, guessing it is as big as r (a
 * writer's chunks are one size). A read-out walks a buffer no cache holds (a full 64 MiB ring is
 * read once), and the hardware prefetcher stops at every 4 KiB page, i.e. at every chunk of a
 * 4 KiB-page SMB: without this, each chunk's first copy and check waited for memory line by line.
 * It only reads ahead within the ring, and a wrong guess costs a few useless cache lines. */
static void prefetch_next_chunk(const struct tg_trace_buffer *tb, const struct tb_rec *r)
{
    if (r->seq_next == NONE)
        return;
    size_t from = r->seq_next, len = r->size < PREFETCH_MAX ? r->size : PREFETCH_MAX;
    size_t to = from + len < tb->cap ? from + len : tb->cap;
    for (size_t o = from; o < to; o += 64)
        __builtin_prefetch(tb->buf + o, 0, 0);
}

/* The reader arrives at chunk r for the first time. Reached as the head of
 * the list, a chunk whose id is not the one after the last chunk read means
 * chunks in between were lost; reached by following a packet's continuation,
 * it is contiguous by construction (check_gap false). The next chunk's bytes
 * are asked for now. */
static void enter_chunk(const struct tg_trace_buffer *tb, struct tb_seq *s, struct tb_rec *r, bool check_gap)
{
    if (r->state & RS_ENTERED)
        return;
    prefetch_next_chunk(tb, r);
    if (check_gap && (s->bits & SEQ_EXPECT_VALID) && r->chunk_id != s->expect_id)
        s->bits |= SEQ_LOSS;
    r->state |= RS_ENTERED;
    s->read_id = r->chunk_id;
    s->bits |= SEQ_READ_VALID;
}

static void mark_fully_read(struct tb_rec *r)
{
    r->frags_read = r->num_fragments;
    r->read_off = r->payload_len;
}

static void save_pos(struct tb_rec *r, const struct tg_smb_frag_iter *it)
{
    r->frags_read = (uint16_t)it->next;
    r->read_off = (uint32_t)tg_smb_frag_iter_offset(it);
}

static void iter_at(struct tg_smb_frag_iter *it, struct tb_rec *r)
{
    tg_smb_frag_iter_init_at(it, rec_payload(r), r->payload_len, r->num_fragments, r->flags, r->read_off,
                             r->frags_read);
}

static bool push_slice(struct tg_trace_buffer *tb, size_t n, const uint8_t *data, size_t len)
{
    if (n >= tb->slices_cap) {
        size_t cap = tb->slices_cap * 2;
        struct tg_tb_slice *ns = realloc(tb->slices, cap * sizeof(*ns));
        if (!ns)
            return false;
        tb->slices = ns;
        tb->slices_cap = cap;
    }
    tb->slices[n].data = data;
    tb->slices[n].len = len;
    return true;
}

static void emit(struct tg_trace_buffer *tb, struct tb_seq *s, const struct tb_rec *first, size_t nslices,
                 struct tg_tb_packet *out, struct tg_tb_seq_info *info)
{
    size_t total = 0;
    for (size_t i = 0; i < nslices; i++)
        total += tb->slices[i].len;
    out->slices = tb->slices;
    out->num_slices = nslices;
    out->size = total;
    if (info) {
        info->producer_id = first->producer_id;
        info->uid = first->uid;
        info->pid = first->pid;
        info->machine_id = first->machine_id;
        info->writer_id = first->writer_id;
        info->previous_packet_dropped = (s->bits & SEQ_LOSS) != 0;
    }
    s->bits &= (uint8_t)~SEQ_LOSS;
}

/* Outcome of following a packet that continues past chunk `c`. */
enum chain_result { CHAIN_WAIT, CHAIN_BROKEN, CHAIN_DROPPED, CHAIN_OK };

/* Collects the continuation fragments of the packet whose first piece is
 * tb->slices[0] (last fragment of chunk c_off) into tb->slices, without
 * consuming anything. On CHAIN_OK/CHAIN_DROPPED, *last_off is the chunk
 * holding the final piece (or the drop marker), *last_it its iterator after
 * that piece, *nslices the slice count. */
static enum chain_result follow_chain(struct tg_trace_buffer *tb, uint32_t c_off, size_t *nslices,
                                      uint32_t *last_off, struct tg_smb_frag_iter *last_it)
{
    uint32_t cur = c_off;
    size_t n = 1;
    for (;;) {
        struct tb_rec *c = rec_at(tb, cur);
        uint32_t nx_off = c->seq_next;
        if (nx_off == NONE)
            return CHAIN_WAIT; /* the next piece has not arrived (yet) */
        struct tb_rec *nx = rec_at(tb, nx_off);
        if (nx->chunk_id != c->chunk_id + 1 || !(nx->flags & TG_SMB_CHUNK_FIRST_CONTINUES))
            return CHAIN_BROKEN;
        if (nx->frags_read > 0)
            return CHAIN_BROKEN; /* its first fragment is gone already */
        if (nx->flags & TG_SMB_CHUNK_NEEDS_PATCHING)
            return CHAIN_WAIT;
        if (nx->num_fragments == 0)
            return (nx->state & RS_COMPLETE) ? CHAIN_BROKEN : CHAIN_WAIT;
        struct tg_smb_frag_iter it;
        struct tg_smb_fragment f;
        iter_at(&it, nx);
        if (tg_smb_frag_next(&it, &f) != TG_SMB_FRAG_OK)
            return CHAIN_BROKEN; /* malformed; counted when the reader gets there */
        if (f.is_drop) {
            *last_off = nx_off;
            *last_it = it;
            *nslices = n;
            return CHAIN_DROPPED;
        }
        if (!push_slice(tb, n, f.data, f.len))
            return CHAIN_WAIT;
        n++;
        if (!f.is_last_continues) {
            *last_off = nx_off;
            *last_it = it;
            *nslices = n;
            return CHAIN_OK;
        }
        cur = nx_off; /* a middle chunk: its only fragment goes on further */
    }
}

/* Marks everything from the chunk after c_off up to last_off as read up to
 * last_it: the chunks in between held one fragment each. */
static void consume_chain(struct tg_trace_buffer *tb, struct tb_seq *s, uint32_t c_off, uint32_t last_off,
                          const struct tg_smb_frag_iter *last_it)
{
    uint32_t p = rec_at(tb, c_off)->seq_next;
    for (;;) {
        struct tb_rec *r = rec_at(tb, p);
        enter_chunk(tb, s, r, false);
        if (p == last_off) {
            save_pos(r, last_it);
            return;
        }
        mark_fully_read(r);
        p = r->seq_next;
    }
}

static enum read_result read_seq(struct tg_trace_buffer *tb, struct tb_seq *s, struct tg_tb_packet *out,
                                 struct tg_tb_seq_info *info)
{
    for (;;) {
        uint32_t c_off = s->head;
        if (c_off == NONE)
            return READ_NONE;
        struct tb_rec *c = rec_at(tb, c_off);
        enter_chunk(tb, s, c, true);
        if (c->frags_read >= c->num_fragments) {
            if (!(c->state & RS_COMPLETE))
                return READ_NONE; /* more fragments may still be copied in */
            retire_head(tb, s, c_off);
            continue;
        }
        if (c->flags & TG_SMB_CHUNK_NEEDS_PATCHING)
            return READ_NONE;

        struct tg_smb_frag_iter it;
        struct tg_smb_fragment f;
        iter_at(&it, c);
        int rc = tg_smb_frag_next(&it, &f);
        if (rc == TG_SMB_FRAG_ABI_VIOLATION) {
            tb->stats.abi_violations++;
            s->bits |= SEQ_LOSS;
            mark_fully_read(c);
            continue;
        }
        if (rc == TG_SMB_FRAG_END) { /* only padding was left */
            mark_fully_read(c);
            continue;
        }
        if (f.is_drop) {
            tb->stats.trace_writer_packet_loss++;
            s->bits |= SEQ_LOSS;
            save_pos(c, &it);
            continue;
        }
        if (f.is_first_continuation) {
            /* The start of this packet is not here (lost or overwritten). */
            s->bits |= SEQ_LOSS;
            save_pos(c, &it);
            continue;
        }
        if (!push_slice(tb, 0, f.data, f.len))
            return READ_NONE;
        if (!f.is_last_continues) {
            save_pos(c, &it);
            emit(tb, s, c, 1, out, info);
            return READ_PACKET;
        }

        size_t nslices = 0;
        uint32_t last_off = NONE;
        struct tg_smb_frag_iter last_it;
        switch (follow_chain(tb, c_off, &nslices, &last_off, &last_it)) {
        case CHAIN_WAIT:
            tb->stats.readaheads_failed++;
            return READ_NONE;
        case CHAIN_BROKEN:
            s->bits |= SEQ_LOSS;
            save_pos(c, &it);
            continue;
        case CHAIN_DROPPED:
            tb->stats.trace_writer_packet_loss++;
            s->bits |= SEQ_LOSS;
            save_pos(c, &it);
            consume_chain(tb, s, c_off, last_off, &last_it);
            continue;
        case CHAIN_OK:
            tb->stats.readaheads_succeeded++;
            save_pos(c, &it);
            consume_chain(tb, s, c_off, last_off, &last_it);
            emit(tb, s, c, nslices, out, info);
            return READ_PACKET;
        }
    }
}

bool tg_trace_buffer_read_packet(struct tg_trace_buffer *tb, struct tg_tb_packet *out,
                                 struct tg_tb_seq_info *info)
{
    if (tb->seq_used == 0)
        return false;
    if (tb->read_seq >= tb->seq_used)
        tb->read_seq = 0;
    for (uint32_t n = 0; n < tb->seq_used; n++) {
        struct tb_seq *s = &tb->seqs[tb->read_seq];
        if (s->in_use && s->head != NONE && read_seq(tb, s, out, info) == READ_PACKET)
            return true;
        tb->read_seq = (tb->read_seq + 1) % tb->seq_used;
    }
    return false;
}

size_t tg_tb_packet_copy(const struct tg_tb_packet *pkt, void *dst, size_t cap)
{
    if (pkt->size > cap)
        return 0;
    uint8_t *d = (uint8_t *)dst;
    for (size_t i = 0; i < pkt->num_slices; i++) {
        if (pkt->slices[i].len)
            memcpy(d, pkt->slices[i].data, pkt->slices[i].len);
        d += pkt->slices[i].len;
    }
    return pkt->size;
}

/* ---- public: clone (added by the service engineer for CloneSession) ----
 * Every internal link is an offset or an index, so a deep copy of the arrays
 * is a fully independent buffer with the same contents and read positions. */
struct tg_trace_buffer *tg_trace_buffer_clone(const struct tg_trace_buffer *src)
{
    struct tg_trace_buffer *tb = calloc(1, sizeof(*tb));
    if (!tb)
        return NULL;
    *tb = *src;
    tb->buf = NULL;
    tb->chunk_buckets = NULL;
    tb->seq_buckets = NULL;
    tb->seqs = NULL;
    tb->slices = NULL;
    size_t nb = (size_t)src->chunk_mask + 1, sb = (size_t)src->seq_mask + 1;
    tb->buf = malloc(src->cap);
    tb->chunk_buckets = malloc(nb * sizeof(uint32_t));
    tb->seq_buckets = malloc(sb * sizeof(uint32_t));
    tb->slices = malloc(src->slices_cap * sizeof(*tb->slices));
    if (src->seq_slots)
        tb->seqs = malloc((size_t)src->seq_slots * sizeof(*tb->seqs));
    if (!tb->buf || !tb->chunk_buckets || !tb->seq_buckets || !tb->slices || (src->seq_slots && !tb->seqs)) {
        tg_trace_buffer_free(tb);
        return NULL;
    }
    memcpy(tb->buf, src->buf, src->used_end);
    memcpy(tb->chunk_buckets, src->chunk_buckets, nb * sizeof(uint32_t));
    memcpy(tb->seq_buckets, src->seq_buckets, sb * sizeof(uint32_t));
    if (src->seq_slots)
        memcpy(tb->seqs, src->seqs, (size_t)src->seq_slots * sizeof(*tb->seqs));
    return tb;
}
