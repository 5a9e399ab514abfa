/* test_service_util.c: in-process service, raw IPC peers, scripted producers and
 * consumers for the service tests (see test_service_util.h). */
#include "test_service_util.h"

#include "tracegate/addr.h"
#include "tracegate/ipc_wire.h"
#include "tracegate/log.h"
#include "tracegate/pbwire.h"

#include "service/svc.h"
#include "tg_test_util.h"

#include "commit_data_request.pb-c.h"
#include "data_source_config.pb-c.h"
#include "ipc_frame.pb-c.h"
#include "producer_port.pb-c.h"

#include <arpa/inet.h>
#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define MAX_RAWS 64
static struct ts_raw *g_raws[MAX_RAWS];
static struct ts_prod *g_prods;
static int g_in_process;

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

int ts_env_init(struct ts_env *e)
{
    memset(g_raws, 0, sizeof g_raws);
    g_prods = NULL;
    memset(e, 0, sizeof *e);
    if (getenv("TS_DEBUG"))
        tg_log_set_level(TG_LOG_DEBUG);
    e->base = event_base_new();
    if (!e->base)
        return -1;
    struct tg_service_opts o;
    memset(&o, 0, sizeof o);
    o.producer_socks = "";
    o.consumer_socks = "";
    o.machine_name = "testhost";
    char err[256];
    e->svc = tg_service_new(e->base, &o, err, sizeof err);
    if (!e->svc) {
        fprintf(stderr, "tg_service_new: %s\n", err);
        event_base_free(e->base);
        return -1;
    }
    return 0;
}

void ts_env_free(struct ts_env *e)
{
    /* peers of a test that failed half-way are forgotten, not closed */
    memset(g_raws, 0, sizeof g_raws);
    g_prods = NULL;
    if (e->svc)
        tg_service_free(e->svc);
    if (e->base)
        event_base_free(e->base);
    memset(e, 0, sizeof *e);
}

/* ------------------------------------------------------------ raw peers */

void ts_frame_free(struct ts_frame *f)
{
    free(f->body);
    if (f->fd >= 0)
        close(f->fd);
    memset(f, 0, sizeof *f);
    f->fd = -1;
}

static void reg_raw(struct ts_raw *r)
{
    for (int i = 0; i < MAX_RAWS; i++) {
        if (!g_raws[i]) {
            g_raws[i] = r;
            return;
        }
    }
}

static void unreg_raw(struct ts_raw *r)
{
    for (int i = 0; i < MAX_RAWS; i++)
        if (g_raws[i] == r)
            g_raws[i] = NULL;
}

static int tcp_pair(int *client, int *server)
{
    int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (l < 0)
        return -1;
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t al = sizeof a;
    if (bind(l, (struct sockaddr *)&a, sizeof a) != 0 || listen(l, 1) != 0 ||
        getsockname(l, (struct sockaddr *)&a, &al) != 0) {
        close(l);
        return -1;
    }
    int c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (c < 0 || connect(c, (struct sockaddr *)&a, sizeof a) != 0) {
        if (c >= 0)
            close(c);
        close(l);
        return -1;
    }
    int s = accept4(l, NULL, NULL, SOCK_CLOEXEC);
    close(l);
    if (s < 0) {
        close(c);
        return -1;
    }
    *client = c;
    *server = s;
    return 0;
}

static int raw_open(struct ts_env *e, struct ts_raw *r, int producer_port, int tcp, const struct tg_ipc_identity *id)
{
    memset(r, 0, sizeof *r);
    r->pending_fd = -1;
    r->fd = -1;
    if (id) {
        r->fd = tg_service_connect_local_as(e->svc, producer_port, id);
        if (r->fd < 0)
            return -1;
    } else if (tcp) {
        int c, s;
        if (tcp_pair(&c, &s) != 0)
            return -1;
        if (tg_service_adopt_fd(e->svc, s, producer_port) != 0) {
            close(c);
            return -1;
        }
        int one = 1;
        setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        r->fd = c;
    } else {
        r->fd = tg_service_connect_local(e->svc, producer_port);
        if (r->fd < 0)
            return -1;
    }
    fcntl(r->fd, F_SETFL, fcntl(r->fd, F_GETFL) | O_NONBLOCK);
    r->fr = tg_frame_reader_new(4u << 20);
    reg_raw(r);
    return r->fr ? 0 : -1;
}

int ts_raw_open(struct ts_env *e, struct ts_raw *r, int producer_port, int tcp)
{
    return raw_open(e, r, producer_port, tcp, NULL);
}

int ts_raw_open_as(struct ts_env *e, struct ts_raw *r, int producer_port, const struct tg_ipc_identity *id)
{
    return raw_open(e, r, producer_port, 0, id);
}

int ts_raw_connect_addr(struct ts_raw *r, const char *addr)
{
    memset(r, 0, sizeof *r);
    r->pending_fd = -1;
    struct tg_addr a;
    char err[256];
    if (tg_addr_parse(addr, &a, err, sizeof err) != 0)
        return -1;
    r->fd = tg_addr_connect_wait(&a, 2000);
    if (r->fd < 0)
        return -1;
    fcntl(r->fd, F_SETFL, fcntl(r->fd, F_GETFL) | O_NONBLOCK);
    r->fr = tg_frame_reader_new(4u << 20);
    reg_raw(r);
    return r->fr ? 0 : -1;
}

