/* endpoint_transport.c: open an endpoint's transport (UNIX, TCP, TLS, WebSocket) as a tg_conn. */
#include "net/endpoint_transport.h"
#include "net/tls.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "tracegate/addr.h"
#include "net/ws_client.h"

/* tls://host:port: a blocking connect (a CLI can wait), then the handshake runs on the loop. */
static tg_conn *tg_endpoint_open_tls(struct event_base *base, const struct tg_endpoint *ep,
                                     const struct tg_endpoint_creds *creds, char *err, size_t errlen)
{
    struct tg_addr a;
    if (tg_addr_parse(ep->address, &a, err, errlen) != 0)
        return NULL;
    int fd = tg_addr_connect_wait(&a, 10000);
    if (fd < 0) {
        snprintf(err, errlen, "cannot connect to %s: %s", a.text, strerror(errno));
        return NULL;
    }
    struct tg_tls_client_config tc = {
        .ca_file = creds ? creds->cacert : NULL,
        .cert_file = creds ? creds->cert : NULL,
        .key_file = creds ? creds->key : NULL,
        .server_name = creds && creds->server_name ? creds->server_name : ep->host,
        .insecure = creds ? creds->insecure_skip_verify : 0,
    };
    return tg_tls_client_conn(base, fd, &tc, NULL, err, errlen);
}

tg_conn *tg_endpoint_open_conn(struct event_base *base, const struct tg_endpoint *ep,
                               const struct tg_endpoint_creds *creds, char *err, size_t errlen)
{
    if (ep->kind == TG_EP_TLS)
        return tg_endpoint_open_tls(base, ep, creds, err, errlen);
    if (ep->kind == TG_EP_WS || ep->kind == TG_EP_WSS)
        return tg_ws_client_open(base, ep, creds, err, errlen);
    if (ep->kind != TG_EP_UNIX && ep->kind != TG_EP_TCP) {
        snprintf(err, errlen, "%s:// endpoints are not available in this build", tg_endpoint_kind_name(ep->kind));
        return NULL;
    }
    struct tg_addr a;
    if (tg_addr_parse(ep->address, &a, err, errlen) != 0)
        return NULL;
    int fd = tg_addr_connect(&a);
    if (fd < 0) {
        snprintf(err, errlen, "cannot connect to %s: %s", a.text, strerror(errno));
        return NULL;
    }
    tg_conn *c = tg_conn_new_fd(base, fd, NULL, NULL, NULL);
    if (!c)
        snprintf(err, errlen, "out of memory");
    return c;
}
