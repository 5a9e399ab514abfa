#!/bin/sh
# test_link_fed_reattach_via.sh: a federated record survives a link cut longer than the resume
# window for a node the hub reaches only through another node (docs/link-protocol.md §6, §8).
# Three nodes on loopback, each with its demo, both links through link_relay.py, 1 s windows:
#
#   tracectl record --all --> hub ==[relay up]==> nodeb <==[relay down]== leaf
#
#  1. the hub's link to nodeb is cut until both windows are over: nodeb Detaches the federated
#     session's tracing sessions of both channels it served, its own and the one it forwarded to
#     leaf (the Detach travels on nodeb's channel to leaf), under tracegate-link-hub-<channel>.
#     When the link is back the hub's fan-out re-attaches both, leaf through nodeb again.
#  2. the link between nodeb and leaf is cut past the window while the hub's link stays up:
#     leaf Detaches the session under nodeb's key for its channel; nodeb tells the hub so with
#     the channel's close (a lost-channel trailer), and when leaf is back in nodeb's node list the
#     hub re-attaches it with that key.
#  3. not federated: `tracectl --node leaf record` through the hub, the hub's link cut past the
#     window: the hub logs the key, nodeb passes it on to leaf, and `tracectl --node leaf attach`
#     collects the whole session once the link is back.
# Each recording then holds every frame each demo drew, once, and tracectl reports the gap; the
# two re-attached nodes' demos stop late (--stop-delay), so the fan-out must wait for their end of
# trace (EnableTracing{attach_notification_only} after Attach) before it reads them.
# Environment (from `make check`): TG_BUILDDIR, TG_SRCDIR. Exit 77 = skipped.
. "$(dirname "$0")/link_lib.sh"

W="--link-resume-window 1s"
# shellcheck disable=SC2086 # $W is two words
start_node nodeb --listen-link tcp://127.0.0.1:0 $W
PB=$(link_port nodeb)
[ -n "$PB" ] || fail "nodeb logged no link port"
# nodeb's and leaf's demos stop late (they draw on for 400 ms after the service asks them to
# stop): a re-attached node's end of trace must still be waited for before the read-out
start_demo nodeb --stop-delay 400
PID_B=$DEMO_PID
start_relay up "127.0.0.1:$PB"
RELAY_UP=$RELAY_PORT
start_relay down "127.0.0.1:$PB"
RELAY_DOWN=$RELAY_PORT
# shellcheck disable=SC2086
start_node leaf --peer "tcp://127.0.0.1:$RELAY_DOWN" $W
start_demo leaf --stop-delay 400
PID_L=$DEMO_PID
# shellcheck disable=SC2086
start_node hub --peer "tcp://127.0.0.1:$RELAY_UP" $W
start_demo hub
PID_H=$DEMO_PID
wait_link hub nodeb
wait_link leaf nodeb
expect_state hub leaf "up nodeb"
HUB=unix:$T/hub-gw.sock

# cut_past_window RELAY A B N: RELAY cuts the link between A and B until both closed its channels
# for the N-th time
cut_past_window() {
    relay "$1" cut
    wait_log "$T/$2.log" "link $3: not back within the resume window; its channels close" "$4" ||
        fail "$2 did not close the channels to $3 after the window"
    wait_log "$T/$3.log" "link $2: not back within the resume window; its channels close" "$4" ||
        fail "$3 did not close the channels to $2 after the window"
}

# check_record NAME K: the recording NAME holds every frame of the K-th session of each demo and
# reports OUTAGES link gaps, re-attached, for the node(s) in GAP_NODES
check_record() {
    cat "$T/$1.log"
    if grep -q "lost the connection" "$T/$1.log"; then fail "tracectl saw the cut: $(cat "$T/$1.log")"; fi
    for n in $GAP_NODES; do
        grep -Eq "^tracectl: +$n +machine [0-9]+ +[1-9][0-9]* packets  link gap: 1 outage\(s\) past the resume window, [0-9.]+ s, session re-attached\$" "$T/$1.log" ||
            fail "tracectl does not report $n's packets with its link gap"
    done
    check_trace "$T/$1.pftrace" "$T/hub-demo.log" "$2" "$PID_H"
    check_trace "$T/$1.pftrace" "$T/nodeb-demo.log" "$2" "$PID_B"
    check_trace "$T/$1.pftrace" "$T/leaf-demo.log" "$2" "$PID_L"
}

# ---- 1. the hub's link to nodeb (in front of leaf) cut past the window ----
record_bg r1 record "$HUB" --all --ds track_event -o "$T/r1.pftrace"
for n in hub nodeb leaf; do wait_drawn "$T/$n-demo.log" 0; done
wait_log "$T/r1.log" "recording:" || fail "r1: no progress: $(cat "$T/r1.log")"
cut_past_window up hub nodeb 1
KEY_L=$(sed -n 's/.*node leaf: a link on its way through nodeb stayed down past the resume window; it keeps the session under key "\([^"]*\)".*/\1/p' "$T/hub.log" | head -n 1)
[ -n "$KEY_L" ] || fail "the hub's fan-out did not take leaf as lost: $(grep fanout "$T/hub.log")"
wait_log "$T/nodeb.log" "its link is gone; node leaf is asked to keep the tracing session under key \"$KEY_L\"" ||
    fail "nodeb did not pass the hub's key $KEY_L on to leaf"
