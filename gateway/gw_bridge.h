/* gw_bridge.h: bridge sessions (one client connection paired with one
 * upstream connection), the frame-filter hooks other gateway features plug
 * into, and gateway-local services.
 *
 * What the bridge does with each frame (see docs/gateway.md):
 *  client -> upstream: rate limit; strict, closed scan (undecodable
 *    frames, repeated or re-typed routing fields, two `msg` members,
 *    unknown envelope fields, reply-type frames and reserved request ids
 *    close the client);
 *    SetPeerIdentity is dropped; until the client has roles only
 *    TracegateAuth may be bound/called; gateway-local services are answered
 *    here; BindService and InvokeMethod are checked against the role ACL by
 *    name (a denied call gets InvokeMethodReply{success:false} from the
 *    gateway, the connection stays open); then the filters run; then the
 *    frame is forwarded byte for byte (with its fd, if any).
 *  Frames are forwarded without copying when they can be: tg_conn offers
 *    each frame before pulling it up (on_frame_head); the bridge scans its
 *    first bytes with the same strict checks (tg_frame_scan_prefix) and, for
 *    an InvokeMethod it would relay unchanged or a reply/error for the client,
 *    with no fd and no filter needing the bytes, moves it to the other side
 *    by reference (tg_conn_forward_frame). Every other frame (fd-carrying,
 *    binds, local services, the gateway's own replies, refused frames, frames
 *    a filter reads or rewrites) takes the copying path described here.
 *  upstream -> client: strict scan (a frame the gateway might read
 *    differently from the client closes the session, as does a method
 *    table listing an id or a name twice); replies to the gateway's own calls are routed to
 *    their callbacks; BindServiceReply teaches the session the method names;
 *    final replies end the latency measurement; then the filters run (in
 *    reverse order); then the frame is forwarded.
 *
 * Filters (on_down_frame / on_up_frame) are how the remote-producer SMB
 * bridge and session survival hook in without touching the core. Each
 * returns FORWARD (the bridge forwards the frame unchanged), CONSUME (the
 * filter dealt with it: dropped, answered, or sent a rewritten frame with
 * tg_gw_session_send_*) or CLOSE (the session is closed with
 * frame->close_reason). Filters see only frames the ACL allowed. A frame's
 * bytes are only valid during the call: to act on it later (e.g. retry
 * when an SMB has room), copy it, return CONSUME, stop the sender with
 * tg_gw_session_hold_down/up(s, 1) (reading pauses after the current frame,
 * so order is kept), and send the copy and release the hold when ready.
 *
 * Lifetime: sessions are freed from the event loop after both connections
 * are gone (never inside a callback), so a session pointer stays valid for
 * the whole callback that received it. A filter whose on_down_close returns
 * 1 keeps the session alive without a client ("detached"); frames from
 * upstream are then offered to on_up_frame with no client to forward to
 * (unconsumed ones are dropped and counted).
 *
 * Threading: everything here runs on the gateway's event loop thread. */
#ifndef TRACEGATE_GATEWAY_GW_BRIDGE_H
#define TRACEGATE_GATEWAY_GW_BRIDGE_H

#include <stddef.h>
#include <stdint.h>

#include "gw.h"
#include "tracegate/conn.h"
#include "tracegate/frame.h"

struct tg_gw_session;

/* Names of the gateway-local services (src/protos/tracegate_gateway.proto). */
#define TG_GW_SVC_AUTH "TracegateAuth"
#define TG_GW_SVC_SESSION "TracegateSession"
#define TG_GW_SVC_FLEET "TracegateFleet"
#define TG_GW_SVC_GATEWAY "TracegateGateway"
/* Service ids the gateway hands out for local services (upstream ids are small). */
#define TG_GW_LOCAL_SERVICE_ID_BASE 0x40000000u
/* Request ids with the top bit set belong to the gateway's own calls; a
 * client that uses one is disconnected. */
#define TG_GW_PRIVATE_REQUEST_ID (UINT64_C(1) << 63)

/* ---- frame filters ---- */
enum tg_gw_verdict { TG_GW_FORWARD = 0, TG_GW_CONSUME = 1, TG_GW_CLOSE = 2 };

