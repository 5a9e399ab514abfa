/* stats_print.c: the text form of a gateway's stats snapshot, every string escaped (stats_print.h). */
#include "stats_print.h"

#include <inttypes.h>
#include <string.h>

#include "tracegate/kcdata.h"
#include "tracegate/kcdata_node.h"
#include "tracegate/kcdata_stats.h"
#include "tracegate/log.h"

/* s escaped as the logger escapes text (tg_escape_text); returns the bytes printed. */
static int put_escaped(FILE *out, const char *s)
{
    char esc[4096];
    return fputs(tg_escape_text(s, esc, sizeof esc), out) < 0 ? 0 : (int)strlen(esc);
}

/* A counter name, escaped, padded to width columns. */
static void put_name(FILE *out, const char *name, int width)
{
    for (int cols = put_escaped(out, name); cols < width; cols++)
        fputc(' ', out);
}

int tc_stats_print(FILE *out, const uint8_t *buf, size_t len, char *err, size_t errlen)
{
    struct tg_node_desc self;
    if (tg_node_desc_decode(buf, len, &self, err, errlen) == 0) {
        fprintf(out, "node ");
        put_escaped(out, self.name);
        fprintf(out, " (tracegate ");
        put_escaped(out, self.version);
        fprintf(out, ")\n");
    }
    struct tg_kcdata_iter it;
    struct tg_kcdata_item item;
    if (tg_kcdata_iter_init(&it, buf, len, TG_KCDATA_MAGIC, err, errlen) != 0)
        return -1;
    int in_stats = 0, rc;
    unsigned stats_depth = 0;
    while ((rc = tg_kcdata_iter_next(&it, &item, err, errlen)) == 1) {
        if (item.kind == TG_KCDATA_KIND_CONTAINER_BEGIN && item.u.container.type == TG_KCCONTAINER_STATS) {
            in_stats = 1;
            stats_depth = item.depth + 1;
            fprintf(out, "\n%s\n", item.u.container.id == 1 ? "gateway" : "node");
            continue;
        }
        if (item.kind == TG_KCDATA_KIND_CONTAINER_END && in_stats && item.depth + 1 == stats_depth) {
            in_stats = 0;
            continue;
        }
        if (!in_stats || item.kind != TG_KCDATA_KIND_DESC || item.depth != stats_depth)
            continue;
        fprintf(out, "  ");
        put_name(out, item.u.desc.name, 26);
        fputc(' ', out);
        switch (item.type) {
        case TG_KCDATA_TYPE_STRING_DESC: put_escaped(out, (const char *)item.u.desc.value); break;
        case TG_KCDATA_TYPE_UINT32_DESC:
        case TG_KCDATA_TYPE_UINT64_DESC: fprintf(out, "%" PRIu64, item.u.desc.u); break;
        case TG_KCDATA_TYPE_INT32_DESC:
        case TG_KCDATA_TYPE_INT64_DESC: fprintf(out, "%" PRId64, item.u.desc.i); break;
        default: fprintf(out, "(%zu bytes)", item.u.desc.value_len); break;
        }
        fputc('\n', out);
    }
    return rc == 0 ? 0 : -1;
}
