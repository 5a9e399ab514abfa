/* tracectl_spans.c: `tracectl spans`: the recent OnePath spans of one node or of every node a
 * gateway reaches (TracegateFleet.Spans, spans role), written as NDJSON that `tracectl merge` and
 * `record --spans` read. A cursor file (--cursor) remembers, per node, the last span fetched, so
 * repeated fetches get each span once. Also the fetch behind `record --nodes/--all --spans @fleet`. */
#include "tracectl.h"
#include "tracegate/log.h"

#include <errno.h>
#include <event2/buffer.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "base/node_name.h"
#include "tmp_file.h"
#include "tracegate_gateway.pb-c.h"

#define MAX_NODES 256
#define MAX_ROUNDS 10000 /* answers per node in one fetch (each up to 4096 spans): a safety net */

struct cursor {
    char node[64];
    uint64_t since;
};

struct cursors {
    struct cursor v[MAX_NODES];
    size_t n;
};

static uint64_t *cursor_of(struct cursors *c, const char *node)
{
    for (size_t i = 0; i < c->n; i++)
        if (!strcmp(c->v[i].node, node))
            return &c->v[i].since;
    if (c->n == MAX_NODES)
        return NULL;
    snprintf(c->v[c->n].node, sizeof c->v[c->n].node, "%s", node);
    c->v[c->n].since = 0;
    return &c->v[c->n++].since;
}

/* "NAME ID" lines; a missing file is an empty cursor. Any other line (a name outside the node
 * name syntax, a bad id, a line too long) fails the load: -1, the reason on log. */
static int cursors_load(struct cursors *c, const char *path, FILE *log)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    char line[256];
    int ret = 0;
    for (unsigned ln = 1; fgets(line, sizeof line, f); ln++) {
        size_t len = strlen(line);
        const char *why = NULL;
        if (len && line[len - 1] == '\n')
            line[--len] = 0;
        else if (!feof(f))
            why = "line too long";
        char *sp = why ? NULL : strchr(line, ' ');
        char *end = NULL;
        unsigned long long id = 0;
        if (!why && !sp)
            why = "not 'NODE ID'";
        if (!why) {
            *sp = 0;
            errno = 0;
            id = strtoull(sp + 1, &end, 10);
            if (!tg_node_name_ok(line))
                why = "not a node name ([A-Za-z0-9._-]{1,63})";
            else if (!(sp[1] >= '0' && sp[1] <= '9') || *end || errno)
                why = "not a span id";
        }
        if (why) {
            fprintf(log, "tracectl spans: cursor file %s line %u: %s: fix or remove the file\n", path, ln, why);
            ret = -1;
            break;
        }
        uint64_t *p = cursor_of(c, line);
        if (p)
            *p = id;
    }
    fclose(f);
    return ret;
}

/* Written to a new file next to path and renamed over it: a name planted in a shared directory is
 * never opened, and a symlink at path is replaced, not followed. */
static int cursors_save(const struct cursors *c, const char *path, FILE *log)
{
    char tmp[4096], err[512];
    FILE *f = tc_tmp_create(path, tmp, sizeof tmp, err, sizeof err);
    if (!f) {
        fprintf(log, "tracectl spans: cannot save the cursor file: %s\n", err);
        return -1;
    }
    errno = 0;
    for (size_t i = 0; i < c->n; i++)
        if (tg_node_name_ok(c->v[i].node))
            fprintf(f, "%s %" PRIu64 "\n", c->v[i].node, c->v[i].since);
    int bad = ferror(f);
    if (fclose(f) != 0 || bad || rename(tmp, path) != 0) {
        fprintf(log, "tracectl spans: cannot save the cursor file %s: %s\n", path, strerror(errno ? errno : EIO));
        remove(tmp);
        return -1;
    }
    return 0;
}

static int collect(void *arg, const uint8_t *reply, size_t len, int has_more)
{
    (void)has_more;
    evbuffer_add(arg, reply, len);
    return 0;
}

/* One node: Spans calls from *since until the node has no more. Lines go to out. Returns the spans
 * written, or -1 (the reason on log). */
