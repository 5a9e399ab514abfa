/* utf8.h: strict UTF-8 sequence validation (internal to src/textproto). */
#ifndef TG_TEXTPROTO_UTF8_H
#define TG_TEXTPROTO_UTF8_H

#include <stddef.h>
#include <stdint.h>

/* Length (1..4) of the well-formed UTF-8 sequence at s (n bytes available),
 * or 0 if it is malformed: overlong forms, surrogates and code points above
 * U+10FFFF are rejected. */
size_t tg_tp_utf8_seq_len(const uint8_t *s, size_t n);

#endif
