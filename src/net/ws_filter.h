/* ws_filter.h: a WebSocket (RFC 6455) endpoint as a libevent filter bufferevent, client or server
 * side: under it the TCP or TLS stream to the peer, above it the byte stream that the WebSocket's
 * binary messages carry (Perfetto IPC frames: message boundaries mean nothing, as for the
 * Perfetto UI).
 *
 * Client side (tracectl's ws:// and wss://): it sends the upgrade request it is given at once,
 * holds what is written above it until the server's 101 answer checked out (status, Upgrade,
 * Connection, Sec-WebSocket-Accept, the one subprotocol offered, no extension), then:
 *   - server messages: unmasked binary frames (continuations included) pass their payload up as
 *     it arrives, moved chain by chain, never assembled into whole messages; a message over
 *     max_message bytes, a text frame, a masked frame, reserved bits, an unknown opcode or a bad
 *     control frame fail the connection with a logged reason;
 *   - what is written above goes out as binary messages of at most out_message bytes, each
 *     masked with a fresh random key (the one copy on the way out);
 *   - PING is answered with PONG (one waits at a time: the latest PING's); a close frame is
 *     answered with one (the same code) and anything after it is dropped; the server then ends
 *     the TCP stream, which the bufferevent above sees as its end; a flush with BEV_FINISHED
 *     sends a close frame (1000) first.
 * A failure is logged ("cannot open WHAT: ..." during the handshake, "WHAT: ..." after) and
 * reported to the bufferevent above as BEV_EVENT_ERROR.
 *
 * Why not libwebsockets' client: Debian's 4.1.6 feeds every payload byte of a client's incoming
 * frames through its parser's state machine (84% of the client's CPU, ~66 MB/s through the
 * gateway where TCP gives several times that; docs/gateway.md), and it needs a thread of its own
 * and a socketpair to reach a libevent loop.
 *
 * Server side (tracegated's plain ws:// /traced and /producer once libwebsockets has answered the
 * upgrade; docs/gateway.md "Native WebSockets"): over a connected socket, the same rules mirrored:
 *   - client frames must be masked (an unmasked one fails with 1002, RFC 6455 5.1); payload is
 *     unmasked as it is moved up (the one copy on the way in), never assembled;
 *   - a text message fails with 1003, a message over max_message bytes with 1009, any other
 *     protocol error with 1002: the close frame carries the code and a short reason, and the
 *     bufferevent above gets BEV_EVENT_ERROR (errno EPROTO);
 *   - what is written above goes out as unmasked binary messages of at most out_message bytes:
 *     a frame header, then the caller's evbuffer chains moved, not copied;
 *   - PING gets PONG (ahead of the next message, never inside one); a client's close frame is
 *     answered with the same code and the bufferevent above sees its end (BEV_EVENT_EOF);
 *   - when the filter is freed, what the socket has not taken yet gets one more non-blocking
 *     send, with a close frame (1000 "connection closed", or the failure's) after it, and the
 *     socket is closed.
 * The socket bufferevent under it reads up to 256 KiB per event (net/bulk_read.h), writes in the
 * turn output is queued (net/write_through.h) and takes frames while it holds under 256 KiB (so at
 * most 256 KiB plus one message): beyond that, payload waits in the filter's own output, where the
 * caller's watermarks apply.
 *
 * Ownership: the returned filter owns `under` (client) or the socket (server), freed with it,
 * and its own state. Threading: the event loop thread of its base. */
#ifndef TRACEGATE_NET_WS_FILTER_H
#define TRACEGATE_NET_WS_FILTER_H

#include <stddef.h>

struct bufferevent;
struct event_base;

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

struct tg_ws_server_filter_cfg {
    const char *what;   /* "WebSocket /traced from ADDR" for messages (copied) */
    size_t max_message; /* most bytes one client message may carry */
    size_t out_message; /* most bytes per message sent (0 = 256 KiB) */
};

/* Server side: the socket bufferevent takes frames while it holds less than this. */
#define TG_WS_SERVER_STAGE_HIGH (256u << 10)

/* Counters of every server-side filter of this process (any thread reads them). */
struct tg_ws_server_stats {
    unsigned long long open;                    /* server filters alive now */
    unsigned long long out_messages, out_bytes; /* messages sent, their payload bytes */
    unsigned long long out_full;  /* times a socket's share of frames filled with more to send (the
                                   * client did not keep up; the rest waited above the filter) */
    size_t staged_peak;           /* the most bytes of frames one socket bufferevent held */
    unsigned long long in_messages;             /* client data messages completed */
};
void tg_ws_server_stats(struct tg_ws_server_stats *out);
/* Sets staged_peak back to 0 (tests). */
void tg_ws_server_stats_reset_peaks(void);

/* The server side over fd, a connected TCP socket whose upgrade was answered with 101 (taken
 * over, made non-blocking; closed on failure). NULL on failure. */
struct bufferevent *tg_ws_server_filter_new(struct event_base *base, int fd, const struct tg_ws_server_filter_cfg *cfg);

#endif
