/* tracegated.c: the tracegate daemon: the embedded tracing service (or a bridge to a running
 * traced) plus the gateway: UNIX/TCP/TLS listeners and the HTTP/WebSocket front end; signals
 * (SIGTERM/SIGINT drain, SIGHUP reload) and start-up reporting. */
#include <errno.h>
#include <event2/event.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "config.h"
#include "base/file_trust.h"
#include "gw_auth.h"
#include "gw_config.h"
#include "fleet_spans_query.h"
#include "gw_onepath.h"
#include <openssl/crypto.h>

#include "fleet.h"
#include "fleet_service.h"
#include "gw_stats_service.h"
#include "gw_adb.h"
#include "gw_adb_addr.h"
#include "gw_adb_target.h"
#include "gw_core.h"
#include "gw_listener.h"
#include "gw_smb_filter.h"
#include "gw_resume.h" /* session survival */
#include "gw_ws.h"
#include "tracegate/addr.h"
#include "base/malloc_tune.h"
#include "tracegate/log.h"
#include "tracegate/onepath.h"
#include "tracegate/service.h"

#define LOG "tracegated"

struct daemon {
    struct event_base *base;
    int argc;
    char **argv;
    struct tg_gw_config cfg;
    struct tg_gw *gw;
    struct tg_service *svc;
    struct tg_gw_ws *ws;
    struct tg_gw_resume *resume; /* session survival (gw_resume.c); NULL when off */
    struct tg_fleet *fleet;      /* gateway links */
    char link_token[TG_GW_TOKEN_MAX + 1];
    struct event *sigterm, *sigint, *sighup, *drain_timer, *exit_timer;
    int draining, exit_code;
    int auto_bridge; /* bridging to a service found on the default sockets */
};

static void apply_logging(const struct tg_gw_config *c)
{
    tg_log_set_level((enum tg_log_level)c->log_level);
    tg_log_set_format((enum tg_log_format)c->log_format);
    if (c->syslog)
        tg_log_use_syslog("tracegated");
}

static int hash_token(void)
{
    char buf[TG_GW_TOKEN_MAX + 2];
    size_t n = fread(buf, 1, sizeof buf, stdin);
    if (n > TG_GW_TOKEN_MAX) {
        fprintf(stderr, "tracegated: token too long (at most %d bytes)\n", TG_GW_TOKEN_MAX);
        return 1;
    }
    if (n && buf[n - 1] == '\n')
        n--;
    if (n && buf[n - 1] == '\r')
        n--;
    if (!n) {
        fprintf(stderr, "tracegated: no token on stdin (e.g. `tracegated --hash-token < alice.token`; make tokens "
                        "with `tracegated --gen-token`)\n");
        return 1;
    }
    char hex[65];
    tg_gw_sha256_hex(buf, n, hex);
    memset(buf, 0, sizeof buf);
    printf("%s\n", hex);
    return 0;
}

/* --gen-token: the token alone on stdout (so `> alice.token` keeps just it), its token-file line on
 * stderr. */
static int gen_token(void)
{
    char tok[TG_GW_TOKEN_GEN_LEN + 1], hex[65];
    if (tg_gw_token_generate(tok) != 0) {
        fprintf(stderr, "tracegated: no random bytes available for a token\n");
        return 1;
    }
    tg_gw_sha256_hex(tok, strlen(tok), hex);
    printf("%s\n", tok);
    fflush(stdout);
    memset(tok, 0, sizeof tok);
    fprintf(stderr, "token-file line (set the name and roles): client recorder %s\n", hex);
    return 0;
}

static void raise_fd_limit(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
}

/* ------------------------------------------------------------ HTTP/WebSocket */

static int split_host_port(const char *s, char *host, size_t hlen, int *port)
{
    const char *colon = strrchr(s, ':');
    if (!colon || colon == s)
        return -1;
    size_t n = (size_t)(colon - s);
    if (s[0] == '[' && n >= 2 && s[n - 1] == ']') {
        s++;
        n -= 2;
    }
    if (n >= hlen)
        return -1;
    memcpy(host, s, n);
    host[n] = '\0';
    *port = atoi(colon + 1);
    return *port > 0 && *port < 65536 ? 0 : -1;
}

