/* test_gw_ws_guard.c: limits before authentication on the HTTP/WebSocket port: the pending-connection
 * table on its own (caps, per-source counts, deadline order), then attacks on a running front end: a
 * byte-a-second dribbler, a kept-alive connection that dribbles its next request, N+1 half-open
 * clients, and a client that stops reading a response; each is cut or refused, counted and logged,
 * and a legitimate client still gets through afterwards. Out of file descriptors, the front end
 * pauses between failed accepts (lws retried its readable listener at once: a busy loop that
 * logged ~80,000 lines a second) and serves the waiting client once descriptors are back. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "gw_ws.h"
#include "gw_ws_pending.h"
#include "test_gw_ws_double.h"
#include "test_ws_rawclient.h"
#include "tg_test_util.h"

/* ------------------------------------------------------------ the table */

static void test_pending_caps(void **state)
{
    (void)state;
    struct tg_ws_pending_limits l = {.max_total = 4, .max_per_source = 2, .timeout_us = 1000};
    struct tg_ws_pending *p = tg_ws_pending_new(&l);
    assert_non_null(p);
    int k[8];
    assert_int_equal(tg_ws_pending_add(p, &k[0], "10.0.0.1", 0, 100), TG_WS_ADMIT_OK);
    assert_int_equal(tg_ws_pending_add(p, &k[1], "10.0.0.1", 0, 110), TG_WS_ADMIT_OK);
    /* a third from the same address: its own cap */
    assert_int_equal(tg_ws_pending_check(p, "10.0.0.1", 0), TG_WS_ADMIT_SOURCE);
    assert_int_equal(tg_ws_pending_add(p, &k[2], "10.0.0.1", 0, 120), TG_WS_ADMIT_SOURCE);
    assert_int_equal(tg_ws_pending_source_count(p, "10.0.0.1"), 2);
    /* loopback clients have no per-source cap (and are not counted per source) */
    assert_int_equal(tg_ws_pending_add(p, &k[3], "127.0.0.1", 1, 130), TG_WS_ADMIT_OK);
    assert_int_equal(tg_ws_pending_source_count(p, "127.0.0.1"), 0);
    assert_int_equal(tg_ws_pending_add(p, &k[4], "10.0.0.2", 0, 140), TG_WS_ADMIT_OK);
    /* the total cap, whoever asks */
    assert_int_equal(tg_ws_pending_count(p), 4);
    assert_int_equal(tg_ws_pending_check(p, "10.0.0.9", 0), TG_WS_ADMIT_TOTAL);
    assert_int_equal(tg_ws_pending_check(p, "127.0.0.1", 1), TG_WS_ADMIT_TOTAL);
    /* one leaves: room again, and its source count drops */
    assert_int_equal(tg_ws_pending_remove(p, &k[0]), 1);
    assert_int_equal(tg_ws_pending_remove(p, &k[0]), 0);
    assert_int_equal(tg_ws_pending_source_count(p, "10.0.0.1"), 1);
    assert_int_equal(tg_ws_pending_add(p, &k[2], "10.0.0.1", 0, 150), TG_WS_ADMIT_OK);
    tg_ws_pending_free(p);
}

static void test_pending_deadlines(void **state)
{
    (void)state;
    struct tg_ws_pending_limits l = {.timeout_us = 1000};
    struct tg_ws_pending *p = tg_ws_pending_new(&l);
    int a, b, c;
    assert_int_equal(tg_ws_pending_next_deadline(p), 0);
    tg_ws_pending_add(p, &a, "10.0.0.1", 0, 0);
    tg_ws_pending_add(p, &b, "10.0.0.2", 0, 100);
    tg_ws_pending_add(p, &c, "10.0.0.3", 0, 200);
    assert_int_equal(tg_ws_pending_next_deadline(p), 1000);
    /* nothing expires early */
    assert_null(tg_ws_pending_pop_expired(p, 999, NULL, NULL, 0));
    /* a's request completed: its response phase starts a new deadline and it goes last */
    assert_int_equal(tg_ws_pending_rearm(p, &a, TG_WS_PENDING_RESPONSE, 500), 0);
    assert_int_equal(tg_ws_pending_next_deadline(p), 1100);
    enum tg_ws_pending_phase ph;
    char src[64];
    assert_ptr_equal(tg_ws_pending_pop_expired(p, 1250, &ph, src, sizeof src), &b);
    assert_int_equal(ph, TG_WS_PENDING_REQUEST);
    assert_string_equal(src, "10.0.0.2");
    assert_ptr_equal(tg_ws_pending_pop_expired(p, 1250, &ph, src, sizeof src), &c);
    assert_null(tg_ws_pending_pop_expired(p, 1250, &ph, src, sizeof src));
    assert_ptr_equal(tg_ws_pending_pop_expired(p, 1500, &ph, src, sizeof src), &a);
    assert_int_equal(ph, TG_WS_PENDING_RESPONSE);
    assert_int_equal(tg_ws_pending_count(p), 0);
    assert_int_equal(tg_ws_pending_source_count(p, "10.0.0.1"), 0);
    assert_int_equal(tg_ws_pending_rearm(p, &a, TG_WS_PENDING_REQUEST, 0), -1);
    /* many entries, removed in another order: counts stay exact */
    static int many[3000];
    for (int i = 0; i < 3000; i++)
        assert_int_equal(tg_ws_pending_add(p, &many[i], i % 2 ? "10.1.1.1" : "10.1.1.2", 0, (uint64_t)i), 0);
    for (int i = 2999; i >= 0; i -= 2)
        assert_int_equal(tg_ws_pending_remove(p, &many[i]), 1);
    assert_int_equal(tg_ws_pending_count(p), 1500);
    assert_int_equal(tg_ws_pending_source_count(p, "10.1.1.1"), 0);
    assert_int_equal(tg_ws_pending_source_count(p, "10.1.1.2"), 1500);
    assert_ptr_equal(tg_ws_pending_pop_expired(p, UINT64_MAX / 2, NULL, NULL, 0), &many[0]);
    tg_ws_pending_free(p);
}

