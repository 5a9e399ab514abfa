/* bulk_read.c: a socket bufferevent's reads in pieces of up to 256 KiB instead of libevent 2.1's
 * 4 KiB (bulk_read.h). */
#include "net/bulk_read.h"

#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <sys/uio.h>

static _Thread_local int g_in_hook; /* our own commits call the hook again: ignored */

/* libevent 2.1 reads min(what FIONREAD reports, 4096) bytes per read (EVBUFFER_MAX_READ) */
#define LIBEVENT_READ_MAX 4096u

static void input_added(struct evbuffer *in, const struct evbuffer_cb_info *info, void *arg)
{
    struct bufferevent *bev = arg;
    /* a read of less than libevent's most took all the socket held: reading on would only get
     * EAGAIN (one system call per small message on TLS listeners and links) */
    if (g_in_hook || info->n_added < LIBEVENT_READ_MAX)
        return;
    evutil_socket_t fd = bufferevent_getfd(bev);
    if (fd < 0 || !(bufferevent_get_enabled(bev) & EV_READ))
        return;
    size_t low = 0, high = 0;
    bufferevent_getwatermark(bev, EV_READ, &low, &high);
    if (high)
        return; /* libevent's own watermark suspension runs from the same callbacks: left to it */
    size_t got = info->n_added;
    g_in_hook = 1;
    while (got < TG_BULK_READ_MAX) {
        size_t want = TG_BULK_READ_MAX - got;
        struct evbuffer_iovec v[2];
        int nv = evbuffer_reserve_space(in, (ev_ssize_t)want, v, 2);
        if (nv <= 0)
            break;
        struct iovec iov[2];
        size_t room = 0;
        for (int i = 0; i < nv; i++) {
            if (v[i].iov_len > want - room)
                v[i].iov_len = want - room;
            iov[i].iov_base = v[i].iov_base;
            iov[i].iov_len = v[i].iov_len;
            room += v[i].iov_len;
        }
        ssize_t n;
        do
            n = readv(fd, iov, nv);
        while (n < 0 && errno == EINTR);
        if (n <= 0)
            break; /* drained, at its end or failed: libevent's next read sees which */
        size_t left = (size_t)n;
        int used = 0;
        for (int i = 0; i < nv && left; i++, used++) {
            if (v[i].iov_len > left)
                v[i].iov_len = left;
            left -= v[i].iov_len;
        }
        if (evbuffer_commit_space(in, v, used) != 0)
            break;
        got += (size_t)n;
        if ((size_t)n < room)
            break; /* the socket had no more */
    }
    g_in_hook = 0;
}

int tg_bev_bulk_read(struct bufferevent *bev)
{
    struct evbuffer *in = bufferevent_get_input(bev);
    return in && evbuffer_add_cb(in, input_added, bev) ? 0 : -1;
}
