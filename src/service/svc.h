/* svc.h: the tracing service's internal data model (producers, data sources,
 * sessions, buffers, consumers) and the functions the service's files use to
 * talk to each other. Not installed; only the service sources and tests include it.
 *
 * Ownership: a tg_service owns every object below. Producers and consumers
 * live as long as their IPC peer (created in peer_open, destroyed in
 * peer_close). Sessions are owned by the service and point at their consumer
 * (NULL when detached or read-only clones whose consumer left). Buffers are
 * owned by their session and registered in svc->buf_index by global id.
 *
 * Threading: everything runs on the service's event_base thread. */
#ifndef TRACEGATE_SERVICE_SVC_H
#define TRACEGATE_SERVICE_SVC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "tracegate/ipc_host.h"
#include "tracegate/service.h"

#include "service/idmap.h"
#include "service/smb_host.h"
#include "service/trace_buffer.h"

#include "commit_data_request.pb-c.h"
#include "consumer_port.pb-c.h"
#include "data_source_descriptor.pb-c.h"
#include "producer_port.pb-c.h"
#include "system_info.pb-c.h"
#include "trace_config.pb-c.h"

struct event;
struct event_base;

#define TG_SVC_LOG "service"
#define TG_SVC_VERSION "tracegate 0.1.0"

/* traced's limits (perfetto-wire-facts §0). */
#define TG_SVC_MAX_SESSIONS 15
#define TG_SVC_MAX_SESSIONS_PER_UID 5
#define TG_SVC_MAX_BUFFERS_PER_SESSION 128
/* Read-only clones one principal may hold at once (ours: each is a full copy of its source's
 * buffers and takes buffer ids, and one connection each was all it cost). */
#define TG_SVC_MAX_CLONES_PER_UID 5
/* ... and all principals together: 64 clones of 128 buffers and 15 sessions of 128 take 10,112 of
 * the 65,535 buffer ids, so clones from many principals can never leave EnableTracing without
 * buffer ids (one principal cannot fill this alone either: 5 each). */
#define TG_SVC_MAX_CLONES 64
#define TG_SVC_MAX_DURATION_MS (7ull * 24 * 3600 * 1000)
#define TG_SVC_MAX_DURATION_GUARDRAILS_MS (24ull * 3600 * 1000)
#define TG_SVC_MAX_PRODUCERS 65535
#define TG_SVC_DEFAULT_FLUSH_TIMEOUT_MS 5000u
#define TG_SVC_DEFAULT_STOP_TIMEOUT_MS 5000u
#define TG_SVC_DEFAULT_SNAPSHOT_MS 10000u
#define TG_SVC_DEFAULT_WRITE_PERIOD_MS 5000u
#define TG_SVC_MIN_WRITE_PERIOD_MS 100u
/* Floors on a config's periods (ours; traced has none but the write period's): every tick of
 * these queues a clock snapshot, a flush (commands to every producer of the session, two events)
 * or a ClearIncrementalState command to every producer with a running instance, other users'
 * included; at 1 ms that was a thousand of each a second. Real configs use 500 ms and up. Smaller
 * values are raised to these, as file_write_period_ms is. */
#define TG_SVC_MIN_SNAPSHOT_MS 100u
#define TG_SVC_MIN_FLUSH_PERIOD_MS 100u
#define TG_SVC_MIN_CLEAR_PERIOD_MS 100u
/* Unread clock snapshots a session keeps: the first one and the latest after it, like traced's
 * initial snapshot plus its ring of 16 (periodic snapshots were kept until a read, without end). */
#define TG_SVC_MAX_UNREAD_SNAPSHOTS 16u
/* Unread lifecycle events of one kind a session keeps, the latest (traced: 64 of flush_started and
 * of all_data_sources_flushed, the only kinds that repeat, one of the others). */
