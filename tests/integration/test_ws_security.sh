#!/bin/sh
# test_ws_security.sh: attacks on tracegated's HTTP/WebSocket front end, end to end: DNS rebinding
# (a foreign Host on every route, 421, counted and logged; --http-host names allowed); a
# byte-a-second dribbler cut at --handshake-timeout; more half-open clients than --http-max-pending
# (refused, counted, and a legitimate client served once they are gone); SIGHUP changing the
# local-roles new WebSocket clients get; tokens from --gen-token travelling as a subprotocol, old
# base64 tokens refused by tracectl unless --token-in-url (or given in base64url form), and no token
# in the log; libwebsockets' own error lines for bad requests sampled; on a non-loopback --http, /metrics and /api/status only with a bearer token or a client
# certificate. Environment (from `make check`): TG_BUILDDIR, TG_SRCDIR. Exit 77 = skipped.
set -u
. "$(dirname "$0")/gw_lib.sh"
need "$TRACEGATED" "$TRACECTL" "$CLIENT"
for tool in curl python3; do
    command -v $tool >/dev/null 2>&1 || { echo "SKIP: $tool is not installed"; exit 77; }
done

# start_http NAME HOST [options...]: tracegated with --http HOST:<free port> (retrying when the port
# is taken); sets GW_PID and PORT.
start_http() {
    name=$1
    host=$2
    shift 2
    try=0
    while [ $try -lt 8 ]; do
        try=$((try + 1))
        PORT=$(( 20000 + ($$ * 7919 + try * 104729 + $(date +%N | sed 's/^0*//;s/^$/0/')) % 40000 ))
        "$TRACEGATED" --producer-socket "$T/$name-p.sock" --consumer-socket "$T/$name-c.sock" \
            --http "$host:$PORT" --log-level info "$@" >"$T/$name.log" 2>&1 &
        GW_PID=$!
        # ready, or gone (the port was taken): a scaled safety net, not a verdict
        wait_for 20 _ready_or_gone "$T/$name.log" "$GW_PID"
        if grep -q "tracegated .* ready" "$T/$name.log" 2>/dev/null; then
            PIDS="$PIDS $GW_PID"
            return 0
        fi
        kill "$GW_PID" 2>/dev/null
        wait "$GW_PID" 2>/dev/null
    done
    fail "tracegated ($name) did not start its HTTP front end"
}

_ready_or_gone() { grep -q "tracegated .* ready" "$1" 2>/dev/null || ! kill -0 "$2" 2>/dev/null; }
_has_line() { grep -q -- "$2" "$1" 2>/dev/null; }
wait_log() { # FILE PATTERN: waits for the line (a scaled safety net of 10 s)
    wait_for 10 _has_line "$1" "$2"
}

metric() { # the value of a metric line (exact labels), or 0
    curl -s "http://127.0.0.1:$PORT/metrics" | awk -v k="$1" '$1 == k { print $2; f = 1 } END { if (!f) print 0 }'
}