struct tg_gw_frame {
    /* The IPCFrame, without the 4-byte header; valid during the call. NULL when
     * the bridge moves the frame without its bytes at hand (every filter's
     * needs_body said no): len and info are still set. */
    const uint8_t *body;
    size_t len;
    const struct tg_frame_info *info; /* scanned fields (request id, msg kind, ids, payload) */
    /* InvokeMethod: the bound service and method names. InvokeMethodReply and
     * RequestError: the method of the request they answer (NULL if unknown or
     * untracked; "other" once more than TG_GW_METRICS_MAX_METHODS distinct
     * methods were seen). */
    const char *service;
    const char *method;
    /* File descriptor that arrived with the frame, or -1. A filter that keeps
     * it sets fd = -1 (it then owns it); otherwise the bridge forwards or
     * closes it. */
    int fd;
    const char *close_reason; /* set with TG_GW_CLOSE (default "closed by filter") */
};

struct tg_gw_filter {
    const char *name;
    /* Called when a session is created (before its first frame). Return 1 to
     * take part in this session (with per-session *state), 0 to stay out. */
    int (*attach)(struct tg_gw_session *s, void *ctx, void **state);
    /* client -> upstream. Optional. */
    enum tg_gw_verdict (*on_down_frame)(struct tg_gw_session *s, struct tg_gw_frame *f, void *ctx, void *state);
    /* upstream -> client. Optional. */
    enum tg_gw_verdict (*on_up_frame)(struct tg_gw_session *s, struct tg_gw_frame *f, void *ctx, void *state);
    /* The client connection closed (reason is the connection's). Return 1 to
     * keep the session and its upstream alive (detached). Optional. */
    int (*on_down_close)(struct tg_gw_session *s, const char *reason, void *ctx, void *state);
    /* The upstream connection closed. Optional. */
    void (*on_up_close)(struct tg_gw_session *s, const char *reason, void *ctx, void *state);
    /* The session is being freed: release state. Optional. */
    void (*detach)(struct tg_gw_session *s, void *ctx, void *state);
    /* Optional: whether on_down_frame (up == 0) or on_up_frame (up == 1)
     * may read or keep this frame's bytes; only `fi` is known. Must not
     * change anything. Returning 0 lets the bridge forward the frame without
     * copying it (the filter then gets body == NULL); a filter without
     * needs_body always gets the bytes, and so every frame it sees takes the
     * copying path. */
    int (*needs_body)(struct tg_gw_session *s, const struct tg_frame_info *fi, int up, void *ctx, void *state);
};

/* Registers a filter for every session created afterwards (at most 8;
 * call at startup). Down frames go through filters in registration order,
 * up frames in reverse order. Returns 0 or -1. */
int tg_gw_add_filter(struct tg_gw *gw, const struct tg_gw_filter *f, void *ctx);

/* ---- gateway-local services ---- */
struct tg_gw_local_method {
    const char *name;
    /* Must answer with tg_gw_session_reply() (now or later) unless drop_reply. */
    void (*fn)(struct tg_gw_session *s, uint64_t request_id, const uint8_t *args, size_t len, int drop_reply,
               void *ctx);
};
struct tg_gw_local_service {
    const char *name; /* must start with "Tracegate" (never forwarded upstream) */
    const struct tg_gw_local_method *methods;
    size_t n_methods;
    void *ctx;
};
/* Registers a local service (the struct must outlive the gateway). The ACL
 * (tg_gw_acl_allows) still decides who may call it. Returns 0 or -1. */
int tg_gw_register_local_service(struct tg_gw *gw, const struct tg_gw_local_service *svc);

/* ---- sessions: queries ---- */
uint64_t tg_gw_session_id(const struct tg_gw_session *s);
struct tg_gw *tg_gw_session_gw(const struct tg_gw_session *s);
const struct tg_gw_client_info *tg_gw_session_info(const struct tg_gw_session *s);
unsigned tg_gw_session_roles(const struct tg_gw_session *s);
/* The roles the session had when its upstream was opened (0 before): the identity the service
 * knows it by (privileged when they held admin) was made from them and never changes. */
unsigned tg_gw_session_up_roles(const struct tg_gw_session *s);
tg_conn *tg_gw_session_down(const struct tg_gw_session *s); /* NULL when detached */
tg_conn *tg_gw_session_up(const struct tg_gw_session *s);   /* NULL until first needed */
int tg_gw_session_detached(const struct tg_gw_session *s);
/* Names learned from BindServiceReply; NULL if unknown. */
const char *tg_gw_session_service_name(const struct tg_gw_session *s, uint32_t service_id);
const char *tg_gw_session_method_name(const struct tg_gw_session *s, uint32_t service_id, uint32_t method_id);
/* Ids of a bound upstream service/method by name; 0 if not bound/listed. */
uint32_t tg_gw_session_service_id(const struct tg_gw_session *s, const char *service);
uint32_t tg_gw_session_method_id(const struct tg_gw_session *s, const char *service, const char *method);
/* Detached (kept) sessions of a principal. */
size_t tg_gw_kept_sessions_of(const struct tg_gw *gw, const char *principal);
/* Routes this connection to node `node` ("" = this node). Only before its
 * upstream was opened; returns 0 or -1. */
