/* fed_split.c: cutting a federated QueryServiceState answer into frame-sized parts (fed_split.h). */
#include "fed_split.h"

#include <stdlib.h>
#include <string.h>

#include "tracegate/pbwire.h"

enum { QSS_SERVICE_STATE = 1, HDR_MAX = 11 };

struct part {
    uint8_t *buf; /* the part being filled: room for the header, then its service_state fields */
    size_t used;  /* field bytes after the header room */
    size_t max;
    int have;     /* a part is waiting to be sent (sent once the next one starts, or at the end) */
    tg_fed_part_fn fn;
    void *arg;
};

/* Sends the current part as QueryServiceStateResponse{service_state{fields}}. */
static int flush_part(struct part *p, int has_more)
{
    uint8_t hdr[HDR_MAX];
    size_t h = tg_pb_put_tag(hdr, QSS_SERVICE_STATE, TG_PB_LEN);
    h += tg_pb_put_varint(hdr + h, p->used);
    uint8_t *start = p->buf + HDR_MAX - h;
    memcpy(start, hdr, h);
    int rc = p->fn(p->arg, start, h + p->used, has_more);
    p->used = 0;
    p->have = 0;
    return rc;
}

static int add_field(struct part *p, const uint8_t *f, size_t len)
{
    if (p->have && HDR_MAX + p->used + len > p->max) {
        if (flush_part(p, 1) != 0)
            return -1;
    }
    memcpy(p->buf + HDR_MAX + p->used, f, len);
    p->used += len;
    p->have = 1;
    return 0;
}

int tg_fed_split_service_state(const uint8_t *merged, size_t len, size_t max, tg_fed_part_fn fn, void *arg,
                               size_t *skipped)
{
    *skipped = 0;
    if (max <= HDR_MAX)
        return -1;
    struct part p = {malloc(max), 0, max, 0, fn, arg};
    if (!p.buf)
        return -1;
    int rc = 0;
    struct tg_pb_reader r, in;
    struct tg_pb_field f, g;
    tg_pb_reader_init(&r, merged, len);
    while (rc == 0 && (rc = tg_pb_next(&r, &f)) == 1) {
        rc = 0;
        if (f.number != QSS_SERVICE_STATE || f.wire != TG_PB_LEN)
            continue;
        tg_pb_reader_init(&in, f.data, f.len);
        for (;;) {
            const uint8_t *start = in.p;
            int k = tg_pb_next(&in, &g);
            if (k <= 0) {
                rc = k;
                break;
            }
            size_t flen = (size_t)(in.p - start);
            if (HDR_MAX + flen > max) {
                ++*skipped;
                continue;
            }
            if (add_field(&p, start, flen) != 0) {
                rc = -1;
                break;
            }
        }
    }
    if (rc == 0) {
        if (p.have)
            rc = flush_part(&p, 0);
        else
            rc = fn(arg, NULL, 0, 0); /* no state at all: one empty answer */
    }
    free(p.buf);
    return rc;
}
