/* print.c: the KCDATA text printer: prints any buffer readably, decoding described items, type
 * definitions and items of defined types (even types this code was never built to know),
 * arrays, containers (indented), generic and nested buffers; hex for opaque data. */
#include <inttypes.h>
#include <string.h>

#include "kcdata/kcdata_int.h"
#include "kcdata/print_util.h"
#include "tracegate/errbuf.h"

#define NEST_MAX 4 /* nested KCDATA buffers printed inside each other */

struct pr {
    FILE *out;
    unsigned flags;
    uint32_t magic;
    int base;   /* indentation of this (possibly nested) buffer */
    int nest;   /* nested buffers around this one */
};

static void indent(const struct pr *p, unsigned depth)
{
    for (unsigned i = 0; i < (unsigned)p->base + depth; i++)
        fputs("  ", p->out);
}

/* Starts an item's first line: the offset (with TG_KCDATA_PRINT_OFFSETS), then indentation. */
static void begin_line(const struct pr *p, const struct tg_kcdata_item *it, unsigned depth)
{
    if (p->flags & TG_KCDATA_PRINT_OFFSETS)
        fprintf(p->out, "%08zx  ", it->offset);
    indent(p, depth);
}

/* Continuation lines line up with begin_line's. */
static void cont_line(const struct pr *p, unsigned depth)
{
    if (p->flags & TG_KCDATA_PRINT_OFFSETS)
        fputs("          ", p->out);
    indent(p, depth);
}

/* A quoted string with C escapes; bytes outside printable ASCII as \xHH. */
static void quoted(FILE *out, const uint8_t *s, size_t n)
{
    fputc('"', out);
    for (size_t i = 0; i < n; i++) {
        uint8_t c = s[i];
        if (c == '"' || c == '\\')
            fprintf(out, "\\%c", c);
        else if (c == '\n')
            fputs("\\n", out);
        else if (c == '\t')
            fputs("\\t", out);
        else if (c < 0x20 || c >= 0x7f)
            fprintf(out, "\\x%02x", c);
        else
            fputc(c, out);
    }
    fputc('"', out);
}

/* A name from the buffer (NUL-terminated, at most 31 bytes): as is when it is printable ASCII
 * without quotes, backslashes or outer spaces ("NUM MACH PORTS" stays readable), quoted otherwise. */
static void name_out(FILE *out, const char *name)
{
    size_t n = strlen(name);
    int plain = n > 0 && name[0] != ' ' && name[n - 1] != ' ';
    for (size_t i = 0; i < n && plain; i++) {
        unsigned char c = (unsigned char)name[i];
        plain = c >= 0x20 && c < 0x7f && c != '"' && c != '\\';
    }
    if (plain)
        fputs(name, out);
    else
        quoted(out, (const uint8_t *)name, n);
}

static void hex_inline(FILE *out, const uint8_t *d, size_t n)
{
    for (size_t i = 0; i < n; i++)
        fprintf(out, i ? " %02x" : "%02x", d[i]);
}

static void hexdump(const struct pr *p, unsigned depth, const uint8_t *d, size_t n)
{
    for (size_t off = 0; off < n; off += 16) {
        size_t k = n - off < 16 ? n - off : 16;
        cont_line(p, depth);
        fprintf(p->out, "%04zx  ", off);
        for (size_t i = 0; i < 16; i++) {
            if (i < k)
                fprintf(p->out, "%02x ", d[off + i]);
            else
                fputs("   ", p->out);
        }
        fputs(" |", p->out);
        for (size_t i = 0; i < k; i++)
            fputc(d[off + i] >= 0x20 && d[off + i] < 0x7f ? d[off + i] : '.', p->out);
        fputs("|\n", p->out);
    }
}

static void uint_out(FILE *out, uint64_t v)
{
    if (v < 10)
        fprintf(out, "%" PRIu64, v);
    else
        fprintf(out, "%" PRIu64 " (0x%" PRIx64 ")", v, v);
}

/* "uint64 name" or "char name[64]" */
static void field_decl(FILE *out, const struct tg_kcdata_field *f)
{
    fprintf(out, "%s ", tg_kcdata_elem_type_name(f->elem_type));
    name_out(out, f->name);
    if (f->flags & TG_KCDATA_FIELD_ARRAY)
        fprintf(out, "[%" PRIu32 "]", f->count);
}

