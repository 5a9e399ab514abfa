/* test_textproto_parse.c: text format reader against the real Perfetto schemas:
 * decoded TraceConfig values, byte-exact equality with protobuf-c's pack(),
 * syntax variants, and error messages with line:column. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "consumer_port.pb-c.h"
#include "debug_annotation.pb-c.h"
#include "trace_config.pb-c.h"
#include "trace_stats.pb-c.h"
#include "tracegate/textproto.h"
#include "tracing_service_state.pb-c.h"

#define TC_DESC (&perfetto__protos__trace_config__descriptor)

static const char k_sample[] =
    "buffers { size_kb: 4096 fill_policy: RING_BUFFER }\n"
    "buffers: { size_kb: 1024, fill_policy: DISCARD }\n"
    "data_sources { config { name: \"track_event\" target_buffer: 0 buffer_exhausted_policy: "
    "BUFFER_EXHAUSTED_STALL_THEN_DROP track_event_config { enabled_categories: "
    "\"*\" disabled_categories: [\"slow\", \"debug\"] } } producer_name_filter: \"demo\" }\n"
    "duration_ms: 2500  # comment\n"
    "write_into_file: true\n"
    "max_file_size_bytes: 0xFFFFFFFFFF\n"
    "producers < producer_name: \"p\" shm_size_kb: 512 >\n"
    "trigger_config { trigger_mode: STOP_TRACING trigger_timeout_ms: 1000 triggers { name: \"t1\" stop_delay_ms: 5 } "
    "}\n"
    "builtin_data_sources { disable_clock_snapshotting: true primary_trace_clock: BUILTIN_CLOCK_MONOTONIC }\n"
    "unique_session_name: 'abc' \"def\"\n";

static ProtobufCMessage *parse_ok(const ProtobufCMessageDescriptor *desc, const char *text)
{
    char err[256] = "untouched";
    ProtobufCMessage *m = tg_textproto_parse(desc, text, strlen(text), err, sizeof err);
    if (!m)
        fail_msg("parse failed: %s\n--- input ---\n%s", err, text);
    return m;
}

static void expect_error(const ProtobufCMessageDescriptor *desc, const char *text, const char *want)
{
    char err[256] = "";
    ProtobufCMessage *m = tg_textproto_parse(desc, text, strlen(text), err, sizeof err);
    if (m) {
        protobuf_c_message_free_unpacked(m, NULL);
        fail_msg("parse of '%s' unexpectedly succeeded", text);
    }
    if (strcmp(err, want) != 0)
        fail_msg("input '%s':\n  got  '%s'\n  want '%s'", text, err, want);
}

static void expect_bytes(const ProtobufCMessageDescriptor *desc, const char *text, const uint8_t *want,
                         size_t want_len)
{
    char err[256] = "";
    uint8_t *bin = NULL;
    size_t n = 0;
    if (tg_textproto_to_binary(desc, text, strlen(text), &bin, &n, err, sizeof err) != 0)
        fail_msg("to_binary('%s') failed: %s", text, err);
    assert_non_null(bin);
    if (n != want_len || memcmp(bin, want, n) != 0) {
        fprintf(stderr, "got:");
        for (size_t i = 0; i < n; i++)
            fprintf(stderr, " %02x", bin[i]);
        fprintf(stderr, "\n");
        free(bin);
        fail_msg("unexpected encoding for '%s'", text);
    }
    free(bin);
}

static void test_trace_config_sample(void **state)
{
    (void)state;
    Perfetto__Protos__TraceConfig *tc = (Perfetto__Protos__TraceConfig *)parse_ok(TC_DESC, k_sample);

    assert_int_equal(tc->n_buffers, 2);
    assert_true(tc->buffers[0]->has_size_kb);
    assert_int_equal(tc->buffers[0]->size_kb, 4096);
    assert_true(tc->buffers[0]->has_fill_policy);
    assert_int_equal(tc->buffers[0]->fill_policy, PERFETTO__PROTOS__TRACE_CONFIG__BUFFER_CONFIG__FILL_POLICY__RING_BUFFER);
    assert_int_equal(tc->buffers[1]->size_kb, 1024);
    assert_int_equal(tc->buffers[1]->fill_policy, PERFETTO__PROTOS__TRACE_CONFIG__BUFFER_CONFIG__FILL_POLICY__DISCARD);

    assert_int_equal(tc->n_data_sources, 1);
    Perfetto__Protos__TraceConfig__DataSource *ds = tc->data_sources[0];
    assert_non_null(ds->config);
    assert_string_equal(ds->config->name, "track_event");
    assert_true(ds->config->has_target_buffer);
    assert_int_equal(ds->config->target_buffer, 0);
    assert_true(ds->config->has_buffer_exhausted_policy); /* what the producer library reads (service.md) */
    assert_int_equal(ds->config->buffer_exhausted_policy,
                     PERFETTO__PROTOS__DATA_SOURCE_CONFIG__BUFFER_EXHAUSTED_POLICY__BUFFER_EXHAUSTED_STALL_THEN_DROP);
    assert_non_null(ds->config->track_event_config);
    assert_int_equal(ds->config->track_event_config->n_enabled_categories, 1);
    assert_string_equal(ds->config->track_event_config->enabled_categories[0], "*");
    assert_int_equal(ds->config->track_event_config->n_disabled_categories, 2);
    assert_string_equal(ds->config->track_event_config->disabled_categories[0], "slow");
    assert_string_equal(ds->config->track_event_config->disabled_categories[1], "debug");
    assert_int_equal(ds->n_producer_name_filter, 1);
    assert_string_equal(ds->producer_name_filter[0], "demo");

    assert_true(tc->has_duration_ms);
    assert_int_equal(tc->duration_ms, 2500);
    assert_true(tc->has_write_into_file);
    assert_true(tc->write_into_file);
    assert_true(tc->has_max_file_size_bytes);
    assert_true(tc->max_file_size_bytes == 0xFFFFFFFFFFull);

    assert_int_equal(tc->n_producers, 1);
    assert_string_equal(tc->producers[0]->producer_name, "p");
    assert_true(tc->producers[0]->has_shm_size_kb);
    assert_int_equal(tc->producers[0]->shm_size_kb, 512);

    assert_non_null(tc->trigger_config);
    assert_int_equal(tc->trigger_config->trigger_mode,
                     PERFETTO__PROTOS__TRACE_CONFIG__TRIGGER_CONFIG__TRIGGER_MODE__STOP_TRACING);
    assert_int_equal(tc->trigger_config->trigger_timeout_ms, 1000);
    assert_int_equal(tc->trigger_config->n_triggers, 1);
    assert_string_equal(tc->trigger_config->triggers[0]->name, "t1");
    assert_int_equal(tc->trigger_config->triggers[0]->stop_delay_ms, 5);

    assert_non_null(tc->builtin_data_sources);
    assert_true(tc->builtin_data_sources->has_disable_clock_snapshotting);
    assert_true(tc->builtin_data_sources->disable_clock_snapshotting);
    assert_true(tc->builtin_data_sources->has_primary_trace_clock);
    assert_int_equal(tc->builtin_data_sources->primary_trace_clock, PERFETTO__PROTOS__BUILTIN_CLOCK__BUILTIN_CLOCK_MONOTONIC);

    assert_string_equal(tc->unique_session_name, "abcdef");

    /* nothing else is set */
    assert_false(tc->has_lockdown_mode);
    assert_false(tc->has_flush_period_ms);
    assert_null(tc->guardrail_overrides);
    assert_null(tc->output_path);
    assert_int_equal(tc->base.n_unknown_fields, 0);
    protobuf_c_message_free_unpacked(&tc->base, NULL);
}

