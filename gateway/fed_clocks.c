/* fed_clocks.c: moving a relayed machine's RemoteClockSync onto the hub's clocks (fed_clocks.h). */
#include "fed_clocks.h"

#include <stdlib.h>
#include <string.h>

#include "textproto/buf.h"
#include "tracegate/kcdata_node.h"
#include "tracegate/pbwire.h"

enum {
    PKT_REMOTE_CLOCK_SYNC = 107,
    RCS_SYNCED = 1,
    SYNCED_HOST = 3,
    SNAP_CLOCKS = 1,
    CLK_ID = 1,
    CLK_TS = 2,
    CLK_MULTIPLIER = 4,
    ROUND_MAX_S = 30, /* trace processor's bound on a round (node BOOTTIME, seconds) */
};

int tg_fed_clock_offsets(const uint64_t (*peer)[4], const uint64_t (*mine)[4], size_t n, int64_t off[4])
{
    int64_t sum[4] = {0, 0, 0, 0}, estimates[4] = {0, 0, 0, 0};
    int any = 0;
    /* every two consecutive records, not only a PING and its UPDATE: trace processor does not
     * know where a round starts, so a round's UPDATE and the next round's PING count too when they
     * are under 30 s apart (tg_link_clock_rounds never gives it such a pair) */
    for (size_t i = 0; i + 1 < n; i++) {
        if (peer[i + 1][0] - peer[i][0] >= (uint64_t)ROUND_MAX_S * 1000000000ull)
            continue; /* unsigned, as trace processor computes it: backwards is far apart too */
        for (int k = 0; k < 4; k++) {
            if (!peer[i][k] || !mine[i][k] || !peer[i + 1][k] || !mine[i + 1][k])
                continue; /* a clock one of the four readings lacks */
            /* in differences, so that 64-bit readings lose nothing */
            int64_t c1h = (int64_t)(peer[i][k] - mine[i][k]);
            int64_t dc = (int64_t)(peer[i + 1][k] - peer[i][k]), dh = (int64_t)(mine[i + 1][k] - mine[i][k]);
            sum[k] += c1h + dc / 2;                                    /* (t1c+t2c)/2 - t1h */
            sum[k] += (int64_t)(peer[i + 1][k] - mine[i][k]) - dh / 2; /* t2c - (t1h+t2h)/2 */
            estimates[k] += 2;
            any = 1;
        }
    }
    if (!any)
        return 0;
    for (int k = 0; k < 4; k++)
        off[k] = estimates[k] ? sum[k] / estimates[k] : 0;
    return 1;
}

/* Which of off[] moves builtin clock `id`, -1 for none. */
static int offset_index(uint64_t id)
{
    switch (id) {
    case TG_NODE_CLOCK_BOOTTIME:
        return 0;
    case TG_NODE_CLOCK_REALTIME:
    case 2: /* REALTIME_COARSE: the same clock, read coarsely */
        return 1;
    case TG_NODE_CLOCK_MONOTONIC:
    case 4: /* MONOTONIC_COARSE */
        return 2;
    case TG_NODE_CLOCK_MONOTONIC_RAW:
        return 3;
    default:
        return -1;
    }
}

/* field num, length-delimited, holding body */
static void out_len_field(struct tg_tp_buf *o, uint32_t num, const struct tg_tp_buf *body)
{
    tg_tp_buf_varint(o, (uint64_t)num << 3 | TG_PB_LEN);
    tg_tp_buf_varint(o, body->len);
    if (body->oom)
        o->oom = 1;
    else
        tg_tp_buf_append(o, body->data, body->len);
}

/* The raw bytes of the field just read: from `start` to the reader's position. */
#define RAW(o, start, r) tg_tp_buf_append((o), (start), (size_t)((r).p - (start)))

/* ClockSnapshot.Clock with its timestamp moved (nothing moves with a unit multiplier). */
static int rebase_clock(const uint8_t *d, size_t len, const int64_t off[4], struct tg_tp_buf *o)
{
    struct tg_pb_reader r;
    struct tg_pb_field f;
    uint64_t id = 0, mult = 1;
    tg_pb_reader_init(&r, d, len);
    int rc;
    while ((rc = tg_pb_next(&r, &f)) == 1)
        if (f.number == CLK_ID && f.wire == TG_PB_VARINT)
            id = f.value;
        else if (f.number == CLK_MULTIPLIER && f.wire == TG_PB_VARINT)
            mult = f.value;
    if (rc < 0)
        return -1;
    int k = offset_index(id);
    tg_pb_reader_init(&r, d, len);
    for (const uint8_t *start = r.p; tg_pb_next(&r, &f) == 1; start = r.p) {
        if (f.number == CLK_TS && f.wire == TG_PB_VARINT && k >= 0 && (mult == 1 || mult == 0)) {
            tg_tp_buf_varint(o, (uint64_t)CLK_TS << 3 | TG_PB_VARINT);
            tg_tp_buf_varint(o, f.value - (uint64_t)off[k]);
        } else {
            RAW(o, start, r);
        }
    }
    return 0;
}

/* The fields from a TracePacket down to each ClockSnapshot.Clock of its RemoteClockSync's host
 * snapshots (RemoteClockSync.synced_clocks.host_clocks.clocks): each is rewritten on the way down,
 * every other field copied as it came. */
static const uint32_t k_path[] = {PKT_REMOTE_CLOCK_SYNC, RCS_SYNCED, SYNCED_HOST, SNAP_CLOCKS};

/* Copies message d to o, descending into the fields path[0..depth) names; at the end of the path
 * the message is a Clock, rebased. 0, or -1 on a malformed message. */
static int rebase_along(const uint8_t *d, size_t len, const uint32_t *path, size_t depth, const int64_t off[4],
                        struct tg_tp_buf *o)
{
    if (depth == 0)
        return rebase_clock(d, len, off, o);
    struct tg_pb_reader r;
    struct tg_pb_field f;
    tg_pb_reader_init(&r, d, len);
    int rc;
    for (const uint8_t *start = r.p; (rc = tg_pb_next(&r, &f)) == 1; start = r.p) {
        if (f.number == path[0] && f.wire == TG_PB_LEN) {
            struct tg_tp_buf s = TG_TP_BUF_INIT;
            int bad = rebase_along(f.data, f.len, path + 1, depth - 1, off, &s);
            out_len_field(o, path[0], &s);
            tg_tp_buf_free(&s);
            if (bad)
                return -1;
        } else {
            RAW(o, start, r);
        }
    }
    return rc;
}

int tg_fed_rebase_clock_sync(const uint8_t *pkt, size_t len, const int64_t off[4], uint8_t **out, size_t *out_len)
{
    struct tg_tp_buf o = TG_TP_BUF_INIT;
    int rc = rebase_along(pkt, len, k_path, sizeof k_path / sizeof k_path[0], off, &o);
    if (rc < 0 || o.oom) {
        tg_tp_buf_free(&o);
        return -1;
    }
    if (!o.data && !(o.data = malloc(1))) /* an empty packet: still a buffer to free */
        return -1;
    *out = o.data;
    *out_len = o.len;
    return 0;
}
