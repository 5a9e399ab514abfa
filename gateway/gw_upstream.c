/* gw_upstream.c: upstream connections for bridge sessions (embedded service or external traced)
 * and the external upstream's health probe (see gw_upstream.h). */
#include "gw_upstream.h"

#include <errno.h>
#include <event2/event.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "gw_identity.h"
#include "tracegate/addr.h"
#include "tracegate/frame.h"
#include "tracegate/ipc_host.h"
#include "tracegate/log.h"
#include "tracegate/pbwire.h"
#include "tracegate/service.h"

#define LOG "gw-upstream"

struct tg_gw_upstream {
    struct event_base *base;
    enum tg_gw_port port;
    struct tg_service *svc; /* embedded */
    struct tg_addr addr;    /* external */
    int external;
    int node;               /* a raw node's socket (--node NAME=ADDR): no health to report */
    _Atomic int healthy;
    uint32_t probe_ms;
    struct event *probe_timer, *probe_io;
    int probe_fd;
    char desc[300];
    uid_t owners[3]; /* UNIX upstreams: uids allowed to own the listening socket */
    size_t n_owners;
};

/* UNIX upstreams: whether the socket at the other end belongs to a uid we trust. */
static int owner_ok(const struct tg_gw_upstream *u, int fd, uid_t *who)
{
    struct ucred cred;
    socklen_t cl = sizeof cred;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cl) != 0)
        return 0;
    *who = cred.uid;
    for (size_t i = 0; i < u->n_owners; i++)
        if (u->owners[i] == cred.uid)
            return 1;
    return 0;
}

static void set_healthy(struct tg_gw_upstream *u, int ok)
{
    if (u->node)
        return; /* its sessions say what failed; nothing probes it back to healthy */
    int was = atomic_exchange(&u->healthy, ok ? 1 : 0);
    if (was != (ok ? 1 : 0)) {
        if (ok)
            tg_info(LOG, "%s upstream %s is reachable again", u->port == TG_GW_PORT_PRODUCER ? "producer" : "consumer",
                    u->desc);
        else
            tg_warn(LOG, "%s upstream %s is unreachable", u->port == TG_GW_PORT_PRODUCER ? "producer" : "consumer",
                    u->desc);
    }
}

struct tg_gw_upstream *tg_gw_upstream_new_embedded(struct event_base *base, struct tg_service *svc,
                                                   enum tg_gw_port port)
{
    struct tg_gw_upstream *u = calloc(1, sizeof *u);
    if (!u)
        return NULL;
    u->base = base;
    u->port = port;
    u->svc = svc;
    u->probe_fd = -1;
    atomic_store(&u->healthy, 1);
    snprintf(u->desc, sizeof u->desc, "embedded service");
    return u;
}

static void probe_finish(struct tg_gw_upstream *u, int ok)
{
    if (u->probe_io) {
        event_free(u->probe_io);
        u->probe_io = NULL;
    }
    if (u->probe_fd >= 0) {
        close(u->probe_fd);
        u->probe_fd = -1;
    }
    set_healthy(u, ok);
}

static void probe_io_cb(evutil_socket_t fd, short what, void *arg)
{
    struct tg_gw_upstream *u = arg;
    int soerr = 0;
    socklen_t sl = sizeof soerr;
    int ok = (what & EV_WRITE) && getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) == 0 && soerr == 0;
    probe_finish(u, ok);
}

static void probe_timer_cb(evutil_socket_t fd, short what, void *arg)
{
    struct tg_gw_upstream *u = arg;
    (void)fd;
    (void)what;
    if (u->probe_fd >= 0)
        probe_finish(u, 0); /* the previous probe never completed */
    u->probe_fd = tg_addr_connect(&u->addr);
    if (u->probe_fd < 0) {
        set_healthy(u, 0);
        return;
    }
    u->probe_io = event_new(u->base, u->probe_fd, EV_WRITE, probe_io_cb, u);
    if (!u->probe_io) {
        probe_finish(u, 0);
        return;
    }
    uint32_t t = u->probe_ms / 2 ? u->probe_ms / 2 : 1000;
    struct timeval tv = {.tv_sec = t / 1000, .tv_usec = (t % 1000) * 1000};
    event_add(u->probe_io, &tv);
}

