/* test_fanout_merge.c: a federated session (gateway/fleet_fanout.c) over three nodes whose
 * merged QueryServiceState and GetTraceStats answers pass what one IPC frame holds (128 KiB): the
 * client gets QueryServiceState in has_more parts, each within a frame, that concatenate (as
 * Perfetto's client and tracectl query do) into every node's producers; GetTraceStats, which
 * answers once, comes as one reply within a frame holding the node answers that fit. The nodes
 * are raw nodes (--node NAME=ADDR) served by one fake ConsumerPort in this process. Also the cutter
 * (gateway/fed_split.c) alone: an entry no reply can hold, a malformed answer. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "consumer_port.pb-c.h"
#include "fleet.h"
#include "fed_split.h"
#include "fleet_fanout.h"
#include "gw_config.h"
#include "gw_core.h"
#include "link_int.h"
#include "tracegate/conn.h"
#include "tracegate/frame.h"
#include "tracegate/ipc_client.h"
#include "tracegate/ipc_host.h"
#include "tracegate/log.h"
#include "tracegate/pbwire.h"

#include "test_fanout_util.h"
#include "tg_test_util.h"

#define NODES 3
#define PARTS 3           /* a node's QueryServiceState parts */
#define PER_PART 400      /* producers per part, ~100 bytes each: ~40 KiB a part, 360 KiB merged */
#define STATS_BUFFERS 800 /* a node's GetTraceStats: buffer_stats of ~75 bytes: ~60 KiB a node */

static int g_node_seq; /* which node answers next (each node numbers its producers apart) */

static size_t put_len_field(uint8_t *p, uint32_t num, const uint8_t *body, size_t len)
{
    size_t n = tg_pb_put_tag(p, num, TG_PB_LEN);
    n += tg_pb_put_varint(p + n, len);
    memcpy(p + n, body, len);
    return n + len;
}

/* QueryServiceStateResponse{service_state{producers[PER_PART]{id, name}}} x PARTS, has_more on
 * all but the last, as traced streams its state */
static void m_query(tg_ipc_call *call, const ProtobufCMessage *req, void *svc, void *ps)
{
    (void)req, (void)svc, (void)ps;
    int node = g_node_seq++;
    uint8_t *state = malloc(PER_PART * 128), *resp = malloc(PER_PART * 128 + 16);
    assert_non_null(state);
    assert_non_null(resp);
    for (int part = 0; part < PARTS; part++) {
        size_t sl = 0;
        for (int i = 0; i < PER_PART; i++) {
            int id = node * 100000 + part * 1000 + i;
            uint8_t prod[120], name[100];
            int nl = snprintf((char *)name, sizeof name, "producer-%07d-%s", id,
                              "padding-padding-padding-padding-padding-padding-padding-padding-pad");
            size_t pl = tg_pb_put_tag(prod, 1, TG_PB_VARINT);
            pl += tg_pb_put_varint(prod + pl, (uint64_t)id);
            pl += put_len_field(prod + pl, 2, name, (size_t)nl);
            sl += put_len_field(state + sl, 1, prod, pl);
        }
        size_t rl = put_len_field(resp, 1, state, sl);
        tg_ipc_call_reply_bytes(call, resp, rl, part < PARTS - 1, -1);
    }
    free(state);
    free(resp);
}

/* GetTraceStatsResponse{trace_stats{buffer_stats[STATS_BUFFERS]{bytes_written: 1, ...}}} */
static void m_stats(tg_ipc_call *call, const ProtobufCMessage *req, void *svc, void *ps)
{
    (void)req, (void)svc, (void)ps;
    uint8_t *ts = malloc(STATS_BUFFERS * 96), *resp = malloc(STATS_BUFFERS * 96 + 16);
    assert_non_null(ts);
    assert_non_null(resp);
    size_t tl = 0;
    for (int i = 0; i < STATS_BUFFERS; i++) {
        uint8_t b[80];
        size_t bl = 0;
        for (uint32_t f = 1; f <= 12; f++) { /* bytes_written 1, then counters of 5 bytes each */
            bl += tg_pb_put_tag(b + bl, f, TG_PB_VARINT);
            bl += tg_pb_put_varint(b + bl, f == 1 ? 1 : 1u << 28);
        }
        tl += put_len_field(ts + tl, 1, b, bl);
    }
    size_t rl = put_len_field(resp, 1, ts, tl);
    assert_true(rl < TG_FRAME_MAX_DEFAULT - 256);
    tg_ipc_call_reply_bytes(call, resp, rl, 0, -1);
    free(ts);
    free(resp);
}

