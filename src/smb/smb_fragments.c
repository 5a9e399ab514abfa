/* smb_fragments.c: bounded fragment iteration over a chunk payload (see
 * smb/smb_fragments.h). */
#include "smb/smb_fragments.h"

#include "smb/smb_abi.h"

size_t tg_smb_read_frag_header(const uint8_t *p, const uint8_t *end, uint32_t *len_out)
{
    uint32_t v = 0;
    for (size_t i = 0; i < TG_SMB_PACKET_HEADER_SIZE; i++) {
        if (p + i >= end)
            return 0;
        v |= (uint32_t)(p[i] & 0x7f) << (7 * i);
        if (!(p[i] & 0x80)) {
            *len_out = v;
            return i + 1;
        }
    }
    return 0; /* a fifth byte would be needed: not a fragment header */
}

void tg_smb_frag_iter_init_at(struct tg_smb_frag_iter *it, const uint8_t *payload, size_t len, unsigned count,
                              unsigned flags, size_t offset, unsigned index)
{
    it->payload = payload;
    it->end = payload + len;
    it->p = payload + (offset <= len ? offset : len);
    it->count = count;
    it->next = index;
    it->flags = flags;
    it->status = TG_SMB_FRAG_OK;
    it->padding_skipped = 0;
}

void tg_smb_frag_iter_init(struct tg_smb_frag_iter *it, const uint8_t *payload, size_t len, unsigned count,
                           unsigned flags)
{
    tg_smb_frag_iter_init_at(it, payload, len, count, flags, 0, 0);
}

int tg_smb_frag_next(struct tg_smb_frag_iter *it, struct tg_smb_fragment *f)
{
    while (it->status == TG_SMB_FRAG_OK) {
        if (it->next >= it->count) {
            it->status = TG_SMB_FRAG_END;
            break;
        }
        uint32_t flen;
        size_t hl = tg_smb_read_frag_header(it->p, it->end, &flen);
        if (hl == 0) {
            it->status = TG_SMB_FRAG_ABI_VIOLATION;
            break;
        }
        const unsigned index = it->next;
        const bool first_cont = index == 0 && (it->flags & TG_SMB_CHUNK_FIRST_CONTINUES);
        const bool last_cont = index + 1 == it->count && (it->flags & TG_SMB_CHUNK_LAST_CONTINUES);
        if (flen == TG_SMB_PACKET_SIZE_DROP) {
            /* The bytes after a drop marker were never written for real: the
             * writer moved to a garbage area. Nothing else here can be read. */
            it->p = it->end;
            it->next = it->count;
            it->status = TG_SMB_FRAG_END;
            f->data = NULL;
            f->len = 0;
            f->index = index;
            f->is_drop = true;
            f->is_first_continuation = first_cont;
            f->is_last_continues = last_cont;
            return TG_SMB_FRAG_OK;
        }
        const uint8_t *data = it->p + hl;
        if (flen > (size_t)(it->end - data)) {
            it->status = TG_SMB_FRAG_ABI_VIOLATION;
            break;
        }
        it->p = data + flen;
        it->next++;
        if (flen == 0 && !first_cont && !last_cont) {
            it->padding_skipped++;
            continue;
        }
        f->data = data;
        f->len = flen;
        f->index = index;
        f->is_drop = false;
        f->is_first_continuation = first_cont;
        f->is_last_continues = last_cont;
        return TG_SMB_FRAG_OK;
    }
    return it->status;
}
