/* test_gw_ws_handoff.c: a /traced WebSocket on each data path (native: the socket moved to the gateway's loop under the server-side filter; lws: the lws thread and the in-memory seam) into the tg_conn of the gateway double: bytes both ways, split frames, messages that split and join frames both ways, large transfers with backpressure, a slow reader (bounded, others served), close both ways, many connections, messages the socket takes in part (pings answered between them; a reader that vanishes meanwhile). */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "gw_ws.h"
#include "net/ws_filter.h"
#include "net/ws_link.h"
#include "net/ws_wire.h"
#include "test_gw_ws_double.h"
#include "test_ws_rawclient.h"
#include "tg_test_util.h"

static struct tg_gw_ws *g_ws;
static int g_port;
static int g_lws; /* the group running: 1 = --ws-data-path lws, 0 = native */

static int setup(void **state)
{
    (void)state;
    struct event_base *base = tdbl_start();
    g_port = tg_test_free_tcp_port();
    struct tg_gw_ws_config cfg = {
        .bind_host = "127.0.0.1",
        .port = g_port,
        .local_roles = TG_GW_ROLE_ADMIN,
        .max_message = 256 * 1024,
        .lws_data_path = g_lws,
    };
    char err[256];
    g_ws = tg_gw_ws_start(NULL, base, &cfg, err, sizeof err);
    if (!g_ws) {
        fprintf(stderr, "tg_gw_ws_start: %s\n", err);
        return -1;
    }
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    tg_gw_ws_stop(g_ws);
    g_ws = NULL;
    tdbl_stop();
    return 0;
}

static int open_ws(void)
{
    char resp[2048];
    int fd;
    int st = tws_open(g_port, "/traced", NULL, NULL, &fd, resp, sizeof resp);
    assert_int_equal(st, 101);
    return fd;
}

static void expect_ipc(int fd, const void *want, size_t wlen)
{
    uint8_t *b;
    size_t n;
    assert_int_equal(tws_recv_ipc(fd, &b, &n, 5000), 0);
    assert_int_equal(n, wlen);
    assert_memory_equal(b, want, wlen);
    free(b);
}

static void test_bytes_both_ways(void **state)
{
    (void)state;
    int fd = open_ws();
    for (int i = 0; i < 20; i++) {
        char msg[64];
        int n = snprintf(msg, sizeof msg, "frame number %d", i);
        assert_int_equal(tws_send_ipc(fd, msg, (size_t)n), 0);
        expect_ipc(fd, msg, (size_t)n);
    }
    assert_true(tdbl_wait_count(tdbl_accepted, 1, 2000));
    struct tg_gw_client_info ci;
    assert_int_equal(tdbl_info(0, &ci), 0);
    assert_int_equal(ci.transport, TG_GW_T_WS);
    assert_int_equal(ci.port, TG_GW_PORT_CONSUMER);
    assert_int_equal(ci.loopback, 1);
    assert_int_equal(ci.auth, TG_GW_AUTH_LOCAL);
    assert_int_equal(ci.roles, TG_GW_ROLE_ADMIN);
    assert_string_equal(ci.node, "");
    assert_string_equal(ci.source, "127.0.0.1");
    assert_int_equal(tdbl_unix_conns(), 0); /* fd passing is off for WS conns */
    /* the path under test carries it */
    struct tg_ws_server_stats ns;
    tg_ws_server_stats(&ns);
    assert_int_equal(ns.open, g_lws ? 0 : 1);
    assert_int_equal(tg_ws_link_count(), g_lws ? 1 : 0);
    tws_close(fd);
}

