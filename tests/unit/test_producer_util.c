/* test_producer_util.c: a fake ProducerPort service and packet helpers for the producer tests (see test_producer_util.h). */
#include "test_producer_util.h"

#include <event2/event.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "commit_data_request.pb-c.h"
#include "producer_port.pb-c.h"
#include "smb/smb_fragments.h"
#include "trace_packet.pb-c.h"
#include "track_event.pb-c.h"

/* ---- recording ---- */

static void record(struct fake_svc *fs, tg_ipc_call *call, const char *method, const ProtobufCMessage *req)
{
    if (fs->n_recs >= FAKE_MAX_RECS)
        return;
    struct fake_rec *r = &fs->recs[fs->n_recs++];
    snprintf(r->method, sizeof r->method, "%s", method);
    r->drop_reply = tg_ipc_call_drop_reply(call);
    r->len = req ? protobuf_c_message_get_packed_size(req) : 0;
    r->args = malloc(r->len ? r->len : 1);
    if (req && r->args)
        protobuf_c_message_pack(req, r->args);
}

int fake_find(const struct fake_svc *fs, const char *method, size_t from)
{
    for (size_t i = from; i < fs->n_recs; i++)
        if (strcmp(fs->recs[i].method, method) == 0)
            return (int)i;
    return -1;
}

size_t fake_count(const struct fake_svc *fs, const char *method)
{
    size_t n = 0;
    for (size_t i = 0; i < fs->n_recs; i++)
        n += strcmp(fs->recs[i].method, method) == 0;
    return n;
}

/* ---- chunk reading and packet reassembly ---- */

static struct fake_seq *seq_for(struct fake_svc *fs, uint16_t writer_id)
{
    for (int i = 0; i < FAKE_MAX_SEQ; i++)
        if (fs->seqs[i].seen && fs->seqs[i].writer_id == writer_id)
            return &fs->seqs[i];
    for (int i = 0; i < FAKE_MAX_SEQ; i++) {
        if (!fs->seqs[i].seen) {
            fs->seqs[i].seen = true;
            fs->seqs[i].writer_id = writer_id;
            return &fs->seqs[i];
        }
    }
    return NULL;
}

static void emit_packet(struct fake_svc *fs, uint16_t writer_id, const uint8_t *data, size_t len)
{
    if (fs->n_packets >= FAKE_MAX_PACKETS)
        return;
    struct fake_packet *pk = &fs->packets[fs->n_packets++];
    pk->writer_id = writer_id;
    pk->data = malloc(len ? len : 1);
    memcpy(pk->data, data, len);
    pk->len = len;
}

static void append_partial(struct fake_seq *s, const uint8_t *data, size_t len)
{
    s->partial = realloc(s->partial, s->partial_len + len + 1);
    memcpy(s->partial + s->partial_len, data, len);
    s->partial_len += len;
}

/* A whole chunk (8-byte header + payload), private copy. */
static void read_chunk(struct fake_svc *fs, const uint8_t *chunk, size_t size)
{
    if (size < TG_SMB_CHUNK_HEADER_SIZE) {
        fs->abi_errors++;
        return;
    }
    struct tg_smb_chunk_header h;
    tg_smb_chunk_header_decode(chunk, &h);
    fs->chunks_read++;
    struct fake_seq *s = seq_for(fs, h.writer_id);
    if (!s)
        return;
    if (s->next_chunk_id != h.chunk_id) {
        fs->chunk_id_gaps++;
        s->open = false;
        s->partial_len = 0;
    }
    s->next_chunk_id = h.chunk_id + 1;
    struct tg_smb_frag_iter it;
    tg_smb_frag_iter_init(&it, chunk + TG_SMB_CHUNK_HEADER_SIZE, size - TG_SMB_CHUNK_HEADER_SIZE,
                          tg_smb_packets_count(h.packets), tg_smb_packets_flags(h.packets));
    struct tg_smb_fragment f;
    int rc;
    while ((rc = tg_smb_frag_next(&it, &f)) == TG_SMB_FRAG_OK) {
        if (f.is_drop) {
            s->open = false;
            s->partial_len = 0;
            continue;
        }
        if (f.is_first_continuation) {
            if (!s->open)
                continue; /* orphan continuation */
        } else {
            s->partial_len = 0;
        }
        append_partial(s, f.data, f.len);
        s->open = true;
        if (!f.is_last_continues) {
            emit_packet(fs, h.writer_id, s->partial, s->partial_len);
            s->partial_len = 0;
            s->open = false;
        }
    }
    if (rc == TG_SMB_FRAG_ABI_VIOLATION)
        fs->abi_errors++;
}

