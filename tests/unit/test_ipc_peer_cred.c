/* test_ipc_peer_cred.c: tg_peer_cred_of: UNIX peers by SO_PEERCRED, loopback TCP peers (IPv4, IPv6,
 * v4-mapped) by their socket's owner through sock_diag, including a peer running as another uid;
 * a peer that has gone (TIME_WAIT minisock, reported as uid 0 by the kernel) is unknown, never root. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tracegate/peer_cred.h"

#define OTHER_UID 65534

/* A listening socket on a loopback address of `family` (v4 or v6; dual=1 makes an IPv6 socket that
 * also takes IPv4). Returns the fd and fills addr with the bound address; -1 when unsupported. */
static int listen_loopback(int family, int dual, struct sockaddr_storage *addr, socklen_t *alen)
{
    int fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    memset(addr, 0, sizeof *addr);
    if (family == AF_INET) {
        struct sockaddr_in *in = (struct sockaddr_in *)addr;
        in->sin_family = AF_INET;
        in->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        *alen = sizeof *in;
    } else {
        int v6only = !dual;
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &v6only, sizeof v6only);
        struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)addr;
        in6->sin6_family = AF_INET6;
        in6->sin6_addr = dual ? in6addr_any : in6addr_loopback;
        *alen = sizeof *in6;
    }
    if (bind(fd, (struct sockaddr *)addr, *alen) != 0 || listen(fd, 4) != 0 ||
        getsockname(fd, (struct sockaddr *)addr, alen) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* Connects to addr as uid (when we are root; else as ourselves) in a child that then blocks on a
 * pipe until the parent lets it go. Returns the child's pid. */
static pid_t connect_as(uid_t uid, const struct sockaddr *addr, socklen_t alen, int *release_fd)
{
    int p[2];
    if (pipe(p) != 0)
        return -1;
    pid_t pid = fork();
    if (pid == 0) {
        close(p[1]);
        if (getuid() == 0 && setresuid(uid, uid, uid) != 0)
            _exit(2);
        int fd = socket(addr->sa_family, SOCK_STREAM, 0);
        if (fd < 0 || connect(fd, addr, alen) != 0)
            _exit(3);
        char c;
        (void)!read(p[0], &c, 1); /* hold the connection until released */
        _exit(0);
    }
    close(p[0]);
    *release_fd = p[1];
    return pid;
}

static void reap(pid_t pid, int release_fd)
{
    close(release_fd);
    int st = 0;
    waitpid(pid, &st, 0);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
}

static void test_unix_socketpair(void **state)
{
    (void)state;
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    struct tg_peer_cred c;
    assert_int_equal(tg_peer_cred_of(sv[0], &c), 0);
    assert_int_equal(c.uid, getuid());
    assert_int_equal(c.pid, getpid());
    assert_int_equal(c.via_diag, 0);
    close(sv[0]);
    close(sv[1]);
}

static void check_tcp(int family, int dual, const char *connect_ip)
{
    struct sockaddr_storage la;
    socklen_t alen;
    int lfd = listen_loopback(family, dual, &la, &alen);
    if (lfd < 0) {
        print_message("no %s loopback here: skipped\n", family == AF_INET ? "IPv4" : "IPv6");
        return;
    }
    unsigned port = ntohs(family == AF_INET ? ((struct sockaddr_in *)&la)->sin_port
                                            : ((struct sockaddr_in6 *)&la)->sin6_port);
    struct sockaddr_storage ca;
    memset(&ca, 0, sizeof ca);
    socklen_t clen;
    if (strchr(connect_ip, ':')) {
        struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&ca;
        in6->sin6_family = AF_INET6;
        in6->sin6_port = htons((uint16_t)port);
        inet_pton(AF_INET6, connect_ip, &in6->sin6_addr);
        clen = sizeof *in6;
    } else {
        struct sockaddr_in *in = (struct sockaddr_in *)&ca;
        in->sin_family = AF_INET;
        in->sin_port = htons((uint16_t)port);
        inet_pton(AF_INET, connect_ip, &in->sin_addr);
        clen = sizeof *in;
    }
    uid_t want = getuid() == 0 ? OTHER_UID : getuid();
    int release = -1;
    pid_t child = connect_as(want, (struct sockaddr *)&ca, clen, &release);
    assert_true(child > 0);
    int fd = accept(lfd, NULL, NULL);
    assert_true(fd >= 0);
    struct tg_peer_cred c;
    assert_int_equal(tg_peer_cred_of(fd, &c), 0);
    assert_int_equal(c.uid, want);
    assert_int_equal(c.pid, -1);
    assert_int_equal(c.via_diag, 1);
    reap(child, release);
    close(fd);
    close(lfd);
}

static void test_tcp_ipv4(void **state)
{
    (void)state;
    check_tcp(AF_INET, 0, "127.0.0.1");
}

static void test_tcp_ipv6(void **state)
{
    (void)state;
    check_tcp(AF_INET6, 0, "::1");
}

static void test_tcp_v4_mapped(void **state)
{
    (void)state;
    check_tcp(AF_INET6, 1, "127.0.0.1"); /* dual-stack listener: the peer shows as ::ffff:127.0.0.1 */
}

/* The client closed first: its orphaned socket becomes a FIN_WAIT2/TIME_WAIT minisock, which the
 * kernel reports with uid 0. That must read as "unknown", or a vanished peer would pass for root. */
static void test_closed_peer_is_unknown(void **state)
{
    (void)state;
    struct sockaddr_storage la;
    socklen_t alen;
    int lfd = listen_loopback(AF_INET, 0, &la, &alen);
    assert_true(lfd >= 0);
    int cfd = socket(AF_INET, SOCK_STREAM, 0);
    assert_int_equal(connect(cfd, (struct sockaddr *)&la, alen), 0);
    int fd = accept(lfd, NULL, NULL);
    assert_true(fd >= 0);
    close(cfd);
    char b;
    assert_int_equal(read(fd, &b, 1), 0); /* the FIN arrived (and was acked) */
    struct tg_peer_cred c;
    assert_int_equal(tg_peer_cred_of(fd, &c), -1);
    close(fd);
    close(lfd);
}

/* The client reset the connection: its socket no longer exists. */
static void test_reset_peer_is_unknown(void **state)
{
    (void)state;
    struct sockaddr_storage la;
    socklen_t alen;
    int lfd = listen_loopback(AF_INET, 0, &la, &alen);
    assert_true(lfd >= 0);
    int cfd = socket(AF_INET, SOCK_STREAM, 0);
    assert_int_equal(connect(cfd, (struct sockaddr *)&la, alen), 0);
    int fd = accept(lfd, NULL, NULL);
    assert_true(fd >= 0);
    struct linger lg = {1, 0};
    setsockopt(cfd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
    close(cfd); /* RST */
    struct tg_peer_cred c;
    assert_int_equal(tg_peer_cred_of(fd, &c), -1);
    close(fd);
    close(lfd);
}

static void test_not_a_socket(void **state)
{
    (void)state;
    struct tg_peer_cred c;
    int p[2];
    assert_int_equal(pipe(p), 0);
    assert_int_equal(tg_peer_cred_of(p[0], &c), -1);
    close(p[0]);
    close(p[1]);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_unix_socketpair), cmocka_unit_test(test_tcp_ipv4),
        cmocka_unit_test(test_tcp_ipv6),        cmocka_unit_test(test_tcp_v4_mapped),
        cmocka_unit_test(test_closed_peer_is_unknown), cmocka_unit_test(test_reset_peer_is_unknown),
        cmocka_unit_test(test_not_a_socket),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
