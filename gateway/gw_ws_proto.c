/* gw_ws_proto.c: the "tracegate" lws protocol callback: accept-time limits, the Host check, upgrade
 * checks (Origin, token, route, health), WebSocket events, HTTP dispatch. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "gw_ws_int.h"
#include "tracegate/addr.h"
#include "gw_ws_policy.h"
#include "net/tls.h"
#include "net/ws_close_note.h"
#include "net/ws_link.h"
#include "tracegate/log.h"
#include "tracegate/peer_cred.h"

/* Header copies for one request. */
struct req_bufs {
    char path[512], origin[256], host[256], protocols[512], token[TG_WS_MAX_TOKEN + 8], ip[INET6_ADDRSTRLEN];
    char cert[256]; /* as struct tg_tls_peer's subject */
    char traceparent[96]; /* lws copies "traceparent=" and the value */
    struct tg_peer_cred cred;
};

static const char *copy_hdr(struct lws *wsi, enum lws_token_indexes t, char *buf, size_t cap)
{
    int total = lws_hdr_total_length(wsi, t);
    if (total <= 0)
        return NULL;
    if ((size_t)total >= cap) {
        /* too long to be valid for any of our checks: make it visibly so */
        memset(buf, 'x', cap - 1);
        buf[cap - 1] = '\0';
        return buf;
    }
    if (lws_hdr_copy(wsi, buf, (int)cap, t) < 0)
        return NULL;
    return buf;
}

void tg_gw_ws_peer_of(struct lws *wsi, char *ip, size_t iplen, int *port)
{
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    snprintf(ip, iplen, "?");
    *port = 0;
    lws_sockfd_type fd = lws_get_socket_fd(wsi);
    if (fd < 0 || getpeername(fd, (struct sockaddr *)&ss, &sl) != 0)
        return;
    unsigned p;
    tg_sockaddr_host(&ss, ip, iplen, &p);
    *port = (int)p;
}

const char *tg_gw_ws_cert_subject(struct lws *wsi, char *out, size_t cap)
{
    SSL *ssl = lws_get_ssl(wsi);
    if (!ssl)
        return NULL;
    X509 *x = SSL_get_peer_certificate(ssl);
    if (!x)
        return NULL;
    /* the whole subject, as the TLS listener names it (one principal per certificate on every
     * transport; a CN alone made certificates with one CN and different O or OU one principal) */
    const char *r = SSL_get_verify_result(ssl) == X509_V_OK && tg_tls_subject_text(x, out, cap) == 0 && out[0]
                        ? out
                        : NULL;
    X509_free(x);
    return r;
}

static void read_request(struct tg_gw_ws *ws, struct lws *wsi, struct req_bufs *b, struct tg_ws_request *rq)
{
    memset(rq, 0, sizeof *rq);
    rq->path = copy_hdr(wsi, WSI_TOKEN_GET_URI, b->path, sizeof b->path);
    if (!rq->path)
        rq->path = "";
    rq->origin = copy_hdr(wsi, WSI_TOKEN_ORIGIN, b->origin, sizeof b->origin);
    rq->host = copy_hdr(wsi, WSI_TOKEN_HOST, b->host, sizeof b->host);
    rq->protocols = copy_hdr(wsi, WSI_TOKEN_PROTOCOL, b->protocols, sizeof b->protocols);
    rq->query_token = lws_get_urlarg_by_name(wsi, "token=", b->token, (int)sizeof b->token);
    /* W3C trace context: the `traceparent` header, else ?traceparent= (docs/onepath.md) */
    rq->traceparent = NULL;
#ifdef LWS_WITH_CUSTOM_HEADERS
    int tl = lws_hdr_custom_length(wsi, "traceparent:", 12);
    if (tl > 0 && (size_t)tl < sizeof b->traceparent &&
        lws_hdr_custom_copy(wsi, b->traceparent, (int)sizeof b->traceparent, "traceparent:", 12) > 0)
        rq->traceparent = b->traceparent;
#endif
    if (!rq->traceparent)
        rq->traceparent = lws_get_urlarg_by_name(wsi, "traceparent=", b->traceparent, (int)sizeof b->traceparent);
    rq->tls = ws->cfg.tls;
    rq->cert_subject = ws->cfg.tls ? tg_gw_ws_cert_subject(wsi, b->cert, sizeof b->cert) : NULL;
    tg_gw_ws_peer_of(wsi, b->ip, sizeof b->ip, &rq->peer_port);
    rq->peer_ip = b->ip;
    if (tg_ws_ip_is_loopback(b->ip) && tg_peer_cred_of(lws_get_socket_fd(wsi), &b->cred) == 0)
        rq->cred = &b->cred;
}

const char *tg_gw_ws_printable(const char *s, char *out, size_t cap)
{
    size_t i = 0;
    for (; s && s[i] && i + 1 < cap && i < 120; i++)
        out[i] = (s[i] >= 0x20 && s[i] < 0x7f && s[i] != '"') ? s[i] : '?';
    out[i] = '\0';
    return out;
}

