/* gw_adb.c: /adb pipes: a WebSocket's socketpair end joined to a byte stream to an ADB server, with bounded queues and logged, metered lifetimes (see gw_adb.h). */
#include "gw_adb.h"

#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gw_adb_target.h"
#include "net/ws_close_note.h"
#include "net/bulk_read.h"
#include "tracegate/log.h"

#define LOG "adb"
#define CLOSE_UNEXPECTED 1011 /* RFC 6455: the server could not fulfil the request */
#define CLOSE_GOING_AWAY 1001
/* After one side ended, how long the other may take to take the last bytes. */
#define FLUSH_LINGER_SECS 30

enum { TO_ADB = 0, TO_CLIENT = 1 };

struct pipe {
    struct tg_gw_adb *a;
    struct pipe *prev, *next;
    struct bufferevent *cli, *srv; /* the WebSocket's socketpair end; the ADB server */
    struct tg_ws_close_note *note;
    struct tg_gw_client_info info;
    int connected;
    int closing;                   /* one side ended: flushing to flush_to, then free */
    struct bufferevent *flush_to;
    char end_why[128];             /* why (the side that ended, how), for the log */
    struct event *linger;
    int paused[2];                 /* reading the source of a direction is paused */
    uint64_t bytes[2];
    uint64_t held;                 /* bytes this pipe holds, as last added to a->buffered */
};

struct tg_gw_adb {
    struct event_base *base;
    struct tg_gw_adb_target *target;
    size_t high, low;
    unsigned max_pipes;
    struct pipe *pipes;
    unsigned n_pipes;
    _Atomic uint64_t pipes_now, pipes_total, failed_total, bytes[2], paused[2], buffered, buffered_max;
};

/* ------------------------------------------------------------ bookkeeping */

static void account(struct pipe *p)
{
    struct tg_gw_adb *a = p->a;
    uint64_t now = 0;
    if (p->cli)
        now += evbuffer_get_length(bufferevent_get_input(p->cli)) + evbuffer_get_length(bufferevent_get_output(p->cli));
    if (p->srv)
        now += evbuffer_get_length(bufferevent_get_input(p->srv)) + evbuffer_get_length(bufferevent_get_output(p->srv));
    if (now >= p->held)
        atomic_fetch_add(&a->buffered, now - p->held);
    else
        atomic_fetch_sub(&a->buffered, p->held - now);
    p->held = now;
    uint64_t max = atomic_load(&a->buffered_max);
    while (now > max && !atomic_compare_exchange_weak(&a->buffered_max, &max, now)) {
    }
}

static void pipe_free(struct pipe *p, const char *why)
{
    struct tg_gw_adb *a = p->a;
    tg_info(LOG, "closed /adb%s%s of %s (%s): %llu bytes to the ADB server, %llu to the client (%s)",
            p->info.node[0] ? "/" : "", p->info.node, p->info.peer, p->info.principal,
            (unsigned long long)p->bytes[TO_ADB], (unsigned long long)p->bytes[TO_CLIENT], why);
    if (p->srv)
        bufferevent_free(p->srv);
    p->srv = NULL;
    if (p->cli)
        bufferevent_free(p->cli); /* the WebSocket side sees EOF and closes (with the note, if any) */
    p->cli = NULL;
    account(p);
    if (p->linger)
        event_free(p->linger);
    tg_ws_close_note_unref(p->note);
    if (p->prev)
        p->prev->next = p->next;
    else
        a->pipes = p->next;
    if (p->next)
        p->next->prev = p->prev;
    a->n_pipes--;
    atomic_fetch_sub(&a->pipes_now, 1);
    free(p);
}

/* The WebSocket closes with code and reason (the pipe is freed). */
static void pipe_fail(struct pipe *p, int code, const char *reason)
{
    tg_ws_close_note_set(p->note, code, reason);
    if (code != CLOSE_GOING_AWAY)
        atomic_fetch_add(&p->a->failed_total, 1);
    pipe_free(p, reason);
}

/* ------------------------------------------------------------ byte copying */

static struct bufferevent *dst_of(struct pipe *p, int dir) { return dir == TO_ADB ? p->srv : p->cli; }
static struct bufferevent *src_of(struct pipe *p, int dir) { return dir == TO_ADB ? p->cli : p->srv; }

