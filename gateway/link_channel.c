/* link_channel.c: one IPC connection carried by a gateway link: an in-process bufferevent pair
 * toward the gateway on this node (a socketpair for ADB streams, which are spliced to a socket),
 * an HTTP/2 stream toward the peer, and between them the record layer
 * (docs/link-protocol.md §4): whole IPC frames as numbered records kept until the peer ACKs
 * them, resent after a resume; received bytes consumed from HTTP/2's window only once they were
 * handed to the local socket. */
#include "link_int.h"

#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "link_wire.h"
#include "net/bulk_read.h"
#include "tracegate/frame.h"
#include "tracegate/log.h"

#define LOG "link"
#define LOCAL_OUT_LOW (256u * 1024u) /* consume stream bytes once the local output is under this */
/* What the local input may hold beyond the records. A bufferevent pair moves everything its
 * partner queued whenever reading is enabled; reading stops at this mark, so the rest stays queued
 * at the gateway (whose bridge then sees its client congested and stops reading the other side).
 * Not a read watermark: the pair would then move partial chains, copying them. */
#define LOCAL_IN_HIGH (1024u * 1024u)

static nghttp2_session *h2_of(struct link_channel *ch)
{
    struct link_conn *c = ch->link->conn;
    return c && c->h2 && !c->dead ? c->h2 : NULL;
}

static void kick(struct link_channel *ch)
{
    nghttp2_session *s = h2_of(ch);
    if (s && ch->sid >= 0) {
        nghttp2_session_resume_data(s, ch->sid);
        tg_link_conn_flush(ch->link->conn);
    }
}

static int local_read(struct link_channel *ch);

/* Reads from the local side while there is room: records under the send buffer and the input
 * under its mark (and not after its end). */
static void local_flow(struct link_channel *ch)
{
    int want = !ch->local_eof && evbuffer_get_length(ch->unacked) < LINK_CHANNEL_BUFFER &&
               evbuffer_get_length(bufferevent_get_input(ch->local)) < LOCAL_IN_HIGH;
    int on = (bufferevent_get_enabled(ch->local) & EV_READ) != 0;
    if (want && !on)
        bufferevent_enable(ch->local, EV_READ);
    else if (!want && on)
        bufferevent_disable(ch->local, EV_READ);
}

/* Whether the local input holds something local_read would act on: a whole frame (or an oversized
 * frame's header, which closes the channel). */
static int local_has_record(struct link_channel *ch)
{
    struct evbuffer *in = bufferevent_get_input(ch->local);
    size_t have = evbuffer_get_length(in);
    if (ch->producer == LINK_KIND_ADB)
        return have > 0;
    uint8_t h[4];
    if (have < 4 || evbuffer_copyout(in, h, 4) != 4)
        return 0;
    uint32_t n = (uint32_t)h[0] | (uint32_t)h[1] << 8 | (uint32_t)h[2] << 16 | (uint32_t)h[3] << 24;
    return n > TG_FRAME_MAX_DEFAULT || have >= 4 + (size_t)n;
}

/* The local peer reads an end of stream once it has everything: shutdown(SHUT_WR) on a socket;
 * on a bufferevent pair, the rest handed over and an EOF event for the partner. */
static void local_finish(struct link_channel *ch)
{
    if (ch->local_finished)
        return;
    ch->local_finished = 1;
    int fd = bufferevent_getfd(ch->local);
    if (fd >= 0)
        shutdown(fd, SHUT_WR);
    else
        bufferevent_flush(ch->local, EV_WRITE, BEV_FINISHED);
}

/* ---- acknowledgements ---- */

static void rec_free(struct link_rec *r)
{
    if (r) {
        evbuffer_free(r->tail);
        free(r);
    }
}

static void apply_ack(struct link_channel *ch, uint64_t received)
{
    while (ch->tx_acked < received && ch->rec_count) {
        uint32_t len = ch->rec_len[ch->rec_head];
        evbuffer_drain(ch->unacked, len);
        rec_free(ch->rec_ref[ch->rec_head]); /* (its bytes live on while a DATA frame holds them) */
        ch->rec_ref[ch->rec_head] = NULL;
        ch->unacked_base += len;
        if (ch->tx_next) {
            ch->tx_next--;
            ch->tx_off -= len;
        } else {
            ch->tx_off = 0; /* the peer acknowledged a record it was not sent whole: its loss */
            ch->tx_rec_left = 0;
        }
        ch->rec_head = (ch->rec_head + 1) % ch->rec_cap;
        ch->rec_count--;
        ch->tx_acked++;
    }
    if (ch->local && evbuffer_get_length(ch->unacked) < LINK_CHANNEL_BUFFER && local_has_record(ch)) {
        /* frames that waited in the input (also after a pair reported its end), read from the
         * loop: our callers (the peer's data, a bind) still use the channel, and reading may
         * close it */
        bufferevent_trigger(ch->local, EV_READ, BEV_TRIG_IGNORE_WATERMARKS | BEV_TRIG_DEFER_CALLBACKS);
    }
    if (ch->local)
        local_flow(ch);
}

