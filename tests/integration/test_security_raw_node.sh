#!/bin/sh
# test_security_raw_node.sh: a raw node (--node NAME=ADDR, a traced-compatible consumer socket) sees
# each hub client as that client, as the hub's own upstream does (docs/security.md, "Raw nodes").
# The node here is a second tracegated whose embedded service also listens on loopback TCP, as a
# traced with a TCP consumer socket does; the hub reaches it as --node raw=tcp://127.0.0.1:PORT.
# Attacks, each followed by the legitimate path:
#  - two token principals of the hub (alice, bob) record through `--node raw`: bob neither lists
#    nor clones alice's session there, not through --node raw nor through @all, and the node's
#    service created their sessions for two distinct uids from the derived range (before: the hub
#    sent no SetPeerIdentity, so the node took every hub client for uid 0, one principal);
#  - as root: root records through `--node raw`; uid 65534 through the hub's loopback TCP listener
#    neither lists nor clones it; the node sees uid 0 and uid 65534;
#  - as root: a raw node on a UNIX socket (where traced ignores SetPeerIdentity and sees the hub's
#    uid for everyone) is refused to uid 65534 with the reason, served to root, and served to
#    65534 once --local-user-roles is set explicitly (the bridge-mode rule); a UNIX node socket
#    that another uid serves later is refused (the upstream owner check).
# Exit 77 = skipped.
set -u
. "$(dirname "$0")/gw_lib.sh"
need "$TRACEGATED" "$TRACECTL" "$CLIENT"
chmod 0755 "$T"
mkdir -m 1777 "$T/pub"

# sessions_listed FILE: the ids in the TRACING SESSIONS table of a `tracectl query` output
sessions_listed() { awk '/^TRACING SESSIONS:/ { on = 1; next } /^CAPABILITIES/ { on = 0 } on && $1 ~ /^[0-9]+$/ { print $1 }' "$1"; }
# session_uids: the uids the node's service created sessions for, in order
session_uids() { sed -n 's/.*session [0-9]* created (uid \(-\{0,1\}[0-9]*\),.*/\1/p' "$T/node.log"; }

# ---- the node: its embedded service on a UNIX path and on loopback TCP (a free port; retried);
# the UNIX path is in a directory uid 65534 may write, for the squatter at the end ----
NODE_TCP=
try=0
while [ -z "$NODE_TCP" ] && [ $try -lt 8 ]; do
    try=$((try + 1))
    cand=$("$CLIENT" free-port)
    rm -f "$T/node-p.sock" "$T/pub/node-c.sock"
    "$TRACEGATED" --node-name node --producer-socket "$T/node-p.sock" \
        --consumer-socket "$T/pub/node-c.sock,127.0.0.1:$cand" --no-http --listen "consumer=unix:$T/node-gw.sock" \
        --log-level info >"$T/node.log" 2>&1 &
    NODE_PID=$!
    wait_for 20 _gw_up node "$NODE_PID" || fail "the node did not become ready"
    if grep -q "tracegated .* ready" "$T/node.log"; then
        NODE_TCP=127.0.0.1:$cand
        PIDS="$PIDS $NODE_PID"
    else
        wait "$NODE_PID" 2>/dev/null
        cp "$T/node.log" "$T/node.try$try.txt"
    fi
done
[ -n "$NODE_TCP" ] || fail "the node did not start on any of $try ports: $(cat "$T/node.log")"

ALICE=$("$TRACEGATED" --gen-token 2>/dev/null)
BOB=$("$TRACEGATED" --gen-token 2>/dev/null)
{
    echo "alice recorder $(printf %s "$ALICE" | "$TRACEGATED" --hash-token)"
    echo "bob recorder $(printf %s "$BOB" | "$TRACEGATED" --hash-token)"
} >"$T/tokens"
chmod 600 "$T/tokens"

start_gw hub --node-name hub --no-http --node "raw=tcp://$NODE_TCP" --token-file "$T/tokens" \
    --listen "consumer=tcp://127.0.0.1:0" --listen "consumer=tcp://127.0.0.1:0?auth=token"
HUB_TCP=$(gw_addr hub 1)
HUB_TOK=$(gw_addr hub 2)
[ -n "$HUB_TCP" ] && [ -n "$HUB_TOK" ] || fail "the hub's TCP listeners are missing"

