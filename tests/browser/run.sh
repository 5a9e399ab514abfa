#!/bin/sh
# run.sh: the browser test: tracegated serving web/ on a free port, tracegate-demo producing
# TrackEvent data, and record.spec.mjs driving Debian's Chromium through playwright-core (installed
# from npm into tests/browser/node_modules when missing) to record a trace the Perfetto UI's way.
# Needs chromium, node and npm (contrib/install-deps.sh with TRACEGATE_BROWSER_DEPS=1); exit 77 = skipped.
set -u

B=${TG_BUILDDIR:-$(pwd)}
S=${TG_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
HERE=$S/tests/browser
TRACEGATED=$B/gateway/tracegated
DEMO=$B/src/demo/tracegate-demo
CHROMIUM=${CHROMIUM:-/usr/bin/chromium}
. "$S/tests/integration/tg_wait.sh"
. "$S/tests/integration/tg_scratch.sh"

for bin in "$TRACEGATED" "$DEMO"; do
    if [ ! -x "$bin" ]; then echo "SKIP: $bin is not built yet"; exit 77; fi
done
if [ ! -x "$CHROMIUM" ]; then echo "SKIP: $CHROMIUM is not installed (TRACEGATE_BROWSER_DEPS=1 contrib/install-deps.sh)"; exit 77; fi
for tool in node npm curl timeout; do
    if ! command -v $tool >/dev/null 2>&1; then echo "SKIP: $tool is not installed"; exit 77; fi
done
if ! "$TRACEGATED" --help 2>&1 | grep -q -- "--web-root"; then echo "SKIP: tracegated has no --web-root"; exit 77; fi

# playwright-core (the library only: it never downloads a browser)
if [ ! -d "$HERE/node_modules/playwright-core" ]; then
    echo "installing playwright-core into $HERE/node_modules"
    if ! (cd "$HERE" && PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 timeout 300 npm install --no-audit --no-fund \
          --no-save --loglevel=error >/dev/null 2>&1); then
        echo "SKIP: cannot install playwright-core from npm"
        exit 77
    fi
fi

tg_scratch browser

http_up_or_gone() { curl -s -o /dev/null "http://127.0.0.1:$1/healthz" || ! kill -0 "$2" 2>/dev/null; }
PORT=
try=0
while [ $try -lt 8 ]; do
    try=$((try + 1))
    cand=$(( 20000 + ($$ * 7919 + try * 104729 + $(date +%N 2>/dev/null | sed 's/^0*//;s/^$/0/') ) % 40000 ))
    rm -f "$T/p.sock" "$T/c.sock"
    "$TRACEGATED" --producer-socket "$T/p.sock" --consumer-socket "$T/c.sock" --http "127.0.0.1:$cand" \
        --web-root "$S/web" --log-level info >"$T/tracegated.log" 2>&1 &
    DPID=$!
    # up (answers /healthz), or gone (the port was taken: try another)
    wait_for 20 http_up_or_gone "$cand" "$DPID" || fail "tracegated did not start"
    kill -0 "$DPID" 2>/dev/null && PORT=$cand
    if [ -n "$PORT" ]; then PIDS="$PIDS $DPID"; break; fi
    kill "$DPID" 2>/dev/null
    wait "$DPID" 2>/dev/null
done
[ -n "$PORT" ] || fail "tracegated did not start"

"$DEMO" --producer-socket "$T/p.sock" --rate 100 --duration 1200 >"$T/demo.log" 2>&1 &
PIDS="$PIDS $!"
# the demo is registered before the page starts its session (it then starts drawing at once)
wait_for_line 30 "$T/demo.log" "registered with the tracing service" || fail "the demo did not register"

cd "$HERE" || exit 99
tg_timeout 180 node record.spec.mjs "http://127.0.0.1:$PORT" --want-track-events 2>&1 | tee "$T/spec.log"
rc=$(tail -n 1 "$T/spec.log" | grep -q '^[0-9]* passed, 0 failed$' && echo 0 || echo 1)
[ "$rc" = 0 ] || fail "the browser test failed"
exit 0
