/* read_buffers.c: reading a session out. A tg_svc_reader yields packets in
 * traced's order (clock snapshots, sync marker, trace config, trace_uuid,
 * system info, remote machines' system info, lifecycle events, remote clock
 * sync, triggers, then every buffer's producer packets with the trusted slice
 * appended, then read_tracing_buffers_completed and trace_stats). The
 * ReadBuffers stream sends it in batches of ~32 KiB of packet data, each cut
 * into replies under 128 KiB, has_more on all but the last (§3.3).
 *
 * One copy per byte: packets are encoded straight into the reply's buffer
 * (the slices' framing around them), and that buffer goes to the consumer's
 * output by reference behind a header encoded there (tg_ipc_call_reply_evbuffer),
 * never copied again before the kernel. Several replies go out per loop turn
 * (BATCHES_PER_TURN), while the consumer's output stays under OUTPUT_BACKLOG; past
 * it the read-out goes on when the output drains (the peer_drain hook). */
#include "service/svc.h"

#include "tracegate/log.h"
#include "tracegate/pbwire.h"

#include <event2/buffer.h>
#include <event2/event.h>
#include <stdlib.h>
#include <string.h>

struct tg_svc_reader {
    tg_svc_session *s;
    int phase; /* 0 prefix, 1 buffers, 2 trailer, 3 done */
    struct tg_svc_pkt_list pre, trailer;
    struct tg_svc_pkt *held; /* handed out last; freed on the next call */
    size_t buf_idx;
    struct tg_tb_slice one;
    uint8_t trusted[TG_SVC_TRUSTED_MAX];
};

static void move_list(struct tg_svc_pkt_list *dst, struct tg_svc_pkt_list *src)
{
    if (!src->head)
        return;
    *dst->tail = src->head;
    dst->tail = src->tail;
    tg_svc_pkt_list_init(src);
}

static void add(struct tg_svc_pkt_list *l, struct tg_svc_pkt *pk)
{
    if (pk)
        tg_svc_pkt_list_append(l, pk);
}

struct tg_svc_reader *tg_svc_reader_new(tg_svc_session *s)
{
    struct tg_svc_reader *r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    r->s = s;
    tg_svc_pkt_list_init(&r->pre);
    tg_svc_pkt_list_init(&r->trailer);
    const Perfetto__Protos__TraceConfig__BuiltinDataSource *bi = s->cfg ? s->cfg->builtin_data_sources : NULL;
    move_list(&r->pre, &s->clock_snapshots);
    if (s->sync_markers_pending) {
        s->sync_markers_pending = 0;
        add(&r->pre, tg_svc_build_sync_marker(s->svc));
    }
    if (!s->config_emitted) {
        s->config_emitted = true;
        if (!(bi && bi->has_disable_trace_config && bi->disable_trace_config))
            add(&r->pre, tg_svc_build_trace_config(s));
    }
    if (!s->uuid_emitted) {
        s->uuid_emitted = true;
        add(&r->pre, tg_svc_build_uuid(s));
    }
    if (!s->sysinfo_emitted) {
        s->sysinfo_emitted = true;
        if (!(bi && bi->has_disable_system_info && bi->disable_system_info))
            add(&r->pre, tg_svc_build_system_info(s));
    }
    struct tg_svc_pkt_list remote_clocks;
    tg_svc_pkt_list_init(&remote_clocks);
    if (!s->remote_emitted) {
        s->remote_emitted = true;
        tg_svc_build_remote_packets(s, &r->pre, &remote_clocks);
    }
    move_list(&r->pre, &s->events);
    move_list(&r->pre, &remote_clocks);
    move_list(&r->pre, &s->triggers);
    s->trigger_bytes = 0;
    s->trigger_drop_logged = false;
    return r;
}

void tg_svc_reader_free(struct tg_svc_reader *r)
{
    if (!r)
        return;
    free(r->held);
    tg_svc_pkt_list_clear(&r->pre);
    tg_svc_pkt_list_clear(&r->trailer);
    free(r);
}

