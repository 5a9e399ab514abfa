/* fleet.c: this node's links: its name, the peers it dials (reconnecting with backoff), the link
 * listeners and the --link-stdio end, raw Perfetto endpoints named as nodes, link authentication,
 * inbound channels handed to the gateway, routing for the bridge, and the node list
 * (see fleet.h, docs/link-protocol.md). */
#include "fleet.h"
#include "base/name_fit.h"
#include "fd_splice.h"
#include "fleet_fanout.h"
#include "fleet_status.h"
#include "gw_accept_pause.h"
#include "gw_adb_target.h"
#include "gw_identity.h"
#include "gw_upstream.h"

#include <arpa/inet.h>
#include <errno.h>
#include <event2/bufferevent.h>
#include <event2/dns.h>
#include <netinet/in.h>
#include <strings.h>
#include <event2/event.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "gw_bridge.h"
#include "gw_core.h"
#include "link_int.h"
#include "link_wire.h"
#include "net/tls.h"
#include "tracegate/addr.h"
#include "tracegate/clock.h"
#include "tracegate/ipc_host.h"
#include "tracegate/log.h"
#include "tracegate/peer_cred.h"

#define LOG "link"
#define MAX_LISTEN 8

enum peer_kind { PEER_TLS, PEER_TCP, PEER_SSH };

struct tg_fleet_peer {
    enum peer_kind kind;
    char url[512];
    char host[256];
    int port;
    char user[64];
    struct tg_link *link;
};

struct raw_node {
    char name[64];
    char consumer[512], producer[512]; /* Perfetto-style addresses ("" = not served) */
    struct tg_gw_upstream *up[2];      /* consumer, producer (NULL = not served): connected, checked
                                        * and introduced as an external upstream is (gw_upstream.c) */
};

struct link_listener {
    struct tg_fleet *f;
    int fd;
    struct event *ev;
    struct tg_gw_accept_pause pause; /* out of descriptors: accepts paused */
    struct tg_tls_server *tls;
    char bound[300];
    int loopback;
};

struct tg_fleet {
    struct event_base *base;
    struct evdns_base *dns;
    struct tg_gw *gw;
    struct tg_fleet_config cfg;
    char name[64];
    struct tg_fleet_peer *peers;
    size_t n_peers;
    struct raw_node *raw;
    size_t n_raw;
    struct link_listener listeners[MAX_LISTEN];
    size_t n_listeners;
    struct tg_link *links;
    struct link_conn *stdio_conn;
    struct link_conn **conns;  /* every link connection made or accepted, until freed */
    size_t n_conns, cap_conns;
    struct tg_fleet_status status; /* /api/status's nodes and /metrics (fleet_status.c) */
    uint64_t started_unix;
    struct tg_fanout *fanout; /* federated sessions (@all, @a,b) */
    struct tg_gw_adb_target *adb; /* this node's ADB server, for ADB channels (NULL: none) */
};

struct event_base *tg_fleet_base(struct tg_fleet *f) { return f->base; }
struct tg_gw *tg_fleet_gw(struct tg_fleet *f) { return f->gw; }
const char *tg_fleet_node_name(const struct tg_fleet *f) { return f->name; }
struct tg_link *tg_fleet_links(struct tg_fleet *f) { return f->links; }
struct tg_fanout *tg_fleet_fanout(struct tg_fleet *f) { return f->fanout; }
const struct tg_fleet_config *tg_fleet_config_of(const struct tg_fleet *f) { return &f->cfg; }
const char *tg_fleet_peer_host(const struct tg_fleet_peer *p) { return p->host; }

/* Remembers a connection so tg_fleet_free can free it even when no link holds it (accepted and
 * waiting for its control stream, or lost and waiting to be freed). Returns 0 or -1. */
static int track_conn(struct tg_fleet *f, struct link_conn *c)
{
    if (f->n_conns == f->cap_conns) {
        size_t cap = f->cap_conns ? f->cap_conns * 2 : 16;
        struct link_conn **n = realloc(f->conns, cap * sizeof *n);
        if (!n)
            return -1;
        f->conns = n;
        f->cap_conns = cap;
    }
    f->conns[f->n_conns++] = c;
    return 0;
}

/* ------------------------------------------------------------ the node list */

static const char *state_name(const struct tg_link *l)
{
    switch (l->state) {
    case LINK_UP: return "up";
    case LINK_DOWN: return "down";
    case LINK_CLOSED: return "closed";
    default: return "connecting";
    }
}

uint64_t tg_fleet_status_rebuilds(const struct tg_fleet *f) { return f->status.n_rebuilds; }

void tg_fleet_refresh_status(struct tg_fleet *f) { tg_fleet_status_refresh(&f->status); }

static char *status_nodes(void *f) { return tg_fleet_status_json(f); }

static char *metrics_text(void *f) { return tg_fleet_status_metrics_copy(&((struct tg_fleet *)f)->status); }

char *tg_fleet_status_json(struct tg_fleet *f) { return tg_fleet_status_json_copy(&f->status); }

static uint64_t unix_from_mono(uint64_t mono_us)
{
    uint64_t now_mono = tg_mono_us();
    time_t now = time(NULL);
    return mono_us && now_mono >= mono_us ? (uint64_t)now - (now_mono - mono_us) / 1000000u : 0;
}

size_t tg_fleet_nodes(struct tg_fleet *f, struct tg_fleet_node *out, size_t max)
{
    size_t n = 0;
#define ADD() (n < max ? memset(&out[n], 0, sizeof out[n]), &out[n] : NULL)
    struct tg_fleet_node *x = ADD();
    if (x) {
        snprintf(x->name, sizeof x->name, "%s", f->name);
        snprintf(x->state, sizeof x->state, "self");
        x->since_unix_s = f->started_unix;
        snprintf(x->version, sizeof x->version, "%s", "");
    }
    n++;
    for (size_t i = 0; i < f->n_raw; i++, n++) {
        if ((x = ADD()) == NULL)
            continue;
        snprintf(x->name, sizeof x->name, "%s", f->raw[i].name);
        snprintf(x->state, sizeof x->state, "raw");
        snprintf(x->address, sizeof x->address, "%.127s", f->raw[i].consumer);
        x->machine_id = tg_fleet_machine_id(f, f->raw[i].name);
    }
    for (struct tg_link *l = f->links; l; l = l->next) {
        if (!l->peer_name[0])
            continue;
        if ((x = ADD()) != NULL) {
            snprintf(x->name, sizeof x->name, "%s", l->peer_name);
            snprintf(x->state, sizeof x->state, "%s", state_name(l));
            x->machine_id = l->machine_id;
            x->rtt_us = l->rtt_us;
            x->have_offset = tg_link_clock_offset(l, &x->clock_offset_ns);
            x->bytes_in = l->bytes_in;
            x->bytes_out = l->bytes_out;
            x->channels = l->n_channels;
            x->resumes = l->resumes;
            x->since_unix_s = unix_from_mono(l->state == LINK_UP ? l->up_since_us : l->down_since_us);
            snprintf(x->address, sizeof x->address, "%s", l->conn ? l->conn->tinfo.peer : "");
            if (l->have_desc)
                snprintf(x->version, sizeof x->version, "%s", l->peer_desc.version);
        }
        n++;
        if (l->state != LINK_UP)
            continue;
        for (size_t r = 0; r < l->n_reach; r++, n++) {
            if ((x = ADD()) == NULL)
                continue;
            snprintf(x->name, sizeof x->name, "%s", l->reach[r]);
            snprintf(x->state, sizeof x->state, "up");
            snprintf(x->via, sizeof x->via, "%s", l->peer_name);
            x->machine_id = tg_fleet_machine_id(f, l->reach[r]);
        }
    }
#undef ADD
    return n;
}

