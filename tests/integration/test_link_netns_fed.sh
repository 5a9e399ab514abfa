#!/bin/sh
# test_link_netns_fed.sh: a federated record (`tracectl record --all`, docs/link-protocol.md §8)
# across network namespaces joined by veth pairs (netns_lib.sh; root only, otherwise skipped):
#
#   [hub] 10.77.1.1 ==veth== 10.77.1.2 [nodeb] 10.77.2.1 ==veth== 10.77.2.2 [device]
#                                       (NAT: masquerade)          (default route via nodeb)
#
# Three nodes over TLS links (the hub dials nodeb; the device dials the hub through nodeb's NAT),
# each with its embedded service and a demo producer; nodeb's clock readings are shifted by a
# known 10 s (--test-clock-offset). One `tracectl record --all` from the hub, during which the
# hub's veth is taken down (`ip link set down`) until the hub declares both links down, then up
# again within the resume window. Checked: the trace holds each node's packets under its own
# machine id, every frame each of the three demos drew (counted against what each demo logs),
# none twice; a RemoteClockSync for each remote node, from which trace processor's estimate
# gives back nodeb's injected offset and about 0 for the device; tracectl reports each node.
# Environment (from `make check`): TG_BUILDDIR, TG_SRCDIR. Exit 77 = skipped.
. "$(dirname "$0")/link_lib.sh"
. "$(dirname "$0")/netns_lib.sh"
netns_setup

OFFSET_NS=10000000000 # nodeb's clocks as it reports them: 10 s ahead
NODEB_OPTS="--test-clock-offset $OFFSET_NS" netns_start_nodes
AS="ip netns exec $NS_H" start_demo hub
PID_H=$DEMO_PID
AS="ip netns exec $NS_B" start_demo nodeb
PID_B=$DEMO_PID
AS="ip netns exec $NS_D" start_demo device
PID_D=$DEMO_PID
HUB=unix:$T/hub-gw.sock

# the fleet as the hub sees it: both nodes up, nodeb's clock offset sampled (a PING/UPDATE round)
fleet_ready() {
    tg_timeout 10 "$TRACECTL" nodes "$HUB" >"$T/nodes.txt" 2>&1 || return 1
    grep -q '^nodeb  *up ' "$T/nodes.txt" && grep -q '^device  *up ' "$T/nodes.txt" &&
        awk '$1 == "nodeb" && $6 != "-" { b = 1 } $1 == "device" && $6 != "-" { d = 1 } END { exit !(b && d) }' \
            "$T/nodes.txt"
}
wait_for 60 fleet_ready || fail "the fleet did not come up: $(cat "$T/nodes.txt")"
cat "$T/nodes.txt"
MID_B=$(awk '$1 == "nodeb" { print $4 }' "$T/nodes.txt")
MID_D=$(awk '$1 == "device" { print $4 }' "$T/nodes.txt")
[ -n "$MID_B" ] && [ "$MID_B" != 0 ] && [ -n "$MID_D" ] && [ "$MID_D" != 0 ] && [ "$MID_B" != "$MID_D" ] ||
    fail "nodeb and the device need distinct non-zero machine ids (got '$MID_B' and '$MID_D')"
echo "ok: three nodes in three namespaces; machine ids nodeb $MID_B, device $MID_D"

