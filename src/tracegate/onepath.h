/* onepath.h: OnePath distributed tracing and metrics (spans, W3C trace context, the attachment
 * TLV, counters/gauges/histograms, asynchronous NDJSON export, Prometheus text).
 *
 * Include as <tracegate/onepath.h> (pkg-config libtracegate gives the include directory).
 * Full description: docs/onepath.md. Spec: shared/reference/onepath.md.
 *
 * Switching: everything is controlled by the ONEPATH_* environment variables, read once by
 * onepath_trace_init() (or lazily by the first onepath_send_begin / onepath_forward_begin /
 * onepath_recv / onepath_span_start); later changes have no effect until onepath_trace_shutdown()
 * and a new init. Metric registration does not initialise (it returns NULL before an init).
 * ONEPATH_TRACE_ENABLE and ONEPATH_METRICS_ENABLE are the master switches: options passed to
 * onepath_trace_init() tune an enabled subsystem, they do not switch it on. The first init also
 * registers an atexit handler that shuts OnePath down (flushing the exporters) at exit().
 *
 * Cost when disabled: every span, metric and helper call is one branch on a flag (no allocation,
 * no lock, no system call); the receive helper still strips a OnePath TLV from the attachment.
 *
 * Threading:
 *  - init/shutdown may be called from any thread; they are serialised internally. Shutdown
 *    joins the exporter threads (flushing what they hold); do not call it from a metrics
 *    snapshot callback.
 *  - Span handles belong to the thread that started them: the span stack is per thread, and
 *    set_attr/set_status/add_event/end on a handle must run on that thread (calls from another
 *    thread are ignored). Across threads pass a context (onepath_trace_current_ctx) and start a
 *    new span with it as explicit parent.
 *  - Metric handles may be used from any thread concurrently (lock-free atomics). They stay
 *    valid for the life of the process, across shutdown and re-init.
 *  - Exporters run on their own background threads; span_end only puts a record into a
 *    lock-free ring and never waits for file I/O. A full ring drops the record (counted).
 *  - The TLV and traceparent codecs are pure functions.
 */
#ifndef TRACEGATE_ONEPATH_H
#define TRACEGATE_ONEPATH_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- return codes ---- */
#define ONEPATH_OK 0
#define ONEPATH_TLV_FOREIGN 1       /* attachment does not start with the OnePath magic */
#define ONEPATH_ERR_INVAL (-1)      /* bad argument / invalid trace context */
#define ONEPATH_ERR_NOMEM (-2)
#define ONEPATH_ERR_IO (-3)         /* an NDJSON export file could not be opened */
#define ONEPATH_ERR_MALFORMED (-4)  /* OnePath magic followed by a broken TLV */
#define ONEPATH_ERR_NOSPACE (-5)    /* output buffer too small */

/* ---- spans ---- */
#define ONEPATH_SPAN_KIND_INTERNAL 0
#define ONEPATH_SPAN_KIND_PRODUCER 1
#define ONEPATH_SPAN_KIND_CONSUMER 2
#define ONEPATH_SPAN_KIND_CLIENT 3
#define ONEPATH_SPAN_KIND_SERVER 4

#define ONEPATH_SPAN_STATUS_UNSET 0
#define ONEPATH_SPAN_STATUS_OK 1
#define ONEPATH_SPAN_STATUS_ERROR 2

#define ONEPATH_TRACE_FLAG_SAMPLED 0x01

/* W3C trace context in binary form (the 26-byte TRACEPARENT value). */
typedef struct {
    uint8_t version;      /* 0x00 today; 0xff is invalid */
    uint8_t trace_id[16]; /* all zero = invalid */
    uint8_t span_id[8];   /* the parent span's id when used as a parent; all zero = invalid */
    uint8_t flags;        /* bit 0 = sampled */
} onepath_trace_ctx_t;

#define ONEPATH_TRACEPARENT_LEN 55 /* "00-<32 hex>-<16 hex>-<2 hex>" */

/* The spec's options, exactly its four fields in its order (a program written to the spec, which
 * sets these four and nothing else, must find nothing more here; tracegate's own additions are in
 * onepath_otlp_opts_t). */
typedef struct {
    const char *service_name; /* resource service.name; NULL = $ONEPATH_TRACE_SERVICE_NAME */
    const char *ndjson_path;  /* span NDJSON file; NULL = $ONEPATH_TRACE_NDJSON_PATH */
    double sample_ratio;      /* head sampling ratio in [0,1]; 0.0 = $ONEPATH_TRACE_SAMPLE_RATIO */
    size_t ring_capacity;     /* export ring slots; 0 = 1024 */
} onepath_trace_opts_t;

