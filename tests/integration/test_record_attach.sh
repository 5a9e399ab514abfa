#!/bin/sh
# test_record_attach.sh: tracectl against tracegated + tracegate-demo (UNIX): record --detach then
# attach --stop; Ctrl-C (SIGINT) during an open-ended record; write_into_file configs (the output
# fd passed on EnableTracing), alone and detached; error exits (unknown key, no service).
# Environment (from `make check`): TG_BUILDDIR. Exit 77 = skipped.
REC_TAG=rec-att
. "$(dirname "$0")/record_lib.sh"
. "$(dirname "$0")/tp_lib.sh"

CSOCK=$T/c.sock
PSOCK=$T/p.sock
URL=unix:$CSOCK
"$TRACEGATED" --producer-socket "$PSOCK" --consumer-socket "$CSOCK" >"$T/tracegated.log" 2>&1 &
DPID=$!
PIDS="$PIDS $DPID"
svc_up() { [ -S "$CSOCK" ] && tg_timeout 5 "$TRACECTL" query "$URL" >/dev/null 2>&1; }
wait_for 20 svc_up || fail "tracegated did not come up"
"$DEMO" --producer-socket "$PSOCK" --duration 1200 >"$T/demo.log" 2>&1 &
PIDS="$PIDS $!"
demo_up() { tg_timeout 5 "$TRACECTL" query "$URL" 2>/dev/null | grep -q 'tracegate-demo'; }
wait_for 30 demo_up || fail "the demo did not connect"

# Each session's recording goes on until the demo drew into it (it logs its first frame of every
# session instance), never for a fixed time. first_frames: how many it logged so far;
# wait_new_frames N: until there are more than N.
first_frames() { grep -c "session instance [0-9]*: first frame drawn" "$T/demo.log"; }
_more_first_frames() { [ "$(first_frames)" -gt "$1" ]; }
wait_new_frames() { wait_for 60 _more_first_frames "$1" || fail "the demo drew nothing into the session"; }

# $1 = trace file: it must hold the demo's DrawFrame slices
check_trace() {
    tg_timeout 30 "$TRACECTL" dump "$1" >"$1.txt" 2>"$T/dump.log" || fail "dump $1 failed: $(cat "$T/dump.log")"
    grep -q '^slices: .*"DrawFrame" [1-9]' "$1.txt" || fail "$1 has no DrawFrame slices: $(sed -n '/^--$/,$p' "$1.txt")"
    grep -q ' trace_config ' "$1.txt" || fail "$1 has no trace_config packet"
}

# ---- 1. record --detach, then attach --stop ----
f0=$(first_frames)
tg_timeout 30 "$TRACECTL" record "$URL" --duration 60s --detach k1 --no-progress >"$T/detach.log" 2>&1 ||
    fail "record --detach failed: $(cat "$T/detach.log")"
grep -q "detached with key 'k1'" "$T/detach.log" || fail "no detach message: $(cat "$T/detach.log")"
wait_new_frames "$f0"
tg_timeout 60 "$TRACECTL" attach "$URL" k1 --stop -o "$T/att.pftrace" --no-progress >"$T/attach.log" 2>&1 ||
    fail "attach --stop failed: $(cat "$T/attach.log")"
grep -q "attached to session 'k1': duration 60 s" "$T/attach.log" || fail "attach did not print the duration"
check_trace "$T/att.pftrace"
echo "ok: record --detach + attach --stop"

# the key is gone once collected
tg_timeout 30 "$TRACECTL" attach "$URL" k1 --stop -o "$T/none.pftrace" >"$T/attach2.log" 2>&1
rc=$?
[ $rc -eq 1 ] || fail "attach to a collected key exited $rc, want 1: $(cat "$T/attach2.log")"
[ ! -e "$T/none.pftrace" ] || fail "a failed attach left a file behind"
echo "ok: attach to an unknown key fails"

# record_bg NAME ARGS...: `tracectl record` in the background, not under timeout(1) (which would
# forward our SIGINT on its own); the cleanup kills it if the test fails first. Sets RPID.
record_bg() {
    name=$1
    shift
    "$TRACECTL" record "$@" >"$T/$name.log" 2>&1 &
    RPID=$!
    PIDS="$PIDS $RPID"
}
# ctrl_c NAME: SIGINT the recording and wait for it; it must exit 0
ctrl_c() {
    kill -INT "$RPID"
    wait_exit "$RPID" 60
    [ "$WAIT_RC" = 0 ] || fail "record after SIGINT exited $WAIT_RC: $(cat "$T/$1.log")"
}

# ---- 2. Ctrl-C during an open-ended record ----
f0=$(first_frames)
record_bg int "$URL" -o "$T/int.pftrace"
wait_new_frames "$f0"
ctrl_c int
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
f0=$(first_frames)
record_bg wif "$URL" -c "$T/wif.txtpb" -o "$T/wif.pftrace" --no-progress
wait_new_frames "$f0"
ctrl_c wif
grep -q "the service wrote [0-9]* packets" "$T/wif.log" || fail "no write_into_file summary: $(cat "$T/wif.log")"
grep -q "note: write_into_file without flush_period_ms" "$T/wif.log" ||
    fail "no note on the missing flush_period_ms: $(cat "$T/wif.log")"
check_trace "$T/wif.pftrace"
# what the note says: Perfetto's trace processor reports the trace, and only for that
if tp_available; then
    [ "$(tp_rows "$T/wif.pftrace" "select value from stats where name = 'config_write_into_file_no_flush'")" -gt 0 ] ||
        fail "trace processor does not report the missing flush_period_ms"
    tp_import_ok "$T/wif.pftrace" config_write_into_file_no_flush
fi
echo "ok: write_into_file"

# ---- 4. the perfetto CLI's detach flow: write_into_file + --detach, then attach --stop ----
# (with flush_period_ms this time: no note, and trace processor reads it without complaint)
cp "$T/wif.txtpb" "$T/wif2.txtpb"
echo "flush_period_ms: 1000" >>"$T/wif2.txtpb"
f0=$(first_frames)
tg_timeout 30 "$TRACECTL" record "$URL" -c "$T/wif2.txtpb" --duration 60s --detach k2 -o "$T/det.pftrace" \
    >"$T/detach2.log" 2>&1 || fail "record --detach (write_into_file) failed: $(cat "$T/detach2.log")"
wait_new_frames "$f0"
tg_timeout 60 "$TRACECTL" attach "$URL" k2 --stop --no-progress >"$T/attach3.log" 2>&1 ||
    fail "attach --stop (write_into_file) failed: $(cat "$T/attach3.log")"
check_trace "$T/det.pftrace"
if grep -q "flush_period_ms" "$T/detach2.log"; then fail "a note on flush_period_ms although it is set: $(cat "$T/detach2.log")"; fi
if tp_available; then tp_import_ok "$T/det.pftrace"; fi
echo "ok: write_into_file + detach + attach --stop"

# ---- 5. no service ----
tg_timeout 30 "$TRACECTL" record "unix:$T/nothing.sock" --duration 1s -o "$T/x.pftrace" >"$T/nosvc.log" 2>&1
rc=$?
[ $rc -eq 1 ] || fail "record without a service exited $rc, want 1"
grep -q "cannot reach the tracing service" "$T/nosvc.log" || fail "unclear error: $(cat "$T/nosvc.log")"
[ ! -e "$T/x.pftrace" ] || fail "a failed record left a file behind"
echo "ok: no service"

echo "PASS"
exit 0
