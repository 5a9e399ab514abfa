#!/bin/sh
# test_gw_resume.sh: session survival through tracegated (embedded service, temp sockets, a TCP
# consumer listener) with tracegate-demo producing:
#  1. `tracectl record tcp://...` whose connection is cut mid-recording (the test-only flag
#     --test-drop-after shuts its socket down, as a broken network path would) reconnects,
#     resumes the session and writes a complete trace: demo slices present and as many DrawFrame
#     slices as the demo draws in the recording's duration (nothing lost);
#  2. the same cut during ReadBuffers (after the 2nd reply, the following ones in flight are
#     lost and re-sent by the gateway) still gives a complete trace; and again with a silent cut
#     (--test-drop-silent: the old socket stays open, the gateway notices nothing and the resume
#     takes the session over);
#  3. a client that drops and never comes back (tracectl killed): when the short resume window
#     ends, tracegated detaches the tracing session with a key and logs it; `tracectl attach
#     unix:<consumer socket> KEY --stop` collects the trace;
#  4. --no-resume: no token is asked for; a cut ends the recording with an error.
# Environment (from `make check`): TG_BUILDDIR. Exit 77 = skipped.
set -u
. "$(dirname "$0")/gw_lib.sh"
need "$TRACEGATED" "$TRACECTL" "$DEMO"

RATE=200 # demo frames per second

# check_trace FILE MIN MAX: the trace has the demo's slices, its DrawFrame slices (each carries the
# demo's frame number) have no gap and no duplicate, and there are MIN..MAX of them
check_trace() {
    timeout 60 "$TRACECTL" dump "$1" --raw >"$1.txt" 2>"$T/dump.log" || fail "dump $1 failed: $(cat "$T/dump.log")"
    grep -q '^ *trace_config {' "$1.txt" || fail "$1 has no trace_config packet"
    awk '/int_value:/ {v = $2} /name: "frame"/ {p = v} /name: "DrawFrame"/ {print p}' "$1.txt" | sort -n >"$1.frames"
    n=$(wc -l <"$1.frames" | tr -d ' ')
    [ "$n" -gt 0 ] || fail "$1 has no DrawFrame slices"
    u=$(uniq "$1.frames" | wc -l | tr -d ' ')
    lo=$(head -n 1 "$1.frames")
    hi=$(tail -n 1 "$1.frames")
    [ "$u" = "$n" ] || fail "$1: $((n - u)) DrawFrame slices are duplicated"
    [ $((hi - lo + 1)) = "$n" ] || fail "$1: frames $lo..$hi but only $n DrawFrame slices: some were lost"
    [ "$n" -ge "$2" ] && [ "$n" -le "$3" ] || fail "$1 has $n DrawFrame slices, want $2..$3"
    echo "  $1: DrawFrame $lo..$hi, none missing"
}

start_gw gw --no-http --resume-window 10s --listen "consumer=tcp://127.0.0.1:0"
ADDR=$(gw_addr gw 1)
[ -n "$ADDR" ] || fail "no TCP consumer listener in the log"
URL=tcp://$ADDR
CSOCK=$T/gw-c.sock

"$DEMO" --producer-socket "$T/gw-p.sock" --rate $RATE --duration 300 >"$T/demo.log" 2>&1 &
PIDS="$PIDS $!"
i=0
until timeout 5 "$TRACECTL" query "unix:$CSOCK" 2>/dev/null | grep -q 'tracegate-demo'; do
    i=$((i + 1))
    [ $i -lt 100 ] || fail "the demo did not connect"
    sleep 0.1
done

# ---- 1. a cut while recording: reconnect, resume, nothing lost ----
timeout 60 "$TRACECTL" record "$URL" --duration 4s --test-drop-after 1000 -o "$T/r1.pftrace" \
    >"$T/rec1.log" 2>&1
rc=$?
[ $rc -eq 0 ] || fail "record with a cut exited $rc: $(cat "$T/rec1.log")"
grep -q "shutting the connection down" "$T/rec1.log" || fail "the test drop did not happen: $(cat "$T/rec1.log")"
grep -q "lost the connection" "$T/rec1.log" || fail "tracectl did not notice the cut: $(cat "$T/rec1.log")"
grep -q "resumed the session (replies lost in flight re-sent, nothing lost)" "$T/rec1.log" ||
    fail "tracectl did not resume: $(cat "$T/rec1.log")"
grep -q "wrote [0-9]* packets" "$T/rec1.log" || fail "no summary line: $(cat "$T/rec1.log")"
grep -q "detached; upstream kept open" "$T/gw.log" || fail "tracegated did not keep the session"
grep -q "resumed by" "$T/gw.log" || fail "tracegated did not log the resume"
# 4 s at $RATE frames/s = 800 DrawFrame slices; allow for start-up and stop slack
check_trace "$T/r1.pftrace" 640 900
echo "ok: a cut while recording is resumed, nothing lost"

