/* test_service_principals.c: the service's per-principal rules (traced's per-uid rules, applied to
 * whatever identity the connection carries): QueryServiceState shows a principal only its own
 * sessions unless privileged; CloneSession of another principal's session is refused; Attach only
 * finds the same principal's detached sessions (keys are per principal); the session quota counts
 * per principal; token principals are distinct from uids and from each other; a TCP peer of the
 * service is never privileged, whatever uid Perfetto's rule gives it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "test_service_util.h"

#include "base/name_fit.h"
#include "service/svc.h"

static const struct tg_ipc_identity k_root = {.uid = 0, .pid = -1, .principal = NULL, .privileged = 1};
static const struct tg_ipc_identity k_alice = {.uid = 1000, .pid = -1, .principal = NULL, .privileged = 0};
static const struct tg_ipc_identity k_bob = {.uid = 1001, .pid = -1, .principal = NULL, .privileged = 0};
static const struct tg_ipc_identity k_tok_ci = {.uid = (uid_t)-1, .pid = -1, .principal = "token:ci", .privileged = 0};
static const struct tg_ipc_identity k_tok_qa = {.uid = (uid_t)-1, .pid = -1, .principal = "token:qa", .privileged = 0};

static Perfetto__Protos__TracingServiceState *query(struct ts_cons *c)
{
    Perfetto__Protos__QueryServiceStateRequest q = PERFETTO__PROTOS__QUERY_SERVICE_STATE_REQUEST__INIT;
    q.has_sessions_only = 1;
    q.sessions_only = 1;
    struct ts_frame f;
    assert_int_equal(ts_cons_call(c, TS_C_QUERY, &q.base, &f, 10000), 1);
    Perfetto__Protos__QueryServiceStateResponse *r =
        perfetto__protos__query_service_state_response__unpack(NULL, f.fi.payload_len, f.fi.payload);
    ts_frame_free(&f);
    assert_non_null(r);
    Perfetto__Protos__TracingServiceState *st = r->service_state;
    r->service_state = NULL;
    perfetto__protos__query_service_state_response__free_unpacked(r, NULL);
    return st;
}

/* Session ids a consumer can see. */
static size_t visible(struct ts_cons *c, uint64_t *ids, size_t max)
{
    Perfetto__Protos__TracingServiceState *st = query(c);
    size_t n = 0;
    for (size_t i = 0; i < st->n_tracing_sessions && n < max; i++)
        ids[n++] = st->tracing_sessions[i]->id;
    perfetto__protos__tracing_service_state__free_unpacked(st, NULL);
    return n;
}

static void enable(struct ts_cons *c)
{
    struct ts_cfg cfg;
    ts_cfg_init(&cfg, 16, 0, NULL, 0);
    assert_true(ts_cons_enable(c, &cfg.tc, -1) != 0);
}

static void test_visibility_and_clone(void **state)
{
    (void)state;
    struct ts_env e;
    assert_int_equal(ts_env_init(&e), 0);
    struct ts_cons root, alice, bob, ci;
    assert_int_equal(ts_cons_connect_as(&e, &root, &k_root), 0);
    assert_int_equal(ts_cons_connect_as(&e, &alice, &k_alice), 0);
    assert_int_equal(ts_cons_connect_as(&e, &bob, &k_bob), 0);
    assert_int_equal(ts_cons_connect_as(&e, &ci, &k_tok_ci), 0);
    enable(&root);
    enable(&alice);
    uint64_t ids[8];
    /* alice sees only hers (her query is answered after her EnableTracing: same connection); then
     * root sees both; bob and the token see none */
    assert_int_equal(visible(&alice, ids, 8), 1);
    uint64_t alice_sid = ids[0];
    assert_int_equal(visible(&bob, ids, 8), 0);
    assert_int_equal(visible(&ci, ids, 8), 0);
    assert_int_equal(visible(&root, ids, 8), 2);
    uint64_t root_sid = ids[0] == alice_sid ? ids[1] : ids[0];

    char err[256];
    /* the attack: bob (or a token) clones root's or alice's session */
    assert_int_equal(ts_cons_clone(&bob, root_sid, err, sizeof err), 0);
    assert_non_null(strstr(err, "Not allowed"));
    assert_int_equal(ts_cons_clone(&bob, alice_sid, err, sizeof err), 0);
    assert_int_equal(ts_cons_clone(&ci, alice_sid, err, sizeof err), 0);
    /* the legitimate paths: alice clones her own, root clones anyone's */
    struct ts_cons alice2, root2;
    assert_int_equal(ts_cons_connect_as(&e, &alice2, &k_alice), 0);
    assert_int_equal(ts_cons_clone(&alice2, alice_sid, err, sizeof err), 1);
    assert_int_equal(ts_cons_connect_as(&e, &root2, &k_root), 0);
    assert_int_equal(ts_cons_clone(&root2, alice_sid, err, sizeof err), 1);
    ts_cons_close(&alice2);
    ts_cons_close(&root2);
    ts_cons_close(&root);
    ts_cons_close(&alice);
    ts_cons_close(&bob);
    ts_cons_close(&ci);
    ts_env_free(&e);
}

