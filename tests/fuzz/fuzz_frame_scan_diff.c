/* fuzz_frame_scan_diff.c: differential fuzz target for the gateway's strict IPC frame scanner
 * (tg_frame_scan_ex with TG_SCAN_STRICT, and TG_SCAN_CLOSED for client frames).
 *
 * A reference decoder below reads an IPCFrame the way Perfetto's C++ side does (protozero plus
 * the generated classes): the last occurrence of a field wins; a scalar is read from a varint,
 * fixed32 or fixed64 alike (a length-delimited one yields a pointer value: unknowable); a string
 * or sub-message given another wire type reads as empty but present; `msg` members are
 * independent fields (a second occurrence of one merges into the first); a sub-message that does
 * not parse keeps what was read before the damage; field ids above 65535 are skipped; a varint
 * keeps the low 64 bits of at most 10 bytes; a top-level frame with undecodable bytes is dropped.
 *
 * Oracle (trap on failure): whenever the strict scanner accepts a frame, the reference accepts it
 * too and reads the same request id, `msg` member, service id, method id, drop_reply, args,
 * service name, success, has_more, reply and bind-reply method table; in closed mode the envelope
 * (IPCFrame, BindService, InvokeMethod) holds no field the reference would keep as unknown. The
 * lenient scanner must read such a frame the same way too. The prefix scan (tg_frame_scan_prefix,
 * the bridge's zero-copy path) decides a frame from its first k bytes only when the full scan
 * accepts it and reads the same fields, never reads past those k bytes, and with k = the whole
 * frame gives the full scan's verdict.
 *
 * Input: the whole input is one IPCFrame body; it is also walked as a framed stream
 * ([u32 LE length][body]...), so the recordings' byte streams seed real frames. Seeds:
 * tests/fuzz/corpus/fuzz_frame_scan_diff/ (frames from the interop recordings and the attack
 * frames of tests/unit/test_frame_scan_strict.c; regenerate with
 * tests/fuzz/make_frame_scan_diff_seeds.py). */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tracegate/frame.h"
#include "tracegate/ipc_wire.h"

#include "fuzz_check.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* ------------------------------------------------------------ the reference decoder */

enum { W_VARINT = 0, W_FIXED64 = 1, W_LEN = 2, W_FIXED32 = 5 };
#define REF_MAX_ID 65535u
#define REF_MAX_LEN ((1u << 28) - 1)
#define REF_MAX_METHODS 512

struct ref_field {
    uint32_t id;
    unsigned wire;
    uint64_t ival; /* varint / fixed value */
    const uint8_t *data;
    size_t size; /* length-delimited only */
};

/* At most 10 bytes, the low 64 bits kept. Returns the bytes used, 0 on failure. */
static size_t ref_varint(const uint8_t *p, const uint8_t *end, uint64_t *out)
{
    uint64_t v = 0;
    size_t i = 0;
    for (unsigned shift = 0; p + i < end && shift < 64; shift += 7) {
        uint8_t b = p[i++];
        v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *out = v;
            return i;
        }
    }
    return 0;
}

/* 1: a field to use; 2: a field to skip; 0: clean end; -1: abort (bytes left over). */
static int ref_next(const uint8_t **pp, const uint8_t *end, struct ref_field *f)
{
    const uint8_t *p = *pp;
    if (p >= end)
        return 0;
    uint64_t key;
    size_t n = ref_varint(p, end, &key);
    if (!n)
        return -1;
    p += n;
    f->id = (uint32_t)(key >> 3); /* truncated to 32 bits, as Perfetto does */
    if (f->id == 0)
        return -1;
    f->wire = (unsigned)(key & 7);
    f->ival = 0;
    f->data = NULL;
    f->size = 0;
    int skip = 0;
    switch (f->wire) {
    case W_VARINT:
        n = ref_varint(p, end, &f->ival);
        if (!n)
            return -1;
        p += n;
        break;
    case W_LEN: {
        uint64_t l;
        n = ref_varint(p, end, &l);
        if (!n)
            return -1;
        p += n;
        if (l > (uint64_t)(end - p))
            return -1;
        f->data = p;
        f->size = (size_t)l;
        p += l;
        skip = l > REF_MAX_LEN;
        break;
    }
    case W_FIXED64:
        if (end - p < 8)
            return -1;
        for (int i = 7; i >= 0; i--)
            f->ival = f->ival << 8 | p[i];
        p += 8;
        break;
    case W_FIXED32:
        if (end - p < 4)
            return -1;
        f->ival = (uint64_t)p[0] | (uint64_t)p[1] << 8 | (uint64_t)p[2] << 16 | (uint64_t)p[3] << 24;
        p += 4;
        break;
    default:
        return -1;
    }
    *pp = p;
    return (skip || f->id > REF_MAX_ID) ? 2 : 1;
}