static void test_split_and_joined_frames(void **state)
{
    (void)state;
    int fd = open_ws();
    /* one frame split over three messages, the header itself split */
    const char body[] = "a frame split across three WebSocket messages";
    uint8_t f[4 + sizeof body];
    uint32_t bl = (uint32_t)(sizeof body - 1);
    f[0] = (uint8_t)bl;
    f[1] = (uint8_t)(bl >> 8);
    f[2] = (uint8_t)(bl >> 16);
    f[3] = (uint8_t)(bl >> 24);
    memcpy(f + 4, body, bl);
    assert_int_equal(tws_send(fd, TWS_BINARY, f, 2), 0);
    assert_int_equal(tws_send(fd, TWS_BINARY, f + 2, 10), 0);
    assert_int_equal(tws_send(fd, TWS_BINARY, f + 12, 4 + bl - 12), 0);
    expect_ipc(fd, body, bl);

    /* three frames in one message */
    uint8_t three[3 * (4 + 5)];
    for (int i = 0; i < 3; i++) {
        uint8_t *p = three + i * 9;
        p[0] = 5;
        p[1] = p[2] = p[3] = 0;
        memcpy(p + 4, i == 0 ? "one.." : i == 1 ? "two.." : "three", 5);
    }
    assert_int_equal(tws_send(fd, TWS_BINARY, three, sizeof three), 0);
    expect_ipc(fd, "one..", 5);
    expect_ipc(fd, "two..", 5);
    expect_ipc(fd, "three", 5);

    /* a WebSocket-fragmented message (continuation frames) is a byte stream too */
    assert_int_equal(tws_send_frame(fd, TWS_BINARY, 0, f, 7), 0);
    assert_int_equal(tws_send_frame(fd, TWS_CONT, 1, f + 7, 4 + bl - 7), 0);
    expect_ipc(fd, body, bl);
    tws_close(fd);
}

static void test_large_download_slow_reader(void **state)
{
    (void)state;
    int fd = open_ws();
    const unsigned frames = 512, size = 65536; /* 32 MiB */
    char cmd[64];
    int n = snprintf(cmd, sizeof cmd, "!source:%u:%u", frames, size);
    assert_int_equal(tws_send_ipc(fd, cmd, (size_t)n), 0);
    usleep(500 * 1000); /* the reader is slow: the source must wait, not fail */
    uint64_t off = 0;
    for (unsigned i = 0; i < frames; i++) {
        uint8_t *b;
        size_t len;
        assert_int_equal(tws_recv_ipc(fd, &b, &len, 10000), 0);
        assert_int_equal(len, size);
        for (size_t k = 0; k < len; k++)
            if (b[k] != (uint8_t)(((off + k) * 7 + 3) & 0xff))
                fail_msg("byte %llu differs", (unsigned long long)(off + k));
        off += len;
        free(b);
    }
    tws_close(fd);
}

struct sender {
    int fd;
    size_t frames, size;
    atomic_size_t sent;
    uint64_t hash;
    int rc;
};

static void *sender_thread(void *arg)
{
    struct sender *s = arg;
    uint8_t *buf = malloc(s->size);
    s->hash = TDBL_FNV_INIT;
    for (size_t i = 0; i < s->frames; i++) {
        for (size_t k = 0; k < s->size; k++)
            buf[k] = (uint8_t)((i * 131 + k * 13) & 0xff);
        buf[0] = 'D'; /* never '!' (a command for the test peer) */
        s->hash = tdbl_fnv(s->hash, buf, s->size);
        if (tws_send_ipc(s->fd, buf, s->size) != 0) {
            s->rc = -1;
            break;
        }
        atomic_fetch_add(&s->sent, s->size + 4);
    }
    free(buf);
    return NULL;
}

static uint64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* How far the sender got once it stopped advancing for 300 ms (or reached limit). Should this
 * process be starved for that long the sample comes early: smaller, never a false failure. */
static size_t sender_plateau(struct sender *s, size_t limit)
{
    uint64_t deadline = mono_ms() + (uint64_t)tg_test_ms(30000);
    size_t last = 0;
    for (;;) {
        usleep(300 * 1000);
        size_t now = atomic_load(&s->sent);
        if ((now > 0 && now == last) || now >= limit || mono_ms() > deadline)
            return now;
        last = now;
    }
}

