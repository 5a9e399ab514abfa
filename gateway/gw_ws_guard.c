/* gw_ws_guard.c: limits that hold before anyone is authenticated on the HTTP/WebSocket port: how many
 * connections may be still in their HTTP phase (in total and per source address) and the absolute
 * deadline each phase has, enforced from libwebsockets' accept filter and a timer on the lws thread
 * (see gw_ws_pending.h for the bookkeeping and docs/gateway.md "Limits before authentication"). */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "gw_limits.h"
#include "gw_ws_int.h"
#include "tracegate/addr.h"
#include "gw_ws_policy.h"
#include "tracegate/log.h"

#define KILL_REASON (PENDING_TIMEOUT_USER_REASON_BASE + 1)
#define LOG_WINDOW_US 1000000u
#define LOG_PER_WINDOW 5

static uint64_t timeout_us(const struct tg_gw_ws *ws)
{
    return (uint64_t)(ws->cfg.handshake_timeout_ms ? ws->cfg.handshake_timeout_ms : 10000) * 1000u;
}

/* At most LOG_PER_WINDOW refusals/cuts are logged per second; the rest are counted and
 * summarised with the next one logged (metrics count every one). */
static int log_sampled(struct tg_gw_ws *ws, uint64_t now, unsigned *suppressed)
{
    return tg_log_sample(&ws->refusal_log, now, LOG_PER_WINDOW, LOG_WINDOW_US, suppressed);
}

static void sync_count(struct tg_gw_ws *ws) { atomic_store(&ws->pending_count, tg_ws_pending_count(ws->pending)); }

static void on_deadline(lws_sorted_usec_list_t *sul);

/* (Re)schedules the timer for the earliest deadline. Deadlines only ever
 * move later, so firing early is harmless (nothing expires; it re-arms). */
static void schedule(struct tg_gw_ws *ws, uint64_t now)
{
    uint64_t next = tg_ws_pending_next_deadline(ws->pending);
    if (!next) {
        lws_sul_cancel(&ws->pending_sul);
        return;
    }
    lws_sul_schedule(ws->ctx, 0, &ws->pending_sul, on_deadline, (lws_usec_t)(next > now ? next - now : 0));
}

static void on_deadline(lws_sorted_usec_list_t *sul)
{
    struct tg_gw_ws *ws = lws_container_of(sul, struct tg_gw_ws, pending_sul);
    uint64_t now = tg_gw_now_us();
    const void *key;
    enum tg_ws_pending_phase phase;
    char src[64];
    while ((key = tg_ws_pending_pop_expired(ws->pending, now, &phase, src, sizeof src)) != NULL) {
        struct lws *wsi = (struct lws *)key;
        int req = phase == TG_WS_PENDING_REQUEST;
        tg_gw_count_rejected(ws->gw, req ? "http_handshake_timeout" : "http_response_stalled");
        unsigned sup;
        if (log_sampled(ws, now, &sup))
            tg_info(TG_WS_LOG, "closed an HTTP connection from %s: %s within %u ms (handshake-timeout)%s%.0u%s", src,
                    req ? "no complete request or WebSocket upgrade" : "the response made no progress",
                    (unsigned)(timeout_us(ws) / 1000), sup ? " (" : "", sup,
                    sup ? " similar messages not logged)" : "");
        lws_set_timeout(wsi, KILL_REASON, LWS_TO_KILL_ASYNC);
    }
    sync_count(ws);
    schedule(ws, now);
}

int tg_gw_ws_guard_init(struct tg_gw_ws *ws)
{
    struct tg_ws_pending_limits l = {
        .max_total = ws->cfg.max_pending,
        .max_per_source = ws->cfg.max_pending_per_source,
        .timeout_us = timeout_us(ws),
    };
    ws->admitted_fd = -1;
    ws->pending = tg_ws_pending_new(&l);
    return ws->pending ? 0 : -1;
}

void tg_gw_ws_guard_stop(struct tg_gw_ws *ws)
{
    if (ws->ctx)
        lws_sul_cancel(&ws->pending_sul);
}

