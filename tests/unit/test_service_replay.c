/* test_service_replay.c: replays the interop recordings of real Perfetto clients
 * (../shared/interop/recordings) against tracegate's service and checks that it
 * answers the way traced did: method tables and ids, success/has_more
 * patterns, the rewritten DataSourceConfig bytes, the deferred EnableTracing
 * reply, and ReadBuffers output carrying the same producer payloads, sequence
 * ids and trusted fields, with the service packets in traced's order. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "test_service_util.h"
#include "tg_test_util.h"

#include "base/clock_anchor.h"
#include "tracegate/ipc_wire.h"
#include "tracegate/pbwire.h"

#include "producer_port.pb-c.h"
#include "tracing_service_state.pb-c.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ------------------------------------------------------------ recordings */

enum { IT_FRAME = 0, IT_SMB = 1 };

struct item {
    int kind;
    uint8_t *data; /* frame body (no header) or SMB snapshot */
    size_t len;
    int has_fd;
    struct tg_frame_info fi;
};

struct rec {
    struct tg_recording raw;
    struct item *c2s; /* client frames and SMB snapshots in order */
    size_t n_c2s;
    struct item *s2c;
    size_t n_s2c;
};

static void push_item(struct item **v, size_t *n, struct item it)
{
    *v = realloc(*v, (*n + 1) * sizeof **v);
    (*v)[(*n)++] = it;
}

static int rec_load(const char *name, struct rec *r)
{
    memset(r, 0, sizeof *r);
    const char *dir = tg_test_recordings_dir();
    if (!dir)
        return -1;
    char path[1024];
    snprintf(path, sizeof path, "%s/%s.bin", dir, name);
    if (tg_recording_load(path, &r->raw) != 0)
        return -1;
    tg_frame_reader *fr[2] = {tg_frame_reader_new(4u << 20), tg_frame_reader_new(4u << 20)};
    for (size_t i = 0; i < r->raw.n_recs; i++) {
        const struct tg_rec_record *rr = &r->raw.recs[i];
        if (rr->dir == TG_REC_SMB) {
            struct item it = {.kind = IT_SMB, .len = rr->len};
            it.data = malloc(rr->len);
            memcpy(it.data, rr->data, rr->len);
            push_item(&r->c2s, &r->n_c2s, it);
            continue;
        }
        int d = rr->dir;
        tg_frame_reader_feed(fr[d], rr->data, rr->len);
        const uint8_t *body;
        size_t len;
        int first = 1;
        while (tg_frame_reader_next(fr[d], &body, &len) == TG_FRAME_READY) {
            struct item it = {.kind = IT_FRAME, .len = len, .has_fd = first && rr->nfds};
            it.data = malloc(len ? len : 1);
            memcpy(it.data, body, len);
            tg_frame_scan(it.data, it.len, &it.fi);
            if (d == TG_REC_C2S)
                push_item(&r->c2s, &r->n_c2s, it);
            else
                push_item(&r->s2c, &r->n_s2c, it);
            first = 0;
        }
    }
    tg_frame_reader_free(fr[0]);
    tg_frame_reader_free(fr[1]);
    return 0;
}

static void rec_free(struct rec *r)
{
    for (size_t i = 0; i < r->n_c2s; i++)
        free(r->c2s[i].data);
    for (size_t i = 0; i < r->n_s2c; i++)
        free(r->s2c[i].data);
    free(r->c2s);
    free(r->s2c);
    tg_recording_free(&r->raw);
}

/* The n-th (0-based) client frame with request id rid. */
static const struct item *c2s_frame(const struct rec *r, uint64_t rid)
{
    for (size_t i = 0; i < r->n_c2s; i++)
        if (r->c2s[i].kind == IT_FRAME && r->c2s[i].fi.request_id == rid)
            return &r->c2s[i];
    return NULL;
}

static const struct item *s2c_frame(const struct rec *r, uint64_t rid, size_t nth)
{
    for (size_t i = 0; i < r->n_s2c; i++)
        if (r->s2c[i].fi.request_id == rid && nth-- == 0)
            return &r->s2c[i];
    return NULL;
}

static void send_item(struct ts_env *e, struct ts_raw *raw, const struct item *it, int fd)
{
    assert_non_null(it);
    assert_int_equal(ts_raw_send_frame(e, raw, it->data, it->len, fd), 0);
}

/* ---- bind tables ---- */

struct mlist {
    char names[32][64];
    uint32_t ids[32];
    size_t n;
};

static void mlist_add(void *arg, uint32_t id, const char *name, size_t len)
{
    struct mlist *m = arg;
    if (m->n < 32) {
        snprintf(m->names[m->n], sizeof m->names[0], "%.*s", (int)len, name);
        m->ids[m->n++] = id;
    }
}

static void assert_same_bind(const struct ts_frame *ours, const struct item *recorded)
{
    assert_non_null(recorded);
    assert_int_equal(ours->fi.msg, TG_MSG_BIND_SERVICE_REPLY);
    struct mlist a = {0}, b = {0};
    int sa = 0, sb = 0;
    uint32_t ida = 0, idb = 0;
    assert_int_equal(tg_ipc_parse_bind_reply(ours->fi.msg_data, ours->fi.msg_len, &sa, &ida, mlist_add, &a), 0);
    assert_int_equal(
        tg_ipc_parse_bind_reply(recorded->fi.msg_data, recorded->fi.msg_len, &sb, &idb, mlist_add, &b), 0);
    assert_int_equal(sa, sb);
    assert_int_equal(ida, idb);
    assert_int_equal(a.n, b.n);
    for (size_t i = 0; i < a.n; i++) {
        assert_int_equal(a.ids[i], b.ids[i]);
        assert_string_equal(a.names[i], b.names[i]);
    }
}

