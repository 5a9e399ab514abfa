/* service.h: tracegate's traced-compatible tracing service (producer port,
 * consumer port, SMBs and trace buffers) as an embeddable object.
 *
 * The service knows nothing about networks beyond the IPC host: it listens
 * on the producer and consumer addresses it is given (UNIX paths, @abstract
 * names or TCP host:port; producers on non-UNIX sockets are told to use
 * shmem emulation) and can hand out in-process connections as socketpairs.
 *
 * Threading: a tg_service lives on one event_base thread; every function
 * must be called from that thread. */
#ifndef TRACEGATE_SERVICE_H
#define TRACEGATE_SERVICE_H

#include <stddef.h>
#include <stdint.h>

#include "tracegate/ipc_host.h"

struct event_base;
typedef struct tg_service tg_service;

struct tg_service_opts {
    /* Comma-separated address lists; NULL = defaults (see
     * tg_service_default_sockets). An empty string means "do not listen". */
    const char *producer_socks;
    const char *consumer_socks;
    unsigned producer_sock_mode; /* 0 = 0666 (any local app may produce) */
    unsigned consumer_sock_mode; /* 0 = 0600 (traces are private) */
    const char *machine_name;    /* reported in system info; NULL = $PERFETTO_MACHINE_NAME or uname */
    int disable_relay_endpoint;  /* 0 = also expose RelayPort (service id 2) on producer sockets */
    /* The most all trace buffers together may take (clones included); a principal that is not
     * privileged may hold half of it. 0 = half the machine's memory (at least 256 MiB). */
    uint64_t max_buffer_bytes;
};

/* Perfetto's defaults: /run/perfetto/traced-{producer,consumer}.sock when
 * /run/perfetto is usable, else /tmp/perfetto-{producer,consumer}, each
 * overridden by PERFETTO_{PRODUCER,CONSUMER}_SOCK_NAME. */
void tg_service_default_sockets(char *producer, size_t plen, char *consumer, size_t clen);

/* Creates the service and starts listening. NULL with a message on error. */
tg_service *tg_service_new(struct event_base *base, const struct tg_service_opts *opts, char *err, size_t errlen);
/* Ends every session, disconnects every peer, removes socket files. */
void tg_service_free(tg_service *svc);
/* The most all trace buffers may add up to (max_buffer_bytes or its default). */
uint64_t tg_service_buffer_budget(const tg_service *svc);

/* In-process connection: returns our end of a socketpair whose other end is
 * served by the producer (producer_port != 0) or consumer port; -1 on error.
 * The caller owns the returned fd. */
int tg_service_connect_local(tg_service *svc, int producer_port);
/* The same for a client whose identity the caller established (the gateway:
 * a local uid, a token or certificate principal). The service applies its
 * per-principal rules to `id`, not to the caller's own uid. */
int tg_service_connect_local_as(tg_service *svc, int producer_port, const struct tg_ipc_identity *id);

/* Serves an already connected socket (UNIX or TCP) as a producer
 * (producer_port != 0) or consumer connection; the fd is taken over (closed
 * on failure). Producers on non-UNIX sockets get shmem emulation. Returns 0
 * or -1. */
int tg_service_adopt_fd(tg_service *svc, int fd, int producer_port);

#endif
