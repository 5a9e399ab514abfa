/* test_net_tls_path.c: the TLS data paths of net/tls.h (batched records; OpenSSL on the socket
 * with kernel TLS requested): a reader that stops reading makes the sender's queue stop at its
 * watermark while another connection is served, then gets every byte intact and in order (or,
 * when it resets instead, the server's side ends and the server goes on serving); many
 * small frames both ways arrive intact; on the batched path a reply queued by a callback on an idle
 * connection is on the wire when that loop turn ends; the kTLS counters match what the kernel says about each
 * socket (getsockopt SOL_TLS), and the kernel probe matches the test's own. */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "net/tls.h"
#include "tg_test_util.h"
#include "tracegate/frame.h"

#ifndef TCP_ULP
#define TCP_ULP 31
#endif
#ifndef SOL_TLS
#define SOL_TLS 282
#endif
#define TLS_TX_OPT 1 /* linux/tls.h TLS_TX, TLS_RX */
#define TLS_RX_OPT 2

#define OUT_HIGH (256u << 10)
#define OUT_LOW (64u << 10)
#define SOCKBUF (64 << 10)
#define MAX_BODY 60000u

static char g_pki[256];

static size_t body_size(uint32_t i, size_t max) { return 4 + ((size_t)i * 7919u) % (max - 4 + 1); }

static void fill_body(uint8_t *b, uint32_t i, size_t len)
{
    memcpy(b, &i, 4);
    for (size_t j = 4; j < len; j++)
        b[j] = (uint8_t)(i * 31u + j * 7u);
}

/* 0 if body is frame i of a stream whose frames are at most max bytes */
static int check_body(const uint8_t *b, size_t len, uint32_t i, size_t max)
{
    uint32_t got;
    if (len < 4 || len != body_size(i, max))
        return -1;
    memcpy(&got, b, 4);
    if (got != i)
        return -1;
    for (size_t j = 4; j < len; j++)
        if (b[j] != (uint8_t)(i * 31u + j * 7u))
            return -1;
    return 0;
}

/* ------------------------------------------------------------ server */

enum srv_mode { SRV_STREAM, SRV_ECHO };

struct srv_conn {
    struct server *s;
    tg_conn *c;
    uint32_t next, n; /* stream: frames sent / to send */
    size_t max_queued;
    int congested_seen, closed;
    uint32_t echoed, bad;
};

struct server {
    struct event_base *base;
    struct tg_tls_server *tls;
    struct evconnlistener *l;
    int port;
    enum srv_mode mode;
    uint32_t frames, max_body;
    struct srv_conn conns[4];
    int n_conns, failed;
    int sock_fds[4], n_accepted; /* accepted sockets, in order */
};

static void srv_pump(struct srv_conn *sc)
{
    static uint8_t buf[MAX_BODY];
    while (sc->next < sc->n && !tg_conn_is_congested(sc->c) && !tg_conn_is_closing(sc->c)) {
        size_t len = body_size(sc->next, sc->s->max_body);
        fill_body(buf, sc->next, len);
        assert_int_equal(tg_conn_send(sc->c, buf, len, -1), 0);
        sc->next++;
        size_t q = tg_conn_output_len(sc->c);
        if (q > sc->max_queued)
            sc->max_queued = q;
    }
    if (tg_conn_is_congested(sc->c))
        sc->congested_seen = 1;
}

static void srv_drain(tg_conn *c, void *arg)
{
    (void)c;
    srv_pump(arg);
}

static void srv_frame(tg_conn *c, const uint8_t *body, size_t len, void *arg)
{
    struct srv_conn *sc = arg;
    if (sc->s->mode != SRV_ECHO)
        return;
    if (check_body(body, len, sc->echoed, sc->s->max_body) != 0)
        sc->bad++;
    sc->echoed++;
    tg_conn_send(c, body, len, -1);
}

static void srv_closed(tg_conn *c, const char *reason, void *arg)
{
    (void)c;
    (void)reason;
    struct srv_conn *sc = arg;
    sc->closed = 1;
    sc->c = NULL;
}