static void assert_payload_equal(const struct ts_frame *ours, const struct item *recorded)
{
    assert_non_null(recorded);
    assert_int_equal(ours->fi.success, recorded->fi.success);
    assert_int_equal(ours->fi.has_more, recorded->fi.has_more);
    if (ours->fi.payload_len != recorded->fi.payload_len ||
        (ours->fi.payload_len && memcmp(ours->fi.payload, recorded->fi.payload, ours->fi.payload_len) != 0)) {
        fprintf(stderr, "payload differs for request %llu:\n ours:", (unsigned long long)ours->fi.request_id);
        for (size_t i = 0; i < ours->fi.payload_len; i++)
            fprintf(stderr, " %02x", ours->fi.payload[i]);
        fprintf(stderr, "\n  rec:");
        for (size_t i = 0; i < recorded->fi.payload_len; i++)
            fprintf(stderr, " %02x", recorded->fi.payload[i]);
        fprintf(stderr, "\n");
    }
    assert_int_equal(ours->fi.payload_len, recorded->fi.payload_len);
    if (ours->fi.payload_len)
        assert_memory_equal(ours->fi.payload, recorded->fi.payload, ours->fi.payload_len);
}

/* ---- traces ---- */

/* Kind of a packet: 1 for producer data (has a trusted slice), 1000 + event
 * field for service events, else the payload field number. */
static int pkt_kind(const struct ts_packet *p)
{
    if (p->trusted)
        return 1;
    static const uint32_t kinds[] = {6, 33, 35, 36, 45, 46, 89, 107, 124};
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
        const uint8_t *d;
        size_t l;
        if (ts_pkt_bytes(p->data, p->len, kinds[i], &d, &l))
            return (int)kinds[i];
    }
    const uint8_t *ev;
    size_t evl;
    if (ts_pkt_bytes(p->data, p->len, 69, &ev, &evl)) {
        struct tg_pb_reader r;
        struct tg_pb_field f;
        tg_pb_reader_init(&r, ev, evl);
        if (tg_pb_next(&r, &f) == 1)
            return 1000 + (int)f.number;
    }
    return 0;
}

/* Sequence of kinds with runs of producer packets collapsed, provenance and clock anchors
 * dropped. */
static size_t kinds_of(const struct ts_trace *t, int *out, size_t cap)
{
    size_t n = 0;
    for (size_t i = 0; i < t->n && n < cap; i++) {
        int k = pkt_kind(&t->pk[i]);
        if (k == 124 || (!t->pk[i].trusted && tg_clock_anchor_is(t->pk[i].data, t->pk[i].len)))
            continue;
        if (k == 1 && n && out[n - 1] == 1)
            continue;
        out[n++] = k;
    }
    return n;
}

static void assert_same_kinds(const struct ts_trace *ours, const struct ts_trace *rec)
{
    int a[256], b[256];
    size_t na = kinds_of(ours, a, 256), nb = kinds_of(rec, b, 256);
    if (na != nb || memcmp(a, b, na * sizeof a[0]) != 0) {
        fprintf(stderr, "packet kinds differ:\n ours:");
        for (size_t i = 0; i < na; i++)
            fprintf(stderr, " %d", a[i]);
        fprintf(stderr, "\n  rec:");
        for (size_t i = 0; i < nb; i++)
            fprintf(stderr, " %d", b[i]);
        fprintf(stderr, "\n");
    }
    assert_int_equal(na, nb);
    assert_memory_equal(a, b, na * sizeof a[0]);
}

/* Producer packets (without the trusted slice) must match one for one. */
static void assert_same_producer_payloads(const struct ts_trace *ours, const struct ts_trace *rec)
{
    size_t i = 0, j = 0, n = 0;
    for (;;) {
        while (i < ours->n && !ours->pk[i].trusted)
            i++;
        while (j < rec->n && !rec->pk[j].trusted)
            j++;
        if (i >= ours->n || j >= rec->n)
            break;
        const struct ts_packet *a = &ours->pk[i++], *b = &rec->pk[j++];
        assert_int_equal(a->len - a->trusted_len, b->len - b->trusted_len);
        assert_memory_equal(a->data, b->data, a->len - a->trusted_len);
        n++;
    }
    while (i < ours->n && !ours->pk[i].trusted)
        i++;
    while (j < rec->n && !rec->pk[j].trusted)
        j++;
    assert_int_equal(i, ours->n);
    assert_int_equal(j, rec->n);
    assert_true(n > 0);
}

static void assert_same_field(const struct ts_trace *ours, const struct ts_trace *rec, uint32_t field)
{
    const uint8_t *a = NULL, *b = NULL;
    size_t la = 0, lb = 0;
    for (size_t i = 0; i < ours->n && !a; i++)
        if (!ours->pk[i].trusted)
            ts_pkt_bytes(ours->pk[i].data, ours->pk[i].len, field, &a, &la);
    for (size_t i = 0; i < rec->n && !b; i++)
        if (!rec->pk[i].trusted)
            ts_pkt_bytes(rec->pk[i].data, rec->pk[i].len, field, &b, &lb);
    assert_non_null(a);
    assert_non_null(b);
    assert_int_equal(la, lb);
    assert_memory_equal(a, b, la);
}