/* ------------------------------------------------------------ a running front end */

static struct tg_gw_ws *g_ws;
static int g_port;
static char g_root[256];
static char g_resp[65536];

static int start(uint32_t timeout_ms, uint32_t max_pending, const char *web_root)
{
    struct event_base *base = tdbl_start();
    g_port = tg_test_free_tcp_port();
    struct tg_gw_ws_config cfg = {
        .bind_host = "127.0.0.1",
        .port = g_port,
        .web_root = web_root,
        .handshake_timeout_ms = timeout_ms,
        .max_pending = max_pending,
        .max_pending_per_source = 1, /* loopback clients are exempt: must not matter here */
    };
    char err[256];
    g_ws = tg_gw_ws_start(NULL, base, &cfg, err, sizeof err);
    if (!g_ws)
        fprintf(stderr, "tg_gw_ws_start: %s\n", err);
    return g_ws ? 0 : -1;
}

static int setup_short(void **state)
{
    (void)state;
    return start(2500, 0, NULL);
}

static int setup_capped(void **state)
{
    (void)state;
    return start(60000, 4, NULL); /* the deadline never matters in this test */
}

static int setup_bigfile(void **state)
{
    (void)state;
    snprintf(g_root, sizeof g_root, "/tmp/tg-ws-guard-XXXXXX");
    if (!mkdtemp(g_root))
        return -1;
    char p[400];
    snprintf(p, sizeof p, "%s/big.bin", g_root);
    FILE *f = fopen(p, "w");
    if (!f)
        return -1;
    static char chunk[1 << 16];
    memset(chunk, 'z', sizeof chunk);
    for (int i = 0; i < 512; i++) /* 32 MiB: far more than the socket buffers hold */
        fwrite(chunk, 1, sizeof chunk, f);
    fclose(f);
    return start(2000, 0, g_root);
}

static int teardown(void **state)
{
    (void)state;
    tg_gw_ws_stop(g_ws);
    g_ws = NULL;
    tdbl_stop();
    if (g_root[0]) {
        char cmd[400];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_root);
        if (system(cmd) != 0)
            fprintf(stderr, "cannot remove %s\n", g_root);
        g_root[0] = '\0';
    }
    return 0;
}

static uint64_t now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000u + (uint64_t)t.tv_nsec / 1000000u;
}

/* Whether the server closed fd: waits up to ms for EOF or a reset (data is read and dropped). */
static int closed_within(int fd, int ms)
{
    uint64_t end = now_ms() + (uint64_t)ms;
    char buf[4096];
    for (;;) {
        uint64_t t = now_ms();
        if (t >= end)
            return 0;
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, (int)(end - t)) <= 0)
            continue;
        ssize_t n = recv(fd, buf, sizeof buf, 0);
        if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN))
            return 1;
    }
}

static size_t pending_now(void) { return tg_gw_ws_http_pending(g_ws); }

static int wait_pending(size_t want, int ms)
{
    for (int waited = 0; waited <= ms; waited += 5) {
        if (pending_now() == want)
            return 1;
        usleep(5000);
    }
    return pending_now() == want;
}

static int send_str(int fd, const char *s)
{
    return send(fd, s, strlen(s), MSG_NOSIGNAL) == (ssize_t)strlen(s) ? 0 : -1;
}