static int start_http(struct daemon *d)
{
    const struct tg_gw_config *c = &d->cfg;
    if (c->no_http)
        return 0;
    const char *http = c->http ? c->http : "127.0.0.1:8037";
    char host[256];
    struct tg_gw_ws_config wc;
    memset(&wc, 0, sizeof wc);
    if (split_host_port(http, host, sizeof host, &wc.port) != 0) {
        tg_error(LOG, "http: '%s' is not HOST:PORT", http);
        return -1;
    }
    wc.bind_host = host;
    wc.tls = c->http_tls;
    wc.cert_file = c->tls_cert;
    wc.key_file = c->tls_key;
    wc.ca_file = c->tls_ca;
    wc.require_client_cert = c->tls_require_client_cert;
    wc.web_root = c->web_root;
    wc.require_token = !c->insecure || c->token_file != NULL;
    /* local_roles and cert_roles: read from the gateway for each request (tg_gw_role_defaults) */
    wc.max_message = c->ws_max_message;
    wc.lws_data_path = c->ws_lws_data_path;
    wc.http_hosts = (const char *const *)c->http_hosts;
    wc.n_http_hosts = c->n_http_hosts;
    wc.handshake_timeout_ms = c->limits.handshake_timeout_ms;
    wc.max_pending = c->http_max_pending;
    wc.max_pending_per_source = c->http_max_pending_per_source;
    wc.source_prefix6 = c->limits.source_prefix6;
    wc.adb = c->adb_enabled ? TG_GW_WS_ADB_ON : TG_GW_WS_ADB_OFF; /* decided by tg_gw_config_validate */
    wc.adb_roles = c->adb_roles;
    wc.adb_server = c->adb_enabled ? &c->adb_addr : NULL;
    wc.adb_server_text = c->adb_server_text;
    wc.node_name = tg_gw_node_name(d->gw);
    char err[512];
    d->ws = tg_gw_ws_start(d->gw, d->base, &wc, err, sizeof err);
    if (!d->ws) {
        if (c->http) {
            tg_error(LOG, "cannot start the HTTP/WebSocket front end on %s: %s", http, err);
            return -1;
        }
        tg_warn(LOG, "cannot start the HTTP/WebSocket front end on %s: %s (continuing without it)", http, err);
        return 0;
    }
    const char *scheme = c->http_tls ? "https" : "http", *ws = c->http_tls ? "wss" : "ws";
    tg_info(LOG, "listening: %s://%s (%s://%s/traced for the Perfetto UI%s, /metrics, /healthz)", scheme, http, ws,
            http, c->adb_enabled ? ", /adb for its ADB + WebSocket target" : "");
    if (c->adb_enabled) {
        struct tg_addr a;
        char e2[256];
        if (tg_addr_parse(http, &a, e2, sizeof e2) == 0 && !tg_addr_is_loopback(&a))
            tg_warn(LOG, "/adb is on for a non-loopback front end: clients with the adb role get a shell on every "
                         "device of the ADB server %s", c->adb_server_text);
    }
    return 0;
}

/* ------------------------------------------------------------ signals */

static void on_drained(void *arg)
{
    struct daemon *d = arg;
    tg_info(LOG, "all sessions finished");
    event_base_loopexit(d->base, NULL);
}

static void on_exit_timer(evutil_socket_t fd, short what, void *arg)
{
    struct daemon *d = arg;
    (void)fd;
    (void)what;
    tg_warn(LOG, "sessions did not close in time; exiting");
    event_base_loopexit(d->base, NULL);
}

static void on_drain_timeout(evutil_socket_t fd, short what, void *arg)
{
    struct daemon *d = arg;
    (void)fd;
    (void)what;
    tg_warn(LOG, "drain timeout: closing %zu remaining session(s)", tg_gw_session_count(d->gw));
    tg_gw_close_all(d->gw, "the gateway is shutting down");
    struct timeval tv = {2, 0};
    d->exit_timer = evtimer_new(d->base, on_exit_timer, d);
    if (d->exit_timer)
        event_add(d->exit_timer, &tv);
}

