#!/bin/sh
# test_link_onepath.sh: OnePath across a gateway link (docs/onepath.md, "In tracegated"). Two
# nodes with ONEPATH_TRACE_ENABLE=1 write spans to their own NDJSON files; a WebSocket client on
# nodea asks nodeb's service through the link with ?traceparent=. Then every span of the request
# is in the client's trace on both nodes; each nodeb SERVER span's parent is a nodea CLIENT span
# (the context crossed the link in the ATTACH record, not inside the IPC frame, which the service
# answered as usual); nodea's /metrics carries OnePath's metrics (onepath_e2e_latency from the
# attachment's send time) next to the gateway's; nodeb's --otlp-file holds the same spans as its
# NDJSON file, as OTLP/JSON lines.
# Environment (from `make check`): TG_BUILDDIR, TG_SRCDIR. Exit 77 = skipped.
REC_TAG=link-op
. "$(dirname "$0")/record_lib.sh"

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
_ready_or_gone() { grep -q "tracegated .* ready" "$1" 2>/dev/null || ! kill -0 "$2" 2>/dev/null; }

# start NAME PORT ARGS...: tracegated NAME tracing into $T/NAME.spans.ndjson (unless TRACING=0);
# 0 when it came up
start() {
    name=$1
    shift
    ONEPATH_TRACE_ENABLE=${TRACING:-1} ONEPATH_TRACE_SAMPLE_RATIO=1.0 ONEPATH_TRACE_NDJSON_PATH="$T/$name.spans.ndjson" \
        ONEPATH_TRACE_FLUSH_MS=50 ONEPATH_METRICS_ENABLE=1 \
        "$TRACEGATED" --node-name "$name" --producer-socket "$T/$name-p.sock" --consumer-socket "$T/$name-c.sock" \
        "$@" >"$T/$name.log" 2>&1 &
    NODE_PID=$!
    wait_for 30 _ready_or_gone "$T/$name.log" "$NODE_PID"
    kill -0 "$NODE_PID" 2>/dev/null
}
# link_up A B [ARGS...]: node B listening for links (with ARGS), node A with an HTTP port dialing
# it; sets A_PID, B_PID, HP (A's HTTP port) and waits until A sees B up
link_up() {
    a=$1 b=$2
    shift 2
    for try in 1 2 3 4 5; do
        LP=$(free_port)
        start "$b" --no-http --listen-link "tcp://127.0.0.1:$LP" "$@" && break
    done
    kill -0 "$NODE_PID" 2>/dev/null || fail "$b did not start"
    B_PID=$NODE_PID
    for try in 1 2 3 4 5; do
        HP=$(free_port)
        start "$a" --http "127.0.0.1:$HP" --peer "tcp://127.0.0.1:$LP" && break
    done
    kill -0 "$NODE_PID" 2>/dev/null || fail "$a did not start"
    A_PID=$NODE_PID
    PIDS="$PIDS $A_PID $B_PID"
    linked() { tg_timeout 10 "$TRACECTL" nodes "ws://127.0.0.1:$HP/traced" 2>/dev/null | grep -q "^$b  *up "; }
    wait_for 30 linked || fail "the link $a -> $b did not come up"
}
link_up nodea nodeb --otlp-file "$T/nodeb.otlp.jsonl"
grep -q "OnePath: tracing on, metrics on" "$T/nodea.log" || fail "nodea did not start OnePath"
grep -q "OnePath spans exported as OTLP/JSON lines to $T/nodeb.otlp.jsonl" "$T/nodeb.log" ||
    fail "nodeb did not take --otlp-file: $(grep -i onepath "$T/nodeb.log")"

TRACE_ID=4bf92f3577b34da6a3ce929d0e0e4736
TP="00-$TRACE_ID-00f067aa0ba902b7-01"
tg_timeout 20 "$TRACECTL" query "ws://127.0.0.1:$HP/traced/nodeb?traceparent=$TP" >"$T/query.txt" 2>&1 ||
    fail "query through the link failed: $(cat "$T/query.txt")"
grep -q "^Service: tracegate" "$T/query.txt" || fail "nodeb's service did not answer: $(cat "$T/query.txt")"

# /metrics on nodea: OnePath's families, with the link's e2e latency observed on nodea (replies)
"$B/tests/integration/gw_testclient" http-get "127.0.0.1:$HP" /metrics >"$T/metrics.txt" 2>&1 || fail "/metrics failed"
grep -q '^onepath_e2e_latency_count [1-9]' "$T/metrics.txt" ||
    fail "no OnePath e2e latency on /metrics: $(grep onepath "$T/metrics.txt" | head)"
