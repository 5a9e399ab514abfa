/* ws_client.c: ws:// and wss:// client transport: a libwebsockets client on its own thread joined to a tg_conn by a socketpair (see ws_client.h). */
#include "net/ws_client.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <libwebsockets.h>

#include "net/ws_link.h"
#include "net/ws_wire.h"
#include "tracegate/log.h"

#define LOG "ws-client"
/* what a client accepts per server message (tracegated sends at most TG_WS_LINK_MSG_MAX) */
#define CLIENT_MAX_MESSAGE (64u << 20)

struct tg_ws_client {
    struct tg_ws_client *next;
    pthread_mutex_t mu; /* guards ctx against the thread destroying it */
    struct lws_context *ctx;
    pthread_t thread;
    atomic_int stop, finished;
    /* lws thread only, once it runs */
    int sock;     /* our socketpair end until the link owns it */
    int ws_done;  /* the WebSocket is gone (or never came) */
    int raw_open; /* the link's raw wsi exists */
    int live; /* wsis created and not yet freed (TLS shutdowns included) */
    char what[640]; /* "wss://host:port/path" for messages (never the query) */
};

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static struct tg_ws_client *g_clients;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static struct tg_ws_client *client_of(struct lws *wsi)
{
    struct lws_context *ctx = wsi ? lws_get_context(wsi) : NULL;
    return ctx ? lws_context_user(ctx) : NULL;
}

static int client_callback(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in, size_t len)
{
    struct tg_ws_client *c = client_of(wsi);
    (void)user;
    if (!c)
        return 0;
    switch (reason) {
    case LWS_CALLBACK_WSI_CREATE:
        c->live++;
        return 0;
    case LWS_CALLBACK_WSI_DESTROY:
        c->live--;
        return 0;
    case LWS_CALLBACK_CLIENT_CONNECTION_ERROR: {
        int status = wsi ? (int)lws_http_client_http_response(wsi) : 0;
        char st[32] = "";
        if (status > 0 && status != 101)
            snprintf(st, sizeof st, " (HTTP %d)", status);
        tg_error(LOG, "cannot open %s: %s%s", c->what, in ? (const char *)in : "connection failed", st);
        c->ws_done = 1;
        if (c->sock >= 0) {
            close(c->sock); /* the tg_conn sees EOF */
            c->sock = -1;
        }
        return 0;
    }
    case LWS_CALLBACK_CLIENT_ESTABLISHED: {
        int s = c->sock;
        c->sock = -1;
        struct tg_ws_link *l = tg_ws_link_attach(wsi, lws_get_vhost(wsi), s, CLIENT_MAX_MESSAGE);
        if (!l)
            return -1;
        /* what any tracegated accepts per message (--ws-max-message is 1 MiB by default) */
        tg_ws_link_set_out_message(l, TG_WS_LINK_CLIENT_MSG_MAX);
        c->raw_open = 1;
        tg_debug(LOG, "connected to %s", c->what);
        return 0;
    }
    case LWS_CALLBACK_CLIENT_RECEIVE: {
        struct tg_ws_link *l = tg_ws_link_of(wsi);
        return l ? tg_ws_link_on_rx(l, in, len) : -1;
    }
    case LWS_CALLBACK_CLIENT_WRITEABLE: {
        struct tg_ws_link *l = tg_ws_link_of(wsi);
        return l ? tg_ws_link_on_writeable(l) : -1;
    }
    case LWS_CALLBACK_CLIENT_CLOSED: {
        struct tg_ws_link *l = tg_ws_link_of(wsi);
        if (l)
            tg_ws_link_on_closed(l);
        c->ws_done = 1;
        if (c->sock >= 0) {
            close(c->sock);
            c->sock = -1;
        }
        return 0;
    }
    default:
        return 0;
    }
}

static int raw_callback(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in, size_t len)
{
    int r = tg_ws_link_raw_callback(wsi, reason, user, in, len);
    if (reason == LWS_CALLBACK_RAW_CLOSE_FILE) {
        struct tg_ws_client *c = client_of(wsi);
        if (c)
            c->raw_open = 0;
    }
    return r;
}

static const struct lws_protocols k_protocols[] = {
    /* large reads; one send() per message (ws_link.h) */
    {TG_WS_SUBPROTOCOL, client_callback, 0, TG_WS_LINK_RX_BUFFER, 0, NULL, TG_WS_LINK_CLIENT_MSG_MAX + 16u},
    {TG_WS_LINK_RAW_PROTOCOL, raw_callback, 0, 0, 0, NULL, 0},
    {NULL, NULL, 0, 0, 0, NULL, 0},
};

