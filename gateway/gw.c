/* gw.c: the gateway core: struct tg_gw (limits, auth tables, metrics, upstreams, listeners and
 * the live bridge sessions), the accept path every transport uses, the thread-safe queries the
 * WebSocket thread calls, periodic sweeps, reload, drain and teardown (see gw.h, gw_core.h). */
#include "gw_core.h"

#include <event2/event.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "gw_auth.h"
#include "gw_listener.h"
#include "gw_metrics.h"
#include "gw_output_path.h"
#include "gw_process_metrics.h"
#include "gw_tls_status.h"
#include "gw_upstream.h"
#include "tracegate/frame.h"
#include "tracegate/clock.h"
#include "tracegate/log.h"
#include "base/json_str.h"
#include "tracegate/onepath.h"

#define LOG "gateway"
#define SWEEP_MS 250


/* ------------------------------------------------------------ bookkeeping */

void tg_gw_session_linked(struct tg_gw *gw)
{
    gw->n_sessions++;
    tg_gw_metrics_session_delta(gw->metrics, 1);
}

void tg_gw_session_unlinked(struct tg_gw *gw)
{
    gw->n_sessions--;
    tg_gw_metrics_session_delta(gw->metrics, -1);
    if (gw->draining && gw->n_sessions == 0 && gw->drained_ev)
        event_active(gw->drained_ev, EV_TIMEOUT, 0);
}

void tg_gw_client_gone(struct tg_gw *gw, const struct tg_gw_client_info *info, struct tg_gw_listener *l,
                       int conn_metric)
{
    gw->n_clients--;
    if (conn_metric)
        tg_gw_metrics_conn_close(gw->metrics, info->transport);
    if (!info->loopback)
        tg_gw_sources_release(gw->sources, info->source);
    if (l)
        tg_gw_listener_conn_closed(l);
}

size_t tg_gw_session_count(const struct tg_gw *gw) { return gw->n_sessions; }

void tg_gw_set_router(struct tg_gw *gw, tg_gw_router_fn fn, void *ctx, const char *node_name)
{
    gw->router = fn;
    gw->router_ctx = ctx;
    snprintf(gw->node_name, sizeof gw->node_name, "%s", node_name ? node_name : "");
}

const char *tg_gw_node_name(const struct tg_gw *gw) { return gw->node_name; }
size_t tg_gw_listener_count(const struct tg_gw *gw) { return gw->n_listeners; }
struct tg_gw_listener *tg_gw_listener_at(const struct tg_gw *gw, size_t i)
{
    return i < gw->n_listeners ? gw->listeners[i] : NULL;
}

struct tg_gw_upstream *tg_gw_upstream_for(struct tg_gw *gw, enum tg_gw_port port)
{
    return gw->upstream[port == TG_GW_PORT_PRODUCER ? 1 : 0];
}

void tg_gw_client_conn_opts(struct tg_gw *gw, struct tg_conn_opts *o)
{
    tg_conn_opts_default(o);
    o->max_frame = gw->limits.max_frame;
    o->out_high = gw->limits.out_high;
    o->out_low = gw->limits.out_low;
    /* the bridge enforces out_hard itself (and counts it); this is the backstop */
    o->out_hard_limit = gw->limits.out_hard + 2 * TG_FRAME_MAX_DEFAULT;
}

/* ------------------------------------------------------------ accept */

static const struct tg_conn_cbs k_null_cbs = {.on_frame = NULL};

static void refuse(struct tg_gw *gw, tg_conn *down, const struct tg_gw_client_info *info, struct tg_gw_listener *l,
                   const char *label, const char *why)
{
    tg_gw_metrics_conn_rejected(gw->metrics, label);
    tg_gw_log_refusal(gw, TG_LOG_WARN, LOG, "refused %s client %s: %s", tg_gw_transport_name(info->transport),
                      info->peer, why);
    tg_conn_set_cbs(down, &k_null_cbs, NULL);
    tg_conn_close(down, why);
    if (l)
        tg_gw_listener_conn_closed(l);
}

