/* gw_bridge.c: bridge sessions: one client connection and one upstream connection, frames relayed
 * byte for byte with per-method access control, frame filters, backpressure, rate limits and the
 * slow-client policy (see gw_bridge.h; the method tables, the gateway's own calls and the
 * gateway-local services are in the gw_bridge_*.c files named in gw_bridge_int.h). */
#include "gw_bridge_int.h"

#include <event2/event.h>
#include <protobuf-c/protobuf-c.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "gw_listener.h"
#include "gw_metrics.h"
#include "gw_upstream.h"
#include "tracegate/log.h"
#include "tracegate/pbwire.h"

static const struct tg_conn_cbs k_down_cbs;
static const struct tg_conn_cbs k_up_cbs;

/* ------------------------------------------------------------ helpers */

static const char *port_name(enum tg_gw_port p) { return p == TG_GW_PORT_PRODUCER ? "producer" : "consumer"; }

const char *tg_gwb_who(const struct tg_gw_session *s)
{
    return s->info.principal[0] ? s->info.principal : "-";
}

void tg_gwb_apply_pause(struct tg_gw_session *s)
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
void tg_gwb_violation(struct tg_gw_session *s, const char *label, const char *why)
{
    tg_gw_metrics_frame_rejected(s->gw->metrics, label);
    tg_warn(LOG, "session %llu: closing client %s (%s): %s", (unsigned long long)s->id, s->info.peer, tg_gwb_who(s), why);
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
    tg_warn(LOG, "session %llu: cutting client %s (%s): %s", (unsigned long long)s->id, s->info.peer, tg_gwb_who(s), why);
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
        tg_gwb_apply_pause(s);
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
        tg_gwb_apply_pause(s);
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

int tg_gw_session_reply_msg(struct tg_gw_session *s, uint64_t request_id, const ProtobufCMessage *msg)
{
    size_t n = protobuf_c_message_get_packed_size(msg);
    uint8_t *buf = malloc(n ? n : 1);
    if (!buf) {
        tg_gw_session_reply(s, request_id, 0, 0, NULL, 0);
        return -1;
    }
    protobuf_c_message_pack(msg, buf);
    int rc = tg_gw_session_reply(s, request_id, 1, 0, buf, n);
    free(buf);
    return rc;
}

void tg_gwb_send_request_error(struct tg_gw_session *s, uint64_t rid, const char *msg)
{
    uint8_t buf[256];
    size_t n = tg_ipc_encode_request_error(buf, sizeof buf, rid, msg);
    if (n)
        tg_gw_session_send_down(s, buf, n, -1);
}

void tg_gwb_send_bind_reply(struct tg_gw_session *s, uint64_t rid, int success, uint32_t service_id,
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
    /* a raw node's TCP consumer socket: the client's identity first, as to an external upstream */
    if (r.first_len) {
        if (tg_conn_send(s->up, r.first + 4, r.first_len - 4, -1) != 0) {
            tg_gw_session_close(s, "cannot queue the client's identity for the node", 0);
            return NULL;
        }
        after_send_up(s, s->up);
    }
    tg_info(LOG, "session %llu: routed to node %s", (unsigned long long)s->id, node);
    tg_gwb_apply_pause(s);
    return s->up;
}

tg_conn *tg_gw_session_ensure_up(struct tg_gw_session *s)
{
    if (s->up)
        return s->up;
    if (s->closing || s->up_opened)
        return NULL;
    s->up_opened = 1;
    s->up_roles = s->info.roles;
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
    tg_gwb_apply_pause(s);
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
        tg_gwb_violation(s, "filter", f.close_reason ? f.close_reason : "closed by filter");
        return 0;
    }
    int sent = 0;
    if (v == TG_GW_FORWARD && !s->closing)
        sent = (from ? move_up(s, from, len) : tg_gw_session_send_up(s, body, len, fd)) == 0;
    if (fd >= 0)
        close(fd);
    return sent;
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
            tg_gwb_auth_required(s, fi->request_id);
            return;
        }
        tg_gwb_bind_local(s, fi->request_id, name);
        return;
    }
    if (!s->info.roles) {
        if (fd >= 0)
            close(fd);
        tg_gwb_auth_required(s, fi->request_id);
        return;
    }
    if (!name_ok || !tg_gw_acl_may_bind(s->info.roles, name)) {
        if (fd >= 0)
            close(fd);
        tg_gw_metrics_frame_rejected(s->gw->metrics, "acl");
        char rl[64];
        tg_gw_roles_format(s->info.roles, rl, sizeof rl);
        tg_warn(LOG, "session %llu: denied binding %s to %s (%s, roles %s)", (unsigned long long)s->id, name,
                s->info.peer, tg_gwb_who(s), rl);
        tg_gwb_send_bind_reply(s, fi->request_id, 0, 0, NULL, 0);
        return;
    }
    if (s->n_binds >= MAX_PENDING_BINDS) {
        if (fd >= 0)
            close(fd);
        tg_gwb_violation(s, "too_many_binds", "too many BindService requests in flight");
        return;
    }
    struct pending_bind *pb = &s->binds[s->n_binds++];
    memset(pb, 0, sizeof *pb);
    pb->rid = fi->request_id;
    snprintf(pb->name, sizeof pb->name, "%s", name);
    if (!forward_up(s, body, len, fi, name, NULL, fd, NULL)) {
        ssize_t i = tg_gwb_find_bind(s, fi->request_id);
        if (i >= 0)
            tg_gwb_remove_bind(s, (size_t)i);
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
                s->info.peer, tg_gwb_who(s), rl, s->denials == DENY_LOG_BURST ? "; further denials logged every 1000" : "");
    }
    tg_gw_session_reply(s, fi->request_id, 0, 0, NULL, 0);
}

