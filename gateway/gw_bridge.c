/* gw_bridge.c: bridge sessions: one client connection and one upstream connection, frames relayed
 * byte for byte with per-method access control, gateway-local services (TracegateAuth), frame
 * filters, backpressure, rate limits and the slow-client policy (see gw_bridge.h). */
#include "gw_bridge.h"

#include <event2/event.h>
#include <openssl/crypto.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "gw_auth.h"
#include "gw_core.h"
#include "gw_identity.h"
#include "gw_listener.h"
#include "gw_metrics.h"
#include "gw_upstream.h"
#include "tracegate/ipc_wire.h"
#include "tracegate/log.h"
#include "tracegate/pbwire.h"
#include "tracegate_gateway.pb-c.h"

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

static const struct tg_conn_cbs k_down_cbs;
static const struct tg_conn_cbs k_up_cbs;

/* ------------------------------------------------------------ helpers */

static const char *port_name(enum tg_gw_port p) { return p == TG_GW_PORT_PRODUCER ? "producer" : "consumer"; }

static const char *who(const struct tg_gw_session *s)
{
    return s->info.principal[0] ? s->info.principal : "-";
}

static void apply_pause(struct tg_gw_session *s)
{
    if (s->down && !tg_conn_is_closing(s->down)) {
        if (s->down_pause)
            tg_conn_pause_read(s->down);
        else
            tg_conn_resume_read(s->down);
    }
    if (s->up && !tg_conn_is_closing(s->up)) {
        if (s->up_pause)
            tg_conn_pause_read(s->up);
        else
            tg_conn_resume_read(s->up);
    }
}

/* The sweep (every 250 ms) looks only at watched sessions: those that may have output queued.
 * A session is watched from the moment something is sent to either of its connections and
 * leaves the list at the first sweep that finds both queues empty, so N idle sessions cost the
 * sweep nothing (it used to walk every session, 1% of a CPU at 10,000 idle clients). */
static void watch(struct tg_gw_session *s)
{
    if (s->watched)
        return;
    struct tg_gw *gw = s->gw;
    s->watched = 1;
    s->wprev = NULL;
    s->wnext = gw->watched;
    if (s->wnext)
        s->wnext->wprev = s;
    gw->watched = s;
}

static void unwatch(struct tg_gw_session *s)
{
    if (!s->watched)
        return;
    struct tg_gw *gw = s->gw;
    if (s->wprev)
        s->wprev->wnext = s->wnext;
    else
        gw->watched = s->wnext;
    if (s->wnext)
        s->wnext->wprev = s->wprev;
    s->wprev = s->wnext = NULL;
    s->watched = 0;
}

/* Detached (kept) sessions are also linked in gw->kept, so that counting a principal's kept
 * sessions (at every resumable client's disconnect) does not walk every session. */
static void set_kept(struct tg_gw_session *s, int kept)
{
    struct tg_gw *gw = s->gw;
    if (kept == s->detached)
        return;
    s->detached = kept;
    if (kept) {
        s->kprev = NULL;
        s->knext = gw->kept;
        if (s->knext)
            s->knext->kprev = s;
        gw->kept = s;
        return;
    }
    if (s->kprev)
        s->kprev->knext = s->knext;
    else
        gw->kept = s->knext;
    if (s->knext)
        s->knext->kprev = s->kprev;
    s->kprev = s->knext = NULL;
}

static void schedule_free(struct tg_gw_session *s)
{
    if (s->free_scheduled)
        return;
    s->free_scheduled = 1;
    event_active(s->free_ev, EV_TIMEOUT, 0);
}

static struct bound_svc *find_svc(struct tg_gw_session *s, uint32_t id)
{
    for (size_t i = 0; i < s->n_svcs; i++)
        if (s->svcs[i].id == id)
            return &s->svcs[i];
    return NULL;
}

static const struct bound_svc *find_svc_c(const struct tg_gw_session *s, uint32_t id)
{
    for (size_t i = 0; i < s->n_svcs; i++)
        if (s->svcs[i].id == id)
            return &s->svcs[i];
    return NULL;
}

static struct method_ent *find_method(struct bound_svc *b, uint32_t id)
{
    for (size_t i = 0; i < b->n_methods; i++)
        if (b->methods[i].id == id)
            return &b->methods[i];
    return NULL;
}

static void free_svc(struct bound_svc *b)
{
    free(b->methods);
    b->methods = NULL;
    b->n_methods = 0;
}

static ssize_t find_call(struct tg_gw_session *s, uint64_t rid)
{
    for (size_t i = 0; i < s->n_calls; i++)
        if (s->calls[i].rid == rid)
            return (ssize_t)i;
    return -1;
}

static void remove_call(struct tg_gw_session *s, size_t i)
{
    memmove(&s->calls[i], &s->calls[i + 1], (s->n_calls - i - 1) * sizeof s->calls[0]);
    s->n_calls--;
}

static struct pending_call *push_call(struct tg_gw_session *s)
{
    if (s->n_calls == s->cap_calls) {
        if (s->cap_calls >= MAX_PENDING_CALLS)
            return NULL;
        size_t nc = s->cap_calls ? s->cap_calls * 2 : 8;
        struct pending_call *n = realloc(s->calls, nc * sizeof *n);
        if (!n)
            return NULL;
        s->calls = n;
        s->cap_calls = nc;
    }
    struct pending_call *c = &s->calls[s->n_calls++];
    memset(c, 0, sizeof *c);
    return c;
}

static ssize_t find_bind(struct tg_gw_session *s, uint64_t rid)
{
    for (size_t i = 0; i < s->n_binds; i++)
        if (s->binds[i].rid == rid)
            return (ssize_t)i;
    return -1;
}

static void remove_bind(struct tg_gw_session *s, size_t i)
{
    memmove(&s->binds[i], &s->binds[i + 1], (s->n_binds - i - 1) * sizeof s->binds[0]);
    s->n_binds--;
}

/* ------------------------------------------------------------ closing */

void tg_gw_session_close(struct tg_gw_session *s, const char *reason, int flush)
{
    if (s->closing)
        return;
    s->closing = 1;
    if (s->down) {
        if (flush)
            tg_conn_close_after_flush(s->down, reason);
        else
            tg_conn_close(s->down, reason);
    }
    if (s->up) {
        if (flush)
            tg_conn_close_after_flush(s->up, reason);
        else
            tg_conn_close(s->up, reason);
    }
    if (!s->down && !s->up)
        schedule_free(s);
}

/* Protocol violation: count, log, close at once. */
static void violation(struct tg_gw_session *s, const char *label, const char *why)
{
    tg_gw_metrics_frame_rejected(s->gw->metrics, label);
    tg_warn(LOG, "session %llu: closing client %s (%s): %s", (unsigned long long)s->id, s->info.peer, who(s), why);
    tg_gw_session_close(s, why, 0);
}

/* Cuts only the client connection: filters may keep the session (detach). With replies still
 * queued for it (a slow client) the close is an abort (RST): a graceful FIN would wait behind the
 * data the client is not reading, so the client would never learn it was cut and the kernel would
 * keep the orphaned socket and its buffers for minutes. */
static void cut_down(struct tg_gw_session *s, const char *label, const char *why)
{
    if (!s->down || tg_conn_is_closing(s->down))
        return;
    tg_gw_metrics_conn_rejected(s->gw->metrics, label);
    tg_warn(LOG, "session %llu: cutting client %s (%s): %s", (unsigned long long)s->id, s->info.peer, who(s), why);
    int fd = tg_conn_fd(s->down);
    if (fd >= 0 && !tg_conn_is_unix(s->down) && tg_conn_output_len(s->down) > 0) {
        struct linger lg = {1, 0};
        setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
    }
    tg_conn_close(s->down, why);
}

/* ------------------------------------------------------------ sending */

static void after_send_down(struct tg_gw_session *s)
{
    if (!s->down)
        return;
    size_t q = tg_conn_output_len(s->down);
    if (q)
        watch(s);
    enum tg_gw_slow_verdict v = tg_gw_slow_check(&s->slow, &s->gw->limits, q, tg_gw_now_us());
    if (v == TG_GW_SLOW_CUT_HARD) {
        char why[128];
        snprintf(why, sizeof why, "slow client: %zu bytes queued, over the hard limit", q);
        cut_down(s, "slow_client_hard", why);
        return;
    }
    if (tg_conn_is_congested(s->down)) {
        s->up_pause |= P_PEER;
        s->down_pause |= P_SELF;
        apply_pause(s);
    }
}

