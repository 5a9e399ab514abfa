/* gw_ws_policy.c: routes, Origin, token and role decisions of the WebSocket front end (see gw_ws_policy.h). */
#include "gw_ws_policy.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "gw_limits.h"

static int node_char_ok(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
           c == '-';
}

/* "<node>" after "/traced/" or "/adb/": route when the name is valid, else NOT_FOUND. */
static enum tg_ws_route node_route(const char *n, enum tg_ws_route route, char *node, size_t nodelen)
{
    size_t len = strlen(n);
    if (len == 0 || len > 63 || !strcmp(n, ".") || !strcmp(n, ".."))
        return TG_WS_ROUTE_NOT_FOUND;
    for (size_t i = 0; i < len; i++)
        if (!node_char_ok(n[i]))
            return TG_WS_ROUTE_NOT_FOUND;
    if (node && nodelen)
        snprintf(node, nodelen, "%s", n);
    return route;
}

enum tg_ws_route tg_ws_route_of(const char *path, char *node, size_t nodelen)
{
    if (node && nodelen)
        node[0] = '\0';
    if (!path || path[0] != '/')
        return TG_WS_ROUTE_NOT_FOUND;
    if (!strcmp(path, "/healthz"))
        return TG_WS_ROUTE_HEALTHZ;
    if (!strcmp(path, "/metrics"))
        return TG_WS_ROUTE_METRICS;
    if (!strcmp(path, "/api/status"))
        return TG_WS_ROUTE_STATUS;
    if (!strcmp(path, "/producer"))
        return TG_WS_ROUTE_PRODUCER;
    if (!strcmp(path, "/traced"))
        return TG_WS_ROUTE_CONSUMER;
    if (!strncmp(path, "/traced/", 8)) {
        const char *n = path + 8;
        size_t len = strlen(n);
        if (len == 0 || len > 63 || !strcmp(n, ".") || !strcmp(n, ".."))
            return TG_WS_ROUTE_NOT_FOUND;
        /* a node name, or a federated session: "@all" or "@a,b,c" (docs/link-protocol.md §8) */
        int fed = n[0] == '@';
        if (fed && (len == 1 || n[1] == ',' || n[len - 1] == ',' || strstr(n, ",,")))
            return TG_WS_ROUTE_NOT_FOUND;
        for (size_t i = fed; i < len; i++)
            if (!node_char_ok(n[i]) && !(fed && n[i] == ','))
                return TG_WS_ROUTE_NOT_FOUND;
        if (node && nodelen)
            snprintf(node, nodelen, "%s", n);
        return TG_WS_ROUTE_CONSUMER;
    }
    if (!strcmp(path, "/adb"))
        return TG_WS_ROUTE_ADB;
    if (!strncmp(path, "/adb/", 5))
        return node_route(path + 5, TG_WS_ROUTE_ADB, node, nodelen);
    if (!strncmp(path, "/api/", 5) || !strcmp(path, "/api"))
        return TG_WS_ROUTE_NOT_FOUND;
    return TG_WS_ROUTE_STATIC;
}

int tg_ws_ip_is_loopback(const char *ip)
{
    if (!ip)
        return 0;
    struct in_addr a4;
    struct in6_addr a6;
    if (inet_pton(AF_INET, ip, &a4) == 1)
        return (ntohl(a4.s_addr) >> 24) == 127;
    if (inet_pton(AF_INET6, ip, &a6) == 1) {
        if (IN6_IS_ADDR_LOOPBACK(&a6))
            return 1;
        if (IN6_IS_ADDR_V4MAPPED(&a6))
            return a6.s6_addr[12] == 127;
    }
    return 0;
}

