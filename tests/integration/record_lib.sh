# record_lib.sh: shared set-up for the recording integration tests (sourced, not run): finds the
# built programs (exit 77 when missing) and makes the scratch space (tg_scratch.sh: a temp dir $T
# named after $REC_TAG, the background processes in $PIDS stopped on exit, `fail` printing the
# logs in $T before exiting 1). Waiting for events with scaled safety-net deadlines: tg_wait.sh.
set -u

B=${TG_BUILDDIR:-$(pwd)}
S=${TG_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
. "$S/tests/integration/tg_wait.sh"
. "$S/tests/integration/tg_scratch.sh"
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

tg_scratch "${REC_TAG:-rec}"
