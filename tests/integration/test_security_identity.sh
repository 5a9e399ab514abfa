#!/bin/sh
# test_security_identity.sh: every principal is itself end to end (issue 8, findings 1, 3, 4, 11).
# Attacks, each followed by the legitimate path:
#  - root records on the 0600 consumer socket; uid 65534 through a loopback TCP listener of the
#    same gateway neither sees nor clones nor attaches to it (it used to: the service saw every
#    gateway client as the daemon's uid, and loopback meant admin); nobody's own session is
#    visible and clonable to nobody, and root sees both;
#  - an @abstract listener admits only root and the daemon's uid as local (abstract sockets have
#    no permissions); ?uids= admits a named uid;
#  - kept (resumable) sessions hold their connection slot and are capped per principal: 30
#    connect/GetResumeToken/ObserveEvents/drop cycles with --max-connections 4 leave no more
#    than 4 kept sessions and no pile of descriptors;
#  - a UNIX socket squatted at Perfetto's default consumer path by another user is not bridged
#    to; one named explicitly is trusted, with a warning.
# Needs root (to act as uid 65534 with setpriv). Exit 77 = skipped.
set -u
. "$(dirname "$0")/gw_lib.sh"
need "$TRACEGATED" "$TRACECTL" "$CLIENT"
[ "$(id -u)" = 0 ] || { echo "SKIP: needs root to act as another user"; exit 77; }
command -v setpriv >/dev/null 2>&1 || { echo "SKIP: setpriv is not installed"; exit 77; }
NOBODY=65534
as_nobody() { setpriv --reuid=$NOBODY --regid=$NOBODY --clear-groups -- "$@"; }
# the temp dir must be reachable for uid 65534 (its sockets and outputs live there)
chmod 0755 "$T"
mkdir -m 1777 "$T/pub"

# sessions_listed FILE: the ids in the TRACING SESSIONS table of a `tracectl query` output
sessions_listed() { awk '/^TRACING SESSIONS:/ { on = 1; next } /^CAPABILITIES/ { on = 0 } on && $1 ~ /^[0-9]+$/ { print $1 }' "$1"; }

start_gw id --no-http --listen "consumer=tcp://127.0.0.1:0" --listen "consumer=@tg-sec-$$" \
    --listen "consumer=@tg-sec-u-$$?uids=$NOBODY" --max-connections 4 --resume-window 10m
TCP=$(gw_addr id 1)
[ -n "$TCP" ] || fail "no TCP listener"
[ "$(stat -c %a "$T/id-c.sock")" = 600 ] || fail "the consumer socket is not 0600"

# ---- root's session, created on the private consumer socket ----
tg_timeout 30 "$TRACECTL" record "unix:$T/id-c.sock" --duration 10m --detach rootkey -o "$T/unused" \
    >"$T/rec-root.out" 2>&1 || fail "root could not start a session: $(cat "$T/rec-root.out")"
tg_timeout 20 "$TRACECTL" query "tcp://$TCP" >"$T/q-root.out" 2>&1 || fail "root query: $(cat "$T/q-root.out")"
ROOT_SID=$(sessions_listed "$T/q-root.out")
[ -n "$ROOT_SID" ] || fail "root does not see its own session through the gateway"

# ---- the attack: uid 65534 through the loopback TCP listener ----
as_nobody "$TRACECTL" query "tcp://$TCP" >"$T/q-nobody.out" 2>&1 || fail "nobody's query failed: $(cat "$T/q-nobody.out")"
[ -z "$(sessions_listed "$T/q-nobody.out")" ] || fail "uid 65534 lists root's session: $(cat "$T/q-nobody.out")"
if as_nobody "$TRACECTL" clone "tcp://$TCP" "$ROOT_SID" -o "$T/pub/stolen.pftrace" >"$T/clone-nobody.out" 2>&1; then
    fail "uid 65534 cloned root's session"
fi
grep -q "Not allowed" "$T/clone-nobody.out" || fail "the refused clone does not say why: $(cat "$T/clone-nobody.out")"
if as_nobody "$TRACECTL" attach "tcp://$TCP" rootkey --stop -o "$T/pub/stolen2.pftrace" >"$T/att-nobody.out" 2>&1; then
    fail "uid 65534 attached to root's detached session"
fi
wait_for_line 10 "$T/id.log" "on the consumer port \(uid:$NOBODY, roles recorder,producer\)" ||
    fail "uid 65534's connections are not logged with its principal and user roles"
echo "ok: uid 65534 neither lists, clones nor attaches to root's session"

# ---- the legitimate path for uid 65534: its own session ----
as_nobody "$TRACECTL" record "tcp://$TCP" --duration 10m --detach nobodykey -o "$T/pub/unused" \
    >"$T/rec-nobody.out" 2>&1 || fail "uid 65534 could not record: $(cat "$T/rec-nobody.out")"
