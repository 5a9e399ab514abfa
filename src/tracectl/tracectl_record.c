/* tracectl_record.c: `tracectl record`: build a TraceConfig (file and/or shortcuts), EnableTracing,
 * show progress, stop on Ctrl-C, ReadBuffers into a .pftrace, FreeBuffers; or start and Detach.
 * Also the consumer-session helpers (tc_session_*) that `tracectl attach` reuses. */
#include "tracectl.h"
#include "tracegate/log.h"
#include "tracegate/clock.h"

#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "consumer_port.pb-c.h"
#include "tracegate/service.h"
#include "tracegate/textproto.h"

#define STOP_GRACE_MS 30000    /* after DisableTracing, how long to wait for the end */
#define OVERDUE_GRACE_MS 30000 /* after duration_ms, how long before we stop it ourselves */
#define READ_IDLE_MS 60000     /* ReadBuffers: give up after this long without a reply */
#define DEFAULT_BUFFER_KB (32u * 1024u)
/* FlushFlags: reason trace-stop (2), initiator perfetto_cmd (2 << 4) */
#define FLUSH_FLAGS_STOP 0x22u

static void human_bytes(char *buf, size_t len, uint64_t b)
{
    if (b < 1024)
        snprintf(buf, len, "%" PRIu64 " B", b);
    else if (b < 1024 * 1024)
        snprintf(buf, len, "%.1f KiB", (double)b / 1024.0);
    else if (b < 1024ull * 1024 * 1024)
        snprintf(buf, len, "%.1f MiB", (double)b / (1024.0 * 1024.0));
    else
        snprintf(buf, len, "%.2f GiB", (double)b / (1024.0 * 1024.0 * 1024.0));
}

/* ================================================================ session */

static void progress_clear(struct tc_session *s)
{
    if (s->line_open) {
        fputs(s->tty ? "\r\033[K" : "", stderr);
        s->line_open = 0;
    }
}

static void progress_print(struct tc_session *s)
{
    if (!s->progress)
        return;
    uint64_t el = tg_mono_ms() - s->t0_ms;
    char line[256];
    int n;
    if (s->rpc->disconnected)
        n = snprintf(line, sizeof line, "reconnecting to resume the session: %" PRIu64 "s", el / 1000);
    else if (s->stop_requested)
        n = snprintf(line, sizeof line, "stopping: %" PRIu64 "s", el / 1000);
    else if (s->attached)
        n = snprintf(line, sizeof line, "attached, waiting for the session to end: %" PRIu64 "s", el / 1000);
    else if (s->duration_ms)
        n = snprintf(line, sizeof line, "recording: %" PRIu64 "s / %us", el / 1000, (s->duration_ms + 999) / 1000);
    else
        n = snprintf(line, sizeof line, "recording: %" PRIu64 "s (Ctrl-C to stop)", el / 1000);
    if (s->have_stats && s->buffer_size && n > 0 && (size_t)n < sizeof line && !s->rpc->disconnected) {
        double pct = (double)s->bytes_written * 100.0 / (double)s->buffer_size;
        char sz[32];
        human_bytes(sz, sizeof sz, s->buffer_size);
        snprintf(line + n, sizeof line - (size_t)n, ", buffer %.1f%% of %s%s", pct > 100.0 ? 100.0 : pct, sz,
                 s->wraps ? " (wrapped)" : "");
    }
    if (s->tty) {
        fprintf(stderr, "\r\033[K%s", line);
        s->line_open = 1;
    } else {
        fprintf(stderr, "tracectl: %s\n", line);
    }
    fflush(stderr);
}

static int stats_part(void *arg, const uint8_t *reply, size_t len, int has_more)
{
    struct tc_session *s = arg;
    (void)has_more;
    Perfetto__Protos__GetTraceStatsResponse *r = perfetto__protos__get_trace_stats_response__unpack(NULL, len, reply);
    if (!r)
        return 0;
    if (r->trace_stats) {
        uint64_t bw = 0, sz = 0, wr = 0;
        for (size_t i = 0; i < r->trace_stats->n_buffer_stats; i++) {
            bw += r->trace_stats->buffer_stats[i]->bytes_written;
            sz += r->trace_stats->buffer_stats[i]->buffer_size;
            wr += r->trace_stats->buffer_stats[i]->write_wrap_count;
        }
        s->bytes_written = bw;
        s->buffer_size = sz;
        s->wraps = wr;
        s->have_stats = 1;
    }
    perfetto__protos__get_trace_stats_response__free_unpacked(r, NULL);
    if (!s->reading && !s->enable.done)
        progress_print(s);
    return 0;
}

static void on_tick(evutil_socket_t fd, short what, void *arg)
{
    struct tc_session *s = arg;
    (void)fd;
    (void)what;
    if (s->reading || !s->enable_started || s->enable.done)
        return;
    uint64_t now = tg_mono_ms();
    /* a session that should have ended long ago: stop it ourselves, then give up */
    if (s->deadline_ms && now >= s->deadline_ms) {
        progress_clear(s);
        if (!s->stop_requested) {
            fprintf(stderr, "tracectl: the session did not end %u s after its duration; stopping it\n",
                    OVERDUE_GRACE_MS / 1000);
            tc_session_stop(s);
        } else {
            fprintf(stderr, "tracectl: the service did not end the session within %u s of DisableTracing; "
                            "giving up\n",
                    STOP_GRACE_MS / 1000);
            s->aborted = 1;
            event_base_loopbreak(s->rpc->base);
            return;
        }
    }
    if (!s->progress)
        return;
    if (s->rpc->disconnected) { /* reconnecting (tc_rpc_recover): no calls now */
        progress_print(s);
        return;
    }
    if (s->stats_busy && s->stats.done) {
        s->stats_busy = 0;
        if (!s->stats.ok)
            s->stats_unsupported = 1; /* rejected: do not ask again */
    }
    if (!s->stats_unsupported && !s->stats_busy) {
        if (tc_rpc_start(s->rpc, "GetTraceStats", NULL, 0, -1, &s->stats) == 0) {
            s->stats_busy = 1;
            return; /* the line is printed when the stats arrive */
        }
        s->stats_unsupported = 1; /* not offered by this service */
        s->rpc->error[0] = 0;
    }
    progress_print(s);
}

