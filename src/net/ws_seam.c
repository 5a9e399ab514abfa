/* ws_seam.c: the in-memory byte stream between a WebSocket on the lws thread and a bufferevent
 * pair on a libevent thread (see ws_seam.h). */
#include "net/ws_seam.h"

#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <libwebsockets.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/uio.h>
#include <unistd.h>

#include "net/atomic_max.h"

struct tg_ws_seams {
    pthread_mutex_t mu;
    struct event_base *base;
    struct lws_context *ctx;
    int efd;
    struct event *ev;
    /* under mu */
    struct tg_ws_seam *all;         /* every seam still held by a side */
    struct tg_ws_seam *ev_pending;  /* seams the libevent side is to look at */
    struct tg_ws_seam *lws_pending; /* seams the lws side is to look at */
    int ev_signaled;                /* the eventfd was written since the libevent side last read it */
};

struct tg_ws_seam {
    struct tg_ws_seams *set;
    /* under set->mu */
    struct tg_ws_seam *next_all, *prev_all, *next_ev, *next_lws;
    int on_ev, on_lws;
    void *ws_user;        /* NULL once the lws side let go */
    struct evbuffer *in;  /* WebSocket → gateway */
    struct evbuffer *out; /* gateway → WebSocket: may hold the gateway's read blocks by reference,
                           * so only the libevent thread removes chains from it (their release
                           * callbacks are not thread-safe); the lws side copies bytes out and
                           * counts them in out_taken, which the libevent side drains */
    size_t out_taken;
    int ws_gone;          /* the lws side let go: A gets the end of stream after `in` */
    int ev_gone;          /* the libevent side let go */
    int ev_ended;         /* the gateway side ended: the WebSocket closes once `out` is sent */
    int ws_paused;        /* the lws side stopped reading the WebSocket (push returned 1) */
    int want_resume_rx;   /* ... and `in` was taken under IN_LOW since */
    int b_paused;         /* the libevent side stopped reading B (`out` over OUT_HIGH) */
    int want_resume_b;    /* ... and `out` was taken under OUT_LOW since */
    /* libevent thread only */
    struct bufferevent *b; /* from tg_ws_seam_open until this side lets go */
    struct tg_ws_seam *next_work; /* on_eventfd's own list (next_ev may change under it) */
    struct evbuffer *stage; /* `in`'s chains on their way to B (moved out under the lock, written without it) */
};

static atomic_int g_seams;
static atomic_ullong g_out_pauses;
static atomic_size_t g_out_peak, g_in_peak;

int tg_ws_seam_count(void) { return atomic_load(&g_seams); }

void tg_ws_seam_stats(struct tg_ws_seam_stats *st)
{
    st->out_pauses = atomic_load(&g_out_pauses);
    st->out_peak = atomic_load(&g_out_peak);
    st->in_peak = atomic_load(&g_in_peak);
}

void tg_ws_seam_stats_reset_peaks(void)
{
    atomic_store(&g_out_peak, 0);
    atomic_store(&g_in_peak, 0);
}

/* ------------------------------------------------------------ under the lock */

/* Asks the libevent side to look at m; returns 1 if the eventfd must be written (after unlocking). */
static int ev_notify_locked(struct tg_ws_seam *m)
{
    struct tg_ws_seams *s = m->set;
    if (m->ev_gone || m->on_ev)
        return 0;
    m->on_ev = 1;
    m->next_ev = s->ev_pending;
    s->ev_pending = m;
    if (s->ev_signaled)
        return 0;
    s->ev_signaled = 1;
    return 1;
}

/* Asks the lws side to look at m; returns 1 if lws_cancel_service must be called (after unlocking). */
static int lws_notify_locked(struct tg_ws_seam *m)
{
    struct tg_ws_seams *s = m->set;
    if (m->ws_gone || m->on_lws)
        return 0;
    int first = s->lws_pending == NULL;
    m->on_lws = 1;
    m->next_lws = s->lws_pending;
    s->lws_pending = m;
    return first;
}

