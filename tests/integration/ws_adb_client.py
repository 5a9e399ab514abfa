#!/usr/bin/env python3
"""ws_adb_client.py: a WebSocket client speaking adb's host protocol, for tests/integration/test_ws_adb.sh.

Python standard library only (RFC 6455 client framing, masked). It talks to /adb as the Perfetto UI
does: each ADB request goes out as one text message ("000chost:version"), replies come back as
binary messages. Not installed.

  ws_adb_client.py [--origin O] [--token T] [--rcvbuf N] PORT PATH request SERVICE
      upgrade, send SERVICE, print "OKAY <payload>" or "FAIL <message>" (payload = the
      4-hex-length-prefixed answer), then wait for the server's close: "close CODE REASON".
  ws_adb_client.py ... PORT PATH upgrade
      print the HTTP status of the upgrade ("101", or "403 <body>"), then for a 101 wait for
      the close and print "close CODE REASON".
  ws_adb_client.py ... PORT PATH stream SERVICE --first N --ready-file F --hold-until G --then M
      send SERVICE, expect OKAY, read N bytes of the fake server's pattern (byte i is
      (i * 7 + 3) & 0xff), create F, stop reading until G exists, then read M more bytes;
      print "stream ok N+M bytes". Any byte out of pattern is an error.
Exit 0 when the exchange went as described, 1 otherwise (with a message on stderr). Deadlines are
safety nets, multiplied by $TG_TEST_TIMEOUT_SCALE (default 4).
"""
import base64
import os
import socket
import struct
import sys
import time

SCALE = float(os.environ.get("TG_TEST_TIMEOUT_SCALE", "4") or "4")
DEADLINE = 20 * SCALE


def die(msg):
    sys.stderr.write("ws_adb_client: %s\n" % msg)
    sys.exit(1)


class WS:
    def __init__(self, port, path, origin, token, rcvbuf):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if rcvbuf:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        self.sock.settimeout(DEADLINE)
        self.sock.connect(("127.0.0.1", port))
        key = base64.b64encode(os.urandom(16)).decode()
        lines = ["GET %s HTTP/1.1" % path, "Host: 127.0.0.1:%d" % port, "Upgrade: websocket",
                 "Connection: Upgrade", "Sec-WebSocket-Key: " + key, "Sec-WebSocket-Version: 13"]
        if origin:
            lines.append("Origin: " + origin)
        if token:
            lines.append("Sec-WebSocket-Protocol: tracegate, tracegate.token." + token)
        self.sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        self.buf = b""
        while b"\r\n\r\n" not in self.buf:
            chunk = self.sock.recv(4096)
            if not chunk:
                break
            self.buf += chunk
        head, _, rest = self.buf.partition(b"\r\n\r\n")
        self.status = int(head.split(b" ", 2)[1]) if head.startswith(b"HTTP/") else 0
        if self.status != 101:  # a refusal: read its whole body
            want = None
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    want = int(line.split(b":", 1)[1])
            while want is None or len(rest) < want:
                chunk = self.sock.recv(4096)
                if not chunk:
                    break
                rest += chunk
        self.body = rest
        self.buf = rest if self.status == 101 else b""
        self.data = b""   # payload bytes received so far, not yet consumed
        self.closed = None  # (code, reason) once the server's close frame came

    def send_text(self, text):
        payload = text.encode()
        mask = os.urandom(4)
        n = len(payload)
        hdr = bytes([0x81])
        if n < 126:
            hdr += bytes([0x80 | n])
        elif n < 65536:
            hdr += bytes([0x80 | 126]) + struct.pack(">H", n)
        else:
            hdr += bytes([0x80 | 127]) + struct.pack(">Q", n)
        masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        self.sock.sendall(hdr + mask + masked)

    def _need(self, n):
        while len(self.buf) < n:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise EOFError("connection closed without a close frame")
            self.buf += chunk

    def read_frame(self):
        """Reads one frame; data frames append to self.data; returns False once closed."""
        self._need(2)
        b0, b1 = self.buf[0], self.buf[1]
        n = b1 & 0x7F
        off = 2
        if n == 126:
            self._need(4)
            n = struct.unpack(">H", self.buf[2:4])[0]
            off = 4
        elif n == 127:
            self._need(10)
            n = struct.unpack(">Q", self.buf[2:10])[0]
            off = 10
        if b1 & 0x80:
            die("the server masked a frame")
        self._need(off + n)
        payload = self.buf[off:off + n]
        self.buf = self.buf[off + n:]
        op = b0 & 0x0F
        if op in (0x0, 0x2):
            self.data += payload
        elif op == 0x1:
            die("the server sent a text message (the UI expects binary)")
        elif op == 0x8:
            code = struct.unpack(">H", payload[:2])[0] if len(payload) >= 2 else 1005
            self.closed = (code, payload[2:].decode(errors="replace"))
            return False
        elif op == 0x9:
            mask = os.urandom(4)
            self.sock.sendall(bytes([0x8A, 0x80 | len(payload)]) + mask +
                              bytes(b ^ mask[i % 4] for i, b in enumerate(payload)))
        return True

    def take(self, n):
        while len(self.data) < n:
            if not self.read_frame():
                raise EOFError("closed (%d %s) after %d of %d bytes" % (self.closed + (len(self.data), n)))
        out, self.data = self.data[:n], self.data[n:]
        return out

    def wait_close(self):
        try:
            while self.read_frame():
                pass
        except (EOFError, OSError) as e:
            return "no close frame (%s)" % e
        return "close %d %s" % self.closed


