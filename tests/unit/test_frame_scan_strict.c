/* test_frame_scan_strict.c: the strict IPC frame scanner the gateway uses (tg_frame_scan_ex with
 * TG_SCAN_STRICT / TG_SCAN_CLOSED) against hand-built parser-differential attacks, each of which
 * Perfetto's decoder reads differently from a varint-only, first-or-last-wins reader:
 *  - method_id QueryServiceState (varint) then EnableTracing (fixed32): Perfetto dispatches
 *    EnableTracing, the lenient scanner reads QueryServiceState;
 *  - a fixed64 request_id with the top bit set (the gateway's private range);
 *  - repeated routing fields, two `msg` members, a `msg` member in another wire type;
 *  - unknown fields in the envelope (never forwarded unseen);
 *  - the same tricks in replies (success, has_more, the bind reply's method table).
 * The legitimate path: every shape tracegate encodes, and every frame of every interop recording
 * (real Perfetto clients and traced), passes, and reads exactly what the lenient scanner reads. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tracegate/frame.h"
#include "tracegate/ipc_wire.h"
#include "tracegate/pbwire.h"

#include "tg_test_util.h"

/* ------------------------------------------------------------ a tiny frame builder */

struct fb {
    uint8_t b[1024];
    size_t n;
};

static void fb_key(struct fb *f, uint32_t num, enum tg_pb_wire w) { f->n += tg_pb_put_tag(f->b + f->n, num, w); }

static void fb_varint(struct fb *f, uint32_t num, uint64_t v)
{
    fb_key(f, num, TG_PB_VARINT);
    f->n += tg_pb_put_varint(f->b + f->n, v);
}

static void fb_fixed32(struct fb *f, uint32_t num, uint32_t v)
{
    fb_key(f, num, TG_PB_I32);
    for (int i = 0; i < 4; i++)
        f->b[f->n++] = (uint8_t)(v >> (8 * i));
}

static void fb_fixed64(struct fb *f, uint32_t num, uint64_t v)
{
    fb_key(f, num, TG_PB_I64);
    for (int i = 0; i < 8; i++)
        f->b[f->n++] = (uint8_t)(v >> (8 * i));
}

static void fb_bytes(struct fb *f, uint32_t num, const void *p, size_t len)
{
    fb_key(f, num, TG_PB_LEN);
    f->n += tg_pb_put_varint(f->b + f->n, len);
    memcpy(f->b + f->n, p, len);
    f->n += len;
}

static void fb_msg(struct fb *f, uint32_t num, const struct fb *inner) { fb_bytes(f, num, inner->b, inner->n); }

/* IPCFrame{request_id, msg_invoke_method{inner}} */
static void invoke_frame(struct fb *out, uint64_t rid, const struct fb *inner)
{
    memset(out, 0, sizeof *out);
    fb_varint(out, 2, rid);
    fb_msg(out, TG_MSG_INVOKE_METHOD, inner);
}

/* ------------------------------------------------------------ assertions */

#define CLIENT (TG_SCAN_STRICT | TG_SCAN_CLOSED)

static void expect_refused(const struct fb *f, unsigned flags, int code, const char *why_part)
{
    struct tg_frame_info fi;
    char why[200];
    int rc = tg_frame_scan_ex(f->b, f->n, &fi, flags, why, sizeof why);
    if (rc != code)
        fail_msg("expected refusal %d, got %d (%s)", code, rc, why);
    if (why_part && !strstr(why, why_part))
        fail_msg("reason '%s' does not mention '%s'", why, why_part);
}

static void expect_accepted(const uint8_t *b, size_t n, unsigned flags, struct tg_frame_info *fi)
{
    char why[200];
    int rc = tg_frame_scan_ex(b, n, fi, flags, why, sizeof why);
    if (rc != 0)
        fail_msg("refused (%d): %s", rc, why);
    /* what strict scanning accepts, the lenient scanner reads the same way */
    struct tg_frame_info lf;
    assert_int_equal(tg_frame_scan(b, n, &lf), 0);
    assert_memory_equal(&lf, fi, sizeof lf);
}

/* ------------------------------------------------------------ attacks */

/* The finding's attack: QueryServiceState (id 12, allowed to observers) as a varint, then
 * EnableTracing (id 1) as fixed32. Perfetto's decoder keeps the last value, whatever its wire
 * type: the service would run EnableTracing while a varint-only reader sees QueryServiceState. */
