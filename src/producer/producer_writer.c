/* producer_writer.c: trace writers of the producer library, the queue that
 * carries their commits (and RegisterTraceWriter/UnregisterTraceWriter) to the
 * loop thread, and CommitData batching/splitting (see tracegate/producer.h). */
#include "producer/producer_internal.h"

#include <errno.h>
#include <event2/event.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "commit_data_request.pb-c.h"
#include "producer_port.pb-c.h"
#include "tracegate/conn.h"
#include "tracegate/log.h"

bool tg_pr_on_loop_thread(const tg_producer *p)
{
    return pthread_equal(pthread_self(), p->loop_thread) != 0;
}

/* ---- queue ---- */

static void wake_loop(tg_producer *p)
{
    uint64_t one = 1;
    ssize_t n;
    do {
        n = write(p->wake_fd, &one, sizeof one);
    } while (n < 0 && errno == EINTR);
    /* EAGAIN means the counter is saturated: the loop is woken anyway. */
}

static size_t op_cost(const tg_producer *p, const struct tg_pr_op *op)
{
    if (op->kind != TG_PR_OP_CHUNK)
        return 0;
    return op->data_len ? op->data_len : p->smb.page_size; /* SMB mode: roughly a chunk */
}

/* Appends op (takes ownership). Wakes the loop thread, or, on the loop thread,
 * sends right away when the SDK would (emulation, or half the SMB pending). */
static void push_op(tg_producer *p, struct tg_pr_op *op)
{
    bool on_loop = tg_pr_on_loop_thread(p);
    size_t cost = op_cost(p, op);
    pthread_mutex_lock(&p->qmu);
    if (!on_loop && op->data_len && p->q_bytes + cost > TG_PR_MAX_QUEUED_BYTES) {
        pthread_mutex_unlock(&p->qmu);
        free(op);
        tg_warn(TG_PR_LOG, "commit queue full: dropping an emulated chunk");
        return;
    }
    op->next = NULL;
    if (p->qtail)
        p->qtail->next = op;
    else
        p->qhead = op;
    p->qtail = op;
    p->q_bytes += cost;
    bool urgent = op->kind == TG_PR_OP_CHUNK && (p->emulation || p->q_bytes >= p->smb.size / 2);
    bool need_kick = !p->kicked;
    p->kicked = true;
    pthread_mutex_unlock(&p->qmu);

    if (on_loop && urgent)
        tg_pr_drain(p, 0);
    else if (need_kick)
        wake_loop(p);
}

static struct tg_pr_op *op_new(enum tg_pr_op_kind kind, uint64_t gen, uint16_t writer_id, uint32_t target_buffer,
                               size_t data_len)
{
    struct tg_pr_op *op = calloc(1, sizeof *op + data_len);
    if (!op)
        return NULL;
    op->kind = kind;
    op->gen = gen;
    op->writer_id = writer_id;
    op->target_buffer = target_buffer;
    op->data_len = data_len;
    return op;
}

void tg_pr_queue_clear(tg_producer *p)
{
    pthread_mutex_lock(&p->qmu);
    struct tg_pr_op *op = p->qhead;
    p->qhead = p->qtail = NULL;
    p->q_bytes = 0;
    p->kicked = false;
    pthread_mutex_unlock(&p->qmu);
    while (op) {
        struct tg_pr_op *next = op->next;
        free(op);
        op = next;
    }
}

void tg_pr_wake_cb(int fd, short what, void *arg)
{
    tg_producer *p = arg;
    uint64_t v;
    (void)what;
    while (read(fd, &v, sizeof v) < 0 && errno == EINTR)
        ;
    tg_pr_drain(p, 0);
}

/* ---- CommitData batching ---- */

struct batch {
    Perfetto__Protos__CommitDataRequest__ChunksToMove *moves;
    Perfetto__Protos__CommitDataRequest__ChunksToMove **ptrs;
    size_t n, cap;
    size_t bytes; /* estimated serialized size */
};

static void send_batch(tg_producer *p, struct batch *b, uint64_t flush_request_id)
{
    if (b->n == 0 && flush_request_id == 0)
        return;
    Perfetto__Protos__CommitDataRequest req = PERFETTO__PROTOS__COMMIT_DATA_REQUEST__INIT;
    for (size_t i = 0; i < b->n; i++)
        b->ptrs[i] = &b->moves[i];
    req.n_chunks_to_move = b->n;
    req.chunks_to_move = b->ptrs;
    if (flush_request_id) {
        req.has_flush_request_id = 1;
        req.flush_request_id = flush_request_id;
    }
    if (p->cli && p->proxy)
        tg_ipc_client_invoke(p->cli, p->proxy, "CommitData", &req.base, -1, NULL, NULL);
    b->n = 0;
    b->bytes = 0;
}