static void recorded_trace(const struct rec *r, uint64_t rid, struct ts_trace *t, size_t *replies)
{
    struct ts_packet partial;
    memset(&partial, 0, sizeof partial);
    *replies = 0;
    for (size_t k = 0;; k++) {
        const struct item *it = s2c_frame(r, rid, k);
        if (!it)
            break;
        (*replies)++;
        assert_int_equal(ts_trace_add_reply(t, it->fi.payload, it->fi.payload_len, &partial), 0);
    }
    free(partial.data);
    free(partial.trusted);
}

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* Waits for the next async command on a raw producer (request id rid). */
static Perfetto__Protos__GetAsyncCommandResponse *next_cmd(struct ts_env *e, struct ts_raw *p, uint64_t rid,
                                                           struct ts_frame *f, int timeout_ms)
{
    if (!ts_raw_wait(e, p, rid, f, timeout_ms))
        return NULL;
    assert_true(f->fi.success);
    assert_true(f->fi.has_more);
    return perfetto__protos__get_async_command_response__unpack(NULL, f->fi.payload_len, f->fi.payload);
}

static void send_notify_stopped(struct ts_env *e, struct ts_raw *p, uint64_t rid, uint64_t inst)
{
    Perfetto__Protos__NotifyDataSourceStoppedRequest rq = PERFETTO__PROTOS__NOTIFY_DATA_SOURCE_STOPPED_REQUEST__INIT;
    rq.has_data_source_id = 1;
    rq.data_source_id = inst;
    assert_int_equal(ts_raw_invoke(e, p, rid, 1, TS_P_NOTIFY_STOPPED, &rq.base, 1, -1), 0);
}

struct raw_count {
    struct ts_raw *r;
    uint64_t rid;
    size_t n;
};
static int raw_has_count(void *arg)
{
    struct raw_count *w = arg;
    return ts_raw_count(w->r, w->rid) >= w->n;
}

/* Runs throwaway sessions so that the next session, buffer and data source
 * instance ids match the recording (traced had run earlier sessions). */
static void burn_sessions(struct ts_env *e, struct ts_raw *prod, uint64_t async_rid, int n, int all_machines)
{
    for (int i = 0; i < n; i++) {
        struct ts_cons c;
        assert_int_equal(ts_cons_connect(e, &c), 0);
        struct ts_cfg cfg;
        ts_cfg_init(&cfg, 64, 0, prod ? "track_event" : NULL, 0);
        if (all_machines) {
            cfg.tc.has_trace_all_machines = 1;
            cfg.tc.trace_all_machines = 1;
        }
        assert_true(ts_cons_enable(&c, &cfg.tc, -1) != 0);
        assert_int_equal(ts_cons_call(&c, TS_C_FREE, NULL, NULL, 5000), 1);
        ts_cons_close(&c);
        assert_true(ts_wait_svc_count(e, TS_SVC_SESSIONS, 0, 5000));
    }
    if (prod) {
        /* every command of the burnt sessions reached the producer before the drain (SetupTracing
         * once, then SetupDataSource, StartDataSource and StopDataSource per session), so none
         * arrives later among the recorded session's */
        struct raw_count rc = {prod, async_rid, 1 + 3 * (size_t)n};
        assert_true(ts_pump_until(e, raw_has_count, &rc, 5000));
        struct ts_frame f;
        while (ts_raw_take(prod, async_rid, &f))
            ts_frame_free(&f);
    }
}

/* ------------------------------------------------------------ tests */

static int have_recordings(void)
{
    if (!tg_test_recordings_dir()) {
        skip();
        return 0;
    }
    return 1;
}

