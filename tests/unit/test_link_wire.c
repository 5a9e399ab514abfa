/* test_link_wire.c: the byte formats inside a gateway link's streams (gateway/link_wire.[ch],
 * docs/link-protocol.md §3.2 and §4): channel records (IPC, ACK, ATTACH) encode and parse back,
 * arrive byte by byte, and follow one another; truncated records ask for more and never fail;
 * unknown types, over-long varints, oversized records and bad ACK payloads are refused; the
 * limits fit an IPC frame of the maximum size; ACK counts round-trip over the whole 64-bit range;
 * control messages (every tracegate.link.Control kind, a hello with a real KCDATA node descriptor)
 * frame and unframe; node names and channel paths; and random bytes never make a parser claim
 * bytes it was not given. The channel-level bookkeeping (what is kept until acked, resends after
 * a resume) is in test_link_channel.c. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "link_wire.h"
#include "tracegate/frame.h"
#include "tracegate/kcdata_node.h"
#include "tracegate/pbwire.h"
#include "tracegate_link.pb-c.h"

/* splitmix64, deterministic */
static uint64_t rnd(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Encodes one record into a malloc'd buffer; returns its size. */
static size_t make_record(uint8_t **out, enum tg_link_rec_type type, const uint8_t *payload, size_t len)
{
    uint8_t *b = malloc(TG_LINK_REC_HDR_MAX + len + 1);
    assert_non_null(b);
    size_t h = tg_link_rec_header(b, type, len);
    assert_true(h >= 2 && h <= TG_LINK_REC_HDR_MAX);
    if (len)
        memcpy(b + h, payload, len);
    *out = b;
    return h + len;
}

/* ------------------------------------------------------------ records */

static void test_record_roundtrip(void **state)
{
    (void)state;
    static const size_t lens[] = {4, 5, 127, 128, 129, 16383, 16384, 16385, 65536, TG_LINK_REC_MAX - 1,
                                  TG_LINK_REC_MAX};
    static const enum tg_link_rec_type types[] = {TG_LINK_REC_IPC, TG_LINK_REC_ATTACH};
    uint64_t seed = 1;
    for (size_t t = 0; t < 2; t++) {
        for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++) {
            uint8_t *payload = malloc(lens[i]);
            assert_non_null(payload);
            for (size_t k = 0; k < lens[i]; k++)
                payload[k] = (uint8_t)rnd(&seed);
            uint8_t *rec;
            size_t n = make_record(&rec, types[t], payload, lens[i]);
            uint8_t type = 0;
            const uint8_t *pl = NULL;
            size_t plen = 0;
            assert_int_equal(tg_link_rec_parse(rec, n, &type, &pl, &plen), (long)n);
            assert_int_equal(type, types[t]);
            assert_int_equal(plen, lens[i]);
            assert_ptr_equal(pl, rec + (n - lens[i])); /* points into the caller's buffer */
            assert_memory_equal(pl, payload, lens[i]);
            /* the header alone says the same, before the payload arrived */
            size_t hplen = 0;
            uint8_t htype = 0;
            long hl = tg_link_rec_header_parse(rec, n - lens[i], &htype, &hplen);
            assert_int_equal(hl, (long)(n - lens[i]));
            assert_int_equal(htype, types[t]);
            assert_int_equal(hplen, lens[i]);
            free(rec);
            free(payload);
        }
    }
}

static void test_record_header_sizes(void **state)
{
    (void)state;
    uint8_t h[16];
    /* the varint grows at the 7-bit boundaries; the largest record still fits TG_LINK_REC_HDR_MAX */
    assert_int_equal(tg_link_rec_header(h, TG_LINK_REC_IPC, 0), 2);
    assert_int_equal(tg_link_rec_header(h, TG_LINK_REC_IPC, 127), 2);
    assert_int_equal(tg_link_rec_header(h, TG_LINK_REC_IPC, 128), 3);
    assert_int_equal(tg_link_rec_header(h, TG_LINK_REC_IPC, 16383), 3);
    assert_int_equal(tg_link_rec_header(h, TG_LINK_REC_IPC, 16384), 4);
    assert_true(tg_link_rec_header(h, TG_LINK_REC_IPC, TG_LINK_REC_MAX) <= TG_LINK_REC_HDR_MAX);
    assert_int_equal(h[0], TG_LINK_REC_IPC);
}

