#!/bin/sh
# test_ws_adb.sh: /adb, tracegated's drop-in for Perfetto's websocket_bridge, end to end against a
# real ADB server (Debian's adb on a private port, no device needed) and a tiny fake one that
# streams: host:version and host:devices through /adb from the Perfetto UI's Origin, as a local
# admin and as a token with only the adb role; a foreign Origin (403) and a token without the adb
# role (403) refused, counted and logged; every pipe logged with its principal; /api/status lists
# the routes with their roles and targets; the ADB server down → the WebSocket closes with 1011
# and the reason, tracegated stays healthy and the next request works once the server is back; a
# client that stops reading while the ADB side streams gets the gateway to pause reading (metric)
# with at most a bounded amount held, then gets every byte in order when it reads again.
# Environment (from `make check`): TG_BUILDDIR, TG_SRCDIR. Exit 77 = skipped.
set -u
. "$(dirname "$0")/gw_lib.sh"
need "$TRACEGATED" "$CLIENT"
for tool in adb python3 curl jq; do
    command -v $tool >/dev/null 2>&1 || { echo "SKIP: $tool is not installed (contrib/install-deps.sh)"; exit 77; }
done
WSC="python3 $S/tests/integration/ws_adb_client.py"
UI=https://ui.perfetto.dev
unset ADB_SERVER_SOCKET ANDROID_ADB_SERVER_PORT ANDROID_ADB_SERVER_ADDRESS

# ---- a real ADB server on a private port, with its own HOME (adb keeps its key there) ----
mkdir -p "$T/home"
APORT=
adb_p() { HOME=$T/home tg_timeout 30 adb -P "$APORT" "$@"; }
adb_stop() { [ -n "$APORT" ] && adb_p kill-server >/dev/null 2>&1; }
trap 'adb_stop; cleanup' EXIT
try=0
while [ -z "$APORT" ] && [ $try -lt 5 ]; do
    try=$((try + 1))
    APORT=$("$CLIENT" free-port)
    adb_p start-server >"$T/adb-start.txt" 2>&1 || APORT=
done
[ -n "$APORT" ] || fail "adb start-server failed: $(cat "$T/adb-start.txt")"
ADB_VER=$(adb version | sed -n 's/^Android Debug Bridge version [0-9]*\.[0-9]*\.\([0-9]*\).*/\1/p')
WANT_VER=$(printf '%04x' "$ADB_VER")
echo "ADB server (adb 1.0.$ADB_VER) on tcp:$APORT"

# ---- tokens: one with only the adb role, one recorder ----
ADB_TOKEN=adb-token-$$-for-the-test-suite
REC_TOKEN=rec-token-$$-for-the-test-suite
printf 'adbuser adb %s\nrecuser recorder %s\n' "$(printf %s "$ADB_TOKEN" | "$TRACEGATED" --hash-token)" \
    "$(printf %s "$REC_TOKEN" | "$TRACEGATED" --hash-token)" >"$T/tokens"

start_gw_http main --token-file "$T/tokens" --adb-server "tcp:$APORT"
P=$HTTP_PORT
U=http://127.0.0.1:$P
# metric NAME{LABELS}: its value, or 0 (label values may hold blanks: match the whole prefix)
metric() {
    curl -s "$U/metrics" | awk -v k="$1 " 'index($0, k) == 1 { print $NF; f = 1 } END { if (!f) print 0 }'
}
echo "tracegated on $U"
grep -q "/adb to the ADB server tcp:$APORT" "$T/main.log" || fail "the start-up line does not name the ADB server"

# ---- host:version and host:devices from the UI's Origin, as the local admin ----
$WSC --origin $UI "$P" /adb request host:version >"$T/version.out" 2>&1 || fail "host:version: $(cat "$T/version.out")"
[ "$(sed -n 1p "$T/version.out")" = "OKAY $WANT_VER" ] || fail "host:version answered $(cat "$T/version.out") (want OKAY $WANT_VER)"
[ "$(sed -n 2p "$T/version.out")" = "close 1000 connection closed" ] ||
    fail "the WebSocket did not close normally after the server did: $(cat "$T/version.out")"
