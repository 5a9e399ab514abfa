/* fleet_service.h: registers TracegateFleet (Route, ListNodes) on the gateway; see fleet_service.c.
 * One fleet per process (the service description is static). Event loop thread. */
#ifndef TRACEGATE_GATEWAY_FLEET_SERVICE_H
#define TRACEGATE_GATEWAY_FLEET_SERVICE_H

#include "fleet.h"

int tg_fleet_service_register(struct tg_gw *gw, struct tg_fleet *f);

#endif
