/* gw_ws_http.c: the HTTP routes of the WebSocket port: the Host check, /healthz, /metrics and /api/status (with
 * credentials off loopback; the status lists every route with its roles and target), static files (or a built-in
 * page). */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "gw_adb.h"
#include "gw_adb_target.h"
#include "base/json_str.h"
#include "base/log_sample.h"
#include "gw_ws_int.h"
#include "gw_ws_policy.h"
#include "net/ws_filter.h"
#include "net/ws_link.h"
#include "tracegate/clock.h"
#include "tracegate/log.h"

#define CHUNK 16384

static const char k_builtin_page[] =
    "<!doctype html>\n"
    "<html lang=\"en\"><head><meta charset=\"utf-8\"><title>tracegate</title>\n"
    "<style>body{font:15px/1.5 system-ui,sans-serif;max-width:46em;margin:2em auto;padding:0 1em}"
    "code{background:#eee;padding:0 .3em}</style></head><body>\n"
    "<h1>tracegate</h1>\n"
    "<p>This is a tracegate gateway. Point the Perfetto UI (<a href=\"https://ui.perfetto.dev\">ui.perfetto.dev</a>)"
    " at <code>ws://127.0.0.1:8037/traced</code> to record through it, or use "
    "<code>tracectl query ws://HOST:PORT/traced</code>.</p>\n"
    "<ul>\n"
    "<li><code>/traced</code>, <code>/traced/&lt;node&gt;</code>: Perfetto consumer port over WebSocket</li>\n"
    "<li><code>/producer</code>: Perfetto producer port over WebSocket</li>\n"
    "<li><code>/adb</code>: the ADB server over WebSocket (Perfetto UI: ADB + WebSocket), for the adb role</li>\n"
    "<li><a href=\"/healthz\">/healthz</a>: health of the tracing service</li>\n"
    "<li><a href=\"/metrics\">/metrics</a>: Prometheus metrics</li>\n"
    "<li><a href=\"/api/status\">/api/status</a>: status as JSON</li>\n"
    "</ul>\n"
    "<p id=\"status\"></p>\n"
    "</body></html>\n";

static const char *status_text(int status)
{
    switch (status) {
    case 200: return "ok";
    case 400: return "bad request";
    case 401: return "unauthorized";
    case 403: return "forbidden";
    case 404: return "not found";
    case 405: return "method not allowed";
    case 421: return "misdirected request";
    case 426: return "upgrade required";
    case 500: return "internal error";
    case 503: return "service unavailable";
    default: return "error";
    }
}

static int add_hdr(struct lws *wsi, const char *name, const char *value, unsigned char **p, unsigned char *end)
{
    return lws_add_http_header_by_name(wsi, (const unsigned char *)name, (const unsigned char *)value,
                                       (int)strlen(value), p, end);
}

/* The status line and headers; www_auth: a WWW-Authenticate value (401), or NULL. */
static int send_headers_ex(struct lws *wsi, int status, const char *ctype, size_t len, int no_store, int is_page,
                           const char *www_auth)
{
    unsigned char buf[LWS_PRE + 1024];
    unsigned char *start = buf + LWS_PRE, *p = start, *end = buf + sizeof buf - 1;
    if (lws_add_http_common_headers(wsi, (unsigned)status, ctype, (lws_filepos_t)len, &p, end) ||
        add_hdr(wsi, "x-content-type-options:", "nosniff", &p, end) ||
        add_hdr(wsi, "x-frame-options:", "DENY", &p, end) ||
        add_hdr(wsi, "referrer-policy:", "no-referrer", &p, end))
        return -1;
    if (no_store && add_hdr(wsi, "cache-control:", "no-store", &p, end))
        return -1;
    if (status == 405 && add_hdr(wsi, "allow:", "GET, HEAD", &p, end))
        return -1;
    if (www_auth && add_hdr(wsi, "www-authenticate:", www_auth, &p, end))
        return -1;
    if (is_page && add_hdr(wsi, "content-security-policy:",
                           "default-src 'none'; style-src 'unsafe-inline'; img-src 'self'", &p, end))
        return -1;
    return lws_finalize_write_http_header(wsi, start, &p, end) ? -1 : 0;
}

/* Writes the status line and headers. */
static int send_headers(struct lws *wsi, int status, const char *ctype, size_t len, int no_store, int is_page)
{
    return send_headers_ex(wsi, status, ctype, len, no_store, is_page, NULL);
}

