/* make_link_seeds.c: writes the seed corpora of fuzz_link_session and fuzz_link_records.
 *
 *   make tests/fuzz/make_link_seeds && tests/fuzz/make_link_seeds $(srcdir)/tests/fuzz/corpus
 *
 * fuzz_link_session's seeds are what a dialing node sends on a link, made with nghttp2's client
 * session (the client preface, SETTINGS, extended CONNECT streams with tracegate's headers, DATA
 * carrying control messages and channel records) after it was shown an acceptor's SETTINGS with
 * ENABLE_CONNECT_PROTOCOL: real HTTP/2 for the fuzzer to mutate, reaching past authentication
 * (the target's token is "fuzz-link-token") and the hello into channels. Each scenario ends
 * with a different mistake (no token, a bad record, an undecodable control message, ...).
 * fuzz_link_records' seeds are the same control and channel byte streams behind its selector
 * byte. Everything is deterministic (fixed clocks in the node descriptor): running it again
 * writes the same files. */
#include <errno.h>
#include <nghttp2/nghttp2.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "link_wire.h"
#include "tracegate/ipc_wire.h"
#include "tracegate/kcdata_node.h"
#include "tracegate/pbwire.h"
#include "tracegate_link.pb-c.h"

#define TOKEN "fuzz-link-token"

/* ------------------------------------------------------------ byte buffers */

struct buf {
    uint8_t *p;
    size_t n, cap;
};

static void put(struct buf *b, const void *p, size_t n)
{
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 4096;
        while (cap < b->n + n)
            cap *= 2;
        b->p = realloc(b->p, cap);
        if (!b->p)
            abort();
        b->cap = cap;
    }
    memcpy(b->p + b->n, p, n);
    b->n += n;
}

static void record(struct buf *b, enum tg_link_rec_type t, const void *p, size_t n)
{
    uint8_t h[TG_LINK_REC_HDR_MAX];
    put(b, h, tg_link_rec_header(h, t, n));
    put(b, p, n);
}

static void ipc_bind(struct buf *b, uint64_t rid, const char *service)
{
    uint8_t f[256];
    size_t n = tg_ipc_encode_bind(f + 4, sizeof f - 4, rid, service);
    f[0] = (uint8_t)n;
    f[1] = (uint8_t)(n >> 8);
    f[2] = f[3] = 0;
    record(b, TG_LINK_REC_IPC, f, 4 + n);
}

static void ack(struct buf *b, uint64_t v)
{
    uint8_t pl[10];
    record(b, TG_LINK_REC_ACK, pl, tg_link_ack_payload(pl, v));
}

static void control(struct buf *b, const Tracegate__Link__Control *m)
{
    size_t n = tracegate__link__control__get_packed_size(m);
    uint8_t *p = malloc(5 + n);
    if (!p)
        abort();
    size_t h = tg_link_ctl_header(p, n);
    tracegate__link__control__pack(m, p + h);
    put(b, p, h + n);
    free(p);
}

static void hello(struct buf *b, const char *name)
{
    struct tg_node_desc d;
    memset(&d, 0, sizeof d);
    snprintf(d.name, sizeof d.name, "%s", name);
    d.machine_id = 0x5eed;
    snprintf(d.version, sizeof d.version, "seed");
    char err[128];
    static const char *const caps[] = {"resume", "reverse-open", "clock-sync", "nodes"};
    for (size_t i = 0; i < 4; i++)
        tg_node_desc_add_cap(&d, caps[i], err, sizeof err);
    static const uint32_t ids[4] = {TG_NODE_CLOCK_BOOTTIME, TG_NODE_CLOCK_REALTIME, TG_NODE_CLOCK_MONOTONIC,
                                    TG_NODE_CLOCK_MONOTONIC_RAW};
    for (size_t i = 0; i < 4; i++) {
        d.clocks[i].clock_id = ids[i];
        d.clocks[i].ns = 1000000000ull * (i + 1);
    }
    d.nclocks = 4;
    uint8_t *desc;
    size_t dlen;
    if (tg_node_desc_encode(&d, &desc, &dlen, err, sizeof err) != 0) {
        fprintf(stderr, "make_link_seeds: %s\n", err);
        exit(1);
    }
    Tracegate__Link__Hello h = TRACEGATE__LINK__HELLO__INIT;
    h.has_node_desc = 1;
    h.node_desc.data = desc;
    h.node_desc.len = dlen;
    Tracegate__Link__Control m = TRACEGATE__LINK__CONTROL__INIT;
    m.msg_case = TRACEGATE__LINK__CONTROL__MSG_HELLO;
    m.hello = &h;
    control(b, &m);
    free(desc);
}