static const struct tg_conn_cbs k_srv = {.on_frame = srv_frame, .on_drain = srv_drain, .on_close = srv_closed};

static void on_handshake(void *arg, tg_conn *c, const struct tg_tls_peer *peer, const char *error)
{
    struct server *s = arg;
    (void)peer;
    (void)error;
    if (!c) {
        s->failed++;
        return;
    }
    assert_true(s->n_conns < 4);
    struct srv_conn *sc = &s->conns[s->n_conns++];
    sc->s = s;
    sc->c = c;
    sc->n = s->mode == SRV_STREAM ? s->frames : 0;
    tg_conn_set_cbs(c, &k_srv, sc);
    srv_pump(sc);
}

static void on_accept(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa, int salen, void *arg)
{
    struct server *s = arg;
    (void)l;
    (void)sa;
    (void)salen;
    int sz = SOCKBUF;
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sz, sizeof sz); /* small: the queues, not the kernel, fill */
    s->sock_fds[s->n_accepted++ % 4] = fd;
    struct tg_conn_opts o;
    tg_conn_opts_default(&o);
    o.out_high = OUT_HIGH;
    o.out_low = OUT_LOW;
    tg_tls_server_accept(s->tls, s->base, fd, tg_test_ms(10000), &o, on_handshake, s);
}

static void server_start(struct server *s, enum srv_mode mode, uint32_t frames, uint32_t max_body)
{
    memset(s, 0, sizeof *s);
    s->mode = mode;
    s->frames = frames;
    s->max_body = max_body;
    s->base = event_base_new();
    char cert[300], key[300], err[256];
    snprintf(cert, sizeof cert, "%s/server.crt", g_pki);
    snprintf(key, sizeof key, "%s/server.key", g_pki);
    struct tg_tls_server_config cfg = {.cert_file = cert, .key_file = key};
    s->tls = tg_tls_server_new(&cfg, err, sizeof err);
    assert_non_null(s->tls);
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    s->l = evconnlistener_new_bind(s->base, on_accept, s, LEV_OPT_CLOSE_ON_FREE | LEV_OPT_REUSEABLE, 16,
                                   (struct sockaddr *)&sin, sizeof sin);
    assert_non_null(s->l);
    socklen_t sl = sizeof sin;
    getsockname(evconnlistener_get_fd(s->l), (struct sockaddr *)&sin, &sl);
    s->port = ntohs(sin.sin_port);
}

static void server_stop(struct server *s)
{
    for (int i = 0; i < s->n_conns; i++)
        if (s->conns[i].c)
            tg_conn_destroy(s->conns[i].c);
    evconnlistener_free(s->l);
    tg_tls_server_free(s->tls);
    event_base_free(s->base);
}

/* ------------------------------------------------------------ client */

struct client {
    tg_conn *c;
    uint32_t got, bad, stop_after; /* stop_after: pause reading after that many frames (0 = never) */
    uint64_t bytes;
    uint32_t max_body;
    int fd, closed;
    char reason[200];
};

static void cli_frame(tg_conn *c, const uint8_t *body, size_t len, void *arg)
{
    struct client *cl = arg;
    if (check_body(body, len, cl->got, cl->max_body) != 0)
        cl->bad++;
    cl->got++;
    cl->bytes += len;
    if (cl->stop_after && cl->got == cl->stop_after)
        tg_conn_pause_read(c); /* stops reading the socket */
}

static void cli_closed(tg_conn *c, const char *reason, void *arg)
{
    (void)c;
    struct client *cl = arg;
    cl->closed = 1;
    cl->c = NULL;
    snprintf(cl->reason, sizeof cl->reason, "%s", reason);
}

static const struct tg_conn_cbs k_cli = {.on_frame = cli_frame, .on_close = cli_closed};

