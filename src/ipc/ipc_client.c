/* ipc_client.c: Perfetto IPC client: bind by name, invoke, streaming replies, fds (see tracegate/ipc_client.h). */
#include "tracegate/ipc_client.h"
#include "tracegate/addr.h"
#include "tracegate/frame.h"
#include "tracegate/ipc_wire.h"
#include "tracegate/log.h"

#include "ipc_frame.pb-c.h"

#include <errno.h>
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LOG "ipc-client"

struct method_entry {
    uint32_t id;
    char *name;
};

struct tg_ipc_service_proxy {
    uint32_t service_id;
    struct method_entry *methods;
    size_t n_methods;
    tg_ipc_service_proxy *next;
};

struct pending {
    uint64_t request_id;
    int is_bind;
    tg_ipc_reply_cb reply_cb;
    tg_ipc_bind_cb bind_cb;
    void *arg;
    struct pending *next;
};

struct tg_ipc_client {
    struct event_base *base;
    tg_conn *conn; /* NULL once closed */
    struct tg_ipc_client_cbs cbs;
    void *arg;
    uint64_t next_request_id;
    struct pending *pending;
    size_t n_pending;
    tg_ipc_service_proxy *proxies;
    uint8_t *scratch;
    size_t scratch_cap;
    int in_callback;
    int free_requested;
    /* session survival (tg_ipc_client_keep_pending/_reattach) */
    int keep_pending;
    uint64_t frames_in; /* frames received on the current (or last) connection */
};

static void client_release(tg_ipc_client *cli)
{
    while (cli->pending) {
        struct pending *p = cli->pending;
        cli->pending = p->next;
        free(p);
    }
    while (cli->proxies) {
        tg_ipc_service_proxy *s = cli->proxies;
        cli->proxies = s->next;
        for (size_t i = 0; i < s->n_methods; i++)
            free(s->methods[i].name);
        free(s->methods);
        free(s);
    }
    free(cli->scratch);
    free(cli);
}

static struct pending *pending_take(tg_ipc_client *cli, uint64_t rid, int keep)
{
    for (struct pending **pp = &cli->pending; *pp; pp = &(*pp)->next) {
        if ((*pp)->request_id == rid) {
            struct pending *p = *pp;
            if (!keep) {
                *pp = p->next;
                cli->n_pending--;
            }
            return p;
        }
    }
    return NULL;
}

static uint8_t *scratch(tg_ipc_client *cli, size_t need)
{
    if (need > cli->scratch_cap) {
        size_t cap = cli->scratch_cap ? cli->scratch_cap : 1024;
        while (cap < need)
            cap *= 2;
        uint8_t *p = realloc(cli->scratch, cap);
        if (!p)
            return NULL;
        cli->scratch = p;
        cli->scratch_cap = cap;
    }
    return cli->scratch;
}

struct bind_collect {
    tg_ipc_service_proxy *proxy;
    int oom;
};

static void collect_method(void *arg, uint32_t id, const char *name, size_t nl)
{
    struct bind_collect *bc = arg;
    tg_ipc_service_proxy *s = bc->proxy;
    struct method_entry *m = realloc(s->methods, (s->n_methods + 1) * sizeof *m);
    if (!m) {
        bc->oom = 1;
        return;
    }
    s->methods = m;
    char *copy = strndup(name, nl);
    if (!copy) {
        bc->oom = 1;
        return;
    }
    m[s->n_methods].id = id;
    m[s->n_methods].name = copy;
    s->n_methods++;
}

static void on_bind_reply(tg_ipc_client *cli, struct pending *pd, const struct tg_frame_info *fi)
{
    int success = 0;
    uint32_t sid = 0;
    tg_ipc_service_proxy *s = calloc(1, sizeof *s);
    struct bind_collect bc = {s, 0};
    if (s && tg_ipc_parse_bind_reply(fi->msg_data, fi->msg_len, &success, &sid, collect_method, &bc) == 0 && success &&
        !bc.oom) {
        s->service_id = sid;
        s->next = cli->proxies;
        cli->proxies = s;
    } else if (s) {
        for (size_t i = 0; i < s->n_methods; i++)
            free(s->methods[i].name);
        free(s->methods);
        free(s);
        s = NULL;
    }
    if (pd->bind_cb)
        pd->bind_cb(cli, s, pd->arg);
}

