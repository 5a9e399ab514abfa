/* fuzz_frame.c: libFuzzer target for the IPC frame codec: a hostile peer's byte stream cut into
 * pieces, deserialized by tg_frame_reader and (in parallel) tg_frame_peek on an evbuffer, every frame
 * scanned by tg_frame_scan and, for bind replies, parsed by tg_ipc_parse_bind_reply.
 *
 * Input: byte 0 chooses how the rest is split (whole, 1-byte, or random pieces up to 2^k bytes from
 * a PRNG seeded by the byte) and the frame limit (default or a small one); the rest is the stream.
 *
 * Oracles (trap on failure): both deserializers yield the same frames in the same order and the same
 * OVERSIZE verdict as a reference framing; scanned pointers stay inside the frame; an InvokeMethod or
 * InvokeMethodReply re-encoded from its scanned fields scans back to the same fields; a bind reply's
 * methods survive re-encoding. */
#include <event2/buffer.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tracegate/frame.h"
#include "tracegate/ipc_wire.h"

#include "fuzz_check.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define INSIDE(p, n, body, len) ((n) == 0 || ((p) >= (body) && (p) + (n) <= (body) + (len)))

struct methods {
    uint32_t id[64];
    char name[64][64];
    size_t n;
    int bad; /* a name we cannot round-trip (NUL inside, too long, too many) */
};

static void collect(void *arg, uint32_t id, const char *name, size_t nl)
{
    struct methods *m = arg;
    if (m->n >= 64 || nl >= 64 || memchr(name, 0, nl)) {
        m->bad = 1;
        return;
    }
    m->id[m->n] = id;
    memcpy(m->name[m->n], name, nl);
    m->name[m->n][nl] = 0;
    m->n++;
}

static void check_frame(const uint8_t *body, size_t len)
{
    struct tg_frame_info fi;
    if (tg_frame_scan(body, len, &fi) != 0)
        return; /* not an IPCFrame: Perfetto drops it */
    CHECK(INSIDE(fi.msg_data, fi.msg_len, body, len));
    CHECK(INSIDE(fi.payload, fi.payload_len, body, len));
    CHECK(INSIDE(fi.service_name, fi.service_name_len, body, len));
    CHECK(fi.msg == TG_MSG_NONE || (fi.msg >= TG_MSG_BIND_SERVICE && fi.msg <= TG_MSG_SET_PEER_IDENTITY));

    static uint8_t buf[TG_FRAME_MAX_DEFAULT + 64];
    struct tg_frame_info fo;
    size_t n;
    switch (fi.msg) {
    case TG_MSG_INVOKE_METHOD:
        n = tg_ipc_encode_invoke(buf, sizeof buf, fi.request_id, fi.service_id, fi.method_id, fi.payload,
                                 fi.payload_len, fi.drop_reply);
        CHECK(n > 0 && tg_frame_scan(buf, n, &fo) == 0);
        CHECK(fo.msg == fi.msg && fo.request_id == fi.request_id && fo.service_id == fi.service_id &&
              fo.method_id == fi.method_id && fo.drop_reply == fi.drop_reply && fo.payload_len == fi.payload_len);
        CHECK(fi.payload_len == 0 || memcmp(fo.payload, fi.payload, fi.payload_len) == 0);
        break;
    case TG_MSG_INVOKE_METHOD_REPLY:
        n = tg_ipc_encode_reply(buf, sizeof buf, fi.request_id, fi.success, fi.has_more, fi.payload, fi.payload_len);
        CHECK(n > 0 && tg_frame_scan(buf, n, &fo) == 0);
        CHECK(fo.msg == fi.msg && fo.request_id == fi.request_id && fo.success == fi.success &&
              fo.has_more == fi.has_more);
        if (fi.success) {
            CHECK(fo.payload_len == fi.payload_len);
            CHECK(fi.payload_len == 0 || memcmp(fo.payload, fi.payload, fi.payload_len) == 0);
        } else {
            CHECK(!fo.has_payload); /* a Reject carries no reply_proto */
        }
        break;
    case TG_MSG_BIND_SERVICE_REPLY: {
        struct methods *m = calloc(1, sizeof *m);
        struct methods *m2 = calloc(1, sizeof *m2);
        CHECK(m && m2);
        int ok = 0, ok2 = 0;
        uint32_t sid = 0, sid2 = 0;
        if (tg_ipc_parse_bind_reply(fi.msg_data, fi.msg_len, &ok, &sid, collect, m) == 0 && !m->bad) {
            CHECK(ok == 0 || ok == 1);
            struct tg_ipc_method_info mi[64];
            for (size_t i = 0; i < m->n; i++) {
                CHECK(m->id[i] != 0 && m->name[i][0] != 0); /* id 0 / empty names are not reported */
                mi[i].id = m->id[i];
                mi[i].name = m->name[i];
            }
            if (ok) { /* the encoder writes methods only with success */
                n = tg_ipc_encode_bind_reply(buf, sizeof buf, fi.request_id, 1, sid, mi, m->n);
                CHECK(n > 0 && tg_frame_scan(buf, n, &fo) == 0 && fo.msg == TG_MSG_BIND_SERVICE_REPLY);
                CHECK(tg_ipc_parse_bind_reply(fo.msg_data, fo.msg_len, &ok2, &sid2, collect, m2) == 0);
                CHECK(ok2 == 1 && sid2 == sid && m2->n == m->n);
                for (size_t i = 0; i < m->n; i++)
                    CHECK(m2->id[i] == m->id[i] && strcmp(m2->name[i], m->name[i]) == 0);
            }
        }
        free(m);
        free(m2);
        break;
    }
    default:
        break;
    }
    /* the member bytes of any frame, taken as a bind reply, must not crash the parser */
    int ok;
    uint32_t sid;
    (void)tg_ipc_parse_bind_reply(fi.msg_data, fi.msg_len, &ok, &sid, NULL, NULL);
    (void)tg_ipc_parse_bind_reply(body, len, &ok, &sid, NULL, NULL);
}