as_nobody "$TRACECTL" query "tcp://$TCP" >"$T/q-nobody2.out" 2>&1 || fail "nobody's second query failed"
NOBODY_SID=$(sessions_listed "$T/q-nobody2.out")
[ "$(echo "$NOBODY_SID" | wc -w)" = 1 ] || fail "uid 65534 should see exactly its own session: $(cat "$T/q-nobody2.out")"
[ "$NOBODY_SID" != "$ROOT_SID" ] || fail "uid 65534 sees root's session id"
as_nobody "$TRACECTL" clone "tcp://$TCP" "$NOBODY_SID" -o "$T/pub/mine.pftrace" >"$T/clone-own.out" 2>&1 ||
    fail "uid 65534 cannot clone its own session: $(cat "$T/clone-own.out")"
"$TRACECTL" query "unix:$T/id-c.sock" >"$T/q-root2.out" 2>&1 || fail "root's second query failed"
[ "$(sessions_listed "$T/q-root2.out" | wc -l)" = 2 ] || fail "root should see both sessions: $(cat "$T/q-root2.out")"
"$TRACECTL" clone "unix:$T/id-c.sock" "$NOBODY_SID" -o "$T/root-clone.pftrace" >"$T/clone-root.out" 2>&1 ||
    fail "root cannot clone another user's session: $(cat "$T/clone-root.out")"
tg_timeout 30 "$TRACECTL" attach "unix:$T/id-c.sock" rootkey --stop -o "$T/root.pftrace" >"$T/att-root.out" 2>&1 ||
    fail "root cannot attach to its own session: $(cat "$T/att-root.out")"
echo "ok: uid 65534 records and clones its own; root sees and clones both, and attaches to its own"

# ---- abstract listeners: owners only, unless ?uids= says otherwise ----
out=$(as_nobody "$CLIENT" call "@tg-sec-$$" QueryServiceState 2>&1)
[ "$out" != "first=ok then=-" ] || fail "uid 65534 was admitted as local on an abstract listener"
wait_for_line 10 "$T/id.log" "uid $NOBODY\) is not admitted as local here" || fail "the refusal is not logged"
out=$("$CLIENT" call "@tg-sec-$$" QueryServiceState 2>&1)
[ "$out" = "first=ok then=-" ] || fail "root was refused on the abstract listener: $out"
out=$(as_nobody "$CLIENT" call "@tg-sec-u-$$" QueryServiceState 2>&1)
[ "$out" = "first=ok then=-" ] || fail "uid 65534 was refused on the abstract listener naming it: $out"
echo "ok: abstract listeners admit their owners, and ?uids="

# ---- kept sessions count against the limits ----
# the connections of the checks above are gone once the gateway's client count is back to zero
i=0
while [ $i -lt 30 ]; do
    as_nobody "$CLIENT" call "$TCP" QueryServiceState --keep-session 1 --then ObserveEvents --timeout-ms 5000 \
        >>"$T/kept.out" 2>&1
    i=$((i + 1))
done
kept=$(grep -c "keeping the session for" "$T/id.log")
[ "$kept" -le 4 ] || fail "$kept sessions were kept with --max-connections 4"
grep -q "detaching it instead of keeping it\|refused tcp client .*too many connections" "$T/id.log" ||
    fail "neither the per-principal cap nor the connection limit stopped the kept sessions"
fds=$(ls "/proc/$GW_PID/fd" | wc -l)
[ "$fds" -lt 60 ] || fail "tracegated holds $fds descriptors after 30 dropped kept sessions"
out=$("$CLIENT" call "unix:$T/id-c.sock" QueryServiceState 2>&1)
[ "$out" = "first=ok then=-" ] || fail "the service is unreachable after the kept-session flood: $out"
echo "ok: kept sessions are bounded ($kept kept, $fds fds)"

# ---- a squatted default consumer socket ----
python3 - "$T/pub/squat.sock" <<'EOF' &
import os, socket, sys
os.setgid(65534); os.setuid(65534)
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.bind(sys.argv[1]); s.listen(8)
while True:
    c, _ = s.accept()
    c.close()
EOF
PIDS="$PIDS $!"
wait_for 10 test -S "$T/pub/squat.sock" || fail "the squatter did not start"
PERFETTO_CONSUMER_SOCK_NAME=$T/pub/squat.sock PERFETTO_PRODUCER_SOCK_NAME=$T/pub/squat.sock \
    tg_timeout 20 "$TRACEGATED" --no-http >"$T/squat.log" 2>&1 &
SQ=$!
wait_exit "$SQ" 20
[ "$WAIT_RC" != 0 ] && [ "$WAIT_RC" != timeout ] || fail "tracegated bridged to a squatted default socket ($WAIT_RC)"
grep -q "refusing to bridge to it" "$T/squat.log" || fail "the refusal does not say why: $(cat "$T/squat.log")"
start_gw named --no-http --upstream-consumer "$T/pub/squat.sock" --listen "consumer=tcp://127.0.0.1:0"
grep -q "served by uid $NOBODY (trusted because it was named explicitly)" "$T/named.log" ||
    fail "an explicitly named upstream of another uid is not reported"
echo "ok: a squatted default socket is refused; a named one is trusted with a warning"
echo PASS
