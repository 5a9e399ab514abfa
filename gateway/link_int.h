/* link_int.h: the internals shared by the gateway link files: links (link.c: the HTTP/2
 * connection, streams, resumption; link_control.c: the control stream; link_clock.c: clock sync), channels
 * (link_channel.c: the record layer between a socketpair and an HTTP/2 stream) and the fleet
 * (fleet.c: node names, listeners, peers, routing; fleet_lost.c: channels lost past the resume
 * window). docs/link-protocol.md is the contract these implement.
 *
 * Ownership: the fleet owns its links; a link owns its channels and its current connection
 * (transport + nghttp2 session). A connection can move to another link object when it resumes
 * that link. Channels outlive connections (they wait, bounded, for a resume).
 *
 * Threading: everything runs on the gateway's event loop thread. */
#ifndef TRACEGATE_GATEWAY_LINK_INT_H
#define TRACEGATE_GATEWAY_LINK_INT_H

#include <event2/util.h>
#include <nghttp2/nghttp2.h>
#include <stddef.h>
#include <stdint.h>

#include "fleet.h"
#include "gw.h"
#include "link_onepath.h"
#include "link_transport.h"
#include "tracegate/kcdata_node.h"

struct event;
struct evbuffer;
struct bufferevent;
struct link_channel;
struct tg_link;
struct Tracegate__Link__Control;   /* tracegate_link.pb-c.h */
struct Tracegate__Link__ClockSync;

#define LINK_CLOCK_ROUNDS 8
#define LINK_CHANNEL_BUFFER (8u << 20)  /* unacknowledged bytes per channel direction */
#define LINK_REC_REF_MIN (16u << 10)   /* records this big are sent by reference (link_channel.c) */
#define LINK_REC_HEAD_COPY 2048u        /* of which the first bytes are copied (struct link_rec) */
/* HTTP/2 per-stream receive window: one channel has this much in flight. 1 MiB held a channel to
 * 300-800 MB/s on this VM (both nodes half idle, waiting for WINDOW_UPDATEs across wake-ups);
 * 4 MiB carries 800-970. A stalled client holds its channel's window at the receiving node, less
 * than the sender's LINK_CHANNEL_BUFFER per channel. */
#define LINK_STREAM_WINDOW (4u << 20)
#define LINK_MAX_CHANNELS 256u         /* concurrent channels per link, whichever side opened them */
/* Links a channel may cross from its client's node to its target (the tracegate-hops header, Open's
 * hops): a node forwards a channel only while it has crossed fewer, and refuses one that claims
 * more (508), so two nodes whose node lists disagree for a moment cannot bounce a channel between
 * them until every link's channel limit is spent. */
#define LINK_MAX_HOPS 8u
/* SETTINGS_MAX_HEADER_LIST_SIZE we advertise, and enforce: nghttp2 only advertises it, so a peer
 * could send megabytes of headers (in CONTINUATION frames) that each stream would look through. */
#define LINK_MAX_HEADER_LIST 16384u
#define LINK_MAX_STREAMS 258u          /* SETTINGS_MAX_CONCURRENT_STREAMS: 256 channels, control, one spare */
/* Control messages the peer sent are read only while what we owe it on the control stream (our
 * answers: clock sync replies, OpenFailed) is under this: a peer that sends but does not read
 * (its stream window stays closed) stops being read, its window closes in turn, and neither
 * buffer grows without bound. An honest peer's window takes our few small messages at once. */
#define LINK_CTL_TX_HIGH (64u << 10)
/* HTTP/2 connection receive window: room for every stream's whole window at once. A client that
 * stops reading holds its stream's window (its bytes wait for it); with a smaller connection
 * window a few such streams would hold all of it and stall every other channel of the link.
 * Memory stays bounded by the stream windows. */
#define LINK_CONN_WINDOW (LINK_MAX_STREAMS * LINK_STREAM_WINDOW)
#define LINK_MAX_FRAME (256u << 10)     /* SETTINGS_MAX_FRAME_SIZE we take, and the largest DATA we send */
/* The capability (hello, docs/link-protocol.md §3.2) of nodes that take LOST records (§6). */
#define TG_LINK_CAP_LOST "lost-records"
#define LINK_ACK_RECORDS 32
#define LINK_ACK_BYTES (1024u * 1024u)

