/* tracectl_rpc.c: connect/bind/call helpers that drive a private libevent loop for tracectl, and
 * session survival: reconnect and TracegateSession.Resume through a tracegate gateway. */
#include "tracectl_rpc.h"
#include "tracegate/clock.h"

#include <event2/event.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "net/endpoint_transport.h"
#include "tracegate/log.h"
#include "tracegate_gateway.pb-c.h"

#define LOG "tracectl"
#define RESUME_SERVICE "TracegateSession"
#define BACKOFF_FIRST_MS 100
#define BACKOFF_MAX_MS 2000

static void on_disconnect(tg_ipc_client *cli, const char *reason, void *arg)
{
    struct tc_rpc *rpc = arg;
    (void)cli;
    rpc->disconnected = 1;
    rpc->disconnected_at_ms = tg_mono_ms();
    if (!rpc->error[0])
        snprintf(rpc->error, sizeof rpc->error, "connection closed: %s", reason);
}

static void on_bound(tg_ipc_client *cli, tg_ipc_service_proxy *proxy, void *arg)
{
    struct tc_rpc *rpc = arg;
    rpc->port = proxy;
    rpc->bind_done = 1;
    /* a bind that failed because the connection did is explained by on_disconnect, next */
    if (!proxy && !rpc->error[0] && tg_ipc_client_connected(cli))
        snprintf(rpc->error, sizeof rpc->error, "the endpoint does not offer the requested service");
    rpc->disconnected |= !proxy;
}

static void timeout_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    *(int *)arg = 1;
}

/* Runs the loop until *flag or the timeout. On a disconnect: with `recover`, resume the session
 * (tc_rpc_recover) and go on; without, stop (as on an abort request). */
static void pump(struct tc_rpc *rpc, const int *flag, int timeout_ms, int recover)
{
    int timed_out = 0;
    struct event *t = NULL;
    if (timeout_ms > 0) {
        t = evtimer_new(rpc->base, timeout_cb, &timed_out);
        struct timeval tv = {timeout_ms / 1000, (timeout_ms % 1000) * 1000};
        evtimer_add(t, &tv);
    }
    while (!*flag && !timed_out) {
        if (rpc->disconnected) {
            if (!recover || tc_rpc_recover(rpc) != 0)
                break;
            continue;
        }
        if (!recover && rpc->abort_flag && *rpc->abort_flag)
            break;
        event_base_loop(rpc->base, EVLOOP_ONCE);
    }
    if (t)
        event_free(t);
    if (timed_out && !*flag && !rpc->error[0])
        snprintf(rpc->error, sizeof rpc->error, "timed out after %d ms", timeout_ms);
}

/* No resume: used while connecting, authenticating and resuming. */
static void pump_raw(struct tc_rpc *rpc, const int *flag, int timeout_ms) { pump(rpc, flag, timeout_ms, 0); }

void tc_rpc_pump(struct tc_rpc *rpc, const int *flag, int timeout_ms) { pump(rpc, flag, timeout_ms, 1); }

/* ================================================================ in-band auth */

struct auth_wait {
    int done, ok;
    tg_ipc_service_proxy *proxy;
};

static void on_auth_bound(tg_ipc_client *cli, tg_ipc_service_proxy *proxy, void *arg)
{
    struct auth_wait *w = arg;
    (void)cli;
    w->proxy = proxy;
    w->done = 1;
}

static void on_auth_reply(tg_ipc_client *cli, int success, int has_more, const uint8_t *reply, size_t len,
                          void *arg)
{
    struct auth_wait *w = arg;
    (void)cli;
    (void)has_more;
    (void)reply;
    (void)len;
    w->ok = success;
    w->done = 1;
}

/* Raw TCP/TLS (and UNIX) clients present a bearer token in-band: bind TracegateAuth and call
 * Authenticate before anything else (WebSockets carry it in the handshake instead). An endpoint
 * without TracegateAuth (a plain traced) needs no token: that is not an error. */