int tg_gw_session_send_down(struct tg_gw_session *s, const uint8_t *body, size_t len, int fd)
{
    if (!s->down || tg_conn_is_closing(s->down))
        return -1;
    if (tg_conn_send(s->down, body, len, fd) != 0)
        return -1;
    tg_gw_metrics_traffic(s->gw->metrics, TG_GW_DIR_TO_CLIENT, 1, len + TG_FRAME_HEADER_SIZE);
    after_send_down(s);
    return 0;
}

static void after_send_up(struct tg_gw_session *s, tg_conn *up)
{
    if (tg_conn_output_len(up))
        watch(s);
    if (tg_conn_is_congested(up)) {
        s->down_pause |= P_PEER;
        apply_pause(s);
    }
}

int tg_gw_session_send_up(struct tg_gw_session *s, const uint8_t *body, size_t len, int fd)
{
    tg_conn *up = tg_gw_session_ensure_up(s);
    if (!up || tg_conn_is_closing(up))
        return -1;
    if (tg_conn_send(up, body, len, fd) != 0)
        return -1;
    tg_gw_metrics_traffic(s->gw->metrics, TG_GW_DIR_TO_SERVICE, 1, len + TG_FRAME_HEADER_SIZE);
    after_send_up(s, up);
    return 0;
}

/* The zero-copy variants: the frame `from` is offering (on_frame_head) goes to the other side's
 * output by reference (tg_conn_forward_frame), with the same accounting and backpressure. */
static int move_down(struct tg_gw_session *s, tg_conn *from, size_t len)
{
    if (!s->down || tg_conn_is_closing(s->down))
        return -1;
    if (tg_conn_forward_frame(from, s->down) != 0)
        return -1;
    tg_gw_metrics_traffic(s->gw->metrics, TG_GW_DIR_TO_CLIENT, 1, len + TG_FRAME_HEADER_SIZE);
    after_send_down(s);
    return 0;
}

static int move_up(struct tg_gw_session *s, tg_conn *from, size_t len)
{
    tg_conn *up = tg_gw_session_ensure_up(s);
    if (!up || tg_conn_is_closing(up))
        return -1;
    if (tg_conn_forward_frame(from, up) != 0)
        return -1;
    tg_gw_metrics_traffic(s->gw->metrics, TG_GW_DIR_TO_SERVICE, 1, len + TG_FRAME_HEADER_SIZE);
    after_send_up(s, up);
    return 0;
}

int tg_gw_session_reply(struct tg_gw_session *s, uint64_t request_id, int success, int has_more,
                        const uint8_t *reply, size_t len)
{
    size_t need = tg_ipc_encode_reply(NULL, 0, request_id, success, has_more, reply, len);
    uint8_t small[512];
    uint8_t *buf = need <= sizeof small ? small : malloc(need);
    if (!buf)
        return -1;
    size_t n = tg_ipc_encode_reply(buf, need, request_id, success, has_more, reply, len);
    int rc = n ? tg_gw_session_send_down(s, buf, n, -1) : -1;
    if (buf != small)
        free(buf);
    return rc;
}

static void send_request_error(struct tg_gw_session *s, uint64_t rid, const char *msg)
{
    uint8_t buf[256];
    size_t n = tg_ipc_encode_request_error(buf, sizeof buf, rid, msg);
    if (n)
        tg_gw_session_send_down(s, buf, n, -1);
}

static void send_bind_reply(struct tg_gw_session *s, uint64_t rid, int success, uint32_t service_id,
                            const struct tg_ipc_method_info *m, size_t n_m)
{
    size_t need = tg_ipc_encode_bind_reply(NULL, 0, rid, success, service_id, m, n_m);
    uint8_t *buf = malloc(need ? need : 1);
    if (!buf)
        return;
    size_t n = tg_ipc_encode_bind_reply(buf, need, rid, success, service_id, m, n_m);
    if (n)
        tg_gw_session_send_down(s, buf, n, -1);
    free(buf);
}

/* ------------------------------------------------------------ upstream */

/* The upstream is another node, reached through the fleet's links: a link channel's bufferevent
 * pair end (or a socket for raw nodes and federated sessions), bytes only (fds cannot cross
 * machines). */
static tg_conn *open_routed_up(struct tg_gw_session *s, const char *node)
{
    char err[256];
    struct tg_gw_route r = {.fd = -1, .bev = NULL};
    int rc = -1;
    if (!s->gw->router)
        snprintf(err, sizeof err, "no gateway links are configured (no route to node %s)", node);
    else
        rc = s->gw->router(s->gw->router_ctx, node, s->info.port == TG_GW_PORT_PRODUCER, &s->info, &r, err, sizeof err);
    if (rc != 0) {
        tg_gw_metrics_route_error(s->gw->metrics); /* our own upstream is fine */
        tg_warn(LOG, "session %llu: %s", (unsigned long long)s->id, err);
        tg_gw_session_close(s, "node unreachable", 1);
        return NULL;
    }
    struct tg_conn_opts o;
    tg_conn_opts_default(&o);
    o.max_frame = TG_FRAME_MAX_DEFAULT;
    o.out_high = s->gw->limits.out_high;
    o.out_low = s->gw->limits.out_low;
    o.no_fd_passing = 1;
    s->up = r.bev ? tg_conn_new_bev(s->gw->base, r.bev, &o, &k_up_cbs, s) : tg_conn_new_fd(s->gw->base, r.fd, &o, &k_up_cbs, s);
    if (!s->up) {
        tg_gw_session_close(s, "out of memory", 0);
        return NULL;
    }
    tg_info(LOG, "session %llu: routed to node %s", (unsigned long long)s->id, node);
    apply_pause(s);
    return s->up;
}

tg_conn *tg_gw_session_ensure_up(struct tg_gw_session *s)
{
    if (s->up)
        return s->up;
    if (s->closing || s->up_opened)
        return NULL;
    s->up_opened = 1;
    const char *node = s->info.node;
    if (node[0] && strcmp(node, tg_gw_node_name(s->gw)) != 0)
        return open_routed_up(s, node);
    struct tg_gw_upstream *u = tg_gw_upstream_for(s->gw, s->info.port);
    if (!u) {
        tg_warn(LOG, "session %llu: the %s port has no upstream in this configuration", (unsigned long long)s->id,
                port_name(s->info.port));
        tg_gw_session_close(s, "this port is not served", 1);
        return NULL;
    }
    char err[256];
    int fd = tg_gw_upstream_connect(u, &s->info, err, sizeof err);
    if (fd < 0) {
        tg_gw_metrics_upstream_error(s->gw->metrics, s->info.port);
        tg_warn(LOG, "session %llu: %s", (unsigned long long)s->id, err);
        tg_gw_session_close(s, "upstream unavailable", 1);
        return NULL;
    }
    struct tg_conn_opts o;
    tg_conn_opts_default(&o);
    o.max_frame = TG_FRAME_MAX_DEFAULT; /* the service may send Perfetto's maximum */
    o.out_high = s->gw->limits.out_high;
    o.out_low = s->gw->limits.out_low;
    s->up = tg_conn_new_fd(s->gw->base, fd, &o, &k_up_cbs, s);
    if (!s->up) {
        tg_gw_session_close(s, "out of memory", 0);
        return NULL;
    }
    uint8_t idf[64];
    size_t idl = tg_gw_upstream_identity_frame(u, &s->info, idf, sizeof idf);
    if (idl && tg_conn_send(s->up, idf + 4, idl - 4, -1) != 0) {
        tg_gw_session_close(s, "cannot queue the client's identity upstream", 0);
        return NULL;
    }
    after_send_up(s, s->up);
    apply_pause(s);
    return s->up;
}

/* ------------------------------------------------------------ filters */

static enum tg_gw_verdict run_down_filters(struct tg_gw_session *s, struct tg_gw_frame *f)
{
    for (size_t i = 0; i < s->n_filt; i++) {
        struct filter_inst *fi = &s->filt[i];
        if (!fi->f->on_down_frame)
            continue;
        enum tg_gw_verdict v = fi->f->on_down_frame(s, f, fi->ctx, fi->state);
        if (v != TG_GW_FORWARD)
            return v;
    }
    return TG_GW_FORWARD;
}

static enum tg_gw_verdict run_up_filters(struct tg_gw_session *s, struct tg_gw_frame *f)
{
    for (size_t i = s->n_filt; i-- > 0;) {
        struct filter_inst *fi = &s->filt[i];
        if (!fi->f->on_up_frame)
            continue;
        enum tg_gw_verdict v = fi->f->on_up_frame(s, f, fi->ctx, fi->state);
        if (v != TG_GW_FORWARD)
            return v;
    }
    return TG_GW_FORWARD;
}

