/* fleet_fanout.c: the federated ConsumerPort (fleet_fanout.h). One `struct fed` per client: a
 * consumer connection to every target node, a queue of the client's calls until every node is
 * bound or has failed, then each call fanned out and its answers merged. A node that fails is
 * logged and reported in the trace (a TraceStats packet with its machine id); the others go on.
 * A linked node whose link stays down past the resume window keeps its session (the far node
 * Detaches it under a known key); when the link comes back while the client is still recording,
 * the node is re-attached here on a new channel and the gap is reported in the trace. */
#include "fleet_fanout.h"

#include <event2/buffer.h>
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fed_clocks.h"
#include "fed_packets.h"
#include "fed_split.h"
#include "fleet.h"
#include "gw_core.h"
#include "gw_identity.h"
#include "gw_upstream.h"
#include "link_int.h"
#include "tracegate/clock.h"
#include "tracegate/frame.h"
#include "tracegate/ipc_client.h"
#include "tracegate/ipc_host.h"
#include "tracegate/log.h"
#include "tracegate/pbwire.h"

#define LOG "fanout"
#define MAX_FED_NODES 64
_Static_assert(MAX_FED_NODES < TG_FED_MAX_RESERVED, "every node's machine id is reserved");
#define FED_OUT_HIGH (1u << 20) /* pause reading the nodes above this much queued to the client */
#define FED_OUT_LOW (256u << 10)
#define FED_CHUNK (96u << 10)   /* whole slices per ReadBuffers reply to the client */
#define FED_MAX_PACKET (64u << 20)
#define FED_READ_IDLE_MS 30000 /* a node silent this long in ReadBuffers is failed (tracectl waits 60 s) */
#define FED_MAX_MERGED (32u << 20) /* the nodes' answers to one GetTraceStats/QueryServiceState/QueryCapabilities */
/* one reply to the client: an IPC frame is at most 128 KiB with its header and envelope (request id,
 * success, has_more, lengths: under 40 bytes); traced keeps its replies 128 bytes under */
#define FED_REPLY_MAX (TG_FRAME_MAX_DEFAULT - 256u)
#define FED_ATTACH_TRIES 20     /* Attach retries while the far node's Detach may still be on its way */
#define FED_ATTACH_RETRY_MS 250

enum method {
    M_ENABLE, M_DISABLE, M_READ, M_FREE, M_FLUSH, M_START, M_CHANGE, M_DETACH, M_ATTACH, M_STATS, M_OBSERVE,
    M_QUERY, M_CAPS, M_BUGREPORT, M_CLONE, M_COUNT
};
static const char *const k_names[M_COUNT] = {
    "EnableTracing", "DisableTracing", "ReadBuffers", "FreeBuffers", "Flush", "StartTracing", "ChangeTraceConfig",
    "Detach", "Attach", "GetTraceStats", "ObserveEvents", "QueryServiceState", "QueryCapabilities",
    "SaveTraceForBugreport", "CloneSession"};

/* NODE_LOST: its link stayed down past the resume window; the far node keeps the session under
 * `key` and the node waits for the link to come back. NODE_REATTACH: a new channel is binding and
 * Attaching with that key (the client's new calls wait for it, as for NODE_BINDING). */
enum node_state { NODE_BINDING, NODE_READY, NODE_FAILED, NODE_LOST, NODE_REATTACH };

struct fed;
struct fed_op;

struct fed_node {
    struct fed *fed;
    size_t idx;
    char name[64];
    tg_ipc_client *cli;
    tg_ipc_service_proxy *proxy;
    enum node_state state;
    char error[200];
    int remote;
    struct tg_fed_stream st;
    int clock_sent, failure_sent;
    uint64_t cid;            /* the link channel it is read through (0: this node or a raw node) */
    char via[64];            /* the node at the other end of that channel's link */
    char key[128];           /* NODE_LOST, NODE_REATTACH: the far node's Detach key */
    int old_gone;            /* NODE_LOST: the old channel's connection has closed */
    unsigned attach_tries;
    struct event *reattach_ev;
    uint64_t down_since_us;  /* NODE_LOST, NODE_REATTACH: when the link went down */
    uint64_t gap_us;         /* link outages that ended in a re-attach, summed */
    unsigned gaps;
    int gap_sent;            /* the current gap totals are in the trace */
};

struct fed_leg {
    struct fed_op *op;
    size_t node;
    uint64_t rid;
    int done;
    uint64_t bytes; /* ReadBuffers: the node's answer so far */
};

struct fed_op {
    struct fed *fed;
    struct fed_op *next;
    tg_ipc_call *call;
    enum method m;
    uint8_t *args;
    size_t args_len;
    int started;
    struct fed_leg *legs;
    size_t waiting, ok, asked;
    struct evbuffer *merged; /* merged replies, or the rewritten slices of ReadBuffers */
    size_t cursor;           /* ReadBuffers: the node being read */
    struct event *read_idle; /* ReadBuffers: fails the node being read when it stays silent */
    size_t sent_parts;       /* QueryServiceState: parts sent to the client */
    int call_over;           /* QueryServiceState: its last part went (the call is freed) */
    int client_gone;         /* QueryServiceState: a part could not be sent */
};

struct fed {
    struct tg_fanout *fo;
    struct fed *next_fed;    /* the fan-out's federated sessions */
    tg_ipc_peer *peer;
    struct tg_gw_client_info who;
    struct fed_node *nodes;
    size_t n;
    size_t n_settled;
    struct fed_op *ops;
    struct tg_fed_seq_alloc alloc;
    struct event *resume_ev;
    int paused;
    int stopping; /* the client sent DisableTracing or FreeBuffers: lost nodes stay detached */
    uint64_t read_limit; /* one node's ReadBuffers answer: twice the session's buffers + 16 MiB (0: none) */
};

struct tg_fanout {
    struct tg_fleet *fleet;
    tg_ipc_host *host;
    struct fed *feds;
    int read_idle_ms;
};

