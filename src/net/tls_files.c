/* tls_files.c: TLS certificates, keys and CA bundles parsed from the checked descriptor's bytes
 * (see net/tls_files.h). */
#include "net/tls_files.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/file_trust.h"

/* A daemon has nobody to type a pass phrase: an encrypted key fails to load instead of blocking
 * on the terminal as OpenSSL's default callback would. */
static int no_passphrase(char *buf, int size, int rwflag, void *u)
{
    (void)buf, (void)size, (void)rwflag, (void)u;
    return -1;
}

static void openssl_reason(char *out, size_t cap)
{
    unsigned long e = ERR_peek_last_error();
    out[0] = '\0';
    if (e)
        snprintf(out, cap, ": %s", ERR_reason_error_string(e) ? ERR_reason_error_string(e) : "unknown error");
    ERR_clear_error();
}

struct file_bytes {
    unsigned char *p;
    size_t len;
};

static void bytes_free(struct file_bytes *b)
{
    if (b->p) {
        OPENSSL_cleanse(b->p, b->len);
        free(b->p);
    }
    b->p = NULL;
    b->len = 0;
}

/* Opens path once, checks that descriptor (how, when check; 0: only that it is a regular file) and
 * reads it whole. */
static int read_checked(const char *path, int check, enum tg_file_trust how, const char *what, struct file_bytes *out,
                        char *err, size_t errlen)
{
    out->p = NULL;
    out->len = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    if (fd < 0) {
        snprintf(err, errlen, "cannot open %s %s: %s", what, path, strerror(errno));
        return -1;
    }
    struct stat st;
    char why[512];
    if (check && how && tg_file_trust_check(fd, path, how, why, sizeof why) != 0) {
        snprintf(err, errlen, "%s %s", what, why);
        goto fail;
    }
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        snprintf(err, errlen, "%s %s: not a regular file", what, path);
        goto fail;
    }
    if ((unsigned long long)st.st_size > TG_TLS_FILE_MAX) {
        snprintf(err, errlen, "%s %s: larger than %u bytes", what, path, TG_TLS_FILE_MAX);
        goto fail;
    }
    size_t cap = (size_t)st.st_size + 1; /* +1: sees a file that grew since fstat */
    out->p = malloc(cap);
    if (!out->p) {
        snprintf(err, errlen, "%s %s: out of memory", what, path);
        goto fail;
    }
    for (;;) {
        if (out->len == cap) {
            if (cap > TG_TLS_FILE_MAX) {
                snprintf(err, errlen, "%s %s: larger than %u bytes", what, path, TG_TLS_FILE_MAX);
                goto fail;
            }
            unsigned char *q = malloc(cap * 2);
            if (!q) {
                snprintf(err, errlen, "%s %s: out of memory", what, path);
                goto fail;
            }
            memcpy(q, out->p, out->len);
            OPENSSL_cleanse(out->p, out->len);
            free(out->p);
            out->p = q;
            cap *= 2;
        }
        ssize_t n = read(fd, out->p + out->len, cap - out->len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            snprintf(err, errlen, "cannot read %s %s: %s", what, path, strerror(errno));
            goto fail;
        }
        if (n == 0)
            break;
        out->len += (size_t)n;
    }
    close(fd);
    if (out->len > INT32_MAX - 1) { /* BIO_new_mem_buf takes an int */
        snprintf(err, errlen, "%s %s: too large", what, path);
        bytes_free(out);
        return -1;
    }
    return 0;
fail:
    close(fd);
    bytes_free(out);
    return -1;
}

/* The PEM reader ran out of input: the normal end of a sequence of objects. */
static int pem_at_end(void)
{
    unsigned long e = ERR_peek_last_error();
    if (ERR_GET_LIB(e) == ERR_LIB_PEM && ERR_GET_REASON(e) == PEM_R_NO_START_LINE) {
        ERR_clear_error();
        return 1;
    }
    return 0;
}

