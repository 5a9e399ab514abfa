#!/bin/sh
# record_bench.sh: the gateway's data path measured out-of-band, as a user sees it: the REAL client
# (`tracectl clone`: CloneSession, then ReadBuffers into a .pftrace) reads a full trace buffer of
# the REAL tracing service (tracegated's embedded one) through each path, best of BENCH_REPS,
# interleaved. gateway_bench.sh measures the same paths with its own lean client and server
# (bench_gw); this script shares neither. Run by `make bench` (see docs/benchmarks.md).
#
# Layout (loopback only; every process it starts is killed on exit; every client run is bounded
# by `timeout`):
#
#   bench_fill --SMB--> tracegated #1 (embedded service; consumer socket c.sock)    CPU 0
#                          ^   ^ in-process listeners tcp/tls/ws (rows "in the service's process")
#                          |
#      c.sock (UNIX) <-----+---- tracegated #2 (pure proxy: --upstream-consumer c.sock) CPU 1
#                          +---- socat -b 262144 TCP-LISTEN -> UNIX-CONNECT c.sock      CPU 1
#                          +---- stunnel4 (TLS -> c.sock)                               CPU 1
#                          +---- websockify (WS -> c.sock)                              CPU 1
#   tracectl clone (one run at a time, through one path)                               CPU 0
#
# Every proxy is a separate process in front of the same service, as in gateway_bench.sh (client
# and service on one CPU, the proxy on the other). The rows "in the service's process" use
# tracegated #1's own listeners: gateway, service and client then share CPU 0 (the one-process
# deployment; no proxy CPU column, its work is in the service's).
#
# The buffer: bench_fill (a producer built on the C producer library) writes 1 KiB packets into a
# session "recbench" with one BENCH_BUFFER_MB ring buffer, started by `tracectl record` on the
# consumer socket; the script waits until record's progress line (GetTraceStats, once a second)
# says the buffer wrapped, stops bench_fill and waits until the service lists no producer. The
# buffer then stays as it is: every clone reads the same bytes. A reference clone (direct UNIX)
# gives the packet count every read-out must reach; a run that read fewer packets or failed is
# counted as short and never kept as a best.
#
# What is timed: the read-out alone, from tracectl's "cloned session" line (CloneSession answered;
# the service copied the buffer) to its "wrote N packets" line (last ReadBuffers reply written to
# the file); the lines are time-stamped as they arrive on tracectl's stderr. "total" is the whole
# command (start, connect, handshake, CloneSession, read-out, exit). CPU columns are % of one CPU
# from the "cloned session" line to tracectl's exit, from /proc/PID/stat (10 ms ticks; a process
# with its children, reaped or not): proxy (its tree), svc (tracegated #1), clnt (timeout and
# tracectl, taken by the launcher once tracectl exited), oth (/proc/stat
# busy time of every CPU minus those three: other work on the machine; >= 15% marks the row *).
#
# websockify 0.10 answers a client offering only the "tracegate" subprotocol (which tracectl
# offers and requires) with "Invalid protocol selected". The script runs the installed websockify
# with its subprotocol choice extended to echo "tracegate" (handshake only; its data path is
# unchanged), with the Python interpreter of its own launcher; the row is skipped when that fails.
#
# Environment: TG_BUILDDIR (build dir, default .), TG_SRCDIR (source dir),
#   BENCH_REPS       runs per row, best kept (default 3)
#   BENCH_BUFFER_MB  the session's buffer (default 64)
#   BENCH_ONLY       row keys to run (space-separated): tg-tcp tg-tls tg-ws in-tcp in-tls in-ws
#                    socat-b stunnel websockify (direct always runs: it is the baseline)
#   BENCH_PIN=0      no pinning; BENCH_CPU_ENDPOINTS / BENCH_CPU_PROXY: the CPUs (default 0 and 1)
#   BENCH_TRACEGATED another tracegated binary (e.g. one built from main, to compare builds)
#   KEEP_TMP=1       keep the temporary directory (logs, the last trace of each row)
#
# shellcheck disable=SC2086 # $EP/$PX/$ST are command prefixes, split on purpose
# shellcheck disable=SC2154 # the per-row variables are assigned with eval
set -u

