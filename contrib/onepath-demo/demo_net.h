/* demo_net.h: the OnePath demo's message framing over a loopback TCP connection: each message
 * is u32 payload length, u32 attachment length (big-endian), the payload, the attachment (the
 * OnePath TLV travels there, never in the payload). Blocking I/O; one thread per program. */
#ifndef ONEPATH_DEMO_NET_H
#define ONEPATH_DEMO_NET_H

#include <stddef.h>
#include <stdint.h>

#define DEMO_MAX_PAYLOAD 4096
#define DEMO_MAX_ATTACH 1024

/* Listens on 127.0.0.1:port (0 = any free port) and writes the port to port_file (written to a
 * temporary name and renamed, so a reader never sees half a number). Returns the socket or -1. */
int demo_listen(int port, const char *port_file);
/* Accepts one connection. -1 on error. */
int demo_accept(int lfd);
/* Connects to 127.0.0.1 at the port in port_file (or the decimal port itself). -1 on error. */
int demo_connect(const char *port_or_file);
/* 0, or -1 on a write error. */
int demo_send(int fd, const void *payload, size_t plen, const void *att, size_t alen);
/* 1 with a message (payload NUL-terminated), 0 at a clean end of stream, -1 on error or an
 * oversized frame. */
int demo_recv(int fd, char *payload, size_t *plen, uint8_t *att, size_t *alen);

#endif
