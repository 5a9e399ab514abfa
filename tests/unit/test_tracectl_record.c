/* test_tracectl_record.c: `tracectl record`, `attach` and `clone` (the built binary, run as a child
 * process) against a scripted fake ConsumerPort served in this process with tg_ipc_host: the
 * config tracectl builds, the call sequences of the perfetto CLI (deferred EnableTracing reply,
 * Flush+DisableTracing on Ctrl-C and --stop, streamed ReadBuffers, FreeBuffers, Detach/Attach,
 * CloneSession),
 * the .pftrace it writes, and its errors; also the files `merge` and `spans --cursor` write in a
 * shared directory (temporaries never follow a planted symlink) and the cursor file's syntax, with
 * a fake TracegateFleet (ListNodes, Spans) on the same host. Skipped when $TG_BUILDDIR/src/tracectl/tracectl is absent. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <event2/event.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "consumer_port.pb-c.h"
#include "trace_packet.pb-c.h"
#include "tracegate_gateway.pb-c.h"
#include "tracegate/ipc_host.h"
#include "tracegate/log.h"
#include "tg_test_util.h"

/* ------------------------------------------------------------ fake service */

enum end_mode {
    END_BY_DURATION, /* reply to EnableTracing when duration_ms elapsed */
    END_BY_DISABLE,  /* only DisableTracing ends the session */
    END_ERROR,       /* reply at once with an error */
    END_REJECT,      /* reject EnableTracing */
};

struct fake {
    struct event_base *base;
    tg_ipc_host *host;
    char dir[64], sock[128];
    enum end_mode mode;
    /* what the client did */
    char calls[64][32];
    size_t n_calls;
    Perfetto__Protos__EnableTracingRequest *enable_req; /* first EnableTracing */
    int saw_attach_notification_only;
    uint64_t flush_flags;
    int flush_seen;
    char detach_key[64], attach_key[64];
    char clone_what[64]; /* CloneSession's selector: "id N" or "name S" */
    /* state */
    tg_ipc_call *enable_call;
    struct event *end_timer;
    /* the child */
    pid_t child;
    int child_done, child_status;
    struct event *reaper;
    /* > 0: send SIGINT when this GetTraceStats call (progress poll) arrives; by the third,
     * tracectl has read the first reply (it sent two more polls since) and printed its line */
    int sigint_at_stats;
    int stats_calls;
    /* hostile answers: QueryServiceState streams this many bytes of has_more parts and never
     * a last one; ReadBuffers sends this many bytes of packets more */
    size_t flood_query, flood_read;
    int evil_names; /* QueryServiceState names with terminal controls in them */
    int stats_reject; /* GetTraceStats is rejected (a service that does not tell its buffers) */
    /* in the child, before exec: a symlink to "victim" named this (ending in '-': the child's
     * pid appended) */
    const char *plant;
    /* TracegateFleet: ListNodes also lists names outside the node name syntax; the since_id of
     * the last Spans call and the node it named */
    int evil_nodes;
    uint64_t spans_since;
    char spans_node[64];
};

static struct fake F;

static void log_call(const char *name)
{
    if (F.n_calls < 64)
        snprintf(F.calls[F.n_calls++], sizeof F.calls[0], "%s", name);
}

static void finish_enable(const char *error)
{
    if (!F.enable_call)
        return;
    Perfetto__Protos__EnableTracingResponse r = PERFETTO__PROTOS__ENABLE_TRACING_RESPONSE__INIT;
    r.state_case = PERFETTO__PROTOS__ENABLE_TRACING_RESPONSE__STATE_DISABLED;
    r.disabled = 1;
    r.error = (char *)error;
    tg_ipc_call_reply(F.enable_call, &r.base, 0, -1);
    F.enable_call = NULL;
}

static void end_timer_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    (void)arg;
    finish_enable(NULL);
}

static void m_enable(tg_ipc_call *call, const ProtobufCMessage *req, void *svc, void *ps)
{
    (void)svc;
    (void)ps;
    const Perfetto__Protos__EnableTracingRequest *r = (const Perfetto__Protos__EnableTracingRequest *)req;
    log_call("EnableTracing");
    if (r->attach_notification_only) {
        F.saw_attach_notification_only = 1;
        F.enable_call = call;
        return;
    }
    if (!F.enable_req) {
        uint8_t buf[4096];
        size_t n = perfetto__protos__enable_tracing_request__pack(r, buf);
        F.enable_req = perfetto__protos__enable_tracing_request__unpack(NULL, n, buf);
    }
    F.enable_call = call;
    if (F.mode == END_ERROR) {
        finish_enable("Invalid config: tracegate says no");
        return;
    }
    if (F.mode == END_REJECT) {
        tg_ipc_call_reject(call);
        F.enable_call = NULL;
        return;
    }
    if (F.mode == END_BY_DURATION && r->trace_config && r->trace_config->duration_ms) {
        uint32_t ms = r->trace_config->duration_ms;
        struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
        evtimer_add(F.end_timer, &tv);
    }
}

static void m_disable(tg_ipc_call *call, const ProtobufCMessage *req, void *svc, void *ps)
{
    (void)req;
    (void)svc;
    (void)ps;
    log_call("DisableTracing");
    tg_ipc_call_reply(call, NULL, 0, -1);
    finish_enable(NULL);
}

static int slice(Perfetto__Protos__ReadBuffersResponse__Slice *s, const char *data, int last)
{
    perfetto__protos__read_buffers_response__slice__init(s);
    s->has_data = 1;
    s->data.data = (uint8_t *)data;
    s->data.len = strlen(data);
    s->has_last_slice_for_packet = 1;
    s->last_slice_for_packet = last;
    return 0;
}

#define FLOOD_PART (100u << 10)

/* Packets: "\x40\x01" (ts 1), then ts 2 split over two replies, then ts 3 in three slices. */
static void m_read(tg_ipc_call *call, const ProtobufCMessage *req, void *svc, void *ps)
{
    (void)req;
    (void)svc;
    (void)ps;
    log_call("ReadBuffers");
    Perfetto__Protos__ReadBuffersResponse r = PERFETTO__PROTOS__READ_BUFFERS_RESPONSE__INIT;
    Perfetto__Protos__ReadBuffersResponse__Slice s[3], *p[3] = {&s[0], &s[1], &s[2]};
    r.slices = p;
    slice(&s[0], "\x40\x01", 1);
    slice(&s[1], "\x40", 0);
    r.n_slices = 2;
    tg_ipc_call_reply(call, &r.base, 1, -1);
    slice(&s[0], "\x02", 1);
    slice(&s[1], "\x40", 0);
    slice(&s[2], "\x03", 0);
    r.n_slices = 3;
    tg_ipc_call_reply(call, &r.base, 1, -1);
    slice(&s[0], "\x58\x05", 1); /* ...\x58\x05 = trusted_packet_sequence_id 5 appended */
    r.n_slices = 1;
    tg_ipc_call_reply(call, &r.base, 1, -1);
    if (F.flood_read) {
        /* packets of 100 KiB (a field 36 of 'x's) until flood_read bytes went out */
        uint8_t *pkt = malloc(FLOOD_PART);
        assert_non_null(pkt);
        size_t body = FLOOD_PART - 5;
        pkt[0] = 0xa2, pkt[1] = 0x02; /* field 36, length-delimited */
        pkt[2] = (uint8_t)(0x80 | (body & 0x7f)), pkt[3] = (uint8_t)(0x80 | ((body >> 7) & 0x7f));
        pkt[4] = (uint8_t)(body >> 14);
        memset(pkt + 5, 'x', body);
        s[0].data.data = pkt;
        s[0].data.len = FLOOD_PART;
        s[0].last_slice_for_packet = 1;
        for (size_t sent = 0; sent < F.flood_read; sent += FLOOD_PART)
            tg_ipc_call_reply(call, &r.base, 1, -1);
        free(pkt);
    }
    tg_ipc_call_reply(call, NULL, 0, -1); /* an empty last reply */
}

