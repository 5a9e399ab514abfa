/* producer_port.c: the ProducerPort IPC service (12 methods, traced's
 * semantics from perfetto-wire-facts §2): connection setup and SMB choice,
 * data source registration, the GetAsyncCommand stream, trace writers,
 * notifications, triggers and Sync. CommitData itself is in commit.c. */
#include "service/svc.h"

#include "tracegate/log.h"
#include "tracegate/pbwire.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---------------------------------------------------------- helpers */

static char *dup_str(const char *s)
{
    return strdup(s ? s : "");
}

void tg_svc_producer_allow_buffer(tg_svc_producer *p, uint16_t buffer_id)
{
    if (tg_svc_producer_buffer_allowed(p, buffer_id))
        return;
    if (p->n_allowed == p->cap_allowed) {
        size_t ncap = p->cap_allowed ? p->cap_allowed * 2 : 8;
        uint16_t *n = realloc(p->allowed, ncap * sizeof *n);
        if (!n)
            return;
        p->allowed = n;
        p->cap_allowed = ncap;
    }
    p->allowed[p->n_allowed++] = buffer_id;
}

void tg_svc_producer_disallow_buffer(tg_svc_producer *p, uint16_t buffer_id)
{
    for (size_t i = 0; i < p->n_allowed; i++) {
        if (p->allowed[i] == buffer_id) {
            p->allowed[i] = p->allowed[--p->n_allowed];
            return;
        }
    }
}

bool tg_svc_producer_buffer_allowed(const tg_svc_producer *p, uint32_t buffer_id)
{
    for (size_t i = 0; i < p->n_allowed; i++)
        if (p->allowed[i] == buffer_id)
            return true;
    return false;
}

/* ---------------------------------------------------------- async commands */

static void send_or_queue(tg_svc_producer *p, uint8_t *data, size_t len, int with_smb_fd)
{
    if (p->async && !p->cmds) {
        int fd = with_smb_fd && p->smb.fd >= 0 ? p->smb.fd : -1;
        tg_ipc_call_reply_bytes(p->async, data, len, 1, fd);
        free(data);
        return;
    }
    if (p->n_cmds >= TG_SVC_MAX_QUEUED_CMDS) {
        free(data);
        if (!p->cmds_refused) { /* once: the close is on its way */
            p->cmds_refused = true;
            tg_warn(TG_SVC_LOG, "producer %u (%s): %u commands queued and GetAsyncCommand never opened: disconnecting",
                    p->id, p->name ? p->name : "?", TG_SVC_MAX_QUEUED_CMDS);
            tg_ipc_peer_disconnect(p->peer, "too many commands queued: the producer never asked for them");
        }
        return;
    }
    struct tg_svc_cmd *c = calloc(1, sizeof *c);
    if (!c) {
        free(data);
        return;
    }
    c->data = data;
    c->len = len;
    c->with_smb_fd = with_smb_fd;
    *p->cmds_tail = c;
    p->cmds_tail = &c->next;
    p->n_cmds++;
}

static void flush_cmds(tg_svc_producer *p)
{
    while (p->async && p->cmds) {
        struct tg_svc_cmd *c = p->cmds;
        p->cmds = c->next;
        if (!p->cmds)
            p->cmds_tail = &p->cmds;
        p->n_cmds--;
        int fd = c->with_smb_fd && p->smb.fd >= 0 ? p->smb.fd : -1;
        tg_ipc_call_reply_bytes(p->async, c->data, c->len, 1, fd);
        free(c->data);
        free(c);
    }
}

static void send_packed(tg_svc_producer *p, const Perfetto__Protos__GetAsyncCommandResponse *cmd, int with_fd)
{
    size_t n = protobuf_c_message_get_packed_size(&cmd->base);
    uint8_t *buf = malloc(n ? n : 1);
    if (!buf)
        return;
    protobuf_c_message_pack(&cmd->base, buf);
    send_or_queue(p, buf, n, with_fd);
}

void tg_svc_producer_send_cmd(tg_svc_producer *p, const Perfetto__Protos__GetAsyncCommandResponse *cmd)
{
    send_packed(p, cmd, 0);
}

