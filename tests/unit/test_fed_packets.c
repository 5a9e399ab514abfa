/* test_fed_packets.c: a federated trace's packet rewriting (gateway/fed_packets.c): packets
 * reassembled across slices and replies keep their bytes, carry the node's machine id and a
 * sequence id unique across nodes (the last occurrence, as the trace's readers take it); big
 * packets are re-sliced; bad replies are refused; RemoteClockSync and failure packets decode as
 * Perfetto's TracePacket with the values given; a hostile node's trusted fields (another
 * node's or the hub's machine, a sequence id in another encoding, endless sequences); a machine
 * relayed to a node put on the hub's timeline (its RemoteClockSync composed with the node's
 * offset), other RemoteClockSync packets from a node dropped; sequence-less packets kept so, on
 * their machine. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <event2/buffer.h>

#include "fed_clocks.h"
#include "fed_packets.h"
#include "trace_packet.pb-c.h"
#include "tracegate/pbwire.h"

/* ---- building ReadBuffersResponse bytes ---- */

struct bytes {
    uint8_t *p;
    size_t n, cap;
};

/* grows geometrically: test_too_many_sequences builds a reply of 65536 slices, and growing by
 * each field's size copied the whole reply every time (minutes under ASan) */
static void put(struct bytes *b, const void *d, size_t n)
{
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->n + n + 1)
            cap *= 2;
        b->p = realloc(b->p, cap);
        assert_non_null(b->p);
        b->cap = cap;
    }
    memcpy(b->p + b->n, d, n);
    b->n += n;
}

static void put_varint_field(struct bytes *b, uint32_t field, uint64_t v)
{
    uint8_t t[24];
    size_t n = tg_pb_put_tag(t, field, TG_PB_VARINT);
    n += tg_pb_put_varint(t + n, v);
    put(b, t, n);
}

static void put_len_field(struct bytes *b, uint32_t field, const void *d, size_t len)
{
    uint8_t t[24];
    size_t n = tg_pb_put_tag(t, field, TG_PB_LEN);
    n += tg_pb_put_varint(t + n, len);
    put(b, t, n);
    put(b, d, len);
}

static void add_slice(struct bytes *reply, const void *d, size_t len, int last)
{
    struct bytes s = {0};
    put_len_field(&s, 1, d, len);
    if (last)
        put_varint_field(&s, 2, 1);
    put_len_field(reply, 2, s.p, s.n);
    free(s.p);
}

/* a node's packet: a payload field then the service's trusted slice (uid, sequence id) */
static struct bytes node_packet(const char *payload, uint32_t seq)
{
    struct bytes p = {0};
    put_len_field(&p, 36 /* a payload field the rewriter must keep as is */, payload, strlen(payload));
    put_varint_field(&p, 3, 1000);
    put_varint_field(&p, 10, seq);
    return p;
}

/* ---- reading the rewriter's output: whole packets from the slices ---- */

struct out_packets {
    struct bytes pkt[16];
    size_t n;
    size_t slices;
};

static void collect(struct evbuffer *out, struct out_packets *o)
{
    size_t len = evbuffer_get_length(out);
    const uint8_t *p = evbuffer_pullup(out, -1);
    struct tg_pb_reader r;
    struct tg_pb_field f;
    struct bytes cur = {0};
    tg_pb_reader_init(&r, p, len);
    while (tg_pb_next(&r, &f) == 1) {
        assert_int_equal(f.number, 2);
        o->slices++;
        struct tg_pb_reader sr;
        struct tg_pb_field sf;
        int last = 0;
        tg_pb_reader_init(&sr, f.data, f.len);
        while (tg_pb_next(&sr, &sf) == 1) {
            if (sf.number == 1)
                put(&cur, sf.data, sf.len);
            if (sf.number == 2)
                last = (int)sf.value;
        }
        if (last) {
            assert_true(o->n < 16);
            o->pkt[o->n++] = cur;
            memset(&cur, 0, sizeof cur);
        }
    }
    assert_int_equal(cur.n, 0); /* nothing left half-way */
    free(cur.p);
    evbuffer_drain(out, len);
}

static Perfetto__Protos__TracePacket *decode(const struct bytes *b)
{
    Perfetto__Protos__TracePacket *tp = perfetto__protos__trace_packet__unpack(NULL, b->n, b->p);
    assert_non_null(tp);
    return tp;
}

static void free_out(struct out_packets *o)
{
    for (size_t i = 0; i < o->n; i++)
        free(o->pkt[i].p);
    memset(o, 0, sizeof *o);
}