static void m_free(tg_ipc_call *call, const ProtobufCMessage *req, void *svc, void *ps)
{
    (void)req;
    (void)svc;
    (void)ps;
    log_call("FreeBuffers");
    tg_ipc_call_reply(call, NULL, 0, -1);
}

static void m_flush(tg_ipc_call *call, const ProtobufCMessage *req, void *svc, void *ps)
{
    (void)svc;
    (void)ps;
    const Perfetto__Protos__FlushRequest *r = (const Perfetto__Protos__FlushRequest *)req;
    log_call("Flush");
    F.flush_seen = 1;
    F.flush_flags = r->flags;
    tg_ipc_call_reply(call, NULL, 0, -1);
}

static void m_detach(tg_ipc_call *call, const ProtobufCMessage *req, void *svc, void *ps)
{
    (void)svc;
    (void)ps;
    const Perfetto__Protos__DetachRequest *r = (const Perfetto__Protos__DetachRequest *)req;
    log_call("Detach");
    snprintf(F.detach_key, sizeof F.detach_key, "%s", r->key ? r->key : "");
    F.enable_call = NULL; /* the session now belongs to nobody: its deferred reply is dropped */
    tg_ipc_call_reply(call, NULL, 0, -1);
}

static void m_attach(tg_ipc_call *call, const ProtobufCMessage *req, void *svc, void *ps)
{
    (void)svc;
    (void)ps;
    const Perfetto__Protos__AttachRequest *r = (const Perfetto__Protos__AttachRequest *)req;
    log_call("Attach");
    snprintf(F.attach_key, sizeof F.attach_key, "%s", r->key ? r->key : "");
    if (strcmp(F.attach_key, "capkey") != 0) {
        tg_ipc_call_reject(call);
        return;
    }
    Perfetto__Protos__TraceConfig cfg = PERFETTO__PROTOS__TRACE_CONFIG__INIT;
    Perfetto__Protos__TraceConfig__BufferConfig b = PERFETTO__PROTOS__TRACE_CONFIG__BUFFER_CONFIG__INIT, *bp = &b;
    b.has_size_kb = 1;
    b.size_kb = 1024;
    cfg.n_buffers = 1;
    cfg.buffers = &bp;
    cfg.has_duration_ms = 1;
    cfg.duration_ms = 60000;
    Perfetto__Protos__AttachResponse ar = PERFETTO__PROTOS__ATTACH_RESPONSE__INIT;
    ar.trace_config = &cfg;
    tg_ipc_call_reply(call, &ar.base, 0, -1);
}

/* Session 7 (by id) or "snap" (by unique_session_name) can be cloned; others cannot. */
static void m_clone(tg_ipc_call *call, const ProtobufCMessage *req, void *svc, void *ps)
{
    (void)svc;
    (void)ps;
    const Perfetto__Protos__CloneSessionRequest *r = (const Perfetto__Protos__CloneSessionRequest *)req;
    log_call("CloneSession");
    int ok = 0;
    if (r->selector_case == PERFETTO__PROTOS__CLONE_SESSION_REQUEST__SELECTOR_SESSION_ID) {
        snprintf(F.clone_what, sizeof F.clone_what, "id %llu", (unsigned long long)r->session_id);
        ok = r->session_id == 7;
    } else if (r->selector_case == PERFETTO__PROTOS__CLONE_SESSION_REQUEST__SELECTOR_UNIQUE_SESSION_NAME) {
        snprintf(F.clone_what, sizeof F.clone_what, "name %s", r->unique_session_name);
        ok = strcmp(r->unique_session_name, "snap") == 0;
    }
    Perfetto__Protos__CloneSessionResponse cr = PERFETTO__PROTOS__CLONE_SESSION_RESPONSE__INIT;
    cr.has_success = 1;
    cr.success = ok;
    cr.error = ok ? NULL : (char *)"no such session";
    tg_ipc_call_reply(call, &cr.base, 0, -1);
}

static void m_stats(tg_ipc_call *call, const ProtobufCMessage *req, void *svc, void *ps)
{
    (void)req;
    (void)svc;
    (void)ps;
    log_call("GetTraceStats");
    if (F.stats_reject) {
        tg_ipc_call_reject(call);
        return;
    }
    Perfetto__Protos__TraceStats__BufferStats bs = PERFETTO__PROTOS__TRACE_STATS__BUFFER_STATS__INIT, *bsp = &bs;
    bs.has_bytes_written = 1;
    bs.bytes_written = 512 * 1024;
    bs.has_buffer_size = 1;
    bs.buffer_size = 1024 * 1024;
    Perfetto__Protos__TraceStats ts = PERFETTO__PROTOS__TRACE_STATS__INIT;
    ts.n_buffer_stats = 1;
    ts.buffer_stats = &bsp;
    Perfetto__Protos__GetTraceStatsResponse r = PERFETTO__PROTOS__GET_TRACE_STATS_RESPONSE__INIT;
    r.trace_stats = &ts;
    tg_ipc_call_reply(call, &r.base, 0, -1);
    if (F.sigint_at_stats > 0 && ++F.stats_calls == F.sigint_at_stats && F.child > 0 && !F.child_done)
        kill(F.child, SIGINT);
}

static void m_unimpl(tg_ipc_call *call, const ProtobufCMessage *req, void *svc, void *ps)
{
    (void)req;
    (void)svc;
    (void)ps;
    log_call("other");
    tg_ipc_call_reject(call);
}

/* QueryServiceState answered with F.flood_query bytes in has_more parts, none of them the last */
static void m_query(tg_ipc_call *call, const ProtobufCMessage *req, void *svc, void *ps)
{
    (void)req;
    (void)svc;
    (void)ps;
    log_call("QueryServiceState");
    if (F.evil_names) {
        /* names a producer and a consumer choose, with terminal controls in them */
        Perfetto__Protos__TracingServiceState__Producer pr = PERFETTO__PROTOS__TRACING_SERVICE_STATE__PRODUCER__INIT,
                                                        *prp = &pr;
        pr.has_id = 1;
        pr.id = 7;
        pr.name = (char *)"evil\x1b]0;owned\x07\x1b[2J";
        pr.sdk_version = (char *)"\xc2\x9b" "31m";
        Perfetto__Protos__TracingServiceState__TracingSession ts =
                                                              PERFETTO__PROTOS__TRACING_SERVICE_STATE__TRACING_SESSION__INIT,
                                                          *tsp = &ts;
        ts.has_id = 1;
        ts.id = 3;
        ts.unique_session_name = (char *)"sess\r\nforged line";
        Perfetto__Protos__TracingServiceState st = PERFETTO__PROTOS__TRACING_SERVICE_STATE__INIT;
        st.n_producers = 1;
        st.producers = &prp;
        st.n_tracing_sessions = 1;
        st.tracing_sessions = &tsp;
        Perfetto__Protos__QueryServiceStateResponse r = PERFETTO__PROTOS__QUERY_SERVICE_STATE_RESPONSE__INIT;
        r.service_state = &st;
        tg_ipc_call_reply(call, &r.base, 0, -1);
        return;
    }
    if (!F.flood_query) {
        tg_ipc_call_reject(call);
        return;
    }
    uint8_t *part = calloc(1, FLOOD_PART);
    assert_non_null(part);
    for (size_t sent = 0; sent < F.flood_query; sent += FLOOD_PART)
        tg_ipc_call_reply_bytes(call, part, FLOOD_PART, 1, -1);
    free(part);
}

