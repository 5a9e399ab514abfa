/* bench_fill.c: a bulk producer for tests/bench/record_bench.sh: fills a session's trace buffer
 * through the C producer library (SMB on a UNIX producer socket) as fast as the service takes it.
 *
 *   bench_fill PRODUCER_SOCKET [--ds NAME] [--packet BYTES] [--smb-kb KB]
 *
 * Registers the data source NAME (default tracegate.bench.fill). When a session starts it, one
 * trace writer writes TracePackets of exactly BYTES bytes (default 1024; timestamp = a sequence
 * number, for_testing.str = filler) a batch per loop turn, and gives the loop a turn whenever the
 * SMB is full, until SIGTERM or SIGINT. Lines on stdout: "bench_fill: connected", "bench_fill:
 * writing ..." when the instance starts, and the writer's counts at exit. It never decides when
 * the buffer is full: the script asks the service (GetTraceStats, through tracectl record's
 * progress line). */
#include <event2/event.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tracegate/pbwire.h"
#include "tracegate/producer.h"

#define PER_TURN (256u << 10) /* bytes one loop turn writes at most */

struct fill {
    struct event_base *base;
    tg_producer *p;
    tg_trace_writer *w;
    struct event *pump;
    uint8_t pkt[65536];
    size_t pkt_len;
    uint32_t seq;
    struct tg_trace_writer_stats last; /* of the writer retired last (stats outlive it here) */
};

/* TracePacket{timestamp(8) = seq, for_testing(900) = TestEvent{str(1) = filler}} of exactly
 * `total` bytes (32 <= total <= sizeof pkt): every length is a fixed 4-byte varint. */
static size_t make_packet(uint8_t *buf, size_t total, uint32_t seq)
{
    size_t n = tg_pb_put_tag(buf, 8, TG_PB_VARINT);
    tg_pb_put_varint4(buf + n, seq & 0x0fffffffu);
    n += 4;
    n += tg_pb_put_tag(buf + n, 900, TG_PB_LEN);
    size_t outer = n;
    n += 4;
    n += tg_pb_put_tag(buf + n, 1, TG_PB_LEN);
    size_t str_len = total - n - 4;
    tg_pb_put_varint4(buf + n, (uint32_t)str_len);
    n += 4;
    tg_pb_put_varint4(buf + outer, (uint32_t)(total - outer - 4));
    for (size_t i = 0; i < str_len; i++)
        buf[n + i] = (uint8_t)('a' + i % 26);
    return n + str_len;
}

static void pump_cb(evutil_socket_t fd, short what, void *arg)
{
    struct fill *f = arg;
    (void)fd;
    (void)what;
    if (!f->w)
        return;
    size_t wrote = 0;
    while (wrote + f->pkt_len <= PER_TURN) {
        tg_pb_put_varint4(f->pkt + 1, ++f->seq & 0x0fffffffu);
        if (tg_trace_writer_write(f->w, f->pkt, f->pkt_len) != TG_TRACE_WRITER_OK)
            break; /* SMB full (dropped) or inactive: the loop sends the commits, then again */
        wrote += f->pkt_len;
    }
    static const struct timeval zero = {0, 0};
    event_add(f->pump, &zero);
}

static void ds_start(tg_producer *p, uint64_t id, const struct tg_data_source_config *cfg, void *arg)
{
    struct fill *f = arg;
    (void)cfg;
    if (f->w)
        return; /* one instance at a time is enough to fill a buffer */
    f->w = tg_producer_create_writer(p, id);
    if (!f->w)
        return;
    printf("bench_fill: writing %zu-byte packets into instance %llu\n", f->pkt_len, (unsigned long long)id);
    fflush(stdout);
    event_add(f->pump, &(struct timeval){0, 0});
}

