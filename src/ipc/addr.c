/* addr.c: parse, listen on and connect to Perfetto-style socket addresses (see tracegate/addr.h). */
#include "tracegate/addr.h"
#include "tracegate/errbuf.h"
#include "tracegate/log.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

static int parse_unix(const char *path, int abstract, struct tg_addr *out, char *err, size_t errlen)
{
    struct sockaddr_un *sun = (struct sockaddr_un *)&out->ss;
    size_t n = strlen(path);
    if (n == 0)
        return tg_errf(err, errlen, "empty UNIX socket path");
    if (n + 1 > sizeof sun->sun_path)
        return tg_errf(err, errlen, "UNIX socket path too long: %s", path);
    memset(out, 0, sizeof *out);
    sun->sun_family = AF_UNIX;
    out->family = AF_UNIX;
    if (abstract) {
        sun->sun_path[0] = '\0';
        memcpy(sun->sun_path + 1, path, n);
        out->len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n);
        snprintf(out->text, sizeof out->text, "@%s", path);
    } else {
        memcpy(sun->sun_path, path, n + 1);
        out->len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n + 1);
        snprintf(out->text, sizeof out->text, "%s", path);
    }
    return 0;
}

static int parse_tcp(const char *host, const char *port, struct tg_addr *out, char *err, size_t errlen)
{
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV;
    if (*host == '\0' || strcmp(host, "*") == 0) {
        host = NULL;
        hints.ai_flags |= AI_PASSIVE;
    }
    int rc = getaddrinfo(host, port, &hints, &res);
    if (rc != 0 || !res)
        return tg_errf(err, errlen, "cannot resolve address: %s", gai_strerror(rc));
    memset(out, 0, sizeof *out);
    memcpy(&out->ss, res->ai_addr, res->ai_addrlen);
    out->len = (socklen_t)res->ai_addrlen;
    out->family = res->ai_family;
    freeaddrinfo(res);
    char ip[INET6_ADDRSTRLEN];
    if (out->family == AF_INET6) {
        inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&out->ss)->sin6_addr, ip, sizeof ip);
        snprintf(out->text, sizeof out->text, "[%s]:%s", ip, port);
    } else {
        inet_ntop(AF_INET, &((struct sockaddr_in *)&out->ss)->sin_addr, ip, sizeof ip);
        snprintf(out->text, sizeof out->text, "%s:%s", ip, port);
    }
    return 0;
}

int tg_addr_parse(const char *s, struct tg_addr *out, char *err, size_t errlen)
{
    if (!s || !*s)
        return tg_errf(err, errlen, "empty address");
    if (strncmp(s, "unix:", 5) == 0)
        return s[5] == '@' ? parse_unix(s + 6, 1, out, err, errlen) : parse_unix(s + 5, 0, out, err, errlen);
    if (strncmp(s, "tcp://", 6) == 0)
        s += 6;
    else if (s[0] == '@')
        return parse_unix(s + 1, 1, out, err, errlen);

    const char *colon = strrchr(s, ':');
    int is_tcp = 0;
    if (colon && colon[1]) {
        is_tcp = 1;
        for (const char *p = colon + 1; *p; p++)
            if (*p < '0' || *p > '9')
                is_tcp = 0;
    }
    if (!is_tcp)
        return parse_unix(s, 0, out, err, errlen);

    char host[256];
    size_t hlen = (size_t)(colon - s);
    if (hlen >= sizeof host)
        return tg_errf(err, errlen, "host name too long: %s", s);
    memcpy(host, s, hlen);
    host[hlen] = '\0';
    if (host[0] == '[') { /* [v6]:port */
        size_t hl = strlen(host);
        if (hl < 2 || host[hl - 1] != ']')
            return tg_errf(err, errlen, "bad IPv6 address: %s", s);
        host[hl - 1] = '\0';
        memmove(host, host + 1, hl - 1);
    }
    long port = strtol(colon + 1, NULL, 10);
    if (port < 0 || port > 65535)
        return tg_errf(err, errlen, "bad port in %s", s);
    return parse_tcp(host, colon + 1, out, err, errlen);
}

int tg_addr_is_loopback(const struct tg_addr *a)
{
    return a->family == AF_UNIX || tg_sockaddr_is_loopback(&a->ss);
}

