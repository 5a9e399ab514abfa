# tp_lib.sh: what Perfetto's own trace processor makes of a trace, for the integration tests.
# Sourced after TG_BUILDDIR is known (B). The trace processor is Chromium's build of it,
# libtest_trace_processor.so from Debian's chromium-shell package (contrib/install-deps.sh puts it
# in /usr/local/lib/tracegate), driven by tests/integration/tp_query. Where it is not installed
# the checks are skipped with a line saying so, unless TG_REQUIRE_TRACE_PROCESSOR=1 (CI), where
# that is a failure. Each function fails the test (fail) on a trace processor error.

TP_QUERY=${TG_BUILDDIR:-.}/tests/integration/tp_query

# tp_lib_path: prints the library's path, or nothing.
tp_lib_path() {
    for p in "${TG_TRACE_PROCESSOR_LIB:-}" /usr/local/lib/tracegate/libtest_trace_processor.so \
        /usr/lib/chromium/libtest_trace_processor.so; do
        [ -n "$p" ] && [ -r "$p" ] && { echo "$p"; return 0; }
    done
    return 1
}

# tp_available: 0 when the checks can run.
tp_available() {
    if [ -x "$TP_QUERY" ] && TP_LIB=$(tp_lib_path); then
        return 0
    fi
    if [ "${TG_REQUIRE_TRACE_PROCESSOR:-0}" = 1 ]; then
        fail "Perfetto's trace processor is required (TG_REQUIRE_TRACE_PROCESSOR=1) but not installed (contrib/install-deps.sh with TRACEGATE_TRACE_PROCESSOR=1)"
    fi
    echo "trace processor: not installed, its checks skipped (contrib/install-deps.sh with TRACEGATE_TRACE_PROCESSOR=1)"
    return 1
}

# tp_rows TRACE SQL: the query's rows (tab-separated cells), without the header row.
tp_rows() {
    ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0 "$TP_QUERY" "$TP_LIB" "$1" "$2" >"$T/tp.out" 2>"$T/tp.err" ||
        fail "trace processor on $(basename "$1"): $(cat "$T/tp.err")"
    sed '1,2d' "$T/tp.out"
}

# tp_import_ok TRACE [STAT...]: the trace parses, and trace processor counted no import error or
# data loss, but for the stats named (ones the test expects, and checks itself).
tp_import_ok() {
    tp_trace=$1
    shift
    tp_allowed=""
    for a in "$@"; do tp_allowed="$tp_allowed, '$a'"; done
    tp_rows "$tp_trace" "select name || coalesce('[' || idx || ']', '') || ' = ' || value from stats
        where severity in ('error', 'data_loss') and value > 0 and name not in (''$tp_allowed)" >"$T/tp_errors.txt"
    [ ! -s "$T/tp_errors.txt" ] || fail "trace processor reports import errors in $(basename "$tp_trace"): $(cat "$T/tp_errors.txt")"
}
