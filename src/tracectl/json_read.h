/* json_read.h: a small strict JSON reader (RFC 8259) for the NDJSON files tracectl reads: parses
 * one value into a tree of nodes in one allocation arena. Numbers keep their text and are also
 * converted (integers exactly when they fit). Depth is limited; invalid UTF-8 is rejected.
 * Single-threaded, no global state. */
#ifndef TRACEGATE_TRACECTL_JSON_READ_H
#define TRACEGATE_TRACECTL_JSON_READ_H

#include <stddef.h>
#include <stdint.h>

#define TC_JSON_MAX_DEPTH 64

enum tc_json_type { TC_JSON_NULL, TC_JSON_BOOL, TC_JSON_NUM, TC_JSON_STR, TC_JSON_ARR, TC_JSON_OBJ };

struct tc_json {
    enum tc_json_type type;
    int b;                 /* bool */
    const char *s;         /* string (NUL-terminated, decoded) or number text */
    size_t len;            /* string bytes */
    int is_int;            /* number: an integer that fits int64 (or uint64 when > INT64_MAX) */
    int is_uint;           /* number: a non-negative integer that fits uint64 */
    int64_t i;
    uint64_t u;
    double d;
    size_t n;              /* array/object members */
    struct tc_json *items; /* members */
    const char **keys;     /* object keys */
};

struct tc_json_doc;

/* Parses exactly one value (whitespace around it allowed). NULL on error with a message (and
 * the byte offset) in err. Free the result with tc_json_free. */
struct tc_json_doc *tc_json_parse(const char *text, size_t len, char *err, size_t errlen);
const struct tc_json *tc_json_root(const struct tc_json_doc *d);
void tc_json_free(struct tc_json_doc *d);

/* Member lookup (first match); NULL when absent or v is not an object. */
const struct tc_json *tc_json_get(const struct tc_json *v, const char *key);
/* The string of member key, or NULL when absent or not a string. */
const char *tc_json_get_str(const struct tc_json *v, const char *key);

#endif
