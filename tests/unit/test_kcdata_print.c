/* test_kcdata_print.c: the KCDATA text and JSON printers: exact output for a buffer with every
 * item kind, types the printer was never built to know shown through their definitions,
 * escaping of hostile names, nested buffers, offsets, and partial output plus the error for
 * malformed input. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "kcdata_test_util.h"
#include "tracegate/kcdata.h"
#include "tracegate/kcdata_stats.h"

static void assert_text(const char *got, const char *want)
{
    if (strcmp(got, want) != 0) {
        size_t i = 0;
        while (got[i] && got[i] == want[i])
            i++;
        print_error("printer output differs at byte %zu.\n---- got:\n%s---- want:\n%s----\n", i, got, want);
        fail();
    }
}

static void assert_contains(const char *hay, const char *needle)
{
    if (!strstr(hay, needle)) {
        print_error("expected [%s] in:\n%s\n", needle, hay);
        fail();
    }
}

/* A type this printer knows nothing about: struct { uint32 id; char label[8]; int16 deltas[2]; } */
static const struct tg_kcdata_field k_sample[] = {
    {0, TG_KCDATA_ST_UINT32, 0, 1, "id"},
    {TG_KCDATA_FIELD_ARRAY, TG_KCDATA_ST_CHAR, 4, 8, "label"},
    {TG_KCDATA_FIELD_ARRAY, TG_KCDATA_ST_INT16, 12, 2, "deltas"},
};

static void sample_rec(uint8_t rec[16], uint32_t id, const char *label, int16_t d0, int16_t d1)
{
    memset(rec, 0, 16);
    rec[0] = (uint8_t)id;
    memcpy(rec + 4, label, strlen(label));
    rec[12] = (uint8_t)d0, rec[13] = (uint8_t)((uint16_t)d0 >> 8);
    rec[14] = (uint8_t)d1, rec[15] = (uint8_t)((uint16_t)d1 >> 8);
}

static uint8_t *every_kind(size_t *len)
{
    uint8_t rec[16], two[32];
    struct tg_kcdata_enc e;
    assert_int_equal(tg_kcdata_enc_init(&e, TG_KCDATA_MAGIC), 0);
    tg_kcdata_add_typedef(&e, 0x7300, "sample", k_sample, 3);
    tg_kcdata_container_begin(&e, 0x7100, 3);
    tg_kcdata_add_u64(&e, "NUM MACH PORTS", 1234);
    sample_rec(rec, 7, "ab", -1, 2);
    tg_kcdata_add(&e, 0x7300, rec, sizeof rec);
    sample_rec(two, 1, "first", 10, 20);
    sample_rec(two + 16, 2, "12345678", 0, -30);
    tg_kcdata_add_array(&e, 0x7300, 16, 2, two);
    tg_kcdata_container_begin(&e, 0x7101, 4);
    tg_kcdata_add_string(&e, "s", "q\"x\n");
    tg_kcdata_container_end(&e, 4);
    tg_kcdata_container_end(&e, 3);
    tg_kcdata_add(&e, 0x5000, "opaque bytes 0123456", 20);
    tg_kcdata_add_i32(&e, "neg", -3);
    int32_t pid = 42;
    tg_kcdata_add(&e, TG_KCDATA_TYPE_PID, &pid, sizeof pid);
    tg_kcdata_add_binary(&e, "b", "\x01\x02\xff", 3);
    tg_kcdata_add_array(&e, 0x6000, 2, 2, "\xaa\xbb\xcc\xdd");
    uint8_t *out;
    assert_int_equal(tg_kcdata_finish(&e, &out, len), 0);
    return out;
}

