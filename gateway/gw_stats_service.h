/* gw_stats_service.h: the gateway-local service TracegateGateway (GetStats: a KCDATA snapshot of
 * this node's gateway counters and of the nodes its fleet knows; `tracectl stats`). See
 * gw_stats_service.c and docs/kcdata.md. Registered once at startup; the fleet may be NULL (no
 * node containers then). Event loop thread. */
#ifndef TRACEGATE_GATEWAY_GW_STATS_SERVICE_H
#define TRACEGATE_GATEWAY_GW_STATS_SERVICE_H

#include <stddef.h>
#include <stdint.h>

#include "fleet.h"
#include "gw.h"

/* Registers TracegateGateway on gw (one per process: the service description is static).
 * Returns 0 or -1. */
int tg_gw_stats_service_register(struct tg_gw *gw, struct tg_fleet *fleet);

/* The snapshot GetStats answers with: a KCDATA buffer (malloc'd into *out) holding this node's
 * descriptor, the gateway's counters (stats container id 1) and one stats container per other
 * node (id 2, 3, ...: "node", "state", "via" strings and that node's numbers). Returns 0 or -1
 * with err set. */
int tg_gw_stats_snapshot(struct tg_gw *gw, struct tg_fleet *fleet, uint8_t **out, size_t *len, char *err,
                         size_t errlen);

#endif
