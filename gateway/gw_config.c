/* gw_config.c: tracegated's option table, command line and config file parsing, and validation
 * (see gw_config.h and docs/config.md). */
#include "gw_config.h"
#include "tracegate/errbuf.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/file_trust.h"
#include "gw_adb_addr.h"
#include "gw_auth.h"
#include "gw_listener.h"
#include "net/tls.h"
#include "tracegate/log.h"

enum opt_id {
    O_CONFIG = 1, O_CHECK_CONFIG, O_HASH_TOKEN, O_GEN_TOKEN, O_HELP, O_VERSION,
    O_PRODUCER_SOCKET, O_CONSUMER_SOCKET, O_PRODUCER_MODE, O_CONSUMER_MODE, O_MAX_BUFFER_MEMORY,
    O_UPSTREAM_CONSUMER, O_UPSTREAM_PRODUCER, O_PROBE_INTERVAL,
    O_LISTEN, O_HTTP, O_NO_HTTP, O_HTTP_TLS, O_WEB_ROOT, O_WS_MAX_MESSAGE, O_WS_DATA_PATH, O_ALLOW_ORIGIN,
    O_HTTP_HOST, O_HTTP_MAX_PENDING, O_HTTP_MAX_PENDING_PER_SOURCE, O_HTTP_ADB, O_ADB_SERVER, O_ADB_NODE, O_ADB_ROLES,
    O_TOKEN_FILE, O_LOCAL_ROLES, O_LOCAL_USER_ROLES, O_CERT_ROLES, O_INSECURE,
    O_TLS_CERT, O_TLS_KEY, O_TLS_CA, O_TLS_REQUIRE_CLIENT_CERT, O_TLS_PATH,
    O_MAX_FRAME, O_OUT_HIGH, O_OUT_LOW, O_OUT_SOFT, O_OUT_SOFT_GRACE, O_OUT_HARD, O_RATE, O_BURST,
    O_MAX_CONNS, O_MAX_CONNS_PER_SOURCE, O_SOURCE_PREFIX6, O_HANDSHAKE_TIMEOUT, O_IDLE_TIMEOUT, O_DRAIN_TIMEOUT,
    O_LOG_LEVEL, O_LOG_FORMAT, O_SYSLOG,
    O_RESUME_WINDOW, O_MAX_KEPT, O_RESUME_MEMORY, /* session survival (gw_resume.c) */
    /* gateway links (fleet.c) */
    O_NODE_NAME, O_PEER, O_HUB, O_LISTEN_LINK, O_NODE, O_EXPORT_NODE, O_LINK_STDIO, O_LINK_TOKEN_FILE, O_PEER_CA,
    O_PEER_CERT, O_PEER_KEY, O_LINK_ROLES, O_LINK_CERT_ROLES, O_LINK_RESUME_WINDOW, O_SSH_COMMAND, O_REMOTE_COMMAND,
    O_TEST_CLOCK_OFFSET,
    O_OTLP_FILE, O_OTLP_HTTP, /* OnePath span export to OpenTelemetry (gw_onepath.c) */
};

struct opt_def {
    enum opt_id id;
    const char *name;
    const char *arg; /* metavar; NULL for flags */
    int cli_only;
    const char *help;
};