static void test_attach_is_per_principal(void **state)
{
    (void)state;
    struct ts_env e;
    assert_int_equal(ts_env_init(&e), 0);
    struct ts_cons ci;
    assert_int_equal(ts_cons_connect_as(&e, &ci, &k_tok_ci), 0);
    enable(&ci);
    Perfetto__Protos__DetachRequest dr = PERFETTO__PROTOS__DETACH_REQUEST__INIT;
    dr.key = (char *)"shared-key";
    assert_int_equal(ts_cons_call(&ci, TS_C_DETACH, &dr.base, NULL, 10000), 1);
    /* another token, a uid and even root cannot attach to ci's key */
    Perfetto__Protos__AttachRequest ar = PERFETTO__PROTOS__ATTACH_REQUEST__INIT;
    ar.key = (char *)"shared-key";
    const struct tg_ipc_identity *others[] = {&k_tok_qa, &k_alice, &k_root};
    for (size_t i = 0; i < 3; i++) {
        struct ts_cons o;
        assert_int_equal(ts_cons_connect_as(&e, &o, others[i]), 0);
        assert_int_equal(ts_cons_call(&o, TS_C_ATTACH, &ar.base, NULL, 10000), 0);
        ts_cons_close(&o);
    }
    /* the same key is free for qa: keys are per principal */
    struct ts_cons qa;
    assert_int_equal(ts_cons_connect_as(&e, &qa, &k_tok_qa), 0);
    enable(&qa);
    assert_int_equal(ts_cons_call(&qa, TS_C_DETACH, &dr.base, NULL, 10000), 1);
    /* ci attaches to its own */
    struct ts_cons ci2;
    assert_int_equal(ts_cons_connect_as(&e, &ci2, &k_tok_ci), 0);
    assert_int_equal(ts_cons_call(&ci2, TS_C_ATTACH, &ar.base, NULL, 10000), 1);
    ts_cons_close(&ci2);
    ts_cons_close(&qa);
    ts_cons_close(&ci);
    ts_env_free(&e);
}

static void test_quota_per_principal(void **state)
{
    (void)state;
    struct ts_env e;
    assert_int_equal(ts_env_init(&e), 0);
    struct ts_cons c[7];
    uint64_t ids[8];
    for (int i = 0; i < 5; i++) {
        assert_int_equal(ts_cons_connect_as(&e, &c[i], &k_tok_ci), 0);
        enable(&c[i]);
        assert_int_equal(visible(&c[i], ids, 8), (size_t)i + 1); /* this one is in place before the next */
    }
    char err[256];
    /* a sixth for the same token is refused */
    assert_int_equal(ts_cons_connect_as(&e, &c[5], &k_tok_ci), 0);
    enable(&c[5]);
    assert_int_equal(ts_cons_wait_enable(&c[5], 10000, err, sizeof err), 1);
    assert_non_null(strstr(err, "Too many concurrent"));
    assert_non_null(strstr(err, "token:ci"));
    /* another principal still gets one: quotas are not shared through the gateway */
    assert_int_equal(ts_cons_connect_as(&e, &c[6], &k_alice), 0);
    enable(&c[6]);
    assert_int_equal(visible(&c[6], ids, 8), 1);
    for (int i = 0; i < 7; i++)
        ts_cons_close(&c[i]);
    ts_env_free(&e);
}

/* A TCP peer of the service gets uid 0 by Perfetto's rule, but that must not make it root: it
 * sees no UNIX root session. */
static void test_tcp_peer_not_privileged(void **state)
{
    (void)state;
    struct ts_env e;
    assert_int_equal(ts_env_init(&e), 0);
    struct ts_cons root;
    assert_int_equal(ts_cons_connect_as(&e, &root, &k_root), 0);
    enable(&root);
    struct ts_cons tcp;
    memset(&tcp, 0, sizeof tcp);
    tcp.e = &e;
    assert_int_equal(ts_raw_open(&e, &tcp.r, 0, 1), 0);
    tcp.rid = 1;
    assert_int_equal(ts_raw_bind(&e, &tcp.r, 1, "ConsumerPort", NULL), 0);
    uint64_t ids[8];
    assert_int_equal(visible(&root, ids, 8), 1); /* root's session exists before tcp asks */
    assert_int_equal(visible(&tcp, ids, 8), 0);
    ts_cons_close(&tcp);
    ts_cons_close(&root);
    ts_env_free(&e);
}

