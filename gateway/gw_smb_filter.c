/* gw_smb_filter.c: the "smb-bridge" filter: runs gw_smb_bridge on producer sessions of clients
 * that cannot receive fds, with hold-and-retry when the service's SMB is full (see gw_smb_filter.h). */
#include "gw_smb_filter.h"

#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "commit_data_request.pb-c.h"
#include "gw_core.h"
#include "gw_limits.h"
#include "gw_metrics.h"
#include "gw_smb_bridge.h"
#include "tracegate/conn.h"
#include "tracegate/frame.h"
#include "tracegate/ipc_wire.h"
#include "tracegate/log.h"

#define LOG "gw-smb"
#define PRODUCER_PORT "ProducerPort"
#define METHOD_LEN 64
#define RETRY_FIRST_MS 1u
#define RETRY_MAX_MS 20u

/* A client frame waiting for its turn (the first one is being retried). */
struct waiting {
    struct waiting *next;
    char method[METHOD_LEN]; /* "" = not a ProducerPort call */
    size_t len;
    uint8_t body[]; /* the IPCFrame, without the header */
};

struct smbf {
    struct tg_gw_session *s;
    struct tg_smb_bridge *b;
    struct tg_smb_bridge_stats reported; /* what the metrics already have */
    int passive;                         /* the upstream is not UNIX: the service emulates itself */
    int announced;                       /* logged that the SMB is in use */
    struct event *retry_ev;
    struct waiting *head, *tail;
    uint64_t wait_since_us;
    unsigned delay_ms;
    int client_gone; /* the client left while frames waited: close once they are delivered */
    char err[256];   /* close reason (must outlive the filter callback) */
};

int tg_gw_smb_filter_wants(const struct tg_gw_client_info *info)
{
    return info->port == TG_GW_PORT_PRODUCER && info->transport != TG_GW_T_UNIX;
}

static const char *producer_method(const struct tg_gw_frame *f)
{
    return f->service && strcmp(f->service, PRODUCER_PORT) == 0 ? f->method : NULL;
}

/* Adds what the bridge did since the last report to the gateway's counters. */
static void report(struct smbf *st)
{
    struct tg_smb_bridge_stats now;
    tg_smb_bridge_get_stats(st->b, &now);
    struct tg_gw *gw = tg_gw_session_gw(st->s);
    if (gw && gw->metrics)
        tg_gw_metrics_smb_bridge(gw->metrics, now.chunks_copied - st->reported.chunks_copied,
                                 now.bytes_copied - st->reported.bytes_copied,
                                 now.commits_rewritten - st->reported.commits_rewritten,
                                 now.retries - st->reported.retries);
    st->reported = now;
}

static void free_waiting(struct smbf *st)
{
    while (st->head) {
        struct waiting *w = st->head;
        st->head = w->next;
        free(w);
    }
    st->tail = NULL;
}

static struct waiting *waiting_new(size_t len, const char *method)
{
    struct waiting *w = malloc(sizeof *w + len);
    if (!w)
        return NULL;
    w->next = NULL;
    snprintf(w->method, sizeof w->method, "%s", method ? method : "");
    w->len = len;
    return w;
}

static int enqueue(struct smbf *st, const uint8_t *body, size_t len, const char *method)
{
    struct waiting *w = waiting_new(len, method);
    if (!w)
        return -1;
    memcpy(w->body, body, len);
    if (st->tail)
        st->tail->next = w;
    else
        st->head = w;
    st->tail = w;
    return 0;
}

/* One CommitData part as a waiting InvokeMethod frame. */
static struct waiting *encode_part(const struct tg_frame_info *fi, const Perfetto__Protos__CommitDataRequest *part,
                                   int drop_reply)
{
    size_t args_len = perfetto__protos__commit_data_request__get_packed_size(part);
    uint8_t *args = malloc(args_len ? args_len : 1);
    if (!args)
        return NULL;
    perfetto__protos__commit_data_request__pack(part, args);
    size_t need = tg_ipc_encode_invoke(NULL, 0, fi->request_id, fi->service_id, fi->method_id, args, args_len,
                                       drop_reply);
    struct waiting *w = need ? waiting_new(need, "CommitData") : NULL;
    if (w && tg_ipc_encode_invoke(w->body, need, fi->request_id, fi->service_id, fi->method_id, args, args_len,
                                  drop_reply) != need) {
        free(w);
        w = NULL;
    }
    free(args);
    return w;
}

/* The waiting head is a CommitData whose inline chunks found no room all at
 * once (the bridge copies a request all or nothing). A request may carry more
 * chunks than the service's SMB holds at all (the producer's emulated buffer
 * is 1 MiB whatever the SMB size), so waiting alone may never help: the head
 * is replaced by one request per inline chunk, in order, each needing one
 * free chunk. The earlier parts are sent with drop_reply; the last one keeps
 * the remaining entries, the patches, the flush ack, and the original
 * drop_reply (its reply answers the producer's request id). Returns 1 if
 * split, 0 if there was nothing to split, -1 when out of memory. */