size_t tg_fleet_clock_rounds(struct tg_fleet *f, const char *name, uint64_t (*peer)[4], uint64_t (*mine)[4],
                             size_t max)
{
    struct tg_link *l = tg_fleet_link_by_name(f, name, NULL);
    return l ? tg_link_clock_rounds(l, peer, mine, max) : 0;
}

uint32_t tg_fleet_machine_id(struct tg_fleet *f, const char *name)
{
    if (!name[0] || !strcmp(name, f->name))
        return 0;
    return tg_gw_node_machine_id(name); /* from the authenticated name, never a claim */
}

void tg_fleet_link_state_changed(struct tg_fleet *f, struct tg_link *l)
{
    for (struct tg_link *x = f->links; x; x = x->next)
        if (x->state == LINK_UP)
            tg_link_send_nodes(x);
    tg_fleet_status_rebuild(&f->status);
    if (l && l->state == LINK_UP && f->fanout)
        tg_fanout_routes_changed(f->fanout); /* federated sessions waiting for a node behind it */
}

void tg_fleet_reach_changed(struct tg_fleet *f, struct tg_link *l)
{
    tg_fleet_status_rebuild(&f->status);
    if (l->state == LINK_UP && f->fanout)
        tg_fanout_routes_changed(f->fanout); /* a node behind this peer may be back */
}

/* ------------------------------------------------------------ links registry */

void tg_fleet_add_link(struct tg_fleet *f, struct tg_link *l)
{
    l->next = f->links;
    if (l->next)
        l->next->prev = l;
    l->prev = NULL;
    f->links = l;
}

void tg_fleet_remove_link(struct tg_fleet *f, struct tg_link *l)
{
    if (l->prev)
        l->prev->next = l->next;
    else if (f->links == l)
        f->links = l->next;
    if (l->next)
        l->next->prev = l->prev;
    l->next = l->prev = NULL;
    tg_fleet_status_rebuild(&f->status);
}

struct tg_link *tg_fleet_link_by_name(struct tg_fleet *f, const char *name, const struct tg_link *except)
{
    for (struct tg_link *l = f->links; l; l = l->next)
        if (l != except && l->peer_name[0] && !strcmp(l->peer_name, name) &&
            (l->state == LINK_UP || l->state == LINK_DOWN))
            return l;
    return NULL;
}

struct tg_link *tg_fleet_link_by_id(struct tg_fleet *f, const uint8_t id[16])
{
    for (struct tg_link *l = f->links; l; l = l->next)
        if (l->has_id && !memcmp(l->id, id, 16))
            return l;
    return NULL;
}

static struct raw_node *raw_by_name(struct tg_fleet *f, const char *name)
{
    for (size_t i = 0; i < f->n_raw; i++)
        if (!strcmp(f->raw[i].name, name))
            return &f->raw[i];
    return NULL;
}

/* The link that leads to `name`: a direct one, else one whose peer reaches it. */
static struct tg_link *route(struct tg_fleet *f, const char *name)
{
    struct tg_link *l = tg_fleet_link_by_name(f, name, NULL);
    if (l)
        return l;
    for (l = f->links; l; l = l->next)
        if (l->state == LINK_UP)
            for (size_t i = 0; i < l->n_reach; i++)
                if (!strcmp(l->reach[i], name))
                    return l;
    return NULL;
}

int tg_fleet_nodes_has(struct tg_fleet *f, const char *name) { return tg_fleet_can_route(f, name); }

int tg_fleet_can_route(struct tg_fleet *f, const char *name)
{
    return !strcmp(name, f->name) || raw_by_name(f, name) || route(f, name);
}

int tg_fleet_route_up(struct tg_fleet *f, const char *name)
{
    struct tg_link *l = route(f, name);
    return l && l->state == LINK_UP;
}

/* ------------------------------------------------------------ routing (the bridge's upstreams) */

/* A new channel of link l to `node` for `who` (its local end: *fd, or *bev when bev is not NULL),
 * or NULL with err set: the link has LINK_MAX_CHANNELS, or the channel would cross more than
 * LINK_MAX_HOPS links (a routing loop, or a fleet deeper than links carry). */
static struct link_channel *new_channel(struct tg_link *l, const char *node, int kind,
                                        const struct tg_gw_client_info *who, int *fd, struct bufferevent **bev,
                                        char *err, size_t errlen)
{
    if (l->n_channels >= LINK_MAX_CHANNELS) {
        snprintf(err, errlen, "the link to %s has too many channels", l->peer_name);
        return NULL;
    }
    unsigned hops = (who ? who->link_hops : 0) + 1;
    if (hops > LINK_MAX_HOPS) {
        snprintf(err, errlen, "node %s: the channel would cross more than %u links (a routing loop?)", node,
                 LINK_MAX_HOPS);
        return NULL;
    }
    struct link_channel *ch = tg_link_channel_new(l, 0, node, kind, who ? who->principal : "", 0, fd, bev);
    if (!ch) {
        snprintf(err, errlen, "cannot create a channel to %s", node);
        return NULL;
    }
    ch->hops = hops;
    return ch;
}