static int batch_add(struct batch *b, const struct tg_pr_op *op)
{
    if (b->n == b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 16;
        void *m = realloc(b->moves, cap * sizeof *b->moves);
        if (!m)
            return -1;
        b->moves = m;
        void *q = realloc(b->ptrs, cap * sizeof *b->ptrs);
        if (!q)
            return -1;
        b->ptrs = q;
        b->cap = cap;
    }
    Perfetto__Protos__CommitDataRequest__ChunksToMove *m = &b->moves[b->n++];
    perfetto__protos__commit_data_request__chunks_to_move__init(m);
    m->has_page = 1;
    m->page = op->page;
    m->has_chunk = 1;
    m->chunk = op->chunk;
    m->has_target_buffer = 1;
    m->target_buffer = op->target_buffer;
    if (op->data_len) {
        m->has_data = 1;
        m->data.data = (uint8_t *)op->data; /* borrowed until the batch is sent */
        m->data.len = op->data_len;
    }
    return 0;
}

/* Serialized size of one ChunksToMove entry, generously rounded up. */
static size_t move_cost(const struct tg_pr_op *op)
{
    return 32 + op->data_len;
}

void tg_pr_drain(tg_producer *p, uint64_t flush_request_id)
{
    pthread_mutex_lock(&p->qmu);
    struct tg_pr_op *list = p->qhead;
    p->qhead = p->qtail = NULL;
    p->q_bytes = 0;
    p->kicked = false;
    pthread_mutex_unlock(&p->qmu);

    struct batch b = {0};
    /* Ops are freed only after the batch that borrows their data is sent. */
    struct tg_pr_op *sent_head = NULL;
    for (struct tg_pr_op *op = list; op;) {
        struct tg_pr_op *next = op->next;
        bool live = op->gen == p->gen && p->cli && p->proxy && p->state == TG_PR_READY;
        if (live && op->kind == TG_PR_OP_CHUNK) {
            if (b.n > 0 && b.bytes + move_cost(op) > TG_PR_MAX_COMMIT_BYTES) {
                send_batch(p, &b, 0);
                while (sent_head) {
                    struct tg_pr_op *n2 = sent_head->next;
                    free(sent_head);
                    sent_head = n2;
                }
            }
            if (batch_add(&b, op) == 0) {
                b.bytes += move_cost(op);
                op->next = sent_head;
                sent_head = op;
                op = next;
                continue;
            }
            tg_warn(TG_PR_LOG, "out of memory: dropping a chunk commit");
        } else if (live) {
            send_batch(p, &b, 0); /* keep the FIFO order across kinds */
            if (op->kind == TG_PR_OP_REGISTER_WRITER) {
                Perfetto__Protos__RegisterTraceWriterRequest r = PERFETTO__PROTOS__REGISTER_TRACE_WRITER_REQUEST__INIT;
                r.has_trace_writer_id = 1;
                r.trace_writer_id = op->writer_id;
                r.has_target_buffer = 1;
                r.target_buffer = op->target_buffer;
                tg_ipc_client_invoke(p->cli, p->proxy, "RegisterTraceWriter", &r.base, -1, NULL, NULL);
            } else {
                Perfetto__Protos__UnregisterTraceWriterRequest r =
                    PERFETTO__PROTOS__UNREGISTER_TRACE_WRITER_REQUEST__INIT;
                r.has_trace_writer_id = 1;
                r.trace_writer_id = op->writer_id;
                tg_ipc_client_invoke(p->cli, p->proxy, "UnregisterTraceWriter", &r.base, -1, NULL, NULL);
            }
        }
        free(op);
        op = next;
    }
    if (p->cli && p->proxy && p->state == TG_PR_READY)
        send_batch(p, &b, flush_request_id);
    while (sent_head) {
        struct tg_pr_op *n2 = sent_head->next;
        free(sent_head);
        sent_head = n2;
    }
    free(b.moves);
    free(b.ptrs);
}

/* ---- writers ---- */

/* smb_writer commit callback: runs on the writer's thread with w->mu held. */
static void on_writer_commit(void *ctx, const struct tg_smb_commit *c)
{
    tg_trace_writer *w = ctx;
    size_t len = c->chunk_data ? c->chunk_size : 0;
    struct tg_pr_op *op = op_new(TG_PR_OP_CHUNK, w->gen, c->writer_id, c->target_buffer, len);
    if (!op) {
        tg_warn(TG_PR_LOG, "out of memory: dropping a chunk commit");
        return;
    }
    op->page = (uint32_t)c->page;
    op->chunk = c->chunk;
    if (len)
        memcpy(op->data, c->chunk_data, len);
    push_op(w->p, op);
}

