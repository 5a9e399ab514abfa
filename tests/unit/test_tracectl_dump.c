/* test_tracectl_dump.c: `tracectl dump` (src/tracectl/tracectl_dump.c) over the real traces that the
 * perfetto CLI wrote (../shared/interop/traces), plus truncated and undecodable input, interned
 * names across incremental-state clears, and a trace of a hundred thousand sequences. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "trace_file.h"
#include "trace_build.h"
#include "tracectl.h"
#include "tg_test_util.h"

struct dumped {
    char *text;
    size_t len;
    int rc;
    char err[512];
    uint8_t *data;
    size_t data_len;
    size_t packets; /* counted independently with the reader */
};

static int load_trace(const char *name, struct dumped *d, int flags)
{
    memset(d, 0, sizeof *d);
    const char *shared = tg_test_shared_dir();
    if (!shared)
        return -1;
    char path[1024];
    snprintf(path, sizeof path, "%s/interop/traces/%s", shared, name);
    if (tg_test_read_file(path, &d->data, &d->data_len) != 0)
        return -1;
    struct tc_trace_reader r;
    const uint8_t *p;
    size_t pl;
    tc_trace_reader_init(&r, d->data, d->data_len);
    while (tc_trace_reader_next(&r, &p, &pl, NULL, d->err, sizeof d->err) == 1)
        d->packets++;
    FILE *out = open_memstream(&d->text, &d->len);
    assert_non_null(out);
    d->rc = tc_dump_trace(out, d->data, d->data_len, flags, d->err, sizeof d->err);
    fclose(out);
    return 0;
}

static void dumped_free(struct dumped *d)
{
    free(d->text);
    free(d->data);
}

#define NEED_TRACE(name, d, flags)                                                                                    \
    do {                                                                                                              \
        if (load_trace(name, d, flags) != 0) {                                                                        \
            print_message("skipping: %s not found (set TG_SHARED_DIR to the shared directory)\n", name);              \
            skip();                                                                                                   \
        }                                                                                                             \
    } while (0)

static void assert_contains(const char *hay, const char *needle)
{
    if (!strstr(hay, needle)) {
        print_error("expected to find [%s] in the dump output:\n%s\n", needle, hay);
        fail();
    }
}

static void assert_packet_count(const struct dumped *d)
{
    char want[64];
    snprintf(want, sizeof want, "packets: %zu (", d->packets);
    assert_contains(d->text, want);
}

static void test_unix_trace(void **state)
{
    (void)state;
    struct dumped d;
    NEED_TRACE("trace_unix.pftrace", &d, 0);
    assert_int_equal(d.rc, 0);
    assert_true(d.packets > 10);
    assert_packet_count(&d);
    /* the SDK example's slices, names resolved through interning */
    assert_contains(d.text, "SLICE_BEGIN \"DrawGame\"");
    assert_contains(d.text, "SLICE_BEGIN \"DrawPlayer\"");
    assert_contains(d.text, "slices: \"DrawGame\" 1, \"DrawPlayer\" 2");
    assert_contains(d.text, "[rendering]");
    /* the service's packets */
    assert_contains(d.text, "synchronization_marker");
    assert_contains(d.text, "16 bytes (valid)");
    assert_contains(d.text, "clock_snapshot");
    assert_contains(d.text, "primary BOOTTIME");
    assert_contains(d.text, "trace_config");
    assert_contains(d.text, "data_sources=[track_event]");
    assert_contains(d.text, "system_info");
    assert_contains(d.text, "Linux");
    assert_contains(d.text, "service_event");
    assert_contains(d.text, "tracing_started");
    assert_contains(d.text, "trace_stats");
    assert_contains(d.text, "trace_uuid");
    assert_contains(d.text, "track_descriptor");
    /* trusted sequence ids: 1 for the service, >= 2 for the producer's writer */
    assert_contains(d.text, " seq=1 ");
    assert_contains(d.text, " seq=2 ");
    assert_null(strstr(d.text, "UNDECODABLE"));
    dumped_free(&d);
}

static void test_tcp_trace(void **state)
{
    (void)state;
    struct dumped d;
    NEED_TRACE("trace_tcp_producer.pftrace", &d, 0);
    assert_int_equal(d.rc, 0);
    assert_packet_count(&d);
    assert_contains(d.text, "slices: \"Work\" 300");
    assert_contains(d.text, "counter values: 300");
    dumped_free(&d);
}

