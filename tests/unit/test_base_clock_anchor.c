/* test_base_clock_anchor.c: the clock anchor after a RemoteClockSync (src/base/clock_anchor.h):
 * what is encoded reads back as an anchor; a sync's machine and last client BOOTTIME are found
 * (and nothing for the host's, for a sync without BOOTTIME, for every truncation of a good one);
 * a packet with anything more than the anchor's three fields is not one. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "base/clock_anchor.h"
#include "tracegate/pbwire.h"

/* Field `num` holding d[0..len) at b; returns the bytes written. */
static size_t put_len(uint8_t *b, uint32_t num, const uint8_t *d, size_t len)
{
    size_t o = tg_pb_put_tag(b, num, TG_PB_LEN);
    o += tg_pb_put_varint(b + o, len);
    memcpy(b + o, d, len);
    return o + len;
}

/* ClockSnapshot.Clock {clock_id, timestamp} as field 1 of a snapshot */
static size_t put_clock(uint8_t *b, uint64_t id, uint64_t ts)
{
    uint8_t c[24];
    size_t n = 0;
    n += tg_pb_put_tag(c + n, 1, TG_PB_VARINT);
    n += tg_pb_put_varint(c + n, id);
    n += tg_pb_put_tag(c + n, 2, TG_PB_VARINT);
    n += tg_pb_put_varint(c + n, ts);
    return put_len(b, 1, c, n);
}

/* TracePacket{machine_id, remote_clock_sync{synced_clocks x2 {client_clocks{REALTIME, clock id
 * `boot_id` at boot[i]}, host_clocks{BOOTTIME}}}} */
static size_t put_sync(uint8_t *pkt, uint32_t machine, uint64_t boot_id, const uint64_t boot[2])
{
    uint8_t sync[256];
    size_t sl = 0;
    for (int i = 0; i < 2; i++) {
        uint8_t client[64], host[32], synced[128];
        size_t cl = put_clock(client, 1, 1700000000000000000ull + boot[i]);
        cl += put_clock(client + cl, boot_id, boot[i]);
        size_t hl = put_clock(host, 6, boot[i] + 50);
        size_t s = put_len(synced, 2, client, cl);
        s += put_len(synced + s, 3, host, hl);
        sl += put_len(sync + sl, 1, synced, s);
    }
    size_t n = tg_pb_put_tag(pkt, 98, TG_PB_VARINT);
    n += tg_pb_put_varint(pkt + n, machine);
    return n + put_len(pkt + n, 107, sync, sl);
}

static void test_encode_reads_back(void **state)
{
    (void)state;
    uint8_t a[TG_CLOCK_ANCHOR_MAX];
    size_t n = tg_clock_anchor_encode(a, UINT32_MAX, UINT64_MAX);
    assert_true(n <= TG_CLOCK_ANCHOR_MAX);
    assert_true(tg_clock_anchor_is(a, n));
    uint8_t more[TG_CLOCK_ANCHOR_MAX + 4];
    memcpy(more, a, n);
    more[n] = 0x50; /* trusted_packet_sequence_id 1: not an anchor any more */
    more[n + 1] = 1;
    assert_false(tg_clock_anchor_is(more, n + 2));
    for (size_t cut = 0; cut < n; cut++)
        assert_false(tg_clock_anchor_is(a, cut));
    n = tg_clock_anchor_encode(a, 0, 5); /* the host's: no machine */
    assert_false(tg_clock_anchor_is(a, n));
}

static void test_sync_found(void **state)
{
    (void)state;
    uint8_t pkt[512];
    const uint64_t boot[2] = {9000000000ull, 9000044000ull};
    size_t n = put_sync(pkt, 77, 6, boot);
    uint32_t m = 0;
    uint64_t b = 0;
    assert_true(tg_clock_anchor_for_sync(pkt, n, &m, &b));
    assert_int_equal(m, 77);
    assert_int_equal(b, boot[1]); /* the last client reading, not the host's */
    for (size_t cut = 0; cut < n; cut++) /* a cut packet is malformed: nothing found */
        assert_false(tg_clock_anchor_for_sync(pkt, cut, &m, &b));
    n = put_sync(pkt, 0, 6, boot); /* the host's sync: no anchor */
    assert_false(tg_clock_anchor_for_sync(pkt, n, &m, &b));
    n = put_sync(pkt, 77, 3, boot); /* no client BOOTTIME (MONOTONIC only) */
    assert_false(tg_clock_anchor_for_sync(pkt, n, &m, &b));
    assert_false(tg_clock_anchor_for_sync(NULL, 0, &m, &b));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_encode_reads_back),
        cmocka_unit_test(test_sync_found),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