/* producer_unix_smb + consumer_record_smb_producer */
static void test_replay_unix_smb(void **state)
{
    (void)state;
    if (!have_recordings())
        return;
    struct rec pr, cr;
    assert_int_equal(rec_load("producer_unix_smb", &pr), 0);
    assert_int_equal(rec_load("consumer_record_smb_producer", &cr), 0);
    struct ts_env e;
    assert_int_equal(ts_env_init(&e), 0);
    struct ts_raw P, C;
    assert_int_equal(ts_raw_open(&e, &P, 1, 0), 0);
    assert_int_equal(ts_raw_open(&e, &C, 0, 0), 0);
    struct ts_frame f;

    /* producer: bind, InitializeConnection + GetAsyncCommand, RegisterDataSource */
    send_item(&e, &P, c2s_frame(&pr, 1), -1);
    assert_true(ts_raw_wait(&e, &P, 1, &f, 5000));
    assert_same_bind(&f, s2c_frame(&pr, 1, 0));
    ts_frame_free(&f);
    send_item(&e, &P, c2s_frame(&pr, 2), -1);
    send_item(&e, &P, c2s_frame(&pr, 3), -1);
    assert_true(ts_raw_wait(&e, &P, 2, &f, 5000));
    assert_payload_equal(&f, s2c_frame(&pr, 2, 0)); /* use_shmem_emulation: false */
    ts_frame_free(&f);
    send_item(&e, &P, c2s_frame(&pr, 4), -1);
    assert_true(ts_raw_wait(&e, &P, 4, &f, 5000));
    assert_payload_equal(&f, s2c_frame(&pr, 4, 0));
    ts_frame_free(&f);

    /* consumer: bind and EnableTracing */
    send_item(&e, &C, c2s_frame(&cr, 1), -1);
    assert_true(ts_raw_wait(&e, &C, 1, &f, 5000));
    assert_same_bind(&f, s2c_frame(&cr, 1, 0));
    ts_frame_free(&f);
    uint64_t t0 = now_ms();
    send_item(&e, &C, c2s_frame(&cr, 2), -1);

    /* SetupTracing with the SMB fd, then Setup/StartDataSource, byte for byte */
    Perfetto__Protos__GetAsyncCommandResponse *cmd;
    cmd = next_cmd(&e, &P, 3, &f, 5000);
    assert_non_null(cmd);
    assert_int_equal(cmd->cmd_case, PERFETTO__PROTOS__GET_ASYNC_COMMAND_RESPONSE__CMD_SETUP_TRACING);
    assert_payload_equal(&f, s2c_frame(&pr, 3, 0));
    assert_true(f.fd >= 0);
    struct stat sb;
    assert_int_equal(fstat(f.fd, &sb), 0);
    assert_int_equal(sb.st_size, 256 * 1024);
    uint8_t *map = mmap(NULL, (size_t)sb.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, f.fd, 0);
    assert_true(map != MAP_FAILED);
    perfetto__protos__get_async_command_response__free_unpacked(cmd, NULL);
    ts_frame_free(&f);
    for (size_t k = 1; k <= 2; k++) {
        cmd = next_cmd(&e, &P, 3, &f, 5000);
        assert_non_null(cmd);
        assert_payload_equal(&f, s2c_frame(&pr, 3, k));
        perfetto__protos__get_async_command_response__free_unpacked(cmd, NULL);
        ts_frame_free(&f);
    }

    /* the rest of the producer's frames, laying each SMB snapshot into our SMB */
    size_t start = (size_t)(c2s_frame(&pr, 5) - pr.c2s);
    for (size_t i = 0; i < pr.n_c2s; i++) {
        const struct item *it = &pr.c2s[i];
        if (it->kind == IT_SMB && i > start) {
            memcpy(map, it->data, it->len < (size_t)sb.st_size ? it->len : (size_t)sb.st_size);
        } else if (it->kind == IT_FRAME && it->fi.request_id >= 5) {
            send_item(&e, &P, it, -1);
        }
    }
    /* the duration ends: the data source is stopped and acknowledges it */
    cmd = next_cmd(&e, &P, 3, &f, 8000);
    assert_non_null(cmd);
    assert_int_equal(cmd->cmd_case, PERFETTO__PROTOS__GET_ASYNC_COMMAND_RESPONSE__CMD_STOP_DATA_SOURCE);
    assert_int_equal(cmd->stop_data_source->instance_id, 1);
    perfetto__protos__get_async_command_response__free_unpacked(cmd, NULL);
    ts_frame_free(&f);
    send_notify_stopped(&e, &P, 100, 1);

    /* deferred EnableTracing reply: {disabled: true}, after the 2.5 s duration */
    assert_true(ts_raw_wait(&e, &C, 2, &f, 8000));
    assert_true(tg_test_waited(t0, 2500)); /* the session's duration */
    assert_payload_equal(&f, s2c_frame(&cr, 2, 0));
    ts_frame_free(&f);

    /* ReadBuffers */
    send_item(&e, &C, c2s_frame(&cr, 3), -1);
    struct ts_trace ours = {0}, recd = {0};
    struct ts_packet partial = {0};
    for (;;) {
        assert_true(ts_raw_wait(&e, &C, 3, &f, 5000));
        assert_true(f.fi.success);
        ours.replies++;
        assert_int_equal(ts_trace_add_reply(&ours, f.fi.payload, f.fi.payload_len, &partial), 0);
        int more = f.fi.has_more;
        ts_frame_free(&f);
        if (!more)
            break;
    }
    size_t rec_replies = 0;
    recorded_trace(&cr, 3, &recd, &rec_replies);
    assert_int_equal(ours.replies, rec_replies);
    assert_same_producer_payloads(&ours, &recd);
    assert_same_kinds(&ours, &recd);
    assert_same_field(&ours, &recd, 33); /* trace config echo */
    assert_same_field(&ours, &recd, 89); /* trace_uuid from the config */
    assert_same_field(&ours, &recd, 36); /* sync marker */
    assert_true(ts_trace_count(&ours, "DrawGame", 8) >= 1);
    assert_true(ts_trace_count(&ours, "DrawPlayer", 10) >= 1);
    /* trusted fields: our uid, sequence 2, the producer's pid; first packet dropped-flag */
    int first = 1;
    for (size_t i = 0; i < ours.n; i++) {
        const struct ts_packet *p = &ours.pk[i];
        if (!p->trusted)
            continue;
        uint64_t v;
        assert_true(ts_pkt_varint(p->trusted, p->trusted_len, 3, &v));
        assert_int_equal(v, (uint64_t)getuid());
        assert_true(ts_pkt_varint(p->trusted, p->trusted_len, 10, &v));
        assert_int_equal(v, 2);
        assert_true(ts_pkt_varint(p->trusted, p->trusted_len, 79, &v));
        assert_int_equal(v, (uint64_t)getpid());
        assert_false(ts_pkt_has(p->trusted, p->trusted_len, 98));
        assert_int_equal(ts_pkt_has(p->trusted, p->trusted_len, 42), first);
        first = 0;
    }
    /* service packets: trusted_uid and sequence 1 */
    for (size_t i = 0; i < ours.n; i++) {
        const struct ts_packet *p = &ours.pk[i];
        uint64_t v;
        if (p->trusted)
            continue;
        assert_true(ts_pkt_varint(p->data, p->len, 10, &v));
        assert_int_equal(v, 1);
        assert_true(ts_pkt_varint(p->data, p->len, 3, &v));
    }
    ts_trace_free(&ours);
    ts_trace_free(&recd);
    free(partial.data);
    free(partial.trusted);
    munmap(map, (size_t)sb.st_size);
    ts_raw_close(&P);
    ts_raw_close(&C);
    ts_env_free(&e);
    rec_free(&pr);
    rec_free(&cr);
}

