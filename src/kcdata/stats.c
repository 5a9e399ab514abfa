/* stats.c: a stats snapshot in KCDATA: a TG_KCCONTAINER_STATS container of described uint64
 * items (counter name -> value), and a reader that hands each counter to a callback. */
#include "kcdata/kcdata_int.h"
#include "tracegate/errbuf.h"
#include "tracegate/kcdata_stats.h"

int tg_kcdata_stats_add(struct tg_kcdata_enc *e, uint64_t id, const struct tg_kcdata_stat *stats, size_t n)
{
    if (n && !stats)
        return tg_kc_enc_fail(e, "stats: NULL array");
    tg_kcdata_container_begin(e, TG_KCCONTAINER_STATS, id);
    for (size_t i = 0; i < n; i++)
        tg_kcdata_add_u64(e, stats[i].name, stats[i].value);
    return tg_kcdata_container_end(e, id);
}

int tg_kcdata_stats_encode(const struct tg_kcdata_stat *stats, size_t n, uint8_t **out, size_t *len, char *err,
                           size_t errlen)
{
    struct tg_kcdata_enc e;
    if (tg_kcdata_enc_init(&e, TG_KCDATA_MAGIC) != 0 || tg_kcdata_stats_add(&e, 1, stats, n) != 0 ||
        tg_kcdata_finish(&e, out, len) != 0) {
        tg_errf(err, errlen, "%s", tg_kcdata_enc_error(&e));
        tg_kcdata_enc_free(&e);
        return -1;
    }
    return 0;
}

int tg_kcdata_stats_decode(const uint8_t *buf, size_t len, tg_kcdata_stat_fn fn, void *ctx, char *err,
                           size_t errlen)
{
    struct tg_kcdata_iter it;
    struct tg_kcdata_item item;
    if (tg_kcdata_validate(buf, len, TG_KCDATA_MAGIC, err, errlen) != 0 ||
        tg_kcdata_iter_init(&it, buf, len, TG_KCDATA_MAGIC, err, errlen) != 0)
        return -1;
    /* type and id of the container open at each depth */
    uint32_t ctype[TG_KCDATA_MAX_DEPTH] = {0};
    uint64_t cid[TG_KCDATA_MAX_DEPTH] = {0};
    int count = 0, rc;
    while ((rc = tg_kcdata_iter_next(&it, &item, err, errlen)) == 1) {
        if (item.kind == TG_KCDATA_KIND_CONTAINER_BEGIN) {
            ctype[item.depth] = item.u.container.type;
            cid[item.depth] = item.u.container.id;
            continue;
        }
        if (item.kind != TG_KCDATA_KIND_DESC || item.depth == 0 || ctype[item.depth - 1] != TG_KCCONTAINER_STATS)
            continue;
        if (item.type != TG_KCDATA_TYPE_UINT64_DESC && item.type != TG_KCDATA_TYPE_UINT32_DESC)
            continue;
        if (count == INT32_MAX)
            return tg_errf(err, errlen, "stats: too many counters");
        if (fn)
            fn(ctx, cid[item.depth - 1], item.u.desc.name, item.u.desc.u);
        count++;
    }
    return rc == 0 ? count : -1;
}