static int emit_service(struct tg_svc_reader *r, struct tg_svc_pkt_list *l, struct tg_svc_reader_pkt *out)
{
    struct tg_svc_pkt *pk = l->head;
    if (!pk)
        return 0;
    l->head = pk->next;
    if (!l->head)
        l->tail = &l->head;
    r->held = pk;
    r->one.data = pk->data;
    r->one.len = pk->len;
    out->slices = &r->one;
    out->n = 1;
    out->trusted = NULL;
    out->trusted_len = 0;
    out->payload = 0;
    return 1;
}

int tg_svc_reader_next(struct tg_svc_reader *r, struct tg_svc_reader_pkt *out)
{
    free(r->held);
    r->held = NULL;
    tg_svc_session *s = r->s;
    for (;;) {
        switch (r->phase) {
        case 0:
            if (emit_service(r, &r->pre, out))
                return 1;
            r->phase = 1;
            break;
        case 1: {
            if (r->buf_idx >= s->n_buffers) {
                r->phase = 2;
                const Perfetto__Protos__TraceConfig__BuiltinDataSource *bi =
                    s->cfg ? s->cfg->builtin_data_sources : NULL;
                if (s->state == TG_SESS_DISABLED && !s->read_completed_emitted &&
                    !(bi && bi->has_disable_service_events && bi->disable_service_events)) {
                    s->read_completed_emitted = true;
                    add(&r->trailer, tg_svc_build_event(s->svc, TG_EV_READ_TRACING_BUFFERS_COMPLETED));
                }
                if (s->stats_pending) {
                    s->stats_pending = false;
                    add(&r->trailer, tg_svc_build_trace_stats(s));
                }
                break;
            }
            struct tg_tb_packet pkt;
            struct tg_tb_seq_info info;
            if (!tg_trace_buffer_read_packet(s->buffers[r->buf_idx]->tb, &pkt, &info)) {
                r->buf_idx++;
                break;
            }
            if (!tg_svc_packet_is_valid(&pkt)) {
                s->svc->invalid_packets++;
                break;
            }
            uint32_t seq = tg_svc_session_seq_id(s, info.producer_id, info.writer_id);
            out->slices = pkt.slices;
            out->n = pkt.num_slices;
            out->trusted_len = tg_svc_trusted_slice(r->trusted, &info, seq);
            out->trusted = r->trusted;
            out->payload = pkt.size;
            return 1;
        }
        case 2:
            if (emit_service(r, &r->trailer, out))
                return 1;
            r->phase = 3;
            break;
        default:
            return 0;
        }
    }
}

/* ------------------------------------------------------------ ReadBuffers stream */

/* Reply buffers are recycled: a buffer the output has sent comes back to its read-out's pool
 * instead of going to malloc, whose trimming would otherwise give the pages back to the kernel and
 * fault them in again for the next replies (a fifth of the read-out's time in a profile). The pool
 * lives as long as its read-out or any of its buffers, whichever is longer; everything runs on the
 * service's thread (the output's cleanup runs where the connection is flushed). */
#define POOL_KEEP 32u /* idle buffers kept: about the replies in flight under OUTPUT_BACKLOG */

struct reply_pool;
struct reply_buf {
    struct reply_pool *pool;
    size_t cap;
    uint8_t data[];
};

struct reply_pool {
    unsigned refs; /* the read-out (until it ends) + every reply_buf alive */
    bool closed;   /* the read-out ended: returning buffers are freed */
    unsigned nidle;
    struct reply_buf *idle[POOL_KEEP];
};

struct tg_svc_read {
    tg_svc_consumer *c;
    tg_svc_session *s;
    tg_ipc_call *call;
    struct tg_svc_reader *r;
    struct event *ev;
    struct reply_pool *pool;
    struct reply_buf *buf; /* the reply being built; handed to the output when sent */
    size_t len;
    struct evbuffer *out; /* carries a reply's buffer to tg_ipc_call_reply_evbuffer */
    bool waiting;         /* for the consumer's output to drain (tg_svc_read_buffers_drained) */
};

#define SLICE_OVERHEAD 16u /* tags and varints around one slice */
#define MAX_SLICE_DATA (TG_SVC_MAX_READ_REPLY - 2 * SLICE_OVERHEAD)
#define OUTPUT_BACKLOG (4u << 20)
/* Over the backlog the read-out waits for the output's drain callback (under its low watermark);
 * this timer only backs it up. A fixed 5 ms wait used to idle a fast reader half the time. */
