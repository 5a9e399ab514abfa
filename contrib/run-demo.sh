#!/usr/bin/env bash
# run-demo.sh: the main job on a fresh Debian 12 machine: install dependencies, build, then run
# tracegated (tracing service + gateway on 127.0.0.1:8037) with the demo producer, record a sample
# trace with tracectl, and keep serving until Ctrl-C so a browser can connect.
set -euo pipefail
cd "$(dirname "$0")/.."

bash contrib/install-deps.sh
if [ ! -x gateway/tracegated ] || [ ! -x src/tracectl/tracectl ] || [ ! -x src/demo/tracegate-demo ]; then
  [ -x configure ] || autoreconf -fi
  [ -f Makefile ] || ./configure
  make -j"$(nproc)"
fi

pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT INT TERM

./gateway/tracegated --web-root web "$@" &
pids+=($!)
# ready once the consumer socket answers (a slow machine may take more than a moment)
for _ in $(seq 300); do
  kill -0 "${pids[0]}" 2>/dev/null || { echo "tracegated did not start" >&2; exit 1; }
  ./src/tracectl/tracectl query >/dev/null 2>&1 && break
  sleep 0.1
done

./src/demo/tracegate-demo &
pids+=($!)

./src/tracectl/tracectl query || true
echo
./src/tracectl/tracectl record --duration 5s -o demo.pftrace
echo
cat <<MSG
tracegate is running.
  - a sample trace was written to $(pwd)/demo.pftrace (open it at https://ui.perfetto.dev)
  - record live from a browser: open https://ui.perfetto.dev, "Record new trace",
    target "Linux" via websocket ws://127.0.0.1:8037/traced (tracegate serves it)
  - tracegate's own page: http://127.0.0.1:8037/   metrics: http://127.0.0.1:8037/metrics
  - from a shell: ./src/tracectl/tracectl record --duration 10s -o t.pftrace
Press Ctrl-C to stop.
MSG
wait "${pids[0]}"
