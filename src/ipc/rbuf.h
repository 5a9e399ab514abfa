/* rbuf.h: read blocks shared by reference, for socket connections (internal to src/ipc).
 *
 * A socket tg_conn reads into blocks it allocates (64 KiB, growing to 256 KiB while the socket
 * keeps filling them) and appends what each read returned to its input evbuffer by reference
 * (evbuffer_add_reference). The rbuf keeps a map of which block holds which of the input's
 * bytes, in order, so that
 *  - a frame can be handed to another evbuffer by reference (tg_rbuf_forward: no copy, however
 *    the frame is placed among the input's chains), and
 *  - a frame whose bytes sit back to back in one block is seen in place (tg_rbuf_view: no
 *    pull-up even when it arrived in several reads).
 * Blocks are reference-counted: the rbuf's current block, every map entry and every evbuffer
 * chain pointing into a block hold one reference each, so a block lives until the last queue
 * holding some of its bytes has sent them, wherever that queue is. Committed bytes are never
 * written again. The bytes of all blocks still alive that this rbuf allocated are counted
 * (tg_rbuf_pinned), so a caller can bound what references keep alive.
 *
 * The input evbuffer must receive bytes only through tg_rbuf_commit and lose them only from its
 * front (drain, remove, pull-up keep the order): the map follows it by length.
 *
 * Threading: no atomics; the rbuf, its input and every evbuffer holding its references belong
 * to one thread (the connection's event loop). */
#ifndef TRACEGATE_IPC_RBUF_H
#define TRACEGATE_IPC_RBUF_H

#include <stddef.h>
#include <stdint.h>

struct evbuffer;
struct tg_rbuf;

struct tg_rbuf *tg_rbuf_new(void);
/* Drops the rbuf's references; blocks still referenced elsewhere live on. */
void tg_rbuf_free(struct tg_rbuf *r);

/* Room to read into (in the current block, or a new one). Returns 0 or -1 (out of memory). */
int tg_rbuf_space(struct tg_rbuf *r, uint8_t **dst, size_t *room);
/* The first n bytes of that room were filled: appends them to `in` by reference. 0 or -1. */
int tg_rbuf_commit(struct tg_rbuf *r, struct evbuffer *in, size_t n);
/* End of a read event: releases the current block when `in` is empty (an idle connection holds
 * no block) and adapts the next block's size. */
void tg_rbuf_event_end(struct tg_rbuf *r, struct evbuffer *in);

/* A pointer to in's bytes [off, off + len) if they are contiguous in one block, else NULL. */
const uint8_t *tg_rbuf_view(struct tg_rbuf *r, struct evbuffer *in, size_t off, size_t len);
/* Moves in's first n bytes to `out`: by reference when `by_ref`, else copied (small frames: a
 * reference costs more than a copy); *ref_bytes = how many went by reference. Returns 0, or -1
 * if out of memory (then `out` may hold part of them and `in` still holds all of them). */
int tg_rbuf_forward(struct tg_rbuf *r, struct evbuffer *in, struct evbuffer *out, size_t n, int by_ref,
                    size_t *ref_bytes);
/* Bytes of the blocks this rbuf allocated that are still alive (read, queued or referenced). */
size_t tg_rbuf_pinned(const struct tg_rbuf *r);

#endif