/* One transport + HTTP/2 session. */
struct link_conn {
    struct tg_fleet *fleet;
    struct tg_link *link;      /* NULL until the control stream said which link it is */
    struct tg_link_tr *tr;
    nghttp2_session *h2;
    int dialer;
    int up;                    /* transport up, h2 session created */
    int connect_ok;            /* dialer: the acceptor allows extended CONNECT */
    int32_t ctl_sid;           /* control stream (-1 until opened/accepted) */
    struct evbuffer *ctl_tx, *ctl_rx;
    size_t ctl_unconsumed;     /* control stream bytes received, not yet given back to its window */
    int ctl_paused;            /* ctl_tx reached LINK_CTL_TX_HIGH: control messages wait in ctl_rx */
    struct event *ctl_ev;      /* reads the waiting control messages from the loop once ctl_tx drained */
    int ctl_open;              /* the control request was answered 200 (dialer) / accepted (acceptor) */
    int dead;
    int in_callback;           /* inside nghttp2_session_mem_recv/mem_send: flushing waits for the outer call */
    char goaway[160];          /* the GOAWAY with an error nghttp2 sent (the peer broke the protocol or
                                * flooded it), as the reason the connection ends; "" if none */
    struct event *hello_ev;    /* acceptor: absolute deadline for the control stream */
    struct event *free_ev;
    struct stream_ctx *streams;
    int admitted;              /* acceptor: holds a gateway connection slot (ainfo) */
    struct tg_gw_client_info ainfo;
    struct tg_link_tr_info tinfo;
    char auth_principal[160];  /* acceptor: what the transport proved (cert), before the hello */
    unsigned auth_roles;
};

enum link_state { LINK_CONNECTING = 0, LINK_UP, LINK_DOWN, LINK_CLOSED };

struct clock_round {
    uint64_t peer[4], mine[4]; /* BOOTTIME, REALTIME, MONOTONIC, MONOTONIC_RAW */
    uint32_t phase;
};

struct tg_link {
    struct tg_fleet *fleet;
    struct tg_link *next, *prev;
    struct link_conn *conn;    /* NULL while down */
    struct link_conn *dialing; /* dialer: the connection being made */
    int dialer;
    enum link_state state;
    struct tg_fleet_peer *peer; /* dialer: how to dial again (owned by the fleet) */
    char peer_name[64];
    char principal[160];       /* the link's principal on this node */
    unsigned roles;            /* roles the peer's channels get on this node */
    uint8_t id[16];
    char id_hex[33];
    int has_id;
    struct tg_node_desc peer_desc;
    int have_desc;
    uint32_t machine_id;       /* from the authenticated node name */
    struct link_channel *channels;
    size_t n_channels;
    uint64_t next_cid;         /* dialer: odd ids; acceptor: even ids */
    struct event *ping_ev, *window_ev, *redial_ev, *clock_ev;
    uint64_t ping_sent_us, rtt_us;
    int ping_outstanding;
    uint64_t up_since_us, down_since_us;
    unsigned backoff_ms;
    struct clock_round rounds[LINK_CLOCK_ROUNDS];
    size_t n_rounds, next_round;
    uint64_t bytes_in, bytes_out;
    unsigned resumes;
    int clock_phase;           /* next ClockSync phase we send */
    char reach[32][64];        /* nodes the peer reaches directly (its Nodes message) */
    size_t n_reach;
    int claim_logged;          /* a channel's principal named a node the peer may not speak for */
    char last_error[160];
};

/* A large record kept apart (link_channel.c): its headers and the first bytes of its frame as a
 * copy (they go out in the same TLS record as the DATA frame's header, not as tiny records of
 * their own), the rest of the frame in `tail`, which unacked and DATA frames hold by reference. */
struct link_rec {
    struct evbuffer *tail;
    size_t head_len;
    uint8_t head[];
};

