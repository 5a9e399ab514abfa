/* tracectl_machines.c: the per-node outcome of a federated record (`tracectl record --nodes` /
 * `--all`): packets counted by TracePacket.machine_id (98) as they are written, failures from the
 * gateway's TraceStats{final_flush_outcome: FAILED} packet for a node, link gaps from its
 * TraceStats extension field 1001 (docs/link-protocol.md §8), names from ListNodes. */
#include "tracectl.h"
#include "tracegate/log.h"

#include <event2/buffer.h>
#include <inttypes.h>
#include <string.h>

#include "tracegate/pbwire.h"
#include "tracegate_gateway.pb-c.h"

enum {
    PKT_TRACE_STATS = 35,
    PKT_MACHINE_ID = 98,
    STATS_FINAL_FLUSH_OUTCOME = 15,
    FINAL_FLUSH_FAILED = 2,
    STATS_TG_LINK_GAP = 1001,
    GAP_COUNT = 1,
    GAP_NS = 2,
    GAP_REATTACHED = 3,
};

struct stats_seen {
    int failed, has_gap, reattached;
    uint32_t gaps;
    uint64_t gap_ns;
};

static void read_gap(const uint8_t *p, size_t len, struct stats_seen *out)
{
    struct tg_pb_reader r;
    struct tg_pb_field f;
    out->has_gap = 1;
    tg_pb_reader_init(&r, p, len);
    while (tg_pb_next(&r, &f) == 1) {
        if (f.wire != TG_PB_VARINT)
            continue;
        if (f.number == GAP_COUNT)
            out->gaps = (uint32_t)f.value;
        else if (f.number == GAP_NS)
            out->gap_ns = f.value;
        else if (f.number == GAP_REATTACHED)
            out->reattached = f.value != 0;
    }
}

static void read_stats(const uint8_t *p, size_t len, struct stats_seen *out)
{
    struct tg_pb_reader r;
    struct tg_pb_field f;
    tg_pb_reader_init(&r, p, len);
    while (tg_pb_next(&r, &f) == 1)
        if (f.number == STATS_FINAL_FLUSH_OUTCOME && f.wire == TG_PB_VARINT)
            out->failed = f.value == FINAL_FLUSH_FAILED;
        else if (f.number == STATS_TG_LINK_GAP && f.wire == TG_PB_LEN)
            read_gap(f.data, f.len, out);
}

void tc_count_machine(struct tc_session *s, const uint8_t *pkt, size_t len)
{
    struct tg_pb_reader r;
    struct tg_pb_field f;
    uint32_t id = 0;
    struct stats_seen st = {0};
    int is_stats = 0;
    tg_pb_reader_init(&r, pkt, len);
    while (tg_pb_next(&r, &f) == 1) {
        if (f.number == PKT_MACHINE_ID && f.wire == TG_PB_VARINT)
            id = (uint32_t)f.value;
        else if (f.number == PKT_TRACE_STATS && f.wire == TG_PB_LEN)
            read_stats(f.data, f.len, &st), is_stats = 1;
    }
    size_t i = 0;
    while (i < s->n_machines && s->machines[i].id != id)
        i++;
    if (i == s->n_machines) {
        if (s->n_machines == sizeof s->machines / sizeof s->machines[0])
            return;
        s->machines[s->n_machines++] = (struct tc_machine){.id = id};
    }
    struct tc_machine *m = &s->machines[i];
    if (st.has_gap) { /* the latest record counts: it has the totals */
        m->gaps = st.gaps;
        m->gap_ns = st.gap_ns;
        m->reattached = st.reattached;
    }
    if (st.failed)
        m->failed = 1;
    else if (!(is_stats && st.has_gap))
        m->packets++;
}

static int collect(void *arg, const uint8_t *reply, size_t len, int has_more)
{
    (void)has_more;
    evbuffer_add(arg, reply, len);
    return 0;
}

void tc_print_machines(const struct tc_session *s, const struct tc_opts *opts, FILE *out)
{
    struct tc_opts o = *opts;
    o.node = NULL;
    struct tc_rpc rpc;
    Tracegate__ListNodesResponse *nodes = NULL;
    struct evbuffer *col = evbuffer_new();
    if (col && tc_rpc_open(&rpc, &o, "TracegateFleet") == 0 &&
        tc_rpc_call(&rpc, "ListNodes", NULL, 0, -1, collect, col, 10000) == 0) {
        size_t n = evbuffer_get_length(col);
        nodes = tracegate__list_nodes_response__unpack(NULL, n, evbuffer_pullup(col, (ev_ssize_t)n));
    }
    tc_rpc_close(&rpc);
    if (col)
        evbuffer_free(col);
    fprintf(out, "tracectl: per node (%s):\n", opts->node + 1);
    for (size_t i = 0; i < s->n_machines; i++) {
        const struct tc_machine *m = &s->machines[i];
        const char *name = NULL;
        for (size_t k = 0; nodes && k < nodes->n_nodes; k++)
            if (nodes->nodes[k]->machine_id == m->id && nodes->nodes[k]->name)
                name = nodes->nodes[k]->name;
        char gap[160] = "";
        if (m->gaps)
            snprintf(gap, sizeof gap, "  link gap: %" PRIu32 " outage(s) past the resume window, %.1f s%s", m->gaps,
                     (double)m->gap_ns / 1e9,
                     m->reattached ? ", session re-attached" : ", session left detached on the node");
        const char *failed = m->failed ? "  FAILED: its data is missing or incomplete (see the gateway's log)" : "";
        char en[160];
        fprintf(out, "tracectl:   %-20s machine %-10" PRIu32 " %8" PRIu64 " packets%s%s\n",
                name ? tg_escape_text(name, en, sizeof en) : "?", m->id,
                m->packets, gap, failed);
    }
    if (nodes)
        tracegate__list_nodes_response__free_unpacked(nodes, NULL);
}
