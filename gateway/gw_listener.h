/* gw_listener.h: UNIX, TCP and TLS listeners for the consumer or producer
 * port. Each listener has its own bind address, authentication mode, roles
 * for clients admitted without a token, and connection cap (see
 * tg_gw_listen_spec in gw_config.h). Accepted sockets become tg_conns and go
 * to the gateway core, which pairs each with its own upstream connection.
 *
 * TLS listeners use net/tls.h (tg_tls_server_*): the listener owns a
 * server context (reloaded on SIGHUP; established connections keep theirs),
 * runs the handshake with the handshake timeout, and a client whose
 * certificate verified against the CA gets auth=cert, the cert roles and the
 * certificate subject as its principal; others follow the listener's auth
 * mode (a non-loopback TLS listener defaults to in-band tokens).
 *
 * Threading: the gateway's event loop. */
#ifndef TRACEGATE_GATEWAY_GW_LISTENER_H
#define TRACEGATE_GATEWAY_GW_LISTENER_H

#include <stddef.h>

#include "gw.h"

struct tg_gw_listener;
struct tg_gw_listen_spec;
struct tg_gw_config;

/* Whether tls:// listeners can be started in this build. */
int tg_gw_listener_tls_available(void);

/* Binds and starts accepting. NULL with a message on error. */
struct tg_gw_listener *tg_gw_listener_new(struct tg_gw *gw, const struct tg_gw_listen_spec *spec,
                                          const struct tg_gw_config *cfg, char *err, size_t errlen);
/* Stops accepting (the socket is closed; UNIX socket files removed). Live
 * clients are unaffected. */
void tg_gw_listener_stop(struct tg_gw_listener *l);
/* Frees the listener; clients accepted by it must be gone already or not
 * reference it any more (tg_gw_free takes care of the order). */
void tg_gw_listener_free(struct tg_gw_listener *l);
/* SIGHUP: reloads certificates of TLS listeners. Returns 0 or -1. */
int tg_gw_listener_reload(struct tg_gw_listener *l, char *err, size_t errlen);
/* "consumer tcp://127.0.0.1:7001 (auth=local, roles=admin)". */
const char *tg_gw_listener_describe(const struct tg_gw_listener *l);
/* A client this listener accepted has gone. */
void tg_gw_listener_conn_closed(struct tg_gw_listener *l);
size_t tg_gw_listener_conn_count(const struct tg_gw_listener *l);
/* The bound address ("127.0.0.1:7001", with the real port for ":0" binds). */
const char *tg_gw_listener_address(const struct tg_gw_listener *l);

#endif
