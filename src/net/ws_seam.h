/* ws_seam.h: an in-memory byte stream between one WebSocket on the libwebsockets thread and a
 * bufferevent pair on a libevent thread: the hand-off of /traced and /producer WebSockets without
 * a socketpair (see docs/gateway.md, "WebSocket hand-off").
 *
 * Debian's libwebsockets runs on a thread of its own (no libevent integration), so every byte a
 * WebSocket carries crosses threads. A socketpair did that with two kernel copies and two system
 * calls per direction; a seam does it with at most one copy in user space:
 *
 *   lws thread                          libevent thread
 *   WS message ──copy──► in ─────────────► pair end B ══► pair end A (tg_conn: the gateway's client)
 *   socket ◄──sendmsg── out ◄──────────── pair end B ◄══ pair end A   (plain ws: tg_ws_seam_take)
 *   lws_write ◄──copy── out                                             (TLS: tg_ws_seam_pull)
 *
 * `in` and `out` are evbuffers that only ever change under the seam's mutex; each thread moves
 * whole chains in or out of them (no copy besides those marked above). Wake-ups: the libevent
 * thread is woken through one eventfd per seam set (tg_ws_seams), the lws thread with
 * lws_cancel_service() (its protocol callback then calls tg_ws_seams_service()); each side asks
 * for a wake-up only when the other is not already due to look, so a busy stream costs a few per
 * batch, not one per message.
 *
 * Flow control: the lws side stops reading the WebSocket (lws_rx_flow_control) while `in` holds
 * TG_WS_SEAM_IN_HIGH or more and reads again once the libevent side took it under
 * TG_WS_SEAM_IN_LOW; the libevent side takes `in` only while pair end B's output (what the
 * gateway has not read yet) is under TG_WS_SEAM_IN_HIGH. The libevent side stops reading B while
 * `out` holds TG_WS_SEAM_OUT_HIGH or more (the gateway then sees its client congested) and reads
 * again once the WebSocket took it under TG_WS_SEAM_OUT_LOW.
 *
 * Ends: the WebSocket closes → what `in` holds reaches A, then A sees end of stream. A is closed
 * (the gateway closed the client) → what `out` holds is sent, then the WebSocket closes. A seam
 * is freed when both sides let go of it.
 *
 * Threading: tg_ws_seams_new/_free, tg_ws_seam_open and the bufferevents run on the libevent
 * thread; tg_ws_seam_new, _push, _pull, _ws_closed and tg_ws_seams_service on the lws thread
 * (tg_ws_seams_free only after that thread stopped). */
#ifndef TRACEGATE_NET_WS_SEAM_H
#define TRACEGATE_NET_WS_SEAM_H

#include <stddef.h>
#include <sys/types.h>

struct bufferevent;
struct event_base;
struct lws_context;
struct tg_ws_seam;
struct tg_ws_seams;

#define TG_WS_SEAM_IN_HIGH (256u * 1024u)
#define TG_WS_SEAM_IN_LOW (64u * 1024u)
#define TG_WS_SEAM_OUT_HIGH (1024u * 1024u)
#define TG_WS_SEAM_OUT_LOW (256u * 1024u)

/* What the lws side must do for one seam, returned by tg_ws_seams_service (for each seam whose
 * libevent side asked): ask for a writeable callback, read the WebSocket again. */
struct tg_ws_seam_wake {
    void *ws_user; /* what tg_ws_seam_new was given */
    int writable;  /* `out` has bytes, or the libevent side ended: call lws_callback_on_writable */
    int resume_rx; /* `in` was taken under TG_WS_SEAM_IN_LOW: lws_rx_flow_control(ws, 1) */
};

/* The seams of one lws context and one event_base (libevent thread). NULL on failure. */
struct tg_ws_seams *tg_ws_seams_new(struct event_base *base, struct lws_context *ctx);
/* Frees every seam still open (call after the lws thread stopped and before the base is freed). */
void tg_ws_seams_free(struct tg_ws_seams *s);

