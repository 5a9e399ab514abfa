/* tracectl_query.c: `tracectl query URL`: QueryServiceState + QueryCapabilities printed readably. */
#include "tracectl.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <event2/buffer.h>

#include "consumer_port.pb-c.h"
#include "tracegate/log.h"

struct collect {
    struct evbuffer *buf;
};

static int collect_part(void *arg, const uint8_t *reply, size_t len, int has_more)
{
    struct collect *c = arg;
    (void)has_more;
    evbuffer_add(c->buf, reply, len);
    return 0;
}

static const char *producer_name(const Perfetto__Protos__TracingServiceState *st, int32_t id)
{
    for (size_t i = 0; i < st->n_producers; i++)
        if (st->producers[i]->has_id && st->producers[i]->id == id)
            return st->producers[i]->name ? st->producers[i]->name : "";
    return "?";
}

static void print_state(FILE *out, const Perfetto__Protos__TracingServiceState *st)
{
    /* every string here is someone else's choice (a producer names itself and its data sources and
     * categories, a consumer its session): escaped, so none reaches the terminal as a control */
    char e1[256], e2[256];
    fprintf(out, "Service: %s\n",
            st->tracing_service_version ? tg_escape_text(st->tracing_service_version, e1, sizeof e1) : "(unknown)");
    fprintf(out, "Tracing sessions: %d (started: %d)\n\n", st->num_sessions, st->num_sessions_started);

    fprintf(out, "PRODUCERS CONNECTED:\n\n");
    fprintf(out, "%-6s %-8s %-8s %-10s %-42s %s\n", "ID", "PID", "UID", "MACHINE", "NAME", "SDK");
    fprintf(out, "%-6s %-8s %-8s %-10s %-42s %s\n", "==", "===", "===", "=======", "====", "===");
    for (size_t i = 0; i < st->n_producers; i++) {
        const Perfetto__Protos__TracingServiceState__Producer *p = st->producers[i];
        char machine[16] = "local";
        if (p->has_machine_id && p->machine_id)
            snprintf(machine, sizeof machine, "%u", p->machine_id);
        fprintf(out, "%-6d %-8d %-8d %-10s %-42s %s\n", p->id, p->has_pid ? p->pid : -1, p->uid, machine,
                tg_escape_text(p->name, e1, sizeof e1), tg_escape_text(p->sdk_version, e2, sizeof e2));
    }

    fprintf(out, "\nDATA SOURCES REGISTERED:\n\n");
    fprintf(out, "%-40s %-32s %s\n", "NAME", "PRODUCER", "DETAILS");
    fprintf(out, "%-40s %-32s %s\n", "====", "========", "=======");
    for (size_t i = 0; i < st->n_data_sources; i++) {
        const Perfetto__Protos__TracingServiceState__DataSource *ds = st->data_sources[i];
        const Perfetto__Protos__DataSourceDescriptor *d = ds->ds_descriptor;
        char prod[64];
        snprintf(prod, sizeof prod, "%.48s (%d)", tg_escape_text(producer_name(st, ds->producer_id), e1, 49),
                 ds->producer_id);
        char details[256] = "";
        size_t dl = 0;
        if (d && d->track_event_descriptor)
            for (size_t c = 0; c < d->track_event_descriptor->n_available_categories && dl + 2 < sizeof details; c++)
                dl += (size_t)snprintf(details + dl, sizeof details - dl, "%s%s", c ? "," : "",
                                       tg_escape_text(d->track_event_descriptor->available_categories[c]->name, e1,
                                                      sizeof e1));
        if (dl >= sizeof details)
            dl = sizeof details - 1;
        fprintf(out, "%-40s %-32s %s\n", tg_escape_text(d ? d->name : NULL, e2, sizeof e2), prod, details);
    }

    fprintf(out, "\nTRACING SESSIONS:\n\n");
    fprintf(out, "%-8s %-7s %-12s %-14s %-9s %-5s %-8s %s\n", "ID", "UID", "STATE", "BUF (#) KB", "DUR (s)", "#DS",
            "STARTED", "NAME");
    fprintf(out, "%-8s %-7s %-12s %-14s %-9s %-5s %-8s %s\n", "==", "===", "=====", "==========", "=======", "===",
            "=======", "====");
    for (size_t i = 0; i < st->n_tracing_sessions; i++) {
        const Perfetto__Protos__TracingServiceState__TracingSession *s = st->tracing_sessions[i];
        uint64_t kb = 0;
        for (size_t b = 0; b < s->n_buffer_size_kb; b++)
            kb += s->buffer_size_kb[b];
        char buf[32];
        snprintf(buf, sizeof buf, "(%zu) %llu", s->n_buffer_size_kb, (unsigned long long)kb);
        fprintf(out, "%-8llu %-7d %-12s %-14s %-9u %-5u %-8s %s\n", (unsigned long long)s->id, s->consumer_uid,
                tg_escape_text(s->state, e1, 32), buf, s->duration_ms / 1000, s->num_data_sources,
                s->is_started ? "yes" : "no", tg_escape_text(s->unique_session_name, e2, sizeof e2));
    }
}