# ---- two token principals through --node raw ----
as_alice() { tg_timeout 30 "$TRACECTL" --token "$ALICE" --node raw "$@"; }
as_bob() { tg_timeout 30 "$TRACECTL" --token "$BOB" --node raw "$@"; }
as_alice record "tcp://$HUB_TOK" --duration 10m --detach alicekey -o "$T/unused" >"$T/rec-alice.out" 2>&1 ||
    fail "alice could not record through --node raw: $(cat "$T/rec-alice.out")"
as_alice query "tcp://$HUB_TOK" >"$T/q-alice.out" 2>&1 || fail "alice's query: $(cat "$T/q-alice.out")"
ALICE_SID=$(sessions_listed "$T/q-alice.out")
[ "$(echo "$ALICE_SID" | wc -w)" = 1 ] || fail "alice should see exactly her session: $(cat "$T/q-alice.out")"
as_bob query "tcp://$HUB_TOK" >"$T/q-bob.out" 2>&1 || fail "bob's query failed: $(cat "$T/q-bob.out")"
[ -z "$(sessions_listed "$T/q-bob.out")" ] || fail "bob lists alice's session on the raw node: $(cat "$T/q-bob.out")"
if as_bob clone "tcp://$HUB_TOK" "$ALICE_SID" -o "$T/stolen.pftrace" >"$T/clone-bob.out" 2>&1; then
    fail "bob cloned alice's session on the raw node"
fi
grep -q "Not allowed" "$T/clone-bob.out" || fail "the refused clone does not say why: $(cat "$T/clone-bob.out")"
as_bob record "tcp://$HUB_TOK" --duration 10m --detach bobkey -o "$T/unused2" >"$T/rec-bob.out" 2>&1 ||
    fail "bob could not record through --node raw: $(cat "$T/rec-bob.out")"
# through the fan-out (@all): the hub and the raw node, bob sees his own session only
tg_timeout 30 "$TRACECTL" --token "$BOB" --node @all query "tcp://$HUB_TOK" >"$T/q-bob-all.out" 2>&1 ||
    fail "bob's @all query failed: $(cat "$T/q-bob-all.out")"
[ "$(sessions_listed "$T/q-bob-all.out" | wc -l)" = 1 ] || fail "bob's @all query lists other sessions: $(cat "$T/q-bob-all.out")"
sessions_listed "$T/q-bob-all.out" | grep -qx "$ALICE_SID" && fail "bob lists alice's session through @all"
uids=$(session_uids)
[ "$(echo "$uids" | wc -l)" = 2 ] || fail "the node should have created two sessions: $uids"
for u in $uids; do
    [ "$u" -ge 1073741824 ] && [ "$u" -lt 1090519040 ] ||
        fail "the node created a session for uid $u, not a uid derived from a token principal"
done
[ "$(echo "$uids" | sort -u | wc -l)" = 2 ] || fail "the node saw alice and bob as one uid: $uids"
echo "ok: two token principals are two uids at the raw node; neither lists nor clones the other's session"

if [ "$(id -u)" != 0 ] || ! command -v setpriv >/dev/null 2>&1; then
    echo "PASS (the local-user parts need root and setpriv: skipped)"
    exit 0
fi
NOBODY=65534
as_nobody() { setpriv --reuid=$NOBODY --regid=$NOBODY --clear-groups -- "$@"; }

# ---- root and uid 65534 through the hub's loopback TCP listener and --node raw ----
tg_timeout 30 "$TRACECTL" --node raw record "tcp://$HUB_TCP" --duration 10m --detach rootkey -o "$T/unused3" \
    >"$T/rec-root.out" 2>&1 || fail "root could not record through --node raw: $(cat "$T/rec-root.out")"
tg_timeout 20 "$TRACECTL" --node raw query "tcp://$HUB_TCP" >"$T/q-root.out" 2>&1 || fail "root's query failed"
ROOT_SID=$(sessions_listed "$T/q-root.out")
[ "$(echo "$ROOT_SID" | wc -w)" = 1 ] || fail "root should see exactly its own session on the node: $(cat "$T/q-root.out")"
as_nobody "$TRACECTL" --node raw query "tcp://$HUB_TCP" >"$T/q-nobody.out" 2>&1 ||
    fail "uid 65534's query failed: $(cat "$T/q-nobody.out")"