/* TracegateFleet.ListNodes: "hub" (self) and "edge-1", and with evil_nodes names a hostile
 * gateway could send: a space and a line break (a forged cursor line), a terminal control */
static void m_list_nodes(tg_ipc_call *call, const ProtobufCMessage *req, void *svc, void *ps)
{
    (void)req;
    (void)svc;
    (void)ps;
    log_call("ListNodes");
    static const char *const names[][2] = {
        {"hub", "self"}, {"edge-1", "up"}, {"evil 5\nforged", "up"}, {"x\x1b[2J", "up"}, {"@all", "up"}};
    Tracegate__FleetNode n[5], *np[5];
    size_t k = F.evil_nodes ? 5 : 2;
    for (size_t i = 0; i < k; i++) {
        tracegate__fleet_node__init(&n[i]);
        n[i].name = (char *)names[i][0];
        n[i].state = (char *)names[i][1];
        np[i] = &n[i];
    }
    Tracegate__ListNodesResponse r = TRACEGATE__LIST_NODES_RESPONSE__INIT;
    r.n_nodes = k;
    r.nodes = np;
    tg_ipc_call_reply(call, &r.base, 0, -1);
}

/* TracegateFleet.Spans: one span line for any node; the cursor moves to 42 */
static void m_spans(tg_ipc_call *call, const ProtobufCMessage *req, void *svc, void *ps)
{
    (void)svc;
    (void)ps;
    const Tracegate__SpansRequest *q = (const Tracegate__SpansRequest *)req;
    log_call("Spans");
    F.spans_since = q->since_id;
    snprintf(F.spans_node, sizeof F.spans_node, "%s", q->node ? q->node : "");
    static const char line[] = "{\"span\":1}\n";
    Tracegate__SpansResponse r = TRACEGATE__SPANS_RESPONSE__INIT;
    r.has_ndjson = 1;
    r.ndjson.data = (uint8_t *)line;
    r.ndjson.len = sizeof line - 1;
    r.has_next_since = r.has_last_id = 1;
    r.next_since = r.last_id = 42;
    tg_ipc_call_reply(call, &r.base, 0, -1);
}

static const struct tg_ipc_method k_fleet_methods[] = {
    {"ListNodes", &tracegate__list_nodes_request__descriptor, m_list_nodes},
    {"Spans", &tracegate__spans_request__descriptor, m_spans},
};

static void *peer_open(tg_ipc_peer *peer, void *svc)
{
    (void)peer;
    return svc;
}

static void peer_close(tg_ipc_peer *peer, void *ps, void *svc)
{
    (void)peer;
    (void)ps;
    (void)svc;
    F.enable_call = NULL;
}

static const struct tg_ipc_method k_methods[] = {
    {"EnableTracing", &perfetto__protos__enable_tracing_request__descriptor, m_enable},
    {"DisableTracing", &perfetto__protos__disable_tracing_request__descriptor, m_disable},
    {"ReadBuffers", &perfetto__protos__read_buffers_request__descriptor, m_read},
    {"FreeBuffers", &perfetto__protos__free_buffers_request__descriptor, m_free},
    {"Flush", &perfetto__protos__flush_request__descriptor, m_flush},
    {"StartTracing", &perfetto__protos__start_tracing_request__descriptor, m_unimpl},
    {"ChangeTraceConfig", &perfetto__protos__change_trace_config_request__descriptor, m_unimpl},
    {"Detach", &perfetto__protos__detach_request__descriptor, m_detach},
    {"Attach", &perfetto__protos__attach_request__descriptor, m_attach},
    {"GetTraceStats", &perfetto__protos__get_trace_stats_request__descriptor, m_stats},
    {"ObserveEvents", &perfetto__protos__observe_events_request__descriptor, m_unimpl},
    {"QueryServiceState", &perfetto__protos__query_service_state_request__descriptor, m_query},
    {"QueryCapabilities", &perfetto__protos__query_capabilities_request__descriptor, m_unimpl},
    {"CloneSession", &perfetto__protos__clone_session_request__descriptor, m_clone},
};

static const char *tracectl_path(void)
{
    static char path[1024];
    const char *b = getenv("TG_BUILDDIR");
    snprintf(path, sizeof path, "%s/src/tracectl/tracectl", b ? b : ".");
    return access(path, X_OK) == 0 ? path : NULL;
}

static void reaper_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    (void)arg;
    if (F.child > 0 && !F.child_done && waitpid(F.child, &F.child_status, WNOHANG) == F.child)
        F.child_done = 1;
}

static int setup(void **state)
{
    (void)state;
    if (!tracectl_path()) {
        print_message("skipping: tracectl is not built (TG_BUILDDIR=%s)\n", getenv("TG_BUILDDIR") ? getenv("TG_BUILDDIR") : "");
        return 0;
    }
    memset(&F, 0, sizeof F);
    snprintf(F.dir, sizeof F.dir, "/tmp/tg_rec_XXXXXX");
    assert_non_null(mkdtemp(F.dir));
    snprintf(F.sock, sizeof F.sock, "%s/c.sock", F.dir);
    F.base = event_base_new();
    struct tg_ipc_host_opts ho;
    memset(&ho, 0, sizeof ho);
    F.host = tg_ipc_host_new(F.base, &ho);
    assert_non_null(F.host);
    static const struct tg_ipc_service_def def = { /* the host keeps the pointer */
        .name = "ConsumerPort",
        .methods = k_methods,
        .n_methods = sizeof k_methods / sizeof k_methods[0],
        .peer_open = peer_open,
        .peer_close = peer_close,
    };
    assert_true(tg_ipc_host_add_service(F.host, &def, &F) != 0);
    static const struct tg_ipc_service_def fleet = {
        .name = "TracegateFleet",
        .methods = k_fleet_methods,
        .n_methods = sizeof k_fleet_methods / sizeof k_fleet_methods[0],
        .peer_open = peer_open,
        .peer_close = peer_close,
    };
    assert_true(tg_ipc_host_add_service(F.host, &fleet, &F) != 0);
    char err[256];
    assert_int_equal(tg_ipc_host_listen(F.host, F.sock, 0600, err, sizeof err), 0);
    F.end_timer = evtimer_new(F.base, end_timer_cb, NULL);
    F.reaper = event_new(F.base, -1, EV_PERSIST, reaper_cb, NULL);
    struct timeval tv = {0, 20000};
    event_add(F.reaper, &tv);
    return 0;
}

