/* bench_dump.c: `tracectl dump` over traces of 10,000 to 1,000,000 packet sequences (each with
 * its own interned event name, every other one clearing its incremental state), as a merged or a
 * hostile trace may hold: the cost per packet must stay flat as sequences grow (the reader indexes
 * sequences and names; it used to scan lists, quadratic in sequences). Prints the curve. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "trace_build.h"
#include "tracectl.h"

static int build(struct tb_trace *b, uint32_t n_seqs)
{
    char name[32];
    for (uint32_t s = 1; s <= n_seqs; s++) {
        snprintf(name, sizeof name, "n%u", (unsigned)s);
        if (tb_slice_by_iid(b, s, 1000 + s, 1, name, s % 2) != 0)
            return -1;
    }
    return 0;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(void)
{
    static const uint32_t sizes[] = {10000, 100000, 1000000};
    static const struct {
        const char *name;
        int flags;
    } modes[] = {{"dump", 0}, {"dump --summary", TC_DUMP_SUMMARY}, {"dump --flows", TC_DUMP_FLOWS}};
    FILE *null = fopen("/dev/null", "w");
    if (!null)
        return 1;
    printf("%-16s %10s %10s %12s\n", "mode", "sequences", "seconds", "ns/packet");
    for (size_t m = 0; m < sizeof modes / sizeof modes[0]; m++)
        for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
            struct tb_trace b = {0};
            if (build(&b, sizes[i]) != 0)
                return 1;
            char err[512] = "";
            double best = 1e9;
            for (int rep = 0; rep < 3; rep++) { /* best of 3: the machine is noisy */
                double t0 = now_s();
                if (tc_dump_trace(null, b.data, b.len, modes[m].flags, err, sizeof err) != 0) {
                    fprintf(stderr, "dump failed: %s\n", err);
                    return 1;
                }
                double dt = now_s() - t0;
                if (dt < best)
                    best = dt;
            }
            printf("%-16s %10u %10.3f %12.0f\n", modes[m].name, (unsigned)sizes[i], best, best * 1e9 / sizes[i]);
            free(b.data);
        }
    fclose(null);
    return 0;
}