static void unlink_pending(struct tg_ws_seam **head, struct tg_ws_seam *m, int lws)
{
    for (struct tg_ws_seam **pp = head; *pp; pp = lws ? &(*pp)->next_lws : &(*pp)->next_ev)
        if (*pp == m) {
            *pp = lws ? m->next_lws : m->next_ev;
            return;
        }
}

static void seam_free_locked(struct tg_ws_seam *m)
{
    struct tg_ws_seams *s = m->set;
    if (m->prev_all)
        m->prev_all->next_all = m->next_all;
    else
        s->all = m->next_all;
    if (m->next_all)
        m->next_all->prev_all = m->prev_all;
    evbuffer_free(m->in);
    evbuffer_free(m->out);
    if (m->stage)
        evbuffer_free(m->stage);
    free(m);
    atomic_fetch_sub(&g_seams, 1);
}

/* ------------------------------------------------------------ wake-ups */

static void signal_ev(struct tg_ws_seams *s)
{
    uint64_t one = 1;
    while (write(s->efd, &one, sizeof one) < 0 && errno == EINTR)
        ;
}

static void signal_lws(struct tg_ws_seams *s)
{
    if (s->ctx)
        lws_cancel_service(s->ctx);
}

/* ------------------------------------------------------------ libevent side */

static void ev_service(struct tg_ws_seam *m);

/* The libevent side lets go (after the gateway side ended, or without ever opening). */
static void ev_release(struct tg_ws_seam *m)
{
    struct tg_ws_seams *s = m->set;
    struct bufferevent *b = m->b;
    m->b = NULL;
    pthread_mutex_lock(&s->mu);
    /* what the WebSocket has still to send becomes plain memory: from here on the lws side may free
     * `out`, and the gateway's read blocks must be let go of on this thread */
    evbuffer_drain(m->out, m->out_taken);
    m->out_taken = 0;
    size_t left = evbuffer_get_length(m->out);
    if (left) {
        struct evbuffer *plain = evbuffer_new();
        unsigned char *copy = plain ? evbuffer_pullup(m->out, -1) : NULL;
        if (copy && evbuffer_add(plain, copy, left) == 0) {
            evbuffer_free(m->out);
            m->out = plain;
        } else {
            evbuffer_drain(m->out, left); /* out of memory: the tail is lost, the WebSocket still closes */
            if (plain)
                evbuffer_free(plain);
        }
    }
    m->ev_ended = 1;
    int wake = lws_notify_locked(m);
    if (m->on_ev) {
        unlink_pending(&s->ev_pending, m, 0);
        m->on_ev = 0;
    }
    m->ev_gone = 1;
    if (m->ws_gone)
        seam_free_locked(m);
    pthread_mutex_unlock(&s->mu);
    if (b) {
        bufferevent_setcb(b, NULL, NULL, NULL, NULL); /* nothing deferred may reach m any more */
        bufferevent_free(b);
    }
    if (wake)
        signal_lws(s);
}

/* What the gateway wrote (B's input) goes to `out`: until `out` is at OUT_HIGH, or all of it
 * (`all`: the gateway side ended, these are its last bytes). */
static void move_out(struct tg_ws_seam *m, struct bufferevent *b, int all)
{
    struct tg_ws_seams *s = m->set;
    struct evbuffer *bin = bufferevent_get_input(b);
    pthread_mutex_lock(&s->mu);
    if (m->ws_gone) {
        evbuffer_drain(bin, evbuffer_get_length(bin)); /* nobody to send it to */
        pthread_mutex_unlock(&s->mu);
        return;
    }
    evbuffer_drain(m->out, m->out_taken);
    m->out_taken = 0;
    size_t have = evbuffer_get_length(m->out), room = have < TG_WS_SEAM_OUT_HIGH ? TG_WS_SEAM_OUT_HIGH - have : 0;
    size_t n = evbuffer_get_length(bin);
    if (all)
        room = n;
    evbuffer_remove_buffer(bin, m->out, n < room ? n : room); /* moves whole chains */
    int wake = n && room ? lws_notify_locked(m) : 0, pause = 0;
    tg_atomic_size_max(&g_out_peak, evbuffer_get_length(m->out));
    if (!all && n >= room && !m->b_paused) {
        /* the rest waits in B, then in A: the gateway sees its client congested */
        m->b_paused = 1;
        pause = 1;
        atomic_fetch_add(&g_out_pauses, 1);
    }
    pthread_mutex_unlock(&s->mu);
    if (pause)
        bufferevent_disable(b, EV_READ); /* the gateway sees its client congested */
    if (wake)
        signal_lws(s);
}

