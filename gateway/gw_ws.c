/* gw_ws.c: the WebSocket front end's lws context, its service thread, certificate reload, and the libevent side of the hand-off (see gw_ws.h). */
#include "gw_ws.h"

#include <errno.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gw_adb.h"
#include "gw_adb_target.h"
#include "gw_ws_int.h"
#include "gw_ws_policy.h"
#include "net/tls_files.h"
#include "net/ws_close_note.h"
#include "net/ws_filter.h"
#include "net/ws_link.h"
#include "net/ws_seam.h"
#include "tracegate/conn.h"
#include "tracegate/log.h"

/* set while lws_create_vhost runs, to catch the vhost's SSL_CTX */
static _Thread_local struct tg_gw_ws *g_creating;

static const struct lws_protocols k_protocols[] = {
    /* rx_buffer_size and tx_packet_size: large WebSocket reads and one send() per message (ws_link.h) */
    {"tracegate", tg_gw_ws_callback, sizeof(struct tg_ws_pss), TG_WS_LINK_RX_BUFFER, 0, NULL, TG_WS_LINK_TX_PACKET},
    {TG_WS_LINK_RAW_PROTOCOL, tg_ws_link_raw_callback, 0, 0, 0, NULL, 0},
    {NULL, NULL, 0, 0, 0, NULL, 0},
};

/* ------------------------------------------------ libevent side of the hand-off */

/* A native WebSocket's socket: the server side of the WebSocket as a filter on this loop. */
static struct bufferevent *open_native(struct tg_gw_ws *ws, int fd, const struct tg_gw_client_info *info)
{
    char what[192];
    snprintf(what, sizeof what, "WebSocket %s from %s", info->port == TG_GW_PORT_PRODUCER ? "/producer" : "/traced",
             info->peer);
    struct tg_ws_server_filter_cfg fc = {.what = what, .max_message = ws->cfg.max_message,
                                         .out_message = TG_WS_LINK_MSG_MAX};
    return tg_ws_server_filter_new(ws->base, fd, &fc); /* closes fd on failure */
}

static void on_handoff(void *arg, enum tg_ws_handoff_kind kind, int fd, struct tg_ws_seam *seam,
                       const struct tg_gw_client_info *info, struct tg_ws_close_note *note)
{
    struct tg_gw_ws *ws = arg;
    if (kind == TG_WS_HANDOFF_ADB) {
        if (ws->adb) {
            tg_gw_adb_accept(ws->adb, fd, info, note);
        } else { /* cannot happen: the route is refused when /adb is off */
            tg_ws_close_note_set(note, 1011, "/adb is off");
            close(fd);
        }
        return;
    }
    struct tg_conn_opts o;
    tg_gw_client_conn_opts(ws->gw, &o); /* the gateway's configured limits apply to WebSockets too */
    o.no_fd_passing = 1;
    struct bufferevent *a = kind == TG_WS_HANDOFF_NATIVE ? open_native(ws, fd, info)
                            : tg_ws_seam_open(seam); /* on failure the WebSocket closes */
    tg_conn *c = a ? tg_conn_new_bev(ws->base, a, &o, NULL, NULL) : NULL;
    if (!c) {
        tg_warn(TG_WS_LOG, "cannot create a connection for %s: out of memory", info->peer);
        return;
    }
    tg_gw_accept(ws->gw, c, info);
}

/* ------------------------------------------------------------ the thread */

