/* gw_resume.c: consumer session survival: the TracegateSession local service (GetResumeToken,
 * Resume), the filter that keeps a dropped client's upstream for the resume window, buffers and
 * replays what the service sent meanwhile, re-sends frames lost in flight, and Detaches the
 * tracing session with a logged key when nobody resumes it (see gw_resume.h, docs/gateway.md). */
#include "gw_resume.h"

#include <event2/event.h>
#include <openssl/crypto.h>
#include <openssl/rand.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "consumer_port.pb-c.h"
#include "gw_bridge.h"
#include "gw_core.h"
#include "base/log_sample.h"
#include "tracegate/clock.h"
#include "tracegate/log.h"
#include "tracegate_gateway.pb-c.h"
#include "base/hex.h"

#define LOG "gw-resume"
#define TOKEN_BYTES 16
#define KEY_PREFIX "tracegate-"
#define WINDOW_TICK_MS 250 /* how often a detached session checks its window and the drain flag */
#define PUMP_RETRY_MS 5    /* replay: how soon to look again when the client's queue is full */
#define REFUSAL_LOG_PER_S 20u /* refused Resume calls logged per second (the rest are counted) */

struct rs_frame {
    struct rs_frame *next;
    uint64_t seq; /* retained frames: the down connection's frames_out once it was queued */
    int fd;
    size_t len;
    uint8_t body[];
};

struct rs_queue {
    struct rs_frame *head, *tail;
    size_t bytes, n;
    size_t *total; /* every session's queues together (tg_gw_resume.held) */
};

struct rs_state;

struct tg_gw_resume {
    struct tg_gw *gw;
    struct tg_gw_resume_opts o;
    struct tg_gw_local_service svc; /* must outlive the gateway: lives here */
    struct rs_state *states;        /* every consumer session's state */
    size_t held;                    /* bytes in every session's `pending` and `sent` (o.max_total) */
    size_t n_detached;
    uint64_t resumed_total;
    struct tg_log_sampler refusal_log; /* a client may call Resume as often as its rate allows */
};

struct rs_state {
    struct tg_gw_resume *r;
    struct tg_gw_session *s;
    struct rs_state *prev, *next;
    int has_token;
    uint8_t token[TOKEN_BYTES];
    char key[sizeof KEY_PREFIX + 2 * TOKEN_BYTES];
    uint64_t link_id; /* names the current client connection's frame numbering */
    int active;    /* the upstream consumer connection owns a tracing session */
    int detached;  /* the client is gone; waiting for a Resume */
    int replaying; /* resumed: `pending` is being sent before live frames */
    int detaching; /* the window ended: Detach sent upstream, the session closes on its reply */
    int held;      /* tg_gw_session_hold_up(s, 1) is in effect */
    int over_cap;  /* kept only to be Detached at once: the principal has too many kept sessions */
    uint64_t detached_at_us;
    struct rs_queue pending; /* to send to the client (buffered while detached, or re-sent) */
    struct rs_queue sent;    /* forwarded on the current client connection, kept for re-sending */
    uint64_t trimmed_seq;    /* highest seq dropped from `sent` */
    struct event *window_ev, *pump_ev;
    /* takeover: a Resume for a session whose old client still looks connected */
    struct rs_state *takeover_by; /* on the target: the new connection's state */
    struct rs_state *takeover_of; /* on the new connection: the target */
    uint64_t takeover_rid;
    struct resume_req {
        int has_frames, has_link;
        uint64_t frames, link;
    } takeover_req;
};

/* ------------------------------------------------------------ queues */

static void q_push(struct rs_queue *q, struct rs_frame *f)
{
    f->next = NULL;
    if (q->tail)
        q->tail->next = f;
    else
        q->head = f;
    q->tail = f;
    q->bytes += f->len;
    q->n++;
    *q->total += f->len;
}

static struct rs_frame *q_pop(struct rs_queue *q)
{
    struct rs_frame *f = q->head;
    if (!f)
        return NULL;
    q->head = f->next;
    if (!q->head)
        q->tail = NULL;
    q->bytes -= f->len;
    q->n--;
    *q->total -= f->len;
    f->next = NULL;
    return f;
}

static void frame_free(struct rs_frame *f)
{
    if (f->fd >= 0)
        close(f->fd);
    free(f);
}

static void q_clear(struct rs_queue *q)
{
    struct rs_frame *f;
    while ((f = q_pop(q)) != NULL)
        frame_free(f);
}

