/* tracectl_dump.c: `tracectl dump FILE`: prints the packets of a .pftrace readably (one line per
 * packet with a compact summary of the common payloads, or --raw text format) plus totals. */
#include "tracectl.h"

#include <getopt.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock_anchor.h"
#include "clock_sync_est.h"
#include "flow_table.h"
#include "trace_file.h"
#include "name_counts.h"
#include "trace_ts.h"
#include "u32_index.h"
#include "trace_packet.pb-c.h"
#include "tracegate/textproto.h"

/* ------------------------------------------------------------------ state */

/* Interned strings are scoped to a packet sequence; track names are global. A sequence's
 * strings are valid for one generation of its incremental state: clearing it moves the
 * sequence to the next generation (no walk over the table, however many clears a trace has),
 * and an entry of an older generation is reused when its id is interned again. */
enum { K_EVENT_NAME = 1, K_CATEGORY = 2, K_TRACK_NAME = 3 };
#define MIN_BUCKETS 1024

struct intern {
    struct intern *next;
    uint32_t seq;
    uint32_t kind;
    uint64_t iid;
    uint64_t gen;
    char *name;
};

struct seq_state {
    uint32_t seq;
    uint64_t intern_gen; /* the generation of its incremental state */
    uint64_t packets;
    int has_track;
    uint64_t track_uuid; /* TrackEventDefaults.track_uuid */
    uint32_t clock_id;   /* TracePacketDefaults.timestamp_clock_id */
};

struct dump {
    FILE *out;
    int raw, summary_only;
    int packets_quiet; /* no line per packet (--summary, --flows) */
    struct intern **buckets; /* n_buckets (a power of two), grown past two entries a bucket */
    size_t n_buckets, n_interned;
    struct seq_state *seqs;
    size_t n_seqs, cap_seqs;
    struct tc_u32_index seq_ix; /* sequence id -> seqs[] */
    struct tc_name_counts types, slices, instants, machines; /* first-seen order */
    uint64_t counter_events;
    uint64_t packets, bytes, bad_packets, sync_markers, bad_sync_markers;
    /* RemoteClockSync per machine: BOOTTIME offset (machine minus host) as trace processor derives it */
    struct tc_sync_ests sync;
    int sync_oom;
    /* --flows */
    int flows;
    struct tc_trace_ts tts;
    struct tc_flow_table ft;
    int flows_oom;
    char first_err[512];
};

static int boottime_of(const Perfetto__Protos__ClockSnapshot *cs, uint64_t *v)
{
    for (size_t i = 0; cs && i < cs->n_clocks; i++)
        if (cs->clocks[i]->has_clock_id && cs->clocks[i]->clock_id == 6 && cs->clocks[i]->has_timestamp) {
            *v = cs->clocks[i]->timestamp;
            return 1;
        }
    return 0;
}

/* A RemoteClockSync packet's BOOTTIME readings into the machine's offset estimate. */
static void clock_estimate(struct dump *d, uint32_t machine, const Perfetto__Protos__RemoteClockSync *rcs)
{
    struct tc_sync_reading *r = calloc(rcs->n_synced_clocks ? rcs->n_synced_clocks : 1, sizeof *r);
    if (!r) {
        d->sync_oom = 1;
        return;
    }
    for (size_t i = 0; i < rcs->n_synced_clocks; i++)
        r[i].ok = boottime_of(rcs->synced_clocks[i]->client_clocks, &r[i].client) &&
                  boottime_of(rcs->synced_clocks[i]->host_clocks, &r[i].host);
    if (tc_sync_ests_add(&d->sync, machine, r, rcs->n_synced_clocks) != 0)
        d->sync_oom = 1;
    free(r);
}

static size_t bucket_of(uint32_t seq, uint32_t kind, uint64_t iid, size_t n_buckets)
{
    uint64_t h = iid * 0x9E3779B97F4A7C15ull ^ ((uint64_t)seq << 32 | kind) * 0xC2B2AE3D27D4EB4Full;
    return (size_t)(h >> 32) & (n_buckets - 1);
}

static struct seq_state *seq_get(struct dump *d, uint32_t seq)
{
    size_t at;
    if (tc_u32_index_get(&d->seq_ix, seq, &at))
        return &d->seqs[at];
    if (d->n_seqs == d->cap_seqs) {
        size_t cap = d->cap_seqs ? d->cap_seqs * 2 : 16;
        struct seq_state *ns = realloc(d->seqs, cap * sizeof *ns);
        if (!ns)
            return NULL;
        d->seqs = ns;
        d->cap_seqs = cap;
    }
    if (tc_u32_index_put(&d->seq_ix, seq, d->n_seqs) != 0)
        return NULL;
    struct seq_state *s = &d->seqs[d->n_seqs++];
    memset(s, 0, sizeof *s);
    s->seq = seq;
    return s;
}

/* the generation of a sequence's interned strings (ss NULL: the sequence could not be recorded,
 * out of memory; track names, global, are always generation 0) */
static uint64_t gen_of(const struct seq_state *ss) { return ss ? ss->intern_gen : 0; }

static struct intern *intern_find(const struct dump *d, uint32_t seq, uint32_t kind, uint64_t iid)
{
    if (!d->n_buckets)
        return NULL;
    for (struct intern *e = d->buckets[bucket_of(seq, kind, iid, d->n_buckets)]; e; e = e->next)
        if (e->seq == seq && e->kind == kind && e->iid == iid)
            return e;
    return NULL;
}

/* the name interned as iid on sequence seq in its generation gen, or NULL */
static const char *intern_get(const struct dump *d, uint32_t seq, uint64_t gen, uint32_t kind, uint64_t iid)
{
    const struct intern *e = intern_find(d, seq, kind, iid);
    return e && e->gen == gen ? e->name : NULL;
}

