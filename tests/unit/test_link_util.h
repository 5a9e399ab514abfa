/* test_link_util.h: the setup the gateway-link unit tests (test_link_*.c) share: a gateway for a
 * node, a "hub" node listening for links on loopback TCP (on the port the kernel chose, read from
 * its log line), a node that dials it, and the link between two nodes once it is UP. Every helper
 * fails the running cmocka test (fail_msg / assert) when something cannot be made. */
#ifndef TEST_LINK_UTIL_H
#define TEST_LINK_UTIL_H

#include <event2/event.h>
#include <stdint.h>

#include "fleet.h"
#include "gw_config.h"
#include "gw_core.h"
#include "link_int.h"
#include "tracegate/ipc_host.h"

/* A gateway on base that bridges consumers to the socket at upstream, with no HTTP front end and
 * no upstream probes. extra: more options as "name", "value" pairs (a NULL value for a flag),
 * ended by a NULL name; NULL for none. cfg is initialised here and freed by the caller
 * (tg_gw_config_free) after tg_gw_free. */
struct tg_gw *tl_gw_new(struct event_base *base, struct tg_gw_config *cfg, const char *upstream,
                        const char *const *extra);
/* Node `name` on gw, listening for links on tcp://127.0.0.1:0; *port gets the port it bound. Its
 * resume window and ping interval are far beyond the tests' safety nets (tl_quiet_ms). */
struct tg_fleet *tl_hub_new(struct event_base *base, struct tg_gw *gw, const char *name, int *port);
/* The same with the deadline for a link connection's TLS handshake and control-stream hello
 * (--handshake-timeout; 0: the default, 10 s). */
struct tg_fleet *tl_hub_new_timed(struct event_base *base, struct tg_gw *gw, const char *name, int *port,
                                  uint32_t handshake_timeout_ms);
/* Node `name` on gw, dialing tcp://127.0.0.1:port, with the same quiet timers. */
struct tg_fleet *tl_dialer_new(struct event_base *base, struct tg_gw *gw, const char *name, int port);
/* The resume window and ping interval of those nodes: not what the link tests are about. */
uint32_t tl_quiet_ms(void);
/* f's link to node `name` if it is UP, else NULL. */
struct tg_link *tl_link_up(struct tg_fleet *f, const char *name);

/* Two linked nodes in a fresh temporary directory: "hub" (listening, its gateway bridging
 * consumers to an IPC host that serves one service on DIR/upstream.sock) and "edge" (dialing it,
 * its gateway's upstream absent). Everything is owned by the pair and freed by tl_pair_down. */
struct tl_pair {
    char dir[64];
    struct event_base *base;
    tg_ipc_host *host;
    struct tg_gw_config hub_cfg, edge_cfg;
    struct tg_gw *hub_gw, *edge_gw;
    struct tg_fleet *hub, *edge;
    int port; /* the hub's link port */
};

/* Makes the pair (tag names the directory; gw_opts as tl_gw_new's extra, for both gateways;
 * hello_ms as tl_hub_new_timed's) and waits up to wait_ms for both ends of the link to be UP;
 * fails the test otherwise. */
void tl_pair_up(struct tl_pair *p, const char *tag, const struct tg_ipc_service_def *svc,
                const char *const *gw_opts, uint32_t hello_ms, int wait_ms);
/* Frees the nodes, lets their closes settle, then frees the rest and removes the directory.
 * Returns 0, or -1 when the directory could not be removed. */
int tl_pair_down(struct tl_pair *p);

#endif
