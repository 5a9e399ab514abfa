/* test_service_packet_check.c: tg_svc_packet_is_valid, the read-out's check that a producer packet
 * parses and carries no field only the service may write, reads a packet in place across its
 * slices. Held against the plain walk it replaced (concatenate the slices, tg_pb_next over the
 * bytes) on hand-made packets and on many random and mutated ones cut into random slices. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "service/svc.h"
#include "tracegate/pbwire.h"

/* ---- the reference: the walk over contiguous bytes */

static bool ref_reserved(uint32_t num)
{
    static const uint32_t k[] = {3, 10, 33, 35, 36, 50, 69, 79, 98, 124, 125, 133};
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++)
        if (k[i] == num)
            return true;
    return false;
}

static bool ref_valid(const uint8_t *p, size_t len)
{
    struct tg_pb_reader r;
    struct tg_pb_field f;
    tg_pb_reader_init(&r, p, len);
    int rc;
    while ((rc = tg_pb_next(&r, &f)) == 1) {
        if (ref_reserved(f.number))
            return false;
        if (f.wire == TG_PB_LEN && f.len > 0x0FFFFFFFu)
            return false;
    }
    return rc == 0;
}

/* ---- helpers */

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;

static uint32_t rnd(void)
{
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (uint32_t)(g_rng >> 11);
}

/* The packet cut at `ncuts` cut points (sorted offsets, duplicates give empty slices). */
static bool check_cut(const uint8_t *p, size_t len, const size_t *cuts, size_t ncuts)
{
    struct tg_tb_slice sl[16];
    size_t prev = 0, n = 0;
    for (size_t i = 0; i < ncuts && n < 15; i++) {
        sl[n].data = p + prev;
        sl[n].len = cuts[i] - prev;
        prev = cuts[i];
        n++;
    }
    sl[n].data = p + prev;
    sl[n].len = len - prev;
    n++;
    struct tg_tb_packet pkt = {.slices = sl, .num_slices = n, .size = len};
    return tg_svc_packet_is_valid(&pkt);
}

static int cmp_size(const void *a, const void *b)
{
    size_t x = *(const size_t *)a, y = *(const size_t *)b;
    return x < y ? -1 : x > y;
}

/* Every way of cutting short packets in two, and random cuts in up to 6 slices, agree. */
static void expect_same(const uint8_t *p, size_t len)
{
    bool want = ref_valid(p, len);
    assert_int_equal(check_cut(p, len, NULL, 0), want);
    if (len <= 64) {
        for (size_t a = 0; a <= len; a++)
            assert_int_equal(check_cut(p, len, &a, 1), want);
    }
    for (int k = 0; k < 4; k++) {
        size_t cuts[5];
        size_t nc = 1 + rnd() % 5;
        for (size_t i = 0; i < nc; i++)
            cuts[i] = len ? rnd() % (len + 1) : 0;
        qsort(cuts, nc, sizeof cuts[0], cmp_size);
        assert_int_equal(check_cut(p, len, cuts, nc), want);
    }
}

static size_t put_field_varint(uint8_t *b, uint32_t num, uint64_t v)
{
    size_t n = tg_pb_put_tag(b, num, TG_PB_VARINT);
    return n + tg_pb_put_varint(b + n, v);
}

static size_t put_field_bytes(uint8_t *b, uint32_t num, size_t len, uint8_t fill)
{
    size_t n = tg_pb_put_tag(b, num, TG_PB_LEN);
    n += tg_pb_put_varint(b + n, len);
    memset(b + n, fill, len);
    return n + len;
}

/* ---- tests */

static void test_well_formed_packets_pass(void **state)
{
    (void)state;
    uint8_t b[4096];
    size_t n = put_field_varint(b, 8, 123456789);               /* timestamp */
    n += put_field_bytes(b + n, 900, 1000, 0xab);               /* for_testing */
    n += tg_pb_put_tag(b + n, 58, TG_PB_VARINT);                /* timestamp_clock_id */
    b[n++] = 6;
    n += tg_pb_put_tag(b + n, 13, TG_PB_I64);
    memset(b + n, 1, 8);
    n += 8;
    n += tg_pb_put_tag(b + n, 14, TG_PB_I32);
    memset(b + n, 2, 4);
    n += 4;
    assert_true(ref_valid(b, n));
    expect_same(b, n);
    struct tg_tb_packet empty = {.slices = NULL, .num_slices = 0, .size = 0};
    assert_true(tg_svc_packet_is_valid(&empty));
    expect_same(b, 0);
}

static void test_reserved_fields_fail_wherever_cut(void **state)
{
    (void)state;
    static const uint32_t k[] = {3, 10, 33, 35, 36, 50, 69, 79, 98, 124, 125, 133};
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
        uint8_t b[256];
        size_t n = put_field_varint(b, 8, 1);
        n += put_field_bytes(b + n, 900, 20, 0x11);
        n += i % 2 ? put_field_bytes(b + n, k[i], 3, 0x22) : put_field_varint(b + n, k[i], 7);
        n += put_field_bytes(b + n, 901, 10, 0x33);
        assert_false(ref_valid(b, n));
        expect_same(b, n);
        for (size_t a = 0; a <= n; a++) /* the trusted field cut anywhere, even inside its key */
            assert_false(check_cut(b, n, &a, 1));
    }
}

