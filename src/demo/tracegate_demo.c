/* tracegate_demo.c: tracegate-demo, an example app built on libtracegate's
 * producer API (tracegate/producer.h). It registers the "track_event" data
 * source with the categories "demo" and "rendering" and, while a tracing
 * session is active, emits TrackEvent data the way the Perfetto SDK does
 * (perfetto-wire-facts §4.9): a process track, a thread track per thread,
 * nested slices with debug annotations (DrawFrame > UpdateWorld, DrawPlayer),
 * two counter tracks (fps, queue_depth) and flows from each DrawFrame on the
 * main thread to the UploadFrame slice of a worker thread that has its own
 * trace writer. Timestamps are CLOCK_BOOTTIME nanoseconds. Works over UNIX
 * sockets (shared memory) and TCP (shmem emulation); tls:// and ws:// (a
 * gateway's /producer) go through the gateway's endpoint code (endpoint.h). */
#include <errno.h>
#include <event2/event.h>
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "config.h"
#include "counter_descriptor.pb-c.h"
#include "debug_annotation.pb-c.h"
#include "tracegate/endpoint.h"
#include "process_descriptor.pb-c.h"
#include "thread_descriptor.pb-c.h"
#include "trace_packet.pb-c.h"
#include "track_descriptor.pb-c.h"
#include "track_event.pb-c.h"
#include "tracegate/log.h"
#include "tracegate/producer.h"

#define LOG "tracegate-demo"

#define SEQ_INCREMENTAL_STATE_CLEARED 1u

struct demo_opts {
    const char *socket;
    const char *name;
    double rate;
    double duration;
    unsigned stop_delay_ms; /* draw on this long after a stop request (a data source that stops late) */
};

struct demo;

/* One running data source instance: a frame timer on the loop thread with
 * its writer, and a worker thread with its own writer. */
struct demo_inst {
    struct demo *d;
    uint64_t id;
    tg_trace_writer *main_w;
    tg_trace_writer *worker_w;
    struct event *frame_ev;
    struct event *stop_ev; /* --stop-delay: the stop, later */
    bool cat_demo, cat_rendering;
    uint64_t frame;
    bool first_main;
    /* frame rate measurement */
    uint64_t fps_window_start;
    unsigned fps_frames;
    int64_t fps;
    /* worker hand-off: frames waiting for upload */
    pthread_t worker;
    bool worker_running;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    uint64_t pending[64];
    unsigned n_pending;
    bool quit;
    struct demo_inst *next;
};

struct demo {
    struct event_base *base;
    tg_producer *p;
    struct demo_opts o;
    pid_t pid;
    pid_t main_tid;
    uint64_t process_uuid, main_uuid, fps_uuid, queue_uuid;
    struct demo_inst *insts;
    bool exiting; /* the main loop has ended: no new instance (its worker would outlive the writers) */
};

/* ---- helpers ---- */

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_BOOTTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static pid_t gettid_compat(void)
{
    return (pid_t)syscall(SYS_gettid);
}

/* Track uuids only need to be unique and non-zero. */
static uint64_t mix(uint64_t a, uint64_t b)
{
    uint64_t h = a * 0x9E3779B97F4A7C15ull ^ (b + 0x632BE59BD9B4E019ull);
    h ^= h >> 31;
    h *= 0xBF58476D1CE4E5B9ull;
    h ^= h >> 29;
    return h ? h : 1;
}

static uint64_t flow_id(const struct demo_inst *in, uint64_t frame)
{
    return mix(mix((uint64_t)in->d->pid, in->id), frame);
}

static int write_packet(tg_trace_writer *w, Perfetto__Protos__TracePacket *pkt)
{
    int rc = tg_trace_writer_write_msg(w, &pkt->base);
    if (rc == TG_TRACE_WRITER_DROPPED)
        tg_debug(LOG, "packet dropped (shared memory buffer full)");
    return rc;
}

