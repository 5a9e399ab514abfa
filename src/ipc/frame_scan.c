/* frame_scan.c: read the routing fields of an encoded IPCFrame without decoding it, leniently (what
 * the IPC host accepts) or strictly (what the gateway's bridge forwards); see tracegate/frame.h.
 *
 * Why a strict mode: Perfetto's decoder takes the last occurrence of a field and reads a scalar
 * from any of the varint, fixed32 and fixed64 wire types. A reader that only takes varints, or the
 * first occurrence, sees another frame than the service does. The strict checks run first and
 * refuse every frame on which two such readers could disagree; the values are then read by the
 * lenient pass, which on such a frame reads exactly what Perfetto reads. */
#include "tracegate/frame.h"
#include "tracegate/pbwire.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* ------------------------------------------------------------ reading a window */

/* The scans below run over a frame of which only [body, avail) may be at hand (tg_frame_scan_prefix:
 * the bridge reads a frame's first bytes without pulling up its body). SCAN_PARTIAL means the
 * answer needs a byte past the window; with the whole frame at hand (avail == end) it never
 * happens and every read is tg_pb_next's. */
#define SCAN_PARTIAL 2 /* distinct from next_in's 1 (a field) and from the tg_frame_scan_error codes */

/* tg_pb_next over [r->p, r->end) when only the bytes before `avail` may be read. A length-delimited
 * field's key and length must be in the window, its contents need not be (they are skipped; a
 * caller that looks inside checks within()). Anything else that reaches past the window, or that
 * would be malformed, is SCAN_PARTIAL: the whole frame is then scanned, which gives the verdict. */
static int next_in(struct tg_pb_reader *r, const uint8_t *avail, struct tg_pb_field *f)
{
    if (avail >= r->end)
        return tg_pb_next(r, f);
    if (r->p >= r->end)
        return 0;
    if (r->p >= avail)
        return SCAN_PARTIAL;
    uint64_t key;
    size_t n = tg_pb_read_varint(r->p, avail, &key);
    if (n == 0 || (key >> 3) == 0 || (key >> 3) > 0x1fffffff)
        return SCAN_PARTIAL;
    if ((key & 7) == TG_PB_LEN) {
        uint64_t l;
        size_t m = tg_pb_read_varint(r->p + n, avail, &l);
        if (m == 0)
            return SCAN_PARTIAL;
        const uint8_t *d = r->p + n + m;
        if (l > (uint64_t)(r->end - d))
            return SCAN_PARTIAL;
        f->number = (uint32_t)(key >> 3);
        f->wire = TG_PB_LEN;
        f->value = 0;
        f->data = d;
        f->len = (size_t)l;
        r->p = d + l;
        return 1;
    }
    struct tg_pb_reader w = {r->p, avail};
    if (tg_pb_next(&w, f) != 1)
        return SCAN_PARTIAL;
    r->p = w.p;
    return 1;
}

/* Whether [p, p + len) is in the window. */
static int within(const uint8_t *p, size_t len, const uint8_t *avail)
{
    return len == 0 || (p <= avail && len <= (size_t)(avail - p));
}

/* ------------------------------------------------------------ strict checks */

/* One field a message declares: its number, name, wire type, and whether it may repeat. */
struct rule {
    uint32_t number;
    const char *name;
    enum tg_pb_wire wire;
    int repeated;
};

struct msg_rules {
    const char *name;
    const struct rule *fields;
    size_t n;
};

#define V TG_PB_VARINT
#define L TG_PB_LEN
static const struct rule k_frame[] = {
    {1, "data_for_testing", L, 1},       {2, "request_id", V, 0},        {3, "msg_bind_service", L, 0},
    {4, "msg_bind_service_reply", L, 0}, {5, "msg_invoke_method", L, 0}, {6, "msg_invoke_method_reply", L, 0},
    {7, "msg_request_error", L, 0},      {8, "set_peer_identity", L, 0},
};
static const struct rule k_bind[] = {{1, "service_name", L, 0}};
static const struct rule k_bind_reply[] = {{1, "success", V, 0}, {2, "service_id", V, 0}, {3, "methods", L, 1}};
static const struct rule k_method_info[] = {{1, "id", V, 0}, {2, "name", L, 0}};
static const struct rule k_invoke[] = {
    {1, "service_id", V, 0}, {2, "method_id", V, 0}, {3, "args_proto", L, 0}, {4, "drop_reply", V, 0}};
static const struct rule k_invoke_reply[] = {{1, "success", V, 0}, {2, "has_more", V, 0}, {3, "reply_proto", L, 0}};
static const struct rule k_request_error[] = {{1, "error", L, 0}};
#undef V
#undef L

