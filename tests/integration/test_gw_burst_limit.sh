#!/bin/sh
# test_gw_burst_limit.sh: a burst beyond the per-source limit is refused cleanly. tracegated
# listens on this host's non-loopback address (--insecure; connections from it are not loopback,
# so --max-connections-per-source applies) with a limit of 100; a burst of 300 connects at once
# from that address (gw_testclient burst, every connection held until all are settled): exactly
# 100 are admitted and each completes a BindService + QueryCapabilities round trip, the other
# 200 are closed at accept (EOF or reset before any reply, no connect lost), and /metrics counts
# 200 refusals with reason max_connections_per_source. Once the clients are gone the slots are
# free again: a second burst of 100 is served in full. The refusals are logged sampled (at most
# 20 lines a second for the gateway): fewer lines than refusals, and a later line says how many
# were not logged.
# Exit 77 = skipped (no non-loopback IPv4 address on this machine).
set -u
. "$(dirname "$0")/gw_lib.sh"
need "$TRACEGATED" "$CLIENT"

LIMIT=100
N=300
IP=""
if command -v ip >/dev/null 2>&1; then
    IP=$(ip -o -4 addr show scope global 2>/dev/null | awk '{ sub(/\/.*/, "", $4); print $4; exit }')
fi
[ -n "$IP" ] || IP=$(hostname -I 2>/dev/null | tr ' ' '\n' | grep -E '^[0-9]+\.' | grep -v '^127\.' | head -n 1)
[ -n "$IP" ] || { echo "SKIP: no non-loopback IPv4 address to connect from"; exit 77; }

start_gw_http gw --insecure --listen "consumer=tcp://$IP:0" --max-connections-per-source $LIMIT \
    --max-connections 1000
ADDR=$(sed -n 's/.*listening: consumer tcp:\/\/\([^ ]*\) (.*/\1/p' "$T/gw.log" | head -n 1)
[ -n "$ADDR" ] || ADDR=$(gw_addr gw 1)
[ -n "$ADDR" ] || fail "no listener address in the log"

metric() { "$CLIENT" http-get "127.0.0.1:$HTTP_PORT" /metrics 2>/dev/null | awk -v k="$1" '$1 == k { print $2 }'; }
REJ='tracegated_connections_rejected_total{reason="max_connections_per_source"}'

out=$(tg_timeout 120 "$CLIENT" burst "$ADDR" --count $N 2>"$T/burst.err")
echo "burst of $N from $IP (limit $LIMIT): $out"
[ "$out" = "ok=$LIMIT refused=$((N - LIMIT)) connect_failed=0 bind_refused=0 timeout=0" ] ||
    fail "burst beyond the limit: $out $(head -c 300 "$T/burst.err")"
rej=$(metric "$REJ")
[ "$rej" = $((N - LIMIT)) ] || fail "/metrics counts '$rej' per-source refusals, not $((N - LIMIT))"
grep -q "too many connections from this address" "$T/gw.log" || fail "the refusals are not logged"

# the slots come back when the admitted clients go
closed() { [ "$(metric 'tracegated_connections{transport="tcp"}')" = 0 ]; }
wait_for 60 closed || fail "the admitted connections are still counted open"
out=$(tg_timeout 120 "$CLIENT" burst "$ADDR" --count $LIMIT 2>"$T/burst2.err")
[ "$out" = "ok=$LIMIT refused=0 connect_failed=0 bind_refused=0 timeout=0" ] ||
    fail "a burst within the limit after the first: $out $(head -c 300 "$T/burst2.err")"
rej=$(metric "$REJ")
[ "$rej" = $((N - LIMIT)) ] || fail "refusals counted for a burst within the limit: $rej"
echo "ok: $LIMIT admitted and served, $((N - LIMIT)) refused at accept and counted; then $LIMIT more served"

# a flood of refusals is not a flood of log lines
lines=$(grep -c "too many connections from this address" "$T/gw.log")
[ "$lines" -lt $((N - LIMIT)) ] || fail "each of the $((N - LIMIT)) refusals was logged ($lines lines)"
one_more() { # one more burst over the limit, until a refusal in a later second says what was not logged
    tg_timeout 60 "$CLIENT" burst "$ADDR" --count $((LIMIT + 1)) >/dev/null 2>&1
    grep -q "too many connections from this address (and [0-9]* similar refusals not logged)" "$T/gw.log"
}
wait_for 60 one_more || fail "no log line says how many refusals were not logged"
echo "ok: $lines log lines for $((N - LIMIT)) refusals; $(grep -o "and [0-9]* similar refusals not logged" "$T/gw.log" | head -n 1)"