static int split_head(struct smbf *st)
{
    struct waiting *w = st->head;
    struct tg_frame_info fi;
    if (strcmp(w->method, "CommitData") != 0 || tg_frame_scan(w->body, w->len, &fi) != 0 ||
        fi.msg != TG_MSG_INVOKE_METHOD)
        return 0;
    Perfetto__Protos__CommitDataRequest *req =
        perfetto__protos__commit_data_request__unpack(NULL, fi.payload_len, fi.payload);
    if (!req)
        return 0; /* the bridge reports it */
    size_t n_inline = 0, last_inline = 0;
    for (size_t i = 0; i < req->n_chunks_to_move; i++)
        if (req->chunks_to_move[i]->has_data) {
            n_inline++;
            last_inline = i;
        }
    if (n_inline < 2) {
        perfetto__protos__commit_data_request__free_unpacked(req, NULL);
        return 0;
    }
    struct waiting *first = NULL, *last = NULL;
    int rc = 1;
    Perfetto__Protos__CommitDataRequest__ChunksToMove **rest = calloc(req->n_chunks_to_move, sizeof *rest);
    size_t n_rest = 0;
    if (!rest)
        rc = -1;
    for (size_t i = 0; rc == 1 && i < req->n_chunks_to_move; i++) {
        Perfetto__Protos__CommitDataRequest__ChunksToMove *m = req->chunks_to_move[i];
        if (!m->has_data || i == last_inline) {
            rest[n_rest++] = m;
            continue;
        }
        Perfetto__Protos__CommitDataRequest part = PERFETTO__PROTOS__COMMIT_DATA_REQUEST__INIT;
        part.n_chunks_to_move = 1;
        part.chunks_to_move = &req->chunks_to_move[i];
        struct waiting *pw = encode_part(&fi, &part, 1);
        if (!pw) {
            rc = -1;
            break;
        }
        if (last)
            last->next = pw;
        else
            first = pw;
        last = pw;
    }
    if (rc == 1) {
        Perfetto__Protos__CommitDataRequest part = *req; /* patches and flush ack stay */
        part.n_chunks_to_move = n_rest;
        part.chunks_to_move = rest;
        struct waiting *pw = encode_part(&fi, &part, fi.drop_reply);
        if (pw) {
            last->next = pw;
            last = pw;
        } else {
            rc = -1;
        }
    }
    free(rest);
    perfetto__protos__commit_data_request__free_unpacked(req, NULL);
    if (rc != 1) {
        while (first) {
            struct waiting *n = first->next;
            free(first);
            first = n;
        }
        return rc;
    }
    last->next = w->next;
    if (st->tail == w)
        st->tail = last;
    st->head = first;
    free(w);
    tg_debug(LOG, "session %llu: split a CommitData of %zu chunks that found no room at once",
             (unsigned long long)tg_gw_session_id(st->s), n_inline);
    return 1;
}

static void arm_retry(struct smbf *st)
{
    struct timeval tv = {0, (suseconds_t)st->delay_ms * 1000};
    event_add(st->retry_ev, &tv);
    st->delay_ms = st->delay_ms * 2 > RETRY_MAX_MS ? RETRY_MAX_MS : st->delay_ms * 2;
}

/* Offers one client frame to the bridge and sends the result upstream.
 * Returns TG_SMBB_RETRY (nothing sent), TG_SMBB_ERROR (st->err set) or
 * TG_SMBB_FORWARD/REPLACED (sent, or the session is closing). forward_self:
 * on FORWARD, send `body` ourselves (a waiting frame) or leave it to the
 * bridge core (a frame in hand). */
static enum tg_smbb_verdict offer(struct smbf *st, const uint8_t *body, size_t len, const struct tg_frame_info *fi,
                                  const char *method, int forward_self)
{
    uint8_t *out = NULL;
    size_t out_len = 0;
    enum tg_smbb_verdict v = tg_smb_bridge_from_producer(st->b, method, fi, &out, &out_len, st->err, sizeof st->err);
    if (v == TG_SMBB_REPLACED) {
        tg_gw_session_send_up(st->s, out, out_len, -1);
        free(out);
    } else if (v == TG_SMBB_FORWARD && forward_self) {
        tg_gw_session_send_up(st->s, body, len, -1);
    }
    report(st);
    return v;
}