static void queue_ack(struct link_channel *ch)
{
    if (ch->rx_count == ch->rx_acked_sent || ch->eof_sent)
        return;
    uint8_t rec[16];
    uint8_t pl[10];
    size_t n = tg_link_ack_payload(pl, ch->rx_count);
    size_t h = tg_link_rec_header(rec, TG_LINK_REC_ACK, n);
    memcpy(rec + h, pl, n);
    if (!ch->ack_partial) /* the newest count says it all, unless an older ACK is half sent */
        evbuffer_drain(ch->ack_out, evbuffer_get_length(ch->ack_out));
    evbuffer_add(ch->ack_out, rec, h + n);
    ch->rx_acked_sent = ch->rx_count;
    ch->rx_since_ack_bytes = ch->rx_since_ack_recs = 0;
    kick(ch);
}

static void ack_cb(evutil_socket_t fd, short what, void *arg)
{
    struct link_channel *ch = arg;
    (void)fd;
    (void)what;
    if (ch->local_gone && ch->tx_acked == ch->tx_count) {
        /* The local peer is gone and the peer has all our records: the channel is over. Waiting
         * for the peer's END_STREAM can be forever: after our END_STREAM we cannot ACK, its
         * unacked records reach LINK_CHANNEL_BUFFER, it stops reading its local socket, and a
         * gateway bridge there (which stops reading a client that does not read its replies)
         * never sees the end of the connection. */
        tg_link_channel_abort(ch, "the local peer is gone");
        return;
    }
    queue_ack(ch);
}

/* ---- the local socket ---- */

static int ring_push(struct link_channel *ch, uint32_t len, struct link_rec *ref)
{
    if (ch->rec_count == ch->rec_cap) {
        size_t cap = ch->rec_cap ? ch->rec_cap * 2 : 64;
        uint32_t *n = malloc(cap * sizeof *n);
        struct link_rec **r = malloc(cap * sizeof *r);
        if (!n || !r) {
            free(n);
            free(r);
            return -1;
        }
        for (size_t i = 0; i < ch->rec_count; i++) {
            n[i] = ch->rec_len[(ch->rec_head + i) % ch->rec_cap];
            r[i] = ch->rec_ref[(ch->rec_head + i) % ch->rec_cap];
        }
        free(ch->rec_len);
        free(ch->rec_ref);
        ch->rec_len = n;
        ch->rec_ref = r;
        ch->rec_cap = cap;
        ch->rec_head = 0;
    }
    size_t at = (ch->rec_head + ch->rec_count) % ch->rec_cap;
    ch->rec_len[at] = len;
    ch->rec_ref[at] = ref;
    ch->rec_count++;
    return 0;
}

/* Appends one record to unacked: its headers (copied) and n bytes of `in` (moved). A large record
 * is also kept apart (struct link_rec): its headers and first LINK_REC_HEAD_COPY bytes copied, the
 * rest in a buffer of its own that unacked then holds by reference (evbuffer_add_buffer_reference),
 * so that DATA frames can hold it by reference too, whatever happens to unacked meanwhile.
 * Returns 0, or -1 (out of memory: the caller aborts the channel). */
