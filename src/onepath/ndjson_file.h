/* ndjson_file.h: the output side of an exporter: opening the NDJSON file without ever blocking
 * (O_NONBLOCK, so a FIFO without a reader fails at once instead of hanging init) and writing whole
 * buffers from the flush thread, waiting for a slow file (pipe, FIFO) without giving up, except
 * when the exporter is stopping and the file has taken nothing for TG_OP_STOP_STALL_MS.
 * Also the per-kind export statistics behind onepath_export_stats() (all four kinds). */
#ifndef TG_ONEPATH_NDJSON_FILE_H
#define TG_ONEPATH_NDJSON_FILE_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define TG_OP_STOP_STALL_MS 2000

struct tg_op_export_stats {
    atomic_int active;
    atomic_uint_fast64_t queued, written, dropped, lost, bytes, stalls;
};

/* The statistics of one ONEPATH_EXPORT_* kind. */
struct tg_op_export_stats *tg_op_stats(int which);
/* Zeroes the counters and records the path ("" for none); active = 0. */
void tg_op_stats_reset(int which, const char *path);

/* Opens path for appending (created 0600). Returns the fd or -1 (errno set). */
int tg_op_file_open(const char *path);
/* Writes all len bytes. Returns 0, or -1 on a write error or when *stop is set and the file made
 * no progress for TG_OP_STOP_STALL_MS. Counts bytes and stalls in st. */
int tg_op_file_write(int fd, const char *buf, size_t len, const atomic_int *stop, struct tg_op_export_stats *st);

#endif
