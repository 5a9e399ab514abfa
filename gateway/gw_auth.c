/* gw_auth.c: hashed bearer-token tables, the Origin allow-list and their reload-safe holder
 * (see gw_auth.h). */
#include "gw_auth.h"
#include "base/file_trust.h"

#include <ctype.h>
#include <errno.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "gw.h"
#include "base/hex.h"

struct token_entry {
    char name[TG_GW_PRINCIPAL_MAX];
    unsigned roles;
    unsigned char digest[32];
};

struct tg_gw_tokens {
    size_t n;
    struct token_entry *e;
};

struct tg_gw_auth {
    pthread_mutex_t mu;
    struct tg_gw_tokens *tokens;
    char **origins;
    size_t n_origins;
};

static const char *const k_default_origins[] = {"https://ui.perfetto.dev", "http://localhost:10000",
                                                "http://127.0.0.1:10000"};

static void sha256(const void *data, size_t len, unsigned char out[32])
{
    unsigned int n = 32;
    if (EVP_Digest(data, len, out, &n, EVP_sha256(), NULL) != 1)
        memset(out, 0, 32); /* cannot happen with a working libcrypto; matches nothing useful */
}

void tg_gw_sha256_hex(const void *data, size_t len, char out[65])
{
    unsigned char d[32];
    sha256(data, len, d);
    for (int i = 0; i < 32; i++)
        snprintf(out + 2 * i, 3, "%02x", d[i]);
    OPENSSL_cleanse(d, sizeof d);
}

int tg_gw_token_generate(char out[TG_GW_TOKEN_GEN_LEN + 1])
{
    unsigned char raw[32];
    unsigned char b64[48]; /* 44 characters + NUL */
    if (RAND_bytes(raw, sizeof raw) != 1)
        return -1;
    int n = EVP_EncodeBlock(b64, raw, sizeof raw);
    OPENSSL_cleanse(raw, sizeof raw);
    if (n != 44)
        return -1;
    for (int i = 0; i < TG_GW_TOKEN_GEN_LEN; i++)
        out[i] = b64[i] == '+' ? '-' : b64[i] == '/' ? '_' : (char)b64[i];
    out[TG_GW_TOKEN_GEN_LEN] = '\0';
    OPENSSL_cleanse(b64, sizeof b64);
    return 0;
}

static int valid_name(const char *s)
{
    if (!*s || strlen(s) >= TG_GW_PRINCIPAL_MAX)
        return 0;
    for (; *s; s++)
        if (!isalnum((unsigned char)*s) && !strchr("._@:+-", *s))
            return 0;
    return 1;
}

static int fail(char *err, size_t errlen, const char *name, int line, const char *msg)
{
    if (err && errlen)
        snprintf(err, errlen, "%s:%d: %s", name, line, msg);
    return -1;
}

int tg_gw_tokens_parse(const char *text, size_t len, const char *name, struct tg_gw_tokens **out, char *err,
                       size_t errlen)
{
    struct tg_gw_tokens *t = calloc(1, sizeof *t);
    if (!t)
        return fail(err, errlen, name, 0, "out of memory");
    size_t cap = 0;
    int lineno = 0;
    const char *p = text, *end = text + len;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *le = nl ? nl : end;
        lineno++;
        char line[1024];
        size_t ll = (size_t)(le - p);
        if (ll >= sizeof line) {
            tg_gw_tokens_free(t);
            return fail(err, errlen, name, lineno, "line too long");
        }
        memcpy(line, p, ll);
        line[ll] = '\0';
        p = nl ? nl + 1 : end;
        char *hash = strchr(line, '#');
        if (hash)
            *hash = '\0';
        char *save = NULL;
        char *f1 = strtok_r(line, " \t\r", &save);
        if (!f1)
            continue;
        char *f2 = strtok_r(NULL, " \t\r", &save);
        char *f3 = strtok_r(NULL, " \t\r", &save);
        char *f4 = strtok_r(NULL, " \t\r", &save);
        if (!f2 || !f3 || f4) {
            tg_gw_tokens_free(t);
            return fail(err, errlen, name, lineno, "expected `name role[,role] sha256hex`");
        }
        if (!valid_name(f1)) {
            tg_gw_tokens_free(t);
            return fail(err, errlen, name, lineno, "bad token name (letters, digits and ._@:+- only, < 96 chars)");
        }
        unsigned roles = tg_gw_roles_parse(f2);
        if (!roles) {
            tg_gw_tokens_free(t);
            return fail(err, errlen, name, lineno, "bad role list (observer, recorder, producer, admin, link, adb, spans)");
        }
        struct token_entry ent;
        memset(&ent, 0, sizeof ent);
        if (tg_hex_decode(ent.digest, sizeof ent.digest, f3) != 0) {
            tg_gw_tokens_free(t);
            return fail(err, errlen, name, lineno,
                        "the third field must be the token's SHA-256 as 64 hex digits (tracegated --hash-token)");
        }
        for (size_t i = 0; i < t->n; i++) {
            if (strcmp(t->e[i].name, f1) == 0) {
                tg_gw_tokens_free(t);
                return fail(err, errlen, name, lineno, "duplicate token name");
            }
            if (memcmp(t->e[i].digest, ent.digest, 32) == 0) {
                tg_gw_tokens_free(t);
                return fail(err, errlen, name, lineno, "the same token hash appears twice");
            }
        }
        snprintf(ent.name, sizeof ent.name, "%s", f1);
        ent.roles = roles;
        if (t->n == cap) {
            size_t nc = cap ? cap * 2 : 8;
            struct token_entry *ne = realloc(t->e, nc * sizeof *ne);
            if (!ne) {
                tg_gw_tokens_free(t);
                return fail(err, errlen, name, lineno, "out of memory");
            }
            t->e = ne;
            cap = nc;
        }
        t->e[t->n++] = ent;
    }
    *out = t;
    return 0;
}

