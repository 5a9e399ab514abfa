#!/bin/sh
# test_record_e2e.sh: end to end: tracegated on temp UNIX producer/consumer sockets plus a TCP
# producer address, tracegate-demo once over UNIX and once over TCP, `tracectl record` until both
# demos drew into the session (then Ctrl-C), then `tracectl dump` must show the demos' slices on
# trusted sequences >= 2 (one per transport), and the service's clock snapshots, sync marker,
# trace config and system info.
# Environment (from `make check`): TG_BUILDDIR, TG_SRCDIR, TG_SHARED_DIR. Exit 77 = skipped.
REC_TAG=rec-e2e
. "$(dirname "$0")/record_lib.sh"
. "$(dirname "$0")/tp_lib.sh"

# ---- the service, on a free TCP port (retry if another process grabbed it) ----
PSOCK=$T/p.sock
CSOCK=$T/c.sock
svc_up_or_gone() {
    ! kill -0 "$1" 2>/dev/null || { [ -S "$CSOCK" ] && tg_timeout 5 "$TRACECTL" query "unix:$CSOCK" >/dev/null 2>&1; }
}
PORT=
try=0
while [ $try -lt 8 ]; do
    try=$((try + 1))
    cand=$(( 20000 + ($$ * 7919 + try * 104729 + $(date +%N 2>/dev/null | sed 's/^0*//;s/^$/0/') ) % 40000 ))
    rm -f "$PSOCK" "$CSOCK"
    "$TRACEGATED" --producer-socket "$PSOCK,127.0.0.1:$cand" --consumer-socket "$CSOCK" \
        --log-level info >"$T/tracegated.log" 2>&1 &
    DPID=$!
    # ready = the consumer port answers (or tracegated exited: the port was taken, try another)
    wait_for 20 svc_up_or_gone "$DPID" || fail "tracegated did not come up: $(cat "$T/tracegated.log")"
    kill -0 "$DPID" 2>/dev/null && PORT=$cand
    if [ -n "$PORT" ]; then
        PIDS="$PIDS $DPID"
        break
    fi
    kill "$DPID" 2>/dev/null
    wait "$DPID" 2>/dev/null
done
[ -n "$PORT" ] || fail "tracegated did not come up (tried $try ports)"
echo "tracegated: producer $PSOCK and 127.0.0.1:$PORT, consumer $CSOCK"

# ---- two demo producers: one over UNIX (real shared memory), one over TCP (emulated SMB) ----
# (--duration: they exit by themselves even if this script is killed before its trap runs)
"$DEMO" --producer-socket "$PSOCK" --name demo-unix --duration 1200 >"$T/demo_unix.log" 2>&1 &
UNIX_PID=$!
PIDS="$PIDS $UNIX_PID"
"$DEMO" --producer-socket "127.0.0.1:$PORT" --name demo-tcp --duration 1200 >"$T/demo_tcp.log" 2>&1 &
TCP_PID=$!
PIDS="$PIDS $TCP_PID"

# wait until both producers are connected
two_producers() {
    tg_timeout 10 "$TRACECTL" query "unix:$CSOCK" >"$T/query.txt" 2>&1
    n=$(sed -n '/^PRODUCERS CONNECTED/,/^DATA SOURCES/p' "$T/query.txt" | grep -c '^[0-9]')
    [ "$n" -ge 2 ]
}
n=0
wait_for 30 two_producers || fail "the two demo producers did not connect (saw $n): $(cat "$T/query.txt")"

# ---- record (a 60 s session) until both demos drew into it and a progress line is out, then Ctrl-C ----
OUT=$T/out.pftrace
"$TRACECTL" record "unix:$CSOCK" --duration 60s -o "$OUT" >"$T/record.log" 2>&1 &
RPID=$!
PIDS="$PIDS $RPID"
for d in unix tcp; do
    wait_for_line 60 "$T/demo_$d.log" "first frame drawn" || fail "the $d demo drew nothing"