# ---- tokens: a new one from --gen-token, an old-style base64 one with '/' and '=' ----
"$TRACEGATED" --gen-token >"$T/new.token" 2>"$T/gen.err" || fail "--gen-token failed"
NEW=$(cat "$T/new.token")
[ ${#NEW} = 43 ] || fail "--gen-token printed '$NEW' (want 43 characters)"
case $NEW in *[!A-Za-z0-9_-]*) fail "--gen-token is not base64url: $NEW" ;; esac
sed -n 's/^token-file line (set the name and roles): client recorder /new recorder /p' "$T/gen.err" >"$T/tokens"
[ -s "$T/tokens" ] || fail "--gen-token printed no token-file line: $(cat "$T/gen.err")"
OLD='q+Lr/0Zx1w9Kd4e+Ua/oYvN2c8Gm5bQ3Tj7HsPfXkE0='
echo "old recorder $(printf %s "$OLD" | "$TRACEGATED" --hash-token)" >>"$T/tokens"
OLD_URL=$(printf %s "$OLD" | tr '+/' '-_' | tr -d '=')

cat >"$T/gw.conf" <<CONF
token-file = $T/tokens
local-roles = observer
handshake-timeout = 2s
http-max-pending = 3
http-host = gw.example.test
CONF
start_http main 127.0.0.1 --config "$T/gw.conf"
U=http://127.0.0.1:$PORT
echo "tracegated on $U"

# ---- DNS rebinding: a foreign Host never reaches a route ----
for p in / /healthz /metrics /api/status /traced; do
    code=$(curl -s -o "$T/body" -w '%{http_code}' -H 'Host: attacker.example' "$U$p")
    [ "$code" = 421 ] || fail "$p with Host attacker.example: HTTP $code (want 421)"
    if grep -q tracegated_ "$T/body"; then fail "$p leaked metrics to a foreign Host"; fi
done
code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 5 -H 'Host: attacker.example:8037' \
    -H 'Connection: Upgrade' -H 'Upgrade: websocket' -H 'Sec-WebSocket-Version: 13' \
    -H 'Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==' -H 'Origin: http://attacker.example:8037' "$U/traced")
[ "$code" = 421 ] || fail "a rebound WebSocket upgrade got HTTP $code (want 421)"
grep -q 'Host "attacker.example" is not this server' "$T/main.log" || fail "the foreign Host was not logged"
[ "$(metric 'tracegated_connections_rejected_total{reason="http_host"}')" = 6 ] ||
    fail "http_host refusals not counted: $(curl -s "$U/metrics" | grep rejected)"
for h in "localhost:$PORT" "127.0.0.1" "[::1]:1" "gw.example.test:$PORT"; do
    code=$(curl -s -o /dev/null -w '%{http_code}' -H "Host: $h" "$U/api/status")
    [ "$code" = 200 ] || fail "/api/status with Host $h: HTTP $code (want 200)"
done
echo "Host check: foreign names refused (421), loopback and --http-host names served"

# ---- a byte-a-second dribbler, and more half-open clients than http-max-pending ----
python3 - "$PORT" >"$T/attack.out" 2>&1 <<'PY' || fail "attack script: $(cat "$T/attack.out")"
import socket, sys, time
port = int(sys.argv[1])
def conn():
    s = socket.create_connection(("127.0.0.1", port)); s.settimeout(0.05); return s
def closed(s):
    try:
        return s.recv(4096) == b""
    except socket.timeout:
        return False
    except OSError:
        return True
# the dribbler: one byte a second of a request that never ends
s = conn(); t0 = time.time(); req = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Pad: " + b"a" * 100
for i in range(len(req)):
    try:
        s.send(req[i:i + 1])
    except OSError:
        break
    end = time.time() + 1
    gone = False
    while time.time() < end and not gone:
        gone = closed(s)
    if gone or time.time() - t0 > 30:
        break
took = time.time() - t0
print("dribbler cut after %.1f s" % took)
if not gone or took < 1.9 or took > 6:
    sys.exit("the dribbler was not cut at the 2 s deadline (%.1f s, cut=%s)" % (took, gone))
