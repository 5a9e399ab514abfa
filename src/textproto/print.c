/* print.c: protobuf text format printer for any protobuf-c message, walking
 * the runtime descriptors (presence follows protobuf_c_message_pack()). */
#include "tracegate/textproto.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "textproto/buf.h"
#include "textproto/num.h"
#include "textproto/utf8.h"
#include "tracegate/pbwire.h"

/* Deeper nesting (only possible with hand-built or cyclic messages) is elided. */
#define PRINT_MAX_DEPTH (2 * TG_TEXTPROTO_MAX_DEPTH)

struct printer {
    struct tg_tp_buf b;
    int compact;
};

static void begin_line(struct printer *pr, size_t indent)
{
    if (pr->compact) {
        if (pr->b.len)
            tg_tp_buf_putc(&pr->b, ' ');
    } else {
        tg_tp_buf_spaces(&pr->b, indent);
    }
}

static void end_line(struct printer *pr)
{
    if (!pr->compact)
        tg_tp_buf_putc(&pr->b, '\n');
}

static void put_escaped(struct tg_tp_buf *b, const uint8_t *s, size_t n, int utf8_ok)
{
    tg_tp_buf_putc(b, '"');
    for (size_t i = 0; i < n; i++) {
        uint8_t c = s[i];
        switch (c) {
        case '\n': tg_tp_buf_puts(b, "\\n"); continue;
        case '\r': tg_tp_buf_puts(b, "\\r"); continue;
        case '\t': tg_tp_buf_puts(b, "\\t"); continue;
        case '"': tg_tp_buf_puts(b, "\\\""); continue;
        case '\'': tg_tp_buf_puts(b, "\\'"); continue; /* as protobuf's CEscape does */
        case '\\': tg_tp_buf_puts(b, "\\\\"); continue;
        default: break;
        }
        if (c >= 0x20 && c < 0x7f) {
            tg_tp_buf_putc(b, (char)c);
            continue;
        }
        size_t k = (c >= 0x80 && utf8_ok) ? tg_tp_utf8_seq_len(s + i, n - i) : 0;
        if (k > 0) {
            tg_tp_buf_append(b, s + i, k);
            i += k - 1;
        } else {
            /* always 3 digits so a following digit cannot join the escape */
            tg_tp_buf_printf(b, "\\%03o", (unsigned)c);
        }
    }
    tg_tp_buf_putc(b, '"');
}

static size_t elem_size(ProtobufCType t)
{
    switch (t) {
    case PROTOBUF_C_TYPE_INT32:
    case PROTOBUF_C_TYPE_SINT32:
    case PROTOBUF_C_TYPE_SFIXED32:
    case PROTOBUF_C_TYPE_UINT32:
    case PROTOBUF_C_TYPE_FIXED32:
    case PROTOBUF_C_TYPE_FLOAT:
    case PROTOBUF_C_TYPE_ENUM:
        return 4;
    case PROTOBUF_C_TYPE_INT64:
    case PROTOBUF_C_TYPE_SINT64:
    case PROTOBUF_C_TYPE_SFIXED64:
    case PROTOBUF_C_TYPE_UINT64:
    case PROTOBUF_C_TYPE_FIXED64:
    case PROTOBUF_C_TYPE_DOUBLE:
        return 8;
    case PROTOBUF_C_TYPE_BOOL:
        return sizeof(protobuf_c_boolean);
    case PROTOBUF_C_TYPE_STRING:
        return sizeof(char *);
    case PROTOBUF_C_TYPE_BYTES:
        return sizeof(ProtobufCBinaryData);
    case PROTOBUF_C_TYPE_MESSAGE:
        return sizeof(ProtobufCMessage *);
    }
    return 0;
}

/* protobuf-c's "zeroish" test for proto3 fields without presence. */
static int is_zeroish(const ProtobufCFieldDescriptor *fd, const void *member)
{
    switch (fd->type) {
    case PROTOBUF_C_TYPE_STRING: {
        const char *s = *(const char *const *)member;
        return s == NULL || *s == '\0';
    }
    case PROTOBUF_C_TYPE_BYTES:
        return ((const ProtobufCBinaryData *)member)->len == 0;
    case PROTOBUF_C_TYPE_MESSAGE:
        return *(const void *const *)member == NULL;
    case PROTOBUF_C_TYPE_BOOL:
        return *(const protobuf_c_boolean *)member == 0;
    case PROTOBUF_C_TYPE_FLOAT:
        return *(const float *)member == 0;
    case PROTOBUF_C_TYPE_DOUBLE:
        return *(const double *)member == 0;
    default: {
        size_t n = elem_size(fd->type);
        static const uint8_t zero[8];
        return memcmp(member, zero, n) == 0;
    }
    }
}

