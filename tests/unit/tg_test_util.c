/* tg_test_util.c: shared test helpers: ../shared lookup, recordings, PRNG, ports, scaled safety-net
 * deadlines, loop runner (see tg_test_util.h). */
#include "config.h"

#include "tg_test_util.h"

#include <dirent.h>
#include <errno.h>
#include <event2/event.h>
#include <limits.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef TG_SHARED_DIR
#define TG_SHARED_DIR "../shared"
#endif

static int is_dir(const char *p)
{
    struct stat st;
    return p && *p && stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

const char *tg_test_shared_dir(void)
{
    const char *env = getenv("TG_SHARED_DIR");
    if (is_dir(env))
        return env;
    if (is_dir(TG_SHARED_DIR))
        return TG_SHARED_DIR;
    return NULL;
}

int tg_test_make_pki(char *dir, size_t cap, const char *tag)
{
    const char *tmp = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    if ((size_t)snprintf(dir, cap, "%s/%s-XXXXXX", tmp, tag) >= cap || !mkdtemp(dir))
        return -1;
    const char *src = getenv("TG_SRCDIR");
    char cmd[PATH_MAX * 2 + 64];
    snprintf(cmd, sizeof cmd, "bash '%s/certs/make-dev-pki.sh' '%s' >/dev/null", src ? src : TG_SOURCE_DIR, dir);
    return system(cmd) == 0 ? 0 : -1;
}

int tg_test_remove_pki(const char *dir)
{
    char cmd[PATH_MAX + 16];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : -1;
}

const char *tg_test_recordings_dir(void)
{
    static char buf[1024];
    const char *s = tg_test_shared_dir();
    if (!s)
        return NULL;
    snprintf(buf, sizeof buf, "%s/interop/recordings", s);
    return is_dir(buf) ? buf : NULL;
}

int tg_test_read_file(const char *path, uint8_t **data, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return -1;
    size_t cap = 65536, n = 0;
    uint8_t *buf = malloc(cap + 1);
    while (buf) {
        if (n == cap) {
            uint8_t *nb = realloc(buf, cap * 2 + 1);
            if (!nb) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = nb;
            cap *= 2;
        }
        size_t r = fread(buf + n, 1, cap - n, f);
        if (r == 0)
            break;
        n += r;
    }
    int err = ferror(f);
    fclose(f);
    if (!buf || err) {
        free(buf);
        return -1;
    }
    buf[n] = 0;
    *data = buf;
    *len = n;
    return 0;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

size_t tg_test_list_dir(const char *dir, const char *suffix, char ***paths)
{
    *paths = NULL;
    DIR *d = dir ? opendir(dir) : NULL;
    if (!d)
        return 0;
    size_t n = 0, cap = 0, sl = strlen(suffix);
    char **v = NULL;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        size_t nl = strlen(e->d_name);
        if (e->d_name[0] == '.' || nl < sl || strcmp(e->d_name + nl - sl, suffix) != 0)
            continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 16;
            char **nv = realloc(v, cap * sizeof *nv);
            if (!nv)
                break;
            v = nv;
        }
        size_t pl = strlen(dir) + 1 + nl + 1;
        v[n] = malloc(pl);
        if (!v[n])
            break;
        snprintf(v[n], pl, "%s/%s", dir, e->d_name);
        n++;
    }
    closedir(d);
    if (n)
        qsort(v, n, sizeof *v, cmp_str);
    *paths = v;
    return n;
}

void tg_test_free_list(char **paths, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(paths[i]);
    free(paths);
}

void tg_recording_free(struct tg_recording *rec)
{
    free(rec->raw);
    free(rec->recs);
    free(rec->stream[0]);
    free(rec->stream[1]);
    memset(rec, 0, sizeof *rec);
}

