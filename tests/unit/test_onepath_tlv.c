/* test_onepath_tlv.c: the attachment TLV: round trips, byte layout, foreign attachments passed
 * through unchanged, malformed TLVs (bad/over-long/6-byte/non-minimal lengths, truncation at every
 * byte, duplicates, wrong fixed lengths, other versions) delivering the raw attachment, unknown
 * tags skipped, and the receive helper handing the right user bytes back in every case. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "onepath_test_util.h"
#include "tracegate/onepath.h"

static onepath_trace_ctx_t sample_ctx(void)
{
    onepath_trace_ctx_t c;
    assert_int_equal(onepath_trace_ctx_from_string("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", &c),
                     ONEPATH_OK);
    return c;
}

static void test_layout(void **state)
{
    (void)state;
    onepath_tlv_t t;
    memset(&t, 0, sizeof t);
    t.has_traceparent = 1;
    t.traceparent = sample_ctx();
    t.has_send_ts = 1;
    t.send_ts_ns = 0x0102030405060708ull;
    t.user = (const uint8_t *)"hi";
    t.user_len = 2;
    uint8_t buf[128];
    size_t n = 0;
    assert_int_equal(onepath_tlv_size(&t), 3 + 28 + 10 + 4);
    assert_int_equal(onepath_tlv_encode(&t, buf, sizeof buf, &n), ONEPATH_OK);
    assert_int_equal(n, 45);
    static const uint8_t head[] = {0xD1, 0x07, 0x01, 0x01, 26, 0x00, 0x0a, 0xf7};
    assert_memory_equal(buf, head, sizeof head);
    assert_int_equal(buf[3 + 2 + 25], 0x01);                 /* flags, last traceparent byte */
    static const uint8_t ts[] = {0x11, 8, 1, 2, 3, 4, 5, 6, 7, 8}; /* big-endian */
    assert_memory_equal(buf + 31, ts, sizeof ts);
    static const uint8_t user[] = {0x10, 2, 'h', 'i'};
    assert_memory_equal(buf + 41, user, sizeof user);
    /* too small a buffer is refused, never overrun */
    assert_int_equal(onepath_tlv_encode(&t, buf, n - 1, &n), ONEPATH_ERR_NOSPACE);
    /* an invalid traceparent is not encoded */
    t.traceparent.version = 0xff;
    assert_int_equal(onepath_tlv_encode(&t, buf, sizeof buf, &n), ONEPATH_ERR_INVAL);
}

static void roundtrip(int tp, int ts, size_t user_len)
{
    uint8_t *user = malloc(user_len ? user_len : 1);
    for (size_t i = 0; i < user_len; i++)
        user[i] = (uint8_t)(i * 7 + 3);
    onepath_tlv_t t, d;
    memset(&t, 0, sizeof t);
    t.has_traceparent = tp;
    if (tp)
        t.traceparent = sample_ctx();
    t.has_send_ts = ts;
    t.send_ts_ns = 1733130000123456789ull;
    t.user = user;
    t.user_len = user_len;
    size_t cap = user_len + ONEPATH_ATTACH_OVERHEAD, n;
    uint8_t *buf = malloc(cap);
    assert_int_equal(onepath_tlv_encode(&t, buf, cap, &n), ONEPATH_OK);
    assert_int_equal(n, onepath_tlv_size(&t));
    assert_true(n <= cap);
    assert_int_equal(onepath_tlv_decode(buf, n, &d), ONEPATH_OK);
    assert_int_equal(d.has_traceparent, tp);
    if (tp)
        assert_memory_equal(&d.traceparent, &t.traceparent, sizeof t.traceparent);
    assert_int_equal(d.has_send_ts, ts);
    if (ts)
        assert_true(d.send_ts_ns == t.send_ts_ns);
    assert_int_equal(d.user_len, user_len);
    if (user_len) {
        assert_memory_equal(d.user, user, user_len);
        assert_true(d.user >= buf && d.user + d.user_len <= buf + n); /* points into the attachment */
    }
    free(buf);
    free(user);
}

static void test_roundtrip(void **state)
{
    (void)state;
    /* user lengths around every LEB128 size boundary */
    static const size_t lens[] = {0, 1, 2, 127, 128, 129, 16383, 16384, 16385, 100000, 2097152};
    for (int tp = 0; tp < 2; tp++)
        for (int ts = 0; ts < 2; ts++)
            for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++)
                roundtrip(tp, ts, lens[i]);
}

