/* gw_listener.c: UNIX, TCP and (through gw_tls) TLS listeners for the consumer and producer
 * ports: accept, classify the peer (loopback, source address), grant roles by the listener's
 * auth mode, and hand the connection to the gateway core (see gw_listener.h). */
#include "gw_listener.h"
#include "gw_accept_pause.h"

#include <arpa/inet.h>
#include <errno.h>
#include <event2/event.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "gw_config.h"
#include "gw_core.h"
#include "gw_identity.h"
#include "gw_metrics.h"
#include "tracegate/addr.h"
#include "tracegate/log.h"
#include "tracegate/peer_cred.h"

#include "net/tls.h"

#define LOG "gw-listener"
/* accept_cb takes up to this many connections per wake-up, then lets the loop serve others; the
 * listening socket stays readable (level-triggered), so a burst is drained over a few turns */
#define ACCEPTS_PER_EVENT 64
/* A burst of clients (1,000 connecting at once: tests/integration/test_gw_burst.sh) must wait in
 * the kernel's queue, not be refused (UNIX: EAGAIN) or dropped (TCP: SYN retried 1 s later).
 * The kernel caps the value at net.core.somaxconn (4096 by default since Linux 5.4). */
#define BACKLOG 4096

struct tg_gw_listener {
    struct tg_gw *gw;
    struct tg_gw_listen_spec spec;
    int fd;
    struct event *ev;
    struct tg_gw_accept_pause pause; /* out of descriptors: accepts paused */
    size_t n_conns;
    int stopped;
    char bound[300];
    char desc[512];
    struct tg_tls_server *tls;
    enum tg_gw_listen_auth auth;
    int abstract; /* an @abstract UNIX socket: no file permissions */
};

int tg_gw_listener_tls_available(void) { return 1; }

/* The default mode: loopback binds trust loopback peers; other binds want a
 * token (or a client certificate); with neither configured (only possible
 * with --insecure) they admit everyone. Loopback peers of a non-loopback bind
 * are not trusted by default: a reverse proxy on the host would make every
 * remote client look local. */
static enum tg_gw_listen_auth resolve_auth(const struct tg_gw_listen_spec *spec, const struct tg_gw_config *cfg)
{
    if (spec->auth != TG_GW_LAUTH_DEFAULT)
        return spec->auth;
    if (spec->loopback)
        return TG_GW_LAUTH_LOCAL;
    int certs = spec->kind == TG_GW_L_TLS && (spec->ca[0] || cfg->tls_ca);
    return cfg->token_file || certs ? TG_GW_LAUTH_TOKEN : TG_GW_LAUTH_NONE;
}

static enum tg_gw_listen_auth effective_auth(const struct tg_gw_listener *l) { return l->auth; }

static const char *auth_name(enum tg_gw_listen_auth a)
{
    switch (a) {
    case TG_GW_LAUTH_LOCAL: return "local";
    case TG_GW_LAUTH_TOKEN: return "token";
    case TG_GW_LAUTH_NONE: return "none";
    default: return "default";
    }
}

/* Fills the peer description, source address and loopback flag. */
static void describe_peer(int fd, int is_unix, uint32_t prefix6, struct tg_gw_client_info *info)
{
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    snprintf(info->peer, sizeof info->peer, "fd%d", fd);
    snprintf(info->source, sizeof info->source, "unknown");
    if (is_unix) {
        struct ucred cred;
        socklen_t cl = sizeof cred;
        if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cl) == 0)
            snprintf(info->peer, sizeof info->peer, "unix(pid=%d,uid=%u)", (int)cred.pid, (unsigned)cred.uid);
        else
            snprintf(info->peer, sizeof info->peer, "unix");
        snprintf(info->source, sizeof info->source, "unix");
        info->loopback = 1;
        return;
    }
    if (getpeername(fd, (struct sockaddr *)&ss, &sl) != 0)
        return;
    tg_sockaddr_text(&ss, info->peer, sizeof info->peer);
    info->loopback = tg_sockaddr_is_loopback(&ss);
    tg_gw_source_key(&ss, prefix6, info->source, sizeof info->source);
}

