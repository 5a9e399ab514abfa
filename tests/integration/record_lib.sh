# record_lib.sh: shared set-up for the recording integration tests (sourced, not run): finds the
# built programs (exit 77 when missing), makes a temp dir $T (prefix $REC_TAG), kills the
# background processes in $PIDS on exit, and `fail` prints the logs in $T before exiting 1.
# Waiting for events with scaled safety-net deadlines: tg_wait.sh.
set -u

B=${TG_BUILDDIR:-$(pwd)}
S=${TG_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
. "$S/tests/integration/tg_wait.sh"
TRACEGATED=$B/gateway/tracegated
TRACECTL=$B/src/tracectl/tracectl
DEMO=$B/src/demo/tracegate-demo

for bin in "$TRACEGATED" "$TRACECTL" "$DEMO"; do
    if [ ! -x "$bin" ]; then
        echo "SKIP: $bin is not built yet"
        exit 77
    fi
done
if ! command -v timeout >/dev/null 2>&1; then
    echo "SKIP: timeout(1) is not available"
    exit 77
fi

T=$(mktemp -d "${TMPDIR:-/tmp}/tg-${REC_TAG:-rec}.XXXXXX") || exit 99
PIDS=""
_all_gone() { for p in $PIDS; do kill -0 "$p" 2>/dev/null && return 1; done; return 0; }
cleanup() {
    for p in $PIDS; do kill "$p" 2>/dev/null; done
    wait_for 5 _all_gone # sanitizer builds take a moment to exit; then whatever is left is killed
    for p in $PIDS; do kill -9 "$p" 2>/dev/null; done
    if [ "${KEEP_TMP:-0}" = 1 ]; then echo "kept $T"; else rm -rf "$T"; fi
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP

fail() {
    echo "FAIL: $*"
    for f in "$T"/*.log; do
        [ -f "$f" ] || continue
        echo "---- $f (last 40 lines)"
        tail -n 40 "$f"
    done
    exit 1
}
