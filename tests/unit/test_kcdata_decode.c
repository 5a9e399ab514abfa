/* test_kcdata_decode.c: the KCDATA iterator on hostile and foreign input: every truncation of a
 * valid buffer, lengths past the end, garbage, unbalanced containers, byte-swapped
 * (big-endian) buffers, bad padding claims, malformed described items and type definitions;
 * and what it must accept: unknown types (skipped), trailing bytes, other writers' magics. */
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
#include "tracegate/kcdata_node.h"

static struct kt_raw R; /* the buffer under construction (16 KiB: kept off the stack) */

static void expect_invalid(const uint8_t *buf, size_t len, uint32_t magic, const char *needle)
{
    char err[256] = "";
    int rc = tg_kcdata_validate(buf, len, magic, err, sizeof err);
    if (rc != -1 || !strstr(err, needle)) {
        print_error("expected a refusal containing [%s], got rc %d [%s]\n", needle, rc, err);
        fail();
    }
}

static void expect_valid(const uint8_t *buf, size_t len, uint32_t magic)
{
    char err[256] = "";
    if (tg_kcdata_validate(buf, len, magic, err, sizeof err) != 0) {
        print_error("expected a valid buffer: %s\n", err);
        fail();
    }
}

/* A buffer with one of everything, from the encoder. */
static uint8_t *sample(size_t *len)
{
    static const struct tg_kcdata_field f[] = {{0, TG_KCDATA_ST_UINT32, 0, 1, "x"}};
    struct tg_kcdata_enc e;
    assert_int_equal(tg_kcdata_enc_init(&e, TG_KCDATA_MAGIC), 0);
    tg_kcdata_add_typedef(&e, 0x7300, "t", f, 1);
    tg_kcdata_container_begin(&e, 0x7100, 5);
    tg_kcdata_add_string(&e, "s", "value");
    tg_kcdata_add(&e, 0x7300, "\1\2\3\4", 4);
    tg_kcdata_add_array(&e, 0x7300, 4, 3, "abcdefghijkl");
    tg_kcdata_container_end(&e, 5);
    tg_kcdata_add_binary(&e, "b", "xyz", 3);
    uint8_t *out;
    assert_int_equal(tg_kcdata_finish(&e, &out, len), 0);
    return out;
}

static void test_every_truncation_refused(void **state)
{
    (void)state;
    size_t len;
    uint8_t *buf = sample(&len);
    expect_valid(buf, len, TG_KCDATA_MAGIC);
    for (size_t n = 0; n < len; n++) {
        /* a copy of exactly n bytes, so ASan sees any read past it */
        uint8_t *cut = malloc(n ? n : 1);
        memcpy(cut, buf, n);
        char err[256] = "";
        assert_int_equal(tg_kcdata_validate(cut, n, TG_KCDATA_MAGIC, err, sizeof err), -1);
        assert_true(err[0] != 0);
        if (n >= 16)
            assert_true(strstr(err, "BUFFER_END") || strstr(err, "runs past the end"));
        free(cut);
    }
    free(buf);
}

static void test_lengths_past_the_end(void **state)
{
    (void)state;
    kt_begin(&R, TG_KCDATA_MAGIC);
    kt_hdr(&R, 0x5000, 0xFFFFFFF0u, 0);
    kt_zeros(&R, 16);
    kt_end(&R);
    expect_invalid(R.b, R.n, TG_KCDATA_MAGIC, "item at offset 16 (type 0x5000): size 4294967280 runs past the end "
                                              "of the buffer (32 bytes left)");
    kt_begin(&R, TG_KCDATA_MAGIC);
    kt_hdr(&R, 0x5000, 17, 0);
    kt_zeros(&R, 32);
    kt_end(&R);
    expect_invalid(R.b, R.n, TG_KCDATA_MAGIC, "size 17 is not a multiple of 16");
    /* the begin item's own size */
    kt_begin(&R, TG_KCDATA_MAGIC);
    R.b[4] = 0x40;
    kt_end(&R);
    expect_invalid(R.b, R.n, TG_KCDATA_MAGIC, "begin item: size 64");
    /* a described item whose size covers exactly the rest of the buffer, without BUFFER_END */
    kt_begin(&R, TG_KCDATA_MAGIC);
    kt_desc_u64(&R, "n", 1);
    expect_invalid(R.b, R.n, TG_KCDATA_MAGIC, "without BUFFER_END");
}

