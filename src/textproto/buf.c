/* buf.c: growable byte buffer used by the text format reader and printer. */
#include "textproto/buf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tracegate/pbwire.h"

int tg_tp_buf_reserve(struct tg_tp_buf *b, size_t extra)
{
    if (b->oom)
        return -1;
    if (extra <= b->cap - b->len)
        return 0;
    if (extra > SIZE_MAX / 2 - b->len) {
        b->oom = 1;
        return -1;
    }
    size_t want = b->len + extra;
    size_t ncap = b->cap ? b->cap : 64;
    while (ncap < want)
        ncap *= 2;
    uint8_t *n = realloc(b->data, ncap);
    if (!n) {
        b->oom = 1;
        return -1;
    }
    b->data = n;
    b->cap = ncap;
    return 0;
}

void tg_tp_buf_append(struct tg_tp_buf *b, const void *p, size_t n)
{
    if (n == 0 || tg_tp_buf_reserve(b, n) < 0)
        return;
    memcpy(b->data + b->len, p, n);
    b->len += n;
}

void tg_tp_buf_putc(struct tg_tp_buf *b, char c)
{
    if (tg_tp_buf_reserve(b, 1) < 0)
        return;
    b->data[b->len++] = (uint8_t)c;
}

void tg_tp_buf_puts(struct tg_tp_buf *b, const char *s)
{
    tg_tp_buf_append(b, s, strlen(s));
}

void tg_tp_buf_spaces(struct tg_tp_buf *b, size_t n)
{
    if (n == 0 || tg_tp_buf_reserve(b, n) < 0)
        return;
    memset(b->data + b->len, ' ', n);
    b->len += n;
}

void tg_tp_buf_printf(struct tg_tp_buf *b, const char *fmt, ...)
{
    char small[128];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0) {
        b->oom = 1;
        return;
    }
    if ((size_t)n < sizeof small) {
        tg_tp_buf_append(b, small, (size_t)n);
        return;
    }
    if (tg_tp_buf_reserve(b, (size_t)n + 1) < 0)
        return;
    va_start(ap, fmt);
    vsnprintf((char *)b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

void tg_tp_buf_varint(struct tg_tp_buf *b, uint64_t v)
{
    if (tg_tp_buf_reserve(b, 10) < 0)
        return;
    b->len += tg_pb_put_varint(b->data + b->len, v);
}

void tg_tp_buf_fixed(struct tg_tp_buf *b, uint64_t v, unsigned n)
{
    if (tg_tp_buf_reserve(b, n) < 0)
        return;
    for (unsigned i = 0; i < n; i++)
        b->data[b->len++] = (uint8_t)(v >> (8 * i));
}

void tg_tp_buf_free(struct tg_tp_buf *b)
{
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
    b->oom = 0;
}
