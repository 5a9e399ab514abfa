/* producer.c: the producer library's connection and command handling:
 * connect/bind ProducerPort, InitializeConnection + GetAsyncCommand
 * (pipelined), data source registration, SetupTracing (SMB mapping or shmem
 * emulation), setup/start/stop/flush/clear-incremental-state, reconnects
 * (see tracegate/producer.h). */
#include "config.h"

#include "producer/producer_internal.h"

#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <unistd.h>

#include "data_source_config.pb-c.h"
#include "data_source_descriptor.pb-c.h"
#include "producer_port.pb-c.h"
#include "smb/smb_fd.h"
#include "base/log_sample.h"
#include "tracegate/clock.h"
#include "tracegate/addr.h"
#include "tracegate/log.h"
#include "tracegate/service.h"
#include "track_event_config.pb-c.h"
#include "track_event_descriptor.pb-c.h"

#define LOG TG_PR_LOG
#define SDK_VERSION "tracegate " PACKAGE_VERSION

static void start_connect(tg_producer *p);
static void teardown(tg_producer *p, const char *reason, bool notify_app);

/* ---- small helpers ---- */

struct tg_pr_instance *tg_pr_find_instance(tg_producer *p, uint64_t id)
{
    for (struct tg_pr_instance *i = p->instances; i; i = i->next)
        if (i->id == id)
            return i;
    return NULL;
}

static struct tg_pr_ds *find_ds(tg_producer *p, const char *name)
{
    for (struct tg_pr_ds *d = p->ds_list; d; d = d->next)
        if (name && strcmp(d->name, name) == 0)
            return d;
    return NULL;
}

static char *default_producer_name(void)
{
    char buf[512];
    int fd = open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        ssize_t n = read(fd, buf, sizeof buf - 1);
        close(fd);
        if (n > 0) {
            buf[n] = '\0'; /* argv[0] ends at the first NUL */
            if (buf[0])
                return strdup(buf);
        }
    }
    return strdup("tracegate-producer");
}

static uint64_t make_descriptor_id(const char *name)
{
    /* Non-zero and producer-scoped, like the SDK's random id. */
    uint64_t h = 0xcbf29ce484222325ull ^ ((uint64_t)getpid() << 32);
    for (const char *c = name; *c; c++) {
        h ^= (uint8_t)*c;
        h *= 0x100000001b3ull;
    }
    return h ? h : 1;
}

static void ds_free(struct tg_pr_ds *d)
{
    if (!d)
        return;
    for (size_t i = 0; i < d->n_cats; i++) {
        free((char *)d->cats[i].name);
        free((char *)d->cats[i].description);
        for (size_t t = 0; t < d->cats[i].n_tags; t++)
            free((char *)d->cats[i].tags[t]);
        free((char **)d->cats[i].tags);
    }
    free(d->cats);
    free(d->name);
    free(d);
}

/* ---- SMB ---- */

static void smb_release(tg_producer *p)
{
    if (p->smb_mem) {
        if (p->smb_mmapped)
            munmap(p->smb_mem, p->smb_mem_len);
        else
            free(p->smb_mem);
    }
    p->smb_mem = NULL;
    p->smb_mem_len = 0;
    p->smb_mmapped = false;
    p->have_smb = false;
    memset(&p->smb, 0, sizeof p->smb);
}

/* SetupTracing: map the service's memfd, or lay out a private buffer. */
static int setup_smb(tg_producer *p, uint32_t page_kb, int fd)
{
    if (p->have_smb) {
        tg_warn(LOG, "SetupTracing received twice on one connection; keeping the first SMB");
        if (fd >= 0)
            close(fd);
        return 0;
    }
    size_t page_size = page_kb ? (size_t)page_kb * 1024 : 4096;
    if (!tg_smb_page_size_valid(page_size)) {
        tg_error(LOG, "SetupTracing: invalid page size %u KiB", page_kb);
        if (fd >= 0)
            close(fd);
        return -1;
    }
    void *mem;
    size_t len;
    if (p->emulation) {
        if (fd >= 0)
            close(fd); /* not expected on emulated transports */
        len = TG_PR_EMULATION_SMB_SIZE;
        mem = aligned_alloc(4096, len);
        if (!mem)
            return -1;
        memset(mem, 0, len);
        p->smb_mmapped = false;
    } else {
        if (fd < 0) {
            tg_error(LOG, "SetupTracing carried no shared memory fd");
            return -1;
        }
        const char *why;
        if (tg_smb_fd_check(fd, &len, &why) != 0) {
            /* a file the service could shrink under the mapping would turn
             * this process's next write into SIGBUS */
            tg_error(LOG, "SetupTracing: refusing the shared memory buffer: %s", why);
            close(fd);
            return -1;
        }
        mem = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        close(fd);
        if (mem == MAP_FAILED) {
            tg_error(LOG, "SetupTracing: mmap of %zu bytes failed: %s", len, strerror(errno));
            return -1;
        }
        p->smb_mmapped = true;
    }
    p->smb_mem = mem;
    p->smb_mem_len = len;
    struct tg_smb smb;
    if (tg_smb_init(&smb, mem, len, page_size) != TG_SMB_OK) {
        tg_error(LOG, "SetupTracing: SMB of %zu bytes does not fit pages of %zu", len, page_size);
        smb_release(p);
        return -1;
    }
    pthread_mutex_lock(&p->mu);
    p->smb = smb;
    p->have_smb = true;
    pthread_mutex_unlock(&p->mu);
    tg_info(LOG, "SMB ready: %zu KiB, %zu KiB pages%s", len / 1024, page_size / 1024,
            p->emulation ? " (shmem emulation)" : "");
    return 0;
}

