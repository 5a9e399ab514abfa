#!/bin/sh
# test_gw_output_path.sh: TraceConfig.output_path makes the tracing service create the trace file
# itself, with its own rights, at a path the client chose. Through tracegated only root and the
# gateway's own user may ask for that: a recorder token (and, when the test runs as root, another
# local user) gets EnableTracing refused with a clear error and no file appears, both on a gateway
# with the embedded service and on a gateway bridging to an upstream service that would honour it
# (the upstream sees the gateway's uid); the refusal is logged and counted on /metrics. The local
# admin still gets its file. Exit 77 = skipped.
set -u
. "$(dirname "$0")/gw_lib.sh"
need "$TRACEGATED" "$TRACECTL" "$CLIENT"

REC_TOKEN="rec-$(date +%s%N)-secret"
{
    echo "# test tokens"
    echo "alice recorder $(printf %s "$REC_TOKEN" | "$TRACEGATED" --hash-token)"
} >"$T/tokens"
chmod 600 "$T/tokens"

config() { # config FILE OUTPUT_PATH
    cat >"$1" <<EOF
buffers { size_kb: 1024 }
data_sources { config { name: "track_event" } }
duration_ms: 300
write_into_file: true
output_path: "$2"
EOF
}

# A: the embedded service; B: a gateway bridging to A's consumer socket, as to a traced.
start_gw_http gwA --token-file "$T/tokens" --listen "consumer=tcp://127.0.0.1:0?auth=token" \
    --listen "consumer=tcp://127.0.0.1:0" --local-user-roles recorder
A_TOK=$(gw_addr gwA 1)
A_OPEN=$(gw_addr gwA 2)
A_HTTP=$HTTP_PORT
start_gw gwB --no-http --upstream-consumer "$T/gwA-c.sock" --token-file "$T/tokens" \
    --listen "consumer=tcp://127.0.0.1:0?auth=token"
B_TOK=$(gw_addr gwB 1)
[ -n "$A_TOK" ] && [ -n "$A_OPEN" ] && [ -n "$B_TOK" ] || fail "listener addresses missing"

refused() { # refused LABEL URL OUTPUT_PATH [tracectl options...]
    label=$1 url=$2 out=$3
    shift 3
    config "$T/$label.txtpb" "$out"
    if tg_timeout 30 "$TRACECTL" "$@" record "$url" -c "$T/$label.txtpb" --no-progress >"$T/$label.out" 2>&1; then
        fail "$label: record with output_path succeeded: $(cat "$T/$label.out")"
    fi
    grep -q "output_path" "$T/$label.out" || fail "$label: tracectl did not say why: $(cat "$T/$label.out")"
    [ ! -e "$out" ] || fail "$label: the service created $out"
    echo "ok: $label refused: $(grep -m1 output_path "$T/$label.out")"
}

# a recorder token on the embedded service's gateway
refused token-embedded "tcp://$A_TOK" "$T/evil-a.pftrace" --token "$REC_TOKEN"
grep -q "refused EnableTracing from 127.0.0.1:[0-9]* (token:alice): its config names an output_path" "$T/gwA.log" ||
    fail "gwA did not log the refusal"
# ... and on a gateway in front of an upstream service that would create it (it sees gwB's uid)
refused token-bridged "tcp://$B_TOK" "$T/evil-b.pftrace" --token "$REC_TOKEN"
grep -q "refused EnableTracing from 127.0.0.1:[0-9]* (token:alice): its config names an output_path" "$T/gwB.log" ||
    fail "gwB did not log the refusal"

# another local user (recorder through --local-user-roles), when the test can become one
if [ "$(id -u)" = 0 ] && command -v setpriv >/dev/null 2>&1; then
    chmod 755 "$T"
    config "$T/other.txtpb" "$T/evil-u.pftrace"
    chmod 644 "$T/other.txtpb"
    if tg_timeout 30 setpriv --reuid=65534 --regid=65534 --clear-groups "$TRACECTL" record "tcp://$A_OPEN" \
        -c "$T/other.txtpb" --no-progress >"$T/other.out" 2>&1; then
        fail "another local user: record with output_path succeeded: $(cat "$T/other.out")"
    fi
    grep -q "output_path" "$T/other.out" || fail "another local user: no reason given: $(cat "$T/other.out")"
    [ ! -e "$T/evil-u.pftrace" ] || fail "another local user: the service created the file"
    grep -q "(uid:65534): its config names an output_path" "$T/gwA.log" || fail "gwA did not log uid 65534's refusal"
    echo "ok: another local user refused"
    chmod 700 "$T"
else
    echo "note: not root or no setpriv: the other-local-user case is not run"
fi

# counted on /metrics
metrics_count() {
    "$CLIENT" http-get "127.0.0.1:$A_HTTP" /metrics 2>/dev/null |
        awk '$1 == "tracegated_frames_rejected_total{reason=\"output_path\"}" { print $2 }'
}
n=$(metrics_count)
[ -n "$n" ] && [ "$n" -ge 1 ] || fail "tracegated_frames_rejected_total{reason=\"output_path\"} is '$n'"
echo "ok: /metrics counts $n refusal(s)"

# the local admin (this test's own user, the gateway's user) still gets its file, through the
# gateway and on the service's own socket
config "$T/own.txtpb" "$T/own-gw.pftrace"
tg_timeout 30 "$TRACECTL" record "tcp://$A_OPEN" -c "$T/own.txtpb" --no-progress >"$T/own.out" 2>&1 ||
    fail "the gateway's own user could not record into output_path: $(cat "$T/own.out")"
[ -s "$T/own-gw.pftrace" ] || fail "no file at output_path for the gateway's own user"
tg_timeout 20 "$TRACECTL" dump "$T/own-gw.pftrace" --summary >"$T/own.sum" 2>&1 ||
    fail "the file written for the own user is not a trace: $(cat "$T/own.sum")"
config "$T/own2.txtpb" "$T/own-svc.pftrace"
tg_timeout 30 "$TRACECTL" record "unix:$T/gwA-c.sock" -c "$T/own2.txtpb" --no-progress >"$T/own2.out" 2>&1 ||
    fail "the service's own user could not record into output_path on its socket: $(cat "$T/own2.out")"
[ -s "$T/own-svc.pftrace" ] || fail "no file at output_path on the service's socket"
echo "ok: the gateway's own user records into output_path"
echo "PASS"
