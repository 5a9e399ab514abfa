/* endpoint_transport.h: open a framed connection (tg_conn) to an endpoint over
 * its transport (UNIX, TCP, TLS, WebSocket). Internal to libtracegate. */
#ifndef TRACEGATE_NET_ENDPOINT_TRANSPORT_H
#define TRACEGATE_NET_ENDPOINT_TRANSPORT_H

#include <stddef.h>

#include "tracegate/endpoint.h"
#include "tracegate/conn.h"

struct event_base;

tg_conn *tg_endpoint_open_conn(struct event_base *base, const struct tg_endpoint *ep,
                               const struct tg_endpoint_creds *creds, char *err, size_t errlen);

#endif