/* Per HTTP/2 stream: what its headers said and what it carries. */
/* One piece of a DATA frame handed to nghttp2 with NGHTTP2_DATA_FLAG_NO_COPY: bytes of the
 * channel's unacked records (by their absolute position; copied into the transport's output), a
 * whole large record (`by_ref`: record number rec, added to the output by reference), or an ACK
 * record's bytes (inline). */
struct link_nc_seg {
    uint64_t abs;
    uint64_t rec;
    uint32_t len;
    uint8_t by_ref;
    uint8_t n_ack, ack[31];
};
#define LINK_NC_SEGS 8

struct stream_ctx {
    struct stream_ctx *next, *prev; /* the conn's streams (freed with it: nghttp2 does not call back) */
    /* no-copy DATA (tg_link_channel_read_cb with nocopy set, then tg_link_channel_send_data): the
     * pieces of the frame nghttp2 is about to send */
    int nocopy;
    struct link_nc_seg nc[LINK_NC_SEGS];
    size_t nc_n;
    int kind; /* STREAM_UNKNOWN, STREAM_CONTROL, STREAM_CHANNEL */
    struct link_channel *ch;
    int status;
    int bad;   /* a header was too long or repeated */
    size_t header_bytes; /* of its header list so far, as HTTP/2 counts them (name + value + 32 each) */
    char method[16], protocol[32], path[128], channel[24], received[24], link_id[40], resumed[4], node[64];
    char traceparent[64];
    char principal[160], authorization[600], error[128], hops[8];
};
enum { STREAM_UNKNOWN = 0, STREAM_CONTROL = 1, STREAM_CHANNEL = 2 };

/* ---- link.c ---- */
/* A new connection: dialed for `link` (dialer) or accepted (acceptor, link NULL until hello). */
struct link_conn *tg_link_conn_new(struct tg_fleet *f, struct tg_link *link, int dialer);
/* Transport callbacks' argument is the conn; these are its callbacks. */
extern const struct tg_link_tr_cbs tg_link_conn_tr_cbs;
void tg_link_conn_free(struct link_conn *c);
/* Pushes pending HTTP/2 output to the transport. */
void tg_link_conn_flush(struct link_conn *c);
/* Dialer: sends the control request once the acceptor allowed extended CONNECT. */
void tg_link_send_control_request(struct link_conn *c);
struct tg_link *tg_link_new_dialer(struct tg_fleet *f, struct tg_fleet_peer *peer);
void tg_link_start_dial(struct tg_link *l);   /* fleet.c */
void tg_link_schedule_redial(struct tg_link *l);
void tg_link_free(struct tg_link *l);
/* Closes the link for good (Goodbye, channels closed). */
void tg_link_close(struct tg_link *l, const char *why);
/* Sends an Open request (acceptor) for channel ch. */
int tg_link_send_open(struct tg_link *l, struct link_channel *ch);
/* Submits the channel's HTTP/2 request (dialer). */
int tg_link_submit_channel(struct tg_link *l, struct link_channel *ch);
/* The connection is broken (why is logged): its link goes down and waits for a resume. */
void tg_link_conn_lost(struct link_conn *c, const char *why);
/* ---- link_control.c ---- */
/* Queues a control message on the connection's control stream; 0, or -1 without one. */
int tg_link_send_control(struct link_conn *c, const struct Tracegate__Link__Control *m);
/* nghttp2's read callback of the control stream: our queued control messages. */
ssize_t tg_link_ctl_read_cb(nghttp2_session *s, int32_t sid, uint8_t *buf, size_t len, uint32_t *flags,
                            nghttp2_data_source *src, void *user);
/* Sends our Hello (node descriptor) on a connection that just came up. */
void tg_link_send_hello(struct link_conn *c);
/* Sends the list of nodes this node reaches (Nodes) to the link's peer. */
void tg_link_send_nodes(struct tg_link *l);
/* DATA of the control stream: buffered and read as control messages while the peer takes our
 * answers (LINK_CTL_TX_HIGH). */
void tg_link_on_control_data(struct link_conn *c, const uint8_t *data, size_t len);
/* c->ctl_ev: reads the control messages that waited for the peer to take our answers. */
void tg_link_ctl_resume_cb(evutil_socket_t fd, short what, void *arg);
/* ---- link_clock.c ---- */
/* Clock offset estimate (peer minus us, BOOTTIME, ns) from the rounds tg_link_clock_rounds keeps,
 * as trace processor derives it from the same records; 0 if none. */
