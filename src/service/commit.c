/* commit.c: CommitData handling and SMB scraping (perfetto-wire-facts §2.3,
 * §4.1, §5.4, §5.8). Chunks named in shared memory are moved
 * Complete -> BeingRead, their header copied out to private memory and
 * validated (writer id, target buffer this producer was given, the writer's
 * registered buffer), the payload copied once into the trace buffer (which
 * parses only its own copy), and then freed; inline (emulation) chunks are
 * validated the same way. Patches follow the moves, the flush ack
 * comes last. Nothing read from the SMB or the request is trusted. */
#include "service/svc.h"

#include "tracegate/log.h"

#include <stdlib.h>
#include <string.h>

#define MAX_PATCHES_PER_CHUNK 1024u

static uint8_t *scratch(tg_svc_producer *p, size_t need)
{
    if (need > p->scratch_cap) {
        uint8_t *n = realloc(p->scratch, need);
        if (!n)
            return NULL;
        p->scratch = n;
        p->scratch_cap = need;
    }
    return p->scratch;
}

/* The trace buffer a chunk may go to, or NULL (counted as discarded). */
static tg_svc_buffer *check_target(tg_svc_producer *p, uint32_t target, uint16_t writer_id)
{
    if (!tg_smb_writer_id_valid(writer_id))
        return NULL;
    if (!tg_svc_producer_buffer_allowed(p, target))
        return NULL;
    if (p->writer_buf && p->writer_buf[writer_id] && p->writer_buf[writer_id] != target)
        return NULL; /* the writer was registered for another buffer */
    tg_svc_buffer *b = tg_svc_buffer_get(p->svc, target);
    if (!b || !b->tb || b->s->read_only)
        return NULL;
    return b;
}

static void copy_into(tg_svc_producer *p, tg_svc_buffer *b, const struct tg_smb_chunk_header *h,
                      const uint8_t *payload, size_t len, bool complete)
{
    struct tg_tb_producer who = {.producer_id = p->id, .uid = p->uid, .pid = p->pid, .machine_id = p->machine_id};
    unsigned count = tg_smb_packets_count(h->packets);
    unsigned flags = tg_smb_packets_flags(h->packets);
    tg_trace_buffer_copy_chunk(b->tb, &who, h->writer_id, h->chunk_id, (uint16_t)count, (uint8_t)flags, complete,
                               payload, len);
}

static void move_inline(tg_svc_producer *p, const Perfetto__Protos__CommitDataRequest__ChunksToMove *m)
{
    tg_service *svc = p->svc;
    size_t len = m->data.len;
    if (len < TG_SMB_CHUNK_HEADER_SIZE || len > TG_SMB_CHUNK_HEADER_SIZE + TG_TB_MAX_PAYLOAD || len > 65535u) {
        svc->chunks_discarded++;
        return;
    }
    struct tg_smb_chunk_header h;
    tg_smb_chunk_header_decode(m->data.data, &h);
    tg_svc_buffer *b = check_target(p, m->target_buffer, h.writer_id);
    if (!b) {
        svc->chunks_discarded++;
        return;
    }
    bool complete = !(m->has_chunk_incomplete && m->chunk_incomplete);
    copy_into(p, b, &h, m->data.data + TG_SMB_CHUNK_HEADER_SIZE, len - TG_SMB_CHUNK_HEADER_SIZE, complete);
}

static void move_from_smb(tg_svc_producer *p, const Perfetto__Protos__CommitDataRequest__ChunksToMove *m)
{
    tg_service *svc = p->svc;
    struct tg_smb *smb = &p->smb.smb;
    if (!tg_smb_host_valid(&p->smb) || !m->has_page || !m->has_chunk || m->page >= smb->num_pages ||
        m->chunk >= TG_SMB_MAX_CHUNKS_PER_PAGE) {
        svc->chunks_discarded++;
        return;
    }
    unsigned layout = 0;
    if (tg_smb_acquire_chunk_for_reading(smb, m->page, m->chunk, &layout) != TG_SMB_OK) {
        svc->chunks_discarded++; /* bad layout, index, or not Complete: skipped */
        return;
    }
    /* One copy: the header is decoded from a private copy of its 8 bytes, and the payload goes
     * from shared memory straight into the trace buffer, which copies it with one memcpy and
     * parses only its own copy later (service/trace_buffer.h, "Trust"). The chunk is freed
     * after that copy. */
    size_t csize = 0;
    const uint8_t *c = tg_smb_chunk_ptr(smb, m->page, layout, m->chunk, &csize);
    tg_svc_buffer *b = NULL;
    if (c && csize >= TG_SMB_CHUNK_HEADER_SIZE) {
        uint8_t hdr[TG_SMB_CHUNK_HEADER_SIZE];
        memcpy(hdr, c, sizeof hdr);
        struct tg_smb_chunk_header h;
        tg_smb_chunk_header_decode(hdr, &h);
        b = check_target(p, m->target_buffer, h.writer_id);
        if (b)
            copy_into(p, b, &h, c + TG_SMB_CHUNK_HEADER_SIZE, csize - TG_SMB_CHUNK_HEADER_SIZE, true);
    }
    tg_smb_release_chunk_as_free(smb, m->page, m->chunk);
    if (!b)
        svc->chunks_discarded++;
}

