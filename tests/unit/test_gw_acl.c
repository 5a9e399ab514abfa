/* test_gw_acl.c: roles (parsing, names, formatting) and the gateway's per-method access policy:
 * observer, recorder, producer and admin against ConsumerPort, ProducerPort, RelayPort, the
 * gateway-local services and unknown services; binding rules. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "gw.h"
#include "gw_bridge.h"

static const char *const k_consumer[] = {"EnableTracing", "DisableTracing",      "ReadBuffers",
                                         "FreeBuffers",   "Flush",               "StartTracing",
                                         "ChangeTraceConfig", "Detach",          "Attach",
                                         "GetTraceStats", "ObserveEvents",       "QueryServiceState",
                                         "QueryCapabilities", "SaveTraceForBugreport", "CloneSession"};
static const char *const k_producer[] = {"InitializeConnection", "RegisterDataSource", "CommitData",
                                         "GetAsyncCommand", "Sync"};

static int is_observer_method(const char *m)
{
    return !strcmp(m, "QueryServiceState") || !strcmp(m, "QueryCapabilities") || !strcmp(m, "GetTraceStats") ||
           !strcmp(m, "ObserveEvents");
}

static void test_roles_parse(void **state)
{
    (void)state;
    assert_int_equal(tg_gw_roles_parse("observer"), TG_GW_ROLE_OBSERVER);
    assert_int_equal(tg_gw_roles_parse("recorder,producer"), TG_GW_ROLE_RECORDER | TG_GW_ROLE_PRODUCER);
    assert_int_equal(tg_gw_roles_parse(" admin , observer "), TG_GW_ROLE_ADMIN | TG_GW_ROLE_OBSERVER);
    assert_int_equal(tg_gw_roles_parse("ADMIN"), TG_GW_ROLE_ADMIN);
    assert_int_equal(tg_gw_roles_parse(""), 0);
    assert_int_equal(tg_gw_roles_parse("root"), 0);
    assert_int_equal(tg_gw_roles_parse("observer,"), 0);
    assert_int_equal(tg_gw_roles_parse("observer,,admin"), 0);
    assert_int_equal(tg_gw_roles_parse("observer admin"), 0);
    assert_int_equal(tg_gw_roles_parse("adminx"), 0);
    assert_int_equal(tg_gw_roles_parse(NULL), 0);
    assert_string_equal(tg_gw_role_name(TG_GW_ROLE_RECORDER), "recorder");
    assert_string_equal(tg_gw_role_name(0), "none");
    /* adb: the /adb WebSocket only; it opens no IPC method */
    assert_int_equal(tg_gw_roles_parse("adb,admin"), TG_GW_ROLE_ADB | TG_GW_ROLE_ADMIN);
    assert_string_equal(tg_gw_role_name(TG_GW_ROLE_ADB), "adb");
    assert_false(tg_gw_acl_allows(TG_GW_ROLE_ADB, "ConsumerPort", "QueryServiceState"));
    assert_false(tg_gw_acl_allows(TG_GW_ROLE_ADB, "ProducerPort", "InitializeConnection"));
    /* listing a node's ADB devices goes through its ADB server: the adb role, nothing less */
    assert_true(tg_gw_acl_allows(TG_GW_ROLE_ADB, "TracegateFleet", "AdbDevices"));
    assert_true(tg_gw_acl_allows(TG_GW_ROLE_ADMIN, "TracegateFleet", "AdbDevices"));
    assert_false(tg_gw_acl_allows(TG_GW_ROLE_RECORDER | TG_GW_ROLE_OBSERVER | TG_GW_ROLE_PRODUCER, "TracegateFleet",
                                  "AdbDevices"));
    assert_true(tg_gw_acl_allows(TG_GW_ROLE_OBSERVER, "TracegateFleet", "ListNodes"));
    /* a node's spans reveal request paths: the spans role or admin, nothing less */
    assert_int_equal(tg_gw_roles_parse("spans"), TG_GW_ROLE_SPANS);
    assert_string_equal(tg_gw_role_name(TG_GW_ROLE_SPANS), "spans");
    assert_true(tg_gw_acl_allows(TG_GW_ROLE_SPANS, "TracegateFleet", "Spans"));
    assert_true(tg_gw_acl_allows(TG_GW_ROLE_ADMIN, "TracegateFleet", "Spans"));
    assert_true(tg_gw_acl_may_bind(TG_GW_ROLE_SPANS, "TracegateFleet"));
    assert_false(tg_gw_acl_allows(TG_GW_ROLE_RECORDER | TG_GW_ROLE_OBSERVER | TG_GW_ROLE_PRODUCER | TG_GW_ROLE_ADB,
                                  "TracegateFleet", "Spans"));
    assert_false(tg_gw_acl_allows(TG_GW_ROLE_SPANS, "TracegateFleet", "AdbDevices"));
    assert_true(tg_gw_acl_allows(TG_GW_ROLE_SPANS, "TracegateFleet", "ListNodes"));
    assert_false(tg_gw_acl_allows(TG_GW_ROLE_SPANS, "TracegateFleet", "Route"));
    assert_false(tg_gw_acl_allows(TG_GW_ROLE_SPANS, "ConsumerPort", "QueryServiceState"));
    assert_false(tg_gw_acl_may_bind(TG_GW_ROLE_SPANS, "ConsumerPort"));
    char buf[64];
    tg_gw_roles_format(TG_GW_ROLE_OBSERVER | TG_GW_ROLE_ADMIN, buf, sizeof buf);
    assert_string_equal(buf, "observer,admin");
    tg_gw_roles_format(0, buf, sizeof buf);
    assert_string_equal(buf, "none");
}