/* ---- data source config view ---- */

struct cfg_view {
    struct tg_data_source_config cfg;
    uint8_t *raw;
};

static void cfg_view_init(struct cfg_view *v, const Perfetto__Protos__DataSourceConfig *c,
                          enum tg_buffer_exhausted_policy policy)
{
    memset(v, 0, sizeof *v);
    v->cfg.effective_policy = policy;
    if (!c)
        return;
    v->cfg.name = c->name;
    v->cfg.buffer_exhausted_policy = c->has_buffer_exhausted_policy ? (uint32_t)c->buffer_exhausted_policy : 0;
    v->cfg.target_buffer = c->target_buffer;
    v->cfg.trace_duration_ms = c->trace_duration_ms;
    v->cfg.stop_timeout_ms = c->stop_timeout_ms;
    v->cfg.tracing_session_id = c->tracing_session_id;
    if (c->track_event_config) {
        v->cfg.enabled_categories = (const char *const *)c->track_event_config->enabled_categories;
        v->cfg.n_enabled_categories = c->track_event_config->n_enabled_categories;
        v->cfg.disabled_categories = (const char *const *)c->track_event_config->disabled_categories;
        v->cfg.n_disabled_categories = c->track_event_config->n_disabled_categories;
    }
    size_t n = protobuf_c_message_get_packed_size(&c->base);
    v->raw = malloc(n ? n : 1);
    if (v->raw) {
        protobuf_c_message_pack(&c->base, v->raw);
        v->cfg.raw = v->raw;
        v->cfg.raw_len = n;
    }
    v->cfg.msg = &c->base;
}

static void cfg_view_free(struct cfg_view *v)
{
    free(v->raw);
}

static int match_list(const char *const *list, size_t n, const char *cat, bool exact)
{
    for (size_t i = 0; i < n; i++) {
        if (!list[i])
            continue;
        if (exact ? strcmp(list[i], cat) == 0 : fnmatch(list[i], cat, 0) == 0)
            return 1;
    }
    return 0;
}

bool tg_data_source_config_category_enabled(const struct tg_data_source_config *cfg, const char *category)
{
    if (!cfg || !category)
        return false;
    if (cfg->n_enabled_categories == 0 && cfg->n_disabled_categories == 0)
        return true;
    if (match_list(cfg->enabled_categories, cfg->n_enabled_categories, category, true))
        return true;
    if (match_list(cfg->disabled_categories, cfg->n_disabled_categories, category, true))
        return false;
    if (match_list(cfg->enabled_categories, cfg->n_enabled_categories, category, false))
        return true;
    return false;
}

/* ---- outgoing simple requests ---- */

static void send_notify(tg_producer *p, const char *method, uint64_t instance_id)
{
    if (!p->cli || !p->proxy)
        return;
    /* NotifyDataSourceStarted/StoppedRequest share the same shape. */
    Perfetto__Protos__NotifyDataSourceStartedRequest r = PERFETTO__PROTOS__NOTIFY_DATA_SOURCE_STARTED_REQUEST__INIT;
    Perfetto__Protos__NotifyDataSourceStoppedRequest s = PERFETTO__PROTOS__NOTIFY_DATA_SOURCE_STOPPED_REQUEST__INIT;
    const ProtobufCMessage *m;
    if (strcmp(method, "NotifyDataSourceStarted") == 0) {
        r.has_data_source_id = 1;
        r.data_source_id = instance_id;
        m = &r.base;
    } else {
        s.has_data_source_id = 1;
        s.data_source_id = instance_id;
        m = &s.base;
    }
    tg_ipc_client_invoke(p->cli, p->proxy, method, m, -1, NULL, NULL);
}

static void maybe_report_connected(tg_producer *p)
{
    if (p->state != TG_PR_READY || p->connected_reported || p->pending_register_acks)
        return;
    p->connected_reported = true;
    tg_info(LOG, "connected to %s as \"%s\"%s", p->addr, p->name, p->emulation ? " (shmem emulation)" : "");
    if (p->on_connected)
        p->on_connected(p, p->cb_arg);
}