/* A connection to raw node `raw` for `who`, made as the gateway makes one to an external upstream:
 * the owner of a UNIX socket checked, and on a TCP consumer socket SetPeerIdentity{uid, pid} first
 * (out->first), so the node's service tells the hub's clients apart as it tells its own apart.
 * Over a UNIX socket the service sees our uid for everyone: then, as in bridge mode over UNIX,
 * local users other than root and ours are not routed there unless --local-user-roles was given. */
static int raw_open(struct tg_fleet *f, struct raw_node *raw, int producer, const struct tg_gw_client_info *who,
                    struct tg_gw_route *out, char *err, size_t errlen)
{
    struct tg_gw_upstream *u = raw->up[producer ? 1 : 0];
    if (!u) {
        snprintf(err, errlen, "node %s has no %s socket", raw->name, producer ? "producer" : "consumer");
        return -1;
    }
    struct tg_gw_client_info nobody;
    if (!who) {
        memset(&nobody, 0, sizeof nobody);
        nobody.pid = -1;
        who = &nobody;
    }
    if (tg_gw_upstream_is_external_unix(u) && who->has_uid && !strncmp(who->principal, "uid:", 4) && who->uid != 0 &&
        who->uid != geteuid()) {
        struct tg_gw_role_defaults d;
        tg_gw_role_defaults(f->gw, &d);
        if (!d.local_user_roles_set) {
            snprintf(err, errlen,
                     "node %s is a UNIX socket, where every client is uid %u (tracegated's): local users other than "
                     "root and uid %u are not routed to it (set --local-user-roles to allow it)",
                     raw->name, (unsigned)geteuid(), (unsigned)geteuid());
            return -1;
        }
    }
    char e2[300];
    out->fd = tg_gw_upstream_connect(u, who, e2, sizeof e2);
    if (out->fd < 0) {
        snprintf(err, errlen, "node %s: %s", raw->name, e2);
        return -1;
    }
    out->first_len = tg_gw_upstream_identity_frame(u, who, out->first, sizeof out->first);
    return 0;
}

/* A stream to node `node` for `who`: out->fd, or (when bev_ok and the node is across a link)
 * out->bev, one end of a bufferevent pair whose other end is the link channel. */
static int fleet_open(struct tg_fleet *f, const char *node, int producer, const struct tg_gw_client_info *who,
                      int bev_ok, struct tg_gw_route *out, uint64_t *channel_id, char *link_peer, size_t lplen,
                      char *err, size_t errlen)
{
    out->fd = -1;
    out->bev = NULL;
    out->first_len = 0;
    if (channel_id)
        *channel_id = 0;
    if (link_peer && lplen)
        link_peer[0] = 0;
    if (node[0] == '@') {
        if (!f->fanout) {
            snprintf(err, errlen, "federated sessions are not available (out of memory at start)");
            return -1;
        }
        out->fd = tg_fanout_connect(f->fanout, node + 1, producer, who, err, errlen);
        return out->fd < 0 ? -1 : 0;
    }
    struct raw_node *raw = raw_by_name(f, node);
    if (raw)
        return raw_open(f, raw, producer, who, out, err, errlen);
    struct tg_link *l = route(f, node);
    if (!l) {
        snprintf(err, errlen, "no node %s (not linked)", node);
        return -1;
    }
    struct link_channel *ch = new_channel(l, node, producer, who, &out->fd, bev_ok ? &out->bev : NULL, err, errlen);
    if (!ch)
        return -1;
    tg_link_op_channel_open(ch, who ? who->traceparent : NULL, ch->traceparent);
    int r = l->dialer ? tg_link_submit_channel(l, ch) : tg_link_send_open(l, ch);
    if (r != 0) {
        tg_link_channel_free(ch);
        if (out->bev)
            bufferevent_free(out->bev);
        if (out->fd >= 0)
            close(out->fd);
        out->fd = -1;
        out->bev = NULL;
        snprintf(err, errlen, "cannot open a channel to %s", node);
        return -1;
    }
    tg_info(LOG, "link %s: channel %llx to %s/%s for %s", l->peer_name, (unsigned long long)ch->id, node,
            producer ? "producer" : "consumer", ch->principal[0] ? ch->principal : "-");
    if (channel_id)
        *channel_id = ch->id;
    if (link_peer && lplen)
        snprintf(link_peer, lplen, "%s", l->peer_name);
    return 0;
}

int tg_fleet_connect(void *fleet, const char *node, int producer, const struct tg_gw_client_info *who, char *err,
                     size_t errlen)
{
    if (raw_by_name(fleet, node)) { /* its connections begin with the client's identity (raw_open) */
        snprintf(err, errlen, "node %s is a raw Perfetto endpoint: only its consumer and producer ports are served",
                 node);
        return -1;
    }
    struct tg_gw_route r;
    return fleet_open(fleet, node, producer, who, 0, &r, NULL, NULL, 0, err, errlen) == 0 ? r.fd : -1;
}

int tg_fleet_connect_channel(struct tg_fleet *f, const char *node, int producer, const struct tg_gw_client_info *who,
                             struct tg_gw_route *out, uint64_t *channel_id, char *link_peer, size_t lplen, char *err,
                             size_t errlen)
{
    return fleet_open(f, node, producer, who, 1, out, channel_id, link_peer, lplen, err, errlen);
}

int tg_fleet_route(void *fleet, const char *node, int producer, const struct tg_gw_client_info *who,
                   struct tg_gw_route *out, char *err, size_t errlen)
{
    return fleet_open(fleet, node, producer, who, 1, out, NULL, NULL, 0, err, errlen);
}

/* ------------------------------------------------------------ inbound channels */

/* An ADB channel: the link's roles must hold adb (a shell on every attached device); the stream
 * goes to our ADB server, or one hop on to the node named in the path. */
static int accept_adb(struct tg_fleet *f, struct tg_link *l, struct link_channel *ch, int fd,
                      const struct tg_gw_client_info *info)
{
    char err[160] = "";
    int status = 0, tfd = -1;
    if (!(l->roles & (TG_GW_ROLE_ADB | TG_GW_ROLE_ADMIN))) {
        status = 403;
        snprintf(err, sizeof err, "the link's roles do not include adb (--link-roles)");
    } else if ((tfd = tg_fleet_adb_connect(f, ch->node, info, err, sizeof err)) < 0) {
        status = 502;
    } else if (tg_fd_splice(f->base, fd, tfd, 256 * 1024, info->principal) != 0) {
        tg_warn(LOG, "link %s: ADB channel %llx: out of memory", l->peer_name, (unsigned long long)ch->id);
        return 503; /* the splice closed both */
    }
    if (status) {
        tg_warn(LOG, "link %s: refused an ADB channel to %s for %s: %s", l->peer_name, ch->node, info->principal, err);
        close(fd);
        return status;
    }
    tg_info(LOG, "link %s: ADB channel %llx to %s for %s", l->peer_name, (unsigned long long)ch->id, ch->node,
            info->principal);
    return 0;
}

