#!/bin/sh
# test_ws_basic.sh: tracegated's HTTP/WebSocket front end end to end: /healthz, /metrics,
# /api/status, the built-in page, 403 for a foreign Origin, 401 for a bad token, and
# `tracectl query ws://127.0.0.1:PORT/traced` (plus a token via the subprotocol) through it.
# Environment (from `make check`): TG_BUILDDIR. Exit 77 = skipped.
set -u

B=${TG_BUILDDIR:-$(pwd)}
S=${TG_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
. "$S/tests/integration/tg_wait.sh"
. "$S/tests/integration/tg_scratch.sh"
TRACEGATED=$B/gateway/tracegated
TRACECTL=$B/src/tracectl/tracectl

for bin in "$TRACEGATED" "$TRACECTL"; do
    if [ ! -x "$bin" ]; then
        echo "SKIP: $bin is not built yet"
        exit 77
    fi
done
for tool in curl timeout; do
    if ! command -v $tool >/dev/null 2>&1; then
        echo "SKIP: $tool is not installed"
        exit 77
    fi
done
if ! "$TRACEGATED" --help 2>&1 | grep -q -- "--http "; then
    echo "SKIP: this tracegated has no --http (no WebSocket front end)"
    exit 77
fi

tg_scratch ws-basic

# a token file: name role sha256(token)
TOKEN=ws-basic-token-$$
HASH=$(printf '%s' "$TOKEN" | sha256sum | cut -d' ' -f1)
printf 'ci-user recorder %s\n' "$HASH" >"$T/tokens"

# ---- tracegated on a free port (retry if another process grabbed it) ----
http_up_or_gone() { curl -s -o /dev/null "http://127.0.0.1:$1/healthz" || ! kill -0 "$2" 2>/dev/null; }
PORT=
try=0
while [ $try -lt 8 ]; do
    try=$((try + 1))
    cand=$(( 20000 + ($$ * 7919 + try * 104729 + $(date +%N 2>/dev/null | sed 's/^0*//;s/^$/0/') ) % 40000 ))
    rm -f "$T/p.sock" "$T/c.sock"
    "$TRACEGATED" --producer-socket "$T/p.sock" --consumer-socket "$T/c.sock" --http "127.0.0.1:$cand" \
        --token-file "$T/tokens" --log-level info >"$T/tracegated.log" 2>&1 &
    DPID=$!
    PIDS=$DPID
    # up (answers /healthz), or gone (the port was taken: try another)
    wait_for 20 http_up_or_gone "$cand" "$DPID" || fail "tracegated did not start its HTTP front end"
    kill -0 "$DPID" 2>/dev/null && PORT=$cand
    [ -n "$PORT" ] && break
    kill "$DPID" 2>/dev/null
    wait "$DPID" 2>/dev/null
    PIDS=
done
[ -n "$PORT" ] || fail "tracegated did not start its HTTP front end"
U=http://127.0.0.1:$PORT
echo "tracegated on $U"

# ---- HTTP routes ----
code=$(curl -s -o "$T/healthz" -w '%{http_code}' "$U/healthz")
[ "$code" = 200 ] || fail "/healthz: HTTP $code"
grep -qx ok "$T/healthz" || fail "/healthz body: $(cat "$T/healthz")"

curl -s -D "$T/metrics.hdr" -o "$T/metrics" "$U/metrics" || fail "/metrics unreachable"
grep -qi '^content-type: text/plain; version=0.0.4' "$T/metrics.hdr" || fail "/metrics content type"
grep -q '^# TYPE ' "$T/metrics" || fail "/metrics has no metrics"

code=$(curl -s -o "$T/status" -w '%{http_code}' "$U/api/status")
[ "$code" = 200 ] || fail "/api/status: HTTP $code"
head -c 1 "$T/status" | grep -q '{' || fail "/api/status is not JSON"

code=$(curl -s -o /dev/null -w '%{http_code}' "$U/")
[ "$code" = 200 ] || fail "/: HTTP $code"
code=$(curl -s -o /dev/null -w '%{http_code}' "$U/no-such-page")
[ "$code" = 404 ] || fail "/no-such-page: HTTP $code (want 404)"
code=$(curl -s -o /dev/null -w '%{http_code}' --path-as-is "$U/../../etc/passwd")
[ "$code" != 200 ] || fail "path traversal answered 200"

# ---- WebSocket upgrade checks ----
upgrade() { # path, extra curl args...
    p=$1
    shift
    curl -s -o /dev/null -w '%{http_code}' --max-time "$(tg_secs 5)" -H 'Connection: Upgrade' -H 'Upgrade: websocket' \
        -H 'Sec-WebSocket-Version: 13' -H 'Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==' "$@" "$U$p"
}
code=$(upgrade /traced -H 'Origin: https://evil.example')
[ "$code" = 403 ] || fail "a foreign Origin got HTTP $code (want 403)"
code=$(upgrade /traced -H 'Sec-WebSocket-Protocol: tracegate, tracegate.token.wrong')
[ "$code" = 401 ] || fail "a bad token got HTTP $code (want 401)"
code=$(upgrade /nowhere)
[ "$code" = 404 ] || fail "an unknown WebSocket path got HTTP $code (want 404)"
code=$(upgrade /traced -H 'Origin: https://ui.perfetto.dev')
[ "$code" = 101 ] || fail "the Perfetto UI's Origin got HTTP $code (want 101)"
grep -q 'Origin not allowed' "$T/tracegated.log" || fail "the refused Origin was not logged"

# ---- tracectl over ws:// ----
tg_timeout 30 "$TRACECTL" query "ws://127.0.0.1:$PORT/traced" >"$T/query.out" 2>"$T/query.log" ||
    fail "tracectl query ws:// failed"
grep -q '^Service: ' "$T/query.out" || fail "tracectl query printed no service state"
grep -q 'CAPABILITIES' "$T/query.out" || fail "tracectl query printed no capabilities"

tg_timeout 30 "$TRACECTL" --token "$TOKEN" query "ws://127.0.0.1:$PORT/traced" >"$T/query2.out" 2>"$T/query2.log" ||
    fail "tracectl query ws:// with a token failed"
grep -q 'ci-user' "$T/tracegated.log" || fail "the token's principal was not logged"
if grep -q "$TOKEN" "$T/tracegated.log"; then fail "the token leaked into the log"; fi
if tg_timeout 30 "$TRACECTL" --token wrong-token query "ws://127.0.0.1:$PORT/traced" >/dev/null 2>"$T/query3.log"; then
    fail "tracectl query with a wrong token succeeded"
fi

# metrics saw the WebSocket clients and the refusals, and the replies they were sent
curl -s "$U/metrics" >"$T/metrics2"
grep -q 'ws' "$T/metrics2" || fail "/metrics does not mention WebSocket clients"
msgs=$(sed -n 's/^tracegated_ws_messages_sent_total \([0-9]*\)$/\1/p' "$T/metrics2")
bytes=$(sed -n 's/^tracegated_ws_bytes_sent_total \([0-9]*\)$/\1/p' "$T/metrics2")
[ "${msgs:-0}" -ge 2 ] && [ "${bytes:-0}" -ge "${msgs:-0}" ] ||
    fail "WebSocket messages/bytes sent: '$msgs'/'$bytes' after two tracectl queries"
grep -q '^tracegated_ws_paused_total{direction="to_client"} [0-9]' "$T/metrics2" || fail "no WebSocket pause counter"
grep -q '^tracegated_ws_links [0-9]' "$T/metrics2" || fail "no WebSocket link gauge"
grep -q '^tracegated_ws_native [0-9]' "$T/metrics2" || fail "no native WebSocket gauge"
# the tracectl queries above went the native way (plain ws://, the default data path)
curl -s "$U/api/status" | grep -q '"websocket":{"data_path":"native"}' || fail "/api/status does not say native"

echo "PASS: HTTP routes, Origin/token checks and tracectl over ws:// work"
exit 0