static void test_method_id_fixed32_after_varint(void **state)
{
    (void)state;
    struct fb inner = {.n = 0}, f;
    fb_varint(&inner, 1, 1);
    fb_varint(&inner, 2, 12);
    fb_fixed32(&inner, 2, 1);
    invoke_frame(&f, 7, &inner);
    struct tg_frame_info fi;
    assert_int_equal(tg_frame_scan(f.b, f.n, &fi), 0);
    assert_int_equal(fi.method_id, 12); /* the lenient reading: not what the service runs */
    expect_refused(&f, CLIENT, TG_SCAN_WIRE_TYPE, "InvokeMethod.method_id has wire type fixed32");
    expect_refused(&f, TG_SCAN_STRICT, TG_SCAN_WIRE_TYPE, "method_id");

    /* a lone fixed32 (or fixed64) method_id is as ambiguous */
    memset(&inner, 0, sizeof inner);
    fb_varint(&inner, 1, 1);
    fb_fixed64(&inner, 2, 1);
    invoke_frame(&f, 7, &inner);
    expect_refused(&f, CLIENT, TG_SCAN_WIRE_TYPE, "fixed64");
    /* the same for service_id and drop_reply */
    memset(&inner, 0, sizeof inner);
    fb_fixed32(&inner, 1, 1);
    fb_varint(&inner, 2, 12);
    invoke_frame(&f, 7, &inner);
    expect_refused(&f, CLIENT, TG_SCAN_WIRE_TYPE, "InvokeMethod.service_id");
    memset(&inner, 0, sizeof inner);
    fb_varint(&inner, 1, 1);
    fb_varint(&inner, 2, 12);
    fb_fixed32(&inner, 4, 1);
    invoke_frame(&f, 7, &inner);
    expect_refused(&f, CLIENT, TG_SCAN_WIRE_TYPE, "InvokeMethod.drop_reply");
    /* a scalar sent length-delimited (Perfetto would read a pointer value) */
    memset(&inner, 0, sizeof inner);
    fb_varint(&inner, 1, 1);
    fb_bytes(&inner, 2, "\x0c", 1);
    invoke_frame(&f, 7, &inner);
    expect_refused(&f, CLIENT, TG_SCAN_WIRE_TYPE, "length-delimited");
}

static void test_repeated_routing_fields(void **state)
{
    (void)state;
    struct fb inner = {.n = 0}, f;
    /* two varint method_ids: the last one (EnableTracing) is what the service runs */
    fb_varint(&inner, 1, 1);
    fb_varint(&inner, 2, 12);
    fb_varint(&inner, 2, 1);
    invoke_frame(&f, 7, &inner);
    expect_refused(&f, CLIENT, TG_SCAN_AMBIGUOUS, "InvokeMethod.method_id appears more than once");
    /* two service ids, two drop_reply, two args_proto */
    memset(&inner, 0, sizeof inner);
    fb_varint(&inner, 1, 1);
    fb_varint(&inner, 1, 2);
    fb_varint(&inner, 2, 12);
    invoke_frame(&f, 7, &inner);
    expect_refused(&f, CLIENT, TG_SCAN_AMBIGUOUS, "service_id");
    memset(&inner, 0, sizeof inner);
    fb_varint(&inner, 1, 1);
    fb_varint(&inner, 2, 12);
    fb_varint(&inner, 4, 0);
    fb_varint(&inner, 4, 1);
    invoke_frame(&f, 7, &inner);
    expect_refused(&f, CLIENT, TG_SCAN_AMBIGUOUS, "drop_reply");
    memset(&inner, 0, sizeof inner);
    fb_varint(&inner, 1, 1);
    fb_varint(&inner, 2, 4);
    fb_bytes(&inner, 3, "", 0);
    fb_bytes(&inner, 3, "\x0a\x00", 2);
    invoke_frame(&f, 7, &inner);
    expect_refused(&f, CLIENT, TG_SCAN_AMBIGUOUS, "args_proto");
    /* two request ids */
    memset(&inner, 0, sizeof inner);
    fb_varint(&inner, 1, 1);
    fb_varint(&inner, 2, 12);
    invoke_frame(&f, 7, &inner);
    fb_varint(&f, 2, 8);
    expect_refused(&f, CLIENT, TG_SCAN_AMBIGUOUS, "IPCFrame.request_id appears more than once");
    /* two service names in one BindService */
    struct fb b = {.n = 0};
    fb_bytes(&b, 1, "ConsumerPort", 12);
    fb_bytes(&b, 1, "ProducerPort", 12);
    memset(&f, 0, sizeof f);
    fb_varint(&f, 2, 1);
    fb_msg(&f, TG_MSG_BIND_SERVICE, &b);
    expect_refused(&f, CLIENT, TG_SCAN_AMBIGUOUS, "BindService.service_name");
}