static void test_garbage_refused(void **state)
{
    (void)state;
    uint64_t seed = 0x9e3779b97f4a7c15ull;
    uint8_t buf[512];
    int valid = 0;
    for (int round = 0; round < 20000; round++) {
        size_t n = (size_t)(seed % sizeof buf);
        for (size_t i = 0; i < n; i++) {
            seed ^= seed << 13, seed ^= seed >> 7, seed ^= seed << 17;
            buf[i] = (uint8_t)seed;
        }
        /* half the rounds start like a real buffer so the walk gets past the magic */
        if (round % 2 && n >= 16)
            memcpy(buf, "TGKC", 4);
        char err[256] = "";
        uint8_t *copy = malloc(n ? n : 1);
        memcpy(copy, buf, n);
        int rc = tg_kcdata_validate(copy, n, TG_KCDATA_ANY_MAGIC, err, sizeof err);
        assert_true(rc == 0 || (rc == -1 && err[0]));
        valid += rc == 0;
        free(copy);
    }
    assert_true(valid < 100); /* noise is not KCDATA */
}

static void test_unbalanced_containers(void **state)
{
    (void)state;
    /* end id differs from the begin */
    kt_begin(&R, TG_KCDATA_MAGIC);
    kt_hdr(&R, TG_KCDATA_TYPE_CONTAINER_BEGIN, 16, 7);
    kt_u32(&R, 0x7100), kt_zeros(&R, 12);
    kt_hdr(&R, TG_KCDATA_TYPE_CONTAINER_END, 0, 8);
    kt_end(&R);
    expect_invalid(R.b, R.n, TG_KCDATA_MAGIC,
                   "container end at offset 48: id 8 does not match the open container id 7 (type 0x7100)");
    /* nested: the inner end closes the outer id */
    kt_begin(&R, TG_KCDATA_MAGIC);
    kt_hdr(&R, TG_KCDATA_TYPE_CONTAINER_BEGIN, 16, 1);
    kt_u32(&R, 0x7100), kt_zeros(&R, 12);
    kt_hdr(&R, TG_KCDATA_TYPE_CONTAINER_BEGIN, 16, 2);
    kt_u32(&R, 0x7101), kt_zeros(&R, 12);
    kt_hdr(&R, TG_KCDATA_TYPE_CONTAINER_END, 0, 1);
    kt_hdr(&R, TG_KCDATA_TYPE_CONTAINER_END, 0, 2);
    kt_end(&R);
    expect_invalid(R.b, R.n, TG_KCDATA_MAGIC, "id 1 does not match the open container id 2");
    /* end without begin */
    kt_begin(&R, TG_KCDATA_MAGIC);
    kt_hdr(&R, TG_KCDATA_TYPE_CONTAINER_END, 0, 3);
    kt_end(&R);
    expect_invalid(R.b, R.n, TG_KCDATA_MAGIC, "container end at offset 16 (id 3) without a matching begin");
    /* BUFFER_END inside a container */
    kt_begin(&R, TG_KCDATA_MAGIC);
    kt_hdr(&R, TG_KCDATA_TYPE_CONTAINER_BEGIN, 16, 4);
    kt_u32(&R, 0x7100), kt_zeros(&R, 12);
    kt_end(&R);
    expect_invalid(R.b, R.n, TG_KCDATA_MAGIC, "BUFFER_END at offset 48 with container id 4 (type 0x7100) still open");
    /* a begin without its container type */
    kt_begin(&R, TG_KCDATA_MAGIC);
    kt_hdr(&R, TG_KCDATA_TYPE_CONTAINER_BEGIN, 0, 4);
    kt_hdr(&R, TG_KCDATA_TYPE_CONTAINER_END, 0, 4);
    kt_end(&R);
    expect_invalid(R.b, R.n, TG_KCDATA_MAGIC, "no container type");
    /* nesting deeper than the limit */
    kt_begin(&R, TG_KCDATA_MAGIC);
    for (uint64_t d = 0; d <= TG_KCDATA_MAX_DEPTH; d++) {
        kt_hdr(&R, TG_KCDATA_TYPE_CONTAINER_BEGIN, 16, d);
        kt_u32(&R, 0x7100), kt_zeros(&R, 12);
    }
    for (uint64_t d = TG_KCDATA_MAX_DEPTH + 1; d-- > 0;)
        kt_hdr(&R, TG_KCDATA_TYPE_CONTAINER_END, 0, d);
    kt_end(&R);
    expect_invalid(R.b, R.n, TG_KCDATA_MAGIC, "nested deeper than 32");
    /* exactly at the limit is fine */
    kt_begin(&R, TG_KCDATA_MAGIC);
    for (uint64_t d = 0; d < TG_KCDATA_MAX_DEPTH; d++) {
        kt_hdr(&R, TG_KCDATA_TYPE_CONTAINER_BEGIN, 16, d);
        kt_u32(&R, 0x7100), kt_zeros(&R, 12);
    }
    for (uint64_t d = TG_KCDATA_MAX_DEPTH; d-- > 0;)
        kt_hdr(&R, TG_KCDATA_TYPE_CONTAINER_END, 0, d);
    kt_end(&R);
    expect_valid(R.b, R.n, TG_KCDATA_MAGIC);
}