/* doubles the buckets once there are two entries a bucket; 0, or -1 (then the chains grow) */
static int intern_grow(struct dump *d)
{
    if (d->n_buckets && d->n_interned < 2 * d->n_buckets)
        return 0;
    size_t n = d->n_buckets ? d->n_buckets * 2 : MIN_BUCKETS;
    struct intern **nb = calloc(n, sizeof *nb);
    if (!nb)
        return -1;
    for (size_t b = 0; b < d->n_buckets; b++)
        for (struct intern *e = d->buckets[b], *next; e; e = next) {
            next = e->next;
            size_t nbk = bucket_of(e->seq, e->kind, e->iid, n);
            e->next = nb[nbk];
            nb[nbk] = e;
        }
    free(d->buckets);
    d->buckets = nb;
    d->n_buckets = n;
    return 0;
}

static void intern_put(struct dump *d, uint32_t seq, uint64_t gen, uint32_t kind, uint64_t iid, const char *name,
                       size_t len)
{
    if (intern_grow(d) != 0 && !d->n_buckets)
        return;
    struct intern *e = intern_find(d, seq, kind, iid);
    char *copy = malloc(len + 1);
    if (!copy)
        return;
    memcpy(copy, name, len);
    copy[len] = 0;
    if (e) {
        free(e->name);
        e->name = copy;
        e->gen = gen;
        return;
    }
    e = calloc(1, sizeof *e);
    if (!e) {
        free(copy);
        return;
    }
    e->seq = seq;
    e->kind = kind;
    e->iid = iid;
    e->gen = gen;
    e->name = copy;
    size_t b = bucket_of(seq, kind, iid, d->n_buckets);
    e->next = d->buckets[b];
    d->buckets[b] = e;
    d->n_interned++;
}

static void dump_free(struct dump *d)
{
    for (size_t b = 0; b < d->n_buckets; b++) {
        struct intern *e = d->buckets[b];
        while (e) {
            struct intern *n = e->next;
            free(e->name);
            free(e);
            e = n;
        }
    }
    free(d->buckets);
    d->buckets = NULL;
    d->n_buckets = d->n_interned = 0;
    free(d->seqs);
    tc_u32_index_free(&d->seq_ix);
    tc_name_counts_free(&d->types);
    tc_name_counts_free(&d->slices);
    tc_name_counts_free(&d->instants);
    tc_name_counts_free(&d->machines);
    tc_trace_ts_free(&d->tts);
    tc_sync_ests_free(&d->sync);
    tc_flow_table_free(&d->ft);
}

/* ---------------------------------------------------------------- output */

/* A growable line buffer, so each packet is written with one fputs. */
struct line {
    char buf[2048];
    size_t len;
};

static void add(struct line *l, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void add(struct line *l, const char *fmt, ...)
{
    if (l->len >= sizeof l->buf - 1)
        return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(l->buf + l->len, sizeof l->buf - l->len, fmt, ap);
    va_end(ap);
    if (n > 0)
        l->len += (size_t)n < sizeof l->buf - l->len ? (size_t)n : sizeof l->buf - l->len - 1;
}

/* Appends a double-quoted string with non-printable bytes escaped, cut at max bytes. */
static void add_str(struct line *l, const char *s, size_t len, size_t max)
{
    add(l, "\"");
    size_t n = len < max ? len : max;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\')
            add(l, "\\%c", c);
        else if (c < 0x20 || c == 0x7f)
            add(l, "\\x%02x", c);
        else
            add(l, "%c", c);
    }
    add(l, len > max ? "\"..." : "\"");
}

static void add_cstr(struct line *l, const char *s)
{
    add_str(l, s ? s : "", s ? strlen(s) : 0, 80);
}

static const char *enum_name(const ProtobufCEnumDescriptor *ed, int v)
{
    const ProtobufCEnumValue *ev = protobuf_c_enum_descriptor_get_value(ed, v);
    return ev ? ev->name : NULL;
}

static const char *field_name(const ProtobufCMessageDescriptor *md, unsigned number)
{
    const ProtobufCFieldDescriptor *f = protobuf_c_message_descriptor_get_field(md, number);
    return f ? f->name : NULL;
}

static void add_clock(struct line *l, uint32_t id)
{
    const char *n = enum_name(&perfetto__protos__builtin_clock__descriptor, (int)id);
    if (n && strncmp(n, "BUILTIN_CLOCK_", 14) == 0)
        add(l, "%s", n + 14);
    else
        add(l, "clock%u", id);
}

/* ------------------------------------------------------------- summaries */

static void sum_clock_snapshot(struct line *l, const Perfetto__Protos__ClockSnapshot *cs)
{
    add(l, "%zu clocks", cs->n_clocks);
    if (cs->has_primary_trace_clock) {
        add(l, ", primary ");
        add_clock(l, (uint32_t)cs->primary_trace_clock);
    }
    add(l, ":");
    for (size_t i = 0; i < cs->n_clocks; i++) {
        const Perfetto__Protos__ClockSnapshot__Clock *c = cs->clocks[i];
        add(l, " ");
        add_clock(l, c->clock_id);
        add(l, "=%" PRIu64, c->timestamp);
        if (c->is_incremental)
            add(l, "(incr)");
        if (c->has_unit_multiplier_ns)
            add(l, "(x%" PRIu64 "ns)", c->unit_multiplier_ns);
    }
}

