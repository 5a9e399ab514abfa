#!/bin/sh
# test_gw_remote_producer.sh: remote producers through tracegated's SMB bridge, end to end.
# tracegated runs its embedded service on temp UNIX sockets (the service hands out real shared
# memory), a TCP producer listener, a UNIX producer listener and the HTTP/WebSocket front end.
# Three tracegate-demo producers: over the gateway's TCP producer listener and over WebSocket
# (ws://.../producer) -- both get shmem emulation from the gateway, which copies their inline
# chunks into the service's SMB (smb-bridge filter) -- and over the gateway's UNIX producer
# listener, which must get the real SMB fd passed through (no bridge). `tracectl record` on the
# service's consumer socket for 2 s, then `tracectl dump`: every demo's DrawFrame slices are in the
# trace; /metrics and the log show the bridge copied chunks for the TCP and WS producers only.
# Environment (from `make check`): TG_BUILDDIR, TG_SRCDIR. Exit 77 = skipped.
set -u

. "${TG_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}/tests/integration/gw_lib.sh"
need "$TRACEGATED" "$TRACECTL" "$DEMO"
if ! "$TRACEGATED" --help 2>&1 | grep -q -- "--http "; then
    echo "SKIP: this tracegated has no --http (no WebSocket front end)"
    exit 77
fi
HAVE_CURL=0
command -v curl >/dev/null 2>&1 && HAVE_CURL=1

# ---- tracegated: embedded service + TCP and UNIX producer listeners + HTTP on a free port ----
LOG=$T/gw.log
HTTP=
try=0
while [ $try -lt 8 ] && [ -z "$HTTP" ]; do
    try=$((try + 1))
    cand=$(( 20000 + ($$ * 7919 + try * 104729 + $(date +%N 2>/dev/null | sed 's/^0*//;s/^$/0/') ) % 40000 ))
    rm -f "$T/gw-p.sock" "$T/gw-c.sock" "$T/gw-producer.sock"
    "$TRACEGATED" --producer-socket "$T/gw-p.sock" --consumer-socket "$T/gw-c.sock" --log-level info \
        --listen "producer=tcp://127.0.0.1:0" --listen "producer=unix:$T/gw-producer.sock" \
        --http "127.0.0.1:$cand" >"$LOG" 2>&1 &
    GW_PID=$!
    i=0
    while [ $i -lt 100 ]; do
        if grep -q "tracegated .* ready" "$LOG" 2>/dev/null; then
            HTTP=$cand
            PIDS="$PIDS $GW_PID"
            break
        fi
        kill -0 "$GW_PID" 2>/dev/null || break # --http could not bind: try another port
        sleep 0.05
        i=$((i + 1))
    done
    if [ -z "$HTTP" ]; then
        kill "$GW_PID" 2>/dev/null
        wait "$GW_PID" 2>/dev/null
    fi
done
[ -n "$HTTP" ] || fail "tracegated did not come up (tried $try HTTP ports)"
PADDR=$(sed -n 's/.*listening: producer tcp:\/\/\([^ ]*\) (.*/\1/p' "$LOG" | head -n 1)
[ -n "$PADDR" ] || fail "no TCP producer listener in the log"
grep -q "listening: producer unix://$T/gw-producer.sock" "$LOG" || fail "no UNIX producer listener in the log"
echo "tracegated: producer listeners tcp://$PADDR and unix:$T/gw-producer.sock, ws://127.0.0.1:$HTTP/producer"

# ---- three demo producers, all through the gateway (they exit by themselves: --duration) ----
"$DEMO" --producer-socket "$PADDR" --name demo-tcp --duration 120 >"$T/demo_tcp.log" 2>&1 &
TCP_PID=$!
PIDS="$PIDS $TCP_PID"
"$DEMO" --producer-socket "ws://127.0.0.1:$HTTP/producer" --name demo-ws --duration 120 >"$T/demo_ws.log" 2>&1 &
WS_PID=$!
PIDS="$PIDS $WS_PID"
"$DEMO" --producer-socket "$T/gw-producer.sock" --name demo-unix --duration 120 >"$T/demo_unix.log" 2>&1 &
UNIX_PID=$!
PIDS="$PIDS $UNIX_PID"

i=0
n=0
while [ $i -lt 150 ]; do
    timeout 5 "$TRACECTL" query "unix:$T/gw-c.sock" >"$T/query.txt" 2>&1
    n=$(sed -n '/^PRODUCERS CONNECTED/,/^DATA SOURCES/p' "$T/query.txt" | grep -c 'demo-\(tcp\|ws\|unix\)')
    [ "$n" -ge 3 ] && break
    sleep 0.1
    i=$((i + 1))
