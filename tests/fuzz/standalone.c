/* standalone.c: a main() for libFuzzer targets built without libFuzzer (gcc, `make check`).
 *
 * Usage: fuzz_X_regress [-runs=N] [-seed=S] [-max_len=L] [FILE|DIR ...]
 *
 * Runs LLVMFuzzerTestOneInput over:
 *  - every file given (directories: every regular file inside, sorted), or, with no arguments,
 *    the default seeds: $TG_SRCDIR/tests/fuzz/corpus/<target>/ (if present) and the interop
 *    recordings in $TG_SHARED_DIR/interop/recordings (falling back to the compile-time
 *    TG_SHARED_DIR): each .bin whole, each direction's reassembled byte stream, each SMB
 *    snapshot and each record's payload;
 *  - each seed again behind a few one-byte prefixes (targets that read a selector byte first
 *    then see the real bytes at every setting);
 *  - N (default 20000, or $TG_FUZZ_RUNS) deterministic pseudo-random inputs: pure noise, and
 *    seeds mutated (bit flips, byte sets, inserts, deletes, splices, truncation).
 * <target> is this program's name without a trailing "_regress". Crashes abort the run (and ASan
 * reports them); a clean run prints a one-line summary and exits 0.
 * Optional LLVMFuzzerInitialize is honoured as libFuzzer does. */
#include <dirent.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv) __attribute__((weak));

#ifndef TG_SHARED_DIR
#define TG_SHARED_DIR "../shared"
#endif

struct blob {
    uint8_t *p;
    size_t n;
};

static struct blob *g_seeds;
static size_t g_nseeds, g_capseeds;
static size_t g_max_len = 1 << 20;
static unsigned long g_execs;

static void add_seed(const uint8_t *p, size_t n)
{
    if (n > g_max_len)
        n = g_max_len;
    if (g_nseeds == g_capseeds) {
        g_capseeds = g_capseeds ? g_capseeds * 2 : 64;
        g_seeds = realloc(g_seeds, g_capseeds * sizeof *g_seeds);
        if (!g_seeds)
            abort();
    }
    uint8_t *c = malloc(n ? n : 1);
    if (!c)
        abort();
    if (n)
        memcpy(c, p, n);
    g_seeds[g_nseeds].p = c;
    g_seeds[g_nseeds].n = n;
    g_nseeds++;
}

static int read_file(const char *path, uint8_t **out, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return -1;
    size_t cap = 4096, n = 0;
    uint8_t *b = malloc(cap);
    for (;;) {
        if (!b) {
            fclose(f);
            return -1;
        }
        if (n == cap) {
            uint8_t *nb = realloc(b, cap *= 2);
            if (!nb)
                free(b);
            b = nb;
            continue;
        }
        size_t r = fread(b + n, 1, cap - n, f);
        if (r == 0)
            break;
        n += r;
    }
    fclose(f);
    *out = b;
    *len = n;
    return 0;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Calls fn for every regular file in dir (sorted) or for path itself. */
static void each_file(const char *path, void (*fn)(const char *path))
{
    struct stat st;
    if (stat(path, &st) != 0) {
        fprintf(stderr, "standalone: cannot read %s\n", path);
        exit(2);
    }
    if (!S_ISDIR(st.st_mode)) {
        fn(path);
        return;
    }
    DIR *d = opendir(path);
    if (!d)
        return;
    char **names = NULL;
    size_t n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        names = realloc(names, (n + 1) * sizeof *names);
        size_t l = strlen(path) + strlen(e->d_name) + 2;
        names[n] = malloc(l);
        snprintf(names[n], l, "%s/%s", path, e->d_name);
        n++;
    }
    closedir(d);
    if (n)
        qsort(names, n, sizeof *names, cmp_str);
    for (size_t i = 0; i < n; i++) {
        if (stat(names[i], &st) == 0 && S_ISREG(st.st_mode))
            fn(names[i]);
        free(names[i]);
    }
    free(names);
}

static void seed_plain_file(const char *path)
{
    uint8_t *b;
    size_t n;
    if (read_file(path, &b, &n) == 0) {
        add_seed(b, n);
        free(b);
    }
}