static void sum_trace_config(struct line *l, const Perfetto__Protos__TraceConfig *tc)
{
    add(l, "buffers=[");
    for (size_t i = 0; i < tc->n_buffers; i++) {
        const Perfetto__Protos__TraceConfig__BufferConfig *b = tc->buffers[i];
        const char *fp = b->has_fill_policy
                             ? enum_name(&perfetto__protos__trace_config__buffer_config__fill_policy__descriptor,
                                         (int)b->fill_policy)
                             : "RING_BUFFER";
        add(l, "%s%u KiB %s", i ? ", " : "", b->size_kb, fp ? fp : "?");
    }
    add(l, "] data_sources=[");
    for (size_t i = 0; i < tc->n_data_sources; i++) {
        const Perfetto__Protos__DataSourceConfig *c = tc->data_sources[i]->config;
        add(l, "%s%s", i ? ", " : "", c && c->name ? c->name : "?");
        if (c && c->has_target_buffer && c->target_buffer)
            add(l, "->buf%u", c->target_buffer);
    }
    add(l, "]");
    if (tc->has_duration_ms)
        add(l, " duration=%u ms", tc->duration_ms);
    if (tc->write_into_file)
        add(l, " write_into_file");
    if (tc->output_path) {
        add(l, " output_path=");
        add_cstr(l, tc->output_path);
    }
    if (tc->unique_session_name) {
        add(l, " session=");
        add_cstr(l, tc->unique_session_name);
    }
    if (tc->trace_all_machines)
        add(l, " trace_all_machines");
}

static void sum_trace_stats(struct line *l, const Perfetto__Protos__TraceStats *ts)
{
    add(l, "buffers=[");
    for (size_t i = 0; i < ts->n_buffer_stats; i++) {
        const Perfetto__Protos__TraceStats__BufferStats *b = ts->buffer_stats[i];
        add(l, "%s#%zu written %" PRIu64 "/%" PRIu64 " B, %" PRIu64 " chunks", i ? ", " : "", i, b->bytes_written,
            b->buffer_size, b->chunks_written);
        if (b->chunks_overwritten)
            add(l, ", %" PRIu64 " overwritten", b->chunks_overwritten);
        if (b->chunks_discarded)
            add(l, ", %" PRIu64 " discarded", b->chunks_discarded);
        if (b->abi_violations)
            add(l, ", %" PRIu64 " abi violations", b->abi_violations);
        if (b->trace_writer_packet_loss)
            add(l, ", %" PRIu64 " writer losses", b->trace_writer_packet_loss);
    }
    add(l, "] producers=%u seen=%" PRIu64 " data_sources=%u seen=%" PRIu64 " sessions=%u", ts->producers_connected,
        ts->producers_seen, ts->data_sources_registered, ts->data_sources_seen, ts->tracing_sessions);
    if (ts->chunks_discarded)
        add(l, " chunks_discarded=%" PRIu64, ts->chunks_discarded);
    if (ts->patches_discarded)
        add(l, " patches_discarded=%" PRIu64, ts->patches_discarded);
    if (ts->invalid_packets)
        add(l, " invalid_packets=%" PRIu64, ts->invalid_packets);
    if (ts->has_flushes_requested)
        add(l, " flushes=%" PRIu64 "/%" PRIu64 " ok", ts->flushes_succeeded, ts->flushes_requested);
    if (ts->has_final_flush_outcome) {
        const char *o = enum_name(&perfetto__protos__trace_stats__final_flush_outcome__descriptor,
                                  (int)ts->final_flush_outcome);
        add(l, " final_flush=%s", o ? o : "?");
    }
}

static void sum_system_info(struct line *l, const Perfetto__Protos__SystemInfo *si)
{
    if (si->utsname) {
        const Perfetto__Protos__Utsname *u = si->utsname;
        add(l, "%s %s %s", u->sysname ? u->sysname : "?", u->release ? u->release : "?",
            u->machine ? u->machine : "?");
    }
    if (si->tracing_service_version) {
        add(l, " service=");
        add_cstr(l, si->tracing_service_version);
    }
    if (si->machine_name) {
        add(l, " machine=");
        add_cstr(l, si->machine_name);
    }
    if (si->has_num_cpus)
        add(l, " cpus=%u", si->num_cpus);
    if (si->has_page_size)
        add(l, " page_size=%u", si->page_size);
    if (si->has_hz)
        add(l, " hz=%" PRId64, si->hz);
    if (si->has_timezone_off_mins)
        add(l, " tz=%+d min", si->timezone_off_mins);
    if (si->android_build_fingerprint) {
        add(l, " build=");
        add_cstr(l, si->android_build_fingerprint);
    }
}

static void sum_service_event(struct line *l, const Perfetto__Protos__TracingServiceEvent *ev)
{
    const char *n = field_name(&perfetto__protos__tracing_service_event__descriptor, ev->event_type_case);
    add(l, "%s", n ? n : "(no event)");
    switch (ev->event_type_case) {
    case PERFETTO__PROTOS__TRACING_SERVICE_EVENT__EVENT_TYPE_SLOW_STARTING_DATA_SOURCES:
    case PERFETTO__PROTOS__TRACING_SERVICE_EVENT__EVENT_TYPE_LAST_FLUSH_SLOW_DATA_SOURCES: {
        const Perfetto__Protos__TracingServiceEvent__DataSources *ds =
            ev->event_type_case == PERFETTO__PROTOS__TRACING_SERVICE_EVENT__EVENT_TYPE_SLOW_STARTING_DATA_SOURCES
                ? ev->slow_starting_data_sources
                : ev->last_flush_slow_data_sources;
        for (size_t i = 0; ds && i < ds->n_data_source; i++)
            add(l, " %s/%s", ds->data_source[i]->producer_name ? ds->data_source[i]->producer_name : "?",
                ds->data_source[i]->data_source_name ? ds->data_source[i]->data_source_name : "?");
        break;
    }
    case PERFETTO__PROTOS__TRACING_SERVICE_EVENT__EVENT_TYPE_BUFFER_CLONED:
        add(l, "=%u", ev->buffer_cloned);
        break;
    default: break;
    }
}

