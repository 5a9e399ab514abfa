/* link_control.c: a link's control stream: control messages as length-prefixed records
 * (queued for nghttp2, read back with backpressure), hello, node lists, the acceptor's Open
 * requests the dialer serves, OpenFailed and Goodbye (docs/link-protocol.md §4); clock sync
 * messages go to link_clock.c. The HTTP/2 connection and streams are link.c's. */
#include "link_int.h"

#include "config.h"

#include <event2/buffer.h>
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "link_wire.h"
#include "tracegate/log.h"
#include "tracegate_link.pb-c.h"

#define LOG "link"

int tg_link_send_control(struct link_conn *c, const Tracegate__Link__Control *m)
{
    if (!c || c->ctl_sid < 0 || !c->ctl_tx)
        return -1;
    size_t n = tracegate__link__control__get_packed_size(m);
    uint8_t hdr[10];
    size_t hl = tg_link_rec_header(hdr, TG_LINK_REC_IPC, n) - 1; /* the varint only */
    uint8_t *buf = malloc(n ? n : 1);
    if (!buf)
        return -1;
    tracegate__link__control__pack(m, buf);
    evbuffer_add(c->ctl_tx, hdr + 1, hl);
    evbuffer_add(c->ctl_tx, buf, n);
    free(buf);
    nghttp2_session_resume_data(c->h2, c->ctl_sid);
    return 0;
}

ssize_t tg_link_ctl_read_cb(nghttp2_session *s, int32_t sid, uint8_t *buf, size_t len, uint32_t *flags,
                           nghttp2_data_source *src, void *user)
{
    (void)s;
    (void)sid;
    (void)src;
    struct link_conn *c = user;
    size_t have = c->ctl_tx ? evbuffer_get_length(c->ctl_tx) : 0;
    if (have == 0)
        return NGHTTP2_ERR_DEFERRED;
    (void)flags;
    size_t n = have < len ? have : len;
    evbuffer_remove(c->ctl_tx, buf, n);
    if (c->ctl_paused && evbuffer_get_length(c->ctl_tx) < LINK_CTL_TX_HIGH && c->ctl_ev)
        event_active(c->ctl_ev, EV_TIMEOUT, 0); /* tg_link_ctl_resume_cb */
    return (ssize_t)n;
}

void tg_link_send_hello(struct link_conn *c)
{
    struct tg_node_desc d;
    memset(&d, 0, sizeof d);
    snprintf(d.name, sizeof d.name, "%s", tg_fleet_node_name(c->fleet));
    d.machine_id = tg_fleet_machine_id(c->fleet, "");
    snprintf(d.version, sizeof d.version, "%s", PACKAGE_VERSION);
    static const char *const caps[] = {"resume", "reverse-open", "clock-sync", "nodes", TG_LINK_CAP_LOST};
    char err[128];
    for (size_t i = 0; i < sizeof caps / sizeof caps[0]; i++)
        tg_node_desc_add_cap(&d, caps[i], err, sizeof err);
    tg_node_desc_read_clocks(&d);
    uint8_t *buf = NULL;
    size_t len = 0;
    if (tg_node_desc_encode(&d, &buf, &len, err, sizeof err) != 0) {
        tg_warn(LOG, "cannot encode the node descriptor: %s", err);
        return;
    }
    Tracegate__Link__Hello h = TRACEGATE__LINK__HELLO__INIT;
    h.has_node_desc = 1;
    h.node_desc.data = buf;
    h.node_desc.len = len;
    Tracegate__Link__Control m = TRACEGATE__LINK__CONTROL__INIT;
    m.msg_case = TRACEGATE__LINK__CONTROL__MSG_HELLO;
    m.hello = &h;
    tg_link_send_control(c, &m);
    free(buf);
}

void tg_link_send_nodes(struct tg_link *l)
{
    if (!l->conn || l->state != LINK_UP)
        return;
    struct tg_fleet_node nodes[32];
    size_t n = tg_fleet_nodes(l->fleet, nodes, 32);
    if (n > 32)
        n = 32;
    Tracegate__Link__NodeInfo ni[32], *pni[32];
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        /* what we reach directly (or are), not the receiver itself, not through others */
        if (nodes[i].via[0] || !strcmp(nodes[i].name, l->peer_name) || !strcmp(nodes[i].state, "down"))
            continue;
        tracegate__link__node_info__init(&ni[k]);
        ni[k].name = nodes[i].name;
        ni[k].has_hops = 1;
        ni[k].hops = strcmp(nodes[i].state, "self") == 0 ? 0 : 1;
        pni[k] = &ni[k];
        k++;
    }
    Tracegate__Link__Nodes ns = TRACEGATE__LINK__NODES__INIT;
    ns.n_nodes = k;
    ns.nodes = pni;
    Tracegate__Link__Control m = TRACEGATE__LINK__CONTROL__INIT;
    m.msg_case = TRACEGATE__LINK__CONTROL__MSG_NODES;
    m.nodes = &ns;
    tg_link_send_control(l->conn, &m);
    tg_link_conn_flush(l->conn);
}