wait_log "$T/leaf.log" "the tracing session was detached with key \"$KEY_L\"" ||
    fail "leaf did not detach its session under the hub's key $KEY_L"
wait_log "$T/nodeb.log" "the tracing session was detached with key \"tracegate-link-hub-" ||
    fail "nodeb did not detach its own session"
[ "$(stops "$T/leaf-demo.log")" = 0 ] || fail "leaf's session stopped with the link"
[ "$(stops "$T/nodeb-demo.log")" = 0 ] || fail "nodeb's session stopped with the link"
relay up allow
wait_log "$T/hub.log" "fanout: federated session of .*: node leaf re-attached \(key \"$KEY_L\"" ||
    fail "the hub did not re-attach leaf's session through nodeb"
wait_log "$T/hub.log" "fanout: federated session of .*: node nodeb re-attached" ||
    fail "the hub did not re-attach nodeb's session"
echo "ok: cut in front of nodeb: leaf kept its session under $KEY_L (passed on by nodeb), re-attached through nodeb"
stop_record r1
GAP_NODES="nodeb leaf" check_record r1 1
echo "ok: every frame of the three demos in the first trace; both gaps reported"

# ---- 2. the link between nodeb and leaf cut past the window; the hub's link stays up ----
wait_link hub nodeb 2
expect_state hub leaf "up nodeb"
record_bg r2 record "$HUB" --all --ds track_event -o "$T/r2.pftrace"
for n in hub nodeb leaf; do wait_drawn "$T/$n-demo.log" 1; done
wait_log "$T/r2.log" "recording:" || fail "r2: no progress: $(cat "$T/r2.log")"
cut_past_window down leaf nodeb 1
wait_log "$T/leaf.log" "the tracing session was detached with key \"tracegate-link-nodeb-" ||
    fail "leaf did not detach the session of nodeb's channel"
KEY2=$(sed -n 's/.*the tracing session was detached with key "\(tracegate-link-nodeb-[^"]*\)".*/\1/p' "$T/leaf.log" | head -n 1)
wait_log "$T/nodeb.log" "node leaf keeps its tracing session under key \"$KEY2\"; hub is told" ||
    fail "nodeb did not pass leaf's key $KEY2 back to the hub"
wait_log "$T/hub.log" "node leaf: a link on its way through nodeb stayed down past the resume window; it keeps the session under key \"$KEY2\"" ||
    fail "the hub's fan-out did not take leaf as lost under $KEY2"
[ "$(stops "$T/leaf-demo.log")" = 1 ] || fail "leaf's second session stopped with the link"
relay down allow
wait_log "$T/hub.log" "fanout: federated session of .*: node leaf re-attached \(key \"$KEY2\"" ||
    fail "the hub did not re-attach leaf's session when nodeb reached it again"
echo "ok: cut behind nodeb: leaf kept its session under $KEY2, nodeb told the hub, the hub re-attached it"
stop_record r2
GAP_NODES="leaf" check_record r2 2
echo "ok: every frame of the three demos in the second trace; leaf's gap reported"

# ---- 3. not federated: tracectl --node leaf through the hub; the hub's link cut past the window ----
wait_link leaf nodeb 2
expect_state hub leaf "up nodeb"
record_bg r3 --node leaf record "$HUB" --ds track_event -o "$T/r3.pftrace"
wait_drawn "$T/leaf-demo.log" 2
wait_log "$T/r3.log" "recording:" || fail "r3: no progress: $(cat "$T/r3.log")"
cut_past_window up hub nodeb 2
wait_log "$T/hub.log" "link nodeb: channel [0-9a-f]*: if it owned a tracing session on leaf, that node keeps it under key" ||
    fail "the hub did not log the key of the session left on leaf"
KEY3=$(sed -n 's/.*if it owned a tracing session on leaf, that node keeps it under key "\([^"]*\)".*/\1/p' "$T/hub.log" | tail -n 1)
wait_log "$T/leaf.log" "the tracing session was detached with key \"$KEY3\"" ||
    fail "leaf did not keep the session under the key the hub logged ($KEY3)"
wait_exit "$RPID" 60
[ "$(stops "$T/leaf-demo.log")" = 2 ] || fail "leaf's third session stopped with the link"
relay up allow
wait_link hub nodeb 3
expect_state hub leaf "up nodeb"
tg_timeout 60 "$TRACECTL" --node leaf attach "$HUB" "$KEY3" --stop -o "$T/r3b.pftrace" --no-progress \
    >"$T/r3b.log" 2>&1 || fail "attach $KEY3 through the hub and nodeb: $(cat "$T/r3b.log")"
check_trace "$T/r3b.pftrace" "$T/leaf-demo.log" 3
echo "ok: a client of leaf through the hub: the session outlived the cut under the key the hub logged, collected by hand"
echo "PASS"
exit 0
