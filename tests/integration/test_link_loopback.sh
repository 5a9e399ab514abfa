#!/bin/sh
# test_link_loopback.sh: gateway links between nodes on loopback (docs/links.md, "How links are
# tested"). Three nodes, each a tracegated with its embedded service; B and C have a demo:
#
#     nodeb (demo) <-- tcp:// h2c, token --  nodea  -- tls:// mTLS -->  nodec (demo)
#                                            (HTTP front end, --export-node for b and c)
#
# nodea dials both (as root, nodea runs as nobody: a node under the acceptor's own uid or root is
# trusted by its loopback peer credentials, so only another uid shows the token and the
# certificate doing the work). Checks:
#  - `tracectl nodes` on each node shows the two others up (b and c see each other via a);
#  - query and a short record of a remote node through `tracectl --node` (one hop, and two hops
#    b -> a -> c, which is also a reverse open: b accepted its link), through
#    `--export-node` (a plain UNIX socket) and through ws://.../traced/NAME; every trace holds
#    exactly the frames the remote demo says it drew into that session;
#  - refused links, with a clear message on both sides: a duplicate node name (already linked,
#    and the acceptor's own name), a certificate from another CA (either side); as another uid
#    (root only): a wrong token, no credentials, a token or certificate without the link role,
#    and a token or certificate used under another node name than its own (also a certificate whose
#    O holds "/CN=NAME": its CN is read from the certificate, not from the subject text).
# Environment (from `make check`): TG_BUILDDIR, TG_SRCDIR. Exit 77 = skipped.
. "$(dirname "$0")/link_lib.sh"
command -v openssl >/dev/null 2>&1 || { echo "SKIP: openssl is needed for the test certificates"; exit 77; }
bash "$S/certs/make-dev-pki.sh" "$T/pki" >/dev/null 2>&1 || fail "cannot make the test PKI"
P=$T/pki

FOREIGN=
if [ "$(id -u)" = 0 ] && command -v setpriv >/dev/null 2>&1; then
    FOREIGN="setpriv --reuid=65534 --regid=65534 --clear-groups"
    chmod 1777 "$T" # nobody makes its sockets here
else
    echo "(not root: nodea runs as this user, whom its peers trust on loopback; the token checks are skipped)"
fi
# nodea's client certificate: a certificate links under its CN
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -sha256 -subj "/CN=nodea" \
    -keyout "$T/nodea.key" -out "$T/nodea.csr" 2>/dev/null &&
    printf 'basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=clientAuth\n' >"$T/nodea.ext" &&
    openssl x509 -req -in "$T/nodea.csr" -CA "$P/ca.crt" -CAkey "$P/ca.key" -CAcreateserial -days 2 -sha256 \
        -extfile "$T/nodea.ext" -out "$T/nodea.crt" 2>/dev/null || fail "cannot make nodea's certificate"
# a certificate whose O holds "/CN=cert_cn_in_o" (a CA that copies fields from the request): in the
# one-line subject text it reads /O=x\/CN=cert_cn_in_o/CN=nodez (with "/CN=cert_cn_in_o" in it), but
# its CN is nodez
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -sha256 -subj "/O=x\/CN=cert_cn_in_o/CN=nodez" \
    -keyout "$T/nodez.key" -out "$T/nodez.csr" 2>/dev/null &&
    openssl x509 -req -in "$T/nodez.csr" -CA "$P/ca.crt" -CAkey "$P/ca.key" -CAcreateserial -days 2 -sha256 \
        -extfile "$T/nodea.ext" -out "$T/nodez.crt" 2>/dev/null || fail "cannot make nodez's certificate"
