/* service_packets.c: the packets the service itself writes into a trace
 * (trusted_uid = our uid, trusted_packet_sequence_id 1, timestamp_clock_id 6),
 * laid out field by field as traced does (consumer_record_*.txt): clock
 * snapshots, the sync marker, the trace config echo, trace_uuid, system info,
 * lifecycle service events, trace stats, triggers, and relayed machines'
 * system info and clock sync. */
#include "service/svc.h"

#include "tracegate/pbwire.h"

#include "clock_snapshot.pb-c.h"
#include "remote_clock_sync.pb-c.h"
#include "base/clock_anchor.h"

#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>
#if defined(__x86_64__)
#include <x86intrin.h>
#endif

static const uint8_t k_sync_marker[16] = {0x82, 0x47, 0x7a, 0x76, 0xb2, 0x8d, 0x42, 0xba,
                                          0x81, 0xdc, 0x33, 0x32, 0x6d, 0x57, 0xa0, 0x79};

/* ------------------------------------------------------------ lists */

void tg_svc_pkt_list_init(struct tg_svc_pkt_list *l)
{
    l->head = NULL;
    l->tail = &l->head;
}

void tg_svc_pkt_list_clear(struct tg_svc_pkt_list *l)
{
    while (l->head) {
        struct tg_svc_pkt *p = l->head;
        l->head = p->next;
        free(p);
    }
    l->tail = &l->head;
}

struct tg_svc_pkt *tg_svc_pkt_new(size_t len)
{
    struct tg_svc_pkt *p = malloc(sizeof *p + len);
    if (p) {
        p->next = NULL;
        p->tag = 0;
        p->len = len;
    }
    return p;
}

void tg_svc_pkt_list_append(struct tg_svc_pkt_list *l, struct tg_svc_pkt *pk)
{
    pk->next = NULL;
    *l->tail = pk;
    l->tail = &pk->next;
}

/* Unlinks and frees the packet *pp points at. */
static void list_drop(struct tg_svc_pkt_list *l, struct tg_svc_pkt **pp)
{
    struct tg_svc_pkt *pk = *pp;
    *pp = pk->next;
    if (l->tail == &pk->next)
        l->tail = pp;
    free(pk);
}

void tg_svc_pkt_list_keep_latest(struct tg_svc_pkt_list *l, int tag, size_t max)
{
    size_t n = 0;
    for (const struct tg_svc_pkt *pk = l->head; pk; pk = pk->next)
        n += pk->tag == tag;
    for (struct tg_svc_pkt **pp = &l->head; *pp && n > max;) {
        if ((*pp)->tag == tag) {
            list_drop(l, pp);
            n--;
        } else {
            pp = &(*pp)->next;
        }
    }
}

void tg_svc_pkt_list_keep_first_and_latest(struct tg_svc_pkt_list *l, size_t max)
{
    size_t n = 0;
    for (const struct tg_svc_pkt *pk = l->head; pk; pk = pk->next)
        n++;
    while (n > max && max >= 1 && l->head && l->head->next) {
        list_drop(l, &l->head->next);
        n--;
    }
}

/* ------------------------------------------------------------ encoding */

struct pb {
    uint8_t *p;
    size_t len, cap;
    int oom;
};

static void pb_reserve(struct pb *b, size_t more)
{
    if (b->oom || b->len + more <= b->cap)
        return;
    size_t ncap = b->cap ? b->cap : 64;
    while (ncap < b->len + more)
        ncap *= 2;
    uint8_t *n = realloc(b->p, ncap);
    if (!n) {
        b->oom = 1;
        return;
    }
    b->p = n;
    b->cap = ncap;
}

static void pb_raw(struct pb *b, const void *d, size_t n)
{
    pb_reserve(b, n);
    if (b->oom)
        return;
    if (n)
        memcpy(b->p + b->len, d, n);
    b->len += n;
}

static void pb_varint(struct pb *b, uint32_t num, uint64_t v)
{
    uint8_t t[24];
    size_t n = tg_pb_put_tag(t, num, TG_PB_VARINT);
    n += tg_pb_put_varint(t + n, v);
    pb_raw(b, t, n);
}

