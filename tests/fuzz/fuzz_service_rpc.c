/* fuzz_service_rpc.c: libFuzzer target for the tracing service's RPC surface: the in-process
 * tg_service driven with arbitrary IPC frames on up to four connections (two consumers, two
 * producers), so every ConsumerPort, ProducerPort and RelayPort method is called with any
 * arguments, in any order, from any state the earlier calls of the input built (sessions,
 * registered data sources, SMBs the producers write into, detached sessions, pending flushes).
 *
 * Input: a script of at most MAX_RECORDS records, each
 *     op:u8  sel:u8  len:u16 LE  bytes[len]      (len is cut to what is left)
 * op bits 0-1: the connection (0 consumer A: privileged, uid 1001; 1 producer A, uid 1001;
 *              2 consumer B: unprivileged, uid 1002; 3 producer B, uid 1003);
 * op bits 2-4: what to do
 *   0 BIND    BindService("ConsumerPort"/"ProducerPort"); bit 6: "RelayPort" on a producer,
 *             the bytes as the service name on a consumer
 *   1 CALL    InvokeMethod of method (sel & 63) % n of the connection's port (the k_consumer_methods /
 *             k_producer_methods tables below: ids as the service numbers them), args = bytes
 *   2 RAW     InvokeMethod with service id 1 (2 with bit 6) and method id sel, args = bytes
 *   3 FRAME   bytes are a whole IPCFrame (the 4-byte header is added)
 *   4 STREAM  bytes are written to the socket as they are (partial/oversized frames)
 *   5 CONNECT the connection is closed and (unless bit 6) opened again, unbound
 *   6 TIMER   one of the service's pending session or flush timers fires now (sel picks it):
 *             time passing, without waiting for it
 *   7 SMB     bytes are written into the SMB the producer got (or gave) at (sel * 1024) % size
 * op bit 5: drop_reply on CALL and RAW; op bit 7: the frame carries a descriptor (SCM_RIGHTS): a
 * sealed SMB memfd of 16 KiB << ((sel >> 6) & 3) from a producer (which maps it as its SMB),
 * a plain memfd (an output file for write_into_file / CloneSession) from a consumer.
 * After each record the event loop runs until nothing is left to do; every byte the service
 * sends is read, reassembled and decoded: each reply must be a frame of at most 128 KiB that
 * decodes as an IPCFrame holding a reply (bind reply, invoke reply or request error), an SMB
 * descriptor sent to a producer is mapped as a real producer would.
 *
 * Oracle: no crash, sanitizer report or leak; each reply decodes; at the end of the input a fresh
 * consumer binds ConsumerPort and QueryCapabilities succeeds; once every connection is closed the
 * service has no consumer or producer left, no buffer and none of the buffer budget. Each input
 * starts from an empty service: one with sessions (detached) or relays left is made again, an
 * empty one gets its id counters reset (ids count from 1 again, as the seeds expect). Seeds: corpus/fuzz_service_rpc, made by make_service_rpc_seeds.py.
 * TG_FUZZ_VERBOSE=1 shows the service's log. */
#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tracegate/frame.h"
#include "tracegate/ipc_wire.h"
#include "tracegate/log.h"
#include "tracegate/service.h"

#include "ipc_frame.pb-c.h"
#include "service/svc.h"
#include "smb/smb_fd.h"

#include "fuzz_check.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_RECORDS 64
#define MAX_SPINS 2000     /* loop iterations per pump: a safety net against a livelock */
#define QUIET_SPINS 4      /* iterations with nothing read and nothing active: the service is idle */
#define MAX_IN (1u << 20)  /* reply bytes buffered per connection before a frame must complete */
#define MAX_SMB (32u << 20)
#define NCONN 4

enum { K_BIND, K_CALL, K_RAW, K_FRAME, K_STREAM, K_CONNECT, K_TIMER, K_SMB };