static void test_magics_and_byte_order(void **state)
{
    (void)state;
    size_t len;
    uint8_t *buf = sample(&len);
    expect_valid(buf, len, TG_KCDATA_MAGIC);
    expect_valid(buf, len, TG_KCDATA_KNOWN_MAGIC);
    expect_valid(buf, len, TG_KCDATA_ANY_MAGIC);
    expect_invalid(buf, len, TG_KCDATA_MAGIC_STACKSHOT, "begin magic 0x434B4754 (tracegate) is not the expected "
                                                        "0x59A25807");
    /* a big-endian writer: the magic reads byte-swapped */
    uint8_t save[4];
    memcpy(save, buf, 4);
    for (int i = 0; i < 4; i++)
        buf[i] = save[3 - i];
    expect_invalid(buf, len, TG_KCDATA_MAGIC, "is the byte-swapped tracegate magic 0x434B4754: the buffer was "
                                              "written big-endian");
    expect_invalid(buf, len, TG_KCDATA_ANY_MAGIC, "written big-endian");
    memcpy(buf, "\xDE\xAD\xF1\x57", 4); /* crash info written big-endian */
    expect_invalid(buf, len, TG_KCDATA_KNOWN_MAGIC, "byte-swapped crash info magic 0xDEADF157");
    memcpy(buf, "\x50\x4D\x4F\x43", 4); /* compressed */
    expect_invalid(buf, len, TG_KCDATA_KNOWN_MAGIC, "compressed KCDATA (magic 0x434F4D50) is not supported");
    memcpy(buf, "\x78\x56\x34\x12", 4); /* someone else's magic */
    expect_invalid(buf, len, TG_KCDATA_KNOWN_MAGIC, "not a KCDATA buffer: unknown begin magic 0x12345678");
    expect_valid(buf, len, TG_KCDATA_ANY_MAGIC);
    memcpy(buf, "\x13\x00\x00\x00", 4); /* a reserved type id is no magic */
    expect_invalid(buf, len, TG_KCDATA_ANY_MAGIC, "unknown begin magic 0x00000013");
    expect_invalid(buf, 15, TG_KCDATA_ANY_MAGIC, "15 bytes: too short for a KCDATA begin item");
    expect_invalid(NULL, 0, TG_KCDATA_ANY_MAGIC, "too short");
    free(buf);
}