static void on_signal(evutil_socket_t sig, short what, void *arg)
{
    struct tc_session *s = arg;
    (void)what;
    /* a wrapper (timeout(1), a shell) may forward the one Ctrl-C a second time: a repeat within
     * a second is the same interruption, not the "abort" one */
    uint64_t now = tg_mono_ms();
    if (s->interrupts && now - s->last_signal_ms < 1000)
        return;
    s->last_signal_ms = now;
    s->interrupts++;
    progress_clear(s);
    if (s->reading || s->interrupts > 1 || !s->enable_started || s->enable.done) {
        fprintf(stderr, "tracectl: %s again: aborting\n", sig == SIGINT ? "interrupted" : "terminated");
        s->aborted = 1;
        event_base_loopbreak(s->rpc->base);
        return;
    }
    fprintf(stderr, "tracectl: %s: stopping the session and collecting the trace (Ctrl-C again to abort)\n",
            sig == SIGINT ? "interrupted" : "terminated");
    tc_session_stop(s);
}

static int enable_part(void *arg, const uint8_t *reply, size_t len, int has_more)
{
    struct tc_session *s = arg;
    (void)has_more;
    s->got_response = 1;
    Perfetto__Protos__EnableTracingResponse *r = perfetto__protos__enable_tracing_response__unpack(NULL, len, reply);
    if (!r) {
        snprintf(s->enable_error, sizeof s->enable_error, "undecodable EnableTracingResponse from the service");
        return 0;
    }
    if (r->error && r->error[0])
        tg_escape_text(r->error, s->enable_error, sizeof s->enable_error); /* the service's words */
    perfetto__protos__enable_tracing_response__free_unpacked(r, NULL);
    return 0;
}

static void session_resumed(void *arg);

int tc_session_init(struct tc_session *s, struct tc_rpc *rpc, uint32_t duration_ms, int progress)
{
    memset(s, 0, sizeof *s);
    s->rpc = rpc;
    s->duration_ms = duration_ms;
    s->progress = progress;
    s->tty = isatty(STDERR_FILENO);
    s->t0_ms = tg_mono_ms();
    s->stats.fn = stats_part;
    s->stats.arg = s;
    s->enable.fn = enable_part;
    s->enable.arg = s;
    rpc->on_resumed = session_resumed;
    rpc->resumed_arg = s;
    rpc->abort_flag = &s->aborted;
    s->tick = event_new(rpc->base, -1, EV_PERSIST, on_tick, s);
    s->sigint = evsignal_new(rpc->base, SIGINT, on_signal, s);
    s->sigterm = evsignal_new(rpc->base, SIGTERM, on_signal, s);
    if (!s->tick || !s->sigint || !s->sigterm) {
        tc_session_destroy(s);
        return -1;
    }
    struct timeval tv = {1, 0};
    event_add(s->tick, &tv);
    event_add(s->sigint, NULL);
    event_add(s->sigterm, NULL);
    return 0;
}

void tc_session_destroy(struct tc_session *s)
{
    progress_clear(s);
    /* the pending calls point into s: make sure no callback can run after this */
    if (s->rpc && s->rpc->cli) {
        if (s->enable_started && !s->enable.done)
            tg_ipc_client_cancel(s->rpc->cli, s->enable.request_id);
        if (s->stats_busy && !s->stats.done)
            tg_ipc_client_cancel(s->rpc->cli, s->stats.request_id);
        if (s->stop_requested && s->disable.request_id && !s->disable.done)
            tg_ipc_client_cancel(s->rpc->cli, s->disable.request_id);
        if (s->stop_requested && s->flush.request_id && !s->flush.done)
            tg_ipc_client_cancel(s->rpc->cli, s->flush.request_id);
    }
    if (s->rpc && s->rpc->resumed_arg == s) {
        s->rpc->on_resumed = NULL;
        s->rpc->resumed_arg = NULL;
        s->rpc->abort_flag = NULL;
    }
    if (s->tick)
        event_free(s->tick);
    if (s->sigint)
        event_free(s->sigint);
    if (s->sigterm)
        event_free(s->sigterm);
    s->tick = s->sigint = s->sigterm = NULL;
}

int tc_session_enable(struct tc_session *s, const uint8_t *args, size_t len, int fd)
{
    if (tc_rpc_start(s->rpc, "EnableTracing", args, len, fd, &s->enable) != 0)
        return -1;
    s->enable_started = 1;
    s->t0_ms = tg_mono_ms();
    if (s->duration_ms)
        s->deadline_ms = s->t0_ms + s->duration_ms + OVERDUE_GRACE_MS;
    return 0;
}

static void start_disable(struct tc_session *s)
{
    if (tc_rpc_start(s->rpc, "DisableTracing", NULL, 0, -1, &s->disable) != 0) {
        fprintf(stderr, "tracectl: cannot send DisableTracing: %s\n", s->rpc->error);
        s->rpc->error[0] = 0;
    }
}

/* the Flush reply (success or not) leads to DisableTracing, as perfetto_cmd does */
static void on_flush_reply(tg_ipc_client *cli, int success, int has_more, const uint8_t *reply, size_t len,
                           void *arg)
{
    struct tc_session *s = arg;
    (void)cli;
    (void)has_more;
    (void)reply;
    (void)len;
    s->flush.done = 1;
    s->flush.ok = success;
    if (!success && !s->rpc->disconnected) {
        progress_clear(s);
        fprintf(stderr, "tracectl: the final flush did not complete (some data may be missing)\n");
    }
    if (!s->rpc->disconnected)
        start_disable(s);
}

void tc_session_stop(struct tc_session *s)
{
    if (s->stop_requested || !s->enable_started || s->enable.done)
        return;
    s->stop_requested = 1;
    s->deadline_ms = tg_mono_ms() + STOP_GRACE_MS;
    if (s->rpc->disconnected) { /* reconnecting: sent once the session is resumed */
        s->stop_deferred = 1;
        return;
    }
    Perfetto__Protos__FlushRequest fr = PERFETTO__PROTOS__FLUSH_REQUEST__INIT;
    fr.has_timeout_ms = 1;
    fr.timeout_ms = 0;
    fr.has_flags = 1;
    fr.flags = FLUSH_FLAGS_STOP;
    uint8_t buf[32];
    size_t n = perfetto__protos__flush_request__pack(&fr, buf);
    s->flush.request_id =
        tg_ipc_client_invoke_bytes(s->rpc->cli, s->rpc->port, "Flush", buf, n, -1, on_flush_reply, s);
    if (s->flush.request_id == 0) /* no Flush on this service: just disable */
        start_disable(s);
}

/* ---- session survival ---- */

