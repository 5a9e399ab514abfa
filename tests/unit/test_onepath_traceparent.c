/* test_onepath_traceparent.c: W3C traceparent text form: parse and format, version ff, all-zero
 * ids, wrong lengths and separators, upper-case hex, future versions; context validity. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "tracegate/onepath.h"

#define GOOD "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

static void test_parse_good(void **state)
{
    (void)state;
    onepath_trace_ctx_t c;
    assert_int_equal(onepath_trace_ctx_from_string(GOOD, &c), ONEPATH_OK);
    static const uint8_t tid[16] = {0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6,
                                    0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36};
    static const uint8_t sid[8] = {0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7};
    assert_int_equal(c.version, 0);
    assert_memory_equal(c.trace_id, tid, 16);
    assert_memory_equal(c.span_id, sid, 8);
    assert_int_equal(c.flags, 1);
    assert_true(onepath_trace_ctx_valid(&c));

    char out[ONEPATH_TRACEPARENT_LEN + 1];
    assert_int_equal(onepath_trace_ctx_to_string(&c, out), ONEPATH_OK);
    assert_string_equal(out, GOOD);

    /* flags other than sampled survive the round trip */
    assert_int_equal(onepath_trace_ctx_from_string("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00", &c),
                     ONEPATH_OK);
    assert_int_equal(c.flags, 0);
    assert_int_equal(onepath_trace_ctx_from_string("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-fe", &c),
                     ONEPATH_OK);
    assert_int_equal(c.flags, 0xfe);
    assert_int_equal(onepath_trace_ctx_to_string(&c, out), ONEPATH_OK);
    assert_string_equal(out, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-fe");
}

static void expect_bad(const char *s)
{
    onepath_trace_ctx_t c;
    memset(&c, 0x5a, sizeof c);
    onepath_trace_ctx_t before = c;
    assert_int_equal(onepath_trace_ctx_from_string(s, &c), ONEPATH_ERR_INVAL);
    assert_memory_equal(&c, &before, sizeof c); /* untouched on error */
}

static void test_parse_bad(void **state)
{
    (void)state;
    expect_bad("ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");  /* version ff */
    expect_bad("00-00000000000000000000000000000000-00f067aa0ba902b7-01");  /* zero trace id */
    expect_bad("00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01");  /* zero span id */
    expect_bad("00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01");  /* upper-case trace id */
    expect_bad("00-4bf92f3577b34da6a3ce929d0e0e4736-00F067AA0BA902B7-01");  /* upper-case span id */
    expect_bad("0A-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");  /* upper-case version */
    expect_bad("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0F");  /* upper-case flags */
    expect_bad("00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01");   /* trace id 31 digits */
    expect_bad("00-4bf92f3577b34da6a3ce929d0e0e47366-00f067aa0ba902b7-01"); /* trace id 33 digits */
    expect_bad("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b-01");   /* span id 15 digits */
    expect_bad("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-1");   /* flags 1 digit */
    expect_bad(GOOD "0");                                                   /* version 00, 56 chars */
    expect_bad(GOOD "-extra");                                              /* version 00 has no more fields */
    expect_bad("00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");  /* separator */
    expect_bad("00-4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7-01");
    expect_bad("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7_01");
    expect_bad("00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01");  /* not hex */
    expect_bad(" 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"); /* leading space */
    expect_bad("");
    expect_bad("00");
    assert_int_equal(onepath_trace_ctx_from_string(NULL, NULL), ONEPATH_ERR_INVAL);
    onepath_trace_ctx_t c;
    assert_int_equal(onepath_trace_ctx_from_string(NULL, &c), ONEPATH_ERR_INVAL);
    assert_int_equal(onepath_trace_ctx_from_string(GOOD, NULL), ONEPATH_ERR_INVAL);
    /* every truncation of a good header is rejected */
    char buf[ONEPATH_TRACEPARENT_LEN + 1];
    for (size_t n = 0; n < ONEPATH_TRACEPARENT_LEN; n++) {
        memcpy(buf, GOOD, n);
        buf[n] = 0;
        expect_bad(buf);
    }
}

static void test_future_version(void **state)
{
    (void)state;
    onepath_trace_ctx_t c;
    /* a higher version is parsed by its first 55 characters; more fields must follow a '-' */
    assert_int_equal(onepath_trace_ctx_from_string("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", &c),
                     ONEPATH_OK);
    assert_int_equal(c.version, 1);
    assert_int_equal(
        onepath_trace_ctx_from_string("cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what-ever", &c),
        ONEPATH_OK);
    assert_int_equal(c.version, 0xcc);
    expect_bad("cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x");
}

static void test_format_invalid(void **state)
{
    (void)state;
    char out[ONEPATH_TRACEPARENT_LEN + 1] = "junk";
    onepath_trace_ctx_t c;
    memset(&c, 0, sizeof c);
    assert_false(onepath_trace_ctx_valid(&c));
    assert_int_equal(onepath_trace_ctx_to_string(&c, out), ONEPATH_ERR_INVAL);
    assert_string_equal(out, "");
    c.trace_id[15] = 1;
    assert_false(onepath_trace_ctx_valid(&c)); /* span id still zero */
    c.span_id[0] = 1;
    assert_true(onepath_trace_ctx_valid(&c));
    c.version = 0xff;
    assert_false(onepath_trace_ctx_valid(&c));
    assert_int_equal(onepath_trace_ctx_to_string(&c, out), ONEPATH_ERR_INVAL);
    assert_false(onepath_trace_ctx_valid(NULL));
    assert_int_equal(onepath_trace_ctx_to_string(NULL, out), ONEPATH_ERR_INVAL);
    c.version = 0;
    assert_int_equal(onepath_trace_ctx_to_string(&c, NULL), ONEPATH_ERR_INVAL);
}

static void test_roundtrip_many(void **state)
{
    (void)state;
    uint64_t x = 12345;
    for (int i = 0; i < 2000; i++) {
        onepath_trace_ctx_t a, b;
        uint8_t *bytes = (uint8_t *)&a;
        for (size_t k = 0; k < sizeof a; k++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            bytes[k] = (uint8_t)(x >> 56);
        }
        a.version = (uint8_t)(i % 255); /* never ff */
        a.trace_id[0] |= 1;
        a.span_id[0] |= 1;
        char s[ONEPATH_TRACEPARENT_LEN + 1];
        assert_int_equal(onepath_trace_ctx_to_string(&a, s), ONEPATH_OK);
        assert_int_equal(strlen(s), ONEPATH_TRACEPARENT_LEN);
        for (size_t k = 0; k < ONEPATH_TRACEPARENT_LEN; k++)
            assert_true((s[k] >= '0' && s[k] <= '9') || (s[k] >= 'a' && s[k] <= 'f') || s[k] == '-');
        assert_int_equal(onepath_trace_ctx_from_string(s, &b), ONEPATH_OK);
        assert_memory_equal(&a, &b, sizeof a);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_good),
        cmocka_unit_test(test_parse_bad),
        cmocka_unit_test(test_future_version),
        cmocka_unit_test(test_format_invalid),
        cmocka_unit_test(test_roundtrip_many),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
