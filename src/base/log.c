/* log.c: implementation of tracegate's stderr/JSON/syslog logger (see tracegate/log.h); every line is
 * escaped here so that client-chosen strings in messages cannot forge or break log lines. */
#include "tracegate/log.h"
#include "textproto/utf8.h"

#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <syslog.h>
#include <time.h>
#include <unistd.h>

static atomic_int g_level = TG_LOG_INFO;
static atomic_int g_format = TG_LOG_TEXT;
static atomic_int g_syslog = 0;

static const char *const k_level_names[] = {"debug", "info", "warn", "error"};

void tg_log_set_level(enum tg_log_level level) { atomic_store(&g_level, (int)level); }
enum tg_log_level tg_log_get_level(void) { return (enum tg_log_level)atomic_load(&g_level); }
void tg_log_set_format(enum tg_log_format fmt) { atomic_store(&g_format, (int)fmt); }

int tg_log_level_from_string(const char *s)
{
    for (int i = 0; i < 4; i++)
        if (strcasecmp(s, k_level_names[i]) == 0)
            return i;
    if (strcasecmp(s, "warning") == 0)
        return TG_LOG_WARN;
    return -1;
}

void tg_log_use_syslog(const char *ident)
{
    if (ident) {
        openlog(ident, LOG_PID | LOG_NDELAY, LOG_DAEMON);
        atomic_store(&g_syslog, 1);
    } else {
        atomic_store(&g_syslog, 0);
        closelog();
    }
}

/* Appends s to out[pos..cap) as text that stays one line, is valid UTF-8 and carries nothing a
 * terminal or a log parser acts on. Messages quote client-chosen strings (service and method
 * names, certificate subjects, principals, WebSocket paths, Origins); escaping here means no
 * caller can forget. Escaped: backslash (so escapes are unambiguous), C0 controls and DEL, the C1
 * controls U+0080..U+009F, U+2028/U+2029 (line breaks to some readers), and bytes that are not
 * UTF-8. Text: \n \r \t \\ \xNN \u009b. JSON (json != 0): also '"', with JSON's escapes
 * (\u00NN for code points; a stray byte becomes the text \xNN, which JSON cannot carry raw).
 * Whole characters or escapes only: stops before one that would reach cap. Returns the new
 * length (< cap). */
static size_t escape(char *out, size_t pos, size_t cap, const char *s, int json)
{
    const unsigned char *p = (const unsigned char *)s;
    while (*p) {
        char esc[8];
        const char *w = esc;
        size_t wl, adv = 1;
        unsigned char c = *p;
        if (c == '\\' || (json && c == '"')) {
            esc[0] = '\\';
            esc[1] = (char)c;
            wl = 2;
        } else if (c >= 0x20 && c < 0x7f) {
            esc[0] = (char)c;
            wl = 1;
        } else if (c == '\n' || c == '\r' || c == '\t') {
            esc[0] = '\\';
            esc[1] = c == '\n' ? 'n' : c == '\r' ? 'r' : 't';
            wl = 2;
        } else if (c < 0x80) { /* other C0 controls, DEL */
            wl = (size_t)snprintf(esc, sizeof esc, json ? "\\u%04x" : "\\x%02x", c);
        } else {
            size_t n = tg_tp_utf8_seq_len(p, strnlen((const char *)p, 4));
            if (n == 0) { /* not UTF-8 */
                wl = (size_t)snprintf(esc, sizeof esc, json ? "\\\\x%02x" : "\\x%02x", c);
            } else if (n == 2 && c == 0xc2 && p[1] <= 0x9f) { /* C1 control */
                wl = (size_t)snprintf(esc, sizeof esc, "\\u%04x", p[1]);
                adv = 2;
            } else if (n == 3 && c == 0xe2 && p[1] == 0x80 && (p[2] == 0xa8 || p[2] == 0xa9)) {
                wl = (size_t)snprintf(esc, sizeof esc, "\\u%04x", p[2] == 0xa8 ? 0x2028u : 0x2029u);
                adv = 3;
            } else {
                w = (const char *)p;
                wl = adv = n;
            }
        }
        if (pos + wl >= cap)
            break;
        memcpy(out + pos, w, wl);
        pos += wl;
        p += adv;
    }
    return pos;
}

const char *tg_escape_text(const char *s, char *out, size_t cap)
{
    size_t n = escape(out, 0, cap, s ? s : "", 0);
    out[n] = '\0';
    return out;
}

/* fmt is a printf format passed on from tg_log (clang's -Wformat-nonliteral needs to know) */
__attribute__((format(printf, 3, 0))) void tg_vlog(enum tg_log_level level, const char *component, const char *fmt,
                                                   va_list ap);
void tg_vlog(enum tg_log_level level, const char *component, const char *fmt, va_list ap)
{
    if ((int)level < atomic_load(&g_level))
        return;
    char msg[2048];
    vsnprintf(msg, sizeof msg, fmt, ap);
    if (!component)
        component = "tracegate";

    char line[4096];
    size_t len;
    if (atomic_load(&g_syslog)) {
        static const int prio[] = {LOG_DEBUG, LOG_INFO, LOG_WARNING, LOG_ERR};
        len = escape(line, 0, 128, component, 0);
        line[len++] = ':';
        line[len++] = ' ';
        len = escape(line, len, sizeof line, msg, 0);
        line[len] = '\0';
        syslog(prio[level], "%s", line);
        return;
    }

    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    char when[40];
    size_t n = strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(when + n, sizeof when - n, ".%03ldZ", ts.tv_nsec / 1000000L);

    /* the prefixes are short: room is kept for them and for the line's end */
    if (atomic_load(&g_format) == TG_LOG_JSON) {
        len = (size_t)snprintf(line, sizeof line, "{\"ts\":\"%s\",\"level\":\"%s\",\"component\":\"", when,
                               k_level_names[level]);
        len = escape(line, len, 256, component, 1);
        len += (size_t)snprintf(line + len, sizeof line - len, "\",\"msg\":\"");
        len = escape(line, len, sizeof line - 3, msg, 1);
        memcpy(line + len, "\"}\n", 3);
        len += 3;
    } else {
        len = (size_t)snprintf(line, sizeof line, "%s %-5s ", when, k_level_names[level]);
        len = escape(line, len, 256, component, 0);
        line[len++] = ':';
        line[len++] = ' ';
        len = escape(line, len, sizeof line - 1, msg, 0);
        line[len++] = '\n';
    }
    ssize_t w = write(STDERR_FILENO, line, len);
    (void)w;
}

void tg_log(enum tg_log_level level, const char *component, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    tg_vlog(level, component, fmt, ap);
    va_end(ap);
}
