#!/bin/sh
# test_gw_reload_links.sh: a SIGHUP whose configuration changes a link option (here a new peer)
# or another option read once at start-up (here consumer-socket-mode) is reported as needing a
# restart, as listener and limit changes are; such changes used to be dropped without a word. A
# reload that changes nothing reports nothing. Exit 77 = skipped.
set -u
. "$(dirname "$0")/gw_lib.sh"
need "$TRACEGATED" "$CLIENT"

printf 'node-name = reload1\n' >"$T/r.conf"
chmod 600 "$T/r.conf"
start_gw r --config "$T/r.conf" --no-http --listen "consumer=tcp://127.0.0.1:0"
ADDR=$(gw_addr r 1)

# reload N: SIGHUP, wait for the N-th "reloaded:" line, then a call through the gateway's loop, so
# the reload (handled on that loop) has logged everything it will log
reload() {
    kill -HUP "$GW_PID"
    wait_for 20 sh -c "[ \$(grep -c 'reloaded:' '$T/r.log') -ge $1 ]" || fail "SIGHUP $1 did not reload"
    out=$(tg_timeout 10 "$CLIENT" call "$ADDR" QueryServiceState 2>&1)
    [ "$out" = "first=ok then=-" ] || fail "a call after SIGHUP $1: $out"
}

reload 1
grep -q "take effect after a restart" "$T/r.log" && fail "an unchanged configuration was reported as needing a restart"

printf 'node-name = reload1\npeer = tcp://127.0.0.1:9\n' >"$T/r.conf"
reload 2
grep -q "link changes take effect after a restart" "$T/r.log" ||
    fail "a new peer on SIGHUP was not reported as needing a restart: $(cat "$T/r.log")"
grep -q "tcp://127.0.0.1:9" "$T/r.log" && fail "the new peer was dialled without a restart"

# an option of the embedded service, read once at start-up, likewise
printf 'node-name = reload1\n' >"$T/r.conf"
reload 3 # back to the running configuration: nothing to report
[ "$(grep -c "take effect after a restart" "$T/r.log")" = 1 ] || fail "a reload to the running configuration warned"
printf 'node-name = reload1\nconsumer-socket-mode = 0660\n' >"$T/r.conf"
reload 4
[ "$(grep -c "take effect after a restart" "$T/r.log")" = 2 ] ||
    fail "a changed consumer-socket-mode on SIGHUP was not reported as needing a restart"
# SIGHUP re-reads the TLS files named at start-up; a new name needs a restart
printf 'node-name = reload1\ntls-ca = %s\n' "$T/r.conf" >"$T/r.conf"
reload 5
[ "$(grep -c "take effect after a restart" "$T/r.log")" = 3 ] ||
    fail "a new tls-ca file name on SIGHUP was not reported as needing a restart"
echo PASS
