/* ws_client_filter.h: the client side of a WebSocket (RFC 6455) as a libevent filter bufferevent:
 * under it the TCP or TLS stream to the server, above it the byte stream that the WebSocket's
 * binary messages carry (tracectl's IPC frames: message boundaries mean nothing, as for the
 * Perfetto UI).
 *
 * It sends the upgrade request it is given at once, holds what is written above it until the
 * server's 101 answer checked out (status, Upgrade, Connection, Sec-WebSocket-Accept, the one
 * subprotocol offered, no extension), then:
 *   - server messages: unmasked binary frames (continuations included) pass their payload up as
 *     it arrives, moved chain by chain, never assembled into whole messages; a message over
 *     max_message bytes, a text frame, a masked frame, reserved bits, an unknown opcode or a bad
 *     control frame fail the connection with a logged reason;
 *   - what is written above goes out as binary messages of at most out_message bytes, each
 *     masked with a fresh random key (the one copy on the way out);
 *   - PING is answered with PONG; a close frame is answered with one (the same code) and
 *     anything after it is dropped; the server then ends the TCP stream, which the bufferevent
 *     above sees as its end; a flush with BEV_FINISHED sends a close frame (1000) first.
 * A failure is logged ("cannot open WHAT: ..." during the handshake, "WHAT: ..." after) and
 * reported to the bufferevent above as BEV_EVENT_ERROR.
 *
 * Why not libwebsockets' client: Debian's 4.1.6 feeds every payload byte of a client's incoming
 * frames through its parser's state machine (84% of the client's CPU, ~66 MB/s through the
 * gateway where TCP gives several times that; docs/gateway.md), and it needs a thread of its own
 * and a socketpair to reach a libevent loop. The server side keeps libwebsockets.
 *
 * Ownership: the returned filter owns `under` (freed with it) and its own state.
 * Threading: the event loop thread of `under`'s base. */
#ifndef TRACEGATE_NET_WS_CLIENT_FILTER_H
#define TRACEGATE_NET_WS_CLIENT_FILTER_H

#include <stddef.h>

struct bufferevent;

struct tg_ws_client_filter_cfg {
    const char *request;     /* the whole upgrade request, sent first (copied) */
    size_t request_len;
    const char *key;         /* its Sec-WebSocket-Key (tg_ws_client_key) */
    const char *subprotocol; /* the subprotocol the server must select */
    const char *what;        /* "ws://host:port/path" for messages (never a query: it may hold a token) */
    size_t max_message;      /* most bytes one server message may carry */
    size_t out_message;      /* most bytes per message sent */
};

/* Length of a Sec-WebSocket-Key (base64 of 16 bytes) and of a Sec-WebSocket-Accept (of 20). */
#define TG_WS_KEY_LEN 24
#define TG_WS_ACCEPT_LEN 28

/* A fresh random Sec-WebSocket-Key. Returns 0, or -1 if no random bytes could be had. */
int tg_ws_client_key(char key[TG_WS_KEY_LEN + 1]);
/* The Sec-WebSocket-Accept a server must answer a key with. */
void tg_ws_accept_for(const char *key, char accept[TG_WS_ACCEPT_LEN + 1]);

/* The filter over `under` (a socket or TLS bufferevent, connecting or connected). NULL on
 * failure (`under` is then still the caller's). */
struct bufferevent *tg_ws_client_filter_new(struct bufferevent *under, const struct tg_ws_client_filter_cfg *cfg);

#endif
