/* fleet_status.c: the fleet's node list rendered for /api/status and as /metrics families, at
 * most every 50 ms for refreshes a peer can cause (see fleet_status.h). */
#include "fleet_status.h"

#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include "fleet.h"
#include "tracegate/clock.h"

/* The fleet's part of /metrics (Prometheus text); node names are checked, so labels need no
 * escaping. */
static char *render_metrics(const struct tg_fleet_node *nodes, size_t n)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&buf, &len);
    if (!out)
        return NULL;
    static const struct {
        const char *name, *type, *help;
    } fam[] = {
        {"tracegated_link_up", "gauge", "1 when the link to the node is up, 0 when it is down or connecting."},
        {"tracegated_link_rtt_seconds", "gauge", "Round-trip time of the link's last HTTP/2 PING."},
        {"tracegated_link_clock_offset_seconds", "gauge", "The node's BOOTTIME minus ours, from clock sync rounds."},
        {"tracegated_link_received_bytes_total", "counter", "Bytes received on the link."},
        {"tracegated_link_sent_bytes_total", "counter", "Bytes sent on the link."},
        {"tracegated_link_channels", "gauge", "IPC connections (channels) open on the link."},
        {"tracegated_link_resumes_total", "counter", "Times the link came back within its resume window."},
    };
    fprintf(out, "# HELP tracegated_fleet_nodes Nodes this gateway knows, by state.\n"
                 "# TYPE tracegated_fleet_nodes gauge\n");
    static const char *const states[] = {"self", "up", "down", "connecting", "raw"};
    for (size_t s = 0; s < sizeof states / sizeof states[0]; s++) {
        size_t c = 0;
        for (size_t i = 0; i < n; i++)
            c += !strcmp(nodes[i].state, states[s]);
        fprintf(out, "tracegated_fleet_nodes{state=\"%s\"} %zu\n", states[s], c);
    }
    for (size_t k = 0; k < sizeof fam / sizeof fam[0]; k++) {
        fprintf(out, "# HELP %s %s\n# TYPE %s %s\n", fam[k].name, fam[k].help, fam[k].name, fam[k].type);
        for (size_t i = 0; i < n; i++) {
            const struct tg_fleet_node *x = &nodes[i];
            int direct = strcmp(x->state, "self") && strcmp(x->state, "raw") && !x->via[0];
            if (!direct)
                continue;
            fprintf(out, "%s{node=\"%s\"} ", fam[k].name, x->name);
            switch (k) {
            case 0: fprintf(out, "%d\n", !strcmp(x->state, "up")); break;
            case 1: fprintf(out, "%.6f\n", (double)x->rtt_us / 1e6); break;
            case 2: fprintf(out, "%.9f\n", x->have_offset ? (double)x->clock_offset_ns / 1e9 : 0.0); break;
            case 3: fprintf(out, "%llu\n", (unsigned long long)x->bytes_in); break;
            case 4: fprintf(out, "%llu\n", (unsigned long long)x->bytes_out); break;
            case 5: fprintf(out, "%zu\n", x->channels); break;
            default: fprintf(out, "%u\n", x->resumes); break;
            }
        }
    }
    if (fclose(out) != 0) {
        free(buf);
        return NULL;
    }
    return buf;
}

void tg_fleet_status_rebuild(struct tg_fleet_status *st)
{
    struct tg_fleet_node nodes[64];
    size_t n = tg_fleet_nodes(st->fleet, nodes, 64);
    if (n > 64)
        n = 64;
    size_t cap = 256 + n * 512;
    char *j = malloc(cap);
    if (!j)
        return;
    size_t o = (size_t)snprintf(j, cap, "[");
    for (size_t i = 0; i < n; i++) {
        const struct tg_fleet_node *x = &nodes[i];
        char off[32] = "null"; /* node names are checked (tg_link_node_name_ok): no escaping needed */
        if (x->have_offset)
            snprintf(off, sizeof off, "%lld", (long long)x->clock_offset_ns);
        o += (size_t)snprintf(j + o, cap - o,
                              "%s{\"name\":\"%s\",\"state\":\"%s\",\"via\":\"%s\",\"machine_id\":%u,\"rtt_us\":%llu,"
                              "\"clock_offset_ns\":%s,\"bytes_in\":%llu,\"bytes_out\":%llu,\"channels\":%zu,"
                              "\"since\":%llu}",
                              i ? "," : "", x->name, x->state, x->via, x->machine_id, (unsigned long long)x->rtt_us, off,
                              (unsigned long long)x->bytes_in, (unsigned long long)x->bytes_out, x->channels,
                              (unsigned long long)x->since_unix_s);
    }
    snprintf(j + o, cap - o, "]");
    char *m = render_metrics(nodes, n);
    pthread_mutex_lock(&st->mu);
    free(st->json);
    st->json = j;
    if (m) {
        free(st->metrics);
        st->metrics = m;
    }
    pthread_mutex_unlock(&st->mu);
    st->rebuilt_us = tg_mono_us();
    st->n_rebuilds++;
    if (st->refresh_ev)
        evtimer_del(st->refresh_ev); /* (what it waited for is in this one) */
}

/* Refreshes a peer can cause (each ClockSync message it sends, each RTT sample) rebuild the
 * snapshot at most this often: a linked node flooding 3-byte ClockSync PINGs would otherwise make
 * this node render /api/status and /metrics once per message. Link state changes (up, down, a
 * node list) still rebuild at once. */
#define STATUS_REFRESH_MIN_US 50000u

static void refresh_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    tg_fleet_status_rebuild(arg);
}

void tg_fleet_status_refresh(struct tg_fleet_status *st)
{
    uint64_t since = tg_mono_us() - st->rebuilt_us;
    if (!st->refresh_ev || since >= STATUS_REFRESH_MIN_US) {
        tg_fleet_status_rebuild(st);
        return;
    }
    if (!evtimer_pending(st->refresh_ev, NULL)) {
        uint64_t wait = STATUS_REFRESH_MIN_US - since;
        struct timeval tv = {(time_t)(wait / 1000000u), (suseconds_t)(wait % 1000000u)};
        evtimer_add(st->refresh_ev, &tv);
    }
}

void tg_fleet_status_init(struct tg_fleet_status *st, struct event_base *base, struct tg_fleet *f)
{
    memset(st, 0, sizeof *st);
    st->fleet = f;
    pthread_mutex_init(&st->mu, NULL);
    st->refresh_ev = evtimer_new(base, refresh_cb, st); /* (NULL: every refresh rebuilds at once) */
}

void tg_fleet_status_free(struct tg_fleet_status *st)
{
    if (st->refresh_ev)
        event_free(st->refresh_ev);
    free(st->json);
    free(st->metrics);
    pthread_mutex_destroy(&st->mu);
    memset(st, 0, sizeof *st);
}

char *tg_fleet_status_json_copy(struct tg_fleet_status *st)
{
    pthread_mutex_lock(&st->mu);
    char *r = strdup(st->json ? st->json : "[]");
    pthread_mutex_unlock(&st->mu);
    return r;
}

char *tg_fleet_status_metrics_copy(struct tg_fleet_status *st)
{
    pthread_mutex_lock(&st->mu);
    char *r = st->metrics ? strdup(st->metrics) : NULL;
    pthread_mutex_unlock(&st->mu);
    return r;
}
