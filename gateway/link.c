/* link.c: one gateway link: the HTTP/2 connection (nghttp2 on the event loop), the control
 * and channel streams' requests and responses, PING keepalive, and resumption
 * (docs/link-protocol.md). The control stream's messages are link_control.c's, clock sync
 * link_clock.c's. */
#include "link_int.h"

#include "config.h"

#include <event2/buffer.h>
#include <event2/event.h>
#include <inttypes.h>
#include <openssl/crypto.h>
#include <openssl/rand.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "link_wire.h"
#include "net/tls.h"
#include "tracegate/clock.h"
#include "tracegate/log.h"
#include "tracegate_link.pb-c.h"
#include "base/hex.h"

#define LOG "link"
#define OUT_HIGH (1u << 20) /* transport output above which we stop producing HTTP/2 frames */

static void ctx_free(struct link_conn *c, struct stream_ctx *x);
static void link_down(struct tg_link *l, const char *why);

static uint64_t now_us(void) { return tg_mono_us(); }

/* ------------------------------------------------------------ output */

void tg_link_conn_flush(struct link_conn *c)
{
    if (!c || !c->h2 || c->dead)
        return;
    /* nghttp2 must not be re-entered from its own callbacks (mem_send inside mem_recv or
     * mem_send): what they submit goes out when the outermost call flushes (tr_read ends with a
     * flush, and this loop runs until nghttp2 has nothing more) */
    if (c->in_callback)
        return;
    struct evbuffer *out = tg_link_tr_output(c->tr);
    c->in_callback = 1;
    while (evbuffer_get_length(out) < OUT_HIGH) {
        const uint8_t *data;
        ssize_t n = nghttp2_session_mem_send(c->h2, &data);
        if (n < 0) {
            c->in_callback = 0;
            tg_link_conn_lost(c, nghttp2_strerror((int)n));
            return;
        }
        if (n == 0)
            break;
        evbuffer_add(out, data, (size_t)n);
        if (c->link)
            c->link->bytes_out += (uint64_t)n;
    }
    c->in_callback = 0;
    if (c->dead)
        return;
    if (!nghttp2_session_want_read(c->h2) && !nghttp2_session_want_write(c->h2) && evbuffer_get_length(out) == 0)
        tg_link_conn_lost(c, c->goaway[0] ? c->goaway : "the HTTP/2 session ended");
}

/* ------------------------------------------------------------ links: state */

static void ping_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct tg_link *l = arg;
    const struct tg_fleet_config *cfg = tg_fleet_config_of(l->fleet);
    uint32_t iv = cfg->ping_interval_ms ? cfg->ping_interval_ms : 5000;
    if (!l->conn || !l->conn->h2)
        return;
    if (l->ping_outstanding && now_us() - l->ping_sent_us > 3ull * iv * 1000u) {
        tg_link_conn_lost(l->conn, "no PING answer");
        return;
    }
    if (!l->ping_outstanding) {
        l->ping_sent_us = now_us();
        l->ping_outstanding = 1;
        nghttp2_submit_ping(l->conn->h2, NGHTTP2_FLAG_NONE, NULL);
        tg_link_conn_flush(l->conn);
    }
    struct timeval tv = {iv / 1000, (iv % 1000) * 1000};
    evtimer_add(l->ping_ev, &tv);
}

static void link_up(struct tg_link *l, struct link_conn *c, int resumed)
{
    if (l->dialing == c)
        l->dialing = NULL;
    l->conn = c;
    c->link = l;
    l->state = LINK_UP;
    l->up_since_us = now_us();
    l->backoff_ms = 0;
    l->ping_outstanding = 0;
    l->clock_phase = 0;
    if (resumed)
        l->resumes++;
    /* the acceptor names the credential it checked; the dialer, how it verified the acceptor */
    const char *who = l->principal[0]            ? l->principal
                      : c->tinfo.stdio           ? "over ssh"
                      : c->tinfo.cert_verified ? "server certificate verified"
                                                 : "h2c on loopback";
    tg_info(LOG, "link %s %s (%s, %s, link %s)", l->peer_name, resumed ? "resumed" : "up", c->tinfo.peer, who,
            l->id_hex);
    struct timeval now = {0, 0};
    evtimer_add(l->ping_ev, &now);
    event_active(l->clock_ev, EV_TIMEOUT, 0);
    if (l->window_ev)
        event_del(l->window_ev);
    tg_link_send_hello(c);
    /* channels waiting for this connection */
    for (struct link_channel *ch = l->channels, *next; ch; ch = next) {
        next = ch->next;
        if (ch->finished || ch->sid >= 0)
            continue;
        if (c->dialer)
            tg_link_submit_channel(l, ch);
        else if (!ch->inbound && !ch->ever_bound)
            tg_link_send_open(l, ch); /* a reverse open the dialer never saw */
    }
    tg_fleet_link_state_changed(l->fleet, l);
    tg_link_conn_flush(c);
}

/* The link is gone for good (past the resume window, or the peer no longer knows it): every
 * channel closes. A consumer channel we accepted gets its tracing session Detached here under a
 * known key (it keeps running); for one we opened, the far node does the same, and a federated
 * session's fan-out is told so it can Attach again when the link is back (§6, §8). */
static void expire_channels(struct tg_link *l, const char *why)
{
    while (l->channels) {
        struct link_channel *ch = l->channels;
        if (ch->inbound)
            tg_fleet_detach_channel(l->fleet, l, ch); /* a tracing session it owned here keeps running */
        else if (ch->producer == LINK_KIND_CONSUMER)
            tg_fleet_channel_lost(l->fleet, l, ch);
        tg_link_channel_abort(ch, why);
    }
}

static void window_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct tg_link *l = arg;
    if (l->state != LINK_DOWN)
        return;
    tg_warn(LOG, "link %s: not back within the resume window; its channels close", l->peer_name);
    expire_channels(l, "the link did not come back within the resume window");
    l->has_id = 0;
    if (!l->dialer) {
        tg_fleet_remove_link(l->fleet, l);
        tg_link_free(l);
    }
}