static void test_record_limits(void **state)
{
    (void)state;
    /* an IPC frame of the largest size (u32 LE length + TG_FRAME_MAX_DEFAULT) fits one record */
    assert_true(4 + (size_t)TG_FRAME_MAX_DEFAULT <= TG_LINK_REC_MAX);
    /* docs/link-protocol.md: "A record longer than 132 KiB ... is a protocol error" */
    assert_int_equal(TG_LINK_REC_MAX, 132u * 1024u);
    assert_int_equal(TG_LINK_CTL_MAX, 1u << 20);
    uint8_t h[16], type;
    size_t plen;
    const uint8_t *pl;
    /* one byte over: refused from the header alone, before any payload arrived */
    size_t n = tg_link_rec_header(h, TG_LINK_REC_IPC, TG_LINK_REC_MAX + 1);
    assert_int_equal(tg_link_rec_header_parse(h, n, &type, &plen), -1);
    assert_int_equal(tg_link_rec_parse(h, n, &type, &pl, &plen), -1);
    /* a huge claim (4 GiB - 1, the largest 5-byte varint below 2^32) too */
    static const uint8_t huge[] = {TG_LINK_REC_IPC, 0xff, 0xff, 0xff, 0xff, 0x0f};
    assert_int_equal(tg_link_rec_header_parse(huge, sizeof huge, &type, &plen), -1);
    assert_int_equal(tg_link_rec_parse(huge, sizeof huge, &type, &pl, &plen), -1);
    /* exactly the maximum with its payload still missing: "more bytes", not an error */
    n = tg_link_rec_header(h, TG_LINK_REC_ATTACH, TG_LINK_REC_MAX);
    assert_int_equal(tg_link_rec_header_parse(h, n, &type, &plen), (long)n);
    assert_int_equal(plen, TG_LINK_REC_MAX);
    assert_int_equal(tg_link_rec_parse(h, n, &type, &pl, &plen), 0);
}

/* Every strict prefix of a valid record asks for more (0), never -1, and writes nothing. */
static void test_record_truncated(void **state)
{
    (void)state;
    uint8_t payload[300];
    for (size_t i = 0; i < sizeof payload; i++)
        payload[i] = (uint8_t)i;
    uint8_t *rec;
    size_t n = make_record(&rec, TG_LINK_REC_IPC, payload, sizeof payload);
    for (size_t cut = 0; cut < n; cut++) {
        uint8_t *copy = malloc(cut ? cut : 1); /* exactly cut bytes: ASan sees any over-read */
        assert_non_null(copy);
        memcpy(copy, rec, cut);
        uint8_t type = 0x77;
        const uint8_t *pl = (const uint8_t *)"untouched";
        size_t plen = 12345;
        assert_int_equal(tg_link_rec_parse(copy, cut, &type, &pl, &plen), 0);
        assert_int_equal(type, 0x77);
        assert_int_equal(plen, 12345);
        long hl = tg_link_rec_header_parse(copy, cut, &type, &plen);
        if (cut < 3)
            assert_int_equal(hl, 0); /* type + a 2-byte varint for 300 */
        else
            assert_int_equal(hl, 3);
        free(copy);
    }
    free(rec);
    /* a varint cut after a continuation byte */
    static const uint8_t cont[] = {TG_LINK_REC_IPC, 0x80, 0x80, 0x80};
    uint8_t type;
    size_t plen;
    assert_int_equal(tg_link_rec_header_parse(cont, sizeof cont, &type, &plen), 0);
}

