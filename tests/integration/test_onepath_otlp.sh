#!/bin/sh
# test_onepath_otlp.sh: OnePath's OTLP exporters. (1) ONEPATH_TRACE_OTLP_FILE: three processes
# (onepath_hop sensor -> router -> storage) write OTLP/JSON lines holding exactly the spans of their
# NDJSON files, with the resource attributes; every line is checked against the OpenTelemetry JS
# project's own OTLP message definitions (npm @opentelemetry/otlp-transformer, installed into the
# build tree; that part is skipped when npm is unavailable). (2) ONEPATH_TRACE_OTLP_HTTP: a local
# collector (tests/otlp/collector.py) fails the first two POSTs with 503; every span still arrives
# once, after retries. (3) No collector and a one-request queue: spans are dropped or lost, all
# counted, none written, and the process exits normally. Exit 77 = skipped.
set -u
B=${TG_BUILDDIR:-.}
S=${TG_SRCDIR:-$(dirname "$0")/../..}
. "$S/tests/integration/tg_wait.sh"
HOP=$B/tests/integration/onepath_hop
[ -x "$HOP" ] || { echo "SKIP: $HOP not built"; exit 77; }
command -v jq >/dev/null 2>&1 || { echo "SKIP: jq not installed"; exit 77; }
command -v python3 >/dev/null 2>&1 || { echo "SKIP: python3 not installed"; exit 77; }
T=$(mktemp -d "${TMPDIR:-/tmp}/tg-onepath-otlp-XXXXXX") || exit 1
CPID=
trap '[ -n "$CPID" ] && kill $CPID 2>/dev/null; rm -rf "$T"' EXIT
fail() { echo "FAIL: $*"; for f in "$T"/*.err; do [ -f "$f" ] && { echo "-- $f"; tail -5 "$f"; }; done; exit 1; }
N=20

hop() { # hop SERVICE ARGS...
    svc=$1
    shift
    ONEPATH_TRACE_ENABLE=1 ONEPATH_TRACE_SAMPLE_RATIO=1.0 ONEPATH_TRACE_SERVICE_NAME=$svc \
        ONEPATH_TRACE_NDJSON_PATH=$T/$svc.ndjson ONEPATH_TRACE_OTLP_FILE=$T/$svc.otlp.jsonl \
        ONEPATH_TRACE_RESOURCE_ATTRIBUTES="deployment.environment=test, tracegate.node=$svc" \
        ONEPATH_TRACE_OTLP_BATCH=8 ONEPATH_HOP_STATS=1 "$HOP" "$@" 2>>"$T/$svc.err"
}
stat_of() { # stat_of FILE KIND FIELD
    sed -n "s/^stats $2 .*$3=\([0-9]*\).*/\1/p" "$1" | tail -1
}

# ---- (1) OTLP/JSON lines next to NDJSON ----
hop sensor source $N | hop router relay | hop storage sink >"$T/out" || fail "pipeline failed"
for svc in sensor router storage; do
    f=$T/$svc.otlp.jsonl
    [ -s "$f" ] || fail "$svc wrote no OTLP file"
    nd=$(wc -l <"$T/$svc.ndjson")
    ot=$(jq -s '[.[].resourceSpans[].scopeSpans[].spans[]] | length' "$f")
    [ "$nd" = "$ot" ] || fail "$svc: $nd NDJSON spans but $ot OTLP spans"
    [ "$(jq -r '.trace_id + .span_id' "$T/$svc.ndjson" | sort)" = \
        "$(jq -r '.resourceSpans[].scopeSpans[].spans[] | .traceId + .spanId' "$f" | sort)" ] || fail "$svc: ids differ"
    jq -e --arg s "$svc" '.resourceSpans[0].resource.attributes | from_entries as $a |
            ($a["service.name"].stringValue == $s) and ($a["deployment.environment"].stringValue == "test") and
            ($a["process.pid"].intValue | tonumber > 0) and ($a["tracegate.node"].stringValue == $s)' \
        <"$f" >/dev/null 2>&1 || jq -e -s --arg s "$svc" 'all(.[]; .resourceSpans[0].resource.attributes |
            map({(.key): .value}) | add | .["service.name"].stringValue == $s and
            .["deployment.environment"].stringValue == "test" and (.["process.pid"].intValue | tonumber) > 0)' \
        "$f" >/dev/null || fail "$svc: resource attributes: $(head -c 400 "$f")"
    [ "$(stat_of "$T/$svc.err" otlp-file written)" = "$nd" ] || fail "$svc: otlp-file stats: $(grep stats "$T/$svc.err")"
done
# OnePath kinds map onto OTLP's (PRODUCER 4, CONSUMER 5), parents keep the chain
jq -e -s 'map(.resourceSpans[].scopeSpans[].spans[]) | (map(.kind) | unique) == [4, 5] and
        (map(select(has("parentSpanId") | not)) | length) > 0 and
        all(.[]; (.startTimeUnixNano | tonumber) <= (.endTimeUnixNano | tonumber))' \
    "$T/sensor.otlp.jsonl" "$T/router.otlp.jsonl" "$T/storage.otlp.jsonl" >/dev/null || fail "kinds or times"
