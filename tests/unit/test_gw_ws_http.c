/* test_gw_ws_http.c: the HTTP routes and upgrade checks of the WebSocket port, against a running front end;
 * static files below the web root only, also while the root's directories are swapped for symlinks. */
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "gw_ws.h"
#include "test_gw_ws_double.h"
#include "test_ws_rawclient.h"
#include "tg_test_util.h"

static struct tg_gw_ws *g_ws;
static int g_port;
static char g_root[256];
static char g_resp[65536];

static int start_ex(const char *web_root, const char *const *hosts, size_t n_hosts, int protect_status)
{
    struct event_base *base = tdbl_start();
    g_port = tg_test_free_tcp_port();
    struct tg_gw_ws_config cfg = {
        .bind_host = "127.0.0.1",
        .port = g_port,
        .web_root = web_root,
        .http_hosts = hosts,
        .n_http_hosts = n_hosts,
        .protect_status = protect_status,
        .require_token = 1,
    };
    char err[256];
    g_ws = tg_gw_ws_start(NULL, base, &cfg, err, sizeof err);
    if (!g_ws)
        fprintf(stderr, "tg_gw_ws_start: %s\n", err);
    return g_ws ? 0 : -1;
}

static int start(const char *web_root) { return start_ex(web_root, NULL, 0, 0); }

static int setup_builtin(void **state)
{
    (void)state;
    return start(NULL);
}

static int setup_named(void **state)
{
    (void)state;
    static const char *const hosts[] = {"gw.example.test", "[fd00::5]"};
    return start_ex(NULL, hosts, 2, 0);
}

static int setup_protected(void **state)
{
    (void)state;
    return start_ex(NULL, NULL, 0, 1);
}