/* Called by tc_rpc_recover once Resume succeeded, before the replayed replies are delivered. */
static void session_resumed(void *arg)
{
    struct tc_session *s = arg;
    struct tc_rpc *rpc = s->rpc;
    progress_clear(s);
    if (rpc->resume_incomplete)
        fprintf(stderr, "tracectl: resumed the session, but some replies lost in flight could not be re-sent\n");
    else
        fprintf(stderr, "tracectl: resumed the session (replies lost in flight re-sent, nothing lost)\n");
    /* requests that may never have reached the gateway are asked again: progress stats... */
    if (s->stats_busy && !s->stats.done) {
        tg_ipc_client_cancel(rpc->cli, s->stats.request_id);
        s->stats_busy = 0;
    }
    /* ...and the stop sequence, unless the service already answered DisableTracing */
    if (s->stop_requested && s->enable_started && !s->enable.done && (s->stop_deferred || !s->disable.done)) {
        if (s->flush.request_id && !s->flush.done)
            tg_ipc_client_cancel(rpc->cli, s->flush.request_id);
        if (s->disable.request_id && !s->disable.done)
            tg_ipc_client_cancel(rpc->cli, s->disable.request_id);
        memset(&s->flush, 0, sizeof s->flush);
        memset(&s->disable, 0, sizeof s->disable);
        s->stop_requested = 0;
        s->stop_deferred = 0;
        tc_session_stop(s);
    }
    if (s->reading && rpc->resume_incomplete)
        s->read_gap = 1;
}

/* The connection dropped: reconnect and resume through the gateway if armed. 0 or -1. */
static int session_recover(struct tc_session *s)
{
    struct tc_rpc *rpc = s->rpc;
    if (!rpc->resume_armed)
        return -1;
    progress_clear(s);
    fprintf(stderr, "tracectl: lost the connection (%s); reconnecting to resume the session (up to %u s)\n",
            rpc->error[0] ? rpc->error : "closed", (rpc->resume_window_ms + 999) / 1000);
    return tc_rpc_recover(rpc);
}

/* A deliberate abort while the gateway would keep the session: end it as a disconnect would. */
static void session_abandon(struct tc_session *s)
{
    if (s->rpc->resume_armed && !s->rpc->disconnected && s->enable_started && !s->buffers_freed) {
        s->rpc->resume_armed = 0;
        tc_session_free_buffers(s);
    }
}

int tc_session_wait(struct tc_session *s)
{
    struct tc_rpc *rpc = s->rpc;
    while (!s->enable.done && !s->aborted) {
        if (rpc->disconnected) {
            if (session_recover(s) != 0)
                break;
            continue;
        }
        event_base_loop(rpc->base, EVLOOP_ONCE);
    }
    progress_clear(s);
    if (s->enable.done && s->enable.ok) {
        if (s->enable_error[0]) {
            fprintf(stderr, "tracectl: the tracing session failed: %s\n", s->enable_error);
            return -1;
        }
        return 0;
    }
    if (s->aborted) {
        fprintf(stderr, "tracectl: aborted; the trace was not collected\n");
        session_abandon(s);
        return -1;
    }
    if (rpc->disconnected)
        fprintf(stderr, "tracectl: lost the connection to the tracing service (%s)\n",
                rpc->error[0] ? rpc->error : "closed");
    else
        fprintf(stderr, "tracectl: the service rejected EnableTracing\n");
    return -1;
}

uint64_t tc_read_limit(const Perfetto__Protos__TraceConfig *cfg)
{
    uint64_t kb = 0;
    for (size_t i = 0; i < cfg->n_buffers; i++)
        kb += cfg->buffers[i]->size_kb;
    return cfg->n_buffers ? 2 * kb * 1024 + (16u << 20) : 0;
}

struct read_ctx {
    struct tc_session *s;
    struct tc_trace_writer *w;
    struct tc_packet_assembler as;
    uint64_t bytes; /* reply bytes so far */
    uint64_t last_activity;
    int failed;
    unsigned gaps, parts;
    char err[512];
};

static int write_packet(void *arg, const uint8_t *pkt, size_t len)
{
    struct read_ctx *rc = arg;
    tc_count_machine(rc->s, pkt, len);
    if (tc_trace_writer_add(rc->w, pkt, len, rc->err, sizeof rc->err) != 0)
        return 1;
    return 0;
}

static int read_part(void *arg, const uint8_t *reply, size_t len, int has_more)
{
    struct read_ctx *rc = arg;
    (void)has_more;
    rc->last_activity = tg_mono_ms();
    if (rc->failed)
        return 1;
    rc->bytes += len;
    if (rc->s->read_limit && rc->bytes > rc->s->read_limit) {
        char h[32];
        human_bytes(h, sizeof h, rc->s->read_limit);
        if (rc->s->read_limit_why)
            snprintf(rc->err, sizeof rc->err, "the service sent more than %s (%s): stopped reading", h,
                     rc->s->read_limit_why);
        else
            snprintf(rc->err, sizeof rc->err, "the service sent more than %s, more than the session's buffers can "
                     "hold: stopped reading", h);
        rc->failed = 1;
        return 1;
    }
    if (rc->s->read_gap) {
        /* a resume could not re-send everything: a packet cut by the gap is dropped */
        rc->s->read_gap = 0;
        if (tc_assembler_pending(&rc->as))
            fprintf(stderr, "tracectl: warning: dropped a packet cut by data lost with the connection\n");
        rc->as.len = 0;
        rc->as.slices = 0;
        rc->gaps++;
    }
    if (tc_assembler_add_reply(&rc->as, reply, len, write_packet, rc, rc->err, sizeof rc->err) != 0) {
        rc->failed = 1;
        return 1;
    }
    if (rc->s->test_drop_read && ++rc->parts == rc->s->test_drop_read) {
        fprintf(stderr, "tracectl: --test-drop-read: shutting the connection down\n");
        tc_rpc_test_drop(rc->s->rpc, rc->s->test_drop_silent);
    }
    return 0;
}

void tc_session_free_buffers(struct tc_session *s)
{
    if (s->rpc->disconnected && session_recover(s) != 0)
        return;
    if (tc_rpc_call(s->rpc, "FreeBuffers", NULL, 0, -1, NULL, NULL, 10000) != 0) {
        fprintf(stderr, "tracectl: warning: FreeBuffers failed: %s\n", s->rpc->error);
        s->rpc->error[0] = 0;
        return;
    }
    s->buffers_freed = 1;
}

