/* gw_limits.c: limit defaults and validation, size/duration parsing, the token bucket, the
 * slow-client policy and per-source connection counts (see gw_limits.h). */
#include "gw_limits.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>

#include "tracegate/addr.h"
#include "tracegate/clock.h"
#include "tracegate/frame.h"

uint64_t tg_gw_now_us(void) { return tg_mono_us(); }

void tg_gw_limits_default(struct tg_gw_limits *l)
{
    memset(l, 0, sizeof *l);
    l->max_frame = TG_FRAME_MAX_DEFAULT;
    l->out_high = 1u << 20;
    l->out_low = 256u << 10;
    l->out_soft = 1u << 20;
    l->soft_grace_ms = 30000;
    l->out_hard = 8u << 20;
    l->rate = 10000;
    l->burst = 20000;
    l->max_conns = 1000;
    l->max_conns_per_source = 64;
    l->source_prefix6 = 64;
    l->handshake_timeout_ms = 10000;
    l->idle_timeout_ms = 0;
    l->drain_timeout_ms = 30000;
}

int tg_gw_limits_validate(const struct tg_gw_limits *l, char *err, size_t errlen)
{
    if (l->max_frame < 1024 || l->max_frame > TG_FRAME_MAX_DEFAULT) {
        snprintf(err, errlen, "max-frame must be between 1k and 128k (Perfetto's limit), not %zu", l->max_frame);
        return -1;
    }
    if (l->out_high < (16u << 10)) {
        snprintf(err, errlen, "out-high (%zu) must be at least 16k", l->out_high);
        return -1;
    }
    if (l->out_low >= l->out_high) {
        snprintf(err, errlen, "out-low (%zu) must be below out-high (%zu)", l->out_low, l->out_high);
        return -1;
    }
    if (l->out_soft > l->out_hard) {
        snprintf(err, errlen, "out-soft-limit (%zu) must not exceed out-hard-limit (%zu)", l->out_soft, l->out_hard);
        return -1;
    }
    /* a paused side still delivers the frame in hand: up to one maximal frame above out-high */
    if (l->out_hard < l->out_high + TG_FRAME_MAX_DEFAULT) {
        snprintf(err, errlen, "out-hard-limit (%zu) must be at least out-high + 128k (%zu)", l->out_hard,
                 l->out_high + (size_t)TG_FRAME_MAX_DEFAULT);
        return -1;
    }
    if (l->rate < 0 || l->rate > 1e9) {
        snprintf(err, errlen, "rate must be between 0 (unlimited) and 1e9 messages/s");
        return -1;
    }
    return 0;
}

int tg_gw_parse_size(const char *s, size_t *out)
{
    if (!s || !isdigit((unsigned char)*s))
        return -1;
    errno = 0;
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno)
        return -1;
    unsigned long long mul = 1;
    if (*end) {
        switch (tolower((unsigned char)*end)) {
        case 'k': mul = 1ull << 10; break;
        case 'm': mul = 1ull << 20; break;
        case 'g': mul = 1ull << 30; break;
        default: return -1;
        }
        end++;
        if (tolower((unsigned char)*end) == 'i')
            end++;
        if (tolower((unsigned char)*end) == 'b')
            end++;
        if (*end)
            return -1;
    }
    if (v > (unsigned long long)SIZE_MAX / mul)
        return -1;
    *out = (size_t)(v * mul);
    return 0;
}

int tg_gw_parse_duration_ms(const char *s, uint32_t *out)
{
    if (!s || !isdigit((unsigned char)*s))
        return -1;
    errno = 0;
    char *end;
    double v = strtod(s, &end);
    if (errno || v < 0)
        return -1;
    double mul = 1000;
    if (strcmp(end, "ms") == 0)
        mul = 1;
    else if (*end == '\0' || strcmp(end, "s") == 0)
        mul = 1000;
    else if (strcmp(end, "m") == 0 || strcmp(end, "min") == 0)
        mul = 60000;
    else if (strcmp(end, "h") == 0)
        mul = 3600000;
    else
        return -1;
    double ms = v * mul;
    if (ms > 4e9)
        return -1;
    *out = (uint32_t)(ms + 0.5);
    return 0;
}

