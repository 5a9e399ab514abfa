/* onepath_test_util.c: strict JSON parser and small file/env/wait helpers for the OnePath tests. */
#include "onepath_test_util.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

struct parser {
    const char *p, *end;
    int depth;
};

static void ws(struct parser *ps)
{
    while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r'))
        ps->p++;
}

static int parse_value(struct parser *ps, struct tj *v);

static int hex4(const char *p, unsigned *out)
{
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p[i];
        v <<= 4;
        if (c >= '0' && c <= '9')
            v |= (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f')
            v |= (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F')
            v |= (unsigned)(c - 'A' + 10);
        else
            return -1;
    }
    *out = v;
    return 0;
}

static size_t put_utf8(char *o, unsigned cp)
{
    if (cp < 0x80) {
        o[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (char)(0xc0 | cp >> 6);
        o[1] = (char)(0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (char)(0xe0 | cp >> 12);
        o[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        o[2] = (char)(0x80 | (cp & 0x3f));
        return 3;
    }
    o[0] = (char)(0xf0 | cp >> 18);
    o[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
    o[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}

/* Length of a valid UTF-8 sequence at p, 0 if invalid. */
static size_t utf8_len(const unsigned char *p, const unsigned char *end)
{
    unsigned c = p[0], cp;
    size_t n;
    if (c < 0x80)
        return 1;
    if (c >= 0xc2 && c <= 0xdf)
        n = 2, cp = c & 0x1f;
    else if (c >= 0xe0 && c <= 0xef)
        n = 3, cp = c & 0x0f;
    else if (c >= 0xf0 && c <= 0xf4)
        n = 4, cp = c & 0x07;
    else
        return 0;
    if ((size_t)(end - p) < n)
        return 0;
    for (size_t i = 1; i < n; i++) {
        if ((p[i] & 0xc0) != 0x80)
            return 0;
        cp = cp << 6 | (p[i] & 0x3f);
    }
    if ((n == 3 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) || (n == 4 && (cp < 0x10000 || cp > 0x10ffff)))
        return 0;
    return n;
}

static int parse_string(struct parser *ps, char **out, size_t *out_len)
{
    if (ps->p >= ps->end || *ps->p != '"')
        return -1;
    ps->p++;
    size_t cap = (size_t)(ps->end - ps->p) + 1;
    char *o = malloc(cap);
    size_t n = 0;
    if (!o)
        return -1;
    while (ps->p < ps->end) {
        unsigned char c = (unsigned char)*ps->p;
        if (c == '"') {
            ps->p++;
            o[n] = 0;
            *out = o;
            if (out_len)
                *out_len = n;
            return 0;
        }
        if (c < 0x20)
            break;
        if (c == '\\') {
            if (ps->end - ps->p < 2)
                break;
            char e = ps->p[1];
            ps->p += 2;
            switch (e) {
            case '"': o[n++] = '"'; break;
            case '\\': o[n++] = '\\'; break;
            case '/': o[n++] = '/'; break;
            case 'b': o[n++] = '\b'; break;
            case 'f': o[n++] = '\f'; break;
            case 'n': o[n++] = '\n'; break;
            case 'r': o[n++] = '\r'; break;
            case 't': o[n++] = '\t'; break;
            case 'u': {
                unsigned cp;
                if (ps->end - ps->p < 4 || hex4(ps->p, &cp))
                    goto bad;
                ps->p += 4;
                if (cp >= 0xd800 && cp <= 0xdbff) {
                    unsigned lo;
                    if (ps->end - ps->p < 6 || ps->p[0] != '\\' || ps->p[1] != 'u' || hex4(ps->p + 2, &lo) ||
                        lo < 0xdc00 || lo > 0xdfff)
                        goto bad;
                    ps->p += 6;
                    cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
                } else if (cp >= 0xdc00 && cp <= 0xdfff) {
                    goto bad;
                }
                n += put_utf8(o + n, cp);
                break;
            }
            default: goto bad;
            }
            continue;
        }
        size_t l = utf8_len((const unsigned char *)ps->p, (const unsigned char *)ps->end);
        if (l == 0)
            break;
        memcpy(o + n, ps->p, l);
        n += l;
        ps->p += l;
    }
bad:
    free(o);
    return -1;
}

static int parse_number(struct parser *ps, struct tj *v)
{
    const char *s = ps->p;
    if (ps->p < ps->end && *ps->p == '-')
        ps->p++;
    if (ps->p >= ps->end)
        return -1;
    if (*ps->p == '0') {
        ps->p++;
    } else if (*ps->p >= '1' && *ps->p <= '9') {
        while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9')
            ps->p++;
    } else {
        return -1;
    }
    if (ps->p < ps->end && *ps->p == '.') {
        ps->p++;
        if (ps->p >= ps->end || *ps->p < '0' || *ps->p > '9')
            return -1;
        while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9')
            ps->p++;
    }
    if (ps->p < ps->end && (*ps->p == 'e' || *ps->p == 'E')) {
        ps->p++;
        if (ps->p < ps->end && (*ps->p == '+' || *ps->p == '-'))
            ps->p++;
        if (ps->p >= ps->end || *ps->p < '0' || *ps->p > '9')
            return -1;
        while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9')
            ps->p++;
    }
    v->type = TJ_NUM;
    v->raw = strndup(s, (size_t)(ps->p - s));
    return v->raw ? 0 : -1;
}

static int lit(struct parser *ps, const char *w)
{
    size_t l = strlen(w);
    if ((size_t)(ps->end - ps->p) < l || memcmp(ps->p, w, l))
        return -1;
    ps->p += l;
    return 0;
}

static int add_item(struct tj *v, char *key)
{
    struct tj *it = realloc(v->items, (v->n + 1) * sizeof *it);
    if (!it)
        return -1;
    v->items = it;
    memset(&v->items[v->n], 0, sizeof *it);
    if (v->type == TJ_OBJ) {
        char **k = realloc(v->keys, (v->n + 1) * sizeof *k);
        if (!k)
            return -1;
        v->keys = k;
        v->keys[v->n] = key;
    }
    v->n++;
    return 0;
}

static int parse_value(struct parser *ps, struct tj *v)
{
    if (++ps->depth > 64)
        return -1;
    ws(ps);
    if (ps->p >= ps->end)
        return -1;
    int rc = -1;
    char c = *ps->p;
    if (c == '{' || c == '[') {
        v->type = c == '{' ? TJ_OBJ : TJ_ARR;
        ps->p++;
        ws(ps);
        char close = c == '{' ? '}' : ']';
        if (ps->p < ps->end && *ps->p == close) {
            ps->p++;
            rc = 0;
        } else {
            for (;;) {
                char *key = NULL;
                if (v->type == TJ_OBJ) {
                    ws(ps);
                    if (parse_string(ps, &key, NULL))
                        break;
                    ws(ps);
                    if (ps->p >= ps->end || *ps->p != ':') {
                        free(key);
                        break;
                    }
                    ps->p++;
                }
                if (add_item(v, key)) {
                    free(key);
                    break;
                }
                if (parse_value(ps, &v->items[v->n - 1]))
                    break;
                ws(ps);
                if (ps->p < ps->end && *ps->p == ',') {
                    ps->p++;
                    continue;
                }
                if (ps->p < ps->end && *ps->p == close) {
                    ps->p++;
                    rc = 0;
                }
                break;
            }
        }
    } else if (c == '"') {
        v->type = TJ_STR;
        rc = parse_string(ps, &v->s, &v->s_len);
    } else if (c == 't') {
        v->type = TJ_BOOL;
        v->b = 1;
        rc = lit(ps, "true");
    } else if (c == 'f') {
        v->type = TJ_BOOL;
        rc = lit(ps, "false");
    } else if (c == 'n') {
        v->type = TJ_NULL;
        rc = lit(ps, "null");
    } else {
        rc = parse_number(ps, v);
    }
    ps->depth--;
    return rc;
}

static void tj_clear(struct tj *v)
{
    for (size_t i = 0; i < v->n; i++) {
        tj_clear(&v->items[i]);
        if (v->keys)
            free(v->keys[i]);
    }
    free(v->items);
    free(v->keys);
    free(v->raw);
    free(v->s);
}

struct tj *tj_parse(const char *text, size_t len)
{
    struct tj *v = calloc(1, sizeof *v);
    if (!v)
        return NULL;
    struct parser ps = {text, text + len, 0};
    if (parse_value(&ps, v) == 0) {
        ws(&ps);
        if (ps.p == ps.end)
            return v;
    }
    tj_clear(v);
    free(v);
    return NULL;
}

void tj_free(struct tj *v)
{
    if (v) {
        tj_clear(v);
        free(v);
    }
}

const struct tj *tj_get(const struct tj *v, const char *key)
{
    if (!v || v->type != TJ_OBJ)
        return NULL;
    for (size_t i = 0; i < v->n; i++)
        if (strcmp(v->keys[i], key) == 0)
            return &v->items[i];
    return NULL;
}

const char *tj_str(const struct tj *v, const char *key)
{
    const struct tj *m = tj_get(v, key);
    return m && m->type == TJ_STR ? m->s : NULL;
}

int64_t tj_int(const struct tj *v, const char *key, int *ok)
{
    const struct tj *m = tj_get(v, key);
    char *end;
    *ok = 0;
    if (!m || m->type != TJ_NUM)
        return -1;
    errno = 0;
    long long x = strtoll(m->raw, &end, 10);
    if (errno || *end)
        return -1;
    *ok = 1;
    return x;
}

uint64_t tj_u64(const struct tj *v, const char *key, int *ok)
{
    const struct tj *m = tj_get(v, key);
    char *end;
    *ok = 0;
    if (!m || m->type != TJ_NUM || m->raw[0] == '-')
        return 0;
    errno = 0;
    unsigned long long x = strtoull(m->raw, &end, 10);
    if (errno || *end)
        return 0;
    *ok = 1;
    return x;
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