static void test_stamps_and_reassembles(void **state)
{
    (void)state;
    struct tg_fed_seq_alloc alloc = {.next = 1};
    struct tg_fed_stream a, b;
    assert_int_equal(tg_fed_stream_init(&a, 0, &alloc, 1 << 20), 0);
    assert_int_equal(tg_fed_stream_init(&b, 0xBEEF, &alloc, 1 << 20), 0);
    struct evbuffer *out = evbuffer_new();
    char err[128];

    /* node A (machine 0): packet "one" in two slices of one reply; node A seq 2 */
    struct bytes p1 = node_packet("one", 2), r1 = {0};
    add_slice(&r1, p1.p, 2, 0);
    add_slice(&r1, p1.p + 2, p1.n - 2, 1);
    assert_int_equal(tg_fed_rewrite_reply(&a, r1.p, r1.n, out, err, sizeof err), 0);
    /* node B (machine 0xBEEF): packet "two" split across two replies, also seq 2 on its side */
    struct bytes p2 = node_packet("two", 2), r2 = {0}, r3 = {0};
    add_slice(&r2, p2.p, 4, 0);
    assert_int_equal(tg_fed_rewrite_reply(&b, r2.p, r2.n, out, err, sizeof err), 0);
    add_slice(&r3, p2.p + 4, p2.n - 4, 1);
    assert_int_equal(tg_fed_rewrite_reply(&b, r3.p, r3.n, out, err, sizeof err), 0);

    struct out_packets o = {0};
    collect(out, &o);
    assert_int_equal(o.n, 2);
    /* the node's bytes come first, unchanged */
    assert_memory_equal(o.pkt[0].p, p1.p, p1.n);
    assert_memory_equal(o.pkt[1].p, p2.p, p2.n);
    Perfetto__Protos__TracePacket *t1 = decode(&o.pkt[0]), *t2 = decode(&o.pkt[1]);
    /* both nodes used sequence 2: in the merged trace they differ */
    assert_int_not_equal(t1->trusted_packet_sequence_id, t2->trusted_packet_sequence_id);
    assert_int_equal(t1->trusted_packet_sequence_id, tg_fed_map_seq(&a, 2));
    assert_int_equal(t2->trusted_packet_sequence_id, tg_fed_map_seq(&b, 2));
    assert_false(t1->has_machine_id && t1->machine_id); /* this node: no machine id, as traced does */
    assert_true(t2->has_machine_id);
    assert_int_equal(t2->machine_id, 0xBEEF);
    assert_int_equal(t2->trusted_uid, 1000);
    perfetto__protos__trace_packet__free_unpacked(t1, NULL);
    perfetto__protos__trace_packet__free_unpacked(t2, NULL);
    assert_int_equal(a.packets, 1);
    assert_int_equal(b.packets, 1);
    /* the same node sequence keeps its mapping */
    assert_int_equal(tg_fed_map_seq(&b, 2), tg_fed_map_seq(&b, 2));

    free_out(&o);
    free(p1.p), free(p2.p), free(r1.p), free(r2.p), free(r3.p);
    evbuffer_free(out);
    tg_fed_stream_clear(&a);
    tg_fed_stream_clear(&b);
}

static void test_big_packet_is_resliced(void **state)
{
    (void)state;
    struct tg_fed_seq_alloc alloc = {.next = 1};
    struct tg_fed_stream st;
    assert_int_equal(tg_fed_stream_init(&st, 7, &alloc, 1 << 20), 0);
    size_t big = 200 * 1024;
    char *payload = malloc(big + 1);
    assert_non_null(payload);
    memset(payload, 'x', big);
    payload[big] = 0;
    struct bytes p = node_packet(payload, 5), r = {0};
    add_slice(&r, p.p, p.n, 1);
    struct evbuffer *out = evbuffer_new();
    char err[128];
    assert_int_equal(tg_fed_rewrite_reply(&st, r.p, r.n, out, err, sizeof err), 0);
    struct out_packets o = {0};
    collect(out, &o);
    assert_int_equal(o.n, 1);
    assert_true(o.slices >= 4); /* no slice over 64 KiB: every reply stays under the frame limit */
    assert_memory_equal(o.pkt[0].p, p.p, p.n);
    Perfetto__Protos__TracePacket *t = decode(&o.pkt[0]);
    assert_int_equal(t->machine_id, 7);
    perfetto__protos__trace_packet__free_unpacked(t, NULL);
    free_out(&o);
    free(payload), free(p.p), free(r.p);
    evbuffer_free(out);
    tg_fed_stream_clear(&st);
}

