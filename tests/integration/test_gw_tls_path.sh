#!/bin/sh
# test_gw_tls_path.sh: tracegated says truthfully which TLS data path it uses (docs/gateway.md,
# "TLS data path"): with a TLS client connected, /api/status's "tls" object and the
# tracegated_tls_* metrics agree with what the test itself finds about the kernel (can a TCP
# socket take the `tls` ULP?): kernel TLS sending where it is offered, the batched path where
# not; once the client is gone it is no longer counted. With --tls-path socket on a kernel
# without TLS the connection falls back to OpenSSL on the socket, counted as such. Exit 77 =
# skipped (no python3 or openssl).
set -u
. "$(dirname "$0")/gw_lib.sh"
need "$TRACEGATED" "$CLIENT"
command -v python3 >/dev/null 2>&1 || { echo "SKIP: python3 is not available"; exit 77; }
command -v openssl >/dev/null 2>&1 || { echo "SKIP: openssl is not available"; exit 77; }
bash "$S/certs/make-dev-pki.sh" "$T/pki" >/dev/null 2>&1 || fail "cannot make the test PKI"
P=$T/pki
H="python3 $S/tests/integration/tls_hold.py"

KERNEL=$($H probe) || fail "cannot probe the kernel"
echo "this kernel: kernel TLS $KERNEL"

status() { tg_timeout 10 "$CLIENT" http-get "127.0.0.1:$HTTP_PORT" /api/status >"$T/status.json" 2>/dev/null; }
open_is() { status && python3 -c 'import json,sys; sys.exit(json.load(open(sys.argv[1]))["tls"]["connections"]["open"] != int(sys.argv[2]))' "$T/status.json" "$1"; }
metric() { tg_timeout 10 "$CLIENT" http-get "127.0.0.1:$HTTP_PORT" /metrics | awk -v m="$1" '$1 == m { print $2 }'; }

# ---- auto: kernel TLS where offered, else batched ----
start_gw_http auto --tls-cert "$P/server.crt" --tls-key "$P/server.key" --listen "consumer=tls://127.0.0.1:0"
ADDR=$(gw_addr auto 1)
grep -q "TLS data path: .*kernel TLS $KERNEL" "$T/auto.log" || fail "the start-up log does not say kernel TLS $KERNEL"
$H hold "$ADDR" "$P/ca.crt" "$T/ready" "$T/release" >"$T/hold.log" 2>&1 &
HOLD=$!
PIDS="$PIDS $HOLD"
wait_for 20 test -e "$T/ready" || fail "the TLS client did not connect: $(cat "$T/hold.log")"
wait_for 20 open_is 1 || fail "the connection is not counted: $(cat "$T/status.json")"
$H check "$T/status.json" "$KERNEL" 1 || fail "/api/status: $(cat "$T/status.json")"
want=0
[ "$KERNEL" = available ] && want=1
[ "$(metric tracegated_tls_kernel_available)" = "$want" ] || fail "tracegated_tls_kernel_available is not $want"
if [ "$KERNEL" = available ]; then
    [ "$(metric 'tracegated_tls_connections{path="ktls_send"}')" = 1 ] || fail "metrics: no kTLS sending connection"
else
    [ "$(metric 'tracegated_tls_connections{path="batched"}')" = 1 ] || fail "metrics: no batched connection"
    [ "$(metric 'tracegated_tls_connections{path="ktls_send"}')" = 0 ] || fail "metrics: kTLS without kernel TLS"
fi
touch "$T/release"
wait_exit "$HOLD" 20
wait_for 20 open_is 0 || fail "a closed connection is still counted: $(cat "$T/status.json")"
[ "$(metric 'tracegated_tls_handshakes_total{path="all"}')" = 1 ] || fail "metrics: handshakes_total is not 1"
kill "$GW_PID"
wait_exit "$GW_PID" 20
echo "auto: /api/status and /metrics say kernel TLS $KERNEL, and count the connection on that path"

# ---- socket: OpenSSL on the socket with kTLS asked for; silently user space without it ----
rm -f "$T/ready" "$T/release"
start_gw_http sock --tls-cert "$P/server.crt" --tls-key "$P/server.key" --listen "consumer=tls://127.0.0.1:0" \
    --tls-path socket
ADDR=$(gw_addr sock 1)
$H hold "$ADDR" "$P/ca.crt" "$T/ready" "$T/release" >"$T/hold2.log" 2>&1 &
HOLD=$!
PIDS="$PIDS $HOLD"
wait_for 20 test -e "$T/ready" || fail "the TLS client did not connect: $(cat "$T/hold2.log")"
wait_for 20 open_is 1 || fail "the connection is not counted: $(cat "$T/status.json")"
python3 - "$T/status.json" "$KERNEL" <<'PY' || fail "/api/status with --tls-path socket: $(cat "$T/status.json")"
import json, sys
t = json.load(open(sys.argv[1]))["tls"]
c = t["connections"]
assert t["configured_path"] == "socket" and t["path"] == "socket", t
assert c["batched"] == 0, c
if sys.argv[2] == "available":
    assert c["ktls_send"] == 1, c
else:
    assert c["ktls_send"] == 0 and c["ktls_recv"] == 0 and c["socket_userspace"] == 1, c
PY
touch "$T/release"
wait_exit "$HOLD" 20
echo "socket: counted as $( [ "$KERNEL" = available ] && echo "kernel TLS" || echo "OpenSSL on the socket (no kernel TLS)")"
echo "PASS"
exit 0
