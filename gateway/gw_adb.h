/* gw_adb.h: /adb WebSockets as byte pipes to an ADB server (what Perfetto's
 * websocket_bridge does for the UI's "ADB + WebSocket" target), on the
 * gateway's libevent thread.
 *
 * The WebSocket thread accepts an /adb upgrade (Origin, role: gw_ws_policy.h)
 * and hands its socketpair end over (gw_ws_handoff.h) with the client's info
 * and the link's close note. tg_gw_adb_accept() opens a byte stream to the
 * ADB server through the target seam (gw_adb_target.h) and copies bytes both
 * ways unchanged: whatever the client sends (text or binary messages) goes
 * to the ADB server, whatever the server sends goes back as binary messages.
 *
 * Flow control: in each direction at most `high` bytes wait in the gateway
 * for the slower side; past that, reading the faster side stops (counted in
 * tracegated_adb_paused_total) until the queue is below `low`. The kernel's
 * socket buffers then fill and TCP (or the socketpair, and so the WebSocket
 * reader) pushes back on the sender. So a browser that stops reading while
 * the ADB server streams costs at most about 2 x (high + one read) bytes per
 * pipe here, plus one message on the WebSocket thread (ws_link.h).
 *
 * Close: the ADB server closing → what is queued reaches the client, then
 * the WebSocket closes normally (1000). The client closing → what is queued
 * reaches the server, then its connection closes. The ADB server unreachable
 * (or the node unknown, or too many pipes) → the WebSocket closes with 1011
 * and the reason ("ADB server tcp:127.0.0.1:5037 not reachable: Connection
 * refused"). Every pipe is logged with the client's principal when it opens
 * and closes (bytes each way).
 *
 * Threading: the libevent thread, except tg_gw_adb_metrics_text and
 * tg_gw_adb_stats (any thread: atomics). */
#ifndef TRACEGATE_GATEWAY_GW_ADB_H
#define TRACEGATE_GATEWAY_GW_ADB_H

#include <stddef.h>
#include <stdint.h>

#include "gw.h"
#include "tracegate/addr.h"

struct event_base;
struct tg_gw_adb;
struct tg_gw_adb_target;
struct tg_ws_close_note;

#define TG_GW_ADB_HIGH (256u * 1024u)  /* default queue per direction before the other side is paused */
#define TG_GW_ADB_LOW (64u * 1024u)    /* ... and resumed */
#define TG_GW_ADB_MAX_PIPES 128        /* default cap on concurrent /adb pipes */

struct tg_gw_adb_config {
    const struct tg_addr *server; /* the local ADB server */
    const char *server_text;      /* how it was configured, for messages (NULL: the address) */
    const char *node_name;        /* this node's name (NULL: none) */
    size_t high, low;             /* 0 = the defaults above */
    unsigned max_pipes;           /* 0 = TG_GW_ADB_MAX_PIPES */
};

struct tg_gw_adb_stats {
    uint64_t pipes;           /* open now */
    uint64_t pipes_total;     /* opened since start */
    uint64_t failed_total;    /* closed because the ADB server (or node) could not be reached, or the cap */
    uint64_t bytes_to_adb, bytes_to_client;
    uint64_t paused_to_adb;   /* client reads paused: the ADB server was slow */
    uint64_t paused_to_client; /* ADB server reads paused: the client was slow */
    uint64_t buffered;        /* bytes the gateway holds for every pipe, now */
    uint64_t buffered_max;    /* the most one pipe has held at once */
};

/* NULL on allocation failure. cfg is copied. */
struct tg_gw_adb *tg_gw_adb_new(struct event_base *base, const struct tg_gw_adb_config *cfg);
/* Closes every pipe (their WebSockets close with 1001) and frees. */
void tg_gw_adb_free(struct tg_gw_adb *a);

/* Takes fd (a socketpair end whose other end is the WebSocket). note: the
 * link's close note (a reference is taken). Always consumes fd. */
void tg_gw_adb_accept(struct tg_gw_adb *a, int fd, const struct tg_gw_client_info *info,
                      struct tg_ws_close_note *note);

/* The seam to the ADB servers, e.g. to set a router for other nodes. */
struct tg_gw_adb_target *tg_gw_adb_target_of(struct tg_gw_adb *a);

void tg_gw_adb_stats(struct tg_gw_adb *a, struct tg_gw_adb_stats *out);
/* Prometheus text of the tracegated_adb_* metrics; malloc'd, NULL on
 * allocation failure. */
char *tg_gw_adb_metrics_text(struct tg_gw_adb *a);

#endif