static int use_chain(SSL_CTX *ctx, const struct file_bytes *b, const char *path, char *err, size_t errlen)
{
    char why[160];
    BIO *bio = BIO_new_mem_buf(b->p, (int)b->len);
    if (!bio) {
        snprintf(err, errlen, "certificate %s: out of memory", path);
        return -1;
    }
    int rc = -1;
    X509 *leaf = PEM_read_bio_X509_AUX(bio, NULL, no_passphrase, NULL);
    if (!leaf) {
        openssl_reason(why, sizeof why);
        snprintf(err, errlen, "certificate %s: no PEM certificate%s", path, why);
        goto out;
    }
    int ok = SSL_CTX_use_certificate(ctx, leaf);
    X509_free(leaf);
    if (ok != 1 || SSL_CTX_clear_chain_certs(ctx) != 1) {
        openssl_reason(why, sizeof why);
        snprintf(err, errlen, "certificate %s: refused%s", path, why);
        goto out;
    }
    for (;;) {
        X509 *ca = PEM_read_bio_X509(bio, NULL, no_passphrase, NULL);
        if (!ca)
            break;
        if (SSL_CTX_add0_chain_cert(ctx, ca) != 1) {
            X509_free(ca);
            openssl_reason(why, sizeof why);
            snprintf(err, errlen, "certificate %s: chain certificate refused%s", path, why);
            goto out;
        }
    }
    if (!pem_at_end()) {
        openssl_reason(why, sizeof why);
        snprintf(err, errlen, "certificate %s: bad chain certificate%s", path, why);
        goto out;
    }
    rc = 0;
out:
    BIO_free(bio);
    return rc;
}

static int use_key(SSL_CTX *ctx, const struct file_bytes *b, const char *path, const char *cert, char *err,
                   size_t errlen)
{
    char why[160];
    BIO *bio = BIO_new_mem_buf(b->p, (int)b->len);
    if (!bio) {
        snprintf(err, errlen, "private key %s: out of memory", path);
        return -1;
    }
    EVP_PKEY *pk = PEM_read_bio_PrivateKey(bio, NULL, no_passphrase, NULL);
    BIO_free(bio);
    if (!pk) {
        openssl_reason(why, sizeof why);
        snprintf(err, errlen, "private key %s: no unencrypted PEM private key%s", path, why);
        return -1;
    }
    int ok = SSL_CTX_use_PrivateKey(ctx, pk);
    EVP_PKEY_free(pk);
    unsigned long e = ERR_peek_last_error();
    if (ok != 1 && ERR_GET_LIB(e) == ERR_LIB_X509 && ERR_GET_REASON(e) == X509_R_KEY_VALUES_MISMATCH) {
        ERR_clear_error();
        snprintf(err, errlen, "private key %s does not match certificate %s", path, cert);
        return -1;
    }
    if (ok != 1) {
        openssl_reason(why, sizeof why);
        snprintf(err, errlen, "private key %s: refused%s", path, why);
        return -1;
    }
    return 0;
}

int tg_tls_use_cert_key(SSL_CTX *ctx, const char *cert, const char *key, int check, char *err, size_t errlen)
{
    if (!cert || !key) {
        snprintf(err, errlen, "a TLS certificate and key are required");
        return -1;
    }
    struct file_bytes cb, kb;
    if (read_checked(cert, check, 0, "certificate", &cb, err, errlen) != 0)
        return -1;
    int rc = use_chain(ctx, &cb, cert, err, errlen);
    bytes_free(&cb);
    if (rc != 0)
        return -1;
    if (read_checked(key, check, TG_FILE_PRIVATE_KEY, "private key", &kb, err, errlen) != 0)
        return -1;
    rc = use_key(ctx, &kb, key, cert, err, errlen);
    bytes_free(&kb);
    if (rc != 0)
        return -1;
    if (SSL_CTX_check_private_key(ctx) != 1) {
        ERR_clear_error();
        snprintf(err, errlen, "private key %s does not match certificate %s", key, cert);
        return -1;
    }
    return 0;
}