static int in_band_auth(struct tc_rpc *rpc, const struct tg_endpoint *ep, char *why, size_t whylen)
{
    const char *token = rpc->opts.creds.token;
    if (!token || !*token || ep->kind == TG_EP_WS || ep->kind == TG_EP_WSS)
        return 0;
    int timeout = rpc->opts.timeout_ms > 0 ? rpc->opts.timeout_ms : 10000;
    struct auth_wait w = {0, 0, NULL};
    if (tg_ipc_client_bind(rpc->cli, "TracegateAuth", on_auth_bound, &w) != 0) {
        snprintf(why, whylen, "cannot send BindService");
        return -1;
    }
    pump_raw(rpc, &w.done, timeout);
    if (!w.done) {
        snprintf(why, whylen, "no answer while authenticating");
        return -1;
    }
    if (!w.proxy)
        return 0;
    Tracegate__AuthenticateRequest req = TRACEGATE__AUTHENTICATE_REQUEST__INIT;
    req.token = (char *)token;
    w.done = 0;
    if (tg_ipc_client_invoke(rpc->cli, w.proxy, "Authenticate", &req.base, -1, on_auth_reply, &w) == 0) {
        snprintf(why, whylen, "cannot send Authenticate");
        return -1;
    }
    pump_raw(rpc, &w.done, timeout);
    if (!w.done || !w.ok) {
        snprintf(why, whylen, "authentication failed: the gateway refused the token");
        return -1;
    }
    return 0;
}

/* --node NAME: the gateway routes this connection to node NAME (before any Perfetto call). */
static int route_to_node(struct tc_rpc *rpc, const char *node, char *why, size_t whylen)
{
    int timeout = rpc->opts.timeout_ms > 0 ? rpc->opts.timeout_ms : 10000;
    struct auth_wait w = {0, 0, NULL};
    if (tg_ipc_client_bind(rpc->cli, "TracegateFleet", on_auth_bound, &w) != 0) {
        snprintf(why, whylen, "cannot send BindService");
        return -1;
    }
    pump_raw(rpc, &w.done, timeout);
    if (!w.done || !w.proxy) {
        snprintf(why, whylen, "--node needs a tracegate gateway (%s has no TracegateFleet)", rpc->opts.endpoint);
        return -1;
    }
    Tracegate__RouteRequest req = TRACEGATE__ROUTE_REQUEST__INIT;
    req.node = (char *)node;
    w.done = 0;
    if (tg_ipc_client_invoke(rpc->cli, w.proxy, "Route", &req.base, -1, on_auth_reply, &w) == 0) {
        snprintf(why, whylen, "cannot send Route");
        return -1;
    }
    pump_raw(rpc, &w.done, timeout);
    if (!w.done || !w.ok) {
        snprintf(why, whylen, "the gateway has no route to node %s (see `tracectl nodes`)", node);
        return -1;
    }
    return 0;
}

int tc_rpc_open(struct tc_rpc *rpc, const struct tc_opts *opts, const char *service)
{
    memset(rpc, 0, sizeof *rpc);
    rpc->opts = *opts;
    rpc->test_silent_fd = -1;
    rpc->base = event_base_new();
    if (!rpc->base) {
        snprintf(rpc->error, sizeof rpc->error, "cannot create event loop");
        return -1;
    }
    struct tg_endpoint ep;
    if (tg_endpoint_parse(opts->endpoint, &ep, rpc->error, sizeof rpc->error) != 0)
        return -1;
    struct tg_ipc_client_cbs cbs = {.on_disconnect = on_disconnect};
    rpc->cli = tg_endpoint_connect(rpc->base, &ep, &opts->creds, &cbs, rpc, rpc->error, sizeof rpc->error);
    if (!rpc->cli)
        return -1;
    if (in_band_auth(rpc, &ep, rpc->error, sizeof rpc->error) != 0)
        return -1;
    if (opts->node && opts->node[0] && route_to_node(rpc, opts->node, rpc->error, sizeof rpc->error) != 0)
        return -1;
    if (tg_ipc_client_bind(rpc->cli, service, on_bound, rpc) != 0) {
        snprintf(rpc->error, sizeof rpc->error, "cannot send BindService");
        return -1;
    }
    tc_rpc_pump(rpc, &rpc->bind_done, opts->timeout_ms > 0 ? opts->timeout_ms : 10000);
    return rpc->port ? 0 : -1;
}