#define TG_SVC_MAX_UNREAD_EVENTS_PER_KIND 64u
#define TG_SVC_READ_BATCH_BYTES 32768u
/* A reply_proto this size keeps the whole frame under 128 KiB - 64. */
#define TG_SVC_MAX_READ_REPLY (131072u - 128u)
#define TG_SVC_MAX_STATE_REPLY (131072u - 256u)
#define TG_SVC_NUM_BUFFER_IDS 65536u
#define TG_SVC_RELAY_SYNC_KEEP 5
/* Unread trigger packets a session keeps (bytes): one ActivateTriggers frame
 * can name a trigger thousands of times, and each packet repeats the
 * producer's name, so without a budget one 128 KiB frame became gigabytes. */
#define TG_SVC_MAX_TRIGGER_BYTES (1024u * 1024u)
/* Data sources one producer may have registered at once (ours: each registration walks what the
 * producer has and every session's instances, so an endless stream of them was quadratic work
 * on the service loop and memory without bound; real producers register tens). */
#define TG_SVC_MAX_DATA_SOURCES_PER_PRODUCER 4096u
/* Data source instances: one per (config entry, matching registration), so a config naming a
 * name thousands of times and a producer registering it thousands of times multiplied into
 * millions of instances (gigabytes, and the service loop stuck for seconds per registration).
 * A config may name at most TG_SVC_MAX_CONFIG_DATA_SOURCES data sources; a session sets up at
 * most TG_SVC_MAX_INSTANCES_PER_PRODUCER instances on one producer and
 * TG_SVC_MAX_INSTANCES_PER_SESSION in all (real ones: tens per producer). */
#define TG_SVC_MAX_CONFIG_DATA_SOURCES 1024u
#define TG_SVC_MAX_INSTANCES_PER_PRODUCER 256u
#define TG_SVC_MAX_INSTANCES_PER_SESSION 16384u
/* One data source descriptor, encoded (ours): half an IPC frame, so any descriptor fits one
 * QueryServiceState reply with room to spare; the SDK's own are hundreds of bytes, a track_event
 * descriptor listing hundreds of categories with descriptions tens of KiB. Without it each could
 * be a whole frame (~128 KiB). */
#define TG_SVC_MAX_DESCRIPTOR_BYTES (64u * 1024u)
/* What one producer's registered descriptors may hold in the service's memory, decoded (every
 * allocation of their copies counted; a descriptor of tiny fields decodes to many times its
 * size). 4096 whole-frame descriptors were ~500 MiB per producer connection. */
#define TG_SVC_MAX_DESCRIPTOR_MEMORY_PER_PRODUCER (4u << 20)
/* Flushes one session may have waiting for its producers, whoever asked (a consumer's Flush, the
 * flush period, a CloneSession; ours: with timeouts up to 49 days and a producer that never acks,
 * each piled up a record and a command to every producer of the session). The session's final
 * flush, one at most, is not counted: it is what ends the session. */
#define TG_SVC_MAX_PENDING_FLUSHES 64u
/* Commands the service queues for a producer that has not opened GetAsyncCommand (an SDK opens it
 * right after InitializeConnection): past this the producer is disconnected, as one that never
 * reads its commands (every flush period, flush request and session added one, without bound). */
#define TG_SVC_MAX_QUEUED_CMDS 256u
/* Longest producer name regex a config may use (tg_svc_regex_full_match). */
#define TG_SVC_MAX_REGEX 1024u

/* FlushFlags (§2.4). */
#define TG_FLUSH_REASON_PERIODIC 1u
#define TG_FLUSH_REASON_TRACE_STOP 2u
#define TG_FLUSH_REASON_TRACE_CLONE 3u
#define TG_FLUSH_REASON_EXPLICIT 4u
#define TG_FLUSH_INITIATOR_TRACED (1u << 4)

/* TracingServiceEvent field numbers. */
enum tg_svc_event {
    TG_EV_ALL_DATA_SOURCES_STARTED = 1,
    TG_EV_TRACING_STARTED = 2,
    TG_EV_ALL_DATA_SOURCES_FLUSHED = 3,
    TG_EV_READ_TRACING_BUFFERS_COMPLETED = 4,
    TG_EV_TRACING_DISABLED = 5,
    TG_EV_FLUSH_STARTED = 9,
};

