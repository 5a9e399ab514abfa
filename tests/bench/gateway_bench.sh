#!/bin/sh
# gateway_bench.sh: tracegated next to the generic bridges a user would pick instead, in one run:
# a stream of 64 KiB IPC frames (MB/s), the other direction (calls carrying 130,000 bytes each:
# upload MB/s) and small request/reply calls (p50/p99 latency) through
#   direct UNIX (no proxy) | tracegated TCP, TLS, WS | socat TCP (default and -b 262144) |
#   stunnel4 TLS | websockify WS
# all in front of the same bench_gw server's UNIX socket; then 10,000 idle bound consumer
# connections to tracegated's TCP listener (its RSS). Prints tables and the ratios against the
# targets. Run by `make bench` (see docs/benchmarks.md). Loopback only; every process it starts is
# killed on exit; every client run is bounded by `timeout`.
#
# Environment: TG_BUILDDIR (build dir, default .), TG_SRCDIR (source dir),
#   BENCH_SECONDS  measured window per stream run (default 1)
#   BENCH_REPS     runs per cell, best kept (default 3)
#   BENCH_RR       calls per latency run (default 3000)
#   BENCH_IDLE_CONNS  idle connections (default 10000; 0 skips)
#   BENCH_UPLOAD=0 skip the upload rows
#   BENCH_CPU_ENDPOINTS / BENCH_CPU_PROXY  CPUs to pin to (default 0 and 1); BENCH_PIN=0: no pinning
#   BENCH_ONLY     row keys to run (space-separated): tg-tcp tg-tls tg-ws socat socat-b stunnel
#                  websockify idle (direct always runs: it is the baseline)
#   BENCH_FULL_CLIENT=1  also measure with tracectl's own client (direct, TCP and WS; shows why the lean client is used)
#   BENCH_WHATIF=0  skip the twin rows (a second tracegated measured interleaved with the first)
#   BENCH_WHATIF_ENV / BENCH_WHATIF_ARGS / BENCH_WHATIF_LABEL  an environment, extra options (and row
#                  label) for that second tracegated, e.g. 'GLIBC_TUNABLES=...' or '--ws-data-path lws' /
#                  'lws', to measure a what-if; by default it runs with the same settings (an A/A twin:
#                  its spread from the first is the run's noise)
#   BENCH_GW_ENV   extra environment for tracegated (experiments), e.g. 'GLIBC_TUNABLES=...'
#   BENCH_TRACEGATED  another tracegated binary (e.g. one installed from main, to compare builds)
# Rows marked e: client + server used >= 90% of their shared CPU (they may bound the row); the
# per-proxy-CPU ratios printed after the targets show the proxies' own cost.
set -u

