/* rbuf.c: read blocks shared by reference between a socket connection's input and other
 * evbuffers (see rbuf.h). */
#include "ipc/rbuf.h"

#include <event2/buffer.h>
#include <stdlib.h>
#include <string.h>

#define BLOCK_MIN (64u << 10)  /* first block of a read event that starts idle */
#define BLOCK_MAX (256u << 10) /* while reads keep filling their room */

/* What one rbuf's blocks keep alive; shared with the blocks, which may outlive the rbuf. */
struct rb_pool {
    unsigned refs;
    size_t live;
};

struct rb_block {
    unsigned refs;
    size_t size;
    struct rb_pool *pool;
    uint8_t data[];
};

/* A run of the input's bytes that sit back to back in one block; holds one reference on it. */
struct rb_span {
    struct rb_block *b;
    const uint8_t *p;
    size_t len;
};

struct tg_rbuf {
    struct rb_pool *pool;
    struct rb_block *cur; /* being filled (one reference); NULL when idle */
    size_t used;          /* bytes of cur already committed */
    size_t next_size;
    size_t event_bytes; /* read in this read event */
    struct rb_span *spans;
    size_t head, n, cap; /* spans[head .. head + n) map the input's bytes in order */
    size_t bytes;        /* sum of the spans' lengths */
};

static void pool_unref(struct rb_pool *pool)
{
    if (--pool->refs == 0)
        free(pool);
}

static void block_unref(struct rb_block *b)
{
    if (--b->refs > 0)
        return;
    b->pool->live -= b->size;
    pool_unref(b->pool);
    free(b);
}

/* evbuffer_add_reference cleanup: the chain pointing into the block was freed. */
static void chain_done(const void *data, size_t len, void *arg)
{
    (void)data;
    (void)len;
    block_unref(arg);
}

static struct rb_block *block_new(struct tg_rbuf *r, size_t size)
{
    struct rb_block *b = malloc(sizeof *b + size);
    if (!b)
        return NULL;
    b->refs = 1;
    b->size = size;
    b->pool = r->pool;
    r->pool->refs++;
    r->pool->live += size;
    return b;
}

struct tg_rbuf *tg_rbuf_new(void)
{
    struct tg_rbuf *r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    r->pool = calloc(1, sizeof *r->pool);
    if (!r->pool) {
        free(r);
        return NULL;
    }
    r->pool->refs = 1;
    r->next_size = BLOCK_MIN;
    return r;
}

/* Forgets the input's first k mapped bytes (they left the input). */
static void advance(struct tg_rbuf *r, size_t k)
{
    while (k > 0 && r->n > 0) {
        struct rb_span *s = &r->spans[r->head];
        if (s->len <= k) {
            k -= s->len;
            r->bytes -= s->len;
            block_unref(s->b);
            r->head++;
            r->n--;
        } else {
            s->p += k;
            s->len -= k;
            r->bytes -= k;
            k = 0;
        }
    }
    if (r->n == 0)
        r->head = 0;
}

/* Brings the map in line with the input: whatever it lost, it lost from its front. */
static void sync_map(struct tg_rbuf *r, struct evbuffer *in)
{
    size_t have = evbuffer_get_length(in);
    if (r->bytes > have)
        advance(r, r->bytes - have);
}

void tg_rbuf_free(struct tg_rbuf *r)
{
    if (!r)
        return;
    advance(r, r->bytes);
    if (r->cur)
        block_unref(r->cur);
    pool_unref(r->pool);
    free(r->spans);
    free(r);
}

int tg_rbuf_space(struct tg_rbuf *r, uint8_t **dst, size_t *room)
{
    /* a nearly full block would only yield a short read: start the next one */
    if (r->cur && r->cur->size - r->used < r->next_size / 4) {
        block_unref(r->cur);
        r->cur = NULL;
    }
    if (!r->cur) {
        r->cur = block_new(r, r->next_size);
        if (!r->cur)
            return -1;
        r->used = 0;
    }
    *dst = r->cur->data + r->used;
    *room = r->cur->size - r->used;
    return 0;
}

