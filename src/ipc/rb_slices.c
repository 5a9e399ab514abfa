/* rb_slices.c: walking the slices of a ReadBuffersResponse in place (see rb_slices.h). */
#include "ipc/rb_slices.h"

#include "tracegate/pbwire.h"

enum { RB_SLICES = 2, SLICE_DATA = 1, SLICE_LAST = 2 };

int tg_rb_slices_each(const uint8_t *reply, size_t len, tg_rb_slice_fn fn, void *arg, const char **where)
{
    struct tg_pb_reader r;
    struct tg_pb_field f;
    int rc;
    tg_pb_reader_init(&r, reply, len);
    while ((rc = tg_pb_next(&r, &f)) == 1) {
        if (f.number != RB_SLICES || f.wire != TG_PB_LEN)
            continue;
        struct tg_pb_reader sr;
        struct tg_pb_field sf;
        const uint8_t *data = (const uint8_t *)"";
        size_t dlen = 0;
        int last = 0, src;
        tg_pb_reader_init(&sr, f.data, f.len);
        while ((src = tg_pb_next(&sr, &sf)) == 1) {
            if (sf.number == SLICE_DATA && sf.wire == TG_PB_LEN) {
                data = sf.data ? sf.data : (const uint8_t *)"";
                dlen = sf.len;
            } else if (sf.number == SLICE_LAST && sf.wire == TG_PB_VARINT) {
                last = sf.value != 0;
            }
        }
        if (src < 0) {
            if (where)
                *where = "slice";
            return TG_RB_MALFORMED;
        }
        int frc = fn(arg, data, dlen, last);
        if (frc != 0)
            return frc;
    }
    if (rc < 0) {
        if (where)
            *where = "reply";
        return TG_RB_MALFORMED;
    }
    return 0;
}
