/* recent.c: the recent-span store (recent.h): a FIFO of malloc'd lines with increasing ids,
 * trimmed from the front to its span and byte bounds. A read walks from the front to the first id
 * after the cursor; ids it passes over that no line holds (pushed out, too big) are reported as
 * missed, so a reader knows of every span it could not get. */
#include "onepath/recent.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "tracegate/onepath.h"

struct line {
    struct line *next;
    uint64_t id;
    size_t len; /* with the '\n' */
    char text[];
};

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static struct line *g_head, *g_tail;
static size_t g_count, g_bytes, g_max_spans, g_max_bytes;
static uint64_t g_last_id, g_added, g_evicted, g_too_big, g_read;

static void drop_head_locked(void)
{
    struct line *l = g_head;
    g_head = l->next;
    if (!g_head)
        g_tail = NULL;
    g_count--;
    g_bytes -= l->len;
    free(l);
}

static void trim_locked(size_t need_bytes)
{
    while (g_head && (g_count >= g_max_spans || g_bytes + need_bytes > g_max_bytes)) {
        drop_head_locked();
        g_evicted++;
    }
}

void tg_op_recent_configure(size_t max_spans, size_t max_bytes)
{
    pthread_mutex_lock(&g_mu);
    g_max_spans = max_spans;
    g_max_bytes = max_bytes;
    if (max_spans == 0) {
        while (g_head)
            drop_head_locked();
    } else {
        while (g_head && (g_count > g_max_spans || g_bytes > g_max_bytes)) {
            drop_head_locked();
            g_evicted++;
        }
    }
    pthread_mutex_unlock(&g_mu);
}

int tg_op_recent_on(void)
{
    pthread_mutex_lock(&g_mu);
    int on = g_max_spans > 0;
    pthread_mutex_unlock(&g_mu);
    return on;
}

void tg_op_recent_add(const char *text, size_t len)
{
    while (len && text[len - 1] == '\n')
        len--;
    pthread_mutex_lock(&g_mu);
    if (g_max_spans == 0) {
        pthread_mutex_unlock(&g_mu);
        return;
    }
    if (len + 1 > TG_OP_RECENT_LINE_MAX || len + 1 > g_max_bytes) {
        g_too_big++;
        g_last_id++; /* a reader learns that it missed one */
        pthread_mutex_unlock(&g_mu);
        return;
    }
    trim_locked(len + 1);
    struct line *l = malloc(sizeof *l + len + 1);
    g_last_id++;
    if (!l) {
        g_evicted++; /* never kept: a reader counts it as missed */
        pthread_mutex_unlock(&g_mu);
        return;
    }
    l->next = NULL;
    l->id = g_last_id;
    l->len = len + 1;
    memcpy(l->text, text, len);
    l->text[len] = '\n';
    if (g_tail)
        g_tail->next = l;
    else
        g_head = l;
    g_tail = l;
    g_count++;
    g_bytes += l->len;
    g_added++;
    pthread_mutex_unlock(&g_mu);
}

void tg_op_recent_clear(void) { tg_op_recent_configure(0, 0); }

void tg_op_recent_after_fork(void)
{
    pthread_mutex_init(&g_mu, NULL);
    g_head = g_tail = NULL; /* leaked in the child, as the exporter threads' memory is */
    g_count = g_bytes = g_max_spans = g_max_bytes = 0;
}

int onepath_recent_spans(uint64_t since_id, size_t max_spans, size_t max_bytes, char **out, size_t *out_len,
                         onepath_recent_read_t *r)
{
    if (!out || !out_len || !r)
        return ONEPATH_ERR_INVAL;
    memset(r, 0, sizeof *r);
    *out = NULL;
    *out_len = 0;
    pthread_mutex_lock(&g_mu);
    r->active = g_max_spans > 0;
    r->last_id = g_last_id;
    if (since_id > g_last_id) /* a cursor from before a restart of the process: start over */
        since_id = 0;
    struct line *l = g_head;
    while (l && l->id <= since_id)
        l = l->next;
    size_t bytes = 0, n = 0;
    for (struct line *x = l; x && n < max_spans && bytes + x->len <= max_bytes; x = x->next) {
        bytes += x->len;
        n++;
    }
    char *buf = malloc(bytes ? bytes : 1);
    if (!buf) {
        pthread_mutex_unlock(&g_mu);
        return ONEPATH_ERR_NOMEM;
    }
    size_t pos = 0;
    uint64_t at = since_id; /* the last id accounted for (returned or missed) */
    struct line *x = l;
    for (size_t i = 0; i < n; i++, x = x->next) {
        r->missed += x->id - at - 1;
        memcpy(buf + pos, x->text, x->len);
        pos += x->len;
        at = x->id;
    }
    if (x && n == 0 && max_spans > 0) {
        /* a line this reader's byte budget can never take is skipped (and counted), never a wall */
        r->missed += x->id - at;
        at = x->id;
        x = x->next;
    } else if (!x) {
        r->missed += g_last_id - at; /* ids after the last held line that were never kept */
        at = g_last_id;
    }
    r->spans = n;
    r->next_since = at;
    r->more = x != NULL;
    g_read += n;
    pthread_mutex_unlock(&g_mu);
    *out = buf;
    *out_len = pos;
    return ONEPATH_OK;
}

int onepath_recent_stats(onepath_recent_stats_t *st)
{
    if (!st)
        return ONEPATH_ERR_INVAL;
    pthread_mutex_lock(&g_mu);
    st->active = g_max_spans > 0;
    st->kept = g_count;
    st->bytes = g_bytes;
    st->max_spans = g_max_spans;
    st->max_bytes = g_max_bytes;
    st->added = g_added;
    st->evicted = g_evicted;
    st->too_big = g_too_big;
    st->read = g_read;
    st->last_id = g_last_id;
    pthread_mutex_unlock(&g_mu);
    return ONEPATH_OK;
}
