/* gw_smb_bridge.c: copy emulated (inline) chunks of remote producers into a real SMB and rewrite CommitData. */
#include "gw_smb_bridge.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "commit_data_request.pb-c.h"
#include "producer_port.pb-c.h"
#include "smb/smb_abi.h"
#include "smb/smb_fd.h"
#include "tracegate/ipc_wire.h"
#include "tracegate/pbwire.h"

struct tg_smb_bridge {
    int fd;
    void *map;
    size_t map_size;
    struct tg_smb smb;
    int have_smb;
    size_t cursor;
    struct tg_smb_bridge_stats stats;
};

struct tg_smb_bridge *tg_smb_bridge_new(void)
{
    struct tg_smb_bridge *b = calloc(1, sizeof *b);
    if (b)
        b->fd = -1;
    return b;
}

static void unmap(struct tg_smb_bridge *b)
{
    if (b->map)
        munmap(b->map, b->map_size);
    if (b->fd >= 0)
        close(b->fd);
    b->map = NULL;
    b->fd = -1;
    b->have_smb = 0;
}

void tg_smb_bridge_free(struct tg_smb_bridge *b)
{
    if (!b)
        return;
    unmap(b);
    free(b);
}

void tg_smb_bridge_get_stats(const struct tg_smb_bridge *b, struct tg_smb_bridge_stats *st) { *st = b->stats; }
int tg_smb_bridge_has_smb(const struct tg_smb_bridge *b) { return b->have_smb; }

/* Re-encodes a reply frame with a new reply_proto. */
static int encode_reply(const struct tg_frame_info *fi, const ProtobufCMessage *msg, uint8_t **out, size_t *out_len)
{
    size_t n = protobuf_c_message_get_packed_size(msg);
    uint8_t *payload = malloc(n ? n : 1);
    if (!payload)
        return -1;
    protobuf_c_message_pack(msg, payload);
    size_t need = tg_ipc_encode_reply(NULL, 0, fi->request_id, fi->success, fi->has_more, payload, n);
    *out = malloc(need);
    if (!*out) {
        free(payload);
        return -1;
    }
    *out_len = tg_ipc_encode_reply(*out, need, fi->request_id, fi->success, fi->has_more, payload, n);
    free(payload);
    return 0;
}

/* protobuf-c keeps a field it cannot name, even field 0 (no valid protobuf has one), and writes it
 * back when the message is re-encoded, where its own decoder then refuses it: a request carrying
 * one is refused before anything is taken from the SMB, instead of becoming a rewrite nobody can
 * read. Unknown fields with real numbers (a newer SDK's) are kept and pass through. */
static int unknown_ok(const ProtobufCMessage *m)
{
    for (unsigned i = 0; i < m->n_unknown_fields; i++)
        if (m->unknown_fields[i].tag == 0)
            return 0;
    return 1;
}

static int fields_survive_rewrite(const Perfetto__Protos__CommitDataRequest *r)
{
    if (!unknown_ok(&r->base))
        return 0;
    for (size_t i = 0; i < r->n_chunks_to_move; i++)
        if (!unknown_ok(&r->chunks_to_move[i]->base))
            return 0;
    for (size_t i = 0; i < r->n_chunks_to_patch; i++) {
        if (!unknown_ok(&r->chunks_to_patch[i]->base))
            return 0;
        for (size_t j = 0; j < r->chunks_to_patch[i]->n_patches; j++)
            if (!unknown_ok(&r->chunks_to_patch[i]->patches[j]->base))
                return 0;
    }
    return 1;
}

