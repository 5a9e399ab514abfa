/* tracectl_rpc.h: blocking-style helpers for tracectl: connect to an endpoint,
 * bind ConsumerPort and run one call to completion on a private event loop.
 * Single-threaded; one tc_rpc per connection. */
#ifndef TRACEGATE_TRACECTL_RPC_H
#define TRACEGATE_TRACECTL_RPC_H

#include <stddef.h>
#include <stdint.h>

#include "endpoint.h"
#include "tracegate/ipc_client.h"

struct event_base;

struct tc_rpc {
    struct event_base *base;
    tg_ipc_client *cli;
    tg_ipc_service_proxy *port;
    int disconnected;
    int bind_done;
    char error[512];
};

/* Global options shared by every tracectl command. */
struct tc_opts {
    const char *endpoint;
    struct tg_endpoint_creds creds;
    int timeout_ms; /* connect + bind timeout */
};

/* Connects and binds `service` ("ConsumerPort"). Returns 0 or -1 (error in rpc->error). */
int tc_rpc_open(struct tc_rpc *rpc, const struct tc_opts *opts, const char *service);
void tc_rpc_close(struct tc_rpc *rpc);

/* Called for every reply part; return nonzero to stop waiting early. */
typedef int (*tc_part_fn)(void *arg, const uint8_t *reply, size_t len, int has_more);

/* Invokes `method` and runs the loop until the final reply (or stop). Returns
 * 0 on success=true replies, -1 on reject/disconnect (message in rpc->error).
 * timeout_ms 0 waits forever. */
int tc_rpc_call(struct tc_rpc *rpc, const char *method, const uint8_t *args, size_t args_len, int fd,
                tc_part_fn fn, void *arg, int timeout_ms);

/* Starts a call without waiting; parts go to fn. Returns 0/-1. tc_rpc_pump
 * runs the loop until *flag becomes nonzero or timeout. */
struct tc_async {
    tc_part_fn fn;
    void *arg;
    int done, ok;
    uint64_t request_id;
};
int tc_rpc_start(struct tc_rpc *rpc, const char *method, const uint8_t *args, size_t args_len, int fd,
                 struct tc_async *a);
void tc_rpc_pump(struct tc_rpc *rpc, const int *flag, int timeout_ms);

#endif
