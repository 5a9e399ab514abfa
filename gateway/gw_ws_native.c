/* gw_ws_native.c: moving an upgraded plain ws:// /traced or /producer WebSocket's socket from
 * libwebsockets' thread to the gateway's libevent loop, where the server side of the WebSocket
 * runs as a filter (net/ws_filter.h; docs/gateway.md "Native WebSockets"). */
#include <fcntl.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include "gw_ws_handoff.h"
#include "gw_ws_int.h"
#include "net/ws_link.h"
#include "tracegate/log.h"

/* Debian 12's libwebsockets (4.1.6) has no call that lets go of a connection's socket and no way
 * to run on another event loop. What it does have: it names each connection's socket by its
 * descriptor number and nothing else (the default poll(2) loop; no epoll registration keyed to the
 * open file), and once it has written the whole 101 answer (lws_partial_buffered) and parsed what
 * it read with the request (the first writeable callback after ESTABLISHED), it holds nothing of
 * the connection's but the descriptor. So the socket is duplicated for the gateway and the
 * number lws knows is pointed (dup3, atomically) at a stand-in: one end of a socketpair whose
 * other end is closed. lws then closes "its" connection on the stand-in (its close frame fails
 * with EPIPE, its shutdown and close hit only the stand-in), while the client's TCP connection
 * lives on in the gateway. Everything before this (accept-time limits, deadlines, Host, Origin,
 * token and route checks) was lws' and the front end's, unchanged. */

/* Takes the socket (see above). 0 when taken; -1 when nothing changed. */
static int take_socket(struct tg_gw_ws *ws, struct lws *wsi, const struct tg_gw_client_info *info)
{
    int fd = lws_get_socket_fd(wsi);
    if (fd < 0)
        return -1;
    int own = fcntl(fd, F_DUPFD_CLOEXEC, 3);
    if (own < 0)
        return -1;
    int sp[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sp) != 0) {
        close(own);
        return -1;
    }
    close(sp[1]); /* the stand-in: reads see the end, writes fail */
    if (dup3(sp[0], fd, O_CLOEXEC) < 0) {
        close(sp[0]);
        close(own);
        return -1;
    }
    close(sp[0]);
    /* from here the socket is the gateway's, whatever happens to the post (it closes `own` on
     * failure, and the client sees its connection end) */
    tg_ws_handoff_post_native(ws->handoff, own, info);
    return 0;
}

int tg_gw_ws_native_enabled(const struct tg_gw_ws *ws) { return !ws->cfg.lws_data_path && !ws->cfg.tls; }

int tg_gw_ws_native_begin(struct tg_gw_ws *ws, struct lws *wsi, struct tg_ws_pss *pss,
                          const struct tg_gw_client_info *info)
{
    if (!tg_gw_ws_native_enabled(ws) || !pss || lws_is_ssl(wsi) || lws_get_network_wsi(wsi) != wsi)
        return 0;
    pss->native_info = malloc(sizeof *pss->native_info);
    if (!pss->native_info)
        return 0;
    *pss->native_info = *info;
    /* Not now: lws goes on to parse what it read after the request in this same service call. A
     * client that did not wait for the 101 (RFC 6455 4.1 says it must) has its frames parsed by
     * lws then, and they arrive here as RECEIVE before the writeable callback. */
    lws_callback_on_writable(wsi);
    return 1;
}

int tg_gw_ws_native_writeable(struct tg_gw_ws *ws, struct lws *wsi, struct tg_ws_pss *pss)
{
    struct tg_gw_client_info *info = pss->native_info;
    pss->native_info = NULL;
    int r;
    if (!lws_partial_buffered(wsi) && take_socket(ws, wsi, info) == 0)
        r = -1; /* lws closes its side, which is the stand-in now */
    else
        r = tg_gw_ws_attach_seam(ws, wsi, info);
    free(info);
    return r;
}

int tg_gw_ws_native_receive(struct tg_gw_ws *ws, struct lws *wsi, struct tg_ws_pss *pss, const void *in, size_t len)
{
    struct tg_gw_client_info *info = pss->native_info;
    pss->native_info = NULL;
    tg_info(TG_WS_LOG, "%s sent WebSocket data before the upgrade's answer: it stays on the lws thread", info->peer);
    int r = tg_gw_ws_attach_seam(ws, wsi, info);
    free(info);
    if (r != 0)
        return -1;
    struct tg_ws_link *l = tg_ws_link_of(wsi);
    return l ? tg_ws_link_on_rx(l, in, len) : -1;
}

void tg_gw_ws_native_forget(struct tg_ws_pss *pss)
{
    free(pss->native_info);
    pss->native_info = NULL;
}