#define DRAIN_FALLBACK_US 100000
#define BATCHES_PER_TURN 8u /* replies of ~32 KiB per loop turn; then other clients get a turn */
#define REPLY_BUF_INITIAL 65536u

static void pool_unref(struct reply_pool *pool)
{
    if (--pool->refs == 0)
        free(pool);
}

static void buf_free(struct reply_buf *b)
{
    struct reply_pool *pool = b->pool;
    free(b);
    pool_unref(pool);
}

/* A buffer of at least `need` bytes: an idle one, grown if it must, or a new one. */
static struct reply_buf *pool_get(struct reply_pool *pool, size_t need)
{
    struct reply_buf *b = pool->nidle ? pool->idle[--pool->nidle] : NULL;
    if (b && b->cap >= need)
        return b;
    size_t cap = b ? b->cap : REPLY_BUF_INITIAL;
    while (cap < need)
        cap *= 2;
    struct reply_buf *n = realloc(b, sizeof *n + cap);
    if (!n) {
        if (b)
            buf_free(b);
        return NULL;
    }
    if (!b) {
        n->pool = pool;
        pool->refs++;
    }
    n->cap = cap;
    return n;
}

static void pool_put(struct reply_buf *b)
{
    struct reply_pool *pool = b->pool;
    if (!pool->closed && pool->nidle < POOL_KEEP)
        pool->idle[pool->nidle++] = b;
    else
        buf_free(b);
}

static void pool_close(struct reply_pool *pool)
{
    if (!pool)
        return;
    pool->closed = true;
    while (pool->nidle)
        buf_free(pool->idle[--pool->nidle]);
    pool_unref(pool);
}

static void read_free(struct tg_svc_read *rd)
{
    if (rd->c)
        rd->c->read = NULL;
    if (rd->ev)
        event_free(rd->ev);
    tg_svc_reader_free(rd->r);
    if (rd->buf)
        buf_free(rd->buf);
    if (rd->out)
        evbuffer_free(rd->out);
    pool_close(rd->pool);
    free(rd);
}

/* evbuffer_add_reference cleanup: the reply left the output; its buffer goes back to the pool. */
static void release_reply_buf(const void *data, size_t len, void *arg)
{
    (void)data;
    (void)len;
    pool_put(arg);
}

static void send_reply(struct tg_svc_read *rd, int has_more)
{
    tg_ipc_call *call = rd->call;
    if (!has_more)
        rd->call = NULL;
    if (rd->len > 0) {
        /* the buffer itself goes out: the next reply gets another one */
        if (evbuffer_add_reference(rd->out, rd->buf->data, rd->len, release_reply_buf, rd->buf) == 0) {
            rd->buf = NULL;
        } else if (evbuffer_add(rd->out, rd->buf->data, rd->len) != 0) {
            evbuffer_drain(rd->out, evbuffer_get_length(rd->out)); /* an empty reply rather than half of one */
        }
    }
    tg_ipc_call_reply_evbuffer(call, rd->out, has_more);
    rd->len = 0;
}

static int reserve(struct tg_svc_read *rd, size_t more)
{
    if (rd->buf && rd->len + more <= rd->buf->cap)
        return 0;
    if (rd->buf) { /* grow the reply being built (not referenced by anything yet) */
        size_t cap = rd->buf->cap;
        while (cap < rd->len + more)
            cap *= 2;
        struct reply_buf *n = realloc(rd->buf, sizeof *n + cap);
        if (!n)
            return -1;
        n->cap = cap;
        rd->buf = n;
        return 0;
    }
    rd->buf = pool_get(rd->pool, rd->len + more);
    return rd->buf ? 0 : -1;
}