static void on_terminate(evutil_socket_t sig, short what, void *arg)
{
    struct daemon *d = arg;
    (void)what;
    const char *name = sig == SIGINT ? "SIGINT" : "SIGTERM";
    if (d->draining) {
        tg_warn(LOG, "received %s again: exiting now", name);
        event_base_loopexit(d->base, NULL);
        return;
    }
    d->draining = 1;
    uint32_t ms = d->cfg.limits.drain_timeout_ms;
    tg_info(LOG, "received %s: draining (up to %u ms; send it again to exit at once)", name, ms);
    d->drain_timer = evtimer_new(d->base, on_drain_timeout, d);
    if (d->drain_timer) {
        struct timeval tv = {.tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000};
        event_add(d->drain_timer, &tv);
    }
    if (d->fleet)
        tg_fleet_drain(d->fleet);
    tg_gw_drain(d->gw, on_drained, d);
}

/* The links of this node (docs/link-protocol.md). */
static int start_fleet(struct daemon *d, char *err, size_t errlen)
{
    const struct tg_gw_config *c = &d->cfg;
    if (c->link_token_file) {
        FILE *f = fopen(c->link_token_file, "re");
        char why[600];
        if (f && tg_file_trust_check(fileno(f), c->link_token_file, TG_FILE_SECRET, why, sizeof why) != 0) {
            snprintf(err, errlen, "link-token-file %s", why);
            fclose(f);
            return -1;
        }
        if (!f || !fgets(d->link_token, sizeof d->link_token, f)) {
            snprintf(err, errlen, "link-token-file %s: cannot read a token", c->link_token_file);
            if (f)
                fclose(f);
            return -1;
        }
        fclose(f);
        d->link_token[strcspn(d->link_token, "\r\n")] = '\0';
    }
    struct tg_fleet_config fc = {
        .node_name = c->node_name,
        .peers = c->peers,
        .n_peers = c->n_peers,
        .listen_links = c->listen_links,
        .n_listen_links = c->n_listen_links,
        .raw_nodes = c->raw_nodes,
        .n_raw_nodes = c->n_raw_nodes,
        .link_stdio = c->link_stdio,
        .link_token = d->link_token[0] ? d->link_token : NULL,
        .peer_ca = c->peer_ca,
        .peer_cert = c->peer_cert,
        .peer_key = c->peer_key,
        .tls_cert = c->tls_cert,
        .tls_key = c->tls_key,
        .tls_ca = c->tls_ca,
        .link_roles = c->link_roles,
        .link_cert_roles = c->link_cert_roles ? c->link_cert_roles : TG_GW_ROLE_LINK,
        .resume_window_ms = c->link_resume_window_ms,
        .handshake_timeout_ms = c->limits.handshake_timeout_ms,
        .test_clock_offset_ns = c->test_clock_offset_ns,
        .ssh_command = c->ssh_command,
        .remote_command = c->remote_command,
        .insecure = c->insecure,
    };
    d->fleet = tg_fleet_new(d->base, d->gw, &fc, err, errlen);
    if (!d->fleet)
        return -1;
    if (tg_fleet_service_register(d->gw, d->fleet) != 0) {
        snprintf(err, errlen, "cannot register TracegateFleet");
        return -1;
    }
    if (tg_gw_stats_service_register(d->gw, d->fleet) != 0) {
        snprintf(err, errlen, "cannot register TracegateGateway");
        return -1;
    }
    /* this node's ADB server, for linked nodes allowed to reach it (link-roles with adb) */
    const char *source, *spec = tg_gw_adb_addr_choose(c->adb_server, &source);
    struct tg_addr adb;
    char e2[200];
    if (tg_gw_adb_addr_parse(spec, &adb, e2, sizeof e2) == 0 && tg_fleet_set_adb(d->fleet, &adb, spec) != 0) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    return 0;
}

static int str_differs(const char *a, const char *b)
{
    return (a == NULL) != (b == NULL) || (a && strcmp(a, b) != 0);
}

static int list_differs(char **a, size_t na, char **b, size_t nb)
{
    if (na != nb)
        return 1;
    for (size_t i = 0; i < na; i++)
        if (strcmp(a[i], b[i]) != 0)
            return 1;
    return 0;
}

