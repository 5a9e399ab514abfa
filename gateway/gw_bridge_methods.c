/* gw_bridge_methods.c: the services a bridge session bound: the method table each
 * BindServiceReply teaches it (the ACL maps a call's method id to a name through it, so a table
 * listing an id or a name twice is refused), and lookups by id and by name (see gw_bridge_int.h). */
#include "gw_bridge_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gw_metrics.h"
#include "tracegate/log.h"

static const struct bound_svc *find_svc_c(const struct tg_gw_session *s, uint32_t id)
{
    for (size_t i = 0; i < s->n_svcs; i++)
        if (s->svcs[i].id == id)
            return &s->svcs[i];
    return NULL;
}

struct bound_svc *tg_gwb_find_svc(struct tg_gw_session *s, uint32_t id)
{
    return (struct bound_svc *)find_svc_c(s, id); /* s is not const here */
}

struct method_ent *tg_gwb_find_method(struct bound_svc *b, uint32_t id)
{
    for (size_t i = 0; i < b->n_methods; i++)
        if (b->methods[i].id == id)
            return &b->methods[i];
    return NULL;
}

void tg_gwb_free_svc(struct bound_svc *b)
{
    free(b->methods);
    b->methods = NULL;
    b->n_methods = 0;
}

struct bound_svc *tg_gwb_add_svc(struct tg_gw_session *s, uint32_t id, const char *name)
{
    struct bound_svc *b = tg_gwb_find_svc(s, id);
    if (b) {
        tg_gwb_free_svc(b);
    } else {
        if (s->n_svcs >= MAX_SERVICES)
            return NULL;
        b = &s->svcs[s->n_svcs++];
    }
    memset(b, 0, sizeof *b);
    b->id = id;
    snprintf(b->name, sizeof b->name, "%s", name);
    return b;
}

/* Every method entry a Perfetto client would register (non-zero id, non-empty name). */
struct raw_method {
    uint32_t id;
    const char *name; /* points into the frame */
    size_t len;
};

struct bind_parse {
    struct method_ent *m; /* the usable entries */
    size_t n;
    struct raw_method *raw;
    size_t n_raw, cap_raw;
    int oom;
};

static void bind_method_cb(void *arg, uint32_t id, const char *name, size_t name_len)
{
    struct bind_parse *bp = arg;
    if (bp->oom || id == 0 || name_len == 0)
        return; /* clients ignore these entries too */
    if (bp->n_raw == bp->cap_raw) {
        size_t cap = bp->cap_raw ? bp->cap_raw * 2 : 32;
        struct raw_method *nr = realloc(bp->raw, cap * sizeof *nr);
        if (!nr) {
            bp->oom = 1;
            return;
        }
        bp->raw = nr;
        bp->cap_raw = cap;
    }
    bp->raw[bp->n_raw++] = (struct raw_method){id, name, name_len};
    if (name_len >= NAME_LEN || memchr(name, '\0', name_len) || bp->n >= MAX_METHODS)
        return; /* unusable entries are left out: calls to them are refused */
    struct method_ent *nm = realloc(bp->m, (bp->n + 1) * sizeof *nm);
    if (!nm) {
        bp->oom = 1;
        return;
    }
    bp->m = nm;
    memset(&nm[bp->n], 0, sizeof nm[0]);
    nm[bp->n].id = id;
    memcpy(nm[bp->n].name, name, name_len);
    bp->n++;
}

static int raw_by_id(const void *a, const void *b)
{
    const struct raw_method *x = a, *y = b;
    return x->id < y->id ? -1 : x->id > y->id;
}

static int raw_by_name(const void *a, const void *b)
{
    const struct raw_method *x = a, *y = b;
    if (x->len != y->len)
        return x->len < y->len ? -1 : 1;
    return memcmp(x->name, y->name, x->len);
}

/* The ACL maps a call's method id to a name; the client maps names to ids (the last entry
 * wins). A table listing an id or a name twice could make the gateway allow a call by one
 * name that the service runs as another: refused. Returns 0, or -1 with why filled. */
