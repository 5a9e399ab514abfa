/* gw_testclient.c: a small Perfetto IPC client for tracegated's integration tests
 * (tests/integration/test_gw_*.sh). Not installed.
 *
 *   gw_testclient call ADDR METHOD [--token T] [--count N] [--then METHOD] [--ready-file F]
 *                  [--hold-until F] [--timeout-ms MS] [--keep-session 1]
 *       N clients at once: connect, (Authenticate with T), bind ConsumerPort, call METHOD with
 *       empty arguments; then call --then METHOD on the same connection. --ready-file: create F
 *       once the first call was answered (the session is open); --hold-until: make the --then
 *       call only once F exists (the test says when), holding the connection meanwhile. Prints
 *       one line "first=R then=R" for N=1, or "ok=.. refused=.. auth_refused=.. disconnected=.."
 *       (first call) for N>1, where R is ok|refused|auth_refused|disconnected|timeout.
 *       A refused BindService is followed by a second one: no answer but a close means the
 *       gateway closed the connection ("disconnected"), an answer that it kept it ("refused").
 *       --keep-session 1: first ask TracegateSession.GetResumeToken (so the gateway may keep the
 *       session when the client goes), and close the connection right after sending the --then
 *       call (then=ok once it is sent and the connection closed: a call left in flight).
 *       Exit 0 if every call was ok, 1 otherwise.
 *   gw_testclient slow ADDR [--timeout-ms MS] [--method M]
 *       binds ConsumerPort, then floods M (default QueryServiceState) without ever reading
 *       replies and waits for the gateway to cut it. Prints "cut after N ms" (exit 0) or
 *       "not cut" (1).
 *   gw_testclient burst ADDR --count N [--method M] [--timeout-ms MS]
 *       N connects at once, each then binds ConsumerPort and calls M (see gw_burst.c).
 *   gw_testclient hostile KIND ADDR [--timeout-ms MS]
 *       one misbehaving connection (garbage or oversized IPC frames, TLS or HTTP garbage, a
 *       stalled or broken WebSocket upgrade, a huge HTTP header) that must be closed by the
 *       gateway (see gw_hostile.c).
 *   gw_testclient http-get HOST:PORT PATH      prints the response body (exit 0 on 200)
 *   gw_testclient free-port                    prints a TCP port free on 127.0.0.1 a moment ago
 * Every time limit (--timeout-ms, default 10 s; connect and HTTP waits) is only a safety net and
 * is multiplied by $TG_TEST_TIMEOUT_SCALE (default 4), as in the other tests.
 */
#include <errno.h>
#include <event2/event.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "gw_burst.h"
#include "gw_hostile.h"
#include "tg_test_util.h"
#include "tracegate/addr.h"
#include "tracegate/clock.h"
#include "tracegate/frame.h"
#include "tracegate/ipc_client.h"
#include "tracegate/ipc_wire.h"
#include "tracegate/log.h"
#include "tracegate_gateway.pb-c.h"

enum result { RES_PENDING = 0, RES_OK, RES_REFUSED, RES_AUTH_REFUSED, RES_DISCONNECTED, RES_TIMEOUT };
static const char *const k_result_names[] = {"pending", "ok", "refused", "auth_refused", "disconnected", "timeout"};

struct opts {
    const char *addr, *method, *token, *then, *ready_file, *hold_until;
    int count, timeout_ms, keep_session;
};

struct client {
    struct opts *o;
    struct event_base *base;
    tg_ipc_client *cli;
    tg_ipc_service_proxy *port;
    struct event *hold_ev;
    enum result first, then;
    int done, settling, dropping;
    int *n_done;
};

static void finish(struct client *c)
{
    if (c->done)
        return;
    c->done = 1;
    (*c->n_done)++;
}

static void record(struct client *c, enum result r)
{
    if (c->first == RES_PENDING)
        c->first = r;
    else if (c->then == RES_PENDING)
        c->then = r;
}

static void on_disconnect(tg_ipc_client *cli, const char *reason, void *arg)
{
    struct client *c = arg;
    (void)cli;
    (void)reason;
    if (c->dropping) { /* we closed it ourselves, the --then call in flight */
        c->then = RES_OK;
        finish(c);
        return;
    }
    if (c->settling) {
        c->first = RES_DISCONNECTED; /* the refusal was followed by a close */
        c->settling = 0;
        finish(c);
        return;
    }
    if (!c->done) {
        record(c, RES_DISCONNECTED);
        finish(c);
    }
}