static void test_bad_replies_refused(void **state)
{
    (void)state;
    struct tg_fed_seq_alloc alloc = {.next = 1};
    struct tg_fed_stream st;
    assert_int_equal(tg_fed_stream_init(&st, 7, &alloc, 1000), 0);
    struct evbuffer *out = evbuffer_new();
    char err[128] = "";
    /* truncated: a slice whose length runs past the end */
    static const uint8_t trunc[] = {0x12, 0x10, 0x0a, 0x02, 'a'};
    assert_int_equal(tg_fed_rewrite_reply(&st, trunc, sizeof trunc, out, err, sizeof err), -1);
    assert_non_null(strstr(err, "malformed"));
    /* a packet over the limit, even when it arrives in small slices */
    char chunk[600];
    memset(chunk, 'y', sizeof chunk);
    struct bytes r = {0};
    add_slice(&r, chunk, sizeof chunk, 0);
    assert_int_equal(tg_fed_rewrite_reply(&st, r.p, r.n, out, err, sizeof err), 0);
    assert_int_equal(tg_fed_rewrite_reply(&st, r.p, r.n, out, err, sizeof err), -1);
    assert_non_null(strstr(err, "larger than"));
    assert_int_equal(evbuffer_get_length(out), 0); /* nothing half-done went out */
    free(r.p);
    evbuffer_free(out);
    tg_fed_stream_clear(&st);
}

/* The field's value as Perfetto's reader takes it: the last occurrence, a varint, fixed32 or
 * fixed64 alike, its low 32 bits. -1 when absent. */
static int64_t last_u32(const struct bytes *b, uint32_t field)
{
    struct tg_pb_reader r;
    struct tg_pb_field f;
    int64_t v = -1;
    tg_pb_reader_init(&r, b->p, b->n);
    while (tg_pb_next(&r, &f) == 1)
        if (f.number == field && f.wire != TG_PB_LEN)
            v = (uint32_t)f.value;
    return v;
}

static void put_fixed32_field(struct bytes *b, uint32_t field, uint32_t v)
{
    uint8_t t[16];
    size_t n = tg_pb_put_tag(t, field, TG_PB_I32);
    for (int i = 0; i < 4; i++)
        t[n++] = (uint8_t)(v >> (8 * i));
    put(b, t, n);
}

/* A hostile node (machine 0xBEEF) in a session with the hub (its name's id 0x1111, its own
 * packets machine 0) and node C (0xC0DE): what it writes into its packets' trusted fields does
 * not survive into the merged trace as another node, the hub or another sequence. */
static void test_hostile_node_fields(void **state)
{
    (void)state;
    struct tg_fed_seq_alloc alloc = {.next = 1, .reserved = {0x1111, 0xBEEF, 0xC0DE}, .n_reserved = 3};
    struct tg_fed_stream hub, b;
    assert_int_equal(tg_fed_stream_init(&hub, 0, &alloc, 1 << 20), 0);
    assert_int_equal(tg_fed_stream_init(&b, 0xBEEF, &alloc, 1 << 20), 0);
    uint32_t hub_seq = tg_fed_map_seq(&hub, 1); /* the hub's service sequence */
    struct bytes p[6] = {{0}}, r = {0};
    /* 0: claims node C's machine */
    put_varint_field(&p[0], 10, 3);
    put_varint_field(&p[0], 98, 0xC0DE);
    /* 1: a machine, then machine 0 as a fixed32: the last one is the hub's (0) */
    put_varint_field(&p[1], 10, 3);
    put_varint_field(&p[1], 98, 0x5555);
    put_fixed32_field(&p[1], 98, 0);
    /* 2: its sequence id only as a fixed32, the hub's own mapped id */
    put_len_field(&p[2], 36, "x", 1);
    put_fixed32_field(&p[2], 10, hub_seq);
    /* 3: a producer relayed to it from a machine outside the session: kept */
    put_varint_field(&p[3], 10, 4);
    put_varint_field(&p[3], 98, 0x5555);
    /* 4: the hub's name's machine */
    put_varint_field(&p[4], 10, 4);
    put_varint_field(&p[4], 98, 0x1111);
    /* 5: a machine id above 32 bits whose low bits are 0 (the hub) */
    put_varint_field(&p[5], 10, 4);
    put_varint_field(&p[5], 98, 1ull << 32);
    for (int i = 0; i < 6; i++)
        add_slice(&r, p[i].p, p[i].n, 1);
    struct evbuffer *out = evbuffer_new();
    char err[128];
    assert_int_equal(tg_fed_rewrite_reply(&b, r.p, r.n, out, err, sizeof err), 0);
    struct out_packets o = {0};
    collect(out, &o);
    assert_int_equal(o.n, 6);
    static const int64_t machine[6] = {0xBEEF, 0xBEEF, 0xBEEF, 0x5555, 0xBEEF, 0xBEEF};
    for (int i = 0; i < 6; i++) {
        assert_int_equal(last_u32(&o.pkt[i], 98), machine[i]);
        int64_t seq = last_u32(&o.pkt[i], 10);
        assert_true(seq > 0);
        assert_int_not_equal(seq, hub_seq);
    }
    assert_int_equal(last_u32(&o.pkt[2], 10), tg_fed_map_seq(&b, hub_seq));
    free_out(&o);
    free(r.p);
    for (int i = 0; i < 6; i++)
        free(p[i].p);
    evbuffer_free(out);
    tg_fed_stream_clear(&hub);
    tg_fed_stream_clear(&b);
}

