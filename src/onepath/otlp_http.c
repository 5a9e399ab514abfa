/* otlp_http.c: OTLP/HTTP JSON export on a dedicated sender thread (see otlp_http.h). A plain
 * blocking HTTP/1.1 client: the exporter has no event loop of its own and the application may
 * have none, so one thread that may block on the network is the simplest thing that never makes
 * a span_end caller wait. */
#include "onepath/otlp_http.h"

#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "onepath/ndjson_file.h"
#include "onepath/otlp_resolve.h"
#include "tracegate/clock.h"
#include "tracegate/log.h"
#include "tracegate/onepath.h"

struct req {
    char *body;
    size_t len;
    unsigned spans;
};

struct tg_op_otlp_http {
    struct tg_op_otlp_http_cfg cfg;
    char host[256], port[8], path[1024];
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct req *q; /* ring of cfg.queue */
    size_t head, count;
    int stop;               /* under mu */
    uint64_t stop_deadline; /* monotonic ms, set with stop */
    struct tg_op_export_stats *st;
    int failing; /* the last request failed: log the next success once */
    int wake;    /* eventfd, readable once stop is set: a POST waiting on the network notices */
    struct tg_op_lookup *lookup; /* the collector's name lookup in flight (sender thread) */
};

int tg_op_otlp_url_parse(const char *url, char *host, size_t host_cap, char *port, size_t port_cap, char *path,
                         size_t path_cap)
{
    if (!url || strncasecmp(url, "http://", 7) != 0)
        return -1;
    const char *p = url + 7, *h = p, *he;
    if (*p == '[') {
        h = p + 1;
        he = strchr(h, ']');
        if (!he)
            return -1;
        p = he + 1;
    } else {
        he = p + strcspn(p, ":/?#");
        p = he;
    }
    size_t hl = (size_t)(he - h);
    if (hl == 0 || hl >= host_cap || memchr(h, '@', hl))
        return -1;
    memcpy(host, h, hl);
    host[hl] = 0;
    const char *pt = "80";
    size_t pl = 2;
    if (*p == ':') {
        pt = ++p;
        pl = strspn(p, "0123456789");
        p += pl;
        long n = pl && pl <= 5 ? strtol(pt, NULL, 10) : 0;
        if (n < 1 || n > 65535)
            return -1;
    }
    if (*p && *p != '/')
        return -1; /* a query or fragment without a path, or junk after the port */
    if (pl >= port_cap)
        return -1;
    memcpy(port, pt, pl);
    port[pl] = 0;
    const char *path_in = *p ? p : "/v1/traces";
    if (strlen(path_in) >= path_cap)
        return -1;
    for (const char *c = path_in; *c; c++)
        if ((unsigned char)*c <= ' ' || *c == 0x7f)
            return -1; /* no spaces or control characters in the request line */
    strcpy(path, path_in);
    return 0;
}

/* ---------------------------------------------------------------- one POST */

/* Lowers *deadline_ms to the stop deadline once stop is set; returns whether it is. */
static int cap_deadline(struct tg_op_otlp_http *h, uint64_t *deadline_ms)
{
    pthread_mutex_lock(&h->mu);
    int stop = h->stop;
    if (stop && h->stop_deadline < *deadline_ms)
        *deadline_ms = h->stop_deadline;
    pthread_mutex_unlock(&h->mu);
    return stop;
}

/* Waits for ev on fd until the attempt's deadline, or the stop deadline once a stop comes in
 * meanwhile (the wake eventfd interrupts the wait): a collector that accepts and never answers
 * must not hold up shutdown for a whole ONEPATH_TRACE_OTLP_TIMEOUT_MS. */
static int wait_fd(struct tg_op_otlp_http *h, int fd, short ev, uint64_t deadline_ms)
{
    for (;;) {
        int stopping = cap_deadline(h, &deadline_ms);
        uint64_t now = tg_mono_ms();
        if (now >= deadline_ms)
            return -1;
        /* once stopping, the eventfd stays readable: watch the socket alone */
        struct pollfd pfd[2] = {{fd, ev, 0}, {h->wake, POLLIN, 0}};
        int n = poll(pfd, stopping ? 1 : 2, (int)(deadline_ms - now));
        if (n > 0 && pfd[0].revents)
            return 0;
        if (n < 0 && errno != EINTR)
            return -1;
    }
}

