/* parse.c: protobuf text format reader. Parses text against a protobuf-c
 * message descriptor into per-message lists of encoded values, then emits
 * canonical wire bytes (field-number order, like protobuf_c_message_pack());
 * tg_textproto_parse() hands those bytes to protobuf_c_message_unpack() so the
 * result is allocated exactly as protobuf-c expects. */
#include "tracegate/textproto.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "textproto/buf.h"
#include "textproto/lexer.h"
#include "textproto/num.h"

/* One value of a field: its encoded payload (without tag, and without length
 * prefix for length-delimited types) lives at data[off, off+len). */
struct tp_entry {
    unsigned field; /* index into desc->fields */
    size_t off, len;
};

struct tp_msg {
    const ProtobufCMessageDescriptor *desc;
    struct tp_entry *ents;
    size_t n, cap;
    struct tg_tp_buf data;
    unsigned char *seen; /* per field index: given at least once */
};

struct parser {
    struct tg_tp_lexer lx;
    struct tg_tp_token tok; /* lookahead */
    char *err;
    size_t errlen;
};

static int advance(struct parser *p)
{
    return tg_tp_lex(&p->lx, &p->tok);
}

static int fail_oom(struct parser *p)
{
    tg_tp_error(p->err, p->errlen, p->tok.line, p->tok.col, "out of memory");
    return -1;
}

static const char *type_name(ProtobufCType t)
{
    switch (t) {
    case PROTOBUF_C_TYPE_INT32: return "int32";
    case PROTOBUF_C_TYPE_SINT32: return "sint32";
    case PROTOBUF_C_TYPE_SFIXED32: return "sfixed32";
    case PROTOBUF_C_TYPE_INT64: return "int64";
    case PROTOBUF_C_TYPE_SINT64: return "sint64";
    case PROTOBUF_C_TYPE_SFIXED64: return "sfixed64";
    case PROTOBUF_C_TYPE_UINT32: return "uint32";
    case PROTOBUF_C_TYPE_FIXED32: return "fixed32";
    case PROTOBUF_C_TYPE_UINT64: return "uint64";
    case PROTOBUF_C_TYPE_FIXED64: return "fixed64";
    case PROTOBUF_C_TYPE_FLOAT: return "float";
    case PROTOBUF_C_TYPE_DOUBLE: return "double";
    case PROTOBUF_C_TYPE_BOOL: return "bool";
    case PROTOBUF_C_TYPE_ENUM: return "enum";
    case PROTOBUF_C_TYPE_STRING: return "string";
    case PROTOBUF_C_TYPE_BYTES: return "bytes";
    case PROTOBUF_C_TYPE_MESSAGE: return "message";
    }
    return "?";
}

static int wire_type(ProtobufCType t)
{
    switch (t) {
    case PROTOBUF_C_TYPE_SFIXED32:
    case PROTOBUF_C_TYPE_FIXED32:
    case PROTOBUF_C_TYPE_FLOAT:
        return PROTOBUF_C_WIRE_TYPE_32BIT;
    case PROTOBUF_C_TYPE_SFIXED64:
    case PROTOBUF_C_TYPE_FIXED64:
    case PROTOBUF_C_TYPE_DOUBLE:
        return PROTOBUF_C_WIRE_TYPE_64BIT;
    case PROTOBUF_C_TYPE_STRING:
    case PROTOBUF_C_TYPE_BYTES:
    case PROTOBUF_C_TYPE_MESSAGE:
        return PROTOBUF_C_WIRE_TYPE_LENGTH_PREFIXED;
    default:
        return PROTOBUF_C_WIRE_TYPE_VARINT;
    }
}

/* Renders a token for an error message into buf (quoted, truncated, printable),
 * with a '-' in front when neg. */
