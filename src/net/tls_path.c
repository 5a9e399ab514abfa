/* tls_path.c: the TLS data path of a connection (kernel TLS on the socket, or records batched
 * into an evbuffer by an OpenSSL filter over a socket bufferevent), the kernel probe that picks
 * it, and the counters of what established connections use (see net/tls.h, tls_path.h). */
#include "net/bulk_read.h"
#include "net/tls_path.h"
#include "net/write_through.h"

#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#ifndef TCP_ULP
#define TCP_ULP 31 /* linux/tcp.h; older libc headers lack it */
#endif

/* Batched path: how much ciphertext may wait in the socket bufferevent (the filter stops
 * encrypting above STAGE_HIGH and resumes at STAGE_LOW, so plaintext waits in the caller's
 * output buffer, where its watermarks and limits apply), and the most one writev/read moves. */
#define STAGE_HIGH (256u << 10)
#define STAGE_LOW (128u << 10)
#define SOCKET_IO_MAX (256u << 10)

static _Atomic int g_path = TG_TLS_PATH_AUTO;

static struct {
    _Atomic uint64_t open, ktls_send, ktls_recv, batched, socket_user;
    _Atomic uint64_t total, total_ktls_send, total_ktls_recv, total_batched;
} g_count;

/* What one connection was counted as (SSL ex_data; freed with the SSL). */
struct conn_state {
    int batched;
    int counted, ktls_send, ktls_recv;
    struct bufferevent *sock; /* batched: the socket bufferevent under the filter */
    struct tg_write_through *wt; /* batched, once the handshake is done: writes sock's output */
};

static int g_ex_index = -1;
static pthread_once_t g_ex_once = PTHREAD_ONCE_INIT;

static void add(_Atomic uint64_t *c, int64_t d)
{
    atomic_fetch_add_explicit(c, (uint64_t)d, memory_order_relaxed);
}

static void count(const struct conn_state *st, int d)
{
    add(&g_count.open, d);
    if (st->ktls_send)
        add(&g_count.ktls_send, d);
    if (st->ktls_recv)
        add(&g_count.ktls_recv, d);
    if (st->batched)
        add(&g_count.batched, d);
    else if (!st->ktls_send && !st->ktls_recv)
        add(&g_count.socket_user, d);
}

static void state_free(void *parent, void *ptr, CRYPTO_EX_DATA *ad, int idx, long argl, void *argp)
{
    (void)parent;
    (void)ad;
    (void)idx;
    (void)argl;
    (void)argp;
    struct conn_state *st = ptr;
    if (!st)
        return;
    if (st->counted)
        count(st, -1);
    /* the filter frees its SSL before it lets go of the socket bufferevent */
    tg_write_through_free(st->wt);
    free(st);
}

static void ex_init(void) { g_ex_index = SSL_get_ex_new_index(0, NULL, NULL, NULL, state_free); }

