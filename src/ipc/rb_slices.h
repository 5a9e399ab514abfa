/* rb_slices.h: the slices of a ReadBuffersResponse (slices = 2, each {data = 1,
 * last_slice_for_packet = 2}), walked in place without unpacking: the one reading shared by
 * everything that reassembles trace packets from ReadBuffers replies (tracectl's trace writer,
 * the gateway's rewriting of federated replies).
 * Pure function over caller-owned bytes; thread-safe. */
#ifndef TRACEGATE_IPC_RB_SLICES_H
#define TRACEGATE_IPC_RB_SLICES_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>

/* What tg_rb_slices_each returns for bytes that do not decode; *where says "reply" or "slice". */
#define TG_RB_MALFORMED INT_MIN

/* One slice: data points into the reply (len 0 and data "" when the slice has none); last is
 * last_slice_for_packet. Non-zero stops the walk and is returned by tg_rb_slices_each. */
typedef int (*tg_rb_slice_fn)(void *arg, const uint8_t *data, size_t len, int last);

/* Calls fn for each slice in order, reading as protobuf does: other fields are skipped, and of a
 * repeated singular field the last occurrence wins. Returns 0 after the last slice, fn's non-zero
 * value, or TG_RB_MALFORMED (where, if not NULL, then names what did not decode). */
int tg_rb_slices_each(const uint8_t *reply, size_t len, tg_rb_slice_fn fn, void *arg, const char **where);

#endif