static void test_request_id_fixed64_private_range(void **state)
{
    (void)state;
    struct fb inner = {.n = 0}, f = {.n = 0};
    fb_varint(&inner, 1, 1);
    fb_varint(&inner, 2, 12);
    /* only a fixed64 request id, top bit set: a varint-only reader sees request id 0 */
    fb_fixed64(&f, 2, (UINT64_C(1) << 63) | 5);
    fb_msg(&f, TG_MSG_INVOKE_METHOD, &inner);
    struct tg_frame_info fi;
    assert_int_equal(tg_frame_scan(f.b, f.n, &fi), 0);
    assert_int_equal(fi.request_id, 0);
    expect_refused(&f, CLIENT, TG_SCAN_WIRE_TYPE, "IPCFrame.request_id has wire type fixed64");
    /* a harmless varint id first, the private one as fixed64 after it */
    memset(&f, 0, sizeof f);
    fb_varint(&f, 2, 5);
    fb_fixed64(&f, 2, (UINT64_C(1) << 63) | 5);
    fb_msg(&f, TG_MSG_INVOKE_METHOD, &inner);
    assert_int_equal(tg_frame_scan(f.b, f.n, &fi), 0);
    assert_int_equal(fi.request_id, 5);
    expect_refused(&f, CLIENT, TG_SCAN_WIRE_TYPE, "request_id");
    /* fixed32 too */
    memset(&f, 0, sizeof f);
    fb_fixed32(&f, 2, 5);
    fb_msg(&f, TG_MSG_INVOKE_METHOD, &inner);
    expect_refused(&f, TG_SCAN_STRICT, TG_SCAN_WIRE_TYPE, "fixed32");
}

static void test_msg_oneof(void **state)
{
    (void)state;
    struct fb bind = {.n = 0}, inv = {.n = 0}, f = {.n = 0};
    fb_bytes(&bind, 1, "ConsumerPort", 12);
    fb_varint(&inv, 1, 1);
    fb_varint(&inv, 2, 1);
    /* BindService and InvokeMethod: Perfetto's host dispatches the bind, a last-wins reader the call */
    fb_varint(&f, 2, 1);
    fb_msg(&f, TG_MSG_BIND_SERVICE, &bind);
    fb_msg(&f, TG_MSG_INVOKE_METHOD, &inv);
    expect_refused(&f, CLIENT, TG_SCAN_AMBIGUOUS, "sets both msg_bind_service and msg_invoke_method");
    /* the same member twice: Perfetto merges the two */
    memset(&f, 0, sizeof f);
    struct fb inv2 = {.n = 0};
    fb_varint(&inv2, 2, 12);
    fb_varint(&f, 2, 1);
    fb_msg(&f, TG_MSG_INVOKE_METHOD, &inv);
    fb_msg(&f, TG_MSG_INVOKE_METHOD, &inv2);
    expect_refused(&f, CLIENT, TG_SCAN_AMBIGUOUS, "msg_invoke_method appears more than once");
    /* SetPeerIdentity hidden behind an InvokeMethod */
    memset(&f, 0, sizeof f);
    fb_varint(&f, 2, 1);
    fb_msg(&f, TG_MSG_INVOKE_METHOD, &inv);
    fb_bytes(&f, TG_MSG_SET_PEER_IDENTITY, "\x08\x01", 2);
    expect_refused(&f, TG_SCAN_STRICT, TG_SCAN_AMBIGUOUS, "set_peer_identity");
    /* a member sent as a varint: Perfetto takes it as an empty message that is present */
    memset(&f, 0, sizeof f);
    fb_varint(&f, 2, 1);
    fb_varint(&f, TG_MSG_BIND_SERVICE, 0);
    expect_refused(&f, CLIENT, TG_SCAN_WIRE_TYPE, "msg_bind_service");
    /* member bytes that do not parse: Perfetto keeps what it read before the damage */
    memset(&f, 0, sizeof f);
    struct fb bad = {.n = 0};
    fb_varint(&bad, 1, 1);
    fb_varint(&bad, 2, 12);
    bad.b[bad.n++] = 0x1a; /* args_proto, length missing */
    fb_varint(&f, 2, 1);
    fb_msg(&f, TG_MSG_INVOKE_METHOD, &bad);
    expect_refused(&f, CLIENT, TG_SCAN_MALFORMED, "InvokeMethod is not valid protobuf");
}

