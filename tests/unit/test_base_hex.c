/* test_base_hex.c: hex encoding and its strict reading (src/base/hex.c): round trips, both cases,
 * and every near-miss a scanf-style reading would accept (sign, space, 0x, short, long). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "base/hex.h"

static void test_round_trip(void **state)
{
    (void)state;
    uint8_t in[256], back[256];
    for (int i = 0; i < 256; i++)
        in[i] = (uint8_t)i;
    char text[513];
    tg_hex_encode(text, in, sizeof in);
    assert_int_equal(strlen(text), 512);
    assert_memory_equal(text, "000102", 6);
    assert_string_equal(text + 506, "fdfeff");
    assert_int_equal(tg_hex_decode(back, sizeof back, text), 0);
    assert_memory_equal(back, in, sizeof in);
    tg_hex_encode(text, in, 0);
    assert_string_equal(text, "");
    assert_int_equal(tg_hex_decode(back, 0, ""), 0);
}

static void test_strict(void **state)
{
    (void)state;
    uint8_t b[2];
    assert_int_equal(tg_hex_decode(b, 2, "aBcD"), 0);
    assert_int_equal(b[0], 0xab);
    assert_int_equal(b[1], 0xcd);
    static const char *const bad[] = {"-1ff", "+fff", " fff", "ff f", "0xff", "abc", "abcde", "gg00", "ab\n0", "",
                                      "ab:c"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        if (tg_hex_decode(b, 2, bad[i]) != -1)
            fail_msg("\"%s\" was read as hex", bad[i]);
    }
    assert_int_equal(tg_hex_decode(b, 2, NULL), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_strict),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
