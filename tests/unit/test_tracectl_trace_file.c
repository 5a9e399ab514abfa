/* test_tracectl_trace_file.c: .pftrace framing (src/tracectl/trace_file.c): writer/reader round trip,
 * record headers, ReadBuffers slice assembly, truncated and corrupt input. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "consumer_port.pb-c.h"
#include "trace_file.h"

static const size_t k_sizes[] = {0, 1, 2, 127, 128, 300, 16383, 16384, 70000, 5};
#define N_SIZES (sizeof k_sizes / sizeof k_sizes[0])

static uint8_t *make_packet(size_t len, unsigned seed)
{
    uint8_t *p = malloc(len ? len : 1);
    for (size_t i = 0; i < len; i++)
        p[i] = (uint8_t)(seed * 31u + i * 7u);
    return p;
}

static char *temp_path(void)
{
    char *path = strdup("/tmp/tg_tracefile_XXXXXX");
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    return path;
}

static void test_record_header(void **state)
{
    (void)state;
    uint8_t h[16];
    assert_int_equal(tc_trace_record_header(h, 0), 2);
    assert_int_equal(h[0], 0x0A);
    assert_int_equal(h[1], 0x00);
    assert_int_equal(tc_trace_record_header(h, 300), 3);
    assert_int_equal(h[0], 0x0A);
    assert_int_equal(h[1], 0xAC);
    assert_int_equal(h[2], 0x02);
    assert_int_equal(tc_trace_record_header(h, 127), 2);
    assert_int_equal(tc_trace_record_header(h, 128), 3);
}

static void test_round_trip(void **state)
{
    (void)state;
    char *path = temp_path();
    struct tc_trace_writer w;
    char err[512];
    assert_int_equal(tc_trace_writer_open(&w, path, err, sizeof err), 0);
    size_t total = 0;
    for (size_t i = 0; i < N_SIZES; i++) {
        uint8_t *p = make_packet(k_sizes[i], (unsigned)i);
        assert_int_equal(tc_trace_writer_add(&w, p, k_sizes[i], err, sizeof err), 0);
        uint8_t h[16];
        total += tc_trace_record_header(h, k_sizes[i]) + k_sizes[i];
        free(p);
    }
    assert_int_equal(w.packets, N_SIZES);
    assert_int_equal(w.bytes, total);
    assert_int_equal(tc_trace_writer_close(&w, err, sizeof err), 0);
    assert_int_equal(tc_trace_writer_close(&w, err, sizeof err), 0); /* twice is fine */

    uint8_t *data;
    size_t len;
    assert_int_equal(tc_trace_file_load(path, &data, &len, err, sizeof err), 0);
    assert_int_equal(len, total);
    struct tc_trace_reader r;
    tc_trace_reader_init(&r, data, len);
    const uint8_t *pkt;
    size_t plen, off, expect_off = 0;
    for (size_t i = 0; i < N_SIZES; i++) {
        assert_int_equal(tc_trace_reader_next(&r, &pkt, &plen, &off, err, sizeof err), 1);
        assert_int_equal(plen, k_sizes[i]);
        assert_int_equal(off, expect_off);
        uint8_t *p = make_packet(k_sizes[i], (unsigned)i);
        assert_memory_equal(pkt, p, plen ? plen : 0);
        free(p);
        uint8_t h[16];
        expect_off += tc_trace_record_header(h, plen) + plen;
    }
    assert_int_equal(tc_trace_reader_next(&r, &pkt, &plen, &off, err, sizeof err), 0);
    assert_int_equal(tc_trace_reader_next(&r, &pkt, &plen, &off, err, sizeof err), 0);
    free(data);
    unlink(path);
    free(path);
}

/* Every prefix of a valid file: complete packets then either a clean end (cut at a record
 * boundary) or an error naming the offset of the cut record. Never a crash or overread
 * (ASan checks the latter: each prefix is copied into an exact-size buffer). */
static void test_truncated(void **state)
{
    (void)state;
    uint8_t file[200000];
    size_t len = 0;
    size_t bounds[N_SIZES + 1];
    for (size_t i = 0; i < N_SIZES; i++) {
        bounds[i] = len;
        len += tc_trace_record_header(file + len, k_sizes[i]);
        uint8_t *p = make_packet(k_sizes[i], (unsigned)i);
        memcpy(file + len, p, k_sizes[i]);
        free(p);
        len += k_sizes[i];
    }
    bounds[N_SIZES] = len;
    for (size_t cut = 0; cut <= len; cut += (cut < 400 || len - cut < 400) ? 1 : 97) {
        uint8_t *copy = malloc(cut ? cut : 1);
        memcpy(copy, file, cut);
        struct tc_trace_reader r;
        tc_trace_reader_init(&r, copy, cut);
        const uint8_t *pkt;
        size_t plen, off;
        char err[512] = "";
        int rc;
        size_t n = 0;
        while ((rc = tc_trace_reader_next(&r, &pkt, &plen, &off, err, sizeof err)) == 1) {
            assert_true(pkt + plen <= copy + cut);
            n++;
        }
        int at_boundary = 0;
        for (size_t i = 0; i <= N_SIZES; i++)
            if (bounds[i] == cut) {
                at_boundary = 1;
                assert_int_equal(n, i);
            }
        if (at_boundary) {
            assert_int_equal(rc, 0);
        } else {
            assert_int_equal(rc, -1);
            char want[64];
            snprintf(want, sizeof want, "byte offset %zu", bounds[n]);
            assert_non_null(strstr(err, want));
            assert_int_equal(r.off, bounds[n]);
        }
        free(copy);
    }
}

