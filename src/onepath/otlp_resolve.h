/* otlp_resolve.h: the OTLP/HTTP sender's host name lookup, run on a detached helper thread of its
 * own so that a resolver that never answers holds up neither an attempt (the sender waits on the
 * lookup's descriptor with the attempt's deadline, and its stop) nor shutdown: a lookup still
 * running is abandoned, and the helper frees it when getaddrinfo finally returns. At most one
 * lookup per sender is in flight: a later attempt waits on the same one. Numeric addresses are
 * converted at once, without a thread. */
#ifndef TG_ONEPATH_OTLP_RESOLVE_H
#define TG_ONEPATH_OTLP_RESOLVE_H

#include <netdb.h>

struct tg_op_lookup;

/* getaddrinfo's signature: what the helper calls. */
typedef int (*tg_op_resolve_fn)(const char *host, const char *port, const struct addrinfo *hints,
                                struct addrinfo **res);

/* Starts resolving host:port (TCP, any family). NULL when out of memory or no thread could be
 * started. The caller holds one reference. */
struct tg_op_lookup *tg_op_lookup_start(const char *host, const char *port);
/* A descriptor that becomes readable once the lookup is done (poll it). */
int tg_op_lookup_fd(const struct tg_op_lookup *l);
#define TG_OP_LOOKUP_RUNNING 1 /* getaddrinfo's own error codes are negative */
/* Once done: 0 with *res (the caller frees it with freeaddrinfo), or getaddrinfo's error code;
 * TG_OP_LOOKUP_RUNNING while still running. */
int tg_op_lookup_take(struct tg_op_lookup *l, struct addrinfo **res);
/* Drops the caller's reference (NULL is a no-op). A finished lookup is freed now; a running one is
 * abandoned and freed by its helper when the lookup returns. */
void tg_op_lookup_release(struct tg_op_lookup *l);

/* Lookups whose helper thread has not finished yet (any thread). */
unsigned tg_op_lookup_running(void);
/* Tests: the function the helpers call instead of getaddrinfo (NULL: getaddrinfo again). Set it
 * while no lookup is running. */
void tg_op_lookup_set_resolver(tg_op_resolve_fn fn);

#endif