static const struct tg_ipc_method k_methods[] = {
    {"QueryServiceState", &perfetto__protos__query_service_state_request__descriptor, m_query},
    {"GetTraceStats", &perfetto__protos__get_trace_stats_request__descriptor, m_stats},
};

struct client {
    tg_ipc_service_proxy *port;
    int done, success, closed;
    size_t replies, largest;
    struct evbuffer *got; /* every reply's bytes, concatenated */
};

static void on_reply(tg_ipc_client *cli, int success, int has_more, const uint8_t *reply, size_t len, void *arg)
{
    (void)cli;
    struct client *c = arg;
    c->replies++;
    if (len > c->largest)
        c->largest = len;
    if (len)
        evbuffer_add(c->got, reply, len);
    if (!has_more) {
        c->done = 1;
        c->success = success;
    }
}

static void on_disconnect(tg_ipc_client *cli, const char *reason, void *arg)
{
    (void)cli;
    struct client *c = arg;
    fprintf(stderr, "the client was disconnected: %s\n", reason ? reason : "?");
    c->closed = 1;
}

static int answered(void *arg) { return ((struct client *)arg)->done || ((struct client *)arg)->closed; }

/* a hub whose fleet names the fake node's socket as nodes n0, n1 and n2, and a client of a
 * federated session over all three */
static struct fo_world W;
static struct client C;

static int setup(void **state)
{
    (void)state;
    tg_log_set_level(TG_LOG_ERROR);
    memset(&C, 0, sizeof C);
    g_node_seq = 0;
    C.got = evbuffer_new();
    static const struct tg_ipc_service_def def = {.name = "ConsumerPort", .methods = k_methods, .n_methods = 2};
    static const char *const nodes[NODES] = {"n0", "n1", "n2"};
    static const struct tg_ipc_client_cbs cbs = {.on_disconnect = on_disconnect};
    C.port = fo_world_up(&W, "fanmerge", &def, 0, nodes, NODES, "n0,n1,n2", &cbs, &C);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    fo_world_down(&W);
    evbuffer_free(C.got);
    return 0;
}

static void call(const char *method)
{
    C.done = C.success = 0;
    C.replies = C.largest = 0;
    evbuffer_drain(C.got, evbuffer_get_length(C.got));
    assert_true(tg_ipc_client_invoke_bytes(W.cli, C.port, method, NULL, 0, -1, on_reply, &C) != 0);
    assert_true(tg_test_run_until(W.base, answered, &C, 30000));
    assert_false(C.closed); /* an oversized frame closes the client's connection */
    assert_true(C.done);
}

/* 360 KiB of producers from three nodes: several has_more parts, each within a frame, whose
 * concatenation decodes (as tracectl query decodes it) to every producer of every node once */
static void test_query_state_in_parts(void **state)
{
    (void)state;
    call("QueryServiceState");
    assert_true(C.success);
    assert_true(C.replies > 1);
    assert_true(C.largest <= TG_FRAME_MAX_DEFAULT - 64);
    size_t n = evbuffer_get_length(C.got);
    Perfetto__Protos__QueryServiceStateResponse *r =
        perfetto__protos__query_service_state_response__unpack(NULL, n, evbuffer_pullup(C.got, -1));
    assert_non_null(r);
    assert_non_null(r->service_state);
    assert_int_equal(r->service_state->n_producers, NODES * PARTS * PER_PART);
    static char seen[NODES][PARTS][PER_PART];
    memset(seen, 0, sizeof seen);
    for (size_t i = 0; i < r->service_state->n_producers; i++) {
        int id = r->service_state->producers[i]->id;
        int node = id / 100000, part = id / 1000 % 100, k = id % 1000;
        assert_true(node < NODES && part < PARTS && k < PER_PART);
        assert_false(seen[node][part][k]);
        seen[node][part][k] = 1;
        assert_non_null(strstr(r->service_state->producers[i]->name, "producer-"));
    }
    perfetto__protos__query_service_state_response__free_unpacked(r, NULL);
}