static void read_smb_chunk(struct fake_svc *fs, uint32_t page, uint32_t chunk)
{
    unsigned layout = 0;
    if (tg_smb_acquire_chunk_for_reading(&fs->smb, page, chunk, &layout) != TG_SMB_OK) {
        fs->abi_errors++;
        return;
    }
    uint8_t buf[TG_SMB_MAX_PAGE_SIZE];
    struct tg_smb_chunk_header h;
    long n = tg_smb_copy_chunk(&fs->smb, page, layout, chunk, buf, sizeof buf, &h);
    if (n > 0)
        read_chunk(fs, buf, (size_t)n);
    if (fs->hold_chunks && fs->n_held < FAKE_MAX_HELD) {
        fs->held[fs->n_held].page = page;
        fs->held[fs->n_held].chunk = chunk;
        fs->n_held++;
    } else {
        tg_smb_release_chunk_as_free(&fs->smb, page, chunk);
    }
}

void fake_release_held(struct fake_svc *fs)
{
    for (size_t i = 0; i < fs->n_held; i++)
        tg_smb_release_chunk_as_free(&fs->smb, fs->held[i].page, fs->held[i].chunk);
    fs->n_held = 0;
}

/* ---- method handlers ---- */

static void reply_empty(tg_ipc_call *call)
{
    tg_ipc_call_reply(call, NULL, 0, -1);
}

int fake_reply_init(struct fake_svc *fs)
{
    tg_ipc_call *call = fs->init_call;
    if (!call)
        return -1;
    Perfetto__Protos__InitializeConnectionResponse r = PERFETTO__PROTOS__INITIALIZE_CONNECTION_RESPONSE__INIT;
    r.has_using_shmem_provided_by_producer = 1;
    r.has_direct_smb_patching_supported = 1;
    r.direct_smb_patching_supported = 1;
    r.has_use_shmem_emulation = 1;
    r.use_shmem_emulation = fs->emulation;
    fs->init_call = NULL;
    return tg_ipc_call_reply(call, &r.base, 0, -1);
}

static void m_init(tg_ipc_call *call, const ProtobufCMessage *req, void *ctx, void *ps)
{
    struct fake_svc *fs = ctx;
    (void)ps;
    record(fs, call, "InitializeConnection", req);
    fs->peer = tg_ipc_call_peer(call);
    fs->init_call = call;
    if (!fs->hold_init_reply)
        fake_reply_init(fs);
}

static void m_async(tg_ipc_call *call, const ProtobufCMessage *req, void *ctx, void *ps)
{
    struct fake_svc *fs = ctx;
    (void)ps;
    record(fs, call, "GetAsyncCommand", req);
    if (fs->init_call)
        fs->async_before_init_reply = true;
    fs->async_call = call;
}

static void m_commit(tg_ipc_call *call, const ProtobufCMessage *req, void *ctx, void *ps)
{
    struct fake_svc *fs = ctx;
    (void)ps;
    record(fs, call, "CommitData", req);
    const Perfetto__Protos__CommitDataRequest *r = (const void *)req;
    size_t args = protobuf_c_message_get_packed_size(req);
    if (args > fs->max_commit_args)
        fs->max_commit_args = args;
    fs->commits++;
    for (size_t i = 0; i < r->n_chunks_to_move; i++) {
        const Perfetto__Protos__CommitDataRequest__ChunksToMove *m = r->chunks_to_move[i];
        if (m->has_data) {
            fs->commits_with_data++;
            read_chunk(fs, m->data.data, m->data.len);
        } else if (fs->smb_mem) {
            read_smb_chunk(fs, m->page, m->chunk);
        } else {
            fs->abi_errors++;
        }
    }
    if (r->has_flush_request_id && r->flush_request_id) {
        fs->flush_acks++;
        fs->last_flush_ack = r->flush_request_id;
    }
    reply_empty(call);
}

#define SIMPLE_HANDLER(fn, name)                                                                                      \
    static void fn(tg_ipc_call *call, const ProtobufCMessage *req, void *ctx, void *ps)                              \
    {                                                                                                                 \
        (void)ps;                                                                                                     \
        record(ctx, call, name, req);                                                                                 \
        reply_empty(call);                                                                                            \
    }
