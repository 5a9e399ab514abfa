/* test_kcdata_encode.c: the KCDATA encoder: the seed's example buffers byte for byte (as the
 * documented layout writes them), round trips of every item kind through the iterator,
 * padding recorded as the format says, and the encoder's refusals (long names, structural
 * types, bad magics, unbalanced containers, a full caller buffer). */
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

static uint8_t *finish_ok(struct tg_kcdata_enc *e, size_t *len)
{
    uint8_t *out = NULL;
    if (tg_kcdata_finish(e, &out, len) != 0) {
        print_error("finish failed: %s\n", tg_kcdata_enc_error(e));
        fail();
    }
    return out;
}

static void assert_bytes(const uint8_t *got, size_t got_len, const uint8_t *want, size_t want_len)
{
    if (got_len != want_len || memcmp(got, want, want_len) != 0) {
        size_t n = got_len < want_len ? got_len : want_len, i = 0;
        while (i < n && got[i] == want[i])
            i++;
        print_error("buffers differ at byte 0x%zx (got %zu bytes, want %zu)\n", i, got_len, want_len);
        fail();
    }
}

/* ---- the seed's "generic data with description" example ---- */

/* The seed (shared/seeds/004_..., the libkdd README) shows this dump for two uint32 items
 * "PID" = 156 and "PARENT PID" = 1 in a crash-info buffer. Its headers do not follow the item
 * layout the same text documents (uint32 type | uint32 size | uint64 flags): it writes type 1
 * (STRING_DESC) for uint32 values, puts the size 0x30 where the flags go, and stops after 4
 * bytes of BUFFER_END. */
static const char k_seed_literal[] =
    "57 f1 ad de 00 00 00 00 00 00 00 00 00 00 00 00"
    "01 00 00 00 00 00 00 00 30 00 00 00 00 00 00 00"
    "50 49 44 00 00 00 00 00 00 00 00 00 00 00 00 00"
    "00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00"
    "9c 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00"
    "01 00 00 00 00 00 00 00 30 00 00 00 00 00 00 00"
    "50 41 52 45 4e 54 20 50 49 44 00 00 00 00 00 00"
    "00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00"
    "01 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00"
    "ed 58 91 f1";

/* The same two items as the documented layout writes them: type 2 (UINT32_DESC), size 0x30,
 * flags 0x8c (HAS_PADDING | 12 padding bytes), and a whole BUFFER_END header. The data of both
 * items (name slot, value, padding) is byte-identical to the seed's. */
static const char k_seed_vector[] =
    "57 f1 ad de 00 00 00 00 00 00 00 00 00 00 00 00"
    "02 00 00 00 30 00 00 00 8c 00 00 00 00 00 00 00"
    "50 49 44 00 00 00 00 00 00 00 00 00 00 00 00 00"
    "00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00"
    "9c 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00"
    "02 00 00 00 30 00 00 00 8c 00 00 00 00 00 00 00"
    "50 41 52 45 4e 54 20 50 49 44 00 00 00 00 00 00"
    "00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00"
    "01 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00"
    "ed 58 91 f1 00 00 00 00 00 00 00 00 00 00 00 00";

static void test_seed_described_vector(void **state)
{
    (void)state;
    size_t want_len, lit_len;
    uint8_t *want = kt_hex(k_seed_vector, &want_len);
    uint8_t *lit = kt_hex(k_seed_literal, &lit_len);
    assert_int_equal(want_len, 0xa0);
    assert_int_equal(lit_len, 0x94);
    /* the payloads are the seed's bytes */
    assert_memory_equal(want + 0x20, lit + 0x20, 0x30);
    assert_memory_equal(want + 0x60, lit + 0x60, 0x30);

    struct tg_kcdata_enc e;
    assert_int_equal(tg_kcdata_enc_init(&e, TG_KCDATA_MAGIC_CRASHINFO), 0);
    assert_int_equal(tg_kcdata_add_u32(&e, "PID", 156), 0);
    assert_int_equal(tg_kcdata_add_u32(&e, "PARENT PID", 1), 0);
    size_t len;
    uint8_t *got = finish_ok(&e, &len);
    assert_bytes(got, len, want, want_len);

    /* the same bytes from a caller buffer of exactly that size */
    uint8_t fixed[0xa0];
    assert_int_equal(tg_kcdata_enc_init_buf(&e, TG_KCDATA_MAGIC_CRASHINFO, fixed, sizeof fixed), 0);
    assert_int_equal(tg_kcdata_add_u32(&e, "PID", 156), 0);
    assert_int_equal(tg_kcdata_add_u32(&e, "PARENT PID", 1), 0);
    uint8_t *out;
    assert_int_equal(tg_kcdata_finish(&e, &out, &len), 0);
    assert_ptr_equal(out, fixed);
    assert_bytes(out, len, want, want_len);

    /* and it reads back as the seed describes it */
    struct tg_kcdata_iter it;
    struct tg_kcdata_item item;
    char err[256];
    assert_int_equal(tg_kcdata_iter_init(&it, got, len, TG_KCDATA_KNOWN_MAGIC, err, sizeof err), 0);
    assert_int_equal(tg_kcdata_iter_next(&it, &item, err, sizeof err), 1);
    assert_int_equal(item.kind, TG_KCDATA_KIND_DESC);
    assert_string_equal(item.u.desc.name, "PID");
    assert_int_equal(item.u.desc.u, 156);
    assert_int_equal(tg_kcdata_iter_next(&it, &item, err, sizeof err), 1);
    assert_string_equal(item.u.desc.name, "PARENT PID");
    assert_int_equal(item.u.desc.u, 1);
    assert_int_equal(tg_kcdata_iter_next(&it, &item, err, sizeof err), 0);
    free(got);
    free(want);
    free(lit);
}

