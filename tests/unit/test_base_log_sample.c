/* test_base_log_sample.c: the sampler that keeps a flood of refused connections from becoming a
 * flood of log lines (base/log_sample.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "base/log_sample.h"

#define W 1000000u /* a window of 1 s, in µs */

static void test_first_lines_logged(void **state)
{
    (void)state;
    struct tg_log_sampler s = {0};
    unsigned un = 99;
    for (int i = 0; i < 3; i++) {
        assert_int_equal(tg_log_sample(&s, 5000000u + (uint64_t)i, 3, W, &un), 1);
        assert_int_equal(un, 0);
    }
    /* the 4th in the same window is counted, not logged */
    assert_int_equal(tg_log_sample(&s, 5000010u, 3, W, &un), 0);
    assert_int_equal(tg_log_sample(&s, 5999999u, 3, W, &un), 0);
}

static void test_next_line_says_how_many(void **state)
{
    (void)state;
    struct tg_log_sampler s = {0};
    unsigned un = 0;
    uint64_t t = 1000000u;
    assert_int_equal(tg_log_sample(&s, t, 2, W, &un), 1);
    assert_int_equal(tg_log_sample(&s, t + 1, 2, W, &un), 1);
    for (int i = 0; i < 500; i++)
        assert_int_equal(tg_log_sample(&s, t + 2 + (uint64_t)i, 2, W, &un), 0);
    /* a new window: logged again, and told that 500 were passed over */
    assert_int_equal(tg_log_sample(&s, t + W, 2, W, &un), 1);
    assert_int_equal(un, 500);
    assert_int_equal(tg_log_sample(&s, t + W + 1, 2, W, &un), 1);
    assert_int_equal(un, 0);
    /* passed-over events are carried until a line is logged, however many windows later */
    assert_int_equal(tg_log_sample(&s, t + W + 2, 2, W, &un), 0);
    assert_int_equal(tg_log_sample(&s, t + 10 * W, 2, W, &un), 1);
    assert_int_equal(un, 1);
}

static void test_quiet_peer_always_logged(void **state)
{
    (void)state;
    /* one event a second never loses a line */
    struct tg_log_sampler s = {0};
    unsigned un = 0;
    for (uint64_t i = 0; i < 100; i++) {
        assert_int_equal(tg_log_sample(&s, i * W, 1, W, &un), 1);
        assert_int_equal(un, 0);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_first_lines_logged),
        cmocka_unit_test(test_next_line_says_how_many),
        cmocka_unit_test(test_quiet_peer_always_logged),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
