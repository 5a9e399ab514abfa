#!/bin/sh
# test_onepath_demo.sh: the OnePath demo (contrib/onepath-demo: sensor -> router -> storage over
# loopback TCP, run by its run.sh) writes NDJSON in which every message is one trace spanning all
# three services; `tracectl merge` stitches the spans into the real trace_unix.pftrace from
# shared/interop (the Perfetto SDK example's DrawGame/DrawPlayer slices). The result is decoded
# with tracectl's reader (slices, tracks) and with protoc --decode_raw (every flow starts on one
# slice and ends on another track's: sensor.publish -> router.route, router.forward ->
# storage.store, and router.route -> router.forward when timing put them on two tracks).
# Exit 77 = skipped.
set -u
B=${TG_BUILDDIR:-.}
S=${TG_SRCDIR:-$(dirname "$0")/../..}
. "$S/tests/integration/tg_wait.sh"
. "$S/tests/integration/tp_lib.sh"
D=$B/contrib/onepath-demo
TC=$B/src/tracectl/tracectl
[ -x "$D/sensor" ] && [ -x "$TC" ] || { echo "SKIP: demo or tracectl not built"; exit 77; }
command -v jq >/dev/null 2>&1 || { echo "SKIP: jq not installed (contrib/install-deps.sh)"; exit 77; }
T=$(mktemp -d "${TMPDIR:-/tmp}/tg-onepath-demo-XXXXXX") || exit 1
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
N=6

ONEPATH_DEMO_BIN=$D TRACECTL=$TC tg_timeout 60 sh "$S/contrib/onepath-demo/run.sh" --count $N --out "$T/out" \
    >"$T/run.log" 2>&1 || fail "run.sh failed: $(cat "$T/run.log")"
grep -q "storage: stored $N" "$T/run.log" || fail "storage did not store $N: $(cat "$T/run.log")"
[ "$(wc -l <"$T/out/stored.txt")" -eq $N ] || fail "stored.txt"

# one trace id spans all three services, for every message
O=$T/out
jq -s -e --argjson n $N 'group_by(.trace_id) | length == $n and all(.[];
        ([.[].resource["service.name"]] | unique) == ["router", "sensor", "storage"] and
        ([.[].name] | sort) == ["router.forward", "router.route", "sensor.publish", "storage.store"] and
        (map(select(.parent_span_id == "")) | length) == 1)' \
    "$O/sensor.ndjson" "$O/router.ndjson" "$O/storage.ndjson" >/dev/null ||
    fail "traces do not span sensor, router, storage: $(jq -s -c 'group_by(.trace_id) | .[0]' "$O"/*.ndjson)"
jq -e 'has("thread") and (.resource["process.pid"] > 0)' "$O/router.ndjson" >/dev/null || fail "no thread/pid"
echo "ok: $N traces, each across sensor, router and storage"

TRACE=${TG_SHARED_DIR:-$S/../shared}/interop/traces/trace_unix.pftrace
if [ ! -r "$TRACE" ]; then
    echo "SKIP (merge part): $TRACE not available"
    exit 0
fi
"$TC" merge "$TRACE" "$O/sensor.ndjson" "$O/router.ndjson" "$O/storage.ndjson" -o "$T/merged.pftrace" \
    2>"$T/merge.log" || fail "merge: $(cat "$T/merge.log")"
# every span is a slice; one track per (program, thread) at least (spans that overlap without
# nesting get a lane track of their own, which depends on timing); a flow per cross-track edge
# (router.forward usually nests in router.route on the router's track; when it outlives
# router.route it gets a lane track, and that parent -> child edge becomes a flow too)
set -- $(sed -n 's/.*stitched \([0-9]*\) spans as slices on \([0-9]*\) tracks with \([0-9]*\) flows.*/\1 \2 \3/p' "$T/merge.log")
[ "${1:-0}" -eq $((4 * N)) ] && [ "${2:-0}" -ge 6 ] && [ "${3:-0}" -ge $((2 * N)) ] && [ "${3:-0}" -le $((3 * N)) ] ||
    fail "merge summary: $(cat "$T/merge.log")"
FLOWS=$3

# the project's own reader: the original slices are all still there, next to the demo's
"$TC" dump "$TRACE" >"$T/orig.txt" || fail "dump of the original"
"$TC" dump "$T/merged.pftrace" >"$T/merged.txt" || fail "dump of the merged trace: $(tail -3 "$T/merged.txt")"
orig_slices=$(grep '^slices:' "$T/orig.txt")
for name in DrawGame DrawPlayer; do
    want=$(echo "$orig_slices" | grep -o "\"$name\" [0-9]*")
    [ -n "$want" ] || fail "the original trace has no $name slices?"
    grep '^slices:' "$T/merged.txt" | grep -q "$want" || fail "$name slices changed: $(grep '^slices:' "$T/merged.txt")"
