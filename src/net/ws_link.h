/* ws_link.h: the WebSocket side of the hand-off between one WebSocket and a
 * libevent thread (see docs/gateway.md, "WebSocket hand-off"): message checks
 * and flow control, and a far side that is either an in-memory seam
 * (net/ws_seam.h: the server's /traced and /producer) or, as described below,
 * a UNIX socketpair (/adb, whose far side must be a descriptor). Server side only: clients
 * (net/ws_client.h) do not use libwebsockets.
 *
 * A socketpair link joins a WebSocket wsi to one end of a UNIX socketpair, which the lws
 * thread adopts as a raw-file wsi so the kernel wakes it when the other end
 * (owned by a tg_conn on a libevent loop) writes or drains:
 *
 *   WS binary messages ──bytes──► socketpair ──► tg_conn (frames)
 *   WS binary messages ◄──queue of messages── socketpair ◄── tg_conn
 *
 * Both directions are byte streams: message boundaries mean nothing (the
 * Perfetto UI appends every message to one receive buffer and cuts IPC
 * frames from it; Perfetto's own websocket_bridge sends 8 KiB reads as
 * messages). Inbound, messages are written to the socket as they come
 * (frames may be split across messages, or several may share one); what
 * the socket does not take is queued (the only copy, and only then), and
 * the WebSocket reader is paused with lws_rx_flow_control() only when that
 * queue is over TG_WS_LINK_IN_HIGH, resumed under TG_WS_LINK_IN_LOW.
 * Outbound, the raw side reads whatever the socket has into a queue of
 * messages (a read appends to the last message still waiting, up to the
 * link's message size, TG_WS_LINK_MSG_MAX),
 * and each writeable callback sends as many queued messages as the
 * WebSocket takes; reading pauses only when the queue is over
 * TG_WS_LINK_OUT_HIGH and resumes under TG_WS_LINK_OUT_LOW. Each byte is
 * copied once in user space on its way out (socket → message buffer, which
 * lws_write frames in place), plus once more only for what the kernel does
 * not take of a message (lws keeps the unsent tail).
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
 * libwebsockets settings the owner's context and protocol must use so that
 * large messages are read and written in few system calls (see
 * docs/gateway.md, "WebSocket hand-off"): pt_serv_buf_size and rx_buffer_size
 * TG_WS_LINK_RX_BUFFER, tx_packet_size TG_WS_LINK_TX_PACKET (without it lws
 * sends rx_buffer_size bytes per send() and copies the rest of a message).
 *
 * Used by the server (gw_ws_proto.c). Its /traced and
 * /producer WebSockets use a seam instead of the socketpair (tg_ws_link_attach_seam): the same
 * WebSocket side, the far side in memory (net/ws_seam.h). Without TLS a seam's outbound messages
 * are not copied: each is written with one sendmsg from the seam's buffers (frame header and
 * payload), and only what the kernel does not take of it is given to lws (LWS_WRITE_RAW), which
 * keeps that tail and sends it before any frame of its own.
 * Threading: everything here runs on the lws service thread of the link's
 * context, except tg_ws_link_socketpair() and tg_ws_link_count/stats (any
 * thread). */
#ifndef TRACEGATE_NET_WS_LINK_H
#define TRACEGATE_NET_WS_LINK_H

#include <stddef.h>

#include <libwebsockets.h>

/* Outbound message size of a link. (What clients send per message: TG_WS_CLIENT_MSG_MAX,
 * net/ws_wire.h.) */
#define TG_WS_LINK_MSG_MAX (256u * 1024u)
/* Outbound queue watermarks (bytes read from the socket, not yet given to lws_write). */
#define TG_WS_LINK_OUT_HIGH (1024u * 1024u)
#define TG_WS_LINK_OUT_LOW (256u * 1024u)
/* Inbound queue watermarks (bytes the socket did not take yet). */
#define TG_WS_LINK_IN_HIGH (256u * 1024u)
#define TG_WS_LINK_IN_LOW (64u * 1024u)
/* lws settings: what one read of the WebSocket may return (pt_serv_buf_size and the protocol's
 * rx_buffer_size), and what one send() may carry (tx_packet_size: a whole message plus its
 * header). */
#define TG_WS_LINK_RX_BUFFER (256u * 1024u)
#define TG_WS_LINK_TX_PACKET (TG_WS_LINK_MSG_MAX + 16u)
/* Protocol name of the raw-file wsis. It is in the WebSocket vhost's protocol list, and libwebsockets
 * binds an upgrade to the first offered Sec-WebSocket-Protocol name it knows: the space keeps any
 * client from naming it (a space always ends a name there), so no WebSocket lands on it. */
#define TG_WS_LINK_RAW_PROTOCOL "tracegate raw"

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

/* A link whose far side is a seam (net/ws_seam.h: in memory, no socketpair, no raw wsi) of the
 * set `seams`; hand tg_ws_link_seam(l) to the libevent thread, which opens it (tg_ws_seam_open).
 * Text messages are refused. Returns NULL on failure (then the caller closes ws). */
struct tg_ws_seams;
struct tg_ws_seam;
struct tg_ws_link *tg_ws_link_attach_seam(struct lws *ws, struct tg_ws_seams *seams, size_t max_message);
struct tg_ws_seam *tg_ws_link_seam(const struct tg_ws_link *l);
/* LWS_CALLBACK_EVENT_WAIT_CANCELLED of the context the seams belong to: asks for the writeable
 * callbacks and resumes the reading the libevent side asked for. */
void tg_ws_link_service_seams(struct tg_ws_seams *seams);

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

/* Process-wide counters of all links (for tests and metrics; any thread). */
struct tg_ws_link_stats {
    unsigned long long out_messages, out_bytes; /* messages given to lws_write, their payload bytes */
    size_t out_largest;                         /* the largest outbound message */
    size_t out_queue_peak;                      /* the most one link held queued outbound */
    unsigned long long out_pauses;              /* raw side paused at TG_WS_LINK_OUT_HIGH */
    unsigned long long out_tails, out_tail_bytes; /* messages written from the gateway's buffers whose
                                                   * end the socket did not take at once, and those
                                                   * ends' bytes (lws kept a copy and sent it) */
    size_t in_queue_peak;                       /* the most one link held queued inbound */
    unsigned long long in_pauses;               /* WebSocket reader paused at TG_WS_LINK_IN_HIGH */
};
void tg_ws_link_stats(struct tg_ws_link_stats *out);
/* Sets the peaks and the largest message back to 0 (tests). */
void tg_ws_link_stats_reset_peaks(void);

/* Routes libwebsockets' own log lines to tracegate's log. Only errors and warnings are enabled:
 * lws' lower levels print headers, which may hold tokens (and what is logged is redacted with
 * tg_ws_redact_tokens). Process-wide, as lws logging is. */
void tg_ws_setup_lws_logging(void);
/* How many times, since the last call on this thread, libwebsockets running on this thread could
 * not accept a connection for want of a descriptor or memory (EMFILE, ENFILE, ENOBUFS, ENOMEM);
 * resets the count. lws 4.1 logs such a failure and returns with its listener still readable, so
 * the next lws_service() tries again at once: the thread that runs lws_service() backs off
 * instead. Those lws lines are counted here, not logged (the caller logs its own). */
unsigned tg_ws_take_accept_failures(void);
/* Copies line to out (at most cap bytes, NUL included) with the values of
 * "token=" and "tracegate.token." replaced by "***" (case-insensitive keys;
 * a value ends at & , ; quote or blank). */
void tg_ws_redact_tokens(const char *line, char *out, size_t cap);

#endif