/* Method ids as the ports number them (1-based, declaration order; perfetto-wire-facts §1.3). */
struct method {
    uint32_t service_id, method_id;
    const char *name;
};
static const struct method k_consumer_methods[] = {
    {1, 1, "EnableTracing"},   {1, 2, "DisableTracing"},     {1, 3, "ReadBuffers"},
    {1, 4, "FreeBuffers"},     {1, 5, "Flush"},              {1, 6, "StartTracing"},
    {1, 7, "ChangeTraceConfig"}, {1, 8, "Detach"},           {1, 9, "Attach"},
    {1, 10, "GetTraceStats"},  {1, 11, "ObserveEvents"},     {1, 12, "QueryServiceState"},
    {1, 13, "QueryCapabilities"}, {1, 14, "SaveTraceForBugreport"}, {1, 15, "CloneSession"},
};
static const struct method k_producer_methods[] = {
    {1, 1, "InitializeConnection"}, {1, 2, "RegisterDataSource"}, {1, 3, "UnregisterDataSource"},
    {1, 4, "CommitData"},           {1, 5, "GetAsyncCommand"},    {1, 6, "RegisterTraceWriter"},
    {1, 7, "UnregisterTraceWriter"}, {1, 8, "NotifyDataSourceStarted"}, {1, 9, "NotifyDataSourceStopped"},
    {1, 10, "ActivateTriggers"},    {1, 11, "Sync"},              {1, 12, "UpdateDataSource"},
    {2, 1, "InitRelay"},            {2, 2, "SyncClock"},
};
#define N_CONSUMER_METHODS (sizeof k_consumer_methods / sizeof k_consumer_methods[0])
#define N_PRODUCER_METHODS (sizeof k_producer_methods / sizeof k_producer_methods[0])
#define QUERY_CAPABILITIES 13u

struct fconn {
    int fd; /* our end; -1 when closed */
    int producer;
    uint64_t next_rid;
    uint8_t *in; /* reply bytes not yet framed */
    size_t in_len, in_cap;
    uint8_t *smb; /* the SMB this producer maps, or NULL */
    size_t smb_size;
    uint64_t want_rid; /* a reply we wait for (the final check), 0 = none */
    const char *called[64]; /* TG_FUZZ_VERBOSE: method names by request id % 64 */
    int got_ok;
};

static struct event_base *g_base;
static int g_verbose;
static tg_service *g_svc;
static struct fconn g_conn[NCONN + 1]; /* [NCONN]: the final check's consumer */
static const struct tg_ipc_identity k_ids[NCONN + 1] = {
    /* none may create files (output_path): never root, never the service's own uid */
    {.uid = 1001, .pid = 101, .principal = "uid:1001", .privileged = 1},
    {.uid = 1001, .pid = 102, .principal = "uid:1001"},
    {.uid = 1002, .pid = 103, .principal = "uid:1002"},
    {.uid = 1003, .pid = 104, .principal = "uid:1003"},
    {.uid = 1002, .pid = 105, .principal = "uid:1002"},
};

static void unmap_smb(struct fconn *c)
{
    if (c->smb)
        munmap(c->smb, c->smb_size);
    c->smb = NULL;
    c->smb_size = 0;
}

/* Maps fd (not taken) as c's SMB, as a producer maps the one SetupTracing brings. */
static void map_smb(struct fconn *c, int fd)
{
    struct stat st;
    if (fstat(fd, &st) != 0 || st.st_size <= 0 || (uint64_t)st.st_size > MAX_SMB)
        return;
    void *m = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED)
        return;
    unmap_smb(c);
    c->smb = m;
    c->smb_size = (size_t)st.st_size;
}

