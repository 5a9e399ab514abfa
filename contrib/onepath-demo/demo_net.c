/* demo_net.c: loopback TCP and the demo's message framing (see demo_net.h). */
#include "demo_net.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

int demo_listen(int port, const char *port_file)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons((uint16_t)port);
    socklen_t al = sizeof a;
    if (bind(fd, (struct sockaddr *)&a, sizeof a) != 0 || listen(fd, 4) != 0 ||
        getsockname(fd, (struct sockaddr *)&a, &al) != 0) {
        close(fd);
        return -1;
    }
    if (port_file) {
        char tmp[4096];
        snprintf(tmp, sizeof tmp, "%s.tmp", port_file);
        FILE *f = fopen(tmp, "w");
        if (!f || fprintf(f, "%d\n", ntohs(a.sin_port)) < 0 || fclose(f) != 0 || rename(tmp, port_file) != 0) {
            close(fd);
            return -1;
        }
    }
    return fd;
}

int demo_accept(int lfd)
{
    for (;;) {
        int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
        if (fd >= 0 || errno != EINTR)
            return fd;
    }
}

int demo_connect(const char *port_or_file)
{
    long port = 0;
    char *end;
    port = strtol(port_or_file, &end, 10);
    if (*end || end == port_or_file) {
        FILE *f = fopen(port_or_file, "r");
        if (!f || fscanf(f, "%ld", &port) != 1)
            port = 0;
        if (f)
            fclose(f);
    }
    if (port <= 0 || port > 65535)
        return -1;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons((uint16_t)port);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static int write_all(int fd, const void *p, size_t n)
{
    const char *c = p;
    while (n) {
        ssize_t w = send(fd, c, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        c += w;
        n -= (size_t)w;
    }
    return 0;
}

/* 1 = all n bytes, 0 = end of stream before the first byte, -1 = error or a short frame */
static int read_all(int fd, void *p, size_t n)
{
    char *c = p;
    size_t got = 0;
    while (got < n) {
        ssize_t r = recv(fd, c + got, n - got, 0);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return -1;
        if (r == 0)
            return got == 0 ? 0 : -1;
        got += (size_t)r;
    }
    return 1;
}

int demo_send(int fd, const void *payload, size_t plen, const void *att, size_t alen)
{
    uint32_t h[2] = {htonl((uint32_t)plen), htonl((uint32_t)alen)};
    if (write_all(fd, h, sizeof h) || write_all(fd, payload, plen) || (alen && write_all(fd, att, alen)))
        return -1;
    return 0;
}

int demo_recv(int fd, char *payload, size_t *plen, uint8_t *att, size_t *alen)
{
    uint32_t h[2];
    int r = read_all(fd, h, sizeof h);
    if (r <= 0)
        return r;
    *plen = ntohl(h[0]);
    *alen = ntohl(h[1]);
    if (*plen >= DEMO_MAX_PAYLOAD || *alen > DEMO_MAX_ATTACH)
        return -1;
    if ((*plen && read_all(fd, payload, *plen) != 1) || (*alen && read_all(fd, att, *alen) != 1))
        return -1;
    payload[*plen] = 0;
    return 1;
}