static void test_malformed_packets_fail(void **state)
{
    (void)state;
    uint8_t b[64];
    /* field number 0 */
    b[0] = 0x00;
    b[1] = 0x01;
    expect_same(b, 2);
    assert_false(ref_valid(b, 2));
    /* groups and wire types 6, 7 */
    for (uint8_t w = 3; w <= 7; w++) {
        if (w == 5)
            continue;
        b[0] = (uint8_t)(8 << 3 | w);
        b[1] = 0;
        assert_false(ref_valid(b, 2));
        expect_same(b, 2);
    }
    /* a varint of 11 bytes, and a 10th byte above 1 */
    b[0] = 8 << 3;
    memset(b + 1, 0x80, 10);
    b[11] = 0;
    assert_false(ref_valid(b, 12));
    expect_same(b, 12);
    memset(b + 1, 0xff, 9);
    b[10] = 0x02;
    assert_false(ref_valid(b, 11));
    expect_same(b, 11);
    b[10] = 0x01;
    assert_true(ref_valid(b, 11));
    expect_same(b, 11);
    /* field number above 2^29 - 1 */
    size_t n = tg_pb_put_varint(b, ((uint64_t)0x20000000u << 3) | 0);
    b[n++] = 1;
    assert_false(ref_valid(b, n));
    expect_same(b, n);
    /* truncated: a key alone, a fixed64 short of bytes, a fixed32, a length past the end */
    n = tg_pb_put_tag(b, 8, TG_PB_VARINT);
    expect_same(b, n);
    assert_false(ref_valid(b, n));
    n = tg_pb_put_tag(b, 13, TG_PB_I64);
    memset(b + n, 0, 7);
    assert_false(ref_valid(b, n + 7));
    expect_same(b, n + 7);
    assert_true(ref_valid((memset(b + n, 0, 8), b), n + 8));
    expect_same(b, n + 8);
    n = tg_pb_put_tag(b, 14, TG_PB_I32);
    assert_false(ref_valid(b, n + 3));
    expect_same(b, n + 3);
    n = put_field_bytes(b, 900, 20, 0);
    assert_false(ref_valid(b, n - 1));
    expect_same(b, n - 1);
    /* a length far beyond what any packet holds */
    n = tg_pb_put_tag(b, 900, TG_PB_LEN);
    n += tg_pb_put_varint(b + n, 0x10000000u);
    assert_false(ref_valid(b, n));
    expect_same(b, n);
}

/* Random field sequences (reserved numbers now and then), then random byte mutations. */
static void test_random_packets_agree(void **state)
{
    (void)state;
    static const uint32_t nums[] = {1, 2, 3, 8, 10, 15, 33, 36, 58, 69, 79, 87, 98, 124, 133, 900, 1000, 536870911};
    uint8_t b[2048];
    int valid = 0, invalid = 0;
    for (int it = 0; it < 20000; it++) {
        size_t n = 0;
        size_t nf = rnd() % 6;
        for (size_t f = 0; f < nf && n < sizeof b - 300; f++) {
            uint32_t num = rnd() % 4 ? 8 + rnd() % 1000 : nums[rnd() % (sizeof nums / sizeof nums[0])];
            switch (rnd() % 4) {
            case 0:
                n += put_field_varint(b + n, num, (uint64_t)rnd() << (rnd() % 40));
                break;
            case 1:
                n += put_field_bytes(b + n, num, rnd() % 200, (uint8_t)rnd());
                break;
            case 2:
                n += tg_pb_put_tag(b + n, num, TG_PB_I64);
                memset(b + n, (int)(rnd() & 0xff), 8);
                n += 8;
                break;
            default:
                n += tg_pb_put_tag(b + n, num, TG_PB_I32);
                memset(b + n, (int)(rnd() & 0xff), 4);
                n += 4;
                break;
            }
        }
        size_t muts = rnd() % 3;
        for (size_t m = 0; m < muts && n > 0; m++)
            b[rnd() % n] = (uint8_t)rnd();
        if (n > 0 && rnd() % 8 == 0)
            n -= 1 + rnd() % n; /* truncated */
        if (ref_valid(b, n))
            valid++;
        else
            invalid++;
        expect_same(b, n);
    }
    /* both outcomes were exercised often */
    assert_true(valid > 2000);
    assert_true(invalid > 2000);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_well_formed_packets_pass),
        cmocka_unit_test(test_reserved_fields_fail_wherever_cut),
        cmocka_unit_test(test_malformed_packets_fail),
        cmocka_unit_test(test_random_packets_agree),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