static void sum_process(struct line *l, const Perfetto__Protos__ProcessDescriptor *p)
{
    add(l, "pid=%d", p->pid);
    if (p->process_name) {
        add(l, " name=");
        add_cstr(l, p->process_name);
    } else if (p->n_cmdline) {
        add(l, " cmdline=");
        add_cstr(l, p->cmdline[0]);
    }
}

static void sum_thread(struct line *l, const Perfetto__Protos__ThreadDescriptor *t)
{
    add(l, "pid=%d tid=%" PRId64, t->pid, t->tid);
    if (t->thread_name) {
        add(l, " name=");
        add_cstr(l, t->thread_name);
    }
}

static const char *track_desc_name(const Perfetto__Protos__TrackDescriptor *td)
{
    switch (td->static_or_dynamic_name_case) {
    case PERFETTO__PROTOS__TRACK_DESCRIPTOR__STATIC_OR_DYNAMIC_NAME_NAME: return td->name;
    case PERFETTO__PROTOS__TRACK_DESCRIPTOR__STATIC_OR_DYNAMIC_NAME_STATIC_NAME: return td->static_name;
    case PERFETTO__PROTOS__TRACK_DESCRIPTOR__STATIC_OR_DYNAMIC_NAME_ATRACE_NAME: return td->atrace_name;
    default: break;
    }
    if (td->thread && td->thread->thread_name)
        return td->thread->thread_name;
    if (td->process && td->process->process_name)
        return td->process->process_name;
    return NULL;
}

static void sum_track_descriptor(struct dump *d, struct line *l, const Perfetto__Protos__TrackDescriptor *td)
{
    add(l, "uuid=%" PRIu64, td->uuid);
    const char *name = track_desc_name(td);
    if (name) {
        add(l, " name=");
        add_cstr(l, name);
        if (td->has_uuid)
            intern_put(d, 0, 0, K_TRACK_NAME, td->uuid, name, strlen(name));
    }
    if (td->has_parent_uuid)
        add(l, " parent=%" PRIu64, td->parent_uuid);
    if (td->process) {
        add(l, " process{");
        sum_process(l, td->process);
        add(l, "}");
    }
    if (td->thread) {
        add(l, " thread{");
        sum_thread(l, td->thread);
        add(l, "}");
    }
    if (td->counter) {
        add(l, " counter");
        if (td->counter->unit_name) {
            add(l, " unit=");
            add_cstr(l, td->counter->unit_name);
        }
    }
}

/* The event's name, interned or not (iidbuf holds a placeholder for an unknown iid); NULL: none. */
static const char *event_name(const struct dump *d, uint32_t seq, const struct seq_state *ss,
                              const Perfetto__Protos__TrackEvent *te, char *iidbuf, size_t cap)
{
    if (te->name_field_case == PERFETTO__PROTOS__TRACK_EVENT__NAME_FIELD_NAME)
        return te->name;
    if (te->name_field_case != PERFETTO__PROTOS__TRACK_EVENT__NAME_FIELD_NAME_IID)
        return NULL;
    const char *name = intern_get(d, seq, gen_of(ss), K_EVENT_NAME, te->name_iid);
    if (!name) {
        snprintf(iidbuf, cap, "<name iid %" PRIu64 ">", te->name_iid);
        name = iidbuf;
    }
    return name;
}

/* The event's track: its own uuid or the sequence's default. 1, or 0 when it names none (then
 * *track is a key of the sequence's own thread track, for the flow table). */
static int event_track(uint32_t seq, const struct seq_state *ss, const Perfetto__Protos__TrackEvent *te,
                       uint64_t *track)
{
    if (te->has_track_uuid || (ss && ss->has_track)) {
        *track = te->has_track_uuid ? te->track_uuid : ss->track_uuid;
        return 1;
    }
    *track = UINT64_C(1) << 63 | seq;
    return 0;
}

static void sum_track_event(struct dump *d, struct line *l, uint32_t seq, const struct seq_state *ss,
                            const Perfetto__Protos__TrackEvent *te)
{
    const char *type = te->has_type ? enum_name(&perfetto__protos__track_event__type__descriptor, (int)te->type)
                                    : NULL;
    if (type && strncmp(type, "TYPE_", 5) == 0)
        type += 5;
    add(l, "%s", type ? type : (te->has_type ? "TYPE?" : "(untyped)"));

    char iidname[40];
    const char *name = event_name(d, seq, ss, te, iidname, sizeof iidname);
    if (name) {
        add(l, " ");
        add_cstr(l, name);
        if (te->has_type && te->type == PERFETTO__PROTOS__TRACK_EVENT__TYPE__TYPE_SLICE_BEGIN)
            tc_name_counts_add(&d->slices, name);
        else if (te->has_type && te->type == PERFETTO__PROTOS__TRACK_EVENT__TYPE__TYPE_INSTANT)
            tc_name_counts_add(&d->instants, name);
    }
    if (te->n_categories || te->n_category_iids) {
        add(l, " [");
        for (size_t i = 0; i < te->n_categories; i++)
            add(l, "%s%s", i ? "," : "", te->categories[i]);
        for (size_t i = 0; i < te->n_category_iids; i++) {
            const char *c = intern_get(d, seq, gen_of(ss), K_CATEGORY, te->category_iids[i]);
            if (c)
                add(l, "%s%s", i || te->n_categories ? "," : "", c);
            else
                add(l, "%s<cat iid %" PRIu64 ">", i || te->n_categories ? "," : "", te->category_iids[i]);
        }
        add(l, "]");
    }
    uint64_t track;
    if (event_track(seq, ss, te, &track)) {
        const char *tn = intern_get(d, 0, 0, K_TRACK_NAME, track);
        add(l, " track=%" PRIu64, track);
        if (tn) {
            add(l, "(");
            add_cstr(l, tn);
            add(l, ")");
        }
    }
    if (te->counter_value_field_case == PERFETTO__PROTOS__TRACK_EVENT__COUNTER_VALUE_FIELD_COUNTER_VALUE) {
        add(l, " value=%" PRId64, te->counter_value);
        d->counter_events++;
    } else if (te->counter_value_field_case ==
               PERFETTO__PROTOS__TRACK_EVENT__COUNTER_VALUE_FIELD_DOUBLE_COUNTER_VALUE) {
        add(l, " value=%g", te->double_counter_value);
        d->counter_events++;
    }
    if (te->n_extra_counter_values)
        add(l, " +%zu counter values", te->n_extra_counter_values);
    if (te->n_debug_annotations)
        add(l, " args=%zu", te->n_debug_annotations);
    size_t flows = te->n_flow_ids + te->n_flow_ids_old + te->n_terminating_flow_ids + te->n_terminating_flow_ids_old;
    if (flows)
        add(l, " flows=%zu", flows);
}

