/* fuzz_trace_buffer.c: libFuzzer target for the trace buffer: the input is a
 * program of copy / re-copy / patch / clone / read operations from a few producers
 * and writers, with payloads that are either raw bytes or well-formed
 * fragment lists, so both the parser and the reassembly/eviction logic get
 * exercised. Checks the invariants a reader relies on (slices add up, packets
 * of one sequence never repeat or go backwards, stats stay consistent).
 *
 * Input: 2 bytes of buffer size and policy, then operations (1 opcode byte +
 * operands taken from the input as needed). */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "service/trace_buffer.h"
#include "smb/smb_abi.h"

#include "fuzz_check.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct in {
    const uint8_t *p, *end;
};

static uint32_t take(struct in *in, unsigned bytes)
{
    uint32_t v = 0;
    for (unsigned i = 0; i < bytes; i++)
        v = v << 8 | (in->p < in->end ? *in->p++ : 0);
    return v;
}

#define NSEQ 8 /* 2 producers x 4 writers */

static uint32_t hash3(uint32_t a, uint32_t b, uint32_t c)
{
    uint32_t h = a * 0x9e3779b1u ^ b * 0x85ebca77u ^ c * 0xc2b2ae3du;
    h ^= h >> 15;
    h *= 0x2c1b3c6du;
    h ^= h >> 12;
    return h;
}

/* Fragment i of chunk `id` of sequence `seq` is a pure function of the three,
 * like real SMB contents: a re-copy with a higher count extends the same
 * bytes. A data fragment is [seq][u32 id << 10 | i][filler byte x n], so a
 * reader can tell a genuine, undamaged packet from anything else. */
static size_t frag_len(uint32_t h)
{
    return 5 + (h & 0x100 ? h % 3000 : h % 60);
}

static size_t build_payload(uint8_t *buf, size_t cap, unsigned seq, uint32_t id, unsigned n, uint16_t *count)
{
    size_t len = 0;
    *count = 0;
    for (unsigned i = 0; i < n; i++) {
        uint32_t h = hash3(seq, id, i);
        if (h % 29 == 0) { /* drop marker */
            if (len + 4 > cap)
                break;
            memcpy(buf + len, "\xff\xff\xff\x7f", 4);
            len += 4;
        } else if (h % 17 == 0) { /* padding */
            if (len + 1 > cap)
                break;
            buf[len++] = 0;
        } else {
            size_t flen = frag_len(h);
            if (len + 4 + flen > cap)
                break;
            buf[len++] = (uint8_t)(0x80 | (flen & 0x7f));
            buf[len++] = (uint8_t)(0x80 | ((flen >> 7) & 0x7f));
            buf[len++] = (uint8_t)(0x80 | ((flen >> 14) & 0x7f));
            buf[len++] = (uint8_t)((flen >> 21) & 0x7f);
            buf[len] = (uint8_t)seq;
            uint32_t tag = id << 10 | i;
            memcpy(buf + len + 1, &tag, 4);
            memset(buf + len + 5, (uint8_t)h, flen - 5);
            len += flen;
        }
        (*count)++;
    }
    return len;
}

/* Is this packet exactly one genuine fragment? Returns its tag. */
static bool genuine(const uint8_t *p, size_t n, unsigned *seq, uint32_t *tag)
{
    if (n < 5 || p[0] >= NSEQ)
        return false;
    memcpy(tag, p + 1, 4);
    uint32_t h = hash3(p[0], *tag >> 10, *tag & 1023);
    if (frag_len(h) != n || h % 29 == 0 || h % 17 == 0)
        return false;
    for (size_t i = 5; i < n; i++)
        if (p[i] != (uint8_t)h)
            return false;
    *seq = p[0];
    return true;
}