static int name_cmp(const X509_NAME *const *a, const X509_NAME *const *b) { return X509_NAME_cmp(*a, *b); }

int tg_tls_ca_load(const char *path, int check, X509_STORE **store_out, STACK_OF(X509_NAME) **names_out, char *err,
                   size_t errlen)
{
    *store_out = NULL;
    if (names_out)
        *names_out = NULL;
    struct file_bytes b;
    if (read_checked(path, check, TG_FILE_DECIDES_ACCESS, "CA bundle", &b, err, errlen) != 0)
        return -1;
    char why[160];
    int rc = -1, certs = 0;
    X509_STORE *store = X509_STORE_new();
    STACK_OF(X509_NAME) *names = names_out ? sk_X509_NAME_new_null() : NULL;
    STACK_OF(X509_NAME) *seen = names_out ? sk_X509_NAME_new(name_cmp) : NULL; /* borrowed, sorted */
    BIO *bio = BIO_new_mem_buf(b.p, (int)b.len);
    STACK_OF(X509_INFO) *infos = NULL;
    if (!store || !bio || (names_out && (!names || !seen))) {
        snprintf(err, errlen, "CA bundle %s: out of memory", path);
        goto out;
    }
    infos = PEM_X509_INFO_read_bio(bio, NULL, no_passphrase, NULL);
    if (!infos) {
        openssl_reason(why, sizeof why);
        snprintf(err, errlen, "CA bundle %s: unreadable PEM%s", path, why);
        goto out;
    }
    for (int i = 0; i < sk_X509_INFO_num(infos); i++) {
        X509_INFO *in = sk_X509_INFO_value(infos, i);
        if (in->crl && X509_STORE_add_crl(store, in->crl) != 1) {
            openssl_reason(why, sizeof why);
            snprintf(err, errlen, "CA bundle %s: CRL refused%s", path, why);
            goto out;
        }
        if (!in->x509)
            continue;
        if (X509_STORE_add_cert(store, in->x509) != 1) {
            openssl_reason(why, sizeof why);
            snprintf(err, errlen, "CA bundle %s: certificate refused%s", path, why);
            goto out;
        }
        certs++;
        if (!names_out)
            continue;
        X509_NAME *subject = X509_get_subject_name(in->x509);
        if (!subject || sk_X509_NAME_find(seen, subject) >= 0)
            continue;
        X509_NAME *copy = X509_NAME_dup(subject);
        if (!copy || !sk_X509_NAME_push(names, copy)) {
            X509_NAME_free(copy);
            snprintf(err, errlen, "CA bundle %s: out of memory", path);
            goto out;
        }
        if (!sk_X509_NAME_push(seen, copy)) {
            snprintf(err, errlen, "CA bundle %s: out of memory", path);
            goto out;
        }
    }
    if (certs == 0) {
        snprintf(err, errlen, "CA bundle %s: no certificate in it", path);
        goto out;
    }
    ERR_clear_error();
    *store_out = store;
    store = NULL;
    if (names_out) {
        *names_out = names;
        names = NULL;
    }
    rc = 0;
out:
    sk_X509_INFO_pop_free(infos, X509_INFO_free);
    BIO_free(bio);
    sk_X509_NAME_free(seen);
    sk_X509_NAME_pop_free(names, X509_NAME_free);
    X509_STORE_free(store);
    bytes_free(&b);
    return rc;
}

int tg_tls_ctx_use_ca(SSL_CTX *ctx, const char *path, int check, int client_names, char *err, size_t errlen)
{
    X509_STORE *store;
    STACK_OF(X509_NAME) *names = NULL;
    if (tg_tls_ca_load(path, check, &store, client_names ? &names : NULL, err, errlen) != 0)
        return -1;
    SSL_CTX_set_cert_store(ctx, store); /* takes it, frees the one there */
    if (client_names)
        SSL_CTX_set_client_CA_list(ctx, names); /* takes it */
    return 0;
}
