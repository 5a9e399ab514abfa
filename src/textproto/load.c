/* load.c: tg_config_load(), which accepts a message as binary wire bytes or
 * as protobuf text format, telling them apart heuristically. */
#include "tracegate/textproto.h"

#include <stdio.h>
#include <string.h>

#include "textproto/lexer.h"
#include "textproto/utf8.h"

/* Text means: well-formed UTF-8 without control characters other than
 * whitespace. Returns 1, or 0 with *bad_off = offset of the first offending byte. */
static int looks_like_text(const uint8_t *s, size_t n, size_t *bad_off)
{
    size_t i = 0;
    while (i < n) {
        uint8_t c = s[i];
        if (c < 0x80) {
            if ((c < 0x20 && c != '\t' && c != '\n' && c != '\v' && c != '\f' && c != '\r') || c == 0x7f) {
                *bad_off = i;
                return 0;
            }
            i++;
            continue;
        }
        size_t k = tg_tp_utf8_seq_len(s + i, n - i);
        if (k == 0) {
            *bad_off = i;
            return 0;
        }
        i += k;
    }
    return 1;
}

int tg_config_load(const ProtobufCMessageDescriptor *desc, const uint8_t *data, size_t len,
                   ProtobufCMessage **out, char *err, size_t errlen)
{
    static const uint8_t empty[1];
    if (out)
        *out = NULL;
    if (err && errlen)
        err[0] = '\0';
    if (!desc || !out || (!data && len)) {
        tg_tp_error(err, errlen, 1, 1, "invalid argument");
        return -1;
    }
    if (!data)
        data = empty;

    size_t skip = (len >= 3 && data[0] == 0xef && data[1] == 0xbb && data[2] == 0xbf) ? 3 : 0;
    size_t bad = 0;
    if (looks_like_text(data + skip, len - skip, &bad)) {
        ProtobufCMessage *msg = tg_textproto_parse(desc, (const char *)data + skip, len - skip, err, errlen);
        if (msg) {
            *out = msg;
            return 0;
        }
        /* Printable bytes can also be valid wire format. Only accept that
         * reading when it is clean, so a mistyped text config is not silently
         * taken as a binary message made of unknown fields. */
        msg = protobuf_c_message_unpack(desc, NULL, len, data);
        if (msg && msg->n_unknown_fields == 0) {
            if (err && errlen)
                err[0] = '\0';
            *out = msg;
            return 0;
        }
        if (msg)
            protobuf_c_message_free_unpacked(msg, NULL);
        return -1; /* err holds the text format error */
    }

    ProtobufCMessage *msg = protobuf_c_message_unpack(desc, NULL, len, data);
    if (!msg) {
        if (err && errlen) {
            snprintf(err, errlen,
                     "not a valid binary %s (and not text: byte 0x%02x at offset %zu is not printable UTF-8)",
                     desc->name, data[skip + bad], skip + bad);
        }
        return -1;
    }
    *out = msg;
    return 0;
}