static const uint8_t k_sync_marker[16] = {0x82, 0x47, 0x7a, 0x76, 0xb2, 0x8d, 0x42, 0xba,
                                          0x81, 0xdc, 0x33, 0x32, 0x6d, 0x57, 0xa0, 0x79};

/* ---------------------------------------------------------------- packets */

/* Updates the per-sequence state (interning, defaults) from a packet. */
static void track_state(struct dump *d, uint32_t seq, struct seq_state *ss, const Perfetto__Protos__TracePacket *p)
{
    if ((p->has_sequence_flags && (p->sequence_flags & PERFETTO__PROTOS__TRACE_PACKET__SEQUENCE_FLAGS__SEQ_INCREMENTAL_STATE_CLEARED)) ||
        (p->has_incremental_state_cleared && p->incremental_state_cleared)) {
        if (ss) /* its interned strings, defaults and default track are gone */
            ss->intern_gen++, ss->has_track = 0, ss->clock_id = 0;
    }
    if (p->trace_packet_defaults && ss) {
        const Perfetto__Protos__TracePacketDefaults *df = p->trace_packet_defaults;
        if (df->has_timestamp_clock_id)
            ss->clock_id = df->timestamp_clock_id;
        if (df->track_event_defaults && df->track_event_defaults->has_track_uuid) {
            ss->has_track = 1;
            ss->track_uuid = df->track_event_defaults->track_uuid;
        }
    }
    const Perfetto__Protos__InternedData *in = p->interned_data;
    if (in) {
        for (size_t i = 0; i < in->n_event_names; i++)
            if (in->event_names[i]->name)
                intern_put(d, seq, gen_of(ss), K_EVENT_NAME, in->event_names[i]->iid, in->event_names[i]->name,
                           strlen(in->event_names[i]->name));
        for (size_t i = 0; i < in->n_event_categories; i++)
            if (in->event_categories[i]->name)
                intern_put(d, seq, gen_of(ss), K_CATEGORY, in->event_categories[i]->iid,
                           in->event_categories[i]->name, strlen(in->event_categories[i]->name));
    }
}

/* --flows: every slice event goes into the flow table with its time on the host clock. */
static void collect_flow_event(struct dump *d, uint32_t seq, const struct seq_state *ss,
                               const Perfetto__Protos__TracePacket *p)
{
    int64_t ts = 0;
    int placed = tc_trace_ts_packet(&d->tts, seq, ss ? ss->clock_id : 0, p, &ts);
    if (placed < 0)
        d->flows_oom = 1;
    const Perfetto__Protos__TrackEvent *te = p->data_case == PERFETTO__PROTOS__TRACE_PACKET__DATA_TRACK_EVENT
                                                 ? p->track_event
                                                 : NULL;
    if (!te || !te->has_type)
        return;
    enum tc_flow_kind kind;
    switch (te->type) {
    case PERFETTO__PROTOS__TRACK_EVENT__TYPE__TYPE_SLICE_BEGIN: kind = TC_FLOW_BEGIN; break;
    case PERFETTO__PROTOS__TRACK_EVENT__TYPE__TYPE_SLICE_END: kind = TC_FLOW_END; break;
    case PERFETTO__PROTOS__TRACK_EVENT__TYPE__TYPE_INSTANT: kind = TC_FLOW_INSTANT; break;
    default: return;
    }
    char iidname[40];
    const char *name = event_name(d, seq, ss, te, iidname, sizeof iidname);
    uint64_t track;
    const char *track_name = event_track(seq, ss, te, &track) ? intern_get(d, 0, 0, K_TRACK_NAME, track) : NULL;
    const uint64_t *flows = te->n_flow_ids ? te->flow_ids : te->flow_ids_old;
    size_t n_flows = te->n_flow_ids ? te->n_flow_ids : te->n_flow_ids_old;
    const uint64_t *terms = te->n_terminating_flow_ids ? te->terminating_flow_ids : te->terminating_flow_ids_old;
    size_t n_terms = te->n_terminating_flow_ids ? te->n_terminating_flow_ids : te->n_terminating_flow_ids_old;
    uint32_t machine = p->has_machine_id ? p->machine_id : 0;
    if (tc_flow_table_add(&d->ft, kind, machine, track, track_name, placed == 1, ts, name, flows, n_flows, terms,
                          n_terms) != 0)
        d->flows_oom = 1;
}

