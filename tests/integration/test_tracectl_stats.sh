#!/bin/sh
# test_tracectl_stats.sh: `tracectl stats` against a real tracegated (node "hub") that a second
# tracegated (node "edge") has linked to over loopback: the snapshot is written as KCDATA
# (--kcdata FILE, URL before or after the options) and `tracectl kcdata` prints it back with the
# node descriptor, the gateway's counters (this very connection counted, the link up) and a
# container for node edge; the text form says the same; who may read it follows the ACL (an
# observer token may, a producer token may not); --node and an unwritable FILE are refused with
# a message. Exit 77 = skipped.
set -u
. "$(dirname "$0")/gw_lib.sh"
need "$TRACEGATED" "$TRACECTL"

OBS_TOKEN="obs-$(date +%s%N)-secret"
PROD_TOKEN="prod-$(date +%s%N)-secret"
{
    echo "watcher observer $(printf %s "$OBS_TOKEN" | "$TRACEGATED" --hash-token)"
    echo "feeder producer $(printf %s "$PROD_TOKEN" | "$TRACEGATED" --hash-token)"
} >"$T/tokens"

start_gw hub --no-http --node-name hub --token-file "$T/tokens" \
    --listen "consumer=unix:$T/hub-gw.sock" --listen "consumer=tcp://127.0.0.1:0?auth=token" \
    --listen-link "tcp://127.0.0.1:0"
TOK=$(gw_addr hub 2)
LINK=$(sed -n 's/.*listening for links: tcp:\/\/\([0-9.:]*\).*/\1/p' "$T/hub.log" | head -n 1)
[ -n "$TOK" ] && [ -n "$LINK" ] || fail "hub listener addresses missing"
start_gw edge --no-http --node-name edge --peer "tcp://$LINK"
wait_for_line 20 "$T/hub.log" "link edge up" || fail "the edge node did not link to the hub"

# the snapshot as KCDATA, then printed back
tg_timeout 20 "$TRACECTL" stats --kcdata "$T/hub.kcdata" "unix:$T/hub-gw.sock" 2>"$T/stats.err" ||
    fail "tracectl stats --kcdata failed: $(cat "$T/stats.err")"
grep -q "wrote [0-9]* counters ([0-9]* bytes of KCDATA) to $T/hub.kcdata" "$T/stats.err" ||
    fail "tracectl stats did not say what it wrote: $(cat "$T/stats.err")"
tg_timeout 20 "$TRACECTL" kcdata "$T/hub.kcdata" >"$T/hub.txt" 2>&1 ||
    fail "tracectl kcdata cannot print the snapshot: $(cat "$T/hub.txt")"
has() { grep -q -e "$1" "$T/hub.txt" || fail "the printed snapshot lacks '$1': $(cat "$T/hub.txt")"; }
has 'KCDATA tracegate (magic 0x434B4754)'
has 'char name\[128\] = "hub"'
has 'container 0x7410 (tg_stats) id 1 {'
has 'uint64 uptime_s = '
has 'uint64 sessions = 1$'          # the stats connection itself
has 'uint64 conn_open_unix = 1$'
has 'uint64 conn_total_unix = 1$'
has 'uint64 conn_open_link = 1$'     # edge's link connection (links count against the limits)
has 'uint64 links_up = 1$'
has 'uint64 nodes_known = 1$'
has 'uint64 upstream_healthy = 1$'
has 'container 0x7410 (tg_stats) id 2 {'
has 'string node = "edge"'
has 'string state = "up"'
grep -A 12 'string node = "edge"' "$T/hub.txt" | grep -q 'uint64 bytes_in = [1-9]' ||
    fail "the edge container shows no link traffic: $(cat "$T/hub.txt")"
echo "ok: stats --kcdata FILE URL, printed by tracectl kcdata"

# the JSON printer reads it too, and the URL may come first
tg_timeout 20 "$TRACECTL" stats "unix:$T/hub-gw.sock" --kcdata "$T/hub2.kcdata" 2>"$T/stats2.err" ||
    fail "tracectl stats URL --kcdata FILE failed: $(cat "$T/stats2.err")"
tg_timeout 20 "$TRACECTL" kcdata --json "$T/hub2.kcdata" >"$T/hub2.json" 2>&1 || fail "kcdata --json failed"
grep -q '"name": *"conn_total_unix", *"value": *2' "$T/hub2.json" ||
    fail "the second snapshot does not count two connections: $(cat "$T/hub2.json")"
echo "ok: stats URL --kcdata FILE, printed as JSON"

# the text form
tg_timeout 20 "$TRACECTL" stats "unix:$T/hub-gw.sock" >"$T/stats.txt" 2>&1 || fail "tracectl stats failed: $(cat "$T/stats.txt")"
grep -q '^node hub (tracegate ' "$T/stats.txt" || fail "text form: no node line: $(cat "$T/stats.txt")"
grep -q '^  links_up  *1$' "$T/stats.txt" || fail "text form: links_up: $(cat "$T/stats.txt")"
grep -q '^  node  *edge$' "$T/stats.txt" || fail "text form: no edge node: $(cat "$T/stats.txt")"
echo "ok: stats (text)"

# who may read it: observer yes, producer no (the refusal is the gateway's, and logged)
tg_timeout 20 "$TRACECTL" --token "$OBS_TOKEN" stats "tcp://$TOK" >"$T/obs.txt" 2>&1 ||
    fail "an observer token cannot read the stats: $(cat "$T/obs.txt")"
if tg_timeout 20 "$TRACECTL" --token "$PROD_TOKEN" stats "tcp://$TOK" >"$T/prod.txt" 2>&1; then
    fail "a producer token read the stats: $(cat "$T/prod.txt")"
fi
grep -q "may you read its stats" "$T/prod.txt" || fail "the refusal does not say why: $(cat "$T/prod.txt")"
echo "ok: observer may, producer may not"

# refusals on tracectl's side
if "$TRACECTL" --node edge stats "unix:$T/hub-gw.sock" >"$T/node.txt" 2>&1; then
    fail "stats --node was accepted"
fi
grep -q -- "--node is not supported" "$T/node.txt" || fail "stats --node: $(cat "$T/node.txt")"
if tg_timeout 20 "$TRACECTL" stats --kcdata "$T/no/such/dir/x.kcdata" "unix:$T/hub-gw.sock" >"$T/bad.txt" 2>&1; then
    fail "writing into a missing directory succeeded"
fi
grep -q "No such file or directory" "$T/bad.txt" || fail "unwritable FILE: $(cat "$T/bad.txt")"
echo "ok: --node and an unwritable FILE refused"
echo "PASS"
exit 0
