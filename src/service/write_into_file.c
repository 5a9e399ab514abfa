/* write_into_file.c: TraceConfig.write_into_file: every file_write_period_ms
 * (and once more when the session is disabled) whatever can be read from
 * the session is appended to the output file as .pftrace records
 * (0x0A, varint length, TracePacket), honouring max_file_size_bytes. */
#include "service/svc.h"

#include "tracegate/log.h"
#include "tracegate/pbwire.h"

#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define FLUSH_AT (256u * 1024u)

bool tg_svc_may_create_files(const tg_svc_consumer *c)
{
    /* A local peer the kernel vouched for (SO_PEERCRED, or the embedder's identity for a local
     * user) that is root or the service's own user: it could create the file itself. Never a
     * network peer (their uid is 0 or a claim) or a principal without a local uid (-1). */
    if (!c || !c->peer || !tg_ipc_peer_is_unix(c->peer) || c->uid < 0)
        return false;
    return c->uid == 0 || (uid_t)c->uid == geteuid();
}

int tg_svc_open_output_path(const char *path, char *err, size_t errlen)
{
    /* like traced: never overwrite an existing file */
    int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0)
        snprintf(err, errlen, "Failed to create the trace file %s: %s", path, strerror(errno));
    return fd;
}

struct wbuf {
    uint8_t *p;
    size_t len, cap;
};

static int wbuf_add(struct wbuf *b, const void *d, size_t n)
{
    if (b->len + n > b->cap) {
        size_t ncap = b->cap ? b->cap : 65536;
        while (ncap < b->len + n)
            ncap *= 2;
        uint8_t *x = realloc(b->p, ncap);
        if (!x)
            return -1;
        b->p = x;
        b->cap = ncap;
    }
    memcpy(b->p + b->len, d, n);
    b->len += n;
    return 0;
}

static int write_all(int fd, const uint8_t *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

int tg_svc_write_into_file(tg_svc_session *s)
{
    if (s->file_fd < 0)
        return 0;
    struct tg_svc_reader *r = tg_svc_reader_new(s);
    if (!r)
        return 0;
    struct wbuf b = {0};
    int full = 0, err = 0;
    struct tg_svc_reader_pkt pk;
    while (!full && !err && tg_svc_reader_next(r, &pk)) {
        size_t total = pk.trusted_len;
        for (size_t i = 0; i < pk.n; i++)
            total += pk.slices[i].len;
        uint8_t hdr[16];
        size_t hl = tg_pb_put_tag(hdr, 1, TG_PB_LEN);
        hl += tg_pb_put_varint(hdr + hl, total);
        if (s->max_file_size && s->bytes_written + b.len + hl + total > s->max_file_size) {
            full = 1;
            break;
        }
        err |= wbuf_add(&b, hdr, hl);
        for (size_t i = 0; i < pk.n && !err; i++)
            err |= wbuf_add(&b, pk.slices[i].data, pk.slices[i].len);
        if (pk.trusted_len && !err)
            err |= wbuf_add(&b, pk.trusted, pk.trusted_len);
        if (!err && b.len >= FLUSH_AT) {
            if (write_all(s->file_fd, b.p, b.len) != 0)
                err = 1;
            s->bytes_written += b.len;
            b.len = 0;
        }
    }
    if (!err && b.len) {
        if (write_all(s->file_fd, b.p, b.len) != 0)
            err = 1;
        else
            s->bytes_written += b.len;
    }
    if (err)
        tg_warn(TG_SVC_LOG, "session %llu: writing the trace file failed: %s", (unsigned long long)s->id,
                strerror(errno));
    free(b.p);
    tg_svc_reader_free(r);
    return full || err;
}

void tg_svc_write_timer_cb(int fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    tg_svc_session *s = arg;
    if (s->state != TG_SESS_STARTED)
        return;
    if (tg_svc_write_into_file(s)) {
        tg_info(TG_SVC_LOG, "session %llu: max_file_size_bytes reached, stopping", (unsigned long long)s->id);
        tg_svc_session_disable(s, NULL);
        return;
    }
    tg_svc_timer_set(s->ev_write, s->write_period_ms);
}