int tg_link_clock_offset(const struct tg_link *l, int64_t *offset_ns);
/* The recorded whole rounds (a PING record, then its UPDATE) fit for estimating the peer's clock,
 * as consecutive records into peer/mine (at most max records, in the order recorded); returns the
 * number of records. A round's trip time is the longer of the two sides' measures (PING to UPDATE
 * on the peer's clock, PING to UPDATE received on ours); a round that took more than twice the
 * shortest one plus 1 ms is left out: either side waiting for a CPU inside a round adds half the
 * wait to that round's estimate. Of the rest, the shortest trips are taken first, and a round
 * only if it is at least 30 s (peer BOOTTIME) from every round taken: trace processor reads any
 * two consecutive records under 30 s apart as a round trip, and a round's UPDATE followed by the
 * next round's PING would add half the time between them (docs/link-protocol.md §7). */
size_t tg_link_clock_rounds(const struct tg_link *l, uint64_t (*peer)[4], uint64_t (*mine)[4], size_t max);
/* A ClockSync the peer sent: answered (PING -> REPLY, REPLY -> UPDATE) and recorded. */
void tg_link_on_clock_sync(struct tg_link *l, const struct Tracegate__Link__ClockSync *cs);
/* The link's clock timer (l->clock_ev): a round now, the next one scheduled. */
void tg_link_clock_cb(evutil_socket_t fd, short what, void *arg);

/* ---- link_channel.c ---- */
/* Channel kinds (struct link_channel.producer): an IPC connection to the consumer or producer
 * port, or a raw byte stream to the node's ADB server (IPC records then carry any bytes). */
#define LINK_KIND_CONSUMER 0
#define LINK_KIND_PRODUCER 1
#define LINK_KIND_ADB 2
static inline const char *link_kind_name(int kind)
{
    return kind == LINK_KIND_ADB ? "adb" : kind == LINK_KIND_PRODUCER ? "producer" : "consumer";
}

struct link_channel {
    struct tg_link *link;
    struct link_channel *next, *prev;
    uint64_t id;
    int producer;             /* the kind: LINK_KIND_CONSUMER, _PRODUCER or _ADB */
    char node[64];            /* the target node named in the path */
    char principal[160];      /* who is behind it on the opening node */
    unsigned hops;            /* links it crosses up to the far end of this one (1: its client is here) */
    int inbound;              /* the local side is a gateway client (we accepted the channel) */
    int32_t sid;              /* HTTP/2 stream, -1 when unbound */
    int ever_bound, response_ok, finished;
    struct bufferevent *local;
    /* to the peer */
    struct evbuffer *unacked; /* encoded records not acknowledged yet */
    size_t tx_off;            /* bytes of unacked handed to nghttp2 on the current stream */
    size_t tx_next;           /* records of unacked handed out whole on the current stream */
    size_t tx_rec_left;       /* bytes of record tx_next still to hand out (0: at a record boundary) */
    uint32_t *rec_len;        /* ring: encoded length of each unacked IPC record (attachment included) */
    struct link_rec **rec_ref; /* ring beside rec_len: a large record's bytes on their own, which
                                * unacked and DATA frames hold by reference (NULL: small record) */
    size_t rec_head, rec_count, rec_cap;
    uint64_t tx_acked, tx_count;
    uint64_t unacked_base;    /* bytes ever drained from unacked: absolute positions for no-copy */
    struct evbuffer *ack_out;
    int ack_partial;          /* part of ack_out was handed out: append, never replace */
    int local_eof, eof_sent;
    int local_finished;       /* the local peer was given its end of stream */
    /* from the peer */
    struct evbuffer *rx;
    uint64_t rx_count, rx_acked_sent;
    size_t rx_since_ack_bytes, rx_since_ack_recs, unconsumed;
    int peer_eof;
    int lost_seen;            /* a LOST record arrived (a second one is a protocol error) */
    int local_gone;           /* the local socket failed (its peer closed): the peer's data is dropped */
    struct event *ack_ev, *open_ev;
    struct stream_ctx *ctx;   /* of the bound stream (its ch points back), NULL when unbound */
    struct link_op op;        /* OnePath: the channel's span context, a pending attachment */
    char traceparent[56];     /* W3C context the opening CONNECT carries ("" = none) */
};

