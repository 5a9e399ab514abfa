#!/bin/sh
# test_link_spans.sh: a hub fetches every node's finished OnePath spans over the links
# (TracegateFleet.Spans, `tracectl spans`, docs/onepath.md "Fetching spans over links"). Four
# tracegated on loopback with ONEPATH_TRACE_ENABLE=1 and no span file (the in-memory store alone):
# hub "nodea" links to "nodeb" and "nodec", whose link-roles grant spans, and to "noded", whose
# link-roles do not. One query with a W3C traceparent on /traced/@nodeb,nodec crosses to both.
# Checked: `tracectl spans` through the hub gets spans of that one trace id from all three nodes,
# the remote SERVER spans hanging under the hub's CLIENT spans; with --cursor a second fetch
# repeats none of the first; a token without the spans role is refused (and logged) while the
# connection stays, one with only that role reads; an undecodable and an oversized Spans request
# are refused the same way; noded refuses and the hub relays why while nodeb still answers;
# `record --nodes ... --spans @fleet` stitches the fleet's spans into the trace with flows, the
# hub's own on the host, and `tracectl dump --flows` links every one of them, some from the hub's
# slices to the nodes' machines; /metrics counts the store.
# Environment (from `make check`): TG_BUILDDIR, TG_SRCDIR. Exit 77 = skipped.
REC_TAG=link-spans
. "$(dirname "$0")/record_lib.sh"
. "$(dirname "$0")/tp_lib.sh"
command -v python3 >/dev/null 2>&1 || { echo "SKIP: python3 is not available"; exit 77; }

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
_ready_or_gone() { grep -q "tracegated .* ready" "$1" 2>/dev/null || ! kill -0 "$2" 2>/dev/null; }

# start NAME ARGS...: tracegated NAME with OnePath tracing into memory only; "@PORT@" in ARGS is a
# free port (a node that loses the race for it exits and is retried). Sets NODE_PORT, NODE_PID.
_try() {
    name=$1 port=$2
    shift 2
    n=$#
    for a in "$@"; do set -- "$@" "$(printf '%s' "$a" | sed "s/@PORT@/$port/g")"; done
    shift "$n"
    ONEPATH_TRACE_ENABLE=1 ONEPATH_TRACE_SAMPLE_RATIO=1.0 ONEPATH_TRACE_FLUSH_MS=50 \
        "$TRACEGATED" --node-name "$name" --producer-socket "$T/$name-p.sock" --consumer-socket "$T/$name-c.sock" \
        "$@" >"$T/$name.log" 2>&1 &
    NODE_PID=$!
    wait_for 30 _ready_or_gone "$T/$name.log" "$NODE_PID"
    kill -0 "$NODE_PID" 2>/dev/null
}
start() {
    name=$1
    shift
    for try in 1 2 3 4 5 6; do
        NODE_PORT=$(free_port)
        rm -f "$T/$name-p.sock" "$T/$name-c.sock"
        if _try "$name" "$NODE_PORT" "$@"; then
            PIDS="$PIDS $NODE_PID"
            "$DEMO" --producer-socket "$T/$name-p.sock" --name "demo-$name" --duration 1200 \
                >"$T/demo-$name.log" 2>&1 &
            PIDS="$PIDS $!"
            return 0
        fi
        wait "$NODE_PID" 2>/dev/null
        cp "$T/$name.log" "$T/$name.try$try.txt"
    done
    fail "$name did not start: $(cat "$T/$name.log")"
}

# tokens: "rec" may record but not read spans, "reader" may read spans and nothing else
RTOK=$("$TRACEGATED" --gen-token 2>/dev/null)
STOK=$("$TRACEGATED" --gen-token 2>/dev/null)
[ -n "$RTOK" ] && [ -n "$STOK" ] || fail "tracegated --gen-token printed nothing"
{
    echo "rec recorder $(printf %s "$RTOK" | "$TRACEGATED" --hash-token)"
    echo "reader spans $(printf %s "$STOK" | "$TRACEGATED" --hash-token)"
} >"$T/tokens"