static void on_register_reply(tg_ipc_client *cli, int success, int has_more, const uint8_t *reply, size_t len,
                              void *arg)
{
    tg_producer *p = arg;
    (void)has_more;
    (void)reply;
    (void)len;
    if (cli != p->cli || (!success && !tg_ipc_client_connected(cli)))
        return;
    if (!success)
        tg_warn(LOG, "RegisterDataSource was rejected");
    if (p->pending_register_acks)
        p->pending_register_acks--;
    maybe_report_connected(p);
}

static void send_register(tg_producer *p, struct tg_pr_ds *d)
{
    Perfetto__Protos__DataSourceDescriptor desc = PERFETTO__PROTOS__DATA_SOURCE_DESCRIPTOR__INIT;
    Perfetto__Protos__TrackEventDescriptor ted = PERFETTO__PROTOS__TRACK_EVENT_DESCRIPTOR__INIT;
    Perfetto__Protos__TrackEventCategory *cats = NULL, **cat_ptrs = NULL;
    desc.name = d->name;
    desc.has_will_notify_on_stop = 1;
    desc.will_notify_on_stop = d->will_notify_on_stop;
    desc.has_will_notify_on_start = 1;
    desc.will_notify_on_start = d->will_notify_on_start;
    desc.has_handles_incremental_state_clear = 1;
    desc.handles_incremental_state_clear = d->handles_incremental_state_clear;
    desc.has_id = 1;
    desc.id = d->descriptor_id;
    desc.has_no_flush = 1;
    desc.no_flush = d->no_flush;
    if (d->n_cats) {
        cats = calloc(d->n_cats, sizeof *cats);
        cat_ptrs = calloc(d->n_cats, sizeof *cat_ptrs);
        if (cats && cat_ptrs) {
            for (size_t i = 0; i < d->n_cats; i++) {
                perfetto__protos__track_event_category__init(&cats[i]);
                cats[i].name = (char *)d->cats[i].name;
                cats[i].description = (char *)d->cats[i].description;
                cats[i].n_tags = d->cats[i].n_tags;
                cats[i].tags = (char **)d->cats[i].tags;
                cat_ptrs[i] = &cats[i];
            }
            ted.n_available_categories = d->n_cats;
            ted.available_categories = cat_ptrs;
            desc.track_event_descriptor = &ted;
        }
    }
    Perfetto__Protos__RegisterDataSourceRequest req = PERFETTO__PROTOS__REGISTER_DATA_SOURCE_REQUEST__INIT;
    req.data_source_descriptor = &desc;
    if (tg_ipc_client_invoke(p->cli, p->proxy, "RegisterDataSource", &req.base, -1, on_register_reply, p))
        p->pending_register_acks++;
    free(cats);
    free(cat_ptrs);
}

/* ---- instances ---- */

static void instance_remove(tg_producer *p, struct tg_pr_instance *inst)
{
    pthread_mutex_lock(&p->mu);
    for (struct tg_pr_instance **pp = &p->instances; *pp; pp = &(*pp)->next) {
        if (*pp == inst) {
            *pp = inst->next;
            break;
        }
    }
    pthread_mutex_unlock(&p->mu);
    free(inst);
}

/* The policy an instance's writers use: the data source's, or the config's
 * when the data source lets the config choose and it sets one. */
static enum tg_buffer_exhausted_policy instance_policy(const struct tg_pr_ds *d,
                                                       const Perfetto__Protos__DataSourceConfig *c)
{
    if (d->policy_configurable && c && c->has_buffer_exhausted_policy) {
        switch ((int)c->buffer_exhausted_policy) {
        case PERFETTO__PROTOS__DATA_SOURCE_CONFIG__BUFFER_EXHAUSTED_POLICY__BUFFER_EXHAUSTED_DROP:
            return TG_BUFFER_EXHAUSTED_DROP;
        case PERFETTO__PROTOS__DATA_SOURCE_CONFIG__BUFFER_EXHAUSTED_POLICY__BUFFER_EXHAUSTED_STALL_THEN_ABORT:
        case PERFETTO__PROTOS__DATA_SOURCE_CONFIG__BUFFER_EXHAUSTED_POLICY__BUFFER_EXHAUSTED_STALL_THEN_DROP:
            return TG_BUFFER_EXHAUSTED_STALL_THEN_DROP;
        default: /* unspecified or a value this library does not know: the data source's */
            break;
        }
    }
    return d->policy;
}

