/* json_read.c: recursive-descent JSON parser with an arena (see json_read.h). */
#include "json_read.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct chunk {
    struct chunk *next;
    size_t used, cap;
    _Alignas(16) unsigned char data[];
};

struct tc_json_doc {
    struct chunk *chunks;
    struct tc_json root;
};

struct parser {
    const char *p, *start, *end;
    struct tc_json_doc *doc;
    char *err;
    size_t errlen;
    int failed;
};

static void *arena(struct parser *ps, size_t n)
{
    n = (n + 15) & ~(size_t)15;
    struct chunk *c = ps->doc->chunks;
    if (!c || c->cap - c->used < n) {
        size_t cap = n > 16384 ? n : 16384;
        c = malloc(sizeof *c + cap);
        if (!c)
            return NULL;
        c->cap = cap;
        c->used = 0;
        c->next = ps->doc->chunks;
        ps->doc->chunks = c;
    }
    void *r = c->data + c->used;
    c->used += n;
    return r;
}

static int fail(struct parser *ps, const char *what)
{
    if (!ps->failed)
        snprintf(ps->err, ps->errlen, "%s at byte %zu", what, (size_t)(ps->p - ps->start));
    ps->failed = 1;
    return -1;
}

static void ws(struct parser *ps)
{
    while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r'))
        ps->p++;
}

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

/* Length of a valid UTF-8 sequence at p (non-ASCII lead), 0 if invalid. */
static size_t utf8_len(const unsigned char *p, const unsigned char *end)
{
    unsigned c = p[0];
    size_t n;
    unsigned min;
    if (c >= 0xc2 && c <= 0xdf) {
        n = 2;
        min = 0x80;
    } else if (c >= 0xe0 && c <= 0xef) {
        n = 3;
        min = 0x800;
    } else if (c >= 0xf0 && c <= 0xf4) {
        n = 4;
        min = 0x10000;
    } else {
        return 0;
    }
    if ((size_t)(end - p) < n)
        return 0;
    unsigned cp = c & (0xff >> (n + 1));
    for (size_t i = 1; i < n; i++) {
        if ((p[i] & 0xc0) != 0x80)
            return 0;
        cp = cp << 6 | (p[i] & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    return n;
}

static int parse_string(struct parser *ps, const char **out, size_t *out_len)
{
    ps->p++; /* opening quote */
    const char *q = ps->p;
    size_t raw = 0;
    while (q < ps->end && *q != '"') {
        if (*q == '\\')
            q++;
        q++;
        raw++;
    }
    if (q >= ps->end)
        return fail(ps, "unterminated string");
    /* the decoded form is never longer than the raw bytes */
    char *o = arena(ps, (size_t)(q - ps->p) + 1);
    if (!o)
        return fail(ps, "out of memory");
    size_t n = 0;
    while (*ps->p != '"') {
        unsigned char c = (unsigned char)*ps->p;
        if (c < 0x20)
            return fail(ps, "control character in string");
        if (c == '\\') {
            ps->p++;
            char e = *ps->p++;
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
                unsigned cp, lo;
                if (ps->end - ps->p < 4 || hex4(ps->p, &cp))
                    return fail(ps, "bad \\u escape");
                ps->p += 4;
                if (cp >= 0xd800 && cp <= 0xdbff) {
                    if (ps->end - ps->p < 6 || ps->p[0] != '\\' || ps->p[1] != 'u' || hex4(ps->p + 2, &lo) ||
                        lo < 0xdc00 || lo > 0xdfff)
                        return fail(ps, "lone surrogate in \\u escape");
                    ps->p += 6;
                    cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
                } else if (cp >= 0xdc00 && cp <= 0xdfff) {
                    return fail(ps, "lone surrogate in \\u escape");
                }
                n += put_utf8(o + n, cp);
                break;
            }
            default: ps->p--; return fail(ps, "bad escape");
            }
        } else if (c < 0x80) {
            o[n++] = (char)c;
            ps->p++;
        } else {
            size_t l = utf8_len((const unsigned char *)ps->p, (const unsigned char *)q);
            if (!l)
                return fail(ps, "invalid UTF-8 in string");
            memcpy(o + n, ps->p, l);
            n += l;
            ps->p += l;
        }
    }
    ps->p++; /* closing quote */
    o[n] = 0;
    *out = o;
    *out_len = n;
    (void)raw;
    return 0;
}

static int parse_number(struct parser *ps, struct tc_json *v)
{
    const char *s = ps->p;
    if (ps->p < ps->end && *ps->p == '-')
        ps->p++;
    if (ps->p >= ps->end || *ps->p < '0' || *ps->p > '9')
        return fail(ps, "bad number");
    if (*ps->p == '0')
        ps->p++;
    else
        while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9')
            ps->p++;
    int integral = 1;
    if (ps->p < ps->end && *ps->p == '.') {
        integral = 0;
        ps->p++;
        if (ps->p >= ps->end || *ps->p < '0' || *ps->p > '9')
            return fail(ps, "bad number");
        while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9')
            ps->p++;
    }
    if (ps->p < ps->end && (*ps->p == 'e' || *ps->p == 'E')) {
        integral = 0;
        ps->p++;
        if (ps->p < ps->end && (*ps->p == '+' || *ps->p == '-'))
            ps->p++;
        if (ps->p >= ps->end || *ps->p < '0' || *ps->p > '9')
            return fail(ps, "bad number");
        while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9')
            ps->p++;
    }
    size_t n = (size_t)(ps->p - s);
    char *t = arena(ps, n + 1);
    if (!t)
        return fail(ps, "out of memory");
    memcpy(t, s, n);
    t[n] = 0;
    v->type = TC_JSON_NUM;
    v->s = t;
    v->len = n;
    v->d = strtod(t, NULL);
    if (integral) {
        errno = 0;
        if (t[0] == '-') {
            long long x = strtoll(t, NULL, 10);
            if (!errno) {
                v->is_int = 1;
                v->i = x;
            }
        } else {
            unsigned long long x = strtoull(t, NULL, 10);
            if (!errno) {
                v->is_uint = 1;
                v->u = x;
                v->is_int = 1;
                v->i = x > INT64_MAX ? INT64_MAX : (int64_t)x;
            }
        }
    }
    return 0;
}

