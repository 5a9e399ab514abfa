/* conn.h: one framed IPC connection on a libevent loop.
 *
 * A tg_conn owns a stream (a socket fd it reads with recvmsg so SCM_RIGHTS
 * file descriptors ride along on UNIX sockets, or any libevent bufferevent,
 * e.g. TLS) plus its input and output evbuffers. It cuts the input into
 * [u32 LE length][IPCFrame] frames and hands each to on_frame; it queues
 * output with at most one fd per frame, attached to the frame's first byte.
 *
 * Limits: frames over max_frame close the connection; output beyond
 * out_hard_limit closes it; output that makes no progress for
 * send_timeout_ms closes it; no input for idle_timeout_ms closes it.
 * Crossing out_high sets tg_conn_is_congested(); falling back under out_low
 * calls on_drain, so owners can pause the other side of a bridge.
 *
 * Forwarding without copying: a socket connection reads into blocks of its own
 * and keeps them in `in` by reference (src/ipc/rbuf.h), so an owner relaying
 * frames (the gateway's bridge) can take a frame in on_frame_head, look at
 * its first bytes (tg_conn_frame_peek) and hand it to another connection's
 * output with tg_conn_forward_frame: by reference, without a pull-up or a
 * copy. A frame seen through on_frame is not pulled up either when its bytes
 * sit back to back in one block.
 *
 * Teardown: there is exactly one path. Whatever closes the connection (peer
 * EOF, an error, a limit, or the owner calling tg_conn_close), on_close runs
 * once, from the event loop (never from inside tg_conn_close or a send), and
 * the tg_conn is freed right after on_close returns. After tg_conn_close the
 * owner must not call anything but tg_conn_* query functions until on_close.
 *
 * Threading: a tg_conn belongs to the thread running its event_base. */
#ifndef TRACEGATE_CONN_H
#define TRACEGATE_CONN_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct event_base;
struct bufferevent;
struct evbuffer;

typedef struct tg_conn tg_conn;

struct tg_conn_cbs {
    /* One complete frame; body is valid only during the call. */
    void (*on_frame)(tg_conn *c, const uint8_t *body, size_t len, void *arg);
    /* Runs exactly once; the conn is freed when it returns. */
    void (*on_close)(tg_conn *c, const char *reason, void *arg);
    /* Output fell below out_low after having been above out_high. Optional. */
    void (*on_drain)(tg_conn *c, void *arg);
    /* Optional, offered each complete frame before it is made contiguous
     * for on_frame: len is its body length. Return 1 when the frame was
     * dealt with (moved with tg_conn_forward_frame, or to be dropped), 0 to
     * get it through on_frame as usual. Only tg_conn_frame_peek,
     * tg_conn_forward_frame and tg_conn_has_fd refer to that frame, and only
     * during this call. */
    int (*on_frame_head)(tg_conn *c, size_t len, void *arg);
};

struct tg_conn_opts {
    size_t max_frame;       /* header + body; default TG_FRAME_MAX_DEFAULT */
    size_t out_high;        /* default 1 MiB */
    size_t out_low;         /* default 256 KiB */
    size_t out_hard_limit;  /* default 64 MiB; 0 = default */
    int send_timeout_ms;    /* 0 = none */
    int idle_timeout_ms;    /* 0 = none */
    int no_fd_passing;      /* fd-based conns: never pass fds and report the
                             * conn as non-UNIX (e.g. the socketpair end of a
                             * WebSocket: the real peer is remote) */
};

void tg_conn_opts_default(struct tg_conn_opts *o);

/* Takes ownership of fd (connected, any stream socket). A UNIX socket enables
 * fd passing and SO_PEERCRED, unless opts->no_fd_passing. opts may be NULL. */
tg_conn *tg_conn_new_fd(struct event_base *base, int fd, const struct tg_conn_opts *opts,
                        const struct tg_conn_cbs *cbs, void *arg);
/* Takes ownership of bev (e.g. bufferevent_openssl, or one end of a bufferevent pair: freeing the
 * connection, or failing to create it, gives the partner an end-of-stream event first). No fd
 * passing. */
tg_conn *tg_conn_new_bev(struct event_base *base, struct bufferevent *bev, const struct tg_conn_opts *opts,
                         const struct tg_conn_cbs *cbs, void *arg);

void tg_conn_set_cbs(tg_conn *c, const struct tg_conn_cbs *cbs, void *arg);

/* Queues one frame. fd >= 0 is duplicated and sent with the frame's first
 * byte (UNIX only; elsewhere it is dropped, as on Perfetto's TCP sockets).
 * Returns 0, or -1 if the connection is closed or over its hard limit (the
 * connection is then closing). */