static void apply_patches(tg_svc_producer *p, const Perfetto__Protos__CommitDataRequest__ChunkToPatch *cp)
{
    tg_service *svc = p->svc;
    size_t n = cp->n_patches;
    if (!cp->has_writer_id || !tg_smb_writer_id_valid(cp->writer_id) || n > MAX_PATCHES_PER_CHUNK) {
        svc->patches_discarded += n;
        return;
    }
    tg_svc_buffer *b = check_target(p, cp->target_buffer, (uint16_t)cp->writer_id);
    if (!b) {
        svc->patches_discarded += n;
        return;
    }
    struct tg_tb_patch stackp[32];
    struct tg_tb_patch *patches = n <= 32 ? stackp : calloc(n, sizeof *patches);
    if (!patches) {
        svc->patches_discarded += n;
        return;
    }
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        const Perfetto__Protos__CommitDataRequest__ChunkToPatch__Patch *pt = cp->patches[i];
        if (!pt->has_data || pt->data.len != 4) {
            svc->patches_discarded++; /* only 4-byte redundant varints */
            continue;
        }
        patches[k].offset = pt->offset;
        memcpy(patches[k].data, pt->data.data, 4);
        k++;
    }
    bool more = cp->has_has_more_patches && cp->has_more_patches;
    if (tg_trace_buffer_apply_patches(b->tb, p->id, (uint16_t)cp->writer_id, cp->chunk_id, patches, k, more) != 0)
        svc->patches_discarded += k;
    if (patches != stackp)
        free(patches);
}

void tg_svc_commit_data(tg_svc_producer *p, const Perfetto__Protos__CommitDataRequest *req)
{
    for (size_t i = 0; i < req->n_chunks_to_move; i++) {
        const Perfetto__Protos__CommitDataRequest__ChunksToMove *m = req->chunks_to_move[i];
        if (!m->has_target_buffer) {
            p->svc->chunks_discarded++;
            continue;
        }
        if (m->has_data)
            move_inline(p, m);
        else
            move_from_smb(p, m);
    }
    for (size_t i = 0; i < req->n_chunks_to_patch; i++)
        apply_patches(p, req->chunks_to_patch[i]);
    if (req->has_flush_request_id && req->flush_request_id)
        tg_svc_flush_ack(p->svc, p, req->flush_request_id);
}

void tg_svc_scrape_producer(tg_svc_producer *p, tg_svc_session *only)
{
    struct tg_smb *smb = &p->smb.smb;
    if (!tg_smb_host_valid(&p->smb) || !p->writer_buf)
        return;
    uint8_t *buf = scratch(p, smb->page_size);
    if (!buf)
        return;
    for (size_t page = 0; page < smb->num_pages; page++) {
        uint32_t word = tg_smb_page_header(smb, page);
        unsigned layout = tg_smb_word_layout(word);
        unsigned nchunks = tg_smb_layout_num_chunks(layout);
        for (unsigned c = 0; c < nchunks; c++) {
            enum tg_smb_chunk_state st = tg_smb_word_chunk_state(word, c);
            if (st != TG_SMB_CHUNK_BEING_WRITTEN && st != TG_SMB_CHUNK_COMPLETE)
                continue;
            struct tg_smb_chunk_header h;
            long n = tg_smb_copy_chunk(smb, page, layout, c, buf, smb->page_size, &h);
            if (n < (long)TG_SMB_CHUNK_HEADER_SIZE || !tg_smb_writer_id_valid(h.writer_id))
                continue;
            uint16_t target = p->writer_buf[h.writer_id];
            if (!target)
                continue; /* only writers registered through RegisterTraceWriter */
            tg_svc_buffer *b = check_target(p, target, h.writer_id);
            if (!b || (only && b->s != only))
                continue;
            bool complete = st == TG_SMB_CHUNK_COMPLETE;
            if (!complete && tg_smb_packets_count(h.packets) < 2)
                continue; /* nothing but a fragment still being written */
            copy_into(p, b, &h, buf + TG_SMB_CHUNK_HEADER_SIZE, (size_t)n - TG_SMB_CHUNK_HEADER_SIZE, complete);
        }
    }
}