static void b_read_cb(struct bufferevent *b, void *arg) { move_out(arg, b, 0); }

/* B's output drained under IN_LOW: more of `in` may go. */
static void b_write_cb(struct bufferevent *b, void *arg)
{
    (void)b;
    ev_service(arg);
}

static void b_event_cb(struct bufferevent *b, short what, void *arg)
{
    struct tg_ws_seam *m = arg;
    if (!(what & (BEV_EVENT_EOF | BEV_EVENT_ERROR)))
        return;
    move_out(m, b, 1); /* what came before the end, all of it: B goes now */
    ev_release(m);
}

/* Moves `in` to B while the gateway keeps up, applies the lws side's resume, and passes the
 * WebSocket's end on once `in` is empty. */
static void ev_service(struct tg_ws_seam *m)
{
    struct tg_ws_seams *s = m->set;
    if (!m->b) /* not opened yet (tg_ws_seam_open looks again) */
        return;
    struct evbuffer *bout = bufferevent_get_output(m->b);
    pthread_mutex_lock(&s->mu);
    evbuffer_drain(m->out, m->ws_gone ? evbuffer_get_length(m->out) : m->out_taken); /* see `out` */
    m->out_taken = 0;
    int resume_b = m->want_resume_b;
    m->want_resume_b = 0;
    int wake = 0;
    if (evbuffer_get_length(bout) < TG_WS_SEAM_IN_HIGH && evbuffer_get_length(m->in)) {
        evbuffer_add_buffer(m->stage, m->in);
        if (m->ws_paused && !m->want_resume_rx) {
            m->want_resume_rx = 1;
            wake = lws_notify_locked(m);
        }
    }
    int end = m->ws_gone && !evbuffer_get_length(m->in);
    pthread_mutex_unlock(&s->mu);
    if (wake)
        signal_lws(s);
    if (evbuffer_get_length(m->stage))
        bufferevent_write_buffer(m->b, m->stage); /* moves the chains; A's callbacks are deferred */
    if (resume_b) {
        bufferevent_enable(m->b, EV_READ);
        if (evbuffer_get_length(bufferevent_get_input(m->b)))
            move_out(m, m->b, 0); /* what stayed behind at the pause: enabling moves only new bytes */
    }
    if (end) {
        bufferevent_flush(m->b, EV_WRITE, BEV_FINISHED); /* A: the bytes, then end of stream */
        ev_release(m);
    }
}

static void on_eventfd(evutil_socket_t fd, short what, void *arg)
{
    (void)what;
    struct tg_ws_seams *s = arg;
    uint64_t v;
    while (read(fd, &v, sizeof v) < 0 && errno == EINTR)
        ;
    pthread_mutex_lock(&s->mu);
    s->ev_signaled = 0;
    struct tg_ws_seam *list = s->ev_pending;
    s->ev_pending = NULL;
    for (struct tg_ws_seam *m = list; m; m = m->next_ev) {
        m->on_ev = 0;
        m->next_work = m->next_ev; /* the lws side may put m on ev_pending again once we unlock */
    }
    pthread_mutex_unlock(&s->mu);
    /* each seam on the list is held by this side (a seam leaves the list when this side lets go,
     * which happens only on this thread): none is freed under us; next_work is read before
     * ev_service, which may let go of m */
    for (struct tg_ws_seam *m = list, *next; m; m = next) {
        next = m->next_work;
        ev_service(m);
    }
}