/* Number of values of fd present in msg; *base gets the first value's storage. */
static size_t field_count(const ProtobufCMessage *msg, const ProtobufCFieldDescriptor *fd, const void **base)
{
    const char *m = (const char *)msg;
    const void *member = m + fd->offset;
    int ptr_type = fd->type == PROTOBUF_C_TYPE_STRING || fd->type == PROTOBUF_C_TYPE_MESSAGE;
    *base = member;
    if (fd->label == PROTOBUF_C_LABEL_REPEATED) {
        size_t n = *(const size_t *)(m + fd->quantifier_offset);
        *base = *(const void *const *)member;
        return *base ? n : 0;
    }
    if (ptr_type) {
        const void *ptr = *(const void *const *)member;
        if (ptr == NULL || (fd->label != PROTOBUF_C_LABEL_REQUIRED && ptr == fd->default_value))
            return 0;
    }
    if (fd->flags & PROTOBUF_C_FIELD_FLAG_ONEOF)
        return *(const uint32_t *)(m + fd->quantifier_offset) == fd->id;
    switch (fd->label) {
    case PROTOBUF_C_LABEL_REQUIRED:
        return 1;
    case PROTOBUF_C_LABEL_OPTIONAL:
        return ptr_type ? 1 : *(const protobuf_c_boolean *)(m + fd->quantifier_offset) != 0;
    default: /* PROTOBUF_C_LABEL_NONE (proto3) */
        return !is_zeroish(fd, member);
    }
}

static void print_msg(struct printer *pr, const ProtobufCMessage *msg, size_t indent, int depth);

static void print_value(struct printer *pr, const ProtobufCFieldDescriptor *fd, const void *v, size_t indent,
                        int depth)
{
    struct tg_tp_buf *b = &pr->b;
    char num[64];
    begin_line(pr, indent);
    tg_tp_buf_puts(b, fd->name);
    if (fd->type == PROTOBUF_C_TYPE_MESSAGE) {
        const ProtobufCMessage *sub = *(const ProtobufCMessage *const *)v;
        if (depth >= PRINT_MAX_DEPTH) { /* visibly elided, deliberately not parseable */
            tg_tp_buf_puts(b, " { ... }");
            end_line(pr);
            return;
        }
        tg_tp_buf_puts(b, " {");
        end_line(pr);
        if (sub)
            print_msg(pr, sub, indent + 2, depth + 1);
        begin_line(pr, indent);
        tg_tp_buf_putc(b, '}');
        end_line(pr);
        return;
    }
    tg_tp_buf_puts(b, ": ");
    switch (fd->type) {
    case PROTOBUF_C_TYPE_INT32:
    case PROTOBUF_C_TYPE_SINT32:
    case PROTOBUF_C_TYPE_SFIXED32:
        tg_tp_buf_printf(b, "%" PRId32, *(const int32_t *)v);
        break;
    case PROTOBUF_C_TYPE_UINT32:
    case PROTOBUF_C_TYPE_FIXED32:
        tg_tp_buf_printf(b, "%" PRIu32, *(const uint32_t *)v);
        break;
    case PROTOBUF_C_TYPE_INT64:
    case PROTOBUF_C_TYPE_SINT64:
    case PROTOBUF_C_TYPE_SFIXED64:
        tg_tp_buf_printf(b, "%" PRId64, *(const int64_t *)v);
        break;
    case PROTOBUF_C_TYPE_UINT64:
    case PROTOBUF_C_TYPE_FIXED64:
        tg_tp_buf_printf(b, "%" PRIu64, *(const uint64_t *)v);
        break;
    case PROTOBUF_C_TYPE_FLOAT:
        tg_tp_fmt_float(num, sizeof num, *(const float *)v);
        tg_tp_buf_puts(b, num);
        break;
    case PROTOBUF_C_TYPE_DOUBLE:
        tg_tp_fmt_double(num, sizeof num, *(const double *)v);
        tg_tp_buf_puts(b, num);
        break;
    case PROTOBUF_C_TYPE_BOOL:
        tg_tp_buf_puts(b, *(const protobuf_c_boolean *)v ? "true" : "false");
        break;
    case PROTOBUF_C_TYPE_ENUM: {
        int32_t e;
        memcpy(&e, v, sizeof e);
        const ProtobufCEnumValue *ev = fd->descriptor ? protobuf_c_enum_descriptor_get_value(fd->descriptor, e) : NULL;
        if (ev)
            tg_tp_buf_puts(b, ev->name);
        else
            tg_tp_buf_printf(b, "%" PRId32, e);
        break;
    }
    case PROTOBUF_C_TYPE_STRING: {
        const char *s = *(const char *const *)v;
        if (!s)
            s = "";
        put_escaped(b, (const uint8_t *)s, strlen(s), 1);
        break;
    }
    case PROTOBUF_C_TYPE_BYTES: {
        const ProtobufCBinaryData *bd = v;
        put_escaped(b, bd->data, bd->data ? bd->len : 0, 0);
        break;
    }
    case PROTOBUF_C_TYPE_MESSAGE:
        break;
    }
    end_line(pr);
}

