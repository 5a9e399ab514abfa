#!/bin/sh
# test_link_resume.sh: a link through a relay that cuts it (link_relay.py; docs/links.md, "How
# links are tested"):
#
#   tracectl -- [relay2] -- nodea ==[relay1]==> nodeb (4 demos)      (windows 10 min)
#   tracectl ------------- noded ==[relay3]==> nodec (demo)          (windows 1 s)
#
#  1. `tracectl --node nodeb record` through nodea; relay1 cuts the link mid-recording and again
#     in the middle of ReadBuffers (after a set number of bytes), and lets it back each time:
#     the link resumes, tracectl sees only a pause, and the trace holds every frame each demo
#     drew, none twice;
#  2. with relay1 adding delay and a stall, two channels on the link: relay2 stops reading for
#     the first recording's client in the middle of its ReadBuffers (nodea's output limits are
#     small, so the stall reaches the link: HTTP/2 flow control holds that stream), while a
#     second recording and a query run to the end on the same link; then relay2 lets the
#     first go on, the link brings the rest of its trace (nodea's link counters show it was
#     held back at nodeb) and it too holds every frame;
#  3. with 1 s windows, relay3 cuts mid-recording until the window is over: the channels close
#     as a disconnect would (tracectl fails), nodec detaches the tracing session with the key
#     both nodes log, the session keeps running, and once the link is back the data is
#     collected through the link (tracectl --node nodec clone, then attach --stop).
# Every wait is for an event (log lines of the nodes, the relay, tracectl and the demos).
# Environment (from `make check`): TG_BUILDDIR, TG_SRCDIR. Exit 77 = skipped.
. "$(dirname "$0")/link_lib.sh"

# ---- nodeb (4 demos) <- relay1 <- nodea ----
HTTP=0 start_node nodeb --listen-link tcp://127.0.0.1:0 --link-resume-window 10m
PB=$(link_port nodeb)
[ -n "$PB" ] || fail "nodeb has no link listener"
DEMOS=""
for i in 1 2 3 4; do
    start_demo nodeb --name "demo$i" --rate 1000
    mv "$T/nodeb-demo.log" "$T/demo$DEMO_PID.log"
    DEMOS="$DEMOS $DEMO_PID"
done
start_relay relay1 "127.0.0.1:$PB"
R1=$RELAY_PORT
# small output limits on nodea: a client that stops reading holds back little here, so its
# stall reaches the link (the slow-client cut is far away)
start_node nodea --peer "tcp://127.0.0.1:$R1" --link-resume-window 10m \
    --out-high 64k --out-low 16k --out-soft-grace 10m
wait_link nodea nodeb
wait_link nodeb nodea
URL=unix:$T/nodea-gw.sock

# check_all FILE K: every demo's K-th session instance is in FILE, frame by frame
check_all() {
    for d in $DEMOS; do check_trace "$1" "$T/demo$d.log" "$2" "$d"; done
}
# drawn_all N: every demo drew into more than N session instances
drawn_all() {
    for d in $DEMOS; do wait_drawn "$T/demo$d.log" "$1"; done
}
# buffer_at LOG PERCENT: tracectl's last progress line says the buffer is at least PERCENT % full
_buffer_at() {
    p=$(sed -n 's/.*buffer \([0-9.]*\)% of.*/\1/p' "$1" | tail -n 1)
    [ -n "$p" ] && awk -v p="$p" -v w="$2" 'BEGIN { exit !(p >= w) }'
}
buffer_at() { wait_for 120 _buffer_at "$1" "$2" || fail "the buffer did not reach $2%: $(tail -n 3 "$1")"; }