static struct rs_frame *frame_new(const uint8_t *body, size_t len, int fd)
{
    struct rs_frame *f = malloc(sizeof *f + len);
    if (!f)
        return NULL;
    f->next = NULL;
    f->seq = 0;
    f->fd = fd;
    f->len = len;
    memcpy(f->body, body, len);
    return f;
}

/* ------------------------------------------------------------ helpers */

static unsigned long long sid_of(const struct rs_state *st) { return (unsigned long long)tg_gw_session_id(st->s); }

static struct rs_state *find_state(struct tg_gw_resume *r, const struct tg_gw_session *s)
{
    for (struct rs_state *st = r->states; st; st = st->next)
        if (st->s == s)
            return st;
    return NULL;
}

static void set_hold(struct rs_state *st, int hold)
{
    if (st->held == hold)
        return;
    st->held = hold;
    tg_gw_session_hold_up(st->s, hold);
}

static void add_timer(struct event *ev, uint32_t ms)
{
    struct timeval tv = {.tv_sec = ms / 1000, .tv_usec = (suseconds_t)(ms % 1000) * 1000};
    event_add(ev, &tv);
}

static void set_detached(struct rs_state *st, int on)
{
    if (st->detached == on)
        return;
    st->detached = on;
    if (on)
        st->r->n_detached++;
    else
        st->r->n_detached--;
}

/* Keeps what was forwarded on the current client connection (for re-sending after a drop),
 * trimmed to what can still be in flight: the output queue plus o.inflight. */
static void retain(struct rs_state *st, const uint8_t *body, size_t len, uint64_t seq)
{
    tg_conn *down = tg_gw_session_down(st->s);
    size_t limit = st->r->o.inflight + (down ? tg_conn_output_len(down) : 0);
    struct rs_frame *f = len <= limit && len <= st->r->o.max_total ? frame_new(body, len, -1) : NULL;
    if (f) {
        f->seq = seq;
        q_push(&st->sent, f);
    } else if (seq > st->trimmed_seq) {
        st->trimmed_seq = seq; /* not kept: counts as dropped */
    }
    while (st->sent.head && (st->sent.bytes > limit || st->r->held > st->r->o.max_total)) {
        f = q_pop(&st->sent);
        if (f->seq > st->trimmed_seq)
            st->trimmed_seq = f->seq;
        frame_free(f);
    }
}

/* Over the bound on all sessions together, what absent clients wait for goes first: frames kept
 * for re-sending on connected sessions (a safety net for frames lost in flight) are dropped,
 * oldest first, session by session; such a session's resume then reports `incomplete`. */
static void shed_sent(struct tg_gw_resume *r)
{
    for (struct rs_state *st = r->states; st && r->held > r->o.max_total; st = st->next) {
        struct rs_frame *f;
        while (r->held > r->o.max_total && (f = q_pop(&st->sent)) != NULL) {
            if (f->seq > st->trimmed_seq)
                st->trimmed_seq = f->seq;
            frame_free(f);
        }
    }
}

static uint64_t down_frames_out(struct rs_state *st)
{
    tg_conn *down = tg_gw_session_down(st->s);
    if (!down)
        return 0;
    struct tg_conn_stats cs;
    tg_conn_get_stats(down, &cs);
    return cs.frames_out;
}

/* ------------------------------------------------------------ detach with a key */

static void on_detach_reply(struct tg_gw_session *s, int success, int has_more, const uint8_t *reply, size_t len,
                            void *arg)
{
    struct rs_state *st = arg;
    (void)reply;
    (void)len;
    if (has_more)
        return;
    event_del(st->window_ev); /* answered: no Detach timeout */
    if (success)
        tg_warn(LOG,
                "session %llu: nobody resumed it; the tracing session was detached with key \"%s\" and keeps "
                "running. Collect it with `tracectl attach URL %s` (the key is not a secret: attaching still "
                "needs the recorder role)",
                sid_of(st), st->key, st->key);
    else
        tg_warn(LOG, "session %llu: nobody resumed it and the service refused Detach (no tracing session left "
                     "to keep, or the service closed); closing",
                sid_of(st));
    tg_gw_session_close(s, "resume window ended", 0);
}

