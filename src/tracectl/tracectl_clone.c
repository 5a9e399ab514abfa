/* tracectl_clone.c: `tracectl clone [URL] SESSION_ID|NAME`: a snapshot of a running session (the
 * service flushes it and copies its buffers into a read-only clone), read into a .pftrace while
 * the original keeps tracing. The service decides who may clone what (its own sessions, unless
 * privileged). The read is bounded by the clone's buffers as GetTraceStats gives them (twice
 * their size plus 16 MiB, as record and attach), else by --max-size (default 4 GiB). */
#include "tracectl.h"
#include "tracegate/log.h"

#include <event2/buffer.h>
#include <getopt.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "consumer_port.pb-c.h"
#include "trace_stats.pb-c.h"

/* the most read from a clone whose buffers the service does not tell (without --max-size) */
#define CLONE_DEFAULT_MAX_KB (4u << 20)

static void clone_usage(FILE *out)
{
    fprintf(out, "usage: tracectl clone [URL] SESSION [options]\n\n"
                 "Takes a snapshot of a running session (SESSION: its id from `tracectl query`, or its\n"
                 "unique_session_name) and writes it to a trace file; the session keeps running.\n\n"
                 "  -o, --out FILE     output trace file (default trace.pftrace; '-' = stdout); an existing\n"
                 "                     FILE is replaced (a symlink is followed, as by perfetto --out); a read\n"
                 "                     that fails half-way keeps what came\n"
                 "      --max-size SIZE  read at most SIZE (e.g. 8gb) from the clone; default: twice the\n"
                 "                     clone's buffers plus 16 MiB as GetTraceStats tells them, or 4 GiB when\n"
                 "                     the service does not. Past it the read stops, keeps what came, exit 1\n"
                 "  -h, --help         this help\n");
}

static int collect_part(void *arg, const uint8_t *reply, size_t len, int has_more)
{
    (void)has_more;
    evbuffer_add(arg, reply, len);
    return 0;
}

static int pack_request(const char *what, uint8_t *buf, size_t cap, size_t *len)
{
    Perfetto__Protos__CloneSessionRequest rq = PERFETTO__PROTOS__CLONE_SESSION_REQUEST__INIT;
    char *end;
    unsigned long long id = strtoull(what, &end, 10);
    if (*what && *end == '\0') {
        rq.selector_case = PERFETTO__PROTOS__CLONE_SESSION_REQUEST__SELECTOR_SESSION_ID;
        rq.session_id = id;
    } else {
        rq.selector_case = PERFETTO__PROTOS__CLONE_SESSION_REQUEST__SELECTOR_UNIQUE_SESSION_NAME;
        rq.unique_session_name = (char *)what;
    }
    *len = perfetto__protos__clone_session_request__get_packed_size(&rq);
    if (*len > cap)
        return -1;
    perfetto__protos__clone_session_request__pack(&rq, buf);
    return 0;
}

/* The clone's buffers from GetTraceStats (the consumer is now attached to the clone): twice their
 * size plus 16 MiB, as tc_read_limit; 0 when the service does not say. A server lying about
 * them only bounds its own answer. */
static uint64_t clone_read_limit(struct tc_rpc *rpc)
{
    struct evbuffer *col = evbuffer_new();
    uint64_t total = 0;
    if (!col)
        return 0;
    if (tc_rpc_call(rpc, "GetTraceStats", NULL, 0, -1, collect_part, col, 10000) != 0) {
        rpc->error[0] = 0;
        evbuffer_free(col);
        return 0;
    }
    size_t n = evbuffer_get_length(col);
    Perfetto__Protos__GetTraceStatsResponse *r =
        perfetto__protos__get_trace_stats_response__unpack(NULL, n, evbuffer_pullup(col, (ev_ssize_t)n));
    evbuffer_free(col);
    if (!r)
        return 0;
    const Perfetto__Protos__TraceStats *ts = r->trace_stats;
    for (size_t i = 0; ts && i < ts->n_buffer_stats; i++) {
        const Perfetto__Protos__TraceStats__BufferStats *b = ts->buffer_stats[i];
        if (!b->has_buffer_size || !b->buffer_size) {
            total = 0; /* a buffer of unknown size: the default bound */
            break;
        }
        total += b->buffer_size < (1ull << 50) ? b->buffer_size : (1ull << 50); /* no overflow */
    }
    perfetto__protos__get_trace_stats_response__free_unpacked(r, NULL);
    return total ? 2 * total + (16u << 20) : 0;
}

