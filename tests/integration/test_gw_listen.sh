#!/bin/sh
# test_gw_listen.sh: tracegated's listeners end to end: a full record session through a TCP
# consumer listener (tracectl record/dump) while tracegate-demo produces through a gateway UNIX
# producer listener (SMB fd passed through the bridge); tracectl query through the gateway; a
# non-loopback TCP bind refused at startup without --insecure and accepted (with a warning) with
# it; a UNIX socket already served by a live process is not stolen; a TLS listener with client
# certificates (cert roles and principal; a rogue CA refused); with a live service on the default
# sockets a second tracegated runs as a bridge to it. Exit 77 = skipped.
set -u
. "$(dirname "$0")/gw_lib.sh"
need "$TRACEGATED" "$TRACECTL" "$DEMO" "$CLIENT"

start_gw gw --no-http --listen "consumer=tcp://127.0.0.1:0" --listen "producer=unix:$T/gw-producer.sock"
CADDR=$(gw_addr gw 1)
[ -n "$CADDR" ] || fail "no consumer listener address in the log"
grep -q "listening: producer unix://$T/gw-producer.sock (auth=local, roles=admin)" "$T/gw.log" ||
    fail "the producer listener is not reported"
echo "consumer listener: tcp://$CADDR"

# ---- a producer through the gateway's UNIX producer listener ----
"$DEMO" --producer-socket "$T/gw-producer.sock" --name demo-gw --duration 60 >"$T/demo.log" 2>&1 &
DEMO_PID=$!
PIDS="$PIDS $DEMO_PID"
demo_visible() {
    tg_timeout 10 "$TRACECTL" query "tcp://$CADDR" >"$T/query.txt" 2>&1
    sed -n '/^PRODUCERS CONNECTED/,/^DATA SOURCES/p' "$T/query.txt" | grep -q 'demo-gw'
}
wait_for 30 demo_visible || fail "the demo producer is not visible through the gateway: $(cat "$T/query.txt")"

# ---- record through the TCP consumer listener until the demo drew into it, then Ctrl-C ----
OUT=$T/out.pftrace
"$TRACECTL" record "tcp://$CADDR" -o "$OUT" >"$T/record.log" 2>&1 &
RPID=$!
PIDS="$PIDS $RPID"
wait_for_line 60 "$T/demo.log" "session instance [0-9]* started" || fail "the demo did not start tracing"
wait_for_line 60 "$T/demo.log" "first frame drawn" || fail "the demo drew nothing"
kill -INT "$RPID"
wait_exit "$RPID" 60
[ "$WAIT_RC" = 0 ] || fail "tracectl record through the gateway exited $WAIT_RC: $(cat "$T/record.log")"
[ -s "$OUT" ] || fail "no trace written"
tg_timeout 30 "$TRACECTL" dump "$OUT" >"$T/dump.txt" 2>"$T/dump.log" || fail "tracectl dump failed"
grep -q "process{pid=$DEMO_PID " "$T/dump.txt" || fail "the trace has nothing from the demo (pid $DEMO_PID)"
grep -q '^slices: .*"DrawFrame" [1-9]' "$T/dump.txt" || fail "the trace holds no DrawFrame slices"
grep -q "session [0-9]*: tcp client 127.0.0.1:[0-9]* on the consumer port" "$T/gw.log" ||
    fail "the record session did not go through the TCP listener"
grep -q "session [0-9]*: unix client unix(pid=$DEMO_PID" "$T/gw.log" ||
    fail "the demo did not go through the gateway's producer listener"
echo "recorded $(wc -c <"$OUT") bytes through tcp://$CADDR"

# ---- non-loopback binds: refused without TLS unless --insecure ----
PORT=$("$CLIENT" free-port)
tg_timeout 10 "$TRACEGATED" --producer-socket "$T/x-p.sock" --consumer-socket "$T/x-c.sock" --no-http \
    --listen "consumer=tcp://0.0.0.0:$PORT" >"$T/nonloop.log" 2>&1
rc=$?
[ $rc -ne 0 ] || fail "a plaintext non-loopback listener was accepted"
grep -q "non-loopback address without TLS" "$T/nonloop.log" || fail "no clear message: $(cat "$T/nonloop.log")"
[ ! -S "$T/x-c.sock" ] || fail "the service started although the configuration was refused"

start_gw insecure --no-http --insecure --listen "consumer=tcp://0.0.0.0:$PORT"
grep -q "warn .*--insecure: consumer tcp://0.0.0.0:$PORT .*accepts plaintext connections from the network" \
    "$T/insecure.log" || fail "no warning for the insecure listener: $(cat "$T/insecure.log")"