int tg_fleet_adb_connect(void *fleet, const char *node, const struct tg_gw_client_info *who, char *err, size_t errlen)
{
    struct tg_fleet *f = fleet;
    if (!node[0] || !strcmp(node, f->name)) {
        if (!f->adb) {
            snprintf(err, errlen, "node %s has no ADB server configured", f->name);
            return -1;
        }
        return tg_gw_adb_target_open(f->adb, "", who, err, errlen);
    }
    if (raw_by_name(f, node)) {
        snprintf(err, errlen, "node %s is a raw Perfetto endpoint: no ADB server behind it", node);
        return -1;
    }
    struct tg_link *l = route(f, node);
    if (!l) {
        snprintf(err, errlen, "no node %s here", node);
        return -1;
    }
    int fd = -1;
    struct link_channel *ch = new_channel(l, node, LINK_KIND_ADB, who, &fd, NULL, err, errlen);
    if (!ch)
        return -1;
    if ((l->dialer ? tg_link_submit_channel(l, ch) : tg_link_send_open(l, ch)) != 0) {
        tg_link_channel_free(ch);
        close(fd);
        snprintf(err, errlen, "cannot open a channel to %s", node);
        return -1;
    }
    tg_info(LOG, "link %s: ADB channel %llx to %s for %s", l->peer_name, (unsigned long long)ch->id, node,
            ch->principal[0] ? ch->principal : "-");
    return fd;
}

int tg_fleet_set_adb(struct tg_fleet *f, const struct tg_addr *server, const char *text)
{
    tg_gw_adb_target_free(f->adb);
    f->adb = server ? tg_gw_adb_target_new(server, text, f->name) : NULL;
    return server && !f->adb ? -1 : 0;
}

/* The node an inbound channel's client runs on. The principal header is the peer's word: a client
 * of the peer's own ("uid:1000") runs on the peer; "node:X/..." says the peer relays it from X. X is
 * believed only when the peer announced reaching X (its Nodes message, which routing goes by), and
 * X is neither this node, one of our raw nodes, nor a node linked to us (it speaks for itself over
 * its own link); and only one level deep ("node:X/uid:0"): a node further away is beyond what we
 * can check. Anything else is put on the peer's own machine, logged once per link. */
static const char *channel_origin(struct tg_fleet *f, struct tg_link *l, const char *claim)
{
    if (strncmp(claim, "node:", 5) != 0)
        return l->peer_name;
    const char *x = claim + 5;
    size_t n = strcspn(x, "/");
    char name[64];
    if (n > 0 && n < sizeof name && x[n] == '/' && strncmp(x + n + 1, "node:", 5) != 0) {
        memcpy(name, x, n);
        name[n] = '\0';
        if (strcmp(name, f->name) != 0 && !raw_by_name(f, name) && !tg_fleet_link_by_name(f, name, l))
            for (size_t i = 0; i < l->n_reach; i++)
                if (!strcmp(l->reach[i], name))
                    return l->reach[i];
    }
    if (!l->claim_logged) {
        l->claim_logged = 1;
        tg_warn(LOG, "link %s: a channel's principal \"%s\" names a node %s may not speak for (not one it "
                     "reaches, or one linked here itself): its client is put on %s's machine (logged once per link)",
                l->peer_name, claim, l->peer_name, l->peer_name);
    }
    return l->peer_name;
}

int tg_fleet_accept_channel(struct tg_fleet *f, struct tg_link *l, struct link_channel *ch, int fd,
                            struct bufferevent *bev)
{
    struct tg_gw_client_info info;
    memset(&info, 0, sizeof info);
    info.transport = TG_GW_T_LINK;
    info.port = ch->producer ? TG_GW_PORT_PRODUCER : TG_GW_PORT_CONSUMER;
    snprintf(info.peer, sizeof info.peer, "link(%s#%llx)", l->peer_name, (unsigned long long)ch->id);
    snprintf(info.source, sizeof info.source, "link:%.50s", l->peer_name);
    info.loopback = 1; /* per-source limits apply to the link's transport, not its channels */
    info.auth = TG_GW_AUTH_TOKEN;
    info.roles = l->roles;
    info.pid = -1;
    info.link_hops = ch->hops; /* a further link takes it one hop on, up to LINK_MAX_HOPS */
    /* the peer speaks for its own users only, under its own name; a long principal (one that came
     * over several links) ends in a digest rather than being cut into another's (tg_name_fit) */
    char scope[80];
    snprintf(scope, sizeof scope, "node:%s/", l->peer_name);
    if (tg_name_fit(info.principal, sizeof info.principal, scope, ch->principal[0] ? ch->principal : "-") < 0)
        return 503;
    snprintf(info.origin, sizeof info.origin, "%s", channel_origin(f, l, ch->principal));
    if (strcmp(ch->node, f->name) != 0)
        snprintf(info.node, sizeof info.node, "%s", ch->node);
    if (ch->producer == LINK_KIND_ADB)
        return accept_adb(f, l, ch, fd, &info);
    struct tg_conn_opts o;
    tg_gw_client_conn_opts(f->gw, &o);
    o.no_fd_passing = 1;
    tg_conn *c = bev ? tg_conn_new_bev(f->base, bev, &o, NULL, NULL) : tg_conn_new_fd(f->base, fd, &o, NULL, NULL);
    if (!c)
        return 503;
    tg_gw_accept(f->gw, c, &info);
    return 0;
}

/* ------------------------------------------------------------ authentication of links */

/* A credential links under its own name: a token named NODE, a certificate whose CN is NODE.
 * Local root or our own uid, ssh (our own child) and admin credentials may use any name. */
static int name_bound(const struct link_conn *c, const char *principal, unsigned cred_roles, const char *node)
{
    if (cred_roles & TG_GW_ROLE_ADMIN)
        return 1;
    if (!strncmp(principal, "token:", 6))
        return !strcmp(principal + 6, node);
    if (!strncmp(principal, "cert:", 5)) /* the CN as the certificate holds it, not parsed from text */
        return c->tinfo.cn[0] && !strcmp(c->tinfo.cn, node);
    return 1; /* uid:, ssh:uid: */
}