int tg_recording_load(const char *path, struct tg_recording *rec)
{
    memset(rec, 0, sizeof *rec);
    snprintf(rec->path, sizeof rec->path, "%s", path);
    const char *base = strrchr(path, '/');
    snprintf(rec->name, sizeof rec->name, "%s", base ? base + 1 : path);
    char *dot = strrchr(rec->name, '.');
    if (dot)
        *dot = '\0';
    if (tg_test_read_file(path, &rec->raw, &rec->raw_len) != 0)
        return -1;
    /* two passes: count and size, then fill */
    for (int pass = 0; pass < 2; pass++) {
        size_t off = 0, n = 0, sl[2] = {0, 0};
        while (off < rec->raw_len) {
            if (rec->raw_len - off < 6)
                goto bad;
            const uint8_t *h = rec->raw + off;
            uint8_t dir = h[0], nfds = h[1];
            size_t len = (size_t)h[2] | (size_t)h[3] << 8 | (size_t)h[4] << 16 | (size_t)h[5] << 24;
            off += 6;
            if (dir > 2 || rec->raw_len - off < len)
                goto bad;
            if (pass == 1) {
                rec->recs[n] = (struct tg_rec_record){dir, nfds, rec->raw + off, len};
                if (dir < 2 && len)
                    memcpy(rec->stream[dir] + sl[dir], rec->raw + off, len);
            }
            if (dir < 2)
                sl[dir] += len;
            off += len;
            n++;
        }
        if (pass == 0) {
            rec->n_recs = n;
            rec->recs = calloc(n ? n : 1, sizeof *rec->recs);
            rec->stream[0] = malloc(sl[0] ? sl[0] : 1);
            rec->stream[1] = malloc(sl[1] ? sl[1] : 1);
            rec->stream_len[0] = sl[0];
            rec->stream_len[1] = sl[1];
            if (!rec->recs || !rec->stream[0] || !rec->stream[1])
                goto bad;
        }
    }
    return 0;
bad:
    tg_recording_free(rec);
    return -1;
}

uint64_t tg_test_rand(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

size_t tg_test_rand_range(uint64_t *state, size_t lo, size_t hi)
{
    if (hi <= lo)
        return lo;
    return lo + (size_t)(tg_test_rand(state) % (uint64_t)(hi - lo + 1));
}

int tg_test_free_tcp_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return 0;
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t sl = sizeof sa;
    int port = 0;
    if (bind(fd, (struct sockaddr *)&sa, sizeof sa) == 0 && getsockname(fd, (struct sockaddr *)&sa, &sl) == 0)
        port = ntohs(sa.sin_port);
    close(fd);
    return port;
}

static void timeout_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    *(int *)arg = 1;
}

double tg_test_timeout_scale(void)
{
    static double scale;
    if (scale > 0)
        return scale;
    scale = TG_TEST_DEFAULT_TIMEOUT_SCALE;
    const char *env = getenv("TG_TEST_TIMEOUT_SCALE");
    if (env && *env) {
        char *end;
        double v = strtod(env, &end);
        if (*end == '\0' && v > 0 && v <= 1000)
            scale = v;
        else
            fprintf(stderr, "tg_test_util: ignoring TG_TEST_TIMEOUT_SCALE=%s (want a number in (0, 1000])\n", env);
    }
    return scale;
}

int tg_test_ms(int ms)
{
    double v = (double)ms * tg_test_timeout_scale();
    return v >= (double)(INT_MAX / 2) ? INT_MAX / 2 : (int)v;
}

uint64_t tg_test_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

int tg_test_waited(uint64_t t0, int ms)
{
    uint64_t waited = tg_test_now_ms() - t0;
    if (waited >= (uint64_t)ms / 2)
        return 1;
    fprintf(stderr, "waited %llu ms for a %d ms timer: it did not wait\n", (unsigned long long)waited, ms);
    return 0;
}

