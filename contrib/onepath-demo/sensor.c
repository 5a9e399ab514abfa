/* sensor.c: the OnePath demo's first hop. Publishes COUNT readings to the router, each inside a
 * PRODUCER span "sensor.publish" whose trace context rides in the message attachment (next to the
 * user's own attachment bytes "unit=celsius"). Tracing is switched by the ONEPATH_* environment
 * variables only. Usage: sensor ROUTER_PORT|PORT_FILE [COUNT] */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "demo_net.h"
#include "tracegate/onepath.h"

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: sensor ROUTER_PORT|PORT_FILE [COUNT]\n");
        return 2;
    }
    int count = argc > 2 ? atoi(argv[2]) : 5;
    pthread_setname_np(pthread_self(), "sensor-main");
    int fd = demo_connect(argv[1]);
    if (fd < 0) {
        fprintf(stderr, "sensor: cannot connect to the router at %s\n", argv[1]);
        return 1;
    }
    static const char user[] = "unit=celsius";
    int sent = 0;
    for (int i = 0; i < count; i++) {
        onepath_span_t sp = onepath_span_start("sensor.publish", ONEPATH_SPAN_KIND_PRODUCER, NULL);
        double value = 20.0 + (i % 7) * 0.5;
        onepath_span_set_attr_i64(sp, "seq", i);
        onepath_span_set_attr_f64(sp, "reading", value);
        char payload[64];
        int plen = snprintf(payload, sizeof payload, "reading %d %.1f", i, value);
        uint8_t buf[sizeof user + ONEPATH_ATTACH_OVERHEAD];
        onepath_send_t s;
        onepath_send_begin(&s, user, sizeof user - 1, buf, sizeof buf);
        int ok = demo_send(fd, payload, (size_t)plen, s.attachment, s.attachment_len) == 0;
        onepath_send_end(&s, (size_t)plen, ok);
        if (!ok)
            onepath_span_set_status(sp, ONEPATH_SPAN_STATUS_ERROR, "send failed");
        onepath_span_end(sp);
        if (!ok)
            break;
        sent++;
    }
    close(fd);
    printf("sensor: sent %d\n", sent);
    return sent == count ? 0 : 1;
}
