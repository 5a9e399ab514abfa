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
[ "$(id -u)" = 0 ] || { echo "SKIP: network namespaces need root"; exit 77; }
command -v ip >/dev/null 2>&1 || { echo "SKIP: ip (iproute2) is not installed"; exit 77; }
command -v nft >/dev/null 2>&1 || { echo "SKIP: nft (nftables) is needed for the NAT"; exit 77; }
command -v openssl >/dev/null 2>&1 || { echo "SKIP: openssl is needed for the test certificates"; exit 77; }
command -v python3 >/dev/null 2>&1 || { echo "SKIP: python3 is needed to hold connections open"; exit 77; }

# names of this run's namespaces and veths (veth names: at most 15 characters)
ID=$$
NS_H=tgl${ID}h
NS_B=tgl${ID}b
NS_D=tgl${ID}d
V_HB=tgl${ID}hb
V_BH=tgl${ID}bh
V_BD=tgl${ID}bd
V_DB=tgl${ID}db
netns_cleanup() {
    for ns in $NS_H $NS_B $NS_D; do ip netns del "$ns" 2>/dev/null; done
    for v in $V_HB $V_BD; do ip link del "$v" 2>/dev/null; done
}
# processes first (gw_lib's cleanup), then the namespaces they ran in
trap 'cleanup; netns_cleanup' EXIT
ip netns add "$NS_H" 2>"$T/netns.err" || {
    echo "SKIP: cannot create a network namespace: $(cat "$T/netns.err")"
    exit 77
}
ip netns add "$NS_B" && ip netns add "$NS_D" || fail "cannot create the namespaces"
ip link add "$V_HB" type veth peer name "$V_BH" && ip link add "$V_BD" type veth peer name "$V_DB" ||
    fail "cannot create veth pairs"
ip link set "$V_HB" netns "$NS_H" && ip link set "$V_BH" netns "$NS_B" && ip link set "$V_BD" netns "$NS_B" &&
    ip link set "$V_DB" netns "$NS_D" || fail "cannot move the veths into the namespaces"
for ns in $NS_H $NS_B $NS_D; do ip -n "$ns" link set lo up || fail "lo in $ns"; done
ip -n "$NS_H" addr add 10.77.1.1/24 dev "$V_HB" && ip -n "$NS_H" link set "$V_HB" up &&
    ip -n "$NS_B" addr add 10.77.1.2/24 dev "$V_BH" && ip -n "$NS_B" link set "$V_BH" up &&
    ip -n "$NS_B" addr add 10.77.2.1/24 dev "$V_BD" && ip -n "$NS_B" link set "$V_BD" up &&
    ip -n "$NS_D" addr add 10.77.2.2/24 dev "$V_DB" && ip -n "$NS_D" link set "$V_DB" up &&
    ip -n "$NS_D" route add default via 10.77.2.1 || fail "cannot address the veths"
# nodeb routes for the device and masquerades it behind 10.77.1.2
ip netns exec "$NS_B" sh -c 'echo 1 >/proc/sys/net/ipv4/ip_forward' || fail "cannot enable forwarding in nodeb"
ip netns exec "$NS_B" nft -f - <<EOF || fail "cannot set up the NAT in nodeb"
table ip tgnat {
    chain post {
        type nat hook postrouting priority srcnat; policy accept;
        oifname "$V_BH" ip saddr 10.77.2.0/24 masquerade
    }
}
EOF
ip -n "$NS_H" route get 10.77.2.2 >/dev/null 2>&1 && fail "the hub can route to the device's network"
echo "ok: namespaces: hub 10.77.1.1, nodeb 10.77.1.2/10.77.2.1 (NAT), device 10.77.2.2"

# ---- certificates: the dev CA, and one per node (a certificate links under its CN) carrying the
# namespaces' addresses ----
bash "$S/certs/make-dev-pki.sh" "$T/pki" >/dev/null 2>&1 || fail "cannot make the test PKI"
P=$T/pki
for n in hub nodeb device; do
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -sha256 -subj "/CN=$n" \
        -keyout "$T/$n.key" -out "$T/$n.csr" 2>/dev/null || fail "cannot make a key for $n"
    printf 'basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth,clientAuth\nsubjectAltName=IP:10.77.1.1,IP:10.77.1.2,IP:10.77.2.1,IP:10.77.2.2\n' >"$T/$n.ext"
    openssl x509 -req -in "$T/$n.csr" -CA "$P/ca.crt" -CAkey "$P/ca.key" -CAcreateserial -days 2 -sha256 \
        -extfile "$T/$n.ext" -out "$T/$n.crt" 2>/dev/null || fail "cannot sign the certificate of $n"
done
# tls NODE: the TLS options of node NODE (its certificate as server and as client)
tls() {
    echo "--tls-cert $T/$1.crt --tls-key $T/$1.key --tls-ca $P/ca.crt --peer-ca $P/ca.crt --peer-cert $T/$1.crt --peer-key $T/$1.key"
}

# ---- the nodes: each in its namespace (fixed ports: each namespace has its own) ----
# shellcheck disable=SC2086
{
    AS="ip netns exec $NS_B" start_node nodeb --listen-link tls://10.77.1.2:7443 $(tls nodeb) --link-resume-window 10m
    AS="ip netns exec $NS_H" start_node hub --listen-link tls://10.77.1.1:7443 $(tls hub) --link-resume-window 10m \
        --peer tls://10.77.1.2:7443 --max-connections-per-source 4
    AS="ip netns exec $NS_D" start_node device --hub tls://10.77.1.1:7443 $(tls device) --link-resume-window 10m
}
AS="ip netns exec $NS_B" start_demo nodeb
AS="ip netns exec $NS_H" start_demo hub
AS="ip netns exec $NS_D" start_demo device
wait_link hub nodeb
wait_link hub device
wait_link device hub
wait_link nodeb hub
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