static void write_file(const char *dir, const char *name, const char *text)
{
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static int setup_webroot(void **state)
{
    (void)state;
    snprintf(g_root, sizeof g_root, "/tmp/tg-ws-http-XXXXXX");
    if (!mkdtemp(g_root))
        return -1;
    char p[512];
    snprintf(p, sizeof p, "%s/www", g_root);
    mkdir(p, 0755);
    snprintf(p, sizeof p, "%s/www/sub", g_root);
    mkdir(p, 0755);
    char www[300];
    snprintf(www, sizeof www, "%s/www", g_root);
    write_file(www, "index.html", "<p>root index</p>\n");
    write_file(www, "app.js", "console.log('hi');\n");
    write_file(www, "sub/index.html", "<p>sub index</p>\n");
    write_file(www, ".secret", "hidden\n");
    write_file(g_root, "outside.txt", "outside the root\n");
    char link[512], target[512];
    snprintf(link, sizeof link, "%s/www/escape.txt", g_root);
    snprintf(target, sizeof target, "%s/outside.txt", g_root);
    if (symlink(target, link) != 0)
        return -1;
    /* a relative symlink that stays inside: served; an absolute one, even to a file inside: not */
    snprintf(link, sizeof link, "%s/www/rel.txt", g_root);
    if (symlink("sub/index.html", link) != 0)
        return -1;
    snprintf(link, sizeof link, "%s/www/abs.txt", g_root);
    snprintf(target, sizeof target, "%s/www/app.js", g_root);
    if (symlink(target, link) != 0)
        return -1;
    /* for the swap race: www/flip (a directory) and www/flip_alt (a symlink to a directory outside) */
    snprintf(p, sizeof p, "%s/www/flip", g_root);
    mkdir(p, 0755);
    write_file(www, "flip/page.txt", "inside\n");
    snprintf(p, sizeof p, "%s/outdir", g_root);
    mkdir(p, 0755);
    write_file(g_root, "outdir/page.txt", "outside the root\n");
    snprintf(link, sizeof link, "%s/www/flip_alt", g_root);
    if (symlink(p, link) != 0)
        return -1;
    /* a big file: streamed in chunks */
    char big[512];
    snprintf(big, sizeof big, "%s/www/big.bin", g_root);
    FILE *f = fopen(big, "w");
    for (int i = 0; i < 300000; i++)
        fputc('a' + i % 26, f);
    fclose(f);
    return start(www);
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

static const char *body_of(const char *resp)
{
    const char *b = strstr(resp, "\r\n\r\n");
    return b ? b + 4 : "";
}

static void test_healthz(void **state)
{
    (void)state;
    assert_int_equal(tws_http(g_port, "GET", "/healthz", NULL, g_resp, sizeof g_resp), 200);
    assert_string_equal(body_of(g_resp), "ok\n");
    tdbl_set_healthy(0);
    assert_int_equal(tws_http(g_port, "GET", "/healthz", NULL, g_resp, sizeof g_resp), 503);
    int fd;
    assert_int_equal(tws_open(g_port, "/traced", NULL, NULL, &fd, g_resp, sizeof g_resp), 503);
    tdbl_set_healthy(1);
    assert_int_equal(tws_http(g_port, "HEAD", "/healthz", NULL, g_resp, sizeof g_resp), 200);
    assert_string_equal(body_of(g_resp), "");
}

static void test_metrics_and_status(void **state)
{
    (void)state;
    assert_int_equal(tws_http(g_port, "GET", "/metrics", NULL, g_resp, sizeof g_resp), 200);
    assert_non_null(strcasestr(g_resp, "content-type: text/plain; version=0.0.4"));
    assert_non_null(strstr(body_of(g_resp), "tracegate_test_metric 42"));
    assert_non_null(strstr(body_of(g_resp), "tracegated_adb_connections 0")); /* the /adb pipes' metrics */
    assert_int_equal(tws_http(g_port, "GET", "/api/status", NULL, g_resp, sizeof g_resp), 200);
    assert_non_null(strcasestr(g_resp, "content-type: application/json"));
    /* the core's document plus the front end's routes, each with its roles and target */
    const char *b = body_of(g_resp);
    assert_true(strncmp(b, "{\"status\":\"ok\",\"routes\":[{\"path\":\"/traced\",\"kind\":\"websocket\",\"roles\":"
                           "[\"observer\",\"recorder\",\"admin\"],\"target\":\"test consumer port\",\"enabled\":true}",
                        strlen("{\"status\":\"ok\",\"routes\":[{\"path\":\"/traced\",\"kind\":\"websocket\",\"roles\":"
                               "[\"observer\",\"recorder\",\"admin\"],\"target\":\"test consumer port\","
                               "\"enabled\":true}")) == 0);
    assert_non_null(strstr(b, "{\"path\":\"/adb\",\"kind\":\"websocket\",\"roles\":[\"admin\",\"adb\"],"
                              "\"target\":\"ADB server 127.0.0.1:5037\",\"enabled\":true}"));
    assert_non_null(strstr(b, "{\"path\":\"/producer\",\"kind\":\"websocket\",\"roles\":[\"producer\",\"admin\"]"));
    assert_non_null(strstr(b, "{\"path\":\"/healthz\",\"kind\":\"http\",\"roles\":\"any\""));
    assert_non_null(strstr(b, "],\"websocket\":{\"data_path\":\"native\"}}")); /* the default */
    assert_int_equal(b[strlen(b) - 1], '}');
    assert_int_equal(tws_http(g_port, "GET", "/api/nope", NULL, g_resp, sizeof g_resp), 404);
    assert_int_equal(tws_http(g_port, "POST", "/api/status", "Content-Length: 0\r\n", g_resp, sizeof g_resp), 405);
    assert_int_equal(tws_http(g_port, "GET", "/traced", NULL, g_resp, sizeof g_resp), 426);
    assert_int_equal(tws_http(g_port, "GET", "/adb", NULL, g_resp, sizeof g_resp), 426);
}

static void test_builtin_page(void **state)
{
    (void)state;
    assert_int_equal(tws_http(g_port, "GET", "/", NULL, g_resp, sizeof g_resp), 200);
    assert_non_null(strcasestr(g_resp, "content-type: text/html"));
    assert_non_null(strcasestr(g_resp, "x-content-type-options: nosniff"));
    assert_non_null(strstr(body_of(g_resp), "tracegate"));
    assert_int_equal(tws_http(g_port, "GET", "/app.js", NULL, g_resp, sizeof g_resp), 404);
}

static void test_static_files(void **state)
{
    (void)state;
    assert_int_equal(tws_http(g_port, "GET", "/", NULL, g_resp, sizeof g_resp), 200);
    assert_string_equal(body_of(g_resp), "<p>root index</p>\n");
    assert_int_equal(tws_http(g_port, "GET", "/app.js", NULL, g_resp, sizeof g_resp), 200);
    assert_non_null(strcasestr(g_resp, "content-type: text/javascript"));
    assert_int_equal(tws_http(g_port, "GET", "/sub/", NULL, g_resp, sizeof g_resp), 200);
    assert_string_equal(body_of(g_resp), "<p>sub index</p>\n");
    assert_int_equal(tws_http(g_port, "GET", "/big.bin", NULL, g_resp, sizeof g_resp), 200);
    const char *b = body_of(g_resp);
    assert_true(strlen(b) >= 60000);
    for (size_t i = 0; i < strlen(b); i++)
        assert_int_equal(b[i], 'a' + (int)(i % 26));
    /* refused: hidden files, symlinks out of the root, traversal, missing */
    assert_int_equal(tws_http(g_port, "GET", "/.secret", NULL, g_resp, sizeof g_resp), 404);
    assert_int_equal(tws_http(g_port, "GET", "/escape.txt", NULL, g_resp, sizeof g_resp), 404);
    int st = tws_http(g_port, "GET", "/../outside.txt", NULL, g_resp, sizeof g_resp);
    assert_true(st != 200 || strstr(g_resp, "outside the root") == NULL);
    st = tws_http(g_port, "GET", "/sub/../../outside.txt", NULL, g_resp, sizeof g_resp);
    assert_true(st != 200 || strstr(g_resp, "outside the root") == NULL);
    st = tws_http(g_port, "GET", "/%2e%2e/outside.txt", NULL, g_resp, sizeof g_resp);
    assert_true(st != 200 || strstr(g_resp, "outside the root") == NULL);
    assert_int_equal(tws_http(g_port, "GET", "/missing.html", NULL, g_resp, sizeof g_resp), 404);
    assert_int_equal(tws_http(g_port, "GET", "/sub", NULL, g_resp, sizeof g_resp), 404);
    assert_int_equal(tws_http(g_port, "GET", "/rel.txt", NULL, g_resp, sizeof g_resp), 200);
    assert_string_equal(body_of(g_resp), "<p>sub index</p>\n");
    assert_int_equal(tws_http(g_port, "GET", "/abs.txt", NULL, g_resp, sizeof g_resp), 404);
    assert_int_equal(tws_http(g_port, "GET", "/flip_alt/page.txt", NULL, g_resp, sizeof g_resp), 404);
}

/* Whoever can write in the web root swaps a directory on the served path for a symlink out of it,
 * over and over, while files below it are asked for: a file outside is never served. (Checking the
 * resolved path and then opening it let a swap between the two through; the open now resolves
 * beneath the root in the kernel, in one step.) */
static void test_static_swap_race(void **state)
{
    (void)state;
    char a[512], b[512];
    snprintf(a, sizeof a, "%s/www/flip", g_root);
    snprintf(b, sizeof b, "%s/www/flip_alt", g_root);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        for (;;)
            if (renameat2(AT_FDCWD, a, AT_FDCWD, b, RENAME_EXCHANGE) != 0)
                _exit(3);
    }
    int inside = 0, outside = 0;
    for (int i = 0; i < 3000; i++) {
        int st = tws_http(g_port, "GET", "/flip/page.txt", NULL, g_resp, sizeof g_resp);
        if (st == 200 && strstr(g_resp, "outside the root"))
            outside++;
        else if (st == 200 && !strcmp(body_of(g_resp), "inside\n"))
            inside++;
    }
    int status;
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    assert_true(WIFSIGNALED(status)); /* the swapping never stopped on an error */
    assert_int_equal(outside, 0);
    assert_true(inside > 0); /* the directory was there for some of the requests */
}

/* A FIFO in the web root (anyone who can write there can make one) is not a file to serve: opening
 * it for reading without O_NONBLOCK waits for a writer, on the WebSocket thread, so one GET used to
 * stall every HTTP request and WebSocket of the port. */
static void test_static_fifo_does_not_stall(void **state)
{
    (void)state;
    char fifo[512];
    snprintf(fifo, sizeof fifo, "%s/www/pipe.txt", g_root);
    assert_int_equal(mkfifo(fifo, 0644), 0);
    int st = tws_http(g_port, "GET", "/pipe.txt", NULL, g_resp, sizeof g_resp);
    /* on a stalled thread: let its open() go, so the teardown can stop it and the failure is reported */
    int w = open(fifo, O_WRONLY | O_NONBLOCK | O_CLOEXEC);
    if (w >= 0)
        close(w);
    assert_int_equal(st, 404);
    assert_int_equal(tws_http(g_port, "GET", "/healthz", NULL, g_resp, sizeof g_resp), 200);
    assert_int_equal(tws_http(g_port, "GET", "/app.js", NULL, g_resp, sizeof g_resp), 200);
}

/* A file made writable by every user after start is not served: anyone could have chosen what the
 * browser runs with the gateway's origin. (At start such a tree is refused: test_gw_config.) */
static void test_static_world_writable_refused(void **state)
{
    (void)state;
    char p[512];
    snprintf(p, sizeof p, "%s/www/app.js", g_root);
    assert_int_equal(chmod(p, 0646), 0);
    int st = tws_http(g_port, "GET", "/app.js", NULL, g_resp, sizeof g_resp);
    assert_int_equal(chmod(p, 0644), 0);
    assert_int_equal(st, 403);
    assert_int_equal(tws_http(g_port, "GET", "/app.js", NULL, g_resp, sizeof g_resp), 200);
}

static void test_origin_checks(void **state)
{
    (void)state;
    int fd;
    int rej = tdbl_rejected();
    assert_int_equal(tws_open(g_port, "/traced", "https://evil.example", NULL, &fd, g_resp, sizeof g_resp), 403);
    assert_non_null(strstr(g_resp, "403"));
    assert_int_equal(tdbl_rejected(), rej + 1);
    assert_int_equal(tdbl_accepted(), 0);
    assert_int_equal(tws_open(g_port, "/traced", "https://ui.perfetto.dev", NULL, &fd, g_resp, sizeof g_resp), 101);
    tws_close(fd);
    char self[64];
    snprintf(self, sizeof self, "http://127.0.0.1:%d", g_port);
    assert_int_equal(tws_open(g_port, "/traced", self, NULL, &fd, g_resp, sizeof g_resp), 101);
    tws_close(fd);
    assert_int_equal(tws_open(g_port, "/traced", NULL, NULL, &fd, g_resp, sizeof g_resp), 101); /* loopback */
    tws_close(fd);
}

static void test_tokens(void **state)
{
    (void)state;
    int fd;
    assert_int_equal(
        tws_open(g_port, "/traced", NULL, "tracegate, tracegate.token.good-token", &fd, g_resp, sizeof g_resp), 101);
    assert_non_null(strcasestr(g_resp, "sec-websocket-protocol: tracegate\r\n"));
    assert_int_equal(tws_send_ipc(fd, "x", 1), 0);
    uint8_t *b;
    size_t n;
    assert_int_equal(tws_recv_ipc(fd, &b, &n, 5000), 0);
    free(b);
    tws_close(fd);
    struct tg_gw_client_info ci;
    assert_int_equal(tdbl_info(0, &ci), 0);
    assert_int_equal(ci.auth, TG_GW_AUTH_TOKEN);
    assert_int_equal(ci.roles, TG_GW_ROLE_RECORDER);
    assert_string_equal(ci.principal, "token:alice");

    int fails = tdbl_auth_failures();
    assert_int_equal(
        tws_open(g_port, "/traced", NULL, "tracegate, tracegate.token.bad-token", &fd, g_resp, sizeof g_resp), 401);
    assert_int_equal(tdbl_auth_failures(), fails + 1);
    assert_int_equal(tws_open(g_port, "/traced?token=nope", NULL, NULL, &fd, g_resp, sizeof g_resp), 401);
    assert_int_equal(tws_open(g_port, "/traced", NULL, "tracegate.token.good-token", &fd, g_resp, sizeof g_resp),
                     400);

    /* a long token in the query */
    char path[300];
    char lt[121];
    memset(lt, 'L', 120);
    lt[120] = '\0';
    snprintf(path, sizeof path, "/traced/node-7?x=1&token=%s", lt);
    assert_int_equal(tws_open(g_port, path, NULL, NULL, &fd, g_resp, sizeof g_resp), 101);
    assert_int_equal(tws_send_ipc(fd, "y", 1), 0);
    assert_int_equal(tws_recv_ipc(fd, &b, &n, 5000), 0);
    free(b);
    tws_close(fd);
    assert_int_equal(tdbl_info(1, &ci), 0);
    assert_int_equal(ci.auth, TG_GW_AUTH_TOKEN);
    assert_int_equal(ci.roles, TG_GW_ROLE_OBSERVER);
    assert_string_equal(ci.node, "node-7");
}

static void test_paths(void **state)
{
    (void)state;
    int fd;
    assert_int_equal(tws_open(g_port, "/producer", NULL, NULL, &fd, g_resp, sizeof g_resp), 101);
    assert_int_equal(tws_send_ipc(fd, "p", 1), 0);
    uint8_t *b;
    size_t n;
    assert_int_equal(tws_recv_ipc(fd, &b, &n, 5000), 0);
    free(b);
    tws_close(fd);
    struct tg_gw_client_info ci;
    assert_int_equal(tdbl_info(0, &ci), 0);
    assert_int_equal(ci.port, TG_GW_PORT_PRODUCER);
    assert_int_equal(tws_open(g_port, "/nope", NULL, NULL, &fd, g_resp, sizeof g_resp), 404);
    assert_int_equal(tws_open(g_port, "/traced/bad!node", NULL, NULL, &fd, g_resp, sizeof g_resp), 404);
    assert_int_equal(tws_open(g_port, "/metrics", NULL, NULL, &fd, g_resp, sizeof g_resp), 404);
}

/* DNS rebinding: a page on attacker.example whose name now resolves to 127.0.0.1 */
static void test_host_check(void **state)
{
    (void)state;
    assert_int_equal(tg_test_stderr_begin(), 0);
    static const char *const paths[] = {"/", "/healthz", "/metrics", "/api/status", "/index.html", "/traced"};
    for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++) {
        assert_int_equal(tws_http_host(g_port, "GET", paths[i], "attacker.example", NULL, g_resp, sizeof g_resp), 421);
        assert_null(strstr(g_resp, "tracegate_test_metric"));
        assert_null(strstr(g_resp, "\"status\""));
        assert_int_equal(tws_http_host(g_port, "GET", paths[i], "attacker.example:8037", NULL, g_resp, sizeof g_resp),
                         421);
    }
    assert_non_null(strstr(g_resp, "--http-host"));
    /* WebSocket upgrades too, with or without an Origin */
    int fd;
    assert_int_equal(tws_open_host(g_port, "/traced", "attacker.example", NULL, NULL, &fd, g_resp, sizeof g_resp), 421);
    assert_int_equal(
        tws_open_host(g_port, "/traced", "attacker.example:80", "http://attacker.example:80", NULL, &fd, g_resp,
                      sizeof g_resp),
        421);
    assert_int_equal(tdbl_accepted(), 0);
    /* no Host at all */
    assert_int_equal(tws_http_host(g_port, "GET", "/healthz", NULL, NULL, g_resp, sizeof g_resp), 400);
    /* a client string with control characters is logged escaped */
    assert_int_equal(tws_http_host(g_port, "GET", "/healthz", "evil\x1b[31m.example", NULL, g_resp, sizeof g_resp),
                     421);
    assert_true(tg_test_stderr_wait_for("Host \"evil?[31m.example\" is not this server", 5000));
    char *log = tg_test_stderr_end();
    assert_non_null(strstr(log, "Host \"attacker.example:8037\" is not this server"));
    assert_null(strstr(log, "\x1b"));
    free(log);
    assert_int_equal(tdbl_reason_count("http_host"), 2 * 6 + 2 + 1 + 1);

    /* loopback names, any port */
    static const char *const good[] = {"127.0.0.1", "127.0.0.1:1", "127.9.8.7:8037", "localhost", "LocalHost:99",
                                       "[::1]", "[::1]:8037"};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        assert_int_equal(tws_http_host(g_port, "GET", "/healthz", good[i], NULL, g_resp, sizeof g_resp), 200);
        assert_int_equal(tws_http_host(g_port, "GET", "/metrics", good[i], NULL, g_resp, sizeof g_resp), 200);
    }
    assert_int_equal(tws_open_host(g_port, "/traced", "localhost:5", NULL, NULL, &fd, g_resp, sizeof g_resp), 101);
    tws_close(fd);
    /* not names that merely start like one */
    assert_int_equal(tws_http_host(g_port, "GET", "/healthz", "localhost.attacker.example", NULL, g_resp,
                                   sizeof g_resp), 421);
    assert_int_equal(tws_http_host(g_port, "GET", "/healthz", "127.0.0.1.attacker.example", NULL, g_resp,
                                   sizeof g_resp), 421);
    assert_int_equal(tws_http_host(g_port, "GET", "/healthz", "gw.example.test", NULL, g_resp, sizeof g_resp), 421);
}