static void *client_thread(void *arg)
{
    struct tg_ws_client *c = arg;
    /* until lws has freed the WebSocket (a TLS one lingers for its shutdown:
     * destroying the context earlier leaks its SSL) and the raw side */
    while (!atomic_load(&c->stop) && !(c->ws_done && c->live <= 0 && !c->raw_open))
        if (lws_service(c->ctx, 0) < 0)
            break;
    pthread_mutex_lock(&c->mu);
    lws_context_destroy(c->ctx);
    c->ctx = NULL;
    pthread_mutex_unlock(&c->mu);
    if (c->sock >= 0) {
        close(c->sock);
        c->sock = -1;
    }
    atomic_store(&c->finished, 1);
    return NULL;
}

static void reap(int all)
{
    pthread_mutex_lock(&g_mu);
    struct tg_ws_client **pp = &g_clients;
    while (*pp) {
        struct tg_ws_client *c = *pp;
        if (all && !atomic_load(&c->finished)) {
            /* a moment to finish on their own (TLS shutdowns), then stop */
            for (int i = 0; i < 200 && !atomic_load(&c->finished); i++)
                usleep(10000);
            atomic_store(&c->stop, 1);
            pthread_mutex_lock(&c->mu);
            if (c->ctx)
                lws_cancel_service(c->ctx);
            pthread_mutex_unlock(&c->mu);
        }
        if (all || atomic_load(&c->finished)) {
            pthread_join(c->thread, NULL);
            *pp = c->next;
            pthread_mutex_destroy(&c->mu);
            free(c);
        } else {
            pp = &c->next;
        }
    }
    pthread_mutex_unlock(&g_mu);
}

void tg_ws_client_shutdown_all(void) { reap(1); }

static void register_atexit(void) { atexit(tg_ws_client_shutdown_all); }

static const char k_token_unfit[] =
    "the token cannot travel as a WebSocket subprotocol (at most 96 characters of A-Z a-z 0-9 . _ ~ + -); "
    "make a new one with `tracegated --gen-token`, or, for a token made with base64, use its base64url form "
    "(`tr '+/' '-_' | tr -d '='`), which the gateway accepts too; --token-in-url sends it in the URL instead, "
    "where proxies and access logs may record it";

static int token_fits_subprotocol(const char *t)
{
    size_t n = strlen(t);
    if (n == 0 || n > TG_WS_MAX_PROTOCOL_TOKEN)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char ch = t[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '.' ||
              ch == '_' || ch == '-' || ch == '~' || ch == '+'))
            return 0;
    }
    return 1;
}

static void url_encode(const char *s, char *out, size_t cap)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t o = 0;
    for (; *s && o + 4 < cap; s++) {
        unsigned char ch = (unsigned char)*s;
        if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '-' ||
            ch == '_' || ch == '.' || ch == '~') {
            out[o++] = (char)ch;
        } else {
            out[o++] = '%';
            out[o++] = hex[ch >> 4];
            out[o++] = hex[ch & 15];
        }
    }
    out[o] = '\0';
}

