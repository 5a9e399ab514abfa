/* ipc_host.h: the server side of Perfetto's IPC (what traced runs on each socket).
 *
 * A host exposes named services (service ids 1.. in registration order), each
 * with a method table (method ids 1.. in declaration order, as Perfetto numbers
 * them). It answers BindService, dispatches InvokeMethod to handlers with the
 * decoded request, supports deferred and streaming replies and drop_reply,
 * answers frames it does not understand with RequestError("unknown request"),
 * and applies SetPeerIdentity only where Perfetto does (non-UNIX, first one).
 *
 * Ownership: the host owns listeners, peers and calls. A handler receives a
 * borrowed tg_ipc_call that stays valid until the handler sends the final
 * reply (has_more == 0) or rejects it, or until the peer disconnects (the
 * service's peer_close hook runs first, so services drop their pointers
 * there). The decoded request is freed when the handler returns.
 *
 * Threading: everything runs on the thread of the host's event_base. */
#ifndef TRACEGATE_IPC_HOST_H
#define TRACEGATE_IPC_HOST_H

#include <protobuf-c/protobuf-c.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "tracegate/conn.h"

struct event_base;

typedef struct tg_ipc_host tg_ipc_host;
typedef struct tg_ipc_peer tg_ipc_peer;
typedef struct tg_ipc_call tg_ipc_call;

/* req is NULL only if the method has no request descriptor. */
typedef void (*tg_ipc_method_fn)(tg_ipc_call *call, const ProtobufCMessage *req, void *svc_ctx, void *peer_state);

struct tg_ipc_method {
    const char *name;
    const ProtobufCMessageDescriptor *request; /* used to decode args_proto */
    tg_ipc_method_fn fn;
};

struct tg_ipc_service_def {
    const char *name; /* e.g. "ConsumerPort" */
    const struct tg_ipc_method *methods;
    size_t n_methods;
    /* Optional: per-peer state, created when a peer binds this service, and
     * destroyed when the peer disconnects (before its calls are freed). */
    void *(*peer_open)(tg_ipc_peer *peer, void *svc_ctx);
    void (*peer_close)(tg_ipc_peer *peer, void *peer_state, void *svc_ctx);
    /* Optional: the peer's output went back under its low watermark after passing its high one
     * (it reads its replies again; the host resumed reading its requests). For producers of
     * long streams that wait for room. */
    void (*peer_drain)(tg_ipc_peer *peer, void *peer_state, void *svc_ctx);
};

struct tg_ipc_host_opts {
    struct tg_conn_opts conn; /* per-connection limits */
    size_t max_peers;         /* 0 = unlimited */
    int honor_peer_identity;  /* apply SetPeerIdentity on non-UNIX peers (Perfetto does) */
    /* Optional: called once when any peer goes away (after the services' peer_close hooks), bound
     * or not, e.g. to free what the adopter set with tg_ipc_peer_set_user. */
    void (*peer_gone)(tg_ipc_peer *peer, void *arg);
    void *peer_gone_arg;
};

tg_ipc_host *tg_ipc_host_new(struct event_base *base, const struct tg_ipc_host_opts *opts);
/* Frees peers (running peer_close hooks) and listeners. */
void tg_ipc_host_free(tg_ipc_host *h);

/* Registers a service; returns its service id (1-based) or 0. */
uint32_t tg_ipc_host_add_service(tg_ipc_host *h, const struct tg_ipc_service_def *def, void *svc_ctx);

/* Listens on a Perfetto-style address; mode applies to filesystem UNIX
 * sockets (0 = umask default). Returns 0 or -1 with a message in err. */
int tg_ipc_host_listen(tg_ipc_host *h, const char *addr, unsigned mode, char *err, size_t errlen);
/* Adopts a connected socket (e.g. one end of a socketpair). */
tg_ipc_peer *tg_ipc_host_adopt_fd(tg_ipc_host *h, int fd);
/* Adopts an existing connection (e.g. TLS). */
tg_ipc_peer *tg_ipc_host_adopt_conn(tg_ipc_host *h, tg_conn *c);
size_t tg_ipc_host_peer_count(const tg_ipc_host *h);

/* ---- replies ---- */
/* Sends one reply. resp == NULL sends an empty message. has_more != 0 keeps
 * the call open (streaming); otherwise the call is finished and freed. With
 * drop_reply set nothing is sent but the call is still finished. fd >= 0 is
 * sent with this reply (UNIX peers only). Returns 0, or -1 if the peer is
 * gone or the reply could not be queued. */