/* The uids trusted to serve a UNIX upstream: root, ours, and with trust_owner (the address was
 * named explicitly) whoever serves it now. 0, or -1 with the reason when it is served by a uid not
 * trusted. fd: a connection to it made now. */
static int learn_owner(struct tg_gw_upstream *u, int fd, int trust_owner, char *err, size_t errlen)
{
    uid_t who = (uid_t)-1;
    if (owner_ok(u, fd, &who))
        return 0;
    if (!trust_owner || who == (uid_t)-1) {
        snprintf(err, errlen,
                 "%s is served by a process of uid %d, neither root nor ours: refusing to bridge to it "
                 "(another user may have taken the path; name the upstream explicitly to trust it)",
                 u->addr.text, (int)who);
        return -1;
    }
    u->owners[u->n_owners++] = who;
    tg_warn(LOG, "%s %s is served by uid %u (trusted because it was named explicitly)", u->node ? "node" : "upstream",
            u->desc, (unsigned)who);
    return 0;
}

static struct tg_gw_upstream *external_new(struct event_base *base, const char *addr, enum tg_gw_port port, char *err,
                                           size_t errlen)
{
    struct tg_gw_upstream *u = calloc(1, sizeof *u);
    if (!u) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    u->base = base;
    u->port = port;
    u->external = 1;
    u->probe_fd = -1;
    if (tg_addr_parse(addr, &u->addr, err, errlen) != 0) {
        free(u);
        return NULL;
    }
    snprintf(u->desc, sizeof u->desc, "%s", u->addr.text);
    u->owners[u->n_owners++] = 0;
    if (geteuid() != 0)
        u->owners[u->n_owners++] = geteuid();
    return u;
}

struct tg_gw_upstream *tg_gw_upstream_new_external(struct event_base *base, const char *addr, enum tg_gw_port port,
                                                   uint32_t probe_interval_ms, int trust_owner, char *err,
                                                   size_t errlen)
{
    struct tg_gw_upstream *u = external_new(base, addr, port, err, errlen);
    if (!u)
        return NULL;
    u->probe_ms = probe_interval_ms;
    int fd = tg_addr_connect_wait(&u->addr, 1000); /* startup only: bounded wait */
    atomic_store(&u->healthy, fd >= 0 ? 1 : 0);
    if (fd >= 0 && u->addr.family == AF_UNIX && learn_owner(u, fd, trust_owner, err, errlen) != 0) {
        close(fd);
        free(u);
        return NULL;
    }
    if (fd >= 0)
        close(fd);
    if (probe_interval_ms) {
        u->probe_timer = event_new(base, -1, EV_PERSIST, probe_timer_cb, u);
        if (u->probe_timer) {
            struct timeval tv = {.tv_sec = probe_interval_ms / 1000, .tv_usec = (probe_interval_ms % 1000) * 1000};
            event_add(u->probe_timer, &tv);
        }
    }
    return u;
}

struct tg_gw_upstream *tg_gw_upstream_new_node(struct event_base *base, const char *name, const char *addr,
                                               enum tg_gw_port port, char *err, size_t errlen)
{
    struct tg_gw_upstream *u = external_new(base, addr, port, err, errlen);
    if (!u)
        return NULL;
    u->node = 1;
    atomic_store(&u->healthy, 1);
    snprintf(u->desc, sizeof u->desc, "%.63s (%.200s)", name, u->addr.text);
    if (u->addr.family == AF_UNIX) { /* named on the command line: its owner now is trusted, and logged */
        int fd = tg_addr_connect(&u->addr);
        if (fd >= 0 && learn_owner(u, fd, 1, err, errlen) != 0) {
            close(fd);
            free(u);
            return NULL;
        }
        if (fd >= 0)
            close(fd);
    }
    return u;
}

void tg_gw_upstream_free(struct tg_gw_upstream *u)
{
    if (!u)
        return;
    if (u->probe_timer)
        event_free(u->probe_timer);
    if (u->probe_io)
        event_free(u->probe_io);
    if (u->probe_fd >= 0)
        close(u->probe_fd);
    free(u);
}

