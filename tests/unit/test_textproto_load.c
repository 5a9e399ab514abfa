/* test_textproto_load.c: tg_config_load() telling binary wire format from text
 * format, and which error it reports when neither reading works. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "trace_config.pb-c.h"
#include "tracegate/textproto.h"

#define TC_DESC (&perfetto__protos__trace_config__descriptor)

static Perfetto__Protos__TraceConfig *load_ok(const void *data, size_t len)
{
    char err[256] = "untouched";
    ProtobufCMessage *m = (ProtobufCMessage *)1;
    if (tg_config_load(TC_DESC, data, len, &m, err, sizeof err) != 0)
        fail_msg("load failed: %s", err);
    assert_non_null(m);
    assert_ptr_equal(m->descriptor, TC_DESC);
    assert_string_equal(err, "");
    return (Perfetto__Protos__TraceConfig *)m;
}

static void load_fails(const void *data, size_t len, const char *want)
{
    char err[256] = "";
    ProtobufCMessage *m = (ProtobufCMessage *)1;
    assert_int_equal(tg_config_load(TC_DESC, data, len, &m, err, sizeof err), -1);
    assert_null(m);
    if (strcmp(err, want) != 0)
        fail_msg("got  '%s'\nwant '%s'", err, want);
}

static void test_text(void **state)
{
    (void)state;
    static const char text[] = "buffers { size_kb: 2048 }\nduration_ms: 1000\n";
    Perfetto__Protos__TraceConfig *tc = load_ok(text, strlen(text));
    assert_int_equal(tc->n_buffers, 1);
    assert_int_equal(tc->buffers[0]->size_kb, 2048);
    assert_int_equal(tc->duration_ms, 1000);
    protobuf_c_message_free_unpacked(&tc->base, NULL);

    /* a UTF-8 byte order mark is skipped; UTF-8 in strings is text too */
    static const char bom[] = "\xef\xbb\xbfunique_session_name: \"caf\xc3\xa9\"\r\n";
    tc = load_ok(bom, strlen(bom));
    assert_string_equal(tc->unique_session_name, "caf\xc3\xa9");
    protobuf_c_message_free_unpacked(&tc->base, NULL);

    /* empty input is an empty config */
    tc = load_ok("", 0);
    assert_int_equal(protobuf_c_message_get_packed_size(&tc->base), 0);
    protobuf_c_message_free_unpacked(&tc->base, NULL);
    tc = load_ok(NULL, 0);
    protobuf_c_message_free_unpacked(&tc->base, NULL);
}

static void test_binary(void **state)
{
    (void)state;
    Perfetto__Protos__TraceConfig__BufferConfig b = PERFETTO__PROTOS__TRACE_CONFIG__BUFFER_CONFIG__INIT;
    b.has_size_kb = 1, b.size_kb = 4096;
    Perfetto__Protos__TraceConfig__BufferConfig *bufs[] = {&b};
    Perfetto__Protos__TraceConfig tc = PERFETTO__PROTOS__TRACE_CONFIG__INIT;
    tc.n_buffers = 1, tc.buffers = bufs;
    tc.has_duration_ms = 1, tc.duration_ms = 2500;
    tc.unique_session_name = (char *)"bin";
    size_t n = protobuf_c_message_get_packed_size(&tc.base);
    uint8_t *wire = malloc(n);
    assert_non_null(wire);
    protobuf_c_message_pack(&tc.base, wire);

    Perfetto__Protos__TraceConfig *got = load_ok(wire, n);
    assert_int_equal(got->n_buffers, 1);
    assert_int_equal(got->buffers[0]->size_kb, 4096);
    assert_int_equal(got->duration_ms, 2500);
    assert_string_equal(got->unique_session_name, "bin");
    protobuf_c_message_free_unpacked(&got->base, NULL);

    /* a truncated binary is reported as such, naming the first non-text byte */
    load_fails(wire, n - 1,
               "not a valid binary perfetto.protos.TraceConfig (and not text: byte 0x03 at offset 1 is not "
               "printable UTF-8)");
    free(wire);

    /* invalid UTF-8 means binary, too */
    load_fails("duration_ms: \xff", 14,
               "not a valid binary perfetto.protos.TraceConfig (and not text: byte 0xff at offset 13 is not "
               "printable UTF-8)");
}

static void test_printable_binary_fallback(void **state)
{
    (void)state;
    /* "Hi" is not valid text ('Hi' is no field) but is valid wire format:
     * field 9 (file_write_period_ms, varint) = 0x69 */
    Perfetto__Protos__TraceConfig *tc = load_ok("Hi", 2);
    assert_true(tc->has_file_write_period_ms);
    assert_int_equal(tc->file_write_period_ms, 0x69);
    protobuf_c_message_free_unpacked(&tc->base, NULL);

    /* "x1" also decodes, but only as unknown field 15: keep the text error */
    load_fails("x1", 2, "1:1: unknown field 'x1' in perfetto.protos.TraceConfig");
    /* plain text mistakes report the text error */
    load_fails("duration_ms: 5\nbufers {}\n", 25, "2:1: unknown field 'bufers' in perfetto.protos.TraceConfig");
    load_fails("duration_ms: 99999999999", 24,
               "1:14: value 99999999999 out of range for uint32 field 'duration_ms'");
}

static void test_bad_arguments(void **state)
{
    (void)state;
    char err[64];
    ProtobufCMessage *m = (ProtobufCMessage *)1;
    assert_int_equal(tg_config_load(NULL, (const uint8_t *)"", 0, &m, err, sizeof err), -1);
    assert_null(m);
    assert_string_equal(err, "1:1: invalid argument");
    assert_int_equal(tg_config_load(TC_DESC, NULL, 3, &m, NULL, 0), -1);
    assert_int_equal(tg_config_load(TC_DESC, (const uint8_t *)"", 0, NULL, err, sizeof err), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_text),
        cmocka_unit_test(test_binary),
        cmocka_unit_test(test_printable_binary_fallback),
        cmocka_unit_test(test_bad_arguments),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
