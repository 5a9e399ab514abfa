#!/bin/sh
# test_gw_resume.sh: session survival through tracegated (embedded service, temp sockets, a TCP
# consumer listener) with tracegate-demo producing:
#  1. `tracectl record tcp://...` whose connection is cut mid-recording (the test-only flag
#     --test-drop-after shuts its socket down, as a broken network path would) reconnects,
#     resumes the session and writes a complete trace: exactly the DrawFrame slices the demo says
#     it drew for that session (frames 1..N, none missing, none twice);
#  2. the same cut during ReadBuffers (after the 2nd reply, the following ones in flight are
#     lost and re-sent by the gateway) still gives a complete trace; and again with a silent cut
#     (--test-drop-silent: the old socket stays open, the gateway notices nothing and the resume
#     takes the session over);
#  3. a client that drops and never comes back (tracectl killed): when the short resume window
#     ends, tracegated detaches the tracing session with a key and logs it; `tracectl attach
#     unix:<consumer socket> KEY --stop` collects the trace;
#  4. --no-resume: no token is asked for; a cut ends the recording with an error.
# Recordings are open-ended and stopped with SIGINT once the event each case needs has happened
# (the resume, enough data for several ReadBuffers replies), never after a fixed time.
# Environment (from `make check`): TG_BUILDDIR. Exit 77 = skipped.
set -u
. "$(dirname "$0")/gw_lib.sh"
need "$TRACEGATED" "$TRACECTL" "$DEMO"

RATE=200 # demo frames per second

# stops DEMOLOG: how many session instances the demo has stopped so far (it logs each with the
# number of frames it drew)
stops() { grep -c "session instance [0-9]* stopped after [0-9]* frames" "$1"; }
# drawn DEMOLOG K: the frames the demo drew in the K-th stopped instance
drawn() { grep "session instance [0-9]* stopped after [0-9]* frames" "$1" | sed -n "${2}s/.* stopped after \([0-9]*\) frames.*/\1/p"; }
_more_stops() { [ "$(stops "$1")" -gt "$2" ]; }

# check_trace FILE DEMOLOG K: the trace holds exactly the DrawFrame slices (each carries the demo's
# frame number) the demo drew in its K-th session instance: 1..N, no gap, no duplicate
check_trace() {
    wait_for 30 _more_stops "$2" $(($3 - 1)) || fail "the demo did not log the end of session instance $3"
    want=$(drawn "$2" "$3")
    [ -n "$want" ] && [ "$want" -gt 0 ] || fail "the demo drew no frames in session instance $3"
    tg_timeout 60 "$TRACECTL" dump "$1" --raw >"$1.txt" 2>"$T/dump.log" || fail "dump $1 failed: $(cat "$T/dump.log")"
    grep -q '^ *trace_config {' "$1.txt" || fail "$1 has no trace_config packet"
    awk '/int_value:/ {v = $2} /name: "frame"/ {p = v} /name: "DrawFrame"/ {print p}' "$1.txt" | sort -n >"$1.frames"
    n=$(wc -l <"$1.frames" | tr -d ' ')
    [ "$n" -gt 0 ] || fail "$1 has no DrawFrame slices"
    u=$(uniq "$1.frames" | wc -l | tr -d ' ')
    lo=$(head -n 1 "$1.frames")
    hi=$(tail -n 1 "$1.frames")
    [ "$u" = "$n" ] || fail "$1: $((n - u)) DrawFrame slices are duplicated"
    [ "$lo" = 1 ] && [ "$hi" = "$want" ] && [ "$n" = "$want" ] ||
        fail "$1: DrawFrame $lo..$hi ($n slices), but the demo drew frames 1..$want: some were lost"
    echo "  $1: DrawFrame 1..$want, none missing"
}

# record_bg NAME ARGS...: an open-ended `tracectl record` in the background (not under timeout(1),
# which would forward our SIGINT on its own), logging to $T/NAME.log; sets RPID
record_bg() {
    name=$1
    shift
    "$TRACECTL" record "$@" >"$T/$name.log" 2>&1 &
    RPID=$!
    PIDS="$PIDS $RPID"
}
# stop_record NAME: SIGINT (Ctrl-C) the recording and wait for it; fails unless it exits 0
stop_record() {
    kill -INT "$RPID"
    wait_exit "$RPID" 60
    [ "$WAIT_RC" = 0 ] || fail "$1 exited $WAIT_RC: $(cat "$T/$1.log")"
}
# demo_up CONSUMER_SOCKET: the demo is registered with that service
demo_up() { tg_timeout 10 "$TRACECTL" query "unix:$1" 2>/dev/null | grep -q 'tracegate-demo'; }
# enough data for several 128 KiB ReadBuffers replies: 1.0% of the 32 MiB buffer
MANY_REPLIES='buffer ([1-9][0-9]*|[1-9])\.[0-9]% of'

# a resume window far longer than any reconnection can take here; case 3 has its own short one
start_gw gw --no-http --resume-window 10m --listen "consumer=tcp://127.0.0.1:0"
ADDR=$(gw_addr gw 1)
[ -n "$ADDR" ] || fail "no TCP consumer listener in the log"
URL=tcp://$ADDR
CSOCK=$T/gw-c.sock

"$DEMO" --producer-socket "$T/gw-p.sock" --rate $RATE --duration 1800 >"$T/demo.log" 2>&1 &
PIDS="$PIDS $!"
wait_for 30 demo_up "$CSOCK" || fail "the demo did not connect"

