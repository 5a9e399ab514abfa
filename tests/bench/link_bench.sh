#!/bin/sh
# link_bench.sh: gateway-to-gateway links (docs/links.md) measured in one run, on loopback:
#   1. one channel over a TLS link vs a plain TLS stream of the same frames (MB/s, and MB/s per
#      CPU-second of the busiest node; p50/p99 of request/reply calls), for a channel opened by the
#      dialer (A->B) and by the acceptor (B->A); and over an h2c link vs plain TCP
#   2. 16 channels sharing one link: aggregate MB/s and the slowest channel's share
#   3. link restore -> first reply on an open channel, through a relay that cuts and restores
#   4. a federated record of 4 nodes vs 4 records one after the other (wall time)
#   5. OnePath on the forwarding path (issue 10's budget): one channel over an h2c link with
#      OnePath off, enabled at ratio 0.0, and at ratio 1.0 with NDJSON export (three node pairs,
#      interleaved runs): throughput and per-CPU ratios against "off"
# Prints tables and ratios against the targets (a missed target prints MISSED, never fails the
# run). Run by `make bench` (see docs/benchmarks.md). Every process it starts is killed on exit;
# every client run is bounded by `timeout`.
#
# Environment: TG_BUILDDIR (build dir, default .), TG_SRCDIR (source dir),
#   BENCH_SECONDS      measured window per stream run (default 1)
#   BENCH_REPS         runs per cell, best kept, interleaved across rows (default 3)
#   BENCH_RR           calls per latency run (default 2000)
#   BENCH_CHANNELS     channels sharing one link in row 2 (default 16)
#   BENCH_CUTS         cuts per restore mode in row 3 (default 3); BENCH_CUT_MS cut length (1000)
#   BENCH_FED_REPS     repetitions of row 4 (default 2); BENCH_FED_SECONDS record duration (2)
#   BENCH_ONLY         rows to run (space-separated): link1 link16 restore federated onepath
#   BENCH_PIN=0        no pinning (default: "near" CPU 0 = client and node A, "far" CPU 1 = node B
#                      and its server, as if A and B were two machines); BENCH_CPU_NEAR/_FAR
#   BENCH_PERF=1       also profile both nodes (perf record) during a row-1 link stream;
#                      BENCH_PERF_CG="--call-graph dwarf,16384" for call chains through the
#                      libraries (the default -g follows frame pointers, which they lack)
#   BENCH_GW_ENV       extra environment for tracegated (experiments); KEEP_TMP=1 keeps logs
#   BENCH_TRACEGATED   another tracegated binary (e.g. one built from main, to compare builds)
set -u

