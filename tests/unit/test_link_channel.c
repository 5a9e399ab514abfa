/* test_link_channel.c: a gateway link channel's record layer (gateway/link_channel.c,
 * docs/link-protocol.md §4 and §6) between its local socket and a stand-in HTTP/2 stream: the
 * test writes IPC frames as the local peer, pulls what the channel would hand nghttp2
 * (tg_link_channel_read_cb) and feeds it the peer's DATA (tg_link_channel_on_data).
 *
 * Covers: every IPC frame becomes one IPC record, kept until an ACK covers it and dropped then
 * (stale ACKs change nothing, an ACK beyond what was sent is a protocol error); after a resume
 * exactly the records the peer lacks are sent again, in order, whatever the old stream had
 * carried; the receiving side delivers IPC bytes in order from DATA cut anywhere, acks after 32
 * records or 1 MiB and when idle, and a partial record lost with the stream is not counted;
 * protocol errors; the 8 MiB send buffer stops reading the local socket and an ACK starts it
 * again; a local frame over 128 KiB closes the channel (also when found after an ACK, while the
 * channel is still processing the peer's data); end of stream in both directions; a local peer
 * that is gone (its socket closed while the peer's records arrive): later records are dropped
 * with their window given back at once, and the channel resets when the peer has all of ours.
 *
 * Every case runs three times: with the local side a socketpair (ADB streams), a bufferevent pair
 * (IPC channels: the gateway holds the other end through tg_conn_new_bev), and a pair with no-copy
 * DATA (what tracegated does: the read callback notes pieces, tg_link_channel_send_data writes
 * the frame). Plus: an ACK for records whose bytes are noted but not written yet makes the write
 * fail (the stream is reset) instead of reading drained records; large records go by reference
 * and outlive their ACK and the channel while a DATA frame holds them. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "fleet.h"
#include "gw_config.h"
#include "gw_core.h"
#include "link_int.h"
#include "link_wire.h"
#include "tracegate/frame.h"
#include "tracegate/log.h"

#include "test_link_util.h"
#include "tg_test_util.h"

#define WAIT_MS 10000

static struct event_base *g_base;
static struct tg_gw_config g_cfg;
static struct tg_gw *g_gw;
static struct tg_fleet *g_fleet;

static int setup(void **state)
{
    (void)state;
    tg_log_set_level(TG_LOG_WARN);
    g_base = event_base_new();
    assert_non_null(g_base);
    char err[512];
    /* channels here never reach a gateway session: the upstream is never dialed */
    g_gw = tl_gw_new(g_base, &g_cfg, "/nonexistent/tracegate-test.sock", NULL);
    struct tg_fleet_config fc;
    memset(&fc, 0, sizeof fc);
    fc.node_name = "here";
    g_fleet = tg_fleet_new(g_base, g_gw, &fc, err, sizeof err);
    if (!g_fleet)
        fail_msg("tg_fleet_new: %s", err);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    tg_fleet_free(g_fleet);
    tg_gw_free(g_gw);
    tg_gw_config_free(&g_cfg);
    event_base_free(g_base);
    return 0;
}

/* ------------------------------------------------------------ harness */

static int g_pair;   /* the local side is a bufferevent pair, not a socketpair */
static int g_nocopy; /* streams hand DATA out with NGHTTP2_DATA_FLAG_NO_COPY */

/* One channel of a stand-in link, bound to stream 1 whose data provider is `x`. fd or peer is
 * the local peer's end (what the gateway would hold). */
struct h {
    struct tg_link *l;
    struct link_channel *ch;
    uint64_t id;
    int fd;
    struct bufferevent *peer;
    int peer_eof; /* the pair end saw its end of stream */
    struct stream_ctx x;
};

static void peer_event_cb(struct bufferevent *bev, short what, void *arg)
{
    (void)bev;
    if (what & BEV_EVENT_EOF)
        ((struct h *)arg)->peer_eof = 1;
}

/* The local peer is done writing (shutdown(SHUT_WR), or a pair's BEV_FINISHED). */
static void local_shutdown(struct h *h)
{
    if (h->peer)
        bufferevent_flush(h->peer, EV_WRITE, BEV_FINISHED);
    else
        shutdown(h->fd, SHUT_WR);
}

/* The local peer is gone, as tg_conn frees a pair end (its partner told first) or closes a socket. */
static void local_gone(struct h *h)
{
    if (h->peer) {
        bufferevent_flush(h->peer, EV_WRITE, BEV_FINISHED);
        bufferevent_free(h->peer);
        h->peer = NULL;
    } else if (h->fd >= 0) {
        close(h->fd);
    }
    h->fd = -1;
}

/* What the local peer can read now, appended to got: 1 at its end of stream, else 0. */
static int local_read_some(struct h *h, struct evbuffer *got)
{
    if (h->peer) {
        evbuffer_add_buffer(got, bufferevent_get_input(h->peer));
        return h->peer_eof;
    }
    uint8_t buf[65536];
    for (;;) {
        ssize_t r = read(h->fd, buf, sizeof buf);
        if (r == 0)
            return 1;
        if (r < 0)
            return 0;
        evbuffer_add(got, buf, (size_t)r);
    }
}

static void h_bind(struct h *h, int32_t sid, uint64_t peer_received)
{
    memset(&h->x, 0, sizeof h->x);
    h->x.kind = STREAM_CHANNEL;
    h->x.nocopy = g_nocopy;
    h->x.ch = h->ch;
    h->ch->ctx = &h->x;
    h->ch->response_ok = 1;
    tg_link_channel_bind(h->ch, sid, peer_received);
}

static void h_open(struct h *h)
{
    memset(h, 0, sizeof *h);
    h->l = calloc(1, sizeof *h->l);
    assert_non_null(h->l);
    h->l->fleet = g_fleet;
    h->l->state = LINK_UP;
    h->l->next_cid = 1;
    snprintf(h->l->peer_name, sizeof h->l->peer_name, "peer");
    h->fd = -1;
    h->ch = tg_link_channel_new(h->l, 0, "peer", 0, "uid:7", 0, &h->fd, g_pair ? &h->peer : NULL);
    assert_non_null(h->ch);
    if (h->peer) {
        bufferevent_setcb(h->peer, NULL, NULL, peer_event_cb, h);
        bufferevent_enable(h->peer, EV_READ | EV_WRITE);
    }
    h->id = h->ch->id;
    h_bind(h, 1, 0);
}

