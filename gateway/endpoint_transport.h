/* endpoint_transport.h: open a framed connection (tg_conn) to an endpoint over
 * its transport (UNIX, TCP, TLS, WebSocket). Internal to gateway/. */
#ifndef TRACEGATE_GATEWAY_ENDPOINT_TRANSPORT_H
#define TRACEGATE_GATEWAY_ENDPOINT_TRANSPORT_H

#include <stddef.h>

#include "endpoint.h"
#include "tracegate/conn.h"

struct event_base;

tg_conn *tg_endpoint_open_conn(struct event_base *base, const struct tg_endpoint *ep,
                               const struct tg_endpoint_creds *creds, char *err, size_t errlen);

#endif
