/* endpoint.h: endpoint URLs understood by tracectl and tracegated, and
 * connecting an IPC client to one.
 *
 * Forms: "unix:PATH", "PATH" (anything with a '/'), "@name" (abstract UNIX),
 * "tcp://host:port" or "host:port", "tls://host:port", "ws://host:port/path",
 * "wss://host:port/path".
 *
 * Threading: call from the thread that runs the given event_base. */
#ifndef TRACEGATE_ENDPOINT_H
#define TRACEGATE_ENDPOINT_H

#include <stddef.h>

#include "tracegate/ipc_client.h"

enum tg_endpoint_kind { TG_EP_UNIX, TG_EP_TCP, TG_EP_TLS, TG_EP_WS, TG_EP_WSS };

struct tg_endpoint {
    enum tg_endpoint_kind kind;
    char address[512]; /* Perfetto-style address for UNIX/TCP/TLS ("host:port", path, "@name") */
    char host[256];
    int port;
    char path[256]; /* WS path, default "/traced" */
};

/* TLS/WS client credentials. All optional. Secrets are never logged.
 * ws:// and wss:// send the token as a WebSocket subprotocol, which holds
 * at most 96 characters of [A-Za-z0-9._~+-] (tokens from `tracegated
 * --gen-token` fit). A token that does not fit is an error, unless
 * token_in_url asks to send it as ?token= in the request line instead
 * (where proxies and access logs may record it). */
struct tg_endpoint_creds {
    const char *cacert;
    const char *cert;
    const char *key;
    const char *token;
    const char *server_name; /* SNI / verification name override */
    int insecure_skip_verify;
    int token_in_url; /* ws/wss: a token that does not fit the subprotocol goes in the URL */
};

int tg_endpoint_parse(const char *url, struct tg_endpoint *ep, char *err, size_t errlen);

/* Connects (non-blocking) and returns an IPC client; connection failures
 * arrive later as on_disconnect. NULL with a message in err on bad input. */
tg_ipc_client *tg_endpoint_connect(struct event_base *base, const struct tg_endpoint *ep,
                                   const struct tg_endpoint_creds *creds, const struct tg_ipc_client_cbs *cbs,
                                   void *arg, char *err, size_t errlen);

const char *tg_endpoint_kind_name(enum tg_endpoint_kind k);

#endif
