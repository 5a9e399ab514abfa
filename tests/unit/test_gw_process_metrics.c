/* test_gw_process_metrics.c: /metrics' process figures: the heap count follows live allocations
 * (what the soak test's leak verdict relies on), the descriptor count follows open files. */
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "gw_process_metrics.h"

/* the value of metric NAME in the text gw_process_metrics writes, -1 when absent */
static long long metric(const char *name)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    assert_non_null(f);
    tg_gw_process_metrics(f);
    assert_int_equal(fclose(f), 0);
    long long v = -1;
    size_t nl = strlen(name);
    for (char *line = buf; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL)
        if (strncmp(line, name, nl) == 0 && line[nl] == ' ')
            v = strtoll(line + nl + 1, NULL, 10);
    free(buf);
    return v;
}

static void test_heap_follows_allocations(void **state)
{
    (void)state;
    int64_t before = tg_process_heap_inuse();
    if (before < 0)
        skip(); /* an allocator this build cannot ask */
    const size_t sz = 3u << 20;
    char *p = malloc(sz);
    assert_non_null(p);
    memset(p, 1, sz); /* used, so no compiler drops it */
    int64_t with = tg_process_heap_inuse();
    assert_true(with - before >= (int64_t)sz);
    assert_true(with - before < (int64_t)sz + (256 << 10));
    assert_int_equal(metric("tracegated_heap_inuse_bytes") >= (long long)sz, 1);
    free(p);
    int64_t after = tg_process_heap_inuse();
    assert_true(with - after >= (int64_t)sz);
}

static void test_open_fds_counts_descriptors(void **state)
{
    (void)state;
    long long n0 = metric("process_open_fds");
    assert_true(n0 >= 3);
    int fd[5];
    for (int i = 0; i < 5; i++) {
        fd[i] = open("/dev/null", O_RDONLY | O_CLOEXEC);
        assert_true(fd[i] >= 0);
    }
    assert_int_equal(metric("process_open_fds"), n0 + 5);
    for (int i = 0; i < 5; i++)
        close(fd[i]);
    assert_int_equal(metric("process_open_fds"), n0);
    assert_true(metric("process_resident_memory_bytes") > 0);
    assert_true(metric("process_max_fds") >= n0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_heap_follows_allocations),
        cmocka_unit_test(test_open_fds_counts_descriptors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
