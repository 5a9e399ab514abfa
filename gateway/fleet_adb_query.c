/* fleet_adb_query.c: TracegateFleet.AdbDevices (`tracectl nodes --adb`): asks node NAME's ADB
 * server for host:devices, through the same path as /adb/NAME (tg_fleet_adb_connect: this node's
 * server, or a link's ADB channel, which the far node serves only to links with the adb role),
 * without blocking the loop. The answer goes to the session that asked if it is still there. */
#include "fleet_adb_query.h"

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gw_bridge.h"
#include "gw_core.h"
#include "tracegate/log.h"
#include "tracegate_gateway.pb-c.h"

#define LOG "fleet"
#define ADB_ANSWER_MAX (64 * 1024)

struct adb_query {
    struct tg_gw *gw;
    uint64_t session_id, request_id;
    struct bufferevent *bev;
    char node[64];
};

static struct tg_gw_session *session_by_id(struct tg_gw *gw, uint64_t id)
{
    for (struct tg_gw_session *s = gw->sessions; s; s = tg_gw_session_next(s))
        if (tg_gw_session_id(s) == id)
            return s;
    return NULL;
}

static void answer(struct tg_gw_session *s, uint64_t rid, const char *devices, const char *error)
{
    Tracegate__AdbDevicesResponse r = TRACEGATE__ADB_DEVICES_RESPONSE__INIT;
    r.devices = (char *)devices;
    r.error = (char *)error;
    tg_gw_session_reply_msg(s, rid, &r.base);
}

static void finish(struct adb_query *q, const char *devices, const char *error)
{
    struct tg_gw_session *s = session_by_id(q->gw, q->session_id);
    if (s)
        answer(s, q->request_id, devices, error);
    bufferevent_free(q->bev);
    free(q);
}

/* ADB's host protocol: "OKAY" or "FAIL", then a 4-hex-digit length and that many bytes. */
static void read_cb(struct bufferevent *bev, void *arg)
{
    struct adb_query *q = arg;
    struct evbuffer *in = bufferevent_get_input(bev);
    size_t have = evbuffer_get_length(in);
    if (have < 8)
        return;
    char hdr[9] = {0};
    evbuffer_copyout(in, hdr, 8);
    unsigned len = 0;
    if ((memcmp(hdr, "OKAY", 4) != 0 && memcmp(hdr, "FAIL", 4) != 0) || sscanf(hdr + 4, "%4x", &len) != 1) {
        finish(q, NULL, "not an ADB server answer");
        return;
    }
    if (have < 8 + (size_t)len)
        return;
    char *body = malloc((size_t)len + 1);
    if (!body) {
        finish(q, NULL, "out of memory");
        return;
    }
    evbuffer_drain(in, 8);
    evbuffer_remove(in, body, len);
    body[len] = 0;
    if (!memcmp(hdr, "OKAY", 4))
        finish(q, body, NULL);
    else
        finish(q, NULL, body[0] ? body : "the ADB server refused host:devices");
    free(body);
}

static void event_cb(struct bufferevent *bev, short what, void *arg)
{
    (void)bev;
    struct adb_query *q = arg;
    if (what & BEV_EVENT_CONNECTED)
        return;
    finish(q, NULL,
           what & BEV_EVENT_TIMEOUT ? "no answer from the ADB server"
           : what & BEV_EVENT_EOF   ? "the ADB stream closed (no ADB server there, or not allowed)"
                                    : "the ADB server is not reachable");
}

static void m_adb_devices(struct tg_gw_session *s, uint64_t rid, const uint8_t *args, size_t len, int drop_reply,
                          void *ctx)
{
    (void)drop_reply;
    struct tg_fleet *f = ctx;
    Tracegate__AdbDevicesRequest *rq = tracegate__adb_devices_request__unpack(NULL, len, args);
    char node[64];
    snprintf(node, sizeof node, "%s", rq && rq->node ? rq->node : "");
    if (rq)
        tracegate__adb_devices_request__free_unpacked(rq, NULL);
    char err[200] = "";
    int fd = tg_fleet_adb_connect(f, node, tg_gw_session_info(s), err, sizeof err);
    if (fd < 0) {
        answer(s, rid, NULL, err[0] ? err : "no ADB server");
        return;
    }
    struct adb_query *q = calloc(1, sizeof *q);
    struct tg_gw *gw = tg_gw_session_gw(s);
    if (q)
        q->bev = bufferevent_socket_new(gw->base, fd, BEV_OPT_CLOSE_ON_FREE);
    if (!q || !q->bev) {
        if (!q || !q->bev)
            evutil_closesocket(fd);
        free(q);
        answer(s, rid, NULL, "out of memory");
        return;
    }
    q->gw = gw;
    q->session_id = tg_gw_session_id(s);
    q->request_id = rid;
    snprintf(q->node, sizeof q->node, "%s", node);
    struct timeval tv = {10, 0};
    bufferevent_set_timeouts(q->bev, &tv, &tv);
    bufferevent_setwatermark(q->bev, EV_READ, 0, ADB_ANSWER_MAX + 8);
    bufferevent_setcb(q->bev, read_cb, NULL, event_cb, q);
    bufferevent_enable(q->bev, EV_READ | EV_WRITE);
    static const char req[] = "000chost:devices";
    bufferevent_write(q->bev, req, sizeof req - 1);
    tg_info(LOG, "session %llu: host:devices on node %s's ADB server for %s", (unsigned long long)q->session_id,
            node[0] ? node : "(this)", tg_gw_session_info(s)->principal);
}

const struct tg_gw_local_method tg_fleet_adb_method = {"AdbDevices", m_adb_devices};