int tg_ipc_call_reply(tg_ipc_call *call, const ProtobufCMessage *resp, int has_more, int fd);
int tg_ipc_call_reply_bytes(tg_ipc_call *call, const uint8_t *resp, size_t len, int has_more, int fd);
/* tg_ipc_call_reply_bytes with the reply's bytes in an evbuffer: they are
 * moved to the peer's output behind an encoded header (no copy; resp may hold
 * them by reference, evbuffer_add_reference) and resp is left empty. No fd. */
int tg_ipc_call_reply_evbuffer(tg_ipc_call *call, struct evbuffer *resp, int has_more);
/* Finishes the call with success=false. */
void tg_ipc_call_reject(tg_ipc_call *call);
tg_ipc_peer *tg_ipc_call_peer(const tg_ipc_call *call);
uint64_t tg_ipc_call_request_id(const tg_ipc_call *call);
int tg_ipc_call_drop_reply(const tg_ipc_call *call);
/* The request's raw args_proto bytes; valid only while the method handler
 * runs (e.g. to keep a config byte for byte, unknown fields and order kept). */
const uint8_t *tg_ipc_call_args(const tg_ipc_call *call, size_t *len);

/* ---- peers ---- */
/* Who a peer is, for the service's per-principal rules (session visibility,
 * attach/detach keys, clone, quotas). By default a UNIX peer is
 * "uid:<SO_PEERCRED uid>", privileged when that uid is 0 (traced's rule); a
 * non-UNIX peer is "net:uid:<uid>" (uid 0 as Perfetto assumes, or what its
 * SetPeerIdentity said) and never privileged. An in-process adopter that
 * knows better (the gateway: a local uid it looked up, a token or a
 * certificate name) sets the identity right after adopting the fd, before
 * any frame; SetPeerIdentity frames are then ignored. */
/* Room for a principal, NUL included: the gateway's principals (at most 159 characters, long names
 * folded by tg_name_fit) are kept whole, so the service keeps apart every principal the gateway
 * keeps apart. A longer one is folded the same way (start, "~", digest), never cut. */
#define TG_IPC_PRINCIPAL_MAX 160
struct tg_ipc_identity {
    uid_t uid;               /* reported as trusted_uid / consumer_uid; (uid_t)-1 = none */
    pid_t pid;               /* -1 = unknown */
    const char *principal;   /* distinct name, e.g. "uid:1000", "token:ci"; NULL = "uid:<uid>" */
    int privileged;          /* sees and may clone every principal's sessions */
    uint32_t machine_id;     /* 0 = this machine */
    const char *machine_name; /* NULL = keep */
};
void tg_ipc_peer_set_identity(tg_ipc_peer *p, const struct tg_ipc_identity *id);
const char *tg_ipc_peer_principal(const tg_ipc_peer *p);
int tg_ipc_peer_privileged(const tg_ipc_peer *p);
int tg_ipc_peer_is_unix(const tg_ipc_peer *p);
uid_t tg_ipc_peer_uid(const tg_ipc_peer *p);
pid_t tg_ipc_peer_pid(const tg_ipc_peer *p);
/* 0 for local (UNIX) peers, else from SetPeerIdentity's hint (FNV-1a). */
uint32_t tg_ipc_peer_machine_id(const tg_ipc_peer *p);
const char *tg_ipc_peer_machine_name(const tg_ipc_peer *p);
const char *tg_ipc_peer_name(const tg_ipc_peer *p);
/* Takes the fd received with the frame being dispatched (or -1). */
int tg_ipc_peer_take_fd(tg_ipc_peer *p);
tg_conn *tg_ipc_peer_conn(tg_ipc_peer *p);
/* Output queued to this peer (bytes), for flow control by services. */
size_t tg_ipc_peer_output_len(const tg_ipc_peer *p);
/* Disconnects the peer (peer_close hooks run from the loop). */
void tg_ipc_peer_disconnect(tg_ipc_peer *p, const char *reason);
/* Opaque user slot. */
void tg_ipc_peer_set_user(tg_ipc_peer *p, void *user);
void *tg_ipc_peer_get_user(const tg_ipc_peer *p);

/* Perfetto's machine id for a SetPeerIdentity hint: low 32 bits of
 * FNV-1a-64, 0 mapped to 1. */
uint32_t tg_ipc_machine_id_from_hint(const char *hint, size_t len);

#endif