/* Dribbles a never-ending request one byte every interval_ms; returns the ms until the server
 * closed the connection, or -1 if it was still open after limit_ms. */
static int dribble_until_cut(int fd, int interval_ms, int limit_ms, uint64_t t0)
{
    static const char req[] = "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Padding: "
                               "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    for (size_t i = 0; i < sizeof req - 1; i++) {
        if (send(fd, &req[i], 1, MSG_NOSIGNAL) != 1 || closed_within(fd, interval_ms))
            return (int)(now_ms() - t0);
        if ((int)(now_ms() - t0) > limit_ms)
            return -1;
    }
    fail_msg("the dribbler ran out of request bytes before the deadline");
    return -1;
}

static void test_dribbler_cut_at_deadline(void **state)
{
    (void)state;
    assert_int_equal(tg_test_stderr_begin(), 0);
    uint64_t t0 = now_ms();
    int fd = tws_connect(g_port);
    assert_true(fd >= 0);
    /* one byte a second: a deadline that each byte pushed back would never come */
    int cut = dribble_until_cut(fd, 1000, 20000, t0);
    close(fd);
    int logged = tg_test_stderr_wait_for("closed an HTTP connection from 127.0.0.1: no complete request", 5000);
    char *log = tg_test_stderr_end();
    free(log);
    assert_true(cut >= 0);
    assert_true(cut >= 2500 - 50); /* not before the deadline ... */
    assert_true(cut < 2500 + 4000); /* ... and at it, not after some later reset (generous for a busy machine) */
    assert_true(logged);
    assert_int_equal(tdbl_reason_count("http_handshake_timeout"), 1);
    assert_true(wait_pending(0, 5000));
    /* a legitimate client is served */
    assert_int_equal(tws_http(g_port, "GET", "/healthz", NULL, g_resp, sizeof g_resp), 200);
    assert_int_equal(tdbl_reason_count("http_handshake_timeout"), 1);
}

static void test_keepalive_next_request_has_deadline(void **state)
{
    (void)state;
    int fd = tws_connect(g_port);
    assert_true(fd >= 0);
    assert_int_equal(send_str(fd, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"), 0);
    /* the answer comes and the connection stays open for the next request */
    char buf[1024] = "";
    size_t n = 0;
    uint64_t end = now_ms() + 5000;
    while (!strstr(buf, "\r\n\r\nok\n") && now_ms() < end) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 100) > 0) {
            ssize_t r = recv(fd, buf + n, sizeof buf - 1 - n, 0);
            assert_true(r > 0);
            n += (size_t)r;
            buf[n] = '\0';
        }
    }
    assert_non_null(strstr(buf, "HTTP/1.1 200"));
    uint64_t t0 = now_ms();
    int cut = dribble_until_cut(fd, 500, 20000, t0);
    close(fd);
    /* lws's own keep-alive idle timeout (5 s) may close it first when no byte comes; with bytes
     * flowing, only our deadline (2.5 s after the response) can */
    assert_true(cut >= 0);
    assert_true(cut < 2500 + 4000);
    assert_int_equal(tdbl_reason_count("http_handshake_timeout"), 1);
}

static void test_half_open_cap(void **state)
{
    (void)state;
    assert_int_equal(tg_test_stderr_begin(), 0);
    int fds[4];
    for (int i = 0; i < 4; i++) {
        fds[i] = tws_connect(g_port);
        assert_true(fds[i] >= 0);
        assert_int_equal(send_str(fds[i], "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n"), 0); /* never finished */
    }
    assert_true(wait_pending(4, 5000));
    /* the fifth: accepted by the kernel, closed at once by the server, before reading anything */
    int extra = tws_connect(g_port);
    assert_true(extra >= 0);
    assert_true(closed_within(extra, 5000));
    close(extra);
    assert_int_equal(tdbl_reason_count("http_max_pending"), 1);
    /* a legitimate request meanwhile is refused too (no slot) */
    assert_int_equal(tws_http(g_port, "GET", "/healthz", NULL, g_resp, sizeof g_resp), -1);
    assert_int_equal(tdbl_reason_count("http_max_pending"), 2);
    assert_true(tg_test_stderr_wait_for("too many connections still in their HTTP request", 5000));
    free(tg_test_stderr_end());
    /* the half-open clients give up: their slots come back */
    for (int i = 0; i < 4; i++)
        close(fds[i]);
    assert_true(wait_pending(0, 5000));
    assert_int_equal(tws_http(g_port, "GET", "/healthz", NULL, g_resp, sizeof g_resp), 200);
    /* WebSockets leave the table: four open ones do not block HTTP */
    int ws[4];
    for (int i = 0; i < 4; i++)
        assert_int_equal(tws_open(g_port, "/traced", NULL, NULL, &ws[i], g_resp, sizeof g_resp), 101);
    assert_true(wait_pending(0, 5000));
    assert_int_equal(tws_http(g_port, "GET", "/healthz", NULL, g_resp, sizeof g_resp), 200);
    for (int i = 0; i < 4; i++)
        tws_close(ws[i]);
    assert_int_equal(tdbl_reason_count("http_max_pending"), 2);
}

