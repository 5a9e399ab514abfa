/* fed_split.h: a federated session's merged QueryServiceState answer (every node's
 * QueryServiceStateResponse concatenated, docs/link-protocol.md §8) cut into replies that each fit
 * one IPC frame, as traced streams a large state: each part is a whole QueryServiceStateResponse
 * {service_state{...}} holding whole TracingServiceState fields, so a consumer that concatenates
 * the parts' service_state (Perfetto's client, tracectl) gets back the merged state.
 * Pure function; no state, any thread. */
#ifndef TRACEGATE_GATEWAY_FED_SPLIT_H
#define TRACEGATE_GATEWAY_FED_SPLIT_H

#include <stddef.h>
#include <stdint.h>

/* Receives one part; has_more is 0 for the last one only. Returns 0, or -1 to stop. */
typedef int (*tg_fed_part_fn)(void *arg, const uint8_t *part, size_t len, int has_more);

/* Cuts `merged` (QueryServiceStateResponse bytes, any number of them concatenated) into parts of
 * at most `max` bytes each, in order; at least one part (an empty one for no state). Fields other
 * than service_state (1) are dropped (the message has no other); a TracingServiceState field that
 * alone does not fit in `max` is left out and counted in *skipped. 0, or -1 when `merged` is
 * malformed, out of memory or fn stopped. */
int tg_fed_split_service_state(const uint8_t *merged, size_t len, size_t max, tg_fed_part_fn fn, void *arg,
                               size_t *skipped);

#endif
