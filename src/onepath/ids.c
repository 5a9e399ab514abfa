/* ids.c: per-thread xoshiro256** generator for OnePath trace and span ids. Seeded once per
 * thread from getrandom(2) (falling back to clocks and addresses); a fork bumps a generation so
 * parent and child never hand out the same ids. */
#include "onepath/ids.h"

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

struct rng {
    uint64_t s[4];
    unsigned gen; /* fork generation the state was seeded in; 0 = never seeded */
};

static _Thread_local struct rng t_rng;
static atomic_uint g_fork_gen = 1;
static pthread_once_t g_atfork_once = PTHREAD_ONCE_INIT;

static void after_fork_child(void) { atomic_fetch_add(&g_fork_gen, 1); }

static void register_atfork(void) { pthread_atfork(NULL, NULL, after_fork_child); }

static uint64_t splitmix(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static void seed(struct rng *r, unsigned gen)
{
    pthread_once(&g_atfork_once, register_atfork);
    uint64_t s[4] = {0, 0, 0, 0};
    ssize_t got = getrandom(s, sizeof s, GRND_NONBLOCK);
    if (got != (ssize_t)sizeof s) {
        struct timespec a, b;
        clock_gettime(CLOCK_REALTIME, &a);
        clock_gettime(CLOCK_MONOTONIC, &b);
        uint64_t x = (uint64_t)a.tv_nsec ^ ((uint64_t)a.tv_sec << 20) ^ (uint64_t)b.tv_nsec ^
                     ((uint64_t)getpid() << 32) ^ (uint64_t)(uintptr_t)r;
        for (int i = 0; i < 4; i++)
            s[i] ^= splitmix(&x);
    }
    if ((s[0] | s[1] | s[2] | s[3]) == 0)
        s[0] = 0x6f6e65706174686full; /* xoshiro must not start from all zero */
    memcpy(r->s, s, sizeof s);
    r->gen = gen;
}

static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t tg_op_rand64(void)
{
    struct rng *r = &t_rng;
    unsigned gen = atomic_load_explicit(&g_fork_gen, memory_order_relaxed);
    if (r->gen != gen)
        seed(r, gen);
    uint64_t *s = r->s;
    uint64_t out = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return out;
}

static void put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (56 - 8 * i));
}

void tg_op_new_trace_id(uint8_t id[16])
{
    uint64_t hi, lo;
    do {
        hi = tg_op_rand64();
        lo = tg_op_rand64();
    } while ((hi | lo) == 0);
    put64(id, hi);
    put64(id + 8, lo);
}

void tg_op_new_span_id(uint8_t id[8])
{
    uint64_t v;
    do
        v = tg_op_rand64();
    while (v == 0);
    put64(id, v);
}