int tg_gw_tokens_load(const char *path, struct tg_gw_tokens **out, char *err, size_t errlen)
{
    FILE *f = fopen(path, "re");
    if (!f) {
        snprintf(err, errlen, "cannot open token file %s: %s", path, strerror(errno));
        return -1;
    }
    char why[600];
    if (tg_file_trust_check(fileno(f), path, TG_FILE_DECIDES_ACCESS, why, sizeof why) != 0) {
        fclose(f);
        snprintf(err, errlen, "token file %s", why);
        return -1;
    }
    char *buf = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (cap - len < 4096) {
            if (cap > (16u << 20)) {
                free(buf);
                fclose(f);
                snprintf(err, errlen, "token file %s is too large", path);
                return -1;
            }
            cap = cap ? cap * 2 : 8192;
            char *nb = realloc(buf, cap);
            if (!nb) {
                free(buf);
                fclose(f);
                snprintf(err, errlen, "out of memory");
                return -1;
            }
            buf = nb;
        }
        size_t n = fread(buf + len, 1, cap - len, f);
        len += n;
        if (n == 0)
            break;
    }
    int rerr = ferror(f);
    fclose(f);
    if (rerr) {
        free(buf);
        snprintf(err, errlen, "cannot read token file %s", path);
        return -1;
    }
    int rc = tg_gw_tokens_parse(buf ? buf : "", len, path, out, err, errlen);
    free(buf);
    return rc;
}

void tg_gw_tokens_free(struct tg_gw_tokens *t)
{
    if (!t)
        return;
    free(t->e);
    free(t);
}

size_t tg_gw_tokens_count(const struct tg_gw_tokens *t) { return t ? t->n : 0; }

/* For a token in the base64url alphabet (a '+' may be left as it was) whose length can be base64
 * ('-' or '_' in it, or padding missing): its standard-base64 form with '=' padding (malloc'ed),
 * else NULL. */
static char *alt_forms(const char *token, size_t len)
{
    if (len % 4 == 1)
        return NULL;
    int url = 0;
    for (size_t i = 0; i < len; i++) {
        char c = token[i];
        if (c == '-' || c == '_')
            url = 1;
        else if (!isalnum((unsigned char)c) && c != '+') /* '+' fits a subprotocol: it may stay */
            return NULL;
    }
    size_t pad = (4 - len % 4) % 4;
    if (!url && !pad)
        return NULL; /* already its own standard form */
    char *alt = malloc(len + pad + 1);
    if (!alt)
        return NULL;
    for (size_t i = 0; i < len; i++)
        alt[i] = token[i] == '-' ? '+' : token[i] == '_' ? '/' : token[i];
    memset(alt + len, '=', pad);
    alt[len + pad] = '\0';
    return alt;
}