static void test_relay_trace(void **state)
{
    (void)state;
    struct dumped d;
    NEED_TRACE("trace_relay.pftrace", &d, 0);
    assert_int_equal(d.rc, 0);
    assert_packet_count(&d);
    assert_contains(d.text, "slices: \"Work\" 300");
    assert_contains(d.text, "machines: 119080633 ");
    assert_contains(d.text, "remote_clock_sync");
    dumped_free(&d);
}

static void test_detached_trace(void **state)
{
    (void)state;
    struct dumped d;
    NEED_TRACE("trace_detached.pftrace", &d, 0);
    assert_int_equal(d.rc, 0);
    assert_true(d.packets > 0);
    assert_packet_count(&d);
    assert_contains(d.text, "write_into_file");
    dumped_free(&d);
}

/* --summary prints the totals alone: they start the output (no separator after no packets). */
static void test_summary_only(void **state)
{
    (void)state;
    struct dumped d;
    NEED_TRACE("trace_unix.pftrace", &d, TC_DUMP_SUMMARY);
    assert_int_equal(d.rc, 0);
    assert_int_equal(strncmp(d.text, "packets: ", 9), 0);
    assert_packet_count(&d);
    dumped_free(&d);
}

static void test_raw(void **state)
{
    (void)state;
    struct dumped d;
    NEED_TRACE("trace_unix.pftrace", &d, TC_DUMP_RAW);
    assert_int_equal(d.rc, 0);
    assert_contains(d.text, "track_event {");
    assert_contains(d.text, "clock_snapshot {");
    assert_contains(d.text, "trusted_packet_sequence_id: 2");
    assert_contains(d.text, "name: \"DrawGame\"");
    dumped_free(&d);
}

static void test_truncated_real(void **state)
{
    (void)state;
    struct dumped d;
    NEED_TRACE("trace_unix.pftrace", &d, 0);
    /* every cut of the file: never a crash; a cut inside a record is reported with an offset */
    for (size_t cut = 1; cut < d.data_len; cut++) {
        uint8_t *copy = malloc(cut);
        memcpy(copy, d.data, cut);
        char *text = NULL;
        size_t len = 0;
        char err[512] = "";
        FILE *out = open_memstream(&text, &len);
        int rc = tc_dump_trace(out, copy, cut, cut % 2 ? TC_DUMP_SUMMARY : 0, err, sizeof err);
        fclose(out);
        struct tc_trace_reader r;
        const uint8_t *p;
        size_t pl;
        char rerr[512];
        int rrc;
        tc_trace_reader_init(&r, copy, cut);
        while ((rrc = tc_trace_reader_next(&r, &p, &pl, NULL, rerr, sizeof rerr)) == 1)
            ;
        if (rrc < 0) {
            assert_int_equal(rc, 1);
            assert_non_null(strstr(err, "byte offset"));
        } else {
            assert_int_equal(rc, 0);
        }
        free(text);
        free(copy);
    }
    dumped_free(&d);
}

static void test_undecodable_packet(void **state)
{
    (void)state;
    /* good framing, but the second packet is not a protobuf message (field 0) */
    static const uint8_t data[] = {0x0A, 0x02, 0x40, 0x05, 0x0A, 0x02, 0x00, 0x00, 0x0A, 0x02, 0x40, 0x06};
    char *text = NULL;
    size_t len = 0;
    char err[512] = "";
    FILE *out = open_memstream(&text, &len);
    int rc = tc_dump_trace(out, data, sizeof data, 0, err, sizeof err);
    fclose(out);
    assert_int_equal(rc, 1);
    assert_non_null(strstr(err, "packet #1 at byte offset 4"));
    assert_contains(text, "UNDECODABLE");
    assert_contains(text, "packets: 3 (");
    assert_contains(text, "ts=5 ");
    assert_contains(text, "ts=6 ");
    free(text);
}

/* ---- traces built here, packet by packet (trace_build.h) ---- */

static void slice_by_iid(struct tb_trace *b, uint32_t seq, uint64_t ts, uint64_t iid, const char *interned, int cleared)
{
    assert_int_equal(tb_slice_by_iid(b, seq, ts, iid, interned, cleared), 0);
}

static char *dump_built(const struct tb_trace *b, int flags)
{
    char *text = NULL;
    size_t len = 0;
    char err[512] = "";
    FILE *out = open_memstream(&text, &len);
    assert_non_null(out);
    assert_int_equal(tc_dump_trace(out, b->data, b->len, flags, err, sizeof err), 0);
    fclose(out);
    return text;
}