/* Replays a producer recording up to (and including) request id last_setup
 * (bind..RegisterDataSource) over TCP; returns the open raw peer. */
static void start_tcp_producer(struct ts_env *e, struct ts_raw *P, const struct rec *pr, int expect_emulation)
{
    struct ts_frame f;
    assert_int_equal(ts_raw_open(e, P, 1, 1), 0);
    /* everything before InitializeConnection's reply: SetPeerIdentity (id 0), bind */
    for (size_t i = 0; i < pr->n_c2s; i++) {
        const struct item *it = &pr->c2s[i];
        if (it->kind != IT_FRAME || it->fi.request_id > 1)
            break;
        send_item(e, P, it, -1);
    }
    assert_true(ts_raw_wait(e, P, 1, &f, 5000));
    assert_same_bind(&f, s2c_frame(pr, 1, 0));
    ts_frame_free(&f);
    send_item(e, P, c2s_frame(pr, 2), -1);
    send_item(e, P, c2s_frame(pr, 3), -1);
    assert_true(ts_raw_wait(e, P, 2, &f, 5000));
    assert_payload_equal(&f, s2c_frame(pr, 2, 0)); /* use_shmem_emulation: true */
    (void)expect_emulation;
    ts_frame_free(&f);
    send_item(e, P, c2s_frame(pr, 4), -1);
    assert_true(ts_raw_wait(e, P, 4, &f, 5000));
    assert_true(f.fi.success);
    ts_frame_free(&f);
}

/* Replays the producer frames from request id `from` on, answering Flush and
 * StopDataSource with the recording's frames, until the stop was acknowledged. */
static void run_recorded_session(struct ts_env *e, struct ts_raw *P, const struct rec *pr, uint64_t inst,
                                 const struct rec *cr, struct ts_raw *C, int expect_flush)
{
    struct ts_frame f;
    Perfetto__Protos__GetAsyncCommandResponse *cmd;
    /* Setup/StartDataSource as recorded (same ids thanks to burn_sessions) */
    size_t n_before = 0;
    while (s2c_frame(pr, 3, n_before) && n_before < 8) {
        const struct item *it = s2c_frame(pr, 3, n_before);
        Perfetto__Protos__GetAsyncCommandResponse *rc =
            perfetto__protos__get_async_command_response__unpack(NULL, it->fi.payload_len, it->fi.payload);
        int is_setup = rc && rc->cmd_case == PERFETTO__PROTOS__GET_ASYNC_COMMAND_RESPONSE__CMD_SETUP_DATA_SOURCE;
        if (rc)
            perfetto__protos__get_async_command_response__free_unpacked(rc, NULL);
        if (is_setup)
            break;
        n_before++;
    }
    for (size_t k = 0; k < 2; k++) {
        cmd = next_cmd(e, P, 3, &f, 5000);
        assert_non_null(cmd);
        assert_payload_equal(&f, s2c_frame(pr, 3, n_before + k));
        perfetto__protos__get_async_command_response__free_unpacked(cmd, NULL);
        ts_frame_free(&f);
    }
    /* data: NotifyDataSourceStarted, RegisterTraceWriter, CommitData... */
    const struct item *flush_ack = NULL, *stop_ack = NULL;
    for (size_t i = 0; i < pr->n_c2s; i++) {
        const struct item *it = &pr->c2s[i];
        if (it->kind != IT_FRAME || it->fi.request_id < 5)
            continue;
        if (it->fi.service_id == 1 && it->fi.method_id == TS_P_NOTIFY_STOPPED) {
            stop_ack = it;
            break;
        }
        Perfetto__Protos__CommitDataRequest *cd =
            it->fi.method_id == TS_P_COMMIT
                ? perfetto__protos__commit_data_request__unpack(NULL, it->fi.payload_len, it->fi.payload)
                : NULL;
        int is_ack = cd && cd->has_flush_request_id;
        if (cd)
            perfetto__protos__commit_data_request__free_unpacked(cd, NULL);
        if (is_ack) {
            flush_ack = it;
            continue;
        }
        send_item(e, P, it, -1);
    }
    assert_non_null(stop_ack);
    if (expect_flush) {
        cmd = next_cmd(e, P, 3, &f, 8000);
        assert_non_null(cmd);
        assert_int_equal(cmd->cmd_case, PERFETTO__PROTOS__GET_ASYNC_COMMAND_RESPONSE__CMD_FLUSH);
        assert_int_equal(cmd->flush->n_data_source_ids, 0); /* no_flush source, remote producer */
        assert_int_equal(cmd->flush->flags, 0x12);          /* trace stop, initiated by traced */
        perfetto__protos__get_async_command_response__free_unpacked(cmd, NULL);
        ts_frame_free(&f);
        assert_non_null(flush_ack);
        send_item(e, P, flush_ack, -1);
    }
    cmd = next_cmd(e, P, 3, &f, 8000);
    assert_non_null(cmd);
    assert_int_equal(cmd->cmd_case, PERFETTO__PROTOS__GET_ASYNC_COMMAND_RESPONSE__CMD_STOP_DATA_SOURCE);
    assert_int_equal(cmd->stop_data_source->instance_id, inst);
    perfetto__protos__get_async_command_response__free_unpacked(cmd, NULL);
    ts_frame_free(&f);
    send_item(e, P, stop_ack, -1);
    assert_true(ts_raw_wait(e, C, 2, &f, 8000));
    assert_payload_equal(&f, s2c_frame(cr, 2, 0));
    ts_frame_free(&f);
}