/* Creates a channel. With other_bev, its local side is a bufferevent pair and *other_bev receives
 * the end for the gateway (tg_conn_new_bev; the pair moves frames without syscalls or copies);
 * without, a socketpair and *other_fd (a byte stream spliced to a socket: ADB). */
struct link_channel *tg_link_channel_new(struct tg_link *l, uint64_t id, const char *node, int producer,
                                         const char *principal, int inbound, int *other_fd,
                                         struct bufferevent **other_bev);
void tg_link_channel_free(struct link_channel *ch);
/* Closes the channel now (local peer sees EOF); reason logged; its stream, if any, is reset with
 * CANCEL (abort) or error_code (reset). The channel is freed before the RST_STREAM is sent. */
void tg_link_channel_abort(struct link_channel *ch, const char *reason);
void tg_link_channel_reset(struct link_channel *ch, const char *reason, uint32_t error_code);
struct link_channel *tg_link_channel_find(struct tg_link *l, uint64_t id);
/* Binds to an HTTP/2 stream; peer_received = what the peer said it got (resume), or 0. */
void tg_link_channel_bind(struct link_channel *ch, int32_t sid, uint64_t peer_received);
/* The connection is gone: forget the stream, keep the data. */
void tg_link_channel_unbind(struct link_channel *ch);
/* Bytes of the stream arrived. Returns 0, or -1 on a protocol error (the caller resets). */
int tg_link_channel_on_data(struct link_channel *ch, const uint8_t *data, size_t len);
void tg_link_channel_on_peer_eof(struct link_channel *ch);
/* nghttp2 data provider read callback for channel streams. With the stream's nocopy set it
 * copies nothing: it notes the pieces and sets NGHTTP2_DATA_FLAG_NO_COPY, and
 * tg_link_channel_send_data then writes the frame. */
ssize_t tg_link_channel_read_cb(nghttp2_session *s, int32_t sid, uint8_t *buf, size_t len, uint32_t *flags,
                                nghttp2_data_source *src, void *user);
/* Writes the no-copy DATA frame noted by the last read: framehd (9 bytes), then `length` bytes,
 * copied once from the records into out. Returns 0, or -1 when the pieces are no longer there
 * (the channel is gone, or the peer acknowledged bytes never sent): the caller resets the stream. */
int tg_link_channel_send_data(struct stream_ctx *x, const uint8_t *framehd, size_t length, struct evbuffer *out);
/* The stream closed (error_code 0 = cleanly). */
void tg_link_channel_on_close(struct link_channel *ch, uint32_t error_code);
/* Sends a LOST record (docs/link-protocol.md §6): what stood behind this end of consumer channel
 * ch is gone past a resume window, and `key` is the Detach key its tracing session is (or is to
 * be) kept under. It is numbered and kept like an IPC record (resent after a resume), in order
 * with them, before the channel's end. Returns 0, or -1 when the peer does not take LOST records
 * (an older node), the channel already ended, or out of memory. */
int tg_link_channel_send_lost(struct link_channel *ch, const char *key);

/* ---- fleet.c ---- */
struct tg_gw *tg_fleet_gw(struct tg_fleet *f);
struct event_base *tg_fleet_base(struct tg_fleet *f);
const char *tg_fleet_node_name(const struct tg_fleet *f);
/* The fleet's links (a list through tg_link.next) and its federated fan-out (or NULL). */
struct tg_fanout;
struct tg_link *tg_fleet_links(struct tg_fleet *f);
struct tg_fanout *tg_fleet_fanout(struct tg_fleet *f);
/* The link to node `name` (UP or DOWN within its window), or NULL. */
struct tg_link *tg_fleet_link_by_name(struct tg_fleet *f, const char *name, const struct tg_link *except);
struct tg_link *tg_fleet_link_by_id(struct tg_fleet *f, const uint8_t id[16]);
void tg_fleet_add_link(struct tg_fleet *f, struct tg_link *l);
void tg_fleet_remove_link(struct tg_fleet *f, struct tg_link *l);
/* An inbound channel: hands the gateway end (fd for ADB, else bev; ownership passes) to
 * tg_gw_accept or the ADB server. Returns 0, or an HTTP status. */
