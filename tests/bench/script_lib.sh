# script_lib.sh: what the benchmark scripts share (sourced, POSIX sh): a temporary directory whose
# processes are all killed on exit, starting and stopping them, row selection, free ports and the
# stunnel4 peer.
# Before sourcing: ONLY (the rows to run, "" = all). After: bench_init TAG.

# bench_init TAG: T = a fresh temporary directory, removed on exit (kept with KEEP_TMP=1) after
# every process started with `start` is stopped
bench_init() {
    T=$(mktemp -d "${TMPDIR:-/tmp}/tg-$1.XXXXXX") || exit 1
    PIDS=""
    trap bench_cleanup EXIT
    trap 'exit 1' INT TERM HUP
}
bench_cleanup() {
    for p in $PIDS; do kill "$p" 2>/dev/null; done
    sleep 0.3
    for p in $PIDS; do kill -9 "$p" 2>/dev/null; done
    for p in $PIDS; do wait "$p" 2>/dev/null; done
    if [ "${KEEP_TMP:-0}" = 1 ]; then echo "kept $T"; else rm -rf "$T"; fi
}

start() { # name command...: in the background, output to $T/name.log; sets LASTPID
    name=$1
    shift
    "$@" >"$T/$name.log" 2>&1 &
    LASTPID=$!
    PIDS="$PIDS $LASTPID"
}

stop() { # pid...: TERM, then KILL what is left after 3 s
    for p in "$@"; do kill "$p" 2>/dev/null; done
    i=0
    while [ $i -lt 30 ]; do
        alive=0
        for p in "$@"; do kill -0 "$p" 2>/dev/null && alive=1; done
        [ $alive = 0 ] && break
        sleep 0.1
        i=$((i + 1))
    done
    for p in "$@"; do
        kill -9 "$p" 2>/dev/null
        wait "$p" 2>/dev/null
    done
}

want() { [ -z "$ONLY" ] || case " $ONLY " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }
has() { command -v "$1" >/dev/null 2>&1; }

# free_port: PORT = a loopback port no socket uses (in any state: a port taken by some client's
# connection cannot be listened on either), from a pseudo-random start; a script may set
# NEXTPORT, and PORT_CEIL/PORT_FLOOR to stay in a range
NEXTPORT=$((20000 + ($$ * 7919 + $(date +%N | sed 's/^0*//;s/^$/0/')) % 30000))
free_port() {
    while ss -Htan "sport = :$NEXTPORT" 2>/dev/null | grep -q .; do NEXTPORT=$((NEXTPORT + 1)); done
    PORT=$NEXTPORT
    NEXTPORT=$((NEXTPORT + 1))
    if [ -n "${PORT_CEIL:-}" ] && [ $NEXTPORT -ge "$PORT_CEIL" ]; then NEXTPORT=$PORT_FLOOR; fi
}

# start_stunnel TAG TARGET: stunnel4 (or stunnel) on 127.0.0.1:$PORT (a free port), terminating TLS
# with $T/pki/server.{crt,key} and relaying to the UNIX socket TARGET, CPU-pinned by $PX; sets
# LASTPID. Fails, saying so under TAG, when neither is installed.
start_stunnel() {
    st=""
    has stunnel4 && st=stunnel4
    [ -z "$st" ] && has stunnel && st=stunnel
    if [ -z "$st" ]; then
        echo "$1: stunnel4 is not installed: its row is skipped"
        return 1
    fi
    free_port
    cat >"$T/stunnel.conf" <<EOF
foreground = yes
pid =
debug = 3
[bench]
accept = 127.0.0.1:$PORT
connect = $2
cert = $T/pki/server.crt
key = $T/pki/server.key
EOF
    # shellcheck disable=SC2086 # PX is a command prefix or empty
    start stunnel $PX $st "$T/stunnel.conf"
}