/* A node that numbers every packet on a sequence of its own is refused once it passes
 * TG_FED_MAX_SEQS, instead of growing the hub's map (and its lookups) without bound. */
static void test_too_many_sequences(void **state)
{
    (void)state;
    struct tg_fed_seq_alloc alloc = {.next = 1};
    struct tg_fed_stream st;
    assert_int_equal(tg_fed_stream_init(&st, 7, &alloc, 1 << 20), 0);
    struct evbuffer *out = evbuffer_new();
    char err[128] = "";
    struct bytes r = {0};
    for (uint32_t i = 0; i < TG_FED_MAX_SEQS; i++) {
        struct bytes p = {0};
        put_varint_field(&p, 10, 1000000u + i * 3u);
        add_slice(&r, p.p, p.n, 1);
        free(p.p);
    }
    assert_int_equal(tg_fed_rewrite_reply(&st, r.p, r.n, out, err, sizeof err), 0);
    assert_int_equal(st.n_seq, TG_FED_MAX_SEQS);
    /* the same sequences again are fine; one more is not */
    assert_int_equal(tg_fed_rewrite_reply(&st, r.p, r.n, out, err, sizeof err), 0);
    free(r.p);
    memset(&r, 0, sizeof r);
    struct bytes p = {0};
    put_varint_field(&p, 10, 5);
    add_slice(&r, p.p, p.n, 1);
    assert_int_equal(tg_fed_rewrite_reply(&st, r.p, r.n, out, err, sizeof err), -1);
    assert_non_null(strstr(err, "packet sequences"));
    free(p.p);
    free(r.p);
    evbuffer_free(out);
    tg_fed_stream_clear(&st);
}