/* The fleet (fleet.c) reads its options once at start-up: a SIGHUP that changes one of them must
 * say it needs a restart rather than leave the operator believing it applied. */
static int links_differ(const struct tg_gw_config *a, const struct tg_gw_config *b)
{
    return str_differs(a->node_name, b->node_name) || list_differs(a->peers, a->n_peers, b->peers, b->n_peers) ||
           list_differs(a->listen_links, a->n_listen_links, b->listen_links, b->n_listen_links) ||
           list_differs(a->raw_nodes, a->n_raw_nodes, b->raw_nodes, b->n_raw_nodes) || a->link_stdio != b->link_stdio ||
           str_differs(a->link_token_file, b->link_token_file) || str_differs(a->peer_ca, b->peer_ca) ||
           str_differs(a->peer_cert, b->peer_cert) || str_differs(a->peer_key, b->peer_key) ||
           str_differs(a->ssh_command, b->ssh_command) || str_differs(a->remote_command, b->remote_command) ||
           a->link_roles != b->link_roles || a->link_cert_roles != b->link_cert_roles ||
           a->link_resume_window_ms != b->link_resume_window_ms || str_differs(a->adb_node, b->adb_node);
}

/* Other options read once at start-up: the embedded service's sockets, the front end's web root,
 * message bound and TLS, the TLS data path, OnePath's export, --insecure, client certificates and
 * the names of the TLS files. */
static int startup_only_differ(const struct tg_gw_config *a, const struct tg_gw_config *b)
{
    return str_differs(a->producer_socks, b->producer_socks) || str_differs(a->consumer_socks, b->consumer_socks) ||
           a->producer_mode != b->producer_mode || a->consumer_mode != b->consumer_mode ||
           a->probe_interval_ms != b->probe_interval_ms || str_differs(a->web_root, b->web_root) ||
           a->ws_max_message != b->ws_max_message || a->ws_lws_data_path != b->ws_lws_data_path ||
           a->http_tls != b->http_tls || a->tls_path != b->tls_path ||
           str_differs(a->otlp_file, b->otlp_file) || str_differs(a->otlp_http, b->otlp_http) ||
           a->insecure != b->insecure || a->tls_require_client_cert != b->tls_require_client_cert ||
           /* SIGHUP re-reads the certificate files named at start-up, not new names */
           str_differs(a->tls_cert, b->tls_cert) || str_differs(a->tls_key, b->tls_key) ||
           str_differs(a->tls_ca, b->tls_ca);
}

static void on_reload(evutil_socket_t sig, short what, void *arg)
{
    struct daemon *d = arg;
    (void)sig;
    (void)what;
    tg_info(LOG, "received SIGHUP: reloading tokens, allowed origins, local-roles, cert-roles and certificates");
    struct tg_gw_config nc;
    struct tg_gw_cli cli;
    char err[1024];
    tg_gw_config_init(&nc);
    if (tg_gw_config_parse_args(&nc, d->argc, d->argv, &cli, err, sizeof err) != 0 ||
        tg_gw_config_validate(&nc, err, sizeof err) != 0 || tg_gw_reload(d->gw, &nc, err, sizeof err) != 0) {
        tg_error(LOG, "reload failed, keeping the running configuration: %s", err);
        tg_gw_config_free(&nc);
        return;
    }
    if (d->ws)
        tg_gw_ws_reload(d->ws, NULL, NULL); /* the lws thread logs how it went */
    apply_logging(&nc);
    int upstream_changed = !d->auto_bridge && (str_differs(nc.upstream_consumer, d->cfg.upstream_consumer) ||
                                               str_differs(nc.upstream_producer, d->cfg.upstream_producer));
    int restart = nc.n_listen != d->cfg.n_listen || upstream_changed ||
                  str_differs(nc.http, d->cfg.http) || nc.no_http != d->cfg.no_http ||
                  list_differs(nc.http_hosts, nc.n_http_hosts, d->cfg.http_hosts, d->cfg.n_http_hosts) ||
                  nc.http_max_pending != d->cfg.http_max_pending ||
                  nc.http_max_pending_per_source != d->cfg.http_max_pending_per_source ||
                  memcmp(&nc.limits, &d->cfg.limits, sizeof nc.limits) != 0 ||
                  nc.resume_window_ms != d->cfg.resume_window_ms || /* session survival */
                  nc.resume_memory != d->cfg.resume_memory ||
                  nc.max_kept_per_principal != d->cfg.max_kept_per_principal ||
                  nc.http_adb != d->cfg.http_adb || str_differs(nc.adb_server, d->cfg.adb_server) ||
                  nc.adb_roles != d->cfg.adb_roles || links_differ(&nc, &d->cfg) || startup_only_differ(&nc, &d->cfg);
    for (size_t i = 0; !restart && i < nc.n_listen; i++)
        restart = strcmp(nc.listen[i].text, d->cfg.listen[i].text) != 0;
    if (restart)
        tg_warn(LOG, "listener, upstream, service socket, HTTP, TLS, limit and link changes take effect after a "
                     "restart");
    tg_gw_config_free(&nc);
}