static struct tg_pr_instance *setup_instance(tg_producer *p, uint64_t id, const Perfetto__Protos__DataSourceConfig *c)
{
    struct tg_pr_ds *d = find_ds(p, c ? c->name : NULL);
    if (!d) {
        tg_warn(LOG, "setup of instance %llu for unknown data source \"%s\"", (unsigned long long)id,
                c && c->name ? c->name : "");
        return NULL;
    }
    struct tg_pr_instance *inst = tg_pr_find_instance(p, id);
    if (inst)
        return inst;
    unsigned live = 0;
    for (struct tg_pr_instance *i = p->instances; i; i = i->next)
        live += i->ds == d;
    if (live >= TG_PR_MAX_INSTANCES_PER_DS) {
        unsigned unlogged;
        if (tg_log_sample(&p->refusal_log, tg_mono_us(), 5, 1000000u, &unlogged)) {
            char more[64] = "";
            if (unlogged)
                snprintf(more, sizeof more, " (and %u similar refusals not logged)", unlogged);
            tg_warn(LOG, "setup of instance %llu of \"%s\" refused: %u instances of it are running already%s",
                    (unsigned long long)id, d->name, live, more);
        }
        return NULL;
    }
    inst = calloc(1, sizeof *inst);
    if (!inst)
        return NULL;
    inst->id = id;
    inst->ds = d;
    inst->target_buffer = c->target_buffer;
    inst->policy = instance_policy(d, c);
    pthread_mutex_lock(&p->mu);
    inst->next = p->instances;
    p->instances = inst;
    pthread_mutex_unlock(&p->mu);
    tg_debug(LOG, "instance %llu of %s set up (buffer %u)", (unsigned long long)id, d->name, inst->target_buffer);
    if (d->cbs.on_setup) {
        struct cfg_view v;
        cfg_view_init(&v, c, inst->policy);
        d->cbs.on_setup(p, id, &v.cfg, d->cb_arg);
        cfg_view_free(&v);
    }
    return inst;
}

static void start_instance(tg_producer *p, uint64_t id, const Perfetto__Protos__DataSourceConfig *c)
{
    struct tg_pr_instance *inst = tg_pr_find_instance(p, id);
    if (!inst) /* older services send only StartDataSource */
        inst = setup_instance(p, id, c);
    if (!inst || inst->started)
        return;
    inst->started = true;
    struct tg_pr_ds *d = inst->ds;
    tg_info(LOG, "instance %llu of %s started", (unsigned long long)id, d->name);
    if (d->cbs.on_start) {
        struct cfg_view v;
        cfg_view_init(&v, c, inst->policy);
        d->cbs.on_start(p, id, &v.cfg, d->cb_arg);
        cfg_view_free(&v);
    }
    if (d->will_notify_on_start && p->cli)
        send_notify(p, "NotifyDataSourceStarted", id);
}

/* Commits and retires the instance's writers, forgets it, acknowledges the stop. */
static void finish_stop(tg_producer *p, struct tg_pr_instance *inst, bool connected)
{
    uint64_t id = inst->id;
    struct tg_pr_ds *d = inst->ds;
    pthread_mutex_lock(&p->mu);
    tg_pr_retire_writers_locked(p, id, connected);
    pthread_mutex_unlock(&p->mu);
    instance_remove(p, inst);
    tg_info(LOG, "instance %llu of %s stopped", (unsigned long long)id, d->name);
    if (connected) {
        tg_pr_drain(p, 0);
        if (d->will_notify_on_stop)
            send_notify(p, "NotifyDataSourceStopped", id);
    }
}

/* Stop callback, then finish_stop, unless the data source took the stop over
 * (tg_producer_stop_later) and may: only the service's StopDataSource may wait;
 * a dropped connection or an unregistered source finishes at once. */
static void stop_instance(tg_producer *p, struct tg_pr_instance *inst, bool connected, bool may_wait)
{
    struct tg_pr_ds *d = inst->ds;
    if (!inst->stopping) {
        inst->stopping = true;
        if (d->cbs.on_stop)
            d->cbs.on_stop(p, inst->id, d->cb_arg);
    }
    if (inst->stop_later && may_wait && connected)
        return;
    finish_stop(p, inst, connected);
}

void tg_producer_stop_later(tg_producer *p, uint64_t instance_id)
{
    struct tg_pr_instance *inst = tg_pr_find_instance(p, instance_id);
    if (inst && inst->stopping)
        inst->stop_later = true;
}

void tg_producer_stop_done(tg_producer *p, uint64_t instance_id)
{
    struct tg_pr_instance *inst = tg_pr_find_instance(p, instance_id);
    if (inst && inst->stop_later) /* (gone already when the connection dropped meanwhile) */
        finish_stop(p, inst, p->state == TG_PR_READY && p->cli);
}

