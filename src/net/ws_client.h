/* ws_client.h: WebSocket client transport (ws:// and wss://) for tracectl
 * and other IPC clients.
 *
 * tg_ws_client_open() returns a tg_conn at once: a bufferevent tg_conn (fd
 * passing disabled) over a WebSocket client filter (net/ws_filter.h)
 * over a TCP or TLS bufferevent, all on the caller's event loop: no thread,
 * no socketpair. Frames written before the handshake completes wait in the
 * filter. If the connection or the upgrade fails, the reason is logged and
 * the tg_conn sees an error or the end of stream (its on_close follows).
 *
 * Tokens are sent as the subprotocol pair "tracegate",
 * "tracegate.token.<token>" (see net/ws_wire.h). A token too long for that
 * or with other characters makes tg_ws_client_open fail with a message
 * saying how to fix it, unless creds->token_in_url: then it goes in the
 * ?token= query (never otherwise). No Origin is sent (a
 * non-browser client). wss:// verifies the server against --cacert (or the
 * system CAs) and the host name (or creds->server_name); creds->cert/key
 * give a client certificate. The host name is resolved before this returns
 * (blocking); the connect completes on the loop.
 *
 * Ownership: the caller owns the returned tg_conn. Threading: the thread of
 * base. */
#ifndef TRACEGATE_NET_WS_CLIENT_H
#define TRACEGATE_NET_WS_CLIENT_H

#include <stddef.h>

#include "tracegate/endpoint.h"
#include "tracegate/conn.h"

struct event_base;

tg_conn *tg_ws_client_open(struct event_base *base, const struct tg_endpoint *ep,
                           const struct tg_endpoint_creds *creds, char *err, size_t errlen);

#endif
