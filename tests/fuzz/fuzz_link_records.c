/* fuzz_link_records.c: fuzz target for a gateway link's record layer (gateway/link_wire.c,
 * gateway/link_channel.c; docs/link-protocol.md §3.2, §4). The first byte picks what the rest is:
 *
 *   sel & 3 == 0  a channel's DATA as records: both record parsers agree, payloads stay inside the
 *                 input, every record re-encodes and parses back the same, every strict prefix
 *                 of a record asks for more bytes;
 *   sel & 3 == 1  a control stream: varint-framed tracegate.link.Control messages, unpacked,
 *                 re-packed and framed again (same message), a hello's node descriptor decoded,
 *                 paths and node names checked as link.c does;
 *   sel & 3 == 2  the peer's DATA fed into a live channel (tg_link_channel_on_data) whose local peer
 *                 wrote (sel >> 2) & 7 frames, in chunks of 1 + 41 * (sel >> 5) bytes, pulling
 *                 what the channel hands nghttp2 in between (tg_link_channel_read_cb);
 *   sel & 3 == 3  the same with a resume half way (the stream is lost, a new one is bound with a
 *                 received count taken from the input).
 *
 * In the channel modes the pulled bytes must stay whole, well-formed records and the IPC records
 * must be the local frames in order, starting after what the peer had acknowledged (while the
 * input only acknowledges records it was sent whole: a peer that acknowledges what it never got
 * garbles its own stream, which is its problem, and only memory safety is checked then).
 * Must never crash, leak, or trip ASan/UBSan. */