static void pb_bytes(struct pb *b, uint32_t num, const void *d, size_t len)
{
    uint8_t t[24];
    size_t n = tg_pb_put_tag(t, num, TG_PB_LEN);
    n += tg_pb_put_varint(t + n, len);
    pb_raw(b, t, n);
    pb_raw(b, d, len);
}

static void pb_msg(struct pb *b, uint32_t num, const ProtobufCMessage *m)
{
    size_t n = protobuf_c_message_get_packed_size(m);
    uint8_t *tmp = malloc(n ? n : 1);
    if (!tmp) {
        b->oom = 1;
        return;
    }
    protobuf_c_message_pack(m, tmp);
    pb_bytes(b, num, tmp, n);
    free(tmp);
}

/* trusted_uid, trusted_packet_sequence_id 1, timestamp_clock_id BOOTTIME */
static void pb_trusted(struct pb *b, const tg_service *svc, int with_clock)
{
    pb_varint(b, 3, (uint64_t)(int64_t)svc->uid);
    pb_varint(b, 10, 1);
    if (with_clock)
        pb_varint(b, 58, 6);
}

static struct tg_svc_pkt *pb_finish(struct pb *b)
{
    struct tg_svc_pkt *pk = NULL;
    if (!b->oom) {
        pk = tg_svc_pkt_new(b->len);
        if (pk)
            memcpy(pk->data, b->p, b->len);
    }
    free(b->p);
    return pk;
}

/* ------------------------------------------------------------ clocks */

struct clock_value {
    uint32_t id;
    uint64_t ts;
};

static size_t read_clocks(struct clock_value *out)
{
    static const int ids[] = {6, 2, 4, 1, 3, 5};
    size_t n = 0;
    for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++) {
        out[n].id = (uint32_t)ids[i];
        out[n].ts = (uint64_t)tg_svc_now_ns(ids[i]);
        n++;
    }
#if defined(__x86_64__)
    out[n].id = 9; /* BUILTIN_CLOCK_TSC */
    out[n].ts = (uint64_t)__rdtsc();
    n++;
#endif
    return n;
}

static void encode_snapshot(struct pb *b, const struct clock_value *cv, size_t n, int primary)
{
    if (primary)
        pb_varint(b, 2, (uint64_t)primary);
    for (size_t i = 0; i < n; i++) {
        uint8_t c[32];
        size_t l = tg_pb_put_tag(c, 1, TG_PB_VARINT);
        l += tg_pb_put_varint(c + l, cv[i].id);
        l += tg_pb_put_tag(c + l, 2, TG_PB_VARINT);
        l += tg_pb_put_varint(c + l, cv[i].ts);
        pb_bytes(b, 1, c, l);
    }
}

void tg_svc_snapshot_clocks(tg_svc_session *s)
{
    const Perfetto__Protos__TraceConfig__BuiltinDataSource *bi = s->cfg ? s->cfg->builtin_data_sources : NULL;
    if (bi && bi->has_disable_clock_snapshotting && bi->disable_clock_snapshotting)
        return;
    int primary = bi && bi->has_primary_trace_clock && bi->primary_trace_clock ? (int)bi->primary_trace_clock : 6;
    struct clock_value cv[8];
    size_t n = read_clocks(cv);
    struct pb snap = {0}, pkt = {0};
    encode_snapshot(&snap, cv, n, primary);
    if (snap.oom) {
        free(snap.p);
        return;
    }
    pb_bytes(&pkt, 6, snap.p, snap.len);
    free(snap.p);
    pb_trusted(&pkt, s->svc, 1);
    struct tg_svc_pkt *pk = pb_finish(&pkt);
    if (pk) {
        tg_svc_pkt_list_append(&s->clock_snapshots, pk);
        /* unread, they are kept like traced's: the first and the latest */
        tg_svc_pkt_list_keep_first_and_latest(&s->clock_snapshots, TG_SVC_MAX_UNREAD_SNAPSHOTS);
    }
}

/* ------------------------------------------------------------ fixed packets */