/* The same EnableTracingRequest built in C and packed by protobuf-c must give
 * exactly the bytes of the text parse, even with fields out of order. */
static void test_enable_tracing_request_matches_pack(void **state)
{
    (void)state;
    static const char text[] =
        "attach_notification_only: false\n"
        "trace_config {\n"
        "  unique_session_name: \"sess\"\n"
        "  duration_ms: 10000\n"
        "  trigger_config { triggers { stop_delay_ms: 7 name: \"crash\" } trigger_mode: START_TRACING }\n"
        "  buffers { fill_policy: RING_BUFFER size_kb: 65536 }\n"
        "  data_sources { config { name: \"linux.ftrace\" } }\n"
        "  data_sources { config { name: \"track_event\" track_event_config { enabled_categories: [\"a\", \"b\"] }\n"
        "                 tracing_session_id: 18446744073709551615 } }\n"
        "  buffers { size_kb: 4 }\n"
        "  trace_uuid_msb: -42 bugreport_score: -1\n"
        "  activate_triggers: \"x\" activate_triggers: \"y\"\n"
        "}\n";

    Perfetto__Protos__TraceConfig__BufferConfig b0 = PERFETTO__PROTOS__TRACE_CONFIG__BUFFER_CONFIG__INIT;
    b0.has_size_kb = 1;
    b0.size_kb = 65536;
    b0.has_fill_policy = 1;
    b0.fill_policy = PERFETTO__PROTOS__TRACE_CONFIG__BUFFER_CONFIG__FILL_POLICY__RING_BUFFER;
    Perfetto__Protos__TraceConfig__BufferConfig b1 = PERFETTO__PROTOS__TRACE_CONFIG__BUFFER_CONFIG__INIT;
    b1.has_size_kb = 1;
    b1.size_kb = 4;
    Perfetto__Protos__TraceConfig__BufferConfig *bufs[] = {&b0, &b1};

    Perfetto__Protos__DataSourceConfig c0 = PERFETTO__PROTOS__DATA_SOURCE_CONFIG__INIT;
    c0.name = (char *)"linux.ftrace";
    Perfetto__Protos__TraceConfig__DataSource d0 = PERFETTO__PROTOS__TRACE_CONFIG__DATA_SOURCE__INIT;
    d0.config = &c0;
    char *cats[] = {(char *)"a", (char *)"b"};
    Perfetto__Protos__TrackEventConfig te = PERFETTO__PROTOS__TRACK_EVENT_CONFIG__INIT;
    te.n_enabled_categories = 2;
    te.enabled_categories = cats;
    Perfetto__Protos__DataSourceConfig c1 = PERFETTO__PROTOS__DATA_SOURCE_CONFIG__INIT;
    c1.name = (char *)"track_event";
    c1.track_event_config = &te;
    c1.has_tracing_session_id = 1;
    c1.tracing_session_id = UINT64_MAX;
    Perfetto__Protos__TraceConfig__DataSource d1 = PERFETTO__PROTOS__TRACE_CONFIG__DATA_SOURCE__INIT;
    d1.config = &c1;
    Perfetto__Protos__TraceConfig__DataSource *dss[] = {&d0, &d1};

    Perfetto__Protos__TraceConfig__TriggerConfig__Trigger trg = PERFETTO__PROTOS__TRACE_CONFIG__TRIGGER_CONFIG__TRIGGER__INIT;
    trg.name = (char *)"crash";
    trg.has_stop_delay_ms = 1;
    trg.stop_delay_ms = 7;
    Perfetto__Protos__TraceConfig__TriggerConfig__Trigger *trgs[] = {&trg};
    Perfetto__Protos__TraceConfig__TriggerConfig tcfg = PERFETTO__PROTOS__TRACE_CONFIG__TRIGGER_CONFIG__INIT;
    tcfg.has_trigger_mode = 1;
    tcfg.trigger_mode = PERFETTO__PROTOS__TRACE_CONFIG__TRIGGER_CONFIG__TRIGGER_MODE__START_TRACING;
    tcfg.n_triggers = 1;
    tcfg.triggers = trgs;

    char *acts[] = {(char *)"x", (char *)"y"};
    Perfetto__Protos__TraceConfig tc = PERFETTO__PROTOS__TRACE_CONFIG__INIT;
    tc.n_buffers = 2;
    tc.buffers = bufs;
    tc.n_data_sources = 2;
    tc.data_sources = dss;
    tc.has_duration_ms = 1;
    tc.duration_ms = 10000;
    tc.trigger_config = &tcfg;
    tc.unique_session_name = (char *)"sess";
    tc.has_trace_uuid_msb = 1;
    tc.trace_uuid_msb = -42;
    tc.has_bugreport_score = 1;
    tc.bugreport_score = -1;
    tc.n_activate_triggers = 2;
    tc.activate_triggers = acts;

    Perfetto__Protos__EnableTracingRequest req = PERFETTO__PROTOS__ENABLE_TRACING_REQUEST__INIT;
    req.trace_config = &tc;
    req.has_attach_notification_only = 1;
    req.attach_notification_only = 0;

    size_t want_len = protobuf_c_message_get_packed_size(&req.base);
    uint8_t *want = malloc(want_len);
    assert_non_null(want);
    assert_int_equal(protobuf_c_message_pack(&req.base, want), want_len);

    char err[256];
    uint8_t *got = NULL;
    size_t got_len = 0;
    int rc = tg_textproto_to_binary(&perfetto__protos__enable_tracing_request__descriptor, text, strlen(text), &got,
                                    &got_len, err, sizeof err);
    if (rc != 0)
        fail_msg("to_binary: %s", err);
    assert_int_equal(got_len, want_len);
    assert_memory_equal(got, want, want_len);

    /* and tg_textproto_parse() gives a message that packs to the same bytes */
    ProtobufCMessage *m = parse_ok(&perfetto__protos__enable_tracing_request__descriptor, text);
    assert_int_equal(protobuf_c_message_get_packed_size(m), want_len);
    uint8_t *again = malloc(want_len);
    assert_non_null(again);
    protobuf_c_message_pack(m, again);
    assert_memory_equal(again, want, want_len);
    free(again);
    protobuf_c_message_free_unpacked(m, NULL);
    free(got);
    free(want);
}

