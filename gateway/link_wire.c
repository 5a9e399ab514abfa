/* link_wire.c: channel records and control message framing of gateway links (see link_wire.h). */
#include "link_wire.h"

#include <string.h>

#include "base/node_name.h"
#include "tracegate/pbwire.h"

size_t tg_link_rec_header(uint8_t *out, enum tg_link_rec_type type, size_t len)
{
    out[0] = (uint8_t)type;
    return 1 + tg_pb_put_varint(out + 1, len);
}

/* A varint of at most 5 bytes (lengths below 2^32). Returns bytes used, 0 = need more, -1 bad. */
static int varint5(const uint8_t *p, size_t len, uint64_t *v)
{
    uint64_t x = 0;
    for (size_t i = 0; i < 5; i++) {
        if (i >= len)
            return 0;
        x |= (uint64_t)(p[i] & 0x7f) << (7 * i);
        if (!(p[i] & 0x80)) {
            *v = x;
            return (int)i + 1;
        }
    }
    return -1;
}

long tg_link_rec_header_parse(const uint8_t *buf, size_t len, uint8_t *type, size_t *plen)
{
    if (len < 1)
        return 0;
    uint8_t t = buf[0];
    if (t != TG_LINK_REC_IPC && t != TG_LINK_REC_ACK && t != TG_LINK_REC_ATTACH && t != TG_LINK_REC_LOST)
        return -1;
    uint64_t n;
    int vl = varint5(buf + 1, len - 1, &n);
    if (vl <= 0)
        return vl;
    if (n > TG_LINK_REC_MAX || (t == TG_LINK_REC_LOST && (n == 0 || n > TG_LINK_LOST_MAX)))
        return -1;
    *type = t;
    *plen = (size_t)n;
    return 1 + vl;
}

long tg_link_rec_parse(const uint8_t *buf, size_t len, uint8_t *type, const uint8_t **payload, size_t *plen)
{
    uint8_t t;
    size_t n;
    long hl = tg_link_rec_header_parse(buf, len, &t, &n);
    if (hl <= 0)
        return hl;
    if (len - (size_t)hl < n)
        return 0;
    if (t == TG_LINK_REC_ACK) {
        uint64_t r;
        if (tg_link_ack_parse(buf + hl, n, &r) != 0)
            return -1;
    }
    *type = t;
    *payload = buf + hl;
    *plen = n;
    return hl + (long)n;
}

size_t tg_link_ack_payload(uint8_t *out, uint64_t received) { return tg_pb_put_varint(out, received); }

int tg_link_ack_parse(const uint8_t *payload, size_t plen, uint64_t *received)
{
    if (plen == 0 || plen > 10)
        return -1;
    size_t n = tg_pb_read_varint(payload, payload + plen, received);
    return n == plen ? 0 : -1;
}

size_t tg_link_ctl_header(uint8_t *out, size_t len)
{
    if (len > TG_LINK_CTL_MAX)
        return 0;
    return tg_pb_put_varint(out, len);
}

long tg_link_ctl_size(const uint8_t *buf, size_t len)
{
    uint64_t n;
    int vl = varint5(buf, len, &n);
    if (vl <= 0)
        return vl;
    if (n > TG_LINK_CTL_MAX)
        return -1;
    return (long)((size_t)vl + (size_t)n);
}

long tg_link_ctl_parse(const uint8_t *buf, size_t len, const uint8_t **msg, size_t *mlen)
{
    long total = tg_link_ctl_size(buf, len);
    if (total <= 0 || len < (size_t)total)
        return total < 0 ? -1 : 0;
    uint64_t n = 0;
    int vl = varint5(buf, len, &n); /* the prefix tg_link_ctl_size read */
    *msg = buf + vl;
    *mlen = (size_t)n;
    return total;
}

/* the one rule for node names is libtracegate's (base/node_name.h) */
int tg_link_node_name_ok(const char *name) { return tg_node_name_ok(name); }

int tg_link_lost_key_ok(const char *key, size_t n) { return n && n <= TG_LINK_LOST_MAX && tg_node_name_chars_ok(key, n); }

int tg_link_parse_path(const char *path, size_t len, char *name, size_t namelen, int *producer)
{
    static const char pre[] = "/node/";
    if (len <= sizeof pre - 1 || memcmp(path, pre, sizeof pre - 1) != 0)
        return -1;
    const char *p = path + sizeof pre - 1;
    const char *end = path + len;
    const char *slash = memchr(p, '/', (size_t)(end - p));
    if (!slash || (size_t)(slash - p) >= namelen || (size_t)(slash - p) > 63)
        return -1;
    memcpy(name, p, (size_t)(slash - p));
    name[slash - p] = '\0';
    if (!tg_link_node_name_ok(name))
        return -1;
    size_t rest = (size_t)(end - slash - 1);
    if (rest == 8 && memcmp(slash + 1, "consumer", 8) == 0)
        *producer = 0;
    else if (rest == 8 && memcmp(slash + 1, "producer", 8) == 0)
        *producer = 1;
    else if (rest == 3 && memcmp(slash + 1, "adb", 3) == 0)
        *producer = 2; /* the node's ADB server, a raw byte stream (docs/link-protocol.md §3.3) */
    else
        return -1;
    return 0;
}
