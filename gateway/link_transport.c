/* link_transport.c: TLS/TCP dial and accept, an ssh child on a socketpair, and stdio, as one kind
 * of byte stream for gateway links (see link_transport.h). */
#include "link_transport.h"

#include <arpa/inet.h>
#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <event2/dns.h>
#include <event2/event.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "net/bulk_read.h"
#include "net/write_through.h"
#include "tracegate/addr.h"
#include "net/tls.h"
#include "tracegate/log.h"

#define LOG "link"
#define OUT_LOW (64u * 1024u)

struct tg_link_tr {
    struct event_base *base;
    struct bufferevent *in, *out; /* the same for sockets; two for stdio */
    struct bufferevent *err_bev;  /* a child's stderr */
    struct tg_write_through *wt;  /* out, once up, when it is a socket bufferevent (not TLS) */
    struct event *deadline, *up_ev, *reap_ev;
    struct tg_link_tr_cbs cbs;
    void *arg;
    int want_alpn_h2, up, failed;
    pid_t pid;
    int reap_tries;
    struct tg_link_tr_info info;
};

static void fail(struct tg_link_tr *t, const char *why)
{
    if (t->failed)
        return;
    t->failed = 1;
    if (t->deadline)
        event_del(t->deadline);
    tg_write_through_free(t->wt); /* nothing more is written, as with EV_WRITE disabled below */
    t->wt = NULL;
    bufferevent_disable(t->in, EV_READ | EV_WRITE);
    if (t->out != t->in)
        bufferevent_disable(t->out, EV_WRITE);
    if (t->cbs.on_error)
        t->cbs.on_error(t->arg, why);
}

static void describe_peer(struct tg_link_tr *t, int fd)
{
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    if (!t->info.peer[0]) /* a dialed transport already says host:port */
        snprintf(t->info.peer, sizeof t->info.peer, "fd%d", fd);
    if (fd < 0 || getpeername(fd, (struct sockaddr *)&ss, &sl) != 0)
        return;
    char ip[INET6_ADDRSTRLEN];
    tg_sockaddr_host(&ss, ip, sizeof ip, NULL);
    t->info.loopback = tg_sockaddr_is_loopback(&ss);
    if (ss.ss_family == AF_UNIX)
        snprintf(t->info.peer, sizeof t->info.peer, "unix");
    else
        tg_sockaddr_text(&ss, t->info.peer, sizeof t->info.peer);
    snprintf(t->info.source, sizeof t->info.source, "%s", ip);
}

static void become_up(struct tg_link_tr *t)
{
    if (t->up || t->failed)
        return;
    t->up = 1;
    if (t->deadline)
        event_del(t->deadline);
    if (t->info.tls) {
        struct tg_tls_peer peer;
        tg_tls_bev_peer(t->in, &peer, t->info.alpn, sizeof t->info.alpn);
        t->info.cert_verified = peer.cert_verified;
        struct tg_tls_conn_info ti;
        if (tg_tls_bev_info(t->in, &ti) == 0) {
            t->info.tls_batched = ti.batched;
            t->info.ktls_send = ti.ktls_send;
            t->info.ktls_recv = ti.ktls_recv;
        }
        snprintf(t->info.subject, sizeof t->info.subject, "%s", peer.cert_verified ? peer.subject : "");
        snprintf(t->info.cn, sizeof t->info.cn, "%s", peer.cert_verified ? peer.cn : "");
        if (t->want_alpn_h2 && strcmp(t->info.alpn, "h2") != 0) {
            fail(t, "the TLS peer did not agree on ALPN h2");
            return;
        }
    }
    /* connected: what the link queues in a loop turn is written in that turn (TLS: the batched
     * path does this under its filter) */
    if (!t->info.tls)
        t->wt = tg_write_through_new(t->out);
    int fd = bufferevent_getfd(t->in);
    if (fd >= 0 && !t->info.stdio) {
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
        describe_peer(t, fd);
    }
    if (t->cbs.on_up)
        t->cbs.on_up(t->arg, &t->info);
    if (!t->failed && t->cbs.on_read && evbuffer_get_length(bufferevent_get_input(t->in)))
        t->cbs.on_read(t->arg, bufferevent_get_input(t->in));
}

static void read_cb(struct bufferevent *bev, void *arg)
{
    struct tg_link_tr *t = arg;
    if (!t->up || t->failed)
        return; /* bytes wait for on_up (a TLS peer may send right after the handshake) */
    if (t->cbs.on_read)
        t->cbs.on_read(t->arg, bufferevent_get_input(bev));
}

static void write_cb(struct bufferevent *bev, void *arg)
{
    struct tg_link_tr *t = arg;
    (void)bev;
    if (t->up && !t->failed && t->cbs.on_drain)
        t->cbs.on_drain(t->arg);
}

