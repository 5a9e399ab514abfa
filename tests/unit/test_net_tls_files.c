/* test_net_tls_files.c: TLS files read from the checked descriptor (net/tls_files.h): chains and
 * CA bundles load as OpenSSL's own file loaders load them, tracegated's ownership and mode rules
 * hold on every load (a server's reload, a client's every connect), files that are not regular,
 * too large, empty or encrypted are refused with a reason, and a CA bundle swapped for another
 * user's while it is loaded never gets in. */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <fcntl.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "net/tls.h"
#include "net/tls_files.h"
#include "tg_test_util.h"

static char g_pki[256];

/* err holds want; says what it held instead when not */
#define assert_err(err, want)                                                                              \
    do {                                                                                                   \
        if (!strstr((err), (want)))                                                                        \
            print_message("error was: %s\n", (err));                                                       \
        assert_non_null(strstr((err), (want)));                                                            \
    } while (0)

static void path(char *out, size_t n, const char *file) { snprintf(out, n, "%s/%s", g_pki, file); }

static void cat_files(const char *out, const char *a, const char *b, const char *c)
{
    char p[300];
    FILE *o = fopen(out, "w");
    assert_non_null(o);
    const char *in[] = {a, b, c};
    for (int i = 0; i < 3; i++) {
        if (!in[i])
            continue;
        uint8_t *d;
        size_t len;
        path(p, sizeof p, in[i]);
        assert_int_equal(tg_test_read_file(p, &d, &len), 0);
        assert_int_equal(fwrite(d, 1, len, o), len);
        free(d);
    }
    assert_int_equal(fclose(o), 0);
}

static X509 *read_cert(const char *name)
{
    char p[300];
    path(p, sizeof p, name);
    FILE *f = fopen(p, "r");
    assert_non_null(f);
    X509 *x = PEM_read_X509(f, NULL, NULL, NULL);
    fclose(f);
    assert_non_null(x);
    return x;
}

static int verifies(X509_STORE *store, const char *cert_name)
{
    X509 *x = read_cert(cert_name);
    X509_STORE_CTX *vc = X509_STORE_CTX_new();
    assert_non_null(vc);
    assert_int_equal(X509_STORE_CTX_init(vc, store, x, NULL), 1);
    int ok = X509_verify_cert(vc) == 1;
    X509_STORE_CTX_free(vc);
    X509_free(x);
    ERR_clear_error();
    return ok;
}

/* The chain loads exactly as SSL_CTX_use_certificate_chain_file loads it: the same leaf, the same
 * chain certificates in the same order. */
static void test_chain_as_openssl_loads_it(void **state)
{
    (void)state;
    char chain[300], key[300], err[512] = "";
    path(chain, sizeof chain, "chain.pem");
    path(key, sizeof key, "server.key");
    cat_files(chain, "server.crt", "ca.crt", "rogue-ca.crt");

    SSL_CTX *ours = SSL_CTX_new(TLS_server_method()), *theirs = SSL_CTX_new(TLS_server_method());
    assert_int_equal(tg_tls_use_cert_key(ours, chain, key, 1, err, sizeof err), 0);
    assert_int_equal(SSL_CTX_use_certificate_chain_file(theirs, chain), 1);
    assert_int_equal(X509_cmp(SSL_CTX_get0_certificate(ours), SSL_CTX_get0_certificate(theirs)), 0);
    STACK_OF(X509) *a = NULL, *b = NULL;
    SSL_CTX_get0_chain_certs(ours, &a);
    SSL_CTX_get0_chain_certs(theirs, &b);
    assert_int_equal(sk_X509_num(a), 2);
    assert_int_equal(sk_X509_num(b), 2);
    for (int i = 0; i < 2; i++)
        assert_int_equal(X509_cmp(sk_X509_value(a, i), sk_X509_value(b, i)), 0);
    SSL_CTX_free(ours);
    SSL_CTX_free(theirs);
    unlink(chain);
}

static void test_key_must_match(void **state)
{
    (void)state;
    char cert[300], key[300], err[512] = "";
    path(cert, sizeof cert, "server.crt");
    path(key, sizeof key, "client.key");
    SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());
    assert_int_equal(tg_tls_use_cert_key(ctx, cert, key, 1, err, sizeof err), -1);
    assert_err(err, "does not match");
    assert_int_equal(ERR_peek_error(), 0); /* nothing left for the next caller to misreport */
    SSL_CTX_free(ctx);
}

/* Every certificate of a bundle is trusted; each subject is named once to clients, as
 * SSL_load_client_CA_file names them. */
