/* test_service_util.h: helpers for the tracing service tests (test_service_*.c).
 *
 * - ts_env: an event_base plus a tg_service listening nowhere; connections are
 *   made in-process (socketpairs, or real TCP pairs for shmem emulation).
 * - ts_raw: a raw client connection: sends IPC frames (optionally with an fd),
 *   collects the frames the service sends back (and fds that rode along).
 *   ts_pump() runs the service's loop and polls every open ts_raw.
 * - ts_prod: a scripted producer on a ts_raw: binds, initializes, registers a
 *   data source, follows the async commands (maps the SMB, records instance
 *   ids, optionally acks flushes and stops) and writes packets with the smb
 *   helper's smb_writer into the SMB the service handed out.
 * - ts_cons: a scripted consumer (EnableTracing, unary calls, ReadBuffers
 *   collecting packets), and ts_cfg, a TraceConfig builder.
 * - packet helpers: field lookup in a serialized TracePacket.
 *
 * Single-threaded; nothing here calls cmocka (functions return errors). */
#ifndef TEST_SERVICE_UTIL_H
#define TEST_SERVICE_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <protobuf-c/protobuf-c.h>

#include "tracegate/frame.h"
#include "tracegate/service.h"

#include "smb/smb_abi.h"
#include "smb/smb_writer.h"

#include "consumer_port.pb-c.h"
#include "trace_config.pb-c.h"

struct event_base;

struct ts_env {
    struct event_base *base;
    tg_service *svc;
};

int ts_env_init(struct ts_env *e);
void ts_env_free(struct ts_env *e);

/* ------------------------------------------------------------ raw peers */

struct ts_frame {
    uint8_t *body;
    size_t len;
    int fd; /* received with this frame, or -1 (owned by the frame) */
    struct tg_frame_info fi;
};
void ts_frame_free(struct ts_frame *f);

struct ts_raw {
    int fd;
    tg_frame_reader *fr;
    struct ts_frame *q;
    size_t nq, capq;
    int pending_fd;
    bool eof;
};

/* Opens a connection to the producer or consumer port: a socketpair, or a
 * TCP connection on 127.0.0.1 (tcp != 0, producers then get emulation). */
int ts_raw_open(struct ts_env *e, struct ts_raw *r, int producer_port, int tcp);
/* A socketpair whose service end carries an explicit identity (what the
 * gateway does with tg_service_connect_local_as). */
int ts_raw_open_as(struct ts_env *e, struct ts_raw *r, int producer_port, const struct tg_ipc_identity *id);
/* Connects to a Perfetto-style address (a listening service). */
int ts_raw_connect_addr(struct ts_raw *r, const char *addr);
void ts_raw_close(struct ts_raw *r);
/* Sends raw bytes (whole, pumping the loop while the socket is full). fd >= 0
 * rides on the first byte. */
int ts_raw_send(struct ts_env *e, struct ts_raw *r, const void *data, size_t len, int fd);
int ts_raw_send_frame(struct ts_env *e, struct ts_raw *r, const void *body, size_t len, int fd);
int ts_raw_bind(struct ts_env *e, struct ts_raw *r, uint64_t rid, const char *service, struct ts_frame *reply);
/* Invokes method mid of service sid with a packed request. */
int ts_raw_invoke(struct ts_env *e, struct ts_raw *r, uint64_t rid, uint32_t sid, uint32_t mid,
                  const ProtobufCMessage *req, int drop_reply, int fd);
int ts_raw_invoke_bytes(struct ts_env *e, struct ts_raw *r, uint64_t rid, uint32_t sid, uint32_t mid,
                        const uint8_t *args, size_t len, int drop_reply, int fd);
/* Waits for the next frame with request id rid (any id when rid == 0), up to
 * timeout_ms, pumping the loop. Returns 1 with *out filled, 0 on timeout. */
int ts_raw_wait(struct ts_env *e, struct ts_raw *r, uint64_t rid, struct ts_frame *out, int timeout_ms);
/* Removes and returns a queued frame for rid without waiting (0/1). */
int ts_raw_take(struct ts_raw *r, uint64_t rid, struct ts_frame *out);
size_t ts_raw_count(const struct ts_raw *r, uint64_t rid);

/* Runs the service loop for about ms milliseconds, polling open peers and
 * running scripted producers. Only for showing that something does NOT happen:
 * to wait for something, use ts_pump_until. */
void ts_pump(struct ts_env *e, int ms);
/* Pumps until done(arg); timeout_ms (scaled by tg_test_ms) is only the safety net.
 * Returns 1 if done. (Every timeout_ms of this file is such a scaled safety net.) */
int ts_pump_until(struct ts_env *e, int (*done)(void *), void *arg, int timeout_ms);
/* As ts_pump_until, but done(arg) is asked after every single round of the loop (one poll, the
 * timers due then, their callbacks): for a state that the next round may already leave (a pump
 * keeps looping while events are active, and on a loaded machine timers fall due meanwhile). */
