/* peer_cred.c: the uid (and pid) of a local peer: SO_PEERCRED on UNIX sockets, an exact inet_diag
 * lookup of the peer's socket over NETLINK_SOCK_DIAG on loopback TCP (see peer_cred.h). */
#include "tracegate/peer_cred.h"
#include "tracegate/addr.h"

#include <errno.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

/* Fills one side of an inet_diag socket id. A v4-mapped IPv6 address is
 * turned into plain IPv4 (the peer's own socket is then an AF_INET one). */
static void put_addr(const struct sockaddr_storage *ss, int family, __be16 *port, __be32 addr[4])
{
    memset(addr, 0, 16);
    if (ss->ss_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)ss;
        *port = in->sin_port;
        addr[0] = in->sin_addr.s_addr;
        return;
    }
    const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)ss;
    *port = in6->sin6_port;
    if (family == AF_INET)
        memcpy(&addr[0], &in6->sin6_addr.s6_addr[12], 4);
    else
        memcpy(addr, &in6->sin6_addr, 16);
}

static int family_of(const struct sockaddr_storage *ss)
{
    if (ss->ss_family == AF_INET6 && IN6_IS_ADDR_V4MAPPED(&((const struct sockaddr_in6 *)ss)->sin6_addr))
        return AF_INET;
    return ss->ss_family;
}

/* Asks the kernel for the socket whose local end is `peer` and remote end
 * is `self`: the client's socket, owned by the client's uid. */
static int diag_lookup(const struct sockaddr_storage *peer, const struct sockaddr_storage *self, uid_t *uid)
{
    int family = family_of(peer);
    if (family != family_of(self)) {
        errno = EAFNOSUPPORT;
        return -1;
    }
    int nl = socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
    if (nl < 0)
        return -1;
    struct timeval tv = {.tv_sec = 1, .tv_usec = 0}; /* a kernel answer is immediate; never hang */
    setsockopt(nl, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);

    struct {
        struct nlmsghdr nlh;
        struct inet_diag_req_v2 req;
    } msg;
    memset(&msg, 0, sizeof msg);
    msg.nlh.nlmsg_len = sizeof msg;
    msg.nlh.nlmsg_type = SOCK_DIAG_BY_FAMILY;
    msg.nlh.nlmsg_flags = NLM_F_REQUEST; /* an exact lookup, not a dump */
    msg.nlh.nlmsg_seq = 1;
    msg.req.sdiag_family = (__u8)family;
    msg.req.sdiag_protocol = IPPROTO_TCP;
    msg.req.idiag_states = ~0u;
    put_addr(peer, family, &msg.req.id.idiag_sport, msg.req.id.idiag_src);
    put_addr(self, family, &msg.req.id.idiag_dport, msg.req.id.idiag_dst);
    msg.req.id.idiag_cookie[0] = INET_DIAG_NOCOOKIE;
    msg.req.id.idiag_cookie[1] = INET_DIAG_NOCOOKIE;

    struct sockaddr_nl kernel = {.nl_family = AF_NETLINK};
    if (sendto(nl, &msg, sizeof msg, 0, (struct sockaddr *)&kernel, sizeof kernel) < 0) {
        int e = errno;
        close(nl);
        errno = e;
        return -1;
    }
    union {
        struct nlmsghdr h;
        char buf[8192];
    } rx;
    ssize_t n = recv(nl, &rx, sizeof rx, 0);
    int e = errno;
    close(nl);
    if (n < 0) {
        errno = e;
        return -1;
    }
    for (struct nlmsghdr *h = &rx.h; NLMSG_OK(h, (size_t)n); h = NLMSG_NEXT(h, n)) {
        if (h->nlmsg_type == NLMSG_ERROR) {
            const struct nlmsgerr *err = NLMSG_DATA(h);
            errno = h->nlmsg_len >= NLMSG_LENGTH(sizeof *err) && err->error ? -err->error : ENOENT;
            return -1;
        }
        if (h->nlmsg_type != SOCK_DIAG_BY_FAMILY || h->nlmsg_len < NLMSG_LENGTH(sizeof(struct inet_diag_msg)))
            continue;
        const struct inet_diag_msg *m = NLMSG_DATA(h);
        /* the kernel matched the exact 4-tuple; check it answered about that socket */
        if (m->id.idiag_sport != msg.req.id.idiag_sport || m->id.idiag_dport != msg.req.id.idiag_dport ||
            memcmp(m->id.idiag_src, msg.req.id.idiag_src, family == AF_INET ? 4 : 16) != 0) {
            errno = ENOENT;
            return -1;
        }
        /* a closed socket lingering in TIME_WAIT (or FIN_WAIT2 after close) is a minisock the kernel
         * reports with uid 0 and no inode: that is nobody, never root */
        if (m->idiag_inode == 0) {
            errno = ENOTCONN;
            return -1;
        }
        *uid = m->idiag_uid;
        return 0;
    }
    errno = ENOENT;
    return -1;
}

int tg_peer_cred_of(int fd, struct tg_peer_cred *out)
{
    struct sockaddr_storage self, peer;
    socklen_t sl = sizeof self, pl = sizeof peer;
    if (getsockname(fd, (struct sockaddr *)&self, &sl) != 0)
        return -1;
    if (self.ss_family == AF_UNIX) {
        struct ucred cred;
        socklen_t cl = sizeof cred;
        if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cl) != 0)
            return -1;
        out->uid = cred.uid;
        out->pid = cred.pid;
        out->via_diag = 0;
        return 0;
    }
    if (getpeername(fd, (struct sockaddr *)&peer, &pl) != 0)
        return -1;
    if (!tg_sockaddr_is_loopback(&peer) || !tg_sockaddr_is_loopback(&self)) {
        errno = EPERM; /* not a local peer: nothing the kernel can vouch for */
        return -1;
    }
    uid_t uid;
    if (diag_lookup(&peer, &self, &uid) != 0)
        return -1;
    out->uid = uid;
    out->pid = -1;
    out->via_diag = 1;
    return 0;
}
