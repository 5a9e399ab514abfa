/* fuzz_textproto.c: fuzz target for the protobuf text format reader/printer.
 * Parses arbitrary bytes as a perfetto.protos.TraceConfig in text format; on
 * success prints the message (indented and single-line) and checks that each
 * printout parses back to the very same wire bytes. The same bytes also go
 * through tg_config_load() (binary-or-text detection, printing of unknown
 * fields). Must never crash, leak, or trip ASan/UBSan. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "trace_config.pb-c.h"
#include "tracegate/textproto.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_reparse(const ProtobufCMessageDescriptor *desc, const char *text, const uint8_t *want,
                          size_t want_len)
{
    char err[256];
    uint8_t *got = NULL;
    size_t got_len = 0;
    if (tg_textproto_to_binary(desc, text, strlen(text), &got, &got_len, err, sizeof err) != 0)
        __builtin_trap(); /* the printer produced text the reader rejects */
    if (got_len != want_len || memcmp(got, want, want_len) != 0)
        __builtin_trap(); /* print -> parse is not the identity */
    free(got);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const ProtobufCMessageDescriptor *desc = &perfetto__protos__trace_config__descriptor;
    char err[256];
    uint8_t *bin = NULL;
    size_t bin_len = 0;

    if (tg_textproto_to_binary(desc, (const char *)data, size, &bin, &bin_len, err, sizeof err) == 0) {
        ProtobufCMessage *msg = protobuf_c_message_unpack(desc, NULL, bin_len, bin);
        if (!msg)
            __builtin_trap(); /* the reader emitted bytes protobuf-c cannot decode */
        for (int indent = -1; indent <= 2; indent += 3) {
            char *text = tg_textproto_print(msg, indent);
            if (text) {
                check_reparse(desc, text, bin, bin_len);
                free(text);
            }
        }
        protobuf_c_message_free_unpacked(msg, NULL);
        free(bin);
    }

    ProtobufCMessage *loaded = NULL;
    if (tg_config_load(desc, data, size, &loaded, err, sizeof err) == 0) {
        char *text = tg_textproto_print(loaded, 0);
        free(text);
        protobuf_c_message_free_unpacked(loaded, NULL);
    }
    return 0;
}