static void test_foreign(void **state)
{
    (void)state;
    onepath_tlv_t d;
    static const uint8_t plain[] = "user's own attachment";
    assert_int_equal(onepath_tlv_decode(plain, sizeof plain, &d), ONEPATH_TLV_FOREIGN);
    assert_ptr_equal(d.user, plain);
    assert_int_equal(d.user_len, sizeof plain);
    assert_false(d.has_traceparent);
    assert_false(d.has_send_ts);
    /* one magic byte only, the other magic byte, empty, NULL */
    static const uint8_t d1[] = {0xD1};
    assert_int_equal(onepath_tlv_decode(d1, 1, &d), ONEPATH_TLV_FOREIGN);
    assert_int_equal(d.user_len, 1);
    static const uint8_t d108[] = {0xD1, 0x08, 0x01};
    assert_int_equal(onepath_tlv_decode(d108, 3, &d), ONEPATH_TLV_FOREIGN);
    assert_int_equal(d.user_len, 3);
    assert_int_equal(onepath_tlv_decode(plain, 0, &d), ONEPATH_TLV_FOREIGN);
    assert_int_equal(d.user_len, 0);
    assert_int_equal(onepath_tlv_decode(NULL, 0, &d), ONEPATH_TLV_FOREIGN);
    assert_int_equal(d.user_len, 0);
    assert_int_equal(onepath_tlv_decode(NULL, 5, &d), ONEPATH_TLV_FOREIGN);
    assert_int_equal(d.user_len, 0);
    assert_int_equal(onepath_tlv_decode(plain, 3, NULL), ONEPATH_ERR_INVAL);
}

/* decode must say MALFORMED and hand back the raw attachment unchanged */
static void expect_malformed(const uint8_t *p, size_t n)
{
    uint8_t *c = malloc(n ? n : 1); /* an exact-size copy, so ASan sees any overread */
    memcpy(c, p, n);
    onepath_tlv_t d;
    assert_int_equal(onepath_tlv_decode(c, n, &d), ONEPATH_ERR_MALFORMED);
    assert_ptr_equal(d.user, c);
    assert_int_equal(d.user_len, n);
    assert_false(d.has_traceparent);
    assert_false(d.has_send_ts);
    free(c);
}

static void test_malformed(void **state)
{
    (void)state;
    /* magic only / wrong version */
    expect_malformed((const uint8_t[]){0xD1, 0x07}, 2);
    expect_malformed((const uint8_t[]){0xD1, 0x07, 0x02, 0x10, 0x01, 'x'}, 6);
    expect_malformed((const uint8_t[]){0xD1, 0x07, 0x00}, 3);
    /* a tag with no length */
    expect_malformed((const uint8_t[]){0xD1, 0x07, 0x01, 0x10}, 4);
    /* length past the end, by one and by a lot */
    expect_malformed((const uint8_t[]){0xD1, 0x07, 0x01, 0x10, 0x03, 'a', 'b'}, 7);
    expect_malformed((const uint8_t[]){0xD1, 0x07, 0x01, 0x10, 0xff, 0xff, 0xff, 0xff, 0x0f, 'a'}, 10);
    /* over-long varints: a 6th byte, 5 bytes beyond 2^32-1, non-minimal forms */
    expect_malformed((const uint8_t[]){0xD1, 0x07, 0x01, 0x10, 0x81, 0x80, 0x80, 0x80, 0x80, 0x00, 'a'}, 11);
    expect_malformed((const uint8_t[]){0xD1, 0x07, 0x01, 0x10, 0x80, 0x80, 0x80, 0x80, 0x10}, 9);
    expect_malformed((const uint8_t[]){0xD1, 0x07, 0x01, 0x10, 0x81, 0x00, 'a'}, 7);
    expect_malformed((const uint8_t[]){0xD1, 0x07, 0x01, 0x10, 0x80, 0x00}, 6);
    /* a varint cut short */
    expect_malformed((const uint8_t[]){0xD1, 0x07, 0x01, 0x10, 0x80}, 5);
    /* wrong fixed lengths */
    expect_malformed((const uint8_t[]){0xD1, 0x07, 0x01, 0x11, 0x07, 1, 2, 3, 4, 5, 6, 7}, 12);
    uint8_t tp[3 + 2 + 27];
    memcpy(tp, (const uint8_t[]){0xD1, 0x07, 0x01, 0x01, 27}, 5);
    memset(tp + 5, 1, 27);
    expect_malformed(tp, sizeof tp);
    /* a known tag twice */
    expect_malformed((const uint8_t[]){0xD1, 0x07, 0x01, 0x10, 0x01, 'a', 0x10, 0x01, 'b'}, 9);
    expect_malformed((const uint8_t[]){0xD1, 0x07, 0x01, 0x11, 8, 0, 0, 0, 0, 0, 0, 0, 1, 0x11, 8, 0, 0, 0, 0, 0, 0,
                                       0, 2},
                     23);

    /* every strict prefix of a good TLV (longer than the header) is malformed, except those that
     * end exactly between items */
    onepath_tlv_t t;
    memset(&t, 0, sizeof t);
    t.has_traceparent = 1;
    t.traceparent = sample_ctx();
    t.has_send_ts = 1;
    t.send_ts_ns = 42;
    uint8_t user[300];
    memset(user, 'u', sizeof user);
    t.user = user;
    t.user_len = sizeof user;
    uint8_t buf[400];
    size_t n;
    assert_int_equal(onepath_tlv_encode(&t, buf, sizeof buf, &n), ONEPATH_OK);
    for (size_t cut = 2; cut < n; cut++) {
        if (cut == 3 || cut == 31 || cut == 41) { /* item boundaries: a valid, shorter TLV */
            onepath_tlv_t d;
            assert_int_equal(onepath_tlv_decode(buf, cut, &d), ONEPATH_OK);
            assert_int_equal(d.user_len, 0);
            continue;
        }
        expect_malformed(buf, cut);
    }
}