/* The client will not come back: keep the trace in the service under st->key, then close. */
static void start_detach(struct rs_state *st, const char *why)
{
    struct tg_gw_session *s = st->s;
    if (st->detaching)
        return;
    st->detaching = 1;
    st->has_token = 0; /* no resume from now on */
    set_detached(st, 0);
    event_del(st->window_ev);
    event_del(st->pump_ev);
    st->replaying = 0;
    set_hold(st, 0);
    q_clear(&st->pending);
    q_clear(&st->sent);
    uint32_t sid = tg_gw_session_service_id(s, "ConsumerPort");
    uint32_t mid = tg_gw_session_method_id(s, "ConsumerPort", "Detach");
    if (!st->active || !sid || !mid || !tg_gw_session_up(s)) {
        tg_info(LOG, "session %llu: %s; no tracing session to keep; closing", sid_of(st), why);
        tg_gw_session_close(s, why, 0);
        return;
    }
    Perfetto__Protos__DetachRequest dr = PERFETTO__PROTOS__DETACH_REQUEST__INIT;
    dr.key = st->key;
    uint8_t buf[128];
    size_t n = perfetto__protos__detach_request__get_packed_size(&dr);
    if (n > sizeof buf)
        n = 0;
    else
        perfetto__protos__detach_request__pack(&dr, buf);
    tg_info(LOG, "session %llu: %s; detaching the tracing session upstream", sid_of(st), why);
    if (!n || tg_gw_session_call_up(s, sid, mid, buf, n, -1, on_detach_reply, st) != 0) {
        tg_warn(LOG, "session %llu: cannot send Detach upstream; the tracing session is lost", sid_of(st));
        tg_gw_session_close(s, why, 0);
        return;
    }
    add_timer(st->window_ev, st->r->o.detach_timeout_ms); /* window_cb closes it if no answer comes */
}

static void window_cb(evutil_socket_t fd, short what, void *arg)
{
    struct rs_state *st = arg;
    (void)fd;
    (void)what;
    if (st->detaching) {
        tg_warn(LOG, "session %llu: the service did not answer Detach within %u ms; closing (the tracing session "
                     "may be lost)",
                sid_of(st), st->r->o.detach_timeout_ms);
        tg_gw_session_close(st->s, "Detach not answered", 0);
        return;
    }
    if (!st->detached)
        return;
    struct tg_gw_resume *r = st->r;
    uint64_t now = tg_gw_now_us();
    uint64_t end = st->detached_at_us + (uint64_t)r->o.window_ms * 1000u;
    if (r->gw->draining) {
        start_detach(st, "the gateway is shutting down");
        return;
    }
    if (st->over_cap) {
        start_detach(st, "its principal already has the most kept sessions allowed");
        return;
    }
    if (now >= end) {
        start_detach(st, "the resume window ended");
        return;
    }
    uint64_t left_ms = (end - now + 999) / 1000;
    add_timer(st->window_ev, left_ms < WINDOW_TICK_MS ? (uint32_t)left_ms : WINDOW_TICK_MS);
}

/* ------------------------------------------------------------ replay */

/* Sends `pending` to the client while its queue has room; live frames wait behind it. */
static void pump(struct rs_state *st)
{
    tg_conn *down = tg_gw_session_down(st->s);
    if (!st->replaying || !down)
        return;
    size_t high = st->r->gw->limits.out_high;
    /* A connection that is closing (its close callback comes later in this turn of the loop, which
     * may run this timer first) takes nothing: a frame popped and not sent would be lost for the
     * next resume, without `incomplete`. */
    while (st->pending.head && !tg_conn_is_closing(down) && tg_conn_output_len(down) < high) {
        struct rs_frame *f = st->pending.head;
        if (tg_gw_session_send_down(st->s, f->body, f->len, f->fd) != 0)
            return; /* not sent: it stays first for the next resume (on_down_close keeps the session) */
        q_pop(&st->pending);
        if (st->has_token)
            retain(st, f->body, f->len, down_frames_out(st));
        frame_free(f);
        down = tg_gw_session_down(st->s);
        if (!down)
            return;
    }
    if (tg_conn_is_closing(down))
        return; /* the client is gone again: on_down_close keeps the session with what is left */
    if (st->pending.head) {
        add_timer(st->pump_ev, PUMP_RETRY_MS);
        return;
    }
    st->replaying = 0;
    set_hold(st, 0);
    tg_debug(LOG, "session %llu: replay done", sid_of(st));
}