#define RULES(n, t) {n, t, sizeof t / sizeof t[0]}
static const struct msg_rules m_frame = RULES("IPCFrame", k_frame);
static const struct msg_rules m_bind = RULES("BindService", k_bind);
static const struct msg_rules m_bind_reply = RULES("BindServiceReply", k_bind_reply);
static const struct msg_rules m_method_info = RULES("BindServiceReply.MethodInfo", k_method_info);
static const struct msg_rules m_invoke = RULES("InvokeMethod", k_invoke);
static const struct msg_rules m_invoke_reply = RULES("InvokeMethodReply", k_invoke_reply);
static const struct msg_rules m_request_error = RULES("RequestError", k_request_error);
#undef RULES

struct strict {
    char *why;
    size_t whylen;
};

__attribute__((format(printf, 3, 4))) static int refuse(struct strict *st, int code, const char *fmt, ...)
{
    if (st->why && st->whylen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(st->why, st->whylen, fmt, ap);
        va_end(ap);
    }
    return code;
}

static const char *wire_name(enum tg_pb_wire w)
{
    switch (w) {
    case TG_PB_VARINT: return "varint";
    case TG_PB_I64: return "fixed64";
    case TG_PB_LEN: return "length-delimited";
    case TG_PB_I32: return "fixed32";
    default: return "group";
    }
}

/* Checks one message against its rules: each declared field with its declared wire type, the
 * non-repeated ones at most once; unknown fields refused when `closed`. If `members` is given,
 * fields in [first, last] form a oneof of which at most one may be set. `each` (may be NULL) is
 * called for every length-delimited field with a rule, to check what it contains. Only bytes
 * before `avail` are read (SCAN_PARTIAL if more are needed). */
static int check_msg(struct strict *st, const struct msg_rules *m, const uint8_t *p, size_t len,
                     const uint8_t *avail, int closed, uint32_t oneof_first, uint32_t oneof_last,
                     int (*each)(struct strict *st, uint32_t number, const uint8_t *p, size_t len,
                                 const uint8_t *avail))
{
    struct tg_pb_reader r;
    struct tg_pb_field f;
    uint32_t seen = 0, member = 0;
    int rc;
    tg_pb_reader_init(&r, p, len);
    while ((rc = next_in(&r, avail, &f)) == 1) {
        const struct rule *ru = NULL;
        for (size_t i = 0; i < m->n; i++)
            if (m->fields[i].number == f.number)
                ru = &m->fields[i];
        if (!ru) {
            if (closed)
                return refuse(st, TG_SCAN_UNKNOWN_FIELD, "%s has an unknown field %u", m->name, f.number);
            continue;
        }
        if (f.wire != ru->wire)
            return refuse(st, TG_SCAN_WIRE_TYPE, "%s.%s has wire type %s (%s expected)", m->name, ru->name,
                          wire_name(f.wire), wire_name(ru->wire));
        uint32_t bit = 1u << ru->number; /* rule numbers are small */
        if ((seen & bit) && !ru->repeated)
            return refuse(st, TG_SCAN_AMBIGUOUS, "%s.%s appears more than once", m->name, ru->name);
        seen |= bit;
        if (oneof_first && f.number >= oneof_first && f.number <= oneof_last) {
            if (member && member != f.number) {
                const char *other = "";
                for (size_t i = 0; i < m->n; i++)
                    if (m->fields[i].number == member)
                        other = m->fields[i].name;
                return refuse(st, TG_SCAN_AMBIGUOUS, "%s sets both %s and %s", m->name, other, ru->name);
            }
            member = f.number;
        }
        if (each && f.wire == TG_PB_LEN) {
            int erc = each(st, f.number, f.data, f.len, avail);
            if (erc != 0)
                return erc;
        }
    }
    if (rc == SCAN_PARTIAL)
        return SCAN_PARTIAL;
    if (rc < 0)
        return refuse(st, TG_SCAN_MALFORMED, "%s is not valid protobuf", m->name);
    return 0;
}

static int each_bind_reply(struct strict *st, uint32_t number, const uint8_t *p, size_t len, const uint8_t *avail)
{
    if (number != 3)
        return 0;
    return check_msg(st, &m_method_info, p, len, avail, 0, 0, 0, NULL);
}

static int strict_member(struct strict *st, enum tg_ipc_msg msg, const uint8_t *p, size_t len, const uint8_t *avail,
                         int closed)
{
    switch (msg) {
    case TG_MSG_BIND_SERVICE: return check_msg(st, &m_bind, p, len, avail, closed, 0, 0, NULL);
    case TG_MSG_INVOKE_METHOD: return check_msg(st, &m_invoke, p, len, avail, closed, 0, 0, NULL);
    case TG_MSG_BIND_SERVICE_REPLY: return check_msg(st, &m_bind_reply, p, len, avail, 0, 0, 0, each_bind_reply);
    case TG_MSG_INVOKE_METHOD_REPLY: return check_msg(st, &m_invoke_reply, p, len, avail, 0, 0, 0, NULL);
    case TG_MSG_REQUEST_ERROR: return check_msg(st, &m_request_error, p, len, avail, 0, 0, 0, NULL);
    default: return 0; /* SetPeerIdentity: nothing in it routes a frame */
    }
}

