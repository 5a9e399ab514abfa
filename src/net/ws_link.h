/* ws_link.h: the socketpair seam between one WebSocket and a libevent
 * thread (see docs/gateway.md, "WebSocket hand-off").
 *
 * A link joins a WebSocket wsi to one end of a UNIX socketpair, which the lws
 * thread adopts as a raw-file wsi so the kernel wakes it when the other end
 * (owned by a tg_conn on a libevent loop) writes or drains:
 *
 *   WS binary messages ──bytes──► socketpair ──► tg_conn (frames)
 *   WS binary messages ◄─one message per read── socketpair ◄── tg_conn
 *
 * Inbound messages are concatenated into a byte stream (frames may be split
 * across messages, or several frames may share one). When the socket is
 * full the WebSocket reader is paused with lws_rx_flow_control() and resumed
 * once the socket is writable again. Outbound, whatever one read returns
 * (up to TG_WS_LINK_CHUNK bytes) is sent as one binary message when the
 * WebSocket is writable; the raw wsi stops reading until then.
 *
 * Close propagation: WebSocket closed → pending inbound bytes are flushed,
 * then the socket is shut down for writing (the tg_conn sees EOF). Socket
 * EOF or error → bytes already read are sent, then the WebSocket is closed
 * with 1000 (normal), or with the code and reason of the link's close note
 * when the socket side left one (tg_ws_link_set_close_note). Text messages
 * close the WebSocket with 1003 and a reason, unless the link takes them as
 * bytes (tg_ws_link_accept_text); messages over max_message close it with
 * 1009.
 *
 * Used by the server (gw_ws_proto.c) and the client (ws_client.c).
 * Threading: everything here runs on the lws service thread of the link's
 * context, except tg_ws_link_socketpair() (any thread). */
#ifndef TRACEGATE_NET_WS_LINK_H
#define TRACEGATE_NET_WS_LINK_H

#include <stddef.h>

#include <libwebsockets.h>

#define TG_WS_LINK_CHUNK (64u * 1024u)           /* max bytes per outbound message */
#define TG_WS_LINK_RAW_PROTOCOL "tracegate-raw" /* protocol name of the raw-file wsis */

struct tg_ws_link;
struct tg_ws_close_note;

/* A non-blocking, close-on-exec AF_UNIX stream socketpair. 0 or -1. */
int tg_ws_link_socketpair(int sv[2]);

/* Creates a link for `ws` (opaque user data of ws is set to the link) and
 * adopts `sock` (one socketpair end; owned by the link from here on, closed
 * on failure) into `vh` as a raw file bound to TG_WS_LINK_RAW_PROTOCOL, which
 * must be in the vhost's protocol list with tg_ws_link_raw_callback.
 * max_message bounds one inbound WebSocket message (0 = 1 MiB).
 * Returns NULL on failure (then the caller closes ws). */
struct tg_ws_link *tg_ws_link_attach(struct lws *ws, struct lws_vhost *vh, int sock, size_t max_message);

/* Text messages are passed on as bytes like binary ones (a byte pipe such
 * as /adb, whose clients send commands as text). Default: refused. */
void tg_ws_link_accept_text(struct tg_ws_link *l);

/* The note (net/ws_close_note.h) whose code and reason close the WebSocket
 * when the socket side ends; the link takes its own reference. */
void tg_ws_link_set_close_note(struct tg_ws_link *l, struct tg_ws_close_note *note);

/* The link of a WebSocket wsi (NULL if none). */
struct tg_ws_link *tg_ws_link_of(struct lws *ws);

/* WebSocket events, forwarded by the owner's protocol callback. Each returns
 * what that callback should return (-1 closes the WebSocket).
 * - rx: LWS_CALLBACK_RECEIVE / LWS_CALLBACK_CLIENT_RECEIVE
 * - writeable: LWS_CALLBACK_SERVER_WRITEABLE / LWS_CALLBACK_CLIENT_WRITEABLE
 * - closed: LWS_CALLBACK_CLOSED / LWS_CALLBACK_CLIENT_CLOSED (the link
 *   forgets ws; it is freed once the raw side is gone too). */
int tg_ws_link_on_rx(struct tg_ws_link *l, const void *in, size_t len);
int tg_ws_link_on_writeable(struct tg_ws_link *l);
void tg_ws_link_on_closed(struct tg_ws_link *l);

/* The protocol callback of TG_WS_LINK_RAW_PROTOCOL (raw-file wsis). It also
 * refuses WebSocket upgrades that name this protocol. */
int tg_ws_link_raw_callback(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in, size_t len);

/* Live links on this thread (for tests and metrics). */
int tg_ws_link_count(void);

/* Routes libwebsockets' own log lines to tracegate's log. Only errors and warnings are enabled:
 * lws' lower levels print headers, which may hold tokens (and what is logged is redacted with
 * tg_ws_redact_tokens). quiet_warnings logs warnings at debug level (the client: a CLI should not
 * chatter). Process-wide, as lws logging is. */
void tg_ws_setup_lws_logging(int quiet_warnings);
/* Copies line to out (at most cap bytes, NUL included) with the values of
 * "token=" and "tracegate.token." replaced by "***" (case-insensitive keys;
 * a value ends at & , ; quote or blank). */
void tg_ws_redact_tokens(const char *line, char *out, size_t cap);

#endif