static void on_read(struct bufferevent *bev, void *arg)
{
    struct pipe *p = arg;
    int dir = bev == p->cli ? TO_ADB : TO_CLIENT;
    struct evbuffer *in = bufferevent_get_input(bev);
    size_t n = evbuffer_get_length(in);
    if (p->closing) {
        evbuffer_drain(in, n); /* the other side is gone: nothing can take these */
        return;
    }
    struct evbuffer *out = bufferevent_get_output(dst_of(p, dir));
    evbuffer_add_buffer(out, in);
    p->bytes[dir] += n;
    atomic_fetch_add(&p->a->bytes[dir], n);
    if (!p->paused[dir] && evbuffer_get_length(out) >= p->a->high) {
        /* the other side does not keep up: stop reading this one until it drains */
        p->paused[dir] = 1;
        bufferevent_disable(bev, EV_READ);
        atomic_fetch_add(&p->a->paused[dir], 1);
        tg_debug(LOG, "%s: paused reading the %s (%zu bytes queued for the %s)", p->info.peer,
                 dir == TO_ADB ? "client" : "ADB server", evbuffer_get_length(out),
                 dir == TO_ADB ? "ADB server" : "client");
    }
    account(p);
}

/* Output of bev drained to the low watermark (or, when closing, to empty). */
static void on_write(struct bufferevent *bev, void *arg)
{
    struct pipe *p = arg;
    int dir = bev == p->srv ? TO_ADB : TO_CLIENT; /* the direction flowing into bev */
    size_t left = evbuffer_get_length(bufferevent_get_output(bev));
    if (p->closing) {
        if (bev == p->flush_to && left == 0)
            pipe_free(p, p->end_why);
        else
            account(p);
        return;
    }
    if (p->paused[dir] && left <= p->a->low) {
        p->paused[dir] = 0;
        bufferevent_enable(src_of(p, dir), EV_READ);
    }
    account(p);
}

static void on_linger(evutil_socket_t fd, short what, void *arg)
{
    struct pipe *p = arg;
    (void)fd;
    (void)what;
    char why[240];
    snprintf(why, sizeof why, "%s; the %s did not take the last %zu bytes in %d s", p->end_why,
             p->flush_to == p->cli ? "client" : "ADB server",
             evbuffer_get_length(bufferevent_get_output(p->flush_to)), FLUSH_LINGER_SECS);
    pipe_free(p, why);
}

/* One side ended: send the other what is queued for it, then close. */
static void side_ended(struct pipe *p, struct bufferevent *gone, const char *why)
{
    struct bufferevent *other = gone == p->cli ? p->srv : p->cli;
    bufferevent_disable(gone, EV_READ | EV_WRITE);
    bufferevent_disable(other, EV_READ);
    size_t left = evbuffer_get_length(bufferevent_get_output(other));
    if (left == 0 || p->closing) {
        pipe_free(p, why);
        return;
    }
    p->closing = 1;
    p->flush_to = other;
    snprintf(p->end_why, sizeof p->end_why, "%s", why);
    bufferevent_setwatermark(other, EV_WRITE, 0, 0); /* on_write at empty */
    p->linger = evtimer_new(p->a->base, on_linger, p);
    struct timeval tv = {FLUSH_LINGER_SECS, 0};
    if (!p->linger || evtimer_add(p->linger, &tv) != 0) {
        pipe_free(p, why);
        return;
    }
    account(p);
}

static void on_event(struct bufferevent *bev, short what, void *arg)
{
    struct pipe *p = arg;
    int err = errno;
    if (what & BEV_EVENT_CONNECTED) {
        p->connected = 1;
        tg_debug(LOG, "%s: connected to the ADB server", p->info.peer);
        return;
    }
    if (!(what & (BEV_EVENT_EOF | BEV_EVENT_ERROR)))
        return;
    if (bev == p->srv && !p->connected) {
        char why[TG_WS_CLOSE_REASON_MAX + 1];
        snprintf(why, sizeof why, "ADB server %.60s not reachable: %s", tg_gw_adb_target_describe(p->a->target),
                 (what & BEV_EVENT_ERROR) && err ? strerror(err) : "connection closed");
        tg_warn(LOG, "/adb for %s (%s): %s", p->info.peer, p->info.principal, why);
        pipe_fail(p, CLOSE_UNEXPECTED, why);
        return;
    }
    char why[128];
    if (what & BEV_EVENT_ERROR)
        snprintf(why, sizeof why, "%s error: %s", bev == p->srv ? "ADB server" : "client", strerror(err));
    else
        snprintf(why, sizeof why, "%s closed", bev == p->srv ? "ADB server" : "client");
    side_ended(p, bev, why);
}