static int record_append(struct link_channel *ch, struct evbuffer *in, const uint8_t *att, size_t al,
                         const uint8_t *hdr, size_t hl, size_t n)
{
    struct link_rec *r = NULL;
    if (al + hl + n >= LINK_REC_REF_MIN) {
        size_t take = n < LINK_REC_HEAD_COPY ? n : LINK_REC_HEAD_COPY;
        r = malloc(sizeof *r + al + hl + take);
        if (!r || !(r->tail = evbuffer_new())) {
            free(r);
            return -1;
        }
        memcpy(r->head, att, al);
        memcpy(r->head + al, hdr, hl);
        r->head_len = al + hl + take;
        if (evbuffer_remove(in, r->head + al + hl, take) != (int)take ||
            evbuffer_remove_buffer(in, r->tail, n - take) != (int)(n - take) ||
            evbuffer_add(ch->unacked, r->head, r->head_len) != 0) {
            rec_free(r);
            return -1;
        }
        if (evbuffer_add_buffer_reference(ch->unacked, r->tail) != 0) {
            /* a chain that cannot be referenced (already a reference of a reference): move it */
            evbuffer_add_buffer(ch->unacked, r->tail);
            rec_free(r);
            r = NULL;
        }
    } else {
        if ((al && evbuffer_add(ch->unacked, att, al) != 0) || evbuffer_add(ch->unacked, hdr, hl) != 0)
            return -1;
        evbuffer_remove_buffer(in, ch->unacked, n); /* moves the chains, no copy */
    }
    if (ring_push(ch, (uint32_t)(al + hl + n), r) != 0) {
        rec_free(r);
        return -1;
    }
    ch->tx_count++;
    return 0;
}

int tg_link_channel_send_lost(struct link_channel *ch, const char *key)
{
    struct tg_link *l = ch->link;
    size_t n = strlen(key);
    if (!tg_link_lost_key_ok(key, n) || ch->eof_sent || ch->producer != LINK_KIND_CONSUMER || !l->have_desc ||
        !tg_node_desc_has_cap(&l->peer_desc, TG_LINK_CAP_LOST))
        return -1;
    struct evbuffer *b = evbuffer_new();
    if (!b || evbuffer_add(b, key, n) != 0) {
        if (b)
            evbuffer_free(b);
        return -1;
    }
    uint8_t hdr[TG_LINK_REC_HDR_MAX];
    size_t hl = tg_link_rec_header(hdr, TG_LINK_REC_LOST, n);
    int r = record_append(ch, b, NULL, 0, hdr, hl, n); /* numbered: resent after a resume like IPC */
    evbuffer_free(b);
    if (r == 0)
        kick(ch);
    return r;
}

/* Moves whole frames from the local socket into records. Returns 0, or -1 when it closed (freed)
 * the channel. */
static int local_read(struct link_channel *ch)
{
    struct evbuffer *in = bufferevent_get_input(ch->local);
    int added = 0;
    while (ch->producer == LINK_KIND_ADB && evbuffer_get_length(ch->unacked) < LINK_CHANNEL_BUFFER) {
        /* an ADB stream has no frames: whatever arrived, in records of at most 64 KiB */
        size_t have = evbuffer_get_length(in), n = have < 65536 ? have : 65536;
        if (!n)
            break;
        uint8_t hdr[TG_LINK_REC_HDR_MAX];
        size_t hl = tg_link_rec_header(hdr, TG_LINK_REC_IPC, n);
        if (record_append(ch, in, NULL, 0, hdr, hl, n) != 0) {
            tg_link_channel_abort(ch, "out of memory");
            return -1;
        }
        added = 1;
    }
    while (ch->producer != LINK_KIND_ADB && evbuffer_get_length(ch->unacked) < LINK_CHANNEL_BUFFER) {
        size_t have = evbuffer_get_length(in);
        if (have < 4)
            break;
        uint8_t h[4];
        evbuffer_copyout(in, h, 4);
        uint32_t n = (uint32_t)h[0] | (uint32_t)h[1] << 8 | (uint32_t)h[2] << 16 | (uint32_t)h[3] << 24;
        if (n > TG_FRAME_MAX_DEFAULT) {
            tg_link_channel_abort(ch, "the local peer sent a frame over 128 KiB");
            return -1;
        }
        if (have < 4 + (size_t)n)
            break;
        uint8_t hdr[TG_LINK_REC_HDR_MAX];
        size_t hl = tg_link_rec_header(hdr, TG_LINK_REC_IPC, 4 + (size_t)n);
        /* OnePath: the frame's span context and send time, as a record of its own before it */
        uint8_t att[TG_LINK_REC_HDR_MAX + ONEPATH_ATTACH_OVERHEAD];
        size_t al = 0;
        if (tg_link_op_on()) { /* (IPC channels only: an ADB stream has no frames to trace) */
            uint8_t pre[64];
            size_t pl = 4 + (size_t)n < sizeof pre ? 4 + (size_t)n : sizeof pre;
            evbuffer_copyout(in, pre, pl);
            al = tg_link_op_send(ch, pre, pl, 4 + (size_t)n, att);
        }
        if (record_append(ch, in, att, al, hdr, hl, 4 + (size_t)n) != 0) {
            tg_link_channel_abort(ch, "out of memory");
            return -1;
        }
        added = 1;
    }
    local_flow(ch); /* the peer is behind: this channel waits, no other */
    if (added)
        kick(ch);
    return 0;
}

