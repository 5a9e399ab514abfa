/* gw_ws_handoff.h: carries accepted WebSocket socketpair ends (plus their
 * client info) from the lws thread to the gateway's libevent thread.
 *
 * The producer side writes one pointer per connection into a non-blocking
 * pipe (8 bytes, so each write is atomic); the libevent side's read event
 * takes them out and calls the consumer callback, which owns the fd from
 * then on. Nothing else crosses threads.
 *
 * Threading: tg_ws_handoff_new/free run on the libevent thread (free only
 * once no thread posts any more); tg_ws_handoff_post may run on any thread. */
#ifndef TRACEGATE_GATEWAY_GW_WS_HANDOFF_H
#define TRACEGATE_GATEWAY_GW_WS_HANDOFF_H

#include "gw.h"

struct event_base;
struct tg_ws_handoff;

/* Runs on the libevent thread; owns fd. */
typedef void (*tg_ws_handoff_fn)(void *arg, int fd, const struct tg_gw_client_info *info);

struct tg_ws_handoff *tg_ws_handoff_new(struct event_base *base, tg_ws_handoff_fn fn, void *arg);
/* Takes ownership of fd (closed on failure). Returns 0 or -1. */
int tg_ws_handoff_post(struct tg_ws_handoff *h, int fd, const struct tg_gw_client_info *info);
/* Closes the fds of connections still in the pipe. */
void tg_ws_handoff_free(struct tg_ws_handoff *h);

#endif