int tg_gw_admit(struct tg_gw *gw, const struct tg_gw_client_info *info, const char **label, const char **why)
{
    if (gw->draining) {
        *label = "draining";
        *why = "the gateway is shutting down";
        return -1;
    }
    if (!tg_gw_upstream_for(gw, info->port)) {
        *label = "port_not_served";
        *why = info->port == TG_GW_PORT_PRODUCER ? "the producer port is not served" : "the consumer port is not served";
        return -1;
    }
    if (gw->limits.max_conns && gw->n_clients >= gw->limits.max_conns) {
        *label = "max_connections";
        *why = "too many connections";
        return -1;
    }
    if (!info->loopback && !tg_gw_sources_acquire(gw->sources, info->source, gw->limits.max_conns_per_source)) {
        *label = "max_connections_per_source";
        /* an IPv6 source is a network (--source-prefix6): say so, or "::b" refused with no
         * connection of its own reads as a bug */
        *why = strchr(info->source, '/') ? "too many connections from this address's network (source-prefix6)"
                                         : "too many connections from this address";
        return -1;
    }
    gw->n_clients++;
    tg_gw_metrics_conn_open(gw->metrics, info->transport);
    return 0;
}

void tg_gw_accept_admitted(struct tg_gw *gw, tg_conn *down, const struct tg_gw_client_info *info,
                           struct tg_gw_listener *l)
{
    if (!down) {
        tg_gw_client_gone(gw, info, l, 1);
        return;
    }
    if (!tg_gw_session_new(gw, down, info, l)) {
        tg_gw_client_gone(gw, info, NULL, 1);
        refuse(gw, down, info, l, "out_of_memory", "out of memory"); /* gives back the listener slot */
    }
}

void tg_gw_accept_from(struct tg_gw *gw, tg_conn *down, const struct tg_gw_client_info *info,
                       struct tg_gw_listener *l)
{
    if (!down)
        return;
    const char *label, *why;
    if (tg_gw_admit(gw, info, &label, &why) != 0) {
        refuse(gw, down, info, l, label, why);
        return;
    }
    tg_gw_accept_admitted(gw, down, info, l);
}

void tg_gw_accept(struct tg_gw *gw, tg_conn *down, const struct tg_gw_client_info *info)
{
    tg_gw_accept_from(gw, down, info, NULL);
}

/* ------------------------------------------------------------ any thread */

unsigned tg_gw_auth_token_roles(struct tg_gw *gw, const char *token, char *principal, size_t plen)
{
    if (!token)
        return 0;
    return tg_gw_auth_lookup(gw->auth, token, strnlen(token, TG_GW_TOKEN_MAX + 1), principal, plen);
}

int tg_gw_origin_allowed(struct tg_gw *gw, const char *origin) { return tg_gw_auth_origin_allowed(gw->auth, origin); }

void tg_gw_role_defaults(struct tg_gw *gw, struct tg_gw_role_defaults *out)
{
    pthread_mutex_lock(&gw->roles_mu);
    out->local_roles = gw->local_roles;
    out->cert_roles = gw->cert_roles;
    out->local_user_roles = gw->local_user_roles;
    out->local_user_roles_set = gw->local_user_roles_set;
    pthread_mutex_unlock(&gw->roles_mu);
}

int tg_gw_upstream_healthy(struct tg_gw *gw)
{
    int any = 0;
    for (int i = 0; i < 2; i++) {
        if (!gw->upstream[i])
            continue;
        any = 1;
        if (!tg_gw_upstream_is_healthy(gw->upstream[i]))
            return 0;
    }
    return any;
}

const char *tg_gw_port_target(struct tg_gw *gw, enum tg_gw_port port)
{
    struct tg_gw_upstream *u = tg_gw_upstream_for(gw, port);
    return u ? tg_gw_upstream_describe(u) : NULL;
}