echo "ok: OTLP/JSON lines hold the same spans as the NDJSON"

validate() { # validate FILES...: the OpenTelemetry JS definitions, when npm can provide them
    if [ -z "${NODE_DIR:-}" ]; then
        NODE_DIR=SKIP
        if command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1; then
            d=$B/tests/otlp
            mkdir -p "$d"
            [ "$d/package.json" -ef "$S/tests/otlp/package.json" ] || cp "$S/tests/otlp/package.json" "$d/package.json"
            if [ -d "$d/node_modules/@opentelemetry/otlp-transformer" ] ||
                (cd "$d" && tg_timeout 150 npm install --no-audit --no-fund --loglevel=error >"$T/npm.log" 2>&1); then
                NODE_DIR=$d
            else
                echo "SKIP (OTLP schema validation): npm install of @opentelemetry/otlp-transformer failed: $(tail -2 "$T/npm.log")"
            fi
        else
            echo "SKIP (OTLP schema validation): node/npm not installed (contrib/install-deps.sh installs them)"
        fi
    fi
    [ "$NODE_DIR" = SKIP ] && return 0
    NODE_PATH=$NODE_DIR/node_modules node "$S/tests/otlp/validate_otlp.js" "$@" >"$T/validate.out" 2>&1 ||
        fail "OTLP validation: $(cat "$T/validate.out")"
    echo "ok: OpenTelemetry's OTLP definitions accept them: $(cat "$T/validate.out")"
}
validate "$T/sensor.otlp.jsonl" "$T/router.otlp.jsonl" "$T/storage.otlp.jsonl"

# ---- (2) OTLP/HTTP to a collector that fails the first two requests ----
python3 "$S/tests/otlp/collector.py" "$T/collector.port" "$T/bodies.jsonl" 2 &
CPID=$!
wait_for 20 test -s "$T/collector.port" || fail "the collector did not start"
URL=http://127.0.0.1:$(cat "$T/collector.port")/v1/traces
ONEPATH_TRACE_ENABLE=1 ONEPATH_TRACE_SAMPLE_RATIO=1.0 ONEPATH_TRACE_SERVICE_NAME=http-sensor \
    ONEPATH_TRACE_OTLP_HTTP=$URL ONEPATH_TRACE_OTLP_BACKOFF_MS=20 ONEPATH_TRACE_OTLP_BATCH=5 \
    ONEPATH_HOP_STATS=1 tg_timeout 60 "$HOP" source $N >/dev/null 2>"$T/http.err" || fail "source with OTLP/HTTP"
[ "$(stat_of "$T/http.err" otlp-http written)" = $N ] || fail "otlp-http stats: $(grep stats "$T/http.err")"
[ "$(stat_of "$T/http.err" otlp-http lost)" = 0 ] || fail "spans lost: $(grep stats "$T/http.err")"
[ "$(stat_of "$T/http.err" otlp-http stalls)" -ge 2 ] || fail "no retries counted: $(grep stats "$T/http.err")"
[ "$(grep -c ' 503$' "$T/bodies.jsonl.log")" = 2 ] || fail "collector: $(cat "$T/bodies.jsonl.log")"
got=$(jq -s '[.[].resourceSpans[].scopeSpans[].spans[]] | length' "$T/bodies.jsonl")
[ "$got" = $N ] || fail "the collector received $got spans, want $N"
[ "$(jq -r '.resourceSpans[].scopeSpans[].spans[].spanId' "$T/bodies.jsonl" | sort -u | wc -l)" = $N ] ||
    fail "spans delivered twice or missing"
echo "ok: OTLP/HTTP delivered $N spans once each after two 503s"
validate "$T/bodies.jsonl"

# ---- (3) nobody listening, one-request queue: everything counted, nothing blocks ----
ONEPATH_TRACE_ENABLE=1 ONEPATH_TRACE_SAMPLE_RATIO=1.0 ONEPATH_TRACE_OTLP_HTTP=http://127.0.0.1:1/v1/traces \
    ONEPATH_TRACE_OTLP_RETRIES=1 ONEPATH_TRACE_OTLP_BACKOFF_MS=10 ONEPATH_TRACE_OTLP_QUEUE=1 \
    ONEPATH_TRACE_OTLP_BATCH=1 ONEPATH_TRACE_FLUSH_MS=1 ONEPATH_HOP_STATS=1 \
    tg_timeout 60 "$HOP" source 200 >/dev/null 2>"$T/down.err" || fail "source with a dead collector"
q=$(stat_of "$T/down.err" otlp-http queued)
d=$(stat_of "$T/down.err" otlp-http dropped)
l=$(stat_of "$T/down.err" otlp-http lost)
w=$(stat_of "$T/down.err" otlp-http written)
sd=$(stat_of "$T/down.err" spans dropped)
[ -n "$q" ] && [ "$w" = 0 ] && [ "$q" = "$l" ] && [ $((q + d + sd)) = 200 ] ||
    fail "dead collector: $(grep stats "$T/down.err")"
echo "ok: a dead collector: $q spans queued and lost, $d dropped by the full queue, $sd by the ring, 0 written"
