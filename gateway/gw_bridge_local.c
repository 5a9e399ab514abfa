/* gw_bridge_local.c: gateway-local services, answered by the gateway itself: the built-in
 * TracegateAuth (a token turns into a principal and roles) and the ones features register
 * (tg_gw_register_local_service); bound and called under the same role ACL as upstream
 * services (see gw_bridge_int.h). */
#include "gw_bridge_int.h"

#include <event2/event.h>
#include <openssl/crypto.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gw_auth.h"
#include "gw_identity.h"
#include "gw_metrics.h"
#include "tracegate/log.h"
#include "tracegate_gateway.pb-c.h"

void tg_gwb_auth_required(struct tg_gw_session *s, uint64_t rid)
{
    tg_gw_metrics_frame_rejected(s->gw->metrics, "auth_required");
    tg_gw_metrics_auth_failure(s->gw->metrics, s->info.transport, "auth_required");
    tg_warn(LOG, "session %llu: client %s sent a request before authenticating; closing", (unsigned long long)s->id,
            s->info.peer);
    tg_gwb_send_request_error(s, rid, "authentication required");
    tg_gw_session_close(s, "authentication required", 1);
}

static const struct tg_gw_local_service *find_local(struct tg_gw *gw, const char *name)
{
    for (size_t i = 0; i < gw->n_local; i++)
        if (strcmp(gw->local[i]->name, name) == 0)
            return gw->local[i];
    return NULL;
}

void tg_gwb_bind_local(struct tg_gw_session *s, uint64_t rid, const char *name)
{
    const struct tg_gw_local_service *ls = find_local(s->gw, name);
    if (!ls || !tg_gw_acl_may_bind(s->info.roles, name)) {
        if (ls) {
            tg_gw_metrics_frame_rejected(s->gw->metrics, "acl");
            tg_warn(LOG, "session %llu: denied binding %s to %s (%s)", (unsigned long long)s->id, name, s->info.peer,
                    tg_gwb_who(s));
        }
        tg_gwb_send_bind_reply(s, rid, 0, 0, NULL, 0);
        return;
    }
    size_t idx = 0;
    while (s->gw->local[idx] != ls)
        idx++;
    uint32_t sid = TG_GW_LOCAL_SERVICE_ID_BASE + (uint32_t)idx;
    struct bound_svc *b = tg_gwb_add_svc(s, sid, name);
    struct tg_ipc_method_info mi[32];
    size_t n = ls->n_methods < 32 ? ls->n_methods : 32;
    if (!b) {
        tg_gwb_send_bind_reply(s, rid, 0, 0, NULL, 0);
        return;
    }
    b->local = ls;
    for (size_t i = 0; i < n; i++) {
        mi[i].id = (uint32_t)i + 1;
        mi[i].name = ls->methods[i].name;
    }
    tg_gwb_send_bind_reply(s, rid, 1, sid, mi, n);
}

void tg_gwb_invoke_local(struct tg_gw_session *s, struct bound_svc *b, const struct tg_frame_info *fi)
{
    const struct tg_gw_local_service *ls = b->local;
    if (fi->method_id == 0 || fi->method_id > ls->n_methods) {
        tg_gw_session_reply(s, fi->request_id, 0, 0, NULL, 0);
        return;
    }
    const struct tg_gw_local_method *m = &ls->methods[fi->method_id - 1];
    if (!tg_gw_acl_allows(s->info.roles, ls->name, m->name)) {
        tg_gw_metrics_frame_rejected(s->gw->metrics, "acl");
        tg_warn(LOG, "session %llu: denied %s.%s to %s (%s)", (unsigned long long)s->id, ls->name, m->name,
                s->info.peer, tg_gwb_who(s));
        tg_gw_session_reply(s, fi->request_id, 0, 0, NULL, 0);
        return;
    }
    m->fn(s, fi->request_id, fi->payload, fi->payload_len, fi->drop_reply, ls->ctx);
}

/* TracegateAuth.Authenticate */
static void auth_authenticate(struct tg_gw_session *s, uint64_t rid, const uint8_t *args, size_t len, int drop_reply,
                              void *ctx)
{
    (void)drop_reply;
    (void)ctx;
    struct tg_gw *gw = s->gw;
    Tracegate__AuthenticateRequest *req = tracegate__authenticate_request__unpack(NULL, len, args);
    char principal[TG_GW_PRINCIPAL_MAX];
    unsigned roles = 0;
    if (req && req->token) {
        size_t tl = strlen(req->token);
        roles = tg_gw_auth_lookup(gw->auth, req->token, tl, principal, sizeof principal);
        OPENSSL_cleanse(req->token, tl);
    }
    if (req)
        tracegate__authenticate_request__free_unpacked(req, NULL);
    if (roles && s->up_opened) {
        /* the upstream already carries the identity the client had: it cannot change now */
        tg_warn(LOG, "session %llu: %s tried to authenticate after using the service as %s", (unsigned long long)s->id,
                s->info.peer, tg_gwb_who(s));
        tg_gw_session_reply(s, rid, 0, 0, NULL, 0);
        tg_gw_session_close(s, "authenticate before anything else", 1);
        return;
    }
    if (!roles) {
        tg_gw_metrics_auth_failure(gw->metrics, s->info.transport, req ? "bad_token" : "bad_request");
        tg_warn(LOG, "session %llu: authentication failed for %s (%s)", (unsigned long long)s->id, s->info.peer,
                tg_gw_transport_name(s->info.transport));
        tg_gw_session_reply(s, rid, 0, 0, NULL, 0);
        tg_gw_session_close(s, "authentication failed", 1);
        return;
    }
    tg_gw_identity_token(&s->info, principal, roles);
    if (s->hs_ev)
        event_del(s->hs_ev);
    tg_gw_metrics_auth_success(gw->metrics, "token");
    char rl[64];
    tg_gw_roles_format(roles, rl, sizeof rl);
    tg_info(LOG, "session %llu: %s authenticated as %s (roles %s)", (unsigned long long)s->id, s->info.peer,
            s->info.principal, rl);

    Tracegate__AuthenticateResponse resp = TRACEGATE__AUTHENTICATE_RESPONSE__INIT;
    char *names[8];
    size_t n = 0;
    for (unsigned bit = 1; bit <= TG_GW_ROLE_SPANS && n < sizeof names / sizeof names[0]; bit <<= 1)
        if (roles & bit)
            names[n++] = (char *)tg_gw_role_name(bit);
    resp.roles = names;
    resp.n_roles = n;
    resp.principal = s->info.principal;
    tg_gw_session_reply_msg(s, rid, &resp.base);
}

static const struct tg_gw_local_method k_auth_methods[] = {{"Authenticate", auth_authenticate}};
static const struct tg_gw_local_service k_auth_service = {TG_GW_SVC_AUTH, k_auth_methods, 1, NULL};

int tg_gw_register_local_service(struct tg_gw *gw, const struct tg_gw_local_service *svc)
{
    if (!svc || !svc->name || strncmp(svc->name, "Tracegate", 9) != 0 || gw->n_local >= TG_GW_MAX_LOCAL_SERVICES ||
        find_local(gw, svc->name))
        return -1;
    gw->local[gw->n_local++] = svc;
    return 0;
}


int tg_gw_bridge_init(struct tg_gw *gw) { return tg_gw_register_local_service(gw, &k_auth_service); }