static void test_large_upload_backpressure(void **state)
{
    (void)state;
    int fd = open_ws();
    assert_int_equal(tws_send_ipc(fd, "!sink", 5), 0);
    /* the peer stops reading until told: the frames after this one wait in the stream */
    assert_int_equal(tws_send_ipc(fd, "!pause", 6), 0);
    struct sender s = {.fd = fd, .frames = 1024, .size = 65536}; /* 64 MiB */
    pthread_t t;
    pthread_create(&t, NULL, sender_thread, &s);
    /* while the gateway side does not read, the sender is held back by the kernel buffers plus the
     * link's small pending buffer, not by RAM: wait until it stops advancing (or goes too far) */
    size_t during_pause = sender_plateau(&s, 24u << 20);
    assert_true(during_pause > 0);
    assert_true(during_pause < 24u << 20);
    tdbl_resume_all();
    pthread_join(t, NULL);
    assert_int_equal(s.rc, 0);
    assert_int_equal(tws_send_ipc(fd, "!stats", 6), 0);
    uint8_t *b;
    size_t len;
    assert_int_equal(tws_recv_ipc(fd, &b, &len, 10000), 0);
    char want[128];
    snprintf(want, sizeof want, "frames=%zu bytes=%zu hash=%llu", s.frames, s.frames * s.size,
             (unsigned long long)s.hash);
    b[len] = '\0';
    assert_string_equal((char *)b, want);
    free(b);
    tws_close(fd);
}

static void test_close_from_client(void **state)
{
    (void)state;
    int fd = open_ws();
    assert_int_equal(tws_send_ipc(fd, "hello", 5), 0);
    expect_ipc(fd, "hello", 5);
    int closed = tdbl_closed();
    uint8_t code[2] = {0x03, 0xe8};
    assert_int_equal(tws_send(fd, TWS_CLOSE, code, 2), 0);
    uint8_t *p;
    size_t n;
    assert_int_equal(tws_recv(fd, &p, &n, 5000), TWS_CLOSE); /* the server answers the close */
    free(p);
    assert_true(tdbl_wait_count(tdbl_closed, closed + 1, 5000));
    char why[160];
    tdbl_last_close_reason(why, sizeof why);
    assert_non_null(strstr(why, "peer closed"));
    tws_close(fd);
}

static void test_close_from_gateway(void **state)
{
    (void)state;
    int fd = open_ws();
    assert_int_equal(tws_send_ipc(fd, "before", 6), 0);
    expect_ipc(fd, "before", 6);
    assert_int_equal(tws_send_ipc(fd, "!close", 6), 0);
    uint8_t *p;
    size_t n;
    assert_int_equal(tws_recv(fd, &p, &n, 5000), TWS_CLOSE);
    assert_int_equal(tws_close_code(p, n), 1000);
    free(p);
    tws_close(fd);
}

static void test_text_message_closes(void **state)
{
    (void)state;
    int fd = open_ws();
    assert_int_equal(tws_send(fd, TWS_TEXT, "hello", 5), 0);
    uint8_t *p;
    size_t n;
    assert_int_equal(tws_recv(fd, &p, &n, 5000), TWS_CLOSE);
    assert_int_equal(tws_close_code(p, n), 1003);
    assert_true(n > 2 && memmem(p + 2, n - 2, "text", 4) != NULL);
    free(p);
    tws_close(fd);
}

static void test_oversize_message_closes(void **state)
{
    (void)state;
    int fd = open_ws();
    size_t big = 300 * 1024; /* max_message is 256 KiB here */
    uint8_t *m = calloc(1, big);
    assert_int_equal(tws_send(fd, TWS_BINARY, m, big), 0);
    free(m);
    uint8_t *p;
    size_t n;
    int op;
    /* the gateway side may first complain about the frame size: skip data */
    while ((op = tws_recv(fd, &p, &n, 5000)) == TWS_BINARY)
        free(p);
    assert_int_equal(op, TWS_CLOSE);
    assert_int_equal(tws_close_code(p, n), 1009);
    free(p);
    tws_close(fd);
}

/* ------------------------------------------------ messages vs frames, both directions */

/* A stream of IPC frames of mixed sizes (many small, some large), frame i's body byte k being
 * a function of (i, k) and never starting with '!' (a command for the peer). */
struct frame_stream {
    uint8_t *bytes;
    size_t len;
    size_t *starts; /* offset of each frame's header */
    size_t n;
};

static uint32_t rnd(uint64_t *st)
{
    *st = *st * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(*st >> 33);
}

static void make_stream(struct frame_stream *fs, size_t total, uint64_t seed)
{
    fs->bytes = malloc(total + 131072);
    fs->starts = malloc(sizeof *fs->starts * (total / 8 + 16));
    fs->len = fs->n = 0;
    uint64_t st = seed;
    while (fs->len < total) {
        size_t body = rnd(&st) % 10 < 7 ? 1 + rnd(&st) % 2000 : 2000 + rnd(&st) % 98000;
        uint8_t *p = fs->bytes + fs->len;
        p[0] = (uint8_t)body;
        p[1] = (uint8_t)(body >> 8);
        p[2] = (uint8_t)(body >> 16);
        p[3] = (uint8_t)(body >> 24);
        for (size_t k = 0; k < body; k++)
            p[4 + k] = (uint8_t)((fs->n * 31 + k * 7 + 1) & 0xff);
        p[4] = 'D';
        fs->starts[fs->n++] = fs->len;
        fs->len += 4 + body;
    }
}