void tg_gw_ws_current_cfg(struct tg_gw_ws *ws, struct tg_gw_ws_config *out)
{
    struct tg_gw_role_defaults rd;
    tg_gw_role_defaults(ws->gw, &rd);
    *out = ws->cfg;
    out->local_roles = rd.local_roles;
    out->cert_roles = rd.cert_roles;
    out->local_user_roles = rd.local_user_roles;
}

static int confirm_upgrade(struct tg_gw_ws *ws, struct lws *wsi, const char *upgrade)
{
    if (tg_gw_ws_check_host(ws, wsi, "WebSocket") != 0)
        return 1;
    if (strcasecmp(upgrade, "websocket") != 0)
        return tg_gw_ws_http_reply_now(wsi, 400, "only WebSocket upgrades are supported") ? -1 : 1;
    struct req_bufs b;
    struct tg_ws_request rq;
    struct tg_ws_decision d;
    struct tg_gw_ws_config cfg;
    tg_gw_ws_current_cfg(ws, &cfg);
    read_request(ws, wsi, &b, &rq);
    tg_ws_decide_upgrade(ws->gw, &cfg, &rq, &d);
    if (d.status == 0)
        return 0;
    char pp[128], po[128];
    tg_info(TG_WS_LOG, "refused WebSocket %s from %s: %d %s%s%s%s", tg_gw_ws_printable(rq.path, pp, sizeof pp),
            d.info.peer, d.status, d.reason, rq.origin ? " (Origin \"" : "",
            rq.origin ? tg_gw_ws_printable(rq.origin, po, sizeof po) : "", rq.origin ? "\")" : "");
    if (d.status == 401)
        tg_gw_count_auth_failure(ws->gw, d.info.transport, d.reason);
    else
        tg_gw_count_rejected(ws->gw, d.label             ? d.label
                                     : d.status == 403 ? "ws origin"
                                     : d.status == 503 ? "ws upstream down"
                                                       : "ws bad request");
    return tg_gw_ws_http_reply_now(wsi, d.status, d.reason) ? -1 : 1;
}

static void log_established(const struct tg_ws_request *rq, const struct tg_ws_decision *d)
{
    char pp[128];
    tg_info(TG_WS_LOG, "WebSocket %s from %s (%s, roles 0x%x%s%s)", tg_gw_ws_printable(rq->path, pp, sizeof pp),
            d->info.peer,
            d->info.auth == TG_GW_AUTH_TOKEN  ? "token"
            : d->info.auth == TG_GW_AUTH_CERT ? "certificate"
            : d->info.auth == TG_GW_AUTH_LOCAL ? "loopback"
                                               : "unauthenticated",
            d->info.roles, d->info.principal[0] ? ", " : "", d->info.principal);
}

int tg_gw_ws_attach_seam(struct tg_gw_ws *ws, struct lws *wsi, const struct tg_gw_client_info *info)
{
    struct tg_ws_link *link = tg_ws_link_attach_seam(wsi, ws->seams, ws->cfg.max_message);
    if (!link) {
        tg_warn(TG_WS_LOG, "cannot hand %s to the gateway: out of memory", info->peer);
        return -1;
    }
    /* on failure the seam is abandoned: the link sees the end and closes the WebSocket */
    tg_ws_handoff_post_seam(ws->handoff, tg_ws_link_seam(link), info);
    return 0;
}

static int established(struct tg_gw_ws *ws, struct lws *wsi, struct tg_ws_pss *pss)
{
    tg_gw_ws_guard_forget(ws, wsi); /* a WebSocket now: the gateway's own limits apply from here */
    struct req_bufs b;
    struct tg_ws_request rq;
    struct tg_ws_decision d;
    struct tg_gw_ws_config cfg;
    tg_gw_ws_current_cfg(ws, &cfg);
    read_request(ws, wsi, &b, &rq);
    tg_ws_decide_upgrade(ws->gw, &cfg, &rq, &d);
    if (d.status != 0) {
        /* changed since the upgrade was confirmed (e.g. a token reload) */
        lws_close_reason(wsi, LWS_CLOSE_STATUS_POLICY_VIOLATION, (unsigned char *)"refused", 7);
        return -1;
    }
    if (d.route != TG_WS_ROUTE_ADB) {
        log_established(&rq, &d);
        /* Perfetto IPC: on the gateway's own loop once lws let go of it (gw_ws_native.c), else
         * handed over in memory (net/ws_seam.h) */
        if (tg_gw_ws_native_begin(ws, wsi, pss, &d.info))
            return 0;
        return tg_gw_ws_attach_seam(ws, wsi, &d.info);
    }
    /* /adb: a byte pipe to a socket (the ADB server's, spliced), so a socketpair */
    struct tg_ws_close_note *note = tg_ws_close_note_new();
    if (!note)
        return -1;
    int sv[2];
    if (tg_ws_link_socketpair(sv) != 0) {
        tg_warn(TG_WS_LOG, "cannot create a socketpair for %s: %m", d.info.peer);
        tg_ws_close_note_unref(note);
        return -1;
    }
    struct tg_ws_link *link = tg_ws_link_attach(wsi, lws_get_vhost(wsi), sv[0], ws->cfg.max_message);
    if (!link) {
        close(sv[1]);
        tg_warn(TG_WS_LOG, "cannot adopt the socketpair for %s", d.info.peer);
        tg_ws_close_note_unref(note);
        return -1;
    }
    tg_ws_link_accept_text(link); /* the UI sends ADB requests as text messages */
    tg_ws_link_set_close_note(link, note);
    log_established(&rq, &d);
    /* on failure the fd is closed: the link sees EOF and closes the WebSocket */
    tg_ws_handoff_post_adb(ws->handoff, sv[1], &d.info, note);
    tg_ws_close_note_unref(note);
    return 0;
}

