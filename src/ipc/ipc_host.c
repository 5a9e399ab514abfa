/* ipc_host.c: Perfetto IPC host: BindService, InvokeMethod dispatch, streaming/deferred replies (see tracegate/ipc_host.h). */
#include "tracegate/ipc_host.h"
#include "tracegate/addr.h"
#include "tracegate/clock.h"
#include "tracegate/frame.h"
#include "tracegate/ipc_wire.h"
#include "base/name_fit.h"
#include "tracegate/log.h"

#include "ipc_frame.pb-c.h"

#include <errno.h>
#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define LOG "ipc-host"
#define MAX_SERVICES 8

struct service_slot {
    const struct tg_ipc_service_def *def;
    void *ctx;
};

struct listener {
    struct evconnlistener *l;
    struct tg_ipc_host *h;
    struct event *retry_ev; /* re-enables accepts after a pause for want of descriptors */
    uint64_t last_log_us;
    struct listener *next;
    char path[256]; /* filesystem UNIX path to unlink on shutdown */
};

struct tg_ipc_host {
    struct event_base *base;
    struct tg_ipc_host_opts opts;
    struct service_slot services[MAX_SERVICES];
    size_t n_services;
    struct listener *listeners;
    tg_ipc_peer *peers; /* doubly linked */
    size_t n_peers;
    uint8_t *scratch;   /* encode buffer for reply frames */
    size_t scratch_cap;
};

struct tg_ipc_call {
    tg_ipc_peer *peer;
    uint64_t request_id;
    int drop_reply;
    const uint8_t *args; /* args_proto, only while the handler runs */
    size_t args_len;
    tg_ipc_call *prev, *next;
};

struct bound {
    int bound;
    void *state;
};

struct tg_ipc_peer {
    tg_ipc_host *host;
    tg_conn *conn;
    tg_ipc_peer *prev, *next;
    struct bound bound[MAX_SERVICES];
    tg_ipc_call *calls;
    int identity_set;
    uid_t uid;
    pid_t pid;
    char principal[TG_IPC_PRINCIPAL_MAX];
    int privileged;
    uint32_t machine_id;
    char machine_name[128];
    void *user;
    int gone;
};

uint32_t tg_ipc_machine_id_from_hint(const char *hint, size_t len)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < len; i++) {
        h ^= (uint8_t)hint[i];
        h *= 0x100000001b3ull;
    }
    uint32_t id = (uint32_t)h;
    return id ? id : 1;
}

/* ------------------------------------------------------------- sending */

static uint8_t *scratch(tg_ipc_host *h, size_t need)
{
    if (need > h->scratch_cap) {
        size_t cap = h->scratch_cap ? h->scratch_cap : 4096;
        while (cap < need)
            cap *= 2;
        uint8_t *p = realloc(h->scratch, cap);
        if (!p)
            return NULL;
        h->scratch = p;
        h->scratch_cap = cap;
    }
    return h->scratch;
}

static int send_reply(tg_ipc_peer *p, uint64_t rid, int success, int has_more, const uint8_t *data, size_t len, int fd)
{
    size_t need = tg_ipc_encode_reply(NULL, 0, rid, success, has_more, data, len);
    uint8_t *buf = scratch(p->host, need);
    if (!buf)
        return -1;
    tg_ipc_encode_reply(buf, need, rid, success, has_more, data, len);
    return tg_conn_send(p->conn, buf, need, fd);
}

static void send_request_error(tg_ipc_peer *p, uint64_t rid, const char *msg)
{
    uint8_t buf[256];
    size_t n = tg_ipc_encode_request_error(buf, sizeof buf, rid, msg);
    if (n)
        tg_conn_send(p->conn, buf, n, -1);
}

/* --------------------------------------------------------------- calls */

static void call_unlink_free(tg_ipc_call *c)
{
    tg_ipc_peer *p = c->peer;
    if (c->prev)
        c->prev->next = c->next;
    else
        p->calls = c->next;
    if (c->next)
        c->next->prev = c->prev;
    free(c);
}