/* ------------------------------------------------------------ accept */

void tg_gw_adb_accept(struct tg_gw_adb *a, int fd, const struct tg_gw_client_info *info,
                      struct tg_ws_close_note *note)
{
    struct pipe *p = calloc(1, sizeof *p);
    if (!p) {
        tg_ws_close_note_set(note, CLOSE_UNEXPECTED, "out of memory");
        close(fd);
        return;
    }
    p->a = a;
    p->info = *info;
    p->note = note;
    tg_ws_close_note_ref(note);
    p->next = a->pipes;
    if (a->pipes)
        a->pipes->prev = p;
    a->pipes = p;
    a->n_pipes++;
    atomic_fetch_add(&a->pipes_now, 1);
    atomic_fetch_add(&a->pipes_total, 1);
    p->cli = bufferevent_socket_new(a->base, fd, BEV_OPT_CLOSE_ON_FREE);
    if (!p->cli) {
        close(fd);
        pipe_fail(p, CLOSE_UNEXPECTED, "out of memory");
        return;
    }
    tg_bev_bulk_read(p->cli);
    const char *target = tg_gw_adb_target_is_local(a->target, info->node) ? tg_gw_adb_target_describe(a->target)
                                                                          : info->node;
    tg_info(LOG, "/adb%s%s for %s (%s) to %s", info->node[0] ? "/" : "", info->node, info->peer, info->principal,
            target);
    if (a->n_pipes > a->max_pipes) {
        char why[96];
        snprintf(why, sizeof why, "too many /adb connections (at most %u)", a->max_pipes);
        tg_warn(LOG, "/adb for %s (%s): %s", info->peer, info->principal, why);
        pipe_fail(p, CLOSE_UNEXPECTED, why);
        return;
    }
    char err[TG_WS_CLOSE_REASON_MAX + 1];
    int sfd = tg_gw_adb_target_open(a->target, info->node, info, err, sizeof err);
    if (sfd < 0) {
        tg_warn(LOG, "/adb for %s (%s): %s", info->peer, info->principal, err);
        pipe_fail(p, CLOSE_UNEXPECTED, err);
        return;
    }
    p->srv = bufferevent_socket_new(a->base, sfd, BEV_OPT_CLOSE_ON_FREE);
    if (p->srv)
        tg_bev_bulk_read(p->srv);
    if (!p->srv) {
        close(sfd);
        pipe_fail(p, CLOSE_UNEXPECTED, "out of memory");
        return;
    }
    bufferevent_setcb(p->cli, on_read, on_write, on_event, p);
    bufferevent_setcb(p->srv, on_read, on_write, on_event, p);
    bufferevent_setwatermark(p->cli, EV_WRITE, a->low, 0);
    bufferevent_setwatermark(p->srv, EV_WRITE, a->low, 0);
    /* the socket may still be connecting: the first writability says how it went */
    if (bufferevent_socket_connect(p->srv, NULL, 0) != 0) {
        char why[TG_WS_CLOSE_REASON_MAX + 1];
        snprintf(why, sizeof why, "ADB server %.60s not reachable: %s", tg_gw_adb_target_describe(a->target),
                 strerror(errno));
        pipe_fail(p, CLOSE_UNEXPECTED, why);
        return;
    }
    bufferevent_enable(p->srv, EV_READ | EV_WRITE);
    bufferevent_enable(p->cli, EV_READ | EV_WRITE);
}

/* ------------------------------------------------------------ lifecycle */