typedef struct tg_svc_producer tg_svc_producer;
typedef struct tg_svc_consumer tg_svc_consumer;
typedef struct tg_svc_session tg_svc_session;
typedef struct tg_svc_ds_inst tg_svc_ds_inst;
typedef struct tg_svc_buffer tg_svc_buffer;
typedef struct tg_svc_flush tg_svc_flush;

/* ------------------------------------------------------------ producers */

/* A data source a producer registered. */
struct tg_svc_ds_reg {
    struct tg_svc_ds_reg *next;
    Perfetto__Protos__DataSourceDescriptor *desc; /* owned (unpacked copy) */
    const char *name;                             /* desc->name, never NULL */
    size_t bytes;                                 /* memory it holds, counted in the producer's desc_bytes */
};

/* A GetAsyncCommand reply waiting for the stream to be opened. */
struct tg_svc_cmd {
    struct tg_svc_cmd *next;
    uint8_t *data;
    size_t len;
    int with_smb_fd;
};

struct tg_svc_producer {
    tg_service *svc;
    tg_svc_producer *next, *prev; /* svc->producers (doubly linked: O(1) unlink on close) */
    tg_ipc_peer *peer;
    uint16_t id;
    bool initialized;
    char *name;
    char *sdk_version;
    int32_t uid, pid;
    uint32_t machine_id;
    char *machine_name;
    bool emulation;   /* non-UNIX transport: chunks arrive inline */
    bool scraping;    /* SMB_SCRAPING_ENABLED */
    uint32_t page_hint, size_hint;
    struct tg_smb_host smb; /* service-side view of the producer's SMB */
    bool smb_from_producer;
    bool setup_tracing_sent;
    tg_ipc_call *async;     /* open GetAsyncCommand stream */
    struct tg_svc_cmd *cmds, **cmds_tail;
    size_t n_cmds;          /* queued in cmds (TG_SVC_MAX_QUEUED_CMDS) */
    bool cmds_refused;      /* one was refused past it: the producer is being disconnected */
    struct tg_svc_ds_reg *sources;
    size_t n_sources;     /* registered now (TG_SVC_MAX_DATA_SOURCES_PER_PRODUCER) */
    bool ds_limit_logged; /* a registration past it was refused and logged */
    size_t desc_bytes;    /* held by its descriptors (TG_SVC_MAX_DESCRIPTOR_MEMORY_PER_PRODUCER) */
    bool desc_limit_logged; /* a descriptor past the size limits was refused and logged */
    uint16_t *writer_buf; /* [32768] writer id -> registered buffer id (0 = none); lazily allocated */
    uint16_t *allowed;    /* buffer ids given to this producer in configs */
    size_t n_allowed, cap_allowed;
    uint8_t *scratch;     /* private chunk copies (page size) */
    size_t scratch_cap;
};

/* ------------------------------------------------------------ sessions */

enum tg_ds_state { TG_DS_CONFIGURED, TG_DS_STARTING, TG_DS_STARTED, TG_DS_STOPPING, TG_DS_STOPPED };

struct tg_svc_ds_inst {
    tg_svc_ds_inst *next;
    tg_svc_session *s;
    tg_svc_producer *p; /* NULL once the producer is gone */
    uint16_t producer_id;
    char *producer_name;
    uint64_t id;
    char *name;
    uint8_t *cfg; /* rewritten DataSourceConfig bytes */
    size_t cfg_len;
    bool notify_start, notify_stop, handles_clear, no_flush;
    enum tg_ds_state state;
    uint16_t buffer_id;
};

struct tg_svc_buffer {
    uint16_t id; /* global BufferID */
    tg_svc_session *s;
    struct tg_trace_buffer *tb;
    uint64_t bytes; /* its size, counted in tg_service.buffer_bytes */
};

enum tg_sess_state { TG_SESS_CONFIGURED, TG_SESS_STARTED, TG_SESS_DISABLING, TG_SESS_DISABLED };

/* An encoded service packet waiting to be read out. */
struct tg_svc_pkt {
    struct tg_svc_pkt *next;
    int tag; /* what it is, where a list is bounded per kind (lifecycle events: the event); else 0 */
    size_t len;
    uint8_t data[];
};

struct tg_svc_pkt_list {
    struct tg_svc_pkt *head, **tail;
};

