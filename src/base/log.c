/* log.c: implementation of tracegate's stderr/JSON/syslog logger (see tracegate/log.h). */
#include "tracegate/log.h"

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

/* Appends s to out as a JSON string body (without quotes); returns new length. */
static size_t json_escape(char *out, size_t pos, size_t cap, const char *s)
{
    for (; *s && pos + 7 < cap; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\') {
            out[pos++] = '\\';
            out[pos++] = (char)ch;
        } else if (ch < 0x20) {
            pos += (size_t)snprintf(out + pos, cap - pos, "\\u%04x", ch);
        } else {
            out[pos++] = (char)ch;
        }
    }
    return pos;
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

    if (atomic_load(&g_syslog)) {
        static const int prio[] = {LOG_DEBUG, LOG_INFO, LOG_WARNING, LOG_ERR};
        syslog(prio[level], "%s: %s", component, msg);
        return;
    }

    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    char when[40];
    size_t n = strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(when + n, sizeof when - n, ".%03ldZ", ts.tv_nsec / 1000000L);

    char line[4096];
    size_t len;
    if (atomic_load(&g_format) == TG_LOG_JSON) {
        len = (size_t)snprintf(line, sizeof line, "{\"ts\":\"%s\",\"level\":\"%s\",\"component\":\"", when,
                               k_level_names[level]);
        len = json_escape(line, len, sizeof line - 16, component);
        len += (size_t)snprintf(line + len, sizeof line - len, "\",\"msg\":\"");
        len = json_escape(line, len, sizeof line - 4, msg);
        len += (size_t)snprintf(line + len, sizeof line - len, "\"}\n");
    } else {
        len = (size_t)snprintf(line, sizeof line, "%s %-5s %s: %s\n", when, k_level_names[level], component, msg);
    }
    if (len >= sizeof line) {
        len = sizeof line - 1;
        line[len - 1] = '\n';
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
