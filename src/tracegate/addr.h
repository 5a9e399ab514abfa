/* addr.h: Perfetto-style socket addresses.
 *
 * Syntax (as Perfetto's GetSockFamily): a leading '@' is an abstract AF_UNIX
 * name; a trailing ':NNNN' is TCP ("[v6]:port" for IPv6, "host:port" for a
 * name or IPv4); anything else is a filesystem AF_UNIX path. "unix:PATH" and
 * "tcp://host:port" are accepted as explicit forms.
 *
 * Threading: pure functions apart from name resolution (getaddrinfo, which
 * blocks); call them at setup time, not from a busy event loop. */
#ifndef TRACEGATE_ADDR_H
#define TRACEGATE_ADDR_H

#include <stddef.h>
#include <sys/socket.h>
#include <sys/types.h>

struct tg_addr {
    int family; /* AF_UNIX, AF_INET or AF_INET6 */
    struct sockaddr_storage ss;
    socklen_t len;
    char text[256]; /* printable form, e.g. "/tmp/x", "@abs", "127.0.0.1:8037", "[::1]:8037" */
};

/* Parses and resolves s. On error returns -1 and writes a message to err. */
int tg_addr_parse(const char *s, struct tg_addr *out, char *err, size_t errlen);

/* True for AF_UNIX, 127.0.0.0/8 and ::1. */
int tg_addr_is_loopback(const struct tg_addr *a);

/* ---- a connected socket's addresses (getpeername/getsockname), named the same everywhere ---- */

/* True for AF_UNIX, 127.0.0.0/8, ::1 and IPv4-mapped 127.0.0.0/8 (::ffff:127.x.y.z): the one test
 * of a local peer behind every "loopback" decision (limits exempt local clients, peer credentials
 * only exist for local TCP). */
int tg_sockaddr_is_loopback(const struct sockaddr_storage *ss);

/* The numeric host of ss into ip (INET6_ADDRSTRLEN bytes suffice): dotted IPv4, IPv6 without
 * brackets, and an IPv4-mapped IPv6 address as its IPv4 form, so an IPv4 client of a dual-stack
 * listener is the same source as on an IPv4 listener (per-source limits count it once); "?" for
 * other families. *port (may be NULL) gets the port, 0 when there is none. */
void tg_sockaddr_host(const struct sockaddr_storage *ss, char *ip, size_t len, unsigned *port);

/* "HOST:PORT", or "[HOST]:PORT" for IPv6, with HOST as tg_sockaddr_host names it; "?" for other
 * families. */
void tg_sockaddr_text(const struct sockaddr_storage *ss, char *out, size_t len);

/* Creates a non-blocking, close-on-exec listening socket. For filesystem
 * UNIX paths a stale socket file is removed first (a live one is refused:
 * returns -1 with errno EADDRINUSE) and the file gets `mode` (0 = leave it
 * to the umask) before the socket listens: it is created no broader than
 * `mode` (the socket's mode is set before bind; Linux applies it, minus the
 * umask, to the new file) and set to exactly `mode` (no symlink followed)
 * before listen(), so nobody can connect under a broader mode. Failing to
 * set the mode fails the call (the file is removed). `mode` has no effect
 * on abstract names (@name): nothing restricts who connects to those.
 * tg_addr_listen logs the reason of a failure other than EADDRINUSE;
 * tg_addr_listen_err writes it to err instead. Both set errno. */
int tg_addr_listen(const struct tg_addr *a, int backlog, unsigned mode);
int tg_addr_listen_err(const struct tg_addr *a, int backlog, unsigned mode, char *err, size_t errlen);

/* True if something accepts connections at a (used to avoid stealing a
 * running traced's sockets). */
int tg_addr_is_live(const struct tg_addr *a);

/* Starts a non-blocking connect; returns the fd (connection may still be in
 * progress: EINPROGRESS is not an error) or -1. */
int tg_addr_connect(const struct tg_addr *a);

/* Blocking connect with a timeout in ms; returns a non-blocking fd or -1. */
int tg_addr_connect_wait(const struct tg_addr *a, int timeout_ms);

#endif