int tg_ipc_call_reply_bytes(tg_ipc_call *call, const uint8_t *resp, size_t len, int has_more, int fd)
{
    tg_ipc_peer *p = call->peer;
    int rc = 0;
    if (p->gone)
        rc = -1;
    else if (!call->drop_reply)
        rc = send_reply(p, call->request_id, 1, has_more, resp, len, fd);
    if (!has_more)
        call_unlink_free(call);
    return rc;
}

int tg_ipc_call_reply_evbuffer(tg_ipc_call *call, struct evbuffer *resp, int has_more)
{
    tg_ipc_peer *p = call->peer;
    size_t len = evbuffer_get_length(resp);
    int rc = 0;
    if (p->gone) {
        rc = -1;
    } else if (!call->drop_reply) {
        /* [length][envelope up to reply_proto's length] in front of the payload, which moves */
        uint8_t hdr[TG_FRAME_HEADER_SIZE + 40];
        size_t n = tg_ipc_encode_reply_header(hdr + TG_FRAME_HEADER_SIZE, sizeof hdr - TG_FRAME_HEADER_SIZE,
                                              call->request_id, has_more, len);
        if (n == 0 || n + len > UINT32_MAX) {
            rc = -1;
        } else {
            tg_frame_put_header(hdr, (uint32_t)(n + len));
            if (evbuffer_prepend(resp, hdr, TG_FRAME_HEADER_SIZE + n) != 0)
                rc = -1;
            else
                rc = tg_conn_send_framed(p->conn, resp);
        }
    }
    evbuffer_drain(resp, evbuffer_get_length(resp));
    if (!has_more)
        call_unlink_free(call);
    return rc;
}

int tg_ipc_call_reply(tg_ipc_call *call, const ProtobufCMessage *resp, int has_more, int fd)
{
    if (!resp)
        return tg_ipc_call_reply_bytes(call, NULL, 0, has_more, fd);
    size_t n = protobuf_c_message_get_packed_size(resp);
    uint8_t stackbuf[512];
    uint8_t *buf = n <= sizeof stackbuf ? stackbuf : malloc(n);
    if (!buf) {
        tg_ipc_call_reject(call);
        return -1;
    }
    protobuf_c_message_pack(resp, buf);
    int rc = tg_ipc_call_reply_bytes(call, buf, n, has_more, fd);
    if (buf != stackbuf)
        free(buf);
    return rc;
}

void tg_ipc_call_reject(tg_ipc_call *call)
{
    tg_ipc_peer *p = call->peer;
    if (!p->gone && !call->drop_reply)
        send_reply(p, call->request_id, 0, 0, NULL, 0, -1);
    call_unlink_free(call);
}

tg_ipc_peer *tg_ipc_call_peer(const tg_ipc_call *call) { return call->peer; }
uint64_t tg_ipc_call_request_id(const tg_ipc_call *call) { return call->request_id; }
int tg_ipc_call_drop_reply(const tg_ipc_call *call) { return call->drop_reply; }
const uint8_t *tg_ipc_call_args(const tg_ipc_call *call, size_t *len)
{
    *len = call->args_len;
    return call->args;
}

/* ------------------------------------------------------------ dispatch */

