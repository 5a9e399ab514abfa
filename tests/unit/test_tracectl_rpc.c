/* test_tracectl_rpc.c: tracectl's call helper (src/tracectl/tracectl_rpc.c) against a scripted
 * server in a child process that writes raw IPC frames: a call that ends early (rejected while the
 * server says more is coming) is forgotten by the IPC client, so the server's later parts for it
 * never reach the caller's finished (stack) state or the next call's. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <event2/buffer.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tracectl_rpc.h"
#include "tracegate/frame.h"
#include "tracegate/ipc_wire.h"
#include "tg_test_util.h"

/* ---------------------------------------------------------------- the scripted server */

static int read_full(int fd, uint8_t *p, size_t n)
{
    while (n) {
        ssize_t r = read(fd, p, n);
        if (r <= 0)
            return -1;
        p += r;
        n -= (size_t)r;
    }
    return 0;
}

/* One frame's body into buf; its request id. -1 at EOF. */
static int64_t read_frame(int fd, uint8_t *buf, size_t cap, struct tg_frame_info *fi)
{
    uint8_t h[4];
    if (read_full(fd, h, 4) != 0)
        return -1;
    size_t n = (size_t)h[0] | (size_t)h[1] << 8 | (size_t)h[2] << 16 | (size_t)h[3] << 24;
    if (n > cap || read_full(fd, buf, n) != 0 || tg_frame_scan(buf, n, fi) != 0)
        return -1;
    return (int64_t)fi->request_id;
}

static void send_body(int fd, const uint8_t *body, size_t n)
{
    uint8_t h[4] = {(uint8_t)n, (uint8_t)(n >> 8), (uint8_t)(n >> 16), (uint8_t)(n >> 24)};
    if (write(fd, h, 4) != 4 || write(fd, body, n) != (ssize_t)n)
        _exit(3);
}

static void send_reply(int fd, uint64_t rid, int success, int has_more, const char *payload)
{
    uint8_t b[256];
    size_t n = tg_ipc_encode_reply(b, sizeof b, rid, success, has_more, (const uint8_t *)payload,
                                   payload ? strlen(payload) : 0);
    send_body(fd, b, n);
}

/* Binds "Svc" {1: A, 2: B}. A: rejected with has_more set (more to come, says the server). B:
 * first a late success for A, then B's own answer. */
static void serve(int lfd)
{
    int fd = accept(lfd, NULL, NULL);
    if (fd < 0)
        _exit(2);
    uint8_t buf[4096], out[512];
    struct tg_frame_info fi;
    uint64_t rid_a = 0;
    int64_t rid;
    while ((rid = read_frame(fd, buf, sizeof buf, &fi)) >= 0) {
        if (fi.msg == TG_MSG_BIND_SERVICE) {
            static const struct tg_ipc_method_info m[] = {{1, "A"}, {2, "B"}};
            send_body(fd, out, tg_ipc_encode_bind_reply(out, sizeof out, (uint64_t)rid, 1, 1, m, 2));
        } else if (fi.msg == TG_MSG_INVOKE_METHOD && fi.method_id == 1) {
            rid_a = (uint64_t)rid;
            send_reply(fd, rid_a, 0, 1, NULL);
        } else if (fi.msg == TG_MSG_INVOKE_METHOD && fi.method_id == 2) {
            send_reply(fd, rid_a, 1, 0, "late part of A");
            send_reply(fd, (uint64_t)rid, 1, 0, "B");
        }
    }
    _exit(0);
}

/* ---------------------------------------------------------------- the client */

static int collect(void *arg, const uint8_t *reply, size_t len, int has_more)
{
    (void)has_more;
    evbuffer_add(arg, reply, len);
    return 0;
}

/* Both calls from here: their tc_async lives at the same place on the stack */
static int call(struct tc_rpc *rpc, const char *method, struct evbuffer *col)
{
    return tc_rpc_call(rpc, method, NULL, 0, -1, collect, col, tg_test_ms(10000));
}

static void test_late_part_of_a_finished_call(void **state)
{
    (void)state;
    char dir[] = "/tmp/tg-rpc-XXXXXX", path[64], url[96];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/s.sock", dir);
    snprintf(url, sizeof url, "unix:%s", path);
    int lfd = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path);
    assert_int_equal(bind(lfd, (struct sockaddr *)&sa, sizeof sa), 0);
    assert_int_equal(listen(lfd, 1), 0);
    pid_t child = fork();
    assert_true(child >= 0);
    if (child == 0)
        serve(lfd);
    close(lfd);

    struct tc_opts o;
    memset(&o, 0, sizeof o);
    o.endpoint = url;
    o.timeout_ms = tg_test_ms(10000);
    struct tc_rpc rpc;
    assert_int_equal(tc_rpc_open(&rpc, &o, "Svc"), 0);
    struct evbuffer *a = evbuffer_new(), *b = evbuffer_new();
    assert_int_equal(call(&rpc, "A", a), -1);
    assert_int_equal(evbuffer_get_length(a), 0);
    /* B gets B's answer: A's late part goes nowhere */
    assert_int_equal(call(&rpc, "B", b), 0);
    assert_int_equal(evbuffer_get_length(a), 0);
    assert_int_equal(evbuffer_get_length(b), 1);
    assert_memory_equal(evbuffer_pullup(b, -1), "B", 1);
    tc_rpc_close(&rpc);
    evbuffer_free(a);
    evbuffer_free(b);
    int status;
    assert_int_equal(waitpid(child, &status, 0), child);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    unlink(path);
    rmdir(dir);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_late_part_of_a_finished_call),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