done
[ "$n" -ge 3 ] || fail "the three demo producers did not connect (saw $n): $(cat "$T/query.txt")"
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

# ---- record 2 s on the service's consumer socket ----
OUT=$T/out.pftrace
timeout 60 "$TRACECTL" record "unix:$T/gw-c.sock" --duration 2s -o "$OUT" --no-progress >"$T/record.log" 2>&1
rc=$?
[ $rc -eq 0 ] || fail "tracectl record exited $rc: $(cat "$T/record.log")"
[ -s "$OUT" ] || fail "tracectl record wrote no trace"
timeout 30 "$TRACECTL" dump "$OUT" >"$T/dump.txt" 2>"$T/dump.log" || fail "tracectl dump failed: $(cat "$T/dump.log")"
if grep -q UNDECODABLE "$T/dump.txt"; then fail "undecodable packets in the trace"; fi

# DrawFrame slices on the main-thread sequence of a demo (by pid)
drawframes() {
    s=$(awk -v p="$1" '$6 == "track_descriptor" && index($0, "thread{pid=" p " tid=" p " ") {
        split($4, a, "="); print a[2]; exit }' "$T/dump.txt")
    if [ -z "$s" ]; then echo 0; return; fi
    awk -v s="seq=$s" '$4 == s && /SLICE_BEGIN "DrawFrame"/' "$T/dump.txt" | wc -l
}
for who in tcp:$TCP_PID ws:$WS_PID unix:$UNIX_PID; do
    name=${who%%:*}
    pid=${who#*:}
    grep -q "process{pid=$pid " "$T/dump.txt" || fail "nothing from the $name demo (pid $pid) in the trace"
    df=$(drawframes "$pid")
    [ "$df" -ge 10 ] || fail "the $name demo (pid $pid) has only $df DrawFrame slices in the trace"
    echo "$name demo: $df DrawFrame slices"
done

# ---- the bridge did the work for the remote producers, and only for them ----
grep -q "SMB bridge active for tcp 127.0.0.1:" "$LOG" || fail "the SMB bridge did not run for the TCP producer"
grep -q "SMB bridge active for ws " "$LOG" || fail "the SMB bridge did not run for the WS producer"
if grep -q "SMB bridge active for unix" "$LOG"; then fail "the SMB bridge ran for a UNIX producer"; fi
if grep -q "closing producer" "$LOG"; then fail "the SMB bridge closed a producer"; fi
if [ $HAVE_CURL = 1 ]; then
    curl -s --max-time 10 -o "$T/metrics.txt" "http://127.0.0.1:$HTTP/metrics" || fail "/metrics unreachable"
    chunks=$(sed -n 's/^tracegated_smb_bridge_chunks_total \([0-9]*\)$/\1/p' "$T/metrics.txt")
    commits=$(sed -n 's/^tracegated_smb_bridge_commits_total \([0-9]*\)$/\1/p' "$T/metrics.txt")
    [ -n "$chunks" ] && [ "$chunks" -gt 0 ] || fail "no chunks copied by the SMB bridge (metrics: '$chunks')"
    [ -n "$commits" ] && [ "$commits" -gt 0 ] || fail "no CommitData rewritten by the SMB bridge"
    echo "metrics: $chunks chunks copied in $commits commits"
else
    echo "(curl not available: /metrics not checked)"
fi

# ---- the producers leave: their sessions log what the bridge copied ----
kill "$TCP_PID" "$WS_PID" "$UNIX_PID" 2>/dev/null
for p in $TCP_PID $WS_PID $UNIX_PID; do
    wait_exit "$p" 20
    [ "$WAIT_RC" = 0 ] || fail "demo $p exited with $WAIT_RC"
done
i=0
while [ $i -lt 50 ]; do
    [ "$(grep -c 'SMB bridge copied [1-9][0-9]* chunks' "$LOG")" -ge 2 ] && break
    sleep 0.1
    i=$((i + 1))
done
[ "$(grep -c 'SMB bridge copied [1-9][0-9]* chunks' "$LOG")" -ge 2 ] ||
    fail "no per-session SMB bridge summaries for the two remote producers"
grep 'SMB bridge copied' "$LOG" | sed 's/.*\(session [0-9]*: SMB bridge.*\)/\1/'

# ---- tracegated drains and exits cleanly (sanitizer builds report leaks at exit) ----
kill "$GW_PID"
wait_exit "$GW_PID" 20
[ "$WAIT_RC" = 0 ] || fail "tracegated exited with $WAIT_RC after SIGTERM"
echo "PASS"
exit 0