static const struct opt_def k_opts[] = {
    {O_CONFIG, "config", "FILE", 1, "read options from FILE (`name = value` lines); flags override it"},
    {O_CHECK_CONFIG, "check-config", NULL, 1, "validate the configuration, print the problem, exit 0 or 1"},
    {O_HASH_TOKEN, "hash-token", NULL, 1, "read a token on stdin, print its SHA-256 for the token file"},
    {O_GEN_TOKEN, "gen-token", NULL,
     1, "print a new random token (256 bits, base64url) on stdout and its token-file line on stderr"},
    {O_HELP, "help", NULL, 1, "this help"},
    {O_VERSION, "version", NULL, 1, "print the version"},

    {O_PRODUCER_SOCKET, "producer-socket", "ADDRS",
     0, "embedded service: producer socket(s), comma-separated (default: Perfetto's)"},
    {O_CONSUMER_SOCKET, "consumer-socket", "ADDRS", 0, "embedded service: consumer socket(s) (default: Perfetto's)"},
    {O_PRODUCER_MODE, "producer-socket-mode", "OCTAL", 0, "permissions of UNIX producer sockets (default 0666)"},
    {O_CONSUMER_MODE, "consumer-socket-mode", "OCTAL", 0, "permissions of UNIX consumer sockets (default 0600)"},
    {O_MAX_BUFFER_MEMORY, "max-buffer-memory", "SIZE",
     0, "embedded service: trace buffers of all sessions together at most this big (default: half the "
        "machine's memory); one principal without admin may hold half of it"},
    {O_UPSTREAM_CONSUMER, "upstream-consumer", "ADDR",
     0, "bridge to this consumer socket (PATH, @name or host:port) instead of the embedded service"},
    {O_UPSTREAM_PRODUCER, "upstream-producer", "ADDR", 0, "bridge to this producer socket"},
    {O_PROBE_INTERVAL, "upstream-probe-interval", "DURATION", 0, "health probe of an external upstream (default 5s)"},

    {O_LISTEN, "listen", "PORT=URL[?OPTS]",
     0, "add a listener, e.g. consumer=tcp://127.0.0.1:7001, producer=unix:/run/x.sock, "
        "consumer=tls://0.0.0.0:7443?auth=token (repeatable; see docs/config.md)"},
    {O_HTTP, "http", "HOST:PORT", 0, "HTTP/WebSocket front end (/traced, /metrics; default 127.0.0.1:8037)"},
    {O_NO_HTTP, "no-http", NULL, 0, "do not start the HTTP/WebSocket front end"},
    {O_HTTP_TLS, "http-tls", NULL, 0, "serve https/wss with --tls-cert/--tls-key"},
    {O_WEB_ROOT, "web-root", "DIR", 0, "static files served at / (default: built-in page)"},
    {O_WS_MAX_MESSAGE, "ws-max-message", "SIZE", 0, "largest inbound WebSocket message (default 1m)"},
    {O_WS_DATA_PATH, "ws-data-path", "native|lws",
     0, "who carries plain ws:// /traced and /producer WebSockets once upgraded: native = the gateway's own loop "
        "(default), lws = libwebsockets' thread (wss:// always uses lws)"},
    {O_ALLOW_ORIGIN, "allow-origin", "ORIGIN",
     0, "allow WebSocket clients from ORIGIN (repeatable; ui.perfetto.dev is always allowed)"},
    {O_HTTP_HOST, "http-host", "NAME",
     0, "a Host name the HTTP front end answers to besides loopback names and the bind address (repeatable)"},
    {O_HTTP_MAX_PENDING, "http-max-pending", "N",
     0, "HTTP connections that are not (yet) WebSockets, in total (default 64, 0 = unlimited)"},
    {O_HTTP_MAX_PENDING_PER_SOURCE, "http-max-pending-per-source", "N",
     0, "... per non-loopback source address (default 8, 0 = unlimited)"},
    {O_HTTP_ADB, "http-adb", "auto|on|off",
     0, "the /adb WebSocket (a pipe to the ADB server, as websocket_bridge); auto = on for a loopback --http only"},
    {O_ADB_NODE, "adb-node", "NAME",
     0, "plain /adb reaches node NAME's ADB server over a link (the Perfetto UI's fixed ADB target then records "
        "phones attached to NAME; default: this node's)"},
    {O_ADB_SERVER, "adb-server", "SPEC",
     0, "the ADB server for /adb: tcp:PORT, tcp:HOST:PORT, localfilesystem:PATH "
        "(default $ADB_SERVER_SOCKET, else tcp:127.0.0.1:5037)"},
    {O_ADB_ROLES, "adb-roles", "ROLES", 0, "roles that grant /adb, any one of them (default adb,admin)"},

    {O_TOKEN_FILE, "token-file", "FILE", 0, "bearer tokens: `name role[,role] sha256hex` lines (reloaded on SIGHUP)"},
    {O_LOCAL_ROLES, "local-roles", "ROLES",
     0, "roles of local clients running as root or as tracegated's own user (default admin)"},
    {O_LOCAL_USER_ROLES, "local-user-roles", "ROLES",
     0, "roles of local clients running as any other user: their own sessions, as traced gives them "
        "(default recorder,producer; none in bridge mode to a UNIX upstream)"},
    {O_CERT_ROLES, "cert-roles", "ROLES", 0, "roles of clients with a verified certificate (default recorder)"},
    {O_INSECURE, "insecure", NULL, 0, "allow non-loopback listeners without TLS and authentication (logged)"},
    {O_TLS_CERT, "tls-cert", "FILE", 0, "server certificate chain (PEM) for tls:// listeners and --http-tls"},
    {O_TLS_KEY, "tls-key", "FILE", 0, "server private key (PEM)"},
    {O_TLS_CA, "tls-ca", "FILE", 0, "CA bundle verifying client certificates (enables mTLS)"},
    {O_TLS_REQUIRE_CLIENT_CERT, "tls-require-client-cert", NULL, 0, "refuse TLS clients without a valid certificate"},
    {O_TLS_PATH, "tls-path", "auto|batched|socket",
     0, "TLS data path of tls:// listeners and links: kernel TLS on the socket where the kernel offers it, "
        "else records batched into one writev per loop turn (default auto; see docs/gateway.md)"},

    {O_MAX_FRAME, "max-frame", "SIZE", 0, "largest IPC frame, header included (default and maximum 128k)"},
    {O_OUT_HIGH, "out-high", "SIZE", 0, "output high watermark: pause the other side (default 1m)"},
    {O_OUT_LOW, "out-low", "SIZE", 0, "output low watermark: resume (default 256k)"},
    {O_OUT_SOFT, "out-soft-limit", "SIZE", 0, "slow client soft limit (default 1m)"},
    {O_OUT_SOFT_GRACE, "out-soft-grace", "DURATION", 0, "time a client may stay over the soft limit (default 30s)"},
    {O_OUT_HARD, "out-hard-limit", "SIZE", 0, "slow client hard limit: cut at once (default 8m)"},
    {O_RATE, "rate", "MSGS", 0, "messages per second a client may send, 0 = unlimited (default 10000)"},
    {O_BURST, "burst", "MSGS", 0, "message bucket size (default 20000)"},
    {O_MAX_CONNS, "max-connections", "N", 0, "client connections in total (default 1000)"},
    {O_MAX_CONNS_PER_SOURCE, "max-connections-per-source", "N",
     0, "connections per non-loopback source (an IPv4 address, an IPv6 network) (default 64)"},
    {O_SOURCE_PREFIX6, "source-prefix6", "BITS",
     0, "an IPv6 client's source for the per-source limits is its /BITS network; 128 = per address (default 64)"},
    {O_HANDSHAKE_TIMEOUT, "handshake-timeout", "DURATION",
     0, "time to authenticate in-band; also the absolute deadline for an HTTP request or WebSocket upgrade "
        "(default 10s)"},
    {O_IDLE_TIMEOUT, "idle-timeout", "DURATION", 0, "close clients idle that long with no call pending (default off)"},
    {O_DRAIN_TIMEOUT, "drain-timeout", "DURATION", 0, "on SIGTERM, how long sessions may finish (default 30s)"},
    /* session survival (gw_resume.c) */
    {O_MAX_KEPT, "max-kept-sessions", "N",
     0, "dropped sessions kept for a resume per principal (default 4); beyond it they are Detached at once"},
    {O_RESUME_WINDOW, "resume-window", "DURATION",
     0, "keep a dropped consumer client's session this long for a resume, then Detach it with a logged "
        "key (default 60s, 0 = off)"},
    {O_RESUME_MEMORY, "resume-memory", "SIZE",
     0, "bytes held for resumable sessions, all together (default 1g); over it frames are no longer kept "
        "for re-sending and a dropped session is Detached at once"},

    /* gateway links (docs/link-protocol.md) */
    {O_NODE_NAME, "node-name", "NAME", 0, "this node's name in a fleet (default: the host name)"},
    {O_PEER, "peer", "URL",
     0, "link to another node: tls://HOST:PORT, tcp://HOST:PORT (loopback) or ssh://[USER@]HOST[:PORT] (repeatable)"},
    {O_HUB, "hub", "URL", 0, "dial out to a hub (a device behind NAT); the hub can then open channels to us (as --peer)"},
    {O_LISTEN_LINK, "listen-link", "URL", 0, "accept links: tls://ADDR:PORT, or tcp://127.0.0.1:PORT (repeatable)"},
    {O_NODE, "node", "NAME=ADDR",
     0, "a traced-compatible consumer socket as node NAME (tcp://H:P, a path, @name; or consumer:A,producer:B)"},
    {O_EXPORT_NODE, "export-node", "NAME:PORT=PATH",
     0, "a local UNIX socket for node NAME's consumer or producer port, e.g. dev1:consumer=/tmp/dev1-consumer"},
    {O_LINK_STDIO, "link-stdio", NULL, 0, "serve one link on stdin/stdout (what --peer ssh:// runs on the remote); no HTTP port unless --http"},
    {O_LINK_TOKEN_FILE, "link-token-file", "FILE", 0, "bearer token presented when dialing peers (first line of FILE)"},
    {O_PEER_CA, "peer-ca", "FILE", 0, "CA certificates verifying tls:// peers (default: the system store)"},
    {O_PEER_CERT, "peer-cert", "FILE", 0, "client certificate presented to tls:// peers"},
    {O_PEER_KEY, "peer-key", "FILE", 0, "its private key"},
    {O_LINK_ROLES, "link-roles", "ROLES", 0, "roles of linked nodes' channels here (default observer,recorder,producer)"},
    {O_LINK_CERT_ROLES, "link-cert-roles", "ROLES",
     0, "roles a verified client certificate gets on --listen-link (default link: it may link)"},
    {O_LINK_RESUME_WINDOW, "link-resume-window", "DURATION",
     0, "keep a dropped link's channels this long for it to come back (default 60s)"},
    {O_SSH_COMMAND, "ssh-command", "CMD", 0, "how ssh:// peers are reached (default \"ssh -T -o BatchMode=yes\")"},
    {O_REMOTE_COMMAND, "remote-command", "CMD", 0, "the remote command for ssh:// peers (default tracegated)"},
    {O_TEST_CLOCK_OFFSET, "test-clock-offset", "NS", 0, "(tests) add NS to the clock readings sent to linked nodes"},
    {O_OTLP_FILE, "otlp-file", "FILE", 0, "OnePath spans also as OTLP/JSON lines into FILE (with ONEPATH_TRACE_ENABLE=1)"},
    {O_OTLP_HTTP, "otlp-http", "URL", 0, "OnePath spans also POSTed as OTLP/HTTP JSON to URL, e.g. "
                                        "http://127.0.0.1:4318/v1/traces (with ONEPATH_TRACE_ENABLE=1)"},

    {O_LOG_LEVEL, "log-level", "LEVEL", 0, "debug, info, warn or error (default info)"},
    {O_LOG_FORMAT, "log-format", "FORMAT", 0, "text or json (default text)"},
    {O_SYSLOG, "syslog", NULL, 0, "log to syslog instead of stderr"},
};
#define N_OPTS (sizeof k_opts / sizeof k_opts[0])