static int h_gone(struct h *h) { return tg_link_channel_find(h->l, h->id) == NULL; }

static void h_close(struct h *h)
{
    tg_link_free(h->l); /* frees what channels are left */
    local_gone(h);
    /* let the closed bufferevents' deferred callbacks run */
    event_base_loop(g_base, EVLOOP_NONBLOCK);
}

/* A frame as the local peer writes it: u32 LE length + payload (pattern from tag). */
static size_t make_frame(uint8_t *out, uint32_t plen, uint8_t tag)
{
    out[0] = (uint8_t)plen;
    out[1] = (uint8_t)(plen >> 8);
    out[2] = (uint8_t)(plen >> 16);
    out[3] = (uint8_t)(plen >> 24);
    for (uint32_t i = 0; i < plen; i++)
        out[4 + i] = (uint8_t)(tag + i * 7);
    return 4 + (size_t)plen;
}

/* Writes all of buf to the local end, running the loop while the socket is full. */
static void write_local(struct h *h, const uint8_t *buf, size_t len)
{
    if (h->peer) { /* the pair hands it over when the channel reads */
        evbuffer_add(bufferevent_get_output(h->peer), buf, len);
        event_base_loop(g_base, EVLOOP_NONBLOCK);
        return;
    }
    size_t off = 0;
    while (off < len) {
        ssize_t w = write(h->fd, buf + off, len - off);
        if (w > 0) {
            off += (size_t)w;
            continue;
        }
        assert_true(w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK));
        struct pollfd p = {h->fd, POLLOUT, 0};
        if (poll(&p, 1, 0) == 0)
            event_base_loop(g_base, EVLOOP_ONCE); /* the channel reads, making room */
    }
}

struct count_wait {
    struct h *h;
    uint64_t want;
};
static int tx_count_reached(void *arg)
{
    struct count_wait *w = arg;
    return w->h->ch->tx_count >= w->want;
}
static void wait_tx_count(struct h *h, uint64_t n)
{
    struct count_wait w = {h, n};
    assert_true(tg_test_run_until(g_base, tx_count_reached, &w, WAIT_MS));
    assert_int_equal(h->ch->tx_count, n);
}

static int gone_cb(void *arg) { return h_gone(arg); }

/* What nghttp2 gets from the read callback: with no-copy, the frame tg_link_channel_send_data
 * writes (less its 9-byte header) copied into buf. */
static ssize_t read_data(struct h *h, uint8_t *buf, size_t len, uint32_t *flags)
{
    nghttp2_data_source src = {.ptr = &h->x};
    ssize_t r = tg_link_channel_read_cb(NULL, 1, buf, len, flags, &src, NULL);
    if (r > 0 && (*flags & NGHTTP2_DATA_FLAG_NO_COPY)) {
        assert_true(h->x.nocopy);
        struct evbuffer *out = evbuffer_new();
        static const uint8_t hd[9] = {0};
        assert_int_equal(tg_link_channel_send_data(&h->x, hd, (size_t)r, out), 0);
        assert_int_equal(evbuffer_get_length(out), 9 + (size_t)r);
        evbuffer_drain(out, 9);
        evbuffer_remove(out, buf, (size_t)r);
        evbuffer_free(out);
    } else if (r > 0) {
        assert_false(h->x.nocopy);
    }
    return r;
}

/* Everything the channel would hand nghttp2 now (until it defers); *eof set on END_STREAM. */
static size_t pull(struct h *h, struct evbuffer *out, int *eof)
{
    size_t total = 0;
    uint8_t buf[16384];
    for (;;) {
        uint32_t flags = 0;
        /* odd sizes so records are cut at arbitrary places, as nghttp2's frame sizes do */
        size_t want = 1 + (total % 9973);
        ssize_t r = read_data(h, buf, want, &flags);
        if (r == NGHTTP2_ERR_DEFERRED)
            break;
        assert_true(r >= 0);
        evbuffer_add(out, buf, (size_t)r);
        total += (size_t)r;
        if (flags & NGHTTP2_DATA_FLAG_EOF) {
            if (eof)
                *eof = 1;
            break;
        }
    }
    return total;
}

/* Parses a pulled byte stream into records: ipc payloads appended to ipc (with their count in
 * *n_ipc), the last ACK value in *ack (UINT64_MAX if none). */
static void parse_records(struct evbuffer *in, struct evbuffer *ipc, size_t *n_ipc, uint64_t *ack)
{
    size_t len = evbuffer_get_length(in);
    const uint8_t *p = evbuffer_pullup(in, -1);
    size_t off = 0;
    *n_ipc = 0;
    *ack = UINT64_MAX;
    while (off < len) {
        uint8_t type;
        const uint8_t *pl;
        size_t plen;
        long r = tg_link_rec_parse(p + off, len - off, &type, &pl, &plen);
        assert_true(r > 0); /* whole records only */
        if (type == TG_LINK_REC_IPC) {
            evbuffer_add(ipc, pl, plen);
            (*n_ipc)++;
        } else if (type == TG_LINK_REC_ACK) {
            assert_int_equal(tg_link_ack_parse(pl, plen, ack), 0);
        }
        off += (size_t)r;
    }
    evbuffer_drain(in, len);
}

static int feed(struct h *h, const uint8_t *data, size_t len) { return tg_link_channel_on_data(h->ch, data, len); }

static int feed_ack(struct h *h, uint64_t v)
{
    uint8_t rec[16], pl[10];
    size_t n = tg_link_ack_payload(pl, v);
    size_t hl = tg_link_rec_header(rec, TG_LINK_REC_ACK, n);
    memcpy(rec + hl, pl, n);
    return feed(h, rec, hl + n);
}

/* Encoded record sizes of IPC frames with these payload lengths. */
static size_t rec_size(uint32_t plen)
{
    uint8_t hdr[TG_LINK_REC_HDR_MAX];
    return tg_link_rec_header(hdr, TG_LINK_REC_IPC, 4 + (size_t)plen) + 4 + plen;
}

/* ------------------------------------------------------------ sending */