typedef void (*tg_svc_flush_done_fn)(tg_svc_session *s, tg_svc_flush *f, bool ok);

struct tg_svc_flush_pending {
    uint16_t producer_id;
    uint64_t request_id;
};

struct tg_svc_flush {
    tg_svc_flush *next;
    tg_svc_session *s;
    struct tg_svc_flush_pending *pending;
    size_t n_pending;
    struct event *timeout;
    tg_svc_flush_done_fn done;
    void *arg;
    tg_ipc_call *call; /* consumer call to answer (Flush, CloneSession) or NULL */
    bool finished;
};

struct tg_svc_session {
    tg_service *svc;
    tg_svc_session *next;
    uint64_t id;
    tg_svc_consumer *consumer; /* NULL when detached */
    int32_t uid;
    char principal[TG_IPC_PRINCIPAL_MAX]; /* the creating consumer's: decides visibility, attach, clone, quota */
    char *detach_key;
    enum tg_sess_state state;
    bool read_only;          /* a clone: nothing is traced into it */
    bool stop_pending;       /* flush-then-disable in progress */
    bool waiting_start_trigger;
    bool disable_notified;   /* tracing_disabled reported to the consumer */
    char *error;             /* reported in the EnableTracing reply */
    Perfetto__Protos__TraceConfig *cfg; /* owned */
    uint8_t *cfg_bytes;
    size_t cfg_len;
    tg_svc_buffer **buffers;
    size_t n_buffers;
    tg_svc_ds_inst *instances;
    tg_svc_ds_inst **instances_tail; /* &next of the last (or &instances): appends in O(1) */
    size_t n_instances;
    bool instance_cap_logged; /* the instance limits were hit (logged once) */
    int64_t uuid_msb, uuid_lsb;
    int64_t start_realtime_ns;
    uint32_t flush_timeout_ms, stop_timeout_ms, snapshot_ms;
    uint32_t flush_period_ms, clear_period_ms; /* 0 = none; else at least the floors above */
    /* timers */
    struct event *ev_duration, *ev_snapshot, *ev_flush_period, *ev_clear_inc, *ev_write, *ev_trigger_timeout,
        *ev_stop_timeout, *ev_stop_delay, *ev_task;
    /* service packets */
    struct tg_svc_pkt_list clock_snapshots;
    struct tg_svc_pkt_list events;
    struct tg_svc_pkt_list triggers;
    size_t trigger_bytes;      /* bytes queued in triggers (TG_SVC_MAX_TRIGGER_BYTES) */
    uint64_t triggers_dropped; /* matched triggers not recorded: budget spent */
    bool trigger_drop_logged;  /* a drop was logged since the last read */
    unsigned sync_markers_pending;
    bool config_emitted, uuid_emitted, sysinfo_emitted, remote_emitted, stats_pending, read_completed_emitted;
    bool all_started_notified;
    /* sequences: (producer_id << 16 | writer_id) -> trusted_packet_sequence_id */
    struct tg_idmap seq_ids;
    uint32_t next_seq_id;
    /* flushes */
    tg_svc_flush *flushes;
    uint64_t flushes_requested, flushes_succeeded, flushes_failed;
    uint64_t periodic_flushes_skipped; /* TG_SVC_MAX_PENDING_FLUSHES were waiting (logged once) */
    int final_flush_outcome; /* 0 unset, 1 ok, 2 failed */
    /* write_into_file */
    int file_fd;
    bool write_into_file;
    uint64_t bytes_written, max_file_size;
    uint32_t write_period_ms;
    /* pending deferred work for ev_task */
    bool task_disable_done;
};

/* ------------------------------------------------------------ consumers */

struct tg_svc_read;
struct tg_svc_state_queries;

struct tg_svc_consumer {
    tg_service *svc;
    tg_svc_consumer *next;
    tg_ipc_peer *peer;
    int32_t uid;
    char principal[TG_IPC_PRINCIPAL_MAX]; /* tg_ipc_peer_principal at bind time */
    bool privileged;     /* sees and may clone every principal's sessions */
    tg_svc_session *session;
    tg_ipc_call *enable_call;  /* deferred EnableTracing reply */
    tg_ipc_call *observe_call; /* ObserveEvents stream */
    uint32_t observe_mask;
    struct tg_svc_read *read;  /* ReadBuffers in progress */
    struct tg_svc_state_queries *queries; /* QueryServiceState calls being answered (service_state.c) */
};

