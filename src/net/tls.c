/* tls.c: TLS server contexts (mTLS, SNI, reload) and TLS client connections over bufferevent_openssl
 * (on the data path tls_path.c picks). */
#include "net/tls.h"

#include <arpa/inet.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <event2/event.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/name_fit.h"
#include "net/tls_files.h"
#include "net/tls_path.h"
#include "tracegate/log.h"

#define LOG "tls"

/* TLS 1.2 suites: forward-secret AEAD only. TLS 1.3 keeps OpenSSL's defaults (all AEAD). */
static const char k_tls12_ciphers[] = "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:"
                                      "ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-RSA-AES256-GCM-SHA384:"
                                      "ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305";

static void ssl_error(char *err, size_t errlen, const char *what)
{
    unsigned long e = ERR_get_error();
    char buf[256] = "";
    if (e)
        ERR_error_string_n(e, buf, sizeof buf);
    snprintf(err, errlen, "%s%s%s", what, buf[0] ? ": " : "", buf);
    ERR_clear_error();
}

static SSL_CTX *base_ctx(const SSL_METHOD *method, char *err, size_t errlen)
{
    SSL_CTX *ctx = SSL_CTX_new(method);
    if (!ctx) {
        ssl_error(err, errlen, "cannot create TLS context");
        return NULL;
    }
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    SSL_CTX_set_options(ctx, SSL_OP_NO_COMPRESSION | SSL_OP_NO_RENEGOTIATION | SSL_OP_CIPHER_SERVER_PREFERENCE);
    SSL_CTX_set_mode(ctx, SSL_MODE_RELEASE_BUFFERS);
    if (SSL_CTX_set_cipher_list(ctx, k_tls12_ciphers) != 1) {
        ssl_error(err, errlen, "cannot set TLS ciphers");
        SSL_CTX_free(ctx);
        return NULL;
    }
    return ctx;
}

/* ---------------------------------------------------------------- server */

struct tg_tls_server {
    char *alpn;
    char *cert, *key, *ca;
    int require_client_cert;
    int check_files;
    struct {
        char *name, *cert, *key;
        SSL_CTX *ctx;
    } *sni;
    size_t n_sni;
    SSL_CTX *ctx;
};

static int servername_cb(SSL *ssl, int *alert, void *arg)
{
    struct tg_tls_server *s = arg;
    (void)alert;
    const char *name = SSL_get_servername(ssl, TLSEXT_NAMETYPE_host_name);
    if (!name)
        return SSL_TLSEXT_ERR_OK;
    for (size_t i = 0; i < s->n_sni; i++) {
        if (s->sni[i].ctx && strcasecmp(name, s->sni[i].name) == 0) {
            int mode = SSL_get_verify_mode(ssl);
            SSL_set_SSL_CTX(ssl, s->sni[i].ctx);
            SSL_set_verify(ssl, mode, NULL); /* keep the client-certificate policy */
            break;
        }
    }
    return SSL_TLSEXT_ERR_OK;
}

/* ALPN on a server that speaks exactly one protocol: pick it or fail the handshake. */
static int alpn_select_cb(SSL *ssl, const unsigned char **out, unsigned char *outlen, const unsigned char *in,
                          unsigned int inlen, void *arg)
{
    (void)ssl;
    const char *want = arg;
    size_t wl = strlen(want);
    for (unsigned int i = 0; i < inlen;) {
        unsigned int l = in[i];
        if (i + 1 + l > inlen)
            break;
        if (l == wl && memcmp(in + i + 1, want, wl) == 0) {
            *out = in + i + 1;
            *outlen = (unsigned char)l;
            return SSL_TLSEXT_ERR_OK;
        }
        i += 1 + l;
    }
    return SSL_TLSEXT_ERR_ALERT_FATAL;
}

