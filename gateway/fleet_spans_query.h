/* fleet_spans_query.h: the TracegateFleet.Spans method (fleet_spans_query.c), registered with the
 * fleet's other methods by fleet_service.c; its ctx is the fleet. Threading: the gateway's loop. */
#ifndef TRACEGATE_GATEWAY_FLEET_SPANS_QUERY_H
#define TRACEGATE_GATEWAY_FLEET_SPANS_QUERY_H

#include "fleet.h"
#include "gw_bridge.h"

/* Largest SpansRequest accepted (a node name, a cursor, a count: a few dozen bytes). */
#define TG_SPANS_REQUEST_MAX 512
/* NDJSON bytes in one answer at most (the answer fits one IPC frame). */
#define TG_SPANS_ANSWER_BYTES (96 * 1024)
#define TG_SPANS_DEFAULT_COUNT 1024
#define TG_SPANS_MAX_COUNT 4096

extern const struct tg_gw_local_method tg_fleet_spans_method;
/* At shutdown, before the fleet is freed: drops the questions still out to other nodes. */
void tg_fleet_spans_abort(void);

#endif
