/* test_gw_limits.c: size and duration parsing, limit validation, the message token bucket
 * (burst, refill, pause/resume timing, unlimited), the slow-client policy (soft limit with
 * grace, hard limit, reset on drain) and per-source connection counts. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "gw_limits.h"

static void test_parse_size(void **state)
{
    (void)state;
    size_t v;
    assert_int_equal(tg_gw_parse_size("65536", &v), 0);
    assert_int_equal(v, 65536);
    assert_int_equal(tg_gw_parse_size("64k", &v), 0);
    assert_int_equal(v, 65536);
    assert_int_equal(tg_gw_parse_size("64KiB", &v), 0);
    assert_int_equal(v, 65536);
    assert_int_equal(tg_gw_parse_size("1m", &v), 0);
    assert_int_equal(v, 1u << 20);
    assert_int_equal(tg_gw_parse_size("2G", &v), 0);
    assert_int_equal(v, (size_t)2 << 30);
    assert_int_equal(tg_gw_parse_size("0", &v), 0);
    assert_int_equal(v, 0);
    assert_int_equal(tg_gw_parse_size("", &v), -1);
    assert_int_equal(tg_gw_parse_size("-1", &v), -1);
    assert_int_equal(tg_gw_parse_size("12x", &v), -1);
    assert_int_equal(tg_gw_parse_size("1kk", &v), -1);
    assert_int_equal(tg_gw_parse_size("k", &v), -1);
    assert_int_equal(tg_gw_parse_size("99999999999999999999", &v), -1);
}

static void test_parse_duration(void **state)
{
    (void)state;
    uint32_t v;
    assert_int_equal(tg_gw_parse_duration_ms("10", &v), 0);
    assert_int_equal(v, 10000);
    assert_int_equal(tg_gw_parse_duration_ms("10s", &v), 0);
    assert_int_equal(v, 10000);
    assert_int_equal(tg_gw_parse_duration_ms("500ms", &v), 0);
    assert_int_equal(v, 500);
    assert_int_equal(tg_gw_parse_duration_ms("1.5s", &v), 0);
    assert_int_equal(v, 1500);
    assert_int_equal(tg_gw_parse_duration_ms("5m", &v), 0);
    assert_int_equal(v, 300000);
    assert_int_equal(tg_gw_parse_duration_ms("1h", &v), 0);
    assert_int_equal(v, 3600000);
    assert_int_equal(tg_gw_parse_duration_ms("0", &v), 0);
    assert_int_equal(v, 0);
    assert_int_equal(tg_gw_parse_duration_ms("", &v), -1);
    assert_int_equal(tg_gw_parse_duration_ms("s", &v), -1);
    assert_int_equal(tg_gw_parse_duration_ms("10 s", &v), -1);
    assert_int_equal(tg_gw_parse_duration_ms("10d", &v), -1);
    assert_int_equal(tg_gw_parse_duration_ms("-5", &v), -1);
    assert_int_equal(tg_gw_parse_duration_ms("9999999h", &v), -1);
}

static void test_validate(void **state)
{
    (void)state;
    struct tg_gw_limits l;
    char err[256];
    tg_gw_limits_default(&l);
    assert_int_equal(tg_gw_limits_validate(&l, err, sizeof err), 0);
    l.max_frame = 200000;
    assert_int_equal(tg_gw_limits_validate(&l, err, sizeof err), -1);
    assert_non_null(strstr(err, "max-frame"));
    tg_gw_limits_default(&l);
    l.out_low = l.out_high;
    assert_int_equal(tg_gw_limits_validate(&l, err, sizeof err), -1);
    tg_gw_limits_default(&l);
    l.out_soft = l.out_hard + 1;
    assert_int_equal(tg_gw_limits_validate(&l, err, sizeof err), -1);
    tg_gw_limits_default(&l);
    l.out_hard = l.out_high;
    assert_int_equal(tg_gw_limits_validate(&l, err, sizeof err), -1);
    tg_gw_limits_default(&l);
    l.out_high = 1024;
    l.out_low = 512;
    assert_int_equal(tg_gw_limits_validate(&l, err, sizeof err), -1); /* too small to be useful */
    tg_gw_limits_default(&l);
    l.out_high = 64 << 10;
    l.out_low = 16 << 10;
    l.out_soft = 64 << 10;
    assert_int_equal(tg_gw_limits_validate(&l, err, sizeof err), 0);
}