static SSL_CTX *server_ctx(struct tg_tls_server *s, const char *cert, const char *key, char *err, size_t errlen)
{
    SSL_CTX *ctx = base_ctx(TLS_server_method(), err, errlen);
    if (!ctx)
        return NULL;
    if (tg_tls_use_cert_key(ctx, cert, key, s->check_files, err, errlen) != 0)
        goto fail;
    static const unsigned char sid_ctx[] = "tracegate";
    SSL_CTX_set_session_id_context(ctx, sid_ctx, sizeof sid_ctx - 1);
    if (s->alpn)
        SSL_CTX_set_alpn_select_cb(ctx, alpn_select_cb, s->alpn);
    if (s->ca) {
        if (tg_tls_ctx_use_ca(ctx, s->ca, s->check_files, 1, err, errlen) != 0)
            goto fail;
        SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | (s->require_client_cert ? SSL_VERIFY_FAIL_IF_NO_PEER_CERT : 0),
                           NULL);
    } else if (s->require_client_cert) {
        snprintf(err, errlen, "client certificates are required but no CA file was given");
        goto fail;
    }
    return ctx;
fail:
    SSL_CTX_free(ctx);
    return NULL;
}

static int build_contexts(struct tg_tls_server *s, SSL_CTX **main_out, SSL_CTX **sni_out, char *err, size_t errlen)
{
    *main_out = server_ctx(s, s->cert, s->key, err, errlen);
    if (!*main_out)
        return -1;
    for (size_t i = 0; i < s->n_sni; i++) {
        sni_out[i] = server_ctx(s, s->sni[i].cert, s->sni[i].key, err, errlen);
        if (!sni_out[i]) {
            for (size_t j = 0; j < i; j++)
                SSL_CTX_free(sni_out[j]);
            SSL_CTX_free(*main_out);
            return -1;
        }
    }
    if (s->n_sni) {
        SSL_CTX_set_tlsext_servername_callback(*main_out, servername_cb);
        SSL_CTX_set_tlsext_servername_arg(*main_out, s);
    }
    return 0;
}

static char *dup_or_null(const char *s) { return s ? strdup(s) : NULL; }

void tg_tls_server_free(struct tg_tls_server *s)
{
    if (!s)
        return;
    SSL_CTX_free(s->ctx);
    for (size_t i = 0; i < s->n_sni; i++) {
        SSL_CTX_free(s->sni[i].ctx);
        free(s->sni[i].name);
        free(s->sni[i].cert);
        free(s->sni[i].key);
    }
    free(s->sni);
    free(s->alpn);
    free(s->cert);
    free(s->key);
    free(s->ca);
    free(s);
}

struct tg_tls_server *tg_tls_server_new(const struct tg_tls_server_config *cfg, char *err, size_t errlen)
{
    struct tg_tls_server *s = calloc(1, sizeof *s);
    if (!s) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    s->alpn = dup_or_null(cfg->alpn);
    s->cert = dup_or_null(cfg->cert_file);
    s->key = dup_or_null(cfg->key_file);
    s->ca = dup_or_null(cfg->ca_file);
    s->require_client_cert = cfg->require_client_cert;
    s->check_files = cfg->check_files;
    if (cfg->n_sni) {
        s->sni = calloc(cfg->n_sni, sizeof *s->sni);
        if (!s->sni) {
            tg_tls_server_free(s);
            snprintf(err, errlen, "out of memory");
            return NULL;
        }
        s->n_sni = cfg->n_sni;
        for (size_t i = 0; i < cfg->n_sni; i++) {
            s->sni[i].name = dup_or_null(cfg->sni[i].server_name);
            s->sni[i].cert = dup_or_null(cfg->sni[i].cert_file);
            s->sni[i].key = dup_or_null(cfg->sni[i].key_file);
        }
    }
    SSL_CTX *sni_ctx[16];
    if (s->n_sni > 16) {
        snprintf(err, errlen, "at most 16 SNI certificates");
        tg_tls_server_free(s);
        return NULL;
    }
    if (build_contexts(s, &s->ctx, sni_ctx, err, errlen) != 0) {
        tg_tls_server_free(s);
        return NULL;
    }
    for (size_t i = 0; i < s->n_sni; i++)
        s->sni[i].ctx = sni_ctx[i];
    return s;
}

