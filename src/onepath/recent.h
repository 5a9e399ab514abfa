/* recent.h: the recent-span store: the last finished spans of this process as NDJSON lines, kept
 * in memory (bounded by a span count and a byte total; the oldest are pushed out and counted) so
 * a reader can take them with a cursor (every line has an id, increasing for the life of the
 * process): each span is read once by a reader that passes back the cursor it got. The exporter's
 * flush thread adds; any thread reads. One process-wide store behind one mutex; the public reading
 * side is onepath_recent_spans()/onepath_recent_stats() (tracegate/onepath.h). */
#ifndef TG_ONEPATH_RECENT_H
#define TG_ONEPATH_RECENT_H

#include <stddef.h>

/* A span whose NDJSON line is longer than this is never kept (counted as too big). */
#define TG_OP_RECENT_LINE_MAX (64 * 1024)

/* Turns the store on with these bounds (max_spans 0: off), keeping what it holds when the
 * bounds allow. Called by init. */
void tg_op_recent_configure(size_t max_spans, size_t max_bytes);
/* 1 when the store is on. */
int tg_op_recent_on(void);
/* Copies one NDJSON line (with or without its '\n') into the store; evicts the oldest to make
 * room. No-op when off. */
void tg_op_recent_add(const char *line, size_t len);
/* Frees everything and turns the store off; the id counter and the totals carry on. */
void tg_op_recent_clear(void);
/* A forked child: the flush thread that may have held the lock is not there; start empty (the
 * parent's lines are left to the parent). */
void tg_op_recent_after_fork(void);

#endif