static void test_configured_hosts(void **state)
{
    (void)state;
    assert_int_equal(tws_http_host(g_port, "GET", "/healthz", "gw.example.test", NULL, g_resp, sizeof g_resp), 200);
    assert_int_equal(tws_http_host(g_port, "GET", "/", "GW.Example.Test:8443", NULL, g_resp, sizeof g_resp), 200);
    assert_int_equal(tws_http_host(g_port, "GET", "/healthz", "[fd00::5]:8037", NULL, g_resp, sizeof g_resp), 200);
    assert_int_equal(tws_http_host(g_port, "GET", "/healthz", "other.example.test", NULL, g_resp, sizeof g_resp),
                     421);
    /* the web UI served under a configured name may open WebSockets from its own origin */
    char host[80], origin[100];
    snprintf(host, sizeof host, "gw.example.test:%d", g_port);
    snprintf(origin, sizeof origin, "http://gw.example.test:%d", g_port);
    int fd;
    assert_int_equal(tws_open_host(g_port, "/traced", host, origin, NULL, &fd, g_resp, sizeof g_resp), 101);
    tws_close(fd);
    /* but not from another configured-looking origin */
    assert_int_equal(
        tws_open_host(g_port, "/traced", host, "http://other.example.test", NULL, &fd, g_resp, sizeof g_resp), 403);
}

