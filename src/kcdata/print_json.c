/* print_json.c: the KCDATA JSON printer: one document {"magic", "items": [...]} with containers
 * as nested objects, described and defined items decoded, opaque data as hex strings. */
#include <inttypes.h>
#include <string.h>

#include "kcdata/kcdata_int.h"
#include "kcdata/print_util.h"

/* A JSON string; control bytes and bytes >= 0x7f as \u00XX (so the output is always ASCII). */
static void jstr(FILE *out, const uint8_t *s, size_t n)
{
    fputc('"', out);
    for (size_t i = 0; i < n; i++) {
        uint8_t c = s[i];
        if (c == '"' || c == '\\')
            fprintf(out, "\\%c", c);
        else if (c < 0x20 || c >= 0x7f)
            fprintf(out, "\\u%04x", c);
        else
            fputc(c, out);
    }
    fputc('"', out);
}

static void jname(FILE *out, const char *s) { jstr(out, (const uint8_t *)s, strlen(s)); }

static void jhex(FILE *out, const uint8_t *d, size_t n)
{
    fputc('"', out);
    for (size_t i = 0; i < n; i++)
        fprintf(out, "%02x", d[i]);
    fputc('"', out);
}

static void juint(FILE *out, uint64_t v) { fprintf(out, "%" PRIu64, v); }

/* The value of field f in rec: a JSON string, number or array; null when beyond the record. */
static void field_value(FILE *out, const struct tg_kcdata_field *f, const uint8_t *rec, size_t rec_len)
{
    static const struct tg_kc_value_style json = { "null", jstr, ",", juint };
    tg_kc_field_value(out, f, rec, rec_len, &json);
}

/* One record: a bare value for one-field types (null when beyond the record), else an object of
 * the fields that lie inside the record. */
static void record(FILE *out, const struct tg_kcdata_typedef *td, const uint8_t *rec, size_t rec_len)
{
    struct tg_kcdata_field f;
    if (tg_kc_typedef_is_scalar(td)) {
        tg_kcdata_typedef_field(td, 0, &f);
        field_value(out, &f, rec, rec_len);
        return;
    }
    fputc('{', out);
    uint32_t shown = 0;
    for (uint32_t i = 0; i < td->nfields; i++) {
        tg_kcdata_typedef_field(td, i, &f);
        if (!tg_kc_field_inside(&f, rec_len))
            continue; /* beyond a short record: left out, as in the text printer */
        if (shown++)
            fputc(',', out);
        jname(out, f.name);
        fputc(':', out);
        field_value(out, &f, rec, rec_len);
    }
    fputc('}', out);
}

static void item_desc(FILE *out, const struct tg_kcdata_item *it)
{
    static const char *const kind[] = {"", "string", "uint32", "uint64", "int32", "int64", "binary"};
    fprintf(out, "{\"desc\":\"%s\",\"name\":", kind[it->type]);
    jname(out, it->u.desc.name);
    fputs(",\"value\":", out);
    switch (it->type) {
    case TG_KCDATA_TYPE_STRING_DESC: jstr(out, it->u.desc.value, it->u.desc.value_len); break;
    case TG_KCDATA_TYPE_UINT32_DESC:
    case TG_KCDATA_TYPE_UINT64_DESC: fprintf(out, "%" PRIu64, it->u.desc.u); break;
    case TG_KCDATA_TYPE_INT32_DESC:
    case TG_KCDATA_TYPE_INT64_DESC: fprintf(out, "%" PRId64, it->u.desc.i); break;
    default: jhex(out, it->u.desc.value, it->u.desc.value_len); break;
    }
    fputc('}', out);
}

static void item_typedef(FILE *out, const struct tg_kcdata_typedef *td)
{
    fprintf(out, "{\"typedef\":{\"type\":%" PRIu32 ",\"name\":", td->type_id);
    jname(out, td->name);
    fprintf(out, ",\"size\":%" PRIu32 ",\"fields\":[", td->extent);
    for (uint32_t i = 0; i < td->nfields; i++) {
        struct tg_kcdata_field f;
        tg_kcdata_typedef_field(td, i, &f);
        fputs(i ? ",{\"name\":" : "{\"name\":", out);
        jname(out, f.name);
        fprintf(out, ",\"type\":\"%s\",\"offset\":%u,\"count\":%" PRIu32 ",\"flags\":%u}",
                tg_kcdata_elem_type_name(f.elem_type), (unsigned)f.offset, f.count, (unsigned)f.flags);
    }
    fputs("]}}", out);
}

