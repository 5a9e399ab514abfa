/* ws_client.h: WebSocket client transport (ws:// and wss://) for tracectl
 * and other IPC clients.
 *
 * tg_ws_client_open() returns a tg_conn at once: its fd is one end of a UNIX
 * socketpair (fd passing disabled); the other end is joined to the
 * WebSocket by a libwebsockets client running on its own thread, through
 * the same seam as the server (net/ws_link.h). Frames written before the
 * handshake completes wait in the socketpair. If the connection fails, the
 * reason is logged and the tg_conn sees EOF (its on_close follows).
 *
 * Tokens are sent as the subprotocol pair "tracegate",
 * "tracegate.token.<token>" (see net/ws_wire.h). A token too long for that
 * or with other characters makes tg_ws_client_open fail with a message
 * saying how to fix it, unless creds->token_in_url: then it goes in the
 * ?token= query (never otherwise). No Origin is sent (a
 * non-browser client). wss:// verifies the server against --cacert (or the
 * system CAs) and the host name (or creds->server_name); creds->cert/key
 * give a client certificate.
 *
 * Threading: call from the thread of base. Each connection has an lws
 * thread that ends when the connection does; tg_ws_client_shutdown_all()
 * (also run at exit) stops and joins them. */
#ifndef TRACEGATE_NET_WS_CLIENT_H
#define TRACEGATE_NET_WS_CLIENT_H

#include <stddef.h>

#include "tracegate/endpoint.h"
#include "tracegate/conn.h"

struct event_base;

tg_conn *tg_ws_client_open(struct event_base *base, const struct tg_endpoint *ep,
                           const struct tg_endpoint_creds *creds, char *err, size_t errlen);

/* Stops every client thread (their connections end) and joins them. */
void tg_ws_client_shutdown_all(void);

#endif