static void free_stream(struct frame_stream *fs)
{
    free(fs->bytes);
    free(fs->starts);
}

struct msg_sender {
    int fd;
    const struct frame_stream *fs;
    uint64_t seed;
    size_t max_msg;
    int rc;
};

/* Sends the stream as WebSocket messages of random sizes (1 byte .. max_msg), one in four as
 * a message of several WebSocket frames (continuations): message boundaries fall anywhere. */
static void *msg_sender_thread(void *arg)
{
    struct msg_sender *m = arg;
    uint64_t st = m->seed;
    size_t off = 0;
    while (off < m->fs->len && m->rc == 0) {
        size_t n = 1 + rnd(&st) % (rnd(&st) % 2 ? 64 : m->max_msg);
        if (n > m->fs->len - off)
            n = m->fs->len - off;
        const uint8_t *p = m->fs->bytes + off;
        if (n >= 3 && rnd(&st) % 4 == 0) {
            size_t a = n / 3, b = n / 3;
            if (tws_send_frame(m->fd, TWS_BINARY, 0, p, a) != 0 || tws_send_frame(m->fd, TWS_CONT, 0, p + a, b) != 0 ||
                tws_send_frame(m->fd, TWS_CONT, 1, p + a + b, n - a - b) != 0)
                m->rc = -1;
        } else if (tws_send(m->fd, TWS_BINARY, p, n) != 0) {
            m->rc = -1;
        }
        off += n;
    }
    return NULL;
}

/* Times the gateway stopped sending a client more because it did not keep up: the lws link's
 * pauses, or the native filter's socket share filling. */
static unsigned long long to_client_pauses(void)
{
    struct tg_ws_link_stats st;
    tg_ws_link_stats(&st);
    struct tg_ws_server_stats ns;
    tg_ws_server_stats(&ns);
    return g_lws ? st.out_pauses : ns.out_full;
}

static unsigned long long g_pauses_before;
static int out_paused(void) { return to_client_pauses() > g_pauses_before; }

static void check_link_bounds(void)
{
    if (!g_lws) {
        /* native: frames the socket has not taken stay under the filter's share plus one message;
         * the rest waits in the tg_conn, under the gateway's own limits */
        struct tg_ws_server_stats ns;
        tg_ws_server_stats(&ns);
        if (ns.staged_peak > TG_WS_SERVER_STAGE_HIGH + TG_WS_LINK_MSG_MAX + TG_WS_FRAME_HEADER_MAX)
            fail_msg("a native WebSocket staged %zu bytes (bound %u)", ns.staged_peak,
                     TG_WS_SERVER_STAGE_HIGH + TG_WS_LINK_MSG_MAX + TG_WS_FRAME_HEADER_MAX);
        return;
    }
    struct tg_ws_link_stats st;
    tg_ws_link_stats(&st);
    if (st.out_queue_peak > TG_WS_LINK_OUT_HIGH + TG_WS_LINK_MSG_MAX)
        fail_msg("a link queued %zu bytes outbound (bound %u)", st.out_queue_peak,
                 TG_WS_LINK_OUT_HIGH + TG_WS_LINK_MSG_MAX);
    if (st.in_queue_peak > TG_WS_LINK_IN_HIGH + TG_WS_LINK_RX_BUFFER)
        fail_msg("a link queued %zu bytes inbound (bound %u)", st.in_queue_peak,
                 TG_WS_LINK_IN_HIGH + TG_WS_LINK_RX_BUFFER);
}

/* Client → gateway: frames split across messages and joined in messages at random; the peer
 * echoes each frame. Gateway → client: the client reads nothing until the link's queue is full,
 * so the gateway's messages are large and cut the echoed stream where its reads fell. Every byte
 * arrives, in order, both ways. */
