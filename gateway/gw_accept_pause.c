/* gw_accept_pause.c: pausing a listener that is out of descriptors (see gw_accept_pause.h). */
#include "gw_accept_pause.h"

#include <errno.h>
#include <event2/event.h>
#include <string.h>

#include "gw.h"
#include "tracegate/clock.h"
#include "tracegate/log.h"

#define LOG "gateway"

static void rearm_cb(evutil_socket_t fd, short what, void *arg)
{
    struct tg_gw_accept_pause *p = arg;
    (void)fd;
    (void)what;
    if (p->listen_ev)
        event_add(p->listen_ev, NULL);
}

int tg_gw_accept_pause_init(struct tg_gw_accept_pause *p, struct event_base *base, struct tg_gw *gw,
                            struct event *listen_ev)
{
    memset(p, 0, sizeof *p);
    p->gw = gw;
    p->listen_ev = listen_ev;
    p->retry_ev = evtimer_new(base, rearm_cb, p);
    return p->retry_ev ? 0 : -1;
}

int tg_gw_accept_failed(struct tg_gw_accept_pause *p, const char *name, int err)
{
    if (err != EMFILE && err != ENFILE && err != ENOBUFS && err != ENOMEM)
        return 0;
    uint64_t now = tg_mono_us();
    if (!p->last_log_us || now - p->last_log_us > 5000000u) {
        tg_warn(LOG, "%s: cannot accept: %s; pausing accepts for %d ms", name, strerror(err),
                TG_GW_ACCEPT_PAUSE_MS);
        p->last_log_us = now;
    }
    if (p->gw)
        tg_gw_count_rejected(p->gw, "accept_failed");
    if (p->listen_ev)
        event_del(p->listen_ev);
    struct timeval tv = {0, TG_GW_ACCEPT_PAUSE_MS * 1000};
    event_add(p->retry_ev, &tv);
    return 1;
}

void tg_gw_accept_pause_stop(struct tg_gw_accept_pause *p)
{
    if (p->retry_ev)
        event_del(p->retry_ev);
}

void tg_gw_accept_pause_free(struct tg_gw_accept_pause *p)
{
    if (p->retry_ev)
        event_free(p->retry_ev);
    memset(p, 0, sizeof *p);
}
