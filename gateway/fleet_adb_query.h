/* fleet_adb_query.h: the TracegateFleet.AdbDevices method (fleet_adb_query.c), registered with the
 * fleet's other methods by fleet_service.c; its ctx is the fleet. Threading: the gateway's loop. */
#ifndef TRACEGATE_GATEWAY_FLEET_ADB_QUERY_H
#define TRACEGATE_GATEWAY_FLEET_ADB_QUERY_H

#include "fleet.h"
#include "gw_bridge.h"

extern const struct tg_gw_local_method tg_fleet_adb_method;

#endif
