#!/bin/sh
# test_gw_burst.sh: a burst of 1,000 connects at once to tracegated's TCP listener and, at the
# same time, 1,000 to its UNIX listener (gw_testclient burst: all the non-blocking connects are
# made before any is looked at). Every one must be served: accepted (the listen backlog holds the
# burst, accept drains it), bound to ConsumerPort through to the embedded service, and answered a
# QueryCapabilities call; none refused, reset, lost or left unanswered. --max-connections is set
# so that all 2,000 are legitimately admitted (loopback clients are not subject to the per-source
# limit: test_gw_burst_limit.sh). /metrics then counts 2,000 connections and no refusal.
# Exit 77 = skipped (descriptor limit or somaxconn too low for the burst on this machine).
set -u
. "$(dirname "$0")/gw_lib.sh"
need "$TRACEGATED" "$CLIENT"

N=1000
# tracegated holds 3 descriptors per bridged client of its embedded service (client, and both
# ends of the socketpair to the service): 2 x 1,000 need ~6,100; it raises its soft limit itself.
HARD=$(ulimit -Hn)
[ "$HARD" = unlimited ] || [ "$HARD" -ge $((6 * N + 200)) ] ||
    { echo "SKIP: RLIMIT_NOFILE hard limit $HARD is below $((6 * N + 200))"; exit 77; }
SOMAXCONN=$(cat /proc/sys/net/core/somaxconn 2>/dev/null || echo 4096)
[ "$SOMAXCONN" -ge "$N" ] || { echo "SKIP: net.core.somaxconn is $SOMAXCONN (< $N): the kernel caps every backlog"; exit 77; }

start_gw_http gw --listen "consumer=tcp://127.0.0.1:0" --listen "consumer=unix://$T/burst.sock" \
    --max-connections $((2 * N + 50))
TCP=$(sed -n 's/.*listening: consumer tcp:\/\/\([^ ]*\) (.*/\1/p' "$T/gw.log" | head -n 1)
[ -n "$TCP" ] || TCP=$(gw_addr gw 1)
[ -n "$TCP" ] && [ -S "$T/burst.sock" ] || fail "the listeners are not up"

"$CLIENT" burst "$TCP" --count $N >"$T/tcp.out" 2>"$T/tcp.err" &
P1=$!
"$CLIENT" burst "$T/burst.sock" --count $N >"$T/unix.out" 2>"$T/unix.err" &
P2=$!
PIDS="$PIDS $P1 $P2"
wait_exit "$P1" 120
RC1=$WAIT_RC
wait_exit "$P2" 120
RC2=$WAIT_RC
echo "tcp burst:  $(cat "$T/tcp.out") $(head -c 200 "$T/tcp.err")"
echo "unix burst: $(cat "$T/unix.out") $(head -c 200 "$T/unix.err")"
WANT="ok=$N refused=0 connect_failed=0 bind_refused=0 timeout=0"
[ "$RC1" = 0 ] && [ "$(cat "$T/tcp.out")" = "$WANT" ] || fail "TCP burst: $(cat "$T/tcp.out" "$T/tcp.err")"
[ "$RC2" = 0 ] && [ "$(cat "$T/unix.out")" = "$WANT" ] || fail "UNIX burst: $(cat "$T/unix.out" "$T/unix.err")"

# /metrics: 2,000 accepted (tcp + unix), none refused; once the clients are gone, none open
metric() { "$CLIENT" http-get "127.0.0.1:$HTTP_PORT" /metrics 2>/dev/null | awk -v k="$1" '$1 == k { print $2 }'; }
all_closed() { [ "$(metric 'tracegated_connections{transport="tcp"}')" = 0 ] &&
    [ "$(metric 'tracegated_connections{transport="unix"}')" = 0 ]; }
wait_for 60 all_closed || fail "connections still open after the bursts: $("$CLIENT" http-get "127.0.0.1:$HTTP_PORT" /metrics | grep '^tracegated_connections')"
tcp_total=$(metric 'tracegated_connections_total{transport="tcp"}')
unix_total=$(metric 'tracegated_connections_total{transport="unix"}')
[ "$tcp_total" = $N ] && [ "$unix_total" = $N ] ||
    fail "/metrics counts tcp=$tcp_total unix=$unix_total accepted connections, not $N each"
rejected=$("$CLIENT" http-get "127.0.0.1:$HTTP_PORT" /metrics | grep '^tracegated_connections_rejected_total' || true)
[ -z "$rejected" ] || fail "connections were refused: $rejected"
echo "ok: 2 x $N connects at once, all served; /metrics: $tcp_total tcp + $unix_total unix accepted, none refused"