static void test_bad_padding_claims(void **state)
{
    (void)state;
    /* a plain item claiming 15 padding bytes in a 0-byte item */
    kt_begin(&R, TG_KCDATA_MAGIC);
    kt_hdr(&R, 0x5000, 0, 0x8f);
    kt_end(&R);
    expect_invalid(R.b, R.n, TG_KCDATA_MAGIC, "15 padding bytes claimed in a 0-byte item");
    /* without the HAS_PADDING bit the nibble is not a claim */
    kt_begin(&R, TG_KCDATA_MAGIC);
    kt_hdr(&R, 0x5000, 0, 0x0f);
    kt_end(&R);
    expect_valid(R.b, R.n, TG_KCDATA_MAGIC);
    /* an array whose type nibble claims more padding than its size */
    kt_begin(&R, TG_KCDATA_MAGIC);
    kt_hdr(&R, TG_KCDATA_TYPE_ARRAY_PAD0 + 4, 0, (uint64_t)0x7300 << 32 | 0);
    kt_end(&R);
    expect_invalid(R.b, R.n, TG_KCDATA_MAGIC, "array at offset 16: 4 padding bytes claimed in a 0-byte item");
    /* an array whose padding leaves bytes that do not divide into its count */
    kt_begin(&R, TG_KCDATA_MAGIC);
    kt_hdr(&R, TG_KCDATA_TYPE_ARRAY_PAD0 + 3, 16, (uint64_t)0x7300 << 32 | 4);
    kt_zeros(&R, 16);
    kt_end(&R);
    expect_invalid(R.b, R.n, TG_KCDATA_MAGIC, "13 bytes do not divide into 4 elements");
    kt_begin(&R, TG_KCDATA_MAGIC);
    kt_hdr(&R, TG_KCDATA_TYPE_ARRAY_PAD0, 16, (uint64_t)0x7300 << 32 | 0);
    kt_zeros(&R, 16);
    kt_end(&R);
    expect_invalid(R.b, R.n, TG_KCDATA_MAGIC, "16 bytes do not divide into 0 elements");
    /* a described uint64 whose padding claim cuts into its value */
    kt_begin(&R, TG_KCDATA_MAGIC);
    kt_hdr(&R, TG_KCDATA_TYPE_UINT64_DESC, 48, 0x8f);
    kt_name(&R, "n"), kt_zeros(&R, 16);
    kt_end(&R);
    expect_invalid(R.b, R.n, TG_KCDATA_MAGIC, "item at offset 16 (uint64 'n'): 1 value bytes, needs 8");
    /* a type definition whose padding claim hides its last field */
    static const struct tg_kcdata_field f[] = {{0, TG_KCDATA_ST_UINT32, 0, 1, "x"}};
    struct tg_kcdata_enc e;
    tg_kcdata_enc_init(&e, TG_KCDATA_MAGIC);
    tg_kcdata_add_typedef(&e, 0x7300, "t", f, 1);
    uint8_t *buf;
    size_t len;
    assert_int_equal(tg_kcdata_finish(&e, &buf, &len), 0);
    expect_valid(buf, len, TG_KCDATA_MAGIC);
    assert_int_equal(buf[24], 0x80); /* 80 bytes, no padding */
    buf[24] = 0x8f;                  /* claims 15: 65 bytes left, too few for 1 field */
    expect_invalid(buf, len, TG_KCDATA_MAGIC, "1 fields, room for 0");
    free(buf);
}

