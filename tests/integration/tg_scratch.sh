# tg_scratch.sh: a shell test's scratch space and its end (sourced by gw_lib.sh, record_lib.sh and
# tests/browser/run.sh; POSIX sh; needs tg_wait.sh's wait_for).
#   tg_scratch NAME  makes the temp dir $T (tg-NAME.XXXXXX under $TMPDIR) and arranges that on exit
#                    the background processes listed in $PIDS are stopped (TERM, then KILL after
#                    up to 5 s: sanitizer builds take a moment to exit) and $T is removed, unless
#                    KEEP_TMP=1. A test that traps EXIT itself calls `cleanup` from its trap.
#   fail MSG         prints MSG and the last 40 lines of each $T/*.log, and exits 1.

_all_gone() { for p in $PIDS; do kill -0 "$p" 2>/dev/null && return 1; done; return 0; }

cleanup() {
    for p in $PIDS; do kill "$p" 2>/dev/null; done
    wait_for 5 _all_gone
    for p in $PIDS; do kill -9 "$p" 2>/dev/null; done
    if [ "${KEEP_TMP:-0}" = 1 ]; then echo "kept $T"; else rm -rf "$T"; fi
}

fail() {
    echo "FAIL: $*"
    for f in "$T"/*.log; do
        [ -f "$f" ] || continue
        echo "---- $f (last 40 lines)"
        tail -n 40 "$f"
    done
    exit 1
}

tg_scratch() {
    T=$(mktemp -d "${TMPDIR:-/tmp}/tg-$1.XXXXXX") || exit 99
    PIDS=""
    trap cleanup EXIT
    trap 'exit 1' INT TERM HUP
}