int tg_tls_server_reload(struct tg_tls_server *s, char *err, size_t errlen)
{
    SSL_CTX *main_ctx, *sni_ctx[16];
    if (build_contexts(s, &main_ctx, sni_ctx, err, errlen) != 0)
        return -1;
    /* established connections hold their own references */
    SSL_CTX_free(s->ctx);
    s->ctx = main_ctx;
    for (size_t i = 0; i < s->n_sni; i++) {
        SSL_CTX_free(s->sni[i].ctx);
        s->sni[i].ctx = sni_ctx[i];
    }
    return 0;
}

struct pending_accept {
    struct bufferevent *bev;
    struct event *deadline; /* absolute: a client dribbling bytes does not push it back */
    struct event_base *base;
    struct tg_conn_opts opts;
    tg_tls_accept_cb cb;
    void *arg;
};

static void describe_failure(struct bufferevent *bev, short what, char *buf, size_t len)
{
    unsigned long e = bufferevent_get_openssl_error(bev);
    if (e) {
        char tmp[200];
        ERR_error_string_n(e, tmp, sizeof tmp);
        snprintf(buf, len, "TLS handshake failed: %s", tmp);
    } else if (what & BEV_EVENT_TIMEOUT) {
        snprintf(buf, len, "TLS handshake timed out");
    } else if (what & BEV_EVENT_EOF) {
        snprintf(buf, len, "peer closed during the TLS handshake");
    } else {
        snprintf(buf, len, "TLS handshake failed");
    }
}

/* Ends a pending handshake: frees what it held and reports once. */
static void accept_done(struct pending_accept *pa, tg_conn *c, const struct tg_tls_peer *peer, const char *why)
{
    if (pa->deadline)
        event_free(pa->deadline);
    tg_tls_accept_cb cb = pa->cb;
    void *cb_arg = pa->arg;
    free(pa);
    cb(cb_arg, c, peer, why);
}

static void deadline_cb(evutil_socket_t fd, short what, void *arg)
{
    struct pending_accept *pa = arg;
    (void)fd;
    (void)what;
    bufferevent_free(pa->bev);
    ERR_clear_error();
    accept_done(pa, NULL, NULL, "TLS handshake timed out");
}

int tg_tls_subject_text(const void *cert, char *out, size_t cap)
{
    if (!cap)
        return -1;
    out[0] = '\0';
    const X509_NAME *n = cert ? X509_get_subject_name((const X509 *)cert) : NULL;
    if (!n)
        return 0;
    char *full = X509_NAME_oneline(n, NULL, 0); /* the whole text, however long */
    int rc = full && tg_name_fit(out, cap, "", full) >= 0 ? 0 : -1;
    if (rc)
        out[0] = '\0';
    OPENSSL_free(full);
    return rc;
}

void tg_tls_subject_cn(const void *cert, char *out, size_t cap)
{
    if (!cap)
        return;
    out[0] = '\0';
    const X509_NAME *n = cert ? X509_get_subject_name((const X509 *)cert) : NULL;
    int i = -1, last = -1;
    while (n && (i = X509_NAME_get_index_by_NID(n, NID_commonName, i)) >= 0)
        last = i;
    if (last < 0)
        return;
    const ASN1_STRING *s = X509_NAME_ENTRY_get_data(X509_NAME_get_entry(n, last));
    unsigned char *utf8 = NULL;
    int len = s ? ASN1_STRING_to_UTF8(&utf8, s) : -1;
    if (len > 0 && (size_t)len < cap && !memchr(utf8, 0, (size_t)len)) {
        memcpy(out, utf8, (size_t)len);
        out[len] = '\0';
    }
    OPENSSL_free(utf8);
}