static void test_malformed_described(void **state)
{
    (void)state;
    kt_begin(&R, TG_KCDATA_MAGIC);
    kt_hdr(&R, TG_KCDATA_TYPE_UINT32_DESC, 48, 0);
    memset(R.b + R.n, 'A', 32), R.n += 32; /* no NUL in the name */
    kt_zeros(&R, 16);
    kt_end(&R);
    expect_invalid(R.b, R.n, TG_KCDATA_MAGIC, "(uint32 with description): name not NUL-terminated");
    kt_begin(&R, TG_KCDATA_MAGIC);
    kt_hdr(&R, TG_KCDATA_TYPE_STRING_DESC, 48, 0);
    kt_name(&R, "s");
    memset(R.b + R.n, 'x', 16), R.n += 16; /* no NUL in the value */
    kt_end(&R);
    expect_invalid(R.b, R.n, TG_KCDATA_MAGIC, "(string 's'): value not NUL-terminated");
    /* control bytes of a name never reach the message */
    kt_begin(&R, TG_KCDATA_MAGIC);
    kt_hdr(&R, TG_KCDATA_TYPE_STRING_DESC, 48, 0);
    kt_name(&R, "a\033[2Jb");
    memset(R.b + R.n, 'x', 16), R.n += 16;
    kt_end(&R);
    expect_invalid(R.b, R.n, TG_KCDATA_MAGIC, "(string 'a?[2Jb')");
    /* legacy items without padding flags: the value is everything after the name */
    kt_begin(&R, TG_KCDATA_MAGIC);
    kt_hdr(&R, TG_KCDATA_TYPE_UINT64_DESC, 48, 0);
    kt_name(&R, "legacy"), kt_u64(&R, 77), kt_zeros(&R, 8);
    kt_end(&R);
    struct tg_kcdata_iter it;
    struct tg_kcdata_item item;
    char err[256];
    assert_int_equal(tg_kcdata_iter_init(&it, R.b, R.n, TG_KCDATA_MAGIC, err, sizeof err), 0);
    assert_int_equal(tg_kcdata_iter_next(&it, &item, err, sizeof err), 1);
    assert_int_equal(item.u.desc.u, 77);
    assert_int_equal(item.u.desc.value_len, 16);
    /* type 0 is never valid */
    kt_begin(&R, TG_KCDATA_MAGIC);
    kt_hdr(&R, 0, 0, 0);
    kt_end(&R);
    expect_invalid(R.b, R.n, TG_KCDATA_MAGIC, "item at offset 16 has the invalid type 0");
}

/* One type definition item with a single field, written by hand. */
static void raw_typedef(uint32_t type_id, uint32_t nfields, uint8_t flags, uint8_t et, uint16_t off, uint32_t size,
                        const char *fname)
{
    kt_begin(&R, TG_KCDATA_MAGIC);
    kt_hdr(&R, TG_KCDATA_TYPE_TYPEDEF, 80, 0x80);
    kt_u32(&R, type_id), kt_u32(&R, nfields), kt_name(&R, "t");
    kt_u8(&R, flags), kt_u8(&R, et), kt_u16(&R, off), kt_u32(&R, size), kt_name(&R, fname);
    kt_end(&R);
}