struct tg_gw_adb *tg_gw_adb_new(struct event_base *base, const struct tg_gw_adb_config *cfg)
{
    struct tg_gw_adb *a = calloc(1, sizeof *a);
    if (!a)
        return NULL;
    a->base = base;
    a->high = cfg->high ? cfg->high : TG_GW_ADB_HIGH;
    a->low = cfg->low ? cfg->low : TG_GW_ADB_LOW;
    if (a->low > a->high)
        a->low = a->high;
    a->max_pipes = cfg->max_pipes ? cfg->max_pipes : TG_GW_ADB_MAX_PIPES;
    a->target = tg_gw_adb_target_new(cfg->server, cfg->server_text, cfg->node_name);
    if (!a->target) {
        free(a);
        return NULL;
    }
    return a;
}

void tg_gw_adb_free(struct tg_gw_adb *a)
{
    if (!a)
        return;
    while (a->pipes)
        pipe_fail(a->pipes, CLOSE_GOING_AWAY, "the gateway is shutting down");
    tg_gw_adb_target_free(a->target);
    free(a);
}

struct tg_gw_adb_target *tg_gw_adb_target_of(struct tg_gw_adb *a) { return a->target; }

void tg_gw_adb_stats(struct tg_gw_adb *a, struct tg_gw_adb_stats *out)
{
    memset(out, 0, sizeof *out);
    out->pipes = atomic_load(&a->pipes_now);
    out->pipes_total = atomic_load(&a->pipes_total);
    out->failed_total = atomic_load(&a->failed_total);
    out->bytes_to_adb = atomic_load(&a->bytes[TO_ADB]);
    out->bytes_to_client = atomic_load(&a->bytes[TO_CLIENT]);
    out->paused_to_adb = atomic_load(&a->paused[TO_ADB]);
    out->paused_to_client = atomic_load(&a->paused[TO_CLIENT]);
    out->buffered = atomic_load(&a->buffered);
    out->buffered_max = atomic_load(&a->buffered_max);
}

char *tg_gw_adb_metrics_text(struct tg_gw_adb *a)
{
    struct tg_gw_adb_stats s;
    tg_gw_adb_stats(a, &s);
    char *t = NULL;
    int n = asprintf(&t,
                     "# HELP tracegated_adb_connections /adb WebSockets piped to an ADB server now.\n"
                     "# TYPE tracegated_adb_connections gauge\n"
                     "tracegated_adb_connections %llu\n"
                     "# HELP tracegated_adb_connections_total /adb WebSockets accepted.\n"
                     "# TYPE tracegated_adb_connections_total counter\n"
                     "tracegated_adb_connections_total %llu\n"
                     "# HELP tracegated_adb_failures_total /adb WebSockets closed because the ADB server (or node) "
                     "was not reachable or too many were open.\n"
                     "# TYPE tracegated_adb_failures_total counter\n"
                     "tracegated_adb_failures_total %llu\n"
                     "# HELP tracegated_adb_bytes_total Bytes piped between /adb clients and ADB servers.\n"
                     "# TYPE tracegated_adb_bytes_total counter\n"
                     "tracegated_adb_bytes_total{direction=\"to_adb\"} %llu\n"
                     "tracegated_adb_bytes_total{direction=\"to_client\"} %llu\n"
                     "# HELP tracegated_adb_paused_total Times one side of an /adb pipe was paused because the "
                     "other did not keep up.\n"
                     "# TYPE tracegated_adb_paused_total counter\n"
                     "tracegated_adb_paused_total{direction=\"to_adb\"} %llu\n"
                     "tracegated_adb_paused_total{direction=\"to_client\"} %llu\n"
                     "# HELP tracegated_adb_buffered_bytes Bytes the gateway holds for /adb pipes now.\n"
                     "# TYPE tracegated_adb_buffered_bytes gauge\n"
                     "tracegated_adb_buffered_bytes %llu\n"
                     "# HELP tracegated_adb_buffered_bytes_max The most bytes one /adb pipe has held at once.\n"
                     "# TYPE tracegated_adb_buffered_bytes_max gauge\n"
                     "tracegated_adb_buffered_bytes_max %llu\n",
                     (unsigned long long)s.pipes, (unsigned long long)s.pipes_total,
                     (unsigned long long)s.failed_total, (unsigned long long)s.bytes_to_adb,
                     (unsigned long long)s.bytes_to_client, (unsigned long long)s.paused_to_adb,
                     (unsigned long long)s.paused_to_client, (unsigned long long)s.buffered,
                     (unsigned long long)s.buffered_max);
    return n < 0 ? NULL : t;
}
