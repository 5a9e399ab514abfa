/* onepath_hop.c: a tiny OnePath application for the pipeline test and the docs: one hop of
 * sensor -> router -> storage, messages framed on stdin/stdout as
 * u32 LE payload length | u32 LE attachment length | payload | attachment.
 * Tracing and metrics are switched on by the ONEPATH_* environment alone (lazy init; the spans
 * of the last flush period are written at exit); the code only uses the helpers.
 *
 * Usage: onepath_hop source N   emit N messages (payload "reading=i", user attachment "seq=i"),
 *                               each inside a PRODUCER span
 *        onepath_hop relay      receive, CONSUMER span with the received parent, forward
 *        onepath_hop sink       receive, CONSUMER span; checks each user attachment is "seq=i"
 *                               in order and prints "received N" to stdout */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tracegate/onepath.h"

#define MAX_MSG 4096

struct msg {
    uint8_t payload[MAX_MSG], att[MAX_MSG + ONEPATH_ATTACH_OVERHEAD];
    uint32_t payload_len, att_len;
};

static int read_u32(uint32_t *v)
{
    uint8_t b[4];
    if (fread(b, 1, 4, stdin) != 4)
        return -1;
    *v = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
    return 0;
}

static int read_msg(struct msg *m)
{
    if (read_u32(&m->payload_len) || read_u32(&m->att_len) || m->payload_len > MAX_MSG ||
        m->att_len > sizeof m->att)
        return -1;
    if (fread(m->payload, 1, m->payload_len, stdin) != m->payload_len ||
        fread(m->att, 1, m->att_len, stdin) != m->att_len)
        return -1;
    return 0;
}

static int write_msg(const void *payload, uint32_t plen, const void *att, uint32_t alen)
{
    uint8_t h[8];
    for (int i = 0; i < 4; i++) {
        h[i] = (uint8_t)(plen >> (8 * i));
        h[4 + i] = (uint8_t)(alen >> (8 * i));
    }
    int ok = fwrite(h, 1, 8, stdout) == 8 && fwrite(payload, 1, plen, stdout) == plen &&
             fwrite(att, 1, alen, stdout) == alen && fflush(stdout) == 0;
    return ok ? 0 : -1;
}

static int source(long n)
{
    uint8_t buf[64 + ONEPATH_ATTACH_OVERHEAD];
    for (long i = 0; i < n; i++) {
        char payload[64], user[32];
        int pl = snprintf(payload, sizeof payload, "reading=%ld", i);
        int ul = snprintf(user, sizeof user, "seq=%ld", i);
        onepath_span_t sp = onepath_span_start("sensor.publish", ONEPATH_SPAN_KIND_PRODUCER, NULL);
        onepath_span_set_attr_i64(sp, "seq", i);
        onepath_send_t s;
        onepath_send_begin(&s, user, (size_t)ul, buf, sizeof buf);
        int ok = write_msg(payload, (uint32_t)pl, s.attachment, (uint32_t)s.attachment_len) == 0;
        onepath_send_end(&s, (size_t)pl, ok);
        onepath_span_end(sp);
        if (!ok)
            return 1;
    }
    return 0;
}

static int relay(void)
{
    static struct msg m;
    static uint8_t buf[MAX_MSG + ONEPATH_ATTACH_OVERHEAD];
    while (read_msg(&m) == 0) {
        onepath_recv_t r;
        onepath_recv(&r, m.att, m.att_len, m.payload_len);
        onepath_span_t sp =
            onepath_span_start("router.consume", ONEPATH_SPAN_KIND_CONSUMER, r.has_parent ? &r.parent : NULL);
        /* the user callback: forward payload and user attachment to the next hop */
        onepath_send_t s;
        onepath_forward_begin(&s, "router.forward", r.user, r.user_len, buf, sizeof buf);
        int ok = write_msg(m.payload, m.payload_len, s.attachment, (uint32_t)s.attachment_len) == 0;
        onepath_send_end(&s, m.payload_len, ok);
        onepath_span_end(sp);
        if (!ok)
            return 1;
    }
    return 0;
}

static int sink(void)
{
    static struct msg m;
    long n = 0;
    while (read_msg(&m) == 0) {
        onepath_recv_t r;
        onepath_recv(&r, m.att, m.att_len, m.payload_len);
        onepath_span_t sp =
            onepath_span_start("storage.consume", ONEPATH_SPAN_KIND_CONSUMER, r.has_parent ? &r.parent : NULL);
        char want[32];
        int wl = snprintf(want, sizeof want, "seq=%ld", n);
        if (r.user_len != (size_t)wl || memcmp(r.user, want, (size_t)wl) != 0) {
            fprintf(stderr, "onepath_hop sink: message %ld: user attachment is not %s\n", n, want);
            return 1;
        }
        onepath_span_end(sp);
        n++;
    }
    printf("received %ld\n", n);
    return 0;
}

/* With ONEPATH_HOP_STATS=1: shuts OnePath down (flushing every exporter) and prints the export
 * statistics of the span kinds on stderr, for the tests to check. */
static int finish(int rc)
{
    const char *v = getenv("ONEPATH_HOP_STATS");
    if (!v || strcmp(v, "1") != 0)
        return rc;
    onepath_trace_shutdown();
    static const char *const names[] = {"spans", "metrics", "otlp-file", "otlp-http"};
    for (int k = 0; k < 4; k++) {
        onepath_export_stats_t st;
        if (k == ONEPATH_EXPORT_METRICS || onepath_export_stats(k, &st, NULL, 0) != ONEPATH_OK)
            continue;
        fprintf(stderr, "stats %s queued=%llu written=%llu dropped=%llu lost=%llu stalls=%llu\n", names[k],
                (unsigned long long)st.queued, (unsigned long long)st.written, (unsigned long long)st.dropped,
                (unsigned long long)st.lost, (unsigned long long)st.stalls);
    }
    return rc;
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "source") == 0)
        return finish(source(atol(argv[2])));
    if (argc == 2 && strcmp(argv[1], "relay") == 0)
        return finish(relay());
    if (argc == 2 && strcmp(argv[1], "sink") == 0)
        return finish(sink());
    fprintf(stderr, "usage: onepath_hop source N | relay | sink\n");
    return 2;
}
