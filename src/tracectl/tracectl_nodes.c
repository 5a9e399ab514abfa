/* tracectl_nodes.c: `tracectl nodes [URL]`: the nodes a tracegate gateway reaches over its links
 * (TracegateFleet.ListNodes): name, state, machine id, RTT, clock offset, bytes, channels, since. */
#include "tracectl.h"
#include "tracegate/log.h"

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

/* --adb: each node's ADB server, asked for host:devices (TracegateFleet.AdbDevices; adb role) */
static void print_adb(struct tc_rpc *rpc, const char *node)
{
    Tracegate__AdbDevicesRequest rq = TRACEGATE__ADB_DEVICES_REQUEST__INIT;
    rq.node = (char *)node;
    uint8_t buf[128];
    size_t n = tracegate__adb_devices_request__pack(&rq, buf);
    struct evbuffer *col = evbuffer_new();
    if (!col)
        return;
    if (tc_rpc_call(rpc, "AdbDevices", buf, n, -1, collect, col, 30000) != 0) {
        printf("  %-18s adb: %s\n", node, rpc->error[0] ? rpc->error : "refused (the adb role is needed)");
        rpc->error[0] = 0;
        evbuffer_free(col);
        return;
    }
    size_t len = evbuffer_get_length(col);
    Tracegate__AdbDevicesResponse *r =
        tracegate__adb_devices_response__unpack(NULL, len, evbuffer_pullup(col, (ev_ssize_t)len));
    if (!r) {
        printf("  %-18s adb: undecodable answer\n", node);
    } else if (r->error) {
        char e[256];
        printf("  %-18s adb: none (%s)\n", node, tg_escape_text(r->error, e, sizeof e));
    } else {
        int any = 0;
        char *save = NULL;
        for (char *line = strtok_r(r->devices ? r->devices : (char *)"", "\n", &save); line;
             line = strtok_r(NULL, "\n", &save)) {
            for (char *t = line; *t; t++)
                if (*t == '\t')
                    *t = ' ';
            char e[512]; /* serials and models are the devices' to choose */
            printf("  %-18s adb: %s\n", node, tg_escape_text(line, e, sizeof e));
            any = 1;
        }
        if (!any)
            printf("  %-18s adb: server up, no devices\n", node);
    }
    if (r)
        tracegate__adb_devices_response__free_unpacked(r, NULL);
    evbuffer_free(col);
}

int tc_cmd_nodes(const struct tc_opts *opts, int argc, char **argv)
{
    int adb = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--adb")) {
            adb = 1;
        } else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("usage: tracectl nodes [URL] [--adb]\n(default URL: the local gateway, " TC_DEFAULT_GATEWAY ")\n");
            return 0;
        } else {
            fprintf(stderr, "usage: tracectl nodes [URL] [--adb]\n");
            return 2;
        }
    }
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
        char en[160], es[48], ev[160];
        printf("%-20s %-10s %-10s %-10u %-9s %-12s %-8s %-8s %-4u %s\n", x->name ? tg_escape_text(x->name, en, sizeof en) : "?",
               x->state ? tg_escape_text(x->state, es, sizeof es) : "?",
               x->via && x->via[0] ? tg_escape_text(x->via, ev, sizeof ev) : "-", x->machine_id, rtt, off, in, out,
               x->channels, since);
    }
    if (adb) {
        printf("\nADB servers (host:devices):\n");
        for (size_t i = 0; i < r->n_nodes; i++)
            if (r->nodes[i]->name && (!r->nodes[i]->state || strcmp(r->nodes[i]->state, "raw") != 0))
                print_adb(&rpc, r->nodes[i]->name);
    }
    tracegate__list_nodes_response__free_unpacked(r, NULL);
    ret = 0;
out:
    evbuffer_free(col);
    tc_rpc_close(&rpc);
    return ret;
}
