/* ws_filter_server.c: the server side of the WebSocket filter: its socket bufferevent, its end (the
 * last send and the close frame) and its counters (see ws_filter.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "net/bulk_read.h"
#include "net/write_through.h"
#include "net/ws_filter_int.h"

#define STAGE_LOW (STAGE_HIGH / 2)
#define SOCKET_IO_MAX (256u << 10)

void tg_ws_server_stats(struct tg_ws_server_stats *out)
{
    out->open = atomic_load(&tg_wsf_server.open);
    out->out_messages = atomic_load(&tg_wsf_server.out_messages);
    out->out_bytes = atomic_load(&tg_wsf_server.out_bytes);
    out->out_full = atomic_load(&tg_wsf_server.out_full);
    out->staged_peak = atomic_load(&tg_wsf_server.staged_peak);
    out->in_messages = atomic_load(&tg_wsf_server.in_messages);
}

void tg_ws_server_stats_reset_peaks(void) { atomic_store(&tg_wsf_server.staged_peak, 0); }

/* Server side, as the filter goes: what the socket has not taken yet, then our close frame (unless
 * one was sent), get one non-blocking send; then the socket closes. */
void tg_wsf_server_end(struct wsf *f)
{
    atomic_fetch_sub_explicit(&tg_wsf_server.open, 1, memory_order_relaxed);
    struct evbuffer *out = bufferevent_get_output(f->under);
    if (f->staged_cb)
        evbuffer_remove_cb_entry(out, f->staged_cb);
    f->staged_cb = NULL;
    if (f->ctl_out)
        evbuffer_add_buffer(out, f->ctl_out);
    if (!f->close_sent) {
        const char *why = f->close_code ? f->close_why : "connection closed";
        unsigned code = f->close_code ? f->close_code : CLOSE_NORMAL;
        uint8_t body[2 + sizeof f->close_why];
        size_t wl = strlen(why);
        if (wl > MAX_CONTROL - 2)
            wl = MAX_CONTROL - 2;
        body[0] = (uint8_t)(code >> 8);
        body[1] = (uint8_t)code;
        memcpy(body + 2, why, wl);
        f->close_sent = 1;
        tg_wsf_put_frame(f, out, OP_CLOSE, NULL, body, 2 + wl);
    }
    tg_write_through_free(f->wt);
    f->wt = NULL;
    int fd = bufferevent_getfd(f->under);
    evbuffer_unfreeze(out, 1); /* a socket bufferevent lets only itself drain its output */
    /* sendmsg, not evbuffer_write: at the end the peer is often gone, and writev would raise
     * SIGPIPE where MSG_NOSIGNAL does not */
    while (fd >= 0 && evbuffer_get_length(out)) {
        struct evbuffer_iovec e[16];
        struct iovec v[16];
        int k = evbuffer_peek(out, -1, NULL, e, 16);
        if (k > 16)
            k = 16;
        for (int i = 0; i < k; i++)
            v[i] = (struct iovec){.iov_base = e[i].iov_base, .iov_len = e[i].iov_len};
        struct msghdr mh = {.msg_iov = v, .msg_iovlen = (size_t)(k > 0 ? k : 0)};
        ssize_t n = sendmsg(fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n <= 0 || evbuffer_drain(out, (size_t)n) != 0)
            break;
    }
    bufferevent_free(f->under); /* closes the socket */
    f->under = NULL;
}

/* Server side: the socket took some of its share; a PONG that waited for room may go now. */
static void staged_drained(struct evbuffer *buf, const struct evbuffer_cb_info *info, void *arg)
{
    struct wsf *f = arg;
    if (!f->pong_due || !info->n_deleted || evbuffer_get_length(buf) >= STAGE_HIGH)
        return;
    /* the socket bufferevent outlives the filter's unlink (server_end frees it in the filter's
     * finalizer), which clears its callbacks: then the filter is going and nothing is kicked */
    bufferevent_event_cb alive = NULL;
    bufferevent_getcb(f->under, NULL, NULL, &alive, NULL);
    if (alive)
        tg_wsf_kick(f);
}

struct bufferevent *tg_ws_server_filter_new(struct event_base *base, int fd, const struct tg_ws_server_filter_cfg *cfg)
{
    struct wsf *f = calloc(1, sizeof *f);
    struct bufferevent *sock = NULL;
    /* non-blocking whatever the caller handed over: a write-through must never wait for the peer */
    if (!f || evutil_make_socket_nonblocking(fd) != 0 ||
        !(sock = bufferevent_socket_new(base, fd, BEV_OPT_CLOSE_ON_FREE))) {
        free(f);
        close(fd);
        return NULL;
    }
    f->server = 1;
    f->state = S_OPEN;
    f->max_message = cfg->max_message;
    f->out_message = cfg->out_message ? cfg->out_message : SOCKET_IO_MAX;
    snprintf(f->what, sizeof f->what, "%s", cfg->what ? cfg->what : "WebSocket");
    f->ctl_out = evbuffer_new();
    f->kick = event_new(base, -1, 0, tg_wsf_kick_cb, f);
    /* not CLOSE_ON_FREE: the socket bufferevent outlives the filter's unlink, so that freeing the
     * filter can still send what is queued and the close frame (server_end) */
    if (f->ctl_out && f->kick)
        f->bev = bufferevent_filter_new(sock, tg_wsf_in, tg_wsf_out, BEV_OPT_DEFER_CALLBACKS, tg_wsf_free, f);
    if (!f->bev) {
        tg_wsf_free(f);
        bufferevent_free(sock);
        return NULL;
    }
    f->under = sock;
    atomic_fetch_add_explicit(&tg_wsf_server.open, 1, memory_order_relaxed);
    bufferevent_set_max_single_write(sock, SOCKET_IO_MAX);
    bufferevent_set_max_single_read(sock, SOCKET_IO_MAX);
    tg_bev_bulk_read(sock); /* libevent alone reads 4 KiB per event */
    bufferevent_setwatermark(sock, EV_WRITE, STAGE_LOW, STAGE_HIGH);
    f->wt = tg_write_through_new(sock); /* NULL: libevent writes it, as before */
    f->staged_cb = evbuffer_add_cb(bufferevent_get_output(sock), staged_drained, f);
    return f->bev;
}