unsigned tg_fleet_auth_link(struct tg_fleet *f, struct link_conn *c, const char *authorization, const char *node,
                            char *principal, size_t plen, int *status, const char **why)
{
    unsigned grant = f->cfg.link_roles;
    *status = 401;
    *why = "authentication required";
    if (c->tinfo.stdio) {
        snprintf(principal, plen, "ssh:uid:%u", (unsigned)getuid());
        return grant;
    }
    if (!c->auth_principal[0] && c->tinfo.tls && c->tinfo.cert_verified && c->tinfo.subject[0]) {
        /* a client certificate verified against --tls-ca: its roles are --link-cert-roles */
        if (tg_name_fit(c->auth_principal, sizeof c->auth_principal, "cert:", c->tinfo.subject) < 0)
            return 0; /* no name that is surely this certificate's */
        c->auth_roles = f->cfg.link_cert_roles;
    }
    if (c->auth_principal[0] && (c->auth_roles & (TG_GW_ROLE_LINK | TG_GW_ROLE_ADMIN))) {
        if (!name_bound(c, c->auth_principal, c->auth_roles, node)) {
            *status = 403;
            *why = "this certificate links only under its CN as the node name";
            tg_warn(LOG, "link from %s (%s): refused the node name \"%s\" (a certificate links as its CN)",
                    c->tinfo.peer, c->auth_principal, node);
            return 0;
        }
        snprintf(principal, plen, "%s", c->auth_principal);
        return grant;
    }
    if (authorization && !strncasecmp(authorization, "Bearer ", 7)) {
        char name[96];
        unsigned roles = tg_gw_auth_token_roles(f->gw, authorization + 7, name, sizeof name);
        if (!roles) {
            tg_gw_count_auth_failure(f->gw, TG_GW_T_LINK, "bad_token");
            tg_warn(LOG, "link from %s: bad token", c->tinfo.peer);
            return 0; /* "authentication required": the peer learns nothing about the token */
        }
        if (!(roles & (TG_GW_ROLE_LINK | TG_GW_ROLE_ADMIN))) {
            *status = 403;
            *why = "this token lacks the link role";
            tg_warn(LOG, "link from %s: token %s lacks the link role", c->tinfo.peer, name);
            return 0;
        }
        snprintf(principal, plen, "token:%s", name);
        if (!name_bound(c, principal, roles, node)) {
            *status = 403;
            *why = "this token links only under its own name as the node name";
            tg_warn(LOG, "link from %s: token %s may link only as node \"%s\", not \"%s\"", c->tinfo.peer, name, name,
                    node);
            return 0;
        }
        return grant;
    }
    if (c->auth_principal[0]) { /* a known local uid or certificate without the link role */
        *status = 403;
        *why = "this principal lacks the link role";
        tg_warn(LOG, "link from %s (%s): not allowed to link", c->tinfo.peer, c->auth_principal);
        return 0;
    }
    tg_gw_count_auth_failure(f->gw, TG_GW_T_LINK, "no_credentials");
    tg_warn(LOG, "link from %s: no credentials", c->tinfo.peer);
    return 0;
}

/* ------------------------------------------------------------ dialing */

static void dial_failed(struct tg_link *l, const char *why)
{
    snprintf(l->last_error, sizeof l->last_error, "%.159s", why);
    tg_warn(LOG, "link to %s: %s", l->peer->url, why);
}

void tg_link_start_dial(struct tg_link *l)
{
    struct tg_fleet *f = l->fleet;
    struct tg_fleet_peer *p = l->peer;
    if (l->state == LINK_UP || l->state == LINK_CLOSED || l->conn)
        return;
    struct link_conn *c = tg_link_conn_new(f, l, 1);
    if (!c || track_conn(f, c) != 0) {
        tg_link_conn_free(c);
        dial_failed(l, "out of memory");
        return;
    }
    char err[256];
    int hs = (int)(f->cfg.handshake_timeout_ms ? f->cfg.handshake_timeout_ms : 10000);
    if (p->kind == PEER_SSH) {
        char cmd[512], target[400], port[16];
        snprintf(cmd, sizeof cmd, "%s", f->cfg.ssh_command ? f->cfg.ssh_command : "ssh -T -o BatchMode=yes");
        char *argv[40];
        int n = 0;
        for (char *tok = strtok(cmd, " "); tok && n < 30; tok = strtok(NULL, " "))
            argv[n++] = tok;
        if (p->port) {
            snprintf(port, sizeof port, "%d", p->port);
            argv[n++] = "-p";
            argv[n++] = port;
        }
        snprintf(target, sizeof target, "%s%s%s", p->user, p->user[0] ? "@" : "", p->host);
        argv[n++] = target;
        char rcmd[512];
        snprintf(rcmd, sizeof rcmd, "%s --link-stdio", f->cfg.remote_command ? f->cfg.remote_command : "tracegated");
        argv[n++] = rcmd;
        argv[n] = NULL;
        c->tr = tg_link_tr_spawn(f->base, argv, &tg_link_conn_tr_cbs, c, err, sizeof err);
    } else {
        struct tg_tls_client_config tc;
        memset(&tc, 0, sizeof tc);
        tc.ca_file = f->cfg.peer_ca;
        tc.cert_file = f->cfg.peer_cert;
        tc.key_file = f->cfg.peer_key;
        tc.server_name = p->host;
        tc.alpn = "h2";
        tc.check_files = 1; /* re-checked at every dial: the files may have changed since start */
        c->tr = tg_link_tr_dial(f->base, f->dns, p->host, p->port, p->kind == PEER_TLS ? &tc : NULL, hs,
                                &tg_link_conn_tr_cbs, c, err, sizeof err);
    }
    if (!c->tr) {
        tg_link_conn_free(c);
        dial_failed(l, err);
        tg_link_schedule_redial(l);
        return;
    }
    l->conn = NULL;
    l->dialing = c;
    if (l->state != LINK_DOWN)
        l->state = LINK_CONNECTING;
}