/* InitializeConnection reply: the remote producer must use emulation. */
static enum tg_smbb_verdict rewrite_init_reply(const struct tg_frame_info *fi, uint8_t **out, size_t *out_len,
                                               char *err, size_t errlen)
{
    if (!fi->success)
        return TG_SMBB_FORWARD;
    Perfetto__Protos__InitializeConnectionResponse *r =
        perfetto__protos__initialize_connection_response__unpack(NULL, fi->payload_len, fi->payload);
    if (!r) {
        snprintf(err, errlen, "undecodable InitializeConnectionResponse from the service");
        return TG_SMBB_ERROR;
    }
    r->has_use_shmem_emulation = 1;
    r->use_shmem_emulation = 1;
    r->has_using_shmem_provided_by_producer = 1;
    r->using_shmem_provided_by_producer = 0;
    int rc = encode_reply(fi, &r->base, out, out_len);
    perfetto__protos__initialize_connection_response__free_unpacked(r, NULL);
    if (rc != 0) {
        snprintf(err, errlen, "out of memory");
        return TG_SMBB_ERROR;
    }
    /* protobuf-c keeps fields it cannot name (even field 0) and writes them back after ours: a
     * reply that no longer decodes would leave the producer without the emulation it must use */
    struct tg_frame_info fo;
    Perfetto__Protos__InitializeConnectionResponse *check =
        tg_frame_scan(*out, *out_len, &fo) == 0
            ? perfetto__protos__initialize_connection_response__unpack(NULL, fo.payload_len, fo.payload)
            : NULL;
    if (!check) {
        free(*out);
        *out = NULL;
        snprintf(err, errlen, "undecodable InitializeConnectionResponse from the service");
        return TG_SMBB_ERROR;
    }
    perfetto__protos__initialize_connection_response__free_unpacked(check, NULL);
    return TG_SMBB_REPLACED;
}

/* GetAsyncCommand reply carrying SetupTracing: keep the SMB for ourselves. */
static enum tg_smbb_verdict take_setup_tracing(struct tg_smb_bridge *b, const struct tg_frame_info *fi, int fd,
                                               char *err, size_t errlen)
{
    Perfetto__Protos__GetAsyncCommandResponse *r =
        fi->success ? perfetto__protos__get_async_command_response__unpack(NULL, fi->payload_len, fi->payload)
                    : NULL;
    int is_setup = r && r->cmd_case == PERFETTO__PROTOS__GET_ASYNC_COMMAND_RESPONSE__CMD_SETUP_TRACING;
    size_t page_kb = is_setup && r->setup_tracing->has_shared_buffer_page_size_kb
                         ? r->setup_tracing->shared_buffer_page_size_kb
                         : 4;
    if (r)
        perfetto__protos__get_async_command_response__free_unpacked(r, NULL);
    if (!is_setup || fd < 0) {
        if (fd >= 0)
            close(fd);
        return TG_SMBB_FORWARD;
    }
    size_t size;
    const char *why;
    if (tg_smb_fd_check(fd, &size, &why) != 0) {
        /* a file the upstream could shrink under the mapping would make the gateway's next copy
         * into it SIGBUS, taking every client down */
        close(fd);
        snprintf(err, errlen, "the service sent an unusable SMB descriptor: %s", why);
        return TG_SMBB_ERROR;
    }
    void *map = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (map == MAP_FAILED) {
        close(fd);
        snprintf(err, errlen, "cannot map the SMB");
        return TG_SMBB_ERROR;
    }
    unmap(b);
    b->fd = fd;
    b->map = map;
    b->map_size = size;
    if (tg_smb_init(&b->smb, map, b->map_size, page_kb * 1024) != TG_SMB_OK) {
        unmap(b);
        snprintf(err, errlen, "the service's SMB has an invalid geometry");
        return TG_SMBB_ERROR;
    }
    b->have_smb = 1;
    b->cursor = 0;
    return TG_SMBB_FORWARD; /* the producer still needs SetupTracing (no fd can reach it) */
}