struct tg_svc_pkt *tg_svc_build_sync_marker(const tg_service *svc)
{
    struct pb b = {0};
    pb_trusted(&b, svc, 0);
    pb_bytes(&b, 36, k_sync_marker, sizeof k_sync_marker);
    return pb_finish(&b);
}

void tg_svc_queue_sync_marker(tg_svc_session *s)
{
    s->sync_markers_pending++;
}

struct tg_svc_pkt *tg_svc_build_trace_config(const tg_svc_session *s)
{
    struct pb b = {0};
    pb_trusted(&b, s->svc, 1);
    pb_bytes(&b, 33, s->cfg_bytes, s->cfg_len);
    return pb_finish(&b);
}

struct tg_svc_pkt *tg_svc_build_uuid(const tg_svc_session *s)
{
    struct pb u = {0}, b = {0};
    pb_varint(&u, 2, (uint64_t)s->uuid_lsb);
    pb_varint(&u, 1, (uint64_t)s->uuid_msb);
    pb_trusted(&b, s->svc, 1);
    pb_bytes(&b, 89, u.p, u.len);
    b.oom |= u.oom;
    free(u.p);
    return pb_finish(&b);
}

void tg_svc_fill_system_info(const tg_service *svc, Perfetto__Protos__SystemInfo *si, Perfetto__Protos__Utsname *u)
{
    static struct utsname uts;
    static int have_uts = -1;
    if (have_uts < 0)
        have_uts = uname(&uts) == 0;
    perfetto__protos__system_info__init(si);
    perfetto__protos__utsname__init(u);
    if (have_uts) {
        u->sysname = uts.sysname;
        u->version = uts.version;
        u->release = uts.release;
        u->machine = uts.machine;
        si->utsname = u;
    }
    si->tracing_service_version = (char *)TG_SVC_VERSION;
    long hz = sysconf(_SC_CLK_TCK);
    if (hz > 0) {
        si->has_hz = 1;
        si->hz = hz;
    }
    long page = sysconf(_SC_PAGESIZE);
    if (page > 0) {
        si->has_page_size = 1;
        si->page_size = (uint32_t)page;
    }
    time_t now = time(NULL);
    struct tm tm;
    if (localtime_r(&now, &tm)) {
        si->has_timezone_off_mins = 1;
        si->timezone_off_mins = (int32_t)(tm.tm_gmtoff / 60);
    }
    long cpus = sysconf(_SC_NPROCESSORS_CONF);
    if (cpus > 0) {
        si->has_num_cpus = 1;
        si->num_cpus = (uint32_t)cpus;
    }
    long pages = sysconf(_SC_PHYS_PAGES);
    if (pages > 0 && page > 0) {
        si->has_system_ram_bytes = 1;
        si->system_ram_bytes = (uint64_t)pages * (uint64_t)page;
    }
    if (svc->machine_name[0])
        si->machine_name = (char *)svc->machine_name;
}

struct tg_svc_pkt *tg_svc_build_system_info(const tg_svc_session *s)
{
    Perfetto__Protos__SystemInfo si;
    Perfetto__Protos__Utsname u;
    tg_svc_fill_system_info(s->svc, &si, &u);
    struct pb b = {0};
    pb_msg(&b, 45, &si.base);
    pb_trusted(&b, s->svc, 1);
    return pb_finish(&b);
}

struct tg_svc_pkt *tg_svc_build_event(const tg_service *svc, enum tg_svc_event ev)
{
    struct pb b = {0};
    uint8_t e[4];
    size_t n = tg_pb_put_tag(e, (uint32_t)ev, TG_PB_VARINT);
    e[n++] = 1;
    pb_varint(&b, 8, (uint64_t)tg_svc_now_ns(6));
    pb_trusted(&b, svc, 1);
    pb_bytes(&b, 69, e, n);
    return pb_finish(&b);
}

struct tg_svc_pkt *tg_svc_build_trace_stats(tg_svc_session *s)
{
    size_t n = 0;
    uint8_t *st = tg_svc_trace_stats(s, &n);
    if (!st)
        return NULL;
    struct pb b = {0};
    pb_trusted(&b, s->svc, 1);
    pb_bytes(&b, 35, st, n);
    free(st);
    return pb_finish(&b);
}