void tg_gw_config_init(struct tg_gw_config *c)
{
    memset(c, 0, sizeof *c);
    c->probe_interval_ms = 5000;
    c->local_roles = TG_GW_ROLE_ADMIN;
    c->local_user_roles = TG_GW_ROLE_RECORDER | TG_GW_ROLE_PRODUCER;
    c->cert_roles = TG_GW_ROLE_RECORDER;
    c->ws_max_message = 1u << 20;
    c->http_max_pending = 64;
    c->http_max_pending_per_source = 8;
    c->log_level = TG_LOG_INFO;
    c->log_format = TG_LOG_TEXT;
    tg_gw_limits_default(&c->limits);
    c->resume_window_ms = 60000; /* session survival (gw_resume.c) */
}

static void free_list(char **l, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(l[i]);
    free(l);
}

void tg_gw_config_free(struct tg_gw_config *c)
{
    free(c->config_file);
    free(c->producer_socks);
    free(c->consumer_socks);
    free(c->upstream_consumer);
    free(c->upstream_producer);
    free(c->listen);
    free(c->http);
    free(c->web_root);
    free(c->adb_server);
    free(c->adb_node);
    free(c->otlp_file);
    free(c->otlp_http);
    free_list(c->allow_origins, c->n_allow_origins);
    free_list(c->http_hosts, c->n_http_hosts);
    free_list(c->peers, c->n_peers);
    free_list(c->listen_links, c->n_listen_links);
    free_list(c->raw_nodes, c->n_raw_nodes);
    free(c->node_name);
    free(c->link_token_file);
    free(c->peer_ca);
    free(c->peer_cert);
    free(c->peer_key);
    free(c->ssh_command);
    free(c->remote_command);
    free(c->token_file);
    free(c->tls_cert);
    free(c->tls_key);
    free(c->tls_ca);
    memset(c, 0, sizeof *c);
}

static const struct opt_def *find_opt(const char *name)
{
    for (size_t i = 0; i < N_OPTS; i++)
        if (strcmp(k_opts[i].name, name) == 0)
            return &k_opts[i];
    return NULL;
}

static int set_str(char **dst, const char *v, const char *name, char *err, size_t errlen)
{
    char *d = strdup(v);
    if (!d)
        return tg_errf(err, errlen, "%s: out of memory", name);
    free(*dst);
    *dst = d;
    return 0;
}

static int parse_bool(const char *v, int *out)
{
    if (!v || !strcasecmp(v, "true") || !strcasecmp(v, "yes") || !strcasecmp(v, "on") || !strcmp(v, "1")) {
        *out = 1;
        return 0;
    }
    if (!strcasecmp(v, "false") || !strcasecmp(v, "no") || !strcasecmp(v, "off") || !strcmp(v, "0")) {
        *out = 0;
        return 0;
    }
    return -1;
}

static int parse_uint(const char *v, unsigned long max, unsigned long *out)
{
    if (!v || !isdigit((unsigned char)*v))
        return -1;
    errno = 0;
    char *end;
    unsigned long x = strtoul(v, &end, 10);
    if (errno || *end || x > max)
        return -1;
    *out = x;
    return 0;
}

/* A socket's permissions: octal digits only (strtoul would take " 0600", "+600" or "-0"), 1 to
 * 0777. 0 is refused rather than read as "the default" (which is what an unset mode means here). */
static int parse_mode(const char *v, unsigned *out)
{
    if (!v || !*v || strspn(v, "01234567") != strlen(v) || strlen(v) > 5)
        return -1;
    unsigned long m = strtoul(v, NULL, 8);
    if (m == 0 || m > 0777)
        return -1;
    *out = (unsigned)m;
    return 0;
}

static int push_str(char ***list, size_t *n, const char *v)
{
    char **nl = realloc(*list, (*n + 1) * sizeof *nl);
    if (!nl)
        return -1;
    *list = nl;
    nl[*n] = strdup(v);
    if (!nl[*n])
        return -1;
    (*n)++;
    return 0;
}

/* A host name or address literal for http-host: no scheme, port, path or blanks; IPv6 in brackets. */
static int http_host_ok(const char *v)
{
    size_t n = strlen(v);
    if (n == 0 || n > 253)
        return 0;
    if (v[0] == '[')
        return n > 2 && v[n - 1] == ']' && strspn(v + 1, "0123456789abcdefABCDEF:.") == n - 2;
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)v[i]) && v[i] != '.' && v[i] != '-' && v[i] != '_')
            return 0;
    return 1;
}