static int reply_now_ex(struct lws *wsi, int status, const char *text, const char *www_auth)
{
    char body[512];
    int n = snprintf(body, sizeof body, "%d %s: %s\n", status, status_text(status), text ? text : "");
    if (n < 0)
        return -1;
    size_t len = (size_t)n < sizeof body ? (size_t)n : sizeof body - 1;
    if (send_headers_ex(wsi, status, "text/plain; charset=utf-8", len, 1, 0, www_auth) != 0)
        return -1;
    unsigned char out[LWS_PRE + sizeof body];
    memcpy(out + LWS_PRE, body, len);
    return lws_write(wsi, out + LWS_PRE, len, LWS_WRITE_HTTP_FINAL) < (int)len ? -1 : 0;
}

int tg_gw_ws_http_reply_now(struct lws *wsi, int status, const char *text)
{
    return reply_now_ex(wsi, status, text, NULL);
}

int tg_gw_ws_check_host(struct tg_gw_ws *ws, struct lws *wsi, const char *what)
{
    char host[256];
    int total = lws_hdr_total_length(wsi, WSI_TOKEN_HOST);
    int have = total > 0 && (size_t)total < sizeof host &&
               lws_hdr_copy(wsi, host, (int)sizeof host, WSI_TOKEN_HOST) > 0;
    if (have && tg_ws_host_allowed(host, &ws->cfg))
        return 0;
    char ip[64], ph[128];
    int port;
    tg_gw_ws_peer_of(wsi, ip, sizeof ip, &port);
    tg_gw_count_rejected(ws->gw, "http_host");
    if (total <= 0) {
        tg_info(TG_WS_LOG, "refused %s request from %s: no Host header", what, ip);
        tg_gw_ws_http_reply_now(wsi, 400, "a Host header is required");
        return -1;
    }
    tg_info(TG_WS_LOG, "refused %s request from %s: Host \"%s\" is not this server (allowed: loopback names%s)", what,
            ip, have ? tg_gw_ws_printable(host, ph, sizeof ph) : "(too long)",
            ws->cfg.n_http_hosts ? ", the bind address and --http-host names"
                                 : " and the bind address; see --http-host");
    tg_gw_ws_http_reply_now(wsi, 421, "this server does not answer to that Host name (see tracegated --http-host)");
    return -1;
}

void tg_gw_ws_http_cleanup(struct tg_ws_pss *pss)
{
    free(pss->body);
    pss->body = NULL;
    if (pss->has_file)
        close(pss->file_fd);
    pss->has_file = 0;
    pss->file_fd = -1;
}

/* Starts a response with a malloc'd body (taken). */
static int respond(struct lws *wsi, struct tg_ws_pss *pss, int status, const char *ctype, char *body, size_t len,
                   int no_store, int is_page)
{
    if (send_headers(wsi, status, ctype, len, no_store, is_page) != 0) {
        free(body);
        return -1;
    }
    if (pss->head_only || len == 0) {
        free(body);
        return tg_gw_ws_http_done(pss->ws, wsi) ? -1 : 0;
    }
    pss->body = (unsigned char *)body;
    pss->body_len = len;
    pss->body_off = 0;
    lws_callback_on_writable(wsi);
    return 0;
}

static int respond_text(struct lws *wsi, struct tg_ws_pss *pss, int status, const char *text)
{
    char *b = NULL;
    int n = asprintf(&b, "%s\n", text);
    if (n < 0)
        return -1;
    return respond(wsi, pss, status, "text/plain; charset=utf-8", b, (size_t)n, 1, 0);
}

/* Opens rel (no leading '/', checked by tg_ws_static_path_ok) for reading below root, or -1.
 * openat2's RESOLVE_BENEATH resolves every component, symlinks included, inside the kernel and
 * fails the open if any step leaves root (a "..", an absolute symlink, a symlink out): a check of
 * the path followed by a separate open (realpath, then open) let whoever can write in the web root
 * swap a directory for a symlink in between and read any file tracegated can. Kernels before 5.6
 * lack openat2 (and some container profiles refuse it): there the path is resolved with realpath
 * and checked, then opened.
 * O_NONBLOCK: a FIFO (or a device) in the web root must not block the WebSocket thread in open(),
 * which would stall every request and WebSocket of the port; a regular file reads the same with it. */