static void clock_sync(struct buf *b, Tracegate__Link__ClockSync__Phase phase)
{
    Tracegate__Link__Clock c[2] = {TRACEGATE__LINK__CLOCK__INIT, TRACEGATE__LINK__CLOCK__INIT};
    Tracegate__Link__Clock *pc[2] = {&c[0], &c[1]};
    c[0].has_clock_id = c[0].has_ns = c[1].has_clock_id = c[1].has_ns = 1;
    c[0].clock_id = TG_NODE_CLOCK_BOOTTIME;
    c[0].ns = 5000000000ull;
    c[1].clock_id = TG_NODE_CLOCK_REALTIME;
    c[1].ns = 1700000000000000000ull;
    Tracegate__Link__ClockSync cs = TRACEGATE__LINK__CLOCK_SYNC__INIT;
    cs.has_phase = 1;
    cs.phase = phase;
    cs.n_clocks = phase == TRACEGATE__LINK__CLOCK_SYNC__PHASE__REPLY ? 0 : 2;
    cs.clocks = pc;
    Tracegate__Link__Control m = TRACEGATE__LINK__CONTROL__INIT;
    m.msg_case = TRACEGATE__LINK__CONTROL__MSG_CLOCK_SYNC;
    m.clock_sync = &cs;
    control(b, &m);
}

static void nodes(struct buf *b, const char *a, const char *c)
{
    Tracegate__Link__NodeInfo ni[2] = {TRACEGATE__LINK__NODE_INFO__INIT, TRACEGATE__LINK__NODE_INFO__INIT};
    Tracegate__Link__NodeInfo *pni[2] = {&ni[0], &ni[1]};
    ni[0].name = (char *)a;
    ni[0].has_hops = 1;
    ni[0].hops = 0;
    ni[1].name = (char *)c;
    ni[1].has_hops = 1;
    ni[1].hops = 1;
    Tracegate__Link__Nodes ns = TRACEGATE__LINK__NODES__INIT;
    ns.n_nodes = 2;
    ns.nodes = pni;
    Tracegate__Link__Control m = TRACEGATE__LINK__CONTROL__INIT;
    m.msg_case = TRACEGATE__LINK__CONTROL__MSG_NODES;
    m.nodes = &ns;
    control(b, &m);
}

static void open_failed(struct buf *b, uint64_t id)
{
    Tracegate__Link__OpenFailed of = TRACEGATE__LINK__OPEN_FAILED__INIT;
    of.has_channel_id = of.has_status = 1;
    of.channel_id = id;
    of.status = 503;
    of.reason = "seed says no";
    Tracegate__Link__Control m = TRACEGATE__LINK__CONTROL__INIT;
    m.msg_case = TRACEGATE__LINK__CONTROL__MSG_OPEN_FAILED;
    m.open_failed = &of;
    control(b, &m);
}

static void open_req(struct buf *b, uint64_t id, const char *path)
{
    Tracegate__Link__Open o = TRACEGATE__LINK__OPEN__INIT;
    o.has_channel_id = 1;
    o.channel_id = id;
    o.path = (char *)path;
    o.principal = "uid:0";
    Tracegate__Link__Control m = TRACEGATE__LINK__CONTROL__INIT;
    m.msg_case = TRACEGATE__LINK__CONTROL__MSG_OPEN;
    m.open = &o;
    control(b, &m);
}

static void goodbye(struct buf *b)
{
    Tracegate__Link__Goodbye g = TRACEGATE__LINK__GOODBYE__INIT;
    g.reason = "seed done";
    Tracegate__Link__Control m = TRACEGATE__LINK__CONTROL__INIT;
    m.msg_case = TRACEGATE__LINK__CONTROL__MSG_GOODBYE;
    m.goodbye = &g;
    control(b, &m);
}

/* ------------------------------------------------------------ an HTTP/2 client */

struct stream_src {
    struct buf data;
    size_t off;
    int end; /* END_STREAM once the data is out */
};