done
for name in sensor.publish router.route router.forward storage.store; do
    grep '^slices:' "$T/merged.txt" | grep -q "\"$name\" $N" || fail "no $N $name slices"
done
# every flow has its two ends on slices: the dump's flows=K summed over the slices
ends=$(grep -o 'flows=[0-9]*' "$T/merged.txt" | awk -F= '{ s += $2 } END { print s + 0 }')
[ "$ends" -eq $((2 * FLOWS)) ] || fail "flow ends: $ends on the slices for $FLOWS flows"

echo "ok: merged into $(basename "$TRACE"): $orig_slices + the demo's $((4 * N)) slices"

# the flows as trace processor links them (by time, flow id by flow id): every message's two arrows
"$TC" dump --flows "$T/merged.pftrace" >"$T/linked.txt" || fail "dump --flows: $(tail -n 3 "$T/linked.txt")"
grep -qx "flows: $FLOWS" "$T/linked.txt" || fail "$FLOWS flows stitched, linked: $(grep '^flows' "$T/linked.txt")"
[ "$(grep -c '^"sensor.publish" on "sensor-main [0-9]*" -> "router.route" on "router-[^"]*" ' "$T/linked.txt")" -eq $N ] ||
    fail "sensor -> router arrows: $(cat "$T/linked.txt")"
[ "$(grep -c '^"router.forward" on "router-[^"]*" -> "storage.store" on "storage-main [0-9]*" ' "$T/linked.txt")" -eq $N ] ||
    fail "router -> storage arrows: $(cat "$T/linked.txt")"
echo "ok: dump --flows links the $FLOWS flows, sensor -> router -> storage for each message"

# the same in Perfetto's own trace processor: no import error, every flow in its flow table, and
# each message's two arrows between the three services' processes
if tp_available; then
    tp_import_ok "$T/merged.pftrace"
    arrows() { tp_rows "$T/merged.pftrace" "select count(*) from flow f join slice s on s.id = f.slice_out
        join slice e on e.id = f.slice_in join process_track ps on ps.id = s.track_id
        join process_track pe on pe.id = e.track_id join process po on po.upid = ps.upid
        join process pi on pi.upid = pe.upid where s.name = '$1' and po.name = '$2' and e.name = '$3' and pi.name = '$4'"; }
    [ "$(tp_rows "$T/merged.pftrace" "select count(*) from flow")" -eq "$FLOWS" ] ||
        fail "trace processor's flow table: $(tp_rows "$T/merged.pftrace" "select count(*) from flow"), stitched $FLOWS"
    [ "$(arrows sensor.publish sensor router.route router)" -eq $N ] || fail "trace processor: sensor -> router arrows"
    [ "$(arrows router.forward router storage.store storage)" -eq $N ] || fail "trace processor: router -> storage arrows"
    echo "ok: trace processor links the $FLOWS flows, sensor -> router -> storage for each message"
fi

# an independent decoder: protoc --decode_raw, and the flows read from its output
if command -v protoc >/dev/null 2>&1 && command -v python3 >/dev/null 2>&1; then
    protoc --decode_raw <"$T/merged.pftrace" >"$T/raw.txt" || fail "protoc --decode_raw cannot decode the result"
    python3 "$S/tests/integration/check_flows.py" <"$T/raw.txt" >"$T/flows.txt" || fail "flows: $(cat "$T/flows.txt")"
    [ "$(grep -c '^sensor.publish -> router.route$' "$T/flows.txt")" -eq $N ] || fail "sensor->router flows: $(cat "$T/flows.txt")"
    [ "$(grep -c '^router.forward -> storage.store$' "$T/flows.txt")" -eq $N ] || fail "router->storage flows"
    [ "$(grep -v -c -E '^(sensor.publish -> router.route|router.forward -> storage.store|router.route -> router.forward)$' "$T/flows.txt")" -eq 0 ] ||
        fail "unexpected flows: $(cat "$T/flows.txt")"
    [ "$(wc -l <"$T/flows.txt")" -eq "$FLOWS" ] || fail "$FLOWS flows stitched, protoc sees: $(cat "$T/flows.txt")"
    echo "ok: protoc --decode_raw decodes it; $FLOWS flows cross tracks"
else
    echo "note: protoc (protobuf-compiler) or python3 missing: the independent decode was skipped"
fi