static int open_below(const char *root, const char *rel)
{
    const int flags = O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY;
    int dfd = open(root, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0)
        return -1;
    struct open_how how;
    memset(&how, 0, sizeof how);
    how.flags = (uint64_t)flags;
    how.resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS;
    int fd = (int)syscall(SYS_openat2, dfd, rel, &how, sizeof how);
    int e = errno;
    close(dfd);
    if (fd >= 0 || (e != ENOSYS && e != EPERM)) /* EPERM: older container seccomp profiles */
        return fd;
    char real_root[PATH_MAX], want[PATH_MAX * 2], real[PATH_MAX];
    if (!realpath(root, real_root))
        return -1;
    snprintf(want, sizeof want, "%s/%s", real_root, rel);
    if (!realpath(want, real))
        return -1;
    size_t rl = strlen(real_root);
    if (strncmp(real, real_root, rl) != 0 || (real[rl] != '/' && real[rl] != '\0'))
        return -1; /* a symlink out of the root */
    return open(real, flags);
}

static int serve_static(struct tg_gw_ws *ws, struct lws *wsi, struct tg_ws_pss *pss, const char *path)
{
    if (!ws->cfg.web_root) {
        if (strcmp(path, "/") && strcmp(path, "/index.html"))
            return respond_text(wsi, pss, 404, "404 not found");
        char *b = strdup(k_builtin_page);
        if (!b)
            return -1;
        return respond(wsi, pss, 200, "text/html; charset=utf-8", b, sizeof k_builtin_page - 1, 1, 1);
    }
    if (!tg_ws_static_path_ok(path))
        return respond_text(wsi, pss, 404, "404 not found");
    char rel[PATH_MAX];
    size_t pl = strlen(path);
    if ((size_t)snprintf(rel, sizeof rel, "%s%s", path + 1, path[pl - 1] == '/' ? "index.html" : "") >= sizeof rel)
        return respond_text(wsi, pss, 404, "404 not found");
    int fd = open_below(ws->cfg.web_root, rel);
    if (fd < 0)
        return respond_text(wsi, pss, 404, "404 not found");
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return respond_text(wsi, pss, 404, "404 not found");
    }
    if (st.st_mode & S_IWOTH) { /* made writable by every user since start: anyone could choose it */
        close(fd);
        unsigned unlogged = 0;
        if (tg_log_sample(&ws->refusal_log, tg_mono_us(), 5, 1000000u, &unlogged))
            tg_warn(TG_WS_LOG, "web-root: not serving %s: writable by every user (chmod o-w)%s", rel,
                    unlogged ? " (and more not logged)" : "");
        return respond_text(wsi, pss, 403, "403 forbidden");
    }
    if (send_headers(wsi, 200, tg_ws_mime_type(rel), (size_t)st.st_size, 0, 0) != 0) {
        close(fd);
        return -1;
    }
    if (pss->head_only || st.st_size == 0) {
        close(fd);
        return tg_gw_ws_http_done(ws, wsi) ? -1 : 0;
    }
    pss->has_file = 1;
    pss->file_fd = fd;
    pss->file_left = (size_t)st.st_size;
    lws_callback_on_writable(wsi);
    return 0;
}

/* /metrics and /api/status off loopback: a bearer token or a client certificate with observer+. */
static int check_access(struct tg_gw_ws *ws, struct lws *wsi, enum tg_ws_route route)
{
    char auth[TG_WS_MAX_TOKEN + 64], cert[256];
    int total = lws_hdr_total_length(wsi, WSI_TOKEN_HTTP_AUTHORIZATION);
    const char *authz = NULL;
    if (total > 0) {
        /* too long for any token we accept: present it as a wrong one */
        if ((size_t)total >= sizeof auth || lws_hdr_copy(wsi, auth, (int)sizeof auth, WSI_TOKEN_HTTP_AUTHORIZATION) < 0)
            snprintf(auth, sizeof auth, "Bearer -");
        authz = auth;
    }
    struct tg_gw_ws_config cfg;
    tg_gw_ws_current_cfg(ws, &cfg);
    struct tg_ws_http_request rq = {
        .route = route,
        .authorization = authz,
        .cert_subject = ws->cfg.tls ? tg_gw_ws_cert_subject(wsi, cert, sizeof cert) : NULL,
    };
    struct tg_ws_http_decision d;
    tg_ws_decide_http(ws->gw, &cfg, &rq, &d);
    memset(auth, 0, sizeof auth);
    if (d.status == 0)
        return 0;
    char ip[64];
    int port;
    tg_gw_ws_peer_of(wsi, ip, sizeof ip, &port);
    enum tg_gw_transport t = ws->cfg.tls ? TG_GW_T_WSS : TG_GW_T_WS;
    if (d.status == 401)
        tg_gw_count_auth_failure(ws->gw, t, d.auth_failure ? "http invalid token" : "http no credentials");
    else
        tg_gw_count_rejected(ws->gw, "http_forbidden");
    tg_info(TG_WS_LOG, "refused %s from %s: %d %s%s%s", route == TG_WS_ROUTE_METRICS ? "/metrics" : "/api/status", ip,
            d.status, d.reason, d.principal[0] ? ", principal " : "", d.principal);
    reply_now_ex(wsi, d.status, d.reason, d.status == 401 ? "Bearer realm=\"tracegate\"" : NULL);
    return -1;
}