static void test_stream_messages_split_and_join_frames(void **state)
{
    (void)state;
    tg_ws_link_stats_reset_peaks();
    tg_ws_server_stats_reset_peaks();
    g_pauses_before = to_client_pauses();
    int fd = open_ws();
    int small = 16 * 1024;
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
    struct frame_stream fs;
    /* more than can wait before the link's queue is full: the client's small receive buffer,
     * the gateway's TCP send buffer (tcp_wmem's maximum, 4 MiB by default) and the 1 MiB queue */
    make_stream(&fs, 12u << 20, 42);
    static struct msg_sender m; /* static: a failed assertion leaves the thread running */
    m = (struct msg_sender){.fd = fd, .fs = &fs, .seed = 7, .max_msg = 200 * 1024};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, msg_sender_thread, &m), 0);
    /* the echo piles up until the link stops reading its socket (real backpressure) */
    assert_true(tdbl_wait_count(out_paused, 1, 30000));
    int big = 4 << 20;
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &big, sizeof big);

    uint8_t *got = malloc(fs.len);
    size_t off = 0, fi = 0, largest = 0, joined = 0, split = 0;
    while (off < fs.len) {
        uint8_t *p;
        size_t n;
        int op = tws_recv(fd, &p, &n, 10000);
        if (op != TWS_BINARY)
            fail_msg("got opcode %d after %zu of %zu bytes", op, off, fs.len);
        if (n > fs.len - off)
            fail_msg("%zu bytes more than were sent", n - (fs.len - off));
        memcpy(got + off, p, n);
        free(p);
        /* frame starts inside this message, and whether it ends inside a frame */
        size_t starts = 0;
        while (fi < fs.n && fs.starts[fi] < off + n) {
            if (fs.starts[fi] >= off)
                starts++;
            fi++;
        }
        if (starts >= 2)
            joined++;
        if (off + n < fs.len && (fi >= fs.n || fs.starts[fi] != off + n))
            split++;
        if (n > largest)
            largest = n;
        off += n;
    }
    pthread_join(t, NULL);
    assert_int_equal(m.rc, 0);
    for (size_t k = 0; k < fs.len; k++)
        if (got[k] != fs.bytes[k])
            fail_msg("byte %zu of the echoed stream differs", k);
    free(got);
    print_message("stream: %zu frames, %zu bytes; gateway messages: largest %zu, %zu joining frames, %zu "
                  "ending inside one\n",
                  fs.n, fs.len, largest, joined, split);
    assert_true(largest > TG_WS_CLIENT_MSG_MAX); /* larger than one 64 KiB read */
    assert_true(joined > 0);
    assert_true(split > 0);
    check_link_bounds();
    free_stream(&fs);
    tws_close(fd);
}

/* A client that does not read: its link stops reading the socket at the high watermark (the
 * source behind it waits), another client meanwhile is served as usual, and the slow one then
 * gets every byte in order. */
