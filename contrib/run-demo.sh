#!/usr/bin/env bash
# run-demo.sh: the main job on a fresh Debian 12 machine: install dependencies, build, and run
# tracegated (service + gateway) with the demo producer, recording a sample trace.
set -euo pipefail
cd "$(dirname "$0")/.."

bash contrib/install-deps.sh
if [ ! -x gateway/tracegated ] || [ ! -x gateway/tracectl ]; then
  [ -x configure ] || autoreconf -fi
  [ -f Makefile ] || ./configure
  make -j"$(nproc)"
fi

exec ./gateway/tracegated "$@"
