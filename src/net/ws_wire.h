/* ws_wire.h: what tracegate's WebSocket server and client agree on: the
 * subprotocol name, how a token rides as a second subprotocol, and the size
 * limits libwebsockets puts on the Sec-WebSocket-Protocol header.
 * Constants only; no threading concerns. */
#ifndef TRACEGATE_NET_WS_WIRE_H
#define TRACEGATE_NET_WS_WIRE_H

#define TG_WS_SUBPROTOCOL "tracegate"
#define TG_WS_TOKEN_PREFIX "tracegate.token."
#define TG_WS_MAX_PROTOCOL_HEADER 127
#define TG_WS_MAX_PROTOCOL_TOKEN 96
#define TG_WS_MAX_TOKEN 512
/* Most bytes tracegate's client sends per message: well under what a tracegated accepts by
 * default (--ws-max-message, 1 MiB). */
#define TG_WS_CLIENT_MSG_MAX (64u * 1024u)

#endif