struct client {
    nghttp2_session *s;
    struct buf out;
    struct stream_src src[16];
    size_t n_src;
};

static ssize_t read_src(nghttp2_session *s, int32_t sid, uint8_t *buf, size_t len, uint32_t *flags,
                        nghttp2_data_source *source, void *user)
{
    (void)s;
    (void)sid;
    (void)user;
    struct stream_src *x = source->ptr;
    size_t left = x->data.n - x->off;
    size_t n = left < len ? left : len;
    if (n)
        memcpy(buf, x->data.p + x->off, n);
    x->off += n;
    if (x->off == x->data.n) {
        if (x->end)
            *flags |= NGHTTP2_DATA_FLAG_EOF;
        else if (!n)
            return NGHTTP2_ERR_DEFERRED;
    }
    return (ssize_t)n;
}

static void flush(struct client *c)
{
    for (;;) {
        const uint8_t *d;
        ssize_t n = nghttp2_session_mem_send(c->s, &d);
        if (n < 0) {
            fprintf(stderr, "make_link_seeds: %s\n", nghttp2_strerror((int)n));
            exit(1);
        }
        if (!n)
            return;
        put(&c->out, d, (size_t)n);
    }
}

static void client_start(struct client *c)
{
    memset(c, 0, sizeof *c);
    nghttp2_session_callbacks *cb;
    nghttp2_session_callbacks_new(&cb);
    if (nghttp2_session_client_new(&c->s, cb, c) != 0)
        abort();
    nghttp2_session_callbacks_del(cb);
    nghttp2_settings_entry iv[] = {{NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, 1u << 20},
                                   {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, 258}};
    nghttp2_submit_settings(c->s, NGHTTP2_FLAG_NONE, iv, 2);
    flush(c);
    /* what the acceptor says first: extended CONNECT allowed, a 1 MiB stream window; and its
     * connection window grown to 16 MiB (as link.c does) */
    static const uint8_t server_hello[] = {
        0, 0, 12, NGHTTP2_SETTINGS, 0, 0, 0, 0, 0,          /* SETTINGS, 2 entries */
        0, 0x08, 0, 0, 0, 1,                               /* ENABLE_CONNECT_PROTOCOL = 1 */
        0, 0x04, 0, 0x10, 0, 0,                            /* INITIAL_WINDOW_SIZE = 1 MiB */
        0, 0, 4, NGHTTP2_WINDOW_UPDATE, 0, 0, 0, 0, 0,     /* WINDOW_UPDATE stream 0 */
        0, 0xf0, 0, 0,                                     /* + 15 MiB */
    };
    if (nghttp2_session_mem_recv(c->s, server_hello, sizeof server_hello) != (ssize_t)sizeof server_hello)
        abort();
    flush(c);
}

/* Submits an extended CONNECT; the returned source's data (appended to before flush) is its DATA. */
static struct stream_src *request(struct client *c, const char *protocol, const char *path, const char *const *extra,
                                  int end)
{
    nghttp2_nv nv[16];
    size_t n = 0;
#define NV(k, v) nv[n++] = (nghttp2_nv){(uint8_t *)(k), (uint8_t *)(v), strlen(k), strlen(v), NGHTTP2_NV_FLAG_NONE}
    NV(":method", "CONNECT");
    NV(":protocol", protocol);
    NV(":scheme", "http");
    NV(":path", path);
    NV(":authority", "hub");
    for (size_t i = 0; extra && extra[i]; i += 2)
        NV(extra[i], extra[i + 1]);
#undef NV
    struct stream_src *x = &c->src[c->n_src++];
    x->end = end;
    nghttp2_data_provider prd = {.source.ptr = x, .read_callback = read_src};
    if (nghttp2_submit_request(c->s, NULL, nv, n, &prd, NULL) < 0)
        abort();
    return x;
}

static void resume(struct client *c)
{
    for (size_t i = 0; i < c->n_src; i++)
        nghttp2_session_resume_data(c->s, (int32_t)(2 * i + 1));
    flush(c);
}

static void client_end(struct client *c, const char *dir, const char *name)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/fuzz_link_session/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(c->out.p, 1, c->out.n, f) != c->out.n || fclose(f) != 0) {
        fprintf(stderr, "make_link_seeds: %s: %s\n", path, strerror(errno));
        exit(1);
    }
    nghttp2_session_del(c->s);
    for (size_t i = 0; i < c->n_src; i++)
        free(c->src[i].data.p);
    free(c->out.p);
}

