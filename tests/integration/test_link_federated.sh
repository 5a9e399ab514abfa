#!/bin/sh
# test_link_federated.sh: one merged trace from three nodes (docs/link-protocol.md §8). Three
# tracegated on loopback, each with its own service and demo producer; hub "nodea" links to
# "nodeb" (whose clock readings are shifted by a known 10 s with --test-clock-offset) and "nodec".
# `tracectl record --all` through the hub must give one trace in which each node's packets carry
# its own machine id on sequences of their own, with a RemoteClockSync for each remote node from
# which trace processor's estimate recovers the injected offset; `--nodes` with a node that cannot
# be reached still records the others and reports that node as failed, in the trace and in
# tracectl's output; an unknown node is refused; /traced/@all over WebSocket records the same way.
# Environment (from `make check`): TG_BUILDDIR, TG_SRCDIR. Exit 77 = skipped.
REC_TAG=link-fed
. "$(dirname "$0")/record_lib.sh"
. "$(dirname "$0")/tp_lib.sh"

OFFSET_NS=10000000000 # nodeb's clocks as it reports them: 10 s ahead

free_port() { # a port nobody listens on now (a node that loses the race exits and is retried)
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# start_node NAME ARGS...: tracegated NAME with its sockets in $T and its own demo producer; every
# "@PORT@" in ARGS becomes a free port (a node that loses a race for it exits and is retried).
# Sets NODE_PORT.
_try_node() {
    name=$1 port=$2
    shift 2
    n=$#
    for a in "$@"; do set -- "$@" "$(printf '%s' "$a" | sed "s/@PORT@/$port/g")"; done
    shift "$n"
    "$TRACEGATED" --node-name "$name" --producer-socket "$T/$name-p.sock" \
        --consumer-socket "$T/$name-c.sock" --listen "consumer=unix:$T/$name-gw.sock" "$@" \
        >"$T/$name.log" 2>&1 &
    NODE_PID=$!
    wait_for 30 _ready_or_gone "$T/$name.log" "$NODE_PID"
    kill -0 "$NODE_PID" 2>/dev/null
}
_ready_or_gone() { grep -q "tracegated .* ready" "$1" 2>/dev/null || ! kill -0 "$2" 2>/dev/null; }
start_node() {
    name=$1
    shift
    for try in 1 2 3 4 5 6; do
        NODE_PORT=$(free_port)
        rm -f "$T/$name-p.sock" "$T/$name-c.sock" "$T/$name-gw.sock"
        if _try_node "$name" "$NODE_PORT" "$@"; then
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

start_node nodeb --no-http --listen-link "tcp://127.0.0.1:@PORT@" --test-clock-offset "$OFFSET_NS"
PORT_B=$NODE_PORT
start_node nodec --no-http --listen-link "tcp://127.0.0.1:@PORT@"
PORT_C=$NODE_PORT
# nodea: the hub; "noded" is a raw node whose socket does not exist (it cannot be recorded)
start_node nodea --peer "tcp://127.0.0.1:$PORT_B" --peer "tcp://127.0.0.1:$PORT_C" \
    --node "noded=unix:$T/nothing-here.sock" --http "127.0.0.1:@PORT@" \
    --export-node "nodeb:producer=$T/nodeb-producer.sock"
HTTP=127.0.0.1:$NODE_PORT
NODEA_PID=$NODE_PID
HUB=unix:$T/nodea-gw.sock

# ---- the fleet is up, each node has its producer, and nodeb's clock has been sampled ----
fleet_ready() {
    tg_timeout 10 "$TRACECTL" nodes "$HUB" >"$T/nodes.txt" 2>&1 || return 1
    grep -q '^nodeb  *up ' "$T/nodes.txt" && grep -q '^nodec  *up ' "$T/nodes.txt" &&
        # the clock offset column of nodeb is filled in once a PING/UPDATE round came back
        awk '$1 == "nodeb" && $6 != "-" { ok = 1 } END { exit !ok }' "$T/nodes.txt"
}
wait_for 60 fleet_ready || fail "the fleet did not come up: $(cat "$T/nodes.txt")"
cat "$T/nodes.txt"
for n in nodea nodeb nodec; do
    wait_for_line 30 "$T/demo-$n.log" "registered with the tracing service" || fail "demo-$n did not register"
done
# /api/status lists the nodes with their state and machine ids
"$B/tests/integration/gw_testclient" http-get "$HTTP" /api/status >"$T/status.json" 2>"$T/status.err" ||
    fail "/api/status: $(cat "$T/status.err")"
python3 - "$T/status.json" <<'PY' || fail "/api/status has no usable node list: $(cat "$T/status.json")"
import json, sys
doc = json.load(open(sys.argv[1]))
body = doc
nodes = {n["name"]: n for n in body["nodes"]}
assert body["node"] == "nodea", body["node"]
assert nodes["nodea"]["state"] == "self"
assert nodes["nodeb"]["state"] == "up" and nodes["nodec"]["state"] == "up", nodes
assert nodes["nodeb"]["machine_id"] != 0 and nodes["nodeb"]["clock_offset_ns"] > 9_000_000_000, nodes["nodeb"]
PY
# /metrics has the links
"$B/tests/integration/gw_testclient" http-get "$HTTP" /metrics >"$T/metrics.txt" 2>&1 || fail "/metrics failed"
grep -q '^tracegated_link_up{node="nodeb"} 1$' "$T/metrics.txt" && grep -q '^tracegated_link_up{node="nodec"} 1$' "$T/metrics.txt" ||
    fail "/metrics does not show both links up: $(grep link "$T/metrics.txt")"
grep -Eq '^tracegated_link_clock_offset_seconds\{node="nodeb"\} (9\.|10\.)' "$T/metrics.txt" ||
    fail "/metrics does not show nodeb's clock offset: $(grep clock "$T/metrics.txt")"
grep -q '^tracegated_fleet_nodes{state="raw"} 1$' "$T/metrics.txt" || fail "/metrics does not count the raw node"
MID_B=$(awk '$1 == "nodeb" { print $4 }' "$T/nodes.txt")
MID_C=$(awk '$1 == "nodec" { print $4 }' "$T/nodes.txt")
[ -n "$MID_B" ] && [ "$MID_B" != 0 ] && [ -n "$MID_C" ] && [ "$MID_C" != 0 ] && [ "$MID_B" != "$MID_C" ] ||
    fail "nodeb and nodec need distinct non-zero machine ids (got '$MID_B' and '$MID_C')"

# record_until_drawn OUT LOG DEMOS... -- TRACECTL-ARGS: record until each named demo drew into the
# session, then Ctrl-C
record_until_drawn() {
    out=$1 log=$2
    shift 2
    demos=""
    while [ "$1" != "--" ]; do demos="$demos $1"; shift; done
    shift
    for d in $demos; do cp "$T/demo-$d.log" "$T/demo-$d.before"; done
    "$TRACECTL" record "$@" --no-progress -o "$out" >"$log" 2>&1 &
    rpid=$!
    for d in $demos; do
        drew_after() { [ "$(grep -c 'first frame drawn' "$T/demo-$1.log")" -gt "$(grep -c 'first frame drawn' "$T/demo-$1.before")" ]; }
        wait_for 60 drew_after "$d" || { kill "$rpid" 2>/dev/null; fail "demo-$d never drew into the session: $(cat "$log")"; }
    done
    kill -INT "$rpid"
    wait_exit "$rpid" 60
    [ "$WAIT_RC" = 0 ] || fail "tracectl record exited with $WAIT_RC: $(cat "$log")"
}

# ---- 0. a query of @all lists every node's producers (the merged QueryServiceState, sent in
# parts under the frame limit when large, decodes as one state) ----
tg_timeout 20 "$TRACECTL" --node @all query "$HUB" >"$T/query-all.txt" 2>&1 || fail "query @all: $(cat "$T/query-all.txt")"
for n in nodea nodeb nodec; do
    grep -q "demo-$n" "$T/query-all.txt" || fail "query @all does not list demo-$n: $(cat "$T/query-all.txt")"
done

# ---- 1. --all: every node, one trace ----
record_until_drawn "$T/all.pftrace" "$T/rec-all.log" nodea nodeb nodec -- "$HUB" --all --ds track_event
cat "$T/rec-all.log"
"$TRACECTL" dump "$T/all.pftrace" --summary >"$T/all.txt" 2>&1 || fail "the merged trace does not decode: $(cat "$T/all.txt")"
cat "$T/all.txt"
for n in nodea nodeb nodec; do
    grep -Eq "^tracectl: +$n +machine [0-9]+ +[1-9][0-9]* packets\$" "$T/rec-all.log" ||
        fail "tracectl does not report packets from $n"
done
grep -Eq "^machines: .*\b$MID_B [1-9]" "$T/all.txt" || fail "no packet carries nodeb's machine id $MID_B"
grep -Eq "^machines: .*\b$MID_C [1-9]" "$T/all.txt" || fail "no packet carries nodec's machine id $MID_C"
# every node's demo drew its slices into the merged trace: three sets of DrawFrame slices on
# sequences of their own (three demos, each with its own writer sequences)
grep -q '"DrawFrame"' "$T/all.txt" || fail "no demo slices in the merged trace"
nseq=$(sed -n 's/^sequences: //p' "$T/all.txt" | tr ',' '\n' | grep -c '[0-9] (')
[ "$nseq" -ge 9 ] || fail "expected the sequences of three nodes (>= 9), got $nseq"
# clock data: nodeb's RemoteClockSync gives back the injected offset, nodec's a small one
est() { sed -n "s/^clock sync: machine $1: [0-9]* round trips, BOOTTIME offset \([-+][0-9]*\) ns.*/\1/p" "$T/all.txt"; }
off_b=$(est "$MID_B")
off_c=$(est "$MID_C")
[ -n "$off_b" ] && [ -n "$off_c" ] || fail "no RemoteClockSync for nodeb or nodec"
awk -v o="$off_b" -v want="$OFFSET_NS" 'BEGIN { d = o - want; if (d < 0) d = -d; exit !(d < 500000000) }' ||
    fail "nodeb's clock offset from the trace is $off_b ns, injected $OFFSET_NS"
awk -v o="$off_c" 'BEGIN { if (o < 0) o = -o; exit !(o < 500000000) }' ||
    fail "nodec's clock offset from the trace is $off_c ns, expected about 0"
# Perfetto's own trace processor: the merged trace imports with no error but one, noded's failure
# (the hub's failure marker for it reads as a failed final flush, data loss a user is shown);
# the machines of the two nodes that recorded, and the clock offset it derives for each node is the one tracectl
# (and the hub) computed: at a synced instant it links the host's BOOTTIME and the machine's in one
# clock_snapshot (without the hub's clock anchor, the second node's was tied to the first node's
# machine instead: the first node's ClockSnapshot had made its BOOTTIME the trace time)
if tp_available; then
    tp_import_ok "$T/all.pftrace" traced_final_flush_failed
    [ "$(tp_rows "$T/all.pftrace" "select sum(value) from stats where name = 'traced_final_flush_failed'")" -eq 1 ] ||
        fail "trace processor does not show noded's failure as one failed final flush"
    [ "$(tp_rows "$T/all.pftrace" "select count(*) from machine where raw_id in ($MID_B, $MID_C)")" -eq 2 ] ||
        fail "trace processor does not see nodeb's and nodec's machines: $(tp_rows "$T/all.pftrace" "select raw_id from machine")"
    for m in "$MID_B:$off_b" "$MID_C:$off_c"; do
        tp_off=$(tp_rows "$T/all.pftrace" "select c.clock_value - h.clock_value from clock_snapshot c
            join clock_snapshot h on h.snapshot_id = c.snapshot_id and h.clock_id = 6 and h.machine_id = 0
            join machine m on m.id = c.machine_id where c.clock_id = 6 and m.raw_id = ${m%%:*}")
        [ -n "$tp_off" ] && awk -v a="$tp_off" -v b="${m#*:}" 'BEGIN { d = a - b; exit !(d <= 2 && d >= -2) }' ||
            fail "trace processor's offset for machine ${m%%:*} is '$tp_off' ns, tracectl's ${m#*:}"
    done
    # and it applies them: each node's DrawFrame slices sit at their own BOOTTIME less the offset
    # (a node whose ClockSnapshots came before any of its timestamps once stayed at its raw
    # times: hours off on machines booted at different times; the hub's anchor packet prevents it)
    "$TRACECTL" dump "$T/all.pftrace" >"$T/all-packets.txt" 2>&1 || fail "dump of the merged trace"
    for m in "$MID_B:$off_b" "$MID_C:$off_c"; do
        raw=$(grep 'SLICE_BEGIN "DrawFrame"' "$T/all-packets.txt" | grep "machine=${m%%:*}\$" |
            sed -n 's/.* ts=\([0-9]*\).*/\1/p' | sort -n | head -n 1)
        placed=$(tp_rows "$T/all.pftrace" "select min(s.ts) from slice s join thread_track tt on tt.id = s.track_id
            join thread t using (utid) join machine m on m.id = t.machine_id where s.name = 'DrawFrame' and m.raw_id = ${m%%:*}")
        [ -n "$raw" ] && [ -n "$placed" ] || fail "no DrawFrame of machine ${m%%:*} (raw '$raw', placed '$placed')"
        awk -v r="$raw" -v p="$placed" -v o="${m#*:}" 'BEGIN { d = r - p - o; exit !(d <= 2 && d >= -2) }' ||
            fail "trace processor put machine ${m%%:*}'s first DrawFrame at $placed, its own clock says $raw, offset ${m#*:}"
    done
    echo "trace processor: nodeb's and nodec's machines, offsets $off_b and $off_c ns as tracectl derived them, and applied"
fi

# ---- 2. --nodes with a node that cannot be recorded: the others are, the failure is reported ----
record_until_drawn "$T/some.pftrace" "$T/rec-some.log" nodeb -- "$HUB" --nodes nodeb,noded --ds track_event
cat "$T/rec-some.log"
grep -Eq "^tracectl: +nodeb +machine $MID_B +[1-9][0-9]* packets\$" "$T/rec-some.log" ||
    fail "nodeb's packets are missing when noded fails"
grep -Eq "^tracectl: +noded +machine [0-9]+ +0 packets +FAILED" "$T/rec-some.log" ||
    fail "tracectl does not report noded as failed"
grep -q "node noded failed" "$T/nodea.log" || fail "the hub did not log noded's failure"
"$TRACECTL" dump "$T/some.pftrace" --summary >"$T/some.txt" 2>&1 || fail "the partial trace does not decode"
if grep -Eq '^machines: .*\b'"$MID_C"' ' "$T/some.txt"; then fail "nodec was recorded although not asked for"; fi

# ---- 2b. a client that vanishes while the merged trace streams: the hub stays healthy ----
cp "$T/demo-nodeb.log" "$T/demo-nodeb.before"
"$TRACECTL" record "$HUB" --all --ds track_event --no-progress --no-resume --test-drop-read 1 \
    -o "$T/dropped.pftrace" >"$T/rec-dropped.log" 2>&1 &
rpid=$!
drew_after() { [ "$(grep -c 'first frame drawn' "$T/demo-$1.log")" -gt "$(grep -c 'first frame drawn' "$T/demo-$1.before")" ]; }
wait_for 60 drew_after nodeb || fail "demo-nodeb never drew into the dropped session"
kill -INT "$rpid"
wait_exit "$rpid" 60
wait_for_line 30 "$T/nodea.log" "federated session of .* closed" || fail "the hub did not close the dropped session"
kill -0 "$NODEA_PID" 2>/dev/null || fail "the hub died when a federated client vanished mid-read"
tg_timeout 10 "$TRACECTL" nodes "$HUB" >/dev/null 2>&1 || fail "the hub stopped answering after a client vanished"

# ---- 3. an unknown node is refused before anything starts ----
"$TRACECTL" record "$HUB" --nodes nodeb,nosuch --ds track_event -t 1s --no-progress -o "$T/none.pftrace" \
    >"$T/rec-none.log" 2>&1 && fail "a federated record with an unknown node succeeded"
grep -qi "route\|node" "$T/rec-none.log" || fail "no clear message for an unknown node: $(cat "$T/rec-none.log")"
[ ! -s "$T/none.pftrace" ] || fail "a refused record left a trace behind"

# ---- 4. the browser's path: /traced/@all over WebSocket ----
record_until_drawn "$T/ws.pftrace" "$T/rec-ws.log" nodeb nodec -- "ws://$HTTP/traced/@all" --ds track_event
"$TRACECTL" dump "$T/ws.pftrace" --summary >"$T/ws.txt" 2>&1 || fail "the WebSocket trace does not decode"
grep -Eq "^machines: .*\b$MID_B [1-9]" "$T/ws.txt" && grep -Eq "^machines: .*\b$MID_C [1-9]" "$T/ws.txt" ||
    fail "/traced/@all did not record every node: $(cat "$T/ws.txt")"
# ---- 5. a producer on the hub, forwarded to nodeb's service over the link (traced_relay's case):
# nodeb stamps it with the machine of the node that authenticated it, never what it claims ----
"$DEMO" --producer-socket "$T/nodeb-producer.sock" --name demo-relayed --duration 1200 >"$T/demo-relayed.log" 2>&1 &
PIDS="$PIDS $!"
wait_for_line 30 "$T/demo-relayed.log" "registered with the tracing service" || fail "demo-relayed did not register"
tg_timeout 10 "$TRACECTL" --node nodeb query "$HUB" >"$T/query-b.txt" 2>&1 || fail "query nodeb: $(cat "$T/query-b.txt")"
MID_RELAYED=$(awk '$5 == "demo-relayed" { print $4 }' "$T/query-b.txt")
case $MID_RELAYED in '' | local | 0) fail "nodeb does not see demo-relayed on another machine: $(cat "$T/query-b.txt")" ;; esac
cp "$T/demo-relayed.log" "$T/demo-relayed.before"
"$TRACECTL" --node nodeb record "$HUB" --all-machines --ds track_event --no-progress -o "$T/relayed-b.pftrace" \
    >"$T/rec-relayed-b.log" 2>&1 &
rpid=$!
drew_after() { [ "$(grep -c 'first frame drawn' "$T/demo-$1.log")" -gt "$(grep -c 'first frame drawn' "$T/demo-$1.before")" ]; }
wait_for 60 drew_after relayed || fail "demo-relayed never drew into nodeb's session: $(cat "$T/rec-relayed-b.log")"
kill -INT "$rpid"
wait_exit "$rpid" 60
[ "$WAIT_RC" = 0 ] || fail "recording nodeb exited with $WAIT_RC: $(cat "$T/rec-relayed-b.log")"
"$TRACECTL" dump "$T/relayed-b.pftrace" --summary >"$T/relayed-b.txt" 2>&1 || fail "nodeb's trace does not decode"
grep -Eq "^machines: .*\b$MID_RELAYED [1-9]" "$T/relayed-b.txt" ||
    fail "the relayed producer's packets do not carry machine $MID_RELAYED: $(cat "$T/relayed-b.txt")"
echo "PASS: federated records over three nodes; a producer relayed over a link"
