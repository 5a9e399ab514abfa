#!/bin/sh
# test_onepath_pipeline.sh: three OnePath processes (sensor -> router -> storage, onepath_hop over
# pipes), switched on by environment variables only. jq groups the three NDJSON span files by
# trace id, as docs/onepath.md shows: every message is one trace of four spans across three
# services with unbroken parent links; the router's metrics NDJSON counts the messages and their
# end-to-end latency. Then a sensor without tracing: the router treats its plain attachments as
# user bytes (the sink checks them) and starts new traces. Exit 77 = skipped.
set -u
B=${TG_BUILDDIR:-.}
HOP=$B/tests/integration/onepath_hop
[ -x "$HOP" ] || { echo "SKIP: $HOP not built"; exit 77; }
command -v jq >/dev/null 2>&1 || { echo "SKIP: jq not installed (contrib/install-deps.sh)"; exit 77; }
T=$(mktemp -d "${TMPDIR:-/tmp}/tg-onepath-pipe-XXXXXX") || exit 1
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
N=25

hop() { # hop SERVICE ARGS...: one process with tracing + metrics on, files named after SERVICE
    svc=$1
    shift
    ONEPATH_TRACE_ENABLE=1 ONEPATH_TRACE_SAMPLE_RATIO=1.0 ONEPATH_TRACE_SERVICE_NAME=$svc \
        ONEPATH_TRACE_NDJSON_PATH=$T/$svc.ndjson ONEPATH_METRICS_ENABLE=1 \
        ONEPATH_METRICS_NDJSON_PATH=$T/$svc.metrics.ndjson "$HOP" "$@"
}

hop sensor source $N | hop router relay | hop storage sink >"$T/out" || fail "pipeline failed"
grep -qx "received $N" "$T/out" || fail "sink: $(cat "$T/out")"

# the jq view of the docs: traces and their hops
jq -s 'group_by(.trace_id) | map({trace: .[0].trace_id,
        hops: [.[] | {svc: .resource["service.name"], span: .name, kind: .kind, dur_ms: (.duration_ns/1e6)}]})' \
    "$T/sensor.ndjson" "$T/router.ndjson" "$T/storage.ndjson" >"$T/traces.json" || fail "jq cannot read the NDJSON"
[ "$(jq length "$T/traces.json")" = "$N" ] || fail "expected $N traces: $(jq length "$T/traces.json")"
jq -e 'all(.[]; (.hops | length) == 4 and
        ([.hops[].svc] | sort) == ["router", "router", "sensor", "storage"] and
        ([.hops[].kind] | sort) == ["CONSUMER", "CONSUMER", "PRODUCER", "PRODUCER"])' "$T/traces.json" >/dev/null ||
    fail "traces are not sensor/router/router/storage: $(jq -c '.[0]' "$T/traces.json")"
# parent links: one root per trace (the sensor's span), every other span's parent in the same trace,
# and the chain publish <- consume <- forward <- consume
jq -s -e 'group_by(.trace_id) | all(.[];
        (map(select(.parent_span_id == "")) | length == 1 and .[0].name == "sensor.publish") and
        (. as $t | all(.[] | select(.parent_span_id != ""); .parent_span_id as $p | any($t[]; .span_id == $p))) and
        (INDEX(.name) as $by | $by["router.consume"].parent_span_id == $by["sensor.publish"].span_id and
          $by["router.forward"].parent_span_id == $by["router.consume"].span_id and
          $by["storage.consume"].parent_span_id == $by["router.forward"].span_id))' \
    "$T/sensor.ndjson" "$T/router.ndjson" "$T/storage.ndjson" >/dev/null || fail "broken parent links"
echo "ok: $N traces of 4 spans across sensor, router, storage"

# the router's final metrics lines: N received, N sent, N end-to-end latencies
m() { jq -s --arg n "$1" "map(select(.name == \$n)) | last | $2" "$T/router.metrics.ndjson"; }
[ "$(m onepath.msgs.recv .value)" = "$N" ] || fail "router msgs.recv: $(m onepath.msgs.recv .value)"
[ "$(m onepath.msgs.sent .value)" = "$N" ] || fail "router msgs.sent: $(m onepath.msgs.sent .value)"
[ "$(m onepath.e2e.latency .count)" = "$N" ] || fail "router e2e count: $(m onepath.e2e.latency .count)"
[ "$(m onepath.e2e.latency '.counts | length')" = 17 ] || fail "e2e buckets"
bytes=0 # payloads are "reading=<i>"
i=0
while [ $i -lt $N ]; do bytes=$((bytes + 8 + ${#i})); i=$((i + 1)); done
[ "$(m onepath.bytes.recv .value)" = "$bytes" ] || fail "router bytes.recv: $(m onepath.bytes.recv .value), want $bytes"
echo "ok: router metrics count $N messages and their end-to-end latency"

# a sensor without OnePath: plain attachments pass through as user bytes, the router starts traces
rm -f "$T"/*.ndjson
"$HOP" source $N | hop router relay | hop storage sink >"$T/out" || fail "pipeline with a plain sensor failed"
grep -qx "received $N" "$T/out" || fail "sink: $(cat "$T/out")"
[ ! -e "$T/sensor.ndjson" ] || fail "an untraced sensor wrote spans"
jq -s -e --argjson n $N 'group_by(.trace_id) | length == $n and all(.[]; length == 3 and
        (map(select(.parent_span_id == "")) | length == 1 and .[0].name == "router.consume"))' \
    "$T/router.ndjson" "$T/storage.ndjson" >/dev/null || fail "router did not start one trace per plain message"
echo "ok: plain attachments from an untraced peer delivered unchanged; traces start at the router"