static void handle_bind(tg_ipc_peer *p, const struct tg_frame_info *fi)
{
    tg_ipc_host *h = p->host;
    for (size_t i = 0; i < h->n_services; i++) {
        const struct tg_ipc_service_def *def = h->services[i].def;
        if (strlen(def->name) != fi->service_name_len || memcmp(def->name, fi->service_name, fi->service_name_len) != 0)
            continue;
        if (!p->bound[i].bound) {
            p->bound[i].bound = 1;
            p->bound[i].state = def->peer_open ? def->peer_open(p, h->services[i].ctx) : NULL;
        }
        struct tg_ipc_method_info mi[64];
        size_t n = def->n_methods < 64 ? def->n_methods : 64;
        for (size_t m = 0; m < n; m++) {
            mi[m].id = (uint32_t)(m + 1);
            mi[m].name = def->methods[m].name;
        }
        size_t need = tg_ipc_encode_bind_reply(NULL, 0, fi->request_id, 1, (uint32_t)(i + 1), mi, n);
        uint8_t *buf = scratch(h, need);
        if (buf && tg_ipc_encode_bind_reply(buf, need, fi->request_id, 1, (uint32_t)(i + 1), mi, n) == need)
            tg_conn_send(p->conn, buf, need, -1);
        return;
    }
    tg_debug(LOG, "%s: bind to unknown service '%.*s'", tg_conn_peer_name(p->conn), (int)fi->service_name_len,
             (const char *)fi->service_name);
    uint8_t buf[32];
    size_t n = tg_ipc_encode_bind_reply(buf, sizeof buf, fi->request_id, 0, 0, NULL, 0);
    tg_conn_send(p->conn, buf, n, -1);
}

static void handle_invoke(tg_ipc_peer *p, const struct tg_frame_info *fi)
{
    tg_ipc_host *h = p->host;
    uint32_t sid = fi->service_id, mid = fi->method_id;
    if (sid == 0 || sid > h->n_services || !p->bound[sid - 1].bound || mid == 0 ||
        mid > h->services[sid - 1].def->n_methods) {
        tg_debug(LOG, "%s: invoke of unknown service %u method %u", tg_conn_peer_name(p->conn), sid, mid);
        send_reply(p, fi->request_id, 0, 0, NULL, 0, -1);
        return;
    }
    const struct tg_ipc_service_def *def = h->services[sid - 1].def;
    const struct tg_ipc_method *m = &def->methods[mid - 1];
    ProtobufCMessage *req = NULL;
    if (m->request) {
        req = protobuf_c_message_unpack(m->request, NULL, fi->payload_len, fi->payload_len ? fi->payload : NULL);
        if (!req) {
            tg_debug(LOG, "%s: %s: undecodable arguments", tg_conn_peer_name(p->conn), m->name);
            send_reply(p, fi->request_id, 0, 0, NULL, 0, -1);
            return;
        }
    }
    tg_ipc_call *call = calloc(1, sizeof *call);
    if (!call) {
        if (req)
            protobuf_c_message_free_unpacked(req, NULL);
        send_reply(p, fi->request_id, 0, 0, NULL, 0, -1);
        return;
    }
    call->peer = p;
    call->request_id = fi->request_id;
    call->drop_reply = fi->drop_reply;
    call->args = fi->payload;
    call->args_len = fi->payload_len;
    call->next = p->calls;
    if (p->calls)
        p->calls->prev = call;
    p->calls = call;
    m->fn(call, req, h->services[sid - 1].ctx, p->bound[sid - 1].state);
    if (req)
        protobuf_c_message_free_unpacked(req, NULL);
}

static void handle_peer_identity(tg_ipc_peer *p, const struct tg_frame_info *fi)
{
    if (!p->host->opts.honor_peer_identity || tg_conn_is_unix(p->conn) || p->identity_set)
        return; /* silently ignored, as Perfetto does */
    Perfetto__Protos__IPCFrame__SetPeerIdentity *id = (Perfetto__Protos__IPCFrame__SetPeerIdentity *)
        protobuf_c_message_unpack(&perfetto__protos__ipcframe__set_peer_identity__descriptor, NULL, fi->msg_len,
                                  fi->msg_data);
    if (!id)
        return;
    p->identity_set = 1;
    if (id->has_uid) {
        p->uid = (uid_t)id->uid;
        snprintf(p->principal, sizeof p->principal, "net:uid:%d", (int)id->uid);
    }
    if (id->has_pid)
        p->pid = (pid_t)id->pid;
    if (id->machine_id_hint && *id->machine_id_hint) {
        p->machine_id = tg_ipc_machine_id_from_hint(id->machine_id_hint, strlen(id->machine_id_hint));
    } else {
        /* no hint: hash the peer address without its port */
        const char *name = tg_conn_peer_name(p->conn);
        const char *colon = strrchr(name, ':');
        p->machine_id = tg_ipc_machine_id_from_hint(name, colon ? (size_t)(colon - name) : strlen(name));
    }
    if (id->machine_name)
        snprintf(p->machine_name, sizeof p->machine_name, "%s", id->machine_name);
    protobuf_c_message_free_unpacked(&id->base, NULL);
}