static void redial_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    tg_link_start_dial(arg);
}

void tg_link_schedule_redial(struct tg_link *l)
{
    if (!l->dialer || l->state == LINK_CLOSED)
        return;
    l->backoff_ms = l->backoff_ms ? l->backoff_ms * 2 : 100;
    if (l->backoff_ms > 10000)
        l->backoff_ms = 10000;
    uint32_t r;
    RAND_bytes((unsigned char *)&r, sizeof r);
    /* ±25% jitter */
    uint32_t ms = l->backoff_ms * 3 / 4 + r % (l->backoff_ms / 2 + 1);
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    evtimer_add(l->redial_ev, &tv);
}

static void link_down(struct tg_link *l, const char *why)
{
    if (l->state == LINK_CLOSED)
        return;
    int was_up = l->state == LINK_UP;
    l->conn = NULL;
    for (struct link_channel *ch = l->channels; ch; ch = ch->next)
        tg_link_channel_unbind(ch);
    event_del(l->ping_ev);
    event_del(l->clock_ev);
    snprintf(l->last_error, sizeof l->last_error, "%s", why);
    if (was_up) {
        l->state = LINK_DOWN;
        l->down_since_us = now_us();
        const struct tg_fleet_config *cfg = tg_fleet_config_of(l->fleet);
        uint32_t w = cfg->resume_window_ms;
        tg_warn(LOG, "link %s down (%s); keeping %zu channel(s) for %u ms", l->peer_name, why, l->n_channels, w);
        struct timeval tv = {w / 1000, (w % 1000) * 1000};
        evtimer_add(l->window_ev, &tv);
        tg_fleet_link_state_changed(l->fleet, l);
    } else if (l->state == LINK_CONNECTING) {
        tg_info(LOG, "link %s: %s", l->peer_name[0] ? l->peer_name : "(dialing)", why);
    }
    tg_link_schedule_redial(l);
}

/* ------------------------------------------------------------ connections */

static void conn_free_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    tg_link_conn_free(arg);
}

void tg_link_conn_lost(struct link_conn *c, const char *why)
{
    if (c->dead)
        return;
    c->dead = 1;
    struct tg_link *l = c->link;
    if (l && l->conn == c) {
        link_down(l, why);
    } else if (l && l->dialing == c) {
        l->dialing = NULL;
        snprintf(l->last_error, sizeof l->last_error, "%s", why);
        tg_info(LOG, "link to %s: %s", l->peer_name[0] ? l->peer_name : c->tr ? tg_link_tr_peer(c->tr) : "?", why);
        tg_link_schedule_redial(l);
    } else if (!l) {
        /* before the transport was up, only the accept knows who it was */
        tg_info(LOG, "link connection from %s closed: %s", c->tinfo.peer[0] ? c->tinfo.peer : c->ainfo.source, why);
    }
    /* free from the loop: we may be inside nghttp2 or a transport callback */
    if (c->hello_ev)
        event_del(c->hello_ev);
    c->free_ev = evtimer_new(tg_fleet_base(c->fleet), conn_free_cb, c);
    if (c->free_ev)
        event_active(c->free_ev, EV_TIMEOUT, 0);
}

void tg_link_conn_free(struct link_conn *c)
{
    if (!c)
        return;
    if (c->link && c->link->conn == c)
        c->link->conn = NULL;
    if (c->link && c->link->dialing == c)
        c->link->dialing = NULL;
    tg_fleet_conn_gone(c->fleet, c);
    if (c->h2)
        nghttp2_session_del(c->h2);
    if (c->tr)
        tg_link_tr_free(c->tr);
    if (c->ctl_tx)
        evbuffer_free(c->ctl_tx);
    if (c->ctl_rx)
        evbuffer_free(c->ctl_rx);
    if (c->hello_ev)
        event_free(c->hello_ev);
    if (c->free_ev)
        event_free(c->free_ev);
    if (c->ctl_ev)
        event_free(c->ctl_ev);
    while (c->streams)
        ctx_free(c, c->streams);
    free(c);
}

/* nghttp2 callbacks (user_data = the conn) */

static struct stream_ctx *ctx_new(struct link_conn *c, int kind)
{
    struct stream_ctx *x = calloc(1, sizeof *x);
    if (!x)
        return NULL;
    x->kind = kind;
    x->next = c->streams;
    if (x->next)
        x->next->prev = x;
    c->streams = x;
    return x;
}

static void ctx_free(struct link_conn *c, struct stream_ctx *x)
{
    if (x->prev)
        x->prev->next = x->next;
    else
        c->streams = x->next;
    if (x->next)
        x->next->prev = x->prev;
    if (x->ch && x->ch->ctx == x)
        x->ch->ctx = NULL;
    free(x);
}

static int on_begin_headers(nghttp2_session *s, const nghttp2_frame *f, void *user)
{
    struct link_conn *c = user;
    if (f->hd.type != NGHTTP2_HEADERS || c->dialer || f->headers.cat != NGHTTP2_HCAT_REQUEST)
        return 0;
    struct stream_ctx *x = ctx_new(c, STREAM_UNKNOWN);
    if (!x)
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    nghttp2_session_set_stream_user_data(s, f->hd.stream_id, x);
    return 0;
}

static void copy_hdr(struct stream_ctx *x, char *dst, size_t cap, const uint8_t *v, size_t vl)
{
    if (dst[0] || vl >= cap) {
        x->bad = 1; /* repeated or too long */
        return;
    }
    memcpy(dst, v, vl);
    dst[vl] = '\0';
}

