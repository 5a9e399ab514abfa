/* tls.h: TLS for tracegate's listeners and clients (OpenSSL through
 * libevent's bufferevent_openssl).
 *
 * Data path (docs/gateway.md, "TLS data path"): where the kernel offers TLS
 * (the `tls` TCP ULP), OpenSSL runs on the socket with SSL_OP_ENABLE_KTLS and
 * the kernel encrypts and decrypts records after the handshake; elsewhere
 * OpenSSL runs as a filter over a socket bufferevent, so records are produced
 * into an evbuffer and written with one writev per loop turn (and read many
 * records per read). Which path a process uses is decided once (tg_tls_set_path);
 * every connection's outcome (kTLS send/receive engaged or not) is counted
 * after its handshake (tg_tls_stats_get).
 *
 * Certificates, keys and CA bundles are read through net/tls_files.h: from the
 * descriptor that was checked, at every (re)load and every client connect.
 *
 * Servers: TLS 1.2+ with modern AEAD ciphers, optional client-certificate
 * verification against a CA (mTLS), SNI (extra certificate per server name),
 * and reload of certificates without dropping connections (new handshakes
 * use the new context; established ones keep theirs: SSL_CTX is refcounted).
 * Clients: server verification against a CA file (or the system store), the
 * host name checked against the certificate, optional client certificate.
 *
 * Threading: all functions run on the event_base's thread. */
#ifndef TRACEGATE_NET_TLS_H
#define TRACEGATE_NET_TLS_H

#include <stddef.h>
#include <stdint.h>

#include "tracegate/conn.h"

struct event_base;
struct bufferevent;

struct tg_tls_sni {
    const char *server_name;
    const char *cert_file, *key_file;
};

struct tg_tls_server_config {
    const char *cert_file, *key_file;
    const char *ca_file;         /* verify client certificates against this CA */
    int require_client_cert;     /* refuse handshakes without a valid client certificate */
    const struct tg_tls_sni *sni; /* optional extra certificates */
    size_t n_sni;
    const char *alpn;            /* if set, the only ALPN protocol accepted (e.g. "h2"); a client
                                    that does not offer it fails the handshake */
    int check_files;             /* 1: keys and CA bundles must pass tracegated's ownership and
                                    mode rules on every (re)load (net/tls_files.h) */
};

struct tg_tls_server;

struct tg_tls_server *tg_tls_server_new(const struct tg_tls_server_config *cfg, char *err, size_t errlen);
/* Re-reads the files named in the config given to _new. On failure the old
 * context stays in use. */
int tg_tls_server_reload(struct tg_tls_server *s, char *err, size_t errlen);
void tg_tls_server_free(struct tg_tls_server *s);

/* Outcome of a server handshake. On success c is a connected tg_conn (the
 * callee owns it); subject is the verified client certificate's subject ("" if
 * none). On failure c is NULL and error says why. */
struct tg_tls_peer {
    int cert_verified;
    char subject[256]; /* X509_NAME_oneline text; a longer one ends in a digest (tg_tls_subject_text) */
    char cn[64];       /* the subject's commonName as the certificate holds it (the last one if it
                        * has several), "" if none or longer: never parsed back out of `subject`,
                        * where a "/CN=" inside another field's value would look like one */
};

/* The subject of cert (an X509 *) as X509_NAME_oneline writes it, into out: as is when it fits,
 * else its start and a digest of the whole text (base/name_fit.h), so two certificates whose
 * subjects differ only past the buffer's end never get the same text. "" if cert has none.
 * 0, or -1 (out of memory; out is "") when no text that is surely this subject's was made. */
int tg_tls_subject_text(const void *cert, char *out, size_t cap);
/* The commonName of cert's subject (the last entry if several), into out (cap bytes); "" when it
 * has none, it does not fit, or it holds a NUL. */
void tg_tls_subject_cn(const void *cert, char *out, size_t cap);
typedef void (*tg_tls_accept_cb)(void *arg, tg_conn *c, const struct tg_tls_peer *peer, const char *error);

/* Starts a server handshake on an accepted socket (takes ownership of fd);
 * handshake_timeout_ms is an absolute deadline from now (bytes arriving do
 * not extend it).
 * cb runs exactly once, from the loop. */
int tg_tls_server_accept(struct tg_tls_server *s, struct event_base *base, int fd, int handshake_timeout_ms,
                         const struct tg_conn_opts *opts, tg_tls_accept_cb cb, void *arg);

