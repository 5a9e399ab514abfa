#!/bin/sh
# test_gw_source_prefix6.sh: an IPv6 client cannot multiply its per-source allowance by making up
# addresses. In a network namespace of its own the test gives itself 2001:db8:77::1 (tracegated's
# TCP listener) and two more addresses of the same /64; tracegated runs with
# --max-connections-per-source 2. Two connections held from 2001:db8:77::a use the /64's
# allowance: two more from 2001:db8:77::b are refused (counted in /metrics as
# max_connections_per_source, logged). With --source-prefix6 128 (per address, as before) the
# same two are admitted.
# Exit 77 = skipped (not root, no ip, python3 or IPv6 in the namespace).
set -u
. "$(dirname "$0")/gw_lib.sh"
need "$TRACEGATED" "$CLIENT"
[ "$(id -u)" = 0 ] || { echo "SKIP: a network namespace needs root"; exit 77; }
command -v ip >/dev/null 2>&1 || { echo "SKIP: ip (iproute2) is not installed"; exit 77; }
command -v python3 >/dev/null 2>&1 || { echo "SKIP: python3 is needed to hold connections"; exit 77; }

NS=tgp6$$
trap 'cleanup; ip netns del "$NS" 2>/dev/null' EXIT
ip netns add "$NS" 2>"$T/netns.err" || { echo "SKIP: cannot create a namespace: $(cat "$T/netns.err")"; exit 77; }
ip -n "$NS" link set lo up || fail "lo up"
for a in 1 a b; do
    ip -n "$NS" -6 addr add "2001:db8:77::$a/64" dev lo nodad 2>"$T/addr.err" ||
        { echo "SKIP: no IPv6 in the namespace: $(cat "$T/addr.err")"; exit 77; }
done
REAL_GW=$TRACEGATED
REAL_CLIENT=$CLIENT
in_ns() { ip netns exec "$NS" "$@"; }
# gw_lib starts "$TRACEGATED" and "$CLIENT": wrappers that run them in the namespace (exec keeps
# the pid gw_lib waits for and stops)
for w in gw:"$REAL_GW" client:"$REAL_CLIENT"; do
    printf '#!/bin/sh\nexec ip netns exec %s %s "$@"\n' "$NS" "${w#*:}" >"$T/ns-${w%%:*}"
    chmod +x "$T/ns-${w%%:*}"
done

metric() { in_ns "$REAL_CLIENT" http-get "127.0.0.1:$HTTP_PORT" /metrics 2>/dev/null | awk -v k="$1" '$1 == k { print $2 }'; }
REJ='tracegated_connections_rejected_total{reason="max_connections_per_source"}'
open_tcp() { [ "$(metric 'tracegated_connections{transport="tcp"}')" = "$1" ]; }
refused() { [ "$(metric "$REJ")" = "$1" ]; }

# hold SRC N: N connections from 2001:db8:77::SRC to the listener, kept open until killed
hold() {
    # ip netns exec runs python in the background job's own process, so $! is what holds them
    ip netns exec "$NS" python3 -c '
import socket, sys, time
held = []
for _ in range(int(sys.argv[3])):
    s = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    s.bind((sys.argv[1], 0))
    s.connect(("2001:db8:77::1", int(sys.argv[2])))
    held.append(s)
print("held", flush=True)
time.sleep(600)
' "2001:db8:77::$1" "$PORT" "$2" >"$T/hold-$1.out" 2>&1 &
    PIDS="$PIDS $!"
    HOLDERS="${HOLDERS:-} $!"
}

run() { # run NAME [tracegated options...]: tracegated in the namespace; sets PORT
    name=$1
    shift
    TRACEGATED=$T/ns-gw
    CLIENT=$T/ns-client
    start_gw_http "$name" --insecure --listen "consumer=tcp://[2001:db8:77::1]:0" --max-connections-per-source 2 "$@"
    TRACEGATED=$REAL_GW
    CLIENT=$REAL_CLIENT
    PORT=$(sed -n 's/.*listening: consumer tcp:\/\/\[2001:db8:77::1\]:\([0-9]*\) (.*/\1/p' "$T/$name.log" | head -n 1)
    [ -n "$PORT" ] || fail "no listener address in the log: $(grep listening "$T/$name.log")"
}

# ---- default /64: ::a and ::b are one source ----
run gw
hold a 2
wait_for 30 open_tcp 2 || fail "the two connections from ::a are not counted: $(cat "$T/hold-a.out")"
hold b 2
wait_for 30 refused 2 || fail "::b was not refused within ::a's /64: rejected '$(metric "$REJ")', open '$(metric 'tracegated_connections{transport="tcp"}')'"
grep -q "refused tcp client \[2001:db8:77::b\]:[0-9]*: too many connections from this address.s network" "$T/gw.log" ||
    fail "the refusal is not logged: $(grep refused "$T/gw.log" | head -n 3)"
open_tcp 2 || fail "a connection from ::b was admitted"
echo "ok: with the default /64, 2 held from ::a and 2 from ::b refused"
kill $HOLDERS 2>/dev/null
HOLDERS=
wait_for 30 open_tcp 0 || fail "the held connections are still counted after their holder left"
kill "$GW_PID" 2>/dev/null
wait "$GW_PID" 2>/dev/null

# ---- --source-prefix6 128: per address ----
run gw128 --source-prefix6 128
hold a 2
wait_for 30 open_tcp 2 || fail "(/128) the two connections from ::a are not counted"
hold b 2
wait_for 30 open_tcp 4 || fail "(/128) ::b was not admitted beside ::a: open '$(metric 'tracegated_connections{transport="tcp"}')', rejected '$(metric "$REJ")'"
r=$(metric "$REJ")
[ "${r:-0}" = 0 ] || fail "(/128) refusals counted: $r"
echo "ok: with --source-prefix6 128, ::a and ::b each have their own 2"