static void test_kept_until_acked(void **state)
{
    (void)state;
    struct h h;
    h_open(&h);
    static const uint32_t sizes[] = {10, 200, 0, 5000, TG_FRAME_MAX_DEFAULT};
    uint8_t *frames = malloc(5 * (4 + TG_FRAME_MAX_DEFAULT));
    assert_non_null(frames);
    size_t flen = 0;
    for (int i = 0; i < 5; i++)
        flen += make_frame(frames + flen, sizes[i], (uint8_t)i);
    write_local(&h, frames, flen);
    wait_tx_count(&h, 5);

    /* one IPC record per frame, in order, the frames byte for byte */
    struct evbuffer *out = evbuffer_new(), *ipc = evbuffer_new();
    pull(&h, out, NULL);
    size_t n_ipc;
    uint64_t ack;
    parse_records(out, ipc, &n_ipc, &ack);
    assert_int_equal(n_ipc, 5);
    assert_int_equal(ack, UINT64_MAX);
    assert_int_equal(evbuffer_get_length(ipc), flen);
    assert_memory_equal(evbuffer_pullup(ipc, -1), frames, flen);
    /* sent once: nothing goes again on the same stream */
    assert_int_equal(pull(&h, out, NULL), 0);

    /* everything is kept until acknowledged */
    size_t all = 0;
    for (int i = 0; i < 5; i++)
        all += rec_size(sizes[i]);
    assert_int_equal(evbuffer_get_length(h.ch->unacked), all);
    /* ACK 3 drops exactly the first three records */
    assert_int_equal(feed_ack(&h, 3), 0);
    assert_int_equal(h.ch->tx_acked, 3);
    assert_int_equal(evbuffer_get_length(h.ch->unacked), rec_size(sizes[3]) + rec_size(sizes[4]));
    /* a stale ACK changes nothing and is not an error */
    assert_int_equal(feed_ack(&h, 2), 0);
    assert_int_equal(h.ch->tx_acked, 3);
    assert_int_equal(evbuffer_get_length(h.ch->unacked), rec_size(sizes[3]) + rec_size(sizes[4]));
    /* the rest */
    assert_int_equal(feed_ack(&h, 5), 0);
    assert_int_equal(evbuffer_get_length(h.ch->unacked), 0);
    assert_int_equal(pull(&h, out, NULL), 0);
    /* acknowledging a record that was never sent is a protocol error */
    assert_int_equal(feed_ack(&h, 6), -1);
    evbuffer_free(out);
    evbuffer_free(ipc);
    free(frames);
    h_close(&h);
}

static void test_resend_after_resume(void **state)
{
    (void)state;
    struct h h;
    h_open(&h);
    uint8_t frames[7][300];
    size_t fl[7];
    for (int i = 0; i < 7; i++)
        fl[i] = make_frame(frames[i], (uint32_t)(50 + 30 * i), (uint8_t)(0x10 * i));
    for (int i = 0; i < 6; i++)
        write_local(&h, frames[i], fl[i]);
    wait_tx_count(&h, 6);
    struct evbuffer *out = evbuffer_new(), *ipc = evbuffer_new();
    pull(&h, out, NULL); /* all six went out on the first stream */
    evbuffer_drain(out, evbuffer_get_length(out));
    assert_int_equal(feed_ack(&h, 2), 0);

    /* the connection is lost; the local peer keeps writing meanwhile */
    tg_link_channel_unbind(h.ch);
    assert_null(h.x.ch); /* the old stream's data provider no longer reaches the channel */
    write_local(&h, frames[6], fl[6]);
    wait_tx_count(&h, 7);

    /* resumed: the peer says it got 4. Records 5, 6, 7 go again, in order, and nothing else */
    h_bind(&h, 3, 4);
    size_t n_ipc;
    uint64_t ack;
    pull(&h, out, NULL);
    parse_records(out, ipc, &n_ipc, &ack);
    assert_int_equal(n_ipc, 3);
    size_t off = 0;
    const uint8_t *got = evbuffer_pullup(ipc, -1);
    for (int i = 4; i < 7; i++) {
        assert_memory_equal(got + off, frames[i], fl[i]);
        off += fl[i];
    }
    assert_int_equal(off, evbuffer_get_length(ipc));
    /* what the peer reported is dropped from the retransmit buffer */
    assert_int_equal(h.ch->tx_acked, 4);
    assert_int_equal(h.ch->rec_count, 3);

    /* a second resume before any ACK: the same three again */
    tg_link_channel_unbind(h.ch);
    h_bind(&h, 5, 4);
    evbuffer_drain(ipc, evbuffer_get_length(ipc));
    pull(&h, out, NULL);
    parse_records(out, ipc, &n_ipc, &ack);
    assert_int_equal(n_ipc, 3);

    /* a peer claiming records that were never sent: the channel is closed */
    tg_link_channel_unbind(h.ch);
    h_bind(&h, 7, 8);
    assert_true(h_gone(&h));
    evbuffer_free(out);
    evbuffer_free(ipc);
    h_close(&h);
}

/* ------------------------------------------------------------ receiving */

struct read_wait {
    struct h *h;
    struct evbuffer *got;
    size_t want;
};
static int local_received(void *arg)
{
    struct read_wait *w = arg;
    local_read_some(w->h, w->got);
    return evbuffer_get_length(w->got) >= w->want;
}

static int ack_queued(void *arg) { return evbuffer_get_length(((struct h *)arg)->ch->ack_out) > 0; }