/* The seed's dump as printed is refused cleanly: its first item claims type 1 (a string with
 * description) of 0 bytes. Fixing only that header still leaves the 4-byte BUFFER_END. */
static void test_seed_literal_refused(void **state)
{
    (void)state;
    size_t len;
    uint8_t *lit = kt_hex(k_seed_literal, &len);
    char err[256] = "";
    assert_int_equal(tg_kcdata_validate(lit, len, TG_KCDATA_KNOWN_MAGIC, err, sizeof err), -1);
    assert_non_null(strstr(err, "offset 16"));
    assert_non_null(strstr(err, "shorter than its 32-byte name"));

    size_t vlen;
    uint8_t *vec = kt_hex(k_seed_vector, &vlen);
    memcpy(lit + 0x10, vec + 0x10, 16); /* correct both headers, keep the short END */
    memcpy(lit + 0x50, vec + 0x50, 16);
    assert_int_equal(tg_kcdata_validate(lit, len, TG_KCDATA_KNOWN_MAGIC, err, sizeof err), -1);
    assert_non_null(strstr(err, "truncated: 4 bytes at offset 144"));
    free(lit);
    free(vec);
}

/* ---- the seed's "custom data formats on demand" example ---- */

#define DISK_IO_TYPE 0x8F0u /* the seed names KCTYPE_SAMPLE_DISK_IO_STATS without a number */

/* struct sample_disk_io_stats: reads count, reads size, io_priority_count[4], io_priority_size.
 * The seed's fourth descriptor carries the array flag with size 8 (an array of 0 elements); it
 * is a plain uint64 at offset 48, as the struct shows. */
static const struct tg_kcdata_field k_disk_io[] = {
    {0, TG_KCDATA_ST_UINT64, 0, 1, "disk_reads_count"},
    {0, TG_KCDATA_ST_UINT64, 8, 1, "disk_reads_size"},
    {TG_KCDATA_FIELD_ARRAY, TG_KCDATA_ST_UINT64, 16, 4, "io_priority_count"},
    {0, TG_KCDATA_ST_UINT64, 48, 1, "io_priority_size"},
};

/* The type definition item written field by field from the documented layout. */
static void disk_io_typedef_raw(struct kt_raw *r, uint8_t fourth_flags)
{
    kt_hdr(r, TG_KCDATA_TYPE_TYPEDEF, 208, 0x88); /* 40 + 4 * 40 = 200 bytes, 8 padding */
    kt_u32(r, DISK_IO_TYPE);
    kt_u32(r, 4);
    kt_name(r, "sample_disk_io_stats");
    kt_u8(r, 0), kt_u8(r, 9), kt_u16(r, 0), kt_u32(r, 8), kt_name(r, "disk_reads_count");
    kt_u8(r, 0), kt_u8(r, 9), kt_u16(r, 8), kt_u32(r, 8), kt_name(r, "disk_reads_size");
    kt_u8(r, 1), kt_u8(r, 9), kt_u16(r, 16), kt_u32(r, 4u << 16 | 8), kt_name(r, "io_priority_count");
    kt_u8(r, fourth_flags), kt_u8(r, 9), kt_u16(r, 48), kt_u32(r, 8), kt_name(r, "io_priority_size");
    kt_zeros(r, 8);
}

static void test_seed_typedef_vector(void **state)
{
    (void)state;
    static struct kt_raw want;
    kt_begin(&want, TG_KCDATA_MAGIC);
    disk_io_typedef_raw(&want, 0);
    /* an item of the new type: 7 uint64 = 56 bytes, 8 padding */
    kt_hdr(&want, DISK_IO_TYPE, 64, 0x88);
    for (uint64_t v = 1; v <= 7; v++)
        kt_u64(&want, v * 100);
    kt_zeros(&want, 8);
    kt_end(&want);

    uint8_t rec[56];
    for (int i = 0; i < 7; i++)
        for (int b = 0; b < 8; b++)
            rec[i * 8 + b] = (uint8_t)((uint64_t)(i + 1) * 100 >> (8 * b));
    struct tg_kcdata_enc e;
    assert_int_equal(tg_kcdata_enc_init(&e, TG_KCDATA_MAGIC), 0);
    assert_int_equal(tg_kcdata_add_typedef(&e, DISK_IO_TYPE, "sample_disk_io_stats", k_disk_io, 4), 0);
    assert_int_equal(tg_kcdata_add(&e, DISK_IO_TYPE, rec, sizeof rec), 0);
    size_t len;
    uint8_t *got = finish_ok(&e, &len);
    assert_bytes(got, len, want.b, want.n);

    /* a reader that never heard of the type reads it by the definition */
    struct tg_kcdata_iter it;
    struct tg_kcdata_item item;
    char err[256];
    assert_int_equal(tg_kcdata_iter_init(&it, got, len, TG_KCDATA_MAGIC, err, sizeof err), 0);
    assert_int_equal(tg_kcdata_iter_next(&it, &item, err, sizeof err), 1);
    assert_int_equal(item.kind, TG_KCDATA_KIND_TYPEDEF);
    assert_int_equal(item.u.td.extent, 56);
    assert_int_equal(tg_kcdata_iter_next(&it, &item, err, sizeof err), 1);
    assert_int_equal(item.kind, TG_KCDATA_KIND_DATA);
    assert_non_null(item.u.data.td);
    assert_string_equal(item.u.data.td->name, "sample_disk_io_stats");
    struct tg_kcdata_field f;
    uint64_t v;
    assert_int_equal(tg_kcdata_typedef_find(item.u.data.td, "io_priority_count", &f), 0);
    assert_int_equal(f.count, 4);
    assert_int_equal(tg_kcdata_field_uint(&f, item.data, item.len, 3, &v), 0);
    assert_int_equal(v, 600);
    assert_int_equal(tg_kcdata_field_uint(&f, item.data, item.len, 4, &v), -1); /* past the array */
    assert_int_equal(tg_kcdata_typedef_find(item.u.data.td, "io_priority_size", &f), 0);
    assert_int_equal(tg_kcdata_field_uint(&f, item.data, item.len, 0, &v), 0);
    assert_int_equal(v, 700);
    assert_int_equal(tg_kcdata_typedef_find(item.u.data.td, "no_such_field", &f), -1);
    free(got);
}