B=${TG_BUILDDIR:-$(pwd)}
S=${TG_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
BG=$B/tests/bench/bench_gw
GWD=${BENCH_TRACEGATED:-$B/gateway/tracegated}
SECS=${BENCH_SECONDS:-1}
REPS=${BENCH_REPS:-3}
RR=${BENCH_RR:-3000}
IDLE=${BENCH_IDLE_CONNS:-10000}
ONLY=${BENCH_ONLY:-}
WHATIF_ENV=${BENCH_WHATIF_ENV:-}
WHATIF_LABEL=${BENCH_WHATIF_LABEL:-twin}

for bin in "$BG" "$GWD"; do
    if [ ! -x "$bin" ]; then
        echo "gateway_bench: $bin is not built (run 'make bench')"
        exit 1
    fi
done

CPU_EP=${BENCH_CPU_ENDPOINTS:-0}
CPU_PX=${BENCH_CPU_PROXY:-1}
EP=""
PX=""
if [ "${BENCH_PIN:-1}" = 1 ] && command -v taskset >/dev/null 2>&1 && [ "$(nproc)" -ge 2 ]; then
    EP="taskset -c $CPU_EP"
    PX="taskset -c $CPU_PX"
fi

. "$S/tests/bench/script_lib.sh"
bench_init gwbench



ready() { # url [pid]: waits (5 s at most) until one QueryCapabilities call goes through
    i=0
    while [ $i -lt 50 ]; do
        if timeout 5 "$BG" client "$1" --cacert "$T/pki/ca.crt" --rr 1 >/dev/null 2>&1; then return 0; fi
        if [ -n "${2:-}" ] && ! kill -0 "$2" 2>/dev/null; then return 1; fi
        sleep 0.1
        i=$((i + 1))
    done
    return 1
}

field() { # key line
    echo "$2" | tr ' ' '\n' | sed -n "s/^$1=//p" | head -n 1
}

# ---------------------------------------------------------------- setup
echo "gateway_bench: $(nproc) CPUs; endpoints pinned with '${EP:-none}', proxies with '${PX:-none}';" \
    "best of ${REPS} runs per cell, ${SECS} s stream windows, ${RR} calls per latency run"
echo "gateway_bench: load average $(cut -d' ' -f1-3 /proc/loadavg) (other work on the machine slows runs down:" \
    "see the 'others' column)"
bash "$S/certs/make-dev-pki.sh" "$T/pki" >/dev/null 2>&1 || {
    echo "gateway_bench: cannot create the dev PKI"
    exit 1
}

SOCK=$T/server.sock
start server $EP "$BG" server "$SOCK" # it raises its own RLIMIT_NOFILE soft limit to the hard one
SPID=$LASTPID
ready "unix:$SOCK" "$SPID" || {
    echo "gateway_bench: bench_gw server did not start"
    cat "$T/server.log"
    exit 1
}

ROWS=""
add_row() { # key label url proxy_pid
    ROWS="$ROWS $1"
    eval "LABEL_$1=\"\$2\" URL_$1=\"\$3\" PPID_$1=\$4"
}

GPID=""
start_tracegated() { # log-name extra-env [extra options]: sets GPID, P_TCP, P_TLS, P_WS (GPID empty on failure)
    free_port
    P_TCP=$PORT
    free_port
    P_TLS=$PORT
    free_port
    P_WS=$PORT
    # shellcheck disable=SC2086
    start "$1" env ${BENCH_GW_ENV:-} $2 $PX "$GWD" --upstream-consumer "$SOCK" \
        --listen "consumer=tcp://127.0.0.1:$P_TCP" --listen "consumer=tls://127.0.0.1:$P_TLS" \
        --tls-cert "$T/pki/server.crt" --tls-key "$T/pki/server.key" --http "127.0.0.1:$P_WS" \
        --producer-socket "$T/$1-p.sock" --consumer-socket "$T/$1-c.sock" --log-level warn ${3:-}
    GPID=$LASTPID
    if ! ready "tcp://127.0.0.1:$P_TCP" "$GPID"; then
        echo "gateway_bench: tracegated did not start:"
        tail -n 20 "$T/$1.log"
        stop "$GPID"
        GPID=""
    fi
}

add_row direct "direct UNIX (no proxy)" "unix:$SOCK" ""
WROWS=""
WPID=""
if want tg-tcp || want tg-tls || want tg-ws; then
    start_tracegated tracegated ""
    if [ -n "$GPID" ]; then
        want tg-tcp && add_row tg_tcp "tracegated TCP" "tcp://127.0.0.1:$P_TCP" "$GPID"
        want tg-tls && add_row tg_tls "tracegated TLS" "tls://127.0.0.1:$P_TLS" "$GPID"
        want tg-ws && add_row tg_ws "tracegated WS" "ws://127.0.0.1:$P_WS/traced" "$GPID"
    fi
    # a second tracegated (the same settings unless BENCH_WHATIF_ENV says otherwise), measured
    # interleaved with the rows above (stream only)
    MAIN_GPID=$GPID
    if [ "${BENCH_WHATIF:-1}" = 1 ] && [ -n "$MAIN_GPID" ]; then
        start_tracegated tracegated-whatif "$WHATIF_ENV" "${BENCH_WHATIF_ARGS:-}"
        WPID=$GPID
        if [ -n "$GPID" ]; then
            for x in "tg-tcp tg_tcp tcp://127.0.0.1:$P_TCP TCP" "tg-tls tg_tls tls://127.0.0.1:$P_TLS TLS" \
                "tg-ws tg_ws ws://127.0.0.1:$P_WS/traced WS"; do
                # shellcheck disable=SC2086
                set -- $x
                want "$1" || continue
                WROWS="$WROWS ${2}_w"
                eval "LABEL_${2}_w=\"tracegated $4, \$WHATIF_LABEL\" URL_${2}_w=\$3 PPID_${2}_w=\$GPID"
            done
        fi
    fi
    GPID=$MAIN_GPID
fi
if has socat; then
    if want socat; then
        free_port
        start socat $PX socat "TCP-LISTEN:$PORT,bind=127.0.0.1,reuseaddr,fork" "UNIX-CONNECT:$SOCK"
        ready "tcp://127.0.0.1:$PORT" "$LASTPID" &&
            add_row socat "socat TCP (default -b 8192)" "tcp://127.0.0.1:$PORT" "$LASTPID"
    fi
    if want socat-b; then
        free_port
        start socat-b $PX socat -b 262144 "TCP-LISTEN:$PORT,bind=127.0.0.1,reuseaddr,fork" "UNIX-CONNECT:$SOCK"
        ready "tcp://127.0.0.1:$PORT" "$LASTPID" &&
            add_row socat_b "socat TCP -b 262144" "tcp://127.0.0.1:$PORT" "$LASTPID"
    fi
else
    echo "gateway_bench: socat is not installed: its rows are skipped"
fi
if want stunnel && start_stunnel gateway_bench "$SOCK"; then
    ready "tls://127.0.0.1:$PORT" "$LASTPID" && add_row stunnel "stunnel4 TLS" "tls://127.0.0.1:$PORT" "$LASTPID"
fi
if want websockify; then
    if has websockify; then
        free_port
        start websockify $PX websockify "127.0.0.1:$PORT" "--unix-target=$SOCK"
        ready "ws://127.0.0.1:$PORT/" "$LASTPID" && add_row websockify "websockify WS" "ws://127.0.0.1:$PORT/" "$LASTPID"
    else
        echo "gateway_bench: websockify is not installed: its row is skipped"
    fi
fi

# ---------------------------------------------------------------- measurements
# Every cell is run REPS times, the repetitions interleaved across the rows (row A, B, C, ... then
# again), so a burst of other work on the machine hits one repetition of several rows rather than
# every repetition of one row. A stream cell keeps the best MB/s (other work only ever slows a
# run), preferring runs that other processes did not disturb; a latency cell keeps the run with the best p50 (and that run's p99). Latency is measured
# twice: client, proxy and server on ONE CPU (the proxy's: what the proxy's own work adds), and
# across CPUs (client and server on the endpoint CPU, the proxy on its own: adds 4 cross-CPU
# wake-ups per call, which on this VM cost ~25 us each and vary a lot).
stream_once() { # key url proxy_pid extra...: keeps the best line in STREAM_key
    key=$1
    url=$2
    ppid=$3
    shift 3
    w="--watch server=$SPID"
    [ -n "$ppid" ] && w="$w --watch proxy=$ppid"
    # shellcheck disable=SC2086
    line=$(timeout 60 $EP "$BG" client "$url" --cacert "$T/pki/ca.crt" --seconds "$SECS" $w "$@" 2>>"$T/client.log")
    v=$(field mb_per_s "$line")
    [ -n "$v" ] || return 0
    eval "old=\${STREAM_$key:-}"
    o=$(field mb_per_s "$old")
    # an undisturbed run (others < 15% of a CPU) beats a disturbed one; then the higher MB/s wins
    dn=$(field cpu_others "$line")
    dold=$(field cpu_others "$old")
    if [ -z "$o" ] || awk "BEGIN{n=(${dn:-0}<15); o=(${dold:-0}<15); exit !(n>o || (n==o && $v > $o))}"; then
        eval "STREAM_$key=\"\$line\""
    fi
}

rr_once() { # var url cpu-prefix extra...: keeps the line with the best p50 in var
    var=$1
    url=$2
    pre=$3
    shift 3
    # shellcheck disable=SC2086
    line=$(timeout 60 $pre "$BG" client "$url" --cacert "$T/pki/ca.crt" --rr "$RR" "$@" 2>>"$T/client.log")
    v=$(field p50_us "$line")
    eval "old=\${$var:-}"
    o=$(field p50_us "$old")
    if [ -n "$v" ] && { [ -z "$o" ] || awk "BEGIN{exit !($v < $o)}"; }; then
        eval "$var=\"\$line\""
    fi
}

ROWS_FULL=""
if [ "${BENCH_FULL_CLIENT:-0}" = 1 ]; then
    for k in direct tg_tcp tg_ws; do
        eval "url=\${URL_$k:-} ppid=\${PPID_$k:-} lab=\${LABEL_$k:-}"
        [ -n "$url" ] || continue
        ROWS_FULL="$ROWS_FULL ${k}_full"
        eval "LABEL_${k}_full=\"\$lab, tracectl client\" URL_${k}_full=\"\$url\" PPID_${k}_full=\"\$ppid\""
    done
fi
extra_of() { case $1 in *_full) echo --full ;; esac; }

