/* gw_ws_policy.h: the decisions of the HTTP/WebSocket front end, as pure
 * functions of the request (no libwebsockets here, so they are unit-tested
 * directly): routes, the Origin check, where a token comes from, and which
 * roles a WebSocket client gets.
 *
 * Token forms (both are never logged):
 *  - Sec-WebSocket-Protocol: the client offers the subprotocol "tracegate"
 *    FIRST and the token as a second one, "tracegate.token.<token>"
 *    (browsers: new WebSocket(url, ["tracegate", "tracegate.token." + t])).
 *    The server accepts "tracegate". The whole header must fit in 127 bytes
 *    (a libwebsockets limit), so tokens there are at most
 *    TG_WS_MAX_PROTOCOL_TOKEN characters of [A-Za-z0-9._~+-] (tokens from
 *    `tracegated --gen-token` fit: base64url, 43 characters).
 *  - the query parameter ?token=<token> (URL-encoded), for clients that
 *    cannot set a subprotocol (tracectl only with --token-in-url: URLs end
 *    up in proxy logs).
 * When both are given, they must be equal.
 *
 * Host rule (every HTTP request and upgrade, checked first): the Host header
 * must name this server: a loopback address literal, "localhost", the bind
 * address when it is not a wildcard, or a configured --http-host name (any
 * port). Anything else is answered 421, so a DNS-rebound name never reaches
 * a route (tg_ws_host_allowed).
 *
 * Origin rule: a present Origin must be on the gateway's allow-list
 * (tg_gw_origin_allowed) or be this server's own origin (scheme://Host with
 * an allowed Host, see above). A missing Origin means a
 * non-browser client (browsers always send one on WebSockets): allowed on
 * loopback, and elsewhere only with a valid token or client certificate.
 *
 * /adb and /adb/<node> (a byte pipe to an ADB server): the same Host,
 * Origin, subprotocol and identity rules, then the route must be on
 * (tg_ws_adb_enabled, else 404) and the client must hold one of
 * cfg->adb_roles (default adb or admin): a client with no credentials at
 * all gets 401 (there is no in-band authentication on a byte pipe), one
 * whose roles lack them 403. The tracing service's health does not matter.
 *
 * Roles: a valid token → its roles (auth TOKEN); a verified client
 * certificate → cert_roles (auth CERT); a loopback client whose uid the
 * kernel told us (rq->cred) → local_roles for root and our own uid,
 * local_user_roles for any other uid (auth LOCAL, principal "uid:N");
 * otherwise (incl. a loopback peer of unknown uid), when require_token is
 * set → 401, else roles 0 (auth NONE: the core asks for in-band
 * authentication). A token that is presented but unknown is always 401.
 *
 * Threading: pure functions plus the thread-safe tg_gw_* calls of gw.h. */
#ifndef TRACEGATE_GATEWAY_GW_WS_POLICY_H
#define TRACEGATE_GATEWAY_GW_WS_POLICY_H

#include <stddef.h>

#include "gw.h"
#include "gw_identity.h"
#include "gw_ws.h"
#include "net/ws_wire.h"


enum tg_ws_route {
    TG_WS_ROUTE_NOT_FOUND = 0,
    TG_WS_ROUTE_HEALTHZ,
    TG_WS_ROUTE_METRICS,
    TG_WS_ROUTE_STATUS,
    TG_WS_ROUTE_STATIC,   /* "/" and everything not below */
    TG_WS_ROUTE_CONSUMER, /* "/traced", "/traced/<node>" (WebSocket only) */
    TG_WS_ROUTE_PRODUCER, /* "/producer" (WebSocket only) */
    TG_WS_ROUTE_ADB,      /* "/adb", "/adb/<node>" (WebSocket only) */
};

/* Classifies a path (no query). For "/traced/<node>" and "/adb/<node>" the
 * node ([A-Za-z0-9._-], at most 63 characters) is copied to node; a bad node
 * name is NOT_FOUND. */
enum tg_ws_route tg_ws_route_of(const char *path, char *node, size_t nodelen);

/* Whether the printable IP address is a loopback address (127/8, ::1,
 * ::ffff:127.x.y.z). */
int tg_ws_ip_is_loopback(const char *ip);

/* Whether a Host header value names this machine safely (loopback literal,
 * "localhost", or bind_host when it is not a wildcard). */
