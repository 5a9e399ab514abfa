/* fuzz_onepath_tlv.c: libFuzzer target for the OnePath attachment TLV decoder and the receive
 * helper: a hostile peer's attachment bytes.
 *
 * Oracles (trap on failure): the decoder never reads outside the input; for a foreign or malformed
 * attachment the user bytes are the whole input, unchanged; for a valid one they lie inside it; a
 * decoded TLV re-encodes into onepath_tlv_size bytes that decode to the same fields; onepath_recv
 * agrees with the decoder and never reports a negative latency other than -1. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tracegate/onepath.h"

#include "fuzz_check.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    onepath_tlv_t t;
    int rc = onepath_tlv_decode(data, size, &t);
    CHECK(rc == ONEPATH_OK || rc == ONEPATH_TLV_FOREIGN || rc == ONEPATH_ERR_MALFORMED);
    if (rc != ONEPATH_OK) {
        CHECK(t.user == data && t.user_len == size);
        CHECK(!t.has_traceparent && !t.has_send_ts);
    } else {
        CHECK(size >= 3 && data[0] == ONEPATH_TLV_MAGIC0 && data[1] == ONEPATH_TLV_MAGIC1);
        CHECK(t.user_len == 0 || (t.user >= data && t.user + t.user_len <= data + size));
        CHECK(!t.has_traceparent || onepath_trace_ctx_valid(&t.traceparent));
        /* re-encode what was understood and read it back */
        size_t need = onepath_tlv_size(&t), n = 0;
        CHECK(need <= t.user_len + ONEPATH_ATTACH_OVERHEAD);
        uint8_t *buf = malloc(need);
        CHECK(buf);
        CHECK(onepath_tlv_encode(&t, buf, need, &n) == ONEPATH_OK && n == need);
        onepath_tlv_t u;
        CHECK(onepath_tlv_decode(buf, n, &u) == ONEPATH_OK);
        CHECK(u.has_traceparent == t.has_traceparent && u.has_send_ts == t.has_send_ts);
        CHECK(!t.has_traceparent || memcmp(&u.traceparent, &t.traceparent, sizeof u.traceparent) == 0);
        CHECK(!t.has_send_ts || u.send_ts_ns == t.send_ts_ns);
        CHECK(u.user_len == t.user_len && (t.user_len == 0 || memcmp(u.user, t.user, t.user_len) == 0));
        free(buf);
    }
    onepath_recv_t r;
    CHECK(onepath_recv(&r, data, size, size) == rc);
    CHECK(r.user == t.user && r.user_len == t.user_len && r.has_parent == t.has_traceparent);
    CHECK(r.e2e_ns >= -1);
    return 0;
}
