/* ipc_client.h: the client side of Perfetto's IPC.
 *
 * Binds services by name, looks method ids up by name from the
 * BindServiceReply (never hard-coded), invokes methods with callbacks
 * (streaming replies arrive as several callbacks with has_more set), sends
 * drop_reply when no callback is given, and passes/receives one fd per frame
 * on UNIX sockets.
 *
 * Ownership: the client owns its connection and pending requests. When the
 * connection closes, every pending callback is called once with success=0,
 * has_more=0, then on_disconnect runs. The tg_ipc_client object stays
 * allocated until tg_ipc_client_free (which is safe from callbacks: it is
 * deferred) so callers may keep their pointer.
 *
 * Threading: everything runs on the thread of the client's event_base. */
#ifndef TRACEGATE_IPC_CLIENT_H
#define TRACEGATE_IPC_CLIENT_H

#include <protobuf-c/protobuf-c.h>
#include <stddef.h>
#include <stdint.h>

#include "tracegate/conn.h"

struct event_base;

typedef struct tg_ipc_client tg_ipc_client;
typedef struct tg_ipc_service_proxy tg_ipc_service_proxy;

struct tg_ipc_client_cbs {
    void (*on_disconnect)(tg_ipc_client *cli, const char *reason, void *arg);
};

/* Reply callback: reply/len is the reply_proto (valid during the call). */
typedef void (*tg_ipc_reply_cb)(tg_ipc_client *cli, int success, int has_more, const uint8_t *reply, size_t len,
                                void *arg);
/* Bind callback: proxy is NULL if the service is unknown or the connection
 * failed. The proxy belongs to the client. */
typedef void (*tg_ipc_bind_cb)(tg_ipc_client *cli, tg_ipc_service_proxy *proxy, void *arg);

/* Connects to a Perfetto-style address (non-blocking; failures arrive as
 * on_disconnect). Returns NULL with a message in err if the address is bad. */
tg_ipc_client *tg_ipc_client_connect(struct event_base *base, const char *addr, const struct tg_conn_opts *opts,
                                     const struct tg_ipc_client_cbs *cbs, void *arg, char *err, size_t errlen);
/* Wraps an existing connection (socketpair end, TLS bufferevent, ...). */
tg_ipc_client *tg_ipc_client_new(struct event_base *base, tg_conn *conn, const struct tg_ipc_client_cbs *cbs,
                                 void *arg);
void tg_ipc_client_free(tg_ipc_client *cli);

int tg_ipc_client_bind(tg_ipc_client *cli, const char *service_name, tg_ipc_bind_cb cb, void *arg);

/* Returns the method id, or 0 if the service did not list it. */
uint32_t tg_ipc_proxy_method_id(const tg_ipc_service_proxy *proxy, const char *method);
uint32_t tg_ipc_proxy_service_id(const tg_ipc_service_proxy *proxy);

/* Invokes a method by name. req may be NULL (empty request). cb NULL sets
 * drop_reply. fd >= 0 rides on this frame. Returns the request id, or 0 if
 * the method is unknown (nothing sent) or the connection is closed. */
uint64_t tg_ipc_client_invoke(tg_ipc_client *cli, tg_ipc_service_proxy *proxy, const char *method,
                              const ProtobufCMessage *req, int fd, tg_ipc_reply_cb cb, void *arg);
uint64_t tg_ipc_client_invoke_bytes(tg_ipc_client *cli, tg_ipc_service_proxy *proxy, const char *method,
                                    const uint8_t *args, size_t args_len, int fd, tg_ipc_reply_cb cb, void *arg);
/* Forgets a pending request: its callback will not be called again. */
void tg_ipc_client_cancel(tg_ipc_client *cli, uint64_t request_id);

/* Sends IPCFrame.set_peer_identity (request id 0), as traced_relay does. */
int tg_ipc_client_set_peer_identity(tg_ipc_client *cli, int32_t pid, int32_t uid, const char *machine_id_hint,
                                    const char *machine_name);

/* Session survival (a tracegate gateway's TracegateSession.Resume): with
 * keep != 0, a closed connection keeps the pending requests and the bound
 * services instead of failing them (on_disconnect still runs; the kept
 * callbacks are only dropped by tg_ipc_client_cancel or _free). */
void tg_ipc_client_keep_pending(tg_ipc_client *cli, int keep);
/* Continues on a new connection (ownership taken; closed on error) after the
 * previous one closed: proxies stay valid, request ids keep counting, and
 * replies to kept requests that arrive on `conn` reach their callbacks.
 * Returns 0, or -1 if the client is still connected or being freed. */
int tg_ipc_client_reattach(tg_ipc_client *cli, tg_conn *conn);
/* Frames received on the current connection (or on the last one, once it
 * closed), counted as they are dispatched. */
uint64_t tg_ipc_client_frames_received(const tg_ipc_client *cli);

/* The fd received with the reply being delivered (or -1); caller owns it. */
int tg_ipc_client_take_fd(tg_ipc_client *cli);
int tg_ipc_client_connected(const tg_ipc_client *cli);
tg_conn *tg_ipc_client_conn(tg_ipc_client *cli);
size_t tg_ipc_client_pending(const tg_ipc_client *cli);

#endif