tg_conn *tg_ws_client_open(struct event_base *base, const struct tg_endpoint *ep,
                           const struct tg_endpoint_creds *creds, char *err, size_t errlen)
{
    static const struct tg_endpoint_creds no_creds;
    if (!creds)
        creds = &no_creds;
    int wss = ep->kind == TG_EP_WSS;
    if (!wss && (creds->cert || creds->key))
        tg_warn(LOG, "--cert/--key are ignored for ws:// (use wss://)");
    if (creds->token && creds->token[0] && !token_fits_subprotocol(creds->token)) {
        if (!creds->token_in_url) {
            snprintf(err, errlen, "%s", k_token_unfit);
            return NULL;
        }
        if (strlen(creds->token) > TG_WS_MAX_TOKEN) {
            snprintf(err, errlen, "the token is too long (at most %d characters)", TG_WS_MAX_TOKEN);
            return NULL;
        }
    }
    pthread_once(&g_once, register_atexit);
    reap(0);

    struct tg_ws_client *c = calloc(1, sizeof *c);
    if (!c) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    c->sock = -1;
    pthread_mutex_init(&c->mu, NULL);
    snprintf(c->what, sizeof c->what, "%s://%s%s%s:%d%s", wss ? "wss" : "ws", strchr(ep->host, ':') ? "[" : "",
             ep->host, strchr(ep->host, ':') ? "]" : "", ep->port, ep->path[0] ? ep->path : "/traced");

    int sv[2];
    if (tg_ws_link_socketpair(sv) != 0) {
        snprintf(err, errlen, "cannot create a socketpair: %m");
        free(c);
        return NULL;
    }
    c->sock = sv[0];

    tg_ws_setup_lws_logging(1);
    struct lws_context_creation_info ci;
    memset(&ci, 0, sizeof ci);
    ci.port = CONTEXT_PORT_NO_LISTEN;
    ci.protocols = k_protocols;
    ci.user = c;
    ci.pt_serv_buf_size = TG_WS_LINK_RX_BUFFER; /* what one read of the WebSocket may take (default 4 KiB) */
    ci.timeout_secs = 10;
    if (wss) {
        ci.options |= LWS_SERVER_OPTION_DO_SSL_GLOBAL_INIT;
        ci.client_ssl_ca_filepath = creds->cacert;
        ci.client_ssl_cert_filepath = creds->cert;
        ci.client_ssl_private_key_filepath = creds->key;
    }
    c->ctx = lws_create_context(&ci);
    if (!c->ctx) {
        snprintf(err, errlen, "cannot create the WebSocket client (bad --cacert/--cert/--key?)");
        close(sv[0]);
        close(sv[1]);
        free(c);
        return NULL;
    }

    /* token: the subprotocol; the query only when explicitly asked for */
    char path[2048], protocols[160];
    const char *path_in = ep->path[0] ? ep->path : "/traced";
    snprintf(protocols, sizeof protocols, "%s", TG_WS_SUBPROTOCOL);
    snprintf(path, sizeof path, "%s", path_in);
    if (creds->token && creds->token[0]) {
        if (token_fits_subprotocol(creds->token)) {
            snprintf(protocols, sizeof protocols, "%s, %s%s", TG_WS_SUBPROTOCOL, TG_WS_TOKEN_PREFIX, creds->token);
        } else {
            char enc[TG_WS_MAX_TOKEN * 3 + 1];
            url_encode(creds->token, enc, sizeof enc);
            snprintf(path, sizeof path, "%s%stoken=%s", path_in, strchr(path_in, '?') ? "&" : "?", enc);
            memset(enc, 0, sizeof enc);
            tg_warn(LOG, "sending the token in the URL of %s (--token-in-url): proxies and access logs may record it",
                    c->what);
        }
    }
    char hosthdr[300];
    const char *sni = creds->server_name && creds->server_name[0] ? creds->server_name : ep->host;
    snprintf(hosthdr, sizeof hosthdr, "%s", sni);

    struct lws_client_connect_info cc;
    memset(&cc, 0, sizeof cc);
    cc.context = c->ctx;
    cc.address = ep->host;
    cc.port = ep->port;
    cc.path = path;
    cc.host = hosthdr;
    cc.protocol = protocols;
    cc.local_protocol_name = TG_WS_SUBPROTOCOL;
    cc.alpn = "http/1.1";
    if (wss) {
        cc.ssl_connection = LCCSCF_USE_SSL;
        if (creds->insecure_skip_verify)
            cc.ssl_connection |= LCCSCF_ALLOW_SELFSIGNED | LCCSCF_SKIP_SERVER_CERT_HOSTNAME_CHECK |
                                 LCCSCF_ALLOW_EXPIRED | LCCSCF_ALLOW_INSECURE;
    }
    if (!lws_client_connect_via_info(&cc)) {
        /* the connection error callback may already have closed our end */
        snprintf(err, errlen, "cannot connect to %s", c->what);
        lws_context_destroy(c->ctx);
        if (c->sock >= 0)
            close(c->sock);
        close(sv[1]);
        free(c);
        return NULL;
    }
    memset(path, 0, sizeof path); /* may hold the token */
    memset(protocols, 0, sizeof protocols);

    struct tg_conn_opts o;
    tg_conn_opts_default(&o);
    o.no_fd_passing = 1;
    tg_conn *conn = tg_conn_new_fd(base, sv[1], &o, NULL, NULL);
    if (!conn) {
        snprintf(err, errlen, "out of memory");
        lws_context_destroy(c->ctx);
        if (c->sock >= 0)
            close(c->sock);
        free(c);
        return NULL;
    }
    if (pthread_create(&c->thread, NULL, client_thread, c) != 0) {
        snprintf(err, errlen, "cannot start the WebSocket thread");
        tg_conn_destroy(conn);
        lws_context_destroy(c->ctx);
        if (c->sock >= 0)
            close(c->sock);
        free(c);
        return NULL;
    }
    pthread_mutex_lock(&g_mu);
    c->next = g_clients;
    g_clients = c;
    pthread_mutex_unlock(&g_mu);
    return conn;
}