int tg_gw_config_set(struct tg_gw_config *c, const char *name, const char *value, char *err, size_t errlen)
{
    const struct opt_def *o = find_opt(name);
    if (!o || o->cli_only)
        return tg_errf(err, errlen, "unknown option '%s'", name);
    if (o->arg && !value)
        return tg_errf(err, errlen, "option '%s' needs a value (%s)", name, o->arg);
    int b;
    unsigned long u;
    size_t sz;
    uint32_t ms;
    switch (o->id) {
    case O_PRODUCER_SOCKET: return set_str(&c->producer_socks, value, name, err, errlen);
    case O_CONSUMER_SOCKET: return set_str(&c->consumer_socks, value, name, err, errlen);
    case O_PRODUCER_MODE:
    case O_CONSUMER_MODE: {
        unsigned m;
        if (parse_mode(value, &m) != 0)
            return tg_errf(err, errlen, "%s: '%s' is not an octal mode from 1 to 0777 (such as 0600)", name, value);
        *(o->id == O_PRODUCER_MODE ? &c->producer_mode : &c->consumer_mode) = m;
        return 0;
    }
    case O_MAX_BUFFER_MEMORY:
        if (tg_gw_parse_size(value, &sz) != 0 || sz < (1u << 20))
            return tg_errf(err, errlen, "%s: '%s' is not a size of at least 1m (e.g. 512m, 8g)", name, value);
        c->max_buffer_memory = sz;
        return 0;
    case O_UPSTREAM_CONSUMER: return set_str(&c->upstream_consumer, value, name, err, errlen);
    case O_UPSTREAM_PRODUCER: return set_str(&c->upstream_producer, value, name, err, errlen);
    case O_LISTEN: {
        struct tg_gw_listen_spec spec;
        if (tg_gw_listen_parse(value, &spec, err, errlen) != 0)
            return -1;
        struct tg_gw_listen_spec *nl = realloc(c->listen, (c->n_listen + 1) * sizeof *nl);
        if (!nl)
            return tg_errf(err, errlen, "out of memory");
        c->listen = nl;
        c->listen[c->n_listen++] = spec;
        return 0;
    }
    case O_HTTP: return set_str(&c->http, value, name, err, errlen);
    case O_WEB_ROOT: return set_str(&c->web_root, value, name, err, errlen);
    case O_OTLP_FILE: return set_str(&c->otlp_file, value, name, err, errlen);
    case O_OTLP_HTTP: return set_str(&c->otlp_http, value, name, err, errlen);
    case O_ALLOW_ORIGIN:
        if (!*value || strchr(value, ' '))
            return tg_errf(err, errlen, "allow-origin: '%s' is not an origin (scheme://host[:port])", value);
        if (push_str(&c->allow_origins, &c->n_allow_origins, value) != 0)
            return tg_errf(err, errlen, "out of memory");
        return 0;
    case O_HTTP_HOST:
        if (!http_host_ok(value))
            return tg_errf(err, errlen,
                           "http-host: '%s' is not a host name or address (no scheme, port or path: gw.example.com, "
                           "10.0.0.5, [fd00::5])",
                           value);
        if (push_str(&c->http_hosts, &c->n_http_hosts, value) != 0)
            return tg_errf(err, errlen, "out of memory");
        return 0;
    case O_HTTP_ADB:
        if (!strcmp(value, "auto"))
            c->http_adb = 0;
        else if (parse_bool(value, &b) == 0)
            c->http_adb = b ? 1 : -1;
        else
            return tg_errf(err, errlen, "http-adb: '%s' is not auto, on or off", value);
        return 0;
    case O_WS_DATA_PATH:
        if (!strcmp(value, "native"))
            c->ws_lws_data_path = 0;
        else if (!strcmp(value, "lws"))
            c->ws_lws_data_path = 1;
        else
            return tg_errf(err, errlen, "ws-data-path: '%s' is not native or lws", value);
        return 0;
    case O_ADB_SERVER: return set_str(&c->adb_server, value, name, err, errlen); /* checked by validate */
    case O_ADB_NODE: return set_str(&c->adb_node, value, name, err, errlen);
    case O_ADB_ROLES: {
        unsigned r = tg_gw_roles_parse(value);
        if (!r)
            return tg_errf(err, errlen, "adb-roles: '%s' is not a role list (adb, admin, ...)", value);
        c->adb_roles = r;
        return 0;
    }
    case O_TOKEN_FILE: return set_str(&c->token_file, value, name, err, errlen);
    case O_NODE_NAME: return set_str(&c->node_name, value, name, err, errlen);
    case O_PEER:
    case O_HUB:
        if (push_str(&c->peers, &c->n_peers, value) != 0)
            return tg_errf(err, errlen, "out of memory");
        return 0;
    case O_LISTEN_LINK:
        if (push_str(&c->listen_links, &c->n_listen_links, value) != 0)
            return tg_errf(err, errlen, "out of memory");
        return 0;
    case O_NODE:
        if (push_str(&c->raw_nodes, &c->n_raw_nodes, value) != 0)
            return tg_errf(err, errlen, "out of memory");
        return 0;
    case O_EXPORT_NODE: {
        /* NAME:consumer=PATH -> a UNIX listener whose clients are routed to NAME */
        char spec[700], nodename[64];
        const char *colon = strchr(value, ':');
        if (!colon || (size_t)(colon - value) >= sizeof nodename)
            return tg_errf(err, errlen, "export-node: '%s' is not NAME:consumer=PATH or NAME:producer=PATH", value);
        memcpy(nodename, value, (size_t)(colon - value));
        nodename[colon - value] = '\0';
        const char *eq = strchr(colon, '=');
        if (!eq)
            return tg_errf(err, errlen, "export-node: '%s' is not NAME:consumer=PATH or NAME:producer=PATH", value);
        snprintf(spec, sizeof spec, "%.*s=unix:%s?node=%s", (int)(eq - colon - 1), colon + 1, eq + 1, nodename);
        struct tg_gw_listen_spec ls;
        if (tg_gw_listen_parse(spec, &ls, err, errlen) != 0)
            return -1;
        struct tg_gw_listen_spec *nl = realloc(c->listen, (c->n_listen + 1) * sizeof *nl);
        if (!nl)
            return tg_errf(err, errlen, "out of memory");
        c->listen = nl;
        c->listen[c->n_listen++] = ls;
        return 0;
    }
    case O_LINK_TOKEN_FILE: return set_str(&c->link_token_file, value, name, err, errlen);
    case O_PEER_CA: return set_str(&c->peer_ca, value, name, err, errlen);
    case O_PEER_CERT: return set_str(&c->peer_cert, value, name, err, errlen);
    case O_PEER_KEY: return set_str(&c->peer_key, value, name, err, errlen);
    case O_SSH_COMMAND: return set_str(&c->ssh_command, value, name, err, errlen);
    case O_REMOTE_COMMAND: return set_str(&c->remote_command, value, name, err, errlen);
    case O_LINK_ROLES:
    case O_LINK_CERT_ROLES: {
        unsigned r = tg_gw_roles_parse(value);
        if (!r)
            return tg_errf(err, errlen, "%s: '%s' is not a role list", name, value);
        *(o->id == O_LINK_ROLES ? &c->link_roles : &c->link_cert_roles) = r;
        return 0;
    }
    case O_LINK_RESUME_WINDOW:
        if (tg_gw_parse_duration_ms(value, &ms) != 0 || ms == 0)
            return tg_errf(err, errlen, "%s: '%s' is not a duration above 0 (e.g. 60s)", name, value);
        c->link_resume_window_ms = ms;
        return 0;
    case O_TEST_CLOCK_OFFSET: {
        char *end;
        errno = 0;
        long long v = strtoll(value, &end, 10);
        if (errno || *end)
            return tg_errf(err, errlen, "%s: '%s' is not a number of nanoseconds", name, value);
        c->test_clock_offset_ns = v;
        return 0;
    }
    case O_LOCAL_USER_ROLES: {
        unsigned r = strcmp(value, "none") == 0 ? 0 : tg_gw_roles_parse(value);
        if (!r && strcmp(value, "none") != 0)
            return tg_errf(err, errlen, "%s: '%s' is not a role list (observer, recorder, producer, admin, none)", name,
                           value);
        c->local_user_roles = r;
        c->local_user_roles_set = 1;
        return 0;
    }
    case O_LOCAL_ROLES:
    case O_CERT_ROLES: {
        unsigned r = tg_gw_roles_parse(value);
        if (!r)
            return tg_errf(err, errlen, "%s: '%s' is not a role list (observer, recorder, producer, admin)", name,
                           value);
        *(o->id == O_LOCAL_ROLES ? &c->local_roles : &c->cert_roles) = r;
        return 0;
    }
    case O_TLS_CERT: return set_str(&c->tls_cert, value, name, err, errlen);
    case O_TLS_KEY: return set_str(&c->tls_key, value, name, err, errlen);
    case O_TLS_CA: return set_str(&c->tls_ca, value, name, err, errlen);
    case O_TLS_PATH:
        if (tg_tls_path_parse(value, &c->tls_path) != 0)
            return tg_errf(err, errlen, "%s: '%s' is not auto, batched or socket", name, value);
        return 0;
    case O_LINK_STDIO:
        if (parse_bool(value, &b) != 0)
            return tg_errf(err, errlen, "%s: '%s' is not a boolean (true/false)", name, value);
        c->link_stdio = b;
        return 0;
    case O_NO_HTTP:
    case O_HTTP_TLS:
    case O_INSECURE:
    case O_TLS_REQUIRE_CLIENT_CERT:
    case O_SYSLOG: {
        if (parse_bool(value, &b) != 0)
            return tg_errf(err, errlen, "%s: '%s' is not a boolean (true/false)", name, value);
        int *dst = o->id == O_NO_HTTP      ? &c->no_http
                   : o->id == O_HTTP_TLS   ? &c->http_tls
                   : o->id == O_INSECURE   ? &c->insecure
                   : o->id == O_SYSLOG     ? &c->syslog
                                           : &c->tls_require_client_cert;
        *dst = b;
        return 0;
    }
    case O_WS_MAX_MESSAGE:
    case O_MAX_FRAME:
    case O_OUT_HIGH:
    case O_OUT_LOW:
    case O_OUT_SOFT:
    case O_OUT_HARD: {
        if (tg_gw_parse_size(value, &sz) != 0)
            return tg_errf(err, errlen, "%s: '%s' is not a size (e.g. 65536, 64k, 1m)", name, value);
        size_t *dst = o->id == O_WS_MAX_MESSAGE ? &c->ws_max_message
                      : o->id == O_MAX_FRAME    ? &c->limits.max_frame
                      : o->id == O_OUT_HIGH     ? &c->limits.out_high
                      : o->id == O_OUT_LOW      ? &c->limits.out_low
                      : o->id == O_OUT_SOFT     ? &c->limits.out_soft
                                                : &c->limits.out_hard;
        *dst = sz;
        return 0;
    }
    case O_PROBE_INTERVAL:
    case O_OUT_SOFT_GRACE:
    case O_HANDSHAKE_TIMEOUT:
    case O_IDLE_TIMEOUT:
    case O_DRAIN_TIMEOUT: {
        if (tg_gw_parse_duration_ms(value, &ms) != 0)
            return tg_errf(err, errlen, "%s: '%s' is not a duration (e.g. 10, 10s, 500ms, 5m)", name, value);
        uint32_t *dst = o->id == O_PROBE_INTERVAL      ? &c->probe_interval_ms
                        : o->id == O_OUT_SOFT_GRACE    ? &c->limits.soft_grace_ms
                        : o->id == O_HANDSHAKE_TIMEOUT ? &c->limits.handshake_timeout_ms
                        : o->id == O_IDLE_TIMEOUT      ? &c->limits.idle_timeout_ms
                                                       : &c->limits.drain_timeout_ms;
        *dst = ms;
        return 0;
    }
    case O_RESUME_MEMORY:
        if (tg_gw_parse_size(value, &sz) != 0 || sz == 0)
            return tg_errf(err, errlen, "%s: '%s' is not a size (e.g. 256m, 1g)", name, value);
        c->resume_memory = sz;
        return 0;
    case O_MAX_KEPT: {
        unsigned long n;
        if (parse_uint(value, 100000ul, &n) != 0 || n == 0)
            return tg_errf(err, errlen, "%s: '%s' is not a count of at least 1", name, value);
        c->max_kept_per_principal = (uint32_t)n;
        return 0;
    }
    case O_RESUME_WINDOW: /* session survival (gw_resume.c) */
        if (tg_gw_parse_duration_ms(value, &ms) != 0)
            return tg_errf(err, errlen, "%s: '%s' is not a duration (e.g. 60s, 500ms, 0 = off)", name, value);
        c->resume_window_ms = ms;
        return 0;
    case O_RATE: {
        char *end;
        errno = 0;
        double r = strtod(value, &end);
        if (errno || *end || r < 0 || r > 1e9)
            return tg_errf(err, errlen, "rate: '%s' is not a number of messages per second", value);
        c->limits.rate = r;
        return 0;
    }
    case O_BURST:
    case O_MAX_CONNS:
    case O_MAX_CONNS_PER_SOURCE:
    case O_HTTP_MAX_PENDING:
    case O_HTTP_MAX_PENDING_PER_SOURCE:
        if (parse_uint(value, 100000000ul, &u) != 0)
            return tg_errf(err, errlen, "%s: '%s' is not a count", name, value);
        *(o->id == O_BURST                ? &c->limits.burst
          : o->id == O_MAX_CONNS          ? &c->limits.max_conns
          : o->id == O_MAX_CONNS_PER_SOURCE ? &c->limits.max_conns_per_source
          : o->id == O_HTTP_MAX_PENDING   ? &c->http_max_pending
                                          : &c->http_max_pending_per_source) = (uint32_t)u;
        return 0;
    case O_SOURCE_PREFIX6:
        if (parse_uint(value, 128, &u) != 0 || u < 16)
            return tg_errf(err, errlen, "source-prefix6: '%s' is not a prefix length from 16 to 128", value);
        c->limits.source_prefix6 = (uint32_t)u;
        return 0;
    case O_LOG_LEVEL: {
        int lv = tg_log_level_from_string(value);
        if (lv < 0)
            return tg_errf(err, errlen, "log-level: '%s' is not debug, info, warn or error", value);
        c->log_level = lv;
        return 0;
    }
    case O_LOG_FORMAT:
        if (strcmp(value, "text") == 0)
            c->log_format = TG_LOG_TEXT;
        else if (strcmp(value, "json") == 0)
            c->log_format = TG_LOG_JSON;
        else
            return tg_errf(err, errlen, "log-format: '%s' is not text or json", value);
        return 0;
    default: break;
    }
    return tg_errf(err, errlen, "unknown option '%s'", name);
}