/* Setup/StartDataSource carry the already rewritten config bytes as-is. */
void tg_svc_producer_send_ds_cmd(tg_svc_producer *p, int start, uint64_t instance_id, const uint8_t *cfg,
                                 size_t cfg_len)
{
    uint8_t inner_hdr[32];
    size_t ih = 0;
    ih += tg_pb_put_tag(inner_hdr + ih, 1, TG_PB_VARINT);
    ih += tg_pb_put_varint(inner_hdr + ih, instance_id);
    ih += tg_pb_put_tag(inner_hdr + ih, 2, TG_PB_LEN);
    ih += tg_pb_put_varint(inner_hdr + ih, cfg_len);
    size_t inner = ih + cfg_len;
    uint8_t outer_hdr[16];
    size_t oh = tg_pb_put_tag(outer_hdr, start ? 1 : 6, TG_PB_LEN);
    oh += tg_pb_put_varint(outer_hdr + oh, inner);
    uint8_t *buf = malloc(oh + inner);
    if (!buf)
        return;
    memcpy(buf, outer_hdr, oh);
    memcpy(buf + oh, inner_hdr, ih);
    if (cfg_len)
        memcpy(buf + oh + ih, cfg, cfg_len);
    send_or_queue(p, buf, oh + inner, 0);
}

int tg_svc_producer_setup_tracing(tg_svc_producer *p, const Perfetto__Protos__TraceConfig *cfg)
{
    if (p->setup_tracing_sent)
        return 0;
    size_t size = p->size_hint, page = p->page_hint;
    for (size_t i = 0; cfg && i < cfg->n_producers; i++) {
        const Perfetto__Protos__TraceConfig__ProducerConfig *pc = cfg->producers[i];
        if (pc->producer_name && strcmp(pc->producer_name, p->name) == 0) {
            if (pc->has_shm_size_kb && pc->shm_size_kb)
                size = (size_t)pc->shm_size_kb * 1024u;
            if (pc->has_page_size_kb && pc->page_size_kb)
                page = (size_t)pc->page_size_kb * 1024u;
        }
    }
    tg_smb_sanitize_sizes(&size, &page);
    Perfetto__Protos__GetAsyncCommandResponse cmd = PERFETTO__PROTOS__GET_ASYNC_COMMAND_RESPONSE__INIT;
    Perfetto__Protos__GetAsyncCommandResponse__SetupTracing st =
        PERFETTO__PROTOS__GET_ASYNC_COMMAND_RESPONSE__SETUP_TRACING__INIT;
    cmd.cmd_case = PERFETTO__PROTOS__GET_ASYNC_COMMAND_RESPONSE__CMD_SETUP_TRACING;
    cmd.setup_tracing = &st;
    int with_fd = 0;
    if (p->smb_from_producer) {
        /* adopted: SetupTracing with no fields and no fd */
    } else if (p->emulation) {
        st.has_shared_buffer_page_size_kb = 1;
        st.shared_buffer_page_size_kb = (uint32_t)(page / 1024u);
    } else {
        char err[160];
        if (tg_smb_host_create(&p->smb, size, page, err, sizeof err) != 0) {
            tg_warn(TG_SVC_LOG, "producer %u (%s): %s", p->id, p->name, err);
            return -1;
        }
        st.has_shared_buffer_page_size_kb = 1;
        st.shared_buffer_page_size_kb = (uint32_t)(page / 1024u);
        with_fd = 1;
    }
    p->setup_tracing_sent = true;
    send_packed(p, &cmd, with_fd);
    return 0;
}

/* ---------------------------------------------------------- peer lifecycle */

static void *producer_open(tg_ipc_peer *peer, void *svc_ctx)
{
    tg_service *svc = svc_ctx;
    tg_svc_producer *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->svc = svc;
    p->peer = peer;
    p->cmds_tail = &p->cmds;
    tg_svc_peer_nodelay(peer);
    tg_smb_host_init(&p->smb);
    p->next = svc->producers;
    if (p->next)
        p->next->prev = p;
    svc->producers = p;
    return p;
}

static void producer_close(tg_ipc_peer *peer, void *state, void *svc_ctx)
{
    tg_service *svc = svc_ctx;
    tg_svc_producer *p = state;
    (void)peer;
    if (!p)
        return;
    p->async = NULL; /* the host frees the call */
    if (p->initialized) {
        tg_debug(TG_SVC_LOG, "producer %u (%s) disconnected", p->id, p->name);
        if (p->scraping && tg_smb_host_valid(&p->smb))
            tg_svc_scrape_producer(p, NULL);
        tg_svc_session_on_producer_gone(svc, p);
    }
    if (p->prev)
        p->prev->next = p->next;
    else
        svc->producers = p->next;
    if (p->next)
        p->next->prev = p->prev;
    if (p->id && svc->producer_index[p->id] == p)
        svc->producer_index[p->id] = NULL;
    while (p->cmds) {
        struct tg_svc_cmd *c = p->cmds;
        p->cmds = c->next;
        free(c->data);
        free(c);
    }
    while (p->sources) {
        struct tg_svc_ds_reg *r = p->sources;
        p->sources = r->next;
        protobuf_c_message_free_unpacked(&r->desc->base, NULL);
        free(r);
    }
    tg_smb_host_release(&p->smb);
    free(p->writer_buf);
    free(p->allowed);
    free(p->scratch);
    free(p->name);
    free(p->sdk_version);
    free(p->machine_name);
    free(p);
}