int tg_sockaddr_is_loopback(const struct sockaddr_storage *ss)
{
    if (ss->ss_family == AF_UNIX)
        return 1;
    if (ss->ss_family == AF_INET)
        return (ntohl(((const struct sockaddr_in *)ss)->sin_addr.s_addr) >> 24) == 127;
    if (ss->ss_family == AF_INET6) {
        const struct in6_addr *a = &((const struct sockaddr_in6 *)ss)->sin6_addr;
        return IN6_IS_ADDR_LOOPBACK(a) || (IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127);
    }
    return 0;
}

void tg_sockaddr_host(const struct sockaddr_storage *ss, char *ip, size_t len, unsigned *port)
{
    unsigned p = 0;
    const char *ok = NULL;
    if (ss->ss_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)ss;
        ok = inet_ntop(AF_INET, &in->sin_addr, ip, (socklen_t)len);
        p = ntohs(in->sin_port);
    } else if (ss->ss_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)ss;
        if (IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr))
            ok = inet_ntop(AF_INET, &in6->sin6_addr.s6_addr[12], ip, (socklen_t)len);
        else
            ok = inet_ntop(AF_INET6, &in6->sin6_addr, ip, (socklen_t)len);
        p = ntohs(in6->sin6_port);
    }
    if (!ok && len)
        snprintf(ip, len, "?");
    if (port)
        *port = p;
}

void tg_sockaddr_text(const struct sockaddr_storage *ss, char *out, size_t len)
{
    char ip[INET6_ADDRSTRLEN];
    unsigned port;
    tg_sockaddr_host(ss, ip, sizeof ip, &port);
    if (ss->ss_family == AF_INET6 && strchr(ip, ':'))
        snprintf(out, len, "[%s]:%u", ip, port);
    else if (ss->ss_family == AF_INET || ss->ss_family == AF_INET6)
        snprintf(out, len, "%s:%u", ip, port);
    else
        snprintf(out, len, "?");
}

static int new_socket(int family)
{
    return socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
}

static int is_fs_unix(const struct tg_addr *a)
{
    const struct sockaddr_un *sun = (const struct sockaddr_un *)&a->ss;
    return a->family == AF_UNIX && sun->sun_path[0] != '\0';
}