static void test_slow_reader_bounded_others_served(void **state)
{
    (void)state;
    tg_ws_link_stats_reset_peaks();
    tg_ws_server_stats_reset_peaks();
    g_pauses_before = to_client_pauses();
    int slow = open_ws();
    int small = 16 * 1024;
    setsockopt(slow, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
    const unsigned frames = 512, size = 65536; /* 32 MiB */
    char cmd[64];
    int n = snprintf(cmd, sizeof cmd, "!source:%u:%u", frames, size);
    assert_int_equal(tws_send_ipc(slow, cmd, (size_t)n), 0);
    assert_true(tdbl_wait_count(out_paused, 1, 30000));
    check_link_bounds();

    int other = open_ws();
    for (int i = 0; i < 20; i++) {
        char msg[64];
        int k = snprintf(msg, sizeof msg, "the other client, call %d", i);
        assert_int_equal(tws_send_ipc(other, msg, (size_t)k), 0);
        expect_ipc(other, msg, (size_t)k);
    }
    tws_close(other);
    check_link_bounds(); /* still bounded: the slow client has read nothing */

    int big = 4 << 20;
    setsockopt(slow, SOL_SOCKET, SO_RCVBUF, &big, sizeof big);
    uint64_t off = 0;
    for (unsigned i = 0; i < frames; i++) {
        uint8_t *b;
        size_t len;
        assert_int_equal(tws_recv_ipc(slow, &b, &len, 10000), 0);
        assert_int_equal(len, size);
        for (size_t k = 0; k < len; k++)
            if (b[k] != (uint8_t)(((off + k) * 7 + 3) & 0xff))
                fail_msg("byte %llu differs", (unsigned long long)(off + k));
        off += len;
        free(b);
    }
    check_link_bounds();
    tws_close(slow);
}

/* The gateway's end of the client's connection: the descriptor of this process whose peer is the
 * client's own address (the gateway runs in this process), or -1. */
static int gateway_end_of(int client)
{
    struct sockaddr_storage mine, theirs, a;
    socklen_t ml = sizeof mine, tl = sizeof theirs, al;
    if (getsockname(client, (struct sockaddr *)&mine, &ml) != 0 ||
        getpeername(client, (struct sockaddr *)&theirs, &tl) != 0)
        return -1;
    for (int fd = 3; fd < 4096; fd++) {
        al = sizeof a;
        if (fd == client || getpeername(fd, (struct sockaddr *)&a, &al) != 0 || al != ml || memcmp(&a, &mine, ml) != 0)
            continue;
        al = sizeof a;
        if (getsockname(fd, (struct sockaddr *)&a, &al) == 0 && al == tl && memcmp(&a, &theirs, tl) == 0)
            return fd;
    }
    return -1;
}

/* A WebSocket with a small receive window whose gateway end gets a send buffer smaller than one
 * message (so the kernel takes the gateway's messages in part), after asking the test peer for a
 * source of `frames` frames of `size` bytes. */
static int open_ws_sending_in_part(unsigned frames, unsigned size)
{
    int fd = open_ws();
    int small = 16 * 1024;
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
    int gw_end = gateway_end_of(fd);
    assert_true(gw_end >= 0);
    assert_int_equal(setsockopt(gw_end, SOL_SOCKET, SO_SNDBUF, &small, sizeof small), 0);
    char cmd[64];
    int n = snprintf(cmd, sizeof cmd, "!source:%u:%u", frames, size);
    assert_int_equal(tws_send_ipc(fd, cmd, (size_t)n), 0);
    return fd;
}

/* A client with a small receive window and pings in flight: the gateway's messages leave its
 * buffers straight for the socket, whose send buffer is made smaller than one message so the
 * kernel takes many of them only in part (their ends wait in lws), and lws' pongs must still come
 * between whole messages, never inside one. Every byte arrives in order and the last ping gets
 * its pong. */
static void test_pings_between_partly_sent_messages(void **state)
{
    (void)state;
    struct tg_ws_link_stats st0, st1;
    tg_ws_link_stats(&st0);
    unsigned long long full0 = to_client_pauses();
    const unsigned frames = 256, size = 65536; /* 16 MiB */
    int fd = open_ws_sending_in_part(frames, size);

    const size_t want = (size_t)frames * (size + 4);
    uint8_t *stream = malloc(want);
    size_t off = 0;
    /* a pong may answer only the latest of several pings (RFC 6455 5.5.3): pongs come in order,
     * and the last one answers the last ping */
    unsigned pings = 0, pongs = 0;
    long last_pong = -1;
    while (off < want || last_pong + 1 < (long)pings) {
        if (off < want && off / (512u * 1024u) >= pings) { /* a ping every 512 KiB received */
            char ping[16];
            int k = snprintf(ping, sizeof ping, "p%u", pings++);
            assert_int_equal(tws_send_frame(fd, TWS_PING, 1, ping, (size_t)k), 0);
        }
        uint8_t *p;
        size_t len;
        int op = tws_recv(fd, &p, &len, 10000);
        if (op == TWS_PONG) {
            char text[16];
            unsigned idx;
            char extra;
            if (len == 0 || len >= sizeof text)
                fail_msg("a pong of %zu bytes", len);
            memcpy(text, p, len);
            text[len] = '\0';
            if (sscanf(text, "p%u%c", &idx, &extra) != 1 || (long)idx <= last_pong || idx >= pings)
                fail_msg("pong \"%s\" after pong %ld, %u pings sent", text, last_pong, pings);
            last_pong = idx;
            pongs++;
        } else if (op == TWS_BINARY) {
            if (len > want - off)
                fail_msg("%zu bytes more than were sent", len - (want - off));
            memcpy(stream + off, p, len);
            off += len;
        } else {
            fail_msg("got opcode %d after %zu of %zu bytes, %u pongs to %u pings", op, off, want, pongs, pings);
        }
        free(p);
    }
    for (size_t f = 0; f < frames; f++) {
        const uint8_t *h = stream + f * (size + 4);
        assert_int_equal(h[0] | h[1] << 8 | h[2] << 16 | (uint32_t)h[3] << 24, size);
        for (size_t k = 0; k < size; k++)
            if (h[4 + k] != (uint8_t)(((f * size + k) * 7 + 3) & 0xff))
                fail_msg("byte %zu of frame %zu differs", k, f);
    }
    free(stream);
    tg_ws_link_stats(&st1);
    print_message("%u pings, %u pongs; %llu messages the socket took in part (%llu bytes left to lws)\n", pings,
                  pongs, st1.out_tails - st0.out_tails, st1.out_tail_bytes - st0.out_tail_bytes);
    assert_true(pings >= 30);
    /* the path under test was taken: lws sent the ends of messages the socket took in part, or the
     * native filter's share of the socket filled (pings came while messages waited) */
    if (g_lws)
        assert_true(st1.out_tails > st0.out_tails);
    else
        assert_true(to_client_pauses() > full0);
    tws_close(fd);
}

static int no_links(void)
{
    struct tg_ws_server_stats ns;
    tg_ws_server_stats(&ns);
    return tg_ws_link_count() == 0 && ns.open == 0;
}

/* lws: a message's tail waits in lws; native: frames wait in the filter's share of the socket. */
static unsigned long long g_tails_before;
static int tail_sent(void)
{
    struct tg_ws_link_stats st;
    tg_ws_link_stats(&st);
    return g_lws ? st.out_tails > g_tails_before : to_client_pauses() > g_tails_before;
}

/* A client that vanishes (a reset, no WebSocket close) while the gateway streams to it and lws
 * holds the unsent tail of a message written straight from the gateway's buffers: that one
 * WebSocket and its gateway connection close, nothing leaks (ASan), another client is served. */
static void test_reader_vanishes_with_a_tail_pending(void **state)
{
    (void)state;
    struct tg_ws_link_stats st0;
    tg_ws_link_stats(&st0);
    g_tails_before = g_lws ? st0.out_tails : to_client_pauses();
    int base_closed = tdbl_closed();
    int fd = open_ws_sending_in_part(256, 65536);
    /* the client reads nothing: the first message the socket takes in part leaves its tail in lws,
     * where it stays */
    assert_true(tdbl_wait_count(tail_sent, 1, 30000));
    struct linger lg = {1, 0};
    assert_int_equal(setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg), 0);
    tws_close(fd); /* a reset */
    assert_true(tdbl_wait_count(tdbl_closed, base_closed + 1, 10000));
    assert_true(tdbl_wait_count(no_links, 1, 10000));

    int other = open_ws();
    const char msg[] = "served after the reset";
    assert_int_equal(tws_send_ipc(other, msg, sizeof msg - 1), 0);
    expect_ipc(other, msg, sizeof msg - 1);
    tws_close(other);
    assert_true(tdbl_wait_count(no_links, 1, 10000));
}