static void test_receive_and_ack(void **state)
{
    (void)state;
    struct h h;
    h_open(&h);
    /* 40 IPC records from the peer, delivered in DATA chunks cut at pseudo-random places */
    struct evbuffer *stream = evbuffer_new(), *want = evbuffer_new();
    for (int i = 0; i < 40; i++) {
        uint8_t f[600], hdr[TG_LINK_REC_HDR_MAX];
        size_t n = make_frame(f, (uint32_t)(i * 13 % 500), (uint8_t)i);
        evbuffer_add(stream, hdr, tg_link_rec_header(hdr, TG_LINK_REC_IPC, n));
        evbuffer_add(stream, f, n);
        evbuffer_add(want, f, n);
    }
    size_t slen = evbuffer_get_length(stream);
    const uint8_t *s = evbuffer_pullup(stream, -1);
    uint64_t seed = 7;
    size_t off = 0;
    int acked_at_32 = 0;
    while (off < slen) {
        size_t n = tg_test_rand_range(&seed, 1, 97);
        if (n > slen - off)
            n = slen - off;
        assert_int_equal(feed(&h, s + off, n), 0);
        off += n;
        if (!acked_at_32 && h.ch->rx_count >= 32) {
            /* an ACK is queued at once after 32 records, with the count at that moment */
            struct evbuffer *out = evbuffer_new(), *ipc = evbuffer_new();
            size_t n_ipc;
            uint64_t ack;
            pull(&h, out, NULL);
            parse_records(out, ipc, &n_ipc, &ack);
            assert_int_equal(n_ipc, 0);
            assert_int_equal(ack, 32);
            acked_at_32 = 1;
            evbuffer_free(out);
            evbuffer_free(ipc);
        }
    }
    assert_true(acked_at_32);
    assert_int_equal(h.ch->rx_count, 40);
    /* the local peer gets the IPC bytes exactly, in order */
    struct read_wait rw = {&h, evbuffer_new(), evbuffer_get_length(want)};
    assert_true(tg_test_run_until(g_base, local_received, &rw, WAIT_MS));
    assert_int_equal(evbuffer_get_length(rw.got), evbuffer_get_length(want));
    assert_memory_equal(evbuffer_pullup(rw.got, -1), evbuffer_pullup(want, -1), evbuffer_get_length(want));
    /* the last 8 are acknowledged once the stream goes idle */
    assert_true(tg_test_run_until(g_base, ack_queued, &h, WAIT_MS));
    struct evbuffer *out = evbuffer_new(), *ipc = evbuffer_new();
    size_t n_ipc;
    uint64_t ack;
    pull(&h, out, NULL);
    parse_records(out, ipc, &n_ipc, &ack);
    assert_int_equal(ack, 40);

    /* LINK_ACK_BYTES in a few large records: acknowledged at once, without waiting for 32
     * records, and not before */
    enum { BIG = 120000 };
    size_t n_big = LINK_ACK_BYTES / BIG + 1;
    uint8_t *big = malloc(BIG);
    assert_non_null(big);
    for (size_t i = 0; i < n_big; i++) {
        uint8_t hdr[TG_LINK_REC_HDR_MAX];
        size_t n = make_frame(big, BIG - 4, (uint8_t)i);
        assert_int_equal(feed(&h, hdr, tg_link_rec_header(hdr, TG_LINK_REC_IPC, n)), 0);
        assert_int_equal(feed(&h, big, n), 0);
        if (i + 2 == n_big) { /* one short of the mark: no ACK yet */
            pull(&h, out, NULL);
            parse_records(out, ipc, &n_ipc, &ack);
            assert_int_equal(ack, UINT64_MAX);
        }
    }
    pull(&h, out, NULL);
    parse_records(out, ipc, &n_ipc, &ack);
    assert_int_equal(ack, 40 + n_big);
    free(big);
    evbuffer_free(out);
    evbuffer_free(ipc);
    evbuffer_free(rw.got);
    evbuffer_free(stream);
    evbuffer_free(want);
    h_close(&h);
}

/* A record may span many DATA frames: an ACK queued while one is half handed out waits for its
 * end, so the peer reads whole records. An ACK also goes out when nghttp2 offers fewer bytes than
 * the ACK record has (a nearly closed window): in pieces, never stalled. */
static void test_ack_between_records(void **state)
{
    (void)state;
    struct h h;
    h_open(&h);
    uint8_t *f = malloc(100000);
    assert_non_null(f);
    size_t fl = make_frame(f, 100000 - 4, 0x33);
    write_local(&h, f, fl);
    wait_tx_count(&h, 1);
    /* nghttp2 takes 1000 bytes of the record, then the peer's 32 records make an ACK due */
    uint8_t first[1000];
    uint32_t flags = 0;
    assert_int_equal(read_data(&h, first, sizeof first, &flags), sizeof first);
    for (int i = 0; i < 32; i++) {
        uint8_t rec[32];
        size_t n = tg_link_rec_header(rec, TG_LINK_REC_IPC, 8);
        make_frame(rec + n, 4, (uint8_t)i);
        assert_int_equal(feed(&h, rec, n + 8), 0);
    }
    assert_true(evbuffer_get_length(h.ch->ack_out) > 0);
    struct evbuffer *out = evbuffer_new(), *ipc = evbuffer_new();
    evbuffer_add(out, first, sizeof first);
    pull(&h, out, NULL);
    size_t n_ipc;
    uint64_t ack;
    parse_records(out, ipc, &n_ipc, &ack); /* asserts whole, well-formed records */
    assert_int_equal(n_ipc, 1);
    assert_int_equal(ack, 32);
    assert_int_equal(evbuffer_get_length(ipc), fl);
    assert_memory_equal(evbuffer_pullup(ipc, -1), f, fl);

    /* 32 more: an ACK of 3 bytes, offered one byte at a time */
    for (int i = 0; i < 32; i++) {
        uint8_t rec[32];
        size_t n = tg_link_rec_header(rec, TG_LINK_REC_IPC, 8);
        make_frame(rec + n, 4, (uint8_t)i);
        assert_int_equal(feed(&h, rec, n + 8), 0);
    }
    uint8_t want[16], pl[10];
    size_t pn = tg_link_ack_payload(pl, 64);
    size_t wn = tg_link_rec_header(want, TG_LINK_REC_ACK, pn);
    memcpy(want + wn, pl, pn);
    wn += pn;
    for (size_t i = 0; i < wn; i++) {
        uint8_t b;
        flags = 0;
        assert_int_equal(read_data(&h, &b, 1, &flags), 1);
        assert_int_equal(b, want[i]);
    }
    assert_int_equal(read_data(&h, first, sizeof first, &flags), NGHTTP2_ERR_DEFERRED);
    evbuffer_free(out);
    evbuffer_free(ipc);
    free(f);
    h_close(&h);
}