static void check_frame(struct fconn *c, const uint8_t *body, size_t len)
{
    Perfetto__Protos__IPCFrame *f = perfetto__protos__ipcframe__unpack(NULL, len, body);
    CHECK(f != NULL); /* every frame the service sends decodes */
    CHECK(f->msg_case == PERFETTO__PROTOS__IPCFRAME__MSG_MSG_BIND_SERVICE_REPLY ||
          f->msg_case == PERFETTO__PROTOS__IPCFRAME__MSG_MSG_INVOKE_METHOD_REPLY ||
          f->msg_case == PERFETTO__PROTOS__IPCFRAME__MSG_MSG_REQUEST_ERROR);
    if (g_verbose) {
        const Perfetto__Protos__IPCFrame__InvokeMethodReply *r =
            f->msg_case == PERFETTO__PROTOS__IPCFRAME__MSG_MSG_INVOKE_METHOD_REPLY ? f->msg_invoke_method_reply : NULL;
        const char *m = r ? c->called[f->request_id % 64] : NULL;
        fprintf(stderr, "fuzz: conn %d: reply to %llu (%s): msg %d%s%s, %zu bytes\n", (int)(c - g_conn),
                (unsigned long long)f->request_id, m ? m : "-", (int)f->msg_case, r && r->success ? " ok" : "",
                r && r->has_more ? " more" : "", r && r->has_reply_proto ? r->reply_proto.len : 0);
    }
    if (c->want_rid && f->request_id == c->want_rid &&
        f->msg_case == PERFETTO__PROTOS__IPCFRAME__MSG_MSG_INVOKE_METHOD_REPLY &&
        f->msg_invoke_method_reply->has_success && f->msg_invoke_method_reply->success)
        c->got_ok = 1;
    perfetto__protos__ipcframe__free_unpacked(f, NULL);
}

static void parse_frames(struct fconn *c)
{
    size_t off = 0;
    while (c->in_len - off >= 4) {
        const uint8_t *h = c->in + off;
        size_t n = (size_t)h[0] | (size_t)h[1] << 8 | (size_t)h[2] << 16 | (size_t)h[3] << 24;
        CHECK(n + 4 <= TG_FRAME_MAX_DEFAULT); /* Perfetto's peers drop anything bigger */
        if (c->in_len - off - 4 < n)
            break;
        check_frame(c, h + 4, n);
        off += 4 + n;
    }
    memmove(c->in, c->in + off, c->in_len - off);
    c->in_len -= off;
}

/* Reads what the service sent on c (bytes and descriptors); returns how many bytes. */
static size_t read_conn(struct fconn *c)
{
    size_t total = 0;
    while (c->fd >= 0) {
        if (c->in_cap - c->in_len < 65536) {
            CHECK(c->in_cap < MAX_IN); /* a frame never needs more */
            size_t ncap = c->in_cap ? c->in_cap * 2 : 131072;
            uint8_t *p = realloc(c->in, ncap);
            if (!p)
                abort();
            c->in = p;
            c->in_cap = ncap;
        }
        union {
            struct cmsghdr h;
            char b[CMSG_SPACE(4 * sizeof(int))];
        } cbuf;
        struct iovec iov = {c->in + c->in_len, c->in_cap - c->in_len};
        struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf.b, .msg_controllen = sizeof cbuf.b};
        ssize_t r = recvmsg(c->fd, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
        if (r < 0 && errno == EINTR)
            continue;
        for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); r >= 0 && cm; cm = CMSG_NXTHDR(&mh, cm)) {
            if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
                continue;
            size_t nfd = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
            for (size_t i = 0; i < nfd; i++) {
                int fd;
                memcpy(&fd, CMSG_DATA(cm) + i * sizeof(int), sizeof fd);
                CHECK(c->producer); /* no consumer reply ever carries a descriptor */
                map_smb(c, fd);
                close(fd);
            }
        }
        if (r <= 0)
            break; /* drained, or the service hung up (the next write finds out) */
        c->in_len += (size_t)r;
        total += (size_t)r;
        parse_frames(c);
        if ((size_t)r < iov.iov_len)
            break; /* most likely drained: the next spin polls again */
    }
    return total;
}