static void test_syntax_variants(void **state)
{
    (void)state;
    static const char text[] =
        "# leading comment\n"
        "buffers: < size_kb: 0x10; fill_policy: 2 >,\n"
        "buffers {}\n"
        "buffers: [ { size_kb: 010 }, < size_kb: 3 > ];\n"
        "data_sources: [] # empty list adds nothing\n"
        "activate_triggers: [ 'a\\'b', \"c\\\"d\" , 'e' 'f' ]\n"
        "activate_triggers: \"\\x41\\101\\n\\t\\\\\\u00e9\"\n"
        "write_into_file: t enable_extra_guardrails: False deferred_start: 1 notify_traceur: 0\n"
        "lockdown_mode: 2\n"
        "trace_uuid_msb: - 9223372036854775808\n"
        "trace_uuid_lsb: 9223372036854775807\n"
        "bugreport_score: -0x7fffffff\n"
        "trigger_config{triggers{skip_probability:.5}}\n"
        "compression { zstd { level: -3 } deflate {} }";
    Perfetto__Protos__TraceConfig *tc = (Perfetto__Protos__TraceConfig *)parse_ok(TC_DESC, text);
    assert_int_equal(tc->n_buffers, 4);
    assert_int_equal(tc->buffers[0]->size_kb, 16);
    assert_int_equal(tc->buffers[0]->fill_policy, 2);
    assert_false(tc->buffers[1]->has_size_kb);
    assert_int_equal(tc->buffers[2]->size_kb, 8); /* octal */
    assert_int_equal(tc->buffers[3]->size_kb, 3);
    assert_int_equal(tc->n_data_sources, 0);
    assert_int_equal(tc->n_activate_triggers, 4);
    assert_string_equal(tc->activate_triggers[0], "a'b");
    assert_string_equal(tc->activate_triggers[1], "c\"d");
    assert_string_equal(tc->activate_triggers[2], "ef");
    assert_string_equal(tc->activate_triggers[3], "AA\n\t\\\xc3\xa9");
    assert_true(tc->has_write_into_file && tc->write_into_file);
    assert_true(tc->has_enable_extra_guardrails && !tc->enable_extra_guardrails);
    assert_true(tc->has_deferred_start && tc->deferred_start);
    assert_true(tc->has_notify_traceur && !tc->notify_traceur);
    assert_int_equal(tc->lockdown_mode, PERFETTO__PROTOS__TRACE_CONFIG__LOCKDOWN_MODE_OPERATION__LOCKDOWN_SET);
    assert_true(tc->trace_uuid_msb == INT64_MIN);
    assert_true(tc->trace_uuid_lsb == INT64_MAX);
    assert_int_equal(tc->bugreport_score, -0x7fffffff);
    assert_true(tc->trigger_config->triggers[0]->skip_probability == 0.5);
    assert_int_equal(tc->compression->zstd->level, -3);
    assert_non_null(tc->compression->deflate);
    protobuf_c_message_free_unpacked(&tc->base, NULL);

    /* an empty document (or only comments) is an empty message */
    ProtobufCMessage *m = parse_ok(TC_DESC, "  # nothing\n\n");
    assert_int_equal(protobuf_c_message_get_packed_size(m), 0);
    protobuf_c_message_free_unpacked(m, NULL);
    m = tg_textproto_parse(TC_DESC, NULL, 0, NULL, 0);
    assert_non_null(m);
    protobuf_c_message_free_unpacked(m, NULL);
}

