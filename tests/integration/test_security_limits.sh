#!/bin/sh
# test_security_limits.sh: limits hold before authentication on TLS listeners (issue 8, finding
# 5). Attacks: 20 clients open TCP connections to a TLS listener and never start the handshake,
# with --max-connections 5: only 5 are taken, the others are refused at accept (logged), and all
# 5 are cut when the handshake deadline passes; a client that dribbles one byte of ClientHello
# every 0.2 s is cut at the deadline (an inactivity timeout, reset by each byte, would never
# cut it). Then a legitimate mTLS client is served. Exit 77 = skipped.
set -u
. "$(dirname "$0")/gw_lib.sh"
need "$TRACEGATED" "$TRACECTL"
command -v python3 >/dev/null 2>&1 || { echo "SKIP: python3 is needed"; exit 77; }
command -v openssl >/dev/null 2>&1 || { echo "SKIP: openssl is needed"; exit 77; }
bash "$S/certs/make-dev-pki.sh" "$T/pki" >/dev/null 2>&1 || fail "cannot make a development PKI"
P=$T/pki

# The deadline is long enough that the 20 connects below land (and 15 are refused) before the first
# 5 are cut even on a loaded machine: a slot freed early would admit a 6th and shift both counts.
start_gw tls --no-http --tls-cert "$P/server.crt" --tls-key "$P/server.key" --tls-ca "$P/ca.crt" \
    --listen "consumer=tls://127.0.0.1:0" --max-connections 5 --handshake-timeout 5s
ADDR=$(gw_addr tls 1)
PORT=${ADDR##*:}

# ---- 20 silent clients: they hold their sockets until the gateway closes them ----
python3 - "$PORT" "$T/silent.out" <<'EOF' &
import socket, sys, select
port, out = int(sys.argv[1]), sys.argv[2]
socks = []
for _ in range(20):
    s = socket.create_connection(("127.0.0.1", port))
    socks.append(s)
# count how many the gateway closes (EOF or reset), waiting as long as the test lets us
closed = 0
open_ = list(socks)
while open_:
    r, _, _ = select.select(open_, [], [])
    for s in r:
        try:
            data = s.recv(4096)
        except OSError:
            data = b""
        if not data:
            closed += 1
            open_.remove(s)
    with open(out, "w") as f:
        f.write("%d\n" % closed)
EOF
SILENT=$!
PIDS="$PIDS $SILENT"
wait_for_line 30 "$T/tls.log" "refused .* before the TLS handshake: too many connections" ||
    fail "connections beyond --max-connections were not refused before the handshake"
wait_exit "$SILENT" 60
[ "$WAIT_RC" = 0 ] || fail "the silent clients were not all closed ($WAIT_RC, $(cat "$T/silent.out" 2>/dev/null))"
refused=$(grep -c "before the TLS handshake: too many connections" "$T/tls.log")
timedout=$(grep -c "TLS handshake .* failed: TLS handshake timed out" "$T/tls.log")
[ "$refused" -ge 15 ] || fail "only $refused of 20 silent clients were refused at accept with 5 allowed"
[ "$timedout" -ge 1 ] && [ "$timedout" -le 5 ] || fail "$timedout handshakes timed out (want 1..5)"
echo "ok: $refused refused at accept, $timedout cut at the handshake deadline"

# ---- a dribbler: one byte of a ClientHello every 0.2 s ----
python3 - "$PORT" "$T/dribble.out" <<'EOF'
import socket, sys, time
port, out = int(sys.argv[1]), sys.argv[2]
s = socket.create_connection(("127.0.0.1", port))
hello = bytes.fromhex("16030100c8010000c40303") + bytes(190)
sent = 0
for b in hello:
    try:
        s.send(bytes([b]))
    except OSError:
        break
    sent += 1
    time.sleep(0.2)
    s.setblocking(False)
    try:
        if s.recv(1) == b"":
            break
    except BlockingIOError:
        pass
    except OSError:
        break
    s.setblocking(True)
open(out, "w").write("%d of %d\n" % (sent, len(hello)))
EOF
read -r sent _ <"$T/dribble.out"
[ "$sent" -lt 200 ] || fail "a dribbling client was never cut ($(cat "$T/dribble.out"))"
grep -q "TLS handshake .* failed: TLS handshake timed out" "$T/tls.log" || fail "the cut is not logged"
echo "ok: the dribbler was cut after $(cat "$T/dribble.out") bytes"

# ---- the legitimate client ----
tg_timeout 20 "$TRACECTL" --cacert "$P/ca.crt" --cert "$P/client.crt" --key "$P/client.key" \
    query "tls://$ADDR" >"$T/q.out" 2>&1 || fail "an mTLS client was not served afterwards: $(cat "$T/q.out")"
echo PASS