static int on_header(nghttp2_session *s, const nghttp2_frame *f, const uint8_t *name, size_t nl, const uint8_t *v,
                     size_t vl, uint8_t flags, void *user)
{
    (void)flags;
    (void)user;
    struct stream_ctx *x = nghttp2_session_get_stream_user_data(s, f->hd.stream_id);
    if (!x)
        return 0;
    x->header_bytes += nl + vl + 32;
    if (x->header_bytes > LINK_MAX_HEADER_LIST)
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE; /* the stream is reset; the link stays */
#define IS(n) (nl == sizeof(n) - 1 && memcmp(name, n, nl) == 0)
    if (IS(":method"))
        copy_hdr(x, x->method, sizeof x->method, v, vl);
    else if (IS(":protocol"))
        copy_hdr(x, x->protocol, sizeof x->protocol, v, vl);
    else if (IS(":path"))
        copy_hdr(x, x->path, sizeof x->path, v, vl);
    else if (IS(":status")) {
        char st[8] = "";
        copy_hdr(x, st, sizeof st, v, vl);
        x->status = atoi(st);
    } else if (IS("tracegate-channel"))
        copy_hdr(x, x->channel, sizeof x->channel, v, vl);
    else if (IS("tracegate-received"))
        copy_hdr(x, x->received, sizeof x->received, v, vl);
    else if (IS("tracegate-link-id"))
        copy_hdr(x, x->link_id, sizeof x->link_id, v, vl);
    else if (IS("tracegate-link-resumed"))
        copy_hdr(x, x->resumed, sizeof x->resumed, v, vl);
    else if (IS("tracegate-node"))
        copy_hdr(x, x->node, sizeof x->node, v, vl);
    else if (IS("tracegate-principal"))
        copy_hdr(x, x->principal, sizeof x->principal, v, vl);
    else if (IS("traceparent"))
        copy_hdr(x, x->traceparent, sizeof x->traceparent, v, vl);
    else if (IS("tracegate-error"))
        copy_hdr(x, x->error, sizeof x->error, v, vl);
    else if (IS("tracegate-hops"))
        copy_hdr(x, x->hops, sizeof x->hops, v, vl);
    else if (IS("authorization"))
        copy_hdr(x, x->authorization, sizeof x->authorization, v, vl);
#undef IS
    return 0;
}

static void respond(struct link_conn *c, int32_t sid, int status, const char *error, nghttp2_nv *extra, size_t n_extra,
                    const nghttp2_data_provider *prd)
{
    char st[8];
    snprintf(st, sizeof st, "%d", status);
    nghttp2_nv nv[8];
    size_t n = 0;
#define NV(k, v) nv[n++] = (nghttp2_nv){(uint8_t *)(k), (uint8_t *)(v), sizeof(k) - 1, strlen(v), NGHTTP2_NV_FLAG_NONE}
    NV(":status", st);
    if (error)
        NV("tracegate-error", error);
#undef NV
    for (size_t i = 0; i < n_extra && n < 8; i++)
        nv[n++] = extra[i];
    nghttp2_submit_response(c->h2, sid, nv, n, prd);
}

/* A peer can have streams refused at will (before authentication too: each channel stream gets
 * 421 until the hello, thousands a second): sampled with the gateway's other refusals. */
static void refuse(struct link_conn *c, int32_t sid, int status, const char *why)
{
    tg_gw_log_refusal(tg_fleet_gw(c->fleet), TG_LOG_INFO, LOG, "link %s: refused a stream (%d): %s",
                      c->link ? c->link->peer_name : c->tinfo.peer, status, why);
    respond(c, sid, status, why, NULL, 0, NULL);
}

static void accept_control(struct link_conn *c, int32_t sid, struct stream_ctx *x)
{
    struct tg_fleet *f = c->fleet;
    if (c->link || c->ctl_sid >= 0) {
        refuse(c, sid, 400, "a second control stream");
        return;
    }
    if (!tg_link_node_name_ok(x->node)) {
        refuse(c, sid, 400, "missing or bad tracegate-node");
        return;
    }
    if (!strcmp(x->node, tg_fleet_node_name(f))) {
        refuse(c, sid, 409, "that is this node's own name");
        return;
    }
    char principal[160];
    int status = 401;
    const char *why = "";
    unsigned roles = tg_fleet_auth_link(f, c, x->authorization, x->node, principal, sizeof principal, &status, &why);
    if (!roles) {
        refuse(c, sid, status, why);
        return;
    }
    struct tg_link *l = NULL;
    int resumed = 0;
    uint8_t id[16];
    if (x->link_id[0] && tg_hex_decode(id, sizeof id, x->link_id) == 0) {
        l = tg_fleet_link_by_id(f, id);
        if (l && (strcmp(l->peer_name, x->node) != 0 || strcmp(l->principal, principal) != 0 || l->dialer))
            l = NULL; /* not the same peer: a new link */
        if (l)
            resumed = 1;
    }
    struct tg_link *dup = tg_fleet_link_by_name(f, x->node, l);
    if (dup) {
        refuse(c, sid, 409, "a node with this name is already linked");
        tg_warn(LOG, "refused a second link named \"%s\" from %s (%s): the name is taken", x->node, c->tinfo.peer,
                principal);
        return;
    }
    if (!l) {
        l = calloc(1, sizeof *l);
        if (!l) {
            refuse(c, sid, 503, "out of memory");
            return;
        }
        l->fleet = f;
        l->dialer = 0;
        l->next_cid = 2;
        RAND_bytes(l->id, sizeof l->id);
        tg_hex_encode(l->id_hex, l->id, sizeof l->id);
        l->has_id = 1;
        snprintf(l->peer_name, sizeof l->peer_name, "%s", x->node);
        snprintf(l->principal, sizeof l->principal, "%s", principal);
        l->ping_ev = evtimer_new(tg_fleet_base(f), ping_cb, l);
        l->window_ev = evtimer_new(tg_fleet_base(f), window_cb, l);
        l->clock_ev = evtimer_new(tg_fleet_base(f), tg_link_clock_cb, l);
        l->machine_id = tg_fleet_machine_id(f, x->node);
        if (!l->ping_ev || !l->window_ev || !l->clock_ev) {
            tg_link_free(l);
            refuse(c, sid, 503, "out of memory");
            return;
        }
        tg_fleet_add_link(f, l);
    } else if (l->conn && l->conn != c) {
        /* the old connection still looks alive (a path that died silently): take over */
        struct link_conn *old = l->conn;
        l->conn = NULL;
        old->link = NULL;
        tg_link_conn_lost(old, "replaced by a resumed connection");
    }
    l->roles = roles;
    c->ctl_sid = sid;
    x->kind = STREAM_CONTROL;
    if (c->hello_ev)
        event_del(c->hello_ev);
    nghttp2_nv extra[3];
    size_t ne = 0;
    const char *me = tg_fleet_node_name(f);
    extra[ne++] = (nghttp2_nv){(uint8_t *)"tracegate-node", (uint8_t *)me, 14, strlen(me), NGHTTP2_NV_FLAG_NONE};
    extra[ne++] = (nghttp2_nv){(uint8_t *)"tracegate-link-id", (uint8_t *)l->id_hex, 17, strlen(l->id_hex),
                               NGHTTP2_NV_FLAG_NONE};
    if (resumed)
        extra[ne++] = (nghttp2_nv){(uint8_t *)"tracegate-link-resumed", (uint8_t *)"1", 22, 1, NGHTTP2_NV_FLAG_NONE};
    nghttp2_data_provider prd = {.source.ptr = x, .read_callback = tg_link_ctl_read_cb};
    respond(c, sid, 200, NULL, extra, ne, &prd);
    c->ctl_open = 1;
    link_up(l, c, resumed);
}

