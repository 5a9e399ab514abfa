/* test_gw_output_path.c: the gateway's output-path rule (gw_output_path.h) decided on the bytes a
 * client sends: who may make the service create a file, and which EnableTracing requests name
 * one, including requests written to hide it (a later empty output_path, write_into_file turned
 * off and on again, bytes protobuf-c cannot read). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "consumer_port.pb-c.h"
#include "gw.h"
#include "gw_identity.h"
#include "gw_output_path.h"

/* An EnableTracingRequest with a config naming `path` (NULL = none), write_into_file `wif`. */
static size_t enable_bytes(uint8_t *out, size_t cap, const char *path, int wif)
{
    Perfetto__Protos__TraceConfig tc = PERFETTO__PROTOS__TRACE_CONFIG__INIT;
    tc.output_path = (char *)path;
    tc.has_write_into_file = 1;
    tc.write_into_file = wif;
    Perfetto__Protos__EnableTracingRequest rq = PERFETTO__PROTOS__ENABLE_TRACING_REQUEST__INIT;
    rq.trace_config = &tc;
    size_t n = perfetto__protos__enable_tracing_request__get_packed_size(&rq);
    assert_true(n <= cap);
    return perfetto__protos__enable_tracing_request__pack(&rq, out);
}

static void test_which_requests_name_a_file(void **state)
{
    (void)state;
    uint8_t b[256];
    size_t n = enable_bytes(b, sizeof b, "/etc/cron.d/x", 1);
    assert_int_equal(tg_gw_enable_names_output_path(b, n), 1);
    /* the services ignore output_path without write_into_file, so the gateway does too */
    n = enable_bytes(b, sizeof b, "/etc/cron.d/x", 0);
    assert_int_equal(tg_gw_enable_names_output_path(b, n), 0);
    n = enable_bytes(b, sizeof b, NULL, 1);
    assert_int_equal(tg_gw_enable_names_output_path(b, n), 0);
    n = enable_bytes(b, sizeof b, "", 1);
    assert_int_equal(tg_gw_enable_names_output_path(b, n), 0);
    assert_int_equal(tg_gw_enable_names_output_path(NULL, 0), 0); /* no config at all */

    /* two configs in one request: the last one wins for the receiver, so for the gateway too */
    uint8_t two[512];
    size_t a = enable_bytes(two, sizeof two, "/etc/cron.d/x", 1);
    size_t c = enable_bytes(two + a, sizeof two - a, "", 1);
    assert_int_equal(tg_gw_enable_names_output_path(two, a + c), 0);
    a = enable_bytes(two, sizeof two, NULL, 0);
    c = enable_bytes(two + a, sizeof two - a, "/etc/cron.d/x", 1);
    assert_int_equal(tg_gw_enable_names_output_path(two, a + c), 1);

    /* truncated or ill-typed bytes cannot hide a path: they count as naming one */
    n = enable_bytes(b, sizeof b, "/etc/cron.d/x", 1);
    assert_int_equal(tg_gw_enable_names_output_path(b, n - 3), -1);
    const uint8_t wrong_type[] = {0x08, 0x01}; /* field 1 (trace_config) as a varint */
    assert_int_equal(tg_gw_enable_names_output_path(wrong_type, sizeof wrong_type), -1);
}

static void test_who_may_create_files(void **state)
{
    (void)state;
    struct tg_gw_client_info i;
    memset(&i, 0, sizeof i);
    i.has_uid = 1;
    i.uid = geteuid();
    snprintf(i.principal, sizeof i.principal, "uid:%u", (unsigned)i.uid);
    assert_int_equal(tg_gw_may_create_files(&i), 1);
    i.uid = 0;
    snprintf(i.principal, sizeof i.principal, "uid:0");
    assert_int_equal(tg_gw_may_create_files(&i), 1);
    if (geteuid() != 4321) {
        i.uid = 4321;
        snprintf(i.principal, sizeof i.principal, "uid:4321");
        assert_int_equal(tg_gw_may_create_files(&i), 0);
    }
    /* a loopback client that authenticated with a token is that token, whatever its uid */
    i.uid = geteuid();
    tg_gw_identity_token(&i, "ci", TG_GW_ROLE_ADMIN);
    assert_int_equal(tg_gw_may_create_files(&i), 0);
    tg_gw_identity_cert(&i, "/CN=root", TG_GW_ROLE_ADMIN);
    assert_int_equal(tg_gw_may_create_files(&i), 0);
    /* a principal that reads like a uid but was not the kernel's word */
    memset(&i, 0, sizeof i);
    snprintf(i.principal, sizeof i.principal, "uid:0");
    assert_int_equal(tg_gw_may_create_files(&i), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_which_requests_name_a_file),
        cmocka_unit_test(test_who_may_create_files),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