/* A TLS handshake in flight: the client's description waits for it. */
struct tls_pending {
    struct tg_gw_listener *l;
    struct tg_gw_client_info info;
};

static void tls_accepted(void *arg, tg_conn *c, const struct tg_tls_peer *peer, const char *error)
{
    struct tls_pending *p = arg;
    struct tg_gw_listener *l = p->l;
    struct tg_gw *gw = l->gw;
    if (!c) {
        tg_gw_metrics_auth_failure(gw->metrics, TG_GW_T_TLS, "handshake");
        tg_gw_log_refusal(l->gw, TG_LOG_INFO, LOG, "%s: TLS handshake with %s failed: %s", l->bound, p->info.peer,
                          error ? error : "?");
        tg_gw_accept_admitted(gw, NULL, &p->info, l); /* gives the slot back */
        free(p);
        return;
    }
    if (peer && peer->cert_verified) {
        tg_gw_identity_cert(&p->info, peer->subject, gw->cert_roles);
        tg_gw_metrics_auth_success(gw->metrics, "cert");
    }
    tg_gw_accept_admitted(gw, c, &p->info, l);
    free(p);
}

/* Who counts as local on this listener and what they get. */
static void local_policy(const struct tg_gw_listener *l, struct tg_gw_local_policy *pol)
{
    const struct tg_gw *gw = l->gw;
    unsigned ceiling = l->spec.roles ? l->spec.roles : gw->local_roles;
    pol->owner_roles = ceiling;
    pol->user_roles = tg_gw_roles_cap(gw->local_user_roles, ceiling);
    pol->n_uids = l->spec.n_uids;
    memcpy(pol->uids, l->spec.uids, sizeof pol->uids);
    if (pol->n_uids == 0 && l->abstract) {
        /* an abstract socket has no permissions: anyone on the host can connect */
        pol->uids[0] = 0;
        pol->uids[1] = geteuid();
        pol->n_uids = 2;
    }
}

static void accept_one(struct tg_gw_listener *l, int fd)
{
    struct tg_gw *gw = l->gw;
    struct tg_gw_client_info info;
    memset(&info, 0, sizeof info);
    info.port = l->spec.port;
    snprintf(info.node, sizeof info.node, "%s", l->spec.node);
    int is_unix = l->spec.kind == TG_GW_L_UNIX;
    info.transport = is_unix ? TG_GW_T_UNIX : l->spec.kind == TG_GW_L_TLS ? TG_GW_T_TLS : TG_GW_T_TCP;
    describe_peer(fd, is_unix, gw->limits.source_prefix6, &info);
    if (l->spec.max_conns && l->n_conns >= l->spec.max_conns) {
        tg_gw_metrics_conn_rejected(gw->metrics, "listener_max_connections");
        tg_gw_log_refusal(gw, TG_LOG_WARN, LOG, "%s: refused %s: the listener has %zu connections", l->bound, info.peer,
                          l->n_conns);
        close(fd);
        return;
    }
    if (!is_unix) {
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
    }
    unsigned listener_roles = l->spec.roles ? l->spec.roles : gw->local_roles;
    struct tg_peer_cred cred;
    int known = info.loopback && tg_peer_cred_of(fd, &cred) == 0;
    if (known) {
        info.has_uid = 1;
        info.uid = cred.uid;
        info.pid = cred.pid;
    }
    switch (effective_auth(l)) {
    case TG_GW_LAUTH_NONE:
        info.auth = TG_GW_AUTH_NONE;
        info.roles = listener_roles;
        snprintf(info.principal, sizeof info.principal, "anonymous");
        break;
    case TG_GW_LAUTH_LOCAL:
        if (known) {
            struct tg_gw_local_policy pol;
            local_policy(l, &pol);
            if (!tg_gw_identity_local(&info, &cred, &pol))
                tg_info(LOG, "%s: %s (uid %u) is not admitted as local here: it must authenticate", l->bound,
                        info.peer, (unsigned)cred.uid);
        } else if (info.loopback) {
            tg_info(LOG, "%s: the uid of %s is unknown: it must authenticate", l->bound, info.peer);
        }
        break;
    default: break; /* token: roles stay 0 until Authenticate (or a client certificate) */
    }
    l->n_conns++;
    struct tg_conn_opts o;
    tg_gw_client_conn_opts(gw, &o);
    if (l->spec.kind == TG_GW_L_TLS) {
        /* limits first: a handshake costs CPU and memory, and nobody is authenticated yet */
        const char *label, *why;
        if (tg_gw_admit(gw, &info, &label, &why) != 0) {
            tg_gw_metrics_conn_rejected(gw->metrics, label);
            tg_gw_log_refusal(gw, TG_LOG_WARN, LOG, "%s: refused %s before the TLS handshake: %s", l->bound, info.peer,
                              why);
            close(fd);
            l->n_conns--;
            return;
        }
        struct tls_pending *p = calloc(1, sizeof *p);
        if (!p) {
            close(fd);
            tg_gw_accept_admitted(gw, NULL, &info, l);
            return;
        }
        p->l = l;
        p->info = info;
        int hs = gw->limits.handshake_timeout_ms ? (int)gw->limits.handshake_timeout_ms : 10000;
        if (tg_tls_server_accept(l->tls, gw->base, fd, hs, &o, tls_accepted, p) != 0) {
            tg_warn(LOG, "%s: cannot start a TLS handshake with %s", l->bound, info.peer);
            free(p);
            tg_gw_accept_admitted(gw, NULL, &info, l);
        }
        return;
    }
    tg_conn *c = tg_conn_new_fd(gw->base, fd, &o, NULL, NULL);
    if (!c) {
        tg_warn(LOG, "%s: out of memory accepting %s", l->bound, info.peer);
        l->n_conns--;
        return;
    }
    tg_gw_accept_from(gw, c, &info, l);
}