/* The tracegate-hops header of a new channel: 1..LINK_MAX_HOPS (absent: 1, a peer that predates
 * it), 0 when it claims more (a loop: 508), -1 when it is not a number of hops (400). */
static int parse_hops(const char *v)
{
    if (!v[0])
        return 1;
    unsigned n = 0;
    for (const char *p = v; *p; p++) {
        if (*p < '0' || *p > '9')
            return -1;
        n = n * 10 + (unsigned)(*p - '0'); /* at most 7 digits (copy_hdr) */
    }
    return n == 0 || v[0] == '0' ? -1 : n > LINK_MAX_HOPS ? 0 : (int)n;
}

static void accept_channel(struct link_conn *c, int32_t sid, struct stream_ctx *x)
{
    struct tg_link *l = c->link;
    if (!l || l->state != LINK_UP || l->conn != c) {
        refuse(c, sid, 421, "no control stream yet");
        return;
    }
    char node[64];
    int producer;
    char *end;
    uint64_t id = strtoull(x->channel, &end, 16);
    if (!x->channel[0] || *end || !id) {
        refuse(c, sid, 400, "missing or bad tracegate-channel");
        return;
    }
    if (tg_link_parse_path(x->path, strlen(x->path), node, sizeof node, &producer) != 0) {
        refuse(c, sid, 400, "bad :path (want /node/NAME/consumer, /node/NAME/producer or /node/NAME/adb)");
        return;
    }
    struct link_channel *ch = tg_link_channel_find(l, id);
    uint64_t peer_received = 0;
    if (x->received[0]) {
        peer_received = strtoull(x->received, &end, 10);
        if (*end) {
            refuse(c, sid, 400, "bad tracegate-received");
            return;
        }
    }
    if (ch) {
        if (ch->sid >= 0 || ch->finished || ch->producer != producer || strcmp(ch->node, node) != 0) {
            refuse(c, sid, 400, "the channel is already open");
            return;
        }
    } else if (x->received[0]) {
        refuse(c, sid, 404, "no such channel to resume (it ended)");
        return;
    } else if (!(id & 1)) {
        refuse(c, sid, 400, "no open request for this channel id");
        return;
    } else {
        if (l->n_channels >= LINK_MAX_CHANNELS) {
            refuse(c, sid, 503, "too many channels on this link");
            return;
        }
        if (!tg_fleet_can_route(c->fleet, node)) {
            refuse(c, sid, 404, "no such node");
            return;
        }
        int hops = parse_hops(x->hops);
        if (hops <= 0) {
            if (hops == 0)
                refuse(c, sid, 508, "the channel crossed too many links (a routing loop?)");
            else
                refuse(c, sid, 400, "bad tracegate-hops");
            return;
        }
        int fd = -1;
        struct bufferevent *bev = NULL;
        ch = tg_link_channel_new(l, id, node, producer, x->principal, 1, &fd, producer == LINK_KIND_ADB ? NULL : &bev);
        if (!ch) {
            refuse(c, sid, 503, "cannot create the channel");
            return;
        }
        ch->hops = (unsigned)hops;
        tg_link_op_channel_open(ch, x->traceparent, ch->traceparent);
        int st = tg_fleet_accept_channel(c->fleet, l, ch, fd, bev);
        if (st) {
            tg_link_channel_free(ch);
            refuse(c, sid, st, "refused by the gateway");
            return;
        }
    }
    x->kind = STREAM_CHANNEL;
    x->ch = ch;
    ch->ctx = x;
    char rcv[24];
    snprintf(rcv, sizeof rcv, "%" PRIu64, ch->rx_count);
    nghttp2_nv extra[1] = {{(uint8_t *)"tracegate-received", (uint8_t *)rcv, 18, strlen(rcv), NGHTTP2_NV_FLAG_NONE}};
    x->nocopy = 1;
    nghttp2_data_provider prd = {.source.ptr = x, .read_callback = tg_link_channel_read_cb};
    ch->response_ok = 1;
    tg_link_channel_bind(ch, sid, peer_received);
    respond(c, sid, 200, NULL, extra, 1, &prd);
}

static void on_request(struct link_conn *c, int32_t sid, struct stream_ctx *x)
{
    if (x->bad || strcmp(x->method, "CONNECT") != 0) {
        refuse(c, sid, 400, "only extended CONNECT");
        return;
    }
    if (!strcmp(x->protocol, "tracegate-link") && !strcmp(x->path, "/link"))
        accept_control(c, sid, x);
    else if (!strcmp(x->protocol, "perfetto-ipc"))
        accept_channel(c, sid, x);
    else
        refuse(c, sid, 400, "unknown :protocol");
}