static void test_corrupt(void **state)
{
    (void)state;
    char err[512];
    const uint8_t *pkt;
    size_t plen, off;
    struct tc_trace_reader r;

    /* a good record then field 2 */
    static const uint8_t bad_tag[] = {0x0A, 0x01, 0x42, 0x12, 0x01, 0x00};
    tc_trace_reader_init(&r, bad_tag, sizeof bad_tag);
    assert_int_equal(tc_trace_reader_next(&r, &pkt, &plen, &off, err, sizeof err), 1);
    assert_int_equal(tc_trace_reader_next(&r, &pkt, &plen, &off, err, sizeof err), -1);
    assert_non_null(strstr(err, "byte offset 3"));
    assert_non_null(strstr(err, "unexpected field 2"));

    /* gzip and zstd files are recognised */
    static const uint8_t gz[] = {0x1f, 0x8b, 0x08, 0x00};
    tc_trace_reader_init(&r, gz, sizeof gz);
    assert_int_equal(tc_trace_reader_next(&r, &pkt, &plen, &off, err, sizeof err), -1);
    assert_non_null(strstr(err, "gzip"));
    static const uint8_t zst[] = {0x28, 0xb5, 0x2f, 0xfd, 0x00};
    tc_trace_reader_init(&r, zst, sizeof zst);
    assert_int_equal(tc_trace_reader_next(&r, &pkt, &plen, &off, err, sizeof err), -1);
    assert_non_null(strstr(err, "zstd"));

    /* an over-long length varint */
    static const uint8_t long_varint[] = {0x0A, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01};
    tc_trace_reader_init(&r, long_varint, sizeof long_varint);
    assert_int_equal(tc_trace_reader_next(&r, &pkt, &plen, &off, err, sizeof err), -1);
    assert_non_null(strstr(err, "byte offset 0"));

    /* a huge claimed length */
    static const uint8_t huge[] = {0x0A, 0xff, 0xff, 0xff, 0xff, 0x0f, 0x00};
    tc_trace_reader_init(&r, huge, sizeof huge);
    assert_int_equal(tc_trace_reader_next(&r, &pkt, &plen, &off, err, sizeof err), -1);
    assert_non_null(strstr(err, "truncated file"));

    /* empty input is a clean end */
    tc_trace_reader_init(&r, (const uint8_t *)"", 0);
    assert_int_equal(tc_trace_reader_next(&r, &pkt, &plen, &off, err, sizeof err), 0);
}

/* ---- assembler ---- */

struct collected {
    uint8_t buf[4096];
    size_t len;
    size_t packets;
    size_t sizes[16];
    int stop_at;
};

static int collect(void *arg, const uint8_t *pkt, size_t len)
{
    struct collected *c = arg;
    memcpy(c->buf + c->len, pkt, len);
    c->len += len;
    c->sizes[c->packets++] = len;
    return c->stop_at && (int)c->packets == c->stop_at ? 7 : 0;
}

static size_t pack_reply(uint8_t *out, const char *const *datas, const int *lasts, size_t n)
{
    Perfetto__Protos__ReadBuffersResponse resp = PERFETTO__PROTOS__READ_BUFFERS_RESPONSE__INIT;
    Perfetto__Protos__ReadBuffersResponse__Slice sl[8], *ptrs[8];
    for (size_t i = 0; i < n; i++) {
        perfetto__protos__read_buffers_response__slice__init(&sl[i]);
        sl[i].has_data = 1;
        sl[i].data.data = (uint8_t *)datas[i];
        sl[i].data.len = strlen(datas[i]);
        sl[i].has_last_slice_for_packet = 1;
        sl[i].last_slice_for_packet = lasts[i];
        ptrs[i] = &sl[i];
    }
    resp.n_slices = n;
    resp.slices = ptrs;
    return perfetto__protos__read_buffers_response__pack(&resp, out);
}

