/* gw_onepath.c: --otlp-file / --otlp-http for tracegated's OnePath spans (see gw_onepath.h). */
#include "gw_onepath.h"

#include <stdio.h>
#include <stdlib.h>

#include "tracegate/log.h"
#include "tracegate/onepath.h"

int tg_gw_onepath_start(const struct tg_gw_config *c, char *err, size_t errlen)
{
    if (!c->otlp_file && !c->otlp_http)
        return 0;
    onepath_trace_opts_t o = ONEPATH_TRACE_OPTS_DEFAULT;
    onepath_otlp_opts_t x = {c->otlp_file, c->otlp_http};
    const char *svc = getenv("ONEPATH_TRACE_SERVICE_NAME");
    if (!svc || !*svc)
        o.service_name = "tracegated";
    int rc = onepath_trace_init_otlp(&o, &x);
    if (rc != ONEPATH_OK) {
        snprintf(err, errlen, "OnePath export: %s",
                 rc == ONEPATH_ERR_INVAL ? "--otlp-http wants http://HOST[:PORT][/PATH]"
                                         : rc == ONEPATH_ERR_IO ? "cannot open the --otlp-file or NDJSON file"
                                                                : "out of memory");
        return -1;
    }
    if (!onepath_trace_enabled())
        tg_warn("onepath", "--otlp-file/--otlp-http given but ONEPATH_TRACE_ENABLE is not 1: no spans are exported");
    else
        tg_info("onepath", "OnePath spans exported%s%s%s%s", c->otlp_file ? " as OTLP/JSON lines to " : "",
                c->otlp_file ? c->otlp_file : "", c->otlp_http ? " and POSTed to " : "", c->otlp_http ? c->otlp_http : "");
    return 0;
}