[ -z "$(sessions_listed "$T/q-nobody.out")" ] || fail "uid 65534 lists root's session on the raw node: $(cat "$T/q-nobody.out")"
if as_nobody "$TRACECTL" --node raw clone "tcp://$HUB_TCP" "$ROOT_SID" -o "$T/pub/stolen.pftrace" \
    >"$T/clone-nobody.out" 2>&1; then
    fail "uid 65534 cloned root's session on the raw node"
fi
grep -q "Not allowed" "$T/clone-nobody.out" || fail "the refused clone does not say why: $(cat "$T/clone-nobody.out")"
as_nobody "$TRACECTL" --node raw record "tcp://$HUB_TCP" --duration 10m --detach nobodykey -o "$T/pub/unused" \
    >"$T/rec-nobody.out" 2>&1 || fail "uid 65534 could not record through --node raw: $(cat "$T/rec-nobody.out")"
[ "$(session_uids | sed -n 3,4p | tr '\n' ' ')" = "0 $NOBODY " ] ||
    fail "the node should have created sessions for uid 0 and uid $NOBODY: $(session_uids | tr '\n' ' ')"
echo "ok: root and uid 65534 are themselves at the raw node"

# ---- a raw node on a UNIX socket: the bridge-mode rule ----
start_gw hubu --node-name hubu --no-http --node "rawu=unix:$T/pub/node-c.sock" --listen "consumer=tcp://127.0.0.1:0"
HUBU_TCP=$(gw_addr hubu 1)
grep -q "node rawu is a UNIX socket" "$T/hubu.log" || fail "the hub does not say what a UNIX raw node means at start-up"
if as_nobody "$TRACECTL" --node rawu query "tcp://$HUBU_TCP" >"$T/q-nobody-u.out" 2>&1; then
    fail "uid 65534 was routed to a UNIX raw node, where it would be the hub's uid: $(cat "$T/q-nobody-u.out")"
fi
wait_for_line 10 "$T/hubu.log" "node rawu is a UNIX socket, where every client is uid 0" ||
    fail "the refusal is not logged with its reason"
tg_timeout 20 "$TRACECTL" --node rawu query "tcp://$HUBU_TCP" >"$T/q-root-u.out" 2>&1 ||
    fail "root was not routed to the UNIX raw node: $(cat "$T/q-root-u.out")"
start_gw hubv --node-name hubv --no-http --node "rawu=unix:$T/pub/node-c.sock" --listen "consumer=tcp://127.0.0.1:0" \
    --local-user-roles recorder,producer
HUBV_TCP=$(gw_addr hubv 1)
as_nobody "$TRACECTL" --node rawu query "tcp://$HUBV_TCP" >"$T/q-nobody-v.out" 2>&1 ||
    fail "with --local-user-roles set, uid 65534 was not routed to the UNIX raw node: $(cat "$T/q-nobody-v.out")"
echo "ok: a UNIX raw node is refused to other local users unless --local-user-roles is set"

# ---- a UNIX node socket served by another uid than at start-up is refused ----
mv "$T/pub/node-c.sock" "$T/pub/node-c.sock.real"
python3 - "$T/pub/node-c.sock" <<'EOF' &
import os, socket, sys
os.setgid(65534); os.setuid(65534)
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.bind(sys.argv[1]); s.listen(8)
while True:
    c, _ = s.accept()
    c.close()
EOF
PIDS="$PIDS $!"
wait_for 10 test -S "$T/pub/node-c.sock" || fail "the squatter did not start"
if tg_timeout 20 "$TRACECTL" --node rawu query "tcp://$HUBU_TCP" >"$T/q-squat.out" 2>&1; then
    fail "the hub used a node socket now served by uid $NOBODY"
fi
wait_for_line 10 "$T/hubu.log" "is now served by uid $NOBODY, not a uid this gateway trusts" ||
    fail "the squatted node socket is not refused with its reason"
echo "ok: a UNIX node socket taken over by another uid is refused"
echo PASS