int tg_addr_is_live(const struct tg_addr *a)
{
    int fd = socket(a->family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return 0;
    int live = connect(fd, (const struct sockaddr *)&a->ss, a->len) == 0;
    close(fd);
    return live;
}

/* Closes fd (and removes the socket file it created) keeping errno. */
static int listen_fail(int fd, const char *created_path)
{
    int e = errno;
    if (created_path)
        unlink(created_path);
    close(fd);
    errno = e;
    return -1;
}

/* Gives the socket file at path exactly `mode` before anyone can connect (the caller has not
 * called listen() yet: until then a connect is refused whatever the file's mode). The file was
 * created from the socket's own mode set before bind, minus the umask, so it was never broader
 * than `mode`; only bits the umask removed are added here. fchmodat(AT_SYMLINK_NOFOLLOW) so a
 * symlink swapped in by someone who can write the directory is not followed. */
static int set_socket_file_mode(const char *path, unsigned mode, char *err, size_t errlen)
{
    struct stat st;
    if (lstat(path, &st) != 0)
        return tg_errf(err, errlen, "cannot check the mode of %s: %s", path, strerror(errno));
    if (!S_ISSOCK(st.st_mode)) {
        errno = EEXIST;
        return tg_errf(err, errlen, "%s is no longer the socket just bound", path);
    }
    if ((st.st_mode & 07777) == (mode_t)mode)
        return 0;
    if (fchmodat(AT_FDCWD, path, (mode_t)mode, AT_SYMLINK_NOFOLLOW) != 0) {
        int e = errno;
        tg_errf(err, errlen, "cannot set mode %04o on %s: %s%s", mode, path, strerror(e),
                e == EOPNOTSUPP ? " (needs /proc, or a umask that keeps these bits)" : "");
        errno = e;
        return -1;
    }
    return 0;
}

int tg_addr_listen_err(const struct tg_addr *a, int backlog, unsigned mode, char *err, size_t errlen)
{
    const struct sockaddr_un *sun = (const struct sockaddr_un *)&a->ss;
    int fs_unix = is_fs_unix(a);
    mode &= 07777;
    if (fs_unix) {
        struct stat st;
        if (lstat(sun->sun_path, &st) == 0) {
            if (!S_ISSOCK(st.st_mode)) {
                errno = EEXIST;
                return tg_errf(err, errlen, "%s exists and is not a socket", a->text);
            }
            if (tg_addr_is_live(a)) {
                errno = EADDRINUSE;
                return tg_errf(err, errlen, "%s: a live socket is already there", a->text);
            }
            unlink(sun->sun_path);
        }
    }
    int fd = new_socket(a->family);
    if (fd < 0)
        return tg_errf(err, errlen, "cannot create a socket for %s: %s", a->text, strerror(errno));
    if (a->family != AF_UNIX) {
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (a->family == AF_INET6) {
            int zero = 0;
            setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
        }
    }
    /* Linux creates a UNIX socket's file with the socket's own mode minus the umask: set it
     * first, so the file is never broader than `mode`, not even between bind and chmod. */
    if (fs_unix && mode && fchmod(fd, (mode_t)mode) != 0) {
        tg_errf(err, errlen, "cannot set mode %04o on the socket for %s: %s", mode, a->text, strerror(errno));
        return listen_fail(fd, NULL);
    }
    if (bind(fd, (const struct sockaddr *)&a->ss, a->len) != 0) {
        tg_errf(err, errlen, "cannot bind %s: %s", a->text, strerror(errno));
        return listen_fail(fd, NULL);
    }
    if (fs_unix && mode && set_socket_file_mode(sun->sun_path, mode, err, errlen) != 0)
        return listen_fail(fd, sun->sun_path);
    if (listen(fd, backlog) != 0) {
        tg_errf(err, errlen, "cannot listen on %s: %s", a->text, strerror(errno));
        return listen_fail(fd, fs_unix ? sun->sun_path : NULL);
    }
    return fd;
}

int tg_addr_listen(const struct tg_addr *a, int backlog, unsigned mode)
{
    char err[600];
    int fd = tg_addr_listen_err(a, backlog, mode, err, sizeof err);
    if (fd < 0 && errno != EADDRINUSE) {
        int e = errno;
        tg_error("addr", "%s", err); /* callers only see errno: say which step failed */
        errno = e;
    }
    return fd;
}

/* A non-blocking AF_UNIX connect fails with EAGAIN when the listener's backlog is full (a burst of
 * clients); it never completes later. A blocking connect waits for room: allow it briefly, rather
 * than refusing the client outright. */
static int connect_unix_backlogged(const struct tg_addr *a)
{
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    struct timeval tv = {0, 200 * 1000};
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    if (connect(fd, (const struct sockaddr *)&a->ss, a->len) != 0) {
        int e = errno;
        close(fd);
        errno = e == EINPROGRESS ? EAGAIN : e;
        return -1;
    }
    int fl = fcntl(fd, F_GETFL);
    fcntl(fd, F_SETFL, fl | O_NONBLOCK);
    return fd;
}

int tg_addr_connect(const struct tg_addr *a)
{
    int fd = new_socket(a->family);
    if (fd < 0)
        return -1;
    if (a->family != AF_UNIX) {
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    }
    if (connect(fd, (const struct sockaddr *)&a->ss, a->len) != 0 && errno != EINPROGRESS) {
        int e = errno;
        close(fd);
        if (e == EAGAIN && a->family == AF_UNIX)
            return connect_unix_backlogged(a);
        errno = e;
        return -1;
    }
    return fd;
}

int tg_addr_connect_wait(const struct tg_addr *a, int timeout_ms)
{
    int fd = tg_addr_connect(a);
    if (fd < 0)
        return -1;
    struct pollfd pfd = {.fd = fd, .events = POLLOUT};
    int rc = poll(&pfd, 1, timeout_ms);
    int soerr = 0;
    socklen_t sl = sizeof soerr;
    if (rc <= 0 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) != 0 || soerr != 0) {
        close(fd);
        errno = rc == 0 ? ETIMEDOUT : (soerr ? soerr : errno);
        return -1;
    }
    return fd;
}
