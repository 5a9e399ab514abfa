#!/bin/sh
# test_link_netns.sh: gateway links between network namespaces over TLS (docs/links.md, "How links
# are tested"). Root only (`ip netns`, veth pairs, nftables); otherwise skipped (77).
#
#   [hub] 10.77.1.1 ==veth== 10.77.1.2 [nodeb] 10.77.2.1 ==veth== 10.77.2.2 [device]
#                                       (NAT: masquerade)          (default route via nodeb)
#
# Each namespace runs a node (tracegated with its embedded service) and a demo. Links are TLS
# with client certificates (one per node, its CN the node's name, with the namespaces' addresses). The hub dials
# nodeb (--peer); the device dials the hub (--hub) through nodeb's NAT: the hub has no route to
# the device's network and sees the link come from 10.77.1.2. Checks:
#  - the hub records the device (the hub opens the channel on a link the device dialed);
#  - mid-recording of nodeb from the hub, `ip link set down` on the hub's veth until the hub
#    declares the link down, then up again within the resume window: the links resume and the
#    trace holds every frame nodeb's demo drew, once;
#  - --max-connections-per-source: connections from 10.77.1.2 (nodeb's address, which also
#    carries the device's link) beyond the limit are refused at accept; the links stay up.
# Namespaces and veths are removed on exit, whatever happens.
# Environment (from `make check`): TG_BUILDDIR, TG_SRCDIR. Exit 77 = skipped.
. "$(dirname "$0")/link_lib.sh"
. "$(dirname "$0")/netns_lib.sh"
command -v python3 >/dev/null 2>&1 || { echo "SKIP: python3 is needed to hold connections open"; exit 77; }
netns_setup

# ---- the nodes: each in its namespace; the hub limits connections per source address ----
netns_start_nodes --max-connections-per-source 4
AS="ip netns exec $NS_B" start_demo nodeb
AS="ip netns exec $NS_H" start_demo hub
AS="ip netns exec $NS_D" start_demo device
grep -q "link device up (10\.77\.1\.2:[0-9]*, cert:/CN=device, link " "$T/hub.log" ||
    fail "the hub did not see the device's link come from nodeb's address with its certificate"
grep -q "link hub up (10\.77\.1\.1:[0-9]*, cert:/CN=hub, link " "$T/nodeb.log" || fail "nodeb did not authenticate the hub"
expect_state hub nodeb "up -"
expect_state hub device "up -"
expect_state device hub "up -"
echo "ok: TLS links up; the device dialed the hub through the NAT"

# ---- the hub records the device (the hub opens the channel on the device's link) ----
short_record r_dev "$T/device-demo.log" --node device record "unix:$T/hub-gw.sock"
check_trace "$T/r_dev.pftrace" "$T/device-demo.log" 1
echo "ok: the hub recorded the device behind the NAT"

# ---- ip link set down mid-recording, up again within the window: nothing lost ----
record_bg r_cut --node nodeb record "unix:$T/hub-gw.sock" -o "$T/r_cut.pftrace"
wait_drawn "$T/nodeb-demo.log" 0
wait_log "$T/r_cut.log" "recording:" || fail "r_cut: no progress: $(cat "$T/r_cut.log")"
ip -n "$NS_H" link set "$V_HB" down || fail "cannot take the hub's veth down"
# the hub notices (a send error, or its PINGs going unanswered), and keeps the channels
wait_log "$T/hub.log" "link nodeb down \(.*keeping [1-9][0-9]* channel" || fail "the hub did not notice the cut"
ip -n "$NS_H" link set "$V_HB" up || fail "cannot bring the hub's veth up"
wait_log "$T/hub.log" "link: link nodeb resumed \(" || fail "the link to nodeb did not resume"
wait_log "$T/nodeb.log" "link: link hub resumed \(" || fail "nodeb did not log the resume"
stop_record r_cut
if grep -q "lost the connection" "$T/r_cut.log"; then fail "tracectl saw the cut: $(cat "$T/r_cut.log")"; fi
check_trace "$T/r_cut.pftrace" "$T/nodeb-demo.log" 1
expect_state hub device "up -"
echo "ok: ip link set down mid-recording, up within the window: resumed, every frame once"

# ---- per-source limits at accept, from a namespace address ----
# 6 plain TCP connections from nodeb's address (which the device's link also comes from) to the
# hub's link listener, held open: the limit is 4 per address
n0=$(count_log "$T/hub.log" "refused a link connection from 10\.77\.1\.2: too many connections from this address")
ip netns exec "$NS_B" python3 -c '
import signal, socket
held = [socket.create_connection(("10.77.1.1", 7443), timeout=30) for _ in range(6)]
print("connected", len(held), flush=True)
signal.pause()
' >"$T/holder.log" 2>&1 &
HOLDER=$!
PIDS="$PIDS $HOLDER"
wait_log "$T/holder.log" "connected 6" || fail "could not connect from nodeb: $(cat "$T/holder.log")"
wait_log "$T/hub.log" "refused a link connection from 10\.77\.1\.2: too many connections from this address" \
    $((n0 + 2)) || fail "the hub did not refuse connections beyond the per-source limit"
kill "$HOLDER"
wait_exit "$HOLDER" 30
expect_state hub device "up -"
expect_state hub nodeb "up -"
echo "ok: connections beyond --max-connections-per-source from 10.77.1.2 refused at accept"
echo "PASS"
exit 0