static void test_text_every_kind(void **state)
{
    (void)state;
    size_t len;
    uint8_t *buf = every_kind(&len);
    int rc;
    char err[256];
    char *text = kt_print(buf, len, 0, &rc, err, sizeof err);
    assert_int_equal(rc, 0);
    assert_text(text, "KCDATA tracegate (magic 0x434B4754), 752 bytes\n"
                      "typedef 0x7300 sample (3 fields, 16 bytes) {\n"
                      "  uint32 id @0\n"
                      "  char label[8] @4\n"
                      "  int16 deltas[2] @12\n"
                      "}\n"
                      "container 0x7100 id 3 {\n"
                      "  uint64 NUM MACH PORTS = 1234 (0x4d2)\n"
                      "  sample (0x7300) {\n"
                      "    uint32 id = 7\n"
                      "    char label[8] = \"ab\"\n"
                      "    int16 deltas[2] = [-1, 2]\n"
                      "  }\n"
                      "  array of 2 sample (0x7300), 16 bytes each [\n"
                      "    [0] { id = 1, label = \"first\", deltas = [10, 20] }\n"
                      "    [1] { id = 2, label = \"12345678\", deltas = [0, -30] }\n"
                      "  ]\n"
                      "  container 0x7101 id 4 {\n"
                      "    string s = \"q\\\"x\\n\"\n"
                      "  }\n"
                      "}\n"
                      "type 0x5000 (no definition), 20 bytes, flags 0x8c\n"
                      "  0000  6f 70 61 71 75 65 20 62 79 74 65 73 20 30 31 32  |opaque bytes 012|\n"
                      "  0010  33 34 35 36                                      |3456|\n"
                      "int32 neg = -3\n"
                      "pid = 42\n"
                      "binary b = 3 bytes { 01 02 ff }\n"
                      "array of 2 type 0x6000 (no definition), 2 bytes each [\n"
                      "  [0] aa bb\n"
                      "  [1] cc dd\n"
                      "]\n"
                      "end at offset 736\n");
    free(text);

    /* offsets in front of each item */
    text = kt_print(buf, len, TG_KCDATA_PRINT_OFFSETS, &rc, err, sizeof err);
    assert_int_equal(rc, 0);
    assert_contains(text, "\n00000010  typedef 0x7300 sample");
    assert_contains(text, "\n            uint32 id @0\n");
    assert_contains(text, "\n000000e0    uint64 NUM MACH PORTS = 1234");
    free(text);
    /* hex of decoded items too */
    text = kt_print(buf, len, TG_KCDATA_PRINT_HEX, &rc, err, sizeof err);
    assert_int_equal(rc, 0);
    assert_contains(text, "  uint64 NUM MACH PORTS = 1234 (0x4d2)\n"
                          "    0000  4e 55 4d 20 4d 41 43 48 20 50 4f 52 54 53 00 00  |NUM MACH PORTS..|\n");
    free(text);
    free(buf);
}

static void test_json_every_kind(void **state)
{
    (void)state;
    size_t len;
    uint8_t *buf = every_kind(&len);
    int rc;
    char err[256];
    char *text = kt_print_json(buf, len, &rc, err, sizeof err);
    assert_int_equal(rc, 0);
    assert_text(text,
                "{\"magic\":1129006932,\"magic_name\":\"tracegate\",\"items\":["
                "{\"typedef\":{\"type\":29440,\"name\":\"sample\",\"size\":16,\"fields\":["
                "{\"name\":\"id\",\"type\":\"uint32\",\"offset\":0,\"count\":1,\"flags\":0},"
                "{\"name\":\"label\",\"type\":\"char\",\"offset\":4,\"count\":8,\"flags\":1},"
                "{\"name\":\"deltas\",\"type\":\"int16\",\"offset\":12,\"count\":2,\"flags\":1}]}},"
                "{\"container\":{\"type\":28928,\"id\":3,\"items\":["
                "{\"desc\":\"uint64\",\"name\":\"NUM MACH PORTS\",\"value\":1234},"
                "{\"type\":29440,\"type_name\":\"sample\",\"value\":{\"id\":7,\"label\":\"ab\",\"deltas\":[-1,2]}},"
                "{\"array\":{\"elem_type\":29440,\"type_name\":\"sample\",\"elem_size\":16,\"elements\":["
                "{\"id\":1,\"label\":\"first\",\"deltas\":[10,20]},{\"id\":2,\"label\":\"12345678\",\"deltas\":[0,-30]}]}},"
                "{\"container\":{\"type\":28929,\"id\":4,\"items\":["
                "{\"desc\":\"string\",\"name\":\"s\",\"value\":\"q\\\"x\\u000a\"}]}}]}},"
                "{\"type\":20480,\"hex\":\"6f70617175652062797465732030313233343536\"},"
                "{\"desc\":\"int32\",\"name\":\"neg\",\"value\":-3},"
                "{\"type\":54,\"type_name\":\"pid\",\"hex\":\"2a000000\"},"
                "{\"desc\":\"binary\",\"name\":\"b\",\"value\":\"0102ff\"},"
                "{\"array\":{\"elem_type\":24576,\"elem_size\":2,\"elements\":[\"aabb\",\"ccdd\"]}}]}\n");
    free(text);

    /* malformed: what was read, then the error, still one JSON object */
    memset(buf + len - 16, 0, 4); /* BUFFER_END becomes type 0 */
    text = kt_print_json(buf, len, &rc, err, sizeof err);
    assert_int_equal(rc, -1);
    assert_contains(text, "{\"array\":{\"elem_type\":24576,\"elem_size\":2,\"elements\":[\"aabb\",\"ccdd\"]}}],"
                          "\"error\":\"item at offset 736 has the invalid type 0\"}\n");
    free(text);
    /* malformed inside a container: the open containers are closed */
    uint8_t *b2 = every_kind(&len);
    b2[0x1d8] ^= 1; /* the inner container's end id: 4 -> 5 */
    text = kt_print_json(b2, len, &rc, err, sizeof err);
    assert_int_equal(rc, -1);
    assert_contains(text, "\"value\":\"q\\\"x\\u000a\"}]}}]}}],\"error\":\"container end at offset 464: id 5 "
                          "does not match the open container id 4 (type 0x7101)\"}\n");
    free(text);
    text = kt_print_json(b2, 7, &rc, err, sizeof err);
    assert_int_equal(rc, -1);
    assert_text(text, "{\"error\":\"7 bytes: too short for a KCDATA begin item (16 bytes)\"}\n");
    free(text);
    free(b2);
    free(buf);
}