static void event_cb(struct bufferevent *bev, short what, void *arg)
{
    struct tg_link_tr *t = arg;
    if (what & BEV_EVENT_CONNECTED) {
        become_up(t);
        return;
    }
    char why[256];
    if (what & BEV_EVENT_EOF) {
        snprintf(why, sizeof why, "the peer closed the connection");
    } else if (what & BEV_EVENT_ERROR) {
        int e = EVUTIL_SOCKET_ERROR();
        struct bufferevent *sock = bufferevent_get_underlying(bev); /* the batched TLS path's socket */
        int dns = bufferevent_socket_get_dns_error(sock ? sock : bev);
        unsigned long ssl = t->info.tls ? bufferevent_get_openssl_error(bev) : 0;
        if (dns) {
            snprintf(why, sizeof why, "cannot resolve the host: %s", evutil_gai_strerror(dns));
        } else if (ssl) {
            /* what OpenSSL says: a certificate the peer does not trust shows up here, and with
             * TLS 1.3 on the client only after its side of the handshake completed */
            char tmp[200];
            ERR_error_string_n(ssl, tmp, sizeof tmp);
            snprintf(why, sizeof why, "TLS %s: %s", t->up ? "error" : "handshake failed", tmp);
        } else if (t->info.tls && !t->up)
            snprintf(why, sizeof why, "TLS handshake failed%s%s", e ? ": " : "", e ? strerror(e) : "");
        else
            snprintf(why, sizeof why, "connection error: %s", e ? strerror(e) : "transport failure");
    } else {
        snprintf(why, sizeof why, "transport error");
    }
    fail(t, why);
}

static void deadline_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct tg_link_tr *t = arg;
    fail(t, t->info.tls ? "TLS handshake timed out" : "connect timed out");
}

static void up_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    become_up(arg);
}

static struct tg_link_tr *tr_new(struct event_base *base, const struct tg_link_tr_cbs *cbs, void *arg)
{
    struct tg_link_tr *t = calloc(1, sizeof *t);
    if (!t)
        return NULL;
    t->base = base;
    t->cbs = *cbs;
    t->arg = arg;
    t->pid = -1;
    return t;
}

static int arm(struct tg_link_tr *t, int deadline_ms, int up_now)
{
    bufferevent_setcb(t->in, read_cb, t->out == t->in ? write_cb : NULL, event_cb, t);
    if (t->out != t->in)
        bufferevent_setcb(t->out, NULL, write_cb, event_cb, t);
    bufferevent_setwatermark(t->out, EV_WRITE, OUT_LOW, 0);
    bufferevent_enable(t->in, EV_READ | EV_WRITE);
    if (t->out != t->in)
        bufferevent_enable(t->out, EV_WRITE);
    if (deadline_ms > 0) {
        t->deadline = evtimer_new(t->base, deadline_cb, t);
        if (!t->deadline)
            return -1;
        struct timeval tv = {deadline_ms / 1000, (deadline_ms % 1000) * 1000};
        evtimer_add(t->deadline, &tv);
    }
    if (up_now) {
        t->up_ev = evtimer_new(t->base, up_cb, t);
        if (!t->up_ev)
            return -1;
        struct timeval zero = {0, 0};
        evtimer_add(t->up_ev, &zero);
    }
    return 0;
}

struct tg_link_tr *tg_link_tr_dial(struct event_base *base, struct evdns_base *dns, const char *host, int port,
                                   const struct tg_tls_client_config *tls, int deadline_ms,
                                   const struct tg_link_tr_cbs *cbs, void *arg, char *err, size_t errlen)
{
    struct tg_link_tr *t = tr_new(base, cbs, arg);
    if (!t) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    if (tls) {
        t->in = tg_tls_client_bev(base, -1, tls, err, errlen);
        t->info.tls = 1;
        t->want_alpn_h2 = 1;
    } else {
        t->in = bufferevent_socket_new(base, -1, BEV_OPT_CLOSE_ON_FREE | BEV_OPT_DEFER_CALLBACKS);
        if (!t->in)
            snprintf(err, errlen, "out of memory");
        else
            tg_bev_bulk_read(t->in);
    }
    if (!t->in) {
        free(t);
        return NULL;
    }
    t->out = t->in;
    /* on the batched TLS path t->in is a filter: its socket bufferevent connects */
    struct bufferevent *sock = bufferevent_get_underlying(t->in);
    if (arm(t, deadline_ms, 0) != 0 ||
        bufferevent_socket_connect_hostname(sock ? sock : t->in, dns, AF_UNSPEC, host, port) != 0) {
        snprintf(err, errlen, "cannot connect to %s:%d", host, port);
        tg_link_tr_free(t);
        return NULL;
    }
    snprintf(t->info.peer, sizeof t->info.peer, "%s:%d", host, port);
    return t;
}