struct tg_svc_pkt *tg_svc_build_trigger(const tg_service *svc, const char *name, const char *producer, int32_t uid,
                                        uint32_t stop_delay_ms)
{
    struct pb t = {0}, b = {0};
    pb_bytes(&t, 1, name, strlen(name));
    if (producer && *producer)
        pb_bytes(&t, 2, producer, strlen(producer));
    pb_varint(&t, 3, (uint64_t)(int64_t)uid);
    if (stop_delay_ms)
        pb_varint(&t, 4, stop_delay_ms);
    pb_varint(&b, 8, (uint64_t)tg_svc_now_ns(6));
    pb_trusted(&b, svc, 1);
    pb_bytes(&b, 46, t.p, t.len);
    b.oom |= t.oom;
    free(t.p);
    return pb_finish(&b);
}

/* ------------------------------------------------------------ relays */

void tg_svc_build_remote_packets(const tg_svc_session *s, struct tg_svc_pkt_list *sysinfo_out,
                                 struct tg_svc_pkt_list *clocks_out)
{
    const tg_service *svc = s->svc;
    const Perfetto__Protos__TraceConfig__BuiltinDataSource *bi = s->cfg ? s->cfg->builtin_data_sources : NULL;
    bool no_sysinfo = bi && bi->has_disable_system_info && bi->disable_system_info;
    bool no_clocks = bi && bi->has_disable_clock_snapshotting && bi->disable_clock_snapshotting;
    for (const struct tg_svc_relay *r = svc->relays; r; r = r->next) {
        if (!r->machine_id)
            continue;
        if (r->sysinfo && !no_sysinfo) {
            struct pb b = {0};
            pb_bytes(&b, 45, r->sysinfo, r->sysinfo_len);
            pb_varint(&b, 98, r->machine_id);
            pb_trusted(&b, svc, 0);
            struct tg_svc_pkt *pk = pb_finish(&b);
            if (pk)
                tg_svc_pkt_list_append(sysinfo_out, pk);
        }
        if (r->n_synced && !no_clocks) {
            struct pb sync = {0}, b = {0};
            for (unsigned i = 0; i < r->n_synced; i++)
                pb_bytes(&sync, 1, r->synced[i], r->synced_len[i]);
            pb_varint(&b, 98, r->machine_id);
            pb_varint(&b, 3, (uint64_t)(int64_t)svc->uid);
            pb_bytes(&b, 107, sync.p, sync.len);
            b.oom |= sync.oom;
            free(sync.p);
            struct tg_svc_pkt *pk = pb_finish(&b);
            if (pk)
                tg_svc_pkt_list_append(clocks_out, pk);
            /* tracegate's addition to what traced writes: the clock anchor (base/clock_anchor.h).
             * The relayed SDK producers' first packets are ClockSnapshots holding BOOTTIME, which
             * made trace processor keep that machine's packets at their raw times (hours off on a
             * machine booted at another time, traced's traces included: docs/service.md). */
            uint32_t machine;
            uint64_t boot;
            if (pk && tg_clock_anchor_for_sync(pk->data, pk->len, &machine, &boot)) {
                uint8_t anchor[TG_CLOCK_ANCHOR_MAX];
                struct pb a = {0};
                pb_raw(&a, anchor, tg_clock_anchor_encode(anchor, machine, boot));
                struct tg_svc_pkt *an = pb_finish(&a);
                if (an)
                    tg_svc_pkt_list_append(clocks_out, an);
            }
        }
    }
}

/* Used by relay_port.c: our own snapshot of the same clock set. */
size_t tg_svc_encode_host_snapshot(uint8_t **out)
{
    struct clock_value cv[8];
    size_t n = read_clocks(cv);
    struct pb b = {0};
    encode_snapshot(&b, cv, n, 0);
    if (b.oom) {
        free(b.p);
        *out = NULL;
        return 0;
    }
    *out = b.p;
    return b.len;
}