static void on_frame(tg_conn *c, const uint8_t *body, size_t len, void *arg)
{
    tg_ipc_client *cli = arg;
    struct tg_frame_info fi;
    (void)c;
    cli->frames_in++;
    if (tg_frame_scan(body, len, &fi) != 0)
        return; /* undecodable frames are dropped */
    cli->in_callback++;
    if (fi.msg == TG_MSG_BIND_SERVICE_REPLY) {
        struct pending *pd = pending_take(cli, fi.request_id, 0);
        if (pd) {
            if (pd->is_bind)
                on_bind_reply(cli, pd, &fi);
            else if (pd->reply_cb) /* a bind reply to an invoke: the call failed */
                pd->reply_cb(cli, 0, 0, NULL, 0, pd->arg);
            free(pd);
        }
    } else if (fi.msg == TG_MSG_INVOKE_METHOD_REPLY) {
        struct pending *pd = pending_take(cli, fi.request_id, fi.has_more);
        if (pd && pd->is_bind) { /* an invoke reply to a bind: the bind failed */
            if (fi.has_more)
                pending_take(cli, fi.request_id, 0);
            if (pd->bind_cb)
                pd->bind_cb(cli, NULL, pd->arg);
            free(pd);
        } else if (pd) {
            tg_ipc_reply_cb cb = pd->reply_cb;
            void *cb_arg = pd->arg;
            if (!fi.has_more)
                free(pd);
            if (cb)
                cb(cli, fi.success, fi.has_more, fi.success ? fi.payload : NULL, fi.success ? fi.payload_len : 0,
                   cb_arg);
        }
    } else if (fi.msg == TG_MSG_REQUEST_ERROR) {
        struct pending *pd = pending_take(cli, fi.request_id, 0);
        tg_debug(LOG, "request %llu failed: request error", (unsigned long long)fi.request_id);
        if (pd) {
            if (pd->is_bind && pd->bind_cb)
                pd->bind_cb(cli, NULL, pd->arg);
            else if (!pd->is_bind && pd->reply_cb)
                pd->reply_cb(cli, 0, 0, NULL, 0, pd->arg);
            free(pd);
        }
    }
    cli->in_callback--;
    if (cli->free_requested && !cli->in_callback && cli->conn)
        tg_conn_close(cli->conn, "client freed");
}

static void on_close(tg_conn *c, const char *reason, void *arg)
{
    tg_ipc_client *cli = arg;
    (void)c;
    cli->conn = NULL;
    cli->in_callback++;
    /* Fail every outstanding request exactly once (unless they are kept for
     * tg_ipc_client_reattach). */
    while (cli->pending && !(cli->keep_pending && !cli->free_requested)) {
        struct pending *p = cli->pending;
        cli->pending = p->next;
        cli->n_pending--;
        if (!cli->free_requested) {
            if (p->is_bind && p->bind_cb)
                p->bind_cb(cli, NULL, p->arg);
            else if (!p->is_bind && p->reply_cb)
                p->reply_cb(cli, 0, 0, NULL, 0, p->arg);
        }
        free(p);
    }
    if (!cli->free_requested && cli->cbs.on_disconnect)
        cli->cbs.on_disconnect(cli, reason, cli->arg);
    cli->in_callback--;
    if (cli->free_requested)
        client_release(cli);
}

static const struct tg_conn_cbs k_cbs = {.on_frame = on_frame, .on_close = on_close};

tg_ipc_client *tg_ipc_client_new(struct event_base *base, tg_conn *conn, const struct tg_ipc_client_cbs *cbs, void *arg)
{
    tg_ipc_client *cli = calloc(1, sizeof *cli);
    if (!cli) {
        tg_conn_close(conn, "out of memory");
        return NULL;
    }
    cli->base = base;
    cli->conn = conn;
    if (cbs)
        cli->cbs = *cbs;
    cli->arg = arg;
    cli->next_request_id = 1;
    tg_conn_set_cbs(conn, &k_cbs, cli);
    return cli;
}

tg_ipc_client *tg_ipc_client_connect(struct event_base *base, const char *addr, const struct tg_conn_opts *opts,
                                     const struct tg_ipc_client_cbs *cbs, void *arg, char *err, size_t errlen)
{
    struct tg_addr a;
    if (tg_addr_parse(addr, &a, err, errlen) != 0)
        return NULL;
    int fd = tg_addr_connect(&a);
    if (fd < 0) {
        snprintf(err, errlen, "cannot connect to %s: %s", a.text, strerror(errno));
        return NULL;
    }
    tg_conn *c = tg_conn_new_fd(base, fd, opts, NULL, NULL);
    if (!c) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    return tg_ipc_client_new(base, c, cbs, arg);
}

void tg_ipc_client_free(tg_ipc_client *cli)
{
    if (!cli)
        return;
    cli->free_requested = 1;
    if (cli->conn) {
        if (!cli->in_callback)
            tg_conn_close(cli->conn, "client freed");
        /* released from on_close */
    } else if (!cli->in_callback) {
        client_release(cli);
    }
}

static struct pending *pending_add(tg_ipc_client *cli, int is_bind, void *arg)
{
    struct pending *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->request_id = cli->next_request_id++;
    p->is_bind = is_bind;
    p->arg = arg;
    p->next = cli->pending;
    cli->pending = p;
    cli->n_pending++;
    return p;
}

int tg_ipc_client_bind(tg_ipc_client *cli, const char *service_name, tg_ipc_bind_cb cb, void *arg)
{
    if (!cli->conn || cli->free_requested)
        return -1;
    struct pending *p = pending_add(cli, 1, arg);
    if (!p)
        return -1;
    p->bind_cb = cb;
    uint8_t buf[320];
    size_t n = tg_ipc_encode_bind(buf, sizeof buf, p->request_id, service_name);
    if (n == 0 || tg_conn_send(cli->conn, buf, n, -1) != 0) {
        pending_take(cli, p->request_id, 0);
        free(p);
        return -1;
    }
    return 0;
}