int tg_fleet_accept_channel(struct tg_fleet *f, struct tg_link *l, struct link_channel *ch, int fd,
                            struct bufferevent *bev);
/* Whether a channel to node `name` can be served by this node (itself or a reachable node). */
int tg_fleet_can_route(struct tg_fleet *f, const char *name);
/* Whether node `name` is reached over a link that is up now (directly, or through its peer). */
int tg_fleet_route_up(struct tg_fleet *f, const char *name);
/* Authenticates a control request (acceptor). Returns roles (0: refused, *status set). */
unsigned tg_fleet_auth_link(struct tg_fleet *f, struct link_conn *c, const char *authorization, const char *node,
                            char *principal, size_t plen, int *status, const char **why);
const struct tg_fleet_config *tg_fleet_config_of(const struct tg_fleet *f);
/* The host a --peer/--hub URL names (without user and port). */
const char *tg_fleet_peer_host(const struct tg_fleet_peer *p);
void tg_fleet_link_state_changed(struct tg_fleet *f, struct tg_link *l);
/* The peer of l said which nodes it reaches (l->reach): status, and federated sessions waiting
 * for a node behind it. */
void tg_fleet_reach_changed(struct tg_fleet *f, struct tg_link *l);
/* Rebuilds the node list /api/status shows (a new RTT or clock reading): at once, or within
 * 50 ms when it was rebuilt less than that ago (a peer cannot make it render once per message). */
void tg_fleet_refresh_status(struct tg_fleet *f);
/* How often the /api/status and /metrics snapshot was rebuilt (tests: a peer cannot drive it). */
uint64_t tg_fleet_status_rebuilds(const struct tg_fleet *f);
/* A connection is being freed: gives back its gateway slot; the end of --link-stdio ends us. */
void tg_fleet_conn_gone(struct tg_fleet *f, struct link_conn *c);
/* ---- fleet_lost.c ---- */
/* "tracegate-link-<opener node>-<channel id hex>". */
void tg_fleet_detach_key(const char *opener, uint64_t channel_id, char *key, size_t len);
/* Past the resume window: a consumer channel this node accepted (its local end is a gateway
 * client here) gets its tracing session Detached upstream with the key tg_fleet_detach_key()
 * makes (logged), so it keeps running and can be collected when the link is back. */
void tg_fleet_detach_channel(struct tg_fleet *f, struct tg_link *l, struct link_channel *ch);
/* Past the resume window: consumer channel ch, which this node opened, closes; the far node
 * keeps its tracing session under tg_fleet_detach_key(this node, ch->id). Tells the federated
 * fan-out (it may Attach again when the link is back). */
void tg_fleet_channel_lost(struct tg_fleet *f, struct tg_link *l, struct link_channel *ch);
/* A LOST record with `key` arrived on consumer channel ch: for one this node accepted, the
 * tracing session behind it is Detached under key (or the record is passed on to the next node
 * when the session is itself routed over a link); for one it opened, the federated fan-out marks
 * the node lost with that key, or the record is passed back toward the client over the link it
 * came from, or the key is logged for the local client. */
void tg_fleet_channel_lost_record(struct tg_fleet *f, struct tg_link *l, struct link_channel *ch, const char *key);
/* As tg_fleet_route (a link channel's bufferevent pair end in out->bev, else a socket in
 * out->fd), also giving the id of the channel it opened (0: not a link channel) and the node at
 * the other end of the link it took ("" for this node or a raw node). 0 or -1. */
int tg_fleet_connect_channel(struct tg_fleet *f, const char *node, int producer, const struct tg_gw_client_info *who,
                             struct tg_gw_route *out, uint64_t *channel_id, char *link_peer, size_t lplen, char *err,
                             size_t errlen);

#endif