/* Whether a filter of the session may read or keep this frame's bytes, so it must take the copying
 * path. A filter without needs_body always gets them. */
static int filters_need_body(struct tg_gw_session *s, const struct tg_frame_info *fi, int up)
{
    for (size_t i = 0; i < s->n_filt; i++) {
        const struct filter_inst *fi_ = &s->filt[i];
        if (up ? !fi_->f->on_up_frame : !fi_->f->on_down_frame)
            continue;
        if (!fi_->f->needs_body || fi_->f->needs_body(s, fi, up, fi_->ctx, fi_->state))
            return 1;
    }
    return 0;
}

/* Runs the filters, then forwards the frame upstream. Consumes fd. Returns 1
 * if the frame went upstream. `from` != NULL: the frame is the one that
 * connection offers, moved without its bytes at hand (body is NULL). */
static int forward_up(struct tg_gw_session *s, const uint8_t *body, size_t len, const struct tg_frame_info *info,
                      const char *svc, const char *method, int fd, tg_conn *from)
{
    struct tg_gw_frame f = {body, len, info, svc, method, fd, NULL};
    enum tg_gw_verdict v = s->n_filt ? run_down_filters(s, &f) : TG_GW_FORWARD;
    fd = f.fd;
    if (v == TG_GW_CLOSE) {
        if (fd >= 0)
            close(fd);
        violation(s, "filter", f.close_reason ? f.close_reason : "closed by filter");
        return 0;
    }
    int sent = 0;
    if (v == TG_GW_FORWARD && !s->closing)
        sent = (from ? move_up(s, from, len) : tg_gw_session_send_up(s, body, len, fd)) == 0;
    if (fd >= 0)
        close(fd);
    return sent;
}

/* ------------------------------------------------------------ local services */

static void auth_required(struct tg_gw_session *s, uint64_t rid)
{
    tg_gw_metrics_frame_rejected(s->gw->metrics, "auth_required");
    tg_gw_metrics_auth_failure(s->gw->metrics, s->info.transport, "auth_required");
    tg_warn(LOG, "session %llu: client %s sent a request before authenticating; closing", (unsigned long long)s->id,
            s->info.peer);
    send_request_error(s, rid, "authentication required");
    tg_gw_session_close(s, "authentication required", 1);
}

static const struct tg_gw_local_service *find_local(struct tg_gw *gw, const char *name)
{
    for (size_t i = 0; i < gw->n_local; i++)
        if (strcmp(gw->local[i]->name, name) == 0)
            return gw->local[i];
    return NULL;
}

static struct bound_svc *add_svc(struct tg_gw_session *s, uint32_t id, const char *name)
{
    struct bound_svc *b = find_svc(s, id);
    if (b) {
        free_svc(b);
    } else {
        if (s->n_svcs >= MAX_SERVICES)
            return NULL;
        b = &s->svcs[s->n_svcs++];
    }
    memset(b, 0, sizeof *b);
    b->id = id;
    snprintf(b->name, sizeof b->name, "%s", name);
    return b;
}

static void bind_local(struct tg_gw_session *s, uint64_t rid, const char *name)
{
    const struct tg_gw_local_service *ls = find_local(s->gw, name);
    if (!ls || !tg_gw_acl_may_bind(s->info.roles, name)) {
        if (ls) {
            tg_gw_metrics_frame_rejected(s->gw->metrics, "acl");
            tg_warn(LOG, "session %llu: denied binding %s to %s (%s)", (unsigned long long)s->id, name, s->info.peer,
                    who(s));
        }
        send_bind_reply(s, rid, 0, 0, NULL, 0);
        return;
    }
    size_t idx = 0;
    while (s->gw->local[idx] != ls)
        idx++;
    uint32_t sid = TG_GW_LOCAL_SERVICE_ID_BASE + (uint32_t)idx;
    struct bound_svc *b = add_svc(s, sid, name);
    struct tg_ipc_method_info mi[32];
    size_t n = ls->n_methods < 32 ? ls->n_methods : 32;
    if (!b) {
        send_bind_reply(s, rid, 0, 0, NULL, 0);
        return;
    }
    b->local = ls;
    for (size_t i = 0; i < n; i++) {
        mi[i].id = (uint32_t)i + 1;
        mi[i].name = ls->methods[i].name;
    }
    send_bind_reply(s, rid, 1, sid, mi, n);
}

static void invoke_local(struct tg_gw_session *s, struct bound_svc *b, const struct tg_frame_info *fi)
{
    const struct tg_gw_local_service *ls = b->local;
    if (fi->method_id == 0 || fi->method_id > ls->n_methods) {
        tg_gw_session_reply(s, fi->request_id, 0, 0, NULL, 0);
        return;
    }
    const struct tg_gw_local_method *m = &ls->methods[fi->method_id - 1];
    if (!tg_gw_acl_allows(s->info.roles, ls->name, m->name)) {
        tg_gw_metrics_frame_rejected(s->gw->metrics, "acl");
        tg_warn(LOG, "session %llu: denied %s.%s to %s (%s)", (unsigned long long)s->id, ls->name, m->name,
                s->info.peer, who(s));
        tg_gw_session_reply(s, fi->request_id, 0, 0, NULL, 0);
        return;
    }
    m->fn(s, fi->request_id, fi->payload, fi->payload_len, fi->drop_reply, ls->ctx);
}

/* TracegateAuth.Authenticate */
static void auth_authenticate(struct tg_gw_session *s, uint64_t rid, const uint8_t *args, size_t len, int drop_reply,
                              void *ctx)
{
    (void)drop_reply;
    (void)ctx;
    struct tg_gw *gw = s->gw;
    Tracegate__AuthenticateRequest *req = tracegate__authenticate_request__unpack(NULL, len, args);
    char principal[TG_GW_PRINCIPAL_MAX];
    unsigned roles = 0;
    if (req && req->token) {
        size_t tl = strlen(req->token);
        roles = tg_gw_auth_lookup(gw->auth, req->token, tl, principal, sizeof principal);
        OPENSSL_cleanse(req->token, tl);
    }
    if (req)
        tracegate__authenticate_request__free_unpacked(req, NULL);
    if (roles && s->up_opened) {
        /* the upstream already carries the identity the client had: it cannot change now */
        tg_warn(LOG, "session %llu: %s tried to authenticate after using the service as %s", (unsigned long long)s->id,
                s->info.peer, who(s));
        tg_gw_session_reply(s, rid, 0, 0, NULL, 0);
        tg_gw_session_close(s, "authenticate before anything else", 1);
        return;
    }
    if (!roles) {
        tg_gw_metrics_auth_failure(gw->metrics, s->info.transport, req ? "bad_token" : "bad_request");
        tg_warn(LOG, "session %llu: authentication failed for %s (%s)", (unsigned long long)s->id, s->info.peer,
                tg_gw_transport_name(s->info.transport));
        tg_gw_session_reply(s, rid, 0, 0, NULL, 0);
        tg_gw_session_close(s, "authentication failed", 1);
        return;
    }
    tg_gw_identity_token(&s->info, principal, roles);
    if (s->hs_ev)
        event_del(s->hs_ev);
    tg_gw_metrics_auth_success(gw->metrics, "token");
    char rl[64];
    tg_gw_roles_format(roles, rl, sizeof rl);
    tg_info(LOG, "session %llu: %s authenticated as %s (roles %s)", (unsigned long long)s->id, s->info.peer,
            s->info.principal, rl);

    Tracegate__AuthenticateResponse resp = TRACEGATE__AUTHENTICATE_RESPONSE__INIT;
    char *names[8];
    size_t n = 0;
    for (unsigned bit = 1; bit <= TG_GW_ROLE_LINK && n < 8; bit <<= 1)
        if (roles & bit)
            names[n++] = (char *)tg_gw_role_name(bit);
    resp.roles = names;
    resp.n_roles = n;
    resp.principal = s->info.principal;
    uint8_t out[512];
    size_t ol = tracegate__authenticate_response__get_packed_size(&resp);
    if (ol > sizeof out) {
        tg_gw_session_reply(s, rid, 0, 0, NULL, 0);
        return;
    }
    tracegate__authenticate_response__pack(&resp, out);
    tg_gw_session_reply(s, rid, 1, 0, out, ol);
}

