/* fed_packets.c: rewriting one node's ReadBuffers replies for a federated trace (reassemble each
 * packet, stamp machine_id 98 and a fresh trusted_packet_sequence_id 10 in an appended slice, as
 * traced appends its trusted fields; the parser keeps the last occurrence), and the packets the
 * fan-out adds: RemoteClockSync (107), a node's failure as TraceStats (35), and a node's link
 * gap as TraceStats' tracegate extension field (docs/link-protocol.md §8). */
#include "fed_packets.h"

#include <event2/buffer.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock_anchor.h"
#include "fed_clocks.h"
#include "ipc/rb_slices.h"
#include "tracegate/kcdata_node.h"
#include "tracegate/pbwire.h"

enum {
    PKT_TRUSTED_SEQ = 10,
    PKT_TRACE_STATS = 35,
    PKT_MACHINE_ID = 98,
    PKT_REMOTE_CLOCK_SYNC = 107,
    RB_SLICES = 2,
    SLICE_DATA = 1,
    SLICE_LAST = 2,
    STATS_FINAL_FLUSH_OUTCOME = 15,
    FINAL_FLUSH_FAILED = 2,
    STATS_TG_LINK_GAP = 1001, /* tracegate's extension of TraceStats: TracegateLinkGap */
    GAP_COUNT = 1,
    GAP_NS = 2,
    GAP_REATTACHED = 3,
    SLICE_CHUNK = 64 * 1024,
};

int tg_fed_stream_init(struct tg_fed_stream *st, uint32_t machine_id, struct tg_fed_seq_alloc *alloc,
                       size_t max_packet)
{
    memset(st, 0, sizeof *st);
    st->machine_id = machine_id;
    st->alloc = alloc;
    st->max_packet = max_packet;
    st->partial = evbuffer_new();
    return st->partial ? 0 : -1;
}

void tg_fed_stream_clear(struct tg_fed_stream *st)
{
    if (st->partial)
        evbuffer_free(st->partial);
    free(st->seq_from);
    free(st->seq_to);
    memset(st, 0, sizeof *st);
}

static size_t seq_slot(uint32_t seq, size_t cap)
{
    uint32_t h = seq * 2654435761u; /* Knuth's multiplicative hash; cap is a power of two */
    return (size_t)(h ^ (h >> 16)) & (cap - 1);
}

/* Doubles the table (kept at most half full). */
static int seq_grow(struct tg_fed_stream *st)
{
    size_t cap = st->cap_seq ? st->cap_seq * 2 : 32;
    uint32_t *f = calloc(cap, sizeof *f), *t = calloc(cap, sizeof *t);
    if (!f || !t) {
        free(f);
        free(t);
        return -1;
    }
    for (size_t i = 0; i < st->cap_seq; i++) {
        if (!st->seq_to[i])
            continue;
        size_t k = seq_slot(st->seq_from[i], cap);
        while (t[k])
            k = (k + 1) & (cap - 1);
        f[k] = st->seq_from[i];
        t[k] = st->seq_to[i];
    }
    free(st->seq_from);
    free(st->seq_to);
    st->seq_from = f;
    st->seq_to = t;
    st->cap_seq = cap;
    return 0;
}

uint32_t tg_fed_map_seq(struct tg_fed_stream *st, uint32_t seq)
{
    if (st->cap_seq) {
        for (size_t k = seq_slot(seq, st->cap_seq); st->seq_to[k]; k = (k + 1) & (st->cap_seq - 1))
            if (st->seq_from[k] == seq)
                return st->seq_to[k];
    }
    if (st->n_seq >= TG_FED_MAX_SEQS)
        return 0;
    if (!st->alloc->next)
        st->alloc->next = 1;
    if (st->alloc->next == UINT32_MAX)
        return 0; /* the session's ids ran out: never wrap onto one in use */
    if ((st->n_seq + 1) * 2 > st->cap_seq && seq_grow(st) != 0)
        return 0;
    size_t k = seq_slot(seq, st->cap_seq);
    while (st->seq_to[k])
        k = (k + 1) & (st->cap_seq - 1);
    st->seq_from[k] = seq;
    st->seq_to[k] = st->alloc->next++;
    st->n_seq++;
    return st->seq_to[k];
}

static int machine_reserved(const struct tg_fed_seq_alloc *a, uint32_t id)
{
    for (size_t i = 0; i < a->n_reserved; i++)
        if (a->reserved[i] == id)
            return 1;
    return 0;
}

