/* write_through.h: a socket bufferevent whose output is written in the loop turn it was queued
 * in (internal to libtracegate; used by the batched TLS path, net/tls_path.c).
 *
 * libevent's socket bufferevent writes only when epoll reports the socket writable: each reply
 * queued on an idle connection costs an epoll_ctl to add write interest, a loop turn and an
 * epoll_wait to learn the socket was writable all along, and an epoll_ctl to remove the interest
 * once the output is empty. With write-through, the bufferevent's EV_WRITE stays disabled while
 * its output is empty; bytes queued in a loop turn are written (one writev, up to
 * TG_WRITE_THROUGH_MAX bytes, several if the socket keeps taking them) from an event activated
 * in that same turn, after the callback that queued them returns. Only what the socket does not
 * take waits for writability: EV_WRITE is enabled then, libevent writes the rest as before, and
 * write-through resumes when libevent has emptied the output. A failed write enables EV_WRITE as
 * well, so libevent's next write reports the error through the bufferevent's event callback
 * exactly as it would have. After each write-through, the bufferevent's write callback runs as
 * libevent runs it after its own writes (output at or below the low watermark), so a filter above
 * the socket (OpenSSL's) produces more.
 *
 * Install it only once the socket is connected (a connecting socket bufferevent waits for
 * EV_WRITE to learn the connect's outcome).
 *
 * Ownership: the returned handle belongs to the caller, who frees it before the bufferevent's
 * output evbuffer goes away (it removes its callback from it); the bufferevent is not owned.
 * Threading: the bufferevent's event loop thread only. */
#ifndef TRACEGATE_NET_WRITE_THROUGH_H
#define TRACEGATE_NET_WRITE_THROUGH_H

#include <stddef.h>
#include <stdint.h>

struct bufferevent;
struct tg_write_through;

#define TG_WRITE_THROUGH_MAX (256u << 10)

/* Starts write-through on a connected socket bufferevent. NULL on allocation failure (the
 * bufferevent then writes as before). */
struct tg_write_through *tg_write_through_new(struct bufferevent *sock);

/* Frees the handle, for a bufferevent that is going away (EV_WRITE is left as it is: bytes still
 * queued are left to the bufferevent's own end). NULL is ignored. */
void tg_write_through_free(struct tg_write_through *wt);

/* Writes made by write-through and bytes they moved (for tests and benchmarks). */
void tg_write_through_counts(const struct tg_write_through *wt, uint64_t *writes, uint64_t *bytes);

#endif