$WSC --origin $UI "$P" /adb request host:devices >"$T/devices.out" 2>&1 || fail "host:devices: $(cat "$T/devices.out")"
# the same device list adb itself reports (empty on CI machines)
want=$(adb_p devices | sed '1d;/^$/d' | tr '\t' ' ' | awk '{ printf "%s%s", (NR > 1 ? "\\n" : ""), $0 }')
got=$(sed -n 's/^OKAY //p' "$T/devices.out" | sed 's/\\t/ /g;s/\\n$//')
sed -n 1p "$T/devices.out" | grep -q '^OKAY' || fail "host:devices answered $(cat "$T/devices.out")"
[ "$got" = "$want" ] || fail "host:devices through /adb ($got) differs from adb devices ($want)"
grep -Eq "adb: /adb for ws\(127\.0\.0\.1:[0-9]+\) \(uid:$(id -u)\) to tcp:$APORT" "$T/main.log" ||
    fail "the /adb pipe was not logged with its principal"
grep -Eq "adb: closed /adb of ws\(127\.0\.0\.1:[0-9]+\) \(uid:$(id -u)\): 16 bytes to the ADB server, 12 to the client \(ADB server closed\)" \
    "$T/main.log" || fail "the end of the host:version pipe was not logged with its byte counts"
echo "host:version (OKAY $WANT_VER) and host:devices through /adb from $UI"

# ---- a token with only the adb role works; Origin and role refusals ----
$WSC --origin $UI --token "$ADB_TOKEN" "$P" /adb request host:version >"$T/tok.out" 2>&1 ||
    fail "host:version with the adb token: $(cat "$T/tok.out")"
[ "$(sed -n 1p "$T/tok.out")" = "OKAY $WANT_VER" ] || fail "host:version with the adb token: $(cat "$T/tok.out")"
grep -q "adb: /adb for .* (token:adbuser) to tcp:$APORT" "$T/main.log" || fail "the token's principal was not logged"
if grep -q "$ADB_TOKEN" "$T/main.log"; then fail "the token leaked into the log"; fi

$WSC --origin https://evil.example "$P" /adb upgrade >"$T/origin.out" 2>&1
grep -q '^403 .*Origin not allowed' "$T/origin.out" || fail "a foreign Origin got: $(cat "$T/origin.out")"
$WSC --origin $UI --token "$REC_TOKEN" "$P" /adb upgrade >"$T/role.out" 2>&1
grep -q '^403 .*/adb needs the adb role' "$T/role.out" || fail "a recorder token got: $(cat "$T/role.out")"
grep -q 'refused WebSocket /adb from .*: 403 /adb needs the adb role' "$T/main.log" || fail "the role refusal was not logged"
[ "$(metric 'tracegated_connections_rejected_total{reason="ws adb role"}')" = 1 ] || fail "the role refusal was not counted"
[ "$(metric 'tracegated_connections_rejected_total{reason="ws origin"}')" = 1 ] || fail "the Origin refusal was not counted"
[ "$(metric tracegated_adb_connections_total)" = 3 ] || fail "tracegated_adb_connections_total is not 3"
echo "foreign Origin and a token without the adb role refused (403), counted and logged"

# ---- /api/status: the routes with their roles and targets ----
curl -s "$U/api/status" >"$T/status.json" || fail "/api/status unreachable"
jq -e --arg t "ADB server tcp:$APORT" '.routes[] | select(.path == "/adb") |
    .enabled and .kind == "websocket" and .roles == ["admin", "adb"] and .target == $t' "$T/status.json" >/dev/null ||
    fail "/api/status does not list /adb with its roles and target: $(jq -c .routes "$T/status.json")"
jq -e '[.routes[].path] | index("/traced") != null and index("/producer") != null and index("/metrics") != null' \
    "$T/status.json" >/dev/null || fail "/api/status misses routes: $(jq -c .routes "$T/status.json")"
jq -e '.routes[] | select(.path == "/traced") | .roles == ["observer", "recorder", "admin"]' "$T/status.json" >/dev/null ||
    fail "/api/status: /traced roles: $(jq -c .routes "$T/status.json")"