B=${TG_BUILDDIR:-$(pwd)}
S=${TG_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
TC=$B/src/tracectl/tracectl
FILL=$B/tests/bench/bench_fill
GWD=${BENCH_TRACEGATED:-$B/gateway/tracegated}
REPS=${BENCH_REPS:-3}
MBUF=${BENCH_BUFFER_MB:-64}
# shellcheck disable=SC2034 # read by want() in script_lib.sh
ONLY=${BENCH_ONLY:-}
SESSION=recbench
DS=tracegate.bench.fill

for bin in "$TC" "$FILL" "$GWD"; do
    if [ ! -x "$bin" ]; then
        echo "record_bench: $bin is not built (run 'make bench')"
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
HZ=$(getconf CLK_TCK 2>/dev/null || echo 100)
CLIENT_TIMEOUT=$((60 + MBUF / 4)) # seconds; a read-out runs at well over 4 MB/s

# shellcheck source=tests/bench/script_lib.sh
. "$S/tests/bench/script_lib.sh"
bench_init recbench


tc() { # tracectl, bounded: URL-independent options first
    timeout 30 "$TC" --cacert "$T/pki/ca.crt" "$@"
}

ready() { # url [pid]: waits (10 s at most) until `tracectl query` goes through url
    i=0
    while [ $i -lt 100 ]; do
        if tc query "$1" >/dev/null 2>&1; then return 0; fi
        if [ -n "${2:-}" ] && ! kill -0 "$2" 2>/dev/null; then return 1; fi
        sleep 0.1
        i=$((i + 1))
    done
    return 1
}

wait_line() { # file text pid seconds: until file has a line containing text (0), pid died or timeout (1)
    i=0
    while [ $i -lt $(($4 * 10)) ]; do
        grep -q -F -- "$2" "$1" 2>/dev/null && return 0
        kill -0 "$3" 2>/dev/null || return 1
        sleep 0.1
        i=$((i + 1))
    done
    return 1
}

# ---------------------------------------------------------------- CPU accounting (no forks)
# A process's CPU is utime+stime+cutime+cstime: what it used and what its reaped children used.
# A child that exited but is not reaped yet (a zombie) still shows its own times, so the sum over a
# process and its listed children does not jump when a connection's forked child (socat,
# websockify) exits or is reaped.
proc_ticks() { # PID: adds its CPU ticks to TICKS
    st=""
    { read -r st </proc/"$1"/stat; } 2>/dev/null || return 0
    stat_ticks "${st##*) }"
}
stat_ticks() { # "STATE PPID ...": /proc/PID/stat from field 3 on; adds fields 14-17 to TICKS
    set -- $1
    shift 11
    TICKS=$((TICKS + $1 + $2 + $3 + $4))
}
tree_ticks() { # PID...: TICKS = CPU ticks of each PID, its children and their children
    TICKS=0
    for tp in "$@"; do
        [ -n "$tp" ] || continue
        proc_ticks "$tp"
        kids1=""
        { read -r kids1 </proc/"$tp"/task/"$tp"/children; } 2>/dev/null
        for k1 in $kids1; do
            proc_ticks "$k1"
            kids2=""
            { read -r kids2 </proc/"$k1"/task/"$k1"/children; } 2>/dev/null
            for k2 in $kids2; do proc_ticks "$k2"; done
        done
    done
}
busy_ticks() { # BUSY = busy time of all CPUs (/proc/stat: user nice system irq softirq steal)
    { read -r _c u n s _i _w q sq stl _rest </proc/stat; } 2>/dev/null
    BUSY=$((u + n + s + q + sq + stl))
}

# ---------------------------------------------------------------- setup
echo "record_bench: $(nproc) CPUs; tracectl and the service pinned with '${EP:-none}', proxies with '${PX:-none}';" \
    "best of $REPS read-outs of a ${MBUF} MiB buffer per row"
echo "record_bench: load average $(cut -d' ' -f1-3 /proc/loadavg)"
bash "$S/certs/make-dev-pki.sh" "$T/pki" >/dev/null 2>&1 || {
    echo "record_bench: cannot create the dev PKI"
    exit 1
}

C=$T/c.sock
IN_ARGS="--no-http"
if want in-tcp || want in-tls || want in-ws; then
    free_port
    I_TCP=$PORT
    free_port
    I_TLS=$PORT
    free_port
    I_WS=$PORT
    IN_ARGS="--listen consumer=tcp://127.0.0.1:$I_TCP --listen consumer=tls://127.0.0.1:$I_TLS
        --tls-cert $T/pki/server.crt --tls-key $T/pki/server.key --http 127.0.0.1:$I_WS"
fi
start service $EP "$GWD" --producer-socket "$T/p.sock" --consumer-socket "$C" $IN_ARGS --log-level warn
SVC=$LASTPID
ready "unix:$C" "$SVC" || {
    echo "record_bench: tracegated (the service) did not start:"
    tail -n 20 "$T/service.log"
    exit 1
}

# fill the buffer: bench_fill first (its data source registered), then the session
cat >"$T/session.cfg" <<EOF
buffers { size_kb: $((MBUF * 1024)) fill_policy: RING_BUFFER }
data_sources { config { name: "$DS" } }
unique_session_name: "$SESSION"
EOF
start fill $PX "$FILL" "$T/p.sock" --ds "$DS"
FPID=$LASTPID
wait_line "$T/fill.log" "bench_fill: connected" "$FPID" 30 || {
    echo "record_bench: bench_fill did not connect:"
    tail -n 10 "$T/fill.log"
    exit 1
}
start record "$TC" record "unix:$C" -c "$T/session.cfg" -o "$T/record.pftrace"
RPID=$LASTPID
if ! wait_line "$T/record.log" "(wrapped)" "$RPID" $((60 + MBUF)); then
    echo "record_bench: the buffer did not fill (no '(wrapped)' progress line):"
    tail -n 5 "$T/record.log" "$T/fill.log"
    exit 1
fi
stop "$FPID"
echo "record_bench: buffer filled: $(grep -F '(wrapped)' "$T/record.log" | head -n 1 | sed 's/^tracectl: //');" \
    "$(grep 'bench_fill: wrote' "$T/fill.log")"
# the service must be done with the producer (its SMB scraped) before the buffer is the same for all
i=0
while tc query "unix:$C" 2>/dev/null | grep -q bench_fill; do
    i=$((i + 1))
    if [ $i -ge 100 ]; then
        echo "record_bench: the service still lists bench_fill 10 s after it exited"
        exit 1
    fi
    sleep 0.1
done

# ---------------------------------------------------------------- paths
ROWS=""
add_row() { # key label url proxy_pid
    ROWS="$ROWS $1"
    eval "LABEL_$1=\"\$2\" URL_$1=\"\$3\" PPID_$1=\$4"
}
add_row direct "direct UNIX (no proxy)" "unix:$C" ""
if want tg-tcp || want tg-tls || want tg-ws; then
    free_port
    P_TCP=$PORT
    free_port
    P_TLS=$PORT
    free_port
    P_WS=$PORT
    start proxy-tracegated $PX "$GWD" --upstream-consumer "$C" \
        --listen "consumer=tcp://127.0.0.1:$P_TCP" --listen "consumer=tls://127.0.0.1:$P_TLS" \
        --tls-cert "$T/pki/server.crt" --tls-key "$T/pki/server.key" --http "127.0.0.1:$P_WS" \
        --producer-socket "$T/gw2-p.sock" --consumer-socket "$T/gw2-c.sock" --log-level warn
    GPID=$LASTPID
    if ready "tcp://127.0.0.1:$P_TCP" "$GPID"; then
        want tg-tcp && add_row tg_tcp "tracegated TCP" "tcp://127.0.0.1:$P_TCP" "$GPID"
        want tg-tls && add_row tg_tls "tracegated TLS" "tls://127.0.0.1:$P_TLS" "$GPID"
        want tg-ws && add_row tg_ws "tracegated WS" "ws://127.0.0.1:$P_WS/traced" "$GPID"
    else
        echo "record_bench: the proxy tracegated did not start:"
        tail -n 20 "$T/proxy-tracegated.log"
    fi
fi
if [ "$IN_ARGS" != "--no-http" ]; then
    want in-tcp && add_row in_tcp "tracegated TCP, service's process" "tcp://127.0.0.1:$I_TCP" ""
    want in-tls && add_row in_tls "tracegated TLS, service's process" "tls://127.0.0.1:$I_TLS" ""
    want in-ws && add_row in_ws "tracegated WS, service's process" "ws://127.0.0.1:$I_WS/traced" ""
fi
if want socat-b; then
    if has socat; then
        free_port
        start socat-b $PX socat -b 262144 "TCP-LISTEN:$PORT,bind=127.0.0.1,reuseaddr,fork" "UNIX-CONNECT:$C"
        ready "tcp://127.0.0.1:$PORT" "$LASTPID" &&
            add_row socat_b "socat TCP -b 262144" "tcp://127.0.0.1:$PORT" "$LASTPID"
    else
        echo "record_bench: socat is not installed: its row is skipped"
    fi
fi
if want stunnel && start_stunnel record_bench "$C"; then
    ready "tls://127.0.0.1:$PORT" "$LASTPID" && add_row stunnel "stunnel4 TLS" "tls://127.0.0.1:$PORT" "$LASTPID"
fi
if want websockify; then
    WSPY=""
    has websockify && WSPY=$(sed -n '1s/^#! *//p' "$(command -v websockify)" | cut -d' ' -f1)
    if [ -n "$WSPY" ] && "$WSPY" -c 'import websockify.websockifyserver, websockify.websocketproxy' 2>/dev/null; then
        free_port
        # the installed websockify, its subprotocol choice extended to echo "tracegate" (see the header)
        start websockify $PX "$WSPY" -c '
import sys
from websockify import websockifyserver as wss
plain = wss.CompatibleWebSocket.select_subprotocol
def choose(self, protocols):
    return "tracegate" if "tracegate" in protocols else plain(self, protocols)
wss.CompatibleWebSocket.select_subprotocol = choose
from websockify.websocketproxy import websockify_init
sys.argv[0] = "websockify"
websockify_init()
' "127.0.0.1:$PORT" "--unix-target=$C"
        if ready "ws://127.0.0.1:$PORT/" "$LASTPID"; then
            add_row websockify "websockify WS" "ws://127.0.0.1:$PORT/" "$LASTPID"
        else
            echo "record_bench: websockify did not start or refused tracectl: its row is skipped"
            tail -n 5 "$T/websockify.log"
        fi
    else
        echo "record_bench: websockify (with an importable Python module) is not installed: its row is skipped"
    fi
fi

# ---------------------------------------------------------------- one read-out
# stamp PPID: reads the client's stderr and prints, for tracectl's "cloned session" line,
# "A ns proxy_ticks service_ticks client_ticks busy_ticks"; for its "wrote" line "B ns packets
# bytes"; for the launcher's own CPU line (after tracectl exited) "C client_ticks"; for the exit
# status "E ns rc proxy_ticks service_ticks busy_ticks". Other lines go to the client log. Only
# builtins run between a line and its numbers but `date` (once, before the counters are read).
stamp() {
    while IFS= read -r l; do
        case $l in
        "tracectl: cloned session"*)
            ns=$(date +%s%N)
            tree_ticks "$1"
            pt=$TICKS
            tree_ticks "$SVC"
            svt=$TICKS
            cp=""
            { read -r cp <"$T/client.pid"; } 2>/dev/null
            tree_ticks "$cp"
            ct=$TICKS
            busy_ticks
            echo "A $ns $pt $svt $ct $BUSY"
            ;;
        "tracectl: wrote "*)
            # tracectl: wrote 64023 packets (63.3 MiB = 66322810 bytes) to FILE
            ns=$(date +%s%N)
            pk=${l#tracectl: wrote }
            by=${l#*= }
            echo "B $ns ${pk%% *} ${by%% *}"
            ;;
        "launcher-cpu "*)
            TICKS=0
            stat_ticks "${l#launcher-cpu }"
            echo "C $TICKS"
            ;;
        "exit "*)
            ns=$(date +%s%N)
            tree_ticks "$1"
            pt=$TICKS
            tree_ticks "$SVC"
            busy_ticks
            echo "E $ns ${l#exit } $pt $TICKS $BUSY"
            ;;
        *) echo "$l" >>"$T/client.log" ;;
        esac
    done
}