#define ONEPATH_TRACE_OPTS_DEFAULT {NULL, NULL, 0.0, 0}

/* tracegate's span exports beyond the spec's NDJSON file (for onepath_trace_init_otlp). */
typedef struct {
    const char *otlp_file; /* OTLP/JSON lines file; NULL = $ONEPATH_TRACE_OTLP_FILE */
    const char *otlp_http; /* OTLP/HTTP JSON URL (http://HOST:PORT/v1/traces); NULL = $ONEPATH_TRACE_OTLP_HTTP */
} onepath_otlp_opts_t;

#define ONEPATH_OTLP_OPTS_DEFAULT {NULL, NULL}

/* Starts OnePath (tracing and metrics): reads the environment, opens the NDJSON files (created
 * 0600 if missing, appended to; a FIFO must already have a reader) and starts one exporter thread
 * per kind (spans: NDJSON, OTLP file and OTLP/HTTP share one ring and thread, the HTTP sender has
 * a second thread). Idempotent: a second call while running returns ONEPATH_OK and changes
 * nothing. opts may be NULL; opts->ndjson_path "" turns that export off whatever the environment
 * says.
 * Returns ONEPATH_OK, or ONEPATH_ERR_IO / ONEPATH_ERR_NOMEM with nothing started (and no lazy
 * init until onepath_trace_shutdown()). */
int onepath_trace_init(const onepath_trace_opts_t *opts);
/* onepath_trace_init with tracegate's OTLP exports: otlp may be NULL (then the same as
 * onepath_trace_init); its otlp_file / otlp_http "" turns that export off whatever the
 * environment says. An otlp_http URL that is not http://HOST[:PORT][/PATH] fails with
 * ONEPATH_ERR_INVAL. */
int onepath_trace_init_otlp(const onepath_trace_opts_t *opts, const onepath_otlp_opts_t *otlp);
/* The seed's name for the same thing: onepath_trace_init(NULL). */
int onepath_metrics_init(void);
/* Stops tracing and metrics: flushes both exporters (waiting at most ~2 s for an export file that
 * accepts no data, then abandoning the rest, counted as lost) and closes the files. Spans still
 * open keep working as handles but are no longer exported. init (or a lazy init at the next
 * span/send/receive) may follow. No-op when not running. */
void onepath_trace_shutdown(void);
/* 1 when tracing (resp. metrics) is running and enabled. */
int onepath_trace_enabled(void);
int onepath_metrics_enabled(void);

typedef struct onepath_span *onepath_span_t;

/* Starts a span and pushes it on this thread's span stack. Parent: *parent when given and valid,
 * else the top of this thread's stack, else a new trace (whose sampling is decided here, once).
 * Children inherit the sampled flag. Returns NULL when tracing is disabled or the stack is full
 * (64 deep). An unsampled span (ratio 0.0, or an unsampled parent) is a real handle that only
 * keeps the stack and propagates the context: set_attr/status/event on it do nothing and nothing
 * is exported. Spans are recorded only when sampled and an NDJSON path is configured.
 * name is copied (up to 4096 bytes). kind out of range is taken as INTERNAL. */
onepath_span_t onepath_span_start(const char *name, int kind, const onepath_trace_ctx_t *parent);
/* Ends the span, pops it (and ends any span started above it and not yet ended) and queues the
 * record for export. No-op for NULL, an ended span or another thread's span. */
void onepath_span_end(onepath_span_t span);
/* 1 if the span is recording (sampled and exported), else 0. */
int onepath_span_is_recording(onepath_span_t span);
/* Attributes: a key set twice keeps the last value; at most 64 attributes and 64 events per span
 * (further ones are ignored); strings are copied and cut at 4096 bytes. NaN/Inf doubles are
 * exported as the strings "NaN", "Infinity", "-Infinity". */
void onepath_span_set_attr_str(onepath_span_t span, const char *key, const char *value);
void onepath_span_set_attr_i64(onepath_span_t span, const char *key, int64_t value);
void onepath_span_set_attr_f64(onepath_span_t span, const char *key, double value);
/* status is one of ONEPATH_SPAN_STATUS_*; msg may be NULL. */
void onepath_span_set_status(onepath_span_t span, int status, const char *msg);
void onepath_span_add_event(onepath_span_t span, const char *name);

/* 1 and *out = the context of the span on top of this thread's stack (its own span id, to be
 * used as a parent); 0 when there is none or tracing is disabled. */
