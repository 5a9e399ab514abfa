/* gw_output_path.h: the "output-path" gateway filter. TraceConfig.output_path (with
 * write_into_file) makes the tracing service create the trace file itself, with the service's
 * rights, at a path of the client's choosing. Through the gateway that would let any recorder (a
 * token, a certificate, another local user, a linked node) create files on the gateway's host as
 * the service's user. The filter answers such an EnableTracing itself
 * (EnableTracingResponse{disabled, error}) unless the client is root or the gateway's own user on
 * this machine, counts it as tracegated_frames_rejected_total{reason="output_path"} and logs it
 * (sampled). The embedded service applies the same rule on its own (tg_svc_may_create_files).
 *
 * Threading: the gateway's event loop thread (like every filter). */
#ifndef TRACEGATE_GATEWAY_GW_OUTPUT_PATH_H
#define TRACEGATE_GATEWAY_GW_OUTPUT_PATH_H

#include <stddef.h>
#include <stdint.h>

#include "gw_bridge.h"

/* 1 if the client is a local user (the kernel told us its uid) that is root or the gateway's
 * own user: someone who could create the file anyway. */
int tg_gw_may_create_files(const struct tg_gw_client_info *info);
/* EnableTracingRequest args: 1 if its TraceConfig names an output_path with write_into_file (the
 * only case the services honour it), 0 if not, -1 if the bytes cannot be read (treated as naming
 * one). */
int tg_gw_enable_names_output_path(const uint8_t *args, size_t len);
/* Registers the filter (tg_gw_new does, before any other filter). 0 or -1. */
int tg_gw_output_path_filter_register(struct tg_gw *gw);

#endif