static void pump_cb(evutil_socket_t fd, short what, void *arg);

static void reply_resume(struct tg_gw_session *s, uint64_t rid, int ok, int incomplete, uint64_t link_id);

/* Answers a refused Resume on s and logs why, sampled: a connection is not closed for a refusal,
 * so one client could otherwise write a line per call, at the rate limit's pace. */
static void refuse(struct tg_gw_resume *r, struct tg_gw_session *s, uint64_t rid, const char *why)
{
    unsigned unlogged;
    if (tg_log_sample(&r->refusal_log, tg_mono_us(), REFUSAL_LOG_PER_S, 1000000u, &unlogged)) {
        if (unlogged)
            tg_warn(LOG, "session %llu: Resume refused for %s: %s (and %u similar refusals not logged)",
                    (unsigned long long)tg_gw_session_id(s), tg_gw_session_info(s)->peer, why, unlogged);
        else
            tg_warn(LOG, "session %llu: Resume refused for %s: %s", (unsigned long long)tg_gw_session_id(s),
                    tg_gw_session_info(s)->peer, why);
    }
    reply_resume(s, rid, 0, 0, 0);
}

static void reply_resume(struct tg_gw_session *s, uint64_t rid, int ok, int incomplete, uint64_t link_id)
{
    Tracegate__ResumeResponse resp = TRACEGATE__RESUME_RESPONSE__INIT;
    resp.has_ok = 1;
    resp.ok = ok != 0;
    if (incomplete) {
        resp.has_incomplete = 1;
        resp.incomplete = 1;
    }
    if (ok) {
        resp.has_link_id = 1;
        resp.link_id = link_id;
    }
    uint8_t buf[32];
    size_t n = tracegate__resume_response__pack(&resp, buf);
    tg_gw_session_reply(s, rid, 1, 0, buf, n);
}

/* Moves the new connection (from) into the detached session (to), answers Resume on it, re-sends
 * what was lost in flight and replays what was buffered. */
static uint64_t new_link_id(uint64_t old)
{
    uint64_t id;
    if (RAND_bytes((unsigned char *)&id, sizeof id) != 1 || id == old)
        id = old + 1;
    return id;
}

static void complete_resume(struct rs_state *from, struct rs_state *to, uint64_t rid, const struct resume_req *rq)
{
    struct tg_gw_session *fs = from->s;
    if (tg_gw_session_transfer_down(fs, to->s) != 0) {
        tg_warn(LOG, "session %llu: resuming session %llu failed", sid_of(from), sid_of(to));
        reply_resume(fs, rid, 0, 0, 0);
        return;
    }
    /* frames forwarded on the old connection that the client did not get go first */
    int incomplete = 0;
    size_t resent = 0;
    if (rq->has_frames) {
        /* another link id: the client never got the reply of the Resume that made the current
         * connection; everything sent on it came after that reply */
        int same = rq->has_link && rq->link == to->link_id;
        uint64_t got = same ? rq->frames : 0;
        incomplete = got < to->trimmed_seq;
        size_t unused = 0;
        struct rs_queue lost = {.total = &unused};
        struct rs_frame *f;
        while ((f = q_pop(&to->sent)) != NULL) {
            if (f->seq > got) {
                q_push(&lost, f);
                resent++;
            } else {
                frame_free(f);
            }
        }
        if (lost.head) {
            lost.tail->next = to->pending.head;
            if (!to->pending.head)
                to->pending.tail = lost.tail;
            to->pending.head = lost.head;
            to->pending.bytes += lost.bytes;
            to->pending.n += lost.n;
            *to->pending.total += lost.bytes;
        }
    } else {
        q_clear(&to->sent);
    }
    to->trimmed_seq = 0; /* seqs now count on the new connection */
    to->link_id = new_link_id(to->link_id);
    event_del(to->window_ev);
    set_detached(to, 0);
    to->r->resumed_total++;
    tg_info(LOG, "session %llu: resumed by %s after %llu ms (re-sending %zu lost frame(s), replaying %zu frame(s), "
                 "%zu bytes)%s",
            sid_of(to), tg_gw_session_info(to->s)->peer,
            (unsigned long long)((tg_gw_now_us() - to->detached_at_us) / 1000u), resent, to->pending.n - resent,
            to->pending.bytes, incomplete ? "; some frames lost in flight are no longer held" : "");
    reply_resume(to->s, rid, 1, incomplete, to->link_id);
    to->replaying = 1;
    set_hold(to, 1);
    pump(to);
}