/* Every method but InitializeConnection needs an initialized producer. */
static tg_svc_producer *ready(tg_ipc_call *call, void *peer_state)
{
    tg_svc_producer *p = peer_state;
    if (!p || !p->initialized) {
        tg_ipc_call_reject(call);
        return NULL;
    }
    return p;
}

static uint16_t alloc_producer_id(tg_service *svc)
{
    for (unsigned tries = 0; tries < TG_SVC_MAX_PRODUCERS; tries++) {
        uint16_t id = (uint16_t)(svc->last_producer_id + 1);
        if (id == 0)
            id = 1;
        svc->last_producer_id = id;
        if (!tg_svc_producer_by_id(svc, id))
            return id;
    }
    return 0;
}

/* ---------------------------------------------------------- methods */

static void m_initialize_connection(tg_ipc_call *call, const ProtobufCMessage *msg, void *svc_ctx, void *peer_state)
{
    tg_service *svc = svc_ctx;
    tg_svc_producer *p = peer_state;
    const Perfetto__Protos__InitializeConnectionRequest *req = (const void *)msg;
    tg_ipc_peer *peer = tg_ipc_call_peer(call);
    int fd = tg_ipc_peer_take_fd(peer);
    if (!p || p->initialized) {
        if (fd >= 0)
            close(fd);
        tg_ipc_call_reject(call);
        return;
    }
    uint16_t id = alloc_producer_id(svc);
    if (!id) {
        if (fd >= 0)
            close(fd);
        tg_ipc_call_reject(call);
        return;
    }
    p->id = id;
    p->name = dup_str(req->producer_name);
    p->sdk_version = dup_str(req->sdk_version);
    p->uid = (int32_t)tg_ipc_peer_uid(peer);
    p->pid = (int32_t)tg_ipc_peer_pid(peer);
    p->machine_id = tg_ipc_peer_machine_id(peer);
    p->machine_name = dup_str(tg_ipc_peer_machine_name(peer));
    p->emulation = !tg_ipc_peer_is_unix(peer);
    p->scraping = req->has_smb_scraping_mode &&
                  req->smb_scraping_mode == PERFETTO__PROTOS__INITIALIZE_CONNECTION_REQUEST__PRODUCER_SMBSCRAPING_MODE__SMB_SCRAPING_ENABLED;
    p->page_hint = req->has_shared_memory_page_size_hint_bytes ? req->shared_memory_page_size_hint_bytes : 0;
    p->size_hint = req->has_shared_memory_size_hint_bytes ? req->shared_memory_size_hint_bytes : 0;
    if (req->has_producer_provided_shmem && req->producer_provided_shmem && fd >= 0 && !p->emulation) {
        if (tg_smb_host_adopt(&p->smb, fd, p->page_hint) == 0) {
            p->smb_from_producer = true;
        } else {
            tg_info(TG_SVC_LOG, "producer %u (%s): refusing its shared memory (bad seals or geometry)", id, p->name);
        }
        fd = -1;
    }
    if (fd >= 0)
        close(fd);
    p->initialized = true;
    svc->producer_index[id] = p;
    svc->producers_seen++;
    tg_info(TG_SVC_LOG, "producer %u connected: %s (uid %d pid %d machine %u%s)", id, p->name, p->uid, p->pid,
            p->machine_id, p->emulation ? ", shmem emulation" : "");

    Perfetto__Protos__InitializeConnectionResponse resp = PERFETTO__PROTOS__INITIALIZE_CONNECTION_RESPONSE__INIT;
    resp.has_using_shmem_provided_by_producer = 1;
    resp.using_shmem_provided_by_producer = p->smb_from_producer && !p->emulation;
    resp.has_direct_smb_patching_supported = 1;
    resp.direct_smb_patching_supported = 1;
    resp.has_use_shmem_emulation = 1;
    resp.use_shmem_emulation = p->emulation;
    tg_ipc_call_reply(call, &resp.base, 0, -1);
}