/* /metrics and /api/status off loopback: a bearer token or certificate with observer+ */
static void test_status_needs_credentials(void **state)
{
    (void)state;
    int fails = tdbl_auth_failures();
    static const char *const routes[] = {"/metrics", "/api/status"};
    for (int i = 0; i < 2; i++) {
        const char *r = routes[i];
        assert_int_equal(tws_http(g_port, "GET", r, NULL, g_resp, sizeof g_resp), 401);
        assert_non_null(strcasestr(g_resp, "www-authenticate: Bearer"));
        assert_null(strstr(g_resp, "tracegate_test_metric"));
        assert_int_equal(tws_http(g_port, "GET", r, "Authorization: Bearer wrong-token\r\n", g_resp, sizeof g_resp),
                         401);
        assert_int_equal(tws_http(g_port, "GET", r, "Authorization: Basic Zm9vOmJhcg==\r\n", g_resp, sizeof g_resp),
                         401);
        /* a token without observer, recorder or admin */
        assert_int_equal(
            tws_http(g_port, "GET", r, "Authorization: Bearer producer-token\r\n", g_resp, sizeof g_resp), 403);
        assert_int_equal(tws_http(g_port, "GET", r, "Authorization: bearer  good-token \r\n", g_resp, sizeof g_resp),
                         200);
    }
    assert_non_null(strstr(body_of(g_resp), "\"status\""));
    assert_int_equal(tws_http(g_port, "GET", "/metrics", "Authorization: Bearer good-token\r\n", g_resp,
                              sizeof g_resp), 200);
    assert_non_null(strstr(body_of(g_resp), "tracegate_test_metric 42"));
    assert_int_equal(tdbl_auth_failures(), fails + 6);
    assert_int_equal(tdbl_reason_count("http_forbidden"), 2);
    /* health and the page stay open */
    assert_int_equal(tws_http(g_port, "GET", "/healthz", NULL, g_resp, sizeof g_resp), 200);
    assert_int_equal(tws_http(g_port, "GET", "/", NULL, g_resp, sizeof g_resp), 200);
}