static void on_open(struct tg_link *l, const Tracegate__Link__Open *o)
{
    /* the acceptor asks us (the dialer) to open a channel it needs */
    char node[64];
    int producer;
    uint64_t id = o->has_channel_id ? o->channel_id : 0;
    const char *path = o->path ? o->path : "";
    int status = 0;
    const char *reason = "";
    if (!id || (id & 1) || tg_link_channel_find(l, id)) {
        status = 400;
        reason = "bad channel id";
    } else if (tg_link_parse_path(path, strlen(path), node, sizeof node, &producer) != 0) {
        status = 400;
        reason = "bad path";
    } else if (!tg_fleet_can_route(l->fleet, node)) {
        status = 404;
        reason = "no such node here";
    } else if (l->n_channels >= LINK_MAX_CHANNELS) {
        status = 503; /* the same limit as for the channels the peer opens itself */
        reason = "too many channels on this link";
    } else if (o->has_hops && (o->hops == 0 || o->hops > LINK_MAX_HOPS)) {
        status = o->hops ? 508 : 400;
        reason = o->hops ? "the channel crossed too many links (a routing loop?)" : "bad hops";
    }
    if (!status) {
        int fd = -1;
        struct bufferevent *bev = NULL;
        struct link_channel *ch = tg_link_channel_new(l, id, node, producer, o->principal ? o->principal : "", 1, &fd,
                                                      producer == LINK_KIND_ADB ? NULL : &bev);
        if (ch)
            ch->hops = o->has_hops ? o->hops : 1; /* (a peer that predates hops: a direct link) */
        if (!ch) {
            status = 503;
            reason = "cannot create the channel";
        } else if ((status = tg_fleet_accept_channel(l->fleet, l, ch, fd, bev)) != 0) {
            reason = "refused";
            tg_link_channel_free(ch);
        } else if (tg_link_submit_channel(l, ch) != 0) {
            tg_link_channel_abort(ch, "cannot open the stream");
            return;
        }
    }
    if (status) {
        tg_warn(LOG, "link %s: refused %s's request for a channel to %s: %s", l->peer_name, l->peer_name, path, reason);
        Tracegate__Link__OpenFailed of = TRACEGATE__LINK__OPEN_FAILED__INIT;
        of.has_channel_id = of.has_status = 1;
        of.channel_id = id;
        of.status = (uint32_t)status;
        of.reason = (char *)reason;
        Tracegate__Link__Control m = TRACEGATE__LINK__CONTROL__INIT;
        m.msg_case = TRACEGATE__LINK__CONTROL__MSG_OPEN_FAILED;
        m.open_failed = &of;
        tg_link_send_control(l->conn, &m);
    }
}

