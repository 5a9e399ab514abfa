/* test_onepath_msg.c: the send, forward and receive helpers end to end: sensor -> router -> storage
 * where each hop only sees attachments; one trace across four spans with the right parent links in
 * the NDJSON export, user bytes intact at every hop, end-to-end latency and the built-in counters;
 * a failed send (dropped counter, ERROR status), a too-small buffer, a sender clock ahead of ours,
 * no current span, an empty user attachment, and a receiver with tracing off unwrapping TLVs. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "onepath_test_util.h"
#include "tracegate/onepath.h"

static char g_dir[512];
static char g_path[600];

static int setup(void **state)
{
    (void)state;
    onepath_trace_shutdown();
    ot_clear_env();
    const char *d = ot_tmpdir("msg");
    if (!d)
        return -1;
    snprintf(g_dir, sizeof g_dir, "%s", d);
    snprintf(g_path, sizeof g_path, "%s/spans.ndjson", g_dir);
    setenv("ONEPATH_TRACE_ENABLE", "1", 1);
    setenv("ONEPATH_TRACE_SAMPLE_RATIO", "1", 1);
    setenv("ONEPATH_TRACE_NDJSON_PATH", g_path, 1);
    setenv("ONEPATH_METRICS_ENABLE", "1", 1);
    return onepath_trace_init(NULL) == ONEPATH_OK ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    onepath_trace_shutdown();
    ot_clear_env();
    ot_rmdir(g_dir);
    return 0;
}

struct metric_vals {
    int64_t sent, recv, dropped, bytes_sent, bytes_recv;
    uint64_t e2e_count, publish_count;
};

static void vals_cb(const onepath_metric_sample_t *s, void *arg)
{
    struct metric_vals *v = arg;
    if (!strcmp(s->name, "onepath.msgs.sent"))
        v->sent = s->value;
    else if (!strcmp(s->name, "onepath.msgs.recv"))
        v->recv = s->value;
    else if (!strcmp(s->name, "onepath.msgs.dropped"))
        v->dropped = s->value;
    else if (!strcmp(s->name, "onepath.bytes.sent"))
        v->bytes_sent = s->value;
    else if (!strcmp(s->name, "onepath.bytes.recv"))
        v->bytes_recv = s->value;
    else if (!strcmp(s->name, "onepath.e2e.latency"))
        v->e2e_count = s->hist_count;
    else if (!strcmp(s->name, "onepath.publish.latency"))
        v->publish_count = s->hist_count;
}

static struct metric_vals vals(void)
{
    struct metric_vals v;
    memset(&v, 0, sizeof v);
    onepath_metrics_snapshot(vals_cb, &v);
    return v;
}

struct wire { /* one message "on the wire" */
    uint8_t att[512];
    size_t att_len;
    char payload[64];
};

static void send_msg(struct wire *w, onepath_send_t *s, const char *payload)
{
    memcpy(w->att, s->attachment, s->attachment_len);
    w->att_len = s->attachment_len;
    snprintf(w->payload, sizeof w->payload, "%s", payload);
    onepath_send_end(s, strlen(payload), 1);
}

static void hexs(const uint8_t *b, size_t n, char *out)
{
    for (size_t i = 0; i < n; i++)
        sprintf(out + 2 * i, "%02x", b[i]);
}

static const struct tj *span_named(struct tj **v, long n, const char *name)
{
    for (long i = 0; i < n; i++)
        if (!strcmp(tj_str(v[i], "name"), name))
            return v[i];
    fail_msg("no span %s", name);
    return NULL;
}