# what nodea (maybe nobody) reads
cp "$P/ca.crt" "$P/rogue-client.crt" "$P/rogue-client.key" "$P/rogue-ca.crt" "$T/"
# keys as Debian's ssl-cert group holds them: root's, readable by one group (nobody's), never by
# every user (tracegated refuses such a key)
chmod 0644 "$T"/*.crt
chmod 0640 "$T"/*.key
[ -n "$FOREIGN" ] && chgrp 65534 "$T"/*.key

# tokens: "nodea" may link (under its own name), "rec" may only record
TOK=$("$TRACEGATED" --gen-token 2>/dev/null)
RTOK=$("$TRACEGATED" --gen-token 2>/dev/null)
[ -n "$TOK" ] && [ -n "$RTOK" ] || fail "tracegated --gen-token printed nothing"
{
    echo "nodea link $(printf %s "$TOK" | "$TRACEGATED" --hash-token)"
    echo "rec recorder $(printf %s "$RTOK" | "$TRACEGATED" --hash-token)"
} >"$T/tokens"
printf '%s\n' "$TOK" >"$T/a.token"
printf '%s\n' "$RTOK" >"$T/rec.token"
printf '%s\n' "not-$TOK" >"$T/bad.token"
chmod 0600 "$T"/*.token # a link token is a secret: tracegated refuses one others can read
[ -n "$FOREIGN" ] && chown 65534 "$T"/*.token # nodea and the refused nodes run as 65534

TLS_SERVER="--tls-cert $P/server.crt --tls-key $P/server.key --tls-ca $P/ca.crt"
# shellcheck disable=SC2086
{
    start_node nodeb --listen-link tcp://127.0.0.1:0 --token-file "$T/tokens"
    start_node nodec --listen-link tls://127.0.0.1:0 $TLS_SERVER
    start_node noded --listen-link tls://127.0.0.1:0 $TLS_SERVER --link-cert-roles recorder
}
PB=$(link_port nodeb)
PC=$(link_port nodec)
PD=$(link_port noded)
[ -n "$PB" ] && [ -n "$PC" ] && [ -n "$PD" ] || fail "no link listener ports in the logs"
start_demo nodeb
B_DEMO=$DEMO_PID
start_demo nodec
C_DEMO=$DEMO_PID
CERT="--peer-ca $T/ca.crt --peer-cert $T/nodea.crt --peer-key $T/nodea.key"
# shellcheck disable=SC2086
AS=$FOREIGN HTTP=1 start_node nodea --peer "tcp://127.0.0.1:$PB" --link-token-file "$T/a.token" \
    --peer "tls://127.0.0.1:$PC" $CERT \
    --export-node "nodeb:consumer=$T/a-exp-b.sock" --export-node "nodec:consumer=$T/a-exp-c.sock"
A_PID=$NODE_PID
A_HTTP=$HTTP_PORT

# ---- the links come up, each under the identity that authenticated it ----
wait_link nodea nodeb
wait_link nodea nodec
wait_link nodeb nodea
wait_link nodec nodea
if [ -n "$FOREIGN" ]; then
    grep -q "link nodea up (127.0.0.1:[0-9]*, token:nodea, link [0-9a-f]*)" "$T/nodeb.log" ||
        fail "nodeb did not authenticate nodea by its token"
fi
if [ -n "$FOREIGN" ]; then
    grep -q "link nodea up (127.0.0.1:[0-9]*, cert:/CN=nodea, link [0-9a-f]*)" "$T/nodec.log" ||
        fail "nodec did not authenticate nodea by its client certificate"
fi
echo "ok: links up (h2c with a token, TLS with a client certificate)"
# a link token others can read is refused at start, saying how to fix it
cp "$T/a.token" "$T/open.token"
chmod 0644 "$T/open.token"
tg_timeout 20 "$TRACEGATED" --node-name opentok --no-http --producer-socket "$T/ot-p.sock" \
    --consumer-socket "$T/ot-c.sock" --peer "tcp://127.0.0.1:$PB" --link-token-file "$T/open.token" \
    >"$T/opentok.log" 2>&1 && fail "a link token readable by every user was accepted"
grep -q "link-token-file $T/open.token: holds a secret but is readable by every user (chmod 600" "$T/opentok.log" ||
    fail "no clear refusal of an open link token: $(tail -3 "$T/opentok.log")"

# ---- every node sees the two others ----
expect_state nodea nodea "self -"
expect_state nodea nodeb "up -"
expect_state nodea nodec "up -"
expect_state nodeb nodea "up -"
expect_state nodeb nodec "up nodea"
expect_state nodec nodea "up -"
expect_state nodec nodeb "up nodea"
echo "ok: tracectl nodes on each node shows the others up"

# ---- query a remote node: --node, two hops, --export-node, ws:// ----
# has_producer OUT PID: the query output lists the demo with that pid
has_producer() { grep -q "^[0-9][0-9]* *$2 .*tracegate-demo" "$1"; }
query() { # NAME PID ARGS...: tracectl ARGS must list the demo PID
    _q=$1
    _p=$2
    shift 2
    tg_timeout 30 "$TRACECTL" "$@" >"$T/$_q.txt" 2>&1 || fail "$_q: tracectl $* failed: $(cat "$T/$_q.txt")"
    has_producer "$T/$_q.txt" "$_p" || fail "$_q: tracectl $* does not show the demo (pid $_p): $(cat "$T/$_q.txt")"
}
query q_node "$B_DEMO" --node nodeb query "unix:$T/nodea-gw.sock"
query q_hops "$C_DEMO" --node nodec query "unix:$T/nodeb-gw.sock"
query q_export "$C_DEMO" query "unix:$T/a-exp-c.sock"
query q_ws "$B_DEMO" query "ws://127.0.0.1:$A_HTTP/traced/nodeb"
has_producer "$T/q_node.txt" "$C_DEMO" && fail "--node nodeb answered with nodec's producers"
grep -q "session [0-9]*: routed to node nodec" "$T/nodea.log" || fail "nodea did not forward the two-hop channel"
echo "ok: query through --node, two hops, --export-node and ws://.../traced/NAME"

# ---- a node nobody knows: a clear refusal, counted as a routing error, not as our upstream's ----
tg_timeout 30 "$TRACECTL" --node nosuch query "unix:$T/nodea-gw.sock" >"$T/q_nosuch.txt" 2>&1 &&
    fail "a query for an unknown node succeeded: $(cat "$T/q_nosuch.txt")"
grep -q "cannot route to node" "$T/q_nosuch.txt" "$T/nodea.log" || fail "no reason given: $(cat "$T/q_nosuch.txt")"
curl -s "http://127.0.0.1:$A_HTTP/metrics" >"$T/a-metrics.txt"
grep -q '^tracegated_route_errors_total 1$' "$T/a-metrics.txt" || fail "route error not counted: $(grep route_errors "$T/a-metrics.txt")"
grep -q '^tracegated_upstream_errors_total{port="consumer"} 0$' "$T/a-metrics.txt" ||
    fail "an unknown node was counted against nodea's own upstream: $(grep upstream_errors "$T/a-metrics.txt")"
echo "ok: an unknown node is refused with a reason and counted as a routing error"

# ---- short recordings of remote nodes: every frame the demo drew is in the trace ----
short_record r_node "$T/nodeb-demo.log" --node nodeb record "unix:$T/nodea-gw.sock"
check_trace "$T/r_node.pftrace" "$T/nodeb-demo.log" 1
short_record r_export "$T/nodec-demo.log" record "unix:$T/a-exp-c.sock"
check_trace "$T/r_export.pftrace" "$T/nodec-demo.log" 1
short_record r_hops "$T/nodec-demo.log" --node nodec record "unix:$T/nodeb-gw.sock"
check_trace "$T/r_hops.pftrace" "$T/nodec-demo.log" 2
short_record r_ws "$T/nodeb-demo.log" record "ws://127.0.0.1:$A_HTTP/traced/nodeb"
check_trace "$T/r_ws.pftrace" "$T/nodeb-demo.log" 2
echo "ok: records through --node, --export-node, two hops and ws://.../traced/NAME hold every frame"

# ---- refused links: a clear message on both sides ----
# refused LABEL ACCEPTOR ACCEPTOR_ERE DIALER_ERE [AS] -- tracegated options: a short-lived node
# LABEL dials; both logs must say why, then it is stopped
refused() {
    _l=$1
    _acc=$2
    _are=$3
    _dre=$4
    _as=$5
    shift 6
    AS=$_as start_node "$_l" "$@"
    wait_log "$T/$_l.log" "$_dre" || fail "$_l: the dialer did not log /$_dre/"
    if [ -n "$_are" ]; then
        wait_log "$T/$_acc.log" "$_are" || fail "$_l: $_acc did not log /$_are/"
    fi
    stop_node "$NODE_PID"
    if grep -q -E "link: link [^ ]* up \(" "$T/$_l.log"; then fail "$_l: a refused link came up"; fi
    echo "ok: $_l refused: $(grep -E -o -e "$_dre.*" "$T/$_l.log" | head -n 1)"
}
# shellcheck disable=SC2086
{
    NODE_NAME=nodea refused dup_linked nodec 'refused a second link named "nodea" from 127\.0\.0\.1:[0-9]* \([a-z]*:[^)]*\): the name is taken' \
        'the peer refused the link \(409\): a node with this name is already linked' "" -- \
        --peer "tls://127.0.0.1:$PC" $CERT
    NODE_NAME=nodeb refused dup_own nodeb 'refused a stream \(409\): that is this node.s own name' \
        'the peer refused the link \(409\): that is this node.s own name' "" -- --peer "tcp://127.0.0.1:$PB"
    refused rogue_client nodec 'link connection from 127\.0\.0\.1 closed: TLS handshake failed: .*certificate verify failed' \
        'link to 127\.0\.0\.1:[0-9]*: TLS (handshake failed|error): .*alert unknown ca' "" -- \
        --peer "tls://127.0.0.1:$PC" --peer-ca "$T/ca.crt" --peer-cert "$T/rogue-client.crt" --peer-key "$T/rogue-client.key"
    refused rogue_server nodec 'link connection from 127\.0\.0\.1 closed: TLS handshake failed: .*alert unknown ca' 'link to 127\.0\.0\.1:[0-9]*: TLS handshake failed: .*certificate verify failed' "" -- \
        --peer "tls://127.0.0.1:$PC" --peer-ca "$T/rogue-ca.crt" --peer-cert "$T/nodea.crt" --peer-key "$T/nodea.key"
}
# as another uid: what the credentials allow (a node under our own uid is trusted on loopback)
# shellcheck disable=SC2086
if [ -n "$FOREIGN" ]; then
    refused cert_no_link noded 'link from 127\.0\.0\.1:[0-9]* \(cert:/CN=nodea\): not allowed to link' \
        'the peer refused the link \(403\): this principal lacks the link role' "$FOREIGN" -- --peer "tls://127.0.0.1:$PD" $CERT
    refused cert_other_name nodec 'link from 127\.0\.0\.1:[0-9]* \(cert:/CN=nodea\): refused the node name "cert_other_name"' \
        'the peer refused the link \(403\): this certificate links only under its CN as the node name' "$FOREIGN" -- \
        --peer "tls://127.0.0.1:$PC" $CERT
    refused cert_cn_in_o nodec 'link from 127\.0\.0\.1:[0-9]* \(cert:/O=x[\\]*/CN=cert_cn_in_o/CN=nodez\): refused the node name "cert_cn_in_o"' \
        'the peer refused the link \(403\): this certificate links only under its CN as the node name' "$FOREIGN" -- \
        --peer "tls://127.0.0.1:$PC" --peer-ca "$T/ca.crt" --peer-cert "$T/nodez.crt" --peer-key "$T/nodez.key"
    refused token_other_name nodeb 'link from 127\.0\.0\.1:[0-9]*: token nodea may link only as node "nodea", not "token_other_name"' \
        'the peer refused the link \(403\): this token links only under its own name as the node name' "$FOREIGN" -- \
        --peer "tcp://127.0.0.1:$PB" --link-token-file "$T/a.token"
    refused bad_token nodeb 'link from 127\.0\.0\.1:[0-9]*: bad token' \
        'the peer refused the link \(401\): authentication required' "$FOREIGN" -- \
        --peer "tcp://127.0.0.1:$PB" --link-token-file "$T/bad.token"
    refused no_token nodeb 'link from 127\.0\.0\.1:[0-9]*: no credentials' \
        'the peer refused the link \(401\): authentication required' "$FOREIGN" -- --peer "tcp://127.0.0.1:$PB"
    refused rec_token nodeb 'link from 127\.0\.0\.1:[0-9]*: token rec lacks the link role' \
        'the peer refused the link \(403\): this token lacks the link role' "$FOREIGN" -- \
        --peer "tcp://127.0.0.1:$PB" --link-token-file "$T/rec.token"
fi
# the refused ones never became nodes; the real links stayed up
expect_state nodec nodea "up -"
expect_state nodeb nodea "up -"
for n in dup_linked dup_own rogue_client rogue_server cert_no_link cert_other_name cert_cn_in_o token_other_name \
    bad_token no_token rec_token; do
    for v in nodeb nodec noded; do
        [ -z "$(node_state "$v" "$n")" ] || fail "$v lists the refused node $n"
    done
done
kill -0 "$A_PID" || fail "nodea exited"
echo "PASS"
exit 0