static void info_cb(const SSL *ssl, int where, int ret)
{
    struct conn_state *st = SSL_get_ex_data(ssl, g_ex_index);
    if (st && st->sock && (where & SSL_CB_WRITE_ALERT) && (ret >> 8) == SSL3_AL_FATAL) {
        /* a fatal alert is the last thing before the caller frees the stream, which drops
         * what is staged: send it now (best effort, non-blocking), so the peer learns why, as
         * it does from OpenSSL on a socket */
        evutil_socket_t fd = bufferevent_getfd(st->sock);
        if (fd >= 0) {
            /* the socket bufferevent keeps its output's front frozen between its own writes */
            struct evbuffer *out = bufferevent_get_output(st->sock);
            evbuffer_unfreeze(out, 1);
            evbuffer_write(out, fd);
            evbuffer_freeze(out, 1);
        }
        return;
    }
    if (!(where & SSL_CB_HANDSHAKE_DONE) || !st || st->counted)
        return;
    st->counted = 1;
    if (!st->batched) {
        /* what OpenSSL got from the kernel while it switched keys (SSL_OP_ENABLE_KTLS) */
        BIO *w = SSL_get_wbio(ssl), *r = SSL_get_rbio(ssl);
        st->ktls_send = w && BIO_get_ktls_send(w);
        st->ktls_recv = r && BIO_get_ktls_recv(r);
    }
    if (st->sock) {
        /* The filter looks at its queues again only when the socket bufferevent reads or writes:
         * records that came in the same read as the end of the handshake would wait for more
         * bytes, and what the caller queued during the handshake for a write that never comes.
         * Have it do both once, deferred (we are inside SSL_do_handshake; when it runs, the
         * filter has its open-state callbacks on the socket bufferevent). */
        bufferevent_trigger(st->sock, EV_READ | EV_WRITE, BEV_TRIG_IGNORE_WATERMARKS | BEV_TRIG_DEFER_CALLBACKS);
        /* connected and keyed: records go out in the loop turn they were made in (no epoll round
         * per reply; NULL: libevent writes them, as before) */
        st->wt = tg_write_through_new(st->sock);
    }
    count(st, 1);
    add(&g_count.total, 1);
    if (st->ktls_send)
        add(&g_count.total_ktls_send, 1);
    if (st->ktls_recv)
        add(&g_count.total_ktls_recv, 1);
    if (st->batched)
        add(&g_count.total_batched, 1);
}

/* ------------------------------------------------------------ kernel */

static int g_kernel = -1;
static pthread_once_t g_kernel_once = PTHREAD_ONCE_INIT;

static void probe_kernel(void)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        g_kernel = 0;
        return;
    }
    /* the ULP is looked up (and its module autoloaded, with CAP_NET_ADMIN) before the state
     * check: ENOTCONN says it exists, ENOENT that it does not */
    int r = setsockopt(fd, IPPROTO_TCP, TCP_ULP, "tls", sizeof "tls");
    int e = errno;
    close(fd);
    g_kernel = r == 0 || e == ENOTCONN;
}

int tg_tls_kernel_offers_ktls(void)
{
    pthread_once(&g_kernel_once, probe_kernel);
    return g_kernel;
}

/* ------------------------------------------------------------ path */

void tg_tls_set_path(enum tg_tls_path path) { atomic_store(&g_path, (int)path); }
enum tg_tls_path tg_tls_get_path(void) { return (enum tg_tls_path)atomic_load(&g_path); }

enum tg_tls_path tg_tls_effective_path(void)
{
    enum tg_tls_path p = tg_tls_get_path();
    if (p == TG_TLS_PATH_AUTO)
        p = tg_tls_kernel_offers_ktls() ? TG_TLS_PATH_SOCKET : TG_TLS_PATH_BATCHED;
    return p;
}

const char *tg_tls_path_name(enum tg_tls_path path)
{
    switch (path) {
    case TG_TLS_PATH_BATCHED: return "batched";
    case TG_TLS_PATH_SOCKET: return "socket";
    default: return "auto";
    }
}

int tg_tls_path_parse(const char *s, enum tg_tls_path *out)
{
    static const enum tg_tls_path all[] = {TG_TLS_PATH_AUTO, TG_TLS_PATH_BATCHED, TG_TLS_PATH_SOCKET};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (strcmp(s, tg_tls_path_name(all[i])) == 0) {
            *out = all[i];
            return 0;
        }
    return -1;
}

void tg_tls_stats_get(struct tg_tls_stats *st)
{
    memset(st, 0, sizeof *st);
    st->kernel_ktls = tg_tls_kernel_offers_ktls();
    st->path = tg_tls_effective_path();
#define LOAD(f) st->f = atomic_load_explicit(&g_count.f, memory_order_relaxed)
    LOAD(open);
    LOAD(ktls_send);
    LOAD(ktls_recv);
    LOAD(batched);
    LOAD(socket_user);
    LOAD(total);
    LOAD(total_ktls_send);
    LOAD(total_ktls_recv);
    LOAD(total_batched);
#undef LOAD
}