static void fail_session(struct smbf *st, const char *why)
{
    struct tg_gw *gw = tg_gw_session_gw(st->s);
    if (gw && gw->metrics)
        tg_gw_metrics_frame_rejected(gw->metrics, "smb_bridge");
    tg_warn(LOG, "session %llu: closing producer %s: %s", (unsigned long long)tg_gw_session_id(st->s),
            tg_gw_session_info(st->s)->peer, why);
    free_waiting(st);
    tg_gw_session_close(st->s, why, 0);
}

/* All waiting frames went through: let the client go on (or finish). */
static void queue_drained(struct smbf *st)
{
    st->delay_ms = RETRY_FIRST_MS;
    if (st->client_gone) {
        tg_debug(LOG, "session %llu: delivered the frames of a departed producer; closing",
                 (unsigned long long)tg_gw_session_id(st->s));
        tg_gw_session_close(st->s, "client disconnected", 1);
        return;
    }
    tg_gw_session_hold_down(st->s, 0);
}

static void retry_cb(evutil_socket_t fd, short what, void *arg)
{
    struct smbf *st = arg;
    (void)fd;
    (void)what;
    while (st->head) {
        /* parts of a split request go out as the service takes them, not all at once */
        tg_conn *up = tg_gw_session_up(st->s);
        if (up && tg_conn_is_congested(up)) {
            st->wait_since_us = tg_gw_now_us(); /* waiting for the service to read, not for SMB room */
            arm_retry(st);
            return;
        }
        struct waiting *w = st->head;
        struct tg_frame_info fi;
        if (tg_frame_scan(w->body, w->len, &fi) != 0) { /* scanned once already: cannot happen */
            fail_session(st, "internal error: a held frame no longer scans");
            return;
        }
        enum tg_smbb_verdict v = offer(st, w->body, w->len, &fi, w->method[0] ? w->method : NULL, 1);
        if (v == TG_SMBB_RETRY) {
            int split = split_head(st);
            if (split < 0) {
                fail_session(st, "out of memory");
                return;
            }
            if (split)
                continue; /* its first part may fit now */
            if (tg_gw_now_us() - st->wait_since_us > (uint64_t)TG_GW_SMBF_MAX_WAIT_MS * 1000u) {
                snprintf(st->err, sizeof st->err, "the service's shared memory buffer had no room for %u ms",
                         TG_GW_SMBF_MAX_WAIT_MS);
                fail_session(st, st->err);
                return;
            }
            arm_retry(st);
            return;
        }
        if (v == TG_SMBB_ERROR) {
            fail_session(st, st->err);
            return;
        }
        st->head = w->next;
        if (!st->head)
            st->tail = NULL;
        free(w);
        st->wait_since_us = tg_gw_now_us(); /* the next frame's wait starts now */
    }
    queue_drained(st);
}

/* ------------------------------------------------------------ filter callbacks */

static int smbf_attach(struct tg_gw_session *s, void *ctx, void **state)
{
    (void)ctx;
    if (!tg_gw_smb_filter_wants(tg_gw_session_info(s)))
        return 0;
    struct smbf *st = calloc(1, sizeof *st);
    if (!st)
        return 0; /* without the bridge the producer's inline commits are refused by a UNIX service */
    st->s = s;
    st->b = tg_smb_bridge_new();
    st->retry_ev = evtimer_new(tg_gw_session_gw(s)->base, retry_cb, st);
    if (!st->b || !st->retry_ev) {
        tg_smb_bridge_free(st->b);
        if (st->retry_ev)
            event_free(st->retry_ev);
        free(st);
        tg_warn(LOG, "session %llu: out of memory: no SMB bridge for this producer",
                (unsigned long long)tg_gw_session_id(s));
        return 0;
    }
    st->delay_ms = RETRY_FIRST_MS;
    *state = st;
    return 1;
}

static enum tg_gw_verdict smbf_down(struct tg_gw_session *s, struct tg_gw_frame *f, void *ctx, void *state)
{
    struct smbf *st = state;
    (void)s;
    (void)ctx;
    if (st->passive)
        return TG_GW_FORWARD;
    const char *method = producer_method(f);
    if (st->head) {
        /* A frame is waiting for room (reads are held, so this is rare):
         * queue behind it to keep the order the service sees. */
        if (enqueue(st, f->body, f->len, method) != 0) {
            f->close_reason = "out of memory";
            return TG_GW_CLOSE;
        }
        return TG_GW_CONSUME;
    }
    enum tg_smbb_verdict v = offer(st, f->body, f->len, f->info, method, 0);
    switch (v) {
    case TG_SMBB_FORWARD:
        return TG_GW_FORWARD;
    case TG_SMBB_REPLACED:
        return TG_GW_CONSUME;
    case TG_SMBB_RETRY:
        if (enqueue(st, f->body, f->len, method) != 0) {
            f->close_reason = "out of memory";
            return TG_GW_CLOSE;
        }
        st->wait_since_us = tg_gw_now_us();
        tg_gw_session_hold_down(st->s, 1);
        switch (split_head(st)) {
        case 1:
            retry_cb(-1, 0, st); /* its first part may fit now */
            break;
        case 0:
            arm_retry(st);
            break;
        default:
            f->close_reason = "out of memory";
            return TG_GW_CLOSE;
        }
        return TG_GW_CONSUME;
    case TG_SMBB_ERROR:
    default:
        f->close_reason = st->err;
        return TG_GW_CLOSE;
    }
}