static void test_unknown_fields(void **state)
{
    (void)state;
    struct fb inner = {.n = 0}, f;
    fb_varint(&inner, 1, 1);
    fb_varint(&inner, 2, 12);
    /* IPCFrame field 9 */
    invoke_frame(&f, 3, &inner);
    fb_varint(&f, 9, 1);
    expect_refused(&f, CLIENT, TG_SCAN_UNKNOWN_FIELD, "IPCFrame has an unknown field 9");
    struct tg_frame_info fi;
    expect_accepted(f.b, f.n, TG_SCAN_STRICT, &fi); /* replies may grow fields: STRICT alone allows them */
    /* a large field number (Perfetto skips ids above 65535 silently) */
    invoke_frame(&f, 3, &inner);
    fb_bytes(&f, 70000, "x", 1);
    expect_refused(&f, CLIENT, TG_SCAN_UNKNOWN_FIELD, "70000");
    /* InvokeMethod field 5 */
    struct fb in2 = inner;
    fb_fixed32(&in2, 5, 1);
    invoke_frame(&f, 3, &in2);
    expect_refused(&f, CLIENT, TG_SCAN_UNKNOWN_FIELD, "InvokeMethod has an unknown field 5");
    /* BindService field 2 */
    struct fb b = {.n = 0};
    fb_bytes(&b, 1, "ConsumerPort", 12);
    fb_varint(&b, 2, 1);
    memset(&f, 0, sizeof f);
    fb_varint(&f, 2, 1);
    fb_msg(&f, TG_MSG_BIND_SERVICE, &b);
    expect_refused(&f, CLIENT, TG_SCAN_UNKNOWN_FIELD, "BindService has an unknown field 2");
    /* data_for_testing (field 1) is declared: allowed, even repeated */
    invoke_frame(&f, 3, &inner);
    fb_bytes(&f, 1, "pad", 3);
    fb_bytes(&f, 1, "pad", 3);
    expect_accepted(f.b, f.n, CLIENT, &fi);
    assert_int_equal(fi.method_id, 12);
}