static void test_record_stream(void **state)
{
    (void)state;
    /* IPC, ACK, ATTACH, IPC back to back, parsed in order; then the same stream fed one byte
     * at a time into a growing buffer, as DATA frames of any size deliver it */
    uint8_t stream[512];
    size_t n = 0;
    const uint8_t ipc1[] = {3, 0, 0, 0, 0xa, 0xb, 0xc};
    n += tg_link_rec_header(stream + n, TG_LINK_REC_IPC, sizeof ipc1);
    memcpy(stream + n, ipc1, sizeof ipc1);
    n += sizeof ipc1;
    uint8_t ack[10];
    size_t al = tg_link_ack_payload(ack, 300);
    n += tg_link_rec_header(stream + n, TG_LINK_REC_ACK, al);
    memcpy(stream + n, ack, al);
    n += al;
    const uint8_t att[] = {1, 2, 3};
    n += tg_link_rec_header(stream + n, TG_LINK_REC_ATTACH, sizeof att);
    memcpy(stream + n, att, sizeof att);
    n += sizeof att;
    const uint8_t ipc2[] = {0, 0, 0, 0};
    n += tg_link_rec_header(stream + n, TG_LINK_REC_IPC, sizeof ipc2);
    memcpy(stream + n, ipc2, sizeof ipc2);
    n += sizeof ipc2;

    const uint8_t want_types[] = {TG_LINK_REC_IPC, TG_LINK_REC_ACK, TG_LINK_REC_ATTACH, TG_LINK_REC_IPC};
    const size_t want_lens[] = {sizeof ipc1, al, sizeof att, sizeof ipc2};
    for (size_t step = 1; step <= n; step = step == 1 ? n : n + 1) {
        size_t have = 0, off = 0, got = 0;
        while (off < n) {
            have = have + step > n ? n : have + step;
            for (;;) {
                uint8_t type;
                const uint8_t *pl;
                size_t plen;
                long r = tg_link_rec_parse(stream + off, have - off, &type, &pl, &plen);
                assert_true(r >= 0);
                if (r == 0)
                    break;
                assert_true(got < 4);
                assert_int_equal(type, want_types[got]);
                assert_int_equal(plen, want_lens[got]);
                if (type == TG_LINK_REC_ACK) {
                    uint64_t v;
                    assert_int_equal(tg_link_ack_parse(pl, plen, &v), 0);
                    assert_int_equal(v, 300);
                }
                got++;
                off += (size_t)r;
            }
        }
        assert_int_equal(got, 4);
    }
}