int tg_test_run_until(struct event_base *base, int (*done)(void *arg), void *arg, int timeout_ms)
{
    int timed_out = 0;
    struct event *t = evtimer_new(base, timeout_cb, &timed_out);
    if (!t)
        return 0;
    int ms = done ? tg_test_ms(timeout_ms) : timeout_ms;
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    evtimer_add(t, &tv);
    int ok = 0;
    for (;;) {
        if (done && done(arg)) {
            ok = 1;
            break;
        }
        if (timed_out) {
            /* events that became ready together with the deadline still count */
            if (done) {
                event_base_loop(base, EVLOOP_NONBLOCK);
                ok = done(arg) != 0;
            }
            break;
        }
        if (event_base_loop(base, EVLOOP_ONCE) < 0)
            break;
    }
    event_free(t);
    return ok;
}

int tg_test_count_open_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    if (!d)
        return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (e->d_name[0] != '.')
            n++;
    closedir(d);
    return n - 1; /* the directory's own fd */
}

static struct rlimit g_fd_limit;

int tg_test_fds_exhaust(void)
{
    if (getrlimit(RLIMIT_NOFILE, &g_fd_limit) != 0)
        return -1;
    int lowest_free = dup(0);
    if (lowest_free < 0)
        return -1;
    close(lowest_free);
    struct rlimit low = g_fd_limit;
    low.rlim_cur = (rlim_t)lowest_free;
    return setrlimit(RLIMIT_NOFILE, &low);
}

int tg_test_fds_restore(void) { return setrlimit(RLIMIT_NOFILE, &g_fd_limit); }

size_t tg_test_ws_header(uint8_t *out, uint8_t b0, int masked, uint64_t len)
{
    size_t h = 0;
    uint8_t mbit = masked ? 0x80 : 0;
    out[h++] = b0;
    if (len < 126) {
        out[h++] = (uint8_t)(mbit | len);
    } else if (len <= 0xffff) {
        out[h++] = mbit | 126;
        out[h++] = (uint8_t)(len >> 8);
        out[h++] = (uint8_t)len;
    } else {
        out[h++] = mbit | 127;
        for (int i = 7; i >= 0; i--)
            out[h++] = (uint8_t)(len >> (8 * i));
    }
    return h;
}

uint32_t tg_test_fnv1a_machine_id(const char *s)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *s; s++) {
        h ^= (uint8_t)*s;
        h *= 0x100000001b3ull;
    }
    uint32_t id = (uint32_t)(h & 0xffffffffu);
    return id ? id : 1;
}

/* ---- stderr capture ---- */

static int g_saved_stderr = -1;
static FILE *g_capture;

int tg_test_stderr_begin(void)
{
    if (g_capture)
        return -1;
    g_capture = tmpfile();
    if (!g_capture)
        return -1;
    fflush(stderr);
    g_saved_stderr = dup(2);
    if (g_saved_stderr < 0 || dup2(fileno(g_capture), 2) < 0) {
        fclose(g_capture);
        g_capture = NULL;
        return -1;
    }
    return 0;
}

char *tg_test_stderr_peek(void)
{
    if (!g_capture)
        return NULL;
    int fd = fileno(g_capture);
    off_t end = lseek(fd, 0, SEEK_END);
    if (end < 0)
        return NULL;
    char *buf = malloc((size_t)end + 1);
    if (!buf)
        return NULL;
    ssize_t n = pread(fd, buf, (size_t)end, 0);
    buf[n > 0 ? n : 0] = '\0';
    return buf;
}

char *tg_test_stderr_end(void)
{
    if (!g_capture)
        return NULL;
    char *text = tg_test_stderr_peek();
    fflush(stderr);
    dup2(g_saved_stderr, 2);
    close(g_saved_stderr);
    g_saved_stderr = -1;
    fclose(g_capture);
    g_capture = NULL;
    if (text && write(2, text, strlen(text)) < 0) {
        /* the captured lines only help a reader; nothing to do */
    }
    return text;
}

int tg_test_stderr_wait_for(const char *needle, int timeout_ms)
{
    for (int waited = 0;; waited += 10) {
        char *t = tg_test_stderr_peek();
        int found = t && strstr(t, needle) != NULL;
        free(t);
        if (found)
            return 1;
        if (waited >= timeout_ms)
            return 0;
        usleep(10000);
    }
}