/* ------------------------------------------------------------ relays */

struct tg_svc_relay {
    struct tg_svc_relay *next;
    tg_ipc_peer *peer;
    uint32_t machine_id;
    uint8_t *sysinfo; /* packed SystemInfo from InitRelay */
    size_t sysinfo_len;
    /* last records: packed RemoteClockSync.SyncedClocks */
    uint8_t *synced[TG_SVC_RELAY_SYNC_KEEP];
    size_t synced_len[TG_SVC_RELAY_SYNC_KEEP];
    unsigned n_synced;
};

/* ------------------------------------------------------------ service */

struct tg_service {
    struct event_base *base;
    uint64_t buffer_budget; /* the most all live trace buffers may add up to (buffer_budget.c) */
    uint64_t buffer_bytes;  /* what they add up to now */
    tg_ipc_host *producer_host;
    tg_ipc_host *consumer_host;
    char machine_name[256];
    int32_t uid; /* our own uid: trusted_uid of service packets */
    tg_svc_producer *producers;
    tg_svc_producer **producer_index; /* [TG_SVC_MAX_PRODUCERS + 1]: initialized producers by id */
    tg_svc_consumer *consumers;
    tg_svc_session *sessions;
    struct tg_svc_relay *relays;
    tg_svc_buffer **buf_index; /* [TG_SVC_NUM_BUFFER_IDS] */
    uint16_t last_buffer_id;
    uint16_t last_producer_id;
    uint64_t last_session_id;
    uint64_t last_instance_id;
    uint64_t last_flush_id;
    /* stats */
    uint64_t producers_seen, data_sources_seen;
    uint64_t chunks_discarded, patches_discarded, invalid_packets;
};

/* ---- service.c ---- */
tg_svc_producer *tg_svc_producer_by_id(tg_service *svc, uint16_t id);
tg_svc_buffer *tg_svc_buffer_get(tg_service *svc, uint32_t id);
int64_t tg_svc_now_ns(int clock_id);
void tg_svc_timer_set(struct event *ev, uint32_t ms);
/* TCP_NODELAY on non-UNIX peers: IPC is request/response, Nagle only adds latency. */
void tg_svc_peer_nodelay(tg_ipc_peer *peer);

/* ---- producer_port.c ---- */
extern const struct tg_ipc_service_def tg_svc_producer_port_def;
/* Queues (or sends, when the stream is open) one GetAsyncCommandResponse. */
void tg_svc_producer_send_cmd(tg_svc_producer *p, const Perfetto__Protos__GetAsyncCommandResponse *cmd);
/* SetupDataSource (start == 0) or StartDataSource with rewritten config bytes. */
void tg_svc_producer_send_ds_cmd(tg_svc_producer *p, int start, uint64_t instance_id, const uint8_t *cfg,
                                 size_t cfg_len);
/* Sends SetupTracing (creating the SMB) if not done yet; the config is used
 * for the per-producer shm_size_kb/page_size_kb. Returns 0 or -1. */
int tg_svc_producer_setup_tracing(tg_svc_producer *p, const Perfetto__Protos__TraceConfig *cfg);
void tg_svc_producer_allow_buffer(tg_svc_producer *p, uint16_t buffer_id);
void tg_svc_producer_disallow_buffer(tg_svc_producer *p, uint16_t buffer_id);
bool tg_svc_producer_buffer_allowed(const tg_svc_producer *p, uint32_t buffer_id);

/* ---- commit.c ---- */
/* Handles one CommitDataRequest for producer p (moves, then patches, then the
 * flush ack). Never trusts the SMB or the request. */
void tg_svc_commit_data(tg_svc_producer *p, const Perfetto__Protos__CommitDataRequest *req);
/* Copies BeingWritten/Complete chunks of registered writers out of p's SMB
 * without changing their state (§5.8). Only for real shared memory. */
