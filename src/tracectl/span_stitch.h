/* span_stitch.h: OnePath spans turned into Perfetto TrackEvent packets for an existing trace.
 *
 * - Machine of a span: resource perfetto.machine_id, else resource tracegate.node (the fleet's
 *   machine id for that node name), else a --machine HOST=ID mapping of its host.name, else the
 *   host (machine 0). A machine the trace does not know is placed with the host's clocks.
 * - Time: span timestamps are REALTIME (Unix epoch ns) of the span's machine. The host's spans go
 *   onto the trace clock of the host's ClockSnapshot packets (primary_trace_clock, BOOTTIME by
 *   default) through the snapshot whose REALTIME reading is nearest; a remote machine's spans go
 *   onto that machine's BOOTTIME through the nearest client-side reading of its RemoteClockSync
 *   (or its own snapshots), then onto the host's BOOTTIME by the offset trace processor derives
 *   from the trace's RemoteClockSync for the machine (clock_sync_est.h). Durations are kept.
 * - Every stitched packet is the host's (no machine_id): trace processor tracks flows per
 *   machine, so an arrow between a hub's span and a node's exists only when both slices are on
 *   one machine. The span's machine shows in its track's name instead.
 * - Tracks: per (machine, service.name, host.name, process.pid) a process track (the host's spans
 *   with a pid: a ProcessDescriptor; else, and for every other machine's spans, a named track
 *   "SERVICE PID (NODE or HOST) on machine ID", since a pid on the host's tracks would be taken
 *   for the host's process), under it one named track per thread ("NAME TID"); spans of one
 *   thread that do not nest (explicit parents, clock steps) get extra lanes ("NAME TID #2"). One
 *   slice (SLICE_BEGIN/END) per span.
 * - Flows: every parent→child edge between slices on different tracks is a flow (flow_ids on the
 *   earlier slice's begin, terminating_flow_ids on the later one's), its id derived from the
 *   trace id and the child's span id. Children on the same track show by nesting.
 * - Attributes become debug annotations; the span's ids, kind, status and events too.
 * - Packets use a fresh trusted_packet_sequence_id above the trace's highest.
 * Single-threaded. */
#ifndef TRACEGATE_TRACECTL_SPAN_STITCH_H
#define TRACEGATE_TRACECTL_SPAN_STITCH_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "span_load.h"
#include "trace_clocks.h"
#include "trace_file.h"

struct tc_machine_map {
    const char *host; /* host.name */
    uint32_t machine_id;
};

struct tc_stitch_opts {
    const struct tc_machine_map *map;
    size_t n_map;
    FILE *warn; /* NULL: silent */
    const char *host_node; /* NULL, or the node whose spans are the trace's host (tc_span_set) */
};

struct tc_stitch_stats {
    size_t spans;       /* spans given */
    size_t placed;      /* slices written */
    size_t duplicates;  /* same trace and span id seen again: skipped */
    size_t unplaceable; /* times that map before the trace clock's zero or past 2^63-1: skipped */
    size_t on_host_clock; /* spans of a machine unknown to the trace, placed with the host's clocks */
    size_t remote;      /* spans of a remote machine placed through its clocks */
    size_t tracks;      /* track descriptors written (process and thread tracks) */
    size_t flows;       /* flow arrows */
    size_t orphans;     /* spans whose parent is in none of the inputs */
    size_t packets;
};

/* Emits descriptor and event packets through emit (which returns non-zero to stop). Returns 0,
 * or -1 with err (the trace has no usable clock snapshot for the host, OOM, emit failed). */
int tc_stitch(const struct tc_span_set *set, const struct tc_trace_clocks *clocks, const struct tc_stitch_opts *o,
              tc_packet_fn emit, void *arg, struct tc_stitch_stats *st, char *err, size_t errlen);
/* The flow id of the edge into child span_id of trace trace_id (also used by the tests). */
uint64_t tc_stitch_flow_id(const uint8_t trace_id[16], const uint8_t span_id[8]);

#endif