/* lws thread: a seam for a WebSocket whose link is ws_user (given back in tg_ws_seam_wake). The
 * lws side holds it until tg_ws_seam_ws_closed. NULL on failure. */
struct tg_ws_seam *tg_ws_seam_new(struct tg_ws_seams *s, void *ws_user);
/* lws thread: bytes of a WebSocket message. Returns 0, 1 when `in` is at TG_WS_SEAM_IN_HIGH or
 * over (stop reading the WebSocket until a wake-up says resume_rx), or -1: out of memory, or over
 * `limit` bytes pending (a peer that ignores flow control). Bytes after the libevent side ended
 * are dropped (returns 0). */
int tg_ws_seam_push(struct tg_ws_seam *m, const void *data, size_t len, size_t limit);
/* lws thread: takes up to cap bytes of `out` into buf. Returns how many; *more = bytes left;
 * *ended = 1 once the libevent side ended and everything it wrote was taken. */
size_t tg_ws_seam_pull(struct tg_ws_seam *m, void *buf, size_t cap, size_t *more, int *ended);
/* Most pieces one tg_ws_seam_take hands over (a range that spans more chains is cut at the last). */
#define TG_WS_SEAM_TAKE_IOV_MAX 64
/* lws thread: the same without the copy. Hands the next bytes of `out` not taken yet (at most cap,
 * in at most TG_WS_SEAM_TAKE_IOV_MAX pieces: fewer if they span more chains) to `take` as iovecs pointing into the
 * gateway's buffers, with the set's lock held: the libevent side cannot append to, drain or free
 * `out` while `take` runs, so it may write them to a socket (and every seam of the set waits for
 * that one system call). `take` returns how many of the len bytes it took, from the first (0:
 * none, e.g. the socket is full), or -1 (none; returned as is). Not called when there is nothing
 * to take. Returns what `take` returned (0 if not called); *more and *ended as for
 * tg_ws_seam_pull. */
struct iovec;
typedef ssize_t (*tg_ws_seam_take_fn)(void *arg, const struct iovec *iov, int n, size_t len);
ssize_t tg_ws_seam_take(struct tg_ws_seam *m, size_t cap, tg_ws_seam_take_fn take, void *arg, size_t *more,
                        int *ended);
/* lws thread: the WebSocket is gone; the lws side lets go of the seam (the libevent side sees the
 * end of stream after what `in` holds). */
void tg_ws_seam_ws_closed(struct tg_ws_seam *m);
/* lws thread (LWS_CALLBACK_EVENT_WAIT_CANCELLED): fills up to cap wake-ups for seams whose
 * libevent side asked; returns how many (call again while it returns cap). */
size_t tg_ws_seams_service(struct tg_ws_seams *s, struct tg_ws_seam_wake *out, size_t cap);

/* libevent thread: pair end A for a tg_conn (owned by the caller: freeing it ends the stream for
 * the WebSocket); the libevent side holds the seam until then. NULL on failure (the WebSocket is
 * then closed as if A had ended). */
struct bufferevent *tg_ws_seam_open(struct tg_ws_seam *m);
/* libevent thread: the seam was handed over but will never be opened (shutdown, out of memory):
 * the libevent side lets go of it; the WebSocket closes. */
void tg_ws_seam_abandon(struct tg_ws_seam *m);

/* Live seams, all sets (tests and metrics; any thread). */
int tg_ws_seam_count(void);
/* Process-wide counters of all seams (any thread): pauses of B's reading at OUT_HIGH, the most
 * one seam held in `out` (not yet taken by the WebSocket) and in `in`. */
struct tg_ws_seam_stats {
    unsigned long long out_pauses;
    size_t out_peak, in_peak;
};
void tg_ws_seam_stats(struct tg_ws_seam_stats *st);
void tg_ws_seam_stats_reset_peaks(void);

#endif