/* Marks the first packet written after a (re)start of incremental state. */
static void mark_first(Perfetto__Protos__TracePacket *pkt, bool *first_on_seq)
{
    pkt->has_sequence_flags = 1;
    pkt->sequence_flags = SEQ_INCREMENTAL_STATE_CLEARED;
    if (*first_on_seq) {
        pkt->has_first_packet_on_sequence = 1;
        pkt->first_packet_on_sequence = 1;
        *first_on_seq = false;
    }
}

static void emit_track(tg_trace_writer *w, uint64_t ts, Perfetto__Protos__TrackDescriptor *td, bool mark,
                       bool *first_on_seq)
{
    Perfetto__Protos__TracePacket pkt = PERFETTO__PROTOS__TRACE_PACKET__INIT;
    pkt.has_timestamp = 1;
    pkt.timestamp = ts;
    pkt.data_case = PERFETTO__PROTOS__TRACE_PACKET__DATA_TRACK_DESCRIPTOR;
    pkt.track_descriptor = td;
    if (mark)
        mark_first(&pkt, first_on_seq);
    write_packet(w, &pkt);
}

/* Descriptors of the main sequence: process, main thread, counter tracks. */
static void emit_main_descriptors(struct demo_inst *in, uint64_t ts)
{
    struct demo *d = in->d;
    Perfetto__Protos__ProcessDescriptor pd = PERFETTO__PROTOS__PROCESS_DESCRIPTOR__INIT;
    pd.has_pid = 1;
    pd.pid = d->pid;
    pd.process_name = (char *)"tracegate-demo";
    Perfetto__Protos__TrackDescriptor td = PERFETTO__PROTOS__TRACK_DESCRIPTOR__INIT;
    td.has_uuid = 1;
    td.uuid = d->process_uuid;
    td.process = &pd;
    emit_track(in->main_w, ts, &td, true, &in->first_main);

    Perfetto__Protos__ThreadDescriptor th = PERFETTO__PROTOS__THREAD_DESCRIPTOR__INIT;
    th.has_pid = 1;
    th.pid = d->pid;
    th.has_tid = 1;
    th.tid = d->main_tid;
    th.thread_name = (char *)"main";
    Perfetto__Protos__TrackDescriptor tt = PERFETTO__PROTOS__TRACK_DESCRIPTOR__INIT;
    tt.has_uuid = 1;
    tt.uuid = d->main_uuid;
    tt.has_parent_uuid = 1;
    tt.parent_uuid = d->process_uuid;
    tt.thread = &th;
    emit_track(in->main_w, ts, &tt, false, NULL);

    const struct {
        uint64_t uuid;
        const char *name;
    } counters[] = {{d->fps_uuid, "fps"}, {d->queue_uuid, "queue_depth"}};
    for (size_t i = 0; i < 2; i++) {
        Perfetto__Protos__CounterDescriptor cd = PERFETTO__PROTOS__COUNTER_DESCRIPTOR__INIT;
        cd.has_unit = 1;
        cd.unit = PERFETTO__PROTOS__COUNTER_DESCRIPTOR__UNIT__UNIT_COUNT;
        char *cats[] = {(char *)"demo"};
        cd.n_categories = 1;
        cd.categories = cats;
        Perfetto__Protos__TrackDescriptor ct = PERFETTO__PROTOS__TRACK_DESCRIPTOR__INIT;
        ct.has_uuid = 1;
        ct.uuid = counters[i].uuid;
        ct.has_parent_uuid = 1;
        ct.parent_uuid = d->process_uuid;
        ct.static_or_dynamic_name_case = PERFETTO__PROTOS__TRACK_DESCRIPTOR__STATIC_OR_DYNAMIC_NAME_NAME;
        ct.name = (char *)counters[i].name;
        ct.counter = &cd;
        emit_track(in->main_w, ts, &ct, false, NULL);
    }
}