static long fetch_node(struct tc_rpc *rpc, const char *node_name, uint64_t *since, FILE *out, FILE *log)
{
    char node[160]; /* for messages: the name comes from the gateway's ListNodes */
    tg_escape_text(node_name, node, sizeof node);
    long total = 0;
    uint64_t missed = 0, stop_at = 0;
    for (int round = 0; round < MAX_ROUNDS; round++) {
        Tracegate__SpansRequest rq = TRACEGATE__SPANS_REQUEST__INIT;
        rq.node = (char *)node_name;
        rq.has_since_id = 1;
        rq.since_id = *since;
        uint8_t buf[128];
        size_t n = tracegate__spans_request__pack(&rq, buf);
        struct evbuffer *col = evbuffer_new();
        if (!col)
            return -1;
        if (tc_rpc_call(rpc, "Spans", buf, n, -1, collect, col, 60000) != 0) {
            fprintf(log, "tracectl spans: node %s: %s\n", node,
                    rpc->error[0] ? rpc->error : "refused (the spans role is needed)");
            rpc->error[0] = 0;
            evbuffer_free(col);
            return -1;
        }
        size_t len = evbuffer_get_length(col);
        Tracegate__SpansResponse *r =
            tracegate__spans_response__unpack(NULL, len, evbuffer_pullup(col, (ev_ssize_t)len));
        evbuffer_free(col);
        if (!r) {
            fprintf(log, "tracectl spans: node %s: undecodable answer\n", node);
            return -1;
        }
        if (r->error) {
            char e[512];
            fprintf(log, "tracectl spans: node %s: %s\n", node, tg_escape_text(r->error, e, sizeof e));
            tracegate__spans_response__free_unpacked(r, NULL);
            return -1;
        }
        if (r->has_ndjson && r->ndjson.len) {
            fwrite(r->ndjson.data, 1, r->ndjson.len, out);
            for (size_t i = 0; i < r->ndjson.len; i++)
                total += r->ndjson.data[i] == '\n';
        }
        missed += r->missed;
        /* stop at the newest span of the first answer: this fetch's own spans are for the next */
        if (round == 0)
            stop_at = r->has_last_id ? r->last_id : UINT64_MAX;
        int more = r->more && r->next_since > *since && r->next_since < stop_at;
        if (r->has_next_since)
            *since = r->next_since;
        tracegate__spans_response__free_unpacked(r, NULL);
        if (!more)
            break;
    }
    fprintf(log, "tracectl spans: node %s: %ld spans%s", node, total, missed ? "" : "\n");
    if (missed)
        fprintf(log, " (%" PRIu64 " more were pushed out of its store before this fetch)\n", missed);
    return total;
}

/* ListNodes: every node that is not raw into names (for @all) and this gateway's own name into
 * self (when not NULL). 0 or -1 (the reason on log, when not NULL). */
static int list_nodes(struct tc_rpc *rpc, const char *spec, char (*names)[64], size_t max, size_t *n, char self[64],
                      FILE *log)
{
    struct evbuffer *col = evbuffer_new();
    if (!col || tc_rpc_call(rpc, "ListNodes", NULL, 0, -1, collect, col, 10000) != 0) {
        if (log)
            fprintf(log, "tracectl spans: ListNodes failed: %s\n", rpc->error);
        rpc->error[0] = 0;
        if (col)
            evbuffer_free(col);
        return -1;
    }
    size_t len = evbuffer_get_length(col);
    Tracegate__ListNodesResponse *r =
        tracegate__list_nodes_response__unpack(NULL, len, evbuffer_pullup(col, (ev_ssize_t)len));
    evbuffer_free(col);
    for (size_t i = 0; r && i < r->n_nodes; i++) {
        const Tracegate__FleetNode *x = r->nodes[i];
        if (!x->name)
            continue;
        if (!tg_node_name_ok(x->name)) { /* a broken or hostile gateway: the name is not fetched nor kept */
            char e[320];
            if (log)
                fprintf(log, "tracectl spans: the gateway lists a node named '%s', not a node name: skipped\n",
                        tg_escape_text(x->name, e, sizeof e));
            continue;
        }
        if (self && x->state && !strcmp(x->state, "self"))
            snprintf(self, 64, "%s", x->name);
        if (!strcmp(spec, "@all") && *n < max && (!x->state || strcmp(x->state, "raw") != 0))
            snprintf(names[(*n)++], 64, "%s", x->name);
    }
    if (r)
        tracegate__list_nodes_response__free_unpacked(r, NULL);
    return r ? 0 : -1;
}