static void test_assembler(void **state)
{
    (void)state;
    struct tc_packet_assembler a;
    struct collected c;
    memset(&c, 0, sizeof c);
    tc_assembler_init(&a);
    char err[256];
    uint8_t reply[1024];

    /* packet 1 = "abc" (one slice); packet 2 = "de"+"fg"+"h" split across two replies */
    const char *d1[] = {"abc", "de", "fg"};
    const int l1[] = {1, 0, 0};
    size_t n = pack_reply(reply, d1, l1, 3);
    assert_int_equal(tc_assembler_add_reply(&a, reply, n, collect, &c, err, sizeof err), 0);
    assert_int_equal(c.packets, 1);
    assert_int_equal(tc_assembler_pending(&a), 4);
    const char *d2[] = {"h", "", "xyz"};
    const int l2[] = {1, 1, 1};
    n = pack_reply(reply, d2, l2, 3);
    assert_int_equal(tc_assembler_add_reply(&a, reply, n, collect, &c, err, sizeof err), 0);
    assert_int_equal(c.packets, 4);
    assert_int_equal(c.sizes[0], 3);
    assert_int_equal(c.sizes[1], 5);
    assert_int_equal(c.sizes[2], 0);
    assert_int_equal(c.sizes[3], 3);
    assert_memory_equal(c.buf, "abcdefghxyz", 11);
    assert_int_equal(tc_assembler_pending(&a), 0);

    /* an empty final reply is fine */
    assert_int_equal(tc_assembler_add_reply(&a, reply, 0, collect, &c, err, sizeof err), 0);

    /* a callback that stops */
    c.stop_at = 5;
    const char *d3[] = {"1", "2"};
    const int l3[] = {1, 1};
    n = pack_reply(reply, d3, l3, 2);
    assert_int_equal(tc_assembler_add_reply(&a, reply, n, collect, &c, err, sizeof err), 7);
    assert_int_equal(c.packets, 5);

    /* malformed reply */
    static const uint8_t bad[] = {0x12, 0x05, 0x0a};
    assert_int_equal(tc_assembler_add_reply(&a, bad, sizeof bad, collect, &c, err, sizeof err), -1);
    assert_non_null(strstr(err, "malformed"));
    /* a slice whose inside does not decode (data says 5 bytes, 1 follows) */
    static const uint8_t bad_slice[] = {0x12, 0x03, 0x0a, 0x05, 'x'};
    assert_int_equal(tc_assembler_add_reply(&a, bad_slice, sizeof bad_slice, collect, &c, err, sizeof err), -1);
    assert_string_equal(err, "malformed ReadBuffersResponse slice");
    /* read as protobuf reads it: unknown fields skipped (top level and in a slice), a repeated
     * data field's last occurrence wins */
    static const uint8_t odd[] = {0x08, 0x01,                                 /* field 1 varint: skipped */
                                  0x12, 0x0c, 0x0a, 0x02, 'n', 'o', 0x18, 0x07, /* slice: data "no", field 3 */
                                  0x0a, 0x02, 'o', 'k', 0x10, 0x01};          /* data "ok", last */
    c.stop_at = 0;
    size_t before = c.packets, at = c.len;
    assert_int_equal(tc_assembler_add_reply(&a, odd, sizeof odd, collect, &c, err, sizeof err), 0);
    assert_int_equal(c.packets, before + 1);
    assert_int_equal(c.len - at, 2);
    assert_memory_equal(c.buf + at, "ok", 2);
    tc_assembler_free(&a);
}

static void test_writer_errors(void **state)
{
    (void)state;
    struct tc_trace_writer w;
    char err[512];
    assert_int_equal(tc_trace_writer_open(&w, "/nonexistent-dir/x.pftrace", err, sizeof err), -1);
    assert_non_null(strstr(err, "/nonexistent-dir/x.pftrace"));
    uint8_t *data;
    size_t len;
    assert_int_equal(tc_trace_file_load("/nonexistent-dir/x.pftrace", &data, &len, err, sizeof err), -1);
    assert_non_null(strstr(err, "cannot open"));
    assert_int_equal(tc_trace_file_load("/tmp", &data, &len, err, sizeof err), -1);
    assert_non_null(strstr(err, "directory"));
    if (access("/dev/full", W_OK) == 0) {
        /* ENOSPC surfaces at the latest on close */
        assert_int_equal(tc_trace_writer_open(&w, "/dev/full", err, sizeof err), 0);
        uint8_t big[65536];
        memset(big, 1, sizeof big);
        int rc = 0;
        for (int i = 0; i < 4 && rc == 0; i++)
            rc = tc_trace_writer_add(&w, big, sizeof big, err, sizeof err);
        int crc = tc_trace_writer_close(&w, err, sizeof err);
        assert_true(rc != 0 || crc != 0);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_record_header), cmocka_unit_test(test_round_trip), cmocka_unit_test(test_truncated),
        cmocka_unit_test(test_corrupt),       cmocka_unit_test(test_assembler), cmocka_unit_test(test_writer_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
