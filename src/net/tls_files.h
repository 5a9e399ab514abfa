/* tls_files.h: TLS certificates, private keys and CA bundles read from the very descriptor whose
 * owner and mode were checked (base/file_trust.h), never re-opened by path.
 *
 * OpenSSL's *_file loaders open the file by name, so a check made on the name beforehand (at
 * start, at SIGHUP) says nothing about the bytes loaded later: whoever can write the directory
 * holding a CA bundle could swap in their own between the check and the load, and a gateway link
 * that reconnects hours after the check would load it unchecked. Here every load opens the file
 * once, checks that descriptor, reads at most TG_TLS_FILE_MAX bytes from it and parses them from
 * memory.
 *
 * check = 0 reads any regular file (a user's own client program, e.g. tracectl's --cacert);
 * check = 1 applies tracegated's rules: a private key TG_FILE_PRIVATE_KEY, a CA bundle
 * TG_FILE_DECIDES_ACCESS, a certificate chain (useless without its key) nothing more. Encrypted
 * private keys are refused rather than prompting on a terminal.
 *
 * Ownership: the caller owns what _load returns (free with X509_STORE_free and
 * sk_X509_NAME_pop_free(names, X509_NAME_free)). Threading: any thread; no shared state. */
#ifndef TRACEGATE_NET_TLS_FILES_H
#define TRACEGATE_NET_TLS_FILES_H

#include <openssl/ssl.h>
#include <stddef.h>

#define TG_TLS_FILE_MAX (4u << 20) /* a CA bundle of every public root is ~200 KiB */

/* Installs the certificate chain in cert (leaf first) and the private key in key on ctx, and
 * checks that they match. 0, or -1 with the file and the reason in err. */
int tg_tls_use_cert_key(SSL_CTX *ctx, const char *cert, const char *key, int check, char *err, size_t errlen);

/* Reads the CA bundle at path: every certificate (and CRL) into a new store, and, when names is
 * not NULL, the certificates' subjects (each once) for a server's client-CA list. 0, or -1 with
 * err (nothing returned). A file without a single certificate is an error. */
int tg_tls_ca_load(const char *path, int check, X509_STORE **store, STACK_OF(X509_NAME) **names, char *err,
                   size_t errlen);

/* As tg_tls_ca_load, installed on ctx as its verification store (and client-CA list when
 * client_names). */
int tg_tls_ctx_use_ca(SSL_CTX *ctx, const char *path, int check, int client_names, char *err, size_t errlen);

#endif