static void ds_stop(tg_producer *p, uint64_t id, void *arg)
{
    struct fill *f = arg;
    (void)p;
    (void)id;
    if (f->w) {
        tg_trace_writer_get_stats(f->w, &f->last);
        tg_trace_writer_destroy(f->w);
        f->w = NULL;
    }
}

static void on_connected(tg_producer *p, void *arg)
{
    (void)p;
    (void)arg;
    printf("bench_fill: connected\n");
    fflush(stdout);
}

static void on_disconnected(tg_producer *p, const char *reason, void *arg)
{
    (void)p;
    fprintf(stderr, "bench_fill: disconnected: %s\n", reason);
    event_base_loopbreak(((struct fill *)arg)->base);
}

static void on_signal(evutil_socket_t sig, short what, void *arg)
{
    (void)sig;
    (void)what;
    event_base_loopbreak(arg);
}

static void usage(void)
{
    fprintf(stderr, "usage: bench_fill PRODUCER_SOCKET [--ds NAME] [--packet BYTES] [--smb-kb KB]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    static struct fill f;
    const char *sock = NULL, *ds = "tracegate.bench.fill";
    size_t pkt = 1024;
    uint32_t smb_kb = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--ds") && i + 1 < argc)
            ds = argv[++i];
        else if (!strcmp(argv[i], "--packet") && i + 1 < argc)
            pkt = strtoul(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--smb-kb") && i + 1 < argc)
            smb_kb = (uint32_t)strtoul(argv[++i], NULL, 10);
        else if (argv[i][0] != '-' && !sock)
            sock = argv[i];
        else
            usage();
    }
    if (!sock || pkt < 32 || pkt > sizeof f.pkt)
        usage();
    signal(SIGPIPE, SIG_IGN);
    f.base = event_base_new();
    if (!f.base)
        return 1;
    f.pump = event_new(f.base, -1, 0, pump_cb, &f);
    struct event *sigterm = evsignal_new(f.base, SIGTERM, on_signal, f.base);
    struct event *sigint = evsignal_new(f.base, SIGINT, on_signal, f.base);
    if (!f.pump || !sigterm || !sigint)
        return 1;
    event_add(sigterm, NULL);
    event_add(sigint, NULL);
    f.pkt_len = make_packet(f.pkt, pkt, 0);

    struct tg_producer_opts po;
    memset(&po, 0, sizeof po);
    po.socket = sock;
    po.name = "bench_fill";
    po.smb_size_hint_kb = smb_kb;
    po.on_connected = on_connected;
    po.on_disconnected = on_disconnected;
    po.cb_arg = &f;
    char err[256];
    f.p = tg_producer_new(f.base, &po, err, sizeof err);
    if (!f.p) {
        fprintf(stderr, "bench_fill: %s\n", err);
        return 1;
    }
    struct tg_data_source_desc dd;
    memset(&dd, 0, sizeof dd);
    dd.name = ds;
    dd.cbs.on_start = ds_start;
    dd.cbs.on_stop = ds_stop;
    dd.cb_arg = &f;
    if (tg_producer_register_data_source(f.p, &dd) != 0) {
        fprintf(stderr, "bench_fill: cannot register data source '%s'\n", ds);
        return 1;
    }
    event_base_dispatch(f.base);

    /* the pump re-arms itself every turn: it must not run again (nor touch the writer, which
     * tg_producer_free destroys) while the loop releases the socket below */
    event_del(f.pump);
    struct tg_trace_writer_stats st = f.last;
    if (f.w)
        tg_trace_writer_get_stats(f.w, &st);
    f.w = NULL;
    printf("bench_fill: wrote %llu bytes, dropped %llu packets\n", (unsigned long long)st.bytes_written,
           (unsigned long long)st.packets_dropped);
    tg_producer_free(f.p);
    event_base_loop(f.base, EVLOOP_NONBLOCK);
    event_free(f.pump);
    event_free(sigterm);
    event_free(sigint);
    event_base_free(f.base);
    return 0;
}
