/* gw_core.h: the gateway core's internals and lifecycle (private to gw_*.c
 * and tracegated.c): struct tg_gw, creation from a validated configuration,
 * listener start-up, reload (SIGHUP), drain (SIGTERM) and teardown.
 *
 * Transports use gw.h only; features (filters, local services) use
 * gw_bridge.h.
 *
 * Threading: the gateway's event loop thread, except the fields documented
 * as atomic or mutex-protected (read by the WebSocket thread through gw.h). */
#ifndef TRACEGATE_GATEWAY_GW_CORE_H
#define TRACEGATE_GATEWAY_GW_CORE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "gw.h"
#include "gw_bridge.h"
#include "gw_config.h"
#include "gw_limits.h"
#include "base/log_sample.h"

struct event;
struct event_base;
struct tg_service;
struct tg_gw_auth;
struct tg_gw_metrics;
struct tg_gw_upstream;
struct tg_gw_sources;
struct tg_gw_listener;

#define TG_GW_MAX_FILTERS 8
#define TG_GW_MAX_LOCAL_SERVICES 8

struct tg_gw {
    struct event_base *base;
    struct tg_gw_limits limits;
    unsigned local_roles, cert_roles; /* reloadable (SIGHUP): used for new clients; written under
                                         roles_mu (the WebSocket thread reads them through
                                         tg_gw_role_defaults) */
    unsigned local_user_roles;        /* the same: local uids other than root and ours */
    int local_user_roles_set;         /* the same: --local-user-roles was given explicitly */
    int insecure;
    struct tg_gw_auth *auth;         /* tokens + origins: any thread */
    struct tg_gw_metrics *metrics;   /* any thread */
    struct tg_gw_upstream *upstream[2]; /* by enum tg_gw_port; NULL = not served */
    struct tg_gw_sources *sources;
    struct tg_log_sampler refusal_log; /* tg_gw_log_refusal */

    struct tg_gw_session *sessions;  /* head; linked through the sessions (tg_gw_session_next) */
    struct tg_gw_session *watched;   /* sessions that may have output queued: the sweep's list (gw_bridge.c) */
    struct tg_gw_session *kept;      /* detached sessions kept for a resume (gw_bridge.c) */
    size_t n_sessions, n_clients;
    uint64_t next_session_id;

    struct tg_gw_listener **listeners;
    size_t n_listeners;

    struct event *sweep_ev;
    int draining;
    void (*on_drained)(void *arg);
    void *drained_arg;
    struct event *drained_ev;

    struct {
        const struct tg_gw_filter *f;
        void *ctx;
    } filters[TG_GW_MAX_FILTERS];
    size_t n_filters;
    const struct tg_gw_local_service *local[TG_GW_MAX_LOCAL_SERVICES];
    size_t n_local;

    tg_gw_router_fn router; /* gateway links: reach other nodes */
    void *router_ctx;
    char node_name[64];

    time_t started;
    pthread_mutex_t roles_mu;
    pthread_mutex_t status_mu;
    char *status_listeners; /* JSON array, rebuilt when listeners change */
    char *(*status_nodes)(void *); /* the fleet's nodes as a malloc'd JSON array (any thread) */
    void *status_nodes_ctx;
    char *(*metrics_extra)(void *); /* more /metrics text (the fleet's), any thread */
    void *metrics_extra_ctx;
};

/* Creates the gateway: upstreams (svc = the embedded service, or NULL when
 * every port has an external upstream or is not served), auth tables (token
 * file loaded), metrics, the sweep timer. cfg must be validated. */
struct tg_gw *tg_gw_new(struct event_base *base, const struct tg_gw_config *cfg, struct tg_service *svc, char *err,
                        size_t errlen);
/* Binds every listener of cfg. Returns 0 or -1 (then tg_gw_free). */
int tg_gw_start_listeners(struct tg_gw *gw, const struct tg_gw_config *cfg, char *err, size_t errlen);
size_t tg_gw_listener_count(const struct tg_gw *gw);
struct tg_gw_listener *tg_gw_listener_at(const struct tg_gw *gw, size_t i);
/* SIGHUP: applies the token file, the Origin allow-list, local-roles and
 * cert-roles (for new clients, also of the WebSocket front end through
 * tg_gw_role_defaults) and certificates of `cfg` (a freshly parsed
 * configuration) without touching connections.
 * Options that need a restart are logged. On error nothing changes. */
int tg_gw_reload(struct tg_gw *gw, const struct tg_gw_config *cfg, char *err, size_t errlen);
/* SIGTERM: stops accepting and refuses new clients; done(arg) runs from the
 * loop once no session is left (possibly at once). */
void tg_gw_drain(struct tg_gw *gw, void (*done)(void *arg), void *arg);
/* Closes every session now (drain timeout). */
void tg_gw_close_all(struct tg_gw *gw, const char *reason);
size_t tg_gw_session_count(const struct tg_gw *gw);
void tg_gw_free(struct tg_gw *gw);

/* Limits a new client must pass before anything is spent on it (draining,
 * port served, --max-connections, per source). On success its slot is
 * taken (give it back with tg_gw_client_gone or tg_gw_accept_admitted);
 * on failure label/why say why (metrics label, log text). Transports with
 * a handshake of their own (TLS) admit at accept, before the handshake. */
int tg_gw_admit(struct tg_gw *gw, const struct tg_gw_client_info *info, const char **label, const char **why);
/* Creates the session of an admitted client (down NULL: the handshake
 * failed; the slot is given back). */
void tg_gw_accept_admitted(struct tg_gw *gw, tg_conn *down, const struct tg_gw_client_info *info,
                           struct tg_gw_listener *l);
/* Accept path used by listeners (l may be NULL for transports without one). */
void tg_gw_accept_from(struct tg_gw *gw, tg_conn *down, const struct tg_gw_client_info *info,
                       struct tg_gw_listener *l);
struct tg_gw_upstream *tg_gw_upstream_for(struct tg_gw *gw, enum tg_gw_port port);

/* Session bookkeeping for gw_bridge.c: after linking a session into
 * gw->sessions, and after unlinking and freeing one. */
void tg_gw_session_linked(struct tg_gw *gw);
void tg_gw_session_unlinked(struct tg_gw *gw);
/* A client's connection slot is free again (conn_metric: also drop it from
 * the connection gauge, unless that was done when it was detached). */
void tg_gw_client_gone(struct tg_gw *gw, const struct tg_gw_client_info *info, struct tg_gw_listener *l,
                       int conn_metric);

/* Registers the bridge's built-in local services (gw_bridge_local.c; called by tg_gw_new). */
int tg_gw_bridge_init(struct tg_gw *gw);

#endif