static void on_control_response(struct link_conn *c, struct stream_ctx *x)
{
    struct tg_link *l = c->link;
    if (x->status != 200) {
        tg_warn(LOG, "link %s: the peer refused the link (%d): %s", l->peer_name[0] ? l->peer_name : c->tinfo.peer,
                x->status, x->error[0] ? x->error : "no reason given");
        snprintf(l->last_error, sizeof l->last_error, "refused (%d): %s", x->status, x->error);
        tg_link_conn_lost(c, "refused by the peer");
        return;
    }
    uint8_t id[16];
    if (!tg_link_node_name_ok(x->node) || tg_hex_decode(id, sizeof id, x->link_id) != 0) {
        tg_link_conn_lost(c, "the peer's answer lacks its node name or link id");
        return;
    }
    if (!strcmp(x->node, tg_fleet_node_name(c->fleet))) {
        tg_warn(LOG, "link to %s: the peer has this node's own name \"%s\": not linking", c->tinfo.peer, x->node);
        tg_link_conn_lost(c, "the peer has our node name");
        return;
    }
    if (l->peer_name[0] && strcmp(l->peer_name, x->node) != 0) {
        tg_warn(LOG, "link to %s: the peer is now \"%s\", was \"%s\"", c->tinfo.peer, x->node, l->peer_name);
        while (l->channels)
            tg_link_channel_abort(l->channels, "the peer changed its node name");
        l->has_id = 0;
    }
    struct tg_link *dup = tg_fleet_link_by_name(c->fleet, x->node, l);
    if (dup) {
        tg_warn(LOG, "link to %s: node \"%s\" is already linked; not linking twice", c->tinfo.peer, x->node);
        tg_link_conn_lost(c, "duplicate node name");
        return;
    }
    int resumed = x->resumed[0] == '1' && l->has_id && memcmp(id, l->id, sizeof id) == 0;
    if (!resumed && l->has_id) {
        tg_warn(LOG, "link %s: the peer no longer knows link %s; its channels close", x->node, l->id_hex);
        expire_channels(l, "the peer lost the link");
    }
    memcpy(l->id, id, sizeof id);
    tg_hex_encode(l->id_hex, l->id, sizeof l->id);
    l->has_id = 1;
    snprintf(l->peer_name, sizeof l->peer_name, "%s", x->node);
    l->machine_id = tg_fleet_machine_id(c->fleet, x->node);
    c->ctl_open = 1;
    link_up(l, c, resumed);
}

static void on_channel_response(struct link_conn *c, struct stream_ctx *x)
{
    struct link_channel *ch = x->ch;
    if (!ch)
        return;
    if (x->status != 200) {
        char why[200];
        snprintf(why, sizeof why, "the peer refused the channel (%d): %s", x->status, x->error[0] ? x->error : "");
        tg_link_channel_abort(ch, why);
        return;
    }
    char *end;
    uint64_t received = x->received[0] ? strtoull(x->received, &end, 10) : 0;
    ch->response_ok = 1;
    tg_link_channel_bind(ch, ch->sid, received);
    tg_link_conn_flush(c);
}

static int on_frame_recv(nghttp2_session *s, const nghttp2_frame *f, void *user)
{
    struct link_conn *c = user;
    struct stream_ctx *x = f->hd.stream_id ? nghttp2_session_get_stream_user_data(s, f->hd.stream_id) : NULL;
    switch (f->hd.type) {
    case NGHTTP2_SETTINGS:
        if (c->dialer && !(f->hd.flags & NGHTTP2_FLAG_ACK) && !c->connect_ok &&
            nghttp2_session_get_remote_settings(s, NGHTTP2_SETTINGS_ENABLE_CONNECT_PROTOCOL) == 1) {
            c->connect_ok = 1;
            tg_link_send_control_request(c);
        }
        break;
    case NGHTTP2_PING:
        if ((f->hd.flags & NGHTTP2_FLAG_ACK) && c->link && c->link->conn == c && c->link->ping_outstanding) {
            c->link->rtt_us = now_us() - c->link->ping_sent_us;
            c->link->ping_outstanding = 0;
            tg_fleet_refresh_status(c->link->fleet);
        }
        break;
    case NGHTTP2_HEADERS:
        if (!x || !(f->hd.flags & NGHTTP2_FLAG_END_HEADERS))
            break;
        if (!c->dialer && f->headers.cat == NGHTTP2_HCAT_REQUEST)
            on_request(c, f->hd.stream_id, x);
        else if (c->dialer && f->headers.cat == NGHTTP2_HCAT_RESPONSE) {
            if (x->kind == STREAM_CONTROL)
                on_control_response(c, x);
            else if (x->kind == STREAM_CHANNEL)
                on_channel_response(c, x);
        }
        if (x->ch && (f->hd.flags & NGHTTP2_FLAG_END_STREAM))
            tg_link_channel_on_peer_eof(x->ch);
        break;
    case NGHTTP2_DATA:
        if (x && x->ch && (f->hd.flags & NGHTTP2_FLAG_END_STREAM))
            tg_link_channel_on_peer_eof(x->ch);
        break;
    default: break;
    }
    return 0;
}

static int on_data_chunk(nghttp2_session *s, uint8_t flags, int32_t sid, const uint8_t *data, size_t len, void *user)
{
    (void)flags;
    struct link_conn *c = user;
    struct stream_ctx *x = nghttp2_session_get_stream_user_data(s, sid);
    if (c->link)
        c->link->bytes_in += len;
    if (x && x->kind == STREAM_CONTROL) {
        tg_link_on_control_data(c, data, len); /* consumed once read (ctl_process) */
        return 0;
    }
    if (x && x->kind == STREAM_CHANNEL && x->ch) {
        if (tg_link_channel_on_data(x->ch, data, len) != 0 && x->ch)
            tg_link_channel_reset(x->ch, "protocol error in the channel's records", NGHTTP2_PROTOCOL_ERROR);
        return 0;
    }
    nghttp2_session_consume(s, sid, len); /* a stream we do not keep: drop its bytes */
    return 0;
}