r=0
while [ $r -lt "$REPS" ]; do
    r=$((r + 1))
    for k in $ROWS $ROWS_FULL $WROWS; do
        eval "url=\$URL_$k ppid=\$PPID_$k"
        # shellcheck disable=SC2046
        stream_once "$k" "$url" "$ppid" $(extra_of "$k")
    done
done
# The other direction (client -> proxy -> server): QueryCapabilities calls carrying UP_SIZE bytes
# of arguments, 16 in flight (bench_gw --upload). No target; BENCH_UPLOAD=0 skips it.
UP_SIZE=130000
if [ "${BENCH_UPLOAD:-1}" = 1 ]; then
    r=0
    while [ $r -lt "$REPS" ]; do
        r=$((r + 1))
        for k in $ROWS; do
            eval "url=\$URL_$k ppid=\$PPID_$k"
            stream_once "up_$k" "$url" "$ppid" --upload "$UP_SIZE"
        done
    done
fi
r=0
while [ $r -lt "$REPS" ]; do
    r=$((r + 1))
    for k in $ROWS $ROWS_FULL; do
        eval "url=\$URL_$k"
        # shellcheck disable=SC2046
        rr_once "RR2_$k" "$url" "$EP" $(extra_of "$k")
    done
    if [ -n "$PX" ]; then
        taskset -pc "$CPU_PX" "$SPID" >/dev/null
        for k in $ROWS $ROWS_FULL; do
            eval "url=\$URL_$k"
            # shellcheck disable=SC2046
            rr_once "RR1_$k" "$url" "$PX" $(extra_of "$k")
        done
        taskset -pc "$CPU_EP" "$SPID" >/dev/null
    fi