static void test_malformed_typedefs(void **state)
{
    (void)state;
    raw_typedef(0x7300, 1, 0, TG_KCDATA_ST_UINT32, 0, 4, "x");
    expect_valid(R.b, R.n, TG_KCDATA_MAGIC);
    raw_typedef(0x7300, 0, 0, TG_KCDATA_ST_UINT32, 0, 4, "x");
    expect_invalid(R.b, R.n, TG_KCDATA_MAGIC, "type definition 0x7300 (t) at offset 16: 0 fields, room for 1");
    raw_typedef(0x7300, 2, 0, TG_KCDATA_ST_UINT32, 0, 4, "x");
    expect_invalid(R.b, R.n, TG_KCDATA_MAGIC, "2 fields, room for 1");
    raw_typedef(0x7300, 0xFFFFFFFFu, 0, TG_KCDATA_ST_UINT32, 0, 4, "x");
    expect_invalid(R.b, R.n, TG_KCDATA_MAGIC, "4294967295 fields, more than 256");
    /* 257 fields that all fit are still too many (each printed record would repeat them all) */
    kt_begin(&R, TG_KCDATA_MAGIC);
    kt_hdr(&R, TG_KCDATA_TYPE_TYPEDEF, 40 + 257 * 40, 0x80);
    kt_u32(&R, 0x7300), kt_u32(&R, 257), kt_name(&R, "wide");
    for (int i = 0; i < 257; i++)
        kt_u8(&R, 0), kt_u8(&R, TG_KCDATA_ST_UINT8), kt_u16(&R, (uint16_t)i), kt_u32(&R, 1), kt_name(&R, "f");
    kt_end(&R);
    expect_invalid(R.b, R.n, TG_KCDATA_MAGIC, "type definition 0x7300 (wide) at offset 16: 257 fields, more than 256");
    R.b[16 + 16 + 4] = 0; /* say 256: the extra descriptor is then only padding-like slack */
    R.b[16 + 16 + 5] = 1;
    expect_valid(R.b, R.n, TG_KCDATA_MAGIC);
    raw_typedef(0x7300, 1, 0, 0, 0, 4, "x");
    expect_invalid(R.b, R.n, TG_KCDATA_MAGIC, "field 0: unknown element type");
    raw_typedef(0x7300, 1, 0, 12, 0, 4, "x");
    expect_invalid(R.b, R.n, TG_KCDATA_MAGIC, "field 0: unknown element type");
    raw_typedef(0x7300, 1, 0, TG_KCDATA_ST_UINT32, 0, 8, "x");
    expect_invalid(R.b, R.n, TG_KCDATA_MAGIC, "field 0: scalar size does not match its element type");
    raw_typedef(0x7300, 1, TG_KCDATA_FIELD_ARRAY, TG_KCDATA_ST_UINT32, 0, 3u << 16 | 8, "x");
    expect_invalid(R.b, R.n, TG_KCDATA_MAGIC, "field 0: array element size does not match");
    raw_typedef(0x7300, 1, TG_KCDATA_FIELD_ARRAY, TG_KCDATA_ST_UINT32, 0, 4, "x");
    expect_invalid(R.b, R.n, TG_KCDATA_MAGIC, "field 0: array field with count 0");
    raw_typedef(0x7300, 1, 0, TG_KCDATA_ST_UINT32, 0, 4, "");
    expect_invalid(R.b, R.n, TG_KCDATA_MAGIC, "field 0: empty name");
    /* fields sharing bytes: never in a packed struct, and a way to multiply printer output */
    kt_begin(&R, TG_KCDATA_MAGIC);
    kt_hdr(&R, TG_KCDATA_TYPE_TYPEDEF, 160, 0x80);
    kt_u32(&R, 0x7300), kt_u32(&R, 3), kt_name(&R, "t");
    kt_u8(&R, 0), kt_u8(&R, TG_KCDATA_ST_UINT64), kt_u16(&R, 8), kt_u32(&R, 8), kt_name(&R, "a");
    kt_u8(&R, 0), kt_u8(&R, TG_KCDATA_ST_UINT64), kt_u16(&R, 0), kt_u32(&R, 8), kt_name(&R, "b");
    kt_u8(&R, 1), kt_u8(&R, TG_KCDATA_ST_CHAR), kt_u16(&R, 15), kt_u32(&R, 4u << 16 | 1), kt_name(&R, "c");
    kt_end(&R);
    expect_invalid(R.b, R.n, TG_KCDATA_MAGIC, "type definition 0x7300 (t) at offset 16: fields 0 (a) and 2 (c) overlap");
    R.b[R.n - 16 - 40 + 2] = 16; /* c at 16: adjacent, fine */
    expect_valid(R.b, R.n, TG_KCDATA_MAGIC);
    raw_typedef(0x36, 1, 0, TG_KCDATA_ST_UINT32, 0, 4, "x");
    expect_invalid(R.b, R.n, TG_KCDATA_MAGIC, "type id 0x36 is reserved");
    /* largest offset and array: the extent is computed without overflow */
    raw_typedef(0x7300, 1, TG_KCDATA_FIELD_ARRAY, TG_KCDATA_ST_UINT64, 0xFFFF, 0xFFFFu << 16 | 8, "x");
    struct tg_kcdata_iter it;
    struct tg_kcdata_item item;
    char err[256];
    assert_int_equal(tg_kcdata_iter_init(&it, R.b, R.n, TG_KCDATA_MAGIC, err, sizeof err), 0);
    assert_int_equal(tg_kcdata_iter_next(&it, &item, err, sizeof err), 1);
    assert_int_equal(item.u.td.extent, 0xFFFF + 0xFFFF * 8);

    /* the same definition twice is fine; a different one for the same id is not */
    static const struct tg_kcdata_field f1[] = {{0, TG_KCDATA_ST_UINT32, 0, 1, "x"}};
    static const struct tg_kcdata_field f2[] = {{0, TG_KCDATA_ST_UINT64, 0, 1, "x"}};
    struct tg_kcdata_enc e;
    uint8_t *buf;
    size_t len;
    tg_kcdata_enc_init(&e, TG_KCDATA_MAGIC);
    tg_kcdata_add_typedef(&e, 0x7300, "t", f1, 1);
    tg_kcdata_add_typedef(&e, 0x7300, "t", f1, 1);
    assert_int_equal(tg_kcdata_finish(&e, &buf, &len), 0);
    expect_valid(buf, len, TG_KCDATA_MAGIC);
    free(buf);
    tg_kcdata_enc_init(&e, TG_KCDATA_MAGIC);
    tg_kcdata_add_typedef(&e, 0x7300, "t", f1, 1);
    tg_kcdata_add_typedef(&e, 0x7301, "t", f2, 1);
    assert_int_equal(tg_kcdata_finish(&e, &buf, &len), 0);
    buf[112 + 16] = 0x00; /* the second definition's id 0x7301 -> 0x7300 */
    expect_invalid(buf, len, TG_KCDATA_MAGIC, "type definition 0x7300 (t) at offset 112 redefines the type");
    free(buf);

    /* a bounded table of definitions */
    tg_kcdata_enc_init(&e, TG_KCDATA_MAGIC);
    for (uint32_t i = 0; i < TG_KCDATA_MAX_TYPEDEFS; i++)
        tg_kcdata_add_typedef(&e, 0x10000 + i, "t", f1, 1);
    assert_int_equal(tg_kcdata_finish(&e, &buf, &len), 0);
    expect_valid(buf, len, TG_KCDATA_MAGIC);
    free(buf);
    /* the 257th, written by hand after the encoder's 256 */
    tg_kcdata_enc_init(&e, TG_KCDATA_MAGIC);
    for (uint32_t i = 0; i < TG_KCDATA_MAX_TYPEDEFS; i++)
        tg_kcdata_add_typedef(&e, 0x10000 + i, "t", f1, 1);
    assert_int_equal(tg_kcdata_finish(&e, &buf, &len), 0);
    uint8_t *more = malloc(len + 96);
    memcpy(more, buf, len - 16);
    memcpy(more + len - 16, buf + 16, 96); /* the first definition again ... */
    more[len - 16 + 18] = 0x02;            /* ... as type 0x20000 */
    memcpy(more + len + 80, buf + len - 16, 16);
    expect_invalid(more, len + 96, TG_KCDATA_MAGIC, "more than 256 type definitions");
    free(more);
    free(buf);
}