void tg_svc_scrape_producer(tg_svc_producer *p, tg_svc_session *only);

/* ---- consumer_port.c ---- */
extern const struct tg_ipc_service_def tg_svc_consumer_port_def;
/* The session owned by c ended: answers the deferred EnableTracing. */
void tg_svc_consumer_notify_disabled(tg_svc_consumer *c, const char *error);
/* ObserveEvents notifications. */
void tg_svc_consumer_notify_instance(tg_svc_consumer *c, const tg_svc_ds_inst *ds, int started);
void tg_svc_consumer_notify_all_started(tg_svc_consumer *c);
/* A read in progress on session s must stop (s is being freed). */
void tg_svc_consumer_cancel_read(tg_svc_consumer *c);

/* ---- relay_port.c ---- */
extern const struct tg_ipc_service_def tg_svc_relay_port_def;

/* ---- session.c ---- */
/* Validates cfg and creates a session for consumer c. raw/raw_len are the
 * consumer's serialized config (kept byte for byte) or NULL. On error returns
 * NULL with a message in err. fd is the write_into_file output fd (taken
 * over) or -1. */
tg_svc_session *tg_svc_session_create(tg_service *svc, tg_svc_consumer *c, const Perfetto__Protos__TraceConfig *cfg,
                                      const uint8_t *raw, size_t raw_len, int fd, char *err, size_t errlen);
void tg_svc_session_start(tg_svc_session *s);
/* Stops data sources and disables the session (async). */
void tg_svc_session_disable(tg_svc_session *s, const char *error);
/* Flush then disable (duration expiry, stop triggers, max file size). */
void tg_svc_session_flush_and_disable(tg_svc_session *s);
/* Frees s (stopping data sources still running); s must not be used after. */
void tg_svc_session_free(tg_svc_session *s);
/* Starts a flush of every data source of s (0 timeout = the session's).
 * done (may be NULL) runs once, on all acks or on timeout, possibly before
 * this returns; call/arg are kept in the tg_svc_flush for it. Returns 0, or -1
 * without starting anything (done does not run) when TG_SVC_MAX_PENDING_FLUSHES
 * flushes of s are waiting. */
int tg_svc_session_flush(tg_svc_session *s, uint32_t timeout_ms, uint64_t flags, tg_svc_flush_done_fn done,
                         tg_ipc_call *call, void *arg);
/* The same for the flush that ends a session (once per session): never refused. */
void tg_svc_session_flush_final(tg_svc_session *s, uint32_t timeout_ms, uint64_t flags, tg_svc_flush_done_fn done);
/* Flushes of s waiting for their producers. */
size_t tg_svc_session_pending_flushes(const tg_svc_session *s);
/* ---- flush.c ---- */
/* CommitData flush ack from producer p for every request <= id. */
void tg_svc_flush_ack(tg_service *svc, tg_svc_producer *p, uint64_t id);
/* p disconnected: its pending flush requests count as acknowledged. */
void tg_svc_flush_producer_gone(tg_service *svc, tg_svc_producer *p);
void tg_svc_flush_free(tg_svc_flush *f);
/* Scrapes the SMBs of scraping-enabled producers into s's buffers. */
void tg_svc_session_scrape(tg_svc_session *s);