static void local_read_cb(struct bufferevent *bev, void *arg)
{
    (void)bev;
    local_read(arg);
}

static void consume(struct link_channel *ch)
{
    nghttp2_session *s = h2_of(ch);
    if (s && ch->sid >= 0 && ch->unconsumed) {
        nghttp2_session_consume(s, ch->sid, ch->unconsumed);
        ch->unconsumed = 0;
        tg_link_conn_flush(ch->link->conn);
    }
}

static void local_write_cb(struct bufferevent *bev, void *arg)
{
    struct link_channel *ch = arg;
    consume(ch); /* the local peer took its bytes: open the window again */
    if (ch->peer_eof && evbuffer_get_length(bufferevent_get_output(bev)) == 0)
        local_finish(ch);
}

static void local_event_cb(struct bufferevent *bev, short what, void *arg)
{
    struct link_channel *ch = arg;
    (void)bev;
    if (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR)) {
        if (!ch->local_eof) {
            if (local_read(ch) != 0) /* whole frames that came before the end still go */
                return;
            ch->local_eof = 1;
        }
        bufferevent_disable(ch->local, EV_READ);
        /* a pair's partner that was freed (the gateway closed the connection) cannot take more:
         * as a socket's EPIPE */
        int gone = (what & BEV_EVENT_ERROR) || (bufferevent_getfd(ch->local) < 0 && !bufferevent_pair_get_partner(ch->local));
        if (gone && !ch->local_gone) {
            /* the local peer is gone (EPIPE, ECONNRESET): what the peer still sends can never be
             * delivered. Drop it and give its window back, or this stream's window stays closed,
             * the peer never finishes (no END_STREAM, the channel is never freed) and a dozen
             * such channels hold the whole connection window: every channel of the link stalls.
             * (What already waits in the output stays there until the channel is freed: a socket
             * bufferevent's output cannot be drained from outside.) */
            ch->local_gone = 1;
            consume(ch);
            event_active(ch->ack_ev, EV_TIMEOUT, 0); /* ack_cb: reset once the peer has our records */
        }
        if (!ch->ever_bound && ch->link->state != LINK_UP) {
            tg_link_channel_abort(ch, "the local peer closed before the channel opened");
            return;
        }
        kick(ch); /* END_STREAM once everything is sent */
    }
}

/* ---- lifecycle ---- */

struct link_channel *tg_link_channel_new(struct tg_link *l, uint64_t id, const char *node, int producer,
                                         const char *principal, int inbound, int *other_fd,
                                         struct bufferevent **other_bev)
{
    struct event_base *base = tg_fleet_base(l->fleet);
    int sv[2] = {-1, -1};
    struct bufferevent *pair[2] = {NULL, NULL};
    if (other_bev) {
        /* in-process: frames move between the two ends as evbuffer chains, no syscall, no copy */
        if (bufferevent_pair_new(base, BEV_OPT_DEFER_CALLBACKS, pair) != 0)
            return NULL;
    } else if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) != 0) {
        return NULL;
    }
    struct link_channel *ch = calloc(1, sizeof *ch);
    if (!ch) {
        if (other_bev) {
            bufferevent_free(pair[0]);
            bufferevent_free(pair[1]);
        } else {
            close(sv[0]);
            close(sv[1]);
        }
        return NULL;
    }
    ch->link = l;
    ch->sid = -1;
    ch->inbound = inbound;
    ch->producer = producer;
    snprintf(ch->node, sizeof ch->node, "%s", node);
    snprintf(ch->principal, sizeof ch->principal, "%s", principal ? principal : "");
    if (!id) {
        id = l->next_cid;
        l->next_cid += 2;
    }
    ch->id = id;
    ch->local = other_bev ? pair[0]
                          : bufferevent_socket_new(base, sv[0], BEV_OPT_CLOSE_ON_FREE | BEV_OPT_DEFER_CALLBACKS);
    if (ch->local && !other_bev)
        tg_bev_bulk_read(ch->local); /* an ADB socket */
    ch->unacked = evbuffer_new();
    ch->ack_out = evbuffer_new();
    ch->rx = evbuffer_new();
    ch->ack_ev = evtimer_new(base, ack_cb, ch);
    if (!ch->local || !ch->unacked || !ch->ack_out || !ch->rx || !ch->ack_ev) {
        if (other_bev) {
            bufferevent_free(pair[1]);
        } else {
            if (!ch->local)
                close(sv[0]);
            close(sv[1]);
        }
        ch->link = NULL;
        tg_link_channel_free(ch);
        return NULL;
    }
    bufferevent_setcb(ch->local, local_read_cb, local_write_cb, local_event_cb, ch);
    bufferevent_setwatermark(ch->local, EV_WRITE, LOCAL_OUT_LOW, 0);
    bufferevent_enable(ch->local, EV_READ | EV_WRITE);
    ch->next = l->channels;
    if (ch->next)
        ch->next->prev = ch;
    l->channels = ch;
    l->n_channels++;
    if (other_bev)
        *other_bev = pair[1];
    else
        *other_fd = sv[1];
    return ch;
}

