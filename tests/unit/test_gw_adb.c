/* test_gw_adb.c: /adb pipes through a running front end (the gateway core stood in by test_gw_ws_double): text and
 * binary messages reach the ADB server byte for byte and its bytes come back as binary messages; close codes and
 * reasons (server done, server unreachable, unknown node); the router seam for other nodes; both directions paused,
 * not buffered without bound, when one side stops reading, and every byte delivered in order afterwards. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "gw_adb.h"
#include "gw_adb_target.h"
#include "gw_ws.h"
#include "net/ws_link.h"
#include "test_gw_ws_double.h"
#include "test_ws_rawclient.h"
#include "tg_test_util.h"

#define UI "https://ui.perfetto.dev"
/* what one pipe may hold: each direction up to its high watermark plus one read (16 KiB) */
#define BOUND (2 * (TG_GW_ADB_HIGH + 64 * 1024))

static struct tg_gw_ws *g_ws, *g_ws_dead; /* to the fake ADB server; to a port that refuses */
static int g_port, g_port_dead;
static int g_listen = -1, g_dead = -1; /* the fake ADB server; a bound socket that never listens */

/* ------------------------------------------------------------ the fake ADB server */

static int bound_socket(int do_listen, int *port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof a;
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) != 0 || (do_listen && listen(fd, 16) != 0) ||
        getsockname(fd, (struct sockaddr *)&a, &al) != 0)
        return -1;
    *port = ntohs(a.sin_port);
    return fd;
}

