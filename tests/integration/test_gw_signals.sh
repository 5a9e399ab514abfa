#!/bin/sh
# test_gw_signals.sh: tracegated's signals: SIGHUP with a new token file (the old token is refused,
# the new one accepted, a connection authenticated before the reload keeps working); a broken
# token file on SIGHUP keeps the running configuration; SIGTERM mid-session drains (no new
# clients, the live session finishes, exit 0 soon after); SIGTERM with a session that does not
# finish exits 0 at the drain timeout; a second SIGTERM exits at once. Exit 77 = skipped.
set -u
. "$(dirname "$0")/gw_lib.sh"
need "$TRACEGATED" "$CLIENT"

hash() { printf %s "$1" | "$TRACEGATED" --hash-token; }
OLD="old-token-$$"
NEW="new-token-$$"
echo "old recorder $(hash "$OLD")" >"$T/tokens"

start_gw hup --no-http --token-file "$T/tokens" --listen "consumer=tcp://127.0.0.1:0?auth=token"
ADDR=$(gw_addr hup 1)

# a session authenticated with the old token, holding its connection across the reload
timeout 30 "$CLIENT" call "$ADDR" QueryServiceState --token "$OLD" --hold-ms 2500 \
    --then QueryServiceState >"$T/held.out" 2>&1 &
HELD=$!
PIDS="$PIDS $HELD"
sleep 0.5
echo "new recorder $(hash "$NEW")" >"$T/tokens.new"
mv "$T/tokens.new" "$T/tokens"
kill -HUP "$GW_PID"
i=0
while [ $i -lt 50 ] && ! grep -q "reloaded: 1 token" "$T/hup.log"; do sleep 0.1; i=$((i + 1)); done
grep -q "reloaded: 1 token" "$T/hup.log" || fail "SIGHUP did not reload"
out=$(timeout 10 "$CLIENT" call "$ADDR" QueryServiceState --token "$OLD" 2>&1)
[ "$out" = "first=auth_refused then=-" ] || fail "the old token after SIGHUP: $out"
out=$(timeout 10 "$CLIENT" call "$ADDR" QueryServiceState --token "$NEW" 2>&1)
[ "$out" = "first=ok then=-" ] || fail "the new token after SIGHUP: $out"
wait_exit "$HELD" 20
[ "$WAIT_RC" = 0 ] && [ "$(cat "$T/held.out")" = "first=ok then=ok" ] ||
    fail "the connection opened before SIGHUP was disturbed: $(cat "$T/held.out")"
echo "SIGHUP: old token refused, new token accepted, existing connection untouched"

# a broken token file: the reload fails, the running tokens stay
echo "this is not a token line" >"$T/tokens"
kill -HUP "$GW_PID"
i=0
while [ $i -lt 50 ] && ! grep -q "reload failed" "$T/hup.log"; do sleep 0.1; i=$((i + 1)); done
grep -q "reload failed, keeping the running configuration" "$T/hup.log" || fail "a bad reload was not reported"
out=$(timeout 10 "$CLIENT" call "$ADDR" QueryServiceState --token "$NEW" 2>&1)
[ "$out" = "first=ok then=-" ] || fail "after a failed reload: $out"

# ---- SIGTERM mid-session: drain ----
timeout 30 "$CLIENT" call "$ADDR" QueryServiceState --token "$NEW" --hold-ms 1500 \
    --then QueryServiceState >"$T/drain.out" 2>&1 &
HELD=$!
PIDS="$PIDS $HELD"
sleep 0.4
kill -TERM "$GW_PID"
sleep 0.2
out=$(timeout 10 "$CLIENT" call "$ADDR" QueryServiceState --token "$NEW" --timeout-ms 3000 2>&1)
[ "$out" != "first=ok then=-" ] || fail "a new client was accepted while draining"
kill -0 "$GW_PID" 2>/dev/null || fail "tracegated exited before its session finished"
wait_exit "$HELD" 20
[ "$(cat "$T/drain.out")" = "first=ok then=ok" ] || fail "the session was not allowed to finish: $(cat "$T/drain.out")"
wait_exit "$GW_PID" 5
[ "$WAIT_RC" = 0 ] || fail "tracegated did not exit 0 after draining ($WAIT_RC)"
grep -q "all sessions finished" "$T/hup.log" || fail "no drain message"
echo "SIGTERM: drained and exited 0"

# ---- SIGTERM with a session that outlives the drain timeout ----
start_gw slow --no-http --drain-timeout 1s --listen "consumer=tcp://127.0.0.1:0"
ADDR=$(gw_addr slow 1)
timeout 30 "$CLIENT" call "$ADDR" QueryServiceState --hold-ms 20000 --then QueryServiceState \
    >"$T/long.out" 2>&1 &
HELD=$!
PIDS="$PIDS $HELD"
sleep 0.4
kill -TERM "$GW_PID"
wait_exit "$GW_PID" 8
[ "$WAIT_RC" = 0 ] || fail "tracegated did not exit 0 at the drain timeout ($WAIT_RC)"
grep -q "drain timeout: closing 1 remaining session" "$T/slow.log" || fail "no drain-timeout message"
wait_exit "$HELD" 10
[ "$(cat "$T/long.out")" = "first=ok then=disconnected" ] || fail "held client: $(cat "$T/long.out")"
echo "SIGTERM: drain timeout honoured"

# ---- a second SIGTERM exits at once ----
start_gw twice --no-http --drain-timeout 60s --listen "consumer=tcp://127.0.0.1:0"
ADDR=$(gw_addr twice 1)
timeout 30 "$CLIENT" call "$ADDR" QueryServiceState --hold-ms 20000 --then QueryServiceState \
    >"$T/twice.out" 2>&1 &
PIDS="$PIDS $!"
sleep 0.4
kill -TERM "$GW_PID"
sleep 0.3
kill -TERM "$GW_PID"
wait_exit "$GW_PID" 5
[ "$WAIT_RC" = 0 ] || fail "a second SIGTERM did not end tracegated promptly ($WAIT_RC)"
echo "PASS"
exit 0