out=$(tg_timeout 10 "$CLIENT" call "127.0.0.1:$PORT" QueryServiceState) || fail "insecure listener: $out"
kill "$GW_PID"
wait_exit "$GW_PID" 20
[ "$WAIT_RC" = 0 ] || fail "tracegated did not exit cleanly ($WAIT_RC)"

# ---- a live socket is never stolen ----
tg_timeout 10 "$TRACEGATED" --producer-socket "$T/y-p.sock" --consumer-socket "$T/y-c.sock" --no-http \
    --listen "consumer=unix:$T/gw-c2.sock" --listen "producer=unix:$T/gw-producer.sock" >"$T/steal.log" 2>&1
rc=$?
[ $rc -ne 0 ] || fail "a second tracegated took over a live socket"
grep -q "a live socket is already there" "$T/steal.log" || fail "no clear message: $(cat "$T/steal.log")"

# ---- a second tracegated finds a live service on the default sockets and bridges to it ----
PERFETTO_PRODUCER_SOCK_NAME=$T/def-p.sock PERFETTO_CONSUMER_SOCK_NAME=$T/def-c.sock \
    "$TRACEGATED" --no-http >"$T/first.log" 2>&1 &
FIRST=$!
PIDS="$PIDS $FIRST"
wait_for_line 20 "$T/first.log" "tracegated .* ready" || fail "the first tracegated did not start: $(cat "$T/first.log")"
PERFETTO_PRODUCER_SOCK_NAME=$T/def-p.sock PERFETTO_CONSUMER_SOCK_NAME=$T/def-c.sock \
    "$TRACEGATED" --no-http --listen "consumer=tcp://127.0.0.1:0" >"$T/second.log" 2>&1 &
SECOND=$!
PIDS="$PIDS $SECOND"
wait_for_line 20 "$T/second.log" "tracegated .* ready" || fail "the second tracegated did not start: $(cat "$T/second.log")"
grep -q "a tracing service already owns $T/def-c.sock: running as a bridge to it" "$T/second.log" ||
    fail "the second tracegated did not detect the live service: $(cat "$T/second.log")"
BADDR=$(sed -n 's/.*listening: consumer tcp:\/\/\([^ ]*\) (.*/\1/p' "$T/second.log")
out=$(tg_timeout 10 "$CLIENT" call "$BADDR" QueryServiceState 2>&1)
[ "$out" = "first=ok then=-" ] || fail "query through the bridging tracegated: $out"
grep -q "session 1: tcp client" "$T/second.log" || fail "the bridge did not carry the session"
kill "$SECOND" "$FIRST"
wait_exit "$SECOND" 20
[ "$WAIT_RC" = 0 ] || fail "the bridging tracegated did not exit cleanly ($WAIT_RC)"
echo "bridge mode: the second tracegated bridged to the first"

# ---- a TLS listener: client certificates authenticate, others must send a token ----
if command -v openssl >/dev/null 2>&1 && bash "$S/certs/make-dev-pki.sh" "$T/pki" >/dev/null 2>&1; then
    P=$T/pki
    start_gw tls --no-http --tls-cert "$P/server.crt" --tls-key "$P/server.key" --tls-ca "$P/ca.crt" \
        --listen "consumer=tls://127.0.0.1:0"
    TADDR=$(gw_addr tls 1)
    grep -q "listening: consumer tls://$TADDR (auth=local, roles=admin)" "$T/tls.log" || fail "TLS listener not reported"
    tg_timeout 10 "$TRACECTL" --cacert "$P/ca.crt" --cert "$P/client.crt" --key "$P/client.key" \
        query "tls://$TADDR" >"$T/tlsq.txt" 2>&1 || fail "mTLS query failed: $(cat "$T/tlsq.txt")"
    grep -q "tls client 127.0.0.1:[0-9]* on the consumer port (cert:/CN=tracegate-client, roles recorder)" "$T/tls.log" ||
        fail "the client certificate did not set the principal and cert roles"
    tg_timeout 10 "$TRACECTL" --cacert "$P/ca.crt" --cert "$P/rogue-client.crt" --key "$P/rogue-client.key" \
        query "tls://$TADDR" >"$T/tlsr.txt" 2>&1 && fail "a certificate from another CA was accepted"
    echo "TLS listener: mTLS ok, rogue certificate refused"
else
    echo "(openssl not available: TLS listener part skipped)"
fi
echo "PASS"
exit 0
