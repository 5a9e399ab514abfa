/* tracectl_rpc.c: connect/bind/call helpers that drive a private libevent loop for tracectl. */
#include "tracectl_rpc.h"

#include <event2/event.h>
#include <stdio.h>
#include <string.h>

static void on_disconnect(tg_ipc_client *cli, const char *reason, void *arg)
{
    struct tc_rpc *rpc = arg;
    (void)cli;
    rpc->disconnected = 1;
    if (!rpc->error[0])
        snprintf(rpc->error, sizeof rpc->error, "connection closed: %s", reason);
}

static void on_bound(tg_ipc_client *cli, tg_ipc_service_proxy *proxy, void *arg)
{
    struct tc_rpc *rpc = arg;
    (void)cli;
    rpc->port = proxy;
    rpc->bind_done = 1;
    if (!proxy && !rpc->error[0])
        snprintf(rpc->error, sizeof rpc->error, "the endpoint does not offer the requested service");
    rpc->disconnected |= !proxy;
}

static void timeout_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    *(int *)arg = 1;
}

void tc_rpc_pump(struct tc_rpc *rpc, const int *flag, int timeout_ms)
{
    int timed_out = 0;
    struct event *t = NULL;
    if (timeout_ms > 0) {
        t = evtimer_new(rpc->base, timeout_cb, &timed_out);
        struct timeval tv = {timeout_ms / 1000, (timeout_ms % 1000) * 1000};
        evtimer_add(t, &tv);
    }
    while (!*flag && !rpc->disconnected && !timed_out)
        event_base_loop(rpc->base, EVLOOP_ONCE);
    if (t)
        event_free(t);
    if (timed_out && !*flag && !rpc->error[0])
        snprintf(rpc->error, sizeof rpc->error, "timed out after %d ms", timeout_ms);
}

int tc_rpc_open(struct tc_rpc *rpc, const struct tc_opts *opts, const char *service)
{
    memset(rpc, 0, sizeof *rpc);
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
}

static void on_reply(tg_ipc_client *cli, int success, int has_more, const uint8_t *reply, size_t len, void *arg)
{
    struct tc_async *a = arg;
    (void)cli;
    if (!success) {
        a->done = 1;
        a->ok = 0;
        return;
    }
    int stop = a->fn ? a->fn(a->arg, reply, len, has_more) : 0;
    if (!has_more || stop) {
        a->done = 1;
        a->ok = 1;
    }
}

int tc_rpc_start(struct tc_rpc *rpc, const char *method, const uint8_t *args, size_t args_len, int fd,
                 struct tc_async *a)
{
    a->done = 0;
    a->ok = 0;
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
    struct tc_async a = {.fn = fn, .arg = arg};
    if (tc_rpc_start(rpc, method, args, args_len, fd, &a) != 0)
        return -1;
    tc_rpc_pump(rpc, &a.done, timeout_ms);
    if (!a.done) {
        tg_ipc_client_cancel(rpc->cli, a.request_id);
        return -1;
    }
    if (!a.ok) {
        if (!rpc->error[0] || !rpc->disconnected)
            snprintf(rpc->error, sizeof rpc->error, "%s was rejected by the service", method);
        return -1;
    }
    return 0;
}