def adb_request(ws, service):
    ws.send_text("%04x%s" % (len(service), service))
    status = ws.take(4).decode(errors="replace")
    if status not in ("OKAY", "FAIL"):
        die("unexpected ADB status %r" % status)
    return status


def main():
    args = sys.argv[1:]
    opts = {"--origin": None, "--token": None, "--rcvbuf": None, "--first": "0", "--then": "0",
            "--ready-file": None, "--hold-until": None}
    pos = []
    i = 0
    while i < len(args):
        if args[i] in opts:
            opts[args[i]] = args[i + 1]
            i += 2
        else:
            pos.append(args[i])
            i += 1
    if len(pos) < 3:
        die("usage: see the comment at the top")
    port, path, cmd = int(pos[0]), pos[1], pos[2]
    try:
        ws = WS(port, path, opts["--origin"], opts["--token"], int(opts["--rcvbuf"] or 0))
    except OSError as e:
        die("cannot connect: %s" % e)
    if cmd == "upgrade":
        if ws.status != 101:
            print("%d %s" % (ws.status, ws.body.decode(errors="replace").strip()))
            return 0
        print("101")
        print(ws.wait_close())
        return 0
    if ws.status != 101:
        die("upgrade refused: %d %s" % (ws.status, ws.body.decode(errors="replace").strip()))
    if cmd == "request":
        try:
            status = adb_request(ws, pos[3])
            n = int(ws.take(4).decode(), 16)
            payload = ws.take(n).decode(errors="replace")
        except (EOFError, OSError, ValueError) as e:
            print("error %s" % e)
            print(ws.wait_close() if ws.closed is None else "close %d %s" % ws.closed)
            return 1
        print("%s %s" % (status, payload.replace("\n", "\\n")))
        print(ws.wait_close())
        return 0
    if cmd == "stream":
        first, then = int(opts["--first"]), int(opts["--then"])
        try:
            if adb_request(ws, pos[3]) != "OKAY":
                die("the stream was refused")
            pos_in_stream = 0

            def check(n):
                nonlocal pos_in_stream
                got = ws.take(n)
                for k, b in enumerate(got):
                    if b != ((pos_in_stream + k) * 7 + 3) & 0xFF:
                        die("byte %d of the stream is wrong" % (pos_in_stream + k))
                pos_in_stream += n
            check(first)
            with open(opts["--ready-file"], "w"):
                pass
            end = time.time() + 10 * DEADLINE
            while not os.path.exists(opts["--hold-until"]):
                if time.time() > end:
                    die("nobody released the stream")
                time.sleep(0.05)
            check(then)
        except (EOFError, OSError) as e:
            die("stream broke: %s" % e)
        print("stream ok %d bytes" % (first + then))
        return 0
    die("unknown command %s" % cmd)


if __name__ == "__main__":
    sys.exit(main())