void tc_rpc_close(struct tc_rpc *rpc)
{
    if (rpc->cli) {
        tg_ipc_client_free(rpc->cli);
        rpc->cli = NULL;
        /* let the deferred close run so nothing leaks */
        if (rpc->base)
            event_base_loop(rpc->base, EVLOOP_NONBLOCK);
    }
    if (rpc->base) {
        event_base_free(rpc->base);
        rpc->base = NULL;
    }
    memset(rpc->resume_token, 0, sizeof rpc->resume_token);
    if (rpc->test_silent_fd >= 0)
        close(rpc->test_silent_fd);
    rpc->test_silent_fd = -1;
}

/* A call ends here when the last part came, or earlier: rejected, over its byte limit, or its
 * part function said stop. Ended early while the server says more is coming, it is cancelled, so
 * the IPC client forgets it: its later parts must not reach `a`, which its caller may have
 * reused or left (a tc_rpc_call's is on the stack). */
static void on_reply(tg_ipc_client *cli, int success, int has_more, const uint8_t *reply, size_t len, void *arg)
{
    struct tc_async *a = arg;
    if (!success) {
        a->done = 1;
        a->ok = 0;
    } else {
        a->parts++;
        a->bytes += len;
        if (a->max_bytes && a->bytes > a->max_bytes) {
            a->too_big = 1;
            a->done = 1;
            a->ok = 0;
        } else {
            int stop = a->fn ? a->fn(a->arg, reply, len, has_more) : 0;
            if (!has_more || stop) {
                a->done = 1;
                a->ok = 1;
            }
        }
    }
    if (a->done && has_more)
        tg_ipc_client_cancel(cli, a->request_id);
}

int tc_rpc_start(struct tc_rpc *rpc, const char *method, const uint8_t *args, size_t args_len, int fd,
                 struct tc_async *a)
{
    a->done = 0;
    a->ok = 0;
    a->parts = 0;
    a->bytes = 0;
    a->too_big = 0;
    a->request_id = tg_ipc_client_invoke_bytes(rpc->cli, rpc->port, method, args, args_len, fd, on_reply, a);
    if (a->request_id == 0) {
        snprintf(rpc->error, sizeof rpc->error, "cannot invoke %s (not offered by the service?)", method);
        return -1;
    }
    return 0;
}

int tc_rpc_call(struct tc_rpc *rpc, const char *method, const uint8_t *args, size_t args_len, int fd,
                tc_part_fn fn, void *arg, int timeout_ms)
{
    struct tc_async a = {.fn = fn, .arg = arg, .max_bytes = TC_RPC_MAX_REPLY};
    if (tc_rpc_start(rpc, method, args, args_len, fd, &a) != 0)
        return -1;
    /* a resume while waiting sends it again if nothing came back (see tc_rpc_recover) */
    struct tc_async *prev = rpc->cur_call;
    const char *pm = rpc->cur_method;
    const uint8_t *pa = rpc->cur_args;
    size_t pl = rpc->cur_args_len;
    if (fd < 0) {
        rpc->cur_call = &a;
        rpc->cur_method = method;
        rpc->cur_args = args;
        rpc->cur_args_len = args_len;
    }
    tc_rpc_pump(rpc, &a.done, timeout_ms);
    rpc->cur_call = prev;
    rpc->cur_method = pm;
    rpc->cur_args = pa;
    rpc->cur_args_len = pl;
    if (!a.done) {
        tg_ipc_client_cancel(rpc->cli, a.request_id);
        return -1;
    }
    if (a.too_big) {
        tg_ipc_client_cancel(rpc->cli, a.request_id);
        snprintf(rpc->error, sizeof rpc->error, "the reply to %s passed %u MiB: stopped reading it", method,
                 TC_RPC_MAX_REPLY >> 20);
        return -1;
    }
    if (!a.ok) {
        if (!rpc->error[0] || !rpc->disconnected)
            snprintf(rpc->error, sizeof rpc->error, "%s was rejected by the service", method);
        return -1;
    }
    return 0;
}