/* the line of the packet with timestamp ts (dump prints "ts=N "), or fails */
static const char *line_at(const char *text, uint64_t ts)
{
    char key[48];
    snprintf(key, sizeof key, " ts=%llu ", (unsigned long long)ts);
    const char *l = strstr(text, key);
    if (!l) {
        print_error("no packet with %s in:\n%s\n", key, text);
        fail();
    }
    return l;
}

static void assert_line_names(const char *text, uint64_t ts, const char *name)
{
    const char *l = line_at(text, ts);
    const char *eol = strchr(l, '\n');
    const char *at = strstr(l, name);
    if (!at || (eol && at > eol)) {
        print_error("the packet at ts=%llu does not show %s:\n%.*s\n", (unsigned long long)ts, name,
                    (int)(eol ? eol - l : (long)strlen(l)), l);
        fail();
    }
}

/* A cleared sequence forgets its interned names (an event naming a forgotten iid shows the iid);
 * what it interns afresh is used; another sequence's names with the same iid are untouched, across
 * many clears. */
static void test_cleared_sequence_forgets_interned_names(void **state)
{
    (void)state;
    struct tb_trace b = {0};
    slice_by_iid(&b, 1, 10, 1, "first", 0);
    slice_by_iid(&b, 2, 11, 1, "other", 0);
    slice_by_iid(&b, 1, 12, 1, NULL, 1);      /* cleared: iid 1 unknown now */
    slice_by_iid(&b, 1, 13, 1, "second", 0); /* interned again */
    slice_by_iid(&b, 2, 14, 1, NULL, 0);      /* sequence 2 still has its own */
    for (uint64_t k = 0; k < 1000; k++)        /* clear after clear, each interning anew */
        slice_by_iid(&b, 1, 100 + k, 1, k == 999 ? "last" : "again", 1);
    slice_by_iid(&b, 1, 2000, 1, NULL, 0);
    slice_by_iid(&b, 1, 2001, 1, NULL, 1);
    slice_by_iid(&b, 2, 2002, 1, NULL, 0);
    char *text = dump_built(&b, 0);
    assert_line_names(text, 10, "\"first\"");
    assert_line_names(text, 11, "\"other\"");
    assert_line_names(text, 12, "<name iid 1>");
    assert_line_names(text, 13, "\"second\"");
    assert_line_names(text, 14, "\"other\"");
    assert_line_names(text, 2000, "\"last\"");
    assert_line_names(text, 2001, "<name iid 1>");
    assert_line_names(text, 2002, "\"other\"");
    free(text);
    free(b.data);
}

/* A hundred thousand sequences (as a hostile or merged trace may hold), each with its own
 * interned name: every name resolved, every packet counted. (The reader
 * indexes sequences and grows its interning table, so this is linear; bench_dump in `make bench`
 * prints the cost per sequence from 10,000 to 1,000,000.) */
static void test_many_sequences(void **state)
{
    (void)state;
    enum { N = 100000 };
    struct tb_trace b = {0};
    char name[32];
    for (uint32_t s = 1; s <= N; s++) {
        snprintf(name, sizeof name, "n%u", (unsigned)s);
        slice_by_iid(&b, s, 1000 + s, 7, name, s % 2);
    }
    slice_by_iid(&b, N / 2, 5000000, 7, NULL, 0);
    slice_by_iid(&b, N, 5000001, 7, NULL, 0);
    char *text = dump_built(&b, 0);
    assert_line_names(text, 1001, "\"n1\"");
    assert_line_names(text, 5000000, "\"n50000\"");
    assert_line_names(text, 5000001, "\"n100000\"");
    assert_contains(text, "packets: 100002 (");
    /* the summary lists the first 4096 sequences, and the rest together */
    assert_contains(text, "sequences: 1 (1 packets), 2 (1 packets), ");
    assert_contains(text, ", 4096 (1 packets), (95904 more sequences: 95906 packets)\n");
    /* the summary keeps the first 4096 slice names and counts the rest together */
    assert_contains(text, "slices: \"n1\" 1, \"n2\" 1, ");
    assert_contains(text, ", \"n4096\" 1, (more names) 95906\n");
    free(text);
    free(b.data);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_unix_trace),     cmocka_unit_test(test_tcp_trace),
        cmocka_unit_test(test_relay_trace),    cmocka_unit_test(test_detached_trace),
        cmocka_unit_test(test_raw),            cmocka_unit_test(test_truncated_real),
        cmocka_unit_test(test_undecodable_packet), cmocka_unit_test(test_summary_only),
        cmocka_unit_test(test_cleared_sequence_forgets_interned_names),
        cmocka_unit_test(test_many_sequences),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
