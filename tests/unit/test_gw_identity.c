/* test_gw_identity.c: principals stay distinct: two client certificates whose subjects differ only
 * past the length a principal (or the TLS layer's subject buffer) holds must not become the same
 * principal, since the service keeps sessions apart by principal (docs/security.md). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <openssl/x509.h>
#include <stdio.h>
#include <string.h>

#include "gw.h"
#include "gw_identity.h"
#include "net/tls.h"

/* A realistic long distinguished name, the same for everyone in one organisation up to the CN. */
#define ORG_DN                                                                                                \
    "/C=DE/ST=Baden-Wuerttemberg/L=Stuttgart/O=Example Automotive Systems Engineering GmbH/OU=Research and " \
    "Development Software Platforms/OU=Tracing Infrastructure"

static void test_cert_principals_distinct(void **state)
{
    (void)state;
    struct tg_gw_client_info a, b;
    memset(&a, 0, sizeof a);
    memset(&b, 0, sizeof b);
    tg_gw_identity_cert(&a, ORG_DN "/CN=alice.smith", TG_GW_ROLE_RECORDER);
    tg_gw_identity_cert(&b, ORG_DN "/CN=mallory.jones", TG_GW_ROLE_RECORDER);
    assert_true(strlen(ORG_DN) + 5 > sizeof a.principal - 1); /* the CN lies past what fits */
    assert_string_not_equal(a.principal, b.principal);
    assert_memory_equal(a.principal, "cert:/C=DE/", 11);
    assert_int_equal(a.roles, TG_GW_ROLE_RECORDER);
    /* short names are unchanged */
    tg_gw_identity_cert(&a, "/CN=alice", TG_GW_ROLE_RECORDER);
    assert_string_equal(a.principal, "cert:/CN=alice");
    tg_gw_identity_token(&a, "ci", TG_GW_ROLE_OBSERVER);
    assert_string_equal(a.principal, "token:ci");
}

static X509 *cert_with_cn(const char *cn)
{
    X509 *x = X509_new();
    assert_non_null(x);
    X509_NAME *n = X509_get_subject_name(x);
    static const char *const ou[] = {"Research and Development", "Software Platforms", "Tracing Infrastructure",
                                     "Remote Devices and Embedded Targets"};
    assert_int_equal(X509_NAME_add_entry_by_txt(n, "C", MBSTRING_ASC, (const unsigned char *)"DE", -1, -1, 0), 1);
    assert_int_equal(
        X509_NAME_add_entry_by_txt(n, "ST", MBSTRING_ASC, (const unsigned char *)"Baden-Wuerttemberg", -1, -1, 0), 1);
    assert_int_equal(X509_NAME_add_entry_by_txt(n, "L", MBSTRING_ASC, (const unsigned char *)"Stuttgart", -1, -1, 0),
                     1);
    assert_int_equal(X509_NAME_add_entry_by_txt(n, "O", MBSTRING_ASC,
                                                (const unsigned char *)"Example Automotive Systems Engineering GmbH",
                                                -1, -1, 0),
                     1);
    for (size_t i = 0; i < sizeof ou / sizeof ou[0]; i++)
        assert_int_equal(X509_NAME_add_entry_by_txt(n, "OU", MBSTRING_ASC, (const unsigned char *)ou[i], -1, -1, 0),
                         1);
    assert_int_equal(X509_NAME_add_entry_by_txt(n, "emailAddress", MBSTRING_ASC,
                                                (const unsigned char *)"tracing-infrastructure-team@example.com", -1,
                                                -1, 0),
                     1);
    assert_int_equal(X509_NAME_add_entry_by_txt(n, "CN", MBSTRING_ASC, (const unsigned char *)cn, -1, -1, 0), 1);
    return x;
}

static void test_tls_subject_not_cut(void **state)
{
    (void)state;
    X509 *xa = cert_with_cn("alice.smith"), *xb = cert_with_cn("mallory.jones");
    char *full = X509_NAME_oneline(X509_get_subject_name(xa), NULL, 0);
    assert_true(strlen(full) > 255); /* X509_NAME_oneline into 256 bytes would cut off the CN */
    OPENSSL_free(full);
    struct tg_tls_peer pa, pb;
    assert_int_equal(tg_tls_subject_text(xa, pa.subject, sizeof pa.subject), 0);
    assert_int_equal(tg_tls_subject_text(xb, pb.subject, sizeof pb.subject), 0);
    assert_string_not_equal(pa.subject, pb.subject);
    struct tg_gw_client_info a, b;
    memset(&a, 0, sizeof a);
    memset(&b, 0, sizeof b);
    tg_gw_identity_cert(&a, pa.subject, TG_GW_ROLE_RECORDER);
    tg_gw_identity_cert(&b, pb.subject, TG_GW_ROLE_RECORDER);
    assert_string_not_equal(a.principal, b.principal);
    X509_free(xa);
    X509_free(xb);
    /* a short subject reads as X509_NAME_oneline writes it */
    X509 *x = X509_new();
    X509_NAME_add_entry_by_txt(X509_get_subject_name(x), "CN", MBSTRING_ASC, (const unsigned char *)"alice", -1, -1,
                               0);
    char s[256];
    assert_int_equal(tg_tls_subject_text(x, s, sizeof s), 0);
    assert_string_equal(s, "/CN=alice");
    X509_free(x);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cert_principals_distinct),
        cmocka_unit_test(test_tls_subject_not_cut),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
