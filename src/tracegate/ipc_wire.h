/* ipc_wire.h: encoders for the handful of IPCFrame shapes tracegate sends.
 *
 * IPCFrame is tiny and hot (a stream of 10,000 ReadBuffers replies is common),
 * so frames are written straight into a caller buffer in Perfetto's field
 * order instead of building protobuf-c structs. Payloads (args_proto,
 * reply_proto) are copied once. Pure functions, any thread.
 *
 * Each function returns the encoded body length, or 0 if `cap` is too small
 * (call with buf == NULL to learn the size). */
#ifndef TRACEGATE_IPC_WIRE_H
#define TRACEGATE_IPC_WIRE_H

#include <stddef.h>
#include <stdint.h>

struct tg_ipc_method_info {
    uint32_t id;
    const char *name;
};

size_t tg_ipc_encode_bind(uint8_t *buf, size_t cap, uint64_t request_id, const char *service_name);
size_t tg_ipc_encode_bind_reply(uint8_t *buf, size_t cap, uint64_t request_id, int success, uint32_t service_id,
                                const struct tg_ipc_method_info *methods, size_t n_methods);
size_t tg_ipc_encode_invoke(uint8_t *buf, size_t cap, uint64_t request_id, uint32_t service_id, uint32_t method_id,
                            const uint8_t *args, size_t args_len, int drop_reply);
/* success == 0 omits reply_proto (Perfetto's Reject). */
size_t tg_ipc_encode_reply(uint8_t *buf, size_t cap, uint64_t request_id, int success, int has_more,
                           const uint8_t *reply, size_t reply_len);
/* The successful reply's bytes up to its payload: header ++ reply_len payload
 * bytes is exactly tg_ipc_encode_reply(..., success = 1, ...), so a caller can
 * queue the payload without copying it next to the header. At most 32 bytes. */
size_t tg_ipc_encode_reply_header(uint8_t *buf, size_t cap, uint64_t request_id, int has_more, size_t reply_len);
size_t tg_ipc_encode_request_error(uint8_t *buf, size_t cap, uint64_t request_id, const char *error);

/* Parses BindServiceReply bytes (the msg member). Calls fn for each method.
 * Returns 0, or -1 when malformed. */
int tg_ipc_parse_bind_reply(const uint8_t *p, size_t len, int *success, uint32_t *service_id,
                            void (*fn)(void *arg, uint32_t id, const char *name, size_t name_len), void *arg);

#endif
