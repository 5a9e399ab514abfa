#!/usr/bin/env python3
"""tls_hold.py: helpers of test_gw_tls_path.sh (not installed).

  tls_hold.py probe
      prints "available" if this kernel lets a connected TCP socket take the `tls` ULP
      (setsockopt TCP_ULP "tls"), else "unavailable": the test's own look at kernel TLS.
  tls_hold.py hold HOST:PORT CAFILE READY_FILE RELEASE_FILE
      completes a TLS handshake with HOST:PORT (verifying against CAFILE), creates READY_FILE,
      and holds the connection until RELEASE_FILE exists (the test says when), then closes.
  tls_hold.py check STATUS_JSON KERNEL OPEN
      checks the "tls" object of an /api/status body: kernel_tls is KERNEL, the configured path
      auto resolves to socket (kTLS) when the kernel offers it and to batched otherwise, and the
      OPEN open connections are counted under that path. Prints what it checked; exit 1 if not.
"""
import json
import os
import socket
import ssl
import sys
import time

TCP_ULP = 31


def probe():
    lst = socket.socket()
    lst.bind(("127.0.0.1", 0))
    lst.listen(1)
    c = socket.create_connection(lst.getsockname())
    a, _ = lst.accept()
    try:
        c.setsockopt(socket.IPPROTO_TCP, TCP_ULP, b"tls")
        print("available")
    except OSError:
        print("unavailable")
    for s in (a, c, lst):
        s.close()


def hold(addr, cafile, ready, release):
    host, port = addr.rsplit(":", 1)
    ctx = ssl.create_default_context(cafile=cafile)
    ctx.check_hostname = False
    with socket.create_connection((host, int(port))) as raw:
        with ctx.wrap_socket(raw, server_hostname="localhost") as s:
            open(ready, "w").close()
            while not os.path.exists(release):  # the test releases it; it is killed at the end
                time.sleep(0.05)
            s.close()


def check(path, kernel, n_open):
    st = json.load(open(path))
    t = st["tls"]
    c = t["connections"]
    errs = []
    if t["kernel_tls"] != kernel:
        errs.append("kernel_tls %s, the test sees %s" % (t["kernel_tls"], kernel))
    want_path = "socket" if kernel == "available" else "batched"
    if t["configured_path"] != "auto" or t["path"] != want_path:
        errs.append("path %s (configured %s), expected %s" % (t["path"], t["configured_path"], want_path))
    if c["open"] != n_open:
        errs.append("open %d, expected %d" % (c["open"], n_open))
    if kernel == "available":
        # TLS 1.3 with AES-GCM: OpenSSL 3.0 hands the kernel the sending side
        if c["ktls_send"] != n_open or c["batched"] != 0:
            errs.append("kernel TLS offered, but ktls_send %d batched %d" % (c["ktls_send"], c["batched"]))
    else:
        if c["ktls_send"] or c["ktls_recv"] or c["socket_userspace"] or c["batched"] != n_open:
            errs.append("no kernel TLS, but connections %s" % json.dumps(c))
    if errs:
        print("; ".join(errs))
        sys.exit(1)
    print("tls: kernel_tls=%s path=%s connections=%s" % (t["kernel_tls"], t["path"], json.dumps(c)))


if __name__ == "__main__":
    cmd = sys.argv[1] if len(sys.argv) > 1 else ""
    if cmd == "probe":
        probe()
    elif cmd == "hold" and len(sys.argv) == 6:
        hold(*sys.argv[2:6])
    elif cmd == "check" and len(sys.argv) == 5:
        check(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    else:
        sys.exit(__doc__)