int onepath_trace_current_ctx(onepath_trace_ctx_t *out);
/* 1 if ctx is a usable parent: version != 0xff, non-zero trace id and span id. */
int onepath_trace_ctx_valid(const onepath_trace_ctx_t *ctx);
/* Parses a W3C traceparent "vv-<32 hex>-<16 hex>-<2 hex>": lower-case hex only, version ff and
 * all-zero ids rejected; version 00 must be exactly 55 characters, a higher version may carry
 * more fields after a '-'. Returns ONEPATH_OK or ONEPATH_ERR_INVAL (out untouched). */
int onepath_trace_ctx_from_string(const char *s, onepath_trace_ctx_t *out);
/* Formats ctx as 55 characters plus NUL into out (at least 56 bytes). Returns ONEPATH_OK, or
 * ONEPATH_ERR_INVAL (out = "") for an invalid context. */
int onepath_trace_ctx_to_string(const onepath_trace_ctx_t *ctx, char *out);

/* ---- attachment TLV ----
 * 0xD1 0x07 | 0x01 (version) | item...   item = tag (1 byte) | length (unsigned LEB128, minimal,
 * 1..5 bytes, at most 2^32-1) | value. Unknown tags are skipped; a known tag twice, a wrong fixed
 * length, a length past the end, a non-minimal or over-long varint, or another version is
 * malformed. */
#define ONEPATH_TLV_MAGIC0 0xD1
#define ONEPATH_TLV_MAGIC1 0x07
#define ONEPATH_TLV_VERSION 0x01
#define ONEPATH_TAG_TRACEPARENT 0x01 /* 26 bytes: version, trace id, span id, flags */
#define ONEPATH_TAG_TRACESTATE 0x02  /* reserved: skipped */
#define ONEPATH_TAG_USER 0x10        /* the user's own attachment bytes */
#define ONEPATH_TAG_SEND_TS_NS 0x11  /* 8 bytes big-endian, sender's CLOCK_REALTIME in ns */
/* Most bytes a OnePath TLV adds around user bytes (header 3, traceparent 28, send ts 10,
 * user tag and length 6). */
#define ONEPATH_ATTACH_OVERHEAD 47

typedef struct {
    int has_traceparent;
    onepath_trace_ctx_t traceparent;
    int has_send_ts;
    uint64_t send_ts_ns;
    const uint8_t *user; /* encode: input; decode: points into the attachment */
    size_t user_len;     /* no USER item is written when 0 */
} onepath_tlv_t;

/* Bytes onepath_tlv_encode writes for t. */
size_t onepath_tlv_size(const onepath_tlv_t *t);
/* Writes the TLV into out. Returns ONEPATH_OK (*out_len set), ONEPATH_ERR_NOSPACE, or
 * ONEPATH_ERR_INVAL (invalid traceparent, user_len >= 2^32). */
int onepath_tlv_encode(const onepath_tlv_t *t, uint8_t *out, size_t cap, size_t *out_len);
/* Decodes an attachment. Always fills t->user/user_len with what to hand to the user:
 *  ONEPATH_OK:            a OnePath TLV; user = the USER item (empty if absent); a TRACEPARENT with
 *                         an invalid value (version ff, zero ids) is ignored (has_traceparent 0);
 *  ONEPATH_TLV_FOREIGN:   no magic; user = the whole attachment, unchanged;
 *  ONEPATH_ERR_MALFORMED: magic then a broken TLV; user = the whole raw attachment, no context. */
int onepath_tlv_decode(const uint8_t *att, size_t len, onepath_tlv_t *t);

/* ---- send / forward / receive helpers ----
 * Transport-agnostic: they build or read the attachment that travels beside a message payload,
 * and keep the built-in metrics. The first call initialises OnePath lazily from the environment
 * when nobody called onepath_trace_init().
 *
 * Sending:
 *     uint8_t buf[ONEPATH_ATTACH_OVERHEAD + USER_MAX];
 *     onepath_send_t s;
 *     onepath_send_begin(&s, user, user_len, buf, sizeof buf);
 *     ok = transport_send(payload, payload_len, s.attachment, s.attachment_len);
 *     onepath_send_end(&s, payload_len, ok);
 * Forwarding inside a CONSUMER/SERVER span (e.g. a subscription callback):
 *     onepath_forward_begin(&s, "forward", user, user_len, buf, sizeof buf); ... same ... */
typedef struct {
    const void *attachment; /* send these bytes: the user's own or the TLV in buf */
    size_t attachment_len;
    onepath_span_t span; /* forward: the PRODUCER span (ended by onepath_send_end); else NULL */
    uint64_t t0_ns;      /* internal: start of the publish path (monotonic), 0 if not timed */
} onepath_send_t;