static void test_replies(void **state)
{
    (void)state;
    struct fb r = {.n = 0}, f = {.n = 0};
    /* has_more true, then false as fixed32: Perfetto's client ends the stream */
    fb_varint(&r, 1, 1);
    fb_varint(&r, 2, 1);
    fb_fixed32(&r, 2, 0);
    fb_varint(&f, 2, 4);
    fb_msg(&f, TG_MSG_INVOKE_METHOD_REPLY, &r);
    expect_refused(&f, TG_SCAN_STRICT, TG_SCAN_WIRE_TYPE, "InvokeMethodReply.has_more");
    memset(&r, 0, sizeof r);
    memset(&f, 0, sizeof f);
    fb_varint(&r, 1, 0);
    fb_varint(&r, 1, 1);
    fb_varint(&f, 2, 4);
    fb_msg(&f, TG_MSG_INVOKE_METHOD_REPLY, &r);
    expect_refused(&f, TG_SCAN_STRICT, TG_SCAN_AMBIGUOUS, "InvokeMethodReply.success");
    /* an unknown field in a reply is allowed (newer services) */
    memset(&r, 0, sizeof r);
    memset(&f, 0, sizeof f);
    fb_varint(&r, 1, 1);
    fb_varint(&r, 9, 1);
    fb_varint(&f, 2, 4);
    fb_msg(&f, TG_MSG_INVOKE_METHOD_REPLY, &r);
    struct tg_frame_info fi;
    expect_accepted(f.b, f.n, TG_SCAN_STRICT, &fi);
    assert_true(fi.success);

    /* the bind reply's method table: an id given twice inside one MethodInfo */
    struct fb mi = {.n = 0}, br = {.n = 0};
    fb_varint(&mi, 1, 12);
    fb_bytes(&mi, 2, "QueryServiceState", 17);
    fb_varint(&mi, 1, 1);
    fb_varint(&br, 1, 1);
    fb_varint(&br, 2, 1);
    fb_msg(&br, 3, &mi);
    memset(&f, 0, sizeof f);
    fb_varint(&f, 2, 1);
    fb_msg(&f, TG_MSG_BIND_SERVICE_REPLY, &br);
    expect_refused(&f, TG_SCAN_STRICT, TG_SCAN_AMBIGUOUS, "MethodInfo.id appears more than once");
    /* a fixed32 method id */
    memset(&mi, 0, sizeof mi);
    memset(&br, 0, sizeof br);
    fb_fixed32(&mi, 1, 12);
    fb_bytes(&mi, 2, "QueryServiceState", 17);
    fb_varint(&br, 1, 1);
    fb_varint(&br, 2, 1);
    fb_msg(&br, 3, &mi);
    memset(&f, 0, sizeof f);
    fb_varint(&f, 2, 1);
    fb_msg(&f, TG_MSG_BIND_SERVICE_REPLY, &br);
    expect_refused(&f, TG_SCAN_STRICT, TG_SCAN_WIRE_TYPE, "MethodInfo.id");
    /* two service ids */
    memset(&br, 0, sizeof br);
    fb_varint(&br, 1, 1);
    fb_varint(&br, 2, 1);
    fb_varint(&br, 2, 2);
    memset(&f, 0, sizeof f);
    fb_varint(&f, 2, 1);
    fb_msg(&f, TG_MSG_BIND_SERVICE_REPLY, &br);
    expect_refused(&f, TG_SCAN_STRICT, TG_SCAN_AMBIGUOUS, "BindServiceReply.service_id");
}

/* ------------------------------------------------------------ the legitimate path */

static void test_own_encodings_pass(void **state)
{
    (void)state;
    uint8_t buf[512];
    struct tg_frame_info fi;
    size_t n = tg_ipc_encode_bind(buf, sizeof buf, 1, "ConsumerPort");
    expect_accepted(buf, n, CLIENT, &fi);
    assert_int_equal(fi.msg, TG_MSG_BIND_SERVICE);
    n = tg_ipc_encode_invoke(buf, sizeof buf, UINT64_MAX >> 1, 1, 12, (const uint8_t *)"\x08\x01", 2, 1);
    expect_accepted(buf, n, CLIENT, &fi);
    assert_int_equal(fi.method_id, 12);
    assert_int_equal(fi.request_id, UINT64_MAX >> 1);
    assert_true(fi.drop_reply);
    n = tg_ipc_encode_invoke(buf, sizeof buf, 2, 1, 1, NULL, 0, 0);
    expect_accepted(buf, n, CLIENT, &fi);
    n = tg_ipc_encode_reply(buf, sizeof buf, 3, 1, 1, (const uint8_t *)"x", 1);
    expect_accepted(buf, n, TG_SCAN_STRICT, &fi);
    assert_true(fi.has_more);
    n = tg_ipc_encode_request_error(buf, sizeof buf, 4, "unknown request");
    expect_accepted(buf, n, TG_SCAN_STRICT, &fi);
    struct tg_ipc_method_info mi[2] = {{1, "EnableTracing"}, {12, "QueryServiceState"}};
    n = tg_ipc_encode_bind_reply(buf, sizeof buf, 1, 1, 1, mi, 2);
    expect_accepted(buf, n, TG_SCAN_STRICT, &fi);
    /* an empty frame (no msg) is answered by the host, not refused here */
    expect_accepted((const uint8_t *)"\x10\x05", 2, CLIENT, &fi);
    assert_int_equal(fi.msg, TG_MSG_NONE);
}

/* Every frame real Perfetto peers exchanged passes: client frames as the gateway reads a client's,
 * the service's as it reads the upstream's. */