static void start_op(struct fed_op *op);
static void read_next(struct fed_op *op);
static void read_idle_arm(struct fed_op *op);

/* ------------------------------------------------------------ ops */

static void op_free(struct fed_op *op)
{
    struct fed *fed = op->fed;
    for (struct fed_op **pp = &fed->ops; *pp; pp = &(*pp)->next)
        if (*pp == op) {
            *pp = op->next;
            break;
        }
    if (op->legs)
        for (size_t i = 0; i < fed->n; i++)
            if (!op->legs[i].done && op->legs[i].rid && fed->nodes[i].cli)
                tg_ipc_client_cancel(fed->nodes[i].cli, op->legs[i].rid);
    free(op->legs);
    free(op->args);
    if (op->merged)
        evbuffer_free(op->merged);
    if (op->read_idle)
        event_free(op->read_idle);
    free(op);
}

/* Sends the final reply (or a rejection) and forgets the op. */
static void op_finish(struct fed_op *op, int success, const uint8_t *reply, size_t len)
{
    if (success)
        tg_ipc_call_reply_bytes(op->call, reply, len, 0, -1);
    else
        tg_ipc_call_reject(op->call);
    op_free(op);
}

static void node_fail(struct fed_node *n, const char *why)
{
    if (n->state == NODE_FAILED)
        return;
    n->state = NODE_FAILED;
    snprintf(n->error, sizeof n->error, "%s", why);
    tg_warn(LOG, "federated session of %s: node %s failed: %s", n->fed->who.principal, n->name, why);
}

/* ------------------------------------------------------------ flow control toward the client */

static void resume_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct fed *fed = arg;
    if (tg_ipc_peer_output_len(fed->peer) > FED_OUT_LOW) {
        struct timeval tv = {0, 10000};
        evtimer_add(fed->resume_ev, &tv);
        return;
    }
    fed->paused = 0;
    for (size_t i = 0; i < fed->n; i++)
        if (fed->nodes[i].cli && tg_ipc_client_conn(fed->nodes[i].cli))
            tg_conn_resume_read(tg_ipc_client_conn(fed->nodes[i].cli));
}

static void maybe_pause(struct fed *fed)
{
    if (fed->paused || tg_ipc_peer_output_len(fed->peer) <= FED_OUT_HIGH)
        return;
    fed->paused = 1;
    for (size_t i = 0; i < fed->n; i++)
        if (fed->nodes[i].cli && tg_ipc_client_conn(fed->nodes[i].cli))
            tg_conn_pause_read(tg_ipc_client_conn(fed->nodes[i].cli));
    struct timeval tv = {0, 10000};
    evtimer_add(fed->resume_ev, &tv);
}

/* Sends whole slices from op->merged as ReadBuffers replies of at most FED_CHUNK (all of it when
 * `all`, the rest staying for the next call otherwise). */
static int send_slices(struct fed_op *op, int all)
{
    struct evbuffer *src = op->merged;
    while (evbuffer_get_length(src) >= FED_CHUNK || (all && evbuffer_get_length(src))) {
        size_t take = 0, avail = evbuffer_get_length(src);
        while (take < avail) {
            uint8_t hdr[11];
            struct evbuffer_ptr pos;
            evbuffer_ptr_set(src, &pos, take, EVBUFFER_PTR_SET);
            size_t hl = avail - take < sizeof hdr ? avail - take : sizeof hdr;
            if (evbuffer_copyout_from(src, &pos, hdr, hl) < 0)
                return -1;
            uint64_t body = 0;
            size_t vl = tg_pb_read_varint(hdr + 1, hdr + hl, &body);
            if (!vl)
                return -1;
            size_t sl = 1 + vl + (size_t)body;
            if (take && take + sl > FED_CHUNK)
                break;
            take += sl;
        }
        const uint8_t *p = evbuffer_pullup(src, (ev_ssize_t)take);
        if (!p || tg_ipc_call_reply_bytes(op->call, p, take, 1, -1) != 0)
            return -1;
        evbuffer_drain(src, take);
    }
    maybe_pause(op->fed);
    return 0;
}

/* ------------------------------------------------------------ fan-out of one call */

static int has_error_field(const uint8_t *reply, size_t len, char *out, size_t outlen)
{
    struct tg_pb_reader r;
    struct tg_pb_field f;
    tg_pb_reader_init(&r, reply, len);
    while (tg_pb_next(&r, &f) == 1)
        if (f.number == 3 && f.wire == TG_PB_LEN && f.len) { /* EnableTracingResponse.error */
            snprintf(out, outlen, "%.*s", (int)(f.len < 160 ? f.len : 160), (const char *)f.data);
            return 1;
        }
    return 0;
}

/* One part of a merged QueryServiceState to the client (has_more on all but the last). */
static int send_part(void *arg, const uint8_t *part, size_t len, int has_more)
{
    struct fed_op *op = arg;
    op->sent_parts++;
    op->call_over = !has_more;
    if (tg_ipc_call_reply_bytes(op->call, part, len, has_more, -1) != 0) {
        op->client_gone = 1;
        return -1;
    }
    return 0;
}