/* Two certificate principals as the gateway makes them (folded to 159 characters with a digest of
 * the whole subject): the service must keep them apart, digest included. */
static void test_long_principals_stay_apart(void **state)
{
    (void)state;
#define ORG "/C=DE/ST=Baden-Wuerttemberg/L=Stuttgart/O=Example Automotive Systems Engineering GmbH/OU=Research " \
            "and Development Software Platforms/OU=Tracing Infrastructure"
    char pa[TG_IPC_PRINCIPAL_MAX], pm[TG_IPC_PRINCIPAL_MAX];
    assert_int_equal(tg_name_fit(pa, sizeof pa, "cert:", ORG "/CN=alice"), 1);
    assert_int_equal(tg_name_fit(pm, sizeof pm, "cert:", ORG "/CN=mallory"), 1);
    assert_int_equal(strlen(pa), TG_IPC_PRINCIPAL_MAX - 1);
    assert_string_not_equal(pa, pm);
    const struct tg_ipc_identity alice = {.uid = (uid_t)-1, .pid = -1, .principal = pa};
    const struct tg_ipc_identity mallory = {.uid = (uid_t)-1, .pid = -1, .principal = pm};
    struct ts_env e;
    assert_int_equal(ts_env_init(&e), 0);
    struct ts_cons a, m, a2;
    assert_int_equal(ts_cons_connect_as(&e, &a, &alice), 0);
    assert_int_equal(ts_cons_connect_as(&e, &m, &mallory), 0);
    enable(&a);
    uint64_t ids[4];
    assert_int_equal(visible(&a, ids, 4), 1);
    assert_int_equal(visible(&m, ids, 4), 0);
    char err[256];
    assert_int_equal(ts_cons_clone(&m, e.svc->sessions->id, err, sizeof err), 0);
    Perfetto__Protos__DetachRequest dr = PERFETTO__PROTOS__DETACH_REQUEST__INIT;
    dr.key = (char *)"alice-key";
    assert_int_equal(ts_cons_call(&a, TS_C_DETACH, &dr.base, NULL, 10000), 1);
    Perfetto__Protos__AttachRequest ar = PERFETTO__PROTOS__ATTACH_REQUEST__INIT;
    ar.key = (char *)"alice-key";
    assert_int_equal(ts_cons_call(&m, TS_C_ATTACH, &ar.base, NULL, 10000), 0);
    assert_int_equal(ts_cons_connect_as(&e, &a2, &alice), 0);
    assert_int_equal(ts_cons_call(&a2, TS_C_ATTACH, &ar.base, NULL, 10000), 1);
    assert_string_equal(e.svc->sessions->principal, pa); /* kept whole, as the gateway logs it */
    /* a principal longer than the service keeps is folded, not cut: still apart */
    char la[400], lm[400];
    snprintf(la, sizeof la, "cert:%s%s/CN=alice", ORG, ORG);
    snprintf(lm, sizeof lm, "cert:%s%s/CN=mallory", ORG, ORG);
    struct ts_cons la_c, lm_c;
    const struct tg_ipc_identity lai = {.uid = (uid_t)-1, .pid = -1, .principal = la};
    const struct tg_ipc_identity lmi = {.uid = (uid_t)-1, .pid = -1, .principal = lm};
    assert_int_equal(ts_cons_connect_as(&e, &la_c, &lai), 0);
    assert_int_equal(ts_cons_connect_as(&e, &lm_c, &lmi), 0);
    enable(&la_c);
    assert_int_equal(visible(&la_c, ids, 4), 1);
    assert_int_equal(visible(&lm_c, ids, 4), 0);
#undef ORG
    ts_cons_close(&la_c);
    ts_cons_close(&lm_c);
    ts_cons_close(&a2);
    ts_cons_close(&m);
    ts_cons_close(&a);
    ts_env_free(&e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_visibility_and_clone),
        cmocka_unit_test(test_attach_is_per_principal),
        cmocka_unit_test(test_quota_per_principal),
        cmocka_unit_test(test_tcp_peer_not_privileged),
        cmocka_unit_test(test_long_principals_stay_apart),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
