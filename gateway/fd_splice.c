/* fd_splice.c: two sockets joined byte for byte with bufferevents (fd_splice.h). */
#include "fd_splice.h"

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>

#include "net/bulk_read.h"
#include "tracegate/log.h"

#define LOG "splice"

struct splice {
    struct bufferevent *bev[2];
    int eof[2];      /* side i sent EOF (and we passed it on) */
    size_t high;
    unsigned long long bytes[2]; /* from side i */
    char label[96];
};

static void finish(struct splice *s, const char *why)
{
    tg_debug(LOG, "%s: closed (%s; %llu bytes one way, %llu the other)", s->label, why, s->bytes[0], s->bytes[1]);
    for (int i = 0; i < 2; i++)
        bufferevent_free(s->bev[i]); /* BEV_OPT_CLOSE_ON_FREE */
    free(s);
}

static int side_of(struct splice *s, struct bufferevent *b) { return b == s->bev[1]; }

static void pass_on(struct splice *s, int from)
{
    struct bufferevent *src = s->bev[from], *dst = s->bev[!from];
    struct evbuffer *in = bufferevent_get_input(src), *out = bufferevent_get_output(dst);
    s->bytes[from] += evbuffer_get_length(in);
    evbuffer_add_buffer(out, in);
    if (evbuffer_get_length(out) >= s->high)
        bufferevent_disable(src, EV_READ); /* the other side is behind: wait for its write_cb */
}

static void read_cb(struct bufferevent *b, void *arg)
{
    struct splice *s = arg;
    pass_on(s, side_of(s, b));
}

static void write_cb(struct bufferevent *b, void *arg)
{
    struct splice *s = arg;
    int i = side_of(s, b);
    /* the output of side i drained: read its peer again, pass on a pending EOF */
    if (!s->eof[!i])
        bufferevent_enable(s->bev[!i], EV_READ);
    else if (evbuffer_get_length(bufferevent_get_output(b)) == 0)
        shutdown(bufferevent_getfd(b), SHUT_WR);
    if (s->eof[0] && s->eof[1] && !evbuffer_get_length(bufferevent_get_output(s->bev[0])) &&
        !evbuffer_get_length(bufferevent_get_output(s->bev[1])))
        finish(s, "both sides done");
}

static void event_cb(struct bufferevent *b, short what, void *arg)
{
    struct splice *s = arg;
    int i = side_of(s, b);
    if (what & BEV_EVENT_EOF) {
        pass_on(s, i);
        s->eof[i] = 1;
        struct bufferevent *o = s->bev[!i];
        if (evbuffer_get_length(bufferevent_get_output(o)) == 0)
            shutdown(bufferevent_getfd(o), SHUT_WR);
        if (s->eof[!i] && !evbuffer_get_length(bufferevent_get_output(s->bev[0])) &&
            !evbuffer_get_length(bufferevent_get_output(s->bev[1])))
            finish(s, "both sides done"); /* else write_cb finishes once the rest is out */
        return;
    }
    if (what & BEV_EVENT_ERROR)
        finish(s, "socket error");
}

int tg_fd_splice(struct event_base *base, int a, int b, size_t high, const char *label)
{
    struct splice *s = calloc(1, sizeof *s);
    if (s) {
        s->high = high ? high : 256 * 1024;
        snprintf(s->label, sizeof s->label, "%s", label ? label : "splice");
        s->bev[0] = bufferevent_socket_new(base, a, BEV_OPT_CLOSE_ON_FREE);
        s->bev[1] = bufferevent_socket_new(base, b, BEV_OPT_CLOSE_ON_FREE);
        for (int i = 0; i < 2; i++)
            if (s->bev[i])
                tg_bev_bulk_read(s->bev[i]);
    }
    if (!s || !s->bev[0] || !s->bev[1]) {
        if (s && s->bev[0])
            bufferevent_free(s->bev[0]);
        else
            evutil_closesocket(a);
        if (s && s->bev[1])
            bufferevent_free(s->bev[1]);
        else
            evutil_closesocket(b);
        free(s);
        return -1;
    }
    for (int i = 0; i < 2; i++) {
        bufferevent_setcb(s->bev[i], read_cb, write_cb, event_cb, s);
        bufferevent_enable(s->bev[i], EV_READ | EV_WRITE);
    }
    return 0;
}
