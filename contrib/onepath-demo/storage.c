/* storage.c: the OnePath demo's last hop. Accepts the router and stores each message (one line
 * per message in OUT_FILE, or just counts) inside a CONSUMER span "storage.store" whose parent
 * is the router's forward span; it checks the user's attachment bytes arrived unchanged.
 * Usage: storage LISTEN_PORT_FILE [OUT_FILE] */
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "demo_net.h"
#include "tracegate/onepath.h"

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: storage LISTEN_PORT_FILE [OUT_FILE]\n");
        return 2;
    }
    pthread_setname_np(pthread_self(), "storage-main");
    FILE *outf = argc > 2 ? fopen(argv[2], "w") : NULL;
    if (argc > 2 && !outf) {
        fprintf(stderr, "storage: cannot write %s\n", argv[2]);
        return 1;
    }
    int lfd = demo_listen(0, argv[1]);
    int in = lfd >= 0 ? demo_accept(lfd) : -1;
    if (in < 0) {
        fprintf(stderr, "storage: cannot listen or accept\n");
        return 1;
    }
    char payload[DEMO_MAX_PAYLOAD];
    uint8_t att[DEMO_MAX_ATTACH];
    size_t plen, alen;
    int stored = 0, bad_user = 0, rc;
    while ((rc = demo_recv(in, payload, &plen, att, &alen)) == 1) {
        onepath_recv_t r;
        onepath_recv(&r, att, alen, plen);
        onepath_span_t sp = onepath_span_start("storage.store", ONEPATH_SPAN_KIND_CONSUMER, r.has_parent ? &r.parent : NULL);
        if (r.user_len != 12 || memcmp(r.user, "unit=celsius", 12) != 0)
            bad_user++;
        if (r.e2e_ns >= 0)
            onepath_span_set_attr_i64(sp, "e2e.ns", r.e2e_ns);
        if (outf)
            fprintf(outf, "%s\n", payload);
        onepath_span_end(sp);
        stored++;
    }
    close(in);
    close(lfd);
    if (outf)
        fclose(outf);
    printf("storage: stored %d\n", stored);
    if (bad_user)
        fprintf(stderr, "storage: %d messages lost their user attachment bytes\n", bad_user);
    return rc < 0 || bad_user ? 1 : 0;
}