static void test_ca_bundle(void **state)
{
    (void)state;
    char bundle[300], err[512] = "";
    path(bundle, sizeof bundle, "bundle.pem");
    cat_files(bundle, "ca.crt", "rogue-ca.crt", "ca.crt");
    X509_STORE *store;
    STACK_OF(X509_NAME) *names;
    assert_int_equal(tg_tls_ca_load(bundle, 1, &store, &names, err, sizeof err), 0);
    STACK_OF(X509_NAME) *theirs = SSL_load_client_CA_file(bundle);
    assert_non_null(theirs);
    assert_int_equal(sk_X509_NAME_num(names), 2);
    assert_int_equal(sk_X509_NAME_num(theirs), 2);
    assert_true(verifies(store, "server.crt"));
    assert_true(verifies(store, "rogue-client.crt"));
    sk_X509_NAME_pop_free(theirs, X509_NAME_free);
    sk_X509_NAME_pop_free(names, X509_NAME_free);
    X509_STORE_free(store);

    /* only the first: the rogue CA's client is not trusted */
    char one[300];
    path(one, sizeof one, "ca.crt");
    assert_int_equal(tg_tls_ca_load(one, 1, &store, NULL, err, sizeof err), 0);
    assert_true(verifies(store, "client.crt"));
    assert_false(verifies(store, "rogue-client.crt"));
    X509_STORE_free(store);
    unlink(bundle);
}

/* tracegated's rules (check = 1) on the descriptor; a client program's files (check = 0) as is. */
static void test_rules_on_every_load(void **state)
{
    (void)state;
    char cert[300], key[300], ca[300], err[512] = "";
    path(cert, sizeof cert, "server.crt");
    path(key, sizeof key, "server.key");
    path(ca, sizeof ca, "ca.crt");
    SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());

    assert_int_equal(chmod(key, 0644), 0);
    assert_int_equal(tg_tls_use_cert_key(ctx, cert, key, 1, err, sizeof err), -1);
    assert_err(err, "every user can read it");
    assert_int_equal(tg_tls_use_cert_key(ctx, cert, key, 0, err, sizeof err), 0);
    assert_int_equal(chmod(key, 0640), 0); /* its group may (Debian's ssl-cert) */
    assert_int_equal(tg_tls_use_cert_key(ctx, cert, key, 1, err, sizeof err), 0);

    X509_STORE *store;
    assert_int_equal(chmod(ca, 0664), 0);
    assert_int_equal(tg_tls_ca_load(ca, 1, &store, NULL, err, sizeof err), -1);
    assert_err(err, "writable by its group");
    assert_int_equal(tg_tls_ca_load(ca, 0, &store, NULL, err, sizeof err), 0);
    X509_STORE_free(store);

    /* a server re-checks at reload and keeps the old context when refused */
    struct tg_tls_server_config sc = {.cert_file = cert, .key_file = key, .ca_file = ca, .check_files = 1};
    assert_int_equal(chmod(ca, 0644), 0);
    struct tg_tls_server *s = tg_tls_server_new(&sc, err, sizeof err);
    assert_non_null(s);
    assert_int_equal(chmod(ca, 0666), 0);
    assert_int_equal(tg_tls_server_reload(s, err, sizeof err), -1);
    assert_err(err, "writable by every user");
    assert_int_equal(chmod(ca, 0644), 0);
    assert_int_equal(tg_tls_server_reload(s, err, sizeof err), 0);
    tg_tls_server_free(s);

    /* a client re-checks at every connect (a gateway link dials long after start) */
    struct event_base *base = event_base_new();
    struct tg_tls_client_config cc = {.ca_file = ca, .server_name = "localhost", .check_files = 1};
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    struct bufferevent *bev = tg_tls_client_bev(base, sv[0], &cc, err, sizeof err);
    assert_non_null(bev);
    bufferevent_free(bev);
    close(sv[1]);
    assert_int_equal(chmod(ca, 0664), 0);
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    assert_null(tg_tls_client_bev(base, sv[0], &cc, err, sizeof err));
    assert_err(err, "writable by its group");
    close(sv[1]);
    assert_int_equal(chmod(ca, 0644), 0);
    event_base_free(base);
    SSL_CTX_free(ctx);
}

static void expect_refused(const char *p, const char *why)
{
    char cert[300], err[512] = "";
    path(cert, sizeof cert, "server.crt");
    SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());
    X509_STORE *store;
    assert_int_equal(tg_tls_ca_load(p, 1, &store, NULL, err, sizeof err), -1);
    assert_non_null(strstr(err, why));
    assert_non_null(strstr(err, p));
    assert_int_equal(tg_tls_use_cert_key(ctx, cert, p, 1, err, sizeof err), -1);
    assert_non_null(strstr(err, why));
    SSL_CTX_free(ctx);
}