static void test_partial_record_lost_with_stream(void **state)
{
    (void)state;
    struct h h;
    h_open(&h);
    uint8_t f[3][100], rec[3][110];
    size_t rl[3], fl[3];
    for (int i = 0; i < 3; i++) {
        fl[i] = make_frame(f[i], 60, (uint8_t)(i + 1));
        rl[i] = tg_link_rec_header(rec[i], TG_LINK_REC_IPC, fl[i]);
        memcpy(rec[i] + rl[i], f[i], fl[i]);
        rl[i] += fl[i];
    }
    assert_int_equal(feed(&h, rec[0], rl[0]), 0);
    assert_int_equal(feed(&h, rec[1], rl[1]), 0);
    assert_int_equal(feed(&h, rec[2], rl[2] / 2), 0); /* half of the third */
    assert_int_equal(h.ch->rx_count, 2);              /* a partial record is not counted */
    tg_link_channel_unbind(h.ch);                     /* the stream is gone with the half */
    assert_int_equal(h.ch->rx_count, 2);              /* what a resume reports: the peer resends #3 */
    h_bind(&h, 3, 0);
    assert_int_equal(feed(&h, rec[2], rl[2]), 0);
    assert_int_equal(h.ch->rx_count, 3);
    /* the local peer saw each frame exactly once */
    struct read_wait rw = {&h, evbuffer_new(), fl[0] + fl[1] + fl[2]};
    assert_true(tg_test_run_until(g_base, local_received, &rw, WAIT_MS));
    assert_int_equal(evbuffer_get_length(rw.got), rw.want);
    const uint8_t *g = evbuffer_pullup(rw.got, -1);
    assert_memory_equal(g, f[0], fl[0]);
    assert_memory_equal(g + fl[0], f[1], fl[1]);
    assert_memory_equal(g + fl[0] + fl[1], f[2], fl[2]);
    evbuffer_free(rw.got);
    h_close(&h);
}

static void test_protocol_errors(void **state)
{
    (void)state;
    static const uint8_t ipc_short[] = {TG_LINK_REC_IPC, 3, 1, 0, 0};   /* shorter than a frame header */
    static const uint8_t bad_type[] = {0x09, 1, 0};
    static const uint8_t ack_two[] = {TG_LINK_REC_ACK, 2, 0, 0};
    uint8_t oversize[8];
    size_t on = tg_link_rec_header(oversize, TG_LINK_REC_ATTACH, TG_LINK_REC_MAX + 1);
    const struct {
        const uint8_t *p;
        size_t n;
    } cases[] = {{ipc_short, sizeof ipc_short}, {bad_type, sizeof bad_type}, {ack_two, sizeof ack_two},
                 {oversize, on}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct h h;
        h_open(&h);
        assert_int_equal(feed(&h, cases[i].p, cases[i].n), -1);
        h_close(&h);
    }
    /* an ATTACH record is carried and skipped; it does not count as an IPC record */
    struct h h;
    h_open(&h);
    static const uint8_t attach[] = {TG_LINK_REC_ATTACH, 3, 1, 2, 3};
    assert_int_equal(feed(&h, attach, sizeof attach), 0);
    assert_int_equal(h.ch->rx_count, 0);
    h_close(&h);
}

/* LOST records (docs/link-protocol.md §6): sent only to a peer that announced them, with a key of
 * node-name characters, numbered and kept like IPC records until ACKed; received once per channel
 * (not delivered to the local peer), a second one or a bad key is a protocol error. */
static void test_lost_record(void **state)
{
    (void)state;
    struct h h;
    h_open(&h);
    assert_int_equal(tg_link_channel_send_lost(h.ch, "tracegate-link-a-1"), -1); /* the peer never said it takes them */
    h.l->have_desc = 1;
    char err[128];
    assert_int_equal(tg_node_desc_add_cap(&h.l->peer_desc, TG_LINK_CAP_LOST, err, sizeof err), 0);
    assert_int_equal(tg_link_channel_send_lost(h.ch, ""), -1);
    assert_int_equal(tg_link_channel_send_lost(h.ch, "key with\"quote"), -1);
    char longkey[TG_LINK_LOST_MAX + 2];
    memset(longkey, 'k', sizeof longkey - 1);
    longkey[sizeof longkey - 1] = 0;
    assert_int_equal(tg_link_channel_send_lost(h.ch, longkey), -1);
    /* an IPC frame, then the LOST record: both numbered, in that order */
    uint8_t f[64];
    size_t fl = make_frame(f, 20, 0x11);
    write_local(&h, f, fl);
    wait_tx_count(&h, 1);
    assert_int_equal(tg_link_channel_send_lost(h.ch, "tracegate-link-a-1f"), 0);
    assert_int_equal(h.ch->tx_count, 2);
    struct evbuffer *wire = evbuffer_new();
    pull(&h, wire, NULL);
    size_t len = evbuffer_get_length(wire);
    const uint8_t *p = evbuffer_pullup(wire, -1);
    uint8_t type;
    const uint8_t *pl;
    size_t plen;
    long r = tg_link_rec_parse(p, len, &type, &pl, &plen);
    assert_true(r > 0);
    assert_int_equal(type, TG_LINK_REC_IPC);
    long r2 = tg_link_rec_parse(p + r, len - (size_t)r, &type, &pl, &plen);
    assert_int_equal((size_t)(r + r2), len);
    assert_int_equal(type, TG_LINK_REC_LOST);
    assert_int_equal(plen, strlen("tracegate-link-a-1f"));
    assert_memory_equal(pl, "tracegate-link-a-1f", plen);
    evbuffer_free(wire);
    /* kept until an ACK covers both */
    assert_int_equal(feed_ack(&h, 1), 0);
    assert_true(evbuffer_get_length(h.ch->unacked) > 0);
    assert_int_equal(feed_ack(&h, 2), 0);
    assert_int_equal(evbuffer_get_length(h.ch->unacked), 0);

    /* from the peer: counted, nothing reaches the local peer */
    uint8_t rec[TG_LINK_REC_HDR_MAX + TG_LINK_LOST_MAX];
    const char *key = "tracegate-link-b-2";
    size_t hl = tg_link_rec_header(rec, TG_LINK_REC_LOST, strlen(key));
    memcpy(rec + hl, key, strlen(key));
    assert_int_equal(feed(&h, rec, hl + strlen(key)), 0);
    assert_int_equal(h.ch->rx_count, 1);
    event_base_loop(g_base, EVLOOP_NONBLOCK);
    struct evbuffer *got = evbuffer_new();
    local_read_some(&h, got);
    assert_int_equal(evbuffer_get_length(got), 0);
    evbuffer_free(got);
    assert_int_equal(feed(&h, rec, hl + strlen(key)), -1); /* a second one */
    h_close(&h);

    h_open(&h);
    static const uint8_t bad_key[] = {TG_LINK_REC_LOST, 3, 'a', ' ', 'b'};
    assert_int_equal(feed(&h, bad_key, sizeof bad_key), -1);
    h_close(&h);
}

