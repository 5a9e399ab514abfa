/* test_gw_ws_double.c: a stand-in gateway core (tg_gw_accept + thread-safe tg_gw_* functions) for the WebSocket tests (see test_gw_ws_double.h). */
#include "test_gw_ws_double.h"
#include "tg_test_util.h"

#include <event2/event.h>
#include <event2/thread.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tracegate/conn.h"

#define MAX_CONNS 1024

struct peer {
    tg_conn *c;
    int sink;
    uint64_t frames, bytes, hash;
    uint64_t src_left, src_size, src_off;
    struct event *timer;
    int idx;
};

static struct event_base *g_base;
static pthread_t g_thread;
static atomic_int g_stop;
static atomic_int g_healthy = 1;
static atomic_int g_accepted, g_closed, g_auth_failures, g_rejected, g_unix;
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static struct tg_gw_client_info g_infos[MAX_CONNS];
static struct peer *g_peers[MAX_CONNS];
static char g_last_reason[160];
static atomic_uint g_local_roles = TG_GW_ROLE_ADMIN, g_cert_roles = TG_GW_ROLE_RECORDER;
/* refusal reasons counted by tg_gw_count_rejected / tg_gw_count_auth_failure */
#define MAX_REASONS 32
static struct {
    char reason[64];
    int n;
} g_reasons[MAX_REASONS];

uint64_t tdbl_fnv(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 1099511628211ull;
    }
    return h;
}

/* ------------------------------------------------------------ the peer */

static void source_pump(struct peer *p)
{
    static unsigned char buf[1 << 17];
    while (p->src_left && !tg_conn_is_congested(p->c) && !tg_conn_is_closing(p->c)) {
        size_t n = p->src_size < sizeof buf ? p->src_size : sizeof buf;
        for (size_t i = 0; i < n; i++)
            buf[i] = (unsigned char)(((p->src_off + i) * 7 + 3) & 0xff);
        p->src_off += n;
        p->src_left--;
        if (tg_conn_send(p->c, buf, n, -1) != 0)
            return;
    }
}

static void on_drain(tg_conn *c, void *arg)
{
    (void)c;
    source_pump(arg);
}

static void resume_cb(evutil_socket_t fd, short what, void *arg)
{
    struct peer *p = arg;
    (void)fd;
    (void)what;
    tg_conn_resume_read(p->c);
}

static void on_frame(tg_conn *c, const uint8_t *body, size_t len, void *arg)
{
    struct peer *p = arg;
    if (len > 0 && body[0] == '!') {
        char cmd[64];
        size_t n = len < sizeof cmd - 1 ? len : sizeof cmd - 1;
        memcpy(cmd, body, n);
        cmd[n] = '\0';
        unsigned long long a = 0, b = 0;
        if (!strcmp(cmd, "!sink")) {
            p->sink = 1;
        } else if (!strcmp(cmd, "!pause")) {
            tg_conn_pause_read(c); /* until tdbl_resume_all() */
        } else if (sscanf(cmd, "!pause:%llu", &a) == 1) {
            tg_conn_pause_read(c);
            struct timeval tv = {(time_t)(a / 1000), (suseconds_t)((a % 1000) * 1000)};
            evtimer_add(p->timer, &tv);
        } else if (sscanf(cmd, "!source:%llu:%llu", &a, &b) == 2) {
            p->src_left = a;
            p->src_size = b;
            source_pump(p);
        } else if (!strcmp(cmd, "!stats")) {
            char r[128];
            int m = snprintf(r, sizeof r, "frames=%llu bytes=%llu hash=%llu", (unsigned long long)p->frames,
                             (unsigned long long)p->bytes, (unsigned long long)p->hash);
            tg_conn_send(c, r, (size_t)m, -1);
        } else if (!strcmp(cmd, "!close")) {
            tg_conn_close_after_flush(c, "closed by the test peer");
        }
        return;
    }
    if (p->sink) {
        p->frames++;
        p->bytes += len;
        p->hash = tdbl_fnv(p->hash, body, len);
        return;
    }
    tg_conn_send(c, body, len, -1);
}

static void on_close(tg_conn *c, const char *reason, void *arg)
{
    struct peer *p = arg;
    (void)c;
    pthread_mutex_lock(&g_mu);
    snprintf(g_last_reason, sizeof g_last_reason, "%s", reason ? reason : "");
    g_peers[p->idx] = NULL;
    pthread_mutex_unlock(&g_mu);
    event_free(p->timer);
    free(p);
    atomic_fetch_add(&g_closed, 1);
}