# ---- 1. cut mid-recording, and again mid-ReadBuffers: resumed, nothing lost ----
record_bg rec1 --node nodeb record "$URL" -o "$T/r1.pftrace"
drawn_all 0
wait_log "$T/rec1.log" "recording:" || fail "rec1: no progress: $(cat "$T/rec1.log")"
relay relay1 cut
wait_log "$T/nodea.log" "link nodeb down \(" || fail "nodea did not see the cut"
wait_log "$T/nodeb.log" "link nodea down \(" || fail "nodeb did not see the cut"
relay relay1 allow
wait_log "$T/nodea.log" "link: link nodeb resumed \(" || fail "the link did not resume"
wait_log "$T/nodeb.log" "link: link nodea resumed \(" || fail "nodeb did not log the resume"
echo "ok: cut mid-recording, resumed"
# enough in the buffer (about 650 KiB) that the read is still going after the next cut
buffer_at "$T/rec1.log" 2
relay relay1 cut-after 200000
kill -INT "$RPID"
wait_log "$T/relay1.log" "^relay: cut \(after the armed byte count\)" || fail "the read did not reach the armed cut"
wait_log "$T/nodea.log" "link nodeb down \(" 2 || fail "nodea did not see the second cut"
relay relay1 allow
wait_log "$T/nodea.log" "link: link nodeb resumed \(" 2 || fail "the link did not resume after the second cut"
wait_exit "$RPID" 120
[ "$WAIT_RC" = 0 ] || fail "rec1 exited $WAIT_RC: $(cat "$T/rec1.log")"
if grep -q "lost the connection" "$T/rec1.log"; then fail "tracectl saw the cuts: $(cat "$T/rec1.log")"; fi
check_all "$T/r1.pftrace" 1
echo "ok: cut mid-ReadBuffers, resumed: every frame once"

# ---- 2. a stalled channel never stalls another on the same link ----
relay relay1 delay 2
# in_bytes: nodea's link counter IN for nodeb, in bytes
in_bytes() {
    tg_timeout 10 "$TRACECTL" nodes "$URL" | awk '$1 == "nodeb" {
        v = $7; m = 1
        if (v ~ /K$/) m = 1024; else if (v ~ /M$/) m = 1048576; else if (v ~ /G$/) m = 1073741824
        sub(/[KMG]$/, "", v); printf "%d\n", v * m }'
}
start_relay relay2 "unix:$T/nodea-gw.sock" --listen 127.0.0.1:0
R2=$RELAY_PORT
record_bg rec2 --node nodeb record "tcp://127.0.0.1:$R2" -o "$T/r2.pftrace"
REC2=$RPID
drawn_all 1
# about 7.7 MiB: well over what nodea and the sockets on its side can hold for a client that
# stopped reading (the channel's 4 MiB stream window, plus under 2 MiB with --out-high 64k)
buffer_at "$T/rec2.log" 24
relay relay2 hold-after 262144
kill -INT "$REC2"
wait_log "$T/relay2.log" "^relay: holding" || fail "rec2's read did not reach the hold"
# the other channel: a query and a whole recording, through the same link, with a stall on it
tg_timeout 60 "$TRACECTL" --node nodeb query "$URL" >"$T/q2.txt" 2>&1 || fail "query while stalled: $(cat "$T/q2.txt")"
grep -q " demo1 " "$T/q2.txt" || fail "the query while stalled shows no demo: $(cat "$T/q2.txt")"
kill -0 "$REC2" || fail "rec2 ended although its client stopped reading: $(cat "$T/rec2.log")"
record_bg rec3 --node nodeb record "$URL" -o "$T/r3.pftrace"
drawn_all 2
relay relay1 stall 300
wait_log "$T/rec3.log" "recording:" || fail "rec3: no progress: $(cat "$T/rec3.log")"
stop_record rec3
kill -0 "$REC2" || fail "rec2 ended while its client was not reading: $(cat "$T/rec2.log")"
in_held=$(in_bytes)
[ -n "$in_held" ] || fail "no IN counter for nodeb on nodea"
relay relay2 release
RPID=$REC2
wait_exit "$RPID" 120
[ "$WAIT_RC" = 0 ] || fail "rec2 exited $WAIT_RC: $(cat "$T/rec2.log")"
in_after=$(in_bytes)
echo "  nodea's link IN: $in_held bytes while rec2 was held, $in_after after it finished"
[ $((in_after - in_held)) -ge 524288 ] ||
    fail "the held channel's data was not held back at nodeb (only $((in_after - in_held)) bytes came after the release)"
