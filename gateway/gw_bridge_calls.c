/* gw_bridge_calls.c: calls a bridge session tracks: the client's calls relayed upstream
 * (for latency metrics) and the gateway's own binds and calls to the upstream (filters use
 * them: tg_gw_session_bind_up / tg_gw_session_call_up), whose replies are routed back to
 * their callbacks instead of the client (see gw_bridge_int.h). */
#include "gw_bridge_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gw_metrics.h"
#include "tracegate/log.h"

ssize_t tg_gwb_find_call(struct tg_gw_session *s, uint64_t rid)
{
    for (size_t i = 0; i < s->n_calls; i++)
        if (s->calls[i].rid == rid)
            return (ssize_t)i;
    return -1;
}

void tg_gwb_remove_call(struct tg_gw_session *s, size_t i)
{
    memmove(&s->calls[i], &s->calls[i + 1], (s->n_calls - i - 1) * sizeof s->calls[0]);
    s->n_calls--;
}

struct pending_call *tg_gwb_push_call(struct tg_gw_session *s)
{
    if (s->n_calls == s->cap_calls) {
        if (s->cap_calls >= MAX_PENDING_CALLS)
            return NULL;
        size_t nc = s->cap_calls ? s->cap_calls * 2 : 8;
        struct pending_call *n = realloc(s->calls, nc * sizeof *n);
        if (!n)
            return NULL;
        s->calls = n;
        s->cap_calls = nc;
    }
    struct pending_call *c = &s->calls[s->n_calls++];
    memset(c, 0, sizeof *c);
    return c;
}

ssize_t tg_gwb_find_bind(struct tg_gw_session *s, uint64_t rid)
{
    for (size_t i = 0; i < s->n_binds; i++)
        if (s->binds[i].rid == rid)
            return (ssize_t)i;
    return -1;
}

void tg_gwb_remove_bind(struct tg_gw_session *s, size_t i)
{
    memmove(&s->binds[i], &s->binds[i + 1], (s->n_binds - i - 1) * sizeof s->binds[0]);
    s->n_binds--;
}

void tg_gwb_route_private(struct tg_gw_session *s, const struct tg_frame_info *fi)
{
    if (fi->msg == TG_MSG_BIND_SERVICE_REPLY) {
        tg_gwb_learn_bind(s, fi);
        return;
    }
    ssize_t ci = tg_gwb_find_call(s, fi->request_id);
    if (ci < 0)
        return;
    struct pending_call pc = s->calls[ci];
    int final = fi->msg != TG_MSG_INVOKE_METHOD_REPLY || !fi->has_more;
    if (final)
        tg_gwb_remove_call(s, (size_t)ci);
    int ok = fi->msg == TG_MSG_INVOKE_METHOD_REPLY && fi->success;
    if (pc.cb)
        pc.cb(s, ok, final ? 0 : 1, ok ? fi->payload : NULL, ok ? fi->payload_len : 0, pc.arg);
}

int tg_gw_session_bind_up(struct tg_gw_session *s, const char *service, tg_gw_bind_fn cb, void *arg)
{
    if (!service || strlen(service) >= NAME_LEN || s->n_binds >= MAX_PENDING_BINDS)
        return -1;
    uint64_t rid = s->next_private_id++;
    uint8_t buf[128];
    size_t n = tg_ipc_encode_bind(buf, sizeof buf, rid, service);
    if (!n)
        return -1;
    struct pending_bind *pb = &s->binds[s->n_binds++];
    memset(pb, 0, sizeof *pb);
    pb->rid = rid;
    pb->private_ = 1;
    pb->cb = cb;
    pb->arg = arg;
    snprintf(pb->name, sizeof pb->name, "%s", service);
    if (tg_gw_session_send_up(s, buf, n, -1) != 0) {
        ssize_t i = tg_gwb_find_bind(s, rid);
        if (i >= 0)
            tg_gwb_remove_bind(s, (size_t)i);
        return -1;
    }
    return 0;
}

int tg_gw_session_call_up(struct tg_gw_session *s, uint32_t service_id, uint32_t method_id, const uint8_t *args,
                          size_t len, int fd, tg_gw_reply_fn cb, void *arg)
{
    uint64_t rid = s->next_private_id++;
    size_t need = tg_ipc_encode_invoke(NULL, 0, rid, service_id, method_id, args, len, cb == NULL);
    uint8_t *buf = malloc(need ? need : 1);
    if (!buf)
        return -1;
    size_t n = tg_ipc_encode_invoke(buf, need, rid, service_id, method_id, args, len, cb == NULL);
    int rc = -1;
    if (n) {
        struct pending_call *pc = NULL;
        if (cb) {
            pc = tg_gwb_push_call(s);
            if (pc) {
                pc->rid = rid;
                pc->private_ = 1;
                pc->cb = cb;
                pc->arg = arg;
                pc->start_us = tg_gw_now_us();
                const char *sn = tg_gw_session_service_name(s, service_id);
                const char *mn = tg_gw_session_method_name(s, service_id, method_id);
                pc->metric = tg_gw_metrics_method(s->gw->metrics, sn ? sn : "?", mn ? mn : "?");
            }
        }
        if ((!cb || pc) && tg_gw_session_send_up(s, buf, n, fd) == 0) {
            rc = 0;
        } else if (pc) {
            ssize_t i = tg_gwb_find_call(s, rid);
            if (i >= 0)
                tg_gwb_remove_call(s, (size_t)i);
        }
    }
    free(buf);
    return rc;
}