/* Copies the host name of a Host header value (port and IPv6 brackets removed). */
static int host_name(const char *host, char *out, size_t outlen)
{
    if (!host || !*host)
        return -1;
    const char *end;
    const char *start = host;
    if (host[0] == '[') {
        end = strchr(host, ']');
        if (!end)
            return -1;
        start = host + 1;
        if (end[1] && end[1] != ':')
            return -1;
    } else {
        end = strchr(host, ':');
        if (!end)
            end = host + strlen(host);
    }
    size_t n = (size_t)(end - start);
    if (n == 0 || n >= outlen)
        return -1;
    memcpy(out, start, n);
    out[n] = '\0';
    return 0;
}

int tg_ws_host_is_local(const char *host, const char *bind_host)
{
    char name[256];
    if (host_name(host, name, sizeof name) != 0)
        return 0;
    if (!strcasecmp(name, "localhost") || tg_ws_ip_is_loopback(name))
        return 1;
    if (bind_host && *bind_host && strcmp(bind_host, "0.0.0.0") && strcmp(bind_host, "::") &&
        strcmp(bind_host, "*") && !strcasecmp(name, bind_host))
        return 1;
    return 0;
}

int tg_ws_host_allowed(const char *host, const struct tg_gw_ws_config *cfg)
{
    if (tg_ws_host_is_local(host, cfg->bind_host))
        return 1;
    char name[256];
    if (host_name(host, name, sizeof name) != 0)
        return 0;
    for (size_t i = 0; i < cfg->n_http_hosts; i++) {
        const char *h = cfg->http_hosts[i];
        size_t hl = strlen(h);
        if (hl >= 2 && h[0] == '[' && h[hl - 1] == ']') { /* "[v6]" given with brackets */
            if (hl - 2 == strlen(name) && !strncasecmp(h + 1, name, hl - 2))
                return 1;
        } else if (!strcasecmp(h, name)) {
            return 1;
        }
    }
    return 0;
}

static int token_char_ok(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
           c == '-' || c == '~' || c == '+';
}

int tg_ws_parse_protocols(const char *hdr, char *token, size_t toklen, const char **why)
{
    token[0] = '\0';
    *why = NULL;
    if (!hdr)
        return 0;
    if (strlen(hdr) > TG_WS_MAX_PROTOCOL_HEADER) {
        *why = "Sec-WebSocket-Protocol too long (tokens fit in 96 characters: see tracegated --gen-token)";
        return -1;
    }
    int have_sub = 0;
    const size_t plen = strlen(TG_WS_TOKEN_PREFIX);
    const char *p = hdr;
    while (*p) {
        while (*p == ' ' || *p == '\t' || *p == ',')
            p++;
        if (!*p)
            break;
        const char *e = p;
        while (*e && *e != ',' && *e != ' ' && *e != '\t')
            e++;
        size_t n = (size_t)(e - p);
        if (n == strlen(TG_WS_SUBPROTOCOL) && !strncmp(p, TG_WS_SUBPROTOCOL, n)) {
            have_sub = 1;
        } else if (n > plen && !strncmp(p, TG_WS_TOKEN_PREFIX, plen)) {
            size_t tl = n - plen;
            if (tl > TG_WS_MAX_PROTOCOL_TOKEN || tl >= toklen) {
                *why = "token too long for Sec-WebSocket-Protocol (at most 96 characters: see tracegated --gen-token)";
                return -1;
            }
            for (size_t i = 0; i < tl; i++)
                if (!token_char_ok(p[plen + i])) {
                    *why = "bad character in the subprotocol token";
                    return -1;
                }
            if (!have_sub && n > 63) {
                /* libwebsockets stops at the first name over 63 bytes */
                *why = "offer the \"tracegate\" subprotocol before the token";
                return -1;
            }
            memcpy(token, p + plen, tl);
            token[tl] = '\0';
        }
        p = e;
    }
    if (!have_sub) {
        *why = "unsupported WebSocket subprotocol: offer \"tracegate\" (and \"tracegate.token.<token>\")";
        token[0] = '\0';
        return -1;
    }
    return 0;
}

