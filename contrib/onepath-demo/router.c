/* router.c: the OnePath demo's middle hop. Connects to storage, then accepts the sensor; each
 * message is handled in a CONSUMER span "router.route" (its parent the sensor's span from the
 * attachment) and forwarded with onepath_forward_begin, which starts the PRODUCER span
 * "router.forward" and puts its context into the outgoing attachment, the user's bytes kept.
 * Usage: router LISTEN_PORT_FILE STORAGE_PORT|PORT_FILE */
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "demo_net.h"
#include "tracegate/onepath.h"

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: router LISTEN_PORT_FILE STORAGE_PORT|PORT_FILE\n");
        return 2;
    }
    pthread_setname_np(pthread_self(), "router-main");
    int out = demo_connect(argv[2]);
    if (out < 0) {
        fprintf(stderr, "router: cannot connect to storage at %s\n", argv[2]);
        return 1;
    }
    int lfd = demo_listen(0, argv[1]);
    int in = lfd >= 0 ? demo_accept(lfd) : -1;
    if (in < 0) {
        fprintf(stderr, "router: cannot listen or accept\n");
        return 1;
    }
    char payload[DEMO_MAX_PAYLOAD];
    uint8_t att[DEMO_MAX_ATTACH];
    size_t plen, alen;
    int routed = 0, rc, failed = 0;
    while ((rc = demo_recv(in, payload, &plen, att, &alen)) == 1) {
        onepath_recv_t r;
        onepath_recv(&r, att, alen, plen);
        onepath_span_t sp = onepath_span_start("router.route", ONEPATH_SPAN_KIND_CONSUMER, r.has_parent ? &r.parent : NULL);
        onepath_span_set_attr_str(sp, "route", "storage");
        onepath_span_set_attr_i64(sp, "payload.bytes", (int64_t)plen);
        uint8_t buf[DEMO_MAX_ATTACH + ONEPATH_ATTACH_OVERHEAD];
        onepath_send_t s;
        onepath_forward_begin(&s, "router.forward", r.user, r.user_len, buf, sizeof buf);
        int ok = demo_send(out, payload, plen, s.attachment, s.attachment_len) == 0;
        onepath_send_end(&s, plen, ok);
        onepath_span_end(sp);
        if (!ok) {
            failed = 1;
            break;
        }
        routed++;
    }
    close(in);
    close(lfd);
    close(out);
    printf("router: routed %d\n", routed);
    return rc < 0 || failed ? 1 : 0;
}