/* Input that is not NUL-terminated: the reader must stop at len. */
static void test_not_nul_terminated(void **state)
{
    (void)state;
    char buf[32];
    memcpy(buf, "duration_ms: 123456789", 22);
    memset(buf + 22, '9', sizeof buf - 22);
    ProtobufCMessage *m = tg_textproto_parse(TC_DESC, buf, 17, NULL, 0); /* "duration_ms: 1234" */
    assert_non_null(m);
    assert_int_equal(((Perfetto__Protos__TraceConfig *)m)->duration_ms, 1234);
    protobuf_c_message_free_unpacked(m, NULL);
}

static void test_wire_encoding(void **state)
{
    (void)state;
    /* repeated scalars are unpacked without [packed = true] ... */
    static const uint8_t unpacked[] = {0x32, 0x07, 0x28, 0x01, 0x28, 0x02, 0x28, 0x80, 0x01};
    expect_bytes(&perfetto__protos__tracing_service_state__descriptor,
                 "tracing_sessions { buffer_size_kb: [1, 2] buffer_size_kb: 128 }", unpacked, sizeof unpacked);
    /* ... and packed with it */
    static const uint8_t packed[] = {0x12, 0x05, 0x01, 0x80, 0x01, 0x00, 0x07};
    expect_bytes(&perfetto__protos__trace_stats__writer_stats__descriptor,
                 "chunk_payload_histogram_counts: [1, 128, 0] chunk_payload_histogram_counts: 7", packed,
                 sizeof packed);
    /* negative int32 is sign-extended to ten bytes, like protobuf-c does */
    static const uint8_t neg[] = {0xf0, 0x01, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01};
    expect_bytes(TC_DESC, "bugreport_score: -1", neg, sizeof neg);
    /* double is fixed64 little-endian */
    static const uint8_t dbl[] = {0x29, 0, 0, 0, 0, 0, 0, 0xf8, 0x3f};
    expect_bytes(&perfetto__protos__debug_annotation__descriptor, "double_value: 1.5", dbl, sizeof dbl);
    /* fields come out in field-number order whatever the text order */
    expect_bytes(TC_DESC, "duration_ms: 5 buffers { size_kb: 1 }", (const uint8_t[]){0x0a, 0x02, 0x08, 0x01, 0x18, 0x05}, 6);
    expect_bytes(&perfetto__protos__trace_config__buffer_config__descriptor, "fill_policy: 1 size_kb: 1",
                 (const uint8_t[]){0x08, 0x01, 0x20, 0x01}, 4);
    /* empty message: success with a non-NULL zero-length buffer */
    expect_bytes(TC_DESC, "", (const uint8_t *)"", 0);
}