static void test_clock_sync_and_failure_packets(void **state)
{
    (void)state;
    uint64_t peer[2][4] = {{1000, 2000, 3000, 4000}, {1500, 2500, 3500, 4500}};
    uint64_t mine[2][4] = {{900, 1900, 2900, 3900}, {1450, 2450, 3450, 4450}};
    struct evbuffer *out = evbuffer_new();
    assert_int_equal(tg_fed_clock_sync_packet(42, (const uint64_t(*)[4])peer, (const uint64_t(*)[4])mine, 2, out), 0);
    struct tg_fed_seq_alloc alloc = {.next = 1};
    struct tg_fed_stream st;
    assert_int_equal(tg_fed_stream_init(&st, 42, &alloc, 1000), 0);
    assert_int_equal(tg_fed_failure_packet(&st, out), 0);
    assert_int_equal(tg_fed_clock_sync_packet(42, NULL, NULL, 0, out), 0); /* nothing for no records */
    struct out_packets o = {0};
    collect(out, &o);
    assert_int_equal(o.n, 3); /* the sync, its anchor, the failure */

    Perfetto__Protos__TracePacket *cs = decode(&o.pkt[0]);
    assert_int_equal(cs->machine_id, 42);
    assert_int_equal(cs->data_case, PERFETTO__PROTOS__TRACE_PACKET__DATA_REMOTE_CLOCK_SYNC);
    assert_int_equal(cs->remote_clock_sync->n_synced_clocks, 2);
    for (size_t i = 0; i < 2; i++) {
        const Perfetto__Protos__RemoteClockSync__SyncedClocks *sc = cs->remote_clock_sync->synced_clocks[i];
        assert_int_equal(sc->client_clocks->n_clocks, 4);
        assert_int_equal(sc->host_clocks->n_clocks, 4);
        /* BOOTTIME (6) first, as the node read it, then ours on receipt */
        assert_int_equal(sc->client_clocks->clocks[0]->clock_id, 6);
        assert_int_equal(sc->client_clocks->clocks[0]->timestamp, peer[i][0]);
        assert_int_equal(sc->host_clocks->clocks[0]->timestamp, mine[i][0]);
        assert_int_equal(sc->client_clocks->clocks[1]->clock_id, 1); /* REALTIME */
        assert_int_equal(sc->client_clocks->clocks[1]->timestamp, peer[i][1]);
    }
    perfetto__protos__trace_packet__free_unpacked(cs, NULL);

    /* the anchor: the node's last BOOTTIME reading as the packet's time, on BOOTTIME, its machine,
     * nothing else (trace processor converts it first, through the sync) */
    Perfetto__Protos__TracePacket *an = decode(&o.pkt[1]);
    assert_int_equal(an->machine_id, 42);
    assert_int_equal(an->timestamp, peer[1][0]);
    assert_int_equal(an->timestamp_clock_id, 6);
    assert_int_equal(an->data_case, PERFETTO__PROTOS__TRACE_PACKET__DATA__NOT_SET);
    assert_int_equal(an->optional_trusted_packet_sequence_id_case,
                     PERFETTO__PROTOS__TRACE_PACKET__OPTIONAL_TRUSTED_PACKET_SEQUENCE_ID__NOT_SET);
    perfetto__protos__trace_packet__free_unpacked(an, NULL);

    Perfetto__Protos__TracePacket *fp = decode(&o.pkt[2]);
    assert_int_equal(fp->machine_id, 42);
    assert_int_equal(fp->data_case, PERFETTO__PROTOS__TRACE_PACKET__DATA_TRACE_STATS);
    assert_int_equal(fp->trace_stats->final_flush_outcome,
                     PERFETTO__PROTOS__TRACE_STATS__FINAL_FLUSH_OUTCOME__FINAL_FLUSH_FAILED);
    assert_int_equal(fp->trusted_packet_sequence_id, tg_fed_map_seq(&st, 1));
    perfetto__protos__trace_packet__free_unpacked(fp, NULL);
    free_out(&o);
    evbuffer_free(out);
    tg_fed_stream_clear(&st);
}

/* The link-gap record: a TraceStats packet that decodes with the stock schema (the extension
 * field 1001 kept as an unknown field) and carries the gap's count, length and outcome. */
static void test_gap_packet(void **state)
{
    (void)state;
    struct evbuffer *out = evbuffer_new();
    struct tg_fed_seq_alloc alloc = {.next = 1};
    struct tg_fed_stream st;
    assert_int_equal(tg_fed_stream_init(&st, 7, &alloc, 1000), 0);
    assert_int_equal(tg_fed_gap_packet(&st, 2, 3500000000ull, 1, out), 0);
    struct out_packets o = {0};
    collect(out, &o);
    assert_int_equal(o.n, 1);
    Perfetto__Protos__TracePacket *gp = decode(&o.pkt[0]);
    assert_int_equal(gp->machine_id, 7);
    assert_int_equal(gp->trusted_packet_sequence_id, tg_fed_map_seq(&st, 1));
    assert_int_equal(gp->data_case, PERFETTO__PROTOS__TRACE_PACKET__DATA_TRACE_STATS);
    assert_false(gp->trace_stats->has_final_flush_outcome);
    assert_int_equal(gp->trace_stats->base.n_unknown_fields, 1);
    const ProtobufCMessageUnknownField *u = &gp->trace_stats->base.unknown_fields[0];
    assert_int_equal(u->tag, 1001);
    assert_int_equal(u->wire_type, PROTOBUF_C_WIRE_TYPE_LENGTH_PREFIXED);
    uint64_t count = 0, ns = 0, re = 9;
    struct tg_pb_reader r;
    struct tg_pb_field f;
    uint64_t body = 0; /* protobuf-c keeps an unknown field's bytes after the tag: length, then body */
    size_t vl = tg_pb_read_varint(u->data, u->data + u->len, &body);
    assert_true(vl > 0);
    assert_int_equal(vl + body, u->len);
    tg_pb_reader_init(&r, u->data + vl, (size_t)body);
    while (tg_pb_next(&r, &f) == 1) {
        assert_int_equal(f.wire, TG_PB_VARINT);
        if (f.number == 1)
            count = f.value;
        else if (f.number == 2)
            ns = f.value;
        else if (f.number == 3)
            re = f.value;
    }
    assert_int_equal(count, 2);
    assert_int_equal(ns, 3500000000ull);
    assert_int_equal(re, 1);
    perfetto__protos__trace_packet__free_unpacked(gp, NULL);
    free_out(&o);
    evbuffer_free(out);
    tg_fed_stream_clear(&st);
}

