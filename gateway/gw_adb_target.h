/* gw_adb_target.h: the one seam between an /adb pipe (gw_adb.h) and an ADB
 * server: "give me a byte stream to node NODE's ADB server".
 *
 * Today it reaches this node's own ADB server only: node "" (the /adb route)
 * or this node's name (/adb/<name>). Gateway links plug in with
 * tg_gw_adb_target_set_router(): a function that, like tg_gw_router_fn for
 * /traced/<node>, returns a connected stream socket for another node (for a
 * link: one end of a socketpair whose other end feeds a link channel to
 * that node's ADB server), or -1 with a message. Nothing else in the /adb
 * path knows where the bytes go.
 *
 * Ownership: the target copies its address and names. Sockets it returns
 * belong to the caller.
 * Threading: the gateway's libevent thread (the router is called there). */
#ifndef TRACEGATE_GATEWAY_GW_ADB_TARGET_H
#define TRACEGATE_GATEWAY_GW_ADB_TARGET_H

#include <stddef.h>

#include "gw.h"
#include "tracegate/addr.h"

struct tg_gw_adb_target;

/* A stream socket to `node`'s ADB server for client `who` (non-blocking;
 * connected, or with its connect in progress), or -1 with a short message
 * (it becomes the WebSocket's close reason: at most ~100 characters). */
typedef int (*tg_gw_adb_router_fn)(void *ctx, const char *node, const struct tg_gw_client_info *who, char *err,
                                   size_t errlen);

/* server: the local ADB server's address; text: how it was configured
 * ("tcp:127.0.0.1:5037"), for messages; node_name: this node's name (NULL or
 * "" when it has none). NULL on allocation failure. */
struct tg_gw_adb_target *tg_gw_adb_target_new(const struct tg_addr *server, const char *text, const char *node_name);
void tg_gw_adb_target_free(struct tg_gw_adb_target *t);

/* Routes /adb/<node> for other nodes through fn (NULL: other nodes are
 * refused). */
void tg_gw_adb_target_set_router(struct tg_gw_adb_target *t, tg_gw_adb_router_fn fn, void *ctx);

/* Plain /adb (node "") goes to node `node` instead of this node's server ("" or NULL: back to
 * this node's). */
void tg_gw_adb_target_set_default_node(struct tg_gw_adb_target *t, const char *node);

/* Whether node names this node ("" or its own name). */
int tg_gw_adb_target_is_local(const struct tg_gw_adb_target *t, const char *node);

/* Opens the byte stream (see tg_gw_adb_router_fn). For the local server a
 * failure that the kernel reports at once (nothing listening on a loopback
 * port or UNIX path) is returned here; one that comes later shows as an
 * error on the socket before it connects. */
int tg_gw_adb_target_open(struct tg_gw_adb_target *t, const char *node, const struct tg_gw_client_info *who,
                          char *err, size_t errlen);

/* The local ADB server as configured ("tcp:127.0.0.1:5037"). */
const char *tg_gw_adb_target_describe(const struct tg_gw_adb_target *t);

#endif