static size_t spin(void)
{
    event_base_loop(g_base, EVLOOP_NONBLOCK);
    struct pollfd pf[NCONN + 1];
    int idx[NCONN + 1], n = 0;
    for (int i = 0; i <= NCONN; i++) {
        if (g_conn[i].fd >= 0) {
            pf[n].fd = g_conn[i].fd;
            pf[n].events = POLLIN;
            pf[n].revents = 0;
            idx[n++] = i;
        }
    }
    size_t got = 0;
    if (n && poll(pf, (nfds_t)n, 0) > 0)
        for (int k = 0; k < n; k++)
            if (pf[k].revents & POLLIN)
                got += read_conn(&g_conn[idx[k]]);
    return got;
}

/* Runs the service until it has nothing more to do. */
static void pump(void)
{
    int quiet = 0;
    for (int i = 0; i < MAX_SPINS && quiet < QUIET_SPINS; i++) {
        if (spin() == 0 && event_base_get_num_events(g_base, EVENT_BASE_COUNT_ACTIVE) == 0)
            quiet++;
        else
            quiet = 0;
    }
}

static void close_conn(struct fconn *c)
{
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
    unmap_smb(c);
    c->in_len = 0; /* the buffer is kept for the next connection in this slot */
    c->want_rid = 0;
    c->got_ok = 0;
}

static void open_conn(int i)
{
    struct fconn *c = &g_conn[i];
    close_conn(c);
    c->producer = i == 1 || i == 3;
    c->next_rid = 1;
    memset(c->called, 0, sizeof c->called);
    c->fd = tg_service_connect_local_as(g_svc, c->producer, &k_ids[i]);
    if (c->fd < 0)
        abort();
    fcntl(c->fd, F_SETFL, fcntl(c->fd, F_GETFL) | O_NONBLOCK);
}

/* A descriptor to pass with a frame: an SMB for producers, an output file for consumers. */
static int make_pass_fd(struct fconn *c, uint8_t sel)
{
    if (!c->producer)
        return memfd_create("fuzz-out", MFD_CLOEXEC);
    int fd = tg_smb_fd_create((size_t)16384 << ((sel >> 6) & 3));
    if (fd >= 0)
        map_smb(c, fd);
    return fd;
}

/* Writes all of p (the descriptor, if any, with the first byte), pumping the service while the
 * socket is full. Stops if the service hung up. */
static void send_bytes(struct fconn *c, const uint8_t *p, size_t n, int pass_fd)
{
    size_t off = 0;
    int stalls = 0;
    while (off < n && c->fd >= 0) {
        ssize_t w;
        if (pass_fd >= 0) {
            union {
                struct cmsghdr h;
                char b[CMSG_SPACE(sizeof(int))];
            } cbuf;
            memset(&cbuf, 0, sizeof cbuf);
            struct iovec iov = {(void *)(p + off), n - off};
            struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf.b, .msg_controllen = sizeof cbuf.b};
            struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
            cm->cmsg_level = SOL_SOCKET;
            cm->cmsg_type = SCM_RIGHTS;
            cm->cmsg_len = CMSG_LEN(sizeof(int));
            memcpy(CMSG_DATA(cm), &pass_fd, sizeof(int));
            w = sendmsg(c->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
            if (w > 0)
                pass_fd = -1;
        } else {
            w = send(c->fd, p + off, n - off, MSG_NOSIGNAL | MSG_DONTWAIT);
        }
        if (w > 0) {
            off += (size_t)w;
            stalls = 0;
            continue;
        }
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) && ++stalls < MAX_SPINS) {
            spin();
            continue;
        }
        break; /* the service closed this connection (or never reads again) */
    }
}

static void send_frame(struct fconn *c, const uint8_t *body, size_t len, int pass_fd)
{
    uint8_t *b = malloc(len + 4);
    if (!b)
        abort();
    tg_frame_put_header(b, (uint32_t)len);
    memcpy(b + 4, body, len);
    send_bytes(c, b, len + 4, pass_fd);
    free(b);
}