static int on_stream_close(nghttp2_session *s, int32_t sid, uint32_t error_code, void *user)
{
    struct link_conn *c = user;
    struct stream_ctx *x = nghttp2_session_get_stream_user_data(s, sid);
    if (!x)
        return 0;
    nghttp2_session_set_stream_user_data(s, sid, NULL);
    if (x->kind == STREAM_CONTROL && !c->dead) {
        ctx_free(c, x);
        tg_link_conn_lost(c, "the control stream closed");
        return 0;
    }
    struct link_channel *ch = x->ch;
    ctx_free(c, x);
    if (ch)
        tg_link_channel_on_close(ch, error_code);
    return 0;
}

/* nghttp2 sent a GOAWAY with an error: the peer broke the protocol (nghttp2 then ends the session
 * once it is out) or reset streams faster than nghttp2's rapid-reset limit allows (CVE-2023-44487:
 * 1000 at once, 33 a second). After that GOAWAY nghttp2 keeps reading as long as any stream is
 * open, and a link's control stream always is: the peer could go on sending HEADERS and RST_STREAM
 * for ever, each one decoded and ignored. The session ends here as after a protocol error: the
 * rest of what the peer sends is ignored, and the connection closes once the GOAWAY is out, with
 * the GOAWAY as the reason logged. */
static int on_frame_send(nghttp2_session *s, const nghttp2_frame *f, void *user)
{
    struct link_conn *c = user;
    if (f->hd.type != NGHTTP2_GOAWAY || f->goaway.error_code == NGHTTP2_NO_ERROR || c->goaway[0])
        return 0;
    int n = f->goaway.opaque_data_len > 100 ? 100 : (int)f->goaway.opaque_data_len;
    snprintf(c->goaway, sizeof c->goaway, "sent GOAWAY %s%s%.*s", nghttp2_http2_strerror(f->goaway.error_code),
             n ? ": " : "", n, n ? (const char *)f->goaway.opaque_data : "");
    nghttp2_session_terminate_session(s, f->goaway.error_code); /* (no-op when it already ends) */
    return 0;
}

/* A channel's no-copy DATA frame goes straight into the transport's output (one copy). */
static int send_data_cb(nghttp2_session *s, nghttp2_frame *frame, const uint8_t *framehd, size_t length,
                        nghttp2_data_source *src, void *user)
{
    (void)s;
    struct link_conn *c = user;
    struct evbuffer *out = tg_link_tr_output(c->tr);
    if (evbuffer_get_length(out) >= OUT_HIGH)
        return NGHTTP2_ERR_WOULDBLOCK; /* again once the transport drained (tr_drain) */
    if (frame->data.padlen || !src->ptr || tg_link_channel_send_data(src->ptr, framehd, length, out) != 0)
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE; /* (we never pad) the stream is reset */
    if (c->link)
        c->link->bytes_out += 9 + (uint64_t)length;
    return 0;
}

/* DATA frames as large as the peer takes (up to LINK_MAX_FRAME): fewer frames per record. */
static ssize_t data_length_cb(nghttp2_session *s, uint8_t type, int32_t sid, int32_t conn_window,
                              int32_t stream_window, uint32_t remote_max_frame, void *user)
{
    (void)s;
    (void)type;
    (void)sid;
    (void)user;
    ssize_t n = remote_max_frame < LINK_MAX_FRAME ? (ssize_t)remote_max_frame : (ssize_t)LINK_MAX_FRAME;
    if (conn_window < n)
        n = conn_window;
    if (stream_window < n)
        n = stream_window;
    return n > 0 ? n : 1;
}

static nghttp2_session *new_session(struct link_conn *c)
{
    nghttp2_session_callbacks *cb;
    if (nghttp2_session_callbacks_new(&cb) != 0)
        return NULL;
    nghttp2_session_callbacks_set_on_begin_headers_callback(cb, on_begin_headers);
    nghttp2_session_callbacks_set_on_header_callback(cb, on_header);
    nghttp2_session_callbacks_set_on_frame_recv_callback(cb, on_frame_recv);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, on_data_chunk);
    nghttp2_session_callbacks_set_on_stream_close_callback(cb, on_stream_close);
    nghttp2_session_callbacks_set_on_frame_send_callback(cb, on_frame_send);
    nghttp2_session_callbacks_set_send_data_callback(cb, send_data_cb);
    nghttp2_session_callbacks_set_data_source_read_length_callback(cb, data_length_cb);
    nghttp2_option *opt;
    nghttp2_option_new(&opt);
    nghttp2_option_set_no_auto_window_update(opt, 1);
    nghttp2_option_set_max_send_header_block_length(opt, LINK_MAX_HEADER_LIST);
    nghttp2_session *s = NULL;
    int rv = c->dialer ? nghttp2_session_client_new2(&s, cb, c, opt) : nghttp2_session_server_new2(&s, cb, c, opt);
    nghttp2_option_del(opt);
    nghttp2_session_callbacks_del(cb);
    if (rv != 0)
        return NULL;
    nghttp2_settings_entry iv[5];
    size_t n = 0;
    iv[n++] = (nghttp2_settings_entry){NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, LINK_STREAM_WINDOW};
    iv[n++] = (nghttp2_settings_entry){NGHTTP2_SETTINGS_MAX_FRAME_SIZE, LINK_MAX_FRAME};
    iv[n++] = (nghttp2_settings_entry){NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, LINK_MAX_STREAMS};
    iv[n++] = (nghttp2_settings_entry){NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, LINK_MAX_HEADER_LIST};
    if (!c->dialer)
        iv[n++] = (nghttp2_settings_entry){NGHTTP2_SETTINGS_ENABLE_CONNECT_PROTOCOL, 1};
    nghttp2_submit_settings(s, NGHTTP2_FLAG_NONE, iv, n);
    nghttp2_session_set_local_window_size(s, NGHTTP2_FLAG_NONE, 0, LINK_CONN_WINDOW);
    return s;
}