/* ------------------------------------------------------------ config file */

static char *trim(char *s)
{
    while (isspace((unsigned char)*s))
        s++;
    char *e = s + strlen(s);
    while (e > s && isspace((unsigned char)e[-1]))
        *--e = '\0';
    return s;
}

int tg_gw_config_parse_text(struct tg_gw_config *c, const char *text, size_t len, const char *name, char *err,
                            size_t errlen)
{
    const char *p = text, *end = text + len;
    int lineno = 0;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *ls = p, *le = nl ? nl : end;
        lineno++;
        char line[2048];
        size_t ll = (size_t)(le - ls);
        p = nl ? nl + 1 : end;
        if (ll >= sizeof line)
            return tg_errf(err, errlen, "%s:%d: line too long", name, lineno);
        memcpy(line, ls, ll);
        line[ll] = '\0';
        char *s = trim(line);
        if (!*s || *s == '#')
            continue;
        /* key [=] value; the value may be "quoted"; a '#' after whitespace starts a comment */
        char *k = s;
        while (*s && !isspace((unsigned char)*s) && *s != '=')
            s++;
        char kc = *s;
        *s = '\0';
        char key[128];
        snprintf(key, sizeof key, "%s", k);
        if (kc)
            s++;
        s = trim(s);
        if (kc != '=' && *s == '=')
            s = trim(s + 1);
        char *value = s;
        if (*value == '"') {
            char *q = strchr(value + 1, '"');
            if (!q)
                return tg_errf(err, errlen, "%s:%d: unterminated quote", name, lineno);
            *q = '\0';
            char *rest = trim(q + 1);
            if (*rest && *rest != '#')
                return tg_errf(err, errlen, "%s:%d: unexpected text after the quoted value", name, lineno);
            value++;
        } else {
            for (char *h = value; *h; h++)
                if (*h == '#' && (h == value || isspace((unsigned char)h[-1]))) {
                    *h = '\0';
                    break;
                }
            value = trim(value);
        }
        const struct opt_def *o = find_opt(key);
        if (!o || o->cli_only)
            return tg_errf(err, errlen, "%s:%d: unknown option '%s'", name, lineno, key);
        if (o->arg && !*value)
            return tg_errf(err, errlen, "%s:%d: '%s' needs a value (%s)", name, lineno, key, o->arg);
        char e2[400];
        if (tg_gw_config_set(c, key, *value ? value : NULL, e2, sizeof e2) != 0)
            return tg_errf(err, errlen, "%s:%d: %s", name, lineno, e2);
    }
    return 0;
}