static void client_open(struct server *s, struct client *cl, uint32_t max_body, uint32_t stop_after)
{
    memset(cl, 0, sizeof *cl);
    cl->max_body = max_body;
    cl->stop_after = stop_after;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    int sz = SOCKBUF;
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &sz, sizeof sz);
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons((uint16_t)s->port),
                              .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    assert_int_equal(connect(fd, (struct sockaddr *)&sin, sizeof sin), 0);
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    cl->fd = fd;
    char ca[300], err[256];
    snprintf(ca, sizeof ca, "%s/ca.crt", g_pki);
    struct tg_tls_client_config cfg = {.ca_file = ca, .server_name = "localhost"};
    struct tg_conn_opts o;
    tg_conn_opts_default(&o);
    o.out_high = OUT_HIGH;
    o.out_low = OUT_LOW;
    cl->c = tg_tls_client_conn(s->base, fd, &cfg, &o, err, sizeof err);
    assert_non_null(cl->c);
    tg_conn_set_cbs(cl->c, &k_cli, cl);
}

/* ------------------------------------------------------------ waits */

/* a client got n frames (or was closed) */
struct got_wait {
    struct server *s;
    struct client *cl;
    uint32_t n;
};

static int got_all(void *arg)
{
    struct got_wait *w = arg;
    return w->cl->got == w->n || w->cl->closed;
}

/* ------------------------------------------------------------ slow reader */

struct slow_wait {
    struct server *s;
    struct client *fast, *slow;
};

static int slow_stalled_fast_done(void *arg)
{
    struct slow_wait *w = arg;
    struct srv_conn *ss = NULL;
    for (int i = 0; i < w->s->n_conns; i++)
        if (w->s->conns[i].n && w->s->conns[i].c && w->slow->got >= w->slow->stop_after &&
            tg_conn_is_congested(w->s->conns[i].c) && w->s->conns[i].next < w->s->conns[i].n)
            ss = &w->s->conns[i];
    return ss && w->fast->got == w->s->frames;
}

#define SLOW_FRAMES 400u /* ~12 MB: far more than socket buffers, staging and out_high */

/* Two clients of one stream server: `slow` stops reading after 5 frames, and its sender stalls at
 * the watermark while `fast` gets its whole stream. Returns the stalled server side. */
static struct srv_conn *stall_slow_reader(enum tg_tls_path path, struct server *s, struct client *slow,
                                          struct client *fast)
{
    tg_tls_set_path(path);
    server_start(s, SRV_STREAM, SLOW_FRAMES, MAX_BODY);
    client_open(s, slow, MAX_BODY, 5);
    client_open(s, fast, MAX_BODY, 0);
    struct slow_wait w = {s, fast, slow};
    assert_true(tg_test_run_until(s->base, slow_stalled_fast_done, &w, 30000));
    assert_int_equal(fast->bad, 0);
    assert_int_equal(slow->got, 5);
    struct srv_conn *ss = NULL;
    for (int i = 0; i < s->n_conns; i++)
        if (s->conns[i].next < s->conns[i].n)
            ss = &s->conns[i];
    assert_non_null(ss);
    return ss;
}

static void slow_reader(enum tg_tls_path path)
{
    struct server s;
    struct client slow, fast;
    const uint32_t frames = SLOW_FRAMES;
    struct srv_conn *ss = stall_slow_reader(path, &s, &slow, &fast);
    assert_true(ss->congested_seen);
    /* the queue stopped at its limit: never more than the high watermark plus one frame */
    assert_true(ss->max_queued <= OUT_HIGH + MAX_BODY + TG_FRAME_HEADER_SIZE);
    assert_true(tg_conn_output_len(ss->c) <= OUT_HIGH + MAX_BODY + TG_FRAME_HEADER_SIZE);
    /* the reader resumes: every frame arrives intact and in order */
    tg_conn_resume_read(slow.c);
    struct got_wait w = {&s, &slow, frames};
    assert_true(tg_test_run_until(s.base, got_all, &w, 60000));
    assert_false(slow.closed);
    assert_int_equal(slow.got, frames);
    assert_int_equal(slow.bad, 0);
    uint64_t want = 0;
    for (uint32_t i = 0; i < frames; i++)
        want += body_size(i, MAX_BODY);
    assert_int_equal(slow.bytes, want);
    assert_int_equal(fast.bytes, want);
    tg_conn_destroy(slow.c);
    tg_conn_destroy(fast.c);
    server_stop(&s);
}