static void finish_all(struct fed_op *op)
{
    struct fed *fed = op->fed;
    size_t len = evbuffer_get_length(op->merged);
    const uint8_t *p = len ? evbuffer_pullup(op->merged, -1) : NULL;
    switch (op->m) {
    case M_ENABLE:
        if (op->ok) {
            static const uint8_t disabled[] = {0x08, 0x01}; /* EnableTracingResponse{disabled: true} */
            op_finish(op, 1, disabled, sizeof disabled);
        } else {
            char msg[512] = "no node could trace:";
            for (size_t i = 0; i < fed->n; i++) {
                size_t l = strlen(msg);
                snprintf(msg + l, sizeof msg - l, " %s: %s;", fed->nodes[i].name,
                         fed->nodes[i].error[0] ? fed->nodes[i].error : "failed");
            }
            uint8_t buf[600];
            size_t ml = strlen(msg), n = 0;
            buf[n++] = 0x08;
            buf[n++] = 0x01;
            n += tg_pb_put_tag(buf + n, 3, TG_PB_LEN);
            n += tg_pb_put_varint(buf + n, ml);
            memcpy(buf + n, msg, ml);
            op_finish(op, 1, buf, n + ml);
        }
        return;
    case M_QUERY: {
        /* protobuf merge: the concatenation of the nodes' replies lists every node's producers and
         * data sources; scalars are the last node's. More than one frame holds is streamed in
         * has_more parts, as traced does: the consumer concatenates them (fed_split.h) */
        if (!op->ok) {
            op_finish(op, 0, NULL, 0);
            return;
        }
        size_t skipped = 0;
        int rc = tg_fed_split_service_state(p, len, FED_REPLY_MAX, send_part, op, &skipped);
        if (skipped)
            tg_warn(LOG, "federated session of %s: QueryServiceState: %zu entr%s larger than a reply left out",
                    fed->who.principal, skipped, skipped == 1 ? "y" : "ies");
        if (rc != 0) {
            if (!op->client_gone)
                tg_warn(LOG, "federated session of %s: QueryServiceState: the nodes' merged answer is malformed",
                        fed->who.principal);
            if (op->call_over) { /* the client went away while its last part was sent */
                op_free(op);
            } else if (op->sent_parts) { /* end the stream the client is reading */
                tg_ipc_call_reply_bytes(op->call, NULL, 0, 0, -1);
                op_free(op);
            } else {
                op_finish(op, 0, NULL, 0);
            }
            return;
        }
        op_free(op); /* the last part ended the call */
        return;
    }
    case M_STATS:
    case M_CAPS:
        /* protobuf merge: the concatenation of the nodes' replies (every node's buffers); scalars
         * are the last node's. These calls answer once (no has_more for a consumer to merge):
         * leg_reply kept the nodes' answers to what one frame holds */
        op_finish(op, op->ok > 0, p, len);
        return;
    case M_FLUSH:
        if (op->ok < op->asked)
            tg_info(LOG, "federated session of %s: flush reached %zu of %zu nodes", fed->who.principal, op->ok,
                    op->asked);
        op_finish(op, op->ok == op->asked && op->ok > 0, NULL, 0);
        return;
    default:
        op_finish(op, op->ok > 0, NULL, 0);
        return;
    }
}

/* A node that answers ReadBuffers with nothing (or stops half-way) would hold every node after it
 * and the client's whole trace: past read_idle_ms of silence (not counting while the client is
 * too slow and the nodes are not read) it is failed and the next node read. */
static void read_idle_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct fed_op *op = arg;
    struct fed *fed = op->fed;
    if (fed->paused || op->cursor >= fed->n) {
        read_idle_arm(op);
        return;
    }
    struct fed_node *n = &fed->nodes[op->cursor];
    struct fed_leg *leg = &op->legs[op->cursor];
    char why[96];
    snprintf(why, sizeof why, "ReadBuffers: no data for %d s", fed->fo->read_idle_ms / 1000);
    node_fail(n, why);
    if (n->cli)
        tg_ipc_client_cancel(n->cli, leg->rid);
    leg->done = 1;
    if (!n->failure_sent) {
        n->failure_sent = 1;
        tg_fed_failure_packet(&n->st, op->merged);
    }
    op->cursor++;
    read_next(op);
}

static void read_idle_arm(struct fed_op *op)
{
    if (!op->read_idle && !(op->read_idle = evtimer_new(tg_fleet_base(op->fed->fo->fleet), read_idle_cb, op)))
        return;
    int ms = op->fed->fo->read_idle_ms;
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    evtimer_add(op->read_idle, &tv);
}

static void leg_reply(tg_ipc_client *cli, int success, int has_more, const uint8_t *reply, size_t len, void *arg)
{
    (void)cli;
    struct fed_leg *leg = arg;
    struct fed_op *op = leg->op;
    struct fed *fed = op->fed;
    struct fed_node *n = &fed->nodes[leg->node];
    if (op->m == M_READ) {
        read_idle_arm(op);
        if (success && len) {
            char err[160];
            leg->bytes += len;
            int over = fed->read_limit && leg->bytes > fed->read_limit;
            if (over)
                snprintf(err, sizeof err, "ReadBuffers: more than %llu MiB, twice the session's buffers and 16 MiB",
                         (unsigned long long)(fed->read_limit >> 20));
            if (over || tg_fed_rewrite_reply(&n->st, reply, len, op->merged, err, sizeof err) != 0) {
                node_fail(n, err);
                has_more = 0;
                success = 0;
                tg_ipc_client_cancel(n->cli, leg->rid);
            } else if (send_slices(op, 0) != 0) {
                /* the client is gone: forget this read (its later parts too) and the op */
                tg_ipc_client_cancel(n->cli, leg->rid);
                leg->done = 1;
                op_free(op);
                return;
            }
        }
        if (has_more)
            return;
        leg->done = 1;
        if (!success && n->state != NODE_FAILED)
            snprintf(n->error, sizeof n->error, "ReadBuffers failed");
        if (!success && !n->failure_sent) {
            n->failure_sent = 1;
            tg_fed_failure_packet(&n->st, op->merged);
        }
        op->cursor++;
        read_next(op);
        return;
    }
    if (op->m == M_OBSERVE && success && has_more) {
        tg_ipc_call_reply_bytes(op->call, reply, len, 1, -1); /* every node's events as they come */
        return;
    }
    if (success && len && (op->m == M_STATS || op->m == M_QUERY || op->m == M_CAPS)) {
        /* a node that streams has_more parts without end must not grow the merge without bound */
        if (evbuffer_get_length(op->merged) + len > FED_MAX_MERGED) {
            char why[96];
            snprintf(why, sizeof why, "%s: the answers passed %u MiB", k_names[op->m], FED_MAX_MERGED >> 20);
            node_fail(n, why);
            tg_ipc_client_cancel(n->cli, leg->rid);
            success = 0;
            has_more = 0;
        } else if (op->m != M_QUERY && evbuffer_get_length(op->merged) + len > FED_REPLY_MAX) {
            /* GetTraceStats and QueryCapabilities answer in one reply (Perfetto's client and
             * tracectl take each has_more part as a whole answer, not as a part to merge), which a
             * consumer refuses past 128 KiB: the answers that fit go, this node's is left out */
            tg_warn(LOG, "federated session of %s: %s: node %s's answer left out (the merged answer would pass "
                         "one %u KiB reply)",
                    fed->who.principal, k_names[op->m], n->name, TG_FRAME_MAX_DEFAULT >> 10);
        } else {
            evbuffer_add(op->merged, reply, len);
        }
    }
    if (has_more)
        return;
    leg->done = 1;
    char why[200];
    if (success && op->m == M_ENABLE && has_error_field(reply, len, why, sizeof why)) {
        snprintf(n->error, sizeof n->error, "%s", why);
        tg_warn(LOG, "federated session of %s: node %s: EnableTracing: %s", fed->who.principal, n->name, why);
        success = 0;
    } else if (!success && op->m == M_ENABLE) {
        snprintf(n->error, sizeof n->error, "EnableTracing failed%s", n->state == NODE_FAILED ? " (node lost)" : "");
    }
    if (success)
        op->ok++;
    if (--op->waiting == 0)
        finish_all(op);
}