int tg_gw_config_load_file(struct tg_gw_config *c, const char *path, char *err, size_t errlen)
{
    FILE *f = fopen(path, "re");
    if (!f)
        return tg_errf(err, errlen, "cannot open config file %s: %s", path, strerror(errno));
    char why[600];
    if (tg_file_trust_check(fileno(f), path, TG_FILE_DECIDES_ACCESS, why, sizeof why) != 0) {
        fclose(f);
        return tg_errf(err, errlen, "config file %s", why);
    }
    char *buf = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&buf, &len);
    if (!m) {
        fclose(f);
        return tg_errf(err, errlen, "out of memory");
    }
    char chunk[4096];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0)
        fwrite(chunk, 1, n, m);
    int rerr = ferror(f);
    fclose(f);
    fclose(m);
    if (rerr) {
        free(buf);
        return tg_errf(err, errlen, "cannot read config file %s", path);
    }
    int rc = tg_gw_config_parse_text(c, buf, len, path, err, errlen);
    free(buf);
    if (rc == 0)
        rc = set_str(&c->config_file, path, "config", err, errlen);
    return rc;
}

/* ------------------------------------------------------------ command line */

int tg_gw_config_parse_args(struct tg_gw_config *c, int argc, char **argv, struct tg_gw_cli *cli, char *err,
                            size_t errlen)
{
    struct option lo[N_OPTS + 1];
    for (size_t i = 0; i < N_OPTS; i++) {
        lo[i].name = k_opts[i].name;
        lo[i].has_arg = k_opts[i].arg ? required_argument : no_argument;
        lo[i].flag = NULL;
        lo[i].val = 256 + (int)i;
    }
    memset(&lo[N_OPTS], 0, sizeof lo[N_OPTS]);
    memset(cli, 0, sizeof *cli);

    /* Pass 1: only --config, so that flags override the file whatever their order. */
    const char *config = NULL;
    int saved_opterr = opterr;
    opterr = 0;
    optind = 0;
    int ch;
    while ((ch = getopt_long(argc, argv, "h", lo, NULL)) != -1)
        if (ch >= 256 && k_opts[ch - 256].id == O_CONFIG)
            config = optarg;
    opterr = saved_opterr;
    if (config && tg_gw_config_load_file(c, config, err, errlen) != 0)
        return -1;

    /* Pass 2: everything else, in order. */
    optind = 0;
    opterr = 0;
    while ((ch = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
        if (ch == 'h') {
            cli->help = 1;
            continue;
        }
        if (ch == '?' || ch == ':') {
            opterr = saved_opterr;
            if (optopt >= 256)
                return tg_errf(err, errlen, "option --%s needs a value", k_opts[optopt - 256].name);
            return tg_errf(err, errlen, "unknown option '%s'", argv[optind - 1]);
        }
        const struct opt_def *o = &k_opts[ch - 256];
        switch (o->id) {
        case O_CONFIG: break;
        case O_CHECK_CONFIG: cli->check_config = 1; break;
        case O_HASH_TOKEN: cli->hash_token = 1; break;
        case O_GEN_TOKEN: cli->gen_token = 1; break;
        case O_HELP: cli->help = 1; break;
        case O_VERSION: cli->version = 1; break;
        default:
            if (tg_gw_config_set(c, o->name, optarg, err, errlen) != 0) {
                opterr = saved_opterr;
                return -1;
            }
        }
    }
    opterr = saved_opterr;
    if (optind < argc)
        return tg_errf(err, errlen, "unexpected argument '%s'", argv[optind]);
    return 0;
}

/* ------------------------------------------------------------ listeners */

const char *tg_gw_listen_kind_name(enum tg_gw_listen_kind k)
{
    return k == TG_GW_L_UNIX ? "unix" : k == TG_GW_L_TCP ? "tcp" : "tls";
}

static int copy_field(char *dst, size_t cap, const char *v, size_t n)
{
    if (n >= cap)
        return -1;
    memcpy(dst, v, n);
    dst[n] = '\0';
    return 0;
}

static int listen_option(struct tg_gw_listen_spec *o, const char *k, size_t kl, const char *v, size_t vl, char *err,
                         size_t errlen)
{
    char val[256];
    if (copy_field(val, sizeof val, v, vl) != 0)
        return tg_errf(err, errlen, "listener option value too long");
#define KEY(s) (kl == strlen(s) && strncmp(k, s, kl) == 0)
    if (KEY("auth")) {
        if (!strcmp(val, "local"))
            o->auth = TG_GW_LAUTH_LOCAL;
        else if (!strcmp(val, "token"))
            o->auth = TG_GW_LAUTH_TOKEN;
        else if (!strcmp(val, "none"))
            o->auth = TG_GW_LAUTH_NONE;
        else
            return tg_errf(err, errlen, "listener auth= must be local, token or none, not '%s'", val);
    } else if (KEY("roles")) {
        o->roles = tg_gw_roles_parse(val);
        if (!o->roles)
            return tg_errf(err, errlen, "listener roles= '%s' is not a role list", val);
    } else if (KEY("max-connections")) {
        unsigned long u;
        if (parse_uint(val, 100000000ul, &u) != 0)
            return tg_errf(err, errlen, "listener max-connections= '%s' is not a count", val);
        o->max_conns = (unsigned)u;
    } else if (KEY("node")) {
        if (strlen(val) >= sizeof o->node || !*val)
            return tg_errf(err, errlen, "listener node= '%s' is not a node name", val);
        snprintf(o->node, sizeof o->node, "%s", val);
    } else if (KEY("uids")) {
        if (tg_gw_uids_parse(val, o->uids, TG_GW_MAX_UIDS, &o->n_uids, err, errlen) != 0)
            return -1;
    } else if (KEY("mode")) {
        if (parse_mode(val, &o->mode) != 0)
            return tg_errf(err, errlen, "listener mode= '%s' is not an octal mode from 1 to 0777 (such as 0600)", val);
    } else if (KEY("cert") || KEY("key") || KEY("ca")) {
        char *dst = KEY("cert") ? o->cert : KEY("key") ? o->key : o->ca;
        snprintf(dst, 256, "%s", val);
    } else {
        char kk[64];
        snprintf(kk, sizeof kk, "%.*s", (int)(kl < 60 ? kl : 60), k);
        return tg_errf(err, errlen, "unknown listener option '%s' (auth, roles, uids, node, max-connections, mode, cert, key, ca)",
                       kk);
    }
#undef KEY
    return 0;
}

int tg_gw_listen_parse(const char *s, struct tg_gw_listen_spec *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    if (!s || strlen(s) >= sizeof out->text)
        return tg_errf(err, errlen, "listener spec too long");
    snprintf(out->text, sizeof out->text, "%s", s);
    const char *eq = strchr(s, '=');
    if (!eq)
        return tg_errf(err, errlen, "listener '%s': expected PORT=URL (consumer=tcp://127.0.0.1:7001)", s);
    size_t pl = (size_t)(eq - s);
    if (pl == 8 && strncmp(s, "consumer", 8) == 0)
        out->port = TG_GW_PORT_CONSUMER;
    else if (pl == 8 && strncmp(s, "producer", 8) == 0)
        out->port = TG_GW_PORT_PRODUCER;
    else
        return tg_errf(err, errlen, "listener '%s': the port must be consumer= or producer=", s);
    const char *url = eq + 1;
    const char *q = strchr(url, '?');
    size_t ul = q ? (size_t)(q - url) : strlen(url);
    char u[512];
    if (copy_field(u, sizeof u, url, ul) != 0 || !*u)
        return tg_errf(err, errlen, "listener '%s': missing or too long address", s);
    const char *addr;
    if (strncmp(u, "unix:", 5) == 0) {
        out->kind = TG_GW_L_UNIX;
        addr = u; /* tg_addr_parse understands unix:PATH and unix:@name */
    } else if (strncmp(u, "tcp://", 6) == 0) {
        out->kind = TG_GW_L_TCP;
        addr = u + 6;
    } else if (strncmp(u, "tls://", 6) == 0) {
        out->kind = TG_GW_L_TLS;
        addr = u + 6;
    } else if (u[0] == '/' || u[0] == '@' || u[0] == '.') {
        out->kind = TG_GW_L_UNIX;
        addr = u;
    } else if (strstr(u, "://")) {
        return tg_errf(err, errlen, "listener '%s': unknown scheme (use unix:, tcp:// or tls://)", s);
    } else {
        out->kind = TG_GW_L_TCP;
        addr = u;
    }
    if (out->kind != TG_GW_L_UNIX) {
        const char *colon = strrchr(addr, ':');
        if (!colon || !colon[1] || strspn(colon + 1, "0123456789") != strlen(colon + 1))
            return tg_errf(err, errlen, "listener '%s': %s needs HOST:PORT", s, tg_gw_listen_kind_name(out->kind));
    }
    snprintf(out->address, sizeof out->address, "%s", addr);
    if (q) {
        const char *o = q + 1;
        while (*o) {
            const char *amp = strchr(o, '&');
            size_t len = amp ? (size_t)(amp - o) : strlen(o);
            const char *oeq = memchr(o, '=', len);
            if (!oeq)
                return tg_errf(err, errlen, "listener '%s': options are key=value pairs joined by '&'", s);
            char e2[256];
            if (listen_option(out, o, (size_t)(oeq - o), oeq + 1, len - (size_t)(oeq - o) - 1, e2, sizeof e2) != 0)
                return tg_errf(err, errlen, "listener '%s': %s", s, e2);
            o += len + (amp ? 1 : 0);
        }
    }
    if (out->kind != TG_GW_L_TLS && (out->cert[0] || out->key[0] || out->ca[0]))
        return tg_errf(err, errlen, "listener '%s': cert=, key= and ca= only apply to tls://", s);
    return 0;
}

/* ------------------------------------------------------------ validation */

static int readable(const char *path, char *err, size_t errlen, const char *what)
{
    if (access(path, R_OK) != 0)
        return tg_errf(err, errlen, "%s %s is not readable: %s", what, path, strerror(errno));
    return 0;
}

/* A file that decides who gets in (a CA bundle) or holds a TLS private key: readable, and
 * checked as base/file_trust.h says on the opened file, so another user who could write the CA
 * bundle cannot make their own certificates trusted, and a key every user can read is refused. */
static int trusted(const char *path, enum tg_file_trust how, char *err, size_t errlen, const char *what)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    if (fd < 0)
        return tg_errf(err, errlen, "%s %s is not readable: %s", what, path, strerror(errno));
    char why[512];
    int rc = tg_file_trust_check(fd, path, how, why, sizeof why);
    close(fd);
    if (rc != 0)
        return tg_errf(err, errlen, "%s %s", what, why);
    return 0;
}