int tg_gw_upstream_connect(struct tg_gw_upstream *u, const struct tg_gw_client_info *who, char *err, size_t errlen)
{
    if (!u->external) {
        struct tg_ipc_identity id;
        tg_gw_identity_for_service(who, &id);
        int fd = tg_service_connect_local_as(u->svc, u->port == TG_GW_PORT_PRODUCER, &id);
        if (fd < 0)
            snprintf(err, errlen, "the embedded service refused a connection");
        return fd;
    }
    int fd = tg_addr_connect(&u->addr);
    if (fd < 0) {
        int e = errno;
        snprintf(err, errlen, "cannot connect to %s: %s", u->addr.text, strerror(e));
        /* out of descriptors, or a full backlog, is our trouble or a burst: not an unreachable upstream */
        if (e != EMFILE && e != ENFILE && e != EAGAIN && e != ENOBUFS)
            set_healthy(u, 0);
        return -1;
    }
    if (u->addr.family != AF_UNIX) {
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
    } else {
        uid_t owner = (uid_t)-1;
        if (!owner_ok(u, fd, &owner)) {
            snprintf(err, errlen, "%s is now served by uid %d, not a uid this gateway trusts: refused", u->addr.text,
                     (int)owner);
            tg_warn(LOG, "%s", err);
            close(fd);
            return -1;
        }
    }
    return fd;
}

size_t tg_gw_upstream_identity_frame(const struct tg_gw_upstream *u, const struct tg_gw_client_info *who,
                                     uint8_t *buf, size_t cap)
{
    if (!u->external || u->addr.family == AF_UNIX || u->port != TG_GW_PORT_CONSUMER)
        return 0;
    struct tg_ipc_identity id;
    tg_gw_identity_for_service(who, &id);
    int32_t uid = (int32_t)id.uid;
    if (id.uid == (uid_t)-1) {
        uint32_t h = tg_ipc_machine_id_from_hint(id.principal, strlen(id.principal));
        uid = (int32_t)(0x40000000u + (h & 0xffffffu));
    }
    /* SetPeerIdentity{pid(1), uid(2)} inside IPCFrame field 8, request_id 0 */
    uint8_t inner[32];
    size_t il = 0;
    if (id.pid > 0) {
        il += tg_pb_put_tag(inner + il, 1, TG_PB_VARINT);
        il += tg_pb_put_varint(inner + il, (uint64_t)id.pid);
    }
    il += tg_pb_put_tag(inner + il, 2, TG_PB_VARINT);
    il += tg_pb_put_varint(inner + il, (uint64_t)(int64_t)uid);
    size_t body = 2 + 1 + tg_pb_varint_size(il) + il; /* request_id = 0, then field 8 (set_peer_identity) */
    if (cap < 4 + body)
        return 0;
    uint8_t *p = buf + 4;
    p += tg_pb_put_tag(p, 2, TG_PB_VARINT);
    p += tg_pb_put_varint(p, 0);
    p += tg_pb_put_tag(p, 8, TG_PB_LEN);
    p += tg_pb_put_varint(p, il);
    memcpy(p, inner, il);
    p += il;
    size_t n = (size_t)(p - (buf + 4));
    buf[0] = (uint8_t)n;
    buf[1] = (uint8_t)(n >> 8);
    buf[2] = (uint8_t)(n >> 16);
    buf[3] = (uint8_t)(n >> 24);
    return 4 + n;
}

void tg_gw_upstream_report(struct tg_gw_upstream *u, int ok)
{
    if (u->external)
        set_healthy(u, ok);
}

int tg_gw_upstream_is_healthy(const struct tg_gw_upstream *u) { return atomic_load(&u->healthy); }
int tg_gw_upstream_is_external(const struct tg_gw_upstream *u) { return u->external; }
int tg_gw_upstream_is_external_unix(const struct tg_gw_upstream *u)
{
    return u->external && u->addr.family == AF_UNIX;
}
const char *tg_gw_upstream_describe(const struct tg_gw_upstream *u) { return u->desc; }