static void read_next(struct fed_op *op)
{
    struct fed *fed = op->fed;
    for (; op->cursor < fed->n; op->cursor++) {
        struct fed_node *n = &fed->nodes[op->cursor];
        if (n->state != NODE_READY) {
            if (!n->failure_sent) {
                n->failure_sent = 1;
                if (n->state == NODE_LOST || n->state == NODE_REATTACH)
                    tg_fed_gap_packet(&n->st, n->gaps + 1, (n->gap_us + tg_mono_us() - n->down_since_us) * 1000u, 0,
                                      op->merged);
                tg_fed_failure_packet(&n->st, op->merged);
            }
            continue;
        }
        if (n->remote && !n->clock_sent) {
            uint64_t peer[8][4], mine[8][4];
            size_t k = tg_fleet_clock_rounds(fed->fo->fleet, n->name, peer, mine, 8);
            n->clock_sent = 1;
            /* the offset trace processor will derive from this packet: the node's RemoteClockSync
             * packets for machines behind it are moved by it onto our clocks */
            n->st.have_clock_off =
                tg_fed_clock_offsets((const uint64_t(*)[4])peer, (const uint64_t(*)[4])mine, k, n->st.clock_off);
            tg_fed_clock_sync_packet(n->st.machine_id, (const uint64_t(*)[4])peer, (const uint64_t(*)[4])mine, k,
                                     op->merged);
        }
        if (n->gaps && !n->gap_sent) {
            n->gap_sent = 1;
            tg_fed_gap_packet(&n->st, n->gaps, n->gap_us * 1000u, 1, op->merged);
        }
        struct fed_leg *leg = &op->legs[op->cursor];
        leg->op = op;
        leg->node = op->cursor;
        leg->done = 0;
        leg->rid = tg_ipc_client_invoke_bytes(n->cli, n->proxy, "ReadBuffers", NULL, 0, -1, leg_reply, leg);
        if (leg->rid) {
            read_idle_arm(op);
            return;
        }
        node_fail(n, "cannot send ReadBuffers");
        n->failure_sent = 1;
        tg_fed_failure_packet(&n->st, op->merged);
    }
    if (send_slices(op, 1) != 0) {
        op_free(op);
        return;
    }
    op_finish(op, 1, NULL, 0);
}

static void start_op(struct fed_op *op)
{
    struct fed *fed = op->fed;
    op->started = 1;
    switch (op->m) {
    case M_DETACH:
    case M_ATTACH:
    case M_BUGREPORT:
    case M_CLONE:
        tg_info(LOG, "federated session of %s: %s is not supported across nodes", fed->who.principal, k_names[op->m]);
        op_finish(op, 0, NULL, 0);
        return;
    case M_READ:
        op->cursor = 0;
        read_next(op);
        return;
    default:
        break;
    }
    op->waiting = 1; /* held while the legs are sent, so a synchronous failure cannot finish early */
    for (size_t i = 0; i < fed->n; i++) {
        struct fed_node *n = &fed->nodes[i];
        if (n->state != NODE_READY)
            continue;
        struct fed_leg *leg = &op->legs[i];
        leg->op = op;
        leg->node = i;
        op->waiting++;
        op->asked++;
        leg->rid = tg_ipc_client_invoke_bytes(n->cli, n->proxy, k_names[op->m], op->args, op->args_len, -1, leg_reply,
                                              leg);
        if (!leg->rid) {
            leg->done = 1;
            op->waiting--;
            node_fail(n, "cannot send the call");
        }
    }
    if (--op->waiting == 0)
        finish_all(op);
}

/* What a node may answer one ReadBuffers with, from the client's EnableTracingRequest
 * {trace_config(1){buffers(1){size_kb(1)}}}: as tracectl bounds a single node's (0: no buffers
 * named, no limit). A node that sends more is broken or hostile. */
static uint64_t enable_read_limit(const uint8_t *args, size_t len)
{
    struct tg_pb_reader r, cr, br;
    struct tg_pb_field f, cf, bf;
    uint64_t kb = 0;
    int buffers = 0;
    tg_pb_reader_init(&r, args, len);
    while (tg_pb_next(&r, &f) == 1) {
        if (f.number != 1 || f.wire != TG_PB_LEN)
            continue;
        tg_pb_reader_init(&cr, f.data, f.len);
        while (tg_pb_next(&cr, &cf) == 1) {
            if (cf.number != 1 || cf.wire != TG_PB_LEN)
                continue;
            uint64_t size_kb = 0;
            tg_pb_reader_init(&br, cf.data, cf.len);
            while (tg_pb_next(&br, &bf) == 1)
                if (bf.number == 1 && bf.wire != TG_PB_LEN)
                    size_kb = (uint32_t)bf.value;
            kb += size_kb;
            buffers = 1;
        }
    }
    return buffers ? 2 * kb * 1024 + (16u << 20) : 0;
}

