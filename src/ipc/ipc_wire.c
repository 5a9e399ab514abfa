/* ipc_wire.c: direct encoders/decoders for IPCFrame shapes (see tracegate/ipc_wire.h). */
#include "tracegate/ipc_wire.h"
#include "tracegate/pbwire.h"

#include <string.h>

/* A bounded writer: once it overflows it only counts. */
struct wbuf {
    uint8_t *p;
    size_t cap, len;
};

static void w_bytes(struct wbuf *w, const void *src, size_t n)
{
    if (w->p && w->len + n <= w->cap && n)
        memcpy(w->p + w->len, src, n);
    w->len += n;
}

static void w_varint(struct wbuf *w, uint64_t v)
{
    uint8_t tmp[10];
    w_bytes(w, tmp, tg_pb_put_varint(tmp, v));
}

static void w_key(struct wbuf *w, uint32_t field, enum tg_pb_wire wire)
{
    w_varint(w, ((uint64_t)field << 3) | wire);
}

static void w_ld(struct wbuf *w, uint32_t field, const void *data, size_t n)
{
    w_key(w, field, TG_PB_LEN);
    w_varint(w, n);
    w_bytes(w, data, n);
}

static size_t w_done(const struct wbuf *w)
{
    return (w->p && w->len > w->cap) ? 0 : w->len;
}

/* frame = request_id (2) + one `msg` member (field) holding inner bytes */
static size_t frame_with(uint8_t *buf, size_t cap, uint64_t request_id, uint32_t field, const uint8_t *inner,
                         size_t inner_len)
{
    struct wbuf w = {buf, cap, 0};
    w_key(&w, 2, TG_PB_VARINT);
    w_varint(&w, request_id);
    w_ld(&w, field, inner, inner_len);
    return w_done(&w);
}

size_t tg_ipc_encode_bind(uint8_t *buf, size_t cap, uint64_t request_id, const char *service_name)
{
    uint8_t inner[300];
    struct wbuf w = {inner, sizeof inner, 0};
    w_ld(&w, 1, service_name, strlen(service_name));
    if (w_done(&w) == 0)
        return 0;
    return frame_with(buf, cap, request_id, 3, inner, w.len);
}

size_t tg_ipc_encode_bind_reply(uint8_t *buf, size_t cap, uint64_t request_id, int success, uint32_t service_id,
                                const struct tg_ipc_method_info *methods, size_t n_methods)
{
    /* inner message size first, then write it in place after the headers */
    struct wbuf in = {NULL, 0, 0};
    for (int pass = 0; pass < 2; pass++) {
        if (success) {
            w_key(&in, 1, TG_PB_VARINT);
            w_varint(&in, 1);
            w_key(&in, 2, TG_PB_VARINT);
            w_varint(&in, service_id);
            for (size_t i = 0; i < n_methods; i++) {
                size_t nl = strlen(methods[i].name);
                size_t mi_len = 1 + tg_pb_varint_size(methods[i].id) + 1 + tg_pb_varint_size(nl) + nl;
                w_key(&in, 3, TG_PB_LEN);
                w_varint(&in, mi_len);
                w_key(&in, 1, TG_PB_VARINT);
                w_varint(&in, methods[i].id);
                w_ld(&in, 2, methods[i].name, nl);
            }
        }
        if (pass == 0) {
            size_t inner_len = in.len;
            struct wbuf w = {buf, cap, 0};
            w_key(&w, 2, TG_PB_VARINT);
            w_varint(&w, request_id);
            w_key(&w, 4, TG_PB_LEN);
            w_varint(&w, inner_len);
            if (!buf)
                return w.len + inner_len;
            if (w.len + inner_len > cap)
                return 0;
            in.p = buf + w.len;
            in.cap = inner_len;
            in.len = 0;
        } else {
            return (size_t)(in.p - buf) + in.len;
        }
    }
    return 0;
}