static void on_frame(tg_conn *c, const uint8_t *body, size_t len, void *arg)
{
    tg_ipc_peer *p = arg;
    struct tg_frame_info fi;
    if (tg_frame_scan(body, len, &fi) != 0) {
        tg_debug(LOG, "%s: dropping a frame that is not an IPCFrame (%zu bytes)", tg_conn_peer_name(p->conn), len);
        return; /* Perfetto drops undecodable frames and keeps the connection */
    }
    switch (fi.msg) {
    case TG_MSG_BIND_SERVICE:
        handle_bind(p, &fi);
        break;
    case TG_MSG_INVOKE_METHOD:
        handle_invoke(p, &fi);
        break;
    case TG_MSG_SET_PEER_IDENTITY:
        handle_peer_identity(p, &fi);
        break;
    default:
        send_request_error(p, fi.request_id, "unknown request");
        break;
    }
    /* A peer that does not read its replies gets no more requests served until it does: its
     * next frames wait in the socket (and its sender's buffers), not as replies queued here. */
    if (!p->gone && tg_conn_is_congested(c))
        tg_conn_pause_read(c);
}

static void on_drain(tg_conn *c, void *arg)
{
    tg_ipc_peer *p = arg;
    tg_conn_resume_read(c);
    tg_ipc_host *h = p->host;
    for (size_t i = 0; i < h->n_services && !p->gone; i++)
        if (p->bound[i].bound && h->services[i].def->peer_drain)
            h->services[i].def->peer_drain(p, p->bound[i].state, h->services[i].ctx);
}

/* --------------------------------------------------------------- peers */

static void peer_destroy(tg_ipc_peer *p)
{
    tg_ipc_host *h = p->host;
    p->gone = 1;
    for (size_t i = 0; i < h->n_services; i++)
        if (p->bound[i].bound && h->services[i].def->peer_close)
            h->services[i].def->peer_close(p, p->bound[i].state, h->services[i].ctx);
    while (p->calls)
        call_unlink_free(p->calls);
    if (h->opts.peer_gone)
        h->opts.peer_gone(p, h->opts.peer_gone_arg);
    if (p->prev)
        p->prev->next = p->next;
    else
        h->peers = p->next;
    if (p->next)
        p->next->prev = p->prev;
    h->n_peers--;
    free(p);
}

static void on_close(tg_conn *c, const char *reason, void *arg)
{
    tg_ipc_peer *p = arg;
    tg_debug(LOG, "%s: disconnected: %s", tg_conn_peer_name(c), reason);
    peer_destroy(p);
}

static const struct tg_conn_cbs k_peer_cbs = {.on_frame = on_frame, .on_close = on_close, .on_drain = on_drain};