/* A type definition this printer never saw, from a "newer writer", plus defined items that
 * are shorter or longer than the definition. */
static void test_unknown_types_through_definitions(void **state)
{
    (void)state;
    static const struct tg_kcdata_field f[] = {
        {0, TG_KCDATA_ST_UINT64, 0, 1, "boot_count"},
        {0, TG_KCDATA_ST_INT32, 8, 1, "tz_offset_min"},
    };
    static const struct tg_kcdata_field one[] = {{0, TG_KCDATA_ST_UINT16, 0, 1, "port"}};
    static const struct tg_kcdata_field one_struct[] = {{TG_KCDATA_FIELD_STRUCT, TG_KCDATA_ST_UINT16, 0, 1, "port"}};
    uint8_t rec[16] = {9, 0, 0, 0, 0, 0, 0, 0, 0xc4, 0xff, 0xff, 0xff, 0xde, 0xad, 0xbe, 0xef};
    struct tg_kcdata_enc e;
    assert_int_equal(tg_kcdata_enc_init(&e, TG_KCDATA_MAGIC), 0);
    tg_kcdata_add_typedef(&e, 0x7450, "tg_node_extra_v2", f, 2);
    tg_kcdata_add_typedef(&e, 0x7451, "listen_port", one, 1);
    tg_kcdata_add_typedef(&e, 0x7452, "listen_port_s", one_struct, 1);
    tg_kcdata_add(&e, 0x7450, rec, 12);        /* exact */
    tg_kcdata_add(&e, 0x7450, rec, 10);        /* older, shorter writer: tz_offset_min missing */
    tg_kcdata_add(&e, 0x7450, rec, sizeof rec); /* longer than the definition */
    tg_kcdata_add(&e, 0x7451, "\x50\x1f", 2);
    tg_kcdata_add(&e, 0x7452, "\x50\x1f", 2);
    uint8_t *buf;
    size_t len;
    assert_int_equal(tg_kcdata_finish(&e, &buf, &len), 0);
    int rc;
    char err[256];
    char *text = kt_print(buf, len, 0, &rc, err, sizeof err);
    assert_int_equal(rc, 0);
    assert_contains(text, "tg_node_extra_v2 (0x7450) {\n"
                          "  uint64 boot_count = 9\n"
                          "  int32 tz_offset_min = -60\n"
                          "}\n"
                          "tg_node_extra_v2 (0x7450) {\n"
                          "  uint64 boot_count = 9\n"
                          "  (1 field beyond the item's 10 bytes)\n"
                          "}\n"
                          "tg_node_extra_v2 (0x7450) {\n"
                          "  uint64 boot_count = 9\n"
                          "  int32 tz_offset_min = -60\n"
                          "}\n"
                          "  (4 bytes beyond the definition)\n"
                          "  0000  de ad be ef                                      |....|\n"
                          "listen_port (0x7451) = 8016 (0x1f50)\n"
                          "listen_port_s (0x7452) {\n"
                          "  uint16 port = 8016 (0x1f50)\n"
                          "}\n");
    free(text);
    free(buf);
}