static void send_bind(struct fconn *c, const char *name, int pass_fd)
{
    uint8_t frame[512];
    c->called[c->next_rid % 64] = NULL;
    size_t n = tg_ipc_encode_bind(frame, sizeof frame, c->next_rid++, name);
    if (n)
        send_frame(c, frame, n, pass_fd);
}

static uint64_t send_invoke(struct fconn *c, uint32_t service_id, uint32_t method_id, const uint8_t *args,
                            size_t len, int drop, int pass_fd)
{
    size_t cap = len + 64;
    uint8_t *frame = malloc(cap);
    if (!frame)
        abort();
    uint64_t rid = c->next_rid++;
    size_t n = tg_ipc_encode_invoke(frame, cap, rid, service_id, method_id, args, len, drop);
    if (n)
        send_frame(c, frame, n, pass_fd);
    free(frame);
    return rid;
}

/* Fires one of the service's pending timers, as if its time had come. */
static void fire_timer(uint8_t sel)
{
    struct event *evs[256];
    size_t n = 0;
    for (tg_svc_session *s = g_svc->sessions; s; s = s->next) {
        struct event *t[] = {s->ev_duration,        s->ev_snapshot,        s->ev_flush_period,
                             s->ev_clear_inc,       s->ev_write,           s->ev_trigger_timeout,
                             s->ev_stop_timeout,    s->ev_stop_delay,      s->ev_task};
        for (size_t i = 0; i < sizeof t / sizeof t[0] && n < 256; i++)
            if (t[i] && event_pending(t[i], EV_TIMEOUT, NULL))
                evs[n++] = t[i];
        for (tg_svc_flush *f = s->flushes; f && n < 256; f = f->next)
            if (f->timeout && event_pending(f->timeout, EV_TIMEOUT, NULL))
                evs[n++] = f->timeout;
    }
    if (n)
        event_active(evs[sel % n], EV_TIMEOUT, 1);
}

static void run_record(uint8_t op, uint8_t sel, const uint8_t *arg, size_t len)
{
    int ci = op & 3, kind = (op >> 2) & 7, bit6 = (op >> 6) & 1, drop = (op >> 5) & 1;
    struct fconn *c = &g_conn[ci];
    if (kind == K_CONNECT) {
        close_conn(c);
        if (!bit6)
            open_conn(ci);
        return;
    }
    if (kind == K_TIMER) {
        fire_timer(sel);
        return;
    }
    if (kind == K_SMB) {
        if (c->smb && len) {
            size_t off = ((size_t)sel * 1024u) % c->smb_size, room = c->smb_size - off;
            memcpy(c->smb + off, arg, len < room ? len : room);
        }
        return;
    }
    if (c->fd < 0)
        return;
    int pass_fd = (op & 0x80) ? make_pass_fd(c, sel) : -1;
    switch (kind) {
    case K_BIND: {
        char name[256];
        if (bit6 && c->producer) {
            snprintf(name, sizeof name, "RelayPort");
        } else if (bit6) {
            size_t l = len < sizeof name - 1 ? len : sizeof name - 1;
            memcpy(name, arg, l);
            name[l] = 0;
        } else {
            snprintf(name, sizeof name, "%s", c->producer ? "ProducerPort" : "ConsumerPort");
        }
        send_bind(c, name, pass_fd);
        break;
    }
    case K_CALL: {
        const struct method *m = c->producer ? &k_producer_methods[(sel & 63u) % N_PRODUCER_METHODS]
                                             : &k_consumer_methods[(sel & 63u) % N_CONSUMER_METHODS];
        c->called[c->next_rid % 64] = m->name;
        send_invoke(c, m->service_id, m->method_id, arg, len, drop, pass_fd);
        break;
    }
    case K_RAW:
        c->called[c->next_rid % 64] = NULL;
        send_invoke(c, 1u + (uint32_t)bit6, sel, arg, len, drop, pass_fd);
        break;
    case K_FRAME:
        send_frame(c, arg, len, pass_fd);
        break;
    default: /* K_STREAM */
        send_bytes(c, arg, len, pass_fd);
        break;
    }
    if (pass_fd >= 0)
        close(pass_fd);
}

