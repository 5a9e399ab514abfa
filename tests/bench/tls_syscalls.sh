#!/bin/sh
# tls_syscalls.sh: syscalls of tracegated forwarding a TLS stream, per TLS data path
# (docs/gateway.md, "TLS data path"): bench_gw server --frames N (64 KiB frames over UNIX) ->
# tracegated (tls:// consumer listener, --tls-path P) -> bench_gw client tls://, with tracegated
# under `strace -c -f`; prints the calls that move bytes (write, writev, sendmsg, read, readv,
# recvmsg) and all calls, per MB forwarded. Counts, not times: valid on a busy machine.
# TLS_RR=N counts small request/reply calls instead (N QueryCapabilities round trips; per call).
# Not part of `make bench`. Usage, from a (preferably non-sanitizer) build directory:
#   sh ../tests/bench/tls_syscalls.sh          (TLS_PATHS="socket batched", TLS_FRAMES=1500)
#   TLS_RR=1000 sh ../tests/bench/tls_syscalls.sh
set -u
B=${TG_BUILDDIR:-$(pwd)}
N=${TLS_FRAMES:-1500}
RR=${TLS_RR:-0}
if [ "$RR" -gt 0 ]; then
    SERVER_ARGS="" CLIENT_ARGS="--rr $RR"
else
    SERVER_ARGS="--frames $N" CLIENT_ARGS="--seconds 3600" # the server's stream ends the client
fi
PATHS=${TLS_PATHS:-socket batched}
FRAME=65554
command -v strace >/dev/null 2>&1 || { echo "tls_syscalls: strace is needed"; exit 1; }
ONLY=""
. "$(dirname "$0")/script_lib.sh"
bench_init tlssys
bash "$(dirname "$0")/../../certs/make-dev-pki.sh" "$T/pki" >/dev/null 2>&1 || { echo "tls_syscalls: no PKI"; exit 1; }

for path in $PATHS; do
    sock=$T/s-$path.sock
    # shellcheck disable=SC2086 # SERVER_ARGS is a list of arguments
    "$B/tests/bench/bench_gw" server "$sock" $SERVER_ARGS >"$T/server-$path.log" 2>&1 &
    sp=$!
    PIDS="$PIDS $sp"
    port=$("$B/tests/integration/gw_testclient" free-port)
    "$B/libtool" --mode=execute strace -c -f -o "$T/strace-$path.txt" "$B/gateway/tracegated" --upstream-consumer "$sock" \
        --listen "consumer=tls://127.0.0.1:$port" --tls-cert "$T/pki/server.crt" --tls-key "$T/pki/server.key" \
        --no-http --producer-socket "$T/p-$path.sock" --consumer-socket "$T/c-$path.sock" --log-level warn \
        --tls-path "$path" >"$T/gw-$path.log" 2>&1 &
    gp=$!
    PIDS="$PIDS $gp"
    i=0
    until "$B/tests/bench/bench_gw" client "tls://127.0.0.1:$port" --cacert "$T/pki/ca.crt" --rr 1 >/dev/null 2>&1; do
        i=$((i + 1))
        [ $i -lt 600 ] && kill -0 $gp 2>/dev/null || { echo "tls_syscalls: tracegated did not start"; cat "$T/gw-$path.log"; exit 1; }
        sleep 0.1
    done
    # shellcheck disable=SC2086 # CLIENT_ARGS is a list of arguments
    "$B/tests/bench/bench_gw" client "tls://127.0.0.1:$port" --cacert "$T/pki/ca.crt" --warmup 0 $CLIENT_ARGS \
        >"$T/client-$path.log" 2>&1
    kill -TERM $(pgrep -P $gp) # tracegated, traced by strace, which then prints its table and exits
    wait $gp 2>/dev/null
    kill $sp 2>/dev/null
    wait $sp 2>/dev/null
    if [ "$RR" -gt 0 ]; then
        # the readiness probes above made calls too: counted per call of the measured run, the
        # start-up (handshakes of the probes) adds a fraction of a call
        awk -v path="$path" -v n="$RR" '
            NR > 2 && $NF != "total" && $4 + 0 >= n / 2 { c[$NF] = $4 }
            $NF == "total" { total = $4 }
            END {
                printf "tls-path %s: %d request/reply calls:", path, n
                for (k in c) printf " %s=%.2f", k, c[k] / n
                printf " all=%.2f per call\n", total / n
            }' "$T/strace-$path.txt"
        continue
    fi
    awk -v path="$path" -v n="$N" -v f="$FRAME" '
        $NF ~ /^(write|writev|sendmsg|sendto|read|readv|recvmsg|recvfrom)$/ { c[$NF] = $4 }
        $NF == "total" { total = $4 }
        END {
            mb = n * f / 1e6
            printf "tls-path %s: %d frames (%.0f MB):", path, n, mb
            for (k in c) printf " %s=%d (%.1f/MB)", k, c[k], c[k] / mb
            printf " all=%d (%.1f/MB)\n", total, total / mb
        }' "$T/strace-$path.txt"
done
