/* test_base_name_fit.c: names in fixed-size buffers (src/base/name_fit.c): short names kept as
 * they are, long ones never cut into the same text, and a literal name never equal to a digest
 * form. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "base/name_fit.h"

static void test_short_names_as_is(void **state)
{
    (void)state;
    char out[80];
    assert_int_equal(tg_name_fit(out, sizeof out, "cert:", "/CN=alice"), 0);
    assert_string_equal(out, "cert:/CN=alice");
    assert_int_equal(tg_name_fit(out, sizeof out, NULL, NULL), 0);
    assert_string_equal(out, "");
    assert_int_equal(tg_name_fit(out, 2 * TG_NAME_FIT_DIGEST_LEN, "a", "b"), -1);
    assert_string_equal(out, "");
}

static void test_long_names_stay_apart(void **state)
{
    (void)state;
    char a[400], b[400], fa[160], fb[160];
    memset(a, 'x', sizeof a);
    memcpy(b, a, sizeof b);
    strcpy(a + 300, "/CN=alice");
    strcpy(b + 300, "/CN=bob");
    assert_int_equal(tg_name_fit(fa, sizeof fa, "cert:", a), 1);
    assert_int_equal(tg_name_fit(fb, sizeof fb, "cert:", b), 1);
    assert_int_equal(strlen(fa), sizeof fa - 1);
    assert_memory_equal(fa, "cert:xxx", 8);
    assert_int_equal(fa[sizeof fa - 1 - TG_NAME_FIT_DIGEST_LEN], '~');
    assert_string_not_equal(fa, fb);
    /* the same name, the same text */
    char again[160];
    tg_name_fit(again, sizeof again, "cert:", a);
    assert_string_equal(again, fa);
}

static void test_literal_never_a_digest(void **state)
{
    (void)state;
    /* the longest literal is shorter than every digest form: a name spelled like another's
     * digest form is digested itself */
    char out[160], name[200];
    size_t lit = sizeof out - 1 - TG_NAME_FIT_DIGEST_LEN - 1;
    memset(name, 'y', lit);
    name[lit] = '\0';
    assert_int_equal(tg_name_fit(out, sizeof out, "", name), 0);
    assert_int_equal(strlen(out), lit);
    name[lit] = 'y';
    name[lit + 1] = '\0';
    assert_int_equal(tg_name_fit(out, sizeof out, "", name), 1);
    assert_int_equal(strlen(out), sizeof out - 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_short_names_as_is),
        cmocka_unit_test(test_long_names_stay_apart),
        cmocka_unit_test(test_literal_never_a_digest),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
