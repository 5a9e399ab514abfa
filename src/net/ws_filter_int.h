/* ws_filter_int.h: internal to src/net/ws_filter*.c: the state of one WebSocket filter (client or
 * server side) and the framing core's functions the two sides' constructors and ends use.
 *
 * Threading: the filter's event loop thread; the server counters are atomics any thread reads. */
#ifndef TRACEGATE_NET_WS_FILTER_INT_H
#define TRACEGATE_NET_WS_FILTER_INT_H

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "net/ws_filter.h"

#define TG_WSF_LOG "ws-client"
#define TG_WSF_SERVER_LOG "ws"
#define CLOSE_NORMAL 1000
#define CLOSE_PROTOCOL 1002
#define CLOSE_UNACCEPTABLE 1003
#define CLOSE_TOO_BIG 1009
#define MAX_CONTROL 125u        /* payload of a control frame (RFC 6455 5.5) */
#define CLIENT_PONG_ROOM 65536u /* a client's PONG waits while this much of its output does */
#define STAGE_HIGH TG_WS_SERVER_STAGE_HIGH /* server: the socket bufferevent's share (ws_filter.h) */

enum { OP_CONT = 0x0, OP_TEXT = 0x1, OP_BINARY = 0x2, OP_CLOSE = 0x8, OP_PING = 0x9, OP_PONG = 0xA };
enum { S_HANDSHAKE, S_OPEN, S_CLOSED, S_FAILED };

struct wsf {
    struct bufferevent *bev; /* the filter */
    struct event *kick;      /* flushes the output once the input side made something to send */
    int kick_pending;        /* kick is active and holds a reference on bev */
    int state;
    char accept[TG_WS_ACCEPT_LEN + 1];
    char proto[64];
    char what[640];
    size_t max_message, out_message;
    /* receiving */
    uint64_t left;       /* payload bytes of the current data frame still to come */
    int in_message;      /* a data message is open (continuations may follow) */
    uint64_t msg_bytes;  /* bytes of it so far */
    int fin;             /* the current data frame ends its message */
    /* control frames to send ahead of data: the close answer, and the PONG to the latest PING */
    struct evbuffer *ctl_out;
    int close_sent;
    uint8_t pong[MAX_CONTROL];
    size_t pong_len;
    int pong_due;
    /* server side */
    int server;
    uint8_t mask[4];   /* the current client frame's key */
    unsigned mask_pos; /* where the next payload byte falls in it (mod 4) */
    unsigned close_code; /* what our close frame says at the end (0: 1000) */
    char close_why[96];
    struct bufferevent *under; /* the socket bufferevent, ours to free */
    struct tg_write_through *wt;
    int out_full;              /* the socket's share is full (counted once per filling) */
    struct evbuffer_cb_entry *staged_cb; /* kicks a waiting PONG out as the socket drains */
};

/* Counters of the server side (tg_ws_server_stats). */
struct tg_wsf_server_counters {
    atomic_ullong open, out_messages, out_bytes, out_full, in_messages;
    atomic_size_t staged_peak;
};
extern struct tg_wsf_server_counters tg_wsf_server;

/* ws_filter.c: the framing core. The filter callbacks (bufferevent_filter_new's input, output and
 * free); the kick event's callback and the kick itself (a flush from the loop; only while the
 * filter is alive); a failure (logged, reported above as BEV_EVENT_ERROR; returns -1); one frame
 * appended (client: masked copy; server: header and chains moved). */
enum bufferevent_filter_result tg_wsf_in(struct evbuffer *src, struct evbuffer *dst, ev_ssize_t limit,
                                         enum bufferevent_flush_mode mode, void *arg);
enum bufferevent_filter_result tg_wsf_out(struct evbuffer *src, struct evbuffer *dst, ev_ssize_t limit,
                                          enum bufferevent_flush_mode mode, void *arg);
void tg_wsf_free(void *arg);
void tg_wsf_kick_cb(evutil_socket_t fd, short what, void *arg);
void tg_wsf_kick(struct wsf *f);
int tg_wsf_fail(struct wsf *f, const char *why);
int tg_wsf_put_frame(const struct wsf *f, struct evbuffer *dst, int opcode, struct evbuffer *src, const void *data,
                     size_t n);

/* ws_filter_client.c: the server's answer to the upgrade: 1 when it checked out (removed from
 * src), 0 while it is incomplete, -1 on failure (logged). */
int tg_wsf_handshake(struct wsf *f, struct evbuffer *src);

/* ws_filter_server.c: the server side's end as the filter goes (ws_filter.h). */
void tg_wsf_server_end(struct wsf *f);

#endif