tg_ipc_peer *tg_ipc_host_adopt_conn(tg_ipc_host *h, tg_conn *c)
{
    tg_ipc_peer *p = calloc(1, sizeof *p);
    if (!p) {
        tg_conn_close(c, "out of memory");
        return NULL;
    }
    p->host = h;
    p->conn = c;
    p->uid = tg_conn_peer_uid(c);
    p->pid = tg_conn_peer_pid(c);
    if (tg_conn_is_unix(c)) {
        snprintf(p->principal, sizeof p->principal, "uid:%u", (unsigned)p->uid);
        p->privileged = p->uid == 0;
    } else {
        snprintf(p->principal, sizeof p->principal, "net:uid:%d", (int)p->uid);
    }
    p->next = h->peers;
    if (h->peers)
        h->peers->prev = p;
    h->peers = p;
    h->n_peers++;
    tg_conn_set_cbs(c, &k_peer_cbs, p);
    if (h->opts.max_peers && h->n_peers > h->opts.max_peers) {
        tg_warn(LOG, "%s: refused: too many connections (%zu)", tg_conn_peer_name(c), h->opts.max_peers);
        tg_conn_close(c, "too many connections");
    }
    return p;
}

tg_ipc_peer *tg_ipc_host_adopt_fd(tg_ipc_host *h, int fd)
{
    tg_conn *c = tg_conn_new_fd(h->base, fd, &h->opts.conn, NULL, NULL);
    return c ? tg_ipc_host_adopt_conn(h, c) : NULL;
}

static void accept_cb(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa, int salen, void *arg)
{
    (void)l;
    (void)sa;
    (void)salen;
    tg_ipc_host_adopt_fd(((struct listener *)arg)->h, fd);
}

static void reenable_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    evconnlistener_enable(((struct listener *)arg)->l);
}

/* Out of descriptors (or memory) the socket stays readable: accepts pause for a second instead of
 * spinning, with one log line per 10 s. The timer is the listener's, freed with it. */
static void accept_error_cb(struct evconnlistener *l, void *arg)
{
    struct listener *li = arg;
    int e = EVUTIL_SOCKET_ERROR();
    int pause = e == EMFILE || e == ENFILE || e == ENOBUFS || e == ENOMEM;
    uint64_t now = tg_mono_us();
    if (!li->last_log_us || now - li->last_log_us > 10000000u) {
        tg_warn(LOG, "accept failed: %s%s", evutil_socket_error_to_string(e), pause ? "; pausing accepts for 1 s" : "");
        li->last_log_us = now;
    }
    if (!pause)
        return;
    evconnlistener_disable(l);
    struct timeval tv = {1, 0};
    event_add(li->retry_ev, &tv);
}

/* ---------------------------------------------------------------- host */

tg_ipc_host *tg_ipc_host_new(struct event_base *base, const struct tg_ipc_host_opts *opts)
{
    tg_ipc_host *h = calloc(1, sizeof *h);
    if (!h)
        return NULL;
    h->base = base;
    if (opts) {
        h->opts = *opts;
    } else {
        tg_conn_opts_default(&h->opts.conn);
        h->opts.honor_peer_identity = 1;
    }
    return h;
}

void tg_ipc_host_free(tg_ipc_host *h)
{
    if (!h)
        return;
    while (h->listeners) {
        struct listener *l = h->listeners;
        h->listeners = l->next;
        if (l->retry_ev)
            event_free(l->retry_ev);
        evconnlistener_free(l->l);
        if (l->path[0])
            unlink(l->path);
        free(l);
    }
    while (h->peers) {
        tg_ipc_peer *p = h->peers;
        tg_conn *c = p->conn;
        peer_destroy(p);
        tg_conn_destroy(c);
    }
    free(h->scratch);
    free(h);
}

uint32_t tg_ipc_host_add_service(tg_ipc_host *h, const struct tg_ipc_service_def *def, void *svc_ctx)
{
    if (h->n_services >= MAX_SERVICES)
        return 0;
    h->services[h->n_services].def = def;
    h->services[h->n_services].ctx = svc_ctx;
    return (uint32_t)++h->n_services;
}

