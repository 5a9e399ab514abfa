/* json_str.h: writing a C string as a JSON string literal (internal to libtracegate and the
 * daemon; not installed). Pure; any thread. */
#ifndef TRACEGATE_BASE_JSON_STR_H
#define TRACEGATE_BASE_JSON_STR_H

#include <stdio.h>

/* Writes s quoted, with quotes, backslashes and control characters escaped; NULL as "". */
void tg_json_str(FILE *f, const char *s);

#endif