check_all "$T/r2.pftrace" 2
check_all "$T/r3.pftrace" 3
echo "ok: a channel whose client stopped reading did not stall the other channels of its link"

# ---- 3. past the window: the far node keeps the session, collected once the link is back ----
start_node nodec --listen-link tcp://127.0.0.1:0 --link-resume-window 1s
PC=$(link_port nodec)
start_demo nodec
C_DEMO=$DEMO_PID
start_relay relay3 "127.0.0.1:$PC"
start_node noded --peer "tcp://127.0.0.1:$RELAY_PORT" --link-resume-window 1s
wait_link noded nodec
record_bg rec4 --node nodec record "unix:$T/noded-gw.sock" -o "$T/r4.pftrace"
wait_drawn "$T/nodec-demo.log" 0
wait_log "$T/rec4.log" "recording:" || fail "rec4: no progress: $(cat "$T/rec4.log")"
relay relay3 cut
wait_log "$T/noded.log" "link nodec: not back within the resume window; its channels close" ||
    fail "noded did not close the channels after the window"
wait_log "$T/nodec.log" "link noded: not back within the resume window; its channels close" ||
    fail "nodec did not close the channels after the window"
wait_exit "$RPID" 120
[ "$WAIT_RC" != 0 ] || fail "rec4 went on although its channel closed: $(cat "$T/rec4.log")"
grep -q "lost the connection" "$T/rec4.log" || fail "rec4 did not report the closed connection: $(cat "$T/rec4.log")"
KEY=$(sed -n 's/.*its link is gone; the tracing session was detached with key "\(tracegate-link-[^"]*\)".*/\1/p' "$T/nodec.log" | head -n 1)
[ -n "$KEY" ] || fail "nodec did not log a detach key"
grep -q "that node keeps it under key \"$KEY\"" "$T/noded.log" || fail "noded did not log the key $KEY"
echo "  the far node kept the session under $KEY"
relay relay3 allow
wait_link noded nodec 2
wait_link nodec noded 2
# the session still runs on nodec: the demo has not stopped it; clone a snapshot, then collect it
[ "$(stops "$T/nodec-demo.log")" = 0 ] || fail "the far node's session stopped with the link"
tg_timeout 30 "$TRACECTL" --node nodec query "unix:$T/noded-gw.sock" >"$T/q4.txt" 2>&1 || fail "query nodec: $(cat "$T/q4.txt")"
SID=$(sed -n '/^TRACING SESSIONS/,/^CAPABILITIES/p' "$T/q4.txt" | awk '$1 ~ /^[0-9]+$/ { print $1; exit }')
[ -n "$SID" ] || fail "nodec lists no tracing session: $(cat "$T/q4.txt")"
tg_timeout 60 "$TRACECTL" --node nodec clone "unix:$T/noded-gw.sock" "$SID" -o "$T/clone.pftrace" >"$T/clone.log" 2>&1 ||
    fail "clone through the link failed: $(cat "$T/clone.log")"
tg_timeout 60 "$TRACECTL" dump "$T/clone.pftrace" --raw >"$T/clone.txt" 2>&1 || fail "dump clone failed"
frames_of "$T/clone.txt" >"$T/clone.frames"
n=$(wc -l <"$T/clone.frames" | tr -d ' ')
[ "$n" -gt 0 ] && [ "$(head -n 1 "$T/clone.frames")" = 1 ] && [ "$(tail -n 1 "$T/clone.frames")" = "$n" ] &&
    [ "$(uniq "$T/clone.frames" | wc -l | tr -d ' ')" = "$n" ] || fail "the clone does not hold frames 1..$n once each"
echo "  clone through the link: DrawFrame 1..$n"
tg_timeout 60 "$TRACECTL" --node nodec attach "unix:$T/noded-gw.sock" "$KEY" --stop -o "$T/r4.pftrace" --no-progress \
    >"$T/attach.log" 2>&1 || fail "attach $KEY through the link failed: $(cat "$T/attach.log")"
check_trace "$T/r4.pftrace" "$T/nodec-demo.log" 1
echo "ok: past the window the far node kept the session; collected through the link once it was back"
echo "PASS"
exit 0