/* Varints of slice framing, in line (two per slice, a slice per packet and per trusted suffix). */
static inline size_t varint_size(size_t v)
{
    size_t n = 1;
    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

static inline uint8_t *put_varint(uint8_t *o, size_t v)
{
    while (v >= 0x80) {
        *o++ = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    *o++ = (uint8_t)v;
    return o;
}

/* Appends one ReadBuffersResponse.Slice, cutting it when it would not fit. */
static void append_slice(struct tg_svc_read *rd, const uint8_t *data, size_t len, bool last)
{
    do {
        size_t piece = len > MAX_SLICE_DATA ? MAX_SLICE_DATA : len;
        bool piece_last = last && piece == len;
        size_t inner = 1 + varint_size(piece) + piece + 2;
        size_t enc = 1 + varint_size(inner) + inner;
        if (rd->len + enc > TG_SVC_MAX_READ_REPLY && rd->len > 0)
            send_reply(rd, 1);
        if (reserve(rd, enc) != 0)
            return;
        uint8_t *o = rd->buf->data + rd->len;
        *o++ = 2 << 3 | TG_PB_LEN; /* ReadBuffersResponse.slices */
        o = put_varint(o, inner);
        *o++ = 1 << 3 | TG_PB_LEN; /* Slice.data */
        o = put_varint(o, piece);
        memcpy(o, data, piece);
        o += piece;
        *o++ = 2 << 3 | TG_PB_VARINT; /* Slice.last_slice_for_packet */
        *o++ = piece_last ? 1 : 0;
        rd->len = (size_t)(o - rd->buf->data);
        data += piece;
        len -= piece;
    } while (len > 0);
}

/* One batch of ~32 KiB of packets into replies. Returns true when the read-out is complete (the
 * last reply is then still to be sent). */
static bool fill_batch(struct tg_svc_read *rd)
{
    size_t bytes = 0;
    while (bytes < TG_SVC_READ_BATCH_BYTES) {
        struct tg_svc_reader_pkt pk;
        if (!tg_svc_reader_next(rd->r, &pk))
            return true;
        for (size_t i = 0; i < pk.n; i++)
            append_slice(rd, pk.slices[i].data, pk.slices[i].len, i + 1 == pk.n && !pk.trusted_len);
        if (pk.trusted_len)
            append_slice(rd, pk.trusted, pk.trusted_len, true);
        /* like traced: whole packet sizes, trusted fields included, count */
        for (size_t i = 0; i < pk.n; i++)
            bytes += pk.slices[i].len;
        bytes += pk.trusted_len;
    }
    return false;
}

static void on_batch(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct tg_svc_read *rd = arg;
    for (unsigned i = 0; i < BATCHES_PER_TURN; i++) {
        if (tg_ipc_peer_output_len(tg_ipc_call_peer(rd->call)) > OUTPUT_BACKLOG) {
            struct timeval tv = {0, DRAIN_FALLBACK_US};
            rd->waiting = true;
            evtimer_add(rd->ev, &tv); /* let the consumer drain first */
            return;
        }
        rd->waiting = false;
        if (fill_batch(rd)) {
            send_reply(rd, 0);
            read_free(rd);
            return;
        }
        send_reply(rd, 1);
    }
    struct timeval tv = {0, 0};
    evtimer_add(rd->ev, &tv);
}

void tg_svc_read_buffers_start(tg_svc_consumer *c, tg_svc_session *s, tg_ipc_call *call)
{
    struct tg_svc_read *rd = calloc(1, sizeof *rd);
    if (rd) {
        rd->c = c;
        rd->s = s;
        rd->call = call;
        rd->r = tg_svc_reader_new(s);
        rd->ev = evtimer_new(c->svc->base, on_batch, rd);
        rd->out = evbuffer_new();
        rd->pool = calloc(1, sizeof *rd->pool);
        if (rd->pool)
            rd->pool->refs = 1;
    }
    if (!rd || !rd->r || !rd->ev || !rd->out || !rd->pool) {
        if (rd) {
            rd->call = NULL;
            read_free(rd);
        }
        tg_ipc_call_reject(call);
        return;
    }
    c->read = rd;
    on_batch(-1, 0, rd);
}

void tg_svc_read_buffers_cancel(tg_svc_consumer *c)
{
    struct tg_svc_read *rd = c->read;
    if (!rd)
        return;
    if (rd->call) {
        rd->len = 0;
        send_reply(rd, 0);
    }
    read_free(rd);
}

void tg_svc_read_buffers_drained(tg_svc_consumer *c)
{
    struct tg_svc_read *rd = c->read;
    if (!rd || !rd->waiting)
        return;
    rd->waiting = false;
    struct timeval tv = {0, 0};
    evtimer_add(rd->ev, &tv);
}