static void handle_flush(tg_producer *p, const Perfetto__Protos__GetAsyncCommandResponse__Flush *f)
{
    for (size_t i = 0; i < f->n_data_source_ids; i++) {
        struct tg_pr_instance *inst = tg_pr_find_instance(p, f->data_source_ids[i]);
        if (inst && inst->ds->cbs.on_flush)
            inst->ds->cbs.on_flush(p, inst->id, f->flags, inst->ds->cb_arg);
    }
    pthread_mutex_lock(&p->mu);
    if (f->n_data_source_ids == 0) {
        tg_pr_flush_writers_locked(p, 0);
    } else {
        for (size_t i = 0; i < f->n_data_source_ids; i++)
            if (f->data_source_ids[i])
                tg_pr_flush_writers_locked(p, f->data_source_ids[i]);
    }
    pthread_mutex_unlock(&p->mu);
    /* Always ack, even with nothing to commit. */
    tg_pr_drain(p, f->request_id ? f->request_id : 0);
    if (!f->request_id)
        tg_debug(LOG, "flush without request id");
}

static void handle_clear(tg_producer *p, const Perfetto__Protos__GetAsyncCommandResponse__ClearIncrementalState *c)
{
    for (size_t i = 0; i < c->n_data_source_ids; i++) {
        struct tg_pr_instance *inst = tg_pr_find_instance(p, c->data_source_ids[i]);
        if (!inst)
            continue;
        pthread_mutex_lock(&p->mu);
        tg_pr_mark_incremental_reset_locked(p, inst->id);
        pthread_mutex_unlock(&p->mu);
        if (inst->ds->cbs.on_clear_incremental_state)
            inst->ds->cbs.on_clear_incremental_state(p, inst->id, inst->ds->cb_arg);
    }
}

/* ---- IPC callbacks ---- */

static void on_async_cmd(tg_ipc_client *cli, int success, int has_more, const uint8_t *reply, size_t len, void *arg)
{
    tg_producer *p = arg;
    if (cli != p->cli)
        return;
    if (!success && !tg_ipc_client_connected(cli))
        return; /* on_client_disconnect follows with the reason */
    if (!success) {
        teardown(p, "GetAsyncCommand failed", true);
        return;
    }
    Perfetto__Protos__GetAsyncCommandResponse *r = perfetto__protos__get_async_command_response__unpack(NULL, len, reply);
    int fd = tg_ipc_client_take_fd(cli);
    if (!r) {
        tg_warn(LOG, "undecodable GetAsyncCommandResponse (%zu bytes)", len);
        if (fd >= 0)
            close(fd);
    } else {
        switch (r->cmd_case) {
        case PERFETTO__PROTOS__GET_ASYNC_COMMAND_RESPONSE__CMD_SETUP_TRACING: {
            uint32_t kb = r->setup_tracing->has_shared_buffer_page_size_kb ? r->setup_tracing->shared_buffer_page_size_kb : 0;
            int rc = setup_smb(p, kb, fd);
            fd = -1;
            if (rc != 0) {
                perfetto__protos__get_async_command_response__free_unpacked(r, NULL);
                teardown(p, "cannot set up the shared memory buffer", true);
                return;
            }
            break;
        }
        case PERFETTO__PROTOS__GET_ASYNC_COMMAND_RESPONSE__CMD_SETUP_DATA_SOURCE:
            setup_instance(p, r->setup_data_source->new_instance_id, r->setup_data_source->config);
            break;
        case PERFETTO__PROTOS__GET_ASYNC_COMMAND_RESPONSE__CMD_START_DATA_SOURCE:
            start_instance(p, r->start_data_source->new_instance_id, r->start_data_source->config);
            break;
        case PERFETTO__PROTOS__GET_ASYNC_COMMAND_RESPONSE__CMD_STOP_DATA_SOURCE: {
            struct tg_pr_instance *inst = tg_pr_find_instance(p, r->stop_data_source->instance_id);
            if (inst)
                stop_instance(p, inst, true, true);
            else
                tg_debug(LOG, "stop of unknown instance %llu", (unsigned long long)r->stop_data_source->instance_id);
            break;
        }
        case PERFETTO__PROTOS__GET_ASYNC_COMMAND_RESPONSE__CMD_FLUSH:
            handle_flush(p, r->flush);
            break;
        case PERFETTO__PROTOS__GET_ASYNC_COMMAND_RESPONSE__CMD_CLEAR_INCREMENTAL_STATE:
            handle_clear(p, r->clear_incremental_state);
            break;
        default:
            tg_debug(LOG, "ignoring async command %d", (int)r->cmd_case);
            break;
        }
        perfetto__protos__get_async_command_response__free_unpacked(r, NULL);
        if (fd >= 0)
            close(fd);
    }
    if (!has_more && cli == p->cli)
        teardown(p, "GetAsyncCommand stream ended", true);
}