static void run_queued(struct fed *fed)
{
    if (fed->n_settled < fed->n)
        return;
    for (struct fed_op *op = fed->ops, *next; op; op = next) {
        next = op->next;
        if (!op->started)
            start_op(op); /* may free op, never another op */
    }
}

/* ------------------------------------------------------------ the client's calls */

static void on_call(tg_ipc_call *call, enum method m, void *peer_state)
{
    struct fed *fed = peer_state;
    if (!fed) {
        tg_ipc_call_reject(call);
        return;
    }
    struct fed_op *op = calloc(1, sizeof *op);
    size_t alen = 0;
    const uint8_t *args = tg_ipc_call_args(call, &alen);
    if (op) {
        op->legs = calloc(fed->n ? fed->n : 1, sizeof *op->legs);
        op->merged = evbuffer_new();
        op->args = alen ? malloc(alen) : NULL;
    }
    if (!op || !op->legs || !op->merged || (alen && !op->args)) {
        if (op) {
            free(op->legs);
            free(op->args);
            if (op->merged)
                evbuffer_free(op->merged);
            free(op);
        }
        tg_ipc_call_reject(call);
        return;
    }
    if (alen)
        memcpy(op->args, args, alen);
    op->args_len = alen;
    op->fed = fed;
    op->call = call;
    op->m = m;
    if (m == M_DISABLE || m == M_FREE)
        fed->stopping = 1;
    if (m == M_ENABLE)
        fed->read_limit = enable_read_limit(op->args, alen);
    struct fed_op **tail = &fed->ops;
    while (*tail)
        tail = &(*tail)->next;
    *tail = op;
    if (fed->n_settled == fed->n)
        start_op(op);
}

#define HANDLER(NAME, M)                                                                                              \
    static void NAME(tg_ipc_call *call, const ProtobufCMessage *req, void *svc, void *ps)                            \
    {                                                                                                                  \
        (void)req;                                                                                                     \
        (void)svc;                                                                                                     \
        on_call(call, M, ps);                                                                                          \
    }
HANDLER(h_enable, M_ENABLE)
HANDLER(h_disable, M_DISABLE)
HANDLER(h_read, M_READ)
HANDLER(h_free, M_FREE)
HANDLER(h_flush, M_FLUSH)
HANDLER(h_start, M_START)
HANDLER(h_change, M_CHANGE)
HANDLER(h_detach, M_DETACH)
HANDLER(h_attach, M_ATTACH)
HANDLER(h_stats, M_STATS)
HANDLER(h_observe, M_OBSERVE)
HANDLER(h_query, M_QUERY)
HANDLER(h_caps, M_CAPS)
HANDLER(h_bugreport, M_BUGREPORT)
HANDLER(h_clone, M_CLONE)

static const struct tg_ipc_method k_methods[M_COUNT] = {
    {"EnableTracing", NULL, h_enable},   {"DisableTracing", NULL, h_disable},
    {"ReadBuffers", NULL, h_read},       {"FreeBuffers", NULL, h_free},
    {"Flush", NULL, h_flush},            {"StartTracing", NULL, h_start},
    {"ChangeTraceConfig", NULL, h_change}, {"Detach", NULL, h_detach},
    {"Attach", NULL, h_attach},          {"GetTraceStats", NULL, h_stats},
    {"ObserveEvents", NULL, h_observe},  {"QueryServiceState", NULL, h_query},
    {"QueryCapabilities", NULL, h_caps}, {"SaveTraceForBugreport", NULL, h_bugreport},
    {"CloneSession", NULL, h_clone},
};

static void *peer_open(tg_ipc_peer *peer, void *svc_ctx)
{
    (void)svc_ctx;
    return tg_ipc_peer_get_user(peer);
}

static const struct tg_ipc_service_def k_consumer_port = {
    .name = "ConsumerPort",
    .methods = k_methods,
    .n_methods = M_COUNT,
    .peer_open = peer_open,
};

/* ------------------------------------------------------------ nodes */

static void node_settled(struct fed_node *n)
{
    struct fed *fed = n->fed;
    fed->n_settled++;
    run_queued(fed);
}

static void send_attach(struct fed_node *n);
static void reattach_failed(struct fed_node *n, const char *why);
static void rearm_disabled_notification(struct fed_node *n);

static void node_bound(tg_ipc_client *cli, tg_ipc_service_proxy *proxy, void *arg)
{
    (void)cli;
    struct fed_node *n = arg;
    if (n->state == NODE_REATTACH) {
        if (!proxy) {
            reattach_failed(n, "its consumer port did not bind on the new channel");
            return;
        }
        n->proxy = proxy;
        send_attach(n);
        return;
    }
    if (n->state != NODE_BINDING)
        return;
    if (!proxy) {
        node_fail(n, "its consumer port did not bind");
    } else {
        n->proxy = proxy;
        n->state = NODE_READY;
    }
    node_settled(n);
}

static void node_disconnect(tg_ipc_client *cli, const char *reason, void *arg)
{
    (void)cli;
    struct fed_node *n = arg;
    if (n->state == NODE_LOST) {
        n->old_gone = 1; /* expected: its channel closed past the window; the session lives on there */
        return;
    }
    if (n->state == NODE_REATTACH) {
        reattach_failed(n, reason ? reason : "the new channel closed");
        return;
    }
    int was_binding = n->state == NODE_BINDING;
    node_fail(n, reason ? reason : "disconnected");
    if (was_binding)
        node_settled(n);
}

