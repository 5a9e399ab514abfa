/* frame_scan.c: read the routing fields of an encoded IPCFrame without decoding it (see tracegate/frame.h). */
#include "tracegate/frame.h"
#include "tracegate/pbwire.h"

#include <string.h>

/* InvokeMethod: 1 service_id, 2 method_id, 3 args_proto, 4 drop_reply.
 * InvokeMethodReply: 1 success, 2 has_more, 3 reply_proto.
 * BindService: 1 service_name. */
static int scan_member(struct tg_frame_info *info)
{
    struct tg_pb_reader r;
    struct tg_pb_field f;
    int rc;
    tg_pb_reader_init(&r, info->msg_data, info->msg_len);
    while ((rc = tg_pb_next(&r, &f)) == 1) {
        switch (info->msg) {
        case TG_MSG_INVOKE_METHOD:
            if (f.number == 1 && f.wire == TG_PB_VARINT)
                info->service_id = (uint32_t)f.value;
            else if (f.number == 2 && f.wire == TG_PB_VARINT)
                info->method_id = (uint32_t)f.value;
            else if (f.number == 3 && f.wire == TG_PB_LEN) {
                info->payload = f.data;
                info->payload_len = f.len;
                info->has_payload = 1;
            } else if (f.number == 4 && f.wire == TG_PB_VARINT)
                info->drop_reply = f.value != 0;
            break;
        case TG_MSG_INVOKE_METHOD_REPLY:
            if (f.number == 1 && f.wire == TG_PB_VARINT)
                info->success = f.value != 0;
            else if (f.number == 2 && f.wire == TG_PB_VARINT)
                info->has_more = f.value != 0;
            else if (f.number == 3 && f.wire == TG_PB_LEN) {
                info->payload = f.data;
                info->payload_len = f.len;
                info->has_payload = 1;
            }
            break;
        case TG_MSG_BIND_SERVICE:
            if (f.number == 1 && f.wire == TG_PB_LEN) {
                info->service_name = f.data;
                info->service_name_len = f.len;
            }
            break;
        default:
            break;
        }
    }
    return rc < 0 ? -1 : 0;
}

int tg_frame_scan(const uint8_t *body, size_t len, struct tg_frame_info *info)
{
    memset(info, 0, sizeof *info);
    struct tg_pb_reader r;
    struct tg_pb_field f;
    int rc;
    tg_pb_reader_init(&r, body, len);
    while ((rc = tg_pb_next(&r, &f)) == 1) {
        if (f.number == 2 && f.wire == TG_PB_VARINT) {
            info->request_id = f.value;
        } else if (f.number >= 3 && f.number <= 8) {
            if (f.wire != TG_PB_LEN)
                return -1;
            info->msg = (enum tg_ipc_msg)f.number;
            info->msg_data = f.data;
            info->msg_len = f.len;
        }
    }
    if (rc < 0)
        return -1;
    if (info->msg != TG_MSG_NONE && scan_member(info) != 0)
        return -1;
    return 0;
}