static void test_consumer_methods(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof k_consumer / sizeof k_consumer[0]; i++) {
        const char *m = k_consumer[i];
        assert_int_equal(tg_gw_acl_allows(TG_GW_ROLE_OBSERVER, "ConsumerPort", m), is_observer_method(m));
        assert_true(tg_gw_acl_allows(TG_GW_ROLE_RECORDER, "ConsumerPort", m));
        assert_true(tg_gw_acl_allows(TG_GW_ROLE_ADMIN, "ConsumerPort", m));
        assert_false(tg_gw_acl_allows(TG_GW_ROLE_PRODUCER, "ConsumerPort", m));
        assert_false(tg_gw_acl_allows(TG_GW_ROLE_NONE, "ConsumerPort", m));
    }
    /* a method added to ConsumerPort later is not an observer method */
    assert_false(tg_gw_acl_allows(TG_GW_ROLE_OBSERVER, "ConsumerPort", "SomeFutureMethod"));
    assert_true(tg_gw_acl_allows(TG_GW_ROLE_RECORDER, "ConsumerPort", "SomeFutureMethod"));
    /* names are exact */
    assert_false(tg_gw_acl_allows(TG_GW_ROLE_OBSERVER, "ConsumerPort", "queryservicestate"));
    assert_false(tg_gw_acl_allows(TG_GW_ROLE_OBSERVER, "ConsumerPort", "QueryServiceStateX"));
    assert_false(tg_gw_acl_allows(TG_GW_ROLE_RECORDER, "ConsumerPort", ""));
    assert_false(tg_gw_acl_allows(TG_GW_ROLE_RECORDER, "ConsumerPort", NULL));
}