static void on_init_reply(tg_ipc_client *cli, int success, int has_more, const uint8_t *reply, size_t len, void *arg)
{
    tg_producer *p = arg;
    (void)has_more;
    if (cli != p->cli)
        return;
    if (!success && !tg_ipc_client_connected(cli))
        return; /* on_client_disconnect follows with the reason */
    if (!success) {
        teardown(p, "InitializeConnection rejected", true);
        return;
    }
    Perfetto__Protos__InitializeConnectionResponse *r =
        perfetto__protos__initialize_connection_response__unpack(NULL, len, reply);
    p->emulation = r && r->has_use_shmem_emulation && r->use_shmem_emulation;
    if (r)
        perfetto__protos__initialize_connection_response__free_unpacked(r, NULL);
    p->state = TG_PR_READY;
    p->backoff_ms = 0;
    for (struct tg_pr_ds *d = p->ds_list; d; d = d->next)
        send_register(p, d);
    maybe_report_connected(p);
}

static void on_bind(tg_ipc_client *cli, tg_ipc_service_proxy *proxy, void *arg)
{
    tg_producer *p = arg;
    if (cli != p->cli)
        return;
    if (!proxy && !tg_ipc_client_connected(cli))
        return; /* on_client_disconnect follows with the reason */
    if (!proxy) {
        teardown(p, "the service does not offer ProducerPort", true);
        return;
    }
    p->proxy = proxy;
    p->state = TG_PR_INITIALIZING;
    Perfetto__Protos__InitializeConnectionRequest req = PERFETTO__PROTOS__INITIALIZE_CONNECTION_REQUEST__INIT;
    req.has_shared_memory_page_size_hint_bytes = 1;
    req.shared_memory_page_size_hint_bytes = p->smb_page_hint;
    req.has_shared_memory_size_hint_bytes = 1;
    req.shared_memory_size_hint_bytes = p->smb_size_hint;
    req.producer_name = p->name;
    req.has_smb_scraping_mode = 1;
    req.smb_scraping_mode = PERFETTO__PROTOS__INITIALIZE_CONNECTION_REQUEST__PRODUCER_SMBSCRAPING_MODE__SMB_SCRAPING_ENABLED;
    req.sdk_version = (char *)SDK_VERSION;
    /* Pipelined like the SDK: GetAsyncCommand goes out without waiting. */
    if (!tg_ipc_client_invoke(cli, proxy, "InitializeConnection", &req.base, -1, on_init_reply, p) ||
        !tg_ipc_client_invoke(cli, proxy, "GetAsyncCommand", NULL, -1, on_async_cmd, p))
        teardown(p, "cannot send InitializeConnection", true);
}

static void on_client_disconnect(tg_ipc_client *cli, const char *reason, void *arg)
{
    tg_producer *p = arg;
    if (cli != p->cli)
        return;
    teardown(p, reason ? reason : "disconnected", true);
}

/* ---- connection lifecycle ---- */

static void schedule_connect(tg_producer *p, unsigned delay_ms)
{
    struct timeval tv = {delay_ms / 1000, (long)(delay_ms % 1000) * 1000};
    evtimer_add(p->connect_ev, &tv);
}

static void connect_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    start_connect(arg);
}

static void start_connect(tg_producer *p)
{
    if (p->cli || p->freeing)
        return;
    char err[256] = "";
    static const struct tg_ipc_client_cbs cbs = {.on_disconnect = on_client_disconnect};
    p->state = TG_PR_CONNECTING;
    p->connected_reported = false;
    p->pending_register_acks = 0;
    p->emulation = false;
    p->cli = p->connect ? p->connect(p->base, p->addr, &cbs, p, p->connect_arg, err, sizeof err)
                        : tg_ipc_client_connect(p->base, p->addr, NULL, &cbs, p, err, sizeof err);
    if (!p->cli) {
        teardown(p, err[0] ? err : "cannot connect", true);
        return;
    }
    if (tg_ipc_client_bind(p->cli, "ProducerPort", on_bind, p) != 0)
        teardown(p, "cannot send BindService", true);
}

/* The single teardown path: stop instances, retire writers, drop queued
 * commits, unmap the SMB, report, maybe schedule a reconnect. */