static void accept_cb(evutil_socket_t lfd, short what, void *arg)
{
    struct tg_gw_listener *l = arg;
    (void)what;
    for (int i = 0; i < ACCEPTS_PER_EVENT && !l->stopped; i++) {
        int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            tg_gw_accept_failed(&l->pause, l->bound, errno); /* out of descriptors: paused */
            return;
        }
        accept_one(l, fd);
    }
}

static void bound_name(struct tg_gw_listener *l)
{
    const struct tg_addr *a = &l->spec.addr;
    if (a->family == AF_UNIX) {
        snprintf(l->bound, sizeof l->bound, "%s", a->text);
        return;
    }
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    if (getsockname(l->fd, (struct sockaddr *)&ss, &sl) == 0 && (ss.ss_family == AF_INET || ss.ss_family == AF_INET6))
        tg_sockaddr_text(&ss, l->bound, sizeof l->bound);
    else
        snprintf(l->bound, sizeof l->bound, "%s", a->text);
}

struct tg_gw_listener *tg_gw_listener_new(struct tg_gw *gw, const struct tg_gw_listen_spec *spec,
                                          const struct tg_gw_config *cfg, char *err, size_t errlen)
{
    struct tg_gw_listener *l = calloc(1, sizeof *l);
    if (!l) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    l->gw = gw;
    l->spec = *spec;
    l->fd = -1;
    if (l->spec.addr.family == 0 && tg_addr_parse(l->spec.address, &l->spec.addr, err, errlen) != 0) {
        free(l);
        return NULL;
    }
    l->spec.loopback = tg_addr_is_loopback(&l->spec.addr);
    {
        const struct sockaddr_un *sun = (const struct sockaddr_un *)&l->spec.addr.ss;
        l->abstract = l->spec.addr.family == AF_UNIX && sun->sun_path[0] == '\0';
    }
    l->auth = resolve_auth(&l->spec, cfg);
    if (l->spec.kind == TG_GW_L_TLS) {
        struct tg_tls_server_config tc;
        memset(&tc, 0, sizeof tc);
        tc.cert_file = spec->cert[0] ? spec->cert : cfg->tls_cert;
        tc.key_file = spec->key[0] ? spec->key : cfg->tls_key;
        tc.ca_file = spec->ca[0] ? spec->ca : cfg->tls_ca;
        tc.require_client_cert = cfg->tls_require_client_cert;
        tc.check_files = 1;
        char e2[300];
        l->tls = tg_tls_server_new(&tc, e2, sizeof e2);
        if (!l->tls) {
            snprintf(err, errlen, "listener %s: %s", spec->text, e2);
            free(l);
            return NULL;
        }
    }
    unsigned mode = l->spec.mode ? l->spec.mode : 0600;
    l->fd = tg_addr_listen(&l->spec.addr, BACKLOG, mode);
    if (l->fd < 0) {
        snprintf(err, errlen, "listener %s: cannot listen on %s: %s", spec->text, l->spec.addr.text,
                 errno == EADDRINUSE && l->spec.addr.family == AF_UNIX ? "a live socket is already there"
                                                                       : strerror(errno));
        tg_gw_listener_free(l);
        return NULL;
    }
    bound_name(l);
    l->ev = event_new(gw->base, l->fd, EV_READ | EV_PERSIST, accept_cb, l);
    if (!l->ev || tg_gw_accept_pause_init(&l->pause, gw->base, gw, l->ev) != 0) {
        snprintf(err, errlen, "out of memory");
        tg_gw_listener_free(l);
        return NULL;
    }
    event_add(l->ev, NULL);
    char rl[64];
    tg_gw_roles_format(l->spec.roles ? l->spec.roles : gw->local_roles, rl, sizeof rl);
    enum tg_gw_listen_auth a = effective_auth(l);
    snprintf(l->desc, sizeof l->desc, "%s %s://%s (auth=%s%s%s%s)", l->spec.port == TG_GW_PORT_PRODUCER ? "producer"
                                                                                                          : "consumer",
             tg_gw_listen_kind_name(l->spec.kind), l->bound, auth_name(a),
             a == TG_GW_LAUTH_TOKEN ? "" : ", roles=", a == TG_GW_LAUTH_TOKEN ? "" : rl,
             l->spec.loopback ? "" : ", non-loopback");
    if (!l->spec.loopback && l->spec.kind != TG_GW_L_TLS)
        tg_warn(LOG, "--insecure: %s accepts plaintext connections from the network", l->desc);
    else if (!l->spec.loopback && a == TG_GW_LAUTH_NONE)
        tg_warn(LOG, "--insecure: %s accepts unauthenticated clients from the network", l->desc);
    return l;
}