size_t tg_ipc_encode_invoke(uint8_t *buf, size_t cap, uint64_t request_id, uint32_t service_id, uint32_t method_id,
                            const uint8_t *args, size_t args_len, int drop_reply)
{
    size_t inner_len = 1 + tg_pb_varint_size(service_id) + 1 + tg_pb_varint_size(method_id) + 1 +
                       tg_pb_varint_size(args_len) + args_len + 2;
    struct wbuf w = {buf, cap, 0};
    w_key(&w, 2, TG_PB_VARINT);
    w_varint(&w, request_id);
    w_key(&w, 5, TG_PB_LEN);
    w_varint(&w, inner_len);
    w_key(&w, 1, TG_PB_VARINT);
    w_varint(&w, service_id);
    w_key(&w, 2, TG_PB_VARINT);
    w_varint(&w, method_id);
    w_ld(&w, 3, args, args_len);
    w_key(&w, 4, TG_PB_VARINT);
    w_varint(&w, drop_reply ? 1 : 0);
    return w_done(&w);
}

size_t tg_ipc_encode_reply(uint8_t *buf, size_t cap, uint64_t request_id, int success, int has_more,
                           const uint8_t *reply, size_t reply_len)
{
    size_t inner_len = 4;
    if (success)
        inner_len += 1 + tg_pb_varint_size(reply_len) + reply_len;
    struct wbuf w = {buf, cap, 0};
    w_key(&w, 2, TG_PB_VARINT);
    w_varint(&w, request_id);
    w_key(&w, 6, TG_PB_LEN);
    w_varint(&w, inner_len);
    w_key(&w, 1, TG_PB_VARINT);
    w_varint(&w, success ? 1 : 0);
    w_key(&w, 2, TG_PB_VARINT);
    w_varint(&w, has_more ? 1 : 0);
    if (success)
        w_ld(&w, 3, reply, reply_len);
    return w_done(&w);
}

size_t tg_ipc_encode_reply_header(uint8_t *buf, size_t cap, uint64_t request_id, int has_more, size_t reply_len)
{
    size_t inner_len = 4 + 1 + tg_pb_varint_size(reply_len) + reply_len;
    struct wbuf w = {buf, cap, 0};
    w_key(&w, 2, TG_PB_VARINT);
    w_varint(&w, request_id);
    w_key(&w, 6, TG_PB_LEN);
    w_varint(&w, inner_len);
    w_key(&w, 1, TG_PB_VARINT);
    w_varint(&w, 1);
    w_key(&w, 2, TG_PB_VARINT);
    w_varint(&w, has_more ? 1 : 0);
    w_key(&w, 3, TG_PB_LEN);
    w_varint(&w, reply_len);
    return w_done(&w);
}

size_t tg_ipc_encode_request_error(uint8_t *buf, size_t cap, uint64_t request_id, const char *error)
{
    size_t el = strlen(error);
    size_t inner_len = 1 + tg_pb_varint_size(el) + el;
    struct wbuf w = {buf, cap, 0};
    w_key(&w, 2, TG_PB_VARINT);
    w_varint(&w, request_id);
    w_key(&w, 7, TG_PB_LEN);
    w_varint(&w, inner_len);
    w_ld(&w, 1, error, el);
    return w_done(&w);
}

int tg_ipc_parse_bind_reply(const uint8_t *p, size_t len, int *success, uint32_t *service_id,
                            void (*fn)(void *arg, uint32_t id, const char *name, size_t name_len), void *arg)
{
    struct tg_pb_reader r;
    struct tg_pb_field f;
    int rc;
    *success = 0;
    *service_id = 0;
    tg_pb_reader_init(&r, p, len);
    while ((rc = tg_pb_next(&r, &f)) == 1) {
        if (f.number == 1 && f.wire == TG_PB_VARINT) {
            *success = f.value != 0;
        } else if (f.number == 2 && f.wire == TG_PB_VARINT) {
            *service_id = (uint32_t)f.value;
        } else if (f.number == 3 && f.wire == TG_PB_LEN) {
            struct tg_pb_reader mr;
            struct tg_pb_field mf;
            uint32_t id = 0;
            const char *name = NULL;
            size_t nl = 0;
            int mrc;
            tg_pb_reader_init(&mr, f.data, f.len);
            while ((mrc = tg_pb_next(&mr, &mf)) == 1) {
                if (mf.number == 1 && mf.wire == TG_PB_VARINT)
                    id = (uint32_t)mf.value;
                else if (mf.number == 2 && mf.wire == TG_PB_LEN) {
                    name = (const char *)mf.data;
                    nl = mf.len;
                }
            }
            if (mrc < 0)
                return -1;
            if (id != 0 && name && nl > 0 && fn) /* id 0 and empty names are ignored */
                fn(arg, id, name, nl);
        }
    }
    return rc < 0 ? -1 : 0;
}