/* The collector's addresses, from the lookup in flight (started if there is none): waits for it
 * until deadline_ms, or the stop deadline (wait_fd). A lookup still running then is kept for the
 * next attempt, or abandoned at stop (tg_op_otlp_http_stop): getaddrinfo itself cannot be
 * interrupted, so it never runs on this thread. */
static int resolve(struct tg_op_otlp_http *h, uint64_t deadline_ms, struct addrinfo **res)
{
    *res = NULL;
    if (!h->lookup && !(h->lookup = tg_op_lookup_start(h->host, h->port)))
        return -1;
    if (tg_op_lookup_take(h->lookup, res) == TG_OP_LOOKUP_RUNNING &&
        (wait_fd(h, tg_op_lookup_fd(h->lookup), POLLIN, deadline_ms) != 0 ||
         tg_op_lookup_take(h->lookup, res) == TG_OP_LOOKUP_RUNNING))
        return -1;
    tg_op_lookup_release(h->lookup);
    h->lookup = NULL;
    return *res ? 0 : -1;
}

static int connect_to(struct tg_op_otlp_http *h, uint64_t deadline_ms)
{
    struct addrinfo *res = NULL;
    if (resolve(h, deadline_ms, &res) != 0)
        return -1;
    int fd = -1;
    for (struct addrinfo *a = res; a && fd < 0; a = a->ai_next) {
        fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
        if (fd < 0)
            continue;
        if (connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
            int e = errno, soerr = 0;
            socklen_t sl = sizeof soerr;
            if (e != EINPROGRESS || wait_fd(h, fd, POLLOUT, deadline_ms) != 0 ||
                getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) != 0 || soerr != 0) {
                close(fd);
                fd = -1;
            }
        }
    }
    freeaddrinfo(res);
    return fd;
}

static int send_all(struct tg_op_otlp_http *h, int fd, const char *p, size_t n, uint64_t deadline_ms)
{
    while (n) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w > 0) {
            p += w;
            n -= (size_t)w;
        } else if (w < 0 && errno == EINTR) {
            continue;
        } else if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            if (wait_fd(h, fd, POLLOUT, deadline_ms) != 0)
                return -1;
        } else {
            return -1;
        }
    }
    return 0;
}

/* The status of the response, -1 for a transport error or a response that is not HTTP.
 * *retry_after_ms = the Retry-After header in ms, 0 if none. */
static int read_status(struct tg_op_otlp_http *h, int fd, uint64_t deadline_ms, unsigned *retry_after_ms)
{
    char buf[8192];
    size_t len = 0;
    *retry_after_ms = 0;
    for (;;) {
        if (len == sizeof buf - 1)
            break; /* a huge head: the status line is in already */
        ssize_t r = recv(fd, buf + len, sizeof buf - 1 - len, 0);
        if (r > 0) {
            len += (size_t)r;
            buf[len] = 0;
            if (strstr(buf, "\r\n\r\n"))
                break;
        } else if (r == 0) {
            break;
        } else if (errno == EINTR) {
            continue;
        } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
            if (wait_fd(h, fd, POLLIN, deadline_ms) != 0)
                return -1;
        } else {
            return -1;
        }
    }
    buf[len] = 0;
    int major, minor, status;
    if (sscanf(buf, "HTTP/%d.%d %3d", &major, &minor, &status) != 3 || status < 100 || status > 599)
        return -1;
    for (char *l = strstr(buf, "\r\n"); l; l = strstr(l + 2, "\r\n")) {
        if (strncasecmp(l + 2, "Retry-After:", 12) == 0) {
            long s = strtol(l + 14, NULL, 10);
            if (s > 0)
                *retry_after_ms = s > 3600 ? 3600000u : (unsigned)s * 1000u;
            break;
        }
    }
    return status;
}