static void dump_packet(struct dump *d, uint64_t index, size_t off, const uint8_t *data, size_t len)
{
    d->packets++;
    d->bytes += len;
    Perfetto__Protos__TracePacket *p = perfetto__protos__trace_packet__unpack(NULL, len, data);
    if (!p) {
        d->bad_packets++;
        tc_name_counts_add(&d->types, "(undecodable)");
        if (!d->first_err[0])
            snprintf(d->first_err, sizeof d->first_err,
                     "packet #%" PRIu64 " at byte offset %zu (%zu bytes) is not a valid TracePacket", index, off, len);
        if (!d->packets_quiet)
            fprintf(d->out, "#%-6" PRIu64 " off=%-9zu size=%-6zu UNDECODABLE: not a valid TracePacket\n", index, off,
                    len);
        return;
    }
    int has_seq = p->optional_trusted_packet_sequence_id_case ==
                  PERFETTO__PROTOS__TRACE_PACKET__OPTIONAL_TRUSTED_PACKET_SEQUENCE_ID_TRUSTED_PACKET_SEQUENCE_ID;
    uint32_t seq = has_seq ? p->trusted_packet_sequence_id : 0;
    struct seq_state *ss = seq_get(d, seq);
    if (ss)
        ss->packets++;
    track_state(d, seq, ss, p);
    if (d->flows)
        collect_flow_event(d, seq, ss, p);

    /* the payload type */
    char tname[64];
    const char *fname = field_name(&perfetto__protos__trace_packet__descriptor, p->data_case);
    if (fname) {
        snprintf(tname, sizeof tname, "%s", fname);
    } else if (tg_clock_anchor_is(data, len)) {
        snprintf(tname, sizeof tname, "%s", "clock_anchor"); /* base/clock_anchor.h */
    } else {
        /* a payload we do not know: the first unknown field that is not a trusted/bookkeeping one */
        snprintf(tname, sizeof tname, "%s", "-");
        for (size_t i = 0; i < p->base.n_unknown_fields; i++) {
            snprintf(tname, sizeof tname, "field_%u", p->base.unknown_fields[i].tag);
            break;
        }
    }
    tc_name_counts_add(&d->types, tname);
    if (p->has_machine_id && p->machine_id) {
        char mk[24];
        snprintf(mk, sizeof mk, "%u", p->machine_id);
        tc_name_counts_add(&d->machines, mk);
    }

    struct line l = {.len = 0};
    char seqs[16], ts[48];
    if (has_seq)
        snprintf(seqs, sizeof seqs, "%u", seq);
    else
        snprintf(seqs, sizeof seqs, "-");
    if (p->has_timestamp) {
        uint32_t clk = p->has_timestamp_clock_id ? p->timestamp_clock_id : ss ? ss->clock_id : 0;
        if (clk)
            snprintf(ts, sizeof ts, "%" PRIu64 "@%u", p->timestamp, clk);
        else
            snprintf(ts, sizeof ts, "%" PRIu64, p->timestamp);
    } else {
        snprintf(ts, sizeof ts, "-");
    }
    add(&l, "#%-6" PRIu64 " off=%-9zu size=%-6zu seq=%-4s ts=%-22s %-24s", index, off, len, seqs, ts, tname);

    if (d->raw) {
        while (l.len && l.buf[l.len - 1] == ' ')
            l.buf[--l.len] = 0;
        add(&l, "\n");
        if (!d->packets_quiet) {
            fputs(l.buf, d->out);
            char *txt = tg_textproto_print(&p->base, 4);
            if (txt) {
                fputs(txt, d->out);
                free(txt);
            }
        }
        goto out;
    }

    switch (p->data_case) {
    case PERFETTO__PROTOS__TRACE_PACKET__DATA_TRACK_EVENT: sum_track_event(d, &l, seq, ss, p->track_event); break;
    case PERFETTO__PROTOS__TRACE_PACKET__DATA_TRACK_DESCRIPTOR: sum_track_descriptor(d, &l, p->track_descriptor); break;
    case PERFETTO__PROTOS__TRACE_PACKET__DATA_CLOCK_SNAPSHOT: sum_clock_snapshot(&l, p->clock_snapshot); break;
    case PERFETTO__PROTOS__TRACE_PACKET__DATA_TRACE_CONFIG: sum_trace_config(&l, p->trace_config); break;
    case PERFETTO__PROTOS__TRACE_PACKET__DATA_SYSTEM_INFO: sum_system_info(&l, p->system_info); break;
    case PERFETTO__PROTOS__TRACE_PACKET__DATA_SERVICE_EVENT: sum_service_event(&l, p->service_event); break;
    case PERFETTO__PROTOS__TRACE_PACKET__DATA_TRACE_STATS: sum_trace_stats(&l, p->trace_stats); break;
    case PERFETTO__PROTOS__TRACE_PACKET__DATA_PROCESS_DESCRIPTOR: sum_process(&l, p->process_descriptor); break;
    case PERFETTO__PROTOS__TRACE_PACKET__DATA_THREAD_DESCRIPTOR: sum_thread(&l, p->thread_descriptor); break;
    case PERFETTO__PROTOS__TRACE_PACKET__DATA_SYNCHRONIZATION_MARKER: {
        int ok = p->synchronization_marker.len == 16 && memcmp(p->synchronization_marker.data, k_sync_marker, 16) == 0;
        d->sync_markers++;
        d->bad_sync_markers += !ok;
        add(&l, "%zu bytes%s", p->synchronization_marker.len, ok ? " (valid)" : " (NOT the Perfetto sync marker)");
        break;
    }
    case PERFETTO__PROTOS__TRACE_PACKET__DATA_TRACE_UUID: {
        uint64_t msb = (uint64_t)p->trace_uuid->msb, lsb = (uint64_t)p->trace_uuid->lsb;
        add(&l, "%08" PRIx64 "-%04" PRIx64 "-%04" PRIx64 "-%04" PRIx64 "-%012" PRIx64, msb >> 32, (msb >> 16) & 0xffff,
            msb & 0xffff, lsb >> 48, lsb & UINT64_C(0xffffffffffff));
        break;
    }
    case PERFETTO__PROTOS__TRACE_PACKET__DATA_REMOTE_CLOCK_SYNC:
        add(&l, "%zu synced clock pairs", p->remote_clock_sync->n_synced_clocks);
        clock_estimate(d, p->has_machine_id ? p->machine_id : 0, p->remote_clock_sync);
        break;
    case PERFETTO__PROTOS__TRACE_PACKET__DATA_COMPRESSED_PACKETS:
        add(&l, "%zu bytes (deflate, not expanded)", p->compressed_packets.len);
        break;
    case PERFETTO__PROTOS__TRACE_PACKET__DATA_ZSTD_COMPRESSED_PACKETS:
        add(&l, "%zu bytes (zstd, not expanded)", p->zstd_compressed_packets.len);
        break;
    default: break;
    }

    /* packet-level extras */
    if (p->has_machine_id && p->machine_id)
        add(&l, " machine=%u", p->machine_id);
    if (p->interned_data) {
        const Perfetto__Protos__InternedData *in = p->interned_data;
        add(&l, " +interned(");
        int first = 1;
        if (in->n_event_names)
            add(&l, "%snames=%zu", first ? "" : " ", in->n_event_names), first = 0;
        if (in->n_event_categories)
            add(&l, "%scats=%zu", first ? "" : " ", in->n_event_categories), first = 0;
        if (in->n_debug_annotation_names)
            add(&l, "%sargs=%zu", first ? "" : " ", in->n_debug_annotation_names), first = 0;
        if (in->base.n_unknown_fields)
            add(&l, "%sother=%u", first ? "" : " ", in->base.n_unknown_fields);
        add(&l, ")");
    }
    if (p->trace_packet_defaults)
        add(&l, " +defaults");
    if (p->has_sequence_flags && p->sequence_flags)
        add(&l, " flags=%s%s", p->sequence_flags & 1 ? "C" : "", p->sequence_flags & 2 ? "N" : "");
    if (p->has_first_packet_on_sequence && p->first_packet_on_sequence)
        add(&l, " first_on_seq");
    if (p->has_previous_packet_dropped && p->previous_packet_dropped)
        add(&l, " previous_packet_dropped=0x%x", p->previous_packet_dropped);
    if (p->base.n_unknown_fields) {
        add(&l, " unknown=[");
        for (size_t i = 0; i < p->base.n_unknown_fields && i < 8; i++)
            add(&l, "%s%u", i ? "," : "", p->base.unknown_fields[i].tag);
        add(&l, "%s]", p->base.n_unknown_fields > 8 ? ",..." : "");
    }
    /* trim trailing spaces left by the padded type column */
    while (l.len && l.buf[l.len - 1] == ' ')
        l.buf[--l.len] = 0;
    add(&l, "\n");
    if (!d->packets_quiet)
        fputs(l.buf, d->out);
out:
    perfetto__protos__trace_packet__free_unpacked(p, NULL);
}

