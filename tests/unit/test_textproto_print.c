/* test_textproto_print.c: text format printer on the Perfetto schemas (what
 * `tracectl dump` / `tracectl query` show) and print -> parse round trips that
 * must reproduce protobuf-c's pack() bytes exactly. */
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
#include "tracing_service_state.pb-c.h"

#define TC_DESC (&perfetto__protos__trace_config__descriptor)
#define TSS_DESC (&perfetto__protos__tracing_service_state__descriptor)

static const char k_sample[] =
    "buffers { size_kb: 4096 fill_policy: RING_BUFFER }\n"
    "buffers: { size_kb: 1024, fill_policy: DISCARD }\n"
    "data_sources { config { name: \"track_event\" target_buffer: 0 track_event_config { enabled_categories: "
    "\"*\" disabled_categories: [\"slow\", \"debug\"] } } producer_name_filter: \"demo\" }\n"
    "duration_ms: 2500  # comment\n"
    "write_into_file: true\n"
    "max_file_size_bytes: 0xFFFFFFFFFF\n"
    "producers < producer_name: \"p\" shm_size_kb: 512 >\n"
    "trigger_config { trigger_mode: STOP_TRACING trigger_timeout_ms: 1000 triggers { name: \"t1\" stop_delay_ms: 5 } "
    "}\n"
    "builtin_data_sources { disable_clock_snapshotting: true primary_trace_clock: BUILTIN_CLOCK_MONOTONIC }\n"
    "unique_session_name: 'abc' \"def\"\n";

static const char k_sample_printed[] =
    "buffers {\n"
    "  size_kb: 4096\n"
    "  fill_policy: RING_BUFFER\n"
    "}\n"
    "buffers {\n"
    "  size_kb: 1024\n"
    "  fill_policy: DISCARD\n"
    "}\n"
    "data_sources {\n"
    "  config {\n"
    "    name: \"track_event\"\n"
    "    target_buffer: 0\n"
    "    track_event_config {\n"
    "      disabled_categories: \"slow\"\n"
    "      disabled_categories: \"debug\"\n"
    "      enabled_categories: \"*\"\n"
    "    }\n"
    "  }\n"
    "  producer_name_filter: \"demo\"\n"
    "}\n"
    "duration_ms: 2500\n"
    "producers {\n"
    "  producer_name: \"p\"\n"
    "  shm_size_kb: 512\n"
    "}\n"
    "write_into_file: true\n"
    "max_file_size_bytes: 1099511627775\n"
    "trigger_config {\n"
    "  trigger_mode: STOP_TRACING\n"
    "  triggers {\n"
    "    name: \"t1\"\n"
    "    stop_delay_ms: 5\n"
    "  }\n"
    "  trigger_timeout_ms: 1000\n"
    "}\n"
    "builtin_data_sources {\n"
    "  disable_clock_snapshotting: true\n"
    "  primary_trace_clock: BUILTIN_CLOCK_MONOTONIC\n"
    "}\n"
    "unique_session_name: \"abcdef\"\n";

static uint8_t *pack(const ProtobufCMessage *m, size_t *n)
{
    *n = protobuf_c_message_get_packed_size(m);
    uint8_t *b = malloc(*n + 1);
    assert_non_null(b);
    assert_int_equal(protobuf_c_message_pack(m, b), *n);
    return b;
}

/* print(m) in both layouts parses back to exactly pack(m). */
static void assert_print_round_trip(const ProtobufCMessage *m)
{
    size_t want_n;
    uint8_t *want = pack(m, &want_n);
    for (int indent = -1; indent <= 2; indent += 3) {
        char *text = tg_textproto_print(m, indent);
        assert_non_null(text);
        char err[256] = "";
        uint8_t *got = NULL;
        size_t got_n = 0;
        if (tg_textproto_to_binary(m->descriptor, text, strlen(text), &got, &got_n, err, sizeof err) != 0)
            fail_msg("printed text does not parse: %s\n%s", err, text);
        if (got_n != want_n || memcmp(got, want, want_n) != 0)
            fail_msg("round trip of %s differs; printed:\n%s", m->descriptor->name, text);
        free(got);
        free(text);
    }
    free(want);
}

static void test_print_trace_config(void **state)
{
    (void)state;
    char err[256];
    ProtobufCMessage *m = tg_textproto_parse(TC_DESC, k_sample, strlen(k_sample), err, sizeof err);
    if (!m)
        fail_msg("%s", err);
    char *s = tg_textproto_print(m, 0);
    assert_non_null(s);
    assert_string_equal(s, k_sample_printed);
    free(s);
    assert_print_round_trip(m);
    protobuf_c_message_free_unpacked(m, NULL);
}

