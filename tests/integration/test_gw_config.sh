#!/bin/sh
# test_gw_config.sh: tracegated --check-config on good and bad configuration files (exit 0 / 1
# with the file, line and problem), the shipped contrib/tracegated.conf.example, flags
# overriding the file, --hash-token against sha256sum, and a config file actually used to run.
# Exit 77 = skipped.
set -u
. "$(dirname "$0")/gw_lib.sh"
need "$TRACEGATED" "$CLIENT"

check() { # check WANT_RC PATTERN args...
    want=$1
    pat=$2
    shift 2
    tg_timeout 10 "$TRACEGATED" "$@" --check-config >"$T/check.out" 2>&1
    rc=$?
    [ "$rc" = "$want" ] || fail "tracegated $* --check-config: exit $rc, expected $want: $(cat "$T/check.out")"
    grep -q -- "$pat" "$T/check.out" || fail "tracegated $*: output lacks '$pat': $(cat "$T/check.out")"
    echo "ok ($rc): $(head -n 1 "$T/check.out")"
}

cat >"$T/good.conf" <<CONF
# a good file
listen = consumer=tcp://127.0.0.1:7001
listen producer=unix:$T/p.sock?mode=0660
out-soft-grace = 5s
no-http = true
CONF
check 0 "configuration OK (2 listener(s), $T/good.conf)" --config "$T/good.conf"
check 0 "configuration OK" --config "$S/contrib/tracegated.conf.example"

printf 'listen = consumer=tcp://127.0.0.1:7001\n\nbogus-option = 1\n' >"$T/unknown.conf"
check 1 "unknown.conf:3: unknown option 'bogus-option'" --config "$T/unknown.conf"
printf 'out-high = a lot\n' >"$T/badvalue.conf"
check 1 "badvalue.conf:1: out-high" --config "$T/badvalue.conf"
printf 'listen = consumer=tcp://0.0.0.0:7001\nno-http = true\n' >"$T/exposed.conf"
check 1 "non-loopback address without TLS" --config "$T/exposed.conf"
# ... which --insecure on the command line overrides
check 0 "configuration OK" --config "$T/exposed.conf" --insecure
printf 'token-file = %s/missing-tokens\n' "$T" >"$T/notokens.conf"
check 1 "cannot open token file" --config "$T/notokens.conf"
printf 'ci observer abc\n' >"$T/tokens"
printf 'token-file = %s/tokens\n' "$T" >"$T/badtokens.conf"
check 1 "tokens:1: the third field must be the token's SHA-256" --config "$T/badtokens.conf"
# files that decide who gets in are refused when others could change them
printf 'ci observer %s\n' "$(printf tok | "$TRACEGATED" --hash-token)" >"$T/goodtokens"
printf 'token-file = %s/goodtokens\nno-http = true\n' "$T" >"$T/goodtokens.conf"
chmod 0644 "$T/goodtokens" "$T/goodtokens.conf"
check 0 "configuration OK" --config "$T/goodtokens.conf"
chmod 0664 "$T/goodtokens"
check 1 "token file $T/goodtokens: writable by its group, who could change it (chmod go-w" --config "$T/goodtokens.conf"
chmod 0644 "$T/goodtokens"
chmod 0666 "$T/goodtokens.conf"
check 1 "config file $T/goodtokens.conf: writable by every user" --config "$T/goodtokens.conf"
chmod 0644 "$T/goodtokens.conf"
printf 'listen = consumer=@tg-config-test?mode=0600\nno-http = true\n' >"$T/abstract.conf"
check 1 "mode= has no effect on an abstract socket" --config "$T/abstract.conf"
# socket modes: octal digits, 1 to 0777 (0 used to mean the default silently)
check 1 "consumer-socket-mode: '0' is not an octal mode from 1 to 0777" --consumer-socket-mode 0 --no-http
check 1 "producer-socket-mode: ' 0600' is not an octal mode" --producer-socket-mode ' 0600' --no-http
check 1 "listener mode= '0' is not an octal mode" --listen "consumer=unix:$T/m.sock?mode=0" --no-http
check 0 "configuration OK" --consumer-socket-mode 0640 --no-http
printf 'out-low = 4m\n' >"$T/limits.conf"
check 1 "out-low" --config "$T/limits.conf"
check 1 "cannot open config file" --config "$T/nonexistent.conf"
check 1 "unknown option" --config "$T/good.conf" --no-such-flag

# --hash-token matches sha256sum
if command -v sha256sum >/dev/null 2>&1; then
    a=$(printf 'my secret token' | "$TRACEGATED" --hash-token)
    b=$(printf 'my secret token' | sha256sum | cut -d' ' -f1)
    [ "$a" = "$b" ] || fail "--hash-token: $a != $b"
    a=$(printf 'my secret token\n' | "$TRACEGATED" --hash-token)
    [ "$a" = "$b" ] || fail "--hash-token does not strip the final newline"
fi
printf '' | "$TRACEGATED" --hash-token >/dev/null 2>&1 && fail "--hash-token accepted an empty token"

# a config file used for real; the command line overrides one of its values
cat >"$T/run.conf" <<CONF
listen = consumer=tcp://127.0.0.1:0?roles=observer
no-http = true
log-format = json
CONF
start_gw run --config "$T/run.conf" --log-format text
grep -q "listening: consumer tcp://127.0.0.1:[0-9]* (auth=local, roles=observer)" "$T/run.log" ||
    fail "the config file's listener is not used"
grep -q '^{' "$T/run.log" && fail "--log-format text on the command line did not win over the file"
out=$(tg_timeout 10 "$CLIENT" call "$(gw_addr run 1)" EnableTracing --then QueryServiceState)
[ "$out" = "first=refused then=ok" ] || fail "the file's roles= is not applied: $out"
echo "PASS"
exit 0