void tg_link_channel_free(struct link_channel *ch)
{
    if (!ch)
        return;
    struct tg_link *l = ch->link;
    if (l) {
        if (ch->prev)
            ch->prev->next = ch->next;
        else if (l->channels == ch)
            l->channels = ch->next;
        if (ch->next)
            ch->next->prev = ch->prev;
        if (l->n_channels)
            l->n_channels--;
    }
    if (ch->ctx)
        ch->ctx->ch = NULL;
    if (ch->local) {
        local_finish(ch); /* a pair's partner is not told of a free: it gets its EOF first */
        bufferevent_free(ch->local);
    }
    if (ch->unacked)
        evbuffer_free(ch->unacked);
    if (ch->ack_out)
        evbuffer_free(ch->ack_out);
    if (ch->rx)
        evbuffer_free(ch->rx);
    if (ch->ack_ev)
        event_free(ch->ack_ev);
    if (ch->open_ev)
        event_free(ch->open_ev);
    for (size_t i = 0; i < ch->rec_count; i++)
        rec_free(ch->rec_ref[(ch->rec_head + i) % ch->rec_cap]);
    free(ch->rec_len);
    free(ch->rec_ref);
    free(ch);
}

void tg_link_channel_reset(struct link_channel *ch, const char *reason, uint32_t error_code)
{
    struct tg_link *l = ch->link;
    tg_info(LOG, "link %s: channel %llx to %s/%s closed: %s", l->peer_name, (unsigned long long)ch->id, ch->node,
            link_kind_name(ch->producer), reason);
    nghttp2_session *s = h2_of(ch);
    int32_t sid = ch->sid;
    /* gone before the RST goes out: sending it closes the stream, and the stream's close
     * callback must not find the channel (it would close it a second time) */
    tg_link_channel_free(ch);
    if (s && sid >= 0) {
        nghttp2_submit_rst_stream(s, NGHTTP2_FLAG_NONE, sid, error_code);
        tg_link_conn_flush(l->conn);
    }
}

void tg_link_channel_abort(struct link_channel *ch, const char *reason)
{
    tg_link_channel_reset(ch, reason, NGHTTP2_CANCEL);
}

struct link_channel *tg_link_channel_find(struct tg_link *l, uint64_t id)
{
    for (struct link_channel *ch = l->channels; ch; ch = ch->next)
        if (ch->id == id)
            return ch;
    return NULL;
}

void tg_link_channel_bind(struct link_channel *ch, int32_t sid, uint64_t peer_received)
{
    ch->sid = sid;
    if (peer_received > ch->tx_count) {
        tg_link_channel_abort(ch, "the peer claims records that were never sent");
        return;
    }
    apply_ack(ch, peer_received);
    if (ch->response_ok) {
        /* a fresh stream: everything not acknowledged goes again, in order */
        ch->tx_off = 0;
        ch->tx_next = 0;
        ch->tx_rec_left = 0;
        ch->eof_sent = 0;
        ch->ever_bound = 1;
        if (ch->open_ev)
            event_del(ch->open_ev);
    }
    kick(ch);
}

void tg_link_channel_unbind(struct link_channel *ch)
{
    if (ch->ctx)
        ch->ctx->ch = NULL;
    ch->ctx = NULL;
    ch->sid = -1;
    ch->response_ok = 0;
    ch->unconsumed = 0;
    ch->eof_sent = 0;
    evbuffer_drain(ch->rx, evbuffer_get_length(ch->rx)); /* a partial record comes again, whole */
    evbuffer_drain(ch->ack_out, evbuffer_get_length(ch->ack_out));
    ch->ack_partial = 0;
    ch->tx_off = 0; /* the next stream starts over (tg_link_channel_bind) */
    ch->tx_next = 0;
    ch->tx_rec_left = 0;
    ch->rx_acked_sent = ch->rx_count; /* the next request/response says what we have */
    event_del(ch->ack_ev);
}

