/* tls_path.h: internal to src/net/tls*.c: creating a connection's SSL and its bufferevent on the
 * process's TLS data path (kTLS-capable socket BIO or batched filter), and counting what each
 * established connection uses. The public side is in net/tls.h.
 *
 * Threading: the event_base's thread; the counters are atomics read from any thread. */
#ifndef TRACEGATE_NET_TLS_PATH_H
#define TRACEGATE_NET_TLS_PATH_H

#include <event2/bufferevent_ssl.h>
#include <openssl/ssl.h>

#include "net/tls.h"

/* A new SSL from ctx, ready for tg_tls_path_bev: it carries the per-connection state that
 * counts the connection once its handshake completes (and uncounts it when the SSL is freed). */
SSL *tg_tls_path_ssl_new(SSL_CTX *ctx);

/* The bufferevent for ssl over fd (taken over; -1 = connect later through the socket
 * bufferevent) in state (BUFFEREVENT_SSL_CONNECTING or _ACCEPTING), on the effective path,
 * with BEV_OPT_CLOSE_ON_FREE | BEV_OPT_DEFER_CALLBACKS and dirty shutdowns allowed. On failure
 * ssl is freed, fd closed, NULL returned. */
struct bufferevent *tg_tls_path_bev(struct event_base *base, int fd, SSL *ssl,
                                    enum bufferevent_ssl_state state);

#endif
