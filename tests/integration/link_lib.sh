# link_lib.sh: shared helpers for the gateway-link integration tests (tests/integration/
# test_link_*.sh), on top of gw_lib.sh (binaries, $T, background processes killed on exit, fail,
# tg_wait.sh): nodes (tracegated --node-name with its embedded service), their demos, link
# ports, `tracectl nodes` states, background recordings stopped with Ctrl-C, and the check that
# a trace holds exactly the frames a demo says it drew. Source it; POSIX sh.
set -u
. "$(dirname "$0")/gw_lib.sh"
need "$TRACEGATED" "$TRACECTL" "$DEMO"

# start_node NAME [tracegated options...]: a node named NAME (or $NODE_NAME) with its embedded
# service on $T/NAME-p.sock and $T/NAME-c.sock (served by the service itself), a gateway consumer
# listener $T/NAME-gw.sock (tracectl nodes, --node: the gateway's local services), logging to
# $T/NAME.log; waits until it is ready. $AS, when set, prefixes the command (run it as another
# user). HTTP=1: also the HTTP/WebSocket front end on a free port (HTTP_PORT; another port is
# tried when one was taken in between). AS, HTTP and NODE_NAME apply to one call (start_node
# clears them: a shell may keep a function's prefix assignments). Sets NODE_PID.
start_node() {
    _n=$1
    shift
    _try=0
    HTTP_PORT=
    while :; do
        _try=$((_try + 1))
        _http="--no-http"
        if [ "${HTTP:-0}" = 1 ]; then
            HTTP_PORT=$("$CLIENT" free-port)
            _http="--http=127.0.0.1:$HTTP_PORT"
        fi
        rm -f "$T/$_n-p.sock" "$T/$_n-c.sock" "$T/$_n-gw.sock"
        # shellcheck disable=SC2086 # $AS is a command prefix
        ${AS:-} "$TRACEGATED" --node-name "${NODE_NAME:-$_n}" --producer-socket "$T/$_n-p.sock" \
            --consumer-socket "$T/$_n-c.sock" --listen "consumer=unix:$T/$_n-gw.sock" --log-level info \
            $_http "$@" >"$T/$_n.log" 2>&1 &
        NODE_PID=$!
        wait_for 20 _gw_up "$_n" "$NODE_PID" || fail "node $_n did not become ready"
        if grep -q "tracegated .* ready" "$T/$_n.log"; then
            PIDS="$PIDS $NODE_PID"
            AS= HTTP= NODE_NAME=
            return 0
        fi
        wait "$NODE_PID" 2>/dev/null
        # only a taken HTTP port is worth another try
        if [ "${HTTP:-0}" != 1 ] || [ $_try -ge 8 ] || ! grep -qi "http\|address already in use" "$T/$_n.log"; then
            fail "node $_n exited at startup: $(cat "$T/$_n.log")"
        fi
        cp "$T/$_n.log" "$T/$_n.try$_try.txt"
    done
}

# stop_node PID: SIGTERM, then wait for it to exit
stop_node() {
    kill "$1" 2>/dev/null
    wait_exit "$1" 30
}

# link_port NAME: the port of NAME's first link listener ("listening for links: tls://A:P")
link_port() {
    sed -n 's/.*listening for links: \(tcp\|tls\):\/\/[^ ]*:\([0-9][0-9]*\).*/\2/p' "$T/$1.log" | head -n 1
}

# wait_link NAME PEER [N]: NAME logged its N-th (default 1st) "link PEER up" or "resumed"
_nth_line() { [ "$(count_log "$1" "$2")" -ge "$3" ]; }
wait_link() {
    wait_for 60 _nth_line "$T/$1.log" "link: link $2 (up|resumed) \(" "${3:-1}" ||
        fail "$1 did not link with $2"
}
# wait_log FILE ERE [N]: FILE has N (default 1) lines matching ERE (safety net 60 s, scaled)
wait_log() {
    wait_for 60 _nth_line "$1" "$2" "${3:-1}"
}
# count_log FILE ERE: lines of FILE matching ERE (0 while FILE does not exist)
count_log() {
    _c=$(grep -c -E -e "$2" "$1" 2>/dev/null)
    echo "${_c:-0}"
}