int tc_session_read(struct tc_session *s, struct tc_trace_writer *w)
{
    struct tc_rpc *rpc = s->rpc;
    struct read_ctx rc;
    memset(&rc, 0, sizeof rc);
    rc.s = s;
    rc.w = w;
    tc_assembler_init(&rc.as);
    rc.last_activity = tg_mono_ms();
    s->reading = 1;

    struct tc_async a = {.fn = read_part, .arg = &rc};
    int ret = -1;
    char cerr[512];
    if (tc_rpc_start(rpc, "ReadBuffers", NULL, 0, -1, &a) != 0) {
        fprintf(stderr, "tracectl: %s\n", rpc->error);
        tc_trace_writer_close(w, cerr, sizeof cerr);
        goto out;
    }
    int idle = 0;
    while (!a.done && !s->aborted && !rc.failed) {
        if (rpc->disconnected) {
            if (session_recover(s) != 0)
                break;
            rc.last_activity = tg_mono_ms();
            continue;
        }
        event_base_loop(rpc->base, EVLOOP_ONCE);
        if (!a.done && tg_mono_ms() - rc.last_activity > READ_IDLE_MS) {
            idle = 1;
            break;
        }
    }
    if (!a.done || rc.failed)
        tg_ipc_client_cancel(rpc->cli, a.request_id);
    int close_rc = tc_trace_writer_close(w, cerr, sizeof cerr);
    if (rc.failed) {
        fprintf(stderr, "tracectl: reading the trace failed: %s; %s is incomplete\n", rc.err,
                strcmp(w->path, "-") == 0 ? "the output" : w->path);
        goto out;
    }
    if (s->aborted) {
        fprintf(stderr, "tracectl: interrupted while reading the trace; %s is incomplete\n", w->path);
        session_abandon(s);
        goto out;
    }
    if (idle) {
        fprintf(stderr, "tracectl: ReadBuffers: no data from the service for %d s; %s is incomplete\n",
                READ_IDLE_MS / 1000, w->path);
        goto out;
    }
    if (!a.done || !a.ok) {
        fprintf(stderr, "tracectl: ReadBuffers failed: %s; %s is incomplete\n",
                rpc->error[0] ? rpc->error : "rejected by the service", w->path);
        goto out;
    }
    if (close_rc != 0) {
        fprintf(stderr, "tracectl: %s\n", cerr);
        goto out;
    }
    if (tc_assembler_pending(&rc.as))
        fprintf(stderr, "tracectl: warning: the service ended the read inside a packet; dropped %zu bytes\n",
                tc_assembler_pending(&rc.as));
    if (rc.gaps)
        fprintf(stderr, "tracectl: warning: %s may miss packets lost with the connection\n", w->path);
    tc_session_free_buffers(s);
    char sz[64];
    if (w->bytes < 1024) {
        snprintf(sz, sizeof sz, "%" PRIu64 " bytes", w->bytes);
    } else {
        char h[32];
        human_bytes(h, sizeof h, w->bytes);
        snprintf(sz, sizeof sz, "%s = %" PRIu64 " bytes", h, w->bytes);
    }
    fprintf(stderr, "tracectl: wrote %" PRIu64 " packets (%s) to %s\n", w->packets, sz,
            strcmp(w->path, "-") == 0 ? "stdout" : w->path);
    if (w->packets == 0)
        fprintf(stderr, "tracectl: warning: the trace is empty\n");
    ret = 0;
out:
    tc_assembler_free(&rc.as);
    s->reading = 0;
    return ret;
}

void tc_print_config_summary(FILE *out, const Perfetto__Protos__TraceConfig *cfg)
{
    if (cfg->duration_ms && cfg->duration_ms % 1000 == 0)
        fprintf(out, "duration %u s", cfg->duration_ms / 1000);
    else if (cfg->duration_ms)
        fprintf(out, "duration %u ms", cfg->duration_ms);
    else
        fprintf(out, "no duration (runs until stopped)");
    fprintf(out, ", buffers [");
    for (size_t i = 0; i < cfg->n_buffers; i++) {
        const Perfetto__Protos__TraceConfig__BufferConfig *b = cfg->buffers[i];
        const ProtobufCEnumValue *fp =
            b->has_fill_policy
                ? protobuf_c_enum_descriptor_get_value(&perfetto__protos__trace_config__buffer_config__fill_policy__descriptor,
                                                       (int)b->fill_policy)
                : NULL;
        fprintf(out, "%s%u KiB %s", i ? ", " : "", b->size_kb, fp ? fp->name : "RING_BUFFER");
    }
    fprintf(out, "], data sources [");
    for (size_t i = 0; i < cfg->n_data_sources; i++) {
        const Perfetto__Protos__DataSourceConfig *c = cfg->data_sources[i]->config;
        char e[160]; /* `attach` prints the config the service sent back */
        fprintf(out, "%s%s", i ? ", " : "", c && c->name ? tg_escape_text(c->name, e, sizeof e) : "?");
    }
    fprintf(out, "]%s", cfg->write_into_file ? ", write_into_file" : "");
}

/* ================================================================ config */

/* "10s", "500ms", "2m", "1h", "1.5s"; a bare number is seconds. */
static int parse_duration_ms(const char *s, uint32_t *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || errno || !(v >= 0) || v > 1e15)
        return -1;
    double mult;
    if (*end == 0 || strcasecmp(end, "s") == 0 || strcasecmp(end, "sec") == 0)
        mult = 1000;
    else if (strcasecmp(end, "ms") == 0)
        mult = 1;
    else if (strcasecmp(end, "m") == 0 || strcasecmp(end, "min") == 0)
        mult = 60000;
    else if (strcasecmp(end, "h") == 0)
        mult = 3600000;
    else
        return -1;
    double ms = v * mult;
    if (ms + 0.5 >= 4294967296.0)
        return -1;
    *out = (uint32_t)(ms + 0.5);
    return 0;
}

int tc_parse_size_kb(const char *s, uint32_t *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || errno || !(v > 0) || v > 1e15)
        return -1;
    double kb;
    if (strcasecmp(end, "b") == 0)
        kb = v / 1024.0;
    else if (strcasecmp(end, "k") == 0 || strcasecmp(end, "kb") == 0 || strcasecmp(end, "kib") == 0)
        kb = v;
    else if (strcasecmp(end, "m") == 0 || strcasecmp(end, "mb") == 0 || strcasecmp(end, "mib") == 0)
        kb = v * 1024.0;
    else if (strcasecmp(end, "g") == 0 || strcasecmp(end, "gb") == 0 || strcasecmp(end, "gib") == 0)
        kb = v * 1024.0 * 1024.0;
    else
        return -1;
    if (kb > 4294967295.0)
        return -1;
    uint32_t k = (uint32_t)kb;
    if ((double)k < kb) /* round up to whole KiB */
        k++;
    if (k == 0)
        return -1;
    *out = k;
    return 0;
}