/* A TrackEvent packet; name NULL for SLICE_END. */
struct ev {
    uint64_t ts;
    uint64_t track;
    Perfetto__Protos__TrackEvent__Type type;
    const char *name;
    const char *category;
    Perfetto__Protos__DebugAnnotation **annots;
    size_t n_annots;
    uint64_t *flows, *term_flows;
    size_t n_flows, n_term_flows;
    bool has_counter;
    int64_t counter;
};

static void emit_event(tg_trace_writer *w, const struct ev *e)
{
    Perfetto__Protos__TrackEvent te = PERFETTO__PROTOS__TRACK_EVENT__INIT;
    te.has_type = 1;
    te.type = e->type;
    te.has_track_uuid = 1;
    te.track_uuid = e->track;
    char *cats[1] = {(char *)e->category};
    if (e->category) {
        te.n_categories = 1;
        te.categories = cats;
    }
    if (e->name) {
        te.name_field_case = PERFETTO__PROTOS__TRACK_EVENT__NAME_FIELD_NAME;
        te.name = (char *)e->name;
    }
    te.n_debug_annotations = e->n_annots;
    te.debug_annotations = e->annots;
    te.n_flow_ids = e->n_flows;
    te.flow_ids = e->flows;
    te.n_terminating_flow_ids = e->n_term_flows;
    te.terminating_flow_ids = e->term_flows;
    if (e->has_counter) {
        te.counter_value_field_case = PERFETTO__PROTOS__TRACK_EVENT__COUNTER_VALUE_FIELD_COUNTER_VALUE;
        te.counter_value = e->counter;
    }
    Perfetto__Protos__TracePacket pkt = PERFETTO__PROTOS__TRACE_PACKET__INIT;
    pkt.has_timestamp = 1;
    pkt.timestamp = e->ts;
    pkt.data_case = PERFETTO__PROTOS__TRACE_PACKET__DATA_TRACK_EVENT;
    pkt.track_event = &te;
    write_packet(w, &pkt);
}

static void annot_int(Perfetto__Protos__DebugAnnotation *a, const char *name, int64_t v)
{
    perfetto__protos__debug_annotation__init(a);
    a->name_field_case = PERFETTO__PROTOS__DEBUG_ANNOTATION__NAME_FIELD_NAME;
    a->name = (char *)name;
    a->value_case = PERFETTO__PROTOS__DEBUG_ANNOTATION__VALUE_INT_VALUE;
    a->int_value = v;
}

static void annot_str(Perfetto__Protos__DebugAnnotation *a, const char *name, const char *v)
{
    perfetto__protos__debug_annotation__init(a);
    a->name_field_case = PERFETTO__PROTOS__DEBUG_ANNOTATION__NAME_FIELD_NAME;
    a->name = (char *)name;
    a->value_case = PERFETTO__PROTOS__DEBUG_ANNOTATION__VALUE_STRING_VALUE;
    a->string_value = (char *)v;
}

static void annot_double(Perfetto__Protos__DebugAnnotation *a, const char *name, double v)
{
    perfetto__protos__debug_annotation__init(a);
    a->name_field_case = PERFETTO__PROTOS__DEBUG_ANNOTATION__NAME_FIELD_NAME;
    a->name = (char *)name;
    a->value_case = PERFETTO__PROTOS__DEBUG_ANNOTATION__VALUE_DOUBLE_VALUE;
    a->double_value = v;
}

/* ---- the worker thread: one UploadFrame slice per frame, ending its flow ---- */

