/* onepath_test_util.h: helpers for the OnePath unit tests: JSON reading (tracectl's reader, to
 * read the NDJSON exports back), a scratch directory, reading a file's lines, clearing the ONEPATH_*
 * environment, waiting (with a generous deadline) for a condition, and a comma-decimal locale.
 * Nothing here calls cmocka; not thread-safe unless noted. */
#ifndef ONEPATH_TEST_UTIL_H
#define ONEPATH_TEST_UTIL_H

#include <stddef.h>
#include <stdint.h>

/* JSON: the OnePath tests read their NDJSON exports back with tracectl's strict reader
 * (src/tracectl/json_read.c), under short names. */
#include "../../src/tracectl/json_read.h"
#define tj tc_json
enum { TJ_NULL = TC_JSON_NULL, TJ_BOOL = TC_JSON_BOOL, TJ_NUM = TC_JSON_NUM, TJ_STR = TC_JSON_STR,
       TJ_ARR = TC_JSON_ARR, TJ_OBJ = TC_JSON_OBJ };

/* Parses exactly one JSON value (tc_json_parse's rules). NULL when invalid. */
struct tj *tj_parse(const char *text, size_t len);
void tj_free(struct tj *v);
/* Member of an object, NULL if absent or v is not an object. */
const struct tj *tj_get(const struct tj *v, const char *key);
/* String member value or NULL. */
const char *tj_str(const struct tj *v, const char *key);
/* Integer member value (exact); -1 (0 for u64) with *ok = 0 when absent or not an integer. */
int64_t tj_int(const struct tj *v, const char *key, int *ok);
uint64_t tj_u64(const struct tj *v, const char *key, int *ok);

/* mkdtemp under $TMPDIR (or /tmp); returns a static path, NULL on failure. */
const char *ot_tmpdir(const char *tag);
/* Removes every file in dir and dir itself. */
void ot_rmdir(const char *dir);
/* Splits a file into lines (without '\n'). Returns the count (-1 if unreadable); *lines malloc'ed
 * array of malloc'ed strings; *complete = 1 if the file ends with '\n' (or is empty). */
long ot_read_lines(const char *path, char ***lines, int *complete);
void ot_free_lines(char **lines, long n);
/* Unsets every ONEPATH_* variable. */
void ot_clear_env(void);
/* Calls cond(arg) every few ms until it returns non-zero (1) or timeout_ms passes (0). */
int ot_wait_for(int (*cond)(void *arg), void *arg, int timeout_ms);
uint64_t ot_now_ns(void);

/* Switches LC_NUMERIC to a locale whose decimal separator is ',' (as an application calling
 * setlocale(LC_ALL, "") in Germany or France has): an installed one, else one compiled with
 * localedef into a scratch directory named by LOCPATH. 1 on success, 0 when no such locale can be
 * had (the caller skips). ot_comma_locale_end() restores "C" and removes the scratch locale. */
int ot_comma_locale_begin(void);
void ot_comma_locale_end(void);

#endif