static void teardown(tg_producer *p, const char *reason, bool notify_app)
{
    bool was_connected = p->connected_reported;
    if (p->cli) {
        tg_ipc_client *cli = p->cli;
        p->cli = NULL;
        p->proxy = NULL;
        tg_ipc_client_free(cli);
    }
    p->state = TG_PR_IDLE;
    p->connected_reported = false;
    p->pending_register_acks = 0;
    /* Stop running instances (the SDK calls OnStop on disconnect). */
    while (p->instances) {
        struct tg_pr_instance *inst = p->instances;
        if (notify_app) {
            stop_instance(p, inst, false, false);
        } else {
            pthread_mutex_lock(&p->mu);
            tg_pr_retire_writers_locked(p, inst->id, false);
            pthread_mutex_unlock(&p->mu);
            instance_remove(p, inst);
        }
    }
    pthread_mutex_lock(&p->mu);
    tg_pr_retire_writers_locked(p, 0, false);
    p->gen++;
    p->have_smb = false;
    pthread_mutex_unlock(&p->mu);
    tg_pr_queue_clear(p);
    smb_release(p);
    if (!notify_app)
        return;
    if (was_connected)
        tg_warn(LOG, "disconnected from %s: %s", p->addr, reason);
    else
        tg_debug(LOG, "cannot connect to %s: %s", p->addr, reason);
    if (p->on_disconnected)
        p->on_disconnected(p, reason, p->cb_arg);
    if (p->reconnect && !p->freeing && !p->cli) {
        unsigned d = p->backoff_ms ? p->backoff_ms : p->backoff_min_ms;
        p->backoff_ms = d * 2 > p->backoff_max_ms ? p->backoff_max_ms : d * 2;
        schedule_connect(p, d);
    }
}

/* ---- public API ---- */

tg_producer *tg_producer_new(struct event_base *base, const struct tg_producer_opts *opts, char *err, size_t errlen)
{
    struct tg_producer_opts o = {0};
    if (opts)
        o = *opts;
    if (!base) {
        snprintf(err, errlen, "no event base");
        return NULL;
    }
    char addr[512];
    if (o.socket && *o.socket) {
        snprintf(addr, sizeof addr, "%s", o.socket);
    } else {
        tg_service_default_sockets(addr, sizeof addr, NULL, 0);
        char *comma = strchr(addr, ','); /* the service side allows a list */
        if (comma)
            *comma = '\0';
    }
    struct tg_addr a;
    if (!o.connect && tg_addr_parse(addr, &a, err, errlen) != 0)
        return NULL;
    uint32_t page = o.smb_page_size_hint_kb * 1024u, size = o.smb_size_hint_kb * 1024u;
    if (page && (page % 4096 || page > 32768 || (page & (page - 1)))) {
        snprintf(err, errlen, "SMB page size hint must be 4, 8, 16 or 32 KiB");
        return NULL;
    }
    if (size && page && size % page) {
        snprintf(err, errlen, "SMB size hint must be a multiple of the page size");
        return NULL;
    }

    tg_producer *p = calloc(1, sizeof *p);
    if (!p) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    p->base = base;
    p->loop_thread = pthread_self();
    p->wake_fd = -1;
    pthread_mutex_init(&p->mu, NULL);
    pthread_mutex_init(&p->qmu, NULL);
    p->addr = strdup(addr);
    p->name = o.name ? strdup(o.name) : default_producer_name();
    p->smb_page_hint = page;
    p->smb_size_hint = size;
    p->reconnect = o.reconnect;
    p->connect = o.connect;
    p->connect_arg = o.connect_arg;
    p->backoff_min_ms = o.reconnect_min_ms ? o.reconnect_min_ms : 100;
    p->backoff_max_ms = o.reconnect_max_ms ? o.reconnect_max_ms : 5000;
    if (p->backoff_max_ms < p->backoff_min_ms)
        p->backoff_max_ms = p->backoff_min_ms;
    p->on_connected = o.on_connected;
    p->on_disconnected = o.on_disconnected;
    p->cb_arg = o.cb_arg;
    p->next_writer_id = 1;
    p->gen = 1;
    p->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (p->wake_fd >= 0)
        p->wake_ev = event_new(base, p->wake_fd, EV_READ | EV_PERSIST, tg_pr_wake_cb, p);
    p->connect_ev = evtimer_new(base, connect_cb, p);
    if (!p->addr || !p->name || p->wake_fd < 0 || !p->wake_ev || !p->connect_ev || event_add(p->wake_ev, NULL) != 0) {
        snprintf(err, errlen, "out of memory");
        tg_producer_free(p);
        return NULL;
    }
    /* Connect from the loop, so callbacks never run inside this call. */
    schedule_connect(p, 0);
    return p;
}

void tg_producer_free(tg_producer *p)
{
    if (!p)
        return;
    p->freeing = true;
    teardown(p, "producer freed", false);
    pthread_mutex_lock(&p->mu);
    tg_pr_free_all_writers_locked(p);
    pthread_mutex_unlock(&p->mu);
    while (p->ds_list) {
        struct tg_pr_ds *d = p->ds_list;
        p->ds_list = d->next;
        ds_free(d);
    }
    if (p->wake_ev)
        event_free(p->wake_ev);
    if (p->connect_ev)
        event_free(p->connect_ev);
    if (p->wake_fd >= 0)
        close(p->wake_fd);
    pthread_mutex_destroy(&p->mu);
    pthread_mutex_destroy(&p->qmu);
    free(p->addr);
    free(p->name);
    free(p);
}