static const char *describe_neg(const struct tg_tp_token *t, int neg, char *buf, size_t n)
{
    switch (t->kind) {
    case TG_TP_EOF:
        return "end of input";
    case TG_TP_STRING:
        return "a string";
    default:
        break;
    }
    size_t len = t->len > 40 ? 40 : t->len;
    size_t o = 0;
    buf[o++] = '\'';
    if (neg)
        buf[o++] = '-';
    for (size_t i = 0; i < len && o + 5 < n; i++) {
        unsigned char c = (unsigned char)t->text[i];
        buf[o++] = (c >= 0x20 && c < 0x7f) ? (char)c : '?';
    }
    if (len < t->len && o + 5 < n) {
        buf[o++] = '.';
        buf[o++] = '.';
        buf[o++] = '.';
    }
    buf[o++] = '\'';
    buf[o] = '\0';
    return buf;
}

static const char *describe(const struct tg_tp_token *t, char *buf, size_t n)
{
    return describe_neg(t, 0, buf, n);
}

static void msg_init(struct tp_msg *m, const ProtobufCMessageDescriptor *desc)
{
    memset(m, 0, sizeof *m);
    m->desc = desc;
}

static int msg_alloc(struct parser *p, struct tp_msg *m)
{
    m->seen = calloc(m->desc->n_fields + 1, 1);
    /* data.data is never NULL afterwards, so pointer arithmetic on it is defined */
    if (!m->seen || tg_tp_buf_reserve(&m->data, 64) < 0)
        return fail_oom(p);
    return 0;
}

static void msg_free(struct tp_msg *m)
{
    free(m->ents);
    free(m->seen);
    tg_tp_buf_free(&m->data);
}

static int add_entry(struct parser *p, struct tp_msg *m, unsigned field, size_t off)
{
    if (m->data.oom)
        return fail_oom(p);
    if (m->n == m->cap) {
        size_t ncap = m->cap ? m->cap * 2 : 16;
        struct tp_entry *e = realloc(m->ents, ncap * sizeof *e);
        if (!e)
            return fail_oom(p);
        m->ents = e;
        m->cap = ncap;
    }
    m->ents[m->n].field = field;
    m->ents[m->n].off = off;
    m->ents[m->n].len = m->data.len - off;
    m->n++;
    return 0;
}

static int is_packable(const ProtobufCFieldDescriptor *fd)
{
    return fd->type != PROTOBUF_C_TYPE_STRING && fd->type != PROTOBUF_C_TYPE_BYTES &&
           fd->type != PROTOBUF_C_TYPE_MESSAGE;
}

/* Emits m's fields in field-number order (desc->fields is sorted by number)
 * keeping the order of repeated values. */
static int msg_encode(struct parser *p, struct tp_msg *m, struct tg_tp_buf *out)
{
    unsigned nf = m->desc->n_fields;
    size_t *start = calloc((size_t)nf + 1, sizeof *start);
    size_t *order = malloc((m->n + 1) * sizeof *order);
    if (!start || !order) {
        free(start);
        free(order);
        return fail_oom(p);
    }
    for (size_t i = 0; i < m->n; i++)
        start[m->ents[i].field + 1]++;
    for (unsigned f = 0; f < nf; f++)
        start[f + 1] += start[f];
    for (size_t i = 0; i < m->n; i++) /* stable counting sort; start[f] ends at end-of-f */
        order[start[m->ents[i].field]++] = i;
    size_t k = 0;
    for (unsigned f = 0; f < nf && k < m->n; f++) {
        size_t end = start[f];
        if (k == end)
            continue;
        const ProtobufCFieldDescriptor *fd = &m->desc->fields[f];
        int wt = wire_type(fd->type);
        if (fd->label == PROTOBUF_C_LABEL_REPEATED && (fd->flags & PROTOBUF_C_FIELD_FLAG_PACKED) &&
            is_packable(fd)) {
            size_t total = 0;
            for (size_t j = k; j < end; j++)
                total += m->ents[order[j]].len;
            tg_tp_buf_varint(out, ((uint64_t)fd->id << 3) | PROTOBUF_C_WIRE_TYPE_LENGTH_PREFIXED);
            tg_tp_buf_varint(out, total);
            for (size_t j = k; j < end; j++)
                tg_tp_buf_append(out, m->data.data + m->ents[order[j]].off, m->ents[order[j]].len);
        } else {
            for (size_t j = k; j < end; j++) {
                const struct tp_entry *e = &m->ents[order[j]];
                tg_tp_buf_varint(out, ((uint64_t)fd->id << 3) | (uint64_t)wt);
                if (wt == PROTOBUF_C_WIRE_TYPE_LENGTH_PREFIXED)
                    tg_tp_buf_varint(out, e->len);
                tg_tp_buf_append(out, m->data.data + e->off, e->len);
            }
        }
        k = end;
    }
    free(start);
    free(order);
    return out->oom ? fail_oom(p) : 0;
}

