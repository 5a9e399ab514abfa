/* producer.h: libtracegate's producer API: a C library for apps that write
 * trace data to a Perfetto-compatible tracing service (tracegate's own, or
 * Perfetto's traced), speaking the producer port exactly like the Perfetto
 * SDK's system backend does (perfetto-wire-facts §2, §5, §7a).
 *
 * What it does:
 * - connects to the producer socket (UNIX path, @abstract or host:port),
 *   binds ProducerPort, pipelines InitializeConnection (producer name, SMB
 *   hints, smb_scraping_mode ENABLED, sdk_version "tracegate x.y") and
 *   GetAsyncCommand, registers the app's data sources;
 * - maps the shared memory buffer (SMB) the service passes with SetupTracing,
 *   or, when the service says use_shmem_emulation (TCP), keeps a private
 *   1 MiB buffer laid out the same way and sends whole chunks inline in
 *   CommitData;
 * - calls the app back on setup/start/stop/flush/clear-incremental-state of
 *   each data source instance, sends NotifyDataSourceStarted/Stopped when the
 *   data source asked for it, acks flushes (CommitData.flush_request_id);
 * - gives the app trace writers (one writer = one packet sequence) that put
 *   serialized TracePackets into SMB chunks and commit them: batched into one
 *   CommitData per loop iteration in SMB mode (at once when half the SMB is
 *   pending), immediately in emulation mode, split so no request exceeds
 *   ~128 KiB - 512;
 * - optionally reconnects with exponential backoff when the service is not
 *   there or goes away.
 *
 * Threading:
 * - A tg_producer lives on one libevent event_base. tg_producer_new must be
 *   called on the thread that runs that base, and every tg_producer_*
 *   function except tg_producer_create_writer must be called on it too. All
 *   callbacks run on it.
 * - tg_trace_writer functions may be called from any thread. A writer is
 *   meant to be used by one thread at a time (like the SDK's TraceWriter);
 *   internally it is guarded by its own mutex so the loop thread can flush or
 *   retire it safely (on flush, stop and disconnect). Commit notifications from
 *   other threads reach the loop through a mutex-protected queue and an
 *   eventfd wakeup, so the app does NOT need evthread_use_pthreads().
 *
 * Ownership:
 * - The app owns the tg_producer (tg_producer_free) and each writer it
 *   creates (tg_trace_writer_destroy). Writers still alive at
 *   tg_producer_free are destroyed by it: their pointers become invalid, so
 *   stop writer threads first.
 * - Strings and arrays passed in are copied. Config structs handed to
 *   callbacks are valid only during the callback.
 *
 * Limits (documented, deliberate):
 * - Packets are written whole: the app serializes a TracePacket and hands the
 *   bytes over (no streaming protozero-style writer, hence no chunk patches).
 *   Packets larger than a chunk are fragmented across chunks.
 * - Buffer-exhausted policy (what a write does when the SMB has no free
 *   chunk), per data source, see tg_buffer_exhausted_policy: "drop" (the SDK
 *   default) discards the packet, and the writer's next packet carries
 *   previous_packet_dropped = DATA_LOSS_PRESENT|DATA_LOSS_SMB_FULL;
 *   "stall then drop" waits for the service to free a chunk (on the loop
 *   thread it sends the pending CommitData and writes it to the socket first,
 *   so a loop thread may write more than the SMB holds in one callback), up
 *   to stall_max_ms per chunk, then drops like "drop" and does not stall
 *   again until a packet got a chunk. Stalling never aborts the process.
 * - A writer is bound to one data source instance; when the instance stops or
 *   the connection drops, the writer becomes inactive (writes return
 *   TG_TRACE_WRITER_INACTIVE) and the app should destroy it.
 * - Producer-provided SMB, UpdateDataSource, Sync and async (deferred)
 *   start/stop are not implemented.
 * - In emulation mode, chunks committed from other threads are queued in
 *   memory until the loop thread sends them; the queue is capped (8 MiB) and
 *   chunks beyond that are dropped (the service sees the chunk-id gap as data
 *   loss).
 */