static void on_probe_bound(tg_ipc_client *cli, tg_ipc_service_proxy *proxy, void *arg)
{
    struct client *c = arg;
    (void)cli;
    (void)proxy;
    if (!c->settling)
        return;
    c->settling = 0;
    if (!tg_ipc_client_connected(c->cli))
        c->first = RES_DISCONNECTED;
    finish(c);
}

/* A refused bind: did the gateway also close? A second bind tells without guessing a time: the
 * gateway answers it if it kept the connection, and reads nothing more if it is closing it. */
static void settle(struct client *c)
{
    c->settling = 1;
    if (tg_ipc_client_bind(c->cli, "ConsumerPort", on_probe_bound, c) != 0) {
        c->settling = 0;
        c->first = RES_DISCONNECTED;
        finish(c);
    }
}

static void on_then_reply(tg_ipc_client *cli, int success, int has_more, const uint8_t *reply, size_t len, void *arg)
{
    struct client *c = arg;
    (void)cli;
    (void)reply;
    (void)len;
    if (has_more || c->done)
        return;
    if (!success && !tg_ipc_client_connected(c->cli)) {
        record(c, RES_DISCONNECTED);
    } else {
        record(c, success ? RES_OK : RES_REFUSED);
    }
    finish(c);
}

static void hold_cb(evutil_socket_t fd, short what, void *arg)
{
    struct client *c = arg;
    (void)fd;
    (void)what;
    if (c->done)
        return;
    struct stat st;
    if (c->o->hold_until && stat(c->o->hold_until, &st) != 0) {
        struct timeval tv = {0, 20000}; /* the test has not released us yet */
        evtimer_add(c->hold_ev, &tv);
        return;
    }
    if (!tg_ipc_client_invoke(c->cli, c->port, c->o->then, NULL, -1, on_then_reply, c)) {
        record(c, RES_DISCONNECTED);
        finish(c);
        return;
    }
    if (c->o->keep_session) {
        c->dropping = 1;
        tg_conn_close_after_flush(tg_ipc_client_conn(c->cli), "the test drops the connection");
    }
}

static void touch(const char *path)
{
    FILE *f = fopen(path, "w");
    if (f)
        fclose(f);
    else
        fprintf(stderr, "gw_testclient: cannot create %s\n", path);
}

static void on_first_reply(tg_ipc_client *cli, int success, int has_more, const uint8_t *reply, size_t len, void *arg)
{
    struct client *c = arg;
    (void)cli;
    (void)reply;
    (void)len;
    if (has_more || c->done)
        return;
    if (!success && !tg_ipc_client_connected(c->cli)) {
        record(c, RES_DISCONNECTED);
        finish(c);
        return;
    }
    record(c, success ? RES_OK : RES_REFUSED);
    if (c->o->ready_file)
        touch(c->o->ready_file);
    if (!c->o->then) {
        finish(c);
        return;
    }
    struct timeval tv = {0, 0};
    c->hold_ev = evtimer_new(c->base, hold_cb, c);
    evtimer_add(c->hold_ev, &tv);
}

static void invoke_first(struct client *c)
{
    if (!tg_ipc_client_invoke(c->cli, c->port, c->o->method, NULL, -1, on_first_reply, c)) {
        record(c, RES_REFUSED); /* the service did not list the method */
        finish(c);
    }
}

static void on_token_reply(tg_ipc_client *cli, int success, int has_more, const uint8_t *reply, size_t len, void *arg)
{
    struct client *c = arg;
    (void)cli;
    (void)reply;
    (void)len;
    if (has_more || c->done)
        return;
    if (!success) {
        record(c, RES_REFUSED);
        finish(c);
        return;
    }
    invoke_first(c);
}

static void on_session_bound(tg_ipc_client *cli, tg_ipc_service_proxy *proxy, void *arg)
{
    struct client *c = arg;
    (void)cli;
    if (c->done)
        return;
    if (!proxy || !tg_ipc_client_invoke_bytes(c->cli, proxy, "GetResumeToken", NULL, 0, -1, on_token_reply, c)) {
        record(c, RES_REFUSED);
        finish(c);
    }
}