int ts_step_until(struct ts_env *e, int (*done)(void *), void *arg, int timeout_ms);

/* What the service holds right now (read from its internals). */
enum ts_svc_what { TS_SVC_PRODUCERS, TS_SVC_CONSUMERS, TS_SVC_SESSIONS };
size_t ts_svc_count(struct ts_env *e, enum ts_svc_what what);
/* Pumps until ts_svc_count(e, what) == want. Returns 1 if it got there. */
int ts_wait_svc_count(struct ts_env *e, enum ts_svc_what what, size_t want, int timeout_ms);

/* ------------------------------------------------------------ producers */

struct ts_prod_opts {
    const char *name;       /* producer name */
    const char *ds_name;    /* data source to register ("" = none) */
    int tcp;                /* emulation */
    int scraping;           /* SMB_SCRAPING_ENABLED */
    uint32_t size_hint, page_hint;
    int notify_start, notify_stop, no_flush, handles_clear;
    int auto_ack_flush;     /* answer Flush with CommitData{flush_request_id} */
    int auto_notify_stop;   /* answer StopDataSource with NotifyDataSourceStopped */
    int no_async;           /* never open GetAsyncCommand (commands stay queued at the service) */
    const char *identity_hint; /* TCP only: send SetPeerIdentity{machine_id_hint} first */
    const char *machine_name;
    const char *addr;       /* connect to this address (e.g. a gateway listener) instead of the service;
                             * tcp then says whether it is a TCP address */
};

#define TS_MAX_INST 32

struct ts_chunk_ref {
    uint32_t page, chunk, target;
    uint8_t *data; /* emulation: whole chunk bytes */
    size_t len;
};

struct ts_prod {
    struct ts_env *e;
    struct ts_raw r;
    struct ts_prod_opts o;
    uint64_t rid;
    uint64_t async_rid;
    bool init_ok, emulation_reply;
    /* SMB */
    int smb_fd;
    void *map;
    size_t map_size, page_size;
    struct tg_smb smb;
    bool have_smb;
    int setup_tracing_count;
    /* commands */
    uint64_t inst[TS_MAX_INST];
    uint32_t inst_buffer[TS_MAX_INST];
    uint8_t *inst_cfg[TS_MAX_INST];
    size_t inst_cfg_len[TS_MAX_INST];
    int n_setup, n_start, n_stop, n_flush, n_clear;
    uint64_t last_flush_rid;
    uint64_t stopped[TS_MAX_INST];
    /* commits */
    struct ts_chunk_ref *pending;
    size_t n_pending, cap_pending;
    bool commit_immediately; /* commit completed chunks at once and wait until the service took them */
    size_t commit_batch;     /* with commit_immediately: commit every this many chunks (0 = 1) */
    struct ts_prod *next;    /* registry in the env */
    bool ignore_cmds;        /* leave async frames in the queue (for raw replays) */
};

/* Options of a well-behaved producer `name` registering ds_name: it acks flushes and stops. */
void ts_prod_opts_init(struct ts_prod_opts *o, const char *name, const char *ds_name);
int ts_prod_connect(struct ts_env *e, struct ts_prod *p, const struct ts_prod_opts *o);
void ts_prod_close(struct ts_prod *p);
/* Processes queued async commands (called by ts_pump too). */
void ts_prod_process(struct ts_prod *p);
/* Waits until n StartDataSource commands were seen. */
int ts_prod_wait_started(struct ts_prod *p, int n, int timeout_ms);
/* A writer committing through p's SMB (or emulation buffer). */
int ts_prod_writer(struct ts_prod *p, struct tg_smb_writer *w, uint16_t writer_id, uint32_t target);
/* RegisterTraceWriter. */
int ts_prod_register_writer(struct ts_prod *p, uint16_t writer_id, uint32_t target);
/* Sends pending ChunksToMove (plus flush ack if flush_rid) and waits for the reply. */
int ts_prod_commit(struct ts_prod *p, uint64_t flush_rid);
/* Invokes a producer method and waits for its reply (success flag returned, -1 on timeout). */
int ts_prod_call(struct ts_prod *p, uint32_t mid, const ProtobufCMessage *req, struct ts_frame *reply);
/* ActivateTriggers naming trigger `name` `times` times in one frame (ts_prod_call's result). */
int ts_prod_trigger(struct ts_prod *p, const char *name, size_t times);
/* ts_pump_until predicate: p (a struct ts_prod *) has seen a StartDataSource. */
int ts_prod_started(void *p);

/* ------------------------------------------------------------ consumers */

struct ts_cons {
    struct ts_env *e;
    struct ts_raw r;
    uint64_t rid;
    uint64_t enable_rid;
};