static void test_record_garbage_rejected(void **state)
{
    (void)state;
    uint8_t type;
    size_t plen;
    const uint8_t *pl;
    /* unknown types, including 0 and the next one up */
    static const uint8_t bad_types[] = {0x00, 0x05, 0x10, 0x7f, 0x80, 0xff};
    for (size_t i = 0; i < sizeof bad_types; i++) {
        uint8_t r[] = {bad_types[i], 1, 0};
        assert_int_equal(tg_link_rec_parse(r, sizeof r, &type, &pl, &plen), -1);
        assert_int_equal(tg_link_rec_header_parse(r, sizeof r, &type, &plen), -1);
        /* refused from the first byte: no need to wait for a length */
        assert_int_equal(tg_link_rec_header_parse(r, 1, &type, &plen), -1);
    }
    /* LOST records carry a key of 1..TG_LINK_LOST_MAX bytes: empty and longer ones are refused
     * from their header on, the longest one passes */
    static const uint8_t lost_empty[] = {TG_LINK_REC_LOST, 0};
    assert_int_equal(tg_link_rec_parse(lost_empty, sizeof lost_empty, &type, &pl, &plen), -1);
    assert_int_equal(tg_link_rec_header_parse(lost_empty, sizeof lost_empty, &type, &plen), -1);
    uint8_t lost[3 + TG_LINK_LOST_MAX + 1];
    memset(lost, 'k', sizeof lost);
    size_t lh = tg_link_rec_header(lost, TG_LINK_REC_LOST, TG_LINK_LOST_MAX + 1);
    assert_int_equal(tg_link_rec_header_parse(lost, lh, &type, &plen), -1);
    lh = tg_link_rec_header(lost, TG_LINK_REC_LOST, TG_LINK_LOST_MAX);
    assert_int_equal(tg_link_rec_parse(lost, lh + TG_LINK_LOST_MAX, &type, &pl, &plen), (long)(lh + TG_LINK_LOST_MAX));
    assert_int_equal(type, TG_LINK_REC_LOST);
    assert_int_equal(plen, TG_LINK_LOST_MAX);
    /* its key: node-name characters, 1..TG_LINK_LOST_MAX of them */
    assert_true(tg_link_lost_key_ok("tracegate-link-hub_2.b-1f", 25));
    assert_int_equal(pl + TG_LINK_LOST_MAX + 1, lost + sizeof lost); /* one more 'k' after the payload */
    assert_true(tg_link_lost_key_ok((const char *)pl, TG_LINK_LOST_MAX));
    assert_false(tg_link_lost_key_ok((const char *)pl, TG_LINK_LOST_MAX + 1));
    assert_false(tg_link_lost_key_ok("", 0));
    assert_false(tg_link_lost_key_ok("a b", 3));
    assert_false(tg_link_lost_key_ok("key\"quote", 9));
    assert_false(tg_link_lost_key_ok("a/b", 3));
    /* an over-long varint (six bytes, all continuation) */
    static const uint8_t longv[] = {TG_LINK_REC_IPC, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00};
    assert_int_equal(tg_link_rec_parse(longv, sizeof longv, &type, &pl, &plen), -1);
    assert_int_equal(tg_link_rec_header_parse(longv, sizeof longv, &type, &plen), -1);
    /* ACK payloads that are not exactly one varint */
    static const uint8_t ack_empty[] = {TG_LINK_REC_ACK, 0};
    static const uint8_t ack_two[] = {TG_LINK_REC_ACK, 2, 1, 1};
    static const uint8_t ack_cut[] = {TG_LINK_REC_ACK, 1, 0x81};
    static const uint8_t ack_long[] = {TG_LINK_REC_ACK, 11, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0};
    assert_int_equal(tg_link_rec_parse(ack_empty, sizeof ack_empty, &type, &pl, &plen), -1);
    assert_int_equal(tg_link_rec_parse(ack_two, sizeof ack_two, &type, &pl, &plen), -1);
    assert_int_equal(tg_link_rec_parse(ack_cut, sizeof ack_cut, &type, &pl, &plen), -1);
    assert_int_equal(tg_link_rec_parse(ack_long, sizeof ack_long, &type, &pl, &plen), -1);
}

/* ------------------------------------------------------------ acks */

static void test_ack_values(void **state)
{
    (void)state;
    static const uint64_t vals[] = {0,           1,           31,          32,          127,         128,
                                    16383,       16384,       0xffffffffu, 0x100000000ull, (1ull << 63) - 1,
                                    1ull << 63,  UINT64_MAX};
    for (size_t i = 0; i < sizeof vals / sizeof vals[0]; i++) {
        uint8_t pl[10], rec[16];
        size_t n = tg_link_ack_payload(pl, vals[i]);
        assert_true(n >= 1 && n <= 10);
        uint64_t v = 0;
        assert_int_equal(tg_link_ack_parse(pl, n, &v), 0);
        assert_true(v == vals[i]);
        /* and as a whole record */
        size_t h = tg_link_rec_header(rec, TG_LINK_REC_ACK, n);
        memcpy(rec + h, pl, n);
        uint8_t type;
        const uint8_t *p;
        size_t plen;
        assert_int_equal(tg_link_rec_parse(rec, h + n, &type, &p, &plen), (long)(h + n));
        assert_int_equal(type, TG_LINK_REC_ACK);
        assert_int_equal(tg_link_ack_parse(p, plen, &v), 0);
        assert_true(v == vals[i]);
        /* a trailing byte makes it two values: refused */
        if (n < 10) {
            pl[n] = 0;
            assert_int_equal(tg_link_ack_parse(pl, n + 1, &v), -1);
        }
    }
    uint64_t v;
    assert_int_equal(tg_link_ack_parse((const uint8_t *)"", 0, &v), -1);
}