static int parse_value(struct parser *ps, struct tc_json *v, int depth);

/* Members are collected in a temporary growable array, then copied into the arena. */
static int parse_container(struct parser *ps, struct tc_json *v, int depth, int obj)
{
    if (depth >= TC_JSON_MAX_DEPTH)
        return fail(ps, "nesting too deep");
    ps->p++;
    size_t n = 0, cap = 0;
    struct tc_json *items = NULL;
    const char **keys = NULL;
    int rc = -1;
    ws(ps);
    if (ps->p < ps->end && *ps->p == (obj ? '}' : ']')) {
        ps->p++;
        rc = 0;
        goto done;
    }
    for (;;) {
        if (n == cap) {
            cap = cap ? cap * 2 : 8;
            struct tc_json *ni = realloc(items, cap * sizeof *ni);
            if (!ni)
                goto oom;
            items = ni;
            if (obj) {
                const char **nk = realloc(keys, cap * sizeof *nk);
                if (!nk)
                    goto oom;
                keys = nk;
            }
        }
        ws(ps);
        if (obj) {
            size_t kl;
            if (ps->p >= ps->end || *ps->p != '"') {
                fail(ps, "expected a key");
                goto done;
            }
            if (parse_string(ps, &keys[n], &kl))
                goto done;
            ws(ps);
            if (ps->p >= ps->end || *ps->p != ':') {
                fail(ps, "expected ':'");
                goto done;
            }
            ps->p++;
        }
        if (parse_value(ps, &items[n], depth + 1))
            goto done;
        n++;
        ws(ps);
        if (ps->p < ps->end && *ps->p == ',') {
            ps->p++;
            continue;
        }
        if (ps->p < ps->end && *ps->p == (obj ? '}' : ']')) {
            ps->p++;
            rc = 0;
            break;
        }
        fail(ps, obj ? "expected ',' or '}'" : "expected ',' or ']'");
        goto done;
    }
done:
    if (rc == 0) {
        v->type = obj ? TC_JSON_OBJ : TC_JSON_ARR;
        v->n = n;
        if (n) {
            v->items = arena(ps, n * sizeof *items);
            if (obj)
                v->keys = arena(ps, n * sizeof *keys);
            if (!v->items || (obj && !v->keys)) {
                rc = fail(ps, "out of memory");
            } else {
                memcpy(v->items, items, n * sizeof *items);
                if (obj)
                    memcpy(v->keys, keys, n * sizeof *keys);
            }
        }
    }
    free(items);
    free(keys);
    return rc;
oom:
    free(items);
    free(keys);
    return fail(ps, "out of memory");
}

static int literal(struct parser *ps, const char *word)
{
    size_t n = strlen(word);
    if ((size_t)(ps->end - ps->p) < n || memcmp(ps->p, word, n) != 0)
        return fail(ps, "unexpected character");
    ps->p += n;
    return 0;
}

static int parse_value(struct parser *ps, struct tc_json *v, int depth)
{
    memset(v, 0, sizeof *v);
    ws(ps);
    if (ps->p >= ps->end)
        return fail(ps, "unexpected end");
    switch (*ps->p) {
    case '{': return parse_container(ps, v, depth, 1);
    case '[': return parse_container(ps, v, depth, 0);
    case '"': v->type = TC_JSON_STR; return parse_string(ps, &v->s, &v->len);
    case 't': v->type = TC_JSON_BOOL; v->b = 1; return literal(ps, "true");
    case 'f': v->type = TC_JSON_BOOL; return literal(ps, "false");
    case 'n': v->type = TC_JSON_NULL; return literal(ps, "null");
    default: return parse_number(ps, v);
    }
}

struct tc_json_doc *tc_json_parse(const char *text, size_t len, char *err, size_t errlen)
{
    struct tc_json_doc *d = calloc(1, sizeof *d);
    if (!d) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    struct parser ps = {text, text, text + len, d, err, errlen, 0};
    if (parse_value(&ps, &d->root, 0) == 0) {
        ws(&ps);
        if (ps.p == ps.end)
            return d;
        fail(&ps, "trailing characters after the value");
    }
    tc_json_free(d);
    return NULL;
}

const struct tc_json *tc_json_root(const struct tc_json_doc *d) { return &d->root; }

void tc_json_free(struct tc_json_doc *d)
{
    if (!d)
        return;
    for (struct chunk *c = d->chunks, *nx; c; c = nx) {
        nx = c->next;
        free(c);
    }
    free(d);
}

const struct tc_json *tc_json_get(const struct tc_json *v, const char *key)
{
    if (!v || v->type != TC_JSON_OBJ)
        return NULL;
    for (size_t i = 0; i < v->n; i++)
        if (strcmp(v->keys[i], key) == 0)
            return &v->items[i];
    return NULL;
}

const char *tc_json_get_str(const struct tc_json *v, const char *key)
{
    const struct tc_json *m = tc_json_get(v, key);
    return m && m->type == TC_JSON_STR ? m->s : NULL;
}