/* libwebsockets binds a WebSocket to the first offered subprotocol it knows, and the vhost also
 * knows the internal protocol of /adb's raw socketpair wsis: a client offering that name before
 * "tracegate" passed our check (it offered "tracegate" too) and was answered 101 with the internal
 * protocol, then dropped without a close frame or a log line. The internal name must never be
 * selectable: the client gets "tracegate" and a working WebSocket. */
static void test_internal_protocol_not_selectable(void **state)
{
    (void)state;
    int fd;
    assert_int_equal(tws_open(g_port, "/traced", NULL, "tracegate-raw, tracegate", &fd, g_resp, sizeof g_resp), 101);
    assert_non_null(strcasestr(g_resp, "\nSec-WebSocket-Protocol: tracegate\r\n"));
    assert_true(tdbl_wait_count(tdbl_accepted, 1, 5000));
    assert_int_equal(tws_send_ipc(fd, "raw?", 4), 0);
    uint8_t *body;
    size_t n;
    assert_int_equal(tws_recv_ipc(fd, &body, &n, 5000), 0);
    assert_int_equal(n, 4);
    free(body);
    tws_close(fd);
}

/* SIGHUP's local-roles / cert-roles reach new WebSocket clients; live ones keep theirs */
static void test_role_defaults_follow_reload(void **state)
{
    (void)state;
    tdbl_set_role_defaults(TG_GW_ROLE_OBSERVER, TG_GW_ROLE_RECORDER);
    int a;
    assert_int_equal(tws_open(g_port, "/traced", NULL, NULL, &a, g_resp, sizeof g_resp), 101);
    assert_true(tdbl_wait_count(tdbl_accepted, 1, 5000));
    struct tg_gw_client_info ci;
    assert_int_equal(tdbl_info(0, &ci), 0);
    assert_int_equal(ci.auth, TG_GW_AUTH_LOCAL);
    assert_int_equal(ci.roles, TG_GW_ROLE_OBSERVER);

    tdbl_set_role_defaults(TG_GW_ROLE_RECORDER | TG_GW_ROLE_PRODUCER, TG_GW_ROLE_OBSERVER);
    int b;
    assert_int_equal(tws_open(g_port, "/traced", NULL, NULL, &b, g_resp, sizeof g_resp), 101);
    assert_true(tdbl_wait_count(tdbl_accepted, 2, 5000));
    assert_int_equal(tdbl_info(1, &ci), 0);
    assert_int_equal(ci.roles, TG_GW_ROLE_RECORDER | TG_GW_ROLE_PRODUCER);
    /* the first connection still works and was not re-decided */
    assert_int_equal(tws_send_ipc(a, "still here", 10), 0);
    uint8_t *body;
    size_t n;
    assert_int_equal(tws_recv_ipc(a, &body, &n, 5000), 0);
    assert_int_equal(n, 10);
    free(body);
    assert_int_equal(tdbl_info(0, &ci), 0);
    assert_int_equal(ci.roles, TG_GW_ROLE_OBSERVER);
    assert_int_equal(tdbl_accepted(), 2);
    tws_close(a);
    tws_close(b);
}