static void on_bound(tg_ipc_client *cli, tg_ipc_service_proxy *proxy, void *arg)
{
    struct client *c = arg;
    (void)cli;
    if (c->done)
        return;
    if (!proxy) {
        record(c, tg_ipc_client_connected(c->cli) ? RES_REFUSED : RES_DISCONNECTED);
        if (c->first == RES_REFUSED)
            settle(c);
        else
            finish(c);
        return;
    }
    c->port = proxy;
    if (c->o->keep_session) {
        tg_ipc_client_bind(c->cli, "TracegateSession", on_session_bound, c);
        return;
    }
    invoke_first(c);
}

static void on_auth_reply(tg_ipc_client *cli, int success, int has_more, const uint8_t *reply, size_t len, void *arg)
{
    struct client *c = arg;
    (void)cli;
    (void)has_more;
    (void)reply;
    (void)len;
    if (c->done)
        return;
    if (!success) {
        record(c, RES_AUTH_REFUSED);
        finish(c);
        return;
    }
    tg_ipc_client_bind(c->cli, "ConsumerPort", on_bound, c);
}

static void on_auth_bound(tg_ipc_client *cli, tg_ipc_service_proxy *proxy, void *arg)
{
    struct client *c = arg;
    (void)cli;
    if (c->done)
        return;
    if (!proxy) {
        record(c, RES_AUTH_REFUSED);
        finish(c);
        return;
    }
    Tracegate__AuthenticateRequest req = TRACEGATE__AUTHENTICATE_REQUEST__INIT;
    req.token = (char *)c->o->token;
    if (!tg_ipc_client_invoke(c->cli, proxy, "Authenticate", &req.base, -1, on_auth_reply, c)) {
        record(c, RES_AUTH_REFUSED);
        finish(c);
    }
}

static void timeout_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    *(int *)arg = 1;
}

static int cmd_call(struct opts *o)
{
    struct event_base *base = event_base_new();
    struct client *cs = calloc((size_t)o->count, sizeof *cs);
    int n_done = 0, timed_out = 0;
    struct tg_ipc_client_cbs cbs = {.on_disconnect = on_disconnect};
    for (int i = 0; i < o->count; i++) {
        struct client *c = &cs[i];
        c->o = o;
        c->base = base;
        c->n_done = &n_done;
        char err[256];
        c->cli = tg_ipc_client_connect(base, o->addr, NULL, &cbs, c, err, sizeof err);
        if (!c->cli) {
            fprintf(stderr, "gw_testclient: %s\n", err);
            return 2;
        }
        if (o->token)
            tg_ipc_client_bind(c->cli, "TracegateAuth", on_auth_bound, c);
        else
            tg_ipc_client_bind(c->cli, "ConsumerPort", on_bound, c);
    }
    struct event *t = evtimer_new(base, timeout_cb, &timed_out);
    int limit = tg_test_ms(o->timeout_ms);
    struct timeval tv = {limit / 1000, (limit % 1000) * 1000};
    evtimer_add(t, &tv);
    while (n_done < o->count && !timed_out)
        event_base_loop(base, EVLOOP_ONCE);
    int counts[6] = {0};
    int all_ok = 1;
    for (int i = 0; i < o->count; i++) {
        struct client *c = &cs[i];
        if (!c->done) {
            record(c, RES_TIMEOUT);
            if (o->then)
                record(c, RES_TIMEOUT);
        }
        counts[c->first]++;
        all_ok &= c->first == RES_OK && (!o->then || c->then == RES_OK);
    }
    if (o->count == 1)
        printf("first=%s then=%s\n", k_result_names[cs[0].first], o->then ? k_result_names[cs[0].then] : "-");
    else
        printf("ok=%d refused=%d auth_refused=%d disconnected=%d timeout=%d\n", counts[RES_OK], counts[RES_REFUSED],
               counts[RES_AUTH_REFUSED], counts[RES_DISCONNECTED], counts[RES_TIMEOUT]);
    fflush(stdout);
    for (int i = 0; i < o->count; i++) {
        if (cs[i].hold_ev)
            event_free(cs[i].hold_ev);
        tg_ipc_client_free(cs[i].cli);
    }
    event_base_loop(base, EVLOOP_NONBLOCK);
    event_free(t);
    event_base_free(base);
    free(cs);
    return all_ok ? 0 : 1;
}

/* ------------------------------------------------------------ slow */

struct bind_ids {
    const char *want;
    uint32_t id;
};

static void bind_method(void *arg, uint32_t id, const char *name, size_t name_len)
{
    struct bind_ids *b = arg;
    if (name_len == strlen(b->want) && memcmp(name, b->want, name_len) == 0)
        b->id = id;
}

