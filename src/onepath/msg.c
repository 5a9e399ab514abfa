/* msg.c: the send, forward and receive helpers: building the outgoing attachment (traceparent of
 * the current span + send time + user bytes) when tracing or metrics, and AUTO_INJECT, are on
 * (metrics alone: the send time, for the receiver's onepath.e2e.latency), reading the
 * incoming one (parent context, end-to-end latency, user bytes), and keeping the built-in
 * onepath.* metrics. Each helper initialises OnePath lazily on first use. */
#include <string.h>

#include "onepath/metrics.h"
#include "onepath/runtime.h"
#include "tracegate/clock.h"
#include "tracegate/onepath.h"

static int prepare(onepath_send_t *s, const void *user, size_t user_len, void *buf, size_t cap)
{
    s->attachment = user;
    s->attachment_len = user ? user_len : 0;
    if ((!atomic_load_explicit(&tg_op_g_trace_on, memory_order_relaxed) &&
         !atomic_load_explicit(&tg_op_g_metrics_on, memory_order_relaxed)) ||
        !atomic_load_explicit(&tg_op_g_auto_inject, memory_order_relaxed))
        return ONEPATH_OK;
    if (!buf || user_len > SIZE_MAX - ONEPATH_ATTACH_OVERHEAD || cap < user_len + ONEPATH_ATTACH_OVERHEAD ||
        (user_len && !user))
        return ONEPATH_ERR_NOSPACE;
    onepath_tlv_t t;
    memset(&t, 0, sizeof t);
    t.has_traceparent = onepath_trace_current_ctx(&t.traceparent);
    t.has_send_ts = 1;
    t.send_ts_ns = tg_real_ns();
    t.user = user;
    t.user_len = user_len;
    size_t n;
    int rc = onepath_tlv_encode(&t, buf, cap, &n);
    if (rc != ONEPATH_OK)
        return rc;
    s->attachment = buf;
    s->attachment_len = n;
    return ONEPATH_OK;
}

static void begin(onepath_send_t *s)
{
    tg_op_lazy_init();
    s->span = NULL;
    s->t0_ns = atomic_load_explicit(&tg_op_g_metrics_on, memory_order_relaxed) ? tg_mono_ns() : 0;
}

int onepath_send_begin(onepath_send_t *s, const void *user, size_t user_len, void *buf, size_t cap)
{
    if (!s)
        return ONEPATH_ERR_INVAL;
    begin(s);
    return prepare(s, user, user_len, buf, cap);
}

int onepath_forward_begin(onepath_send_t *s, const char *span_name, const void *user, size_t user_len, void *buf,
                          size_t cap)
{
    if (!s)
        return ONEPATH_ERR_INVAL;
    begin(s);
    s->span = onepath_span_start(span_name ? span_name : "forward", ONEPATH_SPAN_KIND_PRODUCER, NULL);
    return prepare(s, user, user_len, buf, cap);
}

void onepath_send_end(onepath_send_t *s, size_t payload_len, int ok)
{
    if (!s)
        return;
    const struct tg_op_builtins *m = tg_op_builtins();
    if (m) {
        if (ok) {
            onepath_counter_inc(m->msgs_sent);
            onepath_counter_add(m->bytes_sent, (int64_t)payload_len);
            if (s->t0_ns)
                onepath_histogram_observe(m->publish_latency, (tg_mono_ns() - s->t0_ns) / 1000);
        } else {
            onepath_counter_inc(m->msgs_dropped);
        }
    }
    if (s->span) {
        if (!ok)
            onepath_span_set_status(s->span, ONEPATH_SPAN_STATUS_ERROR, "send failed");
        onepath_span_end(s->span);
        s->span = NULL;
    }
}

int onepath_recv(onepath_recv_t *r, const void *att, size_t len, size_t payload_len)
{
    if (!r)
        return ONEPATH_ERR_INVAL;
    tg_op_lazy_init();
    onepath_tlv_t t;
    int rc = onepath_tlv_decode(att, len, &t);
    r->user = t.user;
    r->user_len = t.user_len;
    r->has_parent = t.has_traceparent;
    if (t.has_traceparent)
        r->parent = t.traceparent;
    else
        memset(&r->parent, 0, sizeof r->parent);
    r->e2e_ns = -1;
    if (t.has_send_ts) {
        uint64_t now = tg_real_ns();
        /* a sender clock ahead of ours gives a negative latency: dropped */
        if (now >= t.send_ts_ns && now - t.send_ts_ns <= (uint64_t)INT64_MAX)
            r->e2e_ns = (int64_t)(now - t.send_ts_ns);
    }
    const struct tg_op_builtins *m = tg_op_builtins();
    if (m) {
        onepath_counter_inc(m->msgs_recv);
        onepath_counter_add(m->bytes_recv, (int64_t)payload_len);
        if (r->e2e_ns >= 0)
            onepath_histogram_observe(m->e2e_latency, (uint64_t)r->e2e_ns / 1000);
    }
    return rc;
}