# ---- the ADB server down: a clear close reason; tracegated stays healthy ----
adb_p kill-server >/dev/null 2>&1 || fail "adb kill-server failed"
$WSC --origin $UI "$P" /adb request host:version >"$T/down.out" 2>&1
grep -Eq "^close 1011 ADB server tcp:$APORT not reachable: Connection refused$" "$T/down.out" ||
    fail "with the ADB server down the WebSocket closed with: $(cat "$T/down.out")"
grep -q "adb: /adb for .*: ADB server tcp:$APORT not reachable: Connection refused" "$T/main.log" ||
    fail "the unreachable ADB server was not logged"
[ "$(metric tracegated_adb_failures_total)" = 1 ] || fail "the failure was not counted"
kill -0 "$GW_PID" 2>/dev/null || fail "tracegated exited"
[ "$(curl -s "$U/healthz")" = ok ] || fail "/healthz is not ok after the ADB server went down"
adb_p start-server >"$T/adb-restart.txt" 2>&1 || fail "adb start-server (again) failed: $(cat "$T/adb-restart.txt")"
$WSC --origin $UI "$P" /adb request host:version >"$T/again.out" 2>&1 || fail "host:version after the restart: $(cat "$T/again.out")"
[ "$(sed -n 1p "$T/again.out")" = "OKAY $WANT_VER" ] || fail "host:version after the restart: $(cat "$T/again.out")"
echo "ADB server down: closed with 1011 and the reason; tracegated healthy; served again once the server is back"

# ---- a client that stops reading while the ADB side streams ----
python3 "$S/tests/integration/fake_adb_server.py" "$T/fake.port" "$T/fake.log" 2>"$T/fake.err" &
FAKE_PID=$!
PIDS="$PIDS $FAKE_PID"
wait_for 20 test -s "$T/fake.port" || fail "the fake ADB server did not start: $(cat "$T/fake.err")"
start_gw_http slow --adb-server "tcp:$(cat "$T/fake.port")"
P2=$HTTP_PORT
U=http://127.0.0.1:$P2
# bound: each direction holds at most 256 KiB plus one read before the other side is paused
BOUND=$((2 * (256 + 64) * 1024))
$WSC --origin $UI --rcvbuf 16384 "$P2" /adb stream host:tg-stream --first 100000 --ready-file "$T/ready" \
    --hold-until "$T/go" --then 20000000 >"$T/stream.out" 2>&1 &
SPID=$!
wait_for 30 test -f "$T/ready" || fail "the stream did not start: $(cat "$T/stream.out")"
paused() { [ "$(metric 'tracegated_adb_paused_total{direction="to_client"}')" -ge 1 ]; }
wait_for 30 paused || fail "the gateway never paused the ADB side for a client that does not read"
max=$(metric tracegated_adb_buffered_bytes_max)
[ "$max" -gt 0 ] && [ "$max" -le $BOUND ] || fail "when it paused, the gateway held $max bytes (bound $BOUND)"
# the fake server finds its socket full: nothing drains while the client holds
wait_for_line 30 "$T/fake.log" '^stream blocked after' || fail "the fake ADB server never blocked"
now=$(metric tracegated_adb_buffered_bytes)
max=$(metric tracegated_adb_buffered_bytes_max)
[ "$now" -le $BOUND ] && [ "$max" -le $BOUND ] || fail "while paused the gateway holds $now bytes (max $max, bound $BOUND)"
echo "paused: the gateway holds $now bytes for the stalled client (max $max, bound $BOUND)"
touch "$T/go"
wait_exit "$SPID" 60
[ "$WAIT_RC" = 0 ] || fail "the stream did not resume intact (rc $WAIT_RC): $(cat "$T/stream.out")"
grep -q '^stream ok 20100000 bytes' "$T/stream.out" || fail "stream: $(cat "$T/stream.out")"
max=$(metric tracegated_adb_buffered_bytes_max)
[ "$max" -le $BOUND ] || fail "the gateway held $max bytes for one pipe (bound $BOUND)"
echo "resumed: 20100000 bytes in order; at most $max bytes held"

echo "PASS: /adb through a real ADB server: UI Origin, roles, close reasons, flow control"