/* ---- from the peer ---- */

int tg_link_channel_on_data(struct link_channel *ch, const uint8_t *data, size_t len)
{
    evbuffer_add(ch->rx, data, len);
    nghttp2_session *s = h2_of(ch);
    struct evbuffer *out = bufferevent_get_output(ch->local);
    size_t immediate = 0;
    for (;;) {
        size_t have = evbuffer_get_length(ch->rx);
        if (!have)
            break;
        uint8_t hb[TG_LINK_REC_HDR_MAX];
        size_t hn = have < sizeof hb ? have : sizeof hb;
        evbuffer_copyout(ch->rx, hb, hn);
        uint8_t type;
        size_t plen;
        long hl = tg_link_rec_header_parse(hb, hn, &type, &plen);
        if (hl < 0)
            return -1;
        if (hl == 0 || have < (size_t)hl + plen)
            break;
        evbuffer_drain(ch->rx, (size_t)hl);
        if (type == TG_LINK_REC_IPC) {
            if (plen < (ch->producer == LINK_KIND_ADB ? 1u : 4u))
                return -1;
            if ((tg_link_op_on() || ch->op.att_len) && ch->producer != LINK_KIND_ADB) {
                uint8_t pre[64];
                size_t pl = plen < sizeof pre ? plen : sizeof pre;
                evbuffer_copyout(ch->rx, pre, pl);
                tg_link_op_recv(ch, pre, pl, plen);
            }
            if (ch->local_gone) { /* nobody to deliver to (local_event_cb): dropped, consumed at once */
                evbuffer_drain(ch->rx, plen);
                immediate += (size_t)hl + plen;
            } else {
                evbuffer_remove_buffer(ch->rx, out, plen);
                ch->unconsumed += (size_t)hl + plen;
            }
            ch->rx_count++;
            ch->rx_since_ack_recs++;
            ch->rx_since_ack_bytes += plen;
        } else if (type == TG_LINK_REC_ACK) {
            uint8_t pl[10];
            uint64_t v;
            if (plen > sizeof pl)
                return -1;
            evbuffer_remove(ch->rx, pl, plen);
            if (tg_link_ack_parse(pl, plen, &v) != 0 || v > ch->tx_count)
                return -1;
            apply_ack(ch, v);
            immediate += (size_t)hl + plen;
        } else if (type == TG_LINK_REC_LOST) {
            /* numbered like IPC records; acted on here, never delivered to the local peer */
            char key[TG_LINK_LOST_MAX + 1];
            evbuffer_remove(ch->rx, key, plen); /* plen <= TG_LINK_LOST_MAX (tg_link_rec_header_parse) */
            key[plen] = 0;
            if (ch->producer != LINK_KIND_CONSUMER || !tg_link_lost_key_ok(key, plen) || ch->lost_seen)
                return -1;
            ch->lost_seen = 1;
            ch->rx_count++;
            ch->rx_since_ack_recs++;
            immediate += (size_t)hl + plen;
            tg_fleet_channel_lost_record(ch->link->fleet, ch->link, ch, key);
        } else { /* ATTACH: the OnePath context of the next IPC record */
            uint8_t a[sizeof ch->op.att + 1];
            size_t take = plen < sizeof a ? plen : sizeof a;
            evbuffer_remove(ch->rx, a, take);
            evbuffer_drain(ch->rx, plen - take);
            tg_link_op_attach(ch, a, plen);
            immediate += (size_t)hl + plen;
        }
    }
    /* bytes still in ch->rx (a partial record) are consumed with the record */
    if (s && ch->sid >= 0 && immediate)
        nghttp2_session_consume(s, ch->sid, immediate);
    if (evbuffer_get_length(out) < LOCAL_OUT_LOW)
        consume(ch);
    if (ch->rx_since_ack_recs >= LINK_ACK_RECORDS || ch->rx_since_ack_bytes >= LINK_ACK_BYTES)
        queue_ack(ch);
    else if (ch->rx_since_ack_recs) {
        struct timeval tv = {0, 20000};
        evtimer_add(ch->ack_ev, &tv);
    }
    if (ch->local_gone)
        event_active(ch->ack_ev, EV_TIMEOUT, 0); /* ack_cb: over once the peer has all our records */
    return 0;
}