static void *worker_main(void *arg)
{
    struct demo_inst *in = arg;
    struct demo *d = in->d;
    pid_t tid = gettid_compat();
    uint64_t uuid = mix(d->process_uuid, (uint64_t)tid);
    bool first_on_seq = true;
    for (;;) {
        pthread_mutex_lock(&in->mu);
        while (!in->quit && in->n_pending == 0)
            pthread_cond_wait(&in->cv, &in->mu);
        if (in->quit) {
            pthread_mutex_unlock(&in->mu);
            break;
        }
        uint64_t frame = in->pending[0];
        memmove(in->pending, in->pending + 1, --in->n_pending * sizeof in->pending[0]);
        pthread_mutex_unlock(&in->mu);

        uint64_t t0 = now_ns();
        if (tg_trace_writer_take_incremental_reset(in->worker_w)) {
            Perfetto__Protos__ThreadDescriptor th = PERFETTO__PROTOS__THREAD_DESCRIPTOR__INIT;
            th.has_pid = 1;
            th.pid = d->pid;
            th.has_tid = 1;
            th.tid = tid;
            th.thread_name = (char *)"worker";
            Perfetto__Protos__TrackDescriptor tt = PERFETTO__PROTOS__TRACK_DESCRIPTOR__INIT;
            tt.has_uuid = 1;
            tt.uuid = uuid;
            tt.has_parent_uuid = 1;
            tt.parent_uuid = d->process_uuid;
            tt.thread = &th;
            emit_track(in->worker_w, t0, &tt, true, &first_on_seq);
        }
        if (!in->cat_rendering)
            continue;
        uint64_t fl = flow_id(in, frame);
        Perfetto__Protos__DebugAnnotation a[2], *ap[2] = {&a[0], &a[1]};
        annot_int(&a[0], "frame", (int64_t)frame);
        annot_int(&a[1], "bytes", (int64_t)(4096 + (frame % 7) * 512));
        struct ev b = {.ts = t0, .track = uuid, .type = PERFETTO__PROTOS__TRACK_EVENT__TYPE__TYPE_SLICE_BEGIN,
                       .name = "UploadFrame", .category = "rendering", .annots = ap, .n_annots = 2,
                       .term_flows = &fl, .n_term_flows = 1};
        emit_event(in->worker_w, &b);
        /* pretend to work for ~0.5 ms */
        struct timespec nap = {0, 500000};
        nanosleep(&nap, NULL);
        struct ev e = {.ts = now_ns(), .track = uuid, .type = PERFETTO__PROTOS__TRACK_EVENT__TYPE__TYPE_SLICE_END};
        emit_event(in->worker_w, &e);
    }
    return NULL;
}

/* ---- the frame timer (loop thread) ---- */

