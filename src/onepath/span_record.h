/* span_record.h: a recording span's data (ids, name, kind, times, status, attributes, events)
 * from span_start to export, and its NDJSON line. A record is owned by one thread at a time:
 * the span's thread until span_end, then the exporter. */
#ifndef TG_ONEPATH_SPAN_RECORD_H
#define TG_ONEPATH_SPAN_RECORD_H

#include <stddef.h>
#include <stdint.h>

#include "onepath/jsonbuf.h"

#define TG_OP_MAX_ATTRS 64
#define TG_OP_MAX_EVENTS 64
#define TG_OP_MAX_STR 4096

enum { TG_OP_ATTR_STR, TG_OP_ATTR_I64, TG_OP_ATTR_F64 };

struct tg_op_attr {
    char *key;
    int type;
    union {
        char *s;
        int64_t i;
        double f;
    } v;
};

struct tg_op_event {
    char *name;
    uint64_t ts_ns; /* realtime */
};

struct tg_op_span_rec {
    uint8_t trace_id[16], span_id[8], parent_span_id[8];
    uint8_t has_parent, kind, status;
    unsigned epoch; /* runtime generation that created it: only that generation exports it */
    uint64_t start_real_ns, start_mono_ns, end_real_ns, duration_ns;
    int64_t tid;         /* the starting thread's kernel thread id */
    char thread_name[16]; /* its name (as of its first recorded span), "" if unknown */
    char *status_msg;
    struct tg_op_attr *attrs;
    unsigned n_attrs, cap_attrs;
    struct tg_op_event *events;
    unsigned n_events, cap_events;
    char name[]; /* NUL-terminated, at most TG_OP_MAX_STR bytes */
};

/* NULL on OOM. Times are taken now. */
struct tg_op_span_rec *tg_op_rec_new(const char *name, int kind, const uint8_t trace_id[16],
                                     const uint8_t span_id[8], const uint8_t *parent_span_id, unsigned epoch);
void tg_op_rec_free(struct tg_op_span_rec *r);
void tg_op_rec_attr_str(struct tg_op_span_rec *r, const char *key, const char *value);
void tg_op_rec_attr_i64(struct tg_op_span_rec *r, const char *key, int64_t value);
void tg_op_rec_attr_f64(struct tg_op_span_rec *r, const char *key, double value);
void tg_op_rec_status(struct tg_op_span_rec *r, int status, const char *msg);
void tg_op_rec_event(struct tg_op_span_rec *r, const char *name);
/* Stamps the end time. */
void tg_op_rec_finish(struct tg_op_span_rec *r);
/* Appends the record as one NDJSON line (with '\n'); resource_json is the prebuilt resource
 * object (onepath/resource.h). */
void tg_op_rec_json(const struct tg_op_span_rec *r, struct tg_op_jb *b, const char *resource_json);
/* Appends the record as one OTLP/JSON Span object (no separator). */
void tg_op_rec_otlp(const struct tg_op_span_rec *r, struct tg_op_jb *b);
/* Forgets the calling thread's cached id and name (a forked child). */
void tg_op_rec_forget_thread(void);
/* OnePath kind / status names as exported ("PRODUCER", "OK", ...). */
const char *tg_op_kind_name(int kind);
const char *tg_op_status_name(int status);

#endif
