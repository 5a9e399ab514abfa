/* test_smb_fragments.c: fragment iteration over chunk payloads: varint
 * lengths of 1..4 bytes, padding, drop marker, overruns, continuation flags. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "smb/smb_abi.h"
#include "smb/smb_fragments.h"

static void test_header_varints(void **state)
{
    (void)state;
    uint32_t v = 0;
    const uint8_t one[] = {0x05};
    assert_int_equal(tg_smb_read_frag_header(one, one + 1, &v), 1);
    assert_int_equal(v, 5);
    const uint8_t two[] = {0x96, 0x01};
    assert_int_equal(tg_smb_read_frag_header(two, two + 2, &v), 2);
    assert_int_equal(v, 150);
    const uint8_t three[] = {0x80, 0x80, 0x01};
    assert_int_equal(tg_smb_read_frag_header(three, three + 3, &v), 3);
    assert_int_equal(v, 1u << 14);
    const uint8_t four[] = {0x85, 0x80, 0x80, 0x00}; /* redundant 4-byte 5 */
    assert_int_equal(tg_smb_read_frag_header(four, four + 4, &v), 4);
    assert_int_equal(v, 5);
    const uint8_t drop[] = {0xff, 0xff, 0xff, 0x7f};
    assert_int_equal(tg_smb_read_frag_header(drop, drop + 4, &v), 4);
    assert_int_equal(v, TG_SMB_PACKET_SIZE_DROP);
    /* a fifth byte is never read */
    const uint8_t five[] = {0x80, 0x80, 0x80, 0x80, 0x01};
    assert_int_equal(tg_smb_read_frag_header(five, five + 5, &v), 0);
    /* truncated */
    assert_int_equal(tg_smb_read_frag_header(three, three + 2, &v), 0);
    assert_int_equal(tg_smb_read_frag_header(one, one, &v), 0);
}

/* Appends a fragment with an n-byte (1..4) length header. */
static size_t put_frag(uint8_t *buf, size_t off, const char *data, size_t len, int hdr_bytes)
{
    uint32_t v = (uint32_t)len;
    for (int i = 0; i < hdr_bytes; i++) {
        uint8_t b = (uint8_t)(v & 0x7f);
        v >>= 7;
        if (i + 1 < hdr_bytes)
            b |= 0x80;
        buf[off++] = b;
    }
    memcpy(buf + off, data, len);
    return off + len;
}

static void test_all_header_widths(void **state)
{
    (void)state;
    uint8_t buf[256] = {0};
    size_t n = 0;
    n = put_frag(buf, n, "a", 1, 1);
    n = put_frag(buf, n, "bb", 2, 2);
    n = put_frag(buf, n, "ccc", 3, 3);
    n = put_frag(buf, n, "dddd", 4, 4);
    struct tg_smb_frag_iter it;
    struct tg_smb_fragment f;
    tg_smb_frag_iter_init(&it, buf, sizeof(buf), 4, 0);
    const char *want[] = {"a", "bb", "ccc", "dddd"};
    for (unsigned i = 0; i < 4; i++) {
        assert_int_equal(tg_smb_frag_next(&it, &f), TG_SMB_FRAG_OK);
        assert_int_equal(f.index, i);
        assert_int_equal(f.len, strlen(want[i]));
        assert_memory_equal(f.data, want[i], f.len);
        assert_false(f.is_drop);
        assert_false(f.is_first_continuation);
        assert_false(f.is_last_continues);
    }
    assert_int_equal(tg_smb_frag_iter_offset(&it), n);
    /* count reached: stop even though bytes remain */
    assert_int_equal(tg_smb_frag_next(&it, &f), TG_SMB_FRAG_END);
    assert_int_equal(tg_smb_frag_next(&it, &f), TG_SMB_FRAG_END);
}