done
if [ -z "$PX" ]; then
    for k in $ROWS $ROWS_FULL; do eval "RR1_$k=\${RR2_$k:-}"; done
fi

# ---------------------------------------------------------------- tables
plus() { # value base
    if [ -n "$1" ] && [ -n "$2" ]; then awk "BEGIN{printf \"%+.1f\", $1-$2}"; fi
}
ratio() { # a b
    if [ -n "$1" ] && [ -n "$2" ]; then awk "BEGIN{printf \"%.2f\", $1/$2}"; fi
}
DISTURBED=0
ENDPOINT_BOUND=0
stream_row() { # key
    eval "lab=\$LABEL_$1 st=\${STREAM_$1:-}"
    mb=$(field mb_per_s "$st")
    oth=$(field cpu_others "$st")
    mark=""
    if [ -n "$oth" ] && [ "$oth" -ge 15 ]; then
        mark=" *"
        DISTURBED=1
    fi
    # the endpoints share one CPU: at 90% or more of it, they (not the proxy) may bound the row
    cl=$(field cpu_client "$st")
    sv=$(field cpu_server "$st")
    if [ -n "$cl" ] && [ -n "$sv" ] && [ $((cl + sv)) -ge 90 ] && [ "${1#up_}" != direct ]; then
        mark="$mark e"
        ENDPOINT_BOUND=1
    fi
    pcpu=$(field cpu_proxy "$st")
    printf '%-34s %8s %8s | %6s %6s %6s %6s%s\n' "$lab" "${mb:--}" "$(field frames_per_s "$st")" \
        "$pcpu" "$cl" "$sv" "$oth" "$mark"
    eval "MB_$1=\${mb:-} PCPU_$1=\${pcpu:-}"
}
eval "base1=\$(field p50_us \"\${RR1_direct:-}\") base2=\$(field p50_us \"\${RR2_direct:-}\")"