struct bufferevent *tg_ws_seam_open(struct tg_ws_seam *m)
{
    struct bufferevent *pair[2];
    if (!(m->stage = evbuffer_new()) ||
        bufferevent_pair_new(m->set->base, BEV_OPT_DEFER_CALLBACKS, pair) != 0) {
        ev_release(m);
        return NULL;
    }
    m->b = pair[1];
    bufferevent_setcb(m->b, b_read_cb, b_write_cb, b_event_cb, m);
    bufferevent_setwatermark(m->b, EV_WRITE, TG_WS_SEAM_IN_LOW, 0);
    bufferevent_enable(m->b, EV_READ | EV_WRITE);
    /* what the WebSocket sent meanwhile, or its end: from the loop, once the caller holds A */
    pthread_mutex_lock(&m->set->mu);
    int wake = ev_notify_locked(m);
    pthread_mutex_unlock(&m->set->mu);
    if (wake)
        signal_ev(m->set);
    return pair[0];
}

void tg_ws_seam_abandon(struct tg_ws_seam *m) { ev_release(m); }

/* ------------------------------------------------------------ lws side */

struct tg_ws_seam *tg_ws_seam_new(struct tg_ws_seams *s, void *ws_user)
{
    struct tg_ws_seam *m = calloc(1, sizeof *m);
    if (!m)
        return NULL;
    if (!(m->in = evbuffer_new()) || !(m->out = evbuffer_new())) {
        if (m->in)
            evbuffer_free(m->in);
        free(m);
        return NULL;
    }
    m->set = s;
    m->ws_user = ws_user;
    atomic_fetch_add(&g_seams, 1);
    pthread_mutex_lock(&s->mu);
    m->next_all = s->all;
    if (s->all)
        s->all->prev_all = m;
    s->all = m;
    pthread_mutex_unlock(&s->mu);
    return m;
}

int tg_ws_seam_push(struct tg_ws_seam *m, const void *data, size_t len, size_t limit)
{
    struct tg_ws_seams *s = m->set;
    pthread_mutex_lock(&s->mu);
    if (m->ev_ended) {
        pthread_mutex_unlock(&s->mu);
        return 0; /* the gateway side is gone: the WebSocket closes once `out` is sent */
    }
    size_t have = evbuffer_get_length(m->in);
    if (have + len > limit || evbuffer_add(m->in, data, len) != 0) {
        pthread_mutex_unlock(&s->mu);
        return -1;
    }
    int wake = ev_notify_locked(m);
    tg_atomic_size_max(&g_in_peak, have + len);
    int full = have + len >= TG_WS_SEAM_IN_HIGH;
    if (full) {
        m->ws_paused = 1;
        m->want_resume_rx = 0;
    }
    pthread_mutex_unlock(&s->mu);
    if (wake)
        signal_ev(s);
    return full;
}

ssize_t tg_ws_seam_take(struct tg_ws_seam *m, size_t cap, tg_ws_seam_take_fn take, void *arg, size_t *more,
                        int *ended)
{
    struct tg_ws_seams *s = m->set;
    pthread_mutex_lock(&s->mu);
    ssize_t got = 0;
    struct evbuffer_ptr at;
    size_t avail = evbuffer_get_length(m->out) - m->out_taken;
    if (avail && cap && evbuffer_ptr_set(m->out, &at, m->out_taken, EVBUFFER_PTR_SET) == 0) {
        struct evbuffer_iovec v[TG_WS_SEAM_TAKE_IOV_MAX];
        int n = evbuffer_peek(m->out, (ev_ssize_t)(avail < cap ? avail : cap), &at, v, TG_WS_SEAM_TAKE_IOV_MAX);
        if (n > TG_WS_SEAM_TAKE_IOV_MAX)
            n = TG_WS_SEAM_TAKE_IOV_MAX;
        struct iovec iov[TG_WS_SEAM_TAKE_IOV_MAX];
        size_t len = 0, want = avail < cap ? avail : cap;
        int k = 0;
        for (; k < n && len < want; k++) {
            iov[k].iov_base = v[k].iov_base;
            iov[k].iov_len = v[k].iov_len < want - len ? v[k].iov_len : want - len; /* the last may run past */
            len += iov[k].iov_len;
        }
        if (len) {
            got = take(arg, iov, k, len);
            if (got > (ssize_t)len)
                got = (ssize_t)len; /* a consumer cannot take more than it was given */
        }
    }
    if (got > 0)
        m->out_taken += (size_t)got;
    size_t left = evbuffer_get_length(m->out) - m->out_taken;
    int wake = 0;
    if (m->b_paused && left <= TG_WS_SEAM_OUT_LOW) {
        m->b_paused = 0;
        m->want_resume_b = 1;
        wake = ev_notify_locked(m);
    } else if (m->out_taken >= TG_WS_SEAM_OUT_LOW) {
        wake = ev_notify_locked(m); /* let the gateway's read blocks go */
    }
    *more = left;
    *ended = m->ev_ended && !left;
    pthread_mutex_unlock(&s->mu);
    if (wake)
        signal_ev(s);
    return got;
}