int tc_cmd_clone(const struct tc_opts *opts, int argc, char **argv)
{
    static const struct option longopts[] = {
        {"out", required_argument, NULL, 'o'}, {"max-size", required_argument, NULL, 'M'},
        {"help", no_argument, NULL, 'h'}, {NULL, 0, NULL, 0}};
    const char *out_path = "trace.pftrace";
    uint32_t max_kb = 0;
    int c;
    optind = 0;
    while ((c = getopt_long(argc, argv, "o:h", longopts, NULL)) != -1) {
        switch (c) {
        case 'o': out_path = optarg; break;
        case 'M':
            if (tc_parse_size_kb(optarg, &max_kb) != 0) {
                fprintf(stderr, "tracectl clone: invalid --max-size '%s' (e.g. 512mb, 8gb)\n", optarg);
                return 2;
            }
            break;
        case 'h': clone_usage(stdout); return 0;
        default: clone_usage(stderr); return 2;
        }
    }
    struct tc_opts eo;
    const char *what = tc_url_then_operand(opts, argc, argv, "clone", "SESSION", &eo);
    if (!what) {
        clone_usage(stderr);
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    uint8_t req[600];
    size_t rlen;
    if (pack_request(what, req, sizeof req, &rlen) != 0) {
        fprintf(stderr, "tracectl clone: SESSION is too long\n");
        return 2;
    }

    struct tc_rpc rpc;
    if (tc_rpc_open(&rpc, &eo, "ConsumerPort") != 0) {
        fprintf(stderr, "tracectl clone: cannot reach the tracing service at %s: %s\n", eo.endpoint, rpc.error);
        tc_rpc_close(&rpc);
        return 1;
    }
    int ret = 1, have_session = 0, have_writer = 0;
    struct evbuffer *col = evbuffer_new();
    Perfetto__Protos__CloneSessionResponse *resp = NULL;
    struct tc_session s;
    struct tc_trace_writer w;
    char err[512];
    if (tc_rpc_call(&rpc, "CloneSession", req, rlen, -1, collect_part, col, 60000) != 0) {
        fprintf(stderr, "tracectl clone: the service refused CloneSession: %s\n", rpc.error);
        goto out;
    }
    size_t n = evbuffer_get_length(col);
    resp = perfetto__protos__clone_session_response__unpack(NULL, n, evbuffer_pullup(col, (ev_ssize_t)n));
    if (!resp) {
        fprintf(stderr, "tracectl clone: the service sent an undecodable CloneSessionResponse\n");
        goto out;
    }
    if (!resp->success) {
        char e[512];
        fprintf(stderr, "tracectl clone: cannot clone '%s': %s\n", what,
                resp->error ? tg_escape_text(resp->error, e, sizeof e) : "refused");
        goto out;
    }
    /* a federated clone's nodes are bounded by the gateway, each by its own buffers (a node whose
     * stats did not come would be missing from a sum): the default or --max-size for the whole */
    int federated = eo.node && eo.node[0] == '@';
    uint64_t limit = max_kb || federated ? 0 : clone_read_limit(&rpc);
    if (tc_trace_writer_open(&w, out_path, err, sizeof err) != 0) {
        fprintf(stderr, "tracectl clone: %s\n", err);
        goto out;
    }
    have_writer = 1;
    if (tc_session_init(&s, &rpc, 0, 0) != 0) {
        fprintf(stderr, "tracectl clone: cannot set up the event loop\n");
        goto out;
    }
    have_session = 1;
    if (limit) {
        s.read_limit = limit;
    } else {
        s.read_limit = (uint64_t)(max_kb ? max_kb : CLONE_DEFAULT_MAX_KB) * 1024;
        s.read_limit_why = max_kb      ? "--max-size"
                           : federated ? "the default --max-size of a federated clone"
                                       : "the default --max-size: the service did not tell the clone's buffers";
    }
    fprintf(stderr, "tracectl: cloned session '%s'\n", what);
    have_writer = 0; /* tc_session_read closes it */
    if (tc_session_read(&s, &w) != 0)
        goto out;
    ret = 0;
out:
    if (have_writer)
        tc_trace_writer_close(&w, err, sizeof err);
    if (have_session)
        tc_session_destroy(&s);
    if (resp)
        perfetto__protos__clone_session_response__free_unpacked(resp, NULL);
    evbuffer_free(col);
    tc_rpc_close(&rpc);
    return ret;
}