/* ================================================================ session survival */

static void on_session_bound(tg_ipc_client *cli, tg_ipc_service_proxy *proxy, void *arg)
{
    struct tc_rpc *rpc = arg;
    (void)cli;
    rpc->session = proxy;
    rpc->sbind_done = 1;
}

/* Binds TracegateSession on the current connection. 1 bound, 0 not offered, -1 connection
 * trouble (dropped or no answer). */
static int bind_session(struct tc_rpc *rpc)
{
    rpc->session = NULL;
    rpc->sbind_done = 0;
    if (tg_ipc_client_bind(rpc->cli, RESUME_SERVICE, on_session_bound, rpc) != 0)
        return -1;
    pump_raw(rpc, &rpc->sbind_done, rpc->opts.timeout_ms > 0 ? rpc->opts.timeout_ms : 10000);
    if (!rpc->sbind_done)
        return -1;
    return rpc->session ? 1 : 0;
}

struct token_reply {
    int done, ok;
    struct tc_rpc *rpc;
};

static void on_token(tg_ipc_client *cli, int success, int has_more, const uint8_t *reply, size_t len, void *arg)
{
    struct token_reply *tr = arg;
    (void)cli;
    (void)has_more;
    tr->done = 1;
    if (!success)
        return;
    Tracegate__GetResumeTokenResponse *r = tracegate__get_resume_token_response__unpack(NULL, len, reply);
    if (!r)
        return;
    if (r->token && r->token[0] && strlen(r->token) < sizeof tr->rpc->resume_token) {
        snprintf(tr->rpc->resume_token, sizeof tr->rpc->resume_token, "%s", r->token);
        tr->rpc->resume_window_ms = r->has_window_ms ? r->window_ms : 0;
        tr->rpc->link_id = r->link_id;
        snprintf(tr->rpc->detach_key, sizeof tr->rpc->detach_key, "%s",
                 r->detach_key && strlen(r->detach_key) < sizeof tr->rpc->detach_key ? r->detach_key : "");
        tr->ok = tr->rpc->resume_window_ms > 0;
        memset(r->token, 0, strlen(r->token));
    }
    tracegate__get_resume_token_response__free_unpacked(r, NULL);
}

int tc_rpc_arm_resume(struct tc_rpc *rpc)
{
    if (!rpc->cli || rpc->disconnected)
        return -1;
    int b = bind_session(rpc);
    if (b <= 0) {
        if (!rpc->disconnected)
            rpc->error[0] = 0;
        tg_debug(LOG, "the endpoint does not offer %s: no session resume", RESUME_SERVICE);
        return -1;
    }
    struct token_reply tr = {0, 0, rpc};
    uint64_t rid = tg_ipc_client_invoke_bytes(rpc->cli, rpc->session, "GetResumeToken", NULL, 0, -1, on_token, &tr);
    if (!rid)
        return -1;
    pump_raw(rpc, &tr.done, rpc->opts.timeout_ms > 0 ? rpc->opts.timeout_ms : 10000);
    if (!tr.done) {
        tg_ipc_client_cancel(rpc->cli, rid);
        if (!rpc->disconnected)
            rpc->error[0] = 0;
        return -1;
    }
    if (!tr.ok) {
        tg_debug(LOG, "GetResumeToken refused: no session resume");
        return -1;
    }
    rpc->resume_armed = 1;
    tg_ipc_client_keep_pending(rpc->cli, 1);
    tg_debug(LOG, "session resume armed (window %u ms)", rpc->resume_window_ms);
    return 0;
}

