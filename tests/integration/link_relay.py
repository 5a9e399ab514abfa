#!/usr/bin/env python3
"""link_relay.py: a TCP relay for the gateway-link integration tests (test_link_resume.sh).

Sits between two tracegated nodes (the dialer connects to the relay, the relay connects to the
acceptor) and does what a bad network would, on command:

  link_relay.py --target HOST:PORT|unix:PATH --ctl FIFO [--listen HOST:PORT] [--delay-ms N]

It prints `relay: listening on HOST:PORT` once it accepts, then one line per event (flushed), so
the tests wait for its lines instead of sleeping. Commands, one per line written to the FIFO:

  cut            close every relayed connection at once (abortive close: RST, as a broken path)
                 and refuse new ones (accepted and closed at once) until `allow`
  cut-after N    forward N more bytes from the target to the client, then `cut` (a cut in the
                 middle of a transfer: some bytes in flight are lost)
  allow          accept and relay new connections again
  hold-after N   forward N more bytes from the target to the client, then stop reading from the
                 target (to the target, the client stopped reading; to the client, the target
                 went quiet) until `release`
  release        read from the target again
  delay MS       hold every chunk MS milliseconds before forwarding it (both directions, order kept)
  stall MS       stop forwarding for MS milliseconds, then go on (TCP never loses bytes: a lossy
                 path shows as stalls and retransmission delays)
  quit           exit

Every command is answered with a line `relay: done CMD ...` once it has taken effect.
"""
import argparse
import asyncio
import os
import socket
import struct
import sys


def log(msg):
    sys.stdout.write("relay: " + msg + "\n")
    sys.stdout.flush()


def split_hostport(s):
    host, _, port = s.rpartition(":")
    return host.strip("[]"), int(port)


class Relay:
    def __init__(self, target, delay_ms):
        self.target = target
        self.delay = delay_ms / 1000.0
        self.refusing = False
        self.conns = set()  # (client_writer, upstream_writer)
        self.cut_after = None  # bytes target->client left before a cut
        self.hold_after = None  # bytes target->client left before a hold
        self.flowing = asyncio.Event()
        self.flowing.set()
        self.stall_until = 0.0
        self.n = 0
        self.bytes = [0, 0]  # client->target, target->client

    def abort(self, writer):
        sock = writer.get_extra_info("socket")
        if sock is not None:
            try:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            except OSError:
                pass
        writer.transport.abort()

    def cut(self, why):
        self.refusing = True
        self.cut_after = None
        n = len(self.conns)
        for cw, uw in list(self.conns):
            self.abort(cw)
            self.abort(uw)
        self.conns.clear()
        log("cut (%s): closed %d connection(s), refusing new ones" % (why, n))
        return n

    async def pipe(self, reader, writer, direction, pair):
        loop = asyncio.get_running_loop()
        try:
            while True:
                if direction == 1:
                    await self.flowing.wait()
                data = await reader.read(65536 if direction == 0 or self.hold_after is None else max(1, self.hold_after))
                if not data:
                    break
                now = loop.time()
                if self.stall_until > now:
                    await asyncio.sleep(self.stall_until - now)
                if self.delay:
                    await asyncio.sleep(self.delay)
                if pair not in self.conns:
                    break
                if direction == 1 and self.cut_after is not None:
                    if len(data) >= self.cut_after:
                        writer.write(data[: self.cut_after])
                        self.bytes[1] += self.cut_after
                        self.cut("after the armed byte count")
                        break
                    self.cut_after -= len(data)
                if direction == 1 and self.hold_after is not None:
                    self.hold_after -= len(data)
                    if self.hold_after <= 0:
                        self.hold_after = None
                        self.flowing.clear()
                        log("holding: no longer reading from the target (%d bytes down so far)" % (self.bytes[1] + len(data)))
                writer.write(data)
                self.bytes[direction] += len(data)
                await writer.drain()
        except (ConnectionError, OSError, asyncio.CancelledError):
            pass
        if pair in self.conns:
            # a clean end on one side: pass it on as a half close
            try:
                if writer.can_write_eof():
                    writer.write_eof()
            except (ConnectionError, OSError):
                pass

    async def handle(self, creader, cwriter):
        if self.refusing:
            self.abort(cwriter)
            log("refused a connection")
            return
        try:
            if isinstance(self.target, str):
                ureader, uwriter = await asyncio.open_unix_connection(self.target)
            else:
                ureader, uwriter = await asyncio.open_connection(*self.target)
        except OSError as e:
            log("cannot reach the target: %s" % e)
            self.abort(cwriter)
            return
        self.n += 1
        num = self.n
        pair = (cwriter, uwriter)
        self.conns.add(pair)
        log("connection %d open" % num)
        await asyncio.gather(
            self.pipe(creader, uwriter, 0, pair), self.pipe(ureader, cwriter, 1, pair)
        )
        if pair in self.conns:
            self.conns.discard(pair)
            cwriter.close()
            uwriter.close()
            log("connection %d closed" % num)

    async def control(self, path):
        loop = asyncio.get_running_loop()
        # O_RDWR: the FIFO never reports end-of-file when a writer goes away
        fd = os.open(path, os.O_RDWR | os.O_NONBLOCK)
        reader = asyncio.StreamReader()
        await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(fd, "rb", buffering=0)
        )
        while True:
            line = (await reader.readline()).decode().strip()
            if not line:
                continue
            words = line.split()
            cmd, arg = words[0], (words[1] if len(words) > 1 else None)
            if cmd == "cut":
                n = self.cut("on command")
                log("done cut %d" % n)
            elif cmd == "cut-after" and arg:
                self.cut_after = int(arg)
                log("done cut-after %s (bytes so far: %d up, %d down)" % (arg, self.bytes[0], self.bytes[1]))
            elif cmd == "hold-after" and arg:
                self.hold_after = int(arg)
                log("done hold-after %s (bytes so far: %d up, %d down)" % (arg, self.bytes[0], self.bytes[1]))
            elif cmd == "release":
                self.hold_after = None
                self.flowing.set()
                log("done release")
            elif cmd == "allow":
                self.refusing = False
                log("done allow")
            elif cmd == "delay" and arg:
                self.delay = int(arg) / 1000.0
                log("done delay %s" % arg)
            elif cmd == "stall" and arg:
                self.stall_until = loop.time() + int(arg) / 1000.0
                log("done stall %s" % arg)
            elif cmd == "quit":
                log("done quit")
                os._exit(0)
            else:
                log("unknown command: %s" % line)


async def main():
    ap = argparse.ArgumentParser(description="TCP relay for the link tests")
    ap.add_argument("--listen", default="127.0.0.1:0")
    ap.add_argument("--target", required=True)
    ap.add_argument("--ctl", required=True, help="a FIFO to read commands from (created if missing)")
    ap.add_argument("--delay-ms", type=int, default=0)
    a = ap.parse_args()
    if not os.path.exists(a.ctl):
        os.mkfifo(a.ctl, 0o600)
    target = a.target[5:] if a.target.startswith("unix:") else split_hostport(a.target)
    r = Relay(target, a.delay_ms)
    host, port = split_hostport(a.listen)
    server = await asyncio.start_server(r.handle, host, port)
    addr = server.sockets[0].getsockname()
    asyncio.get_running_loop().create_task(r.control(a.ctl))
    log("listening on %s:%d" % (addr[0], addr[1]))
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        pass