bool tg_producer_connected(const tg_producer *p) { return p && p->state == TG_PR_READY; }
bool tg_producer_emulation(const tg_producer *p) { return p && p->emulation; }
const char *tg_producer_socket(const tg_producer *p) { return p ? p->addr : NULL; }

int tg_producer_register_data_source(tg_producer *p, const struct tg_data_source_desc *desc)
{
    if (!p || !desc || !desc->name || !*desc->name || find_ds(p, desc->name))
        return -1;
    struct tg_pr_ds *d = calloc(1, sizeof *d);
    if (!d)
        return -1;
    d->name = strdup(desc->name);
    bool oom = !d->name;
    if (desc->n_categories && desc->categories) {
        d->cats = calloc(desc->n_categories, sizeof *d->cats);
        oom |= !d->cats;
        for (size_t i = 0; !oom && i < desc->n_categories; i++) {
            const struct tg_track_event_category *c = &desc->categories[i];
            d->n_cats++;
            d->cats[i].name = strdup(c->name ? c->name : "");
            d->cats[i].description = c->description ? strdup(c->description) : NULL;
            oom |= !d->cats[i].name || (c->description && !d->cats[i].description);
            if (c->n_tags && c->tags) {
                char **tags = calloc(c->n_tags, sizeof *tags);
                d->cats[i].tags = (const char *const *)tags;
                oom |= !tags;
                for (size_t t = 0; tags && t < c->n_tags; t++) {
                    tags[t] = strdup(c->tags[t] ? c->tags[t] : "");
                    d->cats[i].n_tags++;
                    oom |= !tags[t];
                }
            }
        }
    }
    if (oom) {
        ds_free(d);
        return -1;
    }
    d->will_notify_on_start = desc->will_notify_on_start;
    d->will_notify_on_stop = desc->will_notify_on_stop;
    d->handles_incremental_state_clear = desc->handles_incremental_state_clear;
    d->no_flush = desc->no_flush;
    d->policy = desc->buffer_exhausted_policy == TG_BUFFER_EXHAUSTED_STALL_THEN_DROP ? TG_BUFFER_EXHAUSTED_STALL_THEN_DROP
                                                                                   : TG_BUFFER_EXHAUSTED_DROP;
    d->policy_configurable = desc->buffer_exhausted_policy_configurable;
    d->stall_max_ms = desc->stall_max_ms ? desc->stall_max_ms : TG_PR_STALL_DEFAULT_MS;
    if (d->stall_max_ms > TG_PR_STALL_MAX_MS)
        d->stall_max_ms = TG_PR_STALL_MAX_MS;
    d->cbs = desc->cbs;
    d->cb_arg = desc->cb_arg;
    d->descriptor_id = make_descriptor_id(d->name);
    /* Append, so registration order is the app's order. */
    struct tg_pr_ds **pp = &p->ds_list;
    while (*pp)
        pp = &(*pp)->next;
    *pp = d;
    if (p->state == TG_PR_READY && p->cli)
        send_register(p, d);
    return 0;
}

int tg_producer_unregister_data_source(tg_producer *p, const char *name)
{
    struct tg_pr_ds *d = p ? find_ds(p, name) : NULL;
    if (!d)
        return -1;
    for (struct tg_pr_instance *i = p->instances, *next; i; i = next) {
        next = i->next;
        if (i->ds == d)
            stop_instance(p, i, p->state == TG_PR_READY, false);
    }
    if (p->state == TG_PR_READY && p->cli) {
        Perfetto__Protos__UnregisterDataSourceRequest r = PERFETTO__PROTOS__UNREGISTER_DATA_SOURCE_REQUEST__INIT;
        r.data_source_name = d->name;
        tg_ipc_client_invoke(p->cli, p->proxy, "UnregisterDataSource", &r.base, -1, NULL, NULL);
    }
    for (struct tg_pr_ds **pp = &p->ds_list; *pp; pp = &(*pp)->next) {
        if (*pp == d) {
            *pp = d->next;
            break;
        }
    }
    ds_free(d);
    return 0;
}

void tg_producer_commit_now(tg_producer *p)
{
    if (p)
        tg_pr_drain(p, 0);
}

int tg_producer_activate_triggers(tg_producer *p, const char *const *names, size_t n)
{
    if (!p || p->state != TG_PR_READY || !p->cli)
        return -1;
    Perfetto__Protos__ActivateTriggersRequest r = PERFETTO__PROTOS__ACTIVATE_TRIGGERS_REQUEST__INIT;
    r.n_trigger_names = n;
    r.trigger_names = (char **)names;
    return tg_ipc_client_invoke(p->cli, p->proxy, "ActivateTriggers", &r.base, -1, NULL, NULL) ? 0 : -1;
}
