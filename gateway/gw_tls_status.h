/* gw_tls_status.h: the TLS data path (net/tls.h: kernel TLS or batched records) as the "tls"
 * object of /api/status and the tracegated_tls_* families of /metrics.
 *
 * Any thread (reads relaxed atomic counters); the caller owns f. */
#ifndef TRACEGATE_GATEWAY_GW_TLS_STATUS_H
#define TRACEGATE_GATEWAY_GW_TLS_STATUS_H

#include <stdio.h>

/* Writes `"tls":{...}` (no separator around it). */
void tg_gw_tls_status_json(FILE *f);
/* Writes the Prometheus text of the tracegated_tls_* families. */
void tg_gw_tls_metrics(FILE *f);

#endif