static void test_unknown_tags_skipped(void **state)
{
    (void)state;
    /* TRACESTATE (reserved) and unknown tags, before, between and after the known ones */
    uint8_t b[256];
    size_t n = 0;
    const uint8_t hdr[] = {0xD1, 0x07, 0x01};
    memcpy(b + n, hdr, 3);
    n += 3;
    const uint8_t ts[] = {0x02, 0x05, 'k', '=', 'v', ',', 'x'};
    memcpy(b + n, ts, sizeof ts);
    n += sizeof ts;
    const uint8_t unk0[] = {0x7f, 0x00};
    memcpy(b + n, unk0, sizeof unk0);
    n += sizeof unk0;
    const uint8_t user[] = {0x10, 0x03, 'a', 'b', 'c'};
    memcpy(b + n, user, sizeof user);
    n += sizeof user;
    b[n++] = 0xee; /* unknown tag with a 2-byte length of 130 */
    b[n++] = 0x82;
    b[n++] = 0x01;
    memset(b + n, 0xAA, 130);
    n += 130;
    const uint8_t sts[] = {0x11, 8, 0, 0, 0, 0, 0, 0, 0x01, 0x00};
    memcpy(b + n, sts, sizeof sts);
    n += sizeof sts;
    onepath_tlv_t d;
    assert_int_equal(onepath_tlv_decode(b, n, &d), ONEPATH_OK);
    assert_int_equal(d.user_len, 3);
    assert_memory_equal(d.user, "abc", 3);
    assert_true(d.has_send_ts);
    assert_int_equal(d.send_ts_ns, 256);
    assert_false(d.has_traceparent);
}

static void test_invalid_traceparent_value(void **state)
{
    (void)state;
    /* well-formed TLV whose traceparent value is invalid (zero trace id): no parent, the USER item
     * still delivered */
    uint8_t b[64] = {0xD1, 0x07, 0x01, 0x01, 26};
    memset(b + 5, 0, 26);
    b[5 + 17] = 1; /* span id non-zero, trace id zero */
    size_t n = 5 + 26;
    memcpy(b + n, (const uint8_t[]){0x10, 0x02, 'o', 'k'}, 4);
    n += 4;
    onepath_tlv_t d;
    assert_int_equal(onepath_tlv_decode(b, n, &d), ONEPATH_OK);
    assert_false(d.has_traceparent);
    assert_int_equal(d.user_len, 2);
    assert_memory_equal(d.user, "ok", 2);
    /* version ff */
    memset(b + 5, 1, 26);
    b[5] = 0xff;
    assert_int_equal(onepath_tlv_decode(b, n, &d), ONEPATH_OK);
    assert_false(d.has_traceparent);
}

/* onepath_recv gives the user exactly the right bytes for native, foreign and malformed input,
 * whatever OnePath's state (here: never enabled). */
static void test_recv_user_bytes(void **state)
{
    (void)state;
    ot_clear_env();
    onepath_recv_t r;
    static const uint8_t plain[] = {1, 2, 3, 0xD1};
    assert_int_equal(onepath_recv(&r, plain, sizeof plain, 10), ONEPATH_TLV_FOREIGN);
    assert_ptr_equal(r.user, plain);
    assert_int_equal(r.user_len, 4);
    assert_false(r.has_parent);
    assert_int_equal(r.e2e_ns, -1);

    static const uint8_t bad[] = {0xD1, 0x07, 0x01, 0x10, 0x09, 'x'};
    assert_int_equal(onepath_recv(&r, bad, sizeof bad, 10), ONEPATH_ERR_MALFORMED);
    assert_ptr_equal(r.user, bad);
    assert_int_equal(r.user_len, sizeof bad);

    onepath_tlv_t t;
    memset(&t, 0, sizeof t);
    t.has_traceparent = 1;
    t.traceparent = sample_ctx();
    t.user = (const uint8_t *)"payload-side";
    t.user_len = 12;
    uint8_t buf[128];
    size_t n;
    assert_int_equal(onepath_tlv_encode(&t, buf, sizeof buf, &n), ONEPATH_OK);
    assert_int_equal(onepath_recv(&r, buf, n, 10), ONEPATH_OK);
    assert_int_equal(r.user_len, 12);
    assert_memory_equal(r.user, "payload-side", 12);
    assert_true(r.has_parent);
    assert_memory_equal(&r.parent, &t.traceparent, sizeof r.parent);
    assert_int_equal(onepath_recv(&r, NULL, 0, 0), ONEPATH_TLV_FOREIGN);
    assert_int_equal(r.user_len, 0);
    onepath_trace_shutdown();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_layout),
        cmocka_unit_test(test_roundtrip),
        cmocka_unit_test(test_foreign),
        cmocka_unit_test(test_malformed),
        cmocka_unit_test(test_unknown_tags_skipped),
        cmocka_unit_test(test_invalid_traceparent_value),
        cmocka_unit_test(test_recv_user_bytes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