void tg_gw_accept(struct tg_gw *gw, tg_conn *down, const struct tg_gw_client_info *info)
{
    (void)gw;
    struct peer *p = calloc(1, sizeof *p);
    p->c = down;
    p->hash = TDBL_FNV_INIT;
    p->timer = evtimer_new(tg_conn_base(down), resume_cb, p);
    pthread_mutex_lock(&g_mu);
    int i = atomic_load(&g_accepted);
    if (i < MAX_CONNS) {
        g_infos[i] = *info;
        g_peers[i] = p;
    }
    p->idx = i < MAX_CONNS ? i : MAX_CONNS - 1;
    atomic_fetch_add(&g_accepted, 1);
    pthread_mutex_unlock(&g_mu);
    if (tg_conn_is_unix(down))
        atomic_fetch_add(&g_unix, 1);
    struct tg_conn_cbs cbs = {.on_frame = on_frame, .on_close = on_close, .on_drain = on_drain};
    tg_conn_set_cbs(down, &cbs, p);
}

/* ------------------------------------------------ thread-safe functions */

unsigned tg_gw_auth_token_roles(struct tg_gw *gw, const char *token, char *principal, size_t plen)
{
    (void)gw;
    if (!strcmp(token, "good-token")) {
        snprintf(principal, plen, "alice");
        return TG_GW_ROLE_RECORDER;
    }
    if (!strcmp(token, "producer-token")) {
        snprintf(principal, plen, "prod");
        return TG_GW_ROLE_PRODUCER;
    }
    size_t n = strlen(token);
    if (n >= 100 && strspn(token, "L") == n) {
        snprintf(principal, plen, "long");
        return TG_GW_ROLE_OBSERVER;
    }
    return 0;
}

int tg_gw_origin_allowed(struct tg_gw *gw, const char *origin)
{
    (void)gw;
    return origin && !strcmp(origin, "https://ui.perfetto.dev");
}

void tg_gw_client_conn_opts(struct tg_gw *gw, struct tg_conn_opts *o)
{
    (void)gw;
    tg_conn_opts_default(o);
}

int tg_gw_upstream_healthy(struct tg_gw *gw)
{
    (void)gw;
    return atomic_load(&g_healthy);
}

char *tg_gw_metrics_text(struct tg_gw *gw)
{
    (void)gw;
    return strdup("# TYPE tracegate_test_metric counter\ntracegate_test_metric 42\n");
}

const char *tg_gw_port_target(struct tg_gw *gw, enum tg_gw_port port)
{
    (void)gw;
    return port == TG_GW_PORT_CONSUMER ? "test consumer port" : "test producer port";
}

const char *tg_gw_role_name(unsigned role_bit)
{
    switch (role_bit) {
    case TG_GW_ROLE_OBSERVER: return "observer";
    case TG_GW_ROLE_RECORDER: return "recorder";
    case TG_GW_ROLE_PRODUCER: return "producer";
    case TG_GW_ROLE_ADMIN: return "admin";
    case TG_GW_ROLE_LINK: return "link";
    case TG_GW_ROLE_ADB: return "adb";
    default: return "none";
    }
}

char *tg_gw_status_json(struct tg_gw *gw)
{
    (void)gw;
    return strdup("{\"status\":\"ok\"}");
}

void tg_gw_role_defaults(struct tg_gw *gw, struct tg_gw_role_defaults *out)
{
    (void)gw;
    out->local_roles = atomic_load(&g_local_roles);
    out->cert_roles = atomic_load(&g_cert_roles);
    out->local_user_roles = TG_GW_ROLE_RECORDER | TG_GW_ROLE_PRODUCER; /* other local uids: the default */
}

static void count_reason(const char *reason)
{
    pthread_mutex_lock(&g_mu);
    int i = 0;
    while (i < MAX_REASONS && g_reasons[i].reason[0] && strcmp(g_reasons[i].reason, reason) != 0)
        i++;
    if (i < MAX_REASONS) {
        snprintf(g_reasons[i].reason, sizeof g_reasons[i].reason, "%s", reason);
        g_reasons[i].n++;
    }
    pthread_mutex_unlock(&g_mu);
}

void tg_gw_count_auth_failure(struct tg_gw *gw, enum tg_gw_transport t, const char *reason)
{
    (void)gw;
    (void)t;
    count_reason(reason);
    atomic_fetch_add(&g_auth_failures, 1);
}

void tg_gw_count_rejected(struct tg_gw *gw, const char *reason)
{
    (void)gw;
    count_reason(reason);
    atomic_fetch_add(&g_rejected, 1);
}

/* ------------------------------------------------------------ control */

