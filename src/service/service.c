/* service.c: tg_service lifecycle: the producer and consumer IPC hosts, their
 * listening sockets, in-process connections, and small shared helpers
 * (clocks, timers, id lookups). See tracegate/service.h. */
#include "service/svc.h"

#include "tracegate/log.h"

#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

int64_t tg_svc_now_ns(int clock_id)
{
    clockid_t cid;
    switch (clock_id) {
    case 1: cid = CLOCK_REALTIME; break;
    case 2: cid = CLOCK_REALTIME_COARSE; break;
    case 3: cid = CLOCK_MONOTONIC; break;
    case 4: cid = CLOCK_MONOTONIC_COARSE; break;
    case 5: cid = CLOCK_MONOTONIC_RAW; break;
    default: cid = CLOCK_BOOTTIME; break;
    }
    struct timespec ts;
    clock_gettime(cid, &ts);
    return (int64_t)ts.tv_sec * 1000000000ll + ts.tv_nsec;
}

void tg_svc_timer_set(struct event *ev, uint32_t ms)
{
    struct timeval tv = {(time_t)(ms / 1000u), (suseconds_t)((ms % 1000u) * 1000u)};
    evtimer_add(ev, &tv);
}

void tg_svc_peer_nodelay(tg_ipc_peer *peer)
{
    if (tg_ipc_peer_is_unix(peer))
        return;
    int fd = tg_conn_fd(tg_ipc_peer_conn(peer));
    int one = 1;
    if (fd >= 0)
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

tg_svc_producer *tg_svc_producer_by_id(tg_service *svc, uint16_t id)
{
    return svc->producer_index[id]; /* O(1): connecting and closing cost the same at any producer count */
}

tg_svc_buffer *tg_svc_buffer_get(tg_service *svc, uint32_t id)
{
    if (id == 0 || id >= TG_SVC_NUM_BUFFER_IDS)
        return NULL;
    return svc->buf_index[id];
}

/* Listens on each address of a comma-separated list. */
static int listen_list(tg_ipc_host *h, const char *list, unsigned mode, char *err, size_t errlen)
{
    char *copy = strdup(list);
    if (!copy) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    int rc = 0;
    char *save = NULL;
    for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        while (*tok == ' ')
            tok++;
        if (!*tok)
            continue;
        if (tg_ipc_host_listen(h, tok, mode, err, errlen) != 0) {
            rc = -1;
            break;
        }
        tg_info(TG_SVC_LOG, "listening on %s", tok);
    }
    free(copy);
    return rc;
}

tg_service *tg_service_new(struct event_base *base, const struct tg_service_opts *opts, char *err, size_t errlen)
{
    struct tg_service_opts o;
    memset(&o, 0, sizeof o);
    if (opts)
        o = *opts;
    char dprod[512], dcons[512];
    tg_service_default_sockets(dprod, sizeof dprod, dcons, sizeof dcons);

    tg_service *svc = calloc(1, sizeof *svc);
    if (!svc) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    svc->base = base;
    svc->uid = (int32_t)getuid();
    svc->buffer_budget = o.max_buffer_bytes ? o.max_buffer_bytes : tg_svc_default_buffer_budget();
    svc->buf_index = calloc(TG_SVC_NUM_BUFFER_IDS, sizeof *svc->buf_index);
    svc->producer_index = calloc((size_t)TG_SVC_MAX_PRODUCERS + 1, sizeof *svc->producer_index);
    const char *mn = o.machine_name ? o.machine_name : getenv("PERFETTO_MACHINE_NAME");
    if (mn && *mn) {
        snprintf(svc->machine_name, sizeof svc->machine_name, "%s", mn);
    } else {
        struct utsname u;
        if (uname(&u) == 0)
            snprintf(svc->machine_name, sizeof svc->machine_name, "%s", u.sysname);
    }

    struct tg_ipc_host_opts hp, hc;
    memset(&hp, 0, sizeof hp);
    tg_conn_opts_default(&hp.conn);
    /* traced drops producers whose socket stays blocked; we buffer and bound
     * instead, with a generous progress timeout. */
    hp.conn.send_timeout_ms = 10000;
    hp.honor_peer_identity = 1;
    hc = hp;
    svc->producer_host = tg_ipc_host_new(base, &hp);
    svc->consumer_host = tg_ipc_host_new(base, &hc);
    if (!svc->buf_index || !svc->producer_index || !svc->producer_host || !svc->consumer_host) {
        snprintf(err, errlen, "out of memory");
        tg_service_free(svc);
        return NULL;
    }
    tg_ipc_host_add_service(svc->producer_host, &tg_svc_producer_port_def, svc);
    if (!o.disable_relay_endpoint)
        tg_ipc_host_add_service(svc->producer_host, &tg_svc_relay_port_def, svc);
    tg_ipc_host_add_service(svc->consumer_host, &tg_svc_consumer_port_def, svc);

    const char *plist = o.producer_socks ? o.producer_socks : dprod;
    const char *clist = o.consumer_socks ? o.consumer_socks : dcons;
    unsigned pmode = o.producer_sock_mode ? o.producer_sock_mode : 0666;
    unsigned cmode = o.consumer_sock_mode ? o.consumer_sock_mode : 0600;
    if (listen_list(svc->producer_host, plist, pmode, err, errlen) != 0 ||
        listen_list(svc->consumer_host, clist, cmode, err, errlen) != 0) {
        tg_service_free(svc);
        return NULL;
    }
    return svc;
}

void tg_service_free(tg_service *svc)
{
    if (!svc)
        return;
    /* peers first: their close hooks detach producers/consumers from sessions */
    if (svc->producer_host)
        tg_ipc_host_free(svc->producer_host);
    svc->producer_host = NULL;
    if (svc->consumer_host)
        tg_ipc_host_free(svc->consumer_host);
    svc->consumer_host = NULL;
    while (svc->sessions)
        tg_svc_session_free(svc->sessions);
    while (svc->relays) {
        struct tg_svc_relay *r = svc->relays;
        svc->relays = r->next;
        free(r->sysinfo);
        for (unsigned i = 0; i < r->n_synced; i++)
            free(r->synced[i]);
        free(r);
    }
    free(svc->buf_index);
    free(svc->producer_index);
    free(svc);
}

int tg_service_adopt_fd(tg_service *svc, int fd, int producer_port)
{
    tg_ipc_host *h = producer_port ? svc->producer_host : svc->consumer_host;
    return tg_ipc_host_adopt_fd(h, fd) ? 0 : -1;
}

int tg_service_connect_local_as(tg_service *svc, int producer_port, const struct tg_ipc_identity *id)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
        return -1;
    tg_ipc_host *h = producer_port ? svc->producer_host : svc->consumer_host;
    tg_ipc_peer *p = tg_ipc_host_adopt_fd(h, sv[1]);
    if (!p) {
        close(sv[0]);
        return -1;
    }
    if (id)
        tg_ipc_peer_set_identity(p, id);
    return sv[0];
}

int tg_service_connect_local(tg_service *svc, int producer_port)
{
    return tg_service_connect_local_as(svc, producer_port, NULL);
}
