/* endpoint_transport.c: plain-socket transports (UNIX, TCP) for endpoint connections. */
#include "endpoint_transport.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "tracegate/addr.h"

tg_conn *tg_endpoint_open_conn(struct event_base *base, const struct tg_endpoint *ep,
                               const struct tg_endpoint_creds *creds, char *err, size_t errlen)
{
    (void)creds;
    if (ep->kind != TG_EP_UNIX && ep->kind != TG_EP_TCP) {
        snprintf(err, errlen, "%s:// endpoints are not available in this build", tg_endpoint_kind_name(ep->kind));
        return NULL;
    }
    struct tg_addr a;
    if (tg_addr_parse(ep->address, &a, err, errlen) != 0)
        return NULL;
    int fd = tg_addr_connect(&a);
    if (fd < 0) {
        snprintf(err, errlen, "cannot connect to %s: %s", a.text, strerror(errno));
        return NULL;
    }
    tg_conn *c = tg_conn_new_fd(base, fd, NULL, NULL, NULL);
    if (!c)
        snprintf(err, errlen, "out of memory");
    return c;
}