static void item_array(FILE *out, const struct tg_kcdata_item *it)
{
    const struct tg_kcdata_typedef *td = it->u.array.td;
    fprintf(out, "{\"array\":{\"elem_type\":%" PRIu32 ",", it->u.array.elem_type);
    if (td) {
        fputs("\"type_name\":", out);
        jname(out, td->name);
        fputc(',', out);
    }
    fprintf(out, "\"elem_size\":%" PRIu32 ",\"elements\":[", it->u.array.elem_size);
    for (uint32_t i = 0; i < it->u.array.count; i++) {
        const uint8_t *rec = it->data + (size_t)i * it->u.array.elem_size;
        if (i)
            fputc(',', out);
        if (td)
            record(out, td, rec, it->u.array.elem_size);
        else
            jhex(out, rec, it->u.array.elem_size);
    }
    fputs("]}}", out);
}

static void item_data(FILE *out, const struct tg_kcdata_item *it)
{
    const struct tg_kcdata_typedef *td = it->u.data.td;
    const char *gname = tg_kc_generic_type_name(it->type);
    fprintf(out, "{\"type\":%" PRIu32, it->type);
    if (td || gname) {
        fputs(",\"type_name\":", out);
        jname(out, td ? td->name : gname);
    }
    if (td) {
        fputs(",\"value\":", out);
        record(out, td, it->data, it->len);
        if (it->len > td->extent) {
            fputs(",\"extra_hex\":", out);
            jhex(out, it->data + td->extent, it->len - td->extent);
        }
    } else {
        fputs(",\"hex\":", out);
        jhex(out, it->data, it->len);
    }
    fputc('}', out);
}

int tg_kcdata_print_json(FILE *out, const uint8_t *buf, size_t len, char *err, size_t errlen)
{
    char local[256];
    if (!err || !errlen) {
        err = local;
        errlen = sizeof local;
    }
    struct tg_kcdata_iter it;
    struct tg_kcdata_item item;
    int first[TG_KCDATA_MAX_DEPTH + 1];
    unsigned depth = 0;
    int rc = tg_kcdata_iter_init(&it, buf, len, TG_KCDATA_ANY_MAGIC, err, errlen);
    fputc('{', out);
    if (rc == 0) {
        const char *mname = tg_kcdata_magic_name(it.magic);
        fprintf(out, "\"magic\":%" PRIu32 ",\"magic_name\":", it.magic);
        if (mname)
            jname(out, mname);
        else
            fputs("null", out);
        fputs(",\"items\":[", out);
        first[0] = 1;
        while ((rc = tg_kcdata_iter_next(&it, &item, err, errlen)) == 1) {
            if (item.kind == TG_KCDATA_KIND_CONTAINER_END) {
                fputs("]}}", out);
                depth--;
                continue;
            }
            if (!first[depth])
                fputc(',', out);
            first[depth] = 0;
            switch (item.kind) {
            case TG_KCDATA_KIND_DESC: item_desc(out, &item); break;
            case TG_KCDATA_KIND_TYPEDEF: item_typedef(out, &item.u.td); break;
            case TG_KCDATA_KIND_ARRAY: item_array(out, &item); break;
            case TG_KCDATA_KIND_DATA: item_data(out, &item); break;
            case TG_KCDATA_KIND_CONTAINER_BEGIN: {
                const char *cname = tg_kc_container_name(it.magic, item.u.container.type);
                fprintf(out, "{\"container\":{\"type\":%" PRIu32 ",", item.u.container.type);
                if (cname) {
                    fputs("\"type_name\":", out);
                    jname(out, cname);
                    fputc(',', out);
                }
                fprintf(out, "\"id\":%" PRIu64 ",\"items\":[", item.u.container.id);
                first[++depth] = 1;
                break;
            }
            case TG_KCDATA_KIND_CONTAINER_END: break;
            }
        }
        /* close whatever is open when the buffer is malformed */
        for (; depth > 0; depth--)
            fputs("]}}", out);
        fputc(']', out);
    }
    if (rc != 0) {
        fputs(it.magic ? ",\"error\":" : "\"error\":", out);
        jname(out, err);
    }
    fputs("}\n", out);
    return rc == 0 ? 0 : -1;
}
