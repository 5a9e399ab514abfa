/* test_fanout_hostile.c: a federated session (gateway/fleet_fanout.c) whose node answers
 * QueryServiceState with has_more parts without end: the fan-out, which merges the nodes' answers
 * into one, fails that node once the merged answer passes its limit and answers the client,
 * instead of collecting whatever the node streams; a node whose ReadBuffers answer passes what the
 * session's buffers can hold is failed there, and one that never answers ReadBuffers after the
 * fan-out's read idle time. The node is a raw node (--node NAME=ADDR) served by
 * a fake ConsumerPort in this process. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "consumer_port.pb-c.h"
#include "fleet.h"
#include "fleet_fanout.h"
#include "gw_config.h"
#include "gw_core.h"
#include "link_int.h"
#include "tracegate/clock.h"
#include "tracegate/conn.h"
#include "tracegate/ipc_client.h"
#include "tracegate/ipc_host.h"
#include "tracegate/log.h"

#include "test_fanout_util.h"
#include "tg_test_util.h"

#define PART (100u << 10)
#define FLOOD (40u << 20) /* past the fan-out's 32 MiB */

static size_t g_sent;

/* QueryServiceState: FLOOD bytes of has_more parts, never the last one */
static void m_query(tg_ipc_call *call, const ProtobufCMessage *req, void *svc, void *ps)
{
    (void)req, (void)svc, (void)ps;
    uint8_t *part = calloc(1, PART);
    assert_non_null(part);
    for (g_sent = 0; g_sent < FLOOD; g_sent += PART)
        tg_ipc_call_reply_bytes(call, part, PART, 1, -1);
    free(part);
}

/* EnableTracing: the session ended at once */
static void m_enable(tg_ipc_call *call, const ProtobufCMessage *req, void *svc, void *ps)
{
    (void)req, (void)svc, (void)ps;
    static const uint8_t disabled[] = {0x08, 0x01};
    tg_ipc_call_reply_bytes(call, disabled, sizeof disabled, 0, -1);
}

/* ReadBuffers: READ_FLOOD bytes of 100 KiB packets (a field 36 of 'x's), then the last reply */
#define READ_FLOOD (24u << 20)
static int g_read_silent; /* ReadBuffers: never answered */

static void m_read(tg_ipc_call *call, const ProtobufCMessage *req, void *svc, void *ps)
{
    (void)req, (void)svc, (void)ps;
    if (g_read_silent)
        return; /* the call stays open, unanswered, until the host is freed */
    size_t body = PART - 16, pkt = body + 5, slice = 1 + 3 + pkt + 2; /* data(1) + last(2) */
    uint8_t *r = malloc(slice + 8), *p = r;
    assert_non_null(r);
    *p++ = 0x12, *p++ = (uint8_t)(0x80 | (slice & 0x7f)), *p++ = (uint8_t)(0x80 | ((slice >> 7) & 0x7f));
    *p++ = (uint8_t)(slice >> 14);                       /* slices(2) */
    *p++ = 0x0a, *p++ = (uint8_t)(0x80 | (pkt & 0x7f)), *p++ = (uint8_t)(0x80 | ((pkt >> 7) & 0x7f));
    *p++ = (uint8_t)(pkt >> 14);                         /* data(1) */
    *p++ = 0xa2, *p++ = 0x02, *p++ = (uint8_t)(0x80 | (body & 0x7f)), *p++ = (uint8_t)(0x80 | ((body >> 7) & 0x7f));
    *p++ = (uint8_t)(body >> 14);                        /* the packet: field 36 */
    memset(p, 'x', body);
    p += body;
    *p++ = 0x10, *p++ = 0x01;                            /* last_slice_for_packet(2) */
    for (g_sent = 0; g_sent < READ_FLOOD; g_sent += (size_t)(p - r))
        tg_ipc_call_reply_bytes(call, r, (size_t)(p - r), 1, -1);
    tg_ipc_call_reply_bytes(call, NULL, 0, 0, -1);
    free(r);
}

static const struct tg_ipc_method k_methods[] = {
    {"EnableTracing", &perfetto__protos__enable_tracing_request__descriptor, m_enable},
    {"QueryServiceState", &perfetto__protos__query_service_state_request__descriptor, m_query},
    {"ReadBuffers", &perfetto__protos__read_buffers_request__descriptor, m_read},
};

