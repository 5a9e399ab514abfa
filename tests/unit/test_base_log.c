/* test_base_log.c: the logger's escaping (log forging). A client-chosen string with an embedded
 * newline and a fake log prefix, terminal escapes, C1 controls, U+2028 and bytes that are not UTF-8
 * must come out as one escaped line, in the text and the JSON format; ordinary UTF-8 text stays
 * readable; an over-long message is cut on a character boundary and still ends its line. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "textproto/utf8.h"
#include "tracegate/log.h"

#include "tg_test_util.h"

/* A hostile "service name": ends the line, then forges an error line of another component. */
#define FORGED "EvilPort\n2026-01-01T00:00:00.000Z error gw-auth: session 1: authenticated as admin"

static char *log_one(enum tg_log_format fmt, const char *component, const char *what)
{
    tg_log_set_format(fmt);
    assert_int_equal(tg_test_stderr_begin(), 0);
    tg_warn(component, "denied binding %s", what);
    char *out = tg_test_stderr_end();
    tg_log_set_format(TG_LOG_TEXT);
    assert_non_null(out);
    return out;
}

static size_t count_char(const char *s, char c)
{
    size_t n = 0;
    for (; *s; s++)
        n += *s == c;
    return n;
}

/* One line: a single '\n', at the end; no other control bytes; valid UTF-8 throughout. */
static void assert_one_clean_line(const char *s)
{
    size_t n = strlen(s);
    assert_true(n > 0);
    assert_int_equal(count_char(s, '\n'), 1);
    assert_int_equal(s[n - 1], '\n');
    for (size_t i = 0; i + 1 < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x20 || c == 0x7f)
            fail_msg("control byte 0x%02x at %zu in: %s", c, i, s);
    }
    for (size_t i = 0; i < n;) {
        size_t l = tg_tp_utf8_seq_len((const uint8_t *)s + i, n - i);
        if (!l)
            fail_msg("not UTF-8 at %zu in: %s", i, s);
        i += l;
    }
}

static void test_forged_line_text(void **state)
{
    (void)state;
    char *out = log_one(TG_LOG_TEXT, "gw-bridge", FORGED);
    assert_one_clean_line(out);
    assert_non_null(strstr(out, " warn  gw-bridge: denied binding EvilPort\\n2026-01-01T00:00:00.000Z error gw-auth:"));
    free(out);
}

static void test_forged_line_json(void **state)
{
    (void)state;
    char *out = log_one(TG_LOG_JSON, "gw-bridge", FORGED "\", \"level\": \"error");
    assert_one_clean_line(out);
    assert_non_null(strstr(out, "\"msg\":\"denied binding EvilPort\\n2026-01-01T00:00:00.000Z error gw-auth: session 1: "
                                "authenticated as admin\\\", \\\"level\\\": \\\"error\"}\n"));
    free(out);
}

static void test_control_and_bad_bytes(void **state)
{
    (void)state;
    /* ESC sequence (clears a terminal), CR, tab, DEL, backslash, C1 CSI (U+009B), U+2028, a stray
     * 0xff, a truncated UTF-8 sequence, and ordinary UTF-8 that must survive */
    const char *what = "a\x1b[2Jb\rc\td\x7f" "e\\f\xc2\x9bg\xe2\x80\xa8h\xffi\xe2\x82j caf\xc3\xa9 \xe2\x82\xac";
    char *out = log_one(TG_LOG_TEXT, "gw-ws", what);
    assert_one_clean_line(out);
    assert_non_null(strstr(out, "a\\x1b[2Jb\\rc\\td\\x7fe\\\\f\\u009bg\\u2028h\\xffi\\xe2\\x82j caf\xc3\xa9 \xe2\x82\xac\n"));
    free(out);
    out = log_one(TG_LOG_JSON, "gw-ws", what);
    assert_one_clean_line(out);
    assert_non_null(strstr(out, "a\\u001b[2Jb\\rc\\td\\u007fe\\\\f\\u009bg\\u2028h\\\\xffi\\\\xe2\\\\x82j caf\xc3\xa9 \xe2\x82\xac\"}\n"));
    free(out);
}

/* A message longer than a line holds: cut between characters, never inside an escape or a UTF-8
 * sequence, and the line still ends. */
static void test_long_message(void **state)
{
    (void)state;
    size_t n = 3000;
    char *big = malloc(n + 1);
    assert_non_null(big);
    for (size_t i = 0; i < n; i += 3)
        memcpy(big + i, i % 2 ? "\n\xe2\x82" : "\xe2\x82\xac", 3);
    big[n] = '\0';
    for (int fmt = TG_LOG_TEXT; fmt <= TG_LOG_JSON; fmt++) {
        char *out = log_one((enum tg_log_format)fmt, "x", big);
        assert_one_clean_line(out);
        assert_true(strlen(out) <= 4096);
        if (fmt == TG_LOG_JSON)
            assert_non_null(strstr(out, "\"}\n"));
        free(out);
    }
    free(big);
}

int main(void)
{
    tg_log_set_level(TG_LOG_DEBUG);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_forged_line_text),
        cmocka_unit_test(test_forged_line_json),
        cmocka_unit_test(test_control_and_bad_bytes),
        cmocka_unit_test(test_long_message),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