static const struct tg_gw_local_method k_auth_methods[] = {{"Authenticate", auth_authenticate}};
static const struct tg_gw_local_service k_auth_service = {TG_GW_SVC_AUTH, k_auth_methods, 1, NULL};

int tg_gw_register_local_service(struct tg_gw *gw, const struct tg_gw_local_service *svc)
{
    if (!svc || !svc->name || strncmp(svc->name, "Tracegate", 9) != 0 || gw->n_local >= TG_GW_MAX_LOCAL_SERVICES ||
        find_local(gw, svc->name))
        return -1;
    gw->local[gw->n_local++] = svc;
    return 0;
}

int tg_gw_add_filter(struct tg_gw *gw, const struct tg_gw_filter *f, void *ctx)
{
    if (!f || gw->n_filters >= TG_GW_MAX_FILTERS)
        return -1;
    gw->filters[gw->n_filters].f = f;
    gw->filters[gw->n_filters].ctx = ctx;
    gw->n_filters++;
    return 0;
}

/* Registers the built-in local services (called by tg_gw_new). */
int tg_gw_bridge_init(struct tg_gw *gw);
int tg_gw_bridge_init(struct tg_gw *gw) { return tg_gw_register_local_service(gw, &k_auth_service); }

/* ------------------------------------------------------------ client frames */

/* Metric label of a strict-scan refusal. */
static const char *scan_label(int rc)
{
    switch (rc) {
    case TG_SCAN_AMBIGUOUS: return "ambiguous";
    case TG_SCAN_WIRE_TYPE: return "wire_type";
    case TG_SCAN_UNKNOWN_FIELD: return "unknown_field";
    default: return "undecodable";
    }
}

static void handle_bind(struct tg_gw_session *s, const uint8_t *body, size_t len, const struct tg_frame_info *fi,
                        int fd)
{
    char name[NAME_LEN];
    int name_ok = fi->service_name_len > 0 && fi->service_name_len < sizeof name &&
                  !memchr(fi->service_name, '\0', fi->service_name_len);
    if (name_ok) {
        memcpy(name, fi->service_name, fi->service_name_len);
        name[fi->service_name_len] = '\0';
    } else {
        snprintf(name, sizeof name, "?");
    }
    if (name_ok && strncmp(name, "Tracegate", 9) == 0) {
        if (fd >= 0)
            close(fd);
        if (!s->info.roles && strcmp(name, TG_GW_SVC_AUTH) != 0) {
            auth_required(s, fi->request_id);
            return;
        }
        bind_local(s, fi->request_id, name);
        return;
    }
    if (!s->info.roles) {
        if (fd >= 0)
            close(fd);
        auth_required(s, fi->request_id);
        return;
    }
    if (!name_ok || !tg_gw_acl_may_bind(s->info.roles, name)) {
        if (fd >= 0)
            close(fd);
        tg_gw_metrics_frame_rejected(s->gw->metrics, "acl");
        char rl[64];
        tg_gw_roles_format(s->info.roles, rl, sizeof rl);
        tg_warn(LOG, "session %llu: denied binding %s to %s (%s, roles %s)", (unsigned long long)s->id, name,
                s->info.peer, who(s), rl);
        send_bind_reply(s, fi->request_id, 0, 0, NULL, 0);
        return;
    }
    if (s->n_binds >= MAX_PENDING_BINDS) {
        if (fd >= 0)
            close(fd);
        violation(s, "too_many_binds", "too many BindService requests in flight");
        return;
    }
    struct pending_bind *pb = &s->binds[s->n_binds++];
    memset(pb, 0, sizeof *pb);
    pb->rid = fi->request_id;
    snprintf(pb->name, sizeof pb->name, "%s", name);
    if (!forward_up(s, body, len, fi, name, NULL, fd, NULL)) {
        ssize_t i = find_bind(s, fi->request_id);
        if (i >= 0)
            remove_bind(s, (size_t)i);
    }
}

static void deny_call(struct tg_gw_session *s, const struct tg_frame_info *fi, struct bound_svc *b,
                      struct method_ent *m)
{
    tg_gw_metrics_frame_rejected(s->gw->metrics, "acl");
    tg_gw_metrics_rpc_denied(s->gw->metrics, m->metric);
    s->denials++;
    if (s->denials <= DENY_LOG_BURST || s->denials % 1000 == 0) {
        char rl[64];
        tg_gw_roles_format(s->info.roles, rl, sizeof rl);
        tg_warn(LOG, "session %llu: denied %s.%s to %s (%s, roles %s)%s", (unsigned long long)s->id, b->name, m->name,
                s->info.peer, who(s), rl, s->denials == DENY_LOG_BURST ? "; further denials logged every 1000" : "");
    }
    tg_gw_session_reply(s, fi->request_id, 0, 0, NULL, 0);
}

static void handle_invoke(struct tg_gw_session *s, const uint8_t *body, size_t len, const struct tg_frame_info *fi,
                          int fd, tg_conn *from)
{
    struct bound_svc *b = find_svc(s, fi->service_id);
    if (b && b->local) {
        if (fd >= 0)
            close(fd);
        invoke_local(s, b, fi);
        return;
    }
    if (!s->info.roles) {
        if (fd >= 0)
            close(fd);
        auth_required(s, fi->request_id);
        return;
    }
    struct method_ent *m = b ? find_method(b, fi->method_id) : NULL;
    if (!m) {
        /* What the host would answer for unknown ids; answered here, fail closed. */
        if (fd >= 0)
            close(fd);
        tg_gw_metrics_frame_rejected(s->gw->metrics, b ? "unknown_method" : "unknown_service");
        tg_gw_session_reply(s, fi->request_id, 0, 0, NULL, 0);
        return;
    }
    if (!tg_gw_acl_allows(s->info.roles, b->name, m->name)) {
        if (fd >= 0)
            close(fd);
        deny_call(s, fi, b, m);
        return;
    }
    /* names are copied: filters may rebind services */
    char svc[NAME_LEN], method[NAME_LEN];
    snprintf(svc, sizeof svc, "%s", b->name);
    snprintf(method, sizeof method, "%s", m->name);
    int metric = m->metric;
    if (forward_up(s, body, len, fi, svc, method, fd, from) && !fi->drop_reply) {
        struct pending_call *pc = push_call(s);
        if (pc) {
            pc->rid = fi->request_id;
            pc->start_us = tg_gw_now_us();
            pc->metric = metric;
        }
    }
}

static void rate_cb(evutil_socket_t fd, short what, void *arg)
{
    struct tg_gw_session *s = arg;
    (void)fd;
    (void)what;
    uint64_t wait = tg_gw_bucket_wait_us(&s->bucket, tg_gw_now_us());
    if (wait) {
        struct timeval tv = {.tv_sec = (time_t)(wait / 1000000u), .tv_usec = (suseconds_t)(wait % 1000000u)};
        event_add(s->rate_ev, &tv);
        return;
    }
    s->down_pause &= ~P_RATE;
    apply_pause(s);
}

/* A client frame arrived: activity and the message bucket. */
static void down_arrived(struct tg_gw_session *s)
{
    uint64_t now = tg_gw_now_us();
    s->last_activity_us = now;
    if (!tg_gw_bucket_consume(&s->bucket, now)) {
        s->down_pause |= P_RATE;
        tg_gw_metrics_rate_limited(s->gw->metrics);
        uint64_t wait = tg_gw_bucket_wait_us(&s->bucket, now);
        struct timeval tv = {.tv_sec = (time_t)(wait / 1000000u), .tv_usec = (suseconds_t)(wait % 1000000u)};
        event_add(s->rate_ev, &tv);
        apply_pause(s);
    }
}