static void test_round_trip_tracing_service_state(void **state)
{
    (void)state;
    Perfetto__Protos__TracingServiceState__Producer p1 = PERFETTO__PROTOS__TRACING_SERVICE_STATE__PRODUCER__INIT;
    p1.has_id = 1, p1.id = 1;
    p1.name = (char *)"com.example.app";
    p1.has_uid = 1, p1.uid = 10001;
    p1.has_pid = 1, p1.pid = 4242;
    p1.sdk_version = (char *)"tracegate \"0.1\"\n";
    Perfetto__Protos__TracingServiceState__Producer p2 = PERFETTO__PROTOS__TRACING_SERVICE_STATE__PRODUCER__INIT;
    p2.has_id = 1, p2.id = -2;
    p2.name = (char *)"traced_probes";
    p2.has_frozen = 1, p2.frozen = 0;
    p2.has_machine_id = 1, p2.machine_id = 4000000000u;
    Perfetto__Protos__TracingServiceState__Producer *prods[] = {&p1, &p2};

    char *tags[] = {(char *)"slow", (char *)""};
    Perfetto__Protos__TrackEventCategory cat = PERFETTO__PROTOS__TRACK_EVENT_CATEGORY__INIT;
    cat.name = (char *)"gfx";
    cat.description = (char *)"Graphics \xe2\x9c\x93";
    cat.n_tags = 2, cat.tags = tags;
    Perfetto__Protos__TrackEventCategory *cats[] = {&cat};
    Perfetto__Protos__TrackEventDescriptor ted = PERFETTO__PROTOS__TRACK_EVENT_DESCRIPTOR__INIT;
    ted.n_available_categories = 1, ted.available_categories = cats;
    Perfetto__Protos__DataSourceDescriptor dd1 = PERFETTO__PROTOS__DATA_SOURCE_DESCRIPTOR__INIT;
    dd1.name = (char *)"track_event";
    dd1.track_event_descriptor = &ted;
    dd1.has_will_notify_on_stop = 1, dd1.will_notify_on_stop = 1;
    dd1.has_id = 1, dd1.id = UINT64_MAX;
    Perfetto__Protos__DataSourceDescriptor dd2 = PERFETTO__PROTOS__DATA_SOURCE_DESCRIPTOR__INIT;
    dd2.name = (char *)"linux.ftrace";
    Perfetto__Protos__GpuCounterDescriptor gpu = PERFETTO__PROTOS__GPU_COUNTER_DESCRIPTOR__INIT;
    dd2.gpu_counter_descriptor = &gpu; /* empty but present */
    Perfetto__Protos__TracingServiceState__DataSource ds1 = PERFETTO__PROTOS__TRACING_SERVICE_STATE__DATA_SOURCE__INIT;
    ds1.ds_descriptor = &dd1;
    ds1.has_producer_id = 1, ds1.producer_id = 1;
    Perfetto__Protos__TracingServiceState__DataSource ds2 = PERFETTO__PROTOS__TRACING_SERVICE_STATE__DATA_SOURCE__INIT;
    ds2.ds_descriptor = &dd2;
    ds2.has_producer_id = 1, ds2.producer_id = -2;
    Perfetto__Protos__TracingServiceState__DataSource *dss[] = {&ds1, &ds2};

    uint32_t bufs[] = {1024, 0, 65536};
    Perfetto__Protos__TracingServiceState__TracingSession ts = PERFETTO__PROTOS__TRACING_SERVICE_STATE__TRACING_SESSION__INIT;
    ts.has_id = 1, ts.id = 7;
    ts.state = (char *)"STARTED";
    ts.n_buffer_size_kb = 3, ts.buffer_size_kb = bufs;
    ts.has_start_realtime_ns = 1, ts.start_realtime_ns = -1;
    ts.has_is_started = 1, ts.is_started = 1;
    Perfetto__Protos__TracingServiceState__TracingSession *tss[] = {&ts};

    Perfetto__Protos__TracingServiceState st = PERFETTO__PROTOS__TRACING_SERVICE_STATE__INIT;
    st.n_producers = 2, st.producers = prods;
    st.n_data_sources = 2, st.data_sources = dss;
    st.has_num_sessions = 1, st.num_sessions = 1;
    st.tracing_service_version = (char *)"tracegate 0.1";
    st.n_tracing_sessions = 1, st.tracing_sessions = tss;
    st.has_supports_tracing_sessions = 1, st.supports_tracing_sessions = 1;

    assert_print_round_trip(&st.base);

    char *s = tg_textproto_print(&st.base, 0);
    assert_non_null(s);
    /* spot checks of what `tracectl query` shows */
    assert_non_null(strstr(s, "producers {\n  id: 1\n  name: \"com.example.app\"\n  uid: 10001\n"
                              "  sdk_version: \"tracegate \\\"0.1\\\"\\n\"\n  pid: 4242\n}\n"));
    assert_non_null(strstr(s, "    gpu_counter_descriptor {\n    }\n"));
    assert_non_null(strstr(s, "      available_categories {\n        name: \"gfx\"\n"
                              "        description: \"Graphics \xe2\x9c\x93\"\n        tags: \"slow\"\n        tags: \"\"\n"));
    assert_non_null(strstr(s, "  buffer_size_kb: 1024\n  buffer_size_kb: 0\n  buffer_size_kb: 65536\n"));
    assert_non_null(strstr(s, "  id: 18446744073709551615\n"));
    assert_non_null(strstr(s, "  start_realtime_ns: -1\n"));
    assert_non_null(strstr(s, "supports_tracing_sessions: true\n"));
    free(s);
}