#ifndef TRACEGATE_PRODUCER_H
#define TRACEGATE_PRODUCER_H

#include <protobuf-c/protobuf-c.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct event_base;
struct tg_ipc_client;
struct tg_ipc_client_cbs;

typedef struct tg_producer tg_producer;
typedef struct tg_trace_writer tg_trace_writer;

/* ---- producer ---- */

struct tg_producer_opts {
    /* Producer socket address. NULL or "" = the first entry of
     * $PERFETTO_PRODUCER_SOCK_NAME, else Perfetto's default
     * (tg_service_default_sockets). */
    const char *socket;
    /* InitializeConnectionRequest.producer_name. NULL = argv[0] of this
     * process (what the SDK sends). */
    const char *name;
    /* SMB hints in KiB; 0 = let the service choose (256 KiB / 4 KiB). The page
     * size must be 4, 8, 16 or 32; the size a multiple of it. */
    uint32_t smb_size_hint_kb;
    uint32_t smb_page_size_hint_kb;
    /* Reconnect when the service is unreachable or goes away, with
     * exponential backoff from reconnect_min_ms (default 100) up to
     * reconnect_max_ms (default 5000). */
    bool reconnect;
    unsigned reconnect_min_ms;
    unsigned reconnect_max_ms;
    /* Connected = InitializeConnection accepted and every data source
     * registered so far acknowledged. Either may be NULL. */
    void (*on_connected)(tg_producer *p, void *arg);
    /* The connection failed or was lost (the producer reconnects on its own
     * if opts.reconnect). Running instances were stopped (on_stop called)
     * before this runs. */
    void (*on_disconnected)(tg_producer *p, const char *reason, void *arg);
    void *cb_arg;
    /* Optional transport: opens each (re)connection to `socket` instead of
     * tg_ipc_client_connect() (e.g. tls:// or ws:// through the gateway's
     * endpoint code). It must hand cbs/cbs_arg to the client it creates
     * (tg_ipc_client_new) and return it, or NULL with a message in err (a
     * failed attempt: retried if reconnect is set). With a connect hook the
     * address is not checked by tg_producer_new. Called on the loop thread. */
    struct tg_ipc_client *(*connect)(struct event_base *base, const char *socket,
                                     const struct tg_ipc_client_cbs *cbs, void *cbs_arg, void *connect_arg,
                                     char *err, size_t errlen);
    void *connect_arg;
};

/* Creates the producer and starts connecting (non-blocking). Returns NULL with
 * a message in err on a bad address or allocation failure; with reconnect
 * off, an unreachable service is reported through on_disconnected. */
tg_producer *tg_producer_new(struct event_base *base, const struct tg_producer_opts *opts, char *err,
                             size_t errlen);
/* Stops everything without callbacks, destroys remaining writers, closes the
 * connection, unmaps the SMB. Must not be called from a producer callback.
 * Queued commits are discarded (see tg_producer_commit_now). The socket is
 * released from the loop: run the event_base once more (e.g.
 * event_base_loop(base, EVLOOP_NONBLOCK)) before event_base_free. */
void tg_producer_free(tg_producer *p);

bool tg_producer_connected(const tg_producer *p);
/* True when the service asked for shmem emulation (non-UNIX socket). */
bool tg_producer_emulation(const tg_producer *p);
/* The address in use (after defaults were applied). */
const char *tg_producer_socket(const tg_producer *p);

/* ---- data sources ---- */

/* DataSourceConfig as the service sent it (decoded); valid during the callback. */
/* What a trace writer does when the SMB has no free chunk. The values are
 * DataSourceConfig.BufferExhaustedPolicy's. */
enum tg_buffer_exhausted_policy {
    TG_BUFFER_EXHAUSTED_DEFAULT = 0, /* drop */
    TG_BUFFER_EXHAUSTED_DROP = 1,
    /* The config value STALL_THEN_ABORT (2) is taken as STALL_THEN_DROP: a
     * library does not abort its host process because a config asked. */
    TG_BUFFER_EXHAUSTED_STALL_THEN_DROP = 3,
};