static int origin_ok(struct tg_gw *gw, const struct tg_gw_ws_config *cfg, const struct tg_ws_request *rq)
{
    if (tg_gw_origin_allowed(gw, rq->origin))
        return 1;
    /* our own origin, e.g. the built-in page or the web UI served from here */
    if (!rq->host || !tg_ws_host_allowed(rq->host, cfg))
        return 0;
    const char *scheme = rq->tls ? "https://" : "http://";
    size_t sl = strlen(scheme);
    return !strncasecmp(rq->origin, scheme, sl) && !strcasecmp(rq->origin + sl, rq->host);
}

/* Loopback peers are only trusted as local on a loopback bind: behind a reverse proxy on this host
 * every remote client of a public bind would look local. */
static int bind_is_loopback(const char *bind_host)
{
    return bind_host && (tg_ws_ip_is_loopback(bind_host) || !strcasecmp(bind_host, "localhost"));
}

void tg_ws_decide_upgrade(struct tg_gw *gw, const struct tg_gw_ws_config *cfg, const struct tg_ws_request *rq,
                          struct tg_ws_decision *d)
{
    memset(d, 0, sizeof *d);
    struct tg_gw_client_info *ci = &d->info;
    ci->transport = rq->tls ? TG_GW_T_WSS : TG_GW_T_WS;
    const char *ip = rq->peer_ip ? rq->peer_ip : "?";
    if (strchr(ip, ':'))
        snprintf(ci->peer, sizeof ci->peer, "ws([%s]:%d)", ip, rq->peer_port);
    else
        snprintf(ci->peer, sizeof ci->peer, "ws(%s:%d)", ip, rq->peer_port);
    tg_gw_source_key_text(ip, cfg->source_prefix6, ci->source, sizeof ci->source);
    ci->loopback = tg_ws_ip_is_loopback(rq->peer_ip);

    /* a W3C traceparent is 55 characters of lower-case hex and '-' (a later version may be longer:
     * not kept); it is only a parent for our spans, never an access decision */
    if (rq->traceparent && strlen(rq->traceparent) == 55 &&
        strspn(rq->traceparent, "0123456789abcdef-") == 55)
        snprintf(ci->traceparent, sizeof ci->traceparent, "%s", rq->traceparent);
    enum tg_ws_route r = tg_ws_route_of(rq->path, ci->node, sizeof ci->node);
    if (r != TG_WS_ROUTE_CONSUMER && r != TG_WS_ROUTE_PRODUCER && r != TG_WS_ROUTE_ADB) {
        d->status = 404;
        d->reason = "no WebSocket endpoint here (use /traced, /traced/<node>, /producer or /adb)";
        return;
    }
    if (r == TG_WS_ROUTE_ADB && !tg_ws_adb_enabled(cfg)) {
        d->status = 404;
        d->reason = "/adb is off on this front end (non-loopback --http: see tracegated --http-adb)";
        d->label = "ws adb off";
        return;
    }
    d->route = r;
    ci->port = r == TG_WS_ROUTE_PRODUCER ? TG_GW_PORT_PRODUCER : TG_GW_PORT_CONSUMER;

    char ptoken[TG_WS_MAX_PROTOCOL_TOKEN + 1];
    const char *why = NULL;
    int proto_bad = tg_ws_parse_protocols(rq->protocols, ptoken, sizeof ptoken, &why) != 0;
    const char *token = NULL;
    if (!proto_bad) {
        if (ptoken[0] && rq->query_token && rq->query_token[0] && strcmp(ptoken, rq->query_token) != 0) {
            proto_bad = 1;
            why = "two different tokens (subprotocol and query)";
        } else if (ptoken[0]) {
            token = ptoken;
        } else if (rq->query_token && rq->query_token[0]) {
            token = rq->query_token;
        }
    }

