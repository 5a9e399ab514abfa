/* tracectl_merge.c: `tracectl merge TRACE SPANS.ndjson... -o OUT`: a copy of TRACE with OnePath
 * spans stitched in as TrackEvent slices and flows (span_stitch.h); and the same step for
 * `tracectl record --spans`, appending to the trace just written. */
#include "tracectl.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/clock_anchor.h"
#include "span_load.h"
#include "span_stitch.h"
#include "tmp_file.h"
#include "trace_clocks.h"

/* A remote machine's RemoteClockSync just copied, and its clock anchor (base/clock_anchor.h) when
 * the trace does not carry one right after it (traced writes none): the stitched spans of that
 * machine are placed by the sync's offset, and without the anchor trace processor may leave the
 * machine's own packets at their raw times. */
struct pending_anchor {
    uint32_t machine; /* 0: none pending */
    uint64_t boottime;
};

/* Before copying packet p (NULL at the end): the pending anchor, unless p is one. */
static int put_pending_anchor(struct tc_trace_writer *w, struct pending_anchor *pa, const uint8_t *p, size_t pl,
                              size_t *added, char *err, size_t errlen)
{
    if (!pa->machine)
        return 0;
    uint32_t machine = pa->machine;
    pa->machine = 0;
    if (p && tg_clock_anchor_is(p, pl))
        return 0;
    uint8_t a[TG_CLOCK_ANCHOR_MAX];
    (*added)++;
    return tc_trace_writer_add(w, a, tg_clock_anchor_encode(a, machine, pa->boottime), err, errlen);
}

struct emit_ctx {
    struct tc_trace_writer *w;
    char err[512];
};

static int emit_packet(void *arg, const uint8_t *pkt, size_t len)
{
    struct emit_ctx *e = arg;
    return tc_trace_writer_add(e->w, pkt, len, e->err, sizeof e->err);
}

int tc_parse_machine_map(const char *arg, struct tc_machine_map *out)
{
    const char *eq = strrchr(arg, '=');
    if (!eq || eq == arg || !eq[1])
        return -1;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(eq + 1, &end, 0);
    if (errno || *end || v > UINT32_MAX || eq[1] == '-')
        return -1;
    char *host = strndup(arg, (size_t)(eq - arg));
    if (!host)
        return -1;
    out->host = host;
    out->machine_id = (uint32_t)v;
    return 0;
}

int tc_stitch_into(const uint8_t *trace, size_t trace_len, char *const *span_paths, size_t n_paths,
                   const struct tc_stitch_opts *o, struct tc_trace_writer *w, struct tc_stitch_stats *st, char *err,
                   size_t errlen)
{
    struct tc_trace_clocks clocks;
    struct tc_span_set set;
    memset(&set, 0, sizeof set);
    set.host_node = o->host_node;
    memset(st, 0, sizeof *st);
    if (tc_trace_clocks_scan(trace, trace_len, &clocks, err, errlen) != 0)
        return -1;
    int rc = -1;
    if (clocks.compressed && o->warn)
        fprintf(o->warn, "tracectl: note: %" PRIu64 " compressed packet(s) in the trace were not searched for "
                         "clock snapshots or sequence ids\n", clocks.compressed);
    for (size_t i = 0; i < n_paths; i++)
        if (tc_spans_load_file(&set, span_paths[i], o->warn, err, errlen) != 0)
            goto out;
    if (set.n == 0) {
        snprintf(err, errlen, "no span records in %s%s", n_paths == 1 ? span_paths[0] : "the span files",
                 set.bad_lines ? " (only lines that are not span records)" : "");
        goto out;
    }
    struct emit_ctx e = {w, ""};
    if (tc_stitch(&set, &clocks, o, emit_packet, &e, st, err, errlen) != 0) {
        if (e.err[0])
            snprintf(err, errlen, "%s", e.err);
        goto out;
    }
    rc = 0;
out:
    tc_spans_free(&set);
    tc_trace_clocks_free(&clocks);
    return rc;
}