/* The gateway's connection to the fake server; rcvbuf > 0 makes its receive buffer small. */
static int srv_accept(int rcvbuf)
{
    struct pollfd p = {.fd = g_listen, .events = POLLIN};
    if (poll(&p, 1, tg_test_ms(5000)) != 1)
        return -1;
    int fd = accept(g_listen, NULL, NULL);
    if (fd >= 0 && rcvbuf > 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
    return fd;
}

static int read_exact(int fd, void *buf, size_t n)
{
    uint8_t *p = buf;
    while (n) {
        struct pollfd pf = {.fd = fd, .events = POLLIN};
        if (poll(&pf, 1, tg_test_ms(5000)) != 1)
            return -1;
        ssize_t r = read(fd, p, n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        p += r;
        n -= (size_t)r;
    }
    return 0;
}

static uint8_t pattern(uint64_t i) { return (uint8_t)((i * 7 + 3) & 0xff); }

/* ------------------------------------------------------------ the WebSocket side */

static int open_adb(int port, const char *path)
{
    char resp[2048];
    int fd = -1;
    int st = tws_open(port, path, UI, NULL, &fd, resp, sizeof resp);
    if (st != 101)
        fail_msg("upgrade of %s: %d %s", path, st, resp);
    return fd;
}

/* Takes n bytes from binary messages. more: the stream goes on, so the last message may hold
 * bytes past n (dropped); otherwise they are an error. */
static void recv_stream(int fd, uint8_t *out, size_t n, int more)
{
    size_t got = 0;
    while (got < n) {
        uint8_t *b;
        size_t len;
        int op = tws_recv(fd, &b, &len, 5000);
        if (op != TWS_BINARY && op != TWS_CONT)
            fail_msg("wanted binary data, got opcode %d after %zu of %zu bytes", op, got, n);
        if (got + len > n && !more)
            fail_msg("%zu bytes more than the %zu expected", got + len - n, n);
        size_t take = got + len > n ? n - got : len;
        memcpy(out + got, b, take);
        got += take;
        free(b);
    }
}

static void recv_bytes(int fd, uint8_t *out, size_t n) { recv_stream(fd, out, n, 0); }

/* The next frame is a close with this code and a reason containing `reason`. */
static void expect_close(int fd, int code, const char *reason)
{
    uint8_t *b;
    size_t len;
    int op = tws_recv(fd, &b, &len, 5000);
    if (op != TWS_CLOSE)
        fail_msg("wanted a close frame, got opcode %d", op);
    assert_int_equal(tws_close_code(b, len), code);
    char why[128] = "";
    if (len > 2)
        snprintf(why, sizeof why, "%.*s", (int)(len - 2), (const char *)b + 2);
    free(b);
    if (!strstr(why, reason))
        fail_msg("close reason \"%s\" lacks \"%s\"", why, reason);
}

static void stats(struct tg_gw_ws *ws, struct tg_gw_adb_stats *s) { tg_gw_adb_stats(tg_gw_ws_adb(ws), s); }

static int wait_pipes_gone(struct tg_gw_ws *ws)
{
    for (int i = 0; i < tg_test_ms(5000) / 10; i++) {
        struct tg_gw_adb_stats s;
        stats(ws, &s);
        if (s.pipes == 0)
            return 1;
        usleep(10000);
    }
    return 0;
}

/* ------------------------------------------------------------ setup */

static struct tg_gw_ws *start(struct event_base *base, int adb_port, int *port)
{
    *port = tg_test_free_tcp_port();
    char spec[64], err[256];
    snprintf(spec, sizeof spec, "127.0.0.1:%d", adb_port);
    struct tg_addr a;
    if (tg_addr_parse(spec, &a, err, sizeof err) != 0)
        return NULL;
    struct tg_gw_ws_config cfg = {
        .bind_host = "127.0.0.1",
        .port = *port,
        .local_roles = TG_GW_ROLE_ADMIN,
        .max_message = 256 * 1024,
        .adb_server = &a,
        .adb_server_text = spec,
        .node_name = "here",
    };
    struct tg_gw_ws *ws = tg_gw_ws_start(NULL, base, &cfg, err, sizeof err);
    if (!ws)
        fprintf(stderr, "tg_gw_ws_start: %s\n", err);
    return ws;
}

static int group_setup(void **state)
{
    (void)state;
    struct event_base *base = tdbl_start();
    int srv_port, dead_port;
    g_listen = bound_socket(1, &srv_port);
    g_dead = bound_socket(0, &dead_port); /* bound, never listening: connects are refused */
    if (g_listen < 0 || g_dead < 0)
        return -1;
    g_ws = start(base, srv_port, &g_port);
    g_ws_dead = start(base, dead_port, &g_port_dead);
    return g_ws && g_ws_dead && tg_gw_ws_adb(g_ws) ? 0 : -1;
}

static int group_teardown(void **state)
{
    (void)state;
    tg_gw_ws_stop(g_ws);
    tg_gw_ws_stop(g_ws_dead);
    tdbl_stop();
    close(g_listen);
    close(g_dead);
    return 0;
}

/* ------------------------------------------------------------ tests */

static void test_bytes_both_ways(void **state)
{
    (void)state;
    struct tg_gw_adb_stats before, after;
    stats(g_ws, &before);
    int fd = open_adb(g_port, "/adb");
    /* as the Perfetto UI: the request as a text message; then binary bytes */
    assert_int_equal(tws_send(fd, TWS_TEXT, "000chost:version", 16), 0);
    const uint8_t bin[] = {0, 1, 0x80, 0xff};
    assert_int_equal(tws_send(fd, TWS_BINARY, bin, sizeof bin), 0);
    int s = srv_accept(0);
    assert_true(s >= 0);
    uint8_t got[20];
    assert_int_equal(read_exact(s, got, sizeof got), 0);
    assert_memory_equal(got, "000chost:version", 16);
    assert_memory_equal(got + 16, bin, sizeof bin);

    assert_int_equal(write(s, "OKAY00040029", 12), 12);
    uint8_t back[12];
    recv_bytes(fd, back, sizeof back);
    assert_memory_equal(back, "OKAY00040029", 12);
    close(s); /* the server is done: the WebSocket closes normally */
    expect_close(fd, 1000, "connection closed");
    tws_close(fd);
    assert_true(wait_pipes_gone(g_ws));
    stats(g_ws, &after);
    assert_int_equal(after.pipes_total, before.pipes_total + 1);
    assert_int_equal(after.bytes_to_adb, before.bytes_to_adb + 20);
    assert_int_equal(after.bytes_to_client, before.bytes_to_client + 12);
    assert_int_equal(after.failed_total, before.failed_total);
    assert_int_equal(after.buffered, 0);
    assert_int_equal(tdbl_accepted(), 0); /* never an IPC client of the gateway core */
}

static void test_client_closes_first(void **state)
{
    (void)state;
    int fd = open_adb(g_port, "/adb");
    assert_int_equal(tws_send(fd, TWS_BINARY, "bye", 3), 0);
    int s = srv_accept(0);
    assert_true(s >= 0);
    uint8_t got[3];
    assert_int_equal(read_exact(s, got, 3), 0);
    tws_close(fd); /* no close frame: the TCP connection just goes */
    uint8_t c;
    struct pollfd pf = {.fd = s, .events = POLLIN};
    assert_int_equal(poll(&pf, 1, tg_test_ms(5000)), 1);
    assert_int_equal(read(s, &c, 1), 0); /* the ADB server's connection is closed too */
    close(s);
    assert_true(wait_pipes_gone(g_ws));
}

static void test_server_unreachable(void **state)
{
    (void)state;
    struct tg_gw_adb_stats before, after;
    stats(g_ws_dead, &before);
    int fd = open_adb(g_port_dead, "/adb");
    assert_int_equal(tws_send(fd, TWS_TEXT, "000chost:version", 16), 0);
    expect_close(fd, 1011, "not reachable: Connection refused");
    tws_close(fd);
    assert_true(wait_pipes_gone(g_ws_dead));
    stats(g_ws_dead, &after);
    assert_int_equal(after.failed_total, before.failed_total + 1);
}

static void test_nodes(void **state)
{
    (void)state;
    /* another node: no router, so a clear refusal */
    int fd = open_adb(g_port, "/adb/elsewhere");
    expect_close(fd, 1011, "no node elsewhere here");
    tws_close(fd);
    /* this node by name: the local ADB server */
    fd = open_adb(g_port, "/adb/here");
    assert_int_equal(tws_send(fd, TWS_BINARY, "local", 5), 0);
    int s = srv_accept(0);
    assert_true(s >= 0);
    uint8_t got[5];
    assert_int_equal(read_exact(s, got, 5), 0);
    assert_memory_equal(got, "local", 5);
    close(s);
    expect_close(fd, 1000, "");
    tws_close(fd);
    assert_true(wait_pipes_gone(g_ws));
}

/* ---- the seam links plug into ---- */
static int g_remote = -1; /* our end of what the router handed out */
static char g_routed_node[64], g_routed_principal[160];

static int test_router(void *ctx, const char *node, const struct tg_gw_client_info *who, char *err, size_t errlen)
{
    (void)ctx;
    if (strcmp(node, "lab1") != 0) {
        snprintf(err, errlen, "node %s is down", node);
        return -1;
    }
    int sv[2];
    if (tg_ws_link_socketpair(sv) != 0) {
        snprintf(err, errlen, "socketpair: %s", strerror(errno));
        return -1;
    }
    snprintf(g_routed_node, sizeof g_routed_node, "%s", node);
    snprintf(g_routed_principal, sizeof g_routed_principal, "%s", who->principal);
    g_remote = sv[1];
    return sv[0];
}

static void test_router_seam(void **state)
{
    (void)state;
    struct tg_gw_adb_target *t = tg_gw_adb_target_of(tg_gw_ws_adb(g_ws));
    tg_gw_adb_target_set_router(t, test_router, NULL); /* no pipe is opening now */
    int fd = open_adb(g_port, "/adb/lab1");
    assert_int_equal(tws_send(fd, TWS_TEXT, "000chost:devices", 16), 0);
    for (int i = 0; i < tg_test_ms(5000) / 10 && g_remote < 0; i++)
        usleep(10000);
    assert_true(g_remote >= 0);
    uint8_t got[16];
    assert_int_equal(read_exact(g_remote, got, 16), 0);
    assert_memory_equal(got, "000chost:devices", 16);
    assert_string_equal(g_routed_node, "lab1");
    assert_true(strncmp(g_routed_principal, "uid:", 4) == 0);
    assert_int_equal(write(g_remote, "OKAY0000", 8), 8);
    uint8_t back[8];
    recv_bytes(fd, back, 8);
    assert_memory_equal(back, "OKAY0000", 8);
    close(g_remote);
    g_remote = -1;
    expect_close(fd, 1000, "");
    tws_close(fd);
    /* the router's own refusal becomes the close reason */
    fd = open_adb(g_port, "/adb/lab2");
    expect_close(fd, 1011, "node lab2 is down");
    tws_close(fd);
    assert_true(wait_pipes_gone(g_ws));
    tg_gw_adb_target_set_router(t, NULL, NULL);
}

/* ---- flow control ---- */
/* A writer that never stops on its own: the pattern, until `stop` or a failed write (the test
 * shuts the socket down to end it), so no fixed amount has to outrun the kernel's buffers. */
struct pump {
    int fd;
    size_t chunk;
    int to_ws; /* 1: raw bytes to fd (the ADB server side); 0: WebSocket messages (the client) */
    atomic_int stop;
    atomic_size_t sent;
};

static void *pump_thread(void *arg)
{
    struct pump *p = arg;
    uint8_t *buf = malloc(p->chunk);
    for (size_t off = 0; buf && !atomic_load(&p->stop);) {
        for (size_t k = 0; k < p->chunk; k++)
            buf[k] = pattern(off + k);
        if (p->to_ws) {
            for (size_t w = 0; w < p->chunk;) {
                ssize_t r = send(p->fd, buf + w, p->chunk - w, MSG_NOSIGNAL);
                if (r < 0 && errno == EINTR)
                    continue;
                if (r <= 0)
                    goto out;
                w += (size_t)r;
            }
        } else if (tws_send(p->fd, TWS_BINARY, buf, p->chunk) != 0) {
            break;
        }
        off += p->chunk;
        atomic_store(&p->sent, off);
    }
out:
    free(buf);
    return NULL;
}

static int wait_paused(int dir_to_client, uint64_t before)
{
    for (int i = 0; i < tg_test_ms(10000) / 10; i++) {
        struct tg_gw_adb_stats s;
        stats(g_ws, &s);
        if ((dir_to_client ? s.paused_to_client : s.paused_to_adb) > before)
            return 1;
        usleep(10000);
    }
    return 0;
}

static void check_pattern(const uint8_t *b, size_t n, uint64_t off)
{
    for (size_t k = 0; k < n; k++)
        if (b[k] != pattern(off + k))
            fail_msg("byte %llu differs", (unsigned long long)(off + k));
}

static void check_bound(const char *when)
{
    struct tg_gw_adb_stats s;
    stats(g_ws, &s);
    if (s.buffered_max > BOUND)
        fail_msg("%s: the gateway held %llu bytes for one pipe (bound %u)", when, (unsigned long long)s.buffered_max,
                 (unsigned)BOUND);
}

#define READ_AFTER (8u << 20) /* read this much once paused: every byte, in order */

/* The client sends faster than the ADB server reads. */
static void test_slow_server_pauses_client(void **state)
{
    (void)state;
    struct tg_gw_adb_stats s0;
    stats(g_ws, &s0);
    int fd = open_adb(g_port, "/adb");
    static struct pump p; /* static: a failed assertion leaves the thread running */
    p = (struct pump){.fd = fd, .chunk = 64 * 1024};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, pump_thread, &p), 0);
    int s = srv_accept(16 * 1024); /* ... and does not read until the gateway paused the client */
    assert_true(s >= 0);
    assert_true(wait_paused(0, s0.paused_to_adb));
    check_bound("paused");
    /* now read, in order (a window below one loopback segment would crawl) */
    int big = 4 << 20;
    setsockopt(s, SOL_SOCKET, SO_RCVBUF, &big, sizeof big);
    uint8_t *buf = malloc(64 * 1024);
    for (size_t off = 0; off < READ_AFTER; off += 64 * 1024) {
        assert_int_equal(read_exact(s, buf, 64 * 1024), 0);
        check_pattern(buf, 64 * 1024, off);
    }
    free(buf);
    atomic_store(&p.stop, 1);
    shutdown(fd, SHUT_RDWR); /* ends a send blocked on full buffers */
    pthread_join(th, NULL);
    assert_true(atomic_load(&p.sent) >= READ_AFTER);
    tws_close(fd);
    close(s);
    assert_true(wait_pipes_gone(g_ws));
    check_bound("afterwards");
}