int tg_tls_bev_info(struct bufferevent *bev, struct tg_tls_conn_info *info)
{
    memset(info, 0, sizeof *info);
    SSL *ssl = bev ? bufferevent_openssl_get_ssl(bev) : NULL;
    if (!ssl)
        return -1;
    struct conn_state *st = g_ex_index >= 0 ? SSL_get_ex_data(ssl, g_ex_index) : NULL;
    if (st) {
        info->batched = st->batched;
    } else {
        info->batched = bufferevent_get_underlying(bev) != NULL;
    }
    if (!info->batched) {
        BIO *w = SSL_get_wbio(ssl), *r = SSL_get_rbio(ssl);
        info->ktls_send = w && BIO_get_ktls_send(w);
        info->ktls_recv = r && BIO_get_ktls_recv(r);
    }
    const char *v = SSL_get_version(ssl);
    const char *c = SSL_get_cipher_name(ssl);
    snprintf(info->version, sizeof info->version, "%s", v ? v : "");
    snprintf(info->cipher, sizeof info->cipher, "%s", c ? c : "");
    return 0;
}

/* ------------------------------------------------------------ creation */

SSL *tg_tls_path_ssl_new(SSL_CTX *ctx)
{
    pthread_once(&g_ex_once, ex_init);
    if (g_ex_index < 0)
        return NULL;
    SSL *ssl = SSL_new(ctx);
    struct conn_state *st = ssl ? calloc(1, sizeof *st) : NULL;
    if (!st || SSL_set_ex_data(ssl, g_ex_index, st) != 1) {
        free(st);
        SSL_free(ssl);
        return NULL;
    }
    st->batched = tg_tls_effective_path() == TG_TLS_PATH_BATCHED;
    if (!st->batched)
        SSL_set_options(ssl, SSL_OP_ENABLE_KTLS);
    SSL_set_info_callback(ssl, info_cb);
    return ssl;
}

struct bufferevent *tg_tls_path_bev(struct event_base *base, int fd, SSL *ssl, enum bufferevent_ssl_state state)
{
    struct conn_state *st = SSL_get_ex_data(ssl, g_ex_index);
    struct bufferevent *bev;
    if (!st || !st->batched) {
        bev = bufferevent_openssl_socket_new(base, fd, ssl, state, BEV_OPT_CLOSE_ON_FREE | BEV_OPT_DEFER_CALLBACKS);
        if (!bev) {
            SSL_free(ssl);
            if (fd >= 0)
                close(fd);
            return NULL;
        }
    } else {
        /* the socket bufferevent's callbacks only feed the filter: not deferred */
        struct bufferevent *sock = bufferevent_socket_new(base, fd, BEV_OPT_CLOSE_ON_FREE);
        if (!sock) {
            SSL_free(ssl);
            if (fd >= 0)
                close(fd);
            return NULL;
        }
        bufferevent_set_max_single_write(sock, SOCKET_IO_MAX);
        bufferevent_set_max_single_read(sock, SOCKET_IO_MAX);
        tg_bev_bulk_read(sock); /* libevent alone reads 4 KiB per event */
        bev = bufferevent_openssl_filter_new(base, sock, ssl, state, BEV_OPT_CLOSE_ON_FREE | BEV_OPT_DEFER_CALLBACKS);
        if (!bev) {
            SSL_free(ssl);
            bufferevent_free(sock);
            return NULL;
        }
        bufferevent_setwatermark(sock, EV_WRITE, STAGE_LOW, STAGE_HIGH);
        st->sock = sock; /* owned by the filter, which outlives the handshake */
    }
    bufferevent_openssl_set_allow_dirty_shutdown(bev, 1);
    return bev;
}