static void print_unknown(struct printer *pr, const ProtobufCMessageUnknownField *u, size_t indent)
{
    struct tg_tp_buf *b = &pr->b;
    const uint8_t *d = u->data;
    size_t n = d ? u->len : 0;
    uint64_t v = 0;
    begin_line(pr, indent);
    tg_tp_buf_printf(b, "%" PRIu32 ": ", u->tag);
    switch (u->wire_type) {
    case PROTOBUF_C_WIRE_TYPE_VARINT:
        if (tg_pb_read_varint(d, d + n, &v) == 0)
            goto raw;
        tg_tp_buf_printf(b, "%" PRIu64, v);
        break;
    case PROTOBUF_C_WIRE_TYPE_64BIT:
    case PROTOBUF_C_WIRE_TYPE_32BIT: {
        size_t w = u->wire_type == PROTOBUF_C_WIRE_TYPE_64BIT ? 8 : 4;
        if (n != w)
            goto raw;
        for (size_t i = 0; i < w; i++)
            v |= (uint64_t)d[i] << (8 * i);
        tg_tp_buf_printf(b, "0x%0*" PRIx64, (int)(2 * w), v);
        break;
    }
    case PROTOBUF_C_WIRE_TYPE_LENGTH_PREFIXED: {
        /* protobuf-c keeps the length prefix in the unknown field's data */
        size_t k = tg_pb_read_varint(d, d + n, &v);
        if (k == 0 || v != n - k)
            goto raw;
        put_escaped(b, d + k, n - k, 0);
        break;
    }
    default:
    raw:
        put_escaped(b, d, n, 0);
        break;
    }
    end_line(pr);
}

static void print_msg(struct printer *pr, const ProtobufCMessage *msg, size_t indent, int depth)
{
    const ProtobufCMessageDescriptor *desc = msg->descriptor;
    if (!desc)
        return;
    for (unsigned i = 0; i < desc->n_fields; i++) {
        const ProtobufCFieldDescriptor *fd = &desc->fields[i];
        const void *base;
        size_t n = field_count(msg, fd, &base);
        size_t sz = fd->label == PROTOBUF_C_LABEL_REPEATED ? elem_size(fd->type) : 0;
        for (size_t k = 0; k < n; k++)
            print_value(pr, fd, (const char *)base + k * sz, indent, depth);
    }
    for (unsigned i = 0; i < msg->n_unknown_fields; i++)
        print_unknown(pr, &msg->unknown_fields[i], indent);
}

char *tg_textproto_print(const ProtobufCMessage *msg, int indent)
{
    if (!msg)
        return NULL;
    struct printer pr;
    memset(&pr, 0, sizeof pr);
    pr.compact = indent < 0;
    print_msg(&pr, msg, indent < 0 ? 0 : (size_t)indent, 0);
    tg_tp_buf_putc(&pr.b, '\0');
    if (pr.b.oom) {
        tg_tp_buf_free(&pr.b);
        return NULL;
    }
    return (char *)pr.b.data;
}
