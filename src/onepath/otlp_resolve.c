/* otlp_resolve.c: host name lookups on detached helper threads that the caller may abandon (see
 * otlp_resolve.h). The lookup is shared by its caller and its helper, each holding a reference
 * under the lookup's mutex; whichever lets go last frees it. */
#include "onepath/otlp_resolve.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

struct tg_op_lookup {
    pthread_mutex_t mu;
    int refs;              /* under mu: the caller's and the helper's */
    int done;              /* under mu */
    int rc;                /* getaddrinfo's result, once done */
    struct addrinfo *res;  /* once done, until taken */
    int efd;               /* eventfd written once done */
    char host[256], port[8];
};

static _Atomic(tg_op_resolve_fn) g_resolver;
static atomic_uint g_running;

void tg_op_lookup_set_resolver(tg_op_resolve_fn fn) { atomic_store(&g_resolver, fn); }

unsigned tg_op_lookup_running(void) { return atomic_load(&g_running); }

static void hints_for(struct addrinfo *hints, int flags)
{
    memset(hints, 0, sizeof *hints);
    hints->ai_socktype = SOCK_STREAM;
    hints->ai_family = AF_UNSPEC;
    hints->ai_flags = flags;
}

static void lookup_free(struct tg_op_lookup *l)
{
    if (l->res)
        freeaddrinfo(l->res);
    if (l->efd >= 0)
        close(l->efd);
    pthread_mutex_destroy(&l->mu);
    free(l);
}

/* Drops one reference; the last one frees. */
static void unref(struct tg_op_lookup *l)
{
    pthread_mutex_lock(&l->mu);
    int last = --l->refs == 0;
    pthread_mutex_unlock(&l->mu);
    if (last)
        lookup_free(l);
}

static void finish(struct tg_op_lookup *l, int rc, struct addrinfo *res)
{
    pthread_mutex_lock(&l->mu);
    l->rc = rc;
    l->res = rc == 0 ? res : NULL;
    l->done = 1;
    pthread_mutex_unlock(&l->mu);
    uint64_t one = 1;
    if (write(l->efd, &one, sizeof one) < 0) {
        /* cannot fail on a fresh eventfd; the waiter then ends at its own deadline */
    }
}

static void *helper(void *arg)
{
    struct tg_op_lookup *l = arg;
    tg_op_resolve_fn fn = atomic_load(&g_resolver);
    struct addrinfo hints, *res = NULL;
    hints_for(&hints, 0);
    int rc = (fn ? fn : getaddrinfo)(l->host, l->port, &hints, &res);
    finish(l, rc, res);
    unref(l);
    atomic_fetch_sub(&g_running, 1);
    return NULL;
}

struct tg_op_lookup *tg_op_lookup_start(const char *host, const char *port)
{
    struct tg_op_lookup *l = calloc(1, sizeof *l);
    if (!l)
        return NULL;
    l->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (l->efd < 0 || strlen(host) >= sizeof l->host || strlen(port) >= sizeof l->port ||
        pthread_mutex_init(&l->mu, NULL) != 0) {
        if (l->efd >= 0)
            close(l->efd);
        free(l);
        return NULL;
    }
    strcpy(l->host, host);
    strcpy(l->port, port);
    l->refs = 1;
    /* an address needs no resolver */
    struct addrinfo hints, *res = NULL;
    hints_for(&hints, AI_NUMERICHOST | AI_NUMERICSERV);
    if (getaddrinfo(host, port, &hints, &res) == 0) {
        finish(l, 0, res);
        return l;
    }
    l->refs = 2;
    atomic_fetch_add(&g_running, 1);
    pthread_attr_t at;
    sigset_t all, old;
    sigfillset(&all);
    int ok = pthread_attr_init(&at) == 0;
    if (ok) {
        pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
        pthread_sigmask(SIG_SETMASK, &all, &old); /* the helper takes no signals */
        pthread_t th;
        ok = pthread_create(&th, &at, helper, l) == 0;
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        pthread_attr_destroy(&at);
    }
    if (!ok) {
        atomic_fetch_sub(&g_running, 1);
        lookup_free(l);
        return NULL;
    }
    return l;
}

int tg_op_lookup_fd(const struct tg_op_lookup *l) { return l->efd; }

int tg_op_lookup_take(struct tg_op_lookup *l, struct addrinfo **res)
{
    pthread_mutex_lock(&l->mu);
    int rc = l->done ? l->rc : TG_OP_LOOKUP_RUNNING;
    *res = l->done ? l->res : NULL;
    if (l->done)
        l->res = NULL;
    pthread_mutex_unlock(&l->mu);
    return rc;
}

void tg_op_lookup_release(struct tg_op_lookup *l)
{
    if (l)
        unref(l);
}
