/* fed_packets.h: the packet-level work of a federated session (docs/link-protocol.md §8): one
 * node's ReadBuffers replies rewritten for the merged trace (each packet reassembled, stamped
 * with the node's machine id, its packet sequence id made unique across nodes), and the packets
 * the fan-out service adds itself: a node's RemoteClockSync and a node's failure.
 *
 * Each function appends ReadBuffersResponse.Slice fields (field 2 of ReadBuffersResponse,
 * complete with tag and length) to `out`, so the caller can send any prefix of whole slices as
 * one reply. Ownership: a tg_fed_stream belongs to its caller (init/clear); `out` is the
 * caller's. Threading: none of its own; one stream is used from one thread. */
#ifndef TRACEGATE_GATEWAY_FED_PACKETS_H
#define TRACEGATE_GATEWAY_FED_PACKETS_H

#include <stddef.h>
#include <stdint.h>

struct evbuffer;

/* The most machine ids a session reserves (its nodes and the hub itself). */
#define TG_FED_MAX_RESERVED 80
/* The most packet sequences one node may use in a session: traced makes one per trace writer
 * (a producer's thread and data source); past it the node's data is refused, since every one
 * costs the hub memory and a lookup. */
#define TG_FED_MAX_SEQS 65536

/* Shared by every node of one federated session. Sequence ids of the merged trace: (node, the
 * node's own sequence id) -> a fresh id (trace processor keys incremental state by sequence id).
 * Reserved machine ids: those the hub stamps itself (each node of the session, and the hub's
 * own name's), which no node's packet may claim for itself. */
struct tg_fed_seq_alloc {
    uint32_t next; /* the next fresh id (starts at 1) */
    uint32_t reserved[TG_FED_MAX_RESERVED];
    size_t n_reserved;
};

struct tg_fed_stream {
    uint32_t machine_id;       /* stamped as TracePacket.machine_id (98) when non-zero (see
                                * tg_fed_rewrite_reply for the packets that keep their own) */
    struct tg_fed_seq_alloc *alloc;
    struct evbuffer *partial;  /* the packet being reassembled from slices */
    size_t max_packet;         /* larger packets are an error (bounded memory) */
    uint32_t *seq_from, *seq_to; /* this node's sequence map: an open-addressing table of cap_seq
                                  * slots (seq_to 0: free) */
    size_t n_seq, cap_seq;
    uint64_t packets, bytes;   /* packets and packet bytes passed on */
    uint64_t anchors;          /* clock anchors added after relayed machines' RemoteClockSync */
    /* the node's clocks minus the hub's, [BOOTTIME, REALTIME, MONOTONIC, MONOTONIC_RAW], as trace
     * processor derives them from the hub's RemoteClockSync for the node (tg_fed_clock_offsets);
     * the node's RemoteClockSync packets for machines behind it are moved by it */
    int have_clock_off;
    int64_t clock_off[4];
    uint64_t clock_syncs_dropped; /* RemoteClockSync packets the node may not send (see below) */
};

/* 0, or -1 out of memory. */
int tg_fed_stream_init(struct tg_fed_stream *st, uint32_t machine_id, struct tg_fed_seq_alloc *alloc,
                       size_t max_packet);
void tg_fed_stream_clear(struct tg_fed_stream *st);

/* One ReadBuffersResponse from the node: appends the slices of every packet it completes (a
 * packet split across replies is held until its last slice). Every packet with a sequence id
 * gets the node's mapped one, and a remote node's packets (machine_id non-zero) its machine id,
 * read as Perfetto reads them (the last occurrence; varint, fixed32 or fixed64 alike). A packet
 * the node's service gave another machine (a producer relayed to it from a third node) keeps
 * that machine, unless it is one the session reserves. From a remote node, a RemoteClockSync
 * (107) passes only as its service emits one for a machine behind it (no sequence id, a machine
 * it may name), its host clocks moved onto the hub's by clock_off; any other (a producer's, or
 * one that would be stamped with the node's own machine, overriding the hub's sync of it) is
 * dropped and counted in clock_syncs_dropped. 0, or -1 with a message when the reply
 * is malformed, a packet is too large or the node uses more than TG_FED_MAX_SEQS sequences
 * (the node's data cannot be trusted further). */
int tg_fed_rewrite_reply(struct tg_fed_stream *st, const uint8_t *reply, size_t len, struct evbuffer *out, char *err,
                         size_t errlen);

/* The node's mapped id for its own sequence id `seq` (allocating one). 0 out of memory, past
 * TG_FED_MAX_SEQS of the node's sequences, or when the session's ids ran out. */
uint32_t tg_fed_map_seq(struct tg_fed_stream *st, uint32_t seq);

/* A TracePacket{machine_id, remote_clock_sync{synced_clocks[n]}} from n clock records, each
 * the node's clocks as sent and ours on receipt, in the order [BOOTTIME, REALTIME, MONOTONIC,
 * MONOTONIC_RAW]. 0, or -1 out of memory. Nothing is appended for n == 0. */
int tg_fed_clock_sync_packet(uint32_t machine_id, const uint64_t (*peer)[4], const uint64_t (*mine)[4], size_t n,
                             struct evbuffer *out);
/* (tg_fed_clock_sync_packet, and tg_fed_rewrite_reply after a relayed machine's RemoteClockSync,
 * add an anchor right after it: TracePacket{timestamp: the machine's last BOOTTIME reading in it,
 * timestamp_clock_id: BOOTTIME, machine_id} and nothing else, so that trace processor puts the
 * machine on the host's timeline whatever ClockSnapshots its own packets bring first.) */

/* A TracePacket{machine_id, trusted_packet_sequence_id, trace_stats{final_flush_outcome:
 * FAILED}} telling the trace that this node's data is missing or incomplete. */
int tg_fed_failure_packet(struct tg_fed_stream *st, struct evbuffer *out);

/* A TracePacket{machine_id, trusted_packet_sequence_id, trace_stats{[1001] TracegateLinkGap{gaps,
 * gap_ns, reattached}}}: the node's link was down past the resume window `gaps` times, `gap_ns`
 * in all, and its session was re-attached (1) or is still detached there (0). Field 1001 of
 * TraceStats is tracegate's extension (docs/link-protocol.md §8); other readers skip it. */
int tg_fed_gap_packet(struct tg_fed_stream *st, uint32_t gaps, uint64_t gap_ns, int reattached, struct evbuffer *out);

#endif
