/* relay_port.c: the RelayPort IPC service traced exposes on producer sockets
 * for traced_relay (§6.4): InitRelay caches the remote machine's SystemInfo,
 * SyncClock records {client clocks, host clocks at receipt} (last 5 per
 * relay). Both reply at once with an empty message. The cached data becomes
 * the remote system_info / remote_clock_sync packets of each session. */
#include "service/svc.h"

#include "clock_snapshot.pb-c.h"
#include "relay_port.pb-c.h"
#include "remote_clock_sync.pb-c.h"

#include "tracegate/pbwire.h"

#include <stdlib.h>
#include <string.h>

static void *relay_open(tg_ipc_peer *peer, void *svc_ctx)
{
    tg_service *svc = svc_ctx;
    struct tg_svc_relay *r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    r->peer = peer;
    tg_svc_peer_nodelay(peer);
    r->machine_id = tg_ipc_peer_machine_id(peer);
    r->next = svc->relays;
    svc->relays = r;
    return r;
}

static void relay_close(tg_ipc_peer *peer, void *state, void *svc_ctx)
{
    tg_service *svc = svc_ctx;
    struct tg_svc_relay *r = state;
    (void)peer;
    if (!r)
        return;
    for (struct tg_svc_relay **pp = &svc->relays; *pp; pp = &(*pp)->next) {
        if (*pp == r) {
            *pp = r->next;
            break;
        }
    }
    free(r->sysinfo);
    for (unsigned i = 0; i < r->n_synced; i++)
        free(r->synced[i]);
    free(r);
}

static void m_init_relay(tg_ipc_call *call, const ProtobufCMessage *msg, void *svc_ctx, void *peer_state)
{
    struct tg_svc_relay *r = peer_state;
    const Perfetto__Protos__InitRelayRequest *req = (const void *)msg;
    (void)svc_ctx;
    if (r && req->system_info) {
        size_t n = protobuf_c_message_get_packed_size(&req->system_info->base);
        uint8_t *b = malloc(n ? n : 1);
        if (b) {
            protobuf_c_message_pack(&req->system_info->base, b);
            free(r->sysinfo);
            r->sysinfo = b;
            r->sysinfo_len = n;
        }
        r->machine_id = tg_ipc_peer_machine_id(tg_ipc_call_peer(call));
    }
    tg_ipc_call_reply(call, NULL, 0, -1);
}

static void m_sync_clock(tg_ipc_call *call, const ProtobufCMessage *msg, void *svc_ctx, void *peer_state)
{
    struct tg_svc_relay *r = peer_state;
    const Perfetto__Protos__SyncClockRequest *req = (const void *)msg;
    (void)svc_ctx;
    uint8_t *host = NULL;
    size_t host_len = r ? tg_svc_encode_host_snapshot(&host) : 0;
    if (r && host) {
        /* client_clocks (2) = the request's clocks, host_clocks (3) = ours */
        size_t client_len = 0;
        for (size_t i = 0; i < req->n_clocks; i++) {
            size_t one = protobuf_c_message_get_packed_size(&req->clocks[i]->base);
            client_len += 1 + tg_pb_varint_size(one) + one;
        }
        size_t cap = 2 * 10 + client_len + host_len + 4;
        uint8_t *rec = malloc(cap);
        if (rec) {
            size_t o = 0;
            o += tg_pb_put_tag(rec + o, 2, TG_PB_LEN);
            o += tg_pb_put_varint(rec + o, client_len);
            for (size_t i = 0; i < req->n_clocks; i++) {
                size_t one = protobuf_c_message_get_packed_size(&req->clocks[i]->base);
                o += tg_pb_put_tag(rec + o, 1, TG_PB_LEN);
                o += tg_pb_put_varint(rec + o, one);
                o += protobuf_c_message_pack(&req->clocks[i]->base, rec + o);
            }
            o += tg_pb_put_tag(rec + o, 3, TG_PB_LEN);
            o += tg_pb_put_varint(rec + o, host_len);
            memcpy(rec + o, host, host_len);
            o += host_len;
            r->machine_id = tg_ipc_peer_machine_id(tg_ipc_call_peer(call));
            if (r->n_synced == TG_SVC_RELAY_SYNC_KEEP) {
                free(r->synced[0]);
                memmove(&r->synced[0], &r->synced[1], (TG_SVC_RELAY_SYNC_KEEP - 1) * sizeof r->synced[0]);
                memmove(&r->synced_len[0], &r->synced_len[1],
                        (TG_SVC_RELAY_SYNC_KEEP - 1) * sizeof r->synced_len[0]);
                r->n_synced--;
            }
            r->synced[r->n_synced] = rec;
            r->synced_len[r->n_synced] = o;
            r->n_synced++;
        }
    }
    free(host);
    tg_ipc_call_reply(call, NULL, 0, -1);
}

static const struct tg_ipc_method k_methods[] = {
    {"InitRelay", &perfetto__protos__init_relay_request__descriptor, m_init_relay},
    {"SyncClock", &perfetto__protos__sync_clock_request__descriptor, m_sync_clock},
};

const struct tg_ipc_service_def tg_svc_relay_port_def = {
    .name = "RelayPort",
    .methods = k_methods,
    .n_methods = sizeof k_methods / sizeof k_methods[0],
    .peer_open = relay_open,
    .peer_close = relay_close,
};