static void rm_rf(const char *dir)
{
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "cannot remove %s\n", dir);
}

static int teardown(void **state)
{
    (void)state;
    if (!F.base)
        return 0;
    if (F.child > 0 && !F.child_done) {
        kill(F.child, SIGKILL);
        waitpid(F.child, NULL, 0);
    }
    event_free(F.end_timer);
    event_free(F.reaper);
    tg_ipc_host_free(F.host);
    event_base_free(F.base);
    if (F.enable_req)
        perfetto__protos__enable_tracing_request__free_unpacked(F.enable_req, NULL);
    rm_rf(F.dir);
    memset(&F, 0, sizeof F);
    return 0;
}

#define NEED_TRACECTL()                                                                                              \
    do {                                                                                                             \
        if (!F.base)                                                                                                 \
            skip();                                                                                                  \
    } while (0)

static int child_done(void *arg)
{
    (void)arg;
    return F.child_done;
}

/* Runs tracectl with args (NULL-terminated) in F.dir; returns its exit status. stderr
 * goes to F.dir/stderr.txt. */
static int run_tracectl(const char *const *args)
{
    char errpath[256];
    snprintf(errpath, sizeof errpath, "%s/stderr.txt", F.dir);
    const char *argv[32];
    size_t n = 0;
    argv[n++] = tracectl_path();
    for (size_t i = 0; args[i] && n < 31; i++)
        argv[n++] = args[i];
    argv[n] = NULL;
    F.child_done = 0;
    F.child_status = 0;
    F.child = fork();
    assert_true(F.child >= 0);
    if (F.child == 0) {
        if (chdir(F.dir) != 0)
            _exit(126);
        int fd = open(errpath, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        umask(022);
        if (F.plant) {
            char link[128];
            size_t pl = strlen(F.plant);
            if (pl && F.plant[pl - 1] == '-')
                snprintf(link, sizeof link, "%s%d", F.plant, (int)getpid());
            else
                snprintf(link, sizeof link, "%s", F.plant);
            if (symlink("victim", link) != 0)
                _exit(125);
        }
        dup2(fd, 2);
        dup2(fd, 1);
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    if (!tg_test_run_until(F.base, child_done, NULL, 40000)) { /* a scaled safety net */
        kill(F.child, SIGKILL);
        waitpid(F.child, NULL, 0);
        F.child_done = 1;
        print_error("tracectl hung\n");
        fail();
    }
    if (!WIFEXITED(F.child_status)) {
        print_error("tracectl did not exit normally (status %d)\n", F.child_status);
        fail();
    }
    return WEXITSTATUS(F.child_status);
}

static char *read_text(const char *name)
{
    char path[256];
    snprintf(path, sizeof path, "%s/%s", F.dir, name);
    uint8_t *data;
    size_t len;
    if (tg_test_read_file(path, &data, &len) != 0)
        return NULL;
    return (char *)data;
}

static void expect_in_stderr(const char *needle)
{
    char *t = read_text("stderr.txt");
    assert_non_null(t);
    if (!strstr(t, needle)) {
        print_error("expected [%s] in tracectl's output:\n%s\n", needle, t);
        free(t);
        fail();
    }
    free(t);
}

static void expect_calls(const char *const *want)
{
    size_t n = 0;
    for (; want[n]; n++)
        ;
    /* GetTraceStats (progress) may be interleaved anywhere: ignore it */
    size_t j = 0;
    for (size_t i = 0; i < F.n_calls; i++) {
        if (strcmp(F.calls[i], "GetTraceStats") == 0)
            continue;
        if (j >= n || strcmp(F.calls[i], want[j]) != 0) {
            print_error("call #%zu: got %s, want %s\n", i, F.calls[i], j < n ? want[j] : "(nothing)");
            for (size_t k = 0; k < F.n_calls; k++)
                print_error("  %s\n", F.calls[k]);
            fail();
        }
        j++;
    }
    assert_int_equal(j, n);
}

/* the file the fake's ReadBuffers produces: 3 packets */
static void expect_trace(const char *name)
{
    char path[256];
    snprintf(path, sizeof path, "%s/%s", F.dir, name);
    uint8_t *data;
    size_t len;
    assert_int_equal(tg_test_read_file(path, &data, &len), 0);
    static const uint8_t want[] = {0x0A, 0x02, 0x40, 0x01, 0x0A, 0x02, 0x40, 0x02,
                                   0x0A, 0x04, 0x40, 0x03, 0x58, 0x05};
    assert_int_equal(len, sizeof want);
    assert_memory_equal(data, want, sizeof want);
    free(data);
}

static int file_exists(const char *name)
{
    char path[256];
    snprintf(path, sizeof path, "%s/%s", F.dir, name);
    return access(path, F_OK) == 0;
}

/* runs tracectl and checks its exit status, showing its output when it differs */
static void run_expect(const char *const *args, int want)
{
    int got = run_tracectl(args);
    if (getenv("TG_TEST_VERBOSE")) {
        char *t = read_text("stderr.txt");
        print_message("---- tracectl %s -> %d:\n%s", args[0], got, t ? t : "");
        free(t);
    }
    if (got != want) {
        char *t = read_text("stderr.txt");
        print_error("tracectl exited %d, want %d; its output:\n%s\n", got, want, t ? t : "(none)");
        free(t);
        fail();
    }
}

/* ------------------------------------------------------------------- tests */

static void test_record_defaults(void **state)
{
    (void)state;
    NEED_TRACECTL();
    F.mode = END_BY_DURATION;
    char url[200];
    snprintf(url, sizeof url, "unix:%s", F.sock);
    const char *args[] = {"record", url, "--duration", "300ms", NULL};
    run_expect(args, 0);
    const char *want[] = {"EnableTracing", "ReadBuffers", "FreeBuffers", NULL};
    expect_calls(want);
    expect_trace("trace.pftrace");
    expect_in_stderr("wrote 3 packets");
    expect_in_stderr("trace.pftrace");

    /* the default config: 32 MiB ring buffer, track_event with every category, 300 ms */
    assert_non_null(F.enable_req);
    const Perfetto__Protos__TraceConfig *c = F.enable_req->trace_config;
    assert_non_null(c);
    assert_true(c->has_duration_ms);
    assert_int_equal(c->duration_ms, 300);
    assert_int_equal(c->n_buffers, 1);
    assert_int_equal(c->buffers[0]->size_kb, 32 * 1024);
    assert_int_equal(c->n_data_sources, 1);
    const Perfetto__Protos__DataSourceConfig *ds = c->data_sources[0]->config;
    assert_string_equal(ds->name, "track_event");
    assert_true(ds->has_target_buffer);
    assert_int_equal(ds->target_buffer, 0);
    assert_non_null(ds->track_event_config);
    assert_int_equal(ds->track_event_config->n_enabled_categories, 1);
    assert_string_equal(ds->track_event_config->enabled_categories[0], "*");
    assert_false(F.enable_req->attach_notification_only);
}

static void test_record_config_and_shortcuts(void **state)
{
    (void)state;
    NEED_TRACECTL();
    F.mode = END_BY_DURATION;
    char path[256];
    snprintf(path, sizeof path, "%s/cfg.txtpb", F.dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fprintf(f, "# a Perfetto text config\n"
               "buffers { size_kb: 1024 fill_policy: DISCARD }\n"
               "buffers { size_kb: 64 }\n"
               "data_sources { config { name: \"a\" target_buffer: 1 } }\n"
               "duration_ms: 100000\n"
               "unique_session_name: \"s1\"\n");
    fclose(f);
    char url[200];
    snprintf(url, sizeof url, "unix:%s", F.sock);
    /* the URL after the options works too */
    const char *args[] = {"record", "-c", path, "--ds", "b", "--ds", "c", "--buffer", "2mb", "--fill", "ring",
                          "-t", "0.2s", "-o", "x.pftrace", "--no-progress", url, NULL};
    run_expect(args, 0);
    expect_trace("x.pftrace");
    const Perfetto__Protos__TraceConfig *c = F.enable_req->trace_config;
    assert_int_equal(c->duration_ms, 200);
    assert_int_equal(c->n_buffers, 2);
    assert_int_equal(c->buffers[0]->size_kb, 2048);
    assert_int_equal(c->buffers[0]->fill_policy, PERFETTO__PROTOS__TRACE_CONFIG__BUFFER_CONFIG__FILL_POLICY__RING_BUFFER);
    assert_int_equal(c->buffers[1]->size_kb, 64);
    assert_int_equal(c->n_data_sources, 3);
    assert_string_equal(c->data_sources[0]->config->name, "a");
    assert_int_equal(c->data_sources[0]->config->target_buffer, 1);
    assert_string_equal(c->data_sources[1]->config->name, "b");
    assert_string_equal(c->data_sources[2]->config->name, "c");
    assert_int_equal(c->data_sources[2]->config->target_buffer, 0);
    assert_null(c->data_sources[2]->config->track_event_config);
    assert_string_equal(c->unique_session_name, "s1");
}

static void test_record_binary_config(void **state)
{
    (void)state;
    NEED_TRACECTL();
    F.mode = END_BY_DURATION;
    Perfetto__Protos__TraceConfig cfg = PERFETTO__PROTOS__TRACE_CONFIG__INIT;
    Perfetto__Protos__TraceConfig__BufferConfig b = PERFETTO__PROTOS__TRACE_CONFIG__BUFFER_CONFIG__INIT, *bp = &b;
    b.has_size_kb = 1;
    b.size_kb = 4096;
    Perfetto__Protos__DataSourceConfig dc = PERFETTO__PROTOS__DATA_SOURCE_CONFIG__INIT;
    dc.name = "track_event";
    Perfetto__Protos__TraceConfig__DataSource ds = PERFETTO__PROTOS__TRACE_CONFIG__DATA_SOURCE__INIT, *dsp = &ds;
    ds.config = &dc;
    cfg.n_buffers = 1;
    cfg.buffers = &bp;
    cfg.n_data_sources = 1;
    cfg.data_sources = &dsp;
    cfg.has_duration_ms = 1;
    cfg.duration_ms = 150;
    uint8_t buf[256];
    size_t n = perfetto__protos__trace_config__pack(&cfg, buf);
    char path[256];
    snprintf(path, sizeof path, "%s/cfg.pb", F.dir);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(buf, 1, n, f), n);
    fclose(f);
    char url[200];
    snprintf(url, sizeof url, "unix:%s", F.sock);
    const char *args[] = {"record", url, "-c", path, NULL};
    run_expect(args, 0);
    const Perfetto__Protos__TraceConfig *c = F.enable_req->trace_config;
    assert_int_equal(c->duration_ms, 150);
    assert_int_equal(c->buffers[0]->size_kb, 4096);
    assert_string_equal(c->data_sources[0]->config->name, "track_event");
    assert_null(c->data_sources[0]->config->track_event_config);
}

static void test_record_session_error(void **state)
{
    (void)state;
    NEED_TRACECTL();
    F.mode = END_ERROR;
    char url[200];
    snprintf(url, sizeof url, "unix:%s", F.sock);
    const char *args[] = {"record", url, "--duration", "1s", NULL};
    run_expect(args, 1);
    expect_in_stderr("tracegate says no");
    const char *want[] = {"EnableTracing", NULL};
    expect_calls(want);
    assert_false(file_exists("trace.pftrace")); /* no empty trace left behind */
}

static void test_record_rejected(void **state)
{
    (void)state;
    NEED_TRACECTL();
    F.mode = END_REJECT;
    char url[200];
    snprintf(url, sizeof url, "unix:%s", F.sock);
    const char *args[] = {"record", url, "--duration", "1s", NULL};
    run_expect(args, 1);
    expect_in_stderr("rejected EnableTracing");
}

/* Ctrl-C: Flush{trace-stop, perfetto_cmd} then DisableTracing, then the trace is read as usual */
static void test_record_ctrl_c(void **state)
{
    (void)state;
    NEED_TRACECTL();
    F.mode = END_BY_DISABLE;
    F.sigint_at_stats = 3;
    char url[200];
    snprintf(url, sizeof url, "unix:%s", F.sock);
    const char *args[] = {"record", url, NULL};
    run_expect(args, 0);
    const char *want[] = {"EnableTracing", "Flush", "DisableTracing", "ReadBuffers", "FreeBuffers", NULL};
    expect_calls(want);
    assert_int_equal(F.flush_flags, 0x22);
    expect_trace("trace.pftrace");
    expect_in_stderr("stopping the session");
    /* the progress line (plain lines: stderr is a file) with the fill from GetTraceStats */
    expect_in_stderr("recording: ");
    expect_in_stderr("buffer 50.0% of 1.0 MiB");
}

static void test_record_detach(void **state)
{
    (void)state;
    NEED_TRACECTL();
    F.mode = END_BY_DISABLE;
    char url[200];
    snprintf(url, sizeof url, "unix:%s", F.sock);
    const char *args[] = {"record", url, "--duration", "30s", "--detach", "capkey", NULL};
    run_expect(args, 0);
    const char *want[] = {"EnableTracing", "Detach", NULL};
    expect_calls(want);
    assert_string_equal(F.detach_key, "capkey");
    expect_in_stderr("detached with key 'capkey'");
    assert_false(file_exists("trace.pftrace"));
}

/* mirrors consumer_attach_stop: Attach, EnableTracing{attach_notification_only}, Flush, Disable */
static void test_attach_stop(void **state)
{
    (void)state;
    NEED_TRACECTL();
    F.mode = END_BY_DISABLE;
    char url[200];
    snprintf(url, sizeof url, "unix:%s", F.sock);
    const char *args[] = {"attach", url, "capkey", "--stop", "-o", "att.pftrace", NULL};
    run_expect(args, 0);
    const char *want[] = {"Attach", "EnableTracing", "Flush", "DisableTracing", "ReadBuffers", "FreeBuffers", NULL};
    expect_calls(want);
    assert_string_equal(F.attach_key, "capkey");
    assert_true(F.saw_attach_notification_only);
    assert_int_equal(F.flush_flags, 0x22);
    expect_trace("att.pftrace");
    expect_in_stderr("attached to session 'capkey': duration 60 s");
}

static void test_attach_unknown_key(void **state)
{
    (void)state;
    NEED_TRACECTL();
    char url[200];
    snprintf(url, sizeof url, "unix:%s", F.sock);
    const char *args[] = {"attach", url, "nokey", "--stop", NULL};
    run_expect(args, 1);
    expect_in_stderr("no detached session");
    assert_false(file_exists("trace.pftrace"));
}

/* options before the positionals: the dispatcher sees "--stop" first and takes no URL, so the
 * command finds both URL and KEY among what its options left */
static void test_attach_options_first(void **state)
{
    (void)state;
    NEED_TRACECTL();
    F.mode = END_BY_DISABLE;
    char url[200];
    snprintf(url, sizeof url, "unix:%s", F.sock);
    const char *args[] = {"attach", "--stop", "-o", "att.pftrace", url, "capkey", NULL};
    run_expect(args, 0);
    const char *want[] = {"Attach", "EnableTracing", "Flush", "DisableTracing", "ReadBuffers", "FreeBuffers", NULL};
    expect_calls(want);
    assert_string_equal(F.attach_key, "capkey");
    expect_trace("att.pftrace");
}

/* clone by id (URL first) and by name (options first): CloneSession, then the snapshot read out */
static void test_clone(void **state)
{
    (void)state;
    NEED_TRACECTL();
    char url[200];
    snprintf(url, sizeof url, "unix:%s", F.sock);
    const char *a1[] = {"clone", url, "7", "-o", "c1.pftrace", NULL};
    run_expect(a1, 0);
    const char *want[] = {"CloneSession", "ReadBuffers", "FreeBuffers", NULL};
    expect_calls(want);
    assert_string_equal(F.clone_what, "id 7");
    expect_trace("c1.pftrace");
    expect_in_stderr("cloned session '7'");

    F.n_calls = 0;
    const char *a2[] = {"clone", "-o", "c2.pftrace", url, "snap", NULL};
    run_expect(a2, 0);
    expect_calls(want);
    assert_string_equal(F.clone_what, "name snap");
    expect_trace("c2.pftrace");

    F.n_calls = 0;
    const char *a3[] = {"clone", url, "other", "-o", "c3.pftrace", NULL};
    run_expect(a3, 1);
    expect_in_stderr("cannot clone 'other': no such session");
    assert_false(file_exists("c3.pftrace"));
}

/* a server that streams has_more parts without end: tracectl stops reading at 32 MiB with a
 * clear error instead of collecting until its deadline (gigabytes on a fast socket) */
static void test_endless_reply_cut(void **state)
{
    (void)state;
    NEED_TRACECTL();
    char url[200];
    snprintf(url, sizeof url, "unix:%s", F.sock);
    F.flood_query = (32u << 20) + 4 * FLOOD_PART;
    const char *a1[] = {"query", url, NULL};
    run_expect(a1, 1);
    expect_in_stderr("the reply to QueryServiceState passed 32 MiB");
    F.flood_query = 0;
}

/* a service whose ReadBuffers sends more than the session's buffers can hold (1 MiB here: at most
 * 2 x 1 MiB + 16 MiB) is cut there: the file keeps what came, said to be incomplete, exit 1 */
static void test_read_beyond_buffers_cut(void **state)
{
    (void)state;
    NEED_TRACECTL();
    F.mode = END_BY_DURATION;
    char url[200];
    snprintf(url, sizeof url, "unix:%s", F.sock);
    F.flood_read = 24u << 20;
    const char *a1[] = {"record", url, "--duration", "100ms", "--buffer", "1mb", "--no-progress", NULL};
    run_expect(a1, 1);
    expect_in_stderr("more than the session's buffers can hold");
    expect_in_stderr("trace.pftrace is incomplete");
    struct stat st;
    char path[256];
    snprintf(path, sizeof path, "%s/trace.pftrace", F.dir);
    assert_int_equal(stat(path, &st), 0);
    assert_true(st.st_size > 0 && st.st_size <= (18 << 20));
    /* 20 MiB with a 32 MiB buffer is a trace like any other */
    F.flood_read = 20u << 20;
    const char *a2[] = {"record", url, "--duration", "100ms", "--no-progress", NULL};
    run_expect(a2, 0);
    assert_int_equal(stat(path, &st), 0);
    assert_true(st.st_size > (20 << 20));
    F.flood_read = 0;
}

static off_t file_size(const char *name)
{
    char path[256];
    struct stat st;
    snprintf(path, sizeof path, "%s/%s", F.dir, name);
    assert_int_equal(stat(path, &st), 0);
    return st.st_size;
}

static int called(const char *name)
{
    for (size_t i = 0; i < F.n_calls; i++)
        if (!strcmp(F.calls[i], name))
            return 1;
    return 0;
}

/* clone against a service whose ReadBuffers sends more than the clone's buffers (1 MiB, as its
 * GetTraceStats says) can hold: cut at 2 x 1 MiB + 16 MiB, the file keeps what came, exit 1. A
 * service that does not tell the buffers is held to --max-size; its default (4 GiB) does not cut
 * an ordinary trace. */
static void test_clone_read_bounded(void **state)
{
    (void)state;
    NEED_TRACECTL();
    char url[200];
    snprintf(url, sizeof url, "unix:%s", F.sock);
    F.flood_read = 24u << 20;
    const char *a1[] = {"clone", url, "7", "-o", "c.pftrace", NULL};
    run_expect(a1, 1);
    assert_true(called("GetTraceStats"));
    expect_in_stderr("more than the session's buffers can hold");
    expect_in_stderr("c.pftrace is incomplete");
    assert_true(file_size("c.pftrace") > 0 && file_size("c.pftrace") <= (18 << 20));

    F.stats_reject = 1;
    const char *a2[] = {"clone", url, "7", "--max-size", "4mb", "-o", "c.pftrace", NULL};
    run_expect(a2, 1);
    expect_in_stderr("the service sent more than 4.0 MiB (--max-size): stopped reading");
    assert_true(file_size("c.pftrace") > 0 && file_size("c.pftrace") <= (4 << 20));

    F.n_calls = 0;
    const char *a3[] = {"clone", url, "7", "-o", "c.pftrace", NULL};
    run_expect(a3, 0);
    assert_true(called("GetTraceStats"));
    assert_true(file_size("c.pftrace") > (24 << 20));

    const char *a4[] = {"clone", url, "7", "--max-size", "lots", NULL};
    run_expect(a4, 2);
    expect_in_stderr("invalid --max-size 'lots'");
    F.flood_read = 0;
    F.stats_reject = 0;
}

/* -o onto a full disk: the write error is named with the path, exit 1; onto a directory that
 * cannot be written: refused before anything is sent */
static void test_output_write_errors(void **state)
{
    (void)state;
    NEED_TRACECTL();
    F.mode = END_BY_DURATION;
    char url[200];
    snprintf(url, sizeof url, "unix:%s", F.sock);
    if (access("/dev/full", W_OK) == 0) {
        const char *a1[] = {"record", url, "--duration", "100ms", "--no-progress", "-o", "/dev/full", NULL};
        run_expect(a1, 1);
        expect_in_stderr("cannot write /dev/full: No space left on device");
    }
    F.n_calls = 0;
    const char *a2[] = {"record", url, "--duration", "100ms", "-o", "no-such-dir/t.pftrace", NULL};
    run_expect(a2, 1);
    expect_in_stderr("cannot open no-such-dir/t.pftrace for writing");
    assert_int_equal(F.n_calls, 0);
}

/* names others chose (a producer's, a session's) reach the terminal escaped: no ESC, no CSI, no
 * line break of their own */
static void test_query_names_escaped(void **state)
{
    (void)state;
    NEED_TRACECTL();
    char url[200];
    snprintf(url, sizeof url, "unix:%s", F.sock);
    F.evil_names = 1;
    const char *a1[] = {"query", url, NULL};
    run_expect(a1, 0);
    F.evil_names = 0;
    char *t = read_text("stderr.txt");
    assert_non_null(t);
    assert_null(strchr(t, 0x1b));
    assert_null(strchr(t, 0x07));
    assert_null(strstr(t, "\xc2\x9b"));
    assert_null(strstr(t, "\r\nforged"));
    assert_non_null(strstr(t, "evil\\x1b]0;owned\\x07\\x1b[2J"));
    assert_non_null(strstr(t, "sess\\r\\nforged line"));
    free(t);
}

static void write_text(const char *name, const char *text)
{
    char path[256];
    snprintf(path, sizeof path, "%s/%s", F.dir, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    assert_int_equal(fclose(f), 0);
}

static void expect_text(const char *name, const char *want)
{
    char *t = read_text(name);
    assert_non_null(t);
    if (strcmp(t, want) != 0) {
        print_error("%s is [%s], want [%s]\n", name, t, want);
        free(t);
        fail();
    }
    free(t);
}

/* no file named like a temporary is left in F.dir */
static void expect_no_tmp_left(void)
{
    char cmd[256];
    snprintf(cmd, sizeof cmd, "ls '%s' | grep -q '\\.tmp'", F.dir);
    assert_int_not_equal(system(cmd), 0);
}

/* a trace merge can place spans on: one ClockSnapshot with BOOTTIME and REALTIME */
static void write_clock_trace(const char *name)
{
    Perfetto__Protos__ClockSnapshot__Clock c[2], *cp[2] = {&c[0], &c[1]};
    for (int i = 0; i < 2; i++) {
        perfetto__protos__clock_snapshot__clock__init(&c[i]);
        c[i].has_clock_id = c[i].has_timestamp = 1;
    }
    c[0].clock_id = 6;
    c[0].timestamp = 1000000;
    c[1].clock_id = 1;
    c[1].timestamp = 1700000000000000000ull;
    Perfetto__Protos__ClockSnapshot cs = PERFETTO__PROTOS__CLOCK_SNAPSHOT__INIT;
    cs.n_clocks = 2;
    cs.clocks = cp;
    cs.has_primary_trace_clock = 1;
    cs.primary_trace_clock = PERFETTO__PROTOS__BUILTIN_CLOCK__BUILTIN_CLOCK_BOOTTIME;
    Perfetto__Protos__TracePacket pkt = PERFETTO__PROTOS__TRACE_PACKET__INIT;
    pkt.has_timestamp = 1;
    pkt.timestamp = 1000000;
    pkt.data_case = PERFETTO__PROTOS__TRACE_PACKET__DATA_CLOCK_SNAPSHOT;
    pkt.clock_snapshot = &cs;
    pkt.optional_trusted_packet_sequence_id_case =
        PERFETTO__PROTOS__TRACE_PACKET__OPTIONAL_TRUSTED_PACKET_SEQUENCE_ID_TRUSTED_PACKET_SEQUENCE_ID;
    pkt.trusted_packet_sequence_id = 1;
    uint8_t buf[256];
    size_t n = perfetto__protos__trace_packet__pack(&pkt, buf + 2);
    assert_true(n < 128);
    buf[0] = 0x0a;
    buf[1] = (uint8_t)n;
    char path[256];
    snprintf(path, sizeof path, "%s/%s", F.dir, name);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(buf, 1, n + 2, f), n + 2);
    assert_int_equal(fclose(f), 0);
}

/* merge in a shared directory: another user planted a symlink at the temporary name the old code
 * used (OUT.tmp-PID); it is not followed (its target keeps its bytes), OUT is written, a regular
 * file with the umask's mode, and no temporary is left. A symlink at OUT itself is replaced. */
static void test_merge_tmp_not_followed(void **state)
{
    (void)state;
    NEED_TRACECTL();
    write_clock_trace("in.pftrace");
    write_text("s.ndjson", "{\"trace_id\":\"0af7651916cd43dd8448eb211c80319c\",\"span_id\":\"0000000000000001\","
                           "\"name\":\"x\",\"start_ns\":1700000000000000100,\"end_ns\":1700000000000000200,"
                           "\"resource\":{\"service.name\":\"s\"}}\n");
    write_text("victim", "the victim's file\n");
    F.plant = "out.pftrace.tmp-";
    const char *a1[] = {"merge", "in.pftrace", "s.ndjson", "-o", "out.pftrace", NULL};
    run_expect(a1, 0);
    F.plant = NULL;
    expect_text("victim", "the victim's file\n");
    expect_in_stderr("stitched 1 spans");
    char path[256];
    struct stat st;
    snprintf(path, sizeof path, "%s/out.pftrace", F.dir);
    assert_int_equal(lstat(path, &st), 0);
    assert_true(S_ISREG(st.st_mode));
    assert_int_equal(st.st_mode & 0777, 0644);
    assert_true(st.st_size > 0);
    snprintf(path, sizeof path, "%s/out.pftrace.tmp-%d", F.dir, (int)F.child);
    assert_int_equal(unlink(path), 0); /* the planted link, untouched */
    expect_no_tmp_left();

    /* -o naming a symlink: the link is replaced by the merged file, its target is unchanged */
    snprintf(path, sizeof path, "%s/link.pftrace", F.dir);
    assert_int_equal(symlink("victim", path), 0);
    const char *a2[] = {"merge", "in.pftrace", "s.ndjson", "-o", "link.pftrace", NULL};
    run_expect(a2, 0);
    expect_text("victim", "the victim's file\n");
    assert_int_equal(lstat(path, &st), 0);
    assert_true(S_ISREG(st.st_mode));
}

/* spans --cursor in a shared directory: a symlink planted at the temporary name the old code used
 * (FILE.tmp) is not followed; the cursor file is written and no temporary is left */
static void test_spans_cursor_tmp_not_followed(void **state)
{
    (void)state;
    NEED_TRACECTL();
    char url[200];
    snprintf(url, sizeof url, "unix:%s", F.sock);
    write_text("victim", "the victim's file\n");
    F.plant = "cur.txt.tmp";
    const char *a1[] = {"spans", url, "--all", "--cursor", "cur.txt", "-o", "s.ndjson", NULL};
    run_expect(a1, 0);
    F.plant = NULL;
    expect_text("victim", "the victim's file\n");
    expect_text("cur.txt", "hub 42\nedge-1 42\n");
    char path[256];
    snprintf(path, sizeof path, "%s/cur.txt.tmp", F.dir);
    assert_int_equal(unlink(path), 0); /* the planted link, untouched */
    expect_no_tmp_left();
}

/* spans --cursor against a gateway listing names outside the node name syntax: a space and a line
 * break would forge a cursor line ("forged 42"), a terminal control; they are neither fetched nor
 * written to the cursor file, and are named escaped */
static void test_spans_cursor_names_written(void **state)
{
    (void)state;
    NEED_TRACECTL();
    char url[200];
    snprintf(url, sizeof url, "unix:%s", F.sock);
    F.evil_nodes = 1;
    const char *a1[] = {"spans", url, "--all", "--cursor", "cur.txt", "-o", "s.ndjson", NULL};
    run_expect(a1, 0);
    F.evil_nodes = 0;
    expect_text("cur.txt", "hub 42\nedge-1 42\n");
    expect_in_stderr("the gateway lists a node named 'evil 5\\nforged', not a node name: skipped");
    expect_in_stderr("the gateway lists a node named 'x\\x1b[2J', not a node name: skipped");
    char *t = read_text("stderr.txt");
    assert_non_null(t);
    assert_null(strchr(t, 0x1b));
    free(t);
    expect_text("s.ndjson", "{\"span\":1}\n{\"span\":1}\n"); /* hub and edge-1 only */
}

/* a cursor file with a line that is not "NODE ID" is refused before anything is fetched, naming
 * the file and line; a good one gives each node its since_id */
static void test_spans_cursor_lines_read(void **state)
{
    (void)state;
    NEED_TRACECTL();
    char url[200];
    snprintf(url, sizeof url, "unix:%s", F.sock);
    static const char *const bad[][2] = {
        {"hub 7\nedge-1 9 forged 3\n", "line 2: not a span id"},
        {"hub 7\nevil\x1b[2J 3\n", "line 2: not a node name"},
        {"@all 3\n", "line 1: not a node name"},
        {"hub -1\n", "line 1: not a span id"},
        {"hub 99999999999999999999999\n", "line 1: not a span id"},
        {"hub\n", "line 1: not 'NODE ID'"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        write_text("cur.txt", bad[i][0]);
        F.n_calls = 0;
        const char *a1[] = {"spans", url, "--all", "--cursor", "cur.txt", "-o", "s.ndjson", NULL};
        run_expect(a1, 1);
        expect_in_stderr("tracectl spans: cursor file cur.txt ");
        expect_in_stderr(bad[i][1]);
        expect_in_stderr("fix or remove the file");
        assert_int_equal(F.n_calls, 0);
        expect_text("cur.txt", bad[i][0]); /* left as it was */
    }
    write_text("cur.txt", "edge-1 9\nhub 7\n");
    const char *a2[] = {"spans", url, "--node", "hub", "--cursor", "cur.txt", "-o", "s.ndjson", NULL};
    run_expect(a2, 0);
    assert_string_equal(F.spans_node, "hub");
    assert_int_equal(F.spans_since, 7);
    expect_text("cur.txt", "edge-1 9\nhub 42\n");
}

/* what is missing or too much is said before anything is sent; with --node and no URL the
 * operand is not taken for an endpoint: the gateway's default one is used */
static void test_operand_errors(void **state)
{
    (void)state;
    NEED_TRACECTL();
    char url[200];
    snprintf(url, sizeof url, "unix:%s", F.sock);
    const char *a1[] = {"clone", url, "7", "8", NULL};
    run_expect(a1, 2);
    expect_in_stderr("tracectl clone: too many arguments");
    const char *a2[] = {"attach", "--stop", NULL};
    run_expect(a2, 2);
    expect_in_stderr("tracectl attach: missing KEY");
    const char *a3[] = {"clone", "-o", "x.pftrace", url, "7", "8", NULL};
    run_expect(a3, 2);
    expect_in_stderr("tracectl clone: too many arguments");
    assert_int_equal(F.n_calls, 0);

    const char *a4[] = {"--node", "no-such-node", "--timeout", "3000", "clone", "7", NULL};
    run_expect(a4, 1);
    expect_in_stderr("cannot reach the tracing service at " "ws://127.0.0.1:8037/traced");
    assert_int_equal(F.n_calls, 0);
}

static void test_errors(void **state)
{
    (void)state;
    NEED_TRACECTL();
    char url[256];
    snprintf(url, sizeof url, "unix:%s/nothing-here.sock", F.dir);
    const char *a1[] = {"record", url, "--duration", "1s", NULL};
    run_expect(a1, 1);
    expect_in_stderr("cannot reach the tracing service");
    assert_false(file_exists("trace.pftrace"));

    char path[256];
    snprintf(path, sizeof path, "%s/bad.txtpb", F.dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fprintf(f, "buffers { size_kb: 1024 }\nbufers { }\n");
    fclose(f);
    snprintf(url, sizeof url, "unix:%s", F.sock);
    const char *a2[] = {"record", url, "-c", path, NULL};
    run_expect(a2, 2);
    expect_in_stderr("bad.txtpb: 2:");
    expect_in_stderr("bufers");

    const char *a3[] = {"record", url, "--buffer", "12", NULL};
    run_expect(a3, 2);
    expect_in_stderr("invalid --buffer");
    const char *a4[] = {"record", url, "--duration", "soon", NULL};
    run_expect(a4, 2);
    expect_in_stderr("invalid --duration");
    const char *a5[] = {"record", url, "--fill", "sometimes", NULL};
    run_expect(a5, 2);
    expect_in_stderr("invalid --fill");
    assert_int_equal(F.n_calls, 0); /* nothing was sent for bad input */
}

int main(void)
{
    tg_log_set_level(TG_LOG_WARN);
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_record_defaults, setup, teardown),
        cmocka_unit_test_setup_teardown(test_record_config_and_shortcuts, setup, teardown),
        cmocka_unit_test_setup_teardown(test_record_binary_config, setup, teardown),
        cmocka_unit_test_setup_teardown(test_record_session_error, setup, teardown),
        cmocka_unit_test_setup_teardown(test_record_rejected, setup, teardown),
        cmocka_unit_test_setup_teardown(test_record_ctrl_c, setup, teardown),
        cmocka_unit_test_setup_teardown(test_record_detach, setup, teardown),
        cmocka_unit_test_setup_teardown(test_attach_stop, setup, teardown),
        cmocka_unit_test_setup_teardown(test_attach_unknown_key, setup, teardown),
        cmocka_unit_test_setup_teardown(test_attach_options_first, setup, teardown),
        cmocka_unit_test_setup_teardown(test_clone, setup, teardown),
        cmocka_unit_test_setup_teardown(test_endless_reply_cut, setup, teardown),
        cmocka_unit_test_setup_teardown(test_read_beyond_buffers_cut, setup, teardown),
        cmocka_unit_test_setup_teardown(test_clone_read_bounded, setup, teardown),
        cmocka_unit_test_setup_teardown(test_output_write_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_query_names_escaped, setup, teardown),
        cmocka_unit_test_setup_teardown(test_merge_tmp_not_followed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_spans_cursor_tmp_not_followed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_spans_cursor_names_written, setup, teardown),
        cmocka_unit_test_setup_teardown(test_spans_cursor_lines_read, setup, teardown),
        cmocka_unit_test_setup_teardown(test_operand_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_errors, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
