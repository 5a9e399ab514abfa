/* test_tracectl_stats_print.c: the text form of `tracectl stats` (tc_stats_print): a snapshot as a
 * gateway sends it prints the node line and one aligned "name value" line per counter; a hostile
 * gateway's node name, version, counter names and string values reach the terminal only escaped
 * as the logger escapes them (no ESC, no other control byte, no C1 control), names stay aligned; a corrupt buffer is an
 * error, not a crash. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "stats_print.h"
#include "tracegate/kcdata.h"
#include "tracegate/kcdata_node.h"
#include "tracegate/kcdata_stats.h"

/* A snapshot as the gateway builds it: descriptor, gateway container (id 1), one node container. */
static void snapshot(const char *name, const char *version, const char *counter, const char *str_name,
                     const char *str_value, uint8_t **buf, size_t *len)
{
    struct tg_node_desc d;
    memset(&d, 0, sizeof d);
    snprintf(d.name, sizeof d.name, "%s", name);
    snprintf(d.version, sizeof d.version, "%s", version);
    struct tg_kcdata_enc e;
    assert_int_equal(tg_kcdata_enc_init(&e, TG_KCDATA_MAGIC), 0);
    assert_int_equal(tg_node_desc_add(&e, &d), 0);
    struct tg_kcdata_stat gw[] = {{"links_up", 1}, {counter, 42}};
    assert_int_equal(tg_kcdata_stats_add(&e, 1, gw, 2), 0);
    assert_int_equal(tg_kcdata_container_begin(&e, TG_KCCONTAINER_STATS, 2), 0);
    assert_int_equal(tg_kcdata_add_string(&e, str_name, str_value), 0);
    assert_int_equal(tg_kcdata_add_u64(&e, "bytes_in", 7), 0);
    assert_int_equal(tg_kcdata_container_end(&e, 2), 0);
    assert_int_equal(tg_kcdata_finish(&e, buf, len), 0);
}

static char *print(const uint8_t *buf, size_t len, int *rc)
{
    char *text = NULL, err[256] = "";
    size_t tl = 0;
    FILE *f = open_memstream(&text, &tl);
    assert_non_null(f);
    *rc = tc_stats_print(f, buf, len, err, sizeof err);
    fclose(f);
    return text;
}

static void test_plain_snapshot(void **state)
{
    (void)state;
    uint8_t *buf;
    size_t len;
    snapshot("hub", "0.9.0", "sessions", "node", "edge", &buf, &len);
    int rc;
    char *text = print(buf, len, &rc);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(text, "node hub (tracegate 0.9.0)\n"));
    assert_non_null(strstr(text, "\ngateway\n  links_up                   1\n  sessions                   42\n"));
    assert_non_null(strstr(text, "\nnode\n  node                       edge\n  bytes_in                   7\n"));
    free(text);
    free(buf);
}

static void assert_no_control_bytes(const char *text)
{
    for (const unsigned char *p = (const unsigned char *)text; *p; p++)
        if (*p != '\n')
            assert_true(*p >= 0x20 && *p < 0x7f);
}

static void test_hostile_strings_escaped(void **state)
{
    (void)state;
    uint8_t *buf;
    size_t len;
    /* ESC sequences that would clear the screen or retitle the terminal, a BEL, a raw backslash
     * and a byte above 0x7f, in every string the gateway controls */
    snapshot("evil\x1b]0;owned\x07", "1.0\x1b[2J\xc2\x9b", "x\x1b[31mred", "st\\r", "v\x9b" "1m\r\n", &buf, &len);
    int rc;
    char *text = print(buf, len, &rc);
    assert_int_equal(rc, 0);
    assert_no_control_bytes(text);
    assert_null(strchr(text, '\x1b'));
    assert_non_null(strstr(text, "node evil\\x1b]0;owned\\x07 (tracegate 1.0\\x1b[2J\\u009b)\n"));
    /* escaped name padded to the same column as plain ones: 26 columns, then one space */
    assert_non_null(strstr(text, "  x\\x1b[31mred               42\n"));
    assert_non_null(strstr(text, "  st\\\\r                      v\\x9b1m\\r\\n\n"));
    free(text);
    free(buf);
}

static void test_corrupt_buffer_is_an_error(void **state)
{
    (void)state;
    uint8_t *buf;
    size_t len;
    snapshot("hub", "0.9.0", "sessions", "node", "edge", &buf, &len);
    for (size_t cut = 0; cut < len; cut += 8) {
        int rc;
        char *text = print(buf, cut, &rc);
        assert_int_equal(rc, -1);
        free(text);
    }
    buf[len - 40] ^= 0xff; /* inside the last items */
    int rc;
    char *text = print(buf, len, &rc);
    if (rc == 0)
        assert_no_control_bytes(text);
    free(text);
    free(buf);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plain_snapshot),
        cmocka_unit_test(test_hostile_strings_escaped),
        cmocka_unit_test(test_corrupt_buffer_is_an_error),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
