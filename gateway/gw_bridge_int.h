/* gw_bridge_int.h: what the bridge's files share (private to gw_bridge*.c): a session's layout,
 * its tables of bound services, pending binds and pending calls, and the helpers each file
 * offers the others.
 *
 *   gw_bridge.c          sessions: relaying frames both ways, ACL, filters, flow control, close
 *   gw_bridge_methods.c  the services a session bound: method tables learnt from BindServiceReply
 *                        (refused when an id or a name is listed twice), names and ids
 *   gw_bridge_calls.c    the gateway's own binds and calls upstream and their replies
 *   gw_bridge_local.c    gateway-local services (TracegateAuth and the ones features register)
 *
 * Ownership: a session owns its tables (freed with it). Threading: the gateway's event loop
 * thread only. */
#ifndef TRACEGATE_GATEWAY_GW_BRIDGE_INT_H
#define TRACEGATE_GATEWAY_GW_BRIDGE_INT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "gw_bridge.h"
#include "gw_core.h"
#include "tracegate/conn.h"
#include "tracegate/frame.h"
#include "tracegate/ipc_wire.h"

#define LOG "gw-bridge"

#define NAME_LEN 64
#define MAX_SERVICES 16
#define MAX_METHODS 256
#define MAX_PENDING_BINDS 16
#define MAX_PENDING_CALLS 1024 /* beyond this, calls are relayed but not tracked */
#define DENY_LOG_BURST 10

/* Why a side's reading is paused (bits; reading resumes when none is left). */
enum {
    P_PEER = 1u, /* the other side's output is congested */
    P_SELF = 2u, /* this side's own output is congested: it is not reading its replies */
    P_RATE = 4u, /* message bucket empty */
    P_HOLD = 8u, /* a filter holds it */
};

struct method_ent {
    uint32_t id;
    char name[NAME_LEN];
    int metric;
};

struct bound_svc {
    uint32_t id;
    char name[NAME_LEN];
    const struct tg_gw_local_service *local;
    struct method_ent *methods;
    size_t n_methods;
};

struct pending_bind {
    uint64_t rid;
    char name[NAME_LEN];
    int private_;
    tg_gw_bind_fn cb;
    void *arg;
};

/* A relayed call waiting for its final reply. The names are the metrics'
 * interned strings (stable), so an entry stays small. */
struct pending_call {
    uint64_t rid;
    uint64_t start_us;
    int metric;
    int private_;
    tg_gw_reply_fn cb;
    void *arg;
};

struct filter_inst {
    const struct tg_gw_filter *f;
    void *ctx, *state;
};

struct tg_gw_session {
    struct tg_gw *gw;
    struct tg_gw_session *prev, *next;
    struct tg_gw_session *wprev, *wnext; /* gw->watched: output may be queued (see watch()) */
    int watched;
    struct tg_gw_session *kprev, *knext; /* gw->kept: while detached (see set_kept()) */
    uint64_t id;
    struct tg_gw_client_info info;
    struct tg_gw_listener *listener;
    tg_conn *down, *up;
    int up_opened, up_seen_data;
    unsigned up_roles; /* info.roles when the upstream was opened: what its identity was made from */
    unsigned down_pause, up_pause;
    struct tg_gw_bucket bucket;
    struct tg_gw_slow slow;
    struct event *hs_ev, *rate_ev, *free_ev;
    uint64_t started_us, last_activity_us;
    struct bound_svc svcs[MAX_SERVICES];
    size_t n_svcs;
    struct pending_bind binds[MAX_PENDING_BINDS];
    size_t n_binds;
    struct pending_call *calls;
    size_t n_calls, cap_calls;
    uint64_t next_private_id;
    struct filter_inst filt[TG_GW_MAX_FILTERS];
    size_t n_filt;
    int closing, detached, free_scheduled, client_counted;
    int conn_metric_closed; /* detached: the connection gauge already dropped it; the slot is still held */
    unsigned denials;
};

/* ---- gw_bridge.c ---- */
/* The session's principal for log lines ("-" before there is one). */
const char *tg_gwb_who(const struct tg_gw_session *s);
/* Pauses or resumes reading on both sides from down_pause / up_pause. */
void tg_gwb_apply_pause(struct tg_gw_session *s);
/* Protocol violation: counted under label, logged, the session closed at once. */
void tg_gwb_violation(struct tg_gw_session *s, const char *label, const char *why);
void tg_gwb_send_request_error(struct tg_gw_session *s, uint64_t rid, const char *msg);
void tg_gwb_send_bind_reply(struct tg_gw_session *s, uint64_t rid, int success, uint32_t service_id,
                            const struct tg_ipc_method_info *m, size_t n_m);

/* ---- gw_bridge_methods.c ---- */
struct bound_svc *tg_gwb_find_svc(struct tg_gw_session *s, uint32_t id);
struct method_ent *tg_gwb_find_method(struct bound_svc *b, uint32_t id);
/* A fresh entry for service id (an entry already bound under it is reset); NULL when full. */
struct bound_svc *tg_gwb_add_svc(struct tg_gw_session *s, uint32_t id, const char *name);
void tg_gwb_free_svc(struct bound_svc *b);
/* BindServiceReply to a pending bind: learns the method table. Returns 0, or -1 if the session
 * had to be closed. */
int tg_gwb_learn_bind(struct tg_gw_session *s, const struct tg_frame_info *fi);

/* ---- gw_bridge_calls.c ---- */
ssize_t tg_gwb_find_call(struct tg_gw_session *s, uint64_t rid);
void tg_gwb_remove_call(struct tg_gw_session *s, size_t i);
/* A zeroed entry, or NULL past MAX_PENDING_CALLS (the call is then relayed untracked). */
struct pending_call *tg_gwb_push_call(struct tg_gw_session *s);
ssize_t tg_gwb_find_bind(struct tg_gw_session *s, uint64_t rid);
void tg_gwb_remove_bind(struct tg_gw_session *s, size_t i);
/* A reply to one of the gateway's own requests (a private request id): to its callback. */
void tg_gwb_route_private(struct tg_gw_session *s, const struct tg_frame_info *fi);

/* ---- gw_bridge_local.c ---- */
/* A request before authentication, where one is required: error reply, then close. */
void tg_gwb_auth_required(struct tg_gw_session *s, uint64_t rid);
/* BindService to a gateway-local service, answered here (ACL by name). */
void tg_gwb_bind_local(struct tg_gw_session *s, uint64_t rid, const char *name);
/* InvokeMethod on a bound gateway-local service (ACL by name). */
void tg_gwb_invoke_local(struct tg_gw_session *s, struct bound_svc *b, const struct tg_frame_info *fi);

#endif
