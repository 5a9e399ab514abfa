#!/bin/sh
# test_record_spans.sh: `tracectl record --spans`: tracegated with the demo producer; while the
# session records, the OnePath demo chain (sensor -> router -> storage) runs; after Ctrl-C the
# chain's NDJSON spans are stitched into the recorded trace next to the demo producer's slices,
# on the trace's clock (the trace's own snapshots) with flows between the three processes.
REC_TAG=recspans
. "$(dirname "$0")/record_lib.sh"
. "$(dirname "$0")/tp_lib.sh"
OPD=$B/contrib/onepath-demo
[ -x "$OPD/sensor" ] || { echo "SKIP: the OnePath demo is not built"; exit 77; }
command -v jq >/dev/null 2>&1 || { echo "SKIP: jq not installed"; exit 77; }

PSOCK=$T/p.sock
CSOCK=$T/c.sock
"$TRACEGATED" --producer-socket "$PSOCK" --consumer-socket "$CSOCK" --log-level info >"$T/tracegated.log" 2>&1 &
PIDS="$PIDS $!"
svc_up() { [ -S "$CSOCK" ] && tg_timeout 5 "$TRACECTL" query "unix:$CSOCK" >/dev/null 2>&1; }
wait_for 20 svc_up || fail "tracegated did not come up"
"$DEMO" --producer-socket "$PSOCK" --name demo --duration 1200 >"$T/demo.log" 2>&1 &
PIDS="$PIDS $!"
one_producer() {
    tg_timeout 10 "$TRACECTL" query "unix:$CSOCK" >"$T/query.txt" 2>&1
    [ "$(sed -n '/^PRODUCERS CONNECTED/,/^DATA SOURCES/p' "$T/query.txt" | grep -c '^[0-9]')" -ge 1 ]
}
wait_for 30 one_producer || fail "the demo producer did not connect"

N=4
O=$T/op
OUT=$T/out.pftrace
"$TRACECTL" record "unix:$CSOCK" --duration 60s -o "$OUT" --spans "$O/sensor.ndjson" --spans "$O/router.ndjson" \
    --spans "$O/storage.ndjson" >"$T/record.log" 2>&1 &
RPID=$!
PIDS="$PIDS $RPID"
wait_for_line 60 "$T/demo.log" "first frame drawn" || fail "the demo drew nothing"
wait_for_line 60 "$T/record.log" "recording:" || fail "no progress line"
ONEPATH_DEMO_BIN=$OPD TRACECTL=$TRACECTL tg_timeout 60 sh "$S/contrib/onepath-demo/run.sh" --count $N --out "$O" \
    >"$T/run.log" 2>&1 || fail "the OnePath demo failed: $(cat "$T/run.log")"
kill -INT "$RPID"
wait_exit "$RPID" 60
[ "$WAIT_RC" = 0 ] || fail "tracectl record exited $WAIT_RC: $(cat "$T/record.log")"
# every span is a slice; one track per (program, thread) at least (spans that overlap without
# nesting get a lane track of their own, and each lane edge its flow: both depend on timing)
set -- $(sed -n 's/.*stitched \([0-9]*\) spans as slices on \([0-9]*\) tracks with \([0-9]*\) flows.*/\1 \2 \3/p' "$T/record.log")
[ "${1:-0}" -eq $((4 * N)) ] && [ "${2:-0}" -ge 6 ] && [ "${3:-0}" -ge $((2 * N)) ] ||
    fail "stitch summary: $(cat "$T/record.log")"
tg_timeout 30 "$TRACECTL" dump "$OUT" >"$T/dump.txt" 2>&1 || fail "dump: $(tail -3 "$T/dump.txt")"
for name in sensor.publish router.route router.forward storage.store; do
    grep '^slices:' "$T/dump.txt" | grep -q "\"$name\" $N" || fail "no $N $name slices: $(grep '^slices:' "$T/dump.txt")"
done
# the demo producer's own slices are there too, and the spans lie inside the recording: their
# BOOTTIME timestamps fall between the trace's first and last clock snapshot
[ "$(grep '^slices:' "$T/dump.txt" | tr ',' '\n' | grep -vc 'sensor\|router\|storage')" -ge 1 ] ||
    fail "no demo producer slices"
ts_of() { grep "$1" "$T/dump.txt" | head -1 | sed -n 's/.* ts=\([0-9]*\)@6 .*/\1/p'; }
first_snap=$(grep 'clock_snapshot' "$T/dump.txt" | head -1 | sed -n 's/.* ts=\([0-9]*\)@[0-9]* .*/\1/p')
span_ts=$(ts_of 'SLICE_BEGIN "sensor.publish"')
last_ts=$(grep ' ts=[0-9]*@6 ' "$T/dump.txt" | sed -n 's/.* ts=\([0-9]*\)@6 .*/\1/p' | sort -n | tail -1)
[ -n "$span_ts" ] || fail "no sensor.publish timestamp"
if [ -n "$first_snap" ]; then
    [ "$span_ts" -ge "$first_snap" ] || fail "span at $span_ts before the first snapshot $first_snap"
fi
[ "$span_ts" -le "$last_ts" ] || fail "span after the trace's end"
echo "ok: record --spans stitched $((4 * N)) slices and $((2 * N)) flows into the recording"
# Perfetto's own trace processor reads the recording with its stitched spans: no import error, all
# the stitched flows in its flow table, and the spans between the service's first and last clock
# snapshot (taken when tracing started and when it was read)
if tp_available; then
    tp_import_ok "$OUT"
    [ "$(tp_rows "$OUT" "select count(*) from flow f join slice s on s.id = f.slice_out where s.category = 'onepath'")" -eq "$3" ] ||
        fail "trace processor's flow table has not the $3 stitched flows"
    [ "$(tp_rows "$OUT" "select count(*) from slice s, (select min(ts) a, max(ts) z from clock_snapshot
        where machine_id = 0) c where s.category = 'onepath' and s.ts >= c.a and s.ts + s.dur <= c.z")" -eq $((4 * N)) ] ||
        fail "trace processor does not put the $((4 * N)) spans between the service's first and last clock snapshot"
    echo "ok: trace processor links the $3 flows"
fi