/* --X-socket-mode given for a socket list holding an abstract name (@name, unix:@name): the mode
 * cannot apply there, and silently ignoring it would leave the operator believing the socket is
 * restricted. Returns 0 or -1 with a message. */
static int socket_mode_unused(const char *list, const char *which, char *err, size_t errlen)
{
    for (const char *p = list; p && *p;) {
        while (*p == ' ' || *p == ',')
            p++;
        size_t n = strcspn(p, ",");
        if (n && (p[0] == '@' || (n > 5 && strncmp(p, "unix:@", 6) == 0)))
            return tg_errf(err, errlen,
                           "%s-socket-mode has no effect on the abstract socket %.*s: anyone who shares the network "
                           "namespace can connect; use a socket path",
                           which, (int)(n < 200 ? n : 200), p);
        p += n;
    }
    return 0;
}

int tg_gw_config_validate(struct tg_gw_config *c, char *err, size_t errlen)
{
    char e2[400];
    if (tg_gw_limits_validate(&c->limits, e2, sizeof e2) != 0)
        return tg_errf(err, errlen, "%s", e2);
    if (c->limits.max_conns && c->limits.max_conns_per_source > c->limits.max_conns)
        c->limits.max_conns_per_source = c->limits.max_conns;

    size_t n_tokens = 0;
    if (c->token_file) {
        struct tg_gw_tokens *t = NULL;
        if (tg_gw_tokens_load(c->token_file, &t, e2, sizeof e2) != 0)
            return tg_errf(err, errlen, "%s", e2);
        n_tokens = tg_gw_tokens_count(t);
        tg_gw_tokens_free(t);
    }
    if (c->producer_mode && socket_mode_unused(c->producer_socks, "producer", err, errlen) != 0)
        return -1;
    if (c->consumer_mode && socket_mode_unused(c->consumer_socks, "consumer", err, errlen) != 0)
        return -1;
    struct tg_addr a;
    if (c->upstream_consumer && tg_addr_parse(c->upstream_consumer, &a, e2, sizeof e2) != 0)
        return tg_errf(err, errlen, "upstream-consumer: %s", e2);
    if (c->upstream_producer && tg_addr_parse(c->upstream_producer, &a, e2, sizeof e2) != 0)
        return tg_errf(err, errlen, "upstream-producer: %s", e2);
    if (c->tls_cert && readable(c->tls_cert, err, errlen, "tls-cert") != 0)
        return -1;
    if (c->tls_key && trusted(c->tls_key, TG_FILE_PRIVATE_KEY, err, errlen, "tls-key") != 0)
        return -1;
    if (c->tls_ca && trusted(c->tls_ca, TG_FILE_DECIDES_ACCESS, err, errlen, "tls-ca") != 0)
        return -1;
    if (c->peer_cert && readable(c->peer_cert, err, errlen, "peer-cert") != 0)
        return -1;
    if (c->peer_key && trusted(c->peer_key, TG_FILE_PRIVATE_KEY, err, errlen, "peer-key") != 0)
        return -1;
    if (c->peer_ca && trusted(c->peer_ca, TG_FILE_DECIDES_ACCESS, err, errlen, "peer-ca") != 0)
        return -1;
    if (c->web_root) {
        struct stat st;
        if (stat(c->web_root, &st) != 0 || !S_ISDIR(st.st_mode))
            return tg_errf(err, errlen, "web-root %s is not a directory", c->web_root);
        if (tg_file_trust_tree(c->web_root, e2, sizeof e2) != 0)
            return tg_errf(err, errlen, "web-root %s", e2);
    }

    for (size_t i = 0; i < c->n_listen; i++) {
        struct tg_gw_listen_spec *l = &c->listen[i];
        if (tg_addr_parse(l->address, &l->addr, e2, sizeof e2) != 0)
            return tg_errf(err, errlen, "listener %s: %s", l->text, e2);
        if ((l->kind == TG_GW_L_UNIX) != (l->addr.family == AF_UNIX))
            return tg_errf(err, errlen, "listener %s: the address does not match the scheme", l->text);
        if (l->mode && l->addr.family == AF_UNIX && l->addr.text[0] == '@')
            return tg_errf(err, errlen,
                           "listener %s: mode= has no effect on an abstract socket (%s): anyone who shares the "
                           "network namespace can connect; use a socket path (unix:/path?mode=...)",
                           l->text, l->addr.text);
        l->loopback = tg_addr_is_loopback(&l->addr);
        size_t tl = strlen(l->addr.text);
        int ephemeral = l->kind != TG_GW_L_UNIX && tl > 2 && strcmp(l->addr.text + tl - 2, ":0") == 0;
        for (size_t j = 0; j < i && !ephemeral; j++)
            if (strcmp(c->listen[j].addr.text, l->addr.text) == 0)
                return tg_errf(err, errlen, "listeners %s and %s use the same address", c->listen[j].text, l->text);
        int has_ca = l->ca[0] || c->tls_ca;
        if (l->kind == TG_GW_L_TLS) {
            if (!tg_gw_listener_tls_available())
                return tg_errf(err, errlen,
                               "listener %s: TLS listeners are not available in this build (gw_tls is missing)",
                               l->text);
            const char *cert = l->cert[0] ? l->cert : c->tls_cert, *key = l->key[0] ? l->key : c->tls_key;
            if (!cert || !key)
                return tg_errf(err, errlen, "listener %s: tls:// needs a certificate and key (--tls-cert, --tls-key)",
                               l->text);
            if (readable(cert, err, errlen, "certificate") != 0 ||
                trusted(key, TG_FILE_PRIVATE_KEY, err, errlen, "key") != 0)
                return -1;
            if (l->ca[0] && trusted(l->ca, TG_FILE_DECIDES_ACCESS, err, errlen, "CA bundle") != 0)
                return -1;
        }
        if ((l->auth == TG_GW_LAUTH_TOKEN) && !n_tokens && !(l->kind == TG_GW_L_TLS && has_ca))
            return tg_errf(err, errlen, "listener %s: auth=token needs --token-file with at least one token",
                           l->text);
        if (!l->loopback && !c->insecure) {
            if (l->kind != TG_GW_L_TLS)
                return tg_errf(err, errlen,
                               "listener %s binds a non-loopback address without TLS: use tls:// with client "
                               "certificates (--tls-ca) or a token file, or pass --insecure",
                               l->text);
            if (!has_ca && !n_tokens)
                return tg_errf(err, errlen,
                               "listener %s binds a non-loopback address without client authentication: configure "
                               "--tls-ca (client certificates) or --token-file, or pass --insecure",
                               l->text);
            if (l->auth == TG_GW_LAUTH_NONE)
                return tg_errf(err, errlen, "listener %s: auth=none on a non-loopback address needs --insecure",
                               l->text);
        }
    }

    /* a node serving a link on its stdio (started by a peer's ssh) has no HTTP port unless asked:
     * several such nodes on one host would all want 127.0.0.1:8037 */
    if (c->link_stdio && !c->http)
        c->no_http = 1;
    if (!c->no_http) {
        const char *h = c->http ? c->http : "127.0.0.1:8037";
        if (tg_addr_parse(h, &a, e2, sizeof e2) != 0 || a.family == AF_UNIX)
            return tg_errf(err, errlen, "http: '%s' is not HOST:PORT", h);
        if (c->http_tls && (!c->tls_cert || !c->tls_key))
            return tg_errf(err, errlen, "http-tls needs --tls-cert and --tls-key");
        /* /adb: on a loopback front end unless turned off, elsewhere only when turned on */
        c->adb_enabled = c->http_adb > 0 || (c->http_adb == 0 && tg_addr_is_loopback(&a));
        if (c->adb_enabled) {
            const char *source;
            const char *spec = tg_gw_adb_addr_choose(c->adb_server, &source);
            if (tg_gw_adb_addr_parse(spec, &c->adb_addr, e2, sizeof e2) != 0)
                return tg_errf(err, errlen, "%s: %s", strcmp(source, "default") ? source : "adb-server", e2);
            snprintf(c->adb_server_text, sizeof c->adb_server_text, "%.500s%s", spec,
                     strcmp(source, "ADB_SERVER_SOCKET") ? "" : " (ADB_SERVER_SOCKET)");
        }
        if (!tg_addr_is_loopback(&a) && !c->insecure) {
            if (!c->http_tls)
                return tg_errf(err, errlen,
                               "http %s is not a loopback address: use --http-tls with client certificates or a token "
                               "file, or pass --insecure",
                               h);
            if (!c->tls_ca && !n_tokens)
                return tg_errf(err, errlen,
                               "http %s is not a loopback address: configure --tls-ca or --token-file, or pass "
                               "--insecure",
                               h);
        }
    }
    return 0;
}

