/* fuzz_fed_packets.c: a federated session's rewriting of a node's ReadBuffers replies
 * (gateway/fed_packets.c) fed what a hostile or broken node could send: the input is cut into
 * replies at points the input chooses. Invariants: no crash or leak; what comes out is always whole
 * ReadBuffersResponse slices whose packets each end with our stamp (the last sequence id and
 * machine id fields are ours); after an error nothing half-done was appended. A node with a
 * clock offset (input's first byte) has its RemoteClockSync packets rebased (gateway/fed_clocks.c)
 * or dropped, never half-written, and followed by a clock anchor each (counted apart). */
#include <event2/buffer.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "fed_packets.h"
#include "tracegate/pbwire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Every slice is a complete field 2 {data, last}; returns the number of completed packets, -1 if
 * the output is not well formed. */
static long check_output(struct evbuffer *out)
{
    size_t len = evbuffer_get_length(out);
    const uint8_t *p = len ? evbuffer_pullup(out, -1) : NULL;
    struct tg_pb_reader r;
    struct tg_pb_field f;
    long packets = 0;
    int rc;
    tg_pb_reader_init(&r, p, len);
    while ((rc = tg_pb_next(&r, &f)) == 1) {
        if (f.number != 2 || f.wire != TG_PB_LEN || f.len > 70 * 1024)
            return -1;
        struct tg_pb_reader sr;
        struct tg_pb_field sf;
        int src;
        tg_pb_reader_init(&sr, f.data, f.len);
        while ((src = tg_pb_next(&sr, &sf)) == 1)
            if (sf.number == 2 && sf.value)
                packets++;
        if (src < 0)
            return -1;
    }
    return rc < 0 ? -1 : packets;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    struct tg_fed_seq_alloc alloc = {.next = 1};
    struct tg_fed_stream st;
    if (tg_fed_stream_init(&st, data[0] & 1 ? 0x1234 : 0, &alloc, 4096) != 0)
        return 0;
    if (data[0] & 2) { /* a node with a clock offset: its RemoteClockSync packets are rebased */
        static const int64_t off[4] = {5000000000ll, -3000000000ll, 1, -1};
        st.have_clock_off = 1;
        memcpy(st.clock_off, off, sizeof off);
    }
    struct evbuffer *out = evbuffer_new();
    uint8_t cut = data[1] ? data[1] : 1;
    data += 2;
    size -= 2;
    char err[128];
    while (size) {
        size_t n = size < (size_t)cut * 7 ? size : (size_t)cut * 7;
        if (tg_fed_rewrite_reply(&st, data, n, out, err, sizeof err) != 0) {
            /* slices of packets completed before the error may be out; never part of one */
            if (check_output(out) < 0)
                __builtin_trap();
            break;
        }
        data += n;
        size -= n;
    }
    long packets = check_output(out);
    if (packets < 0 || (uint64_t)packets != st.packets + st.anchors)
        __builtin_trap();
    /* the clock and failure packets are well formed too */
    uint64_t peer[2][4] = {{1, 2, 3, 4}, {5, 6, 7, 8}}, mine[2][4] = {{9, 10, 11, 12}, {13, 14, 15, 16}};
    evbuffer_drain(out, evbuffer_get_length(out));
    if (tg_fed_clock_sync_packet(st.machine_id, (const uint64_t(*)[4])peer, (const uint64_t(*)[4])mine, 2, out) != 0 ||
        tg_fed_failure_packet(&st, out) != 0 || check_output(out) != 3) /* sync, its anchor, failure */
        __builtin_trap();
    evbuffer_free(out);
    tg_fed_stream_clear(&st);
    return 0;
}