/* The OnePath recent-span store behind TracegateFleet.Spans (NULL when it never ran). */
static char *spans_store_metrics(void)
{
    onepath_recent_stats_t st;
    if (onepath_recent_stats(&st) != ONEPATH_OK || (!st.active && !st.added && !st.too_big))
        return NULL;
    char *out = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&out, &len);
    if (!f)
        return NULL;
    fprintf(f,
            "# HELP tracegated_spans_kept OnePath spans held in memory for TracegateFleet.Spans.\n"
            "# TYPE tracegated_spans_kept gauge\ntracegated_spans_kept %llu\n"
            "# HELP tracegated_spans_kept_bytes Their NDJSON bytes.\n"
            "# TYPE tracegated_spans_kept_bytes gauge\ntracegated_spans_kept_bytes %llu\n"
            "# HELP tracegated_spans_kept_total Spans taken into the store.\n"
            "# TYPE tracegated_spans_kept_total counter\ntracegated_spans_kept_total %llu\n"
            "# HELP tracegated_spans_dropped_total Spans the store lost: pushed out by newer ones (evicted), or "
            "too big to keep.\n"
            "# TYPE tracegated_spans_dropped_total counter\n"
            "tracegated_spans_dropped_total{reason=\"evicted\"} %llu\n"
            "tracegated_spans_dropped_total{reason=\"too_big\"} %llu\n"
            "# HELP tracegated_spans_read_total Spans handed to TracegateFleet.Spans callers.\n"
            "# TYPE tracegated_spans_read_total counter\ntracegated_spans_read_total %llu\n",
            (unsigned long long)st.kept, (unsigned long long)st.bytes, (unsigned long long)st.added,
            (unsigned long long)st.evicted, (unsigned long long)st.too_big, (unsigned long long)st.read);
    if (fclose(f) != 0) {
        free(out);
        return NULL;
    }
    return out;
}

/* a + b (either may be NULL); frees both */
static char *concat_free(char *a, char *b)
{
    if (!a || !b)
        return a ? a : b;
    size_t la = strlen(a), lb = strlen(b);
    char *all = realloc(a, la + lb + 1);
    if (!all) {
        free(b);
        return a;
    }
    memcpy(all + la, b, lb + 1);
    free(b);
    return all;
}

char *tg_gw_metrics_text(struct tg_gw *gw)
{
    tg_gw_metrics_set_upstream_healthy(gw->metrics, tg_gw_upstream_healthy(gw));
    char *base = tg_gw_metrics_render(gw->metrics);
    if (base) { /* the TLS data path's families (gw_tls_status.c), the process's own resources */
        char *tls = NULL;
        size_t tl = 0;
        FILE *tf = open_memstream(&tls, &tl);
        if (tf) {
            tg_gw_tls_metrics(tf);
            tg_gw_process_metrics(tf);
            if (fclose(tf) == 0) {
                size_t bl = strlen(base);
                char *both = realloc(base, bl + tl + 1);
                if (both) {
                    memcpy(both + bl, tls, tl + 1);
                    base = both;
                }
            }
            free(tls);
        }
    }
    pthread_mutex_lock(&gw->status_mu);
    char *extra = gw->metrics_extra ? gw->metrics_extra(gw->metrics_extra_ctx) : NULL;
    pthread_mutex_unlock(&gw->status_mu);
    if (onepath_metrics_enabled()) { /* OnePath's own (onepath.*), in Prometheus text too */
        size_t ol = 0;
        char *op = onepath_metrics_prometheus(&ol);
        if (op && extra) {
            size_t el = strlen(extra);
            char *both = realloc(extra, el + ol + 1);
            if (both) {
                memcpy(both + el, op, ol);
                both[el + ol] = 0;
                extra = both;
            }
            free(op);
        } else if (op) {
            extra = op;
        }
    }
    extra = concat_free(extra, spans_store_metrics());
    if (!base) {
        free(extra);
        return NULL;
    }
    return concat_free(base, extra);
}

void tg_gw_set_metrics_extra(struct tg_gw *gw, char *(*fn)(void *ctx), void *ctx)
{
    pthread_mutex_lock(&gw->status_mu);
    gw->metrics_extra = fn;
    gw->metrics_extra_ctx = ctx;
    pthread_mutex_unlock(&gw->status_mu);
}


void tg_gw_set_status_nodes(struct tg_gw *gw, char *(*fn)(void *ctx), void *ctx)
{
    pthread_mutex_lock(&gw->status_mu);
    gw->status_nodes = fn;
    gw->status_nodes_ctx = ctx;
    pthread_mutex_unlock(&gw->status_mu);
}

