#!/usr/bin/env bash
# install-deps.sh: install everything tracegate needs to build, test and benchmark on Debian 12.
# Idempotent; needs root (or sudo). Used by the README's commands and by .ci/run.
# Optional extras: TRACEGATE_BROWSER_DEPS=1 (the browser test), TRACEGATE_STRESS_DEPS=1 (make check-stress).
# TRACEGATE_TRACE_PROCESSOR=0 skips Perfetto's trace processor (below; the tests then skip its checks).
set -euo pipefail

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

PKGS=(
  build-essential autoconf automake libtool pkg-config
  libevent-dev libssl-dev libwebsockets-dev libprotobuf-c-dev protobuf-c-compiler libnghttp2-dev
  libcmocka-dev clang
  openssl socat stunnel4 websockify python3 procps iproute2 jq
  protobuf-compiler
  adb   # tests: a real ADB server for /adb (test_ws_adb.sh)
  nftables openssh-server openssh-client util-linux   # tests: test_link_netns.sh (NAT), test_link_ssh.sh (sshd), setpriv
  locales   # tests: OnePath under a comma-decimal locale (a de_DE locale compiled with localedef)
  strace    # tests: test_ws_security.sh (which TLS files tracegated and libwebsockets open)
)
# browser tests (issue 4): chromium + node for playwright-core
if [ "${TRACEGATE_BROWSER_DEPS:-0}" = "1" ]; then
  PKGS+=(chromium curl)
  # the machine may already carry a newer Node.js (with npm) than Debian's: keep it
  command -v node >/dev/null 2>&1 || PKGS+=(nodejs)
  command -v npm >/dev/null 2>&1 || PKGS+=(npm)
fi
# the OTLP test validates OnePath's OTLP/JSON with the OpenTelemetry JS project's own message
# definitions (npm package @opentelemetry/otlp-transformer): node and npm, unless already there
command -v node >/dev/null 2>&1 || PKGS+=(nodejs)
command -v npm >/dev/null 2>&1 || PKGS+=(npm)
# `make check-stress` (contrib/stress-check.sh) loads the CPUs with stress-ng while the suite runs
if [ "${TRACEGATE_STRESS_DEPS:-0}" = "1" ]; then
  PKGS+=(stress-ng)
fi
# tests/bench/insn_per_mb.sh and tls_syscalls.sh (not run by make check or make bench)
if [ "${TRACEGATE_BENCH_DEPS:-0}" = "1" ]; then
  PKGS+=(valgrind)
fi

missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
# Perfetto's own trace processor, which the tests ask what it makes of tracegate's traces (import
# errors, the flow table: tests/integration/tp_lib.sh). Perfetto ships none for Debian 12; Debian's
# chromium-shell package carries Chromium's build of it, libtest_trace_processor.so (needing only
# libc, libm, libz and libgcc). Only that file is taken from the package, not the browser shell and
# its dependencies: the .deb is downloaded (apt-get download: Debian's signed archive) and the one
# file installed to /usr/local/lib/tracegate.
TP_LIB=/usr/local/lib/tracegate/libtest_trace_processor.so
if [ "${TRACEGATE_TRACE_PROCESSOR:-1}" = "1" ] && [ ! -r "$TP_LIB" ] &&
  [ ! -r /usr/lib/chromium/libtest_trace_processor.so ]; then
  tp_tmp=$(mktemp -d)
  trap 'rm -rf "$tp_tmp"' EXIT
  ( cd "$tp_tmp" && { apt-get download -qq chromium-shell 2>/dev/null ||
      { $SUDO apt-get update -qq && apt-get download -qq chromium-shell; }; } )
  dpkg-deb --fsys-tarfile "$tp_tmp"/chromium-shell_*.deb |
    tar -x -C "$tp_tmp" ./usr/lib/chromium/libtest_trace_processor.so
  $SUDO install -D -m 0644 "$tp_tmp/usr/lib/chromium/libtest_trace_processor.so" "$TP_LIB"
  echo "installed Perfetto's trace processor (from chromium-shell) as $TP_LIB"
fi
echo "tracegate dependencies are installed"