/* The seed's fourth descriptor as written (array flag, size 8 = 0 elements) is refused by
 * the encoder and, in a buffer, by the reader. */
static void test_seed_typedef_literal_refused(void **state)
{
    (void)state;
    struct tg_kcdata_field lit[4];
    memcpy(lit, k_disk_io, sizeof lit);
    lit[3].flags = TG_KCDATA_FIELD_ARRAY;
    lit[3].count = 0;
    struct tg_kcdata_enc e;
    assert_int_equal(tg_kcdata_enc_init(&e, TG_KCDATA_MAGIC), 0);
    assert_int_equal(tg_kcdata_add_typedef(&e, DISK_IO_TYPE, "sample_disk_io_stats", lit, 4), -1);
    assert_non_null(strstr(tg_kcdata_enc_error(&e), "field 3 ('io_priority_size'): array field with count 0"));
    tg_kcdata_enc_free(&e);

    static struct kt_raw r;
    kt_begin(&r, TG_KCDATA_MAGIC);
    disk_io_typedef_raw(&r, 1);
    kt_end(&r);
    char err[256];
    assert_int_equal(tg_kcdata_validate(r.b, r.n, TG_KCDATA_MAGIC, err, sizeof err), -1);
    assert_non_null(strstr(err, "field 3: array field with count 0"));
}

/* ---- round trips ---- */

static void test_roundtrip_described(void **state)
{
    (void)state;
    uint8_t blob[40];
    for (size_t i = 0; i < sizeof blob; i++)
        blob[i] = (uint8_t)(0xA0 + i);
    struct tg_kcdata_enc e;
    assert_int_equal(tg_kcdata_enc_init(&e, TG_KCDATA_MAGIC), 0);
    assert_int_equal(tg_kcdata_add_string(&e, "empty", ""), 0);
    assert_int_equal(tg_kcdata_add_string(&e, "host", "node-a.example"), 0);
    assert_int_equal(tg_kcdata_add_u32(&e, "u32", 0xFFFFFFFFu), 0);
    assert_int_equal(tg_kcdata_add_u64(&e, "u64", 0x0123456789ABCDEFull), 0);
    assert_int_equal(tg_kcdata_add_i32(&e, "i32", INT32_MIN), 0);
    assert_int_equal(tg_kcdata_add_i64(&e, "i64", -1234567890123ll), 0);
    for (size_t n = 0; n <= sizeof blob; n++) {
        char name[32];
        snprintf(name, sizeof name, "blob%zu", n);
        assert_int_equal(tg_kcdata_add_binary(&e, name, blob, n), 0);
    }
    assert_int_equal(tg_kcdata_add_string(&e, "1234567890123456789012345678901", "31-byte name"), 0);
    size_t len;
    uint8_t *buf = finish_ok(&e, &len);

    struct tg_kcdata_iter it;
    struct tg_kcdata_item item;
    char err[256];
    assert_int_equal(tg_kcdata_iter_init(&it, buf, len, TG_KCDATA_MAGIC, err, sizeof err), 0);
    assert_int_equal(tg_kcdata_iter_next(&it, &item, err, sizeof err), 1);
    assert_int_equal(item.type, TG_KCDATA_TYPE_STRING_DESC);
    assert_string_equal(item.u.desc.name, "empty");
    assert_int_equal(item.u.desc.value_len, 0);
    assert_string_equal((const char *)item.u.desc.value, "");
    assert_int_equal(tg_kcdata_iter_next(&it, &item, err, sizeof err), 1);
    assert_string_equal((const char *)item.u.desc.value, "node-a.example");
    assert_int_equal(item.u.desc.value_len, 14);
    assert_int_equal(tg_kcdata_iter_next(&it, &item, err, sizeof err), 1);
    assert_int_equal(item.type, TG_KCDATA_TYPE_UINT32_DESC);
    assert_int_equal(item.u.desc.u, 0xFFFFFFFFu);
    assert_int_equal(tg_kcdata_iter_next(&it, &item, err, sizeof err), 1);
    assert_int_equal(item.type, TG_KCDATA_TYPE_UINT64_DESC);
    assert_true(item.u.desc.u == 0x0123456789ABCDEFull);
    assert_int_equal(tg_kcdata_iter_next(&it, &item, err, sizeof err), 1);
    assert_int_equal(item.type, TG_KCDATA_TYPE_INT32_DESC);
    assert_true(item.u.desc.i == INT32_MIN);
    assert_int_equal(tg_kcdata_iter_next(&it, &item, err, sizeof err), 1);
    assert_int_equal(item.type, TG_KCDATA_TYPE_INT64_DESC);
    assert_true(item.u.desc.i == -1234567890123ll);
    for (size_t n = 0; n <= sizeof blob; n++) {
        assert_int_equal(tg_kcdata_iter_next(&it, &item, err, sizeof err), 1);
        assert_int_equal(item.type, TG_KCDATA_TYPE_BINDATA_DESC);
        /* the recorded padding gives back the exact length */
        assert_int_equal(item.u.desc.value_len, n);
        if (n)
            assert_memory_equal(item.u.desc.value, blob, n);
        assert_int_equal(item.size % 16, 0);
        assert_int_equal(item.flags, 0x80 | (item.size - 32 - n));
    }
    assert_int_equal(tg_kcdata_iter_next(&it, &item, err, sizeof err), 1);
    assert_string_equal(item.u.desc.name, "1234567890123456789012345678901");
    assert_int_equal(tg_kcdata_iter_next(&it, &item, err, sizeof err), 0);
    assert_int_equal(tg_kcdata_iter_end_offset(&it), len);
    free(buf);
}