/* The ADB server streams faster than the client reads. */
static void test_slow_client_pauses_server(void **state)
{
    (void)state;
    struct tg_gw_adb_stats s0;
    stats(g_ws, &s0);
    int fd = open_adb(g_port, "/adb");
    int small = 16 * 1024;
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
    assert_int_equal(tws_send(fd, TWS_TEXT, "000ehost:tg-stream", 18), 0);
    int s = srv_accept(0);
    assert_true(s >= 0);
    uint8_t req[18];
    assert_int_equal(read_exact(s, req, sizeof req), 0);
    static struct pump p;
    p = (struct pump){.fd = s, .chunk = 256 * 1024, .to_ws = 1};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, pump_thread, &p), 0);
    assert_true(wait_paused(1, s0.paused_to_client)); /* the client reads nothing meanwhile */
    check_bound("paused");
    int big = 4 << 20;
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &big, sizeof big);
    uint8_t *buf = malloc(READ_AFTER);
    recv_stream(fd, buf, READ_AFTER, 1);
    check_pattern(buf, READ_AFTER, 0);
    free(buf);
    atomic_store(&p.stop, 1);
    shutdown(s, SHUT_RDWR);
    pthread_join(th, NULL);
    close(s);
    tws_close(fd);
    assert_true(wait_pipes_gone(g_ws));
    check_bound("afterwards");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bytes_both_ways),
        cmocka_unit_test(test_client_closes_first),
        cmocka_unit_test(test_server_unreachable),
        cmocka_unit_test(test_nodes),
        cmocka_unit_test(test_router_seam),
        cmocka_unit_test(test_slow_server_pauses_client),
        cmocka_unit_test(test_slow_client_pauses_server),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
