/* fed_clocks.h: the clocks of machines behind a node in a federated trace (docs/link-protocol.md
 * §8). A node's service emits a RemoteClockSync for each machine relayed to it: its snapshot
 * pairs are (that machine's clocks, the node's clocks), while trace processor reads every
 * RemoteClockSync's host clocks as the trace host's (the hub's). So the hub moves the node's
 * readings onto its own clocks by the node's offset, the one trace processor derives from the
 * hub's own RemoteClockSync for the node: relayed machine -> node -> hub.
 * Pure functions; no state, any thread. */
#ifndef TRACEGATE_GATEWAY_FED_CLOCKS_H
#define TRACEGATE_GATEWAY_FED_CLOCKS_H

#include <stddef.h>
#include <stdint.h>

/* The node's clocks minus ours, per clock [BOOTTIME, REALTIME, MONOTONIC, MONOTONIC_RAW], from n
 * clock records (the node's readings as sent, ours on receipt) exactly as trace processor reads
 * the RemoteClockSync made of them (tg_fed_clock_sync_packet; its CalculateClockOffsets): EVERY
 * two consecutive records whose node BOOTTIME readings are under 30 s apart (an unsigned
 * difference: a later record that reads earlier is far apart) give t1c,t1h,t2c,t2h and two
 * estimates, (t1c+t2c)/2 - t1h and t2c - (t1h+t2h)/2, per clock that all four readings have; the
 * offset of a clock is the integer mean of its estimates. Consecutive records are not only a PING
 * and its UPDATE: a round's UPDATE and the next round's PING count as well when they are close,
 * and then add half the time between the rounds (tg_link_clock_rounds keeps the rounds it gives
 * 30 s apart for that reason). 1 with off[] filled (0 for a clock without estimates), 0 when no
 * pair qualifies. */
int tg_fed_clock_offsets(const uint64_t (*peer)[4], const uint64_t (*mine)[4], size_t n, int64_t off[4]);

/* A copy of TracePacket `pkt` whose RemoteClockSync (107) host clocks are moved by -off (off as
 * above): BOOTTIME by off[0], REALTIME and REALTIME_COARSE by off[1], MONOTONIC and
 * MONOTONIC_COARSE by off[2], MONOTONIC_RAW by off[3]; readings of other clocks (no offset is
 * known for them) and every other field are kept as they are. *out is malloc'd. 0, or -1 when
 * the RemoteClockSync is malformed or out of memory. */
int tg_fed_rebase_clock_sync(const uint8_t *pkt, size_t len, const int64_t off[4], uint8_t **out, size_t *out_len);

#endif
