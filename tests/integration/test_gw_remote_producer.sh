#!/bin/sh
# test_gw_remote_producer.sh: remote producers through tracegated's SMB bridge, end to end.
# tracegated runs its embedded service on temp UNIX sockets (the service hands out real shared
# memory), a TCP producer listener, a UNIX producer listener and the HTTP/WebSocket front end.
# Three tracegate-demo producers: over the gateway's TCP producer listener and over WebSocket
# (ws://.../producer) -- both get shmem emulation from the gateway, which copies their inline
# chunks into the service's SMB (smb-bridge filter) -- and over the gateway's UNIX producer
# listener, which must get the real SMB fd passed through (no bridge). `tracectl record` on the
# service's consumer socket until data is in (then Ctrl-C), then `tracectl dump`: every DrawFrame
# slice each demo says it drew is in the trace; /metrics and the log show the bridge copied chunks
# for the TCP and WS producers only. Then two more remote demos join while a second recording
# runs (their SetupTracing arrives right behind their RegisterDataSource reply) and all they drew
# is in that trace.
# Environment (from `make check`): TG_BUILDDIR, TG_SRCDIR. Exit 77 = skipped.
set -u

. "${TG_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}/tests/integration/gw_lib.sh"
need "$TRACEGATED" "$TRACECTL" "$DEMO" "$CLIENT"
if ! "$TRACEGATED" --help 2>&1 | grep -q -- "--http "; then
    echo "SKIP: this tracegated has no --http (no WebSocket front end)"
    exit 77
fi
HAVE_CURL=0
command -v curl >/dev/null 2>&1 && HAVE_CURL=1

# ---- tracegated: embedded service + TCP and UNIX producer listeners + HTTP on a free port ----
LOG=$T/gw.log
start_gw_http gw --listen "producer=tcp://127.0.0.1:0" --listen "producer=unix:$T/gw-producer.sock"
HTTP=$HTTP_PORT
PADDR=$(sed -n 's/.*listening: producer tcp:\/\/\([^ ]*\) (.*/\1/p' "$LOG" | head -n 1)
[ -n "$PADDR" ] || fail "no TCP producer listener in the log"
grep -q "listening: producer unix://$T/gw-producer.sock" "$LOG" || fail "no UNIX producer listener in the log"
echo "tracegated: producer listeners tcp://$PADDR and unix:$T/gw-producer.sock, ws://127.0.0.1:$HTTP/producer"

# ---- three demo producers, all through the gateway (they exit by themselves: --duration) ----
"$DEMO" --producer-socket "$PADDR" --name demo-tcp --duration 1200 >"$T/demo_tcp.log" 2>&1 &
TCP_PID=$!
PIDS="$PIDS $TCP_PID"
"$DEMO" --producer-socket "ws://127.0.0.1:$HTTP/producer" --name demo-ws --duration 1200 >"$T/demo_ws.log" 2>&1 &
WS_PID=$!
PIDS="$PIDS $WS_PID"
"$DEMO" --producer-socket "$T/gw-producer.sock" --name demo-unix --duration 1200 >"$T/demo_unix.log" 2>&1 &
UNIX_PID=$!
PIDS="$PIDS $UNIX_PID"

demos_up() {
    tg_timeout 10 "$TRACECTL" query "unix:$T/gw-c.sock" >"$T/query.txt" 2>&1
    n=$(sed -n '/^PRODUCERS CONNECTED/,/^DATA SOURCES/p' "$T/query.txt" | grep -c 'demo-\(tcp\|ws\|unix\)')
    [ "$n" -ge 3 ]
}
wait_for 60 demos_up || fail "the three demo producers did not connect (saw $n): $(cat "$T/query.txt")"
grep -q "tcp client 127.0.0.1:[0-9]* on the producer port" "$LOG" || fail "the TCP demo did not use the gateway"
grep -q "ws client .* on the producer port" "$LOG" || fail "the WS demo did not use the gateway"
grep -q "unix client unix(pid=$UNIX_PID.* on the producer port" "$LOG" || fail "the UNIX demo did not use the gateway"
# the remote demos were offered emulation (by the gateway); the UNIX one maps the real SMB
grep -q "registered with the tracing service .*shmem emulation" "$T/demo_tcp.log" ||
    fail "the TCP demo did not get shmem emulation"