int tg_conn_send(tg_conn *c, const void *body, size_t len, int fd);
/* Queues already framed bytes, moving them out of buf (zero-copy). */
int tg_conn_send_framed(tg_conn *c, struct evbuffer *buf);

/* During from's on_frame_head: moves the offered frame (header and body) to
 * to's output, as tg_conn_send would queue it (limits, watermarks, stats),
 * but without its fd and without copying it: socket connections hand over
 * the read blocks' bytes by reference (frames under 2 KiB are copied, and so
 * is every frame while more than 8 MiB of from's read blocks are still kept
 * alive by queues); bufferevent connections move whole evbuffer chains and
 * copy only a chain shared with a neighbouring frame. Returns 0, or -1 if
 * `to` is closing or over its hard limit, or out of memory (`to` is then
 * closing; the frame stays in from and is dropped when on_frame_head
 * returns 1). */
int tg_conn_forward_frame(tg_conn *from, tg_conn *to);
/* During on_frame_head: the offered frame's first bytes. Returns the whole
 * body in place (*avail = len) when it is contiguous, else up to cap bytes
 * copied into scratch (*avail = how many); NULL outside on_frame_head. */
const uint8_t *tg_conn_frame_peek(tg_conn *c, uint8_t *scratch, size_t cap, size_t *avail);
/* Whether the frame being dispatched (on_frame, on_frame_head) came with a
 * file descriptor (tg_conn_take_fd). */
int tg_conn_has_fd(const tg_conn *c);

/* During on_frame / on_frame_head: takes the file descriptor that came with
 * this frame; -1 if none (and outside those callbacks). The caller owns it.
 * An fd belongs to the frame holding the last byte of the read that carried
 * it (the kernel ends a read after the message with the fd, and senders pass
 * an fd with its frame's bytes), so frames read together with it, before or
 * after, never get it; one that nobody takes is closed once its frame was
 * dispatched. */
int tg_conn_take_fd(tg_conn *c);

/* Writes queued output to the socket now, from inside a callback, instead of
 * when the callback returns (for a caller that will not return to the loop
 * soon, e.g. a producer waiting for the service to free SMB chunks). What the
 * socket does not take waits for writability as usual. Bufferevent
 * connections are left to libevent. Returns 0, or -1 when the connection is
 * closing (a write error closes it, as from the loop). */
int tg_conn_write_now(tg_conn *c);

/* Starts the single teardown path; on_close follows from the loop. */
void tg_conn_close(tg_conn *c, const char *reason);
/* Stops reading, flushes queued output (bounded by send timeout, or 5 s),
 * then closes. */
void tg_conn_close_after_flush(tg_conn *c, const char *reason);
int tg_conn_is_closing(const tg_conn *c);
/* Frees the connection at once without running on_close: only for owners
 * tearing everything down (e.g. at shutdown), never from its callbacks. */
void tg_conn_destroy(tg_conn *c);

void tg_conn_pause_read(tg_conn *c);
void tg_conn_resume_read(tg_conn *c);

size_t tg_conn_output_len(const tg_conn *c);
int tg_conn_is_congested(const tg_conn *c);
/* How long queued output has waited with no sign of the peer reading: no byte of it written and
 * the socket's own send queue (SIOCOUTQ) not shorter than at the previous call (now_ms from
 * tg_mono_ms(); 0 when nothing is queued). Call it periodically: each call samples the socket. */
uint64_t tg_conn_output_stalled_ms(tg_conn *c, uint64_t now_ms);

/* Peer identity. For UNIX sockets uid/pid come from SO_PEERCRED; otherwise
 * uid is 0 and pid -1 (Perfetto's defaults). */
int tg_conn_is_unix(const tg_conn *c);
uid_t tg_conn_peer_uid(const tg_conn *c);
pid_t tg_conn_peer_pid(const tg_conn *c);
const char *tg_conn_peer_name(const tg_conn *c);
int tg_conn_fd(const tg_conn *c); /* -1 for bufferevent conns */
struct bufferevent *tg_conn_bev(const tg_conn *c); /* NULL for socket conns; still owned by c */

struct tg_conn_stats {
    uint64_t bytes_in, bytes_out, frames_in, frames_out;
    /* Input frames handed on with tg_conn_forward_frame, and the bytes of
     * them that went by reference (the rest were copied). */
    uint64_t frames_forwarded, bytes_forwarded_by_ref;
};
void tg_conn_get_stats(const tg_conn *c, struct tg_conn_stats *st);

struct event_base *tg_conn_base(const tg_conn *c);

#endif