/* Appends one ReadBuffersResponse.Slice: data = a[alen] followed by b[blen]. */
static int put_slice(struct evbuffer *out, const uint8_t *a, size_t alen, const uint8_t *b, size_t blen, int last)
{
    uint8_t hdr[32];
    size_t dlen = alen + blen;
    size_t body = 1 + tg_pb_varint_size(dlen) + dlen + (last ? 2 : 0);
    size_t n = tg_pb_put_tag(hdr, RB_SLICES, TG_PB_LEN);
    n += tg_pb_put_varint(hdr + n, body);
    n += tg_pb_put_tag(hdr + n, SLICE_DATA, TG_PB_LEN);
    n += tg_pb_put_varint(hdr + n, dlen);
    if (evbuffer_add(out, hdr, n) != 0 || (alen && evbuffer_add(out, a, alen) != 0) ||
        (blen && evbuffer_add(out, b, blen) != 0))
        return -1;
    if (last) {
        uint8_t t[2] = {(uint8_t)(SLICE_LAST << 3 | TG_PB_VARINT), 1};
        return evbuffer_add(out, t, sizeof t);
    }
    return 0;
}

/* Appends a whole packet as slices of at most SLICE_CHUNK, the stamp in the last. */
static int put_packet(struct evbuffer *out, const uint8_t *pkt, size_t len, const uint8_t *stamp, size_t slen)
{
    while (len > SLICE_CHUNK) {
        if (put_slice(out, pkt, SLICE_CHUNK, NULL, 0, 0) != 0)
            return -1;
        pkt += SLICE_CHUNK;
        len -= SLICE_CHUNK;
    }
    return put_slice(out, pkt, len, stamp, slen, 1);
}

enum { FINISH_OOM = -1, FINISH_SEQS = -2 };

/* The clock anchor after a machine's RemoteClockSync (base/clock_anchor.h): without it trace
 * processor kept a node's packets at their raw times whenever the node's own ClockSnapshots came
 * first (docs/link-protocol.md §8). */
static int anchor_packet(uint32_t machine_id, uint64_t boottime, struct evbuffer *out)
{
    uint8_t pkt[TG_CLOCK_ANCHOR_MAX];
    return put_packet(out, pkt, tg_clock_anchor_encode(pkt, machine_id, boottime), NULL, 0);
}

static int finish_packet(struct tg_fed_stream *st, struct evbuffer *out)
{
    size_t len = evbuffer_get_length(st->partial);
    const uint8_t *pkt = len ? evbuffer_pullup(st->partial, -1) : NULL;
    if (len && !pkt)
        return FINISH_OOM;
    /* the service's trusted slice comes last. Perfetto's reader takes a field's last occurrence
     * and reads a uint32 from a varint, fixed32 or fixed64 alike (its low 32 bits), so so do we:
     * a sequence id or machine id in another encoding must not slip past the stamp */
    int have_seq = 0, machine_ok = 1, have_sync = 0;
    uint64_t seq = 0, machine = 0;
    struct tg_pb_reader r;
    struct tg_pb_field f;
    tg_pb_reader_init(&r, pkt, len);
    while (tg_pb_next(&r, &f) == 1)
        if (f.number == PKT_TRUSTED_SEQ) {
            have_seq = 1;
            seq = f.wire == TG_PB_LEN ? 0 : f.value;
        } else if (f.number == PKT_MACHINE_ID) {
            machine_ok = f.wire != TG_PB_LEN;
            machine = machine_ok ? (uint32_t)f.value : 0;
        } else if (f.number == PKT_REMOTE_CLOCK_SYNC) {
            have_sync = 1;
        }
    int stamp_machine = st->machine_id && (!machine_ok || !machine || machine_reserved(st->alloc, (uint32_t)machine));
    uint8_t *rebased = NULL;
    if (have_sync && st->machine_id) {
        /* trace processor takes a RemoteClockSync as the named machine's offset to the trace's host
         * (the hub). traced emits one per machine relayed to it, without a sequence id, its host
         * clocks the node's own: moved onto ours (relayed machine -> node -> hub). Any other would
         * override a machine's sync: the node's own (the hub's packet for it) when stamped with
         * the node's id, or a relayed machine's when a producer wrote it */
        size_t rl = 0;
        if (have_seq || stamp_machine || (st->have_clock_off && tg_fed_rebase_clock_sync(pkt, len, st->clock_off,
                                                                                        &rebased, &rl) != 0)) {
            st->clock_syncs_dropped++;
            return evbuffer_drain(st->partial, len);
        }
        if (rebased) {
            uint64_t boot;
            uint32_t synced;
            int rc = put_packet(out, rebased, rl, NULL, 0);
            if (rc == 0 && tg_clock_anchor_for_sync(rebased, rl, &synced, &boot)) {
                rc = anchor_packet(synced, boot, out);
                st->anchors += rc == 0;
            }
            free(rebased);
            if (rc != 0)
                return -1;
            st->packets++;
            st->bytes += rl;
            return evbuffer_drain(st->partial, len);
        }
    }
    uint8_t stamp[32];
    size_t n = 0;
    if (have_seq) {
        uint32_t mapped = tg_fed_map_seq(st, (uint32_t)seq);
        if (!mapped)
            return st->n_seq >= TG_FED_MAX_SEQS ? FINISH_SEQS : FINISH_OOM;
        n += tg_pb_put_tag(stamp + n, PKT_TRUSTED_SEQ, TG_PB_VARINT);
        n += tg_pb_put_varint(stamp + n, mapped);
    }
    /* a packet the node's service already gave a machine (a producer that reached it over a link
     * from a third node) keeps it: the ids are the same on every node. But that is the node's
     * word: it may not claim the hub (0, or the hub's name) or another node of the session */
    if (stamp_machine) {
        n += tg_pb_put_tag(stamp + n, PKT_MACHINE_ID, TG_PB_VARINT);
        n += tg_pb_put_varint(stamp + n, st->machine_id);
    }
    if (put_packet(out, pkt, len, stamp, n) != 0)
        return -1;
    st->packets++;
    st->bytes += len;
    return evbuffer_drain(st->partial, len);
}