static int node_connect(struct fed *fed, struct fed_node *n, char *err, size_t errlen)
{
    struct tg_fleet *f = fed->fo->fleet;
    struct tg_gw *gw = tg_fleet_gw(f);
    int fd = -1;
    struct tg_gw_route r = {.fd = -1, .bev = NULL};
    uint8_t idf[64];
    size_t idl = 0;
    if (!n->remote) {
        struct tg_gw_upstream *u = tg_gw_upstream_for(gw, TG_GW_PORT_CONSUMER);
        if (!u) {
            snprintf(err, errlen, "this node serves no consumer port");
            return -1;
        }
        fd = tg_gw_upstream_connect(u, &fed->who, err, errlen);
        if (fd >= 0)
            idl = tg_gw_upstream_identity_frame(u, &fed->who, idf, sizeof idf);
    } else {
        /* across a link: the channel's bufferevent pair end, no socket hop */
        if (tg_fleet_connect_channel(f, n->name, 0, &fed->who, &r, &n->cid, n->via, sizeof n->via, err, errlen) != 0)
            return -1;
        fd = r.fd;
        if (r.first_len <= sizeof idf) { /* a raw node's TCP socket: the client's identity first */
            memcpy(idf, r.first, r.first_len);
            idl = r.first_len;
        }
    }
    if (fd < 0 && !r.bev)
        return -1;
    struct tg_conn_opts o;
    tg_conn_opts_default(&o);
    o.max_frame = TG_FRAME_MAX_DEFAULT;
    o.no_fd_passing = 1;
    tg_conn *c = r.bev ? tg_conn_new_bev(tg_fleet_base(f), r.bev, &o, NULL, NULL)
                       : tg_conn_new_fd(tg_fleet_base(f), fd, &o, NULL, NULL);
    if (!c) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    if (idl && tg_conn_send(c, idf + 4, idl - 4, -1) != 0) {
        tg_conn_close(c, "cannot queue the identity frame");
        snprintf(err, errlen, "cannot send the client's identity");
        return -1;
    }
    static const struct tg_ipc_client_cbs cbs = {.on_disconnect = node_disconnect};
    n->cli = tg_ipc_client_new(tg_fleet_base(f), c, &cbs, n);
    if (!n->cli || tg_ipc_client_bind(n->cli, "ConsumerPort", node_bound, n) != 0) {
        snprintf(err, errlen, "cannot bind its consumer port");
        return -1;
    }
    return 0;
}

/* ------------------------------------------------------------ re-attaching a node after a long cut */

static void reattach_failed(struct fed_node *n, const char *why)
{
    struct fed *fed = n->fed;
    char msg[200];
    snprintf(msg, sizeof msg, "could not re-attach after its link came back: %s", why);
    node_fail(n, msg);
    tg_warn(LOG, "federated session of %s: node %s keeps its session under key \"%s\": collect it with "
                 "`tracectl --node %s attach URL %s`",
            fed->who.principal, n->name, n->key, n->name, n->key);
    node_settled(n);
}

static void attach_reply(tg_ipc_client *cli, int success, int has_more, const uint8_t *reply, size_t len, void *arg)
{
    (void)cli;
    (void)reply;
    (void)len;
    struct fed_node *n = arg;
    if (has_more || n->state != NODE_REATTACH)
        return;
    struct fed *fed = n->fed;
    if (!success) {
        /* the far node may not have Detached it yet (its Detach and our Attach race) */
        if (++n->attach_tries < FED_ATTACH_TRIES && tg_ipc_client_connected(n->cli)) {
            struct timeval tv = {0, FED_ATTACH_RETRY_MS * 1000};
            evtimer_add(n->reattach_ev, &tv);
            return;
        }
        char why[260];
        snprintf(why, sizeof why, "%.63s has no session under key \"%.100s\" for us", n->name, n->key);
        reattach_failed(n, why);
        return;
    }
    uint64_t gap = tg_mono_us() - n->down_since_us;
    n->gaps++;
    n->gap_us += gap;
    n->gap_sent = 0;
    n->state = NODE_READY;
    n->error[0] = 0;
    rearm_disabled_notification(n);
    tg_info(LOG, "federated session of %s: node %s re-attached (key \"%s\", channel %llx) after a link gap of %llu ms",
            fed->who.principal, n->name, n->key, (unsigned long long)n->cid, (unsigned long long)(gap / 1000u));
    node_settled(n);
}

/* A re-attached node's end of trace: its leg of the client's EnableTracing (the call that answers
 * once tracing is disabled and every data source has stopped) ended with the old channel, so the
 * fan-out would tell the client "disabled" without waiting for this node, and a ReadBuffers that
 * follows could miss the last data its producers commit when they stop. As Perfetto's consumers
 * do after Attach, EnableTracing{attach_notification_only} re-arms that answer; it becomes the
 * node's leg of the pending EnableTracing again. */
static void rearm_disabled_notification(struct fed_node *n)
{
    struct fed *fed = n->fed;
    struct fed_op *op = fed->ops;
    while (op && !(op->m == M_ENABLE && op->started))
        op = op->next;
    if (!op || !op->waiting)
        return; /* tracing was already disabled everywhere else: the client has its answer */
    static const uint8_t notify_only[] = {0x10, 0x01}; /* EnableTracingRequest.attach_notification_only */
    struct fed_leg *leg = &op->legs[n->idx];
    leg->op = op;
    leg->node = n->idx;
    leg->done = 0;
    leg->rid = tg_ipc_client_invoke_bytes(n->cli, n->proxy, "EnableTracing", notify_only, sizeof notify_only, -1,
                                          leg_reply, leg);
    if (!leg->rid) {
        leg->done = 1;
        tg_warn(LOG, "federated session of %s: node %s: cannot ask for its end-of-trace notification",
                fed->who.principal, n->name);
        return;
    }
    op->waiting++;
    op->asked++;
}