unsigned tg_gw_tokens_lookup(const struct tg_gw_tokens *t, const char *token, size_t len, char *principal,
                             size_t plen)
{
    if (principal && plen)
        principal[0] = '\0';
    if (!t || !token || len == 0 || len > TG_GW_TOKEN_MAX)
        return 0;
    /* the token as given, and (for a base64url one) its standard-base64 and padded forms */
    unsigned char d[3][32];
    int nd = 1;
    sha256(token, len, d[0]);
    char *alt = alt_forms(token, len);
    if (alt) {
        size_t al = strlen(alt);
        size_t pad = (4 - len % 4) % 4;
        sha256(alt, al, d[nd++]); /* standard base64, padded */
        if (pad) {
            /* base64url, padded: the given text plus the same padding */
            memcpy(alt, token, len);
            sha256(alt, al, d[nd++]);
        }
        OPENSSL_cleanse(alt, al);
        free(alt);
    }
    /* Compare with every entry, without stopping at the first match. */
    size_t found = SIZE_MAX;
    for (size_t i = 0; i < t->n; i++) {
        int eq = 0;
        for (int k = 0; k < nd; k++)
            eq |= CRYPTO_memcmp(d[k], t->e[i].digest, 32) == 0;
        found = eq ? i : found;
    }
    OPENSSL_cleanse(d, sizeof d);
    if (found == SIZE_MAX)
        return 0;
    if (principal && plen)
        snprintf(principal, plen, "%s", t->e[found].name);
    return t->e[found].roles;
}

struct tg_gw_auth *tg_gw_auth_new(void)
{
    struct tg_gw_auth *a = calloc(1, sizeof *a);
    if (a)
        pthread_mutex_init(&a->mu, NULL);
    return a;
}

static void free_origins(char **o, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(o[i]);
    free(o);
}

void tg_gw_auth_free(struct tg_gw_auth *a)
{
    if (!a)
        return;
    tg_gw_tokens_free(a->tokens);
    free_origins(a->origins, a->n_origins);
    pthread_mutex_destroy(&a->mu);
    free(a);
}

void tg_gw_auth_set_tokens(struct tg_gw_auth *a, struct tg_gw_tokens *t)
{
    pthread_mutex_lock(&a->mu);
    struct tg_gw_tokens *old = a->tokens;
    a->tokens = t;
    pthread_mutex_unlock(&a->mu);
    tg_gw_tokens_free(old);
}

size_t tg_gw_auth_token_count(struct tg_gw_auth *a)
{
    pthread_mutex_lock(&a->mu);
    size_t n = tg_gw_tokens_count(a->tokens);
    pthread_mutex_unlock(&a->mu);
    return n;
}

unsigned tg_gw_auth_lookup(struct tg_gw_auth *a, const char *token, size_t len, char *principal, size_t plen)
{
    pthread_mutex_lock(&a->mu);
    unsigned r = tg_gw_tokens_lookup(a->tokens, token, len, principal, plen);
    pthread_mutex_unlock(&a->mu);
    return r;
}

int tg_gw_auth_set_origins(struct tg_gw_auth *a, const char *const *origins, size_t n)
{
    char **copy = n ? calloc(n, sizeof *copy) : NULL;
    if (n && !copy)
        return -1;
    for (size_t i = 0; i < n; i++) {
        copy[i] = strdup(origins[i]);
        if (!copy[i]) {
            free_origins(copy, i);
            return -1;
        }
    }
    pthread_mutex_lock(&a->mu);
    char **old = a->origins;
    size_t old_n = a->n_origins;
    a->origins = copy;
    a->n_origins = n;
    pthread_mutex_unlock(&a->mu);
    free_origins(old, old_n);
    return 0;
}

static int origin_eq(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    if (la && a[la - 1] == '/')
        la--;
    if (lb && b[lb - 1] == '/')
        lb--;
    return la == lb && strncasecmp(a, b, la) == 0;
}

int tg_gw_auth_origin_allowed(struct tg_gw_auth *a, const char *origin)
{
    if (!origin || !*origin)
        return 0;
    for (size_t i = 0; i < sizeof k_default_origins / sizeof k_default_origins[0]; i++)
        if (origin_eq(origin, k_default_origins[i]))
            return 1;
    int ok = 0;
    pthread_mutex_lock(&a->mu);
    for (size_t i = 0; i < a->n_origins && !ok; i++)
        ok = origin_eq(origin, a->origins[i]);
    pthread_mutex_unlock(&a->mu);
    return ok;
}