struct tg_link_tr *tg_link_tr_accept(struct event_base *base, int fd, struct tg_tls_server *tls, int deadline_ms,
                                     const struct tg_link_tr_cbs *cbs, void *arg, char *err, size_t errlen)
{
    struct tg_link_tr *t = tr_new(base, cbs, arg);
    if (!t) {
        close(fd);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    describe_peer(t, fd);
    if (tls) {
        t->in = tg_tls_server_accept_bev(tls, base, fd, err, errlen);
        t->info.tls = 1;
        t->want_alpn_h2 = 1;
    } else {
        t->in = bufferevent_socket_new(base, fd, BEV_OPT_CLOSE_ON_FREE | BEV_OPT_DEFER_CALLBACKS);
        if (!t->in) {
            close(fd);
            snprintf(err, errlen, "out of memory");
        } else {
            tg_bev_bulk_read(t->in);
        }
    }
    if (!t->in) {
        free(t);
        return NULL;
    }
    t->out = t->in;
    if (arm(t, deadline_ms, !tls) != 0) {
        snprintf(err, errlen, "out of memory");
        tg_link_tr_free(t);
        return NULL;
    }
    return t;
}

/* ---- a child's stderr, logged line by line ---- */

static void reap_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct tg_link_tr *t = arg;
    if (t->pid <= 0)
        return;
    int st;
    pid_t r = waitpid(t->pid, &st, WNOHANG);
    if (r == t->pid || (r < 0 && errno == ECHILD)) {
        if (r == t->pid && WIFEXITED(st) && WEXITSTATUS(st) != 0)
            tg_warn(LOG, "link command exited with status %d", WEXITSTATUS(st));
        t->pid = -1;
        return;
    }
    if (++t->reap_tries < 50) {
        struct timeval tv = {0, 100000};
        evtimer_add(t->reap_ev, &tv);
    }
}

static void err_read_cb(struct bufferevent *bev, void *arg)
{
    (void)arg;
    struct evbuffer *in = bufferevent_get_input(bev);
    char *line;
    size_t n;
    while ((line = evbuffer_readln(in, &n, EVBUFFER_EOL_LF)) != NULL) {
        tg_info(LOG, "link command: %.*s", (int)(n > 300 ? 300 : n), line);
        free(line);
    }
    if (evbuffer_get_length(in) > 4096)
        evbuffer_drain(in, evbuffer_get_length(in));
}

static void err_event_cb(struct bufferevent *bev, short what, void *arg)
{
    (void)what;
    struct tg_link_tr *t = arg;
    bufferevent_disable(bev, EV_READ);
    if (t->reap_ev)
        event_active(t->reap_ev, EV_TIMEOUT, 0);
}