# three half-open clients fill http-max-pending; a fourth is refused at once
half = [conn() for _ in range(3)]
for h in half:
    h.send(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n")
# the kernel hands connections to the server in order: the fourth comes after the three are counted
extra = conn(); t1 = time.time()
while time.time() - t1 < 5 and not closed(extra):
    pass
if time.time() - t1 >= 5:
    sys.exit("a fourth half-open client was not refused")
print("fourth half-open client refused")
for h in half:
    h.close()
PY
cat "$T/attack.out"
[ "$(metric 'tracegated_connections_rejected_total{reason="http_handshake_timeout"}')" -ge 1 ] ||
    fail "the dribbler's cut was not counted"
grep -q 'closed an HTTP connection from 127.0.0.1: no complete request' "$T/main.log" || fail "the cut was not logged"
grep -q 'too many connections still in their HTTP request' "$T/main.log" || fail "the refusal was not logged"
_served() { [ "$(curl -s -o /dev/null -w '%{http_code}' "$U/healthz")" = 200 ]; }
# the half-open clients' slots come back as the server sees them close
wait_for 5 _served || fail "a legitimate client was not served after the half-open clients left"
[ "$(metric 'tracegated_connections_rejected_total{reason="http_max_pending"}')" -ge 1 ] ||
    fail "the refused half-open client was not counted"
echo "limits: dribbler cut at the deadline, half-open clients capped, legitimate client served"

# ---- tokens on ws:// ----
timeout 30 "$TRACECTL" --token "$NEW" query "ws://127.0.0.1:$PORT/traced" >"$T/q1.out" 2>"$T/q1.err" ||
    fail "tracectl with a --gen-token token failed: $(cat "$T/q1.err")"
wait_log "$T/main.log" "(token, roles 0x2, token:new)" || fail "the generated token's principal was not logged"
if timeout 30 "$TRACECTL" --token "$OLD" query "ws://127.0.0.1:$PORT/traced" >/dev/null 2>"$T/q2.err"; then
    fail "tracectl sent an old-style token somehow without --token-in-url"
fi
grep -q -- "--gen-token" "$T/q2.err" || fail "no advice for an unfit token: $(cat "$T/q2.err")"
timeout 30 "$TRACECTL" --token "$OLD_URL" query "ws://127.0.0.1:$PORT/traced" >/dev/null 2>"$T/q3.err" ||
    fail "the base64url form of an old token was refused: $(cat "$T/q3.err")"
timeout 30 "$TRACECTL" --token-in-url --token "$OLD" query "ws://127.0.0.1:$PORT/traced" >/dev/null \
    2>"$T/q4.err" || fail "--token-in-url failed: $(cat "$T/q4.err")"
grep -q "token in the URL" "$T/q4.err" || fail "tracectl did not warn about --token-in-url"
[ "$(grep -c '(token, roles 0x2, token:old)' "$T/main.log")" = 2 ] || fail "the old token's two logins were not logged"
for secret in "$NEW" "$OLD" "$OLD_URL" "q%2BLr"; do
    if grep -qF -- "$secret" "$T/main.log"; then fail "a token leaked into the log"; fi
done
echo "tokens: subprotocol by default, the URL only when asked, never logged"

# ---- SIGHUP: local-roles for new WebSocket clients ----
timeout 30 "$TRACECTL" query "ws://127.0.0.1:$PORT/traced" >/dev/null 2>&1 || fail "tracectl query (observer) failed"
wait_log "$T/main.log" "(loopback, roles 0x1, uid:" || fail "a loopback WebSocket client did not get local-roles observer"
sed 's/^local-roles = observer$/local-roles = recorder,producer/' "$T/gw.conf" >"$T/gw.conf.new"
mv "$T/gw.conf.new" "$T/gw.conf"
kill -HUP "$GW_PID"
wait_log "$T/main.log" "reloaded:" || fail "SIGHUP did not reload"
timeout 30 "$TRACECTL" query "ws://127.0.0.1:$PORT/traced" >/dev/null 2>&1 || fail "tracectl query after SIGHUP failed"
wait_log "$T/main.log" "(loopback, roles 0x6, uid:" || fail "SIGHUP's local-roles did not reach new WebSocket clients"
echo "SIGHUP: new WebSocket clients get the new local-roles"

# ---- a client certificate over WSS is the principal it is over TLS: its whole subject ----
bash "$S/certs/make-dev-pki.sh" "$T/pki" >/dev/null 2>&1 || fail "cannot make a development PKI"
start_http wss 127.0.0.1 --http-tls --tls-cert "$T/pki/server.crt" --tls-key "$T/pki/server.key" \
    --tls-ca "$T/pki/ca.crt"
timeout 30 "$TRACECTL" --cacert "$T/pki/ca.crt" --cert "$T/pki/client.crt" --key "$T/pki/client.key" \
    query "wss://127.0.0.1:$PORT/traced" >"$T/wssq.out" 2>&1 || fail "a WSS query with a client certificate failed: $(tail -n 3 "$T/wssq.out")"
wait_log "$T/wss.log" "(certificate, roles 0x[0-9a-f]*, cert:/CN=tracegate-client)" ||
    fail "the WSS client certificate's principal is not its subject: $(grep -o '(certificate[^)]*)' "$T/wss.log" | head -n 1)"
kill "$GW_PID"
wait "$GW_PID" 2>/dev/null
echo "WSS: a client certificate is cert:/CN=tracegate-client, as over TLS"

# an encrypted key stops the start with the reason (no pass phrase prompt, whoever holds a terminal)
openssl pkey -in "$T/pki/server.key" -aes128 -passout pass:x -out "$T/pki/enc.key" 2>/dev/null ||
    fail "cannot encrypt a key"
chmod 600 "$T/pki/enc.key"
timeout 20 "$TRACEGATED" --producer-socket "$T/enc-p.sock" --consumer-socket "$T/enc-c.sock" \
    --http "127.0.0.1:$PORT" --http-tls --tls-cert "$T/pki/server.crt" --tls-key "$T/pki/enc.key" \
    </dev/null >"$T/enc.log" 2>&1
rc=$?
[ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] || fail "an encrypted key did not stop the start (exit $rc)"
grep -q "no unencrypted PEM private key" "$T/enc.log" || fail "no reason given for the encrypted key: $(tail -n 3 "$T/enc.log")"
echo "WSS: an encrypted key is refused with the reason"

# libwebsockets gets no file names: only tracegated opens the TLS files, through the reader that
# checks them (net/tls_files.h: O_NOCTTY|O_NONBLOCK, so a FIFO or a terminal cannot hang it), and
# installs what it read on the vhost's SSL_CTX; a SIGHUP reads them again. OpenSSL's file loaders,
# which lws used with file names, open with O_RDONLY alone: a file swapped after tracegated's
# check was read unchecked (a FIFO that hangs the start, a key that asks a terminal for a pass
# phrase).
strace -f -qq -o /dev/null true 2>/dev/null || fail "strace cannot trace here (contrib/install-deps.sh installs it)"
printf '#!/bin/sh\nexec strace -f -qq -e trace=open,openat,openat2 -o "%s" "%s" "$@"\n' "$T/open.trace" "$TRACEGATED" >"$T/traced-gw"
chmod +x "$T/traced-gw"
REAL_TRACEGATED=$TRACEGATED
TRACEGATED=$T/traced-gw
start_http wssopen 127.0.0.1 --http-tls --tls-cert "$T/pki/server.crt" --tls-key "$T/pki/server.key" \
    --tls-ca "$T/pki/ca.crt"
TRACEGATED=$REAL_TRACEGATED
opens() { grep -c -e "/pki/$1\"" "$T/open.trace"; }
unchecked_opens() { # opens of the TLS files without O_NONBLOCK: not tracegated's checked reader
    grep -e '/pki/\(server\.crt\|server\.key\|ca\.crt\)"' "$T/open.trace" | grep -v O_NONBLOCK
}
wss_query() {
    timeout 30 "$TRACECTL" --cacert "$T/pki/ca.crt" --cert "$T/pki/client.crt" --key "$T/pki/client.key" \
        query "wss://127.0.0.1:$PORT/traced" >"$T/wssq.out" 2>&1
}
wss_query || fail "WSS with the files installed by tracegated: $(tail -n 3 "$T/wssq.out")"
for f in server.crt server.key ca.crt; do
    [ "$(opens $f)" -ge 1 ] || fail "$f was never opened: $(grep -e "/pki/" "$T/open.trace")"
done
! unchecked_opens >"$T/unchecked.txt" || fail "a TLS file opened by name outside tracegated's checked reader: $(head -n 3 "$T/unchecked.txt")"
n_crt=$(opens server.crt) n_key=$(opens server.key) n_ca=$(opens ca.crt)
GW_CHILD=$(pgrep -P "$GW_PID" | head -n 1)
kill -HUP "$GW_CHILD"
wait_log "$T/wssopen.log" "reloaded the HTTPS/WSS certificate" || fail "no certificate reload after SIGHUP: $(tail -n 3 "$T/wssopen.log")"
wss_query || fail "WSS after a reload: $(tail -n 3 "$T/wssq.out")"
[ "$(opens server.crt)" -gt "$n_crt" ] && [ "$(opens server.key)" -gt "$n_key" ] && [ "$(opens ca.crt)" -gt "$n_ca" ] ||
    fail "SIGHUP did not read the TLS files again: $(grep -e "/pki/" "$T/open.trace")"
! unchecked_opens >"$T/unchecked.txt" || fail "a TLS file opened by name outside tracegated's checked reader at reload: $(head -n 3 "$T/unchecked.txt")"
kill "$GW_CHILD"
wait "$GW_PID" 2>/dev/null
echo "WSS: libwebsockets opens no TLS file; tracegated reads them, checked, at start and at each reload"

# ---- libwebsockets' own complaints about bad requests are sampled, like every pre-auth refusal ----
# (lws logs each oversized header as an error: 60 of them must not become 60 log lines)
start_http lwsflood 127.0.0.1
t0=$(date +%s)
i=0
while [ $i -lt 60 ]; do
    "$CLIENT" hostile http-huge "127.0.0.1:$PORT" >/dev/null 2>&1 || fail "a huge-header request was not closed"
    i=$((i + 1))
done
t1=$(date +%s)
lines=$(grep -c ' lws: ' "$T/lwsflood.log")
most=$(( 5 * (t1 - t0 + 2) ))
[ "$lines" -ge 1 ] || fail "libwebsockets' refusal of a huge header was not logged at all"
[ "$lines" -le "$most" ] ||
    fail "60 huge headers in $((t1 - t0)) s made $lines lws log lines (at most 5 a second expected)"
kill "$GW_PID"
wait "$GW_PID" 2>/dev/null
echo "lws log lines for 60 huge headers in $((t1 - t0)) s: $lines"

# ---- non-loopback --http: /metrics and /api/status need credentials ----
EXT=$(hostname -I 2>/dev/null | tr ' ' '\n' | grep -E '^[0-9]+\.[0-9]+\.[0-9]+\.[0-9]+$' | grep -v '^127\.' | head -n 1)
if [ -z "$EXT" ]; then
    echo "PASS (the non-loopback part was skipped: this machine has no non-loopback IPv4 address)"
    exit 0
fi
start_http ext "$EXT" --http-tls --tls-cert "$T/pki/server.crt" --tls-key "$T/pki/server.key" \
    --tls-ca "$T/pki/ca.crt" --token-file "$T/tokens"
E=https://$EXT:$PORT
c() { curl -s -k -o "$T/ext.body" -w '%{http_code}' "$@"; }
[ "$(c "$E/healthz")" = 200 ] || fail "/healthz off loopback is not open"
for p in /metrics /api/status; do
    [ "$(c "$E$p")" = 401 ] || fail "$p off loopback without credentials: not 401"
    [ "$(c -H "Authorization: Bearer wrong" "$E$p")" = 401 ] || fail "$p with a wrong token: not 401"
    [ "$(c -H "Authorization: Bearer $NEW" "$E$p")" = 200 ] || fail "$p with a token: not 200"
    [ "$(c --cert "$T/pki/client.crt" --key "$T/pki/client.key" "$E$p")" = 200 ] ||
        fail "$p with a client certificate: not 200"
    [ "$(c --cert "$T/pki/rogue-client.crt" --key "$T/pki/rogue-client.key" "$E$p")" != 200 ] ||
        fail "$p with a certificate from another CA: 200"
done
grep -q "refused /metrics from 127.0.0.1\|refused /metrics from $EXT" "$T/ext.log" || fail "the refusal was not logged"
if grep -qF -- "$NEW" "$T/ext.log"; then fail "the bearer token leaked into the log"; fi
echo "PASS: Host check, pre-auth limits, role reload, token transport and protected status all hold"
exit 0
