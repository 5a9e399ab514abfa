/* tracectl_rpc.h: blocking-style helpers for tracectl: connect to an endpoint,
 * bind ConsumerPort and run one call to completion on a private event loop;
 * reconnect and resume the session through a tracegate gateway.
 * Single-threaded; one tc_rpc per connection (and its resumed successors). */
#ifndef TRACEGATE_TRACECTL_RPC_H
#define TRACEGATE_TRACECTL_RPC_H

#include <stddef.h>
#include <stdint.h>

#include "tracegate/endpoint.h"
#include "tracegate/ipc_client.h"

struct event_base;

/* Global options shared by every tracectl command. */
struct tc_opts {
    const char *endpoint;
    struct tg_endpoint_creds creds;
    int timeout_ms; /* connect + bind timeout */
    const char *node; /* --node NAME: ask the gateway to route to that node (TracegateFleet.Route) */
    int endpoint_defaulted; /* no URL was given: endpoint is the local consumer socket */
    const char *default_endpoint; /* what endpoint is when no URL is given (the local consumer
                                   * socket, or TC_DEFAULT_GATEWAY with --node); the dispatcher's
                                   * storage, valid for the command's run */
};
/* The endpoint for commands that need a tracegate gateway (--node, --nodes, --all, nodes) when no
 * URL was given: the local gateway's WebSocket port (the service's own socket has no fleet). */
#define TC_DEFAULT_GATEWAY "ws://127.0.0.1:8037/traced"

struct tc_async;

struct tc_rpc {
    struct event_base *base;
    tg_ipc_client *cli;
    tg_ipc_service_proxy *port;
    int disconnected;
    int bind_done;
    char error[512];

    /* ---- session survival through a tracegate gateway (tc_rpc_arm_resume) ---- */
    struct tc_opts opts;            /* to reconnect */
    int resume_armed;               /* a drop is followed by reconnect + TracegateSession.Resume */
    char resume_token[80];          /* secret: never printed */
    char detach_key[96];            /* the key the gateway Detaches with if nobody resumes */
    uint32_t resume_window_ms;
    uint64_t link_id;               /* the gateway's name for our current connection */
    uint64_t disconnected_at_ms;
    unsigned resumes;               /* successful resumes so far */
    int resume_incomplete;          /* the last resume could not re-send everything lost in flight */
    const int *abort_flag;          /* reconnecting stops when *abort_flag becomes nonzero */
    /* Called once a Resume succeeded, before the replies the gateway replays are delivered:
     * re-issue what may have been lost on the way to the gateway. */
    void (*on_resumed)(void *arg);
    void *resumed_arg;
    /* internal */
    tg_ipc_service_proxy *session;
    int resuming, sbind_done, resume_done, resume_ok;
    int test_silent_fd; /* tc_rpc_test_drop(silent): the socket kept open (-1 = none) */
    struct tc_async *cur_call;
    const char *cur_method;
    const uint8_t *cur_args;
    size_t cur_args_len;
};

/* Connects and binds `service` ("ConsumerPort"). Returns 0 or -1 (error in rpc->error). */
int tc_rpc_open(struct tc_rpc *rpc, const struct tc_opts *opts, const char *service);
void tc_rpc_close(struct tc_rpc *rpc);

/* Called for every reply part; return nonzero to stop waiting early. */
typedef int (*tc_part_fn)(void *arg, const uint8_t *reply, size_t len, int has_more);

/* The most reply bytes tc_rpc_call takes for one call, over all its parts: a server that streams
 * has_more parts without end is cut there instead of growing tracectl's memory until the
 * deadline. Far above any real answer (a QueryServiceState of a large device is a few MiB). */
#define TC_RPC_MAX_REPLY (32u << 20)

/* Invokes `method` and runs the loop until the final reply (or stop). Returns
 * 0 on success=true replies, -1 on reject/disconnect or a reply over TC_RPC_MAX_REPLY
 * (message in rpc->error). timeout_ms 0 waits forever. */
int tc_rpc_call(struct tc_rpc *rpc, const char *method, const uint8_t *args, size_t args_len, int fd,
                tc_part_fn fn, void *arg, int timeout_ms);

/* Starts a call without waiting; parts go to fn. Returns 0/-1. tc_rpc_pump
 * runs the loop until *flag becomes nonzero or timeout (a dropped connection
 * is resumed first when resume is armed). */
struct tc_async {
    tc_part_fn fn;
    void *arg;
    int done, ok;
    uint64_t request_id;
    unsigned parts; /* reply parts received */
    uint64_t bytes;     /* reply bytes received */
    uint64_t max_bytes; /* 0: no limit; past it the call ends, failed, with too_big */
    int too_big;
};
int tc_rpc_start(struct tc_rpc *rpc, const char *method, const uint8_t *args, size_t args_len, int fd,
                 struct tc_async *a);
void tc_rpc_pump(struct tc_rpc *rpc, const int *flag, int timeout_ms);

/* ---- session survival (a tracegate gateway's TracegateSession service) ----
 * tc_rpc_arm_resume asks the endpoint for a resume token. It returns 0 when
 * armed, -1 when the endpoint does not offer it (a plain traced, resume turned
 * off: not an error; rpc->error stays empty). Once armed, a dropped connection
 * keeps the pending calls; tc_rpc_recover reconnects with backoff for up to
 * the gateway's window, binds TracegateSession on the new connection and
 * calls Resume{token, frames_received}: the upstream keeps its ConsumerPort
 * binding, so the old service id and request ids stay valid and the replies
 * that were in flight or arrived meanwhile are delivered (re-sent and
 * replayed by the gateway). A tc_rpc_call waiting at the time that had no
 * reply yet is sent again (tc_rpc_call is only used for calls that are safe to
 * repeat). Returns 0 (connected again, or never disconnected) or -1 (lost for
 * good; rpc->error says why). */
int tc_rpc_arm_resume(struct tc_rpc *rpc);
int tc_rpc_recover(struct tc_rpc *rpc);
/* Test only (tracectl record --test-drop-*): shuts the connection's socket
 * down as a network failure would, without closing tracectl. silent: the
 * socket stays open (a duplicate is kept) so the peer sees nothing, as with a
 * network path that died without a reset; tracectl just stops using it. */
void tc_rpc_test_drop(struct tc_rpc *rpc, int silent);

#endif
