#!/bin/sh
# scale_bench.sh: does the cost per connection and per producer stay flat from 10 to 10,000?
# For each N of BENCH_SCALE_NS (default "10 100 1000 10000"), a fresh tracegated and bench_scale:
#   gw:        N idle bound consumer connections through tracegated's TCP listener, bridged to a
#              bench_gw server (external upstream, so each holds 2 descriptors in tracegated);
#   producers: N producers connected to tracegated's embedded service, each with a 16 KiB SMB
#              of its own (producer-provided memfd) and one registered data source.
# Per N: RSS and CPU per connection (open, idle, close), the p50 latency and tracegated's CPU per
# call of one active client while the N are held, and the CPU of one more connection opened and
# closed (churn). Then the flatness ratio of each column: value at the largest N / value at 10.
# CPU is tracegated's own (schedstat of all its threads), not wall time. Run by `make bench`;
# see docs/benchmarks.md, "Scale". Loopback only; every process it starts is killed on exit.
#
# Environment: TG_BUILDDIR, TG_SRCDIR (from make bench), BENCH_SCALE_NS, BENCH_SCALE_RR (calls of
# the active client, default 2000), BENCH_SCALE_CHURN (cycles, default 200), BENCH_SCALE_SMB_KB
# (16), BENCH_TRACEGATED (another tracegated binary, to compare builds), BENCH_ONLY (keys "scale-gw scale-producers"; other keys: this script skips), BENCH_PIN=0,
# KEEP_TMP=1.
set -u

B=${TG_BUILDDIR:-$(pwd)}
BS=$B/tests/bench/bench_scale
BG=$B/tests/bench/bench_gw
GWD=${BENCH_TRACEGATED:-$B/gateway/tracegated}
NS=${BENCH_SCALE_NS:-10 100 1000 10000}
RR=${BENCH_SCALE_RR:-2000}
CHURN=${BENCH_SCALE_CHURN:-200}
SMB_KB=${BENCH_SCALE_SMB_KB:-16}
ONLY=${BENCH_ONLY:-}

for bin in "$BS" "$BG" "$GWD"; do
    [ -x "$bin" ] || { echo "scale_bench: $bin is not built (run 'make bench')"; exit 1; }
done
. "$(cd "$(dirname "$0")" && pwd)/script_lib.sh"
if [ -n "$ONLY" ] && ! want scale-gw && ! want scale-producers; then exit 0; fi

EP=""
PX=""
if [ "${BENCH_PIN:-1}" = 1 ] && command -v taskset >/dev/null 2>&1 && [ "$(nproc)" -ge 2 ]; then
    EP="taskset -c 0"
    PX="taskset -c 1"
fi

bench_init scale

# listening ports below the ephemeral range (10,000 client connections take that many local
# ports from it), not used by any socket in any state
EPH=$(cut -f1 /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)
NEXTPORT=$((10000 + ($$ * 7919) % (EPH - 12000)))
PORT_CEIL=$((EPH - 1))
PORT_FLOOR=10000
field() { echo "$2" | tr ' ' '\n' | sed -n "s/^$1=//p" | head -n 1; }

HARD=$(ulimit -Hn)
[ "$HARD" = unlimited ] && HARD=1048576
echo "scale_bench: N = $NS; ${RR} calls of the active client, ${CHURN} churn cycles; RLIMIT_NOFILE hard $HARD;" \
    "load average $(cut -d' ' -f1-3 /proc/loadavg)"

