/* test_ipc_addr.c: Perfetto-style address parsing, loopback detection, how a connected peer is
 * named (IPv4-mapped addresses as IPv4, on a real dual-stack listener too), connecting to a UNIX
 * listener whose backlog is full (the connect waits briefly instead of failing at once), and the
 * permissions of a UNIX listener's socket file: never broader than asked, from bind() on (checked
 * through bind/listen hooks), failures to set them reported, and (as root) another uid refused. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tracegate/addr.h"

/* ---- hooks: this program's bind/listen/fchmod/fchmodat come before libc's for libtracegate ---- */
static struct {
    const char *path; /* the socket file to watch */
    int at_bind, at_listen; /* its mode right after bind() and right before listen(), -1 = absent */
    int fail_fchmod, fail_fchmodat;
} g_hook = {NULL, -1, -1, 0, 0};

static int file_mode(const char *path)
{
    struct stat st;
    return path && lstat(path, &st) == 0 ? (int)(st.st_mode & 07777) : -1;
}

int bind(int fd, const struct sockaddr *sa, socklen_t len)
{
    int (*real)(int, const struct sockaddr *, socklen_t) =
        (int (*)(int, const struct sockaddr *, socklen_t))dlsym(RTLD_NEXT, "bind");
    int rc = real(fd, sa, len);
    g_hook.at_bind = file_mode(g_hook.path);
    return rc;
}

int listen(int fd, int backlog)
{
    int (*real)(int, int) = (int (*)(int, int))dlsym(RTLD_NEXT, "listen");
    g_hook.at_listen = file_mode(g_hook.path);
    return real(fd, backlog);
}

int fchmod(int fd, mode_t mode)
{
    if (g_hook.fail_fchmod) {
        errno = EPERM;
        return -1;
    }
    int (*real)(int, mode_t) = (int (*)(int, mode_t))dlsym(RTLD_NEXT, "fchmod");
    return real(fd, mode);
}

int fchmodat(int dirfd, const char *path, mode_t mode, int flags)
{
    if (g_hook.fail_fchmodat) {
        errno = EPERM;
        return -1;
    }
    int (*real)(int, const char *, mode_t, int) = (int (*)(int, const char *, mode_t, int))dlsym(RTLD_NEXT, "fchmodat");
    return real(dirfd, path, mode, flags);
}

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

static struct sockaddr_storage v4(const char *ip, unsigned port)
{
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof ss);
    struct sockaddr_in *in = (struct sockaddr_in *)&ss;
    in->sin_family = AF_INET;
    in->sin_port = htons((uint16_t)port);
    assert_int_equal(inet_pton(AF_INET, ip, &in->sin_addr), 1);
    return ss;
}

static struct sockaddr_storage v6(const char *ip, unsigned port)
{
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof ss);
    struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&ss;
    in6->sin6_family = AF_INET6;
    in6->sin6_port = htons((uint16_t)port);
    assert_int_equal(inet_pton(AF_INET6, ip, &in6->sin6_addr), 1);
    return ss;
}

/* How a connected peer is named (source of per-source limits, peer in logs) and whether it is
 * local: an IPv4-mapped address is its IPv4 (the same source as on an IPv4 listener), and only
 * 127/8, ::1 and mapped 127/8 are loopback (a mapped 10.x is not, nor is :: or ::ffff:0:0). */
