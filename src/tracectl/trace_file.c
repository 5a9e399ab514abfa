/* trace_file.c: .pftrace record framing: slice assembly, writer and reader (see trace_file.h). */
#include "trace_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ipc/rb_slices.h"
#include "tracegate/pbwire.h"

/* Trace.packet: field 1, wire type 2 */
#define TRACE_PACKET_TAG 0x0A

size_t tc_trace_record_header(uint8_t *hdr, size_t len)
{
    hdr[0] = TRACE_PACKET_TAG;
    return 1 + tg_pb_put_varint(hdr + 1, (uint64_t)len);
}

/* ---------------------------------------------------------------- writer */

int tc_trace_writer_open(struct tc_trace_writer *w, const char *path, char *err, size_t errlen)
{
    memset(w, 0, sizeof *w);
    snprintf(w->path, sizeof w->path, "%s", path);
    if (strcmp(path, "-") == 0) {
        w->f = stdout;
        w->own = 0;
        return 0;
    }
    w->f = fopen(path, "wb");
    if (!w->f) {
        snprintf(err, errlen, "cannot open %s for writing: %s", path, strerror(errno));
        return -1;
    }
    w->own = 1;
    return 0;
}

void tc_trace_writer_adopt(struct tc_trace_writer *w, FILE *f, const char *path)
{
    memset(w, 0, sizeof *w);
    snprintf(w->path, sizeof w->path, "%s", path);
    w->f = f;
    w->own = 1;
}

int tc_trace_writer_append(struct tc_trace_writer *w, const char *path, char *err, size_t errlen)
{
    memset(w, 0, sizeof *w);
    snprintf(w->path, sizeof w->path, "%s", path);
    w->f = fopen(path, "ab");
    if (!w->f) {
        snprintf(err, errlen, "cannot open %s for appending: %s", path, strerror(errno));
        return -1;
    }
    w->own = 1;
    return 0;
}

int tc_trace_writer_add(struct tc_trace_writer *w, const uint8_t *pkt, size_t len, char *err, size_t errlen)
{
    uint8_t hdr[16];
    size_t hl = tc_trace_record_header(hdr, len);
    if (!w->f) {
        snprintf(err, errlen, "%s: writer is closed", w->path);
        return -1;
    }
    if (fwrite(hdr, 1, hl, w->f) != hl || (len && fwrite(pkt, 1, len, w->f) != len)) {
        snprintf(err, errlen, "cannot write %s: %s", w->path, strerror(errno));
        return -1;
    }
    w->packets++;
    w->bytes += hl + len;
    return 0;
}

int tc_trace_writer_close(struct tc_trace_writer *w, char *err, size_t errlen)
{
    if (!w->f)
        return 0;
    int rc = 0;
    errno = 0;
    if (fflush(w->f) != 0 || ferror(w->f)) {
        snprintf(err, errlen, "cannot write %s: %s", w->path, strerror(errno ? errno : EIO));
        rc = -1;
    }
    if (w->own && fclose(w->f) != 0 && rc == 0) {
        snprintf(err, errlen, "cannot write %s: %s", w->path, strerror(errno));
        rc = -1;
    }
    w->f = NULL;
    return rc;
}

/* ------------------------------------------------------------- assembler */

void tc_assembler_init(struct tc_packet_assembler *a)
{
    memset(a, 0, sizeof *a);
}

void tc_assembler_free(struct tc_packet_assembler *a)
{
    free(a->buf);
    memset(a, 0, sizeof *a);
}

size_t tc_assembler_pending(const struct tc_packet_assembler *a)
{
    return a->slices ? a->len : 0;
}

int tc_assembler_add(struct tc_packet_assembler *a, const uint8_t *data, size_t len, int last, tc_packet_fn fn,
                     void *arg)
{
    if (a->slices == 0 && last) /* the common case: a one-slice packet, no copy */
        return fn(arg, data, len);
    if (len > TC_TRACE_MAX_PACKET || a->len > TC_TRACE_MAX_PACKET - len)
        return -1;
    if (a->len + len > a->cap) {
        size_t cap = a->cap ? a->cap : 4096;
        while (cap < a->len + len)
            cap *= 2;
        uint8_t *nb = realloc(a->buf, cap);
        if (!nb)
            return -1;
        a->buf = nb;
        a->cap = cap;
    }
    if (len)
        memcpy(a->buf + a->len, data, len);
    a->len += len;
    a->slices++;
    if (!last)
        return 0;
    int rc = fn(arg, a->buf, a->len);
    a->len = 0;
    a->slices = 0;
    return rc;
}

struct add_ctx {
    struct tc_packet_assembler *a;
    tc_packet_fn fn;
    void *arg;
};

static int add_slice(void *arg, const uint8_t *data, size_t len, int last)
{
    struct add_ctx *c = arg;
    return tc_assembler_add(c->a, data, len, last, c->fn, c->arg);
}