/* ------------------------------------------------------------ main */

static int choose_upstream(struct daemon *d, char *err, size_t errlen)
{
    struct tg_gw_config *c = &d->cfg;
    if (c->upstream_consumer || c->upstream_producer) {
        tg_info(LOG, "bridging to an external tracing service: consumer %s, producer %s",
                c->upstream_consumer ? c->upstream_consumer : "(not served)",
                c->upstream_producer ? c->upstream_producer : "(not served)");
        return 0;
    }
    char def_prod[512], def_cons[512];
    tg_service_default_sockets(def_prod, sizeof def_prod, def_cons, sizeof def_cons);
    if (!c->consumer_socks) {
        struct tg_addr a;
        char e2[256];
        if (tg_addr_parse(def_cons, &a, e2, sizeof e2) == 0 && tg_addr_is_live(&a)) {
            tg_info(LOG, "a tracing service already owns %s: running as a bridge to it", def_cons);
            c->upstream_consumer = strdup(def_cons);
            c->upstream_producer = strdup(def_prod);
            c->auto_bridge = 1;
            d->auto_bridge = 1;
            if (!c->upstream_consumer || !c->upstream_producer) {
                snprintf(err, errlen, "out of memory");
                return -1;
            }
            return 0;
        }
    }
    struct tg_service_opts so = {
        .producer_socks = c->producer_socks ? c->producer_socks : def_prod,
        .consumer_socks = c->consumer_socks ? c->consumer_socks : def_cons,
        .producer_sock_mode = c->producer_mode,
        .consumer_sock_mode = c->consumer_mode,
        .max_buffer_bytes = c->max_buffer_memory,
    };
    d->svc = tg_service_new(d->base, &so, err, errlen);
    if (!d->svc)
        return -1;
    tg_info(LOG, "embedded tracing service: producer socket %s, consumer socket %s, trace buffers up to %llu MB",
            *so.producer_socks ? so.producer_socks : "(none)", *so.consumer_socks ? so.consumer_socks : "(none)",
            (unsigned long long)(tg_service_buffer_budget(d->svc) >> 20));
    return 0;
}