void tg_link_channel_on_peer_eof(struct link_channel *ch)
{
    ch->peer_eof = 1;
    if (evbuffer_get_length(bufferevent_get_output(ch->local)) == 0)
        local_finish(ch);
}

/* No-copy pieces: record bytes merge with the piece before when they follow it. */
static int nc_add_records(struct stream_ctx *x, uint64_t abs, size_t len)
{
    struct link_nc_seg *last = x->nc_n ? &x->nc[x->nc_n - 1] : NULL;
    if (last && !last->n_ack && !last->by_ref && last->abs + last->len == abs &&
        (uint64_t)last->len + len <= UINT32_MAX) {
        last->len += (uint32_t)len;
        return 1;
    }
    if (x->nc_n == LINK_NC_SEGS)
        return 0;
    x->nc[x->nc_n++] = (struct link_nc_seg){.abs = abs, .len = (uint32_t)len};
    return 1;
}

static int nc_add_ref(struct stream_ctx *x, uint64_t abs, uint64_t rec, size_t len)
{
    if (x->nc_n == LINK_NC_SEGS)
        return 0;
    x->nc[x->nc_n++] = (struct link_nc_seg){.abs = abs, .rec = rec, .len = (uint32_t)len, .by_ref = 1};
    return 1;
}

/* The record of number rec (counted from the first ever sent) if it is still unacknowledged. */
static size_t rec_slot(const struct link_channel *ch, uint64_t rec, int *ok)
{
    *ok = rec >= ch->tx_acked && rec - ch->tx_acked < ch->rec_count;
    return *ok ? (ch->rec_head + (size_t)(rec - ch->tx_acked)) % ch->rec_cap : 0;
}

static size_t nc_add_ack(struct stream_ctx *x, struct evbuffer *ack_out, size_t want)
{
    if (x->nc_n == LINK_NC_SEGS)
        return 0;
    struct link_nc_seg *g = &x->nc[x->nc_n++];
    memset(g, 0, sizeof *g);
    if (want > sizeof g->ack)
        want = sizeof g->ack;
    g->n_ack = (uint8_t)evbuffer_remove(ack_out, g->ack, want);
    g->len = g->n_ack;
    return g->n_ack;
}

ssize_t tg_link_channel_read_cb(nghttp2_session *s, int32_t sid, uint8_t *buf, size_t len, uint32_t *flags,
                                nghttp2_data_source *src, void *user)
{
    (void)s;
    (void)sid;
    (void)user;
    struct stream_ctx *x = src->ptr;
    struct link_channel *ch = x ? x->ch : NULL;
    if (!ch) {
        *flags |= NGHTTP2_DATA_FLAG_EOF; /* the channel is gone: end the stream */
        return 0;
    }
    if (!ch->response_ok)
        return NGHTTP2_ERR_DEFERRED;
    int nc = x->nocopy;
    x->nc_n = 0;
    /* A record may span several DATA frames (nghttp2 offers any len): an ACK goes out only
     * between two records, and a record only after a whole ACK, so the peer reads whole records. */
    size_t n = 0;
    size_t total = evbuffer_get_length(ch->unacked);
    while (n < len) {
        if (ch->tx_rec_left) {
            size_t want = len - n < ch->tx_rec_left ? len - n : ch->tx_rec_left;
            size_t got = 0;
            size_t slot = (ch->rec_head + ch->tx_next) % ch->rec_cap;
            if (nc && ch->rec_ref[slot] && ch->tx_rec_left == ch->rec_len[slot]) {
                /* a large record not started yet: whole, by reference, or in the next frame */
                if (want < ch->tx_rec_left && n)
                    break;
                if (want == ch->tx_rec_left) {
                    if (!nc_add_ref(x, ch->unacked_base + ch->tx_off, ch->tx_acked + ch->tx_next, want))
                        break;
                    got = want;
                }
            }
            if (got) {
                /* taken by reference above */
            } else if (nc) {
                if (ch->tx_off + want > total || !nc_add_records(x, ch->unacked_base + ch->tx_off, want))
                    break;
                got = want;
            } else {
                struct evbuffer_ptr p;
                evbuffer_ptr_set(ch->unacked, &p, ch->tx_off, EVBUFFER_PTR_SET);
                ev_ssize_t r = evbuffer_copyout_from(ch->unacked, &p, buf + n, want);
                if (r <= 0)
                    break;
                got = (size_t)r;
            }
            ch->tx_off += got;
            ch->tx_rec_left -= got;
            n += got;
            if (!ch->tx_rec_left)
                ch->tx_next++;
            continue;
        }
        size_t a = evbuffer_get_length(ch->ack_out);
        if (a) {
            size_t want = len - n < a ? len - n : a;
            if (nc) {
                want = nc_add_ack(x, ch->ack_out, want);
                if (!want)
                    break;
            } else {
                evbuffer_remove(ch->ack_out, buf + n, want);
            }
            n += want;
            ch->ack_partial = evbuffer_get_length(ch->ack_out) != 0;
            continue;
        }
        if (ch->tx_off < total && ch->tx_next < ch->rec_count) {
            ch->tx_rec_left = ch->rec_len[(ch->rec_head + ch->tx_next) % ch->rec_cap];
            continue;
        }
        break;
    }
    if (n) {
        if (nc)
            *flags |= NGHTTP2_DATA_FLAG_NO_COPY;
        return (ssize_t)n;
    }
    if (ch->local_eof && ch->tx_off >= total && !ch->eof_sent && !local_has_record(ch)) {
        ch->eof_sent = 1;
        *flags |= NGHTTP2_DATA_FLAG_EOF;
        return 0;
    }
    return NGHTTP2_ERR_DEFERRED;
}

