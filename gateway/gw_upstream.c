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

#include "tracegate/addr.h"
#include "tracegate/log.h"
#include "tracegate/service.h"

#define LOG "gw-upstream"

struct tg_gw_upstream {
    struct event_base *base;
    enum tg_gw_port port;
    struct tg_service *svc; /* embedded */
    struct tg_addr addr;    /* external */
    int external;
    _Atomic int healthy;
    uint32_t probe_ms;
    struct event *probe_timer, *probe_io;
    int probe_fd;
    char desc[300];
};

static void set_healthy(struct tg_gw_upstream *u, int ok)
{
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

struct tg_gw_upstream *tg_gw_upstream_new_external(struct event_base *base, const char *addr, enum tg_gw_port port,
                                                   uint32_t probe_interval_ms, char *err, size_t errlen)
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
    u->probe_ms = probe_interval_ms;
    if (tg_addr_parse(addr, &u->addr, err, errlen) != 0) {
        free(u);
        return NULL;
    }
    snprintf(u->desc, sizeof u->desc, "%s", u->addr.text);
    int fd = tg_addr_connect_wait(&u->addr, 1000); /* startup only: bounded wait */
    atomic_store(&u->healthy, fd >= 0 ? 1 : 0);
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

int tg_gw_upstream_connect(struct tg_gw_upstream *u, char *err, size_t errlen)
{
    if (!u->external) {
        int fd = tg_service_connect_local(u->svc, u->port == TG_GW_PORT_PRODUCER);
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
    }
    return fd;
}

void tg_gw_upstream_report(struct tg_gw_upstream *u, int ok)
{
    if (u->external)
        set_healthy(u, ok);
}

int tg_gw_upstream_is_healthy(const struct tg_gw_upstream *u) { return atomic_load(&u->healthy); }
int tg_gw_upstream_is_external(const struct tg_gw_upstream *u) { return u->external; }
const char *tg_gw_upstream_describe(const struct tg_gw_upstream *u) { return u->desc; }