static void test_roundtrip_plain_and_arrays(void **state)
{
    (void)state;
    uint8_t data[64];
    for (size_t i = 0; i < sizeof data; i++)
        data[i] = (uint8_t)(i * 7 + 1);
    struct tg_kcdata_enc e;
    assert_int_equal(tg_kcdata_enc_init(&e, TG_KCDATA_MAGIC), 0);
    for (size_t n = 0; n <= 33; n++)
        assert_int_equal(tg_kcdata_add(&e, 0x5000 + (uint32_t)n, data, n), 0);
    /* arrays: 0 elements, 3 x 4 bytes (4 padding), 5 x 12 bytes (4 padding), 16 x 1 byte (none) */
    assert_int_equal(tg_kcdata_add_array(&e, 0x6001, 8, 0, NULL), 0);
    assert_int_equal(tg_kcdata_add_array(&e, 0x6002, 4, 3, data), 0);
    assert_int_equal(tg_kcdata_add_array(&e, 0x6003, 12, 5, data), 0);
    assert_int_equal(tg_kcdata_add_array(&e, 0x6004, 1, 16, data), 0);
    size_t len;
    uint8_t *buf = finish_ok(&e, &len);

    struct tg_kcdata_iter it;
    struct tg_kcdata_item item;
    char err[256];
    assert_int_equal(tg_kcdata_iter_init(&it, buf, len, TG_KCDATA_MAGIC, err, sizeof err), 0);
    for (size_t n = 0; n <= 33; n++) {
        assert_int_equal(tg_kcdata_iter_next(&it, &item, err, sizeof err), 1);
        assert_int_equal(item.kind, TG_KCDATA_KIND_DATA);
        assert_int_equal(item.type, 0x5000 + n);
        assert_null(item.u.data.td);
        assert_int_equal(item.len, n);
        assert_int_equal(item.size, (n + 15) / 16 * 16);
        assert_int_equal(item.flags, 0x80 | (item.size - n));
        if (n)
            assert_memory_equal(item.data, data, n);
        /* the padding is zeros */
        for (size_t i = n; i < item.size; i++)
            assert_int_equal(item.data[i], 0);
    }
    static const struct {
        uint32_t elem_type, elem_size, count, type, size;
    } want[] = {
        {0x6001, 0, 0, 0x20, 0}, {0x6002, 4, 3, 0x24, 16}, {0x6003, 12, 5, 0x24, 64}, {0x6004, 1, 16, 0x20, 16},
    };
    for (size_t i = 0; i < 4; i++) {
        assert_int_equal(tg_kcdata_iter_next(&it, &item, err, sizeof err), 1);
        assert_int_equal(item.kind, TG_KCDATA_KIND_ARRAY);
        assert_int_equal(item.type, want[i].type);
        assert_int_equal(item.size, want[i].size);
        assert_true(item.flags == ((uint64_t)want[i].elem_type << 32 | want[i].count));
        assert_int_equal(item.u.array.elem_type, want[i].elem_type);
        assert_int_equal(item.u.array.count, want[i].count);
        assert_int_equal(item.u.array.elem_size, want[i].elem_size);
        if (want[i].count)
            assert_memory_equal(item.data, data, (size_t)want[i].count * want[i].elem_size);
    }
    assert_int_equal(tg_kcdata_iter_next(&it, &item, err, sizeof err), 0);
    free(buf);
}

