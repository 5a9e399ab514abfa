#!/bin/sh
# test_gw_load.sh: tracegated under load: 200 consumer clients at once each bind ConsumerPort and
# call QueryServiceState; a client that floods requests and never reads its replies is paused
# and then cut (soft limit + grace) while other clients keep being served; /metrics then shows
# the connections, traffic, RPC latencies and the cut. Exit 77 = skipped.
set -u
. "$(dirname "$0")/gw_lib.sh"
need "$TRACEGATED" "$CLIENT"

start_gw_http gw --listen "consumer=tcp://127.0.0.1:0" --out-high 64k --out-low 16k --out-soft-limit 64k \
    --out-soft-grace 2s --rate 0
NAME=gw
ADDR=$(gw_addr "$NAME" 1)

# ---- 200 clients at once ----
out=$(tg_timeout 60 "$CLIENT" call "$ADDR" QueryServiceState --count 200 --timeout-ms 30000 2>&1)
[ "$out" = "ok=200 refused=0 auth_refused=0 disconnected=0 timeout=0" ] || fail "200 clients: $out"
echo "200 concurrent clients: $out"

# ---- a slow client is cut; the others are served meanwhile ----
# ("meanwhile": once /metrics shows more than the soft limit queued for clients; should the cut
# come first on a slow machine, the clients are simply served after it)
"$CLIENT" slow "$ADDR" --timeout-ms 30000 >"$T/slow.out" 2>&1 &
SLOW_PID=$!
PIDS="$PIDS $SLOW_PID"
slow_stuck() {
    kill -0 "$SLOW_PID" 2>/dev/null || return 0
    "$CLIENT" http-get "127.0.0.1:$HTTP_PORT" /metrics 2>/dev/null |
        awk '$1 == "tracegated_queue_bytes{to=\"clients\"}" && $2 >= 65536 { found = 1 } END { exit !found }'
}
wait_for 30 slow_stuck || fail "the slow client never filled its queue: $(cat "$T/slow.out")"
out=$(tg_timeout 20 "$CLIENT" call "$ADDR" QueryServiceState --count 20 2>&1)
[ "$out" = "ok=20 refused=0 auth_refused=0 disconnected=0 timeout=0" ] ||
    fail "clients were not served while a slow client was stuck: $out"
wait_exit "$SLOW_PID" 40
[ "$WAIT_RC" = 0 ] || fail "the slow client was not cut: $(cat "$T/slow.out")"
echo "slow client: $(cat "$T/slow.out")"
grep -Eq "cutting client 127.0.0.1:[0-9]* \(uid:[0-9]*\): slow client: (over the soft limit|read nothing of [0-9]* queued bytes)" "$T/$NAME.log" ||
    fail "the cut is not logged"
out=$(tg_timeout 20 "$CLIENT" call "$ADDR" QueryServiceState --count 5 2>&1)
[ "$out" = "ok=5 refused=0 auth_refused=0 disconnected=0 timeout=0" ] || fail "after the cut: $out"

# ---- metrics ----
tg_timeout 10 "$CLIENT" http-get "127.0.0.1:$HTTP_PORT" /metrics >"$T/metrics.txt" || fail "GET /metrics failed"
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
tg_timeout 10 "$CLIENT" http-get "127.0.0.1:$HTTP_PORT" /api/status >"$T/status.json" 2>/dev/null &&
    { grep -q '"upstream":{"healthy":true' "$T/status.json" || fail "status: $(cat "$T/status.json")"; }
echo "metrics ok"
echo "PASS"
exit 0
