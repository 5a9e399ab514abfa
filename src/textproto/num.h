/* num.h: locale-independent float/double conversion for the text format
 * reader and printer (internal to src/textproto). */
#ifndef TG_TEXTPROTO_NUM_H
#define TG_TEXTPROTO_NUM_H

#include <stddef.h>

/* Converts the whole NUL-terminated decimal literal s (digits, '.', exponent);
 * returns 0, or -1 if s is not entirely a number. Overflow gives +-inf. */
int tg_tp_strtod(const char *s, double *out);
int tg_tp_strtof(const char *s, float *out);

/* Formats d / f with the fewest significant digits that convert back to the
 * exact same value ("inf", "-inf", "nan", "-nan" for the special values). */
void tg_tp_fmt_double(char *buf, size_t n, double d);
void tg_tp_fmt_float(char *buf, size_t n, float f);

#endif