static Perfetto__Protos__TraceConfig__BufferConfig *cfg_buffer0(Perfetto__Protos__TraceConfig *cfg)
{
    if (cfg->n_buffers)
        return cfg->buffers[0];
    Perfetto__Protos__TraceConfig__BufferConfig *b = calloc(1, sizeof *b);
    Perfetto__Protos__TraceConfig__BufferConfig **arr = realloc(cfg->buffers, sizeof *arr);
    if (!b || !arr) {
        free(b);
        if (arr)
            cfg->buffers = arr;
        return NULL;
    }
    perfetto__protos__trace_config__buffer_config__init(b);
    b->has_size_kb = 1;
    b->size_kb = DEFAULT_BUFFER_KB;
    arr[0] = b;
    cfg->buffers = arr;
    cfg->n_buffers = 1;
    return b;
}

static int cfg_add_data_source(Perfetto__Protos__TraceConfig *cfg, const char *name, int all_categories)
{
    Perfetto__Protos__TraceConfig__DataSource *ds = calloc(1, sizeof *ds);
    Perfetto__Protos__DataSourceConfig *dc = calloc(1, sizeof *dc);
    char *nm = strdup(name);
    Perfetto__Protos__TraceConfig__DataSource **arr =
        realloc(cfg->data_sources, (cfg->n_data_sources + 1) * sizeof *arr);
    if (arr)
        cfg->data_sources = arr;
    if (!ds || !dc || !nm || !arr)
        goto fail;
    perfetto__protos__trace_config__data_source__init(ds);
    perfetto__protos__data_source_config__init(dc);
    dc->name = nm;
    dc->has_target_buffer = 1;
    dc->target_buffer = 0;
    if (all_categories) {
        Perfetto__Protos__TrackEventConfig *te = calloc(1, sizeof *te);
        char **cats = malloc(sizeof *cats);
        char *star = strdup("*");
        if (!te || !cats || !star) {
            free(te);
            free(cats);
            free(star);
            goto fail;
        }
        perfetto__protos__track_event_config__init(te);
        cats[0] = star;
        te->enabled_categories = cats;
        te->n_enabled_categories = 1;
        dc->track_event_config = te;
    }
    ds->config = dc;
    arr[cfg->n_data_sources++] = ds;
    return 0;
fail:
    free(ds);
    if (dc)
        protobuf_c_message_free_unpacked(&dc->base, NULL);
    else
        free(nm);
    return -1;
}

struct record_opts {
    const char *config_path;
    const char *out_path;
    const char *detach_key;
    const char *duration;
    const char *buffer;
    const char *fill;
    const char **ds;
    size_t n_ds;
    int progress;
    int no_resume;
    int test_drop_after_ms; /* test only: shut the connection down once after this long */
    int test_drop_read;     /* test only: ... or after this many ReadBuffers replies */
    int test_drop_silent;   /* test only: ... without the gateway noticing (no FIN) */
    char fed_spec[256];     /* --nodes a,b / --all: "@a,b", "@all" */
    int all_machines;       /* --all-machines: trace_all_machines */
};

static Perfetto__Protos__TraceConfig *build_config(const struct record_opts *o, char *err, size_t errlen)
{
    ProtobufCMessage *msg = NULL;
    if (o->config_path) {
        uint8_t *data;
        size_t len;
        char lerr[512];
        if (tc_trace_file_load(o->config_path, &data, &len, lerr, sizeof lerr) != 0) {
            snprintf(err, errlen, "%s", lerr);
            return NULL;
        }
        int rc = tg_config_load(&perfetto__protos__trace_config__descriptor, data, len, &msg, lerr, sizeof lerr);
        free(data);
        if (rc != 0) {
            snprintf(err, errlen, "%s: %s", o->config_path, lerr);
            return NULL;
        }
    } else {
        static const uint8_t empty[1];
        msg = protobuf_c_message_unpack(&perfetto__protos__trace_config__descriptor, NULL, 0, empty);
        if (!msg) {
            snprintf(err, errlen, "out of memory");
            return NULL;
        }
    }
    Perfetto__Protos__TraceConfig *cfg = (Perfetto__Protos__TraceConfig *)msg;

    if (o->duration) {
        uint32_t ms;
        if (parse_duration_ms(o->duration, &ms) != 0) {
            snprintf(err, errlen, "invalid --duration '%s' (examples: 10s, 500ms, 2m, 1h)", o->duration);
            goto fail;
        }
        cfg->has_duration_ms = 1;
        cfg->duration_ms = ms;
    }
    if (o->buffer || o->fill || !o->config_path || cfg->n_buffers == 0) {
        Perfetto__Protos__TraceConfig__BufferConfig *b = cfg_buffer0(cfg);
        if (!b) {
            snprintf(err, errlen, "out of memory");
            goto fail;
        }
        if (o->buffer) {
            uint32_t kb;
            if (tc_parse_size_kb(o->buffer, &kb) != 0) {
                snprintf(err, errlen, "invalid --buffer '%s' (examples: 512kb, 32mb, 1gb)", o->buffer);
                goto fail;
            }
            b->has_size_kb = 1;
            b->size_kb = kb;
        }
        if (o->fill) {
            if (strcasecmp(o->fill, "ring") == 0 || strcasecmp(o->fill, "ring_buffer") == 0)
                b->fill_policy = PERFETTO__PROTOS__TRACE_CONFIG__BUFFER_CONFIG__FILL_POLICY__RING_BUFFER;
            else if (strcasecmp(o->fill, "discard") == 0)
                b->fill_policy = PERFETTO__PROTOS__TRACE_CONFIG__BUFFER_CONFIG__FILL_POLICY__DISCARD;
            else {
                snprintf(err, errlen, "invalid --fill '%s' (ring or discard)", o->fill);
                goto fail;
            }
            b->has_fill_policy = 1;
        }
    }
    for (size_t i = 0; i < o->n_ds; i++) {
        if (!o->ds[i][0]) {
            snprintf(err, errlen, "--ds needs a data source name");
            goto fail;
        }
        if (cfg_add_data_source(cfg, o->ds[i], 0) != 0) {
            snprintf(err, errlen, "out of memory");
            goto fail;
        }
    }
    if (!o->config_path && o->n_ds == 0 && cfg_add_data_source(cfg, "track_event", 1) != 0) {
        snprintf(err, errlen, "out of memory");
        goto fail;
    }
    if (cfg->n_data_sources == 0) {
        snprintf(err, errlen, "the config has no data sources (add data_sources { config { name: \"...\" } } "
                              "or --ds NAME)");
        goto fail;
    }
    for (size_t i = 0; i < cfg->n_data_sources; i++) {
        const Perfetto__Protos__DataSourceConfig *dc = cfg->data_sources[i]->config;
        if (!dc || !dc->name || !dc->name[0]) {
            snprintf(err, errlen, "data source #%zu has no name", i);
            goto fail;
        }
        if (dc->target_buffer >= cfg->n_buffers) {
            snprintf(err, errlen, "data source '%s' targets buffer %u but the config has %zu buffer(s)", dc->name,
                     dc->target_buffer, cfg->n_buffers);
            goto fail;
        }
    }
    if (o->all_machines) {
        cfg->has_trace_all_machines = 1;
        cfg->trace_all_machines = 1;
    }
    return cfg;
fail:
    protobuf_c_message_free_unpacked(msg, NULL);
    return NULL;
}