static int server_side_closed(void *arg) { return ((struct srv_conn *)arg)->closed; }

/* A reader that stopped, with records waiting on the server for writability, then resets its
 * connection: the server's side ends with an error (no hang, no spin), and the server goes on
 * serving a new client its whole stream. */
static void stalled_reader_resets(enum tg_tls_path path)
{
    struct server s;
    struct client slow, fast;
    struct srv_conn *ss = stall_slow_reader(path, &s, &slow, &fast);
    struct linger lg = {1, 0}; /* close sends a reset */
    assert_int_equal(setsockopt(slow.fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg), 0);
    tg_conn_destroy(slow.c);
    assert_true(tg_test_run_until(s.base, server_side_closed, ss, 30000));
    struct client fresh;
    client_open(&s, &fresh, MAX_BODY, 0);
    struct got_wait fw = {&s, &fresh, SLOW_FRAMES};
    assert_true(tg_test_run_until(s.base, got_all, &fw, 60000));
    assert_false(fresh.closed);
    assert_int_equal(fresh.got, SLOW_FRAMES);
    assert_int_equal(fresh.bad, 0);
    assert_int_equal(fast.got, SLOW_FRAMES);
    tg_conn_destroy(fresh.c);
    tg_conn_destroy(fast.c);
    server_stop(&s);
    tg_tls_set_path(TG_TLS_PATH_AUTO);
}

static void test_stalled_reader_resets_batched(void **state)
{
    (void)state;
    stalled_reader_resets(TG_TLS_PATH_BATCHED);
}

static void test_slow_reader_batched(void **state)
{
    (void)state;
    slow_reader(TG_TLS_PATH_BATCHED);
}

static void test_slow_reader_socket(void **state)
{
    (void)state;
    slow_reader(TG_TLS_PATH_SOCKET);
}

/* ------------------------------------------------------------ small frames */

static void small_frames(enum tg_tls_path path)
{
    tg_tls_set_path(path);
    struct server s;
    struct client cl;
    const uint32_t n = 20000, max = 100;
    server_start(&s, SRV_ECHO, 0, max);
    client_open(&s, &cl, max, 0);
    uint8_t buf[100];
    for (uint32_t i = 0; i < n; i++) { /* all queued at once (before the handshake is done) */
        size_t len = body_size(i, max);
        fill_body(buf, i, len);
        assert_int_equal(tg_conn_send(cl.c, buf, len, -1), 0);
    }
    struct got_wait w = {&s, &cl, n};
    assert_true(tg_test_run_until(s.base, got_all, &w, 30000));
    assert_false(cl.closed);
    assert_int_equal(s.n_conns, 1);
    assert_int_equal(s.conns[0].echoed, n);
    assert_int_equal(s.conns[0].bad, 0);
    assert_int_equal(cl.got, n);
    assert_int_equal(cl.bad, 0);
    tg_conn_destroy(cl.c);
    server_stop(&s);
}

static void test_small_frames_batched(void **state)
{
    (void)state;
    small_frames(TG_TLS_PATH_BATCHED);
}

static void test_small_frames_socket(void **state)
{
    (void)state;
    small_frames(TG_TLS_PATH_SOCKET);
}

/* ------------------------------------------------------------ same-turn replies */

struct reply_job {
    tg_conn *c;
    uint32_t i;
};

static void send_reply_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct reply_job *j = arg;
    uint8_t buf[100];
    size_t len = body_size(j->i, 100);
    fill_body(buf, j->i, len);
    assert_int_equal(tg_conn_send(j->c, buf, len, -1), 0);
}

/* A reply queued by a callback on an idle connection is on the wire when that loop turn ends
 * (libevent's socket bufferevent alone would add write interest and write it a turn later). The
 * batched path only: libevent 2.1's bufferevent_openssl on a socket (the socket path) writes only
 * from its write event, a turn later (docs/gateway.md, "TLS data path"). */
