#!/bin/sh
# test_tracegate_adb.sh: contrib/tracegate-adb with a fake `adb` on PATH that records its arguments
# and keeps a forward table (no device needed): the forwards it asks for (tcp:0, so adb picks free
# ports, to Android's traced sockets; --abstract for abstract ones), the --node flag it prints and
# that tracegated accepts, reuse on a second run, --remove, node names from serials, --conf, and a
# failure halfway that leaves no forward behind. Environment (from `make check`): TG_BUILDDIR,
# TG_SRCDIR. Exit 77 = skipped.
set -u
. "$(dirname "$0")/gw_lib.sh"
need "$TRACEGATED"
TA=$S/contrib/tracegate-adb

# ---- the fake adb: `adb -s SERIAL forward ...` against a table in $T/forwards ----
mkdir -p "$T/bin"
cat >"$T/bin/adb" <<'FAKE'
#!/bin/sh
# fake adb for test_tracegate_adb.sh: logs its arguments; forward tcp:0 picks 40001, 40002, ...
echo "$*" >>"$FAKE_ADB_DIR/adb.args"
[ "$1" = -s ] || { echo "fake adb: expected -s SERIAL" >&2; exit 2; }
serial=$2
shift 2
[ "$1" = forward ] || { echo "fake adb: only forward" >&2; exit 2; }
shift
touch "$FAKE_ADB_DIR/forwards"
case $serial in offline) echo "adb: error: device 'offline' not found" >&2; exit 1 ;; esac
case $1 in
--list) cat "$FAKE_ADB_DIR/forwards" ;;
--remove)
    grep -q " $2 " "$FAKE_ADB_DIR/forwards" || { echo "adb: error: listener '$2' not found" >&2; exit 1; }
    grep -v "^$serial $2 " "$FAKE_ADB_DIR/forwards" >"$FAKE_ADB_DIR/forwards.new"
    mv "$FAKE_ADB_DIR/forwards.new" "$FAKE_ADB_DIR/forwards"
    ;;
tcp:0)
    case $serial:$2 in half:*producer*) echo "adb: error: cannot bind listener" >&2; exit 1 ;; esac
    n=$(cat "$FAKE_ADB_DIR/next" 2>/dev/null || echo 40001)
    echo $((n + 1)) >"$FAKE_ADB_DIR/next"
    echo "$serial tcp:$n $2" >>"$FAKE_ADB_DIR/forwards"
    echo "$n"
    ;;
*) echo "fake adb: unexpected forward $*" >&2; exit 2 ;;
esac
FAKE
chmod +x "$T/bin/adb"
export FAKE_ADB_DIR=$T
PATH=$T/bin:$PATH
export PATH
CF=localfilesystem:/dev/socket/traced_consumer
PF=localfilesystem:/dev/socket/traced_producer

# ---- set up: two forwards with ports adb picks, one flag on stdout ----
out=$("$TA" emulator-5554 2>"$T/ta1.err") || fail "tracegate-adb failed: $(cat "$T/ta1.err")"
[ "$out" = "--node emulator-5554=consumer:tcp://127.0.0.1:40001,producer:tcp://127.0.0.1:40002" ] ||
    fail "tracegate-adb printed '$out'"
cat >"$T/want.args" <<WANT
-s emulator-5554 forward --list
-s emulator-5554 forward tcp:0 $CF
-s emulator-5554 forward tcp:0 $PF
WANT
diff "$T/want.args" "$T/adb.args" >"$T/diff.txt" || fail "adb was called with: $(cat "$T/diff.txt")"
grep -q "forwarded tcp:40001 -> $CF (emulator-5554)" "$T/ta1.err" || fail "no message on stderr: $(cat "$T/ta1.err")"
echo "set up: $out"

# ---- tracegated takes the flag as it is printed ----
# shellcheck disable=SC2086 # the flag is two words on purpose
start_gw node --no-http $out
grep -q "1 raw node(s)" "$T/node.log" || fail "tracegated did not take the node: $(cat "$T/node.log")"
kill "$GW_PID"
wait_exit "$GW_PID" 20
"$TRACEGATED" --no-http --check-config $out >"$T/check.txt" 2>&1 || fail "--check-config: $(cat "$T/check.txt")"

