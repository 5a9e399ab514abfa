# tg_wait.sh: waiting in the shell tests (sourced, POSIX sh). A test waits for the event it needs
# (a log line, a file, a socket, an answer); the number of seconds it gives is only a safety net
# against a hang, multiplied by $TG_TEST_TIMEOUT_SCALE (default 4, as in tests/unit/tg_test_util.h)
# so that a loaded machine never turns a deadline into the verdict.
#   tg_secs N                  N seconds scaled (an integer, at least 1)
#   tg_timeout N CMD...        timeout(1) with N scaled seconds
#   wait_for N CMD...          runs CMD until it succeeds (0) or N scaled seconds pass (1)
#   wait_for_line N FILE ERE   wait_for a line matching ERE (grep -E) in FILE
#   wait_gone N PID            waits until PID (any process) has exited; 1 if it is still there
#   wait_exit PID N            waits until PID, a child of this shell, has exited; WAIT_RC is its
#                              exit status, or "timeout" (not usable inside $(...): a subshell
#                              cannot wait for our children)

case ${TG_TEST_TIMEOUT_SCALE:-} in
'') TG_TEST_TIMEOUT_SCALE=4 ;;
*[!0-9.]* | . | *.*.*)
    echo "tg_wait.sh: ignoring TG_TEST_TIMEOUT_SCALE=$TG_TEST_TIMEOUT_SCALE (want a number)" >&2
    TG_TEST_TIMEOUT_SCALE=4
    ;;
esac
export TG_TEST_TIMEOUT_SCALE

tg_secs() {
    awk -v s="$1" -v k="$TG_TEST_TIMEOUT_SCALE" 'BEGIN { v = s * k; n = int(v); if (n < v) n++; if (n < 1) n = 1; print n }'
}

tg_timeout() {
    _tg_n=$(tg_secs "$1")
    shift
    timeout "$_tg_n" "$@"
}

# wait_for N CMD...: polls quickly at first, then every 0.2 s; the deadline is wall-clock time
wait_for() {
    _tg_end=$(($(date +%s) + $(tg_secs "$1")))
    shift
    _tg_i=0
    while :; do
        "$@" && return 0
        [ "$(date +%s)" -lt "$_tg_end" ] || break
        if [ $_tg_i -lt 20 ]; then sleep 0.05; else sleep 0.2; fi
        _tg_i=$((_tg_i + 1))
    done
    "$@"
}

wait_for_line() {
    wait_for "$1" grep -q -E -e "$3" "$2" 2>/dev/null
}

_tg_gone() { ! kill -0 "$1" 2>/dev/null; }
wait_gone() {
    wait_for "$1" _tg_gone "$2"
}

wait_exit() {
    WAIT_RC=timeout
    if wait_gone "$2" "$1"; then
        wait "$1" 2>/dev/null
        WAIT_RC=$?
    fi
}