static void test_hostile_names_escaped(void **state)
{
    (void)state;
    static struct kt_raw r;
    kt_begin(&r, TG_KCDATA_MAGIC);
    kt_hdr(&r, TG_KCDATA_TYPE_STRING_DESC, 48, 0x80 | 7);
    kt_name(&r, "evil\033]0;title\007");
    kt_bytes(&r, "\033[2J\r\x80", 6);
    kt_zeros(&r, 10); /* 48 bytes: 41 of data (name, value, NUL) and 7 of padding */
    /* a definition with a control byte in its type and field names */
    kt_hdr(&r, TG_KCDATA_TYPE_TYPEDEF, 80, 0x80);
    kt_u32(&r, 0x7300), kt_u32(&r, 1), kt_name(&r, "t\nx");
    kt_u8(&r, 0), kt_u8(&r, TG_KCDATA_ST_UINT8), kt_u16(&r, 0), kt_u32(&r, 1), kt_name(&r, "f\033");
    kt_end(&r);
    int rc;
    char err[256];
    char *text = kt_print(r.b, r.n, 0, &rc, err, sizeof err);
    assert_int_equal(rc, 0);
    assert_contains(text, "string \"evil\\x1b]0;title\\x07\" = \"\\x1b[2J\\x0d\\x80\"\n");
    assert_contains(text, "typedef 0x7300 \"t\\nx\" (1 field, 1 bytes) {\n  uint8 \"f\\x1b\" @0\n");
    for (const char *p = text; *p; p++)
        assert_true(*p == '\n' || (*p >= 0x20 && *p < 0x7f));
    free(text);
    text = kt_print_json(r.b, r.n, &rc, err, sizeof err);
    assert_int_equal(rc, 0);
    assert_contains(text, "\"name\":\"evil\\u001b]0;title\\u0007\",\"value\":\"\\u001b[2J\\u000d\\u0080\"");
    for (const char *p = text; *p; p++)
        assert_true(*p == '\n' || (*p >= 0x20 && *p < 0x7f));
    free(text);
}

static void test_nested_and_foreign(void **state)
{
    (void)state;
    struct tg_kcdata_stat st[] = {{"frames_in", 5}};
    uint8_t *inner;
    size_t inner_len;
    char err[256];
    assert_int_equal(tg_kcdata_stats_encode(st, 1, &inner, &inner_len, err, sizeof err), 0);
    struct tg_kcdata_enc e;
    assert_int_equal(tg_kcdata_enc_init(&e, TG_KCDATA_MAGIC_CRASHINFO), 0);
    tg_kcdata_add_u32(&e, "PID", 156);
    tg_kcdata_add(&e, TG_KCDATA_TYPE_NESTED_KCDATA, inner, inner_len);
    tg_kcdata_add(&e, TG_KCDATA_TYPE_PROCNAME, "tracegated", 11);
    tg_kcdata_add(&e, TG_KCDATA_TYPE_TIMEBASE, "\x01\x00\x00\x00\x03\x00\x00\x00", 8);
    memcpy(inner, "CKGT", 4); /* a nested buffer written big-endian: printed as an error, the outer goes on */
    tg_kcdata_add(&e, TG_KCDATA_TYPE_NESTED_KCDATA, inner, inner_len);
    uint8_t *buf;
    size_t len;
    assert_int_equal(tg_kcdata_finish(&e, &buf, &len), 0);
    int rc;
    char *text = kt_print(buf, len, 0, &rc, err, sizeof err);
    assert_int_equal(rc, 0);
    assert_text(text, "KCDATA crash info (magic 0xDEADF157), 480 bytes\n"
                      "uint32 PID = 156 (0x9c)\n"
                      "nested_kcdata, 144 bytes {\n"
                      "  KCDATA tracegate (magic 0x434B4754), 144 bytes\n"
                      "  container 0x7410 (tg_stats) id 1 {\n"
                      "    uint64 frames_in = 5\n"
                      "  }\n"
                      "  end at offset 128\n"
                      "}\n"
                      "procname = \"tracegated\"\n"
                      "timebase numer = 1, denom = 3\n"
                      "nested_kcdata, 144 bytes {\n"
                      "  error: begin magic 0x54474B43 is the byte-swapped tracegate magic 0x434B4754: the buffer "
                      "was written big-endian, and only little-endian KCDATA is read\n"
                      "}\n"
                      "end at offset 464\n");
    free(text);
    free(buf);
    /* tracegate's container names belong to tracegate's magic: another writer's 0x7410 is just a number */
    assert_int_equal(tg_kcdata_enc_init(&e, TG_KCDATA_MAGIC_STACKSHOT), 0);
    tg_kcdata_stats_add(&e, 1, st, 1);
    assert_int_equal(tg_kcdata_finish(&e, &buf, &len), 0);
    text = kt_print(buf, len, 0, &rc, err, sizeof err);
    assert_int_equal(rc, 0);
    assert_contains(text, "\ncontainer 0x7410 id 1 {\n");
    free(text);
    free(buf);
    free(inner);
}