static void frame_cb(evutil_socket_t fd, short what, void *arg)
{
    struct demo_inst *in = arg;
    struct demo *d = in->d;
    (void)fd;
    (void)what;
    uint64_t t0 = now_ns();
    if (tg_trace_writer_take_incremental_reset(in->main_w))
        emit_main_descriptors(in, t0);
    uint64_t frame = ++in->frame;
    if (frame == 1) /* scripts wait for this line: from here on the session holds data of ours */
        tg_info(LOG, "session instance %llu: first frame drawn", (unsigned long long)in->id);
    double period_ns = 1e9 / d->o.rate;
    uint64_t fl = flow_id(in, frame);

    /* fps over the last second */
    if (!in->fps_window_start)
        in->fps_window_start = t0;
    in->fps_frames++;
    if (t0 - in->fps_window_start >= 1000000000ull) {
        in->fps = (int64_t)((double)in->fps_frames * 1e9 / (double)(t0 - in->fps_window_start) + 0.5);
        in->fps_frames = 0;
        in->fps_window_start = t0;
    }

    if (in->cat_rendering) {
        Perfetto__Protos__DebugAnnotation fa, *fap[1] = {&fa};
        annot_int(&fa, "frame", (int64_t)frame);
        struct ev b = {.ts = t0, .track = d->main_uuid, .type = PERFETTO__PROTOS__TRACK_EVENT__TYPE__TYPE_SLICE_BEGIN,
                       .name = "DrawFrame", .category = "rendering", .annots = fap, .n_annots = 1, .flows = &fl,
                       .n_flows = 1};
        emit_event(in->main_w, &b);
    }
    if (in->cat_demo) {
        Perfetto__Protos__DebugAnnotation ua, *uap[1] = {&ua};
        annot_int(&ua, "entities", (int64_t)(100 + frame % 50));
        struct ev b = {.ts = t0 + (uint64_t)(period_ns * 0.05), .track = d->main_uuid,
                       .type = PERFETTO__PROTOS__TRACK_EVENT__TYPE__TYPE_SLICE_BEGIN, .name = "UpdateWorld",
                       .category = "demo", .annots = uap, .n_annots = 1};
        emit_event(in->main_w, &b);
        struct ev e = {.ts = t0 + (uint64_t)(period_ns * 0.25), .track = d->main_uuid,
                       .type = PERFETTO__PROTOS__TRACK_EVENT__TYPE__TYPE_SLICE_END};
        emit_event(in->main_w, &e);
    }
    if (in->cat_rendering) {
        Perfetto__Protos__DebugAnnotation pa[2], *pap[2] = {&pa[0], &pa[1]};
        annot_str(&pa[0], "player", "hero");
        annot_double(&pa[1], "x", (double)(frame % 640) * 1.5);
        struct ev b = {.ts = t0 + (uint64_t)(period_ns * 0.30), .track = d->main_uuid,
                       .type = PERFETTO__PROTOS__TRACK_EVENT__TYPE__TYPE_SLICE_BEGIN, .name = "DrawPlayer",
                       .category = "rendering", .annots = pap, .n_annots = 2};
        emit_event(in->main_w, &b);
        struct ev e = {.ts = t0 + (uint64_t)(period_ns * 0.55), .track = d->main_uuid,
                       .type = PERFETTO__PROTOS__TRACK_EVENT__TYPE__TYPE_SLICE_END};
        emit_event(in->main_w, &e);
        struct ev e2 = {.ts = t0 + (uint64_t)(period_ns * 0.60), .track = d->main_uuid,
                        .type = PERFETTO__PROTOS__TRACK_EVENT__TYPE__TYPE_SLICE_END};
        emit_event(in->main_w, &e2);
    }

    /* hand the frame to the worker (its UploadFrame ends the flow) */
    unsigned depth;
    pthread_mutex_lock(&in->mu);
    if (in->n_pending < sizeof in->pending / sizeof in->pending[0])
        in->pending[in->n_pending++] = frame;
    depth = in->n_pending;
    pthread_cond_signal(&in->cv);
    pthread_mutex_unlock(&in->mu);

    if (in->cat_demo) {
        struct ev c1 = {.ts = t0, .track = d->fps_uuid, .type = PERFETTO__PROTOS__TRACK_EVENT__TYPE__TYPE_COUNTER,
                        .has_counter = true, .counter = in->fps ? in->fps : (int64_t)(d->o.rate + 0.5)};
        emit_event(in->main_w, &c1);
        struct ev c2 = {.ts = t0, .track = d->queue_uuid, .type = PERFETTO__PROTOS__TRACK_EVENT__TYPE__TYPE_COUNTER,
                        .has_counter = true, .counter = depth};
        emit_event(in->main_w, &c2);
    }
}

/* ---- data source callbacks ---- */

static void inst_stop(struct demo *d, struct demo_inst *in)
{
    if (in->stop_ev) {
        event_free(in->stop_ev);
        in->stop_ev = NULL;
    }
    if (in->frame_ev) {
        event_free(in->frame_ev);
        in->frame_ev = NULL;
    }
    if (in->worker_running) {
        pthread_mutex_lock(&in->mu);
        in->quit = true;
        pthread_cond_signal(&in->cv);
        pthread_mutex_unlock(&in->mu);
        pthread_join(in->worker, NULL);
        in->worker_running = false;
    }
    /* Destroying a writer commits what it still holds. */
    tg_trace_writer_destroy(in->worker_w);
    tg_trace_writer_destroy(in->main_w);
    in->worker_w = in->main_w = NULL;
    for (struct demo_inst **pp = &d->insts; *pp; pp = &(*pp)->next) {
        if (*pp == in) {
            *pp = in->next;
            break;
        }
    }
    pthread_mutex_destroy(&in->mu);
    pthread_cond_destroy(&in->cv);
    tg_info(LOG, "session instance %llu stopped after %llu frames", (unsigned long long)in->id,
            (unsigned long long)in->frame);
    free(in);
}

