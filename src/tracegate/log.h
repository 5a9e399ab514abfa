/* log.h: leveled, structured logging for libtracegate and its programs.
 *
 * Output goes to stderr (text or one JSON object per line) or to syslog.
 * Every message is escaped by the logger, so each call is exactly one line
 * whatever its arguments hold: control characters (C0, DEL, C1), U+2028/9,
 * backslashes and bytes that are not UTF-8 come out as \n, \x1b, \u009b,
 * \\ ... (JSON: valid JSON escapes; a stray byte as the text \xNN).
 * Callers may pass client-chosen strings (names, paths, certificate
 * subjects) as they are.
 * Thread-safety: every function may be called from any thread; each line is
 * written with a single write(2) so lines from different threads never mix.
 * Never pass secrets (tokens, keys) to these functions. */
#ifndef TRACEGATE_LOG_H
#define TRACEGATE_LOG_H

#include <stdarg.h>
#include <stddef.h>

enum tg_log_level { TG_LOG_DEBUG = 0, TG_LOG_INFO = 1, TG_LOG_WARN = 2, TG_LOG_ERROR = 3 };
enum tg_log_format { TG_LOG_TEXT = 0, TG_LOG_JSON = 1 };

void tg_log_set_level(enum tg_log_level level);
enum tg_log_level tg_log_get_level(void);
/* Parses "debug", "info", "warn", "error"; returns -1 when unknown. */
int tg_log_level_from_string(const char *s);
void tg_log_set_format(enum tg_log_format fmt);
/* ident != NULL switches to syslog(3); NULL switches back to stderr. */
void tg_log_use_syslog(const char *ident);

void tg_log(enum tg_log_level level, const char *component, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void tg_vlog(enum tg_log_level level, const char *component, const char *fmt, va_list ap);

/* s (NULL: "") escaped as the logger escapes its text, into out (cap > 0; cut at a whole
 * character or escape): for printing strings others chose (a producer's name, a server's error)
 * to a terminal. Returns out. Any thread. */
const char *tg_escape_text(const char *s, char *out, size_t cap);

#define tg_debug(comp, ...) do { if (tg_log_get_level() <= TG_LOG_DEBUG) tg_log(TG_LOG_DEBUG, comp, __VA_ARGS__); } while (0)
#define tg_info(comp, ...) tg_log(TG_LOG_INFO, comp, __VA_ARGS__)
#define tg_warn(comp, ...) tg_log(TG_LOG_WARN, comp, __VA_ARGS__)
#define tg_error(comp, ...) tg_log(TG_LOG_ERROR, comp, __VA_ARGS__)

#endif
