/* tp_query.c: runs SQL queries against a trace in Perfetto's own trace processor, for the tests.
 *
 * Perfetto publishes no trace processor for Debian 12 (no package, nothing on npm or PyPI), but
 * Debian's chromium-shell package ships Chromium's test build of it, libtest_trace_processor.so,
 * the real trace processor of Chromium's Perfetto, behind a small C++ class
 * (base::test::TestTraceProcessorImpl: ParseTrace, ExecuteQuery). This program loads that
 * library with dlopen and calls the class through its exported symbols with the Itanium C++ ABI
 * spelled out in C: a constructor or destructor is a function of `this`; a method that returns a
 * class by value takes the address of the result as a hidden first argument.
 *
 * The few standard-library objects crossing the boundary are LLVM libc++'s (namespace std::__1),
 * whose layouts are public ABI: a vector is three pointers (begin, end, end of capacity); a
 * string is 24 bytes, "long" when bit 0 of its first byte is set (then capacity|1, size, data),
 * else "short" (first byte size << 1, the characters from the second byte). Strings we pass are
 * built by the library's own exported basic_string::__init, so its allocator owns them; the
 * layout is checked at start (a string the library built must read back), and a library that
 * does not match fails loudly instead of guessing.
 *
 * Usage: tp_query LIB TRACE [SQL...]
 *   Parses TRACE (the whole file, then end of file, as trace_processor_shell does), then runs each
 *   SQL statement and prints its rows, one per line, cells separated by a tab, after a line
 *   "# query N: R rows". No SQL: only parses. Exit 0 on success, 1 if the trace does not parse or
 *   a query fails (the error on stderr), 2 on usage or a library that does not fit.
 * Threading: single-threaded program.
 */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tg_test_util.h"

/* libc++ std::string, std::vector (see the top of the file). */
typedef struct {
    unsigned char b[24];
} cxx_string;
typedef struct {
    void *begin, *end, *cap;
} cxx_vector;

/* base::test::QueryResultOrError: vector<vector<string>> result, then string error. */
typedef struct {
    cxx_vector rows;
    cxx_string error;
} tp_result;

/* base::test::TestTraceProcessorImpl: two owning pointers; room to spare. */
typedef struct {
    void *p[8];
} tp_impl;

typedef void (*ctor_fn)(void *self);
typedef void (*parse_fn)(uintptr_t *status, void *self, const cxx_vector *trace);
typedef void (*query_fn)(tp_result *ret, const void *self, const cxx_string *sql);
typedef void (*str_init_fn)(cxx_string *self, const char *s, size_t n);
typedef void (*delete_fn)(void *p);

#define SYM_CTOR "_ZN4base4test22TestTraceProcessorImplC1Ev"
#define SYM_DTOR "_ZN4base4test22TestTraceProcessorImplD1Ev"
#define SYM_PARSE "_ZN4base4test22TestTraceProcessorImpl10ParseTraceERKNSt3__16vectorIcNS2_9allocatorIcEEEE"
#define SYM_QUERY                                                                                                      \
    "_ZNK4base4test22TestTraceProcessorImpl12ExecuteQueryERKNSt3__112basic_stringIcNS2_11char_"                        \
    "traitsIcEENS2_9allocatorIcEEEE"
#define SYM_RESULT_DTOR "_ZN4base4test18QueryResultOrErrorD1Ev"
#define SYM_STR_INIT "_ZNSt3__112basic_stringIcNS_11char_traitsIcEENS_9allocatorIcEEE6__initEPKcm"
#define SYM_DELETE "_ZdlPv"

static struct {
    ctor_fn ctor, dtor, result_dtor;
    parse_fn parse;
    query_fn query;
    str_init_fn str_init;
    delete_fn del;
} tp;

static int str_is_long(const cxx_string *s)
{
    return s->b[0] & 1;
}

static size_t str_size(const cxx_string *s)
{
    if (!str_is_long(s))
        return s->b[0] >> 1;
    size_t n;
    memcpy(&n, s->b + 8, sizeof n);
    return n;
}

static const char *str_data(const cxx_string *s)
{
    if (!str_is_long(s))
        return (const char *)s->b + 1;
    const char *p;
    memcpy(&p, s->b + 16, sizeof p);
    return p;
}

/* Builds S in the library's allocator; str_free releases it. */
static void str_make(cxx_string *out, const char *s, size_t n)
{
    memset(out, 0, sizeof *out);
    tp.str_init(out, s, n);
}

