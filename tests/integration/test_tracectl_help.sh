#!/bin/sh
# test_tracectl_help.sh: `tracectl COMMAND --help` prints that command's usage on stdout and exits 0
# without connecting anywhere (the consumer socket named here does not exist), for every command;
# `query` took --help for a URL-less call and tried to connect, `nodes` printed its usage as an
# error (exit 2). record's help keeps each option's text under its own option; the command list
# names record's fleet options and dump --summary. Exit 77 = skipped.
set -u
B=${TG_BUILDDIR:-$(pwd)}
S=${TG_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
TC=$B/src/tracectl/tracectl
[ -x "$TC" ] || { echo "SKIP: tracectl not built"; exit 77; }
. "$S/tests/integration/tg_wait.sh"
T=$(mktemp -d "${TMPDIR:-/tmp}/tg-tchelp.XXXXXX") || exit 99
trap 'rm -rf "$T"' EXIT
PERFETTO_CONSUMER_SOCK_NAME=$T/no-such-consumer
export PERFETTO_CONSUMER_SOCK_NAME
fail=0
for cmd in query record attach clone nodes spans merge stats dump kcdata; do
    tg_timeout 20 "$TC" "$cmd" --help >"$T/out" 2>"$T/err"
    rc=$?
    if [ $rc -ne 0 ]; then
        echo "FAIL: tracectl $cmd --help exited $rc: $(cat "$T/err")"; fail=1; continue
    fi
    grep -q "^usage: tracectl $cmd" "$T/out" || { echo "FAIL: tracectl $cmd --help: no usage on stdout"; fail=1; }
    [ -s "$T/err" ] && { echo "FAIL: tracectl $cmd --help wrote to stderr: $(cat "$T/err")"; fail=1; }
done
# an operand query does not take is refused, not ignored
tg_timeout 20 "$TC" query "unix:$T/c.sock" extra >"$T/out" 2>"$T/err"
rc=$?
[ $rc -eq 2 ] && grep -q "unexpected argument 'extra'" "$T/err" ||
    { echo "FAIL: tracectl query URL extra: exit $rc, $(cat "$T/err")"; fail=1; }
# tracectl --help names the options the README uses: record --all/--nodes/--spans, dump --summary
"$TC" --help >"$T/top"
for opt in --nodes --all --all-machines --spans --summary --host-node; do
    grep -qE "[[|]$opt[] |]" "$T/top" || { echo "FAIL: tracectl --help does not name $opt"; fail=1; }
done
# commands that need a gateway default to the local one, not to the service's socket
grep -q "stats, record --nodes/--all and --node: the local gateway" "$T/top" ||
    { echo "FAIL: tracectl --help says every command defaults to the consumer socket"; fail=1; }
# record --help: the line after --no-resume continues its sentence
"$TC" record --help | grep -A1 -e '--no-resume ' | tail -n 1 | grep -q "when the connection drops" ||
    { echo "FAIL: record --help: --no-resume's text is split"; "$TC" record --help; fail=1; }
[ $fail -eq 0 ] || exit 1
echo PASS
