/* flush.c: session flushes (perfetto-wire-facts §2.3, §3.3): Flush commands
 * fanned out to every producer with a running data source of the session
 * (no_flush sources skipped; remote producers still get an empty one), acks
 * through CommitData.flush_request_id (one ack clears every pending request
 * up to it), the timeout, the scrape that follows every flush, the
 * flush counters and lifecycle events, and the bound on flushes waiting. */
#include "service/svc.h"

#include "tracegate/log.h"

#include <event2/event.h>
#include <stdlib.h>

void tg_svc_flush_free(tg_svc_flush *f)
{
    if (f->timeout)
        event_free(f->timeout);
    free(f->pending);
    free(f);
}

static void flush_unlink(tg_svc_flush *f)
{
    for (tg_svc_flush **pp = &f->s->flushes; *pp; pp = &(*pp)->next) {
        if (*pp == f) {
            *pp = f->next;
            return;
        }
    }
}

void tg_svc_session_scrape(tg_svc_session *s)
{
    for (tg_svc_producer *p = s->svc->producers; p; p = p->next)
        if (p->initialized && p->scraping && tg_smb_host_valid(&p->smb))
            tg_svc_scrape_producer(p, s);
}

static void flush_finish(tg_svc_flush *f, bool ok)
{
    tg_svc_session *s = f->s;
    flush_unlink(f);
    tg_svc_session_scrape(s);
    if (ok) {
        s->flushes_succeeded++;
        tg_svc_session_event(s, TG_EV_ALL_DATA_SOURCES_FLUSHED);
    } else {
        s->flushes_failed++;
        tg_warn(TG_SVC_LOG, "session %llu: flush timed out (%zu producers did not ack)", (unsigned long long)s->id,
                f->n_pending);
    }
    if (f->done)
        f->done(s, f, ok);
    tg_svc_flush_free(f);
}

static void on_flush_timeout(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    tg_svc_flush *f = arg;
    flush_finish(f, false);
}

size_t tg_svc_session_pending_flushes(const tg_svc_session *s)
{
    size_t n = 0;
    for (const tg_svc_flush *f = s->flushes; f; f = f->next)
        n++;
    return n;
}

static void flush_start(tg_svc_session *s, uint32_t timeout_ms, uint64_t flags, tg_svc_flush_done_fn done,
                        tg_ipc_call *call, void *arg)
{
    tg_service *svc = s->svc;
    tg_svc_flush *f = calloc(1, sizeof *f);
    if (!f) {
        if (done) {
            tg_svc_flush tmp = {.s = s, .call = call, .arg = arg};
            done(s, &tmp, false);
        }
        return;
    }
    f->s = s;
    f->done = done;
    f->call = call;
    f->arg = arg;
    s->flushes_requested++;
    tg_svc_session_event(s, TG_EV_FLUSH_STARTED);
    f->next = s->flushes;
    s->flushes = f;
    for (tg_svc_producer *p = svc->producers; p; p = p->next) {
        if (!p->initialized)
            continue;
        size_t nids = 0, nall = 0;
        for (tg_svc_ds_inst *ds = s->instances; ds; ds = ds->next) {
            if (ds->p != p || ds->state == TG_DS_STOPPED || ds->state == TG_DS_CONFIGURED)
                continue;
            nall++;
            if (!ds->no_flush)
                nids++;
        }
        /* no_flush sources are skipped; remote producers still get an
         * (empty) flush so relayed commits are pushed out, as traced does */
        if (nids == 0 && !(nall > 0 && p->machine_id != 0))
            continue;
        uint64_t *ids = nids ? calloc(nids, sizeof *ids) : NULL;
        size_t k = 0;
        for (tg_svc_ds_inst *ds = s->instances; ds && (ids || !nids); ds = ds->next)
            if (ds->p == p && ds->state != TG_DS_STOPPED && ds->state != TG_DS_CONFIGURED && !ds->no_flush)
                ids[k++] = ds->id;
        struct tg_svc_flush_pending *np = realloc(f->pending, (f->n_pending + 1) * sizeof *np);
        if (!np || (nids && !ids)) {
            free(ids);
            if (np)
                f->pending = np;
            continue;
        }
        f->pending = np;
        uint64_t req = ++svc->last_flush_id;
        f->pending[f->n_pending].producer_id = p->id;
        f->pending[f->n_pending].request_id = req;
        f->n_pending++;
        Perfetto__Protos__GetAsyncCommandResponse cmd = PERFETTO__PROTOS__GET_ASYNC_COMMAND_RESPONSE__INIT;
        Perfetto__Protos__GetAsyncCommandResponse__Flush fl = PERFETTO__PROTOS__GET_ASYNC_COMMAND_RESPONSE__FLUSH__INIT;
        fl.n_data_source_ids = k;
        fl.data_source_ids = ids;
        fl.has_request_id = 1;
        fl.request_id = req;
        fl.has_flags = 1;
        fl.flags = flags;
        cmd.cmd_case = PERFETTO__PROTOS__GET_ASYNC_COMMAND_RESPONSE__CMD_FLUSH;
        cmd.flush = &fl;
        tg_svc_producer_send_cmd(p, &cmd);
        free(ids);
    }
    if (f->n_pending == 0) {
        flush_finish(f, true);
        return;
    }
    f->timeout = evtimer_new(svc->base, on_flush_timeout, f);
    if (f->timeout)
        tg_svc_timer_set(f->timeout, timeout_ms ? timeout_ms : s->flush_timeout_ms);
}