/* ?token= values never reach the log, whether the upgrade is refused or accepted */
static void test_query_token_not_logged(void **state)
{
    (void)state;
    assert_int_equal(tg_test_stderr_begin(), 0);
    int fd;
    assert_int_equal(tws_open(g_port, "/traced?token=SeCrEtQuErY1", "https://evil.example", NULL, &fd, g_resp,
                              sizeof g_resp), 403);
    assert_int_equal(tws_open(g_port, "/traced?token=SeCrEtQuErY2", NULL, NULL, &fd, g_resp, sizeof g_resp), 401);
    assert_int_equal(tws_open(g_port, "/traced/n1?token=good-token", NULL, NULL, &fd, g_resp, sizeof g_resp), 101);
    tws_close(fd);
    assert_int_equal(tws_http_host(g_port, "GET", "/x?token=SeCrEtQuErY3", "attacker.example", NULL, g_resp,
                                   sizeof g_resp), 421);
    assert_true(tg_test_stderr_wait_for("WebSocket /traced/n1 from", 5000));
    char *log = tg_test_stderr_end();
    assert_non_null(strstr(log, "Origin not allowed"));
    assert_non_null(strstr(log, "invalid token"));
    assert_null(strstr(log, "SeCrEtQuErY"));
    assert_null(strstr(log, "good-token"));
    assert_null(strstr(log, "token="));
    free(log);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_healthz, setup_builtin, teardown),
        cmocka_unit_test_setup_teardown(test_metrics_and_status, setup_builtin, teardown),
        cmocka_unit_test_setup_teardown(test_builtin_page, setup_builtin, teardown),
        cmocka_unit_test_setup_teardown(test_static_files, setup_webroot, teardown),
        cmocka_unit_test_setup_teardown(test_static_fifo_does_not_stall, setup_webroot, teardown),
        cmocka_unit_test_setup_teardown(test_static_swap_race, setup_webroot, teardown),
        cmocka_unit_test_setup_teardown(test_static_world_writable_refused, setup_webroot, teardown),
        cmocka_unit_test_setup_teardown(test_origin_checks, setup_builtin, teardown),
        cmocka_unit_test_setup_teardown(test_tokens, setup_builtin, teardown),
        cmocka_unit_test_setup_teardown(test_paths, setup_builtin, teardown),
        cmocka_unit_test_setup_teardown(test_host_check, setup_builtin, teardown),
        cmocka_unit_test_setup_teardown(test_configured_hosts, setup_named, teardown),
        cmocka_unit_test_setup_teardown(test_status_needs_credentials, setup_protected, teardown),
        cmocka_unit_test_setup_teardown(test_role_defaults_follow_reload, setup_builtin, teardown),
        cmocka_unit_test_setup_teardown(test_internal_protocol_not_selectable, setup_builtin, teardown),
        cmocka_unit_test_setup_teardown(test_query_token_not_logged, setup_builtin, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