static int post(struct tg_op_otlp_http *h, const struct req *r, uint64_t deadline_ms, unsigned *retry_after_ms)
{
    *retry_after_ms = 0;
    int fd = connect_to(h, deadline_ms);
    if (fd < 0)
        return -1;
    char head[1536];
    int hn = snprintf(head, sizeof head,
                      "POST %s HTTP/1.1\r\nHost: %s%s%s:%s\r\nContent-Type: application/json\r\n"
                      "Content-Length: %zu\r\nUser-Agent: tracegate-onepath\r\nConnection: close\r\n\r\n",
                      h->path, strchr(h->host, ':') ? "[" : "", h->host, strchr(h->host, ':') ? "]" : "", h->port,
                      r->len);
    int status = -1;
    if (hn > 0 && (size_t)hn < sizeof head && send_all(h, fd, head, (size_t)hn, deadline_ms) == 0 &&
        send_all(h, fd, r->body, r->len, deadline_ms) == 0)
        status = read_status(h, fd, deadline_ms, retry_after_ms);
    close(fd);
    return status;
}

/* ---------------------------------------------------------------- the sender thread */

static int retryable(int status) { return status < 0 || status == 408 || status == 429 || status >= 500; }

/* Sleeps ms unless stopping (returns 1 when the stop deadline passed meanwhile). */
static int backoff_wait(struct tg_op_otlp_http *h, unsigned ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_sec += ms / 1000;
    ts.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&h->mu);
    while (!h->stop && pthread_cond_timedwait(&h->cv, &h->mu, &ts) != ETIMEDOUT) {
    }
    int over = h->stop && tg_mono_ms() >= h->stop_deadline;
    pthread_mutex_unlock(&h->mu);
    return over;
}

static uint64_t attempt_deadline(struct tg_op_otlp_http *h)
{
    uint64_t d = tg_mono_ms() + h->cfg.timeout_ms;
    cap_deadline(h, &d);
    return d;
}

static void deliver(struct tg_op_otlp_http *h, struct req *r)
{
    unsigned delay = h->cfg.backoff_ms;
    for (unsigned attempt = 0;; attempt++) {
        unsigned retry_after;
        uint64_t deadline = attempt_deadline(h);
        int status = tg_mono_ms() < deadline ? post(h, r, deadline, &retry_after) : -1;
        if (status >= 200 && status < 300) {
            atomic_fetch_add(&h->st->written, r->spans);
            atomic_fetch_add(&h->st->bytes, r->len);
            if (h->failing)
                tg_info("onepath", "OTLP/HTTP export to %s works again", h->cfg.url);
            h->failing = 0;
            return;
        }
        if (!retryable(status) || attempt >= h->cfg.retries) {
            atomic_fetch_add(&h->st->lost, r->spans);
            if (status < 0)
                tg_warn("onepath", "OTLP/HTTP export to %s failed %u times (no answer): %u spans lost", h->cfg.url,
                        attempt + 1, r->spans);
            else
                tg_warn("onepath", "OTLP/HTTP export to %s: HTTP %d after %u attempt(s): %u spans lost", h->cfg.url,
                        status, attempt + 1, r->spans);
            h->failing = 1;
            return;
        }
        atomic_fetch_add(&h->st->stalls, 1);
        unsigned wait = retry_after ? retry_after : delay;
        if (wait > TG_OP_OTLP_MAX_BACKOFF_MS && !retry_after)
            wait = TG_OP_OTLP_MAX_BACKOFF_MS;
        tg_debug("onepath", "OTLP/HTTP export to %s: %s%d, retrying in %u ms", h->cfg.url,
                 status < 0 ? "no answer " : "HTTP ", status, wait);
        if (backoff_wait(h, wait)) {
            atomic_fetch_add(&h->st->lost, r->spans);
            return;
        }
        if (delay < TG_OP_OTLP_MAX_BACKOFF_MS)
            delay *= 2;
    }
}

static void *run(void *arg)
{
    struct tg_op_otlp_http *h = arg;
    pthread_mutex_lock(&h->mu);
    for (;;) {
        while (!h->stop && h->count == 0)
            pthread_cond_wait(&h->cv, &h->mu);
        if (h->count == 0)
            break; /* stopping with nothing left */
        struct req r = h->q[h->head];
        h->head = (h->head + 1) % h->cfg.queue;
        h->count--;
        int over = h->stop && tg_mono_ms() >= h->stop_deadline;
        pthread_mutex_unlock(&h->mu);
        if (over)
            atomic_fetch_add(&h->st->lost, r.spans);
        else
            deliver(h, &r);
        free(r.body);
        pthread_mutex_lock(&h->mu);
    }
    pthread_mutex_unlock(&h->mu);
    return NULL;
}