void tg_gw_listener_stop(struct tg_gw_listener *l)
{
    if (l->stopped)
        return;
    l->stopped = 1;
    if (l->ev)
        event_del(l->ev);
    tg_gw_accept_pause_stop(&l->pause);
    if (l->fd >= 0) {
        close(l->fd);
        l->fd = -1;
        const struct sockaddr_un *sun = (const struct sockaddr_un *)&l->spec.addr.ss;
        if (l->spec.addr.family == AF_UNIX && sun->sun_path[0] != '\0')
            unlink(sun->sun_path);
    }
}

void tg_gw_listener_free(struct tg_gw_listener *l)
{
    if (!l)
        return;
    tg_gw_listener_stop(l);
    if (l->ev)
        event_free(l->ev);
    tg_gw_accept_pause_free(&l->pause);
    if (l->tls)
        tg_tls_server_free(l->tls);
    free(l);
}

int tg_gw_listener_reload(struct tg_gw_listener *l, char *err, size_t errlen)
{
    if (l->tls)
        return tg_tls_server_reload(l->tls, err, errlen);
    return 0;
}

const char *tg_gw_listener_describe(const struct tg_gw_listener *l) { return l->desc; }
const char *tg_gw_listener_address(const struct tg_gw_listener *l) { return l->bound; }
size_t tg_gw_listener_conn_count(const struct tg_gw_listener *l) { return l->n_conns; }

void tg_gw_listener_conn_closed(struct tg_gw_listener *l)
{
    if (l->n_conns > 0)
        l->n_conns--;
}