static void test_unknown_types_skipped(void **state)
{
    (void)state;
    /* a writer's own types, an obsolete array and unused reserved ids, between known items */
    kt_begin(&R, TG_KCDATA_MAGIC_STACKSHOT);
    kt_desc_u64(&R, "first", 1);
    kt_hdr(&R, 0x905, 32, 0);
    memset(R.b + R.n, 0xAB, 32), R.n += 32;
    kt_hdr(&R, TG_KCDATA_TYPE_ARRAY_OBSOLETE, 16, 0);
    kt_zeros(&R, 16);
    kt_hdr(&R, 0x7ff, 0, 0);
    kt_hdr(&R, 0xFFFFFFFFu, 16, 0x12345678);
    kt_zeros(&R, 16);
    kt_desc_u64(&R, "last", 2);
    kt_end(&R);
    kt_zeros(&R, 40); /* a caller's buffer is often longer than the data */

    struct tg_kcdata_iter it;
    struct tg_kcdata_item item;
    char err[256];
    assert_int_equal(tg_kcdata_iter_init(&it, R.b, R.n, TG_KCDATA_KNOWN_MAGIC, err, sizeof err), 0);
    assert_int_equal(tg_kcdata_iter_next(&it, &item, err, sizeof err), 1);
    assert_string_equal(item.u.desc.name, "first");
    static const uint32_t skipped[] = {0x905, TG_KCDATA_TYPE_ARRAY_OBSOLETE, 0x7ff, 0xFFFFFFFFu};
    for (size_t i = 0; i < 4; i++) {
        assert_int_equal(tg_kcdata_iter_next(&it, &item, err, sizeof err), 1);
        assert_int_equal(item.kind, TG_KCDATA_KIND_DATA);
        assert_int_equal(item.type, skipped[i]);
        assert_null(item.u.data.td);
    }
    assert_int_equal(tg_kcdata_iter_next(&it, &item, err, sizeof err), 1);
    assert_string_equal(item.u.desc.name, "last");
    assert_int_equal(item.u.desc.u, 2);
    assert_int_equal(tg_kcdata_iter_next(&it, &item, err, sizeof err), 0);
    assert_int_equal(tg_kcdata_iter_next(&it, &item, err, sizeof err), 0); /* stays at the end */
    assert_int_equal(tg_kcdata_iter_end_offset(&it), R.n - 40);
}