static void read_and_compare(struct ts_env *e, struct ts_raw *C, const struct rec *cr, struct ts_trace *ours)
{
    struct ts_frame f;
    send_item(e, C, c2s_frame(cr, 3), -1);
    struct ts_packet partial = {0};
    for (;;) {
        assert_true(ts_raw_wait(e, C, 3, &f, 5000));
        assert_true(f.fi.success);
        assert_true(f.fi.payload_len < 131072 - 64);
        ours->replies++;
        assert_int_equal(ts_trace_add_reply(ours, f.fi.payload, f.fi.payload_len, &partial), 0);
        int more = f.fi.has_more;
        ts_frame_free(&f);
        if (!more)
            break;
    }
    assert_int_equal(partial.nslices, 0);
    struct ts_trace recd = {0};
    size_t rec_replies = 0;
    recorded_trace(cr, 3, &recd, &rec_replies);
    assert_int_equal(ours->replies, rec_replies); /* same ~32 KiB batching */
    assert_same_producer_payloads(ours, &recd);
    assert_same_kinds(ours, &recd);
    assert_same_field(ours, &recd, 33);
    /* TCP peers: the trusted slices are exactly traced's */
    size_t i = 0, j = 0;
    for (;;) {
        while (i < ours->n && !ours->pk[i].trusted)
            i++;
        while (j < recd.n && !recd.pk[j].trusted)
            j++;
        if (i >= ours->n || j >= recd.n)
            break;
        assert_int_equal(ours->pk[i].trusted_len, recd.pk[j].trusted_len);
        assert_memory_equal(ours->pk[i].trusted, recd.pk[j].trusted, recd.pk[j].trusted_len);
        i++;
        j++;
    }
    ts_trace_free(&recd);
}

/* producer_tcp_emulated + consumer_record_tcp_producer */
static void test_replay_tcp_emulated(void **state)
{
    (void)state;
    if (!have_recordings())
        return;
    struct rec pr, cr;
    assert_int_equal(rec_load("producer_tcp_emulated", &pr), 0);
    assert_int_equal(rec_load("consumer_record_tcp_producer", &cr), 0);
    struct ts_env e;
    assert_int_equal(ts_env_init(&e), 0);
    struct ts_raw P, C;
    start_tcp_producer(&e, &P, &pr, 1);
    burn_sessions(&e, &P, 3, 1, 0); /* the recorded session is traced's second */
    assert_int_equal(ts_raw_open(&e, &C, 0, 0), 0);
    struct ts_frame f;
    send_item(&e, &C, c2s_frame(&cr, 1), -1);
    assert_true(ts_raw_wait(&e, &C, 1, &f, 5000));
    assert_same_bind(&f, s2c_frame(&cr, 1, 0));
    ts_frame_free(&f);
    send_item(&e, &C, c2s_frame(&cr, 2), -1);
    run_recorded_session(&e, &P, &pr, 2, &cr, &C, 0);
    struct ts_trace ours = {0};
    read_and_compare(&e, &C, &cr, &ours);
    assert_true(ts_trace_count(&ours, "Work", 4) >= 1);
    assert_true(ts_trace_count(&ours, "Counter", 7) >= 1);
    ts_trace_free(&ours);
    ts_raw_close(&P);
    ts_raw_close(&C);
    ts_env_free(&e);
    rec_free(&pr);
    rec_free(&cr);
}

