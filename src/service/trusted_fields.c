/* trusted_fields.c: the slice the service appends to every producer packet
 * (trusted_uid, trusted_packet_sequence_id, trusted_pid, machine_id,
 * previous_packet_dropped, in traced's order) and the check that drops
 * producer packets carrying fields only the service may write (§4.7). */
#include "service/svc.h"

#include "tracegate/pbwire.h"

#include <stdlib.h>
#include <string.h>

size_t tg_svc_trusted_slice(uint8_t *buf, const struct tg_tb_seq_info *info, uint32_t seq_id)
{
    size_t n = 0;
    n += tg_pb_put_tag(buf + n, 3, TG_PB_VARINT);
    n += tg_pb_put_varint(buf + n, (uint64_t)(int64_t)info->uid);
    n += tg_pb_put_tag(buf + n, 10, TG_PB_VARINT);
    n += tg_pb_put_varint(buf + n, seq_id);
    if (info->pid > 0) {
        n += tg_pb_put_tag(buf + n, 79, TG_PB_VARINT);
        n += tg_pb_put_varint(buf + n, (uint64_t)(int64_t)info->pid);
    }
    if (info->machine_id) {
        n += tg_pb_put_tag(buf + n, 98, TG_PB_VARINT);
        n += tg_pb_put_varint(buf + n, info->machine_id);
    }
    if (info->previous_packet_dropped) {
        n += tg_pb_put_tag(buf + n, 42, TG_PB_VARINT);
        n += tg_pb_put_varint(buf + n, 1);
    }
    return n;
}

static bool reserved_field(uint32_t num)
{
    switch (num) {
    case 3: case 10: case 33: case 35: case 36: case 50: case 69: case 79: case 98: case 124: case 125: case 133:
        return true;
    default:
        return false;
    }
}

static bool bytes_valid(const uint8_t *p, size_t len)
{
    struct tg_pb_reader r;
    struct tg_pb_field f;
    tg_pb_reader_init(&r, p, len);
    int rc;
    while ((rc = tg_pb_next(&r, &f)) == 1) {
        if (reserved_field(f.number))
            return false;
        if (f.wire == TG_PB_LEN && f.len > 0x0FFFFFFFu)
            return false;
    }
    return rc == 0;
}

bool tg_svc_packet_is_valid(const struct tg_tb_packet *pkt)
{
    if (pkt->num_slices == 1)
        return bytes_valid(pkt->slices[0].data, pkt->slices[0].len);
    if (pkt->size == 0)
        return true;
    uint8_t *tmp = malloc(pkt->size);
    if (!tmp)
        return false;
    size_t n = tg_tb_packet_copy(pkt, tmp, pkt->size);
    bool ok = n == pkt->size && bytes_valid(tmp, n);
    free(tmp);
    return ok;
}
