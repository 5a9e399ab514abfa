/* tracectl_attach.c: `tracectl attach [URL] KEY`: re-attach to a session started with
 * `record --detach KEY`, wait for it to end (or stop it with --stop), collect the trace. */
#include "tracectl.h"

#include <event2/buffer.h>
#include <getopt.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>

#include "consumer_port.pb-c.h"

static void attach_usage(FILE *out)
{
    fprintf(out, "usage: tracectl attach [URL] KEY [options]\n\n"
                 "Re-attaches to a session detached with `tracectl record --detach KEY` (or perfetto --detach),\n"
                 "waits for it to end, reads its trace and frees it.\n\n"
                 "  -o, --out FILE     output trace file (default trace.pftrace; '-' = stdout); an existing\n"
                 "                     FILE is replaced (a symlink is followed, as by perfetto --out); a read\n"
                 "                     that fails half-way keeps what came\n"
                 "      --stop         stop the session now instead of waiting for its duration\n"
                 "      --no-progress  no progress line on stderr\n"
                 "  -h, --help         this help\n");
}

static int collect_part(void *arg, const uint8_t *reply, size_t len, int has_more)
{
    (void)has_more;
    evbuffer_add(arg, reply, len);
    return 0;
}

int tc_cmd_attach(const struct tc_opts *opts, int argc, char **argv)
{
    static const struct option longopts[] = {
        {"out", required_argument, NULL, 'o'}, {"stop", no_argument, NULL, 'S'},
        {"no-progress", no_argument, NULL, 'P'}, {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *out_path = NULL;
    int stop = 0, progress = 1, c;
    optind = 0;
    while ((c = getopt_long(argc, argv, "o:h", longopts, NULL)) != -1) {
        switch (c) {
        case 'o': out_path = optarg; break;
        case 'S': stop = 1; break;
        case 'P': progress = 0; break;
        case 'h': attach_usage(stdout); return 0;
        default: attach_usage(stderr); return 2;
        }
    }
    struct tc_opts eo;
    const char *key = tc_url_then_operand(opts, argc, argv, "attach", "KEY", &eo);
    if (!key) {
        attach_usage(stderr);
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);

    struct tc_rpc rpc;
    if (tc_rpc_open(&rpc, &eo, "ConsumerPort") != 0) {
        fprintf(stderr, "tracectl attach: cannot reach the tracing service at %s: %s\n", eo.endpoint, rpc.error);
        tc_rpc_close(&rpc);
        return 1;
    }
    int ret = 1;
    struct evbuffer *col = evbuffer_new();
    Perfetto__Protos__AttachResponse *resp = NULL;
    struct tc_session s;
    int have_session = 0, have_writer = 0, remove_out = 0;
    struct tc_trace_writer w;
    char err[512];
    const char *path = out_path ? out_path : "trace.pftrace";
    struct stat st;

    Perfetto__Protos__AttachRequest ar = PERFETTO__PROTOS__ATTACH_REQUEST__INIT;
    ar.key = (char *)key;
    uint8_t abuf[600];
    size_t alen = perfetto__protos__attach_request__get_packed_size(&ar);
    if (alen > sizeof abuf) {
        fprintf(stderr, "tracectl attach: KEY is too long\n");
        goto out;
    }
    perfetto__protos__attach_request__pack(&ar, abuf);
    if (tc_rpc_call(&rpc, "Attach", abuf, alen, -1, collect_part, col, 10000) != 0) {
        if (rpc.disconnected)
            fprintf(stderr, "tracectl attach: lost the connection to the service: %s\n", rpc.error);
        else
            fprintf(stderr, "tracectl attach: cannot attach to '%s': no detached session with that key (%s)\n", key,
                    rpc.error);
        goto out;
    }
    size_t n = evbuffer_get_length(col);
    resp = perfetto__protos__attach_response__unpack(NULL, n, evbuffer_pullup(col, (ev_ssize_t)n));
    if (!resp) {
        fprintf(stderr, "tracectl attach: the service sent an undecodable AttachResponse\n");
        goto out;
    }
    Perfetto__Protos__TraceConfig empty = PERFETTO__PROTOS__TRACE_CONFIG__INIT;
    const Perfetto__Protos__TraceConfig *cfg = resp->trace_config ? resp->trace_config : &empty;
    fprintf(stderr, "tracectl: attached to session '%s': ", key);
    tc_print_config_summary(stderr, cfg);
    fprintf(stderr, "\n");
    int wif = cfg->write_into_file;
    if (!wif) {
        /* open the output now: once re-armed, a failure would end the session, so on error
         * detach again with the same key and leave it running */
        if (tc_trace_writer_open(&w, path, err, sizeof err) != 0) {
            fprintf(stderr, "tracectl attach: %s\n", err);
            if (tc_rpc_call(&rpc, "Detach", abuf, alen, -1, NULL, NULL, 10000) == 0)
                fprintf(stderr, "tracectl attach: detached again; the session keeps running under key '%s'\n", key);
            goto out;
        }
        have_writer = 1;
        remove_out = strcmp(path, "-") != 0 && stat(path, &st) == 0 && S_ISREG(st.st_mode);
    }

    if (tc_session_init(&s, &rpc, 0, progress) != 0) {
        fprintf(stderr, "tracectl attach: cannot set up the event loop\n");
        goto out;
    }
    have_session = 1;
    s.attached = 1;

    /* re-arm the end-of-session reply (the config is ignored by the service) */
    Perfetto__Protos__EnableTracingRequest er = PERFETTO__PROTOS__ENABLE_TRACING_REQUEST__INIT;
    er.has_attach_notification_only = 1;
    er.attach_notification_only = 1;
    uint8_t ebuf[8];
    size_t elen = perfetto__protos__enable_tracing_request__pack(&er, ebuf);
    if (tc_session_enable(&s, ebuf, elen, -1) != 0) {
        fprintf(stderr, "tracectl attach: %s\n", rpc.error);
        goto out;
    }
    if (stop)
        tc_session_stop(&s);
    if (tc_session_wait(&s) != 0)
        goto out;

    if (wif) {
        /* the service wrote the trace into the file handed over when the session started */
        if (out_path)
            fprintf(stderr, "tracectl: note: -o %s ignored: this write_into_file session wrote its trace into the "
                            "file given when it was started\n",
                    out_path);
        tc_session_free_buffers(&s);
        fprintf(stderr, "tracectl: session ended; the trace is in the file given to `record --detach`\n");
        ret = 0;
        goto out;
    }
    remove_out = 0; /* from here on a failure leaves what was collected */
    have_writer = 0;
    if (!(eo.node && eo.node[0] == '@'))
        s.read_limit = tc_read_limit(cfg);
    if (tc_session_read(&s, &w) != 0)
        goto out;
    ret = 0;
out:
    if (have_writer)
        tc_trace_writer_close(&w, err, sizeof err);
    if (ret != 0 && remove_out)
        unlink(path); /* no empty trace left behind */
    if (have_session)
        tc_session_destroy(&s);
    if (resp)
        perfetto__protos__attach_response__free_unpacked(resp, NULL);
    evbuffer_free(col);
    tc_rpc_close(&rpc);
    return ret;
}
