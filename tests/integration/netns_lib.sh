# netns_lib.sh: the three-namespace topology of the netns link tests (test_link_netns.sh,
# test_link_netns_fed.sh), on top of link_lib.sh. Source it after link_lib.sh, then call
# netns_setup; skips (77) unless root with ip, nft and openssl. POSIX sh.
#
#   [hub] 10.77.1.1 ==veth== 10.77.1.2 [nodeb] 10.77.2.1 ==veth== 10.77.2.2 [device]
#                                       (NAT: masquerade)          (default route via nodeb)
#
# Sets NS_H, NS_B, NS_D (namespaces), V_HB (the hub's veth, the one tests cut), V_BH, V_BD, V_DB;
# makes a test PKI in $T/pki ($P) with one certificate per node (CN = the node's name, the
# namespaces' addresses as IP SANs); `tls NODE` prints that node's TLS options. A trap removes
# the namespaces and veths on exit, after gw_lib's cleanup stopped the processes in them.
[ "$(id -u)" = 0 ] || { echo "SKIP: network namespaces need root"; exit 77; }
command -v ip >/dev/null 2>&1 || { echo "SKIP: ip (iproute2) is not installed"; exit 77; }
command -v nft >/dev/null 2>&1 || { echo "SKIP: nft (nftables) is needed for the NAT"; exit 77; }
command -v openssl >/dev/null 2>&1 || { echo "SKIP: openssl is needed for the test certificates"; exit 77; }

# names of this run's namespaces and veths (veth names: at most 15 characters)
_NSID=$$
NS_H=tgl${_NSID}h
NS_B=tgl${_NSID}b
NS_D=tgl${_NSID}d
V_HB=tgl${_NSID}hb
V_BH=tgl${_NSID}bh
V_BD=tgl${_NSID}bd
V_DB=tgl${_NSID}db
netns_cleanup() {
    for ns in $NS_H $NS_B $NS_D; do ip netns del "$ns" 2>/dev/null; done
    for v in $V_HB $V_BD; do ip link del "$v" 2>/dev/null; done
}

# tls NODE: the TLS options of node NODE (its certificate as server and as client)
tls() {
    echo "--tls-cert $T/$1.crt --tls-key $T/$1.key --tls-ca $P/ca.crt --peer-ca $P/ca.crt --peer-cert $T/$1.crt --peer-key $T/$1.key"
}

netns_setup() {
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
    ip netns exec "$NS_B" nft -f - <<NFT || fail "cannot set up the NAT in nodeb"
table ip tgnat {
    chain post {
        type nat hook postrouting priority srcnat; policy accept;
        oifname "$V_BH" ip saddr 10.77.2.0/24 masquerade
    }
}
NFT
    ip -n "$NS_H" route get 10.77.2.2 >/dev/null 2>&1 && fail "the hub can route to the device's network"
    echo "ok: namespaces: hub 10.77.1.1, nodeb 10.77.1.2/10.77.2.1 (NAT), device 10.77.2.2"

    # the dev CA, and one certificate per node (a certificate links under its CN) carrying the
    # namespaces' addresses
    bash "$S/certs/make-dev-pki.sh" "$T/pki" >/dev/null 2>&1 || fail "cannot make the test PKI"
    P=$T/pki
    for n in hub nodeb device; do
        openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -sha256 -subj "/CN=$n" \
            -keyout "$T/$n.key" -out "$T/$n.csr" 2>/dev/null || fail "cannot make a key for $n"
        printf 'basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth,clientAuth\nsubjectAltName=IP:10.77.1.1,IP:10.77.1.2,IP:10.77.2.1,IP:10.77.2.2\n' >"$T/$n.ext"
        openssl x509 -req -in "$T/$n.csr" -CA "$P/ca.crt" -CAkey "$P/ca.key" -CAcreateserial -days 2 -sha256 \
            -extfile "$T/$n.ext" -out "$T/$n.crt" 2>/dev/null || fail "cannot sign the certificate of $n"
    done
}

# netns_start_nodes [hub options...]: the three nodes in their namespaces (fixed ports: each
# namespace has its own), TLS links with client certificates: the hub dials nodeb, the device
# dials the hub (--hub) through nodeb's NAT; every node's resume window is 10 min. Extra options
# go to the hub; NODEB_OPTS and DEVICE_OPTS to the others. Waits until every link is up.
netns_start_nodes() {
    # shellcheck disable=SC2086
    {
        AS="ip netns exec $NS_B" start_node nodeb --listen-link tls://10.77.1.2:7443 $(tls nodeb) \
            --link-resume-window 10m ${NODEB_OPTS:-}
        AS="ip netns exec $NS_H" start_node hub --listen-link tls://10.77.1.1:7443 $(tls hub) --link-resume-window 10m \
            --peer tls://10.77.1.2:7443 "$@"
        AS="ip netns exec $NS_D" start_node device --hub tls://10.77.1.1:7443 $(tls device) --link-resume-window 10m \
            ${DEVICE_OPTS:-}
    }
    wait_link hub nodeb
    wait_link hub device
    wait_link device hub
    wait_link nodeb hub
}
