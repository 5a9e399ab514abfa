/* jsonbuf.c: growable buffer and JSON value writers for OnePath's NDJSON and Prometheus text. */
#include "onepath/jsonbuf.h"

#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void tg_op_jb_init(struct tg_op_jb *b) { memset(b, 0, sizeof *b); }

void tg_op_jb_free(struct tg_op_jb *b)
{
    free(b->p);
    memset(b, 0, sizeof *b);
}

void tg_op_jb_reset(struct tg_op_jb *b)
{
    b->len = 0;
    b->failed = 0;
}

int tg_op_jb_failed(const struct tg_op_jb *b) { return b->failed; }

static int reserve(struct tg_op_jb *b, size_t n)
{
    if (b->failed)
        return -1;
    if (n <= b->cap - b->len)
        return 0;
    size_t cap = b->cap ? b->cap : 256;
    while (cap - b->len < n) {
        if (cap > SIZE_MAX / 2) {
            b->failed = 1;
            return -1;
        }
        cap *= 2;
    }
    char *p = realloc(b->p, cap);
    if (!p) {
        b->failed = 1;
        return -1;
    }
    b->p = p;
    b->cap = cap;
    return 0;
}

void tg_op_jb_put(struct tg_op_jb *b, const char *s, size_t n)
{
    if (n == 0 || reserve(b, n))
        return;
    memcpy(b->p + b->len, s, n);
    b->len += n;
}

void tg_op_jb_puts(struct tg_op_jb *b, const char *s) { tg_op_jb_put(b, s, strlen(s)); }

void tg_op_jb_putc(struct tg_op_jb *b, char c)
{
    if (reserve(b, 1))
        return;
    b->p[b->len++] = c;
}

void tg_op_jb_u64(struct tg_op_jb *b, uint64_t v)
{
    char t[24];
    int n = snprintf(t, sizeof t, "%" PRIu64, v);
    tg_op_jb_put(b, t, (size_t)n);
}

void tg_op_jb_i64(struct tg_op_jb *b, int64_t v)
{
    char t[24];
    int n = snprintf(t, sizeof t, "%" PRId64, v);
    tg_op_jb_put(b, t, (size_t)n);
}

static locale_t g_c_locale;
static pthread_once_t g_c_locale_once = PTHREAD_ONCE_INIT;

static void make_c_locale(void) { g_c_locale = newlocale(LC_ALL_MASK, "C", (locale_t)0); }

locale_t tg_op_c_locale(void)
{
    pthread_once(&g_c_locale_once, make_c_locale);
    return g_c_locale;
}

void tg_op_jb_f64(struct tg_op_jb *b, double v)
{
    if (isnan(v)) {
        tg_op_jb_puts(b, "\"NaN\"");
        return;
    }
    if (isinf(v)) {
        tg_op_jb_puts(b, v > 0 ? "\"Infinity\"" : "\"-Infinity\"");
        return;
    }
    char t[40];
    /* %g follows LC_NUMERIC: under a comma-decimal locale the application set it would print
     * "3,25", which is not JSON; this thread formats in "C" for the call */
    locale_t c = tg_op_c_locale(), old = c ? uselocale(c) : (locale_t)0;
    int n = snprintf(t, sizeof t, "%.17g", v);
    if (c)
        uselocale(old);
    /* %g may print "1e+20" (valid JSON) but never "inf"/"nan" here; it prints no leading '+' */
    tg_op_jb_put(b, t, (size_t)n);
}

/* Length of the valid UTF-8 sequence at s (1..4), or 0 if the bytes there are not one. */
static size_t utf8_seq(const unsigned char *s, size_t n)
{
    unsigned char c = s[0];
    size_t len;
    uint32_t cp;
    if (c < 0x80)
        return 1;
    if (c >= 0xc2 && c <= 0xdf) {
        len = 2;
        cp = c & 0x1f;
    } else if (c >= 0xe0 && c <= 0xef) {
        len = 3;
        cp = c & 0x0f;
    } else if (c >= 0xf0 && c <= 0xf4) {
        len = 4;
        cp = c & 0x07;
    } else {
        return 0;
    }
    if (n < len)
        return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        cp = cp << 6 | (s[i] & 0x3f);
    }
    if ((len == 3 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) || (len == 4 && (cp < 0x10000 || cp > 0x10ffff)))
        return 0;
    return len;
}

void tg_op_jb_str(struct tg_op_jb *b, const char *str, size_t n)
{
    const unsigned char *s = (const unsigned char *)str;
    tg_op_jb_putc(b, '"');
    size_t i = 0;
    while (i < n) {
        /* copy a run of bytes that need no escaping in one go */
        size_t j = i;
        while (j < n && s[j] >= 0x20 && s[j] < 0x80 && s[j] != '"' && s[j] != '\\')
            j++;
        tg_op_jb_put(b, (const char *)s + i, j - i);
        i = j;
        if (i >= n)
            break;
        unsigned char c = s[i];
        if (c == '"' || c == '\\') {
            char e[2] = {'\\', (char)c};
            tg_op_jb_put(b, e, 2);
            i++;
        } else if (c < 0x20) {
            char e[8];
            switch (c) {
            case '\n': tg_op_jb_puts(b, "\\n"); break;
            case '\r': tg_op_jb_puts(b, "\\r"); break;
            case '\t': tg_op_jb_puts(b, "\\t"); break;
            default:
                snprintf(e, sizeof e, "\\u%04x", c);
                tg_op_jb_put(b, e, 6);
                break;
            }
            i++;
        } else {
            size_t l = utf8_seq(s + i, n - i);
            if (l == 0) {
                tg_op_jb_puts(b, "\\ufffd");
                i++;
            } else {
                tg_op_jb_put(b, (const char *)s + i, l);
                i += l;
            }
        }
    }
    tg_op_jb_putc(b, '"');
}

void tg_op_jb_cstr(struct tg_op_jb *b, const char *s)
{
    if (!s)
        s = "";
    tg_op_jb_str(b, s, strlen(s));
}

void tg_op_jb_hex(struct tg_op_jb *b, const uint8_t *bytes, size_t n)
{
    static const char digits[] = "0123456789abcdef";
    tg_op_jb_putc(b, '"');
    if (reserve(b, 2 * n) == 0) {
        for (size_t i = 0; i < n; i++) {
            b->p[b->len++] = digits[bytes[i] >> 4];
            b->p[b->len++] = digits[bytes[i] & 15];
        }
    }
    tg_op_jb_putc(b, '"');
}