static void test_padding_skipped(void **state)
{
    (void)state;
    uint8_t buf[64] = {0};
    size_t n = 0;
    buf[n++] = 0x00; /* 1-byte padding */
    n = put_frag(buf, n, "x", 1, 4);
    n = put_frag(buf, n, "", 0, 4); /* 4-byte zero length: padding too */
    n = put_frag(buf, n, "yz", 2, 1);
    buf[n++] = 0x00; /* trailing padding, the SDK's inflated count */
    struct tg_smb_frag_iter it;
    struct tg_smb_fragment f;
    tg_smb_frag_iter_init(&it, buf, n, 5, 0);
    assert_int_equal(tg_smb_frag_next(&it, &f), TG_SMB_FRAG_OK);
    assert_int_equal(f.index, 1);
    assert_memory_equal(f.data, "x", 1);
    assert_int_equal(tg_smb_frag_next(&it, &f), TG_SMB_FRAG_OK);
    assert_int_equal(f.index, 3);
    assert_memory_equal(f.data, "yz", 2);
    assert_int_equal(tg_smb_frag_next(&it, &f), TG_SMB_FRAG_END);
    assert_int_equal(it.padding_skipped, 3);
    assert_int_equal(it.next, 5);
}

static void test_drop_marker(void **state)
{
    (void)state;
    uint8_t buf[64];
    memset(buf, 0xAB, sizeof(buf));
    size_t n = 0;
    n = put_frag(buf, n, "ok", 2, 4);
    buf[n++] = 0xff;
    buf[n++] = 0xff;
    buf[n++] = 0xff;
    buf[n++] = 0x7f; /* 0x0FFFFFFF: abandoned; garbage follows */
    struct tg_smb_frag_iter it;
    struct tg_smb_fragment f;
    tg_smb_frag_iter_init(&it, buf, sizeof(buf), 4, TG_SMB_CHUNK_LAST_CONTINUES);
    assert_int_equal(tg_smb_frag_next(&it, &f), TG_SMB_FRAG_OK);
    assert_false(f.is_drop);
    assert_int_equal(tg_smb_frag_next(&it, &f), TG_SMB_FRAG_OK);
    assert_true(f.is_drop);
    assert_null(f.data);
    assert_int_equal(f.len, 0);
    assert_int_equal(f.index, 1);
    /* count was 4, but nothing after a drop marker is readable */
    assert_int_equal(tg_smb_frag_next(&it, &f), TG_SMB_FRAG_END);
    assert_int_equal(it.status, TG_SMB_FRAG_END);
}

static void test_overruns(void **state)
{
    (void)state;
    struct tg_smb_frag_iter it;
    struct tg_smb_fragment f;
    /* length past the end */
    uint8_t a[8] = {0x07, 'a', 'b', 'c'};
    tg_smb_frag_iter_init(&it, a, 4, 1, 0);
    assert_int_equal(tg_smb_frag_next(&it, &f), TG_SMB_FRAG_ABI_VIOLATION);
    assert_int_equal(tg_smb_frag_next(&it, &f), TG_SMB_FRAG_ABI_VIOLATION); /* sticky */
    /* exact fit is fine */
    tg_smb_frag_iter_init(&it, a, 1 + 7, 1, 0);
    assert_int_equal(tg_smb_frag_next(&it, &f), TG_SMB_FRAG_OK);
    assert_int_equal(f.len, 7);
    /* count says 2, bytes hold 1 */
    uint8_t b[3] = {0x01, 'z'};
    tg_smb_frag_iter_init(&it, b, 2, 2, 0);
    assert_int_equal(tg_smb_frag_next(&it, &f), TG_SMB_FRAG_OK);
    assert_int_equal(tg_smb_frag_next(&it, &f), TG_SMB_FRAG_ABI_VIOLATION);
    /* header cut by the end of the payload */
    uint8_t c[2] = {0x80, 0x80};
    tg_smb_frag_iter_init(&it, c, 2, 1, 0);
    assert_int_equal(tg_smb_frag_next(&it, &f), TG_SMB_FRAG_ABI_VIOLATION);
    /* 5-byte varint */
    uint8_t d[16] = {0x81, 0x80, 0x80, 0x80, 0x00};
    tg_smb_frag_iter_init(&it, d, sizeof(d), 1, 0);
    assert_int_equal(tg_smb_frag_next(&it, &f), TG_SMB_FRAG_ABI_VIOLATION);
    /* huge 4-byte length that is not the drop marker */
    uint8_t e[8] = {0xfe, 0xff, 0xff, 0x7f};
    tg_smb_frag_iter_init(&it, e, sizeof(e), 1, 0);
    assert_int_equal(tg_smb_frag_next(&it, &f), TG_SMB_FRAG_ABI_VIOLATION);
    /* empty payload with count 0 is just empty */
    tg_smb_frag_iter_init(&it, e, 0, 0, 0);
    assert_int_equal(tg_smb_frag_next(&it, &f), TG_SMB_FRAG_END);
}

