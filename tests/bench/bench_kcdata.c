/* bench_kcdata.c: KCDATA costs the gateway pays per link HELLO and per stats dump: node
 * descriptor encode and decode, a 1000-counter stats snapshot encode / decode, validation and
 * text printing of a 1 MiB buffer. Prints operations/s and MB/s; keeps to a few seconds.
 *
 * Usage: bench_kcdata [seconds-per-run]   (default 0.5) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tracegate/kcdata.h"
#include "tracegate/kcdata_node.h"
#include "tracegate/kcdata_stats.h"

static double g_seconds = 0.5;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void report(const char *what, double ops, double secs, size_t bytes_per_op)
{
    printf("  %-34s %12.0f ops/s", what, ops / secs);
    if (bytes_per_op)
        printf("  %9.1f MB/s  (%zu bytes)", ops * (double)bytes_per_op / secs / 1e6, bytes_per_op);
    printf("\n");
}

static void count_stat(void *ctx, uint64_t id, const char *name, uint64_t value)
{
    (void)id, (void)name;
    *(uint64_t *)ctx += value;
}

int main(int argc, char **argv)
{
    if (argc > 1)
        g_seconds = atof(argv[1]);
    char err[256];
    struct tg_node_desc d;
    memset(&d, 0, sizeof d);
    snprintf(d.name, sizeof d.name, "gateway-eu-west-1.example.net");
    snprintf(d.version, sizeof d.version, "0.9.0");
    d.machine_id = 0x1234567890abcdefull;
    static const char *const caps[] = {"link-resume", "onepath-tlv", "clock-probe", "kcdata-stats", "zstd"};
    for (size_t i = 0; i < 5; i++)
        tg_node_desc_add_cap(&d, caps[i], NULL, 0);
    tg_node_desc_read_clocks(&d);

    uint8_t *buf;
    size_t len;
    double t0 = now_s(), n = 0;
    do {
        for (int i = 0; i < 100; i++, n++) {
            if (tg_node_desc_encode(&d, &buf, &len, err, sizeof err) != 0)
                return 1;
            free(buf);
        }
    } while (now_s() - t0 < g_seconds);
    report("node descriptor encode", n, now_s() - t0, len);

    tg_node_desc_encode(&d, &buf, &len, err, sizeof err);
    struct tg_node_desc back;
    t0 = now_s(), n = 0;
    do {
        for (int i = 0; i < 100; i++, n++)
            if (tg_node_desc_decode(buf, len, &back, err, sizeof err) != 0)
                return 1;
    } while (now_s() - t0 < g_seconds);
    report("node descriptor decode", n, now_s() - t0, len);
    free(buf);

    struct tg_kcdata_stat st[1000];
    char names[1000][32];
    for (int i = 0; i < 1000; i++) {
        snprintf(names[i], sizeof names[i], "counter_%d", i);
        st[i] = (struct tg_kcdata_stat){names[i], (uint64_t)i * 1000};
    }
    t0 = now_s(), n = 0;
    do {
        if (tg_kcdata_stats_encode(st, 1000, &buf, &len, err, sizeof err) != 0)
            return 1;
        free(buf);
        n++;
    } while (now_s() - t0 < g_seconds);
    report("stats snapshot encode (1000)", n, now_s() - t0, len);
    tg_kcdata_stats_encode(st, 1000, &buf, &len, err, sizeof err);
    uint64_t sum = 0;
    t0 = now_s(), n = 0;
    do {
        if (tg_kcdata_stats_decode(buf, len, count_stat, &sum, err, sizeof err) != 1000)
            return 1;
        n++;
    } while (now_s() - t0 < g_seconds);
    report("stats snapshot decode (1000)", n, now_s() - t0, len);
    free(buf);

    /* a 1 MiB buffer of mixed items */
    struct tg_kcdata_enc e;
    tg_kcdata_enc_init(&e, TG_KCDATA_MAGIC);
    tg_node_desc_add(&e, &d);
    while (e.len < (1u << 20))
        tg_kcdata_stats_add(&e, e.len, st, 100);
    if (tg_kcdata_finish(&e, &buf, &len) != 0)
        return 1;
    t0 = now_s(), n = 0;
    do {
        if (tg_kcdata_validate(buf, len, TG_KCDATA_MAGIC, err, sizeof err) != 0)
            return 1;
        n++;
    } while (now_s() - t0 < g_seconds);
    report("validate 1 MiB", n, now_s() - t0, len);
    FILE *null = fopen("/dev/null", "w");
    t0 = now_s(), n = 0;
    do {
        if (tg_kcdata_print(null, buf, len, 0, err, sizeof err) != 0)
            return 1;
        n++;
    } while (now_s() - t0 < g_seconds);
    report("print 1 MiB (text, to /dev/null)", n, now_s() - t0, len);
    t0 = now_s(), n = 0;
    do {
        if (tg_kcdata_print_json(null, buf, len, err, sizeof err) != 0)
            return 1;
        n++;
    } while (now_s() - t0 < g_seconds);
    report("print 1 MiB (JSON, to /dev/null)", n, now_s() - t0, len);
    fclose(null);
    free(buf);
    return 0;
}
