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

/* The far end of consumer channel `channel_id` on the link to `peer` is gone past a resume window
 * (this link's, or one further on: a LOST record): a federated session reading a node through it
 * marks that node lost (the node keeps its session under `key`), down since `down_since_us`
 * (tg_mono_us). Returns how many federated sessions read a node through that channel. */
int tg_fanout_channel_lost(struct tg_fanout *fo, const char *peer, uint64_t channel_id, const char *key,
                           uint64_t down_since_us);
/* A link came up or a peer said which nodes it reaches: every lost node that can be reached over
 * an up link again (directly, or through the node at the other end of one) is re-attached (a new
 * channel, Attach with the key) unless its client has already stopped (DisableTracing/FreeBuffers)
 * or gone. Lost nodes still unreachable keep waiting. */
void tg_fanout_routes_changed(struct tg_fanout *fo);
/* How long a node may stay silent while its ReadBuffers is read before it is failed (default 30 s,
 * below tracectl's 60 s; tests shorten it). */
void tg_fanout_set_read_idle_ms(struct tg_fanout *fo, int ms);

#endif