static int push_span(struct tg_rbuf *r, struct rb_block *b, const uint8_t *p, size_t len)
{
    if (r->n > 0) {
        struct rb_span *last = &r->spans[r->head + r->n - 1];
        if (last->b == b && last->p + last->len == p) {
            last->len += len;
            r->bytes += len;
            return 0;
        }
    }
    if (r->head + r->n == r->cap) {
        if (r->head > 0) { /* slide down before growing */
            memmove(r->spans, r->spans + r->head, r->n * sizeof *r->spans);
            r->head = 0;
        }
        if (r->n == r->cap) {
            size_t cap = r->cap ? r->cap * 2 : 8;
            struct rb_span *ns = realloc(r->spans, cap * sizeof *ns);
            if (!ns)
                return -1;
            r->spans = ns;
            r->cap = cap;
        }
    }
    b->refs++;
    r->spans[r->head + r->n] = (struct rb_span){b, p, len};
    r->n++;
    r->bytes += len;
    return 0;
}

int tg_rbuf_commit(struct tg_rbuf *r, struct evbuffer *in, size_t n)
{
    if (n == 0)
        return 0;
    struct rb_block *b = r->cur;
    const uint8_t *p = b->data + r->used;
    int filled = n == b->size - r->used;
    sync_map(r, in);
    if (push_span(r, b, p, n) != 0)
        return -1;
    b->refs++;
    if (evbuffer_add_reference(in, p, n, chain_done, b) != 0) {
        b->refs--;
        r->bytes -= n; /* take the bytes out of the map again (they are its last ones) */
        struct rb_span *last = &r->spans[r->head + r->n - 1];
        last->len -= n;
        if (last->len == 0) {
            r->n--;
            block_unref(b);
        }
        return -1;
    }
    r->used += n;
    r->event_bytes += n;
    if (filled && r->next_size < BLOCK_MAX)
        r->next_size *= 2; /* the socket had more than the room: read more at a time */
    return 0;
}

void tg_rbuf_event_end(struct tg_rbuf *r, struct evbuffer *in)
{
    sync_map(r, in);
    if (r->event_bytes && r->event_bytes < r->next_size / 4 && r->next_size > BLOCK_MIN)
        r->next_size /= 2; /* the socket had little: smaller blocks again */
    r->event_bytes = 0;
    if (r->bytes == 0 && r->cur) {
        block_unref(r->cur);
        r->cur = NULL;
    }
}

const uint8_t *tg_rbuf_view(struct tg_rbuf *r, struct evbuffer *in, size_t off, size_t len)
{
    sync_map(r, in);
    if (off + len > r->bytes || len == 0)
        return NULL;
    for (size_t i = 0; i < r->n; i++) {
        const struct rb_span *s = &r->spans[r->head + i];
        if (off < s->len)
            return off + len <= s->len ? s->p + off : NULL;
        off -= s->len;
    }
    return NULL;
}

int tg_rbuf_forward(struct tg_rbuf *r, struct evbuffer *in, struct evbuffer *out, size_t n, int by_ref,
                    size_t *ref_bytes)
{
    *ref_bytes = 0;
    sync_map(r, in);
    if (n > r->bytes || n > evbuffer_get_length(in))
        return -1;
    size_t left = n;
    for (size_t i = 0; left > 0; i++) {
        const struct rb_span *s = &r->spans[r->head + i];
        size_t piece = s->len < left ? s->len : left;
        if (by_ref) {
            s->b->refs++;
            if (evbuffer_add_reference(out, s->p, piece, chain_done, s->b) != 0) {
                s->b->refs--;
                return -1;
            }
            *ref_bytes += piece;
        } else if (evbuffer_add(out, s->p, piece) != 0) {
            return -1;
        }
        left -= piece;
    }
    evbuffer_drain(in, n);
    sync_map(r, in);
    return 0;
}

size_t tg_rbuf_pinned(const struct tg_rbuf *r) { return r->pool->live; }