static void on_down_frame(tg_conn *c, const uint8_t *body, size_t len, void *arg)
{
    struct tg_gw_session *s = arg;
    int fd = tg_conn_is_unix(c) ? tg_conn_take_fd(c) : -1;
    if (s->closing) {
        if (fd >= 0)
            close(fd);
        return;
    }
    down_arrived(s);
    /* Strict and closed: the frame is forwarded only if the service cannot read it differently
     * (a repeated field, a scalar in another wire type, a second `msg` member or a field the
     * gateway does not know would each let the client show the ACL one frame and the service
     * another). */
    struct tg_frame_info fi;
    const char *bad = NULL, *label = NULL;
    char why[200];
    int src = tg_frame_scan_ex(body, len, &fi, TG_SCAN_CLOSED, why, sizeof why);
    if (src != 0) {
        label = scan_label(src);
        bad = why;
    } else if (fi.request_id & TG_GW_PRIVATE_REQUEST_ID) {
        label = "reserved_request_id";
        bad = "request id in the gateway's reserved range";
    } else if (fi.msg == TG_MSG_BIND_SERVICE_REPLY || fi.msg == TG_MSG_INVOKE_METHOD_REPLY ||
               fi.msg == TG_MSG_REQUEST_ERROR) {
        label = "reply_type";
        bad = "client sent a reply-type frame";
    }
    if (bad) {
        if (fd >= 0)
            close(fd);
        violation(s, label, bad);
        return;
    }
    switch (fi.msg) {
    case TG_MSG_SET_PEER_IDENTITY:
        /* Identities come from authenticated transports, never from clients. */
        if (fd >= 0)
            close(fd);
        tg_gw_metrics_frame_rejected(s->gw->metrics, "peer_identity");
        tg_debug(LOG, "session %llu: dropped SetPeerIdentity from %s", (unsigned long long)s->id, s->info.peer);
        return;
    case TG_MSG_BIND_SERVICE:
        handle_bind(s, body, len, &fi, fd);
        return;
    case TG_MSG_INVOKE_METHOD:
        handle_invoke(s, body, len, &fi, fd, NULL);
        return;
    default:
        /* empty `msg`: the host would answer "unknown request"; so do we */
        if (fd >= 0)
            close(fd);
        if (!s->info.roles) {
            auth_required(s, fi.request_id);
            return;
        }
        tg_gw_metrics_frame_rejected(s->gw->metrics, "unknown_request");
        send_request_error(s, fi.request_id, "unknown request");
        return;
    }
}

/* ------------------------------------------------------------ forwarding without copying */

/* The bytes a frame's routing fields are read from when its body is not contiguous: every encoder
 * writes the payload last, so a few dozen bytes decide; a frame they do not decide takes the
 * copying path, which scans it whole. */
#define PEEK_BYTES 512

/* Offers the frame at the head of c's input to the zero-copy path: scanned from its first bytes
 * (tg_frame_scan_prefix: the same strict checks, on the bytes at hand) and, when the bridge would
 * forward it unchanged and nothing needs its bytes, moved to the other side by reference. Returns
 * 0 (the copying path: on_frame gets it) when a check needs the whole frame, the frame is refused
 * (the copying path gives the reason), carries an fd, or may be answered, rewritten or kept. */
static int peek_scan(tg_conn *c, size_t len, unsigned flags, struct tg_frame_info *fi)
{
    if (tg_conn_has_fd(c))
        return -1;
    uint8_t scratch[PEEK_BYTES];
    size_t avail;
    const uint8_t *p = tg_conn_frame_peek(c, scratch, sizeof scratch, &avail);
    return p && tg_frame_scan_prefix(p, avail, len, fi, flags) == 0 ? 0 : -1;
}

/* An InvokeMethod the client may make, of a method of a service bound upstream. */
static int down_movable(struct tg_gw_session *s, const struct tg_frame_info *fi)
{
    if (fi->msg != TG_MSG_INVOKE_METHOD || (fi->request_id & TG_GW_PRIVATE_REQUEST_ID) || !s->info.roles)
        return 0;
    struct bound_svc *b = find_svc(s, fi->service_id);
    struct method_ent *m = b && !b->local ? find_method(b, fi->method_id) : NULL;
    return m && tg_gw_acl_allows(s->info.roles, b->name, m->name) && !filters_need_body(s, fi, 0);
}

static int on_down_head(tg_conn *c, size_t len, void *arg)
{
    struct tg_gw_session *s = arg;
    struct tg_frame_info fi;
    if (s->closing || peek_scan(c, len, TG_SCAN_CLOSED, &fi) != 0 || !down_movable(s, &fi))
        return 0;
    down_arrived(s);
    handle_invoke(s, NULL, len, &fi, -1, c);
    return 1;
}

/* ------------------------------------------------------------ upstream frames */

/* Every method entry a Perfetto client would register (non-zero id, non-empty name). */
struct raw_method {
    uint32_t id;
    const char *name; /* points into the frame */
    size_t len;
};

struct bind_parse {
    struct method_ent *m; /* the usable entries */
    size_t n;
    struct raw_method *raw;
    size_t n_raw, cap_raw;
    int oom;
};

static void bind_method_cb(void *arg, uint32_t id, const char *name, size_t name_len)
{
    struct bind_parse *bp = arg;
    if (bp->oom || id == 0 || name_len == 0)
        return; /* clients ignore these entries too */
    if (bp->n_raw == bp->cap_raw) {
        size_t cap = bp->cap_raw ? bp->cap_raw * 2 : 32;
        struct raw_method *nr = realloc(bp->raw, cap * sizeof *nr);
        if (!nr) {
            bp->oom = 1;
            return;
        }
        bp->raw = nr;
        bp->cap_raw = cap;
    }
    bp->raw[bp->n_raw++] = (struct raw_method){id, name, name_len};
    if (name_len >= NAME_LEN || memchr(name, '\0', name_len) || bp->n >= MAX_METHODS)
        return; /* unusable entries are left out: calls to them are refused */
    struct method_ent *nm = realloc(bp->m, (bp->n + 1) * sizeof *nm);
    if (!nm) {
        bp->oom = 1;
        return;
    }
    bp->m = nm;
    memset(&nm[bp->n], 0, sizeof nm[0]);
    nm[bp->n].id = id;
    memcpy(nm[bp->n].name, name, name_len);
    bp->n++;
}

static int raw_by_id(const void *a, const void *b)
{
    const struct raw_method *x = a, *y = b;
    return x->id < y->id ? -1 : x->id > y->id;
}

static int raw_by_name(const void *a, const void *b)
{
    const struct raw_method *x = a, *y = b;
    if (x->len != y->len)
        return x->len < y->len ? -1 : 1;
    return memcmp(x->name, y->name, x->len);
}

/* The ACL maps a call's method id to a name; the client maps names to ids (the last entry
 * wins). A table listing an id or a name twice could make the gateway allow a call by one
 * name that the service runs as another: refused. Returns 0, or -1 with why filled. */
static int methods_unique(struct raw_method *raw, size_t n, char *why, size_t whylen)
{
    if (n < 2)
        return 0;
    qsort(raw, n, sizeof *raw, raw_by_id);
    for (size_t i = 1; i < n; i++)
        if (raw[i].id == raw[i - 1].id) {
            snprintf(why, whylen, "the service's method table lists method id %u twice", raw[i].id);
            return -1;
        }
    qsort(raw, n, sizeof *raw, raw_by_name);
    for (size_t i = 1; i < n; i++)
        if (raw_by_name(&raw[i], &raw[i - 1]) == 0) {
            snprintf(why, whylen, "the service's method table lists method '%.*s' twice",
                     (int)(raw[i].len < 64 ? raw[i].len : 64), raw[i].name);
            return -1;
        }
    return 0;
}

/* BindServiceReply: learn the service's method table. Returns 0, or -1 if
 * the session had to be closed. */
static int learn_bind(struct tg_gw_session *s, const struct tg_frame_info *fi)
{
    ssize_t bi = find_bind(s, fi->request_id);
    if (bi < 0)
        return 0;
    struct pending_bind pb = s->binds[bi];
    remove_bind(s, (size_t)bi);
    int success = 0;
    uint32_t sid = 0;
    struct bind_parse bp = {NULL, 0, NULL, 0, 0, 0};
    if (tg_ipc_parse_bind_reply(fi->msg_data, fi->msg_len, &success, &sid, bind_method_cb, &bp) != 0)
        success = 0;
    const char *label = NULL;
    char why[160];
    if (success && sid >= TG_GW_LOCAL_SERVICE_ID_BASE) {
        label = "upstream_service_id";
        snprintf(why, sizeof why, "upstream service id collides with the gateway's");
    } else if (success && !bp.oom && methods_unique(bp.raw, bp.n_raw, why, sizeof why) != 0) {
        label = "upstream_methods";
    }
    free(bp.raw);
    if (label) {
        free(bp.m);
        if (pb.private_ && pb.cb)
            pb.cb(s, 0, 0, pb.arg);
        violation(s, label, why);
        return -1;
    }
    if (success && sid && !bp.oom) {
        struct bound_svc *b = add_svc(s, sid, pb.name);
        if (b) {
            b->methods = bp.m;
            b->n_methods = bp.n;
            bp.m = NULL;
            for (size_t i = 0; i < b->n_methods; i++)
                b->methods[i].metric = tg_gw_metrics_method(s->gw->metrics, b->name, b->methods[i].name);
        } else {
            tg_warn(LOG, "session %llu: too many bound services; calls to %s will be refused",
                    (unsigned long long)s->id, pb.name);
        }
    }
    free(bp.m);
    if (pb.private_ && pb.cb)
        pb.cb(s, success && sid, sid, pb.arg);
    return 0;
}