static void on_start(tg_producer *p, uint64_t id, const struct tg_data_source_config *cfg, void *arg)
{
    struct demo *d = arg;
    if (d->exiting) {
        tg_info(LOG, "session instance %llu: not started, exiting", (unsigned long long)id);
        return;
    }
    struct demo_inst *in = calloc(1, sizeof *in);
    if (!in)
        return;
    in->d = d;
    in->id = id;
    in->first_main = true;
    in->cat_demo = tg_data_source_config_category_enabled(cfg, "demo");
    in->cat_rendering = tg_data_source_config_category_enabled(cfg, "rendering");
    pthread_mutex_init(&in->mu, NULL);
    pthread_cond_init(&in->cv, NULL);
    in->next = d->insts;
    d->insts = in;
    in->main_w = tg_producer_create_writer(p, id);
    in->worker_w = tg_producer_create_writer(p, id);
    if (!in->main_w || !in->worker_w) {
        tg_warn(LOG, "cannot create trace writers for instance %llu", (unsigned long long)id);
        inst_stop(d, in);
        return;
    }
    if (pthread_create(&in->worker, NULL, worker_main, in) == 0)
        in->worker_running = true;
    in->frame_ev = event_new(d->base, -1, EV_PERSIST, frame_cb, in);
    double period = 1.0 / d->o.rate;
    struct timeval tv = {(time_t)period, (suseconds_t)((period - (double)(time_t)period) * 1e6)};
    if (tv.tv_sec == 0 && tv.tv_usec == 0)
        tv.tv_usec = 1;
    event_add(in->frame_ev, &tv);
    tg_info(LOG, "session instance %llu started (buffer %u, categories: demo %s, rendering %s)",
            (unsigned long long)id, cfg->target_buffer, in->cat_demo ? "on" : "off",
            in->cat_rendering ? "on" : "off");
}

/* --stop-delay: the delay is over: stop drawing, commit, and tell the service. */
static void delayed_stop_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct demo_inst *in = arg;
    struct demo *d = in->d;
    uint64_t id = in->id;
    inst_stop(d, in);
    tg_producer_stop_done(d->p, id);
}

static void on_stop(tg_producer *p, uint64_t id, void *arg)
{
    struct demo *d = arg;
    for (struct demo_inst *in = d->insts; in; in = in->next) {
        if (in->id != id)
            continue;
        if (d->o.stop_delay_ms && !in->stop_ev && (in->stop_ev = evtimer_new(d->base, delayed_stop_cb, in))) {
            struct timeval tv = {(time_t)(d->o.stop_delay_ms / 1000u), (suseconds_t)(d->o.stop_delay_ms % 1000u) * 1000};
            tg_producer_stop_later(p, id); /* frames go on until the timer; then stop_done */
            evtimer_add(in->stop_ev, &tv);
            tg_info(LOG, "session instance %llu: stopping in %u ms", (unsigned long long)id, d->o.stop_delay_ms);
            return;
        }
        if (!in->stop_ev)
            inst_stop(d, in);
        return;
    }
}

static void on_connected(tg_producer *p, void *arg)
{
    (void)arg;
    tg_info(LOG, "registered with the tracing service at %s%s", tg_producer_socket(p),
            tg_producer_emulation(p) ? " (TCP, shmem emulation)" : "");
}

static void on_disconnected(tg_producer *p, const char *reason, void *arg)
{
    (void)arg;
    tg_debug(LOG, "not connected to %s: %s (retrying)", tg_producer_socket(p), reason);
}