/* Descriptor copies are decoded with malloc through this counter, which adds each allocation's
 * size plus a typical allocator overhead: what the copy holds, not what it took on the wire. */
#define ALLOC_OVERHEAD 16u

static void *count_alloc(void *data, size_t size)
{
    *(size_t *)data += size + ALLOC_OVERHEAD;
    return malloc(size);
}

static void count_free(void *data, void *ptr)
{
    (void)data;
    free(ptr);
}

/* A copy of d (freed with protobuf_c_message_free_unpacked(.., NULL)) and the memory it holds. */
static Perfetto__Protos__DataSourceDescriptor *copy_desc(const Perfetto__Protos__DataSourceDescriptor *d,
                                                         size_t *held)
{
    size_t n = protobuf_c_message_get_packed_size(&d->base);
    uint8_t *buf = malloc(n ? n : 1);
    if (!buf)
        return NULL;
    protobuf_c_message_pack(&d->base, buf);
    *held = sizeof(struct tg_svc_ds_reg) + ALLOC_OVERHEAD;
    ProtobufCAllocator counting = {.alloc = count_alloc, .free = count_free, .allocator_data = held};
    Perfetto__Protos__DataSourceDescriptor *c = perfetto__protos__data_source_descriptor__unpack(&counting, n, buf);
    free(buf);
    return c;
}

/* NULL if a descriptor of `encoded` bytes whose copy holds `held` may replace one holding `old`
 * (0: none) among p's; else why not, logged once per producer. */
static const char *desc_refusal(tg_svc_producer *p, size_t encoded, size_t held, size_t old)
{
    const char *why = NULL;
    if (encoded > TG_SVC_MAX_DESCRIPTOR_BYTES)
        why = "data source descriptor too large (at most 64 KiB)";
    else if (p->desc_bytes - old + held > TG_SVC_MAX_DESCRIPTOR_MEMORY_PER_PRODUCER)
        why = "data source descriptors of this producer past 4 MiB";
    if (why && !p->desc_limit_logged) {
        p->desc_limit_logged = true;
        tg_warn(TG_SVC_LOG, "producer %u (%s): refused a data source descriptor of %zu bytes: %s (%zu bytes held)",
                p->id, p->name ? p->name : "?", encoded, why, p->desc_bytes);
    }
    return why;
}

static void reply_register_error(tg_ipc_call *call, const char *error)
{
    Perfetto__Protos__RegisterDataSourceResponse r = PERFETTO__PROTOS__REGISTER_DATA_SOURCE_RESPONSE__INIT;
    r.error = (char *)error;
    tg_ipc_call_reply(call, &r.base, 0, -1);
}

static void m_register_data_source(tg_ipc_call *call, const ProtobufCMessage *msg, void *svc_ctx, void *peer_state)
{
    tg_service *svc = svc_ctx;
    tg_svc_producer *p = ready(call, peer_state);
    if (!p)
        return;
    const Perfetto__Protos__RegisterDataSourceRequest *req = (const void *)msg;
    const Perfetto__Protos__DataSourceDescriptor *d = req->data_source_descriptor;
    if (d && d->name && *d->name && p->n_sources >= TG_SVC_MAX_DATA_SOURCES_PER_PRODUCER) {
        if (!p->ds_limit_logged) { /* once per producer */
            p->ds_limit_logged = true;
            tg_warn(TG_SVC_LOG, "producer %u (%s): refused data sources past %u", p->id, p->name ? p->name : "?",
                    TG_SVC_MAX_DATA_SOURCES_PER_PRODUCER);
        }
        reply_register_error(call, "too many data sources registered by this producer");
        return;
    }
    if (d && d->name && *d->name) {
        size_t encoded = protobuf_c_message_get_packed_size(&d->base), held = 0;
        const char *why = desc_refusal(p, encoded, 0, 0); /* before copying what is too large */
        struct tg_svc_ds_reg *r = why ? NULL : calloc(1, sizeof *r);
        Perfetto__Protos__DataSourceDescriptor *c = r ? copy_desc(d, &held) : NULL;
        if (c && (why = desc_refusal(p, encoded, held, 0)) != NULL) {
            protobuf_c_message_free_unpacked(&c->base, NULL);
            c = NULL;
        }
        if (why) {
            free(r);
            reply_register_error(call, why);
            return;
        }
        if (c) {
            r->desc = c;
            r->name = c->name;
            r->bytes = held;
            p->desc_bytes += held;
            p->n_sources++;
            struct tg_svc_ds_reg **tail = &p->sources;
            while (*tail)
                tail = &(*tail)->next;
            *tail = r;
            svc->data_sources_seen++;
            tg_debug(TG_SVC_LOG, "producer %u registered data source %s", p->id, r->name);
            tg_ipc_call_reply(call, NULL, 0, -1);
            tg_svc_session_on_producer_source(svc, p, r);
            return;
        }
        free(r);
    }
    tg_ipc_call_reply(call, NULL, 0, -1);
}

