#!/bin/sh
# test_tracectl_query_replay.sh: `tracectl query` against the answers a real traced gave to
# `perfetto --query` (shared/interop/recordings/consumer_query_service_state.bin): the producer,
# its data source and the service version must be printed. Exit 77 = skipped.
set -u
B=${TG_BUILDDIR:-$(pwd)}
S=${TG_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
SHARED=${TG_SHARED_DIR:-$S/../shared}
REC=$SHARED/interop/recordings/consumer_query_service_state.bin
[ -x "$B/src/tracectl/tracectl" ] || { echo "SKIP: tracectl not built"; exit 77; }
[ -f "$REC" ] || { echo "SKIP: $REC is absent (../shared/interop not available)"; exit 77; }
command -v python3 >/dev/null || { echo "SKIP: python3 missing"; exit 77; }
. "$S/tests/integration/tg_wait.sh"
T=$(mktemp -d "${TMPDIR:-/tmp}/tg-qreplay.XXXXXX") || exit 99
trap 'kill $SRV 2>/dev/null; rm -rf "$T"' EXIT
python3 "$S/tests/integration/replay_server.py" "$REC" "$T/c.sock" >"$T/srv.out" 2>&1 &
SRV=$!
wait_for_line 20 "$T/srv.out" ready || { echo "FAIL: the replay server did not start: $(cat "$T/srv.out")"; exit 1; }
tg_timeout 20 "$B/src/tracectl/tracectl" query "unix:$T/c.sock" >"$T/out" 2>&1
rc=$?
cat "$T/out"
[ $rc -eq 0 ] || { echo "FAIL: tracectl exited $rc"; exit 1; }
for want in "Perfetto v0.0 (unknown)" "/opt/tgdemo/bin/loadprod" "track_event" "Tracing sessions: 0"; do
    grep -qF "$want" "$T/out" || { echo "FAIL: output lacks '$want'"; exit 1; }
done
echo PASS
