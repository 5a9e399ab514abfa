#!/bin/sh
# test_link_adb.sh: /adb/NAME across a gateway link (issue: the hosted Perfetto UI on a laptop
# reaches an Android phone plugged into a lab machine). A real ADB server (Debian's adb) on a
# private port belongs to "lab"; "laptop" links to it and serves ws://.../adb/lab from the UI's
# Origin: host:version and host:devices answer as adb itself does. The lab node serves ADB
# channels only to links whose roles include adb: without it the channel is refused (logged on
# both sides) and the UI's WebSocket closes with a reason. /adb/<unknown> is refused.
# Environment (from `make check`): TG_BUILDDIR, TG_SRCDIR. Exit 77 = skipped.
REC_TAG=link-adb
. "$(dirname "$0")/record_lib.sh"

command -v adb >/dev/null 2>&1 || { echo "SKIP: adb is not installed (contrib/install-deps.sh)"; exit 77; }
WSC="python3 $S/tests/integration/ws_adb_client.py"
ORIGIN=https://ui.perfetto.dev
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
_ready_or_gone() { grep -q "tracegated .* ready" "$1" 2>/dev/null || ! kill -0 "$2" 2>/dev/null; }

mkdir -p "$T/home"
adb_p() { HOME=$T/home tg_timeout 30 adb -P "$APORT" "$@"; }
APORT=
for try in 1 2 3 4 5; do
    APORT=$(free_port)
    adb_p start-server >"$T/adb-start.txt" 2>&1 && break
    APORT=
done
[ -n "$APORT" ] || fail "adb start-server failed: $(cat "$T/adb-start.txt")"
stop_adb() { adb_p kill-server >/dev/null 2>&1; }
WANT_VERSION=$(adb_p version | sed -n 's/^Version \([0-9.]*\).*/\1/p' | head -n 1)

# start NAME ARGS...: a node on free ports (LINK_PORT/HTTP_PORT substituted for @LP@/@HP@)
start() {
    name=$1
    shift
    for try in 1 2 3 4 5; do
        LP=$(free_port)
        HP=$(free_port)
        n=$#
        for a in "$@"; do set -- "$@" "$(printf '%s' "$a" | sed "s/@LP@/$LP/g; s/@HP@/$HP/g")"; done
        shift "$n"
        "$TRACEGATED" --node-name "$name" --producer-socket "$T/$name-p.sock" --consumer-socket "$T/$name-c.sock" \
            "$@" >"$T/$name.log" 2>&1 &
        NODE_PID=$!
        wait_for 30 _ready_or_gone "$T/$name.log" "$NODE_PID"
        if kill -0 "$NODE_PID" 2>/dev/null; then
            PIDS="$PIDS $NODE_PID"
            return 0
        fi
        wait "$NODE_PID" 2>/dev/null
    done
    fail "$name did not start: $(cat "$T/$name.log")"
}
linked() { tg_timeout 10 "$TRACECTL" nodes "ws://127.0.0.1:$1/traced" 2>/dev/null | grep -q "^$2  *up "; }

# ---- lab: the ADB server's node, which lets linked nodes use it (link-roles with adb) ----
start lab --no-http --listen-link "tcp://127.0.0.1:@LP@" --adb-server "tcp:127.0.0.1:$APORT" \
    --link-roles observer,recorder,producer,adb
LAB_LP=$LP
start laptop --http "127.0.0.1:@HP@" --peer "tcp://127.0.0.1:$LAB_LP"
LAPTOP_HP=$HP
wait_for 30 linked "$LAPTOP_HP" lab || fail "the link did not come up"

$WSC --origin "$ORIGIN" "$LAPTOP_HP" /adb/lab request host:version >"$T/version.txt" 2>&1 ||
    fail "host:version through /adb/lab: $(cat "$T/version.txt")"