static void accept_event_cb(struct bufferevent *bev, short what, void *arg)
{
    struct pending_accept *pa = arg;
    if (what & BEV_EVENT_CONNECTED) {
        struct tg_tls_peer peer;
        memset(&peer, 0, sizeof peer);
        SSL *ssl = bufferevent_openssl_get_ssl(bev);
        X509 *cert = SSL_get_peer_certificate(ssl);
        if (cert) {
            /* a subject that cannot be named surely (out of memory) vouches for nobody */
            peer.cert_verified = SSL_get_verify_result(ssl) == X509_V_OK &&
                                 tg_tls_subject_text(cert, peer.subject, sizeof peer.subject) == 0;
            tg_tls_subject_cn(cert, peer.cn, sizeof peer.cn);
            X509_free(cert);
        }
        tg_conn *c = tg_conn_new_bev(pa->base, bev, &pa->opts, NULL, NULL);
        accept_done(pa, c, &peer, c ? NULL : "out of memory");
        return;
    }
    char why[256];
    describe_failure(bev, what, why, sizeof why);
    ERR_clear_error();
    bufferevent_free(bev);
    accept_done(pa, NULL, NULL, why);
}

int tg_tls_server_accept(struct tg_tls_server *s, struct event_base *base, int fd, int handshake_timeout_ms,
                         const struct tg_conn_opts *opts, tg_tls_accept_cb cb, void *arg)
{
    struct pending_accept *pa = calloc(1, sizeof *pa);
    SSL *ssl = pa ? tg_tls_path_ssl_new(s->ctx) : NULL;
    if (!ssl) {
        free(pa);
        close(fd);
        return -1;
    }
    pa->base = base;
    pa->cb = cb;
    pa->arg = arg;
    if (opts)
        pa->opts = *opts;
    else
        tg_conn_opts_default(&pa->opts);
    pa->bev = tg_tls_path_bev(base, fd, ssl, BUFFEREVENT_SSL_ACCEPTING); /* frees ssl, closes fd on failure */
    if (!pa->bev) {
        free(pa);
        return -1;
    }
    bufferevent_setcb(pa->bev, NULL, NULL, accept_event_cb, pa);
    if (handshake_timeout_ms > 0) {
        pa->deadline = evtimer_new(base, deadline_cb, pa);
        if (!pa->deadline) {
            bufferevent_free(pa->bev);
            free(pa);
            return -1;
        }
        struct timeval tv = {handshake_timeout_ms / 1000, (handshake_timeout_ms % 1000) * 1000};
        evtimer_add(pa->deadline, &tv);
    }
    bufferevent_enable(pa->bev, EV_READ | EV_WRITE);
    return 0;
}

/* ---------------------------------------------------------------- client */

