/* gw_onepath.h: starting OnePath in tracegated with the gateway's own export options
 * (--otlp-file, --otlp-http) on top of the ONEPATH_* environment. Main thread, at start-up. */
#ifndef TRACEGATE_GW_ONEPATH_H
#define TRACEGATE_GW_ONEPATH_H

#include "gw_config.h"

/* Initialises OnePath when an --otlp-* option is given (the environment alone otherwise starts
 * it lazily, as in any application). The service name defaults to "tracegated". Returns 0, or -1
 * with err (a bad URL, a file that cannot be opened). */
int tg_gw_onepath_start(const struct tg_gw_config *c, char *err, size_t errlen);

#endif
