/* gw_ws_handoff.h: carries accepted WebSockets' seams, sockets or /adb socketpair
 * ends (plus their client info) from the lws thread to the gateway's libevent
 * thread.
 *
 * The producer side writes one pointer per connection into a non-blocking
 * pipe (8 bytes, so each write is atomic); the libevent side's read event
 * takes them out and calls the consumer callback, which owns the fd (or the
 * seam's libevent side) from then on. Nothing else crosses threads, apart from the close note of an
 * /adb pipe (reference counted and thread-safe, net/ws_close_note.h).
 *
 * Threading: tg_ws_handoff_new/free run on the libevent thread (free only
 * once no thread posts any more); tg_ws_handoff_post_* may run on any thread. */
#ifndef TRACEGATE_GATEWAY_GW_WS_HANDOFF_H
#define TRACEGATE_GATEWAY_GW_WS_HANDOFF_H

#include "gw.h"

struct event_base;
struct tg_ws_handoff;
struct tg_ws_close_note;

/* What crossed: a /traced or /producer WebSocket's seam (its in-memory hand-off on the lws
 * thread, net/ws_seam.h), the same kind of WebSocket's own socket (native: libwebsockets answered
 * the upgrade and let go of it), or an /adb pipe's socketpair end. */
enum tg_ws_handoff_kind { TG_WS_HANDOFF_SEAM, TG_WS_HANDOFF_NATIVE, TG_WS_HANDOFF_ADB };

/* Runs on the libevent thread with a seam (fd -1: open or abandon it) or an fd (seam NULL;
 * owned from then on) and, for /adb, its close note, borrowed for the call (take a reference
 * to keep it). */
struct tg_ws_seam;
typedef void (*tg_ws_handoff_fn)(void *arg, enum tg_ws_handoff_kind kind, int fd, struct tg_ws_seam *seam,
                                 const struct tg_gw_client_info *info, struct tg_ws_close_note *note);

struct tg_ws_handoff *tg_ws_handoff_new(struct event_base *base, tg_ws_handoff_fn fn, void *arg);
/* An /adb pipe: takes ownership of fd (closed on failure) and adds a reference to note until the
 * callback has run. Returns 0 or -1. */
int tg_ws_handoff_post_adb(struct tg_ws_handoff *h, int fd, const struct tg_gw_client_info *info,
                           struct tg_ws_close_note *note);
/* A Perfetto IPC WebSocket's own connected socket, upgrade answered: takes ownership of fd
 * (closed on failure). Returns 0 or -1. */
int tg_ws_handoff_post_native(struct tg_ws_handoff *h, int fd, const struct tg_gw_client_info *info);
/* A Perfetto IPC WebSocket's seam (the libevent side's hold on it passes to the callback;
 * abandoned on failure). Returns 0 or -1. */
int tg_ws_handoff_post_seam(struct tg_ws_handoff *h, struct tg_ws_seam *seam, const struct tg_gw_client_info *info);
/* Closes the fds (and abandons the seams) of connections still in the pipe. */
void tg_ws_handoff_free(struct tg_ws_handoff *h);

#endif