echo
echo "stream of 64 KiB frames (MB/s of IPC bytes; CPU% = share of one CPU during the window):"
printf '%-34s %8s %8s | %6s %6s %6s %6s\n' "path" "MB/s" "frames/s" "proxy" "client" "server" "others"
printf '%s\n' "------------------------------------------------------------------------------------"
for k in $ROWS $ROWS_FULL; do stream_row "$k"; done
[ $DISTURBED = 1 ] && echo "* other processes used >= 15% of a CPU during this cell's best run: its number is low and its ratios unreliable"
[ $ENDPOINT_BOUND = 1 ] && echo "e client + server used >= 90% of their shared CPU: the endpoints, not only the proxy, may bound this row (compare per proxy CPU below)"
cipher=$(field cipher "${STREAM_tg_tls:-}")
[ -n "$cipher" ] && echo "(TLS: tracegated negotiated $cipher, stunnel4 $(field cipher "${STREAM_stunnel:-}"))"
if [ "${BENCH_UPLOAD:-1}" = 1 ]; then
    echo
    echo "upload: calls carrying $UP_SIZE bytes each, 16 in flight (MB/s of IPC bytes sent; no target;"
    echo "tracegated's --rate, 10,000 messages a second per client by default, would cap this at $((UP_SIZE / 100)) MB/s):"
    printf '%-34s %8s %8s | %6s %6s %6s %6s\n' "path" "MB/s" "frames/s" "proxy" "client" "server" "others"
    printf '%s\n' "------------------------------------------------------------------------------------"
    DISTURBED=0
    ENDPOINT_BOUND=0
    for k in $ROWS; do
        eval "LABEL_up_$k=\$LABEL_$k"
        stream_row "up_$k"
    done
    [ $DISTURBED = 1 ] && echo "* other processes used >= 15% of a CPU during this cell's best run"
    [ $ENDPOINT_BOUND = 1 ] && echo "e client + server used >= 90% of their shared CPU"
    up_tcp=$(ratio "${MB_up_tg_tcp:-}" "${MB_up_socat_b:-}")
    up_tls=$(ratio "${MB_up_tg_tls:-}" "${MB_up_stunnel:-}")
    up_ws=$(ratio "${MB_up_tg_ws:-}" "${MB_up_websockify:-}")
    echo "  upload ratios (no target): TCP / socat -b 262144 ${up_tcp:-n/a}, TLS / stunnel4 ${up_tls:-n/a}," \
        "WS / websockify ${up_ws:-n/a}"
    DISTURBED=0
    ENDPOINT_BOUND=0
fi
echo
echo "QueryCapabilities round trip, $RR calls (us; +p50 = added to direct UNIX):"
printf '%-34s | %8s %8s %8s | %8s %8s %8s\n' "" "one CPU" "" "" "across" "CPUs" ""
printf '%-34s | %8s %8s %8s | %8s %8s %8s\n' "path" "p50" "p99" "+p50" "p50" "p99" "+p50"
printf '%s\n' "------------------------------------------------------------------------------------------"
for k in $ROWS $ROWS_FULL; do
    eval "lab=\$LABEL_$k r1=\${RR1_$k:-} r2=\${RR2_$k:-}"
    a1=$(field p50_us "$r1")
    a2=$(field p50_us "$r2")
    printf '%-34s | %8s %8s %8s | %8s %8s %8s\n' "$lab" "${a1:--}" "$(field p99_us "$r1")" "$(plus "$a1" "$base1")" \
        "${a2:--}" "$(field p99_us "$r2")" "$(plus "$a2" "$base2")"
    eval "ADD1_$k=\$(plus \"\$a1\" \"\$base1\") ADD2_$k=\$(plus \"\$a2\" \"\$base2\")"
done

