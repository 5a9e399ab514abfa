/* buf.h: growable byte buffer with a sticky out-of-memory flag, shared by the
 * text format reader and printer, and by the gateway's protobuf rewriting
 * (gateway/fed_clocks.c). Internal to the tree: not an installed header. */
#ifndef TG_TEXTPROTO_BUF_H
#define TG_TEXTPROTO_BUF_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

struct tg_tp_buf {
    uint8_t *data;
    size_t len;
    size_t cap;
    int oom; /* set once an allocation failed; later appends are no-ops */
};

#define TG_TP_BUF_INIT { NULL, 0, 0, 0 }

/* Makes room for extra more bytes; returns 0, or -1 (and sets oom). */
int tg_tp_buf_reserve(struct tg_tp_buf *b, size_t extra);
void tg_tp_buf_append(struct tg_tp_buf *b, const void *p, size_t n);
void tg_tp_buf_putc(struct tg_tp_buf *b, char c);
void tg_tp_buf_puts(struct tg_tp_buf *b, const char *s);
void tg_tp_buf_spaces(struct tg_tp_buf *b, size_t n);
void tg_tp_buf_printf(struct tg_tp_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void tg_tp_buf_varint(struct tg_tp_buf *b, uint64_t v);
/* Appends v as n little-endian bytes (n = 4 or 8). */
void tg_tp_buf_fixed(struct tg_tp_buf *b, uint64_t v, unsigned n);
/* Releases the storage and resets b to empty. */
void tg_tp_buf_free(struct tg_tp_buf *b);

#endif