/* ------------------------------------------------------------ control messages */

static size_t frame_control(const Tracegate__Link__Control *m, uint8_t **out)
{
    size_t n = tracegate__link__control__get_packed_size(m);
    uint8_t *b = malloc(5 + n);
    assert_non_null(b);
    size_t h = tg_link_ctl_header(b, n);
    assert_true(h >= 1 && h <= 5);
    tracegate__link__control__pack(m, b + h);
    *out = b;
    return h + n;
}

static Tracegate__Link__Control *unframe(const uint8_t *buf, size_t len, size_t *used)
{
    const uint8_t *msg = NULL;
    size_t mlen = 0;
    long r = tg_link_ctl_parse(buf, len, &msg, &mlen);
    assert_true(r > 0);
    *used = (size_t)r;
    assert_ptr_equal(msg + mlen, buf + r);
    Tracegate__Link__Control *m = tracegate__link__control__unpack(NULL, mlen, msg);
    assert_non_null(m);
    return m;
}

static void test_control_roundtrip(void **state)
{
    (void)state;
    /* a hello carrying a real node descriptor */
    struct tg_node_desc d;
    memset(&d, 0, sizeof d);
    strcpy(d.name, "edge-7");
    d.machine_id = 0x1234;
    strcpy(d.version, "9.9");
    char err[128];
    assert_int_equal(tg_node_desc_add_cap(&d, "resume", err, sizeof err), 0);
    assert_int_equal(tg_node_desc_add_cap(&d, "reverse-open", err, sizeof err), 0);
    assert_int_equal(tg_node_desc_read_clocks(&d), 0);
    uint8_t *desc;
    size_t dlen;
    assert_int_equal(tg_node_desc_encode(&d, &desc, &dlen, err, sizeof err), 0);

    Tracegate__Link__Hello h = TRACEGATE__LINK__HELLO__INIT;
    h.has_node_desc = 1;
    h.node_desc.data = desc;
    h.node_desc.len = dlen;
    Tracegate__Link__Open o = TRACEGATE__LINK__OPEN__INIT;
    o.has_channel_id = 1;
    o.channel_id = 0xfffffffffffffffeull;
    o.path = "/node/edge-7/producer";
    o.principal = "uid:1000";
    Tracegate__Link__OpenFailed of = TRACEGATE__LINK__OPEN_FAILED__INIT;
    of.has_channel_id = of.has_status = 1;
    of.channel_id = 4;
    of.status = 404;
    of.reason = "no such node here";
    Tracegate__Link__Clock clk[2] = {TRACEGATE__LINK__CLOCK__INIT, TRACEGATE__LINK__CLOCK__INIT};
    Tracegate__Link__Clock *pclk[2] = {&clk[0], &clk[1]};
    clk[0].has_clock_id = clk[0].has_ns = clk[1].has_clock_id = clk[1].has_ns = 1;
    clk[0].clock_id = 6;
    clk[0].ns = UINT64_MAX;
    clk[1].clock_id = 1;
    clk[1].ns = 1;
    Tracegate__Link__ClockSync cs = TRACEGATE__LINK__CLOCK_SYNC__INIT;
    cs.has_phase = 1;
    cs.phase = TRACEGATE__LINK__CLOCK_SYNC__PHASE__UPDATE;
    cs.n_clocks = 2;
    cs.clocks = pclk;
    Tracegate__Link__NodeInfo ni = TRACEGATE__LINK__NODE_INFO__INIT;
    Tracegate__Link__NodeInfo *pni[1] = {&ni};
    ni.name = "far";
    ni.has_hops = 1;
    ni.hops = 1;
    Tracegate__Link__Nodes ns = TRACEGATE__LINK__NODES__INIT;
    ns.n_nodes = 1;
    ns.nodes = pni;
    Tracegate__Link__Goodbye g = TRACEGATE__LINK__GOODBYE__INIT;
    g.reason = "bye";

    Tracegate__Link__Control m[6];
    for (int i = 0; i < 6; i++)
        tracegate__link__control__init(&m[i]);
    m[0].msg_case = TRACEGATE__LINK__CONTROL__MSG_HELLO;
    m[0].hello = &h;
    m[1].msg_case = TRACEGATE__LINK__CONTROL__MSG_OPEN;
    m[1].open = &o;
    m[2].msg_case = TRACEGATE__LINK__CONTROL__MSG_OPEN_FAILED;
    m[2].open_failed = &of;
    m[3].msg_case = TRACEGATE__LINK__CONTROL__MSG_CLOCK_SYNC;
    m[3].clock_sync = &cs;
    m[4].msg_case = TRACEGATE__LINK__CONTROL__MSG_NODES;
    m[4].nodes = &ns;
    m[5].msg_case = TRACEGATE__LINK__CONTROL__MSG_GOODBYE;
    m[5].goodbye = &g;

    /* all six back to back in one stream */
    uint8_t stream[4096];
    size_t n = 0;
    for (int i = 0; i < 6; i++) {
        uint8_t *f;
        size_t fl = frame_control(&m[i], &f);
        assert_true(n + fl <= sizeof stream);
        memcpy(stream + n, f, fl);
        n += fl;
        free(f);
    }
    size_t off = 0, used;
    Tracegate__Link__Control *r = unframe(stream + off, n - off, &used);
    off += used;
    assert_int_equal(r->msg_case, TRACEGATE__LINK__CONTROL__MSG_HELLO);
    struct tg_node_desc back;
    assert_int_equal(tg_node_desc_decode(r->hello->node_desc.data, r->hello->node_desc.len, &back, err, sizeof err),
                     0);
    assert_string_equal(back.name, "edge-7");
    assert_int_equal(back.machine_id, 0x1234);
    assert_string_equal(back.version, "9.9");
    assert_true(tg_node_desc_has_cap(&back, "reverse-open"));
    assert_int_equal(back.nclocks, d.nclocks);
    tracegate__link__control__free_unpacked(r, NULL);

    r = unframe(stream + off, n - off, &used);
    off += used;
    assert_int_equal(r->msg_case, TRACEGATE__LINK__CONTROL__MSG_OPEN);
    assert_true(r->open->channel_id == 0xfffffffffffffffeull);
    assert_string_equal(r->open->path, "/node/edge-7/producer");
    assert_string_equal(r->open->principal, "uid:1000");
    tracegate__link__control__free_unpacked(r, NULL);

    r = unframe(stream + off, n - off, &used);
    off += used;
    assert_int_equal(r->msg_case, TRACEGATE__LINK__CONTROL__MSG_OPEN_FAILED);
    assert_int_equal(r->open_failed->channel_id, 4);
    assert_int_equal(r->open_failed->status, 404);
    assert_string_equal(r->open_failed->reason, "no such node here");
    tracegate__link__control__free_unpacked(r, NULL);

    r = unframe(stream + off, n - off, &used);
    off += used;
    assert_int_equal(r->msg_case, TRACEGATE__LINK__CONTROL__MSG_CLOCK_SYNC);
    assert_int_equal(r->clock_sync->phase, TRACEGATE__LINK__CLOCK_SYNC__PHASE__UPDATE);
    assert_int_equal(r->clock_sync->n_clocks, 2);
    assert_true(r->clock_sync->clocks[0]->ns == UINT64_MAX);
    assert_int_equal(r->clock_sync->clocks[1]->clock_id, 1);
    tracegate__link__control__free_unpacked(r, NULL);

    r = unframe(stream + off, n - off, &used);
    off += used;
    assert_int_equal(r->msg_case, TRACEGATE__LINK__CONTROL__MSG_NODES);
    assert_int_equal(r->nodes->n_nodes, 1);
    assert_string_equal(r->nodes->nodes[0]->name, "far");
    tracegate__link__control__free_unpacked(r, NULL);

    r = unframe(stream + off, n - off, &used);
    off += used;
    assert_int_equal(r->msg_case, TRACEGATE__LINK__CONTROL__MSG_GOODBYE);
    assert_string_equal(r->goodbye->reason, "bye");
    tracegate__link__control__free_unpacked(r, NULL);
    assert_int_equal(off, n);

    /* every prefix of the stream's first message asks for more */
    const uint8_t *msg;
    size_t mlen;
    for (size_t cut = 0; cut < 4; cut++)
        assert_int_equal(tg_link_ctl_parse(stream, cut, &msg, &mlen), 0);
    free(desc);
}