char *tg_gw_status_json(struct tg_gw *gw)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f)
        return NULL;
    fprintf(f, "{\"version\":\"%s\",\"uptime_s\":%lld,", PACKAGE_VERSION, (long long)(time(NULL) - gw->started));
    fprintf(f, "\"upstream\":{\"healthy\":%s", tg_gw_upstream_healthy(gw) ? "true" : "false");
    static const char *const names[2] = {"consumer", "producer"};
    for (int i = 0; i < 2; i++) {
        if (!gw->upstream[i])
            continue;
        fprintf(f, ",\"%s\":{\"target\":", names[i]);
        tg_json_str(f, tg_gw_upstream_describe(gw->upstream[i]));
        fprintf(f, ",\"external\":%s,\"healthy\":%s}", tg_gw_upstream_is_external(gw->upstream[i]) ? "true" : "false",
                tg_gw_upstream_is_healthy(gw->upstream[i]) ? "true" : "false");
    }
    fprintf(f, "},\"connections\":{");
    for (int t = 0; t < TG_GW_T_COUNT; t++)
        fprintf(f, "%s\"%s\":%llu", t ? "," : "", tg_gw_transport_name((enum tg_gw_transport)t),
                (unsigned long long)tg_gw_metrics_conn_current(gw->metrics, (enum tg_gw_transport)t));
    fprintf(f, "},\"sessions\":%llu,\"listeners\":", (unsigned long long)tg_gw_metrics_session_current(gw->metrics));
    pthread_mutex_lock(&gw->status_mu);
    fputs(gw->status_listeners ? gw->status_listeners : "[]", f);
    fputc(',', f);
    tg_gw_tls_status_json(f);
    char *nodes = gw->status_nodes ? gw->status_nodes(gw->status_nodes_ctx) : NULL;
    pthread_mutex_unlock(&gw->status_mu);
    if (nodes) {
        fprintf(f, ",\"node\":");
        tg_json_str(f, tg_gw_node_name(gw));
        fprintf(f, ",\"nodes\":%s", nodes);
        free(nodes);
    }
    fputs("}", f);
    if (fclose(f) != 0) {
        free(buf);
        return NULL;
    }
    return buf;
}

void tg_gw_count_auth_failure(struct tg_gw *gw, enum tg_gw_transport t, const char *reason)
{
    tg_gw_metrics_auth_failure(gw->metrics, t, reason);
}

void tg_gw_count_rejected(struct tg_gw *gw, const char *reason) { tg_gw_metrics_conn_rejected(gw->metrics, reason); }

#define REFUSAL_LOG_PER_S 20u