static enum tg_gw_verdict smbf_up(struct tg_gw_session *s, struct tg_gw_frame *f, void *ctx, void *state)
{
    struct smbf *st = state;
    (void)ctx;
    if (st->client_gone)
        return TG_GW_CONSUME; /* for a producer that left */
    const char *method = producer_method(f);
    if (!st->passive && method && f->info->msg == TG_MSG_INVOKE_METHOD_REPLY &&
        strcmp(method, "InitializeConnection") == 0) {
        tg_conn *up = tg_gw_session_up(s);
        if (!up || !tg_conn_is_unix(up)) {
            st->passive = 1; /* a remote peer to the service too: it offers emulation itself */
            tg_info(LOG, "session %llu: the upstream is not a UNIX socket; the service emulates shared memory "
                         "for this producer itself",
                    (unsigned long long)tg_gw_session_id(s));
        }
    }
    if (st->passive)
        return TG_GW_FORWARD;
    int fd = f->fd;
    f->fd = -1; /* the bridge owns it now */
    uint8_t *out = NULL;
    size_t out_len = 0;
    enum tg_smbb_verdict v = tg_smb_bridge_from_service(st->b, method, f->info, fd, &out, &out_len, st->err,
                                                        sizeof st->err);
    if (!st->announced && tg_smb_bridge_has_smb(st->b)) {
        st->announced = 1;
        tg_info(LOG, "session %llu: SMB bridge active for %s %s: the gateway copies its chunks into the "
                     "service's shared memory",
                (unsigned long long)tg_gw_session_id(s), tg_gw_transport_name(tg_gw_session_info(s)->transport),
                tg_gw_session_info(s)->peer);
    }
    switch (v) {
    case TG_SMBB_REPLACED:
        tg_gw_session_send_down(s, out, out_len, -1);
        free(out);
        return TG_GW_CONSUME;
    case TG_SMBB_ERROR:
        f->close_reason = st->err;
        return TG_GW_CLOSE;
    case TG_SMBB_FORWARD:
    case TG_SMBB_RETRY:
    default:
        return TG_GW_FORWARD;
    }
}

static int smbf_down_close(struct tg_gw_session *s, const char *reason, void *ctx, void *state)
{
    struct smbf *st = state;
    (void)reason;
    (void)ctx;
    if (!st->head || !tg_gw_session_up(s))
        return 0;
    /* Its last commits are still waiting for room: deliver them first. */
    st->client_gone = 1;
    tg_debug(LOG, "session %llu: producer left with frames waiting for SMB room; delivering them",
             (unsigned long long)tg_gw_session_id(s));
    return 1;
}

static void smbf_up_close(struct tg_gw_session *s, const char *reason, void *ctx, void *state)
{
    struct smbf *st = state;
    (void)s;
    (void)reason;
    (void)ctx;
    event_del(st->retry_ev);
    free_waiting(st);
}

static void smbf_detach(struct tg_gw_session *s, void *ctx, void *state)
{
    struct smbf *st = state;
    (void)ctx;
    report(st);
    struct tg_smb_bridge_stats t;
    tg_smb_bridge_get_stats(st->b, &t);
    if (t.commits_rewritten || t.retries)
        tg_info(LOG, "session %llu: SMB bridge copied %llu chunks (%llu bytes) in %llu commits, %llu retries",
                (unsigned long long)tg_gw_session_id(s), (unsigned long long)t.chunks_copied,
                (unsigned long long)t.bytes_copied, (unsigned long long)t.commits_rewritten,
                (unsigned long long)t.retries);
    event_free(st->retry_ev);
    free_waiting(st);
    tg_smb_bridge_free(st->b);
    free(st);
}

static const struct tg_gw_filter k_smb_filter = {
    .name = TG_GW_SMBF_NAME,
    .attach = smbf_attach,
    .on_down_frame = smbf_down,
    .on_up_frame = smbf_up,
    .on_down_close = smbf_down_close,
    .on_up_close = smbf_up_close,
    .detach = smbf_detach,
};

int tg_gw_smb_filter_register(struct tg_gw *gw) { return tg_gw_add_filter(gw, &k_smb_filter, NULL); }