# ---------------------------------------------------------------- targets
verdict() { # label value op target
    if [ -z "$2" ]; then
        printf '  %-64s %8s   %s\n' "$1" "n/a" "(not measured)"
    elif awk "BEGIN{exit !($2 $3 $4)}"; then
        printf '  %-64s %8s   met (target %s %s)\n' "$1" "$2" "$3" "$4"
    else
        printf '  %-64s %8s   MISSED (target %s %s)\n' "$1" "$2" "$3" "$4"
    fi
}
# The data-path targets (docs/benchmarks.md, "Targets"): each tracegated path against the bridge a
# user would pick instead for it, and against direct UNIX with the same client and server.
throughput_targets() { # suffix of the tracegated keys ("" or _w)
    eval "tcp=\${MB_tg_tcp$1:-} tls=\${MB_tg_tls$1:-} ws=\${MB_tg_ws$1:-}"
    verdict "tracegated TCP / socat -b 262144" "$(ratio "$tcp" "${MB_socat_b:-}")" ">=" 1.3
    verdict "tracegated TLS / stunnel4" "$(ratio "$tls" "${MB_stunnel:-}")" ">=" 1.3
    verdict "tracegated WS / websockify" "$(ratio "$ws" "${MB_websockify:-}")" ">=" 1.3
    verdict "tracegated TCP / direct UNIX" "$(ratio "$tcp" "${MB_direct:-}")" ">=" 0.4
    verdict "tracegated TLS / direct UNIX" "$(ratio "$tls" "${MB_direct:-}")" ">=" 0.4
    verdict "tracegated WS / direct UNIX" "$(ratio "$ws" "${MB_direct:-}")" ">=" 0.4
    # no target: MB/s per proxy CPU-second, what each proxy would carry with a CPU to itself (shows
    # the proxies' own cost where the endpoints' shared CPU bounds a row)
    echo "  (per proxy CPU, no target: TCP $(per_cpu_ratio "tg_tcp$1" socat_b), TLS $(per_cpu_ratio "tg_tls$1" stunnel)," \
        "WS $(per_cpu_ratio "tg_ws$1" websockify))"
}
per_cpu() { # key: MB/s per proxy CPU-second
    eval "m=\${MB_$1:-} c=\${PCPU_$1:-}"
    if [ -n "$m" ] && [ -n "$c" ] && [ "$c" -gt 0 ]; then awk "BEGIN{printf \"%.0f\", $m*100/$c}"; fi
}
per_cpu_ratio() { # key peer-key: "A / B = R" or n/a
    a=$(per_cpu "$1")
    b=$(per_cpu "$2")
    if [ -n "$a" ] && [ -n "$b" ]; then echo "$a / $b = $(ratio "$a" "$b")x"; else echo "n/a"; fi
}
echo
echo "targets (throughput ratios):"
throughput_targets ""
echo "targets (added p50 latency in us, no worse than the peer's: socat -b 262144, stunnel4, websockify):"
for cpus in 1 2; do
    where="one CPU"
    [ $cpus = 2 ] && where="across CPUs"
    for pair in "tg_tcp socat_b" "tg_tls stunnel" "tg_ws websockify"; do
        set -- $pair
        eval "lab=\${LABEL_$1:-$1} a=\${ADD${cpus}_$1:-} plab=\${LABEL_$2:-$2} pa=\${ADD${cpus}_$2:-}"
        [ -n "$pa" ] || continue
        verdict "$lab, $where ($plab: $pa)" "${a#+}" "<=" "${pa#+}"
    done
done

# ---------------------------------------------------------------- twin (A/A) or what-if rows
if [ -n "$WROWS" ]; then
    echo
    if [ -n "$WHATIF_ENV" ]; then
        echo "what-if: tracegated with $WHATIF_ENV (measured interleaved with the rows above):"
    else
        echo "twin: a second tracegated with the same settings, measured interleaved with the rows above;"
        echo "how far each twin row is from its row above is this run's noise (A/A):"
    fi
    DISTURBED=0
    for k in $WROWS; do stream_row "$k"; done
    [ $DISTURBED = 1 ] && echo "* disturbed by other processes (see above)"
    if [ -z "$WHATIF_ENV" ]; then
        spread=""
        for k in tg_tcp:TCP tg_tls:TLS tg_ws:WS; do
            eval "a=\${MB_${k%%:*}:-} b=\${MB_${k%%:*}_w:-}"
            [ -n "$a" ] && [ -n "$b" ] &&
                spread="$spread ${k#*:} $(awk "BEGIN{d=$a-$b; if (d<0) d=-d; m=($a>$b)?$a:$b; printf \"%.0f%%\", 100*d/m}")"
        done
        [ -n "$spread" ] && echo "  A/A spread (|row - twin| / the larger):$spread"
    fi
    throughput_targets _w
