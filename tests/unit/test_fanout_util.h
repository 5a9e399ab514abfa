/* test_fanout_util.h: the setup the federated-session tests (test_fanout_*.c) share: a fake
 * ConsumerPort served in this process on one UNIX socket, a hub gateway whose fleet names that
 * socket as one or more raw nodes (--node NAME=unix:PATH), and an IPC client of a federated
 * session over some of them, bound to the fan-out's ConsumerPort. Every helper fails the running
 * cmocka test when something cannot be made. Single-threaded (the test's event loop). */
#ifndef TEST_FANOUT_UTIL_H
#define TEST_FANOUT_UTIL_H

#include <event2/event.h>
#include <stddef.h>

#include "fleet.h"
#include "gw_config.h"
#include "gw_core.h"
#include "tracegate/ipc_client.h"
#include "tracegate/ipc_host.h"

struct fo_world {
    char dir[48], sock[112];
    struct event_base *base;
    tg_ipc_host *host; /* the fake node(s) */
    struct tg_gw_config cfg;
    struct tg_gw *gw;
    struct tg_fleet *fleet;
    tg_ipc_client *cli; /* the federated session's client (the test may free it: set it NULL) */
};

/* Makes w: a temporary directory named after tag, the node(s) serving def on one socket (their
 * connections' output limit out_hard_limit, 0 for the default), the hub naming that socket as the
 * raw nodes nodes[0..n), and a client of the federated session `target` ("evil", "n0,n1,n2")
 * with the client callbacks cbs (NULL for none). Returns the bound ConsumerPort proxy. */
tg_ipc_service_proxy *fo_world_up(struct fo_world *w, const char *tag, const struct tg_ipc_service_def *def,
                                  size_t out_hard_limit, const char *const *nodes, size_t n, const char *target,
                                  const struct tg_ipc_client_cbs *cbs, void *cbs_arg);
/* Frees all of w and removes its directory. */
void fo_world_down(struct fo_world *w);

#endif