/* The nodes of spec: "NAME", "@a,b" or "@all" (every node the gateway lists that is not raw). */
static size_t spec_nodes(struct tc_rpc *rpc, const char *spec, char (*names)[64], size_t max, char self[64],
                         FILE *log)
{
    size_t n = 0;
    if (!strcmp(spec, "@all"))
        return list_nodes(rpc, spec, names, max, &n, self, log) == 0 ? n : 0;
    if (self) /* only to learn our own name: not fatal (an older gateway may not let a spans-only caller list) */
        list_nodes(rpc, spec, names, max, &n, self, NULL);
    if (spec[0] != '@') {
        snprintf(names[0], 64, "%s", spec[0] ? spec : self ? self : "");
        return 1;
    }
    if (strcmp(spec, "@all") != 0) {
        char list[1024];
        snprintf(list, sizeof list, "%s", spec + 1);
        char *save = NULL;
        for (char *t = strtok_r(list, ",", &save); t && n < max; t = strtok_r(NULL, ",", &save))
            snprintf(names[n++], 64, "%s", t);
        return n;
    }
    return n;
}

int tc_fetch_fleet_spans(const struct tc_opts *opts, const char *spec, const char *out_path, const char *cursor_path,
                         char self[64], FILE *log)
{
    struct tc_opts o = *opts;
    o.node = NULL; /* TracegateFleet is the gateway's own: it asks the other nodes itself */
    if (o.endpoint_defaulted)
        o.endpoint = TC_DEFAULT_GATEWAY;
    static struct cursors cur;
    memset(&cur, 0, sizeof cur);
    if (cursor_path && cursors_load(&cur, cursor_path, log) != 0)
        return -1;
    struct tc_rpc rpc;
    if (tc_rpc_open(&rpc, &o, "TracegateFleet") != 0) {
        fprintf(log, "tracectl spans: %s: %s (is it a tracegate gateway? the spans role is needed)\n", o.endpoint,
                rpc.error);
        tc_rpc_close(&rpc);
        return -1;
    }
    char(*names)[64] = calloc(MAX_NODES, sizeof *names);
    FILE *out = !names ? NULL : strcmp(out_path, "-") == 0 ? stdout : fopen(out_path, "w");
    int ret = -1;
    if (!out) {
        fprintf(log, "tracectl spans: cannot write %s\n", out_path);
        goto done;
    }
    if (self)
        self[0] = 0;
    size_t n = spec_nodes(&rpc, spec, names, MAX_NODES, self, log);
    size_t ok = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t *since = tg_node_name_ok(names[i]) ? cursor_of(&cur, names[i]) : NULL;
        uint64_t scratch = 0;
        if (fetch_node(&rpc, names[i], since ? since : &scratch, out, log) >= 0)
            ok++;
    }
    if (out != stdout && fclose(out) != 0)
        fprintf(log, "tracectl spans: writing %s failed\n", out_path);
    else if (out == stdout)
        fflush(stdout);
    if (cursor_path)
        cursors_save(&cur, cursor_path, log);
    ret = n && ok == n ? 0 : ok ? 1 : -1;
done:
    free(names);
    tc_rpc_close(&rpc);
    return ret;
}

/* --test-raw-args HEX: one Spans call with exactly these argument bytes (tests of the gateway's
 * refusals); prints "refused: ..." or "answered". */