ROLES=observer,recorder,producer,spans
start nodeb --no-http --listen-link "tcp://127.0.0.1:@PORT@" --link-roles "$ROLES"
PORT_B=$NODE_PORT PID_B=$NODE_PID
start nodec --no-http --listen-link "tcp://127.0.0.1:@PORT@" --link-roles "$ROLES"
PORT_C=$NODE_PORT PID_C=$NODE_PID
start noded --no-http --listen-link "tcp://127.0.0.1:@PORT@" # default link-roles: no spans
PORT_D=$NODE_PORT
start nodea --http "127.0.0.1:@PORT@" --token-file "$T/tokens" --peer "tcp://127.0.0.1:$PORT_B" \
    --peer "tcp://127.0.0.1:$PORT_C" --peer "tcp://127.0.0.1:$PORT_D"
HUB=ws://127.0.0.1:$NODE_PORT/traced PID_A=$NODE_PID
HTTP=127.0.0.1:$NODE_PORT
grep -q "OnePath: tracing on" "$T/nodea.log" || fail "nodea did not start OnePath"

fleet_ready() {
    tg_timeout 10 "$TRACECTL" nodes "$HUB" >"$T/nodes.txt" 2>&1 || return 1
    grep -q '^nodeb  *up ' "$T/nodes.txt" && grep -q '^nodec  *up ' "$T/nodes.txt" && grep -q '^noded  *up ' "$T/nodes.txt"
}
wait_for 60 fleet_ready || fail "the fleet did not come up: $(cat "$T/nodes.txt")"
for n in nodea nodeb nodec; do
    wait_for_line 30 "$T/demo-$n.log" "registered with the tracing service" || fail "demo-$n did not register"
done

# ---- one traced request that crosses to nodeb and nodec ----
TRACE_ID=5af7651916cd43dd8448eb211c80319c
TP="00-$TRACE_ID-b7ad6b7169203331-01"
tg_timeout 30 "$TRACECTL" query "$HUB/@nodeb,nodec?traceparent=$TP" >"$T/query.txt" 2>&1 ||
    fail "the federated query failed: $(cat "$T/query.txt")"

# check_trace FILE: the trace's spans come from all three nodes and connect across the links
check_trace() {
    python3 - "$1" "$TRACE_ID" <<'PY'
import json, sys
spans = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
tid = sys.argv[2]
mine = [s for s in spans if s["trace_id"] == tid]
by_node = {}
for s in mine:
    by_node.setdefault(s["resource"].get("tracegate.node"), []).append(s)
print("spans of the trace per node:", {k: len(v) for k, v in by_node.items()})
assert set(by_node) >= {"nodea", "nodeb", "nodec"}, sorted(by_node)
clients = {s["span_id"] for s in by_node["nodea"] if s["kind"] == "CLIENT"}
for n in ("nodeb", "nodec"):
    servers = [s for s in by_node[n] if s["kind"] == "SERVER"]
    assert servers and all(s["parent_span_id"] in clients for s in servers), n
ids = [s["span_id"] for s in spans]
assert len(ids) == len(set(ids)), "a span fetched twice"
PY
}
# spans reach the store at the exporter's next flush (50 ms here): wait until all three are there
all_there() { tg_timeout 30 "$TRACECTL" spans "$HUB" --nodes nodea,nodeb,nodec -o "$T/probe.ndjson" 2>"$T/probe.err" && check_trace "$T/probe.ndjson" >/dev/null 2>&1; }
wait_for 60 all_there || fail "the hub never got the trace's spans from all three nodes: $(cat "$T/probe.err")"

# ---- with a cursor: the first fetch has the trace, a second repeats nothing ----
"$TRACECTL" spans "$HUB" --nodes nodea,nodeb,nodec --cursor "$T/cursor" -o "$T/first.ndjson" 2>"$T/first.err" ||
    fail "the first fetch failed: $(cat "$T/first.err")"
check_trace "$T/first.ndjson" || fail "the first fetch lacks the trace's spans: $(cat "$T/first.err")"
grep -q '^nodeb [1-9]' "$T/cursor" && grep -q '^nodec [1-9]' "$T/cursor" || fail "no cursors saved: $(cat "$T/cursor")"
"$TRACECTL" spans "$HUB" --nodes nodea,nodeb,nodec --cursor "$T/cursor" -o "$T/second.ndjson" 2>"$T/second.err" ||
    fail "the second fetch failed: $(cat "$T/second.err")"