struct copy_to {
    unsigned char *buf;
};

static ssize_t copy_take(void *arg, const struct iovec *iov, int n, size_t len)
{
    struct copy_to *c = arg;
    for (int k = 0; k < n; k++) {
        memcpy(c->buf, iov[k].iov_base, iov[k].iov_len);
        c->buf += iov[k].iov_len;
    }
    return (ssize_t)len;
}

size_t tg_ws_seam_pull(struct tg_ws_seam *m, void *buf, size_t cap, size_t *more, int *ended)
{
    struct copy_to c = {buf};
    ssize_t got = tg_ws_seam_take(m, cap, copy_take, &c, more, ended);
    return got > 0 ? (size_t)got : 0;
}

void tg_ws_seam_ws_closed(struct tg_ws_seam *m)
{
    struct tg_ws_seams *s = m->set;
    pthread_mutex_lock(&s->mu);
    m->ws_user = NULL; /* `out` is drained by the libevent side (ev_service) */
    int wake = ev_notify_locked(m); /* the gateway side gets the end of stream */
    if (m->on_lws) {
        unlink_pending(&s->lws_pending, m, 1);
        m->on_lws = 0;
    }
    m->ws_gone = 1;
    if (m->b_paused) {
        m->b_paused = 0;
        m->want_resume_b = 1; /* keep reading (and dropping) what the gateway writes until it ends */
    }
    if (m->ev_gone)
        seam_free_locked(m);
    pthread_mutex_unlock(&s->mu);
    if (wake)
        signal_ev(s);
}

size_t tg_ws_seams_service(struct tg_ws_seams *s, struct tg_ws_seam_wake *out, size_t cap)
{
    size_t n = 0;
    pthread_mutex_lock(&s->mu);
    while (n < cap && s->lws_pending) {
        struct tg_ws_seam *m = s->lws_pending;
        s->lws_pending = m->next_lws;
        m->on_lws = 0;
        out[n].ws_user = m->ws_user;
        out[n].writable = evbuffer_get_length(m->out) > m->out_taken || m->ev_ended;
        out[n].resume_rx = m->want_resume_rx;
        if (m->want_resume_rx) {
            m->want_resume_rx = 0;
            m->ws_paused = 0;
        }
        n++;
    }
    pthread_mutex_unlock(&s->mu);
    return n;
}

/* ------------------------------------------------------------ the set */

struct tg_ws_seams *tg_ws_seams_new(struct event_base *base, struct lws_context *ctx)
{
    struct tg_ws_seams *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->base = base;
    s->ctx = ctx;
    s->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (s->efd < 0 || pthread_mutex_init(&s->mu, NULL) != 0) {
        if (s->efd >= 0)
            close(s->efd);
        free(s);
        return NULL;
    }
    s->ev = event_new(base, s->efd, EV_READ | EV_PERSIST, on_eventfd, s);
    if (!s->ev || event_add(s->ev, NULL) != 0) {
        if (s->ev)
            event_free(s->ev);
        close(s->efd);
        pthread_mutex_destroy(&s->mu);
        free(s);
        return NULL;
    }
    return s;
}

void tg_ws_seams_free(struct tg_ws_seams *s)
{
    if (!s)
        return;
    event_free(s->ev);
    close(s->efd);
    while (s->all) {
        struct tg_ws_seam *m = s->all;
        if (m->b) {
            bufferevent_setcb(m->b, NULL, NULL, NULL, NULL);
            bufferevent_free(m->b); /* its partner A (a tg_conn's) is left without one */
        }
        m->b = NULL;
        seam_free_locked(m);
    }
    pthread_mutex_destroy(&s->mu);
    free(s);
}