/* Who may take session `to` over from connection `s` (NULL: allowed): the same principal, holding
 * admin if the session's upstream was opened with it. The service knows the session by the
 * identity made when its upstream opened (privileged with admin) and that never changes, while
 * the resumed session is checked with the new connection's roles: a connection its listener
 * grants less (`?roles=recorder`) must not drive a privileged upstream. */
static const char *identity_refusal(struct tg_gw_session *s, struct tg_gw_session *to)
{
    if (strcmp(tg_gw_session_info(to)->principal, tg_gw_session_info(s)->principal) != 0)
        return "the token was issued to a different principal";
    if ((tg_gw_session_up_roles(to) & TG_GW_ROLE_ADMIN) && !(tg_gw_session_roles(s) & TG_GW_ROLE_ADMIN))
        return "the session talks to the service as admin and this connection does not have the admin role";
    return NULL;
}

static void pump_cb(evutil_socket_t fd, short what, void *arg)
{
    struct rs_state *st = arg;
    (void)fd;
    (void)what;
    /* a takeover waiting for this session's old client to be gone */
    if (st->takeover_by) {
        struct rs_state *from = st->takeover_by;
        st->takeover_by = NULL;
        from->takeover_of = NULL;
        if (!tg_gw_session_down(from->s))
            return;
        /* checked again: the new connection may have authenticated as someone else meanwhile */
        const char *why = identity_refusal(from->s, st->s);
        if (why)
            refuse(st->r, from->s, from->takeover_rid, why);
        else if (st->detached && !st->detaching)
            complete_resume(from, st, from->takeover_rid, &from->takeover_req);
        else
            reply_resume(from->s, from->takeover_rid, 0, 0, 0);
        return;
    }
    pump(st);
}

/* ------------------------------------------------------------ the local service */

static void m_get_token(struct tg_gw_session *s, uint64_t rid, const uint8_t *args, size_t len, int drop_reply,
                        void *ctx)
{
    struct tg_gw_resume *r = ctx;
    (void)args;
    (void)len;
    (void)drop_reply;
    struct rs_state *st = find_state(r, s);
    if (!st || st->detaching) {
        tg_gw_session_reply(s, rid, 0, 0, NULL, 0); /* not a consumer session */
        return;
    }
    if (!st->has_token) {
        uint8_t key[TOKEN_BYTES];
        if (RAND_bytes(st->token, sizeof st->token) != 1 || RAND_bytes(key, sizeof key) != 1) {
            tg_warn(LOG, "session %llu: no randomness for a resume token", sid_of(st));
            tg_gw_session_reply(s, rid, 0, 0, NULL, 0);
            return;
        }
        memcpy(st->key, KEY_PREFIX, sizeof KEY_PREFIX - 1);
        tg_hex_encode(st->key + sizeof KEY_PREFIX - 1, key, sizeof key);
        st->link_id = new_link_id(0);
        q_clear(&st->sent);
        st->trimmed_seq = 0;
        st->has_token = 1;
        tg_info(LOG, "session %llu: resume token issued (window %u ms)", sid_of(st), r->o.window_ms);
    }
    char hex[2 * TOKEN_BYTES + 1];
    tg_hex_encode(hex, st->token, sizeof st->token);
    Tracegate__GetResumeTokenResponse resp = TRACEGATE__GET_RESUME_TOKEN_RESPONSE__INIT;
    resp.token = hex;
    resp.has_window_ms = 1;
    resp.window_ms = r->o.window_ms;
    resp.detach_key = st->key;
    resp.has_link_id = 1;
    resp.link_id = st->link_id;
    uint8_t buf[160];
    size_t n = tracegate__get_resume_token_response__get_packed_size(&resp);
    if (n > sizeof buf) {
        tg_gw_session_reply(s, rid, 0, 0, NULL, 0);
        return;
    }
    tracegate__get_resume_token_response__pack(&resp, buf);
    tg_gw_session_reply(s, rid, 1, 0, buf, n);
    OPENSSL_cleanse(hex, sizeof hex);
    OPENSSL_cleanse(buf, sizeof buf);
}