/* ---- main ---- */

/* tg_producer_opts.connect for tls://, ws:// and wss:// endpoints. */
static tg_ipc_client *endpoint_connect(struct event_base *base, const char *socket,
                                       const struct tg_ipc_client_cbs *cbs, void *cbs_arg, void *connect_arg,
                                       char *err, size_t errlen)
{
    (void)socket;
    return tg_endpoint_connect(base, connect_arg, NULL, cbs, cbs_arg, err, errlen);
}

static void usage(FILE *out)
{
    fprintf(out,
            "usage: tracegate-demo [options]\n\n"
            "A demo app that writes TrackEvent data (slices, counters, flows) to a Perfetto-compatible\n"
            "tracing service while a session enables the \"track_event\" data source.\n\n"
            "options:\n"
            "  --producer-socket ADDR  producer socket (default: $PERFETTO_PRODUCER_SOCK_NAME or\n"
            "                          Perfetto's default); host:port = TCP (shmem emulation);\n"
            "                          also unix:PATH, tcp://, tls://HOST:PORT, ws://HOST:PORT/producer\n"
            "  --name NAME             producer name (default: tracegate-demo)\n"
            "  --rate N                frames per second (default 60)\n"
            "  --duration S            exit after S seconds (default 0 = run until killed)\n"
            "  --stop-delay MS         go on drawing for MS after the service asks to stop, then\n"
            "                          stop (a data source that stops late; default 0)\n"
            "  --log-level LEVEL       debug, info, warn or error (default info)\n"
            "  -h, --help              this help\n"
            "  --version               print the version\n");
}

static void on_signal(evutil_socket_t sig, short what, void *arg)
{
    (void)sig;
    (void)what;
    event_base_loopexit(arg, NULL);
}

static void on_duration(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    tg_info(LOG, "duration reached, exiting");
    event_base_loopexit(arg, NULL);
}