static int write_all(int fd, const uint8_t *p, size_t n)
{
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

static int cmd_slow(struct opts *o)
{
    struct tg_addr a;
    char err[256];
    if (tg_addr_parse(o->addr, &a, err, sizeof err) != 0) {
        fprintf(stderr, "gw_testclient: %s\n", err);
        return 2;
    }
    int fd = socket(a.family, SOCK_STREAM, 0);
    int small = 4096;
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof small); /* keep the kernel from absorbing replies */
    if (connect(fd, (struct sockaddr *)&a.ss, a.len) != 0) {
        perror("connect");
        return 2;
    }
    uint8_t buf[256], hdr[4];
    size_t n = tg_ipc_encode_bind(buf, sizeof buf, 1, "ConsumerPort");
    tg_frame_put_header(hdr, (uint32_t)n);
    if (write_all(fd, hdr, 4) || write_all(fd, buf, n))
        return 2;
    /* read exactly the bind reply */
    tg_frame_reader *r = tg_frame_reader_new(TG_FRAME_MAX_DEFAULT);
    const uint8_t *body = NULL;
    size_t blen = 0;
    while (tg_frame_reader_next(r, &body, &blen) != TG_FRAME_READY) {
        uint8_t one[1];
        if (read(fd, one, 1) != 1) {
            printf("bind failed\n");
            return 1;
        }
        tg_frame_reader_feed(r, one, 1);
    }
    struct tg_frame_info fi;
    struct bind_ids ids = {.want = o->method ? o->method : "QueryServiceState"};
    int success = 0;
    uint32_t sid = 0;
    if (tg_frame_scan(body, blen, &fi) != 0 || fi.msg != TG_MSG_BIND_SERVICE_REPLY ||
        tg_ipc_parse_bind_reply(fi.msg_data, fi.msg_len, &success, &sid, bind_method, &ids) != 0 || !success ||
        !ids.id) {
        printf("bind failed\n");
        return 1;
    }
    tg_frame_reader_free(r);
    /* flood, never read */
    int fl = 1;
    (void)fl;
    uint64_t start = tg_mono_ms(), rid = 2, limit = (uint64_t)tg_test_ms(o->timeout_ms);
    struct pollfd p = {.fd = fd, .events = POLLOUT | POLLRDHUP};
    while (tg_mono_ms() - start < limit) {
        int rc = poll(&p, 1, 100);
        if (rc < 0 && errno == EINTR)
            continue;
        if (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) {
            printf("cut after %llu ms\n", (unsigned long long)(tg_mono_ms() - start));
            close(fd);
            return 0;
        }
        if (p.revents & POLLOUT) {
            uint8_t batch[64 * 40];
            size_t off = 0;
            for (int i = 0; i < 64; i++) {
                size_t m = tg_ipc_encode_invoke(batch + off + 4, sizeof batch - off - 4, rid++, sid, ids.id, NULL, 0, 0);
                tg_frame_put_header(batch + off, (uint32_t)m);
                off += 4 + m;
            }
            ssize_t w = send(fd, batch, off, MSG_DONTWAIT | MSG_NOSIGNAL);
            if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
                printf("cut after %llu ms (write: %s)\n", (unsigned long long)(tg_mono_ms() - start), strerror(errno));
                close(fd);
                return 0;
            }
            if (w > 0 && (size_t)w < off) {
                /* finish the partial frame so the stream stays well-formed */
                if (write_all(fd, batch + w, off - (size_t)w) != 0) {
                    printf("cut after %llu ms\n", (unsigned long long)(tg_mono_ms() - start));
                    close(fd);
                    return 0;
                }
            }
        }
    }
    printf("not cut\n");
    close(fd);
    return 1;
}

/* ------------------------------------------------------------ http / port */