void ts_raw_close(struct ts_raw *r)
{
    unreg_raw(r);
    if (r->fd >= 0)
        close(r->fd);
    r->fd = -1;
    if (r->fr)
        tg_frame_reader_free(r->fr);
    r->fr = NULL;
    for (size_t i = 0; i < r->nq; i++)
        ts_frame_free(&r->q[i]);
    free(r->q);
    r->q = NULL;
    r->nq = r->capq = 0;
    if (r->pending_fd >= 0)
        close(r->pending_fd);
    r->pending_fd = -1;
}

static void raw_poll(struct ts_raw *r)
{
    if (r->fd < 0 || r->eof)
        return;
    for (;;) {
        uint8_t buf[65536];
        union {
            struct cmsghdr h;
            char b[CMSG_SPACE(sizeof(int) * 4)];
        } cm;
        struct iovec iov = {buf, sizeof buf};
        struct msghdr msg;
        memset(&msg, 0, sizeof msg);
        msg.msg_iov = &iov;
        msg.msg_iovlen = 1;
        msg.msg_control = cm.b;
        msg.msg_controllen = sizeof cm.b;
        ssize_t n = recvmsg(r->fd, &msg, MSG_CMSG_CLOEXEC);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno != EAGAIN && errno != EWOULDBLOCK)
                r->eof = true;
            break;
        }
        for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
            if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
                size_t nf = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
                int *fds = (int *)(void *)CMSG_DATA(c);
                for (size_t i = 0; i < nf; i++) {
                    if (i == 0) {
                        if (r->pending_fd >= 0)
                            close(r->pending_fd);
                        r->pending_fd = fds[0];
                    } else {
                        close(fds[i]);
                    }
                }
            }
        }
        if (n == 0) {
            r->eof = true;
            break;
        }
        tg_frame_reader_feed(r->fr, buf, (size_t)n);
        const uint8_t *body;
        size_t len;
        while (tg_frame_reader_next(r->fr, &body, &len) == TG_FRAME_READY) {
            if (r->nq == r->capq) {
                size_t nc = r->capq ? r->capq * 2 : 16;
                struct ts_frame *nq = realloc(r->q, nc * sizeof *nq);
                if (!nq)
                    return;
                r->q = nq;
                r->capq = nc;
            }
            struct ts_frame *f = &r->q[r->nq];
            memset(f, 0, sizeof *f);
            f->body = malloc(len ? len : 1);
            memcpy(f->body, body, len);
            f->len = len;
            f->fd = r->pending_fd;
            r->pending_fd = -1;
            if (tg_frame_scan(f->body, f->len, &f->fi) != 0)
                memset(&f->fi, 0, sizeof f->fi);
            r->nq++;
        }
    }
}

static int raw_take_matching(struct ts_raw *r, uint64_t rid, struct ts_frame *out)
{
    for (size_t i = 0; i < r->nq; i++) {
        if (rid && r->q[i].fi.request_id != rid)
            continue;
        *out = r->q[i];
        memmove(&r->q[i], &r->q[i + 1], (r->nq - i - 1) * sizeof r->q[0]);
        r->nq--;
        /* pointers in fi point into body: still valid (body moved by value) */
        return 1;
    }
    return 0;
}

int ts_raw_take(struct ts_raw *r, uint64_t rid, struct ts_frame *out)
{
    raw_poll(r);
    return raw_take_matching(r, rid, out);
}

size_t ts_raw_count(const struct ts_raw *r, uint64_t rid)
{
    size_t n = 0;
    for (size_t i = 0; i < r->nq; i++)
        if (!rid || r->q[i].fi.request_id == rid)
            n++;
    return n;
}

static void pump_flags(struct ts_env *e, int flags)
{
    event_base_loop(e->base, flags);
    for (int i = 0; i < MAX_RAWS; i++)
        if (g_raws[i])
            raw_poll(g_raws[i]);
    if (!g_in_process) {
        g_in_process = 1;
        for (struct ts_prod *p = g_prods; p; p = p->next)
            ts_prod_process(p);
        g_in_process = 0;
    }
}

static void pump_once(struct ts_env *e) { pump_flags(e, EVLOOP_NONBLOCK); }

void ts_pump(struct ts_env *e, int ms)
{
    uint64_t end = now_ms() + (uint64_t)ms;
    do {
        pump_once(e);
        usleep(300);
    } while (now_ms() < end);
}

size_t ts_svc_count(struct ts_env *e, enum ts_svc_what what)
{
    size_t n = 0;
    switch (what) {
    case TS_SVC_PRODUCERS:
        for (tg_svc_producer *p = e->svc->producers; p; p = p->next)
            n++;
        break;
    case TS_SVC_CONSUMERS:
        for (tg_svc_consumer *c = e->svc->consumers; c; c = c->next)
            n++;
        break;
    case TS_SVC_SESSIONS:
        for (tg_svc_session *s = e->svc->sessions; s; s = s->next)
            n++;
        break;
    }
    return n;
}

struct svc_count_wait {
    struct ts_env *e;
    enum ts_svc_what what;
    size_t want;
};

static int svc_count_is(void *arg)
{
    struct svc_count_wait *w = arg;
    return ts_svc_count(w->e, w->what) == w->want;
}

int ts_wait_svc_count(struct ts_env *e, enum ts_svc_what what, size_t want, int timeout_ms)
{
    struct svc_count_wait w = {e, what, want};
    return ts_pump_until(e, svc_count_is, &w, timeout_ms);
}

/* pumps with flags until done(arg), the scaled safety net timeout_ms aside */
static int until(struct ts_env *e, int flags, int (*done)(void *), void *arg, int timeout_ms)
{
    uint64_t end = now_ms() + (uint64_t)tg_test_ms(timeout_ms);
    for (;;) {
        pump_flags(e, flags);
        if (done(arg))
            return 1;
        if (now_ms() >= end)
            return 0;
        usleep(300);
    }
}