static void test_roundtrip_containers(void **state)
{
    (void)state;
    struct tg_kcdata_enc e;
    assert_int_equal(tg_kcdata_enc_init(&e, TG_KCDATA_MAGIC), 0);
    assert_int_equal(tg_kcdata_container_begin(&e, 0x7100, 10), 0);
    assert_int_equal(tg_kcdata_add_u64(&e, "a", 1), 0);
    assert_int_equal(tg_kcdata_container_begin(&e, 0x7101, 0xFFFFFFFFFFFFFFFFull), 0);
    assert_int_equal(tg_kcdata_add_u64(&e, "b", 2), 0);
    assert_int_equal(tg_kcdata_container_end(&e, 0xFFFFFFFFFFFFFFFFull), 0);
    assert_int_equal(tg_kcdata_container_begin(&e, 0x7101, 11), 0);
    assert_int_equal(tg_kcdata_container_end(&e, 11), 0);
    assert_int_equal(tg_kcdata_container_end(&e, 10), 0);
    size_t len;
    uint8_t *buf = finish_ok(&e, &len);

    static const struct {
        enum tg_kcdata_kind kind;
        unsigned depth;
        uint32_t ctype;
        uint64_t id;
    } want[] = {
        {TG_KCDATA_KIND_CONTAINER_BEGIN, 0, 0x7100, 10},
        {TG_KCDATA_KIND_DESC, 1, 0, 0},
        {TG_KCDATA_KIND_CONTAINER_BEGIN, 1, 0x7101, 0xFFFFFFFFFFFFFFFFull},
        {TG_KCDATA_KIND_DESC, 2, 0, 0},
        {TG_KCDATA_KIND_CONTAINER_END, 1, 0x7101, 0xFFFFFFFFFFFFFFFFull},
        {TG_KCDATA_KIND_CONTAINER_BEGIN, 1, 0x7101, 11},
        {TG_KCDATA_KIND_CONTAINER_END, 1, 0x7101, 11},
        {TG_KCDATA_KIND_CONTAINER_END, 0, 0x7100, 10},
    };
    struct tg_kcdata_iter it;
    struct tg_kcdata_item item;
    char err[256];
    assert_int_equal(tg_kcdata_iter_init(&it, buf, len, TG_KCDATA_MAGIC, err, sizeof err), 0);
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        assert_int_equal(tg_kcdata_iter_next(&it, &item, err, sizeof err), 1);
        assert_int_equal(item.kind, want[i].kind);
        assert_int_equal(item.depth, want[i].depth);
        if (want[i].kind != TG_KCDATA_KIND_DESC) {
            assert_int_equal(item.u.container.type, want[i].ctype);
            assert_true(item.u.container.id == want[i].id);
        }
    }
    assert_int_equal(tg_kcdata_iter_next(&it, &item, err, sizeof err), 0);
    free(buf);
}

static void test_roundtrip_typedef_all_elem_types(void **state)
{
    (void)state;
    static const struct tg_kcdata_field fields[] = {
        {0, TG_KCDATA_ST_INT8, 0, 1, "i8"},     {0, TG_KCDATA_ST_UINT8, 1, 1, "u8"},
        {0, TG_KCDATA_ST_INT16, 2, 1, "i16"},   {0, TG_KCDATA_ST_UINT16, 4, 1, "u16"},
        {0, TG_KCDATA_ST_INT32, 6, 1, "i32"},   {0, TG_KCDATA_ST_UINT32, 10, 1, "u32"},
        {0, TG_KCDATA_ST_INT64, 14, 1, "i64"},  {0, TG_KCDATA_ST_UINT64, 22, 1, "u64"},
        {TG_KCDATA_FIELD_ARRAY, TG_KCDATA_ST_CHAR, 30, 6, "tag"},
        {TG_KCDATA_FIELD_ARRAY | TG_KCDATA_FIELD_MERGE, TG_KCDATA_ST_INT16, 36, 2, "pair"},
    };
    uint8_t rec[40];
    struct kt_raw r = {.n = 0};
    kt_u8(&r, 0x80), kt_u8(&r, 0xFF), kt_u16(&r, 0x8000), kt_u16(&r, 0xFFFF), kt_u32(&r, 0xFFFFFFFE);
    kt_u32(&r, 0xFFFFFFFE), kt_u64(&r, (uint64_t)-3), kt_u64(&r, (uint64_t)-3), kt_bytes(&r, "hello\0", 6);
    kt_u16(&r, (uint16_t)-7), kt_u16(&r, 7);
    assert_int_equal(r.n, sizeof rec);
    memcpy(rec, r.b, sizeof rec);

    struct tg_kcdata_enc e;
    assert_int_equal(tg_kcdata_enc_init(&e, TG_KCDATA_MAGIC), 0);
    assert_int_equal(tg_kcdata_add_typedef(&e, 0x7300, "all_types", fields, 10), 0);
    assert_int_equal(tg_kcdata_add(&e, 0x7300, rec, sizeof rec), 0);
    assert_int_equal(tg_kcdata_add_array(&e, 0x7300, sizeof rec, 1, rec), 0);
    size_t len;
    uint8_t *buf = finish_ok(&e, &len);

    struct tg_kcdata_iter it;
    struct tg_kcdata_item item;
    char err[256];
    assert_int_equal(tg_kcdata_iter_init(&it, buf, len, TG_KCDATA_MAGIC, err, sizeof err), 0);
    assert_int_equal(tg_kcdata_iter_next(&it, &item, err, sizeof err), 1);
    assert_int_equal(item.u.td.nfields, 10);
    assert_int_equal(item.u.td.extent, 40);
    for (uint32_t i = 0; i < 10; i++) {
        struct tg_kcdata_field f;
        assert_int_equal(tg_kcdata_typedef_field(&item.u.td, i, &f), 0);
        assert_int_equal(f.flags, fields[i].flags);
        assert_int_equal(f.elem_type, fields[i].elem_type);
        assert_int_equal(f.offset, fields[i].offset);
        assert_int_equal(f.count, fields[i].count);
        assert_string_equal(f.name, fields[i].name);
    }
    assert_int_equal(tg_kcdata_iter_next(&it, &item, err, sizeof err), 1);
    const struct tg_kcdata_typedef *td = item.u.data.td;
    assert_non_null(td);
    static const struct {
        const char *name;
        int64_t sv;
        uint64_t uv;
    } want[] = {
        {"i8", -128, 0x80}, {"u8", 255, 255}, {"i16", -32768, 0x8000}, {"u16", 65535, 65535},
        {"i32", -2, 0xFFFFFFFE}, {"u32", 0xFFFFFFFE, 0xFFFFFFFE}, {"i64", -3, (uint64_t)-3},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        struct tg_kcdata_field f;
        int64_t sv;
        uint64_t uv;
        assert_int_equal(tg_kcdata_typedef_find(td, want[i].name, &f), 0);
        assert_int_equal(tg_kcdata_field_int(&f, item.data, item.len, 0, &sv), 0);
        assert_int_equal(tg_kcdata_field_uint(&f, item.data, item.len, 0, &uv), 0);
        assert_true(sv == want[i].sv);
        assert_true(uv == want[i].uv);
    }
    struct tg_kcdata_field f;
    char s[8];
    assert_int_equal(tg_kcdata_typedef_find(td, "tag", &f), 0);
    assert_int_equal(tg_kcdata_field_string(&f, item.data, item.len, s, sizeof s), 5);
    assert_string_equal(s, "hello");
    assert_int_equal(tg_kcdata_field_string(&f, item.data, item.len, s, 4), -1); /* does not fit */
    assert_string_equal(s, "hel");
    assert_int_equal(tg_kcdata_field_string(&f, item.data, 33, s, sizeof s), -1); /* record too short */
    int64_t sv;
    assert_int_equal(tg_kcdata_typedef_find(td, "pair", &f), 0);
    assert_int_equal(tg_kcdata_field_int(&f, item.data, item.len, 0, &sv), 0);
    assert_int_equal(sv, -7);
    assert_int_equal(tg_kcdata_field_int(&f, item.data, item.len, 1, &sv), 0);
    assert_int_equal(sv, 7);
    assert_int_equal(tg_kcdata_field_int(&f, item.data, 39, 1, &sv), -1); /* element beyond the record */
    assert_int_equal(tg_kcdata_iter_next(&it, &item, err, sizeof err), 1);
    assert_int_equal(item.kind, TG_KCDATA_KIND_ARRAY);
    assert_ptr_equal(item.u.array.td, td);
    assert_int_equal(tg_kcdata_iter_next(&it, &item, err, sizeof err), 0);
    free(buf);
}