static void m_unregister_data_source(tg_ipc_call *call, const ProtobufCMessage *msg, void *svc_ctx, void *peer_state)
{
    tg_service *svc = svc_ctx;
    tg_svc_producer *p = ready(call, peer_state);
    if (!p)
        return;
    const Perfetto__Protos__UnregisterDataSourceRequest *req = (const void *)msg;
    const char *name = req->data_source_name ? req->data_source_name : "";
    for (struct tg_svc_ds_reg **pp = &p->sources; *pp; pp = &(*pp)->next) {
        if (strcmp((*pp)->name, name) == 0) {
            struct tg_svc_ds_reg *r = *pp;
            *pp = r->next;
            protobuf_c_message_free_unpacked(&r->desc->base, NULL);
            p->desc_bytes -= r->bytes;
            free(r);
            p->n_sources--;
            break;
        }
    }
    tg_svc_session_on_unregister_source(svc, p, name);
    tg_ipc_call_reply(call, NULL, 0, -1);
}

static void m_update_data_source(tg_ipc_call *call, const ProtobufCMessage *msg, void *svc_ctx, void *peer_state)
{
    tg_svc_producer *p = ready(call, peer_state);
    (void)svc_ctx;
    if (!p)
        return;
    const Perfetto__Protos__UpdateDataSourceRequest *req = (const void *)msg;
    const Perfetto__Protos__DataSourceDescriptor *d = req->data_source_descriptor;
    if (d && d->name) {
        for (struct tg_svc_ds_reg *r = p->sources; r; r = r->next) {
            if (strcmp(r->name, d->name) != 0 || r->desc->id != d->id)
                continue;
            /* the same limits as a registration; refused, the old descriptor stays */
            size_t encoded = protobuf_c_message_get_packed_size(&d->base), held = 0;
            Perfetto__Protos__DataSourceDescriptor *c =
                desc_refusal(p, encoded, 0, r->bytes) ? NULL : copy_desc(d, &held);
            if (c && desc_refusal(p, encoded, held, r->bytes)) {
                protobuf_c_message_free_unpacked(&c->base, NULL);
                c = NULL;
            }
            if (!c) {
                tg_ipc_call_reject(call);
                return;
            }
            protobuf_c_message_free_unpacked(&r->desc->base, NULL);
            r->desc = c;
            r->name = c->name;
            p->desc_bytes = p->desc_bytes - r->bytes + held;
            r->bytes = held;
            break;
        }
    }
    tg_ipc_call_reply(call, NULL, 0, -1);
}

static void m_commit_data(tg_ipc_call *call, const ProtobufCMessage *msg, void *svc_ctx, void *peer_state)
{
    tg_svc_producer *p = ready(call, peer_state);
    (void)svc_ctx;
    if (!p)
        return;
    tg_svc_commit_data(p, (const Perfetto__Protos__CommitDataRequest *)msg);
    tg_ipc_call_reply(call, NULL, 0, -1);
}

static void m_get_async_command(tg_ipc_call *call, const ProtobufCMessage *msg, void *svc_ctx, void *peer_state)
{
    tg_svc_producer *p = ready(call, peer_state);
    (void)msg;
    (void)svc_ctx;
    if (!p)
        return;
    if (p->async) {
        tg_ipc_call *old = p->async;
        p->async = NULL;
        tg_ipc_call_reply(old, NULL, 0, -1);
    }
    p->async = call;
    flush_cmds(p);
}

static void m_register_trace_writer(tg_ipc_call *call, const ProtobufCMessage *msg, void *svc_ctx, void *peer_state)
{
    tg_svc_producer *p = ready(call, peer_state);
    (void)svc_ctx;
    if (!p)
        return;
    const Perfetto__Protos__RegisterTraceWriterRequest *req = (const void *)msg;
    uint32_t w = req->trace_writer_id;
    if (w >= 1 && w <= TG_SMB_MAX_WRITER_ID && req->target_buffer < TG_SVC_NUM_BUFFER_IDS) {
        if (!p->writer_buf)
            p->writer_buf = calloc(TG_SMB_MAX_WRITER_ID + 1, sizeof *p->writer_buf);
        if (p->writer_buf)
            p->writer_buf[w] = (uint16_t)req->target_buffer;
    }
    tg_ipc_call_reply(call, NULL, 0, -1);
}

