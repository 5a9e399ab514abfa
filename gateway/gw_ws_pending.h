/* gw_ws_pending.h: the HTTP connections of the WebSocket port that have not
 * become WebSockets (yet): how many there may be (in total and per source
 * address) and when each must be gone (an ABSOLUTE deadline, never extended
 * by the bytes a client dribbles in).
 *
 * A connection is admitted at accept time (tg_ws_pending_check, then
 * tg_ws_pending_add) and leaves the table when it becomes a WebSocket or
 * closes (tg_ws_pending_remove). Its deadline is set when it enters a phase:
 *  - REQUEST: from accept (or from the end of the previous response on a
 *    kept-alive connection) until the request headers are complete;
 *  - RESPONSE: while an answer is being written; moved forward by each chunk
 *    the client reads, so a client that stops reading is cut.
 * Every deadline is `now + timeout`, so the entries stay ordered by deadline
 * (a re-armed entry moves to the tail) and the earliest is always the head.
 *
 * Per-source counts skip loopback clients (as the gateway's
 * max-connections-per-source does).
 *
 * Pure data: no libwebsockets, no clock of its own (callers pass now_us).
 * Single-threaded: the WebSocket thread owns it. */
#ifndef TRACEGATE_GATEWAY_GW_WS_PENDING_H
#define TRACEGATE_GATEWAY_GW_WS_PENDING_H

#include <stddef.h>
#include <stdint.h>

struct tg_ws_pending;

struct tg_ws_pending_limits {
    uint32_t max_total;      /* 0 = unlimited */
    uint32_t max_per_source; /* per non-loopback source; 0 = unlimited */
    uint64_t timeout_us;     /* deadline of each phase (> 0) */
};

enum tg_ws_pending_phase { TG_WS_PENDING_REQUEST = 0, TG_WS_PENDING_RESPONSE };
enum tg_ws_admit { TG_WS_ADMIT_OK = 0, TG_WS_ADMIT_TOTAL, TG_WS_ADMIT_SOURCE };

struct tg_ws_pending *tg_ws_pending_new(const struct tg_ws_pending_limits *l);
void tg_ws_pending_free(struct tg_ws_pending *p);

/* Whether one more connection from source (printable IP) fits the caps. */
enum tg_ws_admit tg_ws_pending_check(struct tg_ws_pending *p, const char *source, int loopback);
/* Adds an admitted connection (key: its wsi) in the REQUEST phase with the
 * deadline now_us + timeout. Returns the admission verdict (nothing is added
 * unless TG_WS_ADMIT_OK), or -1 when out of memory. */
int tg_ws_pending_add(struct tg_ws_pending *p, const void *key, const char *source, int loopback, uint64_t now_us);
/* Enters phase with the deadline now_us + timeout (moves the entry to the
 * tail). Returns 0, or -1 when key is unknown. */
int tg_ws_pending_rearm(struct tg_ws_pending *p, const void *key, enum tg_ws_pending_phase phase, uint64_t now_us);
/* Forgets key (became a WebSocket, or closed). Returns 1 if it was there. */
int tg_ws_pending_remove(struct tg_ws_pending *p, const void *key);
size_t tg_ws_pending_count(const struct tg_ws_pending *p);
/* Connections counted for a source (0 for loopback or unknown sources). */
uint32_t tg_ws_pending_source_count(const struct tg_ws_pending *p, const char *source);
/* The earliest deadline, or 0 when the table is empty. */
uint64_t tg_ws_pending_next_deadline(const struct tg_ws_pending *p);
/* Removes and returns one entry whose deadline is <= now_us (NULL when none);
 * its phase and source are copied out. */
const void *tg_ws_pending_pop_expired(struct tg_ws_pending *p, uint64_t now_us, enum tg_ws_pending_phase *phase,
                                      char *source, size_t srclen);

#endif