struct rewrite_ctx {
    struct tg_fed_stream *st;
    struct evbuffer *out;
    int too_large; /* else: out of memory */
    int too_many_seqs;
};

static int rewrite_slice(void *arg, const uint8_t *data, size_t len, int last)
{
    struct rewrite_ctx *c = arg;
    if (evbuffer_get_length(c->st->partial) + len > c->st->max_packet) {
        c->too_large = 1;
        return -1;
    }
    if (len && evbuffer_add(c->st->partial, data, len) != 0)
        return -1;
    int rc = last ? finish_packet(c->st, c->out) : 0;
    c->too_many_seqs = rc == FINISH_SEQS;
    return rc ? -1 : 0;
}

int tg_fed_rewrite_reply(struct tg_fed_stream *st, const uint8_t *reply, size_t len, struct evbuffer *out, char *err,
                         size_t errlen)
{
    struct rewrite_ctx c = {st, out, 0, 0};
    const char *where = "reply";
    int rc = tg_rb_slices_each(reply, len, rewrite_slice, &c, &where);
    if (rc == TG_RB_MALFORMED) {
        snprintf(err, errlen, "malformed %s", strcmp(where, "slice") == 0 ? "slice in ReadBuffers reply" : "ReadBuffers reply");
        return -1;
    }
    if (rc != 0) {
        if (c.too_large)
            snprintf(err, errlen, "a packet larger than %zu bytes", st->max_packet);
        else if (c.too_many_seqs)
            snprintf(err, errlen, "more than %d packet sequences", TG_FED_MAX_SEQS);
        else
            snprintf(err, errlen, "out of memory");
        return -1;
    }
    return 0;
}

/* ClockSnapshot{clocks[4]{clock_id, timestamp}, primary_trace_clock: BOOTTIME} */
static size_t put_snapshot(uint8_t *buf, const uint64_t v[4])
{
    static const uint32_t ids[4] = {TG_NODE_CLOCK_BOOTTIME, TG_NODE_CLOCK_REALTIME, TG_NODE_CLOCK_MONOTONIC,
                                    TG_NODE_CLOCK_MONOTONIC_RAW};
    size_t n = 0;
    for (int i = 0; i < 4; i++) {
        uint8_t c[24];
        size_t cl = tg_pb_put_tag(c, 1, TG_PB_VARINT);
        cl += tg_pb_put_varint(c + cl, ids[i]);
        cl += tg_pb_put_tag(c + cl, 2, TG_PB_VARINT);
        cl += tg_pb_put_varint(c + cl, v[i]);
        n += tg_pb_put_tag(buf + n, 1, TG_PB_LEN);
        n += tg_pb_put_varint(buf + n, cl);
        memcpy(buf + n, c, cl);
        n += cl;
    }
    n += tg_pb_put_tag(buf + n, 2, TG_PB_VARINT);
    n += tg_pb_put_varint(buf + n, TG_NODE_CLOCK_BOOTTIME);
    return n;
}