/* ------------------------------------------------------------ limits */

static int read_stopped(void *arg)
{
    struct h *h = arg;
    return !(bufferevent_get_enabled(h->ch->local) & EV_READ);
}

/* Fills the 8 MiB retransmit buffer with 128 records of 64 KiB frames; the channel stops reading.
 * `tail` (tail_len bytes) is written together with the last frame, so the channel has read it
 * into its input before it stops. */
static void fill_buffer(struct h *h, const uint8_t *tail, size_t tail_len)
{
    const uint32_t plen = 65536 - 4;
    uint8_t *f = malloc(65536 + 64);
    assert_non_null(f);
    size_t fl = make_frame(f, plen, 0x42);
    uint64_t k = (LINK_CHANNEL_BUFFER + rec_size(plen) - 1) / rec_size(plen);
    assert_int_equal(k, 128);
    for (uint64_t i = 0; i < k - 1; i++)
        write_local(h, f, fl);
    wait_tx_count(h, k - 1);
    assert_true(tail_len <= 64);
    if (tail_len)
        memcpy(f + fl, tail, tail_len);
    write_local(h, f, fl + tail_len);
    wait_tx_count(h, k);
    assert_true(tg_test_run_until(g_base, read_stopped, h, WAIT_MS));
    assert_true(evbuffer_get_length(h->ch->unacked) >= LINK_CHANNEL_BUFFER);
    free(f);
}

static void test_backpressure(void **state)
{
    (void)state;
    struct h h;
    h_open(&h);
    /* one more frame waits on the local side: not taken while the buffer is full */
    uint8_t f[64];
    size_t fl = make_frame(f, 20, 9);
    fill_buffer(&h, f, fl);
    tg_test_run_until(g_base, NULL, NULL, 50); /* shows something does NOT happen */
    assert_int_equal(h.ch->tx_count, 128);
    /* an ACK makes room: the waiting frame becomes record 129 */
    assert_int_equal(feed_ack(&h, 1), 0);
    wait_tx_count(&h, 129);
    h_close(&h);
}

/* A gateway writing faster than the peer acknowledges: what the channel takes from its local side
 * stays bounded (records up to the 8 MiB buffer, its input under 1 MiB plus what the writer had
 * queued) and the rest stays queued on the writer's side, where the gateway's congestion control
 * sees it: the writer here, as a tg_conn does, writes only while its queue is under its mark. A
 * bufferevent pair would otherwise move everything its partner queued at each read. */
#define WRITER_HIGH (2u << 20)
/* One loop turn of a gateway forwarding what its other side delivered: frames while its queue is
 * under its mark, at most `burst` bytes, without running the loop in between. */
static size_t write_turn(struct h *h, const uint8_t *f, size_t fl, size_t burst)
{
    size_t sent = 0;
    struct evbuffer *q = bufferevent_get_output(h->peer);
    while (sent < burst && evbuffer_get_length(q) < WRITER_HIGH) {
        evbuffer_add(q, f, fl);
        sent += fl;
    }
    event_base_loop(g_base, EVLOOP_NONBLOCK);
    return sent;
}

static void test_local_side_bounded(void **state)
{
    (void)state;
    if (!g_pair) {
        skip(); /* a socket's writer blocks at the kernel's buffer: test_backpressure covers it */
        return;
    }
    struct h h;
    h_open(&h);
    static uint8_t f[4 + 65536];
    size_t fl = make_frame(f, 65536, 3);
    const size_t bound_in = (1u << 20) + WRITER_HIGH + (512u << 10) + fl;
    size_t sent = 0;
    for (int i = 0; i < 64; i++)
        sent += write_turn(&h, f, fl, 512u << 10);
    assert_true(sent < (32u << 20)); /* the writer met congestion: its queue stayed full */
    assert_true(evbuffer_get_length(bufferevent_get_output(h.peer)) >= WRITER_HIGH);
    assert_true(evbuffer_get_length(h.ch->unacked) <= LINK_CHANNEL_BUFFER + fl);
    assert_true(evbuffer_get_length(bufferevent_get_input(h.ch->local)) <= bound_in);
    /* the peer acknowledges one record at a time (more often than it does) while the writer keeps
     * forwarding bursts bigger than that: the input must not grow by the difference */
    for (int round = 0; round < 64; round++) {
        assert_int_equal(feed_ack(&h, h.ch->tx_acked + 1), 0);
        write_turn(&h, f, fl, 512u << 10);
        write_turn(&h, f, fl, 512u << 10);
        assert_true(evbuffer_get_length(bufferevent_get_input(h.ch->local)) <= bound_in);
        assert_true(evbuffer_get_length(h.ch->unacked) <= LINK_CHANNEL_BUFFER + fl);
    }
    assert_true(h.ch->tx_count > 128); /* records kept moving */
    h_close(&h);
}

static void test_local_frame_too_big(void **state)
{
    (void)state;
    struct h h;
    h_open(&h);
    uint8_t hdr[4];
    make_frame(hdr, 0, 0);
    uint32_t n = TG_FRAME_MAX_DEFAULT + 1;
    hdr[0] = (uint8_t)n;
    hdr[1] = (uint8_t)(n >> 8);
    hdr[2] = (uint8_t)(n >> 16);
    hdr[3] = (uint8_t)(n >> 24);
    write_local(&h, hdr, 4);
    assert_true(tg_test_run_until(g_base, gone_cb, &h, WAIT_MS));
    h_close(&h);
}

/* The oversized frame header arrives while the buffer is full; the ACK that makes room comes in
 * the middle of the peer's DATA (an ACK record followed by an IPC record). The channel closes
 * cleanly: nothing touches it after it is gone. */