int tg_gw_ws_callback(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in, size_t len)
{
    struct tg_ws_pss *pss = user;
    switch (reason) {
    case LWS_CALLBACK_OPENSSL_PERFORM_CLIENT_CERT_VERIFICATION:
        /* lws accepts the certificate when this returns 0: keep OpenSSL's verdict */
        return len ? 0 : 1;
    case LWS_CALLBACK_OPENSSL_LOAD_EXTRA_SERVER_VERIFY_CERTS:
        tg_gw_ws_capture_ssl_ctx(user);
        return 0;
    default:
        break;
    }
    struct lws_context *ctx = wsi ? lws_get_context(wsi) : NULL;
    struct tg_gw_ws *ws = ctx ? lws_context_user(ctx) : NULL;
    if (!ws)
        return 0;
    switch (reason) {
    case LWS_CALLBACK_FILTER_NETWORK_CONNECTION:
        /* wsi is the listener here; user the accepted socket's address */
        return tg_gw_ws_guard_accept(ws, user) != 0 ? -1 : 0;
    case LWS_CALLBACK_SERVER_NEW_CLIENT_INSTANTIATED:
        tg_gw_ws_guard_new_wsi(ws, wsi);
        return 0;
    case LWS_CALLBACK_WSI_CREATE:
        ws->live_wsis++;
        return 0;
    case LWS_CALLBACK_WSI_DESTROY:
        tg_gw_ws_guard_forget(ws, wsi);
        if (ws->live_wsis > 0)
            ws->live_wsis--;
        return 0;
    case LWS_CALLBACK_EVENT_WAIT_CANCELLED:
        tg_ws_link_service_seams(ws->seams); /* the gateway side of a seam asked */
        tg_gw_ws_do_reload(ws);
        return 0;
    case LWS_CALLBACK_HTTP:
        tg_gw_ws_guard_phase(ws, wsi, TG_WS_PENDING_RESPONSE); /* the request headers are complete */
        return tg_gw_ws_http_request(ws, wsi, pss, in);
    case LWS_CALLBACK_HTTP_WRITEABLE:
        return tg_gw_ws_http_writeable(ws, wsi, pss);
    case LWS_CALLBACK_CLOSED_HTTP:
        tg_gw_ws_guard_forget(ws, wsi);
        if (pss)
            tg_gw_ws_http_cleanup(pss);
        return 0;
    case LWS_CALLBACK_HTTP_DROP_PROTOCOL:
        if (pss)
            tg_gw_ws_http_cleanup(pss);
        return 0;
    case LWS_CALLBACK_HTTP_CONFIRM_UPGRADE:
        tg_gw_ws_guard_phase(ws, wsi, TG_WS_PENDING_RESPONSE); /* the upgrade request is complete */
        return confirm_upgrade(ws, wsi, in ? (const char *)in : "");
    case LWS_CALLBACK_ESTABLISHED:
        return established(ws, wsi, pss);
    case LWS_CALLBACK_RECEIVE: {
        if (pss && pss->native_info)
            return tg_gw_ws_native_receive(ws, wsi, pss, in, len);
        struct tg_ws_link *l = tg_ws_link_of(wsi);
        return l ? tg_ws_link_on_rx(l, in, len) : -1;
    }
    case LWS_CALLBACK_SERVER_WRITEABLE: {
        if (pss && pss->native_info)
            return tg_gw_ws_native_writeable(ws, wsi, pss);
        struct tg_ws_link *l = tg_ws_link_of(wsi);
        return l ? tg_ws_link_on_writeable(l) : -1;
    }
    case LWS_CALLBACK_CLOSED: {
        if (pss)
            tg_gw_ws_native_forget(pss);
        struct tg_ws_link *l = tg_ws_link_of(wsi);
        if (l)
            tg_ws_link_on_closed(l);
        return 0;
    }
    default:
        return 0;
    }
}