# node_state NAME NODE: what `tracectl nodes` on NAME's gateway says of NODE: "STATE VIA"
node_state() {
    tg_timeout 10 "$TRACECTL" nodes "unix:$T/$1-gw.sock" 2>/dev/null | awk -v n="$2" '$1 == n { print $2, $3 }'
}
_state_is() { [ "$(node_state "$1" "$2")" = "$3" ]; }
# expect_state NAME NODE "STATE VIA": waits until NAME's node list says so
expect_state() {
    wait_for 30 _state_is "$1" "$2" "$3" ||
        fail "$1's node list does not say '$3' for $2: $(tg_timeout 10 "$TRACECTL" nodes "unix:$T/$1-gw.sock" 2>&1)"
}

# start_demo NAME [demo options...]: tracegate-demo on NAME's producer socket, logging to
# $T/NAME-demo.log (--duration: it exits by itself even if the trap never runs); waits until it
# registered. $AS as for start_node. Sets DEMO_PID.
start_demo() {
    _n=$1
    shift
    # shellcheck disable=SC2086
    ${AS:-} "$DEMO" --producer-socket "$T/$_n-p.sock" --duration 1800 "$@" >"$T/$_n-demo.log" 2>&1 &
    DEMO_PID=$!
    PIDS="$PIDS $DEMO_PID"
    AS=
    wait_log "$T/$_n-demo.log" "registered with the tracing service" || fail "the demo of $_n did not register"
}

# stops DEMOLOG: session instances the demo has stopped so far (it logs each with its frames)
stops() { count_log "$1" "session instance [0-9]* stopped after [0-9]* frames"; }
# drawn DEMOLOG K: the frames the demo drew in the K-th stopped instance
drawn() { grep "session instance [0-9]* stopped after [0-9]* frames" "$1" | sed -n "${2}s/.* stopped after \([0-9]*\) frames.*/\1/p"; }
_more_stops() { [ "$(stops "$1")" -gt "$2" ]; }
# first_frames DEMOLOG: session instances the demo drew into so far
first_frames() { count_log "$1" "session instance [0-9]*: first frame drawn"; }
_more_first_frames() { [ "$(first_frames "$1")" -gt "$2" ]; }
# wait_drawn DEMOLOG N: the demo drew into more than N instances
wait_drawn() { wait_for 60 _more_first_frames "$1" "$2" || fail "the demo ($1) drew nothing into the session"; }

# frames_of DUMP [PID]: the frame numbers of the DrawFrame slices in a `tracectl dump --raw`
# output (of the demo with that pid: its packets' trusted_pid), one a line, sorted
frames_of() {
    awk -v want="${2:-}" '
        function flush() { if (draw && (want == "" || pid == want)) print frame; draw = 0; pid = ""; frame = "" }
        /^#[0-9]/ { flush() }
        /int_value:/ { v = $2 }
        /name: "frame"/ { frame = v }
        /name: "DrawFrame"/ { draw = 1 }
        /^    trusted_pid:/ { pid = $2 }
        END { flush() }' "$1" | sort -n
}