/* ---- a machine behind a node: its clocks composed onto the hub's ---- */

#define SEC 1000000000ll

/* Trace processor's reading of a RemoteClockSync for one clock: consecutive records whose client
 * BOOTTIME readings are under 30 s apart are a round t1c,t1h,t2c,t2h giving (t1c+t2c)/2 - t1h and
 * t2c - (t1h+t2h)/2; the mean is the machine's offset (client minus host) */
static int clock_of(const Perfetto__Protos__ClockSnapshot *cs, uint32_t id, uint64_t *v)
{
    for (size_t i = 0; cs && i < cs->n_clocks; i++)
        if (cs->clocks[i]->clock_id == id) {
            *v = cs->clocks[i]->timestamp;
            return 1;
        }
    return 0;
}

static int64_t tp_offset(const Perfetto__Protos__RemoteClockSync *rcs, uint32_t id)
{
    double sum = 0;
    size_t est = 0;
    for (size_t i = 0; i + 1 < rcs->n_synced_clocks; i++) {
        uint64_t b1 = 0, b2 = 0, t1c = 0, t1h = 0, t2c = 0, t2h = 0; /* set by the asserted calls */
        assert_true(clock_of(rcs->synced_clocks[i]->client_clocks, 6, &b1));
        assert_true(clock_of(rcs->synced_clocks[i + 1]->client_clocks, 6, &b2));
        if (b2 < b1 || b2 - b1 >= 30ull * SEC)
            continue;
        assert_true(clock_of(rcs->synced_clocks[i]->client_clocks, id, &t1c));
        assert_true(clock_of(rcs->synced_clocks[i]->host_clocks, id, &t1h));
        assert_true(clock_of(rcs->synced_clocks[i + 1]->client_clocks, id, &t2c));
        assert_true(clock_of(rcs->synced_clocks[i + 1]->host_clocks, id, &t2h));
        sum += ((double)t1c + (double)t2c) / 2 - (double)t1h;
        sum += (double)t2c - ((double)t1h + (double)t2h) / 2;
        est += 2;
        i++;
    }
    assert_true(est > 0);
    return (int64_t)(sum / (double)est);
}

/* The hub's link to node B: B's BOOTTIME is the hub's + 5 s, its REALTIME the hub's + 3 s. Machine
 * R is relayed to B: R's BOOTTIME is B's + 2 s, its REALTIME B's - 1 s, which is what B's service
 * writes in its RemoteClockSync for R (host clocks: B's). In the merged trace, trace processor
 * must find R at +7 s BOOTTIME and +2 s REALTIME from the hub, so that an event R stamps at
 * hub time E + 7 s lands at E. B's RemoteClockSync packets that would rewrite a machine's sync
 * they may not (none named: B's own once stamped; the hub's; one with a producer's sequence) are
 * dropped. */