static void m_resume(struct tg_gw_session *s, uint64_t rid, const uint8_t *args, size_t len, int drop_reply,
                     void *ctx)
{
    struct tg_gw_resume *r = ctx;
    (void)drop_reply;
    struct rs_state *from = find_state(r, s);
    Tracegate__ResumeRequest *req = tracegate__resume_request__unpack(NULL, len, args);
    uint8_t tok[TOKEN_BYTES];
    int tok_ok = req && tg_hex_decode(tok, sizeof tok, req->token) == 0;
    struct resume_req rq = {0};
    if (req) {
        rq.has_frames = req->has_frames_received;
        rq.frames = req->frames_received;
        rq.has_link = req->has_link_id;
        rq.link = req->link_id;
    }
    if (req) {
        if (req->token)
            OPENSSL_cleanse(req->token, strlen(req->token));
        tracegate__resume_request__free_unpacked(req, NULL);
    }
    if (!from || !tok_ok) {
        refuse(r, s, rid, !from ? "not a consumer session" : "malformed token");
        return;
    }
    /* constant time over every candidate */
    struct rs_state *match = NULL;
    for (struct rs_state *st = r->states; st; st = st->next) {
        int eq = CRYPTO_memcmp(st->token, tok, sizeof tok) == 0;
        if (eq && st->has_token)
            match = st;
    }
    OPENSSL_cleanse(tok, sizeof tok);
    const char *why = NULL;
    if (!match)
        why = "unknown or expired token";
    else if (match == from)
        why = "the token belongs to this connection";
    else if (tg_gw_session_up(s))
        why = "the connection already talks to the service (Resume must come first)";
    else if (from->takeover_of)
        why = "a resume is already in progress on this connection";
    else if (match->takeover_by)
        why = "another connection is resuming that session";
    else
        why = identity_refusal(s, match->s);
    if (why) {
        refuse(r, s, rid, why);
        return;
    }
    if (match->detached) {
        complete_resume(from, match, rid, &rq);
        return;
    }
    /* the old client still looks connected (e.g. a silently dead network path): cut it; the
     * resume completes once the session is detached */
    tg_conn *old = tg_gw_session_down(match->s);
    if (!old) {
        refuse(r, s, rid, "the session is closing");
        return;
    }
    tg_info(LOG, "session %llu: %s resumes it from session %llu; closing the old client connection", sid_of(match),
            tg_gw_session_info(s)->peer, sid_of(from));
    match->takeover_by = from;
    from->takeover_of = match;
    from->takeover_rid = rid;
    from->takeover_req = rq;
    tg_conn_close(old, "the client resumed from a new connection");
}

static const struct tg_gw_local_method k_methods[] = {{"GetResumeToken", m_get_token}, {"Resume", m_resume}};

/* ------------------------------------------------------------ the filter */

static int f_attach(struct tg_gw_session *s, void *ctx, void **state)
{
    struct tg_gw_resume *r = ctx;
    if (tg_gw_session_info(s)->port != TG_GW_PORT_CONSUMER)
        return 0;
    struct rs_state *st = calloc(1, sizeof *st);
    if (!st)
        return 0;
    st->r = r;
    st->s = s;
    st->pending.total = &r->held;
    st->sent.total = &r->held;
    st->window_ev = evtimer_new(r->gw->base, window_cb, st);
    st->pump_ev = evtimer_new(r->gw->base, pump_cb, st);
    if (!st->window_ev || !st->pump_ev) {
        if (st->window_ev)
            event_free(st->window_ev);
        if (st->pump_ev)
            event_free(st->pump_ev);
        free(st);
        return 0;
    }
    st->next = r->states;
    if (st->next)
        st->next->prev = st;
    r->states = st;
    *state = st;
    return 1;
}

static int is_consumer_call(const struct tg_gw_frame *f, const char *method)
{
    return f->service && f->method && strcmp(f->service, "ConsumerPort") == 0 && strcmp(f->method, method) == 0;
}

static enum tg_gw_verdict f_down(struct tg_gw_session *s, struct tg_gw_frame *f, void *ctx, void *state)
{
    struct rs_state *st = state;
    (void)s;
    (void)ctx;
    if (f->info->msg != TG_MSG_INVOKE_METHOD)
        return TG_GW_FORWARD;
    if (is_consumer_call(f, "EnableTracing"))
        st->active = 1;
    else if (is_consumer_call(f, "FreeBuffers"))
        st->active = 0; /* the service processes it before anything we could send later */
    return TG_GW_FORWARD;
}