field() { # TAG position text: the position-th word of the line starting with TAG
    echo "$3" | awk -v t="$1" -v p="$2" '$1 == t { print $p; exit }'
}

# clone_once key: one read-out through row key's path; updates BEST_key (the best complete run,
# undisturbed preferred) and RUNS_key / SHORT_key
clone_once() {
    key=$1
    eval "url=\$URL_$key ppid=\$PPID_$key"
    out=$T/clone-$key.pftrace
    rm -f "$out" "$T/client.pid"
    t0=$(date +%s%N)
    res=$({
        # the launcher: its pid for the counters, tracectl under timeout, then its own CPU (its
        # reaped children's: timeout's and tracectl's) once tracectl exited
        # shellcheck disable=SC2016 # expanded by that sh
        $EP sh -c 'echo $$ >"$0"; timeout "$1" "$2" --cacert "$3" clone "$4" "$5" -o "$6"; rc=$?
            read -r st </proc/$$/stat; echo "launcher-cpu ${st##*) }" >&2; exit $rc' \
            "$T/client.pid" "$CLIENT_TIMEOUT" "$TC" "$T/pki/ca.crt" "$url" "$SESSION" "$out" 2>&1 >/dev/null
        echo "exit $?"
    } | stamp "$ppid")
    eval "RUNS_$key=\$((\${RUNS_$key:-0} + 1))"
    rc=$(field E 3 "$res")
    pk=$(field B 3 "$res")
    by=$(field B 4 "$res")
    if [ "$rc" != 0 ] || [ -z "$pk" ] || [ "$pk" -lt "$REF_PACKETS" ] || [ -z "$(field A 2 "$res")" ]; then
        eval "SHORT_$key=\$((\${SHORT_$key:-0} + 1))"
        echo "record_bench: $key: read-out incomplete (exit ${rc:-?}, ${pk:-no} packets of $REF_PACKETS)" >>"$T/client.log"
        return 0
    fi
    # read-out seconds, total seconds, MB/s and CPU % over the read-out
    line=$(echo "$res" | awk -v t0="$t0" -v hz="$HZ" -v haveproxy="${ppid:+1}" '
        $1 == "A" { a = $2; ap = $3; as = $4; ac = $5; ab = $6 }
        $1 == "B" { b = $2; bytes = $4 }
        $1 == "C" { cc = $2 }
        $1 == "E" { e = $2; ep = $4; es = $5; eb = $6 }
        END {
            s = (b - a) / 1e9; if (s <= 0) s = 1e-9
            w = (e - a) / 1e9; if (w <= 0) w = 1e-9
            pr = (ep - ap) / hz / w * 100; sv = (es - as) / hz / w * 100; cl = (cc - ac) / hz / w * 100
            oth = (eb - ab - (ep - ap) - (es - as) - (cc - ac)) / hz / w * 100; if (oth < 0) oth = 0
            printf "mb=%.1f read_s=%.3f total_s=%.3f mbps=%.1f proxy=%s svc=%.0f client=%.0f others=%.0f",
                bytes / 1e6, s, (e - t0) / 1e9, bytes / 1e6 / s, haveproxy ? sprintf("%.0f", pr) : "-", sv, cl, oth
        }')
    eval "old=\${BEST_$key:-}"
    v=$(kv mbps "$line")
    o=$(kv mbps "$old")
    dn=$(kv others "$line")
    dold=$(kv others "$old")
    if [ -z "$o" ] || awk "BEGIN{n=($dn<15); o=(${dold:-0}<15); exit !(n>o || (n==o && $v > $o))}"; then
        eval "BEST_$key=\"\$line\" BYTES_$key=\$by"
    fi
    [ "${KEEP_TMP:-0}" = 1 ] || rm -f "$out"
}
kv() { # key line
    echo "$2" | tr ' ' '\n' | sed -n "s/^$1=//p" | head -n 1
}

# ---------------------------------------------------------------- reference read-out
REF_PACKETS=0
rm -f "$T/ref.pftrace"
if ! timeout "$CLIENT_TIMEOUT" "$TC" clone "unix:$C" "$SESSION" -o "$T/ref.pftrace" 2>"$T/ref.log"; then
    echo "record_bench: the reference clone failed:"
    cat "$T/ref.log"
    exit 1
fi
REF_PACKETS=$(sed -n 's/^tracectl: wrote \([0-9]*\) packets.*/\1/p' "$T/ref.log")
summary=$(timeout 60 "$TC" dump "$T/ref.pftrace" --summary 2>/dev/null | head -n 1)
payload=$(echo "$summary" | sed -n 's/.*(\([0-9]*\) payload bytes.*/\1/p')
echo "record_bench: reference read-out (direct UNIX): $summary;" \
    "$(awk "BEGIN{printf \"%.1f\", ${payload:-0} * 100 / ($MBUF * 1048576)}")% of the buffer in packet payload"
if [ -z "$REF_PACKETS" ] || [ "${payload:-0}" -lt $((MBUF * 1048576 * 9 / 10)) ]; then
    echo "record_bench: the reference read-out holds less than 90% of the buffer: is the session full?"
    exit 1
fi
rm -f "$T/ref.pftrace"

# ---------------------------------------------------------------- measurements
# REPS rounds, each reading once through every row in turn (interleaved, as gateway_bench.sh).
r=0
while [ $r -lt "$REPS" ]; do
    r=$((r + 1))
    for k in $ROWS; do clone_once "$k"; done
done

# ---------------------------------------------------------------- table
ratio() { # a b
    if [ -n "$1" ] && [ -n "$2" ]; then awk "BEGIN{printf \"%.2f\", $1/$2}"; fi
}
DISTURBED=0
INCOMPLETE=0
echo
echo "read-out of a full ${MBUF} MiB buffer with tracectl clone (MB = 10^6 bytes of trace file; read s from"
echo "CloneSession's answer to the last ReadBuffers reply; total s = the whole command; CPU % of one CPU"
echo "from CloneSession's answer to tracectl's exit):"
printf '%-36s %6s %7s %7s %7s | %5s %5s %5s %5s %s\n' "path" "MB" "read s" "MB/s" "total s" "proxy" "svc" "clnt" "oth" ""
printf '%s\n' "------------------------------------------------------------------------------------------------"
for k in $ROWS; do
    eval "lab=\$LABEL_$k st=\${BEST_$k:-} runs=\${RUNS_$k:-0} short=\${SHORT_$k:-0}"
    mark=""
    oth=$(kv others "$st")
    if [ -n "$oth" ] && [ "$oth" -ge 15 ]; then
        mark=" *"
        DISTURBED=1
    fi
    if [ "$short" -gt 0 ]; then
        mark="$mark SHORT $short/$runs"
        INCOMPLETE=1
    fi
    printf '%-36s %6s %7s %7s %7s | %5s %5s %5s %5s%s\n' "$lab" "$(kv mb "$st")" "$(kv read_s "$st")" \
        "$(kv mbps "$st")" "$(kv total_s "$st")" "$(kv proxy "$st")" "$(kv svc "$st")" "$(kv client "$st")" "${oth:--}" "$mark"
    eval "MB_$k=\$(kv mbps \"\$st\")"
done
[ $DISTURBED = 1 ] && echo "* other processes used >= 15% of a CPU during this row's best run: its number is low"
[ $INCOMPLETE = 1 ] && echo "SHORT n/m: n of m read-outs failed or read fewer than the reference's $REF_PACKETS packets" \
    "(never kept as the best; see $T/client.log with KEEP_TMP=1)"
echo
echo "ratios of read-out MB/s (gateway_bench.sh's targets for the same pairs, measured there with bench_gw):"
pair() { # label a b target
    v=$(ratio "$2" "$3")
    printf '  %-50s %6s   (gateway_bench target %s)\n' "$1" "${v:-n/a}" "$4"
}
pair "tracegated TCP / socat -b 262144" "${MB_tg_tcp:-}" "${MB_socat_b:-}" ">= 1.3"
pair "tracegated TLS / stunnel4" "${MB_tg_tls:-}" "${MB_stunnel:-}" ">= 1.3"
pair "tracegated WS / websockify" "${MB_tg_ws:-}" "${MB_websockify:-}" ">= 1.3"
for k in $ROWS; do
    [ "$k" = direct ] && continue
    eval "lab=\$LABEL_$k v=\${MB_$k:-}"
    case $k in tg_*) tgt=">= 0.4" ;; *) tgt="none" ;; esac
    pair "$lab / direct UNIX" "$v" "${MB_direct:-}" "$tgt"
done
stop "$RPID"
exit 0