/* a remote machine's BOOTTIME minus the host's, from its RemoteClockSync rounds (0 when none) */
static int64_t machine_offset(void *ctx, uint32_t machine)
{
    const struct dump *d = ctx;
    int64_t ns;
    tc_sync_ests_offset(&d->sync, machine, &ns);
    return ns;
}

static void add_flow_end(struct line *l, const struct tc_flow_slice *s)
{
    add_cstr(l, s->name);
    add(l, " on ");
    if (s->track)
        add_cstr(l, s->track);
    else
        add(l, "track %" PRIu64, s->track_uuid);
    if (s->machine)
        add(l, " (machine %u)", s->machine);
}

/* --flows: one line per link, outgoing slice first, in the order the flows leave */
static void print_flows(struct dump *d)
{
    if (d->flows_oom || tc_flow_table_resolve(&d->ft, machine_offset, d) != 0) {
        d->flows_oom = 1;
        return;
    }
    if (d->summary_only)
        return;
    for (size_t i = 0; i < d->ft.n_edges; i++) {
        const struct tc_flow_edge *e = &d->ft.edges[i];
        struct line l = {.len = 0};
        add_flow_end(&l, e->out);
        add(&l, " -> ");
        add_flow_end(&l, e->in);
        add(&l, "  %+.3f ms  ts=%" PRId64 " flow=%" PRIu64 "\n", ((double)e->in->ts - (double)e->out->ts) / 1e6, e->out->ts,
            e->flow_id);
        fputs(l.buf, d->out);
    }
}

static void print_counters(FILE *out, const char *title, const struct tc_name_counts *c, int quote)
{
    if (!c->n)
        return;
    fprintf(out, "%s:", title);
    for (size_t i = 0; i < c->n; i++) {
        if (quote) {
            struct line l = {.len = 0};
            add_cstr(&l, c->v[i].key);
            fprintf(out, "%s %s %" PRIu64, i ? "," : "", l.buf, c->v[i].n);
        } else {
            fprintf(out, "%s %s %" PRIu64, i ? "," : "", c->v[i].key, c->v[i].n);
        }
    }
    if (c->other) /* names past the first TC_NAME_COUNTS_MAX */
        fprintf(out, ", (more names) %" PRIu64, c->other);
    fprintf(out, "\n");
}