# ---- 1. a cut while recording: reconnect, resume, nothing lost ----
record_bg rec1 "$URL" --test-drop-after 1000 -o "$T/r1.pftrace"
wait_for_line 60 "$T/rec1.log" "resumed the session" || fail "tracectl did not resume: $(cat "$T/rec1.log")"
stop_record rec1
grep -q "shutting the connection down" "$T/rec1.log" || fail "the test drop did not happen: $(cat "$T/rec1.log")"
grep -q "lost the connection" "$T/rec1.log" || fail "tracectl did not notice the cut: $(cat "$T/rec1.log")"
grep -q "resumed the session (replies lost in flight re-sent, nothing lost)" "$T/rec1.log" ||
    fail "tracectl did not resume: $(cat "$T/rec1.log")"
grep -q "wrote [0-9]* packets" "$T/rec1.log" || fail "no summary line: $(cat "$T/rec1.log")"
grep -q "detached; upstream kept open" "$T/gw.log" || fail "tracegated did not keep the session"
grep -q "resumed by" "$T/gw.log" || fail "tracegated did not log the resume"
check_trace "$T/r1.pftrace" "$T/demo.log" 1
echo "ok: a cut while recording is resumed, nothing lost"

# ---- 2. a cut in the middle of ReadBuffers: the replies in flight are re-sent ----
# (stopped once the buffer holds enough for several replies, so there are replies after the cut)
record_bg rec2 "$URL" --test-drop-read 2 -o "$T/r2.pftrace"
wait_for_line 120 "$T/rec2.log" "$MANY_REPLIES" || fail "the buffer did not fill: $(cat "$T/rec2.log")"
stop_record rec2
grep -q "test-drop-read: shutting" "$T/rec2.log" || fail "the read was too short to cut: $(cat "$T/rec2.log")"
grep -q "resumed the session (replies lost in flight re-sent, nothing lost)" "$T/rec2.log" ||
    fail "no resume during the read: $(cat "$T/rec2.log")"
grep -q "may miss packets" "$T/rec2.log" && fail "the read lost data: $(cat "$T/rec2.log")"
check_trace "$T/r2.pftrace" "$T/demo.log" 2
echo "ok: a cut during ReadBuffers is resumed, nothing lost"

# ---- 2b. a silent cut (the gateway sees nothing): the resume takes the session over ----
record_bg rec2b "$URL" --test-drop-read 2 --test-drop-silent -o "$T/r2b.pftrace"
wait_for_line 120 "$T/rec2b.log" "$MANY_REPLIES" || fail "the buffer did not fill: $(cat "$T/rec2b.log")"
stop_record rec2b
grep -q "resumed the session (replies lost in flight re-sent, nothing lost)" "$T/rec2b.log" ||
    fail "no resume after a silent cut: $(cat "$T/rec2b.log")"
grep -q "closing the old client connection" "$T/gw.log" || fail "tracegated did not take the session over"
check_trace "$T/r2b.pftrace" "$T/demo.log" 3
echo "ok: a silent cut is resumed (takeover), nothing lost"

# ---- 3. the client never comes back: Detach with a key when the window ends ----
# a second gateway with a 1 s window (its own embedded service and demo)
start_gw gw2 --no-http --resume-window 1s --listen "consumer=tcp://127.0.0.1:0"
ADDR2=$(gw_addr gw2 1)
"$DEMO" --producer-socket "$T/gw2-p.sock" --rate $RATE --duration 1800 >"$T/demo2.log" 2>&1 &
PIDS="$PIDS $!"
wait_for 30 demo_up "$T/gw2-c.sock" || fail "the second demo did not connect"
record_bg rec3 "tcp://$ADDR2" -o "$T/never.pftrace"
wait_for_line 60 "$T/gw2.log" "resume token issued" || fail "tracectl did not ask for a resume token: $(cat "$T/rec3.log")"
# some data recorded before the client goes away
wait_for_line 60 "$T/rec3.log" "buffer [0-9.]*[1-9][0-9.]*% of" || fail "nothing recorded: $(cat "$T/rec3.log")"
kill -9 "$RPID" 2>/dev/null
wait "$RPID" 2>/dev/null
wait_for_line 60 "$T/gw2.log" 'detached with key "tracegate-' || fail "tracegated did not log a detach key"
KEY=$(sed -n 's/.*the tracing session was detached with key "\(tracegate-[0-9a-f]*\)".*/\1/p' "$T/gw2.log" | head -n 1)
[ -n "$KEY" ] || fail "tracegated did not log a detach key"
grep -q "the key is not a secret" "$T/gw2.log" || fail "the key log line does not say it is not a secret"
grep "$KEY" "$T/gw2.log" | grep -q "WARN\|warn" || fail "the detach key is not logged at warn level"
tg_timeout 60 "$TRACECTL" attach "unix:$T/gw2-c.sock" "$KEY" --stop -o "$T/r3.pftrace" --no-progress \
    >"$T/attach3.log" 2>&1 || fail "attach $KEY failed: $(cat "$T/attach3.log")"
check_trace "$T/r3.pftrace" "$T/demo2.log" 1
echo "ok: an abandoned session is detached with a logged key and attach reads it"

# ---- 4. --no-resume: no token, a cut is fatal ----
n0=$(grep -c "resume token issued" "$T/gw.log")
record_bg rec4 "$URL" --no-resume --test-drop-after 500 -o "$T/r4.pftrace"
wait_exit "$RPID" 60
[ "$WAIT_RC" != timeout ] || fail "record --no-resume did not end after the cut: $(cat "$T/rec4.log")"
[ "$WAIT_RC" -ne 0 ] || fail "record --no-resume survived a cut: $(cat "$T/rec4.log")"
grep -q "lost the connection to the tracing service" "$T/rec4.log" || fail "unclear error: $(cat "$T/rec4.log")"
n1=$(grep -c "resume token issued" "$T/gw.log")
[ "$n0" = "$n1" ] || fail "record --no-resume asked for a resume token"
echo "ok: --no-resume"

echo "PASS"
exit 0