static int parse_peer(const char *url, struct tg_fleet_peer *p, int insecure, char *err, size_t errlen)
{
    memset(p, 0, sizeof *p);
    snprintf(p->url, sizeof p->url, "%s", url);
    const char *rest;
    if (!strncmp(url, "tls://", 6)) {
        p->kind = PEER_TLS;
        rest = url + 6;
    } else if (!strncmp(url, "tcp://", 6)) {
        p->kind = PEER_TCP;
        rest = url + 6;
    } else if (!strncmp(url, "ssh://", 6)) {
        p->kind = PEER_SSH;
        rest = url + 6;
    } else {
        snprintf(err, errlen, "peer '%s': use tls://HOST:PORT, tcp://HOST:PORT or ssh://[USER@]HOST[:PORT]", url);
        return -1;
    }
    const char *at = p->kind == PEER_SSH ? strchr(rest, '@') : NULL;
    if (at) {
        if ((size_t)(at - rest) >= sizeof p->user) {
            snprintf(err, errlen, "peer '%s': user name too long", url);
            return -1;
        }
        memcpy(p->user, rest, (size_t)(at - rest));
        rest = at + 1;
    }
    const char *colon = strrchr(rest, ':');
    const char *host = rest;
    size_t hl = colon ? (size_t)(colon - rest) : strlen(rest);
    if (host[0] == '[' && hl >= 2 && host[hl - 1] == ']') {
        host++;
        hl -= 2;
    }
    if (hl == 0 || hl >= sizeof p->host || strpbrk(rest, " /?#")) {
        snprintf(err, errlen, "peer '%s': bad host", url);
        return -1;
    }
    memcpy(p->host, host, hl);
    p->host[hl] = '\0';
    if (colon) {
        char *end;
        long port = strtol(colon + 1, &end, 10);
        if (*end || port <= 0 || port > 65535) {
            snprintf(err, errlen, "peer '%s': bad port", url);
            return -1;
        }
        p->port = (int)port;
    } else if (p->kind != PEER_SSH) {
        snprintf(err, errlen, "peer '%s': a port is required", url);
        return -1;
    }
    if (p->kind == PEER_TCP && !insecure) {
        struct tg_addr a;
        char addr[300], e2[128];
        snprintf(addr, sizeof addr, "%s:%d", p->host, p->port);
        if (tg_addr_parse(addr, &a, e2, sizeof e2) != 0 || !tg_addr_is_loopback(&a)) {
            snprintf(err, errlen, "peer '%s': plaintext links only to loopback addresses (or use --insecure)", url);
            return -1;
        }
    }
    return 0;
}

/* ------------------------------------------------------------ listeners */

void tg_fleet_conn_gone(struct tg_fleet *f, struct link_conn *c)
{
    for (size_t i = 0; i < f->n_conns; i++)
        if (f->conns[i] == c) {
            f->conns[i] = f->conns[--f->n_conns];
            break;
        }
    if (c->admitted) {
        c->admitted = 0;
        tg_gw_client_gone(f->gw, &c->ainfo, NULL, 1);
    }
    if (f->stdio_conn == c) {
        f->stdio_conn = NULL;
        tg_warn(LOG, "the link on stdio ended (the ssh session is over): exiting");
        event_base_loopbreak(f->base);
    }
}

/* One accepted link connection: limits before anything is spent on it, the uid of a local
 * peer, then the transport (TLS or h2c) as the HTTP/2 acceptor. Takes fd. */
static int accept_link(struct tg_fleet *f, int fd, struct tg_tls_server *tls, const char *where, char *err,
                       size_t errlen)
{
    struct link_conn *c = tg_link_conn_new(f, NULL, 0);
    if (!c || track_conn(f, c) != 0) {
        tg_link_conn_free(c);
        close(fd);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    struct tg_gw_client_info *ai = &c->ainfo;
    ai->transport = TG_GW_T_LINK;
    struct tg_peer_cred cred;
    {
        struct sockaddr_storage ss;
        socklen_t sl = sizeof ss;
        char ip[64] = "?", text[INET6_ADDRSTRLEN + 8] = "?";
        if (getpeername(fd, (struct sockaddr *)&ss, &sl) == 0) {
            ai->loopback = tg_sockaddr_is_loopback(&ss);
            tg_gw_source_key(&ss, f->gw ? f->gw->limits.source_prefix6 : 128, ip, sizeof ip);
            tg_sockaddr_text(&ss, text, sizeof text);
        }
        snprintf(ai->source, sizeof ai->source, "%s", ip);
        snprintf(ai->peer, sizeof ai->peer, "link %s", text);
    }
    const char *label, *why;
    if (tg_gw_admit(f->gw, ai, &label, &why) != 0) {
        tg_gw_count_rejected(f->gw, label);
        tg_gw_log_refusal(f->gw, TG_LOG_WARN, LOG, "%s: refused a link connection from %s: %s", where, ai->source, why);
        close(fd);
        tg_link_conn_free(c);
        snprintf(err, errlen, "%s", why);
        return -1;
    }
    c->admitted = 1;
    if (ai->loopback && tg_peer_cred_of(fd, &cred) == 0 && (cred.uid == 0 || cred.uid == geteuid())) {
        snprintf(c->auth_principal, sizeof c->auth_principal, "uid:%u", (unsigned)cred.uid);
        c->auth_roles = TG_GW_ROLE_LINK;
    }
    int hs = (int)(f->cfg.handshake_timeout_ms ? f->cfg.handshake_timeout_ms : 10000);
    c->tr = tg_link_tr_accept(f->base, fd, tls, hs, &tg_link_conn_tr_cbs, c, err, errlen);
    if (!c->tr) {
        tg_warn(LOG, "%s: %s", where, err);
        tg_link_conn_free(c);
        return -1;
    }
    return 0;
}

int tg_fleet_accept_link_fd(struct tg_fleet *f, int fd, char *err, size_t errlen)
{
    return accept_link(f, fd, NULL, "link socket", err, errlen);
}

static void listener_accept_cb(evutil_socket_t lfd, short what, void *arg)
{
    (void)what;
    struct link_listener *ll = arg;
    for (int i = 0; i < 32; i++) {
        int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0 && (errno == EINTR || errno == ECONNABORTED))
            continue;
        if (fd < 0) {
            /* out of descriptors, the socket stays readable: paused instead of spinning */
            tg_gw_accept_failed(&ll->pause, ll->bound, errno);
            return;
        }
        char err[256];
        accept_link(ll->f, fd, ll->tls, ll->bound, err, sizeof err);
    }
}