static void str_free(cxx_string *s)
{
    if (str_is_long(s))
        tp.del((void *)str_data(s));
    memset(s, 0, sizeof *s);
}

/* A short and a long string built by the library must read back as written. */
static int layout_ok(void)
{
    static const char shorty[] = "flow";
    char longy[100];
    memset(longy, 'x', sizeof longy);
    cxx_string a, b;
    str_make(&a, shorty, 4);
    str_make(&b, longy, sizeof longy);
    int ok = !str_is_long(&a) && str_size(&a) == 4 && memcmp(str_data(&a), shorty, 4) == 0 && str_is_long(&b) &&
             str_size(&b) == sizeof longy && memcmp(str_data(&b), longy, sizeof longy) == 0;
    str_free(&a);
    str_free(&b);
    return ok;
}

static int load(const char *lib)
{
    void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, "tp_query: cannot load %s: %s\n", lib, dlerror());
        return -1;
    }
    struct {
        const char *name;
        void **slot;
    } syms[] = {
        {SYM_CTOR, (void **)&tp.ctor},
        {SYM_DTOR, (void **)&tp.dtor},
        {SYM_PARSE, (void **)&tp.parse},
        {SYM_QUERY, (void **)&tp.query},
        {SYM_RESULT_DTOR, (void **)&tp.result_dtor},
        {SYM_STR_INIT, (void **)&tp.str_init},
        {SYM_DELETE, (void **)&tp.del},
    };
    for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++) {
        /* POSIX: a function pointer converts through void * (dlsym's contract). operator delete
         * is looked up as the library's own calls to operator new resolve: the program's first (a
         * sanitizer's), else the library's. */
        void *f = NULL;
        if (syms[i].slot == (void **)&tp.del)
            f = dlsym(RTLD_DEFAULT, syms[i].name);
        if (!f)
            f = dlsym(h, syms[i].name);
        if (!f) {
            fprintf(stderr, "tp_query: %s has no %s: not the trace processor this program knows\n", lib, syms[i].name);
            return -1;
        }
        memcpy(syms[i].slot, &f, sizeof f);
    }
    if (!layout_ok()) {
        fprintf(stderr, "tp_query: %s's std::string is not libc++'s stable layout\n", lib);
        return -1;
    }
    return 0;
}

/* Prints the rows of one query; 0, or -1 with the error printed. */
static int run_query(const tp_impl *impl, int index, const char *sql)
{
    cxx_string q;
    str_make(&q, sql, strlen(sql));
    tp_result r;
    memset(&r, 0, sizeof r);
    tp.query(&r, impl, &q);
    str_free(&q);
    int rc = 0;
    if (str_size(&r.error) > 0) {
        fprintf(stderr, "tp_query: query %d failed: %.*s\n", index, (int)str_size(&r.error), str_data(&r.error));
        rc = -1;
    } else {
        const cxx_vector *rows = r.rows.begin;
        size_t nrows = (size_t)((const cxx_vector *)r.rows.end - rows);
        printf("# query %d: %zu rows\n", index, nrows);
        for (size_t i = 0; i < nrows; i++) {
            const cxx_string *cell = rows[i].begin;
            size_t ncells = (size_t)((const cxx_string *)rows[i].end - cell);
            for (size_t c = 0; c < ncells; c++)
                printf("%s%.*s", c ? "\t" : "", (int)str_size(&cell[c]), str_data(&cell[c]));
            putchar('\n');
        }
    }
    tp.result_dtor(&r);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: tp_query LIB TRACE [SQL...]\n");
        return 2;
    }
    if (load(argv[1]) != 0)
        return 2;
    size_t len = 0;
    uint8_t *trace = NULL;
    if (tg_test_read_file(argv[2], &trace, &len) != 0) {
        fprintf(stderr, "tp_query: cannot read %s\n", argv[2]);
        return 2;
    }
    tp_impl impl;
    memset(&impl, 0, sizeof impl);
    tp.ctor(&impl);
    cxx_vector bytes = {trace, trace + len, trace + len};
    uintptr_t status = 0;
    tp.parse(&status, &impl, &bytes);
    int rc = 0;
    if (status != 1) { /* absl::Status: 1 is OK; anything else holds the error */
        fprintf(stderr, "tp_query: trace processor could not parse %s (status %#lx)\n", argv[2], (unsigned long)status);
        rc = 1;
    }
    for (int i = 3; rc == 0 && i < argc; i++)
        if (run_query(&impl, i - 2, argv[i]) != 0)
            rc = 1;
    fflush(stdout);
    tp.dtor(&impl);
    free(trace);
    return rc;
}