static void test_stalled_response_is_cut(void **state)
{
    (void)state;
    /* a small receive window, set before connecting */
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    int small = 4096;
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)g_port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(send_str(fd, "GET /big.bin HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"), 0);
    /* read nothing: the server cannot make progress and cuts the response at its deadline */
    assert_true(tdbl_wait_count(tdbl_rejected, 1, 20000));
    assert_int_equal(tdbl_reason_count("http_response_stalled"), 1);
    assert_true(closed_within(fd, 10000));
    close(fd);
    assert_true(wait_pending(0, 5000));
    /* a reader gets the whole file (progress keeps moving its deadline) */
    fd = tws_connect(g_port);
    assert_int_equal(send_str(fd, "GET /big.bin HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"), 0);
    size_t total = 0;
    char *buf = malloc(1 << 16);
    ssize_t r;
    while ((r = recv(fd, buf, 1 << 16, 0)) > 0)
        total += (size_t)r;
    free(buf);
    close(fd);
    assert_true(total > (size_t)32 << 20);
    assert_int_equal(tdbl_reason_count("http_response_stalled"), 1);
}

static int accept_failures(void) { return tdbl_reason_count("accept_failed"); }

static size_t count_lines(const char *log, const char *needle)
{
    size_t n = 0;
    for (const char *p = log; p && (p = strstr(p, needle)) != NULL; p += strlen(needle))
        n++;
    return n;
}

static void test_out_of_descriptors_backs_off(void **state)
{
    (void)state;
    assert_int_equal(tg_test_stderr_begin(), 0);
    int fd = socket(AF_INET, SOCK_STREAM, 0); /* made while it still can be */
    assert_true(fd >= 0);
    assert_int_equal(tg_test_fds_exhaust(), 0); /* this process (the front end's thread too) can make no descriptor */
    /* the kernel completes the connection in the listener's backlog; the front end cannot take it */
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)g_port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int connected = connect(fd, (struct sockaddr *)&a, sizeof a);
    int sent = connected == 0 ? send_str(fd, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n") : -1;
    /* three failed accepts: each one paused the thread before the next */
    int failed = tdbl_wait_count(accept_failures, 3, 5000);
    assert_int_equal(tg_test_fds_restore(), 0);
    /* descriptors are back: the waiting client is served */
    char buf[4096] = "";
    size_t n = 0;
    ssize_t r;
    struct pollfd p = {.fd = fd, .events = POLLIN};
    while (sent == 0 && n < sizeof buf - 1 && poll(&p, 1, tg_test_ms(5000)) == 1 &&
           (r = recv(fd, buf + n, sizeof buf - 1 - n, 0)) > 0)
        n += (size_t)r;
    close(fd);
    char *log = tg_test_stderr_end();
    assert_non_null(log);
    /* one line of ours for the whole episode (at most one per 5 s), none of lws' own per failure */
    size_t ours = count_lines(log, "cannot accept an HTTP connection: out of file descriptors");
    size_t lws_lines = count_lines(log, "accept: ");
    free(log);
    assert_int_equal(connected, 0);
    assert_int_equal(sent, 0);
    print_message("accept failures counted: %d; lws accept lines: %zu\n", accept_failures(), lws_lines);
    assert_true(failed);
    assert_non_null(strstr(buf, "HTTP/1.1 200"));
    assert_int_equal(ours, 1);
    assert_int_equal(lws_lines, 0);
}

int main(void)
{
    if (getenv("TG_TEST_FILTER"))
        cmocka_set_test_filter(getenv("TG_TEST_FILTER"));
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pending_caps),
        cmocka_unit_test(test_pending_deadlines),
        cmocka_unit_test_setup_teardown(test_dribbler_cut_at_deadline, setup_short, teardown),
        cmocka_unit_test_setup_teardown(test_keepalive_next_request_has_deadline, setup_short, teardown),
        cmocka_unit_test_setup_teardown(test_half_open_cap, setup_capped, teardown),
        cmocka_unit_test_setup_teardown(test_stalled_response_is_cut, setup_bigfile, teardown),
        cmocka_unit_test_setup_teardown(test_out_of_descriptors_backs_off, setup_capped, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