static int methods_unique(struct raw_method *raw, size_t n, char *why, size_t whylen)
{
    if (n < 2)
        return 0;
    qsort(raw, n, sizeof *raw, raw_by_id);
    for (size_t i = 1; i < n; i++)
        if (raw[i].id == raw[i - 1].id) {
            snprintf(why, whylen, "the service's method table lists method id %u twice", raw[i].id);
            return -1;
        }
    qsort(raw, n, sizeof *raw, raw_by_name);
    for (size_t i = 1; i < n; i++)
        if (raw_by_name(&raw[i], &raw[i - 1]) == 0) {
            snprintf(why, whylen, "the service's method table lists method '%.*s' twice",
                     (int)(raw[i].len < 64 ? raw[i].len : 64), raw[i].name);
            return -1;
        }
    return 0;
}

/* BindServiceReply: learn the service's method table. Returns 0, or -1 if
 * the session had to be closed. */
int tg_gwb_learn_bind(struct tg_gw_session *s, const struct tg_frame_info *fi)
{
    ssize_t bi = tg_gwb_find_bind(s, fi->request_id);
    if (bi < 0)
        return 0;
    struct pending_bind pb = s->binds[bi];
    tg_gwb_remove_bind(s, (size_t)bi);
    int success = 0;
    uint32_t sid = 0;
    struct bind_parse bp = {NULL, 0, NULL, 0, 0, 0};
    if (tg_ipc_parse_bind_reply(fi->msg_data, fi->msg_len, &success, &sid, bind_method_cb, &bp) != 0)
        success = 0;
    const char *label = NULL;
    char why[160];
    if (success && sid >= TG_GW_LOCAL_SERVICE_ID_BASE) {
        label = "upstream_service_id";
        snprintf(why, sizeof why, "upstream service id collides with the gateway's");
    } else if (success && !bp.oom && methods_unique(bp.raw, bp.n_raw, why, sizeof why) != 0) {
        label = "upstream_methods";
    }
    free(bp.raw);
    if (label) {
        free(bp.m);
        if (pb.private_ && pb.cb)
            pb.cb(s, 0, 0, pb.arg);
        tg_gwb_violation(s, label, why);
        return -1;
    }
    if (success && sid && !bp.oom) {
        struct bound_svc *b = tg_gwb_add_svc(s, sid, pb.name);
        if (b) {
            b->methods = bp.m;
            b->n_methods = bp.n;
            bp.m = NULL;
            for (size_t i = 0; i < b->n_methods; i++)
                b->methods[i].metric = tg_gw_metrics_method(s->gw->metrics, b->name, b->methods[i].name);
        } else {
            tg_warn(LOG, "session %llu: too many bound services; calls to %s will be refused",
                    (unsigned long long)s->id, pb.name);
        }
    }
    free(bp.m);
    if (pb.private_ && pb.cb)
        pb.cb(s, success && sid, sid, pb.arg);
    return 0;
}

const char *tg_gw_session_service_name(const struct tg_gw_session *s, uint32_t service_id)
{
    const struct bound_svc *b = find_svc_c(s, service_id);
    return b ? b->name : NULL;
}

const char *tg_gw_session_method_name(const struct tg_gw_session *s, uint32_t service_id, uint32_t method_id)
{
    const struct bound_svc *b = find_svc_c(s, service_id);
    if (!b)
        return NULL;
    if (b->local)
        return method_id >= 1 && method_id <= b->local->n_methods ? b->local->methods[method_id - 1].name : NULL;
    for (size_t i = 0; i < b->n_methods; i++)
        if (b->methods[i].id == method_id)
            return b->methods[i].name;
    return NULL;
}

uint32_t tg_gw_session_service_id(const struct tg_gw_session *s, const char *service)
{
    for (size_t i = 0; i < s->n_svcs; i++)
        if (!s->svcs[i].local && strcmp(s->svcs[i].name, service) == 0)
            return s->svcs[i].id;
    return 0;
}

uint32_t tg_gw_session_method_id(const struct tg_gw_session *s, const char *service, const char *method)
{
    for (size_t i = 0; i < s->n_svcs; i++) {
        if (s->svcs[i].local || strcmp(s->svcs[i].name, service) != 0)
            continue;
        for (size_t j = 0; j < s->svcs[i].n_methods; j++)
            if (strcmp(s->svcs[i].methods[j].name, method) == 0)
                return s->svcs[i].methods[j].id;
    }
    return 0;
}
