/* trace_file.h: .pftrace files (a Perfetto `Trace` message: a bare sequence of
 * field-1 length-delimited TracePacket records, no header, no footer):
 * assembling packets from ReadBuffers slices, writing records, reading them back.
 *
 * Used by tracectl (record, attach, dump). Single-threaded; no global state. */
#ifndef TRACEGATE_TRACECTL_TRACE_FILE_H
#define TRACEGATE_TRACECTL_TRACE_FILE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Largest packet accepted when assembling slices or reading a file (bytes). */
#define TC_TRACE_MAX_PACKET (256u * 1024u * 1024u)

/* ---- writing ---- */

struct tc_trace_writer {
    FILE *f;
    int own;            /* 1: fclose at close; 0: stdout (flushed only) */
    uint64_t packets;   /* records written */
    uint64_t bytes;     /* file bytes written (headers included) */
    char path[512];
};

/* Opens (creates/truncates) path for writing; "-" is stdout. Returns 0, or -1
 * with a message in err. */
int tc_trace_writer_open(struct tc_trace_writer *w, const char *path, char *err, size_t errlen);
/* Writes to f (open for writing, closed by tc_trace_writer_close), named path in messages. */
void tc_trace_writer_adopt(struct tc_trace_writer *w, FILE *f, const char *path);
/* Opens an existing trace file to append records to it (a trace is a bare sequence of records,
 * so appending keeps it valid). 0 or -1 (err). */
int tc_trace_writer_append(struct tc_trace_writer *w, const char *path, char *err, size_t errlen);
/* Appends one record: 0x0A, varint(len), the packet bytes. 0 or -1 (err). */
int tc_trace_writer_add(struct tc_trace_writer *w, const uint8_t *pkt, size_t len, char *err, size_t errlen);
/* Flushes and closes; reports write errors that only show up now (ENOSPC).
 * Safe to call twice. 0 or -1 (err). */
int tc_trace_writer_close(struct tc_trace_writer *w, char *err, size_t errlen);

/* Encodes the record header for a packet of len bytes into hdr (>= 11 bytes);
 * returns its size. */
size_t tc_trace_record_header(uint8_t *hdr, size_t len);

/* ---- assembling ReadBuffers slices into packets ---- */

/* Called for each complete packet; return nonzero to stop (error). */
typedef int (*tc_packet_fn)(void *arg, const uint8_t *pkt, size_t len);

struct tc_packet_assembler {
    uint8_t *buf;
    size_t len, cap;
    size_t slices;      /* slices in the pending (incomplete) packet */
};

void tc_assembler_init(struct tc_packet_assembler *a);
/* Adds one slice; when last is set the concatenation since the previous last
 * slice is delivered to fn (a single-slice packet is passed without copying).
 * Returns 0, the nonzero value fn returned, or -1 when the packet would exceed
 * TC_TRACE_MAX_PACKET or memory runs out. */
int tc_assembler_add(struct tc_packet_assembler *a, const uint8_t *data, size_t len, int last, tc_packet_fn fn,
                     void *arg);
/* Bytes of an unfinished packet (slices seen without last_slice_for_packet). */
size_t tc_assembler_pending(const struct tc_packet_assembler *a);
void tc_assembler_free(struct tc_packet_assembler *a);

/* Feeds the serialized ReadBuffersResponse reply (slices = field 2, each
 * {data = 1, last_slice_for_packet = 2}) to the assembler. Returns 0, fn's
 * nonzero value, or -1 on a malformed reply / oversized packet (err filled). */
int tc_assembler_add_reply(struct tc_packet_assembler *a, const uint8_t *reply, size_t len, tc_packet_fn fn,
                           void *arg, char *err, size_t errlen);

/* ---- reading ---- */

struct tc_trace_reader {
    const uint8_t *data;
    size_t len;
    size_t off;         /* offset of the next record */
    uint64_t index;     /* index of the next packet */
};

void tc_trace_reader_init(struct tc_trace_reader *r, const uint8_t *data, size_t len);
/* Returns 1 with the next packet (*pkt points into the buffer, *pkt_off = the
 * record's byte offset), 0 at a clean end of input, -1 on a truncated or
 * corrupt record (err says what and at which byte offset; r->off stays at the
 * bad record). */
int tc_trace_reader_next(struct tc_trace_reader *r, const uint8_t **pkt, size_t *len, size_t *pkt_off, char *err,
                         size_t errlen);

/* Reads a whole file ("-" = stdin) into a malloc'd buffer (free() it).
 * 0 or -1 with err. */
int tc_trace_file_load(const char *path, uint8_t **data, size_t *len, char *err, size_t errlen);

#endif