static int on_control_message(struct link_conn *c, const uint8_t *msg, size_t len)
{
    struct tg_link *l = c->link;
    Tracegate__Link__Control *m = tracegate__link__control__unpack(NULL, len, msg);
    if (!m)
        return -1;
    char err[160];
    switch (m->msg_case) {
    case TRACEGATE__LINK__CONTROL__MSG_HELLO:
        if (!m->hello->has_node_desc ||
            tg_node_desc_decode(m->hello->node_desc.data, m->hello->node_desc.len, &l->peer_desc, err, sizeof err) != 0) {
            tg_warn(LOG, "link %s: bad hello: %s", l->peer_name, m->hello->has_node_desc ? err : "no descriptor");
            tracegate__link__control__free_unpacked(m, NULL);
            return -1;
        }
        if (strcmp(l->peer_desc.name, l->peer_name) != 0) {
            tg_warn(LOG, "link %s: its hello names it \"%s\"", l->peer_name, l->peer_desc.name);
            tracegate__link__control__free_unpacked(m, NULL);
            return -1;
        }
        l->have_desc = 1;
        tg_info(LOG, "link %s: node version %s, %zu capabilities", l->peer_name, l->peer_desc.version,
                l->peer_desc.ncaps);
        break;
    case TRACEGATE__LINK__CONTROL__MSG_OPEN:
        if (c->dialer)
            on_open(l, m->open);
        break;
    case TRACEGATE__LINK__CONTROL__MSG_OPEN_FAILED: {
        struct link_channel *ch = m->open_failed->has_channel_id ? tg_link_channel_find(l, m->open_failed->channel_id)
                                                                   : NULL;
        if (ch && !c->dialer)
            tg_link_channel_abort(ch, m->open_failed->reason ? m->open_failed->reason : "refused by the peer");
        break;
    }
    case TRACEGATE__LINK__CONTROL__MSG_CLOCK_SYNC: tg_link_on_clock_sync(l, m->clock_sync); break;
    case TRACEGATE__LINK__CONTROL__MSG_NODES:
        l->n_reach = 0;
        for (size_t i = 0; i < m->nodes->n_nodes && l->n_reach < 32; i++) {
            const char *nm = m->nodes->nodes[i]->name;
            if (nm && tg_link_node_name_ok(nm) && strcmp(nm, l->peer_name) != 0 &&
                strcmp(nm, tg_fleet_node_name(l->fleet)) != 0)
                snprintf(l->reach[l->n_reach++], sizeof l->reach[0], "%s", nm);
        }
        tg_fleet_reach_changed(l->fleet, l);
        break;
    case TRACEGATE__LINK__CONTROL__MSG_GOODBYE:
        tg_info(LOG, "link %s: the peer closed the link: %s", l->peer_name,
                m->goodbye->reason ? m->goodbye->reason : "goodbye");
        tracegate__link__control__free_unpacked(m, NULL);
        tg_link_close(l, "closed by the peer");
        return 1;
    default: break; /* a newer message: ignored */
    }
    tracegate__link__control__free_unpacked(m, NULL);
    return 0;
}

/* Reads the control messages waiting in ctl_rx, while what we owe the peer is under
 * LINK_CTL_TX_HIGH (link_int.h); gives their bytes back to the stream's window once read. */
static void ctl_process(struct link_conn *c)
{
    for (;;) {
        size_t have = evbuffer_get_length(c->ctl_rx);
        if (!have || !c->link)
            break;
        if (evbuffer_get_length(c->ctl_tx) >= LINK_CTL_TX_HIGH) {
            /* the peer does not take our answers: read no more of its messages until it does
             * (tg_link_ctl_read_cb); their bytes stay unconsumed, so its window closes too */
            c->ctl_paused = 1;
            return;
        }
        /* the size first, from the length prefix alone: the message is made contiguous once,
         * when all of it is here (not at every DATA chunk of a large one) */
        uint8_t pre[8];
        size_t peek = have < sizeof pre ? have : sizeof pre;
        evbuffer_copyout(c->ctl_rx, pre, peek);
        long n = tg_link_ctl_size(pre, peek);
        const uint8_t *msg = NULL;
        size_t mlen = 0;
        if (n > 0 && (size_t)n > have)
            break; /* more to come */
        if (n > 0)
            n = tg_link_ctl_parse(evbuffer_pullup(c->ctl_rx, n), (size_t)n, &msg, &mlen);
        if (n < 0) {
            tg_link_conn_lost(c, "malformed control message");
            return;
        }
        if (n == 0)
            break;
        int r = on_control_message(c, msg, mlen);
        if (r < 0) {
            tg_link_conn_lost(c, "bad control message");
            return;
        }
        if (r > 0)
            return; /* the link is gone */
        evbuffer_drain(c->ctl_rx, (size_t)n);
    }
    c->ctl_paused = 0;
    if (c->ctl_unconsumed && c->h2 && c->ctl_sid >= 0 && !c->dead) {
        nghttp2_session_consume(c->h2, c->ctl_sid, c->ctl_unconsumed);
        c->ctl_unconsumed = 0;
    }
}

void tg_link_on_control_data(struct link_conn *c, const uint8_t *data, size_t len)
{
    evbuffer_add(c->ctl_rx, data, len);
    c->ctl_unconsumed += len;
    if (!c->ctl_paused)
        ctl_process(c);
}

/* The peer took enough of our control messages: read the ones that waited (from the loop, not
 * from inside nghttp2's callbacks). */
void tg_link_ctl_resume_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct link_conn *c = arg;
    if (c->dead || !c->h2 || !c->ctl_paused)
        return;
    ctl_process(c);
    tg_link_conn_flush(c);
}
