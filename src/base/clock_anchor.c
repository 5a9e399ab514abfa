/* clock_anchor.c: the clock anchor after a RemoteClockSync (clock_anchor.h). */
#include "base/clock_anchor.h"

#include "tracegate/pbwire.h"

enum {
    PKT_TIMESTAMP = 8,
    PKT_TIMESTAMP_CLOCK_ID = 58,
    PKT_MACHINE_ID = 98,
    PKT_REMOTE_CLOCK_SYNC = 107,
    RCS_SYNCED = 1,
    SYNCED_CLIENT = 2,
    SNAP_CLOCKS = 1,
    CLK_ID = 1,
    CLK_TS = 2,
    CLOCK_BOOTTIME = 6,
};

size_t tg_clock_anchor_encode(uint8_t *buf, uint32_t machine_id, uint64_t boottime)
{
    size_t n = 0;
    n += tg_pb_put_tag(buf + n, PKT_TIMESTAMP, TG_PB_VARINT);
    n += tg_pb_put_varint(buf + n, boottime);
    n += tg_pb_put_tag(buf + n, PKT_TIMESTAMP_CLOCK_ID, TG_PB_VARINT);
    n += tg_pb_put_varint(buf + n, CLOCK_BOOTTIME);
    n += tg_pb_put_tag(buf + n, PKT_MACHINE_ID, TG_PB_VARINT);
    n += tg_pb_put_varint(buf + n, machine_id);
    return n;
}

/* Calls fn for every length-delimited field `number` of message d. 0, or -1 when malformed or
 * fn fails. */
static int each_len_field(const uint8_t *d, size_t len, uint32_t number,
                          int (*fn)(const uint8_t *d, size_t len, void *arg), void *arg)
{
    struct tg_pb_reader r;
    struct tg_pb_field f;
    tg_pb_reader_init(&r, d, len);
    int rc;
    while ((rc = tg_pb_next(&r, &f)) == 1)
        if (f.number == number && f.wire == TG_PB_LEN && fn(f.data, f.len, arg) != 0)
            return -1;
    return rc;
}

struct last_boot {
    int found;
    uint64_t ns;
};

static int boot_of_clock(const uint8_t *d, size_t len, void *arg)
{
    struct last_boot *b = arg;
    struct tg_pb_reader r;
    struct tg_pb_field f;
    uint64_t id = 0, ts = 0;
    int have_ts = 0, rc;
    tg_pb_reader_init(&r, d, len);
    while ((rc = tg_pb_next(&r, &f)) == 1)
        if (f.number == CLK_ID && f.wire == TG_PB_VARINT) {
            id = f.value;
        } else if (f.number == CLK_TS && f.wire == TG_PB_VARINT) {
            ts = f.value;
            have_ts = 1;
        }
    if (rc == 0 && id == CLOCK_BOOTTIME && have_ts) {
        b->found = 1;
        b->ns = ts;
    }
    return rc;
}

static int boot_of_snapshot(const uint8_t *d, size_t len, void *arg)
{
    return each_len_field(d, len, SNAP_CLOCKS, boot_of_clock, arg);
}

static int boot_of_synced(const uint8_t *d, size_t len, void *arg)
{
    return each_len_field(d, len, SYNCED_CLIENT, boot_of_snapshot, arg);
}

static int boot_of_sync(const uint8_t *d, size_t len, void *arg)
{
    return each_len_field(d, len, RCS_SYNCED, boot_of_synced, arg);
}

int tg_clock_anchor_for_sync(const uint8_t *pkt, size_t len, uint32_t *machine_id, uint64_t *boottime)
{
    struct tg_pb_reader r;
    struct tg_pb_field f;
    uint32_t machine = 0;
    int have_sync = 0, rc;
    tg_pb_reader_init(&r, pkt, len);
    while ((rc = tg_pb_next(&r, &f)) == 1)
        if (f.number == PKT_MACHINE_ID)
            machine = f.wire == TG_PB_LEN ? 0 : (uint32_t)f.value; /* as trace processor reads it */
        else if (f.number == PKT_REMOTE_CLOCK_SYNC && f.wire == TG_PB_LEN)
            have_sync = 1;
    struct last_boot b = {0, 0};
    if (rc != 0 || !have_sync || !machine || each_len_field(pkt, len, PKT_REMOTE_CLOCK_SYNC, boot_of_sync, &b) != 0 ||
        !b.found)
        return 0;
    *machine_id = machine;
    *boottime = b.ns;
    return 1;
}

int tg_clock_anchor_is(const uint8_t *pkt, size_t len)
{
    struct tg_pb_reader r;
    struct tg_pb_field f;
    int ts = 0, clock = 0, machine = 0, rc;
    tg_pb_reader_init(&r, pkt, len);
    while ((rc = tg_pb_next(&r, &f)) == 1) {
        if (f.number == PKT_TIMESTAMP && f.wire == TG_PB_VARINT)
            ts = 1;
        else if (f.number == PKT_TIMESTAMP_CLOCK_ID && f.wire == TG_PB_VARINT && f.value == CLOCK_BOOTTIME)
            clock = 1;
        else if (f.number == PKT_MACHINE_ID && f.wire == TG_PB_VARINT && f.value)
            machine = 1;
        else
            return 0;
    }
    return rc == 0 && ts && clock && machine;
}