# ---- one federated record; mid-recording the hub's veth goes down, then up within the window ----
record_bg r_fed record "$HUB" --all --ds track_event -o "$T/r_fed.pftrace"
for n in hub nodeb device; do wait_drawn "$T/$n-demo.log" 0; done
wait_log "$T/r_fed.log" "recording:" || fail "r_fed: no progress: $(cat "$T/r_fed.log")"
nb=$(count_log "$T/hub.log" "link: link nodeb resumed \(")
nd=$(count_log "$T/hub.log" "link: link device resumed \(")
ip -n "$NS_H" link set "$V_HB" down || fail "cannot take the hub's veth down"
# the hub notices each link's cut (a send error, or its PINGs going unanswered) and keeps the
# federated session's channels; the demos keep drawing into their nodes' buffers meanwhile
wait_log "$T/hub.log" "link nodeb down \(.*keeping [1-9][0-9]* channel" || fail "the hub did not notice nodeb's cut"
wait_log "$T/hub.log" "link device down \(.*keeping [1-9][0-9]* channel" || fail "the hub did not notice the device's cut"
ip -n "$NS_H" link set "$V_HB" up || fail "cannot bring the hub's veth up"
wait_log "$T/hub.log" "link: link nodeb resumed \(" $((nb + 1)) || fail "the link to nodeb did not resume"
wait_log "$T/hub.log" "link: link device resumed \(" $((nd + 1)) || fail "the link to the device did not resume"
echo "ok: both links cut by ip link set down and resumed within the window"
stop_record r_fed
cat "$T/r_fed.log"
if grep -q "lost the connection\|FAILED" "$T/r_fed.log"; then fail "tracectl saw the cut: $(cat "$T/r_fed.log")"; fi
for n in hub nodeb device; do
    grep -Eq "^tracectl: +$n +machine [0-9]+ +[1-9][0-9]* packets\$" "$T/r_fed.log" ||
        fail "tracectl does not report packets from $n"
done

# every frame each demo drew, once, in the merged trace (the demos told apart by trusted_pid)
check_trace "$T/r_fed.pftrace" "$T/hub-demo.log" 1 "$PID_H"
check_trace "$T/r_fed.pftrace" "$T/nodeb-demo.log" 1 "$PID_B"
check_trace "$T/r_fed.pftrace" "$T/device-demo.log" 1 "$PID_D"

# each node's packets under its own machine id: every DrawFrame slice of a demo carries its node's
machine_of_pid() {
    awk -v want="$1" '
        function flush() { if (draw && pid == want) print (mid == "" ? 0 : mid); draw = 0; pid = ""; mid = "" }
        /^#[0-9]/ { flush() }
        /name: "DrawFrame"/ { draw = 1 }
        /^    trusted_pid:/ { pid = $2 }
        /^  machine_id:|^    machine_id:/ { mid = $2 }
        END { flush() }' "$T/r_fed.pftrace.txt" | sort -u | tr '\n' ' '
}
for pair in "$PID_H 0" "$PID_B $MID_B" "$PID_D $MID_D"; do
    set -- $pair
    got=$(machine_of_pid "$1")
    [ "$got" = "$2 " ] || fail "the DrawFrame slices of demo pid $1 carry machine ids '$got', want $2"
done
tg_timeout 60 "$TRACECTL" dump "$T/r_fed.pftrace" --summary >"$T/r_fed.sum" 2>&1 ||
    fail "the merged trace does not decode: $(cat "$T/r_fed.sum")"
grep -Eq "^machines: .*\b$MID_B [1-9]" "$T/r_fed.sum" && grep -Eq "^machines: .*\b$MID_D [1-9]" "$T/r_fed.sum" ||
    fail "the summary lacks a remote node's machine: $(grep '^machines' "$T/r_fed.sum")"
echo "ok: each node's packets under its own machine id"

# clock data: a RemoteClockSync per remote node; trace processor's estimate from nodeb's gives
# back the injected offset, the device's about 0
est() { sed -n "s/^clock sync: machine $1: [0-9]* round trips, BOOTTIME offset \([-+][0-9]*\) ns.*/\1/p" "$T/r_fed.sum"; }
off_b=$(est "$MID_B")
off_d=$(est "$MID_D")
[ -n "$off_b" ] && [ -n "$off_d" ] || fail "no RemoteClockSync for nodeb or the device: $(grep 'clock sync' "$T/r_fed.sum")"
awk -v o="$off_b" -v want="$OFFSET_NS" 'BEGIN { d = o - want; if (d < 0) d = -d; exit !(d < 500000000) }' ||
    fail "nodeb's clock offset from the trace is $off_b ns, injected $OFFSET_NS"
awk -v o="$off_d" 'BEGIN { if (o < 0) o = -o; exit !(o < 500000000) }' ||
    fail "the device's clock offset from the trace is $off_d ns, expected about 0"
echo "ok: clock sync per remote node; nodeb's injected offset recovered ($off_b ns), the device's $off_d ns"
echo "PASS"
exit 0