static void test_producer_and_others(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof k_producer / sizeof k_producer[0]; i++) {
        assert_true(tg_gw_acl_allows(TG_GW_ROLE_PRODUCER, "ProducerPort", k_producer[i]));
        assert_true(tg_gw_acl_allows(TG_GW_ROLE_ADMIN, "ProducerPort", k_producer[i]));
        assert_false(tg_gw_acl_allows(TG_GW_ROLE_RECORDER, "ProducerPort", k_producer[i]));
        assert_false(tg_gw_acl_allows(TG_GW_ROLE_OBSERVER, "ProducerPort", k_producer[i]));
    }
    /* RelayPort and unknown services: admin only */
    assert_false(tg_gw_acl_allows(TG_GW_ROLE_PRODUCER | TG_GW_ROLE_RECORDER, "RelayPort", "InitRelay"));
    assert_true(tg_gw_acl_allows(TG_GW_ROLE_ADMIN, "RelayPort", "InitRelay"));
    assert_false(tg_gw_acl_allows(TG_GW_ROLE_RECORDER, "Mystery", "Do"));
    assert_true(tg_gw_acl_allows(TG_GW_ROLE_ADMIN, "Mystery", "Do"));
    /* gateway-local services */
    assert_true(tg_gw_acl_allows(TG_GW_ROLE_NONE, TG_GW_SVC_AUTH, "Authenticate"));
    assert_false(tg_gw_acl_allows(TG_GW_ROLE_ADMIN, TG_GW_SVC_AUTH, "Other"));
    assert_true(tg_gw_acl_allows(TG_GW_ROLE_RECORDER, TG_GW_SVC_SESSION, "Resume"));
    assert_false(tg_gw_acl_allows(TG_GW_ROLE_OBSERVER, TG_GW_SVC_SESSION, "Resume"));
    assert_false(tg_gw_acl_allows(TG_GW_ROLE_NONE, TG_GW_SVC_SESSION, "GetResumeToken"));
}

static void test_bind(void **state)
{
    (void)state;
    assert_true(tg_gw_acl_may_bind(TG_GW_ROLE_NONE, TG_GW_SVC_AUTH));
    assert_false(tg_gw_acl_may_bind(TG_GW_ROLE_NONE, "ConsumerPort"));
    assert_true(tg_gw_acl_may_bind(TG_GW_ROLE_OBSERVER, "ConsumerPort"));
    assert_false(tg_gw_acl_may_bind(TG_GW_ROLE_OBSERVER, "ProducerPort"));
    assert_true(tg_gw_acl_may_bind(TG_GW_ROLE_PRODUCER, "ProducerPort"));
    assert_false(tg_gw_acl_may_bind(TG_GW_ROLE_PRODUCER, "ConsumerPort"));
    assert_false(tg_gw_acl_may_bind(TG_GW_ROLE_RECORDER, "RelayPort"));
    assert_true(tg_gw_acl_may_bind(TG_GW_ROLE_ADMIN, "RelayPort"));
    assert_false(tg_gw_acl_may_bind(TG_GW_ROLE_OBSERVER, TG_GW_SVC_SESSION));
    assert_true(tg_gw_acl_may_bind(TG_GW_ROLE_RECORDER, TG_GW_SVC_SESSION));
    /* the gateway's counters: who may read /metrics */
    assert_true(tg_gw_acl_may_bind(TG_GW_ROLE_OBSERVER, TG_GW_SVC_GATEWAY));
    assert_true(tg_gw_acl_may_bind(TG_GW_ROLE_RECORDER, TG_GW_SVC_GATEWAY));
    assert_false(tg_gw_acl_may_bind(TG_GW_ROLE_PRODUCER, TG_GW_SVC_GATEWAY));
    assert_false(tg_gw_acl_may_bind(TG_GW_ROLE_NONE, TG_GW_SVC_GATEWAY));
    assert_true(tg_gw_acl_allows(TG_GW_ROLE_OBSERVER, TG_GW_SVC_GATEWAY, "GetStats"));
    assert_true(tg_gw_acl_allows(TG_GW_ROLE_ADMIN, TG_GW_SVC_GATEWAY, "GetStats"));
    assert_false(tg_gw_acl_allows(TG_GW_ROLE_PRODUCER, TG_GW_SVC_GATEWAY, "GetStats"));
    assert_false(tg_gw_acl_allows(TG_GW_ROLE_LINK, TG_GW_SVC_GATEWAY, "GetStats"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roles_parse),
        cmocka_unit_test(test_consumer_methods),
        cmocka_unit_test(test_producer_and_others),
        cmocka_unit_test(test_bind),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
