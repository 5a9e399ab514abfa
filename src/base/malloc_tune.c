/* malloc_tune.c: glibc heap settings for processes that stream IPC frames (see malloc_tune.h). */
#include "base/malloc_tune.h"

#include <malloc.h>

void tg_malloc_tune_for_streams(void)
{
    mallopt(M_MMAP_THRESHOLD, 1 << 20); /* buffers up to 1 MiB come from the heap, not mmap */
    mallopt(M_TRIM_THRESHOLD, 32 << 20); /* and the heap keeps up to 32 MiB free for the next burst */
}