/* A client that sends its first frame with the upgrade request, before the 101 (RFC 6455 4.1 says
 * it must wait; some do not): lws reads and parses that frame with the request, so a native
 * WebSocket stays on the lws thread (nothing it read is lost) and the frame reaches the gateway. */
static void test_frame_before_the_answer_is_served(void **state)
{
    (void)state;
    const char body[] = "sent before the answer";
    uint8_t early[64];
    size_t n = sizeof body - 1 + 4, el = 0;
    early[el++] = 0x82; /* FIN, binary */
    early[el++] = (uint8_t)(0x80 | n);
    static const uint8_t mask[4] = {0x11, 0x22, 0x33, 0x44};
    memcpy(early + el, mask, 4);
    el += 4;
    uint8_t ipc[64] = {(uint8_t)(sizeof body - 1), 0, 0, 0};
    memcpy(ipc + 4, body, sizeof body - 1);
    for (size_t i = 0; i < n; i++)
        early[el++] = ipc[i] ^ mask[i & 3];
    char resp[2048];
    int fd;
    assert_int_equal(tg_test_stderr_begin(), 0);
    assert_int_equal(tws_open_early(g_port, "/traced", early, el, &fd, resp, sizeof resp), 101);
    expect_ipc(fd, body, sizeof body - 1); /* the peer echoes it */
    assert_int_equal(tws_send_ipc(fd, "and after", 9), 0);
    expect_ipc(fd, "and after", 9);
    struct tg_ws_server_stats ns;
    tg_ws_server_stats(&ns);
    assert_int_equal(ns.open, 0);
    assert_int_equal(tg_ws_link_count(), 1);
    if (!g_lws)
        assert_true(tg_test_stderr_wait_for("before the upgrade's answer: it stays on the lws thread", 5000));
    free(tg_test_stderr_end());
    tws_close(fd);
}

