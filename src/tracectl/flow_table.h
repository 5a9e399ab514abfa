/* flow_table.h: the flows of a trace, linked as trace processor links them into its `flow`
 * table. Slice events are added in file order with their timestamps on the host clock; the table
 * then orders them by time (file order breaks ties), rebuilds each track's slices (begin/end
 * nesting, instants as zero-length slices) and follows every flow id through its events:
 * `flow_ids` on a slice starts a flow when the id is not active and otherwise links the previous
 * slice of that id to this one and carries on from it; `terminating_flow_ids` links the previous
 * slice to this one and ends the id, and is ignored when the id is not active. Flow ids on an end
 * event belong to the slice it closes. The v2 fields win over the old ones when both are there.
 * Flow ids are per machine (each machine's packets have their own flow tracker in trace
 * processor): the same id on two machines is two flows, and no flow links two machines.
 *
 * Ownership: the table copies what is added (names included) and owns it until
 * tc_flow_table_free; edges point into the table. Threading: none (single owner). */
#ifndef TRACEGATE_TRACECTL_FLOW_TABLE_H
#define TRACEGATE_TRACECTL_FLOW_TABLE_H

#include <stddef.h>
#include <stdint.h>

enum tc_flow_kind { TC_FLOW_BEGIN, TC_FLOW_END, TC_FLOW_INSTANT };

struct tc_flow_slice {
    const char *name;  /* "" when the event had none */
    const char *track; /* the track's name when known, else NULL */
    uint64_t track_uuid;
    uint32_t machine;
    int64_t ts;   /* host clock, machine offset applied */
};

struct tc_flow_edge {
    uint64_t flow_id;
    const struct tc_flow_slice *out, *in;
};

struct tc_flow_event; /* internal */

struct tc_flow_table {
    struct tc_flow_event *ev;
    size_t n_ev, cap_ev;
    uint64_t *ids; /* every event's flow ids, back to back; each event indexes its run */
    size_t n_ids, cap_ids;
    struct tc_flow_slice *slices; /* after resolve */
    size_t n_slices;
    struct tc_flow_edge *edges; /* after resolve, ordered by the outgoing slice's time */
    size_t n_edges;
    uint64_t unplaced; /* slice events without a usable timestamp (left out, as trace processor drops them) */
    uint64_t unmatched_ends; /* end events with flow ids on a track with no open slice */
};

/* Adds one slice event. track_name may be NULL (copied). flows/terms: the event's flow_ids and
 * terminating_flow_ids (already the v2 field or, when it is empty, the old one). has_ts = 0 for
 * an event whose time could not be placed: it is only counted (unplaced). 0, or -1 on OOM. */
int tc_flow_table_add(struct tc_flow_table *t, enum tc_flow_kind kind, uint32_t machine, uint64_t track_uuid,
                      const char *track_name, int has_ts, int64_t ts, const char *name, const uint64_t *flows,
                      size_t n_flows, const uint64_t *terms, size_t n_terms);

/* Links the flows. offset(ctx, machine) gives a remote machine's clock minus the host's (ns),
 * subtracted from its events' times; NULL: none. 0, or -1 on OOM. Call once. */
int tc_flow_table_resolve(struct tc_flow_table *t, int64_t (*offset)(void *ctx, uint32_t machine), void *ctx);

void tc_flow_table_free(struct tc_flow_table *t);

#endif
