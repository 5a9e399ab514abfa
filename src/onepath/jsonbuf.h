/* jsonbuf.h: a growable byte buffer with JSON writers (escaped strings that are always valid
 * UTF-8, integers, doubles, hex). Used by the NDJSON exporters and the Prometheus renderer.
 * One buffer per thread; no locking. An allocation failure makes the buffer "failed": later
 * writes are ignored and tg_op_jb_failed() reports it. */
#ifndef TG_ONEPATH_JSONBUF_H
#define TG_ONEPATH_JSONBUF_H

#include <locale.h>
#include <stddef.h>
#include <stdint.h>

struct tg_op_jb {
    char *p;
    size_t len, cap;
    int failed;
};

void tg_op_jb_init(struct tg_op_jb *b);
void tg_op_jb_free(struct tg_op_jb *b);
/* Empties the buffer, keeping its memory (and clearing the failed flag). */
void tg_op_jb_reset(struct tg_op_jb *b);
int tg_op_jb_failed(const struct tg_op_jb *b);
void tg_op_jb_put(struct tg_op_jb *b, const char *s, size_t n);
void tg_op_jb_puts(struct tg_op_jb *b, const char *s);
void tg_op_jb_putc(struct tg_op_jb *b, char c);
void tg_op_jb_u64(struct tg_op_jb *b, uint64_t v);
void tg_op_jb_i64(struct tg_op_jb *b, int64_t v);
/* A JSON number (always with a '.', whatever LC_NUMERIC the application set), or the strings
 * "NaN", "Infinity", "-Infinity" for values JSON cannot hold. */
void tg_op_jb_f64(struct tg_op_jb *b, double v);
/* A quoted JSON string of n bytes: ", \ and control characters escaped, invalid UTF-8 replaced by
 * U+FFFD. */
void tg_op_jb_str(struct tg_op_jb *b, const char *s, size_t n);
void tg_op_jb_cstr(struct tg_op_jb *b, const char *s);
/* A quoted string of lower-case hex. */
void tg_op_jb_hex(struct tg_op_jb *b, const uint8_t *bytes, size_t n);

/* The "C" locale (made once, never freed) for formatting and parsing numbers with uselocale()
 * independently of the application's setlocale(); (locale_t)0 if it could not be made. */
locale_t tg_op_c_locale(void);

#endif