static void test_three_hops(void **state)
{
    (void)state;
    struct metric_vals m0 = vals();
    uint8_t buf[512];
    struct wire w1, w2;
    onepath_send_t s;
    onepath_recv_t r;

    /* sensor: a PRODUCER span around the publish; the attachment carries its context */
    onepath_span_t pub = onepath_span_start("sensor.publish", ONEPATH_SPAN_KIND_PRODUCER, NULL);
    onepath_trace_ctx_t sensor;
    onepath_trace_current_ctx(&sensor);
    assert_int_equal(onepath_send_begin(&s, "sensor-attachment", 17, buf, sizeof buf), ONEPATH_OK);
    assert_null(s.span);
    send_msg(&w1, &s, "reading=42");
    onepath_span_end(pub);

    /* router: receive, CONSUMER span with the remote parent, forward inside it */
    assert_int_equal(onepath_recv(&r, w1.att, w1.att_len, strlen(w1.payload)), ONEPATH_OK);
    assert_int_equal(r.user_len, 17);
    assert_memory_equal(r.user, "sensor-attachment", 17);
    assert_true(r.has_parent);
    assert_memory_equal(&r.parent, &sensor, sizeof sensor);
    assert_true(r.e2e_ns >= 0);
    onepath_span_t consume = onepath_span_start("router.consume", ONEPATH_SPAN_KIND_CONSUMER, &r.parent);
    onepath_trace_ctx_t router_in;
    onepath_trace_current_ctx(&router_in);
    assert_int_equal(onepath_forward_begin(&s, "router.forward", r.user, r.user_len, buf, sizeof buf), ONEPATH_OK);
    assert_non_null(s.span);
    onepath_trace_ctx_t fwd;
    onepath_trace_current_ctx(&fwd); /* the PRODUCER span is current while sending */
    assert_memory_not_equal(fwd.span_id, router_in.span_id, 8);
    send_msg(&w2, &s, w1.payload);
    onepath_trace_ctx_t after;
    onepath_trace_current_ctx(&after); /* send_end ended and popped it */
    assert_memory_equal(&after, &router_in, sizeof after);
    onepath_span_end(consume);

    /* storage */
    assert_int_equal(onepath_recv(&r, w2.att, w2.att_len, strlen(w2.payload)), ONEPATH_OK);
    assert_int_equal(r.user_len, 17);
    assert_memory_equal(r.user, "sensor-attachment", 17); /* user bytes unchanged across hops */
    assert_memory_equal(&r.parent, &fwd, sizeof fwd);
    onepath_span_t store = onepath_span_start("storage.consume", ONEPATH_SPAN_KIND_CONSUMER, &r.parent);
    onepath_span_end(store);

    struct metric_vals m1 = vals();
    assert_int_equal(m1.sent - m0.sent, 2);
    assert_int_equal(m1.recv - m0.recv, 2);
    assert_int_equal(m1.bytes_sent - m0.bytes_sent, 20);
    assert_int_equal(m1.bytes_recv - m0.bytes_recv, 20);
    assert_int_equal(m1.e2e_count - m0.e2e_count, 2);
    assert_int_equal(m1.publish_count - m0.publish_count, 2);
    assert_int_equal(m1.dropped - m0.dropped, 0);
    onepath_trace_shutdown();

    char **lines;
    int complete;
    long n = ot_read_lines(g_path, &lines, &complete);
    assert_int_equal(n, 4);
    struct tj *v[4];
    for (long i = 0; i < n; i++)
        assert_non_null(v[i] = tj_parse(lines[i], strlen(lines[i])));
    char tid[33], sid[17];
    hexs(sensor.trace_id, 16, tid);
    for (int i = 0; i < 4; i++)
        assert_string_equal(tj_str(v[i], "trace_id"), tid); /* one trace across the hops */
    const struct tj *p = span_named(v, 4, "sensor.publish"), *c = span_named(v, 4, "router.consume"),
                    *f = span_named(v, 4, "router.forward"), *st = span_named(v, 4, "storage.consume");
    hexs(sensor.span_id, 8, sid);
    assert_string_equal(tj_str(p, "span_id"), sid);
    assert_string_equal(tj_str(p, "parent_span_id"), "");
    assert_string_equal(tj_str(c, "parent_span_id"), sid);
    assert_string_equal(tj_str(f, "parent_span_id"), tj_str(c, "span_id"));
    assert_string_equal(tj_str(st, "parent_span_id"), tj_str(f, "span_id"));
    assert_string_equal(tj_str(f, "kind"), "PRODUCER");
    assert_string_equal(tj_str(c, "kind"), "CONSUMER");
    assert_string_equal(tj_str(tj_get(f, "status"), "code"), "UNSET");
    for (int i = 0; i < 4; i++)
        tj_free(v[i]);
    ot_free_lines(lines, n);
}