enum tg_smbb_verdict tg_smb_bridge_from_service(struct tg_smb_bridge *b, const char *method,
                                                const struct tg_frame_info *fi, int fd, uint8_t **out,
                                                size_t *out_len, char *err, size_t errlen)
{
    if (fi->msg != TG_MSG_INVOKE_METHOD_REPLY || !method) {
        if (fd >= 0)
            close(fd);
        return TG_SMBB_FORWARD;
    }
    if (strcmp(method, "InitializeConnection") == 0) {
        if (fd >= 0)
            close(fd);
        return rewrite_init_reply(fi, out, out_len, err, errlen);
    }
    if (strcmp(method, "GetAsyncCommand") == 0)
        return take_setup_tracing(b, fi, fd, err, errlen);
    if (fd >= 0)
        close(fd);
    return TG_SMBB_FORWARD;
}

/* What the bridge does with one ChunksToMove of a remote producer. */
enum move_kind {
    MOVE_PASS,   /* no data or no target buffer: left as it is (the service discards it unread) */
    MOVE_COPY,   /* a finished chunk: copied into a free SMB chunk and renamed */
    MOVE_INLINE, /* chunk_incomplete: stays inline, padded to the SMB's chunk size */
};

static enum move_kind move_kind(const Perfetto__Protos__CommitDataRequest__ChunksToMove *m)
{
    if (!m->has_data || !m->has_target_buffer)
        return MOVE_PASS;
    return m->has_chunk_incomplete && m->chunk_incomplete ? MOVE_INLINE : MOVE_COPY;
}

/* A chunk the producer scraped while still writing it (chunk_incomplete) is
 * committed again, complete and with more fragments, once it is finished.
 * Only an inline commit can tell the service that this copy is incomplete (a
 * chunk named in the SMB is read as complete, and a complete chunk cannot
 * grow: the later copy would be refused and its packets lost). So it stays
 * inline, zero-padded to the SMB's chunk size like every copied chunk, so
 * that both copies of the chunk have the same size; `page` is set to 0, a
 * page every service accepts (it is informational for inline data). */
static int keep_inline(Perfetto__Protos__CommitDataRequest__ChunksToMove *m, size_t chunk_size)
{
    if (m->data.len < chunk_size) {
        uint8_t *padded = calloc(1, chunk_size);
        if (!padded)
            return -1;
        memcpy(padded, m->data.data, m->data.len);
        free(m->data.data);
        m->data.data = padded;
        m->data.len = chunk_size;
    }
    m->has_page = 1;
    m->page = 0;
    return 0;
}