int tg_ipc_host_listen(tg_ipc_host *h, const char *addr, unsigned mode, char *err, size_t errlen)
{
    struct tg_addr a;
    if (tg_addr_parse(addr, &a, err, errlen) != 0)
        return -1;
    char e2[600];
    int fd = tg_addr_listen_err(&a, SOMAXCONN, mode, e2, sizeof e2); /* bursts of clients must not be refused */
    if (fd < 0) {
        if (errno == EADDRINUSE)
            snprintf(err, errlen, "cannot listen on %s: address in use (is another service running there?)", a.text);
        else
            snprintf(err, errlen, "%s", e2);
        return -1;
    }
    struct listener *l = calloc(1, sizeof *l);
    if (!l) {
        close(fd);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    l->h = h;
    l->retry_ev = evtimer_new(h->base, reenable_cb, l);
    l->l = l->retry_ev ? evconnlistener_new(h->base, accept_cb, l, LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC, -1, fd)
                       : NULL;
    if (!l->l) {
        if (l->retry_ev)
            event_free(l->retry_ev);
        close(fd);
        free(l);
        snprintf(err, errlen, "cannot create listener on %s", a.text);
        return -1;
    }
    evconnlistener_set_error_cb(l->l, accept_error_cb);
    if (a.family == AF_UNIX && a.text[0] != '@')
        snprintf(l->path, sizeof l->path, "%s", a.text);
    l->next = h->listeners;
    h->listeners = l;
    return 0;
}

size_t tg_ipc_host_peer_count(const tg_ipc_host *h) { return h->n_peers; }

int tg_ipc_peer_is_unix(const tg_ipc_peer *p) { return tg_conn_is_unix(p->conn); }
uid_t tg_ipc_peer_uid(const tg_ipc_peer *p) { return p->uid; }
const char *tg_ipc_peer_principal(const tg_ipc_peer *p) { return p->principal; }
int tg_ipc_peer_privileged(const tg_ipc_peer *p) { return p->privileged; }

void tg_ipc_peer_set_identity(tg_ipc_peer *p, const struct tg_ipc_identity *id)
{
    p->identity_set = 1; /* a later SetPeerIdentity cannot override what the adopter knows */
    p->uid = id->uid;
    p->pid = id->pid;
    if (id->principal && strlen(id->principal) < sizeof p->principal)
        snprintf(p->principal, sizeof p->principal, "%s", id->principal);
    else if (id->principal && tg_name_fit(p->principal, sizeof p->principal, "", id->principal) < 0) {
        static unsigned long long unusable; /* no digest could be made: a name nobody else ever gets */
        snprintf(p->principal, sizeof p->principal, "unusable:%llu", __atomic_add_fetch(&unusable, 1, __ATOMIC_RELAXED));
    } else if (!id->principal)
        snprintf(p->principal, sizeof p->principal, "uid:%u", (unsigned)id->uid);
    p->privileged = id->privileged != 0;
    p->machine_id = id->machine_id;
    if (id->machine_name)
        snprintf(p->machine_name, sizeof p->machine_name, "%s", id->machine_name);
}
pid_t tg_ipc_peer_pid(const tg_ipc_peer *p) { return p->pid; }
uint32_t tg_ipc_peer_machine_id(const tg_ipc_peer *p) { return p->machine_id; }
const char *tg_ipc_peer_machine_name(const tg_ipc_peer *p) { return p->machine_name; }
const char *tg_ipc_peer_name(const tg_ipc_peer *p) { return tg_conn_peer_name(p->conn); }
int tg_ipc_peer_take_fd(tg_ipc_peer *p) { return tg_conn_take_fd(p->conn); }
tg_conn *tg_ipc_peer_conn(tg_ipc_peer *p) { return p->conn; }
size_t tg_ipc_peer_output_len(const tg_ipc_peer *p) { return tg_conn_output_len(p->conn); }
void tg_ipc_peer_disconnect(tg_ipc_peer *p, const char *reason) { tg_conn_close(p->conn, reason); }
void tg_ipc_peer_set_user(tg_ipc_peer *p, void *user) { p->user = user; }
void *tg_ipc_peer_get_user(const tg_ipc_peer *p) { return p->user; }