grep -q "registered with the tracing service .*shmem emulation" "$T/demo_ws.log" ||
    fail "the WS demo did not get shmem emulation"
grep -q "registered with the tracing service" "$T/demo_unix.log" || fail "the UNIX demo did not register"
if grep -q "shmem emulation" "$T/demo_unix.log"; then fail "the UNIX demo was given shmem emulation"; fi

# ---- record on the service's consumer socket until every demo drew into it, then Ctrl-C ----
OUT=$T/out.pftrace
"$TRACECTL" record "unix:$T/gw-c.sock" -o "$OUT" >"$T/record.log" 2>&1 &
RPID=$!
PIDS="$PIDS $RPID"
for d in tcp ws unix; do
    wait_for_line 60 "$T/demo_$d.log" "session instance [0-9]* started" || fail "the $d demo did not start tracing"
    wait_for_line 60 "$T/demo_$d.log" "first frame drawn" || fail "the $d demo drew nothing"
done
kill -INT "$RPID"
wait_exit "$RPID" 60
[ "$WAIT_RC" = 0 ] || fail "tracectl record exited $WAIT_RC: $(cat "$T/record.log")"
[ -s "$OUT" ] || fail "tracectl record wrote no trace"
tg_timeout 30 "$TRACECTL" dump "$OUT" >"$T/dump.txt" 2>"$T/dump.log" || fail "tracectl dump failed: $(cat "$T/dump.log")"
if grep -q UNDECODABLE "$T/dump.txt"; then fail "undecodable packets in the trace"; fi

