#!/bin/sh
# test_link_ssh.sh: a link over ssh (docs/links.md, "How links are tested"). Root only, with
# Debian's openssh-server; otherwise skipped (77).
#
#   near (tracegated --peer ssh://root@127.0.0.1:PORT)
#     `-- ssh -T ... -p PORT root@127.0.0.1 'tracegated --node-name far ... --link-stdio'
#           `-- a private sshd on 127.0.0.1:PORT: its own host key and authorized_keys (a key made
#               here), AllowTcpForwarding no, AllowStreamLocalForwarding no
#
# Nothing listens for links on the far side: the link is h2c over the ssh session's stdio. Checks:
# the link comes up (the far node's log, relayed through ssh's stderr, names the ssh principal),
# `tracectl nodes` shows it, and near queries and records the far node's demo through the link
# (every frame the demo drew, once). The sshd is stopped and its files removed on exit.
# Environment (from `make check`): TG_BUILDDIR, TG_SRCDIR. Exit 77 = skipped.
. "$(dirname "$0")/link_lib.sh"
[ "$(id -u)" = 0 ] || { echo "SKIP: the test sshd needs root"; exit 77; }
SSHD=
for d in /usr/sbin /usr/local/sbin /sbin; do [ -x "$d/sshd" ] && SSHD=$d/sshd && break; done
[ -n "$SSHD" ] || { echo "SKIP: sshd is not installed (Debian: openssh-server)"; exit 77; }
command -v ssh >/dev/null 2>&1 && command -v ssh-keygen >/dev/null 2>&1 ||
    { echo "SKIP: ssh and ssh-keygen are needed (Debian: openssh-client)"; exit 77; }

# ---- keys: the server's host key, and a client key only this sshd accepts ----
ssh-keygen -q -t ed25519 -N '' -f "$T/host_key" || fail "cannot make the host key"
ssh-keygen -q -t ed25519 -N '' -f "$T/id" || fail "cannot make the client key"
cp "$T/id.pub" "$T/authorized_keys"
chmod 0600 "$T/authorized_keys" "$T/host_key" "$T/id"
# sshd drops privileges into this directory (Debian makes it at boot; a container may not have it)
[ -d /run/sshd ] || mkdir -p -m 0755 /run/sshd

# ---- the sshd, on a free loopback port (another is tried when one was taken in between) ----
sshd_up() { grep -q "Server listening on 127.0.0.1 port $PORT" "$T/sshd.log" || ! kill -0 "$SSHD_PID" 2>/dev/null; }
try=0
PORT=
while [ $try -lt 8 ]; do
    try=$((try + 1))
    PORT=$("$CLIENT" free-port)
    cat >"$T/sshd_config" <<EOF
Port $PORT
ListenAddress 127.0.0.1
HostKey $T/host_key
AuthorizedKeysFile $T/authorized_keys
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin prohibit-password
AllowTcpForwarding no
AllowStreamLocalForwarding no
AllowAgentForwarding no
X11Forwarding no
PermitTunnel no
PermitUserRC no
UsePAM no
StrictModes no
PidFile $T/sshd.pid
LogLevel VERBOSE
EOF
    "$SSHD" -t -f "$T/sshd_config" >"$T/sshd-check.txt" 2>&1 || fail "sshd rejects the test configuration: $(cat "$T/sshd-check.txt")"
    "$SSHD" -D -e -f "$T/sshd_config" >"$T/sshd.log" 2>&1 &
    SSHD_PID=$!
    wait_for 20 sshd_up || fail "sshd did not start: $(cat "$T/sshd.log")"
    if kill -0 "$SSHD_PID" 2>/dev/null; then
        PIDS="$PIDS $SSHD_PID"
        break
    fi
    wait "$SSHD_PID" 2>/dev/null
    PORT=
done
[ -n "$PORT" ] || fail "sshd did not start on any of $try ports: $(cat "$T/sshd.log")"
# the forwarding the test relies on not having
"$SSHD" -T -f "$T/sshd_config" -C user=root,host=localhost,addr=127.0.0.1 >"$T/sshd-effective.txt" 2>&1 ||
    fail "sshd -T failed: $(cat "$T/sshd-effective.txt")"
grep -qx "allowtcpforwarding no" "$T/sshd-effective.txt" || fail "the sshd allows TCP forwarding"
grep -qx "allowstreamlocalforwarding no" "$T/sshd-effective.txt" || fail "the sshd allows stream-local forwarding"
echo "ok: sshd on 127.0.0.1:$PORT (no TCP or stream-local forwarding)"

# ---- near dials far over ssh; far is the tracegated the ssh session runs ----
SSH_CMD="ssh -T -o BatchMode=yes -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR -i $T/id"
FAR="$TRACEGATED --node-name far --no-http --producer-socket $T/far-p.sock --consumer-socket $T/far-c.sock --log-level info"
start_node near --peer "ssh://root@127.0.0.1:$PORT" --ssh-command "$SSH_CMD" --remote-command "$FAR"
wait_link near far
# the far node's log comes back through ssh's stderr
wait_log "$T/near.log" "link command: .*link near up \(stdio, ssh:uid:0, link [0-9a-f]*\)" ||
    fail "the far node did not log the link (as the ssh user)"
grep -q "Accepted publickey for root from 127.0.0.1" "$T/sshd.log" || fail "sshd did not log the key login"
expect_state near far "up -"
echo "ok: the link runs over ssh (far logs it as ssh:uid:0)"

# ---- query and record the far node through the link ----
wait_for 20 test -S "$T/far-p.sock" || fail "the far node has no producer socket"
start_demo far
FAR_DEMO=$DEMO_PID
tg_timeout 30 "$TRACECTL" --node far query "unix:$T/near-gw.sock" >"$T/q.txt" 2>&1 || fail "query far: $(cat "$T/q.txt")"
grep -q "^[0-9][0-9]* *$FAR_DEMO .*tracegate-demo" "$T/q.txt" || fail "the query does not show far's demo: $(cat "$T/q.txt")"
short_record r_far "$T/far-demo.log" --node far record "unix:$T/near-gw.sock"
check_trace "$T/r_far.pftrace" "$T/far-demo.log" 1
echo "ok: query and record of the far node over ssh"

# ---- near stops: the ssh session ends, and with it the far node ----
stop_node "$NODE_PID"
[ "$WAIT_RC" = 0 ] || fail "near did not stop cleanly ($WAIT_RC)"
wait_log "$T/sshd.log" "(Disconnected from|Close session: user root from 127\.0\.0\.1)" || fail "the ssh session did not end"
echo "PASS"
exit 0