void tg_gw_config_usage(FILE *out)
{
    fprintf(out, "usage: tracegated [options]\n\n"
                 "Runs a traced-compatible tracing service (or bridges to a running traced) and exposes its\n"
                 "producer and consumer ports over UNIX, TCP, TLS and WebSocket.\n\n"
                 "options (each also a config-file key, `name = value`):\n");
    for (size_t i = 0; i < N_OPTS; i++) {
        char lhs[64];
        snprintf(lhs, sizeof lhs, "--%s%s%s", k_opts[i].name, k_opts[i].arg ? " " : "",
                 k_opts[i].arg ? k_opts[i].arg : "");
        if (strlen(lhs) > 28)
            fprintf(out, "  %s\n  %-28s %s\n", lhs, "", k_opts[i].help);
        else
            fprintf(out, "  %-28s %s\n", lhs, k_opts[i].help);
    }
    fprintf(out, "\nSizes take k/m/g suffixes; durations take ms/s/m/h (plain numbers are seconds).\nRoles:");
    const char *sep = " ";
    for (unsigned bit = 1; bit; bit <<= 1) { /* every role a role list accepts (gw_acl.c) */
        const char *name = tg_gw_role_name(bit);
        if (strcmp(name, "none") != 0) {
            fprintf(out, "%s%s", sep, name);
            sep = ", ";
        }
    }
    fprintf(out, ". Signals: SIGHUP reloads tokens, origins and\n"
                 "certificates; SIGTERM/SIGINT drain (a second one exits at once).\n");
}
