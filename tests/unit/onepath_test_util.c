/* onepath_test_util.c: JSON reading (through tracectl's reader) and small file/env/wait helpers for the OnePath tests. */
#include "onepath_test_util.h"

#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <inttypes.h>
#include <locale.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

/* A parsed value and the arena it lives in: the value comes first, so tj_free finds the arena. */
struct tj_holder {
    struct tc_json v;
    struct tc_json_doc *doc;
};

struct tj *tj_parse(const char *text, size_t len)
{
    char err[160];
    struct tc_json_doc *d = tc_json_parse(text, len, err, sizeof err);
    struct tj_holder *h = d ? malloc(sizeof *h) : NULL;
    if (!h) {
        tc_json_free(d);
        return NULL;
    }
    h->v = *tc_json_root(d);
    h->doc = d;
    return &h->v;
}

void tj_free(struct tj *v)
{
    struct tj_holder *h = (struct tj_holder *)v;
    if (!h)
        return;
    tc_json_free(h->doc);
    free(h);
}

const struct tj *tj_get(const struct tj *v, const char *key) { return tc_json_get(v, key); }

const char *tj_str(const struct tj *v, const char *key) { return tc_json_get_str(v, key); }

int64_t tj_int(const struct tj *v, const char *key, int *ok)
{
    const struct tj *m = tj_get(v, key);
    *ok = m && m->type == TC_JSON_NUM && m->is_int && !(m->is_uint && m->u > INT64_MAX);
    return *ok ? m->i : -1;
}

uint64_t tj_u64(const struct tj *v, const char *key, int *ok)
{
    const struct tj *m = tj_get(v, key);
    *ok = m && m->type == TC_JSON_NUM && m->is_uint;
    return *ok ? m->u : 0;
}

const char *ot_tmpdir(const char *tag)
{
    static char dir[512];
    const char *t = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/tg-onepath-%s-XXXXXX", t && *t ? t : "/tmp", tag);
    return mkdtemp(dir);
}

void ot_rmdir(const char *dir)
{
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *e;
        char p[1024];
        while ((e = readdir(d)) != NULL) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
                continue;
            snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
            unlink(p);
        }
        closedir(d);
    }
    rmdir(dir);
}

long ot_read_lines(const char *path, char ***lines, int *complete)
{
    FILE *f = fopen(path, "rb");
    *lines = NULL;
    if (complete)
        *complete = 1;
    if (!f)
        return -1;
    long n = 0;
    char *line = NULL;
    size_t cap = 0;
    ssize_t got;
    while ((got = getline(&line, &cap, f)) > 0) {
        int nl = line[got - 1] == '\n';
        if (nl)
            line[--got] = 0;
        if (complete)
            *complete = nl;
        char **l = realloc(*lines, (size_t)(n + 1) * sizeof *l);
        if (!l)
            break;
        *lines = l;
        (*lines)[n++] = strdup(line);
    }
    free(line);
    fclose(f);
    return n;
}

void ot_free_lines(char **lines, long n)
{
    for (long i = 0; i < n; i++)
        free(lines[i]);
    free(lines);
}

void ot_clear_env(void)
{
    for (;;) {
        char name[256] = "";
        for (char **e = environ; *e; e++) {
            if (strncmp(*e, "ONEPATH_", 8) == 0) {
                const char *eq = strchr(*e, '=');
                size_t l = eq ? (size_t)(eq - *e) : strlen(*e);
                if (l < sizeof name) {
                    memcpy(name, *e, l);
                    name[l] = 0;
                }
                break;
            }
        }
        if (!name[0])
            return;
        unsetenv(name);
    }
}

uint64_t ot_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

int ot_wait_for(int (*cond)(void *arg), void *arg, int timeout_ms)
{
    uint64_t end = ot_now_ns() + (uint64_t)timeout_ms * 1000000u;
    for (;;) {
        if (cond(arg))
            return 1;
        if (ot_now_ns() > end)
            return 0;
        struct timespec d = {0, 2 * 1000 * 1000};
        nanosleep(&d, NULL);
    }
}

static char g_locale_dir[512];

static int comma_decimal(void)
{
    const struct lconv *lc = localeconv();
    return lc && strcmp(lc->decimal_point, ",") == 0;
}

int ot_comma_locale_begin(void)
{
    static const char *const names[] = {"de_DE.UTF-8", "de_DE.utf8", "fr_FR.UTF-8", "fr_FR.utf8"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (setlocale(LC_NUMERIC, names[i]) && comma_decimal())
            return 1;
    const char *d = ot_tmpdir("locale");
    if (!d)
        return 0;
    snprintf(g_locale_dir, sizeof g_locale_dir, "%s", d);
    char out[600];
    snprintf(out, sizeof out, "%s/de_DE.UTF-8", g_locale_dir);
    char *argv[] = {"localedef", "-i", "de_DE", "-f", "UTF-8", out, NULL};
    pid_t pid;
    int status = -1;
    if (posix_spawnp(&pid, "localedef", NULL, NULL, argv, environ) != 0 || waitpid(pid, &status, 0) != pid)
        return 0;
    setenv("LOCPATH", g_locale_dir, 1);
    if (setlocale(LC_NUMERIC, "de_DE.UTF-8") && comma_decimal())
        return 1;
    ot_comma_locale_end();
    return 0;
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

void ot_comma_locale_end(void)
{
    setlocale(LC_NUMERIC, "C");
    if (g_locale_dir[0]) {
        unsetenv("LOCPATH");
        nftw(g_locale_dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
        g_locale_dir[0] = 0;
    }
}