# DrawFrame slices on the main-thread sequence of a demo (by pid)
drawframes() {
    s=$(awk -v p="$1" '$6 == "track_descriptor" && index($0, "thread{pid=" p " tid=" p " ") {
        split($4, a, "="); print a[2]; exit }' "$T/dump.txt")
    if [ -z "$s" ]; then echo 0; return; fi
    awk -v s="seq=$s" '$4 == s && /SLICE_BEGIN "DrawFrame"/' "$T/dump.txt" | wc -l
}
# every frame a demo drew in the session is in the trace (it logs the count when the session stops)
for who in tcp:$TCP_PID ws:$WS_PID unix:$UNIX_PID; do
    name=${who%%:*}
    pid=${who#*:}
    grep -q "process{pid=$pid " "$T/dump.txt" || fail "nothing from the $name demo (pid $pid) in the trace"
    wait_for_line 30 "$T/demo_$name.log" "session instance [0-9]* stopped after" || fail "the $name demo did not stop"
    drew=$(sed -n 's/.*session instance [0-9]* stopped after \([0-9]*\) frames.*/\1/p' "$T/demo_$name.log" | head -n 1)
    df=$(drawframes "$pid")
    [ "$drew" -ge 1 ] && [ "$df" = "$drew" ] ||
        fail "the $name demo (pid $pid) drew $drew frames but the trace has $df DrawFrame slices"
    echo "$name demo: $df DrawFrame slices (all it drew)"
done

# ---- the bridge did the work for the remote producers, and only for them ----
grep -q "SMB bridge active for tcp 127.0.0.1:" "$LOG" || fail "the SMB bridge did not run for the TCP producer"
grep -q "SMB bridge active for ws " "$LOG" || fail "the SMB bridge did not run for the WS producer"
if grep -q "SMB bridge active for unix" "$LOG"; then fail "the SMB bridge ran for a UNIX producer"; fi
if grep -q "closing producer" "$LOG"; then fail "the SMB bridge closed a producer"; fi
if [ $HAVE_CURL = 1 ]; then
    curl -s --max-time "$(tg_secs 10)" -o "$T/metrics.txt" "http://127.0.0.1:$HTTP/metrics" || fail "/metrics unreachable"
    chunks=$(sed -n 's/^tracegated_smb_bridge_chunks_total \([0-9]*\)$/\1/p' "$T/metrics.txt")
    commits=$(sed -n 's/^tracegated_smb_bridge_commits_total \([0-9]*\)$/\1/p' "$T/metrics.txt")
    [ -n "$chunks" ] && [ "$chunks" -gt 0 ] || fail "no chunks copied by the SMB bridge (metrics: '$chunks')"
    [ -n "$commits" ] && [ "$commits" -gt 0 ] || fail "no CommitData rewritten by the SMB bridge"
    echo "metrics: $chunks chunks copied in $commits commits"
else
    echo "(curl not available: /metrics not checked)"
fi

# ---- late joiners: remote producers that connect while a session runs ----
# The service answers their RegisterDataSource and sends SetupTracing (with the SMB descriptor)
# back to back; the gateway may read both at once and must still hand the descriptor to
# SetupTracing, not to the reply read before it.
OUT2=$T/late.pftrace
"$TRACECTL" record "unix:$T/gw-c.sock" -o "$OUT2" >"$T/record2.log" 2>&1 &
RPID=$!
PIDS="$PIDS $RPID"
second_session() { [ "$(grep -c "session instance [0-9]* started" "$T/demo_unix.log")" -ge 2 ]; }
wait_for 60 second_session || fail "the second session did not start"
"$DEMO" --producer-socket "$PADDR" --name demo-tcp-late --duration 1200 >"$T/demo_tcplate.log" 2>&1 &
TCPL_PID=$!
PIDS="$PIDS $TCPL_PID"
"$DEMO" --producer-socket "ws://127.0.0.1:$HTTP/producer" --name demo-ws-late --duration 1200 >"$T/demo_wslate.log" 2>&1 &
WSL_PID=$!
PIDS="$PIDS $WSL_PID"
for d in tcplate wslate; do
    wait_for_line 60 "$T/demo_$d.log" "first frame drawn" || fail "the late $d demo drew nothing: $(cat "$T/demo_$d.log")"
done
kill -INT "$RPID"
wait_exit "$RPID" 60
[ "$WAIT_RC" = 0 ] || fail "the second tracectl record exited $WAIT_RC: $(cat "$T/record2.log")"
tg_timeout 30 "$TRACECTL" dump "$OUT2" >"$T/dump.txt" 2>"$T/dump.log" || fail "tracectl dump failed: $(cat "$T/dump.log")"
for who in tcplate:$TCPL_PID wslate:$WSL_PID; do
    name=${who%%:*}
    pid=${who#*:}
    wait_for_line 30 "$T/demo_$name.log" "session instance [0-9]* stopped after" || fail "the late $name demo did not stop"
    if grep -q "disconnected from" "$T/demo_$name.log"; then
        fail "the late $name demo lost its connection: $(grep "disconnected from" "$T/demo_$name.log")"
    fi
    drew=$(sed -n 's/.*session instance [0-9]* stopped after \([0-9]*\) frames.*/\1/p' "$T/demo_$name.log" | head -n 1)
    df=$(drawframes "$pid")
    [ "$drew" -ge 1 ] && [ "$df" = "$drew" ] ||
        fail "the late $name demo (pid $pid) drew $drew frames but the trace has $df DrawFrame slices"
    echo "late $name demo: $df DrawFrame slices (all it drew)"
done
if grep -q "closing producer" "$LOG"; then fail "the SMB bridge closed a late producer: $(grep "closing producer" "$LOG")"; fi
kill "$TCPL_PID" "$WSL_PID" 2>/dev/null
for p in $TCPL_PID $WSL_PID; do
    wait_exit "$p" 20
    [ "$WAIT_RC" = 0 ] || fail "late demo $p exited with $WAIT_RC"
done

# ---- the producers leave: their sessions log what the bridge copied ----
kill "$TCP_PID" "$WS_PID" "$UNIX_PID" 2>/dev/null
for p in $TCP_PID $WS_PID $UNIX_PID; do
    wait_exit "$p" 20
    [ "$WAIT_RC" = 0 ] || fail "demo $p exited with $WAIT_RC"
done
two_summaries() { [ "$(grep -c 'SMB bridge copied [1-9][0-9]* chunks' "$LOG")" -ge 2 ]; }
wait_for 20 two_summaries || fail "no per-session SMB bridge summaries for the two remote producers"
grep 'SMB bridge copied' "$LOG" | sed 's/.*\(session [0-9]*: SMB bridge.*\)/\1/'

# ---- tracegated drains and exits cleanly (sanitizer builds report leaks at exit) ----
kill "$GW_PID"
wait_exit "$GW_PID" 20
[ "$WAIT_RC" = 0 ] || fail "tracegated exited with $WAIT_RC after SIGTERM"
echo "PASS"
exit 0
