#!/bin/sh
# test_record_attach.sh: tracectl against tracegated + tracegate-demo (UNIX): record --detach then
# attach --stop; Ctrl-C (SIGINT) during an open-ended record; write_into_file configs (the output
# fd passed on EnableTracing), alone and detached; error exits (unknown key, no service).
# Environment (from `make check`): TG_BUILDDIR. Exit 77 = skipped.
REC_TAG=rec-att
. "$(dirname "$0")/record_lib.sh"

CSOCK=$T/c.sock
PSOCK=$T/p.sock
URL=unix:$CSOCK
"$TRACEGATED" --producer-socket "$PSOCK" --consumer-socket "$CSOCK" >"$T/tracegated.log" 2>&1 &
DPID=$!
PIDS="$PIDS $DPID"
i=0
until [ -S "$CSOCK" ] && timeout 5 "$TRACECTL" query "$URL" >/dev/null 2>&1; do
    kill -0 "$DPID" 2>/dev/null || fail "tracegated exited"
    i=$((i + 1))
    [ $i -lt 100 ] || fail "tracegated did not come up"
    sleep 0.1
done
"$DEMO" --producer-socket "$PSOCK" --duration 120 >"$T/demo.log" 2>&1 &
PIDS="$PIDS $!"
i=0
until timeout 5 "$TRACECTL" query "$URL" 2>/dev/null | grep -q 'tracegate-demo'; do
    i=$((i + 1))
    [ $i -lt 100 ] || fail "the demo did not connect"
    sleep 0.1
done

# $1 = trace file: it must hold the demo's DrawFrame slices
check_trace() {
    timeout 30 "$TRACECTL" dump "$1" >"$1.txt" 2>"$T/dump.log" || fail "dump $1 failed: $(cat "$T/dump.log")"
    grep -q '^slices: .*"DrawFrame" [1-9]' "$1.txt" || fail "$1 has no DrawFrame slices: $(sed -n '/^--$/,$p' "$1.txt")"
    grep -q ' trace_config ' "$1.txt" || fail "$1 has no trace_config packet"
}

# ---- 1. record --detach, then attach --stop ----
timeout 30 "$TRACECTL" record "$URL" --duration 60s --detach k1 --no-progress >"$T/detach.log" 2>&1 ||
    fail "record --detach failed: $(cat "$T/detach.log")"
grep -q "detached with key 'k1'" "$T/detach.log" || fail "no detach message: $(cat "$T/detach.log")"
sleep 1
timeout 60 "$TRACECTL" attach "$URL" k1 --stop -o "$T/att.pftrace" --no-progress >"$T/attach.log" 2>&1 ||
    fail "attach --stop failed: $(cat "$T/attach.log")"
grep -q "attached to session 'k1': duration 60 s" "$T/attach.log" || fail "attach did not print the duration"
check_trace "$T/att.pftrace"
echo "ok: record --detach + attach --stop"

# the key is gone once collected
timeout 30 "$TRACECTL" attach "$URL" k1 --stop -o "$T/none.pftrace" >"$T/attach2.log" 2>&1
rc=$?
[ $rc -eq 1 ] || fail "attach to a collected key exited $rc, want 1: $(cat "$T/attach2.log")"
[ ! -e "$T/none.pftrace" ] || fail "a failed attach left a file behind"
echo "ok: attach to an unknown key fails"

# ---- 2. Ctrl-C during an open-ended record ----
# (not under timeout(1), which would forward the signal on its own; a watchdog instead)
"$TRACECTL" record "$URL" -o "$T/int.pftrace" >"$T/int.log" 2>&1 &
RPID=$!
PIDS="$PIDS $RPID"
(
    i=0
    while [ $i -lt 600 ] && kill -0 "$RPID" 2>/dev/null; do sleep 0.1; i=$((i + 1)); done
    kill -9 "$RPID" 2>/dev/null
) &
WPID=$!
PIDS="$PIDS $WPID"
sleep 2
kill -INT "$RPID"
wait "$RPID"
rc=$?
kill "$WPID" 2>/dev/null
[ $rc -eq 0 ] || fail "record after SIGINT exited $rc: $(cat "$T/int.log")"
grep -q "stopping the session" "$T/int.log" || fail "no stop message: $(cat "$T/int.log")"
check_trace "$T/int.pftrace"
echo "ok: Ctrl-C stops, reads and writes the trace"

# ---- 3. write_into_file: the service writes the file through the fd we pass ----
cat >"$T/wif.txtpb" <<EOF
buffers { size_kb: 4096 fill_policy: RING_BUFFER }
data_sources { config { name: "track_event" track_event_config { enabled_categories: "*" } } }
write_into_file: true
file_write_period_ms: 500
EOF
timeout 60 "$TRACECTL" record "$URL" -c "$T/wif.txtpb" --duration 2s -o "$T/wif.pftrace" --no-progress \
    >"$T/wif.log" 2>&1 || fail "write_into_file record failed: $(cat "$T/wif.log")"
grep -q "the service wrote [0-9]* packets" "$T/wif.log" || fail "no write_into_file summary: $(cat "$T/wif.log")"
check_trace "$T/wif.pftrace"
echo "ok: write_into_file"

# ---- 4. the perfetto CLI's detach flow: write_into_file + --detach, then attach --stop ----
timeout 30 "$TRACECTL" record "$URL" -c "$T/wif.txtpb" --duration 60s --detach k2 -o "$T/det.pftrace" \
    >"$T/detach2.log" 2>&1 || fail "record --detach (write_into_file) failed: $(cat "$T/detach2.log")"
sleep 1
timeout 60 "$TRACECTL" attach "$URL" k2 --stop --no-progress >"$T/attach3.log" 2>&1 ||
    fail "attach --stop (write_into_file) failed: $(cat "$T/attach3.log")"
check_trace "$T/det.pftrace"
echo "ok: write_into_file + detach + attach --stop"

# ---- 5. no service ----
timeout 30 "$TRACECTL" record "unix:$T/nothing.sock" --duration 1s -o "$T/x.pftrace" >"$T/nosvc.log" 2>&1
rc=$?
[ $rc -eq 1 ] || fail "record without a service exited $rc, want 1"
grep -q "cannot reach the tracing service" "$T/nosvc.log" || fail "unclear error: $(cat "$T/nosvc.log")"
[ ! -e "$T/x.pftrace" ] || fail "a failed record left a file behind"
echo "ok: no service"

echo "PASS"
exit 0
