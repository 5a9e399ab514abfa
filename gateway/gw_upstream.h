/* gw_upstream.h: where bridge sessions connect to: the embedded service
 * (an in-process socketpair from tg_service_connect_local) or an external
 * traced at a UNIX path, @abstract name or host:port. One connection per
 * client session.
 *
 * Health: the embedded service is healthy while it exists. An external
 * upstream is probed every probe interval with a non-blocking connect, and
 * sessions report connection failures as they happen; the flag is atomic so
 * the WebSocket thread may read it (tg_gw_upstream_healthy in gw.h).
 *
 * Threading: everything but tg_gw_upstream_is_healthy runs on the loop. */
#ifndef TRACEGATE_GATEWAY_GW_UPSTREAM_H
#define TRACEGATE_GATEWAY_GW_UPSTREAM_H

#include <stddef.h>
#include <stdint.h>

#include "gw.h"

struct event_base;
struct tg_service;
struct tg_gw_upstream;

struct tg_gw_upstream *tg_gw_upstream_new_embedded(struct event_base *base, struct tg_service *svc,
                                                   enum tg_gw_port port);
/* addr is resolved now (blocking DNS). NULL with a message on a bad address.
 *
 * A UNIX upstream is only trusted when the process listening there runs as
 * root or as our own uid (SO_PEERCRED of each connection): anyone can create
 * a socket in /tmp, and a squatter at the consumer path would see every
 * trace config and could answer with anything. With trust_owner (an address
 * the operator named explicitly) the owner found at start-up is also
 * accepted, and logged. A socket owned by anyone else is refused at
 * start-up (NULL with the reason) and on every later connection. */
struct tg_gw_upstream *tg_gw_upstream_new_external(struct event_base *base, const char *addr, enum tg_gw_port port,
                                                   uint32_t probe_interval_ms, int trust_owner, char *err,
                                                   size_t errlen);
/* A raw node's socket (--node NAME=ADDR, a traced-compatible consumer or producer socket):
 * connections to it are made, checked and introduced as an external upstream's are (the owner
 * check on a UNIX socket, whose owner at start-up is trusted as for an explicitly named upstream;
 * tg_gw_upstream_identity_frame for TCP consumer connections), without a health probe or health
 * reports. Nothing is connected at start-up but a UNIX socket (to learn its owner). NULL with a
 * message on a bad address. */
struct tg_gw_upstream *tg_gw_upstream_new_node(struct event_base *base, const char *name, const char *addr,
                                               enum tg_gw_port port, char *err, size_t errlen);
void tg_gw_upstream_free(struct tg_gw_upstream *u);

/* A new connected (or connecting: non-blocking TCP) socket for the client
 * `who`; -1 with a message. The caller owns the fd. The embedded service
 * learns who's identity (tg_gw_identity_for_service); an external traced on
 * TCP learns it from the frame tg_gw_upstream_identity_frame() builds. */
int tg_gw_upstream_connect(struct tg_gw_upstream *u, const struct tg_gw_client_info *who, char *err, size_t errlen);
/* The IPC frame (4-byte header included) to send first on a new upstream
 * connection so the service attributes it to `who`: SetPeerIdentity{uid,
 * pid} for consumer connections to an external service over TCP (traced
 * would otherwise take the gateway's connection for uid 0). A principal
 * without a local uid gets a uid derived from its name in a range no real
 * account uses (0x40000000 + 24 bits of FNV-1a), so traced still keeps
 * principals apart. Returns the length, or 0 when nothing is to be sent. */
size_t tg_gw_upstream_identity_frame(const struct tg_gw_upstream *u, const struct tg_gw_client_info *who,
                                     uint8_t *buf, size_t cap);
/* Sessions report what they saw: ok=0 after a failed connection. */
void tg_gw_upstream_report(struct tg_gw_upstream *u, int ok);
int tg_gw_upstream_is_healthy(const struct tg_gw_upstream *u);
int tg_gw_upstream_is_external(const struct tg_gw_upstream *u);
/* An external upstream on a UNIX socket: traced sees our uid for every client. */
int tg_gw_upstream_is_external_unix(const struct tg_gw_upstream *u);
/* "embedded service" or the external address. */
const char *tg_gw_upstream_describe(const struct tg_gw_upstream *u);

#endif
