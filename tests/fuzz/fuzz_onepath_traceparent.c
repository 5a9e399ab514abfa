/* fuzz_onepath_traceparent.c: libFuzzer target for the W3C traceparent parser and formatter.
 *
 * The input, cut at its first NUL, is parsed as a header. Oracles (trap on failure): an accepted
 * header yields a valid context whose formatted form equals the header's first 55 characters and
 * parses back to the same context, and only lower-case hex and '-' were accepted; the input bytes
 * taken as a binary context (26 bytes) format and re-parse to themselves exactly when valid. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tracegate/onepath.h"

#include "fuzz_check.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);
    CHECK(s);
    memcpy(s, data, size);
    s[size] = 0;
    onepath_trace_ctx_t c, d;
    char out[ONEPATH_TRACEPARENT_LEN + 1];
    if (onepath_trace_ctx_from_string(s, &c) == ONEPATH_OK) {
        size_t len = strlen(s);
        CHECK(len >= ONEPATH_TRACEPARENT_LEN);
        CHECK(c.version != 0xff && (c.version != 0 || len == ONEPATH_TRACEPARENT_LEN));
        CHECK(onepath_trace_ctx_valid(&c));
        CHECK(onepath_trace_ctx_to_string(&c, out) == ONEPATH_OK);
        CHECK(memcmp(out, s, ONEPATH_TRACEPARENT_LEN) == 0);
        for (size_t i = 0; i < ONEPATH_TRACEPARENT_LEN; i++)
            CHECK((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f') || s[i] == '-');
        CHECK(onepath_trace_ctx_from_string(out, &d) == ONEPATH_OK && memcmp(&c, &d, sizeof c) == 0);
    }
    free(s);
    if (size >= sizeof c) {
        memcpy(&c, data, sizeof c);
        int valid = onepath_trace_ctx_valid(&c);
        CHECK((onepath_trace_ctx_to_string(&c, out) == ONEPATH_OK) == valid);
        if (valid) {
            CHECK(strlen(out) == ONEPATH_TRACEPARENT_LEN);
            CHECK(onepath_trace_ctx_from_string(out, &d) == ONEPATH_OK && memcmp(&c, &d, sizeof c) == 0);
        } else {
            CHECK(out[0] == 0);
        }
    }
    return 0;
}
