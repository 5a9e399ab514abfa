/* errbuf.h: fill a caller's error buffer and return -1, the error convention of libtracegate
 * (functions take `char *err, size_t errlen`). Pure, any thread. */
#ifndef TRACEGATE_ERRBUF_H
#define TRACEGATE_ERRBUF_H

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>

__attribute__((format(printf, 3, 4))) static inline int tg_errf(char *err, size_t errlen, const char *fmt, ...)
{
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return -1;
}

#endif
