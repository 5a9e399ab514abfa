/* fleet_status.h: the fleet's snapshot for /api/status ("nodes") and its /metrics families,
 * rendered on the event loop from tg_fleet_nodes() and read as copies from any thread (the
 * WebSocket thread serves /api/status and /metrics).
 *
 * Ownership: embedded in struct tg_fleet (fleet.c), which calls init and free; the rendered texts
 * are owned here and handed out as malloc'd copies the caller frees.
 * Threading: init, rebuild, refresh and free on the event loop thread; the two getters on any
 * thread (under the snapshot's mutex). */
#ifndef TRACEGATE_GATEWAY_FLEET_STATUS_H
#define TRACEGATE_GATEWAY_FLEET_STATUS_H

#include <pthread.h>
#include <stdint.h>

struct event;
struct event_base;
struct tg_fleet;

struct tg_fleet_status {
    struct tg_fleet *fleet;
    pthread_mutex_t mu;
    char *json;          /* the node list as a JSON array */
    char *metrics;       /* the fleet's /metrics families (Prometheus text) */
    uint64_t rebuilt_us; /* when they were rebuilt last (monotonic) */
    uint64_t n_rebuilds;
    struct event *refresh_ev; /* a refresh that waits for the minimum interval (NULL: none) */
};

void tg_fleet_status_init(struct tg_fleet_status *st, struct event_base *base, struct tg_fleet *f);
void tg_fleet_status_free(struct tg_fleet_status *st);
/* Renders both texts now (link state changes: up, down, a new node list). */
void tg_fleet_status_rebuild(struct tg_fleet_status *st);
/* Renders them now, or once STATUS_REFRESH_MIN_US (fleet_status.c) after the last rebuild: for
 * refreshes a peer can cause at will (each ClockSync message, each RTT sample). */
void tg_fleet_status_refresh(struct tg_fleet_status *st);
/* Copies of the current texts ("[]" / NULL before the first rebuild); the caller frees them. */
char *tg_fleet_status_json_copy(struct tg_fleet_status *st);
char *tg_fleet_status_metrics_copy(struct tg_fleet_status *st);

#endif