static int add_listener(struct tg_fleet *f, const char *url, char *err, size_t errlen)
{
    if (f->n_listeners >= MAX_LISTEN) {
        snprintf(err, errlen, "at most %d link listeners", MAX_LISTEN);
        return -1;
    }
    int tls = !strncmp(url, "tls://", 6);
    if (!tls && strncmp(url, "tcp://", 6) != 0) {
        snprintf(err, errlen, "listen-link '%s': use tls://ADDR:PORT or tcp://ADDR:PORT", url);
        return -1;
    }
    struct tg_addr a;
    if (tg_addr_parse(url + 6, &a, err, errlen) != 0)
        return -1;
    struct link_listener *ll = &f->listeners[f->n_listeners];
    memset(ll, 0, sizeof *ll);
    ll->f = f;
    ll->fd = -1;
    ll->loopback = tg_addr_is_loopback(&a);
    if (!tls && !ll->loopback && !f->cfg.insecure) {
        snprintf(err, errlen, "listen-link '%s': a plaintext link listener must be on loopback (or --insecure)", url);
        return -1;
    }
    if (tls) {
        struct tg_tls_server_config tc;
        memset(&tc, 0, sizeof tc);
        tc.cert_file = f->cfg.tls_cert;
        tc.key_file = f->cfg.tls_key;
        tc.ca_file = f->cfg.tls_ca;
        tc.alpn = "h2";
        tc.check_files = 1;
        char e2[300];
        ll->tls = tg_tls_server_new(&tc, e2, sizeof e2);
        if (!ll->tls) {
            snprintf(err, errlen, "listen-link '%s': %s", url, e2);
            return -1;
        }
    }
    ll->fd = tg_addr_listen(&a, 4096, 0); /* a fleet redialing a restarted hub at once: queued, not dropped */
    if (ll->fd < 0) {
        snprintf(err, errlen, "listen-link '%s': %s", url, strerror(errno));
        if (ll->tls)
            tg_tls_server_free(ll->tls);
        return -1;
    }
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    char text[INET6_ADDRSTRLEN + 8] = "?";
    if (getsockname(ll->fd, (struct sockaddr *)&ss, &sl) == 0)
        tg_sockaddr_text(&ss, text, sizeof text);
    snprintf(ll->bound, sizeof ll->bound, "%s://%s", tls ? "tls" : "tcp", text);
    ll->ev = event_new(f->base, ll->fd, EV_READ | EV_PERSIST, listener_accept_cb, ll);
    if (!ll->ev || tg_gw_accept_pause_init(&ll->pause, f->base, f->gw, ll->ev) != 0) {
        if (ll->ev)
            event_free(ll->ev);
        ll->ev = NULL;
        close(ll->fd);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    event_add(ll->ev, NULL);
    f->n_listeners++;
    tg_info(LOG, "listening for links: %s%s", ll->bound, tls && f->cfg.tls_ca ? " (client certificates)" : "");
    return 0;
}

/* ------------------------------------------------------------ lifecycle */

static int parse_raw(const char *spec, struct raw_node *r, char *err, size_t errlen)
{
    /* NAME=ADDR (consumer socket), or NAME=consumer:ADDR,producer:ADDR */
    memset(r, 0, sizeof *r);
    const char *eq = strchr(spec, '=');
    if (!eq || (size_t)(eq - spec) >= sizeof r->name) {
        snprintf(err, errlen, "node '%s': expected NAME=ADDR", spec);
        return -1;
    }
    memcpy(r->name, spec, (size_t)(eq - spec));
    if (!tg_link_node_name_ok(r->name)) {
        snprintf(err, errlen, "node '%s': bad node name", spec);
        return -1;
    }
    const char *v = eq + 1;
    if (!strncmp(v, "consumer:", 9) || !strncmp(v, "producer:", 9)) {
        char tmp[1100];
        snprintf(tmp, sizeof tmp, "%s", v);
        for (char *tok = strtok(tmp, ","); tok; tok = strtok(NULL, ",")) {
            if (!strncmp(tok, "consumer:", 9))
                snprintf(r->consumer, sizeof r->consumer, "%s", tok + 9);
            else if (!strncmp(tok, "producer:", 9))
                snprintf(r->producer, sizeof r->producer, "%s", tok + 9);
            else {
                snprintf(err, errlen, "node '%s': expected consumer:ADDR and/or producer:ADDR", spec);
                return -1;
            }
        }
    } else {
        const char *a = !strncmp(v, "tcp://", 6) ? v + 6 : !strncmp(v, "unix:", 5) ? v + 5 : v;
        snprintf(r->consumer, sizeof r->consumer, "%s", a);
    }
    struct tg_addr a;
    if ((r->consumer[0] && tg_addr_parse(r->consumer, &a, err, errlen) != 0) ||
        (r->producer[0] && tg_addr_parse(r->producer, &a, err, errlen) != 0))
        return -1;
    return 0;
}

/* The consumer and producer upstreams of raw node r; a UNIX consumer socket is said at start-up to
 * see tracegated's uid for everyone, and what that means for local users (raw_open). */
static int raw_upstreams(struct tg_fleet *f, struct raw_node *r, char *err, size_t errlen)
{
    const char *a[2] = {r->consumer, r->producer};
    for (int i = 0; i < 2; i++) {
        if (!a[i][0])
            continue;
        char e2[400];
        r->up[i] = tg_gw_upstream_new_node(f->base, r->name, a[i], i ? TG_GW_PORT_PRODUCER : TG_GW_PORT_CONSUMER, e2,
                                           sizeof e2);
        if (!r->up[i]) {
            snprintf(err, errlen, "node %s: %s", r->name, e2);
            return -1;
        }
    }
    if ((r->up[0] && tg_gw_upstream_is_external_unix(r->up[0])) ||
        (r->up[1] && tg_gw_upstream_is_external_unix(r->up[1]))) {
        struct tg_gw_role_defaults d = {0};
        if (f->gw)
            tg_gw_role_defaults(f->gw, &d);
        if (d.local_user_roles_set)
            tg_warn(LOG, "node %s is a UNIX socket: it sees uid %u (ours) for every client routed there, other local "
                         "users too (--local-user-roles is set)",
                    r->name, (unsigned)geteuid());
        else
            tg_warn(LOG, "node %s is a UNIX socket: it sees uid %u (ours) for every client routed there, so local "
                         "users other than root and uid %u are not routed to it (set --local-user-roles to override)",
                    r->name, (unsigned)geteuid(), (unsigned)geteuid());
    }
    return 0;
}

struct tg_fleet *tg_fleet_new(struct event_base *base, struct tg_gw *gw, const struct tg_fleet_config *cfg, char *err,
                              size_t errlen)
{
    struct tg_fleet *f = calloc(1, sizeof *f);
    if (!f) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    f->base = base;
    f->gw = gw;
    f->cfg = *cfg;
    f->started_unix = (uint64_t)time(NULL);
    tg_fleet_status_init(&f->status, base, f);
    if (!f->cfg.link_roles)
        f->cfg.link_roles = TG_GW_ROLE_OBSERVER | TG_GW_ROLE_RECORDER | TG_GW_ROLE_PRODUCER;
    if (!f->cfg.resume_window_ms)
        f->cfg.resume_window_ms = 60000;
    if (cfg->node_name && cfg->node_name[0]) {
        snprintf(f->name, sizeof f->name, "%s", cfg->node_name);
    } else {
        char h[256] = "";
        gethostname(h, sizeof h - 1);
        char *dot = strchr(h, '.');
        if (dot)
            *dot = '\0';
        snprintf(f->name, sizeof f->name, "%s", h[0] ? h : "node");
    }
    if (!tg_link_node_name_ok(f->name)) {
        snprintf(err, errlen, "node name '%s' is not valid ([A-Za-z0-9._-], at most 63)", f->name);
        tg_fleet_free(f);
        return NULL;
    }
    f->dns = evdns_base_new(base, EVDNS_BASE_INITIALIZE_NAMESERVERS);
    if (!f->dns) {
        /* no resolv.conf: numeric addresses still work */
        f->dns = evdns_base_new(base, 0);
    }
    if (cfg->n_raw_nodes) {
        f->raw = calloc(cfg->n_raw_nodes, sizeof *f->raw);
        if (!f->raw) {
            snprintf(err, errlen, "out of memory");
            tg_fleet_free(f);
            return NULL;
        }
        for (size_t i = 0; i < cfg->n_raw_nodes; i++, f->n_raw++)
            if (parse_raw(cfg->raw_nodes[i], &f->raw[i], err, errlen) != 0 ||
                raw_upstreams(f, &f->raw[i], err, errlen) != 0) {
                f->n_raw++; /* freed with the others */
                tg_fleet_free(f);
                return NULL;
            }
    }
    for (size_t i = 0; i < cfg->n_listen_links; i++)
        if (add_listener(f, cfg->listen_links[i], err, errlen) != 0) {
            tg_fleet_free(f);
            return NULL;
        }
    if (cfg->n_peers) {
        f->peers = calloc(cfg->n_peers, sizeof *f->peers);
        if (!f->peers) {
            snprintf(err, errlen, "out of memory");
            tg_fleet_free(f);
            return NULL;
        }
        for (size_t i = 0; i < cfg->n_peers; i++) {
            if (parse_peer(cfg->peers[i], &f->peers[i], cfg->insecure, err, errlen) != 0) {
                tg_fleet_free(f);
                return NULL;
            }
            f->n_peers++;
        }
    }
    f->fanout = tg_fanout_new(f);
    if (!f->fanout)
        tg_warn(LOG, "federated sessions are off: out of memory");
    tg_gw_set_router(gw, tg_fleet_route, f, f->name);
    tg_gw_set_status_nodes(gw, status_nodes, f);
    tg_gw_set_metrics_extra(gw, metrics_text, f);
    for (size_t i = 0; i < f->n_peers; i++) {
        struct tg_link *l = tg_link_new_dialer(f, &f->peers[i]);
        if (!l) {
            snprintf(err, errlen, "out of memory");
            tg_fleet_free(f);
            return NULL;
        }
        f->peers[i].link = l;
        tg_fleet_add_link(f, l);
        tg_link_start_dial(l);
    }
    if (cfg->link_stdio) {
        struct link_conn *c = tg_link_conn_new(f, NULL, 0);
        char e2[256] = "out of memory";
        if (c && track_conn(f, c) == 0)
            c->tr = tg_link_tr_stdio(base, &tg_link_conn_tr_cbs, c, e2, sizeof e2);
        if (!c || !c->tr) {
            snprintf(err, errlen, "link-stdio: %s", e2);
            tg_link_conn_free(c);
            tg_fleet_free(f);
            return NULL;
        }
        f->stdio_conn = c;
    }
    tg_info(LOG, "node %s: %zu peer(s), %zu link listener(s), %zu raw node(s)%s", f->name, f->n_peers,
            f->n_listeners, f->n_raw, cfg->link_stdio ? ", a link on stdio" : "");
    tg_fleet_status_rebuild(&f->status);
    return f;
}

void tg_fleet_drain(struct tg_fleet *f)
{
    for (size_t i = 0; i < f->n_listeners; i++) {
        if (f->listeners[i].ev)
            event_del(f->listeners[i].ev);
        tg_gw_accept_pause_stop(&f->listeners[i].pause);
    }
    for (struct tg_link *l = f->links, *next; l; l = next) {
        next = l->next;
        if (l->dialer) {
            l->state = LINK_CLOSED;
            event_del(l->redial_ev);
        }
        if (l->conn)
            tg_link_close(l, "the node is shutting down");
    }
}

void tg_fleet_free(struct tg_fleet *f)
{
    if (!f)
        return;
    if (f->gw) {
        tg_gw_set_router(f->gw, NULL, NULL, tg_gw_node_name(f->gw));
        tg_gw_set_status_nodes(f->gw, NULL, NULL);
        tg_gw_set_metrics_extra(f->gw, NULL, NULL);
    }
    tg_fanout_free(f->fanout);
    f->fanout = NULL;
    tg_gw_adb_target_free(f->adb);
    f->adb = NULL;
    /* connections no link holds: accepted ones still before their control stream, lost ones
     * waiting for their deferred free (they point at the fleet, and maybe at a link) */
    for (size_t i = f->n_conns; i-- > 0;) {
        if (i >= f->n_conns)
            continue;
        struct link_conn *c = f->conns[i];
        if (c->link && (c->link->conn == c || c->link->dialing == c))
            continue;
        c->link = NULL;
        tg_link_conn_free(c);
    }
    while (f->links) {
        struct tg_link *l = f->links;
        f->links = l->next;
        if (l->dialing) {
            l->dialing->link = NULL;
            tg_link_conn_free(l->dialing);
            l->dialing = NULL;
        }
        tg_link_free(l);
    }
    for (size_t i = 0; i < f->n_listeners; i++) {
        if (f->listeners[i].ev)
            event_free(f->listeners[i].ev);
        tg_gw_accept_pause_free(&f->listeners[i].pause);
        if (f->listeners[i].fd >= 0)
            close(f->listeners[i].fd);
        if (f->listeners[i].tls)
            tg_tls_server_free(f->listeners[i].tls);
    }
    tg_link_tr_orphans_free();
    if (f->dns)
        evdns_base_free(f->dns, 0);
    free(f->conns);
    free(f->peers);
    for (size_t i = 0; i < f->n_raw; i++) {
        tg_gw_upstream_free(f->raw[i].up[0]);
        tg_gw_upstream_free(f->raw[i].up[1]);
    }
    free(f->raw);
    tg_fleet_status_free(&f->status);
    free(f);
}
