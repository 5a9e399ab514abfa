/* bulk_read.h: socket bufferevents that read in large pieces (internal to libtracegate; used by
 * src/net and gateway/).
 *
 * libevent 2.1's socket bufferevent reads at most 4096 bytes per readiness event, whatever
 * bufferevent_set_max_single_read says (evbuffer_read caps every read at 4096 bytes): a stream at
 * hundreds of MB/s costs one loop turn, one FIONREAD ioctl and one readv per 4 KiB.
 * tg_bev_bulk_read hooks the bufferevent's input evbuffer: as soon as libevent's own read has
 * added its full 4096 bytes, it reads on from the same socket into space reserved in the same
 * evbuffer, up to TG_BULK_READ_MAX bytes per event, before the bufferevent's read callback runs (a
 * shorter read of libevent's took all the socket held, as FIONREAD told it: no read is tried).
 * A bufferevent with a read high watermark reads as libevent alone does (its suspension at the watermark runs
 * from the same input callbacks, so reading on would race it). EOF and errors are left to libevent's next read, which reports
 * them as it always does. Reading stays enabled, disabled and suspended exactly as before: the
 * extra reads happen only inside a read libevent itself decided to make.
 *
 * Ownership: nothing is allocated; the hook goes away with the bufferevent's input.
 * Threading: the bufferevent's event loop thread (the hook keeps one thread-local flag). */
#ifndef TRACEGATE_NET_BULK_READ_H
#define TRACEGATE_NET_BULK_READ_H

#include <stddef.h>

struct bufferevent;

#define TG_BULK_READ_MAX (256u << 10)

/* Installs the hook on a socket bufferevent (its fd may be set later, e.g. by a connect).
 * Returns 0, or -1 if the callback could not be added (the bufferevent then reads as before). */
int tg_bev_bulk_read(struct bufferevent *bev);

#endif
