/* num.c: float/double <-> text in the "C" numeric locale whatever setlocale()
 * the host program did, with shortest exact round-trip formatting. */
#include "textproto/num.h"

#include <errno.h>
#include <locale.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static pthread_once_t c_locale_once = PTHREAD_ONCE_INIT;
static locale_t c_locale = (locale_t)0;

static void c_locale_init(void)
{
    c_locale = newlocale(LC_ALL_MASK, "C", (locale_t)0);
}

static locale_t get_c_locale(void)
{
    pthread_once(&c_locale_once, c_locale_init);
    return c_locale;
}

int tg_tp_strtod(const char *s, double *out)
{
    locale_t loc = get_c_locale();
    char *end = NULL;
    errno = 0;
    double d = loc ? strtod_l(s, &end, loc) : strtod(s, &end);
    if (end == s || *end != '\0')
        return -1;
    *out = d; /* ERANGE: +-HUGE_VAL or a denormal/zero, as protobuf does */
    return 0;
}

int tg_tp_strtof(const char *s, float *out)
{
    locale_t loc = get_c_locale();
    char *end = NULL;
    errno = 0;
    float f = loc ? strtof_l(s, &end, loc) : strtof(s, &end);
    if (end == s || *end != '\0')
        return -1;
    *out = f;
    return 0;
}

/* snprintf in the C locale: uselocale() only affects the calling thread. */
static void fmt_c(char *buf, size_t n, int prec, double d)
{
    locale_t loc = get_c_locale();
    locale_t old = loc ? uselocale(loc) : (locale_t)0;
    snprintf(buf, n, "%.*g", prec, d);
    if (loc)
        uselocale(old);
}

static int special(char *buf, size_t n, double d)
{
    if (isnan(d)) {
        snprintf(buf, n, "%s", signbit(d) ? "-nan" : "nan");
        return 1;
    }
    if (isinf(d)) {
        snprintf(buf, n, "%s", d < 0 ? "-inf" : "inf");
        return 1;
    }
    return 0;
}

void tg_tp_fmt_double(char *buf, size_t n, double d)
{
    if (special(buf, n, d))
        return;
    for (int prec = 1; prec <= 17; prec++) {
        double back;
        fmt_c(buf, n, prec, d);
        if (tg_tp_strtod(buf, &back) == 0 && back == d && signbit(back) == signbit(d))
            return;
    }
    fmt_c(buf, n, 17, d);
}

void tg_tp_fmt_float(char *buf, size_t n, float f)
{
    if (special(buf, n, (double)f))
        return;
    for (int prec = 1; prec <= 9; prec++) {
        float back;
        fmt_c(buf, n, prec, (double)f);
        if (tg_tp_strtof(buf, &back) == 0 && back == f && signbit(back) == signbit(f))
            return;
    }
    fmt_c(buf, n, 9, (double)f);
}
