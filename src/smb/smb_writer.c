/* smb_writer.c: packet-to-chunk writer for producers (see smb/smb_writer.h). */
#include "smb/smb_writer.h"

#include <string.h>

#include "tracegate/pbwire.h"

int tg_smb_writer_init(struct tg_smb_writer *w, const struct tg_smb_writer_config *cfg)
{
    memset(w, 0, sizeof(*w));
    if (!cfg || !cfg->smb || !cfg->commit || !tg_smb_writer_id_valid(cfg->writer_id))
        return TG_SMB_WRITER_EINVAL;
    w->cfg = *cfg;
    if (w->cfg.layout == TG_SMB_LAYOUT_NONE)
        w->cfg.layout = TG_SMB_LAYOUT_DIV1;
    if (tg_smb_chunk_size(cfg->smb->page_size, w->cfg.layout) <= TG_SMB_CHUNK_HEADER_SIZE + TG_SMB_PACKET_HEADER_SIZE)
        return TG_SMB_WRITER_EINVAL;
    return TG_SMB_WRITER_OK;
}

/* Takes a free chunk for chunk id next_chunk_id with `flags` preset. */
static bool acquire_chunk(struct tg_smb_writer *w, unsigned flags, size_t *page, unsigned *chunk, uint8_t **ptr,
                          size_t *size, uint32_t *chunk_id)
{
    struct tg_smb_chunk_header hdr = {
        .chunk_id = w->next_chunk_id,
        .writer_id = w->cfg.writer_id,
        .packets = tg_smb_make_packets(0, flags),
    };
    for (unsigned attempt = 0;; attempt++) {
        if (tg_smb_find_free_chunk(w->cfg.smb, w->cfg.layout, &w->cursor, &hdr, page, chunk, ptr, size) == TG_SMB_OK)
            break;
        if (!w->cfg.stall)
            return false;
        if (attempt == 0)
            w->stats.stalls++;
        if (!w->cfg.stall(w->cfg.commit_ctx, attempt))
            return false;
    }
    *chunk_id = w->next_chunk_id++;
    return true;
}

static void set_current(struct tg_smb_writer *w, size_t page, unsigned chunk, uint8_t *ptr, size_t size,
                        uint32_t chunk_id, unsigned flags)
{
    w->have_chunk = true;
    w->chunk_id = chunk_id;
    w->page = page;
    w->chunk = chunk;
    w->chunk_ptr = ptr;
    w->chunk_size = size;
    w->wpos = TG_SMB_CHUNK_HEADER_SIZE;
    w->count = 0;
    w->flags = flags;
}

/* Releases the current chunk as Complete, reports it, and in emulation mode
 * frees it again once the callback has copied it. */
static void finish_chunk(struct tg_smb_writer *w)
{
    if (!w->have_chunk)
        return;
    uint16_t packets = tg_smb_make_packets(w->count, w->flags);
    tg_smb_chunk_store_packets(w->chunk_ptr, packets);
    struct tg_smb_commit c = {
        .page = w->page,
        .chunk = w->chunk,
        .target_buffer = w->cfg.target_buffer,
        .writer_id = w->cfg.writer_id,
        .chunk_id = w->chunk_id,
        .packets = packets,
        .chunk_data = NULL,
        .chunk_size = w->chunk_size,
    };
    w->have_chunk = false;
    if (tg_smb_release_chunk_as_complete(w->cfg.smb, w->page, w->chunk) != TG_SMB_OK)
        return; /* someone trampled our page header; nothing sane to commit */
    if (w->cfg.emulation)
        c.chunk_data = w->chunk_ptr;
    w->stats.chunks_committed++;
    w->cfg.commit(w->cfg.commit_ctx, &c);
    if (w->cfg.emulation)
        (void)tg_smb_release_complete_chunk_as_free(w->cfg.smb, c.page, c.chunk);
}

/* Room for one more fragment (4-byte header + at least 1 byte)? */
static bool has_room(const struct tg_smb_writer *w)
{
    return w->have_chunk && w->count < TG_SMB_WRITER_MAX_FRAGMENTS &&
           w->wpos + TG_SMB_PACKET_HEADER_SIZE + 1 <= w->chunk_size;
}

static int drop_packet(struct tg_smb_writer *w)
{
    w->data_lost = true;
    w->stats.packets_dropped++;
    return TG_SMB_WRITER_DROPPED;
}

int tg_smb_writer_write_packet(struct tg_smb_writer *w, const void *data, size_t len)
{
    if (!w->cfg.smb || (len > 0 && !data))
        return TG_SMB_WRITER_EINVAL;
    if (len == 0)
        return TG_SMB_WRITER_OK;

    if (!has_room(w)) {
        /* No packet is in flight, so the old chunk can go first: with a tiny
         * SMB the commit handler may free it and we get it straight back. */
        finish_chunk(w);
        size_t page, size;
        unsigned chunk;
        uint8_t *ptr;
        uint32_t id;
        if (!acquire_chunk(w, 0, &page, &chunk, &ptr, &size, &id))
            return drop_packet(w);
        set_current(w, page, chunk, ptr, size, id, 0);
    }

    const uint8_t *src = (const uint8_t *)data;
    size_t off = 0;
    for (;;) {
        uint8_t *hdr = w->chunk_ptr + w->wpos;
        size_t room = w->chunk_size - w->wpos - TG_SMB_PACKET_HEADER_SIZE;
        size_t n = len - off < room ? len - off : room;
        /* Count first (release store), then the bytes: a scraper seeing the
         * new count treats this last fragment as incomplete and ignores it. */
        w->count++;
        tg_smb_chunk_store_packets(w->chunk_ptr, tg_smb_make_packets(w->count, w->flags));
        memcpy(hdr + TG_SMB_PACKET_HEADER_SIZE, src + off, n);
        tg_pb_put_varint4(hdr, (uint32_t)n);
        w->wpos += TG_SMB_PACKET_HEADER_SIZE + n;
        off += n;
        if (off == len)
            break;

        /* The packet goes on: take the next chunk before letting go of this
         * one, so that if the SMB is full we can still mark the fragment we
         * own as dropped instead of leaving a dangling continuation. */
        size_t page, size;
        unsigned chunk;
        uint8_t *ptr;
        uint32_t id;
        if (!acquire_chunk(w, TG_SMB_CHUNK_FIRST_CONTINUES, &page, &chunk, &ptr, &size, &id)) {
            tg_pb_put_varint4(hdr, TG_SMB_PACKET_SIZE_DROP);
            finish_chunk(w);
            return drop_packet(w);
        }
        w->flags |= TG_SMB_CHUNK_LAST_CONTINUES;
        finish_chunk(w);
        set_current(w, page, chunk, ptr, size, id, TG_SMB_CHUNK_FIRST_CONTINUES);
    }
    w->stats.packets_written++;
    w->stats.bytes_written += len;
    /* A chunk that cannot take another fragment is done: publish it now
     * rather than at the next packet, so the service sees data sooner. */
    if (!has_room(w))
        finish_chunk(w);
    return TG_SMB_WRITER_OK;
}

void tg_smb_writer_flush(struct tg_smb_writer *w)
{
    if (w->have_chunk && w->count > 0)
        finish_chunk(w);
}

void tg_smb_writer_close(struct tg_smb_writer *w)
{
    finish_chunk(w);
}

bool tg_smb_writer_take_data_lost(struct tg_smb_writer *w)
{
    bool lost = w->data_lost;
    w->data_lost = false;
    return lost;
}