static void test_sockaddr_names(void **state)
{
    (void)state;
    char ip[64], text[80];
    unsigned port = 1;
    struct sockaddr_storage ss = v4("10.1.2.3", 8037);
    tg_sockaddr_host(&ss, ip, sizeof ip, &port);
    tg_sockaddr_text(&ss, text, sizeof text);
    assert_string_equal(ip, "10.1.2.3");
    assert_int_equal(port, 8037);
    assert_string_equal(text, "10.1.2.3:8037");
    assert_false(tg_sockaddr_is_loopback(&ss));
    ss = v4("127.9.9.9", 1);
    assert_true(tg_sockaddr_is_loopback(&ss));

    ss = v6("::ffff:10.1.2.3", 5);
    tg_sockaddr_host(&ss, ip, sizeof ip, &port);
    tg_sockaddr_text(&ss, text, sizeof text);
    assert_string_equal(ip, "10.1.2.3");
    assert_string_equal(text, "10.1.2.3:5");
    assert_int_equal(port, 5);
    assert_false(tg_sockaddr_is_loopback(&ss));
    ss = v6("::ffff:127.0.0.1", 5);
    tg_sockaddr_host(&ss, ip, sizeof ip, NULL);
    assert_string_equal(ip, "127.0.0.1");
    assert_true(tg_sockaddr_is_loopback(&ss));

    ss = v6("2001:db8::7", 443);
    tg_sockaddr_host(&ss, ip, sizeof ip, NULL);
    tg_sockaddr_text(&ss, text, sizeof text);
    assert_string_equal(ip, "2001:db8::7");
    assert_string_equal(text, "[2001:db8::7]:443");
    assert_false(tg_sockaddr_is_loopback(&ss));
    ss = v6("::1", 2);
    tg_sockaddr_text(&ss, text, sizeof text);
    assert_string_equal(text, "[::1]:2");
    assert_true(tg_sockaddr_is_loopback(&ss));
    ss = v6("::", 2);
    assert_false(tg_sockaddr_is_loopback(&ss));
    ss = v6("::ffff:0:0", 2);
    assert_false(tg_sockaddr_is_loopback(&ss));

    memset(&ss, 0, sizeof ss);
    ss.ss_family = AF_UNIX;
    assert_true(tg_sockaddr_is_loopback(&ss));
    ss.ss_family = AF_UNSPEC;
    port = 9;
    tg_sockaddr_host(&ss, ip, sizeof ip, &port);
    tg_sockaddr_text(&ss, text, sizeof text);
    assert_string_equal(ip, "?");
    assert_string_equal(text, "?");
    assert_int_equal(port, 0);
    assert_false(tg_sockaddr_is_loopback(&ss));
    /* a buffer too small for the address says "?" rather than a cut address */
    ss = v6("2001:db8::7", 1);
    char small[6];
    tg_sockaddr_host(&ss, small, sizeof small, NULL);
    assert_string_equal(small, "?");
}

/* A dual-stack listener ("[::]:0", as tracegated binds it): an IPv4 client is named by its IPv4,
 * like on an IPv4 listener, and an IPv6 client by its IPv6. Skipped without IPv6. */
static void test_dual_stack_peer(void **state)
{
    (void)state;
    struct tg_addr a;
    char err[128];
    assert_int_equal(tg_addr_parse("[::]:0", &a, err, sizeof err), 0);
    int lfd = tg_addr_listen(&a, 8, 0);
    if (lfd < 0)
        skip(); /* no IPv6 on this host */
    struct sockaddr_storage bound;
    socklen_t bl = sizeof bound;
    assert_int_equal(getsockname(lfd, (struct sockaddr *)&bound, &bl), 0);
    unsigned port = ntohs(((struct sockaddr_in6 *)&bound)->sin6_port);
    const char *clients[] = {"127.0.0.1", "::1"};
    for (int i = 0; i < 2; i++) {
        struct sockaddr_storage to = i == 0 ? v4(clients[i], port) : v6(clients[i], port);
        int c = socket(to.ss_family, SOCK_STREAM, 0);
        assert_true(c >= 0);
        if (connect(c, (struct sockaddr *)&to, to.ss_family == AF_INET ? sizeof(struct sockaddr_in)
                                                                       : sizeof(struct sockaddr_in6)) != 0) {
            close(c);
            close(lfd);
            skip(); /* ::1 unusable */
        }
        struct pollfd pfd = {.fd = lfd, .events = POLLIN};
        assert_int_equal(poll(&pfd, 1, 10000), 1);
        int s = accept(lfd, NULL, NULL);
        assert_true(s >= 0);
        struct sockaddr_storage peer;
        socklen_t pl = sizeof peer;
        assert_int_equal(getpeername(s, (struct sockaddr *)&peer, &pl), 0);
        char ip[64];
        tg_sockaddr_host(&peer, ip, sizeof ip, NULL);
        assert_string_equal(ip, clients[i]);
        assert_true(tg_sockaddr_is_loopback(&peer));
        close(s);
        close(c);
    }
    close(lfd);
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

static void listen_at(const char *path, unsigned mode, int *fd)
{
    struct tg_addr a;
    char err[256];
    assert_int_equal(tg_addr_parse(path, &a, err, sizeof err), 0);
    g_hook.path = path;
    g_hook.at_bind = g_hook.at_listen = -1;
    *fd = tg_addr_listen_err(&a, 4, mode, err, sizeof err);
    g_hook.path = NULL;
    if (*fd < 0)
        fail_msg("listen %s: %s", path, err);
}

/* The finding: bind, listen, then chmod left a window in which anyone the umask allowed could
 * connect. Now the file is never broader than asked, and exact before listen(). */
static void test_unix_mode_from_bind_on(void **state)
{
    (void)state;
    char dir[] = "/tmp/tg-addr-XXXXXX", path[64];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/s", dir);
    static const unsigned masks[] = {022, 077, 0};
    static const unsigned modes[] = {0600, 0660, 0666, 0700};
    mode_t old = umask(0);
    for (size_t m = 0; m < sizeof masks / sizeof masks[0]; m++) {
        for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++) {
            umask((mode_t)masks[m]);
            int fd;
            listen_at(path, modes[i], &fd);
            if (g_hook.at_bind < 0 || ((unsigned)g_hook.at_bind & ~modes[i]))
                fail_msg("umask %03o, mode %04o: the file was %04o right after bind", masks[m], modes[i],
                         g_hook.at_bind);
            if (g_hook.at_listen != (int)modes[i])
                fail_msg("umask %03o, mode %04o: the file was %04o when listen() began", masks[m], modes[i],
                         g_hook.at_listen);
            assert_int_equal(file_mode(path), (int)modes[i]);
            close(fd);
        }
    }
    umask(old);
    unlink(path);
    rmdir(dir);
}