grep -q '^tracegated_' "$T/metrics.txt" || fail "the gateway's own metrics are gone"

# stop both (SIGTERM flushes the span files), then read the spans
kill "$A_PID" "$B_PID"
wait_exit "$A_PID" 30
wait_exit "$B_PID" 30
python3 - "$T/nodea.spans.ndjson" "$T/nodeb.spans.ndjson" "$TRACE_ID" <<'PY' || fail "the spans do not connect across the link"
import json, sys
a = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
b = [json.loads(l) for l in open(sys.argv[2]) if l.strip()]
tid = sys.argv[3]
ta = [s for s in a if s["trace_id"] == tid]
tb = [s for s in b if s["trace_id"] == tid]
print(f"nodea: {len(ta)} of {len(a)} spans in the client's trace; nodeb: {len(tb)} of {len(b)}")
assert ta and tb, "both nodes have spans in the client's trace"
opens = [s for s in ta if s["name"] == "link.channel.open" and s["kind"] == "CLIENT"]
assert opens and opens[0]["parent_span_id"] == "00f067aa0ba902b7", "the channel hangs under the client's span"
clients = {s["span_id"]: s for s in ta if s["kind"] == "CLIENT" and s["name"].startswith("ipc.")}
servers = [s for s in tb if s["kind"] == "SERVER" and s["name"].startswith("ipc.")]
assert clients and servers, (len(clients), len(servers))
linked = [s for s in servers if s["parent_span_id"] in clients]
assert len(linked) == len(servers), f"{len(servers) - len(linked)} nodeb SERVER spans lack a nodea parent"
names = {s["name"] for s in linked}
assert "ipc.BindService" in names and "ipc.InvokeMethod" in names, names
# replies went back the same way: nodeb PRODUCER spans are parents of nodea CONSUMER spans
producers = {s["span_id"] for s in tb if s["kind"] == "PRODUCER"}
consumers = [s for s in ta if s["kind"] == "CONSUMER"]
assert consumers and all(s["parent_span_id"] in producers for s in consumers)
print("ok:", len(linked), "requests and", len(consumers), "replies crossed the link with their context")
PY
# --otlp-file: the same spans (ids, names) as the NDJSON file, in OTLP/JSON's encoding
python3 - "$T/nodeb.spans.ndjson" "$T/nodeb.otlp.jsonl" <<'PY' || fail "nodeb's --otlp-file does not hold its spans"
import json, sys
nd = {(s["trace_id"], s["span_id"], s["name"]) for s in (json.loads(l) for l in open(sys.argv[1]) if l.strip())}
ot = set()
for line in open(sys.argv[2]):
    if line.strip():
        for rs in json.loads(line)["resourceSpans"]:
            for ss in rs["scopeSpans"]:
                ot |= {(s["traceId"], s["spanId"], s["name"]) for s in ss["spans"]}
assert nd and ot == nd, f"{len(nd)} NDJSON spans, {len(ot)} OTLP spans, {len(nd ^ ot)} differ"
print("ok:", len(ot), "spans in both exports")
PY
# metrics without tracing: the link carries the send time alone, nodea's /metrics still observes
# the e2e latency of nodeb's replies, and no span is made on either node
TRACING=0
link_up nodea2 nodeb2
grep -q "OnePath: tracing off, metrics on" "$T/nodea2.log" || fail "nodea2 did not start OnePath's metrics"
tg_timeout 20 "$TRACECTL" query "ws://127.0.0.1:$HP/traced/nodeb2" >"$T/query2.txt" 2>&1 ||
    fail "query through the metrics-only link failed: $(cat "$T/query2.txt")"
"$B/tests/integration/gw_testclient" http-get "127.0.0.1:$HP" /metrics >"$T/metrics2.txt" 2>&1 || fail "/metrics failed"
grep -q '^onepath_e2e_latency_count [1-9]' "$T/metrics2.txt" ||
    fail "metrics without tracing: no e2e latency on /metrics: $(grep onepath_e2e "$T/metrics2.txt" | head -3)"
grep -q '^onepath_msgs_recv [1-9]' "$T/metrics2.txt" || fail "metrics without tracing: no messages counted"
kill "$A_PID" "$B_PID"
wait_exit "$A_PID" 30
wait_exit "$B_PID" 30
for n in nodea2 nodeb2; do
    [ ! -s "$T/$n.spans.ndjson" ] || fail "$n made spans with tracing off"
done
echo "ok: metrics without tracing observe the link's e2e latency, and make no spans"

echo "PASS: OnePath spans and metrics across a link"