static void test_bucket(void **state)
{
    (void)state;
    struct tg_gw_bucket b;
    uint64_t t = 1000000;
    tg_gw_bucket_init(&b, 10, 3, t); /* 10 msg/s, burst 3 */
    assert_int_equal(tg_gw_bucket_consume(&b, t), 1);
    assert_int_equal(tg_gw_bucket_consume(&b, t), 1);
    assert_int_equal(tg_gw_bucket_consume(&b, t), 0); /* the third message empties it: pause */
    uint64_t w = tg_gw_bucket_wait_us(&b, t);
    assert_true(w >= 99000 && w <= 101000); /* one token at 10/s */
    assert_int_equal(tg_gw_bucket_wait_us(&b, t + 50000) > 0, 1);
    assert_int_equal(tg_gw_bucket_wait_us(&b, t + 100001), 0);
    /* refill is capped at the burst */
    t += 10000000;
    assert_int_equal(tg_gw_bucket_consume(&b, t), 1);
    assert_int_equal(tg_gw_bucket_consume(&b, t), 1);
    assert_int_equal(tg_gw_bucket_consume(&b, t), 0);
    /* a client that overruns (frames already buffered) never owes more than one message */
    assert_int_equal(tg_gw_bucket_consume(&b, t), 0);
    assert_int_equal(tg_gw_bucket_consume(&b, t), 0);
    w = tg_gw_bucket_wait_us(&b, t);
    assert_true(w <= 200001);
    /* rate over time: 1 s at 10/s admits about 10 messages after the burst */
    tg_gw_bucket_init(&b, 10, 1, 0);
    int admitted = 0;
    for (uint64_t now = 0; now < 1000000; now += 1000)
        if (tg_gw_bucket_wait_us(&b, now) == 0) {
            tg_gw_bucket_consume(&b, now);
            admitted++;
        }
    assert_true(admitted >= 10 && admitted <= 11);
    /* unlimited */
    tg_gw_bucket_init(&b, 0, 0, 0);
    for (int i = 0; i < 100000; i++)
        assert_int_equal(tg_gw_bucket_consume(&b, 0), 1);
    assert_int_equal(tg_gw_bucket_wait_us(&b, 0), 0);
}

static void test_slow_client(void **state)
{
    (void)state;
    struct tg_gw_limits l;
    tg_gw_limits_default(&l);
    l.out_soft = 1000;
    l.soft_grace_ms = 2000;
    l.out_hard = 10000;
    struct tg_gw_slow s;
    memset(&s, 0, sizeof s);
    uint64_t t = 5000000;
    assert_int_equal(tg_gw_slow_check(&s, &l, 500, t), TG_GW_SLOW_OK);
    assert_int_equal(tg_gw_slow_check(&s, &l, 1001, t), TG_GW_SLOW_OK); /* over soft: grace starts */
    assert_int_equal(tg_gw_slow_check(&s, &l, 5000, t + 1999000), TG_GW_SLOW_OK);
    assert_int_equal(tg_gw_slow_check(&s, &l, 5000, t + 2000000), TG_GW_SLOW_CUT_SOFT);
    /* dropping under the soft limit resets the grace */
    memset(&s, 0, sizeof s);
    assert_int_equal(tg_gw_slow_check(&s, &l, 2000, t), TG_GW_SLOW_OK);
    assert_int_equal(tg_gw_slow_check(&s, &l, 999, t + 1500000), TG_GW_SLOW_OK);
    assert_int_equal(tg_gw_slow_check(&s, &l, 2000, t + 2500000), TG_GW_SLOW_OK);
    assert_int_equal(tg_gw_slow_check(&s, &l, 2000, t + 4000000), TG_GW_SLOW_OK);
    assert_int_equal(tg_gw_slow_check(&s, &l, 2000, t + 4500000), TG_GW_SLOW_CUT_SOFT);
    /* hard limit: at once */
    memset(&s, 0, sizeof s);
    assert_int_equal(tg_gw_slow_check(&s, &l, 10001, t), TG_GW_SLOW_CUT_HARD);
    assert_int_equal(tg_gw_slow_check(&s, &l, 10000, t), TG_GW_SLOW_OK);
    /* paused and reading nothing: cut once that lasts the soft grace; off with the soft limit */
    assert_int_equal(tg_gw_slow_stalled(&l, 1999), TG_GW_SLOW_OK);
    assert_int_equal(tg_gw_slow_stalled(&l, 2000), TG_GW_SLOW_CUT_STALLED);
    l.out_soft = 0;
    assert_int_equal(tg_gw_slow_stalled(&l, 60000), TG_GW_SLOW_OK);
}

static void key_of(const char *ip, uint32_t prefix6, const char *want)
{
    char out[64];
    tg_gw_source_key_text(ip, prefix6, out, sizeof out);
    if (strcmp(out, want) != 0)
        fail_msg("source of %s with /%u: got %s, want %s", ip, (unsigned)prefix6, out, want);
}