struct client {
    tg_ipc_service_proxy *port;
    int done, success;
    uint64_t bytes; /* reply bytes of the current call */
};

static void on_reply(tg_ipc_client *cli, int success, int has_more, const uint8_t *reply, size_t len, void *arg)
{
    (void)cli, (void)reply, (void)len;
    struct client *c = arg;
    c->bytes += len;
    if (!has_more) {
        c->done = 1;
        c->success = success;
    }
}

static int answered(void *arg) { return ((struct client *)arg)->done; }

/* A fake node "evil", a hub whose fleet names it, and a client of a federated session over it */
static struct fo_world W;
static struct client C;

static int setup(void **state)
{
    (void)state;
    tg_log_set_level(TG_LOG_ERROR);
    memset(&C, 0, sizeof C);
    /* the node: a ConsumerPort that streams its answers without end, or past its buffers */
    static const struct tg_ipc_service_def def = {.name = "ConsumerPort", .methods = k_methods, .n_methods = 3};
    static const char *const nodes[] = {"evil"};
    C.port = fo_world_up(&W, "fanout", &def, 2 * FLOOD, nodes, 1, "evil", NULL, NULL);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    fo_world_down(&W);
    return 0;
}

/* Calls method with args and waits for its last reply. */
static void call(const char *method, const uint8_t *args, size_t len, int timeout_ms)
{
    C.done = C.success = 0;
    C.bytes = 0;
    assert_true(tg_ipc_client_invoke_bytes(W.cli, C.port, method, args, len, -1, on_reply, &C) != 0);
    assert_true(tg_test_run_until(W.base, answered, &C, timeout_ms));
}

/* QueryServiceState answered with has_more parts without end: the fan-out fails the node once the
 * merged answers pass 32 MiB and answers the client, instead of collecting on */
static void test_endless_answer_from_a_node(void **state)
{
    (void)state;
    call("QueryServiceState", NULL, 0, 30000);
    assert_true(g_sent >= FLOOD);
    assert_false(C.success); /* the one node failed: nobody answered */
}

/* A session with a 1 MiB buffer whose node answers ReadBuffers with 24 MiB: the node is failed at
 * twice its buffers plus 16 MiB (18 MiB), and the client's trace stops there with the node's
 * failure packet, instead of passing on whatever the node sends */
static void test_read_beyond_buffers(void **state)
{
    (void)state;
    /* EnableTracingRequest{trace_config{buffers{size_kb: 1024}}} */
    static const uint8_t enable[] = {0x0a, 0x05, 0x0a, 0x03, 0x08, 0x80, 0x08};
    call("EnableTracing", enable, sizeof enable, 20000);
    assert_true(C.success);
    call("ReadBuffers", NULL, 0, 60000);
    assert_true(C.success);
    assert_true(g_sent >= READ_FLOOD);
    if (C.bytes <= (16u << 20) || C.bytes >= (18u << 20) + (1u << 20))
        fail_msg("the client got %llu bytes", (unsigned long long)C.bytes);
}

/* A node that never answers ReadBuffers is failed after the fan-out's read idle time (300 ms here)
 * and the client's read completes with its failure packet, instead of waiting for it forever
 * (and holding every node read after it) */
static void test_silent_read(void **state)
{
    (void)state;
    tg_fanout_set_read_idle_ms(tg_fleet_fanout(W.fleet), 300);
    g_read_silent = 1;
    static const uint8_t enable[] = {0x0a, 0x05, 0x0a, 0x03, 0x08, 0x80, 0x08};
    call("EnableTracing", enable, sizeof enable, 20000);
    uint64_t t0 = tg_mono_ms();
    call("ReadBuffers", NULL, 0, 20000);
    g_read_silent = 0;
    assert_true(tg_test_waited(t0, 300));
    assert_true(C.success);
    assert_true(C.bytes > 0); /* the node's failure packet */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_endless_answer_from_a_node, setup, teardown),
        cmocka_unit_test_setup_teardown(test_read_beyond_buffers, setup, teardown),
        cmocka_unit_test_setup_teardown(test_silent_read, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