/* relay_control + relay_producer + consumer_record_relay */
static void test_replay_relay(void **state)
{
    (void)state;
    if (!have_recordings())
        return;
    struct rec rc, pr, cr;
    assert_int_equal(rec_load("relay_control", &rc), 0);
    assert_int_equal(rec_load("relay_producer", &pr), 0);
    assert_int_equal(rec_load("consumer_record_relay", &cr), 0);
    struct ts_env e;
    assert_int_equal(ts_env_init(&e), 0);
    struct ts_frame f;

    /* traced_relay's control connection */
    struct ts_raw R;
    assert_int_equal(ts_raw_open(&e, &R, 1, 1), 0);
    for (size_t i = 0; i < rc.n_c2s; i++)
        if (rc.c2s[i].kind == IT_FRAME)
            send_item(&e, &R, &rc.c2s[i], -1);
    assert_true(ts_raw_wait(&e, &R, 1, &f, 5000));
    assert_same_bind(&f, s2c_frame(&rc, 1, 0)); /* RelayPort is service 2 */
    ts_frame_free(&f);
    for (uint64_t rid = 2; rid <= 4; rid++) {
        assert_true(ts_raw_wait(&e, &R, rid, &f, 5000));
        assert_payload_equal(&f, s2c_frame(&rc, rid, 0));
        ts_frame_free(&f);
    }

    struct ts_raw P, C;
    start_tcp_producer(&e, &P, &pr, 1);
    burn_sessions(&e, &P, 3, 3, 1); /* the recorded session is traced's fourth */
    assert_int_equal(ts_raw_open(&e, &C, 0, 0), 0);
    send_item(&e, &C, c2s_frame(&cr, 1), -1);
    assert_true(ts_raw_wait(&e, &C, 1, &f, 5000));
    ts_frame_free(&f);
    send_item(&e, &C, c2s_frame(&cr, 2), -1);
    run_recorded_session(&e, &P, &pr, 4, &cr, &C, 1);
    struct ts_trace ours = {0};
    read_and_compare(&e, &C, &cr, &ours);
    /* producer packets carry the machine id derived from the relay's boot id */
    uint32_t mid = tg_test_fnv1a_machine_id("f6973fcc-f89c-4562-8835-1beff3c07e60");
    size_t with_mid = 0, remote_sysinfo = 0, remote_sync = 0, anchors = 0;
    uint64_t sync_boot = 0, anchor_ts = 0;
    for (size_t i = 0; i < ours.n; i++) {
        const struct ts_packet *p = &ours.pk[i];
        uint64_t v;
        if (p->trusted && ts_pkt_varint(p->trusted, p->trusted_len, 98, &v) && v == mid)
            with_mid++;
        if (!p->trusted && ts_pkt_varint(p->data, p->len, 98, &v) && v == mid) {
            if (ts_pkt_has(p->data, p->len, 45))
                remote_sysinfo++;
            uint32_t synced;
            if (ts_pkt_has(p->data, p->len, 107)) {
                remote_sync++;
                assert_true(tg_clock_anchor_for_sync(p->data, p->len, &synced, &sync_boot));
                assert_int_equal(synced, mid);
            }
            if (tg_clock_anchor_is(p->data, p->len)) {
                anchors++;
                assert_true(ts_pkt_varint(p->data, p->len, 8, &anchor_ts));
                assert_int_equal(remote_sync, 1); /* right after the sync */
            }
        }
    }
    assert_true(with_mid > 100);
    assert_int_equal(remote_sysinfo, 1);
    assert_int_equal(remote_sync, 1);
    /* the clock anchor: the relay's last BOOTTIME reading in the sync, on the relay's machine */
    assert_int_equal(anchors, 1);
    assert_true(sync_boot > 0);
    assert_int_equal(anchor_ts, sync_boot);
    ts_trace_free(&ours);
    ts_raw_close(&R);
    ts_raw_close(&P);
    ts_raw_close(&C);
    ts_env_free(&e);
    rec_free(&rc);
    rec_free(&pr);
    rec_free(&cr);
}

/* consumer_query_service_state, with the TCP producer registered */
static void test_replay_query_service_state(void **state)
{
    (void)state;
    if (!have_recordings())
        return;
    struct rec pr, qr;
    assert_int_equal(rec_load("producer_tcp_emulated", &pr), 0);
    assert_int_equal(rec_load("consumer_query_service_state", &qr), 0);
    struct ts_env e;
    assert_int_equal(ts_env_init(&e), 0);
    struct ts_raw P, C;
    start_tcp_producer(&e, &P, &pr, 1);
    assert_int_equal(ts_raw_open(&e, &C, 0, 0), 0);
    struct ts_frame f;
    send_item(&e, &C, c2s_frame(&qr, 1), -1);
    assert_true(ts_raw_wait(&e, &C, 1, &f, 5000));
    assert_same_bind(&f, s2c_frame(&qr, 1, 0));
    ts_frame_free(&f);
    send_item(&e, &C, c2s_frame(&qr, 2), -1);
    assert_true(ts_raw_wait(&e, &C, 2, &f, 5000));
    const struct item *rf = s2c_frame(&qr, 2, 0);
    assert_int_equal(f.fi.success, rf->fi.success);
    assert_int_equal(f.fi.has_more, rf->fi.has_more); /* one reply, has_more=false */
    Perfetto__Protos__QueryServiceStateResponse *a =
        perfetto__protos__query_service_state_response__unpack(NULL, f.fi.payload_len, f.fi.payload);
    Perfetto__Protos__QueryServiceStateResponse *b =
        perfetto__protos__query_service_state_response__unpack(NULL, rf->fi.payload_len, rf->fi.payload);
    assert_non_null(a);
    assert_non_null(b);
    Perfetto__Protos__TracingServiceState *sa = a->service_state, *sb = b->service_state;
    assert_int_equal(sa->n_producers, sb->n_producers);
    assert_string_equal(sa->producers[0]->name, sb->producers[0]->name);
    assert_string_equal(sa->producers[0]->sdk_version, sb->producers[0]->sdk_version);
    assert_int_equal(sa->producers[0]->uid, sb->producers[0]->uid);
    assert_int_equal(sa->producers[0]->pid, sb->producers[0]->pid);
    assert_int_equal(sa->n_data_sources, sb->n_data_sources);
    assert_string_equal(sa->data_sources[0]->ds_descriptor->name, sb->data_sources[0]->ds_descriptor->name);
    assert_int_equal(sa->data_sources[0]->ds_descriptor->id, sb->data_sources[0]->ds_descriptor->id);
    assert_int_equal(sa->data_sources[0]->producer_id, sa->producers[0]->id);
    assert_int_equal(sa->num_sessions, sb->num_sessions);
    assert_int_equal(sa->num_sessions_started, sb->num_sessions_started);
    assert_int_equal(sa->supports_tracing_sessions, sb->supports_tracing_sessions);
    assert_string_equal(sa->tracing_service_version, "tracegate 0.1.0");
    perfetto__protos__query_service_state_response__free_unpacked(a, NULL);
    perfetto__protos__query_service_state_response__free_unpacked(b, NULL);
    ts_frame_free(&f);
    ts_raw_close(&P);
    ts_raw_close(&C);
    ts_env_free(&e);
    rec_free(&pr);
    rec_free(&qr);
}

