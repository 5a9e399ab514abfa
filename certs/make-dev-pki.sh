#!/usr/bin/env bash
# make-dev-pki.sh: create a development PKI for tracegate's TLS/WSS listeners and mTLS tests:
# a CA, a server certificate (localhost, 127.0.0.1, ::1 and extra names given as arguments)
# and a client certificate. Usage: certs/make-dev-pki.sh [OUTDIR] [EXTRA_DNS_NAME...]
# Never use these files in production: the CA key is left unencrypted next to them.
set -euo pipefail
out="${1:-$(dirname "$0")/dev}"
shift || true
mkdir -p "$out"
cd "$out"
umask 077

days=825
if [ ! -f ca.key ]; then
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -sha256 -days "$days" \
    -subj "/CN=tracegate development CA" -keyout ca.key -out ca.crt \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
fi

san="DNS:localhost,IP:127.0.0.1,IP:::1"
for name in "$@"; do san="$san,DNS:$name"; done

issue() { # name cn extended-key-usage san
  local name=$1 cn=$2 eku=$3 alt=$4
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -sha256 \
    -subj "/CN=$cn" -keyout "$name.key" -out "$name.csr" 2>/dev/null
  printf 'basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=%s\n%s\n' \
    "$eku" "${alt:+subjectAltName=$alt}" > "$name.ext"
  openssl x509 -req -in "$name.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days "$days" -sha256 \
    -extfile "$name.ext" -out "$name.crt" 2>/dev/null
  rm -f "$name.csr" "$name.ext"
}
issue server localhost serverAuth "$san"
issue client tracegate-client clientAuth ""
# a second, untrusted CA and client for negative tests
if [ ! -f rogue-ca.key ]; then
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -sha256 -days "$days" \
    -subj "/CN=rogue CA" -keyout rogue-ca.key -out rogue-ca.crt 2>/dev/null
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -sha256 -subj "/CN=rogue-client" \
    -keyout rogue-client.key -out rogue-client.csr 2>/dev/null
  openssl x509 -req -in rogue-client.csr -CA rogue-ca.crt -CAkey rogue-ca.key -CAcreateserial -days "$days" \
    -sha256 -out rogue-client.crt 2>/dev/null
  rm -f rogue-client.csr
fi
chmod 0644 ./*.crt
echo "development PKI in $(pwd): ca.crt server.{crt,key} client.{crt,key}"
