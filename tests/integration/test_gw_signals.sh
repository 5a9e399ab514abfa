#!/bin/sh
# test_gw_signals.sh: tracegated's signals: SIGHUP with a new token file (the old token is refused,
# the new one accepted, a connection authenticated before the reload keeps working); a broken
# token file on SIGHUP keeps the running configuration; a changed max-kept-sessions is reported as
# needing a restart (it used to be ignored without a word); SIGTERM mid-session drains (no new
# clients, the live session finishes, exit 0 soon after); SIGTERM with a session that does not
# finish exits 0 at the drain timeout; a second SIGTERM exits at once. Every signal is sent once
# the state it tests exists (a session whose first call was answered, a drain that logged it is
# waiting), and held clients hold until the test releases them. Exit 77 = skipped.
set -u
. "$(dirname "$0")/gw_lib.sh"
need "$TRACEGATED" "$CLIENT"

hash() { printf %s "$1" | "$TRACEGATED" --hash-token; }
OLD="old-token-$$"
NEW="new-token-$$"
echo "old recorder $(hash "$OLD")" >"$T/tokens"

echo "max-kept-sessions = 4" >"$T/hup.conf"
start_gw hup --config "$T/hup.conf" --no-http --token-file "$T/tokens" --drain-timeout 1h \
    --listen "consumer=tcp://127.0.0.1:0?auth=token"
ADDR=$(gw_addr hup 1)

# hold CLIENT_ARGS...: a client whose first call is answered, then holds its connection until
# $T/release.$HELD_TAG exists and makes its --then call. Waits until the first call was answered
# (the session is open in the gateway); sets HELD (its pid) and HELD_OUT.
hold() {
    HELD_TAG=$1
    shift
    HELD_OUT=$T/$HELD_TAG.out
    rm -f "$T/ready.$HELD_TAG" "$T/release.$HELD_TAG"
    "$CLIENT" call "$ADDR" QueryServiceState "$@" --then QueryServiceState --ready-file "$T/ready.$HELD_TAG" \
        --hold-until "$T/release.$HELD_TAG" --timeout-ms 60000 >"$HELD_OUT" 2>&1 &
    HELD=$!
    PIDS="$PIDS $HELD"
    wait_for 30 test -e "$T/ready.$HELD_TAG" || fail "the held client's session did not open: $(cat "$HELD_OUT")"
}
release() { touch "$T/release.$1"; }

# a session authenticated with the old token, holding its connection across the reload
hold held --token "$OLD"
echo "new recorder $(hash "$NEW")" >"$T/tokens.new"
mv "$T/tokens.new" "$T/tokens"
echo "max-kept-sessions = 2" >"$T/hup.conf"
kill -HUP "$GW_PID"
wait_for_line 20 "$T/hup.log" "reloaded: 1 token" || fail "SIGHUP did not reload"
wait_for_line 20 "$T/hup.log" "take effect after a restart" ||
    fail "a changed max-kept-sessions was not reported as needing a restart"
out=$(tg_timeout 10 "$CLIENT" call "$ADDR" QueryServiceState --token "$OLD" 2>&1)
[ "$out" = "first=auth_refused then=-" ] || fail "the old token after SIGHUP: $out"
out=$(tg_timeout 10 "$CLIENT" call "$ADDR" QueryServiceState --token "$NEW" 2>&1)
[ "$out" = "first=ok then=-" ] || fail "the new token after SIGHUP: $out"
release held
wait_exit "$HELD" 20
[ "$WAIT_RC" = 0 ] && [ "$(cat "$HELD_OUT")" = "first=ok then=ok" ] ||
    fail "the connection opened before SIGHUP was disturbed: $(cat "$HELD_OUT")"
echo "SIGHUP: old token refused, new token accepted, existing connection untouched"

# a broken token file: the reload fails, the running tokens stay
echo "this is not a token line" >"$T/tokens"
kill -HUP "$GW_PID"
wait_for_line 20 "$T/hup.log" "reload failed, keeping the running configuration" || fail "a bad reload was not reported"
out=$(tg_timeout 10 "$CLIENT" call "$ADDR" QueryServiceState --token "$NEW" 2>&1)
[ "$out" = "first=ok then=-" ] || fail "after a failed reload: $out"

# ---- SIGTERM mid-session: drain ----
# the held session is confirmed open (its first call answered) before the signal; the gateway
# must then wait for it (it is released only after the checks), refuse new clients, and exit 0
hold drain --token "$NEW"
kill -TERM "$GW_PID"
wait_for_line 20 "$T/hup.log" "draining: no new clients; waiting for 1 session" ||
    fail "SIGTERM did not start a drain that waits for the open session"
out=$(tg_timeout 10 "$CLIENT" call "$ADDR" QueryServiceState --token "$NEW" 2>&1)
[ "$out" != "first=ok then=-" ] || fail "a new client was accepted while draining"
kill -0 "$GW_PID" 2>/dev/null || fail "tracegated exited before its session finished"
release drain
wait_exit "$HELD" 20
[ "$(cat "$HELD_OUT")" = "first=ok then=ok" ] || fail "the session was not allowed to finish: $(cat "$HELD_OUT")"
wait_exit "$GW_PID" 20
[ "$WAIT_RC" = 0 ] || fail "tracegated did not exit 0 after draining ($WAIT_RC)"
grep -q "all sessions finished" "$T/hup.log" || fail "no drain message"
echo "SIGTERM: drained and exited 0"

# ---- SIGTERM with a session that outlives the drain timeout ----
# (the held client is never released: only the drain timeout can end its session)
start_gw slow --no-http --drain-timeout 1s --listen "consumer=tcp://127.0.0.1:0"
ADDR=$(gw_addr slow 1)
hold long
kill -TERM "$GW_PID"
wait_exit "$GW_PID" 30
[ "$WAIT_RC" = 0 ] || fail "tracegated did not exit 0 at the drain timeout ($WAIT_RC)"
grep -q "drain timeout: closing 1 remaining session" "$T/slow.log" || fail "no drain-timeout message"
wait_exit "$HELD" 20
[ "$(cat "$HELD_OUT")" = "first=ok then=disconnected" ] || fail "held client: $(cat "$HELD_OUT")"
echo "SIGTERM: drain timeout honoured"

# ---- a second SIGTERM exits at once ----
# (a drain timeout far beyond the safety net below: only the second signal can end it in time)
start_gw twice --no-http --drain-timeout 1h --listen "consumer=tcp://127.0.0.1:0"
ADDR=$(gw_addr twice 1)
hold twice
kill -TERM "$GW_PID"
wait_for_line 20 "$T/twice.log" "draining: no new clients; waiting for 1 session" || fail "the first SIGTERM did not drain"
kill -TERM "$GW_PID"
wait_exit "$GW_PID" 30
[ "$WAIT_RC" = 0 ] || fail "a second SIGTERM did not end tracegated promptly ($WAIT_RC)"
echo "PASS"
exit 0
