/* gw_ws_handoff.h: carries accepted WebSockets' socketpair ends or seams (plus
 * their client info) from the lws thread to the gateway's libevent thread.
 *
 * The producer side writes one pointer per connection into a non-blocking
 * pipe (8 bytes, so each write is atomic); the libevent side's read event
 * takes them out and calls the consumer callback, which owns the fd from
 * then on. Nothing else crosses threads, apart from the close note of an
 * /adb pipe (reference counted and thread-safe, net/ws_close_note.h).
 *
 * Threading: tg_ws_handoff_new/free run on the libevent thread (free only
 * once no thread posts any more); tg_ws_handoff_post may run on any thread. */
#ifndef TRACEGATE_GATEWAY_GW_WS_HANDOFF_H
#define TRACEGATE_GATEWAY_GW_WS_HANDOFF_H

#include "gw.h"

struct event_base;
struct tg_ws_handoff;
struct tg_ws_close_note;

/* What the WebSocket carries: Perfetto IPC for the gateway core (/traced,
 * /producer), or raw bytes for an ADB server (/adb, gw_adb.h). */
enum tg_ws_handoff_kind { TG_WS_HANDOFF_IPC = 0, TG_WS_HANDOFF_ADB };

/* Runs on the libevent thread; owns fd (a socketpair end), or seam (fd -1: an in-memory
 * hand-off, net/ws_seam.h: open or abandon it). note: the link's close note (ADB pipes; NULL for
 * IPC), borrowed for the call (take a reference to keep it). */
struct tg_ws_seam;
typedef void (*tg_ws_handoff_fn)(void *arg, int fd, struct tg_ws_seam *seam, enum tg_ws_handoff_kind kind,
                                 const struct tg_gw_client_info *info, struct tg_ws_close_note *note);

struct tg_ws_handoff *tg_ws_handoff_new(struct event_base *base, tg_ws_handoff_fn fn, void *arg);
/* Takes ownership of fd (closed on failure) and adds a reference to note
 * (may be NULL) until the callback has run. Returns 0 or -1. */
int tg_ws_handoff_post(struct tg_ws_handoff *h, int fd, enum tg_ws_handoff_kind kind,
                       const struct tg_gw_client_info *info, struct tg_ws_close_note *note);
/* The same for a seam (the libevent side's hold on it passes to the callback; abandoned on
 * failure). */
int tg_ws_handoff_post_seam(struct tg_ws_handoff *h, struct tg_ws_seam *seam, const struct tg_gw_client_info *info);
/* Closes the fds (and abandons the seams) of connections still in the pipe. */
void tg_ws_handoff_free(struct tg_ws_handoff *h);

#endif