/* ------------------------------------------------------------ /api/status routes */


static void json_roles(FILE *f, unsigned roles)
{
    fputc('[', f);
    int first = 1;
    for (unsigned bit = 1; bit && bit <= roles; bit <<= 1) {
        if (!(roles & bit))
            continue;
        fputs(first ? "" : ",", f);
        tg_json_str(f, tg_gw_role_name(bit));
        first = 0;
    }
    fputc(']', f);
}

/* roles: who may use the route ("any" when no credentials are asked for); target: where it leads. */
static void route(FILE *f, int *first, const char *path, const char *kind, int any, unsigned roles, const char *target,
                  int enabled)
{
    fputs(*first ? "{\"path\":" : ",{\"path\":", f);
    *first = 0;
    tg_json_str(f, path);
    fprintf(f, ",\"kind\":\"%s\",\"roles\":", kind);
    if (any)
        fputs("\"any\"", f);
    else
        json_roles(f, roles);
    fputs(",\"target\":", f);
    tg_json_str(f, target);
    fprintf(f, ",\"enabled\":%s}", enabled ? "true" : "false");
}

static void write_routes(struct tg_gw_ws *ws, FILE *f)
{
    struct tg_gw_ws_config cfg;
    tg_gw_ws_current_cfg(ws, &cfg);
    const unsigned consumer = TG_GW_ROLE_OBSERVER | TG_GW_ROLE_RECORDER | TG_GW_ROLE_ADMIN;
    const unsigned producer = TG_GW_ROLE_PRODUCER | TG_GW_ROLE_ADMIN;
    const char *ct = tg_gw_port_target(ws->gw, TG_GW_PORT_CONSUMER);
    const char *pt = tg_gw_port_target(ws->gw, TG_GW_PORT_PRODUCER);
    int status_any = !tg_ws_status_needs_auth(&cfg);
    int adb_on = ws->adb != NULL;
    char adb_local[400], adb_node[200];
    snprintf(adb_local, sizeof adb_local, "ADB server %s",
             adb_on ? tg_gw_adb_target_describe(tg_gw_adb_target_of(ws->adb)) : "(off)");
    snprintf(adb_node, sizeof adb_node, "the ADB server of node <node>%s%s%s",
             cfg.node_name && *cfg.node_name ? " (this node: " : "", cfg.node_name ? cfg.node_name : "",
             cfg.node_name && *cfg.node_name ? ")" : "");
    int first = 1;
    fputc('[', f);
    route(f, &first, "/traced", "websocket", 0, consumer, ct ? ct : "consumer port not served", ct != NULL);
    route(f, &first, "/traced/<node>", "websocket", 0, consumer, "the consumer port of node <node>", ct != NULL);
    route(f, &first, "/producer", "websocket", 0, producer, pt ? pt : "producer port not served", pt != NULL);
    route(f, &first, "/adb", "websocket", 0, tg_ws_adb_roles(&cfg), adb_local, adb_on);
    route(f, &first, "/adb/<node>", "websocket", 0, tg_ws_adb_roles(&cfg), adb_node, adb_on);
    route(f, &first, "/metrics", "http", status_any, TG_GW_ROLE_OBSERVER | TG_GW_ROLE_RECORDER | TG_GW_ROLE_ADMIN,
          "Prometheus metrics", 1);
    route(f, &first, "/api/status", "http", status_any, TG_GW_ROLE_OBSERVER | TG_GW_ROLE_RECORDER | TG_GW_ROLE_ADMIN,
          "this document", 1);
    route(f, &first, "/healthz", "http", 1, 0, "health of the tracing service", 1);
    route(f, &first, "/", "http", 1, 0, ws->cfg.web_root ? ws->cfg.web_root : "built-in page", 1);
    fputc(']', f);
}