static void write_records_seed(const char *dir, const char *name, uint8_t sel, const struct buf *b)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/fuzz_link_records/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(&sel, 1, 1, f) != 1 || fwrite(b->p, 1, b->n, f) != b->n || fclose(f) != 0) {
        fprintf(stderr, "make_link_seeds: %s: %s\n", path, strerror(errno));
        exit(1);
    }
}

static const char *const k_ctl_hdrs[] = {"tracegate-node", "edge", "authorization", "Bearer " TOKEN, NULL};

/* The control stream and a well-behaved start: hello, clock sync, the nodes edge reaches. */
static struct stream_src *start_link(struct client *c)
{
    client_start(c);
    struct stream_src *ctl = request(c, "tracegate-link", "/link", k_ctl_hdrs, 0);
    hello(&ctl->data, "edge");
    clock_sync(&ctl->data, TRACEGATE__LINK__CLOCK_SYNC__PHASE__PING);
    nodes(&ctl->data, "edge", "far");
    flush(c);
    return ctl;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: make_link_seeds CORPUS_DIR (writes CORPUS_DIR/fuzz_link_session, .../fuzz_link_records)\n");
        return 2;
    }
    const char *dir = argv[1];
    char sub[1024];
    snprintf(sub, sizeof sub, "%s/fuzz_link_session", dir);
    mkdir(sub, 0755);
    snprintf(sub, sizeof sub, "%s/fuzz_link_records", dir);
    mkdir(sub, 0755);
    struct client c;

    /* 1: the link comes up; PINGs, clock rounds, nodes, then the peer says goodbye */
    struct stream_src *ctl = start_link(&c);
    nghttp2_submit_ping(c.s, NGHTTP2_FLAG_NONE, NULL);
    clock_sync(&ctl->data, TRACEGATE__LINK__CLOCK_SYNC__PHASE__REPLY);
    clock_sync(&ctl->data, TRACEGATE__LINK__CLOCK_SYNC__PHASE__UPDATE);
    resume(&c);
    write_records_seed(dir, "control-stream", 1, &ctl->data);
    goodbye(&ctl->data);
    resume(&c);
    client_end(&c, dir, "hello-clock-goodbye");

    /* 2: a consumer channel to the hub itself: BindService, ACK, ATTACH, END_STREAM */
    ctl = start_link(&c);
    static const char *const ch1[] = {"tracegate-channel", "1", "tracegate-principal", "uid:1000", NULL};
    struct stream_src *x = request(&c, "perfetto-ipc", "/node/hub/consumer", ch1, 1);
    ipc_bind(&x->data, 1, "ConsumerPort");
    ack(&x->data, 0);
    static const uint8_t att[] = {1, 2, 0, 0};
    record(&x->data, TG_LINK_REC_ATTACH, att, sizeof att);
    ipc_bind(&x->data, 2, "TracegateFleet");
    resume(&c);
    write_records_seed(dir, "channel-bind", 0, &x->data);
    write_records_seed(dir, "channel-bind-live", 2 | (3 << 2) | (1 << 5), &x->data);
    write_records_seed(dir, "channel-bind-resume", 3 | (5 << 2) | (4 << 5), &x->data);
    client_end(&c, dir, "channel-consumer");

    /* 2b: a consumer channel whose peer says the far end was lost past a window (a LOST record
     * with a key), then says it again (a protocol error) */
    ctl = start_link(&c);
    x = request(&c, "perfetto-ipc", "/node/hub/consumer", ch1, 1);
    ipc_bind(&x->data, 1, "ConsumerPort");
    static const char lost_key[] = "tracegate-link-hub-1";
    record(&x->data, TG_LINK_REC_LOST, lost_key, sizeof lost_key - 1);
    write_records_seed(dir, "channel-lost", 0, &x->data);
    record(&x->data, TG_LINK_REC_LOST, lost_key, sizeof lost_key - 1);
    resume(&c);
    client_end(&c, dir, "channel-lost");
    {
        /* 40 small records (an ACK falls due while a big local frame is half sent) and ACKs */
        struct buf many = {0};
        for (int i = 0; i < 40; i++) {
            static const uint8_t empty_frame[4] = {0, 0, 0, 0};
            record(&many, TG_LINK_REC_IPC, empty_frame, sizeof empty_frame);
            if (i == 20)
                ack(&many, 1);
        }
        ack(&many, 1);
        write_records_seed(dir, "channel-many-live", 2 | (7 << 2) | (0 << 5), &many);
        write_records_seed(dir, "channel-many-resume", 3 | (7 << 2) | (2 << 5), &many);
        free(many.p);
    }

    /* 3: channels refused for their headers: a resume of an unknown channel, an even id nobody
     * asked for, an unknown node, a bad path; then a producer channel that works */
    ctl = start_link(&c);
    static const char *const r1[] = {"tracegate-channel", "3", "tracegate-received", "5", NULL};
    static const char *const r2[] = {"tracegate-channel", "2", NULL};
    static const char *const r3[] = {"tracegate-channel", "5", NULL};
    static const char *const r4[] = {"tracegate-channel", "7", NULL};
    static const char *const r5[] = {"tracegate-channel", "9", "tracegate-principal", "uid:0", NULL};
    request(&c, "perfetto-ipc", "/node/hub/producer", r1, 1);
    request(&c, "perfetto-ipc", "/node/hub/consumer", r2, 1);
    request(&c, "perfetto-ipc", "/node/nowhere/consumer", r3, 1);
    request(&c, "perfetto-ipc", "/node/hub/other", r4, 1);
    x = request(&c, "perfetto-ipc", "/node/hub/producer", r5, 0);
    ipc_bind(&x->data, 1, "ProducerPort");
    resume(&c);
    client_end(&c, dir, "channels-refused");

    /* 4: a channel to the dialer's own name comes back to it as a reverse Open (id 2); the seed
     * opens that stream, then refuses another with OpenFailed */
    ctl = start_link(&c);
    static const char *const e1[] = {"tracegate-channel", "b", NULL};
    x = request(&c, "perfetto-ipc", "/node/edge/consumer", e1, 0);
    ipc_bind(&x->data, 1, "ConsumerPort");
    resume(&c);
    static const char *const e2[] = {"tracegate-channel", "2", "tracegate-received", "0", NULL};
    struct stream_src *y = request(&c, "perfetto-ipc", "/node/edge/consumer", e2, 0);
    ack(&y->data, 0);
    open_failed(&ctl->data, 4);
    open_req(&ctl->data, 6, "/node/edge/producer");
    resume(&c);
    client_end(&c, dir, "reverse-open");

    /* 5: protocol errors on a channel: an unknown record type (RST_STREAM, the link stays), then
     * an oversized record on another, then an IPC record too short for a frame */
    ctl = start_link(&c);
    static const char *const b1[] = {"tracegate-channel", "1", NULL};
    static const char *const b2[] = {"tracegate-channel", "3", NULL};
    static const char *const b3[] = {"tracegate-channel", "5", NULL};
    x = request(&c, "perfetto-ipc", "/node/hub/consumer", b1, 0);
    static const uint8_t badtype[] = {0x09, 1, 0};
    put(&x->data, badtype, sizeof badtype);
    x = request(&c, "perfetto-ipc", "/node/hub/consumer", b2, 0);
    uint8_t big[TG_LINK_REC_HDR_MAX];
    put(&x->data, big, tg_link_rec_header(big, TG_LINK_REC_IPC, TG_LINK_REC_MAX + 1));
    x = request(&c, "perfetto-ipc", "/node/hub/consumer", b3, 1);
    static const uint8_t tiny[] = {0, 0};
    record(&x->data, TG_LINK_REC_IPC, tiny, sizeof tiny);
    resume(&c);
    nghttp2_submit_rst_stream(c.s, NGHTTP2_FLAG_NONE, 3, NGHTTP2_CANCEL);
    flush(&c);
    client_end(&c, dir, "channel-errors");

    /* 6: a large IPC frame split over many DATA frames, and an ACK for records never sent */
    ctl = start_link(&c);
    x = request(&c, "perfetto-ipc", "/node/hub/consumer", b1, 0);
    {
        size_t n = 40000;
        uint8_t *f = calloc(1, 4 + n);
        f[0] = (uint8_t)n;
        f[1] = (uint8_t)(n >> 8);
        record(&x->data, TG_LINK_REC_IPC, f, 4 + n);
        free(f);
        ack(&x->data, 1000);
    }
    resume(&c);
    client_end(&c, dir, "channel-large-frame");

    /* 7: authentication: no token, then (another connection) a wrong one */
    client_start(&c);
    static const char *const noauth[] = {"tracegate-node", "edge", NULL};
    request(&c, "tracegate-link", "/link", noauth, 0);
    flush(&c);
    client_end(&c, dir, "no-token");
    client_start(&c);
    static const char *const badauth[] = {"tracegate-node", "edge", "authorization", "Bearer wrong", NULL};
    request(&c, "tracegate-link", "/link", badauth, 0);
    flush(&c);
    client_end(&c, dir, "bad-token");

    /* 8: streams before and beside the control stream: a channel first (421), a GET, an unknown
     * :protocol, the node's own name, then a control stream resuming an unknown link id, and a
     * second control stream */
    client_start(&c);
    request(&c, "perfetto-ipc", "/node/hub/consumer", b1, 1);
    {
        nghttp2_nv nv[] = {{(uint8_t *)":method", (uint8_t *)"GET", 7, 3, 0},
                           {(uint8_t *)":scheme", (uint8_t *)"http", 7, 4, 0},
                           {(uint8_t *)":path", (uint8_t *)"/", 5, 1, 0},
                           {(uint8_t *)":authority", (uint8_t *)"hub", 10, 3, 0}};
        nghttp2_submit_request(c.s, NULL, nv, 4, NULL, NULL);
    }
    request(&c, "websocket", "/link", k_ctl_hdrs, 1);
    static const char *const self[] = {"tracegate-node", "hub", "authorization", "Bearer " TOKEN, NULL};
    request(&c, "tracegate-link", "/link", self, 1);
    static const char *const resumeid[] = {"tracegate-node",    "edge", "authorization", "Bearer " TOKEN,
                                           "tracegate-link-id", "00112233445566778899aabbccddeeff", NULL};
    ctl = request(&c, "tracegate-link", "/link", resumeid, 0);
    hello(&ctl->data, "edge");
    request(&c, "tracegate-link", "/link", k_ctl_hdrs, 0);
    flush(&c);
    client_end(&c, dir, "streams-odd");

    /* 9: a hello naming another node, after which nothing more is read */
    client_start(&c);
    ctl = request(&c, "tracegate-link", "/link", k_ctl_hdrs, 0);
    hello(&ctl->data, "impostor");
    flush(&c);
    client_end(&c, dir, "hello-wrong-name");

    /* 10: a control message that is not protobuf, and one over 1 MiB */
    ctl = start_link(&c);
    static const uint8_t junk[] = {3, 0xff, 0xff, 0xff};
    put(&ctl->data, junk, sizeof junk);
    resume(&c);
    client_end(&c, dir, "control-junk");
    ctl = start_link(&c);
    uint8_t hb[10];
    put(&ctl->data, hb, tg_pb_put_varint(hb, TG_LINK_CTL_MAX + 1));
    resume(&c);
    client_end(&c, dir, "control-oversize");

    /* 11: the connection's own business mid-link: settings changes, window updates, priority,
     * a ping, a stream reset, GOAWAY */
    ctl = start_link(&c);
    x = request(&c, "perfetto-ipc", "/node/hub/consumer", b1, 0);
    ipc_bind(&x->data, 1, "ConsumerPort");
    resume(&c);
    nghttp2_settings_entry iv[] = {{NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, 0}, {NGHTTP2_SETTINGS_MAX_FRAME_SIZE, 16384}};
    nghttp2_submit_settings(c.s, NGHTTP2_FLAG_NONE, iv, 2);
    nghttp2_submit_window_update(c.s, NGHTTP2_FLAG_NONE, 0, 1000);
    nghttp2_submit_window_update(c.s, NGHTTP2_FLAG_NONE, 3, 5);
    nghttp2_submit_ping(c.s, NGHTTP2_FLAG_NONE, NULL);
    nghttp2_submit_rst_stream(c.s, NGHTTP2_FLAG_NONE, 3, NGHTTP2_INTERNAL_ERROR);
    nghttp2_submit_goaway(c.s, NGHTTP2_FLAG_NONE, 0, NGHTTP2_NO_ERROR, NULL, 0);
    flush(&c);
    client_end(&c, dir, "connection-frames");
    return 0;
}
