/* ws_close_note.h: a WebSocket close code and reason that the libevent side
 * of a socketpair link leaves for the lws side (see ws_link.h).
 *
 * The socketpair carries bytes only, so when the far end of a link gives up
 * for a reason the browser should see (e.g. "ADB server not reachable"), it
 * sets the note first and then closes its socket end; the link reads the
 * note when it sees that EOF and closes the WebSocket with it instead of
 * 1000 "connection closed". Setting happens before the close(2), reading
 * after the EOF, and both take the note's mutex, so the reader sees it.
 *
 * Ownership: reference counted; tg_ws_close_note_new returns one reference,
 * each holder drops its own with tg_ws_close_note_unref.
 * Threading: every function is safe from any thread. */
#ifndef TRACEGATE_NET_WS_CLOSE_NOTE_H
#define TRACEGATE_NET_WS_CLOSE_NOTE_H

#include <stddef.h>

/* A close reason is at most 123 bytes (RFC 6455: 125-byte control payload
 * minus the 2-byte code). */
#define TG_WS_CLOSE_REASON_MAX 123

struct tg_ws_close_note;

struct tg_ws_close_note *tg_ws_close_note_new(void);
void tg_ws_close_note_ref(struct tg_ws_close_note *n);
void tg_ws_close_note_unref(struct tg_ws_close_note *n);

/* Records code (1000-4999) and reason (cut to TG_WS_CLOSE_REASON_MAX bytes,
 * control characters replaced by '?'). The first call wins; later ones are
 * ignored, so the root cause is what the client sees. */
void tg_ws_close_note_set(struct tg_ws_close_note *n, int code, const char *reason);

/* The note's code (0 when none was set) and reason (NUL-terminated, cap
 * bytes at most; cap should be TG_WS_CLOSE_REASON_MAX + 1). */
int tg_ws_close_note_get(struct tg_ws_close_note *n, char *reason, size_t cap);

#endif