B=${TG_BUILDDIR:-$(pwd)}
S=${TG_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
BG=$B/tests/bench/bench_gw
GWD=${BENCH_TRACEGATED:-$B/gateway/tracegated}
TC=$B/src/tracectl/tracectl
DEMO=$B/src/demo/tracegate-demo
RELAY=$S/tests/bench/cut_relay.py
SECS=${BENCH_SECONDS:-1}
REPS=${BENCH_REPS:-3}
RR=${BENCH_RR:-2000}
NCH=${BENCH_CHANNELS:-16}
CUTS=${BENCH_CUTS:-3}
CUT_MS=${BENCH_CUT_MS:-1000}
FED_REPS=${BENCH_FED_REPS:-2}
FED_SECS=${BENCH_FED_SECONDS:-2}
ONLY=${BENCH_ONLY:-}

for bin in "$BG" "$GWD" "$TC" "$DEMO"; do
    if [ ! -x "$bin" ]; then
        echo "link_bench: $bin is not built (run 'make bench')"
        exit 1
    fi
done

NEAR=""
FAR=""
if [ "${BENCH_PIN:-1}" = 1 ] && command -v taskset >/dev/null 2>&1 && [ "$(nproc)" -ge 2 ]; then
    NEAR="taskset -c ${BENCH_CPU_NEAR:-0}"
    FAR="taskset -c ${BENCH_CPU_FAR:-1}"
fi

. "$S/tests/bench/script_lib.sh"
bench_init linkbench

# nodes_check NAME=PID...: says which node died during a row (a crash is a bug worth reporting)
nodes_check() {
    for np in "$@"; do
        nn=${np%%=*}
        pp=${np#*=}
        if [ -n "$pp" ] && ! kill -0 "$pp" 2>/dev/null; then
            wait "$pp" 2>/dev/null
            rc=$?
            how="exit status $rc"
            [ $rc -gt 128 ] && how="killed by signal $((rc - 128))"
            echo "   !! $nn (pid $pp) is gone ($how): the rows after it cannot run; the end of its log:"
            tail -n 8 "$T/$nn.log" | sed 's/^/      /'
        fi
    done
}

T_START=$(date +%s)
T_ROW=$T_START
took() { # prints how long the row took (a run must stay within a few minutes)
    t=$(date +%s)
    echo "   (this row: $((t - T_ROW)) s; total so far $((t - T_START)) s)"
    T_ROW=$t
}

now() { date +%s.%N; }


ready() { # url [pid]: waits (10 s at most) until one QueryCapabilities call goes through
    i=0
    while [ $i -lt 100 ]; do
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

ratio() { # a b
    if [ -n "$1" ] && [ -n "$2" ]; then awk "BEGIN{printf \"%.2f\", $1/$2}"; fi
}

verdict() { # label value op target
    if [ -z "$2" ]; then
        printf '  %-60s %8s   %s\n' "$1" "n/a" "(not measured)"
    elif awk "BEGIN{exit !($2 $3 $4)}"; then
        printf '  %-60s %8s   met (target %s %s)\n' "$1" "$2" "$3" "$4"
    else
        printf '  %-60s %8s   MISSED (target %s %s)\n' "$1" "$2" "$3" "$4"
    fi
}

# tracegated NAME CPU-PREFIX ARGS...: a node with its own sockets in $T, logging warnings only
node() {
    nname=$1
    npre=$2
    shift 2
    # shellcheck disable=SC2086
    start "$nname" env ${BENCH_GW_ENV:-} $npre "$GWD" --node-name "$nname" --producer-socket "$T/$nname-p.sock" \
        --consumer-socket "$T/$nname-c.sock" --no-http --drain-timeout 1s --log-level "${NODE_LOG:-warn}" "$@"
}

echo "link_bench: $(nproc) CPUs; near side (client, node A) '${NEAR:-not pinned}', far side (node B, its server)" \
    "'${FAR:-not pinned}'; best of $REPS runs per cell, $SECS s stream windows, $RR calls per latency run"
echo "link_bench: load average $(cut -d' ' -f1-3 /proc/loadavg) (other work on the machine slows runs down:" \
    "see the 'others' column)"
bash "$S/certs/make-dev-pki.sh" "$T/pki" >/dev/null 2>&1 || {
    echo "link_bench: cannot create the dev PKI"
    exit 1
}
CA=$T/pki/ca.crt
TLSKEYS="--tls-cert $T/pki/server.crt --tls-key $T/pki/server.key"

# ---------------------------------------------------------------- rows 1-3: nodes A, B (C)
# srv_b (far CPU) behind node B, srv_a (near CPU) behind node A, both bench_gw servers (the
# ConsumerPort of docs/benchmarks.md: ReadBuffers streams 64 KiB replies). B listens for links
# (tls://) and for plain TLS consumers; A dials B; each exports the other's consumer port.
#
#   link A->B   client -> A's export socket -> [TLS link, A opened the channel] -> B -> srv_b
#   link B->A   client -> B's export socket -> [TLS link, B asked A to open it] -> A -> srv_a
#   TLS to B    client -> tls:// consumer listener of B -> srv_b   (and TLS to A: mirror)
#   link D->B   as A->B from node D over an h2c link (tcp://), vs plain TCP to B: no TLS
#   direct      client -> srv_b's UNIX socket (no gateway)
NODES_UP=0
if want link1 || want link16 || want restore; then
    start srv_b $FAR "$BG" server "$T/srv_b.sock"
    SRV_B=$LASTPID
    start srv_a $NEAR "$BG" server "$T/srv_a.sock"
    SRV_A=$LASTPID
    free_port
    P_LINK=$PORT
    free_port
    P_TLS_B=$PORT
    free_port
    P_TLS_A=$PORT
    free_port
    P_H2C=$PORT
    free_port
    P_TCP_B=$PORT
    # shellcheck disable=SC2086
    node nodeb "$FAR" --upstream-consumer "$T/srv_b.sock" --listen-link "tls://127.0.0.1:$P_LINK" $TLSKEYS \
        --listen "consumer=tls://127.0.0.1:$P_TLS_B" --export-node "nodea:consumer=$T/exp-a.sock" \
        --listen-link "tcp://127.0.0.1:$P_H2C" --listen "consumer=tcp://127.0.0.1:$P_TCP_B"
    NB=$LASTPID
    # shellcheck disable=SC2086
    node nodea "$NEAR" --upstream-consumer "$T/srv_a.sock" --peer "tls://127.0.0.1:$P_LINK" --peer-ca "$CA" \
        --listen "consumer=tls://127.0.0.1:$P_TLS_A" $TLSKEYS --export-node "nodeb:consumer=$T/exp-b.sock"
    NA=$LASTPID
    # node D: as A, over an h2c link (tcp:// on loopback): the link's cost without TLS
    node noded "$NEAR" --peer "tcp://127.0.0.1:$P_H2C" --export-node "nodeb:consumer=$T/exp-d.sock"
    ND=$LASTPID
    if ready "unix:$T/srv_b.sock" "$SRV_B" && ready "unix:$T/srv_a.sock" "$SRV_A" &&
        ready "tls://127.0.0.1:$P_TLS_B" "$NB" && ready "unix:$T/exp-b.sock" "$NA" &&
        ready "unix:$T/exp-a.sock" "$NB" && ready "unix:$T/exp-d.sock" "$ND"; then
        NODES_UP=1
    else
        echo "link_bench: the nodes did not come up; logs:"
        tail -n 15 "$T/nodeb.log" "$T/nodea.log"
    fi
fi

# ---------------------------------------------------------------- row 1: one channel
ROWS=""
add_row() { # key label url client-cpu-prefix
    ROWS="$ROWS $1"
    eval "LABEL_$1=\"\$2\" URL_$1=\"\$3\" PRE_$1=\"\$4\""
}

stream_once() { # key extra...: keeps the best line in STREAM_key (an undisturbed run first)
    key=$1
    shift
    eval "url=\$URL_$key pre=\$PRE_$key"
    # shellcheck disable=SC2086
    near=$NA
    [ "$key" = link_db ] && near=$ND # node D stands in node A's column
    line=$(timeout 60 $pre "$BG" client "$url" --cacert "$CA" --seconds "$SECS" \
        --watch "nodea=$near" --watch "nodeb=$NB" --watch "srv=$SRV_B" --watch "srva=$SRV_A" "$@" 2>>"$T/client.log")
    v=$(field mb_per_s "$line")
    [ -n "$v" ] || return 0
    eval "old=\${STREAM_$key:-}"
    o=$(field mb_per_s "$old")
    dn=$(field cpu_others "$line")
    dold=$(field cpu_others "$old")
    if [ -z "$o" ] || awk "BEGIN{n=(${dn:-0}<15); o=(${dold:-0}<15); exit !(n>o || (n==o && $v > $o))}"; then
        eval "STREAM_$key=\"\$line\""
    fi
}

rr_once() { # key: keeps the line with the best p50 in RR_key
    eval "url=\$URL_$1 pre=\$PRE_$1"
    # shellcheck disable=SC2086
    line=$(timeout 60 $pre "$BG" client "$url" --cacert "$CA" --rr "$RR" 2>>"$T/client.log")
    v=$(field p50_us "$line")
    eval "old=\${RR_$1:-}"
    o=$(field p50_us "$old")
    if [ -n "$v" ] && { [ -z "$o" ] || awk "BEGIN{exit !($v < $o)}"; }; then
        eval "RR_$1=\"\$line\""
    fi
}

DISTURBED=0
mark() { # others%: sets MARK (" *" for a disturbed run) and DISTURBED
    MARK=""
    if [ -n "$1" ] && [ "$1" -ge 15 ]; then
        DISTURBED=1
        MARK=" *"
    fi
}

if [ "$NODES_UP" = 1 ] && want link1; then
    add_row direct "direct UNIX (no gateway)" "unix:$T/srv_b.sock" "$NEAR"
    add_row tls_b "plain TLS to B (tracegated tls://)" "tls://127.0.0.1:$P_TLS_B" "$NEAR"
    add_row link_ab "link A->B, 1 channel (TLS link)" "unix:$T/exp-b.sock" "$NEAR"
    add_row tls_a "plain TLS to A (mirror)" "tls://127.0.0.1:$P_TLS_A" "$FAR"
    add_row link_ba "link B->A, 1 channel (reverse open)" "unix:$T/exp-a.sock" "$FAR"
    add_row tcp_b "plain TCP to B (no TLS)" "tcp://127.0.0.1:$P_TCP_B" "$NEAR"
    add_row link_db "link D->B, 1 channel, h2c (no TLS)" "unix:$T/exp-d.sock" "$NEAR"
    r=0
    while [ $r -lt "$REPS" ]; do
        r=$((r + 1))
        for k in $ROWS; do stream_once "$k"; done
    done
    r=0
    while [ $r -lt "$REPS" ]; do
        r=$((r + 1))
        for k in $ROWS; do rr_once "$k"; done
    done
    echo
    echo "1. one channel: stream of 64 KiB frames (MB/s of IPC bytes at the client) and QueryCapabilities"
    echo "   round trips ($RR calls; us); CPU% = share of one CPU during the stream window:"
    printf '%-38s %7s %7s | %5s %5s %6s %6s %6s | %7s %8s\n' "path" "MB/s" "/bneck" "nodeA" "nodeB" "server" \
        "client" "others" "p50" "p99"
    printf '%s\n' "----------------------------------------------------------------------------------------------------"
    for k in $ROWS; do
        eval "lab=\$LABEL_$k st=\${STREAM_$k:-} rl=\${RR_$k:-}"
        mb=$(field mb_per_s "$st")
        srv=$(field cpu_srv "$st")
        case $k in tls_a | link_ba) srv=$(field cpu_srva "$st") ;; esac
        oth=$(field cpu_others "$st")
        ca=$(field cpu_nodea "$st")
        cb=$(field cpu_nodeb "$st")
        # MB/s per CPU-second of the busiest gateway node: what one saturated node would carry
        bn=""
        [ -n "$mb" ] && [ "$k" != direct ] &&
            bn=$(awk -v m="$mb" -v a="${ca:-0}" -v b="${cb:-0}" 'BEGIN{c = a > b ? a : b; if (c > 0) printf "%.0f", m * 100 / c}')
        mark "$oth"
        printf '%-38s %7s %7s | %5s %5s %6s %6s %6s | %7s %8s%s\n' "$lab" "${mb:--}" "${bn:--}" "$ca" "$cb" "$srv" \
            "$(field cpu_client "$st")" "$oth" "$(field p50_us "$rl")" "$(field p99_us "$rl")" "$MARK"
        eval "MB_$k=\${mb:-} BN_$k=\${bn:-} P50_$k=\$(field p50_us \"\$rl\")"
    done
    echo "/bneck = MB/s per CPU-second of the busiest gateway node (MB/s x 100 / its CPU%): the rate one saturated"
    echo "node would carry. On a busy machine the nodes get unequal CPU shares, so compare this column."
    [ $DISTURBED = 1 ] && echo "* other processes used >= 15% of a CPU during this cell's best run: its number is low and its ratios unreliable"
    c1=$(field cipher "${STREAM_tls_b:-}")
    [ -n "$c1" ] && echo "(plain TLS negotiated $c1; the link: TLS 1.3, ALPN h2, the same server certificate)"
    echo
    echo "targets (1 channel):"
    verdict "link A->B / plain TLS to B, MB/s as measured" "$(ratio "${MB_link_ab:-}" "${MB_tls_b:-}")" ">=" 0.8
    verdict "link B->A / plain TLS to A, MB/s as measured" "$(ratio "${MB_link_ba:-}" "${MB_tls_a:-}")" ">=" 0.8
    verdict "link A->B / plain TLS to B, per busiest-node CPU (/bneck)" "$(ratio "${BN_link_ab:-}" "${BN_tls_b:-}")" ">=" 0.8
    verdict "link B->A / plain TLS to A, per busiest-node CPU (/bneck)" "$(ratio "${BN_link_ba:-}" "${BN_tls_a:-}")" ">=" 0.8
    echo "  (no target: h2c link D->B / plain TCP to B: $(ratio "${MB_link_db:-}" "${MB_tcp_b:-}")x as measured," \
        "$(ratio "${BN_link_db:-}" "${BN_tcp_b:-}")x per busiest-node CPU; TLS link A->B / h2c link D->B:" \
        "$(ratio "${BN_link_ab:-}" "${BN_link_db:-}")x per busiest-node CPU)"
    echo "  (latency, no target: p50 link A->B ${P50_link_ab:--} us vs plain TLS ${P50_tls_b:--} us;" \
        "B->A ${P50_link_ba:--} us vs ${P50_tls_a:--} us)"
    nodes_check "nodea=$NA" "nodeb=$NB" "noded=$ND"
    took

    if [ "${BENCH_PERF:-0}" = 1 ] && command -v perf >/dev/null 2>&1; then
        # where the link's CPU goes: both nodes profiled during one 3 s link A->B stream
        # shellcheck disable=SC2086
        timeout 60 $NEAR "$BG" client "unix:$T/exp-b.sock" --seconds 3 --warmup 0.5 >"$T/perf-stream.txt" 2>&1 &
        CP=$!
        sleep 0.7
        perf record -q -F 2000 ${BENCH_PERF_CG:--g} -p "$NA" -o "$T/perf-a.data" -- sleep 2 >/dev/null 2>&1 &
        PA=$!
        perf record -q -F 2000 ${BENCH_PERF_CG:--g} -p "$NB" -o "$T/perf-b.data" -- sleep 2 >/dev/null 2>&1
        wait "$PA" "$CP"
        echo
        echo "perf (BENCH_PERF=1) during a link A->B stream ($(cut -d' ' -f6 "$T/perf-stream.txt")):"
        for n in a b; do
            echo "  node $n, top symbols (self %):"
            perf report -i "$T/perf-$n.data" --no-children --sort dso,symbol -g none --stdio 2>/dev/null |
                grep -v '^#' | grep -v '^$' | head -n 15 | sed 's/^/    /'
        done
    fi
fi

# ---------------------------------------------------------------- row 2: N channels on one link
if [ "$NODES_UP" = 1 ] && want link16; then
    r=0
    while [ $r -lt "$REPS" ]; do
        r=$((r + 1))
        for k in link tls; do
            url="unix:$T/exp-b.sock"
            [ $k = tls ] && url="tls://127.0.0.1:$P_TLS_B"
            # shellcheck disable=SC2086
            line=$(timeout 90 $NEAR "$BG" client "$url" --cacert "$CA" --conns "$NCH" --seconds "$SECS" \
                --watch "nodea=$NA" --watch "nodeb=$NB" --watch "srv=$SRV_B" 2>>"$T/client.log")
            v=$(field mb_per_s "$line")
            [ -n "$v" ] || continue
            eval "old=\${MULTI_$k:-}"
            o=$(field mb_per_s "$old")
            if [ -z "$o" ] || awk "BEGIN{exit !($v > $o)}"; then eval "MULTI_$k=\"\$line\""; fi
            eval "worst=\${WORST_$k:-}"
            sh=$(field min_share "$line")
            if [ -z "$worst" ] || awk "BEGIN{exit !($sh < $worst)}"; then eval "WORST_$k=\$sh"; fi
        done
    done
    # one more channel making small calls while the others stream: is it stuck behind their data?
    # shellcheck disable=SC2086
    timeout 60 $NEAR "$BG" client "unix:$T/exp-b.sock" --conns "$NCH" --seconds 3 --warmup 0.2 >/dev/null 2>&1 &
    BGP=$!
    sleep 0.5
    # shellcheck disable=SC2086
    HOL=$(timeout 60 $NEAR "$BG" client "unix:$T/exp-b.sock" --rr 500 2>>"$T/client.log")
    wait "$BGP"
    echo
    echo "2. $NCH streams at once (MB/s; fair share = aggregate / $NCH; min share = slowest / fair share;"
    echo "   the best run by aggregate, the worst min share over all $REPS runs):"
    printf '%-38s %9s %7s %8s %8s %9s %6s | %5s %5s\n' "path" "aggregate" "/bneck" "slowest" "fastest" "min share" \
        "worst" "nodeA" "nodeB"
    printf '%s\n' "--------------------------------------------------------------------------------------------------"
    DISTURBED=0
    for k in link tls; do
        eval "st=\${MULTI_$k:-} worst=\${WORST_$k:-}"
        lab="$NCH channels sharing one link A->B"
        [ $k = tls ] && lab="$NCH plain TLS connections to B"
        oth=$(field cpu_others "$st")
        mark "$oth"
        mb=$(field mb_per_s "$st")
        ca=$(field cpu_nodea "$st")
        cb=$(field cpu_nodeb "$st")
        bn=""
        [ -n "$mb" ] && bn=$(awk -v m="$mb" -v a="${ca:-0}" -v b="${cb:-0}" 'BEGIN{c = a > b ? a : b; if (c > 0) printf "%.0f", m * 100 / c}')
        printf '%-38s %9s %7s %8s %8s %9s %6s | %5s %5s%s\n' "$lab" "${mb:--}" "${bn:--}" "$(field min_mb_per_s "$st")" \
            "$(field max_mb_per_s "$st")" "$(field min_share "$st")" "${worst:--}" "$ca" "$cb" "$MARK"
    done
    [ $DISTURBED = 1 ] && echo "* disturbed by other processes (>= 15% of a CPU)"
    echo "   per channel (best run): $(field per_conn_mb_per_s "${MULTI_link:-}")"
    hp50=$(field p50_us "$HOL")
    echo "   a channel making QueryCapabilities calls while $NCH others stream on the link: p50 ${hp50:--} us," \
        "p99 $(field p99_us "$HOL") us (idle link: p50 ${P50_link_ab:--} us)"
    echo
    echo "targets ($NCH channels):"
    verdict "worst min share over the runs (slowest / fair share)" "${WORST_link:-}" ">=" 0.03125
    one=${MB_link_ab:-}
    if [ -n "$one" ] && [ -n "$(field mb_per_s "${MULTI_link:-}")" ]; then
        echo "  (aggregate of $NCH channels / one channel: $(ratio "$(field mb_per_s "${MULTI_link:-}")" "$one")x, no target)"
    fi
    nodes_check "nodea=$NA" "nodeb=$NB"
    took
fi

# ---------------------------------------------------------------- row 3: restore -> flowing
# node C dials B through cut_relay.py; a client makes QueryCapabilities calls 1 ms apart on a
# channel C->B (through C's export socket) the whole time. The relay cuts every connection and
# restores after BENCH_CUT_MS: "pending" holds the redial C makes during the cut and forwards it
# at restore (the time is TLS + HTTP/2 + link resumption + channel re-open + resend); "refused"
# refuses connections during the cut, so the time includes C's redial backoff (100 ms doubling).
# The time is from the relay's restore to the first reply the client gets after it.
if [ "$NODES_UP" = 1 ] && want restore; then
    if ! command -v python3 >/dev/null 2>&1; then
        echo
        echo "3. restore: python3 is not installed: skipped"
    else
        free_port
        P_RELAY=$PORT
        start relay $NEAR python3 "$RELAY" "$P_RELAY" "$P_LINK"
        RL=$LASTPID
        NODE_LOG=info # its "link nodeb resumed" lines are counted
        node nodec "$NEAR" --peer "tls://127.0.0.1:$P_RELAY" --peer-ca "$CA" --export-node "nodeb:consumer=$T/exp-c.sock" \
            --link-resume-window 30s
        NC=$LASTPID
        NODE_LOG=warn
        if ready "unix:$T/exp-c.sock" "$NC"; then
            total=$((CUTS * 2 * (CUT_MS + 1500) / 1000 + 30))
            # shellcheck disable=SC2086
            start stalls $NEAR "$BG" client "unix:$T/exp-c.sock" --stalls 50 --pace 1000 --seconds "$total"
            CL=$LASTPID
            sleep 0.5
            cut_s=$(awk "BEGIN{print $CUT_MS/1000}")
            RESULTS=""
            for mode in pending refused; do
                sig=USR1
                [ $mode = refused ] && sig=HUP
                i=0
                while [ $i -lt "$CUTS" ]; do
                    i=$((i + 1))
                    sleep 0.5
                    kill -s "$sig" "$RL"
                    sleep "$cut_s"
                    nr=$(grep -c '^restore' "$T/relay.log")
                    kill -s USR2 "$RL"
                    j=0
                    while [ "$(grep -c '^restore' "$T/relay.log")" -le "$nr" ] && [ $j -lt 50 ]; do
                        sleep 0.05
                        j=$((j + 1))
                    done
                    tr=$(grep '^restore' "$T/relay.log" | tail -n 1 | cut -d' ' -f2)
                    # the first reply after the restore ends a stall (calls block during the cut)
                    lat=""
                    j=0
                    while [ -z "$lat" ] && [ $j -lt 150 ] && kill -0 "$CL" 2>/dev/null; do
                        lat=$(awk -v t="$tr" '$1 == "stall" { sub("end=", "", $3); if ($3 + 0 >= t + 0) { printf "%.1f", ($3 - t) * 1000; exit } }' "$T/stalls.log")
                        [ -n "$lat" ] || sleep 0.1
                        j=$((j + 1))
                    done
                    RESULTS="$RESULTS $mode:${lat:-none}"
                done
            done
            echo
            echo "3. link restore -> first reply on an open channel (ms; $CUTS cuts of $CUT_MS ms per mode," \
                "within --link-resume-window 30s):"
            printf '%-56s %8s %8s   %s\n' "mode" "best" "worst" "all runs"
            printf '%s\n' "----------------------------------------------------------------------------------------------"
            for mode in pending refused; do
                all=$(echo "$RESULTS" | tr ' ' '\n' | sed -n "s/^$mode://p" | tr '\n' ' ')
                best=$(echo "$all" | tr ' ' '\n' | grep -v '^none$' | grep . | sort -n | head -n 1)
                worst=$(echo "$all" | tr ' ' '\n' | grep . | sort -n | tail -n 1)
                echo "$all" | grep -q none && worst="none"
                lab="redial pending at restore (handshake + resume)"
                [ $mode = refused ] && lab="dials refused during the cut (+ redial backoff)"
                printf '%-56s %8s %8s   %s\n' "$lab" "${best:--}" "${worst:--}" "$all"
                eval "BEST_$mode=\${best:-}"
            done
            kill -0 "$CL" 2>/dev/null || echo "  the client's channel failed: $(tail -n 2 "$T/stalls.log")"
            nodes_check "nodeb=$NB" "nodec=$NC"
            echo "  ('none': no reply within 15 s of the restore: the channel stalled)"
            echo "  node C: $(grep -c 'link nodeb down' "$T/nodec.log") link losses, $(grep -c 'link nodeb resumed' "$T/nodec.log")" \
                "resumptions"
            stop "$CL"
            took
        else
            echo
            echo "3. restore: node C did not link to B through the relay:"
            tail -n 10 "$T/nodec.log" "$T/relay.log"
        fi
        stop "$NC" "$RL"
    fi
fi

# ---------------------------------------------------------------- row 4: federated record
# Four nodes with their own embedded service and a tracegate-demo producer each (60 frames/s of
# TrackEvent); fed1 dials the three others over h2c links on loopback. One federated
# `tracectl record --all -t Ns` through fed1 against four `tracectl --node X record -t Ns` one
# after the other (each through fed1, as a user would record each node).
if want federated; then
    [ "$NODES_UP" = 1 ] && stop "$NA" "$NB" "$ND" "$SRV_A" "$SRV_B"
    FEDOK=1
    PEERS=""
    for n in fed2 fed3 fed4; do
        free_port
        eval "P_$n=$PORT"
        node "$n" "" --listen-link "tcp://127.0.0.1:$PORT"
        PEERS="$PEERS --peer tcp://127.0.0.1:$PORT"
    done
    # shellcheck disable=SC2086
    node fed1 "" $PEERS --listen "consumer=unix:$T/fed1-gw.sock"
    HUB=unix:$T/fed1-gw.sock
    for n in fed1 fed2 fed3 fed4; do
        start "demo-$n" "$DEMO" --producer-socket "$T/$n-p.sock" --name "demo-$n" --duration 600 --log-level info
    done
    fleet_up() {
        timeout 10 "$TC" nodes "$HUB" >"$T/nodes.txt" 2>&1 || return 1
        [ "$(grep -c '^fed[234]  *up ' "$T/nodes.txt")" = 3 ]
    }
    i=0
    while ! fleet_up && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
    fleet_up || {
        FEDOK=0
        echo
        echo "4. federated: the fleet did not come up: $(cat "$T/nodes.txt")"
    }
    for n in fed1 fed2 fed3 fed4; do
        i=0
        while ! grep -q "registered with the tracing service" "$T/demo-$n.log" && [ $i -lt 100 ]; do
            sleep 0.1
            i=$((i + 1))
        done
    done
    if [ $FEDOK = 1 ]; then
        FED_BEST=""
        SEQ_BEST=""
        r=0
        while [ $r -lt "$FED_REPS" ]; do
            r=$((r + 1))
            t0=$(now)
            timeout 120 "$TC" record "$HUB" --all -t "${FED_SECS}s" --no-progress -o "$T/fed.pftrace" >"$T/rec-fed.log" 2>&1
            rc=$?
            t1=$(now)
            w=$(awk "BEGIN{printf \"%.2f\", $t1 - $t0}")
            [ $rc = 0 ] || {
                echo "4. federated record failed ($rc): $(tail -n 3 "$T/rec-fed.log")"
                w=""
            }
            if [ -n "$w" ] && { [ -z "$FED_BEST" ] || awk "BEGIN{exit !($w < $FED_BEST)}"; }; then FED_BEST=$w; fi
            FED_ALL="${FED_ALL:-} ${w:-failed}"
            t0=$(now)
            ok=1
            for n in fed1 fed2 fed3 fed4; do
                timeout 120 "$TC" --node "$n" record "$HUB" -t "${FED_SECS}s" --no-progress -o "$T/seq-$n.pftrace" \
                    >"$T/rec-$n.log" 2>&1 || {
                    ok=0
                    echo "4. record of $n failed: $(tail -n 3 "$T/rec-$n.log")"
                }
            done
            t1=$(now)
            w=""
            [ $ok = 1 ] && w=$(awk "BEGIN{printf \"%.2f\", $t1 - $t0}")
            if [ -n "$w" ] && { [ -z "$SEQ_BEST" ] || awk "BEGIN{exit !($w < $SEQ_BEST)}"; }; then SEQ_BEST=$w; fi
            SEQ_ALL="${SEQ_ALL:-} ${w:-failed}"
        done
        size() { wc -c <"$1" 2>/dev/null | tr -d ' '; }
        seqsize=0
        for n in fed1 fed2 fed3 fed4; do seqsize=$((seqsize + $(size "$T/seq-$n.pftrace" || echo 0))); done
        echo
        echo "4. federated record of 4 nodes vs 4 records one after the other (wall time, s; -t ${FED_SECS}s each;" \
            "best of $FED_REPS):"
        printf '%-56s %8s %12s   %s\n' "" "best" "trace bytes" "all runs"
        printf '%s\n' "----------------------------------------------------------------------------------------------"
        printf '%-56s %8s %12s  %s\n' "tracectl record --all (fed1 + 3 linked nodes)" "${FED_BEST:--}" \
            "$(size "$T/fed.pftrace")" "${FED_ALL:-}"
        printf '%-56s %8s %12s  %s\n' "4 x tracectl --node X record, one after the other" "${SEQ_BEST:--}" "$seqsize" \
            "${SEQ_ALL:-}"
        grep -E '^tracectl: +fed[0-9]+ +machine' "$T/rec-fed.log" | sed 's/^tracectl: */  federated trace: /'
        echo
        echo "targets (federated): none set; for reference:"
        verdict "federated wall time / 4 sequential records" "$(ratio "$FED_BEST" "$SEQ_BEST")" "<" 0.5
        verdict "federated wall time - record duration (s of overhead)" \
            "$(awk "BEGIN{if (\"$FED_BEST\" != \"\") printf \"%.2f\", ${FED_BEST:-0} - $FED_SECS}")" "<" 1.0
        took
    fi
fi
# ---------------------------------------------------------------- row 5: OnePath's cost
# Three pairs of nodes, each A dialing its B over h2c on loopback (no TLS: the link's own work is
# a larger share, so OnePath's is too), B bridging to one bench_gw server: OnePath off; enabled
# with ratio 0.0 (context kept, nothing sampled); ratio 1.0 with every span exported as NDJSON.
# Every frame a link carries is a span on both nodes (docs/onepath.md). Budget (the seed's):
# ratio 0 costs < 5% throughput, ratio 1 with export < 30%.
if want onepath; then
    [ "$NODES_UP" = 1 ] && stop "$NA" "$NB" "$ND" "$SRV_A" "$SRV_B"
    start srv_o $FAR "$BG" server "$T/srv_o.sock"
    SRV_O=$LASTPID
    OPOK=1
    for m in off r0 r1; do
        case $m in
        off) OPENV="ONEPATH_TRACE_ENABLE=0" ;;
        r0) OPENV="ONEPATH_TRACE_ENABLE=1 ONEPATH_TRACE_SAMPLE_RATIO=0.0" ;;
        r1) OPENV="ONEPATH_TRACE_ENABLE=1 ONEPATH_TRACE_SAMPLE_RATIO=1.0" ;;
        esac
        free_port
        # shellcheck disable=SC2086
        BENCH_GW_ENV="${BENCH_GW_ENV:-} $OPENV${m:+ }$([ $m = r1 ] && echo "ONEPATH_TRACE_NDJSON_PATH=$T/op-b.ndjson")" \
            node "opb_$m" "$FAR" --upstream-consumer "$T/srv_o.sock" --listen-link "tcp://127.0.0.1:$PORT"
        eval "OPB_$m=$LASTPID"
        # shellcheck disable=SC2086
        BENCH_GW_ENV="${BENCH_GW_ENV:-} $OPENV${m:+ }$([ $m = r1 ] && echo "ONEPATH_TRACE_NDJSON_PATH=$T/op-a.ndjson")" \
            node "opa_$m" "$NEAR" --peer "tcp://127.0.0.1:$PORT" --export-node "opb_$m:consumer=$T/op-$m.sock"
        eval "OPA_$m=$LASTPID"
    done
    for m in off r0 r1; do
        eval "pa=\$OPA_$m"
        ready "unix:$T/srv_o.sock" "$SRV_O" && ready "unix:$T/op-$m.sock" "$pa" || OPOK=0
    done
    if [ $OPOK = 0 ]; then
        echo
        echo "5. OnePath: the nodes did not come up; logs:"
        tail -n 5 "$T/opa_r1.log" "$T/opb_r1.log"
    else
        r=0
        while [ $r -lt "$REPS" ]; do
            r=$((r + 1))
            for m in off r0 r1; do
                eval "pa=\$OPA_$m pb=\$OPB_$m"
                # shellcheck disable=SC2086
                line=$(timeout 60 $NEAR "$BG" client "unix:$T/op-$m.sock" --seconds "$SECS" --watch "nodea=$pa" \
                    --watch "nodeb=$pb" --watch "srv=$SRV_O" 2>>"$T/client.log")
                v=$(field mb_per_s "$line")
                [ -n "$v" ] || continue
                eval "old=\${OP_$m:-}"
                o=$(field mb_per_s "$old")
                if [ -z "$o" ] || awk "BEGIN{exit !($v > $o)}"; then eval "OP_$m=\"\$line\""; fi
            done
        done
        echo
        echo "5. OnePath on the forwarding path: one channel over an h2c link, stream of 64 KiB frames (best of $REPS,"
        echo "   interleaved; every frame a span on both nodes when sampled):"
        printf '%-48s %8s %7s | %5s %5s %6s\n' "path" "MB/s" "/bneck" "nodeA" "nodeB" "others"
        printf '%s\n' "------------------------------------------------------------------------------------"
        for m in off r0 r1; do
            eval "st=\${OP_$m:-}"
            case $m in
            off) lab="OnePath off" ;;
            r0) lab="OnePath on, ratio 0.0" ;;
            r1) lab="OnePath on, ratio 1.0, NDJSON export" ;;
            esac
            mb=$(field mb_per_s "$st")
            ca=$(field cpu_nodea "$st")
            cb=$(field cpu_nodeb "$st")
            bn=""
            [ -n "$mb" ] && bn=$(awk -v m="$mb" -v a="${ca:-0}" -v b="${cb:-0}" 'BEGIN{c = a > b ? a : b; if (c > 0) printf "%.0f", m * 100 / c}')
            eval "BN_op_$m=\$bn MB_op_$m=\$mb"
            printf '%-48s %8s %7s | %5s %5s %6s\n' "$lab" "${mb:--}" "${bn:--}" "$ca" "$cb" "$(field cpu_others "$st")"
        done
        spans=$(cat "$T/op-a.ndjson" "$T/op-b.ndjson" 2>/dev/null | wc -l | tr -d ' ')
        echo "   (ratio 1.0: $spans spans exported as NDJSON by the two nodes over all its runs)"
        echo
        echo "targets (OnePath, the seed's budget):"
        verdict "ratio 0.0 / off, MB/s as measured (cost < 5%)" "$(ratio "${MB_op_r0:-}" "${MB_op_off:-}")" ">=" 0.95
        verdict "ratio 1.0 + NDJSON / off, MB/s as measured (cost < 30%)" "$(ratio "${MB_op_r1:-}" "${MB_op_off:-}")" ">=" 0.70
        verdict "ratio 0.0 / off, per busiest-node CPU" "$(ratio "${BN_op_r0:-}" "${BN_op_off:-}")" ">=" 0.95
        verdict "ratio 1.0 + NDJSON / off, per busiest-node CPU" "$(ratio "${BN_op_r1:-}" "${BN_op_off:-}")" ">=" 0.70
        took
    fi
fi
exit 0