/* ================================================================ command */

static void record_usage(FILE *out)
{
    fprintf(out,
            "usage: tracectl record [URL] [options]\n\n"
            "Records a trace: EnableTracing, wait for the duration (or Ctrl-C), ReadBuffers, FreeBuffers.\n\n"
            "  -c, --config FILE    TraceConfig, protobuf text format or binary\n"
            "  -t, --duration TIME  trace duration, e.g. 10s, 500ms, 2m (sets duration_ms)\n"
            "  -b, --buffer SIZE    size of buffer 0, e.g. 32mb, 512kb (default 32mb without a config)\n"
            "      --fill POLICY    ring or discard (buffer 0's fill_policy)\n"
            "      --ds NAME        add a data source writing into buffer 0 (repeatable); without a\n"
            "                       config and without --ds: track_event with all categories\n"
            "  -o, --out FILE       output trace file (default trace.pftrace; '-' = stdout). An existing\n"
            "                       FILE is replaced: truncated before tracing starts, removed when the\n"
            "                       session fails before its trace is read; a read that fails half-way\n"
            "                       (disk full, connection lost) keeps what came and says it is incomplete.\n"
            "                       A symlink at FILE is followed (as by perfetto --out)\n"
            "      --detach KEY     start the session, detach from it and exit (see `tracectl attach`)\n"
            "      --no-resume      through a tracegate gateway: do not reconnect and resume the session\n"
            "                       when the connection drops (by default tracectl does, for as long as\n"
            "                       the gateway keeps it)\n"
            "      --nodes A,B      one session on nodes A and B of the gateway's fleet, merged into one trace\n"
            "                       (each node's packets carry its machine id; see `tracectl nodes`)\n"
            "      --all            ... on every node the gateway reaches now\n"
            "      --all-machines   also producers on other machines (relayed, or forwarded over a link with\n"
            "                       --export-node NAME:producer=): the config's trace_all_machines\n"
            "      --no-progress    no progress line on stderr\n"
            "      --spans FILE     after recording, stitch the OnePath NDJSON spans of FILE into the\n"
            "                       trace (repeatable; see `tracectl merge`); with --nodes/--all,\n"
            "                       --spans @fleet fetches every recorded node's recent spans through\n"
            "                       the gateway (TracegateFleet.Spans, spans role) into OUT.spans.ndjson\n"
            "  -h, --help           this help\n");
}

