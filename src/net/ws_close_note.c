/* ws_close_note.c: a close code and reason passed from a link's socket side to its WebSocket side (see ws_close_note.h). */
#include "net/ws_close_note.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

struct tg_ws_close_note {
    atomic_int refs;
    pthread_mutex_t mu;
    int code;
    char reason[TG_WS_CLOSE_REASON_MAX + 1];
};

struct tg_ws_close_note *tg_ws_close_note_new(void)
{
    struct tg_ws_close_note *n = calloc(1, sizeof *n);
    if (!n)
        return NULL;
    atomic_init(&n->refs, 1);
    pthread_mutex_init(&n->mu, NULL);
    return n;
}

void tg_ws_close_note_ref(struct tg_ws_close_note *n)
{
    if (n)
        atomic_fetch_add(&n->refs, 1);
}

void tg_ws_close_note_unref(struct tg_ws_close_note *n)
{
    if (!n || atomic_fetch_sub(&n->refs, 1) != 1)
        return;
    pthread_mutex_destroy(&n->mu);
    free(n);
}

void tg_ws_close_note_set(struct tg_ws_close_note *n, int code, const char *reason)
{
    if (!n || code < 1000 || code > 4999)
        return;
    pthread_mutex_lock(&n->mu);
    if (!n->code) {
        n->code = code;
        size_t i = 0;
        for (; reason && reason[i] && i < TG_WS_CLOSE_REASON_MAX; i++) {
            unsigned char c = (unsigned char)reason[i];
            n->reason[i] = (c < 0x20 || c >= 0x7f) ? '?' : (char)c;
        }
        n->reason[i] = '\0';
    }
    pthread_mutex_unlock(&n->mu);
}

int tg_ws_close_note_get(struct tg_ws_close_note *n, char *reason, size_t cap)
{
    if (cap)
        reason[0] = '\0';
    if (!n)
        return 0;
    pthread_mutex_lock(&n->mu);
    int code = n->code;
    if (code && cap) {
        size_t len = strlen(n->reason);
        if (len >= cap)
            len = cap - 1;
        memcpy(reason, n->reason, len);
        reason[len] = '\0';
    }
    pthread_mutex_unlock(&n->mu);
    return code;
}