static void test_unix_mode_failure_reported(void **state)
{
    (void)state;
    char dir[] = "/tmp/tg-addr-XXXXXX", path[64], err[256];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/s", dir);
    struct tg_addr a;
    assert_int_equal(tg_addr_parse(path, &a, err, sizeof err), 0);
    mode_t old = umask(077); /* 0666 then needs the chmod after bind */
    g_hook.fail_fchmodat = 1;
    errno = 0;
    assert_int_equal(tg_addr_listen_err(&a, 4, 0666, err, sizeof err), -1);
    assert_int_equal(errno, EPERM);
    assert_non_null(strstr(err, "cannot set mode 0666 on"));
    assert_int_equal(file_mode(path), -1); /* the half-made socket file is gone */
    /* the plain call fails the same way and logs the reason */
    assert_int_equal(tg_addr_listen(&a, 4, 0666), -1);
    assert_int_equal(errno, EPERM);
    g_hook.fail_fchmodat = 0;
    g_hook.fail_fchmod = 1;
    assert_int_equal(tg_addr_listen_err(&a, 4, 0600, err, sizeof err), -1);
    assert_non_null(strstr(err, "cannot set mode 0600 on the socket"));
    assert_int_equal(file_mode(path), -1);
    g_hook.fail_fchmod = 0;
    umask(old);
    /* mode 0 leaves the file to the umask, as before */
    int fd = tg_addr_listen_err(&a, 4, 0, err, sizeof err);
    assert_true(fd >= 0);
    close(fd);
    unlink(path);
    rmdir(dir);
}

/* Another uid, connecting as soon as tg_addr_listen returns: refused at 0600, admitted at 0666. */
static int connect_as_nobody(const struct tg_addr *a)
{
    pid_t pid = fork();
    if (pid == 0) {
        if (setresgid(65534, 65534, 65534) != 0 || setresuid(65534, 65534, 65534) != 0)
            _exit(2);
        int fd = socket(AF_UNIX, SOCK_STREAM, 0);
        if (connect(fd, (const struct sockaddr *)&a->ss, a->len) == 0)
            _exit(0);
        _exit(errno == EACCES ? 1 : 3);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 4;
}

static void test_unix_mode_other_uid(void **state)
{
    (void)state;
    if (geteuid() != 0) {
        print_message("SKIP: needs root (to connect as another uid)\n");
        skip();
    }
    char dir[] = "/tmp/tg-addr-XXXXXX", path[64], err[256];
    assert_non_null(mkdtemp(dir));
    assert_int_equal(chmod(dir, 0711), 0); /* others may reach the socket, its mode decides */
    snprintf(path, sizeof path, "%s/s", dir);
    struct tg_addr a;
    assert_int_equal(tg_addr_parse(path, &a, err, sizeof err), 0);
    mode_t old = umask(0); /* the most permissive umask: only the mode protects the socket */
    int fd = tg_addr_listen(&a, 4, 0600);
    assert_true(fd >= 0);
    assert_int_equal(connect_as_nobody(&a), 1); /* EACCES */
    close(fd);
    fd = tg_addr_listen(&a, 4, 0666);
    assert_true(fd >= 0);
    assert_int_equal(connect_as_nobody(&a), 0); /* the legitimate path: the mode allows it */
    close(fd);
    umask(old);
    unlink(path);
    rmdir(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_forms),
        cmocka_unit_test(test_sockaddr_names),
        cmocka_unit_test(test_dual_stack_peer),
        cmocka_unit_test(test_full_backlog_waits),
        cmocka_unit_test(test_unix_mode_from_bind_on),
        cmocka_unit_test(test_unix_mode_failure_reported),
        cmocka_unit_test(test_unix_mode_other_uid),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