static void print_caps(FILE *out, const Perfetto__Protos__TracingServiceCapabilities *c)
{
    fprintf(out, "\nCAPABILITIES:\n\n");
    fprintf(out, "query_capabilities: %s\n", c->has_query_capabilities ? "yes" : "no");
    fprintf(out, "trace_config_output_path: %s\n", c->has_trace_config_output_path ? "yes" : "no");
    fprintf(out, "clone_session: %s\n", c->has_clone_session ? "yes" : "no");
    fprintf(out, "observable_events:");
    for (size_t i = 0; i < c->n_observable_events; i++) {
        const ProtobufCEnumValue *v =
            protobuf_c_enum_descriptor_get_value(&perfetto__protos__observable_events__type__descriptor,
                                                 (int)c->observable_events[i]);
        fprintf(out, " %s", v ? v->name : "?");
    }
    fprintf(out, "\n");
}

static void query_usage(FILE *out)
{
    fprintf(out, "usage: tracectl query [URL]\n\n"
                 "Prints what the service at URL has: producers and their data sources, tracing sessions,\n"
                 "and its capabilities (QueryServiceState, QueryCapabilities; the observer role is enough).\n\n"
                 "  -h, --help         this help\n");
}

int tc_cmd_query(const struct tc_opts *opts, int argc, char **argv)
{
    static const struct option longopts[] = {{"help", no_argument, NULL, 'h'}, {NULL, 0, NULL, 0}};
    optind = 1;
    int c;
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (c) {
        case 'h': query_usage(stdout); return 0;
        default: query_usage(stderr); return 2;
        }
    }
    if (optind != argc) { /* the URL was taken by the dispatcher: anything more is a mistake */
        fprintf(stderr, "tracectl query: unexpected argument '%s'\n", argv[optind]);
        query_usage(stderr);
        return 2;
    }
    struct tc_rpc rpc;
    if (tc_rpc_open(&rpc, opts, "ConsumerPort") != 0) {
        fprintf(stderr, "tracectl: %s: %s\n", opts->endpoint, rpc.error);
        tc_rpc_close(&rpc);
        return 1;
    }
    int rc = 1;
    struct collect col = {evbuffer_new()};
    Perfetto__Protos__QueryServiceStateResponse *resp = NULL;
    Perfetto__Protos__QueryCapabilitiesResponse *caps = NULL;
    if (tc_rpc_call(&rpc, "QueryServiceState", NULL, 0, -1, collect_part, &col, 10000) != 0) {
        fprintf(stderr, "tracectl: QueryServiceState failed: %s\n", rpc.error);
        goto out;
    }
    size_t n = evbuffer_get_length(col.buf);
    resp = perfetto__protos__query_service_state_response__unpack(NULL, n, evbuffer_pullup(col.buf, (ev_ssize_t)n));
    if (!resp) {
        fprintf(stderr, "tracectl: the service sent an undecodable QueryServiceStateResponse\n");
        goto out;
    }
    Perfetto__Protos__TracingServiceState empty = PERFETTO__PROTOS__TRACING_SERVICE_STATE__INIT;
    print_state(stdout, resp->service_state ? resp->service_state : &empty);

    evbuffer_drain(col.buf, n);
    if (tc_rpc_call(&rpc, "QueryCapabilities", NULL, 0, -1, collect_part, &col, 10000) == 0) {
        n = evbuffer_get_length(col.buf);
        caps = perfetto__protos__query_capabilities_response__unpack(NULL, n,
                                                                     evbuffer_pullup(col.buf, (ev_ssize_t)n));
        if (caps && caps->capabilities)
            print_caps(stdout, caps->capabilities);
    } else {
        fprintf(stdout, "\nCAPABILITIES: not supported by this service (%s)\n", rpc.error);
    }
    rc = 0;
out:
    if (resp)
        perfetto__protos__query_service_state_response__free_unpacked(resp, NULL);
    if (caps)
        perfetto__protos__query_capabilities_response__free_unpacked(caps, NULL);
    evbuffer_free(col.buf);
    tc_rpc_close(&rpc);
    return rc;
}