static int is_regular_path(const char *path)
{
    struct stat st;
    return strcmp(path, "-") != 0 && stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

static void test_drop_cb(evutil_socket_t fd, short what, void *arg)
{
    struct tc_session *s = arg;
    (void)fd;
    (void)what;
    fprintf(stderr, "tracectl: --test-drop-after: shutting the connection down\n");
    tc_rpc_test_drop(s->rpc, s->test_drop_silent);
}

static int record_detach(struct tc_session *s, const char *url, const char *key)
{
    struct tc_rpc *rpc = s->rpc;
    Perfetto__Protos__DetachRequest dr = PERFETTO__PROTOS__DETACH_REQUEST__INIT;
    dr.key = (char *)key;
    size_t n = perfetto__protos__detach_request__get_packed_size(&dr);
    uint8_t *buf = malloc(n ? n : 1);
    if (!buf)
        return 1;
    perfetto__protos__detach_request__pack(&dr, buf);
    int rc = tc_rpc_call(rpc, "Detach", buf, n, -1, NULL, NULL, 10000);
    free(buf);
    /* an EnableTracing that failed validation is answered before the Detach reply */
    if (s->enable.done) {
        if (s->enable.ok && s->enable_error[0])
            fprintf(stderr, "tracectl: the tracing session failed: %s\n", s->enable_error);
        else
            fprintf(stderr, "tracectl: the service rejected EnableTracing%s%s\n", rpc->error[0] ? ": " : "",
                    rpc->error);
        return 1;
    }
    if (rc != 0) {
        fprintf(stderr, "tracectl: Detach failed: %s (the session ends when tracectl exits)\n", rpc->error);
        return 1;
    }
    fprintf(stderr, "tracectl: session detached with key '%s'; collect it with: tracectl attach %s %s [--stop]\n",
            key, url, key);
    return 0;
}

int tc_cmd_record(const struct tc_opts *opts, int argc, char **argv)
{
    static const struct option longopts[] = {
        {"config", required_argument, NULL, 'c'}, {"duration", required_argument, NULL, 't'},
        {"time", required_argument, NULL, 't'},   {"buffer", required_argument, NULL, 'b'},
        {"fill", required_argument, NULL, 'F'},   {"ds", required_argument, NULL, 'D'},
        {"out", required_argument, NULL, 'o'},    {"detach", required_argument, NULL, 'K'},
        {"no-progress", no_argument, NULL, 'P'},  {"help", no_argument, NULL, 'h'},
        {"no-resume", no_argument, NULL, 'R'},    {"spans", required_argument, NULL, 'S'},
        {"nodes", required_argument, NULL, 'n'}, {"all", no_argument, NULL, 'a'},
        {"all-machines", no_argument, NULL, 'M'},
        /* test only, not in the usage: shuts the socket down once after MS (tests/integration) */
        {"test-drop-after", required_argument, NULL, 'X'},
        {"test-drop-read", required_argument, NULL, 'Y'},
        {"test-drop-silent", no_argument, NULL, 'Z'},
        {NULL, 0, NULL, 0},
    };
    struct record_opts o;
    memset(&o, 0, sizeof o);
    o.progress = 1;
    o.ds = calloc((size_t)argc + 1, sizeof *o.ds);
    char **spans = calloc((size_t)argc + 1, sizeof *spans);
    size_t n_spans = 0;
    if (!o.ds || !spans) {
        free(o.ds);
        free(spans);
        return 1;
    }
    int c, ret = 2;
    optind = 0;
    while ((c = getopt_long(argc, argv, "c:t:b:o:h", longopts, NULL)) != -1) {
        switch (c) {
        case 'c': o.config_path = optarg; break;
        case 't': o.duration = optarg; break;
        case 'b': o.buffer = optarg; break;
        case 'F': o.fill = optarg; break;
        case 'D': o.ds[o.n_ds++] = optarg; break;
        case 'o': o.out_path = optarg; break;
        case 'K': o.detach_key = optarg; break;
        case 'P': o.progress = 0; break;
        case 'R': o.no_resume = 1; break;
        case 'n': snprintf(o.fed_spec, sizeof o.fed_spec, "@%s", optarg); break;
        case 'a': snprintf(o.fed_spec, sizeof o.fed_spec, "@all"); break;
        case 'M': o.all_machines = 1; break;
        case 'S': spans[n_spans++] = optarg; break;
        case 'X': o.test_drop_after_ms = atoi(optarg); break;
        case 'Y': o.test_drop_read = atoi(optarg); break;
        case 'Z': o.test_drop_silent = 1; break;
        case 'h': record_usage(stdout); free(o.ds); free(spans); return 0;
        default: record_usage(stderr); free(o.ds); free(spans); return 2;
        }
    }
    /* the URL may also come after the options */
    struct tc_opts eo = *opts;
    if (o.fed_spec[0]) {
        if (opts->node) {
            fprintf(stderr, "tracectl record: --node and --nodes/--all do not go together\n");
            free(o.ds);
            return 2;
        }
        eo.node = o.fed_spec; /* the gateway fans the session out (docs/link-protocol.md §8) */
    }
    if (argc - optind == 1 && opts->endpoint_defaulted) {
        eo.endpoint = argv[optind++];
        eo.endpoint_defaulted = 0;
    }
    if (eo.endpoint_defaulted && eo.node)
        eo.endpoint = TC_DEFAULT_GATEWAY; /* --nodes/--all need the gateway, not the service's socket */
    if (optind < argc) {
        fprintf(stderr, "tracectl record: unexpected argument '%s'\n", argv[optind]);
        record_usage(stderr);
        free(o.ds);
        free(spans);
        return 2;
    }
    if (o.detach_key && !o.detach_key[0]) {
        fprintf(stderr, "tracectl record: --detach needs a non-empty KEY\n");
        free(o.ds);
        free(spans);
        return 2;
    }
    char err[1024];
    Perfetto__Protos__TraceConfig *cfg = build_config(&o, err, sizeof err);
    free(o.ds);
    o.ds = NULL;
    if (!cfg) {
        fprintf(stderr, "tracectl record: %s\n", err);
        free(spans);
        return 2;
    }
    const char *out_path = o.out_path ? o.out_path : "trace.pftrace";
    char fleet_spans[4096] = ""; /* --spans @fleet: where the nodes' spans are fetched to */
    char fleet_host[64] = "";    /* ... and the gateway's own node (the trace's host) */
    for (size_t i = 0; i < n_spans; i++) {
        if (strcmp(spans[i], "@fleet") != 0)
            continue;
        if (!o.fed_spec[0]) {
            fprintf(stderr, "tracectl record: --spans @fleet needs --nodes or --all\n");
            protobuf_c_message_free_unpacked(&cfg->base, NULL);
            free(spans);
            return 2;
        }
        snprintf(fleet_spans, sizeof fleet_spans, "%s.spans.ndjson", out_path);
        spans[i] = fleet_spans;
    }
    /* --spans appends to the trace file once it is complete: it needs one tracectl can reopen */
    if (n_spans && (o.detach_key || strcmp(out_path, "-") == 0 ||
                    (cfg->write_into_file && cfg->output_path && cfg->output_path[0]))) {
        fprintf(stderr, "tracectl record: --spans needs a trace file that tracectl writes or receives (not stdout, "
                        "--detach or a config's output_path); use `tracectl merge` afterwards instead\n");
        protobuf_c_message_free_unpacked(&cfg->base, NULL);
        free(spans);
        return 2;
    }
    /* write_into_file: the service writes the trace itself, into output_path or into the file
     * whose fd rides on EnableTracing (wif) */
    int service_writes = cfg->write_into_file;
    int wif = service_writes && !(cfg->output_path && cfg->output_path[0]);
    /* Producers commit their buffers only when full or flushed: without a flush period their data
     * reaches the file late and out of order, which Perfetto's trace processor reports
     * (config_write_into_file_no_flush) and can only fix by sorting the whole trace in memory */
    if (service_writes && !(cfg->has_flush_period_ms && cfg->flush_period_ms > 0))
        fprintf(stderr, "tracectl record: note: write_into_file without flush_period_ms: producers' data reaches the "
                        "file only when their buffers fill or at the end, out of order, and trace processor reports "
                        "the trace (config_write_into_file_no_flush); add e.g. flush_period_ms: 5000 to the "
                        "config\n");
    if (service_writes && !wif && o.out_path)
        fprintf(stderr, "tracectl record: note: -o %s ignored: the service writes the trace to output_path %s\n",
                o.out_path, cfg->output_path);
    if (o.detach_key && !service_writes && o.out_path)
        fprintf(stderr, "tracectl record: note: -o %s ignored with --detach: give it to `tracectl attach`\n",
                o.out_path);
    if (wif && o.detach_key && !o.out_path) {
        fprintf(stderr, "tracectl record: a write_into_file session started with --detach needs -o FILE (the "
                        "service writes the trace into it)\n");
        protobuf_c_message_free_unpacked(&cfg->base, NULL);
        free(spans);
        return 2;
    }
    if (wif) {
        struct tg_endpoint ep;
        if (tg_endpoint_parse(eo.endpoint, &ep, err, sizeof err) == 0 && ep.kind != TG_EP_UNIX) {
            fprintf(stderr, "tracectl record: write_into_file without output_path passes the output file over the "
                            "socket, which needs a UNIX-socket endpoint (%s is %s)\n",
                    eo.endpoint, tg_endpoint_kind_name(ep.kind));
            protobuf_c_message_free_unpacked(&cfg->base, NULL);
            free(spans);
            return 2;
        }
        if (strcmp(out_path, "-") == 0) {
            fprintf(stderr, "tracectl record: write_into_file needs a real output file, not stdout\n");
            protobuf_c_message_free_unpacked(&cfg->base, NULL);
            free(spans);
            return 2;
        }
    }
    signal(SIGPIPE, SIG_IGN);

    struct tc_rpc rpc;
    if (tc_rpc_open(&rpc, &eo, "ConsumerPort") != 0) {
        fprintf(stderr, "tracectl record: cannot reach the tracing service at %s: %s\n", eo.endpoint, rpc.error);
        tc_rpc_close(&rpc);
        protobuf_c_message_free_unpacked(&cfg->base, NULL);
        free(spans);
        return 1;
    }
    ret = 1;
    /* through a tracegate gateway: keep the session across a dropped connection */
    if (!o.no_resume && !o.detach_key && tc_rpc_arm_resume(&rpc) == 0 && o.progress)
        fprintf(stderr, "tracectl: the gateway keeps this session for %u s if the connection drops\n",
                (rpc.resume_window_ms + 999) / 1000);
    struct tc_session s;
    struct tc_trace_writer w;
    memset(&w, 0, sizeof w);
    int out_fd = -1, opened_out = 0, have_writer = 0;
    uint8_t *args = NULL;
    struct event *drop_ev = NULL;
    if (tc_session_init(&s, &rpc, cfg->duration_ms, o.progress && !o.detach_key) != 0) {
        fprintf(stderr, "tracectl record: cannot set up the event loop\n");
        goto out_nosession;
    }
    s.test_drop_read = o.test_drop_read > 0 ? (unsigned)o.test_drop_read : 0;
    s.test_drop_silent = o.test_drop_silent;

    /* the output file: opened up front (like perfetto) so a bad path fails before tracing */
    if (wif || (!o.detach_key && !service_writes)) {
        if (wif) {
            out_fd = open(out_path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
            if (out_fd < 0) {
                fprintf(stderr, "tracectl record: cannot open %s for writing: %s\n", out_path, strerror(errno));
                goto out;
            }
            opened_out = 1;
        } else {
            if (tc_trace_writer_open(&w, out_path, err, sizeof err) != 0) {
                fprintf(stderr, "tracectl record: %s\n", err);
                goto out;
            }
            have_writer = 1;
            opened_out = 1;
        }
    }

    Perfetto__Protos__EnableTracingRequest req = PERFETTO__PROTOS__ENABLE_TRACING_REQUEST__INIT;
    req.trace_config = cfg;
    size_t alen = perfetto__protos__enable_tracing_request__get_packed_size(&req);
    args = malloc(alen ? alen : 1);
    if (!args)
        goto out;
    perfetto__protos__enable_tracing_request__pack(&req, args);
    if (tc_session_enable(&s, args, alen, out_fd) != 0) {
        fprintf(stderr, "tracectl record: %s\n", rpc.error);
        goto out;
    }
    if (out_fd >= 0) {
        close(out_fd); /* the service has its own copy once the frame is out; ours is not needed */
        out_fd = -1;
    }
    if (o.test_drop_after_ms > 0) {
        drop_ev = evtimer_new(rpc.base, test_drop_cb, &s);
        struct timeval tv = {o.test_drop_after_ms / 1000, (o.test_drop_after_ms % 1000) * 1000};
        if (drop_ev)
            evtimer_add(drop_ev, &tv);
    }

    if (o.detach_key) {
        ret = record_detach(&s, eo.endpoint, o.detach_key);
        if (ret == 0)
            opened_out = 0; /* the service writes into it */
        goto out;
    }
    if (o.progress) {
        fprintf(stderr, "tracectl: recording into %s: ",
                service_writes && !wif ? cfg->output_path : strcmp(out_path, "-") == 0 ? "stdout" : out_path);
        tc_print_config_summary(stderr, cfg);
        fprintf(stderr, "%s\n", cfg->duration_ms ? "" : "; Ctrl-C to stop");
    }
    if (tc_session_wait(&s) != 0)
        goto out;
    opened_out = 0; /* from here on a failure leaves what was collected */
    if (service_writes && !wif) {
        tc_session_free_buffers(&s);
        fprintf(stderr, "tracectl: the service wrote the trace to %s\n", cfg->output_path);
        ret = 0;
        goto out;
    }
    if (wif) {
        tc_session_free_buffers(&s);
        uint8_t *data;
        size_t len;
        if (tc_trace_file_load(out_path, &data, &len, err, sizeof err) == 0) {
            struct tc_trace_reader r;
            const uint8_t *p;
            size_t pl;
            uint64_t n = 0;
            tc_trace_reader_init(&r, data, len);
            while (tc_trace_reader_next(&r, &p, &pl, NULL, err, sizeof err) == 1)
                n++;
            free(data);
            fprintf(stderr, "tracectl: the service wrote %" PRIu64 " packets (%zu bytes) to %s\n", n, len, out_path);
        }
        if (fleet_spans[0] && tc_fetch_fleet_spans(&eo, o.fed_spec, fleet_spans, NULL, fleet_host, stderr) < 0)
            fprintf(stderr, "tracectl record: no node's spans could be fetched (the trace itself is complete)\n");
        ret = n_spans && tc_stitch_file(out_path, spans, n_spans, fleet_host[0] ? fleet_host : NULL) != 0 ? 1 : 0;
        goto out;
    }
    /* a federated session (@all, @a,b) merges every node's buffers: no per-config limit */
    if (!(eo.node && eo.node[0] == '@'))
        s.read_limit = tc_read_limit(cfg);
    if (tc_session_read(&s, &w) != 0)
        goto out;
    have_writer = 0;
    if (eo.node && eo.node[0] == '@')
        tc_print_machines(&s, &eo, stderr);
    if (fleet_spans[0] && tc_fetch_fleet_spans(&eo, o.fed_spec, fleet_spans, NULL, fleet_host, stderr) < 0)
        fprintf(stderr, "tracectl record: no node's spans could be fetched (the trace itself is complete)\n");
    ret = n_spans && tc_stitch_file(out_path, spans, n_spans, fleet_host[0] ? fleet_host : NULL) != 0 ? 1 : 0;
out:
    if (ret != 0 && rpc.detach_key[0] && s.enable_started && !s.buffers_freed && !s.aborted && !s.enable_error[0])
        fprintf(stderr, "tracectl: if the gateway still held the session, it detaches it with key %s when its "
                        "resume window ends; collect it then with: tracectl attach %s %s\n",
                rpc.detach_key, eo.endpoint, rpc.detach_key);
    tc_session_destroy(&s);
out_nosession:
    if (drop_ev)
        event_free(drop_ev);
    if (have_writer)
        tc_trace_writer_close(&w, err, sizeof err);
    if (out_fd >= 0)
        close(out_fd);
    if (ret != 0 && opened_out && is_regular_path(out_path))
        unlink(out_path); /* a failed session leaves no empty trace behind (as perfetto does) */
    free(args);
    free(spans);
    tc_rpc_close(&rpc);
    protobuf_c_message_free_unpacked(&cfg->base, NULL);
    return ret;
}
