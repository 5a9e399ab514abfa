#!/bin/sh
# test_gw_load.sh: tracegated under load: 200 consumer clients at once each bind ConsumerPort and
# call QueryServiceState; a client that floods requests and never reads its replies is paused
# and then cut (soft limit + grace) while other clients keep being served; /metrics then shows
# the connections, traffic, RPC latencies and the cut. Exit 77 = skipped.
set -u
. "$(dirname "$0")/gw_lib.sh"
need "$TRACEGATED" "$CLIENT"

HTTP_PORT=
try=0
while [ -z "$HTTP_PORT" ] && [ $try -lt 5 ]; do
    try=$((try + 1))
    cand=$("$CLIENT" free-port)
    start_gw gw$try --http "127.0.0.1:$cand" --listen "consumer=tcp://127.0.0.1:0" \
        --out-high 64k --out-low 16k --out-soft-limit 64k --out-soft-grace 1s --rate 0
    if grep -q "listening: http://127.0.0.1:$cand" "$T/gw$try.log"; then
        HTTP_PORT=$cand
        NAME=gw$try
    else
        kill "$GW_PID" 2>/dev/null
    fi
done
[ -n "$HTTP_PORT" ] || fail "no free port for the HTTP front end"
ADDR=$(gw_addr "$NAME" 1)

# ---- 200 clients at once ----
out=$(timeout 60 "$CLIENT" call "$ADDR" QueryServiceState --count 200 --timeout-ms 30000 2>&1)
[ "$out" = "ok=200 refused=0 auth_refused=0 disconnected=0 timeout=0" ] || fail "200 clients: $out"
echo "200 concurrent clients: $out"

# ---- a slow client is cut; the others are served meanwhile ----
timeout 30 "$CLIENT" slow "$ADDR" --timeout-ms 15000 >"$T/slow.out" 2>&1 &
SLOW_PID=$!
PIDS="$PIDS $SLOW_PID"
sleep 0.3
out=$(timeout 20 "$CLIENT" call "$ADDR" QueryServiceState --count 20 2>&1)
[ "$out" = "ok=20 refused=0 auth_refused=0 disconnected=0 timeout=0" ] ||
    fail "clients were not served while a slow client was stuck: $out"
wait_exit "$SLOW_PID" 25
[ "$WAIT_RC" = 0 ] || fail "the slow client was not cut: $(cat "$T/slow.out")"
echo "slow client: $(cat "$T/slow.out")"
grep -q "cutting client 127.0.0.1:[0-9]* (uid:[0-9]*): slow client: over the soft limit" "$T/$NAME.log" ||
    fail "the cut is not logged"
out=$(timeout 20 "$CLIENT" call "$ADDR" QueryServiceState --count 5 2>&1)
[ "$out" = "ok=5 refused=0 auth_refused=0 disconnected=0 timeout=0" ] || fail "after the cut: $out"

# ---- metrics ----
timeout 10 "$CLIENT" http-get "127.0.0.1:$HTTP_PORT" /metrics >"$T/metrics.txt" || fail "GET /metrics failed"
check_metric() { # NAME_AND_LABELS MIN
    v=$(grep -v '^#' "$T/metrics.txt" | grep -F "$1 " | awk '{print $NF}' | head -n 1)
    [ -n "$v" ] || fail "metric $1 missing"
    [ "$(printf '%.0f' "$v")" -ge "$2" ] || fail "metric $1 = $v, expected >= $2"
}
check_metric 'tracegated_connections_total{transport="tcp"}' 226
check_metric 'tracegated_connections_rejected_total{reason="slow_client_soft"}' 1
check_metric 'tracegated_frames_total{direction="to_service"}' 452
check_metric 'tracegated_frames_total{direction="to_client"}' 452
check_metric 'tracegated_bytes_total{direction="to_client"}' 10000
check_metric 'tracegated_rpc_duration_seconds_count{service="ConsumerPort",method="QueryServiceState"}' 225
check_metric 'tracegated_upstream_healthy' 1
grep -q '^tracegated_rpc_duration_seconds_bucket{service="ConsumerPort",method="QueryServiceState",le="+Inf"}' \
    "$T/metrics.txt" || fail "no latency histogram"
grep -q '^# TYPE tracegated_rpc_duration_seconds histogram' "$T/metrics.txt" || fail "no histogram TYPE line"
timeout 10 "$CLIENT" http-get "127.0.0.1:$HTTP_PORT" /api/status >"$T/status.json" 2>/dev/null &&
    { grep -q '"upstream":{"healthy":true' "$T/status.json" || fail "status: $(cat "$T/status.json")"; }
echo "metrics ok"
echo "PASS"
exit 0