/* The core's status object with the front end's "routes" added. */
static char *status_json(struct tg_gw_ws *ws)
{
    char *core = tg_gw_status_json(ws->gw);
    if (!core)
        return NULL;
    size_t n = strlen(core);
    while (n && core[n - 1] != '}')
        n--;
    if (!n) {
        free(core);
        return NULL;
    }
    n--; /* the object's closing brace */
    int empty = 1;
    for (size_t i = 0; i < n; i++)
        if (core[i] != '{' && core[i] != ' ' && core[i] != '\n')
            empty = 0;
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) {
        free(core);
        return NULL;
    }
    fwrite(core, 1, n, f);
    fputs(empty ? "\"routes\":" : ",\"routes\":", f);
    write_routes(ws, f);
    /* who carries /traced and /producer WebSockets once upgraded (docs/gateway.md "Native
     * WebSockets"): wss:// always lws */
    fprintf(f, ",\"websocket\":{\"data_path\":\"%s\"}}", tg_gw_ws_native_enabled(ws) ? "native" : "lws");
    free(core);
    if (fclose(f) != 0) {
        free(buf);
        return NULL;
    }
    return buf;
}

/* The WebSockets' own flow (net/ws_link.h counters: every WebSocket of this process). */
static char *ws_metrics_text(void)
{
    struct tg_ws_link_stats st;
    tg_ws_link_stats(&st);
    struct tg_ws_server_stats ns; /* native WebSockets (net/ws_filter.h) */
    tg_ws_server_stats(&ns);
    char *t = NULL;
    int n = asprintf(&t,
                     "# HELP tracegated_ws_links WebSockets joined to the gateway now.\n"
                     "# TYPE tracegated_ws_links gauge\n"
                     "tracegated_ws_links %llu\n"
                     "# HELP tracegated_ws_native WebSockets of those on the gateway's own loop "
                     "(--ws-data-path native).\n"
                     "# TYPE tracegated_ws_native gauge\n"
                     "tracegated_ws_native %llu\n"
                     "# HELP tracegated_ws_messages_sent_total WebSocket messages sent to clients.\n"
                     "# TYPE tracegated_ws_messages_sent_total counter\n"
                     "tracegated_ws_messages_sent_total %llu\n"
                     "# HELP tracegated_ws_bytes_sent_total Payload bytes of WebSocket messages sent to clients.\n"
                     "# TYPE tracegated_ws_bytes_sent_total counter\n"
                     "tracegated_ws_bytes_sent_total %llu\n"
                     "# HELP tracegated_ws_paused_total Times WebSocket flow control paused one side: to_client "
                     "(a client did not keep up; the gateway stopped sending it more), from_client (the gateway "
                     "did not keep up; the client's WebSocket was not read).\n"
                     "# TYPE tracegated_ws_paused_total counter\n"
                     "tracegated_ws_paused_total{direction=\"to_client\"} %llu\n"
                     "tracegated_ws_paused_total{direction=\"from_client\"} %llu\n"
                     "# HELP tracegated_ws_send_tails_total Messages to clients written straight from the "
                     "gateway's buffers whose end the socket did not take at once (that end was copied and "
                     "sent later).\n"
                     "# TYPE tracegated_ws_send_tails_total counter\n"
                     "tracegated_ws_send_tails_total %llu\n"
                     "# HELP tracegated_ws_send_tail_bytes_total Bytes of those ends.\n"
                     "# TYPE tracegated_ws_send_tail_bytes_total counter\n"
                     "tracegated_ws_send_tail_bytes_total %llu\n",
                     (unsigned long long)tg_ws_link_count() + ns.open, ns.open, st.out_messages + ns.out_messages,
                     st.out_bytes + ns.out_bytes, st.out_pauses + ns.out_full, st.in_pauses, st.out_tails,
                     st.out_tail_bytes);
    return n < 0 ? NULL : t;
}