/* Noise right behind the upgrade request: lws parses it as a frame and closes the WebSocket with
 * a protocol error; nothing is taken off the lws thread, nothing hangs, the next client is served. */
static void test_noise_before_the_answer_closes(void **state)
{
    (void)state;
    uint8_t noise[256];
    memset(noise, 0xff, sizeof noise); /* reserved bits set: no valid frame */
    char resp[2048];
    int fd;
    assert_int_equal(tws_open_early(g_port, "/traced", noise, sizeof noise, &fd, resp, sizeof resp), 101);
    uint8_t *p = NULL;
    size_t n;
    int op = tws_recv(fd, &p, &n, 10000);
    if (op == TWS_CLOSE)
        assert_int_equal(tws_close_code(p, n), 1002);
    else
        assert_int_equal(op, -1); /* or the end of the stream, not a wait */
    free(p);
    tws_close(fd);
    assert_true(tdbl_wait_count(no_links, 1, 10000));
    int other = open_ws();
    assert_int_equal(tws_send_ipc(other, "next", 4), 0);
    expect_ipc(other, "next", 4);
    tws_close(other);
}

static void test_many_connections(void **state)
{
    (void)state;
    enum { N = 100 };
    int fds[N];
    int base_closed = tdbl_closed();
    int base_acc = tdbl_accepted();
    for (int i = 0; i < N; i++)
        fds[i] = open_ws();
    for (int i = 0; i < N; i++) {
        char msg[32];
        int n = snprintf(msg, sizeof msg, "conn %d", i);
        assert_int_equal(tws_send_ipc(fds[i], msg, (size_t)n), 0);
    }
    for (int i = 0; i < N; i++) {
        char msg[32];
        int n = snprintf(msg, sizeof msg, "conn %d", i);
        expect_ipc(fds[i], msg, (size_t)n);
    }
    assert_true(tdbl_wait_count(tdbl_accepted, base_acc + N, 5000));
    for (int i = 0; i < N; i++)
        tws_close(fds[i]); /* TCP close without a WebSocket close */
    assert_true(tdbl_wait_count(tdbl_closed, base_closed + N, 10000));
    assert_true(tdbl_wait_count(no_links, 1, 5000));
    assert_int_equal(tg_ws_link_count(), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_bytes_both_ways, setup, teardown),
        cmocka_unit_test_setup_teardown(test_split_and_joined_frames, setup, teardown),
        cmocka_unit_test_setup_teardown(test_large_download_slow_reader, setup, teardown),
        cmocka_unit_test_setup_teardown(test_large_upload_backpressure, setup, teardown),
        cmocka_unit_test_setup_teardown(test_close_from_client, setup, teardown),
        cmocka_unit_test_setup_teardown(test_close_from_gateway, setup, teardown),
        cmocka_unit_test_setup_teardown(test_text_message_closes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_oversize_message_closes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_many_connections, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stream_messages_split_and_join_frames, setup, teardown),
        cmocka_unit_test_setup_teardown(test_slow_reader_bounded_others_served, setup, teardown),
        cmocka_unit_test_setup_teardown(test_pings_between_partly_sent_messages, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reader_vanishes_with_a_tail_pending, setup, teardown),
        cmocka_unit_test_setup_teardown(test_frame_before_the_answer_is_served, setup, teardown),
        cmocka_unit_test_setup_teardown(test_noise_before_the_answer_closes, setup, teardown),
    };
    g_lws = 0;
    int failed = cmocka_run_group_tests_name("native", tests, NULL, NULL);
    g_lws = 1;
    failed += cmocka_run_group_tests_name("lws", tests, NULL, NULL);
    return failed;
}
