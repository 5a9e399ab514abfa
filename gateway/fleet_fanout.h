/* fleet_fanout.h: federated sessions (docs/link-protocol.md §8). A client routed to "@all" or
 * "@a,b,c" (tracectl record --all / --nodes, /traced/@all) is connected to a ConsumerPort served
 * here, which fans every call out to each target node's consumer port (this node's service, a
 * linked node through a channel, a raw node) and merges the answers: ReadBuffers streams every
 * node's packets in turn, stamped with the node's machine id and preceded by its RemoteClockSync.
 * A node whose link stays down past the resume window is re-attached (Attach with the key the far
 * node Detached its session under) when the link returns while the client still records.
 *
 * Ownership: the fleet creates one fan-out and frees it (which disconnects its clients).
 * Threading: the gateway's event loop thread. */
#ifndef TRACEGATE_GATEWAY_FLEET_FANOUT_H
#define TRACEGATE_GATEWAY_FLEET_FANOUT_H

#include <stddef.h>
#include <stdint.h>

#include "gw.h"

struct tg_fleet;
struct tg_fanout;

struct tg_fanout *tg_fanout_new(struct tg_fleet *f);
void tg_fanout_free(struct tg_fanout *fo);

/* The nodes of a federated spec ("all" or "a,b,c", without the '@'): "all" is this node and every
 * node up now (this node first); a list must name nodes the fleet knows (in any state), each
 * non-empty, duplicates once. Returns how many (at most max), 0 with a message when the spec is
 * bad. */
size_t tg_fanout_resolve(struct tg_fleet *f, const char *spec, char (*names)[64], size_t max, char *err,
                         size_t errlen);

/* A connected socket to a federated ConsumerPort over `spec` ("all" or "a,b,c", without the
 * '@') for client `who`; -1 with a message (the producer port, an unknown node, no node). */
int tg_fanout_connect(struct tg_fanout *fo, const char *spec, int producer, const struct tg_gw_client_info *who,
                      char *err, size_t errlen);

/* Consumer channel `channel_id` on the link to `peer` closed past the resume window: a federated
 * session reading a node through it marks that node lost (the far node keeps its session under
 * tg_fleet_detach_key(this node, channel_id)), down since `down_since_us` (tg_mono_us). */
void tg_fanout_channel_lost(struct tg_fanout *fo, const char *peer, uint64_t channel_id, uint64_t down_since_us);
/* The link to `peer` is up: lost nodes behind it are re-attached (a new channel, Attach with the
 * key) unless their client has already stopped (DisableTracing/FreeBuffers) or gone. */
void tg_fanout_link_up(struct tg_fanout *fo, const char *peer);

#endif