enum tg_smbb_verdict tg_smb_bridge_from_producer(struct tg_smb_bridge *b, const char *method,
                                                 const struct tg_frame_info *fi, uint8_t **out, size_t *out_len,
                                                 char *err, size_t errlen)
{
    if (fi->msg == TG_MSG_SET_PEER_IDENTITY)
        return TG_SMBB_FORWARD; /* the gateway core decides about these */
    if (fi->msg != TG_MSG_INVOKE_METHOD || !method || strcmp(method, "CommitData") != 0)
        return TG_SMBB_FORWARD;
    Perfetto__Protos__CommitDataRequest *req =
        perfetto__protos__commit_data_request__unpack(NULL, fi->payload_len, fi->payload);
    if (!req || !fields_survive_rewrite(req)) {
        if (req)
            perfetto__protos__commit_data_request__free_unpacked(req, NULL);
        snprintf(err, errlen, "undecodable CommitData from the producer");
        return TG_SMBB_ERROR;
    }
    /* An inline chunk without a target buffer is left as it is: the service
     * discards it without looking at the SMB (copied, it would stay Complete
     * in the SMB forever). */
    size_t n_copy = 0, n_incomplete = 0;
    for (size_t i = 0; i < req->n_chunks_to_move; i++) {
        const Perfetto__Protos__CommitDataRequest__ChunksToMove *m = req->chunks_to_move[i];
        if (m->has_data && m->data.len < TG_SMB_CHUNK_HEADER_SIZE) {
            snprintf(err, errlen, "inline chunk of %zu bytes is shorter than a chunk header", m->data.len);
            perfetto__protos__commit_data_request__free_unpacked(req, NULL);
            return TG_SMBB_ERROR;
        }
        n_copy += move_kind(m) == MOVE_COPY;
        n_incomplete += move_kind(m) == MOVE_INLINE;
    }
    if (n_copy == 0 && n_incomplete == 0) { /* patches and flush acks only */
        perfetto__protos__commit_data_request__free_unpacked(req, NULL);
        return TG_SMBB_FORWARD;
    }
    if (!b->have_smb) {
        perfetto__protos__commit_data_request__free_unpacked(req, NULL);
        snprintf(err, errlen, "CommitData with chunk data before the service set up tracing");
        return TG_SMBB_ERROR;
    }
    const size_t chunk_size = tg_smb_chunk_size(b->smb.page_size, TG_SMB_LAYOUT_DIV1);
    /* Incomplete chunks grow to the SMB's chunk size (keep_inline): a request of tiny ones would
     * grow thousands of times over (8 bytes each to 64 KiB pages: one 128 KiB frame became
     * 500 MB) and no service takes a frame over TG_FRAME_MAX_DEFAULT. A request that would not fit
     * is split into one request per inline chunk; one chunk that alone would not fit is refused. */
    if (n_incomplete && fi->payload_len + n_incomplete * (chunk_size + 32u) + 64u > TG_FRAME_MAX_DEFAULT) {
        perfetto__protos__commit_data_request__free_unpacked(req, NULL);
        if (n_copy + n_incomplete > 1)
            return TG_SMBB_RETRY;
        snprintf(err, errlen, "an incomplete inline chunk padded to the SMB's %zu-byte chunks does not fit an IPC frame",
                 chunk_size);
        return TG_SMBB_ERROR;
    }
    for (size_t i = 0; i < req->n_chunks_to_move; i++) {
        Perfetto__Protos__CommitDataRequest__ChunksToMove *m = req->chunks_to_move[i];
        if (move_kind(m) != MOVE_INLINE)
            continue;
        if (m->data.len > chunk_size)
            snprintf(err, errlen, "inline chunk of %zu bytes does not fit the SMB's %zu-byte chunks", m->data.len,
                     chunk_size);
        else if (keep_inline(m, chunk_size) != 0)
            snprintf(err, errlen, "out of memory");
        else
            continue;
        perfetto__protos__commit_data_request__free_unpacked(req, NULL);
        return TG_SMBB_ERROR;
    }

    /* Take every chunk we need first; if the SMB cannot hold them all, give
     * them back untouched and ask the caller to retry (all or nothing). */
    struct slot {
        size_t page;
        unsigned chunk;
        uint8_t *ptr;
        size_t size;
    } *slots = calloc(n_copy ? n_copy : 1, sizeof *slots);
    if (!slots) {
        perfetto__protos__commit_data_request__free_unpacked(req, NULL);
        snprintf(err, errlen, "out of memory");
        return TG_SMBB_ERROR;
    }
    enum tg_smbb_verdict verdict = TG_SMBB_REPLACED;
    size_t taken = 0;
    for (size_t i = 0; i < req->n_chunks_to_move && verdict == TG_SMBB_REPLACED; i++) {
        Perfetto__Protos__CommitDataRequest__ChunksToMove *m = req->chunks_to_move[i];
        if (move_kind(m) != MOVE_COPY)
            continue;
        if (m->data.len < TG_SMB_CHUNK_HEADER_SIZE) {
            snprintf(err, errlen, "inline chunk of %zu bytes is shorter than a chunk header", m->data.len);
            verdict = TG_SMBB_ERROR;
            break;
        }
        struct tg_smb_chunk_header hdr;
        tg_smb_chunk_header_decode(m->data.data, &hdr);
        hdr.packets = 0; /* published below, after the payload */
        /* the smallest chunk that holds it: a small chunk does not take (and make the service copy)
         * a whole page, and more of a producer's chunks fit the SMB at once */
        int rc = tg_smb_find_free_chunk_fit(&b->smb, m->data.len, &b->cursor, &hdr, &slots[taken].page,
                                            &slots[taken].chunk, &slots[taken].ptr, &slots[taken].size);
        if (rc == TG_SMB_EINVAL) {
            snprintf(err, errlen, "inline chunk of %zu bytes does not fit the SMB's %zu-byte chunks", m->data.len,
                     tg_smb_chunk_size(b->smb.page_size, TG_SMB_LAYOUT_DIV1));
            verdict = TG_SMBB_ERROR;
            break;
        }
        if (rc != TG_SMB_OK) {
            verdict = TG_SMBB_RETRY;
            break;
        }
        taken++;
    }
    if (verdict != TG_SMBB_REPLACED) {
        for (size_t i = 0; i < taken; i++) { /* BeingWritten -> Complete -> Free, header zeroed */
            memset(slots[i].ptr, 0, TG_SMB_CHUNK_HEADER_SIZE);
            tg_smb_release_chunk_as_complete(&b->smb, slots[i].page, slots[i].chunk);
            tg_smb_release_complete_chunk_as_free(&b->smb, slots[i].page, slots[i].chunk);
        }
        if (verdict == TG_SMBB_RETRY)
            b->stats.retries++;
        free(slots);
        perfetto__protos__commit_data_request__free_unpacked(req, NULL);
        return verdict;
    }

    /* Copy the payloads, publish the packets word, complete, and rename. */
    size_t k = 0;
    for (size_t i = 0; i < req->n_chunks_to_move; i++) {
        Perfetto__Protos__CommitDataRequest__ChunksToMove *m = req->chunks_to_move[i];
        if (move_kind(m) != MOVE_COPY)
            continue;
        struct slot *s = &slots[k++];
        size_t len = m->data.len;
        memcpy(s->ptr + TG_SMB_CHUNK_HEADER_SIZE, m->data.data + TG_SMB_CHUNK_HEADER_SIZE,
               len - TG_SMB_CHUNK_HEADER_SIZE);
        if (len < s->size)
            memset(s->ptr + len, 0, s->size - len);
        uint16_t packets = (uint16_t)(m->data.data[6] | m->data.data[7] << 8);
        tg_smb_chunk_store_packets(s->ptr, packets);
        tg_smb_release_chunk_as_complete(&b->smb, s->page, s->chunk);
        b->stats.chunks_copied++;
        b->stats.bytes_copied += len;
        free(m->data.data);
        m->data.data = NULL;
        m->data.len = 0;
        m->has_data = 0;
        m->has_chunk_incomplete = 0;
        m->has_page = 1;
        m->page = (uint32_t)s->page;
        m->has_chunk = 1;
        m->chunk = s->chunk;
    }
    free(slots);

    size_t args_len = perfetto__protos__commit_data_request__get_packed_size(req);
    uint8_t *args = malloc(args_len ? args_len : 1);
    if (!args) {
        perfetto__protos__commit_data_request__free_unpacked(req, NULL);
        snprintf(err, errlen, "out of memory");
        return TG_SMBB_ERROR;
    }
    perfetto__protos__commit_data_request__pack(req, args);
    perfetto__protos__commit_data_request__free_unpacked(req, NULL);
    size_t need = tg_ipc_encode_invoke(NULL, 0, fi->request_id, fi->service_id, fi->method_id, args, args_len,
                                       fi->drop_reply);
    *out = malloc(need);
    if (!*out) {
        free(args);
        snprintf(err, errlen, "out of memory");
        return TG_SMBB_ERROR;
    }
    *out_len = tg_ipc_encode_invoke(*out, need, fi->request_id, fi->service_id, fi->method_id, args, args_len,
                                    fi->drop_reply);
    free(args);
    b->stats.commits_rewritten++;
    return TG_SMBB_REPLACED;
}
