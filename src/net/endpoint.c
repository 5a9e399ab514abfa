/* endpoint.c: parse tracegate endpoint URLs and open IPC clients on them (see endpoint.h). */
#include "tracegate/endpoint.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "net/endpoint_transport.h"

const char *tg_endpoint_kind_name(enum tg_endpoint_kind k)
{
    static const char *const names[] = {"unix", "tcp", "tls", "ws", "wss"};
    return names[k];
}

/* "host:port[/path]" → host, port, path. IPv6 as "[::1]:port". */
static int split_hostport(const char *s, struct tg_endpoint *ep, int default_port, char *err, size_t errlen)
{
    const char *slash = strchr(s, '/');
    if (s[0] == '[') {
        const char *rb = strchr(s, ']');
        if (!rb) {
            snprintf(err, errlen, "bad IPv6 address in '%s'", s);
            return -1;
        }
        slash = strchr(rb, '/');
    }
    size_t hp_len = slash ? (size_t)(slash - s) : strlen(s);
    char hp[300];
    if (hp_len == 0 || hp_len >= sizeof hp) {
        snprintf(err, errlen, "missing or too long host in '%s'", s);
        return -1;
    }
    memcpy(hp, s, hp_len);
    hp[hp_len] = '\0';
    snprintf(ep->path, sizeof ep->path, "%s", slash ? slash : "/traced");
    char *colon = strrchr(hp, ':');
    if (hp[0] == '[') {
        char *rb = strchr(hp, ']');
        colon = (rb && rb[1] == ':') ? rb + 1 : NULL;
    }
    if (colon) {
        *colon = '\0';
        char *end;
        long p = strtol(colon + 1, &end, 10);
        if (*end || p <= 0 || p > 65535) {
            snprintf(err, errlen, "bad port in '%s'", s);
            return -1;
        }
        ep->port = (int)p;
    } else if (default_port) {
        ep->port = default_port;
    } else {
        snprintf(err, errlen, "missing port in '%s'", s);
        return -1;
    }
    char *h = hp;
    size_t hl = strlen(h);
    if (h[0] == '[' && hl > 1 && h[hl - 1] == ']') {
        h[hl - 1] = '\0';
        h++;
    }
    snprintf(ep->host, sizeof ep->host, "%.255s", h);
    if (strchr(ep->host, ':'))
        snprintf(ep->address, sizeof ep->address, "[%s]:%d", ep->host, ep->port);
    else
        snprintf(ep->address, sizeof ep->address, "%s:%d", ep->host, ep->port);
    return 0;
}

int tg_endpoint_parse(const char *url, struct tg_endpoint *ep, char *err, size_t errlen)
{
    memset(ep, 0, sizeof *ep);
    if (!url || !*url) {
        snprintf(err, errlen, "empty endpoint");
        return -1;
    }
    if (strncmp(url, "unix:", 5) == 0) {
        ep->kind = TG_EP_UNIX;
        snprintf(ep->address, sizeof ep->address, "%s", url + 5);
        return ep->address[0] ? 0 : (snprintf(err, errlen, "empty UNIX path"), -1);
    }
    if (url[0] == '@' || url[0] == '/' || url[0] == '.') {
        ep->kind = TG_EP_UNIX;
        snprintf(ep->address, sizeof ep->address, "%s", url);
        return 0;
    }
    if (strncmp(url, "tcp://", 6) == 0) {
        ep->kind = TG_EP_TCP;
        return split_hostport(url + 6, ep, 0, err, errlen);
    }
    if (strncmp(url, "tls://", 6) == 0) {
        ep->kind = TG_EP_TLS;
        return split_hostport(url + 6, ep, 0, err, errlen);
    }
    if (strncmp(url, "ws://", 5) == 0) {
        ep->kind = TG_EP_WS;
        return split_hostport(url + 5, ep, 8037, err, errlen);
    }
    if (strncmp(url, "wss://", 6) == 0) {
        ep->kind = TG_EP_WSS;
        return split_hostport(url + 6, ep, 443, err, errlen);
    }
    if (strstr(url, "://")) {
        snprintf(err, errlen, "unknown endpoint scheme in '%s' (use unix:, tcp://, tls://, ws://, wss://)", url);
        return -1;
    }
    /* bare "host:port" is TCP; anything else is a UNIX path */
    const char *colon = strrchr(url, ':');
    if (colon && colon[1] && strspn(colon + 1, "0123456789") == strlen(colon + 1) && !strchr(url, '/')) {
        ep->kind = TG_EP_TCP;
        return split_hostport(url, ep, 0, err, errlen);
    }
    ep->kind = TG_EP_UNIX;
    snprintf(ep->address, sizeof ep->address, "%s", url);
    return 0;
}

tg_ipc_client *tg_endpoint_connect(struct event_base *base, const struct tg_endpoint *ep,
                                   const struct tg_endpoint_creds *creds, const struct tg_ipc_client_cbs *cbs,
                                   void *arg, char *err, size_t errlen)
{
    tg_conn *c = tg_endpoint_open_conn(base, ep, creds, err, errlen);
    if (!c)
        return NULL;
    return tg_ipc_client_new(base, c, cbs, arg);
}