/* ------------------------------------------------------------ transport callbacks */

static void hello_deadline_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct link_conn *c = arg;
    if (!c->link)
        tg_link_conn_lost(c, "no control stream within the handshake timeout");
}

static void tr_up(void *arg, const struct tg_link_tr_info *info)
{
    struct link_conn *c = arg;
    c->tinfo = *info;
    c->h2 = new_session(c);
    if (!c->h2) {
        tg_link_conn_lost(c, "cannot create the HTTP/2 session");
        return;
    }
    c->up = 1;
    if (!c->dialer) {
        const struct tg_fleet_config *cfg = tg_fleet_config_of(c->fleet);
        uint32_t ms = cfg->handshake_timeout_ms ? cfg->handshake_timeout_ms : 10000;
        c->hello_ev = evtimer_new(tg_fleet_base(c->fleet), hello_deadline_cb, c);
        struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
        if (c->hello_ev)
            evtimer_add(c->hello_ev, &tv);
    }
    tg_link_conn_flush(c);
}

static void tr_read(void *arg, struct evbuffer *in)
{
    struct link_conn *c = arg;
    while (!c->dead && c->h2 && evbuffer_get_length(in)) {
        struct evbuffer_iovec v;
        if (evbuffer_peek(in, -1, NULL, &v, 1) < 1)
            break;
        c->in_callback = 1;
        ssize_t n = nghttp2_session_mem_recv(c->h2, v.iov_base, v.iov_len);
        c->in_callback = 0;
        if (n < 0) {
            tg_link_conn_lost(c, nghttp2_strerror((int)n));
            return;
        }
        evbuffer_drain(in, (size_t)n);
    }
    tg_link_conn_flush(c);
}

static void tr_drain(void *arg) { tg_link_conn_flush(arg); }

static void tr_error(void *arg, const char *why) { tg_link_conn_lost(arg, why); }

const struct tg_link_tr_cbs tg_link_conn_tr_cbs = {tr_up, tr_read, tr_drain, tr_error};

struct link_conn *tg_link_conn_new(struct tg_fleet *f, struct tg_link *link, int dialer)
{
    struct link_conn *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->fleet = f;
    c->link = link;
    c->dialer = dialer;
    c->ctl_sid = -1;
    c->ctl_tx = evbuffer_new();
    c->ctl_rx = evbuffer_new();
    c->ctl_ev = event_new(tg_fleet_base(f), -1, 0, tg_link_ctl_resume_cb, c);
    if (!c->ctl_tx || !c->ctl_rx || !c->ctl_ev) {
        tg_link_conn_free(c);
        return NULL;
    }
    return c;
}

/* :authority of the dialer's requests: the peer as dialed. A transport to a child (ssh) names
 * itself "ssh(pid N)" for the logs, which is no valid authority (the peer's nghttp2 resets the
 * stream): there it is the host the ssh URL names. */
static const char *link_authority(const struct link_conn *c)
{
    if (c->tinfo.stdio && c->link && c->link->peer)
        return tg_fleet_peer_host(c->link->peer);
    return c->tinfo.peer;
}

/* Dialer: the control request, once the acceptor allowed extended CONNECT. */
void tg_link_send_control_request(struct link_conn *c)
{
    struct tg_link *l = c->link;
    const struct tg_fleet_config *cfg = tg_fleet_config_of(c->fleet);
    const char *me = tg_fleet_node_name(c->fleet);
    char auth[600] = "";
    if (cfg->link_token && !c->tinfo.stdio)
        snprintf(auth, sizeof auth, "Bearer %s", cfg->link_token);
    const char *scheme = c->tinfo.tls ? "https" : "http";
    const char *authority = link_authority(c);
    nghttp2_nv nv[10];
    size_t n = 0;
#define NV(k, v) nv[n++] = (nghttp2_nv){(uint8_t *)(k), (uint8_t *)(v), sizeof(k) - 1, strlen(v), NGHTTP2_NV_FLAG_NONE}
#define NVS(k, v) nv[n++] = (nghttp2_nv){(uint8_t *)(k), (uint8_t *)(v), sizeof(k) - 1, strlen(v), NGHTTP2_NV_FLAG_NO_INDEX}
    NV(":method", "CONNECT");
    NV(":protocol", "tracegate-link");
    NV(":scheme", scheme);
    NV(":path", "/link");
    NV(":authority", authority);
    NV("tracegate-node", me);
    if (l->has_id)
        NV("tracegate-link-id", l->id_hex);
    if (auth[0])
        NVS("authorization", auth);
#undef NV
#undef NVS
    struct stream_ctx *x = ctx_new(c, STREAM_CONTROL);
    if (!x) {
        tg_link_conn_lost(c, "out of memory");
        return;
    }
    nghttp2_data_provider prd = {.source.ptr = x, .read_callback = tg_link_ctl_read_cb};
    int32_t sid = nghttp2_submit_request(c->h2, NULL, nv, n, &prd, x);
    OPENSSL_cleanse(auth, sizeof auth);
    if (sid < 0) {
        ctx_free(c, x);
        tg_link_conn_lost(c, "cannot open the control stream");
        return;
    }
    c->ctl_sid = sid;
    tg_link_conn_flush(c);
}

/* ------------------------------------------------------------ channels: opening */

