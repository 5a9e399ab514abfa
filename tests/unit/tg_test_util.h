/* tg_test_util.h: helpers shared by the cmocka unit tests (and the fuzz regression runner).
 *
 * - finding ../shared (getenv("TG_SHARED_DIR"), else the compile-time TG_SHARED_DIR);
 * - loading the interop recordings (records: u8 dir, u8 nfds, u32 LE len, bytes) and
 *   reassembling each direction's byte stream;
 * - a deterministic PRNG, a free TCP port, a "run the loop until" helper, and
 *   capturing stderr (log lines) for a while;
 * - safety-net deadlines scaled by TG_TEST_TIMEOUT_SCALE (tg_test_ms).
 *
 * Use it by adding tests/unit/tg_test_util.c to a test's _SOURCES and including
 * "tg_test_util.h" (the directory of the including file is searched first).
 * Nothing here calls cmocka: functions return errors and tests assert on them.
 * Not thread-safe (tests are single-threaded). */
#ifndef TG_TEST_UTIL_H
#define TG_TEST_UTIL_H

#include <stddef.h>
#include <stdint.h>

struct event_base;

/* Directory of ../shared, or NULL when it does not exist. */
const char *tg_test_shared_dir(void);
/* $shared/interop/recordings, or NULL when absent. */
const char *tg_test_recordings_dir(void);

/* A fresh directory ($TMPDIR or /tmp, named after tag) holding the dev PKI that
 * certs/make-dev-pki.sh makes; its path is written to dir (cap bytes). 0, or -1 if it could not
 * be made. tg_test_remove_pki deletes the directory. */
int tg_test_make_pki(char *dir, size_t cap, const char *tag);
int tg_test_remove_pki(const char *dir);

/* Reads a whole file into a malloc'ed buffer (NUL-terminated, len excludes it).
 * Returns 0 or -1. */
int tg_test_read_file(const char *path, uint8_t **data, size_t *len);

/* Sorted list of paths in dir whose name ends with suffix (e.g. ".bin").
 * Returns the count; *paths is a malloc'ed array of malloc'ed strings (free
 * with tg_test_free_list). 0 with *paths NULL when the directory is absent. */
size_t tg_test_list_dir(const char *dir, const char *suffix, char ***paths);
void tg_test_free_list(char **paths, size_t n);

enum { TG_REC_C2S = 0, TG_REC_S2C = 1, TG_REC_SMB = 2 };

struct tg_rec_record {
    uint8_t dir, nfds;
    const uint8_t *data; /* points into tg_recording.raw */
    size_t len;
};

struct tg_recording {
    char path[512];
    char name[128]; /* file name without directory and ".bin" */
    uint8_t *raw;
    size_t raw_len;
    struct tg_rec_record *recs;
    size_t n_recs;
    /* dir 0 and dir 1 bytes, concatenated in record order (dir 2 skipped) */
    uint8_t *stream[2];
    size_t stream_len[2];
};

/* Parses a recording. Returns 0, or -1 if the file is unreadable or a record
 * is truncated or has a dir other than 0..2. */
int tg_recording_load(const char *path, struct tg_recording *rec);
void tg_recording_free(struct tg_recording *rec);

/* splitmix64: deterministic for a given seed. */
uint64_t tg_test_rand(uint64_t *state);
/* Uniform-ish in [lo, hi]. */
size_t tg_test_rand_range(uint64_t *state, size_t lo, size_t hi);

/* A TCP port on 127.0.0.1 that was free a moment ago (0 on failure). */
int tg_test_free_tcp_port(void);

/* Safety nets. A test waits for the event it needs; its deadline only stops a test that would
 * otherwise hang, so it must be long enough never to decide the outcome on a loaded machine.
 * tg_test_timeout_scale() is $TG_TEST_TIMEOUT_SCALE (a positive number; default
 * TG_TEST_DEFAULT_TIMEOUT_SCALE, enough for a busy 2-core box running sanitizer builds);
 * tg_test_ms(ms) is ms times that scale. Use it for every deadline given to poll(), a wait loop
 * or a product timer that must NOT fire while the test does its work. */
#define TG_TEST_DEFAULT_TIMEOUT_SCALE 4.0
double tg_test_timeout_scale(void);
int tg_test_ms(int ms);

/* For asserting that a daemon waited for a timer of ms (a flush timeout, a trigger timeout, a
 * session's duration) instead of acting at once: whether at least half of ms has passed since t0
 * (milliseconds of CLOCK_MONOTONIC). Half, because libevent runs its timers on
 * CLOCK_MONOTONIC_COARSE (a 4 ms tick on this kernel, and staler while a VM waits for a CPU: a
 * 200 ms timer was seen to fire 187 ms after it was armed), so a test asserts that the wait
 * happened, never its precision. */
uint64_t tg_test_now_ms(void);
int tg_test_waited(uint64_t t0, int ms);

/* Runs base until done(arg) returns non-zero; timeout_ms (scaled by tg_test_ms) is only the
 * safety net. Returns 1 if done, 0 on timeout (done is checked once more after the deadline, so
 * an event that lands together with the deadline still counts).
 * done may be NULL: then it runs for exactly timeout_ms (not scaled), for a test that shows
 * something does NOT happen. Never use a NULL window to wait for something that should happen. */
int tg_test_run_until(struct event_base *base, int (*done)(void *arg), void *arg, int timeout_ms);

/* Number of open file descriptors of this process (for fd-leak checks), -1 on error. */
int tg_test_count_open_fds(void);

/* Lowers this process's soft descriptor limit (RLIMIT_NOFILE) to its lowest free descriptor, so
 * that no thread can make a new one (accept(), open() fail with EMFILE) until
 * tg_test_fds_restore(). Returns 0, or -1 when the limit cannot be read or set. */
int tg_test_fds_exhaust(void);
/* Puts the limit tg_test_fds_exhaust lowered back. 0 or -1. */
int tg_test_fds_restore(void);

/* Sends this process's stderr (fd 2, where tg_log writes) to a temporary
 * file until tg_test_stderr_end(), which restores it, echoes what was
 * captured to the real stderr and returns it (malloc'ed, NUL-terminated;
 * the caller frees). tg_test_stderr_peek() returns what is there so far;
 * tg_test_stderr_wait_for() waits (polling, up to timeout_ms) until needle
 * appears and returns 1, or 0. Returns -1/NULL on errors. */
int tg_test_stderr_begin(void);
char *tg_test_stderr_peek(void);
char *tg_test_stderr_end(void);
int tg_test_stderr_wait_for(const char *needle, int timeout_ms);

/* A WebSocket frame's header up to its mask key (RFC 6455 5.2): b0 (FIN, RSV, opcode) as given,
 * then the payload length in its shortest form with the mask bit when `masked` (the caller
 * appends the key). At most 10 bytes; returns how many. Written independently of the library's
 * tg_ws_frame_header, so the WebSocket tests check it rather than repeat it. */
size_t tg_test_ws_header(uint8_t *out, uint8_t b0, int masked, uint64_t len);

/* FNV-1a 64 of s, low 32 bits, 0 mapped to 1 (Perfetto's machine id), computed
 * independently of the library so tests can check it. */
uint32_t tg_test_fnv1a_machine_id(const char *s);

#endif