int ts_cons_connect(struct ts_env *e, struct ts_cons *c);
/* A consumer whose connection carries `id` (NULL = the test's own uid). */
int ts_cons_connect_as(struct ts_env *e, struct ts_cons *c, const struct tg_ipc_identity *id);
void ts_cons_close(struct ts_cons *c);
uint64_t ts_cons_enable(struct ts_cons *c, const Perfetto__Protos__TraceConfig *cfg, int fd);
/* Waits for the EnableTracing reply; 1 = got it (error copied if any). */
int ts_cons_wait_enable(struct ts_cons *c, int timeout_ms, char *error, size_t errlen);
/* Unary call; returns success flag, -1 on timeout. reply may be NULL. */
int ts_cons_call(struct ts_cons *c, uint32_t mid, const ProtobufCMessage *req, struct ts_frame *reply, int timeout_ms);
/* CloneSession of session_id: 1 = cloned, 0 = refused (its error copied to err, "" otherwise), -1 = no
 * answer or an answer that does not decode. */
int ts_cons_clone(struct ts_cons *c, uint64_t session_id, char *err, size_t errlen);

struct ts_packet {
    uint8_t *data;
    size_t len;
    size_t nslices;
    uint8_t *trusted; /* the last slice when the packet had several, else NULL */
    size_t trusted_len;
};
struct ts_trace {
    struct ts_packet *pk;
    size_t n, cap;
    size_t replies;
    size_t max_reply; /* largest reply_proto seen */
    bool bad_has_more;  /* has_more false before the end, or missing at the end */
    bool failed;
};
/* ReadBuffers until has_more=false. Returns 0 or -1. */
int ts_cons_read(struct ts_cons *c, struct ts_trace *t, int timeout_ms);
/* Parses ReadBuffersResponse bytes into t (appending). */
int ts_trace_add_reply(struct ts_trace *t, const uint8_t *p, size_t len, struct ts_packet *partial);
void ts_trace_free(struct ts_trace *t);
/* Number of packets whose bytes contain needle. */
size_t ts_trace_count(const struct ts_trace *t, const void *needle, size_t nlen);

/* Method ids (declaration order). */
enum {
    TS_C_ENABLE = 1, TS_C_DISABLE, TS_C_READ, TS_C_FREE, TS_C_FLUSH, TS_C_START, TS_C_CHANGE, TS_C_DETACH,
    TS_C_ATTACH, TS_C_STATS, TS_C_OBSERVE, TS_C_QUERY, TS_C_CAPS, TS_C_BUGREPORT, TS_C_CLONE
};
enum {
    TS_P_INIT = 1, TS_P_REG_DS, TS_P_UNREG_DS, TS_P_COMMIT, TS_P_ASYNC, TS_P_REG_WRITER, TS_P_UNREG_WRITER,
    TS_P_NOTIFY_STARTED, TS_P_NOTIFY_STOPPED, TS_P_TRIGGERS, TS_P_SYNC, TS_P_UPDATE_DS
};

/* ------------------------------------------------------------ configs */

struct ts_cfg {
    Perfetto__Protos__TraceConfig tc;
    Perfetto__Protos__TraceConfig__BufferConfig buf[4];
    Perfetto__Protos__TraceConfig__BufferConfig *bufp[4];
    Perfetto__Protos__TraceConfig__DataSource ds[4];
    Perfetto__Protos__TraceConfig__DataSource *dsp[4];
    Perfetto__Protos__DataSourceConfig dsc[4];
};
/* One buffer (discard != 0: DISCARD), one data source (NULL = none). */
void ts_cfg_init(struct ts_cfg *c, uint32_t size_kb, int discard, const char *ds_name, uint32_t duration_ms);

/* ------------------------------------------------------------ packets */

/* Last varint value of a top-level field (1 if found). */
int ts_pkt_varint(const uint8_t *p, size_t len, uint32_t field, uint64_t *out);
/* Bytes of the last LEN top-level field (1 if found). */
int ts_pkt_bytes(const uint8_t *p, size_t len, uint32_t field, const uint8_t **out, size_t *olen);
bool ts_pkt_has(const uint8_t *p, size_t len, uint32_t field);
/* A test packet: TracePacket{timestamp: seq, for_testing(900): n bytes of pattern seeded by seq}. */
size_t ts_make_packet(uint8_t *buf, size_t cap, uint64_t seq, size_t payload);

/* Writes a chunk by hand: partitions `page` (Div1) if free, takes chunk 0
 * BeingWritten with {chunk_id, writer}, writes n fragments (4-byte length
 * headers), stores count|flags, and releases it Complete when complete.
 * Returns 0 or -1. */
int ts_hand_chunk(struct tg_smb *smb, size_t page, uint16_t writer, uint32_t chunk_id, unsigned flags,
                  const uint8_t *const *frags, const size_t *lens, size_t n, bool complete);

#endif