static void send_attach(struct fed_node *n)
{
    uint8_t buf[160];
    size_t kl = strlen(n->key), o = 0;
    o += tg_pb_put_tag(buf + o, 1, TG_PB_LEN); /* AttachRequest.key */
    o += tg_pb_put_varint(buf + o, kl);
    memcpy(buf + o, n->key, kl);
    if (!tg_ipc_client_invoke_bytes(n->cli, n->proxy, "Attach", buf, o + kl, -1, attach_reply, n))
        reattach_failed(n, "cannot send Attach");
}

static void reattach_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct fed_node *n = arg;
    struct fed *fed = n->fed;
    if (n->state == NODE_REATTACH) { /* an Attach retry */
        send_attach(n);
        return;
    }
    if (n->state != NODE_LOST || fed->stopping)
        return;
    if (n->cli && !n->old_gone) { /* the old channel's close has not reached us yet */
        struct timeval tv = {0, 20000};
        evtimer_add(n->reattach_ev, &tv);
        return;
    }
    if (!tg_fleet_route_up(fed->fo->fleet, n->name))
        return; /* not reachable yet (a node behind another: that node's Nodes message will say) */
    if (n->cli)
        tg_ipc_client_free(n->cli);
    n->cli = NULL;
    n->proxy = NULL;
    n->state = NODE_REATTACH;
    n->attach_tries = 0;
    fed->n_settled--; /* the client's new calls wait until it is attached or has failed */
    char err[200] = "";
    if (node_connect(fed, n, err, sizeof err) != 0) {
        reattach_failed(n, err);
        return;
    }
    tg_info(LOG, "federated session of %s: node %s is back; re-attaching its session on channel %llx",
            fed->who.principal, n->name, (unsigned long long)n->cid);
}

int tg_fanout_channel_lost(struct tg_fanout *fo, const char *peer, uint64_t channel_id, const char *key,
                           uint64_t down_since_us)
{
    int found = 0;
    for (struct fed *fed = fo->feds; fed; fed = fed->next_fed)
        for (size_t i = 0; i < fed->n; i++) {
            struct fed_node *n = &fed->nodes[i];
            if (!n->remote || n->cid != channel_id || strcmp(n->via, peer) != 0 || n->state != NODE_READY)
                continue;
            found++;
            if (fed->stopping) {
                node_fail(n, "its link stayed down past the resume window");
                continue;
            }
            if (!n->reattach_ev && !(n->reattach_ev = evtimer_new(tg_fleet_base(fo->fleet), reattach_cb, n))) {
                node_fail(n, "its link stayed down past the resume window (out of memory)");
                continue;
            }
            snprintf(n->key, sizeof n->key, "%s", key);
            n->state = NODE_LOST;
            n->old_gone = 0;
            n->down_since_us = down_since_us;
            snprintf(n->error, sizeof n->error, "its link is down");
            tg_warn(LOG, "federated session of %s: node %s: %s%s stayed down past the resume window; it keeps "
                         "the session under key \"%s\", re-attached when the link is back",
                    fed->who.principal, n->name, strcmp(n->via, n->name) ? "a link on its way through " : "its link",
                    strcmp(n->via, n->name) ? n->via : "", n->key);
        }
    return found;
}

void tg_fanout_routes_changed(struct tg_fanout *fo)
{
    for (struct fed *fed = fo->feds; fed; fed = fed->next_fed)
        for (size_t i = 0; i < fed->n; i++) {
            struct fed_node *n = &fed->nodes[i];
            if (n->state == NODE_LOST) {
                struct timeval now = {0, 0}; /* not from inside the link's own state change */
                evtimer_add(n->reattach_ev, &now);
            }
        }
}

static void fed_free(struct fed *fed)
{
    for (struct fed **pp = &fed->fo->feds; *pp; pp = &(*pp)->next_fed)
        if (*pp == fed) {
            *pp = fed->next_fed;
            break;
        }
    while (fed->ops)
        op_free(fed->ops);
    for (size_t i = 0; i < fed->n; i++) {
        if (fed->nodes[i].cli)
            tg_ipc_client_free(fed->nodes[i].cli);
        if (fed->nodes[i].reattach_ev)
            event_free(fed->nodes[i].reattach_ev);
        tg_fed_stream_clear(&fed->nodes[i].st);
    }
    if (fed->resume_ev)
        event_free(fed->resume_ev);
    free(fed->nodes);
    free(fed);
}

static void peer_gone(tg_ipc_peer *peer, void *arg)
{
    (void)arg;
    struct fed *fed = tg_ipc_peer_get_user(peer);
    if (!fed)
        return;
    tg_ipc_peer_set_user(peer, NULL);
    size_t packets = 0;
    for (size_t i = 0; i < fed->n; i++)
        packets += fed->nodes[i].st.packets;
    tg_info(LOG, "federated session of %s over %zu node(s) closed (%zu packets read)", fed->who.principal, fed->n,
            packets);
    for (size_t i = 0; i < fed->n; i++)
        if (fed->nodes[i].st.clock_syncs_dropped)
            tg_warn(LOG, "federated session of %s: node %s: %llu RemoteClockSync packet(s) dropped (not its service's "
                         "for a machine behind it)",
                    fed->who.principal, fed->nodes[i].name, (unsigned long long)fed->nodes[i].st.clock_syncs_dropped);
    for (size_t i = 0; i < fed->n; i++)
        if (fed->nodes[i].state == NODE_LOST || fed->nodes[i].state == NODE_REATTACH)
            tg_warn(LOG, "federated session of %s: node %s was not back before the client finished; it keeps the "
                         "session under key \"%s\": collect it with `tracectl --node %s attach URL %s`",
                    fed->who.principal, fed->nodes[i].name, fed->nodes[i].key, fed->nodes[i].name, fed->nodes[i].key);
    fed_free(fed);
}

