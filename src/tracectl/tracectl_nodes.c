/* tracectl_nodes.c: `tracectl nodes [URL]`: the nodes a tracegate gateway reaches over its links
 * (TracegateFleet.ListNodes): name, state, machine id, RTT, clock offset, bytes, channels, since. */
#include "tracectl.h"

#include <event2/buffer.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tracegate_gateway.pb-c.h"

static int collect(void *arg, const uint8_t *reply, size_t len, int has_more)
{
    (void)has_more;
    evbuffer_add(arg, reply, len);
    return 0;
}

static void human_bytes(uint64_t b, char *out, size_t n)
{
    if (b >= 10ull << 30)
        snprintf(out, n, "%.1fG", (double)b / (1 << 30));
    else if (b >= 10ull << 20)
        snprintf(out, n, "%.1fM", (double)b / (1 << 20));
    else if (b >= 10ull << 10)
        snprintf(out, n, "%.1fK", (double)b / 1024);
    else
        snprintf(out, n, "%" PRIu64, b);
}

int tc_cmd_nodes(const struct tc_opts *opts, int argc, char **argv)
{
    if (argc > 1) {
        fprintf(stderr, "usage: tracectl nodes [URL]\n");
        return 2;
    }
    (void)argv;
    struct tc_opts o = *opts;
    o.node = NULL; /* the list comes from the gateway we talk to */
    if (o.endpoint_defaulted)
        o.endpoint = TC_DEFAULT_GATEWAY;
    struct tc_rpc rpc;
    if (tc_rpc_open(&rpc, &o, "TracegateFleet") != 0) {
        fprintf(stderr, "tracectl nodes: %s: %s (is it a tracegate gateway?)\n", o.endpoint, rpc.error);
        tc_rpc_close(&rpc);
        return 1;
    }
    struct evbuffer *col = evbuffer_new();
    int ret = 1;
    if (tc_rpc_call(&rpc, "ListNodes", NULL, 0, -1, collect, col, 10000) != 0) {
        fprintf(stderr, "tracectl nodes: ListNodes failed: %s\n", rpc.error);
        goto out;
    }
    size_t n = evbuffer_get_length(col);
    Tracegate__ListNodesResponse *r =
        tracegate__list_nodes_response__unpack(NULL, n, evbuffer_pullup(col, (ev_ssize_t)n));
    if (!r) {
        fprintf(stderr, "tracectl nodes: undecodable answer\n");
        goto out;
    }
    printf("%-20s %-10s %-10s %-10s %-9s %-12s %-8s %-8s %-4s %s\n", "NODE", "STATE", "VIA", "MACHINE", "RTT",
           "CLOCK OFFSET", "IN", "OUT", "CH", "SINCE");
    time_t now = time(NULL);
    for (size_t i = 0; i < r->n_nodes; i++) {
        const Tracegate__FleetNode *x = r->nodes[i];
        char rtt[16] = "-", off[24] = "-", in[16], out[16], since[24] = "-";
        if (x->rtt_us)
            snprintf(rtt, sizeof rtt, "%.2fms", (double)x->rtt_us / 1000);
        if (x->has_clock_offset_ns)
            snprintf(off, sizeof off, "%+.3fms", (double)x->clock_offset_ns / 1e6);
        human_bytes(x->bytes_in, in, sizeof in);
        human_bytes(x->bytes_out, out, sizeof out);
        if (x->since_unix_s && (uint64_t)now >= x->since_unix_s)
            snprintf(since, sizeof since, "%llus ago", (unsigned long long)((uint64_t)now - x->since_unix_s));
        printf("%-20s %-10s %-10s %-10u %-9s %-12s %-8s %-8s %-4u %s\n", x->name ? x->name : "?",
               x->state ? x->state : "?", x->via && x->via[0] ? x->via : "-", x->machine_id, rtt, off, in, out,
               x->channels, since);
    }
    tracegate__list_nodes_response__free_unpacked(r, NULL);
    ret = 0;
out:
    evbuffer_free(col);
    tc_rpc_close(&rpc);
    return ret;
}
