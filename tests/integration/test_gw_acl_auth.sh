#!/bin/sh
# test_gw_acl_auth.sh: roles and in-band authentication through tracegated: an observer calling
# EnableTracing is refused (success=false, connection kept) while QueryServiceState is allowed,
# both for a token holder and for a loopback listener limited to ?roles=observer; Authenticate
# with a wrong token is refused and the connection closed; with a right token allowed; requests
# before Authenticate close the connection; tokens never reach the log. Exit 77 = skipped.
set -u
. "$(dirname "$0")/gw_lib.sh"
need "$TRACEGATED" "$CLIENT"

OBS_TOKEN="obs-$(date +%s%N)-secret"
REC_TOKEN="rec-$(date +%s%N)-secret"
{
    echo "# test tokens"
    echo "ci observer $(printf %s "$OBS_TOKEN" | "$TRACEGATED" --hash-token)"
    echo "alice recorder $(printf %s "$REC_TOKEN" | "$TRACEGATED" --hash-token)"
} >"$T/tokens"

start_gw gw --no-http --token-file "$T/tokens" \
    --listen "consumer=tcp://127.0.0.1:0?auth=token" \
    --listen "consumer=tcp://127.0.0.1:0?roles=observer"
TOK=$(gw_addr gw 1)
OBS=$(gw_addr gw 2)
[ -n "$TOK" ] && [ -n "$OBS" ] || fail "listener addresses missing"

expect() { # expect WANTED_OUTPUT gw_testclient args...
    want=$1
    shift
    got=$(tg_timeout 20 "$CLIENT" "$@" 2>&1)
    [ "$got" = "$want" ] || fail "gw_testclient $*: expected '$want', got '$got'"
    echo "ok: $* -> $got"
}

# observer token: EnableTracing refused, the connection stays and QueryServiceState works
expect "first=refused then=ok" call "$TOK" EnableTracing --token "$OBS_TOKEN" --then QueryServiceState
expect "first=ok then=refused" call "$TOK" QueryServiceState --token "$OBS_TOKEN" --then FreeBuffers
# the observer-only loopback listener: same policy, no token needed
expect "first=refused then=ok" call "$OBS" EnableTracing --then QueryCapabilities
# recorder token: EnableTracing reaches the service (an empty config is answered by the service)
expect "first=ok then=ok" call "$TOK" QueryServiceState --token "$REC_TOKEN" --then DisableTracing
# wrong token: refused and closed
expect "first=auth_refused then=-" call "$TOK" QueryServiceState --token "wrong-token"
# no token at all on an auth=token listener: the first request closes the connection
expect "first=disconnected then=-" call "$TOK" QueryServiceState

# tracectl sends its --token in-band (TracegateAuth) on raw TCP
tg_timeout 20 "$TRACECTL" --token "$REC_TOKEN" query "tcp://$TOK" >"$T/q.out" 2>&1 ||
    fail "tracectl query with a right token failed: $(cat "$T/q.out")"
grep -q "PRODUCERS CONNECTED" "$T/q.out" || fail "tracectl query printed no service state"
if tg_timeout 20 "$TRACECTL" --token wrong-token query "tcp://$TOK" >"$T/q2.out" 2>&1; then
    fail "tracectl query with a wrong token succeeded"
fi
grep -q "authentication failed" "$T/q2.out" || fail "tracectl did not say why: $(cat "$T/q2.out")"
echo "ok: tracectl --token in-band"

grep -q "denied ConsumerPort.EnableTracing to 127.0.0.1:[0-9]* (token:ci, roles observer)" "$T/gw.log" ||
    fail "the denial is not logged with method and principal"
grep -q "authentication failed for 127.0.0.1" "$T/gw.log" || fail "the failed authentication is not logged"
grep -q "authenticated as token:alice (roles recorder)" "$T/gw.log" || fail "the recorder login is not logged"
if grep -q -e "$OBS_TOKEN" -e "$REC_TOKEN" -e "wrong-token" "$T/gw.log"; then
    fail "a token appears in the log"
fi
echo "PASS"
exit 0