static void test_recordings_pass(void **state)
{
    (void)state;
    const char *dir = tg_test_recordings_dir();
    char **paths = NULL;
    size_t np = dir ? tg_test_list_dir(dir, ".bin", &paths) : 0;
    if (!np) {
        print_message("SKIP: ../shared/interop/recordings not found (set TG_SHARED_DIR)\n");
        skip();
    }
    size_t frames[2] = {0, 0};
    for (size_t i = 0; i < np; i++) {
        struct tg_recording rec;
        assert_int_equal(tg_recording_load(paths[i], &rec), 0);
        for (int d = 0; d < 2; d++) {
            tg_frame_reader *r = tg_frame_reader_new(0);
            assert_non_null(r);
            assert_int_equal(tg_frame_reader_feed(r, rec.stream[d], rec.stream_len[d]), 0);
            const uint8_t *body;
            size_t len;
            while (tg_frame_reader_next(r, &body, &len) == TG_FRAME_READY) {
                struct tg_frame_info fi;
                char why[200];
                int rc = tg_frame_scan_ex(body, len, &fi, d == TG_REC_C2S ? CLIENT : TG_SCAN_STRICT, why, sizeof why);
                if (rc != 0)
                    fail_msg("%s: a real %s frame was refused: %s", rec.name, d ? "service" : "client", why);
                expect_accepted(body, len, d == TG_REC_C2S ? CLIENT : TG_SCAN_STRICT, &fi);
                frames[d]++;
            }
            tg_frame_reader_free(r);
        }
        tg_recording_free(&rec);
    }
    tg_test_free_list(paths, np);
    print_message("%zu client and %zu service frames passed\n", frames[0], frames[1]);
    assert_true(frames[0] >= np && frames[1] >= np); /* each recording has frames both ways */
}

/* tg_frame_scan_prefix: a large reply is decided by its first bytes (the payload comes last), with
 * no pointer past them handed out; a call whose drop_reply follows its arguments, or a frame with
 * a repeated field past the prefix, is not decided there (the whole frame then is: accepted, or
 * refused). The service's reply header ++ payload is exactly the encoded reply. */
static void test_prefix_scan(void **state)
{
    (void)state;
    size_t n = 100000;
    uint8_t *payload = malloc(n), *frame = malloc(n + 64), *hdr_frame = malloc(n + 64);
    for (size_t i = 0; i < n; i++)
        payload[i] = (uint8_t)(i * 7);
    size_t fl = tg_ipc_encode_reply(frame, n + 64, 77, 1, 1, payload, n);
    struct tg_frame_info fi;
    assert_int_equal(tg_frame_scan_prefix(frame, 32, fl, &fi, TG_SCAN_STRICT), 0);
    assert_int_equal(fi.request_id, 77);
    assert_int_equal(fi.msg, TG_MSG_INVOKE_METHOD_REPLY);
    assert_true(fi.success && fi.has_more && fi.has_payload);
    assert_int_equal(fi.payload_len, n);
    assert_null(fi.payload);  /* past the prefix */
    assert_null(fi.msg_data); /* likewise */
    assert_int_equal(tg_frame_scan_prefix(frame, 8, fl, &fi, TG_SCAN_STRICT), TG_SCAN_INCOMPLETE);
    assert_int_equal(tg_frame_scan_prefix(frame, fl, fl, &fi, TG_SCAN_STRICT), 0); /* whole: as the full scan */
    assert_ptr_equal(fi.payload, frame + fl - n);

    /* has_more once more after the payload: undecided on the prefix, refused whole */
    frame[fl] = 0x10;
    frame[fl + 1] = 0x00;
    size_t inner_at = 1 + 1 + 1; /* rid tag + 77, then the member's tag */
    uint8_t lenv[8];
    size_t old = tg_pb_put_varint(lenv, n + 4 + 1 + tg_pb_varint_size(n));
    assert_int_equal(tg_pb_put_varint(frame + inner_at, n + 4 + 1 + tg_pb_varint_size(n) + 2), old);
    assert_int_equal(tg_frame_scan_prefix(frame, 64, fl + 2, &fi, TG_SCAN_STRICT), TG_SCAN_INCOMPLETE);
    assert_int_equal(tg_frame_scan_ex(frame, fl + 2, &fi, TG_SCAN_STRICT, NULL, 0), TG_SCAN_AMBIGUOUS);

    /* a call: drop_reply comes after the arguments */
    size_t il = tg_ipc_encode_invoke(frame, n + 64, 5, 1, 7, payload, 5000, 0);
    assert_int_equal(tg_frame_scan_prefix(frame, 64, il, &fi, TG_SCAN_CLOSED), TG_SCAN_INCOMPLETE);
    assert_int_equal(tg_frame_scan_prefix(frame, il, il, &fi, TG_SCAN_CLOSED), 0);
    assert_int_equal(fi.method_id, 7);
    /* a small call is decided whole */
    il = tg_ipc_encode_invoke(frame, n + 64, 6, 1, 12, NULL, 0, 0);
    assert_int_equal(tg_frame_scan_prefix(frame, il, il, &fi, TG_SCAN_CLOSED), 0);
    assert_int_equal(fi.method_id, 12);

    /* the reply header for tg_ipc_call_reply_evbuffer */
    static const uint64_t rids[] = {0, 1, 300, UINT64_C(1) << 40, UINT64_MAX};
    static const size_t lens[] = {0, 1, 127, 128, 16383, 16384, 100000};
    for (size_t r = 0; r < 5; r++)
        for (int more = 0; more < 2; more++)
            for (size_t l = 0; l < 7; l++) {
                size_t full = tg_ipc_encode_reply(frame, n + 64, rids[r], 1, more, payload, lens[l]);
                size_t h = tg_ipc_encode_reply_header(hdr_frame, 40, rids[r], more, lens[l]);
                assert_true(h > 0 && h <= 32);
                memcpy(hdr_frame + h, payload, lens[l]);
                assert_int_equal(h + lens[l], full);
                assert_memory_equal(hdr_frame, frame, full);
            }
    free(payload);
    free(frame);
    free(hdr_frame);
}