static void test_failed_iterator_stays_failed(void **state)
{
    (void)state;
    kt_begin(&R, TG_KCDATA_MAGIC);
    kt_hdr(&R, 0x5000, 17, 0);
    kt_end(&R);
    struct tg_kcdata_iter it;
    struct tg_kcdata_item item;
    char err[256];
    assert_int_equal(tg_kcdata_iter_init(&it, R.b, R.n, TG_KCDATA_MAGIC, err, sizeof err), 0);
    assert_int_equal(tg_kcdata_iter_next(&it, &item, err, sizeof err), -1);
    assert_int_equal(tg_kcdata_iter_next(&it, &item, err, sizeof err), -1);
    assert_string_equal(err, "KCDATA iterator already failed");
    assert_int_equal(tg_kcdata_iter_end_offset(&it), 0);
    /* next on an iterator whose init failed */
    assert_int_equal(tg_kcdata_iter_init(&it, R.b, 3, TG_KCDATA_MAGIC, err, sizeof err), -1);
    assert_int_equal(tg_kcdata_iter_next(&it, &item, NULL, 0), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_truncation_refused),
        cmocka_unit_test(test_lengths_past_the_end),
        cmocka_unit_test(test_garbage_refused),
        cmocka_unit_test(test_unbalanced_containers),
        cmocka_unit_test(test_magics_and_byte_order),
        cmocka_unit_test(test_bad_padding_claims),
        cmocka_unit_test(test_malformed_described),
        cmocka_unit_test(test_malformed_typedefs),
        cmocka_unit_test(test_unknown_types_skipped),
        cmocka_unit_test(test_failed_iterator_stays_failed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