uint32_t tg_ipc_proxy_method_id(const tg_ipc_service_proxy *proxy, const char *method)
{
    for (size_t i = 0; proxy && i < proxy->n_methods; i++)
        if (strcmp(proxy->methods[i].name, method) == 0)
            return proxy->methods[i].id;
    return 0;
}

uint32_t tg_ipc_proxy_service_id(const tg_ipc_service_proxy *proxy) { return proxy->service_id; }

uint64_t tg_ipc_client_invoke_bytes(tg_ipc_client *cli, tg_ipc_service_proxy *proxy, const char *method,
                                    const uint8_t *args, size_t args_len, int fd, tg_ipc_reply_cb cb, void *arg)
{
    if (!cli->conn || cli->free_requested)
        return 0;
    uint32_t mid = tg_ipc_proxy_method_id(proxy, method);
    if (mid == 0) {
        tg_warn(LOG, "the service does not offer method %s", method);
        return 0;
    }
    uint64_t rid;
    struct pending *p = NULL;
    if (cb) {
        p = pending_add(cli, 0, arg);
        if (!p)
            return 0;
        p->reply_cb = cb;
        rid = p->request_id;
    } else {
        rid = cli->next_request_id++;
    }
    size_t need = tg_ipc_encode_invoke(NULL, 0, rid, proxy->service_id, mid, args, args_len, cb == NULL);
    uint8_t *buf = scratch(cli, need);
    if (!buf || tg_ipc_encode_invoke(buf, need, rid, proxy->service_id, mid, args, args_len, cb == NULL) != need ||
        tg_conn_send(cli->conn, buf, need, fd) != 0) {
        if (p) {
            pending_take(cli, rid, 0);
            free(p);
        }
        return 0;
    }
    return rid;
}

uint64_t tg_ipc_client_invoke(tg_ipc_client *cli, tg_ipc_service_proxy *proxy, const char *method,
                              const ProtobufCMessage *req, int fd, tg_ipc_reply_cb cb, void *arg)
{
    if (!req)
        return tg_ipc_client_invoke_bytes(cli, proxy, method, NULL, 0, fd, cb, arg);
    size_t n = protobuf_c_message_get_packed_size(req);
    uint8_t stackbuf[1024];
    uint8_t *buf = n <= sizeof stackbuf ? stackbuf : malloc(n);
    if (!buf)
        return 0;
    protobuf_c_message_pack(req, buf);
    uint64_t rid = tg_ipc_client_invoke_bytes(cli, proxy, method, buf, n, fd, cb, arg);
    if (buf != stackbuf)
        free(buf);
    return rid;
}

void tg_ipc_client_cancel(tg_ipc_client *cli, uint64_t request_id)
{
    struct pending *p = pending_take(cli, request_id, 0);
    free(p);
}

int tg_ipc_client_set_peer_identity(tg_ipc_client *cli, int32_t pid, int32_t uid, const char *machine_id_hint,
                                    const char *machine_name)
{
    if (!cli->conn)
        return -1;
    Perfetto__Protos__IPCFrame frame = PERFETTO__PROTOS__IPCFRAME__INIT;
    Perfetto__Protos__IPCFrame__SetPeerIdentity id = PERFETTO__PROTOS__IPCFRAME__SET_PEER_IDENTITY__INIT;
    id.has_pid = 1;
    id.pid = pid;
    id.has_uid = 1;
    id.uid = uid;
    id.machine_id_hint = (char *)machine_id_hint;
    id.machine_name = (char *)machine_name;
    frame.has_request_id = 1;
    frame.request_id = 0;
    frame.msg_case = PERFETTO__PROTOS__IPCFRAME__MSG_SET_PEER_IDENTITY;
    frame.set_peer_identity = &id;
    size_t n = perfetto__protos__ipcframe__get_packed_size(&frame);
    uint8_t *buf = scratch(cli, n);
    if (!buf)
        return -1;
    perfetto__protos__ipcframe__pack(&frame, buf);
    return tg_conn_send(cli->conn, buf, n, -1);
}

void tg_ipc_client_keep_pending(tg_ipc_client *cli, int keep) { cli->keep_pending = keep != 0; }

int tg_ipc_client_reattach(tg_ipc_client *cli, tg_conn *conn)
{
    if (cli->conn || cli->free_requested) {
        tg_conn_close(conn, "client already connected");
        return -1;
    }
    cli->conn = conn;
    cli->frames_in = 0;
    tg_conn_set_cbs(conn, &k_cbs, cli);
    return 0;
}

uint64_t tg_ipc_client_frames_received(const tg_ipc_client *cli) { return cli->frames_in; }

int tg_ipc_client_take_fd(tg_ipc_client *cli) { return cli->conn ? tg_conn_take_fd(cli->conn) : -1; }
int tg_ipc_client_connected(const tg_ipc_client *cli) { return cli->conn != NULL; }
tg_conn *tg_ipc_client_conn(tg_ipc_client *cli) { return cli->conn; }
size_t tg_ipc_client_pending(const tg_ipc_client *cli) { return cli->n_pending; }
