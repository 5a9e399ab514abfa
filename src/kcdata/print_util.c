/* print_util.c: names and checks shared by the KCDATA text and JSON printers. */
#include "kcdata/print_util.h"

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