int tg_fed_clock_sync_packet(uint32_t machine_id, const uint64_t (*peer)[4], const uint64_t (*mine)[4], size_t n,
                             struct evbuffer *out)
{
    if (!n)
        return 0;
    /* each SyncedClocks is under 140 bytes: two snapshots of four clocks */
    size_t cap = 32 + n * 160;
    uint8_t *pkt = malloc(cap), *sync = malloc(cap);
    if (!pkt || !sync) {
        free(pkt);
        free(sync);
        return -1;
    }
    size_t sl = 0;
    for (size_t i = 0; i < n; i++) {
        uint8_t snap[2][72];
        size_t a = put_snapshot(snap[0], peer[i]), b = put_snapshot(snap[1], mine[i]);
        sl += tg_pb_put_tag(sync + sl, 1, TG_PB_LEN);
        sl += tg_pb_put_varint(sync + sl, 2 + a + b + tg_pb_varint_size(a) + tg_pb_varint_size(b));
        sl += tg_pb_put_tag(sync + sl, 2, TG_PB_LEN); /* client_clocks: the node's */
        sl += tg_pb_put_varint(sync + sl, a);
        memcpy(sync + sl, snap[0], a);
        sl += a;
        sl += tg_pb_put_tag(sync + sl, 3, TG_PB_LEN); /* host_clocks: ours, on receipt */
        sl += tg_pb_put_varint(sync + sl, b);
        memcpy(sync + sl, snap[1], b);
        sl += b;
    }
    size_t pl = 0;
    pl += tg_pb_put_tag(pkt + pl, PKT_MACHINE_ID, TG_PB_VARINT);
    pl += tg_pb_put_varint(pkt + pl, machine_id);
    pl += tg_pb_put_tag(pkt + pl, PKT_REMOTE_CLOCK_SYNC, TG_PB_LEN);
    pl += tg_pb_put_varint(pkt + pl, sl);
    int rc = -1;
    if (pl + sl <= cap) {
        memcpy(pkt + pl, sync, sl);
        rc = put_packet(out, pkt, pl + sl, NULL, 0);
    }
    if (rc == 0)
        rc = anchor_packet(machine_id, peer[n - 1][0], out);
    free(pkt);
    free(sync);
    return rc;
}

/* A TraceStats packet with the given body, on the node's service sequence, with its machine id. */
static int stats_packet(struct tg_fed_stream *st, const uint8_t *body, size_t blen, struct evbuffer *out)
{
    uint8_t pkt[96];
    size_t n = 0;
    uint32_t seq = tg_fed_map_seq(st, 1); /* the node's service sequence */
    if (!seq || blen > 64)
        return -1;
    n += tg_pb_put_tag(pkt + n, PKT_TRACE_STATS, TG_PB_LEN);
    n += tg_pb_put_varint(pkt + n, blen);
    memcpy(pkt + n, body, blen);
    n += blen;
    n += tg_pb_put_tag(pkt + n, PKT_TRUSTED_SEQ, TG_PB_VARINT);
    n += tg_pb_put_varint(pkt + n, seq);
    if (st->machine_id) {
        n += tg_pb_put_tag(pkt + n, PKT_MACHINE_ID, TG_PB_VARINT);
        n += tg_pb_put_varint(pkt + n, st->machine_id);
    }
    return put_packet(out, pkt, n, NULL, 0);
}

int tg_fed_failure_packet(struct tg_fed_stream *st, struct evbuffer *out)
{
    uint8_t body[8];
    size_t b = 0;
    b += tg_pb_put_tag(body + b, STATS_FINAL_FLUSH_OUTCOME, TG_PB_VARINT);
    b += tg_pb_put_varint(body + b, FINAL_FLUSH_FAILED);
    return stats_packet(st, body, b, out);
}

int tg_fed_gap_packet(struct tg_fed_stream *st, uint32_t gaps, uint64_t gap_ns, int reattached, struct evbuffer *out)
{
    uint8_t gap[32], body[48];
    size_t g = 0, b = 0;
    g += tg_pb_put_tag(gap + g, GAP_COUNT, TG_PB_VARINT);
    g += tg_pb_put_varint(gap + g, gaps);
    g += tg_pb_put_tag(gap + g, GAP_NS, TG_PB_VARINT);
    g += tg_pb_put_varint(gap + g, gap_ns);
    g += tg_pb_put_tag(gap + g, GAP_REATTACHED, TG_PB_VARINT);
    g += tg_pb_put_varint(gap + g, reattached ? 1 : 0);
    b += tg_pb_put_tag(body + b, STATS_TG_LINK_GAP, TG_PB_LEN);
    b += tg_pb_put_varint(body + b, g);
    memcpy(body + b, gap, g);
    b += g;
    return stats_packet(st, body, b, out);
}
