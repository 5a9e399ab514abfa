#!/bin/sh
# test_link_fed_reattach.sh: a federated record survives a link cut longer than the resume window
# (docs/link-protocol.md §6, §8). Two nodes on loopback, their link through link_relay.py, both
# with a 1 s --link-resume-window:
#
#   tracectl record --all --> hub (demo) ==[relay]==> nodeb (demo)
#
#  1. mid-recording the relay cuts the link until both windows are over: nodeb Detaches the
#     federated session's tracing session under tracegate-link-hub-<channel> and keeps tracing;
#     the hub's fan-out logs the same key. After `allow` the link comes back while tracectl is
#     still recording: the fan-out opens a new channel and Attaches with the key. Stopping the
#     recording then flushes, disables and reads nodeb as usual: the trace holds every frame both
#     demos drew (before, during and after the cut), and tracectl reports nodeb's link gap
#     (from the gap record in the trace) as re-attached.
#  2. a recording whose client stops while the link is still cut: nodeb's session is left
#     detached (the manual path: the hub logs the key), and `tracectl --node nodeb attach KEY`
#     collects it once the link is back.
# Environment (from `make check`): TG_BUILDDIR, TG_SRCDIR. Exit 77 = skipped.
. "$(dirname "$0")/link_lib.sh"

start_node nodeb --listen-link tcp://127.0.0.1:0 --link-resume-window 1s
PB=$(link_port nodeb)
[ -n "$PB" ] || fail "nodeb logged no link port"
start_demo nodeb
PID_B=$DEMO_PID
start_relay relay "127.0.0.1:$PB"
start_node hub --peer "tcp://127.0.0.1:$RELAY_PORT" --link-resume-window 1s
start_demo hub
PID_H=$DEMO_PID
wait_link hub nodeb
wait_link nodeb hub
HUB=unix:$T/hub-gw.sock

# cut_past_window N: the relay cuts the link until both nodes closed its channels for the N-th time
cut_past_window() {
    relay relay cut
    wait_log "$T/hub.log" "link nodeb: not back within the resume window; its channels close" "$1" ||
        fail "the hub did not close the channels after the window"
    wait_log "$T/nodeb.log" "link hub: not back within the resume window; its channels close" "$1" ||
        fail "nodeb did not close the channels after the window"
}

# ---- 1. cut past the window mid-recording, back while the client records: re-attached ----
record_bg r1 record "$HUB" --all --ds track_event -o "$T/r1.pftrace"
wait_drawn "$T/hub-demo.log" 0
wait_drawn "$T/nodeb-demo.log" 0
wait_log "$T/r1.log" "recording:" || fail "r1: no progress: $(cat "$T/r1.log")"
cut_past_window 1
wait_log "$T/nodeb.log" "the tracing session was detached with key \"tracegate-link-hub-" ||
    fail "nodeb did not detach the federated session's tracing session"
KEY=$(sed -n 's/.*the tracing session was detached with key "\(tracegate-link-hub-[^"]*\)".*/\1/p' "$T/nodeb.log" | head -n 1)
wait_log "$T/hub.log" "fanout: federated session of .*: node nodeb: its link stayed down past the resume window; it keeps the session under key \"$KEY\"" ||
    fail "the hub's fan-out did not take nodeb as lost under key $KEY"
[ "$(stops "$T/nodeb-demo.log")" = 0 ] || fail "nodeb's session stopped with the link"
relay relay allow
wait_log "$T/hub.log" "fanout: federated session of .*: node nodeb re-attached \(key \"$KEY\"" ||
    fail "the hub did not re-attach nodeb's session"
echo "ok: nodeb detached the session under $KEY past the window; the fan-out re-attached it when the link came back"
# the recording goes on: nodeb's demo is still drawing into the session
[ "$(stops "$T/nodeb-demo.log")" = 0 ] || fail "nodeb's session stopped"
stop_record r1
cat "$T/r1.log"
if grep -q "lost the connection" "$T/r1.log"; then fail "tracectl saw the cut: $(cat "$T/r1.log")"; fi
grep -Eq "^tracectl: +nodeb +machine [0-9]+ +[1-9][0-9]* packets  link gap: 1 outage\(s\) past the resume window, [0-9.]+ s, session re-attached\$" "$T/r1.log" ||
    fail "tracectl does not report nodeb's packets with its link gap"
grep -Eq "^tracectl: +hub +machine 0 +[1-9][0-9]* packets\$" "$T/r1.log" || fail "tracectl does not report the hub's packets"
# every frame of both demos, once: nodeb's from before, during and after the cut
check_trace "$T/r1.pftrace" "$T/hub-demo.log" 1 "$PID_H"
check_trace "$T/r1.pftrace" "$T/nodeb-demo.log" 1 "$PID_B"
echo "ok: every frame of both demos in the federated trace; the gap is reported for nodeb"

# ---- 2. the client stops while the link is still down: the session stays detached (manual path) ----
wait_link hub nodeb 2
expect_state hub nodeb "up -"
record_bg r2 record "$HUB" --all --ds track_event -o "$T/r2.pftrace"
wait_drawn "$T/hub-demo.log" 1
wait_drawn "$T/nodeb-demo.log" 1
wait_log "$T/r2.log" "recording:" || fail "r2: no progress: $(cat "$T/r2.log")"
cut_past_window 2
wait_log "$T/hub.log" "node nodeb: its link stayed down past the resume window" 2 || fail "the hub did not take nodeb as lost"
KEY2=$(sed -n 's/.*node nodeb: its link stayed down past the resume window; it keeps the session under key "\([^"]*\)".*/\1/p' "$T/hub.log" | sed -n 2p)
[ -n "$KEY2" ] && [ "$KEY2" != "$KEY" ] || fail "no new key for the second session (got '$KEY2')"
stop_record r2
cat "$T/r2.log"
grep -Eq "^tracectl: +nodeb +machine [0-9]+ +0 packets  link gap: 1 outage\(s\) past the resume window, [0-9.]+ s, session left detached on the node  FAILED" "$T/r2.log" ||
    fail "tracectl does not report nodeb as left detached"
check_trace "$T/r2.pftrace" "$T/hub-demo.log" 2 "$PID_H"
wait_log "$T/hub.log" "node nodeb was not back before the client finished; it keeps the session under key \"$KEY2\"" ||
    fail "the hub did not log the key of the session left on nodeb"
relay relay allow
wait_link hub nodeb 3
[ "$(stops "$T/nodeb-demo.log")" = 1 ] || fail "nodeb's second session stopped without its client"
tg_timeout 60 "$TRACECTL" --node nodeb attach "$HUB" "$KEY2" --stop -o "$T/r2b.pftrace" --no-progress \
    >"$T/r2b.log" 2>&1 || fail "attach $KEY2 through the link: $(cat "$T/r2b.log")"
check_trace "$T/r2b.pftrace" "$T/nodeb-demo.log" 2
echo "ok: a client that finished during the cut leaves nodeb's session detached; collected by hand with its key"
echo "PASS"
exit 0