struct tg_tls_client_config {
    const char *ca_file;     /* NULL = system trust store */
    const char *cert_file, *key_file;
    const char *server_name; /* SNI and verification name */
    int insecure;            /* skip verification (tests only) */
    const char *alpn;        /* ALPN protocol to offer (e.g. "h2"); NULL = none */
    int check_files;         /* 1: the key and CA bundle must pass tracegated's ownership and mode
                                rules, checked on the descriptor read at every connect */
};

/* Raw TLS streams for protocols that are not IPC frames (gateway links):
 * a client bufferevent (connecting) or a server one (accepting) over fd
 * (taken over), with BEV_OPT_CLOSE_ON_FREE. The caller sets callbacks and
 * waits for BEV_EVENT_CONNECTED. NULL with err on setup errors.
 * On the batched path the returned bufferevent is a filter: a client dialing
 * with fd -1 connects its socket bufferevent, bufferevent_get_underlying(bev)
 * (NULL on the socket path: then bev itself). */
struct bufferevent *tg_tls_client_bev(struct event_base *base, int fd, const struct tg_tls_client_config *cfg, char *err,
                                      size_t errlen);
struct bufferevent *tg_tls_server_accept_bev(struct tg_tls_server *s, struct event_base *base, int fd, char *err,
                                             size_t errlen);
/* After BEV_EVENT_CONNECTED: the peer's certificate and the ALPN protocol
 * agreed ("" if none; alpn has room for 32 bytes). */
void tg_tls_bev_peer(struct bufferevent *bev, struct tg_tls_peer *peer, char *alpn, size_t alpnlen);

/* Wraps a connecting/connected socket (takes ownership of fd) as a TLS client
 * tg_conn. Frames may be queued at once; handshake or verification failures
 * close the conn with the reason. NULL with err on setup errors. */
tg_conn *tg_tls_client_conn(struct event_base *base, int fd, const struct tg_tls_client_config *cfg,
                            const struct tg_conn_opts *opts, char *err, size_t errlen);

/* ---------------------------------------------------------- data path */

enum tg_tls_path {
    TG_TLS_PATH_AUTO = 0, /* SOCKET when the kernel offers TLS, else BATCHED */
    TG_TLS_PATH_BATCHED,  /* OpenSSL filter over a socket bufferevent: records batched per writev */
    TG_TLS_PATH_SOCKET,   /* OpenSSL on the socket, kTLS requested (silently user space if refused) */
};

/* Chooses the path of connections created from now on (process-wide; main thread, before the
 * loop runs or between connections). */
void tg_tls_set_path(enum tg_tls_path path);
enum tg_tls_path tg_tls_get_path(void);
/* The path new connections take: AUTO resolved with tg_tls_kernel_offers_ktls(). */
enum tg_tls_path tg_tls_effective_path(void);
/* 1 if the kernel offers the `tls` TCP ULP to this process (probed once: setsockopt(TCP_ULP,
 * "tls") on an unconnected TCP socket says ENOTCONN if it exists, ENOENT if not). Any thread. */
int tg_tls_kernel_offers_ktls(void);
const char *tg_tls_path_name(enum tg_tls_path path); /* "auto", "batched", "socket" */
int tg_tls_path_parse(const char *s, enum tg_tls_path *out); /* 0 or -1 */

/* Established TLS connections of this process (counted once a handshake completes, until the
 * connection's SSL is freed), by what they use. Relaxed atomics: read from any thread. */
struct tg_tls_stats {
    int kernel_ktls;         /* tg_tls_kernel_offers_ktls() */
    enum tg_tls_path path;   /* tg_tls_effective_path() */
    uint64_t open;           /* established connections now */
    uint64_t ktls_send;      /* ... whose sending the kernel encrypts */
    uint64_t ktls_recv;      /* ... whose receiving the kernel decrypts */
    uint64_t batched;        /* ... on the batched (filter) path */
    uint64_t socket_user;    /* ... on the socket path without kTLS in either direction */
    uint64_t total, total_ktls_send, total_ktls_recv, total_batched; /* handshakes ever completed */
};
void tg_tls_stats_get(struct tg_tls_stats *st);

/* One connection's data path, valid after BEV_EVENT_CONNECTED (bev from this file, or the
 * bufferevent of a TLS tg_conn). -1 if bev is not TLS. */
struct tg_tls_conn_info {
    int batched, ktls_send, ktls_recv;
    char version[16], cipher[64];
};
int tg_tls_bev_info(struct bufferevent *bev, struct tg_tls_conn_info *info);

#endif
