/* malloc_tune.h: glibc heap settings for processes that stream IPC frames (tracegated, tracectl,
 * the benchmarks' clients). Internal to libtracegate's programs.
 *
 * Frame and read buffers of 64 KiB to 1 MiB sit at glibc's default mmap threshold (128 KiB,
 * moving) and trim threshold: without this, every burst hands its memory back to the kernel and
 * faults it in again, zeroed (page faults, memcg charges and TLB shootdowns were a third of a
 * streaming client's CPU; docs/benchmarks.md).
 * Threading: call once from main, before other threads start. */
#ifndef TRACEGATE_BASE_MALLOC_TUNE_H
#define TRACEGATE_BASE_MALLOC_TUNE_H

void tg_malloc_tune_for_streams(void);

#endif