    /* the token is checked before the Origin: a missing Origin needs it */
    unsigned token_roles = 0;
    char principal[sizeof ci->principal] = "";
    if (token && strlen(token) <= TG_WS_MAX_TOKEN)
        token_roles = tg_gw_auth_token_roles(gw, token, principal, sizeof principal);
    int cert = rq->cert_subject && rq->cert_subject[0];

    if (rq->origin) {
        if (!origin_ok(gw, cfg, rq)) {
            d->status = 403;
            d->reason = "Origin not allowed";
            return;
        }
    } else if (!ci->loopback && !token_roles && !cert) {
        d->status = 403;
        d->reason = "missing Origin (non-loopback clients without one must authenticate)";
        return;
    }
    if (proto_bad) {
        d->status = 400;
        d->reason = why;
        return;
    }

    if (token) {
        if (!token_roles) {
            d->status = 401;
            d->reason = "invalid token";
            return;
        }
        tg_gw_identity_token(ci, principal, token_roles);
    } else if (cert) {
        tg_gw_identity_cert(ci, rq->cert_subject, cfg->cert_roles ? cfg->cert_roles : TG_GW_ROLE_RECORDER);
    } else if (ci->loopback && rq->cred && bind_is_loopback(cfg->bind_host)) {
        /* a local user: its uid decides (root and ours: local-roles; others: local-user-roles) */
        struct tg_gw_local_policy pol = {.owner_roles = cfg->local_roles,
                                         .user_roles = tg_gw_roles_cap(cfg->local_user_roles, cfg->local_roles)};
        if (!tg_gw_identity_local(ci, rq->cred, &pol))
            ci->auth = TG_GW_AUTH_NONE; /* must authenticate in-band */
    } else if (cfg->require_token) {
        d->status = 401;
        d->reason = "a token is required";
        return;
    } else {
        ci->auth = TG_GW_AUTH_NONE;
        ci->roles = 0;
    }

    if (r == TG_WS_ROUTE_ADB) {
        /* a byte pipe has no in-band authentication: the roles must be there now */
        if (!(ci->roles & tg_ws_adb_roles(cfg))) {
            if (ci->auth == TG_GW_AUTH_NONE) {
                d->status = 401;
                d->reason = "/adb needs credentials with the adb role (a token, a client certificate or a local user)";
            } else {
                d->status = 403;
                d->reason = "/adb needs the adb role";
                d->label = "ws adb role";
            }
        }
        return; /* the tracing service's health does not matter to the ADB server */
    }
    if (!tg_gw_upstream_healthy(gw)) {
        d->status = 503;
        d->reason = "the tracing service is not reachable";
        return;
    }
}

int tg_ws_adb_enabled(const struct tg_gw_ws_config *cfg)
{
    if (cfg->adb == TG_GW_WS_ADB_ON)
        return 1;
    if (cfg->adb == TG_GW_WS_ADB_OFF)
        return 0;
    return bind_is_loopback(cfg->bind_host);
}

unsigned tg_ws_adb_roles(const struct tg_gw_ws_config *cfg)
{
    return cfg->adb_roles ? cfg->adb_roles : (TG_GW_ROLE_ADB | TG_GW_ROLE_ADMIN);
}

const char *tg_ws_bearer_token(const char *hdr, size_t *len)
{
    if (!hdr)
        return NULL;
    while (*hdr == ' ' || *hdr == '\t')
        hdr++;
    if (strncasecmp(hdr, "bearer", 6) != 0 || (hdr[6] != ' ' && hdr[6] != '\t'))
        return NULL;
    const char *t = hdr + 6;
    while (*t == ' ' || *t == '\t')
        t++;
    size_t n = strlen(t);
    while (n && (t[n - 1] == ' ' || t[n - 1] == '\t'))
        n--;
    for (size_t i = 0; i < n; i++)
        if (t[i] == ' ' || t[i] == '\t' || (unsigned char)t[i] < 0x20 || t[i] == 0x7f)
            return NULL;
    if (!n)
        return NULL;
    *len = n;
    return t;
}


