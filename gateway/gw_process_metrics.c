/* gw_process_metrics.c: process_* and tracegated_heap_inuse_bytes for /metrics (see
 * gw_process_metrics.h). */
#include "gw_process_metrics.h"

#include <dirent.h>
#include <sys/resource.h>
#include <unistd.h>

#include "config.h"

/* ASan's allocator counts a free at once (into its quarantine, out of the count); ThreadSanitizer's
 * count lags its frees, so under TSan the figure is left out rather than wrong. glibc's own count
 * is meaningless under either, whose allocators replace malloc. */
#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TG_SANITIZER_ALLOCATOR 1
#elif __has_feature(thread_sanitizer)
#define TG_NO_HEAP_COUNT 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define TG_SANITIZER_ALLOCATOR 1
#elif defined(__SANITIZE_THREAD__)
#define TG_NO_HEAP_COUNT 1
#endif

#if defined(TG_NO_HEAP_COUNT)
#elif defined(TG_SANITIZER_ALLOCATOR)
#include <stddef.h>
/* the sanitizer runtimes' allocator interface (clang ships its header, gcc does not) */
size_t __sanitizer_get_current_allocated_bytes(void);
#elif defined(HAVE_MALLINFO2)
#include <malloc.h>
#endif

int64_t tg_process_heap_inuse(void)
{
#if defined(TG_NO_HEAP_COUNT)
    return -1;
#elif defined(TG_SANITIZER_ALLOCATOR)
    return (int64_t)__sanitizer_get_current_allocated_bytes();
#elif defined(HAVE_MALLINFO2)
    struct mallinfo2 mi = mallinfo2();
    /* chunks handed out from the arenas, and the ones mmap()ed on their own */
    return (int64_t)(mi.uordblks + mi.hblkhd);
#else
    return -1;
#endif
}

/* resident pages from /proc/self/statm, in bytes; -1 when unreadable */
static int64_t resident_bytes(void)
{
    FILE *f = fopen("/proc/self/statm", "re");
    if (!f)
        return -1;
    unsigned long long size, resident;
    int n = fscanf(f, "%llu %llu", &size, &resident);
    fclose(f);
    long page = sysconf(_SC_PAGESIZE);
    return n == 2 && page > 0 ? (int64_t)(resident * (unsigned long long)page) : -1;
}

/* entries of /proc/self/fd, less the one this walk holds open; -1 when unreadable */
static int64_t open_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    if (!d)
        return -1;
    int64_t n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (e->d_name[0] != '.')
            n++;
    closedir(d);
    return n - 1;
}

static void gauge(FILE *f, const char *name, const char *help, int64_t v)
{
    if (v < 0)
        return;
    fprintf(f, "# HELP %s %s\n# TYPE %s gauge\n%s %lld\n", name, help, name, name, (long long)v);
}

void tg_gw_process_metrics(FILE *f)
{
    gauge(f, "process_resident_memory_bytes", "Resident memory size in bytes.", resident_bytes());
    gauge(f, "process_open_fds", "Number of open file descriptors.", open_fds());
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
        gauge(f, "process_max_fds", "Maximum number of open file descriptors (the soft limit).",
              (int64_t)rl.rlim_cur);
    gauge(f, "tracegated_heap_inuse_bytes",
          "Bytes in live heap allocations (the allocator's count; freed memory it keeps cached is not in use).",
          tg_process_heap_inuse());
}