struct tg_link_tr *tg_link_tr_spawn(struct event_base *base, char *const argv[], const struct tg_link_tr_cbs *cbs,
                                    void *arg, char *err, size_t errlen)
{
    int sv[2], ep[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
        snprintf(err, errlen, "socketpair: %s", strerror(errno));
        return NULL;
    }
    if (pipe2(ep, O_CLOEXEC) != 0) {
        snprintf(err, errlen, "pipe: %s", strerror(errno));
        close(sv[0]);
        close(sv[1]);
        return NULL;
    }
    pid_t pid = fork();
    if (pid < 0) {
        snprintf(err, errlen, "fork: %s", strerror(errno));
        close(sv[0]);
        close(sv[1]);
        close(ep[0]);
        close(ep[1]);
        return NULL;
    }
    if (pid == 0) {
        dup2(sv[1], 0);
        dup2(sv[1], 1);
        dup2(ep[1], 2);
        signal(SIGPIPE, SIG_DFL);
        execvp(argv[0], argv);
        dprintf(2, "cannot run %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    close(sv[1]);
    close(ep[1]);
    evutil_make_socket_nonblocking(sv[0]);
    evutil_make_socket_nonblocking(ep[0]);
    struct tg_link_tr *t = tr_new(base, cbs, arg);
    if (t)
        t->pid = pid;
    if (t)
        t->in = bufferevent_socket_new(base, sv[0], BEV_OPT_CLOSE_ON_FREE | BEV_OPT_DEFER_CALLBACKS);
    if (t && t->in)
        tg_bev_bulk_read(t->in);
    if (t)
        t->err_bev = bufferevent_socket_new(base, ep[0], BEV_OPT_CLOSE_ON_FREE | BEV_OPT_DEFER_CALLBACKS);
    if (t)
        t->reap_ev = evtimer_new(base, reap_cb, t);
    if (!t || !t->in || !t->err_bev || !t->reap_ev) {
        snprintf(err, errlen, "out of memory");
        if (t) {
            t->out = t->in;
            tg_link_tr_free(t);
        } else {
            close(sv[0]);
            close(ep[0]);
            kill(pid, SIGTERM);
            waitpid(pid, NULL, 0);
        }
        return NULL;
    }
    t->out = t->in;
    t->info.stdio = 1;
    t->info.loopback = 1;
    snprintf(t->info.peer, sizeof t->info.peer, "%s(pid %d)", argv[0], (int)pid);
    snprintf(t->info.source, sizeof t->info.source, "child");
    bufferevent_setcb(t->err_bev, err_read_cb, NULL, err_event_cb, t);
    bufferevent_enable(t->err_bev, EV_READ);
    if (arm(t, 0, 1) != 0) {
        tg_link_tr_free(t);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    return t;
}

struct tg_link_tr *tg_link_tr_stdio(struct event_base *base, const struct tg_link_tr_cbs *cbs, void *arg, char *err,
                                    size_t errlen)
{
    struct tg_link_tr *t = tr_new(base, cbs, arg);
    if (!t) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    evutil_make_socket_nonblocking(0);
    evutil_make_socket_nonblocking(1);
    t->in = bufferevent_socket_new(base, 0, BEV_OPT_DEFER_CALLBACKS);
    t->out = bufferevent_socket_new(base, 1, BEV_OPT_DEFER_CALLBACKS);
    if (!t->in || !t->out) {
        snprintf(err, errlen, "out of memory");
        tg_link_tr_free(t);
        return NULL;
    }
    tg_bev_bulk_read(t->in);
    t->info.stdio = 1;
    t->info.loopback = 1;
    snprintf(t->info.peer, sizeof t->info.peer, "stdio");
    snprintf(t->info.source, sizeof t->info.source, "stdio");
    if (arm(t, 0, 1) != 0) {
        snprintf(err, errlen, "out of memory");
        tg_link_tr_free(t);
        return NULL;
    }
    return t;
}

struct evbuffer *tg_link_tr_output(struct tg_link_tr *t) { return bufferevent_get_output(t->out); }
size_t tg_link_tr_output_len(const struct tg_link_tr *t) { return evbuffer_get_length(bufferevent_get_output(t->out)); }
const char *tg_link_tr_peer(const struct tg_link_tr *t) { return t->info.peer; }
void tg_link_tr_set_arg(struct tg_link_tr *t, void *arg) { t->arg = arg; }

void tg_link_tr_pause(struct tg_link_tr *t, int pause)
{
    if (t->failed)
        return;
    if (pause)
        bufferevent_disable(t->in, EV_READ);
    else
        bufferevent_enable(t->in, EV_READ);
}

/* A child that outlives its transport: SIGTERM, then reaped by a detached timer. */
struct orphan {
    pid_t pid;
    int tries;
    struct event *ev;
    struct orphan *next;
};
static struct orphan *orphans; /* still being reaped (the event loop's thread only) */

static void orphan_forget(struct orphan *o)
{
    for (struct orphan **pp = &orphans; *pp; pp = &(*pp)->next)
        if (*pp == o) {
            *pp = o->next;
            break;
        }
    event_free(o->ev);
    free(o);
}

void tg_link_tr_orphans_free(void)
{
    while (orphans) /* signalled already; whoever outlives us is reaped by init */
        orphan_forget(orphans);
}

static void orphan_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct orphan *o = arg;
    if (waitpid(o->pid, NULL, WNOHANG) != 0 || ++o->tries > 100) {
        if (o->tries > 100)
            kill(o->pid, SIGKILL), waitpid(o->pid, NULL, 0);
        orphan_forget(o);
        return;
    }
    struct timeval tv = {0, 50000};
    evtimer_add(o->ev, &tv);
}

void tg_link_tr_free(struct tg_link_tr *t)
{
    if (!t)
        return;
    if (t->pid > 0) {
        kill(t->pid, SIGTERM);
        struct orphan *o = calloc(1, sizeof *o);
        if (o && (o->ev = evtimer_new(t->base, orphan_cb, o)) != NULL) {
            o->pid = t->pid;
            o->next = orphans;
            orphans = o;
            event_active(o->ev, EV_TIMEOUT, 0);
        } else {
            free(o);
            waitpid(t->pid, NULL, 0);
        }
    }
    if (t->deadline)
        event_free(t->deadline);
    if (t->up_ev)
        event_free(t->up_ev);
    if (t->reap_ev)
        event_free(t->reap_ev);
    if (t->err_bev)
        bufferevent_free(t->err_bev);
    tg_write_through_free(t->wt);
    if (t->out && t->out != t->in)
        bufferevent_free(t->out);
    if (t->in)
        bufferevent_free(t->in);
    free(t);
}
