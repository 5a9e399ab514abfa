/* tracectl_stats.c: `tracectl stats [URL] [--kcdata FILE]`: a tracegate gateway's stats snapshot
 * (TracegateGateway.GetStats, a KCDATA buffer: the node's descriptor, the gateway's counters, one
 * container per node of its fleet). Printed as text, or written unchanged to FILE for
 * `tracectl kcdata FILE` and other KCDATA readers. The buffer is validated before anything is
 * printed or written. */
#include <errno.h>
#include <event2/buffer.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "stats_print.h"
#include "tracectl.h"
#include "tracegate/kcdata.h"
#include "tracegate/kcdata_stats.h"
#include "tracegate_gateway.pb-c.h"

static void stats_usage(FILE *out)
{
    fprintf(out, "usage: tracectl stats [URL] [--kcdata FILE]\n\n"
                 "A tracegate gateway's counters (connections, sessions, traffic, refusals, RPCs, links)\n"
                 "and the nodes it reaches, as the gateway at URL reports them (observer or recorder role;\n"
                 "default URL: the local gateway, " TC_DEFAULT_GATEWAY ").\n\n"
                 "  --kcdata FILE   write the snapshot as a KCDATA buffer to FILE ('-': stdout) instead of\n"
                 "                  printing it; `tracectl kcdata FILE` prints it back\n");
}

static int collect(void *arg, const uint8_t *reply, size_t len, int has_more)
{
    (void)has_more;
    evbuffer_add(arg, reply, len);
    return 0;
}

static int write_file(const char *path, const uint8_t *buf, size_t len, char *err, size_t errlen)
{
    int to_stdout = !strcmp(path, "-");
    FILE *f = to_stdout ? stdout : fopen(path, "wb");
    if (!f) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        return -1;
    }
    int ok = fwrite(buf, 1, len, f) == len;
    ok = (to_stdout ? fflush(f) == 0 : fclose(f) == 0) && ok;
    if (!ok) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno ? errno : EIO));
        if (!to_stdout)
            unlink(path);
        return -1;
    }
    return 0;
}

int tc_cmd_stats(const struct tc_opts *opts, int argc, char **argv)
{
    static const struct option longopts[] = {
        {"kcdata", required_argument, NULL, 'k'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *kc_path = NULL;
    int c;
    optind = 0;
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (c) {
        case 'k': kc_path = optarg; break;
        case 'h': stats_usage(stdout); return 0;
        default: stats_usage(stderr); return 2;
        }
    }
    struct tc_opts o = *opts;
    if (argc - optind == 1) {
        o.endpoint = argv[optind]; /* `stats --kcdata FILE URL` */
    } else if (o.endpoint_defaulted) {
        o.endpoint = TC_DEFAULT_GATEWAY; /* the service's own socket has no gateway */
    }
    if (argc - optind > 1) {
        fprintf(stderr, "tracectl stats: expected at most one URL\n");
        stats_usage(stderr);
        return 2;
    }
    if (o.node && o.node[0]) {
        /* a gateway answers TracegateGateway itself: routing would still give its own numbers */
        fprintf(stderr, "tracectl stats: --node is not supported: give that node's gateway URL\n");
        return 2;
    }
    struct tc_rpc rpc;
    if (tc_rpc_open(&rpc, &o, "TracegateGateway") != 0) {
        fprintf(stderr, "tracectl stats: %s: %s (is it a tracegate gateway, and may you read its stats?)\n",
                o.endpoint, rpc.error);
        tc_rpc_close(&rpc);
        return 1;
    }
    struct evbuffer *col = evbuffer_new();
    Tracegate__GetStatsResponse *r = NULL;
    int ret = 1;
    char err[512];
    if (!col || tc_rpc_call(&rpc, "GetStats", NULL, 0, -1, collect, col, o.timeout_ms) != 0) {
        fprintf(stderr, "tracectl stats: GetStats failed: %s\n", rpc.error);
        goto out;
    }
    size_t n = evbuffer_get_length(col);
    r = tracegate__get_stats_response__unpack(NULL, n, evbuffer_pullup(col, (ev_ssize_t)n));
    if (!r || !r->has_kcdata) {
        fprintf(stderr, "tracectl stats: undecodable answer\n");
        goto out;
    }
    int counters = tg_kcdata_stats_decode(r->kcdata.data, r->kcdata.len, NULL, NULL, err, sizeof err);
    if (counters < 0) {
        fprintf(stderr, "tracectl stats: the gateway's snapshot is not valid KCDATA: %s\n", err);
        goto out;
    }
    if (kc_path) {
        if (write_file(kc_path, r->kcdata.data, r->kcdata.len, err, sizeof err) != 0) {
            fprintf(stderr, "tracectl stats: %s\n", err);
            goto out;
        }
        fprintf(stderr, "tracectl stats: wrote %d counters (%zu bytes of KCDATA) to %s\n", counters, r->kcdata.len,
                kc_path);
    } else if (tc_stats_print(stdout, r->kcdata.data, r->kcdata.len, err, sizeof err) != 0) {
        fprintf(stderr, "tracectl stats: %s\n", err);
        goto out;
    }
    ret = 0;
out:
    if (r)
        tracegate__get_stats_response__free_unpacked(r, NULL);
    if (col)
        evbuffer_free(col);
    tc_rpc_close(&rpc);
    return ret;
}