/* What the per-source limits count a client under: an IPv4 address (mapped or not) is itself; an
 * IPv6 address is its /prefix6 network (one host holds a whole /64), bits past the prefix cleared
 * also inside a byte; 128 (or 0: unset) counts per address. */
static void test_source_key(void **state)
{
    (void)state;
    key_of("192.0.2.7", 64, "192.0.2.7");
    key_of("::ffff:192.0.2.7", 64, "192.0.2.7");
    key_of("2001:db8:1:2:aaaa:bbbb:cccc:dddd", 64, "2001:db8:1:2::/64");
    key_of("2001:db8:1:2::1", 64, "2001:db8:1:2::/64");
    key_of("2001:db8:1:2:aaaa:bbbb:cccc:dddd", 48, "2001:db8:1::/48");
    key_of("2001:db8:1:2ff:aaaa::1", 60, "2001:db8:1:2f0::/60");
    key_of("2001:db8:1:2:aaaa:bbbb:cccc:dddd", 128, "2001:db8:1:2:aaaa:bbbb:cccc:dddd");
    key_of("2001:db8::5", 0, "2001:db8::5");
    key_of("not-an-address", 64, "not-an-address");
    /* two addresses of one /64 are one source; of two /64s, two */
    char a[64], b[64], c[64];
    tg_gw_source_key_text("2001:db8:0:7::a", 64, a, sizeof a);
    tg_gw_source_key_text("2001:db8:0:7:1234::b", 64, b, sizeof b);
    tg_gw_source_key_text("2001:db8:0:8::a", 64, c, sizeof c);
    assert_string_equal(a, b);
    assert_string_not_equal(a, c);
}

static void test_sources(void **state)
{
    (void)state;
    struct tg_gw_sources *t = tg_gw_sources_new();
    assert_int_equal(tg_gw_sources_acquire(t, "10.0.0.1", 2), 1);
    assert_int_equal(tg_gw_sources_acquire(t, "10.0.0.1", 2), 1);
    assert_int_equal(tg_gw_sources_acquire(t, "10.0.0.1", 2), 0);
    assert_int_equal(tg_gw_sources_acquire(t, "10.0.0.2", 2), 1);
    assert_int_equal(tg_gw_sources_count(t, "10.0.0.1"), 2);
    tg_gw_sources_release(t, "10.0.0.1");
    assert_int_equal(tg_gw_sources_acquire(t, "10.0.0.1", 2), 1);
    tg_gw_sources_release(t, "10.0.0.1");
    tg_gw_sources_release(t, "10.0.0.1");
    assert_int_equal(tg_gw_sources_count(t, "10.0.0.1"), 0);
    tg_gw_sources_release(t, "10.0.0.1"); /* extra release is harmless */
    for (int i = 0; i < 1000; i++)
        assert_int_equal(tg_gw_sources_acquire(t, "::1", 0), 1); /* 0 = unlimited */
    tg_gw_sources_free(t);
}

/* 10,000 distinct sources (the table grows several times on the way): every count stays its
 * own, limits hold after the growth, and releasing them all leaves nothing behind. */
static void test_sources_many(void **state)
{
    (void)state;
    struct tg_gw_sources *t = tg_gw_sources_new();
    char key[32];
    for (int i = 0; i < 10000; i++) {
        snprintf(key, sizeof key, "10.%d.%d.1", i / 256, i % 256);
        assert_int_equal(tg_gw_sources_acquire(t, key, 2), 1);
        if (i % 3 == 0)
            assert_int_equal(tg_gw_sources_acquire(t, key, 2), 1);
    }
    for (int i = 0; i < 10000; i++) {
        snprintf(key, sizeof key, "10.%d.%d.1", i / 256, i % 256);
        assert_int_equal(tg_gw_sources_count(t, key), i % 3 == 0 ? 2 : 1);
        assert_int_equal(tg_gw_sources_acquire(t, key, 2), i % 3 == 0 ? 0 : 1);
    }
    for (int i = 0; i < 10000; i++) {
        snprintf(key, sizeof key, "10.%d.%d.1", i / 256, i % 256);
        tg_gw_sources_release(t, key);
        tg_gw_sources_release(t, key);
        assert_int_equal(tg_gw_sources_count(t, key), 0);
    }
    assert_int_equal(tg_gw_sources_acquire(t, "10.0.0.1", 1), 1);
    assert_int_equal(tg_gw_sources_acquire(t, "10.0.0.1", 1), 0);
    tg_gw_sources_free(t); /* LeakSanitizer: no entry left over */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_size),   cmocka_unit_test(test_parse_duration), cmocka_unit_test(test_validate),
        cmocka_unit_test(test_bucket),       cmocka_unit_test(test_slow_client),    cmocka_unit_test(test_sources), cmocka_unit_test(test_sources_many),
        cmocka_unit_test(test_source_key),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