static void test_send_failure(void **state)
{
    (void)state;
    struct metric_vals m0 = vals();
    uint8_t buf[128];
    onepath_send_t s;
    onepath_span_t consume = onepath_span_start("consume", ONEPATH_SPAN_KIND_CONSUMER, NULL);
    onepath_forward_begin(&s, NULL, "x", 1, buf, sizeof buf);
    onepath_send_end(&s, 10, 0);
    onepath_span_end(consume);
    struct metric_vals m1 = vals();
    assert_int_equal(m1.dropped - m0.dropped, 1);
    assert_int_equal(m1.sent - m0.sent, 0);
    assert_int_equal(m1.bytes_sent - m0.bytes_sent, 0);
    onepath_trace_shutdown();
    char **lines;
    int complete;
    long n = ot_read_lines(g_path, &lines, &complete);
    assert_int_equal(n, 2);
    struct tj *v = tj_parse(lines[0], strlen(lines[0])); /* the forward span ended first */
    assert_non_null(v);
    assert_string_equal(tj_str(v, "name"), "forward");
    assert_string_equal(tj_str(tj_get(v, "status"), "code"), "ERROR");
    assert_string_equal(tj_str(tj_get(v, "status"), "message"), "send failed");
    tj_free(v);
    ot_free_lines(lines, n);
}

static void test_small_buffer(void **state)
{
    (void)state;
    static const char user[] = "0123456789";
    uint8_t buf[ONEPATH_ATTACH_OVERHEAD + 9];
    onepath_send_t s;
    assert_int_equal(onepath_send_begin(&s, user, 10, buf, sizeof buf), ONEPATH_ERR_NOSPACE);
    assert_ptr_equal(s.attachment, user);
    assert_int_equal(s.attachment_len, 10);
    onepath_send_end(&s, 1, 1);
    assert_int_equal(onepath_send_begin(&s, user, 10, NULL, 0), ONEPATH_ERR_NOSPACE);
    assert_ptr_equal(s.attachment, user);
    onepath_send_end(&s, 1, 1);
    /* exactly user_len + ONEPATH_ATTACH_OVERHEAD always fits */
    uint8_t exact[ONEPATH_ATTACH_OVERHEAD + 10];
    onepath_span_t sp = onepath_span_start("p", ONEPATH_SPAN_KIND_PRODUCER, NULL);
    assert_int_equal(onepath_send_begin(&s, user, 10, exact, sizeof exact), ONEPATH_OK);
    assert_ptr_equal(s.attachment, exact);
    onepath_send_end(&s, 1, 1);
    onepath_span_end(sp);
    assert_int_equal(onepath_send_begin(NULL, user, 10, exact, sizeof exact), ONEPATH_ERR_INVAL);
    assert_int_equal(onepath_recv(NULL, user, 10, 0), ONEPATH_ERR_INVAL);
}

static void test_clock_ahead_dropped(void **state)
{
    (void)state;
    struct metric_vals m0 = vals();
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    onepath_tlv_t t;
    memset(&t, 0, sizeof t);
    t.has_send_ts = 1;
    t.send_ts_ns = ((uint64_t)ts.tv_sec + 3600) * 1000000000ull; /* an hour in our future */
    t.user = (const uint8_t *)"u";
    t.user_len = 1;
    uint8_t buf[64];
    size_t n;
    assert_int_equal(onepath_tlv_encode(&t, buf, sizeof buf, &n), ONEPATH_OK);
    onepath_recv_t r;
    assert_int_equal(onepath_recv(&r, buf, n, 1), ONEPATH_OK);
    assert_int_equal(r.e2e_ns, -1);
    assert_false(r.has_parent);
    struct metric_vals m1 = vals();
    assert_int_equal(m1.e2e_count, m0.e2e_count); /* negative latency dropped */
    assert_int_equal(m1.recv - m0.recv, 1);
}

static void test_no_span_empty_user(void **state)
{
    (void)state;
    uint8_t buf[64];
    onepath_send_t s;
    onepath_trace_ctx_t c;
    assert_int_equal(onepath_trace_current_ctx(&c), 0);
    assert_int_equal(onepath_send_begin(&s, NULL, 0, buf, sizeof buf), ONEPATH_OK);
    /* no span: only the send time travels (so e2e latency still works) */
    assert_int_equal(s.attachment_len, 3 + 10);
    onepath_send_end(&s, 0, 1);
    onepath_recv_t r;
    assert_int_equal(onepath_recv(&r, s.attachment, s.attachment_len, 0), ONEPATH_OK);
    assert_false(r.has_parent);
    assert_int_equal(r.user_len, 0);
    assert_true(r.e2e_ns >= 0);
}