int tg_link_submit_channel(struct tg_link *l, struct link_channel *ch)
{
    struct link_conn *c = l->conn;
    if (!c || !c->dialer || l->state != LINK_UP)
        return 0; /* opened when the link is up */
    char path[96], id[24], rcv[24], hops[12];
    snprintf(path, sizeof path, "/node/%s/%s", ch->node, link_kind_name(ch->producer));
    snprintf(hops, sizeof hops, "%u", ch->hops ? ch->hops : 1u);
    snprintf(id, sizeof id, "%" PRIx64, ch->id);
    snprintf(rcv, sizeof rcv, "%" PRIu64, ch->rx_count);
    const char *scheme = c->tinfo.tls ? "https" : "http";
    nghttp2_nv nv[9];
    size_t n = 0;
#define NV(k, v) nv[n++] = (nghttp2_nv){(uint8_t *)(k), (uint8_t *)(v), sizeof(k) - 1, strlen(v), NGHTTP2_NV_FLAG_NONE}
    NV(":method", "CONNECT");
    NV(":protocol", "perfetto-ipc");
    NV(":scheme", scheme);
    NV(":path", path);
    NV(":authority", link_authority(c));
    NV("tracegate-channel", id);
    if (ch->principal[0])
        NV("tracegate-principal", ch->principal);
    if (ch->traceparent[0] && !ch->ever_bound)
        NV("traceparent", ch->traceparent);
    if (ch->ever_bound)
        NV("tracegate-received", rcv);
    if (!ch->inbound && !ch->ever_bound)
        NV("tracegate-hops", hops); /* (a stream the peer asked for with Open carried them there) */
#undef NV
    struct stream_ctx *x = ctx_new(c, STREAM_CHANNEL);
    if (!x)
        return -1;
    x->ch = ch;
    x->nocopy = 1;
    nghttp2_data_provider prd = {.source.ptr = x, .read_callback = tg_link_channel_read_cb};
    int32_t sid = nghttp2_submit_request(c->h2, NULL, nv, n, &prd, x);
    if (sid < 0) {
        ctx_free(c, x);
        return -1;
    }
    ch->ctx = x;
    ch->sid = sid;
    ch->response_ok = 0; /* data waits for the 200 */
    tg_link_conn_flush(c);
    return 0;
}

static void open_timeout_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct link_channel *ch = arg;
    if (ch->sid < 0 && !ch->ever_bound)
        tg_link_channel_abort(ch, "the peer did not open the channel in time");
}

int tg_link_send_open(struct tg_link *l, struct link_channel *ch)
{
    if (!ch->open_ev) {
        ch->open_ev = evtimer_new(tg_fleet_base(l->fleet), open_timeout_cb, ch);
        struct timeval tv = {10, 0};
        if (ch->open_ev)
            evtimer_add(ch->open_ev, &tv);
    }
    if (!l->conn || l->state != LINK_UP)
        return 0;
    char path[96];
    snprintf(path, sizeof path, "/node/%s/%s", ch->node, link_kind_name(ch->producer));
    Tracegate__Link__Open o = TRACEGATE__LINK__OPEN__INIT;
    o.has_channel_id = 1;
    o.channel_id = ch->id;
    o.path = path;
    o.principal = ch->principal;
    o.has_hops = 1;
    o.hops = ch->hops ? ch->hops : 1u;
    Tracegate__Link__Control m = TRACEGATE__LINK__CONTROL__INIT;
    m.msg_case = TRACEGATE__LINK__CONTROL__MSG_OPEN;
    m.open = &o;
    int r = tg_link_send_control(l->conn, &m);
    tg_link_conn_flush(l->conn);
    return r;
}

/* ------------------------------------------------------------ links: lifecycle */

struct tg_link *tg_link_new_dialer(struct tg_fleet *f, struct tg_fleet_peer *peer)
{
    struct tg_link *l = calloc(1, sizeof *l);
    if (!l)
        return NULL;
    l->fleet = f;
    l->dialer = 1;
    l->peer = peer;
    l->next_cid = 1;
    l->roles = tg_fleet_config_of(f)->link_roles;
    struct event_base *b = tg_fleet_base(f);
    l->ping_ev = evtimer_new(b, ping_cb, l);
    l->window_ev = evtimer_new(b, window_cb, l);
    l->redial_ev = evtimer_new(b, redial_cb, l);
    l->clock_ev = evtimer_new(b, tg_link_clock_cb, l);
    if (!l->ping_ev || !l->window_ev || !l->redial_ev || !l->clock_ev) {
        tg_link_free(l);
        return NULL;
    }
    return l;
}

void tg_link_free(struct tg_link *l)
{
    if (!l)
        return;
    while (l->channels)
        tg_link_channel_free(l->channels);
    if (l->conn) {
        l->conn->link = NULL;
        tg_link_conn_free(l->conn);
    }
    if (l->ping_ev)
        event_free(l->ping_ev);
    if (l->window_ev)
        event_free(l->window_ev);
    if (l->redial_ev)
        event_free(l->redial_ev);
    if (l->clock_ev)
        event_free(l->clock_ev);
    free(l);
}

void tg_link_close(struct tg_link *l, const char *why)
{
    if (l->conn && l->state == LINK_UP) {
        Tracegate__Link__Goodbye g = TRACEGATE__LINK__GOODBYE__INIT;
        g.reason = (char *)why;
        Tracegate__Link__Control m = TRACEGATE__LINK__CONTROL__INIT;
        m.msg_case = TRACEGATE__LINK__CONTROL__MSG_GOODBYE;
        m.goodbye = &g;
        tg_link_send_control(l->conn, &m);
        nghttp2_submit_goaway(l->conn->h2, NGHTTP2_FLAG_NONE, nghttp2_session_get_last_proc_stream_id(l->conn->h2),
                              NGHTTP2_NO_ERROR, NULL, 0);
        tg_link_conn_flush(l->conn);
    }
    while (l->channels)
        tg_link_channel_abort(l->channels, why);
    if (!l->dialer) {
        if (l->conn) {
            struct link_conn *c = l->conn;
            l->conn = NULL;
            c->link = NULL;
            tg_link_conn_lost(c, why);
        }
        tg_fleet_remove_link(l->fleet, l);
        tg_link_free(l);
        return;
    }
    /* a dialer keeps dialing its peer; the link id is gone */
    l->has_id = 0;
    if (l->conn) {
        struct link_conn *c = l->conn;
        tg_link_conn_lost(c, why);
    }
}