/* Reference framing: the i-th non-empty frame, or -1 when the stream turns oversize first. */
struct ref {
    const uint8_t *s;
    size_t n, pos, max_frame;
};

/* Returns 1 with the next frame, 0 if no complete frame, -1 if oversize. */
static int ref_next(struct ref *r, size_t avail, const uint8_t **body, size_t *len)
{
    for (;;) {
        if (avail - r->pos < 4)
            return 0;
        const uint8_t *h = r->s + r->pos;
        uint64_t l = (uint64_t)h[0] | (uint64_t)h[1] << 8 | (uint64_t)h[2] << 16 | (uint64_t)h[3] << 24;
        if (l == 0) {
            r->pos += 4;
            continue;
        }
        if (l + 4 > r->max_frame)
            return -1;
        if (avail - r->pos - 4 < l)
            return 0;
        *body = h + 4;
        *len = (size_t)l;
        r->pos += 4 + (size_t)l;
        return 1;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    const uint8_t sel = data[0];
    data++;
    size--;
    size_t max_frame = (sel & 0x80) ? 64 + (size_t)(sel & 0x0f) * 16 : TG_FRAME_MAX_DEFAULT;
    tg_frame_reader *r = tg_frame_reader_new(max_frame);
    struct evbuffer *b = evbuffer_new();
    CHECK(r && b);
    struct ref ref = {data, size, 0, max_frame};
    uint32_t st = (uint32_t)sel * 2654435761u + 1;
    size_t pos = 0;
    int broken = 0;
    while (pos < size && !broken) {
        size_t piece;
        switch (sel & 7) {
        case 0: piece = size; break;
        case 1: piece = 1; break;
        default: /* random pieces up to 2^(sel&7 * 2) bytes */
            st = st * 1103515245u + 12345u;
            piece = 1 + (st >> 8) % ((size_t)1 << (2 * (sel & 7)));
            break;
        }
        if (piece > size - pos)
            piece = size - pos;
        CHECK(tg_frame_reader_feed(r, data + pos, piece) == 0);
        CHECK(evbuffer_add(b, data + pos, piece) == 0);
        pos += piece;
        for (;;) {
            const uint8_t *rb, *want;
            size_t rl, pl, wl;
            enum tg_frame_status rs = tg_frame_reader_next(r, &rb, &rl);
            enum tg_frame_status ps = tg_frame_peek(b, max_frame, &pl);
            int w = ref_next(&ref, pos, &want, &wl);
            if (w < 0) {
                CHECK(rs == TG_FRAME_OVERSIZE && ps == TG_FRAME_OVERSIZE);
                CHECK(tg_frame_reader_next(r, &rb, &rl) == TG_FRAME_OVERSIZE); /* sticky */
                broken = 1;
                break;
            }
            if (w == 0) {
                CHECK(rs == TG_FRAME_NEED_MORE && ps == TG_FRAME_NEED_MORE);
                break;
            }
            CHECK(rs == TG_FRAME_READY && ps == TG_FRAME_READY);
            CHECK(rl == wl && pl == wl && memcmp(rb, want, wl) == 0);
            const uint8_t *pb = tg_frame_body(b, pl);
            CHECK(pb && memcmp(pb, want, wl) == 0);
            check_frame(rb, rl);
            tg_frame_drain(b, pl);
        }
    }
    tg_frame_reader_free(r);
    evbuffer_free(b);
    return 0;
}
