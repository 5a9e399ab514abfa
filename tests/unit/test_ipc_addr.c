/* test_ipc_addr.c: Perfetto-style address parsing, loopback detection, and connecting to a UNIX
 * listener whose backlog is full (the connect waits briefly instead of failing at once). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "tracegate/addr.h"

static void test_parse_forms(void **state)
{
    (void)state;
    struct tg_addr a;
    char err[128];
    assert_int_equal(tg_addr_parse("/tmp/x.sock", &a, err, sizeof err), 0);
    assert_int_equal(a.family, AF_UNIX);
    assert_string_equal(a.text, "/tmp/x.sock");
    assert_int_equal(tg_addr_parse("@abs", &a, err, sizeof err), 0);
    assert_int_equal(a.family, AF_UNIX);
    assert_string_equal(a.text, "@abs");
    assert_int_equal(tg_addr_parse("127.0.0.1:7001", &a, err, sizeof err), 0);
    assert_int_equal(a.family, AF_INET);
    assert_true(tg_addr_is_loopback(&a));
    assert_int_equal(tg_addr_parse("[::1]:7001", &a, err, sizeof err), 0);
    assert_int_equal(a.family, AF_INET6);
    assert_true(tg_addr_is_loopback(&a));
    assert_int_equal(tg_addr_parse("tcp://0.0.0.0:7001", &a, err, sizeof err), 0);
    assert_false(tg_addr_is_loopback(&a));
    assert_int_equal(tg_addr_parse("unix:/run/p.sock", &a, err, sizeof err), 0);
    assert_string_equal(a.text, "/run/p.sock");
    assert_int_equal(tg_addr_parse("host:99999", &a, err, sizeof err), -1);
    assert_int_equal(tg_addr_parse("[::1:7001", &a, err, sizeof err), -1);
    assert_int_equal(tg_addr_parse("", &a, err, sizeof err), -1);
}

struct acceptor {
    int lfd;
    pid_t waiter; /* the thread that connects */
};

/* 'S' while the thread sleeps in the kernel (here: in connect(), waiting for room), -1 on error */
static int thread_state(pid_t tid)
{
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/self/task/%d/stat", (int)tid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *p = strrchr(buf, ')'); /* "pid (comm) S ..." */
    return p && p[1] == ' ' ? p[2] : -1;
}

/* Makes room in the backlog once the connecting thread is asleep in its connect: whatever the
 * load, the accept comes while the connect waits (not before it, not after a fixed delay). */
static void *accept_when_waiting(void *arg)
{
    struct acceptor *ac = arg;
    while (thread_state(ac->waiter) != 'S')
        sched_yield();
    int c = accept(ac->lfd, NULL, NULL);
    if (c >= 0)
        close(c);
    return NULL;
}

static void test_full_backlog_waits(void **state)
{
    (void)state;
    char dir[] = "/tmp/tg-addr-XXXXXX", path[64], err[128];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/s", dir);
    struct tg_addr a;
    assert_int_equal(tg_addr_parse(path, &a, err, sizeof err), 0);
    int lfd = tg_addr_listen(&a, 0, 0);
    assert_true(lfd >= 0);
    /* fill the backlog with connections nobody accepts */
    int held[8], n = 0;
    for (; n < 8; n++) {
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0);
        if (connect(fd, (const struct sockaddr *)&a.ss, a.len) != 0) {
            assert_int_equal(errno, EAGAIN);
            close(fd);
            break;
        }
        held[n] = fd;
    }
    assert_true(n < 8); /* the backlog did fill up */
    /* nobody makes room: the connect gives up after a short wait */
    errno = 0;
    assert_int_equal(tg_addr_connect(&a), -1);
    assert_int_equal(errno, EAGAIN);
    /* someone accepts while the connect waits: it gets through */
    struct acceptor ac = {lfd, (pid_t)syscall(SYS_gettid)};
    pthread_t th;
    pthread_create(&th, NULL, accept_when_waiting, &ac);
    int fd = tg_addr_connect(&a);
    pthread_join(th, NULL);
    assert_true(fd >= 0);
    close(fd);
    for (int i = 0; i < n; i++)
        close(held[i]);
    close(lfd);
    unlink(path);
    rmdir(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_forms),
        cmocka_unit_test(test_full_backlog_waits),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
