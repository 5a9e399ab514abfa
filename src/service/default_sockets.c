/* default_sockets.c: Perfetto's default producer/consumer socket names (env overrides, /run/perfetto vs /tmp). */
#include "tracegate/service.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

void tg_service_default_sockets(char *producer, size_t plen, char *consumer, size_t clen)
{
    /* /run/perfetto is used only when it exists and we may create sockets in it */
    int run_ok = access("/run/perfetto/", X_OK) == 0;
    const char *p = getenv("PERFETTO_PRODUCER_SOCK_NAME");
    const char *c = getenv("PERFETTO_CONSUMER_SOCK_NAME");
    if (producer)
        snprintf(producer, plen, "%s",
                 p && *p ? p : (run_ok ? "/run/perfetto/traced-producer.sock" : "/tmp/perfetto-producer"));
    if (consumer)
        snprintf(consumer, clen, "%s",
                 c && *c ? c : (run_ok ? "/run/perfetto/traced-consumer.sock" : "/tmp/perfetto-consumer"));
}