int tg_link_channel_send_data(struct stream_ctx *x, const uint8_t *framehd, size_t length, struct evbuffer *out)
{
    struct link_channel *ch = x->ch;
    size_t sum = 0;
    for (size_t i = 0; i < x->nc_n; i++) { /* check everything before writing anything */
        const struct link_nc_seg *g = &x->nc[i];
        if (!g->n_ack && (!ch || g->abs < ch->unacked_base ||
                          g->abs - ch->unacked_base + g->len > evbuffer_get_length(ch->unacked)))
            return -1;
        if (g->by_ref) {
            int ok;
            size_t slot = rec_slot(ch, g->rec, &ok);
            const struct link_rec *r = ok ? ch->rec_ref[slot] : NULL;
            if (!r || r->head_len + evbuffer_get_length(r->tail) != g->len)
                return -1;
        }
        sum += g->len;
    }
    if (sum != length)
        return -1;
    /* the frame header and what follows it as a copy in one piece of `out` (a TLS record each) */
    size_t lead = 9;
    int ok;
    if (x->nc_n && x->nc[0].n_ack)
        lead += x->nc[0].n_ack;
    else if (x->nc_n && x->nc[0].by_ref) /* (checked above) */
        lead += ch->rec_ref[rec_slot(ch, x->nc[0].rec, &ok)]->head_len;
    evbuffer_expand(out, lead);
    evbuffer_add(out, framehd, 9);
    for (size_t i = 0; i < x->nc_n; i++) {
        const struct link_nc_seg *g = &x->nc[i];
        if (g->n_ack) {
            evbuffer_add(out, g->ack, g->n_ack);
            continue;
        }
        if (g->by_ref) {
            const struct link_rec *r = ch->rec_ref[rec_slot(ch, g->rec, &ok)];
            if (evbuffer_add(out, r->head, r->head_len) != 0 || evbuffer_add_buffer_reference(out, r->tail) != 0)
                return -1; /* (out of memory: the frame is cut, the connection is lost) */
            continue;
        }
        struct evbuffer_iovec v;
        struct evbuffer_ptr p;
        if (evbuffer_reserve_space(out, g->len, &v, 1) != 1 ||
            evbuffer_ptr_set(ch->unacked, &p, g->abs - ch->unacked_base, EVBUFFER_PTR_SET) != 0 ||
            evbuffer_copyout_from(ch->unacked, &p, v.iov_base, g->len) != (ev_ssize_t)g->len)
            return -1; /* (out of memory: the frame is cut, the connection is lost) */
        v.iov_len = g->len;
        evbuffer_commit_space(out, &v, 1);
    }
    x->nc_n = 0;
    return 0;
}

void tg_link_channel_on_close(struct link_channel *ch, uint32_t error_code)
{
    ch->ctx = NULL;
    ch->sid = -1;
    if (error_code == NGHTTP2_NO_ERROR && ch->eof_sent && ch->peer_eof) {
        ch->finished = 1;
        tg_link_channel_free(ch); /* both sides ended: the IPC connection is over */
        return;
    }
    char why[96];
    snprintf(why, sizeof why, "the stream was reset (%s)", nghttp2_http2_strerror(error_code));
    tg_link_channel_abort(ch, why);
}
