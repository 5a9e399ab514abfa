/* peer_cred.h: who is on the other end of a local connection.
 *
 * UNIX sockets: SO_PEERCRED (uid and pid at connect time, as the kernel
 * recorded them). Loopback TCP (IPv4, IPv6, v4-mapped): the peer socket's
 * owning uid, asked of the kernel with NETLINK_SOCK_DIAG (inet_diag, an
 * exact lookup of the peer's 4-tuple in this network namespace); the pid is
 * not known there. Anything else (a remote address, a lookup the kernel
 * cannot answer, a peer that already went away) is "unknown": callers must
 * then treat the peer as unauthenticated, never as local.
 *
 * Threading: stateless; safe from any thread. The sock_diag lookup is one
 * blocking netlink round trip to the local kernel (microseconds). */
#ifndef TRACEGATE_PEER_CRED_H
#define TRACEGATE_PEER_CRED_H

#include <sys/types.h>

struct tg_peer_cred {
    uid_t uid;
    pid_t pid;      /* -1 when the transport does not tell (TCP) */
    int via_diag;   /* 1 = found by sock_diag (loopback TCP), 0 = SO_PEERCRED */
};

/* Credentials of the peer of connected socket fd. Returns 0 when known,
 * -1 otherwise (errno set). */
int tg_peer_cred_of(int fd, struct tg_peer_cred *out);

#endif