done
wait_for_line 60 "$T/record.log" "recording:" || fail "no progress line: $(cat "$T/record.log")"
kill -INT "$RPID"
wait_exit "$RPID" 60
[ "$WAIT_RC" = 0 ] || fail "tracectl record exited $WAIT_RC: $(cat "$T/record.log")"
[ -s "$OUT" ] || fail "tracectl record wrote no trace"
grep -q "wrote [0-9]* packets" "$T/record.log" || fail "no summary line: $(cat "$T/record.log")"
# the progress line is printed (plain lines: stderr is not a TTY here)
grep -q "recording:" "$T/record.log" || fail "no progress line: $(cat "$T/record.log")"

# ---- check the trace ----
tg_timeout 30 "$TRACECTL" dump "$OUT" >"$T/dump.txt" 2>"$T/dump.log"
rc=$?
[ $rc -eq 0 ] || fail "tracectl dump exited $rc: $(cat "$T/dump.log")"

# columns: #N off=.. size=.. seq=S ts=.. TYPE ...
seq_with() { # $1 = packet type -> distinct trusted sequence ids carrying it
    awk -v t="$1" '$1 ~ /^#[0-9]+$/ && $6 == t { split($4, a, "="); print a[2] }' "$T/dump.txt" | sort -u
}
has_type_on_seq1() {
    [ -n "$(seq_with "$1" | grep -x 1)" ] || fail "no $1 packet from the service (sequence 1)"
}
has_type_on_seq1 clock_snapshot
has_type_on_seq1 synchronization_marker
has_type_on_seq1 trace_config
has_type_on_seq1 system_info
grep -q 'synchronization_marker .*16 bytes (valid)' "$T/dump.txt" || fail "the sync marker is not Perfetto's"
grep -q 'trace_config .*data_sources=\[track_event\].*duration=60000 ms' "$T/dump.txt" ||
    fail "the trace config packet does not echo our config"

producer_seqs=$(seq_with track_event | awk '$1 >= 2' | wc -l)
[ "$producer_seqs" -ge 2 ] ||
    fail "expected track events on at least 2 producer sequences (UNIX + TCP demo), got $producer_seqs"
[ -z "$(seq_with track_event | awk '$1 < 2')" ] || fail "track events without a trusted producer sequence id"
# both demos (one per transport) made it into the trace: their process tracks carry their pids
grep -q "process{pid=$UNIX_PID " "$T/dump.txt" || fail "nothing from the UNIX demo (pid $UNIX_PID)"
grep -q "process{pid=$TCP_PID " "$T/dump.txt" || fail "nothing from the TCP demo (pid $TCP_PID)"
grep -q '^slices: .*"DrawFrame" [1-9]' "$T/dump.txt" || fail "the trace holds no DrawFrame slices"
grep -q 'SLICE_BEGIN "DrawFrame" \[' "$T/dump.txt" || fail "DrawFrame slices have no category"
if grep -q UNDECODABLE "$T/dump.txt"; then fail "undecodable packets in the trace"; fi

# Perfetto's own trace processor reads the service's trace with no import error or data loss, and
# finds what tracectl found: both demos' processes, their DrawFrame slices, the same slice count
if tp_available; then
    tp_import_ok "$OUT"
    for pid in $UNIX_PID $TCP_PID; do
        [ "$(tp_rows "$OUT" "select count(*) from slice s join thread_track tt on tt.id = s.track_id
            join thread using (utid) join process using (upid) where process.pid = $pid and s.name = 'DrawFrame'")" -gt 0 ] ||
            fail "trace processor finds no DrawFrame slice of pid $pid"
    done
    ours=$(sed -n 's/^slices: //p' "$T/dump.txt" | grep -o '" [0-9]*' | awk '{ s += $2 } END { print s + 0 }')
    theirs=$(tp_rows "$OUT" "select count(*) from slice")
    [ "$ours" -eq "$theirs" ] || fail "tracectl dump counts $ours slices, trace processor $theirs"
    echo "trace processor: no import error, $theirs slices, both demos' DrawFrame"
fi
echo "packets: $(sed -n 's/^packets: \([0-9]*\).*/\1/p' "$T/dump.txt"), producer sequences with track events: $producer_seqs"
sed -n '/^--$/,$p' "$T/dump.txt"
echo "PASS"
exit 0