# ---- again: the same forwards, nothing new ----
: >"$T/adb.args"
out2=$("$TA" emulator-5554 2>"$T/ta2.err") || fail "second run failed: $(cat "$T/ta2.err")"
[ "$out2" = "$out" ] || fail "second run printed '$out2' (want '$out')"
[ "$(cat "$T/adb.args")" = "-s emulator-5554 forward --list" ] || fail "second run called adb: $(cat "$T/adb.args")"
grep -q "reusing tcp:40002 -> $PF" "$T/ta2.err" || fail "second run: $(cat "$T/ta2.err")"

# ---- another device: Wi-Fi serial → node name; --name; --conf; --abstract ----
out=$("$TA" 192.168.1.5:5555 2>/dev/null) || fail "tracegate-adb 192.168.1.5:5555 failed"
[ "$out" = "--node 192.168.1.5-5555=consumer:tcp://127.0.0.1:40003,producer:tcp://127.0.0.1:40004" ] ||
    fail "a Wi-Fi serial gave '$out'"
out=$("$TA" --conf --name lab-phone 192.168.1.5:5555 2>/dev/null) || fail "--conf --name failed"
[ "$out" = "node = lab-phone=consumer:tcp://127.0.0.1:40003,producer:tcp://127.0.0.1:40004" ] || fail "--conf gave '$out'"
: >"$T/adb.args"
out=$("$TA" --abstract R58M 2>/dev/null) || fail "--abstract failed"
[ "$out" = "--node R58M=consumer:tcp://127.0.0.1:40005,producer:tcp://127.0.0.1:40006" ] || fail "--abstract gave '$out'"
grep -q "^-s R58M forward tcp:0 localabstract:traced_consumer$" "$T/adb.args" || fail "--abstract: $(cat "$T/adb.args")"
grep -q "^-s R58M forward tcp:0 localabstract:traced_producer$" "$T/adb.args" || fail "--abstract: $(cat "$T/adb.args")"
if "$TA" --name 'bad name' X >/dev/null 2>"$T/bad.err"; then fail "a bad --name was accepted"; fi
grep -q "is not a node name" "$T/bad.err" || fail "bad --name: $(cat "$T/bad.err")"

# ---- failures: no device; a producer forward that fails leaves no consumer forward behind ----
if "$TA" offline >/dev/null 2>"$T/off.err"; then fail "an unknown device succeeded"; fi
grep -q "device 'offline' not found" "$T/off.err" || fail "unknown device: $(cat "$T/off.err")"
if out=$("$TA" half 2>"$T/half.err"); then fail "a failing producer forward succeeded: $out"; fi
[ -z "$out" ] || fail "a failed run printed '$out'"
if grep -q "^half " "$T/forwards"; then fail "the failed run left a forward: $(cat "$T/forwards")"; fi
grep -q "cannot bind listener" "$T/half.err" || fail "half: $(cat "$T/half.err")"

# ---- --remove: exactly this device's forwards to traced's sockets ----
: >"$T/adb.args"
out=$("$TA" --remove emulator-5554 2>"$T/rm.err") || fail "--remove failed: $(cat "$T/rm.err")"
[ -z "$out" ] || fail "--remove printed '$out' on stdout"
cat >"$T/want.args" <<WANT
-s emulator-5554 forward --list
-s emulator-5554 forward --remove tcp:40001
-s emulator-5554 forward --remove tcp:40002
WANT
diff "$T/want.args" "$T/adb.args" >"$T/diff.txt" || fail "--remove called adb with: $(cat "$T/diff.txt")"
if grep -q "^emulator-5554 " "$T/forwards"; then fail "--remove left: $(cat "$T/forwards")"; fi
grep -q "^192.168.1.5:5555 tcp:40003 " "$T/forwards" || fail "--remove touched another device: $(cat "$T/forwards")"
"$TA" --remove emulator-5554 2>"$T/rm2.err" || fail "a second --remove failed"
grep -q "no forwards of emulator-5554" "$T/rm2.err" || fail "second --remove: $(cat "$T/rm2.err")"
if "$TA" >/dev/null 2>&1; then fail "no SERIAL was accepted"; fi

echo "PASS: tracegate-adb sets up, reuses and removes the forwards and prints a --node flag tracegated takes"