/* The value of field f in rec: a quoted string for char fields, a number (large ones also in hex),
 * or [a, b, ...]. */
static void field_value(FILE *out, const struct tg_kcdata_field *f, const uint8_t *rec, size_t rec_len)
{
    static const struct tg_kc_value_style text = { "<missing>", quoted, ", ", uint_out };
    tg_kc_field_value(out, f, rec, rec_len, &text);
}

/* One record of type td on the current line: a bare value for one-field types, else
 * "{ a = 1, b = 2 }". Fields beyond the record are counted, not printed one by one (a short
 * record of a wide type must not multiply the output). */
static void record_inline(FILE *out, const struct tg_kcdata_typedef *td, const uint8_t *rec, size_t rec_len)
{
    struct tg_kcdata_field f;
    if (tg_kc_typedef_is_scalar(td)) {
        tg_kcdata_typedef_field(td, 0, &f);
        field_value(out, &f, rec, rec_len);
        return;
    }
    fputs("{ ", out);
    uint32_t shown = 0, missing = 0;
    for (uint32_t i = 0; i < td->nfields; i++) {
        tg_kcdata_typedef_field(td, i, &f);
        if (!tg_kc_field_inside(&f, rec_len)) {
            missing++;
            continue;
        }
        if (shown++)
            fputs(", ", out);
        name_out(out, f.name);
        fputs(" = ", out);
        field_value(out, &f, rec, rec_len);
    }
    if (missing)
        fprintf(out, "%s+%" PRIu32 " beyond the item", shown ? ", " : "", missing);
    fputs(" }", out);
}

/* "tg_node_identity (0x7401)" */
static void type_label(FILE *out, const struct tg_kcdata_typedef *td, uint32_t type)
{
    if (td) {
        name_out(out, td->name);
        fprintf(out, " (0x%X)", type);
    } else {
        fprintf(out, "type 0x%X (no definition)", type);
    }
}

static void print_typedef(const struct pr *p, const struct tg_kcdata_item *it)
{
    const struct tg_kcdata_typedef *td = &it->u.td;
    begin_line(p, it, it->depth);
    fprintf(p->out, "typedef 0x%X ", td->type_id);
    name_out(p->out, td->name);
    fprintf(p->out, " (%" PRIu32 " field%s, %" PRIu32 " bytes) {\n", td->nfields, td->nfields == 1 ? "" : "s",
            td->extent);
    for (uint32_t i = 0; i < td->nfields; i++) {
        struct tg_kcdata_field f;
        tg_kcdata_typedef_field(td, i, &f);
        cont_line(p, it->depth + 1);
        field_decl(p->out, &f);
        fprintf(p->out, " @%u", (unsigned)f.offset);
        if (f.flags & TG_KCDATA_FIELD_STRUCT)
            fputs(" (struct)", p->out);
        if (f.flags & TG_KCDATA_FIELD_MERGE)
            fputs(" (merge)", p->out);
        fputc('\n', p->out);
    }
    cont_line(p, it->depth);
    fputs("}\n", p->out);
}

static void print_desc(const struct pr *p, const struct tg_kcdata_item *it)
{
    static const char *const kind[] = {"", "string", "uint32", "uint64", "int32", "int64", "binary"};
    begin_line(p, it, it->depth);
    fprintf(p->out, "%s ", kind[it->type]);
    name_out(p->out, it->u.desc.name);
    fputs(" = ", p->out);
    switch (it->type) {
    case TG_KCDATA_TYPE_STRING_DESC: quoted(p->out, it->u.desc.value, it->u.desc.value_len); break;
    case TG_KCDATA_TYPE_UINT32_DESC:
    case TG_KCDATA_TYPE_UINT64_DESC: uint_out(p->out, it->u.desc.u); break;
    case TG_KCDATA_TYPE_INT32_DESC:
    case TG_KCDATA_TYPE_INT64_DESC: fprintf(p->out, "%" PRId64, it->u.desc.i); break;
    default:
        fprintf(p->out, "%zu bytes", it->u.desc.value_len);
        if (it->u.desc.value_len <= 16) {
            fputs(it->u.desc.value_len ? " { " : "", p->out);
            hex_inline(p->out, it->u.desc.value, it->u.desc.value_len);
            fputs(it->u.desc.value_len ? " }\n" : "\n", p->out);
        } else {
            fputc('\n', p->out);
            hexdump(p, it->depth + 1, it->u.desc.value, it->u.desc.value_len);
        }
        return;
    }
    fputc('\n', p->out);
}

