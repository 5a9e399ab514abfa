# gw_lib.sh: shared helpers for the tracegated integration tests (tests/integration/test_gw_*.sh):
# binaries (exit 77 when one is not built), starting tracegated and reading back the ports it
# listens on; the temp dir $T, $PIDS stopped on exit and `fail` come from tg_scratch.sh, waiting
# for events with scaled safety-net deadlines from tg_wait.sh. Source it; POSIX sh.

B=${TG_BUILDDIR:-$(pwd)}
S=${TG_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
TRACEGATED=$B/gateway/tracegated
TRACECTL=$B/src/tracectl/tracectl
DEMO=$B/src/demo/tracegate-demo
CLIENT=$B/tests/integration/gw_testclient
. "$S/tests/integration/tg_wait.sh"
. "$S/tests/integration/tg_scratch.sh"

need() {
    for bin in "$@"; do
        if [ ! -x "$bin" ]; then
            echo "SKIP: $bin is not built"
            exit 77
        fi
    done
}
command -v timeout >/dev/null 2>&1 || { echo "SKIP: timeout(1) is not available"; exit 77; }

tg_scratch gw-it

# start_gw NAME [tracegated options...]: runs tracegated with its embedded service on private
# sockets ($T/NAME-p.sock, $T/NAME-c.sock), logging to $T/NAME.log; waits until it logs that it
# is ready. Sets GW_PID. Fails the test if it exits or does not come up.
start_gw() {
    name=$1
    shift
    "$TRACEGATED" --producer-socket "$T/$name-p.sock" --consumer-socket "$T/$name-c.sock" \
        --log-level info "$@" >"$T/$name.log" 2>&1 &
    GW_PID=$!
    PIDS="$PIDS $GW_PID"
    wait_for 20 _gw_up "$name" "$GW_PID" || fail "tracegated ($name) did not become ready"
    grep -q "tracegated .* ready" "$T/$name.log" || fail "tracegated ($name) exited at startup"
}
# start_gw_http NAME [tracegated options...]: start_gw with --http on a free port (--http needs a
# port number: a port that another process takes in between makes tracegated exit, and the next
# one is tried). Sets HTTP_PORT and GW_PID.
start_gw_http() {
    name=$1
    shift
    HTTP_PORT=
    try=0
    while [ -z "$HTTP_PORT" ] && [ $try -lt 8 ]; do
        try=$((try + 1))
        cand=$("$CLIENT" free-port)
        rm -f "$T/$name-p.sock" "$T/$name-c.sock"
        "$TRACEGATED" --producer-socket "$T/$name-p.sock" --consumer-socket "$T/$name-c.sock" \
            --log-level info --http "127.0.0.1:$cand" "$@" >"$T/$name.log" 2>&1 &
        GW_PID=$!
        wait_for 20 _gw_up "$name" "$GW_PID" || fail "tracegated ($name) did not become ready"
        if grep -q "tracegated .* ready" "$T/$name.log"; then
            HTTP_PORT=$cand
            PIDS="$PIDS $GW_PID"
        else
            wait "$GW_PID" 2>/dev/null
            cp "$T/$name.log" "$T/$name.try$try.txt"
        fi
    done
    [ -n "$HTTP_PORT" ] || fail "tracegated ($name) did not start on any of $try HTTP ports: $(cat "$T/$name.log")"
}
_gw_up() { grep -q "tracegated .* ready" "$T/$1.log" 2>/dev/null || ! kill -0 "$2" 2>/dev/null; }

# gw_addr NAME N: the address ("127.0.0.1:PORT" or a path) of the Nth (1-based) gateway listener
gw_addr() {
    sed -n 's/.*listening: \(consumer\|producer\) \(tcp\|unix\|tls\):\/\/\([^ ]*\) (.*/\3/p' "$T/$1.log" | sed -n "${2}p"
}
