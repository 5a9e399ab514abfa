#!/bin/sh
# test_trace_processor_interop.sh: the trace processor the tests ask (tp_lib.sh: Chromium's build
# of Perfetto's trace processor, driven by tp_query) answers as Perfetto's trace_processor_shell
# answered for the real traces in shared/interop (traces/trace_processor_answers.txt, recorded
# with the real programs): per slice name its count and shortest and longest duration, the counter
# values, the machines, and the import errors and data losses. So the other tests' trace processor
# checks (no import error, flows) rest on the real thing reading traces as Perfetto does, and
# tp_import_ok does fail on a trace with errors (trace_detached.pftrace has two). And on traced's
# relay recording, trace processor applies the relayed machine's clock offset only once
# `tracectl merge` has added the clock anchor (docs/service.md).
# Environment (from `make check`): TG_BUILDDIR, TG_SRCDIR, TG_SHARED_DIR. Exit 77 = skipped.
set -u
B=${TG_BUILDDIR:-.}
S=${TG_SRCDIR:-$(dirname "$0")/../..}
D=${TG_SHARED_DIR:-$S/../shared}/interop/traces
T=$(mktemp -d "${TMPDIR:-/tmp}/tg-tp-interop-XXXXXX") || exit 1
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
. "$S/tests/integration/tp_lib.sh"
[ -r "$D/trace_processor_answers.txt" ] || { echo "SKIP: $D/trace_processor_answers.txt not available"; exit 77; }
tp_available || exit 77

# the recorded answers of one trace, one block per query, as tab-separated rows without headers
answers() {
    awk -v t="### $1" '$0 == t { on = 1; next } /^### / { on = 0 } on' "$D/trace_processor_answers.txt" |
        awk 'BEGIN { q = 0 } /^$/ { q++; next } /^"[a-z_]+"(,"[a-z_]+")*$/ { next } { print q "\t" $0 }' |
        sed 's/"//g; s/,/\t/g' | sort
}

Q1="select name, count(*), min(dur), max(dur) from slice group by name"
Q2="select count(*) from counter"
Q3="select id, raw_id from machine"
Q4="select name, severity, value from stats where severity in ('error', 'data_loss') and value > 0"
n=0
for trace in trace_unix trace_tcp_producer trace_relay trace_detached; do
    f=$D/$trace.pftrace
    [ -r "$f" ] || fail "$f is missing"
    answers "$trace.pftrace" >"$T/want"
    [ -s "$T/want" ] || fail "no recorded answers for $trace"
    : >"$T/got"
    q=0
    for sql in "$Q1" "$Q2" "$Q3" "$Q4"; do
        tp_rows "$f" "$sql" | sed "s/^/$q\t/" >>"$T/got"
        q=$((q + 1))
    done
    sort -o "$T/got" "$T/got"
    cmp -s "$T/want" "$T/got" || fail "$trace: trace processor answers differently:
$(diff "$T/want" "$T/got")"
    n=$((n + 1))
done
echo "ok: $n traces answered as trace_processor_shell answered"

# tp_import_ok passes a clean trace and fails the detached one (its two recorded errors)
(tp_import_ok "$D/trace_unix.pftrace") >"$T/clean.out" 2>&1 || fail "tp_import_ok failed a clean trace: $(cat "$T/clean.out")"
if (tp_import_ok "$D/trace_detached.pftrace") >"$T/bad.out" 2>&1; then
    fail "tp_import_ok passed a trace with import errors"
fi
grep -q "config_write_into_file_no_flush = 1" "$T/bad.out" || fail "the errors are not named: $(cat "$T/bad.out")"
(tp_import_ok "$D/trace_detached.pftrace" config_write_into_file_no_flush config_write_into_file_discard) \
    >"$T/allowed.out" 2>&1 || fail "allowed stats still fail: $(cat "$T/allowed.out")"
echo "ok: tp_import_ok fails on import errors and names them"

# traced's own relay recording: trace processor leaves the relayed machine at its raw times (the
# relayed SDK producer's ClockSnapshot comes before any of that machine's timestamps), though its
# RemoteClockSync says it is 21.9 ms ahead. `tracectl merge` adds the clock anchor after the sync,
# so that the machine's packets move by the offset its stitched spans are placed with: trace
# processor then puts them exactly that much earlier. A second merge adds none.
TC=$B/src/tracectl/tracectl
if [ -x "$TC" ]; then
    echo '{"trace_id":"0af7651916cd43dd8448eb211c80319c","span_id":"b7ad6b7169203331","name":"check","start_ns":1796208212815477833,"end_ns":1796208212816477833,"resource":{"service.name":"check"}}' >"$T/one.ndjson"
    "$TC" merge "$D/trace_relay.pftrace" "$T/one.ndjson" -o "$T/anchored.pftrace" 2>"$T/merge.log" || fail "merge: $(cat "$T/merge.log")"
    grep -q "a clock anchor added after 1 machine's RemoteClockSync" "$T/merge.log" || fail "no anchor added: $(cat "$T/merge.log")"
    "$TC" merge "$T/anchored.pftrace" "$T/one.ndjson" -o "$T/twice.pftrace" 2>"$T/merge2.log" || fail "merge 2"
    if grep -q "clock anchor added" "$T/merge2.log"; then fail "a second anchor was added: $(cat "$T/merge2.log")"; fi
    "$TC" dump "$T/twice.pftrace" >"$T/twice.txt" 2>&1 || fail "dump"
    grep -A1 '^#.* remote_clock_sync ' "$T/twice.txt" | sed -n 2p | grep -q ' clock_anchor .*machine=119080633$' ||
        fail "the anchor is not right after the sync: $(grep -A1 '^#.* remote_clock_sync ' "$T/twice.txt")"
    off=$("$TC" dump --summary "$D/trace_relay.pftrace" | sed -n 's/^clock sync: machine 119080633: .* BOOTTIME offset \([-+][0-9]*\) ns.*/\1/p')
    first() { tp_rows "$1" "select min(s.ts) from slice s join thread_track tt on tt.id = s.track_id join thread t using (utid)
        join machine m on m.id = t.machine_id where m.raw_id = 119080633"; }
    raw=$(first "$D/trace_relay.pftrace")
    placed=$(first "$T/anchored.pftrace")
    [ -n "$off" ] && [ -n "$raw" ] && [ -n "$placed" ] || fail "offset '$off', first slice '$raw' / '$placed'"
    awk -v r="$raw" -v p="$placed" -v o="$off" 'BEGIN { d = r - p - o; exit !(d <= 2 && d >= -2) }' ||
        fail "with the anchor the relayed machine's first slice is at $placed, without it $raw, its offset $off"
    echo "ok: traced's relay trace: trace processor applies the relayed machine's offset ($off ns) once anchored"
fi