static void resumed(struct tc_rpc *rpc)
{
    rpc->resumes++;
    /* a tc_rpc_call that saw no reply: its request may never have reached the gateway */
    struct tc_async *a = rpc->cur_call;
    if (a && !a->done && a->parts == 0) {
        tg_ipc_client_cancel(rpc->cli, a->request_id);
        uint64_t rid = tg_ipc_client_invoke_bytes(rpc->cli, rpc->port, rpc->cur_method, rpc->cur_args,
                                                  rpc->cur_args_len, -1, on_reply, a);
        if (rid)
            a->request_id = rid;
        else
            a->done = 1; /* ok = 0: failed */
    }
    if (rpc->on_resumed)
        rpc->on_resumed(rpc->resumed_arg);
}

static void on_resume_reply(tg_ipc_client *cli, int success, int has_more, const uint8_t *reply, size_t len,
                            void *arg)
{
    struct tc_rpc *rpc = arg;
    (void)cli;
    (void)has_more;
    rpc->resume_done = 1;
    rpc->resume_ok = 0;
    if (!success)
        return;
    Tracegate__ResumeResponse *r = tracegate__resume_response__unpack(NULL, len, reply);
    if (!r)
        return;
    rpc->resume_ok = r->has_ok && r->ok;
    rpc->resume_incomplete = r->has_incomplete && r->incomplete;
    if (rpc->resume_ok)
        rpc->link_id = r->link_id;
    tracegate__resume_response__free_unpacked(r, NULL);
    /* right now, before the replayed replies that follow on this connection are dispatched */
    if (rpc->resume_ok)
        resumed(rpc);
}

/* Drops the current connection (keeping the pending calls) and waits for the close. */
static void drop_conn(struct tc_rpc *rpc, const char *why)
{
    tg_conn *c = tg_ipc_client_conn(rpc->cli);
    if (c && !rpc->disconnected) {
        tg_conn_close(c, why);
        int never = 0;
        pump_raw(rpc, &never, 2000);
    }
    rpc->disconnected = 1;
}

/* Sleeps ms on the loop (signals and timers still run). */
static void nap(struct tc_rpc *rpc, int ms)
{
    int done = 0;
    struct event *t = evtimer_new(rpc->base, timeout_cb, &done);
    if (!t)
        return;
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    evtimer_add(t, &tv);
    while (!done && !(rpc->abort_flag && *rpc->abort_flag))
        event_base_loop(rpc->base, EVLOOP_ONCE);
    event_free(t);
}

/* One attempt: 1 resumed, 0 try again, -1 give up (rpc->error set). */
static int resume_attempt(struct tc_rpc *rpc, uint64_t frames, char *why, size_t whylen)
{
    struct tg_endpoint ep;
    if (tg_endpoint_parse(rpc->opts.endpoint, &ep, why, whylen) != 0)
        return -1;
    tg_conn *c = tg_endpoint_open_conn(rpc->base, &ep, &rpc->opts.creds, why, whylen);
    if (!c)
        return 0;
    if (tg_ipc_client_reattach(rpc->cli, c) != 0) {
        snprintf(why, whylen, "cannot reuse the IPC client");
        return -1;
    }
    rpc->disconnected = 0;
    rpc->error[0] = 0;
    if (in_band_auth(rpc, &ep, why, whylen) != 0) {
        drop_conn(rpc, "authentication failed");
        return -1;
    }
    int b = bind_session(rpc);
    if (b < 0) {
        snprintf(why, whylen, "%s", rpc->error[0] ? rpc->error : "no answer to BindService");
        drop_conn(rpc, "resume attempt failed");
        return 0;
    }
    if (b == 0) {
        snprintf(rpc->error, sizeof rpc->error, "the endpoint no longer offers %s", RESUME_SERVICE);
        drop_conn(rpc, "cannot resume");
        return -1;
    }
    Tracegate__ResumeRequest req = TRACEGATE__RESUME_REQUEST__INIT;
    req.token = rpc->resume_token;
    req.has_frames_received = 1;
    req.frames_received = frames;
    req.has_link_id = 1;
    req.link_id = rpc->link_id;
    uint8_t buf[160];
    size_t n = tracegate__resume_request__get_packed_size(&req);
    if (n > sizeof buf)
        return -1;
    tracegate__resume_request__pack(&req, buf);
    rpc->resume_done = 0;
    rpc->resume_ok = 0;
    uint64_t rid = tg_ipc_client_invoke_bytes(rpc->cli, rpc->session, "Resume", buf, n, -1, on_resume_reply, rpc);
    memset(buf, 0, sizeof buf);
    if (!rid) {
        drop_conn(rpc, "resume attempt failed");
        return 0;
    }
    pump_raw(rpc, &rpc->resume_done, rpc->opts.timeout_ms > 0 ? rpc->opts.timeout_ms : 10000);
    if (!rpc->resume_done) {
        tg_ipc_client_cancel(rpc->cli, rid);
        snprintf(why, whylen, "%s", rpc->error[0] ? rpc->error : "no answer to Resume");
        drop_conn(rpc, "resume attempt failed");
        return 0;
    }
    if (!rpc->resume_ok) {
        snprintf(rpc->error, sizeof rpc->error, "the gateway no longer holds the session (the resume window "
                                                "ended, or it restarted)");
        drop_conn(rpc, "cannot resume");
        return -1;
    }
    return 1;
}