int ts_step_until(struct ts_env *e, int (*done)(void *), void *arg, int timeout_ms)
{
    return until(e, EVLOOP_ONCE | EVLOOP_NONBLOCK, done, arg, timeout_ms);
}

int ts_pump_until(struct ts_env *e, int (*done)(void *), void *arg, int timeout_ms)
{
    return until(e, EVLOOP_NONBLOCK, done, arg, timeout_ms);
}

int ts_raw_wait(struct ts_env *e, struct ts_raw *r, uint64_t rid, struct ts_frame *out, int timeout_ms)
{
    uint64_t end = now_ms() + (uint64_t)tg_test_ms(timeout_ms);
    for (;;) {
        raw_poll(r);
        if (raw_take_matching(r, rid, out))
            return 1;
        if (now_ms() >= end)
            return 0;
        pump_once(e);
        if (raw_take_matching(r, rid, out))
            return 1;
        usleep(200);
    }
}

int ts_raw_send(struct ts_env *e, struct ts_raw *r, const void *data, size_t len, int fd)
{
    const uint8_t *p = data;
    uint64_t end = now_ms() + (uint64_t)tg_test_ms(10000);
    while (len > 0) {
        struct iovec iov = {(void *)p, len};
        struct msghdr msg;
        memset(&msg, 0, sizeof msg);
        msg.msg_iov = &iov;
        msg.msg_iovlen = 1;
        union {
            struct cmsghdr h;
            char b[CMSG_SPACE(sizeof(int))];
        } cm;
        if (fd >= 0) {
            memset(&cm, 0, sizeof cm);
            msg.msg_control = cm.b;
            msg.msg_controllen = sizeof cm.b;
            struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
            c->cmsg_level = SOL_SOCKET;
            c->cmsg_type = SCM_RIGHTS;
            c->cmsg_len = CMSG_LEN(sizeof(int));
            memcpy(CMSG_DATA(c), &fd, sizeof fd);
        }
        ssize_t n = sendmsg(r->fd, &msg, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                if (now_ms() > end)
                    return -1;
                pump_once(e);
                continue;
            }
            return -1;
        }
        fd = -1;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

int ts_raw_send_frame(struct ts_env *e, struct ts_raw *r, const void *body, size_t len, int fd)
{
    uint8_t *buf = malloc(len + 4);
    if (!buf)
        return -1;
    tg_frame_put_header(buf, (uint32_t)len);
    memcpy(buf + 4, body, len);
    int rc = ts_raw_send(e, r, buf, len + 4, fd);
    free(buf);
    return rc;
}

int ts_raw_bind(struct ts_env *e, struct ts_raw *r, uint64_t rid, const char *service, struct ts_frame *reply)
{
    uint8_t buf[256];
    size_t n = tg_ipc_encode_bind(buf, sizeof buf, rid, service);
    if (!n || ts_raw_send_frame(e, r, buf, n, -1) != 0)
        return -1;
    struct ts_frame f;
    if (!ts_raw_wait(e, r, rid, &f, 5000))
        return -1;
    if (reply)
        *reply = f;
    else
        ts_frame_free(&f);
    return 0;
}

int ts_raw_invoke_bytes(struct ts_env *e, struct ts_raw *r, uint64_t rid, uint32_t sid, uint32_t mid,
                        const uint8_t *args, size_t len, int drop_reply, int fd)
{
    size_t need = tg_ipc_encode_invoke(NULL, 0, rid, sid, mid, args, len, drop_reply);
    uint8_t *buf = malloc(need);
    if (!buf)
        return -1;
    tg_ipc_encode_invoke(buf, need, rid, sid, mid, args, len, drop_reply);
    int rc = ts_raw_send_frame(e, r, buf, need, fd);
    free(buf);
    return rc;
}

int ts_raw_invoke(struct ts_env *e, struct ts_raw *r, uint64_t rid, uint32_t sid, uint32_t mid,
                  const ProtobufCMessage *req, int drop_reply, int fd)
{
    size_t n = req ? protobuf_c_message_get_packed_size(req) : 0;
    uint8_t *args = malloc(n ? n : 1);
    if (!args)
        return -1;
    memset(args, 0, n ? n : 1);
    if (req)
        protobuf_c_message_pack(req, args);
    int rc = ts_raw_invoke_bytes(e, r, rid, sid, mid, args, n, drop_reply, fd);
    free(args);
    return rc;
}

/* ------------------------------------------------------------ producers */

static void prod_reg(struct ts_prod *p)
{
    p->next = g_prods;
    g_prods = p;
}

static void prod_unreg(struct ts_prod *p)
{
    for (struct ts_prod **pp = &g_prods; *pp; pp = &(*pp)->next) {
        if (*pp == p) {
            *pp = p->next;
            return;
        }
    }
}

int ts_prod_call(struct ts_prod *p, uint32_t mid, const ProtobufCMessage *req, struct ts_frame *reply)
{
    uint64_t rid = ++p->rid;
    if (ts_raw_invoke(p->e, &p->r, rid, 1, mid, req, 0, -1) != 0)
        return -1;
    struct ts_frame f;
    if (!ts_raw_wait(p->e, &p->r, rid, &f, 10000))
        return -1;
    int ok = f.fi.success;
    if (reply)
        *reply = f;
    else
        ts_frame_free(&f);
    return ok;
}

int ts_prod_trigger(struct ts_prod *p, const char *name, size_t times)
{
    char **names = calloc(times ? times : 1, sizeof *names);
    if (!names)
        return -1;
    for (size_t i = 0; i < times; i++)
        names[i] = (char *)name;
    Perfetto__Protos__ActivateTriggersRequest rq = PERFETTO__PROTOS__ACTIVATE_TRIGGERS_REQUEST__INIT;
    rq.n_trigger_names = times;
    rq.trigger_names = names;
    int rc = ts_prod_call(p, TS_P_TRIGGERS, &rq.base, NULL);
    free(names);
    return rc;
}

int ts_prod_started(void *p) { return ((struct ts_prod *)p)->n_start >= 1; }

void ts_prod_opts_init(struct ts_prod_opts *o, const char *name, const char *ds_name)
{
    memset(o, 0, sizeof *o);
    o->name = name;
    o->ds_name = ds_name;
    o->auto_ack_flush = 1;
    o->auto_notify_stop = 1;
}

static int prod_send_drop(struct ts_prod *p, uint32_t mid, const ProtobufCMessage *req)
{
    return ts_raw_invoke(p->e, &p->r, ++p->rid, 1, mid, req, 1, -1);
}

int ts_prod_connect(struct ts_env *e, struct ts_prod *p, const struct ts_prod_opts *o)
{
    memset(p, 0, sizeof *p);
    p->e = e;
    p->o = *o;
    p->smb_fd = -1;
    if ((o->addr ? ts_raw_connect_addr(&p->r, o->addr) : ts_raw_open(e, &p->r, 1, o->tcp)) != 0)
        return -1;
    p->rid = 1;
    if (o->identity_hint) {
        Perfetto__Protos__IPCFrame fr = PERFETTO__PROTOS__IPCFRAME__INIT;
        Perfetto__Protos__IPCFrame__SetPeerIdentity id = PERFETTO__PROTOS__IPCFRAME__SET_PEER_IDENTITY__INIT;
        id.has_pid = id.has_uid = 1;
        id.pid = 4242;
        id.uid = 1234;
        id.machine_id_hint = (char *)o->identity_hint;
        id.machine_name = (char *)o->machine_name;
        fr.msg_case = PERFETTO__PROTOS__IPCFRAME__MSG_SET_PEER_IDENTITY;
        fr.set_peer_identity = &id;
        uint8_t buf[512];
        size_t n = protobuf_c_message_pack(&fr.base, buf);
        if (ts_raw_send_frame(e, &p->r, buf, n, -1) != 0)
            return -1;
    }
    if (ts_raw_bind(e, &p->r, 1, "ProducerPort", NULL) != 0)
        return -1;
    Perfetto__Protos__InitializeConnectionRequest ic = PERFETTO__PROTOS__INITIALIZE_CONNECTION_REQUEST__INIT;
    ic.producer_name = (char *)(o->name ? o->name : "test_producer");
    ic.has_smb_scraping_mode = 1;
    ic.smb_scraping_mode =
        o->scraping ? PERFETTO__PROTOS__INITIALIZE_CONNECTION_REQUEST__PRODUCER_SMBSCRAPING_MODE__SMB_SCRAPING_ENABLED
                    : PERFETTO__PROTOS__INITIALIZE_CONNECTION_REQUEST__PRODUCER_SMBSCRAPING_MODE__SMB_SCRAPING_DISABLED;
    ic.has_shared_memory_size_hint_bytes = 1;
    ic.shared_memory_size_hint_bytes = o->size_hint;
    ic.has_shared_memory_page_size_hint_bytes = 1;
    ic.shared_memory_page_size_hint_bytes = o->page_hint;
    ic.sdk_version = (char *)"tracegate-test";
    uint64_t init_rid = ++p->rid;
    if (ts_raw_invoke(e, &p->r, init_rid, 1, TS_P_INIT, &ic.base, 0, -1) != 0)
        return -1;
    p->async_rid = ++p->rid;
    if (!o->no_async && ts_raw_invoke(e, &p->r, p->async_rid, 1, TS_P_ASYNC, NULL, 0, -1) != 0)
        return -1;
    struct ts_frame f;
    if (!ts_raw_wait(e, &p->r, init_rid, &f, 5000))
        return -1;
    if (f.fi.success) {
        Perfetto__Protos__InitializeConnectionResponse *resp =
            perfetto__protos__initialize_connection_response__unpack(NULL, f.fi.payload_len, f.fi.payload);
        if (resp) {
            p->init_ok = true;
            p->emulation_reply = resp->use_shmem_emulation;
            perfetto__protos__initialize_connection_response__free_unpacked(resp, NULL);
        }
    }
    ts_frame_free(&f);
    if (!p->init_ok)
        return -1;
    prod_reg(p);
    if (o->ds_name && *o->ds_name) {
        Perfetto__Protos__DataSourceDescriptor d = PERFETTO__PROTOS__DATA_SOURCE_DESCRIPTOR__INIT;
        d.name = (char *)o->ds_name;
        d.has_will_notify_on_start = 1;
        d.will_notify_on_start = o->notify_start;
        d.has_will_notify_on_stop = 1;
        d.will_notify_on_stop = o->notify_stop;
        d.has_no_flush = 1;
        d.no_flush = o->no_flush;
        d.has_handles_incremental_state_clear = 1;
        d.handles_incremental_state_clear = o->handles_clear;
        Perfetto__Protos__RegisterDataSourceRequest rq = PERFETTO__PROTOS__REGISTER_DATA_SOURCE_REQUEST__INIT;
        rq.data_source_descriptor = &d;
        if (ts_prod_call(p, TS_P_REG_DS, &rq.base, NULL) != 1)
            return -1;
    }
    return 0;
}

void ts_prod_close(struct ts_prod *p)
{
    prod_unreg(p);
    ts_raw_close(&p->r);
    if (p->map) {
        if (p->o.tcp)
            free(p->map);
        else
            munmap(p->map, p->map_size);
    }
    p->map = NULL;
    if (p->smb_fd >= 0)
        close(p->smb_fd);
    p->smb_fd = -1;
    for (size_t i = 0; i < p->n_pending; i++)
        free(p->pending[i].data);
    free(p->pending);
    p->pending = NULL;
    p->n_pending = p->cap_pending = 0;
    for (int i = 0; i < TS_MAX_INST; i++)
        free(p->inst_cfg[i]);
    memset(p->inst_cfg, 0, sizeof p->inst_cfg);
}

static void on_setup_tracing(struct ts_prod *p, const Perfetto__Protos__GetAsyncCommandResponse__SetupTracing *st,
                             int fd)
{
    p->setup_tracing_count++;
    size_t page = st->has_shared_buffer_page_size_kb ? (size_t)st->shared_buffer_page_size_kb * 1024u : 4096u;
    p->page_size = page;
    if (p->o.tcp) {
        if (fd >= 0)
            close(fd);
        p->map_size = 1u << 20;
        if (posix_memalign(&p->map, 4096, p->map_size) != 0)
            return;
        memset(p->map, 0, p->map_size);
    } else {
        if (fd < 0)
            return;
        struct stat sb;
        if (fstat(fd, &sb) != 0) {
            close(fd);
            return;
        }
        p->map_size = (size_t)sb.st_size;
        p->map = mmap(NULL, p->map_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (p->map == MAP_FAILED) {
            p->map = NULL;
            close(fd);
            return;
        }
        p->smb_fd = fd;
    }
    p->have_smb = tg_smb_init(&p->smb, p->map, p->map_size, page) == TG_SMB_OK;
}

void ts_prod_process(struct ts_prod *p)
{
    if (p->ignore_cmds)
        return;
    struct ts_frame f;
    while (raw_take_matching(&p->r, p->async_rid, &f)) {
        Perfetto__Protos__GetAsyncCommandResponse *cmd =
            f.fi.success ? perfetto__protos__get_async_command_response__unpack(NULL, f.fi.payload_len, f.fi.payload)
                         : NULL;
        if (!cmd) {
            ts_frame_free(&f);
            continue;
        }
        switch (cmd->cmd_case) {
        case PERFETTO__PROTOS__GET_ASYNC_COMMAND_RESPONSE__CMD_SETUP_TRACING:
            on_setup_tracing(p, cmd->setup_tracing, f.fd);
            f.fd = -1;
            break;
        case PERFETTO__PROTOS__GET_ASYNC_COMMAND_RESPONSE__CMD_SETUP_DATA_SOURCE:
            if (p->n_setup < TS_MAX_INST) {
                const Perfetto__Protos__DataSourceConfig *dc = cmd->setup_data_source->config;
                p->inst[p->n_setup] = cmd->setup_data_source->new_instance_id;
                p->inst_buffer[p->n_setup] = dc ? dc->target_buffer : 0;
                if (dc) {
                    size_t n = protobuf_c_message_get_packed_size(&dc->base);
                    p->inst_cfg[p->n_setup] = malloc(n ? n : 1);
                    protobuf_c_message_pack(&dc->base, p->inst_cfg[p->n_setup]);
                    p->inst_cfg_len[p->n_setup] = n;
                }
            }
            p->n_setup++;
            break;
        case PERFETTO__PROTOS__GET_ASYNC_COMMAND_RESPONSE__CMD_START_DATA_SOURCE:
            p->n_start++;
            if (p->o.notify_start) {
                Perfetto__Protos__NotifyDataSourceStartedRequest rq =
                    PERFETTO__PROTOS__NOTIFY_DATA_SOURCE_STARTED_REQUEST__INIT;
                rq.has_data_source_id = 1;
                rq.data_source_id = cmd->start_data_source->new_instance_id;
                prod_send_drop(p, TS_P_NOTIFY_STARTED, &rq.base);
            }
            break;
        case PERFETTO__PROTOS__GET_ASYNC_COMMAND_RESPONSE__CMD_STOP_DATA_SOURCE:
            if (p->n_stop < TS_MAX_INST)
                p->stopped[p->n_stop] = cmd->stop_data_source->instance_id;
            p->n_stop++;
            if (p->o.notify_stop && p->o.auto_notify_stop) {
                Perfetto__Protos__NotifyDataSourceStoppedRequest rq =
                    PERFETTO__PROTOS__NOTIFY_DATA_SOURCE_STOPPED_REQUEST__INIT;
                rq.has_data_source_id = 1;
                rq.data_source_id = cmd->stop_data_source->instance_id;
                prod_send_drop(p, TS_P_NOTIFY_STOPPED, &rq.base);
            }
            break;
        case PERFETTO__PROTOS__GET_ASYNC_COMMAND_RESPONSE__CMD_FLUSH:
            p->n_flush++;
            p->last_flush_rid = cmd->flush->request_id;
            if (p->o.auto_ack_flush) {
                Perfetto__Protos__CommitDataRequest rq = PERFETTO__PROTOS__COMMIT_DATA_REQUEST__INIT;
                rq.has_flush_request_id = 1;
                rq.flush_request_id = cmd->flush->request_id;
                prod_send_drop(p, TS_P_COMMIT, &rq.base);
            }
            break;
        case PERFETTO__PROTOS__GET_ASYNC_COMMAND_RESPONSE__CMD_CLEAR_INCREMENTAL_STATE:
            p->n_clear++;
            break;
        default:
            break;
        }
        perfetto__protos__get_async_command_response__free_unpacked(cmd, NULL);
        ts_frame_free(&f);
    }
}

struct wait_started {
    struct ts_prod *p;
    int n;
};

static int started_done(void *arg)
{
    struct wait_started *w = arg;
    return w->p->n_start >= w->n;
}

int ts_prod_wait_started(struct ts_prod *p, int n, int timeout_ms)
{
    struct wait_started w = {p, n};
    return ts_pump_until(p->e, started_done, &w, timeout_ms);
}

static void on_commit(void *ctx, const struct tg_smb_commit *c)
{
    struct ts_prod *p = ctx;
    if (p->n_pending == p->cap_pending) {
        size_t nc = p->cap_pending ? p->cap_pending * 2 : 16;
        struct ts_chunk_ref *n = realloc(p->pending, nc * sizeof *n);
        if (!n)
            return;
        p->pending = n;
        p->cap_pending = nc;
    }
    struct ts_chunk_ref *r = &p->pending[p->n_pending++];
    memset(r, 0, sizeof *r);
    r->page = (uint32_t)c->page;
    r->chunk = c->chunk;
    r->target = c->target_buffer;
    if (c->chunk_data) {
        r->data = malloc(c->chunk_size);
        memcpy(r->data, c->chunk_data, c->chunk_size);
        r->len = c->chunk_size;
    }
    if (p->commit_immediately && p->n_pending >= (p->commit_batch ? p->commit_batch : 1))
        ts_prod_commit(p, 0);
}

int ts_prod_writer(struct ts_prod *p, struct tg_smb_writer *w, uint16_t writer_id, uint32_t target)
{
    if (!p->have_smb)
        return -1;
    struct tg_smb_writer_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.smb = &p->smb;
    cfg.writer_id = writer_id;
    cfg.target_buffer = target;
    cfg.emulation = p->o.tcp != 0;
    cfg.commit = on_commit;
    cfg.commit_ctx = p;
    return tg_smb_writer_init(w, &cfg) == TG_SMB_WRITER_OK ? 0 : -1;
}

int ts_prod_register_writer(struct ts_prod *p, uint16_t writer_id, uint32_t target)
{
    Perfetto__Protos__RegisterTraceWriterRequest rq = PERFETTO__PROTOS__REGISTER_TRACE_WRITER_REQUEST__INIT;
    rq.has_trace_writer_id = 1;
    rq.trace_writer_id = writer_id;
    rq.has_target_buffer = 1;
    rq.target_buffer = target;
    return ts_prod_call(p, TS_P_REG_WRITER, &rq.base, NULL) == 1 ? 0 : -1;
}

int ts_prod_commit(struct ts_prod *p, uint64_t flush_rid)
{
    size_t n = p->n_pending;
    Perfetto__Protos__CommitDataRequest rq = PERFETTO__PROTOS__COMMIT_DATA_REQUEST__INIT;
    Perfetto__Protos__CommitDataRequest__ChunksToMove *mv = calloc(n + 1, sizeof *mv);
    Perfetto__Protos__CommitDataRequest__ChunksToMove **mvp = calloc(n + 1, sizeof *mvp);
    for (size_t i = 0; i < n; i++) {
        perfetto__protos__commit_data_request__chunks_to_move__init(&mv[i]);
        mv[i].has_page = mv[i].has_chunk = mv[i].has_target_buffer = 1;
        mv[i].page = p->pending[i].page;
        mv[i].chunk = p->pending[i].chunk;
        mv[i].target_buffer = p->pending[i].target;
        if (p->pending[i].data) {
            mv[i].has_data = 1;
            mv[i].data.data = p->pending[i].data;
            mv[i].data.len = p->pending[i].len;
        }
        mvp[i] = &mv[i];
    }
    rq.n_chunks_to_move = n;
    rq.chunks_to_move = mvp;
    if (flush_rid) {
        rq.has_flush_request_id = 1;
        rq.flush_request_id = flush_rid;
    }
    /* the pending list is consumed before waiting (the wait may add more) */
    struct ts_chunk_ref *old = p->pending;
    p->pending = NULL;
    p->n_pending = p->cap_pending = 0;
    int rc = ts_prod_call(p, TS_P_COMMIT, &rq.base, NULL) == 1 ? 0 : -1;
    for (size_t i = 0; i < n; i++)
        free(old[i].data);
    free(old);
    free(mv);
    free(mvp);
    return rc;
}

/* ------------------------------------------------------------ consumers */

int ts_cons_connect_as(struct ts_env *e, struct ts_cons *c, const struct tg_ipc_identity *id)
{
    memset(c, 0, sizeof *c);
    c->e = e;
    if (raw_open(e, &c->r, 0, 0, id) != 0)
        return -1;
    c->rid = 1;
    return ts_raw_bind(e, &c->r, 1, "ConsumerPort", NULL);
}

int ts_cons_connect(struct ts_env *e, struct ts_cons *c)
{
    return ts_cons_connect_as(e, c, NULL);
}

void ts_cons_close(struct ts_cons *c)
{
    ts_raw_close(&c->r);
}

uint64_t ts_cons_enable(struct ts_cons *c, const Perfetto__Protos__TraceConfig *cfg, int fd)
{
    Perfetto__Protos__EnableTracingRequest rq = PERFETTO__PROTOS__ENABLE_TRACING_REQUEST__INIT;
    rq.trace_config = (Perfetto__Protos__TraceConfig *)cfg;
    c->enable_rid = ++c->rid;
    if (ts_raw_invoke(c->e, &c->r, c->enable_rid, 1, TS_C_ENABLE, &rq.base, 0, fd) != 0)
        return 0;
    return c->enable_rid;
}

int ts_cons_wait_enable(struct ts_cons *c, int timeout_ms, char *error, size_t errlen)
{
    struct ts_frame f;
    if (!ts_raw_wait(c->e, &c->r, c->enable_rid, &f, timeout_ms))
        return 0;
    if (error && errlen)
        error[0] = 0;
    if (f.fi.success) {
        Perfetto__Protos__EnableTracingResponse *r =
            perfetto__protos__enable_tracing_response__unpack(NULL, f.fi.payload_len, f.fi.payload);
        if (r) {
            if (r->error && error)
                snprintf(error, errlen, "%s", r->error);
            perfetto__protos__enable_tracing_response__free_unpacked(r, NULL);
        }
    } else if (error) {
        snprintf(error, errlen, "rejected");
    }
    ts_frame_free(&f);
    return 1;
}

int ts_cons_call(struct ts_cons *c, uint32_t mid, const ProtobufCMessage *req, struct ts_frame *reply, int timeout_ms)
{
    uint64_t rid = ++c->rid;
    if (ts_raw_invoke(c->e, &c->r, rid, 1, mid, req, 0, -1) != 0)
        return -1;
    struct ts_frame f;
    if (!ts_raw_wait(c->e, &c->r, rid, &f, timeout_ms))
        return -1;
    int ok = f.fi.success;
    if (reply)
        *reply = f;
    else
        ts_frame_free(&f);
    return ok;
}

int ts_cons_clone(struct ts_cons *c, uint64_t session_id, char *err, size_t errlen)
{
    Perfetto__Protos__CloneSessionRequest cr = PERFETTO__PROTOS__CLONE_SESSION_REQUEST__INIT;
    cr.selector_case = PERFETTO__PROTOS__CLONE_SESSION_REQUEST__SELECTOR_SESSION_ID;
    cr.session_id = session_id;
    struct ts_frame f;
    int rc = ts_cons_call(c, TS_C_CLONE, &cr.base, &f, 10000);
    if (rc != 1) {
        if (rc == 0)
            ts_frame_free(&f);
        return -1;
    }
    Perfetto__Protos__CloneSessionResponse *r =
        perfetto__protos__clone_session_response__unpack(NULL, f.fi.payload_len, f.fi.payload);
    ts_frame_free(&f);
    if (!r)
        return -1;
    int ok = r->success ? 1 : 0;
    snprintf(err, errlen, "%s", r->error ? r->error : "");
    perfetto__protos__clone_session_response__free_unpacked(r, NULL);
    return ok;
}

static int push_packet(struct ts_trace *t, struct ts_packet *pk)
{
    if (t->n == t->cap) {
        size_t nc = t->cap ? t->cap * 2 : 64;
        struct ts_packet *n = realloc(t->pk, nc * sizeof *n);
        if (!n)
            return -1;
        t->pk = n;
        t->cap = nc;
    }
    t->pk[t->n++] = *pk;
    return 0;
}

int ts_trace_add_reply(struct ts_trace *t, const uint8_t *p, size_t len, struct ts_packet *partial)
{
    struct tg_pb_reader r;
    struct tg_pb_field f;
    tg_pb_reader_init(&r, p, len);
    int rc;
    while ((rc = tg_pb_next(&r, &f)) == 1) {
        if (f.number != 2 || f.wire != TG_PB_LEN)
            continue;
        struct tg_pb_reader sr;
        struct tg_pb_field sf;
        tg_pb_reader_init(&sr, f.data, f.len);
        const uint8_t *data = NULL;
        size_t dlen = 0;
        int last = 0;
        while (tg_pb_next(&sr, &sf) == 1) {
            if (sf.number == 1 && sf.wire == TG_PB_LEN) {
                data = sf.data;
                dlen = sf.len;
            } else if (sf.number == 2 && sf.wire == TG_PB_VARINT) {
                last = sf.value != 0;
            }
        }
        uint8_t *nd = realloc(partial->data, partial->len + dlen + 1);
        if (!nd)
            return -1;
        partial->data = nd;
        if (dlen)
            memcpy(partial->data + partial->len, data, dlen);
        partial->len += dlen;
        partial->nslices++;
        free(partial->trusted);
        partial->trusted = malloc(dlen + 1);
        if (dlen)
            memcpy(partial->trusted, data, dlen);
        partial->trusted_len = dlen;
        if (last) {
            if (partial->nslices < 2) {
                free(partial->trusted);
                partial->trusted = NULL;
                partial->trusted_len = 0;
            }
            if (push_packet(t, partial) != 0)
                return -1;
            memset(partial, 0, sizeof *partial);
        }
    }
    return rc == 0 ? 0 : -1;
}

int ts_cons_read(struct ts_cons *c, struct ts_trace *t, int timeout_ms)
{
    uint64_t rid = ++c->rid;
    if (ts_raw_invoke(c->e, &c->r, rid, 1, TS_C_READ, NULL, 0, -1) != 0)
        return -1;
    struct ts_packet partial;
    memset(&partial, 0, sizeof partial);
    for (;;) {
        struct ts_frame f;
        if (!ts_raw_wait(c->e, &c->r, rid, &f, timeout_ms)) {
            t->failed = true;
            break;
        }
        t->replies++;
        if (!f.fi.success) {
            t->failed = true;
            ts_frame_free(&f);
            break;
        }
        if (f.fi.payload_len > t->max_reply)
            t->max_reply = f.fi.payload_len;
        if (ts_trace_add_reply(t, f.fi.payload, f.fi.payload_len, &partial) != 0)
            t->failed = true;
        int more = f.fi.has_more;
        ts_frame_free(&f);
        if (!more)
            break;
    }
    if (partial.nslices)
        t->bad_has_more = true; /* a packet was left unfinished */
    free(partial.data);
    free(partial.trusted);
    return t->failed ? -1 : 0;
}

void ts_trace_free(struct ts_trace *t)
{
    for (size_t i = 0; i < t->n; i++) {
        free(t->pk[i].data);
        free(t->pk[i].trusted);
    }
    free(t->pk);
    memset(t, 0, sizeof *t);
}

size_t ts_trace_count(const struct ts_trace *t, const void *needle, size_t nlen)
{
    size_t n = 0;
    for (size_t i = 0; i < t->n; i++)
        if (t->pk[i].len >= nlen && memmem(t->pk[i].data, t->pk[i].len, needle, nlen))
            n++;
    return n;
}

/* ------------------------------------------------------------ configs */

void ts_cfg_init(struct ts_cfg *c, uint32_t size_kb, int discard, const char *ds_name, uint32_t duration_ms)
{
    memset(c, 0, sizeof *c);
    perfetto__protos__trace_config__init(&c->tc);
    for (int i = 0; i < 4; i++) {
        perfetto__protos__trace_config__buffer_config__init(&c->buf[i]);
        c->bufp[i] = &c->buf[i];
        perfetto__protos__trace_config__data_source__init(&c->ds[i]);
        perfetto__protos__data_source_config__init(&c->dsc[i]);
        c->ds[i].config = &c->dsc[i];
        c->dsp[i] = &c->ds[i];
    }
    c->buf[0].has_size_kb = 1;
    c->buf[0].size_kb = size_kb;
    c->buf[0].has_fill_policy = 1;
    c->buf[0].fill_policy = discard ? PERFETTO__PROTOS__TRACE_CONFIG__BUFFER_CONFIG__FILL_POLICY__DISCARD
                                    : PERFETTO__PROTOS__TRACE_CONFIG__BUFFER_CONFIG__FILL_POLICY__RING_BUFFER;
    c->tc.n_buffers = 1;
    c->tc.buffers = c->bufp;
    if (ds_name) {
        c->dsc[0].name = (char *)ds_name;
        c->tc.n_data_sources = 1;
        c->tc.data_sources = c->dsp;
    }
    if (duration_ms) {
        c->tc.has_duration_ms = 1;
        c->tc.duration_ms = duration_ms;
    }
}

/* ------------------------------------------------------------ packets */

int ts_pkt_varint(const uint8_t *p, size_t len, uint32_t field, uint64_t *out)
{
    struct tg_pb_reader r;
    struct tg_pb_field f;
    int found = 0;
    tg_pb_reader_init(&r, p, len);
    while (tg_pb_next(&r, &f) == 1) {
        if (f.number == field && f.wire == TG_PB_VARINT) {
            *out = f.value;
            found = 1;
        }
    }
    return found;
}

int ts_pkt_bytes(const uint8_t *p, size_t len, uint32_t field, const uint8_t **out, size_t *olen)
{
    struct tg_pb_reader r;
    struct tg_pb_field f;
    int found = 0;
    tg_pb_reader_init(&r, p, len);
    while (tg_pb_next(&r, &f) == 1) {
        if (f.number == field && f.wire == TG_PB_LEN) {
            *out = f.data;
            *olen = f.len;
            found = 1;
        }
    }
    return found;
}

bool ts_pkt_has(const uint8_t *p, size_t len, uint32_t field)
{
    struct tg_pb_reader r;
    struct tg_pb_field f;
    tg_pb_reader_init(&r, p, len);
    while (tg_pb_next(&r, &f) == 1)
        if (f.number == field)
            return true;
    return false;
}

size_t ts_make_packet(uint8_t *buf, size_t cap, uint64_t seq, size_t payload)
{
    size_t need = 1 + 10 + 2 + 5 + payload;
    if (need > cap)
        return 0;
    size_t n = 0;
    n += tg_pb_put_tag(buf + n, 8, TG_PB_VARINT);
    n += tg_pb_put_varint(buf + n, seq);
    n += tg_pb_put_tag(buf + n, 900, TG_PB_LEN);
    n += tg_pb_put_varint(buf + n, payload);
    for (size_t i = 0; i < payload; i++)
        buf[n + i] = (uint8_t)(seq * 31u + i * 7u);
    return n + payload;
}

int ts_hand_chunk(struct tg_smb *smb, size_t page, uint16_t writer, uint32_t chunk_id, unsigned flags,
                  const uint8_t *const *frags, const size_t *lens, size_t n, bool complete)
{
    tg_smb_partition_page(smb, page, TG_SMB_LAYOUT_DIV1);
    struct tg_smb_chunk_header h = {.chunk_id = chunk_id, .writer_id = writer, .packets = 0};
    uint8_t *ptr;
    size_t size;
    if (tg_smb_acquire_chunk_for_writing(smb, page, 0, &h, &ptr, &size) != TG_SMB_OK)
        return -1;
    size_t o = TG_SMB_CHUNK_HEADER_SIZE;
    for (size_t i = 0; i < n; i++) {
        if (o + 4 + lens[i] > size)
            return -1;
        tg_pb_put_varint4(ptr + o, (uint32_t)lens[i]);
        memcpy(ptr + o + 4, frags[i], lens[i]);
        o += 4 + lens[i];
    }
    tg_smb_chunk_store_packets(ptr, tg_smb_make_packets((unsigned)n, flags));
    if (complete && tg_smb_release_chunk_as_complete(smb, page, 0) != TG_SMB_OK)
        return -1;
    return 0;
}