static int check_required(struct parser *p, const struct tp_msg *m, const struct tg_tp_token *at)
{
    for (unsigned f = 0; f < m->desc->n_fields; f++) {
        const ProtobufCFieldDescriptor *fd = &m->desc->fields[f];
        if (fd->label == PROTOBUF_C_LABEL_REQUIRED && !m->seen[f]) {
            tg_tp_error(p->err, p->errlen, at->line, at->col, "missing required field '%s' in %s",
                        fd->name, m->desc->name);
            return -1;
        }
    }
    return 0;
}

/* Records that field f is being given; rejects a second value for a singular
 * field and a second member of a oneof. */
static int note_field(struct parser *p, struct tp_msg *m, unsigned f, const struct tg_tp_token *name)
{
    const ProtobufCFieldDescriptor *fd = &m->desc->fields[f];
    if (fd->label != PROTOBUF_C_LABEL_REPEATED) {
        if (m->seen[f]) {
            tg_tp_error(p->err, p->errlen, name->line, name->col,
                        "non-repeated field '%s' is specified more than once", fd->name);
            return -1;
        }
        if (fd->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) {
            for (unsigned g = 0; g < m->desc->n_fields; g++) {
                const ProtobufCFieldDescriptor *o = &m->desc->fields[g];
                if (g != f && m->seen[g] && (o->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) &&
                    o->quantifier_offset == fd->quantifier_offset) {
                    tg_tp_error(p->err, p->errlen, name->line, name->col,
                                "field '%s' conflicts with '%s': both are members of the same oneof",
                                fd->name, o->name);
                    return -1;
                }
            }
        }
    }
    m->seen[f] = 1;
    return 0;
}