static enum tg_gw_verdict f_up(struct tg_gw_session *s, struct tg_gw_frame *f, void *ctx, void *state)
{
    struct rs_state *st = state;
    (void)ctx;
    const struct tg_frame_info *fi = f->info;
    if (fi->msg == TG_MSG_INVOKE_METHOD_REPLY && fi->success && !fi->has_more) {
        if (is_consumer_call(f, "Attach") || is_consumer_call(f, "CloneSession"))
            st->active = 1;
        else if (is_consumer_call(f, "Detach"))
            st->active = 0;
    }
    if (st->detaching)
        return TG_GW_CONSUME; /* nobody will read it */
    if (st->detached || st->replaying) {
        struct rs_frame *fr = frame_new(f->body, f->len, f->fd);
        if (!fr) {
            if (st->detached)
                start_detach(st, "out of memory buffering for the client");
            return TG_GW_CONSUME;
        }
        f->fd = -1; /* kept with the frame */
        q_push(&st->pending, fr);
        if (st->detached && st->r->held > st->r->o.max_total)
            shed_sent(st->r);
        if (st->detached && st->pending.bytes > st->r->o.max_buffer) {
            char why[128];
            snprintf(why, sizeof why, "more than %zu bytes arrived for the absent client", st->r->o.max_buffer);
            start_detach(st, why);
        } else if (st->detached && st->r->held > st->r->o.max_total) {
            char why[160];
            snprintf(why, sizeof why, "the gateway holds more than %zu bytes for resumable sessions (resume-memory)",
                     st->r->o.max_total);
            start_detach(st, why);
        }
        return TG_GW_CONSUME;
    }
    if (st->has_token && tg_gw_session_down(s))
        retain(st, f->body, f->len, down_frames_out(st) + 1); /* the bridge queues it next */
    return TG_GW_FORWARD;
}

/* What f_up keeps a copy of: frames for an absent or replaying client (queued) and, for a client
 * that holds a token, every forwarded frame (retained for re-sending). f_down reads only the
 * scanned fields and names: the bridge may move those frames without copying them. */
static int f_needs_body(struct tg_gw_session *s, const struct tg_frame_info *fi, int up, void *ctx, void *state)
{
    const struct rs_state *st = state;
    (void)fi;
    (void)ctx;
    if (!up || st->detaching)
        return 0;
    return st->detached || st->replaying || (st->has_token && tg_gw_session_down(s));
}

static int f_down_close(struct tg_gw_session *s, const char *reason, void *ctx, void *state)
{
    struct rs_state *st = state;
    (void)ctx;
    if (st->takeover_of) { /* the new connection went away before its resume completed */
        st->takeover_of->takeover_by = NULL;
        st->takeover_of = NULL;
    }
    if (st->replaying) {
        st->replaying = 0;
        event_del(st->pump_ev);
        set_hold(st, 0);
    }
    int keep = st->has_token && !st->detaching &&
               (st->takeover_by || st->active || tg_gw_session_pending_calls(s) > 0);
    if (!keep)
        return 0;
    const char *principal = tg_gw_session_info(s)->principal;
    st->over_cap = !st->takeover_by && tg_gw_kept_sessions_of(st->r->gw, principal) >= st->r->o.max_kept_per_principal;
    set_detached(st, 1);
    st->detached_at_us = tg_gw_now_us();
    if (st->over_cap)
        tg_warn(LOG, "session %llu: client gone (%s); %s already has %u kept session(s): detaching it instead of "
                     "keeping it",
                sid_of(st), reason ? reason : "closed", principal, st->r->o.max_kept_per_principal);
    else
        tg_info(LOG, "session %llu: client gone (%s); keeping the session for %u ms for a resume", sid_of(st),
                reason ? reason : "closed", st->r->o.window_ms);
    if (st->takeover_by)
        event_active(st->pump_ev, EV_TIMEOUT, 0); /* complete once the bridge marked it detached */
    add_timer(st->window_ev, st->r->gw->draining || st->over_cap ? 0 : WINDOW_TICK_MS);
    return 1;
}