int tc_assembler_add_reply(struct tc_packet_assembler *a, const uint8_t *reply, size_t len, tc_packet_fn fn,
                           void *arg, char *err, size_t errlen)
{
    struct add_ctx c = {a, fn, arg};
    const char *where = "reply";
    int rc = tg_rb_slices_each(reply, len, add_slice, &c, &where);
    if (rc == TG_RB_MALFORMED) {
        snprintf(err, errlen, "malformed ReadBuffersResponse%s", strcmp(where, "slice") == 0 ? " slice" : "");
        return -1;
    }
    if (rc == -1)
        snprintf(err, errlen, "a trace packet exceeds %u bytes or memory ran out", TC_TRACE_MAX_PACKET);
    return rc;
}

/* ---------------------------------------------------------------- reader */

void tc_trace_reader_init(struct tc_trace_reader *r, const uint8_t *data, size_t len)
{
    r->data = data;
    r->len = len;
    r->off = 0;
    r->index = 0;
}

static const char *wire_name(unsigned w)
{
    static const char *const names[] = {"varint", "fixed64", "length-delimited", "start-group",
                                        "end-group", "fixed32", "invalid (6)", "invalid (7)"};
    return names[w & 7];
}

int tc_trace_reader_next(struct tc_trace_reader *r, const uint8_t **pkt, size_t *len, size_t *pkt_off, char *err,
                         size_t errlen)
{
    if (r->off >= r->len)
        return 0;
    const uint8_t *p = r->data + r->off;
    const uint8_t *end = r->data + r->len;
    size_t off = r->off;
    uint64_t key;
    size_t n = tg_pb_read_varint(p, end, &key);
    if (n == 0) {
        snprintf(err, errlen, "byte offset %zu (packet #%llu): truncated or invalid record tag", off,
                 (unsigned long long)r->index);
        return -1;
    }
    if (key != TRACE_PACKET_TAG) {
        if (off == 0 && r->len >= 2 && p[0] == 0x1f && p[1] == 0x8b)
            snprintf(err, errlen, "byte offset 0: this is a gzip file; decompress it first (gunzip)");
        else if (off == 0 && r->len >= 4 && p[0] == 0x28 && p[1] == 0xb5 && p[2] == 0x2f && p[3] == 0xfd)
            snprintf(err, errlen, "byte offset 0: this is a zstd file; decompress it first (zstd -d)");
        else
            snprintf(err, errlen,
                     "byte offset %zu (packet #%llu): unexpected field %llu (%s) where a TracePacket record "
                     "(field 1, length-delimited) was expected: corrupt or not a Perfetto trace",
                     off, (unsigned long long)r->index, (unsigned long long)(key >> 3), wire_name((unsigned)key & 7));
        return -1;
    }
    p += n;
    uint64_t plen;
    size_t m = tg_pb_read_varint(p, end, &plen);
    if (m == 0) {
        snprintf(err, errlen, "byte offset %zu (packet #%llu): truncated or invalid packet length", off,
                 (unsigned long long)r->index);
        return -1;
    }
    p += m;
    size_t avail = (size_t)(end - p);
    if (plen > avail) {
        snprintf(err, errlen,
                 "byte offset %zu (packet #%llu): the packet claims %llu bytes but only %zu remain "
                 "(truncated file?)",
                 off, (unsigned long long)r->index, (unsigned long long)plen, avail);
        return -1;
    }
    *pkt = p;
    *len = (size_t)plen;
    if (pkt_off)
        *pkt_off = off;
    r->off = (size_t)(p - r->data) + (size_t)plen;
    r->index++;
    return 1;
}

int tc_trace_file_load(const char *path, uint8_t **data, size_t *len, char *err, size_t errlen)
{
    *data = NULL;
    *len = 0;
    int fd = strcmp(path, "-") == 0 ? STDIN_FILENO : open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        snprintf(err, errlen, "cannot open %s: %s", path, strerror(errno));
        return -1;
    }
    struct stat st;
    size_t cap = 64 * 1024;
    if (fstat(fd, &st) == 0) {
        if (S_ISDIR(st.st_mode)) {
            snprintf(err, errlen, "%s is a directory", path);
            goto fail;
        }
        if (S_ISREG(st.st_mode) && st.st_size > 0)
            cap = (size_t)st.st_size + 1;
    }
    uint8_t *buf = malloc(cap);
    if (!buf) {
        snprintf(err, errlen, "%s: out of memory", path);
        goto fail;
    }
    size_t n = 0;
    for (;;) {
        if (n == cap) {
            uint8_t *nb = cap > SIZE_MAX / 2 ? NULL : realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                snprintf(err, errlen, "%s: out of memory", path);
                goto fail;
            }
            buf = nb;
            cap *= 2;
        }
        ssize_t r = read(fd, buf + n, cap - n);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            snprintf(err, errlen, "cannot read %s: %s", path, strerror(errno));
            free(buf);
            goto fail;
        }
        if (r == 0)
            break;
        n += (size_t)r;
    }
    if (fd != STDIN_FILENO)
        close(fd);
    *data = buf;
    *len = n;
    return 0;
fail:
    if (fd != STDIN_FILENO)
        close(fd);
    return -1;
}