static void print_array(const struct pr *p, const struct tg_kcdata_item *it)
{
    const struct tg_kcdata_typedef *td = it->u.array.td;
    begin_line(p, it, it->depth);
    fprintf(p->out, "array of %" PRIu32 " ", it->u.array.count);
    type_label(p->out, td, it->u.array.elem_type);
    fprintf(p->out, ", %" PRIu32 " bytes each [\n", it->u.array.elem_size);
    for (uint32_t i = 0; i < it->u.array.count; i++) {
        const uint8_t *rec = it->data + (size_t)i * it->u.array.elem_size;
        cont_line(p, it->depth + 1);
        fprintf(p->out, "[%" PRIu32 "] ", i);
        if (td) {
            record_inline(p->out, td, rec, it->u.array.elem_size);
            fputc('\n', p->out);
        } else if (it->u.array.elem_size <= 16) {
            hex_inline(p->out, rec, it->u.array.elem_size);
            fputc('\n', p->out);
        } else {
            fputc('\n', p->out);
            hexdump(p, it->depth + 2, rec, it->u.array.elem_size);
        }
    }
    cont_line(p, it->depth);
    fputs("]\n", p->out);
}

static int print_buffer(const struct pr *outer, const uint8_t *buf, size_t len, char *err, size_t errlen);

/* Generic types 0x30..0x39; returns 1 when printed, 0 to fall back to hex. */
static int print_generic(const struct pr *p, const struct tg_kcdata_item *it, const char *name)
{
    const uint8_t *d = it->data;
    switch (it->type) {
    case TG_KCDATA_TYPE_TIMEBASE:
        if (it->len < 8)
            return 0;
        fprintf(p->out, "%s numer = %" PRIu32 ", denom = %" PRIu32 "\n", name, tg_kc_ld32(d), tg_kc_ld32(d + 4));
        return 1;
    case TG_KCDATA_TYPE_MACH_ABSOLUTE_TIME:
    case TG_KCDATA_TYPE_USECS_SINCE_EPOCH:
        if (it->len < 8)
            return 0;
        fprintf(p->out, "%s = %" PRIu64 "\n", name, tg_kc_ld64(d));
        return 1;
    case TG_KCDATA_TYPE_TIMEVAL:
        if (it->len < 16)
            return 0;
        fprintf(p->out, "%s sec = %" PRId64 ", usec = %" PRId64 "\n", name, (int64_t)tg_kc_ld64(d),
                (int64_t)tg_kc_ld64(d + 8));
        return 1;
    case TG_KCDATA_TYPE_PID:
        if (it->len < 4)
            return 0;
        fprintf(p->out, "%s = %" PRId32 "\n", name, (int32_t)tg_kc_ld32(d));
        return 1;
    case TG_KCDATA_TYPE_PROCNAME: {
        const uint8_t *nul = memchr(d, 0, it->len);
        fprintf(p->out, "%s = ", name);
        quoted(p->out, d, nul ? (size_t)(nul - d) : it->len);
        fputc('\n', p->out);
        return 1;
    }
    case TG_KCDATA_TYPE_NESTED_KCDATA: {
        if (p->nest >= NEST_MAX)
            return 0;
        fprintf(p->out, "%s, %zu bytes {\n", name, it->len);
        struct pr inner = *p;
        inner.base = p->base + (int)it->depth + 1;
        inner.nest = p->nest + 1;
        char e2[256];
        print_buffer(&inner, d, it->len, e2, sizeof e2); /* prints its own error line */
        cont_line(p, it->depth);
        fputs("}\n", p->out);
        return 1;
    }
    default: return 0;
    }
}