python3 - "$T/first.ndjson" "$T/second.ndjson" <<'PY' || fail "the second fetch repeated spans"
import json, sys
a = {json.loads(l)["span_id"] for l in open(sys.argv[1]) if l.strip()}
b = [json.loads(l)["span_id"] for l in open(sys.argv[2]) if l.strip()]
print(f"first fetch {len(a)} spans, second {len(b)} (spans finished since), repeated {len(a & set(b))}")
assert a and not (a & set(b)) and len(b) == len(set(b))
PY

# ---- refusals: the connection stays, the node logs who and why ----
if "$TRACECTL" --token "$RTOK" spans "$HUB" --all -o "$T/rec.ndjson" >"$T/rec.out" 2>&1; then
    fail "a recorder token read spans: $(cat "$T/rec.out")"
fi
[ ! -s "$T/rec.ndjson" ] || fail "a recorder token got spans"
wait_for_line 10 "$T/nodea.log" "denied TracegateFleet.Spans to .*token:rec" || fail "the refusal is not logged"
# the spans role alone is enough (the far nodes see node:nodea/token:reader with their link-roles)
"$TRACECTL" --token "$STOK" spans "$HUB" --nodes nodea,nodeb,nodec -o "$T/reader.ndjson" >"$T/reader.out" 2>&1 ||
    fail "a spans token could not read spans: $(cat "$T/reader.out")"
check_trace "$T/reader.ndjson" >/dev/null || fail "a spans token got no trace spans: $(cat "$T/reader.out")"
"$TRACECTL" --token "$STOK" query "$HUB" >"$T/reader-query.out" 2>&1 && fail "a spans token could query the service"
"$TRACECTL" spans "$HUB" --test-raw-args ff >"$T/raw.out" 2>&1 && fail "an undecodable request was answered"
grep -q "^refused" "$T/raw.out" && grep -q "^still connected" "$T/raw.out" ||
    fail "an undecodable request was not refused cleanly: $(cat "$T/raw.out")"
wait_for_line 10 "$T/nodea.log" "undecodable Spans request refused" || fail "the undecodable request is not logged"
BIG=$(python3 -c 'print("0a" + "fe04" + "61" * 638)') # field 1, 638 bytes: over the 512-byte limit
"$TRACECTL" spans "$HUB" --test-raw-args "$BIG" >"$T/big.out" 2>&1 && fail "an oversized request was answered"
grep -q "^refused" "$T/big.out" && grep -q "^still connected" "$T/big.out" ||
    fail "an oversized request was not refused cleanly: $(cat "$T/big.out")"
wait_for_line 10 "$T/nodea.log" "Spans request of 641 bytes refused" || fail "the oversized request is not logged"
# noded's link-roles lack spans: it refuses, the hub relays why, the others still answer
"$TRACECTL" spans "$HUB" --nodes nodeb,noded -o "$T/mixed.ndjson" >"$T/mixed.out" 2>&1 &&
    fail "noded served spans without the role: $(cat "$T/mixed.out")"
grep -q "node noded: .*spans" "$T/mixed.out" || fail "noded's refusal is not reported: $(cat "$T/mixed.out")"
grep -q "node nodeb: [0-9]* spans" "$T/mixed.out" || fail "nodeb did not answer beside noded: $(cat "$T/mixed.out")"
grep -q "denied TracegateFleet.Spans to .*node:nodea/" "$T/noded.log" || fail "noded did not log the refusal"

# ---- record --all --spans @fleet: the fleet's spans stitched into the merged trace ----
"$TRACECTL" record "$HUB?traceparent=$TP" --nodes nodea,nodeb,nodec --duration 1s --no-progress \
    --spans @fleet -o "$T/fleet.pftrace" >"$T/record.log" 2>&1 || fail "record --spans @fleet failed: $(cat "$T/record.log")"
