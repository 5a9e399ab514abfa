#!/bin/sh
# insn_per_mb.sh: CPU work per MB that other work on a busy machine does not move: user-space
# instructions counted by valgrind --tool=callgrind (kernel work, i.e. the syscalls' own copies, is
# not counted; the two builds compared make the same syscalls or fewer).
#   1. tracegated forwarding a ReadBuffers stream of 64 KiB frames from a UNIX upstream (bench_gw
#      server --frames N) to a bench_gw client over tcp://, ws:// and tls://: instructions of the
#      whole tracegated process, two runs of N1 and N2 frames, (Ir2 - Ir1) / (MB2 - MB1), so
#      start-up, the ready check and shut-down cancel out.
#   2. the service's ReadBuffers read-out in bench_service: instructions inclusive of on_batch (the
#      batch encoding and queueing of replies) plus sock_flush (the output path up to sendmsg,
#      freeing sent buffers), per MB of IPC bytes read.
# Not part of `make bench` (it takes a few minutes). Usage, from a non-sanitizer build directory:
#   sh ../tests/bench/insn_per_mb.sh            (or TG_BUILDDIR=DIR sh insn_per_mb.sh)
# Environment: INSN_N1, INSN_N2 (frames, default 300 and 1500), INSN_ONLY="tcp ws tls service",
# INSN_ROUNDS (bench_service read rounds, default 2), KEEP_TMP=1, INSN_GW_ARGS (more tracegated
# options, e.g. "--tls-path socket" to measure one TLS data path).
set -u
B=${TG_BUILDDIR:-$(pwd)}
N1=${INSN_N1:-300}
N2=${INSN_N2:-1500}
ONLY=${INSN_ONLY:-tcp ws tls service}
FRAME=65554 # bytes on the wire per 64 KiB-payload frame
for t in valgrind callgrind_annotate; do
    command -v $t >/dev/null 2>&1 || { echo "insn_per_mb: $t is needed"; exit 1; }
done
LT="$B/libtool --mode=execute"
. "$(dirname "$0")/script_lib.sh"
bench_init insn

bash "$B/../certs/make-dev-pki.sh" "$T/pki" >/dev/null 2>&1 || bash "$(dirname "$0")/../../certs/make-dev-pki.sh" "$T/pki" >/dev/null 2>&1

port() { # a loopback port nobody listens on
    p=$((20000 + ($$ * 31 + $1 * 977) % 30000))
    while ss -Htan "sport = :$p" 2>/dev/null | grep -q .; do p=$((p + 1)); done
    echo $p
}

ir_total() { sed -n 's/^summary: *//p' "$1" | head -n 1; }

# fwd N scheme: prints the total instructions of tracegated for N frames
fwd() {
    n=$1
    scheme=$2
    sock=$T/s-$scheme-$n.sock
    "$B/tests/bench/bench_gw" server "$sock" --frames "$n" >"$T/server.log" 2>&1 &
    sp=$!
    PIDS="$PIDS $sp"
    pt=$(port 1)
    pw=$(port 2)
    ps=$(port 3)
    $LT valgrind --tool=callgrind --callgrind-out-file="$T/cg-$scheme-$n" "$B/gateway/tracegated" \
        --upstream-consumer "$sock" --listen "consumer=tcp://127.0.0.1:$pt" --listen "consumer=tls://127.0.0.1:$ps" \
        --tls-cert "$T/pki/server.crt" --tls-key "$T/pki/server.key" --http "127.0.0.1:$pw" \
        --producer-socket "$T/p.sock" --consumer-socket "$T/c.sock" --log-level warn ${INSN_GW_ARGS:-} \
        >"$T/gw-$scheme-$n.log" 2>&1 &
    gp=$!
    PIDS="$PIDS $gp"
    case $scheme in
    tcp) url=tcp://127.0.0.1:$pt ;;
    ws) url=ws://127.0.0.1:$pw/traced ;;
    tls) url=tls://127.0.0.1:$ps ;;
    esac
    i=0
    until "$B/tests/bench/bench_gw" client "$url" --cacert "$T/pki/ca.crt" --rr 1 >/dev/null 2>&1; do
        i=$((i + 1))
        [ $i -lt 600 ] && kill -0 $gp 2>/dev/null || { echo "insn_per_mb: tracegated did not start" >&2; cat "$T/gw-$scheme-$n.log" >&2; return 1; }
        sleep 0.1
    done
    "$B/tests/bench/bench_gw" client "$url" --cacert "$T/pki/ca.crt" --warmup 0 --seconds 3600 >"$T/client-$scheme-$n.log" 2>&1
    kill -TERM $gp
    wait $gp 2>/dev/null
    kill $sp 2>/dev/null
    wait $sp 2>/dev/null
    ir_total "$T/cg-$scheme-$n"
}

echo "insn_per_mb: $B (user-space instructions, valgrind --tool=callgrind)"
for scheme in tcp ws tls; do
    want $scheme || continue
    a=$(fwd "$N1" $scheme) && b=$(fwd "$N2" $scheme) || continue
    echo "$scheme" "$a" "$b" | awk -v n1="$N1" -v n2="$N2" -v f="$FRAME" '{
        mb = (n2 - n1) * f / 1e6;
        printf "tracegated %s forwarding: %.0f instructions per MB (%d vs %d frames: %.0f vs %.0f)\n", $1, ($3 - $2) / mb, n1, n2, $2, $3 }'
done

if want service; then
    out=$T/cg-service
    TG_BENCH_WHATIF=1 TG_BENCH_NO_PIN=1 TG_BENCH_READ_ROUNDS=${INSN_ROUNDS:-2} \
        $LT valgrind --tool=callgrind --callgrind-out-file="$out" "$B/tests/bench/bench_service" 0.2 >"$T/service.log" 2>&1
    bytes=$(sed -n 's/.*read_bytes=\([0-9]*\).*/\1/p' "$T/service.log")
    replies=$(sed -n 's/.*read_replies=\([0-9]*\).*/\1/p' "$T/service.log")
    callgrind_annotate --inclusive=yes --threshold=100 "$out" >"$T/service.annotate" 2>/dev/null
    fn() { grep -E "[ :]$1( |$|\\[)" "$T/service.annotate" | head -n 1 | awk '{ gsub(",", "", $1); print $1 }'; }
    ob=$(fn on_batch)
    sf=$(fn sock_flush)
    echo "${bytes:-0} ${replies:-0} ${ob:-0} ${sf:-0}" | awk '{
        mb = $1 / 1e6;
        if (mb <= 0) { print "service read-out: no bytes read"; exit }
        printf "service read-out: %.0f instructions per MB in on_batch, %.0f with sock_flush (%.1f MB in %d replies)\n",
            $3 / mb, ($3 + $4) / mb, mb, $2 }'
fi
