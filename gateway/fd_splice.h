/* fd_splice.h: two connected stream sockets joined byte for byte on the event loop (an ADB stream
 * between a link channel and the local ADB server), with bounded buffering: a side whose peer has
 * more than `high` bytes queued is not read until that queue drains. A half close is passed on;
 * when both directions are done, or on an error, both sockets are closed and everything freed.
 *
 * Ownership: the splice owns both fds from the call on (also on failure). Threading: the loop of
 * `base`. */
#ifndef TRACEGATE_GATEWAY_FD_SPLICE_H
#define TRACEGATE_GATEWAY_FD_SPLICE_H

#include <stddef.h>

struct event_base;

/* 0, or -1 (out of memory: both fds closed). label is copied, for the log. */
int tg_fd_splice(struct event_base *base, int a, int b, size_t high, const char *label);

#endif