/* Every large reply in the recordings (real ReadBuffers traffic) is decided by its first 64 bytes,
 * which is what lets the bridge forward it without pulling it up. */
static void test_prefix_scan_recordings(void **state)
{
    (void)state;
    const char *dir = tg_test_recordings_dir();
    char **paths = NULL;
    size_t np = dir ? tg_test_list_dir(dir, ".bin", &paths) : 0;
    if (!np) {
        print_message("SKIP: ../shared/interop/recordings not found (set TG_SHARED_DIR)\n");
        skip();
    }
    size_t large = 0;
    for (size_t i = 0; i < np; i++) {
        struct tg_recording rec;
        assert_int_equal(tg_recording_load(paths[i], &rec), 0);
        tg_frame_reader *r = tg_frame_reader_new(0);
        assert_non_null(r);
        assert_int_equal(tg_frame_reader_feed(r, rec.stream[TG_REC_S2C], rec.stream_len[TG_REC_S2C]), 0);
        const uint8_t *body;
        size_t len;
        while (tg_frame_reader_next(r, &body, &len) == TG_FRAME_READY) {
            struct tg_frame_info full, pre;
            if (len < 1024 || tg_frame_scan_ex(body, len, &full, TG_SCAN_STRICT, NULL, 0) != 0 ||
                full.msg != TG_MSG_INVOKE_METHOD_REPLY)
                continue;
            if (tg_frame_scan_prefix(body, 64, len, &pre, TG_SCAN_STRICT) != 0)
                fail_msg("%s: a %zu-byte reply is not decided by its first 64 bytes", rec.name, len);
            assert_int_equal(pre.request_id, full.request_id);
            assert_int_equal(pre.has_more, full.has_more);
            assert_int_equal(pre.payload_len, full.payload_len);
            large++;
        }
        tg_frame_reader_free(r);
        tg_recording_free(&rec);
    }
    tg_test_free_list(paths, np);
    print_message("%zu large replies decided by their first 64 bytes\n", large);
    assert_true(large > 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_method_id_fixed32_after_varint),
        cmocka_unit_test(test_repeated_routing_fields),
        cmocka_unit_test(test_request_id_fixed64_private_range),
        cmocka_unit_test(test_msg_oneof),
        cmocka_unit_test(test_unknown_fields),
        cmocka_unit_test(test_replies),
        cmocka_unit_test(test_own_encodings_pass),
        cmocka_unit_test(test_recordings_pass),
        cmocka_unit_test(test_prefix_scan),
        cmocka_unit_test(test_prefix_scan_recordings),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