int tg_gw_ws_guard_accept(struct tg_gw_ws *ws, const struct lws_filter_network_conn_args *a)
{
    ws->admitted_fd = -1;
    if (!a)
        return 0;
    char ip[64]; /* a source key: an address, or an IPv6 network "2001:db8::/64" */
    tg_gw_source_key(&a->cli_addr, ws->cfg.source_prefix6, ip, sizeof ip);
    int loopback = tg_sockaddr_is_loopback(&a->cli_addr);
    enum tg_ws_admit v = tg_ws_pending_check(ws->pending, ip, loopback);
    if (v != TG_WS_ADMIT_OK) {
        tg_gw_count_rejected(ws->gw, v == TG_WS_ADMIT_TOTAL ? "http_max_pending" : "http_max_pending_per_source");
        unsigned sup;
        if (log_sampled(ws, tg_gw_now_us(), &sup))
            tg_warn(TG_WS_LOG, "refused an HTTP connection from %s: %s%s%.0u%s", ip,
                    v == TG_WS_ADMIT_TOTAL ? "too many connections still in their HTTP request (http-max-pending)"
                                           : "too many connections from this address still in their HTTP request "
                                             "(http-max-pending-per-source)",
                    sup ? " (" : "", sup, sup ? " similar messages not logged)" : "");
        return -1;
    }
    ws->admitted_fd = (int)a->accept_fd;
    snprintf(ws->admitted_source, sizeof ws->admitted_source, "%s", ip);
    ws->admitted_loopback = loopback;
    return 0;
}

void tg_gw_ws_guard_accept_failed(struct tg_gw_ws *ws, unsigned n)
{
    for (unsigned i = 0; i < n; i++)
        tg_gw_count_rejected(ws->gw, "accept_failed");
    uint64_t now = tg_gw_now_us();
    if (!ws->accept_failed_log_us || now - ws->accept_failed_log_us > 5000000u) {
        tg_warn(TG_WS_LOG, "cannot accept an HTTP connection: out of file descriptors (or memory); pausing the "
                           "HTTP/WebSocket thread for %d ms at each failure",
                TG_WS_ACCEPT_PAUSE_MS);
        ws->accept_failed_log_us = now;
    }
    usleep(TG_WS_ACCEPT_PAUSE_MS * 1000);
}

void tg_gw_ws_guard_new_wsi(struct tg_gw_ws *ws, struct lws *wsi)
{
    /* only connections the filter just admitted (not adopted socketpairs) */
    if (ws->admitted_fd < 0 || lws_get_socket_fd(wsi) != ws->admitted_fd)
        return;
    ws->admitted_fd = -1;
    uint64_t now = tg_gw_now_us();
    int was_empty = tg_ws_pending_count(ws->pending) == 0;
    int rc = tg_ws_pending_add(ws->pending, wsi, ws->admitted_source, ws->admitted_loopback, now);
    if (rc != TG_WS_ADMIT_OK) {
        tg_warn(TG_WS_LOG, "refused an HTTP connection from %s: out of memory", ws->admitted_source);
        lws_set_timeout(wsi, KILL_REASON, LWS_TO_KILL_ASYNC);
        return;
    }
    sync_count(ws);
    if (was_empty)
        schedule(ws, now);
}

void tg_gw_ws_guard_phase(struct tg_gw_ws *ws, struct lws *wsi, enum tg_ws_pending_phase phase)
{
    if (wsi)
        tg_ws_pending_rearm(ws->pending, wsi, phase, tg_gw_now_us());
}

void tg_gw_ws_guard_forget(struct tg_gw_ws *ws, struct lws *wsi)
{
    if (ws->pending && tg_ws_pending_remove(ws->pending, wsi))
        sync_count(ws); /* the timer fires early at worst and re-arms */
}

int tg_gw_ws_http_done(struct tg_gw_ws *ws, struct lws *wsi)
{
    int rc = lws_http_transaction_completed(wsi);
    if (rc == 0)
        tg_gw_ws_guard_phase(ws, wsi, TG_WS_PENDING_REQUEST); /* kept alive: the next request has a deadline */
    return rc;
}

size_t tg_gw_ws_http_pending(struct tg_gw_ws *ws) { return ws ? atomic_load(&ws->pending_count) : 0; }