static void test_bad_files(void **state)
{
    (void)state;
    char p[300];
    path(p, sizeof p, "fifo");
    assert_int_equal(mkfifo(p, 0600), 0);
    expect_refused(p, "not a regular file"); /* and does not wait for a writer */
    unlink(p);
    expect_refused(g_pki, "not a regular file");
    path(p, sizeof p, "missing.pem");
    expect_refused(p, "No such file");

    path(p, sizeof p, "huge.pem");
    int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    assert_true(fd >= 0);
    assert_int_equal(ftruncate(fd, TG_TLS_FILE_MAX + 1), 0);
    close(fd);
    expect_refused(p, "larger than");
    unlink(p);

    path(p, sizeof p, "empty.pem");
    fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    assert_true(fd >= 0);
    close(fd);
    char err[512];
    X509_STORE *store;
    assert_int_equal(tg_tls_ca_load(p, 1, &store, NULL, err, sizeof err), -1);
    assert_err(err, "no certificate");
    unlink(p);

    /* a chain whose second certificate is cut short */
    char chain[300], key[300];
    path(chain, sizeof chain, "cut.pem");
    path(key, sizeof key, "server.key");
    cat_files(chain, "server.crt", "ca.crt", NULL);
    struct stat st;
    assert_int_equal(stat(chain, &st), 0);
    assert_int_equal(truncate(chain, st.st_size - 80), 0);
    SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());
    assert_int_equal(tg_tls_use_cert_key(ctx, chain, key, 1, err, sizeof err), -1);
    assert_err(err, "bad chain certificate");
    SSL_CTX_free(ctx);
    unlink(chain);
}

/* An encrypted key fails with a reason instead of prompting for a pass phrase. */
static void test_encrypted_key(void **state)
{
    (void)state;
    char key[300], enc[300], cert[300], err[512];
    path(key, sizeof key, "server.key");
    path(enc, sizeof enc, "server-enc.key");
    path(cert, sizeof cert, "server.crt");
    FILE *f = fopen(key, "r");
    assert_non_null(f);
    EVP_PKEY *pk = PEM_read_PrivateKey(f, NULL, NULL, NULL);
    fclose(f);
    assert_non_null(pk);
    f = fopen(enc, "w");
    assert_non_null(f);
    assert_int_equal(PEM_write_PKCS8PrivateKey(f, pk, EVP_aes_128_cbc(), NULL, 0, NULL, (void *)"secret"), 1);
    fclose(f);
    assert_int_equal(chmod(enc, 0600), 0);
    EVP_PKEY_free(pk);
    SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());
    assert_int_equal(tg_tls_use_cert_key(ctx, cert, enc, 1, err, sizeof err), -1);
    assert_err(err, "no unencrypted PEM private key");
    SSL_CTX_free(ctx);
    unlink(enc);
}

/* While another process keeps exchanging the trusted bundle with one every user may write (holding
 * the rogue CA), no load that succeeds ever trusts the rogue CA: the check and the bytes are the
 * same descriptor's. */
static void test_swap_never_trusts_the_other_file(void **state)
{
    (void)state;
    char good[300], bad[300], rogue[300];
    path(good, sizeof good, "swap-good.pem");
    path(bad, sizeof bad, "swap-bad.pem");
    path(rogue, sizeof rogue, "rogue-ca.crt");
    cat_files(good, "ca.crt", NULL, NULL);
    cat_files(bad, "rogue-ca.crt", NULL, NULL);
    assert_int_equal(chmod(good, 0644), 0);
    assert_int_equal(chmod(bad, 0666), 0);
    pid_t child = fork();
    assert_true(child >= 0);
    if (child == 0) {
        for (;;) {
            if (renameat2(AT_FDCWD, good, AT_FDCWD, bad, RENAME_EXCHANGE) != 0)
                _exit(1);
            sched_yield(); /* let the loader's path walks finish now and then */
        }
    }
    int loaded = 0, refused = 0;
    /* until both files were met often: a refusal is cheap and a load is not, so while the swapper
     * waits for the CPU the loader refuses the other file thousands of times in a row */
    for (int i = 0; i < 200000 && (loaded < 50 || refused < 50); i++) {
        char err[512];
        X509_STORE *store;
        if (tg_tls_ca_load(good, 1, &store, NULL, err, sizeof err) != 0) {
            refused++;
            assert_err(err, "writable by every user");
            continue;
        }
        loaded++;
        assert_true(verifies(store, "client.crt"));
        assert_false(verifies(store, "rogue-client.crt"));
        X509_STORE_free(store);
    }
    kill(child, SIGKILL);
    int status;
    waitpid(child, &status, 0);
    assert_true(WIFSIGNALED(status)); /* the swapper swapped until the end */
    print_message("swap race: %d loads trusted the right bundle, %d refused the other\n", loaded, refused);
    assert_true(loaded > 0);
    unlink(good);
    unlink(bad);
}

static int setup_pki(void **state)
{
    (void)state;
    return tg_test_make_pki(g_pki, sizeof g_pki, "tg-tls-files");
}

static int teardown_pki(void **state)
{
    (void)state;
    return tg_test_remove_pki(g_pki);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_chain_as_openssl_loads_it),
        cmocka_unit_test(test_key_must_match),
        cmocka_unit_test(test_ca_bundle),
        cmocka_unit_test(test_rules_on_every_load),
        cmocka_unit_test(test_bad_files),
        cmocka_unit_test(test_encrypted_key),
        cmocka_unit_test(test_swap_never_trusts_the_other_file),
    };
    return cmocka_run_group_tests(tests, setup_pki, teardown_pki);
}