# check_trace FILE DEMOLOG K [PID]: the trace holds exactly the DrawFrame slices (each carries the
# demo's frame number) the demo (pid PID, when several wrote into it) drew in its K-th session
# instance: 1..N, no gap, no duplicate
check_trace() {
    wait_for 30 _more_stops "$2" $(($3 - 1)) || fail "the demo did not log the end of session instance $3"
    _want=$(drawn "$2" "$3")
    [ -n "$_want" ] && [ "$_want" -gt 0 ] || fail "the demo drew no frames in session instance $3"
    if [ ! -s "$1.txt" ]; then
        tg_timeout 60 "$TRACECTL" dump "$1" --raw >"$1.txt" 2>"$T/dump.log" || fail "dump $1 failed: $(cat "$T/dump.log")"
    fi
    grep -q '^ *trace_config {' "$1.txt" || fail "$1 has no trace_config packet"
    frames_of "$1.txt" "${4:-}" >"$1.frames"
    _got=$(wc -l <"$1.frames" | tr -d ' ')
    [ "$_got" -gt 0 ] || fail "$1 has no DrawFrame slices${4:+ of pid $4}"
    _uniq=$(uniq "$1.frames" | wc -l | tr -d ' ')
    _lo=$(head -n 1 "$1.frames")
    _hi=$(tail -n 1 "$1.frames")
    [ "$_uniq" = "$_got" ] || fail "$1: $((_got - _uniq)) DrawFrame slices are duplicated"
    [ "$_lo" = 1 ] && [ "$_hi" = "$_want" ] && [ "$_got" = "$_want" ] ||
        fail "$1: DrawFrame $_lo..$_hi ($_got slices), but the demo drew frames 1..$_want: some were lost"
    echo "  $(basename "$1"): DrawFrame 1..$_want${4:+ of pid $4}, as the demo drew them"
}

# record_bg NAME ARGS...: an open-ended `tracectl ARGS` (record, attach) in the background (not
# under timeout(1), which would forward our SIGINT on its own), logging to $T/NAME.log; sets RPID
record_bg() {
    _n=$1
    shift
    "$TRACECTL" "$@" >"$T/$_n.log" 2>&1 &
    RPID=$!
    PIDS="$PIDS $RPID"
}
# stop_record NAME: Ctrl-C the recording in RPID and wait for it; fails unless it exits 0
stop_record() {
    kill -INT "$RPID"
    wait_exit "$RPID" 120
    [ "$WAIT_RC" = 0 ] || fail "$1 exited $WAIT_RC: $(cat "$T/$1.log")"
}
# short_record NAME DEMOLOG ARGS...: records (tracectl record ARGS -o $T/NAME.pftrace) until the
# demo drew into the new session and tracectl printed a progress line, then Ctrl-C
short_record() {
    _n=$1
    _dl=$2
    shift 2
    _f0=$(first_frames "$_dl")
    record_bg "$_n" "$@" -o "$T/$_n.pftrace"
    wait_drawn "$_dl" "$_f0"
    wait_log "$T/$_n.log" "recording:" || fail "$_n: no progress line: $(cat "$T/$_n.log")"
    stop_record "$_n"
    [ -s "$T/$_n.pftrace" ] || fail "$_n wrote no trace: $(cat "$T/$_n.log")"
}

# start_relay NAME TARGET [link_relay.py options...]: the test relay (link_relay.py) in front of
# TARGET (HOST:PORT or unix:PATH), commands through the FIFO $T/NAME.ctl, its lines in
# $T/NAME.log; waits until it listens. Sets RELAY_PORT.
start_relay() {
    _n=$1
    _t=$2
    shift 2
    command -v python3 >/dev/null 2>&1 || { echo "SKIP: python3 is needed for the relay"; exit 77; }
    python3 "$S/tests/integration/link_relay.py" --target "$_t" --ctl "$T/$_n.ctl" "$@" >"$T/$_n.log" 2>&1 &
    PIDS="$PIDS $!"
    wait_log "$T/$_n.log" "relay: listening on" || fail "relay $_n did not start: $(cat "$T/$_n.log")"
    RELAY_PORT=$(sed -n 's/^relay: listening on .*:\([0-9][0-9]*\)$/\1/p' "$T/$_n.log" | head -n 1)
}
# relay NAME CMD [ARG]: sends a command and waits until the relay says it took effect
relay() {
    _n=$1
    shift
    _k=$(($(count_log "$T/$_n.log" "^relay: done $1( |$)") + 1))
    tg_timeout 10 sh -c 'echo "$1" >"$2"' sh "$*" "$T/$_n.ctl" || fail "relay $_n does not take commands"
    wait_log "$T/$_n.log" "^relay: done $1( |$)" "$_k" || fail "relay $_n did not do '$*'"
}