/* ---- stall then drop ---- */

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* smb_writer stall hook, with w->mu held (see smb_writer.h). The service
 * frees a chunk only after it read the CommitData naming it: on the loop
 * thread this sends what is queued and writes it to the socket now (the loop
 * will not run until the write returns); elsewhere the loop thread does that
 * (it was woken when the chunks were queued). Then it waits a little, longer
 * each time (20 us doubling to 1 ms), and says to look again, until the stall
 * has lasted stall_max_ns, the writer is being retired, or the connection is
 * gone. */
bool tg_pr_writer_stall(void *ctx, unsigned attempt)
{
    tg_trace_writer *w = ctx;
    tg_producer *p = w->p;
    uint64_t now = mono_ns();
    bool on_loop = tg_pr_on_loop_thread(p);
    bool cancel = atomic_load(&w->stall_cancel) || (on_loop && (p->state != TG_PR_READY || !p->cli));
    if (attempt == 0) {
        if (w->stall_spent || cancel)
            return false; /* the last stall gave up and no packet got a chunk since, or stopping */
        if (w->stall_t0_ns) /* a second stall in one packet (its continuation) */
            w->stall_ns += now - w->stall_t0_ns;
        w->stall_t0_ns = now;
        w->stalls++;
        atomic_store(&w->stalling, true);
    }
    if (cancel || now - w->stall_t0_ns >= w->stall_max_ns) {
        if (!cancel) {
            w->stall_spent = true;
            w->stalls_given_up++;
        }
        return false; /* the write's end accounts for the time (stall_end) */
    }
    if (on_loop && attempt % 2 == 0) {
        tg_pr_drain(p, 0);
        tg_conn *conn = p->cli ? tg_ipc_client_conn(p->cli) : NULL;
        if (!conn || tg_conn_write_now(conn) != 0)
            return false; /* the connection is closing (a write error): nobody will free a chunk */
    }
    unsigned shift = attempt < 6 ? attempt : 6;
    uint64_t ns = 20000ull << shift;
    if (ns > 1000000ull)
        ns = 1000000ull;
    struct timespec ts = {0, (long)ns};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
    return true;
}

/* After each write (w->mu held): ends the stall accounting; a packet that got
 * its chunks lets the next full SMB stall again. */
static void stall_end(tg_trace_writer *w, int rc)
{
    if (w->stall_t0_ns) {
        w->stall_ns += mono_ns() - w->stall_t0_ns;
        w->stall_t0_ns = 0;
        atomic_store(&w->stalling, false);
    }
    if (rc == TG_SMB_WRITER_OK)
        w->stall_spent = false;
}

static int alloc_writer_id_locked(tg_producer *p)
{
    for (unsigned i = 0; i < TG_SMB_MAX_WRITER_ID; i++) {
        unsigned id = 1 + (p->next_writer_id - 1 + i) % TG_SMB_MAX_WRITER_ID;
        if (!(p->writer_ids[id / 8] & (1u << (id % 8)))) {
            p->writer_ids[id / 8] |= (uint8_t)(1u << (id % 8));
            p->next_writer_id = id % TG_SMB_MAX_WRITER_ID + 1;
            return (int)id;
        }
    }
    return -1;
}

static void free_writer_id_locked(tg_producer *p, unsigned id)
{
    p->writer_ids[id / 8] &= (uint8_t)~(1u << (id % 8));
}

