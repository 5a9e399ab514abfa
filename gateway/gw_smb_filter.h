/* gw_smb_filter.h: the "smb-bridge" gateway filter. It runs the
 * remote-producer SMB bridge (gw_smb_bridge.h) on producer-port sessions
 * whose client cannot receive file descriptors (TCP, TLS, WS, WSS), so such
 * producers can use a service that hands out a real SMB over a UNIX socket
 * (the embedded service, or a traced reached through a UNIX path).
 *
 * Per session:
 *  - service -> client: the InitializeConnection reply is rewritten to offer
 *    shmem emulation, the SMB fd of SetupTracing is kept (and mapped) by the
 *    gateway. If the session's upstream is not a UNIX socket, the service
 *    sees a remote peer and emulates by itself: the filter then stays out of
 *    the way for the rest of the session.
 *  - client -> service: CommitData with inline chunks is copied into the SMB
 *    and rewritten to name those chunks. When the SMB has no room, the
 *    client's reading is held and the same frame is offered again on a short
 *    timer (1 ms doubling to 20 ms); later frames wait behind it, so the
 *    service sees the producer's frames in order. A frame that cannot go
 *    through for TG_GW_SMBF_MAX_WAIT_MS closes the session. If the client
 *    disconnects while frames wait, the session stays (detached) until they
 *    are delivered, then closes.
 *  - counters: tracegated_smb_bridge_{chunks,bytes,commits,retries}_total
 *    (gw_metrics.h); each session logs its totals when it ends.
 *
 * Threading: the gateway's event loop thread (like every filter). */
#ifndef TRACEGATE_GATEWAY_GW_SMB_FILTER_H
#define TRACEGATE_GATEWAY_GW_SMB_FILTER_H

#include "gw_bridge.h"

#define TG_GW_SMBF_NAME "smb-bridge"
/* How long one frame may wait for room in the SMB before the session is closed
 * (Perfetto's SDK gives up stalling after about as long). */
#define TG_GW_SMBF_MAX_WAIT_MS 30000u

/* Whether a client of this kind needs the bridge: producer port, and a
 * transport that cannot carry file descriptors. */
int tg_gw_smb_filter_wants(const struct tg_gw_client_info *info);

/* Registers the filter with the gateway (call once at start-up, before
 * clients connect). Returns 0 or -1. */
int tg_gw_smb_filter_register(struct tg_gw *gw);

#endif