#define MAX_ID (1u << 20) /* keep ids far from wrapping so tags order like chunk ids */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct in in = {data, data + size};
    uint32_t hdr = take(&in, 2);
    size_t tb_size = TG_TB_MIN_SIZE + (hdr & 0x7fff) * 8u;
    struct tg_trace_buffer *tb = tg_trace_buffer_new(tb_size, (hdr & 0x8000) ? TG_TB_DISCARD : TG_TB_RING_BUFFER);
    uint8_t *payload = malloc(TG_TB_MAX_PAYLOAD + 16);
    uint8_t *flat = malloc(1 << 20);
    if (!tb || !payload || !flat)
        goto out;

    uint32_t next_id[NSEQ] = {0};
    int64_t last_tag[NSEQ];
    for (int i = 0; i < NSEQ; i++)
        last_tag[i] = -1;
    struct tg_tb_producer prods[3] = {{.producer_id = 1, .uid = 10, .pid = 100, .machine_id = 0},
                                      {.producer_id = 2, .uid = 20, .pid = 200, .machine_id = 7},
                                      {.producer_id = 3, .uid = 30, .pid = 300, .machine_id = 0}};

    for (unsigned ops = 0; in.p < in.end && ops < 4096; ops++) {
        uint8_t op = (uint8_t)take(&in, 1);
        unsigned seq = (op >> 3) % NSEQ;
        const struct tg_tb_producer *prod = &prods[seq / 4];
        uint16_t writer = (uint16_t)(1 + seq % 4);
        switch (op & 7) {
        case 0:
        case 1: { /* a chunk: mostly the next id, sometimes a gap or a late one */
            uint8_t ctl = (uint8_t)take(&in, 1);
            uint32_t id = next_id[seq];
            if ((ctl & 0x30) == 0x30) {
                id += take(&in, 1) % 5;
                next_id[seq] = id + 1;
            } else if ((ctl & 0x30) == 0x20) {
                uint32_t back = 1 + take(&in, 1) % 3;
                id = id >= back ? id - back : 0;
            } else {
                next_id[seq] = id + 1;
            }
            if (id >= MAX_ID)
                break;
            uint16_t count;
            size_t len = build_payload(payload, 4000, seq, id, take(&in, 1) % 14, &count);
            size_t plen = (ctl & 0x40) ? len : 4000; /* SMB chunks have a fixed size */
            memset(payload + len, 0, 4000 - len);
            (void)tg_trace_buffer_copy_chunk(tb, prod, writer, id, count, (uint8_t)(ctl & 7), !(ctl & 0x08), payload,
                                             plen);
            break;
        }
        case 2: { /* re-copy (scrape, then commit) of a recent chunk */
            uint32_t back = 1 + take(&in, 1) % 3;
            uint8_t ctl = (uint8_t)take(&in, 1);
            if (next_id[seq] < back)
                break;
            uint32_t id = next_id[seq] - back;
            uint16_t count;
            size_t len = build_payload(payload, 4000, seq, id, ctl % 14, &count);
            memset(payload + len, 0, 4000 - len);
            (void)tg_trace_buffer_copy_chunk(tb, prod, writer, id, count, (uint8_t)((ctl >> 4) & 7), (ctl & 0x80) != 0,
                                             payload, 4000);
            break;
        }
        case 3: { /* raw hostile chunk bytes from a third producer */
            size_t len = take(&in, 2) % 5000;
            size_t avail = (size_t)(in.end - in.p);
            if (len > avail)
                len = avail;
            (void)tg_trace_buffer_copy_chunk_bytes(tb, &prods[2], in.p, len, (op & 0x80) != 0);
            in.p += len;
            break;
        }
        case 4: { /* patches, by the owner or by an intruder */
            struct tg_tb_patch patches[4];
            size_t n = take(&in, 1) % 5;
            for (size_t i = 0; i < n; i++) {
                patches[i].offset = take(&in, 2) % 4100;
                uint32_t v = take(&in, 4);
                memcpy(patches[i].data, &v, 4);
            }
            uint32_t back = 1 + take(&in, 1) % 3;
            uint32_t id = next_id[seq] >= back ? next_id[seq] - back : 0;
            uint32_t pid = (op & 0x80) ? 3 : prod->producer_id;
            (void)tg_trace_buffer_apply_patches(tb, pid, writer, id, patches, n, (op & 0x40) != 0);
            break;
        }
        case 7: { /* CloneSession: carry on with an independent copy */
            struct tg_trace_buffer *c = tg_trace_buffer_clone(tb);
            if (c) {
                tg_trace_buffer_free(tb);
                tb = c;
            }
            break;
        }
        default: { /* read some packets */
            unsigned n = 1 + take(&in, 1) % 64;
            struct tg_tb_packet pkt;
            struct tg_tb_seq_info info;
            for (unsigned i = 0; i < n && tg_trace_buffer_read_packet(tb, &pkt, &info); i++) {
                size_t sum = 0;
                for (size_t k = 0; k < pkt.num_slices; k++)
                    sum += pkt.slices[k].len;
                CHECK(sum == pkt.size);
                CHECK(info.writer_id >= 1 && info.writer_id <= TG_SMB_MAX_WRITER_ID);
                CHECK(info.producer_id >= 1 && info.producer_id <= 3);
                CHECK(info.uid == prods[info.producer_id - 1].uid);
                if (pkt.size > (1 << 20))
                    continue;
                CHECK(tg_tb_packet_copy(&pkt, flat, 1 << 20) == pkt.size);
                unsigned s;
                uint32_t tag;
                if (info.producer_id <= 2 && genuine(flat, pkt.size, &s, &tag)) {
                    /* a genuine fragment read back must come from its own
                     * sequence, after everything read before on it */
                    CHECK(s == (info.producer_id - 1) * 4 + (info.writer_id - 1));
                    CHECK((int64_t)tag > last_tag[s]);
                    last_tag[s] = tag;
                }
            }
            break;
        }
        }
    }
    const struct tg_trace_buffer_stats *st = tg_trace_buffer_stats(tb);
    CHECK(st->chunks_read <= st->chunks_written);
    CHECK(st->chunks_overwritten <= st->chunks_written);
    CHECK(st->bytes_overwritten <= st->bytes_written);
out:
    tg_trace_buffer_free(tb);
    free(payload);
    free(flat);
    return 0;
}
