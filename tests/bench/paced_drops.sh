#!/bin/sh
# paced_drops.sh: why the paced SMB ingest (bench_service section 1b: 1 KiB packets at 1 GB/s into a
# 2 MiB SMB) drops what it drops. Runs that section under `perf record -a` (cpu-clock samples on every
# CPU, CLOCK_MONOTONIC timestamps) with TG_BENCH_PACED_DROPS=1, which prints when each burst of drops
# began; then, for each burst, the longest stretch of the 3 ms before it in which a CPU took no sample
# at all (not even the idle task's: the CPU was not running this guest) on the service's CPU (1) and
# on the writer's (0), and over the measured windows how many such silences of 1 ms or more each CPU
# had, how often, and how long.
# Not part of `make bench` (needs perf and root). From the build directory, after `make bench`
# (or `make tests/bench/bench_service`):
#   sh ../tests/bench/paced_drops.sh        # PACED_RUNS (default 5) runs of 1 s; KEEP_TMP=1 keeps perf.data
set -u

B=${TG_BUILDDIR:-$(pwd)}
S=${TG_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
BS=$B/tests/bench/bench_service
[ -x "$B/tests/bench/.libs/bench_service" ] && BS=$B/tests/bench/.libs/bench_service
export LD_LIBRARY_PATH="$B/src/.libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
for tool in perf python3; do
    command -v $tool >/dev/null 2>&1 || { echo "paced_drops: needs $tool"; exit 1; }
done
[ -x "$BS" ] || { echo "paced_drops: $BS is not built (make tests/bench/bench_service)"; exit 1; }

ONLY=""
. "$S/tests/bench/script_lib.sh"
bench_init drops

TG_BENCH_PACED_DROPS=1 TG_BENCH_NO_WHATIF=1 TG_BENCH_READ_ROUNDS=1 TG_BENCH_PACED_RUNS=${PACED_RUNS:-5} \
    perf record -q -a -k CLOCK_MONOTONIC -e cpu-clock -F 10000 -o "$T/perf.data" -- "$BS" >"$T/bench.out" 2>"$T/perf.err" || {
    echo "paced_drops: perf record failed:"
    cat "$T/perf.err"
    exit 1
}
sed -n '/^1b\./,/offered =/p' "$T/bench.out"
perf script -i "$T/perf.data" -F cpu,time 2>/dev/null >"$T/samples.txt"

python3 - "$T/bench.out" "$T/samples.txt" <<'EOF'
import re, sys
out = open(sys.argv[1]).read()
bursts = [float(m.group(1)) for m in re.finditer(r'drop burst at ([0-9.]+)', out)]
windows = [(float(a), float(b)) for a, b in re.findall(r'paced window ([0-9.]+) ([0-9.]+)', out)]
times = {0: [], 1: []}
for line in open(sys.argv[2]):
    m = re.match(r'\s*\[(\d+)\]\s+([0-9.]+):', line)
    if m and int(m.group(1)) in times:
        times[int(m.group(1))].append(float(m.group(2)))
for c in times:
    times[c].sort()

def silences(ts, lo, hi):
    """The stretches of [lo, hi] with no sample: (start, length) pairs."""
    edges = [lo] + [t for t in ts if lo <= t <= hi] + [hi]
    return [(a, b - a) for a, b in zip(edges, edges[1:])]

def longest_silence(ts, lo, hi):
    """Longest stretch of [lo, hi] with no sample, and where it started (relative to hi)."""
    at, length = max(silences(ts, lo, hi), key=lambda g: g[1])
    return length, at - hi

print("\nEach burst of drops, and the longest silence (no sample of any task) in the 3 ms before it:")
print("   %-20s %-34s %-34s" % ("burst (monotonic s)", "CPU 1 (service): silent us, from", "CPU 0 (writer): silent us, from"))
for b in bursts:
    s1, a1 = longest_silence(times[1], b - 0.003, b)
    s0, a0 = longest_silence(times[0], b - 0.003, b)
    print("   %-20.6f %8.0f us from %+6.0f us %14s %8.0f us from %+6.0f us" % (b, s1 * 1e6, a1 * 1e6, "", s0 * 1e6, a0 * 1e6))
if not bursts:
    print("   (no drops in these runs)")
span = sum(b - a for a, b in windows)
for c in (1, 0):
    gaps = []
    for lo, hi in windows:
        gaps += [length for _, length in silences(times[c], lo, hi) if length >= 0.001]
    gaps.sort()
    print("CPU %d in the %d measured windows (%.1f s): %d silences of 1 ms or more (%.1f per s), median %.0f us, "
          "longest %.0f us" % (c, len(windows), span, len(gaps), len(gaps) / span if span else 0,
                               gaps[len(gaps) // 2] * 1e6 if gaps else 0, gaps[-1] * 1e6 if gaps else 0))
EOF