struct tg_op_otlp_http *tg_op_otlp_http_start(const struct tg_op_otlp_http_cfg *cfg, int *err)
{
    struct tg_op_otlp_http *h = calloc(1, sizeof *h);
    if (!h) {
        *err = ONEPATH_ERR_NOMEM;
        return NULL;
    }
    h->cfg = *cfg;
    if (!h->cfg.queue)
        h->cfg.queue = 1;
    if (!h->cfg.backoff_ms)
        h->cfg.backoff_ms = 1;
    if (tg_op_otlp_url_parse(cfg->url, h->host, sizeof h->host, h->port, sizeof h->port, h->path,
                             sizeof h->path) != 0) {
        tg_error("onepath", "OTLP/HTTP: '%s' is not an http://HOST[:PORT][/PATH] URL", cfg->url);
        free(h);
        *err = ONEPATH_ERR_INVAL;
        return NULL;
    }
    h->cfg.url = NULL; /* set below to our own copy */
    h->st = tg_op_stats(ONEPATH_EXPORT_OTLP_HTTP);
    h->q = calloc(h->cfg.queue, sizeof *h->q);
    char *url = strdup(cfg->url);
    h->wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    pthread_condattr_t ca;
    int ok = h->q && url && h->wake >= 0 && pthread_condattr_init(&ca) == 0;
    if (ok) {
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        ok = pthread_cond_init(&h->cv, &ca) == 0;
        pthread_condattr_destroy(&ca);
        if (ok && pthread_mutex_init(&h->mu, NULL) != 0) {
            pthread_cond_destroy(&h->cv);
            ok = 0;
        }
    }
    if (ok) {
        h->cfg.url = url;
        sigset_t all, old;
        sigfillset(&all);
        pthread_sigmask(SIG_SETMASK, &all, &old);
        if (pthread_create(&h->th, NULL, run, h) != 0) {
            pthread_mutex_destroy(&h->mu);
            pthread_cond_destroy(&h->cv);
            ok = 0;
        }
        pthread_sigmask(SIG_SETMASK, &old, NULL);
    }
    if (!ok) {
        if (h->wake >= 0)
            close(h->wake);
        free(url);
        free(h->q);
        free(h);
        *err = ONEPATH_ERR_NOMEM;
        return NULL;
    }
    atomic_store(&h->st->active, 1);
    return h;
}

void tg_op_otlp_http_enqueue(struct tg_op_otlp_http *h, char *body, size_t len, unsigned spans)
{
    pthread_mutex_lock(&h->mu);
    if (h->count == h->cfg.queue || h->stop) {
        pthread_mutex_unlock(&h->mu);
        free(body);
        atomic_fetch_add(&h->st->dropped, spans);
        return;
    }
    h->q[(h->head + h->count) % h->cfg.queue] = (struct req){body, len, spans};
    h->count++;
    atomic_fetch_add(&h->st->queued, spans);
    pthread_cond_signal(&h->cv);
    pthread_mutex_unlock(&h->mu);
}

void tg_op_otlp_http_stop(struct tg_op_otlp_http *h)
{
    if (!h)
        return;
    pthread_mutex_lock(&h->mu);
    h->stop = 1;
    h->stop_deadline = tg_mono_ms() + TG_OP_STOP_STALL_MS;
    pthread_cond_broadcast(&h->cv);
    pthread_mutex_unlock(&h->mu);
    uint64_t one = 1;
    if (write(h->wake, &one, sizeof one) < 0) {
        /* cannot fail on a fresh eventfd; the wait then ends at its own deadline */
    }
    pthread_join(h->th, NULL);
    tg_op_lookup_release(h->lookup); /* a lookup still running is abandoned to its helper */
    close(h->wake);
    atomic_store(&h->st->active, 0);
    pthread_mutex_destroy(&h->mu);
    pthread_cond_destroy(&h->cv);
    free(h->q);
    free((char *)h->cfg.url);
    free(h);
}