tg_trace_writer *tg_producer_create_writer(tg_producer *p, uint64_t instance_id)
{
    if (!p || instance_id == 0)
        return NULL;
    tg_trace_writer *w = calloc(1, sizeof *w);
    if (!w)
        return NULL;
    if (pthread_mutex_init(&w->mu, NULL) != 0) {
        free(w);
        return NULL;
    }
    pthread_mutex_lock(&p->mu);
    struct tg_pr_instance *inst = tg_pr_find_instance(p, instance_id);
    int id = -1;
    if (inst && p->have_smb)
        id = alloc_writer_id_locked(p);
    if (id < 0) {
        pthread_mutex_unlock(&p->mu);
        pthread_mutex_destroy(&w->mu);
        free(w);
        return NULL;
    }
    w->p = p;
    w->id = (uint16_t)id;
    w->instance_id = instance_id;
    w->target_buffer = inst->target_buffer;
    w->gen = p->gen;
    atomic_init(&w->incr_reset, true);
    atomic_init(&w->stalling, false);
    atomic_init(&w->stall_cancel, false);
    if (inst->policy == TG_BUFFER_EXHAUSTED_STALL_THEN_DROP && !p->emulation)
        w->stall_max_ns = (uint64_t)inst->ds->stall_max_ms * 1000000u;
    struct tg_smb_writer_config cfg = {
        .smb = &p->smb,
        .writer_id = w->id,
        .target_buffer = w->target_buffer,
        .layout = TG_SMB_LAYOUT_DIV1,
        .emulation = p->emulation,
        .commit = on_writer_commit,
        .commit_ctx = w,
        .stall = w->stall_max_ns ? tg_pr_writer_stall : NULL,
    };
    if (tg_smb_writer_init(&w->sw, &cfg) != TG_SMB_WRITER_OK) {
        free_writer_id_locked(p, w->id);
        pthread_mutex_unlock(&p->mu);
        pthread_mutex_destroy(&w->mu);
        free(w);
        return NULL;
    }
    w->active = true;
    w->next = p->writers;
    p->writers = w;
    uint64_t gen = p->gen;
    pthread_mutex_unlock(&p->mu);

    struct tg_pr_op *op = op_new(TG_PR_OP_REGISTER_WRITER, gen, w->id, w->target_buffer, 0);
    if (op)
        push_op(p, op);
    return w;
}

static void free_writer(tg_trace_writer *w)
{
    pthread_mutex_destroy(&w->mu);
    free(w);
}

void tg_trace_writer_destroy(tg_trace_writer *w)
{
    if (!w)
        return;
    tg_producer *p = w->p;
    pthread_mutex_lock(&p->mu);
    for (tg_trace_writer **pp = &p->writers; *pp; pp = &(*pp)->next) {
        if (*pp == w) {
            *pp = w->next;
            break;
        }
    }
    pthread_mutex_lock(&w->mu);
    if (w->active)
        tg_smb_writer_close(&w->sw);
    w->active = false;
    pthread_mutex_unlock(&w->mu);
    free_writer_id_locked(p, w->id);
    uint64_t gen = w->gen;
    pthread_mutex_unlock(&p->mu);

    /* Also for a writer retired at stop: it is still registered with the
     * service. Ops of an older connection are discarded by the drain. */
    struct tg_pr_op *op = op_new(TG_PR_OP_UNREGISTER_WRITER, gen, w->id, w->target_buffer, 0);
    if (op)
        push_op(p, op);
    free_writer(w);
}

void tg_pr_free_all_writers_locked(tg_producer *p)
{
    while (p->writers) {
        tg_trace_writer *w = p->writers;
        p->writers = w->next;
        free_writer(w);
    }
}

/* Appended to a packet after data loss: previous_packet_dropped (field 42) =
 * DATA_LOSS_PRESENT | DATA_LOSS_SMB_FULL (0x101). Appending is valid protobuf
 * (fields may come in any order). */
static const uint8_t k_dropped_suffix[] = {0xD0, 0x02, 0x81, 0x02};

int tg_trace_writer_write(tg_trace_writer *w, const void *packet, size_t len)
{
    if (!w || (!packet && len))
        return TG_TRACE_WRITER_EINVAL;
    pthread_mutex_lock(&w->mu);
    if (!w->active) {
        pthread_mutex_unlock(&w->mu);
        return TG_TRACE_WRITER_INACTIVE;
    }
    int rc;
    if (tg_smb_writer_take_data_lost(&w->sw)) {
        uint8_t *buf = malloc(len + sizeof k_dropped_suffix);
        if (!buf) {
            w->sw.data_lost = true;
            pthread_mutex_unlock(&w->mu);
            return TG_TRACE_WRITER_DROPPED;
        }
        if (len)
            memcpy(buf, packet, len);
        memcpy(buf + len, k_dropped_suffix, sizeof k_dropped_suffix);
        rc = tg_smb_writer_write_packet(&w->sw, buf, len + sizeof k_dropped_suffix);
        free(buf);
    } else {
        rc = tg_smb_writer_write_packet(&w->sw, packet, len);
    }
    stall_end(w, rc);
    pthread_mutex_unlock(&w->mu);
    if (rc == TG_SMB_WRITER_OK)
        return TG_TRACE_WRITER_OK;
    return rc == TG_SMB_WRITER_DROPPED ? TG_TRACE_WRITER_DROPPED : TG_TRACE_WRITER_EINVAL;
}

