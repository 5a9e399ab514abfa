/* span_load.h: OnePath NDJSON span records (docs/onepath.md) read into memory for stitching into
 * a trace. A line that is not a valid span record is reported (file:line: reason) and skipped;
 * a span id seen twice in one trace keeps the first record. Single-threaded. */
#ifndef TRACEGATE_TRACECTL_SPAN_LOAD_H
#define TRACEGATE_TRACECTL_SPAN_LOAD_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

enum tc_attr_type { TC_ATTR_STR, TC_ATTR_INT, TC_ATTR_DOUBLE, TC_ATTR_BOOL };

struct tc_span_attr {
    char *key;
    enum tc_attr_type type;
    char *s;
    int64_t i;
    double d;
};

struct tc_span_event {
    char *name;
    uint64_t ts_ns;
};

struct tc_span {
    uint8_t trace_id[16], span_id[8], parent_id[8];
    int has_parent;
    char *name;
    int kind;   /* ONEPATH_SPAN_KIND_* */
    int status; /* ONEPATH_SPAN_STATUS_* */
    char *status_msg;
    uint64_t start_ns, end_ns; /* realtime (Unix epoch) ns */
    int64_t tid;               /* 0 = unknown */
    char *thread_name;         /* "" = unknown */
    char *service, *host;      /* resource service.name, host.name ("" when absent) */
    char *node;                /* resource tracegate.node ("" when absent) */
    int64_t pid;               /* resource process.pid, 0 = unknown */
    int has_machine;           /* resource perfetto.machine_id or tracegate.node given */
    uint32_t machine_id;
    struct tc_span_attr *attrs;
    size_t n_attrs;
    struct tc_span_event *events;
    size_t n_events;
};

struct tc_span_set {
    struct tc_span *v;
    size_t n, cap;
    uint64_t bad_lines;
    const char *host_node; /* set before loading: spans of tracegate.node HOST_NODE are the host's
                            * (machine 0), as a hub's own spans are in its federated traces */
};

/* The Perfetto machine id a tracegate node named name has in a hub's traces (the fleet's rule:
 * FNV-1a-64 of "tracegate-node:NAME", low 32 bits, 0 made 1). */
uint32_t tc_node_machine_id(const char *name);

/* Appends the records of one NDJSON file ("-" = stdin). Problems with single lines go to warn
 * (at most 10 lines per file, then a count). Returns 0, or -1 when the file cannot be read
 * (err filled). */
int tc_spans_load_file(struct tc_span_set *set, const char *path, FILE *warn, char *err, size_t errlen);
/* Parses one line (no newline) and appends the span. 0, or -1 = not a span record (err). */
int tc_spans_add_line(struct tc_span_set *set, const char *line, size_t len, char *err, size_t errlen);
void tc_spans_free(struct tc_span_set *set);

#endif
