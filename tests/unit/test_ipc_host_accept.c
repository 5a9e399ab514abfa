/* test_ipc_host_accept.c: the IPC host's listener (the service's producer and consumer sockets)
 * when accept() fails for want of descriptors: accepts pause, and a host freed during the pause
 * leaves no timer behind that would touch the freed listener. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "tg_test_util.h"
#include "tracegate/ipc_host.h"
#include "tracegate/log.h"

static int log_has(void *arg)
{
    char *s = tg_test_stderr_peek();
    int r = s && strstr(s, arg) != NULL;
    free(s);
    return r;
}

static void test_host_freed_while_paused(void **state)
{
    (void)state;
    char dir[] = "/tmp/tg-ipc-accept-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[128];
    snprintf(path, sizeof path, "%s/s.sock", dir);
    struct event_base *base = event_base_new();
    assert_non_null(base);
    tg_ipc_host *h = tg_ipc_host_new(base, NULL);
    assert_non_null(h);
    char err[256];
    assert_int_equal(tg_ipc_host_listen(h, path, 0600, err, sizeof err), 0);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    assert_int_equal(tg_test_stderr_begin(), 0);
    assert_int_equal(tg_test_fds_exhaust(), 0); /* the host can make no descriptor */
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    memcpy(sa.sun_path, path, strlen(path) + 1);
    int connected = connect(fd, (struct sockaddr *)&sa, sizeof sa); /* waits in the backlog */
    int failed = tg_test_run_until(base, log_has, "accept failed", 5000);
    tg_ipc_host_free(h); /* while its accepts are paused */
    assert_int_equal(tg_test_fds_restore(), 0);
    /* past the pause: nothing of the freed listener may run (ASan would report it) */
    tg_test_run_until(base, NULL, NULL, 1500);
    char *log = tg_test_stderr_end();
    close(fd);
    event_base_free(base);
    rmdir(dir);
    assert_int_equal(connected, 0);
    assert_true(failed);
    assert_non_null(log);
    assert_non_null(strstr(log, "pausing accepts for 1 s"));
    free(log);
}

int main(void)
{
    tg_log_set_level(TG_LOG_WARN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_host_freed_while_paused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