/* An interop recording: records of u8 dir, u8 nfds, u32 LE len, bytes. */
static void seed_recording(const char *path)
{
    size_t pl = strlen(path);
    if (pl < 4 || strcmp(path + pl - 4, ".bin") != 0)
        return;
    uint8_t *b;
    size_t n;
    if (read_file(path, &b, &n) != 0)
        return;
    add_seed(b, n);
    struct blob dirs[2] = {{malloc(n + 1), 0}, {malloc(n + 1), 0}};
    if (!dirs[0].p || !dirs[1].p)
        abort();
    size_t off = 0;
    while (n - off >= 6) {
        uint8_t dir = b[off];
        size_t len = (size_t)b[off + 2] | (size_t)b[off + 3] << 8 | (size_t)b[off + 4] << 16 | (size_t)b[off + 5] << 24;
        off += 6;
        if (len > n - off)
            break;
        if (dir < 2) {
            memcpy(dirs[dir].p + dirs[dir].n, b + off, len);
            dirs[dir].n += len;
        }
        add_seed(b + off, len); /* one read() worth of bytes, or one SMB snapshot */
        off += len;
    }
    add_seed(dirs[0].p, dirs[0].n);
    add_seed(dirs[1].p, dirs[1].n);
    free(dirs[0].p);
    free(dirs[1].p);
    free(b);
}

static void run_one(const uint8_t *p, size_t n)
{
    /* a private copy, so reads past the end are caught by ASan */
    uint8_t *c = malloc(n ? n : 1);
    if (!c)
        abort();
    if (n)
        memcpy(c, p, n);
    LLVMFuzzerTestOneInput(c, n);
    free(c);
    g_execs++;
}

