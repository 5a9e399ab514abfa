/* ws_client.c: ws:// and wss:// client transport: a socket (or TLS) bufferevent under a WebSocket
 * client filter (ws_filter.h), under a tg_conn; everything on the caller's loop (see
 * ws_client.h). */
#include "net/ws_client.h"

#include <event2/bufferevent.h>
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "net/bulk_read.h"
#include "net/tls.h"
#include "net/ws_filter.h"
#include "net/ws_wire.h"
#include "tracegate/log.h"

#define LOG "ws-client"
/* what a client accepts per server message (tracegated sends at most TG_WS_LINK_MSG_MAX) */
#define CLIENT_MAX_MESSAGE (64u << 20)

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
    const char *v6 = strchr(ep->host, ':') ? "[" : "", *v6e = *v6 ? "]" : "";
    const char *path_in = ep->path[0] ? ep->path : "/traced";
    char what[640];
    snprintf(what, sizeof what, "%s://%s%s%s:%d%s", wss ? "wss" : "ws", v6, ep->host, v6e, ep->port, path_in);

    /* token: the subprotocol; the query only when explicitly asked for */
    char path[2048], protocols[160];
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
                    what);
        }
    }
    const char *name = creds->server_name && creds->server_name[0] ? creds->server_name : ep->host;
    const char *nv6 = strchr(name, ':') ? "[" : "", *nv6e = *nv6 ? "]" : "";
    char key[TG_WS_KEY_LEN + 1];
    if (tg_ws_client_key(key) != 0) {
        snprintf(err, errlen, "no random bytes for the WebSocket key");
        return NULL;
    }
    char request[2600];
    int rl = snprintf(request, sizeof request,
                      "GET %s HTTP/1.1\r\nHost: %s%s%s:%d\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                      "Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: %s\r\n\r\n",
                      path, nv6, name, nv6e, ep->port, key, protocols);
    memset(path, 0, sizeof path); /* may hold the token */
    memset(protocols, 0, sizeof protocols);
    if (rl < 0 || (size_t)rl >= sizeof request) {
        memset(request, 0, sizeof request);
        snprintf(err, errlen, "the WebSocket request for %s is too long", what);
        return NULL;
    }

    /* the stream under the WebSocket: TCP, or TLS over it (its socket bufferevent connects) */
    struct bufferevent *under;
    if (wss) {
        struct tg_tls_client_config tc = {
            .ca_file = creds->cacert,
            .cert_file = creds->cert,
            .key_file = creds->key,
            .server_name = name,
            .insecure = creds->insecure_skip_verify,
        };
        under = tg_tls_client_bev(base, -1, &tc, err, errlen);
    } else {
        under = bufferevent_socket_new(base, -1, BEV_OPT_CLOSE_ON_FREE | BEV_OPT_DEFER_CALLBACKS);
        if (under)
            tg_bev_bulk_read(under);
        else
            snprintf(err, errlen, "out of memory");
    }
    struct tg_ws_client_filter_cfg fc = {
        .request = request,
        .request_len = (size_t)rl,
        .key = key,
        .subprotocol = TG_WS_SUBPROTOCOL,
        .what = what,
        .max_message = CLIENT_MAX_MESSAGE,
        .out_message = TG_WS_CLIENT_MSG_MAX, /* what any tracegated accepts per message */
    };
    struct bufferevent *ws = under ? tg_ws_client_filter_new(under, &fc) : NULL;
    memset(request, 0, sizeof request);
    if (!ws) {
        if (under) {
            bufferevent_free(under);
            snprintf(err, errlen, "out of memory");
        }
        return NULL;
    }
    /* name resolution blocks (a CLI can wait); the connect itself does not: a refusal reaches the
     * tg_conn as an error */
    struct bufferevent *sock = bufferevent_get_underlying(under);
    if (bufferevent_socket_connect_hostname(sock ? sock : under, NULL, AF_UNSPEC, ep->host, ep->port) != 0) {
        snprintf(err, errlen, "cannot connect to %s", what);
        bufferevent_free(ws);
        return NULL;
    }
    struct tg_conn_opts o;
    tg_conn_opts_default(&o);
    o.no_fd_passing = 1;
    tg_conn *conn = tg_conn_new_bev(base, ws, &o, NULL, NULL);
    if (!conn)
        snprintf(err, errlen, "out of memory");
    return conn;
}
