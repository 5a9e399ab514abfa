/* tracectl.h: the tracectl commands (each in its own file) and shared helpers. */
#ifndef TRACEGATE_TRACECTL_H
#define TRACEGATE_TRACECTL_H

#include <stdint.h>
#include <stdio.h>

#include "span_stitch.h"
#include "trace_config.pb-c.h"
#include "trace_file.h"
#include "tracectl_rpc.h"

int tc_cmd_query(const struct tc_opts *opts, int argc, char **argv);
int tc_cmd_record(const struct tc_opts *opts, int argc, char **argv);
int tc_cmd_attach(const struct tc_opts *opts, int argc, char **argv);
int tc_cmd_clone(const struct tc_opts *opts, int argc, char **argv);
int tc_cmd_nodes(const struct tc_opts *opts, int argc, char **argv);
int tc_cmd_dump(const struct tc_opts *opts, int argc, char **argv);
int tc_cmd_kcdata(const struct tc_opts *opts, int argc, char **argv); /* tracectl_kcdata.c */
int tc_cmd_merge(const struct tc_opts *opts, int argc, char **argv);  /* tracectl_merge.c */
int tc_cmd_stats(const struct tc_opts *opts, int argc, char **argv);  /* tracectl_stats.c */
int tc_cmd_spans(const struct tc_opts *opts, int argc, char **argv);  /* tracectl_spans.c */

/* ---- tracectl.c ---- */
/* For commands taking "[URL] OPERAND": settles the endpoint and the operand from the positional
 * arguments the command's options left (argv[optind..argc)). The dispatcher takes the first
 * non-option argument for the URL, so `cmd OPERAND` arrives as a URL and nothing left, and
 * `cmd -o F URL OPERAND` as no URL and two left. *eo becomes a copy of opts with the endpoint
 * settled. Returns the operand, or NULL after printing "tracectl CMD: missing WHAT" or "too many
 * arguments" on stderr (the caller prints its usage). */
const char *tc_url_then_operand(const struct tc_opts *opts, int argc, char **argv, const char *cmd,
                                const char *what, struct tc_opts *eo);

/* ---- tracectl_spans.c ---- */
/* Fetches the recent OnePath spans of spec ("NAME", "" = the gateway's own node, "@a,b", "@all")
 * through the gateway of opts (TracegateFleet.Spans) into out_path ("-" = stdout); cursor_path
 * (NULL: none) keeps per-node cursors across fetches; self (NULL: not wanted) receives the
 * gateway's own node name ("" if unknown). Progress and per-node failures go to log.
 * Returns 0 (every node answered), 1 (some did) or -1 (none). */
int tc_fetch_fleet_spans(const struct tc_opts *opts, const char *spec, const char *out_path, const char *cursor_path,
                         char self[64], FILE *log);

/* ---- tracectl_merge.c: stitching OnePath spans into a trace ---- */
/* Parses HOST=ID (ID decimal or 0x hex, 32 bits); out->host is malloc'ed. 0 or -1. */
int tc_parse_machine_map(const char *arg, struct tc_machine_map *out);
/* Reads the clocks of the trace in memory, loads the span files and appends the stitched packets
 * to w (which the caller opened and closes). 0, or -1 with err. */
int tc_stitch_into(const uint8_t *trace, size_t trace_len, char *const *span_paths, size_t n_paths,
                   const struct tc_stitch_opts *o, struct tc_trace_writer *w, struct tc_stitch_stats *st, char *err,
                   size_t errlen);
/* record --spans: stitches the span files into the trace file at path (appending; host_node as in
 * tc_stitch_opts, NULL for none). 0, or -1 with
 * the reason on stderr (the trace is left as it was recorded, plus any packets written). */
int tc_stitch_file(const char *path, char *const *span_paths, size_t n_paths, const char *host_node);
/* One line on out: slices, tracks, flows, remote/unknown machines, orphans. */
void tc_stitch_summary(FILE *out, const char *path, const struct tc_stitch_stats *st);

/* ---- tracectl_dump.c ---- */
#define TC_DUMP_RAW 1     /* every packet in text format (tg_textproto_print) */
#define TC_DUMP_SUMMARY 2 /* totals only */
#define TC_DUMP_FLOWS 4   /* the flows (slice -> slice, as trace processor links them) instead of the packets */
/* Prints the packets of an in-memory .pftrace and a totals section to out.
 * Returns 0, or 1 when the framing is truncated/corrupt or a packet does not
 * decode (err then says what and at which byte offset; the packets before the
 * problem and the totals are still printed). */