int main(int argc, char **argv)
{
    tg_malloc_tune_for_streams(); /* base/malloc_tune.h */
    struct daemon d;
    memset(&d, 0, sizeof d);
    d.argc = argc;
    d.argv = argv;
    tg_gw_config_init(&d.cfg);
    struct tg_gw_cli cli;
    char err[1024];
    if (tg_gw_config_parse_args(&d.cfg, argc, argv, &cli, err, sizeof err) != 0) {
        int check = 0;
        for (int i = 1; i < argc; i++)
            check |= strcmp(argv[i], "--check-config") == 0;
        fprintf(stderr, "tracegated: %s\n", err);
        if (!check)
            fprintf(stderr, "Try 'tracegated --help'.\n");
        tg_gw_config_free(&d.cfg);
        return check ? 1 : 2;
    }
    if (cli.help) {
        tg_gw_config_usage(stdout);
        tg_gw_config_free(&d.cfg);
        return 0;
    }
    if (cli.version) {
        printf("tracegated %s\n", PACKAGE_VERSION);
        tg_gw_config_free(&d.cfg);
        return 0;
    }
    if (cli.hash_token) {
        tg_gw_config_free(&d.cfg);
        return hash_token();
    }
    if (cli.gen_token) {
        tg_gw_config_free(&d.cfg);
        return gen_token();
    }
    if (tg_gw_config_validate(&d.cfg, err, sizeof err) != 0) {
        fprintf(stderr, "tracegated: %s\n", err);
        tg_gw_config_free(&d.cfg);
        return 1;
    }
    if (cli.check_config) {
        printf("tracegated: configuration OK (%zu listener(s)%s%s)\n", d.cfg.n_listen,
               d.cfg.config_file ? ", " : "", d.cfg.config_file ? d.cfg.config_file : "");
        tg_gw_config_free(&d.cfg);
        return 0;
    }
    apply_logging(&d.cfg);
    /* OnePath spans name the node they come from, so `tracectl merge` puts them on its machine */
    if (!getenv("ONEPATH_TRACE_RESOURCE_ATTRIBUTES")) {
        char host[64] = "", attr[96];
        if (!d.cfg.node_name && gethostname(host, sizeof host - 1) != 0)
            host[0] = 0;
        const char *node = d.cfg.node_name ? d.cfg.node_name : host;
        if (node[0] && strlen(node) < 64 && !strpbrk(node, ",=")) {
            snprintf(attr, sizeof attr, "tracegate.node=%s", node);
            setenv("ONEPATH_TRACE_RESOURCE_ATTRIBUTES", attr, 0);
        }
    }
    /* the last finished spans stay in memory for TracegateFleet.Spans (`tracectl spans`) */
    if (!getenv("ONEPATH_TRACE_RECENT_SPANS"))
        setenv("ONEPATH_TRACE_RECENT_SPANS", "4096", 0);
    if (tg_gw_onepath_start(&d.cfg, err, sizeof err) != 0) {
        fprintf(stderr, "tracegated: %s\n", err);
        tg_gw_config_free(&d.cfg);
        return 1;
    }
    signal(SIGPIPE, SIG_IGN);
    raise_fd_limit();
    tg_tls_set_path(d.cfg.tls_path); /* before any TLS connection (listeners, links) */
    tg_info(LOG, "TLS data path: %s (%s; kernel TLS %s)",
            tg_tls_effective_path() == TG_TLS_PATH_SOCKET ? "kernel TLS where a connection's cipher allows it"
                                                          : "records batched in user space",
            d.cfg.tls_path == TG_TLS_PATH_AUTO ? "auto" : "set by tls-path",
            tg_tls_kernel_offers_ktls() ? "available" : "unavailable: `modprobe tls` to offer it");
    if (d.cfg.insecure)
        tg_warn(LOG, "--insecure: non-loopback listeners may run without TLS or authentication");

    d.base = event_base_new();
    if (!d.base) {
        fprintf(stderr, "tracegated: cannot create the event loop\n");
        tg_gw_config_free(&d.cfg);
        return 1;
    }
    int rc = 1;
    if (choose_upstream(&d, err, sizeof err) != 0) {
        tg_error(LOG, "cannot start: %s", err);
        goto out;
    }
    d.gw = tg_gw_new(d.base, &d.cfg, d.svc, err, sizeof err);
    if (!d.gw) {
        tg_error(LOG, "cannot start the gateway: %s", err);
        goto out;
    }
    /* session survival (gw_resume.c): before any client connects */
    if (d.cfg.resume_window_ms) {
        struct tg_gw_resume_opts ro = {.window_ms = d.cfg.resume_window_ms,
                                       .max_kept_per_principal = d.cfg.max_kept_per_principal,
                                       .max_total = d.cfg.resume_memory};
        d.resume = tg_gw_resume_new(d.gw, &ro, err, sizeof err);
        if (!d.resume) {
            tg_error(LOG, "cannot start the gateway: %s", err);
            goto out;
        }
    }
    if (tg_gw_smb_filter_register(d.gw) != 0) { /* remote producers (TCP/TLS/WS) on a UNIX service */
        tg_error(LOG, "cannot register the SMB bridge filter");
        goto out;
    }
    if (start_fleet(&d, err, sizeof err) != 0) {
        tg_error(LOG, "cannot start the links: %s", err);
        goto out;
    }
    if (tg_gw_start_listeners(d.gw, &d.cfg, err, sizeof err) != 0) {
        tg_error(LOG, "cannot start: %s", err);
        goto out;
    }
    for (size_t i = 0; i < tg_gw_listener_count(d.gw); i++)
        tg_info(LOG, "listening: %s", tg_gw_listener_describe(tg_gw_listener_at(d.gw, i)));
    if (start_http(&d) != 0)
        goto out;
    if (d.ws && d.fleet && tg_gw_ws_adb(d.ws)) { /* /adb/NAME: another node's ADB server over a link */
        struct tg_gw_adb_target *at = tg_gw_adb_target_of(tg_gw_ws_adb(d.ws));
        tg_gw_adb_target_set_router(at, tg_fleet_adb_connect, d.fleet);
        if (d.cfg.adb_node && d.cfg.adb_node[0]) {
            tg_gw_adb_target_set_default_node(at, d.cfg.adb_node);
            tg_info(LOG, "/adb reaches node %s's ADB server (adb-node)", d.cfg.adb_node);
        }
    }

    d.sigterm = evsignal_new(d.base, SIGTERM, on_terminate, &d);
    d.sigint = evsignal_new(d.base, SIGINT, on_terminate, &d);
    d.sighup = evsignal_new(d.base, SIGHUP, on_reload, &d);
    if (!d.sigterm || !d.sigint || !d.sighup) {
        tg_error(LOG, "cannot install signal handlers");
        goto out;
    }
    event_add(d.sigterm, NULL);
    event_add(d.sigint, NULL);
    event_add(d.sighup, NULL);
    /* OnePath (docs/onepath.md): spans of what links carry and its metrics on /metrics, switched
     * by the ONEPATH_* environment variables; nothing runs when they are off */
    onepath_trace_opts_t op = ONEPATH_TRACE_OPTS_DEFAULT;
    if (!getenv("ONEPATH_TRACE_SERVICE_NAME"))
        op.service_name = "tracegated";
    if (onepath_trace_init(&op) != ONEPATH_OK)
        tg_warn(LOG, "OnePath did not start (see its messages above); continuing without it");
    else if (onepath_trace_enabled() || onepath_metrics_enabled())
        tg_info(LOG, "OnePath: tracing %s, metrics %s", onepath_trace_enabled() ? "on" : "off",
                onepath_metrics_enabled() ? "on" : "off");
    tg_info(LOG, "tracegated %s ready", PACKAGE_VERSION);
    event_base_dispatch(d.base);
    rc = 0;

out:
    if (d.ws)
        tg_gw_ws_stop(d.ws);
    tg_fleet_spans_abort(); /* Spans questions still out to other nodes */
    tg_fleet_free(d.fleet); /* its channels' gateway ends are sessions of the gateway */
    tg_gw_free(d.gw);
    OPENSSL_cleanse(d.link_token, sizeof d.link_token);
    tg_gw_resume_free(d.resume); /* after tg_gw_free: sessions' filter state points into it */
    if (d.svc)
        tg_service_free(d.svc);
    if (d.sigterm)
        event_free(d.sigterm);
    if (d.sigint)
        event_free(d.sigint);
    if (d.sighup)
        event_free(d.sighup);
    if (d.drain_timer)
        event_free(d.drain_timer);
    if (d.exit_timer)
        event_free(d.exit_timer);
    /* let what the frees above left run: bufferevents' deferred callbacks and finalizers (a native
     * WebSocket's filter sends its close frame and frees its socket in one) */
    for (int i = 0; i < 4; i++)
        event_base_loop(d.base, EVLOOP_NONBLOCK);
    event_base_free(d.base);
    tg_gw_config_free(&d.cfg);
    onepath_trace_shutdown(); /* flushes the span and metrics files */
    if (rc == 0)
        tg_info(LOG, "stopped");
    return rc;
}
