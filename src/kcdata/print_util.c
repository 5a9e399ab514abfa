/* print_util.c: names, checks and field values shared by the KCDATA text and JSON printers. */
#include "kcdata/print_util.h"

#include <inttypes.h>
#include <string.h>

#include "kcdata/kcdata_int.h"
#include "tracegate/kcdata_node.h"
#include "tracegate/kcdata_stats.h"

const char *tg_kc_container_name(uint32_t magic, uint32_t container_type)
{
    if (magic != TG_KCDATA_MAGIC)
        return NULL;
    switch (container_type) {
    case TG_KCCONTAINER_NODE: return "tg_node";
    case TG_KCCONTAINER_STATS: return "tg_stats";
    default: return NULL;
    }
}

const char *tg_kc_generic_type_name(uint32_t type)
{
    static const char *const names[] = {
        "library_loadinfo", "library_loadinfo64", "timebase", "mach_absolute_time", "timeval",
        "usecs_since_epoch", "pid", "procname", "nested_kcdata", "aotcache_loadinfo",
    };
    if (type >= TG_KCDATA_TYPE_LIBRARY_LOADINFO && type <= TG_KCDATA_TYPE_AOTCACHE_LOADINFO)
        return names[type - TG_KCDATA_TYPE_LIBRARY_LOADINFO];
    return NULL;
}

int tg_kc_field_inside(const struct tg_kcdata_field *f, size_t rec_len)
{
    size_t end = (size_t)f->offset + (size_t)f->count * tg_kcdata_elem_size(f->elem_type);
    return end <= rec_len;
}

int tg_kc_typedef_is_scalar(const struct tg_kcdata_typedef *td)
{
    struct tg_kcdata_field f;
    return td->nfields == 1 && tg_kcdata_typedef_field(td, 0, &f) == 0 && !(f.flags & TG_KCDATA_FIELD_STRUCT);
}

void tg_kc_field_value(FILE *out, const struct tg_kcdata_field *f, const uint8_t *rec, size_t rec_len,
                       const struct tg_kc_value_style *style)
{
    if (!tg_kc_field_inside(f, rec_len)) {
        fputs(style->missing, out);
        return;
    }
    if (f->elem_type == TG_KCDATA_ST_CHAR) {
        const uint8_t *s = rec + f->offset;
        const uint8_t *nul = memchr(s, 0, f->count);
        style->string(out, s, nul ? (size_t)(nul - s) : f->count);
        return;
    }
    int is_signed = f->elem_type == TG_KCDATA_ST_INT8 || f->elem_type == TG_KCDATA_ST_INT16 ||
                    f->elem_type == TG_KCDATA_ST_INT32 || f->elem_type == TG_KCDATA_ST_INT64;
    int list = (f->flags & TG_KCDATA_FIELD_ARRAY) != 0;
    if (list)
        fputc('[', out);
    for (uint32_t i = 0; i < f->count; i++) {
        if (i)
            fputs(style->separator, out);
        if (is_signed) {
            int64_t v = 0;
            tg_kcdata_field_int(f, rec, rec_len, i, &v);
            fprintf(out, "%" PRId64, v);
        } else {
            uint64_t v = 0;
            tg_kcdata_field_uint(f, rec, rec_len, i, &v);
            if (list)
                fprintf(out, "%" PRIu64, v);
            else
                style->scalar_uint(out, v);
        }
    }
    if (list)
        fputc(']', out);
}