struct ref_bytes {
    int present;
    const uint8_t *p;
    size_t n;
};

struct ref_method {
    uint32_t id;
    struct ref_bytes name;
};

struct ref_frame {
    int indeterminate;    /* a routing scalar was length-delimited: Perfetto reads an address */
    int unknown_envelope; /* IPCFrame, BindService or InvokeMethod kept an unknown field */
    uint64_t request_id;
    unsigned members; /* bit per `msg` field number present */
    struct ref_bytes service_name;
    uint32_t service_id, method_id;
    int drop_reply;
    struct ref_bytes args;
    int success, has_more;
    struct ref_bytes reply;
    int br_success;
    uint32_t br_service_id;
    struct ref_method methods[REF_MAX_METHODS];
    size_t n_methods;
    int methods_overflow;
};

static uint64_t get_u64(struct ref_frame *r, const struct ref_field *f)
{
    if (f->wire == W_LEN)
        r->indeterminate = 1;
    return f->ival;
}

static uint32_t get_u32(struct ref_frame *r, const struct ref_field *f) { return (uint32_t)get_u64(r, f); }
static int get_bool(struct ref_frame *r, const struct ref_field *f) { return get_u64(r, f) != 0; }

static void get_bytes(struct ref_bytes *b, const struct ref_field *f)
{
    b->present = 1;
    b->p = f->wire == W_LEN ? f->data : NULL; /* another wire type: an empty string */
    b->n = f->wire == W_LEN ? f->size : 0;
}

/* A sub-message's bytes as Perfetto hands them to the nested parser (empty for other wire types). */
static void sub_bytes(const struct ref_field *f, const uint8_t **p, const uint8_t **end)
{
    *p = f->wire == W_LEN ? f->data : NULL;
    *end = f->wire == W_LEN ? f->data + f->size : NULL;
}

/* Nested messages: parse results are ignored (fields read before an abort stay). */
static void ref_bind(struct ref_frame *r, const uint8_t *p, const uint8_t *end)
{
    struct ref_field f;
    int rc;
    while ((rc = ref_next(&p, end, &f)) > 0) {
        if (rc == 2)
            continue;
        if (f.id == 1)
            get_bytes(&r->service_name, &f);
        else
            r->unknown_envelope = 1;
    }
}

static void ref_invoke(struct ref_frame *r, const uint8_t *p, const uint8_t *end)
{
    struct ref_field f;
    int rc;
    while ((rc = ref_next(&p, end, &f)) > 0) {
        if (rc == 2)
            continue;
        switch (f.id) {
        case 1: r->service_id = get_u32(r, &f); break;
        case 2: r->method_id = get_u32(r, &f); break;
        case 3: get_bytes(&r->args, &f); break;
        case 4: r->drop_reply = get_bool(r, &f); break;
        default: r->unknown_envelope = 1; break;
        }
    }
}

static void ref_invoke_reply(struct ref_frame *r, const uint8_t *p, const uint8_t *end)
{
    struct ref_field f;
    int rc;
    while ((rc = ref_next(&p, end, &f)) > 0) {
        if (rc == 2)
            continue;
        switch (f.id) {
        case 1: r->success = get_bool(r, &f); break;
        case 2: r->has_more = get_bool(r, &f); break;
        case 3: get_bytes(&r->reply, &f); break;
        default: break;
        }
    }
}

static void ref_method_info(struct ref_frame *r, struct ref_method *m, const uint8_t *p, const uint8_t *end)
{
    struct ref_field f;
    int rc;
    while ((rc = ref_next(&p, end, &f)) > 0) {
        if (rc == 2)
            continue;
        if (f.id == 1)
            m->id = get_u32(r, &f);
        else if (f.id == 2)
            get_bytes(&m->name, &f);
    }
}

static void ref_bind_reply(struct ref_frame *r, const uint8_t *p, const uint8_t *end)
{
    struct ref_field f;
    int rc;
    while ((rc = ref_next(&p, end, &f)) > 0) {
        if (rc == 2)
            continue;
        switch (f.id) {
        case 1: r->br_success = get_bool(r, &f); break;
        case 2: r->br_service_id = get_u32(r, &f); break;
        case 3: {
            if (r->n_methods == REF_MAX_METHODS) {
                r->methods_overflow = 1;
                break;
            }
            struct ref_method *m = &r->methods[r->n_methods++];
            memset(m, 0, sizeof *m);
            const uint8_t *sp, *se;
            sub_bytes(&f, &sp, &se);
            ref_method_info(r, m, sp, se);
            break;
        }
        default: break;
        }
    }
}