static void route_private(struct tg_gw_session *s, const struct tg_frame_info *fi)
{
    if (fi->msg == TG_MSG_BIND_SERVICE_REPLY) {
        learn_bind(s, fi);
        return;
    }
    ssize_t ci = find_call(s, fi->request_id);
    if (ci < 0)
        return;
    struct pending_call pc = s->calls[ci];
    int final = fi->msg != TG_MSG_INVOKE_METHOD_REPLY || !fi->has_more;
    if (final)
        remove_call(s, (size_t)ci);
    int ok = fi->msg == TG_MSG_INVOKE_METHOD_REPLY && fi->success;
    if (pc.cb)
        pc.cb(s, ok, final ? 0 : 1, ok ? fi->payload : NULL, ok ? fi->payload_len : 0, pc.arg);
}

/* The session's upstream is another node (a link channel or a raw node), not this node's own
 * upstream: its failures say nothing about our upstream's health. */
static int routed(const struct tg_gw_session *s)
{
    return s->info.node[0] && strcmp(s->info.node, tg_gw_node_name(s->gw)) != 0;
}

/* A service frame arrived: activity, and the upstream is known to work. */
static void up_arrived(struct tg_gw_session *s)
{
    s->last_activity_us = tg_gw_now_us();
    if (!s->up_seen_data) {
        s->up_seen_data = 1;
        struct tg_gw_upstream *u = routed(s) ? NULL : tg_gw_upstream_for(s->gw, s->info.port);
        if (u)
            tg_gw_upstream_report(u, 1);
    }
}

static void up_dispatch(struct tg_gw_session *s, const uint8_t *body, size_t len, const struct tg_frame_info *fi,
                        int fd, tg_conn *from);

static void on_up_frame(tg_conn *c, const uint8_t *body, size_t len, void *arg)
{
    struct tg_gw_session *s = arg;
    int fd = tg_conn_is_unix(c) ? tg_conn_take_fd(c) : -1;
    up_arrived(s);
    struct tg_frame_info fi;
    char why[200];
    int src = tg_frame_scan_ex(body, len, &fi, TG_SCAN_STRICT, why, sizeof why);
    if (src != 0) {
        /* The gateway routes replies by request id and learns method names from them: a frame it
         * might read differently from the client is not forwarded (no real service sends one). */
        if (fd >= 0)
            close(fd);
        tg_gw_metrics_frame_rejected(s->gw->metrics, "upstream_frame");
        tg_warn(LOG, "session %llu: the service sent a frame the gateway refuses (%s); closing the session",
                (unsigned long long)s->id, why);
        tg_gw_session_close(s, "the service sent a frame the gateway refuses", 0);
        return;
    }
    up_dispatch(s, body, len, &fi, fd, NULL);
}

/* A scanned service frame: the gateway's own replies, method learning, call metrics, filters,
 * then to the client. `from` != NULL: the frame that connection offers, moved without its bytes
 * at hand (body is NULL). */
static void up_dispatch(struct tg_gw_session *s, const uint8_t *body, size_t len, const struct tg_frame_info *fi,
                        int fd, tg_conn *from)
{
    const char *svc = NULL, *method = NULL;
    if (fi->request_id & TG_GW_PRIVATE_REQUEST_ID) {
        if (fd >= 0)
            close(fd);
        route_private(s, fi);
        return;
    }
    if (fi->msg == TG_MSG_BIND_SERVICE_REPLY) {
        if (learn_bind(s, fi) != 0) {
            if (fd >= 0)
                close(fd);
            return;
        }
    } else if (fi->msg == TG_MSG_INVOKE_METHOD_REPLY || fi->msg == TG_MSG_REQUEST_ERROR) {
        ssize_t ci = find_call(s, fi->request_id);
        if (ci >= 0) {
            struct pending_call *pc = &s->calls[ci];
            tg_gw_metrics_method_names(s->gw->metrics, pc->metric, &svc, &method);
            if (fi->msg == TG_MSG_REQUEST_ERROR || !fi->has_more) {
                int ok = fi->msg == TG_MSG_INVOKE_METHOD_REPLY && fi->success;
                tg_gw_metrics_rpc_done(s->gw->metrics, pc->metric, tg_gw_now_us() - pc->start_us, ok);
                remove_call(s, (size_t)ci);
            }
        }
    }
    if (s->n_filt) {
        struct tg_gw_frame f = {body, len, fi, svc, method, fd, NULL};
        enum tg_gw_verdict v = run_up_filters(s, &f);
        fd = f.fd;
        if (v != TG_GW_FORWARD) {
            if (fd >= 0)
                close(fd);
            if (v == TG_GW_CLOSE)
                violation(s, "filter", f.close_reason ? f.close_reason : "closed by filter");
            return;
        }
    }
    if (!s->down) {
        tg_gw_metrics_frame_rejected(s->gw->metrics, "detached_drop");
    } else if (from) {
        move_down(s, from, len);
    } else {
        tg_gw_session_send_down(s, body, len, fd);
    }
    if (fd >= 0)
        close(fd);
}

/* A reply or error for the client (not the gateway's own, not a BindServiceReply it learns from)
 * that no filter needs the bytes of, while a client is there to take it. */
static int on_up_head(tg_conn *c, size_t len, void *arg)
{
    struct tg_gw_session *s = arg;
    struct tg_frame_info fi;
    if (!s->down || peek_scan(c, len, TG_SCAN_STRICT, &fi) != 0 || (fi.request_id & TG_GW_PRIVATE_REQUEST_ID) ||
        fi.msg == TG_MSG_BIND_SERVICE_REPLY || filters_need_body(s, &fi, 1))
        return 0;
    up_arrived(s);
    up_dispatch(s, NULL, len, &fi, -1, c);
    return 1;
}

/* ------------------------------------------------------------ connection events */

static void on_down_drain(tg_conn *c, void *arg)
{
    struct tg_gw_session *s = arg;
    (void)c;
    s->up_pause &= ~P_PEER;
    s->down_pause &= ~P_SELF;
    tg_gw_slow_check(&s->slow, &s->gw->limits, s->down ? tg_conn_output_len(s->down) : 0, tg_gw_now_us());
    apply_pause(s);
}

static void on_up_drain(tg_conn *c, void *arg)
{
    struct tg_gw_session *s = arg;
    (void)c;
    s->down_pause &= ~P_PEER;
    apply_pause(s);
}

/* Gives back the client's connection slot (global, per source, per listener). A detached (kept)
 * session holds on to it until it ends or is resumed, so kept sessions count against every
 * connection limit as the connections they stand for. */
static void release_client(struct tg_gw_session *s)
{
    if (!s->client_counted)
        return;
    s->client_counted = 0;
    tg_gw_client_gone(s->gw, &s->info, s->listener, !s->conn_metric_closed);
    s->conn_metric_closed = 0;
    s->listener = NULL;
}

size_t tg_gw_kept_sessions_of(const struct tg_gw *gw, const char *principal)
{
    size_t n = 0;
    for (const struct tg_gw_session *s = gw->kept; s; s = s->knext)
        n += !s->closing && strcmp(s->info.principal, principal) == 0;
    return n;
}

static void on_down_close(tg_conn *c, const char *reason, void *arg)
{
    struct tg_gw_session *s = arg;
    (void)c;
    s->down = NULL;
    s->down_pause = 0;
    s->up_pause &= ~P_PEER;
    if (reason && strcmp(reason, "IPC frame too large") == 0) {
        tg_gw_metrics_frame_rejected(s->gw->metrics, "oversize");
        tg_warn(LOG, "session %llu: client %s (%s) sent a frame over %zu bytes; closed", (unsigned long long)s->id,
                s->info.peer, who(s), s->gw->limits.max_frame);
    } else {
        tg_info(LOG, "session %llu: client %s (%s) disconnected: %s", (unsigned long long)s->id, s->info.peer, who(s),
                reason ? reason : "closed");
    }
    if (s->hs_ev)
        event_del(s->hs_ev);
    if (s->rate_ev)
        event_del(s->rate_ev);
    if (!s->closing && s->up) {
        int keep = 0;
        for (size_t i = 0; i < s->n_filt && !keep; i++)
            if (s->filt[i].f->on_down_close)
                keep = s->filt[i].f->on_down_close(s, reason, s->filt[i].ctx, s->filt[i].state);
        if (keep) {
            set_kept(s, 1);
            /* the connection is gone (gauge) but its slot stays taken while the session is kept */
            tg_gw_metrics_conn_close(s->gw->metrics, s->info.transport);
            s->conn_metric_closed = 1;
            tg_info(LOG, "session %llu: detached; upstream kept open", (unsigned long long)s->id);
            apply_pause(s);
            return;
        }
    }
    release_client(s);
    s->closing = 1;
    if (s->up)
        tg_conn_close_after_flush(s->up, "client disconnected");
    else
        schedule_free(s);
}