static int raw_call(const struct tc_opts *opts, const char *hex)
{
    size_t hl = strlen(hex);
    uint8_t *args = malloc(hl / 2 + 1);
    if (!args || hl % 2)
        return free(args), 2;
    for (size_t i = 0; i < hl / 2; i++) {
        unsigned v;
        if (sscanf(hex + 2 * i, "%2x", &v) != 1)
            return free(args), 2;
        args[i] = (uint8_t)v;
    }
    struct tc_opts o = *opts;
    o.node = NULL;
    if (o.endpoint_defaulted)
        o.endpoint = TC_DEFAULT_GATEWAY;
    struct tc_rpc rpc;
    int ret = 1;
    if (tc_rpc_open(&rpc, &o, "TracegateFleet") != 0) {
        printf("refused: %s\n", rpc.error);
    } else if (tc_rpc_call(&rpc, "Spans", args, hl / 2, -1, NULL, NULL, 30000) != 0) {
        printf("refused: %s\n", rpc.error[0] ? rpc.error : "rejected");
        /* the connection must still work after a refusal */
        if (tc_rpc_call(&rpc, "ListNodes", NULL, 0, -1, NULL, NULL, 10000) == 0)
            printf("still connected\n");
    } else {
        printf("answered\n");
        ret = 0;
    }
    tc_rpc_close(&rpc);
    free(args);
    return ret;
}

static void spans_usage(FILE *out)
{
    fprintf(out,
            "usage: tracectl spans [URL] [--node NAME | --nodes A,B | --all] [-o FILE.ndjson] [--cursor FILE]\n"
            "The recent OnePath spans of this gateway's node (default), node NAME, or every node, as NDJSON\n"
            "(`tracectl merge TRACE FILE.ndjson -o OUT` stitches them into a trace). Needs the spans role\n"
            "here, and on the other nodes their link-roles must include spans.\n"
            "  -o FILE          write the spans to FILE (default: stdout)\n"
            "  --cursor FILE    read and update per-node cursors in FILE: each span is fetched once. Its\n"
            "                   lines are 'NODE ID' (NODE: [A-Za-z0-9._-]{1,63}, ID: a decimal span id); a\n"
            "                   file with any other line is refused before anything is fetched, and a node\n"
            "                   whose name is not such a name is not kept in it. It is replaced through a\n"
            "                   new file next to it (a symlink at FILE is replaced, not followed); -o FILE\n"
            "                   is opened as given (a symlink is followed)\n");
}

int tc_cmd_spans(const struct tc_opts *opts, int argc, char **argv)
{
    static const struct option lo[] = {
        {"node", required_argument, NULL, 'N'},          {"nodes", required_argument, NULL, 'n'},
        {"all", no_argument, NULL, 'a'},                 {"cursor", required_argument, NULL, 'C'},
        {"test-raw-args", required_argument, NULL, 'X'}, {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    char spec[1100] = "";
    const char *out = "-", *cursor = NULL, *raw = NULL;
    if (opts->node)
        snprintf(spec, sizeof spec, "%s", opts->node);
    optind = 1;
    int c;
    while ((c = getopt_long(argc, argv, "o:h", lo, NULL)) != -1) {
        switch (c) {
        case 'N': snprintf(spec, sizeof spec, "%s", optarg); break;
        case 'n': snprintf(spec, sizeof spec, "@%s", optarg); break;
        case 'a': snprintf(spec, sizeof spec, "@all"); break;
        case 'o': out = optarg; break;
        case 'C': cursor = optarg; break;
        case 'X': raw = optarg; break;
        case 'h': spans_usage(stdout); return 0;
        default: spans_usage(stderr); return 2;
        }
    }
    struct tc_opts o = *opts;
    if (argc - optind == 1 && opts->endpoint_defaulted) {
        o.endpoint = argv[optind++];
        o.endpoint_defaulted = 0;
    }
    if (optind != argc) {
        spans_usage(stderr);
        return 2;
    }
    if (raw)
        return raw_call(&o, raw);
    char self[64];
    int rc = tc_fetch_fleet_spans(&o, spec, out, cursor, self, stderr);
    if (self[0])
        fprintf(stderr, "tracectl spans: %s is the gateway's own node (`tracectl merge --host-node %s` for its "
                        "federated traces)\n", self, self);
    return rc == 0 ? 0 : 1;
}