int main(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"producer-socket", required_argument, NULL, 'p'},
        {"name", required_argument, NULL, 'n'},
        {"rate", required_argument, NULL, 'r'},
        {"duration", required_argument, NULL, 'd'},
        {"stop-delay", required_argument, NULL, 's'},
        {"log-level", required_argument, NULL, 'l'},
        {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, 'V'},
        {NULL, 0, NULL, 0},
    };
    struct demo d;
    memset(&d, 0, sizeof d);
    d.o.name = "tracegate-demo";
    d.o.rate = 60;
    int c;
    char *end;
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (c) {
        case 'p': d.o.socket = optarg; break;
        case 'n': d.o.name = optarg; break;
        case 'r':
            d.o.rate = strtod(optarg, &end);
            if (*end || !(d.o.rate > 0 && d.o.rate <= 10000)) {
                fprintf(stderr, "tracegate-demo: --rate must be in (0, 10000]\n");
                return 2;
            }
            break;
        case 'd':
            d.o.duration = strtod(optarg, &end);
            if (*end || !(d.o.duration >= 0)) {
                fprintf(stderr, "tracegate-demo: --duration must be >= 0\n");
                return 2;
            }
            break;
        case 's': {
            unsigned long v = strtoul(optarg, &end, 10);
            if (*end || v > 60000) {
                fprintf(stderr, "tracegate-demo: --stop-delay must be 0..60000 (ms)\n");
                return 2;
            }
            d.o.stop_delay_ms = (unsigned)v;
            break;
        }
        case 'l': {
            int lv = tg_log_level_from_string(optarg);
            if (lv < 0) {
                fprintf(stderr, "tracegate-demo: unknown log level '%s'\n", optarg);
                return 2;
            }
            tg_log_set_level((enum tg_log_level)lv);
            break;
        }
        case 'h': usage(stdout); return 0;
        case 'V': printf("tracegate-demo %s\n", PACKAGE_VERSION); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind < argc) {
        usage(stderr);
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);

    d.base = event_base_new();
    if (!d.base)
        return 1;
    d.pid = getpid();
    d.main_tid = gettid_compat();
    d.process_uuid = mix(0x7472616365676174ull, (uint64_t)d.pid);
    d.main_uuid = mix(d.process_uuid, (uint64_t)d.main_tid);
    d.fps_uuid = mix(d.process_uuid, 0xf95);
    d.queue_uuid = mix(d.process_uuid, 0x9d);

    struct tg_producer_opts po = {0};
    po.socket = d.o.socket;
    struct tg_endpoint ep;
    if (d.o.socket && (strstr(d.o.socket, "://") || strncmp(d.o.socket, "unix:", 5) == 0)) { /* endpoint.h URL */
        char eerr[256];
        if (tg_endpoint_parse(d.o.socket, &ep, eerr, sizeof eerr) != 0) {
            fprintf(stderr, "tracegate-demo: %s\n", eerr);
            event_base_free(d.base);
            return 2;
        }
        if (ep.kind == TG_EP_UNIX || ep.kind == TG_EP_TCP) {
            po.socket = ep.address; /* a Perfetto address: the library connects itself */
        } else {
            po.connect = endpoint_connect;
            po.connect_arg = &ep;
        }
    }
    po.name = d.o.name;
    po.reconnect = true;
    po.on_connected = on_connected;
    po.on_disconnected = on_disconnected;
    po.cb_arg = &d;
    char err[256];
    d.p = tg_producer_new(d.base, &po, err, sizeof err);
    if (!d.p) {
        fprintf(stderr, "tracegate-demo: %s\n", err);
        event_base_free(d.base);
        return 1;
    }
    static const struct tg_track_event_category cats[] = {
        {"demo", "tracegate demo: world updates and counters", NULL, 0},
        {"rendering", "tracegate demo: frame drawing and uploads", NULL, 0},
    };
    struct tg_data_source_desc ds = {0};
    ds.name = "track_event";
    ds.categories = cats;
    ds.n_categories = 2;
    ds.will_notify_on_start = true;
    ds.will_notify_on_stop = true;
    ds.handles_incremental_state_clear = true;
    ds.cbs.on_start = on_start;
    ds.cbs.on_stop = on_stop;
    ds.cb_arg = &d;
    if (tg_producer_register_data_source(d.p, &ds) != 0) {
        fprintf(stderr, "tracegate-demo: cannot register the data source\n");
        return 1;
    }
    tg_info(LOG, "producer \"%s\" on %s, %.0f frames/s", d.o.name, tg_producer_socket(d.p), d.o.rate);

    struct event *sigint = evsignal_new(d.base, SIGINT, on_signal, d.base);
    struct event *sigterm = evsignal_new(d.base, SIGTERM, on_signal, d.base);
    evsignal_add(sigint, NULL);
    evsignal_add(sigterm, NULL);
    struct event *dur = NULL;
    if (d.o.duration > 0) {
        dur = evtimer_new(d.base, on_duration, d.base);
        struct timeval tv = {(time_t)d.o.duration,
                             (suseconds_t)((d.o.duration - (double)(time_t)d.o.duration) * 1e6)};
        evtimer_add(dur, &tv);
    }

    event_base_dispatch(d.base);

    /* Commit what the writers hold, give the loop a moment to send it. A session that starts the
     * data source meanwhile gets no instance: its worker thread would outlive the writers. */
    d.exiting = true;
    while (d.insts)
        inst_stop(&d, d.insts);
    tg_producer_commit_now(d.p);
    struct timeval grace = {0, 200000};
    event_base_loopexit(d.base, &grace);
    event_base_dispatch(d.base);

    tg_producer_free(d.p);
    event_base_loop(d.base, EVLOOP_NONBLOCK); /* let the connection close */
    if (dur)
        event_free(dur);
    event_free(sigint);
    event_free(sigterm);
    event_base_free(d.base);
    return 0;
}
