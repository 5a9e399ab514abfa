/* gw_limits.h: the gateway's resource limits: per-connection output
 * watermarks and the slow-client policy (Redis' client-output-buffer-limit:
 * a hard limit that cuts at once, a soft limit that cuts after a grace
 * period), a token bucket of messages per second per connection, counters
 * of connections per source address, and parsers for sizes and durations.
 *
 * Pure data structures: the bridge owns the policy decisions (pausing,
 * cutting, logging, metrics). Single-threaded (the gateway's loop). */
#ifndef TRACEGATE_GATEWAY_GW_LIMITS_H
#define TRACEGATE_GATEWAY_GW_LIMITS_H

#include <stddef.h>
#include <stdint.h>

struct tg_gw_limits {
    size_t max_frame;              /* header + body; at most 128 KiB (Perfetto's limit) */
    size_t out_high, out_low;      /* pause the other side above high, resume below low */
    size_t out_soft;               /* slow client: over this for longer than soft_grace_ms => cut */
    uint32_t soft_grace_ms;
    size_t out_hard;               /* slow client: over this => cut at once */
    double rate;                   /* messages per second a client may send; 0 = unlimited */
    uint32_t burst;                /* bucket size (messages); 0 = max(1, rate) */
    uint32_t max_conns;            /* client connections in total; 0 = unlimited */
    uint32_t max_conns_per_source; /* per non-loopback source (tg_gw_source_key); 0 = unlimited */
    uint32_t source_prefix6;       /* an IPv6 source is its /source_prefix6 network (default 64) */
    uint32_t handshake_timeout_ms; /* connection to successful Authenticate (in-band auth) */
    uint32_t idle_timeout_ms;      /* no frame either way and no call pending; 0 = off */
    uint32_t drain_timeout_ms;     /* SIGTERM: how long sessions may take to finish */
};

void tg_gw_limits_default(struct tg_gw_limits *l);

/* The source a client's connections are counted under by the per-source limits
 * (max-connections-per-source, http-max-pending-per-source): its IPv4 address (also when it
 * arrives as ::ffff:a.b.c.d on a dual-stack listener), or its IPv6 address's /prefix6 network
 * written "2001:db8:1:2::/64" (the bare address when prefix6 is 128, or 0: unset): one IPv6 host holds a whole
 * /64, and counting per address would let it open the limit once per address it makes up. "?"
 * for other families. out: 64 bytes suffice. */
struct sockaddr_storage;
void tg_gw_source_key(const struct sockaddr_storage *ss, uint32_t prefix6, char *out, size_t len);
/* The same from a numeric address (libwebsockets gives the peer as text); a text that is not one
 * is its own source. */
void tg_gw_source_key_text(const char *ip, uint32_t prefix6, char *out, size_t len);
/* Checks consistency (low < high, soft <= hard, frame size...). */
int tg_gw_limits_validate(const struct tg_gw_limits *l, char *err, size_t errlen);

/* "65536", "64k", "1m", "2g" (binary multiples). Returns 0 or -1. */
int tg_gw_parse_size(const char *s, size_t *out);
/* "10" (seconds), "10s", "500ms", "5m", "1h"; "0" = off. Returns 0 or -1. */
int tg_gw_parse_duration_ms(const char *s, uint32_t *out);

/* ---- token bucket ---- */
struct tg_gw_bucket {
    double rate, burst, tokens;
    uint64_t last_us;
};
void tg_gw_bucket_init(struct tg_gw_bucket *b, double rate, uint32_t burst, uint64_t now_us);
/* Spends one token for a message that arrived. Returns 1 if the sender may
 * go on (at least one token left), 0 if it must pause: then call
 * tg_gw_bucket_wait_us to learn when to resume. Unlimited buckets always
 * return 1. */
int tg_gw_bucket_consume(struct tg_gw_bucket *b, uint64_t now_us);
/* Microseconds until one token is available (0 = now). */
uint64_t tg_gw_bucket_wait_us(struct tg_gw_bucket *b, uint64_t now_us);

/* ---- slow-client policy ---- */
enum tg_gw_slow_verdict { TG_GW_SLOW_OK = 0, TG_GW_SLOW_CUT_SOFT, TG_GW_SLOW_CUT_HARD, TG_GW_SLOW_CUT_STALLED };
struct tg_gw_slow {
    uint64_t over_soft_since_us; /* 0 = under the soft limit */
};
/* Called with the bytes queued toward a client whenever they may have
 * changed, and periodically. */
enum tg_gw_slow_verdict tg_gw_slow_check(struct tg_gw_slow *s, const struct tg_gw_limits *l, size_t queued,
                                         uint64_t now_us);
/* For a client paused for not reading (its queue went over out-high and has not come back under
 * out-low) whose queue has waited stalled_ms with no sign of it reading: CUT_STALLED once that
 * reaches the soft grace, whatever its queue (the kernel's socket buffer can hold the rest,
 * leaving it parked under the soft limit for good). Off when out_soft is 0. */
enum tg_gw_slow_verdict tg_gw_slow_stalled(const struct tg_gw_limits *l, uint64_t stalled_ms);

/* ---- connections per source ---- */
struct tg_gw_sources;
struct tg_gw_sources *tg_gw_sources_new(void);
void tg_gw_sources_free(struct tg_gw_sources *t);
/* Adds one connection for source if it stays within max (0 = unlimited);
 * returns 1 if added, 0 if the source is at its limit. */
int tg_gw_sources_acquire(struct tg_gw_sources *t, const char *source, uint32_t max);
void tg_gw_sources_release(struct tg_gw_sources *t, const char *source);
uint32_t tg_gw_sources_count(struct tg_gw_sources *t, const char *source);

uint64_t tg_gw_now_us(void);

#endif