static void test_relayed_machine_clock(void **state)
{
    (void)state;
    const uint64_t T = 1000 * SEC, RT = 1700000000ull * SEC;
    const int64_t B_BOOT = 5 * SEC, B_REAL = 3 * SEC, R_BOOT = 2 * SEC, R_REAL = -1 * SEC;
    /* the link's rounds, [BOOTTIME, REALTIME, MONOTONIC, MONOTONIC_RAW]: B's as sent, ours on
     * receipt, 100 ns later (a PING, then its UPDATE once the answer came back) */
    uint64_t link_b[2][4], link_hub[2][4];
    for (int i = 0; i < 2; i++) {
        uint64_t h = T + (uint64_t)i * 200, hr = RT + (uint64_t)i * 200; /* sent, on the hub's clocks */
        link_b[i][0] = h + (uint64_t)B_BOOT, link_b[i][1] = hr + (uint64_t)B_REAL;
        link_b[i][2] = h - 7 + (uint64_t)B_BOOT, link_b[i][3] = h - 9 + (uint64_t)B_BOOT;
        link_hub[i][0] = h + 100, link_hub[i][1] = hr + 100, link_hub[i][2] = h - 7 + 100, link_hub[i][3] = h - 9 + 100;
    }
    struct tg_fed_seq_alloc alloc = {.next = 1, .reserved = {0, 0xB0B0}, .n_reserved = 2};
    struct tg_fed_stream st;
    assert_int_equal(tg_fed_stream_init(&st, 0xB0B0, &alloc, 1 << 20), 0);
    st.have_clock_off = tg_fed_clock_offsets((const uint64_t(*)[4])link_b, (const uint64_t(*)[4])link_hub, 2, st.clock_off);
    assert_true(st.have_clock_off);
    assert_true(st.clock_off[0] == B_BOOT && st.clock_off[1] == B_REAL);

    /* B's service's RemoteClockSync for R (two records: R's clocks as sent, B's on receipt) */
    uint64_t r_sent[2][4], b_recv[2][4];
    for (int i = 0; i < 2; i++) {
        uint64_t b = T + (uint64_t)B_BOOT + 5000 + (uint64_t)i * 200, br = RT + (uint64_t)B_REAL + 5000 + (uint64_t)i * 200;
        r_sent[i][0] = b + (uint64_t)R_BOOT, r_sent[i][1] = br + (uint64_t)R_REAL;
        r_sent[i][2] = b - 3 + (uint64_t)R_BOOT, r_sent[i][3] = b - 4 + (uint64_t)R_BOOT;
        b_recv[i][0] = b + 100, b_recv[i][1] = br + 100, b_recv[i][2] = b - 3 + 100, b_recv[i][3] = b - 4 + 100;
    }
    const uint32_t R = 0x5151;
    struct evbuffer *reply = evbuffer_new(), *out = evbuffer_new();
    assert_int_equal(tg_fed_clock_sync_packet(R, (const uint64_t(*)[4])r_sent, (const uint64_t(*)[4])b_recv, 2, reply), 0);
    /* ...and the same sync without a machine id, for the hub's machine, and from a producer */
    struct out_packets in = {0};
    collect(reply, &in);
    assert_int_equal(in.n, 2); /* the sync and its anchor (left out of B's reply below) */
    struct tg_pb_reader rd;
    struct tg_pb_field f;
    struct bytes no_machine = {0}, hub_machine = {0}, with_seq = {0};
    tg_pb_reader_init(&rd, in.pkt[0].p, in.pkt[0].n);
    while (tg_pb_next(&rd, &f) == 1)
        if (f.number == 107)
            put_len_field(&no_machine, 107, f.data, f.len);
    put(&hub_machine, no_machine.p, no_machine.n);
    put_varint_field(&hub_machine, 98, 0xB0B0);
    put(&with_seq, in.pkt[0].p, in.pkt[0].n);
    put_varint_field(&with_seq, 10, 7);
    /* an event on R at hub time E: R stamps E + 7 s (BOOTTIME) */
    const uint64_t E = T + 9 * SEC;
    struct bytes ev = {0};
    put_varint_field(&ev, 8, E + (uint64_t)(B_BOOT + R_BOOT));
    put_len_field(&ev, 36, "r", 1);
    put_varint_field(&ev, 10, 3);
    put_varint_field(&ev, 98, R);
    struct bytes rep = {0};
    add_slice(&rep, in.pkt[0].p, in.pkt[0].n, 1);
    add_slice(&rep, no_machine.p, no_machine.n, 1);
    add_slice(&rep, hub_machine.p, hub_machine.n, 1);
    add_slice(&rep, with_seq.p, with_seq.n, 1);
    add_slice(&rep, ev.p, ev.n, 1);
    char err[128];
    assert_int_equal(tg_fed_rewrite_reply(&st, rep.p, rep.n, out, err, sizeof err), 0);

    struct out_packets o = {0};
    collect(out, &o);
    assert_true(o.n >= 2);
    Perfetto__Protos__TracePacket *cs = decode(&o.pkt[0]), *tp = decode(&o.pkt[o.n - 1]);
    assert_int_equal(cs->machine_id, R);
    assert_int_equal(cs->optional_trusted_packet_sequence_id_case,
                     PERFETTO__PROTOS__TRACE_PACKET__OPTIONAL_TRUSTED_PACKET_SEQUENCE_ID__NOT_SET);
    assert_int_equal(cs->data_case, PERFETTO__PROTOS__TRACE_PACKET__DATA_REMOTE_CLOCK_SYNC);
    int64_t boot = tp_offset(cs->remote_clock_sync, 6), real = tp_offset(cs->remote_clock_sync, 1);
    if (boot != B_BOOT + R_BOOT || real != B_REAL + R_REAL)
        fail_msg("machine R is %lld ns (BOOTTIME) and %lld ns (REALTIME) from the hub; expected %lld and %lld",
                 (long long)boot, (long long)real, (long long)(B_BOOT + R_BOOT), (long long)(B_REAL + R_REAL));
    assert_int_equal(o.n, 3); /* R's sync, the hub's anchor for R, R's event; three others dropped */
    assert_int_equal(st.clock_syncs_dropped, 3);
    assert_int_equal(st.packets + st.anchors, 3);
    assert_int_equal(st.anchors, 1);
    Perfetto__Protos__TracePacket *an = decode(&o.pkt[1]);
    assert_int_equal(an->machine_id, R);
    assert_int_equal(an->timestamp, r_sent[1][0]); /* R's own last BOOTTIME reading */
    assert_int_equal(an->timestamp_clock_id, 6);
    assert_int_equal(an->data_case, PERFETTO__PROTOS__TRACE_PACKET__DATA__NOT_SET);
    perfetto__protos__trace_packet__free_unpacked(an, NULL);
    /* R's clocks as R read them are untouched */
    assert_int_equal(cs->remote_clock_sync->synced_clocks[0]->client_clocks->clocks[0]->timestamp, r_sent[0][0]);
    /* R's event, put on the hub's timeline as trace processor does: at E */
    assert_int_equal(tp->machine_id, R);
    assert_int_equal((int64_t)tp->timestamp - boot, (int64_t)E);
    perfetto__protos__trace_packet__free_unpacked(cs, NULL);
    perfetto__protos__trace_packet__free_unpacked(tp, NULL);
    free_out(&o);
    free_out(&in);
    free(no_machine.p), free(hub_machine.p), free(with_seq.p), free(ev.p), free(rep.p);
    evbuffer_free(reply);
    evbuffer_free(out);
    tg_fed_stream_clear(&st);
}

