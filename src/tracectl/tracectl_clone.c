/* tracectl_clone.c: `tracectl clone [URL] SESSION_ID|NAME`: a snapshot of a running session (the
 * service flushes it and copies its buffers into a read-only clone), read into a .pftrace while
 * the original keeps tracing. The service decides who may clone what (its own sessions, unless
 * privileged). */
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

static void clone_usage(FILE *out)
{
    fprintf(out, "usage: tracectl clone [URL] SESSION [options]\n\n"
                 "Takes a snapshot of a running session (SESSION: its id from `tracectl query`, or its\n"
                 "unique_session_name) and writes it to a trace file; the session keeps running.\n\n"
                 "  -o, --out FILE     output trace file (default trace.pftrace; '-' = stdout); an existing\n"
                 "                     FILE is replaced (a symlink is followed, as by perfetto --out); a read\n"
                 "                     that fails half-way keeps what came\n"
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

int tc_cmd_clone(const struct tc_opts *opts, int argc, char **argv)
{
    static const struct option longopts[] = {
        {"out", required_argument, NULL, 'o'}, {"help", no_argument, NULL, 'h'}, {NULL, 0, NULL, 0}};
    const char *out_path = "trace.pftrace";
    int c;
    optind = 0;
    while ((c = getopt_long(argc, argv, "o:h", longopts, NULL)) != -1) {
        switch (c) {
        case 'o': out_path = optarg; break;
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