struct tg_data_source_config {
    const char *name;
    uint32_t target_buffer;
    uint32_t trace_duration_ms;
    uint32_t stop_timeout_ms;
    uint64_t tracing_session_id;
    /* DataSourceConfig.buffer_exhausted_policy as sent (0 = not set), and the
     * policy this instance's writers use (see tg_data_source_desc). */
    uint32_t buffer_exhausted_policy;
    enum tg_buffer_exhausted_policy effective_policy;
    /* TrackEventConfig, if present (else n = 0). */
    const char *const *enabled_categories;
    size_t n_enabled_categories;
    const char *const *disabled_categories;
    size_t n_disabled_categories;
    /* The whole serialized DataSourceConfig, and the decoded
     * Perfetto__Protos__DataSourceConfig for users of the generated code. */
    const uint8_t *raw;
    size_t raw_len;
    const ProtobufCMessage *msg;
};

/* Whether a TrackEvent category is enabled by cfg: an exact entry in
 * enabled/disabled_categories wins over a pattern ("*", "prefix*"); an
 * enabled entry wins over a disabled one of the same kind; with no
 * TrackEventConfig lists at all every category is enabled. */
bool tg_data_source_config_category_enabled(const struct tg_data_source_config *cfg, const char *category);

struct tg_data_source_cbs {
    /* At most 8 instances of one data source exist at a time (the SDK's limit);
     * the service's setups beyond that are refused without a callback. */
    void (*on_setup)(tg_producer *p, uint64_t instance_id, const struct tg_data_source_config *cfg, void *arg);
    /* Create writers here (or later from any thread). NotifyDataSourceStarted
     * is sent after this returns if will_notify_on_start. */
    void (*on_start)(tg_producer *p, uint64_t instance_id, const struct tg_data_source_config *cfg, void *arg);
    /* The app may still write final packets here. After it returns the
     * instance's writers are flushed and made inactive, the chunks committed,
     * then NotifyDataSourceStopped is sent if will_notify_on_stop, unless the
     * app called tg_producer_stop_later here (see there). Also called for
     * every running instance when the connection drops. */
    void (*on_stop)(tg_producer *p, uint64_t instance_id, void *arg);
    /* Before the instance's writers are flushed for a service Flush. flags is
     * the FlushFlags bitfield (§2.4). */
    void (*on_flush)(tg_producer *p, uint64_t instance_id, uint64_t flags, void *arg);
    /* Interned data / descriptors must be re-emitted: the writers of the
     * instance also report it through tg_trace_writer_take_incremental_reset. */
    void (*on_clear_incremental_state)(tg_producer *p, uint64_t instance_id, void *arg);
};

struct tg_track_event_category {
    const char *name;
    const char *description; /* may be NULL */
    const char *const *tags; /* may be NULL */
    size_t n_tags;
};

struct tg_data_source_desc {
    const char *name; /* e.g. "track_event" */
    /* TrackEventDescriptor.available_categories (optional). */
    const struct tg_track_event_category *categories;
    size_t n_categories;
    bool will_notify_on_start;
    bool will_notify_on_stop;
    bool handles_incremental_state_clear;
    bool no_flush; /* ask the service not to send Flush for this source */
    /* The writers' policy when the SMB is full (default: drop). With
     * buffer_exhausted_policy_configurable, a config that sets
     * DataSourceConfig.buffer_exhausted_policy chooses instead (the consumer
     * then decides whether this app's writers may block). stall_max_ms bounds
     * one stall (default 100 ms, at most 60000). */
    enum tg_buffer_exhausted_policy buffer_exhausted_policy;
    bool buffer_exhausted_policy_configurable;
    unsigned stall_max_ms;
    struct tg_data_source_cbs cbs;
    void *cb_arg;
};

/* Registers a data source (now if connected, else on every (re)connection).
 * Returns 0, or -1 on a bad/duplicate name or allocation failure. */