/* GetTraceStats answers once: three ~60 KiB answers cannot all go, so one reply within a frame
 * holds the two that fit (a consumer takes every reply as a whole answer) */
static void test_trace_stats_one_reply(void **state)
{
    (void)state;
    call("GetTraceStats");
    assert_true(C.success);
    assert_int_equal(C.replies, 1);
    assert_true(C.largest <= TG_FRAME_MAX_DEFAULT - 64);
    size_t n = evbuffer_get_length(C.got);
    Perfetto__Protos__GetTraceStatsResponse *r =
        perfetto__protos__get_trace_stats_response__unpack(NULL, n, evbuffer_pullup(C.got, -1));
    assert_non_null(r);
    assert_non_null(r->trace_stats);
    assert_int_equal(r->trace_stats->n_buffer_stats, 2 * STATS_BUFFERS);
    perfetto__protos__get_trace_stats_response__free_unpacked(r, NULL);
}

static int collect_part(void *arg, const uint8_t *part, size_t len, int has_more)
{
    struct client *c = arg;
    c->replies++;
    if (len > c->largest)
        c->largest = len;
    evbuffer_add(c->got, part, len);
    c->done = !has_more;
    return 0;
}

/* The cutter itself: an entry that no reply can hold is left out and counted, the entries around
 * it pass; a malformed answer is refused */
static void test_split_entry_too_large(void **state)
{
    (void)state;
    size_t big = 200u << 10;
    uint8_t *name = malloc(big), *buf = malloc(big + 64);
    assert_non_null(name);
    assert_non_null(buf);
    memset(name, 'n', big);
    uint8_t prod[64], st[64];
    size_t n = 0, pl = 0, sl;
    /* QueryServiceStateResponse{service_state{producers{id 1}}} */
    pl = tg_pb_put_tag(prod, 1, TG_PB_VARINT);
    pl += tg_pb_put_varint(prod + pl, 1);
    sl = put_len_field(st, 1, prod, pl);
    n += put_len_field(buf + n, 1, st, sl);
    /* ...{service_state{producers{name: 200 KiB}}}: written by hand, in place */
    size_t inner = 1 + tg_pb_varint_size(big) + big, entry = 1 + tg_pb_varint_size(inner) + inner;
    n += tg_pb_put_tag(buf + n, 1, TG_PB_LEN);
    n += tg_pb_put_varint(buf + n, entry);
    n += tg_pb_put_tag(buf + n, 1, TG_PB_LEN);
    n += tg_pb_put_varint(buf + n, inner);
    n += put_len_field(buf + n, 2, name, big);
    /* ...{service_state{num_sessions: 7}} */
    st[0] = 0x18, st[1] = 7;
    n += put_len_field(buf + n, 1, st, 2);

    struct client c;
    memset(&c, 0, sizeof c);
    c.got = evbuffer_new();
    size_t skipped = 0;
    assert_int_equal(tg_fed_split_service_state(buf, n, TG_FRAME_MAX_DEFAULT - 256, collect_part, &c, &skipped), 0);
    assert_int_equal(skipped, 1);
    assert_int_equal(c.replies, 1);
    assert_true(c.done);
    size_t got = evbuffer_get_length(c.got);
    Perfetto__Protos__QueryServiceStateResponse *r =
        perfetto__protos__query_service_state_response__unpack(NULL, got, evbuffer_pullup(c.got, -1));
    assert_non_null(r);
    assert_int_equal(r->service_state->n_producers, 1);
    assert_int_equal(r->service_state->producers[0]->id, 1);
    assert_int_equal(r->service_state->num_sessions, 7);
    perfetto__protos__query_service_state_response__free_unpacked(r, NULL);

    c.replies = 0;
    assert_int_equal(tg_fed_split_service_state(buf, n - 1, TG_FRAME_MAX_DEFAULT - 256, collect_part, &c, &skipped),
                     -1); /* truncated */
    evbuffer_free(c.got);
    free(name);
    free(buf);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_query_state_in_parts, setup, teardown),
        cmocka_unit_test_setup_teardown(test_trace_stats_one_reply, setup, teardown),
        cmocka_unit_test(test_split_entry_too_large),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
