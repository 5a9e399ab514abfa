/* data_source_match.c: which registered data sources a TraceConfig data
 * source entry selects (name, producer_name_filter / producer_name_regex_filter
 * with POSIX regexes, machine filtering), and the service's rewrite of the
 * DataSourceConfig sent to producers (perfetto-wire-facts §4.3, §6.3). */
#include "service/svc.h"

#include "tracegate/log.h"
#include "tracegate/pbwire.h"

#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Whether a consumer's regex may be run on the service loop. glibc's matcher takes time
 * exponential in the subject's length with back-references ("(a*)*\2b" on a producer named with
 * 400 a's: 1.8 s; with 1500, minutes) and builds a node per repetition of counted intervals
 * ("((a{64}){64}){64}": 262,144 nodes), and both regex and producer name are anyone's to choose.
 * Without them POSIX EREs match in polynomial time. Refused: back-references (a backslash and a
 * digit), intervals ({ and a digit), patterns over TG_SVC_MAX_REGEX. (A bracket expression such
 * as [\1] is refused too: harmless, and the names these filter never need it.) */
static bool regex_is_safe(const char *re, size_t n)
{
    if (n > TG_SVC_MAX_REGEX)
        return false;
    for (size_t i = 0; i < n; i++) {
        if (re[i] == '\\') {
            if (re[i + 1] >= '0' && re[i + 1] <= '9')
                return false;
            if (re[i + 1])
                i++;
        } else if (re[i] == '{' && re[i + 1] >= '0' && re[i + 1] <= '9') {
            return false;
        }
    }
    return true;
}

/* std::regex_match semantics: the whole name must match. */
bool tg_svc_regex_full_match(const char *re, const char *s)
{
    size_t n = strlen(re);
    if (!regex_is_safe(re, n)) {
        static bool warned; /* (one service thread) */
        if (!warned) {
            warned = true;
            tg_warn(TG_SVC_LOG, "a producer name regex with back-references or {m,n} intervals (or over %u "
                                "characters) matches nothing here: \"%.64s\"", TG_SVC_MAX_REGEX, re);
        }
        return false;
    }
    char *anch = malloc(n + 5);
    if (!anch)
        return false;
    snprintf(anch, n + 5, "^(%s)$", re);
    regex_t rx;
    bool ok = false;
    if (regcomp(&rx, anch, REG_EXTENDED | REG_NOSUB) == 0) {
        ok = regexec(&rx, s, 0, NULL, 0) == 0;
        regfree(&rx);
    }
    free(anch);
    return ok;
}

bool tg_svc_ds_matches(const Perfetto__Protos__TraceConfig *cfg, const Perfetto__Protos__TraceConfig__DataSource *cds,
                       const tg_svc_producer *p, const struct tg_svc_ds_reg *reg)
{
    if (!cds->config || !cds->config->name || strcmp(cds->config->name, reg->name) != 0)
        return false;
    bool match = cds->n_producer_name_filter == 0 && cds->n_producer_name_regex_filter == 0;
    for (size_t i = 0; !match && i < cds->n_producer_name_filter; i++)
        match = cds->producer_name_filter[i] && strcmp(cds->producer_name_filter[i], p->name) == 0;
    for (size_t i = 0; !match && i < cds->n_producer_name_regex_filter; i++)
        match = cds->producer_name_regex_filter[i] && tg_svc_regex_full_match(cds->producer_name_regex_filter[i], p->name);
    if (!match)
        return false;
    /* machines: remote producers only with trace_all_machines or a name filter */
    const char *mname = p->machine_name && *p->machine_name ? p->machine_name : p->svc->machine_name;
    if (cds->n_machine_name_filter > 0) {
        bool m = false;
        for (size_t i = 0; !m && i < cds->n_machine_name_filter; i++)
            m = cds->machine_name_filter[i] && strcmp(cds->machine_name_filter[i], mname) == 0;
        return m;
    }
    if (p->machine_id != 0 && !(cfg->has_trace_all_machines && cfg->trace_all_machines))
        return false;
    return true;
}

static size_t put_varint_field(uint8_t *b, uint32_t num, uint64_t v)
{
    size_t n = tg_pb_put_tag(b, num, TG_PB_VARINT);
    return n + tg_pb_put_varint(b + n, v);
}

/* Fields the service sets itself; anything else passes through byte-for-byte. */
static bool service_field(uint32_t num)
{
    return num == 2 || num == 3 || num == 4 || num == 6 || num == 7 || num == 8 || num == 122;
}

uint8_t *tg_svc_rewrite_ds_config(const Perfetto__Protos__DataSourceConfig *in, uint32_t global_buffer,
                                  const tg_svc_session *s, size_t *out_len)
{
    size_t n = protobuf_c_message_get_packed_size(&in->base);
    uint8_t *src = malloc(n ? n : 1);
    if (!src)
        return NULL;
    protobuf_c_message_pack(&in->base, src);

    /* traced's field order: name, target_buffer, trace_duration_ms,
     * stop_timeout_ms, enable_extra_guardrails, session_initiator,
     * tracing_session_id, then everything else. */
    const Perfetto__Protos__TraceConfig *cfg = s->cfg;
    uint8_t svcf[80];
    size_t sl = 0;
    sl += put_varint_field(svcf + sl, 2, global_buffer);
    sl += put_varint_field(svcf + sl, 3, cfg->has_duration_ms ? cfg->duration_ms : 0);
    sl += put_varint_field(svcf + sl, 7, s->stop_timeout_ms);
    sl += put_varint_field(svcf + sl, 6, cfg->has_enable_extra_guardrails && cfg->enable_extra_guardrails);
    sl += put_varint_field(svcf + sl, 8, 0);
    sl += put_varint_field(svcf + sl, 4, s->id);
    if (cfg->has_prefer_suspend_clock_for_duration && cfg->prefer_suspend_clock_for_duration)
        sl += put_varint_field(svcf + sl, 122, 1);

    uint8_t *out = malloc(n + sl + 1);
    if (!out) {
        free(src);
        return NULL;
    }
    size_t o = 0;
    bool inserted = false;
    struct tg_pb_reader r;
    struct tg_pb_field f;
    tg_pb_reader_init(&r, src, n);
    const uint8_t *start = r.p;
    /* name first (if present), then the service fields */
    while (tg_pb_next(&r, &f) == 1) {
        size_t flen = (size_t)(r.p - start);
        if (f.number == 1) {
            memcpy(out + o, start, flen);
            o += flen;
            if (!inserted) {
                memcpy(out + o, svcf, sl);
                o += sl;
                inserted = true;
            }
        } else if (!service_field(f.number)) {
            if (!inserted) {
                memcpy(out + o, svcf, sl);
                o += sl;
                inserted = true;
            }
            memcpy(out + o, start, flen);
            o += flen;
        }
        start = r.p;
    }
    if (!inserted) {
        memcpy(out + o, svcf, sl);
        o += sl;
    }
    free(src);
    *out_len = o;
    return out;
}