SIMPLE_HANDLER(m_register_ds, "RegisterDataSource")
SIMPLE_HANDLER(m_unregister_ds, "UnregisterDataSource")
SIMPLE_HANDLER(m_register_tw, "RegisterTraceWriter")
SIMPLE_HANDLER(m_unregister_tw, "UnregisterTraceWriter")
SIMPLE_HANDLER(m_started, "NotifyDataSourceStarted")
SIMPLE_HANDLER(m_stopped, "NotifyDataSourceStopped")
SIMPLE_HANDLER(m_triggers, "ActivateTriggers")
SIMPLE_HANDLER(m_sync, "Sync")
SIMPLE_HANDLER(m_update_ds, "UpdateDataSource")

static const struct tg_ipc_method k_methods[] = {
    {"InitializeConnection", &perfetto__protos__initialize_connection_request__descriptor, m_init},
    {"RegisterDataSource", &perfetto__protos__register_data_source_request__descriptor, m_register_ds},
    {"UnregisterDataSource", &perfetto__protos__unregister_data_source_request__descriptor, m_unregister_ds},
    {"CommitData", &perfetto__protos__commit_data_request__descriptor, m_commit},
    {"GetAsyncCommand", &perfetto__protos__get_async_command_request__descriptor, m_async},
    {"RegisterTraceWriter", &perfetto__protos__register_trace_writer_request__descriptor, m_register_tw},
    {"UnregisterTraceWriter", &perfetto__protos__unregister_trace_writer_request__descriptor, m_unregister_tw},
    {"NotifyDataSourceStarted", &perfetto__protos__notify_data_source_started_request__descriptor, m_started},
    {"NotifyDataSourceStopped", &perfetto__protos__notify_data_source_stopped_request__descriptor, m_stopped},
    {"ActivateTriggers", &perfetto__protos__activate_triggers_request__descriptor, m_triggers},
    {"Sync", &perfetto__protos__sync_request__descriptor, m_sync},
    {"UpdateDataSource", &perfetto__protos__update_data_source_request__descriptor, m_update_ds},
};

static void *peer_open(tg_ipc_peer *peer, void *ctx)
{
    (void)peer;
    return ctx;
}

static void peer_close(tg_ipc_peer *peer, void *ps, void *ctx)
{
    struct fake_svc *fs = ctx;
    (void)ps;
    if (fs->peer == peer || !fs->peer) {
        fs->init_call = NULL;
        fs->async_call = NULL;
        fs->peer = NULL;
    }
    fs->peers_closed++;
}

static const struct tg_ipc_service_def k_def = {
    .name = "ProducerPort",
    .methods = k_methods,
    .n_methods = sizeof k_methods / sizeof k_methods[0],
    .peer_open = peer_open,
    .peer_close = peer_close,
};

struct fake_svc *fake_svc_new(struct event_base *base, const char *addr)
{
    struct fake_svc *fs = calloc(1, sizeof *fs);
    if (!fs)
        return NULL;
    fs->base = base;
    fs->smb_fd = -1;
    snprintf(fs->addr, sizeof fs->addr, "%s", addr);
    struct tg_ipc_host_opts ho;
    memset(&ho, 0, sizeof ho);
    tg_conn_opts_default(&ho.conn);
    fs->host = tg_ipc_host_new(base, &ho);
    char err[256];
    if (!fs->host || !tg_ipc_host_add_service(fs->host, &k_def, fs) ||
        tg_ipc_host_listen(fs->host, addr, 0600, err, sizeof err) != 0) {
        fprintf(stderr, "fake service: %s\n", err);
        fake_svc_free(fs);
        return NULL;
    }
    return fs;
}

void fake_svc_free(struct fake_svc *fs)
{
    if (!fs)
        return;
    if (fs->host)
        tg_ipc_host_free(fs->host);
    for (size_t i = 0; i < fs->n_recs; i++)
        free(fs->recs[i].args);
    for (size_t i = 0; i < fs->n_packets; i++)
        free(fs->packets[i].data);
    for (int i = 0; i < FAKE_MAX_SEQ; i++)
        free(fs->seqs[i].partial);
    if (fs->smb_mem)
        munmap(fs->smb_mem, fs->smb_size);
    if (fs->smb_fd >= 0)
        close(fs->smb_fd);
    if (fs->addr[0] == '/')
        unlink(fs->addr);
    free(fs);
}

/* ---- commands ---- */

int fake_send_cmd_bytes(struct fake_svc *fs, const uint8_t *buf, size_t len, int fd)
{
    if (!fs->async_call)
        return -1;
    return tg_ipc_call_reply_bytes(fs->async_call, buf, len, 1, fd);
}

