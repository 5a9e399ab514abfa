#!/bin/sh
# run_program.sh: how `make check` runs a test program (LOG_COMPILER of the unit tests and fuzz
# regression runs). It runs the program unchanged; when the program fails, it repeats what failed
# at the very end of the log: a failed cmocka test leaves its fixtures behind, and the
# LeakSanitizer report printed at exit would otherwise bury the failure line.
# Usage: run_program.sh PROGRAM [ARGS...]; exits with the program's status.
out=$(mktemp "${TMPDIR:-/tmp}/tg-test-out.XXXXXX") || exit 99
"$@" >"$out" 2>&1
rc=$?
cat "$out"
if [ "$rc" -ne 0 ] && [ "$rc" -ne 77 ]; then
    echo
    echo "==== $(basename "$1") FAILED (exit status $rc); what failed, again:"
    # cmocka: each failed test's assertion and location; sanitizers: their one-line verdicts
    awk '
        /^\[ RUN      \] / { test = $NF; n = 0; next }
        /^\[  (ERROR|FAILED) +\] --- |^\[   LINE   \] --- / { if (n < 20) why[n++] = $0; next }
        /^\[  FAILED  \] [^ ]+$/ && !(($NF) in shown) && test == $NF {
            shown[$NF] = 1
            print "  " $NF ":"
            for (i = 0; i < n; i++) print "    " why[i]
            n = 0
            next
        }
        /^\[  ERROR   \] |runtime error: |^SUMMARY: (Address|Undefined|Leak|Thread)Sanitizer|^==[0-9]+==ERROR: / {
            if (!(($0) in other)) { other[$0] = 1; print "  " $0 }
        }
    ' "$out"
fi
rm -f "$out"
exit "$rc"
