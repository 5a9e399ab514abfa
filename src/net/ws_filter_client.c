/* ws_filter_client.c: the client side of the WebSocket filter: its key, the upgrade request and the
 * check of the server's 101 answer (see ws_filter.h). */
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "net/ws_filter_int.h"
#include "tracegate/log.h"

#define MAX_HEAD 16384u /* the server's upgrade answer, headers included */
#define WS_GUID "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

/* ------------------------------------------------------------ keys */

int tg_ws_client_key(char key[TG_WS_KEY_LEN + 1])
{
    unsigned char raw[16];
    if (RAND_bytes(raw, sizeof raw) != 1)
        return -1;
    EVP_EncodeBlock((unsigned char *)key, raw, sizeof raw);
    return 0;
}

void tg_ws_accept_for(const char *key, char accept[TG_WS_ACCEPT_LEN + 1])
{
    char in[TG_WS_KEY_LEN + sizeof WS_GUID];
    int n = snprintf(in, sizeof in, "%s%s", key, WS_GUID);
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int mdlen = 0;
    if (n < 0 || (size_t)n >= sizeof in || EVP_Digest(in, (size_t)n, md, &mdlen, EVP_sha1(), NULL) != 1 || mdlen != 20) {
        accept[0] = '\0'; /* matches no answer */
        return;
    }
    EVP_EncodeBlock((unsigned char *)accept, md, 20);
}

/* ------------------------------------------------------------ the handshake */

static void trim(char **s, char **e)
{
    while (*s < *e && (**s == ' ' || **s == '\t'))
        (*s)++;
    while (*e > *s && ((*e)[-1] == ' ' || (*e)[-1] == '\t'))
        (*e)--;
}

/* Does a comma-separated header value list `token` (case-insensitive)? */
static int has_token(const char *v, const char *token)
{
    size_t tl = strlen(token);
    for (const char *p = v; *p;) {
        const char *c = strchr(p, ',');
        const char *e = c ? c : p + strlen(p);
        char *s = (char *)p, *t = (char *)e;
        trim(&s, &t);
        if ((size_t)(t - s) == tl && !strncasecmp(s, token, tl))
            return 1;
        p = c ? c + 1 : e;
    }
    return 0;
}

/* The server's answer to the upgrade: 1 when it checked out (removed from src), 0 while it is
 * incomplete, -1 on failure (logged). */
int tg_wsf_handshake(struct wsf *f, struct evbuffer *src)
{
    struct evbuffer_ptr end = evbuffer_search(src, "\r\n\r\n", 4, NULL);
    if (end.pos < 0) {
        if (evbuffer_get_length(src) > MAX_HEAD)
            return tg_wsf_fail(f, "the server's answer to the upgrade is too long");
        return 0;
    }
    size_t n = (size_t)end.pos + 4;
    if (n > MAX_HEAD)
        return tg_wsf_fail(f, "the server's answer to the upgrade is too long");
    char *head = malloc(n + 1);
    if (!head || evbuffer_remove(src, head, n) != (int)n) {
        free(head);
        return tg_wsf_fail(f, "out of memory");
    }
    head[n] = '\0';
    int rc = -1;
    if (memchr(head, '\0', n)) { /* the lines below are C strings */
        tg_wsf_fail(f, "the server's answer to the upgrade holds a NUL byte");
        goto out;
    }
    char *line_end = strstr(head, "\r\n");
    int status = 0;
    char reason[80] = "";
    *line_end = '\0';
    if (sscanf(head, "HTTP/1.%*1[01] %3d %79[^\r\n]", &status, reason) < 1) {
        tg_wsf_fail(f, "the server did not answer with HTTP");
        goto out;
    }
    if (status != 101) {
        char why[128];
        snprintf(why, sizeof why, "HTTP %d%s%s", status, reason[0] ? " " : "", reason);
        tg_wsf_fail(f, why);
        goto out;
    }
    int upgrade = 0, connection = 0, accept_ok = 0, proto_ok = 0, extensions = 0;
    for (char *p = line_end + 2; *p && !(p[0] == '\r' && p[1] == '\n');) {
        char *eol = strstr(p, "\r\n");
        if (!eol)
            break;
        *eol = '\0';
        char *colon = strchr(p, ':');
        if (colon) {
            char *ns = p, *ne = colon, *vs = colon + 1, *ve = eol;
            trim(&ns, &ne);
            trim(&vs, &ve);
            *ne = '\0';
            *ve = '\0';
            if (!strcasecmp(ns, "Upgrade"))
                upgrade = !strcasecmp(vs, "websocket");
            else if (!strcasecmp(ns, "Connection"))
                connection = has_token(vs, "upgrade");
            else if (!strcasecmp(ns, "Sec-WebSocket-Accept"))
                accept_ok = f->accept[0] && !strcmp(vs, f->accept);
            else if (!strcasecmp(ns, "Sec-WebSocket-Protocol"))
                proto_ok = !strcmp(vs, f->proto);
            else if (!strcasecmp(ns, "Sec-WebSocket-Extensions"))
                extensions = 1;
        }
        p = eol + 2;
    }
    if (!upgrade || !connection)
        tg_wsf_fail(f, "the server did not upgrade the connection to a WebSocket");
    else if (!accept_ok)
        tg_wsf_fail(f, "the server's Sec-WebSocket-Accept does not answer our key");
    else if (!proto_ok)
        tg_wsf_fail(f, "the server did not select the tracegate subprotocol");
    else if (extensions)
        tg_wsf_fail(f, "the server chose a WebSocket extension we did not offer");
    else
        rc = 1;
out:
    free(head);
    return rc;
}

struct bufferevent *tg_ws_client_filter_new(struct bufferevent *under, const struct tg_ws_client_filter_cfg *cfg)
{
    struct wsf *f = calloc(1, sizeof *f);
    if (!f)
        return NULL;
    f->state = S_HANDSHAKE;
    f->max_message = cfg->max_message;
    f->out_message = cfg->out_message ? cfg->out_message : 65536;
    tg_ws_accept_for(cfg->key, f->accept);
    snprintf(f->proto, sizeof f->proto, "%s", cfg->subprotocol);
    snprintf(f->what, sizeof f->what, "%s", cfg->what);
    f->ctl_out = evbuffer_new();
    f->kick = event_new(bufferevent_get_base(under), -1, 0, tg_wsf_kick_cb, f);
    if (!f->ctl_out || !f->kick || evbuffer_add(bufferevent_get_output(under), cfg->request, cfg->request_len) != 0) {
        tg_wsf_free(f);
        return NULL;
    }
    f->bev = bufferevent_filter_new(under, tg_wsf_in, tg_wsf_out, BEV_OPT_CLOSE_ON_FREE | BEV_OPT_DEFER_CALLBACKS,
                                    tg_wsf_free, f);
    if (!f->bev) {
        evbuffer_drain(bufferevent_get_output(under), evbuffer_get_length(bufferevent_get_output(under)));
        tg_wsf_free(f);
        return NULL;
    }
    return f->bev;
}