/* Sets s->attachment. With tracing enabled and ONEPATH_TRACE_AUTO_INJECT=1 it is a TLV in buf
 * holding the current span's traceparent (if a span is active), the send time and the user bytes;
 * otherwise it is user itself (nothing copied). Returns ONEPATH_OK, or ONEPATH_ERR_NOSPACE when a
 * TLV was due but buf is NULL or cap < user_len + ONEPATH_ATTACH_OVERHEAD (then s->attachment =
 * user: the message can still go out, untraced), or ONEPATH_ERR_INVAL for a NULL s. */
int onepath_send_begin(onepath_send_t *s, const void *user, size_t user_len, void *buf, size_t cap);
/* Like onepath_send_begin, but first starts a PRODUCER span named span_name (NULL = "forward")
 * whose parent is this thread's current span (normally the CONSUMER/SERVER span of the message
 * being handled; a new trace if there is none); that span's traceparent goes into the TLV. */
int onepath_forward_begin(onepath_send_t *s, const char *span_name, const void *user, size_t user_len,
                          void *buf, size_t cap);
/* After the transport send: ok != 0 counts onepath.msgs.sent, onepath.bytes.sent (+payload_len)
 * and onepath.publish.latency (µs since begin); ok == 0 counts onepath.msgs.dropped. Ends
 * s->span (status ERROR when !ok). */
void onepath_send_end(onepath_send_t *s, size_t payload_len, int ok);

typedef struct {
    const void *user; /* the user's attachment bytes (points into the attachment) */
    size_t user_len;
    int has_parent;              /* a valid TRACEPARENT arrived: start the CONSUMER span with it */
    onepath_trace_ctx_t parent;
    int64_t e2e_ns;              /* now - SEND_TS_NS (realtime clocks), -1 if absent or negative */
} onepath_recv_t;

/* Reads a received attachment (att may be NULL when len is 0). Counts onepath.msgs.recv,
 * onepath.bytes.recv (+payload_len) and onepath.e2e.latency (µs; negative values dropped).
 * Returns what onepath_tlv_decode returns; r->user is always what the user should see.
 * Typical use:
 *     onepath_recv(&r, att, att_len, payload_len);
 *     sp = onepath_span_start("handle", ONEPATH_SPAN_KIND_CONSUMER, r.has_parent ? &r.parent : NULL);
 *     ... user callback (may call onepath_forward_begin) ...
 *     onepath_span_end(sp); */
int onepath_recv(onepath_recv_t *r, const void *att, size_t len, size_t payload_len);

/* ---- metrics ---- */
#define ONEPATH_METRIC_COUNTER 0
#define ONEPATH_METRIC_GAUGE 1
#define ONEPATH_METRIC_HISTOGRAM 2

typedef struct onepath_counter *onepath_counter_t;
typedef struct onepath_gauge *onepath_gauge_t;
typedef struct onepath_histogram *onepath_histogram_t;

/* Registration is idempotent by name (same name and type returns the same handle). Returns NULL
 * when metrics are disabled, the name is empty or longer than 200 bytes, the name is taken by a
 * metric of another type (or whose Prometheus name would clash), or 1024 metrics exist.
 * description may be NULL (copied, cut at 1024 bytes). Every call on a NULL handle is a no-op. */
onepath_counter_t onepath_counter_register(const char *name, const char *description);
onepath_gauge_t onepath_gauge_register(const char *name, const char *description);
/* 32 log2 buckets: <=1, <=2, <=4, ..., <=2^30, and a last one for everything above 2^30 (the seed's
 * 2^31 bucket, widened so no value is lost; reported with the +Inf bound). */
onepath_histogram_t onepath_histogram_register(const char *name, const char *description);

/* Counters only go up: a negative delta is ignored. */
void onepath_counter_add(onepath_counter_t c, int64_t delta);
void onepath_counter_inc(onepath_counter_t c);
void onepath_gauge_set(onepath_gauge_t g, int64_t value);
void onepath_gauge_add(onepath_gauge_t g, int64_t delta);
void onepath_histogram_observe(onepath_histogram_t h, uint64_t value);

typedef struct {
    const char *name;
    const char *description; /* "" when none */
    int type;                /* ONEPATH_METRIC_* */
    int64_t value;           /* counter total; gauge current value */
    uint64_t hist_count;     /* = sum of hist_buckets */
    uint64_t hist_sum;
    uint64_t hist_min; /* 0 when hist_count is 0 */
    uint64_t hist_max;
    const uint64_t *hist_buckets;     /* per-bucket (not cumulative) counts */
    size_t hist_bucket_count;         /* 17 for the built-in latency histograms, 32 for custom */
    const uint64_t *hist_bounds;      /* inclusive upper bounds; the last is UINT64_MAX (+Inf) */
} onepath_metric_sample_t;