/* Packets without a sequence id (traced's RemoteClockSync is the one kind it emits) are not given
 * one: trace processor parses a packet that carries a machine id in that machine's own reader,
 * with its own sequence state, so a remote node's sequence-less packet, which always leaves with
 * the node's machine id (or the machine behind the node that it names), never shares the hub's
 * sequence 0; the hub's own stay on the host's. */
static void test_sequenceless_packets_per_machine(void **state)
{
    (void)state;
    struct tg_fed_seq_alloc alloc = {.next = 1, .reserved = {0x1111, 0xBEEF}, .n_reserved = 2};
    struct tg_fed_stream hub, b;
    assert_int_equal(tg_fed_stream_init(&hub, 0, &alloc, 1 << 20), 0);
    assert_int_equal(tg_fed_stream_init(&b, 0xBEEF, &alloc, 1 << 20), 0);
    struct bytes p = {0}, r = {0};
    put_len_field(&p, 36, "no sequence", 11);
    put_varint_field(&p, 3, 1000);
    add_slice(&r, p.p, p.n, 1);
    struct evbuffer *out = evbuffer_new();
    char err[128];
    assert_int_equal(tg_fed_rewrite_reply(&hub, r.p, r.n, out, err, sizeof err), 0);
    assert_int_equal(tg_fed_rewrite_reply(&b, r.p, r.n, out, err, sizeof err), 0);
    struct out_packets o = {0};
    collect(out, &o);
    assert_int_equal(o.n, 2);
    assert_int_equal(last_u32(&o.pkt[0], 98), -1); /* the hub's: the host's reader */
    assert_int_equal(last_u32(&o.pkt[0], 10), -1);
    assert_int_equal(last_u32(&o.pkt[1], 98), 0xBEEF); /* the node's: its machine's reader */
    assert_int_equal(last_u32(&o.pkt[1], 10), -1);
    free_out(&o);
    free(p.p);
    free(r.p);
    evbuffer_free(out);
    tg_fed_stream_clear(&hub);
    tg_fed_stream_clear(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stamps_and_reassembles),
        cmocka_unit_test(test_big_packet_is_resliced),
        cmocka_unit_test(test_bad_replies_refused),
        cmocka_unit_test(test_clock_sync_and_failure_packets),
        cmocka_unit_test(test_gap_packet),
        cmocka_unit_test(test_hostile_node_fields),
        cmocka_unit_test(test_too_many_sequences),
        cmocka_unit_test(test_relayed_machine_clock),
        cmocka_unit_test(test_sequenceless_packets_per_machine),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
