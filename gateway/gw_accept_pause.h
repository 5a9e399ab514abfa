/* gw_accept_pause.h: what a listener does when accept() fails for want of descriptors or memory
 * (EMFILE, ENFILE, ENOBUFS, ENOMEM): its socket stays readable, so retrying at once would spin a
 * core and log without end. The listener's read event is paused for 200 ms instead, each failure
 * is counted as rejected{reason="accept_failed"}, and one line is logged per 5 s.
 * Used by the gateway's listeners (gw_listener.c) and the link listeners (fleet.c).
 *
 * Ownership: embedded in its listener; init makes the retry timer, free frees it (the listen
 * event stays the listener's). Threading: the gateway's event loop thread. */
#ifndef TRACEGATE_GATEWAY_GW_ACCEPT_PAUSE_H
#define TRACEGATE_GATEWAY_GW_ACCEPT_PAUSE_H

#include <stdint.h>

struct event;
struct event_base;
struct tg_gw;

#define TG_GW_ACCEPT_PAUSE_MS 200

struct tg_gw_accept_pause {
    struct tg_gw *gw;         /* for the metric (NULL: not counted) */
    struct event *listen_ev;  /* the listener's read event, paused and re-armed */
    struct event *retry_ev;
    uint64_t last_log_us;
};

/* 0, or -1 when the timer cannot be made. */
int tg_gw_accept_pause_init(struct tg_gw_accept_pause *p, struct event_base *base, struct tg_gw *gw,
                            struct event *listen_ev);
/* accept() failed with err on the listener named name: 1 when it is paused (err is one of the
 * resource errors above), 0 when the caller just returns (EAGAIN and the like). */
int tg_gw_accept_failed(struct tg_gw_accept_pause *p, const char *name, int err);
/* Cancels a pending re-arm (the listener stops). */
void tg_gw_accept_pause_stop(struct tg_gw_accept_pause *p);
void tg_gw_accept_pause_free(struct tg_gw_accept_pause *p);

#endif