fi

# ---------------------------------------------------------------- idle connections
if [ "$IDLE" -gt 0 ] && want idle; then
    [ -n "$GPID" ] && stop "$GPID"
    [ -n "$WPID" ] && stop "$WPID"
    free_port
    P_IDLE=$PORT
    # Each bridged client holds 2 descriptors in tracegated (client + upstream), so the hard
    # RLIMIT_NOFILE bounds the count; tracegated starts with a low soft limit and must raise it.
    HARD=$(ulimit -Hn)
    [ "$HARD" = unlimited ] && HARD=1048576
    N=$IDLE
    echo
    if [ $((2 * N + 64)) -gt "$HARD" ]; then
        N=$(((HARD - 64) / 2))
        echo "idle connections: the RLIMIT_NOFILE hard limit is $HARD here (raising it needs CAP_SYS_RESOURCE);" \
            "$IDLE bridged clients need $((2 * IDLE + 64)) descriptors in tracegated: measuring $N, scaling to $IDLE"
    fi
    # shellcheck disable=SC2086
    start tracegated-idle prlimit --nofile=1024:"$HARD" env ${BENCH_GW_ENV:-} $PX "$GWD" --upstream-consumer "$SOCK" \
        --listen "consumer=tcp://127.0.0.1:$P_IDLE" --no-http --max-connections $((IDLE + 100)) \
        --producer-socket "$T/gwi-p.sock" --consumer-socket "$T/gwi-c.sock" --log-level warn
    IPID=$LASTPID
    if ready "tcp://127.0.0.1:$P_IDLE" "$IPID"; then
        soft=$(awk '/^Max open files/{print $4}' "/proc/$IPID/limits")
        ok="NOT enough for $N clients"
        [ "$soft" -ge $((2 * N + 64)) ] 2>/dev/null && ok="raised, enough for $N clients"
        echo "idle connections: tracegated started with RLIMIT_NOFILE soft 1024 (hard $HARD); now $soft ($ok)"
        line=$(timeout 300 "$BG" idle "tcp://127.0.0.1:$P_IDLE" --conns "$N" --pid "$IPID" --hold 1 2>"$T/idle.log")
        echo "  $line"
        bound=$(field bound "$line")
        rss=$(field rss_after_kb "$line")
        rss0=$(field rss_before_kb "$line")
        if [ -n "$rss" ] && [ "${bound:-0}" -gt 0 ]; then
            at=$(awk "BEGIN{printf \"%.1f\", ($rss0 + ($rss - $rss0) * $IDLE / $bound)/1024}")
            echo "  tracegated RSS $(awk "BEGIN{printf \"%.1f\", $rss0/1024}") MB -> $(awk "BEGIN{printf \"%.1f\", $rss/1024}") MB" \
                "with $bound bound consumer connections ($(field per_conn_bytes "$line") bytes each, upstream side included)"
            if [ "$bound" != "$N" ]; then
                echo "  only $bound of $N were bound; first errors:"
                head -n 3 "$T/idle.log"
                grep -m 3 -i "cannot\|error" "$T/tracegated-idle.log"
            fi
            verdict "tracegated RSS (MB) with $IDLE idle connections" "$at" "<" 200
        else
            echo "  the idle test failed:"
            head -n 5 "$T/idle.log"
            tail -n 5 "$T/tracegated-idle.log"
        fi
        stop "$IPID"
    else
        echo "idle connections: tracegated did not start"
        tail -n 10 "$T/tracegated-idle.log"
    fi
fi
exit 0