int tg_ws_host_is_local(const char *host, const char *bind_host);
/* The Host rule: tg_ws_host_is_local, or the host name (port removed) equals
 * one of cfg->http_hosts (case-insensitive). NULL or "" is not allowed. */
int tg_ws_host_allowed(const char *host, const struct tg_gw_ws_config *cfg);

/* Parses a Sec-WebSocket-Protocol value (NULL = absent). Returns 0 and sets
 * token ("" if none) when acceptable, or -1 with a reason for a 400. */
int tg_ws_parse_protocols(const char *hdr, char *token, size_t toklen, const char **why);

/* One upgrade request, as the lws callback sees it. */
struct tg_ws_request {
    const char *path;         /* without query */
    const char *origin;       /* NULL when absent */
    const char *host;         /* Host header, NULL when absent */
    const char *protocols;    /* Sec-WebSocket-Protocol, NULL when absent */
    const char *query_token;  /* ?token= value (decoded), NULL when absent */
    const char *traceparent;  /* `traceparent` header or ?traceparent=, NULL when absent */
    int tls;
    const char *cert_subject; /* verified client certificate's name, or NULL */
    const char *peer_ip;      /* printable */
    int peer_port;
    const struct tg_peer_cred *cred; /* the local peer's uid (sock_diag), NULL when unknown or not local */
};

struct tg_ws_decision {
    int status;         /* 0 = accept; else the HTTP status to answer */
    const char *reason; /* short, safe to log and to send */
    enum tg_ws_route route; /* CONSUMER, PRODUCER or ADB when accepted */
    const char *label;  /* metrics label of a refusal when the status alone does not say it, else NULL */
    struct tg_gw_client_info info;
};

/* Whether /adb is served: cfg->adb ON, or AUTO on a loopback bind_host. */
int tg_ws_adb_enabled(const struct tg_gw_ws_config *cfg);
/* The roles that grant /adb (cfg->adb_roles, default adb and admin). */
unsigned tg_ws_adb_roles(const struct tg_gw_ws_config *cfg);

/* Decides an upgrade: route (404), Origin (403), subprotocol (400), auth
 * (401), then upstream health (503) for /traced and /producer, or the adb
 * role (401/403) for /adb, in this order. Counts nothing. */
void tg_ws_decide_upgrade(struct tg_gw *gw, const struct tg_gw_ws_config *cfg, const struct tg_ws_request *rq,
                          struct tg_ws_decision *d);

/* ---- plain HTTP routes ---- */

/* The token of an Authorization header value "Bearer <token>" (scheme
 * case-insensitive, surrounding blanks ignored): a pointer into hdr and its
 * length, or NULL when hdr is not of that form. */
const char *tg_ws_bearer_token(const char *hdr, size_t *len);

/* Whether /metrics and /api/status need credentials: cfg->protect_status,
 * or the front end is bound to a non-loopback address and tokens or
 * certificates are required (cfg->require_token, i.e. not --insecure without
 * a token file). /healthz and static files never do. */
int tg_ws_status_needs_auth(const struct tg_gw_ws_config *cfg);

struct tg_ws_http_request {
    enum tg_ws_route route;
    const char *authorization; /* Authorization header, NULL when absent */
    const char *cert_subject;  /* verified client certificate's name, or NULL */
};

struct tg_ws_http_decision {
    int status;         /* 0 = serve; else 401 or 403 */
    const char *reason; /* short, safe to log and to send */
    int auth_failure;   /* a credential was presented and is wrong (count it) */
    unsigned roles;     /* what the credential granted (for the log) */
    char principal[96]; /* token name or certificate subject, "" if none */
};

/* Access to a plain HTTP route (the Host check comes before): /metrics and
 * /api/status need observer, recorder or admin when tg_ws_status_needs_auth:
 * a bearer token's roles, else a verified certificate's cert_roles. */
void tg_ws_decide_http(struct tg_gw *gw, const struct tg_gw_ws_config *cfg, const struct tg_ws_http_request *rq,
                       struct tg_ws_http_decision *d);

/* Whether a static path is safe to map below a web root: absolute, no "..",
 * no hidden segments, no backslashes or control characters. */
int tg_ws_static_path_ok(const char *path);

/* Content-Type for a file name, by extension. */
const char *tg_ws_mime_type(const char *name);

#endif