/* Returns 1 when the payload was shown as a hex dump. */
static int print_data(const struct pr *p, const struct tg_kcdata_item *it)
{
    const struct tg_kcdata_typedef *td = it->u.data.td;
    begin_line(p, it, it->depth);
    const char *gname = tg_kc_generic_type_name(it->type);
    if (gname && print_generic(p, it, gname))
        return 0;
    if (!td) {
        if (gname)
            fprintf(p->out, "%s (0x%X), %zu bytes\n", gname, it->type, it->len);
        else
            fprintf(p->out, "type 0x%X (no definition), %zu bytes, flags 0x%" PRIx64 "\n", it->type, it->len,
                    it->flags);
        hexdump(p, it->depth + 1, it->data, it->len);
        return 1;
    }
    type_label(p->out, td, it->type);
    if (tg_kc_typedef_is_scalar(td)) {
        fputs(" = ", p->out);
        record_inline(p->out, td, it->data, it->len);
        fputc('\n', p->out);
    } else {
        fputs(" {\n", p->out);
        uint32_t missing = 0;
        for (uint32_t i = 0; i < td->nfields; i++) {
            struct tg_kcdata_field f;
            tg_kcdata_typedef_field(td, i, &f);
            if (!tg_kc_field_inside(&f, it->len)) {
                missing++;
                continue;
            }
            cont_line(p, it->depth + 1);
            field_decl(p->out, &f);
            fputs(" = ", p->out);
            field_value(p->out, &f, it->data, it->len);
            fputc('\n', p->out);
        }
        if (missing) {
            cont_line(p, it->depth + 1);
            fprintf(p->out, "(%" PRIu32 " field%s beyond the item's %zu bytes)\n", missing, missing == 1 ? "" : "s",
                    it->len);
        }
        cont_line(p, it->depth);
        fputs("}\n", p->out);
    }
    if (it->len > td->extent) {
        cont_line(p, it->depth + 1);
        fprintf(p->out, "(%zu bytes beyond the definition)\n", it->len - td->extent);
        hexdump(p, it->depth + 1, it->data + td->extent, it->len - td->extent);
    }
    return 0;
}

static void print_item(const struct pr *p, const struct tg_kcdata_item *it)
{
    switch (it->kind) {
    case TG_KCDATA_KIND_DESC: print_desc(p, it); break;
    case TG_KCDATA_KIND_TYPEDEF: print_typedef(p, it); break;
    case TG_KCDATA_KIND_ARRAY: print_array(p, it); break;
    case TG_KCDATA_KIND_CONTAINER_BEGIN: {
        const char *cname = tg_kc_container_name(p->magic, it->u.container.type);
        begin_line(p, it, it->depth);
        fprintf(p->out, "container 0x%X%s%s%s id %" PRIu64 " {\n", it->u.container.type, cname ? " (" : "",
                cname ? cname : "", cname ? ")" : "", it->u.container.id);
        return;
    }
    case TG_KCDATA_KIND_CONTAINER_END:
        begin_line(p, it, it->depth);
        fputs("}\n", p->out);
        return;
    case TG_KCDATA_KIND_DATA:
        if (print_data(p, it))
            return; /* already shown as hex */
        break;
    }
    if (p->flags & TG_KCDATA_PRINT_HEX)
        hexdump(p, it->depth + 1, it->data, it->len);
}

static int print_buffer(const struct pr *outer, const uint8_t *buf, size_t len, char *err, size_t errlen)
{
    struct pr p = *outer;
    struct tg_kcdata_iter it;
    struct tg_kcdata_item item;
    int rc = tg_kcdata_iter_init(&it, buf, len, TG_KCDATA_ANY_MAGIC, err, errlen);
    if (rc == 0) {
        p.magic = it.magic;
        const char *mname = tg_kcdata_magic_name(it.magic);
        indent(&p, 0);
        fprintf(p.out, "KCDATA %s (magic 0x%08X), %zu bytes\n", mname ? mname : "unknown", it.magic, len);
        while ((rc = tg_kcdata_iter_next(&it, &item, err, errlen)) == 1)
            print_item(&p, &item);
    }
    if (rc == 0) {
        size_t end = tg_kcdata_iter_end_offset(&it);
        indent(&p, 0);
        fprintf(p.out, "end at offset %zu", end - TG_KCDATA_HEADER_SIZE);
        if (end < len)
            fprintf(p.out, " (%zu bytes after it ignored)", len - end);
        fputc('\n', p.out);
        return 0;
    }
    indent(&p, 0);
    fprintf(p.out, "error: %s\n", err);
    return -1;
}

int tg_kcdata_print(FILE *out, const uint8_t *buf, size_t len, unsigned flags, char *err, size_t errlen)
{
    char local[256];
    if (!err || !errlen) {
        err = local;
        errlen = sizeof local;
    }
    struct pr p = {out, flags, 0, 0, 0};
    return print_buffer(&p, buf, len, err, errlen);
}