void tg_gw_log_refusal(struct tg_gw *gw, enum tg_log_level level, const char *component, const char *fmt, ...)
{
    unsigned unlogged;
    if (!tg_log_sample(&gw->refusal_log, tg_mono_us(), REFUSAL_LOG_PER_S, 1000000u, &unlogged))
        return;
    char line[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (unlogged)
        tg_log(level, component, "%s (and %u similar refusals not logged)", line, unlogged);
    else
        tg_log(level, component, "%s", line);
}

/* ------------------------------------------------------------ periodic */

static void sweep_cb(evutil_socket_t fd, short what, void *arg)
{
    struct tg_gw *gw = arg;
    (void)fd;
    (void)what;
    uint64_t now = tg_gw_now_us(), to_clients = 0, to_service = 0;
    tg_gw_sessions_sweep(gw, now, &to_clients, &to_service);
    tg_gw_metrics_set_queue_bytes(gw->metrics, to_clients, to_service);
    tg_gw_metrics_set_upstream_healthy(gw->metrics, tg_gw_upstream_healthy(gw));
}

static void drained_cb(evutil_socket_t fd, short what, void *arg)
{
    struct tg_gw *gw = arg;
    (void)fd;
    (void)what;
    if (gw->n_sessions == 0 && gw->on_drained) {
        void (*done)(void *) = gw->on_drained;
        gw->on_drained = NULL;
        done(gw->drained_arg);
    }
}

/* ------------------------------------------------------------ lifecycle */

/* Roles of local users other than root and ours. Bridging to traced over a UNIX socket, traced
 * sees tracegated's uid for every client and cannot keep users apart: unless configured, such
 * users get nothing here (they can use traced's own socket, where traced knows them). */
static unsigned user_roles_for(const struct tg_gw *gw, const struct tg_gw_config *cfg, int log)
{
    const struct tg_gw_upstream *u = gw->upstream[0];
    if (cfg->local_user_roles_set || !u || !tg_gw_upstream_is_external_unix(u))
        return cfg->local_user_roles;
    if (log)
        tg_warn(LOG, "bridging to %s over a UNIX socket: it sees uid %u for every gateway client, so local users "
                     "other than root and uid %u get no roles here (set --local-user-roles to override)",
                tg_gw_upstream_describe(u), (unsigned)geteuid(), (unsigned)geteuid());
    return 0;
}

struct tg_gw *tg_gw_new(struct event_base *base, const struct tg_gw_config *cfg, struct tg_service *svc, char *err,
                        size_t errlen)
{
    struct tg_gw *gw = calloc(1, sizeof *gw);
    if (!gw) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    gw->base = base;
    gw->limits = cfg->limits;
    gw->local_roles = cfg->local_roles;
    gw->cert_roles = cfg->cert_roles;
    gw->insecure = cfg->insecure;
    gw->started = time(NULL);
    pthread_mutex_init(&gw->roles_mu, NULL);
    pthread_mutex_init(&gw->status_mu, NULL);
    gw->auth = tg_gw_auth_new();
    gw->metrics = tg_gw_metrics_new();
    gw->sources = tg_gw_sources_new();
    gw->sweep_ev = event_new(base, -1, EV_PERSIST, sweep_cb, gw);
    gw->drained_ev = event_new(base, -1, 0, drained_cb, gw);
    if (!gw->auth || !gw->metrics || !gw->sources || !gw->sweep_ev || !gw->drained_ev ||
        tg_gw_bridge_init(gw) != 0 || tg_gw_output_path_filter_register(gw) != 0) {
        snprintf(err, errlen, "out of memory");
        tg_gw_free(gw);
        return NULL;
    }
    if (cfg->token_file) {
        struct tg_gw_tokens *t = NULL;
        if (tg_gw_tokens_load(cfg->token_file, &t, err, errlen) != 0) {
            tg_gw_free(gw);
            return NULL;
        }
        tg_gw_auth_set_tokens(gw->auth, t);
    }
    if (tg_gw_auth_set_origins(gw->auth, (const char *const *)cfg->allow_origins, cfg->n_allow_origins) != 0) {
        snprintf(err, errlen, "out of memory");
        tg_gw_free(gw);
        return NULL;
    }
    const char *ext[2] = {cfg->upstream_consumer, cfg->upstream_producer};
    for (int i = 0; i < 2; i++) {
        enum tg_gw_port p = i ? TG_GW_PORT_PRODUCER : TG_GW_PORT_CONSUMER;
        if (ext[i]) {
            char e2[300];
            gw->upstream[i] = tg_gw_upstream_new_external(base, ext[i], p, cfg->probe_interval_ms,
                                                          !cfg->auto_bridge, e2, sizeof e2);
            if (!gw->upstream[i]) {
                snprintf(err, errlen, "upstream-%s: %s", i ? "producer" : "consumer", e2);
                tg_gw_free(gw);
                return NULL;
            }
        } else if (svc) {
            gw->upstream[i] = tg_gw_upstream_new_embedded(base, svc, p);
        }
    }
    gw->local_user_roles = user_roles_for(gw, cfg, 1);
    gw->local_user_roles_set = cfg->local_user_roles_set;
    struct timeval tv = {.tv_sec = 0, .tv_usec = SWEEP_MS * 1000};
    event_add(gw->sweep_ev, &tv);
    return gw;
}

static void rebuild_status(struct tg_gw *gw)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f)
        return;
    fputc('[', f);
    for (size_t i = 0; i < gw->n_listeners; i++) {
        if (i)
            fputc(',', f);
        tg_json_str(f, tg_gw_listener_describe(gw->listeners[i]));
    }
    fputc(']', f);
    if (fclose(f) != 0) {
        free(buf);
        return;
    }
    pthread_mutex_lock(&gw->status_mu);
    free(gw->status_listeners);
    gw->status_listeners = buf;
    pthread_mutex_unlock(&gw->status_mu);
}