static void test_oneofs_and_recursion(void **state)
{
    (void)state;
    const ProtobufCMessageDescriptor *da = &perfetto__protos__debug_annotation__descriptor;
    /* members of different oneofs combine */
    Perfetto__Protos__DebugAnnotation *a = (Perfetto__Protos__DebugAnnotation *)parse_ok(
        da, "name: \"k\" string_value: \"v\" proto_type_name_iid: 3 dict_entries { name_iid: 4 int_value: -5 }");
    assert_int_equal(a->name_field_case, PERFETTO__PROTOS__DEBUG_ANNOTATION__NAME_FIELD_NAME);
    assert_string_equal(a->name, "k");
    assert_int_equal(a->value_case, PERFETTO__PROTOS__DEBUG_ANNOTATION__VALUE_STRING_VALUE);
    assert_string_equal(a->string_value, "v");
    assert_int_equal(a->proto_type_descriptor_case,
                     PERFETTO__PROTOS__DEBUG_ANNOTATION__PROTO_TYPE_DESCRIPTOR_PROTO_TYPE_NAME_IID);
    assert_int_equal(a->n_dict_entries, 1);
    assert_int_equal(a->dict_entries[0]->int_value, -5);
    protobuf_c_message_free_unpacked(&a->base, NULL);

    expect_error(da, "name_iid: 1\nname: \"x\"",
                 "2:1: field 'name' conflicts with 'name_iid': both are members of the same oneof");

    /* nesting limit */
    size_t depth = TG_TEXTPROTO_MAX_DEPTH;
    char *text = malloc(depth * 16 + 64);
    assert_non_null(text);
    for (int extra = 0; extra <= 1; extra++) {
        size_t n = depth + (size_t)extra, o = 0;
        for (size_t i = 0; i < n; i++)
            o += (size_t)sprintf(text + o, "dict_entries {");
        for (size_t i = 0; i < n; i++)
            text[o++] = '}';
        text[o] = '\0';
        char err[256] = "";
        ProtobufCMessage *m = tg_textproto_parse(da, text, o, err, sizeof err);
        if (!extra) {
            if (!m)
                fail_msg("depth %zu rejected: %s", n, err);
            protobuf_c_message_free_unpacked(m, NULL);
        } else {
            assert_null(m);
            char want[128];
            snprintf(want, sizeof want, "1:%zu: messages nested more than %d levels deep", 14 * depth + 14,
                     TG_TEXTPROTO_MAX_DEPTH);
            assert_string_equal(err, want);
        }
    }
    free(text);
}