/* Returns 1 if Perfetto would accept the frame (and fills r), 0 if it would drop it. */
static int ref_decode(const uint8_t *body, size_t len, struct ref_frame *r)
{
    memset(r, 0, sizeof *r);
    const uint8_t *p = body, *end = body + len;
    struct ref_field f;
    int rc;
    while ((rc = ref_next(&p, end, &f)) > 0) {
        if (rc == 2)
            continue;
        const uint8_t *sp, *se;
        sub_bytes(&f, &sp, &se);
        switch (f.id) {
        case 1: break; /* data_for_testing */
        case 2: r->request_id = get_u64(r, &f); break;
        case TG_MSG_BIND_SERVICE: r->members |= 1u << f.id; ref_bind(r, sp, se); break;
        case TG_MSG_BIND_SERVICE_REPLY: r->members |= 1u << f.id; ref_bind_reply(r, sp, se); break;
        case TG_MSG_INVOKE_METHOD: r->members |= 1u << f.id; ref_invoke(r, sp, se); break;
        case TG_MSG_INVOKE_METHOD_REPLY: r->members |= 1u << f.id; ref_invoke_reply(r, sp, se); break;
        case TG_MSG_REQUEST_ERROR:
        case TG_MSG_SET_PEER_IDENTITY: r->members |= 1u << f.id; break;
        default: r->unknown_envelope = 1; break;
        }
    }
    return rc == 0;
}

/* ------------------------------------------------------------ the oracle */

static int same_bytes(const struct ref_bytes *b, const uint8_t *p, size_t n)
{
    return b->n == n && (n == 0 || memcmp(b->p, p, n) == 0);
}

struct got_methods {
    struct ref_method m[REF_MAX_METHODS];
    size_t n;
    int overflow;
};

static void got_method(void *arg, uint32_t id, const char *name, size_t nl)
{
    struct got_methods *g = arg;
    if (g->n == REF_MAX_METHODS) {
        g->overflow = 1;
        return;
    }
    g->m[g->n].id = id;
    g->m[g->n].name.p = (const uint8_t *)name;
    g->m[g->n].name.n = nl;
    g->n++;
}

static void check_frame(const uint8_t *body, size_t len, unsigned mode)
{
    struct tg_frame_info fi;
    if (tg_frame_scan_ex(body, len, &fi, mode, NULL, 0) != 0)
        return;
    static struct ref_frame r; /* large: not on the stack */
    CHECK(ref_decode(body, len, &r));
    CHECK(!r.indeterminate);
    CHECK(r.request_id == fi.request_id);
    CHECK(r.members == (fi.msg == TG_MSG_NONE ? 0u : 1u << fi.msg));
    if (mode & TG_SCAN_CLOSED)
        CHECK(!r.unknown_envelope);
    switch (fi.msg) {
    case TG_MSG_BIND_SERVICE:
        CHECK(same_bytes(&r.service_name, fi.service_name, fi.service_name_len));
        break;
    case TG_MSG_INVOKE_METHOD:
        CHECK(r.service_id == fi.service_id && r.method_id == fi.method_id && r.drop_reply == fi.drop_reply);
        CHECK(r.args.present == fi.has_payload && same_bytes(&r.args, fi.payload, fi.payload_len));
        break;
    case TG_MSG_INVOKE_METHOD_REPLY:
        CHECK(r.success == fi.success && r.has_more == fi.has_more);
        CHECK(r.reply.present == fi.has_payload && same_bytes(&r.reply, fi.payload, fi.payload_len));
        break;
    case TG_MSG_BIND_SERVICE_REPLY: {
        static struct got_methods g;
        g.n = 0;
        g.overflow = 0;
        int ok = 0;
        uint32_t sid = 0;
        CHECK(tg_ipc_parse_bind_reply(fi.msg_data, fi.msg_len, &ok, &sid, got_method, &g) == 0);
        CHECK(ok == r.br_success && sid == r.br_service_id);
        /* the entries a client registers: non-zero id and a non-empty name, in order */
        size_t k = 0;
        for (size_t i = 0; i < r.n_methods; i++) {
            const struct ref_method *m = &r.methods[i];
            if (m->id == 0 || m->name.n == 0)
                continue;
            if (k < g.n)
                CHECK(g.m[k].id == m->id && same_bytes(&m->name, g.m[k].name.p, g.m[k].name.n));
            k++;
        }
        if (!r.methods_overflow && !g.overflow)
            CHECK(k == g.n);
        break;
    }
    default:
        break;
    }
    /* the lenient scanner reads an accepted frame the same way */
    struct tg_frame_info lf;
    CHECK(tg_frame_scan(body, len, &lf) == 0);
    CHECK(lf.request_id == fi.request_id && lf.msg == fi.msg && lf.service_id == fi.service_id &&
          lf.method_id == fi.method_id && lf.drop_reply == fi.drop_reply && lf.success == fi.success &&
          lf.has_more == fi.has_more && lf.payload == fi.payload && lf.payload_len == fi.payload_len &&
          lf.service_name == fi.service_name && lf.service_name_len == fi.service_name_len);
}

