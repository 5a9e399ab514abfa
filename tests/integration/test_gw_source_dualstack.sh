#!/bin/sh
# test_gw_source_dualstack.sh: one client address is one source, whichever listener it reaches.
# tracegated listens on this host's non-loopback IPv4 address and on the dual-stack "[::]" (where
# an IPv4 client arrives as ::ffff:a.b.c.d) with --max-connections-per-source 2. Two connections
# held on the IPv4 listener use the address's allowance: a burst of 3 from the same address to the
# dual-stack listener is refused in full (counted in /metrics, logged with the client as a.b.c.d),
# not admitted as if it came from another source. With the first two gone, the dual-stack listener
# serves 2 from that address.
# Exit 77 = skipped (no non-loopback IPv4 address, no IPv6, or no python3 to hold connections).
set -u
. "$(dirname "$0")/gw_lib.sh"
need "$TRACEGATED" "$CLIENT"
command -v python3 >/dev/null 2>&1 || { echo "SKIP: python3 is needed to hold connections"; exit 77; }
[ -e /proc/net/if_inet6 ] || { echo "SKIP: no IPv6 on this host"; exit 77; }

IP=""
if command -v ip >/dev/null 2>&1; then
    IP=$(ip -o -4 addr show scope global 2>/dev/null | awk '{ sub(/\/.*/, "", $4); print $4; exit }')
fi
[ -n "$IP" ] || IP=$(hostname -I 2>/dev/null | tr ' ' '\n' | grep -E '^[0-9]+\.' | grep -v '^127\.' | head -n 1)
[ -n "$IP" ] || { echo "SKIP: no non-loopback IPv4 address to connect from"; exit 77; }

start_gw_http gw --insecure --listen "consumer=tcp://$IP:0" --listen "consumer=tcp://[::]:0" \
    --max-connections-per-source 2
PORT4=$(sed -n "s/.*listening: consumer tcp:\/\/$IP:\([0-9]*\) (.*/\1/p" "$T/gw.log" | head -n 1)
PORT6=$(sed -n 's/.*listening: consumer tcp:\/\/\[::\]:\([0-9]*\) (.*/\1/p' "$T/gw.log" | head -n 1)
[ -n "$PORT4" ] && [ -n "$PORT6" ] || fail "listener addresses not in the log: $(grep listening "$T/gw.log")"

metric() { "$CLIENT" http-get "127.0.0.1:$HTTP_PORT" /metrics 2>/dev/null | awk -v k="$1" '$1 == k { print $2 }'; }
REJ='tracegated_connections_rejected_total{reason="max_connections_per_source"}'
open_tcp() { [ "$(metric 'tracegated_connections{transport="tcp"}')" = "$1" ]; }

# two connections held on the IPv4 listener until the holder is killed
python3 -c '
import socket, sys, time
held = [socket.create_connection((sys.argv[1], int(sys.argv[2]))) for _ in range(2)]
print("held", flush=True)
time.sleep(600)
' "$IP" "$PORT4" >"$T/holder.out" 2>&1 &
HOLDER=$!
PIDS="$PIDS $HOLDER"
wait_for 30 open_tcp 2 || fail "the two held connections are not counted: $(cat "$T/holder.out")"

out=$(tg_timeout 60 "$CLIENT" burst "$IP:$PORT6" --count 3 2>"$T/burst.err")
echo "burst of 3 from $IP to the dual-stack listener, 2 held on the IPv4 one: $out"
[ "$out" = "ok=0 refused=3 connect_failed=0 bind_refused=0 timeout=0" ] ||
    fail "the dual-stack listener counted $IP as another source: $out $(head -c 300 "$T/burst.err")"
[ "$(metric "$REJ")" = 3 ] || fail "/metrics counts '$(metric "$REJ")' per-source refusals, not 3"
grep -q "refused tcp client $IP:[0-9]*: too many connections from this address" "$T/gw.log" ||
    fail "the refusal does not name the client as $IP: $(grep refused "$T/gw.log" | head -n 3)"

kill "$HOLDER" 2>/dev/null
wait_for 30 open_tcp 0 || fail "the held connections are still counted after the holder left"
out=$(tg_timeout 60 "$CLIENT" burst "$IP:$PORT6" --count 2 2>"$T/burst2.err")
[ "$out" = "ok=2 refused=0 connect_failed=0 bind_refused=0 timeout=0" ] ||
    fail "the dual-stack listener within the limit: $out $(head -c 300 "$T/burst2.err")"
echo "ok: $IP is one source on the IPv4 and the dual-stack listener (3 refused over the limit of 2), then served"