int tg_gw_session_set_node(struct tg_gw_session *s, const char *node);
/* Outstanding relayed calls (replies still expected). */
size_t tg_gw_session_pending_calls(const struct tg_gw_session *s);

/* ---- sessions: actions ---- */
/* Opens the upstream connection if it is not open yet; NULL on failure (the
 * session is then closing). */
tg_conn *tg_gw_session_ensure_up(struct tg_gw_session *s);
/* Queue one frame toward the client / the upstream, with backpressure
 * accounting and metrics. fd >= 0 is duplicated. Return 0 or -1. */
int tg_gw_session_send_down(struct tg_gw_session *s, const uint8_t *body, size_t len, int fd);
int tg_gw_session_send_up(struct tg_gw_session *s, const uint8_t *body, size_t len, int fd);
/* Answers a client request (InvokeMethodReply); success=0 sends a Reject. */
int tg_gw_session_reply(struct tg_gw_session *s, uint64_t request_id, int success, int has_more,
                        const uint8_t *reply, size_t len);
/* The gateway's own services: answers with msg packed (success, no more parts), or a Reject when
 * memory runs out. A reply that carries a secret packs it itself and wipes its buffer. */
struct ProtobufCMessage;
int tg_gw_session_reply_msg(struct tg_gw_session *s, uint64_t request_id, const struct ProtobufCMessage *msg);
/* The gateway's own calls upstream (private request ids). cb gets every
 * reply part; when the upstream closes, pending callbacks get success=0,
 * has_more=0 once. */
typedef void (*tg_gw_reply_fn)(struct tg_gw_session *s, int success, int has_more, const uint8_t *reply,
                               size_t len, void *arg);
typedef void (*tg_gw_bind_fn)(struct tg_gw_session *s, int success, uint32_t service_id, void *arg);
int tg_gw_session_bind_up(struct tg_gw_session *s, const char *service, tg_gw_bind_fn cb, void *arg);
int tg_gw_session_call_up(struct tg_gw_session *s, uint32_t service_id, uint32_t method_id, const uint8_t *args,
                          size_t len, int fd, tg_gw_reply_fn cb, void *arg);
/* Extra read pauses a filter may hold (reference-free on/off). */
void tg_gw_session_hold_down(struct tg_gw_session *s, int hold);
void tg_gw_session_hold_up(struct tg_gw_session *s, int hold);
/* Closes the session (both connections; the client's pending output is
 * flushed first when flush != 0). */
void tg_gw_session_close(struct tg_gw_session *s, const char *reason, int flush);
/* Session survival: moves the client connection of `from` (and its
 * identity) into the detached session `to`; `from` is then closed (its
 * upstream, if any, is dropped). Returns 0, or -1 if `to` is not detached or
 * `from` has no client. */
int tg_gw_session_transfer_down(struct tg_gw_session *from, struct tg_gw_session *to);

/* ---- used by gw.c ---- */
struct tg_gw_listener;
/* Creates a session for an accepted client (the limits were checked). */
struct tg_gw_session *tg_gw_session_new(struct tg_gw *gw, tg_conn *down, const struct tg_gw_client_info *info,
                                        struct tg_gw_listener *l);
/* Periodic checks: slow clients, idle clients. Adds the queued bytes. */
void tg_gw_session_sweep(struct tg_gw_session *s, uint64_t now_us, uint64_t *to_clients, uint64_t *to_service);
/* The periodic sweep of the gateway: tg_gw_session_sweep on every session that may have output
 * queued (all of them when an idle timeout is set); idle sessions are not visited. */
void tg_gw_sessions_sweep(struct tg_gw *gw, uint64_t now_us, uint64_t *to_clients, uint64_t *to_service);
void tg_gw_session_destroy(struct tg_gw_session *s); /* shutdown only: no callbacks */
/* Iteration over gw->sessions (the list is linked through the sessions). */
struct tg_gw_session *tg_gw_session_next(const struct tg_gw_session *s);

/* Roles helpers (gw_acl.c). */
size_t tg_gw_roles_format(unsigned roles, char *buf, size_t len);
int tg_gw_acl_may_bind(unsigned roles, const char *service);

#endif