/* ---- session.c ---- */
/* Producer events. */
void tg_svc_session_on_producer_source(tg_service *svc, tg_svc_producer *p, struct tg_svc_ds_reg *reg);
void tg_svc_session_on_producer_gone(tg_service *svc, tg_svc_producer *p);
void tg_svc_session_on_ds_started(tg_service *svc, tg_svc_producer *p, uint64_t instance_id);
void tg_svc_session_on_ds_stopped(tg_service *svc, tg_svc_producer *p, uint64_t instance_id);
void tg_svc_session_on_unregister_source(tg_service *svc, tg_svc_producer *p, const char *name);
/* ---- triggers.c ---- */
/* Triggers from a producer (or a consumer's activate_triggers). */
void tg_svc_activate_triggers(tg_service *svc, char **names, size_t n, const char *producer_name, int32_t uid);
/* Applies ChangeTraceConfig (producer_name_filter updates). */
void tg_svc_session_change_config(tg_svc_session *s, const Perfetto__Protos__TraceConfig *cfg);
/* Records a lifecycle event packet (unless disabled by config). */
void tg_svc_session_event(tg_svc_session *s, enum tg_svc_event ev);
/* Sequence id for (producer, writer) in s, allocating from 2 upward. */
uint32_t tg_svc_session_seq_id(tg_svc_session *s, uint32_t producer_id, uint16_t writer_id);
/* Copies the buffers of src into a new read-only session owned by c. */
tg_svc_session *tg_svc_session_clone(tg_svc_session *src, tg_svc_consumer *c, char *err, size_t errlen);
/* Sessions that are not clones, of one principal (NULL = all). */
int tg_svc_count_sessions(const tg_service *svc, const char *principal);
/* traced's per-uid rules, applied per principal: a session belongs to the
 * principal whose consumer created it; privileged consumers see every one. */
bool tg_svc_same_principal(const tg_svc_session *s, const tg_svc_consumer *c);
bool tg_svc_may_see(const tg_svc_consumer *c, const tg_svc_session *s);
const char *tg_svc_session_state_name(const tg_svc_session *s);

/* ---- data_source_match.c ---- */
/* POSIX extended regex matching the whole string (std::regex_match). */
/* Whether s matches the POSIX extended regex re as a whole (std::regex_match). A regex with
 * back-references or {m,n} intervals, or over TG_SVC_MAX_REGEX characters, matches nothing
 * (their matching time is exponential or their size explodes; logged once). */
bool tg_svc_regex_full_match(const char *re, const char *s);
bool tg_svc_ds_matches(const Perfetto__Protos__TraceConfig *cfg, const Perfetto__Protos__TraceConfig__DataSource *cds,
                       const tg_svc_producer *p, const struct tg_svc_ds_reg *reg);
/* The service-rewritten DataSourceConfig bytes (§4.3). Returns a malloc'ed
 * buffer or NULL. */
uint8_t *tg_svc_rewrite_ds_config(const Perfetto__Protos__DataSourceConfig *in, uint32_t global_buffer,
                                  const tg_svc_session *s, size_t *out_len);

/* ---- service_packets.c ---- */
void tg_svc_pkt_list_init(struct tg_svc_pkt_list *l);
void tg_svc_pkt_list_clear(struct tg_svc_pkt_list *l);
struct tg_svc_pkt *tg_svc_pkt_new(size_t len);
void tg_svc_pkt_list_append(struct tg_svc_pkt_list *l, struct tg_svc_pkt *pk);
/* Frees the oldest packets tagged `tag` until at most max of them remain. */
void tg_svc_pkt_list_keep_latest(struct tg_svc_pkt_list *l, int tag, size_t max);
/* Frees packets after the first, oldest first, until at most max (>= 1) remain. */
void tg_svc_pkt_list_keep_first_and_latest(struct tg_svc_pkt_list *l, size_t max);
void tg_svc_snapshot_clocks(tg_svc_session *s);
void tg_svc_queue_sync_marker(tg_svc_session *s);
/* Builders (malloc'ed packet or NULL). */
struct tg_svc_pkt *tg_svc_build_trace_config(const tg_svc_session *s);
struct tg_svc_pkt *tg_svc_build_uuid(const tg_svc_session *s);
struct tg_svc_pkt *tg_svc_build_system_info(const tg_svc_session *s);
struct tg_svc_pkt *tg_svc_build_sync_marker(const tg_service *svc);
struct tg_svc_pkt *tg_svc_build_event(const tg_service *svc, enum tg_svc_event ev);
struct tg_svc_pkt *tg_svc_build_trace_stats(tg_svc_session *s);
struct tg_svc_pkt *tg_svc_build_trigger(const tg_service *svc, const char *name, const char *producer, int32_t uid,
                                        uint32_t stop_delay_ms);
/* Remote machines (relays): system info and clock sync packets. */
void tg_svc_build_remote_packets(const tg_svc_session *s, struct tg_svc_pkt_list *sysinfo_out,
                                 struct tg_svc_pkt_list *clocks_out);