/* ---- refusals ---- */

static void expect_enc_error(struct tg_kcdata_enc *e, const char *needle)
{
    const char *msg = tg_kcdata_enc_error(e);
    if (!strstr(msg, needle)) {
        print_error("expected [%s] in the encoder error [%s]\n", needle, msg);
        fail();
    }
}

static void test_enc_refusals(void **state)
{
    (void)state;
    struct tg_kcdata_enc e;
    assert_int_equal(tg_kcdata_enc_init(&e, TG_KCDATA_MAGIC), 0);
    assert_int_equal(tg_kcdata_add_u64(&e, "12345678901234567890123456789012", 1), -1);
    expect_enc_error(&e, "is 32 bytes, longer than 31");
    /* sticky: later calls fail too and finish refuses */
    assert_int_equal(tg_kcdata_add_u64(&e, "ok", 1), -1);
    uint8_t *out;
    size_t len;
    assert_int_equal(tg_kcdata_finish(&e, &out, &len), -1);
    tg_kcdata_enc_free(&e);
    tg_kcdata_enc_free(&e);

    static const uint32_t structural[] = {0x0, 0x1, 0x6, 0x11, 0x12, 0x13, 0x14, 0x20, 0x2f, TG_KCDATA_BUFFER_END};
    for (size_t i = 0; i < sizeof structural / sizeof structural[0]; i++) {
        assert_int_equal(tg_kcdata_enc_init(&e, TG_KCDATA_MAGIC), 0);
        assert_int_equal(tg_kcdata_add(&e, structural[i], "x", 1), -1);
        expect_enc_error(&e, "is structural");
        tg_kcdata_enc_free(&e);
    }
    assert_int_equal(tg_kcdata_enc_init(&e, TG_KCDATA_MAGIC), 0);
    assert_int_equal(tg_kcdata_add(&e, TG_KCDATA_TYPE_PID, "\1\0\0\0", 4), 0); /* generic types are fine */
    assert_int_equal(tg_kcdata_add_typedef(&e, 0x7ff, "reserved", k_disk_io, 1), -1);
    expect_enc_error(&e, "0x7FF is reserved");
    tg_kcdata_enc_free(&e);

    /* containers */
    assert_int_equal(tg_kcdata_enc_init(&e, TG_KCDATA_MAGIC), 0);
    assert_int_equal(tg_kcdata_container_begin(&e, 0x7100, 1), 0);
    assert_int_equal(tg_kcdata_container_end(&e, 2), -1);
    expect_enc_error(&e, "container end id 2 does not match the open container id 1");
    tg_kcdata_enc_free(&e);
    assert_int_equal(tg_kcdata_enc_init(&e, TG_KCDATA_MAGIC), 0);
    assert_int_equal(tg_kcdata_container_end(&e, 1), -1);
    expect_enc_error(&e, "no container is open");
    tg_kcdata_enc_free(&e);
    assert_int_equal(tg_kcdata_enc_init(&e, TG_KCDATA_MAGIC), 0);
    assert_int_equal(tg_kcdata_container_begin(&e, 0x7100, 1), 0);
    assert_int_equal(tg_kcdata_finish(&e, &out, &len), -1);
    expect_enc_error(&e, "container id 1 still open");
    tg_kcdata_enc_free(&e);
    assert_int_equal(tg_kcdata_enc_init(&e, TG_KCDATA_MAGIC), 0);
    for (unsigned d = 0; d < TG_KCDATA_MAX_DEPTH; d++)
        assert_int_equal(tg_kcdata_container_begin(&e, 0x7100, d), 0);
    assert_int_equal(tg_kcdata_container_begin(&e, 0x7100, 99), -1);
    expect_enc_error(&e, "nested deeper than 32");
    tg_kcdata_enc_free(&e);

    /* typedef field checks */
    static const struct tg_kcdata_field bad_type[] = {{0, 10, 0, 1, "x"}};
    static const struct tg_kcdata_field bad_name[] = {{0, TG_KCDATA_ST_UINT8, 0, 1, ""}};
    static const struct tg_kcdata_field bad_count[] = {{0, TG_KCDATA_ST_UINT8, 0, 2, "x"}};
    static const struct tg_kcdata_field big_count[] = {{TG_KCDATA_FIELD_ARRAY, TG_KCDATA_ST_UINT8, 0, 70000, "x"}};
    const struct {
        const struct tg_kcdata_field *f;
        const char *needle;
    } bad[] = {
        {bad_type, "unknown element type"},
        {bad_name, "empty name"},
        {bad_count, "arrays need the array flag"},
        {big_count, "more than 65535 elements"},
        {NULL, "no fields"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(tg_kcdata_enc_init(&e, TG_KCDATA_MAGIC), 0);
        assert_int_equal(tg_kcdata_add_typedef(&e, 0x7300, "t", bad[i].f, bad[i].f ? 1 : 0), -1);
        expect_enc_error(&e, bad[i].needle);
        tg_kcdata_enc_free(&e);
    }

    /* fields must not share bytes */
    static const struct tg_kcdata_field overlap[] = {
        {0, TG_KCDATA_ST_UINT32, 0, 1, "a"},
        {TG_KCDATA_FIELD_ARRAY, TG_KCDATA_ST_CHAR, 4, 8, "b"},
        {0, TG_KCDATA_ST_UINT16, 11, 1, "c"},
    };
    assert_int_equal(tg_kcdata_enc_init(&e, TG_KCDATA_MAGIC), 0);
    assert_int_equal(tg_kcdata_add_typedef(&e, 0x7300, "t", overlap, 3), -1);
    expect_enc_error(&e, "type definition 0x7300: fields 1 ('b') and 2 ('c') overlap");
    tg_kcdata_enc_free(&e);

    /* a bounded number of fields */
    static struct tg_kcdata_field wide[TG_KCDATA_MAX_FIELDS + 1];
    for (size_t i = 0; i <= TG_KCDATA_MAX_FIELDS; i++)
        wide[i] = (struct tg_kcdata_field){0, TG_KCDATA_ST_UINT8, (uint16_t)i, 1, "f"};
    assert_int_equal(tg_kcdata_enc_init(&e, TG_KCDATA_MAGIC), 0);
    assert_int_equal(tg_kcdata_add_typedef(&e, 0x7300, "wide", wide, TG_KCDATA_MAX_FIELDS), 0);
    assert_int_equal(tg_kcdata_add_typedef(&e, 0x7301, "wider", wide, TG_KCDATA_MAX_FIELDS + 1), -1);
    expect_enc_error(&e, "257 fields, more than 256");
    tg_kcdata_enc_free(&e);

    /* one layout per type id; a bounded number of definitions */
    assert_int_equal(tg_kcdata_enc_init(&e, TG_KCDATA_MAGIC), 0);
    assert_int_equal(tg_kcdata_add_typedef(&e, 0x7300, "t", k_disk_io, 2), 0);
    assert_int_equal(tg_kcdata_add_typedef(&e, 0x7300, "t", k_disk_io, 2), 0);
    assert_int_equal(tg_kcdata_add_typedef(&e, 0x7300, "t", k_disk_io, 3), -1);
    expect_enc_error(&e, "type definition 0x7300 differs from the one already written for that id");
    tg_kcdata_enc_free(&e);
    assert_int_equal(tg_kcdata_enc_init(&e, TG_KCDATA_MAGIC), 0);
    for (uint32_t i = 0; i < TG_KCDATA_MAX_TYPEDEFS; i++)
        assert_int_equal(tg_kcdata_add_typedef(&e, 0x10000 + i, "t", k_disk_io, 1), 0);
    assert_int_equal(tg_kcdata_add_typedef(&e, 0x10000, "t", k_disk_io, 1), 0); /* a known one again */
    assert_int_equal(tg_kcdata_add_typedef(&e, 0x20000, "t", k_disk_io, 1), -1);
    expect_enc_error(&e, "more than 256 type definitions");
    tg_kcdata_enc_free(&e);
}

static void test_magics(void **state)
{
    (void)state;
    static const uint32_t known[] = {
        TG_KCDATA_MAGIC_CRASHINFO, TG_KCDATA_MAGIC_STACKSHOT, TG_KCDATA_MAGIC_DELTA_STACKSHOT,
        TG_KCDATA_MAGIC_COMPRESSED, TG_KCDATA_MAGIC_BTINFO, TG_KCDATA_MAGIC_OS_REASON, TG_KCDATA_MAGIC_XNUPOST,
    };
    uint32_t ours = TG_KCDATA_MAGIC;
    uint32_t ours_swapped = __builtin_bswap32(ours);
    assert_true(ours != ours_swapped);
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++) {
        assert_true(ours != known[i]);
        assert_true(ours != __builtin_bswap32(known[i]));
        assert_true(ours_swapped != known[i]);
        assert_true(tg_kcdata_magic_usable(known[i]));
        assert_false(tg_kcdata_magic_usable(__builtin_bswap32(known[i])));
        assert_non_null(tg_kcdata_magic_name(known[i]));
    }
    assert_true(tg_kcdata_magic_usable(ours));
    assert_string_equal(tg_kcdata_magic_name(ours), "tracegate");
    /* on the wire the magic reads "TGKC" */
    struct tg_kcdata_enc e;
    assert_int_equal(tg_kcdata_enc_init(&e, TG_KCDATA_MAGIC), 0);
    uint8_t *out;
    size_t len;
    assert_int_equal(tg_kcdata_finish(&e, &out, &len), 0);
    assert_int_equal(len, 32);
    assert_memory_equal(out, "TGKC", 4);
    free(out);

    /* reserved ids, BUFFER_END and its swap, the swap of a known magic and of ours */
    static const uint32_t unusable[] = {0, 0x12, 0x7ff, TG_KCDATA_BUFFER_END, 0xED5891F1u, 0x57F1ADDEu, 0x54474B43u};
    for (size_t i = 0; i < sizeof unusable / sizeof unusable[0]; i++) {
        assert_false(tg_kcdata_magic_usable(unusable[i]));
        assert_int_equal(tg_kcdata_enc_init(&e, unusable[i]), -1);
        expect_enc_error(&e, "is not usable");
        tg_kcdata_enc_free(&e);
    }
    assert_false(tg_kcdata_magic_usable(0x11222211u)); /* its own byte-swap */
    assert_true(tg_kcdata_magic_usable(0x12345678u));
}