typedef void (*onepath_metric_cb)(const onepath_metric_sample_t *sample, void *userdata);

/* Calls cb for every registered metric, in registration order, under a read lock: writers keep
 * going (values are read atomically, a histogram's fields may be a few observations apart).
 * cb must not register metrics or call shutdown. No-op when metrics are disabled. */
void onepath_metrics_snapshot(onepath_metric_cb cb, void *userdata);

/* All metrics in Prometheus text exposition format 0.0.4: names with every character outside
 * [A-Za-z0-9_:] turned into '_' (so dots become underscores), # HELP and # TYPE lines, histograms
 * as cumulative _bucket{le="..."}, _sum and _count. Returns a malloc'ed NUL-terminated string
 * (free() it; *len = strlen when len is not NULL): "" when metrics are disabled, NULL on OOM. */
char *onepath_metrics_prometheus(size_t *len);

/* ---- export statistics ---- */
#define ONEPATH_EXPORT_SPANS 0     /* the span ring (queued, dropped) and the NDJSON file */
#define ONEPATH_EXPORT_METRICS 1
#define ONEPATH_EXPORT_OTLP_FILE 2 /* OTLP/JSON lines file (counts spans) */
#define ONEPATH_EXPORT_OTLP_HTTP 3 /* OTLP/HTTP: queued/written/lost count spans, dropped = spans of
                                    * requests refused by the full queue, stalls = retries */

typedef struct {
    int active;        /* an exporter of this kind is running */
    uint64_t queued;   /* records accepted (spans into the ring; metric lines produced) */
    uint64_t written;  /* records written to the file */
    uint64_t dropped;  /* spans dropped because the ring was full */
    uint64_t lost;     /* records lost to write errors or abandoned at shutdown */
    uint64_t bytes;    /* bytes written */
    uint64_t stalls;   /* times the file took no more data at once (a slow pipe/FIFO) */
} onepath_export_stats_t;

/* Statistics of the current (or, after shutdown, the last) exporter of one kind; counters restart
 * at each init. path (if not NULL) receives the export file path ("" if none), cut to path_cap.
 * Returns ONEPATH_OK or ONEPATH_ERR_INVAL (unknown kind, NULL st). */
int onepath_export_stats(int which, onepath_export_stats_t *st, char *path, size_t path_cap);

/* ---- recent spans (ONEPATH_TRACE_RECENT_SPANS, docs/onepath.md) ----
 * With ONEPATH_TRACE_RECENT_SPANS=N (> 0) the span exporter also keeps the last N finished spans
 * (and at most ONEPATH_TRACE_RECENT_BYTES of them) in memory as NDJSON lines, whether or not a
 * file is written; a reader takes them with a cursor. Any thread. */
typedef struct {
    int active;          /* the store is on */
    uint64_t next_since; /* pass as since_id next time */
    uint64_t missed;     /* spans after since_id that are gone (pushed out, too big) */
    uint64_t last_id;    /* the newest span's id */
    size_t spans;        /* lines returned */
    int more;            /* spans after these are held (read again with next_since) */
} onepath_recent_read_t;

/* The NDJSON lines (each ending in '\n') of the held spans whose id is after since_id (0 = all),
 * oldest first, at most max_spans and max_bytes. *out is malloc'd (free() it, also when empty).
 * A since_id newer than any span (the process restarted) reads from the start. Returns ONEPATH_OK,
 * ONEPATH_ERR_INVAL or ONEPATH_ERR_NOMEM. */
int onepath_recent_spans(uint64_t since_id, size_t max_spans, size_t max_bytes, char **out, size_t *len,
                         onepath_recent_read_t *r);

typedef struct {
    int active;
    uint64_t kept, bytes;          /* held now */
    uint64_t max_spans, max_bytes; /* the bounds */
    uint64_t added;                /* spans kept since the process started */
    uint64_t evicted;              /* pushed out by newer spans (the bounds) */
    uint64_t too_big;              /* one line longer than 64 KiB or the byte bound: not kept */
    uint64_t read;                 /* lines handed to readers */
    uint64_t last_id;
} onepath_recent_stats_t;
int onepath_recent_stats(onepath_recent_stats_t *st);

#ifdef __cplusplus
}
#endif

#endif