int tg_gw_start_listeners(struct tg_gw *gw, const struct tg_gw_config *cfg, char *err, size_t errlen)
{
    if (cfg->n_listen) {
        gw->listeners = calloc(cfg->n_listen, sizeof *gw->listeners);
        if (!gw->listeners) {
            snprintf(err, errlen, "out of memory");
            return -1;
        }
    }
    for (size_t i = 0; i < cfg->n_listen; i++) {
        struct tg_gw_listener *l = tg_gw_listener_new(gw, &cfg->listen[i], cfg, err, errlen);
        if (!l)
            return -1;
        gw->listeners[gw->n_listeners++] = l;
    }
    rebuild_status(gw);
    return 0;
}

int tg_gw_reload(struct tg_gw *gw, const struct tg_gw_config *cfg, char *err, size_t errlen)
{
    struct tg_gw_tokens *t = NULL;
    if (cfg->token_file && tg_gw_tokens_load(cfg->token_file, &t, err, errlen) != 0)
        return -1;
    for (size_t i = 0; i < gw->n_listeners; i++) {
        if (tg_gw_listener_reload(gw->listeners[i], err, errlen) != 0) {
            tg_gw_tokens_free(t);
            return -1;
        }
    }
    size_t n_tokens = tg_gw_tokens_count(t);
    tg_gw_auth_set_tokens(gw->auth, t);
    if (tg_gw_auth_set_origins(gw->auth, (const char *const *)cfg->allow_origins, cfg->n_allow_origins) != 0) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    pthread_mutex_lock(&gw->roles_mu);
    gw->local_roles = cfg->local_roles;
    gw->cert_roles = cfg->cert_roles;
    gw->local_user_roles = user_roles_for(gw, cfg, 0);
    gw->local_user_roles_set = cfg->local_user_roles_set;
    pthread_mutex_unlock(&gw->roles_mu);
    tg_info(LOG, "reloaded: %zu token(s), %zu extra allowed origin(s)", n_tokens, cfg->n_allow_origins);
    return 0;
}

void tg_gw_drain(struct tg_gw *gw, void (*done)(void *arg), void *arg)
{
    gw->draining = 1;
    gw->on_drained = done;
    gw->drained_arg = arg;
    for (size_t i = 0; i < gw->n_listeners; i++)
        tg_gw_listener_stop(gw->listeners[i]);
    tg_info(LOG, "draining: no new clients; waiting for %zu session(s)", gw->n_sessions);
    if (gw->n_sessions == 0)
        event_active(gw->drained_ev, EV_TIMEOUT, 0);
}

void tg_gw_close_all(struct tg_gw *gw, const char *reason)
{
    for (struct tg_gw_session *s = gw->sessions; s; s = tg_gw_session_next(s))
        tg_gw_session_close(s, reason, 0);
}

void tg_gw_free(struct tg_gw *gw)
{
    if (!gw)
        return;
    if (gw->sweep_ev)
        event_free(gw->sweep_ev);
    while (gw->sessions)
        tg_gw_session_destroy(gw->sessions);
    if (gw->drained_ev)
        event_free(gw->drained_ev);
    for (size_t i = 0; i < gw->n_listeners; i++)
        tg_gw_listener_free(gw->listeners[i]);
    free(gw->listeners);
    for (int i = 0; i < 2; i++)
        tg_gw_upstream_free(gw->upstream[i]);
    tg_gw_auth_free(gw->auth);
    tg_gw_sources_free(gw->sources);
    tg_gw_metrics_free(gw->metrics);
    free(gw->status_listeners);
    pthread_mutex_destroy(&gw->roles_mu);
    pthread_mutex_destroy(&gw->status_mu);
    free(gw);
}