static void test_control_limits(void **state)
{
    (void)state;
    uint8_t h[8];
    const uint8_t *msg;
    size_t mlen;
    /* the largest message: the header is accepted and the body awaited */
    size_t n = tg_link_ctl_header(h, TG_LINK_CTL_MAX);
    assert_int_equal(n, 3);
    assert_int_equal(tg_link_ctl_parse(h, n, &msg, &mlen), 0);
    /* its size is known from the prefix alone (the receiver waits for it whole), not before */
    assert_int_equal(tg_link_ctl_size(h, n), (long)(n + TG_LINK_CTL_MAX));
    for (size_t cut = 0; cut < n; cut++)
        assert_int_equal(tg_link_ctl_size(h, cut), 0);
    /* one byte more: the encoder refuses to write it, the parser refuses it from the header */
    assert_int_equal(tg_link_ctl_header(h, TG_LINK_CTL_MAX + 1), 0);
    n = tg_pb_put_varint(h, TG_LINK_CTL_MAX + 1);
    assert_int_equal(tg_link_ctl_parse(h, n, &msg, &mlen), -1);
    assert_int_equal(tg_link_ctl_size(h, n), -1);
    /* over-long varint */
    static const uint8_t longv[] = {0x80, 0x80, 0x80, 0x80, 0x80, 0x01};
    assert_int_equal(tg_link_ctl_parse(longv, sizeof longv, &msg, &mlen), -1);
    assert_int_equal(tg_link_ctl_size(longv, sizeof longv), -1);
    /* an empty message (all fields absent) is a frame of one byte */
    static const uint8_t empty[] = {0};
    assert_int_equal(tg_link_ctl_parse(empty, 1, &msg, &mlen), 1);
    assert_int_equal(mlen, 0);
    /* a message that is not protobuf: framing accepts it, unpacking refuses it (the link closes) */
    static const uint8_t junk[] = {3, 0xff, 0xff, 0xff};
    assert_int_equal(tg_link_ctl_parse(junk, sizeof junk, &msg, &mlen), 4);
    assert_null(tracegate__link__control__unpack(NULL, mlen, msg));
}

