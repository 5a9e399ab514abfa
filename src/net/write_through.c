/* write_through.c: a socket bufferevent's output written in the loop turn it was queued in, with
 * no epoll_ctl pair and no extra loop turn per message (write_through.h). */
#include "net/write_through.h"

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <stdlib.h>

/* writes per flush while the socket takes all it is given (then libevent takes over) */
#define FLUSH_ROUNDS 4

struct tg_write_through {
    struct bufferevent *sock;
    struct event *flush;
    struct evbuffer_cb_entry *cb;
    uint64_t writes, bytes;
};

static int waiting_for_writable(const struct tg_write_through *wt)
{
    return (bufferevent_get_enabled(wt->sock) & EV_WRITE) != 0;
}

static void output_changed(struct evbuffer *out, const struct evbuffer_cb_info *info, void *arg)
{
    struct tg_write_through *wt = arg;
    if (info->n_added && !waiting_for_writable(wt)) {
        /* written once the callback that queued it returns (activations coalesce) */
        event_active(wt->flush, EV_TIMEOUT, 0);
    } else if (info->n_deleted && waiting_for_writable(wt) && evbuffer_get_length(out) == 0) {
        /* libevent wrote out the backlog (it removes its write interest itself): back to
         * writing through, before the next queued bytes make it add the interest again */
        bufferevent_disable(wt->sock, EV_WRITE);
    }
}

static void flush_cb(evutil_socket_t unused, short what, void *arg)
{
    (void)unused;
    (void)what;
    struct tg_write_through *wt = arg;
    struct bufferevent *sock = wt->sock;
    struct evbuffer *out = bufferevent_get_output(sock);
    evutil_socket_t fd = bufferevent_getfd(sock);
    if (waiting_for_writable(wt) || fd < 0 || evbuffer_get_length(out) == 0)
        return;
    int wrote = 0;
    /* the socket bufferevent keeps its output's front frozen between its own writes */
    evbuffer_unfreeze(out, 1);
    for (int round = 0; round < FLUSH_ROUNDS && evbuffer_get_length(out) > 0; round++) {
        int n = evbuffer_write_atmost(out, fd, TG_WRITE_THROUGH_MAX);
        if (n <= 0)
            break; /* full or failed: libevent's own write sees which */
        wt->writes++;
        wt->bytes += (uint64_t)n;
        wrote = 1;
        if ((unsigned)n < TG_WRITE_THROUGH_MAX)
            break; /* the socket took less than it was offered, or that was all */
    }
    evbuffer_freeze(out, 1);
    if (evbuffer_get_length(out) > 0)
        bufferevent_enable(sock, EV_WRITE); /* the rest, or the error, is libevent's */
    if (wrote) /* as libevent after its writes (at or under the low watermark): a filter produces more */
        bufferevent_trigger(sock, EV_WRITE, 0);
}

struct tg_write_through *tg_write_through_new(struct bufferevent *sock)
{
    struct tg_write_through *wt = calloc(1, sizeof *wt);
    if (!wt)
        return NULL;
    wt->sock = sock;
    wt->flush = event_new(bufferevent_get_base(sock), -1, 0, flush_cb, wt);
    struct evbuffer *out = bufferevent_get_output(sock);
    wt->cb = wt->flush ? evbuffer_add_cb(out, output_changed, wt) : NULL;
    if (!wt->cb) {
        if (wt->flush)
            event_free(wt->flush);
        free(wt);
        return NULL;
    }
    if (evbuffer_get_length(out) == 0)
        bufferevent_disable(sock, EV_WRITE);
    /* else libevent writes what is queued; write-through starts once it has emptied the output */
    return wt;
}

void tg_write_through_free(struct tg_write_through *wt)
{
    if (!wt)
        return;
    evbuffer_remove_cb_entry(bufferevent_get_output(wt->sock), wt->cb);
    event_free(wt->flush);
    free(wt);
}

void tg_write_through_counts(const struct tg_write_through *wt, uint64_t *writes, uint64_t *bytes)
{
    *writes = wt ? wt->writes : 0;
    *bytes = wt ? wt->bytes : 0;
}