static uint64_t rnd(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* A mutated copy of a seed (or pure noise when there are no seeds). */
static size_t mutate(uint64_t *s, uint8_t *out, size_t cap)
{
    size_t n;
    if (g_nseeds == 0 || rnd(s) % 8 == 0) {
        n = (size_t)(rnd(s) % 4096);
        for (size_t i = 0; i < n; i++)
            out[i] = (uint8_t)rnd(s);
        return n;
    }
    const struct blob *sd = &g_seeds[rnd(s) % g_nseeds];
    n = sd->n < cap ? sd->n : cap;
    /* big seeds: mutate a window so each run stays fast */
    size_t start = 0;
    if (n > 65536) {
        start = (size_t)(rnd(s) % (n - 65536));
        n = 65536;
    }
    memcpy(out, sd->p + start, n);
    int k = 1 + (int)(rnd(s) % 8);
    for (int m = 0; m < k; m++) {
        switch (rnd(s) % 7) {
        case 0: /* flip a bit */
            if (n)
                out[rnd(s) % n] ^= (uint8_t)(1u << (rnd(s) % 8));
            break;
        case 1: /* set an interesting byte */
            if (n) {
                static const uint8_t interesting[] = {0x00, 0x01, 0x7f, 0x80, 0xff, 0x08, 0x0a, 0x12, 0x1a, 0x22};
                out[rnd(s) % n] = interesting[rnd(s) % sizeof interesting];
            }
            break;
        case 2: /* insert bytes */
            if (n < cap) {
                size_t at = n ? (size_t)(rnd(s) % n) : 0, cnt = 1 + (size_t)(rnd(s) % 8);
                if (cnt > cap - n)
                    cnt = cap - n;
                memmove(out + at + cnt, out + at, n - at);
                for (size_t i = 0; i < cnt; i++)
                    out[at + i] = (uint8_t)rnd(s);
                n += cnt;
            }
            break;
        case 3: /* delete bytes */
            if (n) {
                size_t at = (size_t)(rnd(s) % n), cnt = 1 + (size_t)(rnd(s) % 16);
                if (cnt > n - at)
                    cnt = n - at;
                memmove(out + at, out + at + cnt, n - at - cnt);
                n -= cnt;
            }
            break;
        case 4: /* truncate */
            if (n)
                n = (size_t)(rnd(s) % n);
            break;
        case 5: { /* splice in part of another seed */
            const struct blob *o = &g_seeds[rnd(s) % g_nseeds];
            if (o->n && n) {
                size_t from = (size_t)(rnd(s) % o->n), at = (size_t)(rnd(s) % n);
                size_t cnt = 1 + (size_t)(rnd(s) % 256);
                if (cnt > o->n - from)
                    cnt = o->n - from;
                if (cnt > n - at)
                    cnt = n - at;
                memcpy(out + at, o->p + from, cnt);
            }
            break;
        }
        default: /* a new selector byte */
            if (n)
                out[0] = (uint8_t)rnd(s);
            break;
        }
    }
    return n;
}

int main(int argc, char **argv)
{
    if (LLVMFuzzerInitialize)
        LLVMFuzzerInitialize(&argc, &argv);
    const char *env_runs = getenv("TG_FUZZ_RUNS");
    long runs = env_runs ? atol(env_runs) : 20000;
    uint64_t seed = 0x7467; /* "tg" */
    int files = 0;
    char name[256];
    const char *base = strrchr(argv[0], '/');
    snprintf(name, sizeof name, "%s", base ? base + 1 : argv[0]);
    size_t nl = strlen(name);
    if (nl > 8 && strcmp(name + nl - 8, "_regress") == 0)
        name[nl - 8] = 0;

    for (int i = 1; i < argc; i++) {
        if (strncmp(argv[i], "-runs=", 6) == 0)
            runs = atol(argv[i] + 6);
        else if (strncmp(argv[i], "-seed=", 6) == 0)
            seed = strtoull(argv[i] + 6, NULL, 0);
        else if (strncmp(argv[i], "-max_len=", 9) == 0)
            g_max_len = (size_t)atol(argv[i] + 9);
        else if (argv[i][0] == '-')
            fprintf(stderr, "standalone: ignoring libFuzzer option %s\n", argv[i]);
        else {
            each_file(argv[i], seed_plain_file);
            files++;
        }
    }
    if (!files) {
        char path[1024];
        const char *src = getenv("TG_SRCDIR");
        struct stat st;
        if (src) {
            snprintf(path, sizeof path, "%s/tests/fuzz/corpus/%s", src, name);
            if (stat(path, &st) == 0)
                each_file(path, seed_plain_file);
        }
        const char *shared = getenv("TG_SHARED_DIR");
        if (!shared || stat(shared, &st) != 0)
            shared = TG_SHARED_DIR;
        snprintf(path, sizeof path, "%s/interop/recordings", shared);
        if (stat(path, &st) == 0)
            each_file(path, seed_recording);
        else
            fprintf(stderr, "%s: no recordings at %s: random inputs only\n", name, path);
    }

    clock_t t0 = clock();
    size_t nseeds = g_nseeds;
    static const uint8_t prefixes[] = {0x00, 0x01, 0x02, 0x05, 0x07, 0x81, 0xff};
    for (size_t i = 0; i < nseeds; i++) {
        run_one(g_seeds[i].p, g_seeds[i].n);
        if (g_seeds[i].n + 1 > g_max_len)
            continue;
        uint8_t *c = malloc(g_seeds[i].n + 1);
        if (!c)
            abort();
        memcpy(c + 1, g_seeds[i].p, g_seeds[i].n);
        for (size_t k = 0; k < sizeof prefixes; k++) {
            c[0] = prefixes[k];
            run_one(c, g_seeds[i].n + 1);
        }
        free(c);
    }
    size_t cap = 65536 + 4096;
    uint8_t *buf = malloc(cap);
    if (!buf)
        abort();
    uint64_t s = seed;
    for (long r = 0; r < runs; r++) {
        size_t n = mutate(&s, buf, cap);
        run_one(buf, n);
    }
    free(buf);
    for (size_t i = 0; i < g_nseeds; i++)
        free(g_seeds[i].p);
    free(g_seeds);
    printf("%s: %lu inputs (%zu seeds, %ld random) in %.1f s: no crash\n", name, g_execs, nseeds, runs,
           (double)(clock() - t0) / CLOCKS_PER_SEC);
    return 0;
}
