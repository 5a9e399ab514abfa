/* clock_anchor.h: the clock anchor tracegate writes right after a machine's RemoteClockSync:
 * TracePacket{timestamp: the machine's last BOOTTIME reading in that sync, timestamp_clock_id:
 * BOOTTIME (6), machine_id} and nothing else. Perfetto's trace processor fixes a machine's trace
 * time at the first timestamp it converts for it; a ClockSnapshot holding BOOTTIME before that (a
 * relayed SDK producer's incremental-clock snapshot, a node service's snapshots) makes it keep the
 * machine's packets at their raw times instead of moving them by the RemoteClockSync's offset.
 * The anchor is converted first, through the sync, and shows nothing (docs/service.md).
 * Written by the service (traced_relay machines), the hub (federated traces) and `tracectl merge`
 * (foreign traces without one). Pure functions: no state, any thread. */
#ifndef TRACEGATE_BASE_CLOCK_ANCHOR_H
#define TRACEGATE_BASE_CLOCK_ANCHOR_H

#include <stddef.h>
#include <stdint.h>

/* The most bytes an anchor packet takes. */
#define TG_CLOCK_ANCHOR_MAX 32

/* Encodes the anchor TracePacket (the packet's bytes, no record framing) into buf, which has room
 * for TG_CLOCK_ANCHOR_MAX bytes; returns its length. */
size_t tg_clock_anchor_encode(uint8_t *buf, uint32_t machine_id, uint64_t boottime);

/* The machine id and last client (the synced machine's) BOOTTIME reading of TracePacket `pkt`
 * when it holds a RemoteClockSync (107) and a non-zero machine id (98, its last occurrence):
 * 1 with both set; 0 otherwise (no sync, the host's, no BOOTTIME reading, malformed). */
int tg_clock_anchor_for_sync(const uint8_t *pkt, size_t len, uint32_t *machine_id, uint64_t *boottime);

/* Whether TracePacket `pkt` is an anchor: a timestamp on BOOTTIME and a machine id, nothing else. */
int tg_clock_anchor_is(const uint8_t *pkt, size_t len);

#endif