static void *service_thread(void *arg)
{
    struct tg_gw_ws *ws = arg;
    while (!atomic_load(&ws->stop)) {
        if (lws_service(ws->ctx, 0) < 0)
            usleep(10000); /* should not happen; keep the context until stop */
        unsigned failed = tg_ws_take_accept_failures();
        if (failed)
            tg_gw_ws_guard_accept_failed(ws, failed); /* out of descriptors: pauses this thread */
    }
    /* a short grace for connections finishing their TLS shutdown: destroying
     * the context under them leaks their SSL objects */
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    while (ws->live_wsis > 0) {
        clock_gettime(CLOCK_MONOTONIC, &t);
        if ((t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000 > 1000)
            break;
        lws_cancel_service(ws->ctx);
        lws_service(ws->ctx, 0);
        usleep(2000);
    }
    tg_gw_ws_guard_stop(ws);
    /* the context is destroyed by tg_gw_ws_stop once this thread is joined: destroying it here
     * raced with the lws_cancel_service() that woke us (its eventfd closed under the caller) */
    return NULL;
}

/* ------------------------------------------------------------ reload */

/* The certificate, key (and chain) and CA bundle as read from the descriptors checked as
 * tracegated's TLS files are (net/tls_files.h), held apart from the live SSL_CTX until installed. */
struct checked_tls {
    SSL_CTX *loaded; /* holds the certificate, its chain and the key */
    X509_STORE *store;
    STACK_OF(X509_NAME) *names;
};

static void checked_tls_free(struct checked_tls *c)
{
    if (c->store)
        X509_STORE_free(c->store);
    if (c->names)
        sk_X509_NAME_pop_free(c->names, X509_NAME_free);
    if (c->loaded)
        SSL_CTX_free(c->loaded);
    memset(c, 0, sizeof *c);
}

/* Reads the files once; a bad one (refused mode or owner, encrypted key, key not matching the
 * certificate, unreadable CA bundle) fails with the reason and changes nothing. */
static int load_checked_files(const struct tg_gw_ws *ws, struct checked_tls *c, char *err, size_t errlen)
{
    memset(c, 0, sizeof *c);
    c->loaded = SSL_CTX_new(TLS_server_method());
    if (!c->loaded) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    if (tg_tls_use_cert_key(c->loaded, ws->cfg.cert_file, ws->cfg.key_file, 1, err, errlen) != 0 ||
        (ws->cfg.ca_file && tg_tls_ca_load(ws->cfg.ca_file, 1, &c->store, &c->names, err, errlen) != 0)) {
        checked_tls_free(c);
        return -1;
    }
    return 0;
}

/* Puts what load_checked_files read on the vhost's live SSL_CTX (taking the CA store and names).
 * Runs on the thread that owns the lws context: the creating one before the service thread
 * starts, then the lws thread. */
static int apply_checked_files(SSL_CTX *live, struct checked_tls *c, char *err, size_t errlen)
{
    if (!live) {
        snprintf(err, errlen, "TLS is not active");
        return -1;
    }
    X509 *cert = SSL_CTX_get0_certificate(c->loaded);
    EVP_PKEY *key = SSL_CTX_get0_privatekey(c->loaded);
    STACK_OF(X509) *chain = NULL;
    SSL_CTX_get0_chain_certs(c->loaded, &chain);
    if (SSL_CTX_use_certificate(live, cert) != 1 || SSL_CTX_use_PrivateKey(live, key) != 1 ||
        SSL_CTX_set1_chain(live, chain) != 1) {
        snprintf(err, errlen, "cannot install the new certificate");
        return -1;
    }
    if (c->store) {
        SSL_CTX_set_cert_store(live, c->store); /* takes it */
        c->store = NULL;
        SSL_CTX_set_client_CA_list(live, c->names); /* takes it */
        c->names = NULL;
    }
    return 0;
}

/* SIGHUP: the files read again and installed on the live SSL_CTX, or nothing changed. */
static int install_checked_files(struct tg_gw_ws *ws, char *err, size_t errlen)
{
    struct checked_tls c;
    if (load_checked_files(ws, &c, err, errlen) != 0)
        return -1;
    int rc = apply_checked_files(ws->ssl_ctx, &c, err, errlen);
    checked_tls_free(&c);
    return rc;
}

/* Runs on the lws thread (EVENT_WAIT_CANCELLED): the request taken, the files read and installed,
 * the outcome logged here and handed to the requester's callback. */
void tg_gw_ws_do_reload(struct tg_gw_ws *ws)
{
    pthread_mutex_lock(&ws->mu);
    int pending = ws->reload_pending;
    tg_gw_ws_reload_cb done = ws->reload_done;
    void *arg = ws->reload_arg;
    ws->reload_pending = 0;
    ws->reload_done = NULL;
    ws->reload_arg = NULL;
    pthread_mutex_unlock(&ws->mu);
    if (!pending)
        return;

    char err[512] = "";
    int rc = install_checked_files(ws, err, sizeof err);
    if (rc == 0)
        tg_info(TG_WS_LOG, "reloaded the HTTPS/WSS certificate");
    else
        tg_error(TG_WS_LOG, "reloading the HTTPS/WSS certificate failed, keeping the loaded one: %s", err);
    if (done)
        done(rc, err, arg);
}

void tg_gw_ws_reload(struct tg_gw_ws *ws, tg_gw_ws_reload_cb done, void *arg)
{
    if (!ws->cfg.tls) {
        if (done)
            done(0, "", arg); /* nothing to reload */
        return;
    }
    pthread_mutex_lock(&ws->mu);
    ws->reload_pending = 1;
    ws->reload_done = done; /* a request still waiting merges with this one */
    ws->reload_arg = arg;
    pthread_mutex_unlock(&ws->mu);
    lws_cancel_service(ws->ctx);
}

void tg_gw_ws_capture_ssl_ctx(void *ssl_ctx)
{
    if (g_creating)
        g_creating->ssl_ctx = ssl_ctx;
}

/* ------------------------------------------------------------ start / stop */

static const char *copy_str(char *dst, size_t cap, const char *src)
{
    if (!src || !*src)
        return NULL;
    snprintf(dst, cap, "%s", src);
    return dst;
}

static void ws_free(struct tg_gw_ws *ws)
{
    tg_gw_adb_free(ws->adb);
    if (ws->handoff)
        tg_ws_handoff_free(ws->handoff); /* abandons the seams still in it */
    tg_ws_seams_free(ws->seams);         /* after the lws thread: every WebSocket is closed */
    tg_ws_pending_free(ws->pending);
    for (size_t i = 0; ws->http_hosts && i < ws->cfg.n_http_hosts; i++)
        free(ws->http_hosts[i]);
    free(ws->http_hosts);
    pthread_mutex_destroy(&ws->mu);
    free(ws);
}

struct tg_gw_ws *tg_gw_ws_start(struct tg_gw *gw, struct event_base *base, const struct tg_gw_ws_config *cfg,
                                char *err, size_t errlen)
{
    struct tg_gw_ws *ws = calloc(1, sizeof *ws);
    if (!ws) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    ws->gw = gw;
    ws->base = base;
    ws->cfg = *cfg;
    pthread_mutex_init(&ws->mu, NULL);
    ws->cfg.bind_host = copy_str(ws->bind_host, sizeof ws->bind_host, cfg->bind_host ? cfg->bind_host : "127.0.0.1");
    ws->cfg.cert_file = copy_str(ws->cert_file, sizeof ws->cert_file, cfg->cert_file);
    ws->cfg.key_file = copy_str(ws->key_file, sizeof ws->key_file, cfg->key_file);
    ws->cfg.ca_file = copy_str(ws->ca_file, sizeof ws->ca_file, cfg->ca_file);
    ws->cfg.web_root = copy_str(ws->web_root, sizeof ws->web_root, cfg->web_root);
    if (!ws->cfg.port)
        ws->cfg.port = 8037;
    if (!ws->cfg.max_message)
        ws->cfg.max_message = 1u << 20;
    if (!ws->cfg.handshake_timeout_ms)
        ws->cfg.handshake_timeout_ms = 10000;
    ws->cfg.http_hosts = NULL;
    ws->cfg.n_http_hosts = 0;
    if (cfg->n_http_hosts) {
        ws->http_hosts = calloc(cfg->n_http_hosts, sizeof *ws->http_hosts);
        for (size_t i = 0; ws->http_hosts && i < cfg->n_http_hosts; i++) {
            ws->http_hosts[i] = strdup(cfg->http_hosts[i]);
            if (!ws->http_hosts[i])
                break;
            ws->cfg.n_http_hosts = i + 1;
        }
        if (ws->cfg.n_http_hosts != cfg->n_http_hosts) {
            snprintf(err, errlen, "out of memory");
            ws_free(ws);
            return NULL;
        }
        ws->cfg.http_hosts = (const char *const *)ws->http_hosts;
    }
    /* /adb: the ADB server (copied), this node's name */
    ws->cfg.adb_server = NULL;
    ws->cfg.adb_server_text = copy_str(ws->adb_server_text, sizeof ws->adb_server_text, cfg->adb_server_text);
    ws->cfg.node_name = copy_str(ws->node_name, sizeof ws->node_name, cfg->node_name);
    if (tg_ws_adb_enabled(&ws->cfg)) {
        char e2[256];
        if (cfg->adb_server)
            ws->adb_server = *cfg->adb_server;
        else if (tg_addr_parse("127.0.0.1:5037", &ws->adb_server, e2, sizeof e2) != 0) {
            snprintf(err, errlen, "ADB server address: %s", e2);
            ws_free(ws);
            return NULL;
        }
        ws->cfg.adb_server = &ws->adb_server;
        struct tg_gw_adb_config ac = {.server = &ws->adb_server,
                                      .server_text = ws->cfg.adb_server_text,
                                      .node_name = ws->cfg.node_name};
        ws->adb = tg_gw_adb_new(base, &ac);
        if (!ws->adb) {
            snprintf(err, errlen, "out of memory");
            ws_free(ws);
            return NULL;
        }
    }
    if (tg_gw_ws_guard_init(ws) != 0) {
        snprintf(err, errlen, "out of memory");
        ws_free(ws);
        return NULL;
    }
    if (ws->cfg.tls && (!ws->cfg.cert_file || !ws->cfg.key_file)) {
        snprintf(err, errlen, "wss/https needs a certificate and a key");
        ws_free(ws);
        return NULL;
    }
    if (ws->cfg.require_client_cert && (!ws->cfg.tls || !ws->cfg.ca_file)) {
        snprintf(err, errlen, "client certificates need TLS and a CA file");
        ws_free(ws);
        return NULL;
    }
    ws->handoff = tg_ws_handoff_new(base, on_handoff, ws);
    if (!ws->handoff) {
        snprintf(err, errlen, "cannot create the hand-off pipe: %s", strerror(errno));
        ws_free(ws);
        return NULL;
    }
    tg_ws_setup_lws_logging();

    struct lws_context_creation_info ci;
    memset(&ci, 0, sizeof ci);
    ci.options = LWS_SERVER_OPTION_EXPLICIT_VHOSTS;
    if (ws->cfg.tls)
        ci.options |= LWS_SERVER_OPTION_DO_SSL_GLOBAL_INIT;
    if (!strchr(ws->cfg.bind_host, ':'))
        ci.options |= LWS_SERVER_OPTION_DISABLE_IPV6;
    ci.port = CONTEXT_PORT_NO_LISTEN;
    ci.user = ws;
    ci.pt_serv_buf_size = TG_WS_LINK_RX_BUFFER; /* what one read of a WebSocket may take (default 4 KiB) */
    /* libwebsockets' own timeouts (TLS accept, idle header tables) sit a
     * second behind the absolute deadline gw_ws_guard.c enforces, so ours
     * fires first and is counted and logged */
    unsigned lws_secs = (ws->cfg.handshake_timeout_ms + 999) / 1000 + 1;
    ci.timeout_secs = lws_secs;
    ws->ctx = lws_create_context(&ci);
    if (!ws->ctx) {
        snprintf(err, errlen, "cannot create the libwebsockets context");
        ws_free(ws);
        return NULL;
    }
    ws->seams = tg_ws_seams_new(base, ws->ctx);
    if (!ws->seams) {
        snprintf(err, errlen, "cannot create the WebSocket hand-off: %s", strerror(errno));
        lws_context_destroy(ws->ctx);
        ws_free(ws);
        return NULL;
    }

    struct lws_context_creation_info vi;
    memset(&vi, 0, sizeof vi);
    vi.vhost_name = "tracegate";
    vi.port = ws->cfg.port;
    vi.iface = ws->cfg.bind_host;
    vi.protocols = k_protocols;
    vi.alpn = "http/1.1"; /* no h2: WebSocket flow control needs h1 */
    vi.keepalive_timeout = 5;
    vi.timeout_secs = lws_secs;
    vi.timeout_secs_ah_idle = lws_secs;
    if (strcmp(ws->cfg.bind_host, "0.0.0.0") && strcmp(ws->cfg.bind_host, "::") && strchr(ws->cfg.bind_host, ':'))
        vi.options |= LWS_SERVER_OPTION_IPV6_V6ONLY_MODIFY | LWS_SERVER_OPTION_IPV6_V6ONLY_VALUE;
    /* TLS: libwebsockets gets no file names. tracegated reads the certificate, key and CA bundle
     * once, from the descriptors it checked (a refused or encrypted key stops the start here,
     * before anything listens, with the reason: lws would have asked a terminal for a pass
     * phrase), lws makes the vhost's SSL_CTX empty (with the verify mode and options below) and
     * hands it over at LOAD_EXTRA_SERVER_VERIFY_CERTS, and what was read is installed on it before
     * the service thread takes the first handshake. */
    struct checked_tls checked = {0};
    if (ws->cfg.tls) {
        vi.options |= LWS_SERVER_OPTION_DO_SSL_GLOBAL_INIT | LWS_SERVER_OPTION_CREATE_VHOST_SSL_CTX;
        vi.ssl_options_set = SSL_OP_NO_TLSv1 | SSL_OP_NO_TLSv1_1;
        if (ws->cfg.require_client_cert)
            vi.options |= LWS_SERVER_OPTION_REQUIRE_VALID_OPENSSL_CLIENT_CERT;
        else if (ws->cfg.ca_file) /* ask for a certificate, verify one that comes, go on without */
            vi.options |=
                LWS_SERVER_OPTION_REQUIRE_VALID_OPENSSL_CLIENT_CERT | LWS_SERVER_OPTION_PEER_CERT_NOT_REQUIRED;
        if (load_checked_files(ws, &checked, err, errlen) != 0) {
            lws_context_destroy(ws->ctx);
            ws_free(ws);
            return NULL;
        }
    }
    g_creating = ws;
    ws->vh = lws_create_vhost(ws->ctx, &vi);
    g_creating = NULL;
    if (!ws->vh) {
        snprintf(err, errlen, "cannot listen on %s:%d for HTTP/WebSocket (address in use?)", ws->cfg.bind_host,
                 ws->cfg.port);
        checked_tls_free(&checked);
        lws_context_destroy(ws->ctx);
        ws_free(ws);
        return NULL;
    }
    if (ws->cfg.tls) {
        int rc = apply_checked_files(ws->ssl_ctx, &checked, err, errlen);
        checked_tls_free(&checked);
        if (rc != 0) {
            lws_context_destroy(ws->ctx);
            ws_free(ws);
            return NULL;
        }
    }
    if (pthread_create(&ws->thread, NULL, service_thread, ws) != 0) {
        snprintf(err, errlen, "cannot start the WebSocket thread");
        lws_context_destroy(ws->ctx);
        ws_free(ws);
        return NULL;
    }
    ws->thread_started = 1;
    char adb_note[400] = "";
    if (ws->adb)
        snprintf(adb_note, sizeof adb_note, "; /adb to the ADB server %s",
                 tg_gw_adb_target_describe(tg_gw_adb_target_of(ws->adb)));
    tg_info(TG_WS_LOG, "HTTP/WebSocket on %s://%s:%d (/traced, /producer, %s/metrics, /healthz, /api/status)%s%s%s",
            ws->cfg.tls ? "https" : "http", ws->cfg.bind_host, ws->cfg.port, ws->adb ? "/adb, " : "", adb_note,
            ws->cfg.require_client_cert ? ", client certificates required" : "",
            tg_ws_status_needs_auth(&ws->cfg) ? "; /metrics and /api/status need a token or client certificate" : "");
    return ws;
}

struct tg_gw_adb *tg_gw_ws_adb(struct tg_gw_ws *ws) { return ws ? ws->adb : NULL; }

void tg_gw_ws_stop(struct tg_gw_ws *ws)
{
    if (!ws)
        return;
    /* /adb pipes first, so their WebSockets close with 1001 while the lws thread still runs */
    tg_gw_adb_free(ws->adb);
    ws->adb = NULL;
    if (ws->thread_started) {
        atomic_store(&ws->stop, 1);
        lws_cancel_service(ws->ctx);
        pthread_join(ws->thread, NULL);
        /* nobody services it any more: its last callbacks (every WebSocket's CLOSED) run here */
        lws_context_destroy(ws->ctx);
        ws->ctx = NULL;
    }
    ws_free(ws);
}