static void test_partial_output_and_error(void **state)
{
    (void)state;
    size_t len;
    uint8_t *buf = every_kind(&len);
    buf[0x1d8] ^= 1; /* the inner container's end id: 4 -> 5 */
    int rc;
    char err[256] = "";
    char *text = kt_print(buf, len, 0, &rc, err, sizeof err);
    assert_int_equal(rc, -1);
    assert_true(err[0] != 0);
    assert_contains(text, "    string s = \"q\\\"x\\n\"\n");
    assert_string_equal(err, "container end at offset 464: id 5 does not match the open container id 4 (type 0x7101)");
    assert_contains(text, "    string s = \"q\\\"x\\n\"\n"
                          "error: container end at offset 464: id 5 does not match the open container id 4 (type "
                          "0x7101)\n");
    assert_null(strstr(text, "\nend at offset"));
    free(text);
    /* no buffer at all */
    text = kt_print((const uint8_t *)"", 0, 0, &rc, NULL, 0);
    assert_int_equal(rc, -1);
    assert_text(text, "error: 0 bytes: too short for a KCDATA begin item (16 bytes)\n");
    free(text);
    /* trailing bytes after BUFFER_END are reported, not an error */
    uint8_t *longer = calloc(1, len + 32);
    free(buf);
    buf = every_kind(&len);
    memcpy(longer, buf, len);
    text = kt_print(longer, len + 32, 0, &rc, err, sizeof err);
    assert_int_equal(rc, 0);
    assert_contains(text, "end at offset 736 (32 bytes after it ignored)\n");
    free(text);
    free(longer);
    free(buf);
}

/* A wide type (256 fields) used by many short records: the printers summarise the fields beyond
 * each record instead of printing all 256 for every byte of input. */
static void test_output_does_not_multiply(void **state)
{
    (void)state;
    static struct tg_kcdata_field wide[TG_KCDATA_MAX_FIELDS];
    static char names[TG_KCDATA_MAX_FIELDS][32];
    for (size_t i = 0; i < TG_KCDATA_MAX_FIELDS; i++) {
        snprintf(names[i], sizeof names[i], "field_with_a_long_name_%06zu", i);
        wide[i] = (struct tg_kcdata_field){0, TG_KCDATA_ST_UINT8, (uint16_t)i, 1, names[i]};
    }
    static uint8_t ones[60000];
    memset(ones, 7, sizeof ones);
    struct tg_kcdata_enc e;
    assert_int_equal(tg_kcdata_enc_init(&e, TG_KCDATA_MAGIC), 0);
    assert_int_equal(tg_kcdata_add_typedef(&e, 0x7300, "wide", wide, TG_KCDATA_MAX_FIELDS), 0);
    for (int i = 0; i < 500; i++)
        tg_kcdata_add(&e, 0x7300, ones, 1);
    tg_kcdata_add_array(&e, 0x7300, 1, sizeof ones, ones);
    uint8_t *buf;
    size_t len;
    assert_int_equal(tg_kcdata_finish(&e, &buf, &len), 0);
    int rc;
    char err[256];
    char *text = kt_print(buf, len, 0, &rc, err, sizeof err);
    assert_int_equal(rc, 0);
    assert_contains(text, "wide (0x7300) {\n  uint8 field_with_a_long_name_000000 = 7\n"
                          "  (255 fields beyond the item's 1 bytes)\n}\n");
    assert_contains(text, "  [59999] { field_with_a_long_name_000000 = 7, +255 beyond the item }\n");
    size_t text_len = strlen(text);
    free(text);
    text = kt_print_json(buf, len, &rc, err, sizeof err);
    assert_int_equal(rc, 0);
    assert_contains(text, "{\"field_with_a_long_name_000000\":7}]}}]}");
    size_t json_len = strlen(text);
    free(text);
    print_message("input %zu bytes: text %zu bytes (%.1fx), JSON %zu bytes (%.1fx)\n", len, text_len,
                  (double)text_len / (double)len, json_len, (double)json_len / (double)len);
    /* one line per 1-byte element is inherent (about 70 bytes each); 256 fields each would be 11000x */
    assert_true(text_len < 100 * len);
    assert_true(json_len < 100 * len);
    free(buf);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_text_every_kind),
        cmocka_unit_test(test_json_every_kind),
        cmocka_unit_test(test_unknown_types_through_definitions),
        cmocka_unit_test(test_hostile_names_escaped),
        cmocka_unit_test(test_nested_and_foreign),
        cmocka_unit_test(test_partial_output_and_error),
        cmocka_unit_test(test_output_does_not_multiply),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
