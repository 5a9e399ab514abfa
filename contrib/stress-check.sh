#!/usr/bin/env bash
# stress-check.sh: runs the whole test suite (`make check`) several times while stress-ng keeps
# the CPUs and the disk busy beside it (`stress-ng --cpu 2 --io 1`), as on a loaded build machine,
# and prints how often each test passed. Run by `make check-stress` from a configured build tree.
#
# Usage: contrib/stress-check.sh [ROUNDS]        (default 3; or STRESS_ROUNDS=N)
# Environment: MAKE (default make), STRESS_JOBS (make -j, default nproc), STRESS_NG_ARGS (default
# "--cpu 2 --io 1"), STRESS_OUT (where the logs of failed tests are kept, default stress-results),
# TG_TEST_TIMEOUT_SCALE (the tests' safety-net multiplier, default 4: left as it is).
# Exit 0 when every test that ran passed in every round; 1 otherwise; 2 on a usage error.
# stress-ng comes from Debian's stress-ng package: TRACEGATE_STRESS_DEPS=1 contrib/install-deps.sh.
set -u

ROUNDS=${1:-${STRESS_ROUNDS:-3}}
case $ROUNDS in '' | *[!0-9]* | 0) echo "usage: $0 [ROUNDS>0]" >&2; exit 2 ;; esac
MAKE=${MAKE:-make}
JOBS=${STRESS_JOBS:-$(nproc 2>/dev/null || echo 2)}
STRESS_NG_ARGS=${STRESS_NG_ARGS:---cpu 2 --io 1}
OUT=${STRESS_OUT:-stress-results}

if [ ! -f Makefile ] || ! grep -q '^check-TESTS:' Makefile; then
    echo "stress-check: run this from a configured tracegate build tree (make check-stress)" >&2
    exit 2
fi
if ! command -v stress-ng >/dev/null 2>&1; then
    echo "stress-check: stress-ng is not installed (TRACEGATE_STRESS_DEPS=1 contrib/install-deps.sh)" >&2
    exit 2
fi

echo "stress-check: building the test programs"
$MAKE -j"$JOBS" check TESTS= >/dev/null || { echo "stress-check: the build failed" >&2; exit 1; }

rm -rf "$OUT"
mkdir -p "$OUT"
# shellcheck disable=SC2086 # STRESS_NG_ARGS is a list of options
stress-ng $STRESS_NG_ARGS --timeout 86400 --quiet &
STRESS_PID=$!
trap 'kill "$STRESS_PID" 2>/dev/null; wait "$STRESS_PID" 2>/dev/null' EXIT
trap 'exit 130' INT TERM HUP
sleep 1
kill -0 "$STRESS_PID" 2>/dev/null || { echo "stress-check: stress-ng did not start ($STRESS_NG_ARGS)" >&2; exit 2; }
echo "stress-check: stress-ng $STRESS_NG_ARGS is running (pid $STRESS_PID); $ROUNDS round(s) of make -j$JOBS check"

declare -A PASSES FAILS SKIPS
any_fail=0
for ((round = 1; round <= ROUNDS; round++)); do
    start=$(date +%s)
    $MAKE -j"$JOBS" -k check >"$OUT/round-$round.make.log" 2>&1
    mk=$?
    secs=$(($(date +%s) - start))
    p=0 f=0 s=0
    while IFS= read -r trs; do
        name=${trs%.trs}
        name=${name#./}
        result=$(sed -n 's/^:test-result: //p' "$trs" | sort -u | tr '\n' ' ')
        case $result in
        "PASS ") PASSES[$name]=$((${PASSES[$name]:-0} + 1)); p=$((p + 1)) ;;
        "SKIP ") SKIPS[$name]=$((${SKIPS[$name]:-0} + 1)); s=$((s + 1)) ;;
        *)
            FAILS[$name]=$((${FAILS[$name]:-0} + 1))
            f=$((f + 1))
            any_fail=1
            mkdir -p "$OUT/round-$round/$(dirname "$name")"
            cp "$name.log" "$OUT/round-$round/$name.log" 2>/dev/null
            ;;
        esac
    done < <(find . -path "./$OUT" -prune -o -name '*.trs' -print | sort)
    if [ "$mk" -ne 0 ] && [ "$f" -eq 0 ]; then
        echo "stress-check: round $round: make check failed outside the tests (see $OUT/round-$round.make.log)"
        any_fail=1
    fi
    printf 'stress-check: round %d/%d: %d passed, %d failed, %d skipped (%dm%02ds, load %s)\n' "$round" "$ROUNDS" \
        "$p" "$f" "$s" $((secs / 60)) $((secs % 60)) "$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null)"
done

echo "stress-check: passes per test over $ROUNDS round(s) with stress-ng $STRESS_NG_ARGS beside the suite:"
{
    for n in "${!PASSES[@]}" "${!FAILS[@]}" "${!SKIPS[@]}"; do echo "$n"; done
} | sort -u | while IFS= read -r n; do
    ok=${PASSES[$n]:-0} bad=${FAILS[$n]:-0} skip=${SKIPS[$n]:-0}
    note=""
    [ "$bad" -gt 0 ] && note="  FAILED $bad time(s): logs in $OUT/round-*/$n.log"
    [ "$skip" -gt 0 ] && note="$note  (skipped $skip time(s))"
    printf '  %d/%d  %s%s\n' "$ok" "$ROUNDS" "$n" "$note"
done
if [ "$any_fail" -ne 0 ]; then
    echo "stress-check: FAILED: not every test passed in every round"
    exit 1
fi
echo "stress-check: every test passed in all $ROUNDS round(s)"
exit 0