#include <event2/buffer.h>
#include <event2/event.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fleet.h"
#include "gw_config.h"
#include "gw_core.h"
#include "link_int.h"
#include "link_wire.h"
#include "tracegate/kcdata_node.h"
#include "tracegate/log.h"
#include "tracegate_link.pb-c.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(x)                                                                                                       \
    do {                                                                                                               \
        if (!(x)) {                                                                                                    \
            fprintf(stderr, "fuzz_link_records: check failed at line %d: %s\n", __LINE__, #x);                         \
            __builtin_trap();                                                                                          \
        }                                                                                                              \
    } while (0)

/* ------------------------------------------------------------ mode 0: records */

static void fuzz_records(const uint8_t *p, size_t n)
{
    size_t off = 0;
    int first = 1;
    while (off < n) {
        uint8_t type, htype;
        const uint8_t *pl;
        size_t plen, hplen;
        long r = tg_link_rec_parse(p + off, n - off, &type, &pl, &plen);
        long h = tg_link_rec_header_parse(p + off, n - off, &htype, &hplen);
        CHECK(r >= -1 && r <= (long)(n - off));
        CHECK(h >= -1 && h <= TG_LINK_REC_HDR_MAX && h <= (long)(n - off));
        if (r <= 0) {
            /* the header parser sees no error the full parser does not, except an ACK's payload */
            if (r == 0)
                CHECK(h >= 0);
            if (r < 0 && h > 0)
                CHECK(htype == TG_LINK_REC_ACK);
            return;
        }
        CHECK(h > 0 && htype == type && hplen == plen && h + (long)plen == r);
        CHECK(pl == p + off + h && plen <= TG_LINK_REC_MAX);
        /* re-encoded with a minimal header, it parses back the same */
        uint8_t *re = malloc(TG_LINK_REC_HDR_MAX + plen + 1);
        CHECK(re);
        size_t hl = tg_link_rec_header(re, (enum tg_link_rec_type)type, plen);
        CHECK(hl <= (size_t)h);
        if (plen)
            memcpy(re + hl, pl, plen);
        uint8_t t2;
        const uint8_t *p2;
        size_t l2;
        CHECK(tg_link_rec_parse(re, hl + plen, &t2, &p2, &l2) == (long)(hl + plen) && t2 == type && l2 == plen);
        if (type == TG_LINK_REC_ACK) {
            uint64_t v, v2;
            uint8_t a[10];
            CHECK(tg_link_ack_parse(pl, plen, &v) == 0);
            size_t al = tg_link_ack_payload(a, v);
            CHECK(tg_link_ack_parse(a, al, &v2) == 0 && v2 == v && al <= plen);
        }
        /* every strict prefix of the first (small) record asks for more */
        if (first && r <= 512)
            for (size_t cut = 0; cut < hl + plen; cut++)
                CHECK(tg_link_rec_parse(re, cut, &t2, &p2, &l2) == 0);
        first = 0;
        free(re);
        off += (size_t)r;
    }
}

/* ------------------------------------------------------------ mode 1: control */

static void check_control(const Tracegate__Link__Control *m)
{
    char err[160], node[64];
    int producer;
    switch (m->msg_case) {
    case TRACEGATE__LINK__CONTROL__MSG_HELLO:
        if (m->hello->has_node_desc) {
            struct tg_node_desc d;
            tg_node_desc_decode(m->hello->node_desc.data, m->hello->node_desc.len, &d, err, sizeof err);
        }
        break;
    case TRACEGATE__LINK__CONTROL__MSG_OPEN:
        if (m->open->path)
            tg_link_parse_path(m->open->path, strlen(m->open->path), node, sizeof node, &producer);
        break;
    case TRACEGATE__LINK__CONTROL__MSG_NODES:
        for (size_t i = 0; i < m->nodes->n_nodes; i++)
            if (m->nodes->nodes[i]->name)
                tg_link_node_name_ok(m->nodes->nodes[i]->name);
        break;
    default: break;
    }
}


/* Whether protobuf-c kept an unknown field in m or in any message inside it (oneof members only
 * when set). */
static int has_unknown(const ProtobufCMessage *m)
{
    if (m->n_unknown_fields)
        return 1;
    const ProtobufCMessageDescriptor *d = m->descriptor;
    const char *base = (const char *)m;
    for (unsigned i = 0; i < d->n_fields; i++) {
        const ProtobufCFieldDescriptor *f = &d->fields[i];
        if (f->type != PROTOBUF_C_TYPE_MESSAGE)
            continue;
        if (f->label == PROTOBUF_C_LABEL_REPEATED) {
            size_t n = *(const size_t *)(const void *)(base + f->quantifier_offset);
            ProtobufCMessage *const *v = *(ProtobufCMessage *const *const *)(const void *)(base + f->offset);
            for (size_t k = 0; k < n; k++)
                if (v[k] && has_unknown(v[k]))
                    return 1;
            continue;
        }
        if ((f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) &&
            *(const uint32_t *)(const void *)(base + f->quantifier_offset) != f->id)
            continue;
        const ProtobufCMessage *sub = *(const ProtobufCMessage *const *)(const void *)(base + f->offset);
        if (sub && has_unknown(sub))
            return 1;
    }
    return 0;
}

static void fuzz_control(const uint8_t *p, size_t n)
{
    size_t off = 0;
    while (off < n) {
        const uint8_t *msg;
        size_t mlen;
        long r = tg_link_ctl_parse(p + off, n - off, &msg, &mlen);
        CHECK(r >= -1 && r <= (long)(n - off));
        if (r <= 0)
            return;
        CHECK(msg + mlen == p + off + r && mlen <= TG_LINK_CTL_MAX);
        Tracegate__Link__Control *m = tracegate__link__control__unpack(NULL, mlen, msg);
        if (m) {
            check_control(m);
            /* framed again, it comes back as the same kind of message */
            size_t pn = tracegate__link__control__get_packed_size(m);
            uint8_t *b = malloc(5 + pn);
            CHECK(b);
            size_t h = tg_link_ctl_header(b, pn);
            if (h) {
                tracegate__link__control__pack(m, b + h);
                const uint8_t *msg2;
                size_t mlen2;
                CHECK(tg_link_ctl_parse(b, h + pn, &msg2, &mlen2) == (long)(h + pn) && mlen2 == pn);
                /* the same message again (when protobuf-c kept no unknown fields anywhere in it,
                 * whose re-packing after the known ones is protobuf-c's business: a field numbered
                 * 0 is kept and written back where protobuf-c's decoder refuses it) */
                Tracegate__Link__Control *m2 = tracegate__link__control__unpack(NULL, mlen2, msg2);
                if (!has_unknown(&m->base))
                    CHECK(m2 && m2->msg_case == m->msg_case);
                if (m2)
                    tracegate__link__control__free_unpacked(m2, NULL);
            }
            free(b);
            tracegate__link__control__free_unpacked(m, NULL);
        }
        off += (size_t)r;
    }
}

/* ------------------------------------------------------------ modes 2, 3: a live channel */

static struct event_base *g_base;
static struct tg_gw_config g_cfg;
static struct tg_gw *g_gw;
static struct tg_fleet *g_fleet;

static void channel_init_once(void)
{
    if (g_base)
        return;
    tg_log_set_level(TG_LOG_ERROR);
    g_base = event_base_new();
    char err[512];
    tg_gw_config_init(&g_cfg);
    /* the channels never reach a gateway session: no upstream is dialed */
    if (!g_base || tg_gw_config_set(&g_cfg, "upstream-consumer", "/nonexistent/tg-fuzz.sock", err, sizeof err) != 0 ||
        tg_gw_config_set(&g_cfg, "no-http", NULL, err, sizeof err) != 0 ||
        tg_gw_config_set(&g_cfg, "upstream-probe-interval", "0", err, sizeof err) != 0 ||
        tg_gw_config_validate(&g_cfg, err, sizeof err) != 0 || !(g_gw = tg_gw_new(g_base, &g_cfg, NULL, err, sizeof err)))
        __builtin_trap();
    struct tg_fleet_config fc;
    memset(&fc, 0, sizeof fc);
    fc.node_name = "here";
    g_fleet = tg_fleet_new(g_base, g_gw, &fc, err, sizeof err);
    if (!g_fleet)
        __builtin_trap();
}

/* Payload sizes of the frames the local peer writes (a big one spans many pulls). */
static const uint32_t k_sizes[8] = {5, 1000, 0, 20000, 130, 4096, 66000, 1};

static void frame_bytes(uint8_t *out, uint32_t idx, uint32_t plen)
{
    out[0] = (uint8_t)plen;
    out[1] = (uint8_t)(plen >> 8);
    out[2] = (uint8_t)(plen >> 16);
    out[3] = (uint8_t)(plen >> 24);
    for (uint32_t i = 0; i < plen; i++)
        out[4 + i] = (uint8_t)(idx * 31 + i);
}

/* What the channel handed "nghttp2" on the current stream, and what we expect of it. */
struct pulled {
    struct evbuffer *buf;   /* bytes not yet parsed into whole records */
    uint64_t next_frame;    /* 1-based number of the local frame the next IPC record must be */
    uint64_t whole;         /* IPC records received whole on all streams (what a peer may ack) */
    int trust;              /* the input only acknowledged what it was sent whole */
};

static void check_pulled(struct pulled *pu, struct link_channel *ch)
{
    if (ch->tx_acked > pu->whole)
        pu->trust = 0;
    if (!pu->trust) {
        evbuffer_drain(pu->buf, evbuffer_get_length(pu->buf));
        return;
    }
    for (;;) {
        size_t len = evbuffer_get_length(pu->buf);
        if (!len)
            return;
        const uint8_t *p = evbuffer_pullup(pu->buf, -1);
        uint8_t type;
        const uint8_t *pl;
        size_t plen;
        long r = tg_link_rec_parse(p, len, &type, &pl, &plen);
        CHECK(r >= 0); /* whole, well-formed records */
        if (r == 0)
            return;
        if (type == TG_LINK_REC_IPC) {
            uint64_t idx = pu->next_frame++;
            CHECK(idx >= 1 && idx <= 8);
            uint32_t fl = k_sizes[idx - 1];
            uint8_t *want = malloc(4 + (size_t)fl);
            CHECK(want);
            frame_bytes(want, (uint32_t)idx, fl);
            CHECK(plen == 4 + (size_t)fl && memcmp(pl, want, plen) == 0);
            free(want);
            if (idx > pu->whole)
                pu->whole = idx;
        } else {
            CHECK(type == TG_LINK_REC_ACK || type == TG_LINK_REC_ATTACH);
        }
        evbuffer_drain(pu->buf, (size_t)r);
    }
}

/* Up to `calls` DATA frames of at most `want` bytes each, as nghttp2 would ask for them. */
static void pull(struct link_channel *ch, struct stream_ctx *x, struct pulled *pu, size_t want, int calls)
{
    nghttp2_data_source src = {.ptr = x};
    uint8_t buf[8192];
    for (int i = 0; i < calls; i++) {
        uint32_t flags = 0;
        size_t w = want < sizeof buf ? want : sizeof buf;
        ssize_t r = tg_link_channel_read_cb(NULL, ch->sid, buf, w ? w : 1, &flags, &src, NULL);
        if (r == NGHTTP2_ERR_DEFERRED)
            break;
        CHECK(r >= 0 && (size_t)r <= (w ? w : 1));
        evbuffer_add(pu->buf, buf, (size_t)r);
        if (flags & NGHTTP2_DATA_FLAG_EOF)
            break;
    }
    check_pulled(pu, ch);
}

static void bind_stream(struct link_channel *ch, struct stream_ctx *x, int32_t sid, uint64_t received)
{
    memset(x, 0, sizeof *x);
    x->kind = STREAM_CHANNEL;
    x->ch = ch;
    ch->ctx = x;
    ch->response_ok = 1;
    tg_link_channel_bind(ch, sid, received);
}

static void fuzz_channel(const uint8_t *p, size_t n, uint8_t sel)
{
    channel_init_once();
    struct tg_link *l = calloc(1, sizeof *l);
    CHECK(l);
    l->fleet = g_fleet;
    l->state = LINK_UP;
    l->next_cid = 1;
    snprintf(l->peer_name, sizeof l->peer_name, "peer");
    int fd = -1;
    struct link_channel *ch = tg_link_channel_new(l, 0, "peer", 0, "uid:1", 0, &fd, NULL);
    CHECK(ch);
    uint64_t id = ch->id;
    struct stream_ctx x;
    bind_stream(ch, &x, 1, 0);

    /* the local peer's frames, taken into records by the channel */
    unsigned k = (sel >> 2) & 7;
    for (unsigned i = 1; i <= k; i++) {
        uint8_t *f = malloc(4 + (size_t)k_sizes[i - 1]);
        CHECK(f);
        frame_bytes(f, i, k_sizes[i - 1]);
        size_t fl = 4 + (size_t)k_sizes[i - 1], off = 0;
        for (int spins = 0; off < fl; spins++) {
            CHECK(spins < 100000);
            ssize_t w = write(fd, f + off, fl - off);
            if (w > 0)
                off += (size_t)w;
            event_base_loop(g_base, EVLOOP_NONBLOCK);
        }
        free(f);
    }
    for (int spins = 0; ch->tx_count < k; spins++) {
        CHECK(spins < 100000);
        event_base_loop(g_base, EVLOOP_NONBLOCK);
    }

    struct pulled pu = {evbuffer_new(), 1, 0, 1};
    CHECK(pu.buf);
    size_t chunk = 1 + 41 * (size_t)(sel >> 5);
    size_t resume_at = (sel & 3) == 3 ? n / 2 : (size_t)-1;
    int32_t sid = 1;
    size_t off = 0;
    int alive = 1;
    while (off < n && alive) {
        if (off >= resume_at) {
            resume_at = (size_t)-1;
            /* the stream is lost; a new one says the peer has `received` records */
            tg_link_channel_unbind(ch);
            uint64_t span = ch->tx_count - ch->tx_acked + 1;
            uint64_t received = ch->tx_acked + p[off] % span;
            if (received > pu.whole)
                pu.trust = 0; /* claims records it never got whole */
            sid += 2;
            evbuffer_drain(pu.buf, evbuffer_get_length(pu.buf));
            bind_stream(ch, &x, sid, received);
            if (!tg_link_channel_find(l, id))
                break;
            pu.next_frame = ch->tx_acked + 1;
        }
        size_t c = chunk < n - off ? chunk : n - off;
        if (tg_link_channel_on_data(ch, p + off, c) != 0)
            alive = 0; /* link.c resets the stream and closes the channel */
        off += c;
        if (!tg_link_channel_find(l, id))
            break;
        pull(ch, &x, &pu, 1 + 8 * (size_t)p[off - 1], 1); /* one DATA frame, its size from the input */
    }
    if (alive && tg_link_channel_find(l, id))
        pull(ch, &x, &pu, 1 << 20, 1000);
    evbuffer_free(pu.buf);
    tg_link_free(l);
    close(fd);
    for (int i = 0; i < 8; i++)
        event_base_loop(g_base, EVLOOP_NONBLOCK);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || size > (1u << 20))
        return 0;
    uint8_t sel = data[0];
    switch (sel & 3) {
    case 0: fuzz_records(data + 1, size - 1); break;
    case 1: fuzz_control(data + 1, size - 1); break;
    default: fuzz_channel(data + 1, size - 1, sel); break;
    }
    return 0;
}