static void on_up_close(tg_conn *c, const char *reason, void *arg)
{
    struct tg_gw_session *s = arg;
    (void)c;
    s->up = NULL;
    s->up_pause = 0;
    s->down_pause &= ~P_PEER;
    /* the gateway's own calls end here */
    for (size_t i = 0; i < s->n_binds;) {
        if (s->binds[i].private_) {
            struct pending_bind pb = s->binds[i];
            remove_bind(s, i);
            if (pb.cb)
                pb.cb(s, 0, 0, pb.arg);
        } else {
            i++;
        }
    }
    for (size_t i = 0; i < s->n_calls;) {
        if (s->calls[i].private_) {
            struct pending_call pc = s->calls[i];
            remove_call(s, i);
            if (pc.cb)
                pc.cb(s, 0, 0, NULL, 0, pc.arg);
        } else {
            i++;
        }
    }
    for (size_t i = 0; i < s->n_filt; i++)
        if (s->filt[i].f->on_up_close)
            s->filt[i].f->on_up_close(s, reason, s->filt[i].ctx, s->filt[i].state);
    if (!s->closing) {
        s->closing = 1;
        if (routed(s))
            tg_gw_metrics_route_error(s->gw->metrics);
        else
            tg_gw_metrics_upstream_error(s->gw->metrics, s->info.port);
        if (!s->up_seen_data && !routed(s)) {
            struct tg_gw_upstream *u = tg_gw_upstream_for(s->gw, s->info.port);
            if (u)
                tg_gw_upstream_report(u, 0);
        }
        tg_warn(LOG, "session %llu: upstream connection closed: %s", (unsigned long long)s->id,
                reason ? reason : "closed");
        if (s->down) {
            apply_pause(s);
            tg_conn_close_after_flush(s->down, "upstream closed the connection");
        }
    }
    if (!s->down)
        schedule_free(s);
}

static const struct tg_conn_cbs k_down_cbs = {
    .on_frame = on_down_frame, .on_close = on_down_close, .on_drain = on_down_drain, .on_frame_head = on_down_head};
static const struct tg_conn_cbs k_up_cbs = {
    .on_frame = on_up_frame, .on_close = on_up_close, .on_drain = on_up_drain, .on_frame_head = on_up_head};

/* ------------------------------------------------------------ lifecycle */

static void hs_cb(evutil_socket_t fd, short what, void *arg)
{
    struct tg_gw_session *s = arg;
    (void)fd;
    (void)what;
    if (s->info.roles || s->closing)
        return;
    tg_gw_metrics_auth_failure(s->gw->metrics, s->info.transport, "timeout");
    tg_warn(LOG, "session %llu: client %s did not authenticate within %u ms; closing", (unsigned long long)s->id,
            s->info.peer, s->gw->limits.handshake_timeout_ms);
    send_request_error(s, 0, "authentication timeout");
    tg_gw_session_close(s, "authentication timeout", 1);
}

static void free_cb(evutil_socket_t fd, short what, void *arg)
{
    struct tg_gw_session *s = arg;
    (void)fd;
    (void)what;
    if (s->down || s->up)
        return; /* a transfer re-used it (cannot happen today); stay */
    tg_gw_session_destroy(s);
}

struct tg_gw_session *tg_gw_session_new(struct tg_gw *gw, tg_conn *down, const struct tg_gw_client_info *info,
                                        struct tg_gw_listener *l)
{
    struct tg_gw_session *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->gw = gw;
    s->id = ++gw->next_session_id;
    s->info = *info;
    s->listener = l;
    s->down = down;
    s->client_counted = 1;
    s->next_private_id = TG_GW_PRIVATE_REQUEST_ID | 1u;
    s->started_us = s->last_activity_us = tg_gw_now_us();
    tg_gw_bucket_init(&s->bucket, gw->limits.rate, gw->limits.burst, s->started_us);
    s->hs_ev = evtimer_new(gw->base, hs_cb, s);
    s->rate_ev = evtimer_new(gw->base, rate_cb, s);
    s->free_ev = event_new(gw->base, -1, 0, free_cb, s);
    if (!s->hs_ev || !s->rate_ev || !s->free_ev) {
        if (s->hs_ev)
            event_free(s->hs_ev);
        if (s->rate_ev)
            event_free(s->rate_ev);
        if (s->free_ev)
            event_free(s->free_ev);
        free(s);
        return NULL;
    }
    s->next = gw->sessions;
    if (s->next)
        s->next->prev = s;
    gw->sessions = s;
    tg_gw_session_linked(gw);
    watch(s); /* checked once by the next sweep */
    tg_conn_set_cbs(down, &k_down_cbs, s);
    for (size_t i = 0; i < gw->n_filters; i++) {
        void *state = NULL;
        const struct tg_gw_filter *f = gw->filters[i].f;
        if (f->attach && !f->attach(s, gw->filters[i].ctx, &state))
            continue;
        s->filt[s->n_filt].f = f;
        s->filt[s->n_filt].ctx = gw->filters[i].ctx;
        s->filt[s->n_filt].state = state;
        s->n_filt++;
    }
    if (!s->info.roles && gw->limits.handshake_timeout_ms) {
        struct timeval tv = {.tv_sec = gw->limits.handshake_timeout_ms / 1000,
                             .tv_usec = (gw->limits.handshake_timeout_ms % 1000) * 1000};
        event_add(s->hs_ev, &tv);
    }
    char rl[64];
    tg_gw_roles_format(s->info.roles, rl, sizeof rl);
    tg_info(LOG, "session %llu: %s client %s on the %s port (%s, roles %s)", (unsigned long long)s->id,
            tg_gw_transport_name(s->info.transport), s->info.peer, port_name(s->info.port), who(s),
            s->info.roles ? rl : "none until Authenticate");
    return s;
}

void tg_gw_session_destroy(struct tg_gw_session *s)
{
    for (size_t i = 0; i < s->n_filt; i++)
        if (s->filt[i].f->detach)
            s->filt[i].f->detach(s, s->filt[i].ctx, s->filt[i].state);
    s->n_filt = 0;
    if (s->down) {
        tg_conn_destroy(s->down);
        s->down = NULL;
    }
    if (s->up) {
        tg_conn_destroy(s->up);
        s->up = NULL;
    }
    release_client(s);
    event_free(s->hs_ev);
    event_free(s->rate_ev);
    event_free(s->free_ev);
    for (size_t i = 0; i < s->n_svcs; i++)
        free_svc(&s->svcs[i]);
    free(s->calls);
    unwatch(s);
    set_kept(s, 0);
    struct tg_gw *gw = s->gw;
    if (s->prev)
        s->prev->next = s->next;
    else
        gw->sessions = s->next;
    if (s->next)
        s->next->prev = s->prev;
    free(s);
    tg_gw_session_unlinked(gw);
}

void tg_gw_session_sweep(struct tg_gw_session *s, uint64_t now_us, uint64_t *to_clients, uint64_t *to_service)
{
    if (s->up)
        *to_service += tg_conn_output_len(s->up);
    if (!s->down || tg_conn_is_closing(s->down))
        return;
    size_t q = tg_conn_output_len(s->down);
    *to_clients += q;
    const struct tg_gw_limits *l = &s->gw->limits;
    enum tg_gw_slow_verdict v = tg_gw_slow_check(&s->slow, l, q, now_us);
    if (v == TG_GW_SLOW_OK && tg_conn_is_congested(s->down)) /* paused for not reading: is it reading? */
        v = tg_gw_slow_stalled(l, tg_conn_output_stalled_ms(s->down, now_us / 1000u));
    if (v != TG_GW_SLOW_OK) {
        char why[160];
        if (v == TG_GW_SLOW_CUT_HARD)
            snprintf(why, sizeof why, "slow client: %zu bytes queued, over the hard limit", q);
        else if (v == TG_GW_SLOW_CUT_STALLED)
            snprintf(why, sizeof why, "slow client: read nothing of %zu queued bytes for more than %u ms", q,
                     l->soft_grace_ms);
        else
            snprintf(why, sizeof why, "slow client: over the soft limit (%zu bytes) for more than %u ms", l->out_soft,
                     l->soft_grace_ms);
        cut_down(s, v == TG_GW_SLOW_CUT_HARD ? "slow_client_hard" : "slow_client_soft", why);
        return;
    }
    if (l->idle_timeout_ms && s->n_calls == 0 && now_us - s->last_activity_us > (uint64_t)l->idle_timeout_ms * 1000u)
        cut_down(s, "idle", "idle timeout");
}

