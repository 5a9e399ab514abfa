/* gw_output_path.c: the "output-path" filter (gw_output_path.h): an EnableTracing whose
 * TraceConfig names an output_path makes the service create that file with the service's rights
 * (traced and the embedded service alike), so the gateway passes it only for clients that are root
 * or the gateway's own user on this machine, and answers everyone else with an error. */
#include "gw_output_path.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "consumer_port.pb-c.h"
#include "gw_core.h"
#include "gw_metrics.h"
#include "tracegate/frame.h"
#include "tracegate/log.h"

#define LOG "gateway"
#define LOG_BURST 20 /* refusals logged per session before sampling */

int tg_gw_may_create_files(const struct tg_gw_client_info *info)
{
    if (!info->has_uid || strncmp(info->principal, "uid:", 4) != 0)
        return 0; /* tokens, certificates, linked nodes, anonymous: no local user */
    return info->uid == 0 || info->uid == geteuid();
}

int tg_gw_enable_names_output_path(const uint8_t *args, size_t len)
{
    /* protobuf-c is the receiver's parser when the service is embedded, and refuses what it
     * cannot read where C++ protobuf would skip it (a field with another wire type): a request
     * it cannot read counts as naming a file, so no reading of it can hide one. */
    Perfetto__Protos__EnableTracingRequest *r = perfetto__protos__enable_tracing_request__unpack(NULL, len, args);
    if (!r)
        return -1;
    const Perfetto__Protos__TraceConfig *c = r->trace_config;
    /* the services honour output_path only with write_into_file (traced too): match them */
    int named = c && c->write_into_file && c->output_path && c->output_path[0];
    perfetto__protos__enable_tracing_request__free_unpacked(r, NULL);
    return named;
}

static int is_enable(const struct tg_gw_frame *f)
{
    return f->info->msg == TG_MSG_INVOKE_METHOD && f->service && f->method &&
           strcmp(f->service, "ConsumerPort") == 0 && strcmp(f->method, "EnableTracing") == 0;
}

static int op_attach(struct tg_gw_session *s, void *ctx, void **state)
{
    (void)ctx;
    *state = NULL;
    return tg_gw_session_info(s)->port == TG_GW_PORT_CONSUMER;
}

static int op_needs_body(struct tg_gw_session *s, const struct tg_frame_info *fi, int up, void *ctx, void *state)
{
    (void)ctx;
    (void)state;
    if (up || fi->msg != TG_MSG_INVOKE_METHOD || tg_gw_may_create_files(tg_gw_session_info(s)))
        return 0;
    const char *svc = tg_gw_session_service_name(s, fi->service_id);
    const char *m = tg_gw_session_method_name(s, fi->service_id, fi->method_id);
    return svc && m && strcmp(svc, "ConsumerPort") == 0 && strcmp(m, "EnableTracing") == 0;
}

static enum tg_gw_verdict op_down(struct tg_gw_session *s, struct tg_gw_frame *f, void *ctx, void *state)
{
    (void)ctx;
    (void)state;
    const struct tg_gw_client_info *info = tg_gw_session_info(s);
    if (!f->body || !is_enable(f) || tg_gw_may_create_files(info))
        return TG_GW_FORWARD;
    int named = tg_gw_enable_names_output_path(f->info->has_payload ? f->info->payload : NULL,
                                               f->info->has_payload ? f->info->payload_len : 0);
    if (named == 0)
        return TG_GW_FORWARD;
    struct tg_gw *gw = tg_gw_session_gw(s);
    tg_gw_metrics_frame_rejected(gw->metrics, "output_path");
    uint64_t n = tg_gw_metrics_frame_rejected_count(gw->metrics, "output_path");
    if (n <= LOG_BURST || n % 1000 == 0)
        tg_warn(LOG, "session %llu: refused EnableTracing from %s (%s): %s", (unsigned long long)tg_gw_session_id(s),
                info->peer, info->principal,
                named < 0 ? "its request could not be read" : "its config names an output_path");
    Perfetto__Protos__EnableTracingResponse r = PERFETTO__PROTOS__ENABLE_TRACING_RESPONSE__INIT;
    r.state_case = PERFETTO__PROTOS__ENABLE_TRACING_RESPONSE__STATE_DISABLED;
    r.disabled = 1;
    r.error = named < 0 ? (char *)"EnableTracing refused by the gateway: the request could not be read"
                        : (char *)"EnableTracing refused by the gateway: output_path makes the service create a "
                                  "file on its host, which only root and the gateway's own user may ask for; "
                                  "read the trace back instead (tracectl record -o, perfetto -o)";
    if (!f->info->drop_reply)
        tg_gw_session_reply_msg(s, f->info->request_id, &r.base);
    return TG_GW_CONSUME; /* the bridge closes a descriptor that came with it */
}

static const struct tg_gw_filter k_output_path_filter = {
    .name = "output-path",
    .attach = op_attach,
    .on_down_frame = op_down,
    .needs_body = op_needs_body,
};

int tg_gw_output_path_filter_register(struct tg_gw *gw)
{
    return tg_gw_add_filter(gw, &k_output_path_filter, NULL);
}