/* ------------------------------------------------------------ bucket */

void tg_gw_bucket_init(struct tg_gw_bucket *b, double rate, uint32_t burst, uint64_t now_us)
{
    b->rate = rate > 0 ? rate : 0;
    b->burst = burst ? (double)burst : (rate >= 1 ? rate : 1);
    b->tokens = b->burst;
    b->last_us = now_us;
}

static void refill(struct tg_gw_bucket *b, uint64_t now_us)
{
    if (now_us > b->last_us) {
        b->tokens += (double)(now_us - b->last_us) * b->rate / 1e6;
        if (b->tokens > b->burst)
            b->tokens = b->burst;
    }
    b->last_us = now_us;
}

int tg_gw_bucket_consume(struct tg_gw_bucket *b, uint64_t now_us)
{
    if (b->rate <= 0)
        return 1;
    refill(b, now_us);
    b->tokens -= 1;
    if (b->tokens < -1)
        b->tokens = -1; /* never owe more than one message */
    return b->tokens >= 1;
}

uint64_t tg_gw_bucket_wait_us(struct tg_gw_bucket *b, uint64_t now_us)
{
    if (b->rate <= 0)
        return 0;
    refill(b, now_us);
    if (b->tokens >= 1)
        return 0;
    double need = 1 - b->tokens;
    uint64_t us = (uint64_t)(need * 1e6 / b->rate) + 1;
    return us;
}

/* ------------------------------------------------------ slow clients */

enum tg_gw_slow_verdict tg_gw_slow_check(struct tg_gw_slow *s, const struct tg_gw_limits *l, size_t queued,
                                         uint64_t now_us)
{
    if (l->out_hard && queued > l->out_hard)
        return TG_GW_SLOW_CUT_HARD;
    if (!l->out_soft || queued <= l->out_soft) {
        s->over_soft_since_us = 0;
        return TG_GW_SLOW_OK;
    }
    if (!s->over_soft_since_us) {
        s->over_soft_since_us = now_us ? now_us : 1;
        return TG_GW_SLOW_OK;
    }
    if (now_us - s->over_soft_since_us >= (uint64_t)l->soft_grace_ms * 1000u)
        return TG_GW_SLOW_CUT_SOFT;
    return TG_GW_SLOW_OK;
}

enum tg_gw_slow_verdict tg_gw_slow_stalled(const struct tg_gw_limits *l, uint64_t stalled_ms)
{
    return l->out_soft && stalled_ms >= l->soft_grace_ms ? TG_GW_SLOW_CUT_STALLED : TG_GW_SLOW_OK;
}

/* ------------------------------------------------ per-source counts */

void tg_gw_source_key(const struct sockaddr_storage *ss, uint32_t prefix6, char *out, size_t len)
{
    const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)ss;
    if (ss->ss_family != AF_INET6 || IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr) || prefix6 == 0 ||
        prefix6 >= 128) {
        tg_sockaddr_host(ss, out, len, NULL);
        return;
    }
    struct in6_addr net = in6->sin6_addr;
    for (unsigned bit = prefix6; bit < 128; bit++)
        net.s6_addr[bit / 8] &= (uint8_t) ~(0x80u >> (bit % 8));
    char ip[INET6_ADDRSTRLEN];
    if (!inet_ntop(AF_INET6, &net, ip, sizeof ip))
        snprintf(ip, sizeof ip, "?");
    snprintf(out, len, "%s/%u", ip, (unsigned)prefix6);
}