cat "$T/version.txt"
# adb's answer is its protocol version in hex (e.g. 0029 for 41)
grep -q '^OKAY [0-9a-f]\{4\}$' "$T/version.txt" || fail "no adb version answer: $(cat "$T/version.txt")"
$WSC --origin "$ORIGIN" "$LAPTOP_HP" /adb/lab request host:devices >"$T/devices.txt" 2>&1 ||
    fail "host:devices through /adb/lab: $(cat "$T/devices.txt")"
grep -q '^OKAY' "$T/devices.txt" || fail "no device list: $(cat "$T/devices.txt")"
grep -q "ADB channel .* to lab for node:laptop/" "$T/lab.log" || fail "lab did not log the ADB channel with its principal"
echo "host:version and host:devices through /adb/lab (adb $WANT_VERSION)"

# ---- tracectl nodes --adb: which nodes have an ADB server and what it sees (as adb devices does) ----
tg_timeout 60 "$TRACECTL" nodes "ws://127.0.0.1:$LAPTOP_HP/traced" --adb >"$T/nodes-adb.txt" 2>&1 ||
    fail "tracectl nodes --adb: $(cat "$T/nodes-adb.txt")"
cat "$T/nodes-adb.txt"
DEVICES=$(adb_p devices | sed -n '2,$p' | grep -c .)
if [ "$DEVICES" -eq 0 ]; then
    grep -q '^  lab  *adb: server up, no devices$' "$T/nodes-adb.txt" || fail "lab's ADB server is not shown"
else
    grep -q '^  lab  *adb: ' "$T/nodes-adb.txt" || fail "lab's devices are not shown"
fi
grep -q '^  laptop  *adb: ' "$T/nodes-adb.txt" || fail "laptop's ADB line is missing"

# ---- the Perfetto UI's fixed target, plain /adb, sent on to lab with adb-node ----
start laptop3 --http "127.0.0.1:@HP@" --peer "tcp://127.0.0.1:$LAB_LP" --adb-node lab
wait_for 30 linked "$HP" lab || fail "laptop3's link did not come up"
$WSC --origin "$ORIGIN" "$HP" /adb request host:version >"$T/plain.txt" 2>&1 ||
    fail "host:version through plain /adb with adb-node: $(cat "$T/plain.txt")"
grep -q '^OKAY [0-9a-f]\{4\}$' "$T/plain.txt" || fail "plain /adb did not reach lab: $(cat "$T/plain.txt")"
[ "$(grep -c "ADB channel .* to lab for node:laptop" "$T/lab.log")" -ge 3 ] ||
    fail "lab did not serve laptop3's plain /adb: $(grep 'ADB channel' "$T/lab.log")"

# ---- an unknown node: refused with a reason ----
$WSC --origin "$ORIGIN" "$LAPTOP_HP" /adb/nosuch request host:version >"$T/nosuch.txt" 2>&1
grep -q "close .*no node nosuch" "$T/nosuch.txt" || fail "/adb/nosuch: $(cat "$T/nosuch.txt")"

# ---- a lab whose link roles lack adb refuses the channel ----
start lab2 --no-http --listen-link "tcp://127.0.0.1:@LP@" --adb-server "tcp:127.0.0.1:$APORT"
LAB2_LP=$LP
start laptop2 --http "127.0.0.1:@HP@" --peer "tcp://127.0.0.1:$LAB2_LP"
wait_for 30 linked "$HP" lab2 || fail "the second link did not come up"
$WSC --origin "$ORIGIN" "$HP" /adb/lab2 request host:version >"$T/refused.txt" 2>&1
if grep -q '^OKAY' "$T/refused.txt"; then fail "lab2 served ADB to a link without the adb role"; fi
wait_for_line 20 "$T/lab2.log" "refused an ADB channel .*roles do not include adb" ||
    fail "lab2 did not log the refusal: $(grep -i adb "$T/lab2.log")"
stop_adb
echo "PASS: /adb/NAME across a link, refused without the adb role"
