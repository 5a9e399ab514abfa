/* test_ws_rawclient.h: a minimal blocking HTTP/WebSocket client for the
 * WebSocket tests, written against RFC 6455 directly (not libwebsockets),
 * so the tests can send exactly the messages they want (split frames,
 * text, oversize) and see raw HTTP answers. Loopback only. */
#ifndef TEST_WS_RAWCLIENT_H
#define TEST_WS_RAWCLIENT_H

#include <stddef.h>
#include <stdint.h>

enum { TWS_CONT = 0, TWS_TEXT = 1, TWS_BINARY = 2, TWS_CLOSE = 8, TWS_PING = 9, TWS_PONG = 10 };

/* One HTTP request to 127.0.0.1:port. extra: more header lines, each ending
 * in "\r\n" (may be NULL). Returns the status (or -1); resp gets the whole
 * response, NUL-terminated. */
int tws_http(int port, const char *method, const char *path, const char *extra, char *resp, size_t cap);
/* The same with this Host header value (NULL: no Host header). */
int tws_http_host(int port, const char *method, const char *path, const char *host, const char *extra, char *resp,
                  size_t cap);
/* A plain TCP connection to 127.0.0.1:port (TCP_NODELAY), or -1. */
int tws_connect(int port);

/* WebSocket handshake. origin/protocols may be NULL (header left out).
 * Returns the HTTP status (101 = open: *fd is the socket) or -1; resp gets
 * the response head. */
int tws_open(int port, const char *path, const char *origin, const char *protocols, int *fd, char *resp,
             size_t cap);
/* The same with this Host header value (NULL: no Host header). */
int tws_open_host(int port, const char *path, const char *host, const char *origin, const char *protocols, int *fd,
                  char *resp, size_t cap);

/* tws_open, with `early` (at most 1 KiB: e.g. a frame) sent in the same write as the request,
 * before the server's answer (RFC 6455 4.1 says a client must wait for it; some do not). */
int tws_open_early(int port, const char *path, const void *early, size_t early_len, int *fd, char *resp, size_t cap);

/* Sends one masked frame. */
int tws_send_frame(int fd, int opcode, int fin, const void *data, size_t len);
/* One message in one frame. */
int tws_send(int fd, int opcode, const void *data, size_t len);
/* One IPC frame ([u32 LE len][body]) as one binary message. */
int tws_send_ipc(int fd, const void *body, size_t len);

/* Receives one frame (waiting up to timeout_ms). Returns its opcode, or -1
 * on EOF/timeout/error. *payload is malloc'd (free it). */
int tws_recv(int fd, uint8_t **payload, size_t *len, int timeout_ms);
/* Receives binary messages until one whole IPC frame is in; returns its
 * body (malloc'd) and length, or -1. Extra bytes stay in a per-fd buffer. */
int tws_recv_ipc(int fd, uint8_t **body, size_t *len, int timeout_ms);
/* Close code of a received close payload (or -1). */
int tws_close_code(const uint8_t *payload, size_t len);
/* Forgets the per-fd buffer and closes fd. */
void tws_close(int fd);

#endif