static int send_cmd(struct fake_svc *fs, const Perfetto__Protos__GetAsyncCommandResponse *r, int fd)
{
    size_t n = perfetto__protos__get_async_command_response__get_packed_size(r);
    uint8_t *buf = malloc(n ? n : 1);
    perfetto__protos__get_async_command_response__pack(r, buf);
    int rc = fake_send_cmd_bytes(fs, buf, n, fd);
    free(buf);
    return rc;
}

int fake_setup_tracing(struct fake_svc *fs, uint32_t page_kb, size_t smb_size)
{
    int fd = -1;
    if (!fs->emulation) {
        fd = memfd_create("perfetto_shmem", MFD_CLOEXEC | MFD_ALLOW_SEALING);
        if (fd < 0 || ftruncate(fd, (off_t)smb_size) != 0)
            return -1;
        if (!fs->unsealed_smb && fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0)
            return -1;
        fs->smb_mem = mmap(NULL, smb_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (fs->smb_mem == MAP_FAILED) {
            fs->smb_mem = NULL;
            return -1;
        }
        fs->smb_fd = fd;
        fs->smb_size = smb_size;
        if (tg_smb_init(&fs->smb, fs->smb_mem, smb_size, page_kb * 1024u) != TG_SMB_OK)
            return -1;
    }
    Perfetto__Protos__GetAsyncCommandResponse r = PERFETTO__PROTOS__GET_ASYNC_COMMAND_RESPONSE__INIT;
    Perfetto__Protos__GetAsyncCommandResponse__SetupTracing st =
        PERFETTO__PROTOS__GET_ASYNC_COMMAND_RESPONSE__SETUP_TRACING__INIT;
    st.has_shared_buffer_page_size_kb = 1;
    st.shared_buffer_page_size_kb = page_kb;
    r.cmd_case = PERFETTO__PROTOS__GET_ASYNC_COMMAND_RESPONSE__CMD_SETUP_TRACING;
    r.setup_tracing = &st;
    return send_cmd(fs, &r, fd);
}

int fake_start_ds(struct fake_svc *fs, uint64_t inst, const char *name, uint32_t target_buffer)
{
    Perfetto__Protos__DataSourceConfig cfg = PERFETTO__PROTOS__DATA_SOURCE_CONFIG__INIT;
    cfg.name = (char *)name;
    cfg.has_target_buffer = 1;
    cfg.target_buffer = target_buffer;
    cfg.has_tracing_session_id = 1;
    cfg.tracing_session_id = 1;
    cfg.has_stop_timeout_ms = 1;
    cfg.stop_timeout_ms = 5000;
    if (fs->ds_policy > 0) {
        cfg.has_buffer_exhausted_policy = 1;
        cfg.buffer_exhausted_policy = (Perfetto__Protos__DataSourceConfig__BufferExhaustedPolicy)fs->ds_policy;
    }
    Perfetto__Protos__GetAsyncCommandResponse r = PERFETTO__PROTOS__GET_ASYNC_COMMAND_RESPONSE__INIT;
    Perfetto__Protos__GetAsyncCommandResponse__SetupDataSource su =
        PERFETTO__PROTOS__GET_ASYNC_COMMAND_RESPONSE__SETUP_DATA_SOURCE__INIT;
    su.has_new_instance_id = 1;
    su.new_instance_id = inst;
    su.config = &cfg;
    r.cmd_case = PERFETTO__PROTOS__GET_ASYNC_COMMAND_RESPONSE__CMD_SETUP_DATA_SOURCE;
    r.setup_data_source = &su;
    if (send_cmd(fs, &r, -1) != 0)
        return -1;
    Perfetto__Protos__GetAsyncCommandResponse__StartDataSource sd =
        PERFETTO__PROTOS__GET_ASYNC_COMMAND_RESPONSE__START_DATA_SOURCE__INIT;
    sd.has_new_instance_id = 1;
    sd.new_instance_id = inst;
    sd.config = &cfg;
    r.cmd_case = PERFETTO__PROTOS__GET_ASYNC_COMMAND_RESPONSE__CMD_START_DATA_SOURCE;
    r.start_data_source = &sd;
    return send_cmd(fs, &r, -1);
}

int fake_stop_ds(struct fake_svc *fs, uint64_t inst)
{
    Perfetto__Protos__GetAsyncCommandResponse r = PERFETTO__PROTOS__GET_ASYNC_COMMAND_RESPONSE__INIT;
    Perfetto__Protos__GetAsyncCommandResponse__StopDataSource s =
        PERFETTO__PROTOS__GET_ASYNC_COMMAND_RESPONSE__STOP_DATA_SOURCE__INIT;
    s.has_instance_id = 1;
    s.instance_id = inst;
    r.cmd_case = PERFETTO__PROTOS__GET_ASYNC_COMMAND_RESPONSE__CMD_STOP_DATA_SOURCE;
    r.stop_data_source = &s;
    return send_cmd(fs, &r, -1);
}

int fake_flush(struct fake_svc *fs, const uint64_t *ids, size_t n, uint64_t request_id)
{
    Perfetto__Protos__GetAsyncCommandResponse r = PERFETTO__PROTOS__GET_ASYNC_COMMAND_RESPONSE__INIT;
    Perfetto__Protos__GetAsyncCommandResponse__Flush f = PERFETTO__PROTOS__GET_ASYNC_COMMAND_RESPONSE__FLUSH__INIT;
    f.n_data_source_ids = n;
    f.data_source_ids = (uint64_t *)ids;
    f.has_request_id = 1;
    f.request_id = request_id;
    f.has_flags = 1;
    f.flags = 0x14; /* explicit, initiator traced */
    r.cmd_case = PERFETTO__PROTOS__GET_ASYNC_COMMAND_RESPONSE__CMD_FLUSH;
    r.flush = &f;
    return send_cmd(fs, &r, -1);
}

int fake_clear_incremental(struct fake_svc *fs, uint64_t inst)
{
    Perfetto__Protos__GetAsyncCommandResponse r = PERFETTO__PROTOS__GET_ASYNC_COMMAND_RESPONSE__INIT;
    Perfetto__Protos__GetAsyncCommandResponse__ClearIncrementalState c =
        PERFETTO__PROTOS__GET_ASYNC_COMMAND_RESPONSE__CLEAR_INCREMENTAL_STATE__INIT;
    c.n_data_source_ids = 1;
    c.data_source_ids = &inst;
    r.cmd_case = PERFETTO__PROTOS__GET_ASYNC_COMMAND_RESPONSE__CMD_CLEAR_INCREMENTAL_STATE;
    r.clear_incremental_state = &c;
    return send_cmd(fs, &r, -1);
}

/* ---- packets ---- */

uint8_t *make_test_packet(uint64_t ts, int type, const char *name, uint64_t track_uuid, int64_t counter,
                          size_t blob_len, size_t *len_out)
{
    Perfetto__Protos__TracePacket pkt = PERFETTO__PROTOS__TRACE_PACKET__INIT;
    Perfetto__Protos__TrackEvent te = PERFETTO__PROTOS__TRACK_EVENT__INIT;
    Perfetto__Protos__DebugAnnotation da = PERFETTO__PROTOS__DEBUG_ANNOTATION__INIT;
    Perfetto__Protos__DebugAnnotation *das[1] = {&da};
    char *blob = NULL;
    pkt.has_timestamp = 1;
    pkt.timestamp = ts;
    pkt.data_case = PERFETTO__PROTOS__TRACE_PACKET__DATA_TRACK_EVENT;
    pkt.track_event = &te;
    te.has_type = 1;
    te.type = (Perfetto__Protos__TrackEvent__Type)type;
    if (track_uuid) {
        te.has_track_uuid = 1;
        te.track_uuid = track_uuid;
    }
    if (name) {
        te.name_field_case = PERFETTO__PROTOS__TRACK_EVENT__NAME_FIELD_NAME;
        te.name = (char *)name;
    }
    if (type == PERFETTO__PROTOS__TRACK_EVENT__TYPE__TYPE_COUNTER) {
        te.counter_value_field_case = PERFETTO__PROTOS__TRACK_EVENT__COUNTER_VALUE_FIELD_COUNTER_VALUE;
        te.counter_value = counter;
    }
    if (blob_len) {
        blob = malloc(blob_len + 1);
        memset(blob, 'x', blob_len);
        blob[blob_len] = '\0';
        da.name_field_case = PERFETTO__PROTOS__DEBUG_ANNOTATION__NAME_FIELD_NAME;
        da.name = (char *)"blob";
        da.value_case = PERFETTO__PROTOS__DEBUG_ANNOTATION__VALUE_STRING_VALUE;
        da.string_value = blob;
        te.n_debug_annotations = 1;
        te.debug_annotations = das;
    }
    size_t n = perfetto__protos__trace_packet__get_packed_size(&pkt);
    uint8_t *buf = malloc(n ? n : 1);
    perfetto__protos__trace_packet__pack(&pkt, buf);
    free(blob);
    *len_out = n;
    return buf;
}