int tc_rpc_recover(struct tc_rpc *rpc)
{
    if (!rpc->disconnected)
        return 0;
    if (!rpc->resume_armed || rpc->resuming || !rpc->cli)
        return -1;
    rpc->resuming = 1;
    /* the window runs from the moment the gateway saw the drop: stay a little inside it */
    uint64_t window = rpc->resume_window_ms;
    uint64_t deadline = rpc->disconnected_at_ms + (window > 500 ? window - 250 : window);
    char drop_reason[512];
    snprintf(drop_reason, sizeof drop_reason, "%s", rpc->error[0] ? rpc->error : "connection closed");
    /* frames received on the connection that dropped (the gateway's link_id names it); failed
     * attempts in between do not change it */
    uint64_t frames = tg_ipc_client_frames_received(rpc->cli);
    int delay = BACKOFF_FIRST_MS, rc = -1;
    char why[512] = "";
    for (unsigned attempt = 1;; attempt++) {
        if (rpc->abort_flag && *rpc->abort_flag) {
            snprintf(rpc->error, sizeof rpc->error, "interrupted while reconnecting");
            break;
        }
        int r = resume_attempt(rpc, frames, why, sizeof why);
        if (r == 1) {
            rc = 0;
            break;
        }
        if (r < 0) {
            if (!rpc->error[0])
                snprintf(rpc->error, sizeof rpc->error, "%s", why);
            break;
        }
        tg_debug(LOG, "resume attempt %u failed: %s", attempt, why);
        uint64_t now = tg_mono_ms();
        if (now + (uint64_t)delay >= deadline) {
            snprintf(rpc->error, sizeof rpc->error,
                     "could not reconnect within the %u ms resume window (%.200s; %.200s)", rpc->resume_window_ms,
                     drop_reason, why);
            break;
        }
        nap(rpc, delay);
        delay = delay * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : delay * 2;
    }
    rpc->resuming = 0;
    if (rc != 0) {
        rpc->disconnected = 1;
        rpc->resume_armed = 0;
    }
    return rc;
}

void tc_rpc_test_drop(struct tc_rpc *rpc, int silent)
{
    tg_conn *c = rpc->cli ? tg_ipc_client_conn(rpc->cli) : NULL;
    if (!c)
        return;
    int fd = tg_conn_fd(c);
    if (silent && fd >= 0) {
        rpc->test_silent_fd = dup(fd); /* keeps the socket open: no FIN, no RST */
        tg_conn_close(c, "test drop (silent)");
    } else if (fd >= 0) {
        shutdown(fd, SHUT_RDWR); /* both sides see the stream end, as with a broken network path */
    } else {
        tg_conn_close(c, "test drop");
    }
}
