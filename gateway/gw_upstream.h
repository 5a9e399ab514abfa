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
/* addr is resolved now (blocking DNS). NULL with a message on a bad address. */
struct tg_gw_upstream *tg_gw_upstream_new_external(struct event_base *base, const char *addr, enum tg_gw_port port,
                                                   uint32_t probe_interval_ms, char *err, size_t errlen);
void tg_gw_upstream_free(struct tg_gw_upstream *u);

/* A new connected (or connecting: non-blocking TCP) socket; -1 with a
 * message. The caller owns the fd. */
int tg_gw_upstream_connect(struct tg_gw_upstream *u, char *err, size_t errlen);
/* Sessions report what they saw: ok=0 after a failed connection. */
void tg_gw_upstream_report(struct tg_gw_upstream *u, int ok);
int tg_gw_upstream_is_healthy(const struct tg_gw_upstream *u);
int tg_gw_upstream_is_external(const struct tg_gw_upstream *u);
/* "embedded service" or the external address. */
const char *tg_gw_upstream_describe(const struct tg_gw_upstream *u);

#endif