static void f_up_close(struct tg_gw_session *s, const char *reason, void *ctx, void *state)
{
    struct rs_state *st = state;
    (void)s;
    (void)ctx;
    if (st->detached && !st->detaching)
        tg_warn(LOG, "session %llu: the service closed the connection (%s) while the client was away; it cannot "
                     "be resumed",
                sid_of(st), reason ? reason : "closed");
    st->has_token = 0;
    set_detached(st, 0);
    event_del(st->window_ev);
    event_del(st->pump_ev);
    st->replaying = 0;
    q_clear(&st->sent);
    q_clear(&st->pending); /* the bridge closes the client after a flush: nothing more can be sent */
    if (st->takeover_by) {
        struct rs_state *from = st->takeover_by;
        st->takeover_by = NULL;
        from->takeover_of = NULL;
        if (tg_gw_session_down(from->s))
            reply_resume(from->s, from->takeover_rid, 0, 0, 0);
    }
}

static void f_detach(struct tg_gw_session *s, void *ctx, void *state)
{
    struct rs_state *st = state;
    struct tg_gw_resume *r = ctx;
    (void)s;
    if (st->takeover_of)
        st->takeover_of->takeover_by = NULL;
    if (st->takeover_by) { /* the session went away before its old client's close completed the resume */
        struct rs_state *from = st->takeover_by;
        from->takeover_of = NULL;
        if (tg_gw_session_down(from->s))
            reply_resume(from->s, from->takeover_rid, 0, 0, 0);
    }
    set_detached(st, 0);
    event_free(st->window_ev);
    event_free(st->pump_ev);
    q_clear(&st->pending);
    q_clear(&st->sent);
    if (st->prev)
        st->prev->next = st->next;
    else
        r->states = st->next;
    if (st->next)
        st->next->prev = st->prev;
    OPENSSL_cleanse(st->token, sizeof st->token);
    free(st);
}

static const struct tg_gw_filter k_filter = {"resume",     f_attach,   f_down,   f_up,
                                             f_down_close, f_up_close, f_detach, f_needs_body};

/* ------------------------------------------------------------ lifecycle */

struct tg_gw_resume *tg_gw_resume_new(struct tg_gw *gw, const struct tg_gw_resume_opts *opts, char *err,
                                      size_t errlen)
{
    if (!opts || opts->window_ms == 0) {
        snprintf(err, errlen, "resume window must be > 0");
        return NULL;
    }
    struct tg_gw_resume *r = calloc(1, sizeof *r);
    if (!r) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    r->gw = gw;
    r->o = *opts;
    if (!r->o.max_buffer)
        r->o.max_buffer = TG_GW_RESUME_MAX_BUFFER_DEFAULT;
    if (!r->o.inflight)
        r->o.inflight = TG_GW_RESUME_INFLIGHT_DEFAULT;
    if (!r->o.detach_timeout_ms)
        r->o.detach_timeout_ms = TG_GW_RESUME_DETACH_TIMEOUT_DEFAULT_MS;
    if (!r->o.max_total)
        r->o.max_total = TG_GW_RESUME_MAX_TOTAL_DEFAULT;
    if (!r->o.max_kept_per_principal)
        r->o.max_kept_per_principal = TG_GW_RESUME_MAX_KEPT_DEFAULT;
    r->svc.name = TG_GW_SVC_SESSION;
    r->svc.methods = k_methods;
    r->svc.n_methods = sizeof k_methods / sizeof k_methods[0];
    r->svc.ctx = r;
    /* check first, so that a failure leaves nothing registered that points at r */
    if (gw->n_local >= TG_GW_MAX_LOCAL_SERVICES || gw->n_filters >= TG_GW_MAX_FILTERS) {
        snprintf(err, errlen, "cannot register %s: too many gateway services or filters", TG_GW_SVC_SESSION);
        free(r);
        return NULL;
    }
    if (tg_gw_register_local_service(gw, &r->svc) != 0) {
        snprintf(err, errlen, "cannot register %s (already registered?)", TG_GW_SVC_SESSION);
        free(r);
        return NULL;
    }
    tg_gw_add_filter(gw, &k_filter, r); /* cannot fail: checked above */
    return r;
}

void tg_gw_resume_free(struct tg_gw_resume *r)
{
    if (!r)
        return;
    /* tg_gw_free destroyed every session (and so every state) already */
    free(r);
}

size_t tg_gw_resume_detached_count(const struct tg_gw_resume *r) { return r ? r->n_detached : 0; }
size_t tg_gw_resume_held_bytes(const struct tg_gw_resume *r) { return r ? r->held : 0; }
uint64_t tg_gw_resume_resumed_total(const struct tg_gw_resume *r) { return r ? r->resumed_total : 0; }