static void *loop_thread(void *arg)
{
    (void)arg;
    while (!atomic_load(&g_stop))
        event_base_loop(g_base, EVLOOP_NO_EXIT_ON_EMPTY);
    /* what the destroyed peers left: deferred callbacks holding their bufferevents, and the
     * finalizers those run (a native WebSocket's filter frees its socket bufferevent in one) */
    for (int i = 0; i < 4; i++)
        event_base_loop(g_base, EVLOOP_NONBLOCK);
    return NULL;
}

struct event_base *tdbl_start(void)
{
    static int threads_on;
    if (!threads_on) {
        evthread_use_pthreads();
        threads_on = 1;
    }
    atomic_store(&g_stop, 0);
    atomic_store(&g_healthy, 1);
    atomic_store(&g_accepted, 0);
    atomic_store(&g_closed, 0);
    atomic_store(&g_auth_failures, 0);
    atomic_store(&g_rejected, 0);
    atomic_store(&g_unix, 0);
    memset(g_infos, 0, sizeof g_infos);
    memset(g_reasons, 0, sizeof g_reasons);
    atomic_store(&g_local_roles, TG_GW_ROLE_ADMIN);
    atomic_store(&g_cert_roles, TG_GW_ROLE_RECORDER);
    memset(g_peers, 0, sizeof g_peers);
    g_base = event_base_new();
    pthread_create(&g_thread, NULL, loop_thread, NULL);
    return g_base;
}

static void destroy_peers_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    (void)arg;
    for (int i = 0; i < MAX_CONNS; i++) {
        struct peer *p = g_peers[i];
        if (!p)
            continue;
        g_peers[i] = NULL;
        tg_conn_destroy(p->c);
        event_free(p->timer);
        free(p);
    }
    atomic_store(&g_stop, 1);
    event_base_loopbreak(g_base);
}

void tdbl_stop(void)
{
    /* peers still open are destroyed on the loop thread, which then exits */
    event_base_once(g_base, -1, EV_TIMEOUT, destroy_peers_cb, NULL, NULL);
    pthread_join(g_thread, NULL);
    event_base_free(g_base);
    g_base = NULL;
}

void tdbl_set_healthy(int healthy) { atomic_store(&g_healthy, healthy); }
void tdbl_set_role_defaults(unsigned local_roles, unsigned cert_roles)
{
    atomic_store(&g_local_roles, local_roles);
    atomic_store(&g_cert_roles, cert_roles);
}

int tdbl_reason_count(const char *reason)
{
    int n = 0;
    pthread_mutex_lock(&g_mu);
    for (int i = 0; i < MAX_REASONS && g_reasons[i].reason[0]; i++)
        if (!strcmp(g_reasons[i].reason, reason))
            n = g_reasons[i].n;
    pthread_mutex_unlock(&g_mu);
    return n;
}
int tdbl_accepted(void) { return atomic_load(&g_accepted); }
int tdbl_closed(void) { return atomic_load(&g_closed); }
int tdbl_auth_failures(void) { return atomic_load(&g_auth_failures); }
int tdbl_rejected(void) { return atomic_load(&g_rejected); }
int tdbl_unix_conns(void) { return atomic_load(&g_unix); }

int tdbl_info(int i, struct tg_gw_client_info *out)
{
    if (i < 0 || i >= MAX_CONNS || i >= tdbl_accepted())
        return -1;
    pthread_mutex_lock(&g_mu);
    *out = g_infos[i];
    pthread_mutex_unlock(&g_mu);
    return 0;
}

void tdbl_last_close_reason(char *buf, size_t len)
{
    pthread_mutex_lock(&g_mu);
    snprintf(buf, len, "%s", g_last_reason);
    pthread_mutex_unlock(&g_mu);
}

void tdbl_resume_all(void)
{
    pthread_mutex_lock(&g_mu);
    for (int i = 0; i < MAX_CONNS; i++)
        if (g_peers[i])
            event_active(g_peers[i]->timer, EV_TIMEOUT, 1); /* its callback resumes reading */
    pthread_mutex_unlock(&g_mu);
}

int tdbl_wait_count(int (*fn)(void), int want, int ms)
{
    struct timespec t0, now;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    long limit = tg_test_ms(ms);
    for (;;) {
        if (fn() >= want)
            return 1;
        clock_gettime(CLOCK_MONOTONIC, &now);
        if ((now.tv_sec - t0.tv_sec) * 1000 + (now.tv_nsec - t0.tv_nsec) / 1000000 > limit)
            return fn() >= want;
        usleep(5000);
    }
}