static void test_bad_frame_found_after_ack(void **state)
{
    (void)state;
    struct h h;
    h_open(&h);
    fill_buffer(&h, NULL, 0);
    /* the header is already in the channel's input (read before the channel stopped reading;
     * put there directly: how the kernel splits a socket's reads is not ours to decide) */
    uint8_t hdr[4] = {0xff, 0xff, 0xff, 0x00}; /* 16 MiB */
    struct evbuffer *in = bufferevent_get_input(h.ch->local);
    evbuffer_unfreeze(in, 0); /* a bufferevent's input only takes bytes from its socket */
    assert_int_equal(evbuffer_add(in, hdr, 4), 0);
    evbuffer_freeze(in, 0);
    uint8_t data[64], pl[10], f[32];
    size_t n = tg_link_ack_payload(pl, 128);
    size_t off = tg_link_rec_header(data, TG_LINK_REC_ACK, n);
    memcpy(data + off, pl, n);
    off += n;
    size_t fl = make_frame(f, 8, 1);
    off += tg_link_rec_header(data + off, TG_LINK_REC_IPC, fl);
    memcpy(data + off, f, fl);
    off += fl;
    int r = feed(&h, data, off);
    assert_int_equal(r, 0); /* the ACK and the IPC record are fine; the local side is what fails */
    assert_true(tg_test_run_until(g_base, gone_cb, &h, WAIT_MS));
    h_close(&h);
}

/* ------------------------------------------------------------ ends */

static int eof_seen(void *arg)
{
    struct read_wait *w = arg;
    return local_read_some(w->h, w->got);
}

static int local_eof_noted(void *arg) { return ((struct h *)arg)->ch->local_eof; }

static void test_end_of_stream(void **state)
{
    (void)state;
    struct h h;
    h_open(&h);
    uint8_t f[2][64];
    size_t fl[2];
    for (int i = 0; i < 2; i++) {
        fl[i] = make_frame(f[i], 30, (uint8_t)i);
        write_local(&h, f[i], fl[i]);
    }
    local_shutdown(&h); /* the local peer is done writing */
    wait_tx_count(&h, 2);
    assert_true(tg_test_run_until(g_base, local_eof_noted, &h, WAIT_MS));
    struct evbuffer *out = evbuffer_new(), *ipc = evbuffer_new();
    int eof = 0;
    pull(&h, out, &eof);
    assert_true(eof); /* END_STREAM after the last record */
    size_t n_ipc;
    uint64_t ack;
    parse_records(out, ipc, &n_ipc, &ack);
    assert_int_equal(n_ipc, 2);
    eof = 0;
    assert_int_equal(pull(&h, out, &eof), 0);
    assert_false(eof); /* once */

    /* the peer's END_STREAM: its bytes first, then the local peer reads EOF */
    uint8_t rec[80];
    size_t rl = tg_link_rec_header(rec, TG_LINK_REC_IPC, fl[0]);
    memcpy(rec + rl, f[0], fl[0]);
    assert_int_equal(feed(&h, rec, rl + fl[0]), 0);
    tg_link_channel_on_peer_eof(h.ch);
    struct read_wait rw = {&h, evbuffer_new(), 0};
    assert_true(tg_test_run_until(g_base, eof_seen, &rw, WAIT_MS));
    assert_int_equal(evbuffer_get_length(rw.got), fl[0]);
    evbuffer_free(rw.got);
    evbuffer_free(out);
    evbuffer_free(ipc);
    h_close(&h);
}

static int local_gone_noted(void *arg) { return ((struct h *)arg)->ch->local_gone; }

/* The local peer closes its socket while the peer streams to it (a consumer leaving in the middle
 * of ReadBuffers): the records it can no longer receive must not hold HTTP/2 window (a dozen such
 * channels used to stall every channel of the link), and the channel must end although no
 * END_STREAM will come (we cannot ACK after ours, so the peer stops at its 8 MiB buffer). */
static void test_local_peer_gone(void **state)
{
    (void)state;
    struct h h;
    h_open(&h);
    uint8_t req[64];
    size_t rql = make_frame(req, 20, 0x42);
    write_local(&h, req, rql); /* one request, still unacknowledged */
    wait_tx_count(&h, 1);
    struct evbuffer *out = evbuffer_new();
    pull(&h, out, NULL);

    uint8_t rec[1100];
    uint8_t f[1000];
    size_t fl = make_frame(f, 900, 0x11);
    size_t hl = tg_link_rec_header(rec, TG_LINK_REC_IPC, fl);
    memcpy(rec + hl, f, fl);
    for (int i = 0; i < 4; i++) /* replies the local peer will never read */
        assert_int_equal(feed(&h, rec, hl + fl), 0);
    local_gone(&h);
    for (int i = 0; i < 4; i++) /* more keep coming: writing them fails */
        assert_int_equal(feed(&h, rec, hl + fl), 0);
    assert_true(tg_test_run_until(g_base, local_gone_noted, &h, WAIT_MS));

    /* from now on records are counted (and acknowledged) but dropped: no window is held */
    size_t unconsumed = h.ch->unconsumed;
    size_t queued = evbuffer_get_length(bufferevent_get_output(h.ch->local));
    uint64_t rx = h.ch->rx_count;
    for (int i = 0; i < 20; i++)
        assert_int_equal(feed(&h, rec, hl + fl), 0);
    assert_int_equal(h.ch->unconsumed, unconsumed);
    assert_int_equal(h.ch->rx_count, rx + 20);
    assert_int_equal(evbuffer_get_length(bufferevent_get_output(h.ch->local)), queued);

    /* our request is not acknowledged yet: the channel waits for it */
    tg_test_run_until(g_base, NULL, NULL, 50);
    assert_false(h_gone(&h));
    /* the peer has it: nothing is left to do either way, the channel resets */
    assert_int_equal(feed_ack(&h, 1), 0);
    assert_true(tg_test_run_until(g_base, gone_cb, &h, WAIT_MS));
    evbuffer_free(out);
    h_close(&h);
}

/* Opens h for a no-copy case; 0 (the case skipped) in the groups without no-copy DATA. */
static int nocopy_open(struct h *h)
{
    if (!g_nocopy) {
        skip();
        return 0;
    }
    h_open(h);
    return 1;
}