int tg_producer_register_data_source(tg_producer *p, const struct tg_data_source_desc *desc);
/* From on_stop of a service's StopDataSource: the data source finishes the stop
 * itself (it still writes, e.g. what it was in the middle of), then calls
 * tg_producer_stop_done(p, instance_id) on the producer's thread; only then
 * are its writers retired and NotifyDataSourceStopped sent (the service waits
 * up to the session's data_source_stop_timeout_ms). A dropped connection or
 * an unregistered data source ends the wait at once (stop_done is then a
 * no-op); writing to the instance's writers afterwards is dropped. */
void tg_producer_stop_later(tg_producer *p, uint64_t instance_id);
void tg_producer_stop_done(tg_producer *p, uint64_t instance_id);

/* Stops its running instances (on_stop) and sends UnregisterDataSource. */
int tg_producer_unregister_data_source(tg_producer *p, const char *name);

/* Sends every commit queued so far right now instead of at the end of the
 * loop iteration (e.g. before shutting down after destroying writers; the
 * loop must still run briefly so the bytes leave the socket). */
void tg_producer_commit_now(tg_producer *p);

/* Sends ActivateTriggers (drop_reply). Returns 0, or -1 when not connected. */
int tg_producer_activate_triggers(tg_producer *p, const char *const *names, size_t n);

/* ---- trace writers ---- */

enum tg_trace_writer_result {
    TG_TRACE_WRITER_OK = 0,
    TG_TRACE_WRITER_DROPPED = 1,   /* SMB full: the packet was discarded */
    TG_TRACE_WRITER_EINVAL = -1,   /* bad arguments */
    TG_TRACE_WRITER_INACTIVE = -2, /* instance stopped or connection lost */
};

/* Creates a writer for a running instance (any thread). It gets the next free
 * writer id (1..32767, per producer), is bound to the instance's
 * target_buffer, and is announced with RegisterTraceWriter (drop_reply).
 * Returns NULL if the instance is unknown/stopped or ids are exhausted. */
tg_trace_writer *tg_producer_create_writer(tg_producer *p, uint64_t instance_id);
/* Commits what is left, sends UnregisterTraceWriter (drop_reply), frees. */
void tg_trace_writer_destroy(tg_trace_writer *w);

/* Writes one serialized TracePacket (the producer must not set trusted
 * fields: 3, 10, 79, ...). Returns a tg_trace_writer_result. With "stall then
 * drop" it may block (up to stall_max_ms per chunk) while the SMB is full; a
 * stall ends early when the instance stops or the connection drops. */
int tg_trace_writer_write(tg_trace_writer *w, const void *packet, size_t len);
/* Same, packing a protobuf-c message (normally a Perfetto__Protos__TracePacket). */
int tg_trace_writer_write_msg(tg_trace_writer *w, const ProtobufCMessage *packet);
/* Commits the current chunk now (it is otherwise committed when full, on a
 * service flush, or at stop). */
int tg_trace_writer_flush(tg_trace_writer *w);

/* True once for a new writer and again after each ClearIncrementalState for
 * its instance: the next packet should set SEQ_INCREMENTAL_STATE_CLEARED and
 * re-emit descriptors / interned data. */
bool tg_trace_writer_take_incremental_reset(tg_trace_writer *w);
bool tg_trace_writer_active(const tg_trace_writer *w);
/* True while a write of w waits for the service to free a chunk (stall then
 * drop); readable from any thread without waiting for that write. */
bool tg_trace_writer_stalling(const tg_trace_writer *w);
uint16_t tg_trace_writer_id(const tg_trace_writer *w);
uint32_t tg_trace_writer_target_buffer(const tg_trace_writer *w);
uint64_t tg_trace_writer_instance_id(const tg_trace_writer *w);

struct tg_trace_writer_stats {
    uint64_t packets_written;
    uint64_t packets_dropped;
    uint64_t chunks_committed;
    uint64_t bytes_written;
    /* stall then drop: chunk acquisitions that waited, their total wait, and
     * how many waits gave up (each dropped a packet) */
    uint64_t stalls;
    uint64_t stall_us;
    uint64_t stalls_given_up;
};
void tg_trace_writer_get_stats(tg_trace_writer *w, struct tg_trace_writer_stats *st);

#endif
