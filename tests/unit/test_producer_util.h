/* test_producer_util.h: helpers for the producer library tests:
 *
 * - a fake ProducerPort service built on tg_ipc_host that records every call
 *   (method, drop_reply, request bytes, order), answers like traced, hands out
 *   a memfd SMB (or asks for shmem emulation), reads committed chunks out of
 *   the SMB or out of CommitData, reassembles fragmented packets per writer
 *   and remembers flush acks; the test drives it by sending async commands;
 * - TracePacket builders/decoders for test payloads.
 *
 * Single-threaded (runs on the test's event_base), no cmocka inside. */
#ifndef TEST_PRODUCER_UTIL_H
#define TEST_PRODUCER_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "smb/smb_abi.h"
#include "tracegate/ipc_host.h"

struct event_base;

#define FAKE_MAX_RECS 4096
#define FAKE_MAX_PACKETS 65536
#define FAKE_MAX_SEQ 64
#define FAKE_MAX_HELD 1024

struct fake_rec {
    char method[40];
    int drop_reply;
    uint8_t *args; /* re-packed request */
    size_t len;
};

struct fake_packet {
    uint16_t writer_id;
    uint8_t *data;
    size_t len;
};

struct fake_seq {
    uint16_t writer_id;
    uint32_t next_chunk_id;
    bool seen;
    uint8_t *partial;
    size_t partial_len;
    bool open;
};

struct fake_svc {
    struct event_base *base;
    tg_ipc_host *host;
    char addr[256];
    /* behaviour */
    bool emulation;        /* InitializeConnectionResponse.use_shmem_emulation */
    bool hold_init_reply;  /* keep InitializeConnection pending (see init_call) */
    bool hold_chunks;      /* SMB mode: read chunks but leave them BeingRead */
    bool unsealed_smb;     /* SMB mode: hand out a memfd without seals (a hostile service) */
    int ds_policy;         /* fake_start_ds: DataSourceConfig.buffer_exhausted_policy when > 0 */
    /* calls */
    struct fake_rec recs[FAKE_MAX_RECS];
    size_t n_recs;
    tg_ipc_call *init_call;
    tg_ipc_call *async_call;
    tg_ipc_peer *peer;
    unsigned peers_closed;
    bool async_before_init_reply; /* GetAsyncCommand arrived while Init was pending */
    /* SMB */
    int smb_fd;
    void *smb_mem;
    size_t smb_size;
    struct tg_smb smb;
    struct { uint32_t page, chunk; } held[FAKE_MAX_HELD];
    size_t n_held;
    /* data */
    struct fake_packet packets[FAKE_MAX_PACKETS];
    size_t n_packets;
    struct fake_seq seqs[FAKE_MAX_SEQ];
    unsigned chunk_id_gaps;
    unsigned chunks_read;
    unsigned commits;
    unsigned commits_with_data;
    size_t max_commit_args;
    unsigned flush_acks;
    uint64_t last_flush_ack;
    unsigned abi_errors;
};

/* Starts a fake listening on addr (UNIX path or 127.0.0.1:port). */
struct fake_svc *fake_svc_new(struct event_base *base, const char *addr);
void fake_svc_free(struct fake_svc *fs);

/* Answers a held InitializeConnection. */
int fake_reply_init(struct fake_svc *fs);
/* Sends one GetAsyncCommandResponse (serialized bytes) with an optional fd. */
int fake_send_cmd_bytes(struct fake_svc *fs, const uint8_t *buf, size_t len, int fd);
/* SetupTracing with page_kb; in SMB mode creates a memfd of smb_size first. */
int fake_setup_tracing(struct fake_svc *fs, uint32_t page_kb, size_t smb_size);
/* SetupDataSource + StartDataSource for a data source name. */
int fake_start_ds(struct fake_svc *fs, uint64_t inst, const char *name, uint32_t target_buffer);
int fake_stop_ds(struct fake_svc *fs, uint64_t inst);
int fake_flush(struct fake_svc *fs, const uint64_t *ids, size_t n, uint64_t request_id);
int fake_clear_incremental(struct fake_svc *fs, uint64_t inst);
/* Releases chunks held with hold_chunks (BeingRead -> Free). */
void fake_release_held(struct fake_svc *fs);

/* Index of the first record of method at or after `from`, or -1. */
int fake_find(const struct fake_svc *fs, const char *method, size_t from);
size_t fake_count(const struct fake_svc *fs, const char *method);

/* ---- packets ---- */
/* Serialized TracePacket {timestamp=ts, track_event{type, name, track_uuid,
 * counter_value (if type COUNTER), debug annotation "blob" of blob_len 'x'
 * characters (if blob_len)}}. Caller frees. */
uint8_t *make_test_packet(uint64_t ts, int type, const char *name, uint64_t track_uuid, int64_t counter,
                          size_t blob_len, size_t *len_out);

#endif