size_t tg_fanout_resolve(struct tg_fleet *f, const char *spec, char (*names)[64], size_t max, char *err,
                         size_t errlen)
{
    struct tg_fleet_node *all = calloc(MAX_FED_NODES, sizeof *all);
    if (!all) {
        snprintf(err, errlen, "out of memory");
        return 0;
    }
    size_t n_all = tg_fleet_nodes(f, all, MAX_FED_NODES), n = 0;
    if (n_all > MAX_FED_NODES)
        n_all = MAX_FED_NODES;
    if (!strcmp(spec, "all")) {
        for (size_t i = 0; i < n_all && n < max; i++)
            if (!strcmp(all[i].state, "self") || !strcmp(all[i].state, "up") || !strcmp(all[i].state, "raw"))
                snprintf(names[n++], 64, "%s", all[i].name);
        free(all);
        return n;
    }
    const char *p = spec;
    while (*p) {
        size_t l = strcspn(p, ",");
        int found = 0;
        for (size_t i = 0; i < n_all; i++)
            if (strlen(all[i].name) == l && !memcmp(all[i].name, p, l))
                found = 1;
        int dup = 0;
        for (size_t i = 0; i < n; i++)
            if (strlen(names[i]) == l && !memcmp(names[i], p, l))
                dup = 1;
        if (!found || l == 0 || l >= 64) {
            snprintf(err, errlen, "no node \"%.*s\" in the fleet (see `tracectl nodes`)", (int)(l < 64 ? l : 64), p);
            free(all);
            return 0;
        }
        if (!dup && n < max)
            snprintf(names[n++], 64, "%.*s", (int)l, p);
        p += l;
        if (*p == ',')
            p++;
    }
    free(all);
    return n;
}

int tg_fanout_connect(struct tg_fanout *fo, const char *spec, int producer, const struct tg_gw_client_info *who,
                      char *err, size_t errlen)
{
    if (producer) {
        snprintf(err, errlen, "a federated session (@%s) is a consumer: there is no federated producer port", spec);
        return -1;
    }
    char names[MAX_FED_NODES][64];
    size_t n = tg_fanout_resolve(fo->fleet, spec, names, MAX_FED_NODES, err, errlen);
    if (!n) {
        if (!err[0])
            snprintf(err, errlen, "no node to record");
        return -1;
    }
    struct fed *fed = calloc(1, sizeof *fed);
    if (!fed || !(fed->nodes = calloc(n, sizeof *fed->nodes)) ||
        !(fed->resume_ev = evtimer_new(tg_fleet_base(fo->fleet), resume_cb, fed))) {
        if (fed) {
            free(fed->nodes);
            free(fed);
        }
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    fed->fo = fo;
    fed->who = *who;
    fed->n = n;
    fed->alloc.next = 1;
    const char *self = tg_fleet_node_name(fo->fleet);
    /* machine ids no node may claim for its packets: the hub's and every node's of the session */
    fed->alloc.reserved[fed->alloc.n_reserved++] = tg_gw_node_machine_id(self);
    for (size_t i = 0; i < n && fed->alloc.n_reserved < TG_FED_MAX_RESERVED; i++)
        if (tg_fleet_machine_id(fo->fleet, names[i]))
            fed->alloc.reserved[fed->alloc.n_reserved++] = tg_fleet_machine_id(fo->fleet, names[i]);
    for (size_t i = 0; i < n; i++) {
        struct fed_node *nd = &fed->nodes[i];
        nd->fed = fed;
        nd->idx = i;
        snprintf(nd->name, sizeof nd->name, "%s", names[i]);
        nd->remote = strcmp(names[i], self) != 0;
        if (tg_fed_stream_init(&nd->st, tg_fleet_machine_id(fo->fleet, names[i]), &fed->alloc, FED_MAX_PACKET) != 0) {
            for (size_t k = 0; k <= i; k++)
                tg_fed_stream_clear(&fed->nodes[k].st);
            event_free(fed->resume_ev);
            free(fed->nodes);
            free(fed);
            snprintf(err, errlen, "out of memory");
            return -1;
        }
    }
    fed->next_fed = fo->feds; /* from here on fed_free unlinks it */
    fo->feds = fed;
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, sv) != 0) {
        snprintf(err, errlen, "socketpair: %s", strerror(errno));
        fed_free(fed);
        return -1;
    }
    fed->peer = tg_ipc_host_adopt_fd(fo->host, sv[0]);
    if (!fed->peer) {
        close(sv[1]);
        fed_free(fed);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    tg_ipc_peer_set_user(fed->peer, fed);
    tg_info(LOG, "federated session for %s over %zu node(s): %s", who->principal, n, spec);
    for (size_t i = 0; i < n; i++) {
        char why[200] = "";
        if (node_connect(fed, &fed->nodes[i], why, sizeof why) != 0) {
            node_fail(&fed->nodes[i], why);
            fed->n_settled++;
        }
    }
    return sv[1];
}

struct tg_fanout *tg_fanout_new(struct tg_fleet *f)
{
    struct tg_fanout *fo = calloc(1, sizeof *fo);
    if (!fo)
        return NULL;
    fo->fleet = f;
    fo->read_idle_ms = FED_READ_IDLE_MS;
    struct tg_ipc_host_opts o;
    memset(&o, 0, sizeof o);
    tg_conn_opts_default(&o.conn);
    o.conn.max_frame = TG_FRAME_MAX_DEFAULT;
    o.conn.no_fd_passing = 1;
    o.peer_gone = peer_gone;
    o.peer_gone_arg = fo;
    fo->host = tg_ipc_host_new(tg_fleet_base(f), &o);
    if (!fo->host || !tg_ipc_host_add_service(fo->host, &k_consumer_port, fo)) {
        tg_fanout_free(fo);
        return NULL;
    }
    return fo;
}

void tg_fanout_free(struct tg_fanout *fo)
{
    if (!fo)
        return;
    if (fo->host)
        tg_ipc_host_free(fo->host);
    free(fo);
}

void tg_fanout_set_read_idle_ms(struct tg_fanout *fo, int ms) { fo->read_idle_ms = ms; }