static int cmd_http_get(const char *hostport, const char *path)
{
    struct tg_addr a;
    char err[256];
    if (tg_addr_parse(hostport, &a, err, sizeof err) != 0) {
        fprintf(stderr, "gw_testclient: %s\n", err);
        return 2;
    }
    int fd = tg_addr_connect_wait(&a, tg_test_ms(3000));
    if (fd < 0) {
        fprintf(stderr, "gw_testclient: cannot connect to %s\n", hostport);
        return 1;
    }
    int fl = 0;
    (void)fl;
    struct pollfd p = {.fd = fd, .events = POLLOUT};
    poll(&p, 1, tg_test_ms(3000));
    char req[512];
    int n = snprintf(req, sizeof req, "GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", path, hostport);
    if (write_all(fd, (const uint8_t *)req, (size_t)n) != 0)
        return 1;
    char *resp = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        struct pollfd q = {.fd = fd, .events = POLLIN};
        if (poll(&q, 1, tg_test_ms(5000)) <= 0)
            break;
        if (cap - len < 4096) {
            cap = cap ? cap * 2 : 65536;
            resp = realloc(resp, cap + 1);
        }
        ssize_t r = read(fd, resp + len, cap - len);
        if (r < 0 && (errno == EAGAIN || errno == EINTR))
            continue;
        if (r <= 0)
            break;
        len += (size_t)r;
    }
    close(fd);
    if (!resp)
        return 1;
    resp[len] = '\0';
    int ok = strncmp(resp, "HTTP/1.1 200", 12) == 0 || strncmp(resp, "HTTP/1.0 200", 12) == 0;
    char *body = strstr(resp, "\r\n\r\n");
    fputs(body ? body + 4 : resp, stdout);
    free(resp);
    return ok ? 0 : 1;
}

static int cmd_free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in in = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t sl = sizeof in;
    if (bind(fd, (struct sockaddr *)&in, sizeof in) != 0 || getsockname(fd, (struct sockaddr *)&in, &sl) != 0)
        return 1;
    printf("%u\n", ntohs(in.sin_port));
    close(fd);
    return 0;
}

int main(int argc, char **argv)
{
    tg_log_set_level(TG_LOG_ERROR);
    if (argc < 2) {
        fprintf(stderr, "usage: gw_testclient call|slow|burst|hostile|http-get|free-port ...\n");
        return 2;
    }
    if (strcmp(argv[1], "free-port") == 0)
        return cmd_free_port();
    if (strcmp(argv[1], "http-get") == 0 && argc == 4)
        return cmd_http_get(argv[2], argv[3]);
    if (strcmp(argv[1], "burst") == 0 && argc >= 3) {
        int count = 1000, tmo = 60000;
        const char *method = "QueryCapabilities";
        for (int k = 3; k + 1 < argc; k += 2) {
            if (strcmp(argv[k], "--count") == 0)
                count = atoi(argv[k + 1]);
            else if (strcmp(argv[k], "--method") == 0)
                method = argv[k + 1];
            else if (strcmp(argv[k], "--timeout-ms") == 0)
                tmo = atoi(argv[k + 1]);
            else
                return 2;
        }
        return count > 0 ? gw_burst_main(argv[2], count, method, tmo) : 2;
    }
    if (strcmp(argv[1], "hostile") == 0 && (argc == 4 || (argc == 6 && strcmp(argv[4], "--timeout-ms") == 0)))
        return gw_hostile_main(argv[2], argv[3], argc == 6 ? atoi(argv[5]) : 30000);
    struct opts o = {.count = 1, .timeout_ms = 10000};
    if (argc < 3)
        return 2;
    o.addr = argv[2];
    int i = 3;
    if (strcmp(argv[1], "call") == 0) {
        if (argc < 4)
            return 2;
        o.method = argv[3];
        i = 4;
    }
    for (; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--token") == 0)
            o.token = argv[i + 1];
        else if (strcmp(argv[i], "--count") == 0)
            o.count = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--ready-file") == 0)
            o.ready_file = argv[i + 1];
        else if (strcmp(argv[i], "--hold-until") == 0)
            o.hold_until = argv[i + 1];
        else if (strcmp(argv[i], "--then") == 0)
            o.then = argv[i + 1];
        else if (strcmp(argv[i], "--timeout-ms") == 0)
            o.timeout_ms = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--keep-session") == 0)
            o.keep_session = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--method") == 0 && strcmp(argv[1], "slow") == 0)
            o.method = argv[i + 1];
        else {
            fprintf(stderr, "gw_testclient: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    if (i != argc || o.count < 1) {
        fprintf(stderr, "gw_testclient: bad arguments\n");
        return 2;
    }
    if (strcmp(argv[1], "call") == 0)
        return cmd_call(&o);
    if (strcmp(argv[1], "slow") == 0)
        return cmd_slow(&o);
    fprintf(stderr, "gw_testclient: unknown command %s\n", argv[1]);
    return 2;
}