static void test_receiver_tracing_off(void **state)
{
    (void)state;
    /* a traced peer's attachment */
    uint8_t buf[128];
    onepath_send_t s;
    onepath_span_t sp = onepath_span_start("p", ONEPATH_SPAN_KIND_PRODUCER, NULL);
    onepath_send_begin(&s, "abc", 3, buf, sizeof buf);
    size_t n = s.attachment_len;
    onepath_send_end(&s, 3, 1);
    onepath_span_end(sp);
    /* this side has tracing and metrics off: the TLV is still unwrapped for the user */
    onepath_trace_shutdown();
    ot_clear_env();
    assert_int_equal(onepath_trace_init(NULL), ONEPATH_OK);
    onepath_recv_t r;
    assert_int_equal(onepath_recv(&r, buf, n, 3), ONEPATH_OK);
    assert_int_equal(r.user_len, 3);
    assert_memory_equal(r.user, "abc", 3);
    assert_true(r.has_parent);
    /* and sending passes the user's bytes as they are */
    static const char mine[] = "mine";
    assert_int_equal(onepath_send_begin(&s, mine, 4, buf, sizeof buf), ONEPATH_OK);
    assert_ptr_equal(s.attachment, mine);
    assert_null(s.span);
    onepath_send_end(&s, 4, 1);
    assert_int_equal(onepath_forward_begin(&s, "f", mine, 4, buf, sizeof buf), ONEPATH_OK);
    assert_null(s.span);
    assert_ptr_equal(s.attachment, mine);
    onepath_send_end(&s, 4, 1);
}

/* Metrics on, tracing off: the send time still travels (in a TLV with the user's bytes and no
 * traceparent), so the receiver's onepath.e2e.latency is observed; AUTO_INJECT=0 sends the user's
 * bytes as they are. Before, nothing was injected unless tracing was on, and the e2e histogram of
 * a metrics-only deployment stayed empty. */
static void test_metrics_only_e2e(void **state)
{
    (void)state;
    onepath_trace_shutdown();
    ot_clear_env();
    setenv("ONEPATH_METRICS_ENABLE", "1", 1);
    assert_int_equal(onepath_trace_init(NULL), ONEPATH_OK);
    assert_false(onepath_trace_enabled());
    assert_true(onepath_metrics_enabled());
    struct metric_vals m0 = vals();
    static const char user[] = "abc";
    uint8_t buf[128];
    onepath_send_t s;
    assert_int_equal(onepath_send_begin(&s, user, 3, buf, sizeof buf), ONEPATH_OK);
    assert_ptr_equal(s.attachment, buf);
    assert_int_equal(s.attachment_len, 3 + 10 + 2 + 3); /* magic+version, SEND_TS, USER */
    assert_null(s.span);
    struct wire w;
    send_msg(&w, &s, "payload");
    onepath_recv_t r;
    assert_int_equal(onepath_recv(&r, w.att, w.att_len, strlen(w.payload)), ONEPATH_OK);
    assert_false(r.has_parent);
    assert_int_equal(r.user_len, 3);
    assert_memory_equal(r.user, user, 3);
    assert_true(r.e2e_ns >= 0);
    struct metric_vals m1 = vals();
    assert_int_equal(m1.e2e_count - m0.e2e_count, 1);
    assert_int_equal(m1.sent - m0.sent, 1);
    assert_int_equal(m1.recv - m0.recv, 1);
    /* AUTO_INJECT=0: the user's bytes go as they are */
    onepath_trace_shutdown();
    setenv("ONEPATH_TRACE_AUTO_INJECT", "0", 1);
    assert_int_equal(onepath_trace_init(NULL), ONEPATH_OK);
    assert_int_equal(onepath_send_begin(&s, user, 3, buf, sizeof buf), ONEPATH_OK);
    assert_ptr_equal(s.attachment, user);
    assert_int_equal(s.attachment_len, 3);
    onepath_send_end(&s, 3, 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_three_hops, setup, teardown),
        cmocka_unit_test_setup_teardown(test_send_failure, setup, teardown),
        cmocka_unit_test_setup_teardown(test_small_buffer, setup, teardown),
        cmocka_unit_test_setup_teardown(test_clock_ahead_dropped, setup, teardown),
        cmocka_unit_test_setup_teardown(test_no_span_empty_user, setup, teardown),
        cmocka_unit_test_setup_teardown(test_receiver_tracing_off, setup, teardown),
        cmocka_unit_test_setup_teardown(test_metrics_only_e2e, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