static void m_unregister_trace_writer(tg_ipc_call *call, const ProtobufCMessage *msg, void *svc_ctx, void *peer_state)
{
    tg_svc_producer *p = ready(call, peer_state);
    (void)svc_ctx;
    if (!p)
        return;
    const Perfetto__Protos__UnregisterTraceWriterRequest *req = (const void *)msg;
    if (p->writer_buf && req->trace_writer_id >= 1 && req->trace_writer_id <= TG_SMB_MAX_WRITER_ID)
        p->writer_buf[req->trace_writer_id] = 0;
    tg_ipc_call_reply(call, NULL, 0, -1);
}

static void m_notify_started(tg_ipc_call *call, const ProtobufCMessage *msg, void *svc_ctx, void *peer_state)
{
    tg_svc_producer *p = ready(call, peer_state);
    if (!p)
        return;
    const Perfetto__Protos__NotifyDataSourceStartedRequest *req = (const void *)msg;
    tg_ipc_call_reply(call, NULL, 0, -1);
    tg_svc_session_on_ds_started(svc_ctx, p, req->data_source_id);
}

static void m_notify_stopped(tg_ipc_call *call, const ProtobufCMessage *msg, void *svc_ctx, void *peer_state)
{
    tg_svc_producer *p = ready(call, peer_state);
    if (!p)
        return;
    const Perfetto__Protos__NotifyDataSourceStoppedRequest *req = (const void *)msg;
    tg_ipc_call_reply(call, NULL, 0, -1);
    tg_svc_session_on_ds_stopped(svc_ctx, p, req->data_source_id);
}

static void m_activate_triggers(tg_ipc_call *call, const ProtobufCMessage *msg, void *svc_ctx, void *peer_state)
{
    tg_svc_producer *p = ready(call, peer_state);
    if (!p)
        return;
    const Perfetto__Protos__ActivateTriggersRequest *req = (const void *)msg;
    tg_ipc_call_reply(call, NULL, 0, -1);
    tg_svc_activate_triggers(svc_ctx, req->trigger_names, req->n_trigger_names, p->name, p->uid);
}

static void m_sync(tg_ipc_call *call, const ProtobufCMessage *msg, void *svc_ctx, void *peer_state)
{
    (void)msg;
    (void)svc_ctx;
    /* Everything queued before it was handled in order on this thread. */
    if (ready(call, peer_state))
        tg_ipc_call_reply(call, NULL, 0, -1);
}

/* Declaration order of ProducerPort = method ids 1..12. */
static const struct tg_ipc_method k_methods[] = {
    {"InitializeConnection", &perfetto__protos__initialize_connection_request__descriptor, m_initialize_connection},
    {"RegisterDataSource", &perfetto__protos__register_data_source_request__descriptor, m_register_data_source},
    {"UnregisterDataSource", &perfetto__protos__unregister_data_source_request__descriptor, m_unregister_data_source},
    {"CommitData", &perfetto__protos__commit_data_request__descriptor, m_commit_data},
    {"GetAsyncCommand", &perfetto__protos__get_async_command_request__descriptor, m_get_async_command},
    {"RegisterTraceWriter", &perfetto__protos__register_trace_writer_request__descriptor, m_register_trace_writer},
    {"UnregisterTraceWriter", &perfetto__protos__unregister_trace_writer_request__descriptor,
     m_unregister_trace_writer},
    {"NotifyDataSourceStarted", &perfetto__protos__notify_data_source_started_request__descriptor, m_notify_started},
    {"NotifyDataSourceStopped", &perfetto__protos__notify_data_source_stopped_request__descriptor, m_notify_stopped},
    {"ActivateTriggers", &perfetto__protos__activate_triggers_request__descriptor, m_activate_triggers},
    {"Sync", &perfetto__protos__sync_request__descriptor, m_sync},
    {"UpdateDataSource", &perfetto__protos__update_data_source_request__descriptor, m_update_data_source},
};

const struct tg_ipc_service_def tg_svc_producer_port_def = {
    .name = "ProducerPort",
    .methods = k_methods,
    .n_methods = sizeof k_methods / sizeof k_methods[0],
    .peer_open = producer_open,
    .peer_close = producer_close,
};