void tc_stitch_summary(FILE *out, const char *path, const struct tc_stitch_stats *st)
{
    fprintf(out, "tracectl: %s: stitched %zu spans as slices on %zu tracks with %zu flows", path, st->placed,
            st->tracks, st->flows);
    if (st->remote)
        fprintf(out, "; %zu on remote machines' clocks", st->remote);
    if (st->on_host_clock)
        fprintf(out, "; %zu from machines the trace does not know, on the host's clocks", st->on_host_clock);
    if (st->orphans)
        fprintf(out, "; %zu whose parent span is not in the inputs", st->orphans);
    if (st->duplicates || st->unplaceable)
        fprintf(out, "; %zu skipped", st->duplicates + st->unplaceable);
    fputc('\n', out);
}

int tc_stitch_file(const char *path, char *const *span_paths, size_t n_paths, const char *host_node)
{
    char err[1024];
    uint8_t *data = NULL;
    size_t len = 0;
    if (tc_trace_file_load(path, &data, &len, err, sizeof err) != 0) {
        fprintf(stderr, "tracectl: --spans: %s\n", err);
        return -1;
    }
    struct tc_trace_writer w;
    if (tc_trace_writer_append(&w, path, err, sizeof err) != 0) {
        fprintf(stderr, "tracectl: --spans: %s\n", err);
        free(data);
        return -1;
    }
    struct tc_stitch_opts so = {NULL, 0, stderr, host_node};
    struct tc_stitch_stats st;
    int rc = tc_stitch_into(data, len, span_paths, n_paths, &so, &w, &st, err, sizeof err);
    char cerr[512];
    if (tc_trace_writer_close(&w, cerr, sizeof cerr) != 0 && rc == 0) {
        snprintf(err, sizeof err, "%s", cerr);
        rc = -1;
    }
    free(data);
    if (rc != 0) {
        fprintf(stderr, "tracectl: --spans: %s (the trace itself is complete)\n", err);
        return -1;
    }
    tc_stitch_summary(stderr, path, &st);
    return 0;
}

static void merge_usage(FILE *out)
{
    fprintf(out,
            "usage: tracectl merge TRACE SPANS.ndjson... -o OUT [--machine HOST=ID]...\n\n"
            "Writes OUT: TRACE with the OnePath spans of the NDJSON files added as TrackEvent slices\n"
            "(a track per machine, service and thread), flows for parent/child edges across tracks, and\n"
            "attributes as arguments; span times are mapped onto the trace's clock per machine.\n\n"
            "  -o, --out FILE         output trace (may be TRACE itself); written to a new file next to it\n"
            "                         and renamed over it when complete: a symlink at FILE is replaced, not\n"
            "                         followed\n"
            "      --machine HOST=ID  spans whose resource host.name is HOST belong to trace machine ID\n"
            "                         (when the span has no perfetto.machine_id / tracegate.node)\n"
            "      --host-node NAME   spans of tracegate node NAME are the trace's host (machine 0): the\n"
            "                         hub a federated trace was recorded through (`tracectl spans` says)\n"
            "  -q, --quiet            no summary\n"
            "  -h, --help             this help\n");
}

