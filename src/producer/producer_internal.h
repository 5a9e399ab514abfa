/* producer_internal.h: state shared by the producer library's files:
 * producer.c (connection, async commands, data sources) and
 * producer_writer.c (trace writers, the commit queue, CommitData batching).
 *
 * Locking (see tracegate/producer.h for the public contract):
 *   p->mu   guards the instance list, the writer list, writer ids and p->gen
 *           against app threads (the loop thread is the only one that changes
 *           instances and gen; it takes mu when it does).
 *   w->mu   guards one writer's smb_writer state and its `active` flag.
 *   p->qmu  guards the outgoing op queue (a leaf lock).
 * Order: p->mu -> w->mu -> p->qmu. Never call app callbacks holding any. */
#ifndef TRACEGATE_PRODUCER_INTERNAL_H
#define TRACEGATE_PRODUCER_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/log_sample.h"
#include "smb/smb_abi.h"
#include "smb/smb_writer.h"
#include "tracegate/ipc_client.h"
#include "tracegate/producer.h"

#define TG_PR_LOG "producer"
/* CommitData requests are split so args stay below this (the SDK's limit:
 * the 128 KiB IPC frame minus headroom). */
#define TG_PR_MAX_COMMIT_BYTES (128u * 1024u - 512u)
/* Private buffer size in emulation mode (Perfetto's in-process SMB). */
#define TG_PR_EMULATION_SMB_SIZE (1024u * 1024u)
/* Emulated chunks queued from other threads beyond this are dropped. */
#define TG_PR_MAX_QUEUED_BYTES (8u * 1024u * 1024u)
#define TG_PR_NUM_WRITER_IDS 32768u
/* Instances of one data source at a time (the SDK's limit): a service, or a
 * squatter on its socket, asking for more is refused, instead of the app
 * allocating (and running its setup callback) once per id it is sent. */
#define TG_PR_MAX_INSTANCES_PER_DS 8u

/* A registered data source (copy of the app's descriptor). */
struct tg_pr_ds {
    char *name;
    struct tg_track_event_category *cats; /* deep copies */
    size_t n_cats;
    bool will_notify_on_start, will_notify_on_stop, handles_incremental_state_clear, no_flush;
    enum tg_buffer_exhausted_policy policy; /* DROP or STALL_THEN_DROP */
    bool policy_configurable;
    unsigned stall_max_ms;
    struct tg_data_source_cbs cbs;
    void *cb_arg;
    uint64_t descriptor_id;
    struct tg_pr_ds *next;
};

/* A data source instance the service set up. */
struct tg_pr_instance {
    uint64_t id;
    struct tg_pr_ds *ds;
    uint32_t target_buffer;
    enum tg_buffer_exhausted_policy policy; /* its writers': DROP or STALL_THEN_DROP */
    bool started;
    bool stopping;   /* on_stop was called */
    bool stop_later; /* ... and the data source finishes it (tg_producer_stop_later/_done) */
    struct tg_pr_instance *next;
};

enum tg_pr_op_kind { TG_PR_OP_REGISTER_WRITER, TG_PR_OP_UNREGISTER_WRITER, TG_PR_OP_CHUNK };

/* One queued outgoing message (FIFO, so a writer's RegisterTraceWriter
 * precedes its chunks and its UnregisterTraceWriter follows them). */
struct tg_pr_op {
    enum tg_pr_op_kind kind;
    uint64_t gen; /* connection generation; stale ops are discarded */
    uint16_t writer_id;
    uint32_t target_buffer;
    uint32_t page, chunk;
    size_t data_len; /* emulation: whole chunk bytes follow in data[] */
    struct tg_pr_op *next;
    uint8_t data[];
};

/* Most a data source may ask one stall to last, and the default. */
#define TG_PR_STALL_MAX_MS 60000u
#define TG_PR_STALL_DEFAULT_MS 100u

struct tg_trace_writer {
    tg_producer *p;
    pthread_mutex_t mu;
    struct tg_smb_writer sw;
    bool active; /* under mu */
    /* stall then drop (stall_max_ns > 0); fields under mu unless atomic */
    uint64_t stall_max_ns;
    uint64_t stall_t0_ns;   /* when the current stall began; 0 = not stalling */
    bool stall_spent;       /* a stall gave up: drop without stalling until a packet gets a chunk */
    uint64_t stalls;        /* stalls begun */
    uint64_t stall_ns;      /* total time stalled */
    uint64_t stalls_given_up;
    atomic_bool stalling;    /* readable without mu: the loop thread does not wait for this writer */
    atomic_bool stall_cancel; /* set by the loop thread before it retires the writer */
    uint64_t gen;
    uint64_t instance_id;
    uint16_t id;
    uint32_t target_buffer;
    atomic_bool incr_reset;
    struct tg_trace_writer *next; /* p->writers, under p->mu */
};

