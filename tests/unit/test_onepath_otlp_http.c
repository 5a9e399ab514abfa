/* test_onepath_otlp_http.c: the OTLP/HTTP sender against a collector that never answers (the
 * listening socket takes the connection and the whole POST, then says nothing) and against a
 * resolver that never answers (a stand-in for getaddrinfo, which a blackholed name server keeps
 * for its whole timeout): shutdown must still return within the documented ~2 s stop allowance
 * (not after ONEPATH_TRACE_OTLP_TIMEOUT_MS, nor when the lookup returns) and count the request's
 * spans as lost. A name that the resolver does answer is delivered. */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "onepath/otlp_resolve.h"
#include "onepath_test_util.h"
#include "tracegate/onepath.h"

static int g_listen = -1;
static unsigned g_port;

static int setup(void **state)
{
    (void)state;
    onepath_trace_shutdown();
    ot_clear_env();
    g_listen = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (g_listen < 0)
        return -1;
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t al = sizeof a;
    if (bind(g_listen, (struct sockaddr *)&a, sizeof a) != 0 || listen(g_listen, 8) != 0 ||
        getsockname(g_listen, (struct sockaddr *)&a, &al) != 0)
        return -1;
    g_port = ntohs(a.sin_port);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    onepath_trace_shutdown();
    ot_clear_env();
    if (g_listen >= 0)
        close(g_listen);
    g_listen = -1;
    return 0;
}

/* Accepts one connection and reads one whole request (head and Content-Length body) from it,
 * waiting at most timeout_ms for each step. Returns the connection, -1 on timeout or error. */
static int accept_request(int timeout_ms)
{
    struct pollfd p = {g_listen, POLLIN, 0};
    if (poll(&p, 1, timeout_ms) != 1)
        return -1;
    int c = accept(g_listen, NULL, NULL);
    if (c < 0)
        return -1;
    char buf[65536];
    size_t len = 0;
    for (;;) {
        struct pollfd q = {c, POLLIN, 0};
        if (len == sizeof buf - 1 || poll(&q, 1, timeout_ms) != 1)
            break;
        ssize_t r = read(c, buf + len, sizeof buf - 1 - len);
        if (r <= 0)
            break;
        len += (size_t)r;
        buf[len] = 0;
        char *end = strstr(buf, "\r\n\r\n");
        const char *cl = strcasestr(buf, "Content-Length:");
        if (end && cl && (size_t)(end + 4 - buf) + strtoul(cl + 15, NULL, 10) <= len)
            return c;
    }
    close(c);
    return -1;
}

/* Starts tracing to url (no retries, each attempt's timeout far beyond the stop allowance) and
 * ends one span named name. */
static void init_and_end_span(const char *url, const char *name)
{
    setenv("ONEPATH_TRACE_ENABLE", "1", 1);
    setenv("ONEPATH_TRACE_FLUSH_MS", "10", 1);
    setenv("ONEPATH_TRACE_OTLP_RETRIES", "0", 1);
    setenv("ONEPATH_TRACE_OTLP_TIMEOUT_MS", "30000", 1);
    onepath_trace_opts_t o = ONEPATH_TRACE_OPTS_DEFAULT;
    o.ndjson_path = "";
    o.sample_ratio = 1.0;
    onepath_otlp_opts_t x = ONEPATH_OTLP_OPTS_DEFAULT;
    x.otlp_http = url;
    assert_int_equal(onepath_trace_init_otlp(&o, &x), ONEPATH_OK);
    onepath_span_end(onepath_span_start(name, ONEPATH_SPAN_KIND_CLIENT, NULL));
}

static void test_shutdown_does_not_wait_for_a_silent_collector(void **state)
{
    (void)state;
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%u/v1/traces", g_port);
    init_and_end_span(url, "quiet");

    /* the sender has posted the span and now waits for an answer that never comes */
    int c = accept_request(10000);
    assert_true(c >= 0);
    uint64_t t0 = ot_now_ns();
    onepath_trace_shutdown();
    uint64_t ms = (ot_now_ns() - t0) / 1000000u;
    close(c);
    print_message("shutdown took %llu ms\n", (unsigned long long)ms);
    assert_true(ms < 8000); /* the stop allowance is ~2 s; the attempt's own timeout is 30 s */

    onepath_export_stats_t st;
    assert_int_equal(onepath_export_stats(ONEPATH_EXPORT_OTLP_HTTP, &st, NULL, 0), ONEPATH_OK);
    assert_int_equal(st.queued, 1);
    assert_int_equal(st.written, 0);
    assert_int_equal(st.lost, 1);
}