void tg_gw_source_key_text(const char *ip, uint32_t prefix6, char *out, size_t len)
{
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof ss);
    struct sockaddr_in *in = (struct sockaddr_in *)&ss;
    struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&ss;
    if (ip && inet_pton(AF_INET, ip, &in->sin_addr) == 1)
        ss.ss_family = AF_INET;
    else if (ip && inet_pton(AF_INET6, ip, &in6->sin6_addr) == 1)
        ss.ss_family = AF_INET6;
    if (ss.ss_family)
        tg_gw_source_key(&ss, prefix6, out, len);
    else
        snprintf(out, len, "%s", ip ? ip : "?");
}

/* Chained hash table of the sources with at least one connection. It doubles when it holds more
 * entries than buckets, so a lookup stays O(1) with 10,000 distinct remote addresses (a fixed
 * 256 buckets made every accept walk chains of ~40). */
#define SRC_MIN_BUCKETS 256u

struct src_ent {
    struct src_ent *next;
    unsigned hash;
    uint32_t count;
    char key[];
};

struct tg_gw_sources {
    struct src_ent **b;
    size_t nb, n; /* buckets (a power of two), entries */
};

static unsigned src_hash(const char *s)
{
    unsigned h = 2166136261u;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 16777619u;
    return h;
}

struct tg_gw_sources *tg_gw_sources_new(void)
{
    struct tg_gw_sources *t = calloc(1, sizeof *t);
    if (!t)
        return NULL;
    t->b = calloc(SRC_MIN_BUCKETS, sizeof *t->b);
    if (!t->b) {
        free(t);
        return NULL;
    }
    t->nb = SRC_MIN_BUCKETS;
    return t;
}

void tg_gw_sources_free(struct tg_gw_sources *t)
{
    if (!t)
        return;
    for (size_t i = 0; i < t->nb; i++) {
        struct src_ent *e = t->b[i];
        while (e) {
            struct src_ent *n = e->next;
            free(e);
            e = n;
        }
    }
    free(t->b);
    free(t);
}

static struct src_ent **src_find(struct tg_gw_sources *t, const char *source, unsigned h)
{
    struct src_ent **pp = &t->b[h & (t->nb - 1)];
    while (*pp && ((*pp)->hash != h || strcmp((*pp)->key, source) != 0))
        pp = &(*pp)->next;
    return pp;
}

/* Doubles the bucket array (best effort: on allocation failure the chains just get longer). */
static void src_grow(struct tg_gw_sources *t)
{
    size_t nb = t->nb * 2;
    struct src_ent **b = calloc(nb, sizeof *b);
    if (!b)
        return;
    for (size_t i = 0; i < t->nb; i++) {
        struct src_ent *e = t->b[i];
        while (e) {
            struct src_ent *n = e->next;
            e->next = b[e->hash & (nb - 1)];
            b[e->hash & (nb - 1)] = e;
            e = n;
        }
    }
    free(t->b);
    t->b = b;
    t->nb = nb;
}

int tg_gw_sources_acquire(struct tg_gw_sources *t, const char *source, uint32_t max)
{
    unsigned h = src_hash(source);
    struct src_ent **pp = src_find(t, source, h);
    if (!*pp) {
        size_t n = strlen(source) + 1;
        struct src_ent *e = calloc(1, sizeof *e + n);
        if (!e)
            return 0;
        memcpy(e->key, source, n);
        e->hash = h;
        *pp = e;
        if (++t->n > t->nb) {
            src_grow(t);
            pp = src_find(t, source, h);
        }
    }
    if (max && (*pp)->count >= max)
        return 0;
    (*pp)->count++;
    return 1;
}

void tg_gw_sources_release(struct tg_gw_sources *t, const char *source)
{
    struct src_ent **pp = src_find(t, source, src_hash(source));
    if (!*pp)
        return;
    if ((*pp)->count > 0)
        (*pp)->count--;
    if ((*pp)->count == 0) {
        struct src_ent *e = *pp;
        *pp = e->next;
        free(e);
        t->n--;
    }
}

uint32_t tg_gw_sources_count(struct tg_gw_sources *t, const char *source)
{
    struct src_ent **pp = src_find(t, source, src_hash(source));
    return *pp ? (*pp)->count : 0;
}