static void handle_invoke(struct tg_gw_session *s, const uint8_t *body, size_t len, const struct tg_frame_info *fi,
                          int fd, tg_conn *from)
{
    struct bound_svc *b = tg_gwb_find_svc(s, fi->service_id);
    if (b && b->local) {
        if (fd >= 0)
            close(fd);
        tg_gwb_invoke_local(s, b, fi);
        return;
    }
    if (!s->info.roles) {
        if (fd >= 0)
            close(fd);
        tg_gwb_auth_required(s, fi->request_id);
        return;
    }
    struct method_ent *m = b ? tg_gwb_find_method(b, fi->method_id) : NULL;
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
    /* names are copied: filters may rebind services (both are NUL-terminated NAME_LEN arrays:
     * a plain copy, not snprintf, on this per-call path) */
    char svc[NAME_LEN], method[NAME_LEN];
    _Static_assert(sizeof svc == sizeof b->name && sizeof method == sizeof m->name, "same size names");
    memcpy(svc, b->name, sizeof svc);
    memcpy(method, m->name, sizeof method);
    int metric = m->metric;
    if (forward_up(s, body, len, fi, svc, method, fd, from) && !fi->drop_reply) {
        struct pending_call *pc = tg_gwb_push_call(s);
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
    tg_gwb_apply_pause(s);
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
        tg_gwb_apply_pause(s);
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
        tg_gwb_violation(s, label, bad);
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
            tg_gwb_auth_required(s, fi.request_id);
            return;
        }
        tg_gw_metrics_frame_rejected(s->gw->metrics, "unknown_request");
        tg_gwb_send_request_error(s, fi.request_id, "unknown request");
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
    struct bound_svc *b = tg_gwb_find_svc(s, fi->service_id);
    struct method_ent *m = b && !b->local ? tg_gwb_find_method(b, fi->method_id) : NULL;
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
        tg_gwb_route_private(s, fi);
        return;
    }
    if (fi->msg == TG_MSG_BIND_SERVICE_REPLY) {
        if (tg_gwb_learn_bind(s, fi) != 0) {
            if (fd >= 0)
                close(fd);
            return;
        }
    } else if (fi->msg == TG_MSG_INVOKE_METHOD_REPLY || fi->msg == TG_MSG_REQUEST_ERROR) {
        ssize_t ci = tg_gwb_find_call(s, fi->request_id);
        if (ci >= 0) {
            struct pending_call *pc = &s->calls[ci];
            tg_gw_metrics_method_names(s->gw->metrics, pc->metric, &svc, &method);
            if (fi->msg == TG_MSG_REQUEST_ERROR || !fi->has_more) {
                int ok = fi->msg == TG_MSG_INVOKE_METHOD_REPLY && fi->success;
                tg_gw_metrics_rpc_done(s->gw->metrics, pc->metric, tg_gw_now_us() - pc->start_us, ok);
                tg_gwb_remove_call(s, (size_t)ci);
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
                tg_gwb_violation(s, "filter", f.close_reason ? f.close_reason : "closed by filter");
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
    tg_gwb_apply_pause(s);
}

static void on_up_drain(tg_conn *c, void *arg)
{
    struct tg_gw_session *s = arg;
    (void)c;
    s->down_pause &= ~P_PEER;
    tg_gwb_apply_pause(s);
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
                s->info.peer, tg_gwb_who(s), s->gw->limits.max_frame);
    } else {
        tg_info(LOG, "session %llu: client %s (%s) disconnected: %s", (unsigned long long)s->id, s->info.peer, tg_gwb_who(s),
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
            tg_gwb_apply_pause(s);
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
            tg_gwb_remove_bind(s, i);
            if (pb.cb)
                pb.cb(s, 0, 0, pb.arg);
        } else {
            i++;
        }
    }
    for (size_t i = 0; i < s->n_calls;) {
        if (s->calls[i].private_) {
            struct pending_call pc = s->calls[i];
            tg_gwb_remove_call(s, i);
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
            tg_gwb_apply_pause(s);
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
    tg_gwb_send_request_error(s, 0, "authentication timeout");
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
            tg_gw_transport_name(s->info.transport), s->info.peer, port_name(s->info.port), tg_gwb_who(s),
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
        tg_gwb_free_svc(&s->svcs[i]);
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
unsigned tg_gw_session_up_roles(const struct tg_gw_session *s) { return s->up_roles; }

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


/* ------------------------------------------------------------ filter actions */


void tg_gw_session_hold_down(struct tg_gw_session *s, int hold)
{
    if (hold)
        s->down_pause |= P_HOLD;
    else
        s->down_pause &= ~P_HOLD;
    tg_gwb_apply_pause(s);
}

void tg_gw_session_hold_up(struct tg_gw_session *s, int hold)
{
    if (hold)
        s->up_pause |= P_HOLD;
    else
        s->up_pause &= ~P_HOLD;
    tg_gwb_apply_pause(s);
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
    tg_gwb_apply_pause(to);
    return 0;
}
