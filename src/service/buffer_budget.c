/* buffer_budget.c: how much trace buffer memory the service hands out. A buffer costs nothing
 * until producers fill it (trace_buffer.c), so without a bound any recorder could ask for 128
 * buffers of 4 GB per session and have a producer fill them until the host runs out of memory.
 * The service keeps the sum of every live buffer's size (clones included) under a budget
 * (tg_service_opts.max_buffer_bytes, default half the machine's memory), and a principal that is
 * not privileged may hold at most half of it, so one such principal can never take it all. */
#include "service/svc.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

uint64_t tg_svc_default_buffer_budget(void)
{
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    uint64_t half = pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page / 2u : 0;
    return half >= (256ull << 20) ? half : 256ull << 20;
}

static uint64_t session_bytes(const tg_svc_session *s)
{
    uint64_t n = 0;
    for (size_t i = 0; i < s->n_buffers; i++)
        n += s->buffers[i]->bytes;
    return n;
}

uint64_t tg_svc_principal_buffer_bytes(const tg_service *svc, const char *principal)
{
    uint64_t n = 0;
    for (const tg_svc_session *s = svc->sessions; s; s = s->next)
        if (strcmp(s->principal, principal) == 0)
            n += session_bytes(s);
    return n;
}

static void mb(char *out, size_t len, uint64_t bytes)
{
    snprintf(out, len, "%llu MB", (unsigned long long)((bytes + (1u << 20) - 1) >> 20));
}

int tg_svc_buffer_budget_check(const tg_service *svc, const tg_svc_consumer *c, uint64_t want, char *err,
                               size_t errlen)
{
    char w[32], used[32], all[32];
    mb(w, sizeof w, want);
    mb(all, sizeof all, svc->buffer_budget);
    if (want > svc->buffer_budget || svc->buffer_bytes > svc->buffer_budget - want) {
        mb(used, sizeof used, svc->buffer_bytes);
        snprintf(err, errlen,
                 "Trace buffers of %s do not fit in the service's buffer memory (%s in use of %s): ask for "
                 "smaller buffers or wait for other sessions to end",
                 w, used, all);
        return -1;
    }
    if (c && !c->privileged) {
        uint64_t mine = tg_svc_principal_buffer_bytes(svc, c->principal), cap = svc->buffer_budget / 2;
        if (want > cap || mine > cap - want) {
            char half[32];
            mb(used, sizeof used, mine);
            mb(half, sizeof half, cap);
            snprintf(err, errlen,
                     "Trace buffers of %s would take %s past its share of the service's buffer memory (%s in use "
                     "of %s): ask for smaller buffers",
                     w, c->principal, used, half);
            return -1;
        }
    }
    return 0;
}

uint64_t tg_service_buffer_budget(const tg_service *svc) { return svc->buffer_budget; }