static void test_round_trip_unpacked_binary(void **state)
{
    (void)state;
    /* a binary TraceConfig as a consumer would send it; print -> parse -> same bytes */
    char err[256];
    static const char text[] =
        "buffers { size_kb: 1 } buffers { size_kb: 2 fill_policy: DISCARD transfer_on_clone: false name: \"b\" }\n"
        "data_sources { config { name: \"x\" legacy_config: \"\\001\\002\" for_testing {} } "
        "producer_name_regex_filter: [\".*\", \"a|b\"] }\n"
        "lockdown_mode: LOCKDOWN_CLEAR activate_triggers: [\"t\\ta\"] trace_uuid_lsb: -9223372036854775808\n"
        "incremental_state_config { clear_period_ms: 0 } compression_type: COMPRESSION_TYPE_DEFLATE\n"
        "trigger_config { triggers { skip_probability: 0.3333333333333333 max_per_24_h: 4294967295 } }\n";
    ProtobufCMessage *m = tg_textproto_parse(TC_DESC, text, strlen(text), err, sizeof err);
    if (!m)
        fail_msg("%s", err);
    assert_print_round_trip(m);
    protobuf_c_message_free_unpacked(m, NULL);
}

static void test_unknown_fields_not_hidden(void **state)
{
    (void)state;
    /* TraceConfig: duration_ms 3, then reserved field 15 (varint 1) and 26 (bytes "hi") */
    static const uint8_t wire[] = {0x18, 0x03, 0x78, 0x01, 0xd2, 0x01, 0x02, 'h', 'i'};
    ProtobufCMessage *m = protobuf_c_message_unpack(TC_DESC, NULL, sizeof wire, wire);
    assert_non_null(m);
    char *s = tg_textproto_print(m, 0);
    assert_string_equal(s, "duration_ms: 3\n15: 1\n26: \"hi\"\n");
    free(s);
    s = tg_textproto_print(m, -1);
    assert_string_equal(s, "duration_ms: 3 15: 1 26: \"hi\"");
    /* such lines are for humans: the reader refuses them with a position */
    char err[256];
    assert_null(tg_textproto_parse(TC_DESC, s, strlen(s), err, sizeof err));
    assert_string_equal(err, "1:16: numeric field names are not supported ('15' in perfetto.protos.TraceConfig)");
    free(s);
    protobuf_c_message_free_unpacked(m, NULL);
}

static void test_print_empty_and_nested_indent(void **state)
{
    (void)state;
    Perfetto__Protos__TraceConfig tc = PERFETTO__PROTOS__TRACE_CONFIG__INIT;
    char *s = tg_textproto_print(&tc.base, 0);
    assert_string_equal(s, "");
    free(s);
    s = tg_textproto_print(&tc.base, -1);
    assert_string_equal(s, "");
    free(s);

    Perfetto__Protos__TraceConfig__IncrementalStateConfig inc = PERFETTO__PROTOS__TRACE_CONFIG__INCREMENTAL_STATE_CONFIG__INIT;
    tc.incremental_state_config = &inc;
    tc.has_lockdown_mode = 1;
    tc.lockdown_mode = 9; /* no name for it: printed as a number */
    s = tg_textproto_print(&tc.base, 3);
    assert_string_equal(s, "   lockdown_mode: 9\n   incremental_state_config {\n   }\n");
    free(s);
    assert_print_round_trip(&tc.base);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_print_trace_config),
        cmocka_unit_test(test_round_trip_tracing_service_state),
        cmocka_unit_test(test_round_trip_unpacked_binary),
        cmocka_unit_test(test_unknown_fields_not_hidden),
        cmocka_unit_test(test_print_empty_and_nested_indent),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