/* consumer_detach then consumer_attach_stop (write_into_file to an fd) */
static void test_replay_detach_attach(void **state)
{
    (void)state;
    if (!have_recordings())
        return;
    struct rec dr, ar;
    assert_int_equal(rec_load("consumer_detach", &dr), 0);
    assert_int_equal(rec_load("consumer_attach_stop", &ar), 0);
    struct ts_env e;
    assert_int_equal(ts_env_init(&e), 0);
    char path[] = "/tmp/tg-replay-detach-XXXXXX";
    int out = mkstemp(path);
    assert_true(out >= 0);
    struct ts_frame f;

    struct ts_raw D;
    assert_int_equal(ts_raw_open(&e, &D, 0, 0), 0);
    send_item(&e, &D, c2s_frame(&dr, 1), -1);
    assert_true(ts_raw_wait(&e, &D, 1, &f, 5000));
    ts_frame_free(&f);
    const struct item *en = c2s_frame(&dr, 2);
    assert_true(en->has_fd); /* the output file rides on EnableTracing */
    send_item(&e, &D, en, out);
    send_item(&e, &D, c2s_frame(&dr, 3), -1);
    assert_true(ts_raw_wait(&e, &D, 3, &f, 5000));
    assert_payload_equal(&f, s2c_frame(&dr, 3, 0));
    ts_frame_free(&f);
    ts_pump(&e, 50);
    assert_int_equal(ts_raw_count(&D, 2), 0); /* no EnableTracing reply for a detached session */
    ts_raw_close(&D);
    ts_pump(&e, 50);

    struct ts_raw A;
    assert_int_equal(ts_raw_open(&e, &A, 0, 0), 0);
    send_item(&e, &A, c2s_frame(&ar, 1), -1);
    assert_true(ts_raw_wait(&e, &A, 1, &f, 5000));
    ts_frame_free(&f);
    send_item(&e, &A, c2s_frame(&ar, 2), -1); /* Attach("capkey") */
    assert_true(ts_raw_wait(&e, &A, 2, &f, 5000));
    assert_payload_equal(&f, s2c_frame(&ar, 2, 0)); /* the same TraceConfig bytes */
    ts_frame_free(&f);
    send_item(&e, &A, c2s_frame(&ar, 3), -1); /* EnableTracing{attach_notification_only} */
    send_item(&e, &A, c2s_frame(&ar, 4), -1); /* Flush */
    assert_true(ts_raw_wait(&e, &A, 4, &f, 5000));
    assert_payload_equal(&f, s2c_frame(&ar, 4, 0));
    ts_frame_free(&f);
    assert_int_equal(ts_raw_count(&A, 3), 0);
    send_item(&e, &A, c2s_frame(&ar, 5), -1); /* DisableTracing */
    assert_true(ts_raw_wait(&e, &A, 0, &f, 5000));
    assert_int_equal(f.fi.request_id, 5); /* the DisableTracing reply comes first */
    assert_payload_equal(&f, s2c_frame(&ar, 5, 0));
    ts_frame_free(&f);
    assert_true(ts_raw_wait(&e, &A, 3, &f, 5000));
    assert_payload_equal(&f, s2c_frame(&ar, 3, 0)); /* {disabled: true} */
    ts_frame_free(&f);

    /* the file is a valid .pftrace with the config echo */
    uint8_t *data;
    size_t len;
    assert_int_equal(tg_test_read_file(path, &data, &len), 0);
    assert_true(len > 0);
    struct tg_pb_reader r;
    struct tg_pb_field fl;
    tg_pb_reader_init(&r, data, len);
    int rc, n = 0, cfgs = 0;
    while ((rc = tg_pb_next(&r, &fl)) == 1) {
        assert_int_equal(fl.number, 1);
        assert_int_equal(fl.wire, TG_PB_LEN);
        if (ts_pkt_has(fl.data, fl.len, 33))
            cfgs++;
        n++;
    }
    assert_int_equal(rc, 0);
    assert_true(n >= 5);
    assert_int_equal(cfgs, 1);
    free(data);
    unlink(path);
    close(out);
    ts_raw_close(&A);
    ts_env_free(&e);
    rec_free(&dr);
    rec_free(&ar);
}

/* Every recording in the directory is covered by one of the replays above. */
static void test_all_recordings_known(void **state)
{
    (void)state;
    const char *dir = tg_test_recordings_dir();
    if (!dir) {
        skip();
        return;
    }
    static const char *known[] = {"producer_unix_smb",    "producer_tcp_emulated",        "consumer_record_smb_producer",
                                  "consumer_record_tcp_producer", "consumer_query_service_state", "consumer_detach",
                                  "consumer_attach_stop", "relay_control",                "relay_producer",
                                  "consumer_record_relay"};
    char **paths;
    size_t n = tg_test_list_dir(dir, ".bin", &paths);
    assert_true(n >= 10);
    for (size_t i = 0; i < n; i++) {
        const char *base = strrchr(paths[i], '/') + 1;
        int found = 0;
        for (size_t k = 0; k < sizeof known / sizeof known[0]; k++)
            found |= strncmp(base, known[k], strlen(known[k])) == 0 && base[strlen(known[k])] == '.';
        if (!found)
            fprintf(stderr, "recording %s is not replayed by this test\n", base);
        assert_true(found);
    }
    tg_test_free_list(paths, n);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_all_recordings_known),
        cmocka_unit_test(test_replay_unix_smb),
        cmocka_unit_test(test_replay_tcp_emulated),
        cmocka_unit_test(test_replay_relay),
        cmocka_unit_test(test_replay_query_service_state),
        cmocka_unit_test(test_replay_detach_attach),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