void tg_gw_sessions_sweep(struct tg_gw *gw, uint64_t now_us, uint64_t *to_clients, uint64_t *to_service)
{
    /* --idle-timeout needs every session looked at; otherwise only those that may have output */
    int all = gw->limits.idle_timeout_ms != 0;
    struct tg_gw_session *next;
    for (struct tg_gw_session *s = all ? gw->sessions : gw->watched; s; s = next) {
        next = all ? s->next : s->wnext;
        tg_gw_session_sweep(s, now_us, to_clients, to_service);
        int queued = (s->up && tg_conn_output_len(s->up)) || (s->down && tg_conn_output_len(s->down));
        if (!queued && !s->slow.over_soft_since_us)
            unwatch(s);
    }
}

/* ------------------------------------------------------------ queries */

uint64_t tg_gw_session_id(const struct tg_gw_session *s) { return s->id; }
struct tg_gw_session *tg_gw_session_next(const struct tg_gw_session *s) { return s->next; }
struct tg_gw *tg_gw_session_gw(const struct tg_gw_session *s) { return s->gw; }
const struct tg_gw_client_info *tg_gw_session_info(const struct tg_gw_session *s) { return &s->info; }
unsigned tg_gw_session_roles(const struct tg_gw_session *s) { return s->info.roles; }

int tg_gw_session_set_node(struct tg_gw_session *s, const char *node)
{
    if (s->up_opened || strlen(node) >= sizeof s->info.node)
        return -1;
    snprintf(s->info.node, sizeof s->info.node, "%s", node);
    return 0;
}
tg_conn *tg_gw_session_down(const struct tg_gw_session *s) { return s->down; }
tg_conn *tg_gw_session_up(const struct tg_gw_session *s) { return s->up; }
int tg_gw_session_detached(const struct tg_gw_session *s) { return s->detached; }
size_t tg_gw_session_pending_calls(const struct tg_gw_session *s) { return s->n_calls; }

const char *tg_gw_session_service_name(const struct tg_gw_session *s, uint32_t service_id)
{
    const struct bound_svc *b = find_svc_c(s, service_id);
    return b ? b->name : NULL;
}

const char *tg_gw_session_method_name(const struct tg_gw_session *s, uint32_t service_id, uint32_t method_id)
{
    const struct bound_svc *b = find_svc_c(s, service_id);
    if (!b)
        return NULL;
    if (b->local)
        return method_id >= 1 && method_id <= b->local->n_methods ? b->local->methods[method_id - 1].name : NULL;
    for (size_t i = 0; i < b->n_methods; i++)
        if (b->methods[i].id == method_id)
            return b->methods[i].name;
    return NULL;
}

uint32_t tg_gw_session_service_id(const struct tg_gw_session *s, const char *service)
{
    for (size_t i = 0; i < s->n_svcs; i++)
        if (!s->svcs[i].local && strcmp(s->svcs[i].name, service) == 0)
            return s->svcs[i].id;
    return 0;
}

uint32_t tg_gw_session_method_id(const struct tg_gw_session *s, const char *service, const char *method)
{
    for (size_t i = 0; i < s->n_svcs; i++) {
        if (s->svcs[i].local || strcmp(s->svcs[i].name, service) != 0)
            continue;
        for (size_t j = 0; j < s->svcs[i].n_methods; j++)
            if (strcmp(s->svcs[i].methods[j].name, method) == 0)
                return s->svcs[i].methods[j].id;
    }
    return 0;
}

/* ------------------------------------------------------------ filter actions */

int tg_gw_session_bind_up(struct tg_gw_session *s, const char *service, tg_gw_bind_fn cb, void *arg)
{
    if (!service || strlen(service) >= NAME_LEN || s->n_binds >= MAX_PENDING_BINDS)
        return -1;
    uint64_t rid = s->next_private_id++;
    uint8_t buf[128];
    size_t n = tg_ipc_encode_bind(buf, sizeof buf, rid, service);
    if (!n)
        return -1;
    struct pending_bind *pb = &s->binds[s->n_binds++];
    memset(pb, 0, sizeof *pb);
    pb->rid = rid;
    pb->private_ = 1;
    pb->cb = cb;
    pb->arg = arg;
    snprintf(pb->name, sizeof pb->name, "%s", service);
    if (tg_gw_session_send_up(s, buf, n, -1) != 0) {
        ssize_t i = find_bind(s, rid);
        if (i >= 0)
            remove_bind(s, (size_t)i);
        return -1;
    }
    return 0;
}

int tg_gw_session_call_up(struct tg_gw_session *s, uint32_t service_id, uint32_t method_id, const uint8_t *args,
                          size_t len, int fd, tg_gw_reply_fn cb, void *arg)
{
    uint64_t rid = s->next_private_id++;
    size_t need = tg_ipc_encode_invoke(NULL, 0, rid, service_id, method_id, args, len, cb == NULL);
    uint8_t *buf = malloc(need ? need : 1);
    if (!buf)
        return -1;
    size_t n = tg_ipc_encode_invoke(buf, need, rid, service_id, method_id, args, len, cb == NULL);
    int rc = -1;
    if (n) {
        struct pending_call *pc = NULL;
        if (cb) {
            pc = push_call(s);
            if (pc) {
                pc->rid = rid;
                pc->private_ = 1;
                pc->cb = cb;
                pc->arg = arg;
                pc->start_us = tg_gw_now_us();
                const char *sn = tg_gw_session_service_name(s, service_id);
                const char *mn = tg_gw_session_method_name(s, service_id, method_id);
                pc->metric = tg_gw_metrics_method(s->gw->metrics, sn ? sn : "?", mn ? mn : "?");
            }
        }
        if ((!cb || pc) && tg_gw_session_send_up(s, buf, n, fd) == 0) {
            rc = 0;
        } else if (pc) {
            ssize_t i = find_call(s, rid);
            if (i >= 0)
                remove_call(s, (size_t)i);
        }
    }
    free(buf);
    return rc;
}

void tg_gw_session_hold_down(struct tg_gw_session *s, int hold)
{
    if (hold)
        s->down_pause |= P_HOLD;
    else
        s->down_pause &= ~P_HOLD;
    apply_pause(s);
}

void tg_gw_session_hold_up(struct tg_gw_session *s, int hold)
{
    if (hold)
        s->up_pause |= P_HOLD;
    else
        s->up_pause &= ~P_HOLD;
    apply_pause(s);
}

int tg_gw_session_transfer_down(struct tg_gw_session *from, struct tg_gw_session *to)
{
    if (from == to || !to->detached || to->down || to->closing || !from->down || tg_conn_is_closing(from->down))
        return -1;
    tg_conn *c = from->down;
    from->down = NULL;
    release_client(to); /* the kept session's slot: from now on it holds the new client's */
    to->down = c;
    set_kept(to, 0);
    to->info = from->info;
    to->listener = from->listener;
    to->client_counted = from->client_counted;
    from->client_counted = 0;
    from->listener = NULL;
    to->bucket = from->bucket;
    memset(&to->slow, 0, sizeof to->slow);
    to->down_pause = from->down_pause & P_RATE;
    to->up_pause &= ~P_PEER;
    if (to->down_pause & P_RATE)
        rate_cb(-1, 0, to);
    to->last_activity_us = tg_gw_now_us();
    tg_conn_set_cbs(c, &k_down_cbs, to);
    watch(to); /* whatever the kept session queued meanwhile is now the new client's */
    tg_info(LOG, "session %llu: client %s resumed session %llu", (unsigned long long)from->id, to->info.peer,
            (unsigned long long)to->id);
    from->closing = 1;
    event_del(from->hs_ev);
    event_del(from->rate_ev);
    if (from->up)
        tg_conn_close(from->up, "client resumed another session");
    else
        schedule_free(from);
    apply_pause(to);
    return 0;
}
