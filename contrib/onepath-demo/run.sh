#!/bin/sh
# run.sh: runs the OnePath demo chain sensor -> router -> storage with tracing switched on by
# environment variables, prints the spans grouped by trace (jq), and with --trace TRACE stitches
# them into a copy of that Perfetto trace (tracectl merge).
# Usage: run.sh [--count N] [--out DIR] [--trace TRACE.pftrace]
# The programs are looked for in $ONEPATH_DEMO_BIN, else beside this script (in-tree build), else
# in ../../_build/contrib/onepath-demo; tracectl in $TRACECTL or the same build tree.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
count=5 out=onepath-demo-out trace=
while [ $# -gt 0 ]; do
    case $1 in
    --count) count=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --trace) trace=$2; shift 2 ;;
    *) echo "usage: $0 [--count N] [--out DIR] [--trace TRACE.pftrace]" >&2; exit 2 ;;
    esac
done
bin=${ONEPATH_DEMO_BIN:-}
for d in "$here" "$here/../../_build/contrib/onepath-demo"; do
    [ -z "$bin" ] && [ -x "$d/sensor" ] && bin=$d
done
[ -n "$bin" ] || { echo "run.sh: build first (make), or set ONEPATH_DEMO_BIN" >&2; exit 1; }
tracectl=${TRACECTL:-$bin/../../src/tracectl/tracectl}
mkdir -p "$out"
rm -f "$out"/*.ndjson "$out"/*.port "$out"/stored.txt

# one process per service; each writes its own NDJSON span file
traced() { # traced SERVICE PROGRAM ARGS...
    svc=$1
    shift
    ONEPATH_TRACE_ENABLE=1 ONEPATH_TRACE_SAMPLE_RATIO=1.0 ONEPATH_TRACE_SERVICE_NAME=$svc \
        ONEPATH_TRACE_NDJSON_PATH=$out/$svc.ndjson "$@"
}
wait_file() { # the listeners write their port once they listen; 30 s is a safety net only
    n=0
    while [ ! -s "$1" ]; do
        n=$((n + 1))
        [ $n -lt $((300 * ${TG_TEST_TIMEOUT_SCALE:-1})) ] || { echo "run.sh: $1 did not appear" >&2; return 1; }
        sleep 0.1
    done
}
traced storage "$bin/storage" "$out/storage.port" "$out/stored.txt" &
spid=$!
wait_file "$out/storage.port"
traced router "$bin/router" "$out/router.port" "$out/storage.port" &
rpid=$!
wait_file "$out/router.port"
traced sensor "$bin/sensor" "$out/router.port" "$count"
wait $rpid
wait $spid

if command -v jq >/dev/null 2>&1; then
    echo "traces (jq -s 'group_by(.trace_id)'):"
    jq -s -c 'group_by(.trace_id) | .[] | {trace: .[0].trace_id,
        hops: [sort_by(.start_ns)[] | "\(.resource["service.name"]):\(.name)"]}' \
        "$out/sensor.ndjson" "$out/router.ndjson" "$out/storage.ndjson"
fi
if [ -n "$trace" ]; then
    "$tracectl" merge "$trace" "$out/sensor.ndjson" "$out/router.ndjson" "$out/storage.ndjson" \
        -o "$out/merged.pftrace"
    echo "open $out/merged.pftrace in https://ui.perfetto.dev"
fi