static void reply_in_its_turn(enum tg_tls_path path)
{
    tg_tls_set_path(path);
    struct server s;
    struct client cl;
    server_start(&s, SRV_ECHO, 0, 100);
    client_open(&s, &cl, 100, 0);
    uint8_t buf[100];
    size_t len = body_size(0, 100);
    fill_body(buf, 0, len);
    assert_int_equal(tg_conn_send(cl.c, buf, len, -1), 0);
    struct got_wait w = {&s, &cl, 1};
    assert_true(tg_test_run_until(s.base, got_all, &w, 30000));
    assert_int_equal(cl.got, 1);
    for (uint32_t i = 1; i <= 3; i++) {
        uint8_t peek[64];
        assert_true(recv(cl.fd, peek, sizeof peek, MSG_PEEK | MSG_DONTWAIT) < 0); /* idle */
        struct reply_job j = {s.conns[0].c, i};
        struct event *ev = event_new(s.base, -1, 0, send_reply_cb, &j);
        assert_non_null(ev);
        event_active(ev, EV_TIMEOUT, 0);
        assert_int_equal(event_base_loop(s.base, EVLOOP_ONCE | EVLOOP_NONBLOCK), 0);
        event_free(ev);
        /* no more loop turns: bytes still queued in the server would never come. The wait is for
         * loopback delivery, which a busy kernel may finish in ksoftirqd after the write returned. */
        struct pollfd pfd = {.fd = cl.fd, .events = POLLIN};
        assert_int_equal(poll(&pfd, 1, tg_test_ms(5000)), 1);
        assert_true(recv(cl.fd, peek, sizeof peek, MSG_PEEK | MSG_DONTWAIT) > 0);
        /* the client reads it (the server echoes nothing back: it only echoes the client) */
        struct got_wait wi = {&s, &cl, 1 + i};
        assert_true(tg_test_run_until(s.base, got_all, &wi, 30000));
    }
    assert_int_equal(cl.got, 4);
    assert_int_equal(cl.bad, 0);
    tg_conn_destroy(cl.c);
    server_stop(&s);
    tg_tls_set_path(TG_TLS_PATH_AUTO);
}

static void test_reply_in_its_turn_batched(void **state)
{
    (void)state;
    reply_in_its_turn(TG_TLS_PATH_BATCHED);
}

/* ------------------------------------------------------------ kTLS truth */

/* The test's own look at the kernel: can a connected TCP socket take the tls ULP? */
static int kernel_takes_tls_ulp(void)
{
    int l = socket(AF_INET, SOCK_STREAM, 0), c = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t sl = sizeof sin;
    assert_int_equal(bind(l, (struct sockaddr *)&sin, sizeof sin), 0);
    assert_int_equal(listen(l, 1), 0);
    getsockname(l, (struct sockaddr *)&sin, &sl);
    assert_int_equal(connect(c, (struct sockaddr *)&sin, sizeof sin), 0);
    int a = accept(l, NULL, NULL);
    int ok = setsockopt(c, IPPROTO_TCP, TCP_ULP, "tls", sizeof "tls") == 0;
    close(a);
    close(c);
    close(l);
    return ok;
}

/* What the kernel says a socket does: TLS_TX / TLS_RX configured (getsockopt answers only then). */
static void kernel_socket_tls(int fd, int *tx, int *rx)
{
    uint8_t info[64];
    socklen_t l = sizeof info;
    *tx = getsockopt(fd, SOL_TLS, TLS_TX_OPT, info, &l) == 0;
    l = sizeof info;
    *rx = getsockopt(fd, SOL_TLS, TLS_RX_OPT, info, &l) == 0;
}

static int one_up(void *arg)
{
    struct server *s = arg;
    return s->n_conns == 1 || s->failed;
}