static void test_errors(void **state)
{
    (void)state;
    expect_error(TC_DESC, "duration_ms: 1\n\n    bufers { size_kb: 1 }",
                 "3:5: unknown field 'bufers' in perfetto.protos.TraceConfig");
    expect_error(TC_DESC, "buffers {\n  size_kb: 1\n  fill_policy: RING }",
                 "3:16: unknown value 'RING' for enum perfetto.protos.TraceConfig.BufferConfig.FillPolicy (field "
                 "'fill_policy')");
    expect_error(TC_DESC, "buffers { fil_policy: DISCARD }",
                 "1:11: unknown field 'fil_policy' in perfetto.protos.TraceConfig.BufferConfig");
    expect_error(TC_DESC, "unique_session_name: \"abc\nduration_ms: 1", "1:22: unterminated string");
    expect_error(TC_DESC, "unique_session_name: 'abc", "1:22: unterminated string");
    expect_error(TC_DESC, "unique_session_name: \"abc\\", "1:22: unterminated string");
    expect_error(TC_DESC, "duration_ms: \"5\"", "1:14: expected an integer for uint32 field 'duration_ms', got a string");
    expect_error(TC_DESC, "duration_ms: 2.5", "1:14: expected an integer for uint32 field 'duration_ms', got '2.5'");
    expect_error(TC_DESC, "unique_session_name: 5",
                 "1:22: expected a quoted string for string field 'unique_session_name', got '5'");
    expect_error(TC_DESC, "buffers: 5", "1:10: expected '{' or '<' to start message field 'buffers', got '5'");
    expect_error(TC_DESC, "duration_ms { }", "1:13: expected ':' after field 'duration_ms', got '{'");
    expect_error(TC_DESC, "write_into_file: yes", "1:18: invalid value 'yes' for bool field 'write_into_file'");
    expect_error(TC_DESC, "duration_ms: 4294967296",
                 "1:14: value 4294967296 out of range for uint32 field 'duration_ms'");
    expect_error(TC_DESC, "duration_ms: 0x100000000",
                 "1:14: value 0x100000000 out of range for uint32 field 'duration_ms'");
    expect_error(TC_DESC, "duration_ms: -1", "1:14: value -1 out of range for uint32 field 'duration_ms'");
    expect_error(TC_DESC, "max_file_size_bytes: 18446744073709551616",
                 "1:22: value 18446744073709551616 out of range for uint64 field 'max_file_size_bytes'");
    expect_error(TC_DESC, "bugreport_score: 2147483648",
                 "1:18: value 2147483648 out of range for int32 field 'bugreport_score'");
    expect_error(TC_DESC, "trace_uuid_msb: -9223372036854775809",
                 "1:17: value -9223372036854775809 out of range for int64 field 'trace_uuid_msb'");
    expect_error(TC_DESC, "duration_ms: 1 duration_ms: 2",
                 "1:16: non-repeated field 'duration_ms' is specified more than once");
    expect_error(TC_DESC, "trigger_config {} trigger_config {}",
                 "1:19: non-repeated field 'trigger_config' is specified more than once");
    expect_error(TC_DESC, "duration_ms: [1]", "1:14: list value for non-repeated field 'duration_ms'");
    expect_error(TC_DESC, "activate_triggers: [\"a\" \"b\" 1]",
                 "1:29: expected ',' or ']' in list for field 'activate_triggers', got '1'");
    expect_error(TC_DESC, "activate_triggers: [\"a\"; \"b\"]",
                 "1:24: expected ',' or ']' in list for field 'activate_triggers', got ';'");
    expect_error(TC_DESC, "buffers {\n size_kb: 1\n", "3:1: unexpected end of input: missing '}' to close 'buffers' opened at 1:9");
    expect_error(TC_DESC, "buffers < size_kb: 1 }", "1:22: expected '>' to close 'buffers' opened at 1:9, got '}'");
    expect_error(TC_DESC, "duration_ms: 1 }", "1:16: unexpected '}' at top level");
    expect_error(TC_DESC, "duration_ms: 09", "1:14: invalid integer '09'");
    expect_error(TC_DESC, "duration_ms: 12abc", "1:14: invalid number '12abc'");
    expect_error(TC_DESC, "duration_ms: 0xg", "1:14: invalid hex number '0xg'");
    expect_error(TC_DESC, "unique_session_name: \"a\\qb\"", "1:24: invalid escape sequence");
    expect_error(TC_DESC, "unique_session_name: \"a\\x\"", "1:24: \\x escape without hex digits");
    expect_error(TC_DESC, "unique_session_name: \"\\777\"", "1:23: octal escape out of range");
    expect_error(TC_DESC, "unique_session_name: \"\\ud800\"", "1:23: invalid unicode code point in escape");
    expect_error(TC_DESC, "unique_session_name: \"a\\0b\"",
                 "1:22: string field 'unique_session_name' cannot contain a NUL byte (protobuf-c strings are C "
                 "strings)");
    expect_error(TC_DESC, "duration_ms: 1 @", "1:16: unexpected character '@'");
    expect_error(TC_DESC, "duration_ms: 1\n\x01", "2:1: unexpected byte 0x01");
    expect_error(TC_DESC, "[perfetto.protos.ext]: 1", "1:1: extension and Any fields ('[name]') are not supported");
    expect_error(TC_DESC, "3: 1", "1:1: numeric field names are not supported ('3' in perfetto.protos.TraceConfig)");
    expect_error(TC_DESC, "\"duration_ms\": 1", "1:1: expected a field name, got a string");
    expect_error(TC_DESC, "duration_ms:", "1:13: expected an integer for uint32 field 'duration_ms', got end of input");
    expect_error(TC_DESC, "buffers { fill_policy: -RING_BUFFER }",
                 "1:24: unknown value '-RING_BUFFER' for enum perfetto.protos.TraceConfig.BufferConfig.FillPolicy "
                 "(field 'fill_policy')");
    expect_error(TC_DESC, "buffers { fill_policy: 2147483648 }",
                 "1:24: value 2147483648 out of range for enum field 'fill_policy'");
    expect_error(TC_DESC, "trigger_config { triggers { skip_probability: \"x\" } }",
                 "1:47: expected a number for double field 'skip_probability', got a string");
    expect_error(TC_DESC, "trigger_config { triggers { skip_probability: abc } }",
                 "1:47: expected a number for double field 'skip_probability', got 'abc'");
}

static void test_error_buffer_handling(void **state)
{
    (void)state;
    /* small buffers are truncated and NUL-terminated; NULL err is fine */
    char err[8];
    memset(err, 'x', sizeof err);
    assert_null(tg_textproto_parse(TC_DESC, "bufers {}", 9, err, sizeof err));
    assert_string_equal(err, "1:1: un");
    assert_null(tg_textproto_parse(TC_DESC, "bufers {}", 9, NULL, 0));
    uint8_t *out = (uint8_t *)1;
    size_t n = 99;
    assert_int_equal(tg_textproto_to_binary(TC_DESC, "bufers {}", 9, &out, &n, NULL, 0), -1);
    assert_null(out);
    assert_int_equal(n, 0);
    assert_int_equal(tg_textproto_to_binary(NULL, "", 0, &out, &n, err, sizeof err), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_trace_config_sample),
        cmocka_unit_test(test_enable_tracing_request_matches_pack),
        cmocka_unit_test(test_syntax_variants),
        cmocka_unit_test(test_not_nul_terminated),
        cmocka_unit_test(test_wire_encoding),
        cmocka_unit_test(test_oneofs_and_recursion),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_error_buffer_handling),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