/* A pointer read from a prefix: NULL when it reached past the prefix, else the same offset. */
static int same_ptr(const uint8_t *pp, const uint8_t *prefix, size_t k, const uint8_t *fp, const uint8_t *body,
                    size_t n)
{
    if (!pp)
        return !fp || (size_t)(fp - body) + n > k;
    return fp && pp - prefix == fp - body;
}

/* The prefix scan (the bridge's zero-copy path) decides a frame only when the full scan accepts
 * it and reads it the same way. The prefix is copied into a buffer of exactly its size, so a read
 * past it is an ASan report. */
static void check_prefix_at(const uint8_t *body, size_t len, size_t k, unsigned mode, int frc,
                            const struct tg_frame_info *fi)
{
    static uint8_t pre[TG_FRAME_MAX_DEFAULT];
    uint8_t *exact = pre + sizeof pre - k; /* the prefix ends where the array does */
    if (k)
        memcpy(exact, body, k);
    struct tg_frame_info pi;
    int prc = tg_frame_scan_prefix(exact, k, len, &pi, mode);
    CHECK(prc == 0 || prc == TG_SCAN_INCOMPLETE);
    if (k == len)
        CHECK((prc == 0) == (frc == 0)); /* the whole frame at hand: the same verdict */
    if (prc != 0)
        return;
    CHECK(frc == 0);
    CHECK(pi.request_id == fi->request_id && pi.msg == fi->msg && pi.service_id == fi->service_id &&
          pi.method_id == fi->method_id && pi.drop_reply == fi->drop_reply && pi.success == fi->success &&
          pi.has_more == fi->has_more && pi.has_payload == fi->has_payload && pi.payload_len == fi->payload_len &&
          pi.msg_len == fi->msg_len && pi.service_name_len == fi->service_name_len);
    CHECK(same_ptr(pi.msg_data, exact, k, fi->msg_data, body, fi->msg_len));
    CHECK(same_ptr(pi.payload, exact, k, fi->payload, body, fi->payload_len));
    /* a service name is always handed out whole */
    CHECK((!pi.service_name && !fi->service_name) ||
          (pi.service_name && fi->service_name && pi.service_name - exact == fi->service_name - body));
}

static void check_prefixes(const uint8_t *body, size_t len, unsigned mode)
{
    struct tg_frame_info fi;
    int frc = tg_frame_scan_ex(body, len, &fi, mode, NULL, 0);
    size_t ks[] = {0, 1, 2, 3, 5, 8, 12, 16, 24, 32, 48, len / 2, len > 8 ? len - 8 : 0, len > 1 ? len - 1 : 0, len};
    for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++)
        if (ks[i] <= len)
            check_prefix_at(body, len, ks[i], mode, frc, &fi);
}

static void check_both(const uint8_t *body, size_t len)
{
    check_frame(body, len, TG_SCAN_STRICT);
    check_frame(body, len, TG_SCAN_STRICT | TG_SCAN_CLOSED);
    check_prefixes(body, len, TG_SCAN_STRICT);
    check_prefixes(body, len, TG_SCAN_CLOSED);
    /* closed is stricter than strict */
    struct tg_frame_info fi;
    if (tg_frame_scan_ex(body, len, &fi, TG_SCAN_CLOSED, NULL, 0) == 0)
        CHECK(tg_frame_scan_ex(body, len, &fi, TG_SCAN_STRICT, NULL, 0) == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > TG_FRAME_MAX_DEFAULT)
        size = TG_FRAME_MAX_DEFAULT;
    check_both(data, size);
    size_t pos = 0;
    while (size - pos >= 4) {
        size_t l = (size_t)data[pos] | (size_t)data[pos + 1] << 8 | (size_t)data[pos + 2] << 16 |
                   (size_t)data[pos + 3] << 24;
        pos += 4;
        if (l > size - pos)
            break;
        check_both(data + pos, l);
        pos += l;
    }
    return 0;
}