int tc_dump_trace(FILE *out, const uint8_t *data, size_t len, int flags, char *err, size_t errlen);

/* ---- tracectl_record.c: a consumer session shared by record and attach ---- */
struct event;

struct tc_session {
    struct tc_rpc *rpc;
    /* the deferred EnableTracing reply */
    struct tc_async enable;
    int enable_started;
    int got_response;
    char enable_error[1024];
    /* progress */
    int progress, tty, line_open;
    uint32_t duration_ms;
    uint64_t t0_ms;
    struct tc_async stats;
    int stats_busy, stats_unsupported, have_stats;
    uint64_t bytes_written, buffer_size, wraps;
    /* stopping (Ctrl-C, --stop, overdue session) */
    int stop_requested;
    struct tc_async flush, disable;
    int interrupts;
    uint64_t last_signal_ms;
    int attached; /* progress wording for `attach` */
    int reading;  /* ReadBuffers phase: no progress line, no stop */
    int aborted;
    uint64_t deadline_ms; /* 0 = none */
    struct event *tick, *sigint, *sigterm;
    /* session survival (tc_rpc_arm_resume): a stop asked for while reconnecting, and a
     * resume during ReadBuffers that could not re-send everything */
    int stop_deferred;
    int read_gap;
    int buffers_freed;
    uint64_t read_limit;     /* ReadBuffers: stop past this many reply bytes (0: no limit) */
    const char *read_limit_why; /* said when it is passed (NULL: "more than the session's buffers") */
    unsigned test_drop_read; /* test only: cut the connection after this many ReadBuffers replies */
    int test_drop_silent;    /* test only: ... without the gateway noticing */
    /* per machine of a federated trace (tracectl_machines.c) */
    struct tc_machine {
        uint32_t id;
        uint64_t packets;
        int failed; /* a TraceStats with final_flush_outcome FAILED came for it */
        uint32_t gaps;  /* the gateway's link-gap record (TraceStats field 1001): outages past the */
        uint64_t gap_ns; /* resume window, their total, and whether the session was re-attached */
        int reattached;
    } machines[64];
    size_t n_machines;
};

/* tracectl_machines.c: counts one packet of the trace by its machine id (TracePacket.machine_id,
 * 0 = the gateway's own node) and prints the per-node outcome of a federated record, with node
 * names from the gateway's TracegateFleet.ListNodes. */
void tc_count_machine(struct tc_session *s, const uint8_t *pkt, size_t len);
void tc_print_machines(const struct tc_session *s, const struct tc_opts *opts, FILE *out);

/* Installs SIGINT/SIGTERM handling and the once-per-second progress timer on
 * the rpc's loop. progress: 1 to print the progress line on stderr. */
int tc_session_init(struct tc_session *s, struct tc_rpc *rpc, uint32_t duration_ms, int progress);
/* Sends EnableTracing with the serialized EnableTracingRequest (fd >= 0 rides
 * along for write_into_file). The reply is deferred until the session ends. */
int tc_session_enable(struct tc_session *s, const uint8_t *args, size_t len, int fd);
/* Flush{trace-stop, perfetto_cmd} then DisableTracing, without waiting. */
void tc_session_stop(struct tc_session *s);
/* Runs the loop until the EnableTracing reply arrives. Returns 0 when the
 * session ended cleanly, -1 on error (message printed to stderr). */
int tc_session_wait(struct tc_session *s);
/* The most a ReadBuffers of a session with this config may send: twice its buffers plus 16 MiB
 * (the service's own packets), 0 (no limit) when the config names no buffer. A server sending
 * more is broken or hostile: its data would only fill the disk. */
uint64_t tc_read_limit(const Perfetto__Protos__TraceConfig *cfg);
/* "32mb", "512kb", "1gb", "64m", "4096k" (binary multiples) -> KiB (at most UINT32_MAX, rounded
 * up). 0 or -1. */
int tc_parse_size_kb(const char *s, uint32_t *out);
/* ReadBuffers into the open writer w, closes it, then FreeBuffers and prints
 * a summary; past s->read_limit it stops, keeping what came. Returns 0 or -1 (message printed). */
int tc_session_read(struct tc_session *s, struct tc_trace_writer *w);
/* FreeBuffers only (write_into_file sessions). */
void tc_session_free_buffers(struct tc_session *s);
void tc_session_destroy(struct tc_session *s);

/* Prints a one-line description of a TraceConfig (duration, buffers, data sources). */
void tc_print_config_summary(FILE *out, const Perfetto__Protos__TraceConfig *cfg);

#endif