int tg_svc_session_flush(tg_svc_session *s, uint32_t timeout_ms, uint64_t flags, tg_svc_flush_done_fn done,
                         tg_ipc_call *call, void *arg)
{
    if (tg_svc_session_pending_flushes(s) >= TG_SVC_MAX_PENDING_FLUSHES)
        return -1;
    flush_start(s, timeout_ms, flags, done, call, arg);
    return 0;
}

void tg_svc_session_flush_final(tg_svc_session *s, uint32_t timeout_ms, uint64_t flags, tg_svc_flush_done_fn done)
{
    flush_start(s, timeout_ms, flags, done, NULL, NULL);
}

/* Removes acked entries; returns true if some flush became complete. */
static bool ack_pending(tg_service *svc, uint16_t producer_id, uint64_t id, bool all)
{
    bool any = false;
    for (tg_svc_session *s = svc->sessions; s; s = s->next) {
        for (tg_svc_flush *f = s->flushes; f; f = f->next) {
            size_t k = 0;
            for (size_t i = 0; i < f->n_pending; i++) {
                bool acked = f->pending[i].producer_id == producer_id && (all || f->pending[i].request_id <= id);
                if (!acked)
                    f->pending[k++] = f->pending[i];
            }
            if (k != f->n_pending) {
                f->n_pending = k;
                if (k == 0) {
                    f->finished = true;
                    any = true;
                }
            }
        }
    }
    return any;
}

static void complete_ready_flushes(tg_service *svc)
{
    for (;;) {
        tg_svc_flush *ready = NULL;
        for (tg_svc_session *s = svc->sessions; s && !ready; s = s->next)
            for (tg_svc_flush *f = s->flushes; f && !ready; f = f->next)
                if (f->finished)
                    ready = f;
        if (!ready)
            return;
        flush_finish(ready, true);
    }
}

void tg_svc_flush_ack(tg_service *svc, tg_svc_producer *p, uint64_t id)
{
    if (ack_pending(svc, p->id, id, false))
        complete_ready_flushes(svc);
}

void tg_svc_flush_producer_gone(tg_service *svc, tg_svc_producer *p)
{
    /* a producer that went away has nothing more to flush */
    if (ack_pending(svc, p->id, 0, true))
        complete_ready_flushes(svc);
}
