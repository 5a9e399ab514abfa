/* lexer.h: tokenizer for the protobuf text format (internal to src/textproto).
 * Tracks 1-based line and byte column of every token; never reads past the
 * end of the input it is given (which need not be NUL-terminated). */
#ifndef TG_TEXTPROTO_LEXER_H
#define TG_TEXTPROTO_LEXER_H

#include <stddef.h>

#include "textproto/buf.h"

enum tg_tp_kind {
    TG_TP_EOF,
    TG_TP_IDENT,  /* [A-Za-z_][A-Za-z0-9_]* */
    TG_TP_INT,    /* decimal, 0x hex or 0 octal digits (octal digits not yet checked) */
    TG_TP_FLOAT,  /* has '.', an exponent or an f/F suffix */
    TG_TP_STRING, /* '...' or "..." (text/len include the quotes; escapes validated) */
    TG_TP_PUNCT,  /* one of { } < > : , ; [ ] - */
};

struct tg_tp_token {
    enum tg_tp_kind kind;
    const char *text;
    size_t len;
    size_t line, col;
};

struct tg_tp_lexer {
    const char *p, *end;
    size_t line, col;
    char *err;
    size_t errlen;
};

void tg_tp_lexer_init(struct tg_tp_lexer *lx, const char *text, size_t len, char *err, size_t errlen);
/* Reads the next token into *t. Returns 0, or -1 with the error written. */
int tg_tp_lex(struct tg_tp_lexer *lx, struct tg_tp_token *t);

/* Appends the decoded contents of a TG_TP_STRING token to out. */
void tg_tp_unescape(const struct tg_tp_token *t, struct tg_tp_buf *out);

/* True if t is the punctuation character c. */
int tg_tp_is(const struct tg_tp_token *t, char c);

/* Writes "LINE:COL: message" into err (if err && errlen). */
void tg_tp_error(char *err, size_t errlen, size_t line, size_t col, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

#endif
