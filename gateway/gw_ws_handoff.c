/* gw_ws_handoff.c: socketpair ends and client info from the lws thread to the libevent thread through a pipe (see gw_ws_handoff.h). */
#include "gw_ws_handoff.h"

#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "net/ws_close_note.h"
#include "net/ws_seam.h"
#include "tracegate/log.h"

#define LOG "ws"

struct item {
    enum tg_ws_handoff_kind kind;
    int fd;
    struct tg_ws_seam *seam;
    struct tg_gw_client_info info;
    struct tg_ws_close_note *note; /* a reference, or NULL */
};

struct tg_ws_handoff {
    int rfd, wfd;
    struct event *ev;
    tg_ws_handoff_fn fn;
    void *arg;
};

static void on_readable(evutil_socket_t fd, short what, void *arg)
{
    struct tg_ws_handoff *h = arg;
    (void)what;
    struct item *batch[64];
    for (;;) {
        ssize_t n = read(fd, batch, sizeof batch);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return;
        /* every write is one pointer (atomic), so reads are whole pointers */
        size_t cnt = (size_t)n / sizeof batch[0];
        for (size_t i = 0; i < cnt; i++) {
            struct item *it = batch[i];
            h->fn(h->arg, it->kind, it->fd, it->seam, &it->info, it->note);
            tg_ws_close_note_unref(it->note);
            free(it);
        }
        if ((size_t)n < sizeof batch)
            return;
    }
}

struct tg_ws_handoff *tg_ws_handoff_new(struct event_base *base, tg_ws_handoff_fn fn, void *arg)
{
    struct tg_ws_handoff *h = calloc(1, sizeof *h);
    if (!h)
        return NULL;
    int p[2];
    if (pipe2(p, O_NONBLOCK | O_CLOEXEC) != 0) {
        free(h);
        return NULL;
    }
    h->rfd = p[0];
    h->wfd = p[1];
    h->fn = fn;
    h->arg = arg;
    h->ev = event_new(base, h->rfd, EV_READ | EV_PERSIST, on_readable, h);
    if (!h->ev || event_add(h->ev, NULL) != 0) {
        tg_ws_handoff_free(h);
        return NULL;
    }
    return h;
}

static int post(struct tg_ws_handoff *h, enum tg_ws_handoff_kind kind, int fd, struct tg_ws_seam *seam,
                const struct tg_gw_client_info *info, struct tg_ws_close_note *note)
{
    struct item *it = malloc(sizeof *it);
    if (!it) {
        if (seam)
            tg_ws_seam_abandon(seam);
        else
            close(fd);
        return -1;
    }
    it->kind = kind;
    it->fd = fd;
    it->seam = seam;
    it->info = *info;
    it->note = note;
    tg_ws_close_note_ref(note);
    for (;;) {
        ssize_t n = write(h->wfd, &it, sizeof it);
        if (n == (ssize_t)sizeof it)
            return 0;
        if (n < 0 && errno == EINTR)
            continue;
        /* pipe full (thousands of unconsumed connections) or closed */
        tg_warn(LOG, "cannot hand a WebSocket to the gateway loop: %s", n < 0 ? strerror(errno) : "short write");
        tg_ws_close_note_set(it->note, 1011, "the gateway is overloaded");
        if (seam)
            tg_ws_seam_abandon(seam);
        else
            close(fd);
        tg_ws_close_note_unref(it->note);
        free(it);
        return -1;
    }
}

int tg_ws_handoff_post_adb(struct tg_ws_handoff *h, int fd, const struct tg_gw_client_info *info,
                           struct tg_ws_close_note *note)
{
    return post(h, TG_WS_HANDOFF_ADB, fd, NULL, info, note);
}

int tg_ws_handoff_post_native(struct tg_ws_handoff *h, int fd, const struct tg_gw_client_info *info)
{
    return post(h, TG_WS_HANDOFF_NATIVE, fd, NULL, info, NULL);
}

int tg_ws_handoff_post_seam(struct tg_ws_handoff *h, struct tg_ws_seam *seam, const struct tg_gw_client_info *info)
{
    return post(h, TG_WS_HANDOFF_SEAM, -1, seam, info, NULL);
}

void tg_ws_handoff_free(struct tg_ws_handoff *h)
{
    if (!h)
        return;
    if (h->ev)
        event_free(h->ev);
    struct item *it;
    while (read(h->rfd, &it, sizeof it) == (ssize_t)sizeof it) {
        if (it->seam)
            tg_ws_seam_abandon(it->seam);
        else
            close(it->fd);
        tg_ws_close_note_unref(it->note);
        free(it);
    }
    close(h->rfd);
    close(h->wfd);
    free(h);
}