/* ------------------------------------------------------------ names and paths */

static void test_node_names(void **state)
{
    (void)state;
    char n63[64], n64[65];
    memset(n63, 'a', 63);
    n63[63] = '\0';
    memset(n64, 'b', 64);
    n64[64] = '\0';
    assert_true(tg_link_node_name_ok("a"));
    assert_true(tg_link_node_name_ok("edge-7.lab_B"));
    assert_true(tg_link_node_name_ok(n63));
    assert_true(tg_link_node_name_ok("..."));
    assert_false(tg_link_node_name_ok(n64));
    assert_false(tg_link_node_name_ok(""));
    assert_false(tg_link_node_name_ok("."));
    assert_false(tg_link_node_name_ok(".."));
    assert_false(tg_link_node_name_ok("@all"));
    assert_false(tg_link_node_name_ok("a/b"));
    assert_false(tg_link_node_name_ok("a b"));
    assert_false(tg_link_node_name_ok("caf\xc3\xa9"));
    assert_false(tg_link_node_name_ok("x\n"));
}

static void test_paths(void **state)
{
    (void)state;
    char name[64];
    int producer = -1;
#define P(s) s, strlen(s)
    assert_int_equal(tg_link_parse_path(P("/node/edge/consumer"), name, sizeof name, &producer), 0);
    assert_string_equal(name, "edge");
    assert_int_equal(producer, 0);
    assert_int_equal(tg_link_parse_path(P("/node/edge/producer"), name, sizeof name, &producer), 0);
    assert_int_equal(producer, 1);
    static const char *const bad[] = {
        "/node/edge/consumerx", "/node/edge/", "/node/edge", "/node//consumer", "/nodes/edge/consumer",
        "node/edge/consumer",   "/node/@all/consumer", "/node/../consumer", "/node/a/b/consumer", "/node/",
        "",                     "/node/edge/Consumer",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        assert_int_equal(tg_link_parse_path(P(bad[i]), name, sizeof name, &producer), -1);
    /* a name of 63 is fine, 64 is not */
    char path[128];
    snprintf(path, sizeof path, "/node/%0*d/consumer", 63, 7);
    assert_int_equal(tg_link_parse_path(P(path), name, sizeof name, &producer), 0);
    snprintf(path, sizeof path, "/node/%0*d/consumer", 64, 7);
    assert_int_equal(tg_link_parse_path(P(path), name, sizeof name, &producer), -1);
    /* the length given is what counts (no NUL needed, nothing read past it) */
    static const char nonul[] = {'/', 'n', 'o', 'd', 'e', '/', 'x', '/', 'p', 'r', 'o', 'd', 'u', 'c', 'e', 'r'};
    assert_int_equal(tg_link_parse_path(nonul, sizeof nonul, name, sizeof name, &producer), 0);
    assert_string_equal(name, "x");
    assert_int_equal(tg_link_parse_path(nonul, sizeof nonul - 1, name, sizeof name, &producer), -1);
    /* a small name buffer refuses rather than cutting */
    char small[4];
    assert_int_equal(tg_link_parse_path(P("/node/abcd/consumer"), small, sizeof small, &producer), -1);
    assert_int_equal(tg_link_parse_path(P("/node/abc/consumer"), small, sizeof small, &producer), 0);
#undef P
}

/* ------------------------------------------------------------ random bytes */

static void test_random_bytes(void **state)
{
    (void)state;
    uint64_t seed = 42;
    for (int round = 0; round < 20000; round++) {
        size_t len = (size_t)(rnd(&seed) % 24);
        uint8_t *b = malloc(len ? len : 1);
        assert_non_null(b);
        for (size_t i = 0; i < len; i++)
            b[i] = (uint8_t)rnd(&seed);
        if (len && (round & 1))
            b[0] = (uint8_t)(1 + round % 3); /* a known type half the time */
        uint8_t type;
        const uint8_t *pl;
        size_t plen;
        long r = tg_link_rec_parse(b, len, &type, &pl, &plen);
        assert_true(r >= -1 && r <= (long)len);
        if (r > 0) {
            assert_true(pl >= b && pl + plen == b + r);
            assert_true(type >= 1 && type <= 3);
        }
        long hr = tg_link_rec_header_parse(b, len, &type, &plen);
        assert_true(hr >= -1 && hr <= (long)len && hr <= TG_LINK_REC_HDR_MAX);
        if (r > 0)
            assert_int_equal(hr + (long)plen, r); /* both parsers agree on a whole record */
        if (r < 0 && hr > 0)
            assert_int_equal(b[0], TG_LINK_REC_ACK); /* only the ACK payload check is the full parser's */
        r = tg_link_ctl_parse(b, len, &pl, &plen);
        assert_true(r >= -1 && r <= (long)len);
        if (r > 0)
            assert_true(pl >= b && pl + plen == b + r);
        free(b);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_record_roundtrip),   cmocka_unit_test(test_record_header_sizes),
        cmocka_unit_test(test_record_limits),      cmocka_unit_test(test_record_truncated),
        cmocka_unit_test(test_record_stream),      cmocka_unit_test(test_record_garbage_rejected),
        cmocka_unit_test(test_ack_values),         cmocka_unit_test(test_control_roundtrip),
        cmocka_unit_test(test_control_limits),     cmocka_unit_test(test_node_names),
        cmocka_unit_test(test_paths),              cmocka_unit_test(test_random_bytes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