struct bufferevent *tg_tls_client_bev(struct event_base *base, int fd, const struct tg_tls_client_config *cfg, char *err,
                                      size_t errlen)
{
    SSL_CTX *ctx = base_ctx(TLS_client_method(), err, errlen);
    if (!ctx) {
        close(fd);
        return NULL;
    }
    SSL *ssl = NULL;
    if (!cfg->insecure) {
        if (cfg->ca_file) {
            if (tg_tls_ctx_use_ca(ctx, cfg->ca_file, cfg->check_files, 0, err, errlen) != 0)
                goto fail;
        } else if (SSL_CTX_set_default_verify_paths(ctx) != 1) {
            ssl_error(err, errlen, "cannot load the system's CA certificates");
            goto fail;
        }
        SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
    }
    if (cfg->cert_file && tg_tls_use_cert_key(ctx, cfg->cert_file, cfg->key_file, cfg->check_files, err, errlen) != 0)
        goto fail;
    ssl = tg_tls_path_ssl_new(ctx);
    if (!ssl) {
        ssl_error(err, errlen, "cannot create a TLS session");
        goto fail;
    }
    if (cfg->alpn) {
        unsigned char wire[64];
        size_t al = strlen(cfg->alpn);
        if (al == 0 || al >= sizeof wire) {
            snprintf(err, errlen, "bad ALPN protocol");
            goto fail;
        }
        wire[0] = (unsigned char)al;
        memcpy(wire + 1, cfg->alpn, al);
        if (SSL_set_alpn_protos(ssl, wire, (unsigned)(al + 1)) != 0) {
            ssl_error(err, errlen, "cannot set ALPN");
            goto fail;
        }
    }
    if (cfg->server_name && cfg->server_name[0]) {
        struct in6_addr a6;
        struct in_addr a4;
        int is_ip = inet_pton(AF_INET, cfg->server_name, &a4) == 1 || inet_pton(AF_INET6, cfg->server_name, &a6) == 1;
        if (!is_ip)
            SSL_set_tlsext_host_name(ssl, cfg->server_name);
        if (!cfg->insecure) {
            X509_VERIFY_PARAM *param = SSL_get0_param(ssl);
            if (is_ip)
                X509_VERIFY_PARAM_set1_ip_asc(param, cfg->server_name);
            else
                SSL_set1_host(ssl, cfg->server_name);
        }
    }
    SSL_CTX_free(ctx); /* the session keeps its own reference */
    ctx = NULL;
    struct bufferevent *bev = tg_tls_path_bev(base, fd, ssl, BUFFEREVENT_SSL_CONNECTING);
    if (!bev)
        snprintf(err, errlen, "cannot create the TLS stream");
    return bev;
fail:
    if (ssl)
        SSL_free(ssl);
    SSL_CTX_free(ctx);
    close(fd);
    return NULL;
}

tg_conn *tg_tls_client_conn(struct event_base *base, int fd, const struct tg_tls_client_config *cfg,
                            const struct tg_conn_opts *opts, char *err, size_t errlen)
{
    struct bufferevent *bev = tg_tls_client_bev(base, fd, cfg, err, errlen);
    if (!bev)
        return NULL;
    tg_conn *c = tg_conn_new_bev(base, bev, opts, NULL, NULL);
    if (!c)
        snprintf(err, errlen, "out of memory");
    return c;
}

struct bufferevent *tg_tls_server_accept_bev(struct tg_tls_server *s, struct event_base *base, int fd, char *err,
                                             size_t errlen)
{
    SSL *ssl = tg_tls_path_ssl_new(s->ctx);
    if (!ssl) {
        ssl_error(err, errlen, "cannot create a TLS session");
        close(fd);
        return NULL;
    }
    struct bufferevent *bev = tg_tls_path_bev(base, fd, ssl, BUFFEREVENT_SSL_ACCEPTING);
    if (!bev)
        snprintf(err, errlen, "cannot create the TLS stream");
    return bev;
}

void tg_tls_bev_peer(struct bufferevent *bev, struct tg_tls_peer *peer, char *alpn, size_t alpnlen)
{
    memset(peer, 0, sizeof *peer);
    SSL *ssl = bufferevent_openssl_get_ssl(bev);
    if (alpn && alpnlen)
        alpn[0] = '\0';
    if (!ssl)
        return;
    X509 *cert = SSL_get_peer_certificate(ssl);
    if (cert) {
        peer->cert_verified = SSL_get_verify_result(ssl) == X509_V_OK &&
                              tg_tls_subject_text(cert, peer->subject, sizeof peer->subject) == 0;
        tg_tls_subject_cn(cert, peer->cn, sizeof peer->cn);
        X509_free(cert);
    }
    const unsigned char *p = NULL;
    unsigned int pl = 0;
    SSL_get0_alpn_selected(ssl, &p, &pl);
    if (alpn && alpnlen && p && pl < alpnlen) {
        memcpy(alpn, p, pl);
        alpn[pl] = '\0';
    }
}