/* ------------------------------------------------------------ the name lookup */

/* The resolver stand-in: every name is the collector on 127.0.0.1; while g_hold is set it does not
 * answer (for at most HOLD_SAFETY_MS, so that the old, blocking lookup fails the test instead of
 * hanging it). */
#define HOLD_SAFETY_MS 20000
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_cv = PTHREAD_COND_INITIALIZER;
static int g_hold;
static atomic_int g_lookups;

static int stand_in_resolver(const char *host, const char *port, const struct addrinfo *hints, struct addrinfo **res)
{
    (void)host;
    atomic_fetch_add(&g_lookups, 1);
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += HOLD_SAFETY_MS / 1000;
    pthread_mutex_lock(&g_mu);
    while (g_hold && pthread_cond_timedwait(&g_cv, &g_mu, &until) == 0) {
    }
    pthread_mutex_unlock(&g_mu);
    return getaddrinfo("127.0.0.1", port, hints, res);
}

static void set_hold(int hold)
{
    pthread_mutex_lock(&g_mu);
    g_hold = hold;
    pthread_cond_broadcast(&g_cv);
    pthread_mutex_unlock(&g_mu);
}

static int looked_up(void *arg)
{
    (void)arg;
    return atomic_load(&g_lookups) > 0;
}

static int no_lookup_running(void *arg)
{
    (void)arg;
    return tg_op_lookup_running() == 0;
}

/* Traces to a collector given by name, through the stand-in resolver. */
static void init_named(void)
{
    static char url[96]; /* outlives init, whatever init keeps */
    snprintf(url, sizeof url, "http://collector.invalid:%u/v1/traces", g_port);
    atomic_store(&g_lookups, 0);
    tg_op_lookup_set_resolver(stand_in_resolver);
    init_and_end_span(url, "named");
}

static void test_shutdown_does_not_wait_for_a_silent_resolver(void **state)
{
    (void)state;
    set_hold(1);
    init_named();
    /* the sender is waiting for the collector's name */
    assert_true(ot_wait_for(looked_up, NULL, 10000));
    uint64_t t0 = ot_now_ns();
    onepath_trace_shutdown();
    uint64_t ms = (ot_now_ns() - t0) / 1000000u;
    print_message("shutdown took %llu ms\n", (unsigned long long)ms);
    /* the stop allowance is ~2 s; the lookup would have held it until HOLD_SAFETY_MS */
    assert_true(ms < 8000);
    onepath_export_stats_t st;
    assert_int_equal(onepath_export_stats(ONEPATH_EXPORT_OTLP_HTTP, &st, NULL, 0), ONEPATH_OK);
    assert_int_equal(st.queued, 1);
    assert_int_equal(st.written, 0);
    assert_int_equal(st.lost, 1);
    /* the abandoned lookup ends when the resolver answers, and frees itself */
    assert_int_equal(tg_op_lookup_running(), 1);
    set_hold(0);
    assert_true(ot_wait_for(no_lookup_running, NULL, 10000));
    assert_int_equal(accept_request(0), -1); /* nothing was sent after shutdown */
    tg_op_lookup_set_resolver(NULL);
}

static void test_named_collector_is_resolved(void **state)
{
    (void)state;
    set_hold(0);
    init_named();
    int c = accept_request(10000);
    assert_true(c >= 0);
    static const char ok[] = "HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
    assert_int_equal(write(c, ok, sizeof ok - 1), (ssize_t)(sizeof ok - 1));
    close(c);
    onepath_trace_shutdown();
    onepath_export_stats_t st;
    assert_int_equal(onepath_export_stats(ONEPATH_EXPORT_OTLP_HTTP, &st, NULL, 0), ONEPATH_OK);
    assert_int_equal(st.queued, 1);
    assert_int_equal(st.written, 1);
    assert_int_equal(atomic_load(&g_lookups), 1);
    assert_true(ot_wait_for(no_lookup_running, NULL, 10000));
    tg_op_lookup_set_resolver(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_shutdown_does_not_wait_for_a_silent_collector, setup, teardown),
        cmocka_unit_test_setup_teardown(test_shutdown_does_not_wait_for_a_silent_resolver, setup, teardown),
        cmocka_unit_test_setup_teardown(test_named_collector_is_resolved, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
