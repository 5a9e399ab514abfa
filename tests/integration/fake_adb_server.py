#!/usr/bin/env python3
"""fake_adb_server.py: a tiny stand-in for an ADB server, for tests/integration/test_ws_adb.sh.

  fake_adb_server.py PORT_FILE LOG_FILE
Listens on 127.0.0.1 (a free port, written to PORT_FILE once listening) and answers adb's host
protocol (4 hex digits of length, then the request) on every connection:
  host:version      OKAY 0004 0029, then closes (as a real server does)
  host:tg-stream    OKAY, then an endless stream in which byte i is (i * 7 + 3) & 0xff, until
                    the peer goes; LOG_FILE gets "stream blocked after N bytes" each time the
                    socket stops taking bytes (its buffer is full: nobody reads), and "stream
                    ended after N bytes" at the end
  anything else     FAIL with a message
Runs until killed. Not installed.
"""
import select
import socket
import sys
import threading


def serve(conn, log):
    try:
        hdr = b""
        while len(hdr) < 4:
            chunk = conn.recv(4 - len(hdr))
            if not chunk:
                return
            hdr += chunk
        n = int(hdr, 16)
        req = b""
        while len(req) < n:
            chunk = conn.recv(n - len(req))
            if not chunk:
                return
            req += chunk
        req = req.decode()
        if req == "host:version":
            conn.sendall(b"OKAY00040029")
        elif req == "host:tg-stream":
            conn.sendall(b"OKAY")
            conn.setblocking(False)
            block = bytes(((i * 7 + 3) & 0xFF) for i in range(256 * 1024))
            sent = 0
            try:
                while True:
                    # the block is a whole number of 256-byte periods, so offsets line up
                    off = 0
                    while off < len(block):
                        try:
                            off += conn.send(block[off:])
                        except BlockingIOError:
                            with open(log, "a") as f:
                                f.write("stream blocked after %d bytes\n" % (sent + off))
                            select.select([], [conn], [])  # until the peer reads again (or goes)
                    sent += len(block)
            except OSError:
                with open(log, "a") as f:
                    f.write("stream ended after %d bytes\n" % sent)
        else:
            msg = ("unknown request " + req).encode()
            conn.sendall(b"FAIL%04x" % len(msg) + msg)
    except (OSError, ValueError):
        pass
    finally:
        conn.close()


def main():
    port_file, log = sys.argv[1], sys.argv[2]
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", 0))
    srv.listen(16)
    with open(port_file + ".tmp", "w") as f:
        f.write("%d\n" % srv.getsockname()[1])
    import os
    os.rename(port_file + ".tmp", port_file)
    while True:
        conn, _ = srv.accept()
        threading.Thread(target=serve, args=(conn, log), daemon=True).start()


if __name__ == "__main__":
    main()