int tg_trace_writer_write_msg(tg_trace_writer *w, const ProtobufCMessage *packet)
{
    if (!w || !packet)
        return TG_TRACE_WRITER_EINVAL;
    size_t n = protobuf_c_message_get_packed_size(packet);
    uint8_t stackbuf[512];
    uint8_t *buf = n <= sizeof stackbuf ? stackbuf : malloc(n);
    if (!buf)
        return TG_TRACE_WRITER_DROPPED;
    protobuf_c_message_pack(packet, buf);
    int rc = tg_trace_writer_write(w, buf, n);
    if (buf != stackbuf)
        free(buf);
    return rc;
}

int tg_trace_writer_flush(tg_trace_writer *w)
{
    if (!w)
        return TG_TRACE_WRITER_EINVAL;
    pthread_mutex_lock(&w->mu);
    bool active = w->active;
    if (active)
        tg_smb_writer_flush(&w->sw);
    pthread_mutex_unlock(&w->mu);
    return active ? TG_TRACE_WRITER_OK : TG_TRACE_WRITER_INACTIVE;
}

bool tg_trace_writer_take_incremental_reset(tg_trace_writer *w)
{
    return w && atomic_exchange(&w->incr_reset, false);
}

bool tg_trace_writer_active(const tg_trace_writer *w)
{
    if (!w)
        return false;
    pthread_mutex_lock((pthread_mutex_t *)&w->mu);
    bool a = w->active;
    pthread_mutex_unlock((pthread_mutex_t *)&w->mu);
    return a;
}

bool tg_trace_writer_stalling(const tg_trace_writer *w)
{
    return w && atomic_load(&((tg_trace_writer *)w)->stalling);
}

uint16_t tg_trace_writer_id(const tg_trace_writer *w) { return w ? w->id : 0; }
uint32_t tg_trace_writer_target_buffer(const tg_trace_writer *w) { return w ? w->target_buffer : 0; }
uint64_t tg_trace_writer_instance_id(const tg_trace_writer *w) { return w ? w->instance_id : 0; }

void tg_trace_writer_get_stats(tg_trace_writer *w, struct tg_trace_writer_stats *st)
{
    memset(st, 0, sizeof *st);
    if (!w)
        return;
    pthread_mutex_lock(&w->mu);
    st->packets_written = w->sw.stats.packets_written;
    st->packets_dropped = w->sw.stats.packets_dropped;
    st->chunks_committed = w->sw.stats.chunks_committed;
    st->bytes_written = w->sw.stats.bytes_written;
    st->stalls = w->stalls;
    st->stall_us = w->stall_ns / 1000u;
    st->stalls_given_up = w->stalls_given_up;
    pthread_mutex_unlock(&w->mu);
}

/* ---- loop-thread helpers over the writer list (caller holds p->mu) ---- */

/* Locks w->mu unless the writer is stalling on another thread: that stall
 * waits for this (loop) thread to send commits, so waiting for it here would
 * only make it last its whole bound. Its current chunk is committed when the
 * writer gets going again (and the service can scrape it meanwhile). */
static bool lock_unless_stalling(tg_trace_writer *w)
{
    if (!w->stall_max_ns) { /* never stalls (set at creation) */
        pthread_mutex_lock(&w->mu);
        return true;
    }
    for (;;) {
        if (pthread_mutex_trylock(&w->mu) == 0)
            return true;
        if (atomic_load(&w->stalling))
            return false;
        sched_yield(); /* a write in progress: it holds the lock only for one packet */
    }
}

void tg_pr_flush_writers_locked(tg_producer *p, uint64_t instance_id)
{
    for (tg_trace_writer *w = p->writers; w; w = w->next) {
        if (instance_id && w->instance_id != instance_id)
            continue;
        if (!lock_unless_stalling(w))
            continue;
        if (w->active)
            tg_smb_writer_flush(&w->sw);
        pthread_mutex_unlock(&w->mu);
    }
}

void tg_pr_retire_writers_locked(tg_producer *p, uint64_t instance_id, bool commit)
{
    for (tg_trace_writer *w = p->writers; w; w = w->next) {
        if (instance_id && w->instance_id != instance_id)
            continue;
        atomic_store(&w->stall_cancel, true); /* a stall on another thread gives up within 1 ms */
        pthread_mutex_lock(&w->mu);
        if (w->active && commit)
            tg_smb_writer_close(&w->sw); /* no chunk stays BeingWritten */
        w->active = false;
        pthread_mutex_unlock(&w->mu);
    }
}

void tg_pr_mark_incremental_reset_locked(tg_producer *p, uint64_t instance_id)
{
    for (tg_trace_writer *w = p->writers; w; w = w->next)
        if (w->instance_id == instance_id)
            atomic_store(&w->incr_reset, true);
}