int tc_dump_trace(FILE *out, const uint8_t *data, size_t len, int flags, char *err, size_t errlen)
{
    struct dump *d = calloc(1, sizeof *d);
    if (!d) {
        snprintf(err, errlen, "out of memory");
        return 1;
    }
    d->out = out;
    d->raw = (flags & TC_DUMP_RAW) != 0;
    d->flows = (flags & TC_DUMP_FLOWS) != 0;
    d->summary_only = (flags & TC_DUMP_SUMMARY) != 0;
    d->packets_quiet = d->summary_only || d->flows;

    struct tc_trace_reader r;
    tc_trace_reader_init(&r, data, len);
    const uint8_t *pkt;
    size_t plen, off;
    char rerr[512] = "";
    int rc;
    uint64_t index = 0;
    while ((rc = tc_trace_reader_next(&r, &pkt, &plen, &off, rerr, sizeof rerr)) == 1)
        dump_packet(d, index++, off, pkt, plen);

    if (d->flows)
        print_flows(d);
    if (!d->summary_only)
        fprintf(out, "--\n"); /* between the packets (or flows) and the totals */
    fprintf(out, "packets: %" PRIu64 " (%" PRIu64 " payload bytes, %zu file bytes)", d->packets, d->bytes,
            rc < 0 ? r.off : len);
    if (d->bad_packets)
        fprintf(out, ", undecodable: %" PRIu64, d->bad_packets);
    fprintf(out, "\n");
    print_counters(out, "types", &d->types, 0);
    if (d->n_seqs) {
        fprintf(out, "sequences:");
        uint64_t more_packets = 0;
        for (size_t i = 0; i < d->n_seqs; i++) {
            if (i >= TC_NAME_COUNTS_MAX) /* as for names: the first ones, then the rest together */
                more_packets += d->seqs[i].packets;
            else if (d->seqs[i].seq)
                fprintf(out, "%s %u (%" PRIu64 " packets)", i ? "," : "", d->seqs[i].seq, d->seqs[i].packets);
            else
                fprintf(out, "%s none (%" PRIu64 " packets)", i ? "," : "", d->seqs[i].packets);
        }
        if (d->n_seqs > TC_NAME_COUNTS_MAX)
            fprintf(out, ", (%zu more sequences: %" PRIu64 " packets)", d->n_seqs - TC_NAME_COUNTS_MAX, more_packets);
        fprintf(out, "\n");
    }
    print_counters(out, "machines", &d->machines, 0);
    for (size_t i = 0; i < d->sync.n; i++)
        if (d->sync.v[i].pairs)
            fprintf(out, "clock sync: machine %u: %zu round trips, BOOTTIME offset %+.0f ns (machine minus host)\n",
                    d->sync.v[i].machine, d->sync.v[i].pairs, tc_sync_est_mean_ns(&d->sync.v[i]));
    print_counters(out, "slices", &d->slices, 1);
    print_counters(out, "instants", &d->instants, 1);
    if (d->counter_events)
        fprintf(out, "counter values: %" PRIu64 "\n", d->counter_events);
    if (d->flows && !d->flows_oom) {
        fprintf(out, "flows: %zu", d->ft.n_edges);
        if (d->ft.unplaced)
            fprintf(out, " (%" PRIu64 " slice events without a placeable timestamp left out)", d->ft.unplaced);
        if (d->ft.unmatched_ends)
            fprintf(out, " (%" PRIu64 " end events with flows closed no slice)", d->ft.unmatched_ends);
        fprintf(out, "\n");
    }
    if (d->bad_sync_markers)
        fprintf(out, "WARNING: %" PRIu64 " of %" PRIu64 " synchronization markers have unexpected bytes\n",
                d->bad_sync_markers, d->sync_markers);

    int ret = 0;
    if (d->flows_oom || d->sync_oom) {
        snprintf(err, errlen, "out of memory while %s", d->sync_oom ? "reading clock sync" : "linking the flows");
        ret = 1;
    } else if (rc < 0) {
        snprintf(err, errlen, "%s", rerr);
        ret = 1;
    } else if (d->bad_packets) {
        snprintf(err, errlen, "%s", d->first_err);
        ret = 1;
    }
    dump_free(d);
    free(d);
    return ret;
}

static void dump_usage(FILE *out)
{
    fprintf(out, "usage: tracectl dump FILE [--raw] [--summary] [--flows]\n\n"
                 "Prints the packets of a Perfetto trace file (.pftrace; '-' reads stdin).\n\n"
                 "  --raw       print every packet in protobuf text format\n"
                 "  --summary   print only the totals\n"
                 "  --flows     print the flows instead of the packets: one line per arrow, slice -> slice\n"
                 "              (name on track), linked as trace processor links them\n");
}

int tc_cmd_dump(const struct tc_opts *opts, int argc, char **argv)
{
    static const struct option longopts[] = {
        {"raw", no_argument, NULL, 'r'},
        {"summary", no_argument, NULL, 's'},
        {"flows", no_argument, NULL, 'f'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    (void)opts;
    int flags = 0, c;
    optind = 0;
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (c) {
        case 'r': flags |= TC_DUMP_RAW; break;
        case 's': flags |= TC_DUMP_SUMMARY; break;
        case 'f': flags |= TC_DUMP_FLOWS; break;
        case 'h': dump_usage(stdout); return 0;
        default: dump_usage(stderr); return 2;
        }
    }
    if (argc - optind != 1) {
        fprintf(stderr, "tracectl dump: %s\n", argc - optind < 1 ? "missing FILE" : "expected a single FILE");
        dump_usage(stderr);
        return 2;
    }
    const char *path = argv[optind];
    uint8_t *data;
    size_t len;
    char err[512];
    if (tc_trace_file_load(path, &data, &len, err, sizeof err) != 0) {
        fprintf(stderr, "tracectl dump: %s\n", err);
        return 1;
    }
    int rc = tc_dump_trace(stdout, data, len, flags, err, sizeof err);
    free(data);
    fflush(stdout);
    if (rc != 0) {
        fprintf(stderr, "tracectl dump: %s: %s\n", path, err);
        return 1;
    }
    if (len == 0)
        fprintf(stderr, "tracectl dump: %s: empty file (no packets)\n", path);
    return 0;
}