int tc_cmd_merge(const struct tc_opts *opts, int argc, char **argv)
{
    (void)opts;
    static const struct option longopts[] = {
        {"out", required_argument, NULL, 'o'}, {"machine", required_argument, NULL, 'M'},
        {"quiet", no_argument, NULL, 'q'},     {"help", no_argument, NULL, 'h'},
        {"host-node", required_argument, NULL, 'H'},
        {NULL, 0, NULL, 0},
    };
    const char *out_path = NULL, *host_node = NULL;
    int quiet = 0, c, ret = 2;
    struct tc_machine_map *map = calloc((size_t)argc + 1, sizeof *map);
    size_t n_map = 0;
    if (!map)
        return 1;
    optind = 0;
    while ((c = getopt_long(argc, argv, "o:qh", longopts, NULL)) != -1) {
        switch (c) {
        case 'o': out_path = optarg; break;
        case 'q': quiet = 1; break;
        case 'H': host_node = optarg; break;
        case 'M':
            if (tc_parse_machine_map(optarg, &map[n_map]) != 0) {
                fprintf(stderr, "tracectl merge: --machine wants HOST=ID (ID a 32-bit number), not '%s'\n", optarg);
                goto out;
            }
            n_map++;
            break;
        case 'h': merge_usage(stdout); ret = 0; goto out;
        default: merge_usage(stderr); goto out;
        }
    }
    if (argc - optind < 2 || !out_path) {
        fprintf(stderr, "tracectl merge: needs a trace, at least one span file and -o OUT\n");
        merge_usage(stderr);
        goto out;
    }
    ret = 1;
    char err[1024];
    uint8_t *data = NULL;
    size_t len = 0;
    if (tc_trace_file_load(argv[optind], &data, &len, err, sizeof err) != 0) {
        fprintf(stderr, "tracectl merge: %s\n", err);
        goto out;
    }
    /* every record is checked (and copied) before OUT is touched: OUT may be TRACE itself */
    struct tc_trace_reader r;
    const uint8_t *p;
    size_t pl, off;
    int rr;
    tc_trace_reader_init(&r, data, len);
    while ((rr = tc_trace_reader_next(&r, &p, &pl, &off, err, sizeof err)) == 1) {
    }
    if (rr < 0) {
        fprintf(stderr, "tracectl merge: %s: %s\n", argv[optind], err);
        free(data);
        goto out;
    }
    /* a regular OUT is written under a new temporary name (created exclusively: a name planted in a
     * shared directory is never opened) and renamed over OUT when complete */
    int to_stdout = strcmp(out_path, "-") == 0;
    char tmp[600];
    struct tc_trace_writer w;
    if (to_stdout) {
        tc_trace_writer_open(&w, "-", err, sizeof err);
    } else {
        FILE *tf = tc_tmp_create(out_path, tmp, sizeof tmp, err, sizeof err);
        if (!tf) {
            fprintf(stderr, "tracectl merge: %s\n", err);
            free(data);
            goto out;
        }
        tc_trace_writer_adopt(&w, tf, tmp);
    }
    tc_trace_reader_init(&r, data, len);
    int bad = 0;
    size_t anchors = 0;
    struct pending_anchor pa = {0, 0};
    while (!bad && tc_trace_reader_next(&r, &p, &pl, &off, err, sizeof err) == 1) {
        bad = put_pending_anchor(&w, &pa, p, pl, &anchors, err, sizeof err) != 0 ||
              tc_trace_writer_add(&w, p, pl, err, sizeof err) != 0;
        tg_clock_anchor_for_sync(p, pl, &pa.machine, &pa.boottime);
    }
    if (!bad)
        bad = put_pending_anchor(&w, &pa, NULL, 0, &anchors, err, sizeof err) != 0;
    struct tc_stitch_opts so = {map, n_map, stderr, host_node};
    struct tc_stitch_stats st;
    if (!bad)
        bad = tc_stitch_into(data, len, argv + optind + 1, (size_t)(argc - optind - 1), &so, &w, &st, err,
                             sizeof err) != 0;
    char cerr[512];
    if (tc_trace_writer_close(&w, cerr, sizeof cerr) != 0 && !bad) {
        snprintf(err, sizeof err, "%s", cerr);
        bad = 1;
    }
    free(data);
    if (!bad && !to_stdout && rename(tmp, out_path) != 0) {
        snprintf(err, sizeof err, "cannot rename %s to %s: %s", tmp, out_path, strerror(errno));
        bad = 1;
    }
    if (bad) {
        fprintf(stderr, "tracectl merge: %s\n", err);
        if (!to_stdout)
            remove(tmp);
        goto out;
    }
    if (!quiet) {
        tc_stitch_summary(stderr, out_path, &st);
        if (anchors)
            fprintf(stderr, "tracectl: %s: a clock anchor added after %zu machine%s RemoteClockSync, so that "
                            "trace processor moves %s packets by its offset as the spans are (docs/service.md)\n",
                    out_path, anchors, anchors == 1 ? "'s" : "s'", anchors == 1 ? "that machine's" : "their");
    }
    ret = 0;
out:
    for (size_t i = 0; i < n_map; i++)
        free((char *)map[i].host);
    free(map);
    return ret;
}