/* ------------------------------------------------------------ lenient reading */

/* InvokeMethod: 1 service_id, 2 method_id, 3 args_proto, 4 drop_reply.
 * InvokeMethodReply: 1 success, 2 has_more, 3 reply_proto.
 * BindService: 1 service_name. */
static int scan_member(struct tg_frame_info *info, const uint8_t *avail)
{
    struct tg_pb_reader r;
    struct tg_pb_field f;
    int rc;
    tg_pb_reader_init(&r, info->msg_data, info->msg_len);
    while ((rc = next_in(&r, avail, &f)) == 1) {
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
                if (!within(f.data, f.len, avail))
                    return SCAN_PARTIAL; /* the name is read by callers */
                info->service_name = f.data;
                info->service_name_len = f.len;
            }
            break;
        default:
            break;
        }
    }
    if (rc == SCAN_PARTIAL)
        return SCAN_PARTIAL;
    return rc < 0 ? -1 : 0;
}

/* Returns 0, -1 (not valid protobuf) or SCAN_PARTIAL. */
static int scan_lenient(const uint8_t *body, size_t len, const uint8_t *avail, struct tg_frame_info *info)
{
    memset(info, 0, sizeof *info);
    struct tg_pb_reader r;
    struct tg_pb_field f;
    int rc;
    tg_pb_reader_init(&r, body, len);
    while ((rc = next_in(&r, avail, &f)) == 1) {
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
    if (rc == SCAN_PARTIAL)
        return SCAN_PARTIAL;
    if (rc < 0)
        return -1;
    if (info->msg != TG_MSG_NONE)
        return scan_member(info, avail);
    return 0;
}

int tg_frame_scan(const uint8_t *body, size_t len, struct tg_frame_info *info)
{
    return scan_lenient(body, len, body + len, info) != 0 ? -1 : 0;
}

/* The one `msg` member of a frame that passed check_msg (at most one, length-delimited). */
static enum tg_ipc_msg find_member(const uint8_t *body, size_t len, const uint8_t *avail, const uint8_t **data,
                                   size_t *dlen)
{
    struct tg_pb_reader r;
    struct tg_pb_field f;
    tg_pb_reader_init(&r, body, len);
    while (next_in(&r, avail, &f) == 1)
        if (f.number >= TG_MSG_BIND_SERVICE && f.number <= TG_MSG_SET_PEER_IDENTITY) {
            *data = f.data;
            *dlen = f.len;
            return (enum tg_ipc_msg)f.number;
        }
    return TG_MSG_NONE;
}

/* The scan over the window [body, avail): 0, a tg_frame_scan_error, or SCAN_PARTIAL. */
static int scan_window(const uint8_t *body, size_t len, const uint8_t *avail, struct tg_frame_info *info,
                       unsigned flags, struct strict *st)
{
    if (flags & (TG_SCAN_STRICT | TG_SCAN_CLOSED)) {
        int closed = (flags & TG_SCAN_CLOSED) != 0;
        memset(info, 0, sizeof *info);
        int rc = check_msg(st, &m_frame, body, len, avail, closed, TG_MSG_BIND_SERVICE, TG_MSG_SET_PEER_IDENTITY,
                           NULL);
        const uint8_t *mdata = NULL;
        size_t mlen = 0;
        if (rc == 0) {
            enum tg_ipc_msg msg = find_member(body, len, avail, &mdata, &mlen);
            rc = strict_member(st, msg, mdata, mlen, avail, closed);
        }
        if (rc != 0)
            return rc;
    }
    int lrc = scan_lenient(body, len, avail, info);
    if (lrc == SCAN_PARTIAL)
        return SCAN_PARTIAL;
    if (lrc != 0)
        return refuse(st, TG_SCAN_MALFORMED, "IPCFrame is not valid protobuf");
    return 0;
}

int tg_frame_scan_ex(const uint8_t *body, size_t len, struct tg_frame_info *info, unsigned flags, char *why,
                     size_t whylen)
{
    if (why && whylen)
        why[0] = '\0';
    struct strict st = {why, whylen};
    return scan_window(body, len, body + len, info, flags, &st);
}

int tg_frame_scan_prefix(const uint8_t *prefix, size_t avail, size_t len, struct tg_frame_info *info,
                         unsigned flags)
{
    if (avail > len)
        avail = len;
    struct strict st = {NULL, 0};
    if (scan_window(prefix, len, prefix + avail, info, flags, &st) != 0)
        return TG_SCAN_INCOMPLETE;
    /* what lies past the window is not at hand: no pointer to it is handed out */
    const uint8_t *end = prefix + avail;
    if (info->msg_data && !within(info->msg_data, info->msg_len, end))
        info->msg_data = NULL;
    if (info->payload && !within(info->payload, info->payload_len, end))
        info->payload = NULL;
    return 0;
}