static void test_ktls_state_is_truthful(void **state)
{
    (void)state;
    int kernel = kernel_takes_tls_ulp();
    assert_int_equal(tg_tls_kernel_offers_ktls(), kernel);
    tg_tls_set_path(TG_TLS_PATH_AUTO);
    assert_int_equal(tg_tls_effective_path(), kernel ? TG_TLS_PATH_SOCKET : TG_TLS_PATH_BATCHED);

    for (int round = 0; round < 2; round++) {
        enum tg_tls_path path = round ? TG_TLS_PATH_SOCKET : TG_TLS_PATH_BATCHED;
        tg_tls_set_path(path);
        struct tg_tls_stats before;
        tg_tls_stats_get(&before);
        struct server s;
        struct client cl;
        server_start(&s, SRV_ECHO, 0, 100);
        client_open(&s, &cl, 100, 0);
        uint8_t buf[100];
        fill_body(buf, 0, body_size(0, 100));
        tg_conn_send(cl.c, buf, body_size(0, 100), -1);
        struct got_wait w = {&s, &cl, 1};
        assert_true(tg_test_run_until(s.base, one_up, &s, 10000));
        assert_true(tg_test_run_until(s.base, got_all, &w, 10000)); /* both handshakes are done */
        struct tg_tls_stats st;
        tg_tls_stats_get(&st);
        assert_int_equal(st.kernel_ktls, kernel);
        assert_int_equal(st.open, before.open + 2); /* the client and the server end */
        /* per socket, what the kernel itself says */
        assert_int_equal(s.n_accepted, 1);
        int fds[2] = {s.sock_fds[0], cl.fd};
        int tx_n = 0, rx_n = 0;
        for (int i = 0; i < 2; i++) {
            int tx, rx;
            kernel_socket_tls(fds[i], &tx, &rx);
            tx_n += tx;
            rx_n += rx;
        }
        assert_int_equal(st.ktls_send - before.ktls_send, (uint64_t)tx_n);
        assert_int_equal(st.ktls_recv - before.ktls_recv, (uint64_t)rx_n);
        if (path == TG_TLS_PATH_BATCHED) {
            assert_int_equal(tx_n + rx_n, 0); /* the filter never hands keys to the kernel */
            assert_int_equal(st.batched - before.batched, 2);
        } else {
            assert_int_equal(st.batched, before.batched);
            if (!kernel)
                assert_int_equal(st.socket_user - before.socket_user, 2); /* fell back silently */
            else
                assert_int_equal(tx_n, 2); /* TLS 1.3 AES-GCM: OpenSSL 3.0 gives the kernel sending */
        }
        struct tg_tls_conn_info ci;
        assert_int_equal(tg_tls_bev_info(NULL, &ci), -1);
        tg_conn_destroy(cl.c);
        server_stop(&s);
        tg_tls_stats_get(&st);
        assert_int_equal(st.open, before.open); /* uncounted when their SSL went */
    }
    tg_tls_set_path(TG_TLS_PATH_AUTO);
}

static void test_path_names(void **state)
{
    (void)state;
    enum tg_tls_path p;
    assert_int_equal(tg_tls_path_parse("batched", &p), 0);
    assert_int_equal(p, TG_TLS_PATH_BATCHED);
    assert_int_equal(tg_tls_path_parse("socket", &p), 0);
    assert_int_equal(p, TG_TLS_PATH_SOCKET);
    assert_int_equal(tg_tls_path_parse("auto", &p), 0);
    assert_int_equal(p, TG_TLS_PATH_AUTO);
    assert_int_equal(tg_tls_path_parse("ktls!", &p), -1);
}

static int setup_pki(void **state)
{
    (void)state;
    return tg_test_make_pki(g_pki, sizeof g_pki, "tg-tls-path");
}

static int teardown_pki(void **state)
{
    (void)state;
    return tg_test_remove_pki(g_pki);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_path_names),
        cmocka_unit_test(test_slow_reader_batched),
        cmocka_unit_test(test_slow_reader_socket),
        cmocka_unit_test(test_stalled_reader_resets_batched),
        cmocka_unit_test(test_small_frames_batched),
        cmocka_unit_test(test_small_frames_socket),
        cmocka_unit_test(test_reply_in_its_turn_batched),
        cmocka_unit_test(test_ktls_state_is_truthful),
    };
    return cmocka_run_group_tests(tests, setup_pki, teardown_pki);
}