/* The oracle at the end of an input: a new consumer is served. */
static void check_usable(void)
{
    struct fconn *c = &g_conn[NCONN];
    open_conn(NCONN);
    send_bind(c, "ConsumerPort", -1);
    c->called[c->next_rid % 64] = "QueryCapabilities";
    c->want_rid = send_invoke(c, 1, QUERY_CAPABILITIES, NULL, 0, 0, -1);
    pump();
    CHECK(c->got_ok);
}

static void cleanup(void)
{
    if (g_svc)
        tg_service_free(g_svc);
    g_svc = NULL;
    for (int i = 0; i <= NCONN; i++) {
        free(g_conn[i].in);
        g_conn[i].in = NULL;
    }
    if (g_base)
        event_base_free(g_base);
    g_base = NULL;
}

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    const char *v = getenv("TG_FUZZ_VERBOSE");
    g_verbose = v && *v == '1';
    tg_log_set_level(g_verbose ? TG_LOG_DEBUG : TG_LOG_ERROR);
    for (int i = 0; i <= NCONN; i++)
        g_conn[i].fd = -1;
    g_base = event_base_new();
    if (!g_base)
        abort();
    atexit(cleanup);
    return 0;
}

static void new_service(void)
{
    struct tg_service_opts o;
    memset(&o, 0, sizeof o);
    o.producer_socks = "";
    o.consumer_socks = "";
    o.machine_name = "fuzz";
    o.max_buffer_bytes = 64u << 20; /* the budget a config may spend (trace buffers are allocated) */
    char err[256];
    g_svc = tg_service_new(g_base, &o, err, sizeof err);
    if (!g_svc)
        abort();
}

/* After an input, with every connection closed: the service must be empty but for detached
 * sessions and relays. Then it is made as good as new (ids from 1 again, as the seeds expect):
 * freed and made again when sessions or relays are left, else only its id counters reset. */
static void reset_service(void)
{
    CHECK(g_svc->consumers == NULL && g_svc->producers == NULL); /* every hang-up was noticed */
    if (g_svc->sessions || g_svc->relays) {
        tg_service_free(g_svc);
        g_svc = NULL;
        pump(); /* events the service's peers left (deferred closes) */
        return;
    }
    CHECK(g_svc->buffer_bytes == 0); /* every buffer's bytes went back to the budget */
    for (uint32_t i = 1; i <= g_svc->last_buffer_id; i++)
        CHECK(g_svc->buf_index[i] == NULL);
    for (uint32_t i = 1; i <= g_svc->last_producer_id; i++)
        CHECK(g_svc->producer_index[i] == NULL);
    g_svc->last_buffer_id = 0;
    g_svc->last_producer_id = 0;
    g_svc->last_session_id = 0;
    g_svc->last_instance_id = 0;
    g_svc->last_flush_id = 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!g_svc)
        new_service();
    for (int i = 0; i < NCONN; i++)
        open_conn(i);

    size_t off = 0;
    for (int r = 0; r < MAX_RECORDS && size - off >= 4; r++) {
        uint8_t op = data[off], sel = data[off + 1];
        size_t len = (size_t)data[off + 2] | (size_t)data[off + 3] << 8;
        off += 4;
        if (len > size - off)
            len = size - off;
        if (g_verbose)
            fprintf(stderr, "fuzz: record %d: conn %d kind %d sel %u, %zu bytes\n", r, op & 3, (op >> 2) & 7, sel, len);
        run_record(op, sel, data + off, len);
        off += len;
        pump();
    }

    check_usable();
    for (int i = 0; i <= NCONN; i++)
        close_conn(&g_conn[i]);
    pump();
    reset_service();
    return 0;
}