# one row: kind N -> prints the table row, appends "N value..." to $T/kind.dat
row() {
    kind=$1
    n=$2
    rm -f "$T"/*.sock
    free_port
    if [ "$kind" = gw ]; then
        # 2 descriptors per bridged client in tracegated: raise the hard limit with prlimit when
        # allowed (CAP_SYS_RESOURCE), else the hard limit caps N
        m=$n
        PL=""
        need=$((2 * n + 200))
        if [ "$need" -gt "$HARD" ]; then
            if prlimit --nofile="$need:$need" true 2>/dev/null; then
                PL="prlimit --nofile=$need:$need"
            else
                m=$(((HARD - 64) / 2))
            fi
        fi
        start server $PL $EP "$BG" server "$T/server.sock"
        SP=$LASTPID
        start gw $PL $PX "$GWD" --upstream-consumer "$T/server.sock" --listen "consumer=tcp://127.0.0.1:$PORT" \
            --no-http --max-connections $((m + 300)) --producer-socket "$T/p.sock" --consumer-socket "$T/c.sock" \
            --log-level warn
        GP=$LASTPID
        i=0
        while [ ! -S "$T/server.sock" ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
        target="127.0.0.1:$PORT"
        extra=""
    else
        m=$n
        PL=""
        need=$((n + 200))
        if [ "$need" -gt "$HARD" ]; then
            if prlimit --nofile="$need:$need" true 2>/dev/null; then
                PL="prlimit --nofile=$need:$need"
            else
                m=$((HARD - 200))
            fi
        fi
        SP=""
        start gw $PL $PX "$GWD" --listen "consumer=tcp://127.0.0.1:$PORT" --no-http \
            --producer-socket "$T/p.sock" --consumer-socket "$T/c.sock" --log-level warn
        GP=$LASTPID
        target="$T/p.sock"
        extra="--consumer $T/c.sock --smb-kb $SMB_KB"
    fi
    # tracegated logs "ready" at info level only: wait for its sockets instead
    i=0
    while [ $i -lt 100 ] && ! { [ -S "$T/p.sock" ] && ss -Htln "sport = :$PORT" | grep -q .; }; do
        kill -0 "$GP" 2>/dev/null || break
        sleep 0.1
        i=$((i + 1))
    done
    # shellcheck disable=SC2086
    line=$(timeout 600 $PL $EP "$BS" "$kind" "$target" --conns "$m" --pid "$GP" --rr "$RR" --churn "$CHURN" $extra \
        2>"$T/bs.log")
    stop "$GP"
    [ -n "$SP" ] && stop "$SP"
    if [ -z "$line" ]; then
        printf "%8s  failed: %s\n" "$n" "$(head -c 300 "$T/bs.log")"
        tail -n 5 "$T/gw.log"
        return
    fi
    label=$m
    [ "$m" != "$n" ] && label="$m*"
    set -- rss_per_conn_bytes open_cpu_us idle_pct idle_cpu_ns_s rr_p50_us rr_cpu_us churn_cpu_us close_cpu_us
    vals=""
    for k in "$@"; do vals="$vals $(field "$k" "$line")"; done
    echo "$n $vals" >>"$T/$kind.dat"
    # shellcheck disable=SC2086
    printf "%8s %12s %12s %8s %12s %10s %10s %12s %12s\n" "$label" $vals | tee -a "$T/$kind.rows"
}

header() {
    printf "%8s %12s %12s %8s %12s %10s %10s %12s %12s\n" N "RSS B/conn" "open µs/conn" "idle %" "idle ns/s/c" \
        "rr p50 µs" "rr cpu µs" "churn µs" "close µs/c"
}

flat() { # kind: ratio of the last row to the first, per column
    f=$T/$1.dat
    [ -s "$f" ] || return
    awk 'NR == 1 { for (i = 2; i <= NF; i++) a[i] = $i; n0 = $1 }
         { for (i = 2; i <= NF; i++) z[i] = $i; n1 = $1; nf = NF }
         END {
           printf "%8s", "ratio";
           for (i = 2; i <= nf; i++) { w = (i == 4 ? 8 : (i == 6 || i == 7 ? 10 : 12));
                                       if (i == 4 || i == 5) printf " %*s", w, "-";
                                       else if (a[i] + 0 > 0) printf " %*.2f", w, z[i] / a[i];
                                       else printf " %*s", w, "-" }
           printf "   (N=%s / N=%s; 1.00 = flat)\n", n1, n0 }' "$f"
}

if want scale-gw; then
    echo
    echo "gateway: N idle bound consumer connections (TCP, bridged to an external upstream), one active client"
    header
    for n in $NS; do row gw "$n"; done
    flat gw
    grep -q '\*' "$T/gw.rows" 2>/dev/null &&
        echo "  * capped by RLIMIT_NOFILE (hard $HARD here, and prlimit may not raise it; 2 descriptors per bridged client in tracegated)"
fi
if want scale-producers; then
    echo
    echo "service: N producers (UNIX, ${SMB_KB} KiB producer-provided SMB each, 1 data source), one active consumer"
    header
    for n in $NS; do row producers "$n"; done
    flat producers
fi
echo
echo "columns: RSS B/conn = tracegated VmRSS growth / N (an SMB page counts once the service touches it);"
echo "  open/close = tracegated CPU per connection opened (accept, bind, upstream; producers: + initialize, SMB"
echo "  mapping, register) and closed; idle = tracegated CPU per connection per second with all N idle, over
  its idle CPU with none (idle % = tracegated's whole idle CPU with N, in % of one CPU; per-connection
  timers or periodic walks show as a constant per connection here: no ratio, as 10 connections are noise);"
echo "  rr = the active client's QueryCapabilities round trip (p50) and tracegated CPU per call;"
echo "  churn = tracegated CPU for one more connection opened and closed with the N held"
exit 0
