/* test_tracectl_u32_index.c: the id index dump and the clock readers find sequences and machines
 * with (u32_index.h): every id found at the position it was put, 0 and UINT32_MAX among them,
 * a put of a known id moves it, absent ids are absent, across growth to a million ids. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "u32_index.h"

static void test_empty(void **state)
{
    (void)state;
    struct tc_u32_index x = {0};
    size_t pos = 99;
    assert_int_equal(tc_u32_index_get(&x, 0, &pos), 0);
    assert_int_equal(tc_u32_index_get(&x, 7, &pos), 0);
    assert_int_equal(pos, 99);
    tc_u32_index_free(&x);
}

static void test_put_get_move(void **state)
{
    (void)state;
    struct tc_u32_index x = {0};
    size_t pos;
    assert_int_equal(tc_u32_index_put(&x, 0, 0), 0);
    assert_int_equal(tc_u32_index_put(&x, UINT32_MAX, 1), 0);
    assert_int_equal(tc_u32_index_put(&x, 5, 2), 0);
    assert_int_equal(tc_u32_index_get(&x, 0, &pos), 1);
    assert_int_equal(pos, 0);
    assert_int_equal(tc_u32_index_get(&x, UINT32_MAX, &pos), 1);
    assert_int_equal(pos, 1);
    assert_int_equal(tc_u32_index_put(&x, 5, 40), 0); /* a known id moves */
    assert_int_equal(tc_u32_index_get(&x, 5, &pos), 1);
    assert_int_equal(pos, 40);
    assert_int_equal(x.n, 3);
    assert_int_equal(tc_u32_index_get(&x, 6, &pos), 0);
    tc_u32_index_free(&x);
    assert_int_equal(tc_u32_index_get(&x, 5, &pos), 0);
}

/* consecutive ids (sequence ids), ids a power of two apart (the hash must spread both), and a
 * scattered set: all found after growing, none of the gaps */
static void test_million_ids(void **state)
{
    (void)state;
    struct tc_u32_index x = {0};
    const uint32_t n = 1000000;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t id = i % 3 == 0 ? i : i % 3 == 1 ? i << 12 : i * 2654435761u;
        assert_int_equal(tc_u32_index_put(&x, id, i), 0);
    }
    assert_true(x.cap >= 2 * x.n);
    size_t pos;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t id = i % 3 == 0 ? i : i % 3 == 1 ? i << 12 : i * 2654435761u;
        assert_int_equal(tc_u32_index_get(&x, id, &pos), 1);
        /* an id put twice (i << 12 and i * 2654435761 can meet) holds the later position */
        if (pos != i)
            assert_true(pos > i);
    }
    assert_int_equal(tc_u32_index_get(&x, 1, &pos), 0); /* 1 is never put: 1 % 3 == 1 gives 1 << 12 */
    tc_u32_index_free(&x);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_empty),
        cmocka_unit_test(test_put_get_move),
        cmocka_unit_test(test_million_ids),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
