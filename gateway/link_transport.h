/* link_transport.h: the byte stream under a gateway link (docs/link-protocol.md §2): TLS with
 * ALPN h2 or plain TCP (dialed with asynchronous DNS, or accepted), a child `ssh ... tracegated
 * --link-stdio` on a socketpair, or this process's own stdin/stdout.
 *
 * A transport reports once that it is up (TLS handshake done, with the peer's certificate and
 * the ALPN protocol) or failed, then delivers bytes until it fails or is freed. Dialing and TLS
 * handshakes have an absolute deadline. Output goes to tg_link_tr_output(); the callback
 * on_drain says the output fell under the low watermark.
 *
 * Ownership: the caller frees the transport (never inside its own callbacks: callbacks are
 * deferred, so freeing after one returned is safe). Threading: the event_base's thread. */
#ifndef TRACEGATE_GATEWAY_LINK_TRANSPORT_H
#define TRACEGATE_GATEWAY_LINK_TRANSPORT_H

#include <stddef.h>
#include <sys/types.h>

struct event_base;
struct evdns_base;
struct evbuffer;
struct tg_tls_server;
struct tg_tls_client_config;
struct tg_link_tr;

struct tg_link_tr_info {
    int tls;
    int cert_verified;
    char subject[256]; /* verified client/server certificate subject, "" if none */
    char cn[64];       /* its commonName, read from the certificate (struct tg_tls_peer), "" if none */
    char alpn[32];
    char peer[128];    /* printable */
    char source[64];   /* address without port, for per-source limits */
    int loopback;
    int stdio;         /* --link-stdio or an ssh child: authenticated by ssh */
    int tls_batched, ktls_send, ktls_recv; /* the TLS data path (net/tls.h tg_tls_bev_info) */
};

struct tg_link_tr_cbs {
    void (*on_up)(void *arg, const struct tg_link_tr_info *info);
    void (*on_read)(void *arg, struct evbuffer *in);
    void (*on_drain)(void *arg);
    void (*on_error)(void *arg, const char *why); /* once; the transport is dead */
};

/* tls:// or tcp:// HOST:PORT. tls may be NULL for tcp. */
struct tg_link_tr *tg_link_tr_dial(struct event_base *base, struct evdns_base *dns, const char *host, int port,
                                   const struct tg_tls_client_config *tls, int deadline_ms,
                                   const struct tg_link_tr_cbs *cbs, void *arg, char *err, size_t errlen);
/* Runs argv (argv[0] searched in PATH) with stdin and stdout on a socketpair; its stderr is
 * logged line by line. */
struct tg_link_tr *tg_link_tr_spawn(struct event_base *base, char *const argv[], const struct tg_link_tr_cbs *cbs,
                                    void *arg, char *err, size_t errlen);
/* This process's stdin (read) and stdout (write). */
struct tg_link_tr *tg_link_tr_stdio(struct event_base *base, const struct tg_link_tr_cbs *cbs, void *arg, char *err,
                                    size_t errlen);
/* An accepted socket (taken over); tls may be NULL for h2c. */
struct tg_link_tr *tg_link_tr_accept(struct event_base *base, int fd, struct tg_tls_server *tls, int deadline_ms,
                                     const struct tg_link_tr_cbs *cbs, void *arg, char *err, size_t errlen);

struct evbuffer *tg_link_tr_output(struct tg_link_tr *t);
size_t tg_link_tr_output_len(const struct tg_link_tr *t);
/* Stops or resumes reading (backpressure from the HTTP/2 layer). */
void tg_link_tr_pause(struct tg_link_tr *t, int pause);
/* Who is at the other end, printable ("host:port" as dialed, before it is up). */
const char *tg_link_tr_peer(const struct tg_link_tr *t);
/* Sets the callback argument (a transport accepted before its link existed). */
void tg_link_tr_set_arg(struct tg_link_tr *t, void *arg);
/* Frees the transport: the socket is closed, an ssh child is sent SIGTERM and reaped later. */
void tg_link_tr_free(struct tg_link_tr *t);
/* At exit, once the event loop stopped: forgets the children still being reaped. */
void tg_link_tr_orphans_free(void);

#endif