/* Encoded ClockSnapshot (clocks only) of our clocks now; malloc'ed. */
size_t tg_svc_encode_host_snapshot(uint8_t **out);
/* Fills a SystemInfo (strings point into static storage). */
void tg_svc_fill_system_info(const tg_service *svc, Perfetto__Protos__SystemInfo *si, Perfetto__Protos__Utsname *u);

/* ---- trace_stats.c ---- */
/* Packed TraceStats for s (malloc'ed) or NULL. */
uint8_t *tg_svc_trace_stats(tg_svc_session *s, size_t *len);

/* ---- trusted_fields.c ---- */
#define TG_SVC_TRUSTED_MAX 48
/* Encodes the trusted slice appended to a producer packet. */
size_t tg_svc_trusted_slice(uint8_t *buf, const struct tg_tb_seq_info *info, uint32_t seq_id);
/* Top-level fields a producer must never write (§4.7). */
bool tg_svc_packet_is_valid(const struct tg_tb_packet *pkt);

/* ---- read_buffers.c ---- */
/* Iterates the packets of session s in read-out order: service packets
 * first, then buffer data, then the trailer. Each call to next yields one
 * packet as slices (producer data plus the trusted slice). */
struct tg_svc_reader;
struct tg_svc_reader_pkt {
    const struct tg_tb_slice *slices; /* the packet's bytes, in order */
    size_t n;
    const uint8_t *trusted; /* slice to append (producer packets), else NULL */
    size_t trusted_len;
    size_t payload;         /* producer bytes (0 for service packets) */
};
struct tg_svc_reader *tg_svc_reader_new(tg_svc_session *s);
void tg_svc_reader_free(struct tg_svc_reader *r);
/* Returns 1 with a packet, 0 when everything was read. The packet stays
 * valid until the next call or a non-read use of the session's buffers. */
int tg_svc_reader_next(struct tg_svc_reader *r, struct tg_svc_reader_pkt *out);
/* Starts a consumer's ReadBuffers stream. */
void tg_svc_read_buffers_start(tg_svc_consumer *c, tg_svc_session *s, tg_ipc_call *call);
void tg_svc_read_buffers_cancel(tg_svc_consumer *c);
/* The consumer's output drained (peer_drain): a read-out waiting for room goes on at once. */
void tg_svc_read_buffers_drained(tg_svc_consumer *c);

/* ---- write_into_file.c ---- */
/* Writes everything readable now into the session's file. Returns 0, or 1 if
 * max_file_size_bytes was reached. */
int tg_svc_write_into_file(tg_svc_session *s);
void tg_svc_write_timer_cb(int fd, short what, void *arg);
/* Whether TraceConfig.output_path is honoured for this consumer: the service creates that file
 * with its own rights, so only for local peers that are root or the service's own user. */
bool tg_svc_may_create_files(const tg_svc_consumer *c);
int tg_svc_open_output_path(const char *path, char *err, size_t errlen);

/* ---- buffer_budget.c ---- */
/* Half the machine's memory (at least 256 MiB). */
uint64_t tg_svc_default_buffer_budget(void);
/* Bytes of trace buffers held by sessions of `principal` (clones included). */
uint64_t tg_svc_principal_buffer_bytes(const tg_service *svc, const char *principal);
/* 0 if `want` more bytes of buffers fit the service's budget and, unless c is privileged, c's
 * principal's half of it; else -1 with the reason in err. */
int tg_svc_buffer_budget_check(const tg_service *svc, const tg_svc_consumer *c, uint64_t want, char *err,
                               size_t errlen);

/* ---- service_state.c ---- */
/* Answers QueryServiceState now, or as c's output drains (after c's earlier queries). */
void tg_svc_query_service_state(tg_service *svc, tg_svc_consumer *c, tg_ipc_call *call, bool sessions_only);
/* c's output drained (peer_drain): its queries go on. */
void tg_svc_query_state_drained(tg_svc_consumer *c);
/* c is going away: its queries are dropped (their calls go with the peer). */
void tg_svc_query_state_cancel(tg_svc_consumer *c);

#endif