/* No-copy: the peer acknowledges records whose bytes nghttp2 noted but has not written: the write
 * refuses (its caller resets the stream) rather than copying from drained records. */
static void test_nocopy_ack_of_unsent(void **state)
{
    (void)state;
    struct h h;
    if (!nocopy_open(&h))
        return;
    uint8_t f[2][300];
    for (int i = 0; i < 2; i++)
        write_local(&h, f[i], make_frame(f[i], 290, (uint8_t)i));
    wait_tx_count(&h, 2);
    nghttp2_data_source src = {.ptr = &h.x};
    uint8_t buf[4096];
    uint32_t flags = 0;
    ssize_t r = tg_link_channel_read_cb(NULL, 1, buf, sizeof buf, &flags, &src, NULL);
    assert_true(r > 0 && (flags & NGHTTP2_DATA_FLAG_NO_COPY));
    assert_int_equal(feed_ack(&h, 2), 0); /* a lie: nothing was written yet */
    struct evbuffer *out = evbuffer_new();
    static const uint8_t hd[9] = {0};
    assert_int_equal(tg_link_channel_send_data(&h.x, hd, (size_t)r, out), -1);
    assert_int_equal(evbuffer_get_length(out), 0); /* nothing half written */
    /* and a length other than what was noted is refused too */
    h.x.nc_n = 0;
    assert_int_equal(tg_link_channel_send_data(&h.x, hd, 1, out), -1);
    evbuffer_free(out);
    h_close(&h);
}

/* No-copy, large records: a DATA frame holds each whole record of 16 KiB or more by reference (its
 * first bytes copied beside the frame header), a
 * frame ends at a record's end rather than cutting a large record it could not hold whole, and
 * the frames' bytes stay intact after the peer acknowledged the records and the channel is gone
 * (the transport may still be writing them). */
static void test_nocopy_large_by_reference(void **state)
{
    (void)state;
    struct h h;
    if (!nocopy_open(&h))
        return;
    enum { N = 3, P = 60000 };
    uint8_t *f = malloc(N * (4 + P));
    assert_non_null(f);
    size_t fl = 0;
    for (int i = 0; i < N; i++)
        fl += make_frame(f + fl, P, (uint8_t)(0x40 + i));
    write_local(&h, f, fl);
    wait_tx_count(&h, N);
    nghttp2_data_source src = {.ptr = &h.x};
    static uint8_t buf[256 << 10];
    static const uint8_t hd[9] = {0};
    struct evbuffer *wire = evbuffer_new();
    /* room for one and a half records: one whole record, by reference */
    uint32_t flags = 0;
    ssize_t r1 = tg_link_channel_read_cb(NULL, 1, buf, rec_size(P) * 3 / 2, &flags, &src, NULL);
    assert_int_equal(r1, (ssize_t)rec_size(P));
    assert_int_equal(h.x.nc_n, 1);
    assert_true(h.x.nc[0].by_ref);
    assert_int_equal(tg_link_channel_send_data(&h.x, hd, (size_t)r1, wire), 0);
    /* the frame header, the record's header and its first bytes share one piece (TLS writes one
     * record per piece: no records of a few bytes) */
    struct evbuffer_iovec first;
    assert_true(evbuffer_peek(wire, -1, NULL, &first, 1) >= 1);
    assert_true(first.iov_len >= 9 + LINK_REC_HEAD_COPY);
    /* room for the rest: both, each by reference */
    flags = 0;
    ssize_t r2 = tg_link_channel_read_cb(NULL, 1, buf, sizeof buf, &flags, &src, NULL);
    assert_int_equal(r2, (ssize_t)(2 * rec_size(P)));
    assert_int_equal(h.x.nc_n, 2);
    assert_true(h.x.nc[0].by_ref && h.x.nc[1].by_ref);
    assert_int_equal(tg_link_channel_send_data(&h.x, hd, (size_t)r2, wire), 0);
    /* acknowledged and gone while the frames wait in the transport's output */
    assert_int_equal(feed_ack(&h, N), 0);
    assert_int_equal(evbuffer_get_length(h.ch->unacked), 0);
    h_close(&h);
    assert_int_equal(evbuffer_get_length(wire), 18 + (size_t)r1 + (size_t)r2);
    struct evbuffer *recs = evbuffer_new(), *ipc = evbuffer_new();
    evbuffer_drain(wire, 9);
    evbuffer_remove_buffer(wire, recs, (size_t)r1);
    evbuffer_drain(wire, 9);
    evbuffer_remove_buffer(wire, recs, (size_t)r2);
    size_t n_ipc;
    uint64_t ack;
    parse_records(recs, ipc, &n_ipc, &ack);
    assert_int_equal(n_ipc, N);
    assert_int_equal(evbuffer_get_length(ipc), fl);
    assert_memory_equal(evbuffer_pullup(ipc, -1), f, fl);
    evbuffer_free(recs);
    evbuffer_free(ipc);
    evbuffer_free(wire);
    free(f);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN); /* as in tracegated: a closed local socket is an error, not a signal */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kept_until_acked),
        cmocka_unit_test(test_resend_after_resume),
        cmocka_unit_test(test_receive_and_ack),
        cmocka_unit_test(test_ack_between_records),
        cmocka_unit_test(test_partial_record_lost_with_stream),
        cmocka_unit_test(test_protocol_errors),
        cmocka_unit_test(test_lost_record),
        cmocka_unit_test(test_backpressure),
        cmocka_unit_test(test_local_side_bounded),
        cmocka_unit_test(test_local_frame_too_big),
        cmocka_unit_test(test_bad_frame_found_after_ack),
        cmocka_unit_test(test_end_of_stream),
        cmocka_unit_test(test_local_peer_gone),
        cmocka_unit_test(test_nocopy_ack_of_unsent),
        cmocka_unit_test(test_nocopy_large_by_reference),
    };
    int failed = cmocka_run_group_tests_name("socketpair", tests, setup, teardown);
    g_pair = 1;
    failed += cmocka_run_group_tests_name("bufferevent pair", tests, setup, teardown);
    g_nocopy = 1;
    failed += cmocka_run_group_tests_name("bufferevent pair, no-copy DATA", tests, setup, teardown);
    return failed;
}