static void test_continuation_flags(void **state)
{
    (void)state;
    uint8_t buf[64] = {0};
    size_t n = 0;
    n = put_frag(buf, n, "tail", 4, 4);
    n = put_frag(buf, n, "mid", 3, 4);
    n = put_frag(buf, n, "head", 4, 4);
    struct tg_smb_frag_iter it;
    struct tg_smb_fragment f;
    tg_smb_frag_iter_init(&it, buf, n, 3, TG_SMB_CHUNK_FIRST_CONTINUES | TG_SMB_CHUNK_LAST_CONTINUES);
    assert_int_equal(tg_smb_frag_next(&it, &f), TG_SMB_FRAG_OK);
    assert_true(f.is_first_continuation);
    assert_false(f.is_last_continues);
    assert_int_equal(tg_smb_frag_next(&it, &f), TG_SMB_FRAG_OK);
    assert_false(f.is_first_continuation);
    assert_false(f.is_last_continues);
    assert_int_equal(tg_smb_frag_next(&it, &f), TG_SMB_FRAG_OK);
    assert_false(f.is_first_continuation);
    assert_true(f.is_last_continues);
    assert_int_equal(tg_smb_frag_next(&it, &f), TG_SMB_FRAG_END);

    /* a single fragment that both continues and goes on */
    n = put_frag(buf, 0, "middle", 6, 4);
    tg_smb_frag_iter_init(&it, buf, n, 1, TG_SMB_CHUNK_FIRST_CONTINUES | TG_SMB_CHUNK_LAST_CONTINUES);
    assert_int_equal(tg_smb_frag_next(&it, &f), TG_SMB_FRAG_OK);
    assert_true(f.is_first_continuation);
    assert_true(f.is_last_continues);

    /* a zero-length continuation piece is data, not padding */
    n = put_frag(buf, 0, "", 0, 4);
    tg_smb_frag_iter_init(&it, buf, n, 1, TG_SMB_CHUNK_FIRST_CONTINUES);
    assert_int_equal(tg_smb_frag_next(&it, &f), TG_SMB_FRAG_OK);
    assert_true(f.is_first_continuation);
    assert_int_equal(f.len, 0);
}

static void test_resume(void **state)
{
    (void)state;
    uint8_t buf[64] = {0};
    size_t n = 0;
    n = put_frag(buf, n, "one", 3, 4);
    n = put_frag(buf, n, "two", 3, 1);
    n = put_frag(buf, n, "three", 5, 2);
    struct tg_smb_frag_iter it;
    struct tg_smb_fragment f;
    tg_smb_frag_iter_init(&it, buf, n, 3, 0);
    assert_int_equal(tg_smb_frag_next(&it, &f), TG_SMB_FRAG_OK);
    size_t off = tg_smb_frag_iter_offset(&it);
    unsigned idx = it.next;
    assert_int_equal(off, 7);
    tg_smb_frag_iter_init_at(&it, buf, n, 3, TG_SMB_CHUNK_LAST_CONTINUES, off, idx);
    assert_int_equal(tg_smb_frag_next(&it, &f), TG_SMB_FRAG_OK);
    assert_memory_equal(f.data, "two", 3);
    assert_int_equal(tg_smb_frag_next(&it, &f), TG_SMB_FRAG_OK);
    assert_memory_equal(f.data, "three", 5);
    assert_true(f.is_last_continues);
    /* an offset past the end clamps and reports a violation, never reads out */
    tg_smb_frag_iter_init_at(&it, buf, n, 3, 0, 1000, 0);
    assert_int_equal(tg_smb_frag_next(&it, &f), TG_SMB_FRAG_ABI_VIOLATION);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_header_varints),     cmocka_unit_test(test_all_header_widths),
        cmocka_unit_test(test_padding_skipped),    cmocka_unit_test(test_drop_marker),
        cmocka_unit_test(test_overruns),           cmocka_unit_test(test_continuation_flags),
        cmocka_unit_test(test_resume),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