[ -s "$T/fleet.pftrace.spans.ndjson" ] || fail "record fetched no spans: $(cat "$T/record.log")"
grep -Eq "stitched [1-9][0-9]* spans .* [1-9][0-9]* flows" "$T/record.log" ||
    fail "the spans were not stitched with flows: $(cat "$T/record.log")"
for n in nodea nodeb nodec; do
    grep -q "node $n: [1-9][0-9]* spans" "$T/record.log" || fail "no spans of $n in the recording: $(cat "$T/record.log")"
done
# the hub's own spans are the trace's host (machine 0), the others' on their machines' clocks
grep -q "on remote machines' clocks" "$T/record.log" && ! grep -q "machines the trace does not know" "$T/record.log" ||
    fail "the spans were not placed through the nodes' clocks: $(cat "$T/record.log")"
# every stitched flow (between the nodes' tracegated tracks; the demo producers' own flows run
# between their main and worker threads) is linked when the trace is read as trace processor reads
# it (the nodes' spans on the host clock after each machine's RemoteClockSync offset, flow ids per
# machine), and arrows leave the hub's main thread for each node's
stitched=$(sed -n 's/.*stitched [0-9]* spans .* with \([0-9]*\) flows.*/\1/p' "$T/record.log")
"$TRACECTL" dump --flows "$T/fleet.pftrace" >"$T/flows.txt" 2>&1 || fail "dump --flows: $(tail -n 3 "$T/flows.txt")"
linked=$(grep -c -E '^"[^"]*" on "tracegated[^"]*" -> "[^"]*" on "tracegated[^"]*"' "$T/flows.txt")
[ "$linked" -eq "$stitched" ] || fail "$stitched flows stitched, $linked linked: $(cat "$T/flows.txt")"
for pid in $PID_B $PID_C; do
    grep -q "^\"[^\"]*\" on \"tracegated $PID_A\" -> \"[^\"]*\" on \"tracegated $pid\"" "$T/flows.txt" ||
        fail "no arrow from the hub ($PID_A) to the node $pid: $(head -n 20 "$T/flows.txt")"
done
# the same in Perfetto's own trace processor (tp_lib.sh; skipped where it is not installed): no
# import error, every stitched flow in its flow table, each from a slice that begins first, and
# arrows from the hub's track to tracks of both nodes' machines
if tp_available; then
    tp_import_ok "$T/fleet.pftrace"
    tp_rows "$T/fleet.pftrace" "select count(*) from flow f join slice s on s.id = f.slice_out join slice e on e.id = f.slice_in
        where s.category = 'onepath' and e.category = 'onepath' and e.ts >= s.ts" >"$T/tp_flows.txt"
    [ "$(cat "$T/tp_flows.txt")" -eq "$stitched" ] || fail "trace processor links $(cat "$T/tp_flows.txt") of $stitched flows"
    tp_rows "$T/fleet.pftrace" "select distinct pt.name from flow f join slice s on s.id = f.slice_out
        join slice e on e.id = f.slice_in join track st on st.id = s.track_id join track et on et.id = e.track_id
        join track pt on pt.id = et.parent_id where st.name = 'tracegated $PID_A' and pt.name like '% on machine %'" >"$T/tp_to.txt"
    for n in nodeb nodec; do
        grep -q "^tracegated [0-9]* ($n) on machine [0-9]*$" "$T/tp_to.txt" ||
            fail "trace processor has no arrow from the hub to $n: $(cat "$T/tp_to.txt")"
    done
    echo "trace processor: $stitched flows linked, the hub's arrows reach nodeb and nodec"
fi

# ---- /metrics: the store on the hub ----
"$B/tests/integration/gw_testclient" http-get "$HTTP" /metrics >"$T/metrics.txt" 2>&1 || fail "/metrics failed"
grep -q '^tracegated_spans_kept [1-9]' "$T/metrics.txt" && grep -q '^tracegated_spans_read_total [1-9]' "$T/metrics.txt" &&
    grep -q '^tracegated_spans_dropped_total{reason="evicted"} ' "$T/metrics.txt" ||
    fail "/metrics lacks the span store: $(grep spans "$T/metrics.txt")"
echo "PASS: the hub fetched every node's spans over the links"
