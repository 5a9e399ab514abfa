/* lexer.c: protobuf text format tokenizer with line:column tracking and
 * C-style string escape decoding. */
#include "textproto/lexer.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

void tg_tp_error(char *err, size_t errlen, size_t line, size_t col, const char *fmt, ...)
{
    if (!err || errlen == 0)
        return;
    int n = snprintf(err, errlen, "%zu:%zu: ", line, col);
    if (n < 0 || (size_t)n >= errlen)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err + n, errlen - (size_t)n, fmt, ap);
    va_end(ap);
}

void tg_tp_lexer_init(struct tg_tp_lexer *lx, const char *text, size_t len, char *err, size_t errlen)
{
    lx->p = text;
    lx->end = text + len;
    lx->line = 1;
    lx->col = 1;
    lx->err = err;
    lx->errlen = errlen;
}

int tg_tp_is(const struct tg_tp_token *t, char c)
{
    return t->kind == TG_TP_PUNCT && t->text[0] == c;
}

static void bump(struct tg_tp_lexer *lx)
{
    if (*lx->p == '\n') {
        lx->line++;
        lx->col = 1;
    } else {
        lx->col++;
    }
    lx->p++;
}

static int is_alpha(int c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
static int is_digit(int c) { return c >= '0' && c <= '9'; }
static int is_alnum(int c) { return is_alpha(c) || is_digit(c); }
static int is_xdigit(int c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }
static unsigned xval(int c) { return is_digit(c) ? (unsigned)(c - '0') : (unsigned)((c | 0x20) - 'a' + 10); }

static void put_utf8(struct tg_tp_buf *out, uint32_t cp)
{
    char u[4];
    size_t n;
    if (cp < 0x80) {
        u[0] = (char)cp;
        n = 1;
    } else if (cp < 0x800) {
        u[0] = (char)(0xc0 | (cp >> 6));
        u[1] = (char)(0x80 | (cp & 0x3f));
        n = 2;
    } else if (cp < 0x10000) {
        u[0] = (char)(0xe0 | (cp >> 12));
        u[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        u[2] = (char)(0x80 | (cp & 0x3f));
        n = 3;
    } else {
        u[0] = (char)(0xf0 | (cp >> 18));
        u[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
        u[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
        u[3] = (char)(0x80 | (cp & 0x3f));
        n = 4;
    }
    tg_tp_buf_append(out, u, n);
}

/* Reads exactly n hex digits at s[*i]; returns -1 if they are not there. */
static int hexn(const char *s, size_t len, size_t *i, unsigned n, uint32_t *v)
{
    uint32_t r = 0;
    for (unsigned k = 0; k < n; k++) {
        if (*i >= len || !is_xdigit((unsigned char)s[*i]))
            return -1;
        r = (r << 4) | xval((unsigned char)s[(*i)++]);
    }
    *v = r;
    return 0;
}

/* Decodes the body of a string literal (between the quotes). With out == NULL
 * only validates. Returns 0, or -1 with *bad = offset of the bad escape and
 * *why = reason. */
static int decode(const char *s, size_t len, struct tg_tp_buf *out, size_t *bad, const char **why)
{
    size_t i = 0;
    while (i < len) {
        size_t run = i;
        while (i < len && s[i] != '\\')
            i++;
        if (out)
            tg_tp_buf_append(out, s + run, i - run);
        if (i >= len)
            break;
        size_t at = i++;
        *bad = at;
        if (i >= len) { /* cannot happen: the lexer keeps '\\' paired */
            *why = "incomplete escape sequence";
            return -1;
        }
        char c = s[i++];
        uint32_t v = 0;
        char simple = 0;
        switch (c) {
        case 'a': simple = '\a'; break;
        case 'b': simple = '\b'; break;
        case 'f': simple = '\f'; break;
        case 'n': simple = '\n'; break;
        case 'r': simple = '\r'; break;
        case 't': simple = '\t'; break;
        case 'v': simple = '\v'; break;
        case '\\': case '\'': case '"': case '?': simple = c; break;
        case 'x': case 'X':
            if (i >= len || !is_xdigit((unsigned char)s[i])) {
                *why = "\\x escape without hex digits";
                return -1;
            }
            v = xval((unsigned char)s[i++]);
            if (i < len && is_xdigit((unsigned char)s[i]))
                v = (v << 4) | xval((unsigned char)s[i++]);
            if (out)
                tg_tp_buf_putc(out, (char)v);
            continue;
        case 'u': case 'U': {
            if (hexn(s, len, &i, c == 'u' ? 4 : 8, &v) < 0) {
                *why = c == 'u' ? "\\u needs 4 hex digits" : "\\U needs 8 hex digits";
                return -1;
            }
            if (v >= 0xd800 && v <= 0xdbff && i + 1 < len && s[i] == '\\' && s[i + 1] == 'u') {
                size_t j = i + 2;
                uint32_t lo;
                if (hexn(s, len, &j, 4, &lo) == 0 && lo >= 0xdc00 && lo <= 0xdfff) {
                    v = 0x10000 + ((v - 0xd800) << 10) + (lo - 0xdc00);
                    i = j;
                }
            }
            if ((v >= 0xd800 && v <= 0xdfff) || v > 0x10ffff) {
                *why = "invalid unicode code point in escape";
                return -1;
            }
            if (out)
                put_utf8(out, v);
            continue;
        }
        default:
            if (c >= '0' && c <= '7') {
                v = (uint32_t)(c - '0');
                for (int k = 0; k < 2 && i < len && s[i] >= '0' && s[i] <= '7'; k++)
                    v = v * 8 + (uint32_t)(s[i++] - '0');
                if (v > 0xff) {
                    *why = "octal escape out of range";
                    return -1;
                }
                if (out)
                    tg_tp_buf_putc(out, (char)v);
                continue;
            }
            *why = "invalid escape sequence";
            return -1;
        }
        if (out)
            tg_tp_buf_putc(out, simple);
    }
    return 0;
}

void tg_tp_unescape(const struct tg_tp_token *t, struct tg_tp_buf *out)
{
    size_t bad;
    const char *why;
    (void)decode(t->text + 1, t->len - 2, out, &bad, &why);
}

static int lex_string(struct tg_tp_lexer *lx, struct tg_tp_token *t)
{
    char q = *lx->p;
    bump(lx);
    for (;;) {
        if (lx->p >= lx->end || *lx->p == '\n') {
            tg_tp_error(lx->err, lx->errlen, t->line, t->col, "unterminated string");
            return -1;
        }
        char c = *lx->p;
        bump(lx);
        if (c == q)
            break;
        if (c == '\\') {
            if (lx->p >= lx->end || *lx->p == '\n') {
                tg_tp_error(lx->err, lx->errlen, t->line, t->col, "unterminated string");
                return -1;
            }
            bump(lx);
        }
    }
    t->kind = TG_TP_STRING;
    t->len = (size_t)(lx->p - t->text);
    size_t bad;
    const char *why;
    if (decode(t->text + 1, t->len - 2, NULL, &bad, &why) < 0) {
        /* strings never span lines, so the column is start + offset */
        tg_tp_error(lx->err, lx->errlen, t->line, t->col + 1 + bad, "%s", why);
        return -1;
    }
    return 0;
}

static int lex_number(struct tg_tp_lexer *lx, struct tg_tp_token *t)
{
    const char *s = lx->p;
    int hex = (lx->end - s >= 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X'));
    while (lx->p < lx->end) {
        char c = *lx->p;
        if (is_alnum((unsigned char)c) || c == '.') {
            bump(lx);
        } else if ((c == '+' || c == '-') && !hex && (lx->p[-1] == 'e' || lx->p[-1] == 'E')) {
            bump(lx);
        } else {
            break;
        }
    }
    t->len = (size_t)(lx->p - s);
    const char *bad_kind = NULL;
    if (hex) {
        if (t->len == 2)
            bad_kind = "hex";
        for (size_t i = 2; i < t->len && !bad_kind; i++)
            if (!is_xdigit((unsigned char)s[i]))
                bad_kind = "hex";
        t->kind = TG_TP_INT;
    } else {
        int digits = 0, dot = 0, exp = 0, expdigits = 0, suffix = 0;
        for (size_t i = 0; i < t->len && !bad_kind; i++) {
            char c = s[i];
            if (suffix) {
                bad_kind = "";
            } else if (is_digit((unsigned char)c)) {
                if (exp)
                    expdigits++;
                else
                    digits++;
            } else if (c == '.' && !dot && !exp) {
                dot = 1;
            } else if ((c == 'e' || c == 'E') && !exp && digits) {
                exp = 1;
                if (i + 1 < t->len && (s[i + 1] == '+' || s[i + 1] == '-'))
                    i++;
            } else if ((c == 'f' || c == 'F') && digits && (!exp || expdigits)) {
                suffix = 1;
            } else {
                bad_kind = "";
            }
        }
        if (!bad_kind && (!digits || (exp && !expdigits)))
            bad_kind = "";
        t->kind = (dot || exp || suffix) ? TG_TP_FLOAT : TG_TP_INT;
    }
    if (bad_kind) {
        tg_tp_error(lx->err, lx->errlen, t->line, t->col, "invalid %snumber '%.*s'",
                    *bad_kind ? "hex " : "", (int)(t->len > 40 ? 40 : t->len), s);
        return -1;
    }
    return 0;
}

int tg_tp_lex(struct tg_tp_lexer *lx, struct tg_tp_token *t)
{
    /* skip whitespace and # comments */
    while (lx->p < lx->end) {
        char c = *lx->p;
        if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v') {
            bump(lx);
        } else if (c == '#') {
            while (lx->p < lx->end && *lx->p != '\n')
                bump(lx);
        } else {
            break;
        }
    }
    t->text = lx->p;
    t->line = lx->line;
    t->col = lx->col;
    t->len = 0;
    if (lx->p >= lx->end) {
        t->kind = TG_TP_EOF;
        return 0;
    }
    unsigned char c = (unsigned char)*lx->p;
    if (is_alpha(c)) {
        while (lx->p < lx->end && is_alnum((unsigned char)*lx->p))
            bump(lx);
        t->kind = TG_TP_IDENT;
        t->len = (size_t)(lx->p - t->text);
        return 0;
    }
    if (is_digit(c) || (c == '.' && lx->end - lx->p >= 2 && is_digit((unsigned char)lx->p[1])))
        return lex_number(lx, t);
    if (c == '"' || c == '\'')
        return lex_string(lx, t);
    if (c != '\0' && strchr("{}<>:,;[]-", c)) {
        bump(lx);
        t->kind = TG_TP_PUNCT;
        t->len = 1;
        return 0;
    }
    if (c >= 0x20 && c < 0x7f)
        tg_tp_error(lx->err, lx->errlen, t->line, t->col, "unexpected character '%c'", c);
    else
        tg_tp_error(lx->err, lx->errlen, t->line, t->col, "unexpected byte 0x%02x", c);
    return -1;
}
