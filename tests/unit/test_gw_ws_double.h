/* test_gw_ws_double.h: a stand-in for the gateway core (gw.h) for the WebSocket tests.
 *
 * It implements tg_gw_accept and the thread-safe tg_gw_* functions the
 * WebSocket front end calls, with a tiny scriptable peer behind each
 * accepted connection, and runs its own libevent loop on a thread (the
 * "gateway thread"), as tracegated does.
 *
 * Each accepted connection echoes frames back, unless a frame starting with
 * '!' says otherwise:
 *   "!sink"              count and hash frames (FNV-1a of bodies), no echo
 *   "!pause:MS"          stop reading for MS milliseconds
 *   "!pause"             stop reading until tdbl_resume_all()
 *   "!source:N:SIZE"     send N frames of SIZE bytes (byte i of the stream
 *                        is (i * 7 + 3) & 0xff), honouring backpressure
 *   "!stats"             reply "frames=F bytes=B hash=H" (sink counters)
 *   "!close"             close after flushing
 *
 * Tokens: "good-token" → recorder ("alice"); any token of 100+ 'L's →
 * observer ("long"); "producer-token" → producer ("prod"). Origins:
 * https://ui.perfetto.dev. Role defaults (tg_gw_role_defaults): admin for
 * local clients, recorder for certificates, until tdbl_set_role_defaults. */
#ifndef TEST_GW_WS_DOUBLE_H
#define TEST_GW_WS_DOUBLE_H

#include <stddef.h>
#include <stdint.h>

#include "gw.h"

struct event_base;

/* Starts the gateway thread and its event_base. */
struct event_base *tdbl_start(void);
void tdbl_stop(void);

void tdbl_set_healthy(int healthy);
/* Resumes reading on every connection paused by "!pause" (thread-safe). */
void tdbl_resume_all(void);
/* What tg_gw_role_defaults answers from now on (a stand-in for SIGHUP). */
void tdbl_set_role_defaults(unsigned local_roles, unsigned cert_roles);
/* How often tg_gw_count_rejected / tg_gw_count_auth_failure saw reason. */
int tdbl_reason_count(const char *reason);
/* Accepted connections so far, and their infos. */
int tdbl_accepted(void);
int tdbl_info(int i, struct tg_gw_client_info *out);
/* Connections closed on the gateway side so far. */
int tdbl_closed(void);
int tdbl_auth_failures(void);
int tdbl_rejected(void);
/* Accepted conns that reported themselves as UNIX (fd passing on): must be 0. */
int tdbl_unix_conns(void);
/* Reason of the last close seen on the gateway side. */
void tdbl_last_close_reason(char *buf, size_t len);

/* FNV-1a over a buffer, continuing from h (start with TDBL_FNV_INIT). */
#define TDBL_FNV_INIT 1469598103934665603ull
uint64_t tdbl_fnv(uint64_t h, const void *p, size_t n);

/* Waits (polling) until fn() >= want; ms, scaled by tg_test_ms, is only the safety net.
 * Returns 1 if reached. */
int tdbl_wait_count(int (*fn)(void), int want, int ms);

#endif