# ---- 2. a cut in the middle of ReadBuffers: the replies in flight are re-sent ----
timeout 60 "$TRACECTL" record "$URL" --duration 2s --test-drop-read 2 -o "$T/r2.pftrace" >"$T/rec2.log" 2>&1
rc=$?
[ $rc -eq 0 ] || fail "record with a cut during the read exited $rc: $(cat "$T/rec2.log")"
grep -q "test-drop-read: shutting" "$T/rec2.log" || fail "the read was too short to cut: $(cat "$T/rec2.log")"
grep -q "resumed the session (replies lost in flight re-sent, nothing lost)" "$T/rec2.log" ||
    fail "no resume during the read: $(cat "$T/rec2.log")"
grep -q "may miss packets" "$T/rec2.log" && fail "the read lost data: $(cat "$T/rec2.log")"
check_trace "$T/r2.pftrace" 320 450
echo "ok: a cut during ReadBuffers is resumed, nothing lost"

# ---- 2b. a silent cut (the gateway sees nothing): the resume takes the session over ----
timeout 60 "$TRACECTL" record "$URL" --duration 2s --test-drop-read 2 --test-drop-silent -o "$T/r2b.pftrace" \
    >"$T/rec2b.log" 2>&1
rc=$?
[ $rc -eq 0 ] || fail "record with a silent cut exited $rc: $(cat "$T/rec2b.log")"
grep -q "resumed the session (replies lost in flight re-sent, nothing lost)" "$T/rec2b.log" ||
    fail "no resume after a silent cut: $(cat "$T/rec2b.log")"
grep -q "closing the old client connection" "$T/gw.log" || fail "tracegated did not take the session over"
check_trace "$T/r2b.pftrace" 320 450
echo "ok: a silent cut is resumed (takeover), nothing lost"

# ---- 3. the client never comes back: Detach with a key when the window ends ----
# a second gateway with a 1 s window (its own embedded service and demo)
start_gw gw2 --no-http --resume-window 1s --listen "consumer=tcp://127.0.0.1:0"
ADDR2=$(gw_addr gw2 1)
"$DEMO" --producer-socket "$T/gw2-p.sock" --rate $RATE --duration 300 >"$T/demo2.log" 2>&1 &
PIDS="$PIDS $!"
i=0
until timeout 5 "$TRACECTL" query "unix:$T/gw2-c.sock" 2>/dev/null | grep -q 'tracegate-demo'; do
    i=$((i + 1))
    [ $i -lt 100 ] || fail "the second demo did not connect"
    sleep 0.1
done
"$TRACECTL" record "tcp://$ADDR2" --duration 60s -o "$T/never.pftrace" --no-progress >"$T/rec3.log" 2>&1 &
RPID=$!
PIDS="$PIDS $RPID"
i=0
until grep -q "resume token issued" "$T/gw2.log"; do
    i=$((i + 1))
    [ $i -lt 100 ] || fail "tracectl did not ask for a resume token: $(cat "$T/rec3.log")"
    sleep 0.05
done
sleep 1.5
kill -9 "$RPID" 2>/dev/null
wait "$RPID" 2>/dev/null
i=0
while [ $i -lt 100 ] && ! grep -q 'detached with key "tracegate-' "$T/gw2.log"; do sleep 0.1; i=$((i + 1)); done
KEY=$(sed -n 's/.*the tracing session was detached with key "\(tracegate-[0-9a-f]*\)".*/\1/p' "$T/gw2.log" | head -n 1)
[ -n "$KEY" ] || fail "tracegated did not log a detach key"
grep -q "the key is not a secret" "$T/gw2.log" || fail "the key log line does not say it is not a secret"
grep "$KEY" "$T/gw2.log" | grep -q "WARN\|warn" || fail "the detach key is not logged at warn level"
sleep 1
timeout 60 "$TRACECTL" attach "unix:$T/gw2-c.sock" "$KEY" --stop -o "$T/r3.pftrace" --no-progress \
    >"$T/attach3.log" 2>&1 || fail "attach $KEY failed: $(cat "$T/attach3.log")"
# about 3 s of recording before the attach; how long exactly depends on scheduling
check_trace "$T/r3.pftrace" 200 100000
echo "ok: an abandoned session is detached with a logged key and attach reads it"

# ---- 4. --no-resume: no token, a cut is fatal ----
n0=$(grep -c "resume token issued" "$T/gw.log")
timeout 60 "$TRACECTL" record "$URL" --duration 3s --no-resume --test-drop-after 500 -o "$T/r4.pftrace" \
    >"$T/rec4.log" 2>&1
rc=$?
[ $rc -ne 0 ] || fail "record --no-resume survived a cut: $(cat "$T/rec4.log")"
grep -q "lost the connection to the tracing service" "$T/rec4.log" || fail "unclear error: $(cat "$T/rec4.log")"
n1=$(grep -c "resume token issued" "$T/gw.log")
[ "$n0" = "$n1" ] || fail "record --no-resume asked for a resume token"
echo "ok: --no-resume"

echo "PASS"
exit 0