/* Parses the digits of an INT token. Returns 0, -1 on overflow, -2 if invalid. */
static int parse_uint(const struct tg_tp_token *t, uint64_t *out)
{
    const char *s = t->text;
    size_t n = t->len, i = 0;
    unsigned base = 10;
    if (n >= 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
        base = 16;
        i = 2;
    } else if (n >= 2 && s[0] == '0') {
        base = 8;
        i = 1;
    }
    uint64_t v = 0;
    for (; i < n; i++) {
        char c = s[i];
        unsigned d;
        if (c >= '0' && c <= '9')
            d = (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f')
            d = (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F')
            d = (unsigned)(c - 'A' + 10);
        else
            return -2;
        if (d >= base)
            return -2;
        if (v > (UINT64_MAX - d) / base)
            return -1;
        v = v * base + d;
    }
    *out = v;
    return 0;
}

static int type_error(struct parser *p, const struct tg_tp_token *t, const ProtobufCFieldDescriptor *fd,
                      const char *expected)
{
    char b[64];
    tg_tp_error(p->err, p->errlen, t->line, t->col, "expected %s for %s field '%s', got %s", expected,
                type_name(fd->type), fd->name, describe(t, b, sizeof b));
    return -1;
}

/* Copies a token into a NUL-terminated heap string, dropping an f/F suffix. */
static char *number_text(const struct tg_tp_token *t)
{
    size_t n = t->len;
    if (t->kind == TG_TP_FLOAT && n > 0 && (t->text[n - 1] == 'f' || t->text[n - 1] == 'F'))
        n--;
    char *s = malloc(n + 1);
    if (s) {
        memcpy(s, t->text, n);
        s[n] = '\0';
    }
    return s;
}

static int ident_is(const struct tg_tp_token *t, const char *w)
{
    return strlen(w) == t->len && strncasecmp(t->text, w, t->len) == 0;
}

static int parse_floating(struct parser *p, struct tp_msg *m, const ProtobufCFieldDescriptor *fd, int neg,
                          const struct tg_tp_token *t)
{
    int is_float = fd->type == PROTOBUF_C_TYPE_FLOAT;
    double d = 0;
    float f = 0;
    if (t->kind == TG_TP_IDENT) {
        if (ident_is(t, "inf") || ident_is(t, "infinity"))
            d = INFINITY;
        else if (ident_is(t, "nan"))
            d = NAN;
        else
            return type_error(p, t, fd, "a number");
        f = (float)d;
    } else if (t->kind == TG_TP_FLOAT || t->kind == TG_TP_INT) {
        uint64_t u;
        int base10 = t->kind == TG_TP_FLOAT || t->len < 2 || t->text[0] != '0';
        if (!base10) { /* hex or octal integer literal */
            int r = parse_uint(t, &u);
            if (r == -2) {
                char b[64];
                tg_tp_error(p->err, p->errlen, t->line, t->col, "invalid number %s", describe(t, b, sizeof b));
                return -1;
            }
            d = r == -1 ? 18446744073709551616.0 : (double)u;
            f = (float)d;
        } else {
            char *s = number_text(t);
            if (!s)
                return fail_oom(p);
            int r = is_float ? tg_tp_strtof(s, &f) : tg_tp_strtod(s, &d);
            free(s);
            if (r < 0) {
                char b[64];
                tg_tp_error(p->err, p->errlen, t->line, t->col, "invalid number %s", describe(t, b, sizeof b));
                return -1;
            }
        }
    } else {
        return type_error(p, t, fd, "a number");
    }
    if (is_float) {
        if (neg)
            f = -f;
        uint32_t bits;
        memcpy(&bits, &f, 4);
        tg_tp_buf_fixed(&m->data, bits, 4);
    } else {
        if (neg)
            d = -d;
        uint64_t bits;
        memcpy(&bits, &d, 8);
        tg_tp_buf_fixed(&m->data, bits, 8);
    }
    return 0;
}

static int parse_integer(struct parser *p, struct tp_msg *m, const ProtobufCFieldDescriptor *fd, int neg,
                         const struct tg_tp_token *t, const struct tg_tp_token *start)
{
    if (t->kind != TG_TP_INT)
        return type_error(p, t, fd, "an integer");
    uint64_t mag = 0;
    int r = parse_uint(t, &mag);
    if (r == -2) {
        char b[64];
        tg_tp_error(p->err, p->errlen, t->line, t->col, "invalid integer %s", describe(t, b, sizeof b));
        return -1;
    }
    uint64_t maxpos, maxneg;
    switch (fd->type) {
    case PROTOBUF_C_TYPE_INT32:
    case PROTOBUF_C_TYPE_SINT32:
    case PROTOBUF_C_TYPE_SFIXED32:
    case PROTOBUF_C_TYPE_ENUM:
        maxpos = INT32_MAX;
        maxneg = (uint64_t)INT32_MAX + 1;
        break;
    case PROTOBUF_C_TYPE_INT64:
    case PROTOBUF_C_TYPE_SINT64:
    case PROTOBUF_C_TYPE_SFIXED64:
        maxpos = INT64_MAX;
        maxneg = (uint64_t)INT64_MAX + 1;
        break;
    case PROTOBUF_C_TYPE_UINT32:
    case PROTOBUF_C_TYPE_FIXED32:
        maxpos = UINT32_MAX;
        maxneg = 0;
        break;
    default:
        maxpos = UINT64_MAX;
        maxneg = 0;
        break;
    }
    if (r == -1 || (neg ? (mag > maxneg || maxneg == 0) : mag > maxpos)) {
        tg_tp_error(p->err, p->errlen, start->line, start->col, "value %s%.*s out of range for %s field '%s'",
                    neg ? "-" : "", (int)(t->len > 60 ? 60 : t->len), t->text, type_name(fd->type), fd->name);
        return -1;
    }
    /* two's complement bit pattern; for signed types also the value */
    uint64_t bits = neg ? (~mag + 1) : mag;
    int64_t sv = 0;
    if (fd->type == PROTOBUF_C_TYPE_SINT32 || fd->type == PROTOBUF_C_TYPE_SINT64)
        sv = !neg ? (int64_t)mag : mag == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)mag;
    switch (fd->type) {
    case PROTOBUF_C_TYPE_INT32:
    case PROTOBUF_C_TYPE_ENUM:
    case PROTOBUF_C_TYPE_INT64:
    case PROTOBUF_C_TYPE_UINT32:
    case PROTOBUF_C_TYPE_UINT64:
        tg_tp_buf_varint(&m->data, bits); /* negative int32 is sign-extended to 10 bytes */
        break;
    case PROTOBUF_C_TYPE_SINT32:
    case PROTOBUF_C_TYPE_SINT64:
        tg_tp_buf_varint(&m->data, sv < 0 ? (((uint64_t)(-(sv + 1))) << 1) | 1 : (uint64_t)sv << 1);
        break;
    case PROTOBUF_C_TYPE_SFIXED32:
    case PROTOBUF_C_TYPE_FIXED32:
        tg_tp_buf_fixed(&m->data, bits & 0xffffffffu, 4);
        break;
    default: /* SFIXED64, FIXED64 */
        tg_tp_buf_fixed(&m->data, bits, 8);
        break;
    }
    return 0;
}

/* proto3 fields without presence (PROTOBUF_C_LABEL_NONE, not in a oneof) are
 * not serialized when zero; protobuf-c's pack() compares floats by value. */
static int implicit_zero(const ProtobufCFieldDescriptor *fd, const uint8_t *v, size_t n)
{
    if (fd->label != PROTOBUF_C_LABEL_NONE || (fd->flags & PROTOBUF_C_FIELD_FLAG_ONEOF))
        return 0;
    if (fd->type == PROTOBUF_C_TYPE_FLOAT && n == 4) {
        float f;
        uint32_t bits = (uint32_t)v[0] | (uint32_t)v[1] << 8 | (uint32_t)v[2] << 16 | (uint32_t)v[3] << 24;
        memcpy(&f, &bits, 4);
        return f == 0;
    }
    if (fd->type == PROTOBUF_C_TYPE_DOUBLE && n == 8) {
        double d;
        uint64_t bits = 0;
        for (int i = 0; i < 8; i++)
            bits |= (uint64_t)v[i] << (8 * i);
        memcpy(&d, &bits, 8);
        return d == 0;
    }
    for (size_t i = 0; i < n; i++)
        if (v[i])
            return 0;
    return 1; /* also the empty string/bytes */
}

/* Records the value appended at data[off..] as an entry of field f, or drops
 * it if it is an implicit proto3 zero. */
static int finish_scalar(struct parser *p, struct tp_msg *m, unsigned f, size_t off)
{
    if (m->data.oom)
        return fail_oom(p);
    if (implicit_zero(&m->desc->fields[f], m->data.data + off, m->data.len - off)) {
        m->data.len = off;
        return 0;
    }
    return add_entry(p, m, f, off);
}

/* Parses one scalar value (current token) of field f and records it. */
static int parse_scalar(struct parser *p, struct tp_msg *m, unsigned f)
{
    const ProtobufCFieldDescriptor *fd = &m->desc->fields[f];
    struct tg_tp_token start = p->tok;
    size_t off = m->data.len;
    char b[64];

    if (fd->type == PROTOBUF_C_TYPE_STRING || fd->type == PROTOBUF_C_TYPE_BYTES) {
        if (p->tok.kind != TG_TP_STRING)
            return type_error(p, &p->tok, fd, "a quoted string");
        while (p->tok.kind == TG_TP_STRING) {
            tg_tp_unescape(&p->tok, &m->data);
            if (advance(p) < 0)
                return -1;
        }
        if (m->data.oom)
            return fail_oom(p);
        if (fd->type == PROTOBUF_C_TYPE_STRING && memchr(m->data.data + off, 0, m->data.len - off)) {
            tg_tp_error(p->err, p->errlen, start.line, start.col,
                        "string field '%s' cannot contain a NUL byte (protobuf-c strings are C strings)",
                        fd->name);
            return -1;
        }
        return finish_scalar(p, m, f, off);
    }

    int neg = 0;
    if (tg_tp_is(&p->tok, '-')) {
        neg = 1;
        if (advance(p) < 0)
            return -1;
    }
    struct tg_tp_token t = p->tok;
    int r;
    switch (fd->type) {
    case PROTOBUF_C_TYPE_BOOL: {
        int v = -1;
        if (!neg && t.kind == TG_TP_IDENT) {
            static const char *const yes[] = {"true", "True", "t"}, *const no[] = {"false", "False", "f"};
            for (int i = 0; i < 3; i++) {
                if (t.len == strlen(yes[i]) && memcmp(t.text, yes[i], t.len) == 0)
                    v = 1;
                if (t.len == strlen(no[i]) && memcmp(t.text, no[i], t.len) == 0)
                    v = 0;
            }
        } else if (!neg && t.kind == TG_TP_INT) {
            uint64_t u;
            if (parse_uint(&t, &u) == 0 && u <= 1)
                v = (int)u;
        }
        if (v < 0) {
            if (t.kind == TG_TP_IDENT || t.kind == TG_TP_INT) {
                tg_tp_error(p->err, p->errlen, start.line, start.col, "invalid value %s for bool field '%s'",
                            describe_neg(&t, neg, b, sizeof b), fd->name);
                return -1;
            }
            return type_error(p, &t, fd, "true or false");
        }
        tg_tp_buf_varint(&m->data, (uint64_t)v);
        r = 0;
        break;
    }
    case PROTOBUF_C_TYPE_ENUM:
        if (t.kind == TG_TP_IDENT) {
            const ProtobufCEnumDescriptor *ed = fd->descriptor;
            char name[256];
            const ProtobufCEnumValue *ev = NULL;
            if (!neg && t.len < sizeof name) {
                memcpy(name, t.text, t.len);
                name[t.len] = '\0';
                ev = protobuf_c_enum_descriptor_get_value_by_name(ed, name);
            }
            if (!ev) {
                tg_tp_error(p->err, p->errlen, start.line, start.col, "unknown value %s for enum %s (field '%s')",
                            describe_neg(&t, neg, b, sizeof b), ed->name, fd->name);
                return -1;
            }
            tg_tp_buf_varint(&m->data, (uint64_t)(int64_t)ev->value);
            r = 0;
        } else if (t.kind == TG_TP_INT) {
            r = parse_integer(p, m, fd, neg, &t, &start);
        } else {
            return type_error(p, &t, fd, "a value name or number");
        }
        break;
    case PROTOBUF_C_TYPE_FLOAT:
    case PROTOBUF_C_TYPE_DOUBLE:
        r = parse_floating(p, m, fd, neg, &t);
        break;
    default:
        r = parse_integer(p, m, fd, neg, &t, &start);
        break;
    }
    if (r < 0)
        return -1;
    if (advance(p) < 0)
        return -1;
    return finish_scalar(p, m, f, off);
}

static int parse_fields(struct parser *p, struct tp_msg *m, char closer, const struct tg_tp_token *opener,
                        const char *what, int depth);

/* Parses `{ ... }` or `< ... >` (current token is the opener) for field f. */
static int parse_message_value(struct parser *p, struct tp_msg *m, unsigned f, int depth)
{
    const ProtobufCFieldDescriptor *fd = &m->desc->fields[f];
    struct tg_tp_token open = p->tok;
    char closer;
    if (tg_tp_is(&open, '{'))
        closer = '}';
    else if (tg_tp_is(&open, '<'))
        closer = '>';
    else {
        char b[64];
        tg_tp_error(p->err, p->errlen, open.line, open.col, "expected '{' or '<' to start message field '%s', got %s",
                    fd->name, describe(&open, b, sizeof b));
        return -1;
    }
    if (depth + 1 > TG_TEXTPROTO_MAX_DEPTH) {
        tg_tp_error(p->err, p->errlen, open.line, open.col, "messages nested more than %d levels deep",
                    TG_TEXTPROTO_MAX_DEPTH);
        return -1;
    }
    if (advance(p) < 0)
        return -1;
    struct tp_msg child;
    msg_init(&child, fd->descriptor);
    size_t off = m->data.len;
    int r = msg_alloc(p, &child);
    if (r == 0)
        r = parse_fields(p, &child, closer, &open, fd->name, depth + 1);
    if (r == 0)
        r = check_required(p, &child, &p->tok);
    if (r == 0)
        r = msg_encode(p, &child, &m->data);
    msg_free(&child);
    if (r == 0)
        r = advance(p); /* the closer */
    if (r == 0)
        r = add_entry(p, m, f, off);
    return r;
}

static int parse_field(struct parser *p, struct tp_msg *m, int depth)
{
    struct tg_tp_token name = p->tok;
    char b[64];
    if (name.kind != TG_TP_IDENT) {
        if (tg_tp_is(&name, '['))
            tg_tp_error(p->err, p->errlen, name.line, name.col,
                        "extension and Any fields ('[name]') are not supported");
        else if (name.kind == TG_TP_INT)
            tg_tp_error(p->err, p->errlen, name.line, name.col,
                        "numeric field names are not supported (%s in %s)", describe(&name, b, sizeof b),
                        m->desc->name);
        else
            tg_tp_error(p->err, p->errlen, name.line, name.col, "expected a field name, got %s",
                        describe(&name, b, sizeof b));
        return -1;
    }
    const ProtobufCFieldDescriptor *fd = NULL;
    char cname[256];
    if (name.len < sizeof cname) {
        memcpy(cname, name.text, name.len);
        cname[name.len] = '\0';
        fd = protobuf_c_message_descriptor_get_field_by_name(m->desc, cname);
    }
    if (!fd) {
        tg_tp_error(p->err, p->errlen, name.line, name.col, "unknown field '%.*s' in %s",
                    (int)(name.len > 100 ? 100 : name.len), name.text, m->desc->name);
        return -1;
    }
    unsigned f = (unsigned)(fd - m->desc->fields);
    int repeated = fd->label == PROTOBUF_C_LABEL_REPEATED;
    if (note_field(p, m, f, &name) < 0 || advance(p) < 0)
        return -1;

    int is_msg = fd->type == PROTOBUF_C_TYPE_MESSAGE;
    if (tg_tp_is(&p->tok, ':')) {
        if (advance(p) < 0)
            return -1;
    } else if (!is_msg) {
        tg_tp_error(p->err, p->errlen, p->tok.line, p->tok.col, "expected ':' after field '%s', got %s", fd->name,
                    describe(&p->tok, b, sizeof b));
        return -1;
    }
    if (!tg_tp_is(&p->tok, '['))
        return is_msg ? parse_message_value(p, m, f, depth) : parse_scalar(p, m, f);

    /* list syntax */
    if (!repeated) {
        tg_tp_error(p->err, p->errlen, p->tok.line, p->tok.col, "list value for non-repeated field '%s'", fd->name);
        return -1;
    }
    if (advance(p) < 0)
        return -1;
    if (tg_tp_is(&p->tok, ']'))
        return advance(p);
    for (;;) {
        if ((is_msg ? parse_message_value(p, m, f, depth) : parse_scalar(p, m, f)) < 0)
            return -1;
        if (tg_tp_is(&p->tok, ']'))
            return advance(p);
        if (!tg_tp_is(&p->tok, ',')) {
            tg_tp_error(p->err, p->errlen, p->tok.line, p->tok.col, "expected ',' or ']' in list for field '%s', got %s",
                        fd->name, describe(&p->tok, b, sizeof b));
            return -1;
        }
        if (advance(p) < 0)
            return -1;
    }
}

/* Parses fields until closer ('}' / '>', left as the current token) or, for
 * the top level (closer == 0), until the end of input. */
static int parse_fields(struct parser *p, struct tp_msg *m, char closer, const struct tg_tp_token *opener,
                        const char *what, int depth)
{
    char b[64];
    for (;;) {
        if (p->tok.kind == TG_TP_EOF) {
            if (!closer)
                return 0;
            tg_tp_error(p->err, p->errlen, p->tok.line, p->tok.col,
                        "unexpected end of input: missing '%c' to close '%s' opened at %zu:%zu", closer, what,
                        opener->line, opener->col);
            return -1;
        }
        if (closer && tg_tp_is(&p->tok, closer))
            return 0;
        if (tg_tp_is(&p->tok, '}') || tg_tp_is(&p->tok, '>')) {
            if (closer)
                tg_tp_error(p->err, p->errlen, p->tok.line, p->tok.col,
                            "expected '%c' to close '%s' opened at %zu:%zu, got %s", closer, what, opener->line,
                            opener->col, describe(&p->tok, b, sizeof b));
            else
                tg_tp_error(p->err, p->errlen, p->tok.line, p->tok.col, "unexpected %s at top level",
                            describe(&p->tok, b, sizeof b));
            return -1;
        }
        if (parse_field(p, m, depth) < 0)
            return -1;
        if (tg_tp_is(&p->tok, ',') || tg_tp_is(&p->tok, ';')) {
            if (advance(p) < 0)
                return -1;
        }
    }
}

int tg_textproto_to_binary(const ProtobufCMessageDescriptor *desc, const char *text, size_t len,
                           uint8_t **out, size_t *out_len, char *err, size_t errlen)
{
    if (out)
        *out = NULL;
    if (out_len)
        *out_len = 0;
    if (err && errlen)
        err[0] = '\0';
    if (!desc || !out || !out_len || (!text && len)) {
        tg_tp_error(err, errlen, 1, 1, "invalid argument");
        return -1;
    }
    if (!text)
        text = "";
    struct parser p;
    memset(&p, 0, sizeof p);
    p.err = err;
    p.errlen = errlen;
    tg_tp_lexer_init(&p.lx, text, len, err, errlen);
    struct tp_msg root;
    msg_init(&root, desc);
    struct tg_tp_buf res = TG_TP_BUF_INIT;
    int r = msg_alloc(&p, &root);
    if (r == 0)
        r = advance(&p);
    if (r == 0)
        r = parse_fields(&p, &root, 0, NULL, desc->name, 0);
    if (r == 0)
        r = check_required(&p, &root, &p.tok);
    if (r == 0)
        r = msg_encode(&p, &root, &res);
    if (r == 0 && tg_tp_buf_reserve(&res, 1) < 0) /* non-NULL result even when empty */
        r = fail_oom(&p);
    msg_free(&root);
    if (r < 0) {
        tg_tp_buf_free(&res);
        return -1;
    }
    *out = res.data;
    *out_len = res.len;
    return 0;
}

ProtobufCMessage *tg_textproto_parse(const ProtobufCMessageDescriptor *desc, const char *text, size_t len,
                                     char *err, size_t errlen)
{
    uint8_t *bin;
    size_t n;
    if (tg_textproto_to_binary(desc, text, len, &bin, &n, err, errlen) < 0)
        return NULL;
    ProtobufCMessage *msg = protobuf_c_message_unpack(desc, NULL, n, bin);
    free(bin);
    if (!msg)
        tg_tp_error(err, errlen, 1, 1, "protobuf-c rejected the encoded %s (out of memory?)", desc->name);
    return msg;
}