static void test_caller_buffer_overflow(void **state)
{
    (void)state;
    uint8_t buf[224]; /* begin 16 + 3 uint32 items of 64 + BUFFER_END 16 */
    memset(buf, 0xEE, sizeof buf);
    struct tg_kcdata_enc e;
    assert_int_equal(tg_kcdata_enc_init_buf(&e, TG_KCDATA_MAGIC, buf, 31), -1);
    expect_enc_error(&e, "cannot hold even an empty KCDATA buffer");
    /* 4 bytes short: the third item would leave no room for BUFFER_END */
    assert_int_equal(tg_kcdata_enc_init_buf(&e, TG_KCDATA_MAGIC, buf, sizeof buf - 4), 0);
    int added = 0;
    while (tg_kcdata_add_u32(&e, "n", (uint32_t)added) == 0)
        added++;
    assert_int_equal(added, 2);
    expect_enc_error(&e, "buffer full: item of type 0x2 needs 80 bytes (with BUFFER_END), 76 of 220 left");
    /* the failed add wrote nothing past the two items */
    for (size_t i = 16 + 2 * 64; i < sizeof buf; i++)
        assert_int_equal(buf[i], 0xEE);
    uint8_t *out;
    size_t len;
    assert_int_equal(tg_kcdata_finish(&e, &out, &len), -1);

    /* exactly enough room */
    assert_int_equal(tg_kcdata_enc_init_buf(&e, TG_KCDATA_MAGIC, buf, sizeof buf), 0);
    for (uint32_t i = 0; i < 3; i++)
        assert_int_equal(tg_kcdata_add_u32(&e, "n", i), 0);
    assert_int_equal(tg_kcdata_add_u32(&e, "n", 3), -1);
    assert_int_equal(tg_kcdata_finish(&e, &out, &len), -1); /* the encoder failed: no half-checked result */
    assert_int_equal(tg_kcdata_enc_init_buf(&e, TG_KCDATA_MAGIC, buf, sizeof buf), 0);
    for (uint32_t i = 0; i < 3; i++)
        assert_int_equal(tg_kcdata_add_u32(&e, "n", i), 0);
    assert_int_equal(tg_kcdata_finish(&e, &out, &len), 0);
    assert_int_equal(len, sizeof buf);
    char err[256];
    assert_int_equal(tg_kcdata_validate(out, len, TG_KCDATA_MAGIC, err, sizeof err), 0);

    /* a growable buffer takes many items */
    assert_int_equal(tg_kcdata_enc_init(&e, TG_KCDATA_MAGIC), 0);
    for (uint32_t i = 0; i < 5000; i++)
        assert_int_equal(tg_kcdata_add_u32(&e, "n", i), 0);
    assert_int_equal(tg_kcdata_finish(&e, &out, &len), 0);
    assert_int_equal(len, 16 + 5000 * 64 + 16);
    assert_int_equal(tg_kcdata_validate(out, len, TG_KCDATA_MAGIC, err, sizeof err), 0);
    free(out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_seed_described_vector),
        cmocka_unit_test(test_seed_literal_refused),
        cmocka_unit_test(test_seed_typedef_vector),
        cmocka_unit_test(test_seed_typedef_literal_refused),
        cmocka_unit_test(test_roundtrip_described),
        cmocka_unit_test(test_roundtrip_plain_and_arrays),
        cmocka_unit_test(test_roundtrip_containers),
        cmocka_unit_test(test_roundtrip_typedef_all_elem_types),
        cmocka_unit_test(test_enc_refusals),
        cmocka_unit_test(test_magics),
        cmocka_unit_test(test_caller_buffer_overflow),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