int tg_ws_status_needs_auth(const struct tg_gw_ws_config *cfg)
{
    return cfg->protect_status || (!bind_is_loopback(cfg->bind_host) && cfg->require_token);
}

#define OBSERVER_OR_MORE (TG_GW_ROLE_OBSERVER | TG_GW_ROLE_RECORDER | TG_GW_ROLE_ADMIN)

void tg_ws_decide_http(struct tg_gw *gw, const struct tg_gw_ws_config *cfg, const struct tg_ws_http_request *rq,
                       struct tg_ws_http_decision *d)
{
    memset(d, 0, sizeof *d);
    if ((rq->route != TG_WS_ROUTE_METRICS && rq->route != TG_WS_ROUTE_STATUS) || !tg_ws_status_needs_auth(cfg))
        return;
    if (rq->authorization) {
        size_t tl = 0;
        const char *t = tg_ws_bearer_token(rq->authorization, &tl);
        if (!t) {
            d->status = 401;
            d->reason = "unsupported Authorization: send \"Authorization: Bearer <token>\"";
            d->auth_failure = 1;
            return;
        }
        char tok[TG_WS_MAX_TOKEN + 1];
        if (tl > TG_WS_MAX_TOKEN) {
            d->status = 401;
            d->reason = "invalid token";
            d->auth_failure = 1;
            return;
        }
        memcpy(tok, t, tl);
        tok[tl] = '\0';
        d->roles = tg_gw_auth_token_roles(gw, tok, d->principal, sizeof d->principal);
        memset(tok, 0, sizeof tok);
        if (!d->roles) {
            d->status = 401;
            d->reason = "invalid token";
            d->auth_failure = 1;
            return;
        }
    } else if (rq->cert_subject && rq->cert_subject[0]) {
        d->roles = cfg->cert_roles ? cfg->cert_roles : TG_GW_ROLE_RECORDER;
        snprintf(d->principal, sizeof d->principal, "%s", rq->cert_subject);
    } else {
        d->status = 401;
        d->reason = "authentication required: send \"Authorization: Bearer <token>\" or a client certificate";
        return;
    }
    if (!(d->roles & OBSERVER_OR_MORE)) {
        d->status = 403;
        d->reason = "this needs the observer, recorder or admin role";
    }
}

int tg_ws_static_path_ok(const char *path)
{
    if (!path || path[0] != '/')
        return 0;
    for (const char *p = path; *p; p++)
        if ((unsigned char)*p < 0x20 || *p == 0x7f || *p == '\\')
            return 0;
    const char *seg = path + 1;
    while (*seg) {
        const char *e = strchr(seg, '/');
        size_t n = e ? (size_t)(e - seg) : strlen(seg);
        if (n == 0 && e)
            return 0; /* "//" */
        if (n > 0 && seg[0] == '.')
            return 0; /* ".", "..", hidden files */
        if (!e)
            break;
        seg = e + 1;
    }
    return 1;
}

const char *tg_ws_mime_type(const char *name)
{
    static const struct {
        const char *ext, *type;
    } k[] = {
        {".html", "text/html; charset=utf-8"},
        {".htm", "text/html; charset=utf-8"},
        {".js", "text/javascript; charset=utf-8"},
        {".mjs", "text/javascript; charset=utf-8"},
        {".css", "text/css; charset=utf-8"},
        {".json", "application/json"},
        {".map", "application/json"},
        {".svg", "image/svg+xml"},
        {".png", "image/png"},
        {".ico", "image/x-icon"},
        {".wasm", "application/wasm"},
        {".txt", "text/plain; charset=utf-8"},
        {".woff2", "font/woff2"},
    };
    const char *dot = strrchr(name, '.');
    if (dot && !strchr(dot, '/'))
        for (size_t i = 0; i < sizeof k / sizeof k[0]; i++)
            if (!strcasecmp(dot, k[i].ext))
                return k[i].type;
    return "application/octet-stream";
}