/* The core's metrics, the WebSockets' and the /adb pipes'. */
static char *metrics_text(struct tg_gw_ws *ws)
{
    char *core = tg_gw_metrics_text(ws->gw);
    if (!core)
        return NULL;
    char *wsm = ws_metrics_text();
    char *adb = ws->adb ? tg_gw_adb_metrics_text(ws->adb) : NULL;
    char *all = NULL;
    if (asprintf(&all, "%s%s%s", core, wsm ? wsm : "", adb ? adb : "") < 0)
        all = NULL;
    free(wsm);
    free(adb);
    if (!all)
        return core;
    free(core);
    return all;
}

int tg_gw_ws_http_request(struct tg_gw_ws *ws, struct lws *wsi, struct tg_ws_pss *pss, const char *path)
{
    tg_gw_ws_http_cleanup(pss);
    memset(pss, 0, sizeof *pss);
    pss->file_fd = -1;
    pss->ws = ws;
    if (tg_gw_ws_check_host(ws, wsi, "HTTP") != 0)
        return -1;
    char *uri = NULL;
    int urilen = 0;
    int meth = lws_http_get_uri_and_method(wsi, &uri, &urilen);
    if (meth != LWSHUMETH_GET && meth != LWSHUMETH_HEAD) {
        tg_gw_ws_http_reply_now(wsi, 405, "only GET and HEAD");
        return -1;
    }
    pss->head_only = meth == LWSHUMETH_HEAD;
    if (!path)
        path = "/";
    enum tg_ws_route route = tg_ws_route_of(path, NULL, 0);
    if (check_access(ws, wsi, route) != 0)
        return -1;
    switch (route) {
    case TG_WS_ROUTE_HEALTHZ:
        if (tg_gw_upstream_healthy(ws->gw))
            return respond_text(wsi, pss, 200, "ok");
        return respond_text(wsi, pss, 503, "upstream unavailable");
    case TG_WS_ROUTE_METRICS: {
        char *t = metrics_text(ws);
        if (!t)
            return respond_text(wsi, pss, 500, "metrics unavailable");
        return respond(wsi, pss, 200, "text/plain; version=0.0.4; charset=utf-8", t, strlen(t), 1, 0);
    }
    case TG_WS_ROUTE_STATUS: {
        char *t = status_json(ws);
        if (!t)
            return respond_text(wsi, pss, 500, "status unavailable");
        return respond(wsi, pss, 200, "application/json", t, strlen(t), 1, 0);
    }
    case TG_WS_ROUTE_CONSUMER:
    case TG_WS_ROUTE_PRODUCER:
    case TG_WS_ROUTE_ADB:
        return respond_text(wsi, pss, 426, "426 upgrade required: this is a WebSocket endpoint");
    case TG_WS_ROUTE_STATIC:
        return serve_static(ws, wsi, pss, path);
    case TG_WS_ROUTE_NOT_FOUND:
    default:
        return respond_text(wsi, pss, 404, "404 not found");
    }
}

int tg_gw_ws_http_writeable(struct tg_gw_ws *ws, struct lws *wsi, struct tg_ws_pss *pss)
{
    unsigned char buf[LWS_PRE + CHUNK];
    size_t n = 0;
    int final = 0;
    if (pss->body) {
        n = pss->body_len - pss->body_off;
        if (n > CHUNK)
            n = CHUNK;
        memcpy(buf + LWS_PRE, pss->body + pss->body_off, n);
        pss->body_off += n;
        final = pss->body_off == pss->body_len;
    } else if (pss->has_file) {
        size_t want = pss->file_left < CHUNK ? pss->file_left : CHUNK;
        ssize_t r;
        do
            r = read(pss->file_fd, buf + LWS_PRE, want);
        while (r < 0 && errno == EINTR);
        if (r <= 0)
            return -1; /* the file shrank or failed: the length is already promised */
        n = (size_t)r;
        pss->file_left -= n;
        final = pss->file_left == 0;
    } else {
        return 0;
    }
    if (lws_write(wsi, buf + LWS_PRE, n, final ? LWS_WRITE_HTTP_FINAL : LWS_WRITE_HTTP) < (int)n)
        return -1;
    if (!final) {
        tg_gw_ws_guard_phase(ws, wsi, TG_WS_PENDING_RESPONSE); /* the client read a chunk: progress */
        lws_callback_on_writable(wsi);
        return 0;
    }
    tg_gw_ws_http_cleanup(pss);
    return tg_gw_ws_http_done(ws, wsi) ? -1 : 0;
}