enum tg_pr_state {
    TG_PR_IDLE = 0,     /* not connected; maybe waiting to reconnect */
    TG_PR_CONNECTING,   /* socket + BindService in flight */
    TG_PR_INITIALIZING, /* InitializeConnection sent */
    TG_PR_READY,        /* InitializeConnection accepted */
};

struct tg_producer {
    struct event_base *base;
    pthread_t loop_thread;
    pthread_mutex_t mu;

    /* options (copied) */
    char *addr;
    /* tg_producer_opts.connect / connect_arg (NULL = tg_ipc_client_connect) */
    struct tg_ipc_client *(*connect)(struct event_base *base, const char *socket,
                                     const struct tg_ipc_client_cbs *cbs, void *cbs_arg, void *connect_arg,
                                     char *err, size_t errlen);
    void *connect_arg;
    char *name;
    uint32_t smb_size_hint, smb_page_hint; /* bytes */
    bool reconnect;
    unsigned backoff_min_ms, backoff_max_ms, backoff_ms;
    void (*on_connected)(tg_producer *p, void *arg);
    void (*on_disconnected)(tg_producer *p, const char *reason, void *arg);
    void *cb_arg;

    /* connection */
    enum tg_pr_state state;
    tg_ipc_client *cli;
    tg_ipc_service_proxy *proxy;
    uint64_t gen; /* bumped at every teardown (under mu) */
    bool emulation;
    unsigned pending_register_acks;
    bool connected_reported;
    struct event *connect_ev; /* (re)connect timer */
    bool freeing;

    /* SMB */
    bool have_smb;
    struct tg_smb smb;
    void *smb_mem;
    size_t smb_mem_len;
    bool smb_mmapped;

    /* data sources, instances, writers */
    struct tg_pr_ds *ds_list;
    struct tg_pr_instance *instances; /* under mu for app threads */
    struct tg_trace_writer *writers;  /* under mu */
    uint8_t writer_ids[TG_PR_NUM_WRITER_IDS / 8];
    unsigned next_writer_id;

    /* outgoing queue */
    pthread_mutex_t qmu;
    struct tg_pr_op *qhead, *qtail;
    size_t q_bytes; /* chunk bytes queued (SMB: chunk sizes; emulation: copies) */
    bool kicked;
    int wake_fd; /* eventfd: app threads wake the loop */
    struct tg_log_sampler refusal_log; /* commands refused at the service's will (loop thread) */
    struct event *wake_ev;
};

/* producer_writer.c */
bool tg_pr_on_loop_thread(const tg_producer *p);
/* Sends every queued op (loop thread only), batching chunks into CommitData
 * requests; the last request carries flush_request_id when non-zero (an
 * empty CommitData is sent if there is nothing else). */
void tg_pr_drain(tg_producer *p, uint64_t flush_request_id);
/* Drops every queued op. */
void tg_pr_queue_clear(tg_producer *p);
/* Flushes (commits the current chunk of) the active writers of an instance,
 * or of all instances when instance_id is 0. Caller holds p->mu. */
void tg_pr_flush_writers_locked(tg_producer *p, uint64_t instance_id);
/* Commits and deactivates the writers of an instance (all when 0); with
 * commit false (connection lost) nothing is committed. Caller holds p->mu. */
void tg_pr_retire_writers_locked(tg_producer *p, uint64_t instance_id, bool commit);
/* Marks the writers of an instance as needing an incremental-state reset. */
void tg_pr_mark_incremental_reset_locked(tg_producer *p, uint64_t instance_id);
/* Frees every writer (tg_producer_free). Caller holds p->mu. */
void tg_pr_free_all_writers_locked(tg_producer *p);
void tg_pr_wake_cb(int fd, short what, void *arg);
/* The smb_writer stall hook of writers with "stall then drop" (ctx = writer). */
bool tg_pr_writer_stall(void *ctx, unsigned attempt);

/* producer.c */
struct tg_pr_instance *tg_pr_find_instance(tg_producer *p, uint64_t id);

#endif
